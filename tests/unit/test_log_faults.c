/* The log store's faults (docs/logstore.md, "Tests"): a disk filled by the database's own
 * pushes of small items, drained to empty by every drain path, reopened while still full, and
 * leaving drain mode only with room back; read-only opens, on a read-only file system too; a
 * read-only handle that falls behind a recycled log; damaged files reported as damage, under a
 * read-only open as well, and never changed by the open that reports them.
 *
 * The SQLite storage's own fault tests also run on the log store (ctest label logstore:
 * test_emb_diskfull, _diskfull_open, _nofile, _storage_faults with KVQ_STORAGE=log). This file
 * adds what only the log store has: segments and checkpoints on a full disk, and its files.
 *
 * The disk-full and read-only-file-system tests need a tmpfs (root); without one they report
 * themselves skipped, with the reason on stdout. */
#include "kvq_test.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq/workq.h"

#define SEG_BYTES "262144"

static char mnt[256];   /* the tmpfs, "" when it could not be mounted */
static char base[256];  /* a plain temporary directory */

static int group_setup(void **state)
{
    (void)state;
    /* Small segments, so that the small disk holds many and drains recycle them. */
    setenv("KVQ_LOGSTORE_SEGMENT_BYTES", SEG_BYTES, 1);
    if (kt_mkdtemp(base, sizeof base, "logfaults") != 0)
        return -1;
    return kt_tmpfs_mount(mnt, sizeof mnt, "logfull", "32m") < 0 ? -1 : 0;
}

static int group_teardown(void **state)
{
    (void)state;
    kt_tmpfs_unmount(mnt);
    kt_rm_rf(base);
    return 0;
}

static void need_tmpfs(const char *what)
{
    if (mnt[0] == '\0') {
        printf("logfaults: %s skipped=cannot_mount_tmpfs\n", what);
        skip();
    }
}

static kvq_db *open_url(const char *url, unsigned int flags)
{
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.flags |= flags;
    kvq_db *db = NULL;
    int rc = kvq_db_open(&db, url, &o);
    if (rc != 0)
        fail_msg("open %s: %s (%s)", url, kvq_errname(rc), kvq_last_error());
    return db;
}

/* Fills what is left of the file system with the file `filler`. */
static void fill_disk(const char *filler)
{
    int fd = open(filler, O_WRONLY | O_CREAT | O_APPEND, 0600);
    assert_true(fd >= 0);
    static char junk[65536];
    while (write(fd, junk, sizeof junk) > 0) {
    }
    while (write(fd, junk, 512) > 0) {
    }
    close(fd);
}

static uint64_t free_bytes(const char *dir)
{
    struct statvfs v;
    assert_int_equal(statvfs(dir, &v), 0);
    return (uint64_t)v.f_bavail * v.f_frsize;
}

static uint64_t qlen(kvq_queue *q)
{
    uint64_t n = 0;
    int rc = kvq_queue_len(&n, q);
    if (rc != 0)
        fail_msg("len: %s (%s)", kvq_errname(rc), kvq_last_error());
    return n;
}

/* Counts the segment files (log-*.seg) and spare files of a log store. */
static void count_files(const char *dbdir, int *segs, int *spares, int *ckpts)
{
    char p[600];
    snprintf(p, sizeof p, "%s/logstore", dbdir);
    DIR *d = opendir(p);
    assert_non_null(d);
    *segs = *spares = *ckpts = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        *segs += strncmp(de->d_name, "log-", 4) == 0;
        *spares += strncmp(de->d_name, "spare-", 6) == 0;
        *ckpts += strncmp(de->d_name, "ckpt-", 5) == 0;
    }
    closedir(d);
}

/* ---- a disk filled by the database itself ---------------------------------------------- */

enum { VLEN = 100 };
static uint8_t val[VLEN];

/* Pushes batches of 100 small items, then single ones, until the disk is full; returns how
 * many were pushed. Every refusal is KVQ_ENOSPC with a message. */
static uint64_t push_until_full(kvq_queue *q)
{
    kvq_bytes vals[100];
    for (int i = 0; i < 100; i++)
        vals[i] = (kvq_bytes){ val, VLEN };
    uint64_t pushed = 0;
    int rc;
    while ((rc = kvq_queue_push_many(q, vals, 100)) == 0) {
        pushed += 100;
        if (pushed > 2000000)
            fail_msg("2,000,000 items fit on a 24 MiB disk");
    }
    if (rc != KVQ_ENOSPC)
        fail_msg("push_many on a full disk: %s (%s)", kvq_errname(rc), kvq_last_error());
    assert_non_null(strstr(kvq_last_error(), "disk is full"));
    for (int i = 0; i < 1000 && (rc = kvq_queue_push(q, val, VLEN)) == 0; i++)
        pushed++;
    assert_int_equal(rc, KVQ_ENOSPC);
    return pushed;
}

