/* The log store through the engine: choosing it, reopening, the applier bounding the log (and
 * reads merging its table with the newer versions), old versions readable inside the window,
 * the memory limit, damaged files, the earlier format converted, and kill -9 at each step of
 * append, sync, segment switch, the applier and recycling, with and without a power cut
 * (unsynced pages of the log thrown away before recovery). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "kvq/kvq.h"
#include "engine/embedded/logstore/ckpt.h"
#include "engine/embedded/logstore/log.h"
#include "engine/embedded/store.h"
#include "util/util.h"
#include "test_log_util.h"
#include "test_scale.h"

static char base[128];

static void url_of(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "log:%s/%s", base, name);
}

static kvq_db *open_db(const char *url)
{
    kvq_db *db = NULL;
    int rc = kvq_db_open(&db, url, NULL);
    if (rc != 0)
        fprintf(stderr, "open %s: %s (%s)\n", url, kvq_strerror(rc), kvq_last_error());
    assert_int_equal(rc, 0);
    return db;
}

static int put(kvq_db *db, const char *k, const char *v)
{
    kvq_txn *t;
    int rc = kvq_txn_create(&t, db);
    if (rc != 0)
        return rc;
    for (;;) {
        rc = kvq_txn_set(t, (const uint8_t *)k, strlen(k), (const uint8_t *)v, strlen(v));
        if (rc == 0)
            rc = kvq_txn_commit(t);
        if (rc == 0 || kvq_txn_on_error(t, rc) != 0)
            break;
    }
    kvq_txn_destroy(t);
    return rc;
}

static int del_range(kvq_db *db, const char *b, const char *e)
{
    kvq_txn *t;
    int rc = kvq_txn_create(&t, db);
    if (rc != 0)
        return rc;
    for (;;) {
        rc = kvq_txn_clear_range(t, (const uint8_t *)b, strlen(b), (const uint8_t *)e,
                                 strlen(e));
        if (rc == 0)
            rc = kvq_txn_commit(t);
        if (rc == 0 || kvq_txn_on_error(t, rc) != 0)
            break;
    }
    kvq_txn_destroy(t);
    return rc;
}

/* The value of k ("" when absent) into out. */
static int get(kvq_db *db, const char *k, char *out, size_t cap)
{
    kvq_txn *t;
    int rc = kvq_txn_create(&t, db);
    if (rc != 0)
        return rc;
    kvq_bytes v;
    int present;
    rc = kvq_txn_get(&v, &present, t, (const uint8_t *)k, strlen(k), 0);
    out[0] = '\0';
    if (rc == 0 && present) {
        size_t n = v.len < cap - 1 ? v.len : cap - 1;
        memcpy(out, v.data, n);
        out[n] = '\0';
    }
    kvq_txn_destroy(t);
    return rc;
}

static size_t count_range(kvq_db *db, const char *b, const char *e)
{
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    const kvq_kv *kvs;
    size_t n;
    bool more;
    assert_int_equal(kvq_txn_get_range(&kvs, &n, &more, t, (const uint8_t *)b, strlen(b),
                                       (const uint8_t *)e, strlen(e), 0, 0),
                     0);
    kvq_txn_destroy(t);
    return n;
}

static int exists(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) == 0;
}

static int group_setup(void **state)
{
    (void)state;
    tl_mkdir(base, sizeof base, "logstore");
    unsetenv("KVQ_STORAGE");
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    tl_rmdir(base);
    return 0;
}

