/* Conformance: the basic transaction contract of kvq/db.h, point by point. get, set, clear and
 * clear_range; get_range forward and reverse with limits, `more` and paging; read-your-writes
 * after every kind of write; every atomic operation with FoundationDB's exact byte semantics
 * (API >= 510), APPEND_IF_FITS up to the 100,000-byte value limit and COMPARE_AND_CLEAR;
 * visibility of commits and snapshot isolation; read-only commits; versionstamped keys and
 * values, their stamps and the unreadable span. */
#include "conformance.h"
#include "model.h"

#include <pthread.h>

/* ---- helpers ------------------------------------------------------------------------------- */

/* One (key suffix, value) pair of an expected range, both C strings. */
struct kv_str {
    const char *k;
    const char *v;
};

/* Reads [cf/p/b, cf/p/e) with the given limit and flags and asserts the exact result, in
 * order. want_more: 1 or 0 to assert `more`, -1 to accept either. */
static void expect_range(kvq_txn *txn,
                         const char *p,
                         const char *b,
                         const char *e,
                         int limit,
                         unsigned flags,
                         const struct kv_str *want,
                         size_t nwant,
                         int want_more)
{
    cf_key kb = cf_k(p, b), ke = cf_k(p, e), prefix = cf_k(p, "");
    const kvq_kv *kvs = NULL;
    size_t count = 99;
    bool more = true;
    int rc = kvq_txn_get_range(&kvs, &count, &more, txn, kb.b, kb.n, ke.b, ke.n, limit, flags);
    if (rc != 0)
        fail_msg("get_range [%s, %s) limit %d flags %u -> %d %s (%s)", b, e, limit, flags, rc,
                 kvq_errname(rc), kvq_last_error());
    if (count != nwant)
        fail_msg("get_range [%s, %s) limit %d flags %u: expected %zu rows, got %zu", b, e, limit,
                 flags, nwant, count);
    for (size_t i = 0; i < count; i++) {
        cf_key wk = cf_k(p, want[i].k);
        if (kvs[i].key.len != wk.n || memcmp(kvs[i].key.data, wk.b, wk.n) != 0)
            fail_msg("get_range [%s, %s) limit %d flags %u: row %zu: expected key %s, got "
                     "'%.*s'",
                     b, e, limit, flags, i, want[i].k, (int)(kvs[i].key.len - prefix.n),
                     (const char *)kvs[i].key.data + prefix.n);
        size_t vl = strlen(want[i].v);
        if (kvs[i].value.len != vl || (vl > 0 && memcmp(kvs[i].value.data, want[i].v, vl) != 0))
            fail_msg("get_range [%s, %s): row %zu (%s): expected value '%s', got '%.*s'", b, e, i,
                     want[i].k, want[i].v, (int)kvs[i].value.len, (const char *)kvs[i].value.data);
    }
    if (want_more >= 0 && more != want_more)
        fail_msg("get_range [%s, %s) limit %d flags %u: expected more=%d, got %d", b, e, limit,
                 flags, want_more, more);
}

static void set_s(kvq_txn *t, const char *p, const char *k, const char *v)
{
    cf_key key = cf_k(p, k);
    assert_ok(kvq_txn_set(t, key.b, key.n, K(v)));
}

static void expect_s(kvq_txn *t, const char *p, const char *k, const char *v, const char *where)
{
    cf_key key = cf_k(p, k);
    cf_expect_value(t, key.b, key.n, 0, v, v != NULL ? strlen(v) : 0, where);
}

static kvq_txn *new_txn(kvq_db *db)
{
    kvq_txn *t = NULL;
    assert_ok(kvq_txn_create(&t, db));
    assert_non_null(t);
    return t;
}

/* Commits a transaction that sets the given keys (values = the key names) under p. */
static void seed_keys(kvq_db *db, const char *p, const char *const *keys, size_t n)
{
    kvq_txn *t = new_txn(db);
    for (size_t i = 0; i < n; i++)
        set_s(t, p, keys[i], keys[i]);
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
}

/* ---- get, set, clear ----------------------------------------------------------------------- */

static void test_get_set_clear(void **state)
{
    (void)state;
    const char *p = "basic_gsc";
    kvq_db *db = cf_open_clean(p);

    kvq_txn *t = new_txn(db);
    expect_s(t, p, "a", NULL, "absent before any write");
    set_s(t, p, "a", "one");
    expect_s(t, p, "a", "one", "read-your-writes after set");
    set_s(t, p, "a", "two");
    expect_s(t, p, "a", "two", "read-your-writes after overwrite");
    set_s(t, p, "empty", "");
    expect_s(t, p, "empty", "", "an empty value is present");
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);

    t = new_txn(db);
    expect_s(t, p, "a", "two", "committed value");
    expect_s(t, p, "empty", "", "committed empty value");
    cf_key a = cf_k(p, "a");
    assert_ok(kvq_txn_clear(t, a.b, a.n));
    expect_s(t, p, "a", NULL, "read-your-writes after clear");
    /* Clearing an absent key is fine. */
    cf_key nothing = cf_k(p, "nothing");
    assert_ok(kvq_txn_clear(t, nothing.b, nothing.n));
    /* A set after a clear in the same transaction wins. */
    set_s(t, p, "b", "x");
    cf_key b = cf_k(p, "b");
    assert_ok(kvq_txn_clear(t, b.b, b.n));
    set_s(t, p, "b", "y");
    expect_s(t, p, "b", "y", "set after clear");
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);

    t = new_txn(db);
    expect_s(t, p, "a", NULL, "committed clear");
    expect_s(t, p, "b", "y", "committed set after clear");
    /* The empty key is a legal key (FoundationDB's first key). */
    const uint8_t *none = (const uint8_t *)"";
    kvq_bytes v;
    int present = -1;
    assert_ok(kvq_txn_get(&v, &present, t, none, 0, 0));
    assert_ok(kvq_txn_get(&v, &present, t, none, 0, KVQ_SNAPSHOT));
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_binary_keys_and_values(void **state)
{
    (void)state;
    const char *p = "basic_bin";
    kvq_db *db = cf_open_clean(p);
    cf_key base = cf_k(p, "");
    /* Keys and values with every byte value, including 0x00, order as unsigned bytes. */
    kvq_txn *t = new_txn(db);
    for (int i = 0; i < 256; i++) {
        uint8_t key[300], val[3];
        memcpy(key, base.b, base.n);
        key[base.n] = (uint8_t)i;
        key[base.n + 1] = 0x00;
        val[0] = (uint8_t)i;
        val[1] = 0x00;
        val[2] = (uint8_t)(255 - i);
        assert_ok(kvq_txn_set(t, key, base.n + 2, val, sizeof(val)));
    }
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);

    t = new_txn(db);
    cf_key end = cf_after_prefix(&base);
    end.b[end.n++] = 0xff; /* past the key 0xFF 0x00 */
    const kvq_kv *kvs;
    size_t n;
    bool more;
    assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, base.b, base.n, end.b, end.n, 0, 0));
    assert_int_equal(n, 256);
    assert_int_equal(more, 0);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(kvs[i].key.len, base.n + 2);
        assert_int_equal(kvs[i].key.data[base.n], i);
        assert_int_equal(kvs[i].key.data[base.n + 1], 0);
        assert_int_equal(kvs[i].value.len, 3);
        assert_int_equal(kvs[i].value.data[0], i);
        assert_int_equal(kvs[i].value.data[1], 0);
        assert_int_equal(kvs[i].value.data[2], 255 - i);
    }
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* ---- clear_range and ranges ------------------------------------------------------------------ */

static const char *const letters[] = { "a", "b", "c", "d", "e", "f", "g", "h" };

static void test_clear_range(void **state)
{
    (void)state;
    const char *p = "basic_cr";
    kvq_db *db = cf_open_clean(p);
    seed_keys(db, p, letters, 8);

    kvq_txn *t = new_txn(db);
    cf_key c = cf_k(p, "c"), f = cf_k(p, "f");
    assert_ok(kvq_txn_clear_range(t, c.b, c.n, f.b, f.n));
    /* An empty range (begin == end) clears nothing. */
    cf_key g = cf_k(p, "g");
    assert_ok(kvq_txn_clear_range(t, g.b, g.n, g.b, g.n));
    expect_s(t, p, "b", "b", "before the cleared range");
    expect_s(t, p, "c", NULL, "begin of the cleared range");
    expect_s(t, p, "e", NULL, "inside the cleared range");
    expect_s(t, p, "f", "f", "end of the cleared range is exclusive");
    expect_s(t, p, "g", "g", "an empty clear_range");
    static const struct kv_str fwd[] = {
        { "a", "a" }, { "b", "b" }, { "f", "f" }, { "g", "g" }, { "h", "h" }
    };
    static const struct kv_str rev[] = {
        { "h", "h" }, { "g", "g" }, { "f", "f" }, { "b", "b" }, { "a", "a" }
    };
    expect_range(t, p, "", "z", 0, 0, fwd, 5, 0);
    expect_range(t, p, "", "z", 0, KVQ_REVERSE, rev, 5, 0);
    /* A set inside the cleared range shows again. */
    set_s(t, p, "d", "new");
    static const struct kv_str mid[] = { { "b", "b" }, { "d", "new" }, { "f", "f" } };
    expect_range(t, p, "b", "g", 0, 0, mid, 3, 0);
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);

    t = new_txn(db);
    static const struct kv_str after[] = { { "a", "a" }, { "b", "b" }, { "d", "new" },
                                           { "f", "f" }, { "g", "g" }, { "h", "h" } };
    expect_range(t, p, "", "z", 0, 0, after, 6, 0);
    /* Clearing everything under the prefix. */
    cf_key all = cf_k(p, ""), end = cf_after_prefix(&all);
    assert_ok(kvq_txn_clear_range(t, all.b, all.n, end.b, end.n));
    expect_range(t, p, "", "z", 0, 0, NULL, 0, 0);
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);

    t = new_txn(db);
    expect_range(t, p, "", "z", 0, KVQ_SNAPSHOT, NULL, 0, 0);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static const char *const ten[] = { "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9" };

