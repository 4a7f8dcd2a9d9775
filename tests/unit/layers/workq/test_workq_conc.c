/* Work-queue layer under concurrency, injected faults and SIGKILL:
 *
 * - consumer threads with leases and random ack / nack / abandon: every item acked exactly once,
 *   and every redelivery explained by a nack or an expired lease (abandoned, or acked too late);
 * - exactly-once processing: the consumer's effect commits in the same transaction as the ack,
 *   with injected 1020 / 1021 faults: every item's effect is applied exactly once;
 * - a consumer process killed with SIGKILL mid-work (started with posix_spawn of this binary in
 *   its --child mode): its item is redelivered after the lease, once.
 *
 * No test asserts speed; waits are bounded by tens of seconds. Randomized tests print their seed
 * and replay command. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "test_queue_common.h"

/* Items come back however often they are given back or their leases are lost (the tests count
 * redeliveries; max deliveries is kvq_workq_options' default of 5 otherwise). */
static const kvq_workq_options never_dead = { KVQ_WORKQ_OPTIONS_VERSION, 30000, 0, 300000 };

extern char **environ;

#define NITEMS   120
#define NTHREADS 4
#define LEASE_MS 300
#define BOUND_US 120000000LL

static int tick_body(kvq_txn *txn, void *arg)
{
    (void)arg;
    static const uint8_t one[8] = { 1 };
    return kvq_txn_atomic_op(txn, (const uint8_t *)"tick", 4, one, 8, KVQ_MUT_ADD);
}

static uint32_t item_of(const kvq_buf *b)
{
    uint32_t p, s;
    if (tq_parse(b->data, b->len, &p, &s) != 0)
        fail_msg("a received value is not an item of this test");
    assert_true(s < NITEMS);
    return s;
}

static void push_items(kvq_workq *w, kvq_queue_type type)
{
    for (uint32_t i = 0; i < NITEMS; i++) {
        uint8_t v[16];
        size_t n = tq_value(v, 0, i);
        kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
        if (type == KVQ_QUEUE_PRIORITY)
            po.priority = i % 5;
        bool enq;
        assert_ok(kvq_workq_push(&enq, w, v, n, &po));
        assert_int_equal(enq, 1);
    }
}

/* ---- threads ------------------------------------------------------------------------------- */

typedef struct shared {
    kvq_workq *w;
    pthread_mutex_t mu;
    int receives[NITEMS];
    int acks[NITEMS];
    int nacks[NITEMS];
    int abandons[NITEMS];
    int late[NITEMS]; /* ack or nack refused with lease_expired */
    int acked_total;
    int errors;
    char err[256];
    uint64_t seed;
} shared;

typedef struct worker {
    shared *sh;
    int id;
} worker;

static void *consumer(void *arg)
{
    worker *wk = arg;
    shared *sh = wk->sh;
    kvq__rng rng = { sh->seed * 31 + (uint64_t)wk->id + 1 };
    kvq_buf b = KVQ_BUF_INIT;
    int64_t end = kvq__mono_us() + BOUND_US;
    for (;;) {
        pthread_mutex_lock(&sh->mu);
        int done = sh->acked_total >= NITEMS || sh->errors > 0;
        pthread_mutex_unlock(&sh->mu);
        if (done || kvq__mono_us() > end)
            break;
        kvq_workq_lease l;
        int rc = kvq_workq_receive(&b, &l, sh->w, LEASE_MS);
        if (rc == KVQ_ENOTFOUND) {
            rc = kvq_workq_recover(NULL, sh->w);
            kvq__sleep_us(10000);
        }
        if (rc == KVQ_ENOTFOUND || (rc == 0 && b.len == 0))
            continue;
        if (rc != 0) {
            pthread_mutex_lock(&sh->mu);
            sh->errors++;
            snprintf(sh->err, sizeof(sh->err), "receive/recover: %s (%s)", kvq_errname(rc),
                     kvq_last_error());
            pthread_mutex_unlock(&sh->mu);
            break;
        }
        uint32_t p, s;
        if (tq_parse(b.data, b.len, &p, &s) != 0 || s >= NITEMS) {
            pthread_mutex_lock(&sh->mu);
            sh->errors++;
            snprintf(sh->err, sizeof(sh->err), "a value that is no item");
            pthread_mutex_unlock(&sh->mu);
            break;
        }
        b.len = 0;
        pthread_mutex_lock(&sh->mu);
        sh->receives[s]++;
        pthread_mutex_unlock(&sh->mu);
        unsigned r = (unsigned)(kvq__rng_next(&rng) % 100);
        if (r < 15) {
            pthread_mutex_lock(&sh->mu);
            sh->abandons[s]++; /* walk away: the lease must bring it back */
            pthread_mutex_unlock(&sh->mu);
            continue;
        }
        rc = r < 30 ? kvq_workq_nack(sh->w, &l, 0) : kvq_workq_ack(sh->w, &l);
        pthread_mutex_lock(&sh->mu);
        if (rc == 0 && r < 30) {
            sh->nacks[s]++;
        } else if (rc == 0) {
            sh->acks[s]++;
            sh->acked_total++;
        } else if (rc == KVQ_ELEASE_EXPIRED) {
            sh->late[s]++; /* a slow consumer: the lease brings it back */
        } else {
            sh->errors++;
            snprintf(sh->err, sizeof(sh->err), "ack/nack: %s (%s)", kvq_errname(rc),
                     kvq_last_error());
        }
        pthread_mutex_unlock(&sh->mu);
    }
    kvq_buf_dispose(&b);
    return NULL;
}

