/* The commands that work on one queue: create, delete, queues, push, pop, peek, len, list,
 * clear, watch, stats. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cli/qops.h"
#include "util/util.h"

static int open_queue(cli *c, const char *name, cli_queue **q, kvq_queue_type *type)
{
    kvq_queue_settings qi;
    int rc = cli_open_named(c, name, q, &qi);
    if (rc == 0 && type != NULL)
        *type = qi.type;
    return rc;
}

int cmd_create(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    int rc = cli_need_name("create", argc, argv, &name);
    if (rc != 0)
        return rc;
    /* Safe defaults: a lease of 30 s, and an item that fails 5 deliveries goes to the dead
     * letters rather than coming back forever. */
    kvq_queue_settings info = KVQ_QUEUE_SETTINGS_INIT;
    info.lease_ms = 30000;
    int settings_given = 0, if_not_exists = 0;
    kvq_queue_type type = KVQ_QUEUE_DURABLE;
    for (int i = 2; i < argc; i++) {
        long long v;
        if (strcmp(argv[i], "--type") == 0 && i + 1 < argc) {
            if (cli_type_parse(argv[++i], &type) != 0)
                return cli_usage("create", "unknown type '%s' (fifo, priority or durable)",
                                 cli_arg(argv[i]));
        } else if (strcmp(argv[i], "--lease") == 0) {
            if (i + 1 >= argc || cli_parse_ms(argv[i + 1], 1, 86400000, &v) != 0)
                return cli_usage("create", "--lease needs a duration from 1ms to 24h (500ms, 30s, 5m)");
            info.lease_ms = v;
            settings_given = 1;
            i++;
        } else if (strcmp(argv[i], "--max-deliveries") == 0) {
            if (i + 1 >= argc || cli_parse_int(argv[i + 1], 0, UINT32_MAX, &v) != 0)
                return cli_usage("create", "--max-deliveries needs a count (0: never)");
            info.max_deliveries = (uint32_t)v;
            settings_given = 1;
            i++;
        } else if (strcmp(argv[i], "--adopt") == 0) {
            info.flags |= KVQ_QUEUE_ADOPT;
        } else if (strcmp(argv[i], "--if-not-exists") == 0 || strcmp(argv[i], "--exist-ok") == 0) {
            if_not_exists = 1;
        } else {
            return cli_usage("create", "unexpected argument '%s'", cli_arg(argv[i]));
        }
    }
    if (type == KVQ_QUEUE_FIFO && settings_given)
        return cli_usage("create", "--lease and --max-deliveries need a durable or priority queue");
    if (type == KVQ_QUEUE_FIFO)
        info.lease_ms = info.max_deliveries = 0;
    info.type = type;
    c->create_db = 1;
    rc = cli_open(c);
    if (rc != 0)
        return rc;
    int err = kvq_queue_create_named(c->db, name, &info);
    if (err == KVQ_EEXISTS && if_not_exists) {
        /* Idempotent: the queue is there, with the type asked for; its settings stay. */
        if (c->json) {
            printf("{\"exists\":");
            cli_json_str(stdout, (const uint8_t *)name, strlen(name));
            printf(",\"type\":\"%s\"}\n", cli_type_name(type));
        } else {
            printf("%s queue '%s' exists already\n", cli_type_name(type), name);
        }
        return 0;
    }
    if (err == KVQ_EEXISTS) {
        fprintf(stderr, "kvq: queue '%s' already exists\n", name);
        cli_json_error(KVQ_EEXISTS, "already_exists", name);
        return EXIT_USAGE;
    }
    if (err == KVQ_EWRONGTYPE) {
        kvq_queue_settings have = KVQ_QUEUE_SETTINGS_INIT;
        if (kvq_queue_get_named(&have, c->db, name) != 0) {
            /* No queue of that name: its subspace holds keys kvq did not write under it. */
            char msg[1400];
            snprintf(msg, sizeof(msg),
                     "cannot create the queue: the subspace (%s'%s',) of a %s queue named '%s' "
                     "already holds keys that kvq did not write under this name. If they are a %s "
                     "queue another program wrote (%s), give --adopt to name it: kvq create %s "
                     "--type %s --adopt; if they are the application's own data, choose another "
                     "name",
                     type == KVQ_QUEUE_DURABLE ? "b" : "", name, cli_type_name(type), name,
                     cli_type_name(type),
                     type == KVQ_QUEUE_FIFO       ? "FoundationDB's queue recipe"
                     : type == KVQ_QUEUE_PRIORITY ? "the priority queue recipe"
                                                  : "the erlfdb queue",
                     name, cli_type_name(type));
            fputs("kvq: ", stderr);
            cli_put_text(stderr, msg);
            fputs(" (wrong_type)\n", stderr);
            cli_json_error(KVQ_EWRONGTYPE, "wrong_type", msg);
            return EXIT_USAGE;
        }
        fprintf(stderr, "kvq: queue '%s' already exists as a %s queue\n", name,
                cli_type_name(have.type));
        cli_json_error(KVQ_EWRONGTYPE, "already_exists", name);
        return EXIT_USAGE;
    }
    if (err != 0) {
        int code = cli_fail(err, "cannot create the queue");
        cli_create_undo(c); /* a new database that could not take its first queue goes */
        return code;
    }
    if (c->json) {
        printf("{\"created\":");
        cli_json_str(stdout, (const uint8_t *)name, strlen(name));
        printf(",\"type\":\"%s\"", cli_type_name(type));
        if (type != KVQ_QUEUE_FIFO)
            printf(",\"lease_ms\":%lld,\"max_deliveries\":%u", (long long)info.lease_ms,
                   info.max_deliveries);
        printf("}\n");
    } else if (type != KVQ_QUEUE_FIFO) {
        printf("created %s queue '%s': lease %lld ms, ", cli_type_name(type), name,
               (long long)info.lease_ms);
        if (info.max_deliveries > 0)
            printf("dead letter after %u deliveries\n", info.max_deliveries);
        else
            printf("items are delivered again without limit\n");
    } else {
        printf("created fifo queue '%s'\n", name);
    }
    return 0;
}

