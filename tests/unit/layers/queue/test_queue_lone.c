/* A lone consumer of a durable queue beside one pusher (docs/queues.md, "Consumers of a durable
 * queue that do not collide"): one handle, one thread calling kvq_queue_consume_k with k = 1 and
 * sleeping on its watch when the queue is empty, while a pusher with a database handle of its
 * own (a thread, or another process) pushes one item per commit. A consumer alone never loses a
 * race, so it must pop the head every time: every item in push order, exactly once, and its
 * handle counts no conflict at all (a single conflict would raise the pop pressure and make the
 * next pops spread, out of order). The pusher waits for the consumer before each of its first
 * pushes so that the consumer's first pops find the queue empty and race with a push, which is
 * where the bug lay; later pushes run freely. ctest runs it again on the log store
 * (logstore.test_queue_lone). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <sys/wait.h>

#include "test_queue_common.h"
#include "test_scale.h"

/* Items per run; each of the first LOCKSTEP pushes waits until the consumer has taken every
 * earlier item and is about to ask for this one (it reads an empty queue then, or is about to). */
#define ITEMS    2000
#define LOCKSTEP 40

typedef struct pusher {
    size_t items;
    int ready; /* read end: a byte from the consumer allows one of the first LOCKSTEP pushes */
    char err[200];
    int rc;
} pusher;

static int push_all(pusher *p)
{
    kvq_db_options o = tq_options();
    kvq_db *db = NULL;
    kvq_queue *q = NULL;
    int rc = kvq_db_open(&db, tq_dir, &o);
    if (rc == 0)
        rc = kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL);
    for (size_t s = 0; rc == 0 && s < p->items; s++) {
        char c;
        if (s < LOCKSTEP && read(p->ready, &c, 1) != 1) {
            rc = KVQ_EIO;
            break;
        }
        uint8_t v[16];
        tq_value(v, 0, (uint32_t)s);
        rc = kvq_queue_push(q, v, sizeof(v));
    }
    if (rc != 0)
        snprintf(p->err, sizeof(p->err), "pusher: %s (%s)", kvq_errname(rc), kvq_last_error());
    kvq_queue_close(q);
    kvq_db_close(db);
    return rc;
}

static void *push_thread(void *arg)
{
    pusher *p = arg;
    p->rc = push_all(p);
    return NULL;
}

static void lone_consumer(int as_process, size_t k)
{
    size_t items = (size_t)kvq_test_scaled(ITEMS);
    tq_mkdir();
    kvq_db_options o = tq_options();
    kvq_db *db = NULL;
    assert_ok(kvq_db_open(&db, tq_dir, &o)); /* the database exists before the pusher opens it */
    if (as_process) {
        /* Fork with no thread of the database running (the log store's applier and syncer):
         * a child forked beside threads may not start its own under ThreadSanitizer. The
         * parent opens the database again after the fork. */
        kvq_db_close(db);
        db = NULL;
    }
    kvq_queue *q = NULL;

    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pusher p = { items, ready[0], "", -1 };
    pthread_t th;
    pid_t pid = -1;
    if (as_process) {
        fflush(stdout);
        fflush(stderr);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(ready[1]);
            int rc = push_all(&p);
            if (rc != 0)
                fprintf(stderr, "%s\n", p.err);
            _exit(rc == 0 ? 0 : 1);
        }
        close(ready[0]);
        assert_ok(kvq_db_open(&db, tq_dir, &o));
    } else {
        assert_int_equal(pthread_create(&th, NULL, push_thread, &p), 0);
    }

    assert_ok(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL));

    size_t next = 0, waits = 0, said = 0;
    kvq_buf b[4] = { KVQ_BUF_INIT, KVQ_BUF_INIT, KVQ_BUF_INIT, KVQ_BUF_INIT };
    while (next < items) {
        /* Item `next` may be pushed now (and no later one, in the first LOCKSTEP). */
        for (; said <= next && said < LOCKSTEP; said++)
            assert_int_equal(write(ready[1], "x", 1), 1);
        size_t n = 0;
        kvq_watch *w = NULL;
        assert_ok(kvq_queue_consume_k(b, &n, &w, q, k));
        if (n == 0) {
            /* Empty: sleep until the next push (the limit only ends a hang). */
            assert_non_null(w);
            int rc = kvq_watch_wait(w, 120000);
            kvq_watch_destroy(w);
            assert_ok(rc);
            waits++;
            continue;
        }
        if (n < k)
            kvq_watch_destroy(w); /* fewer than k: a watch, which this loop does not need */
        else
            assert_null(w);
        for (size_t i = 0; i < n; i++) {
            uint32_t prod = 0, seq = 0;
            assert_int_equal(tq_parse(b[i].data, b[i].len, &prod, &seq), 0);
            if (seq != next)
                fail_msg("item %u popped where item %zu was due (the lone consumer spread)", seq,
                         next);
            next++;
        }
    }
    for (size_t i = 0; i < 4; i++)
        kvq_buf_dispose(&b[i]);
    close(ready[1]);
    if (as_process) {
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    } else {
        assert_int_equal(pthread_join(th, NULL), 0);
        close(ready[0]);
        if (p.rc != 0)
            fail_msg("%s", p.err);
    }

    /* Nothing left, nothing popped twice: the queue is empty and its counters agree. */
    uint64_t len = 99;
    assert_ok(kvq_queue_len(&len, q));
    assert_int_equal(len, 0);
    kvq_db_stats st;
    assert_ok(kvq_db_get_stats(&st, db));
    printf("# %s pusher, k = %zu: %zu items in push order, %zu waits on the watch, %" PRIu64
           " conflicts\n",
           as_process ? "process" : "thread", k, items, waits, st.conflicts);
    assert_int_equal(st.conflicts, 0);
    kvq_queue_close(q);
    kvq_db_close(db);
    tq_rmdir();
}

