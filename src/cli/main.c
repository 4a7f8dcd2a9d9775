/* The kvq command: global options, the command table, errors and output helpers. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static const cli_cmd commands[] = {
    { "create", "NAME [--type fifo|priority|durable] [--lease D] [--max-deliveries N] [--exist-ok]",
      "create a queue (durable by default)",
      "  --type T     fifo (FoundationDB's queue recipe), priority (the priority queue recipe)\n"
      "               or durable (versionstamped keys with push and pop counters)\n"
      "  --lease D    lease of receive and consume (default 30s)\n"
      "  --max-deliveries N  deliveries before an item goes to the dead letters (default 5;\n"
      "               0: never)\n"
      "  --exist-ok   succeed if the queue exists with this type (its settings stay);\n"
      "               also spelled --if-not-exists\n"
      "durations: milliseconds, or with a unit: 500ms, 30s, 1.5s, 5m, 1h\n",
      cmd_create },
    { "alter", "NAME [--lease D] [--max-deliveries N]",
      "change a durable or priority queue's lease and max deliveries",
      "  --lease D    the lease of receive and consume from now on (500ms, 30s, 5m)\n"
      "  --max-deliveries N  deliveries before the dead letters (0: never)\n",
      cmd_alter },
    { "delete", "NAME", "delete a queue and everything in it", NULL, cmd_delete },
    { "queues", "", "list the queues: type, length, in flight, delayed, dead, oldest age", NULL,
      cmd_queues },
    { "push", "NAME [--priority P] [--delay D] [--dedup KEY] [--flush D] [VALUE... | --file PATH...]",
      "push values: the arguments, whole files, or else one per line of standard input",
      "  --priority P  the priority (priority queues; an integer, default 0)\n"
      "  --delay D     invisible to receive for D (durable and priority; 500ms, 30s, 5m)\n"
      "  --dedup KEY   enqueue only if KEY was not pushed within the dedup window (one value)\n"
      "  --file PATH   push the whole file as one value (any bytes; '-': standard input)\n"
      "  --flush D     standard input: commit what was read at most D after its first line\n"
      "                arrived (default 200ms), so a slow stream (tail -f) is not held back\n"
      "  -0            standard input holds NUL-terminated values (values with newlines)\n"
      "values: up to 100,000 bytes each. Lines end at \\n (a \\r before it is kept). Lines\n"
      "are committed 100 per transaction; SIGINT or SIGTERM commits what was read, then exits\n"
      "130 or 143. On a failure nothing after the failed value is pushed, and the message says\n"
      "how many were pushed before it, N (tail -n +N+1 resumes at the failed one).\n",
      cmd_push },
    { "pop", "NAME [-n K] [--max]", "pop up to K items (default 1) and print them",
      "  -n K         pop up to K items (1,000 per transaction; with --max, one)\n"
      "  --max        priority queues: pop the highest priority (default: the lowest)\n",
      cmd_pop },
    { "peek", "NAME [--max]", "print the next item without popping it",
      "  --max        priority queues: the highest priority\n", cmd_peek },
    { "len", "NAME", "print the number of items", NULL, cmd_len },
    { "list", "NAME [--limit N | --in-flight | --delayed]",
      "print the items in order without popping them (or those in flight, or delayed)",
      "  --limit N      at most N items\n"
      "  --in-flight    the leased items, the lease ending soonest first: TOKEN, seconds until\n"
      "                 the lease ends, deliveries, value (ack or nack the TOKEN to settle it)\n"
      "  --delayed      the delayed items, due soonest first: seconds until due, deliveries,\n"
      "                 value\n",
      cmd_list },
    { "clear", "NAME", "remove every item (the queue stays)", NULL, cmd_clear },
    { "watch", "NAME [--timeout MS]", "wait until something is pushed, then print the length (durable queues)",
      "  --timeout MS give up after MS milliseconds (exit 1)\n", cmd_watch },
    { "stats", "[NAME] [--watch] [--prometheus]",
      "a queue's figures (every queue's without NAME): length, counters, leases, dead letters",
      "  --watch       refresh every second (with rates) until Ctrl-C\n"
      "  --prometheus  Prometheus's text exposition format, one sample per queue and figure\n"
      "with --json, every key is present, null where it does not apply\n",
      cmd_stats },
    { "receive", "NAME [--lease D] [--wait D] [-n K]",
      "receive ready items with a lease; print TOKEN and value for each",
      "  --lease D    the lease (default: the queue's, else 30s); ack, nack or extend it\n"
      "               with the TOKEN before it ends, or the item is delivered again\n"
      "  --wait D     when nothing is ready, wait up to D for an item (woken by a push,\n"
      "               a delayed item falling due or a lease ending; it does not poll)\n"
      "  -n K         up to K items (one lease each); --json prints an array\n",
      cmd_receive },
    { "ack", "NAME TOKEN...", "acknowledge received items: they are deleted",
      "  several TOKENs: each is acknowledged on its own; the exit status is that of the first\n"
      "  failure, and every failure is reported\n",
      cmd_ack },
    { "nack", "NAME TOKEN [--delay MS]", "give a received item back (now or after MS)",
      "  --delay MS   ready again only after MS milliseconds\n", cmd_nack },
    { "extend", "NAME TOKEN [--lease MS]", "renew a lease; print the new TOKEN",
      "  --lease MS   the lease now ends MS milliseconds from now (default: the queue's)\n",
      cmd_extend },
    { "dlq", "list|redrive|purge NAME",
      "list the dead letters, move them back to the queue, or delete them", NULL, cmd_dlq },
    { "consume", "NAME [--workers N] [--exec CMD [--raw]] [--drain] [--nack-delay MS] [--at-most-once [--batch K]]",
      "hand each item to standard output or a command, at least once (durable and priority queues)",
      "  --workers N  consumer threads (default 1)\n"
      "  --exec CMD   run CMD (with /bin/sh) for each item, the item on its standard input\n"
      "               as pop prints it (the value, then a newline), with $KVQ_QUEUE,\n"
      "               $KVQ_DELIVERIES, $KVQ_LEASE (its token), $KVQ_WORKER and $KVQ_DB set; it\n"
      "               never outlives kvq (killed with it, even by SIGKILL)\n"
      "  --raw        with --exec: the value's bytes alone, no newline\n"
      "  --drain      stop once nothing is ready (default: run until SIGINT/SIGTERM)\n"
      "  --nack-delay MS  a failed item is ready again after MS milliseconds (default 1000);\n"
      "               after the queue's max deliveries (create prints it) it goes to the dead\n"
      "               letters\n"
      "  --ack        at least once, the default: each item is received with a lease and acked\n"
      "               once its command succeeded (or, to a pipe, once the reader has read it)\n"
      "  --at-most-once  pop batches instead (durable queues): faster, but an item popped is\n"
      "               gone even if its command fails or kvq is killed (the rest of its\n"
      "               batch is still handed over)\n"
      "  --batch K    with --at-most-once: items popped per transaction (default 10)\n"
      "exit: 0 (also when stopped by SIGTERM); 130 on SIGINT (Ctrl-C); 5 when an item's\n"
      "command failed; 141 when standard output was closed\n",
      cmd_consume },
    { "bench", "[--quick] [--items N] [--threads N]",
      "measure push and pop throughput of each queue type", NULL, cmd_bench },
    { "demo",
      "[--producers P] [--consumers C] [--items N] [--batch K] [--queue NAME] [--progress MS]",
      "producers and consumers on a durable queue, verified exactly-once",
      "  --producers P  producer threads (default 8)\n"
      "  --consumers C  consumer threads (default 4)\n"
      "  --items N      items in all (default 100000)\n"
      "  --batch K      items per consumer transaction (default 100)\n"
      "  --progress MS  a progress line this often (default 1s; 0: none)\n",
      cmd_demo },
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

const cli_cmd *cli_find(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

void cli_help(FILE *f, const cli_cmd *cmd)
{
    fprintf(f, "usage: kvq [--db URL] [--json] %s %s\n\n%s\n", cmd->name, cmd->args, cmd->summary);
    if (cmd->help != NULL)
        fprintf(f, "\noptions:\n%s", cmd->help);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: kvq [--db URL] [--json] [-0] [--read-only] COMMAND [ARGS...]\n"
               "       kvq --help | --version | COMMAND --help\n\n"
               "Durable, transactional queues. URL is a directory (the embedded engine; default\n"
               "$KVQ_DB or ./kvq-data) or fdb:[cluster-file].\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nexit codes: 0 ok, 1 empty queue (or timed out), 2 usage, 3 database or I/O error,\n"
               "4 no such queue (or no database), 5 the work failed (a command of consume --exec,\n"
               "the demo's check)\n\n"
               "Options go before a command's values: after the first value of push, every\n"
               "argument is a value; '--' ends the options (kvq push q -- -h pushes \"-h\").\n");
}

/* Writes a message with its control bytes escaped (a terminal never gets them raw). */
static void put_text(FILE *f, const char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch < 0x20 && ch != '\n') || ch == 0x7f)
            fprintf(f, "\\x%02x", ch);
        else
            fputc(ch, f);
    }
}

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
        snprintf(msg, sizeof(msg), "cannot %s the database: %s",
                 c->create_db ? "create" : "open", kvq_last_error());
        fprintf(stderr, "kvq: %s (io_error)\n", msg);
        cli_json_error(KVQ_EIO, "io_error", msg);
        return EXIT_DB;
    }
    if (rc == KVQ_EPERM && !c->read_only) {
        char msg[1400];
        snprintf(msg, sizeof(msg), "cannot open the database: %s (to read a database you cannot "
                 "write, give --read-only)", kvq_last_error());
        fputs("kvq: ", stderr);
        put_text(stderr, msg);
        fputs(" (permission_denied)\n", stderr);
        cli_json_error(rc, kvq_errname(rc), msg);
        return EXIT_DB;
    }
    if (rc != 0)
        return cli_fail(rc, "cannot open the database");
    return 0;
}

