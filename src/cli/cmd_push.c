/* kvq push: values given as arguments, as whole files, or read from standard input as lines (or
 * NUL-terminated records with -0). Nothing read is lost: what standard input gives is committed
 * in batches once the batch is full, once its first record has waited the flush interval, at the
 * end of input, and when SIGINT or SIGTERM arrives; a failure says exactly how many values were
 * pushed before it. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/qops.h"
#include "util/util.h"

/* A batch: up to PUSH_BATCH values or PUSH_BATCH_BYTES bytes, one transaction on a durable
 * queue (all or none). */
#define PUSH_BATCH       100
#define PUSH_BATCH_BYTES (1u << 20)
/* The default flush interval: a value read waits at most this long for others to share its
 * transaction. */
#define PUSH_FLUSH_MS 200

typedef struct push_state {
    cli_queue *q;
    kvq_workq *w; /* delays, dedup keys and priority queues push one by one through it */
    kvq_workq_push_options po;
    int64_t prio;
    kvq_buf vals[PUSH_BATCH];
    kvq_bytes views[PUSH_BATCH];
    size_t n, bytes, batch;
    long pushed, duplicates; /* values handled: pushed + duplicates, in input order */
    const char *what;        /* a value as messages name it: "line", "record" or "value" */
} push_state;

/* Commits the values held. 0, or the error (the values handled are counted either way). */
static int push_flush(push_state *s)
{
    int err = 0;
    size_t i = 0;
    if (s->w != NULL) {
        for (; i < s->n && err == 0; i++) {
            bool enqueued = false;
            err = kvq_workq_push(&enqueued, s->w, s->views[i].data, s->views[i].len, &s->po);
            if (err == 0) {
                s->pushed += enqueued;
                s->duplicates += !enqueued;
            }
        }
    } else if (s->n > 0) {
        size_t done = 0;
        err = cli_queue_push_many(s->q, s->views, s->n, s->prio, &done);
        s->pushed += (long)done;
    }
    s->n = 0;
    s->bytes = 0;
    return err;
}

static int push_add(push_state *s, kvq_bytes v)
{
    if (v.len > KVQ_MAX_VALUE_SIZE) {
        /* Refused here, not by the batch's commit: a batch is all or none, so a value over the
         * limit in it would take the values before it down too, and the position said would
         * depend on how the input was cut into reads. The values before it are pushed first. */
        int err = push_flush(s);
        if (err != 0)
            return err;
        return kvq__error(KVQ_EVALUE_TOO_LARGE,
                          "%s %ld (%zu bytes) is over the limit of %d bytes per value", s->what,
                          s->pushed + s->duplicates + 1, v.len, KVQ_MAX_VALUE_SIZE);
    }
    kvq_buf *b = &s->vals[s->n];
    b->len = 0;
    int err = kvq_buf_append(b, v.data, v.len);
    if (err != 0)
        return err;
    s->views[s->n].data = b->data;
    s->views[s->n].len = v.len;
    s->n++;
    s->bytes += v.len;
    if (s->n == s->batch || s->bytes >= PUSH_BATCH_BYTES)
        return push_flush(s);
    return 0;
}

/* Reads standard input and pushes each record; *sig is the stop signal that ended it (0: the
 * input ended, or an error). */
static int push_stdin(push_state *s, char delim, int64_t flush_ms, int *sig, size_t *partial)
{
    cli_stop_signals sigs;
    cli_stop_signals_catch(&sigs);
    cli_reader r;
    cli_reader_init(&r, STDIN_FILENO, delim, &sigs);
    int64_t first_at = 0;
    int err = 0;
    *sig = 0;
    *partial = 0;
    while (err == 0) {
        int64_t wait = -1;
        if (s->n > 0) {
            int64_t left = first_at + flush_ms * 1000 - kvq__mono_us();
            wait = left > 0 ? (left + 999) / 1000 : 0;
        }
        kvq_bytes rec;
        int got = cli_reader_next(&r, wait, &rec);
        if (got == CLI_READ_RECORD) {
            if (s->n == 0)
                first_at = kvq__mono_us();
            err = push_add(s, rec);
            continue;
        }
        if (got == CLI_READ_IDLE) {
            err = push_flush(s);
            continue;
        }
        /* The end: what is held is committed first, whatever ended the input. */
        err = push_flush(s);
        if (err != 0)
            break;
        if (got == CLI_READ_SIGNAL) {
            *sig = cli_stop_signals_caught();
            *partial = r.partial;
        } else if (got == CLI_READ_TOO_LONG) {
            err = kvq__error(KVQ_EVALUE_TOO_LARGE, "%s %ld is over the limit of %d bytes per value",
                             s->what, r.records, KVQ_MAX_VALUE_SIZE);
        } else if (got == CLI_READ_ERROR) {
            err = kvq__error(KVQ_EIO, "cannot read standard input: %s", strerror(errno));
        }
        break;
    }
    cli_reader_dispose(&r);
    /* A signal that arrived during the last commit is taken now, not after exit. */
    if (*sig == 0)
        *sig = cli_stop_signals_poll(&sigs);
    cli_stop_signals_restore(&sigs);
    return err;
}

