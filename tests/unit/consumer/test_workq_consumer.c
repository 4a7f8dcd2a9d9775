/* The at-least-once consumer runtime (kvq_workq_consumer_*) and the long poll
 * (kvq_workq_receive_wait): every item acked once, failed items given back and delivered again,
 * a long handler kept alive by the heartbeat, KVQ_WORKQ_RELEASE giving the item back and
 * stopping, wake-up by a push, and bad input. */
#include "kvq_test.h"
#include "test_scale.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq/kvq.h"
#include "kvq/workq.h"
#include "util/util.h"

#define N 200

static kvq_db *db;
static int qno;

typedef struct env {
    kvq_queue *q;
    kvq_workq *w;
} env;

/* A fresh durable (or priority) queue in its own subspace, with lease_ms and max deliveries. */
static env env_open(kvq_queue_type type, int64_t lease_ms, uint32_t max_deliveries)
{
    env e = { NULL, NULL };
    char name[32];
    snprintf(name, sizeof(name), "wc%d", qno++);
    kvq_tuple_elem el = kvq_tuple_str(name);
    kvq_subspace *sub;
    assert_int_equal(kvq_subspace_new(&sub, NULL, 0, &el, 1), 0);
    assert_int_equal(kvq_queue_open(&e.q, db, type, sub, NULL), 0);
    kvq_subspace_destroy(sub);
    kvq_workq_options o = KVQ_WORKQ_OPTIONS_INIT;
    o.lease_ms = lease_ms;
    o.max_deliveries = max_deliveries;
    assert_int_equal(kvq_workq_open(&e.w, e.q, &o), 0);
    return e;
}

static void env_close(env *e)
{
    kvq_workq_close(e->w);
    kvq_queue_close(e->q);
}

static void push_items(env *e, int n)
{
    for (int i = 0; i < n; i++) {
        char v[16];
        int len = snprintf(v, sizeof(v), "%d", i);
        assert_int_equal(kvq_workq_push(NULL, e->w, (const uint8_t *)v, (size_t)len, NULL), 0);
    }
}

static int item_of(kvq_bytes v)
{
    char s[16];
    if (v.len == 0 || v.len >= sizeof(s))
        return -1;
    memcpy(s, v.data, v.len);
    s[v.len] = '\0';
    int k = atoi(s);
    return k >= 0 && k < N ? k : -1;
}

typedef struct seen {
    int acks[N];     /* handler calls that answered ACK */
    int calls[N];    /* handler calls */
    int nack_first;  /* answer NACK to each item's first delivery */
    int bad;
    int64_t sleep_us;       /* the handler of item 0 sleeps this long */
    uint32_t max_deliveries_seen;
} seen;

