/* Helpers every command shares: opening the database, the queue NAME argument, and opening a
 * named queue (or its work queue) with the messages and exit codes of a missing one. */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/qops.h"

/* The directory of an embedded database URL (the default one for NULL), as the engine takes it:
 * without "log:" or "sqlite:"; NULL for fdb:. */
static const char *embedded_dir(const char *url)
{
    if (url == NULL)
        url = getenv("KVQ_DB");
    if (url == NULL)
        url = "./kvq-data";
    if (strncmp(url, "fdb:", 4) == 0)
        return NULL;
    if (strncmp(url, "log:", 4) == 0)
        url += 4;
    else if (strncmp(url, "sqlite:", 7) == 0)
        url += 7;
    return url;
}

/* Whether the embedded database path (the default one for NULL) exists and is not a directory. */
static int path_not_dir(const char *url)
{
    const char *dir = embedded_dir(url);
    struct stat st;
    return dir != NULL && stat(dir, &st) == 0 && !S_ISDIR(st.st_mode);
}

/* Whether the embedded database path holds a non-empty data.db although the engine found no kvq
 * database there (its marker is missing): that is damage, or another program's file, not an
 * empty directory. */
static int stray_data_file(const char *url)
{
    const char *dir = embedded_dir(url);
    if (dir == NULL)
        return 0;
    char path[4200];
    snprintf(path, sizeof(path), "%s/data.db", dir);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

/* Which storage the messages of a full disk speak of: the SQLite storage when the directory holds
 * a database of it, or when a new database is made with "sqlite:" or $KVQ_STORAGE=sqlite; else
 * the log store, the default. */
static int storage_of(const char *url)
{
    const char *dir = embedded_dir(url);
    if (dir == NULL)
        return CLI_STORAGE_NONE;
    char path[4200];
    snprintf(path, sizeof(path), "%s/logstore", dir);
    struct stat st;
    if (stat(path, &st) == 0)
        return CLI_STORAGE_LOG;
    snprintf(path, sizeof(path), "%s/kvq.marker", dir);
    if (stat(path, &st) == 0)
        return CLI_STORAGE_SQLITE;
    const char *u = url != NULL ? url : getenv("KVQ_DB");
    if (u != NULL && strncmp(u, "sqlite:", 7) == 0)
        return CLI_STORAGE_SQLITE;
    const char *env = getenv("KVQ_STORAGE");
    if ((u == NULL || strncmp(u, "log:", 4) != 0) && env != NULL && strcmp(env, "sqlite") == 0)
        return CLI_STORAGE_SQLITE;
    return CLI_STORAGE_LOG;
}

/* remove_one keeps the top directory (a directory the user made, empty, for the database). */
static int keep_top;

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    if (ftw->level == 0 && keep_top)
        return 0;
    if (flag == FTW_DP)
        (void)rmdir(path);
    else
        (void)unlink(path);
    return 0;
}

/* A create makes the database's directory, and the missing directories above it (as mkdir -p),
 * and remembers the highest one it made, so that a failed create leaves nothing behind: a
 * half-made directory would make every later command say "no kvq database". 0, or an exit
 * code (printed). */
