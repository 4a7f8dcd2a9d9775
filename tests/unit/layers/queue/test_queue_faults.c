/* The queue layers under injected commit faults (1020, 1021 having committed, 1021 not having
 * committed):
 *  - the transactional outbox: a pop and the application's own write ("processed") commit in
 *    one transaction; after draining, every item was processed exactly once, none lost;
 *  - idempotency: convenience pushes and pops (single, pop_k, consume_k, high-contention) under
 *    a fault rate of 0.5: no item pushed twice, none lost, none popped twice.
 * The seed is printed with the command that replays it; KVQ_TEST_SCALE multiplies the items.
 * Prints "faults: runs=... injected=... violations=0 ..." at the end. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>

#include "test_queue_conc.h"
#include "test_scale.h"

/* Totals for the summary line printed at the end ("faults: ... violations=0"). */
static struct {
    int runs, violations, checkers, caught;
    unsigned long long injected, retries;
} tot;

/* ---- the outbox --------------------------------------------------------------------------- */

#define OUTBOX_ITEMS   ((uint32_t)kvq_test_scaled(1000))
#define OUTBOX_WORKERS 4

typedef struct ob {
    kvq_queue *q;
    int empty;
    int dup; /* the item was already marked processed: a duplicate delivery */
    uint32_t last;
} ob;

/* One transaction: pop an item and record it as processed, with a count. */
static int process_one(kvq_txn *txn, void *arg)
{
    ob *o = arg;
    o->empty = 0;
    o->dup = 0;
    kvq_bytes v;
    int64_t prio;
    int rc = kvq_queue_get_type(o->q) == KVQ_QUEUE_PRIORITY
                 ? kvq_queue_pop_prio_txn(&v, &prio, o->q, txn, KVQ_QUEUE_MIN)
                 : kvq_queue_pop_txn(&v, o->q, txn);
    if (rc == KVQ_ENOTFOUND) {
        o->empty = 1;
        return 0;
    }
    if (rc != 0)
        return rc;
    uint32_t p, s;
    if (tq_parse(v.data, v.len, &p, &s) != 0)
        return KVQ_EUSER;
    uint8_t key[12] = { 'p', 'r', 'o', 'c', 'e', 's', 's', 'e', 'd', '/', 0, 0 };
    key[10] = (uint8_t)(s >> 8);
    key[11] = (uint8_t)s;
    kvq_bytes old;
    int present;
    rc = kvq_txn_get(&old, &present, txn, key, sizeof(key), 0);
    if (rc == 0 && present)
        o->dup = 1;
    if (rc == 0)
        rc = kvq_txn_set(txn, key, sizeof(key), (const uint8_t *)"1", 1);
    static const uint8_t one[8] = { 1 };
    if (rc == 0)
        rc = kvq_txn_atomic_op(txn, (const uint8_t *)"processed-count", 15, one, 8, KVQ_MUT_ADD);
    o->last = s;
    return rc;
}

typedef struct obw {
    kvq_db *db;
    kvq_queue_type type;
    int dups, rc;
} obw;

static void *outbox_worker(void *arg)
{
    obw *w = arg;
    kvq_queue *q;
    w->rc = kvq_queue_open(&q, w->db, w->type, NULL, NULL);
    ob o = { q, 0, 0, 0 };
    while (w->rc == 0) {
        w->rc = kvq_db_transact(w->db, process_one, &o);
        if (w->rc != 0 || o.empty)
            break;
        w->dups += o.dup;
    }
    kvq_queue_close(q);
    return NULL;
}

typedef struct count_arg {
    size_t keys;
    uint64_t counter;
} count_arg;

static int count_processed(kvq_txn *txn, void *arg)
{
    count_arg *c = arg;
    const kvq_kv *kvs;
    int rc = kvq_txn_get_range(&kvs, &c->keys, NULL, txn, (const uint8_t *)"processed/", 10,
                               (const uint8_t *)"processed0", 10, 0, 0);
    kvq_bytes v;
    int present;
    if (rc == 0)
        rc = kvq_txn_get(&v, &present, txn, (const uint8_t *)"processed-count", 15, 0);
    c->counter = rc == 0 && present ? kvq__le_get(v.data, v.len) : 0;
    return rc;
}