int cmd_alter(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    int rc = cli_need_name("alter", argc, argv, &name);
    if (rc != 0)
        return rc;
    long long lease = -1, maxd = -1;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--lease") == 0) {
            if (i + 1 >= argc || cli_parse_ms(argv[i + 1], 1, 86400000, &lease) != 0)
                return cli_usage("alter", "--lease needs a duration from 1ms to 24h");
            i++;
        } else if (strcmp(argv[i], "--max-deliveries") == 0) {
            if (i + 1 >= argc || cli_parse_int(argv[i + 1], 0, UINT32_MAX, &maxd) != 0)
                return cli_usage("alter", "--max-deliveries needs a count (0: never)");
            i++;
        } else {
            return cli_usage("alter", "unexpected argument '%s'", cli_arg(argv[i]));
        }
    }
    if (lease < 0 && maxd < 0)
        return cli_usage("alter", "nothing to change: give --lease or --max-deliveries");
    rc = cli_open(c);
    if (rc != 0)
        return rc;
    kvq_queue_settings info;
    int err = kvq_queue_alter_named(&info, c->db, name, lease, maxd);
    if (err == KVQ_ENOTFOUND) {
        char msg[1200];
        snprintf(msg, sizeof(msg), "no queue named '%s'", name);
        fprintf(stderr, "kvq: %s\n", msg);
        cli_json_error(err, "no_such_queue", msg);
        return EXIT_NOQUEUE;
    }
    if (err == KVQ_EWRONGTYPE)
        return cli_usage("alter", "'%s' is a fifo queue: it has no lease or deliveries", name);
    if (err != 0)
        return cli_fail(err, "cannot change the queue");
    if (c->json) {
        printf("{\"altered\":");
        cli_json_str(stdout, (const uint8_t *)name, strlen(name));
        printf(",\"lease_ms\":%lld,\"max_deliveries\":%u}\n", (long long)info.lease_ms,
               info.max_deliveries);
    } else {
        printf("%s queue '%s': lease %lld ms, max deliveries %u%s\n", cli_type_name(info.type),
               name, (long long)info.lease_ms, info.max_deliveries,
               info.max_deliveries == 0 ? " (never dead-lettered)" : "");
    }
    return 0;
}

