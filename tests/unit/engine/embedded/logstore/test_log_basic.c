/* The log store's log: records, segments, recovery of a torn or damaged tail, group commit by
 * threads and processes, recycling. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "engine/embedded/logstore/log.h"
#include "util/util.h"
#include "test_log_util.h"

#define SEG (64u << 10)

/* Collected records: each payload starts with a u32 id. */
typedef struct seen {
    uint32_t ids[200000];
    size_t n;
    uint64_t lsns[200000];
    int batches; /* entries are batch entries */
} seen;

static int collect(void *arg, const kvq__log_rec *r)
{
    seen *s = arg;
    if (r->type == KVQ__LOG_REC_BATCH && s->batches) {
        size_t pos = 0;
        const uint8_t *e;
        size_t el;
        int k;
        while ((k = kvq__log_batch_next(r->data, r->len, &pos, &e, &el)) == 1) {
            if (el < 4)
                return KVQ_EDAMAGED;
            memcpy(&s->ids[s->n], e, 4);
            s->lsns[s->n++] = r->lsn;
        }
        return k < 0 ? KVQ_EDAMAGED : 0;
    }
    if (r->len < 4)
        return KVQ_EDAMAGED;
    memcpy(&s->ids[s->n], r->data, 4);
    s->lsns[s->n++] = r->lsn;
    return 0;
}

static seen *seen_new(int batches)
{
    seen *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->batches = batches;
    return s;
}

/* A record of id with len payload bytes (id, then a pattern). */
static size_t make_rec(uint8_t *buf, uint32_t id, size_t len)
{
    if (len < 4)
        len = 4;
    memcpy(buf, &id, 4);
    for (size_t i = 4; i < len; i++)
        buf[i] = (uint8_t)(id * 31 + i);
    return len;
}

static void append_one(kvq__log *log, uint32_t id, size_t len, uint64_t *lsn, uint64_t *end)
{
    uint8_t buf[40000];
    len = make_rec(buf, id, len);
    assert_int_equal(kvq__log_lock(log), 0);
    assert_int_equal(kvq__log_append_locked(log, KVQ__LOG_REC_USER, buf, len, lsn, end), 0);
    kvq__log_unlock(log);
}

static kvq__log *open_log(const char *dir, uint64_t start, seen *s)
{
    kvq__log_options o = { .segment_bytes = SEG };
    kvq__log *log = NULL;
    int rc = kvq__log_open(&log, dir, &o, start, s ? collect : NULL, s);
    if (rc != 0)
        fprintf(stderr, "open: %s\n", kvq_last_error());
    assert_int_equal(rc, 0);
    return log;
}

static void test_append_reopen(void **state)
{
    (void)state;
    char dir[128];
    tl_mkdir(dir, sizeof dir, "log");
    kvq__log *log = open_log(dir, 0, NULL);
    uint64_t first = kvq__log_tail(log), lsn, end = 0;
    assert_int_equal(first, 1ull * SEG + KVQ__LOG_SEG_HEADER);
    for (uint32_t i = 0; i < 100; i++) {
        append_one(log, i, 4 + i, &lsn, &end);
        assert_int_equal(lsn % 8, 0);
    }
    assert_int_equal(kvq__log_tail(log), end);
    assert_int_equal(kvq__log_sync(log, end, NULL), 0);
    assert_true(kvq__log_synced(log) >= end);
    /* A second handle (as another process would) reads the same records from the shared tail. */
    seen *s2 = seen_new(0);
    kvq__log *log2 = open_log(dir, 0, s2);
    assert_int_equal(s2->n, 100);
    kvq__log_close(log2);
    kvq__log_close(log);

    seen *s = seen_new(0);
    log = open_log(dir, 0, s);
    assert_int_equal(s->n, 100);
    for (uint32_t i = 0; i < 100; i++)
        assert_int_equal(s->ids[i], i);
    assert_int_equal(kvq__log_tail(log), end);
    /* Starting from a record boundary in the middle. */
    seen *s3 = seen_new(0);
    uint64_t next;
    assert_int_equal(kvq__log_read(log, s->lsns[50], collect, s3, &next), 0);
    assert_int_equal(s3->n, 50);
    assert_int_equal(s3->ids[0], 50);
    assert_int_equal(next, end);
    kvq__log_close(log);
    free(s);
    free(s2);
    free(s3);
    tl_rmdir(dir);
}