static void test_choose_and_reopen(void **state)
{
    (void)state;
    char url[256], dir[256], buf[64];
    url_of(url, sizeof url, "a");
    snprintf(dir, sizeof dir, "%s/a", base);
    kvq_db *db = open_db(url);
    assert_int_equal(put(db, "k1", "v1"), 0);
    assert_int_equal(put(db, "k2", "v2"), 0);
    kvq_db_close(db);
    assert_true(exists(dir, "logstore"));
    assert_false(exists(dir, "data.db"));
    /* Reopened by its plain path: the directory says which storage it is. */
    db = open_db(dir);
    assert_int_equal(get(db, "k1", buf, sizeof buf), 0);
    assert_string_equal(buf, "v1");
    assert_int_equal(get(db, "k2", buf, sizeof buf), 0);
    assert_string_equal(buf, "v2");
    kvq_db_close(db);
    /* Read-only: the data is there and writes are refused. */
    kvq_db_options ro = KVQ_DB_OPTIONS_INIT;
    ro.flags = KVQ_DB_READ_ONLY;
    assert_int_equal(kvq_db_open(&db, dir, &ro), 0);
    assert_int_equal(get(db, "k2", buf, sizeof buf), 0);
    assert_string_equal(buf, "v2");
    assert_int_not_equal(put(db, "k3", "v3"), 0);
    kvq_db_close(db);
    db = open_db(dir);
    assert_int_equal(get(db, "k3", buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    kvq_db_close(db);
    /* A plain path makes a new database on the log store, the default. */
    char pdir[256];
    snprintf(pdir, sizeof pdir, "%s/plain", base);
    db = open_db(pdir);
    assert_int_equal(put(db, "p", "1"), 0);
    kvq_db_close(db);
    assert_true(exists(pdir, "logstore"));
    assert_false(exists(pdir, "data.db"));
    /* "sqlite:" on a log store is refused: one storage is never opened as the other. */
    char pu[300];
    snprintf(pu, sizeof pu, "sqlite:%s", pdir);
    assert_int_equal(kvq_db_open(&db, pu, NULL), KVQ_EINVAL);
    assert_non_null(strstr(kvq_last_error(), "open it without \"sqlite:\""));
    setenv("KVQ_STORAGE", "sqlite", 1);
    db = open_db(pdir); /* the environment chooses only for new databases */
    assert_int_equal(get(db, "p", buf, sizeof buf), 0);
    assert_string_equal(buf, "1");
    kvq_db_close(db);
    unsetenv("KVQ_STORAGE");
    /* A SQLite database (made with "sqlite:" or $KVQ_STORAGE=sqlite) opens as what it is: it is
     * never opened as, or converted to, a log store. */
    char sdir[256], surl[300], qurl[300];
    snprintf(sdir, sizeof sdir, "%s/sq", base);
    snprintf(surl, sizeof surl, "log:%s", sdir);
    snprintf(qurl, sizeof qurl, "sqlite:%s", sdir);
    db = open_db(qurl);
    assert_int_equal(put(db, "s", "1"), 0);
    kvq_db_close(db);
    assert_true(exists(sdir, "data.db"));
    assert_false(exists(sdir, "logstore"));
    assert_int_equal(kvq_db_open(&db, surl, NULL), KVQ_EINVAL);
    assert_non_null(strstr(kvq_last_error(), "not converted"));
    db = open_db(sdir); /* its plain path opens it as the SQLite database it is */
    assert_int_equal(get(db, "s", buf, sizeof buf), 0);
    assert_string_equal(buf, "1");
    kvq_db_close(db);
    setenv("KVQ_STORAGE", "log", 1);
    db = open_db(sdir);
    assert_int_equal(get(db, "s", buf, sizeof buf), 0);
    assert_string_equal(buf, "1");
    kvq_db_close(db);
    unsetenv("KVQ_STORAGE");
    assert_false(exists(sdir, "logstore"));
    /* $KVQ_STORAGE=sqlite makes a new database on the SQLite storage. */
    char edir[256];
    snprintf(edir, sizeof edir, "%s/envsq", base);
    setenv("KVQ_STORAGE", "sqlite", 1);
    db = open_db(edir);
    unsetenv("KVQ_STORAGE");
    assert_int_equal(put(db, "e", "1"), 0);
    kvq_db_close(db);
    assert_true(exists(edir, "data.db"));
    assert_false(exists(edir, "logstore"));
    /* Two handles (as two processes would) see each other's commits through the log. */
    kvq_db *a = open_db(url), *b = open_db(dir);
    assert_int_equal(put(a, "x", "from a"), 0);
    assert_int_equal(get(b, "x", buf, sizeof buf), 0);
    assert_string_equal(buf, "from a");
    assert_int_equal(put(b, "x", "from b"), 0);
    assert_int_equal(get(a, "x", buf, sizeof buf), 0);
    assert_string_equal(buf, "from b");
    kvq_db_close(a);
    kvq_db_close(b);
}

/* A read version set to an older version of the window reads that version (FoundationDB's
 * MVCC); the SQLite storage answers 1007. */
static void test_old_read_version(void **state)
{
    (void)state;
    char url[256];
    url_of(url, sizeof url, "mvcc");
    kvq_db *db = open_db(url);
    assert_int_equal(put(db, "k", "one"), 0);
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    int64_t rv;
    assert_int_equal(kvq_txn_get_read_version(&rv, t), 0);
    kvq_txn_destroy(t);
    assert_int_equal(put(db, "k", "two"), 0);
    assert_int_equal(put(db, "k", "three"), 0);
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_set_read_version(t, rv), 0);
    kvq_bytes v;
    int present;
    assert_int_equal(kvq_txn_get(&v, &present, t, (const uint8_t *)"k", 1, 0), 0);
    assert_true(present);
    assert_int_equal(v.len, 3);
    assert_memory_equal(v.data, "one", 3);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* A read version older than the table (the applier at work with no window: every batch goes to
 * the table at once, as with KVQ_LOGSTORE_APPLY_LAG_US=0) is refused with transaction_too_old,
 * never answered from the newer table. */
static int64_t table_read(const char *lsdir, const char *b, const char *e, const char *p,
                          size_t *n, size_t *with_p);

static void test_read_version_older_than_table(void **state)
{
    (void)state;
    setenv("KVQ_LOGSTORE_APPLY_LAG_US", "0", 1);
    setenv("KVQ_LOGSTORE_APPLY_MS", "2", 1);
    char url[256], lsdir[256];
    url_of(url, sizeof url, "older");
    snprintf(lsdir, sizeof lsdir, "%s/older/logstore", base);
    kvq_db *db = open_db(url);
    assert_int_equal(put(db, "k", "one"), 0);
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    int64_t rv;
    assert_int_equal(kvq_txn_get_read_version(&rv, t), 0);
    kvq_txn_destroy(t);
    assert_int_equal(put(db, "k", "two"), 0);
    assert_int_equal(put(db, "k", "three"), 0);
    /* Wait (up to a minute) for the applier to bring the table past rv. */
    size_t n, np;
    int64_t tv = 0;
    for (int w = 0; w < 30000 && tv <= rv; w++) {
        tv = table_read(lsdir, "", "\xff", "k", &n, &np);
        if (tv <= rv)
            kvq__sleep_us(2000);
    }
    assert_true(tv > rv);
    assert_int_equal(kvq_txn_create(&t, db), 0);
    int rc = kvq_txn_set_read_version(t, rv);
    kvq_bytes v;
    int present = 0;
    if (rc == 0)
        rc = kvq_txn_get(&v, &present, t, (const uint8_t *)"k", 1, 0);
    if (rc == 0)
        fail_msg("read at %lld with the table at %lld: %s %.*s", (long long)rv, (long long)tv,
                 present ? "present" : "absent", present ? (int)v.len : 0,
                 present ? (const char *)v.data : "");
    assert_int_equal(rc, KVQ_ETRANSACTION_TOO_OLD);
    kvq_txn_destroy(t);
    kvq_db_close(db);
    unsetenv("KVQ_LOGSTORE_APPLY_LAG_US");
    unsetenv("KVQ_LOGSTORE_APPLY_MS");
}

/* The table behind the log (logstore/data.db), read through the SQLite storage: its version,
 * and the keys it holds in [b, e) with how many of them start with prefix p. */
static int64_t table_read(const char *lsdir, const char *b, const char *e, const char *p,
                          size_t *n, size_t *with_p)
{
    kvq__db_opts o;
    memset(&o, 0, sizeof o);
    o.flags = KVQ_DB_READ_ONLY;
    o.file_mode = 0600;
    emb_store_config cfg = { lsdir, &o, 0, 0 };
    emb_store *t = NULL;
    if (emb_sqlite_store.open(&t, &cfg) != 0)
        return -1;
    emb_snap *sn = NULL;
    emb_snap_info si;
    assert_int_equal(emb_sqlite_store.snap_open(t, 0, &sn, &si), 0);
    emb_cursor *c = NULL;
    assert_int_equal(emb_sqlite_store.cursor_open(sn, (const uint8_t *)b, strlen(b),
                                                  (const uint8_t *)e, strlen(e), 0, &c),
                     0);
    *n = *with_p = 0;
    for (int has = 1;;) {
        kvq_bytes k, v;
        assert_int_equal(emb_sqlite_store.cursor_next(c, &k, &v, &has), 0);
        if (!has)
            break;
        (*n)++;
        *with_p += k.len >= strlen(p) && memcmp(k.data, p, strlen(p)) == 0;
    }
    emb_sqlite_store.cursor_close(c);
    emb_sqlite_store.snap_close(sn);
    emb_sqlite_store.close(t);
    return si.version;
}

static uint64_t file_size(const char *dir, const char *name)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static uint64_t log_files_bytes(const char *lsdir, int *segs)
{
    DIR *d = opendir(lsdir);
    struct dirent *de;
    uint64_t total = 0;
    *segs = 0;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "log-", 4) == 0 || strncmp(de->d_name, "spare-", 6) == 0) {
            char p[512];
            snprintf(p, sizeof p, "%s/%s", lsdir, de->d_name);
            struct stat st;
            stat(p, &st);
            total += (uint64_t)st.st_size;
            (*segs) += strncmp(de->d_name, "log-", 4) == 0;
        }
    }
    closedir(d);
    return total;
}

