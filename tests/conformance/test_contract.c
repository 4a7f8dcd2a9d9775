/* The transaction contract, point by point, on whichever engine $KVQ_TEST_URL names: snapshot
 * reads, read-your-writes, exactly which patterns conflict, atomic operations, versionstamps and
 * the unreadable span, limits, the retry loop and injected faults. */
#include "conformance.h"

static kvq_db *db;

static int setup(void **state)
{
    (void)state;
    return 0;
}

static kvq_txn *txn(void)
{
    kvq_txn *t;
    assert_ok(kvq_txn_create(&t, db));
    return t;
}

static void put(const char *k, const char *v)
{
    kvq_txn *t = txn();
    assert_ok(kvq_txn_set(t, K(k), K(v)));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
}

/* Reads k in t; returns 1 if present with the value copied into out. */
static int get(kvq_txn *t, const char *k, char *out, unsigned flags)
{
    kvq_bytes v;
    int present;
    assert_ok(kvq_txn_get(&v, &present, t, K(k), flags));
    if (present && out != NULL) {
        memcpy(out, v.data, v.len);
        out[v.len] = '\0';
    }
    return present;
}

static void test_snapshot_isolation(void **state)
{
    (void)state;
    db = cf_open(NULL);
    put("t/si/a", "1");
    kvq_txn *t1 = txn();
    char v[64];
    assert_true(get(t1, "t/si/a", v, 0));
    assert_string_equal(v, "1");
    put("t/si/a", "2"); /* committed after t1's read version */
    put("t/si/b", "x");
    assert_true(get(t1, "t/si/a", v, 0));
    assert_string_equal(v, "1"); /* one consistent snapshot */
    assert_false(get(t1, "t/si/b", v, 0));
    assert_ok(kvq_txn_commit(t1)); /* read-only transactions always commit */
    kvq_txn_destroy(t1);
    kvq_txn *t2 = txn();
    assert_true(get(t2, "t/si/a", v, 0));
    assert_string_equal(v, "2");
    kvq_txn_destroy(t2);
    kvq_db_close(db);
}

