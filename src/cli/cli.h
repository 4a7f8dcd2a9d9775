/* The kvq command: shared declarations. */
#ifndef KVQ_CLI_H
#define KVQ_CLI_H

#include <signal.h>
#include <stdio.h>

#include "kvq/kvq.h"

/* Exit codes a script can rely on. */
enum {
    EXIT_OK_ = 0,
    EXIT_EMPTY = 1,   /* the queue is empty (or watch timed out) */
    EXIT_USAGE = 2,   /* bad command line */
    EXIT_DB = 3,      /* database or I/O error */
    EXIT_NOQUEUE = 4, /* no such queue, or no database at the path */
    EXIT_FAILED = 5,  /* the work failed: a consumed item's command, the demo's check */
    /* consume stopped because its standard output was closed (as a process killed by SIGPIPE
     * reports it: 128 + 13). */
    EXIT_OUTPUT_GONE = 141,
    /* Test-only (parse_only): the command line was parsed and would now open the database. */
    CLI_PARSED = 64,
};

typedef struct cli {
    const char *db_url; /* NULL: $KVQ_DB or ./kvq-data */
    int json;
    int read_only; /* --read-only: the database is opened read-only (writes fail) */
    int nul;       /* -0: values end with NUL (input and output) instead of a newline */
    int create_db; /* cli_open may create the database (create, demo, bench); else never */
    int tuple;     /* --tuple (pop, peek, list, export): values decoded as packed tuples */
    kvq_db *db;
    int fresh_db;      /* create: no database was there (no directory, or an empty one) */
    char *undo_dir;    /* create: the highest directory it made (removed if the create fails) */
    int undo_keep_top; /* create: undo_dir was there, empty: only what it holds goes */
    /* Test-only (the argument fuzzer): stop where the database would be opened, cli_open
     * returning CLI_PARSED, so that only the parsing of the command line runs. */
    int parse_only;
} cli;

/* The kvq command (main() is in main.c). argv may be reordered. Returns the exit code. */
int cli_main(cli *c, int argc, char **argv);

typedef struct cli_cmd {
    const char *name;
    const char *args;    /* one-line synopsis of the arguments */
    const char *summary; /* one line */
    const char *help;    /* the options, one per line, or NULL */
    int (*run)(cli *c, int argc, char **argv);
} cli_cmd;

/* Opens the database on first use; prints the error and returns an exit code on failure. With
 * create_db, a new database's missing parent directories are made too, and a failed open
 * removes what it made. */
int cli_open(cli *c);
/* A create that failed after the open: closes the database and removes the directories the
 * open made (nothing when the database existed). */
void cli_create_undo(cli *c);
/* The storage the messages of a full disk speak of (report.c). */
enum { CLI_STORAGE_NONE, CLI_STORAGE_SQLITE, CLI_STORAGE_LOG };
void cli_set_storage(int storage);
/* Prints "kvq: <what>: <message>" for a kvq error and returns the matching exit code (with
 * --json, also the error as one JSON value on standard output). */
int cli_fail(int rc, const char *what);
/* cli_fail without the JSON value: msg receives "<what>: <message>" for the caller's own. */
int cli_fail_msg(int rc, const char *what, char *msg, size_t cap);
/* The exit code of a kvq error. */
int cli_exit_code(int rc);
/* Prints a usage error naming the problem and returns EXIT_USAGE. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An argument as messages show it: control bytes as \xNN, at most 64 bytes and then its
 * length; valid until the fourth call after (not thread-safe: for the main thread). */
const char *cli_arg(const char *s);
/* Prints a command's help. */
void cli_help(FILE *f, const cli_cmd *cmd);
const cli_cmd *cli_find(const char *name);

/* Parses a decimal integer in [min, max]; 0 on success. */
int cli_parse_int(const char *s, long long min, long long max, long long *out);
/* Parses a duration in milliseconds, within [min, max]: an integer (milliseconds) or one with
 * a unit, ms, s, m or h (500ms, 30s, 5m, 1h); 0 on success. */
int cli_parse_ms(const char *s, long long min, long long max, long long *out);

/* With --json, prints {"error":{"code":..,"name":..,"message":..}} on standard output. */
void cli_json_error(int code, const char *name, const char *message);
/* Prints {"code":..,"name":..,"message":..} (no newline) on standard output. */
void cli_json_error_obj(int code, const char *name, const char *message);
/* Turns the JSON form of errors on or off (a command that reports failures inside its own JSON
 * value); returns the previous setting. */
