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

/* The tmpfs's size in MiB: 32, times $KVQ_TEST_SCALE (the sanitizer builds run this smaller,
 * tests/CMakeLists.txt: 0.75, 24 MiB), never below 24 (16 is too small for the drain-mode
 * cases): the engine's reserve, kvq.cq and the log store's room for a checkpoint and a spare take
 * about 11 MiB of it, whatever its size, and the filling pushes take the rest. Most of the test's
 * CPU is those pushes and their drain, so it scales with the size less those 11 MiB. */
static long disk_mib(void)
{
    long mib = (long)(32 * kvq_test_scale());
    return mib < 24 ? 24 : mib;
}

static int group_setup(void **state)
{
    (void)state;
    /* Small segments, so that the small disk holds many and drains recycle them. */
    setenv("KVQ_LOGSTORE_SEGMENT_BYTES", SEG_BYTES, 1);
    if (kt_mkdtemp(base, sizeof base, "logfaults") != 0)
        return -1;
    char size[32];
    snprintf(size, sizeof size, "%ldm", disk_mib());
    printf("logfaults: tmpfs of %ld MiB\n", disk_mib());
    return kt_tmpfs_mount(mnt, sizeof mnt, "logfull", size) < 0 ? -1 : 0;
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
    assert_int_equal(kt_fill_disk(filler, 0), 0);
}

static uint64_t free_bytes(const char *dir)
{
    long long n = kt_free_bytes(dir);
    assert_true(n >= 0);
    return (uint64_t)n;
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
        *ckpts += strcmp(de->d_name, "data.db") == 0;
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
            fail_msg("2,000,000 items fit on a %ld MiB disk", disk_mib());
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


/* ---- read-only opens ---------------------------------------------------------------------- */

static void put_keys(kvq_db *db, const char *prefix, int from, int to)
{
    for (int i = from; i < to; i++) {
        kvq_txn *t;
        assert_int_equal(kvq_txn_create(&t, db), 0);
        char k[64], v[64];
        int kn = snprintf(k, sizeof k, "%s/%06d", prefix, i);
        int vn = snprintf(v, sizeof v, "value-%d", i);
        assert_int_equal(kvq_txn_set(t, (const uint8_t *)k, (size_t)kn, (const uint8_t *)v,
                                     (size_t)vn),
                         0);
        int rc = kvq_txn_commit(t);
        if (rc != 0)
            fail_msg("commit %s: %s (%s)", k, kvq_errname(rc), kvq_last_error());
        kvq_txn_destroy(t);
    }
}

/* The keys under prefix, each checked against its value; -1 on a read error (code in *err). */
static long count_keys(kvq_db *db, const char *prefix, int *err)
{
    uint8_t b[80], e[80];
    size_t pl = strlen(prefix);
    size_t bl = (size_t)snprintf((char *)b, sizeof b, "%s/", prefix);
    snprintf((char *)e, sizeof e, "%s0", prefix);
    long n = 0;
    for (;;) {
        kvq_txn *t;
        if ((*err = kvq_txn_create(&t, db)) != 0)
            return -1;
        const kvq_kv *kvs;
        size_t got = 0;
        bool more = false;
        *err = kvq_txn_get_range(&kvs, &got, &more, t, b, bl, e, pl + 1, 1000, 0);
        if (*err != 0) {
            kvq_txn_destroy(t);
            return -1;
        }
        for (size_t i = 0; i < got; i++) {
            char v[64];
            int idx = atoi((const char *)kvs[i].key.data + pl + 1);
            int vn = snprintf(v, sizeof v, "value-%d", idx);
            assert_int_equal(kvs[i].value.len, (size_t)vn);
            assert_memory_equal(kvs[i].value.data, v, (size_t)vn);
        }
        n += (long)got;
        if (got > 0) {
            /* the next range starts just after the last key: key + 0x00 */
            bl = kvs[got - 1].key.len;
            assert_true(bl + 1 <= sizeof b);
            memcpy(b, kvs[got - 1].key.data, bl);
            b[bl++] = 0;
        }
        kvq_txn_destroy(t);
        if (!more || got == 0)
            return n;
    }
}

/* A CRC-like digest of a log store's data files (segments, spares, the table): what an open
 * that reports damage, or a read-only open, must leave as it was. */
static uint64_t data_digest(const char *dbdir)
{
    char p[600];
    snprintf(p, sizeof p, "%s/logstore", dbdir);
    DIR *d = opendir(p);
    assert_non_null(d);
    uint64_t h = 1469598103934665603ull;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "log-", 4) != 0 && strncmp(de->d_name, "spare-", 6) != 0 &&
            strcmp(de->d_name, "data.db") != 0)
            continue;
        char f[900];
        snprintf(f, sizeof f, "%s/%s", p, de->d_name);
        uint64_t fh = 1469598103934665603ull;
        for (const char *c = de->d_name; *c; c++)
            fh = (fh ^ (uint8_t)*c) * 1099511628211ull;
        FILE *fp = fopen(f, "rb");
        assert_non_null(fp);
        static uint8_t buf[65536];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, fp)) > 0)
            for (size_t i = 0; i < got; i++)
                fh = (fh ^ buf[i]) * 1099511628211ull;
        fclose(fp);
        h += fh; /* order-free */
    }
    closedir(d);
    return h;
}