static void test_get_range_limits(void **state)
{
    (void)state;
    const char *p = "basic_grl";
    kvq_db *db = cf_open_clean(p);
    seed_keys(db, p, ten, 10);

    static const struct kv_str all[] = { { "k0", "k0" }, { "k1", "k1" }, { "k2", "k2" },
                                         { "k3", "k3" }, { "k4", "k4" }, { "k5", "k5" },
                                         { "k6", "k6" }, { "k7", "k7" }, { "k8", "k8" },
                                         { "k9", "k9" } };
    static const struct kv_str rev[] = { { "k9", "k9" }, { "k8", "k8" }, { "k7", "k7" },
                                         { "k6", "k6" }, { "k5", "k5" }, { "k4", "k4" },
                                         { "k3", "k3" }, { "k2", "k2" }, { "k1", "k1" },
                                         { "k0", "k0" } };
    for (int snap = 0; snap < 2; snap++) {
        unsigned s = snap ? KVQ_SNAPSHOT : 0;
        kvq_txn *t = new_txn(db);
        expect_range(t, p, "", "z", 0, s, all, 10, 0);
        expect_range(t, p, "", "z", 0, s | KVQ_REVERSE, rev, 10, 0);
        /* A limit that stops early says so. */
        expect_range(t, p, "", "z", 3, s, all, 3, 1);
        expect_range(t, p, "", "z", 3, s | KVQ_REVERSE, rev, 3, 1);
        expect_range(t, p, "", "z", 1, s, all, 1, 1);
        expect_range(t, p, "", "z", 1, s | KVQ_REVERSE, rev, 1, 1);
        expect_range(t, p, "", "z", 9, s, all, 9, 1);
        /* Exactly `limit` rows left: the fdb engine may say more (a hint), so either. */
        expect_range(t, p, "", "z", 10, s, all, 10, -1);
        expect_range(t, p, "", "z", 10, s | KVQ_REVERSE, rev, 10, -1);
        /* A limit beyond the rows: all of them, no more. */
        expect_range(t, p, "", "z", 11, s, all, 10, 0);
        expect_range(t, p, "", "z", 1000, s | KVQ_REVERSE, rev, 10, 0);
        /* Sub-ranges: begin inclusive, end exclusive, keys between keys. */
        expect_range(t, p, "k3", "k7", 0, s, all + 3, 4, 0);
        expect_range(t, p, "k3", "k7", 0, s | KVQ_REVERSE, rev + 3, 4, 0);
        expect_range(t, p, "k2a", "k5a", 0, s, all + 3, 3, 0);
        expect_range(t, p, "k2a", "k5a", 2, s | KVQ_REVERSE, rev + 4, 2, 1);
        expect_range(t, p, "k3", "k3", 0, s, NULL, 0, 0);
        expect_range(t, p, "k3", "k3", 5, s | KVQ_REVERSE, NULL, 0, 0);
        expect_range(t, p, "x", "z", 5, s, NULL, 0, 0);
        assert_ok(kvq_txn_commit(t)); /* read-only */
        kvq_txn_destroy(t);
    }
    kvq_db_close(db);
}

/* Pages through n keys with a limit, forward (begin = last + 0x00) and in reverse (end = last),
 * as the header's note says, and checks every key is seen once and in order. */
static void page_through(kvq_txn *t, const char *p, size_t n, int limit, unsigned flags)
{
    cf_key b = cf_k(p, ""), e = cf_after_prefix(&b);
    uint8_t cur_b[300], cur_e[300];
    size_t cur_bn = b.n, cur_en = e.n;
    memcpy(cur_b, b.b, b.n);
    memcpy(cur_e, e.b, e.n);
    size_t seen = 0;
    int reverse = (flags & KVQ_REVERSE) != 0;
    for (int pages = 0; pages < 1000; pages++) {
        const kvq_kv *kvs;
        size_t count;
        bool more;
        assert_ok(
            kvq_txn_get_range(&kvs, &count, &more, t, cur_b, cur_bn, cur_e, cur_en, limit, flags));
        assert_true(count <= (size_t)limit);
        for (size_t i = 0; i < count; i++) {
            size_t idx = reverse ? n - 1 - seen : seen;
            char want[32];
            snprintf(want, sizeof(want), "p%04zu", idx);
            cf_key wk = cf_k(p, want);
            if (kvs[i].key.len != wk.n || memcmp(kvs[i].key.data, wk.b, wk.n) != 0)
                fail_msg("paging (limit %d, flags %u): row %zu is not %s", limit, flags, seen,
                         want);
            seen++;
        }
        if (count < (size_t)limit) {
            assert_int_equal(more, 0);
            break;
        }
        if (count == 0)
            break;
        const kvq_kv *last = &kvs[count - 1];
        if (reverse) {
            memcpy(cur_e, last->key.data, last->key.len);
            cur_en = last->key.len;
        } else {
            memcpy(cur_b, last->key.data, last->key.len);
            cur_b[last->key.len] = 0x00;
            cur_bn = last->key.len + 1;
        }
        if (!more && seen != n)
            fail_msg("paging: more=0 after %zu of %zu rows", seen, n);
    }
    assert_int_equal(seen, n);
}

static void test_get_range_paging(void **state)
{
    (void)state;
    const char *p = "basic_page";
    kvq_db *db = cf_open_clean(p);
    const size_t n = 53;
    kvq_txn *t = new_txn(db);
    for (size_t i = 0; i < n; i++) {
        char k[32];
        snprintf(k, sizeof(k), "p%04zu", i);
        set_s(t, p, k, "v");
    }
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);

    static const int limits[] = { 1, 2, 7, 10, 52, 53, 54 };
    for (size_t li = 0; li < sizeof(limits) / sizeof(limits[0]); li++) {
        t = new_txn(db);
        page_through(t, p, n, limits[li], 0);
        page_through(t, p, n, limits[li], KVQ_REVERSE);
        page_through(t, p, n, limits[li], KVQ_SNAPSHOT);
        page_through(t, p, n, limits[li], KVQ_SNAPSHOT | KVQ_REVERSE);
        kvq_txn_destroy(t);
    }
    kvq_db_close(db);
}

/* ---- read-your-writes in ranges ------------------------------------------------------------ */

static void test_ryw_ranges(void **state)
{
    (void)state;
    const char *p = "basic_rywr";
    kvq_db *db = cf_open_clean(p);
    static const char *const base[] = { "b", "d", "f", "h" };
    seed_keys(db, p, base, 4);

    kvq_txn *t = new_txn(db);
    set_s(t, p, "a", "A");   /* before every stored key */
    set_s(t, p, "d", "D");   /* overwrite a stored key */
    set_s(t, p, "e", "E");   /* between stored keys */
    cf_key f = cf_k(p, "f"); /* clear a stored key */
    assert_ok(kvq_txn_clear(t, f.b, f.n));
    set_s(t, p, "z", "Z"); /* after every stored key */
    static const struct kv_str fwd[] = { { "a", "A" }, { "b", "b" }, { "d", "D" },
                                         { "e", "E" }, { "h", "h" }, { "z", "Z" } };
    static const struct kv_str rev[] = { { "z", "Z" }, { "h", "h" }, { "e", "E" },
                                         { "d", "D" }, { "b", "b" }, { "a", "A" } };
    for (int snap = 0; snap < 2; snap++) {
        unsigned s = snap ? KVQ_SNAPSHOT : 0;
        expect_range(t, p, "", "zz", 0, s, fwd, 6, 0);
        expect_range(t, p, "", "zz", 0, s | KVQ_REVERSE, rev, 6, 0);
        for (int lim = 1; lim <= 5; lim++) {
            expect_range(t, p, "", "zz", lim, s, fwd, (size_t)lim, 1);
            expect_range(t, p, "", "zz", lim, s | KVQ_REVERSE, rev, (size_t)lim, 1);
        }
        expect_range(t, p, "c", "f", 0, s, fwd + 2, 2, 0);
        expect_range(t, p, "c", "f", 0, s | KVQ_REVERSE, rev + 2, 2, 0);
    }
    /* A clear_range over stored and written keys, then a write inside it. */
    cf_key b = cf_k(p, "b"), h = cf_k(p, "h");
    assert_ok(kvq_txn_clear_range(t, b.b, b.n, h.b, h.n));
    set_s(t, p, "c", "C");
    static const struct kv_str fwd2[] = { { "a", "A" }, { "c", "C" }, { "h", "h" }, { "z", "Z" } };
    static const struct kv_str rev2[] = { { "z", "Z" }, { "h", "h" }, { "c", "C" }, { "a", "A" } };
    expect_range(t, p, "", "zz", 0, 0, fwd2, 4, 0);
    expect_range(t, p, "", "zz", 0, KVQ_REVERSE, rev2, 4, 0);
    expect_range(t, p, "", "zz", 2, 0, fwd2, 2, 1);
    expect_range(t, p, "", "zz", 3, KVQ_REVERSE, rev2, 3, 1);
    /* An atomic op on a stored key shows in a range read with its applied value. */
    cf_key hk = cf_k(p, "h");
    assert_ok(kvq_txn_atomic_op(t, hk.b, hk.n, K("i"), KVQ_MUT_BYTE_MAX));
    static const struct kv_str fwd3[] = { { "a", "A" }, { "c", "C" }, { "h", "i" }, { "z", "Z" } };
    expect_range(t, p, "", "zz", 0, 0, fwd3, 4, 0);
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);

    t = new_txn(db);
    expect_range(t, p, "", "zz", 0, 0, fwd3, 4, 0);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* ---- atomic operations --------------------------------------------------------------------- */

struct atomic_case {
    const char *name;
    kvq_mutation op;
    int has_initial; /* 0: the key is missing */
    size_t init_len;
    uint8_t init[8];
    size_t arg_len;
    uint8_t arg[8];
    size_t want_len;
    uint8_t want[8];
};