int cli_json_errors(int on);
/* Writes bytes (a value, a name) as JSON: a string when they are UTF-8, else
 * {"base64":"..."}, so that every parser reads them and gets the exact bytes back. */
void cli_json_str(FILE *f, const uint8_t *p, size_t n);
/* Writes text (a message) as a JSON string; a byte that is not UTF-8 becomes U+FFFD. */
void cli_json_text(FILE *f, const char *s);
/* Length of the valid UTF-8 sequence at p (1 to 4), or 0 when the byte at p starts none. */
size_t cli_utf8_len(const uint8_t *p, size_t n);
/* Whether standard output has lost its reader (a pipe or socket nobody reads any more, as after
 * `kvq pop q -n 5000 | head -1`). */
int cli_stdout_reader_gone(void);
/* Whether standard output is a pipe; the bytes written to it that its reader has not read yet
 * (FIONREAD, which also works once the reader is gone; -1: cannot tell). */
int cli_stdout_is_pipe(void);
long cli_stdout_unread(void);
/* Values end with this (a newline, or NUL with -0). */
void cli_set_value_end(char end);
/* Writes a message with its control bytes escaped (a terminal never gets them raw). */
void cli_put_text(FILE *f, const char *s);
/* Writes a value as it is, then a newline (a NUL with -0). */
void cli_print_value(FILE *f, const uint8_t *p, size_t n);
/* --tuple: a value decoded as the packed tuple it holds (FoundationDB's recipes pack theirs):
 * the tuple's text, ("a", 1), then a newline (a NUL with -0); a value that is not a packed
 * tuple as b"..." with its bytes escaped. cli_json_tuple: {"tuple": TEXT}, or {"value": V} for
 * a value that is not one. cli_tuple_text: the text alone in out (1: a tuple, 0: b"...",
 * -1: out of memory). cli_tuple_report: says on standard error how many values were not. */
void cli_print_tuple(FILE *f, const uint8_t *p, size_t n);
void cli_json_tuple(FILE *f, const uint8_t *p, size_t n);
int cli_tuple_text(kvq_buf *out, const uint8_t *p, size_t n);
void cli_tuple_report(const char *cmd);

/* A queue type's name as the command writes and reads it (fifo, priority, durable; "none" for
 * another value); cli_type_parse: 0, or KVQ_EINVAL. Named queues themselves are the library's
 * (kvq_queue_create_named and the rest, kvq/queue.h). */
const char *cli_type_name(kvq_queue_type t);
int cli_type_parse(const char *s, kvq_queue_type *out);

/* SIGINT and SIGTERM for a command that must finish what it holds (push): blocked, except while
 * it waits for input (cli_reader_next) or polls (cli_stop_signals_poll); the handler only notes
 * the signal. */
typedef struct cli_stop_signals {
    sigset_t old_mask, wait_mask;
    struct sigaction old_int, old_term;
} cli_stop_signals;
void cli_stop_signals_catch(cli_stop_signals *s);
/* The signal caught (0: none yet). */
int cli_stop_signals_caught(void);
/* Lets a pending SIGINT or SIGTERM in, and returns the signal caught (0: none). */
int cli_stop_signals_poll(cli_stop_signals *s);
void cli_stop_signals_restore(cli_stop_signals *s);

/* Records of an input: lines, or NUL-terminated records (-0). */
typedef struct cli_reader {
    int fd;
    char delim;
    cli_stop_signals *sigs; /* NULL: signals are not watched */
    uint8_t *buf;
    size_t len, cap, start;
    int eof;
    long records;   /* records returned so far (the one just returned included) */
    size_t partial; /* CLI_READ_SIGNAL: bytes of an unterminated record left unread */
    int stopping;   /* a stop signal came: what the input held then is read, no more */
    size_t drain;   /* stopping: bytes still to read */
} cli_reader;
enum {
    CLI_READ_RECORD = 0, /* *out: the record without its terminator, valid until the next call */
    CLI_READ_EOF,
    CLI_READ_IDLE,     /* nothing arrived within wait_ms */
    CLI_READ_SIGNAL,   /* SIGINT or SIGTERM arrived (cli_stop_signals_caught) */
    CLI_READ_TOO_LONG, /* a record over KVQ_MAX_VALUE_SIZE bytes (*out: its start) */
    CLI_READ_ERROR,    /* read(2) failed (errno) */
};
/* After a stop signal, the most a reader reads of what the input holds (a pipe holds 64 KiB;
 * a file would give all it has left). */