static void test_read_your_writes(void **state)
{
    (void)state;
    db = cf_open(NULL);
    put("t/ryw/b", "stored");
    put("t/ryw/d", "stored");
    kvq_txn *t = txn();
    char v[64];
    assert_ok(kvq_txn_set(t, K("t/ryw/a"), K("mine")));
    assert_true(get(t, "t/ryw/a", v, 0));
    assert_string_equal(v, "mine");
    assert_ok(kvq_txn_clear(t, K("t/ryw/b")));
    assert_false(get(t, "t/ryw/b", v, 0));
    assert_ok(kvq_txn_clear_range(t, K("t/ryw/c"), K("t/ryw/e")));
    assert_false(get(t, "t/ryw/d", v, 0));
    assert_ok(kvq_txn_set(t, K("t/ryw/dd"), K("after clear")));
    uint8_t one[4] = { 1, 0, 0, 0 };
    assert_ok(kvq_txn_atomic_op(t, K("t/ryw/n"), one, 4, KVQ_MUT_ADD));
    assert_ok(kvq_txn_atomic_op(t, K("t/ryw/n"), one, 4, KVQ_MUT_ADD));
    kvq_bytes n;
    int present;
    assert_ok(kvq_txn_get(&n, &present, t, K("t/ryw/n"), 0));
    assert_true(present);
    assert_int_equal(n.len, 4);
    assert_int_equal(n.data[0], 2);
    /* Ranges, forward and reverse, see the same merged view. */
    const kvq_kv *kvs;
    size_t cnt;
    bool more;
    assert_ok(kvq_txn_get_range(&kvs, &cnt, &more, t, K("t/ryw/"), K("t/ryw0"), 0, 0));
    assert_int_equal(cnt, 3); /* a, dd, n */
    assert_memory_equal(kvs[0].key.data, "t/ryw/a", 7);
    assert_memory_equal(kvs[1].key.data, "t/ryw/dd", 8);
    assert_memory_equal(kvs[2].key.data, "t/ryw/n", 7);
    assert_ok(kvq_txn_get_range(&kvs, &cnt, &more, t, K("t/ryw/"), K("t/ryw0"), 2, KVQ_REVERSE));
    assert_int_equal(cnt, 2);
    assert_true(more);
    assert_memory_equal(kvs[0].key.data, "t/ryw/n", 7);
    assert_memory_equal(kvs[1].key.data, "t/ryw/dd", 8);
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
    t = txn();
    assert_false(get(t, "t/ryw/b", v, 0));
    assert_true(get(t, "t/ryw/dd", v, 0));
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* T1 reads (as read_fn does), T2 writes key w and commits, then T1 writes and commits. */
typedef void (*read_fn)(kvq_txn *t);

static int conflict_case(read_fn reader, const char *w)
{
    kvq_txn *t1 = txn(), *t2 = txn();
    reader(t1);
    assert_ok(kvq_txn_set(t2, K(w), K("x")));
    assert_ok(kvq_txn_commit(t2));
    assert_ok(kvq_txn_set(t1, K("t/cf/out"), K("y")));
    int rc = kvq_txn_commit(t1);
    kvq_txn_destroy(t1);
    kvq_txn_destroy(t2);
    return rc;
}

static void rd_get(kvq_txn *t)
{
    get(t, "t/cf/k", NULL, 0);
}
static void rd_get_snapshot(kvq_txn *t)
{
    get(t, "t/cf/k", NULL, KVQ_SNAPSHOT);
}
static void rd_range(kvq_txn *t)
{
    const kvq_kv *kvs;
    size_t n;
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, K("t/cf/"), K("t/cf0"), 0, 0));
}
/* With keys a, b, c stored, a limit of 1 covers only [t/cf/a, after a). */
static void rd_range_limited(kvq_txn *t)
{
    const kvq_kv *kvs;
    size_t n;
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, K("t/cf/a"), K("t/cf0"), 1, 0));
    assert_int_equal(n, 1);
}
/* Reverse with a limit of 1 covers only [the last key returned, end); the last stored key is
 * t/cf/out (written by the cases before). */
static void rd_range_reverse_limited(kvq_txn *t)
{
    const kvq_kv *kvs;
    size_t n;
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, K("t/cf/a"), K("t/cf/z"), 1, KVQ_REVERSE));
    assert_int_equal(n, 1);
}
static void rd_conflict_range(kvq_txn *t)
{
    int64_t rv;
    assert_ok(kvq_txn_get_read_version(&rv, t));
    assert_ok(kvq_txn_add_conflict_range(t, K("t/cf/j"), K("t/cf/l"), KVQ_CONFLICT_READ));
}

