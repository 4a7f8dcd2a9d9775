/* Conformance: exactly which patterns conflict, the retry loop, and injected commit faults.
 *
 * Each conflict case interleaves two transactions on one database handle by hand: T1 reads,
 * T2 writes and commits, then T1 writes a key nobody reads and commits; the case says whether
 * T1's commit must fail with not_committed (1020). Read-conflict ranges follow FoundationDB: a
 * get covers its key; a range read the range it covered (with a limit that stopped it, forward
 * up to and including the last key returned, reverse from the last key returned to the end); a
 * snapshot read nothing. Every write adds a write-conflict range; a versionstamped key's is its
 * stamped key, known only at commit. */
#include "conformance.h"

#include <pthread.h>

static kvq_txn *new_txn(kvq_db *db)
{
    kvq_txn *t = NULL;
    assert_ok(kvq_txn_create(&t, db));
    return t;
}

/* ---- the conflict table -------------------------------------------------------------------- */

enum read_kind {
    R_GET,           /* get a */
    R_GET_SNAP,      /* snapshot get a */
    R_RANGE,         /* get_range [a, b) limit, flags */
    R_CONFLICT_READ, /* add_conflict_range READ [a, b) */
    R_NONE,          /* no read at all (T1 still takes a read version) */
    R_SNAP_THEN_GET, /* snapshot get a, then get a */
    R_OWN_SET_GET,   /* set a, then get a (answered by the own write) */
    R_OWN_ADD_GET,   /* atomic add on a, then get a (needs the stored value) */
    R_OWN_CLEARED,   /* clear_range [a, b), then get_range over everything */
    R_OWN_SET_RANGE, /* set a, then get_range over everything */
};

enum write_kind {
    W_SET,            /* set a */
    W_SET_SAME,       /* set a to the value it already has */
    W_CLEAR,          /* clear a */
    W_CLEAR_RANGE,    /* clear_range [a, b) */
    W_ADD,            /* atomic add on a */
    W_BYTE_MAX,       /* atomic byte_max on a */
    W_VS_KEY,         /* versionstamped key under a */
    W_CONFLICT_WRITE, /* add_conflict_range WRITE [a, b) without writing */
    W_ABORTED,        /* set a, but destroy T2 instead of committing */
    W_BEFORE,         /* set a and commit BEFORE T1 takes its read version */
};

struct conflict_case {
    const char *name;
    enum read_kind r;
    const char *ra, *rb;
    int limit;
    unsigned flags;
    enum write_kind w;
    const char *wa, *wb;
    int expect; /* 0 or KVQ_ENOT_COMMITTED */
};

/* A key of the table: in these strings '#' stands for the byte 0x00. */
static cf_key ck(const char *p, const char *s)
{
    cf_key k = cf_k(p, s);
    size_t pn = strlen(p) + 4;
    for (size_t i = pn; i < k.n; i++)
        if (k.b[i] == '#')
            k.b[i] = 0x00;
    return k;
}

/* Stored before every case: a c e g i (values = key names). */
static const char *const stored[] = { "a", "c", "e", "g", "i" };

#define NC KVQ_ENOT_COMMITTED
static const struct conflict_case cases[] = {
    { "get + set of that key", R_GET, "c", NULL, 0, 0, W_SET, "c", NULL, NC },
    { "get + set of the same value", R_GET, "c", NULL, 0, 0, W_SET_SAME, "c", NULL, NC },
    { "get of an absent key + set of it", R_GET, "d", NULL, 0, 0, W_SET, "d", NULL, NC },
    { "get + clear", R_GET, "c", NULL, 0, 0, W_CLEAR, "c", NULL, NC },
    { "get + clear_range over it", R_GET, "c", NULL, 0, 0, W_CLEAR_RANGE, "b", "d", NC },
    { "get + clear_range beside it", R_GET, "c", NULL, 0, 0, W_CLEAR_RANGE, "c#", "e", 0 },
    { "get + atomic add", R_GET, "c", NULL, 0, 0, W_ADD, "c", NULL, NC },
    { "get + atomic byte_max", R_GET, "c", NULL, 0, 0, W_BYTE_MAX, "c", NULL, NC },
    { "get + write conflict range over it", R_GET, "c", NULL, 0, 0, W_CONFLICT_WRITE, "b", "d",
      NC },
    { "get + write conflict range beside", R_GET, "c", NULL, 0, 0, W_CONFLICT_WRITE, "d", "f", 0 },
    { "get + disjoint set", R_GET, "c", NULL, 0, 0, W_SET, "d", NULL, 0 },
    { "get + set of key+0x00", R_GET, "c", NULL, 0, 0, W_SET, "c#", NULL, 0 },
    { "get + aborted writer", R_GET, "c", NULL, 0, 0, W_ABORTED, "c", NULL, 0 },
    { "get + writer that committed before", R_GET, "c", NULL, 0, 0, W_BEFORE, "c", NULL, 0 },
    { "snapshot get + set", R_GET_SNAP, "c", NULL, 0, 0, W_SET, "c", NULL, 0 },
    { "no read + set", R_NONE, NULL, NULL, 0, 0, W_SET, "c", NULL, 0 },
    { "range + set of a new key in it", R_RANGE, "a", "z", 0, 0, W_SET, "f", NULL, NC },
    { "range + clear in it", R_RANGE, "a", "z", 0, 0, W_CLEAR, "e", NULL, NC },
    { "range + clear_range of nothing in it", R_RANGE, "a", "z", 0, 0, W_CLEAR_RANGE, "j", "k",
      NC },
    { "reverse range + set in it", R_RANGE, "a", "z", 0, KVQ_REVERSE, W_SET, "b", NULL, NC },
    { "snapshot range + set in it", R_RANGE, "a", "z", 0, KVQ_SNAPSHOT, W_SET, "f", NULL, 0 },
    { "range + set at its begin", R_RANGE, "b", "d", 0, 0, W_SET, "b", NULL, NC },
    { "range + set at its end (exclusive)", R_RANGE, "b", "d", 0, 0, W_SET, "d", NULL, 0 },
    { "range + set before it", R_RANGE, "b", "d", 0, 0, W_SET, "a", NULL, 0 },
    { "empty range + set in it", R_RANGE, "c#", "d", 0, 0, W_SET, "c#a", NULL, NC },
    /* Forward with limit 2 returns a, c: it covered [a, c + 0x00). */
    { "limited range + set before the last key", R_RANGE, "a", "z", 2, 0, W_SET, "b", NULL, NC },
    { "limited range + set of the last key", R_RANGE, "a", "z", 2, 0, W_SET, "c", NULL, NC },
    { "limited range + set of last key + 0x00", R_RANGE, "a", "z", 2, 0, W_SET, "c#", NULL, 0 },
    { "limited range + set after the last key", R_RANGE, "a", "z", 2, 0, W_SET, "d", NULL, 0 },
    { "limited range + set near the end", R_RANGE, "a", "z", 2, 0, W_SET, "y", NULL, 0 },
    { "limited range + clear of a later key", R_RANGE, "a", "z", 2, 0, W_CLEAR, "e", NULL, 0 },
    /* Reverse with limit 2 returns i, g: it covered [g, z). */
    { "limited reverse + set before the last key", R_RANGE, "a", "z", 2, KVQ_REVERSE, W_SET, "f",
      NULL, 0 },
    { "limited reverse + set of the last key", R_RANGE, "a", "z", 2, KVQ_REVERSE, W_SET, "g", NULL,
      NC },
    { "limited reverse + set between", R_RANGE, "a", "z", 2, KVQ_REVERSE, W_SET, "h", NULL, NC },
    { "limited reverse + set near the end", R_RANGE, "a", "z", 2, KVQ_REVERSE, W_SET, "y", NULL,
      NC },
    { "limited reverse + set at the end", R_RANGE, "a", "z", 2, KVQ_REVERSE, W_SET, "z", NULL, 0 },
    { "limited reverse + clear of an earlier key", R_RANGE, "a", "z", 2, KVQ_REVERSE, W_CLEAR, "c",
      NULL, 0 },
    /* A range the limit did not stop covers all of it. */
    { "range within its limit + set near the end", R_RANGE, "a", "z", 10, 0, W_SET, "y", NULL, NC },
    /* A versionstamped key gets a single-key write-conflict range on its stamped key, added
     * at commit (FoundationDB's commit proxy does the same): a reader of its range conflicts. */
    { "range + versionstamped key in it", R_RANGE, "a", "z", 0, 0, W_VS_KEY, "q/", NULL, NC },
    { "reverse range + versionstamped key in it", R_RANGE, "q/", "q0", 0, KVQ_REVERSE, W_VS_KEY,
      "q/", NULL, NC },
    { "range + versionstamped key beside it", R_RANGE, "a", "p", 0, 0, W_VS_KEY, "q/", NULL, 0 },
    { "get of the prefix + versionstamped key after it", R_GET, "q/", NULL, 0, 0, W_VS_KEY, "q/",
      NULL, 0 },
    /* Explicit read conflict ranges. */
    { "read conflict range + set in it", R_CONFLICT_READ, "m", "p", 0, 0, W_SET, "n", NULL, NC },
    { "read conflict range + set at its end", R_CONFLICT_READ, "m", "p", 0, 0, W_SET, "p", NULL,
      0 },
    { "read conflict range + write conflict range", R_CONFLICT_READ, "m", "p", 0, 0,
      W_CONFLICT_WRITE, "o", "q", NC },
    /* A snapshot read does not excuse a later plain read of the same key. */
    { "snapshot get then get + set", R_SNAP_THEN_GET, "c", NULL, 0, 0, W_SET, "c", NULL, NC },
    /* Reads answered by the transaction's own writes add no read conflict (FoundationDB's
     * read-your-writes cache); a read through a pending atomic op does. */
    { "get of own set + set", R_OWN_SET_GET, "c", NULL, 0, 0, W_SET, "c", NULL, 0 },
    { "get after own atomic add + set", R_OWN_ADD_GET, "c", NULL, 0, 0, W_SET, "c", NULL, NC },
    { "range over own clear_range + set inside it", R_OWN_CLEARED, "b", "f", 0, 0, W_SET, "d", NULL,
      0 },
    { "range over own clear_range + set outside it", R_OWN_CLEARED, "b", "f", 0, 0, W_SET, "g",
      NULL, NC },
    { "range over own set + set of that key", R_OWN_SET_RANGE, "d", NULL, 0, 0, W_SET, "d", NULL,
      0 },
    { "range over own set + set of another key", R_OWN_SET_RANGE, "d", NULL, 0, 0, W_SET, "f", NULL,
      NC },
};

