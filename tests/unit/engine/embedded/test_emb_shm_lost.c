/* A lost kvq.shm (deleted, or rebuilt from zeros) while the database's versions run ahead of the
 * wall clock: the next read-write open bases the version clock above the stored version, so read
 * versions go on advancing with time instead of standing still at the stored version until the
 * wall clock catches up (issue 26, item 5). The versions are put ahead of the clock by raising
 * rv_floor in kvq.shm, which every commit's version must reach. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "engine/embedded/emb.h"
#include "kvq/kvq.h"
#include "kvq_test.h"

/* How far ahead of the wall clock the versions are put: 100 seconds of versions. */
#define AHEAD_US 100000000LL

static kt_tmp tmp;
static const char *const dir = tmp.db; /* the database, in a fresh directory */

static int setup(void **state)
{
    (void)state;
    return kt_tmp_make(&tmp, "emb-shm-lost");
}

static int teardown(void **state)
{
    (void)state;
    return kt_tmp_remove(&tmp);
}

#define K(s) (const uint8_t *)(s), strlen(s)

static int64_t read_version(kvq_db *db)
{
    kvq_txn *t;
    int64_t rv = 0;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_get_read_version(&rv, t), 0);
    kvq_txn_destroy(t);
    return rv;
}

static int64_t commit_set(kvq_db *db, const char *k, const char *v)
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

/* Raises rv_floor in the database's kvq.shm to v. */
static void raise_floor(int64_t v)
{
    char p[300];
    snprintf(p, sizeof(p), "%s/kvq.shm", dir);
    int fd = open(p, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(m != MAP_FAILED);
    emb_shm *shm = m;
    __atomic_store_n(&shm->rv_floor, v, __ATOMIC_SEQ_CST);
    munmap(m, 4096);
}

/* Commits a version 100 s ahead of the wall clock, closes the database, loses kvq.shm (removed
 * when `rebuild` is 0, else overwritten with junk that the next open rebuilds from zeros), and
 * reopens it. */
static kvq_db *ahead_then_lose_shm(int rebuild, int64_t *stored)
{
    kvq_db *db;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    commit_set(db, "a", "1");
    raise_floor(kt_wall_us() + AHEAD_US);
    *stored = commit_set(db, "b", "2");
    assert_true(*stored > kt_wall_us() + AHEAD_US / 2);
    kvq_db_close(db);

    char p[300];
    snprintf(p, sizeof(p), "%s/kvq.shm", dir);
    if (!rebuild) {
        assert_int_equal(unlink(p), 0);
    } else {
        int fd = open(p, O_WRONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        static char junk[4096];
        memset(junk, 0x5a, sizeof(junk));
        assert_int_equal(pwrite(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
        close(fd);
    }
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    return db;
}

static void check_advancing(kvq_db *db, int64_t stored)
{
    int64_t r1 = read_version(db);
    assert_true(r1 >= stored);
    kt_sleep_ms(30);
    int64_t r2 = read_version(db);
    /* 30 ms of CLOCK_MONOTONIC is 30,000 versions: without the fix, both read versions are
     * the stored version. */
    printf("shm_lost: stored=%lld r1=%lld r2=%lld advanced=%lld\n", (long long)stored,
           (long long)r1, (long long)r2, (long long)(r2 - r1));
    assert_true(r2 - r1 >= 20000);
    /* And commits go on above the stored version. */
    assert_true(commit_set(db, "c", "3") > stored);
}

static void test_removed_shm(void **state)
{
    (void)state;
    int64_t stored = 0;
    kvq_db *db = ahead_then_lose_shm(0, &stored);
    check_advancing(db, stored);
    kvq_db_close(db);
}

static void test_rebuilt_shm(void **state)
{
    (void)state;
    int64_t stored = 0;
    kvq_db *db = ahead_then_lose_shm(1, &stored);
    check_advancing(db, stored);
    kvq_db_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_removed_shm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rebuilt_shm, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
