/* A due item is ready for every reader (issue 22, item 5): a delayed item whose time has come and
 * an item whose lease has ended are seen as ready by pops, peeks, lengths, iteration, receives,
 * metrics and listings, in the convenience and the transaction forms, on durable and priority
 * queues, without any call that makes them ready first (kvq_workq_ready_due stays optional).
 *
 * Engines: the embedded engine in a fresh directory, or the database named by $KVQ_TEST_URL
 * (ctest runs this binary again as fdb.test_workq_due). Each test works in a subspace (or under
 * a queue name) of its own.
 *
 * Time: versions follow the clock on both engines and there is no knob to move them, so a test
 * waits for the database's version itself (read without touching any queue) to pass an item's
 * due version or a lease's deadline, with a bound of a minute, and then lets a reader be the
 * first to look. No test asserts that anything happened within some time. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>

#include "kvq/workq_batch.h"
#include "test_queue_common.h"

#define WAIT_US 60000000LL

static kvq_db *open_test_db(void)
{
    if (!kt_db_url_given())
        return tq_open_db(0, 0, 0);
    kvq_db_options o = tq_options();
    return kt_db_open_url(getenv("KVQ_TEST_URL"), &o, NULL);
}

static uint64_t run_id(void)
{
    static uint64_t run;
    if (run == 0 && kvq__random_bytes(&run, sizeof(run)) != 0)
        run = (uint64_t)kvq__now_us();
    return run;
}

/* A subspace no other test (nor an earlier run on a shared database) uses: ("wqdue", run, n). */
static kvq_subspace *fresh_subspace(void)
{
    static int64_t n;
    uint64_t run = run_id();
    kvq_tuple_elem e[3] = { kvq_tuple_str("wqdue"), kvq_tuple_bytes((const uint8_t *)&run, 8),
                            kvq_tuple_int(++n) };
    kvq_subspace *sub = NULL;
    if (kvq_subspace_new(&sub, NULL, 0, e, 3) != 0)
        fail_msg("kvq_subspace_new failed");
    return sub;
}

static int rv_body(kvq_txn *txn, void *arg)
{
    return kvq_txn_get_read_version(arg, txn);
}

/* The database's present version (a read-only transaction that reads no key). */
static int64_t db_now(kvq_db *db)
{
    int64_t rv = 0;
    assert_ok(kvq_db_transact(db, rv_body, &rv));
    return rv;
}

/* Waits until the database's version has passed `version`, reading nothing of any queue. */
static void wait_past(kvq_db *db, int64_t version)
{
    int64_t end = kvq__mono_us() + WAIT_US;
    while (db_now(db) <= version) {
        if (kvq__mono_us() > end)
            fail_msg("the database's version did not pass %lld within a minute",
                     (long long)version);
        kvq__sleep_us(5000);
    }
}

/* One queue of the test: the handle that pushes (with its work queue) and the database. */
typedef struct env {
    kvq_db *db;
    kvq_queue_type type;
    kvq_subspace *sub;
    kvq_queue *q;
    kvq_workq *w;
} env;

static env env_open(kvq_queue_type type, const kvq_workq_options *wo)
{
    env e;
    tq_mkdir();
    e.db = open_test_db();
    e.type = type;
    e.sub = fresh_subspace();
    assert_ok(kvq_queue_open(&e.q, e.db, type, e.sub, NULL));
    assert_ok(kvq_workq_open(&e.w, e.q, wo));
    return e;
}

static void env_close(env *e)
{
    kvq_workq_close(e->w);
    kvq_queue_close(e->q);
    kvq_subspace_destroy(e->sub);
    kvq_db_close(e->db);
    tq_rmdir();
}

/* A second handle on the same queue, over which no work queue was ever opened: a reader that
 * knows nothing of delays and leases. */
static kvq_queue *plain_handle(env *e)
{
    kvq_queue *q = NULL;
    assert_ok(kvq_queue_open(&q, e->db, e->type, e->sub, NULL));
    return q;
}

/* Pushes s with a delay and returns a version by which it is due. */
static int64_t push_delayed(env *e, const char *s, int64_t delay_ms, int64_t prio)
{
    kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
    po.delay_ms = delay_ms;
    po.priority = e->type == KVQ_QUEUE_PRIORITY ? prio : 0;
    bool enq = false;
    assert_ok(kvq_workq_push(&enq, e->w, (const uint8_t *)s, strlen(s), &po));
    assert_int_equal(enq, 1);
    /* The push read a version below this one: it is due at most delay later. */
    return db_now(e->db) + delay_ms * KVQ__VERSIONS_PER_MS;
}