static void test_conflicts(void **state)
{
    (void)state;
    db = cf_open(NULL);
    put("t/cf/a", "1");
    put("t/cf/c", "1");
    put("t/cf/m", "1");
    assert_int_equal(conflict_case(rd_get, "t/cf/k"), KVQ_ENOT_COMMITTED);
    assert_int_equal(conflict_case(rd_get, "t/cf/other"), 0);
    assert_int_equal(conflict_case(rd_get_snapshot, "t/cf/k"), 0);
    assert_int_equal(conflict_case(rd_range, "t/cf/k"), KVQ_ENOT_COMMITTED);
    assert_int_equal(conflict_case(rd_range_limited, "t/cf/b"), 0);
    assert_int_equal(conflict_case(rd_range_limited, "t/cf/a"), KVQ_ENOT_COMMITTED);
    assert_int_equal(conflict_case(rd_range_reverse_limited, "t/cf/b"), 0);
    assert_int_equal(conflict_case(rd_range_reverse_limited, "t/cf/p"), KVQ_ENOT_COMMITTED);
    assert_int_equal(conflict_case(rd_conflict_range, "t/cf/k"), KVQ_ENOT_COMMITTED);
    assert_int_equal(conflict_case(rd_conflict_range, "t/cf/m"), 0);

    /* An explicit write-conflict range conflicts with a reader of that range. */
    kvq_txn *r = txn(), *w = txn();
    get(r, "t/cf/wc", NULL, 0);
    assert_ok(kvq_txn_add_conflict_range(w, K("t/cf/wa"), K("t/cf/wz"), KVQ_CONFLICT_WRITE));
    assert_ok(kvq_txn_commit(w));
    assert_ok(kvq_txn_set(r, K("t/cf/out"), K("1")));
    assert_int_equal(kvq_txn_commit(r), KVQ_ENOT_COMMITTED);
    kvq_txn_destroy(r);
    kvq_txn_destroy(w);

    /* Concurrent atomic adds never conflict, and both count. */
    kvq_txn *a1 = txn(), *a2 = txn();
    uint8_t one[8] = { 1 };
    get(a1, "t/cf/unrelated", NULL, 0);
    get(a2, "t/cf/unrelated2", NULL, 0);
    assert_ok(kvq_txn_atomic_op(a1, K("t/cf/ctr"), one, 8, KVQ_MUT_ADD));
    assert_ok(kvq_txn_atomic_op(a2, K("t/cf/ctr"), one, 8, KVQ_MUT_ADD));
    assert_ok(kvq_txn_commit(a1));
    assert_ok(kvq_txn_commit(a2));
    kvq_txn_destroy(a1);
    kvq_txn_destroy(a2);
    kvq_txn *c = txn();
    kvq_bytes v;
    int present;
    assert_ok(kvq_txn_get(&v, &present, c, K("t/cf/ctr"), 0));
    assert_true(present);
    assert_int_equal(v.data[0], 2);
    kvq_txn_destroy(c);

    /* A versionstamped key conflicts, on its stamped key, with a reader of its range that
     * commits later (FoundationDB's commit proxy adds that write-conflict range). */
    kvq_txn *rr = txn(), *vs = txn();
    const kvq_kv *kvs;
    size_t n;
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, rr, K("t/cf/vs/"), K("t/cf/vs0"), 0, 0));
    uint8_t key[9 + 10 + 4] = "t/cf/vs/";
    memset(key + 8, 0xff, 10);
    key[18] = 0;
    key[19] = 8;
    key[20] = key[21] = key[22] = 0;
    assert_ok(kvq_txn_set_versionstamped_key(vs, key, 8 + 10 + 1 + 4, K("v")));
    assert_ok(kvq_txn_commit(vs));
    assert_ok(kvq_txn_set(rr, K("t/cf/out2"), K("1")));
    assert_int_equal(kvq_txn_commit(rr), KVQ_ENOT_COMMITTED);
    kvq_txn_destroy(rr);
    kvq_txn_destroy(vs);
    kvq_db_close(db);
}

