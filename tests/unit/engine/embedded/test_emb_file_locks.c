/* A handle's SQLite locks survive another handle of the same process: the table's file
 * (data.db) is never opened and closed with a descriptor of kvq's own while this process may
 * hold SQLite connections on it. A close() of any descriptor on a file releases every POSIX
 * lock the process holds on it, SQLite's too; another process closing its last connection could
 * then take the file's exclusive lock, checkpoint under a live reader and delete the WAL and
 * its index, and this process's readers would read a WAL file shorter than their index says
 * (SQLITE_IOERR_SHORT_READ: the error once seen in logstore_applier.test_serializability).
 *
 * Process P holds handle A with a snapshot open, opens and closes a second handle B, then a
 * child process opens the database, writes, and closes it: the WAL and its index must be the
 * same files before and after, and A, and a new transaction of P, must read right. Both
 * storages: the SQLite storage's data.db and the log store's table, logstore/data.db. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq_test.h"

#define K(s)  (const uint8_t *)(s), strlen(s)
#define NKEYS 200

static char base[64];

static int setup(void **state)
{
    (void)state;
    return kt_mkdtemp(base, sizeof(base), "emb-file-locks");
}

static int teardown(void **state)
{
    (void)state;
    return kt_rm_rf(base) == 0 ? 0 : -1;
}

static void put_keys(kvq_db *db, const char *prefix, const char *value)
{
    kvq_txn *t = NULL;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    for (int i = 0; i < NKEYS; i++) {
        char k[32];
        snprintf(k, sizeof(k), "%s%03d", prefix, i);
        assert_int_equal(kvq_txn_set(t, K(k), K(value)), 0);
    }
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
}

/* Whether every key of prefix holds value in t. */
static void check_keys(kvq_txn *t, const char *prefix, const char *value)
{
    for (int i = 0; i < NKEYS; i++) {
        char k[32];
        snprintf(k, sizeof(k), "%s%03d", prefix, i);
        kvq_bytes v;
        int present = 0;
        int rc = kvq_txn_get(&v, &present, t, K(k), KVQ_SNAPSHOT);
        if (rc != 0)
            fail_msg("reading %s: %s", k, kvq_last_error());
        assert_true(present);
        assert_int_equal(v.len, strlen(value));
        assert_memory_equal(v.data, value, v.len);
    }
}

/* The child: opens url, checks the keys of P, writes its own, closes. */
static int child_main(const char *url)
{
    kvq_db *db = NULL;
    if (kvq_db_open(&db, url, NULL) != 0) {
        fprintf(stderr, "child: open: %s\n", kvq_last_error());
        return 2;
    }
    kvq_txn *t = NULL;
    int rc = kvq_txn_create(&t, db);
    for (int i = 0; rc == 0 && i < NKEYS; i++) {
        char k[32];
        snprintf(k, sizeof(k), "p%03d", i);
        kvq_bytes v;
        int present = 0;
        rc = kvq_txn_get(&v, &present, t, K(k), 0);
        if (rc == 0 && (!present || v.len != 5 || memcmp(v.data, "p-one", 5) != 0))
            rc = 3;
    }
    for (int i = 0; rc == 0 && i < NKEYS; i++) {
        char k[32];
        snprintf(k, sizeof(k), "c%03d", i);
        rc = kvq_txn_set(t, K(k), K("c-one"));
    }
    if (rc == 0)
        rc = kvq_txn_commit(t);
    if (rc != 0)
        fprintf(stderr, "child: %d %s\n", rc, kvq_last_error());
    kvq_txn_destroy(t);
    kvq_db_close(db);
    return rc == 0 ? 0 : 4;
}

static void run_child(const char *url)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", "test_emb_file_locks", "--child", url, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

static void file_id(const char *path, struct stat *out, const char *when)
{
    if (stat(path, out) != 0)
        fail_msg("%s is gone %s: %s", path, when, strerror(errno));
}

static void locks_survive(const char *name, int log)
{
    char dir[128], url[160], wal[192], shm[192];
    snprintf(dir, sizeof(dir), "%s/%s", base, name);
    snprintf(url, sizeof(url), "%s%s", log ? "log:" : "sqlite:", dir);
    snprintf(wal, sizeof(wal), "%s/%sdata.db-wal", dir, log ? "logstore/" : "");
    snprintf(shm, sizeof(shm), "%s/%sdata.db-shm", dir, log ? "logstore/" : "");

    kvq_db *a = NULL;
    assert_int_equal(kvq_db_open(&a, url, NULL), 0);
    put_keys(a, "p", "p-one");
    kvq_txn *ta = NULL;
    assert_int_equal(kvq_txn_create(&ta, a), 0);
    check_keys(ta, "p", "p-one"); /* A's snapshot is open from here on */

    struct stat wal0, shm0, wal1, shm1;
    file_id(wal, &wal0, "before");
    file_id(shm, &shm0, "before");

    /* A second handle of this process, opened and closed. */
    kvq_db *b = NULL;
    assert_int_equal(kvq_db_open(&b, url, NULL), 0);
    kvq_db_close(b);

    /* Another process opens, writes and closes: its close of its last connection must not
     * find the file unlocked by this process. */
    run_child(url);

    file_id(wal, &wal1, "after the child closed");
    file_id(shm, &shm1, "after the child closed");
    printf("file_locks: %s wal inode %llu -> %llu, shm inode %llu -> %llu\n", name,
           (unsigned long long)wal0.st_ino, (unsigned long long)wal1.st_ino,
           (unsigned long long)shm0.st_ino, (unsigned long long)shm1.st_ino);
    assert_true(wal0.st_ino == wal1.st_ino && wal0.st_dev == wal1.st_dev);
    assert_true(shm0.st_ino == shm1.st_ino && shm0.st_dev == shm1.st_dev);

    /* A's snapshot still reads right, and a new transaction sees the child's commit. */
    check_keys(ta, "p", "p-one");
    kvq_txn_destroy(ta);
    kvq_txn *t = NULL;
    assert_int_equal(kvq_txn_create(&t, a), 0);
    check_keys(t, "p", "p-one");
    check_keys(t, "c", "c-one");
    kvq_txn_destroy(t);

    /* And once more, with another child after a commit of P. */
    put_keys(a, "p", "p-one");
    run_child(url);
    assert_int_equal(kvq_txn_create(&t, a), 0);
    check_keys(t, "c", "c-one");
    kvq_txn_destroy(t);
    kvq_db_close(a);
}

static void test_sqlite_storage(void **state)
{
    (void)state;
    locks_survive("sqlite", 0);
}

static void test_log_store_table(void **state)
{
    (void)state;
    locks_survive("log", 1);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--child") == 0)
        return child_main(argv[2]);
    /* The log store's table is written by the applier: have it apply every batch at once, so
     * that the table's WAL holds the keys that the child and P read. */
    setenv("KVQ_LOGSTORE_APPLY_LAG_US", "0", 1);
    setenv("KVQ_LOGSTORE_APPLY_MS", "5", 1);
    unsetenv("KVQ_STORAGE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sqlite_storage),
        cmocka_unit_test(test_log_store_table),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
