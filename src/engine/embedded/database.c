/* Opening and closing an embedded database: the directory, the marker, the commit lock, the
 * storage (store.h) and the engine's shared files; and the engine's table of operations. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emb.h"
#include "files.h"
#include "logstore/store_log.h"

/* The marker's format: the database is complete. Each storage numbers its own layout. */
#define MARKER_TEXT "kvq database\nformat 1\n"

static int write_marker(const char *dir, unsigned int mode)
{
    char *tmp = emb_path_join(dir, "kvq.marker.tmp");
    char *dst = emb_path_join(dir, "kvq.marker");
    int rc = 0;
    if (tmp == NULL || dst == NULL) {
        rc = kvq__error(KVQ_ENOMEM, "out of memory");
        goto out;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) {
        rc = emb_errno_error(errno, "cannot create", tmp);
        goto out;
    }
    size_t n = sizeof(MARKER_TEXT) - 1;
    if (write(fd, MARKER_TEXT, n) != (ssize_t)n || fsync(fd) != 0) {
        rc = emb_errno_error(errno, "cannot write", tmp);
        close(fd);
        goto out;
    }
    close(fd);
    if (rename(tmp, dst) != 0) {
        rc = emb_errno_error(errno, "cannot rename", tmp);
        goto out;
    }
    rc = emb_fsync_dir(dir);
out:
    kvq__free(tmp);
    kvq__free(dst);
    return rc;
}

static int check_marker(const char *dir, int *exists)
{
    char *p = emb_path_join(dir, "kvq.marker");
    if (p == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    int rc = 0;
    *exists = 0;
    if (fd < 0) {
        if (errno != ENOENT)
            rc = emb_errno_error(errno, "cannot open", p);
    } else {
        char buf[64] = { 0 };
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        *exists = 1;
        if (n < 0 || strncmp(buf, "kvq database\n", 13) != 0)
            rc = kvq__error(KVQ_EDAMAGED, "%s is not a kvq marker: the database is damaged", p);
        else if (strcmp(buf, MARKER_TEXT) != 0)
            rc = kvq__error(KVQ_EDAMAGED, "%s names a format this kvq does not know", p);
    }
    kvq__free(p);
    return rc;
}

static int open_lock_file(emb_db *e)
{
    char *p = emb_path_join(e->dir, "kvq.lock");
    if (p == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    int flags = (e->opts.flags & KVQ_DB_READ_ONLY) ? O_RDONLY : (O_RDWR | O_CREAT);
    e->lock_fd = open(p, flags | O_CLOEXEC, e->opts.file_mode);
    int rc = e->lock_fd < 0 ? emb_errno_error(errno, "cannot open", p) : 0;
    kvq__free(p);
    return rc;
}

static void emb_close(void *ep);

/* Makes (or finds) the database directory; *created = 1 if this call made it. */
static int make_dir(const char *dir, const kvq__db_opts *opts, int *created)
{
    struct stat st;
    *created = 0;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT)
            return emb_errno_error(errno, "cannot access", dir);
        if (opts->flags & (KVQ_DB_NO_CREATE | KVQ_DB_READ_ONLY))
            return kvq__error(KVQ_ENOTFOUND, "no database at %s", dir);
        /* The directory gets execute bits wherever the files get read bits. */
        mode_t dmode = (mode_t)(opts->file_mode | ((opts->file_mode & 0444) >> 2));
        if (mkdir(dir, dmode) != 0 && errno != EEXIST)
            return emb_errno_error(errno, "cannot create the database directory", dir);
        *created = 1;
    } else if (!S_ISDIR(st.st_mode)) {
        return kvq__error(KVQ_EINVAL, "%s is not a directory (a kvq database is a directory)",
                          dir);
    }
    return 0;
}

/* Syncs the parent of a directory this open created, so that its entry is durable. */
static int sync_parent(const char *dir)
{
    char *parent = kvq__strdup(dir);
    if (parent == NULL)
        return 0;
    char *slash = strrchr(parent, '/');
    if (slash == NULL)
        strcpy(parent, ".");
    else if (slash == parent)
        slash[1] = '\0';
    else
        *slash = '\0';
    int rc = emb_fsync_dir(parent);
    kvq__free(parent);
    return rc;
}