static void expect_str(const kvq_buf *b, const char *want)
{
    assert_bytes(b->data, b->len, (const uint8_t *)want, strlen(want));
}

/* ready -1: not checked (a priority queue's ready count only follows this API's operations, not
 * plain pops: kvq/workq.h). */
static void expect_metrics(kvq_workq *w, int64_t ready, int64_t inflight, int64_t delayed,
                           int64_t dead)
{
    kvq_workq_stats m;
    assert_ok(kvq_workq_get_stats(&m, w));
    if ((ready >= 0 && m.ready != ready) || m.inflight != inflight || m.delayed != delayed || m.dead != dead)
        fail_msg("metrics ready %lld inflight %lld delayed %lld dead %lld, want %lld %lld %lld "
                 "%lld",
                 (long long)m.ready, (long long)m.inflight, (long long)m.delayed,
                 (long long)m.dead, (long long)ready, (long long)inflight, (long long)delayed,
                 (long long)dead);
}

/* ---- the scenario ---------------------------------------------------------------- */

/* push --delay 500 x; wait until due; pop: x, from the C API with no explicit call. An item
 * delayed by an hour stays invisible, and so does one leased for an hour (a lease in flight
 * that has not ended: the readers then look at the delayed items on their own). */
static void scenario(kvq_queue_type type)
{
    env e = env_open(type, NULL);
    (void)push_delayed(&e, "held", 0, 0);
    kvq_buf h = KVQ_BUF_INIT;
    kvq_workq_lease hl;
    assert_ok(kvq_workq_receive(&h, &hl, e.w, 3600000));
    expect_str(&h, "held");
    kvq_buf_dispose(&h);
    (void)push_delayed(&e, "later", 3600000, 0);
    int64_t due = push_delayed(&e, "x", 500, 0);
    wait_past(e.db, due);
    kvq_buf v = KVQ_BUF_INIT;
    assert_ok(type == KVQ_QUEUE_PRIORITY ? kvq_queue_pop_prio(&v, NULL, e.q, KVQ_QUEUE_MIN)
                                         : kvq_queue_pop(&v, e.q));
    expect_str(&v, "x");
    assert_int_equal(kvq_queue_pop(&v, e.q), KVQ_ENOTFOUND);
    expect_metrics(e.w, type == KVQ_QUEUE_PRIORITY ? -1 : 0, 1, 1, 0);
    assert_ok(kvq_workq_ack(e.w, &hl));
    kvq_buf_dispose(&v);
    env_close(&e);
}

static void test_scenario_durable(void **state)
{
    (void)state;
    scenario(KVQ_QUEUE_DURABLE);
}

static void test_scenario_priority(void **state)
{
    (void)state;
    scenario(KVQ_QUEUE_PRIORITY);
}

/* A queue whose prefix is long (the readers' look then builds its keys on the heap). */
static void test_long_prefix(void **state)
{
    (void)state;
    tq_mkdir();
    kvq_db *db = open_test_db();
    char name[1000];
    uint64_t run = run_id();
    memset(name, 'p', sizeof(name));
    memcpy(name, &run, sizeof(run));
    kvq_tuple_elem e[2] = { kvq_tuple_str("wqdue-long"), kvq_tuple_bytes(name, sizeof(name)) };
    kvq_subspace *sub = NULL;
    assert_ok(kvq_subspace_new(&sub, NULL, 0, e, 2));
    kvq_queue *q = NULL;
    kvq_workq *w = NULL;
    assert_ok(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, sub, NULL));
    assert_ok(kvq_workq_open(&w, q, NULL));
    kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
    po.delay_ms = 100;
    assert_ok(kvq_workq_push(NULL, w, (const uint8_t *)"x", 1, &po));
    wait_past(db, db_now(db) + 100 * KVQ__VERSIONS_PER_MS);
    kvq_buf v = KVQ_BUF_INIT;
    assert_ok(kvq_queue_pop(&v, q));
    expect_str(&v, "x");
    kvq_buf_dispose(&v);
    kvq_workq_close(w);
    kvq_queue_close(q);
    kvq_subspace_destroy(sub);
    kvq_db_close(db);
    tq_rmdir();
}

