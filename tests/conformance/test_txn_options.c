/* Conformance: the transaction options and calls kvq shares with FoundationDB (kvq/db.h):
 * read-your-writes disabled (for all reads or snapshot reads), the next write without a
 * write-conflict range, the system key space, the size limit and the approximate size, and
 * reading at a version set by the caller. Each as FoundationDB documents it; every option but
 * the three retry ones ends with kvq_txn_on_error. */
#include "conformance.h"

static kvq_txn *new_txn(kvq_db *db)
{
    kvq_txn *t = NULL;
    assert_ok(kvq_txn_create(&t, db));
    assert_non_null(t);
    return t;
}

static void test_read_your_writes_disable(void **state)
{
    (void)state;
    const char *p = "opt_ryw";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k");
    cf_write_key(db, k.b, k.n, "stored", 6);
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_READ_YOUR_WRITES_DISABLE, 0));
    assert_ok(kvq_txn_set(t, k.b, k.n, K("mine")));
    cf_expect_value(t, k.b, k.n, 0, "stored", 6, "a read with read-your-writes disabled");
    const kvq_kv *kvs;
    size_t n;
    cf_key b = cf_k(p, ""), e = cf_after_prefix(&b);
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, b.b, b.n, e.b, e.n, 0, 0));
    assert_int_equal(n, 1);
    assert_memory_equal(kvs[0].value.data, "stored", 6);
    /* Watches are disabled: at once, or (on a cluster) as the watch's outcome. */
    kvq_watch *w = NULL;
    int rc = kvq_txn_watch(&w, t, k.b, k.n);
    if (rc == 0) {
        rc = kvq_watch_wait(w, 10000);
        kvq_watch_destroy(w);
    }
    assert_err(rc, KVQ_EWATCHES_DISABLED);
    /* The option ends with on_error, as FoundationDB's options do (the retry ones excepted). */
    assert_ok(kvq_txn_on_error(t, KVQ_ENOT_COMMITTED));
    assert_ok(kvq_txn_set(t, k.b, k.n, K("mine")));
    cf_expect_value(t, k.b, k.n, 0, "mine", 4, "after on_error");
    /* Only before the first read or write. */
    assert_err(kvq_txn_set_option(t, KVQ_TXN_READ_YOUR_WRITES_DISABLE, 0),
               KVQ_ECLIENT_INVALID_OPERATION);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_snapshot_ryw_disable(void **state)
{
    (void)state;
    const char *p = "opt_snapryw";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k");
    cf_write_key(db, k.b, k.n, "stored", 6);
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_SNAPSHOT_RYW_DISABLE, 0));
    assert_ok(kvq_txn_set(t, k.b, k.n, K("mine")));
    cf_expect_value(t, k.b, k.n, KVQ_SNAPSHOT, "stored", 6, "a snapshot read");
    cf_expect_value(t, k.b, k.n, 0, "mine", 4, "a read that is not a snapshot");
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_SNAPSHOT_RYW_ENABLE, 0));
    cf_expect_value(t, k.b, k.n, KVQ_SNAPSHOT, "mine", 4, "a snapshot read, enabled again");
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_next_write_no_write_conflict_range(void **state)
{
    (void)state;
    const char *p = "opt_nowcr";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k"), k2 = cf_k(p, "k2"), out = cf_k(p, "out");
    for (int with = 0; with < 2; with++) {
        kvq_txn *reader = new_txn(db), *writer = new_txn(db);
        kvq_bytes v;
        int present;
        assert_ok(kvq_txn_get(&v, &present, reader, k.b, k.n, 0));
        assert_ok(kvq_txn_get(&v, &present, reader, k2.b, k2.n, 0));
        if (with)
            assert_ok(kvq_txn_set_option(writer, KVQ_TXN_NEXT_WRITE_NO_WRITE_CONFLICT_RANGE, 0));
        assert_ok(kvq_txn_set(writer, k.b, k.n, K("w")));
        assert_ok(kvq_txn_commit(writer));
        assert_ok(kvq_txn_set(reader, out.b, out.n, K("r")));
        if (with)
            assert_ok(kvq_txn_commit(reader));
        else
            assert_err(kvq_txn_commit(reader), KVQ_ENOT_COMMITTED);
        /* Only the next write: the one after it conflicts again. */
        kvq_txn_reset(reader);
        kvq_txn_reset(writer);
        assert_ok(kvq_txn_get(&v, &present, reader, k2.b, k2.n, 0));
        if (with)
            assert_ok(kvq_txn_set_option(writer, KVQ_TXN_NEXT_WRITE_NO_WRITE_CONFLICT_RANGE, 0));
        assert_ok(kvq_txn_set(writer, k.b, k.n, K("w2")));
        assert_ok(kvq_txn_set(writer, k2.b, k2.n, K("w2")));
        assert_ok(kvq_txn_commit(writer));
        assert_ok(kvq_txn_set(reader, out.b, out.n, K("r")));
        assert_err(kvq_txn_commit(reader), KVQ_ENOT_COMMITTED);
        kvq_txn_destroy(reader);
        kvq_txn_destroy(writer);
    }
    kvq_db_close(db);
}

