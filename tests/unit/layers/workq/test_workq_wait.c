/* The long poll (kvq_workq_receive_wait) is event-driven: it sleeps until the first delayed item
 * falls due or the first lease ends, and is woken by what moves that time earlier (a delayed
 * push, a nack with a delay, an extend that shortens a lease) and by a stop; it never looks on
 * a timer. Timings are only checked with generous bounds (loaded CI machines): what tells the
 * behaviour apart is how many times the waiter looked (kvq_testing_workq_wait_counts). A wait
 * that must see an item fall due is WAIT_MS, wider in slow builds (kvq_test_time_factor). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq_test.h"
#include "kvq/consumer.h"
#include "kvq/workq.h"
#include "layers/workq/workq_internal.h"
#include "util/util.h"

#define WAIT_MS (5000 * kvq_test_time_factor())

static kvq_db *db;
static int qno;
static uint64_t run; /* subspaces of this run, on a database perhaps shared with others */

typedef struct env {
    kvq_queue *q;
    kvq_workq *w;
} env;

static env env_open(kvq_queue_type type)
{
    kt_db_skip_unavailable();
    env e = { NULL, NULL };
    char name[48];
    snprintf(name, sizeof(name), "ww-%llx-%d", (unsigned long long)run, qno++);
    kvq_tuple_elem el = kvq_tuple_str(name);
    kvq_subspace *sub;
    assert_int_equal(kvq_subspace_new(&sub, NULL, 0, &el, 1), 0);
    assert_int_equal(kvq_queue_open(&e.q, db, type, sub, NULL), 0);
    kvq_subspace_destroy(sub);
    kvq_workq_options o = KVQ_WORKQ_OPTIONS_INIT;
    o.lease_ms = 60000;
    assert_int_equal(kvq_workq_open(&e.w, e.q, &o), 0);
    return e;
}

static void env_close(env *e)
{
    kvq_workq_close(e->w);
    kvq_queue_close(e->q);
}

static void push(env *e, const char *v, int64_t delay_ms)
{
    kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
    po.delay_ms = delay_ms;
    assert_int_equal(kvq_workq_push(NULL, e->w, (const uint8_t *)v, strlen(v), &po), 0);
}

static uint64_t looks_of(env *e)
{
    uint64_t looks = 0, sleeps = 0;
    assert_int_equal(kvq_testing_workq_wait_counts(&looks, &sleeps, e->w), 0);
    print_message("looks %llu, sleeps %llu\n", (unsigned long long)looks,
                  (unsigned long long)sleeps);
    return looks;
}

static void assert_value(const kvq_buf *v, const char *want)
{
    assert_int_equal(v->len, strlen(want));
    assert_memory_equal(v->data, want, v->len);
}

/* A waiter in a thread: receive_wait(wait_ms) on e, then its result, value and duration. */
typedef struct waiter {
    env *e;
    int64_t wait_ms;
    kvq__wq_waker *waker; /* NULL: the public call */
    int rc;
    kvq_buf v;
    kvq_workq_lease lease;
    int64_t done_us; /* kvq__mono_us() when it returned */
    int done;        /* atomic: 1 once it returned */
    pthread_t thread;
} waiter;