/* The applier bounds the log: pushes and pops far beyond the segment size leave a few segments
 * once the table holds them, and items pushed and popped before one pass of the applier never
 * reach the table (the pass folds a set and its clear into nothing). */
static void test_applier_bounds_the_log(void **state)
{
    (void)state;
    setenv("KVQ_LOGSTORE_SEGMENT_BYTES", "131072", 1);
    setenv("KVQ_LOGSTORE_CHECKPOINT_BYTES", "200000", 1);
    /* no pass while the items are pushed and popped */
    setenv("KVQ_LOGSTORE_APPLY_LAG_US", "3600000000", 1);
    char url[256], lsdir[256], key[32], val[128], buf[128];
    url_of(url, sizeof url, "ckpt");
    snprintf(lsdir, sizeof lsdir, "%s/ckpt/logstore", base);
    kvq_db *db = open_db(url);
    /* a few items that stay */
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof key, "keep%03d", i);
        assert_int_equal(put(db, key, "kept"), 0);
    }
    memset(val, 'v', sizeof val - 1);
    val[sizeof val - 1] = '\0';
    long rounds = kvq_test_scaled(30);
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < 50; i++) {
            snprintf(key, sizeof key, "q%06ld", r * 50 + i);
            assert_int_equal(put(db, key, val), 0);
        }
        assert_int_equal(del_range(db, "q", "r"), 0);
    }
    kvq_db_close(db);
    size_t n = 0, np = 0;
    assert_int_equal(table_read(lsdir, "", "\xff", "q", &n, &np), 0);
    assert_int_equal(n, 0);
    /* Reopened with the applier at work: it catches up with the log (a write now and then
     * wakes it), and the log before the table's position is recycled. */
    setenv("KVQ_LOGSTORE_APPLY_LAG_US", "0", 1);
    setenv("KVQ_LOGSTORE_APPLY_MS", "5", 1);
    db = open_db(url);
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    int64_t rv;
    assert_int_equal(kvq_txn_get_read_version(&rv, t), 0);
    kvq_txn_destroy(t);
    int segs = 0;
    uint64_t files = 0;
    int64_t tv = 0;
    /* Until the applier catches up (a bound of 6 s or more, wider in slow builds). */
    for (long w = 0; w < 3000 * kvq_test_time_factor(); w++) {
        tv = table_read(lsdir, "", "\xff", "q", &n, &np);
        files = log_files_bytes(lsdir, &segs);
        if (tv >= rv && segs <= 3)
            break;
        kvq__sleep_us(2000);
        if (w % 10 == 0)
            assert_int_equal(put(db, "tick", "t"), 0);
    }
    uint64_t tbytes = file_size(lsdir, "data.db") + file_size(lsdir, "data.db-wal");
    printf("log store: %ld x 50 pushes and pops of 128 bytes (%ld KiB written to the log): "
           "%d segments and %llu bytes of log files left; the table %llu bytes (with its WAL), "
           "%zu keys\n",
           rounds, rounds * 50 * 180 / 1024, segs, (unsigned long long)files,
           (unsigned long long)tbytes, n);
    assert_true(tv >= rv);
    assert_true(segs <= 3);
    /* The table holds the kept items and no popped one; the popped ones were never written to
     * it (their 190 KiB would show in its files). */
    assert_int_equal(np, 0);
    assert_int_equal(table_read(lsdir, "keep", "keeq", "keep", &n, &np) >= rv, 1);
    assert_int_equal(n, 10);
    assert_true(tbytes < 150000);
    /* reads merge the table with the versions after it */
    assert_int_equal(put(db, "keep003", "newer"), 0);
    assert_int_equal(count_range(db, "keep", "keeq"), 10);
    assert_int_equal(get(db, "keep003", buf, sizeof buf), 0);
    assert_string_equal(buf, "newer");
    assert_int_equal(del_range(db, "keep000", "keep002"), 0);
    assert_int_equal(count_range(db, "keep", "keeq"), 8);
    kvq_db_close(db);
    /* recovery: the table + the log after it */
    db = open_db(url);
    assert_int_equal(count_range(db, "keep", "keeq"), 8);
    assert_int_equal(count_range(db, "q", "r"), 0);
    assert_int_equal(get(db, "keep005", buf, sizeof buf), 0);
    assert_string_equal(buf, "kept");
    assert_int_equal(get(db, "keep003", buf, sizeof buf), 0);
    assert_string_equal(buf, "newer");
    assert_int_equal(get(db, "keep001", buf, sizeof buf), 0);
    assert_string_equal(buf, "");
    kvq_db_close(db);
    unsetenv("KVQ_LOGSTORE_SEGMENT_BYTES");
    unsetenv("KVQ_LOGSTORE_CHECKPOINT_BYTES");
    unsetenv("KVQ_LOGSTORE_APPLY_LAG_US");
    unsetenv("KVQ_LOGSTORE_APPLY_MS");
}