static void test_lone_consumer_pusher_thread(void **state)
{
    (void)state;
    lone_consumer(0, 1);
}

static void test_lone_consumer_pusher_process(void **state)
{
    (void)state;
    lone_consumer(1, 1);
}

/* Batches of 4 from a queue that mostly holds fewer: the pop's read stops at the tail, where
 * every push lands, and must not conflict with them. */
static void test_lone_consumer_batches(void **state)
{
    (void)state;
    lone_consumer(0, 4);
}

/* A consumer alone whose commits fail with 1020 for reasons of their own (faults injected at a
 * rate of 0.3, the kind a conflict with a pusher or with the pruning of markers would be):
 * it lost no race to another consumer, so it keeps popping the head, in order. */
static void test_lone_consumer_conflicts_not_races(void **state)
{
    (void)state;
    size_t items = (size_t)kvq_test_scaled(300);
    tq_mkdir();
    kvq_db *pdb = tq_open_db(0, 0, 0);
    kvq_queue *pq = NULL;
    assert_ok(kvq_queue_open(&pq, pdb, KVQ_QUEUE_DURABLE, NULL, NULL));
    uint8_t vb[50][16];
    kvq_bytes vals[50];
    for (size_t s = 0; s < items; s += 50) {
        for (size_t j = 0; j < 50; j++) {
            tq_value(vb[j], 0, (uint32_t)(s + j));
            vals[j] = (kvq_bytes){ vb[j], 16 };
        }
        assert_ok(kvq_queue_push_many(pq, vals, items - s < 50 ? items - s : 50));
    }
    kvq_queue_close(pq);
    kvq_db_close(pdb);

    uint64_t seed = kt_seed_print("test_lone_consumer_conflicts_not_races");
    kvq_db *db = tq_open_db(0.3, KVQ_FAULT_NOT_COMMITTED, seed);
    kvq_queue *q = NULL;
    assert_ok(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL));
    kvq_buf b = KVQ_BUF_INIT;
    for (size_t next = 0; next < items; next++) {
        size_t n = 0;
        kvq_watch *w = NULL;
        assert_ok(kvq_queue_consume_k(&b, &n, &w, q, 1));
        assert_int_equal(n, 1);
        uint32_t prod = 0, seq = 0;
        assert_int_equal(tq_parse(b.data, b.len, &prod, &seq), 0);
        if (seq != next)
            fail_msg("item %u popped where item %zu was due (the consumer spread after a "
                     "conflict that was no race)",
                     seq, next);
    }
    kvq_buf_dispose(&b);
    kvq_db_stats st;
    assert_ok(kvq_db_get_stats(&st, db));
    printf("# %zu items in order through %" PRIu64 " injected 1020s\n", items, st.injected_faults);
    assert_true(st.injected_faults > 0);
    assert_int_equal(__atomic_load_n(&q->pop_pressure, __ATOMIC_RELAXED), 0);
    kvq_queue_close(q);
    kvq_db_close(db);
    tq_rmdir();
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lone_consumer_pusher_thread),
        cmocka_unit_test(test_lone_consumer_pusher_process),
        cmocka_unit_test(test_lone_consumer_batches),
        cmocka_unit_test(test_lone_consumer_conflicts_not_races),
    };
    kt_seed_setup(argc, argv);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
