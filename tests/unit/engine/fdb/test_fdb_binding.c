/* Tests of the fdb engine (kvq's libfdb_c binding) through libkvq_fdb_c.so (src/fdbc), which
 * implements libfdb_c's functions on the embedded engine, here set to answer range reads in
 * pages of 3 rows ($KVQ_FDBC_PAGE_ROWS). They test the binding, not FoundationDB.
 *
 * The order matters: the library is loaded, and the API version selected, once per process, so
 * the tests of a missing library and of version selection come first. */
#include "kvq_test.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq/testing.h"
#include "engine/fdb/fdb_api.h"

#ifndef KVQ_FDBC_PATH
#define KVQ_FDBC_PATH ""
#endif

static char g_dir[256];
static char g_url[300];
static kvq_db *g_db;

static int have_library(void)
{
    return KVQ_FDBC_PATH[0] != '\0' && access(KVQ_FDBC_PATH, R_OK) == 0;
}

/* Opening --------------------------------------------------------------------------------- */

static void test_bad_api_version(void **state)
{
    (void)state;
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    kvq_db *db = (kvq_db *)1;
    o.api_version = 600;
    assert_int_equal(kvq_db_open(&db, "fdb:", &o), KVQ_EAPI_VERSION_INVALID);
    assert_null(db);
    assert_non_null(strstr(kvq_last_error(), "710"));
    o.api_version = 0;
    assert_int_equal(kvq_db_open(&db, "fdb:", &o), KVQ_EAPI_VERSION_INVALID);
}

static void test_missing_library(void **state)
{
    (void)state;
    void *sys = dlopen("libfdb_c.so", RTLD_NOW | RTLD_LOCAL);
    if (sys != NULL) {
        dlclose(sys);
        skip(); /* a real client is installed here */
    }
    setenv("KVQ_FDB_LIB", "/nonexistent/kvq-test/libfdb_c.so", 1);
    const char *urls[] = { "fdb:", "fdb:/etc/foundationdb/fdb.cluster" };
    for (size_t i = 0; i < 2; i++) {
        kvq_db *db = (kvq_db *)1;
        assert_int_equal(kvq_db_open(&db, urls[i], NULL), KVQ_ENOENGINE);
        assert_null(db);
        const char *msg = kvq_last_error();
        assert_non_null(strstr(msg, "libfdb_c.so"));
        assert_non_null(strstr(msg, "foundationdb-clients"));
        assert_non_null(strstr(msg, "$KVQ_FDB_LIB"));
        assert_non_null(strstr(msg, "/nonexistent/kvq-test/libfdb_c.so"));
    }
    /* A library that is not libfdb_c. */
    setenv("KVQ_FDB_LIB", "libc.so.6", 1);
    kvq_db *db = NULL;
    assert_int_equal(kvq_db_open(&db, "fdb:", NULL), KVQ_ENOENGINE);
    assert_non_null(strstr(kvq_last_error(), "has no symbol fdb_"));
    unsetenv("KVQ_FDB_LIB");
}

static void test_api_version_not_supported(void **state)
{
    (void)state;
    if (!have_library())
        skip();
    setenv("KVQ_FDB_LIB", KVQ_FDBC_PATH, 1);
    /* The library plays a 7.1 client. */
    setenv("KVQ_FDBC_MAX_API_VERSION", "710", 1);
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.api_version = 730;
    kvq_db *db = NULL;
    assert_int_equal(kvq_db_open(&db, "fdb:", &o), KVQ_EAPI_VERSION_NOT_SUPPORTED);
    assert_non_null(strstr(kvq_last_error(), "at most 710"));
    unsetenv("KVQ_FDBC_MAX_API_VERSION");
}

static int group_setup(void **state)
{
    (void)state;
    if (!have_library())
        return 0;
    if (kt_mkdtemp(g_dir, sizeof(g_dir), "fdb-binding") != 0)
        return -1;
    char db_dir[300];
    snprintf(db_dir, sizeof(db_dir), "%s/db", g_dir);
    setenv("KVQ_FDB_LIB", KVQ_FDBC_PATH, 1);
    setenv("KVQ_FDBC_DIR", db_dir, 1);
    setenv("KVQ_FDBC_PAGE_ROWS", "3", 1);
    snprintf(g_url, sizeof(g_url), "fdb:");
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    kvq_db_close(g_db);
    g_db = NULL;
    if (g_dir[0] != '\0')
        (void)kt_rm_rf(g_dir);
    return 0;
}