#define CLI_READ_DRAIN_MAX (1u << 20)
void cli_reader_init(cli_reader *r, int fd, char delim, cli_stop_signals *sigs);
/* The next record, waiting up to wait_ms (-1: no limit) for input. */
int cli_reader_next(cli_reader *r, int64_t wait_ms, kvq_bytes *out);
void cli_reader_dispose(cli_reader *r);

/* A lease's token (kvq_workq_lease_format, which cannot fail with this buffer). */
void cli_token_format(const kvq_workq_lease *l, char out[KVQ_WORKQ_TOKEN_LEN + 1]);

/* One run of consume --exec's command (exec.c). */
typedef struct cli_exec_item {
    kvq_bytes value;
    char end;            /* written after the value: '\n', or '\0' with -0 */
    int raw;             /* --raw: the value's bytes alone */
    int forward_signals; /* SIGINT/SIGTERM/SIGHUP/SIGQUIT of kvq's group reach the command */
    const char *queue;   /* $KVQ_QUEUE */
    const char *token;   /* $KVQ_LEASE (NULL: unset) */
    const char *db_url;  /* $KVQ_DB (NULL: left as it is) */
    uint32_t deliveries; /* $KVQ_DELIVERIES */
    int worker;          /* $KVQ_WORKER */
} cli_exec_item;
/* Runs cmd (/bin/sh -c cmd, or its program directly when it is plain words) with the item on
 * its standard input, in a process group that is killed if kvq dies (the helpers' shared one,
 * else one of its own under a keeper of its own). 0 when it read the whole item and exited 0;
 * else -1, with *status its wait status (-1: not started) and *took_all whether it read the
 * whole item. */
int cli_exec_run(const char *cmd, const cli_exec_item *it, int *status, int *took_all);
/* Starts the helpers that keep consume's commands from outliving kvq (exec.c), from the main
 * thread (their parent-death signal follows the thread that forked them) before any command
 * runs; forward_signals: SIGINT/SIGTERM/SIGHUP/SIGQUIT of kvq's group reach the commands. 0, or
 * -1 (then each command gets a keeper of its own, the slower way). */
int cli_exec_start(int forward_signals);
/* Stops them, once no command runs. */
void cli_exec_stop(void);
/* "exited with status 3", "was killed by signal 9 (Killed)"... */
void cli_exec_describe(int status, int took_all, char *buf, size_t cap);

/* The commands (cli.c's table). */
int cmd_create(cli *c, int argc, char **argv);
int cmd_delete(cli *c, int argc, char **argv);
int cmd_alter(cli *c, int argc, char **argv);
int cmd_queues(cli *c, int argc, char **argv);
int cmd_push(cli *c, int argc, char **argv);
int cmd_pop(cli *c, int argc, char **argv);
int cmd_peek(cli *c, int argc, char **argv);
int cmd_len(cli *c, int argc, char **argv);
int cmd_list(cli *c, int argc, char **argv);
int cmd_clear(cli *c, int argc, char **argv);
int cmd_watch(cli *c, int argc, char **argv);
int cmd_stats(cli *c, int argc, char **argv);
int cmd_consume(cli *c, int argc, char **argv);
int cmd_receive(cli *c, int argc, char **argv);
int cmd_ack(cli *c, int argc, char **argv);
int cmd_nack(cli *c, int argc, char **argv);
int cmd_extend(cli *c, int argc, char **argv);
int cmd_dlq(cli *c, int argc, char **argv);
int cmd_export(cli *c, int argc, char **argv);
int cmd_check(cli *c, int argc, char **argv);
int cmd_backup(cli *c, int argc, char **argv);
int cmd_import(cli *c, int argc, char **argv);
/* kvq list NAME --in-flight / --delayed (cmd_workq.c). */
int cli_list_workq(cli *c, const char *name, int delayed);
int cmd_bench(cli *c, int argc, char **argv);
int cmd_demo(cli *c, int argc, char **argv);

#endif /* KVQ_CLI_H */
