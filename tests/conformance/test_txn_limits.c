/* Conformance: every limit at its edge, and bad input. Key sizes (0 and 10,000 bytes are fine,
 * 10,001 is key_too_large 2102), value sizes (100,000 / 100,001: value_too_large 2103), the
 * reserved 0xFF key space (2004), inverted ranges (2005), the 10,000,000-byte transaction
 * (2101), NULL pointers for every function (KVQ_EINVAL, never a crash), and the 5-second
 * transaction age (transaction_too_old 1007, one real 5.6 s wait). */
#include "conformance.h"

static kvq_txn *new_txn(kvq_db *db)
{
    kvq_txn *t = NULL;
    assert_ok(kvq_txn_create(&t, db));
    return t;
}

/* A key of exactly n bytes under cf/<p>/ (n must exceed the prefix), filled with 'k'. */
static uint8_t *sized_key(const char *p, size_t n)
{
    cf_key pre = cf_k(p, "");
    assert_true(n > pre.n);
    uint8_t *k = malloc(n);
    assert_non_null(k);
    memcpy(k, pre.b, pre.n);
    memset(k + pre.n, 'k', n - pre.n);
    return k;
}

static void test_key_sizes(void **state)
{
    (void)state;
    const char *p = "lim_key";
    kvq_db *db = cf_open_clean(p);
    static const size_t ok_sizes[] = { 9999, KVQ_MAX_KEY_SIZE };
    kvq_txn *t = new_txn(db);
    kvq_bytes v;
    int present;
    uint8_t one[8];
    cf_put_le(one, 1, 8);
    for (size_t i = 0; i < 2; i++) {
        uint8_t *k = sized_key(p, ok_sizes[i]);
        assert_ok(kvq_txn_set(t, k, ok_sizes[i], K("v")));
        cf_expect_value(t, k, ok_sizes[i], 0, "v", 1, "large key, read back");
        assert_ok(kvq_txn_commit(t));
        kvq_txn_reset(t);
        cf_expect_value(t, k, ok_sizes[i], 0, "v", 1, "large key, committed");
        assert_ok(kvq_txn_atomic_op(t, k, ok_sizes[i], one, 1, KVQ_MUT_ADD));
        assert_ok(kvq_txn_clear(t, k, ok_sizes[i]));
        assert_ok(kvq_txn_commit(t));
        kvq_txn_reset(t);
        free(k);
    }
    /* One byte over: refused by every call that takes a key. */
    size_t big = KVQ_MAX_KEY_SIZE + 1;
    uint8_t *k = sized_key(p, big);
    assert_err(kvq_txn_set(t, k, big, K("v")), KVQ_EKEY_TOO_LARGE);
    assert_err(kvq_txn_get(&v, &present, t, k, big, 0), KVQ_EKEY_TOO_LARGE);
    assert_err(kvq_txn_get(&v, &present, t, k, big, KVQ_SNAPSHOT), KVQ_EKEY_TOO_LARGE);
    assert_err(kvq_txn_clear(t, k, big), KVQ_EKEY_TOO_LARGE);
    assert_err(kvq_txn_atomic_op(t, k, big, one, 8, KVQ_MUT_ADD), KVQ_EKEY_TOO_LARGE);
    assert_err(
        kvq_txn_set_versionstamped_value(t, k, big, (const uint8_t *)"0123456789\0\0\0\0", 14),
        KVQ_EKEY_TOO_LARGE);
    kvq_watch *w = NULL;
    assert_err(kvq_txn_watch(&w, t, k, big), KVQ_EKEY_TOO_LARGE);
    assert_null(w);
    /* The refused calls left nothing behind: the transaction still commits, empty. */
    assert_ok(kvq_txn_commit(t));
    free(k);
    kvq_txn_reset(t);

    /* The empty key is a legal key. */
    const uint8_t *empty = (const uint8_t *)"";
    assert_ok(kvq_txn_set(t, empty, 0, K("first")));
    cf_expect_value(t, empty, 0, 0, "first", 5, "empty key");
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    cf_expect_value(t, empty, 0, 0, "first", 5, "empty key, committed");
    const kvq_kv *kvs;
    size_t n;
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, empty, 0, (const uint8_t *)"\x01", 1, 0, 0));
    assert_int_equal(n, 1);
    assert_int_equal(kvs[0].key.len, 0);
    assert_ok(kvq_txn_clear(t, empty, 0));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    cf_expect_value(t, empty, 0, 0, NULL, 0, "empty key, cleared");
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_value_sizes(void **state)
{
    (void)state;
    const char *p = "lim_value";
    kvq_db *db = cf_open_clean(p);
    uint8_t *val = malloc(KVQ_MAX_VALUE_SIZE + 1);
    assert_non_null(val);
    for (size_t i = 0; i < KVQ_MAX_VALUE_SIZE + 1; i++)
        val[i] = (uint8_t)(i * 7 + 3);
    cf_key k = cf_k(p, "k");
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_set(t, k.b, k.n, val, KVQ_MAX_VALUE_SIZE));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    cf_expect_value(t, k.b, k.n, 0, val, KVQ_MAX_VALUE_SIZE, "a 100,000-byte value");
    kvq_txn_reset(t);
    assert_err(kvq_txn_set(t, k.b, k.n, val, KVQ_MAX_VALUE_SIZE + 1), KVQ_EVALUE_TOO_LARGE);
    assert_err(kvq_txn_atomic_op(t, k.b, k.n, val, KVQ_MAX_VALUE_SIZE + 1, KVQ_MUT_BYTE_MAX),
               KVQ_EVALUE_TOO_LARGE);
    assert_err(kvq_txn_atomic_op(t, k.b, k.n, val, KVQ_MAX_VALUE_SIZE + 1, KVQ_MUT_ADD),
               KVQ_EVALUE_TOO_LARGE);
    uint8_t vsk[300];
    memcpy(vsk, k.b, k.n);
    memset(vsk + k.n, 0, 10);
    cf_put_le(vsk + k.n + 10, (uint64_t)k.n, 4);
    assert_err(kvq_txn_set_versionstamped_key(t, vsk, k.n + 14, val, KVQ_MAX_VALUE_SIZE + 1),
               KVQ_EVALUE_TOO_LARGE);
    /* The refused set changed nothing. */
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    cf_expect_value(t, k.b, k.n, 0, val, KVQ_MAX_VALUE_SIZE, "after a refused set");
    kvq_txn_destroy(t);
    free(val);
    kvq_db_close(db);
}

