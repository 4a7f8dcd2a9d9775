/* kvq_queue_produce: many producer threads, every item pushed exactly once and in order per
 * thread, batches on durable queues, priorities, errors and bad input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "test_queue_common.h"

#define THREADS    4
#define PER_THREAD 300

typedef struct gen {
    uint64_t per_thread;
    uint64_t fail_at; /* thread 1 returns KVQ_EUSER at this seq (0: never) */
    int calls_after_stop;
} gen;

static int make_item(kvq_buf *value, int64_t *priority, int thread, uint64_t seq, void *payload)
{
    gen *g = payload;
    if (seq >= g->per_thread)
        return KVQ_ENOTFOUND;
    if (g->fail_at != 0 && thread == 1 && seq == g->fail_at)
        return KVQ_EUSER;
    uint8_t v[16];
    size_t n = tq_value(v, (uint32_t)thread, (uint32_t)seq);
    *priority = (int64_t)(seq % 3); /* used by priority queues only */
    return kvq_buf_append(value, v, n);
}

/* Pops everything and checks: each (thread, seq) exactly once; per thread increasing seq
 * (within a priority for priority queues, where items pop lowest priority first). */
static void drain_and_check(kvq_queue *q, uint64_t per_thread, int by_priority)
{
    unsigned char *seen = calloc(THREADS * per_thread, 1);
    assert_non_null(seen);
    int64_t last[THREADS][3];
    for (int t = 0; t < THREADS; t++)
        for (int p = 0; p < 3; p++)
            last[t][p] = -1;
    int64_t last_prio = INT64_MIN;
    kvq_buf v = KVQ_BUF_INIT;
    uint64_t n = 0;
    for (;;) {
        int64_t prio = 0;
        int rc =
            by_priority ? kvq_queue_pop_prio(&v, &prio, q, KVQ_QUEUE_MIN) : kvq_queue_pop(&v, q);
        if (rc == KVQ_ENOTFOUND)
            break;
        assert_ok(rc);
        uint32_t th = 0, seq = 0;
        assert_int_equal(tq_parse(v.data, v.len, &th, &seq), 0);
        assert_true(th < THREADS && seq < per_thread);
        seen[th * per_thread + seq]++;
        int p = by_priority ? (int)prio : 0;
        if (by_priority) {
            assert_int_equal(prio, (int64_t)(seq % 3));
            assert_true(prio >= last_prio);
            last_prio = prio;
        }
        if ((int64_t)seq <= last[th][p])
            fail_msg("thread %u: seq %u popped after %" PRId64, th, seq, last[th][p]);
        last[th][p] = seq;
        n++;
    }
    kvq_buf_dispose(&v);
    assert_int_equal(n, THREADS * per_thread);
    for (uint64_t i = 0; i < THREADS * per_thread; i++)
        if (seen[i] != 1)
            fail_msg("item %" PRIu64 " popped %d times", i, seen[i]);
    free(seen);
}

static void produce_into(kvq_queue_type type, int batch, int by_priority)
{
    kvq_db *db = tq_open_db(0, 0, 0);
    kvq_queue *q;
    assert_ok(kvq_queue_open(&q, db, type, NULL, NULL));
    gen g = { PER_THREAD, 0, 0 };
    kvq_producer_options o = KVQ_PRODUCER_OPTIONS_INIT;
    o.threads = THREADS;
    o.batch = batch;
    kvq_producer_stats st;
    assert_ok(kvq_queue_produce(&st, q, make_item, &g, &o));
    assert_int_equal(st.items, THREADS * PER_THREAD);
    if (type != KVQ_QUEUE_PRIORITY)
        /* Each thread commits ceil(PER_THREAD / batch) batches. */
        assert_int_equal(st.transactions, THREADS * ((PER_THREAD + batch - 1) / batch));
    else
        assert_int_equal(st.transactions, THREADS * PER_THREAD);
    uint64_t len = 0;
    assert_ok(kvq_queue_len(&len, q));
    assert_int_equal(len, THREADS * PER_THREAD);
    drain_and_check(q, PER_THREAD, by_priority);
    kvq_queue_close(q);
    kvq_db_close(db);
}

static void test_durable_batches(void **state)
{
    (void)state;
    produce_into(KVQ_QUEUE_DURABLE, 7, 0);
}

static void test_durable_one_per_txn(void **state)
{
    (void)state;
    produce_into(KVQ_QUEUE_DURABLE, 1, 0);
}

static void test_fifo(void **state)
{
    (void)state;
    produce_into(KVQ_QUEUE_FIFO, 50, 0);
}