static void test_open(void **state)
{
    (void)state;
    if (!have_library())
        skip();
    assert_int_equal(kvq_db_open(&g_db, g_url, NULL), 0);
    assert_string_equal(kvq_db_get_engine(g_db), "fdb");
    /* The version is chosen once per process. */
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.api_version = 730;
    kvq_db *db = NULL;
    assert_int_equal(kvq_db_open(&db, "fdb:", &o), KVQ_EAPI_VERSION_INVALID);
    assert_non_null(strstr(kvq_last_error(), "already selected"));
    /* A second handle on the same cluster. */
    assert_int_equal(kvq_db_open(&db, "fdb:", NULL), 0);
    kvq_db_close(db);
}

/* The path after "fdb:" is the cluster file given to fdb_create_database. */
static void test_cluster_file(void **state)
{
    (void)state;
    if (!have_library())
        skip();
    kvq_db *db = NULL;
    int rc = kvq_db_open(&db, "fdb:/nonexistent/kvq-test/fdb.cluster", NULL);
    assert_int_equal(rc, 1515); /* FoundationDB's no_cluster_file_found */
    assert_non_null(strstr(kvq_last_error(), "/nonexistent/kvq-test/fdb.cluster"));

    /* Without $KVQ_FDBC_DIR the library takes its directory from the cluster file. */
    char cf[300], other[300], url[320];
    snprintf(cf, sizeof(cf), "%s/test.cluster", g_dir);
    snprintf(other, sizeof(other), "%s/other", g_dir);
    FILE *fp = fopen(cf, "w");
    assert_non_null(fp);
    fprintf(fp, "kvq:%s\n", other);
    fclose(fp);
    char *saved = strdup(getenv("KVQ_FDBC_DIR"));
    unsetenv("KVQ_FDBC_DIR");
    snprintf(url, sizeof(url), "fdb:%s", cf);
    rc = kvq_db_open(&db, url, NULL);
    setenv("KVQ_FDBC_DIR", saved, 1);
    free(saved);
    assert_int_equal(rc, 0);
    kvq_db_close(db);
    struct stat st;
    assert_int_equal(stat(other, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
}

/* Reads and writes ------------------------------------------------------------------------ */

static const uint8_t *B(const char *s)
{
    return (const uint8_t *)s;
}

static void put(const char *k, const char *v)
{
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, g_db), 0);
    assert_int_equal(kvq_txn_set(t, B(k), strlen(k), B(v), strlen(v)), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
}

static void clear_all(void)
{
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, g_db), 0);
    assert_int_equal(kvq_txn_clear_range(t, B(""), 0, B("\xff"), 1), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
}

/* A test's start: skipped without a database, else an empty one and a transaction on it. */
static kvq_txn *fresh_txn(void)
{
    if (g_db == NULL)
        skip();
    clear_all();
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, g_db), 0);
    return t;
}

static void assert_value(kvq_bytes b, const char *s)
{
    assert_int_equal(b.len, strlen(s));
    assert_memory_equal(b.data, s, b.len);
}

static void test_set_get_commit(void **state)
{
    (void)state;
    kvq_txn *t = fresh_txn();
    kvq_bytes v;
    int present = 1;
    assert_int_equal(kvq_txn_get(&v, &present, t, B("a"), 1, 0), 0);
    assert_int_equal(present, 0);
    assert_int_equal(kvq_txn_set(t, B("a"), 1, B("one"), 3), 0);
    assert_int_equal(kvq_txn_set(t, B(""), 0, B("empty key"), 9), 0);
    /* Read your own writes; the first value stays valid after later reads. */
    assert_int_equal(kvq_txn_get(&v, &present, t, B("a"), 1, 0), 0);
    assert_int_equal(present, 1);
    kvq_bytes v2;
    assert_int_equal(kvq_txn_get(&v2, &present, t, B(""), 0, KVQ_SNAPSHOT), 0);
    assert_value(v, "one");
    assert_value(v2, "empty key");
    assert_int_equal(kvq_txn_commit(t), 0);
    int64_t cv = 0;
    assert_int_equal(kvq_txn_get_committed_version(&cv, t), 0);
    assert_true(cv > 0);
    /* Used after its commit, as on the embedded engine. */
    assert_int_equal(kvq_txn_get(&v, &present, t, B("a"), 1, 0), KVQ_EUSED_DURING_COMMIT);
    kvq_txn_reset(t);
    int64_t rv = 0;
    assert_int_equal(kvq_txn_get_read_version(&rv, t), 0);
    assert_true(rv >= cv);
    assert_int_equal(kvq_txn_get(&v, &present, t, B("a"), 1, 0), 0);
    assert_int_equal(present, 1);
    assert_value(v, "one");
    /* Clear, then a read-only commit: no commit version. */
    assert_int_equal(kvq_txn_clear(t, B("a"), 1), 0);
    assert_int_equal(kvq_txn_get(&v, &present, t, B("a"), 1, 0), 0);
    assert_int_equal(present, 0);
    kvq_txn_reset(t);
    assert_int_equal(kvq_txn_get(&v, &present, t, B("a"), 1, 0), 0);
    assert_int_equal(present, 1);
    assert_int_equal(kvq_txn_commit(t), 0);
    assert_int_equal(kvq_txn_get_committed_version(&cv, t), KVQ_ENO_COMMIT_VERSION);
    uint8_t stamp[10];
    assert_int_equal(kvq_txn_get_versionstamp(stamp, t), KVQ_ENO_COMMIT_VERSION);
    kvq_txn_destroy(t);
}