/* Returns the number of problems the checks found. */
static int outbox_run(kvq_queue_type type, const char *name, unsigned int test_flags)
{
    tq_mkdir();
    uint64_t seed = kt_seed_for(name);
    kvq_db_options dbo = KVQ_DB_OPTIONS_INIT;
    kvq_testing_options t = KVQ_TESTING_OPTIONS_INIT;
    t.fault_rate = test_flags ? 0 : 0.3;
    t.fault_kinds = KVQ_FAULT_ALL;
    t.fault_seed = seed;
    dbo.retry_limit = -1;
    dbo.max_retry_delay_ms = 50;
    t.flags = test_flags;
    kvq_db *db = NULL;
    assert_ok(kvq_db_open_testing(&db, tq_dir, &dbo, &t));
    kvq_queue *q;
    assert_ok(kvq_queue_open(&q, db, type, NULL, NULL));
    /* The pushes go through the faults too (idempotent convenience form). */
    uint8_t v[16];
    for (uint32_t s = 0; s < OUTBOX_ITEMS; s++) {
        tq_value(v, 0, s);
        if (type == KVQ_QUEUE_PRIORITY)
            assert_ok(kvq_queue_push_prio(q, v, sizeof(v), (int64_t)(s % 5)));
        else
            assert_ok(kvq_queue_push(q, v, sizeof(v)));
    }
    uint64_t len = 0;
    assert_ok(kvq_queue_len(&len, q));
    assert_int_equal(len, OUTBOX_ITEMS);
    obw w[OUTBOX_WORKERS];
    pthread_t th[OUTBOX_WORKERS];
    for (int i = 0; i < OUTBOX_WORKERS; i++) {
        w[i] = (obw){ db, type, 0, 0 };
        assert_int_equal(pthread_create(&th[i], NULL, outbox_worker, &w[i]), 0);
    }
    int dups = 0;
    for (int i = 0; i < OUTBOX_WORKERS; i++) {
        pthread_join(th[i], NULL);
        if (w[i].rc != 0)
            fail_msg("outbox worker: %s (%s)", kvq_errname(w[i].rc), kvq_last_error());
        dups += w[i].dups;
    }
    count_arg c = { 0, 0 };
    assert_ok(kvq_db_transact(db, count_processed, &c));
    kvq_db_stats st;
    assert_ok(kvq_db_get_stats(&st, db));
    printf("# outbox %s: %d items, %llu faults injected, %llu retries; processed keys %zu, "
           "counter %llu, duplicates %d\n",
           name, OUTBOX_ITEMS, (unsigned long long)st.injected_faults,
           (unsigned long long)st.retries, c.keys, (unsigned long long)c.counter, dups);
    fflush(stdout);
    int bad = dups != 0;
    bad += c.keys != OUTBOX_ITEMS;
    bad += c.counter != OUTBOX_ITEMS;
    assert_ok(kvq_queue_len(&len, q));
    bad += len != 0;
    if (!test_flags) {
        tot.runs++;
        tot.violations += bad;
        tot.injected += st.injected_faults;
        tot.retries += st.retries;
    }
    if (!test_flags)
        assert_true(st.injected_faults > 0);
    kvq_queue_close(q);
    kvq_db_close(db);
    tq_rmdir();
    return bad;
}

static void outbox(kvq_queue_type type, const char *name)
{
    assert_int_equal(outbox_run(type, name, 0), 0);
}

/* The checks can fail: with the engine's conflict check off, concurrent pops take one item
 * twice and the outbox sees it processed twice. */
static void test_outbox_checker_catches_broken_engine(void **state)
{
    (void)state;
    int bad = outbox_run(KVQ_QUEUE_FIFO, "outbox-broken", KVQ_TEST_SKIP_CONFLICT_CHECK);
    tot.checkers++;
    tot.caught += bad != 0;
    printf("# the outbox checks %s the broken engine (%d problems)\n", bad ? "caught" : "MISSED",
           bad);
    assert_true(bad > 0);
}

static void test_outbox_durable(void **state)
{
    (void)state;
    outbox(KVQ_QUEUE_DURABLE, "outbox-durable");
}

static void test_outbox_fifo(void **state)
{
    (void)state;
    outbox(KVQ_QUEUE_FIFO, "outbox-fifo");
}

static void test_outbox_priority(void **state)
{
    (void)state;
    outbox(KVQ_QUEUE_PRIORITY, "outbox-priority");
}

/* ---- idempotent convenience forms ------------------------------------------------------------ */