/* Runs one case; returns 0, or 1 (after printing why) when T1's commit result is not the
 * expected one, so that a table run reports every wrong case. */
static int run_case(kvq_db *db, const char *p, const struct conflict_case *c, int t1_writes)
{
    int own_writes = c->r == R_OWN_SET_GET || c->r == R_OWN_ADD_GET || c->r == R_OWN_CLEARED ||
                     c->r == R_OWN_SET_RANGE;
    if (own_writes && !t1_writes)
        return 0; /* not a read-only transaction */
    /* Fresh data for every case. */
    cf_clear_prefix(db, p);
    kvq_txn *t = new_txn(db);
    for (size_t i = 0; i < sizeof(stored) / sizeof(stored[0]); i++) {
        cf_key k = cf_k(p, stored[i]);
        assert_ok(kvq_txn_set(t, k.b, k.n, K(stored[i])));
    }
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);

    kvq_txn *t1 = new_txn(db), *t2 = new_txn(db);
    cf_key wa = ck(p, c->wa), wb = ck(p, c->wb != NULL ? c->wb : "");
    if (c->w == W_BEFORE) {
        assert_ok(kvq_txn_set(t2, wa.b, wa.n, K("early")));
        assert_ok(kvq_txn_commit(t2));
    }
    /* T1 reads. */
    cf_key ra = ck(p, c->ra != NULL ? c->ra : ""), rb = ck(p, c->rb != NULL ? c->rb : "");
    kvq_bytes v;
    int present;
    const kvq_kv *kvs;
    size_t n;
    int64_t rv;
    switch (c->r) {
    case R_GET:
        assert_ok(kvq_txn_get(&v, &present, t1, ra.b, ra.n, 0));
        break;
    case R_GET_SNAP:
        assert_ok(kvq_txn_get(&v, &present, t1, ra.b, ra.n, KVQ_SNAPSHOT));
        break;
    case R_RANGE:
        assert_ok(
            kvq_txn_get_range(&kvs, &n, NULL, t1, ra.b, ra.n, rb.b, rb.n, c->limit, c->flags));
        if (c->limit == 2)
            assert_int_equal(n, 2);
        break;
    case R_CONFLICT_READ:
        assert_ok(kvq_txn_get_read_version(&rv, t1));
        assert_ok(kvq_txn_add_conflict_range(t1, ra.b, ra.n, rb.b, rb.n, KVQ_CONFLICT_READ));
        break;
    case R_NONE:
        assert_ok(kvq_txn_get_read_version(&rv, t1));
        break;
    case R_SNAP_THEN_GET:
        assert_ok(kvq_txn_get(&v, &present, t1, ra.b, ra.n, KVQ_SNAPSHOT));
        assert_ok(kvq_txn_get(&v, &present, t1, ra.b, ra.n, 0));
        break;
    case R_OWN_SET_GET:
        assert_ok(kvq_txn_get_read_version(&rv, t1));
        assert_ok(kvq_txn_set(t1, ra.b, ra.n, K("own")));
        assert_ok(kvq_txn_get(&v, &present, t1, ra.b, ra.n, 0));
        assert_int_equal(present, 1);
        break;
    case R_OWN_ADD_GET: {
        uint8_t inc[8];
        cf_put_le(inc, 1, 8);
        assert_ok(kvq_txn_get_read_version(&rv, t1));
        assert_ok(kvq_txn_atomic_op(t1, ra.b, ra.n, inc, 8, KVQ_MUT_ADD));
        assert_ok(kvq_txn_get(&v, &present, t1, ra.b, ra.n, 0));
        assert_int_equal(present, 1);
        break;
    }
    case R_OWN_CLEARED: {
        cf_key all_b = ck(p, ""), all_e = ck(p, "z");
        assert_ok(kvq_txn_get_read_version(&rv, t1));
        assert_ok(kvq_txn_clear_range(t1, ra.b, ra.n, rb.b, rb.n));
        assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t1, all_b.b, all_b.n, all_e.b, all_e.n, 0, 0));
        break;
    }
    case R_OWN_SET_RANGE: {
        cf_key all_b = ck(p, ""), all_e = ck(p, "z");
        assert_ok(kvq_txn_get_read_version(&rv, t1));
        assert_ok(kvq_txn_set(t1, ra.b, ra.n, K("own")));
        assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t1, all_b.b, all_b.n, all_e.b, all_e.n, 0, 0));
        assert_int_equal(n, 6);
        break;
    }
    }
    /* T2 writes and commits. */
    uint8_t one[8];
    cf_put_le(one, 1, 8);
    uint8_t vs[300];
    switch (c->w) {
    case W_SET:
        assert_ok(kvq_txn_set(t2, wa.b, wa.n, K("new")));
        break;
    case W_SET_SAME:
        assert_ok(kvq_txn_set(t2, wa.b, wa.n, K(c->wa)));
        break;
    case W_CLEAR:
        assert_ok(kvq_txn_clear(t2, wa.b, wa.n));
        break;
    case W_CLEAR_RANGE:
        assert_ok(kvq_txn_clear_range(t2, wa.b, wa.n, wb.b, wb.n));
        break;
    case W_ADD:
        assert_ok(kvq_txn_atomic_op(t2, wa.b, wa.n, one, 8, KVQ_MUT_ADD));
        break;
    case W_BYTE_MAX:
        assert_ok(kvq_txn_atomic_op(t2, wa.b, wa.n, K("zzz"), KVQ_MUT_BYTE_MAX));
        break;
    case W_VS_KEY:
        memcpy(vs, wa.b, wa.n);
        memset(vs + wa.n, 0, 10);
        cf_put_le(vs + wa.n + 10, (uint64_t)wa.n, 4);
        assert_ok(kvq_txn_set_versionstamped_key(t2, vs, wa.n + 14, K("pushed")));
        break;
    case W_CONFLICT_WRITE:
        assert_ok(kvq_txn_add_conflict_range(t2, wa.b, wa.n, wb.b, wb.n, KVQ_CONFLICT_WRITE));
        /* FoundationDB commits a transaction with only a write conflict range. */
        break;
    case W_ABORTED:
        assert_ok(kvq_txn_set(t2, wa.b, wa.n, K("never")));
        break;
    case W_BEFORE:
        break;
    }
    if (c->w == W_ABORTED) {
        kvq_txn_destroy(t2);
        t2 = NULL;
    } else if (c->w != W_BEFORE) {
        assert_ok(kvq_txn_commit(t2));
    }
    /* T1 writes a key nobody reads (or nothing) and commits. */
    if (t1_writes) {
        cf_key out = cf_k(p, "out");
        assert_ok(kvq_txn_set(t1, out.b, out.n, K("t1")));
    }
    int rc = kvq_txn_commit(t1);
    int want = t1_writes ? c->expect : 0;
    int wrong = rc != want;
    if (wrong)
        print_message("WRONG: case '%s'%s: T1's commit: expected %d %s, got %d %s\n", c->name,
                      t1_writes ? "" : " (T1 read-only)", want, kvq_errname(want), rc,
                      kvq_errname(rc));
    if (rc != 0 && rc != KVQ_ENOT_COMMITTED)
        fail_msg("case '%s': commit -> %d %s (%s)", c->name, rc, kvq_errname(rc), kvq_last_error());
    /* A failed commit wrote nothing; a successful one all. */
    if (t1_writes) {
        cf_key out = cf_k(p, "out");
        long got = cf_read_key(db, out.b, out.n, NULL, 0);
        if ((rc == 0) != (got == 2))
            fail_msg("case '%s': T1's write is %s after commit result %d", c->name,
                     got >= 0 ? "present" : "absent", rc);
    }
    kvq_txn_destroy(t2);
    kvq_txn_destroy(t1);
    return wrong;
}