static void test_atomic_add(void **state)
{
    (void)state;
    kvq_txn *t = fresh_txn();
    uint8_t one[8] = { 1 }, five[8] = { 5 };
    assert_int_equal(kvq_txn_atomic_op(t, B("n"), 1, one, 8, KVQ_MUT_ADD), 0);
    assert_int_equal(kvq_txn_atomic_op(t, B("n"), 1, five, 8, KVQ_MUT_ADD), 0);
    kvq_bytes v;
    int present = 0;
    assert_int_equal(kvq_txn_get(&v, &present, t, B("n"), 1, 0), 0);
    assert_int_equal(present, 1);
    assert_int_equal(v.len, 8);
    assert_int_equal(v.data[0], 6);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_reset(t);
    assert_int_equal(kvq_txn_atomic_op(t, B("n"), 1, five, 8, KVQ_MUT_ADD), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_reset(t);
    assert_int_equal(kvq_txn_get(&v, &present, t, B("n"), 1, 0), 0);
    assert_int_equal(v.data[0], 11);
    kvq_txn_destroy(t);
}

/* Ten keys k00..k09 with values v00..v09. */
static void put_ten(void)
{
    clear_all();
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, g_db), 0);
    for (int i = 0; i < 10; i++) {
        char k[16], v[16]; /* room for any int, so -Wformat-truncation is quiet */
        snprintf(k, sizeof(k), "k%02d", i);
        snprintf(v, sizeof(v), "v%02d", i);
        assert_int_equal(kvq_txn_set(t, B(k), 3, B(v), 3), 0);
    }
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
}

static void assert_keys(const kvq_kv *kvs, size_t n, int first, int step)
{
    for (size_t i = 0; i < n; i++) {
        char k[8], v[8];
        int idx = first + (int)i * step;
        snprintf(k, sizeof(k), "k%02d", idx);
        snprintf(v, sizeof(v), "v%02d", idx);
        assert_value(kvs[i].key, k);
        assert_value(kvs[i].value, v);
    }
}

/* The library answers 3 rows at a time: every read below takes several calls. */
static void test_range_paging(void **state)
{
    (void)state;
    if (g_db == NULL)
        skip();
    put_ten();
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, g_db), 0);
    const kvq_kv *all, *kvs;
    size_t n = 0, nall = 0;
    bool more = true;
    assert_int_equal(kvq_txn_get_range(&all, &nall, &more, t, B("k"), 1, B("l"), 1, 0, 0), 0);
    assert_int_equal(nall, 10);
    assert_int_equal(more, 0);
    assert_keys(all, nall, 0, 1);

    assert_int_equal(kvq_txn_get_range(&kvs, &n, &more, t, B("k"), 1, B("l"), 1, 7, 0), 0);
    assert_int_equal(n, 7);
    assert_int_equal(more, 1);
    assert_keys(kvs, n, 0, 1);

    assert_int_equal(kvq_txn_get_range(&kvs, &n, &more, t, B("k"), 1, B("l"), 1, 5, KVQ_REVERSE),
                     0);
    assert_int_equal(n, 5);
    assert_int_equal(more, 1);
    assert_keys(kvs, n, 9, -1);

    assert_int_equal(
        kvq_txn_get_range(&kvs, &n, &more, t, B("k"), 1, B("l"), 1, 0, KVQ_REVERSE | KVQ_SNAPSHOT),
        0);
    assert_int_equal(n, 10);
    assert_int_equal(more, 0);
    assert_keys(kvs, n, 9, -1);

    /* A limit larger than the range. */
    assert_int_equal(kvq_txn_get_range(&kvs, &n, &more, t, B("k03"), 3, B("k05"), 3, 50, 0), 0);
    assert_int_equal(n, 2);
    assert_int_equal(more, 0);
    assert_keys(kvs, n, 3, 1);

    /* Pages see this transaction's writes. */
    assert_int_equal(kvq_txn_clear(t, B("k04"), 3), 0);
    assert_int_equal(kvq_txn_set(t, B("k045"), 4, B("new"), 3), 0);
    assert_int_equal(kvq_txn_get_range(&kvs, &n, &more, t, B("k"), 1, B("l"), 1, 0, 0), 0);
    assert_int_equal(n, 10);
    assert_value(kvs[4].key, "k045");
    assert_value(kvs[4].value, "new");
    assert_value(kvs[5].key, "k05");

    /* Everything returned earlier is still valid. */
    assert_keys(all, nall, 0, 1);
    kvq_txn_destroy(t);
}

