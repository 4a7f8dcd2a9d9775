/* A full disk met at open (issue 26, items 3 and 4), on a small tmpfs; the tests report
 * themselves skipped when they may not mount one (they need root).
 *
 * - The database was closed with its reserve in place, then another file took every free
 *   byte: opening it must work (SQLite needs room for its -wal and -shm files before anything
 *   can be freed: the reserve is given up for them), pushes are refused, and the queue's own
 *   pops drain it to empty.
 * - After a drain, closing the last handle frees the WAL's space: the next open must not count
 *   that as room enough to leave drain mode. Drain mode ends only once the reserve is back with
 *   a margin (reserve.c: RESERVE_MARGIN) left beside it; and every pop drains the queue. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "kvq_test.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq/workq.h"

#define MB (1024LL * 1024)

static char mnt[256];

static int setup(void **state)
{
    (void)state;
    return kt_tmpfs_mount(mnt, sizeof(mnt), "diskfull-open", "24m") < 0 ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    kt_tmpfs_unmount(mnt);
    return 0;
}

/* Each test starts from an empty file system, whatever the one before left. */
static void clean(void)
{
    assert_int_equal(kt_empty_dir(mnt), 0);
}

static long long free_bytes(void)
{
    long long n = kt_free_bytes(mnt);
    assert_true(n >= 0);
    return n;
}

/* Fills what is left of the file system with the file `filler`. */
static void fill_disk(const char *filler)
{
    assert_int_equal(kt_fill_disk(filler, 0), 0);
}

/* Shrinks `filler` so that about `want` bytes of the file system are free. */
static void leave_free(const char *filler, long long want)
{
    struct stat st;
    assert_int_equal(stat(filler, &st), 0);
    long long cut = want - free_bytes();
    assert_true(cut >= 0 && cut <= (long long)st.st_size);
    assert_int_equal(truncate(filler, (off_t)(st.st_size - cut)), 0);
}

static long long reserve_size(const char *dir)
{
    char p[400];
    struct stat st;
    snprintf(p, sizeof(p), "%s/kvq.reserve", dir);
    return stat(p, &st) == 0 ? (long long)st.st_size : -1;
}

enum { N = 300, VLEN = 400 };
static uint8_t val[VLEN];

static void push_items(kvq_queue *q, int n)
{
    memset(val, 'q', sizeof(val));
    kvq_bytes vals[50];
    for (int i = 0; i < 50; i++)
        vals[i] = (kvq_bytes){ val, sizeof(val) };
    for (int i = 0; i < n / 50; i++)
        assert_int_equal(kvq_queue_push_many(q, vals, 50), 0);
}

/* Empties the queue with the layer's batch pops and consumes; returns how many it popped. */
static size_t drain(kvq_queue *q)
{
    static kvq_buf out[50];
    size_t popped = 0, n = 0;
    int rc;
    for (int round = 0; round < 1000; round++) {
        rc = kvq_queue_pop_k(out, &n, q, 50);
        if (rc == KVQ_ENOTFOUND)
            break; /* empty */
        if (rc != 0)
            fail_msg("pop_k on a full disk: %s (%s)", kvq_errname(rc), kvq_last_error());
        popped += n;
        if (n < 50)
            break;
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
    for (int i = 0; i < 50; i++)
        kvq_buf_dispose(&out[i]);
    uint64_t len = 1;
    assert_int_equal(kvq_queue_len(&len, q), 0);
    assert_int_equal(len, 0);
    return popped;
}

static void test_open_full_disk_with_reserve(void **state)
{
    (void)state;
    if (mnt[0] == '\0') {
        printf("diskfull_open: skipped=cannot_mount_tmpfs\n");
        skip();
    }
    clean();
    char dir[300], filler[300];
    snprintf(dir, sizeof(dir), "%s/db-open", mnt);
    snprintf(filler, sizeof(filler), "%s/filler-open", mnt);
    kvq_db *db;
    kvq_queue *q;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL), 0);
    push_items(q, N);
    kvq_queue_close(q);
    kvq_db_close(db);
    assert_true(reserve_size(dir) >= 8 * MB);

    /* Closed with its reserve in place; now another file takes every free byte. */
    fill_disk(filler);
    int rc = kvq_db_open(&db, dir, NULL);
    if (rc != 0)
        fail_msg("opening on a full disk: %s (%s)", kvq_errname(rc), kvq_last_error());
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL), 0);
    assert_int_equal(kvq_queue_push(q, val, sizeof(val)), KVQ_ENOSPC);
    size_t popped = drain(q);
    assert_int_equal(popped, N);
    assert_int_equal(kvq_queue_push(q, val, sizeof(val)), KVQ_ENOSPC);
    kvq_queue_close(q);
    kvq_db_close(db);

    /* Room again: pushes resume. */
    assert_int_equal(unlink(filler), 0);
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL), 0);
    assert_int_equal(kvq_queue_push(q, val, sizeof(val)), 0);
    kvq_queue_close(q);
    kvq_db_close(db);
    printf("diskfull_open: opened_full=yes drained=%zu pushes_refused=ENOSPC resumed=yes\n",
           popped);
}