static void full_disk_from_own_pushes(const char *ckpt_bytes)
{
    need_tmpfs("full_disk_from_own_pushes");
    setenv("KVQ_LOGSTORE_CHECKPOINT_BYTES", ckpt_bytes, 1);
    memset(val, 'v', sizeof val);
    char dir[300], url[320], filler[300];
    snprintf(dir, sizeof dir, "%s/own-%s", mnt, ckpt_bytes);
    snprintf(url, sizeof url, "log:%s", dir);
    snprintf(filler, sizeof filler, "%s/filler-own-%s", mnt, ckpt_bytes);
    kvq_db *db = open_url(url, 0);
    kvq_queue *q;
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL), 0);

    /* The database's own pushes fill the disk: they are refused before the room the log
     * store keeps for a checkpoint and a spare segment is taken. */
    uint64_t pushed = push_until_full(q);
    assert_true(pushed >= 10000);
    assert_int_equal(qlen(q), pushed);
    int segs, spares, ckpts;
    count_files(dir, &segs, &spares, &ckpts);
    uint64_t free_full = free_bytes(mnt);

    /* Drain: single pops, then pop_k. */
    kvq_buf out[50];
    for (int i = 0; i < 50; i++)
        out[i] = (kvq_buf)KVQ_BUF_INIT;
    uint64_t popped = 0;
    int rc;
    for (int i = 0; i < 200; i++) {
        if ((rc = kvq_queue_pop(&out[0], q)) != 0)
            fail_msg("pop %d on a full disk: %s (%s)", i, kvq_errname(rc), kvq_last_error());
        assert_int_equal(out[0].len, VLEN);
        popped++;
    }
    size_t n = 0;
    while (popped < pushed / 3) {
        if ((rc = kvq_queue_pop_k(out, &n, q, 50)) != 0)
            fail_msg("pop_k after %llu pops on a full disk: %s (%s)",
                     (unsigned long long)popped, kvq_errname(rc), kvq_last_error());
        assert_true(n > 0);
        popped += n;
    }
    /* (a push may be accepted here: the drain's checkpoints may have given room back) */
    kvq_queue_close(q);
    kvq_db_close(db);

    /* Reopened with the disk still full (another file takes every byte the drain freed). */
    fill_disk(filler);
    db = open_url(url, 0);
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL), 0);
    /* every acknowledged push and pop is there */
    assert_int_equal(qlen(q), pushed - popped);
    /* pushes go on only as far as the room the log store keeps covers them */
    uint64_t extra = 0;
    while ((rc = kvq_queue_push(q, val, VLEN)) == 0)
        if (++extra > 1000000)
            fail_msg("1,000,000 pushes accepted on a full disk");
    assert_int_equal(rc, KVQ_ENOSPC);
    pushed += extra;
    /* consume_k to two thirds ... */
    while (popped < pushed / 3 * 2) {
        kvq_watch *w = NULL;
        rc = kvq_queue_consume_k(out, &n, &w, q, 50);
        kvq_watch_destroy(w);
        if (rc != 0)
            fail_msg("consume_k on a full disk: %s (%s)", kvq_errname(rc), kvq_last_error());
        assert_true(n > 0);
        popped += n;
    }
    /* ... and the work queue's receive + ack for the rest. */
    kvq_workq *wq;
    assert_int_equal(kvq_workq_open(&wq, q, NULL), 0);
    uint64_t acked = 0;
    for (;;) {
        kvq_workq_lease lease;
        rc = kvq_workq_receive(&out[0], &lease, wq, 0);
        if (rc == KVQ_ENOTFOUND)
            break;
        if (rc != 0)
            fail_msg("receive after %llu acks on a full disk: %s (%s)",
                     (unsigned long long)acked, kvq_errname(rc), kvq_last_error());
        assert_int_equal(out[0].len, VLEN);
        if ((rc = kvq_workq_ack(wq, &lease)) != 0)
            fail_msg("ack on a full disk: %s (%s)", kvq_errname(rc), kvq_last_error());
        acked++;
    }
    popped += acked;
    kvq_workq_close(wq);
    assert_int_equal(popped, pushed);
    assert_int_equal(qlen(q), 0);

    /* Empty, with the disk still full (the filler took what the drain freed): pushes are
     * accepted only as far as the room the log store keeps covers them (a checkpoint of its
     * data and a segment), then refused; and those are drained too. */
    fill_disk(filler);
    uint64_t again = 0;
    while ((rc = kvq_queue_push(q, val, VLEN)) == 0)
        if (++again > 1000000)
            fail_msg("1,000,000 pushes accepted on a full disk after a drain");
    assert_int_equal(rc, KVQ_ENOSPC);
    for (uint64_t i = 0; i < again;) {
        if ((rc = kvq_queue_pop_k(out, &n, q, 50)) != 0)
            fail_msg("pop_k at %llu of %llu on a full disk: %s (%s)", (unsigned long long)i,
                     (unsigned long long)again, kvq_errname(rc), kvq_last_error());
        assert_true(n > 0);
        i += n;
    }
    assert_int_equal(qlen(q), 0);
    assert_int_equal(kvq_queue_push(q, val, VLEN), KVQ_ENOSPC);
    kvq_queue_close(q);
    kvq_db_close(db);
    int segs2, spares2, ckpts2;
    count_files(dir, &segs2, &spares2, &ckpts2);

    /* Room back: pushes resume. */
    assert_int_equal(unlink(filler), 0);
    db = open_url(url, 0);
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL), 0);
    assert_int_equal(qlen(q), 0);
    for (int i = 0; i < 1000; i++) {
        int prc = kvq_queue_push(q, val, VLEN);
        if (prc != 0)
            fail_msg("push %d with room back: %s (%s), %llu bytes free", i, kvq_errname(prc),
                     kvq_last_error(), (unsigned long long)free_bytes(mnt));
    }
    assert_int_equal(qlen(q), 1000);
    kvq_queue_close(q);
    kvq_db_close(db);
    for (int i = 0; i < 50; i++)
        kvq_buf_dispose(&out[i]);
    unsetenv("KVQ_LOGSTORE_CHECKPOINT_BYTES");
    assert_int_equal(kt_rm_rf(dir), 0);
    printf("logfaults: full_disk checkpoint_bytes=%s items=%llu (%d B values) segments_when_full=%d spares=%d "
           "checkpoints=%d free_when_full=%llu drained_by pop+pop_k=%llu consume_k+receive/ack="
           "%llu (acks %llu) reopened_full=yes segments_after_drain=%d accepted_after_drain=%llu "
           "then_refused=ENOSPC resumed=yes\n",
           ckpt_bytes, (unsigned long long)pushed, VLEN, segs, spares, ckpts, (unsigned long long)free_full,
           (unsigned long long)(pushed / 3), (unsigned long long)(pushed - pushed / 3),
           (unsigned long long)acked, segs2, (unsigned long long)again);
}