static void test_system_keys(void **state)
{
    (void)state;
    kvq_db *db = cf_open(NULL);
    static const uint8_t sys[] = { 0xff, 'k', 'v', 'q', '-', 'c', 'f' };
    static const uint8_t sys_end[] = { 0xff, 'k', 'v', 'q', '-', 'c', 'g' };
    static const uint8_t special[] = { 0xff, 0xff, 'x' };
    kvq_txn *t = new_txn(db);
    kvq_bytes v;
    int present;
    assert_err(kvq_txn_set(t, sys, sizeof(sys), K("x")), KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
    assert_err(kvq_txn_get(&v, &present, t, sys, sizeof(sys), 0), KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_ACCESS_SYSTEM_KEYS, 0));
    assert_ok(kvq_txn_clear_range(t, sys, sizeof(sys), sys_end, sizeof(sys_end)));
    assert_ok(kvq_txn_set(t, sys, sizeof(sys), K("x")));
    assert_err(kvq_txn_set(t, special, sizeof(special), K("x")), KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    /* Reading needs read_system_keys (or access_system_keys); writing needs access. */
    assert_err(kvq_txn_get(&v, &present, t, sys, sizeof(sys), 0), KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_READ_SYSTEM_KEYS, 0));
    cf_expect_value(t, sys, sizeof(sys), 0, "x", 1, "a system key");
    const kvq_kv *kvs;
    size_t n;
    static const uint8_t top[] = { 0xff, 0xff };
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, sys, sizeof(sys), top, sizeof(top), 0, 0));
    assert_true(n >= 1);
    assert_err(kvq_txn_set(t, sys, sizeof(sys), K("y")), KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
    /* on_error clears the options. */
    assert_ok(kvq_txn_on_error(t, KVQ_ENOT_COMMITTED));
    assert_err(kvq_txn_get(&v, &present, t, sys, sizeof(sys), 0), KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
    kvq_txn_reset(t);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_ACCESS_SYSTEM_KEYS, 0));
    assert_ok(kvq_txn_clear_range(t, sys, sizeof(sys), sys_end, sizeof(sys_end)));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_size_limit_and_approximate_size(void **state)
{
    (void)state;
    const char *p = "opt_size";
    kvq_db *db = cf_open(NULL);
    kvq_txn *t = new_txn(db);
    int64_t s0 = -1, s1 = -1;
    assert_ok(kvq_txn_get_approximate_size(&s0, t));
    assert_int_equal(s0, 0);
    cf_key k = cf_k(p, "k");
    uint8_t val[300];
    memset(val, 'v', sizeof(val));
    assert_ok(kvq_txn_set(t, k.b, k.n, val, 100));
    assert_ok(kvq_txn_get_approximate_size(&s1, t));
    assert_true(s1 >= (int64_t)(k.n + 100));
    assert_err(kvq_txn_set_option(t, KVQ_TXN_SIZE_LIMIT, 31), KVQ_EINVALID_OPTION_VALUE);
    assert_err(kvq_txn_set_option(t, KVQ_TXN_SIZE_LIMIT, KVQ_MAX_TXN_SIZE + 1),
               KVQ_EINVALID_OPTION_VALUE);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_SIZE_LIMIT, 400));
    /* Past the limit: too large, at the write or at the commit (the fdb engine defers it). */
    int rc = kvq_txn_set(t, k.b, k.n, val, sizeof(val));
    if (rc == 0)
        rc = kvq_txn_commit(t);
    assert_err(rc, KVQ_ETRANSACTION_TOO_LARGE);
    /* on_error ends the limit. */
    assert_ok(kvq_txn_on_error(t, KVQ_ENOT_COMMITTED));
    assert_ok(kvq_txn_set(t, k.b, k.n, val, sizeof(val)));
    assert_ok(kvq_txn_set(t, k.b, k.n, val, sizeof(val)));
    assert_ok(kvq_txn_commit(t));
    assert_err(kvq_txn_get_approximate_size(NULL, t), KVQ_EINVAL);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* The read that follows kvq_txn_set_read_version: its error, or 0. The fdb engine reports a
 * refused version there (libfdb_c defers it); the embedded engine may at once. */
