/* Receivers that spread (layers/workq/workq.c, "Receivers that spread"): concurrent receivers
 * of a work queue do not all take the head.
 *
 * - a lone receiver takes the head, in order, on a durable and a priority queue, also when its
 *   commits conflict for a reason other than another receiver (its own keys; a push landing
 *   while its reused transaction found the queue empty);
 * - two receive transactions at one read version: at the head they take the same item and the
 *   second conflicts (and its retry notes the lost race: the handle's pressure rises); under
 *   pressure they take different items and both commit; a conflict on anything else leaves the
 *   pressure as it is;
 * - under pressure a priority queue's receives keep to the head's priority, and the head is
 *   taken within a window's worth of receives (nothing starves);
 * - four threads in lock step (every thread reads, then every thread commits, round after
 *   round), each acking its last item in the transaction of its next receive as the consumer
 *   runtime does: every item is received and acked exactly once, and the conflicts per receive
 *   (the database's statistics) stay below 0.25, where receivers that all take the head have 3
 *   (one commit per round of four).
 *
 * No test depends on time: the schedule is set by barriers, leases last a minute. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>

#include "layers/workq/workq_internal.h"
#include "test_queue_common.h"

static const kvq_workq_options long_lease = { KVQ_WORKQ_OPTIONS_VERSION, 60000, 0, 300000 };

typedef struct env {
    kvq_db *db;
    kvq_subspace *sub;
    kvq_queue *q;
    kvq_workq *w;
} env;

static env env_open(kvq_queue_type type, const char *name)
{
    env e;
    tq_mkdir();
    e.db = tq_open_db(0, 0, 0);
    e.sub = tq_sub(name, strlen(name));
    assert_ok(kvq_queue_open(&e.q, e.db, type, e.sub, NULL));
    assert_ok(kvq_workq_open(&e.w, e.q, &long_lease));
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

static void push_n(env *e, int n, int64_t prio)
{
    kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
    po.priority = prio;
    for (int i = 0; i < n; i++) {
        char s[32];
        int len = snprintf(s, sizeof(s), "p%lld-%04d", (long long)prio, i);
        assert_ok(kvq_workq_push(NULL, e->w, (const uint8_t *)s, (size_t)len, &po));
    }
}

/* The item number of a value push_n wrote. */
static int item_no(const uint8_t *v, size_t len)
{
    const uint8_t *dash = memchr(v, '-', len);
    if (dash == NULL)
        return -1;
    int no = 0;
    for (const uint8_t *c = dash + 1; c < v + len && *c >= '0' && *c <= '9'; c++)
        no = no * 10 + (*c - '0');
    return no;
}

static int pressure(const kvq_workq *w)
{
    return __atomic_load_n(&w->recv_pressure, __ATOMIC_RELAXED);
}

/* ---- a lone receiver ------------------------------------------------------------------------ */

/* Writes a key that the receiver's transaction below reads: its commit then conflicts with
 * nothing of the queue. */
static int poke_body(kvq_txn *txn, void *arg)
{
    (void)arg;
    return kvq_txn_set(txn, (const uint8_t *)"poke", 4, (const uint8_t *)"x", 1);
}

