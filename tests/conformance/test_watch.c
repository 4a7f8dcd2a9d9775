/* Conformance: watches across processes and threads. A watch fires when another process
 * changes the key, within 10 ms (median of several trials, measured on CLOCK_MONOTONIC from the
 * writer's commit return to the waiter's wake: a behaviour check, not a benchmark); not on a
 * write of the same value; it times out, can be cancelled (1029), fails with 1025 when its
 * transaction is reset or destroyed before commit and with the commit's error when the commit
 * fails; it fires at once when the value changed between the read and the commit. */
#include "conformance.h"

#include <pthread.h>

static kvq_txn *new_txn(kvq_db *db)
{
    kvq_txn *t = NULL;
    assert_ok(kvq_txn_create(&t, db));
    return t;
}

/* Reads the key (taking the read version) and watches it, then commits. */
static kvq_watch *arm(kvq_db *db, const cf_key *k)
{
    kvq_txn *t = new_txn(db);
    kvq_bytes v;
    int present;
    assert_ok(kvq_txn_get(&v, &present, t, k->b, k->n, 0));
    kvq_watch *w = NULL;
    assert_ok(kvq_txn_watch(&w, t, k->b, k->n));
    assert_non_null(w);
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
    return w;
}

/* ---- the writer process -------------------------------------------------------------------- */

/* Child role: URL KEY FD_IN FD_OUT. For each command byte read from FD_IN it commits a write of
 * KEY ('c': a new value, 's': the same value as before, 'x': clear it, 'a': add 1 to it as an
 * 8-byte counter, 'q': quit) and writes the
 * CLOCK_MONOTONIC time at which the commit returned (int64 ns) to FD_OUT. */
static int role_writer(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    const char *url = argv[1], *key = argv[2];
    int in = atoi(argv[3]), out = atoi(argv[4]);
    kvq_db *db = NULL;
    int rc = kvq_db_open(&db, url, NULL);
    if (rc != 0) {
        fprintf(stderr, "writer: open: %s (%s)\n", kvq_errname(rc), kvq_last_error());
        return 3;
    }
    kvq_txn *t = NULL;
    if (kvq_txn_create(&t, db) != 0)
        return 4;
    char last[32] = "start";
    unsigned n = 0;
    for (;;) {
        char cmd;
        if (cf_read_all(in, &cmd, 1) != 0 || cmd == 'q')
            break;
        for (;;) {
            kvq_txn_reset(t);
            if (cmd == 'c')
                snprintf(last, sizeof(last), "value-%u", ++n);
            if (cmd == 'x') {
                rc = kvq_txn_clear(t, (const uint8_t *)key, strlen(key));
            } else if (cmd == 'a') {
                uint8_t one[8] = { 1 };
                rc = kvq_txn_atomic_op(t, (const uint8_t *)key, strlen(key), one, 8, KVQ_MUT_ADD);
            } else
                rc = kvq_txn_set(t, (const uint8_t *)key, strlen(key), (const uint8_t *)last,
                                 strlen(last));
            if (rc == 0)
                rc = kvq_txn_commit(t);
            if (rc == 0)
                break;
            if (kvq_txn_on_error(t, rc) != 0) {
                fprintf(stderr, "writer: commit: %s\n", kvq_errname(rc));
                return 5;
            }
        }
        int64_t now = cf_now_ns();
        if (cf_write_all(out, &now, sizeof(now)) != 0)
            return 6;
    }
    kvq_txn_destroy(t);
    kvq_db_close(db);
    return 0;
}

static const struct cf_role roles[] = { { "writer", role_writer } };

struct writer {
    pid_t pid;
    int to, from;
};

static struct writer start_writer(const cf_key *k)
{
    int a[2], b[2];
    assert_int_equal(pipe(a), 0);
    assert_int_equal(pipe(b), 0);
    char key[300], in[16], out[16];
    memcpy(key, k->b, k->n);
    key[k->n] = '\0';
    snprintf(in, sizeof(in), "%d", a[0]);
    snprintf(out, sizeof(out), "%d", b[1]);
    const char *args[] = { cf_url, key, in, out, NULL };
    struct writer w;
    w.pid = cf_spawn("writer", args);
    close(a[0]);
    close(b[1]);
    w.to = a[1];
    w.from = b[0];
    return w;
}

