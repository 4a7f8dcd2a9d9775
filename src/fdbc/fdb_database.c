/* libkvq_fdb_c.so: databases (FDBDatabase): the cluster file, the kvq directory it names,
 * transactions' creation; the management, tenant and blob-granule calls a kvq directory does not
 * have. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fdbc/fdbc_internal.h"

/* The directory a connection string names: $KVQ_FDBC_DIR when set, else the string
 * `kvq:<directory>`. */
fdb_error_t kvq__fdbc_dir_of(const char *line, char *dir, size_t cap)
{
    const char *env = getenv("KVQ_FDBC_DIR");
    const char *d = NULL;
    if (env != NULL && env[0] != '\0')
        d = env;
    else if (strncmp(line, "kvq:", 4) == 0 && line[4] != '\0')
        d = line + 4;
    if (d == NULL || strlen(d) >= cap) {
        kvq__fdbc_complain(
            "no kvq directory: write `kvq:<directory>` as the cluster file's first line "
            "(or set $KVQ_FDBC_DIR)");
        return FDB_ERR_CONNECTION_STRING_INVALID;
    }
    memcpy(dir, d, strlen(d) + 1);
    return 0;
}

/* Creates the directories above `dir` that are missing (as mkdir -p; kvq_db_open creates
 * `dir` itself). 0, or the FoundationDB error for the directory that could not be made. */
static fdb_error_t make_parents(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s", dir);
    for (char *p = path + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            int e = errno;
            kvq__fdbc_complain("cannot create the directory %s: %s", path, strerror(e));
            return e == EACCES || e == EPERM || e == EROFS ? 1514 /* file_not_writable */
                   : e == ENOSPC || e == EIO              ? 1510 /* io_error */
                                                          : FDB_ERR_FILE_NOT_FOUND;
        }
        *p = '/';
    }
    return 0;
}

/* Opens the database a connection string names; cluster_file is the file it came from. */
static fdb_error_t db_open(const char *conn, const char *cluster_file, FDBDatabase **out_database)
{
    *out_database = NULL;
    pthread_mutex_lock(&kvq__fdbc_net.mu);
    fdb_error_t err = kvq__fdbc_net.api == 0 ? FDB_ERR_API_VERSION_UNSET
                      : !kvq__fdbc_net.setup ? FDB_ERR_NETWORK_NOT_SETUP
                                             : 0;
    pthread_mutex_unlock(&kvq__fdbc_net.mu);
    if (err != 0)
        return err;
    char dir[4096];
    err = kvq__fdbc_dir_of(conn, dir, sizeof(dir));
    if (err == 0)
        err = make_parents(dir);
    if (err != 0)
        return err;
    FDBDatabase *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return FDB_ERR_INTERNAL_ERROR;
    d->conn = strdup(conn);
    d->cluster_file = strdup(cluster_file);
    if (d->conn == NULL || d->cluster_file == NULL) {
        free(d->conn);
        free(d->cluster_file);
        free(d);
        return FDB_ERR_INTERNAL_ERROR;
    }
    /* FoundationDB's transactions retry without limit unless told otherwise (retry_limit -1),
     * and have no timeout: kvq's defaults for its own retry loop (100 retries) do not apply. */
    kvq_db_options opts = KVQ_DB_OPTIONS_INIT;
    opts.retry_limit = -1;
    opts.timeout_ms = 0;
    int rc = kvq_db_open(&d->kdb, dir, &opts);
    if (rc != 0) {
        kvq__fdbc_complain("cannot open the embedded database %s: %s", dir, kvq_last_error());
        free(d->conn);
        free(d->cluster_file);
        free(d);
        return kvq__fdbc_fdb_code(rc);
    }
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cond, NULL);
    d->refs = 1;
    *out_database = d;
    return 0;
}

/* The cluster file libfdb_c reads when none is named (ClusterConnectionFile's lookup): the one
 * $FDB_CLUSTER_FILE names (that one only, whether it exists or not), else fdb.cluster in the
 * working directory, else /etc/foundationdb/fdb.cluster. */
static const char *default_cluster_file(void)
{
    const char *env = getenv("FDB_CLUSTER_FILE");
    if (env != NULL)
        return env;
    struct stat st;
    if (stat("fdb.cluster", &st) == 0 && !S_ISDIR(st.st_mode))
        return "fdb.cluster";
    return "/etc/foundationdb/fdb.cluster";
}

/* The cluster file's first line is the connection string. The file must exist, as for libfdb_c
 * (no_cluster_file_found, 1515; file_not_readable, 1513, when it cannot be read), except that
 * without a named file $KVQ_FDBC_DIR alone may name the directory. */