static void *waiter_main(void *arg)
{
    waiter *x = arg;
    x->rc = x->waker != NULL
                ? kvq__wq_receive_wait(&x->v, &x->lease, x->e->w, 0, x->wait_ms, x->waker, NULL,
                                       NULL)
                : kvq_workq_receive_wait(&x->v, &x->lease, x->e->w, 0, x->wait_ms);
    x->done_us = kvq__mono_us();
    __atomic_store_n(&x->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void waiter_start(waiter *x, env *e, int64_t wait_ms, kvq__wq_waker *waker)
{
    memset(x, 0, sizeof(*x));
    x->e = e;
    x->wait_ms = wait_ms;
    x->waker = waker;
    assert_int_equal(pthread_create(&x->thread, NULL, waiter_main, x), 0);
}

static void waiter_join(waiter *x)
{
    assert_int_equal(pthread_join(x->thread, NULL), 0);
}

/* An idle wait of 2 s looks a few times (before and after arming its watches, and at the end),
 * not every 200 ms (which made about ten). */
static void test_idle_wait_does_not_poll(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE);
    kvq_buf v = KVQ_BUF_INIT;
    kvq_workq_lease l;
    int64_t t0 = kvq__mono_us();
    assert_int_equal(kvq_workq_receive_wait(&v, &l, e.w, 0, 2000), KVQ_ENOTFOUND);
    assert_true(kvq__mono_us() - t0 >= 2000 * 1000LL);
    uint64_t looks = 0, sleeps = 0;
    assert_int_equal(kvq_testing_workq_wait_counts(&looks, &sleeps, e.w), 0);
    assert_true(looks <= 4);
    assert_true(sleeps <= 2);
    kvq_buf_dispose(&v);
    env_close(&e);
}

/* A delayed item is received once it falls due, by a waiter that slept until then. */
static void check_delayed(kvq_queue_type type)
{
    env e = env_open(type);
    kvq_buf v = KVQ_BUF_INIT;
    kvq_workq_lease l;
    int64_t t0 = kvq__mono_us();
    push(&e, "later", 300);
    assert_int_equal(kvq_workq_receive_wait(&v, &l, e.w, 0, WAIT_MS), 0);
    int64_t took = kvq__mono_us() - t0;
    assert_value(&v, "later");
    assert_true(took >= 300 * 1000LL);
    assert_true(took < WAIT_MS * 1000LL);
    assert_true(looks_of(&e) <= 4); /* polling every 200 ms made 5 */
    assert_int_equal(kvq_workq_ack(e.w, &l), 0);
    kvq_buf_dispose(&v);
    env_close(&e);
}

static void test_delayed_item_durable(void **state)
{
    (void)state;
    check_delayed(KVQ_QUEUE_DURABLE);
}

static void test_delayed_item_priority(void **state)
{
    (void)state;
    check_delayed(KVQ_QUEUE_PRIORITY);
}

/* An item whose lease ends goes back to the queue then, and the waiter receives it. */
static void test_lease_end(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE);
    push(&e, "x", 0);
    kvq_buf v = KVQ_BUF_INIT;
    kvq_workq_lease first, second;
    int64_t t0 = kvq__mono_us();
    assert_int_equal(kvq_workq_receive(&v, &first, e.w, 300), 0);
    assert_int_equal(kvq_workq_receive_wait(&v, &second, e.w, 0, WAIT_MS), 0);
    int64_t took = kvq__mono_us() - t0;
    assert_value(&v, "x");
    assert_int_equal(second.deliveries, 2);
    assert_true(took >= 300 * 1000LL);
    assert_true(took < WAIT_MS * 1000LL);
    assert_true(looks_of(&e) <= 4);
    assert_int_equal(kvq_workq_ack(e.w, &first), KVQ_ELEASE_EXPIRED);
    assert_int_equal(kvq_workq_ack(e.w, &second), 0);
    kvq_buf_dispose(&v);
    env_close(&e);
}

/* A waiter asleep until a far due time is woken by a delayed push due sooner, and receives it. */
static void test_sooner_delay_wakes(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE);
    push(&e, "far", 60000);
    waiter x;
    waiter_start(&x, &e, WAIT_MS, NULL);
    kvq__sleep_us(200 * 1000);
    int64_t t0 = kvq__mono_us();
    push(&e, "soon", 300);
    waiter_join(&x);
    assert_int_equal(x.rc, 0);
    assert_value(&x.v, "soon");
    assert_true(x.done_us - t0 >= 300 * 1000LL);
    assert_true(looks_of(&e) <= 6);
    assert_int_equal(kvq_workq_ack(e.w, &x.lease), 0);
    kvq_buf_dispose(&x.v);
    env_close(&e);
}

/* A nack with a delay, and an extend that shortens a lease, wake a sleeping waiter: it then
 * receives the item when it falls due. */