/* The default checkpoint threshold (64 MiB of log) is larger than the disk: checkpoints are
 * written only when space runs short (a spare cannot be made, the next segment cannot). */
static void test_full_disk_from_own_pushes(void **state)
{
    (void)state;
    full_disk_from_own_pushes("67108864");
}

/* A threshold of 1 MiB: the log is checkpointed and recycled as it goes. */
static void test_full_disk_small_checkpoints(void **state)
{
    (void)state;
    full_disk_from_own_pushes("1048576");
}

/* Leaving drain mode only with room back: after a drain, room for a push exists only once the
 * disk has room for the log store's checkpoint and spare, and the engine's reserve. */
static void test_drain_mode_left_with_room(void **state)
{
    (void)state;
    need_tmpfs("drain_mode_left_with_room");
    char dir[300], url[320], filler[300], filler2[300];
    snprintf(dir, sizeof dir, "%s/room", mnt);
    snprintf(url, sizeof url, "log:%s", dir);
    snprintf(filler, sizeof filler, "%s/filler-room", mnt);
    snprintf(filler2, sizeof filler2, "%s/filler-room2", mnt);
    kvq_db *db = open_url(url, 0);
    kvq_queue *q;
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL), 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(kvq_queue_push(q, val, VLEN), 0);
    fill_disk(filler);
    /* Pushes go on only as far as the room the log store keeps covers them. */
    int rc;
    int more = 0;
    while ((rc = kvq_queue_push(q, val, VLEN)) == 0)
        if (++more > 1000000)
            fail_msg("1,000,000 pushes accepted on a full disk");
    assert_int_equal(rc, KVQ_ENOSPC);
    kvq_buf out = KVQ_BUF_INIT;
    for (int i = 0; i < 100 + more; i++) {
        if ((rc = kvq_queue_pop(&out, q)) != 0)
            fail_msg("pop %d of %d on a full disk: %s (%s)", i, 100 + more, kvq_errname(rc),
                     kvq_last_error());
    }
    assert_int_equal(qlen(q), 0);
    /* Free less than the engine's reserve and its margin: still drain mode. */
    assert_int_equal(truncate(filler, 0), 0);
    uint64_t avail = free_bytes(mnt);
    assert_true(avail > (16u << 20));
    int fd = open(filler2, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    /* leave 2 MiB free: less than reserve.c's margin */
    assert_int_equal(posix_fallocate(fd, 0, (off_t)(avail - (2u << 20))), 0);
    close(fd);
    usleep(150000);
    assert_int_equal(kvq_queue_push(q, val, VLEN), KVQ_ENOSPC);
    /* All the room back. */
    assert_int_equal(unlink(filler2), 0);
    usleep(150000);
    assert_int_equal(kvq_queue_push(q, val, VLEN), 0);
    assert_int_equal(qlen(q), 1);
    kvq_buf_dispose(&out);
    kvq_queue_close(q);
    kvq_db_close(db);
    unlink(filler);
    assert_int_equal(kt_rm_rf(dir), 0);
    printf("logfaults: drain_mode refused_with_2MiB_free=ENOSPC resumed_with_room=yes\n");
}

int main(int argc, char **argv)
{
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_disk_from_own_pushes),
        cmocka_unit_test(test_full_disk_small_checkpoints),
        cmocka_unit_test(test_drain_mode_left_with_room),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