fdb_error_t fdb_create_database(const char *cluster_file_path, FDBDatabase **out_database)
{
    if (out_database == NULL)
        kvq__fdbc_misuse("fdb_create_database with a NULL out_database");
    *out_database = NULL;
    int named = cluster_file_path != NULL && cluster_file_path[0] != '\0';
    const char *file = named ? cluster_file_path : default_cluster_file();
    char line[4096] = "";
    char path[4096] = "";
    FILE *fp = file[0] != '\0' ? fopen(file, "r") : NULL;
    if (fp == NULL) {
        int e = file[0] != '\0' ? errno : ENOENT;
        const char *env = getenv("KVQ_FDBC_DIR");
        if (!named && env != NULL && env[0] != '\0')
            return db_open("", "", out_database);
        kvq__fdbc_complain("cannot read the cluster file %s: %s", file[0] != '\0' ? file : "(none)",
                           strerror(e));
        return e == ENOENT ? 1515 /* no_cluster_file_found */ : 1513 /* file_not_readable */;
    }
    if (fgets(line, sizeof(line), fp) == NULL)
        line[0] = '\0';
    fclose(fp);
    line[strcspn(line, "\r\n")] = '\0';
    if (realpath(file, path) == NULL)
        snprintf(path, sizeof(path), "%s", file);
    return db_open(line, path, out_database);
}

fdb_error_t fdb_create_database_from_connection_string(const char *connection_string,
                                                       FDBDatabase **out_database)
{
    if (connection_string == NULL || out_database == NULL)
        kvq__fdbc_misuse("fdb_create_database_from_connection_string with a NULL argument");
    return db_open(connection_string, "", out_database);
}

/* Drops a reference; the last one cancels the watches still waiting, waits for their threads
 * and closes the embedded database. */
