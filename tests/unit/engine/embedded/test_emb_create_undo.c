/* A create that fails leaves nothing behind (issue 32, item 5): kvq_db_open of a new database,
 * on either storage, that fails halfway (a file it cannot write, a disk too small for the log
 * store's segments) removes what it made: the directory when it made it, or the files it put
 * into an empty directory made for it (which stays, empty). Otherwise every later open would
 * find a half-made directory ("no kvq database in ..."), and a create would be refused there.
 *
 * The failure halfway comes from RLIMIT_FSIZE, in a child process (a write past the limit fails
 * with EFBIG), and on an 8 MiB tmpfs for the log store, which on 16 MiB makes a database with
 * smaller segments (skipped, saying why, when mounting is refused). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "kvq_test.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvq/kvq.h"

static char tmp[512];

static int setup(void **state)
{
    (void)state;
    return kt_mkdtemp(tmp, sizeof(tmp), "create-undo");
}

static int teardown(void **state)
{
    (void)state;
    return kt_rm_rf(tmp);
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* In a child whose files may not grow past limit bytes: kvq_db_open(url). Returns the child's
 * exit status: 0 when the open failed, 1 when it succeeded, 2 on a setup failure. */
static int open_limited(const char *url, rlim_t limit)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = { limit, limit };
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            _exit(2);
        kvq_db *db = NULL;
        int rc = kvq_db_open(&db, url, NULL);
        if (rc == 0) {
            kvq_db_close(db);
            _exit(1);
        }
        fprintf(stderr, "# the open failed as it should: %s (%s)\n", kvq_last_error(),
                kvq_errname(rc));
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* A new directory: the failed create removes it; a create without the limit then works. */
static void undo_new_dir(const char *prefix, rlim_t limit)
{
    char dir[600], url[620];
    kt_path(dir, sizeof(dir), tmp, "new");
    snprintf(url, sizeof(url), "%s%s", prefix, dir);
    assert_int_equal(open_limited(url, limit), 0);
    assert_false(exists(dir));
    kvq_db *db = NULL;
    assert_int_equal(kvq_db_open(&db, url, NULL), 0);
    kvq_db_close(db);
    assert_int_equal(kt_rm_rf(dir), 0);
}

static void test_sqlite_create_fails_halfway(void **state)
{
    (void)state;
    undo_new_dir("sqlite:", 8192);
}

static void test_log_create_fails_halfway(void **state)
{
    (void)state;
    /* The first segment (64 MiB, preallocated) cannot be made past the limit. */
    undo_new_dir("log:", 1 << 20);
}

/* An empty directory made for the database: after a failed create in it, it stays, empty. */
static void empty_after_failed_create(const char *prefix, rlim_t limit)
{
    char dir[600], url[620];
    kt_path(dir, sizeof(dir), tmp, "made");
    snprintf(url, sizeof(url), "%s%s", prefix, dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(open_limited(url, limit), 0);
    assert_true(exists(dir));
    /* rmdir succeeds only on an empty directory. */
    assert_int_equal(rmdir(dir), 0);
}

static void test_empty_dir_stays_empty(void **state)
{
    (void)state;
    empty_after_failed_create("sqlite:", 8192);
    empty_after_failed_create("log:", 1 << 20);
}

/* A complete database is never removed by a failed open of it. */
static void test_complete_database_stays(void **state)
{
    (void)state;
    char dir[600];
    kt_path(dir, sizeof(dir), tmp, "whole");
    kvq_db *db = NULL;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    kvq_db_close(db);
    char marker[700];
    kt_path(marker, sizeof(marker), dir, "kvq.marker");
    assert_true(exists(marker));
    /* An open that fails (here: the marker's format unknown) leaves every file. */
    FILE *f = fopen(marker, "w");
    assert_non_null(f);
    fputs("kvq database\nformat 99\n", f);
    fclose(f);
    assert_int_equal(kvq_db_open(&db, dir, NULL), KVQ_EDAMAGED);
    assert_true(exists(marker));
    char data[700];
    kt_path(data, sizeof(data), dir, "logstore/data.db");
    assert_true(exists(data));
    assert_int_equal(kt_rm_rf(dir), 0);
}

/* The size of the first segment of the log store in dir (0: none). */
static long long first_segment_size(const char *dir)
{
    char p[700];
    kt_path(p, sizeof(p), dir, "logstore/log-0000000000000001.seg");
    struct stat st;
    return stat(p, &st) == 0 ? (long long)st.st_size : 0;
}

/* The log store on small file systems: on 16 MiB a new database gets the smallest segments
 * (256 KiB) and takes writes; on 8 MiB not even they fit, and the create fails at once with
 * KVQ_ENOSPC, saying what it needs, leaving nothing behind. */
static void test_log_store_small_disk(void **state)
{
    (void)state;
    char mnt[256];
    int m = kt_tmpfs_mount(mnt, sizeof(mnt), "create-undo", "16m");
    assert_true(m >= 0);
    if (m == 1) {
        skip();
        return;
    }
    char dir[600];
    kt_path(dir, sizeof(dir), mnt, "db");
    kvq_db *db = NULL;
    int rc = kvq_db_open(&db, dir, NULL);
    long long seg = first_segment_size(dir);
    int wrc = -1;
    if (rc == 0) {
        kvq_txn *t = NULL;
        wrc = kvq_txn_create(&t, db);
        if (wrc == 0) {
            wrc = kvq_txn_set(t, (const uint8_t *)"k", 1, (const uint8_t *)"v", 1);
            if (wrc == 0)
                wrc = kvq_txn_commit(t);
            kvq_txn_destroy(t);
        }
        kvq_db_close(db);
    }
    kt_tmpfs_unmount(mnt);
    assert_int_equal(rc, 0);
    assert_int_equal(wrc, 0);
    assert_int_equal(seg, 256 << 10);
    m = kt_tmpfs_mount(mnt, sizeof(mnt), "create-undo", "8m");
    assert_true(m == 0);
    kt_path(dir, sizeof(dir), mnt, "db");
    char url[620];
    snprintf(url, sizeof(url), "log:%s", dir);
    rc = kvq_db_open(&db, url, NULL);
    if (rc == 0)
        kvq_db_close(db);
    int needs = strstr(kvq_last_error(), "a new database needs") != NULL;
    int left = exists(dir), empty = kt_empty_dir(mnt) == 0;
    kt_tmpfs_unmount(mnt);
    assert_int_equal(rc, KVQ_ENOSPC);
    assert_true(needs);
    assert_false(left);
    assert_true(empty);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sqlite_create_fails_halfway),
        cmocka_unit_test(test_log_create_fails_halfway),
        cmocka_unit_test(test_empty_dir_stays_empty),
        cmocka_unit_test(test_complete_database_stays),
        cmocka_unit_test(test_log_store_small_disk),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