static void run_table(const char *p, int t1_writes)
{
    kvq_db *db = cf_open(NULL);
    int wrong = 0;
    size_t n = sizeof(cases) / sizeof(cases[0]);
    for (size_t i = 0; i < n; i++)
        wrong += run_case(db, p, &cases[i], t1_writes);
    kvq_db_close(db);
    if (wrong != 0)
        fail_msg("%d of %zu conflict cases gave the wrong result (listed above)", wrong, n);
}

static void test_conflict_table(void **state)
{
    (void)state;
    run_table("confl_table", 1);
}

/* Read-only transactions always commit, even when what they read changed. */
static void test_read_only_never_conflicts(void **state)
{
    (void)state;
    run_table("confl_ro", 0);
}

/* With the test-only knob that skips the conflict check, the first case commits: this is what
 * the serializability test relies on to show that its checker can fail. */
static void test_skip_conflict_check_knob(void **state)
{
    (void)state;
    kvq_testing_options o = KVQ_TESTING_OPTIONS_INIT;
    o.flags = KVQ_TEST_SKIP_CONFLICT_CHECK;
    kvq_db *db = cf_open_testing(&o);
    struct conflict_case c = cases[0];
    c.expect = 0;
    assert_int_equal(run_case(db, "confl_knob", &c, 1), 0);
    kvq_db_close(db);
}

/* ---- atomic adds and versionstamped pushes never conflict ---------------------------------- */

static void test_concurrent_atomic_adds(void **state)
{
    (void)state;
    const char *p = "confl_add";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "n");
    uint8_t one[8], got[8];
    cf_put_le(one, 1, 8);
    /* Interleaved by hand: both add, both commit. */
    kvq_txn *t1 = new_txn(db), *t2 = new_txn(db);
    int64_t rv;
    assert_ok(kvq_txn_get_read_version(&rv, t1));
    assert_ok(kvq_txn_get_read_version(&rv, t2));
    assert_ok(kvq_txn_atomic_op(t1, k.b, k.n, one, 8, KVQ_MUT_ADD));
    assert_ok(kvq_txn_atomic_op(t2, k.b, k.n, one, 8, KVQ_MUT_ADD));
    assert_ok(kvq_txn_commit(t2));
    assert_ok(kvq_txn_commit(t1));
    assert_int_equal(cf_read_key(db, k.b, k.n, got, 8), 8);
    assert_int_equal(cf_le64(got, 8), 2);
    kvq_txn_destroy(t1);
    kvq_txn_destroy(t2);
    kvq_db_close(db);
}