static void test_reserved_keys(void **state)
{
    (void)state;
    kvq_db *db = cf_open(NULL);
    kvq_txn *t = new_txn(db);
    static const uint8_t sys[] = { 0xff, 'x' };
    static const uint8_t ff[] = { 0xff };
    static const uint8_t ff00[] = { 0xff, 0x00 };
    kvq_bytes v;
    int present;
    const kvq_kv *kvs;
    size_t n;
    uint8_t one[8];
    cf_put_le(one, 1, 8);
    for (size_t len = 1; len <= 2; len++) {
        assert_err(kvq_txn_set(t, sys, len, K("v")), KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
        assert_err(kvq_txn_get(&v, &present, t, sys, len, 0), KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
        assert_err(kvq_txn_clear(t, sys, len), KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
        assert_err(kvq_txn_atomic_op(t, sys, len, one, 8, KVQ_MUT_ADD),
                   KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
    }
    kvq_watch *w = NULL;
    assert_err(kvq_txn_watch(&w, t, sys, 2), KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
    /* A range may end at 0xFF (the end of the normal key space), not beyond. */
    cf_key b = cf_k("lim_reserved", "");
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, b.b, b.n, ff, 1, 1, 0));
    assert_err(kvq_txn_get_range(&kvs, &n, NULL, t, b.b, b.n, ff00, 2, 0, 0),
               KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
    assert_err(kvq_txn_get_range(&kvs, &n, NULL, t, sys, 2, sys, 2, 0, 0),
               KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
    assert_err(kvq_txn_clear_range(t, b.b, b.n, ff00, 2), KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
    assert_ok(kvq_txn_clear_range(t, b.b, b.n, ff, 1));
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_inverted_ranges(void **state)
{
    (void)state;
    kvq_db *db = cf_open(NULL);
    kvq_txn *t = new_txn(db);
    cf_key b = cf_k("lim_inv", "b"), a = cf_k("lim_inv", "a"), ab = cf_k("lim_inv", "a\x01");
    const kvq_kv *kvs;
    size_t n;
    assert_err(kvq_txn_get_range(&kvs, &n, NULL, t, b.b, b.n, a.b, a.n, 0, 0), KVQ_EINVERTED_RANGE);
    assert_err(kvq_txn_get_range(&kvs, &n, NULL, t, b.b, b.n, a.b, a.n, 0, KVQ_REVERSE),
               KVQ_EINVERTED_RANGE);
    assert_err(kvq_txn_get_range(&kvs, &n, NULL, t, ab.b, ab.n, a.b, a.n, 0, KVQ_SNAPSHOT),
               KVQ_EINVERTED_RANGE);
    assert_err(kvq_txn_clear_range(t, b.b, b.n, a.b, a.n), KVQ_EINVERTED_RANGE);
    assert_err(kvq_txn_add_conflict_range(t, b.b, b.n, a.b, a.n, KVQ_CONFLICT_READ),
               KVQ_EINVERTED_RANGE);
    assert_err(kvq_txn_add_conflict_range(t, b.b, b.n, a.b, a.n, KVQ_CONFLICT_WRITE),
               KVQ_EINVERTED_RANGE);
    /* begin == end is an empty range, not an error. */
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, a.b, a.n, a.b, a.n, 0, 0));
    assert_int_equal(n, 0);
    assert_ok(kvq_txn_clear_range(t, a.b, a.n, a.b, a.n));
    assert_ok(kvq_txn_add_conflict_range(t, a.b, a.n, a.b, a.n, KVQ_CONFLICT_READ));
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* Sets n values of 100,000 bytes in one transaction; returns the first error (of a set or of
 * the commit), or 0 when it committed. */
static int big_transaction(kvq_db *db, const char *p, int n)
{
    uint8_t *val = malloc(KVQ_MAX_VALUE_SIZE);
    assert_non_null(val);
    memset(val, 'v', KVQ_MAX_VALUE_SIZE);
    kvq_txn *t = new_txn(db);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        char ks[32];
        snprintf(ks, sizeof(ks), "%04d", i);
        cf_key k = cf_k(p, ks);
        rc = kvq_txn_set(t, k.b, k.n, val, KVQ_MAX_VALUE_SIZE);
    }
    if (rc == 0)
        rc = kvq_txn_commit(t);
    kvq_txn_destroy(t);
    free(val);
    return rc;
}

static size_t count_prefix(kvq_db *db, const char *p)
{
    cf_key b = cf_k(p, ""), e = cf_after_prefix(&b);
    kvq_txn *t = new_txn(db);
    const kvq_kv *kvs;
    size_t n;
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, b.b, b.n, e.b, e.n, 0, KVQ_SNAPSHOT));
    kvq_txn_destroy(t);
    return n;
}

static void test_transaction_too_large(void **state)
{
    (void)state;
    const char *p = "lim_txn";
    kvq_db *db = cf_open_clean(p);
    /* 95 values of 100,000 bytes (9.5 MB with keys and conflict ranges) commit. */
    assert_ok(big_transaction(db, p, 95));
    assert_int_equal(count_prefix(db, p), 95);
    cf_clear_prefix(db, p);
    /* 101 of them (over 10,000,000 bytes) are refused, by a set or by the commit. */
    assert_err(big_transaction(db, p, 101), KVQ_ETRANSACTION_TOO_LARGE);
    assert_int_equal(count_prefix(db, p), 0);
    /* 2101 is final for the retry loop. */
    assert_err(kvq_error_retryable(KVQ_ETRANSACTION_TOO_LARGE), 0);
    kvq_db_close(db);
}

/* Adds n conflict ranges [k, k + 0xFF) with keys of about 9,000 bytes (18,000 bytes a range)
 * of the given type, plus one small write; returns the first error or the commit's result. */
static int conflict_range_transaction(kvq_db *db, const char *p, int n, kvq_conflict_type type)
{
    enum { KL = 9000 };
    uint8_t *b = sized_key(p, KL), *e = malloc(KL + 1);
    assert_non_null(e);
    kvq_txn *t = new_txn(db);
    int64_t rv;
    int rc = kvq_txn_get_read_version(&rv, t);
    for (int i = 0; i < n && rc == 0; i++) {
        char num[16];
        snprintf(num, sizeof(num), "%08d", i);
        memcpy(b + KL - 8, num, 8);
        memcpy(e, b, KL);
        e[KL] = 0xff;
        rc = kvq_txn_add_conflict_range(t, b, KL, e, KL + 1, type);
    }
    cf_key k = cf_k(p, "small");
    if (rc == 0)
        rc = kvq_txn_set(t, k.b, k.n, K("v"));
    if (rc == 0)
        rc = kvq_txn_commit(t);
    kvq_txn_destroy(t);
    free(e);
    free(b);
    return rc;
}

/* Conflict ranges count toward the 10,000,000 bytes, as in FoundationDB. */
static void test_transaction_too_large_conflict_ranges(void **state)
{
    (void)state;
    const char *p = "lim_txn_conflicts";
    kvq_db *db = cf_open_clean(p);
    assert_ok(conflict_range_transaction(db, p, 450, KVQ_CONFLICT_WRITE));
    assert_err(conflict_range_transaction(db, p, 600, KVQ_CONFLICT_WRITE),
               KVQ_ETRANSACTION_TOO_LARGE);
    assert_ok(conflict_range_transaction(db, p, 450, KVQ_CONFLICT_READ));
    assert_err(conflict_range_transaction(db, p, 600, KVQ_CONFLICT_READ),
               KVQ_ETRANSACTION_TOO_LARGE);
    kvq_db_close(db);
}

/* ---- NULL pointers and bad arguments ------------------------------------------------------- */

static int noop_body(kvq_txn *txn, void *payload)
{
    (void)txn;
    (void)payload;
    return 0;
}

static void test_null_arguments(void **state)
{
    (void)state;
    kvq_db *db = cf_open(NULL);
    kvq_txn *t = new_txn(db);
    cf_key k = cf_k("lim_null", "k"), e = cf_k("lim_null", "z");
    kvq_bytes v;
    int present;
    const kvq_kv *kvs;
    size_t n;
    int64_t i64;
    uint8_t stamp[10];
    uint16_t uv;
    uint8_t one[8] = { 1 };

    /* Databases. */
    assert_err(kvq_db_open(NULL, cf_url, NULL), KVQ_EINVAL);
    kvq_db_close(NULL);
    kvq_db_stats st;
    assert_err(kvq_db_get_stats(NULL, db), KVQ_EINVAL);
    assert_err(kvq_db_get_stats(&st, NULL), KVQ_EINVAL);
    const char *engine = kvq_db_get_engine(db);
    assert_non_null(engine);
    assert_string_equal(engine, cf_is_fdb() ? "fdb" : "embedded");
    assert_string_equal(kvq_db_get_engine(NULL), "none");

    /* Transactions. */
    kvq_txn *t2 = (kvq_txn *)&st;
    assert_err(kvq_txn_create(NULL, db), KVQ_EINVAL);
    assert_err(kvq_txn_create(&t2, NULL), KVQ_EINVAL);
    assert_null(t2);
    kvq_txn_destroy(NULL);
    kvq_txn_reset(NULL);
    assert_int_equal(kvq_txn_get_retries(NULL), 0);

    assert_err(kvq_txn_get(NULL, &present, t, k.b, k.n, 0), KVQ_EINVAL);
    assert_err(kvq_txn_get(&v, NULL, t, k.b, k.n, 0), KVQ_EINVAL);
    assert_err(kvq_txn_get(&v, &present, NULL, k.b, k.n, 0), KVQ_EINVAL);
    assert_err(kvq_txn_get(&v, &present, t, NULL, 3, 0), KVQ_EINVAL);

    assert_err(kvq_txn_get_range(NULL, &n, NULL, t, k.b, k.n, e.b, e.n, 0, 0), KVQ_EINVAL);
    assert_err(kvq_txn_get_range(&kvs, NULL, NULL, t, k.b, k.n, e.b, e.n, 0, 0), KVQ_EINVAL);
    assert_err(kvq_txn_get_range(&kvs, &n, NULL, NULL, k.b, k.n, e.b, e.n, 0, 0), KVQ_EINVAL);
    assert_err(kvq_txn_get_range(&kvs, &n, NULL, t, NULL, 3, e.b, e.n, 0, 0), KVQ_EINVAL);
    assert_err(kvq_txn_get_range(&kvs, &n, NULL, t, k.b, k.n, NULL, 3, 0, 0), KVQ_EINVAL);
    assert_err(kvq_txn_get_range(&kvs, &n, NULL, t, k.b, k.n, e.b, e.n, -1, 0), KVQ_EINVAL);

    assert_err(kvq_txn_set(NULL, k.b, k.n, K("v")), KVQ_EINVAL);
    assert_err(kvq_txn_set(t, NULL, 3, K("v")), KVQ_EINVAL);
    assert_err(kvq_txn_set(t, k.b, k.n, NULL, 3), KVQ_EINVAL);
    assert_err(kvq_txn_clear(NULL, k.b, k.n), KVQ_EINVAL);
    assert_err(kvq_txn_clear(t, NULL, 3), KVQ_EINVAL);
    assert_err(kvq_txn_clear_range(NULL, k.b, k.n, e.b, e.n), KVQ_EINVAL);
    assert_err(kvq_txn_clear_range(t, NULL, 3, e.b, e.n), KVQ_EINVAL);
    assert_err(kvq_txn_clear_range(t, k.b, k.n, NULL, 3), KVQ_EINVAL);
    assert_err(kvq_txn_atomic_op(NULL, k.b, k.n, one, 8, KVQ_MUT_ADD), KVQ_EINVAL);
    assert_err(kvq_txn_atomic_op(t, NULL, 3, one, 8, KVQ_MUT_ADD), KVQ_EINVAL);
    assert_err(kvq_txn_atomic_op(t, k.b, k.n, NULL, 8, KVQ_MUT_ADD), KVQ_EINVAL);
    assert_err(kvq_txn_set_versionstamped_key(NULL, k.b, k.n, K("v")), KVQ_EINVAL);
    assert_err(kvq_txn_set_versionstamped_key(t, NULL, 14, K("v")), KVQ_EINVAL);
    assert_err(kvq_txn_set_versionstamped_value(NULL, k.b, k.n, one, 8), KVQ_EINVAL);
    assert_err(kvq_txn_set_versionstamped_value(t, k.b, k.n, NULL, 14), KVQ_EINVAL);
    assert_err(kvq_txn_set_versionstamped_value(t, NULL, 3, one, 8), KVQ_EINVAL);
    assert_err(kvq_txn_next_user_version(NULL, t), KVQ_EINVAL);
    assert_err(kvq_txn_next_user_version(&uv, NULL), KVQ_EINVAL);
    assert_err(kvq_txn_add_conflict_range(NULL, k.b, k.n, e.b, e.n, KVQ_CONFLICT_READ), KVQ_EINVAL);
    assert_err(kvq_txn_add_conflict_range(t, NULL, 3, e.b, e.n, KVQ_CONFLICT_READ), KVQ_EINVAL);
    assert_err(kvq_txn_add_conflict_range(t, k.b, k.n, NULL, 3, KVQ_CONFLICT_WRITE), KVQ_EINVAL);
    assert_err(kvq_txn_add_conflict_range(t, k.b, k.n, e.b, e.n, (kvq_conflict_type)7), KVQ_EINVAL);
    assert_err(kvq_txn_get_read_version(NULL, t), KVQ_EINVAL);
    assert_err(kvq_txn_get_read_version(&i64, NULL), KVQ_EINVAL);
    assert_err(kvq_txn_commit(NULL), KVQ_EINVAL);
    assert_err(kvq_txn_get_committed_version(NULL, t), KVQ_EINVAL);
    assert_err(kvq_txn_get_committed_version(&i64, NULL), KVQ_EINVAL);
    assert_err(kvq_txn_get_versionstamp(NULL, t), KVQ_EINVAL);
    assert_err(kvq_txn_get_versionstamp(stamp, NULL), KVQ_EINVAL);
    assert_err(kvq_txn_on_error(NULL, KVQ_ENOT_COMMITTED), KVQ_EINVAL);
    assert_err(kvq_txn_set_option(NULL, KVQ_TXN_TIMEOUT_MS, 10), KVQ_EINVAL);

    /* Watches. */
    kvq_watch *w = (kvq_watch *)&st;
    assert_err(kvq_txn_watch(NULL, t, k.b, k.n), KVQ_EINVAL);
    assert_err(kvq_txn_watch(&w, NULL, k.b, k.n), KVQ_EINVAL);
    assert_null(w);
    assert_err(kvq_txn_watch(&w, t, NULL, 3), KVQ_EINVAL);
    assert_err(kvq_watch_wait(NULL, 0), KVQ_EINVAL);
    kvq_watch_cancel(NULL);
    kvq_watch_destroy(NULL);

    /* Retry loops. */
    assert_err(kvq_db_transact(NULL, noop_body, NULL), KVQ_EINVAL);
    assert_err(kvq_db_transact(db, NULL, NULL), KVQ_EINVAL);
    assert_err(kvq_txn_run(NULL, noop_body, NULL), KVQ_EINVAL);
    assert_err(kvq_txn_run(t, NULL, NULL), KVQ_EINVAL);

    /* Buffers and messages. */
    assert_err(kvq_buf_grow(NULL, 1), KVQ_EINVAL);
    assert_err(kvq_buf_append(NULL, "x", 1), KVQ_EINVAL);
    kvq_buf b = KVQ_BUF_INIT;
    assert_err(kvq_buf_append(&b, NULL, 1), KVQ_EINVAL);
    kvq_buf_dispose(&b);
    kvq_buf_dispose(NULL);
    static const int codes[] = { 0, -1, 1, 1020, 9001, 123456, INT32_MIN };
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        assert_non_null(kvq_strerror(codes[i]));
        assert_non_null(kvq_errname(codes[i]));
    }
    assert_non_null(kvq_last_error());

    /* After all that, the transaction is intact and commits nothing. */
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_bad_options(void **state)
{
    (void)state;
    kvq_db *db = cf_open(NULL);
    kvq_db_close(db);
    kvq_db *d2 = (kvq_db *)&d2;
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.version = 0;
    assert_err(kvq_db_open(&d2, cf_url, &o), KVQ_EINVAL);
    assert_null(d2);
    o = (kvq_db_options)KVQ_DB_OPTIONS_INIT;
    o.version = KVQ_DB_OPTIONS_VERSION + 100;
    assert_err(kvq_db_open(&d2, cf_url, &o), KVQ_EINVAL);
    kvq_testing_options tko = KVQ_TESTING_OPTIONS_INIT;
    tko.fault_rate = 1.5;
    assert_err(kvq_db_open_testing(&d2, cf_url, NULL, &tko), KVQ_EINVAL);
    tko.fault_rate = -0.1;
    assert_err(kvq_db_open_testing(&d2, cf_url, NULL, &tko), KVQ_EINVAL);
    tko = (kvq_testing_options)KVQ_TESTING_OPTIONS_INIT;
    tko.fault_rate = 0.5; /* a rate needs a kind */
    assert_err(kvq_db_open_testing(&d2, cf_url, NULL, &tko), KVQ_EINVAL);
    tko = (kvq_testing_options)KVQ_TESTING_OPTIONS_INIT;
    tko.flags = 1u << 30;
    assert_err(kvq_db_open_testing(&d2, cf_url, NULL, &tko), KVQ_EINVAL);
    tko = (kvq_testing_options)KVQ_TESTING_OPTIONS_INIT;
    tko.version = 0;
    assert_err(kvq_db_open_testing(&d2, cf_url, NULL, &tko), KVQ_EINVAL);
    assert_null(d2);

    db = cf_open(NULL);
    kvq_txn *t = new_txn(db);
    /* Unknown options and flags. */
    int rc = kvq_txn_set_option(t, (kvq_txn_option)12345, 1);
    if (rc != KVQ_EINVALID_OPTION && rc != KVQ_EINVAL)
        fail_msg("unknown transaction option: expected 2007 or EINVAL, got %d %s", rc,
                 kvq_errname(rc));
    rc = kvq_txn_set_option(t, KVQ_TXN_TIMEOUT_MS, -5);
    if (rc != KVQ_EINVALID_OPTION_VALUE && rc != KVQ_EINVAL)
        fail_msg("negative timeout: expected 2006 or EINVAL, got %d %s", rc, kvq_errname(rc));
    cf_key k = cf_k("lim_opt", "k");
    kvq_bytes v;
    int present;
    assert_err(kvq_txn_get(&v, &present, t, k.b, k.n, 0x80), KVQ_EINVAL);
    assert_err(kvq_txn_get(&v, &present, t, k.b, k.n, KVQ_REVERSE), KVQ_EINVAL);
    const kvq_kv *kvs;
    size_t n;
    assert_err(kvq_txn_get_range(&kvs, &n, NULL, t, k.b, k.n, k.b, k.n, 0, 0x80), KVQ_EINVAL);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* ---- transaction_too_old ------------------------------------------------------------------- */

/* SLOW: one real wait of 5.6 seconds, against the real 5 s window (whatever a slow build's
 * $KVQ_TEST_TXN_WINDOW_MS says). t_old reads at 0 s; t_old2 takes a read version at 0 s
 * and only writes; t_snap reads with a snapshot read at 0 s and writes; t_young and t_conf read
 * at 3 s, and another transaction writes what t_conf read at 3.2 s; t_blind only writes. At
 * 5.6 s t_old's reads fail with 1007; t_old2 and t_snap commit, since a transaction without
 * read-conflict ranges is never too old to commit (FoundationDB's resolver checks the age only
 * of transactions that have read ranges); t_young (2.6 s old: sleeps only overrun, so on a busy
 * machine it has 2.4 s to spare) still reads and commits; t_conf, as old, must still see its
 * conflict (1020: the engine may not forget writes inside the window); and t_blind, which never
 * took a read version, commits. */
static void test_transaction_too_old_slow(void **state)
{
    (void)state;
    const char *p = "lim_old";
    setenv("KVQ_TEST_TXN_WINDOW_MS", "5000", 1);
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k"), blind = cf_k(p, "blind"), k2 = cf_k(p, "k2");
    cf_key y_out = cf_k(p, "young"), c_out = cf_k(p, "conf"), s_out = cf_k(p, "snap");
    kvq_txn *t_old = new_txn(db), *t_old2 = new_txn(db), *t_young = new_txn(db),
            *t_blind = new_txn(db), *t_conf = new_txn(db), *t_snap = new_txn(db);
    kvq_bytes v;
    int present;
    int64_t rv;
    print_message("SLOW: waiting 5.6 s for transaction_too_old (1007)\n");
    assert_ok(kvq_txn_get(&v, &present, t_old, k.b, k.n, 0));
    assert_ok(kvq_txn_get_read_version(&rv, t_old2));
    assert_ok(kvq_txn_set(t_old2, k.b, k.n, K("late")));
    assert_ok(kvq_txn_get(&v, &present, t_snap, k.b, k.n, KVQ_SNAPSHOT));
    assert_ok(kvq_txn_set(t_blind, blind.b, blind.n, K("blind")));
    cf_sleep_ms(3000);
    assert_ok(kvq_txn_get(&v, &present, t_young, k.b, k.n, 0));
    assert_ok(kvq_txn_get(&v, &present, t_conf, k2.b, k2.n, 0));
    cf_sleep_ms(200);
    cf_write_key(db, k2.b, k2.n, "changed", 7);
    cf_sleep_ms(2400);
    assert_err(kvq_txn_get(&v, &present, t_old, k.b, k.n, 0), KVQ_ETRANSACTION_TOO_OLD);
    assert_ok(kvq_txn_get(&v, &present, t_young, k.b, k.n, KVQ_SNAPSHOT));
    assert_ok(kvq_txn_set(t_young, y_out.b, y_out.n, K("y")));
    assert_ok(kvq_txn_commit(t_young));
    /* After t_young, which read k: t_old2's write of k would be a conflict for it. */
    assert_ok(kvq_txn_commit(t_old2));
    assert_ok(kvq_txn_set(t_snap, s_out.b, s_out.n, K("s")));
    assert_ok(kvq_txn_commit(t_snap));
    assert_int_equal(cf_read_key(db, s_out.b, s_out.n, NULL, 0), 1);
    assert_ok(kvq_txn_set(t_conf, c_out.b, c_out.n, K("c")));
    assert_err(kvq_txn_commit(t_conf), KVQ_ENOT_COMMITTED);
    assert_ok(kvq_txn_commit(t_blind));
    assert_int_equal(cf_read_key(db, k.b, k.n, NULL, 0), 4);
    /* 1007 is retryable: on_error resets the transaction, which then works. */
    assert_true(kvq_error_retryable(KVQ_ETRANSACTION_TOO_OLD));
    assert_ok(kvq_txn_on_error(t_old, KVQ_ETRANSACTION_TOO_OLD));
    assert_ok(kvq_txn_get(&v, &present, t_old, blind.b, blind.n, 0));
    assert_int_equal(present, 1);
    kvq_txn_destroy(t_snap);
    kvq_txn_destroy(t_conf);
    kvq_txn_destroy(t_blind);
    kvq_txn_destroy(t_young);
    kvq_txn_destroy(t_old2);
    kvq_txn_destroy(t_old);
    kvq_db_close(db);
}

int main(int argc, char **argv)
{
    cf_init(argc, argv, NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_sizes),
        cmocka_unit_test(test_value_sizes),
        cmocka_unit_test(test_reserved_keys),
        cmocka_unit_test(test_inverted_ranges),
        cmocka_unit_test(test_transaction_too_large),
        cmocka_unit_test(test_transaction_too_large_conflict_ranges),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_transaction_too_old_slow),
    };
    return CF_RUN("txn_limits", tests);
}
