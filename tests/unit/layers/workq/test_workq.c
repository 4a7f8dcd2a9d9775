/* Work-queue layer (kvq/workq.h), single-threaded: leases, ack, nack, extend, stale tokens,
 * dead letters and redrive, delayed items, dedup windows, metrics against a model, bad input.
 *
 * Engines: the embedded engine in a fresh directory, or the database named by $KVQ_TEST_URL
 * (ctest runs this binary again as fdb.test_workq, on the fdb engine through the test double of
 * libfdb_c). Each test works in a subspace of its own, so tests sharing one database never see
 * each other's keys.
 *
 * Timing: leases are a few hundred ms (times kvq_test_time_factor() where the test must act
 * before one ends: 4 in the sanitizer builds); every wait polls with a bound of 20 s and no test
 * asserts that something happened quickly. "Not before" checks compare database versions only (a
 * lease's received version against a deadline or a version read before the push), so they need
 * no tolerance and hold on any engine. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_queue_common.h"

#define WAIT_US 20000000LL

/* A lease the test must act inside of (an empty receive, another item first) before it ends:
 * ms, widened in slow builds (a busy machine can hold a thread off the CPU that long). */
static int64_t short_lease(int64_t ms)
{
    return ms * kvq_test_time_factor();
}

/* A tiny unrelated commit (read versions advance with time on both engines, so this is only a
 * harmless nudge before a time-relative step). */
static int tick_body(kvq_txn *txn, void *arg)
{
    (void)arg;
    static const uint8_t one[8] = { 1 };
    return kvq_txn_atomic_op(txn, (const uint8_t *)"tick", 4, one, 8, KVQ_MUT_ADD);
}

static void tick(kvq_db *db)
{
    assert_ok(kvq_db_transact(db, tick_body, NULL));
}

typedef struct wq_env {
    kvq_db *db;
    kvq_queue *q;
    kvq_workq *w;
} wq_env;

/* The test database: $KVQ_TEST_URL when set (skipped when its engine is not available), else a
 * fresh embedded database in tq_dir. */
static kvq_db *open_test_db(void)
{
    if (!kt_db_url_given())
        return tq_open_db(0, 0, 0);
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.retry_limit = -1;
    o.timeout_ms = 0;
    o.max_retry_delay_ms = 50;
    return kt_db_open_url(getenv("KVQ_TEST_URL"), &o, NULL);
}

/* A subspace no other test (nor an earlier run on a shared database) uses: ("wqt", run, n). */
static kvq_subspace *fresh_subspace(void)
{
    static uint64_t run;
    static int64_t n;
    if (run == 0 && kvq__random_bytes(&run, sizeof(run)) != 0)
        run = (uint64_t)kvq__now_us();
    kvq_tuple_elem b = kvq_tuple_bytes((const uint8_t *)&run, sizeof(run));
    kvq_tuple_elem e[3] = { kvq_tuple_str("wqt"), b, kvq_tuple_int(++n) };
    kvq_subspace *sub = NULL;
    if (kvq_subspace_new(&sub, NULL, 0, e, 3) != 0)
        fail_msg("kvq_subspace_new failed");
    return sub;
}

static wq_env env_open(kvq_queue_type type, const kvq_workq_options *wo)
{
    wq_env e;
    tq_mkdir();
    e.db = open_test_db();
    kvq_subspace *sub = fresh_subspace();
    assert_ok(kvq_queue_open(&e.q, e.db, type, sub, NULL));
    kvq_subspace_destroy(sub);
    assert_ok(kvq_workq_open(&e.w, e.q, wo));
    tick(e.db);
    return e;
}

/* The current read version: "now" in database time. */
static int rv_body(kvq_txn *txn, void *arg)
{
    return kvq_txn_get_read_version(arg, txn);
}

static int64_t db_now(kvq_db *db)
{
    int64_t rv = 0;
    assert_ok(kvq_db_transact(db, rv_body, &rv));
    return rv;
}

static void env_close(wq_env *e)
{
    kvq_workq_close(e->w);
    kvq_queue_close(e->q);
    kvq_db_close(e->db);
    tq_rmdir();
}

static void push_str(kvq_workq *w, const char *s, const kvq_workq_push_options *po, int want)
{
    bool enq = want == 0; /* the opposite of what is wanted: a push that leaves it fails */
    assert_ok(kvq_workq_push(&enq, w, (const uint8_t *)s, strlen(s), po));
    assert_int_equal(enq, want);
}

static void expect_recv(kvq_workq *w, const char *want, kvq_workq_lease *l, int64_t lease_ms)
{
    kvq_buf b = KVQ_BUF_INIT;
    assert_ok(kvq_workq_receive(&b, l, w, lease_ms));
    assert_bytes(b.data, b.len, (const uint8_t *)want, strlen(want));
    kvq_buf_dispose(&b);
}

static void expect_empty(kvq_workq *w)
{
    kvq_buf b = KVQ_BUF_INIT;
    kvq_workq_lease l;
    int rc = kvq_workq_receive(&b, &l, w, 0);
    if (rc != KVQ_ENOTFOUND)
        fail_msg("expected an empty work queue, got %s (%.*s)", kvq_errname(rc), (int)b.len,
                 (const char *)b.data);
    kvq_buf_dispose(&b);
}