/* APPEND_IF_FITS and COMPARE_AND_CLEAR read nothing: a concurrent change of their key is no
 * conflict, and they apply at commit to the value committed last (with read-your-writes on or
 * off). */
static void test_concurrent_append_and_compare_and_clear(void **state)
{
    (void)state;
    const char *p = "confl_append_clear";
    kvq_db *db = cf_open_clean(p);
    cf_key a = cf_k(p, "a"), c = cf_k(p, "c"), n = cf_k(p, "n");
    for (int ryw_off = 0; ryw_off < 2; ryw_off++) {
        kvq_txn *t = new_txn(db);
        assert_ok(kvq_txn_set(t, a.b, a.n, K("x")));
        assert_ok(kvq_txn_set(t, c.b, c.n, K("old")));
        assert_ok(kvq_txn_clear(t, n.b, n.n));
        assert_ok(kvq_txn_commit(t));
        kvq_txn_destroy(t);
        kvq_txn *t1 = new_txn(db), *t2 = new_txn(db);
        if (ryw_off)
            assert_ok(kvq_txn_set_option(t1, KVQ_TXN_READ_YOUR_WRITES_DISABLE, 0));
        int64_t rv;
        assert_ok(kvq_txn_get_read_version(&rv, t1));
        assert_ok(kvq_txn_get_read_version(&rv, t2));
        /* t1 appends and compares against values t2 writes after t1's read version. */
        assert_ok(kvq_txn_atomic_op(t1, a.b, a.n, K("y"), KVQ_MUT_APPEND_IF_FITS));
        assert_ok(kvq_txn_atomic_op(t1, c.b, c.n, K("new"), KVQ_MUT_COMPARE_AND_CLEAR));
        assert_ok(kvq_txn_atomic_op(t1, n.b, n.n, K("1"), KVQ_MUT_COMPARE_AND_CLEAR));
        assert_ok(kvq_txn_atomic_op(t2, a.b, a.n, K("w"), KVQ_MUT_APPEND_IF_FITS));
        assert_ok(kvq_txn_set(t2, c.b, c.n, K("new")));
        assert_ok(kvq_txn_set(t2, n.b, n.n, K("1")));
        assert_ok(kvq_txn_commit(t2));
        assert_ok(kvq_txn_commit(t1));
        kvq_txn_destroy(t1);
        kvq_txn_destroy(t2);
        t = new_txn(db);
        cf_expect_value(t, a.b, a.n, 0, "xwy", 3, "appended to the value committed last");
        cf_expect_value(t, c.b, c.n, 0, NULL, 0, "compared with the value committed last");
        cf_expect_value(t, n.b, n.n, 0, NULL, 0, "a key created concurrently, cleared");
        kvq_txn_destroy(t);
    }
    /* Both sides COMPARE_AND_CLEAR the same key: both commit, the key is gone. */
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_set(t, c.b, c.n, K("v")));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
    kvq_txn *t1 = new_txn(db), *t2 = new_txn(db);
    int64_t rv;
    assert_ok(kvq_txn_get_read_version(&rv, t1));
    assert_ok(kvq_txn_get_read_version(&rv, t2));
    assert_ok(kvq_txn_atomic_op(t1, c.b, c.n, K("v"), KVQ_MUT_COMPARE_AND_CLEAR));
    assert_ok(kvq_txn_atomic_op(t2, c.b, c.n, K("v"), KVQ_MUT_COMPARE_AND_CLEAR));
    assert_ok(kvq_txn_commit(t1));
    assert_ok(kvq_txn_commit(t2));
    kvq_txn_destroy(t1);
    kvq_txn_destroy(t2);
    /* A reader of the key still conflicts with them: they are writes. */
    t = new_txn(db);
    assert_ok(kvq_txn_set(t, c.b, c.n, K("v")));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
    t1 = new_txn(db);
    t2 = new_txn(db);
    kvq_bytes v;
    int present;
    assert_ok(kvq_txn_get(&v, &present, t1, c.b, c.n, 0));
    assert_ok(kvq_txn_set(t1, a.b, a.n, K("r")));
    assert_ok(kvq_txn_atomic_op(t2, c.b, c.n, K("v"), KVQ_MUT_COMPARE_AND_CLEAR));
    assert_ok(kvq_txn_commit(t2));
    assert_err(kvq_txn_commit(t1), KVQ_ENOT_COMMITTED);
    kvq_txn_destroy(t1);
    kvq_txn_destroy(t2);
    kvq_db_close(db);
}

struct adder {
    kvq_db *db;
    cf_key key;
    int n;
    int failures;
    int retries;
};

static void *adder_main(void *arg)
{
    struct adder *a = arg;
    uint8_t one[8];
    cf_put_le(one, 1, 8);
    kvq_txn *t = NULL;
    if (kvq_txn_create(&t, a->db) != 0) {
        a->failures++;
        return NULL;
    }
    for (int i = 0; i < a->n; i++) {
        int rc = kvq_txn_atomic_op(t, a->key.b, a->key.n, one, 8, KVQ_MUT_ADD);
        if (rc == 0)
            rc = kvq_txn_commit(t);
        if (rc != 0)
            a->failures++;
        kvq_txn_reset(t);
    }
    kvq_txn_destroy(t);
    return NULL;
}