/* FoundationDB's results (fdbclient/Atomic.h, API >= 510: MinV2, AndV2). */
static const struct atomic_case atomic_cases[] = {
    /* ADD: little-endian, the operand's width; missing = 0 (the operand). */
    { "add missing 1", KVQ_MUT_ADD, 0, 0, { 0 }, 1, { 5 }, 1, { 5 } },
    { "add missing 2", KVQ_MUT_ADD, 0, 0, { 0 }, 2, { 2, 1 }, 2, { 2, 1 } },
    { "add missing 4", KVQ_MUT_ADD, 0, 0, { 0 }, 4, { 1, 2, 3, 4 }, 4, { 1, 2, 3, 4 } },
    { "add missing 8",
      KVQ_MUT_ADD,
      0,
      0,
      { 0 },
      8,
      { 9, 0, 0, 0, 0, 0, 0, 1 },
      8,
      { 9, 0, 0, 0, 0, 0, 0, 1 } },
    { "add 1+1 byte", KVQ_MUT_ADD, 1, 1, { 1 }, 1, { 2 }, 1, { 3 } },
    { "add 1 byte wraps", KVQ_MUT_ADD, 1, 1, { 0xff }, 1, { 1 }, 1, { 0 } },
    { "add 2 byte carry", KVQ_MUT_ADD, 1, 2, { 0xff, 0 }, 2, { 1, 0 }, 2, { 0, 1 } },
    { "add 4 byte wraps",
      KVQ_MUT_ADD,
      1,
      4,
      { 0xff, 0xff, 0xff, 0xff },
      4,
      { 1, 0, 0, 0 },
      4,
      { 0, 0, 0, 0 } },
    { "add 8 byte carry",
      KVQ_MUT_ADD,
      1,
      8,
      { 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0 },
      8,
      { 1, 0, 0, 0, 0, 0, 0, 0 },
      8,
      { 0, 0, 0, 0, 1, 0, 0, 0 } },
    { "add 8 byte negative",
      KVQ_MUT_ADD,
      1,
      8,
      { 10, 0, 0, 0, 0, 0, 0, 0 },
      8,
      { 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff },
      8,
      { 7, 0, 0, 0, 0, 0, 0, 0 } },
    { "add zero-extends the value",
      KVQ_MUT_ADD,
      1,
      1,
      { 0xff },
      4,
      { 1, 0, 0, 0 },
      4,
      { 0, 1, 0, 0 } },
    { "add truncates the value",
      KVQ_MUT_ADD,
      1,
      8,
      { 1, 2, 3, 4, 5, 6, 7, 8 },
      2,
      { 1, 0 },
      2,
      { 2, 2 } },
    { "add to an empty value", KVQ_MUT_ADD, 1, 0, { 0 }, 2, { 7, 1 }, 2, { 7, 1 } },
    /* MAX / MIN: unsigned little-endian of the operand's width. */
    { "max missing", KVQ_MUT_MAX, 0, 0, { 0 }, 2, { 5, 0 }, 2, { 5, 0 } },
    { "max keeps larger", KVQ_MUT_MAX, 1, 2, { 5, 0 }, 2, { 3, 0 }, 2, { 5, 0 } },
    { "max takes larger", KVQ_MUT_MAX, 1, 2, { 3, 0 }, 2, { 5, 0 }, 2, { 5, 0 } },
    { "max is little-endian", KVQ_MUT_MAX, 1, 2, { 0, 1 }, 2, { 0xff, 0 }, 2, { 0, 1 } },
    { "max truncates the value", KVQ_MUT_MAX, 1, 4, { 1, 0, 0, 9 }, 2, { 2, 0 }, 2, { 2, 0 } },
    { "max zero-extends the value", KVQ_MUT_MAX, 1, 1, { 9 }, 2, { 1, 0 }, 2, { 9, 0 } },
    { "max operand longer wins", KVQ_MUT_MAX, 1, 1, { 9 }, 2, { 1, 1 }, 2, { 1, 1 } },
    { "min missing takes operand", KVQ_MUT_MIN, 0, 0, { 0 }, 2, { 5, 0 }, 2, { 5, 0 } },
    { "min takes smaller", KVQ_MUT_MIN, 1, 2, { 5, 0 }, 2, { 3, 0 }, 2, { 3, 0 } },
    { "min keeps smaller", KVQ_MUT_MIN, 1, 2, { 3, 0 }, 2, { 5, 0 }, 2, { 3, 0 } },
    { "min is little-endian", KVQ_MUT_MIN, 1, 2, { 0, 1 }, 2, { 0xff, 0 }, 2, { 0xff, 0 } },
    { "min zero-extends the value", KVQ_MUT_MIN, 1, 1, { 3 }, 2, { 5, 0 }, 2, { 3, 0 } },
    { "min truncates the value", KVQ_MUT_MIN, 1, 4, { 9, 0, 0, 1 }, 2, { 10, 0 }, 2, { 9, 0 } },
    /* BYTE_MIN / BYTE_MAX: lexicographic; a missing key takes the operand. */
    { "byte_min missing", KVQ_MUT_BYTE_MIN, 0, 0, { 0 }, 1, { 'm' }, 1, { 'm' } },
    { "byte_max missing", KVQ_MUT_BYTE_MAX, 0, 0, { 0 }, 1, { 'm' }, 1, { 'm' } },
    { "byte_min keeps smaller",
      KVQ_MUT_BYTE_MIN,
      1,
      3,
      { 'a', 'b', 'c' },
      3,
      { 'a', 'b', 'd' },
      3,
      { 'a', 'b', 'c' } },
    { "byte_max takes larger",
      KVQ_MUT_BYTE_MAX,
      1,
      3,
      { 'a', 'b', 'c' },
      3,
      { 'a', 'b', 'd' },
      3,
      { 'a', 'b', 'd' } },
    { "byte_min prefix is smaller",
      KVQ_MUT_BYTE_MIN,
      1,
      3,
      { 'a', 'b', 'c' },
      2,
      { 'a', 'b' },
      2,
      { 'a', 'b' } },
    { "byte_max longer is larger",
      KVQ_MUT_BYTE_MAX,
      1,
      2,
      { 'a', 'b' },
      3,
      { 'a', 'b', 0 },
      3,
      { 'a', 'b', 0 } },
    { "byte_max unsigned bytes", KVQ_MUT_BYTE_MAX, 1, 1, { 0x80 }, 1, { 0x7f }, 1, { 0x80 } },
    { "byte_min empty value is smallest", KVQ_MUT_BYTE_MIN, 1, 0, { 0 }, 1, { 'x' }, 0, { 0 } },
    { "byte_max over an empty value", KVQ_MUT_BYTE_MAX, 1, 0, { 0 }, 1, { 'x' }, 1, { 'x' } },
    /* BIT_AND (AndV2): a missing key takes the operand; a shorter value is zero-extended. */
    { "and missing", KVQ_MUT_BIT_AND, 0, 0, { 0 }, 2, { 0x0f, 0xf0 }, 2, { 0x0f, 0xf0 } },
    { "and", KVQ_MUT_BIT_AND, 1, 2, { 0xff, 0x0f }, 2, { 0xf0, 0xff }, 2, { 0xf0, 0x0f } },
    { "and zero-extends", KVQ_MUT_BIT_AND, 1, 1, { 0xff }, 2, { 0x0f, 0x0f }, 2, { 0x0f, 0 } },
    { "and truncates", KVQ_MUT_BIT_AND, 1, 3, { 0xff, 0xff, 0xff }, 1, { 0x0f }, 1, { 0x0f } },
    /* BIT_OR, BIT_XOR: a missing key takes the operand. */
    { "or missing", KVQ_MUT_BIT_OR, 0, 0, { 0 }, 1, { 1 }, 1, { 1 } },
    { "or", KVQ_MUT_BIT_OR, 1, 2, { 1, 2 }, 2, { 0x10, 0x20 }, 2, { 0x11, 0x22 } },
    { "or zero-extends", KVQ_MUT_BIT_OR, 1, 1, { 1 }, 2, { 0x10, 0x20 }, 2, { 0x11, 0x20 } },
    { "or truncates", KVQ_MUT_BIT_OR, 1, 3, { 1, 2, 3 }, 1, { 0x10 }, 1, { 0x11 } },
    { "xor missing", KVQ_MUT_BIT_XOR, 0, 0, { 0 }, 1, { 0xaa }, 1, { 0xaa } },
    { "xor", KVQ_MUT_BIT_XOR, 1, 2, { 0xff, 0 }, 2, { 0x0f, 0x0f }, 2, { 0xf0, 0x0f } },
    { "xor zero-extends", KVQ_MUT_BIT_XOR, 1, 1, { 0xff }, 2, { 0x0f, 0x0f }, 2, { 0xf0, 0x0f } },
    { "xor truncates", KVQ_MUT_BIT_XOR, 1, 2, { 0xff, 0xff }, 1, { 0x0f }, 1, { 0xf0 } },
};

/* One case of an atomic operation on one key, as both tables below give it. */
typedef struct op_run {
    const char *name;
    const char *what; /* the messages' prefix */
    kvq_mutation op;
    int has_init; /* 0: the key is missing */
    const uint8_t *init;
    size_t init_len;
    const uint8_t *arg;
    size_t arg_len;
    const uint8_t *want; /* NULL: the key is absent afterwards */
    size_t want_len;
    const char *range_want; /* with ranges: the value the range reads find, or NULL */
} op_run;

/* Runs one case in three ways: (A) the initial value committed, the op and a read in the next
 * transaction, then a read after commit; (B) the same without reading before commit (the op is
 * applied at commit on the stored value); (C) the initial value written in the same
 * transaction as the op. With ranges, the reads in the transaction are also a get_range over
 * the key (forward and reverse). */
static void run_op_modes(kvq_db *db, const char *p, size_t idx, const op_run *c, int ranges)
{
    char where[160];
    for (int mode = 0; mode < 3; mode++) {
        char ks[32];
        snprintf(ks, sizeof(ks), "c%zu_%d", idx, mode);
        cf_key k = cf_k(p, ks);
        kvq_txn *t = new_txn(db);
        if (c->has_init)
            assert_ok(kvq_txn_set(t, k.b, k.n, c->init, c->init_len));
        else
            assert_ok(kvq_txn_clear(t, k.b, k.n));
        if (mode != 2) {
            assert_ok(kvq_txn_commit(t));
            kvq_txn_reset(t);
        }
        assert_ok(kvq_txn_atomic_op(t, k.b, k.n, c->arg, c->arg_len, c->op));
        if (mode != 1) {
            snprintf(where, sizeof(where), "%s'%s' (mode %c), read in the transaction", c->what,
                     c->name, 'A' + mode);
            cf_expect_value(t, k.b, k.n, 0, c->want, c->want_len, where);
            cf_expect_value(t, k.b, k.n, KVQ_SNAPSHOT, c->want, c->want_len, where);
            if (ranges) {
                struct kv_str row = { ks, c->range_want };
                char end[40];
                snprintf(end, sizeof(end), "%s~", ks);
                expect_range(t, p, ks, end, 0, 0, &row, c->range_want != NULL, 0);
                expect_range(t, p, ks, end, 0, KVQ_REVERSE, &row, c->range_want != NULL, 0);
            }
        }
        assert_ok(kvq_txn_commit(t));
        kvq_txn_reset(t);
        snprintf(where, sizeof(where), "%s'%s' (mode %c), read after commit", c->what, c->name,
                 'A' + mode);
        cf_expect_value(t, k.b, k.n, 0, c->want, c->want_len, where);
        kvq_txn_destroy(t);
    }
}

static void run_atomic_case(kvq_db *db, const char *p, size_t idx)
{
    const struct atomic_case *c = &atomic_cases[idx];
    op_run r = { c->name, "atomic ", c->op, c->has_initial, c->init, c->init_len, c->arg,
                 c->arg_len, c->want, c->want_len, NULL };
    run_op_modes(db, p, idx, &r, 0);
}

static void test_atomic_ops(void **state)
{
    (void)state;
    const char *p = "basic_atomic";
    kvq_db *db = cf_open_clean(p);
    for (size_t i = 0; i < sizeof(atomic_cases) / sizeof(atomic_cases[0]); i++)
        run_atomic_case(db, p, i);
    kvq_db_close(db);
}