static int handler(kvq_bytes v, const kvq_workq_lease *lease, int worker, void *payload)
{
    (void)worker;
    seen *s = payload;
    int k = item_of(v);
    if (k < 0) {
        __atomic_add_fetch(&s->bad, 1, __ATOMIC_RELAXED);
        return KVQ_WORKQ_ACK;
    }
    __atomic_add_fetch(&s->calls[k], 1, __ATOMIC_RELAXED);
    uint32_t d = lease->deliveries, m = __atomic_load_n(&s->max_deliveries_seen, __ATOMIC_RELAXED);
    while (d > m &&
           !__atomic_compare_exchange_n(&s->max_deliveries_seen, &m, d, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
    }
    if (k == 0 && s->sleep_us > 0)
        kvq__sleep_us(s->sleep_us);
    if (s->nack_first && lease->deliveries == 1)
        return KVQ_WORKQ_NACK;
    __atomic_add_fetch(&s->acks[k], 1, __ATOMIC_RELAXED);
    return KVQ_WORKQ_ACK;
}

static void run_drain(env *e, seen *s, int workers, int64_t nack_delay_ms,
                      kvq_workq_consumer_stats *st)
{
    kvq_workq_consumer_options o = KVQ_WORKQ_CONSUMER_OPTIONS_INIT;
    o.workers = workers;
    o.drain = 1;
    o.nack_delay_ms = nack_delay_ms;
    kvq_workq_consumer *c;
    assert_int_equal(kvq_workq_consumer_start(&c, e->w, handler, s, &o), 0);
    assert_int_equal(kvq_workq_consumer_join(c), 0);
    assert_true(kvq_workq_consumer_finished(c));
    assert_int_equal(kvq_workq_consumer_get_stats(st, c), 0);
    kvq_workq_consumer_destroy(c);
}

static void expect_all_acked_once(env *e, const seen *s)
{
    for (int i = 0; i < N; i++)
        if (s->acks[i] != 1)
            fail_msg("item %d acked %d times", i, s->acks[i]);
    assert_int_equal(s->bad, 0);
    kvq_workq_stats m;
    assert_int_equal(kvq_workq_get_stats(&m, e->w), 0);
    assert_int_equal(m.ready, 0);
    assert_int_equal(m.inflight, 0);
    assert_int_equal(m.acked, N);
}

static void ack_case(kvq_queue_type type)
{
    env e = env_open(type, 30000, 0);
    push_items(&e, N);
    static seen s;
    memset(&s, 0, sizeof(s));
    kvq_workq_consumer_stats st;
    run_drain(&e, &s, 4, 1000, &st);
    expect_all_acked_once(&e, &s);
    assert_int_equal(st.received, N);
    assert_int_equal(st.acked, N);
    assert_int_equal(st.nacked, 0);
    assert_int_equal(st.lost_leases, 0);
    env_close(&e);
}

static void test_every_item_acked_once_durable(void **state)
{
    (void)state;
    ack_case(KVQ_QUEUE_DURABLE);
}

static void test_every_item_acked_once_priority(void **state)
{
    (void)state;
    ack_case(KVQ_QUEUE_PRIORITY);
}

/* One commit per item: a single worker acks each item in the transaction of its next receive,
 * and the last item's ack commits with the receive that finds the queue empty. Counted with the
 * handle's commit counter (kvq_db_get_stats), not with time. */
static void commits_case(kvq_queue_type type)
{
    env e = env_open(type, 30000, 0);
    push_items(&e, N);
    static seen s;
    memset(&s, 0, sizeof(s));
    kvq_db_stats a, b;
    assert_int_equal(kvq_db_get_stats(&a, db), 0);
    kvq_workq_consumer_stats st;
    run_drain(&e, &s, 1, 1000, &st);
    assert_int_equal(kvq_db_get_stats(&b, db), 0);
    expect_all_acked_once(&e, &s);
    assert_int_equal(st.acked, N);
    assert_int_equal(st.lost_leases, 0);
    uint64_t commits = b.commits - a.commits;
    printf("# %s: %llu commits for %d items received and acked one at a time\n",
           type == KVQ_QUEUE_DURABLE ? "durable" : "priority", (unsigned long long)commits, N);
    /* N receives, each but the first carrying the previous ack, and one ack alone. */
    assert_int_equal(commits, N + 1);
    env_close(&e);
}

static void test_one_commit_per_item_durable(void **state)
{
    (void)state;
    commits_case(KVQ_QUEUE_DURABLE);
}

static void test_one_commit_per_item_priority(void **state)
{
    (void)state;
    commits_case(KVQ_QUEUE_PRIORITY);
}

/* A finished item does not wait for the next one: with nothing more to receive, a waiting
 * worker's item is acked at once (the long poll's first look commits the ack alone). */
static void test_last_ack_not_held(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 30000, 0);
    push_items(&e, 1);
    static seen s;
    memset(&s, 0, sizeof(s));
    kvq_workq_consumer_options o = KVQ_WORKQ_CONSUMER_OPTIONS_INIT;
    kvq_workq_consumer *c;
    assert_int_equal(kvq_workq_consumer_start(&c, e.w, handler, &s, &o), 0);
    kvq_workq_stats m;
    /* The worker keeps waiting for more items; the ack must land meanwhile. */
    for (int i = 0; i < 60000; i++) {
        assert_int_equal(kvq_workq_get_stats(&m, e.w), 0);
        if (m.acked == 1)
            break;
        kvq__sleep_us(1000);
    }
    assert_int_equal(m.acked, 1);
    assert_int_equal(m.inflight, 0);
    assert_false(kvq_workq_consumer_finished(c));
    kvq_workq_consumer_stop(c);
    assert_int_equal(kvq_workq_consumer_join(c), 0);
    kvq_workq_consumer_destroy(c);
    env_close(&e);
}

/* A failed item is given back and delivered again: each item is handled twice, acked once. */
static void test_failed_items_come_back(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 30000, 0);
    push_items(&e, N);
    static seen s;
    memset(&s, 0, sizeof(s));
    s.nack_first = 1;
    kvq_workq_consumer_stats st;
    run_drain(&e, &s, 3, 0, &st);
    expect_all_acked_once(&e, &s);
    for (int i = 0; i < N; i++)
        assert_int_equal(s.calls[i], 2);
    assert_int_equal(st.nacked, N);
    assert_int_equal(st.acked, N);
    assert_int_equal(s.max_deliveries_seen, 2);
    kvq_workq_stats m;
    assert_int_equal(kvq_workq_get_stats(&m, e.w), 0);
    assert_int_equal(m.requeued, N);
    env_close(&e);
}