static void test_threads_atomic_adds(void **state)
{
    (void)state;
    const char *p = "confl_add_threads";
    kvq_db *db = cf_open_clean(p);
    enum { THREADS = 4, N = 150 };
    struct adder a[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        a[i] = (struct adder){ db, cf_k(p, "n"), N, 0, 0 };
        assert_int_equal(pthread_create(&th[i], NULL, adder_main, &a[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        if (a[i].failures != 0)
            fail_msg("thread %d: %d atomic-add commits failed (they never conflict)", i,
                     a[i].failures);
    }
    uint8_t got[8];
    cf_key k = cf_k(p, "n");
    assert_int_equal(cf_read_key(db, k.b, k.n, got, 8), 8);
    assert_int_equal(cf_le64(got, 8), THREADS * N);
    kvq_db_close(db);
}

/* Pushers read nothing (or only with snapshot reads) and push a versionstamped key into the
 * queue's range: none conflicts, and every item is there with a distinct stamp. */
static void test_versionstamped_pushes_no_conflict(void **state)
{
    (void)state;
    const char *p = "confl_vs";
    kvq_db *db = cf_open_clean(p);
    cf_key q = cf_k(p, "q/"), qe = cf_after_prefix(&q);
    kvq_txn *t[3];
    for (int i = 0; i < 3; i++) {
        t[i] = new_txn(db);
        const kvq_kv *kvs;
        size_t n;
        if (i > 0) {
            assert_ok(
                kvq_txn_get_range(&kvs, &n, NULL, t[i], q.b, q.n, qe.b, qe.n, 0, KVQ_SNAPSHOT));
            assert_int_equal(n, 0);
        }
        uint8_t k[300];
        memcpy(k, q.b, q.n);
        memset(k + q.n, 0, 10);
        cf_put_le(k + q.n + 10, (uint64_t)q.n, 4);
        assert_ok(kvq_txn_set_versionstamped_key(t[i], k, q.n + 14, K("item")));
    }
    for (int i = 0; i < 3; i++)
        assert_ok(kvq_txn_commit(t[i]));
    kvq_txn *r = new_txn(db);
    const kvq_kv *kvs;
    size_t n;
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, r, q.b, q.n, qe.b, qe.n, 0, 0));
    assert_int_equal(n, 3);
    kvq_txn_destroy(r);
    for (int i = 0; i < 3; i++)
        kvq_txn_destroy(t[i]);
    kvq_db_close(db);
}

/* A popper reads the queue's items and clears the whole range; a push lands in that range after
 * the popper's read version. The popper must fail with 1020 (it never saw the new item), and
 * the new item must survive: committing would delete it unseen. */
static void test_clear_after_versionstamped_push_conflicts(void **state)
{
    (void)state;
    const char *p = "confl_vs_clear";
    kvq_db *db = cf_open_clean(p);
    cf_key q = cf_k(p, "q/"), qe = cf_after_prefix(&q);
    uint8_t k[300];
    memcpy(k, q.b, q.n);
    memset(k + q.n, 0, 10);
    cf_put_le(k + q.n + 10, (uint64_t)q.n, 4);
    kvq_txn *first = new_txn(db);
    assert_ok(kvq_txn_set_versionstamped_key(first, k, q.n + 14, K("old")));
    assert_ok(kvq_txn_commit(first));
    kvq_txn_destroy(first);

    kvq_txn *popper = new_txn(db);
    const kvq_kv *kvs;
    size_t n;
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, popper, q.b, q.n, qe.b, qe.n, 0, 0));
    assert_int_equal(n, 1);
    kvq_txn *pusher = new_txn(db);
    assert_ok(kvq_txn_set_versionstamped_key(pusher, k, q.n + 14, K("new")));
    assert_ok(kvq_txn_commit(pusher));
    kvq_txn_destroy(pusher);
    assert_ok(kvq_txn_clear_range(popper, q.b, q.n, qe.b, qe.n));
    assert_int_equal(kvq_txn_commit(popper), KVQ_ENOT_COMMITTED);
    kvq_txn_destroy(popper);

    kvq_txn *r = new_txn(db);
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, r, q.b, q.n, qe.b, qe.n, 0, 0));
    assert_int_equal(n, 2);
    kvq_txn_destroy(r);
    kvq_db_close(db);
}

/* A transaction whose commit failed is not read from again before a reset: used_during_commit
 * (2017), as FoundationDB says of a transaction used after its commit. The embedded engine used
 * to read from the snapshot its commit had already ended (a NULL connection: a crash). */
static void test_read_after_failed_commit(void **state)
{
    (void)state;
    const char *p = "confl_after_fail";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k"), o = cf_k(p, "o");
    kvq_txn *a = new_txn(db), *b = new_txn(db);
    kvq_bytes v;
    int present;
    assert_ok(kvq_txn_get(&v, &present, a, k.b, k.n, 0));
    assert_ok(kvq_txn_set(b, k.b, k.n, K("b")));
    assert_ok(kvq_txn_commit(b));
    assert_ok(kvq_txn_set(a, o.b, o.n, K("a")));
    assert_int_equal(kvq_txn_commit(a), KVQ_ENOT_COMMITTED);
    assert_int_equal(kvq_txn_get(&v, &present, a, k.b, k.n, 0), KVQ_EUSED_DURING_COMMIT);
    cf_key e = cf_after_prefix(&k);
    const kvq_kv *kvs;
    size_t n;
    assert_int_equal(kvq_txn_get_range(&kvs, &n, NULL, a, k.b, k.n, e.b, e.n, 0, 0),
                     KVQ_EUSED_DURING_COMMIT);
    kvq_txn_reset(a);
    assert_ok(kvq_txn_get(&v, &present, a, k.b, k.n, 0));
    assert_true(present);
    kvq_txn_destroy(a);
    kvq_txn_destroy(b);
    kvq_db_close(db);
}

/* ---- the retry loop ------------------------------------------------------------------------ */

struct interfere {
    kvq_db *db;
    cf_key key;
    int attempts;
    int interfere_times; /* attempts that another transaction spoils */
    int result;          /* what the body returns */
};

/* Reads the key, lets another transaction write it (on the first attempts), then writes it. */
static int interfering_body(kvq_txn *txn, void *payload)
{
    struct interfere *in = payload;
    in->attempts++;
    kvq_bytes v;
    int present;
    int rc = kvq_txn_get(&v, &present, txn, in->key.b, in->key.n, 0);
    if (rc != 0)
        return rc;
    if (in->attempts <= in->interfere_times) {
        kvq_txn *other = NULL;
        rc = kvq_txn_create(&other, in->db);
        if (rc == 0)
            rc = kvq_txn_set(other, in->key.b, in->key.n, K("other"));
        if (rc == 0)
            rc = kvq_txn_commit(other);
        kvq_txn_destroy(other);
        if (rc != 0)
            return rc;
    }
    char val[32];
    snprintf(val, sizeof(val), "attempt%d", in->attempts);
    rc = kvq_txn_set(txn, in->key.b, in->key.n, K(val));
    if (rc != 0)
        return rc;
    return in->result;
}

static void test_transact_retries_conflicts(void **state)
{
    (void)state;
    const char *p = "confl_retry";
    kvq_db *db = cf_open_clean(p);
    kvq_db_stats before, after;
    assert_ok(kvq_db_get_stats(&before, db));

    struct interfere in = { db, cf_k(p, "k"), 0, 1, 0 };
    assert_ok(kvq_db_transact(db, interfering_body, &in));
    assert_int_equal(in.attempts, 2);
    char got[32];
    assert_int_equal(cf_read_key(db, in.key.b, in.key.n, got, sizeof(got)), 8);
    assert_memory_equal(got, "attempt2", 8);

    /* With a caller's transaction, kvq_txn_get_retries counts the retries. */
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_MAX_RETRY_DELAY_MS, 5));
    in = (struct interfere){ db, cf_k(p, "k"), 0, 3, 0 };
    assert_ok(kvq_txn_run(t, interfering_body, &in));
    assert_int_equal(in.attempts, 4);
    assert_int_equal(kvq_txn_get_retries(t), 3);
    /* After success the transaction holds its commit. */
    uint8_t st[10];
    assert_ok(kvq_txn_get_versionstamp(st, t));
    assert_int_equal(cf_read_key(db, in.key.b, in.key.n, got, sizeof(got)), 8);
    assert_memory_equal(got, "attempt4", 8);
    kvq_txn_destroy(t);

    assert_ok(kvq_db_get_stats(&after, db));
    assert_true(after.conflicts >= before.conflicts + 4);
    assert_true(after.retries >= before.retries + 4);
    kvq_db_close(db);
}