/* Conflicts ------------------------------------------------------------------------------- */

/* Under a's reads, b writes key (= value) and commits; then a writes and commits: want is 0
 * when a's reads did not cover key, KVQ_ENOT_COMMITTED when they did. */
static void write_under(kvq_txn *a, kvq_txn *b, const char *key, const char *value, int want)
{
    assert_int_equal(kvq_txn_set(b, B(key), strlen(key), B(value), strlen(value)), 0);
    assert_int_equal(kvq_txn_commit(b), 0);
    assert_int_equal(kvq_txn_set(a, B("x"), 1, B("a"), 1), 0);
    assert_int_equal(kvq_txn_commit(a), want);
}

static void test_conflict(void **state)
{
    (void)state;
    if (g_db == NULL)
        skip();
    put_ten();
    kvq_txn *a, *b;
    assert_int_equal(kvq_txn_create(&a, g_db), 0);
    assert_int_equal(kvq_txn_create(&b, g_db), 0);
    kvq_bytes v;
    int present;
    assert_int_equal(kvq_txn_get(&v, &present, a, B("k01"), 3, 0), 0);
    write_under(a, b, "k01", "b", KVQ_ENOT_COMMITTED);

    /* A snapshot read adds no conflict. */
    kvq_txn_reset(a);
    kvq_txn_reset(b);
    assert_int_equal(kvq_txn_get(&v, &present, a, B("k01"), 3, KVQ_SNAPSHOT), 0);
    write_under(a, b, "k01", "c", 0);

    /* A limited range read conflicts only up to the last key it returned, across pages:
     * 5 keys (two pages) cover k00..k04. */
    const kvq_kv *kvs;
    size_t n;
    for (int round = 0; round < 2; round++) {
        kvq_txn_reset(a);
        kvq_txn_reset(b);
        assert_int_equal(kvq_txn_get_range(&kvs, &n, NULL, a, B("k"), 1, B("l"), 1, 5, 0), 0);
        assert_int_equal(n, 5);
        const char *k = round == 0 ? "k07" : "k04";
        write_under(a, b, k, "w", round == 0 ? 0 : KVQ_ENOT_COMMITTED);
    }

    /* Reverse: from the last key returned to the end. */
    for (int round = 0; round < 2; round++) {
        kvq_txn_reset(a);
        kvq_txn_reset(b);
        assert_int_equal(kvq_txn_get_range(&kvs, &n, NULL, a, B("k"), 1, B("l"), 1, 4, KVQ_REVERSE),
                         0);
        assert_int_equal(n, 4);
        const char *k = round == 0 ? "k05" : "k06";
        write_under(a, b, k, "w", round == 0 ? 0 : KVQ_ENOT_COMMITTED);
    }

    /* Explicit conflict ranges. */
    kvq_txn_reset(a);
    kvq_txn_reset(b);
    int64_t rv;
    assert_int_equal(kvq_txn_get_read_version(&rv, a), 0);
    assert_int_equal(kvq_txn_add_conflict_range(a, B("p"), 1, B("q"), 1, KVQ_CONFLICT_READ), 0);
    assert_int_equal(kvq_txn_add_conflict_range(b, B("p5"), 2, B("p6"), 2, KVQ_CONFLICT_WRITE), 0);
    assert_int_equal(kvq_txn_commit(b), 0);
    assert_int_equal(kvq_txn_set(a, B("x"), 1, B("a"), 1), 0);
    assert_int_equal(kvq_txn_commit(a), KVQ_ENOT_COMMITTED);
    kvq_txn_destroy(a);
    kvq_txn_destroy(b);
}

typedef struct counter_arg {
    int rounds;
} counter_arg;

