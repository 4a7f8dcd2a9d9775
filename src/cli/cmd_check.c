/* kvq check: reads every key and value of the database, so that the engine verifies each
 * value's checksum (a flipped bit on disk is reported as damage, never returned as data), checks
 * the queue registry, and checks each durable queue's counters against its items. Exit 0 when
 * all is well, 3 on damage, with what to do about it. */
#include <string.h>

#include <stdlib.h>

#include "cli/qops.h"
#include "layers/queue/queue_salvage.h"
#include "util/util.h"

#define PAGE 1000

typedef struct check_ctx {
    cli *c;
    unsigned long long keys, bytes, queues, problems;
} check_ctx;

static const char *db_url(const cli *c)
{
    const char *url = c->db_url != NULL ? c->db_url : getenv("KVQ_DB");
    return url != NULL ? url : "./kvq-data";
}

static int count_salvaged(kvq_bytes value, int64_t priority, void *payload)
{
    (void)value;
    (void)priority;
    (void)payload;
    return 0;
}

/* A queue with damage: how much of it a salvage reads (read-only), and the command that copies
 * that out. */
static void salvage_report(const cli *c, const char *name)
{
    kvq__queue_salvage_report rep;
    int rc = kvq__queue_salvage(db_url(c), name, count_salvaged, NULL, &rep);
    if (rc != 0) {
        fprintf(stderr, "kvq check: queue '%s' cannot be salvaged: %s\n", name,
                kvq_last_error());
        return;
    }
    fprintf(stderr,
            "kvq check: queue '%s': %llu items can be read, %s%llu are damaged%s%s; copy them "
            "out with 'kvq export --salvage %s > %s.jsonl'\n",
            name, (unsigned long long)rep.items, rep.skipped_exact ? "" : "at least ",
            (unsigned long long)rep.skipped, rep.st.where[0] != '\0' ? ": " : "",
            rep.st.where, name, name);
}

static int no_row(void *arg, kvq_bytes key, kvq_bytes value)
{
    (void)arg;
    (void)key;
    (void)value;
    return 0;
}

/* Names what is damaged in the whole key space (which file, which keys), read-only. */
static void name_damage(const cli *c)
{
    kvq__salvage *sv = NULL;
    if (kvq__salvage_open(&sv, db_url(c)) != 0) {
        fprintf(stderr, "kvq check: the damage cannot be located: %s\n", kvq_last_error());
        return;
    }
    kvq__salvage_stats st;
    memset(&st, 0, sizeof(st));
    static const uint8_t lo = 0x00, hi = 0xff;
    if (kvq__salvage_range(sv, &lo, 1, &hi, 1, no_row, NULL, &st) != 0)
        fprintf(stderr, "kvq check: the damage cannot be located: %s\n", kvq_last_error());
    else if (st.where[0] != '\0')
        fprintf(stderr, "kvq check: damaged: %s\n", st.where);
    kvq__salvage_close(sv);
}