/* The memory limit bounds the map, not the data: a commit that would pass it waits for the
 * applier to bring the table up to the newest batch, so that data far larger than the limit is
 * accepted and opens under a lower one. */
static void test_memory_limit(void **state)
{
    (void)state;
    char url[256], key[32], val[1000];
    url_of(url, sizeof url, "mem");
    setenv("KVQ_LOGSTORE_MEMORY_LIMIT", "300000", 1);
    kvq_db *db = open_db(url);
    memset(val, 'm', sizeof val - 1);
    val[sizeof val - 1] = '\0';
    int rc = 0, n = 0;
    long total = kvq_test_scaled(1500);
    for (; n < total; n++) {
        snprintf(key, sizeof key, "m%05d", n);
        if ((rc = put(db, key, val)) != 0)
            break;
    }
    if (rc != 0)
        fprintf(stderr, "push %d: %s\n", n, kvq_last_error());
    assert_int_equal(rc, 0);
    assert_int_equal(count_range(db, "m", "n"), (size_t)total);
    kvq_db_close(db);
    setenv("KVQ_LOGSTORE_MEMORY_LIMIT", "100000", 1);
    db = open_db(url);
    assert_int_equal(count_range(db, "m", "n"), (size_t)total);
    assert_int_equal(del_range(db, "m", "m00100"), 0);
    assert_int_equal(put(db, "after", "ok"), 0);
    assert_int_equal(count_range(db, "m", "n"), (size_t)total - 100);
    kvq_db_close(db);
    unsetenv("KVQ_LOGSTORE_MEMORY_LIMIT");
    db = open_db(url);
    assert_int_equal(count_range(db, "m", "n"), (size_t)total - 100);
    kvq_db_close(db);
}

