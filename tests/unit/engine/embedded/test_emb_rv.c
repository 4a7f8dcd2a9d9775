/* The embedded engine's read versions that advance with time (src/engine/embedded/read_version.c),
 * driven through the counters in kvq.shm, which this test maps itself to play the part of another
 * process: a committer in the middle of a commit (the counter odd, the commit lock held, with or
 * without its version published) and then killed (the lock released), and a clock that stepped
 * backwards. */
#include "kvq_test.h"
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "engine/embedded/emb.h"
#include "kvq/kvq.h"
#include "util/util.h"

static const char *dir; /* the database (kt_group_db_path) */
static kvq_db *db;
static emb_shm *shm;

static int setup(void **state)
{
    kt_group_db(&db, "emb-rv");
    if (kt_group_db_setup(state) != 0)
        return -1;
    dir = kt_group_db_path();
    char p[300];
    snprintf(p, sizeof(p), "%s/kvq.shm", dir);
    int fd = open(p, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return -1;
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return -1;
    shm = m;
    return 0;
}

static int teardown(void **state)
{
    munmap(shm, 4096);
    return kt_group_db_teardown(state);
}

static int64_t read_version(void)
{
    kvq_txn *t;
    int64_t rv = 0;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_get_read_version(&rv, t), 0);
    kvq_txn_destroy(t);
    return rv;
}

static int64_t commit_set(const char *k, const char *v)
{
    kvq_txn *t;
    int64_t cv = 0;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_set(t, K(k), K(v)), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    assert_int_equal(kvq_txn_get_committed_version(&cv, t), 0);
    kvq_txn_destroy(t);
    return cv;
}

static uint64_t load_seq(void)
{
    return __atomic_load_n(&shm->commit_seq, __ATOMIC_SEQ_CST);
}

static void test_counter_even_after_commits(void **state)
{
    (void)state;
    uint64_t s0 = load_seq();
    assert_true((s0 & 1) == 0);
    int64_t cv = commit_set("a", "1");
    uint64_t s1 = load_seq();
    assert_true((s1 & 1) == 0);
    assert_true(s1 > s0);
    assert_true(__atomic_load_n(&shm->rv_floor, __ATOMIC_SEQ_CST) >= cv);
    /* With nothing in flight, read versions run ahead of the last commit with the clock. */
    kt_sleep_ms(2);
    int64_t rv = read_version();
    assert_true(rv > cv);
}

/* Takes kvq's commit lock through a descriptor of its own, as a committer of another process
 * holds it; returns the descriptor. */
static int hold_commit_lock(void)
{
    char p[300];
    snprintf(p, sizeof(p), "%s/kvq.lock", dir);
    int fd = open(p, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX), 0);
    return fd;
}

/* A committer in flight in another process (the counter odd, the commit lock held): read
 * versions stand still, but stay correct. Once it is killed (the lock released, the counter
 * left odd), the next reader repairs the counter and read versions advance with time again,
 * with no commit; the next commit still takes a version above the dead one's. */
static void test_killed_committer(void **state)
{
    (void)state;
    int64_t cv0 = commit_set("k", "0");
    uint64_t even = load_seq();
    assert_true((even & 1) == 0);

    /* In flight before publishing its version: the stored version, standing still. */
    int lock = hold_commit_lock();
    __atomic_store_n(&shm->commit_seq, even + 1, __ATOMIC_SEQ_CST);
    assert_int_equal(read_version(), cv0);
    kt_sleep_ms(2);
    assert_int_equal(read_version(), cv0);

    /* After publishing it (and raising the floor to it, as a committer does): read versions
     * stop just below it. */
    int64_t v = kt_wall_us() + 5000;
    __atomic_store_n(&shm->rv_floor, v, __ATOMIC_SEQ_CST);
    __atomic_store_n(&shm->inflight_version, v, __ATOMIC_SEQ_CST);
    __atomic_store_n(&shm->inflight_seq, even + 1, __ATOMIC_SEQ_CST);
    assert_int_equal(read_version(), v - 1);
    assert_int_equal(load_seq(), even + 1);

    /* A reader at v - 1 that read k. */
    kvq_txn *r;
    kvq_bytes val;
    int present;
    int64_t rv = 0;
    assert_int_equal(kvq_txn_create(&r, db), 0);
    assert_int_equal(kvq_txn_get(&val, &present, r, K("k"), 0), 0);
    assert_int_equal(kvq_txn_get_read_version(&rv, r), 0);
    assert_int_equal(rv, v - 1);

    /* The committer dies: its lock goes, the counter stays odd. The next read repairs it, and
     * read versions advance with time without any commit. */
    close(lock);
    int64_t rv1 = read_version();
    uint64_t s = load_seq();
    assert_true((s & 1) == 0);
    assert_true(rv1 >= v - 1);
    /* Advancing with time is what is checked, not how soon: a read whose snapshot raced
     * something (it then reports the stored version) or a slow build may need a few looks. */
    int64_t rv2 = rv1;
    int64_t give_up = kt_wall_us() + 2000000LL * kvq_test_time_factor();
    do {
        kt_sleep_ms(20);
        rv2 = read_version();
    } while ((rv2 <= rv1 || rv2 < v) && kt_wall_us() < give_up);
    assert_true(rv2 > rv1);
    assert_true(rv2 >= v);

    /* The next commit takes a version >= v, and the reader at v - 1 conflicts with it. */
    int64_t cv1 = commit_set("k", "1");
    assert_true(cv1 >= v);
    assert_true(load_seq() > s);
    assert_true((load_seq() & 1) == 0);
    assert_int_equal(kvq_txn_set(r, K("x"), K("1")), 0);
    assert_int_equal(kvq_txn_commit(r), KVQ_ENOT_COMMITTED);
    kvq_txn_destroy(r);
    kt_sleep_ms(10);
    assert_true(read_version() > cv1);
}