int cli_fail_msg(int rc, const char *what, char *msg, size_t cap)
{
    const char *detail = kvq_last_error();
    if (!(detail[0] != '\0' && kvq_last_error_code() == rc))
        detail = kvq_strerror(rc);
    /* A full disk: say what the reserve is, which a new user does not know (docs/engine.md). */
    snprintf(msg, cap, "%s: %s%s", what, detail,
             rc == KVQ_ENOSPC ? " (the embedded engine keeps 8 MB of the disk in reserve, so that "
                                "a full disk can still drain its queues: a new database needs "
                                "about 10 MB free)"
                              : "");
    fputs("kvq: ", stderr);
    put_text(stderr, msg);
    fprintf(stderr, " (%s)\n", kvq_errname(rc));
    return cli_exit_code(rc);
}

int cli_fail(int rc, const char *what)
{
    char msg[1400];
    int code = cli_fail_msg(rc, what, msg, sizeof(msg));
    cli_json_error(rc, kvq_errname(rc), msg);
    return code;
}

int cli_exit_code(int rc)
{
    if (rc == KVQ_ENOTFOUND)
        return EXIT_NOQUEUE;
    if (rc == KVQ_ELEASE_EXPIRED || rc == KVQ_ELEASE_SETTLED)
        return EXIT_EMPTY;
    if (rc == KVQ_EINVAL || rc == KVQ_EWRONGTYPE || rc == KVQ_EEXISTS || rc == KVQ_EKEY_TOO_LARGE ||
        rc == KVQ_EVALUE_TOO_LARGE)
        return EXIT_USAGE;
    return EXIT_DB;
}