static void lone_receiver(kvq_queue_type type)
{
    env e = env_open(type, type == KVQ_QUEUE_DURABLE ? "lone-d" : "lone-p");
    enum { N = 44 }; /* the last item is taken by a first attempt (44 - 1 is not a multiple of 3) */
    if (type == KVQ_QUEUE_PRIORITY) {
        push_n(&e, N / 2, 2);
        push_n(&e, N / 2, 1);
    } else {
        push_n(&e, N, 0);
    }
    kvq_txn *txn;
    assert_ok(kvq_txn_create(&txn, e.db));
    kvq_workq_lease prev;
    int have_prev = 0, conflicts = 0;
    for (int i = 0; i < N; i++) {
        int rc;
        kvq_bytes v;
        kvq_workq_lease l;
        for (;;) {
            /* Every third item: the transaction also reads a key another commit writes before
             * it commits, so that its first attempt fails with 1020 for a reason of its own. */
            int poke = i % 3 == 0 && kvq_txn_get_retries(txn) == 0;
            rc = have_prev ? kvq_workq_ack_txn(e.w, txn, &prev) : 0;
            if (rc == 0)
                rc = kvq_workq_receive_txn(&v, &l, e.w, txn, 0);
            if (rc == 0 && poke) {
                kvq_bytes pv;
                int present;
                rc = kvq_txn_get(&pv, &present, txn, (const uint8_t *)"poke", 4, 0);
                if (rc == 0)
                    assert_ok(kvq_db_transact(e.db, poke_body, NULL));
            }
            int want = type == KVQ_QUEUE_PRIORITY ? (i < N / 2 ? i : i - N / 2) : i;
            if (rc == 0) {
                /* The head, in order (priority 1 first, then 2). */
                assert_int_equal(item_no(v.data, v.len), want);
                assert_int_equal(l.priority, type == KVQ_QUEUE_PRIORITY ? (i < N / 2 ? 1 : 2) : 0);
                rc = kvq_txn_commit(txn);
            }
            if (rc == 0)
                break;
            assert_int_equal(rc, KVQ_ENOT_COMMITTED);
            conflicts++;
            assert_ok(kvq_txn_on_error(txn, rc));
        }
        kvq_txn_reset(txn);
        prev = l;
        have_prev = 1;
        /* No race was lost to another receiver: the handle never spreads. */
        assert_int_equal(pressure(e.w), 0);
    }
    assert_int_equal(conflicts, (N + 2) / 3);
    /* The queue is empty: the last ack rides in a transaction (the same one, reset) whose
     * receive finds nothing, and a push committing meanwhile makes it conflict. Its retry must
     * not be taken for the retry of the transaction that took the last item (whose item is
     * gone): the pressure stays 0. The retry receives the new item. */
    kvq_bytes v;
    kvq_workq_lease l;
    assert_ok(kvq_workq_ack_txn(e.w, txn, &prev));
    assert_int_equal(kvq_workq_receive_txn(&v, &l, e.w, txn, 0), KVQ_ENOTFOUND);
    push_n(&e, 1, type == KVQ_QUEUE_PRIORITY ? 1 : 0);
    assert_int_equal(kvq_txn_commit(txn), KVQ_ENOT_COMMITTED);
    assert_ok(kvq_txn_on_error(txn, KVQ_ENOT_COMMITTED));
    assert_ok(kvq_workq_ack_txn(e.w, txn, &prev));
    assert_ok(kvq_workq_receive_txn(&v, &l, e.w, txn, 0));
    assert_int_equal(item_no(v.data, v.len), 0);
    assert_ok(kvq_txn_commit(txn));
    assert_int_equal(pressure(e.w), 0);
    assert_ok(kvq_workq_ack(e.w, &l));
    kvq_workq_stats st;
    assert_ok(kvq_workq_get_stats(&st, e.w));
    assert_int_equal(st.ready, 0);
    assert_int_equal(st.inflight, 0);
    assert_int_equal(st.acked, N + 1);
    kvq_txn_destroy(txn);
    env_close(&e);
}

static void test_lone_receiver_durable(void **state)
{
    (void)state;
    lone_receiver(KVQ_QUEUE_DURABLE);
}

static void test_lone_receiver_priority(void **state)
{
    (void)state;
    lone_receiver(KVQ_QUEUE_PRIORITY);
}

/* ---- two receives at one read version ------------------------------------------------------ */