static void threads_case(kvq_queue_type type)
{
    tq_mkdir();
    kvq_db *db = tq_open_db(0, 0, 0);
    kvq_queue *q;
    kvq_workq *w;
    assert_ok(kvq_queue_open(&q, db, type, NULL, NULL));
    assert_ok(kvq_workq_open(&w, q, &never_dead));
    assert_ok(kvq_db_transact(db, tick_body, NULL));
    push_items(w, type);
    shared *sh = calloc(1, sizeof(*sh));
    assert_non_null(sh);
    sh->w = w;
    sh->seed = kt_seed();
    pthread_mutex_init(&sh->mu, NULL);
    pthread_t th[NTHREADS];
    worker wk[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        wk[i].sh = sh;
        wk[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, consumer, &wk[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    if (sh->errors > 0)
        fail_msg("a consumer failed: %s (replay: %s --seed %" PRIu64 ")", sh->err, kt_prog(),
                 kt_seed());
    int redeliveries = 0, explained = 0;
    for (int i = 0; i < NITEMS; i++) {
        if (sh->acks[i] != 1)
            fail_msg("item %d acked %d times (replay: %s --seed %" PRIu64 ")", i, sh->acks[i],
                     kt_prog(), kt_seed());
        /* Each delivery but the first follows a nack, an abandoned lease or a late settle. */
        int why = sh->nacks[i] + sh->abandons[i] + sh->late[i];
        if (sh->receives[i] - 1 != why)
            fail_msg("item %d: %d receives, but %d nacks + %d abandoned + %d late", i,
                     sh->receives[i], sh->nacks[i], sh->abandons[i], sh->late[i]);
        redeliveries += sh->receives[i] - 1;
        explained += why;
    }
    kvq_workq_stats m;
    assert_ok(kvq_workq_get_stats(&m, w));
    assert_int_equal(m.ready, 0);
    assert_int_equal(m.inflight, 0);
    assert_int_equal(m.delayed, 0);
    assert_int_equal(m.dead, 0);
    printf("# workq threads (%s): items=%d redeliveries=%d explained=%d\n",
           type == KVQ_QUEUE_DURABLE ? "durable" : "priority", NITEMS, redeliveries, explained);
    pthread_mutex_destroy(&sh->mu);
    free(sh);
    kvq_workq_close(w);
    kvq_queue_close(q);
    kvq_db_close(db);
    tq_rmdir();
}

static void test_threads_durable(void **state)
{
    (void)state;
    threads_case(KVQ_QUEUE_DURABLE);
}

static void test_threads_priority(void **state)
{
    (void)state;
    threads_case(KVQ_QUEUE_PRIORITY);
}

/* ---- exactly once under injected faults ----------------------------------------------------- */

typedef struct effect_arg {
    kvq_workq *w;
    kvq_workq_lease *l;
    uint32_t item;
} effect_arg;

/* The consumer's effect (one atomic add on the item's effect key) and the ack, together. */
static int effect_body(kvq_txn *txn, void *arg)
{
    effect_arg *a = arg;
    int rc = kvq_workq_ack_txn(a->w, txn, a->l);
    if (rc != 0)
        return rc;
    uint8_t key[16];
    memcpy(key, "effect/", 7);
    for (int i = 0; i < 4; i++)
        key[7 + i] = (uint8_t)(a->item >> (24 - 8 * i));
    static const uint8_t one[8] = { 1 };
    return kvq_txn_atomic_op(txn, key, 11, one, 8, KVQ_MUT_ADD);
}

typedef struct effect_read {
    uint64_t counts[NITEMS];
} effect_read;

static int read_effects(kvq_txn *txn, void *arg)
{
    effect_read *r = arg;
    for (uint32_t i = 0; i < NITEMS; i++) {
        uint8_t key[16];
        memcpy(key, "effect/", 7);
        for (int j = 0; j < 4; j++)
            key[7 + j] = (uint8_t)(i >> (24 - 8 * j));
        kvq_bytes v;
        int present;
        int rc = kvq_txn_get(&v, &present, txn, key, 11, KVQ_SNAPSHOT);
        if (rc != 0)
            return rc;
        r->counts[i] = present ? kvq__le_get(v.data, v.len) : 0;
    }
    return 0;
}

static void exactly_once_case(kvq_queue_type type)
{
    tq_mkdir();
    kvq_db *db =
        tq_open_db(0.2, KVQ_FAULT_NOT_COMMITTED | KVQ_FAULT_UNKNOWN_COMMITTED |
                            KVQ_FAULT_UNKNOWN_NOT_COMMITTED,
                   kt_seed());
    kvq_queue *q;
    kvq_workq *w;
    assert_ok(kvq_queue_open(&q, db, type, NULL, NULL));
    assert_ok(kvq_workq_open(&w, q, &never_dead));
    assert_ok(kvq_db_transact(db, tick_body, NULL));
    push_items(w, type);
    kvq_workq_stats m;
    assert_ok(kvq_workq_get_stats(&m, w));
    assert_int_equal(m.ready, NITEMS); /* pushes exactly once despite 1021 */
    kvq__rng rng = { kt_seed() ^ 0x5eed };
    int done = 0, applied = 0, settled_on_retry = 0, expired = 0;
    int64_t end = kvq__mono_us() + BOUND_US;
    kvq_buf b = KVQ_BUF_INIT;
    uint8_t finished[NITEMS] = { 0 };
    while (done < NITEMS) {
        assert_true(kvq__mono_us() < end);
        kvq_workq_lease l;
        int rc = kvq_workq_receive(&b, &l, w, LEASE_MS);
        if (rc == KVQ_ENOTFOUND) {
            /* Leases taken by receives whose commit reported 1021 come back after LEASE_MS. */
            assert_ok(kvq_workq_recover(NULL, w));
            kvq__sleep_us(20000);
            continue;
        }
        assert_ok(rc);
        uint32_t item = item_of(&b);
        if (kvq__rng_next(&rng) % 10 == 0) {
            kvq__sleep_us(LEASE_MS * 1000 + 100000); /* too slow: the ack must fail */
            assert_ok(kvq_db_transact(db, tick_body, NULL));
        }
        effect_arg a = { w, &l, item };
        rc = kvq_db_transact(db, effect_body, &a);
        if (rc == 0) {
            applied++;
        } else if (rc == KVQ_ELEASE_SETTLED) {
            settled_on_retry++; /* an attempt committed (1021): the effect is in */
        } else if (rc == KVQ_ELEASE_EXPIRED) {
            expired++; /* nothing committed: it comes back */
            continue;
        } else {
            fail_msg("ack with effect: %s (%s)", kvq_errname(rc), kvq_last_error());
        }
        assert_int_equal(finished[item], 0);
        finished[item] = 1;
        done++;
    }
    kvq_buf_dispose(&b);
    effect_read *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    assert_ok(kvq_db_transact(db, read_effects, r));
    for (uint32_t i = 0; i < NITEMS; i++)
        if (r->counts[i] != 1)
            fail_msg("item %u's effect applied %" PRIu64 " times (replay: %s --seed %" PRIu64 ")",
                     i, r->counts[i], kt_prog(), kt_seed());
    free(r);
    assert_ok(kvq_workq_recover(NULL, w));
    assert_ok(kvq_workq_get_stats(&m, w));
    assert_int_equal(m.ready, 0);
    assert_int_equal(m.inflight, 0);
    kvq_db_stats st;
    assert_ok(kvq_db_get_stats(&st, db));
    printf("# workq exactly-once (%s): items=%d applied=%d settled_on_retry=%d expired=%d "
           "faults=%" PRIu64 "\n",
           type == KVQ_QUEUE_DURABLE ? "durable" : "priority", NITEMS, applied,
           settled_on_retry, expired, st.injected_faults);
    kvq_workq_close(w);
    kvq_queue_close(q);
    kvq_db_close(db);
    tq_rmdir();
}

static void test_exactly_once_durable(void **state)
{
    (void)state;
    exactly_once_case(KVQ_QUEUE_DURABLE);
}

static void test_exactly_once_priority(void **state)
{
    (void)state;
    exactly_once_case(KVQ_QUEUE_PRIORITY);
}

/* ---- SIGKILL -------------------------------------------------------------------------------- */

/* Child mode: receive one item with a lease, say so in a file, then wait to be killed. */
static int child_main(const char *dir, const char *flag)
{
    kvq_db *db = NULL;
    kvq_queue *q = NULL;
    kvq_workq *w = NULL;
    if (kvq_db_open(&db, dir, NULL) != 0 ||
        kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL) != 0 ||
        kvq_workq_open(&w, q, &never_dead) != 0)
        return 3;
    kvq_buf b = KVQ_BUF_INIT;
    kvq_workq_lease l;
    /* The parent must see the item in flight before this lease ends (wider in slow builds). */
    if (kvq_workq_receive(&b, &l, w, 500 * kvq_test_time_factor()) != 0)
        return 4;
    FILE *f = fopen(flag, "w");
    if (f == NULL)
        return 5;
    fprintf(f, "%.*s\n", (int)b.len, (const char *)b.data);
    fclose(f);
    for (;;)
        kvq__sleep_us(1000000);
}

static void test_sigkill_redelivers(void **state)
{
    (void)state;
    tq_mkdir();
    kvq_db *db = tq_open_db(0, 0, 0);
    kvq_queue *q;
    kvq_workq *w;
    assert_ok(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL));
    assert_ok(kvq_workq_open(&w, q, &never_dead));
    assert_ok(kvq_db_transact(db, tick_body, NULL));
    bool enq;
    assert_ok(kvq_workq_push(&enq, w, (const uint8_t *)"work", 4, NULL));
    char flag[300];
    snprintf(flag, sizeof(flag), "%s/child-received", tq_dir);
    char *args[] = { (char *)kt_prog(), "--child", tq_dir, flag, NULL };
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ), 0);
    int64_t end = kvq__mono_us() + 30000000LL;
    struct stat st;
    while (stat(flag, &st) != 0 || st.st_size == 0) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid)
            fail_msg("the child exited before receiving (status %d)", status);
        assert_true(kvq__mono_us() < end);
        kvq__sleep_us(10000);
    }
    assert_int_equal(kill(pid, SIGKILL), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    /* The item is in flight: nobody gets it until the lease has passed; then exactly one. */
    kvq_workq_stats m;
    assert_ok(kvq_workq_get_stats(&m, w));
    assert_int_equal(m.inflight, 1);
    kvq_buf b = KVQ_BUF_INIT;
    kvq_workq_lease l;
    int rc;
    end = kvq__mono_us() + 30000000LL;
    for (;;) {
        assert_ok(kvq_workq_recover(NULL, w));
        rc = kvq_workq_receive(&b, &l, w, 60000);
        if (rc != KVQ_ENOTFOUND)
            break;
        assert_true(kvq__mono_us() < end);
        kvq__sleep_us(20000);
    }
    assert_ok(rc);
    assert_bytes(b.data, b.len, (const uint8_t *)"work", 4);
    assert_int_equal(l.deliveries, 2);
    kvq_workq_lease l2;
    assert_int_equal(kvq_workq_receive(&b, &l2, w, 0), KVQ_ENOTFOUND);
    assert_ok(kvq_workq_ack(w, &l));
    kvq_buf_dispose(&b);
    kvq_workq_close(w);
    kvq_queue_close(q);
    kvq_db_close(db);
    tq_rmdir();
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--child") == 0)
        return child_main(argv[2], argv[3]);
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_durable),
        cmocka_unit_test(test_threads_priority),
        cmocka_unit_test(test_exactly_once_durable),
        cmocka_unit_test(test_exactly_once_priority),
        cmocka_unit_test(test_sigkill_redelivers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