/* With max deliveries 1, a failed item goes to the dead letters, not back. */
static void test_failed_items_dead_letter(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 30000, 1);
    push_items(&e, 20);
    static seen s;
    memset(&s, 0, sizeof(s));
    s.nack_first = 1;
    kvq_workq_consumer_stats st;
    run_drain(&e, &s, 2, 0, &st);
    assert_int_equal(st.nacked, 20);
    assert_int_equal(st.acked, 0);
    kvq_workq_stats m;
    assert_int_equal(kvq_workq_get_stats(&m, e.w), 0);
    assert_int_equal(m.dead, 20);
    assert_int_equal(m.ready, 0);
    env_close(&e);
}

/* A handler that runs for several leases: the heartbeat keeps the lease, so the item is not
 * delivered to the other worker, and the ack succeeds. */
static void test_heartbeat_keeps_a_long_lease(void **state)
{
    (void)state;
    /* The heartbeat extends a lease every third of it: the test fails only if the heartbeat
     * thread is held off the CPU for two thirds of a lease, so the lease is wider in the slow
     * builds (a sanitizer build beside other work once held it 200 ms). */
    const int64_t lease_ms = 400 * kvq_test_time_factor();
    env e = env_open(KVQ_QUEUE_DURABLE, lease_ms, 0);
    push_items(&e, 1);
    static seen s;
    memset(&s, 0, sizeof(s));
    s.sleep_us = 4 * lease_ms * 1000; /* four leases */
    kvq_workq_consumer_options o = KVQ_WORKQ_CONSUMER_OPTIONS_INIT;
    o.workers = 2;
    kvq_workq_consumer *c;
    assert_int_equal(kvq_workq_consumer_start(&c, e.w, handler, &s, &o), 0);
    int64_t end = kvq__mono_us() + 20 * lease_ms * 1000;
    while (__atomic_load_n(&s.acks[0], __ATOMIC_RELAXED) == 0 && kvq__mono_us() < end)
        kvq__sleep_us(20000);
    kvq__sleep_us((lease_ms * 3 / 2) * 1000); /* past a lease: an early redelivery would show */
    kvq_workq_consumer_stop(c);
    assert_int_equal(kvq_workq_consumer_join(c), 0);
    kvq_workq_consumer_stats st;
    assert_int_equal(kvq_workq_consumer_get_stats(&st, c), 0);
    kvq_workq_consumer_destroy(c);
    assert_int_equal(s.acks[0], 1);
    assert_int_equal(s.calls[0], 1);
    assert_int_equal(st.lost_leases, 0);
    assert_true(st.extends >= 2);
    env_close(&e);
}

static int release_first(kvq_bytes v, const kvq_workq_lease *lease, int worker, void *payload)
{
    (void)v;
    (void)lease;
    (void)worker;
    int *calls = payload;
    __atomic_add_fetch(calls, 1, __ATOMIC_RELAXED);
    return KVQ_WORKQ_RELEASE;
}

/* KVQ_WORKQ_RELEASE gives the item back at once and stops the consumer by itself. */
static void test_release_gives_back_and_stops(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 30000, 0);
    push_items(&e, 3);
    int calls = 0;
    kvq_workq_consumer *c;
    assert_int_equal(kvq_workq_consumer_start(&c, e.w, release_first, &calls, NULL), 0);
    int64_t end = kvq__mono_us() + 20 * 1000000LL;
    while (!kvq_workq_consumer_finished(c) && kvq__mono_us() < end)
        kvq__sleep_us(10000);
    assert_true(kvq_workq_consumer_finished(c));
    assert_int_equal(kvq_workq_consumer_join(c), 0);
    kvq_workq_consumer_stats st;
    assert_int_equal(kvq_workq_consumer_get_stats(&st, c), 0);
    kvq_workq_consumer_destroy(c);
    assert_int_equal(calls, 1);
    assert_int_equal(st.released, 1);
    kvq_workq_stats m;
    assert_int_equal(kvq_workq_get_stats(&m, e.w), 0);
    assert_int_equal(m.ready, 3);
    assert_int_equal(m.inflight, 0);
    env_close(&e);
}

typedef struct late_push {
    env *e;
    int64_t after_us;
} late_push;

static void *push_later(void *arg)
{
    late_push *p = arg;
    kvq__sleep_us(p->after_us);
    int rc = kvq_workq_push(NULL, p->e->w, (const uint8_t *)"7", 1, NULL);
    return rc == 0 ? p : NULL;
}

/* The long poll returns the item pushed while it waits, long before its wait ends; with nothing
 * pushed it returns KVQ_ENOTFOUND once the wait is over, not before. */