static void test_atomic_sequences(void **state)
{
    (void)state;
    const char *p = "basic_atomic_seq";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "counter");
    uint8_t one[8], got[8];
    cf_put_le(one, 1, 8);

    /* Several adds in one transaction accumulate, and each read sees the sum so far. */
    kvq_txn *t = new_txn(db);
    for (uint64_t i = 1; i <= 5; i++) {
        assert_ok(kvq_txn_atomic_op(t, k.b, k.n, one, 8, KVQ_MUT_ADD));
        uint8_t want[8];
        cf_put_le(want, i, 8);
        cf_expect_value(t, k.b, k.n, 0, want, 8, "adds accumulate");
    }
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    assert_int_equal(cf_read_key(db, k.b, k.n, got, 8), 8);
    assert_int_equal(cf_le64(got, 8), 5);

    /* An add after a clear in the same transaction adds to zero; a set after adds wins. */
    assert_ok(kvq_txn_clear(t, k.b, k.n));
    assert_ok(kvq_txn_atomic_op(t, k.b, k.n, one, 8, KVQ_MUT_ADD));
    cf_expect_value(t, k.b, k.n, 0, one, 8, "add after clear");
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    assert_int_equal(cf_read_key(db, k.b, k.n, got, 8), 8);
    assert_int_equal(cf_le64(got, 8), 1);

    /* Mixed operations in order: add 10, max 7 (no change), min 4, xor 1, set, add. */
    uint8_t ten8[8], seven[8], four[8], x1[8];
    cf_put_le(ten8, 10, 8);
    cf_put_le(seven, 7, 8);
    cf_put_le(four, 4, 8);
    cf_put_le(x1, 1, 8);
    assert_ok(kvq_txn_atomic_op(t, k.b, k.n, ten8, 8, KVQ_MUT_ADD));   /* 11 */
    assert_ok(kvq_txn_atomic_op(t, k.b, k.n, seven, 8, KVQ_MUT_MAX));  /* 11 */
    assert_ok(kvq_txn_atomic_op(t, k.b, k.n, four, 8, KVQ_MUT_MIN));   /* 4 */
    assert_ok(kvq_txn_atomic_op(t, k.b, k.n, x1, 8, KVQ_MUT_BIT_XOR)); /* 5 */
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    assert_int_equal(cf_read_key(db, k.b, k.n, got, 8), 8);
    assert_int_equal(cf_le64(got, 8), 5);
    assert_ok(kvq_txn_atomic_op(t, k.b, k.n, ten8, 8, KVQ_MUT_ADD));
    assert_ok(kvq_txn_set(t, k.b, k.n, seven, 8));
    assert_ok(kvq_txn_atomic_op(t, k.b, k.n, one, 8, KVQ_MUT_ADD));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
    assert_int_equal(cf_read_key(db, k.b, k.n, got, 8), 8);
    assert_int_equal(cf_le64(got, 8), 8);

    /* An unknown mutation type is refused. */
    t = new_txn(db);
    assert_err(kvq_txn_atomic_op(t, k.b, k.n, one, 8, (kvq_mutation)3), KVQ_EINVALID_MUTATION_TYPE);
    assert_err(kvq_txn_atomic_op(t, k.b, k.n, one, 8, (kvq_mutation)99),
               KVQ_EINVALID_MUTATION_TYPE);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* ---- APPEND_IF_FITS and COMPARE_AND_CLEAR --------------------------------------------------- */

struct append_clear_case {
    const char *name;
    kvq_mutation op;
    const char *init; /* NULL: the key is missing */
    const char *arg;
    const char *want; /* NULL: the key is absent afterwards */
};

/* FoundationDB's results (fdbclient/Atomic.h doAppendIfFits, doCompareAndClear). */
static const struct append_clear_case append_clear_cases[] = {
    { "append", KVQ_MUT_APPEND_IF_FITS, "ab", "cd", "abcd" },
    { "append to a missing key", KVQ_MUT_APPEND_IF_FITS, NULL, "cd", "cd" },
    { "append nothing to a missing key", KVQ_MUT_APPEND_IF_FITS, NULL, "", "" },
    { "append nothing", KVQ_MUT_APPEND_IF_FITS, "ab", "", "ab" },
    { "append to an empty value", KVQ_MUT_APPEND_IF_FITS, "", "cd", "cd" },
    { "compare_and_clear equal", KVQ_MUT_COMPARE_AND_CLEAR, "ab", "ab", NULL },
    { "compare_and_clear longer", KVQ_MUT_COMPARE_AND_CLEAR, "ab", "abc", "ab" },
    { "compare_and_clear prefix", KVQ_MUT_COMPARE_AND_CLEAR, "ab", "a", "ab" },
    { "compare_and_clear other", KVQ_MUT_COMPARE_AND_CLEAR, "ab", "xy", "ab" },
    { "compare_and_clear missing", KVQ_MUT_COMPARE_AND_CLEAR, NULL, "ab", NULL },
    { "compare_and_clear missing, empty", KVQ_MUT_COMPARE_AND_CLEAR, NULL, "", NULL },
    { "compare_and_clear empty value", KVQ_MUT_COMPARE_AND_CLEAR, "", "", NULL },
    { "compare_and_clear empty value, other", KVQ_MUT_COMPARE_AND_CLEAR, "", "x", "" },
};

/* As run_atomic_case, the reads in the transaction with a get_range over the key. */
static void run_append_clear_case(kvq_db *db, const char *p, size_t idx)
{
    const struct append_clear_case *c = &append_clear_cases[idx];
    op_run r = { c->name, "", c->op, c->init != NULL,
                 (const uint8_t *)c->init, c->init != NULL ? strlen(c->init) : 0,
                 (const uint8_t *)c->arg, strlen(c->arg),
                 (const uint8_t *)c->want, c->want != NULL ? strlen(c->want) : 0, c->want };
    run_op_modes(db, p, idx, &r, 1);
}

static void test_append_if_fits_compare_and_clear(void **state)
{
    (void)state;
    const char *p = "basic_append_clear";
    kvq_db *db = cf_open_clean(p);
    for (size_t i = 0; i < sizeof(append_clear_cases) / sizeof(append_clear_cases[0]); i++)
        run_append_clear_case(db, p, i);
    kvq_db_close(db);
}

/* APPEND_IF_FITS up to exactly 100,000 bytes; one byte more leaves the value unchanged. */
static void test_append_if_fits_limit(void **state)
{
    (void)state;
    const char *p = "basic_append_limit";
    kvq_db *db = cf_open_clean(p);
    uint8_t *v = malloc(KVQ_MAX_VALUE_SIZE + 1);
    assert_non_null(v);
    memset(v, 'a', KVQ_MAX_VALUE_SIZE);
    v[KVQ_MAX_VALUE_SIZE - 1] = 'b';
    cf_key k = cf_k(p, "k"), k2 = cf_k(p, "k2"), k3 = cf_k(p, "k3");
    kvq_txn *t = new_txn(db);
    /* Read in the transaction. */
    assert_ok(kvq_txn_set(t, k.b, k.n, v, KVQ_MAX_VALUE_SIZE - 1));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    assert_ok(kvq_txn_atomic_op(t, k.b, k.n, K("b"), KVQ_MUT_APPEND_IF_FITS));
    cf_expect_value(t, k.b, k.n, 0, v, KVQ_MAX_VALUE_SIZE, "append to exactly 100,000 bytes");
    assert_ok(kvq_txn_atomic_op(t, k.b, k.n, K("c"), KVQ_MUT_APPEND_IF_FITS));
    cf_expect_value(t, k.b, k.n, 0, v, KVQ_MAX_VALUE_SIZE, "append past 100,000 bytes");
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    cf_expect_value(t, k.b, k.n, 0, v, KVQ_MAX_VALUE_SIZE, "100,000 bytes after commit");
    kvq_txn_reset(t);
    /* Applied at commit, unread: 99,998 + 2 fits, then + 1 does not. */
    assert_ok(kvq_txn_set(t, k2.b, k2.n, v, KVQ_MAX_VALUE_SIZE - 2));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    assert_ok(kvq_txn_atomic_op(t, k2.b, k2.n, K("ab"), KVQ_MUT_APPEND_IF_FITS));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    assert_ok(kvq_txn_atomic_op(t, k2.b, k2.n, K("x"), KVQ_MUT_APPEND_IF_FITS));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    cf_expect_value(t, k2.b, k2.n, 0, v, KVQ_MAX_VALUE_SIZE, "appended at commit");
    kvq_txn_reset(t);
    /* A 100,000-byte operand fits a missing key, and then nothing more fits. */
    v[KVQ_MAX_VALUE_SIZE - 1] = 'a';
    assert_ok(kvq_txn_atomic_op(t, k3.b, k3.n, v, KVQ_MAX_VALUE_SIZE, KVQ_MUT_APPEND_IF_FITS));
    assert_ok(kvq_txn_atomic_op(t, k3.b, k3.n, K("z"), KVQ_MUT_APPEND_IF_FITS));
    cf_expect_value(t, k3.b, k3.n, 0, v, KVQ_MAX_VALUE_SIZE, "a 100,000-byte operand");
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    cf_expect_value(t, k3.b, k3.n, 0, v, KVQ_MAX_VALUE_SIZE, "a 100,000-byte operand, committed");
    kvq_txn_reset(t);
    /* Operands longer than a value are refused, as for every atomic operation. */
    assert_err(kvq_txn_atomic_op(t, k.b, k.n, v, KVQ_MAX_VALUE_SIZE + 1, KVQ_MUT_APPEND_IF_FITS),
               KVQ_EVALUE_TOO_LARGE);
    assert_err(kvq_txn_atomic_op(t, k.b, k.n, v, KVQ_MAX_VALUE_SIZE + 1, KVQ_MUT_COMPARE_AND_CLEAR),
               KVQ_EVALUE_TOO_LARGE);
    kvq_txn_destroy(t);
    free(v);
    kvq_db_close(db);
}

/* Read-your-writes of the two operations among other writes: gets and ranges see a cleared key
 * as absent, whether its value was written in the transaction or is read from the database. */
