/* Helpers every command shares: opening the database, the queue NAME argument, and opening a
 * named queue (or its work queue) with the messages and exit codes of a missing one. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/qops.h"

/* Whether the embedded database path (the default one for NULL) exists and is not a directory. */
static int path_not_dir(const char *url)
{
    if (url == NULL)
        url = getenv("KVQ_DB");
    if (url == NULL)
        url = "./kvq-data";
    struct stat st;
    return strncmp(url, "fdb:", 4) != 0 && stat(url, &st) == 0 && !S_ISDIR(st.st_mode);
}

/* Whether the embedded database path holds a non-empty data.db although the engine found no kvq
 * database there (its marker is missing): that is damage, or another program's file, not an
 * empty directory. */
static int stray_data_file(const char *url)
{
    if (url == NULL)
        url = getenv("KVQ_DB");
    if (url == NULL)
        url = "./kvq-data";
    if (strncmp(url, "fdb:", 4) == 0)
        return 0;
    char path[4200];
    snprintf(path, sizeof(path), "%s/data.db", url);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

int cli_open(cli *c)
{
    if (c->parse_only)
        return CLI_PARSED;
    if (c->db != NULL)
        return 0;
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
    if (rc == KVQ_EPERM && !c->read_only) {
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
        return cli_fail(rc, "cannot open the database");
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