static int incr(kvq_txn *t, void *p)
{
    (void)p;
    kvq_bytes v;
    int present = 0;
    int rc = kvq_txn_get(&v, &present, t, B("counter"), 7, 0);
    if (rc != 0)
        return rc;
    unsigned int n = 0;
    if (present && v.len == 4)
        memcpy(&n, v.data, 4);
    n++;
    return kvq_txn_set(t, B("counter"), 7, (const uint8_t *)&n, 4);
}

static void *incr_thread(void *p)
{
    counter_arg *a = p;
    for (int i = 0; i < a->rounds; i++)
        if (kvq_db_transact(g_db, incr, NULL) != 0)
            return (void *)1;
    return NULL;
}

/* kvq's retry loop over the fdb engine: concurrent read-modify-writes conflict, retry and lose
 * nothing. */
static void test_retry_loop(void **state)
{
    (void)state;
    if (g_db == NULL)
        skip();
    clear_all();
    kvq_db_stats before, after;
    assert_int_equal(kvq_db_get_stats(&before, g_db), 0);
    pthread_t th[4];
    counter_arg arg = { 25 };
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&th[i], NULL, incr_thread, &arg), 0);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(th[i], &r);
        assert_null(r);
    }
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, g_db), 0);
    kvq_bytes v;
    int present = 0;
    assert_int_equal(kvq_txn_get(&v, &present, t, B("counter"), 7, 0), 0);
    unsigned int n = 0;
    memcpy(&n, v.data, 4);
    assert_int_equal(n, 100);
    kvq_txn_destroy(t);
    assert_int_equal(kvq_db_get_stats(&after, g_db), 0);
    assert_true(after.commits - before.commits >= 100);
    assert_int_equal(after.conflicts - before.conflicts, after.retries - before.retries);
}

/* Versionstamps --------------------------------------------------------------------------- */

static void test_versionstamp(void **state)
{
    (void)state;
    kvq_txn *t = fresh_txn();
    /* "vs/" + 10 placeholder bytes + offset 3 (little-endian). */
    uint8_t key[17] = { 'v', 's', '/' };
    memset(key + 3, 0xff, 10);
    key[13] = 3;
    assert_int_equal(kvq_txn_set_versionstamped_key(t, key, sizeof(key), B("item"), 4), 0);
    uint8_t val[16] = { 'x', 'y' };
    memset(val + 2, 0, 10);
    val[12] = 2;
    assert_int_equal(kvq_txn_set_versionstamped_value(t, B("stamped"), 7, val, 16), 0);
    /* The span the key may take is unreadable in this transaction. */
    const kvq_kv *kvs;
    size_t n;
    assert_int_equal(kvq_txn_get_range(&kvs, &n, NULL, t, B("vs/"), 3, B("vs0"), 3, 0, 0),
                     KVQ_EACCESSED_UNREADABLE);
    uint8_t stamp[10];
    assert_int_equal(kvq_txn_get_versionstamp(stamp, t), KVQ_ENO_COMMIT_VERSION);
    assert_int_equal(kvq_txn_commit(t), 0);
    assert_int_equal(kvq_txn_get_versionstamp(stamp, t), 0);
    int64_t cv;
    assert_int_equal(kvq_txn_get_committed_version(&cv, t), 0);
    uint64_t sv = 0;
    for (int i = 0; i < 8; i++)
        sv = sv << 8 | stamp[i];
    assert_int_equal((int64_t)sv, cv);

    kvq_txn_reset(t);
    assert_int_equal(kvq_txn_get_range(&kvs, &n, NULL, t, B("vs/"), 3, B("vs0"), 3, 0, 0), 0);
    assert_int_equal(n, 1);
    assert_int_equal(kvs[0].key.len, 13);
    assert_memory_equal(kvs[0].key.data + 3, stamp, 10);
    assert_value(kvs[0].value, "item");
    kvq_bytes v;
    int present = 0;
    assert_int_equal(kvq_txn_get(&v, &present, t, B("stamped"), 7, 0), 0);
    assert_int_equal(v.len, 12);
    assert_memory_equal(v.data + 2, stamp, 10);

    /* A later commit has a larger stamp. */
    kvq_txn_reset(t);
    assert_int_equal(kvq_txn_set_versionstamped_key(t, key, sizeof(key), B("two"), 3), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    uint8_t stamp2[10];
    assert_int_equal(kvq_txn_get_versionstamp(stamp2, t), 0);
    assert_true(memcmp(stamp2, stamp, 10) > 0);
    kvq_txn_destroy(t);
}

/* Watches --------------------------------------------------------------------------------- */

static kvq_watch *watch_key(const char *k)
{
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, g_db), 0);
    kvq_watch *w = NULL;
    assert_int_equal(kvq_txn_watch(&w, t, B(k), strlen(k)), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
    return w;
}