const char *cli_arg(const char *s)
{
    static char bufs[4][400];
    static int next;
    char *b = bufs[next];
    next = (next + 1) % 4;
    size_t n = strlen(s), o = 0, i = 0;
    for (; i < n && i < 64; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch == 0x7f)
            o += (size_t)snprintf(b + o, 400 - o, "\\x%02x", ch);
        else
            b[o++] = (char)ch;
    }
    b[o] = '\0';
    if (i < n)
        snprintf(b + o, 400 - o, "... (%zu bytes in all)", n);
    return b;
}

int cli_usage(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char msg[1200];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "kvq%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    put_text(stderr, msg);
    fputc('\n', stderr);
    cli_json_error(KVQ_EINVAL, "usage", msg);
    if (cmd != NULL)
        fprintf(stderr, "try 'kvq %s --help'\n", cmd);
    else
        fprintf(stderr, "try 'kvq --help'\n");
    return EXIT_USAGE;
}

int cli_parse_int(const char *s, long long min, long long max, long long *out)
{
    if (s == NULL || *s == '\0')
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (1 to 4 bytes; no overlongs, surrogates or code
 * points past U+10FFFF), or 0 when the byte at p does not start one. */
size_t cli_utf8_len(const uint8_t *p, size_t n)
{
    uint8_t b = p[0];
    size_t len;
    uint32_t cp;
    if (b < 0x80)
        return 1;
    if (b >= 0xc2 && b <= 0xdf) {
        len = 2;
        cp = b & 0x1f;
    } else if (b >= 0xe0 && b <= 0xef) {
        len = 3;
        cp = b & 0x0f;
    } else if (b >= 0xf0 && b <= 0xf4) {
        len = 4;
        cp = b & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

int cli_parse_ms(const char *s, long long min, long long max, long long *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno != 0)
        return -1;
    /* A fraction (1.5s, 0.25m): up to 9 digits, kept as a numerator over 10^digits. */
    long long frac = 0, scale = 1;
    if (*end == '.') {
        end++;
        if (*end < '0' || *end > '9')
            return -1;
        while (*end >= '0' && *end <= '9') {
            if (scale >= 1000000000LL)
                return -1;
            frac = frac * 10 + (*end - '0');
            scale *= 10;
            end++;
        }
    }
    long long unit;
    if (strcmp(end, "") == 0 || strcmp(end, "ms") == 0)
        unit = 1;
    else if (strcmp(end, "s") == 0)
        unit = 1000;
    else if (strcmp(end, "m") == 0)
        unit = 60000;
    else if (strcmp(end, "h") == 0)
        unit = 3600000;
    else
        return -1;
    if (v > max / unit)
        return -1;
    v *= unit;
    /* The fraction must come to whole milliseconds (1.5s is 1500 ms; 1.5ms is refused). */
    if (frac != 0) {
        if ((frac * unit) % scale != 0)
            return -1;
        long long add = frac * unit / scale;
        if (v > max - add)
            return -1;
        v += add;
    }
    if (v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* A JSON string of bytes that are UTF-8 where utf8 says so; other bytes as U+FFFD. */
static void json_string(FILE *f, const uint8_t *p, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned char ch = p[i];
        size_t len = cli_utf8_len(p + i, n - i);
        if (len == 0) {
            fputs("\\ufffd", f);
            i++;
            continue;
        }
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", f);
        else if (ch == '\t')
            fputs("\\t", f);
        else if (ch == '\r')
            fputs("\\r", f);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(f, "\\u%04x", ch);
        else
            fwrite(p + i, 1, len, f);
        i += len;
    }
    fputc('"', f);
}

static int valid_utf8(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t len = cli_utf8_len(p + i, n - i);
        if (len == 0)
            return 0;
        i += len;
    }
    return 1;
}

void cli_json_str(FILE *f, const uint8_t *p, size_t n)
{
    if (valid_utf8(p, n)) {
        json_string(f, p, n);
        return;
    }
    /* Not UTF-8: a JSON string cannot hold it exactly in a form every parser accepts (a lone
     * surrogate is refused by strict ones), so the bytes go in base64 (docs/kvq.1, JSON OUTPUT). */
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    fputs("{\"base64\":\"", f);
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        fputc(b64[v >> 18 & 63], f);
        fputc(b64[v >> 12 & 63], f);
        fputc(i + 1 < n ? b64[v >> 6 & 63] : '=', f);
        fputc(i + 2 < n ? b64[v & 63] : '=', f);
    }
    fputs("\"}", f);
}

void cli_json_text(FILE *f, const char *s)
{
    json_string(f, (const uint8_t *)s, strlen(s));
}

/* --json: errors are one JSON value on standard output too (and the message on stderr). */
static int json_errors;

int cli_json_errors(int on)
{
    int was = json_errors;
    json_errors = on;
    return was;
}

void cli_json_error_obj(int code, const char *name, const char *message)
{
    /* The exit status too: the code is kvq's (9003 both for no_such_queue and no_database,
     * which the name tells apart; "usage" has none of its own). */
    int exit_code = strcmp(name, "usage") == 0 ? EXIT_USAGE
                    : strcmp(name, "no_such_queue") == 0 || strcmp(name, "no_database") == 0
                        ? EXIT_NOQUEUE
                        : cli_exit_code(code);
    printf("{\"code\":%d,\"name\":", code);
    cli_json_text(stdout, name);
    printf(",\"message\":");
    cli_json_text(stdout, message);
    printf(",\"exit\":%d}", exit_code);
}

void cli_json_error(int code, const char *name, const char *message)
{
    if (!json_errors)
        return;
    printf("{\"error\":");
    cli_json_error_obj(code, name, message);
    printf("}\n");
}

/* -0: values end with NUL instead of a newline. */
static char value_end = '\n';

void cli_print_value(FILE *f, const uint8_t *p, size_t n)
{
    fwrite(p, 1, n, f);
    fputc(value_end, f);
}

int cli_stdout_reader_gone(void)
{
    struct pollfd p = { .fd = STDOUT_FILENO, .events = 0 };
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)) != 0;
}