/* A priority queue in high-contention mode: its pops look for due items first too. */
static void test_high_contention(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_PRIORITY, NULL);
    int64_t due = push_delayed(&e, "x", 100, 2);
    wait_past(e.db, due);
    kvq_queue_options qo = KVQ_QUEUE_OPTIONS_INIT;
    qo.flags |= KVQ_QUEUE_HIGH_CONTENTION;
    kvq_queue *hc = NULL;
    assert_ok(kvq_queue_open(&hc, e.db, KVQ_QUEUE_PRIORITY, e.sub, &qo));
    kvq_buf v = KVQ_BUF_INIT;
    int64_t prio = -1;
    assert_ok(kvq_queue_pop_prio(&v, &prio, hc, KVQ_QUEUE_MIN));
    expect_str(&v, "x");
    assert_int_equal(prio, 2);
    kvq_buf_dispose(&v);
    kvq_queue_close(hc);
    env_close(&e);
}

/* A batch lease (kvq_workq_receive_many) that ended: its items are ready for a plain pop. */
static void test_expired_batch(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, NULL);
    const char *vals[3] = { "a", "b", "c" };
    for (int i = 0; i < 3; i++)
        (void)push_delayed(&e, vals[i], 0, 0);
    kvq_buf outs[10];
    kvq_workq_lease leases[10];
    memset(outs, 0, sizeof(outs));
    size_t n = 0;
    assert_ok(kvq_workq_receive_many(outs, leases, &n, e.w, 10, 200));
    assert_int_equal(n, 3);
    int64_t end = leases[0].deadline;
    for (size_t i = 1; i < n; i++)
        end = leases[i].deadline > end ? leases[i].deadline : end;
    wait_past(e.db, end);
    kvq_queue *plain = plain_handle(&e);
    size_t got = 0;
    assert_ok(kvq_queue_pop_k(outs, &got, plain, 10));
    assert_int_equal(got, 3);
    for (size_t i = 0; i < got; i++)
        expect_str(&outs[i], vals[i]);
    expect_metrics(e.w, 0, 0, 0, 0);
    assert_int_equal(kvq_workq_ack(e.w, &leases[0]), KVQ_ELEASE_EXPIRED);
    for (int i = 0; i < 10; i++)
        kvq_buf_dispose(&outs[i]);
    kvq_queue_close(plain);
    env_close(&e);
}

/* ---- every reader, each the first to look ---------------------------------------------- */

enum {
    R_POP, R_POP_K, R_PEEK, R_LEN, R_ITERATE, R_CONSUME_K, R_POP_TXN, R_PEEK_TXN, R_LEN_TXN,
    R_ITERATE_TXN, R_RECEIVE, R_RECEIVE_MANY, R_RECEIVE_TXN, R_METRICS, R_LIST_DELAYED,
    R_COUNT
};
static const char *const READER_NAMES[R_COUNT] = {
    "pop", "pop_k", "peek", "len", "iterate", "consume_k", "pop_txn", "peek_txn", "len_txn",
    "iterate_txn", "receive", "receive_many", "receive_txn", "metrics", "list_delayed",
};

typedef struct reader_ctx {
    int kind;
    kvq_queue *q;
    kvq_workq *w;
    kvq_buf val;
    uint64_t n;
    kvq_workq_lease lease;
} reader_ctx;

static int iter_count(kvq_bytes value, int64_t priority, void *payload)
{
    (void)priority;
    reader_ctx *c = payload;
    c->n++;
    return kvq__buf_set(&c->val, value.data, value.len);
}

static int list_count(const kvq_workq_item *item, void *payload)
{
    (void)item;
    ((reader_ctx *)payload)->n++;
    return 0;
}

/* The transaction forms inside a retry loop, as their callers run them. */
static int reader_body(kvq_txn *txn, void *arg)
{
    reader_ctx *c = arg;
    kvq_bytes v = { NULL, 0 };
    int rc;
    c->n = 0;
    switch (c->kind) {
    case R_POP_TXN:
        rc = kvq_queue_pop_txn(&v, c->q, txn);
        break;
    case R_PEEK_TXN:
        rc = kvq_queue_peek_txn(&v, c->q, txn, KVQ_SNAPSHOT);
        break;
    case R_LEN_TXN:
        return kvq_queue_len_txn(&c->n, c->q, txn, KVQ_SNAPSHOT);
    case R_ITERATE_TXN:
        return kvq_queue_iterate_txn(c->q, txn, iter_count, c);
    default:
        rc = kvq_workq_receive_txn(&v, &c->lease, c->w, txn, 0);
        break;
    }
    if (rc == 0) {
        c->n = 1;
        rc = kvq__buf_set(&c->val, v.data, v.len);
    }
    return rc;
}