static void test_bad_input(void **state)
{
    (void)state;
    char dir[128];
    tl_mkdir(dir, sizeof dir, "log");
    kvq__log *log = NULL;
    kvq__log_options o = { .segment_bytes = 5000 };
    assert_int_equal(kvq__log_open(&log, dir, &o, 0, NULL, NULL), KVQ_EINVAL);
    assert_null(log);
    assert_int_equal(kvq__log_open(NULL, dir, NULL, 0, NULL, NULL), KVQ_EINVAL);
    assert_int_equal(kvq__log_open(&log, NULL, NULL, 0, NULL, NULL), KVQ_EINVAL);
    char missing[200];
    snprintf(missing, sizeof missing, "%s/nope", dir);
    assert_int_not_equal(kvq__log_open(&log, missing, NULL, 0, NULL, NULL), 0);
    /* read-only with no log */
    kvq__log_options ro = { .read_only = 1 };
    assert_int_equal(kvq__log_open(&log, dir, &ro, 0, NULL, NULL), KVQ_ENOTFOUND);
    log = open_log(dir, 0, NULL);
    /* a record too large for a segment, and reserved types */
    static uint8_t big[SEG];
    assert_int_equal(kvq__log_lock(log), 0);
    assert_int_equal(kvq__log_append_locked(log, KVQ__LOG_REC_USER, big, SEG - 100, NULL, NULL),
                     KVQ_EINVAL);
    assert_int_equal(kvq__log_append_locked(log, KVQ__LOG_REC_SEGEND, big, 8, NULL, NULL),
                     KVQ_EINVAL);
    assert_int_equal(kvq__log_append_locked(log, KVQ__LOG_REC_USER, NULL, 8, NULL, NULL),
                     KVQ_EINVAL);
    kvq__log_unlock(log);
    kvq__log_req r = { .data = NULL, .len = 3 };
    assert_int_equal(kvq__log_group_commit(log, &r, NULL, NULL), KVQ_EINVAL);
    /* a start position that the log does not hold */
    kvq__log_close(log);
    assert_int_equal(kvq__log_open(&log, dir, &o, 7ull * SEG + 4096, NULL, NULL), KVQ_EINVAL);
    kvq__log_options ok = { .segment_bytes = SEG };
    assert_int_equal(kvq__log_open(&log, dir, &ok, 7ull * SEG + 4096, NULL, NULL), 0);
    kvq__log_close(log);
    /* batch parsing of malformed payloads */
    uint8_t p[16] = { 200, 0, 0, 0 };
    size_t pos = 0;
    const uint8_t *e;
    size_t el;
    assert_int_equal(kvq__log_batch_next(p, sizeof p, &pos, &e, &el), -1);
    pos = 0;
    assert_int_equal(kvq__log_batch_next(p, 2, &pos, &e, &el), -1);
    pos = 16;
    assert_int_equal(kvq__log_batch_next(p, sizeof p, &pos, &e, &el), 0);
    tl_rmdir(dir);
}