static void test_read_only_open(void **state)
{
    (void)state;
    char dir[400], url[420];
    snprintf(dir, sizeof dir, "%s/ro", base);
    snprintf(url, sizeof url, "log:%s", dir);
    /* the table and the log after it */
    setenv("KVQ_LOGSTORE_CHECKPOINT_BYTES", "65536", 1);
    setenv("KVQ_LOGSTORE_APPLY_LAG_US", "0", 1);
    kvq_db *w = open_url(url, 0);
    put_keys(w, "a", 0, 3000);
    kvq_db_close(w);
    unsetenv("KVQ_LOGSTORE_CHECKPOINT_BYTES");
    unsetenv("KVQ_LOGSTORE_APPLY_LAG_US");
    int segs, spares, ckpts;
    count_files(dir, &segs, &spares, &ckpts);
    assert_true(ckpts == 1);
    uint64_t before = data_digest(dir);

    /* read-only, no writer alive: it reads everything and changes nothing */
    kvq_db *r = open_url(url, KVQ_DB_READ_ONLY);
    int err;
    assert_int_equal(count_keys(r, "a", &err), 3000);
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, r), 0);
    assert_int_equal(kvq_txn_set(t, K("x"), K("y")), 0);
    assert_int_equal(kvq_txn_commit(t), KVQ_EPERM);
    kvq_txn_destroy(t);
    kvq_db_close(r);
    assert_true(data_digest(dir) == before);

    /* beside a writer: it sees the writer's later commits */
    w = open_url(url, 0);
    r = open_url(url, KVQ_DB_READ_ONLY);
    put_keys(w, "b", 0, 500);
    assert_int_equal(count_keys(r, "b", &err), 500);
    assert_int_equal(count_keys(r, "a", &err), 3000);

    /* The writer recycles the log (checkpoints every 64 KiB of it) while the reader idles:
     * the reader has a slot in readers.shm (the directory is writable), so the log it has not
     * applied is kept for it, and it reads on. */
    kvq_db_close(w);
    setenv("KVQ_LOGSTORE_CHECKPOINT_BYTES", "65536", 1);
    setenv("KVQ_LOGSTORE_APPLY_LAG_US", "0", 1);
    setenv("KVQ_LOGSTORE_APPLY_MS", "2", 1);
    w = open_url(url, 0);
    put_keys(w, "c", 0, 4000);
    unsetenv("KVQ_LOGSTORE_CHECKPOINT_BYTES");
    unsetenv("KVQ_LOGSTORE_APPLY_LAG_US");
    unsetenv("KVQ_LOGSTORE_APPLY_MS");
    long c = count_keys(r, "c", &err);
    if (c < 0)
        fail_msg("the read-only handle behind a recycled log: %s (%s)", kvq_errname(err),
                 kvq_last_error());
    assert_int_equal(c, 4000);
    const char *behind = "read on";
    kvq_db_close(r);
    r = open_url(url, KVQ_DB_READ_ONLY);
    assert_int_equal(count_keys(r, "c", &err), 4000);
    kvq_db_close(r);
    kvq_db_close(w);
    printf("logfaults: read_only keys=3000 unchanged=yes commit=EPERM beside_writer=yes "
           "behind_recycled_log=%s\n", behind);
}