/* Runs reader `kind` on q (w: a work queue over q); c->n = items it saw, c->val the value. */
static void run_reader(reader_ctx *c, kvq_db *db)
{
    kvq_buf outs[4] = { KVQ_BUF_INIT, KVQ_BUF_INIT, KVQ_BUF_INIT, KVQ_BUF_INIT };
    kvq_workq_lease leases[4];
    kvq_workq_stats m;
    kvq_watch *watch = NULL;
    size_t n = 0;
    c->n = 0;
    switch (c->kind) {
    case R_POP:
        assert_ok(kvq_queue_get_type(c->q) == KVQ_QUEUE_PRIORITY
                      ? kvq_queue_pop_prio(&c->val, NULL, c->q, KVQ_QUEUE_MIN)
                      : kvq_queue_pop(&c->val, c->q));
        c->n = 1;
        break;
    case R_POP_K:
        assert_ok(kvq_queue_pop_k(outs, &n, c->q, 4));
        c->n = n;
        assert_ok(kvq__buf_set(&c->val, outs[0].data, outs[0].len));
        break;
    case R_PEEK:
        assert_ok(kvq_queue_peek(&c->val, c->q));
        c->n = 1;
        break;
    case R_LEN:
        assert_ok(kvq_queue_len(&c->n, c->q));
        break;
    case R_ITERATE:
        assert_ok(kvq_queue_iterate(c->q, iter_count, c));
        break;
    case R_CONSUME_K:
        assert_ok(kvq_queue_consume_k(outs, &n, &watch, c->q, 4));
        kvq_watch_destroy(watch);
        c->n = n;
        if (n > 0)
            assert_ok(kvq__buf_set(&c->val, outs[0].data, outs[0].len));
        break;
    case R_RECEIVE:
        assert_ok(kvq_workq_receive(&c->val, &c->lease, c->w, 0));
        c->n = 1;
        break;
    case R_RECEIVE_MANY:
        assert_ok(kvq_workq_receive_many(outs, leases, &n, c->w, 4, 0));
        c->n = n;
        c->lease = leases[0];
        assert_ok(kvq__buf_set(&c->val, outs[0].data, outs[0].len));
        break;
    case R_METRICS:
        assert_ok(kvq_workq_get_stats(&m, c->w));
        assert_int_equal(m.delayed, 0);
        assert_int_equal(m.inflight, 0);
        c->n = (uint64_t)m.ready;
        break;
    case R_LIST_DELAYED:
        /* Due items are ready, hence not listed as delayed. */
        assert_ok(kvq_workq_list_delayed(c->w, list_count, c));
        assert_int_equal(c->n, 0);
        c->n = 1;
        break;
    default:
        assert_ok(kvq_db_transact(db, reader_body, c));
        break;
    }
    for (int i = 0; i < 4; i++)
        kvq_buf_dispose(&outs[i]);
}

/* Whether a reader takes the item away (else it is still there for the others to agree). */
static int takes(int kind)
{
    return kind == R_POP || kind == R_POP_K || kind == R_CONSUME_K || kind == R_POP_TXN ||
           kind == R_RECEIVE || kind == R_RECEIVE_MANY || kind == R_RECEIVE_TXN;
}

static int shows_value(int kind)
{
    return kind != R_LEN && kind != R_LEN_TXN && kind != R_METRICS && kind != R_LIST_DELAYED;
}

/* Each reader on a queue of its own, the first to look once the item is due (delayed) or once
 * its lease ended (expired); then the others agree. */