/* Runs the workload; returns the checker's verdict (0: all good). */
static int idem_run(conc_cfg c, unsigned int kinds)
{
    c.stop_on_empty = 1;
    c.items = (size_t)kvq_test_scaled((long)c.items);
    c.items -= c.items % (size_t)c.producers;
    tq_mkdir();
    uint64_t seed = kt_seed_for(c.name);
    /* Producers and consumers have their own handles, each with its own fault stream. */
    kvq_db *pdb = tq_open_db(0.5, kinds, seed);
    kvq_db *cdb = tq_open_db(0.5, kinds, seed + 1);
    char err[200] = "";
    size_t consumed = 0;
    conc_log logs[2];
    memset(logs, 0, sizeof(logs));
    /* Push everything first (2 producers in turn), then drain with two consumers in turn:
     * faults, not concurrency, are what this test is about (the thread tests cover that). */
    for (uint32_t p = 0; p < (uint32_t)c.producers; p++)
        if (conc_produce(&c, pdb, p, err, sizeof(err)) != 0)
            fail_msg("%s: %s", c.name, err);
    kvq_queue *q;
    assert_ok(kvq_queue_open(&q, pdb, c.type, NULL, NULL));
    uint64_t len = 0;
    assert_ok(kvq_queue_len(&len, q));
    kvq_queue_close(q);
    int bad = 0;
    if (len != c.items) {
        fprintf(stderr, "%s: %llu items in the queue after %zu pushes\n", c.name,
                (unsigned long long)len, c.items);
        bad = 1;
        c.items = (size_t)len; /* drain what is there */
    }
    for (int i = 0; i < c.consumers; i++)
        conc_consume(&c, cdb, i, &consumed, &logs[i]);
    if (!bad)
        bad = conc_check(&c, logs, c.consumers);
    kvq_db_stats ps, cs;
    assert_ok(kvq_db_get_stats(&ps, pdb));
    assert_ok(kvq_db_get_stats(&cs, cdb));
    printf("# %s: %zu items; pushes: %llu faults, %llu retries; pops: %llu faults, %llu "
           "retries\n",
           c.name, c.items, (unsigned long long)ps.injected_faults, (unsigned long long)ps.retries,
           (unsigned long long)cs.injected_faults, (unsigned long long)cs.retries);
    fflush(stdout);
    if (kinds == KVQ_FAULT_ALL) {
        tot.runs++;
        tot.violations += bad;
        tot.injected += ps.injected_faults + cs.injected_faults;
        tot.retries += ps.retries + cs.retries;
    }
    for (int i = 0; i < c.consumers; i++)
        conc_log_free(&logs[i]);
    kvq_db_close(pdb);
    kvq_db_close(cdb);
    tq_rmdir();
    assert_true(ps.injected_faults > 0 && cs.injected_faults > 0);
    return bad;
}

static void idem(conc_cfg c)
{
    assert_int_equal(idem_run(c, KVQ_FAULT_ALL), 0);
}

/* The checker can fail: without the markers, 1021s that had committed duplicate pushes. */
static void test_checker_catches_broken_idempotency(void **state)
{
    (void)state;
    tq_test_flags = KVQ_TEST_DROP_IDEMPOTENCY_MARKER;
    int bad = idem_run((conc_cfg){ "broken-idem-fifo", KVQ_QUEUE_FIFO, 0, 400, 2, 1, 1, 1, 0 },
                       KVQ_FAULT_UNKNOWN_COMMITTED);
    tq_test_flags = 0;
    tot.checkers++;
    tot.caught += bad != 0;
    printf("# the checker %s the broken idempotency\n", bad ? "caught" : "MISSED");
    assert_int_equal(bad, 1);
}

static void test_idem_durable(void **state)
{
    (void)state;
    idem((conc_cfg){ "idem-durable", KVQ_QUEUE_DURABLE, 0, 1500, 2, 2, 1, 1, 0 });
    idem((conc_cfg){ "idem-durable-batch", KVQ_QUEUE_DURABLE, 0, 2000, 2, 2, 7, 5, 0 });
}

static void test_idem_fifo(void **state)
{
    (void)state;
    idem((conc_cfg){ "idem-fifo", KVQ_QUEUE_FIFO, 0, 1500, 2, 2, 1, 1, 0 });
    idem((conc_cfg){ "idem-fifo-batch", KVQ_QUEUE_FIFO, 0, 2000, 2, 2, 7, 5, 0 });
}

static void test_idem_priority(void **state)
{
    (void)state;
    idem((conc_cfg){ "idem-priority", KVQ_QUEUE_PRIORITY, 0, 1500, 2, 2, 1, 1, 0 });
}

static void test_idem_hc(void **state)
{
    (void)state;
    idem((conc_cfg){ "idem-fifo-hc", KVQ_QUEUE_FIFO, KVQ_QUEUE_HIGH_CONTENTION, 2000, 2, 2, 1, 1,
                     0 });
    idem((conc_cfg){ "idem-priority-hc", KVQ_QUEUE_PRIORITY, KVQ_QUEUE_HIGH_CONTENTION, 1000, 2, 2,
                     1, 1, 0 });
}