int cmd_delete(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    int rc = cli_need_name("delete", argc, argv, &name);
    if (rc != 0)
        return rc;
    if (argc > 2)
        return cli_usage("delete", "unexpected argument '%s'", cli_arg(argv[2]));
    cli_queue *q;
    rc = open_queue(c, name, &q, NULL);
    if (rc != 0)
        return rc;
    cli_queue_close(q);
    /* The queue's own keys and its name, in one transaction; keys of the application that share
     * its subspace stay. */
    int err = kvq_queue_delete_named(c->db, name);
    if (err != 0)
        return cli_fail(err, "cannot delete the queue");
    if (c->json) {
        printf("{\"deleted\":");
        cli_json_str(stdout, (const uint8_t *)name, strlen(name));
        printf("}\n");
    }
    return 0;
}

typedef struct out_ctx {
    cli *c;
    long n;        /* items written */
    int flush;     /* flush each item, so that a closed output is seen at the item it loses */
    int out_errno; /* the write failed: its errno */
    /* pop: each item is formatted in mem, then written; ends[i] is the count of bytes written
     * to standard output once item i was (so that the bytes a pipe's reader left unread name
     * the items it did not read). NULL: not kept. */
    FILE *mem;
    char *mem_buf;
    size_t mem_len;
    uint64_t *ends;
    uint64_t written;
    kvq_buf line; /* pop: a plain value and its end */
} out_ctx;

/* print_item's return when standard output failed (not a kvq error number). */
#define OUT_FAILED (-2)

static void format_item(cli *c, FILE *f, long i, const uint8_t *v, size_t n)
{
    if (c->json) {
        if (i > 0)
            fputc(',', f);
        if (c->tuple)
            cli_json_tuple(f, v, n);
        else
            cli_json_str(f, v, n);
    } else if (c->tuple) {
        cli_print_tuple(f, v, n);
    } else {
        cli_print_value(f, v, n);
    }
}

static int print_item(const uint8_t *v, size_t n, void *arg)
{
    out_ctx *o = arg;
    if (o->mem != NULL) {
        /* Written with write(2), so that the bytes that reached the pipe are known exactly,
         * even of an item a reader's exit cut (a write to a pipe returns what it wrote). */
        const uint8_t *p;
        size_t len;
        if (!o->c->json && !o->c->tuple) {
            /* A plain value and its end, in one write. */
            uint8_t end = o->c->nul ? 0 : '\n';
            o->line.len = 0;
            if ((n > 0 && kvq_buf_append(&o->line, v, n) != 0) ||
                kvq_buf_append(&o->line, &end, 1) != 0) {
                o->out_errno = ENOMEM;
                return OUT_FAILED;
            }
            p = o->line.data;
            len = o->line.len;
        } else {
            rewind(o->mem);
            format_item(o->c, o->mem, o->n, v, n);
            if (fflush(o->mem) != 0) {
                o->out_errno = ENOMEM;
                return OUT_FAILED;
            }
            p = (const uint8_t *)o->mem_buf;
            len = (size_t)ftello(o->mem);
        }
        for (size_t off = 0; off < len;) {
            ssize_t w = write(STDOUT_FILENO, p + off, len - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0) {
                o->out_errno = errno;
                return OUT_FAILED;
            }
            off += (size_t)w;
            o->written += (uint64_t)w;
        }
        o->ends[o->n] = o->written;
        o->n++;
        return 0;
    }
    format_item(o->c, stdout, o->n, v, n);
    if (o->flush && fflush(stdout) != 0) {
        o->out_errno = errno;
        clearerr(stdout);
        return OUT_FAILED;
    }
    o->n++;
    return 0;
}

/* The items written to a pipe that its reader has not read (wholly): those whose last byte is
 * among the unread bytes at the pipe's end. */
static long unread_items(const out_ctx *o, long unread)
{
    if (unread <= 0 || o->ends == NULL)
        return 0;
    uint64_t read_to = o->written > (uint64_t)unread ? o->written - (uint64_t)unread : 0;
    long i = o->n;
    while (i > 0 && o->ends[i - 1] > read_to)
        i--;
    return o->n - i;
}

/* Waits until the pipe on standard output holds no unread byte (0) or its reader is gone with
 * bytes unread (their count). Nothing tells a writer that a pipe was drained, so this looks
 * every millisecond or so (at most 20 ms apart). */
