/* 8 producer threads and 8 consumer threads on each layer: every item popped exactly once,
 * per-producer order kept (FIFO, durable), priority order kept, and pushes never conflict.
 * Counts are multiplied by $KVQ_TEST_SCALE (default 1). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_queue_conc.h"
#include "test_scale.h"

typedef struct targ {
    const conc_cfg *c;
    kvq_db *db;
    int id;
    size_t *consumed;
    conc_log log;
    char err[200];
    int rc;
} targ;

static void *producer(void *a)
{
    targ *t = a;
    t->rc = conc_produce(t->c, t->db, (uint32_t)t->id, t->err, sizeof(t->err));
    return NULL;
}

static void *consumer(void *a)
{
    targ *t = a;
    conc_consume(t->c, t->db, t->id, t->consumed, &t->log);
    return NULL;
}

static double scale(void)
{
    return kvq_test_scale();
}

static void run(conc_cfg c)
{
    c.items = (size_t)((double)c.items * scale());
    c.items -= c.items % (size_t)c.producers;
    tq_mkdir();
    kvq_db *pdb = tq_open_db(0, 0, 0);
    kvq_db *cdb = tq_open_db(0, 0, 0);
    targ *p = calloc((size_t)c.producers, sizeof(*p));
    targ *k = calloc((size_t)c.consumers, sizeof(*k));
    pthread_t *pt = calloc((size_t)c.producers, sizeof(*pt));
    pthread_t *kt = calloc((size_t)c.consumers, sizeof(*kt));
    size_t consumed = 0;
    int64_t t0 = kvq__mono_us();
    for (int i = 0; i < c.consumers; i++) {
        k[i] = (targ){ .c = &c, .db = cdb, .id = i, .consumed = &consumed };
        assert_int_equal(pthread_create(&kt[i], NULL, consumer, &k[i]), 0);
    }
    for (int i = 0; i < c.producers; i++) {
        p[i] = (targ){ .c = &c, .db = pdb, .id = i };
        assert_int_equal(pthread_create(&pt[i], NULL, producer, &p[i]), 0);
    }
    int failed = 0;
    for (int i = 0; i < c.producers; i++) {
        pthread_join(pt[i], NULL);
        if (p[i].rc != 0) {
            fprintf(stderr, "%s: %s\n", c.name, p[i].err);
            failed = 1;
        }
    }
    if (failed)
        __atomic_store_n(&consumed, c.items, __ATOMIC_RELAXED); /* stop the consumers */
    for (int i = 0; i < c.consumers; i++)
        pthread_join(kt[i], NULL);
    double secs = (double)(kvq__mono_us() - t0) / 1e6;
    conc_log *logs = calloc((size_t)c.consumers, sizeof(*logs));
    for (int i = 0; i < c.consumers; i++)
        logs[i] = k[i].log;
    int bad = conc_check(&c, logs, c.consumers);
    kvq_db_stats ps, cs;
    assert_ok(kvq_db_get_stats(&ps, pdb));
    assert_ok(kvq_db_get_stats(&cs, cdb));
    printf("# %s: %zu items, %d+%d threads, %.1f s (%.0f items/s); pushes: %llu commits, "
           "%llu conflicts; pops: %llu commits, %llu conflicts, %llu retries\n",
           c.name, c.items, c.producers, c.consumers, secs, (double)c.items / secs,
           (unsigned long long)ps.commits, (unsigned long long)ps.conflicts,
           (unsigned long long)cs.commits, (unsigned long long)cs.conflicts,
           (unsigned long long)cs.retries);
    fflush(stdout);
    for (int i = 0; i < c.consumers; i++)
        conc_log_free(&logs[i]);
    free(logs);
    free(p);
    free(k);
    free(pt);
    free(kt);
    kvq_db_close(pdb);
    kvq_db_close(cdb);
    tq_rmdir();
    assert_false(failed);
    assert_int_equal(bad, 0);
    assert_int_equal(ps.conflicts, 0);
}

static void test_durable(void **state)
{
    (void)state;
    run((conc_cfg){ "durable", KVQ_QUEUE_DURABLE, 0, 100000, 8, 8, 10, 10, 0 });
}

static void test_fifo(void **state)
{
    (void)state;
    run((conc_cfg){ "fifo", KVQ_QUEUE_FIFO, 0, 100000, 8, 8, 10, 10, 0 });
}

static void test_priority(void **state)
{
    (void)state;
    run((conc_cfg){ "priority", KVQ_QUEUE_PRIORITY, 0, 20000, 8, 8, 1, 10, 0 });
}

static void test_fifo_hc(void **state)
{
    (void)state;
    run((conc_cfg){ "fifo-hc", KVQ_QUEUE_FIFO, KVQ_QUEUE_HIGH_CONTENTION, 12000, 8, 8, 10, 1, 0 });
}

static void test_priority_hc(void **state)
{
    (void)state;
    run((conc_cfg){ "priority-hc", KVQ_QUEUE_PRIORITY, KVQ_QUEUE_HIGH_CONTENTION, 5000, 8, 8, 1, 1,
                    0 });
}

/* After all pushes, pop_min yields non-decreasing priorities and pop_max non-increasing. */
static void test_priority_order(void **state)
{
    (void)state;
    tq_mkdir();
    kvq_db *db = tq_open_db(0, 0, 0);
    kvq_queue *q;
    assert_ok(kvq_queue_open(&q, db, KVQ_QUEUE_PRIORITY, NULL, NULL));
    kvq__rng r = { kt_seed() };
    kvq_txn *txn;
    assert_ok(kvq_txn_create(&txn, db));
    for (int b = 0; b < 20; b++) {
        for (int i = 0; i < 100; i++) {
            int64_t pr = (int64_t)(kvq__rng_next(&r) % 1000) - 500;
            if (i % 10 == 0)
                pr = (int64_t)(kvq__rng_next(&r) % 2 ? INT64_MAX : INT64_MIN);
            assert_ok(kvq_queue_push_prio_txn(q, txn, (const uint8_t *)&pr, sizeof(pr), pr));
        }
        assert_ok(kvq_txn_commit(txn));
        kvq_txn_reset(txn);
    }
    kvq_txn_destroy(txn);
    kvq_buf b = KVQ_BUF_INIT;
    int64_t lo = INT64_MIN, hi = INT64_MAX, p;
    for (int i = 0; i < 1000; i++) {
        assert_ok(kvq_queue_pop_prio(&b, &p, q, KVQ_QUEUE_MIN));
        assert_true(p >= lo);
        int64_t v;
        memcpy(&v, b.data, sizeof(v));
        assert_true(v == p);
        lo = p;
        assert_ok(kvq_queue_pop_prio(&b, &p, q, KVQ_QUEUE_MAX));
        assert_true(p <= hi);
        hi = p;
    }
    assert_true(lo <= hi);
    assert_int_equal(kvq_queue_pop_prio(&b, &p, q, KVQ_QUEUE_MIN), KVQ_ENOTFOUND);
    kvq_buf_dispose(&b);
    kvq_queue_close(q);
    kvq_db_close(db);
    tq_rmdir();
}

int main(int argc, char **argv)
{
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durable),     cmocka_unit_test(test_fifo),
        cmocka_unit_test(test_priority),    cmocka_unit_test(test_fifo_hc),
        cmocka_unit_test(test_priority_hc), cmocka_unit_test(test_priority_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