static void every_reader(kvq_queue_type type, int expired)
{
    for (int kind = 0; kind < R_COUNT; kind++) {
        if (kind == R_CONSUME_K && type != KVQ_QUEUE_DURABLE)
            continue;
        env e = env_open(type, NULL);
        int64_t due;
        kvq_workq_lease l0;
        if (expired) {
            (void)push_delayed(&e, "x", 0, 0);
            kvq_buf b = KVQ_BUF_INIT;
            assert_ok(kvq_workq_receive(&b, &l0, e.w, 200));
            expect_str(&b, "x");
            kvq_buf_dispose(&b);
            due = l0.deadline;
        } else {
            due = push_delayed(&e, "x", 200, 0);
        }
        wait_past(e.db, due);
        /* The reader: a handle of its own, without a work queue unless the reader needs one. */
        reader_ctx c;
        memset(&c, 0, sizeof(c));
        c.kind = kind;
        c.q = plain_handle(&e);
        if (kind >= R_RECEIVE)
            assert_ok(kvq_workq_open(&c.w, c.q, NULL));
        print_message("%s %s: %s first\n", type == KVQ_QUEUE_DURABLE ? "durable" : "priority",
                      expired ? "expired lease" : "due delayed item", READER_NAMES[kind]);
        run_reader(&c, e.db);
        assert_int_equal(c.n, 1);
        if (shows_value(kind))
            expect_str(&c.val, "x");
        if (kind == R_RECEIVE || kind == R_RECEIVE_MANY || kind == R_RECEIVE_TXN)
            assert_int_equal(c.lease.deliveries, expired ? 2 : 1);
        if (expired)
            assert_int_equal(kvq_workq_ack(e.w, &l0), KVQ_ELEASE_EXPIRED);
        /* The others agree. */
        uint64_t len = 9;
        assert_ok(kvq_queue_len(&len, e.q));
        kvq_buf v = KVQ_BUF_INIT;
        if (takes(kind)) {
            assert_int_equal(len, 0);
            assert_int_equal(kvq_queue_peek(&v, e.q), KVQ_ENOTFOUND);
            if (kind >= R_RECEIVE)
                expect_metrics(e.w, 0, 1, 0, 0);
            else
                expect_metrics(e.w, type == KVQ_QUEUE_PRIORITY ? -1 : 0, 0, 0, 0);
        } else {
            assert_int_equal(len, 1);
            assert_ok(kvq_queue_peek(&v, e.q));
            expect_str(&v, "x");
            expect_metrics(e.w, 1, 0, 0, 0);
        }
        kvq_buf_dispose(&v);
        kvq_buf_dispose(&c.val);
        kvq_workq_close(c.w);
        kvq_queue_close(c.q);
        env_close(&e);
    }
}

static void test_due_durable(void **state)
{
    (void)state;
    every_reader(KVQ_QUEUE_DURABLE, 0);
}

static void test_due_priority(void **state)
{
    (void)state;
    every_reader(KVQ_QUEUE_PRIORITY, 0);
}

static void test_expired_durable(void **state)
{
    (void)state;
    every_reader(KVQ_QUEUE_DURABLE, 1);
}

static void test_expired_priority(void **state)
{
    (void)state;
    every_reader(KVQ_QUEUE_PRIORITY, 1);
}

/* ---- the settings a plain reader applies to an ended lease ----------------------------- */

static int count_dead(kvq_bytes value, uint32_t deliveries, void *payload)
{
    (void)value;
    (void)deliveries;
    (*(int *)payload)++;
    return 0;
}

/* A named queue's handle applies the stored max deliveries (the item that has had its one
 * delivery goes to the dead letters); a handle that knows none never dead-letters (a receiver
 * does then, with its own settings, when it takes the item). */
