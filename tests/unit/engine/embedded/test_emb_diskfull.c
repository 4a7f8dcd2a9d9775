/* A full disk: pushes fail with KVQ_ENOSPC and corrupt nothing, a queue can still be drained
 * (the engine's reserve), and writes resume once space is freed. Runs on a small tmpfs; the test
 * reports itself skipped when it may not mount one (it needs root). */
#include "kvq_test.h"
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
    return kt_tmpfs_mount(mnt, sizeof(mnt), "diskfull", "24m") < 0 ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    kt_tmpfs_unmount(mnt);
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

/* Fills what is left of the file system with the file `filler`. */
static void fill_disk(const char *filler)
{
    assert_int_equal(kt_fill_disk(filler, 1), 0);
}

/* Skips the test when the tmpfs could not be mounted. */
static void need_tmpfs(void)
{
    if (mnt[0] == '\0') {
        printf("diskfull: skipped=cannot_mount_tmpfs\n");
        skip();
    }
}

static void test_full_disk_drains(void **state)
{
    (void)state;
    need_tmpfs();
    char dir[300], filler[300];
    snprintf(dir, sizeof(dir), "%s/db", mnt);
    snprintf(filler, sizeof(filler), "%s/filler", mnt);
    kvq_db *db;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    for (int i = 0; i < 200; i++)
        assert_int_equal(put(db, i, 1000), 0);

    /* Fill what is left of the file system with another file. */
    fill_disk(filler);

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

/* A durable queue on a full disk is drained by the queue layer's own pops, whose idempotency
 * result slots are small writes: kvq_queue_pop, then (after reopening the database on the
 * still-full disk, which must not take the reserve back) kvq_queue_pop_k and
 * kvq_queue_consume_k, to empty. Pushes are refused throughout, and resume once there is room. */
static void test_full_disk_queue_pops_drain(void **state)
{
    (void)state;
    need_tmpfs();
    char dir[300], filler[300];
    snprintf(dir, sizeof(dir), "%s/db", mnt);
    assert_int_equal(kt_rm_rf(dir), 0);
    snprintf(dir, sizeof(dir), "%s/dbq", mnt);
    snprintf(filler, sizeof(filler), "%s/filler-q", mnt);
    kvq_db *db;
    kvq_queue *q;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL), 0);
    enum { N = 300, VLEN = 400 };
    static uint8_t val[VLEN];
    memset(val, 'q', sizeof(val));
    kvq_bytes vals[50];
    for (int i = 0; i < 50; i++)
        vals[i] = (kvq_bytes){ val, sizeof(val) };
    for (int i = 0; i < N / 50; i++)
        assert_int_equal(kvq_queue_push_many(q, vals, 50), 0);

    fill_disk(filler);
    int rc = 0;
    for (int i = 0; i < 5000 && rc == 0; i++)
        rc = kvq_queue_push(q, val, sizeof(val));
    assert_int_equal(rc, KVQ_ENOSPC);
    uint64_t len = 0;
    assert_int_equal(kvq_queue_len(&len, q), 0);
    size_t total = (size_t)len, popped = 0;
    assert_true(total >= N);

    kvq_buf out[50];
    for (int i = 0; i < 50; i++)
        out[i] = (kvq_buf)KVQ_BUF_INIT;
    for (int i = 0; i < 10; i++) {
        rc = kvq_queue_pop(&out[0], q);
        if (rc != 0)
            fail_msg("pop %d on a full disk: %s (%s)", i, kvq_errname(rc), kvq_last_error());
        popped++;
    }
    kvq_queue_close(q);
    kvq_db_close(db);

    /* Reopened on the still-full disk: the reserve stays given up, pops go on. */
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL), 0);
    assert_int_equal(kvq_queue_push(q, val, sizeof(val)), KVQ_ENOSPC);
    size_t n = 0;
    while (popped < total / 2) {
        rc = kvq_queue_pop_k(out, &n, q, 50);
        if (rc != 0)
            fail_msg("pop_k on a full disk: %s (%s)", kvq_errname(rc), kvq_last_error());
        popped += n;
    }
    for (;;) {
        kvq_watch *w = NULL;
        rc = kvq_queue_consume_k(out, &n, &w, q, 50);
        kvq_watch_destroy(w);
        if (rc != 0)
            fail_msg("consume_k on a full disk: %s (%s)", kvq_errname(rc), kvq_last_error());
        popped += n;
        if (n == 0)
            break;
    }
    assert_int_equal(popped, total);
    assert_int_equal(kvq_queue_len(&len, q), 0);
    assert_int_equal(len, 0);
    assert_int_equal(kvq_queue_push(q, val, sizeof(val)), KVQ_ENOSPC);

    /* Room again: pushes resume. */
    assert_int_equal(unlink(filler), 0);
    usleep(150000);
    assert_int_equal(kvq_queue_push(q, val, sizeof(val)), 0);
    for (int i = 0; i < 50; i++)
        kvq_buf_dispose(&out[i]);
    kvq_queue_close(q);
    kvq_db_close(db);
    printf("diskfull: queue items=%zu drained_by_pops=%zu reopened_full=yes pushes_refused=ENOSPC "
           "resumed=yes\n",
           total, popped);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_disk_drains),
        cmocka_unit_test(test_full_disk_queue_pops_drain),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