/* Asks the writer for one commit; returns when it committed, with its commit-return time. */
static int64_t writer_do(struct writer *w, char cmd)
{
    assert_int_equal(cf_write_all(w->to, &cmd, 1), 0);
    int64_t ts = 0;
    if (cf_read_all(w->from, &ts, sizeof(ts)) != 0)
        fail_msg("the writer process died");
    return ts;
}

static void stop_writer(struct writer *w)
{
    char q = 'q';
    assert_int_equal(cf_write_all(w->to, &q, 1), 0);
    close(w->to);
    close(w->from);
    cf_wait_ok(w->pid, 30, "writer process");
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- tests --------------------------------------------------------------------------------- */

static void test_fires_across_processes(void **state)
{
    (void)state;
    const char *p = "watch_proc";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k");
    cf_write_key(db, k.b, k.n, "start", 5);
    struct writer wr = start_writer(&k);
    enum { TRIALS = 9 };
    int64_t lat[TRIALS];
    for (int i = 0; i < TRIALS; i++) {
        kvq_watch *w = arm(db, &k);
        /* Not fired before the change. */
        assert_err(kvq_watch_wait(w, 0), KVQ_ETIMED_OUT);
        /* Let the waiter block first, then have the other process commit a change. */
        int64_t committed = 0;
        assert_int_equal(cf_write_all(wr.to, "c", 1), 0);
        assert_ok(kvq_watch_wait(w, 10000));
        int64_t woke = cf_now_ns();
        assert_int_equal(cf_read_all(wr.from, &committed, sizeof(committed)), 0);
        lat[i] = woke - committed;
        /* A fired watch stays fired. */
        assert_ok(kvq_watch_wait(w, 0));
        kvq_watch_destroy(w);
    }
    stop_writer(&wr);
    qsort(lat, TRIALS, sizeof(lat[0]), cmp_i64);
    print_message("watch wake-up after another process's commit: min %.3f ms, median %.3f ms, "
                  "max %.3f ms\n",
                  (double)lat[0] / 1e6, (double)lat[TRIALS / 2] / 1e6,
                  (double)lat[TRIALS - 1] / 1e6);
    /* Generous (loaded CI machines): woken by the commit, not found by a slow poll. */
    if (lat[TRIALS / 2] >= 100 * 1000000)
        fail_msg("median wake-up %.3f ms, expected under 100 ms", (double)lat[TRIALS / 2] / 1e6);
    kvq_db_close(db);
}

static void test_same_value_does_not_fire(void **state)
{
    (void)state;
    const char *p = "watch_same";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k");
    struct writer wr = start_writer(&k);
    (void)writer_do(&wr, 's'); /* the key now holds "start" */
    kvq_watch *w = arm(db, &k);
    (void)writer_do(&wr, 's'); /* the same value again */
    (void)writer_do(&wr, 's');
    assert_err(kvq_watch_wait(w, 200), KVQ_ETIMED_OUT);
    /* A real change then fires it. */
    (void)writer_do(&wr, 'c');
    assert_ok(kvq_watch_wait(w, 10000));
    kvq_watch_destroy(w);
    /* A clear is a change too. */
    w = arm(db, &k);
    (void)writer_do(&wr, 'x');
    assert_ok(kvq_watch_wait(w, 10000));
    kvq_watch_destroy(w);
    /* So is creating a key that was absent. */
    w = arm(db, &k);
    assert_err(kvq_watch_wait(w, 50), KVQ_ETIMED_OUT);
    (void)writer_do(&wr, 'x');
    (void)writer_do(&wr, 'a'); /* an atomic add: absent -> 1 */
    assert_ok(kvq_watch_wait(w, 10000));
    kvq_watch_destroy(w);
    /* And an atomic add on an existing value. */
    w = arm(db, &k);
    (void)writer_do(&wr, 'a');
    assert_ok(kvq_watch_wait(w, 10000));
    kvq_watch_destroy(w);
    stop_writer(&wr);
    kvq_db_close(db);
}

static void test_wait_timeout(void **state)
{
    (void)state;
    const char *p = "watch_timeout";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k");
    kvq_watch *w = arm(db, &k);
    int64_t t0 = cf_now_ns();
    assert_err(kvq_watch_wait(w, 0), KVQ_ETIMED_OUT);
    int64_t t1 = cf_now_ns();
    assert_err(kvq_watch_wait(w, 150), KVQ_ETIMED_OUT);
    int64_t t2 = cf_now_ns();
    if (t1 - t0 > 1000 * 1000000LL)
        fail_msg("a 0 ms wait took %.1f ms", (double)(t1 - t0) / 1e6);
    if (t2 - t1 < 140 * 1000000 || t2 - t1 > 2000 * 1000000LL)
        fail_msg("a 150 ms wait took %.1f ms", (double)(t2 - t1) / 1e6);
    /* The watch still works after timing out. */
    cf_write_key(db, k.b, k.n, "changed", 7);
    assert_ok(kvq_watch_wait(w, 10000));
    kvq_watch_destroy(w);
    kvq_db_close(db);
}

struct canceller {
    kvq_watch *w;
    int64_t delay_ms;
};

static void *cancel_later(void *arg)
{
    struct canceller *c = arg;
    cf_sleep_ms(c->delay_ms);
    kvq_watch_cancel(c->w);
    return NULL;
}

static void test_cancel(void **state)
{
    (void)state;
    const char *p = "watch_cancel";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k");
    /* Cancelled from another thread while this one waits forever. */
    kvq_watch *w = arm(db, &k);
    struct canceller c = { w, 50 };
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cancel_later, &c), 0);
    int64_t t0 = cf_now_ns();
    assert_err(kvq_watch_wait(w, -1), KVQ_EWATCH_CANCELLED);
    int64_t took = cf_now_ns() - t0;
    pthread_join(th, NULL);
    assert_true(took < 5000LL * 1000000);
    /* It stays cancelled, even when the key then changes. */
    assert_err(kvq_watch_wait(w, 0), KVQ_EWATCH_CANCELLED);
    cf_write_key(db, k.b, k.n, "x", 1);
    assert_err(kvq_watch_wait(w, 100), KVQ_EWATCH_CANCELLED);
    kvq_watch_cancel(w); /* twice is fine */
    kvq_watch_destroy(w);
    /* Cancelled before anyone waits. */
    w = arm(db, &k);
    kvq_watch_cancel(w);
    assert_err(kvq_watch_wait(w, 1000), KVQ_EWATCH_CANCELLED);
    kvq_watch_destroy(w);
    /* Destroying an armed watch without waiting is fine. */
    w = arm(db, &k);
    kvq_watch_destroy(w);
    kvq_db_close(db);
}