static void test_watch(void **state)
{
    (void)state;
    if (g_db == NULL)
        skip();
    clear_all();
    put("w", "0");
    kvq_watch *w = watch_key("w");
    assert_int_equal(kvq_watch_wait(w, 0), KVQ_ETIMED_OUT);
    assert_int_equal(kvq_watch_wait(w, 50), KVQ_ETIMED_OUT);
    put("w", "1");
    assert_int_equal(kvq_watch_wait(w, 5000), 0);
    kvq_watch_destroy(w);

    /* Destroyed before it fires: the FDB watch is cancelled. */
    w = watch_key("w");
    kvq_watch_destroy(w);
    w = watch_key("w");
    kvq_watch_cancel(w);
    assert_int_equal(kvq_watch_wait(w, 1000), KVQ_EWATCH_CANCELLED);
    kvq_watch_destroy(w);

    /* Reset before commit: 1025. */
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, g_db), 0);
    assert_int_equal(kvq_txn_watch(&w, t, B("w"), 1), 0);
    kvq_txn_reset(t);
    assert_int_equal(kvq_watch_wait(w, 5000), KVQ_ETRANSACTION_CANCELLED);
    kvq_watch_destroy(w);

    /* A failed commit fails its watch with the commit's error. */
    kvq_txn *other;
    assert_int_equal(kvq_txn_create(&other, g_db), 0);
    kvq_bytes v;
    int present;
    assert_int_equal(kvq_txn_get(&v, &present, t, B("w"), 1, 0), 0);
    assert_int_equal(kvq_txn_watch(&w, t, B("w"), 1), 0);
    assert_int_equal(kvq_txn_set(other, B("w"), 1, B("2"), 1), 0);
    assert_int_equal(kvq_txn_commit(other), 0);
    assert_int_equal(kvq_txn_set(t, B("y"), 1, B("2"), 1), 0);
    assert_int_equal(kvq_txn_commit(t), KVQ_ENOT_COMMITTED);
    assert_int_equal(kvq_watch_wait(w, 5000), KVQ_ENOT_COMMITTED);
    kvq_watch_destroy(w);
    kvq_txn_destroy(other);

    /* A watch that outlives its transaction, fired by a write of its own value change. */
    kvq_txn_reset(t);
    assert_int_equal(kvq_txn_set(t, B("w"), 1, B("mine"), 4), 0);
    assert_int_equal(kvq_txn_watch(&w, t, B("w"), 1), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
    assert_int_equal(kvq_watch_wait(w, 50), KVQ_ETIMED_OUT);
    put("w", "changed");
    assert_int_equal(kvq_watch_wait(w, 5000), 0);
    kvq_watch_destroy(w);
}

/* Engine options -------------------------------------------------------------------------- */

/* Opens another handle with options o, commits one write of key k there and returns the
 * commit's result; *faults gets the handle's count of injected faults. */
static int
commit_with(const kvq_db_options *o, const kvq_testing_options *to, const char *k, uint64_t *faults)
{
    kvq_db *db;
    assert_int_equal(kvq_db_open_testing(&db, g_url, o, to), 0);
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_set(t, B(k), strlen(k), B("1"), 1), 0);
    int rc = kvq_txn_commit(t);
    kvq_db_stats st;
    assert_int_equal(kvq_db_get_stats(&st, db), 0);
    *faults = st.injected_faults;
    kvq_txn_destroy(t);
    kvq_db_close(db);
    return rc;
}

static void test_fault_injection(void **state)
{
    (void)state;
    if (g_db == NULL)
        skip();
    clear_all();
    kvq_testing_options o = KVQ_TESTING_OPTIONS_INIT;
    o.fault_rate = 1.0;
    uint64_t faults = 0;
    o.fault_kinds = KVQ_FAULT_NOT_COMMITTED;
    assert_int_equal(commit_with(NULL, &o, "f", &faults), KVQ_ENOT_COMMITTED);
    assert_int_equal(faults, 1);
    o.fault_kinds = KVQ_FAULT_UNKNOWN_NOT_COMMITTED;
    assert_int_equal(commit_with(NULL, &o, "h", &faults), KVQ_ECOMMIT_UNKNOWN_RESULT);
    o.fault_kinds = KVQ_FAULT_UNKNOWN_COMMITTED;
    assert_int_equal(commit_with(NULL, &o, "g", &faults), KVQ_ECOMMIT_UNKNOWN_RESULT);

    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, g_db), 0);
    kvq_bytes v;
    int present = 1;
    assert_int_equal(kvq_txn_get(&v, &present, t, B("f"), 1, 0), 0);
    assert_int_equal(present, 0);
    assert_int_equal(kvq_txn_get(&v, &present, t, B("h"), 1, 0), 0);
    assert_int_equal(present, 0);
    assert_int_equal(kvq_txn_get(&v, &present, t, B("g"), 1, 0), 0);
    assert_int_equal(present, 1);
    kvq_txn_destroy(t);
}