static void test_atomic_ops(void **state)
{
    (void)state;
    db = cf_open(NULL);
    kvq_txn *t = txn();
    uint8_t a[2] = { 0xff, 0x00 }, b[2] = { 0x02, 0x00 };
    assert_ok(kvq_txn_set(t, K("t/at/add"), a, 2));
    assert_ok(kvq_txn_atomic_op(t, K("t/at/add"), b, 2, KVQ_MUT_ADD)); /* 255 + 2 = 257 */
    assert_ok(kvq_txn_atomic_op(t, K("t/at/min"), b, 2, KVQ_MUT_MIN)); /* missing: the operand */
    assert_ok(kvq_txn_atomic_op(t, K("t/at/bmax"), K("abc"), KVQ_MUT_BYTE_MAX));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
    t = txn();
    assert_ok(kvq_txn_atomic_op(t, K("t/at/min"), a, 2, KVQ_MUT_MIN));           /* min(2, 255) */
    assert_ok(kvq_txn_atomic_op(t, K("t/at/bmax"), K("abd"), KVQ_MUT_BYTE_MAX)); /* abd > abc */
    assert_ok(kvq_txn_atomic_op(t, K("t/at/or"), a, 2, KVQ_MUT_BIT_OR));
    assert_ok(
        kvq_txn_atomic_op(t, K("t/at/and"), b, 2, KVQ_MUT_BIT_AND)); /* missing: the operand */
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
    t = txn();
    kvq_bytes v;
    int p;
    assert_ok(kvq_txn_get(&v, &p, t, K("t/at/add"), 0));
    assert_int_equal(v.len, 2);
    assert_int_equal(v.data[0], 0x01);
    assert_int_equal(v.data[1], 0x01);
    assert_ok(kvq_txn_get(&v, &p, t, K("t/at/min"), 0));
    assert_int_equal(v.data[0], 0x02);
    assert_ok(kvq_txn_get(&v, &p, t, K("t/at/bmax"), 0));
    assert_memory_equal(v.data, "abd", 3);
    assert_ok(kvq_txn_get(&v, &p, t, K("t/at/or"), 0));
    assert_int_equal(v.data[0], 0xff);
    assert_ok(kvq_txn_get(&v, &p, t, K("t/at/and"), 0));
    assert_int_equal(v.data[0], 0x02);
    assert_int_equal(kvq_txn_atomic_op(t, K("t/at/x"), a, 2, (kvq_mutation)99),
                     KVQ_EINVALID_MUTATION_TYPE);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_versionstamps(void **state)
{
    (void)state;
    db = cf_open(NULL);
    uint8_t prev[10] = { 0 };
    for (int i = 0; i < 5; i++) {
        kvq_txn *t = txn();
        uint8_t key[6 + 10 + 4] = "t/vs/";
        memset(key + 5, 0xff, 10);
        key[15] = 5;
        key[16] = key[17] = key[18] = 0;
        assert_ok(kvq_txn_set_versionstamped_key(t, key, 5 + 10 + 4, K("val")));
        /* The span the stamp may land in is unreadable in this transaction. */
        const kvq_kv *kvs;
        size_t n;
        assert_int_equal(kvq_txn_get_range(&kvs, &n, NULL, t, K("t/vs/"), K("t/vs0"), 0, 0),
                         KVQ_EACCESSED_UNREADABLE);
        uint8_t vval[4 + 10 + 4] = "sv:";
        memset(vval + 3, 0xff, 10);
        vval[13] = 3;
        vval[14] = vval[15] = vval[16] = 0;
        assert_ok(kvq_txn_set_versionstamped_value(t, K("t/vsv"), vval, 3 + 10 + 4));
        assert_ok(kvq_txn_commit(t));
        uint8_t stamp[10];
        assert_ok(kvq_txn_get_versionstamp(stamp, t));
        int64_t cv;
        assert_ok(kvq_txn_get_committed_version(&cv, t));
        uint64_t sv = 0;
        for (int b = 0; b < 8; b++)
            sv = sv << 8 | stamp[b];
        assert_true((int64_t)sv == cv);
        assert_true(memcmp(prev, stamp, 10) < 0); /* increasing */
        memcpy(prev, stamp, 10);
        kvq_txn_destroy(t);
        /* The stored key holds the stamp; the versionstamped value too. */
        t = txn();
        uint8_t want[15];
        memcpy(want, "t/vs/", 5);
        memcpy(want + 5, stamp, 10);
        kvq_bytes v;
        int p;
        assert_ok(kvq_txn_get(&v, &p, t, want, 15, 0));
        assert_true(p);
        assert_memory_equal(v.data, "val", 3);
        assert_ok(kvq_txn_get(&v, &p, t, K("t/vsv"), 0));
        assert_int_equal(v.len, 13);
        assert_memory_equal(v.data + 3, stamp, 10);
        kvq_txn_destroy(t);
    }
    /* Bad offsets. */
    kvq_txn *t = txn();
    uint8_t bad[8] = { 'k', 0, 0, 0, 5, 0, 0, 0 };
    assert_int_equal(kvq_txn_set_versionstamped_key(t, bad, 8, K("v")),
                     KVQ_ECLIENT_INVALID_OPERATION);
    assert_int_equal(kvq_txn_set_versionstamped_key(t, bad, 3, K("v")),
                     KVQ_ECLIENT_INVALID_OPERATION);
    uint8_t st[10];
    assert_int_equal(kvq_txn_get_versionstamp(st, t), KVQ_ENO_COMMIT_VERSION);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_limits(void **state)
{
    (void)state;
    db = cf_open(NULL);
    kvq_txn *t = txn();
    static uint8_t big[KVQ_MAX_VALUE_SIZE + 2];
    memset(big, 'k', sizeof(big));
    big[0] = 't';
    assert_ok(kvq_txn_set(t, NULL, 0, K("empty key"))); /* a key may be empty */
    assert_ok(kvq_txn_set(t, big, KVQ_MAX_KEY_SIZE - 1, K("v")));
    assert_ok(kvq_txn_set(t, big, KVQ_MAX_KEY_SIZE, K("v")));
    assert_int_equal(kvq_txn_set(t, big, KVQ_MAX_KEY_SIZE + 1, K("v")), KVQ_EKEY_TOO_LARGE);
    assert_ok(kvq_txn_set(t, K("t/lim/v"), big, KVQ_MAX_VALUE_SIZE));
    assert_int_equal(kvq_txn_set(t, K("t/lim/v"), big, KVQ_MAX_VALUE_SIZE + 1),
                     KVQ_EVALUE_TOO_LARGE);
    assert_int_equal(kvq_txn_set(t, K("\xff/system"), K("v")), KVQ_EKEY_OUTSIDE_LEGAL_RANGE);
    assert_int_equal(kvq_txn_clear_range(t, K("b"), K("a")), KVQ_EINVERTED_RANGE);
    const kvq_kv *kvs;
    size_t n;
    assert_int_equal(kvq_txn_get_range(&kvs, &n, NULL, t, K("b"), K("a"), 0, 0),
                     KVQ_EINVERTED_RANGE);
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
    /* More than 10,000,000 bytes in one transaction: 2101, at the write or at commit. */
    t = txn();
    int rc = 0;
    for (int i = 0; i < 110 && rc == 0; i++) {
        char k[32];
        snprintf(k, sizeof(k), "t/lim/big/%03d", i);
        rc = kvq_txn_set(t, K(k), big, KVQ_MAX_VALUE_SIZE);
    }
    if (rc == 0)
        rc = kvq_txn_commit(t);
    assert_int_equal(rc, KVQ_ETRANSACTION_TOO_LARGE);
    kvq_txn_destroy(t);
    /* NULL arguments are errors, never crashes. */
    kvq_bytes v;
    int p;
    assert_int_equal(kvq_txn_get(NULL, &p, NULL, K("k"), 0), KVQ_EINVAL);
    assert_int_equal(kvq_txn_get(&v, &p, NULL, K("k"), 0), KVQ_EINVAL);
    assert_int_equal(kvq_txn_set(NULL, K("k"), K("v")), KVQ_EINVAL);
    assert_int_equal(kvq_txn_commit(NULL), KVQ_EINVAL);
    assert_int_equal(kvq_txn_create(NULL, db), KVQ_EINVAL);
    kvq_txn *tt;
    assert_int_equal(kvq_txn_create(&tt, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_db_transact(NULL, NULL, NULL), KVQ_EINVAL);
    t = txn();
    assert_int_equal(kvq_txn_set(t, NULL, 3, K("v")), KVQ_EINVAL);
    assert_int_equal(kvq_txn_get(&v, &p, t, K("k"), 0x80), KVQ_EINVAL);
    assert_int_equal(kvq_txn_get_range(&kvs, &n, NULL, t, K("a"), K("b"), -1, 0), KVQ_EINVAL);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

typedef struct counter_ctx {
    int calls;
} counter_ctx;

/* A read-modify-write increment without atomics: conflicts under concurrency, retried. */
static int increment(kvq_txn *t, void *arg)
{
    counter_ctx *c = arg;
    c->calls++;
    kvq_bytes v;
    int p;
    int rc = kvq_txn_get(&v, &p, t, K("t/rl/n"), 0);
    if (rc != 0)
        return rc;
    uint32_t n = 0;
    if (p && v.len == 4)
        memcpy(&n, v.data, 4);
    n++;
    return kvq_txn_set(t, K("t/rl/n"), (const uint8_t *)&n, 4);
}

static int always_conflicts(kvq_txn *t, void *arg)
{
    (void)t;
    counter_ctx *c = arg;
    c->calls++;
    return KVQ_ENOT_COMMITTED;
}

static int user_failure(kvq_txn *t, void *arg)
{
    (void)t;
    (void)arg;
    return KVQ_EUSER;
}

static void test_retry_loop(void **state)
{
    (void)state;
    db = cf_open(NULL);
    counter_ctx c = { 0 };
    assert_ok(kvq_db_transact(db, increment, &c));
    assert_int_equal(c.calls, 1);
    /* The retry limit is honoured. */
    kvq_txn *t = txn();
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_RETRY_LIMIT, 3));
    c.calls = 0;
    assert_int_equal(kvq_txn_run(t, always_conflicts, &c), KVQ_ENOT_COMMITTED);
    assert_int_equal(c.calls, 4);
    assert_int_equal(kvq_txn_get_retries(t), 3);
    /* And the timeout. */
    kvq_txn_reset(t);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_RETRY_LIMIT, -1));
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_TIMEOUT_MS, 200));
    c.calls = 0;
    assert_int_equal(kvq_txn_run(t, always_conflicts, &c), KVQ_ETRANSACTION_TIMED_OUT);
    assert_true(c.calls > 1);
    /* Non-retryable errors come back unchanged, after one call. */
    kvq_txn_reset(t);
    assert_int_equal(kvq_txn_run(t, user_failure, NULL), KVQ_EUSER);
    assert_int_equal(kvq_txn_on_error(t, KVQ_EKEY_TOO_LARGE), KVQ_EKEY_TOO_LARGE);
    assert_int_equal(kvq_txn_set_option(t, (kvq_txn_option)12345, 1), KVQ_EINVALID_OPTION);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_injected_faults(void **state)
{
    (void)state;
    struct {
        unsigned kind;
        int rc;
        int written;
    } cases[] = { { KVQ_FAULT_NOT_COMMITTED, KVQ_ENOT_COMMITTED, 0 },
                  { KVQ_FAULT_UNKNOWN_COMMITTED, KVQ_ECOMMIT_UNKNOWN_RESULT, 1 },
                  { KVQ_FAULT_UNKNOWN_NOT_COMMITTED, KVQ_ECOMMIT_UNKNOWN_RESULT, 0 } };
    for (int i = 0; i < 3; i++) {
        kvq_testing_options o = KVQ_TESTING_OPTIONS_INIT;
        o.fault_rate = 1.0;
        o.fault_kinds = cases[i].kind;
        o.fault_seed = 1;
        kvq_db *f = cf_open_url_testing(cf_url, NULL, &o);
        char key[32];
        snprintf(key, sizeof(key), "t/fault/%d", i);
        kvq_txn *t;
        assert_ok(kvq_txn_create(&t, f));
        assert_ok(kvq_txn_set(t, K(key), K("v")));
        assert_int_equal(kvq_txn_commit(t), cases[i].rc);
        kvq_txn_destroy(t);
        kvq_db_stats s;
        assert_ok(kvq_db_get_stats(&s, f));
        assert_int_equal(s.injected_faults, 1);
        kvq_db_close(f);
        db = cf_open(NULL);
        t = txn();
        assert_int_equal(get(t, key, NULL, 0), cases[i].written);
        kvq_txn_destroy(t);
        kvq_db_close(db);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_snapshot_isolation, setup),
        cmocka_unit_test(test_read_your_writes),
        cmocka_unit_test(test_conflicts),
        cmocka_unit_test(test_atomic_ops),
        cmocka_unit_test(test_versionstamps),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_retry_loop),
        cmocka_unit_test(test_injected_faults),
    };
    return cmocka_run_group_tests(tests, cf_group_setup, cf_group_teardown);
}