/* Damaged or missing files of a log store database are reported, never re-created empty. */
static void test_damage_reported(void **state)
{
    (void)state;
    char url[256], dir[256], cmd[600];
    kvq_db *db;
    /* the whole logstore directory gone */
    url_of(url, sizeof url, "dmg1");
    snprintf(dir, sizeof dir, "%s/dmg1", base);
    db = open_db(url);
    assert_int_equal(put(db, "k", "v"), 0);
    kvq_db_close(db);
    snprintf(cmd, sizeof cmd, "%s/logstore", dir);
    assert_int_equal(kt_empty_dir(cmd), 0);
    assert_int_equal(kvq_db_open(&db, url, NULL), KVQ_EDAMAGED);
    assert_int_equal(kvq_db_open(&db, dir, NULL), KVQ_EDAMAGED);
    /* a segment truncated */
    url_of(url, sizeof url, "dmg2");
    snprintf(dir, sizeof dir, "%s/dmg2", base);
    db = open_db(url);
    assert_int_equal(put(db, "k", "v"), 0);
    kvq_db_close(db);
    char seg[512];
    snprintf(seg, sizeof seg, "%s/logstore/log-%016llx.seg", dir, 1ull);
    assert_int_equal(truncate(seg, 4096), 0);
    assert_int_equal(kvq_db_open(&db, url, NULL), KVQ_EDAMAGED);
    assert_int_equal(truncate(seg, 0), 0);
    assert_int_equal(kvq_db_open(&db, url, NULL), KVQ_EDAMAGED);
    /* the table removed, or emptied */
    url_of(url, sizeof url, "dmg3");
    snprintf(dir, sizeof dir, "%s/dmg3", base);
    db = open_db(url);
    assert_int_equal(put(db, "k", "value"), 0);
    kvq_db_close(db);
    char lsdir[300], tpath[400];
    snprintf(lsdir, sizeof lsdir, "%s/logstore", dir);
    snprintf(tpath, sizeof tpath, "%s/data.db", lsdir);
    assert_int_equal(truncate(tpath, 0), 0);
    assert_int_equal(kvq_db_open(&db, url, NULL), KVQ_EDAMAGED);
    assert_int_equal(unlink(tpath), 0);
    assert_int_equal(kvq_db_open(&db, url, NULL), KVQ_EDAMAGED);
    assert_non_null(strstr(kvq_last_error(), "missing"));
    assert_false(exists(lsdir, "data.db"));
}