static void test_append_clear_ryw(void **state)
{
    (void)state;
    const char *p = "basic_append_ryw";
    kvq_db *db = cf_open_clean(p);
    kvq_txn *t = new_txn(db);
    set_s(t, p, "a", "x");
    set_s(t, p, "b", "y");
    set_s(t, p, "c", "z");
    set_s(t, p, "d", "w");
    set_s(t, p, "e", "e1");
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    cf_key b = cf_k(p, "b"), c = cf_k(p, "c"), d = cf_k(p, "d"), e = cf_k(p, "e");
    /* b: read first (the base is known), cleared, then appended to: a missing key. */
    expect_s(t, p, "b", "y", "b before");
    assert_ok(kvq_txn_atomic_op(t, b.b, b.n, K("y"), KVQ_MUT_COMPARE_AND_CLEAR));
    expect_s(t, p, "b", NULL, "b cleared");
    static const struct kv_str r1[] = { { "a", "x" }, { "c", "z" }, { "d", "w" }, { "e", "e1" } };
    static const struct kv_str r1r[] = { { "e", "e1" }, { "d", "w" }, { "c", "z" }, { "a", "x" } };
    expect_range(t, p, "", "z", 0, 0, r1, 4, 0);
    expect_range(t, p, "", "z", 0, KVQ_REVERSE, r1r, 4, 0);
    expect_range(t, p, "", "z", 2, 0, r1, 2, 1);
    assert_ok(kvq_txn_atomic_op(t, b.b, b.n, K("q"), KVQ_MUT_APPEND_IF_FITS));
    expect_s(t, p, "b", "q", "b appended after the clear");
    /* c: no match, unchanged. d: cleared without a read (the base comes from the database). */
    assert_ok(kvq_txn_atomic_op(t, c.b, c.n, K("nope"), KVQ_MUT_COMPARE_AND_CLEAR));
    assert_ok(kvq_txn_atomic_op(t, d.b, d.n, K("w"), KVQ_MUT_COMPARE_AND_CLEAR));
    static const struct kv_str r2[] = { { "a", "x" }, { "b", "q" }, { "c", "z" }, { "e", "e1" } };
    static const struct kv_str r2r[] = { { "e", "e1" }, { "c", "z" }, { "b", "q" }, { "a", "x" } };
    expect_range(t, p, "", "z", 0, 0, r2, 4, 0);
    expect_range(t, p, "", "z", 0, KVQ_REVERSE, r2r, 4, 0);
    expect_range(t, p, "c", "e", 0, 0, r2 + 2, 1, 0);
    expect_s(t, p, "d", NULL, "d cleared");
    /* e: append, clear on the appended value, append again, all on an unread base. */
    assert_ok(kvq_txn_atomic_op(t, e.b, e.n, K("2"), KVQ_MUT_APPEND_IF_FITS));
    assert_ok(kvq_txn_atomic_op(t, e.b, e.n, K("e12"), KVQ_MUT_COMPARE_AND_CLEAR));
    static const struct kv_str r3[] = { { "a", "x" }, { "b", "q" }, { "c", "z" } };
    expect_range(t, p, "", "z", 0, 0, r3, 3, 0);
    expect_s(t, p, "e", NULL, "e cleared");
    assert_ok(kvq_txn_atomic_op(t, e.b, e.n, K("3"), KVQ_MUT_APPEND_IF_FITS));
    expect_s(t, p, "e", "3", "e appended after the clear");
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    static const struct kv_str after[] = { { "a", "x" }, { "b", "q" }, { "c", "z" }, { "e", "3" } };
    expect_range(t, p, "", "z", 0, 0, after, 4, 0);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* ---- visibility, snapshot isolation, read-only commits ------------------------------------- */

static void test_visibility_and_snapshot(void **state)
{
    (void)state;
    const char *p = "basic_vis";
    kvq_db *db = cf_open_clean(p);
    kvq_txn *w = new_txn(db);
    set_s(w, p, "a", "1");
    set_s(w, p, "c", "1");
    assert_ok(kvq_txn_commit(w));
    int64_t cv1 = 0;
    assert_ok(kvq_txn_get_committed_version(&cv1, w));
    kvq_txn_reset(w);

    /* r1 takes its read version by reading; r2 only by asking for it. */
    kvq_txn *r1 = new_txn(db), *r2 = new_txn(db);
    expect_s(r1, p, "a", "1", "first read");
    int64_t rv2 = 0;
    assert_ok(kvq_txn_get_read_version(&rv2, r2));
    assert_true(rv2 >= cv1);

    set_s(w, p, "a", "2");
    set_s(w, p, "b", "2");
    cf_key c = cf_k(p, "c");
    assert_ok(kvq_txn_clear(w, c.b, c.n));
    assert_ok(kvq_txn_commit(w));
    int64_t cv2 = 0;
    assert_ok(kvq_txn_get_committed_version(&cv2, w));
    assert_true(cv2 > cv1);
    assert_true(cv2 > rv2);

    /* Both still see the state at their read version, in every kind of read. */
    static const struct kv_str old[] = { { "a", "1" }, { "c", "1" } };
    static const struct kv_str old_rev[] = { { "c", "1" }, { "a", "1" } };
    kvq_txn *rs[2] = { r1, r2 };
    for (int i = 0; i < 2; i++) {
        expect_s(rs[i], p, "a", "1", "snapshot isolation: a");
        expect_s(rs[i], p, "b", NULL, "snapshot isolation: b");
        expect_s(rs[i], p, "c", "1", "snapshot isolation: c");
        expect_range(rs[i], p, "", "z", 0, 0, old, 2, 0);
        expect_range(rs[i], p, "", "z", 0, KVQ_REVERSE | KVQ_SNAPSHOT, old_rev, 2, 0);
        int64_t rv = 0;
        assert_ok(kvq_txn_get_read_version(&rv, rs[i]));
        assert_true(rv < cv2);
        assert_ok(kvq_txn_commit(rs[i])); /* read-only: always commits */
        assert_err(kvq_txn_get_committed_version(&rv, rs[i]), KVQ_ENO_COMMIT_VERSION);
        uint8_t vs[10];
        assert_err(kvq_txn_get_versionstamp(vs, rs[i]), KVQ_ENO_COMMIT_VERSION);
    }

    /* A transaction that starts afterwards sees the commit. */
    kvq_txn *r3 = new_txn(db);
    int64_t rv3 = 0;
    assert_ok(kvq_txn_get_read_version(&rv3, r3));
    assert_true(rv3 >= cv2);
    static const struct kv_str now[] = { { "a", "2" }, { "b", "2" } };
    expect_range(r3, p, "", "z", 0, 0, now, 2, 0);
    /* An empty transaction commits too. */
    kvq_txn *e = new_txn(db);
    assert_ok(kvq_txn_commit(e));

    /* Reset drops the read version: r1 then sees the new state. */
    kvq_txn_reset(r1);
    expect_range(r1, p, "", "z", 0, 0, now, 2, 0);

    kvq_txn_destroy(e);
    kvq_txn_destroy(r3);
    kvq_txn_destroy(r2);
    kvq_txn_destroy(r1);
    kvq_txn_destroy(w);
    kvq_db_close(db);
}

static void test_uncommitted_writes_invisible(void **state)
{
    (void)state;
    const char *p = "basic_uncommitted";
    kvq_db *db = cf_open_clean(p);
    kvq_txn *w = new_txn(db), *r = new_txn(db);
    set_s(w, p, "x", "pending");
    expect_s(r, p, "x", NULL, "another transaction's buffered write is invisible");
    /* Destroying (or resetting) drops the writes. */
    kvq_txn_reset(w);
    assert_ok(kvq_txn_commit(w));
    /* A committed transaction takes no more writes until it is reset (FoundationDB's 2017). */
    cf_key y = cf_k(p, "y");
    assert_err(kvq_txn_set(w, y.b, y.n, K("late")), KVQ_EUSED_DURING_COMMIT);
    kvq_txn_reset(w);
    set_s(w, p, "y", "dropped");
    kvq_txn_destroy(w);
    kvq_txn_reset(r);
    expect_s(r, p, "x", NULL, "reset drops writes");
    expect_s(r, p, "y", NULL, "destroy drops writes");
    kvq_txn_destroy(r);
    kvq_db_close(db);
}

/* ---- versionstamps ------------------------------------------------------------------------- */

/* Builds prefix + 10-byte placeholder + suffix + 4-byte little-endian offset. */
static size_t vs_key(uint8_t *out, const cf_key *prefix, const char *suffix)
{
    size_t n = 0;
    memcpy(out, prefix->b, prefix->n);
    n = prefix->n;
    memset(out + n, 0, 10);
    n += 10;
    memcpy(out + n, suffix, strlen(suffix));
    n += strlen(suffix);
    cf_put_le(out + n, (uint64_t)prefix->n, 4);
    return n + 4;
}

static void test_versionstamped_keys(void **state)
{
    (void)state;
    const char *p = "basic_vsk";
    kvq_db *db = cf_open_clean(p);
    cf_key pre = cf_k(p, "q/"), end = cf_after_prefix(&pre);
    enum { N = 20 };
    uint8_t stamps[N][10];
    kvq_txn *t = new_txn(db);
    for (int i = 0; i < N; i++) {
        uint8_t key[300];
        size_t kn = vs_key(key, &pre, "/x");
        char val[32];
        snprintf(val, sizeof(val), "v%02d", i);
        assert_ok(kvq_txn_set_versionstamped_key(t, key, kn, K(val)));
        if (i % 2 == 1) {
            /* Sometimes with a read version, sometimes a plain write besides. */
            cf_key other = cf_k(p, "other");
            assert_ok(kvq_txn_set(t, other.b, other.n, K(val)));
        }
        assert_ok(kvq_txn_commit(t));
        assert_ok(kvq_txn_get_versionstamp(stamps[i], t));
        int64_t cv = 0;
        assert_ok(kvq_txn_get_committed_version(&cv, t));
        assert_true(cv > 0);
        assert_int_equal((uint64_t)cv, cf_be64(stamps[i]));
        if (i > 0 && memcmp(stamps[i - 1], stamps[i], 10) >= 0)
            fail_msg("versionstamp %d is not greater than the one before", i);
        kvq_txn_reset(t);
    }

    /* The stored keys hold exactly those stamps, in commit order, with their values. */
    const kvq_kv *kvs;
    size_t n;
    bool more;
    assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, pre.b, pre.n, end.b, end.n, 0, 0));
    assert_int_equal(n, N);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(kvs[i].key.len, pre.n + 10 + 2);
        assert_memory_equal(kvs[i].key.data, pre.b, pre.n);
        assert_memory_equal(kvs[i].key.data + pre.n, stamps[i], 10);
        assert_memory_equal(kvs[i].key.data + pre.n + 10, "/x", 2);
        char val[32];
        snprintf(val, sizeof(val), "v%02zu", i);
        assert_int_equal(kvs[i].value.len, strlen(val));
        assert_memory_equal(kvs[i].value.data, val, strlen(val));
    }
    kvq_txn_reset(t);

    /* Several stamped keys in one transaction share its stamp; the placeholder may sit
     * anywhere, and its bytes do not matter. */
    cf_key pre2 = cf_k(p, "m/"), end2 = cf_after_prefix(&pre2);
    for (int i = 0; i < 3; i++) {
        uint8_t key[300];
        char sfx[24];
        snprintf(sfx, sizeof(sfx), "/%d", i);
        size_t kn = vs_key(key, &pre2, sfx);
        memset(key + pre2.n, 0xa5, 10);
        assert_ok(kvq_txn_set_versionstamped_key(t, key, kn, K("m")));
    }
    assert_ok(kvq_txn_commit(t));
    uint8_t st[10];
    assert_ok(kvq_txn_get_versionstamp(st, t));
    assert_true(memcmp(st, stamps[N - 1], 10) > 0);
    kvq_txn_reset(t);
    assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, pre2.b, pre2.n, end2.b, end2.n, 0, 0));
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) {
        assert_memory_equal(kvs[i].key.data + pre2.n, st, 10);
        assert_int_equal(kvs[i].key.data[pre2.n + 11], '0' + (int)i);
    }
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_versionstamped_value(void **state)
{
    (void)state;
    const char *p = "basic_vsv";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k"), k2 = cf_k(p, "k2");
    uint8_t val[20];
    memcpy(val, "ab", 2);
    memset(val + 2, 0, 10);
    memcpy(val + 12, "cd", 2);
    cf_put_le(val + 14, 2, 4);
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_set_versionstamped_value(t, k.b, k.n, val, 18));
    /* Offset 0, the whole value a stamp. */
    uint8_t v2[14] = { 0 };
    assert_ok(kvq_txn_set_versionstamped_value(t, k2.b, k2.n, v2, 14));
    /* The key is unreadable in this transaction: its value is not known yet. */
    kvq_bytes v;
    int present;
    assert_err(kvq_txn_get(&v, &present, t, k.b, k.n, 0), KVQ_EACCESSED_UNREADABLE);
    assert_ok(kvq_txn_commit(t));
    uint8_t st[10];
    assert_ok(kvq_txn_get_versionstamp(st, t));
    kvq_txn_reset(t);
    uint8_t want[14];
    memcpy(want, "ab", 2);
    memcpy(want + 2, st, 10);
    memcpy(want + 12, "cd", 2);
    cf_expect_value(t, k.b, k.n, 0, want, 14, "versionstamped value");
    cf_expect_value(t, k2.b, k2.n, 0, st, 10, "versionstamped value at offset 0");
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_versionstamp_unreadable(void **state)
{
    (void)state;
    const char *p = "basic_vsu";
    kvq_db *db = cf_open_clean(p);
    cf_key pre = cf_k(p, "q/"), pend = cf_after_prefix(&pre);
    cf_key before = cf_k(p, "q"), after = cf_k(p, "r");
    for (int with_rv = 0; with_rv < 2; with_rv++) {
        kvq_txn *t = new_txn(db);
        int64_t rv = 0;
        if (with_rv)
            assert_ok(kvq_txn_get_read_version(&rv, t));
        uint8_t key[300];
        size_t kn = vs_key(key, &pre, "z");
        assert_ok(kvq_txn_set_versionstamped_key(t, key, kn, K("v")));
        kvq_bytes v;
        int present;
        const kvq_kv *kvs;
        size_t n;
        bool more;
        /* Inside the span: a stamp far in the future, and the all-0xFF end. */
        uint8_t probe[300];
        memcpy(probe, pre.b, pre.n);
        memset(probe + pre.n, 0x7f, 10);
        probe[pre.n + 10] = 'z';
        assert_err(kvq_txn_get(&v, &present, t, probe, pre.n + 11, 0), KVQ_EACCESSED_UNREADABLE);
        assert_err(kvq_txn_get(&v, &present, t, probe, pre.n + 11, KVQ_SNAPSHOT),
                   KVQ_EACCESSED_UNREADABLE);
        memset(probe + pre.n, 0xff, 10);
        assert_err(kvq_txn_get(&v, &present, t, probe, pre.n + 11, 0), KVQ_EACCESSED_UNREADABLE);
        /* Ranges that reach into the span, in both directions. */
        assert_err(kvq_txn_get_range(&kvs, &n, &more, t, pre.b, pre.n, pend.b, pend.n, 0, 0),
                   KVQ_EACCESSED_UNREADABLE);
        assert_err(kvq_txn_get_range(&kvs, &n, &more, t, pre.b, pre.n, pend.b, pend.n, 0,
                                     KVQ_REVERSE | KVQ_SNAPSHOT),
                   KVQ_EACCESSED_UNREADABLE);
        /* Just after the span: the all-0xFF key followed by 0x00 is readable, as is 'z'+1. */
        probe[pre.n + 11] = 0x00;
        assert_ok(kvq_txn_get(&v, &present, t, probe, pre.n + 12, 0));
        assert_int_equal(present, 0);
        probe[pre.n + 10] = 'z' + 1;
        assert_ok(kvq_txn_get(&v, &present, t, probe, pre.n + 11, 0));
        assert_int_equal(present, 0);
        /* Outside the span: keys and ranges before and after it. */
        assert_ok(kvq_txn_get(&v, &present, t, before.b, before.n, 0));
        assert_ok(kvq_txn_get(&v, &present, t, pre.b, pre.n, 0));
        assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, before.b, before.n, pre.b, pre.n, 0, 0));
        assert_ok(kvq_txn_get(&v, &present, t, after.b, after.n, 0));
        if (with_rv) {
            /* The span starts at (read version + 1, 0): a key stamped before the read version
             * is readable, one stamped just after it is not. */
            memcpy(probe, pre.b, pre.n);
            for (int i = 0; i < 8; i++)
                probe[pre.n + i] = (uint8_t)((uint64_t)(rv - 1) >> (56 - 8 * i));
            probe[pre.n + 8] = probe[pre.n + 9] = 0;
            probe[pre.n + 10] = 'z';
            assert_ok(kvq_txn_get(&v, &present, t, probe, pre.n + 11, 0));
            for (int i = 0; i < 8; i++)
                probe[pre.n + i] = (uint8_t)((uint64_t)(rv + 1) >> (56 - 8 * i));
            assert_err(kvq_txn_get(&v, &present, t, probe, pre.n + 11, 0),
                       KVQ_EACCESSED_UNREADABLE);
        } else {
            /* Without a read version the span starts at the all-zero stamp. */
            memcpy(probe, pre.b, pre.n);
            memset(probe + pre.n, 0, 10);
            probe[pre.n + 10] = 'z';
            assert_err(kvq_txn_get(&v, &present, t, probe, pre.n + 11, 0),
                       KVQ_EACCESSED_UNREADABLE);
        }
        /* The transaction still commits, and afterwards the key reads normally. */
        assert_ok(kvq_txn_commit(t));
        kvq_txn_reset(t);
        assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, pre.b, pre.n, pend.b, pend.n, 0, 0));
        assert_int_equal(n, (size_t)with_rv + 1);
        kvq_txn_destroy(t);
    }
    kvq_db_close(db);
}