static void test_segments_and_recycling(void **state)
{
    (void)state;
    char dir[128], path[256];
    tl_mkdir(dir, sizeof dir, "log");
    kvq__log *log = open_log(dir, 0, NULL);
    uint64_t lsn, end = 0, lsns[600];
    /* records of up to 3 KiB over several 64 KiB segments */
    for (uint32_t i = 0; i < 600; i++) {
        append_one(log, i, 100 + (i * 37) % 3000, &lsn, &end);
        lsns[i] = lsn;
    }
    assert_int_equal(kvq__log_sync(log, end, NULL), 0);
    uint64_t last_seg = end / SEG;
    assert_true(last_seg >= 10);
    kvq__log_close(log);
    seen *s = seen_new(0);
    log = open_log(dir, 0, s);
    assert_int_equal(s->n, 600);
    for (uint32_t i = 0; i < 600; i++) {
        assert_int_equal(s->ids[i], i);
        assert_int_equal(s->lsns[i], lsns[i]);
    }
    /* Release everything before record 400: its segment and later stay. */
    uint64_t keep = lsns[400];
    assert_int_equal(kvq__log_release(log, keep), 0);
    assert_int_equal(kvq__log_first(log), keep);
    tl_seg_path(path, sizeof path, dir, 1);
    assert_int_not_equal(access(path, F_OK), 0);
    tl_seg_path(path, sizeof path, dir, keep / SEG);
    assert_int_equal(access(path, F_OK), 0);
    uint64_t next;
    assert_int_equal(kvq__log_read(log, lsns[10], NULL, NULL, &next), KVQ_ENOTFOUND);
    /* New segments reuse the spare instead of creating files. */
    kvq__log_stats st0, st1;
    kvq__log_get_stats(log, &st0);
    for (uint32_t i = 600; i < 700; i++)
        append_one(log, i, 2000, &lsn, &end);
    assert_int_equal(kvq__log_sync(log, end, NULL), 0);
    kvq__log_get_stats(log, &st1);
    assert_true(st1.segments_recycled > st0.segments_recycled);
    kvq__log_close(log);
    free(s);
    s = seen_new(0);
    log = open_log(dir, keep, s);
    assert_int_equal(s->n, 300);
    assert_int_equal(s->ids[0], 400);
    assert_int_equal(s->ids[299], 699);
    kvq__log_close(log);
    /* Opening from a released position is damage (the checkpoint says the log is there). */
    kvq__log_options o = { .segment_bytes = SEG };
    assert_int_equal(kvq__log_open(&log, dir, &o, lsns[10], NULL, NULL), KVQ_EDAMAGED);
    free(s);
    tl_rmdir(dir);
}

/* Overwrites len bytes at lsn of the segment file with a byte pattern. */
static void scribble(const char *dir, uint64_t lsn, size_t len, int flip_only)
{
    char path[256];
    tl_seg_path(path, sizeof path, dir, lsn / SEG);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b[4096];
    assert_true(len <= sizeof b);
    assert_int_equal(pread(fd, b, len, (off_t)(lsn % SEG)), (ssize_t)len);
    if (flip_only)
        b[len - 1] ^= 0x10;
    else
        memset(b, 0, len);
    assert_int_equal(pwrite(fd, b, len, (off_t)(lsn % SEG)), (ssize_t)len);
    close(fd);
}

static void test_torn_tail_and_stale_records(void **state)
{
    (void)state;
    char dir[128];
    tl_mkdir(dir, sizeof dir, "log");
    kvq__log *log = open_log(dir, 0, NULL);
    uint64_t lsn[10], end[10];
    for (uint32_t i = 0; i < 10; i++)
        append_one(log, i, 200, &lsn[i], &end[i]);
    /* not synced: a crash may leave any suffix torn */
    kvq__log_close(log);
    /* The payload of record 7 half written: recovery keeps 0..6 and cuts the rest. */
    scribble(dir, lsn[7] + KVQ__LOG_REC_HEADER + 100, 100, 0);
    seen *s = seen_new(0);
    kvq__log_stats st;
    log = open_log(dir, 0, s);
    kvq__log_get_stats(log, &st);
    assert_int_equal(s->n, 7);
    assert_int_equal(st.recovered_records, 7);
    assert_int_equal(kvq__log_tail(log), lsn[7]);
    /* Records 8 and 9 are still on disk, valid on their own: a new record of the same size at
     * 7's place must not bring them back (the chain of checksums refuses them). */
    uint64_t l, e;
    append_one(log, 1000, 200, &l, &e);
    assert_int_equal(l, lsn[7]);
    assert_int_equal(e, end[7]);
    assert_int_equal(kvq__log_sync(log, e, NULL), 0);
    kvq__log_close(log);
    free(s);
    s = seen_new(0);
    log = open_log(dir, 0, s);
    assert_int_equal(s->n, 8);
    assert_int_equal(s->ids[7], 1000);
    kvq__log_close(log);
    free(s);
    tl_rmdir(dir);
}