static void test_transaction_reset_or_failed(void **state)
{
    (void)state;
    const char *p = "watch_reset";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k"), other = cf_k(p, "other");
    kvq_bytes v;
    int present;

    /* Reset before commit: 1025. */
    kvq_txn *t = new_txn(db);
    kvq_watch *w = NULL;
    assert_ok(kvq_txn_watch(&w, t, k.b, k.n));
    kvq_txn_reset(t);
    assert_err(kvq_watch_wait(w, 1000), KVQ_ETRANSACTION_CANCELLED);
    kvq_watch_destroy(w);

    /* Destroyed before commit: 1025. */
    assert_ok(kvq_txn_watch(&w, t, k.b, k.n));
    kvq_txn_destroy(t);
    assert_err(kvq_watch_wait(w, 1000), KVQ_ETRANSACTION_CANCELLED);
    kvq_watch_destroy(w);

    /* A commit that fails (a conflict): the watch fails with the commit's error. */
    t = new_txn(db);
    assert_ok(kvq_txn_get(&v, &present, t, k.b, k.n, 0));
    assert_ok(kvq_txn_watch(&w, t, k.b, k.n));
    assert_ok(kvq_txn_set(t, other.b, other.n, K("mine")));
    cf_write_key(db, k.b, k.n, "theirs", 6);
    assert_err(kvq_txn_commit(t), KVQ_ENOT_COMMITTED);
    assert_err(kvq_watch_wait(w, 1000), KVQ_ENOT_COMMITTED);
    kvq_watch_destroy(w);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* Commits one atomic operation on a key. */
static void atomic_commit(kvq_db *db, const cf_key *k, const char *arg, kvq_mutation op)
{
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_atomic_op(t, k->b, k->n, K(arg), op));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
}

/* A key that COMPARE_AND_CLEAR clears or APPEND_IF_FITS changes fires its watches; one they
 * leave as it was does not. */