/* A read-only file system: the database reads; a read-write open is refused clearly. */
static void test_read_only_file_system(void **state)
{
    (void)state;
    need_tmpfs("read_only_file_system");
    char dir[400], url[420];
    snprintf(dir, sizeof dir, "%s/rofs", mnt);
    snprintf(url, sizeof url, "log:%s", dir);
    kvq_db *w = open_url(url, 0);
    put_keys(w, "a", 0, 1000);
    kvq_db_close(w);
    uint64_t before = data_digest(dir);
    if (mount(NULL, mnt, NULL, MS_REMOUNT | MS_RDONLY, NULL) != 0) {
        printf("logfaults: read_only_file_system skipped=cannot_remount (%s)\n",
               strerror(errno));
        skip();
    }
    kvq_db *r = NULL;
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.flags |= KVQ_DB_READ_ONLY;
    int rc = kvq_db_open(&r, url, &o);
    int err = 0;
    long n = rc == 0 ? count_keys(r, "a", &err) : -1;
    char msg[300];
    snprintf(msg, sizeof msg, "%s", kvq_last_error());
    kvq_db_close(r);
    kvq_db *rw = NULL;
    int rwrc = kvq_db_open(&rw, url, NULL);
    char rwmsg[300];
    snprintf(rwmsg, sizeof rwmsg, "%s", kvq_last_error());
    kvq_db_close(rw);
    assert_int_equal(mount(NULL, mnt, NULL, MS_REMOUNT, NULL), 0);
    if (rc != 0)
        fail_msg("read-only open on a read-only file system: %s (%s)", kvq_errname(rc), msg);
    assert_int_equal(n, 1000);
    if (rwrc != KVQ_EPERM)
        fail_msg("read-write open on a read-only file system: %s (%s)", kvq_errname(rwrc),
                 rwmsg);
    assert_true(data_digest(dir) == before);
    printf("logfaults: read_only_fs keys=1000 read_write_open=%s (%s)\n", kvq_errname(rwrc),
           rwmsg);
}

/* ---- damaged files ------------------------------------------------------------------------ */

/* Opens url in a child process (a damaged file must not take the test down), read-only or
 * not; returns the child's kvq code (0: opened and read every key under "a"). */
static int open_in_child(const char *url, unsigned int flags, long want_keys)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        alarm(60);
        kvq_db_options o = KVQ_DB_OPTIONS_INIT;
        o.flags |= flags | KVQ_DB_NO_CREATE;
        kvq_db *db = NULL;
        int rc = kvq_db_open(&db, url, &o);
        if (rc == 0) {
            int err = 0;
            long n = count_keys(db, "a", &err);
            rc = n < 0 ? err : (n == want_keys ? 0 : -2);
            kvq_db_close(db);
        }
        char line[400];
        int len = snprintf(line, sizeof line, "%d %s", rc, kvq_last_error());
        if (write(fds[1], line, (size_t)len) < 0)
            _exit(3);
        _exit(0);
    }
    close(fds[1]);
    char line[400] = "";
    ssize_t got = read(fds[0], line, sizeof line - 1);
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || got <= 0)
        fail_msg("the child opening %s died (status %#x)", url, st);
    line[got] = 0;
    int rc = atoi(line);
    if (rc != 0 && rc != -2)
        printf("#   %s\n", line);
    return rc;
}

typedef void (*damage_fn)(const char *lsdir);

static void flip_byte(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, at), 1);
    b ^= 0x10;
    assert_int_equal(pwrite(fd, &b, 1, at), 1);
    close(fd);
}

/* The name of the first file of lsdir starting with prefix (the lowest, for segments). */
static void first_file(const char *lsdir, const char *prefix, char *out, size_t cap)
{
    DIR *d = opendir(lsdir);
    assert_non_null(d);
    char best[300] = "";
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0 &&
            (best[0] == 0 || strcmp(de->d_name, best) < 0))
            snprintf(best, sizeof best, "%s", de->d_name);
    closedir(d);
    assert_true(best[0] != 0);
    snprintf(out, cap, "%s/%s", lsdir, best);
}

static void dmg_table_flip(const char *lsdir)
{
    char p[700];
    first_file(lsdir, "data.db", p, sizeof p);
    flip_byte(p, 3);
}

static void dmg_table_half(const char *lsdir)
{
    char p[700];
    first_file(lsdir, "data.db", p, sizeof p);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(truncate(p, st.st_size / 2), 0);
}