static void check_settle_wakes(int shorten)
{
    env e = env_open(KVQ_QUEUE_DURABLE);
    push(&e, "held", 0);
    kvq_buf v = KVQ_BUF_INIT;
    kvq_workq_lease l;
    assert_int_equal(kvq_workq_receive(&v, &l, e.w, 60000), 0);
    waiter x;
    waiter_start(&x, &e, WAIT_MS, NULL);
    kvq__sleep_us(200 * 1000);
    int64_t t0 = kvq__mono_us();
    if (shorten)
        assert_int_equal(kvq_workq_extend(e.w, &l, 300), 0);
    else
        assert_int_equal(kvq_workq_nack(e.w, &l, 300), 0);
    waiter_join(&x);
    assert_int_equal(x.rc, 0);
    assert_value(&x.v, "held");
    assert_int_equal(x.lease.deliveries, 2);
    assert_true(x.done_us - t0 >= 300 * 1000LL);
    assert_true(looks_of(&e) <= 6);
    assert_int_equal(kvq_workq_ack(e.w, &x.lease), 0);
    kvq_buf_dispose(&x.v);
    kvq_buf_dispose(&v);
    env_close(&e);
}

static void test_nack_delay_wakes(void **state)
{
    (void)state;
    check_settle_wakes(0);
}

static void test_shorter_extend_wakes(void **state)
{
    (void)state;
    check_settle_wakes(1);
}

/* A push wakes the waiter at once (no due time at all). */
static void test_push_wakes(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_PRIORITY);
    waiter x;
    waiter_start(&x, &e, 20000, NULL);
    kvq__sleep_us(200 * 1000);
    push(&e, "now", 0);
    waiter_join(&x);
    assert_int_equal(x.rc, 0);
    assert_value(&x.v, "now");
    assert_true(looks_of(&e) <= 4);
    assert_int_equal(kvq_workq_ack(e.w, &x.lease), 0);
    kvq_buf_dispose(&x.v);
    env_close(&e);
}

/* The looks, sleeps and watch-ended sleeps of e's waiters so far. */
static void counts_of(env *e, uint64_t *looks, uint64_t *sleeps, uint64_t *wakes)
{
    assert_int_equal(kvq_testing_workq_wait_counts(looks, sleeps, e->w), 0);
    assert_int_equal(kvq_testing_workq_wait_wakes(wakes, e->w), 0);
}

/* A plain push (kvq_queue_push; kvq_queue_push_prio on a priority queue, which moves kvq's push
 * counter beside the recipe), made once the waiter has looked twice and so has its watches
 * armed, wakes it: it receives the item after exactly one sleep, which a watch ended. Its wait
 * is 10 minutes; the test's own bound (a minute) stops it through its waker if it oversleeps.
 * (When the priority queue's waiter did not watch that counter, it woke only at a 1 s look, a
 * sleep no watch ended.) */
static void check_plain_push_wakes(kvq_queue_type type)
{
    env e = env_open(type);
    kvq__wq_waker k;
    assert_int_equal(kvq__wq_waker_init(&k), 0);
    waiter x;
    waiter_start(&x, &e, 600000, &k);
    uint64_t looks = 0, sleeps = 0, wakes = 0;
    int64_t bound = kvq__mono_us() + 60 * 1000000LL;
    while (counts_of(&e, &looks, &sleeps, &wakes), looks < 2 && kvq__mono_us() < bound)
        kvq__sleep_us(1000);
    assert_int_equal(looks, 2); /* both looks found nothing; the watches are armed */
    if (type == KVQ_QUEUE_PRIORITY)
        assert_int_equal(kvq_queue_push_prio(e.q, (const uint8_t *)"plain", 5, 0), 0);
    else
        assert_int_equal(kvq_queue_push(e.q, (const uint8_t *)"plain", 5), 0);
    while (!__atomic_load_n(&x.done, __ATOMIC_ACQUIRE) && kvq__mono_us() < bound)
        kvq__sleep_us(1000);
    int overslept = !__atomic_load_n(&x.done, __ATOMIC_ACQUIRE);
    kvq__wq_waker_stop(&k);
    waiter_join(&x);
    kvq__wq_waker_destroy(&k);
    assert_false(overslept);
    assert_int_equal(x.rc, 0);
    assert_value(&x.v, "plain");
    counts_of(&e, &looks, &sleeps, &wakes);
    print_message("looks %llu, sleeps %llu, woken by a watch %llu\n", (unsigned long long)looks,
                  (unsigned long long)sleeps, (unsigned long long)wakes);
    assert_int_equal(looks, 3);
    assert_int_equal(sleeps, 1);
    assert_int_equal(wakes, 1);
    assert_int_equal(kvq_workq_ack(e.w, &x.lease), 0);
    kvq_buf_dispose(&x.v);
    env_close(&e);
}