/* Which storage a database uses. A directory that holds a database opens with the storage it
 * holds: the log store when it has a logstore/, else the SQLite storage. A new database is a log
 * store (the default) unless the URL says "sqlite:" or $KVQ_STORAGE is "sqlite": the older
 * storage, kept for the databases made with it and for its tests. A URL that names the other
 * storage of an existing database is refused: one storage is never opened as the other. */
static int pick_storage(emb_db *e, const char *dir, int marker, int want_sqlite, int url_kind)
{
    int has_log = kvq__logstore_present(dir);
    char *sq = emb_path_join(dir, "data.db");
    if (sq == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    struct stat st;
    int has_sqlite = stat(sq, &st) == 0;
    kvq__free(sq);
    if (has_log && has_sqlite)
        return kvq__error(KVQ_EDAMAGED, "%s holds both a SQLite and a log store database", dir);
    int is_sqlite = has_sqlite || (marker && !has_log);
    if (has_log || (!is_sqlite && !want_sqlite)) {
        if (url_kind == EMB_URL_SQLITE && has_log)
            return kvq__error(KVQ_EINVAL,
                              "%s is a database of the log store, not of the SQLite storage "
                              "(open it without \"sqlite:\")",
                              dir);
        e->so = &emb_log_store;
        return 0;
    }
    if (url_kind == EMB_URL_LOG && is_sqlite)
        return kvq__error(KVQ_EINVAL,
                          "%s is a database of the SQLite storage: it is not converted to the "
                          "log store (open it without \"log:\")",
                          dir);
    e->so = &emb_sqlite_store;
    return 0;
}

static int emb_open(void **out, kvq_db *db, const char *url, const kvq__db_opts *opts)
{
    /* "sqlite:DIR" asks for the SQLite storage (store_sqlite.c) for a new database, "log:DIR"
     * for the log store (logstore/store_log.c), the default. */
    int url_kind = emb_url_kind(url);
    const char *dir = emb_url_dir(url);
    const char *env = getenv("KVQ_STORAGE");
    int want_sqlite = url_kind == EMB_URL_SQLITE ||
                      (url_kind == EMB_URL_PLAIN && env != NULL && strcmp(env, "sqlite") == 0);
    if (dir[0] == '\0')
        return kvq__error(KVQ_EINVAL, "the database path is empty");
    emb_db *e = kvq__calloc(1, sizeof(*e));
    if (e == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    e->db = db;
    e->opts = *opts;
    e->so = &emb_sqlite_store;
    e->lock_fd = -1;
    e->shm_fd = -1;
    e->cq_fd = -1;
    e->cq_own = -1;

    pthread_mutex_init(&e->gc_mu, NULL);
    pthread_mutex_init(&e->watch_mu, NULL);
    pthread_mutex_init(&e->sync_mu, NULL);
    /* KVQ_TEST_ACK_BEFORE_SYNC is the test-only broken engine of the sync-order checker: it
     * stops syncing each commit while the handle still claims to be durable. */
    e->durable = !(opts->flags & KVQ_DB_RELAXED) && !(opts->test_flags & KVQ_TEST_ACK_BEFORE_SYNC);
    e->dir = kvq__strdup(dir);
    int rc = 0, created_dir = 0;
    if (e->dir == NULL) {
        rc = kvq__error(KVQ_ENOMEM, "out of memory");
        goto fail;
    }
    rc = make_dir(dir, opts, &created_dir);
    if (rc != 0)
        goto fail;
    /* A directory this open made, or found empty: a create that fails removes what it put
     * there (and the directory it made), so that no half-made database is left behind. */
    int fresh = created_dir || emb_dir_is_empty(dir);
    int marker = 0;
    rc = check_marker(dir, &marker);
    if (rc != 0)
        goto fail;
    if (!marker && (opts->flags & (KVQ_DB_NO_CREATE | KVQ_DB_READ_ONLY))) {
        rc = kvq__error(KVQ_ENOTFOUND, "no kvq database in %s", dir);
        goto fail;
    }
    rc = pick_storage(e, dir, marker, want_sqlite, url_kind);
    if (rc != 0)
        goto fail;
    rc = open_lock_file(e);
    if (rc != 0)
        goto fail;

    emb_store_config cfg = { .dir = dir, .opts = opts, .create = !marker, .durable = e->durable };
    if (!marker) {
        /* Create (or finish creating) the database. Creation is serialised by the commit lock
         * so that two processes creating one database at once do not race. */
        while (flock(e->lock_fd, LOCK_EX) != 0 && errno == EINTR) {
        }
        rc = e->so->open(&e->store, &cfg);
        if (rc == 0)
            rc = write_marker(dir, opts->file_mode);
        int marked = rc == 0;
        if (rc == 0 && created_dir)
            rc = sync_parent(dir);
        if (rc != 0 && !marked && fresh && !(opts->flags & KVQ_DB_READ_ONLY)) {
            /* Under the commit lock, and only while no marker exists: another process's
             * create that completed meanwhile is never undone. */
            int other = 0;
            if (check_marker(dir, &other) == 0 && !other) {
                if (e->store != NULL)
                    e->so->close(e->store);
                e->store = NULL;
                emb_dir_undo(dir, created_dir);
            }
        }
        flock(e->lock_fd, LOCK_UN);
    } else {
        rc = e->so->open(&e->store, &cfg);
        /* A full disk with the reserve in place: the storage may need room before anything
         * can be freed (SQLite creates its -wal and -shm files at open). The reserve exists
         * for exactly this: give it up, and open in drain mode. */
        if (rc == KVQ_ENOSPC && !(opts->flags & KVQ_DB_READ_ONLY) && emb_reserve_release(e))
            rc = e->so->open(&e->store, &cfg);
    }
    if (rc != 0)
        goto fail;
    rc = emb_shm_open(e);
    if (rc != 0)
        goto fail;
    emb_rv_clock_open(e);
    emb_cq_open(e);
    emb_reserve_open(e);
    *out = e;
    return 0;
fail:
    emb_close(e);
    if (created_dir)
        (void)rmdir(dir); /* a directory this open made and left empty (a lock file refused) */
    return rc;
}

static void emb_close(void *ep)
{
    emb_db *e = ep;
    if (e == NULL)
        return;
    emb_watch_shutdown(e);
    if (e->store != NULL)
        e->so->close(e->store);
    emb_shm_close(e);
    if (e->lock_fd >= 0)
        close(e->lock_fd);
    pthread_mutex_destroy(&e->gc_mu);
    pthread_mutex_destroy(&e->watch_mu);
    emb_cq_close(e);
    pthread_mutex_destroy(&e->sync_mu);
    kvq__free(e->dir);
    kvq__free(e);
}

/* The engine table, with the transaction operations from txn.c and commit.c. */
const kvq__engine_ops kvq__embedded_ops = {
    .version = KVQ__ENGINE_OPS_VERSION,
    .name = "embedded",
    .open = emb_open,
    .close = emb_close,
    .txn_create = emb_txn_create,
    .txn_destroy = emb_txn_destroy,
    .txn_reset = emb_txn_reset,
    .get = emb_get,
    .get_range = emb_get_range,
    .set = emb_set,
    .clear_range = emb_clear_range,
    .atomic_op = emb_atomic_op,
    .add_conflict_range = emb_add_conflict_range,
    .get_read_version = emb_get_read_version,
    .commit = emb_commit,
    .get_committed_version = emb_get_committed_version,
    .get_versionstamp = emb_get_versionstamp,
    .set_read_version = emb_set_read_version,
    .get_approximate_size = emb_get_approximate_size,
    .set_option = emb_set_option,
    .watch = emb_watch_create,
    .watch_release = emb_watch_release,
};