/* A log store of the earlier format (a checkpoint file and the log, no table) is refused
 * read-only with a message naming the way to convert it, and converted by a read-write open:
 * the checkpoint's data and the log's are all there. */
static void test_old_format_converted(void **state)
{
    (void)state;
    char url[256], dir[256], lsdir[300], cmd[1400], buf[64];
    url_of(url, sizeof url, "old");
    snprintf(dir, sizeof dir, "%s/old", base);
    snprintf(lsdir, sizeof lsdir, "%s/logstore", dir);
    kvq_db *db = open_db(url);
    assert_int_equal(put(db, "fromlog", "L"), 0);
    kvq_db_close(db);
    /* make it the earlier format: no table, a checkpoint of version 5 from the log's start */
    snprintf(cmd, sizeof cmd, "rm -f %s/data.db %s/data.db-wal %s/data.db-shm %s/format", lsdir,
             lsdir, lsdir, lsdir);
    assert_int_equal(system(cmd), 0);
    int dfd = open(lsdir, O_RDONLY | O_DIRECTORY);
    assert_true(dfd >= 0);
    kvq__vmap *m = kvq__vmap_new(0);
    kvq__vmap_wrlock(m);
    assert_int_equal(
        kvq__vmap_set(m, 5, (const uint8_t *)"fromckpt", 8, (const uint8_t *)"C", 1), 0);
    kvq__vmap_wrunlock(m);
    kvq__ckpt_info ci;
    assert_int_equal(kvq__ckpt_write(dfd, m, 5, 0, 0600, &ci), 0);
    kvq__vmap_free(m);
    close(dfd);
    kvq_db_options ro = KVQ_DB_OPTIONS_INIT;
    ro.flags = KVQ_DB_READ_ONLY;
    assert_int_equal(kvq_db_open(&db, dir, &ro), KVQ_EUNSUPPORTED);
    assert_non_null(strstr(kvq_last_error(), "convert"));
    assert_non_null(strstr(kvq_last_error(), "kvq --db"));
    assert_false(exists(lsdir, "data.db"));
    db = open_db(dir);
    assert_int_equal(get(db, "fromckpt", buf, sizeof buf), 0);
    assert_string_equal(buf, "C");
    assert_int_equal(get(db, "fromlog", buf, sizeof buf), 0);
    assert_string_equal(buf, "L");
    kvq_db_close(db);
    assert_true(exists(lsdir, "data.db"));
    assert_true(exists(lsdir, "format"));
    char ck[64];
    snprintf(ck, sizeof ck, "ckpt-%016llx.kvq", 5ull);
    assert_false(exists(lsdir, ck));
    db = open_db(dir);
    assert_int_equal(get(db, "fromckpt", buf, sizeof buf), 0);
    assert_string_equal(buf, "C");
    kvq_db_close(db);
}