int cli_main(cli *c, int argc, char **argv)
{
    int i = 1, version = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--version") == 0) {
            version = 1;
            continue;
        }
        if (strcmp(a, "--json") == 0) {
            c->json = 1;
        } else if (strcmp(a, "-0") == 0 || strcmp(a, "--null") == 0) {
            c->nul = 1;
        } else if (strcmp(a, "--read-only") == 0) {
            c->read_only = 1;
        } else if (strcmp(a, "--db") == 0) {
            if (i + 1 >= argc)
                return cli_usage(NULL, "--db needs a URL");
            c->db_url = argv[++i];
        } else if (strncmp(a, "--db=", 5) == 0) {
            c->db_url = a + 5;
        } else if (a[0] == '-') {
            return cli_usage(NULL, "unknown option '%s'", a);
        } else {
            break;
        }
    }
    json_errors = c->json;
    if (version) {
        if (c->json)
            printf("{\"version\":\"%s\"}\n", kvq_version());
        else
            printf("kvq %s\n", kvq_version());
        return 0;
    }
    if (i >= argc) {
        usage(stderr);
        cli_json_error(KVQ_EINVAL, "usage", "missing the COMMAND (kvq --help lists them)");
        return EXIT_USAGE;
    }
    const cli_cmd *cmd = cli_find(argv[i]);
    if (cmd == NULL)
        return cli_usage(NULL, "unknown command '%s'", argv[i]);
    /* Global options and --help are also taken after the command, but never from a push's
     * values: after NAME, the first argument that is not an option (or an option's argument)
     * starts them, and from there on every argument is a value. */
    int is_push = strcmp(cmd->name, "push") == 0, operands = 0;
    for (int j = i + 1; j < argc; j++) {
        if (strcmp(argv[j], "--") == 0)
            break;
        if (is_push && argv[j][0] != '-' && ++operands == 2)
            break;
        if (is_push && (strcmp(argv[j], "--priority") == 0 || strcmp(argv[j], "--delay") == 0 ||
                        strcmp(argv[j], "--dedup") == 0 || strcmp(argv[j], "--flush") == 0 ||
                        strcmp(argv[j], "--file") == 0)) {
            j++;
            continue;
        }
        if ((strcmp(argv[j], "--help") == 0 || strcmp(argv[j], "-h") == 0) &&
            !(is_push && operands > 0)) {
            cli_help(stdout, cmd);
            return 0;
        }
        /* Global options are accepted after the command too. */
        if (strcmp(argv[j], "--json") == 0 || strcmp(argv[j], "-0") == 0 ||
            strcmp(argv[j], "--null") == 0 || strcmp(argv[j], "--read-only") == 0) {
            if (strcmp(argv[j], "--json") == 0)
                c->json = 1;
            else if (strcmp(argv[j], "--read-only") == 0)
                c->read_only = 1;
            else
                c->nul = 1;
            memmove(&argv[j], &argv[j + 1], (size_t)(argc - j - 1) * sizeof(*argv));
            argc--;
            j--;
        } else if (strcmp(argv[j], "--db") == 0 && j + 1 < argc) {
            c->db_url = argv[j + 1];
            memmove(&argv[j], &argv[j + 2], (size_t)(argc - j - 2) * sizeof(*argv));
            argc -= 2;
            j--;
        }
    }
    json_errors = c->json;
    value_end = c->nul ? '\0' : '\n';
    int rc = cmd->run(c, argc - i, argv + i);
    kvq_db_close(c->db);
    c->db = NULL;
    if (fflush(stdout) != 0 && rc == 0)
        rc = EXIT_DB;
    return rc;
}