static void test_read_only_and_skip_conflicts(void **state)
{
    (void)state;
    if (g_db == NULL)
        skip();
    clear_all();
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.flags = KVQ_DB_READ_ONLY;
    uint64_t faults;
    assert_int_equal(commit_with(&o, NULL, "r", &faults), KVQ_EPERM);

    /* The test knob that must make 1020 impossible. */
    kvq_testing_options to = KVQ_TESTING_OPTIONS_INIT;
    to.flags = KVQ_TEST_SKIP_CONFLICT_CHECK;
    kvq_db *db;
    assert_int_equal(kvq_db_open_testing(&db, g_url, NULL, &to), 0);
    kvq_txn *t, *b;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_create(&b, g_db), 0);
    kvq_bytes v;
    int present;
    assert_int_equal(kvq_txn_get(&v, &present, t, B("r"), 1, 0), 0);
    assert_int_equal(kvq_txn_set(b, B("r"), 1, B("b"), 1), 0);
    assert_int_equal(kvq_txn_commit(b), 0);
    assert_int_equal(kvq_txn_set(t, B("s"), 1, B("t"), 1), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
    kvq_txn_destroy(b);
    kvq_db_close(db);
}

/* The transaction timeout reaches calls that block, through FoundationDB's option: a read
 * that starts in time but is slow ends with 1031 (engine.c alone checks only between calls). */
static void test_timeout(void **state)
{
    (void)state;
    if (g_db == NULL)
        skip();
    /* The library reads its delay when a transaction is created. */
    setenv("KVQ_FDBC_READ_DELAY_MS", "200", 1);
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, g_db), 0);
    assert_int_equal(kvq_txn_set_option(t, KVQ_TXN_TIMEOUT_MS, 100), 0);
    kvq_bytes v;
    int present;
    assert_int_equal(kvq_txn_get(&v, &present, t, B("a"), 1, 0), KVQ_ETRANSACTION_TIMED_OUT);
    /* After the budget, engine.c refuses before calling the engine. */
    assert_int_equal(kvq_txn_get(&v, &present, t, B("a"), 1, 0), KVQ_ETRANSACTION_TIMED_OUT);
    /* A reset transaction starts a new budget, and a new option. */
    kvq_txn_reset(t);
    assert_int_equal(kvq_txn_set_option(t, KVQ_TXN_TIMEOUT_MS, 5000), 0);
    assert_int_equal(kvq_txn_get(&v, &present, t, B("a"), 1, 0), 0);
    unsetenv("KVQ_FDBC_READ_DELAY_MS");
    kvq_txn_destroy(t);
    /* Without the delay, a read inside its budget (2 s: a busy machine) succeeds. */
    assert_int_equal(kvq_txn_create(&t, g_db), 0);
    assert_int_equal(kvq_txn_set_option(t, KVQ_TXN_TIMEOUT_MS, 2000), 0);
    assert_int_equal(kvq_txn_get(&v, &present, t, B("a"), 1, 0), 0);
    kvq_txn_destroy(t);
}

/* libfdb_c's network thread does not survive fork(): a child refuses fdb opens clearly rather
 * than hang on futures nobody completes. */