/* What stays unreadable and what a clear makes readable again, as in FoundationDB's
 * read-your-writes map: a key set with a versionstamped value stays unreadable when it is set
 * again; a clear of it, or a clear_range over a versionstamped key's span, makes what it covers
 * readable (it reads as cleared), while the rest of the span stays unreadable. */
static void test_versionstamp_unreadable_set_and_clear(void **state)
{
    (void)state;
    const char *p = "basic_vsu2";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k"), after_k = cf_k(p, "k\x01"), pre = cf_k(p, "q/"),
           pend = cf_after_prefix(&pre);
    uint8_t val[14] = { 0 };
    kvq_bytes v;
    int present;
    const kvq_kv *kvs;
    size_t n;
    bool more;

    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_set_versionstamped_value(t, k.b, k.n, val, 14));
    assert_ok(kvq_txn_set(t, k.b, k.n, K("plain")));
    assert_err(kvq_txn_get(&v, &present, t, k.b, k.n, 0), KVQ_EACCESSED_UNREADABLE);
    assert_err(kvq_txn_get_range(&kvs, &n, &more, t, k.b, k.n, after_k.b, after_k.n, 0, 0),
               KVQ_EACCESSED_UNREADABLE);
    /* A clear makes it readable; a set after the clear reads back. */
    assert_ok(kvq_txn_clear(t, k.b, k.n));
    assert_ok(kvq_txn_get(&v, &present, t, k.b, k.n, 0));
    assert_int_equal(present, 0);
    assert_ok(kvq_txn_set(t, k.b, k.n, K("again")));
    assert_ok(kvq_txn_get(&v, &present, t, k.b, k.n, 0));
    assert_int_equal(present, 1);
    assert_int_equal(v.len, 5);
    kvq_txn_destroy(t);

    t = new_txn(db);
    uint8_t key[300];
    size_t kn = vs_key(key, &pre, "z");
    assert_ok(kvq_txn_set_versionstamped_key(t, key, kn, K("item")));
    assert_err(kvq_txn_get_range(&kvs, &n, &more, t, pre.b, pre.n, pend.b, pend.n, 0, 0),
               KVQ_EACCESSED_UNREADABLE);
    /* Clearing the first half of the stamps' span leaves the second half unreadable. */
    uint8_t mid[300];
    memcpy(mid, pre.b, pre.n);
    memset(mid + pre.n, 0x80, 1);
    assert_ok(kvq_txn_clear_range(t, pre.b, pre.n, mid, pre.n + 1));
    assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, pre.b, pre.n, mid, pre.n + 1, 0, 0));
    assert_int_equal(n, 0);
    assert_err(kvq_txn_get_range(&kvs, &n, &more, t, mid, pre.n + 1, pend.b, pend.n, 0, 0),
               KVQ_EACCESSED_UNREADABLE);
    /* Clearing the whole prefix makes all of it readable, and empty. */
    assert_ok(kvq_txn_clear_range(t, pre.b, pre.n, pend.b, pend.n));
    assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, pre.b, pre.n, pend.b, pend.n, 0, 0));
    assert_int_equal(n, 0);
    assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, pre.b, pre.n, pend.b, pend.n, 0, KVQ_REVERSE));
    assert_int_equal(n, 0);
    /* The stamped key, written before the clear, is cleared by it at commit too. */
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, pre.b, pre.n, pend.b, pend.n, 0, 0));
    assert_int_equal(n, 0);
    kvq_txn_destroy(t);

    /* An atomic operation is not a clear, COMPARE_AND_CLEAR included: it applies to a value the
     * transaction cannot know, so the key stays unreadable (FoundationDB's write map keeps
     * whatever a mutation touches unreadable; only clears make it readable). */
    t = new_txn(db);
    assert_ok(kvq_txn_set_versionstamped_value(t, k.b, k.n, val, 14));
    assert_ok(kvq_txn_atomic_op(t, k.b, k.n, K("x"), KVQ_MUT_COMPARE_AND_CLEAR));
    assert_err(kvq_txn_get(&v, &present, t, k.b, k.n, 0), KVQ_EACCESSED_UNREADABLE);
    assert_ok(kvq_txn_atomic_op(t, k.b, k.n, K("y"), KVQ_MUT_APPEND_IF_FITS));
    assert_err(kvq_txn_get(&v, &present, t, k.b, k.n, 0), KVQ_EACCESSED_UNREADABLE);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_versionstamp_bad_offsets(void **state)
{
    (void)state;
    const char *p = "basic_vsbad";
    kvq_db *db = cf_open(NULL);
    kvq_txn *t = new_txn(db);
    cf_key pre = cf_k(p, "");
    uint8_t key[300];
    /* offset + 10 beyond the key (without its 4-byte suffix). */
    size_t kn = vs_key(key, &pre, "");
    cf_put_le(key + kn - 4, (uint64_t)pre.n + 1, 4);
    assert_err(kvq_txn_set_versionstamped_key(t, key, kn, K("v")), KVQ_ECLIENT_INVALID_OPERATION);
    cf_put_le(key + kn - 4, 0xffffffffu, 4);
    assert_err(kvq_txn_set_versionstamped_key(t, key, kn, K("v")), KVQ_ECLIENT_INVALID_OPERATION);
    cf_put_le(key + kn - 4, 0x7ffffff0u, 4);
    assert_err(kvq_txn_set_versionstamped_key(t, key, kn, K("v")), KVQ_ECLIENT_INVALID_OPERATION);
    /* Exactly fitting is fine. */
    cf_put_le(key + kn - 4, (uint64_t)pre.n, 4);
    assert_ok(kvq_txn_set_versionstamped_key(t, key, kn, K("v")));
    /* Keys too short to hold the offset. */
    static const uint8_t shortk[3] = { 'a', 0, 0 };
    for (size_t len = 0; len < 4; len++) {
        int rc = kvq_txn_set_versionstamped_key(t, shortk, len, K("v"));
        if (rc != KVQ_ECLIENT_INVALID_OPERATION && rc != KVQ_EINVAL)
            fail_msg("versionstamped key of %zu bytes: expected 2000 or EINVAL, got %d %s", len, rc,
                     kvq_errname(rc));
    }
    /* A 10-byte key + suffix that is all stamp. */
    uint8_t only[14] = { 0 };
    assert_err(kvq_txn_set_versionstamped_key(t, only, 13, K("v")), KVQ_ECLIENT_INVALID_OPERATION);
    /* Values: offset out of range, too short. */
    cf_key k = cf_k(p, "val");
    uint8_t val[16] = { 0 };
    cf_put_le(val + 10, 1, 4);
    assert_err(kvq_txn_set_versionstamped_value(t, k.b, k.n, val, 14),
               KVQ_ECLIENT_INVALID_OPERATION);
    for (size_t len = 0; len < 4; len++) {
        int rc = kvq_txn_set_versionstamped_value(t, k.b, k.n, val, len);
        if (rc != KVQ_ECLIENT_INVALID_OPERATION && rc != KVQ_EINVAL)
            fail_msg("versionstamped value of %zu bytes: expected 2000 or EINVAL, got %d %s", len,
                     rc, kvq_errname(rc));
    }
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_user_versions(void **state)
{
    (void)state;
    kvq_db *db = cf_open(NULL);
    kvq_txn *t = new_txn(db);
    uint16_t uv = 99;
    for (uint16_t i = 0; i < 5; i++) {
        assert_ok(kvq_txn_next_user_version(&uv, t));
        assert_int_equal(uv, i);
    }
    kvq_txn_reset(t);
    assert_ok(kvq_txn_next_user_version(&uv, t));
    assert_int_equal(uv, 0);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* ---- large ranges ------------------------------------------------------------------------- */

/* Compares a full or limited range read of cf/<p>/ with the model. */
static void expect_model_range(
    kvq_txn *t, const cf_model *m, const char *p, int limit, unsigned flags, const char *what)
{
    cf_key b = cf_k(p, ""), e = cf_after_prefix(&b);
    const kvq_kv *kvs;
    size_t n;
    bool more = true;
    assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, b.b, b.n, e.b, e.n, limit, flags));
    size_t *idx = malloc((m->n + 1) * sizeof(*idx));
    assert_non_null(idx);
    int want_more;
    size_t want =
        cf_model_range(m, b.b, b.n, e.b, e.n, limit, (flags & KVQ_REVERSE) != 0, idx, &want_more);
    if (n != want)
        fail_msg("%s: expected %zu rows, got %zu", what, want, n);
    for (size_t i = 0; i < n; i++) {
        const cf_mentry *me = &m->e[idx[i]];
        if (cf_bytes_cmp(kvs[i].key.data, kvs[i].key.len, me->k, me->kn) != 0 ||
            cf_bytes_cmp(kvs[i].value.data, kvs[i].value.len, me->v, me->vn) != 0)
            fail_msg("%s: row %zu differs", what, i);
    }
    if (want_more && more != 1)
        fail_msg("%s: more=%d with rows left", what, more);
    if (!want_more && more != 0 && (limit == 0 || n < (size_t)limit))
        fail_msg("%s: more=%d with no rows left", what, more);
    free(idx);
}