static void test_reader_settings(void **state)
{
    (void)state;
    tq_mkdir();
    kvq_db *db = open_test_db();
    char name[64];
    snprintf(name, sizeof(name), "wqdue-%016llx", (unsigned long long)run_id());
    kvq_queue_settings s = KVQ_QUEUE_SETTINGS_INIT;
    s.max_deliveries = 1;
    assert_ok(kvq_queue_create_named(db, name, &s));
    kvq_queue *qn = NULL;
    kvq_workq *wn = NULL;
    assert_ok(kvq_queue_open_named(&qn, NULL, db, name));
    assert_ok(kvq_workq_open(&wn, qn, NULL));
    assert_ok(kvq_workq_push(NULL, wn, (const uint8_t *)"n", 1, NULL));
    kvq_buf b = KVQ_BUF_INIT;
    kvq_workq_lease l;
    assert_ok(kvq_workq_receive(&b, &l, wn, 100));
    wait_past(db, l.deadline);
    kvq_queue *reader = NULL;
    assert_ok(kvq_queue_open_named(&reader, NULL, db, name));
    uint64_t len = 9;
    assert_ok(kvq_queue_len(&len, reader));
    assert_int_equal(len, 0);
    expect_metrics(wn, 0, 0, 0, 1);
    /* The dead letters' listing, the first reader after another lease ended, lists both. */
    assert_ok(kvq_workq_push(NULL, wn, (const uint8_t *)"m", 1, NULL));
    assert_ok(kvq_workq_receive(&b, &l, wn, 100));
    wait_past(db, l.deadline);
    kvq_workq *rw = NULL;
    assert_ok(kvq_workq_open(&rw, reader, NULL));
    int dead_seen = 0;
    assert_ok(kvq_workq_dlq_list(rw, count_dead, &dead_seen));
    assert_int_equal(dead_seen, 2);
    kvq_workq_close(rw);
    kvq_queue_close(reader);
    kvq_workq_close(wn);
    kvq_queue_close(qn);
    assert_ok(kvq_queue_delete_named(db, name));

    /* An unnamed queue whose work queue has max deliveries 1, read by a handle that knows no
     * work queue: the item is ready again for it; the receiver then dead-letters it. */
    kvq_subspace *sub = fresh_subspace();
    kvq_queue *q = NULL, *plain = NULL;
    kvq_workq *w = NULL;
    kvq_workq_options wo = KVQ_WORKQ_OPTIONS_INIT;
    wo.max_deliveries = 1;
    assert_ok(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, sub, NULL));
    assert_ok(kvq_queue_open(&plain, db, KVQ_QUEUE_DURABLE, sub, NULL));
    assert_ok(kvq_workq_open(&w, q, &wo));
    assert_ok(kvq_workq_push(NULL, w, (const uint8_t *)"u", 1, NULL));
    assert_ok(kvq_workq_receive(&b, &l, w, 100));
    wait_past(db, l.deadline);
    assert_ok(kvq_queue_len(&len, plain));
    assert_int_equal(len, 1);
    assert_int_equal(kvq_workq_receive(&b, &l, w, 0), KVQ_ENOTFOUND);
    expect_metrics(w, 0, 0, 0, 1);
    /* The same through receive_many: the move to the dead letters is committed with the
     * ENOTFOUND (it was rolled back, so every receive_many found the item again). */
    assert_ok(kvq_workq_push(NULL, w, (const uint8_t *)"u2", 2, NULL));
    assert_ok(kvq_workq_receive(&b, &l, w, 100));
    wait_past(db, l.deadline);
    assert_ok(kvq_queue_len(&len, plain));
    assert_int_equal(len, 1);
    kvq_buf many[4] = { KVQ_BUF_INIT, KVQ_BUF_INIT, KVQ_BUF_INIT, KVQ_BUF_INIT };
    kvq_workq_lease ml[4];
    size_t mn = 9;
    assert_int_equal(kvq_workq_receive_many(many, ml, &mn, w, 4, 0), KVQ_ENOTFOUND);
    assert_int_equal(mn, 0);
    expect_metrics(w, 0, 0, 0, 2);
    assert_int_equal(kvq_workq_receive_many(many, ml, &mn, w, 4, 0), KVQ_ENOTFOUND);
    expect_metrics(w, 0, 0, 0, 2);
    /* The same handle as the work queue's: its settings (the dead letters at once). */
    assert_ok(kvq_workq_push(NULL, w, (const uint8_t *)"v", 1, NULL));
    assert_ok(kvq_workq_receive(&b, &l, w, 100));
    wait_past(db, l.deadline);
    assert_ok(kvq_queue_len(&len, q));
    assert_int_equal(len, 0);
    expect_metrics(w, 0, 0, 0, 3);
    kvq_buf_dispose(&b);
    kvq_workq_close(w);
    kvq_queue_close(q);
    kvq_queue_close(plain);
    kvq_subspace_destroy(sub);
    kvq_db_close(db);
    tq_rmdir();
}

/* ---- transaction forms outside a retry loop; read-only databases ----------------------- */

/* A _txn reader that finds something due makes it ready and returns 1020 (KVQ_ENOT_COMMITTED),
 * which kvq_txn_on_error retries like any conflict; the retry sees the item. */