static void test_bit_flips(void **state)
{
    (void)state;
    char dir[128];
    tl_mkdir(dir, sizeof dir, "log");
    kvq__log *log = open_log(dir, 0, NULL);
    uint64_t lsn[6], end[6];
    for (uint32_t i = 0; i < 6; i++) {
        append_one(log, i, 300, &lsn[i], &end[i]);
        assert_int_equal(kvq__log_sync(log, end[i], NULL), 0);
    }
    kvq__log_close(log);
    /* A flipped bit in the last record: a torn tail as far as anyone can tell; cut. */
    scribble(dir, lsn[5] + 50, 1, 1);
    seen *s = seen_new(0);
    log = open_log(dir, 0, s);
    assert_int_equal(s->n, 5);
    kvq__log_close(log);
    /* The tail was cut at 5 and re-synced; flip a bit in record 2's header: records 3 and 4
     * were written after 2 was synced and say so: damage, never a silent cut. */
    scribble(dir, lsn[2] + 20, 1, 1);
    kvq__log_options o = { .segment_bytes = SEG };
    assert_int_equal(kvq__log_open(&log, dir, &o, 0, NULL, NULL), KVQ_EDAMAGED);
    assert_null(log);
    assert_non_null(strstr(kvq_last_error(), "damaged"));
    /* The flip undone, everything is back. */
    scribble(dir, lsn[2] + 20, 1, 1);
    free(s);
    s = seen_new(0);
    log = open_log(dir, 0, s);
    assert_int_equal(s->n, 5);
    kvq__log_close(log);
    /* A damaged segment header (the file is no segment of this log) ends the scan there. */
    char path[256];
    tl_seg_path(path, sizeof path, dir, 1);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "X", 1, 0), 1);
    close(fd);
    assert_int_equal(kvq__log_open(&log, dir, &o, 0, NULL, NULL), KVQ_EDAMAGED);
    free(s);
    tl_rmdir(dir);
}

/* Group commit: many threads, few records. */
typedef struct gc_arg {
    kvq__log *log;
    int id, n;
} gc_arg;