static int user_error_body(kvq_txn *txn, void *payload)
{
    struct interfere *in = payload;
    in->attempts++;
    int rc = kvq_txn_set(txn, in->key.b, in->key.n, K("must not commit"));
    return rc != 0 ? rc : in->result;
}

static void test_transact_body_errors(void **state)
{
    (void)state;
    const char *p = "confl_body";
    kvq_db *db = cf_open_clean(p);
    /* The body's own failure: returned as is, run once, nothing committed. */
    struct interfere in = { db, cf_k(p, "k"), 0, 0, KVQ_EUSER };
    assert_err(kvq_db_transact(db, user_error_body, &in), KVQ_EUSER);
    assert_int_equal(in.attempts, 1);
    assert_int_equal(cf_read_key(db, in.key.b, in.key.n, NULL, 0), -1);
    /* A non-retryable kvq error from the body: the same. */
    in = (struct interfere){ db, cf_k(p, "k"), 0, 0, KVQ_EKEY_TOO_LARGE };
    assert_err(kvq_db_transact(db, user_error_body, &in), KVQ_EKEY_TOO_LARGE);
    assert_int_equal(in.attempts, 1);
    assert_int_equal(cf_read_key(db, in.key.b, in.key.n, NULL, 0), -1);
    /* A retryable error returned by the body is retried, up to the retry limit. */
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_RETRY_LIMIT, 2));
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_MAX_RETRY_DELAY_MS, 2));
    in = (struct interfere){ db, cf_k(p, "k"), 0, 0, KVQ_ENOT_COMMITTED };
    assert_err(kvq_txn_run(t, user_error_body, &in), KVQ_ENOT_COMMITTED);
    assert_int_equal(in.attempts, 3);
    assert_int_equal(cf_read_key(db, in.key.b, in.key.n, NULL, 0), -1);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_on_error(void **state)
{
    (void)state;
    const char *p = "confl_onerr";
    kvq_db *db = cf_open_clean(p);
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_MAX_RETRY_DELAY_MS, 2));
    /* Non-retryable errors come back unchanged, and count no retry. */
    static const int final_errors[] = {
        KVQ_EINVAL,
        KVQ_EUSER,
        KVQ_EKEY_TOO_LARGE,
        KVQ_EVALUE_TOO_LARGE,
        KVQ_EKEY_OUTSIDE_LEGAL_RANGE,
        KVQ_EINVERTED_RANGE,
        KVQ_ETRANSACTION_TOO_LARGE,
        KVQ_EACCESSED_UNREADABLE,
        KVQ_ETRANSACTION_CANCELLED,
        KVQ_ECLIENT_INVALID_OPERATION,
        KVQ_EUSED_DURING_COMMIT,
        KVQ_EDAMAGED,
        KVQ_ETRANSACTION_TIMED_OUT,
        KVQ_EINVALID_MUTATION_TYPE,
        KVQ_ENOMEM,
    };
    for (size_t i = 0; i < sizeof(final_errors) / sizeof(final_errors[0]); i++) {
        assert_err(kvq_txn_on_error(t, final_errors[i]), final_errors[i]);
        assert_false(kvq_error_retryable(final_errors[i]));
    }
    assert_int_equal(kvq_txn_get_retries(t), 0);
    /* Retryable ones reset the transaction and return 0. */
    static const int retryable[] = { KVQ_ENOT_COMMITTED, KVQ_ETRANSACTION_TOO_OLD,
                                     KVQ_ECOMMIT_UNKNOWN_RESULT, KVQ_EFUTURE_VERSION,
                                     KVQ_EPROCESS_BEHIND };
    cf_key k = cf_k(p, "k");
    for (size_t i = 0; i < sizeof(retryable) / sizeof(retryable[0]); i++) {
        assert_true(kvq_error_retryable(retryable[i]));
        assert_ok(kvq_txn_set(t, k.b, k.n, K("dropped")));
        assert_ok(kvq_txn_on_error(t, retryable[i]));
        assert_int_equal(kvq_txn_get_retries(t), (int)i + 1);
    }
    assert_true(kvq_error_maybe_committed(KVQ_ECOMMIT_UNKNOWN_RESULT));
    assert_false(kvq_error_maybe_committed(KVQ_ENOT_COMMITTED));
    assert_true(kvq_error_retryable_not_committed(KVQ_ENOT_COMMITTED));
    assert_false(kvq_error_retryable_not_committed(KVQ_ECOMMIT_UNKNOWN_RESULT));
    /* The reset dropped the writes: this commit writes nothing. */
    assert_ok(kvq_txn_commit(t));
    assert_int_equal(cf_read_key(db, k.b, k.n, NULL, 0), -1);
    /* kvq_txn_reset zeroes the count. */
    kvq_txn_reset(t);
    assert_int_equal(kvq_txn_get_retries(t), 0);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* A database handle whose every commit fails the given way. */
static kvq_db *open_faulty(unsigned kinds, double rate, int retry_limit)
{
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    kvq_testing_options t = KVQ_TESTING_OPTIONS_INIT;
    t.fault_rate = rate;
    t.fault_kinds = kinds;
    t.fault_seed = 12345;
    o.retry_limit = retry_limit;
    o.max_retry_delay_ms = 2;
    return cf_open_url_testing(cf_url, &o, &t);
}

static int set_body(kvq_txn *txn, void *payload)
{
    struct interfere *in = payload;
    in->attempts++;
    return kvq_txn_set(txn, in->key.b, in->key.n, K("v"));
}

static void test_retry_limit_option(void **state)
{
    (void)state;
    const char *p = "confl_limit";
    kvq_db *faulty = open_faulty(KVQ_FAULT_NOT_COMMITTED, 1.0, 2);
    /* The database's retry limit (2): three attempts, then the last error. */
    struct interfere in = { faulty, cf_k(p, "k"), 0, 0, 0 };
    assert_err(kvq_db_transact(faulty, set_body, &in), KVQ_ENOT_COMMITTED);
    assert_int_equal(in.attempts, 3);
    /* The transaction option overrides it. */
    static const int limits[] = { 0, 1, 4 };
    for (size_t i = 0; i < 3; i++) {
        kvq_txn *t = new_txn(faulty);
        assert_ok(kvq_txn_set_option(t, KVQ_TXN_RETRY_LIMIT, limits[i]));
        in.attempts = 0;
        assert_err(kvq_txn_run(t, set_body, &in), KVQ_ENOT_COMMITTED);
        assert_int_equal(in.attempts, limits[i] + 1);
        assert_int_equal(kvq_txn_get_retries(t), limits[i]);
        kvq_txn_destroy(t);
    }
    /* By hand: on_error gives the error back once the limit is reached. */
    kvq_txn *t = new_txn(faulty);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_RETRY_LIMIT, 3));
    int rounds = 0, rc;
    for (;;) {
        rounds++;
        rc = kvq_txn_set(t, in.key.b, in.key.n, K("v"));
        if (rc == 0)
            rc = kvq_txn_commit(t);
        assert_int_equal(rc, KVQ_ENOT_COMMITTED);
        rc = kvq_txn_on_error(t, rc);
        if (rc != 0)
            break;
        assert_true(rounds < 10);
    }
    assert_int_equal(rc, KVQ_ENOT_COMMITTED);
    assert_int_equal(rounds, 4);
    kvq_txn_destroy(t);
    kvq_db_stats st;
    assert_ok(kvq_db_get_stats(&st, faulty));
    assert_true(st.injected_faults >= 3 + 1 + 2 + 5 + 4);
    kvq_db_close(faulty);

    /* Nothing was written by any of them. */
    kvq_db *db = cf_open(NULL);
    assert_int_equal(cf_read_key(db, in.key.b, in.key.n, NULL, 0), -1);
    kvq_db_close(db);
}