/* 20,000 point clears in one transaction, in key order as a batch pop makes them, after its
 * first read: its reads see them all, and it commits inside the 5 s window (each clear costs a
 * binary search, not a sort of every range cleared so far, which took longer than the window). */
static void test_many_point_clears(void **state)
{
    (void)state;
    const char *p = "basic_clears";
    kvq_db *db = cf_open_clean(p);
    enum { N = 20000, STORED_EVERY = 20 };
    kvq_txn *t = new_txn(db);
    for (unsigned i = 0; i < N; i += STORED_EVERY) {
        char ks[32];
        snprintf(ks, sizeof(ks), "c%05u", i);
        cf_key k = cf_k(p, ks);
        assert_ok(kvq_txn_set(t, k.b, k.n, K("v")));
    }
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    cf_key b = cf_k(p, "c"), e = cf_k(p, "d");
    const kvq_kv *kvs;
    size_t n;
    bool more;
    assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, b.b, b.n, e.b, e.n, 0, 0));
    assert_int_equal(n, N / STORED_EVERY);
    for (unsigned i = 0; i < N; i++) {
        char ks[32];
        snprintf(ks, sizeof(ks), "c%05u", i);
        cf_key k = cf_k(p, ks);
        assert_ok(kvq_txn_clear(t, k.b, k.n));
        if (i % 4000 == 3999) {
            /* Everything up to here reads as cleared, the rest as stored. */
            assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, b.b, b.n, e.b, e.n, 0, 0));
            assert_int_equal(n, (N - (i + 1)) / STORED_EVERY);
            kvq_bytes v;
            int present;
            assert_ok(kvq_txn_get(&v, &present, t, k.b, k.n, 0));
            assert_int_equal(present, 0);
        }
    }
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, b.b, b.n, e.b, e.n, 0, 0));
    assert_int_equal(n, 0);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_large_ranges(void **state)
{
    (void)state;
    const char *p = "basic_large";
    kvq_db *db = cf_open_clean(p);
    cf_model m = { NULL, 0, 0 };
    enum { N = 3000 };
    kvq_txn *t = new_txn(db);
    for (unsigned i = 0; i < N; i++) {
        char ks[32], vs[32];
        snprintf(ks, sizeof(ks), "r%05u", i * 2);
        snprintf(vs, sizeof(vs), "value of %u", i);
        cf_key k = cf_k(p, ks);
        assert_ok(kvq_txn_set(t, k.b, k.n, K(vs)));
        assert_int_equal(cf_model_set(&m, k.b, k.n, (const uint8_t *)vs, strlen(vs)), 0);
    }
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    static const int limits[] = { 0, 1, 999, 2500, 3000, 3001 };
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        expect_model_range(t, &m, p, limits[i], 0, "large range");
        expect_model_range(t, &m, p, limits[i], KVQ_REVERSE, "large range, reverse");
        expect_model_range(t, &m, p, limits[i], KVQ_SNAPSHOT | KVQ_REVERSE,
                           "large range, snapshot reverse");
    }
    /* Overlay many writes: clear every 7th key, a clear_range, 400 new keys in between. */
    for (unsigned i = 0; i < N; i += 7) {
        char ks[32];
        snprintf(ks, sizeof(ks), "r%05u", i * 2);
        cf_key k = cf_k(p, ks);
        assert_ok(kvq_txn_clear(t, k.b, k.n));
        cf_model_clear(&m, k.b, k.n);
    }
    cf_key cb = cf_k(p, "r01000"), ce = cf_k(p, "r01500");
    assert_ok(kvq_txn_clear_range(t, cb.b, cb.n, ce.b, ce.n));
    cf_model_clear_range(&m, cb.b, cb.n, ce.b, ce.n);
    for (unsigned i = 0; i < 400; i++) {
        char ks[32];
        snprintf(ks, sizeof(ks), "r%05u", i * 15 + 1);
        cf_key k = cf_k(p, ks);
        assert_ok(kvq_txn_set(t, k.b, k.n, K("new")));
        assert_int_equal(cf_model_set(&m, k.b, k.n, (const uint8_t *)"new", 3), 0);
    }
    for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
        expect_model_range(t, &m, p, limits[i], 0, "large range over writes");
        expect_model_range(t, &m, p, limits[i], KVQ_REVERSE, "large range over writes, reverse");
    }
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    expect_model_range(t, &m, p, 0, 0, "large range after commit");
    expect_model_range(t, &m, p, 1234, KVQ_REVERSE, "large range after commit, reverse");
    kvq_txn_destroy(t);
    cf_model_free(&m);
    kvq_db_close(db);
}

/* ---- handle options and counters ------------------------------------------------------------ */

static void test_read_only_handle(void **state)
{
    (void)state;
    const char *p = "basic_ro";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k");
    cf_write_key(db, k.b, k.n, "v", 1);
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.flags = KVQ_DB_READ_ONLY;
    kvq_db *ro = cf_open(&o);
    kvq_txn *t = new_txn(ro);
    cf_expect_value(t, k.b, k.n, 0, "v", 1, "read through a read-only handle");
    assert_ok(kvq_txn_commit(t)); /* reads only */
    kvq_txn_reset(t);
    assert_ok(kvq_txn_set(t, k.b, k.n, K("w")));
    assert_err(kvq_txn_commit(t), KVQ_EPERM);
    kvq_txn_destroy(t);
    kvq_db_close(ro);
    char got[4];
    assert_int_equal(cf_read_key(db, k.b, k.n, got, sizeof(got)), 1);
    assert_int_equal(got[0], 'v');
    kvq_db_close(db);
}

static void test_no_create(void **state)
{
    (void)state;
    cf_embedded_only("KVQ_DB_NO_CREATE has no meaning on a cluster");
    char url[PATH_MAX];
    cf_fresh_url(url, sizeof(url), "no_create");
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.flags = KVQ_DB_NO_CREATE;
    kvq_db *db = (kvq_db *)&o;
    assert_err(kvq_db_open(&db, url, &o), KVQ_ENOTFOUND);
    assert_null(db);
    struct stat st;
    assert_int_not_equal(stat(url, &st), 0); /* nothing was created */
    db = cf_open_url(url, NULL);
    kvq_db_close(db);
    db = cf_open_url(url, &o);
    kvq_db_close(db);
}

static void test_stats(void **state)
{
    (void)state;
    const char *p = "basic_stats";
    kvq_db *db = cf_open_clean(p);
    kvq_db_stats a, b;
    assert_ok(kvq_db_get_stats(&a, db));
    cf_key k = cf_k(p, "k");
    for (int i = 0; i < 3; i++)
        cf_write_key(db, k.b, k.n, "v", 1);
    (void)cf_read_key(db, k.b, k.n, NULL, 0); /* read-only: no commit counted */
    assert_ok(kvq_db_get_stats(&b, db));
    assert_int_equal(b.commits - a.commits, 3);
    assert_true(b.batches - a.batches >= 1 && b.batches - a.batches <= 3);
    assert_int_equal(b.conflicts, a.conflicts);
    assert_int_equal(b.injected_faults, a.injected_faults);
    kvq_db_close(db);
}