static long wait_pipe_read(void)
{
    unsigned int sleep_us = 200;
    for (;;) {
        long unread = cli_stdout_unread();
        if (unread <= 0)
            return 0;
        if (cli_stdout_reader_gone()) {
            unread = cli_stdout_unread(); /* what it read just before it went is not lost */
            return unread > 0 ? unread : 0;
        }
        kvq__sleep_us(sleep_us);
        if (sleep_us < 20000)
            sleep_us *= 2;
    }
}

/* Pops up to k items and prints them (print_item), in transactions of up to 1,000 items;
 * before each, whether the output's reader is still there, so that no transaction pops for a
 * reader that is gone. *popped: the items popped. 0 (also when the queue ran empty after
 * some), KVQ_ENOTFOUND when it was empty, OUT_FAILED, or the pop's error. */
static int pop_items(cli_queue *q, size_t k, int max, out_ctx *o, size_t *popped)
{
    int err = 0;
    while (err == 0 && *popped < k) {
        if (*popped > 0 && cli_stdout_reader_gone()) {
            err = OUT_FAILED;
            o->out_errno = EPIPE;
            break;
        }
        size_t want = k - *popped < 1000 ? k - *popped : 1000, got = 0;
        err = cli_queue_pop(q, want, max, print_item, o, &got);
        *popped += got;
        if (err == 0 && got < want)
            break;
    }
    if (err == KVQ_ENOTFOUND && *popped > 0)
        err = 0;
    return err;
}

/* The bytes of the items written to a pipe that its reader left unread. Written is not read:
 * a reader that exits (head -c, a crashed program) leaves the items it did not read in the
 * pipe, lost; so this waits until it read them, or left (then *err is OUT_FAILED). */
static long pop_unread(cli *c, out_ctx *o, int is_pipe, int *err)
{
    long unread = 0;
    if (*err == OUT_FAILED && o->out_errno == EPIPE && is_pipe) {
        unread = cli_stdout_unread(); /* the reader is gone: what it left in the pipe */
    } else if (*err != OUT_FAILED && is_pipe && o->n > 0) {
        if (c->json) {
            printf("]\n");
            if (fflush(stdout) == 0)
                o->written += 2;
        }
        unread = wait_pipe_read();
        if (unread > 0) {
            *err = OUT_FAILED;
            o->out_errno = EPIPE;
        }
    }
    return unread;
}

/* Popped items are gone from the queue: says how many never reached the output's reader (left:
 * written but left unread, reached: read) and returns the exit code. */
static int pop_lost(const out_ctx *o, size_t popped, long left, long reached)
{
    unsigned long long not_written = (unsigned long long)popped - (unsigned long long)o->n;
    unsigned long long lost = not_written + (unsigned long long)left;
    if (not_written > 0 || o->out_errno != EPIPE || left == 0)
        fprintf(stderr,
                "kvq pop: cannot write to standard output (%s): %llu popped item%s lost: "
                "%llu not written, %ld written but left unread in the pipe (%ld read from "
                "it)\n",
                strerror(o->out_errno), lost, lost == 1 ? " was" : "s were", not_written, left,
                reached);
    else
        fprintf(stderr,
                "kvq pop: the reader of standard output went away: %ld popped item%s "
                "written but left unread in the pipe, lost (%ld read from it)\n",
                left, left == 1 ? " was" : "s were", reached);
    return o->out_errno == EPIPE ? EXIT_OUTPUT_GONE : EXIT_DB;
}