static void test_timeouts(void **state)
{
    (void)state;
    const char *p = "confl_timeout";
    kvq_db *db = cf_open(NULL);
    cf_key k = cf_k(p, "k");
    /* A transaction that outlives its timeout fails its next read and its commit with 1031.
     * (1 s, so that the first read is inside it even on a busy machine.) */
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_TIMEOUT_MS, 1000));
    kvq_bytes v;
    int present;
    assert_ok(kvq_txn_get(&v, &present, t, k.b, k.n, 0));
    cf_sleep_ms(1200);
    assert_err(kvq_txn_get(&v, &present, t, k.b, k.n, 0), KVQ_ETRANSACTION_TIMED_OUT);
    assert_err(kvq_txn_commit(t), KVQ_ETRANSACTION_TIMED_OUT);
    /* 1031 is final for on_error. */
    assert_err(kvq_txn_on_error(t, KVQ_ETRANSACTION_TIMED_OUT), KVQ_ETRANSACTION_TIMED_OUT);
    /* Reset clears the option: the transaction works again. */
    kvq_txn_reset(t);
    assert_ok(kvq_txn_get(&v, &present, t, k.b, k.n, 0));
    cf_sleep_ms(150);
    assert_ok(kvq_txn_get(&v, &present, t, k.b, k.n, 0));
    kvq_txn_destroy(t);
    kvq_db_close(db);

    /* A retry loop that keeps failing stops at its time budget with 1031. */
    kvq_db *faulty = open_faulty(KVQ_FAULT_NOT_COMMITTED, 1.0, -1);
    t = new_txn(faulty);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_TIMEOUT_MS, 300));
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_RETRY_LIMIT, -1));
    struct interfere in = { faulty, k, 0, 0, 0 };
    int64_t t0 = cf_now_ns();
    assert_err(kvq_txn_run(t, set_body, &in), KVQ_ETRANSACTION_TIMED_OUT);
    int64_t ms = (cf_now_ns() - t0) / 1000000;
    assert_true(in.attempts >= 2);
    if (ms < 250 || ms > 5000 * kvq_test_time_factor())
        fail_msg("retry loop with a 300 ms budget ended after %" PRId64 " ms", ms);
    kvq_txn_destroy(t);
    kvq_db_close(faulty);

    /* The database's default budget applies to kvq_db_transact. */
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    kvq_testing_options ft = KVQ_TESTING_OPTIONS_INIT;
    ft.fault_rate = 1.0;
    ft.fault_kinds = KVQ_FAULT_NOT_COMMITTED;
    o.retry_limit = -1;
    o.timeout_ms = 200;
    o.max_retry_delay_ms = 2;
    faulty = cf_open_url_testing(cf_url, &o, &ft);
    in.attempts = 0;
    t0 = cf_now_ns();
    assert_err(kvq_db_transact(faulty, set_body, &in), KVQ_ETRANSACTION_TIMED_OUT);
    ms = (cf_now_ns() - t0) / 1000000;
    if (ms < 150 || ms > 5000 * kvq_test_time_factor())
        fail_msg("kvq_db_transact with a 200 ms budget ended after %" PRId64 " ms", ms);
    kvq_db_close(faulty);
}

/* ---- injected faults ----------------------------------------------------------------------- */

static void fault_case(unsigned kind, int want_rc, int want_written, const char *name)
{
    char p[64];
    snprintf(p, sizeof(p), "confl_fault_%s", name);
    kvq_db *db = cf_open_clean(p);
    kvq_db *faulty = open_faulty(kind, 1.0, 100);
    kvq_db_stats before, after;
    assert_ok(kvq_db_get_stats(&before, faulty));
    for (int i = 0; i < 3; i++) {
        char ks[32];
        snprintf(ks, sizeof(ks), "k%d", i);
        cf_key k = cf_k(p, ks);
        kvq_txn *t = new_txn(faulty);
        assert_ok(kvq_txn_set(t, k.b, k.n, K("v")));
        int rc = kvq_txn_commit(t);
        if (rc != want_rc)
            fail_msg("fault %s: commit returned %d %s, expected %d %s", name, rc, kvq_errname(rc),
                     want_rc, kvq_errname(want_rc));
        assert_true(kvq_error_retryable(rc));
        long got = cf_read_key(db, k.b, k.n, NULL, 0);
        if (want_written != (got >= 0))
            fail_msg("fault %s: the write is %s", name, got >= 0 ? "there" : "missing");
        kvq_txn_destroy(t);
    }
    assert_ok(kvq_db_get_stats(&after, faulty));
    assert_int_equal(after.injected_faults - before.injected_faults, 3);
    kvq_db_close(faulty);
    kvq_db_close(db);
}

static void test_fault_not_committed(void **state)
{
    (void)state;
    fault_case(KVQ_FAULT_NOT_COMMITTED, KVQ_ENOT_COMMITTED, 0, "nc");
}

static void test_fault_unknown_committed(void **state)
{
    (void)state;
    fault_case(KVQ_FAULT_UNKNOWN_COMMITTED, KVQ_ECOMMIT_UNKNOWN_RESULT, 1, "uc");
}

static void test_fault_unknown_not_committed(void **state)
{
    (void)state;
    fault_case(KVQ_FAULT_UNKNOWN_NOT_COMMITTED, KVQ_ECOMMIT_UNKNOWN_RESULT, 0, "unc");
}

/* At a partial rate the retry loop gets every transaction through. */
static void test_fault_rate_retry_loop(void **state)
{
    (void)state;
    const char *p = "confl_fault_rate";
    kvq_db *db = cf_open_clean(p);
    kvq_db *faulty =
        open_faulty(KVQ_FAULT_NOT_COMMITTED | KVQ_FAULT_UNKNOWN_NOT_COMMITTED, 0.5, -1);
    for (int i = 0; i < 40; i++) {
        char ks[32];
        snprintf(ks, sizeof(ks), "k%02d", i);
        struct interfere in = { faulty, cf_k(p, ks), 0, 0, 0 };
        assert_ok(kvq_db_transact(faulty, set_body, &in));
    }
    kvq_db_stats st;
    assert_ok(kvq_db_get_stats(&st, faulty));
    assert_true(st.injected_faults > 0);
    assert_true(st.retries >= st.injected_faults);
    kvq_db_close(faulty);
    cf_key b = cf_k(p, ""), e = cf_after_prefix(&b);
    kvq_txn *t = new_txn(db);
    const kvq_kv *kvs;
    size_t n;
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, b.b, b.n, e.b, e.n, 0, 0));
    assert_int_equal(n, 40);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* ---- across processes ---------------------------------------------------------------------- */