/* The clock steps back by a minute (played by a floor a minute ahead): versions never go back. */
static void test_clock_steps_back(void **state)
{
    (void)state;
    int64_t ahead = kt_wall_us() + 60 * 1000000LL;
    __atomic_store_n(&shm->rv_floor, ahead, __ATOMIC_SEQ_CST);
    int64_t rv = read_version();
    assert_true(rv >= ahead - 1);
    int64_t cv = commit_set("c", "1");
    assert_true(cv >= ahead);
    int64_t cv2 = commit_set("c", "2");
    assert_true(cv2 > cv);
    assert_true(read_version() >= cv2);
}

/* The wall clock steps an hour forward, a commit happens, and the step is corrected: read
 * versions keep advancing with time (about a million a second), rather than standing still
 * until the wall clock catches up with the hour. */
static void test_wall_clock_step_forward(void **state)
{
    (void)state;
    int64_t before = read_version();
    __atomic_store_n(&kvq__test_wall_step_us, 3600 * 1000000LL, __ATOMIC_SEQ_CST);
    int64_t cv = commit_set("w", "1");
    int64_t rv_step = read_version();
    __atomic_store_n(&kvq__test_wall_step_us, 0, __ATOMIC_SEQ_CST);
    /* During the step, versions did not jump by the hour either. */
    assert_true(cv < before + 60 * 1000000LL);
    assert_true(rv_step >= cv);
    int64_t a = read_version();
    kt_sleep_ms(300);
    int64_t b = read_version();
    printf("# read version advanced %" PRId64 " in 300 ms after a corrected step\n", b - a);
    assert_true(b - a >= 200000);
    int64_t cv2 = commit_set("w", "2");
    assert_true(cv2 > cv && cv2 >= b);
}

/* A database opened again in this boot keeps the base the first open fixed; a base from
 * another boot is replaced, and versions still never go back. */
static void test_clock_base_per_boot(void **state)
{
    (void)state;
    uint64_t g = __atomic_load_n(&shm->vbase_gen, __ATOMIC_SEQ_CST);
    assert_true(g != 0 && (g & 1) == 0);
    int64_t base = shm->vbase_version;
    kvq_db *db2;
    assert_int_equal(kvq_db_open(&db2, dir, NULL), 0);
    assert_int_equal(shm->vbase_version, base);
    kvq_db_close(db2);
    int64_t cv = commit_set("b", "1");
    /* Another boot's base, far in the past: the next open fixes a new one. */
    __atomic_store_n(&shm->vbase_boot[0], shm->vbase_boot[0] ^ 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&shm->vbase_version, 1000, __ATOMIC_SEQ_CST);
    assert_int_equal(kvq_db_open(&db2, dir, NULL), 0);
    assert_true(shm->vbase_version > cv);
    kvq_txn *t;
    int64_t cv2 = 0;
    assert_int_equal(kvq_txn_create(&t, db2), 0);
    assert_int_equal(kvq_txn_set(t, K("b"), K("2")), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    assert_int_equal(kvq_txn_get_committed_version(&cv2, t), 0);
    kvq_txn_destroy(t);
    kvq_db_close(db2);
    assert_true(cv2 > cv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_even_after_commits),
        cmocka_unit_test(test_killed_committer),
        cmocka_unit_test(test_wall_clock_step_forward),
        cmocka_unit_test(test_clock_base_per_boot),
        cmocka_unit_test(test_clock_steps_back),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