static void test_append_and_compare_and_clear_fire(void **state)
{
    (void)state;
    const char *p = "watch_append_clear";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k");
    cf_write_key(db, k.b, k.n, "v", 1);
    kvq_watch *w = arm(db, &k);
    atomic_commit(db, &k, "other", KVQ_MUT_COMPARE_AND_CLEAR); /* no match: unchanged */
    assert_err(kvq_watch_wait(w, 100), KVQ_ETIMED_OUT);
    atomic_commit(db, &k, "v", KVQ_MUT_COMPARE_AND_CLEAR); /* cleared */
    assert_ok(kvq_watch_wait(w, 10000));
    kvq_watch_destroy(w);
    /* Absent: a COMPARE_AND_CLEAR leaves it absent, an append creates it. */
    w = arm(db, &k);
    atomic_commit(db, &k, "", KVQ_MUT_COMPARE_AND_CLEAR);
    assert_err(kvq_watch_wait(w, 100), KVQ_ETIMED_OUT);
    atomic_commit(db, &k, "ab", KVQ_MUT_APPEND_IF_FITS);
    assert_ok(kvq_watch_wait(w, 10000));
    kvq_watch_destroy(w);
    /* An append that does not fit leaves the value, and the watch, alone. */
    uint8_t *big = malloc(KVQ_MAX_VALUE_SIZE);
    assert_non_null(big);
    memset(big, 'b', KVQ_MAX_VALUE_SIZE);
    cf_write_key(db, k.b, k.n, big, KVQ_MAX_VALUE_SIZE);
    free(big);
    w = arm(db, &k);
    atomic_commit(db, &k, "c", KVQ_MUT_APPEND_IF_FITS);
    assert_err(kvq_watch_wait(w, 100), KVQ_ETIMED_OUT);
    atomic_commit(db, &k, "", KVQ_MUT_APPEND_IF_FITS);
    assert_err(kvq_watch_wait(w, 100), KVQ_ETIMED_OUT);
    kvq_watch_destroy(w);
    kvq_db_close(db);
}

static void test_change_between_read_and_commit(void **state)
{
    (void)state;
    const char *p = "watch_between";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k");
    cf_write_key(db, k.b, k.n, "v0", 2);
    kvq_txn *t = new_txn(db);
    kvq_bytes v;
    int present;
    assert_ok(kvq_txn_get(&v, &present, t, k.b, k.n, 0));
    kvq_watch *w = NULL;
    assert_ok(kvq_txn_watch(&w, t, k.b, k.n));
    /* Another transaction changes the key before this one commits. */
    cf_write_key(db, k.b, k.n, "v1", 2);
    assert_err(kvq_watch_wait(w, 0), KVQ_ETIMED_OUT); /* not armed yet */
    assert_ok(kvq_txn_commit(t));                     /* read-only: commits */
    int64_t t0 = cf_now_ns();
    assert_ok(kvq_watch_wait(w, 5000));
    int64_t took = cf_now_ns() - t0;
    if (took > 1000LL * 1000000)
        fail_msg("the watch fired only after %.1f ms", (double)took / 1e6);
    kvq_watch_destroy(w);
    kvq_txn_destroy(t);

    /* The same when the watching transaction never read the key: it watches the value at its
     * read version. */
    t = new_txn(db);
    int64_t rv;
    assert_ok(kvq_txn_get_read_version(&rv, t));
    assert_ok(kvq_txn_watch(&w, t, k.b, k.n));
    cf_write_key(db, k.b, k.n, "v2", 2);
    assert_ok(kvq_txn_commit(t));
    assert_ok(kvq_watch_wait(w, 5000));
    kvq_watch_destroy(w);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_watch_own_write(void **state)
{
    (void)state;
    const char *p = "watch_own";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k");
    cf_write_key(db, k.b, k.n, "old", 3);
    /* The watch compares with the transaction's own write, not the value it replaced. */
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_set(t, k.b, k.n, K("mine")));
    kvq_watch *w = NULL;
    assert_ok(kvq_txn_watch(&w, t, k.b, k.n));
    assert_ok(kvq_txn_commit(t));
    assert_err(kvq_watch_wait(w, 100), KVQ_ETIMED_OUT);
    cf_write_key(db, k.b, k.n, "mine", 4); /* same value: no change */
    assert_err(kvq_watch_wait(w, 100), KVQ_ETIMED_OUT);
    cf_write_key(db, k.b, k.n, "next", 4);
    assert_ok(kvq_watch_wait(w, 10000));
    kvq_watch_destroy(w);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

struct waiter {
    kvq_watch *w;
    int rc;
    int64_t woke;
};

static void *wait_thread(void *arg)
{
    struct waiter *wt = arg;
    wt->rc = kvq_watch_wait(wt->w, 10000);
    wt->woke = cf_now_ns();
    return NULL;
}

/* Several threads wait on watches of one key (each its own watch); one commit wakes them all. */
static void test_many_waiters_across_threads(void **state)
{
    (void)state;
    const char *p = "watch_threads";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k");
    enum { N = 4 };
    struct waiter wt[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        wt[i].w = arm(db, &k);
        wt[i].rc = -1;
        assert_int_equal(pthread_create(&th[i], NULL, wait_thread, &wt[i]), 0);
    }
    cf_sleep_ms(50);
    cf_write_key(db, k.b, k.n, "wake", 4);
    int64_t committed = cf_now_ns();
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        assert_err(wt[i].rc, 0);
        if (wt[i].woke - committed > 1000LL * 1000000)
            fail_msg("waiter %d woke %.1f ms after the commit", i,
                     (double)(wt[i].woke - committed) / 1e6);
        kvq_watch_destroy(wt[i].w);
    }
    kvq_db_close(db);
}