/* Child role: URL KEY VALUE. Sets KEY in a transaction of its own handle and commits. */
static int role_set_key(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    kvq_db *db = NULL;
    int rc = kvq_db_open(&db, argv[1], NULL);
    if (rc != 0)
        return 3;
    kvq_txn *t = NULL;
    rc = kvq_txn_create(&t, db);
    if (rc == 0)
        rc = kvq_txn_set(t, (const uint8_t *)argv[2], strlen(argv[2]), (const uint8_t *)argv[3],
                         strlen(argv[3]));
    if (rc == 0)
        rc = kvq_txn_commit(t);
    if (rc != 0)
        fprintf(stderr, "set_key: %s (%s)\n", kvq_errname(rc), kvq_last_error());
    kvq_txn_destroy(t);
    kvq_db_close(db);
    return rc == 0 ? 0 : 4;
}

static const struct cf_role roles[] = { { "set_key", role_set_key } };

static void set_in_child(const cf_key *k, const char *value)
{
    char key[300];
    memcpy(key, k->b, k->n);
    key[k->n] = '\0';
    const char *args[] = { cf_url, key, value, NULL };
    cf_wait_ok(cf_spawn("set_key", args), 60, "set_key");
}

/* The conflict check sees commits of other processes (their own handles). */
static void test_conflicts_across_processes(void **state)
{
    (void)state;
    const char *p = "confl_procs";
    kvq_db *db = cf_open_clean(p);
    cf_key k = cf_k(p, "k"), other = cf_k(p, "other"), out = cf_k(p, "out");
    kvq_bytes v;
    int present;
    const kvq_kv *kvs;
    size_t n;
    cf_key b = cf_k(p, ""), e = cf_after_prefix(&b);

    /* A get, then another process writes that key: 1020. */
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_get(&v, &present, t, k.b, k.n, 0));
    set_in_child(&k, "child1");
    assert_ok(kvq_txn_set(t, out.b, out.n, K("x")));
    assert_err(kvq_txn_commit(t), KVQ_ENOT_COMMITTED);
    kvq_txn_reset(t);

    /* A range read, then another process writes a new key into it: 1020. */
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, b.b, b.n, e.b, e.n, 0, 0));
    set_in_child(&other, "child2");
    assert_ok(kvq_txn_set(t, out.b, out.n, K("x")));
    assert_err(kvq_txn_commit(t), KVQ_ENOT_COMMITTED);
    kvq_txn_reset(t);

    /* A get, then another process writes a different key: commits. */
    assert_ok(kvq_txn_get(&v, &present, t, k.b, k.n, 0));
    set_in_child(&other, "child3");
    assert_ok(kvq_txn_set(t, out.b, out.n, K("x")));
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);

    /* A transaction that starts after another process committed sees its write. */
    set_in_child(&k, "child4");
    cf_expect_value(t, k.b, k.n, 0, "child4", 6, "another process's commit");
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

/* Options survive kvq_txn_on_error, not kvq_txn_reset; so does the user version counter. */
static void test_options_across_on_error(void **state)
{
    (void)state;
    kvq_db *db = cf_open(NULL);
    kvq_txn *t = new_txn(db);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_MAX_RETRY_DELAY_MS, 1));
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_RETRY_LIMIT, 1));
    uint16_t uv;
    assert_ok(kvq_txn_next_user_version(&uv, t));
    assert_ok(kvq_txn_next_user_version(&uv, t));
    assert_ok(kvq_txn_on_error(t, KVQ_ENOT_COMMITTED));
    assert_ok(kvq_txn_next_user_version(&uv, t));
    assert_int_equal(uv, 2);
    /* The limit of 1 survived the first on_error: the second gives the error back. */
    assert_err(kvq_txn_on_error(t, KVQ_ENOT_COMMITTED), KVQ_ENOT_COMMITTED);
    /* After reset the database's default (100) applies again, and user versions restart. */
    kvq_txn_reset(t);
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_MAX_RETRY_DELAY_MS, 1));
    assert_ok(kvq_txn_on_error(t, KVQ_ENOT_COMMITTED));
    assert_ok(kvq_txn_on_error(t, KVQ_ENOT_COMMITTED));
    kvq_txn_reset(t);
    assert_ok(kvq_txn_next_user_version(&uv, t));
    assert_int_equal(uv, 0);
    /* The timeout also survives on_error. (1 s, so that the read and on_error are inside it
     * even on a busy machine.) */
    assert_ok(kvq_txn_set_option(t, KVQ_TXN_TIMEOUT_MS, 1000));
    kvq_bytes v;
    int present;
    cf_key k = cf_k("confl_opts", "k");
    assert_ok(kvq_txn_get(&v, &present, t, k.b, k.n, 0));
    assert_ok(kvq_txn_on_error(t, KVQ_ENOT_COMMITTED));
    cf_sleep_ms(1200);
    assert_err(kvq_txn_get(&v, &present, t, k.b, k.n, 0), KVQ_ETRANSACTION_TIMED_OUT);
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

int main(int argc, char **argv)
{
    cf_init(argc, argv, roles, sizeof(roles) / sizeof(roles[0]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conflict_table),
        cmocka_unit_test(test_read_only_never_conflicts),
        cmocka_unit_test(test_conflicts_across_processes),
        cmocka_unit_test(test_options_across_on_error),
        cmocka_unit_test(test_skip_conflict_check_knob),
        cmocka_unit_test(test_concurrent_atomic_adds),
        cmocka_unit_test(test_concurrent_append_and_compare_and_clear),
        cmocka_unit_test(test_threads_atomic_adds),
        cmocka_unit_test(test_versionstamped_pushes_no_conflict),
        cmocka_unit_test(test_clear_after_versionstamped_push_conflicts),
        cmocka_unit_test(test_read_after_failed_commit),
        cmocka_unit_test(test_transact_retries_conflicts),
        cmocka_unit_test(test_transact_body_errors),
        cmocka_unit_test(test_on_error),
        cmocka_unit_test(test_retry_limit_option),
        cmocka_unit_test(test_timeouts),
        cmocka_unit_test(test_fault_not_committed),
        cmocka_unit_test(test_fault_unknown_committed),
        cmocka_unit_test(test_fault_unknown_not_committed),
        cmocka_unit_test(test_fault_rate_retry_loop),
    };
    return CF_RUN("txn_conflicts", tests);
}