static void test_fork_child(void **state)
{
    (void)state;
    if (g_db == NULL)
        skip();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        kvq_db *db = NULL;
        int rc = kvq_db_open(&db, g_url, NULL);
        int ok = rc == KVQ_EUNSUPPORTED && db == NULL &&
                 strstr(kvq_last_error(), "fork before the first fdb open") != NULL;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* The library's own rules, on a private copy of it (a fresh instance): it holds its callers to
 * libfdb_c's ordering requirements. */
typedef struct lib_fns {
#define KVQ_FDB_POINTER(ret, name, params) ret(*name) params;
    KVQ_FDB_FUNCTIONS(KVQ_FDB_POINTER)
#undef KVQ_FDB_POINTER
} lib_fns;

static void *run_net(void *p)
{
    const lib_fns *fn = p;
    return (void *)(intptr_t)fn->fdb_run_network();
}

/* Set by a callback, which runs on the network thread: once it has run, that thread is inside
 * fdb_run_network (a thread just created may not have got there yet on a busy machine). */
typedef struct net_seen {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int ran;
    pthread_t thread;
} net_seen;

static void on_net(FDBFuture *f, void *p)
{
    (void)f;
    net_seen *s = p;
    pthread_mutex_lock(&s->mu);
    s->ran = 1;
    s->thread = pthread_self();
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
}

static void test_library_network_rules(void **state)
{
    (void)state;
    if (!have_library())
        skip();
    char copy[300], cmd[700];
    snprintf(copy, sizeof(copy), "%s/libkvq_fdb_c_copy.so", g_dir);
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", KVQ_FDBC_PATH, copy);
    assert_int_equal(system(cmd), 0);
    void *h = dlopen(copy, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    lib_fns fn;
#define KVQ_FDB_RESOLVE(ret, name, params)   \
    {                                        \
        void *sym = dlsym(h, #name);         \
        assert_non_null(sym);                \
        memcpy(&fn.name, &sym, sizeof(sym)); \
    }
    KVQ_FDB_FUNCTIONS(KVQ_FDB_RESOLVE)
#undef KVQ_FDB_RESOLVE
    /* Only fdb_* leaves the library. */
    assert_null(dlsym(h, "kvq_db_open"));

    FDBDatabase *d = NULL;
    assert_int_equal(fn.fdb_setup_network(), 2200);
    assert_int_equal(fn.fdb_create_database(NULL, &d), 2200);
    assert_int_equal(fn.fdb_select_api_version_impl(730, 710), 2202);
    assert_int_equal(fn.fdb_select_api_version_impl(740, 740), 2203);
    assert_int_equal(fn.fdb_select_api_version_impl(710, 710), 0);
    assert_int_equal(fn.fdb_select_api_version_impl(710, 710), 2201);
    assert_int_equal(fn.fdb_run_network(), 2008);
    assert_int_equal(fn.fdb_stop_network(), 2008);
    assert_int_equal(fn.fdb_create_database(NULL, &d), 2008);
    assert_int_equal(fn.fdb_setup_network(), 0);
    assert_int_equal(fn.fdb_setup_network(), 2009);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, run_net, &fn), 0);
    assert_int_equal(fn.fdb_create_database(NULL, &d), 0);
    FDBTransaction *tr = NULL;
    assert_int_equal(fn.fdb_database_create_transaction(d, &tr), 0);
    FDBFuture *f = fn.fdb_transaction_get_read_version(tr);
    assert_int_equal(fn.fdb_future_block_until_ready(f), 0);
    int64_t rv = 0;
    assert_int_equal(fn.fdb_future_get_int64(f, &rv), 0);
    fn.fdb_future_destroy(f);
    /* A pending future's callback runs on the network thread (waited for without a timeout:
     * callbacks queued before the network runs are run once it does). */
    f = fn.fdb_transaction_get_versionstamp(tr);
    assert_int_equal(fn.fdb_future_get_error(f), 2015);
    net_seen seen = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, pthread_self()};
    assert_int_equal(fn.fdb_future_set_callback(f, on_net, &seen), 0);
    fn.fdb_transaction_reset(tr);
    pthread_mutex_lock(&seen.mu);
    while (!seen.ran)
        pthread_cond_wait(&seen.cond, &seen.mu);
    pthread_mutex_unlock(&seen.mu);
    assert_true(pthread_equal(seen.thread, th));
    assert_int_equal(fn.fdb_future_block_until_ready(f), 0);
    assert_int_equal(fn.fdb_future_get_error(f), 1025);
    fn.fdb_future_destroy(f);
    /* The network runs now: a second run is refused. */
    assert_int_equal(fn.fdb_run_network(), 2009);
    fn.fdb_transaction_destroy(tr);
    fn.fdb_database_destroy(d);
    assert_int_equal(fn.fdb_stop_network(), 0);
    void *r = NULL;
    pthread_join(th, &r);
    assert_int_equal((int)(intptr_t)r, 0);
    dlclose(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_api_version),
        cmocka_unit_test(test_missing_library),
        cmocka_unit_test(test_api_version_not_supported),
        cmocka_unit_test(test_open),
        cmocka_unit_test(test_cluster_file),
        cmocka_unit_test(test_set_get_commit),
        cmocka_unit_test(test_atomic_add),
        cmocka_unit_test(test_range_paging),
        cmocka_unit_test(test_conflict),
        cmocka_unit_test(test_retry_loop),
        cmocka_unit_test(test_versionstamp),
        cmocka_unit_test(test_watch),
        cmocka_unit_test(test_fault_injection),
        cmocka_unit_test(test_read_only_and_skip_conflicts),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_fork_child),
        cmocka_unit_test(test_library_network_rules),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