/* Two threads wait on the same watch: both wake. */
static void test_two_waiters_one_watch(void **state)
{
    (void)state;
    const char *p = "watch_shared";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k");
    kvq_watch *w = arm(db, &k);
    struct waiter wt[2] = { { w, -1, 0 }, { w, -1, 0 } };
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, wait_thread, &wt[i]), 0);
    cf_sleep_ms(50);
    cf_write_key(db, k.b, k.n, "wake", 4);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        assert_err(wt[i].rc, 0);
    }
    kvq_watch_destroy(w);
    kvq_db_close(db);
}

/* 200 watches on distinct keys; one clear_range changes half of them: exactly those fire. */
static void test_many_watches_one_commit(void **state)
{
    (void)state;
    const char *p = "watch_many";
    kvq_db *db = cf_open_clean(p);
    enum { N = 200 };
    kvq_txn *t = new_txn(db);
    for (int i = 0; i < N; i++) {
        char ks[32];
        snprintf(ks, sizeof(ks), "k%03d", i);
        cf_key k = cf_k(p, ks);
        assert_ok(kvq_txn_set(t, k.b, k.n, K("v")));
    }
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    kvq_watch **w = calloc(N, sizeof(*w));
    assert_non_null(w);
    for (int i = 0; i < N; i++) {
        char ks[32];
        snprintf(ks, sizeof(ks), "k%03d", i);
        cf_key k = cf_k(p, ks);
        assert_ok(kvq_txn_watch(&w[i], t, k.b, k.n));
    }
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
    cf_key b = cf_k(p, "k000"), e = cf_k(p, "k100");
    t = new_txn(db);
    assert_ok(kvq_txn_clear_range(t, b.b, b.n, e.b, e.n));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
    for (int i = 0; i < N / 2; i++)
        assert_ok(kvq_watch_wait(w[i], 10000));
    for (int i = N / 2; i < N; i++)
        assert_err(kvq_watch_wait(w[i], i == N / 2 ? 100 : 0), KVQ_ETIMED_OUT);
    for (int i = 0; i < N; i++)
        kvq_watch_destroy(w[i]);
    free(w);
    kvq_db_close(db);
}

int main(int argc, char **argv)
{
    cf_init(argc, argv, roles, sizeof(roles) / sizeof(roles[0]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fires_across_processes),
        cmocka_unit_test(test_same_value_does_not_fire),
        cmocka_unit_test(test_wait_timeout),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_transaction_reset_or_failed),
        cmocka_unit_test(test_change_between_read_and_commit),
        cmocka_unit_test(test_watch_own_write),
        cmocka_unit_test(test_many_waiters_across_threads),
        cmocka_unit_test(test_two_waiters_one_watch),
        cmocka_unit_test(test_many_watches_one_commit),
        cmocka_unit_test(test_append_and_compare_and_clear_fire),
    };
    return CF_RUN("watch", tests);
}
