/* A damaged key in the SQLite storage's data.db ends no range read early without a word (issue
 * 32: bytes flipped in data.db, and a plain range read returned 9,787 of 20,000 items with no
 * error). SQLite reads a range up to the first key past its bound; a key damaged so that it sorts
 * past the bound ended the range there, every row after it unread. The range read must instead
 * fail with KVQ_EDAMAGED, naming the file (the row's checksum covers its key).
 *
 * 20,000 keys r/000000 .. r/019999 are written and the database closed; then in a copy of
 * data.db one byte of key r/010000 in its leaf page is changed so that the key sorts past the
 * range's end ('r' -> 's', read forward) or before its beginning ('r' -> 'q', read in reverse).
 * A forked child (with a time limit) reads [r/, r0) in pages of 1,000 and reports how many rows
 * it read and the error it ended with; the parent checks that it is KVQ_EDAMAGED, never a
 * shorter range. */
#include "kvq_test.h"
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvq/kvq.h"

#define NKEYS 20000
#define DAMAGED "r/010000"

static char base[256];

static void write_keys(const char *dir)
{
    kvq_db *db = NULL;
    assert_ok(kvq_db_open(&db, dir, NULL));
    char k[16], v[64];
    memset(v, 'v', sizeof v);
    for (int i = 0; i < NKEYS; i += 500) {
        kvq_txn *t;
        assert_ok(kvq_txn_create(&t, db));
        for (int j = i; j < i + 500; j++) {
            int kn = snprintf(k, sizeof k, "r/%06d", j);
            assert_ok(kvq_txn_set(t, (const uint8_t *)k, (size_t)kn, (const uint8_t *)v, sizeof v));
        }
        assert_ok(kvq_txn_commit(t));
        kvq_txn_destroy(t);
    }
    kvq_db_close(db);
}

static int read_file(const char *path, uint8_t **data, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || (*data = malloc((size_t)st.st_size)) == NULL) {
        fclose(f);
        return -1;
    }
    *len = fread(*data, 1, (size_t)st.st_size, f);
    fclose(f);
    return *len == (size_t)st.st_size ? 0 : -1;
}

static int write_file(const char *path, const uint8_t *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    size_t n = fwrite(data, 1, len, f);
    return fclose(f) == 0 && n == len ? 0 : -1;
}

/* Copies the directory's files (flat) from src to dst. */
static void copy_db(const char *src, const char *dst)
{
    static const char *files[] = { "data.db", "kvq.marker", "kvq.cq", "kvq.reserve" };
    assert_int_equal(mkdir(dst, 0700), 0);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char a[512], b[512];
        snprintf(a, sizeof a, "%s/%s", src, files[i]);
        snprintf(b, sizeof b, "%s/%s", dst, files[i]);
        uint8_t *d;
        size_t n;
        if (read_file(a, &d, &n) != 0)
            continue; /* not every storage version has every file */
        assert_int_equal(write_file(b, d, n), 0);
        free(d);
    }
}

/* In data.db of dir, changes the first byte of key DAMAGED where it sits in a leaf page (page
 * type 0x0a: the rows of a WITHOUT ROWID table; interior pages keep copies of some keys) to to. */
static void damage_key(const char *dir, uint8_t to)
{
    char p[512];
    snprintf(p, sizeof p, "%s/data.db", dir);
    uint8_t *d;
    size_t n;
    assert_int_equal(read_file(p, &d, &n), 0);
    assert_true(n > 100);
    size_t page = ((size_t)d[16] << 8) | d[17];
    if (page == 1)
        page = 65536;
    size_t kl = strlen(DAMAGED), hits = 0;
    for (size_t off = 0; off + kl <= n; off++) {
        if (memcmp(d + off, DAMAGED, kl) != 0)
            continue;
        size_t pstart = off / page * page, hdr = pstart == 0 ? 100 : pstart;
        if (d[hdr] != 0x0a)
            continue;
        d[off] = to;
        hits++;
    }
    assert_int_equal(hits, 1);
    assert_int_equal(write_file(p, d, n), 0);
    free(d);
}

