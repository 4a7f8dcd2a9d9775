/* A full disk: pushes fail with KVQ_ENOSPC and corrupt nothing, a queue can still be drained
 * (the engine's reserve), and writes resume once space is freed. Runs on a small tmpfs; the test
 * reports itself skipped when it may not mount one (it needs root). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "kvq/kvq.h"

static char mnt[256];

static int setup(void **state)
{
    (void)state;
    snprintf(mnt, sizeof(mnt), "/tmp/kvq-diskfull-XXXXXX");
    if (mkdtemp(mnt) == NULL)
        return -1;
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=24m") != 0) {
        fprintf(stderr, "cannot mount a tmpfs (%s): the disk-full tests are skipped\n",
                strerror(errno));
        rmdir(mnt);
        mnt[0] = '\0';
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (mnt[0] != '\0') {
        umount(mnt);
        rmdir(mnt);
    }
    return 0;
}

static int put(kvq_db *db, int i, size_t vlen)
{
    kvq_txn *t;
    int rc = kvq_txn_create(&t, db);
    if (rc != 0)
        return rc;
    char key[32];
    uint8_t val[1000];
    memset(val, 'v', sizeof(val));
    int kn = snprintf(key, sizeof(key), "item/%08d", i);
    rc = kvq_txn_set(t, (const uint8_t *)key, (size_t)kn, val, vlen);
    if (rc == 0)
        rc = kvq_txn_commit(t);
    kvq_txn_destroy(t);
    return rc;
}

static size_t count(kvq_db *db)
{
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    const kvq_kv *kvs;
    size_t n = 0;
    assert_int_equal(kvq_txn_get_range(&kvs, &n, NULL, t, (const uint8_t *)"item/", 5,
                                       (const uint8_t *)"item0", 5, 0, 0),
                     0);
    kvq_txn_destroy(t);
    return n;
}

static void test_full_disk_drains(void **state)
{
    (void)state;
    if (mnt[0] == '\0') {
        printf("diskfull: skipped=cannot_mount_tmpfs\n");
        skip();
    }
    char dir[300], filler[300];
    snprintf(dir, sizeof(dir), "%s/db", mnt);
    snprintf(filler, sizeof(filler), "%s/filler", mnt);
    kvq_db *db;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    for (int i = 0; i < 200; i++)
        assert_int_equal(put(db, i, 1000), 0);

    /* Fill what is left of the file system with another file. */
    int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    static char junk[65536];
    while (write(fd, junk, sizeof(junk)) > 0) {
    }
    while (write(fd, junk, 512) > 0) {
    }
    close(fd);

    /* Pushes now fail cleanly. */
    int rc = 0;
    int i = 200;
    for (; i < 2000 && rc == 0; i++)
        rc = put(db, i, 1000);
    assert_int_equal(rc, KVQ_ENOSPC);
    size_t have = count(db);
    assert_true(have >= 200);

    /* Draining still works, thanks to the reserve. */
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(
        kvq_txn_clear_range(t, (const uint8_t *)"item/", 5, (const uint8_t *)"item0", 5), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
    assert_int_equal(count(db), 0);

    /* New writes wait for space ... */
    assert_int_equal(put(db, 5000, 100), KVQ_ENOSPC);
    assert_non_null(strstr(kvq_last_error(), "disk is full"));

    /* ... and resume once it is freed. */
    assert_int_equal(unlink(filler), 0);
    usleep(150000);
    assert_int_equal(put(db, 5001, 100), 0);
    assert_int_equal(count(db), 1);
    kvq_db_close(db);

    /* Nothing is damaged: the database reopens with exactly that key. */
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    assert_int_equal(count(db), 1);
    kvq_db_close(db);
    printf("diskfull: fs=tmpfs items_before_full=%zu refused_push=ENOSPC drained=%zu "
           "resumed=yes reopened_intact=yes\n",
           have, have);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_disk_drains),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