static int read_at(kvq_txn *t, int64_t version, const cf_key *k, kvq_bytes *v, int *present)
{
    int rc = kvq_txn_set_read_version(t, version);
    if (rc == 0)
        rc = kvq_txn_get(v, present, t, k->b, k->n, 0);
    return rc;
}

static void test_set_read_version(void **state)
{
    (void)state;
    const char *p = "opt_rv";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k");
    cf_write_key(db, k.b, k.n, "one", 3);
    kvq_txn *a = new_txn(db), *b = new_txn(db);
    int64_t rv = 0, got = 0;
    assert_ok(kvq_txn_get_read_version(&rv, a));
    kvq_bytes v;
    int present;
    /* At a version taken after the last commit: the same data, and that read version. */
    assert_ok(read_at(b, rv, &k, &v, &present));
    assert_true(present && v.len == 3 && memcmp(v.data, "one", 3) == 0);
    assert_ok(kvq_txn_get_read_version(&got, b));
    assert_int_equal(got, rv);
    /* Already read: read_version_already_set. Not positive: version_invalid. */
    assert_err(read_at(b, rv, &k, &v, &present), KVQ_EREAD_VERSION_ALREADY_SET);
    kvq_txn_reset(b);
    assert_err(kvq_txn_set_read_version(b, 0), KVQ_EVERSION_INVALID);
    /* A version from before a commit: the embedded engine's SQLite storage keeps only the
     * newest state (too old); a cluster or the log store may still have it. Both are
     * FoundationDB's answers. */
    cf_write_key(db, k.b, k.n, "two", 3);
    kvq_txn_reset(b);
    int rc = read_at(b, rv, &k, &v, &present);
    if (rc == 0) {
        /* a cluster, or the embedded log store, which keeps the versions of the window */
        assert_true(present && v.len == 3 && memcmp(v.data, "one", 3) == 0);
    } else {
        assert_err(rc, KVQ_ETRANSACTION_TOO_OLD);
        assert_ok(kvq_txn_on_error(b, rc));
        cf_expect_value(b, k.b, k.n, 0, "two", 3, "after the retry");
    }
    /* A version far ahead of the database: future_version. */
    kvq_txn_reset(b);
    rc = read_at(b, rv + 1000000000000LL, &k, &v, &present);
    assert_err(rc, KVQ_EFUTURE_VERSION);
    kvq_txn_destroy(a);
    kvq_txn_destroy(b);
    kvq_db_close(db);
}

int main(int argc, char **argv)
{
    cf_init(argc, argv, NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_your_writes_disable),
        cmocka_unit_test(test_snapshot_ryw_disable),
        cmocka_unit_test(test_next_write_no_write_conflict_range),
        cmocka_unit_test(test_system_keys),
        cmocka_unit_test(test_size_limit_and_approximate_size),
        cmocka_unit_test(test_set_read_version),
    };
    return CF_RUN("txn_options", tests);
}