void kvq__fdbc_db_unref(FDBDatabase *d)
{
    pthread_mutex_lock(&d->mu);
    if (--d->refs > 0) {
        pthread_mutex_unlock(&d->mu);
        return;
    }
    for (FDBFuture *f = d->watches; f != NULL; f = f->wnext) {
        pthread_mutex_lock(&f->mu);
        f->cancelled = 1;
        if (f->kw != NULL)
            kvq_watch_cancel(f->kw);
        pthread_mutex_unlock(&f->mu);
    }
    while (d->watch_threads > 0)
        pthread_cond_wait(&d->cond, &d->mu);
    pthread_mutex_unlock(&d->mu);
    kvq_db_close(d->kdb);
    free(d->conn);
    free(d->cluster_file);
    pthread_cond_destroy(&d->cond);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

void fdb_database_destroy(FDBDatabase *d)
{
    /* Transactions keep the database alive, as in libfdb_c. */
    kvq__fdbc_db_unref(d);
}

static FDBFuture *no_tenants(void)
{
    return kvq__fdbc_fut_error(FUT_NONE, KVQ_ETENANTS_DISABLED);
}

fdb_error_t fdb_database_open_tenant(FDBDatabase *d, const uint8_t *tenant_name,
                                     int tenant_name_length, FDBTenant **out_tenant)
{
    (void)d;
    (void)tenant_name;
    (void)tenant_name_length;
    *out_tenant = NULL;
    return KVQ_ETENANTS_DISABLED;
}

FDBFuture *fdb_database_reboot_worker(FDBDatabase *db, const uint8_t *address, int address_length,
                                      fdb_bool_t check, int duration)
{
    (void)db;
    (void)address;
    (void)address_length;
    (void)check;
    (void)duration;
    return kvq__fdbc_unsupported("fdb_database_reboot_worker");
}

FDBFuture *fdb_database_force_recovery_with_data_loss(FDBDatabase *db, const uint8_t *dcid,
                                                      int dcid_length)
{
    (void)db;
    (void)dcid;
    (void)dcid_length;
    return kvq__fdbc_unsupported("fdb_database_force_recovery_with_data_loss");
}

FDBFuture *fdb_database_create_snapshot(FDBDatabase *db, const uint8_t *uid, int uid_length,
                                        const uint8_t *snap_command, int snap_command_length)
{
    (void)db;
    (void)uid;
    (void)uid_length;
    (void)snap_command;
    (void)snap_command_length;
    return kvq__fdbc_unsupported("fdb_database_create_snapshot");
}

/* No network thread does any work here: it is never busy. */
double fdb_database_get_main_thread_busyness(FDBDatabase *db)
{
    (void)db;
    return 0.0;
}

FDBFuture *fdb_database_get_server_protocol(FDBDatabase *db, uint64_t expected_version)
{
    (void)db;
    (void)expected_version;
    return kvq__fdbc_unsupported("fdb_database_get_server_protocol");
}

FDBFuture *fdb_database_purge_blob_granules(FDBDatabase *db, const uint8_t *b, int bl,
                                            const uint8_t *e, int el, int64_t purge_version,
                                            fdb_bool_t force)
{
    (void)db, (void)b, (void)bl, (void)e, (void)el, (void)purge_version, (void)force;
    return kvq__fdbc_unsupported("fdb_database_purge_blob_granules");
}

FDBFuture *fdb_database_wait_purge_granules_complete(FDBDatabase *db, const uint8_t *k, int kl)
{
    (void)db, (void)k, (void)kl;
    return kvq__fdbc_unsupported("fdb_database_wait_purge_granules_complete");
}

FDBFuture *fdb_database_blobbify_range(FDBDatabase *db, const uint8_t *b, int bl,
                                       const uint8_t *e, int el)
{
    (void)db, (void)b, (void)bl, (void)e, (void)el;
    return kvq__fdbc_unsupported("fdb_database_blobbify_range");
}

FDBFuture *fdb_database_blobbify_range_blocking(FDBDatabase *db, const uint8_t *b, int bl,
                                                const uint8_t *e, int el)
{
    (void)db, (void)b, (void)bl, (void)e, (void)el;
    return kvq__fdbc_unsupported("fdb_database_blobbify_range_blocking");
}

FDBFuture *fdb_database_unblobbify_range(FDBDatabase *db, const uint8_t *b, int bl,
                                         const uint8_t *e, int el)
{
    (void)db, (void)b, (void)bl, (void)e, (void)el;
    return kvq__fdbc_unsupported("fdb_database_unblobbify_range");
}

FDBFuture *fdb_database_list_blobbified_ranges(FDBDatabase *db, const uint8_t *b, int bl,
                                               const uint8_t *e, int el, int range_limit)
{
    (void)db, (void)b, (void)bl, (void)e, (void)el, (void)range_limit;
    return kvq__fdbc_unsupported("fdb_database_list_blobbified_ranges");
}

FDBFuture *fdb_database_verify_blob_range(FDBDatabase *db, const uint8_t *b, int bl,
                                          const uint8_t *e, int el, int64_t version)
{
    (void)db, (void)b, (void)bl, (void)e, (void)el, (void)version;
    return kvq__fdbc_unsupported("fdb_database_verify_blob_range");
}

FDBFuture *fdb_database_flush_blob_range(FDBDatabase *db, const uint8_t *b, int bl,
                                         const uint8_t *e, int el, fdb_bool_t compact,
                                         int64_t version)
{
    (void)db, (void)b, (void)bl, (void)e, (void)el, (void)compact, (void)version;
    return kvq__fdbc_unsupported("fdb_database_flush_blob_range");
}

FDBFuture *fdb_database_get_client_status(FDBDatabase *db)
{
    (void)db;
    return kvq__fdbc_unsupported("fdb_database_get_client_status");
}

/* fdb_database_open_tenant never hands out a tenant, so these only answer that tenants are
 * disabled (a NULL tenant is accepted by fdb_tenant_destroy). */
fdb_error_t fdb_tenant_create_transaction(FDBTenant *tenant, FDBTransaction **out_transaction)
{
    (void)tenant;
    *out_transaction = NULL;
    return KVQ_ETENANTS_DISABLED;
}

FDBFuture *fdb_tenant_purge_blob_granules(FDBTenant *t, const uint8_t *b, int bl,
                                          const uint8_t *e, int el, int64_t purge_version,
                                          fdb_bool_t force)
{
    (void)t, (void)b, (void)bl, (void)e, (void)el, (void)purge_version, (void)force;
    return no_tenants();
}

FDBFuture *fdb_tenant_wait_purge_granules_complete(FDBTenant *t, const uint8_t *k, int kl)
{
    (void)t, (void)k, (void)kl;
    return no_tenants();
}

FDBFuture *fdb_tenant_blobbify_range(FDBTenant *t, const uint8_t *b, int bl, const uint8_t *e,
                                     int el)
{
    (void)t, (void)b, (void)bl, (void)e, (void)el;
    return no_tenants();
}

FDBFuture *fdb_tenant_blobbify_range_blocking(FDBTenant *t, const uint8_t *b, int bl,
                                              const uint8_t *e, int el)
{
    (void)t, (void)b, (void)bl, (void)e, (void)el;
    return no_tenants();
}

FDBFuture *fdb_tenant_unblobbify_range(FDBTenant *t, const uint8_t *b, int bl, const uint8_t *e,
                                       int el)
{
    (void)t, (void)b, (void)bl, (void)e, (void)el;
    return no_tenants();
}

FDBFuture *fdb_tenant_list_blobbified_ranges(FDBTenant *t, const uint8_t *b, int bl,
                                             const uint8_t *e, int el, int range_limit)
{
    (void)t, (void)b, (void)bl, (void)e, (void)el, (void)range_limit;
    return no_tenants();
}

FDBFuture *fdb_tenant_verify_blob_range(FDBTenant *t, const uint8_t *b, int bl, const uint8_t *e,
                                        int el, int64_t version)
{
    (void)t, (void)b, (void)bl, (void)e, (void)el, (void)version;
    return no_tenants();
}

FDBFuture *fdb_tenant_flush_blob_range(FDBTenant *t, const uint8_t *b, int bl, const uint8_t *e,
                                       int el, fdb_bool_t compact, int64_t version)
{
    (void)t, (void)b, (void)bl, (void)e, (void)el, (void)compact, (void)version;
    return no_tenants();
}

FDBFuture *fdb_tenant_get_id(FDBTenant *t)
{
    (void)t;
    return no_tenants();
}

void fdb_tenant_destroy(FDBTenant *t)
{
    if (t != NULL)
        kvq__fdbc_misuse("fdb_tenant_destroy of a tenant this library never made");
}