static void *gc_thread(void *p)
{
    gc_arg *a = p;
    for (int i = 0; i < a->n; i++) {
        uint32_t v = (uint32_t)(a->id * 100000 + i);
        uint8_t buf[100];
        memcpy(buf, &v, 4);
        memset(buf + 4, 'x', sizeof buf - 4);
        kvq__log_req r = { .data = buf, .len = sizeof buf };
        if (kvq__log_group_commit(a->log, &r, NULL, NULL) != 0 || r.end == 0 ||
            kvq__log_synced(a->log) < r.end)
            return (void *)1;
    }
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void check_all(seen *s, int writers, int per)
{
    assert_int_equal(s->n, (size_t)writers * (size_t)per);
    qsort(s->ids, s->n, 4, cmp_u32);
    size_t k = 0;
    for (int w = 0; w < writers; w++)
        for (int i = 0; i < per; i++)
            assert_int_equal(s->ids[k++], (uint32_t)(w * 100000 + i));
}

static void test_group_commit_threads(void **state)
{
    (void)state;
    char dir[128];
    tl_mkdir(dir, sizeof dir, "log");
    kvq__log *log = open_log(dir, 0, NULL);
    enum { T = 8, N = 150 };
    pthread_t th[T];
    gc_arg a[T];
    for (int t = 0; t < T; t++) {
        a[t] = (gc_arg){ log, t, N };
        assert_int_equal(pthread_create(&th[t], NULL, gc_thread, &a[t]), 0);
    }
    for (int t = 0; t < T; t++) {
        void *r;
        pthread_join(th[t], &r);
        assert_null(r);
    }
    kvq__log_stats st;
    kvq__log_get_stats(log, &st);
    assert_int_equal(st.batches_entries, T * N);
    printf("group commit: %d commits in %llu records, %llu syncs\n", T * N,
           (unsigned long long)st.records, (unsigned long long)st.syncs);
    assert_true(st.records <= (uint64_t)T * N);
    assert_true(st.syncs <= st.records);
    kvq__log_close(log);
    seen *s = seen_new(1);
    log = open_log(dir, 0, s);
    check_all(s, T, N);
    kvq__log_close(log);
    free(s);
    tl_rmdir(dir);
}

static int refuse_odd(void *arg, kvq__log_req **reqs, size_t n)
{
    int *calls = arg;
    (*calls)++;
    for (size_t i = 0; i < n; i++) {
        uint32_t id;
        memcpy(&id, reqs[i]->data, 4);
        if (id % 2)
            reqs[i]->rc = KVQ_ENOT_COMMITTED;
    }
    return 0;
}

static void test_group_commit_refusals(void **state)
{
    (void)state;
    char dir[128];
    tl_mkdir(dir, sizeof dir, "log");
    kvq__log *log = open_log(dir, 0, NULL);
    int calls = 0;
    for (uint32_t i = 0; i < 10; i++) {
        uint8_t b[8] = { 0 };
        memcpy(b, &i, 4);
        kvq__log_req r = { .data = b, .len = sizeof b };
        int rc = kvq__log_group_commit(log, &r, refuse_odd, &calls);
        assert_int_equal(rc, i % 2 ? KVQ_ENOT_COMMITTED : 0);
    }
    assert_int_equal(calls, 10);
    kvq__log_close(log);
    seen *s = seen_new(1);
    log = open_log(dir, 0, s);
    assert_int_equal(s->n, 5);
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(s->ids[i], 2 * i);
    kvq__log_close(log);
    free(s);
    tl_rmdir(dir);
}

/* Processes share the log: each writes its own records; one sync serves all. */
static void test_group_commit_processes(void **state)
{
    (void)state;
    char dir[128];
    tl_mkdir(dir, sizeof dir, "log");
    kvq__log *log = open_log(dir, 0, NULL);
    enum { P = 4, T = 2, N = 60 };
    pid_t pid[P];
    for (int p = 0; p < P; p++) {
        pid[p] = fork();
        assert_true(pid[p] >= 0);
        if (pid[p] == 0) {
            kvq__log *l = NULL;
            kvq__log_options o = { .segment_bytes = SEG };
            if (kvq__log_open(&l, dir, &o, 0, NULL, NULL) != 0)
                _exit(2);
            pthread_t th[T];
            gc_arg a[T];
            for (int t = 0; t < T; t++) {
                a[t] = (gc_arg){ l, p * T + t, N };
                pthread_create(&th[t], NULL, gc_thread, &a[t]);
            }
            int bad = 0;
            for (int t = 0; t < T; t++) {
                void *r;
                pthread_join(th[t], &r);
                bad |= r != NULL;
            }
            kvq__log_close(l);
            _exit(bad ? 1 : 0);
        }
    }
    for (int p = 0; p < P; p++) {
        int st;
        assert_int_equal(waitpid(pid[p], &st, 0), pid[p]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    /* The parent's handle sees the others' records through the shared tail. */
    seen *s = seen_new(1);
    uint64_t next;
    assert_int_equal(kvq__log_read(log, kvq__log_first(log), collect, s, &next), 0);
    assert_int_equal(next, kvq__log_tail(log));
    check_all(s, P * T, N);
    kvq__log_close(log);
    free(s);
    s = seen_new(1);
    log = open_log(dir, 0, s);
    check_all(s, P * T, N);
    kvq__log_close(log);
    free(s);
    tl_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_reopen),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_segments_and_recycling),
        cmocka_unit_test(test_torn_tail_and_stale_records),
        cmocka_unit_test(test_bit_flips),
        cmocka_unit_test(test_group_commit_threads),
        cmocka_unit_test(test_group_commit_refusals),
        cmocka_unit_test(test_group_commit_processes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