/* ---- commits that time out ------------------------------------------------------------------ */

/* A commit that fails with 1031 may have committed (as a FoundationDB commit whose timeout
 * passes in flight). The convenience forms settle such an outcome: 0 means it took effect once,
 * 1031 that it did not, 1021 that it cannot be told. Pushes and pops both go through the faults;
 * a clean handle drains what is left, and each item must have been delivered exactly as its
 * push's result says. */
enum { TO_OK = 0, TO_NOT = 1, TO_UNKNOWN = 2 };

static int timeout_outcome(int rc, const char *what, uint32_t seq)
{
    if (rc == 0)
        return TO_OK;
    if (rc == KVQ_ETRANSACTION_TIMED_OUT)
        return TO_NOT;
    if (rc == KVQ_ECOMMIT_UNKNOWN_RESULT)
        return TO_UNKNOWN;
    fail_msg("%s %u: unexpected error %d %s (%s)", what, seq, rc, kvq_strerror(rc),
             kvq_last_error());
    return -1;
}

static void deliver(uint8_t *seen, uint32_t n, const uint8_t *v, size_t len)
{
    uint32_t p = 0, s = 0;
    if (tq_parse(v, len, &p, &s) != 0 || s >= n)
        fail_msg("a popped value was never pushed");
    else
        seen[s]++;
}

static int timeouts_run(kvq_queue_type type, size_t k, const char *name)
{
    /* Batched pops make k times fewer commits: twice the items keep enough of them (about
     * 160) that a run without a single not-committed pop is too rare to happen (below 1e-11 at
     * a rate of 0.3, half of them not committed; 400 items and 80 pops left it near 1e-5). */
    const uint32_t n = (uint32_t)kvq_test_scaled(k == 1 ? 400 : 800);
    tq_mkdir();
    uint64_t seed = kt_seed_for(name);
    unsigned int kinds = KVQ_FAULT_TIMED_OUT_COMMITTED | KVQ_FAULT_TIMED_OUT_NOT_COMMITTED;
    kvq_db *fdb = tq_open_db(0.3, kinds, seed);
    kvq_db *clean = tq_open_db(0, 0, 0);
    kvq_queue *q, *cq;
    assert_ok(kvq_queue_open(&q, fdb, type, NULL, NULL));
    assert_ok(kvq_queue_open(&cq, clean, type, NULL, NULL));
    int *pushed = calloc(n, sizeof(int));
    uint8_t *seen = calloc(n, 1);
    assert_non_null(pushed);
    assert_non_null(seen);
    int counts[3] = { 0, 0, 0 }, pop_counts[3] = { 0, 0, 0 };
    uint8_t v[16];
    for (uint32_t s = 0; s < n; s++) {
        size_t len = tq_value(v, 0, s);
        pushed[s] = timeout_outcome(kvq_queue_push(q, v, len), "push", s);
        counts[pushed[s]]++;
    }
    kvq_buf outs[8];
    for (size_t i = 0; i < 8; i++)
        outs[i] = (kvq_buf)KVQ_BUF_INIT;
    for (uint32_t i = 0; i < n; i++) {
        size_t got = 0;
        int rc = k == 1 ? kvq_queue_pop(&outs[0], q) : kvq_queue_pop_k(outs, &got, q, k);
        if (rc == 0 && k == 1)
            got = 1;
        if (rc == KVQ_ENOTFOUND)
            break;
        pop_counts[timeout_outcome(rc, "pop", i)]++;
        for (size_t j = 0; rc == 0 && j < got; j++)
            deliver(seen, n, outs[j].data, outs[j].len);
    }
    for (;;) {
        int rc = kvq_queue_pop(&outs[0], cq);
        if (rc == KVQ_ENOTFOUND)
            break;
        assert_ok(rc);
        deliver(seen, n, outs[0].data, outs[0].len);
    }
    int bad = 0;
    for (uint32_t s = 0; s < n; s++) {
        int ok = pushed[s] == TO_OK ? seen[s] == 1 : pushed[s] == TO_NOT ? seen[s] == 0 : seen[s] <= 1;
        if (!ok && bad++ < 5)
            fprintf(stderr, "%s: item %u: push said %s, delivered %u times\n", name, s,
                    pushed[s] == TO_OK ? "ok" : pushed[s] == TO_NOT ? "timed out" : "unknown",
                    seen[s]);
    }
    kvq_db_stats st;
    assert_ok(kvq_db_get_stats(&st, fdb));
    printf("# %s: %u pushes: ok %d, timed out %d, unknown %d; pops: ok %d, timed out %d, "
           "unknown %d; %llu faults; %d wrong\n",
           name, n, counts[0], counts[1], counts[2], pop_counts[0], pop_counts[1], pop_counts[2],
           (unsigned long long)st.injected_faults, bad);
    fflush(stdout);
    for (size_t i = 0; i < 8; i++)
        kvq_buf_dispose(&outs[i]);
    free(pushed);
    free(seen);
    kvq_queue_close(q);
    kvq_queue_close(cq);
    kvq_db_close(fdb);
    kvq_db_close(clean);
    tq_rmdir();
    /* Both outcomes of a timed-out commit were met, by pushes and by pops. */
    assert_true(counts[TO_OK] > 0 && counts[TO_NOT] > 0 && pop_counts[TO_NOT] > 0);
    return bad;
}