/* Receives, running recover between tries, until something comes or WAIT_US passes. */
static int recv_wait(kvq_workq *w, kvq_buf *b, kvq_workq_lease *l, int64_t lease_ms)
{
    int64_t end = kvq__mono_us() + WAIT_US;
    for (;;) {
        assert_ok(kvq_workq_recover(NULL, w));
        int rc = kvq_workq_receive(b, l, w, lease_ms);
        if (rc != KVQ_ENOTFOUND || kvq__mono_us() > end)
            return rc;
        kvq__sleep_us(20000);
    }
}

static void
expect_metrics(kvq_workq *w, int64_t ready, int64_t inflight, int64_t delayed, int64_t dead)
{
    kvq_workq_stats m;
    assert_ok(kvq_workq_get_stats(&m, w));
    if (m.ready != ready || m.inflight != inflight || m.delayed != delayed || m.dead != dead)
        fail_msg("metrics ready %lld inflight %lld delayed %lld dead %lld, want %lld %lld %lld "
                 "%lld",
                 (long long)m.ready, (long long)m.inflight, (long long)m.delayed, (long long)m.dead,
                 (long long)ready, (long long)inflight, (long long)delayed, (long long)dead);
}

/* The totals since the queue was made: each counts one kind of event. */
static void expect_totals(
    kvq_workq *w, int64_t received, int64_t taken, int64_t acked, int64_t requeued, int64_t dead)
{
    kvq_workq_stats m;
    assert_ok(kvq_workq_get_stats(&m, w));
    if (m.received != received || m.taken != taken || m.acked != acked ||
        m.requeued != requeued || m.dead_lettered != dead)
        fail_msg("totals received %lld taken %lld acked %lld requeued %lld dead-lettered %lld, "
                 "want %lld %lld %lld %lld %lld",
                 (long long)m.received, (long long)m.taken, (long long)m.acked,
                 (long long)m.requeued, (long long)m.dead_lettered, (long long)received,
                 (long long)taken, (long long)acked, (long long)requeued, (long long)dead);
}