static void problem(check_ctx *x, const char *fmt, const char *a, const char *b)
{
    x->problems++;
    fprintf(stderr, "kvq check: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
}

/* Every key in [0x00, 0xff): pages of read-only transactions, each continuing after the last
 * key of the one before (the database may change meanwhile; each page is one snapshot). */
static int scan_all(check_ctx *x)
{
    kvq_txn *txn;
    int rc = kvq_txn_create(&txn, x->c->db);
    if (rc != 0)
        return rc;
    kvq_buf begin = KVQ_BUF_INIT;
    static const uint8_t lo = 0x00, hi = 0xff;
    rc = kvq_buf_append(&begin, &lo, 1);
    while (rc == 0) {
        const kvq_kv *kvs;
        size_t n = 0;
        bool more = false;
        rc = kvq_txn_get_range(&kvs, &n, &more, txn, begin.data, begin.len, &hi, 1, PAGE,
                               KVQ_SNAPSHOT);
        if (rc != 0)
            break;
        for (size_t i = 0; i < n; i++) {
            x->keys++;
            x->bytes += kvs[i].key.len + kvs[i].value.len;
        }
        if (!more || n == 0)
            break;
        /* The next page starts just after the last key, in a fresh transaction. */
        kvq_bytes last = kvs[n - 1].key;
        begin.len = 0;
        rc = kvq_buf_append(&begin, last.data, last.len);
        if (rc == 0)
            rc = kvq_buf_append(&begin, &lo, 1);
        kvq_txn_reset(txn);
    }
    kvq_buf_dispose(&begin);
    kvq_txn_destroy(txn);
    return rc;
}

typedef struct count_ctx {
    uint64_t n;
} count_ctx;

static int count_item(kvq_bytes value, int64_t priority, void *payload)
{
    (void)value;
    (void)priority;
    ((count_ctx *)payload)->n++;
    return 0;
}

static int check_queue(const char *name, const kvq_queue_settings *s, void *arg)
{
    check_ctx *x = arg;
    x->queues++;
    kvq_queue *q = NULL;
    int rc = kvq_queue_open_named(&q, NULL, x->c->db, name);
    if (rc != 0) {
        problem(x, "queue '%s' cannot be opened: %s", name, kvq_last_error());
        return rc == KVQ_EDAMAGED ? 0 : rc;
    }
    /* Items read one by one (their values verified), counted, and for a durable queue set
     * against its counters, all in one transaction so that they agree (a queue of more than
     * what one transaction reads in 5 seconds is only scanned). */
    kvq_txn *txn;
    rc = kvq_txn_create(&txn, x->c->db);
    count_ctx cc = { 0 };
    uint64_t len = 0;
    /* A reader that finds due items makes them ready and asks to read again (1020). */
    for (int attempt = 0; rc == 0 && attempt < 5; attempt++) {
        cc.n = 0;
        rc = kvq_queue_iterate_txn(q, txn, count_item, &cc);
        if (rc == 0 && s->type == KVQ_QUEUE_DURABLE)
            rc = kvq_queue_len_txn(&len, q, txn, KVQ_SNAPSHOT);
        if (rc != KVQ_ENOT_COMMITTED)
            break;
        kvq_txn_reset(txn);
        rc = 0;
    }
    if (rc == 0 && s->type == KVQ_QUEUE_DURABLE && len != cc.n) {
        char a[64], b[128];
        snprintf(a, sizeof(a), "%s", name);
        snprintf(b, sizeof(b), "say %llu items (npush - npop) where %llu are stored",
                 (unsigned long long)len, (unsigned long long)cc.n);
        problem(x, "the counters of durable queue '%s' %s", a, b);
        /* Items missing from a scan that ended early (a damaged page SQLite took for the
         * end): what a salvage reads around it. */
        salvage_report(x->c, name);
    }
    if (rc == KVQ_ETRANSACTION_TOO_OLD)
        rc = 0;
    if (rc == KVQ_EDAMAGED) {
        problem(x, "queue '%s': %s", name, kvq_last_error());
        rc = 0;
        if (x->c->db_url == NULL || strncmp(x->c->db_url, "fdb:", 4) != 0)
            salvage_report(x->c, name);
    }
    kvq_txn_destroy(txn);
    kvq_queue_close(q);
    return rc;
}

static int report_queue(const char *name, void *arg)
{
    salvage_report(arg, name);
    return 0;
}

/* A database too damaged to open (the log store refuses a log damaged inside its durable part):
 * what is damaged, and each queue's salvage, read-only. */
static int check_unopenable(cli *c)
{
    name_damage(c);
    kvq__salvage_stats st;
    memset(&st, 0, sizeof(st));
    if (kvq__queue_salvage_names(db_url(c), report_queue, c, &st) != 0)
        fprintf(stderr, "kvq check: the queue registry cannot be read: %s\n", kvq_last_error());
    fprintf(stderr,
            "kvq check: the database cannot be opened. Every item that can still be read can "
            "be copied out with 'kvq export --salvage NAME > NAME.jsonl' (read-only; it counts "
            "what it skips) and into a new database with 'kvq --db NEW create NAME; kvq --db "
            "NEW import NAME < NAME.jsonl', or restore a backup. See docs/errors.md, 'A "
            "damaged database'.\n");
    return EXIT_DB;
}

int cmd_check(cli *c, int argc, char **argv)
{
    if (argc > 1)
        return cli_usage("check", "unexpected argument '%s'", cli_arg(argv[1]));
    int rc = cli_open(c);
    if (rc == EXIT_DB && kvq_last_error_code() == KVQ_EDAMAGED)
        return check_unopenable(c);
    if (rc != 0)
        return rc;
    check_ctx x = { c, 0, 0, 0, 0 };
    int err = scan_all(&x);
    if (err == KVQ_EDAMAGED) {
        problem(&x, "%s%s", kvq_last_error(), "");
        err = 0;
        if (c->db_url == NULL || strncmp(c->db_url, "fdb:", 4) != 0)
            name_damage(c);
    }
    if (err == 0)
        err = kvq_queue_list_named(c->db, check_queue, &x);
    if (err == KVQ_EDAMAGED) {
        problem(&x, "the queue registry: %s%s", kvq_last_error(), "");
        err = 0;
    }
    if (err != 0)
        return cli_fail(err, "check failed");
    if (c->json)
        printf("{\"ok\":%s,\"keys\":%llu,\"bytes\":%llu,\"queues\":%llu,\"problems\":%llu}\n",
               x.problems == 0 ? "true" : "false", x.keys, x.bytes, x.queues, x.problems);
    else if (x.problems == 0)
        printf("ok: %llu keys (%llu bytes) read and verified, %llu queues\n", x.keys, x.bytes,
               x.queues);
    if (x.problems > 0) {
        fprintf(stderr,
                "kvq check: %llu problems. A damaged row cannot be read; every other item "
                "of a queue can be copied out with 'kvq export --salvage NAME > NAME.jsonl' "
                "(read-only; it counts what it skips) and into a new database with 'kvq --db "
                "NEW create NAME; kvq --db NEW import NAME < NAME.jsonl', or restore a backup. "
                "See docs/errors.md, 'A damaged database'.\n",
                x.problems);
        return EXIT_DB;
    }
    return 0;
}