static void test_priority(void **state)
{
    (void)state;
    produce_into(KVQ_QUEUE_PRIORITY, 1, 1);
}

/* A callback error stops every thread and comes back with its detail; what was pushed before
 * is counted and really is in the queue. */
static void test_callback_error_stops(void **state)
{
    (void)state;
    kvq_db *db = tq_open_db(0, 0, 0);
    kvq_queue *q;
    assert_ok(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL));
    gen g = { 1000000, 50, 0 };
    kvq_producer_options o = KVQ_PRODUCER_OPTIONS_INIT;
    o.threads = THREADS;
    o.batch = 10;
    kvq_producer_stats st;
    assert_int_equal(kvq_queue_produce(&st, q, make_item, &g, &o), KVQ_EUSER);
    assert_true(st.items < (uint64_t)THREADS * 1000000);
    uint64_t len = 0;
    assert_ok(kvq_queue_len(&len, q));
    assert_int_equal(len, st.items);
    kvq_queue_close(q);
    kvq_db_close(db);
}

/* Pushes under injected 1020 and 1021 faults: still exactly once (the convenience pushes are
 * idempotent). */
static void test_exactly_once_under_faults(void **state)
{
    (void)state;
    kvq_db *db = tq_open_db(0.2, KVQ_FAULT_NOT_COMMITTED | KVQ_FAULT_UNKNOWN_COMMITTED |
                                     KVQ_FAULT_UNKNOWN_NOT_COMMITTED,
                            kt_seed());
    kvq_queue *q;
    assert_ok(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL));
    gen g = { 200, 0, 0 };
    kvq_producer_options o = KVQ_PRODUCER_OPTIONS_INIT;
    o.threads = THREADS;
    o.batch = 3;
    kvq_producer_stats st;
    assert_ok(kvq_queue_produce(&st, q, make_item, &g, &o));
    assert_int_equal(st.items, THREADS * 200);
    kvq_queue_close(q);
    kvq_db_close(db);
    db = tq_open_db(0, 0, 0);
    assert_ok(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL));
    drain_and_check(q, 200, 0);
    kvq_queue_close(q);
    kvq_db_close(db);
}

static void test_bad_input(void **state)
{
    (void)state;
    kvq_db *db = tq_open_db(0, 0, 0);
    kvq_queue *q;
    assert_ok(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL));
    gen g = { 1, 0, 0 };
    kvq_producer_options o = KVQ_PRODUCER_OPTIONS_INIT;
    kvq_producer_stats st = { 5, 5 };
    assert_int_equal(kvq_queue_produce(&st, NULL, make_item, &g, &o), KVQ_EINVAL);
    assert_int_equal(st.items, 0);
    assert_int_equal(kvq_queue_produce(NULL, q, NULL, &g, &o), KVQ_EINVAL);
    o.threads = 0;
    assert_int_equal(kvq_queue_produce(NULL, q, make_item, &g, &o), KVQ_EINVAL);
    assert_non_null(strstr(kvq_last_error(), "threads"));
    o.threads = 1;
    o.batch = 10001;
    assert_int_equal(kvq_queue_produce(NULL, q, make_item, &g, &o), KVQ_EINVAL);
    assert_non_null(strstr(kvq_last_error(), "batch"));
    o.batch = 1;
    o.version = 99;
    assert_int_equal(kvq_queue_produce(NULL, q, make_item, &g, &o), KVQ_EINVAL);
    uint64_t len = 1;
    assert_ok(kvq_queue_len(&len, q));
    assert_int_equal(len, 0);
    /* NULL options: the defaults (4 threads, one item per transaction). */
    assert_ok(kvq_queue_produce(&st, q, make_item, &g, NULL));
    assert_int_equal(st.items, 4);
    kvq_queue_close(q);
    kvq_db_close(db);
}

int main(int argc, char **argv)
{
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_durable_batches, tq_dir_setup, tq_dir_teardown),
        cmocka_unit_test_setup_teardown(test_durable_one_per_txn, tq_dir_setup, tq_dir_teardown),
        cmocka_unit_test_setup_teardown(test_fifo, tq_dir_setup, tq_dir_teardown),
        cmocka_unit_test_setup_teardown(test_priority, tq_dir_setup, tq_dir_teardown),
        cmocka_unit_test_setup_teardown(test_callback_error_stops, tq_dir_setup, tq_dir_teardown),
        cmocka_unit_test_setup_teardown(test_exactly_once_under_faults, tq_dir_setup,
                                        tq_dir_teardown),
        cmocka_unit_test_setup_teardown(test_bad_input, tq_dir_setup, tq_dir_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