static void test_receive_wait(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 30000, 0);
    kvq_buf v = KVQ_BUF_INIT;
    kvq_workq_lease l;
    int64_t t0 = kvq__mono_us();
    assert_int_equal(kvq_workq_receive_wait(&v, &l, e.w, 0, 300), KVQ_ENOTFOUND);
    assert_true(kvq__mono_us() - t0 >= 300 * 1000);
    late_push p = { &e, 300 * 1000 };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, push_later, &p), 0);
    t0 = kvq__mono_us();
    assert_int_equal(kvq_workq_receive_wait(&v, &l, e.w, 0, 60000), 0);
    int64_t took = kvq__mono_us() - t0;
    void *ret;
    pthread_join(t, &ret);
    assert_ptr_equal(ret, &p);
    assert_int_equal(v.len, 1);
    assert_int_equal(v.data[0], '7');
    assert_true(took < 30 * 1000000LL); /* woken by the push, not by the end of the wait */
    assert_int_equal(kvq_workq_ack(e.w, &l), 0);
    kvq_buf_dispose(&v);
    env_close(&e);
}

static int never(kvq_bytes v, const kvq_workq_lease *lease, int worker, void *payload)
{
    (void)v;
    (void)lease;
    (void)worker;
    (void)payload;
    return KVQ_WORKQ_ACK;
}

static void test_bad_input(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 30000, 0);
    kvq_workq_consumer *c = (kvq_workq_consumer *)&e;
    kvq_workq_consumer_options o = KVQ_WORKQ_CONSUMER_OPTIONS_INIT;
    assert_int_equal(kvq_workq_consumer_start(NULL, e.w, never, NULL, &o), KVQ_EINVAL);
    assert_int_equal(kvq_workq_consumer_start(&c, NULL, never, NULL, &o), KVQ_EINVAL);
    assert_null(c);
    assert_int_equal(kvq_workq_consumer_start(&c, e.w, NULL, NULL, &o), KVQ_EINVAL);
    o.version = 99;
    assert_int_equal(kvq_workq_consumer_start(&c, e.w, never, NULL, &o), KVQ_EINVAL);
    o = (kvq_workq_consumer_options)KVQ_WORKQ_CONSUMER_OPTIONS_INIT;
    o.workers = 0;
    assert_int_equal(kvq_workq_consumer_start(&c, e.w, never, NULL, &o), KVQ_EINVAL);
    o.workers = 1025;
    assert_int_equal(kvq_workq_consumer_start(&c, e.w, never, NULL, &o), KVQ_EINVAL);
    o = (kvq_workq_consumer_options)KVQ_WORKQ_CONSUMER_OPTIONS_INIT;
    o.lease_ms = -1;
    assert_int_equal(kvq_workq_consumer_start(&c, e.w, never, NULL, &o), KVQ_EINVAL);
    o = (kvq_workq_consumer_options)KVQ_WORKQ_CONSUMER_OPTIONS_INIT;
    o.nack_delay_ms = 86400001;
    assert_int_equal(kvq_workq_consumer_start(&c, e.w, never, NULL, &o), KVQ_EINVAL);
    assert_null(c);
    kvq_workq_consumer_stats st;
    assert_int_equal(kvq_workq_consumer_get_stats(NULL, c), KVQ_EINVAL);
    assert_int_equal(kvq_workq_consumer_get_stats(&st, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_workq_consumer_join(NULL), KVQ_EINVAL);
    assert_int_equal(kvq_workq_consumer_finished(NULL), 1);
    kvq_workq_consumer_stop(NULL);
    kvq_workq_consumer_destroy(NULL);
    kvq_buf v = KVQ_BUF_INIT;
    kvq_workq_lease l;
    assert_int_equal(kvq_workq_receive_wait(&v, &l, NULL, 0, 0), KVQ_EINVAL);
    assert_int_equal(kvq_workq_receive_wait(NULL, &l, e.w, 0, 0), KVQ_EINVAL);
    assert_int_equal(kvq_workq_receive_wait(&v, NULL, e.w, 0, 0), KVQ_EINVAL);
    assert_int_equal(kvq_workq_receive_wait(&v, &l, e.w, 0, -1), KVQ_EINVAL);
    assert_int_equal(kvq_workq_receive_wait(&v, &l, e.w, 0, 86400001), KVQ_EINVAL);
    env_close(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_item_acked_once_durable),
        cmocka_unit_test(test_every_item_acked_once_priority),
        cmocka_unit_test(test_one_commit_per_item_durable),
        cmocka_unit_test(test_one_commit_per_item_priority),
        cmocka_unit_test(test_last_ack_not_held),
        cmocka_unit_test(test_failed_items_come_back),
        cmocka_unit_test(test_failed_items_dead_letter),
        cmocka_unit_test(test_heartbeat_keeps_a_long_lease),
        cmocka_unit_test(test_release_gives_back_and_stops),
        cmocka_unit_test(test_receive_wait),
        cmocka_unit_test(test_bad_input),
    };
    kt_group_db(&db, "wqc");
    return cmocka_run_group_tests(tests, kt_group_db_setup, kt_group_db_teardown);
}
