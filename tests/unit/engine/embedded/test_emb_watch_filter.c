/* The embedded engine's watch filter (src/engine/embedded/watch.c): a commit wakes every
 * process's watcher, but the watcher reads only the watched keys whose bucket in kvq.shm the
 * commit moved. Many idle watches cost nothing per unrelated commit; a watched key changed by
 * a set, an atomic op, a clear_range or another handle (another process's part) still fires. */
#include "kvq_test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/embedded/emb.h"
#include "engine/engine.h"
#include "kvq/kvq.h"

#define IDLE    300
#define COMMITS 400

static kt_tmp tmp;
static const char *const dir = tmp.db; /* the database, in a fresh directory */

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void set_key(kvq_db *db, const char *k, const char *v)
{
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_set(t, K(k), K(v)), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
}

static void clear_prefix(kvq_db *db, const char *a, const char *b)
{
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_clear_range(t, K(a), K(b)), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
}

static uint64_t reads_of(kvq_db *db)
{
    emb_db *e = db->engine;
    pthread_mutex_lock(&e->watch_mu);
    uint64_t r = e->watch_reads;
    pthread_mutex_unlock(&e->watch_mu);
    return r;
}

static uint64_t scans_of(kvq_db *db)
{
    emb_db *e = db->engine;
    pthread_mutex_lock(&e->watch_mu);
    uint64_t r = e->watch_scans;
    pthread_mutex_unlock(&e->watch_mu);
    return r;
}

static void test_idle_watches_are_not_read(void **state)
{
    (void)state;
    assert_int_equal(kt_tmp_make(&tmp, "watch-filter"), 0);
    kvq_db *db, *other;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    assert_int_equal(kvq_db_open(&other, dir, NULL), 0);
    set_key(db, "present/1", "x");
    kvq_watch *idle[IDLE], *hot, *present, *remote;
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    char k[32];
    for (int i = 0; i < IDLE; i++) {
        snprintf(k, sizeof(k), "idle/%d", i);
        assert_int_equal(kvq_txn_watch(&idle[i], t, K(k)), 0);
    }
    assert_int_equal(kvq_txn_watch(&hot, t, K("hot")), 0);
    assert_int_equal(kvq_txn_watch(&present, t, K("present/1")), 0);
    assert_int_equal(kvq_txn_watch(&remote, t, K("remote")), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
    /* The watcher's first scans of the new watches are done by then (wider in slow builds). */
    sleep_ms(300 * kvq_test_time_factor());
    uint64_t r0 = reads_of(db), s0 = scans_of(db);

    /* Unrelated commits: sets, atomic adds and range clears of keys nobody watches. */
    static const uint8_t one[8] = { 1 };
    for (int i = 0; i < COMMITS; i++) {
        snprintf(k, sizeof(k), "other/%d", i);
        assert_int_equal(kvq_txn_create(&t, db), 0);
        assert_int_equal(kvq_txn_set(t, K(k), K("v")), 0);
        assert_int_equal(kvq_txn_atomic_op(t, K("counter"), one, 8, KVQ_MUT_ADD), 0);
        assert_int_equal(kvq_txn_commit(t), 0);
        kvq_txn_destroy(t);
        if (i % 10 == 9)
            clear_prefix(db, "other/", "other0");
    }
    sleep_ms(300 * kvq_test_time_factor());
    uint64_t reads = reads_of(db) - r0, scans = scans_of(db) - s0;
    printf("# %d idle watches, %d unrelated commits: %llu scans read %llu watched keys "
           "(%.1f a scan; %d without the filter)\n",
           IDLE, COMMITS + COMMITS / 10, (unsigned long long)scans, (unsigned long long)reads,
           scans ? (double)reads / (double)scans : 0.0, IDLE + 3);
    assert_true(scans > 0);
    assert_true(reads < scans * 20);
    for (int i = 0; i < IDLE; i++)
        assert_int_equal(kvq_watch_wait(idle[i], 0), KVQ_ETIMED_OUT);
    assert_int_equal(kvq_watch_wait(hot, 0), KVQ_ETIMED_OUT);

    /* Changes still fire: a set, a clear_range that deletes the key, another handle's set.
     * (Each wait allows 20 s: a watch that missed its change would wait all of it, while a busy
     * machine may take seconds to run the watcher thread.) */
    set_key(db, "hot", "1");
    assert_int_equal(kvq_watch_wait(hot, 20000), 0);
    clear_prefix(db, "present/", "present0");
    assert_int_equal(kvq_watch_wait(present, 20000), 0);
    set_key(other, "remote", "1");
    assert_int_equal(kvq_watch_wait(remote, 20000), 0);
    /* An idle key changed by an atomic op fires too; the rest stay armed. */
    assert_int_equal(kvq_txn_create(&t, other), 0);
    assert_int_equal(kvq_txn_atomic_op(t, K("idle/7"), one, 8, KVQ_MUT_ADD), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
    assert_int_equal(kvq_watch_wait(idle[7], 20000), 0);
    assert_int_equal(kvq_watch_wait(idle[8], 0), KVQ_ETIMED_OUT);

    for (int i = 0; i < IDLE; i++)
        kvq_watch_destroy(idle[i]);
    kvq_watch_destroy(hot);
    kvq_watch_destroy(present);
    kvq_watch_destroy(remote);
    kvq_db_close(other);
    kvq_db_close(db);
    assert_int_equal(kt_tmp_remove(&tmp), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_watches_are_not_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