int cmd_pop(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    int rc = cli_need_name("pop", argc, argv, &name);
    if (rc != 0)
        return rc;
    long long k = 1;
    int max = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0) {
            if (i + 1 >= argc || cli_parse_int(argv[i + 1], 1, 100000, &k) != 0)
                return cli_usage("pop", "-n needs a count from 1 to 100000");
            i++;
        } else if (strcmp(argv[i], "--max") == 0) {
            max = 1;
        } else if (strcmp(argv[i], "--tuple") == 0) {
            c->tuple = 1;
        } else {
            return cli_usage("pop", "unexpected argument '%s'", cli_arg(argv[i]));
        }
    }
    cli_queue *q;
    kvq_queue_type type;
    rc = open_queue(c, name, &q, &type);
    if (rc != 0)
        return rc;
    if (max && type != KVQ_QUEUE_PRIORITY) {
        cli_queue_close(q);
        return cli_usage("pop", "--max applies to priority queues; '%s' is a %s queue", name,
                         cli_type_name(type));
    }
    /* A closed output is an error to report (with what it cost), not a silent SIGPIPE. */
    signal(SIGPIPE, SIG_IGN);
    int is_pipe = cli_stdout_is_pipe();
    if (is_pipe && cli_stdout_reader_gone()) {
        cli_queue_close(q);
        fprintf(stderr, "kvq pop: standard output is closed: nothing popped\n");
        return EXIT_OUTPUT_GONE;
    }
    out_ctx o = { .c = c, .flush = 1 };
    o.ends = kvq__calloc((size_t)k, sizeof(*o.ends));
    o.mem = o.ends != NULL ? open_memstream(&o.mem_buf, &o.mem_len) : NULL;
    if (o.mem == NULL) {
        kvq__free(o.ends);
        cli_queue_close(q);
        return cli_fail(KVQ_ENOMEM, "pop failed");
    }
    if (c->json) {
        printf("[");
        o.written = 1;
    }
    /* The items go out with write(2): what stdio holds goes first. */
    if (fflush(stdout) != 0) {
        int e = errno;
        fclose(o.mem);
        free(o.mem_buf);
        kvq__free(o.ends);
        cli_queue_close(q);
        fprintf(stderr, "kvq pop: cannot write to standard output (%s): nothing popped\n",
                strerror(e));
        return e == EPIPE ? EXIT_OUTPUT_GONE : EXIT_DB;
    }
    size_t popped = 0;
    int err = pop_items(q, (size_t)k, max, &o, &popped);
    cli_queue_close(q);
    long unread = pop_unread(c, &o, is_pipe, &err);
    cli_tuple_report("pop");
    long left = unread_items(&o, unread), reached = o.n - left;
    fclose(o.mem);
    free(o.mem_buf);
    kvq__free(o.ends);
    kvq_buf_dispose(&o.line);
    if (err == OUT_FAILED)
        return pop_lost(&o, popped, left, reached);
    if (c->json && !(is_pipe && o.n > 0))
        printf("]\n");
    if (err == KVQ_ENOTFOUND) {
        if (!c->json)
            fprintf(stderr, "kvq: queue '%s' is empty\n", name);
        return EXIT_EMPTY;
    }
    if (err != 0 && popped > 0)
        cli_json_errors(0); /* the items popped were printed: no second JSON value */
    if (err != 0)
        return cli_fail(err, "pop failed");
    return 0;
}

int cmd_peek(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    int rc = cli_need_name("peek", argc, argv, &name);
    if (rc != 0)
        return rc;
    int max = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--max") == 0)
            max = 1;
        else if (strcmp(argv[i], "--tuple") == 0)
            c->tuple = 1;
        else
            return cli_usage("peek", "unexpected argument '%s'", cli_arg(argv[i]));
    }
    cli_queue *q;
    kvq_queue_type type;
    rc = open_queue(c, name, &q, &type);
    if (rc != 0)
        return rc;
    if (max && type != KVQ_QUEUE_PRIORITY) {
        cli_queue_close(q);
        return cli_usage("peek", "--max applies to priority queues; '%s' is a %s queue", name,
                         cli_type_name(type));
    }
    kvq_buf v = KVQ_BUF_INIT;
    int err = cli_queue_peek(q, max, &v);
    cli_queue_close(q);
    if (err == KVQ_ENOTFOUND) {
        if (c->json)
            printf("null\n");
        else
            fprintf(stderr, "kvq: queue '%s' is empty\n", name);
        kvq_buf_dispose(&v);
        return EXIT_EMPTY;
    }
    if (err == 0) {
        format_item(c, stdout, 0, v.data, v.len);
        if (c->json)
            printf("\n");
        cli_tuple_report("peek");
    }
    kvq_buf_dispose(&v);
    if (err != 0)
        return cli_fail(err, "peek failed");
    return 0;
}

int cmd_len(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    int rc = cli_need_name("len", argc, argv, &name);
    if (rc != 0)
        return rc;
    if (argc > 2)
        return cli_usage("len", "unexpected argument '%s'", cli_arg(argv[2]));
    cli_queue *q;
    rc = open_queue(c, name, &q, NULL);
    if (rc != 0)
        return rc;
    uint64_t n = 0;
    int err = cli_queue_len(q, &n);
    cli_queue_close(q);
    if (err != 0)
        return cli_fail(err, "len failed");
    if (c->json)
        printf("{\"length\":%llu}\n", (unsigned long long)n);
    else
        printf("%llu\n", (unsigned long long)n);
    return 0;
}