/* Reads a whole file as one value. */
static int read_file(const char *path, kvq_buf *out)
{
    int fd = strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kvq__error(errno == ENOENT ? KVQ_EINVAL : KVQ_EIO, "cannot open '%s': %s",
                          path, strerror(errno));
    out->len = 0;
    int err = 0;
    for (;;) {
        err = kvq_buf_grow(out, 65536);
        if (err != 0)
            break;
        ssize_t n = read(fd, out->data + out->len, 65536);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            err = kvq__error(KVQ_EIO, "cannot read '%s': %s", path, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        out->len += (size_t)n;
        if (out->len > KVQ_MAX_VALUE_SIZE) {
            err = kvq__error(KVQ_EVALUE_TOO_LARGE,
                             "'%s' holds more than the limit of %d bytes per value", path,
                             KVQ_MAX_VALUE_SIZE);
            break;
        }
    }
    if (fd != STDIN_FILENO)
        close(fd);
    return err;
}

/* What the command line asks of a push. */
typedef struct push_args {
    long long prio, delay, flush_ms;
    const char *dedup;
    int first_value, n_values, have_prio, n_files;
} push_args;

/* Reads push's options and counts its values (argv[2] on; argv[1] is the queue). 0, or the
 * usage error's exit code. */
static int parse_push_args(push_args *a, int argc, char **argv)
{
    *a = (push_args){ .flush_ms = PUSH_FLUSH_MS, .first_value = -1 };
    for (int i = 2; i < argc; i++) {
        if (a->first_value >= 0) {
            /* After the first value every argument is a value, whatever it looks like. */
            a->n_values++;
        } else if (strcmp(argv[i], "--priority") == 0) {
            if (i + 1 >= argc || cli_parse_int(argv[i + 1], INT64_MIN, INT64_MAX, &a->prio) != 0)
                return cli_usage("push", "--priority needs an integer");
            a->have_prio = 1;
            i++;
        } else if (strcmp(argv[i], "--delay") == 0) {
            if (i + 1 >= argc || cli_parse_ms(argv[i + 1], 0, 7LL * 86400000, &a->delay) != 0)
                return cli_usage("push", "--delay needs a duration from 0 to 7 days (500ms, 30s, 5m)");
            i++;
        } else if (strcmp(argv[i], "--dedup") == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0' || strlen(argv[i + 1]) > 1000)
                return cli_usage("push", "--dedup needs a key of 1 to 1000 bytes");
            a->dedup = argv[++i];
        } else if (strcmp(argv[i], "--flush") == 0) {
            if (i + 1 >= argc || cli_parse_ms(argv[i + 1], 0, 3600000, &a->flush_ms) != 0)
                return cli_usage("push", "--flush needs a duration from 0 to 1h (200ms, 1s)");
            i++;
        } else if (strcmp(argv[i], "--file") == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0')
                return cli_usage("push", "--file needs a PATH");
            a->n_files++;
            i++;
        } else if (strcmp(argv[i], "--") == 0) {
            if (a->first_value < 0 && i + 1 < argc)
                a->first_value = i + 1;
            a->n_values += argc - i - 1;
            break;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return cli_usage("push",
                             "unknown option '%s' (to push values that start with '-', put "
                             "them after '--')",
                             cli_arg(argv[i]));
        } else {
            a->first_value = i;
            a->n_values++;
        }
    }
    if (a->n_files > 0 && a->n_values > 0)
        return cli_usage("push", "--file and VALUEs exclude each other");
    if (a->dedup != NULL && a->n_values + a->n_files != 1)
        return cli_usage("push", "--dedup takes exactly one value, as an argument or a --file");
    return 0;
}

/* Pushes what the command line names: its --file contents, its VALUEs, or else standard input
 * (*sig, *partial: as push_stdin). 0, or the error. */
static int push_sources(push_state *s,
                        const cli *c,
                        const push_args *a,
                        int argc,
                        char **argv,
                        int *sig,
                        size_t *partial)
{
    int err = 0;
    if (a->n_files > 0) {
        kvq_buf f = KVQ_BUF_INIT;
        for (int i = 2; i < argc && err == 0; i++) {
            if (strcmp(argv[i], "--file") != 0) {
                i += strcmp(argv[i], "--priority") == 0 || strcmp(argv[i], "--delay") == 0 ||
                     strcmp(argv[i], "--dedup") == 0 || strcmp(argv[i], "--flush") == 0;
                continue;
            }
            err = read_file(argv[++i], &f);
            if (err == 0)
                err = push_add(s, (kvq_bytes){ f.data, f.len });
        }
        if (err == 0)
            err = push_flush(s);
        kvq_buf_dispose(&f);
    } else if (a->n_values > 0) {
        for (int i = 0; i < a->n_values && err == 0; i++) {
            const char *v = argv[a->first_value + i];
            err = push_add(s, (kvq_bytes){ (const uint8_t *)v, strlen(v) });
        }
        if (err == 0)
            err = push_flush(s);
    } else {
        /* No value given: standard input. Say so when it is a terminal (kvq push q --json
         * takes --json as the global option, and then waits here). */
        if (isatty(STDIN_FILENO))
            fprintf(stderr, "kvq push: no VALUE given: reading values from standard input, one "
                            "per line (Ctrl-D ends)\n");
        err = push_stdin(s, c->nul ? '\0' : '\n', a->flush_ms, sig, partial);
    }
    return err;
}

/* Says how the push ended (its error, its counts in JSON, the signal that stopped it) and
 * returns the exit code. */
static int push_report(const cli *c,
                       const push_args *a,
                       long pushed,
                       long duplicates,
                       int err,
                       int sig,
                       size_t partial)
{
    if (err != 0) {
        /* Exactly what was pushed: the values are handled in order, so every value before the
         * one that failed was pushed (or was a duplicate), and none from it on. */
        char what[200];
        snprintf(what, sizeof(what), "push failed at value %ld (%ld pushed before it%s)",
                 pushed + duplicates + 1, pushed, duplicates > 0 ? ", some duplicates" : "");
        char msg[1400];
        int rc = cli_fail_msg(err, what, msg, sizeof(msg));
        if (c->json) {
            printf("{\"pushed\":%ld,\"duplicates\":%ld,\"error\":", pushed, duplicates);
            cli_json_error_obj(err, kvq_errname(err), msg);
            printf("}\n");
        }
        return rc;
    }
    if (c->json) {
        printf("{\"pushed\":%ld,\"duplicates\":%ld", pushed, duplicates);
        if (sig != 0)
            printf(",\"signal\":%d,\"partial_bytes\":%zu", sig, partial);
        printf("}\n");
    } else if (duplicates > 0) {
        fprintf(stderr, "kvq: dedup key '%s' was pushed within the window: nothing enqueued\n",
                a->dedup);
    }
    if (sig != 0) {
        fprintf(stderr, "kvq push: stopped by %s: %ld values pushed", sig == SIGINT ? "SIGINT" : "SIGTERM",
                pushed);
        if (partial > 0)
            fprintf(stderr, "; a last %zu bytes without their %s were not pushed", partial,
                    c->nul ? "NUL" : "newline");
        fprintf(stderr, "\n");
        return 128 + sig;
    }
    return 0;
}

/* kvq push QUEUE: the arguments, the queue and its checks, the values, the report. */
int cmd_push(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    int rc = cli_need_name("push", argc, argv, &name);
    if (rc != 0)
        return rc;
    push_args a;
    rc = parse_push_args(&a, argc, argv);
    if (rc != 0)
        return rc;
    cli_queue *q;
    kvq_queue_settings info;
    rc = cli_open_named(c, name, &q, &info);
    if (rc != 0)
        return rc;
    kvq_queue_type type = info.type;
    if (a.have_prio && type != KVQ_QUEUE_PRIORITY) {
        cli_queue_close(q);
        return cli_usage("push", "--priority applies to priority queues; '%s' is a %s queue", name,
                         cli_type_name(type));
    }
    if ((a.delay > 0 || a.dedup != NULL) && type == KVQ_QUEUE_FIFO) {
        cli_queue_close(q);
        return cli_usage("push", "--delay and --dedup need a durable or priority queue; '%s' is a "
                                 "fifo queue", name);
    }
    push_state *s = kvq__calloc(1, sizeof(*s));
    if (s == NULL) {
        cli_queue_close(q);
        return cli_fail(KVQ_ENOMEM, "push failed");
    }
    s->q = q;
    s->prio = a.prio;
    s->batch = PUSH_BATCH;
    s->what = a.n_files > 0 || a.n_values > 0 ? "value" : c->nul ? "record" : "line";
    int err = 0;
    /* Delays, dedup keys and every push to a priority queue (whose work-queue counters count
     * what goes through them) go through the work-queue layer, one transaction each. */
    if (a.delay > 0 || a.dedup != NULL || type == KVQ_QUEUE_PRIORITY) {
        err = cli_queue_workq(q, &info, &s->w);
        kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
        po.priority = a.prio;
        po.delay_ms = a.delay;
        if (a.dedup != NULL) {
            po.dedup_key = (const uint8_t *)a.dedup;
            po.dedup_len = strlen(a.dedup);
        }
        s->po = po;
        s->batch = 1;
    } else if (a.n_values > 0) {
        s->batch = 1; /* one transaction per argument */
    }
    int sig = 0;
    size_t partial = 0;
    if (err == 0)
        err = push_sources(s, c, &a, argc, argv, &sig, &partial);
    long pushed = s->pushed, duplicates = s->duplicates;
    for (size_t i = 0; i < PUSH_BATCH; i++)
        kvq_buf_dispose(&s->vals[i]);
    kvq__free(s);
    cli_queue_close(q);
    return push_report(c, &a, pushed, duplicates, err, sig, partial);
}