/* ---- kill -9 at each step, and power cuts ---- */

static const char *kill_step;
static long kill_after;

/* Called by the committing thread and by the checkpoint thread (its applier syncs the log too):
 * the step and the count are shared, so they are atomic. */
static void kill_hook(const char *step)
{
    const char *want = __atomic_load_n(&kill_step, __ATOMIC_ACQUIRE);
    if (want && strcmp(step, want) == 0 &&
        __atomic_sub_fetch(&kill_after, 1, __ATOMIC_ACQ_REL) <= 0)
        kill(getpid(), SIGKILL);
}

/* Child: commits keys c<i> one at a time (several threads' worth are not needed: the steps are
 * the same), writing each acknowledged i to fd. */
static void child_run(const char *url, int ackfd, const char *step, long after)
{
    /* The hooks are set before the open starts the checkpoint thread, which reads them; they
     * count steps only once the step is named, after the open (as the commits' steps). */
    kvq__log_test_hook = kill_hook;
    kvq__ckpt_test_hook = kill_hook;
    kvq_db *db;
    if (kvq_db_open(&db, url, NULL) != 0)
        _exit(3);
    __atomic_store_n(&kill_after, after, __ATOMIC_RELEASE);
    __atomic_store_n(&kill_step, step, __ATOMIC_RELEASE);
    char key[32], val[200];
    memset(val, 'p', sizeof val - 1);
    val[sizeof val - 1] = '\0';
    for (int i = 0; i < 4000; i++) {
        snprintf(key, sizeof key, "c%06d", i);
        int rc = put(db, key, val);
        if (rc != 0) {
            fprintf(stderr, "child: commit %d: %s (%s)\n", i, kvq_strerror(rc), kvq_last_error());
            _exit(4);
        }
        if (write(ackfd, &i, sizeof i) != (ssize_t)sizeof i)
            _exit(5);
        if (i % 7 == 6) {
            /* pops too, so that checkpoints have something to drop */
            char b[32], e[32];
            snprintf(b, sizeof b, "c%06d", i - 6);
            snprintf(e, sizeof e, "c%06d", i - 3);
            if (del_range(db, b, e) != 0)
                _exit(6);
        }
    }
    _exit(0);
}

/* Zeroes or keeps, at random, each 4 KiB page of the log after the synced position: what a
 * power cut may leave of writes not yet synced. */
static void power_cut(const char *lsdir, kvq__rng *r)
{
    uint64_t synced, tail, sb;
    assert_int_equal(kvq__log_peek(lsdir, &synced, &tail, &sb), 0);
    assert_true(synced <= tail);
    uint64_t dropped = 0, kept = 0;
    /* page by page from the synced position to the tail: each page's unsynced part is lost
     * (zero, as the preallocated file was) or kept, at random */
    /* past the tail too: a writer that died may have left an unacknowledged record there */
    uint64_t end = tail + 65536;
    for (uint64_t pg = synced & ~(uint64_t)4095; pg < end; pg += 4096) {
        uint64_t from = pg < synced ? synced : pg;
        uint64_t to = pg + 4096 < end ? pg + 4096 : end;
        if (from / sb != (to - 1) / sb || from % sb < KVQ__LOG_SEG_HEADER)
            continue; /* segment headers are synced when the segment is made */
        if (kvq__rng_next(r) % 2) {
            kept++;
            continue;
        }
        char seg[512];
        tl_seg_path(seg, sizeof seg, lsdir, (unsigned long long)(from / sb));
        int fd = open(seg, O_RDWR);
        if (fd < 0)
            continue;
        static const uint8_t zeros[4096];
        assert_int_equal(pwrite(fd, zeros, (size_t)(to - from), (off_t)(from % sb)),
                         (ssize_t)(to - from));
        close(fd);
        dropped++;
    }
    printf("power cut: %llu unsynced bytes, %llu pages dropped, %llu kept\n",
           (unsigned long long)(tail - synced), (unsigned long long)dropped,
           (unsigned long long)kept);
}

