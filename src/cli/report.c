/* The command's messages: errors on standard error (and, with --json, as one JSON value on
 * standard output), usage errors, and the exit code of each kvq error. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/embedded/logstore/log.h"
#include "engine/embedded/room.h"

/* Writes a message with its control bytes escaped (a terminal never gets them raw). */
void cli_put_text(FILE *f, const char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch < 0x20 && ch != '\n') || ch == 0x7f)
            fprintf(f, "\\x%02x", ch);
        else
            fputc(ch, f);
    }
}

static int storage_kind = CLI_STORAGE_NONE;

void cli_set_storage(int storage)
{
    storage_kind = storage;
}

/* What a full disk means, which a new user does not know: the room each storage keeps, and what
 * a new database needs. The figures are the code's (engine/embedded/room.h: the engine's
 * reserve, kvq.reserve, taken only while a margin more is free, and the commit queue kvq.cq;
 * logstore/log.h: the log store's segments), checked with create and a push on tmpfs file
 * systems of each size (tests/cli/test_cli_edges.sh). */
static const char *enospc_note(void)
{
    static char note[600];
    const double mib = 1024.0 * 1024.0;
    if (storage_kind == CLI_STORAGE_SQLITE)
        snprintf(note, sizeof(note),
                 " (the SQLite storage keeps %u MiB of the disk in reserve, kvq.reserve, so that "
                 "a full disk can still drain its queues, and takes pushes only while %u MiB "
                 "more are free: a new database needs about %.1f MiB free, its %.0f MiB commit "
                 "queue kvq.cq included)",
                 KVQ__RESERVE_BYTES >> 20, KVQ__RESERVE_MARGIN >> 20,
                 (double)KVQ__SQLITE_NEW_DB_BYTES / mib, (double)KVQ__CQ_FILE_BYTES / mib);
    else if (storage_kind == CLI_STORAGE_LOG)
        snprintf(note, sizeof(note),
                 " (a database writes its log in preallocated segments of %u MiB, or on a disk "
                 "with less than %u MiB free of a 32nd of the free space, down to %u KiB; it "
                 "keeps room for a pass of its applier and a segment, ckpt.reserve, beside the "
                 "engine's %u MiB reserve, and takes pushes only while a segment's worth more is "
                 "free: a new database needs about %llu MiB free, %llu MiB for segments of %u "
                 "MiB)",
                 KVQ__LOG_SEG_DEFAULT >> 20, (KVQ__LOG_SEG_DEFAULT >> 20) * 32,
                 KVQ__LOG_SEG_SMALL >> 10, KVQ__RESERVE_BYTES >> 20,
                 (KVQ__LOG_NEW_DB_BYTES(KVQ__LOG_SEG_SMALL) + (1ull << 20) - 1) >> 20,
                 (KVQ__LOG_NEW_DB_BYTES(KVQ__LOG_SEG_DEFAULT) + (1ull << 20) - 1) >> 20,
                 KVQ__LOG_SEG_DEFAULT >> 20);
    else
        note[0] = '\0';
    return note;
}

int cli_fail_msg(int rc, const char *what, char *msg, size_t cap)
{
    const char *detail = kvq_last_error();
    if (!(detail[0] != '\0' && kvq_last_error_code() == rc))
        detail = kvq_strerror(rc);
    snprintf(msg, cap, "%s: %s%s", what, detail, rc == KVQ_ENOSPC ? enospc_note() : "");
    fputs("kvq: ", stderr);
    cli_put_text(stderr, msg);
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
    cli_put_text(stderr, msg);
    fputc('\n', stderr);
    cli_json_error(KVQ_EINVAL, "usage", msg);
    if (cmd != NULL)
        fprintf(stderr, "try 'kvq %s --help'\n", cmd);
    else
        fprintf(stderr, "try 'kvq --help'\n");
    return EXIT_USAGE;
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