static void test_reopen_after_drain_keeps_drain_mode(void **state)
{
    (void)state;
    if (mnt[0] == '\0') {
        printf("diskfull_open: skipped=cannot_mount_tmpfs\n");
        skip();
    }
    clean();
    char dir[300], filler[300];
    snprintf(dir, sizeof(dir), "%s/db-reopen", mnt);
    snprintf(filler, sizeof(filler), "%s/filler-reopen", mnt);
    kvq_db *db;
    kvq_queue *q;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL), 0);
    push_items(q, N);
    fill_disk(filler);
    int rc = 0;
    for (int i = 0; i < 5000 && rc == 0; i++)
        rc = kvq_queue_push(q, val, sizeof(val));
    assert_int_equal(rc, KVQ_ENOSPC);
    assert_int_equal(reserve_size(dir), 0);
    uint64_t len = 0;
    assert_int_equal(kvq_queue_len(&len, q), 0);
    kvq_buf out = KVQ_BUF_INIT;
    for (int i = 0; i < 10; i++)
        assert_int_equal(kvq_queue_pop(&out, q), 0);
    kvq_buf_dispose(&out);
    kvq_queue_close(q);
    kvq_db_close(db);

    /* The last close removed the WAL. Room for the reserve and a little more, but less than
     * the reserve and its margin: the reopened database stays in drain mode. */
    leave_free(filler, 10 * MB);
    long long room = free_bytes();
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL), 0);
    rc = kvq_queue_push(q, val, sizeof(val));
    if (rc != KVQ_ENOSPC)
        fail_msg("a push on reopening with %lld bytes free (reserve %lld bytes): %s, not disk_full",
                 room, reserve_size(dir), kvq_errname(rc));
    size_t popped = drain(q);
    assert_int_equal(popped, (size_t)len - 10);
    kvq_queue_close(q);
    kvq_db_close(db);
    printf("diskfull_open: reopened_free=%lld drain_mode_kept=yes drained=%zu\n", room, popped);
}

/* The work queue's at-least-once path (what `kvq consume` does by default): a receive moves
 * the item into a lease (its value under another key, with the lease's records), which writes a
 * little more than it frees; the ack then frees it all. Drain mode accepts such a move, so a
 * full disk is drained by receive + ack as by pops. */
static void test_full_disk_receive_ack_drains(void **state)
{
    (void)state;
    if (mnt[0] == '\0') {
        printf("diskfull_open: skipped=cannot_mount_tmpfs\n");
        skip();
    }
    clean();
    char dir[300], filler[300];
    snprintf(dir, sizeof(dir), "%s/db-workq", mnt);
    snprintf(filler, sizeof(filler), "%s/filler-workq", mnt);
    kvq_db *db;
    kvq_queue *q;
    kvq_workq *w;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL), 0);
    assert_int_equal(kvq_workq_open(&w, q, NULL), 0);
    push_items(q, N);
    fill_disk(filler);
    int rc = 0;
    for (int i = 0; i < 5000 && rc == 0; i++)
        rc = kvq_queue_push(q, val, sizeof(val));
    assert_int_equal(rc, KVQ_ENOSPC);
    uint64_t len = 0;
    assert_int_equal(kvq_queue_len(&len, q), 0);
    size_t acked = 0;
    kvq_buf out = KVQ_BUF_INIT;
    for (;;) {
        kvq_workq_lease lease;
        rc = kvq_workq_receive(&out, &lease, w, 0);
        if (rc == KVQ_ENOTFOUND)
            break;
        if (rc != 0)
            fail_msg("receive %zu on a full disk: %s (%s)", acked, kvq_errname(rc),
                     kvq_last_error());
        rc = kvq_workq_ack(w, &lease);
        if (rc != 0)
            fail_msg("ack %zu on a full disk: %s (%s)", acked, kvq_errname(rc), kvq_last_error());
        acked++;
    }
    kvq_buf_dispose(&out);
    assert_int_equal(acked, (size_t)len);
    assert_int_equal(kvq_queue_len(&len, q), 0);
    assert_int_equal(len, 0);
    assert_int_equal(kvq_queue_push(q, val, sizeof(val)), KVQ_ENOSPC);
    kvq_workq_close(w);
    kvq_queue_close(q);
    kvq_db_close(db);
    printf("diskfull_open: receive_ack_drained=%zu pushes_refused=ENOSPC\n", acked);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_full_disk_with_reserve),
        cmocka_unit_test(test_reopen_after_drain_keeps_drain_mode),
        cmocka_unit_test(test_full_disk_receive_ack_drains),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