static void test_bad_input(void **state)
{
    (void)state;
    wq_env e = env_open(KVQ_QUEUE_DURABLE, NULL);
    kvq_workq *w = NULL;
    kvq_queue *fifo;
    assert_int_equal(kvq_workq_open(NULL, e.q, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_workq_open(&w, NULL, NULL), KVQ_EINVAL);
    assert_null(w);
    assert_ok(kvq_queue_open(&fifo, e.db, KVQ_QUEUE_FIFO, NULL, NULL));
    assert_int_equal(kvq_workq_open(&w, fifo, NULL), KVQ_EWRONGTYPE);
    kvq_queue_close(fifo);
    kvq_workq_options o = KVQ_WORKQ_OPTIONS_INIT;
    o.lease_ms = 0;
    assert_int_equal(kvq_workq_open(&w, e.q, &o), KVQ_EINVAL);
    o = (kvq_workq_options)KVQ_WORKQ_OPTIONS_INIT;
    o.version = 99;
    assert_int_equal(kvq_workq_open(&w, e.q, &o), KVQ_EINVAL);
    o = (kvq_workq_options)KVQ_WORKQ_OPTIONS_INIT;
    o.dedup_window_ms = -1;
    assert_int_equal(kvq_workq_open(&w, e.q, &o), KVQ_EINVAL);

    kvq_buf b = KVQ_BUF_INIT;
    kvq_workq_lease l;
    memset(&l, 0, sizeof(l));
    bool enq;
    assert_int_equal(kvq_workq_push(&enq, NULL, (const uint8_t *)"x", 1, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_workq_push(&enq, e.w, NULL, 1, NULL), KVQ_EINVAL);
    static uint8_t big[KVQ_MAX_VALUE_SIZE + 1];
    assert_int_equal(kvq_workq_push(&enq, e.w, big, sizeof(big), NULL), KVQ_EVALUE_TOO_LARGE);
    kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
    po.priority = 3;
    assert_int_equal(kvq_workq_push(&enq, e.w, big, 1, &po), KVQ_EWRONGTYPE);
    po = (kvq_workq_push_options)KVQ_WORKQ_PUSH_OPTIONS_INIT;
    po.delay_ms = -5;
    assert_int_equal(kvq_workq_push(&enq, e.w, big, 1, &po), KVQ_EINVAL);
    po = (kvq_workq_push_options)KVQ_WORKQ_PUSH_OPTIONS_INIT;
    po.dedup_len = 3;
    assert_int_equal(kvq_workq_push(&enq, e.w, big, 1, &po), KVQ_EINVAL);
    po.dedup_key = big;
    po.dedup_len = 1001;
    assert_int_equal(kvq_workq_push(&enq, e.w, big, 1, &po), KVQ_EINVAL);
    po.version = 0;
    assert_int_equal(kvq_workq_push(&enq, e.w, big, 1, &po), KVQ_EINVAL);
    assert_int_equal(kvq_workq_receive(&b, &l, NULL, 0), KVQ_EINVAL);
    assert_int_equal(kvq_workq_receive(NULL, &l, e.w, 0), KVQ_EINVAL);
    assert_int_equal(kvq_workq_receive(&b, NULL, e.w, 0), KVQ_EINVAL);
    assert_int_equal(kvq_workq_receive(&b, &l, e.w, -1), KVQ_EINVAL);
    assert_int_equal(kvq_workq_receive_txn(NULL, &l, e.w, NULL, 0), KVQ_EINVAL);
    assert_int_equal(kvq_workq_ack(NULL, &l), KVQ_EINVAL);
    assert_int_equal(kvq_workq_ack(e.w, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_workq_ack_txn(e.w, NULL, &l), KVQ_EINVAL);
    assert_int_equal(kvq_workq_nack(e.w, &l, -1), KVQ_EINVAL);
    assert_int_equal(kvq_workq_nack(e.w, NULL, 0), KVQ_EINVAL);
    assert_int_equal(kvq_workq_extend(e.w, &l, -3), KVQ_EINVAL);
    assert_int_equal(kvq_workq_extend(NULL, &l, 0), KVQ_EINVAL);
    assert_int_equal(kvq_workq_recover(NULL, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_workq_dlq_list(e.w, NULL, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_workq_dlq_redrive(NULL, NULL), KVQ_EINVAL);
    kvq_workq_stats m;
    assert_int_equal(kvq_workq_get_stats(NULL, e.w), KVQ_EINVAL);
    assert_int_equal(kvq_workq_get_stats(&m, NULL), KVQ_EINVAL);
    /* A token nobody issued: not a lease of this queue. */
    assert_int_equal(kvq_workq_ack(e.w, &l), KVQ_ELEASE_EXPIRED);
    kvq_workq_close(NULL);
    env_close(&e);
}

static void lease_ack_case(kvq_queue_type type)
{
    wq_env e = env_open(type, NULL);
    push_str(e.w, "a", NULL, 1);
    push_str(e.w, "b", NULL, 1);
    kvq_workq_lease la, lb;
    expect_recv(e.w, "a", &la, 0);
    assert_int_equal(la.deliveries, 1);
    expect_metrics(e.w, 1, 1, 0, 0);
    expect_recv(e.w, "b", &lb, 0);
    expect_empty(e.w);
    assert_ok(kvq_workq_ack(e.w, &lb));
    assert_int_equal(kvq_workq_ack(e.w, &lb), KVQ_ELEASE_SETTLED);
    assert_int_equal(kvq_workq_nack(e.w, &lb, 0), KVQ_ELEASE_SETTLED);
    assert_int_equal(kvq_workq_extend(e.w, &lb, 0), KVQ_ELEASE_SETTLED);
    /* nack now: back at its place, one more delivery. */
    assert_ok(kvq_workq_nack(e.w, &la, 0));
    assert_int_equal(kvq_workq_ack(e.w, &la), KVQ_ELEASE_SETTLED);
    expect_metrics(e.w, 1, 0, 0, 0);
    uint64_t len;
    assert_ok(kvq_queue_len(&len, e.q));
    assert_int_equal(len, 1);
    kvq_workq_lease la2;
    expect_recv(e.w, "a", &la2, 0);
    assert_int_equal(la2.deliveries, 2);
    assert_ok(kvq_workq_extend(e.w, &la2, 60000));
    assert_ok(kvq_workq_ack(e.w, &la2));
    expect_metrics(e.w, 0, 0, 0, 0);
    expect_empty(e.w);
    env_close(&e);
}

static void test_lease_ack_durable(void **state)
{
    (void)state;
    lease_ack_case(KVQ_QUEUE_DURABLE);
}

static void test_lease_ack_priority(void **state)
{
    (void)state;
    wq_env e = env_open(KVQ_QUEUE_PRIORITY, NULL);
    kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
    const int prios[] = { 5, -2, 9, 0 };
    for (int i = 0; i < 4; i++) {
        char s[8];
        snprintf(s, sizeof(s), "p%d", prios[i]);
        po.priority = prios[i];
        push_str(e.w, s, &po, 1);
    }
    kvq_workq_lease l[4];
    expect_recv(e.w, "p-2", &l[0], 0);
    assert_int_equal(l[0].priority, -2);
    expect_recv(e.w, "p0", &l[1], 0);
    assert_ok(kvq_workq_nack(e.w, &l[0], 0)); /* back at priority -2 */
    expect_recv(e.w, "p-2", &l[0], 0);
    assert_int_equal(l[0].deliveries, 2);
    expect_recv(e.w, "p5", &l[2], 0);
    expect_recv(e.w, "p9", &l[3], 0);
    expect_metrics(e.w, 0, 4, 0, 0);
    for (int i = 0; i < 4; i++)
        assert_ok(kvq_workq_ack(e.w, &l[i]));
    expect_metrics(e.w, 0, 0, 0, 0);
    env_close(&e);
    lease_ack_case(KVQ_QUEUE_PRIORITY);
}

/* A consumer that received and never acks: the item comes back after its lease, once, and the
 * old token can no longer ack, nack or extend it (and deletes nothing). */
static void test_redelivery_and_late_ack(void **state)
{
    (void)state;
    wq_env e = env_open(KVQ_QUEUE_DURABLE, NULL);
    push_str(e.w, "job", NULL, 1);
    kvq_workq_lease l1, l2;
    expect_recv(e.w, "job", &l1, short_lease(300));
    expect_empty(e.w);
    kvq_buf b = KVQ_BUF_INIT;
    assert_ok(recv_wait(e.w, &b, &l2, 60000));
    /* Not before the lease's end, in database versions. */
    assert_true(l2.received >= l1.deadline);
    assert_bytes(b.data, b.len, (const uint8_t *)"job", 3);
    assert_int_equal(l2.deliveries, 2);
    assert_memory_not_equal(l1.id, l2.id, 16);
    /* The late ack fails and deletes nothing. */
    assert_int_equal(kvq_workq_ack(e.w, &l1), KVQ_ELEASE_EXPIRED);
    assert_int_equal(kvq_workq_nack(e.w, &l1, 0), KVQ_ELEASE_EXPIRED);
    assert_int_equal(kvq_workq_extend(e.w, &l1, 0), KVQ_ELEASE_EXPIRED);
    expect_metrics(e.w, 0, 1, 0, 0);
    /* Redelivered once: nobody else gets it while l2 holds. */
    expect_empty(e.w);
    assert_ok(kvq_workq_recover(NULL, e.w));
    expect_empty(e.w);
    assert_ok(kvq_workq_ack(e.w, &l2));
    expect_metrics(e.w, 0, 0, 0, 0);
    kvq_buf_dispose(&b);
    env_close(&e);
}

/* An expired lease: ack fails and changes nothing; the item is ready for the next reader (the
 * metrics, here) without a call to recover. */
static void test_expired_not_returned(void **state)
{
    (void)state;
    wq_env e = env_open(KVQ_QUEUE_PRIORITY, NULL);
    push_str(e.w, "x", NULL, 1);
    kvq_workq_lease l;
    tick(e.db);
    expect_recv(e.w, "x", &l, 200);
    kvq__sleep_us(300000);
    tick(e.db);
    assert_int_equal(kvq_workq_ack(e.w, &l), KVQ_ELEASE_EXPIRED);
    expect_metrics(e.w, 1, 0, 0, 0);
    uint64_t moved = 0;
    assert_ok(kvq_workq_recover(&moved, e.w));
    assert_int_equal(moved, 0);
    expect_metrics(e.w, 1, 0, 0, 0);
    expect_recv(e.w, "x", &l, 0);
    assert_int_equal(l.deliveries, 2);
    env_close(&e);
}

static void test_extend(void **state)
{
    (void)state;
    wq_env e = env_open(KVQ_QUEUE_DURABLE, NULL);
    push_str(e.w, "long", NULL, 1);
    kvq_workq_lease l;
    /* A 2 s lease, so that the extension comes inside it; on a machine that held the test off
     * the CPU past it (seen in database versions), the item comes back and the case runs
     * again. Then the wait passes the first deadline, in database versions. */
    int64_t d0 = 0;
    for (int attempt = 0;; attempt++) {
        assert_true(attempt < 5);
        expect_recv(e.w, "long", &l, 2000);
        d0 = l.deadline;
        int rc = kvq_workq_extend(e.w, &l, 30000);
        if (rc == 0)
            break;
        assert_int_equal(rc, KVQ_ELEASE_EXPIRED);
        assert_true(db_now(e.db) >= d0);
    }
    assert_true(l.deadline > d0);
    while (db_now(e.db) <= d0 + 100000)
        kvq__sleep_us(50000);
    assert_ok(kvq_workq_recover(NULL, e.w));
    expect_empty(e.w);
    assert_ok(kvq_workq_ack(e.w, &l));
    env_close(&e);
}

typedef struct dlq_seen {
    int n;
    uint32_t deliv;
    char val[32];
} dlq_seen;

static int dlq_cb(kvq_bytes v, uint32_t deliveries, void *payload)
{
    dlq_seen *s = payload;
    s->n++;
    s->deliv = deliveries;
    snprintf(s->val, sizeof(s->val), "%.*s", (int)v.len, (const char *)v.data);
    return 0;
}

/* A poison message: dead-lettered after max deliveries (by nack and by expiry); redrive brings
 * it back with a fresh count. */
static void poison_case(kvq_queue_type type)
{
    kvq_workq_options o = KVQ_WORKQ_OPTIONS_INIT;
    o.max_deliveries = 3;
    wq_env e = env_open(type, &o);
    push_str(e.w, "poison", NULL, 1);
    push_str(e.w, "fine", NULL, 1);
    kvq_workq_lease l, lf;
    expect_recv(e.w, "poison", &l, 0);
    assert_ok(kvq_workq_nack(e.w, &l, 0));
    expect_recv(e.w, "poison", &l, 0);
    assert_ok(kvq_workq_nack(e.w, &l, 0));
    expect_recv(e.w, "poison", &l, short_lease(200)); /* the third delivery expires */
    assert_int_equal(l.deliveries, 3);
    expect_recv(e.w, "fine", &lf, 0);
    kvq_buf b = KVQ_BUF_INIT;
    kvq_workq_lease lx;
    int64_t end = kvq__mono_us() + WAIT_US;
    kvq_workq_stats m;
    do {
        kvq__sleep_us(50000);
        assert_ok(kvq_workq_recover(NULL, e.w));
        assert_ok(kvq_workq_get_stats(&m, e.w));
    } while (m.dead == 0 && kvq__mono_us() < end);
    expect_metrics(e.w, 0, 1, 0, 1);
    assert_int_equal(kvq_workq_receive(&b, &lx, e.w, 0), KVQ_ENOTFOUND);
    dlq_seen s = { 0, 0, "" };
    assert_ok(kvq_workq_dlq_list(e.w, dlq_cb, &s));
    assert_int_equal(s.n, 1);
    assert_int_equal(s.deliv, 3);
    assert_string_equal(s.val, "poison");
    uint64_t moved = 0;
    assert_ok(kvq_workq_dlq_redrive(&moved, e.w));
    assert_int_equal(moved, 1);
    expect_metrics(e.w, 1, 1, 0, 0);
    expect_recv(e.w, "poison", &l, 0);
    assert_int_equal(l.deliveries, 1);
    assert_ok(kvq_workq_ack(e.w, &l));
    assert_ok(kvq_workq_ack(e.w, &lf));
    s.n = 0;
    assert_ok(kvq_workq_dlq_list(e.w, dlq_cb, &s));
    assert_int_equal(s.n, 0);
    expect_metrics(e.w, 0, 0, 0, 0);
    /* poison 3 deliveries, fine 1, poison again 1; two nacks, an ended lease that went to the
     * dead letters (not a requeue), a redrive (a requeue); two acks. */
    expect_totals(e.w, 5, 5, 2, 3, 1);
    /* Purge: dead letters deleted, counted, not moved back; the rest untouched. */
    push_str(e.w, "poison2", NULL, 1);
    push_str(e.w, "kept", NULL, 1);
    for (int i = 0; i < 3; i++) {
        expect_recv(e.w, "poison2", &l, 0);
        assert_ok(kvq_workq_nack(e.w, &l, 0));
    }
    expect_metrics(e.w, 1, 0, 0, 1);
    assert_ok(kvq_workq_dlq_purge(&moved, e.w));
    assert_int_equal(moved, 1);
    expect_metrics(e.w, 1, 0, 0, 0);
    assert_ok(kvq_workq_dlq_purge(NULL, e.w));
    assert_int_equal(kvq_workq_dlq_purge(NULL, NULL), KVQ_EINVAL);
    expect_recv(e.w, "kept", &l, 0);
    assert_ok(kvq_workq_ack(e.w, &l));
    expect_metrics(e.w, 0, 0, 0, 0);
    kvq_buf_dispose(&b);
    env_close(&e);
}

static void test_poison_durable(void **state)
{
    (void)state;
    poison_case(KVQ_QUEUE_DURABLE);
}

static void test_poison_priority(void **state)
{
    (void)state;
    poison_case(KVQ_QUEUE_PRIORITY);
}

/* Delayed items are invisible before their time (exactly, in database versions) and visible
 * after it (late by at most the 20 s wait bound). */
static void delayed_case(kvq_queue_type type)
{
    wq_env e = env_open(type, NULL);
    kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
    po.delay_ms = 600;
    if (type == KVQ_QUEUE_PRIORITY)
        po.priority = -10; /* would come first if it were visible */
    int64_t t0 = db_now(e.db);
    push_str(e.w, "later", &po, 1);
    kvq_workq_push_options pn = KVQ_WORKQ_PUSH_OPTIONS_INIT;
    push_str(e.w, "now", &pn, 1);
    expect_metrics(e.w, 1, 0, 1, 0);
    kvq_workq_lease l1, l2;
    kvq_buf b = KVQ_BUF_INIT;
    assert_ok(kvq_workq_receive(&b, &l1, e.w, 0));
    if (b.len == 5 && memcmp(b.data, "later", 5) == 0)
        assert_true(l1.received >= t0 + 600000);
    else
        assert_bytes(b.data, b.len, (const uint8_t *)"now", 3);
    /* Poll: while it is not visible, it must not be due yet. */
    int64_t end = kvq__mono_us() + WAIT_US;
    int rc;
    for (;;) {
        assert_ok(kvq_workq_recover(NULL, e.w));
        rc = kvq_workq_receive(&b, &l2, e.w, 0);
        if (rc == 0)
            break;
        assert_int_equal(rc, KVQ_ENOTFOUND);
        assert_true(kvq__mono_us() < end);
        kvq__sleep_us(20000);
    }
    assert_true(l2.received >= t0 + 600000);
    assert_bytes(b.data, b.len, (const uint8_t *)"later", 5);
    expect_metrics(e.w, 0, 2, 0, 0);
    /* nack with a delay: invisible, then back. */
    int64_t t1 = db_now(e.db);
    assert_ok(kvq_workq_nack(e.w, &l2, 400));
    expect_metrics(e.w, 0, 1, 1, 0);
    expect_totals(e.w, 2, 2, 0, 0, 0); /* a delayed nack requeues when it falls due */
    rc = kvq_workq_receive(&b, &l2, e.w, 0);
    if (rc != 0) {
        assert_int_equal(rc, KVQ_ENOTFOUND);
        assert_ok(recv_wait(e.w, &b, &l2, 0));
    }
    assert_true(l2.received >= t1 + 400000);
    assert_bytes(b.data, b.len, (const uint8_t *)"later", 5);
    assert_int_equal(l2.deliveries, 2);
    if (type == KVQ_QUEUE_PRIORITY)
        assert_int_equal(l2.priority, -10);
    assert_ok(kvq_workq_ack(e.w, &l2));
    assert_ok(kvq_workq_ack(e.w, &l1));
    expect_metrics(e.w, 0, 0, 0, 0);
    expect_totals(e.w, 3, 3, 2, 1, 0); /* a delayed first push is no requeue */
    kvq_buf_dispose(&b);
    env_close(&e);
}

static void test_delayed_durable(void **state)
{
    (void)state;
    delayed_case(KVQ_QUEUE_DURABLE);
}

static void test_delayed_priority(void **state)
{
    (void)state;
    delayed_case(KVQ_QUEUE_PRIORITY);
}

/* An absolute not_before version. */
static void test_not_before(void **state)
{
    (void)state;
    wq_env e = env_open(KVQ_QUEUE_DURABLE, NULL);
    kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
    po.not_before = db_now(e.db) + 400000;
    push_str(e.w, "at", &po, 1);
    kvq_workq_lease l;
    kvq_buf b = KVQ_BUF_INIT;
    assert_ok(recv_wait(e.w, &b, &l, 0));
    assert_true(l.received >= po.not_before);
    kvq_buf_dispose(&b);
    env_close(&e);
}

/* The same dedup key within the window enqueues once; after it, again. */
static void test_dedup(void **state)
{
    (void)state;
    kvq_workq_options o = KVQ_WORKQ_OPTIONS_INIT;
    o.dedup_window_ms = 400;
    wq_env e = env_open(KVQ_QUEUE_DURABLE, &o);
    kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
    po.dedup_key = (const uint8_t *)"order-17";
    po.dedup_len = 8;
    int64_t t0 = db_now(e.db);
    push_str(e.w, "v1", &po, 1);
    bool enq = true;
    assert_ok(kvq_workq_push(&enq, e.w, (const uint8_t *)"v2", 2, &po));
    if (enq != 0)
        assert_true(db_now(e.db) - t0 >= 400000); /* only if the machine stalled */
    /* Another key is independent. */
    kvq_workq_push_options p2 = po;
    p2.dedup_key = (const uint8_t *)"order-18";
    push_str(e.w, "w", &p2, 1);
    kvq__sleep_us(600000);
    assert_ok(kvq_workq_recover(NULL, e.w)); /* prunes, and moves versions on */
    push_str(e.w, "v3", &po, 1);
    kvq_workq_stats m;
    assert_ok(kvq_workq_get_stats(&m, e.w));
    assert_int_equal(m.ready, enq == 0 ? 3 : 4);
    kvq_workq_lease l;
    expect_recv(e.w, "v1", &l, 0);
    env_close(&e);
}

/* Metrics after a random mixed workload match a model of the truth. */
static void test_metrics_model(void **state)
{
    (void)state;
    kvq_workq_options o = KVQ_WORKQ_OPTIONS_INIT;
    o.max_deliveries = 2;
    wq_env e = env_open(KVQ_QUEUE_DURABLE, &o);
    kvq__rng rng = { kt_seed() ^ 0x77 };
    kvq_workq_lease held[64];
    size_t nheld = 0;
    int64_t ready = 0, delayed = 0, dead = 0;
    kvq_buf b = KVQ_BUF_INIT;
    for (int i = 0; i < 300; i++) {
        unsigned op = (unsigned)(kvq__rng_next(&rng) % 6);
        if (op <= 1) {
            kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
            if (op == 1)
                po.delay_ms = 3600000; /* stays delayed for the whole test */
            bool enq;
            assert_ok(kvq_workq_push(&enq, e.w, (const uint8_t *)"m", 1, &po));
            if (op == 1)
                delayed++;
            else
                ready++;
        } else if (op == 2 && nheld < 64) {
            int rc = kvq_workq_receive(&b, &held[nheld], e.w, 60000);
            if (rc == KVQ_ENOTFOUND) {
                assert_int_equal(ready, 0);
                continue;
            }
            assert_ok(rc);
            nheld++;
            ready--;
        } else if (op == 3 && nheld > 0) {
            assert_ok(kvq_workq_ack(e.w, &held[--nheld]));
        } else if (op == 4 && nheld > 0) {
            kvq_workq_lease *l = &held[--nheld];
            assert_ok(kvq_workq_nack(e.w, l, 0));
            if (l->deliveries >= 2)
                dead++;
            else
                ready++;
        } else if (op == 5 && dead > 0 && kvq__rng_next(&rng) % 4 == 0) {
            uint64_t moved;
            assert_ok(kvq_workq_dlq_redrive(&moved, e.w));
            assert_int_equal((int64_t)moved, dead);
            ready += dead;
            dead = 0;
        }
    }
    expect_metrics(e.w, ready, (int64_t)nheld, delayed, dead);
    kvq_workq_stats m;
    assert_ok(kvq_workq_get_stats(&m, e.w));
    if (ready > 0)
        assert_true(m.oldest_ready_age_ms >= 0);
    else
        assert_int_equal(m.oldest_ready_age_ms, -1);
    uint64_t len;
    assert_ok(kvq_queue_len(&len, e.q));
    assert_int_equal((int64_t)len, ready);
    kvq_buf_dispose(&b);
    env_close(&e);
}

static void test_oldest_age(void **state)
{
    (void)state;
    wq_env e = env_open(KVQ_QUEUE_DURABLE, NULL);
    push_str(e.w, "old", NULL, 1);
    kvq__sleep_us(300000);
    push_str(e.w, "new", NULL, 1); /* a commit: versions move on */
    kvq_workq_stats m;
    assert_ok(kvq_workq_get_stats(&m, e.w));
    assert_true(m.oldest_ready_age_ms >= 250);
    assert_true(m.oldest_ready_age_ms < 3600000);
    env_close(&e);
}

/* A priority queue's oldest ready item is the one pushed first, whatever its priority; it keeps
 * its age through a lease given back, and the age index skips (and upkeep prunes) entries of
 * items taken with a plain pop. Bounds are in database versions: the age is at least the time
 * between a version read after the push and one read before the metrics. */
static int64_t prio_age(wq_env *e)
{
    kvq_workq_stats m;
    assert_ok(kvq_workq_get_stats(&m, e->w));
    assert_true(m.oldest_ready_age_ms < 3600000);
    return m.oldest_ready_age_ms;
}

/* How many entries the age index holds (its keys: bk + ("wq","a", ...), see docs/workq.md). */
typedef struct count_arg {
    kvq_queue *q;
    size_t n;
} count_arg;

static int count_age_body(kvq_txn *txn, void *arg)
{
    count_arg *c = arg;
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    kvq_tuple_elem e[2] = { kvq_tuple_str("wq"), kvq_tuple_str("a") };
    static const uint8_t z = 0, f = 0xff;
    int rc = kvq_buf_append(&lo, c->q->bk.data, c->q->bk.len);
    if (rc == 0)
        rc = kvq_tuple_pack_buf(&lo, e, 2);
    if (rc == 0)
        rc = kvq_buf_append(&hi, lo.data, lo.len);
    if (rc == 0)
        rc = kvq_buf_append(&lo, &z, 1);
    if (rc == 0)
        rc = kvq_buf_append(&hi, &f, 1);
    const kvq_kv *kvs;
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &c->n, NULL, txn, lo.data, lo.len, hi.data, hi.len, 100,
                               KVQ_SNAPSHOT);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    return rc;
}

static size_t age_entries(wq_env *e)
{
    count_arg c = { e->q, 0 };
    assert_ok(kvq_db_transact(e->db, count_age_body, &c));
    return c.n;
}

static void test_oldest_age_priority(void **state)
{
    (void)state;
    wq_env e = env_open(KVQ_QUEUE_PRIORITY, NULL);
    assert_int_equal(prio_age(&e), -1);
    kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
    po.priority = 9; /* received last, but the oldest */
    push_str(e.w, "old", &po, 1);
    int64_t t_old = db_now(e.db);
    kvq__sleep_us(300000);
    po.priority = 1;
    push_str(e.w, "new", &po, 1);
    int64_t t_new = db_now(e.db);
    int64_t age = prio_age(&e);
    int64_t lower = (t_new - t_old) / 1000;
    assert_true(age >= lower);
    /* Receive both; give "old" back: it keeps its age. */
    kvq_workq_lease ln, lo;
    expect_recv(e.w, "new", &ln, 0);
    expect_recv(e.w, "old", &lo, 0);
    assert_int_equal(prio_age(&e), -1);
    assert_ok(kvq_workq_nack(e.w, &lo, 0));
    assert_true(prio_age(&e) >= lower);
    /* The same after an expired lease comes back. */
    expect_recv(e.w, "old", &lo, 200);
    kvq_buf b = KVQ_BUF_INIT;
    kvq_workq_lease lo2;
    assert_ok(recv_wait(e.w, &b, &lo2, 0));
    assert_bytes(b.data, b.len, (const uint8_t *)"old", 3);
    assert_ok(kvq_workq_nack(e.w, &lo2, 0));
    assert_true(prio_age(&e) >= lower);
    /* Acked: the oldest is now "new" (given back, it too keeps its first age). */
    expect_recv(e.w, "old", &lo, 0);
    assert_ok(kvq_workq_nack(e.w, &ln, 0));
    assert_ok(kvq_workq_ack(e.w, &lo));
    int64_t t_now = db_now(e.db);
    age = prio_age(&e);
    assert_true(age >= 0);
    assert_true(age >= (t_now - t_new) / 1000);
    /* A plain pop takes "new" behind the layer's back: its entry is skipped, then pruned. */
    int64_t prio;
    assert_ok(kvq_queue_pop_prio(&b, &prio, e.q, KVQ_QUEUE_MIN));
    assert_bytes(b.data, b.len, (const uint8_t *)"new", 3);
    assert_int_equal(prio_age(&e), -1);
    push_str(e.w, "newer", &po, 1);
    assert_true(prio_age(&e) >= 0);
    assert_int_equal(age_entries(&e), 2);
    assert_ok(kvq_workq_recover(NULL, e.w));
    assert_int_equal(age_entries(&e), 1);
    assert_true(prio_age(&e) >= 0);
    expect_recv(e.w, "newer", &ln, 0);
    assert_ok(kvq_workq_ack(e.w, &ln));
    assert_int_equal(prio_age(&e), -1);
    kvq_buf_dispose(&b);
    env_close(&e);
}

/* The transaction forms compose with the caller's own writes. */
static int outbox_body(kvq_txn *txn, void *arg)
{
    kvq_workq *w = arg;
    bool enq;
    int rc = kvq_workq_push_txn(&enq, w, txn, (const uint8_t *)"tx", 2, NULL);
    if (rc == 0)
        rc = kvq_txn_set(txn, (const uint8_t *)"app", 3, (const uint8_t *)"1", 1);
    return rc;
}

typedef struct ack_arg {
    kvq_workq *w;
    kvq_workq_lease *l;
} ack_arg;

static int ack_abort_body(kvq_txn *txn, void *arg)
{
    ack_arg *a = arg;
    int rc = kvq_workq_ack_txn(a->w, txn, a->l);
    return rc != 0 ? rc : KVQ_EUSER; /* the caller's effect failed: nothing commits */
}

static void test_txn_forms(void **state)
{
    (void)state;
    wq_env e = env_open(KVQ_QUEUE_DURABLE, NULL);
    assert_ok(kvq_db_transact(e.db, outbox_body, e.w));
    kvq_workq_lease l;
    expect_recv(e.w, "tx", &l, 0);
    ack_arg a = { e.w, &l };
    assert_int_equal(kvq_db_transact(e.db, ack_abort_body, &a), KVQ_EUSER);
    expect_metrics(e.w, 0, 1, 0, 0);
    assert_ok(kvq_workq_ack(e.w, &l));
    env_close(&e);
}

typedef struct listed {
    int n;
    char val[4][16];
    kvq_workq_item it[4];
} listed;

static int collect_item(const kvq_workq_item *it, void *payload)
{
    listed *l = payload;
    if (l->n >= 4)
        return KVQ_ERANGE;
    snprintf(l->val[l->n], sizeof(l->val[0]), "%.*s", (int)it->value.len,
             (const char *)it->value.data);
    l->it[l->n++] = *it;
    return 0;
}

/* In-flight items, the lease ending soonest first, with a lease that settles them; delayed
 * items, due soonest first. */
static void list_case(kvq_queue_type type)
{
    wq_env e = env_open(type, NULL);
    push_str(e.w, "a", NULL, 1);
    push_str(e.w, "b", NULL, 1);
    push_str(e.w, "c", NULL, 1);
    kvq_workq_lease la, lb, lc;
    expect_recv(e.w, "a", &la, 20000);
    expect_recv(e.w, "b", &lb, 10000);
    expect_recv(e.w, "c", &lc, 0);
    assert_ok(kvq_workq_nack(e.w, &lc, 60000));
    listed l;
    memset(&l, 0, sizeof(l));
    assert_ok(kvq_workq_list_inflight(e.w, collect_item, &l));
    assert_int_equal(l.n, 2);
    assert_string_equal(l.val[0], "b"); /* its lease ends first */
    assert_string_equal(l.val[1], "a");
    assert_true(l.it[0].due_ms > 0 && l.it[0].due_ms <= 10000);
    assert_true(l.it[1].due_ms > 10000 && l.it[1].due_ms <= 20000);
    assert_int_equal(l.it[0].deliveries, 1);
    assert_memory_equal(l.it[0].lease.id, lb.id, 16);
    /* The listed lease settles the item. */
    kvq_workq_lease from_list = l.it[1].lease;
    assert_ok(kvq_workq_ack(e.w, &from_list));
    assert_int_equal(kvq_workq_ack(e.w, &la), KVQ_ELEASE_SETTLED);
    memset(&l, 0, sizeof(l));
    assert_ok(kvq_workq_list_delayed(e.w, collect_item, &l));
    assert_int_equal(l.n, 1);
    assert_string_equal(l.val[0], "c");
    assert_int_equal(l.it[0].deliveries, 1);
    assert_true(l.it[0].due_ms > 50000 && l.it[0].due_ms <= 60000);
    /* A callback's error stops the listing and is returned. */
    memset(&l, 0, sizeof(l));
    l.n = 4;
    assert_int_equal(kvq_workq_list_inflight(e.w, collect_item, &l), KVQ_ERANGE);
    assert_int_equal(kvq_workq_list_inflight(e.w, NULL, &l), KVQ_EINVAL);
    assert_int_equal(kvq_workq_list_delayed(NULL, collect_item, &l), KVQ_EINVAL);
    assert_ok(kvq_workq_ack(e.w, &lb));
    env_close(&e);
}

static void test_list_durable(void **state)
{
    (void)state;
    list_case(KVQ_QUEUE_DURABLE);
}

static void test_list_priority(void **state)
{
    (void)state;
    list_case(KVQ_QUEUE_PRIORITY);
}

int main(int argc, char **argv)
{
    kt_seed_init(argc, argv);
    const char *url = getenv("KVQ_TEST_URL");
    printf("# database: %s\n", url != NULL && url[0] != '\0' ? url : "embedded, fresh directories");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_lease_ack_durable),
        cmocka_unit_test(test_lease_ack_priority),
        cmocka_unit_test(test_redelivery_and_late_ack),
        cmocka_unit_test(test_expired_not_returned),
        cmocka_unit_test(test_extend),
        cmocka_unit_test(test_poison_durable),
        cmocka_unit_test(test_poison_priority),
        cmocka_unit_test(test_delayed_durable),
        cmocka_unit_test(test_delayed_priority),
        cmocka_unit_test(test_not_before),
        cmocka_unit_test(test_dedup),
        cmocka_unit_test(test_metrics_model),
        cmocka_unit_test(test_oldest_age),
        cmocka_unit_test(test_oldest_age_priority),
        cmocka_unit_test(test_txn_forms),
        cmocka_unit_test(test_list_durable),
        cmocka_unit_test(test_list_priority),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
