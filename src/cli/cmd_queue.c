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
        if (kvq_queue_get_named(&have, c->db, name) != 0)
            return cli_fail(err, "cannot create the queue (--adopt names an existing queue of "
                                 "this type that another program wrote there)");
        fprintf(stderr, "kvq: queue '%s' already exists as a %s queue\n", name,
                cli_type_name(have.type));
        cli_json_error(KVQ_EWRONGTYPE, "already_exists", name);
        return EXIT_USAGE;
    }
    if (err != 0)
        return cli_fail(err, "cannot create the queue");
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
} out_ctx;

/* print_item's return when standard output failed (not a kvq error number). */
#define OUT_FAILED (-2)

static int print_item(const uint8_t *v, size_t n, void *arg)
{
    out_ctx *o = arg;
    if (o->c->json) {
        if (o->n > 0)
            printf(",");
        cli_json_str(stdout, v, n);
    } else {
        cli_print_value(stdout, v, n);
    }
    if (o->flush && fflush(stdout) != 0) {
        o->out_errno = errno;
        clearerr(stdout);
        return OUT_FAILED;
    }
    o->n++;
    return 0;
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
    out_ctx o = { c, 0, 1, 0 };
    if (c->json)
        printf("[");
    size_t popped = 0;
    int err = 0;
    /* In transactions of up to 1,000 items; before each, whether the output's reader is still
     * there, so that no transaction pops for a reader that is gone. */
    while (err == 0 && popped < (size_t)k) {
        if (popped > 0 && cli_stdout_reader_gone()) {
            err = OUT_FAILED;
            o.out_errno = EPIPE;
            break;
        }
        size_t want = (size_t)k - popped < 1000 ? (size_t)k - popped : 1000, got = 0;
        err = cli_queue_pop(q, want, max, print_item, &o, &got);
        popped += got;
        if (err == 0 && got < want)
            break;
    }
    if (err == KVQ_ENOTFOUND && popped > 0)
        err = 0;
    cli_queue_close(q);
    if (err == OUT_FAILED) {
        /* Popped items are gone from the queue: say how many never reached the output. */
        unsigned long long lost = (unsigned long long)popped - (unsigned long long)o.n;
        fprintf(stderr,
                "kvq pop: cannot write to standard output (%s): %llu popped item%s not written "
                "and lost (%ld written before)\n",
                strerror(o.out_errno), lost, lost == 1 ? " was" : "s were", o.n);
        return o.out_errno == EPIPE ? EXIT_OUTPUT_GONE : EXIT_DB;
    }
    if (c->json)
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
        if (c->json) {
            cli_json_str(stdout, v.data, v.len);
            printf("\n");
        } else {
            cli_print_value(stdout, v.data, v.len);
        }
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
        } else {
            return cli_usage("list", "unexpected argument '%s'", cli_arg(argv[i]));
        }
    }
    if (inflight + delayed > 1 || ((inflight || delayed) && limit > 0))
        return cli_usage("list", "--in-flight, --delayed and --limit exclude each other");
    if (inflight || delayed)
        return cli_list_workq(c, name, delayed);
    cli_queue *q;
    rc = open_queue(c, name, &q, NULL);
    if (rc != 0)
        return rc;
    out_ctx o = { c, 0, 0, 0 };
    if (c->json)
        printf("[");
    int err = cli_queue_list(q, (size_t)limit, print_item, &o);
    if (c->json)
        printf("]\n");
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