int cmd_list(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    int rc = cli_need_name("list", argc, argv, &name);
    if (rc != 0)
        return rc;
    long long limit = 0;
    int inflight = 0, delayed = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--limit") == 0) {
            if (i + 1 >= argc || cli_parse_int(argv[i + 1], 1, INT64_MAX, &limit) != 0)
                return cli_usage("list", "--limit needs a positive count");
            i++;
        } else if (strcmp(argv[i], "--in-flight") == 0) {
            inflight = 1;
        } else if (strcmp(argv[i], "--delayed") == 0) {
            delayed = 1;
        } else if (strcmp(argv[i], "--tuple") == 0) {
            c->tuple = 1;
        } else {
            return cli_usage("list", "unexpected argument '%s'", cli_arg(argv[i]));
        }
    }
    if (inflight + delayed > 1 || ((inflight || delayed) && limit > 0))
        return cli_usage("list", "--in-flight, --delayed and --limit exclude each other");
    if ((inflight || delayed) && c->tuple)
        return cli_usage("list",
                         "--tuple applies to the ready items, not --in-flight or --delayed");
    if (inflight || delayed)
        return cli_list_workq(c, name, delayed);
    cli_queue *q;
    rc = open_queue(c, name, &q, NULL);
    if (rc != 0)
        return rc;
    out_ctx o = { .c = c };
    if (c->json)
        printf("[");
    int err = cli_queue_list(q, (size_t)limit, print_item, &o);
    if (c->json)
        printf("]\n");
    cli_tuple_report("list");
    cli_queue_close(q);
    if (err != 0)
        return cli_fail(err, "list failed");
    return 0;
}

int cmd_clear(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    int rc = cli_need_name("clear", argc, argv, &name);
    if (rc != 0)
        return rc;
    if (argc > 2)
        return cli_usage("clear", "unexpected argument '%s'", cli_arg(argv[2]));
    cli_queue *q;
    kvq_queue_settings info;
    rc = cli_open_named(c, name, &q, &info);
    if (rc != 0)
        return rc;
    /* A purge: ready, in flight, delayed and dead items alike, counted as cleared (durable and
     * priority queues); a fifo queue has only ready items. */
    uint64_t n = 0;
    kvq_workq *w = NULL;
    int err = info.type == KVQ_QUEUE_FIFO ? 0 : cli_queue_workq(q, &info, &w);
    if (err == 0 && w != NULL)
        err = kvq_workq_purge(&n, w);
    else if (err == 0 && (err = cli_queue_len(q, &n)) == 0)
        err = cli_queue_clear(q);
    cli_queue_close(q);
    if (err != 0)
        return cli_fail(err, "clear failed");
    if (c->json) {
        printf("{\"cleared\":");
        cli_json_str(stdout, (const uint8_t *)name, strlen(name));
        printf(",\"items\":%llu}\n", (unsigned long long)n);
    } else {
        printf("%llu\n", (unsigned long long)n);
    }
    return 0;
}

int cmd_watch(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    int rc = cli_need_name("watch", argc, argv, &name);
    if (rc != 0)
        return rc;
    long long timeout = -1;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--timeout") == 0) {
            if (i + 1 >= argc || cli_parse_ms(argv[i + 1], 0, INT64_MAX, &timeout) != 0)
                return cli_usage("watch", "--timeout needs a duration (500ms, 30s, 5m)");
            i++;
        } else {
            return cli_usage("watch", "unexpected argument '%s'", cli_arg(argv[i]));
        }
    }
    cli_queue *q;
    rc = open_queue(c, name, &q, NULL);
    if (rc != 0)
        return rc;
    int err = cli_queue_watch(q, timeout);
    uint64_t n = 0;
    if (err == 0)
        err = cli_queue_len(q, &n);
    cli_queue_close(q);
    if (err == KVQ_ETIMED_OUT) {
        if (c->json)
            printf("{\"changed\":false}\n");
        return EXIT_EMPTY;
    }
    if (err != 0)
        return cli_fail(err, "watch failed");
    if (c->json)
        printf("{\"changed\":true,\"length\":%llu}\n", (unsigned long long)n);
    else
        printf("%llu\n", (unsigned long long)n);
    return 0;
}