static void test_two_receives_one_version(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, "two");
    push_n(&e, 20, 0);
    kvq_txn *a, *b;
    assert_ok(kvq_txn_create(&a, e.db));
    assert_ok(kvq_txn_create(&b, e.db));
    kvq_bytes va, vb;
    kvq_workq_lease la, lb;
    int64_t rv;

    /* At the head (pressure 0): both take item 0, the second commit conflicts. */
    assert_int_equal(pressure(e.w), 0);
    assert_ok(kvq_workq_receive_txn(&va, &la, e.w, a, 0));
    assert_ok(kvq_txn_get_read_version(&rv, a));
    assert_ok(kvq_txn_set_read_version(b, rv));
    assert_ok(kvq_workq_receive_txn(&vb, &lb, e.w, b, 0));
    assert_int_equal(item_no(va.data, va.len), 0);
    assert_int_equal(item_no(vb.data, vb.len), 0);
    assert_ok(kvq_txn_commit(a));
    assert_int_equal(kvq_txn_commit(b), KVQ_ENOT_COMMITTED);
    /* b's retry finds that its item went to another receiver: the handle's pressure rises, and
     * the retry takes another item. */
    assert_ok(kvq_txn_on_error(b, KVQ_ENOT_COMMITTED));
    assert_ok(kvq_workq_receive_txn(&vb, &lb, e.w, b, 0));
    assert_int_equal(pressure(e.w), 24 - 1);
    assert_true(item_no(vb.data, vb.len) != 0);
    assert_ok(kvq_txn_commit(b));
    kvq_txn_reset(a);
    kvq_txn_reset(b);

    /* Under pressure: two receives at one version take different items and both commit, round
     * after round. */
    for (int round = 0; round < 6; round++) {
        __atomic_store_n(&e.w->recv_pressure, 48, __ATOMIC_RELAXED);
        assert_ok(kvq_workq_receive_txn(&va, &la, e.w, a, 0));
        assert_ok(kvq_txn_get_read_version(&rv, a));
        assert_ok(kvq_txn_set_read_version(b, rv));
        assert_ok(kvq_workq_receive_txn(&vb, &lb, e.w, b, 0));
        assert_true(item_no(va.data, va.len) != item_no(vb.data, vb.len));
        assert_ok(kvq_txn_commit(a));
        assert_ok(kvq_txn_commit(b));
        kvq_txn_reset(a);
        kvq_txn_reset(b);
    }

    /* A conflict on anything but its item does not raise the pressure: the retry finds its
     * item still there. */
    __atomic_store_n(&e.w->recv_pressure, 0, __ATOMIC_RELAXED);
    kvq_bytes pv;
    int present;
    assert_ok(kvq_workq_receive_txn(&va, &la, e.w, a, 0));
    assert_ok(kvq_txn_get(&pv, &present, a, (const uint8_t *)"poke", 4, 0));
    assert_ok(kvq_db_transact(e.db, poke_body, NULL));
    assert_int_equal(kvq_txn_commit(a), KVQ_ENOT_COMMITTED);
    assert_ok(kvq_txn_on_error(a, KVQ_ENOT_COMMITTED));
    kvq_bytes va2;
    assert_ok(kvq_workq_receive_txn(&va2, &la, e.w, a, 0));
    assert_int_equal(pressure(e.w), 0);
    assert_ok(kvq_txn_commit(a));

    kvq_workq_stats st;
    assert_ok(kvq_workq_get_stats(&st, e.w));
    assert_int_equal(st.received, 2 + 12 + 1);
    assert_int_equal(st.inflight, 2 + 12 + 1);
    assert_int_equal(st.ready, 20 - 15);
    kvq_txn_destroy(a);
    kvq_txn_destroy(b);
    env_close(&e);
}

/* ---- priorities and starvation under pressure ------------------------------------------------ */

static void test_spread_keeps_priorities(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_PRIORITY, "prio");
    push_n(&e, 6, 2);
    push_n(&e, 4, 1);
    push_n(&e, 6, 3);
    int64_t last = 0;
    for (int i = 0; i < 16; i++) {
        __atomic_store_n(&e.w->recv_pressure, 512, __ATOMIC_RELAXED);
        kvq_buf v = KVQ_BUF_INIT;
        kvq_workq_lease l;
        assert_ok(kvq_workq_receive(&v, &l, e.w, 0));
        /* Every item of priority 1 before any of 2, and of 2 before any of 3. */
        assert_true(l.priority >= last);
        assert_int_equal(l.priority, i < 4 ? 1 : i < 10 ? 2 : 3);
        last = l.priority;
        assert_ok(kvq_workq_ack(e.w, &l));
        kvq_buf_dispose(&v);
    }
    env_close(&e);
}

static void test_head_not_starved(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, "starve");
    enum { N = 600, WIDTH = 256 };
    push_n(&e, N, 0);
    int head_at = -1, spread = 0;
    for (int i = 0; i < WIDTH && head_at < 0; i++) {
        /* The widest window (pressure at its maximum, 512: 256 items). */
        __atomic_store_n(&e.w->recv_pressure, 512, __ATOMIC_RELAXED);
        kvq_buf v = KVQ_BUF_INIT;
        kvq_workq_lease l;
        assert_ok(kvq_workq_receive(&v, &l, e.w, 0));
        int no = item_no(v.data, v.len);
        if (no == 0)
            head_at = i;
        spread += no >= WIDTH + i; /* i items are gone: the window ends before WIDTH + i */
        assert_true(no < N);
        assert_ok(kvq_workq_ack(e.w, &l));
        kvq_buf_dispose(&v);
    }
    /* The first item pushed was taken within a window's worth of receives, and nothing beyond
     * the window was. */
    assert_true(head_at >= 0);
    assert_int_equal(spread, 0);
    env_close(&e);
}

/* ---- four threads in lock step ------------------------------------------------------------ */

enum { LS_THREADS = 4, LS_ITEMS = 200 };

typedef struct lockstep {
    env *e;
    pthread_barrier_t read_done, round_done;
    int received; /* atomic */
    int failed;   /* atomic: an unexpected error (the threads stop together) */
    unsigned char seen[LS_ITEMS];
    int dup; /* atomic: an item received twice */
} lockstep;