static void test_user_version_limit(void **state)
{
    (void)state;
    kvq_db *db = cf_open(NULL);
    kvq_txn *t = new_txn(db);
    uint16_t uv = 0;
    for (unsigned i = 0; i < 65536; i++) {
        int rc = kvq_txn_next_user_version(&uv, t);
        if (rc != 0 || uv != i)
            fail_msg("user version %u: rc %d, got %u", i, rc, uv);
    }
    assert_err(kvq_txn_next_user_version(&uv, t), KVQ_ECLIENT_INVALID_OPERATION);
    kvq_txn_reset(t);
    assert_ok(kvq_txn_next_user_version(&uv, t));
    assert_int_equal(uv, 0);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* ---- versionstamps from concurrent threads --------------------------------------------------- */

struct stamper {
    kvq_db *db;
    int id, n, failures;
    uint8_t stamps[100][10];
    char err[160];
};

static void *stamper_main(void *arg)
{
    struct stamper *s = arg;
    cf_key pre = cf_k("basic_vs_threads", "q/");
    kvq_txn *t = NULL;
    if (kvq_txn_create(&t, s->db) != 0) {
        s->failures++;
        return NULL;
    }
    for (int i = 0; i < s->n; i++) {
        uint8_t key[300];
        size_t kn = vs_key(key, &pre, "");
        char val[32];
        snprintf(val, sizeof(val), "%d/%d", s->id, i);
        int64_t cv = 0, rv = 0;
        int rc = kvq_txn_set_versionstamped_key(t, key, kn, K(val));
        if (rc == 0)
            rc = kvq_txn_commit(t);
        if (rc == 0)
            rc = kvq_txn_get_versionstamp(s->stamps[i], t);
        if (rc == 0)
            rc = kvq_txn_get_committed_version(&cv, t);
        kvq_txn_reset(t);
        if (rc == 0)
            rc = kvq_txn_get_read_version(&rv, t);
        kvq_txn_reset(t);
        if (rc != 0) {
            snprintf(s->err, sizeof(s->err), "thread %d commit %d: %s", s->id, i, kvq_errname(rc));
            s->failures++;
            break;
        }
        if ((uint64_t)cv != cf_be64(s->stamps[i]) && s->failures++ == 0)
            snprintf(s->err, sizeof(s->err), "committed version differs from the stamp");
        if (rv < cv && s->failures++ == 0)
            snprintf(s->err, sizeof(s->err), "a later read version %lld < commit version %lld",
                     (long long)rv, (long long)cv);
        if (i > 0 && memcmp(s->stamps[i - 1], s->stamps[i], 10) >= 0 && s->failures++ == 0)
            snprintf(s->err, sizeof(s->err), "stamps of one thread not increasing");
    }
    kvq_txn_destroy(t);
    return NULL;
}

static int cmp_stamp(const void *a, const void *b)
{
    return memcmp(a, b, 10);
}

static void test_versionstamps_concurrent(void **state)
{
    (void)state;
    const char *p = "basic_vs_threads";
    kvq_db *db = cf_open_clean(p);
    enum { THREADS = 4, N = 100 };
    struct stamper *s = calloc(THREADS, sizeof(*s));
    assert_non_null(s);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        s[i].db = db;
        s[i].id = i;
        s[i].n = N;
        assert_int_equal(pthread_create(&th[i], NULL, stamper_main, &s[i]), 0);
    }
    uint8_t(*all)[10] = malloc(sizeof(uint8_t[10]) * THREADS * N);
    assert_non_null(all);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        if (s[i].failures != 0)
            fail_msg("%s", s[i].err);
        memcpy(all[i * N], s[i].stamps, sizeof(s[i].stamps));
    }
    qsort(all, THREADS * N, 10, cmp_stamp);
    for (int i = 1; i < THREADS * N; i++)
        if (memcmp(all[i - 1], all[i], 10) == 0)
            fail_msg("two commits got the same versionstamp");
    /* The stored keys carry exactly these stamps, in stamp order. */
    cf_key pre = cf_k(p, "q/"), end = cf_after_prefix(&pre);
    kvq_txn *t = new_txn(db);
    const kvq_kv *kvs;
    size_t n;
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, pre.b, pre.n, end.b, end.n, 0, 0));
    assert_int_equal(n, THREADS * N);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(kvs[i].key.len, pre.n + 10);
        if (memcmp(kvs[i].key.data + pre.n, all[i], 10) != 0)
            fail_msg("stored key %zu does not carry the %zu-th stamp", i, i);
    }
    kvq_txn_destroy(t);
    free(all);
    free(s);
    kvq_db_close(db);
}

/* Versionstamped mutations take their place in the transaction's order of mutations. */
static void test_versionstamp_mutation_order(void **state)
{
    (void)state;
    const char *p = "basic_vs_order";
    kvq_db *db = cf_open_clean(p);
    cf_key pre = cf_k(p, "q/"), end = cf_after_prefix(&pre);
    uint8_t key[300];
    size_t kn = vs_key(key, &pre, "");
    const kvq_kv *kvs;
    size_t n;

    /* The same stamped key twice: one key, the second value. */
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_set_versionstamped_key(t, key, kn, K("first")));
    assert_ok(kvq_txn_set_versionstamped_key(t, key, kn, K("second")));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, pre.b, pre.n, end.b, end.n, 0, 0));
    assert_int_equal(n, 1);
    assert_int_equal(kvs[0].value.len, 6);
    assert_memory_equal(kvs[0].value.data, "second", 6);
    kvq_txn_reset(t);

    /* A clear_range after a stamped key in the same transaction removes it. */
    cf_clear_prefix(db, p);
    assert_ok(kvq_txn_set_versionstamped_key(t, key, kn, K("gone")));
    assert_ok(kvq_txn_clear_range(t, pre.b, pre.n, end.b, end.n));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, pre.b, pre.n, end.b, end.n, 0, 0));
    assert_int_equal(n, 0);
    kvq_txn_reset(t);

    /* A stamped value, then a plain set of the key: the set wins at commit, but the key stays
     * unreadable in the transaction (as on FoundationDB). */
    cf_key k = cf_k(p, "k");
    uint8_t sv[14] = { 0 };
    assert_ok(kvq_txn_set_versionstamped_value(t, k.b, k.n, sv, 14));
    assert_ok(kvq_txn_set(t, k.b, k.n, K("plain")));
    kvq_bytes v;
    int present;
    assert_err(kvq_txn_get(&v, &present, t, k.b, k.n, 0), KVQ_EACCESSED_UNREADABLE);
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
    cf_expect_value(t, k.b, k.n, 0, "plain", 5, "a set after a stamped value, committed");
    kvq_txn_reset(t);

    /* A plain set, then a stamped value: the stamp wins. */
    assert_ok(kvq_txn_set(t, k.b, k.n, K("plain")));
    assert_ok(kvq_txn_set_versionstamped_value(t, k.b, k.n, sv, 14));
    assert_ok(kvq_txn_commit(t));
    uint8_t st[10];
    assert_ok(kvq_txn_get_versionstamp(st, t));
    kvq_txn_reset(t);
    cf_expect_value(t, k.b, k.n, 0, st, 10, "a stamped value after a set");
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* The read version is taken at the first read, not when the transaction is created. */
static void test_read_version_at_first_read(void **state)
{
    (void)state;
    const char *p = "basic_rv_first";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k"), mine = cf_k(p, "mine");
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_set(t, mine.b, mine.n, K("x"))); /* a write takes no read version */
    cf_write_key(db, k.b, k.n, "later", 5);
    cf_expect_value(t, k.b, k.n, 0, "later", 5, "a commit before the first read is visible");
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* Two handles on one database in one process behave like two clients. */
static void test_two_handles(void **state)
{
    (void)state;
    const char *p = "basic_handles";
    kvq_db *a = cf_open(NULL), *b = cf_open(NULL);
    cf_clear_prefix(a, p);
    cf_key k = cf_k(p, "k"), out = cf_k(p, "out");
    kvq_txn *ta = new_txn(a);
    kvq_bytes v;
    int present;
    assert_ok(kvq_txn_get(&v, &present, ta, k.b, k.n, 0));
    kvq_watch *w = NULL;
    kvq_txn *tw = new_txn(a);
    assert_ok(kvq_txn_get(&v, &present, tw, k.b, k.n, 0));
    assert_ok(kvq_txn_watch(&w, tw, k.b, k.n));
    assert_ok(kvq_txn_commit(tw));
    cf_write_key(b, k.b, k.n, "from b", 6);
    assert_ok(kvq_txn_set(ta, out.b, out.n, K("a")));
    assert_err(kvq_txn_commit(ta), KVQ_ENOT_COMMITTED);
    assert_ok(kvq_watch_wait(w, 10000));
    kvq_txn_reset(ta);
    cf_expect_value(ta, k.b, k.n, 0, "from b", 6, "the other handle's commit");
    kvq_watch_destroy(w);
    kvq_txn_destroy(tw);
    kvq_txn_destroy(ta);
    kvq_db_close(b);
    kvq_db_close(a);
}

int main(int argc, char **argv)
{
    cf_init(argc, argv, NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_set_clear),
        cmocka_unit_test(test_binary_keys_and_values),
        cmocka_unit_test(test_clear_range),
        cmocka_unit_test(test_get_range_limits),
        cmocka_unit_test(test_get_range_paging),
        cmocka_unit_test(test_ryw_ranges),
        cmocka_unit_test(test_atomic_ops),
        cmocka_unit_test(test_atomic_sequences),
        cmocka_unit_test(test_append_if_fits_compare_and_clear),
        cmocka_unit_test(test_append_if_fits_limit),
        cmocka_unit_test(test_append_clear_ryw),
        cmocka_unit_test(test_visibility_and_snapshot),
        cmocka_unit_test(test_uncommitted_writes_invisible),
        cmocka_unit_test(test_versionstamped_keys),
        cmocka_unit_test(test_versionstamped_value),
        cmocka_unit_test(test_versionstamp_unreadable),
        cmocka_unit_test(test_versionstamp_unreadable_set_and_clear),
        cmocka_unit_test(test_versionstamp_bad_offsets),
        cmocka_unit_test(test_user_versions),
        cmocka_unit_test(test_large_ranges),
        cmocka_unit_test(test_many_point_clears),
        cmocka_unit_test(test_read_only_handle),
        cmocka_unit_test(test_no_create),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_user_version_limit),
        cmocka_unit_test(test_versionstamps_concurrent),
        cmocka_unit_test(test_versionstamp_mutation_order),
        cmocka_unit_test(test_read_version_at_first_read),
        cmocka_unit_test(test_two_handles),
    };
    return CF_RUN("txn_basic", tests);
}