typedef struct outcome {
    int rc;       /* the range read's error, 0 when it ended */
    long rows;    /* rows read before it ended */
    char msg[400];
} outcome;

/* Child: reads [r/, r0) in pages of 1,000 (forward, or in reverse), writes its outcome to fd. */
static void child_read(const char *dir, int reverse, int fd)
{
    outcome o;
    memset(&o, 0, sizeof o);
    kvq_db *db = NULL;
    o.rc = kvq_db_open(&db, dir, NULL);
    kvq_txn *t = NULL;
    if (o.rc == 0)
        o.rc = kvq_txn_create(&t, db);
    uint8_t lo[32] = "r/", hi[32] = "r0";
    size_t lo_n = 2, hi_n = 2;
    while (o.rc == 0) {
        const kvq_kv *kv;
        size_t count = 0;
        bool more = false;
        o.rc = kvq_txn_get_range(&kv, &count, &more, t, lo, lo_n, hi, hi_n, 1000,
                                 reverse ? KVQ_REVERSE : 0);
        if (o.rc != 0 || count == 0)
            break;
        o.rows += (long)count;
        const kvq_kv *last = &kv[count - 1];
        if (last->key.len >= sizeof lo) {
            o.rc = -1;
            break;
        }
        if (reverse) {
            memcpy(hi, last->key.data, last->key.len);
            hi_n = last->key.len;
        } else {
            memcpy(lo, last->key.data, last->key.len);
            lo[last->key.len] = 0;
            lo_n = last->key.len + 1;
        }
        if (!more)
            break;
    }
    if (o.rc != 0)
        snprintf(o.msg, sizeof o.msg, "%s", kvq_last_error());
    kvq_txn_destroy(t);
    kvq_db_close(db);
    _exit(write(fd, &o, sizeof o) == (ssize_t)sizeof o ? 0 : 9);
}

static outcome read_in_child(const char *dir, int reverse)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        alarm(120); /* a hang is a failure too */
        child_read(dir, reverse, p[1]);
    }
    close(p[1]);
    outcome o;
    memset(&o, 0, sizeof o);
    ssize_t got = read(p[0], &o, sizeof o);
    close(p[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || got != (ssize_t)sizeof o)
        fail_msg("the reading child ended with status 0x%x", st);
    return o;
}

static void damaged_case(const char *name, uint8_t to, int reverse)
{
    char sound[300], dir[300];
    snprintf(sound, sizeof sound, "%s/sound", base);
    snprintf(dir, sizeof dir, "%s/%s", base, name);
    outcome whole = read_in_child(sound, reverse);
    assert_int_equal(whole.rc, 0);
    assert_int_equal(whole.rows, NKEYS);
    copy_db(sound, dir);
    damage_key(dir, to);
    outcome o = read_in_child(dir, reverse);
    printf("range_damage: %s: %ld of %d rows, then %s (%s)\n", name, o.rows, NKEYS,
           o.rc == 0 ? "the end" : kvq_errname(o.rc), o.msg);
    if (o.rc == 0)
        fail_msg("%s: the range read ended after %ld of %d rows without an error", name, o.rows,
                 NKEYS);
    assert_int_equal(o.rc, KVQ_EDAMAGED);
    assert_non_null(strstr(o.msg, "data.db"));
    assert_true(o.rows < NKEYS);
}

/* The damaged key sorts past the end: a forward read must not end there. */
static void test_key_past_the_end(void **state)
{
    (void)state;
    damaged_case("past-end", 's', 0);
}

/* The damaged key sorts before the beginning: a reverse read must not end there. */
static void test_key_before_the_beginning(void **state)
{
    (void)state;
    damaged_case("before-begin", 'q', 1);
}

static int group_setup(void **state)
{
    (void)state;
    /* The SQLite storage's file is what this damages, whatever the default storage. */
    setenv("KVQ_STORAGE", "sqlite", 1);
    if (kt_mkdtemp(base, sizeof base, "rangedmg") != 0)
        return -1;
    char sound[300];
    snprintf(sound, sizeof sound, "%s/sound", base);
    write_keys(sound);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    return kt_rm_rf(base) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_past_the_end),
        cmocka_unit_test(test_key_before_the_beginning),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