static void check_after_crash(const char *url, const int *acked, int n_acked, const char *what)
{
    kvq_db *db = NULL;
    int rc = kvq_db_open(&db, url, NULL);
    if (rc != 0)
        fprintf(stderr, "%s: reopen: %s\n", what, kvq_last_error());
    assert_int_equal(rc, 0);
    char key[32], buf[256];
    for (int j = 0; j < n_acked; j++) {
        int i = acked[j];
        /* popped ones: i % 7 in 0..2 of a finished group of 7 */
        int group_done = (i / 7) * 7 + 6 <= acked[n_acked - 1];
        if (group_done && i % 7 < 3)
            continue;
        snprintf(key, sizeof key, "c%06d", i);
        assert_int_equal(get(db, key, buf, sizeof buf), 0);
        if (strlen(buf) != 199) {
            fprintf(stderr, "%s: acknowledged key %s is missing\n", what, key);
            fail();
        }
    }
    kvq_db_close(db);
}

static void crash_at(const char *step, long after, int cut)
{
    char url[256], name[64], lsdir[300];
    snprintf(name, sizeof name, "crash-%s-%ld-%d", step, after, cut);
    url_of(url, sizeof url, name);
    snprintf(lsdir, sizeof lsdir, "%s/%s/logstore", base, name);
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        child_run(url, pfd[1], step, after);
    }
    close(pfd[1]);
    static int acked[200000];
    int n = 0, v;
    while (read(pfd[0], &v, sizeof v) == (ssize_t)sizeof v)
        acked[n++] = v;
    close(pfd[0]);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)) {
        fprintf(stderr, "step %s: the child was not killed there (status %d)\n", step, st);
        fail();
    }
    if (cut) {
        kvq__rng r = { tl_seed() ^ (uint64_t)after };
        power_cut(lsdir, &r);
    }
    char what[128];
    snprintf(what, sizeof what, "kill -9 at %s #%ld%s", step, after, cut ? " + power cut" : "");
    printf("%s: %d acknowledged commits\n", what, n);
    check_after_crash(url, acked, n, what);
}

static void test_kill9_at_each_step(void **state)
{
    (void)state;
    setenv("KVQ_LOGSTORE_SEGMENT_BYTES", "131072", 1);
    setenv("KVQ_LOGSTORE_CHECKPOINT_BYTES", "100000", 1);
    /* the applier at work all the time: a pass every few milliseconds, up to the newest */
    setenv("KVQ_LOGSTORE_APPLY_LAG_US", "0", 1);
    setenv("KVQ_LOGSTORE_APPLY_MS", "3", 1);
    static const struct {
        const char *step;
        long after;
    } steps[] = {
        { "append.before", 30 },      { "append.after_pwrite", 40 },
        { "append.after_tail", 50 },  { "sync.before", 60 },
        { "sync.after", 70 },         { "segment.renamed", 1 },
        { "segment.renamed", 3 },     { "apply.committed", 1 },
        { "apply.committed", 3 },     { "apply.synced", 1 },
        { "apply.synced", 2 },        { "apply.released", 1 },
        { "apply.released", 3 },
        { "release.renamed", 1 },     { "release.renamed", 2 },
    };
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        crash_at(steps[i].step, steps[i].after, 0);
    /* A power cut on top: what was written but not synced is lost, page by page. */
    crash_at("append.after_pwrite", 45, 1);
    crash_at("append.after_tail", 55, 1);
    crash_at("sync.before", 65, 1);
    crash_at("segment.renamed", 2, 1);
    crash_at("apply.committed", 2, 1);
    crash_at("apply.synced", 2, 1);
    unsetenv("KVQ_LOGSTORE_SEGMENT_BYTES");
    unsetenv("KVQ_LOGSTORE_CHECKPOINT_BYTES");
    unsetenv("KVQ_LOGSTORE_APPLY_LAG_US");
    unsetenv("KVQ_LOGSTORE_APPLY_MS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choose_and_reopen),
        cmocka_unit_test(test_old_read_version),
        cmocka_unit_test(test_read_version_older_than_table),
        cmocka_unit_test(test_applier_bounds_the_log),
        cmocka_unit_test(test_memory_limit),
        cmocka_unit_test(test_damage_reported),
        cmocka_unit_test(test_old_format_converted),
        cmocka_unit_test(test_kill9_at_each_step),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
