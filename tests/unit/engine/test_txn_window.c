/* The test knob $KVQ_TEST_TXN_WINDOW_MS: the transaction window (transaction_too_old, 1007) of
 * the handles opened while it is set, instead of FoundationDB's 5 s. Slow builds (valgrind,
 * sanitizers) run the tests with a wider window, so that a test's transaction that takes seconds
 * there is not too old; tests of the window itself shrink it or set it back to 5 s.
 *
 * Shrunk to 1 s: a transaction that read 1.2 s ago gets 1007 on its next read and at commit, and
 * works again after kvq_txn_on_error. Widened to 10 s: a transaction that read 5.5 s ago (too
 * old with the default window) still reads and commits, and one whose read was overwritten 7 s
 * ago still gets its conflict (1020), not 1007, after enough commits to prune the conflict log:
 * the log keeps the whole window. Values outside 100..600,000 ms are refused with KVQ_EINVAL.
 * Every wait only overruns, so a busy machine cannot make the assertions fail: a span that must
 * be past the window is timed from after the read took its version, and a result that must come
 * inside the window is checked only when the clock says it did (else 1007 is the right answer). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq_test.h"

static kt_tmp tmp;
static const char *const dir = tmp.db; /* the database, in a fresh directory */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_until(int64_t t_ms)
{
    while (mono_ms() < t_ms)
        usleep(20000);
}

static kvq_db *open_with_window(const char *ms, unsigned int flags)
{
    assert_int_equal(setenv("KVQ_TEST_TXN_WINDOW_MS", ms, 1), 0);
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.flags |= flags;
    kvq_db *db = NULL;
    int rc = kvq_db_open(&db, dir, &o);
    if (rc != 0)
        fail_msg("kvq_db_open: %s (%s)", kvq_errname(rc), kvq_last_error());
    return db;
}

static void put(kvq_db *db, const char *k, const char *v)
{
    assert_int_equal(kt_put(db, k, v), 0);
}

static int get(kvq_txn *t, const char *k)
{
    kvq_bytes v;
    int present;
    return kvq_txn_get(&v, &present, t, (const uint8_t *)k, strlen(k), 0);
}

static int setup(void **state)
{
    (void)state;
    return kt_tmp_make(&tmp, "txn-window");
}

static int teardown(void **state)
{
    (void)state;
    return kt_tmp_remove(&tmp);
}

static void test_shrunk_window(void **state)
{
    (void)state;
    kvq_db *db = open_with_window("1000", 0);
    put(db, "k", "v");
    kvq_txn *a, *c;
    assert_int_equal(kvq_txn_create(&a, db), 0);
    assert_int_equal(kvq_txn_create(&c, db), 0);
    assert_int_equal(get(a, "k"), 0);
    assert_int_equal(get(c, "k"), 0);
    /* Taken after both reads took their read version (which a busy machine may delay): 1.2 s
     * from here is at least 1.2 s from each. */
    int64_t t0 = mono_ms();
    assert_int_equal(kvq_txn_set(c, (const uint8_t *)"x", 1, (const uint8_t *)"1", 1), 0);
    sleep_until(t0 + 1200);
    assert_int_equal(get(a, "k"), KVQ_ETRANSACTION_TOO_OLD);
    assert_int_equal(kvq_txn_commit(c), KVQ_ETRANSACTION_TOO_OLD);
    /* Retried, it reads again: a fresh read version is young (a retry that itself took longer
     * than the window on a very busy machine would be too old again: a few are allowed). */
    int rc = KVQ_ETRANSACTION_TOO_OLD;
    for (int i = 0; i < 5 && rc == KVQ_ETRANSACTION_TOO_OLD; i++) {
        assert_int_equal(kvq_txn_on_error(a, rc), 0);
        rc = get(a, "k");
        if (rc == 0)
            rc = kvq_txn_commit(a);
    }
    assert_int_equal(rc, 0);
    kvq_txn_destroy(a);
    kvq_txn_destroy(c);
    kvq_db_close(db);
}

static void test_widened_window(void **state)
{
    (void)state;
    kvq_db *db = open_with_window("10000", KVQ_DB_RELAXED);
    put(db, "k", "v");
    put(db, "k2", "v");
    kvq_txn *a, *b;
    assert_int_equal(kvq_txn_create(&a, db), 0);
    assert_int_equal(kvq_txn_create(&b, db), 0);
    int64_t t0 = mono_ms();
    assert_int_equal(get(a, "k"), 0);
    assert_int_equal(get(b, "k2"), 0);
    put(db, "k2", "changed"); /* b's read is now stale: b must fail with 1020 */
    sleep_until(t0 + 5500);
    int64_t age = mono_ms() - t0;
    int rc = get(a, "k");
    if (rc == 0)
        rc = kvq_txn_set(a, (const uint8_t *)"a", 1, (const uint8_t *)"1", 1);
    if (rc == 0)
        rc = kvq_txn_commit(a);
    /* t0 was taken before a's read version: if the read and the commit ended inside 10 s of
     * it, they were inside the window (only a machine that held the test off the CPU for 4.5 s
     * makes them later, and then 1007 is right). */
    if (mono_ms() - t0 < 10000)
        assert_int_equal(rc, 0);
    else
        assert_int_equal(rc, KVQ_ETRANSACTION_TOO_OLD);
    /* Past the 6 s the log used to keep: 600 commits (the log is pruned every 512 batches). */
    sleep_until(t0 + 7000);
    for (int i = 0; i < 600; i++)
        put(db, "filler", "x");
    assert_int_equal(kvq_txn_set(b, (const uint8_t *)"b", 1, (const uint8_t *)"1", 1), 0);
    int64_t age_b = mono_ms() - t0;
    rc = kvq_txn_commit(b);
    printf("window: widened_ms=10000 read_after_ms=%lld conflict_after_ms=%lld commit=%s\n",
           (long long)age, (long long)age_b, kvq_errname(rc));
    int64_t age_b_end = mono_ms() - t0;
    if (age_b_end < 10000)
        assert_int_equal(rc, KVQ_ENOT_COMMITTED);
    else if (age_b >= 10000) /* the 600 commits took longer than the window: 1007 is right */
        assert_int_equal(rc, KVQ_ETRANSACTION_TOO_OLD);
    else /* the commit itself crossed the window's end: either is right */
        assert_true(rc == KVQ_ENOT_COMMITTED || rc == KVQ_ETRANSACTION_TOO_OLD);
    kvq_txn_destroy(a);
    kvq_txn_destroy(b);
    kvq_db_close(db);
}

static void test_bad_values(void **state)
{
    (void)state;
    static const char *bad[] = { "abc", "99", "600001", "5000x", "-5000", " 5000" };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(setenv("KVQ_TEST_TXN_WINDOW_MS", bad[i], 1), 0);
        kvq_db *db = NULL;
        assert_int_equal(kvq_db_open(&db, dir, NULL), KVQ_EINVAL);
        assert_null(db);
        assert_non_null(strstr(kvq_last_error(), "KVQ_TEST_TXN_WINDOW_MS"));
    }
    /* Empty is unset: the default window. */
    assert_int_equal(setenv("KVQ_TEST_TXN_WINDOW_MS", "", 1), 0);
    kvq_db *db = NULL;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    kvq_db_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_shrunk_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_widened_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_values, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