static void dmg_table_gone(const char *lsdir)
{
    char p[700];
    first_file(lsdir, "data.db", p, sizeof p);
    assert_int_equal(unlink(p), 0);
}

static void dmg_seg_header(const char *lsdir)
{
    char p[700];
    first_file(lsdir, "log-", p, sizeof p);
    flip_byte(p, 20);
}

static void dmg_seg_gone(const char *lsdir)
{
    char p[700];
    first_file(lsdir, "log-", p, sizeof p);
    assert_int_equal(unlink(p), 0);
}

static void dmg_seg_empty(const char *lsdir)
{
    char p[700];
    first_file(lsdir, "log-", p, sizeof p);
    assert_int_equal(truncate(p, 0), 0);
}

static void dmg_all_segs_gone(const char *lsdir)
{
    char cmd[800];
    snprintf(cmd, sizeof cmd, "rm -f %s/log-*.seg", lsdir);
    assert_int_equal(system(cmd), 0);
}

#define NKEYS 6000

static void test_damage_reported(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        damage_fn fn;
    } cases[] = {
        { "table_header_flip", dmg_table_flip },      { "table_half", dmg_table_half },
        { "table_gone", dmg_table_gone },             { "segment_header_flip", dmg_seg_header },
        { "first_segment_gone", dmg_seg_gone },       { "first_segment_empty", dmg_seg_empty },
        { "every_segment_gone", dmg_all_segs_gone },
    };
    int reported = 0, total = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int ro = 0; ro < 2; ro++) {
            char dir[400], url[420], lsdir[420];
            snprintf(dir, sizeof dir, "%s/dmg-%s-%d", base, cases[i].name, ro);
            snprintf(url, sizeof url, "log:%s", dir);
            snprintf(lsdir, sizeof lsdir, "%s/logstore", dir);
            /* the table, then more log after it over two segments and more (the applier at
             * work all along, and its last pass at close up to the newest batch) */
            setenv("KVQ_LOGSTORE_CHECKPOINT_BYTES", "65536", 1);
            setenv("KVQ_LOGSTORE_APPLY_LAG_US", "0", 1);
            kvq_db *w = open_url(url, 0);
            put_keys(w, "a", 0, NKEYS);
            kvq_db_close(w);
            unsetenv("KVQ_LOGSTORE_CHECKPOINT_BYTES");
            unsetenv("KVQ_LOGSTORE_APPLY_LAG_US");
            int segs, spares, ckpts;
            count_files(dir, &segs, &spares, &ckpts);
            assert_int_equal(ckpts, 1);
            /* the log's start was released: the table alone holds it */
            char seg1[500];
            snprintf(seg1, sizeof seg1, "%s/log-%016x.seg", lsdir, 1);
            assert_int_equal(access(seg1, F_OK), -1);
            /* intact, it opens and reads */
            assert_int_equal(open_in_child(url, ro ? KVQ_DB_READ_ONLY : 0, NKEYS), 0);
            cases[i].fn(lsdir);
            uint64_t before = data_digest(dir);
            int rc = open_in_child(url, ro ? KVQ_DB_READ_ONLY : 0, NKEYS);
            total++;
            if (rc != KVQ_EDAMAGED)
                fail_msg("%s (%s): opened with %d (%s), not as damaged", cases[i].name,
                         ro ? "read-only" : "read-write", rc,
                         rc == -2 ? "keys missing" : kvq_errname(rc));
            reported++;
            /* twice: the failed open changed nothing, re-created nothing */
            assert_int_equal(open_in_child(url, ro ? KVQ_DB_READ_ONLY : 0, NKEYS), KVQ_EDAMAGED);
            assert_true(data_digest(dir) == before);
            assert_int_equal(kt_rm_rf(dir), 0);
        }
    }
    printf("logfaults: damage cases=%d reported=%d (read-write and read-only) files_changed=0\n",
           total, reported);
}

int main(int argc, char **argv)
{
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_disk_from_own_pushes),
        cmocka_unit_test(test_full_disk_small_checkpoints),
        cmocka_unit_test(test_drain_mode_left_with_room),
        cmocka_unit_test(test_read_only_open),
        cmocka_unit_test(test_read_only_file_system),
        cmocka_unit_test(test_damage_reported),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