static void *lockstep_thread(void *arg)
{
    lockstep *s = arg;
    kvq_workq *w = s->e->w;
    kvq_txn *txn = NULL;
    if (kvq_txn_create(&txn, s->e->db) != 0)
        __atomic_store_n(&s->failed, 1, __ATOMIC_RELAXED);
    kvq_workq_lease prev, l;
    int have_prev = 0;
    for (;;) {
        /* Every thread sees the same counts here: they change only between the barriers. */
        if (__atomic_load_n(&s->failed, __ATOMIC_RELAXED) ||
            __atomic_load_n(&s->received, __ATOMIC_RELAXED) == LS_ITEMS)
            break;
        kvq_bytes v = { NULL, 0 };
        int rc = have_prev ? kvq_workq_ack_txn(w, txn, &prev) : 0;
        int got = 0, acking = have_prev && rc == 0;
        if (rc == 0) {
            rc = kvq_workq_receive_txn(&v, &l, w, txn, 0);
            got = rc == 0;
            if (rc == KVQ_ENOTFOUND)
                rc = 0;
        }
        int no = got ? item_no(v.data, v.len) : -1;
        pthread_barrier_wait(&s->read_done);
        if (rc == 0 && (got || acking))
            rc = kvq_txn_commit(txn);
        if (rc == 0) {
            if (got) {
                if (no < 0 || no >= LS_ITEMS || s->seen[no]++)
                    __atomic_store_n(&s->dup, 1, __ATOMIC_RELAXED);
                __atomic_add_fetch(&s->received, 1, __ATOMIC_RELAXED);
                prev = l;
            }
            have_prev = got;
            kvq_txn_reset(txn);
        } else if (kvq_txn_on_error(txn, rc) != 0) {
            printf("# lockstep error %d %s\n", rc, kvq_strerror(rc));
            __atomic_store_n(&s->failed, 1, __ATOMIC_RELAXED);
        }
        pthread_barrier_wait(&s->round_done);
    }
    if (have_prev && kvq_workq_ack(w, &prev) != 0) {
        printf("# lockstep: the last ack failed: %s\n", kvq_last_error());
        __atomic_store_n(&s->failed, 1, __ATOMIC_RELAXED);
    }
    kvq_txn_destroy(txn);
    return NULL;
}

static void test_lockstep_receivers(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, "lockstep");
    push_n(&e, LS_ITEMS, 0);
    lockstep s;
    memset(&s, 0, sizeof(s));
    s.e = &e;
    assert_int_equal(pthread_barrier_init(&s.read_done, NULL, LS_THREADS), 0);
    assert_int_equal(pthread_barrier_init(&s.round_done, NULL, LS_THREADS), 0);
    kvq_db_stats before, after;
    assert_ok(kvq_db_get_stats(&before, e.db));
    pthread_t th[LS_THREADS];
    for (int i = 0; i < LS_THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, lockstep_thread, &s), 0);
    for (int i = 0; i < LS_THREADS; i++)
        pthread_join(th[i], NULL);
    assert_ok(kvq_db_get_stats(&after, e.db));
    pthread_barrier_destroy(&s.read_done);
    pthread_barrier_destroy(&s.round_done);
    assert_int_equal(s.failed, 0);
    assert_int_equal(s.dup, 0);
    assert_int_equal(s.received, LS_ITEMS);
    for (int i = 0; i < LS_ITEMS; i++)
        assert_int_equal(s.seen[i], 1);
    kvq_workq_stats st;
    assert_ok(kvq_workq_get_stats(&st, e.w));
    assert_int_equal(st.ready, 0);
    assert_int_equal(st.inflight, 0);
    assert_int_equal(st.received, LS_ITEMS);
    assert_int_equal(st.acked, LS_ITEMS);
    double per_receive = (double)(after.conflicts - before.conflicts) / LS_ITEMS;
    printf("# lock step: %llu conflicts for %d receives (%.3f per receive)\n",
           (unsigned long long)(after.conflicts - before.conflicts), LS_ITEMS, per_receive);
    assert_true(per_receive < 0.25);
    env_close(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lone_receiver_durable),
        cmocka_unit_test(test_lone_receiver_priority),
        cmocka_unit_test(test_two_receives_one_version),
        cmocka_unit_test(test_spread_keeps_priorities),
        cmocka_unit_test(test_head_not_starved),
        cmocka_unit_test(test_lockstep_receivers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