static int create_prepare(cli *c)
{
    const char *dir = embedded_dir(c->db_url);
    struct stat st;
    if (dir == NULL || dir[0] == '\0')
        return 0;
    if (lstat(dir, &st) == 0) {
        /* An empty directory made for the database: what a failed create puts in it goes. */
        DIR *d = S_ISDIR(st.st_mode) ? opendir(dir) : NULL;
        struct dirent *e;
        int empty = d != NULL;
        while (d != NULL && (e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                empty = 0;
        if (d != NULL)
            closedir(d);
        if (empty) {
            c->undo_dir = strdup(dir);
            c->undo_keep_top = 1;
            c->fresh_db = 1;
        }
        return 0;
    }
    if (errno != ENOENT)
        return 0;
    char *p = strdup(dir);
    if (p == NULL)
        return cli_fail(KVQ_ENOMEM, "cannot create the database");
    c->fresh_db = 1;
    /* The parents, from the top down; the database directory itself is the engine's to make. */
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/')
        p[--n] = '\0';
    for (char *q = p + 1; (q = strchr(q, '/')) != NULL; q++) {
        *q = '\0';
        if (stat(p, &st) != 0) {
            if (errno != ENOENT || mkdir(p, 0777) != 0) {
                int e = errno;
                char msg[1400];
                snprintf(msg, sizeof(msg),
                         "cannot create the database %s: its parent directory %s does not exist "
                         "and cannot be made (%s)",
                         dir, p, strerror(e));
                fputs("kvq: ", stderr);
                cli_put_text(stderr, msg);
                int code = e == EACCES || e == EPERM || e == EROFS ? KVQ_EPERM : KVQ_EIO;
                fprintf(stderr, " (%s)\n", kvq_errname(code));
                cli_json_error(code, kvq_errname(code), msg);
                free(p);
                cli_create_undo(c);
                return EXIT_DB;
            }
            if (c->undo_dir == NULL)
                c->undo_dir = strdup(p);
        }
        *q = '/';
    }
    if (c->undo_dir == NULL)
        c->undo_dir = p;
    else
        free(p);
    return 0;
}

static int any_queue(const char *name, const kvq_queue_settings *settings, void *payload)
{
    (void)name;
    (void)settings;
    (void)payload;
    return 1;
}

void cli_create_undo(cli *c)
{
    if (c->undo_dir == NULL)
        return;
    /* Another create of the same new path may have run at the same time: a complete database
     * (its marker written) goes only when this handle sees no queue in it, and never when this
     * open failed (it may be the other's). */
    const char *dir = embedded_dir(c->db_url);
    char marker[4200];
    snprintf(marker, sizeof(marker), "%s/kvq.marker", dir != NULL ? dir : "");
    struct stat st;
    int keep = 0;
    if (dir != NULL && stat(marker, &st) == 0)
        keep = c->db == NULL || kvq_queue_list_named(c->db, any_queue, NULL) != 0;
    kvq_db_close(c->db);
    c->db = NULL;
    keep_top = c->undo_keep_top;
    if (!keep)
        (void)nftw(c->undo_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    free(c->undo_dir);
    c->undo_dir = NULL;
}

static int cli_open_db(cli *c);

int cli_open(cli *c)
{
    if (c->parse_only)
        return CLI_PARSED;
    if (c->db != NULL)
        return 0;
    if (c->create_db && !c->read_only) {
        int rc = create_prepare(c);
        if (rc != 0)
            return rc;
    }
    cli_set_storage(storage_of(c->db_url));
    int rc = cli_open_db(c);
    if (rc != 0)
        cli_create_undo(c); /* a failed create leaves nothing behind */
    return rc;
}

/* cli_open, once any directories above a new database are made. */
static int cli_open_db(cli *c)
{
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    if (!c->create_db || c->read_only)
        o.flags |= KVQ_DB_NO_CREATE;
    if (c->read_only)
        o.flags |= KVQ_DB_READ_ONLY;
    int rc = kvq_db_open(&c->db, c->db_url, &o);
    if (rc == KVQ_ENOTFOUND && stray_data_file(c->db_url)) {
        char msg[1400];
        snprintf(msg, sizeof(msg),
                 "%s, but it holds a data.db: the database is damaged (its "
                 "kvq.marker is gone) or the file is another program's; kvq neither reads nor "
                 "replaces it",
                 kvq_last_error());
        fputs("kvq: ", stderr);
        cli_put_text(stderr, msg);
        fputs(" (database_damaged)\n", stderr);
        cli_json_error(KVQ_EDAMAGED, "database_damaged", msg);
        return EXIT_DB;
    }
    if (rc == KVQ_ENOTFOUND && !c->create_db) {
        fprintf(stderr, "kvq: %s (create a queue with 'kvq create NAME' to start one)\n",
                kvq_last_error());
        cli_json_error(rc, "no_database", kvq_last_error());
        return EXIT_NOQUEUE;
    }
    if (rc == KVQ_ENOTFOUND || (rc == KVQ_EINVAL && path_not_dir(c->db_url))) {
        /* The path cannot be created (a missing parent directory) or is a file: an I/O error,
         * with the engine's message, which names the path and the cause. */
        char msg[1200];
        snprintf(msg, sizeof(msg), "cannot %s the database: %s", c->create_db ? "create" : "open",
                 kvq_last_error());
        fprintf(stderr, "kvq: %s (io_error)\n", msg);
        cli_json_error(KVQ_EIO, "io_error", msg);
        return EXIT_DB;
    }
    if (rc == KVQ_EPERM && !c->read_only && !c->create_db) {
        char msg[1400];
        snprintf(msg, sizeof(msg),
                 "cannot open the database: %s (to read a database you cannot "
                 "write, give --read-only)",
                 kvq_last_error());
        fputs("kvq: ", stderr);
        cli_put_text(stderr, msg);
        fputs(" (permission_denied)\n", stderr);
        cli_json_error(rc, kvq_errname(rc), msg);
        return EXIT_DB;
    }
    if (rc != 0)
        return cli_fail(rc,
                        c->fresh_db ? "cannot create the database" : "cannot open the database");
    return 0;
}

/* Splits argv into the queue name (the first non-option argument) and the rest. Options are
 * parsed by the callers from the remaining arguments. */
int cli_need_name(const char *cmd, int argc, char **argv, const char **name)
{
    if (argc < 2 || argv[1][0] == '-')
        return cli_usage(cmd, "missing the queue NAME");
    if (kvq_queue_check_name(argv[1]) != 0)
        return cli_usage(cmd, "invalid queue name '%s' (1-200 printable bytes)", cli_arg(argv[1]));
    *name = argv[1];
    return 0;
}

/* Opens the database and the named queue, checking that it exists. */
int cli_open_named(cli *c, const char *name, cli_queue **q, kvq_queue_settings *info)
{
    int rc = cli_open(c);
    if (rc != 0)
        return rc;
    kvq_queue_settings qi;
    int err = kvq_queue_get_named(&qi, c->db, name);
    if (err == KVQ_ENOTFOUND) {
        char msg[1200];
        snprintf(msg, sizeof(msg), "no queue named '%s' (create it with 'kvq create %s')", name,
                 name);
        fprintf(stderr, "kvq: %s\n", msg);
        cli_json_error(KVQ_ENOTFOUND, "no_such_queue", msg);
        return EXIT_NOQUEUE;
    }
    if (err != 0)
        return cli_fail(err, "cannot read the queue registry");
    err = cli_queue_open(q, c->db, name, qi.type);
    if (err != 0)
        return cli_fail(err, "cannot open the queue");
    /* A delayed item whose time has come, or an item whose lease ended, is ready for every
     * command (pop, peek, len, list, stats): the library's readers see to it. */
    if (info != NULL)
        *info = qi;
    return 0;
}

/* Opens the queue and its work-queue handle; an exit code on failure (printed). */
int cli_open_workq(cli *c, const char *cmd, const char *name, cli_queue **q, kvq_workq **w)
{
    kvq_queue_settings info;
    int rc = cli_open_named(c, name, q, &info);
    if (rc != 0)
        return rc;
    int err = cli_queue_workq(*q, &info, w);
    if (err == KVQ_EWRONGTYPE) {
        cli_queue_close(*q);
        return cli_usage(cmd, "'%s' is a fifo queue; leases need a durable or priority queue",
                         name);
    }
    if (err != 0) {
        cli_queue_close(*q);
        return cli_fail(err, "cannot open the work queue");
    }
    return 0;
}