static void test_txn_form_retry(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, NULL);
    int64_t due = push_delayed(&e, "x", 100, 0);
    wait_past(e.db, due);
    kvq_txn *txn = NULL;
    assert_ok(kvq_txn_create(&txn, e.db));
    kvq_bytes v;
    int rc = kvq_queue_pop_txn(&v, e.q, txn);
    assert_int_equal(rc, KVQ_ENOT_COMMITTED);
    assert_ok(kvq_txn_on_error(txn, rc));
    assert_ok(kvq_queue_pop_txn(&v, e.q, txn));
    assert_bytes(v.data, v.len, (const uint8_t *)"x", 1);
    assert_ok(kvq_txn_commit(txn));
    kvq_txn_destroy(txn);
    expect_metrics(e.w, 0, 0, 0, 0);
    env_close(&e);
}

/* A read-only database cannot move anything: readers see what is stored, without an error
 * (embedded engine only: main runs it only then). */
static void test_read_only(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, NULL);
    int64_t due = push_delayed(&e, "x", 100, 0);
    wait_past(e.db, due);
    kvq_db_options o = tq_options();
    o.flags |= KVQ_DB_READ_ONLY | KVQ_DB_NO_CREATE;
    kvq_db *ro = NULL;
    assert_ok(kvq_db_open(&ro, tq_dir, &o));
    kvq_queue *q = NULL;
    assert_ok(kvq_queue_open(&q, ro, KVQ_QUEUE_DURABLE, e.sub, NULL));
    uint64_t len = 9;
    assert_ok(kvq_queue_len(&len, q));
    assert_int_equal(len, 0);
    kvq_buf v = KVQ_BUF_INIT;
    assert_int_equal(kvq_queue_peek(&v, q), KVQ_ENOTFOUND);
    kvq_queue_close(q);
    kvq_db_close(ro);
    assert_ok(kvq_queue_peek(&v, e.q));
    expect_str(&v, "x");
    kvq_buf_dispose(&v);
    env_close(&e);
}

/* ---- a race: many consumers while items fall due and leases end ------------------------ */

#define RACE_ITEMS  240
/* The race's bound: generous, for a loaded machine and the fdb engine's test double. */
#define RACE_US 240000000LL
#define RACE_POPPERS 3
#define RACE_RECEIVERS 3

typedef struct race {
    env *e;
    kvq_queue *plain; /* shared by the poppers: no work queue over it */
    kvq_queue *rq;    /* the receivers' handle */
    kvq_workq *rw;
    int seen[RACE_ITEMS]; /* atomic: times each item was taken for good */
    int done;             /* atomic: items taken for good */
    int abandoned;        /* atomic: leases left to end */
    int failed;           /* atomic: an unexpected error (its code; -1: a value not pushed) */
} race;

static void take(race *r, const kvq_buf *b)
{
    char s[16];
    size_t n = b->len < sizeof(s) - 1 ? b->len : sizeof(s) - 1;
    memcpy(s, b->data, n);
    s[n] = 0;
    int i = atoi(s);
    if (i < 0 || i >= RACE_ITEMS) {
        __atomic_store_n(&r->failed, -1, __ATOMIC_RELAXED);
        return;
    }
    __atomic_add_fetch(&r->seen[i], 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&r->done, 1, __ATOMIC_RELAXED);
}

static int race_over(race *r, int64_t end)
{
    return __atomic_load_n(&r->done, __ATOMIC_RELAXED) >= RACE_ITEMS ||
           __atomic_load_n(&r->failed, __ATOMIC_RELAXED) || kvq__mono_us() > end;
}

static void *popper(void *arg)
{
    race *r = arg;
    kvq_buf outs[3] = { KVQ_BUF_INIT, KVQ_BUF_INIT, KVQ_BUF_INIT };
    int64_t end = kvq__mono_us() + RACE_US;
    while (!race_over(r, end)) {
        size_t n = 0;
        int rc = r->e->type == KVQ_QUEUE_PRIORITY
                     ? kvq_queue_pop_prio(&outs[0], NULL, r->plain, KVQ_QUEUE_MIN)
                     : kvq_queue_pop_k(outs, &n, r->plain, 3);
        if (rc == 0 && r->e->type == KVQ_QUEUE_PRIORITY)
            n = 1;
        if (rc == KVQ_ENOTFOUND) {
            kvq__sleep_us(2000);
            continue;
        }
        if (rc != 0) {
            __atomic_store_n(&r->failed, rc, __ATOMIC_RELAXED);
            break;
        }
        for (size_t i = 0; i < n; i++)
            take(r, &outs[i]);
    }
    for (int i = 0; i < 3; i++)
        kvq_buf_dispose(&outs[i]);
    return NULL;
}