static void test_commit_timeouts_fifo(void **state)
{
    (void)state;
    assert_int_equal(timeouts_run(KVQ_QUEUE_FIFO, 1, "timeouts-fifo"), 0);
}

static void test_commit_timeouts_durable(void **state)
{
    (void)state;
    assert_int_equal(timeouts_run(KVQ_QUEUE_DURABLE, 1, "timeouts-durable"), 0);
    assert_int_equal(timeouts_run(KVQ_QUEUE_DURABLE, 5, "timeouts-durable-k"), 0);
}

/* High-contention pops with concurrent consumers under faults: the multi-step pop survives a
 * 1021 at every step. */
typedef struct hcw {
    const conc_cfg *c;
    kvq_db *db;
    int id;
    size_t *consumed;
    conc_log log;
} hcw;

static void *hc_consumer(void *a)
{
    hcw *w = a;
    conc_consume(w->c, w->db, w->id, w->consumed, &w->log);
    return NULL;
}

static void test_hc_concurrent_faults(void **state)
{
    (void)state;
    conc_cfg c = {
        "faults-fifo-hc-8", KVQ_QUEUE_FIFO, KVQ_QUEUE_HIGH_CONTENTION, 2400, 4, 8, 20, 1, 0
    };
    tq_mkdir();
    kvq_db *pdb = tq_open_db(0, 0, 0);
    kvq_db *cdb = tq_open_db(0.3, KVQ_FAULT_ALL, kt_seed_for(c.name));
    char err[200];
    for (uint32_t p = 0; p < (uint32_t)c.producers; p++)
        if (conc_produce(&c, pdb, p, err, sizeof(err)) != 0)
            fail_msg("%s", err);
    size_t consumed = 0;
    hcw w[8];
    pthread_t th[8];
    for (int i = 0; i < c.consumers; i++) {
        w[i] = (hcw){ &c, cdb, i, &consumed, { 0 } };
        assert_int_equal(pthread_create(&th[i], NULL, hc_consumer, &w[i]), 0);
    }
    conc_log logs[8];
    for (int i = 0; i < c.consumers; i++) {
        pthread_join(th[i], NULL);
        logs[i] = w[i].log;
    }
    int bad = conc_check(&c, logs, c.consumers);
    kvq_db_stats cs;
    assert_ok(kvq_db_get_stats(&cs, cdb));
    tot.runs++;
    tot.violations += bad;
    tot.injected += cs.injected_faults;
    tot.retries += cs.retries;
    printf("# %s: %zu items, %llu faults injected\n", c.name, c.items,
           (unsigned long long)cs.injected_faults);
    for (int i = 0; i < c.consumers; i++)
        conc_log_free(&logs[i]);
    kvq_db_close(pdb);
    kvq_db_close(cdb);
    tq_rmdir();
    assert_int_equal(bad, 0);
}

int main(int argc, char **argv)
{
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_outbox_durable),
        cmocka_unit_test(test_outbox_fifo),
        cmocka_unit_test(test_outbox_priority),
        cmocka_unit_test(test_idem_durable),
        cmocka_unit_test(test_idem_fifo),
        cmocka_unit_test(test_idem_priority),
        cmocka_unit_test(test_idem_hc),
        cmocka_unit_test(test_hc_concurrent_faults),
        cmocka_unit_test(test_commit_timeouts_fifo),
        cmocka_unit_test(test_commit_timeouts_durable),
        cmocka_unit_test(test_checker_catches_broken_idempotency),
        cmocka_unit_test(test_outbox_checker_catches_broken_engine),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    printf("faults: runs=%d kinds=1020,1021_committed,1021_not_committed injected=%llu "
           "retries=%llu violations=%d broken_checkers_caught=%d/%d failed_tests=%d "
           "seed=%" PRIu64 "\n",
           tot.runs, tot.injected, tot.retries, tot.violations, tot.caught, tot.checkers, failed,
           kt_seed());
    return failed;
}