static void test_plain_push_wakes_durable(void **state)
{
    (void)state;
    check_plain_push_wakes(KVQ_QUEUE_DURABLE);
}

static void test_plain_push_wakes_priority(void **state)
{
    (void)state;
    check_plain_push_wakes(KVQ_QUEUE_PRIORITY);
}

/* A stopped waker ends a long wait at once, with nothing received. */
static void test_waker_stop(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE);
    kvq__wq_waker k;
    assert_int_equal(kvq__wq_waker_init(&k), 0);
    waiter x;
    waiter_start(&x, &e, 60000, &k);
    kvq__sleep_us(200 * 1000);
    int64_t t0 = kvq__mono_us();
    kvq__wq_waker_stop(&k);
    waiter_join(&x);
    assert_int_equal(x.rc, KVQ_ENOTFOUND);
    assert_true(x.done_us - t0 < 30 * 1000000LL); /* not the end of the wait */
    /* A waker stopped before the wait: one look, no wait. */
    kvq_workq_lease l;
    t0 = kvq__mono_us();
    assert_int_equal(kvq__wq_receive_wait(&x.v, &l, e.w, 0, 60000, &k, NULL, NULL), KVQ_ENOTFOUND);
    assert_true(kvq__mono_us() - t0 < 30 * 1000000LL);
    kvq__wq_waker_destroy(&k);
    kvq_buf_dispose(&x.v);
    env_close(&e);
}

static int ack_all(kvq_bytes v, const kvq_workq_lease *lease, int worker, void *payload)
{
    (void)v;
    (void)lease;
    (void)worker;
    (void)payload;
    return KVQ_WORKQ_ACK;
}

/* Idle workers of the consumer runtime sleep (they looked every 100 ms), and a stop wakes
 * them. */
static void test_consumer_idle_and_stop(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE);
    kvq_workq_consumer_options o = KVQ_WORKQ_CONSUMER_OPTIONS_INIT;
    o.workers = 2;
    kvq_workq_consumer *c = NULL;
    assert_int_equal(kvq_workq_consumer_start(&c, e.w, ack_all, NULL, &o), 0);
    kvq__sleep_us(1500 * 1000);
    int64_t t0 = kvq__mono_us();
    kvq_workq_consumer_stop(c);
    assert_int_equal(kvq_workq_consumer_join(c), 0);
    assert_true(kvq__mono_us() - t0 < 30 * 1000000LL);
    kvq_workq_consumer_destroy(c);
    assert_true(looks_of(&e) <= 8); /* 2 workers; every 100 ms made about 30 each */
    env_close(&e);
}

/* The database: $KVQ_TEST_URL when set (ctest runs this binary again as fdb.test_workq_wait;
 * skipped when its engine is not available), else a fresh embedded one. */
static int setup(void **state)
{
    (void)state;
    if (kvq__random_bytes(&run, sizeof(run)) != 0)
        run = (uint64_t)kvq__mono_us();
    if (kt_db_setup("wqw") != 0)
        return -1;
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.retry_limit = -1;
    o.timeout_ms = 0;
    o.max_retry_delay_ms = 50;
    int rc = kt_db_try_open(&db, kt_db_url(), kt_db_url_given() ? &o : NULL, NULL);
    return rc == 0 || rc == KVQ_ENOENGINE ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (db != NULL)
        kvq_db_close(db);
    return kt_db_teardown();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_wait_does_not_poll),
        cmocka_unit_test(test_delayed_item_durable),
        cmocka_unit_test(test_delayed_item_priority),
        cmocka_unit_test(test_lease_end),
        cmocka_unit_test(test_sooner_delay_wakes),
        cmocka_unit_test(test_nack_delay_wakes),
        cmocka_unit_test(test_shorter_extend_wakes),
        cmocka_unit_test(test_push_wakes),
        cmocka_unit_test(test_plain_push_wakes_durable),
        cmocka_unit_test(test_plain_push_wakes_priority),
        cmocka_unit_test(test_waker_stop),
        cmocka_unit_test(test_consumer_idle_and_stop),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