static void *receiver(void *arg)
{
    race *r = arg;
    kvq_buf b = KVQ_BUF_INIT;
    int64_t end = kvq__mono_us() + RACE_US;
    while (!race_over(r, end)) {
        kvq_workq_lease l;
        /* Every fifth delivery, while there are fewer than 20, is left to end (a short lease):
         * the item must come back, and be taken once in all. */
        int abandon = (kvq__mono_us() / 1000) % 5 == 0 &&
                      __atomic_add_fetch(&r->abandoned, 1, __ATOMIC_RELAXED) <= 20;
        int rc = kvq_workq_receive(&b, &l, r->rw, abandon ? 50 : 60000);
        if (rc == KVQ_ENOTFOUND) {
            kvq__sleep_us(2000);
            continue;
        }
        if (rc != 0) {
            __atomic_store_n(&r->failed, rc, __ATOMIC_RELAXED);
            break;
        }
        if (abandon)
            continue;
        rc = kvq_workq_ack(r->rw, &l);
        if (rc == 0)
            take(r, &b);
        else if (rc != KVQ_ELEASE_EXPIRED) { /* expired: it comes back */
            __atomic_store_n(&r->failed, rc, __ATOMIC_RELAXED);
            break;
        }
    }
    kvq_buf_dispose(&b);
    return NULL;
}

static void race_run(kvq_queue_type type)
{
    env e = env_open(type, NULL);
    race r;
    memset(&r, 0, sizeof(r));
    r.e = &e;
    r.plain = plain_handle(&e);
    r.rq = plain_handle(&e);
    assert_ok(kvq_workq_open(&r.rw, r.rq, NULL));
    /* Due from at once to 400 ms from now, in no particular order. */
    for (int i = 0; i < RACE_ITEMS; i++) {
        char s[16];
        snprintf(s, sizeof(s), "%d", i);
        (void)push_delayed(&e, s, (i * 37) % 401, i % 3);
    }
    pthread_t t[RACE_POPPERS + RACE_RECEIVERS];
    for (int i = 0; i < RACE_POPPERS + RACE_RECEIVERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, i < RACE_POPPERS ? popper : receiver, &r), 0);
    for (int i = 0; i < RACE_POPPERS + RACE_RECEIVERS; i++)
        pthread_join(t[i], NULL);
    if (r.failed)
        fail_msg("a consumer failed: %d (%s)", r.failed, kvq_errname(r.failed));
    if (r.done != RACE_ITEMS)
        fail_msg("%d of %d items taken within %lld s", r.done, RACE_ITEMS,
                 (long long)(RACE_US / 1000000));
    for (int i = 0; i < RACE_ITEMS; i++)
        if (r.seen[i] != 1)
            fail_msg("item %d taken %d times", i, r.seen[i]);
    assert_int_equal(r.done, RACE_ITEMS);
    uint64_t len = 9;
    assert_ok(kvq_queue_len(&len, e.q));
    assert_int_equal(len, 0);
    expect_metrics(e.w, type == KVQ_QUEUE_PRIORITY ? -1 : 0, 0, 0, 0);
    kvq_workq_close(r.rw);
    kvq_queue_close(r.rq);
    kvq_queue_close(r.plain);
    env_close(&e);
}

static void test_race_durable(void **state)
{
    (void)state;
    race_run(KVQ_QUEUE_DURABLE);
}

static void test_race_priority(void **state)
{
    (void)state;
    race_run(KVQ_QUEUE_PRIORITY);
}

int main(int argc, char **argv)
{
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scenario_durable), cmocka_unit_test(test_scenario_priority),
        cmocka_unit_test(test_long_prefix),      cmocka_unit_test(test_high_contention),
        cmocka_unit_test(test_expired_batch),
        cmocka_unit_test(test_due_durable),      cmocka_unit_test(test_due_priority),
        cmocka_unit_test(test_expired_durable),  cmocka_unit_test(test_expired_priority),
        cmocka_unit_test(test_reader_settings),  cmocka_unit_test(test_txn_form_retry),
        cmocka_unit_test(test_race_durable),     cmocka_unit_test(test_race_priority),
    };
    const struct CMUnitTest embedded_only[] = {
        cmocka_unit_test(test_read_only),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (!kt_db_url_given())
        failed += cmocka_run_group_tests(embedded_only, NULL, NULL);
    return failed;
}
