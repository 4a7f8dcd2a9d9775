/* Conformance: read-your-writes against an in-memory model. 5,000 random operation
 * sequences, each run in ONE transaction over a database pre-seeded with random committed data,
 * over a small key alphabet (keys of 1-3 bytes from {0x00, 'a', 'b', 'c'} under a prefix, so
 * that neighbouring keys, key + 0x00 and empty ranges come up all the time). Operations: set,
 * clear, clear_range, atomic ADD (1/2/4/8-byte operands), MAX and BYTE_MIN (and, less often,
 * MIN, BYTE_MAX, BIT_AND, BIT_OR, BIT_XOR, APPEND_IF_FITS and COMPARE_AND_CLEAR, whose operand
 * is often the key's current value, so that it clears), get and get_range
 * with random limits in both directions, snapshot or not. Every read is compared with the model
 * (the committed data overlaid with the transaction's writes in order); then the transaction is
 * committed (or, sometimes, dropped) and the whole database compared with the model.
 *
 * $KVQ_TEST_SEED replays a run; $KVQ_SOAK=1 runs ten times as many (50,000) sequences. */
#include "conformance.h"
#include "model.h"

static const uint8_t alphabet[] = { 0x00, 'a', 'b', 'c' };
static const uint8_t val_bytes[] = { 0x00, 0x01, 'x', 0x7f, 0xff };

#define PFX "cf/ryw_model/"

struct run {
    cf_rng rng;
    uint64_t seed;
    kvq_db *db;
    kvq_txn *txn;
    cf_model committed, view;
    size_t *idx; /* scratch for model range reads */
    size_t idx_cap;
    char log[64][160]; /* the current sequence, to print on failure */
    int nlog;
    long seq;
    uint64_t reads, writes, rows;
};

static size_t pfx_len(void)
{
    return sizeof(PFX) - 1;
}

/* A random key: the prefix and 1-3 letters. */
static size_t rand_key(struct run *r, uint8_t *out)
{
    memcpy(out, PFX, pfx_len());
    size_t n = 1 + cf_below(&r->rng, 3);
    for (size_t i = 0; i < n; i++)
        out[pfx_len() + i] = alphabet[cf_below(&r->rng, sizeof(alphabet))];
    return pfx_len() + n;
}

/* A random range end: a key, or now and then the prefix itself or the prefix + 0xFF. */
static size_t rand_bound(struct run *r, uint8_t *out)
{
    uint32_t c = cf_below(&r->rng, 10);
    memcpy(out, PFX, pfx_len());
    if (c == 0)
        return pfx_len();
    if (c == 1) {
        out[pfx_len()] = 0xff;
        return pfx_len() + 1;
    }
    return rand_key(r, out);
}

static size_t rand_value(struct run *r, uint8_t *out)
{
    size_t n = cf_below(&r->rng, 9);
    for (size_t i = 0; i < n; i++)
        out[i] = val_bytes[cf_below(&r->rng, sizeof(val_bytes))];
    return n;
}

static void hex(char *out, size_t cap, const uint8_t *b, size_t n)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && o + 3 < cap; i++) {
        uint8_t c = b[i];
        if (c >= 'a' && c <= 'z')
            o += (size_t)snprintf(out + o, cap - o, "%c", c);
        else
            o += (size_t)snprintf(out + o, cap - o, "\\%02x", c);
    }
}

/* A key without the prefix, for messages. */
static void kname(char *out, size_t cap, const uint8_t *k, size_t n)
{
    if (n >= pfx_len() && memcmp(k, PFX, pfx_len()) == 0)
        hex(out, cap, k + pfx_len(), n - pfx_len());
    else
        hex(out, cap, k, n);
}

static void logf_op(struct run *r, const char *fmt, ...)
{
    if (r->nlog >= 64)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->log[r->nlog++], sizeof(r->log[0]), fmt, ap);
    va_end(ap);
}

static void fail_run(struct run *r, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "ryw model: seed %" PRIu64 ", sequence %ld failed; its operations:\n", r->seed,
            r->seq);
    for (int i = 0; i < r->nlog; i++)
        fprintf(stderr, "  %2d: %s\n", i, r->log[i]);
    fail_msg("%s (replay: KVQ_TEST_SEED=%" PRIu64 ")", msg, r->seed);
}

static void need_idx(struct run *r, size_t n)
{
    if (r->idx_cap < n + 1) {
        r->idx_cap = 2 * n + 16;
        r->idx = realloc(r->idx, r->idx_cap * sizeof(*r->idx));
        assert_non_null(r->idx);
    }
}

/* Compares a range read's result with the model's rows. */
static void check_rows(struct run *r,
                       const cf_model *m,
                       const kvq_kv *kvs,
                       size_t count,
                       int more,
                       const uint8_t *b,
                       size_t bn,
                       const uint8_t *e,
                       size_t en,
                       int limit,
                       int reverse,
                       const char *what)
{
    need_idx(r, m->n);
    int want_more;
    size_t want = cf_model_range(m, b, bn, e, en, limit, reverse, r->idx, &want_more);
    if (count != want)
        fail_run(r, "%s: expected %zu rows, got %zu", what, want, count);
    for (size_t i = 0; i < count; i++) {
        const cf_mentry *me = &m->e[r->idx[i]];
        if (cf_bytes_cmp(kvs[i].key.data, kvs[i].key.len, me->k, me->kn) != 0 ||
            cf_bytes_cmp(kvs[i].value.data, kvs[i].value.len, me->v, me->vn) != 0) {
            char gk[64], gv[64], wk[64], wv[64];
            kname(gk, sizeof(gk), kvs[i].key.data, kvs[i].key.len);
            hex(gv, sizeof(gv), kvs[i].value.data, kvs[i].value.len);
            kname(wk, sizeof(wk), me->k, me->kn);
            hex(wv, sizeof(wv), me->v, me->vn);
            fail_run(r, "%s: row %zu: expected %s=%s, got %s=%s", what, i, wk, wv, gk, gv);
        }
    }
    /* `more`: 0 when the limit did not stop the read, 1 when rows were left; when exactly
     * `limit` rows were there the fdb engine may say either. */
    if (limit == 0 || count < (size_t)limit) {
        if (more != 0)
            fail_run(r, "%s: more=1 but the read was not cut short", what);
    } else if (want_more && more != 1) {
        fail_run(r, "%s: more=0 but rows were left", what);
    }
}

/* Reads the whole prefix in a fresh transaction and compares it with the model. */
static void check_database(struct run *r, const cf_model *m, const char *what)
{
    kvq_txn *t = NULL;
    assert_ok(kvq_txn_create(&t, r->db));
    uint8_t e[64];
    memcpy(e, PFX, pfx_len());
    e[pfx_len()] = 0xff;
    const kvq_kv *kvs;
    size_t n;
    bool more;
    assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, (const uint8_t *)PFX, pfx_len(), e,
                                pfx_len() + 1, 0, 0));
    check_rows(r, m, kvs, n, more, (const uint8_t *)PFX, pfx_len(), e, pfx_len() + 1, 0, 0, what);
    kvq_txn_destroy(t);
}

/* Replaces the committed data with a random set of keys. */
static void reseed(struct run *r)
{
    kvq_txn *t = r->txn;
    uint8_t e[64];
    memcpy(e, PFX, pfx_len());
    e[pfx_len()] = 0xff;
    assert_ok(kvq_txn_clear_range(t, (const uint8_t *)PFX, pfx_len(), e, pfx_len() + 1));
    r->committed.n = 0;
    int n = (int)cf_below(&r->rng, 31);
    for (int i = 0; i < n; i++) {
        uint8_t k[64], v[16];
        size_t kn = rand_key(r, k), vn = rand_value(r, v);
        assert_ok(kvq_txn_set(t, k, kn, v, vn));
        assert_int_equal(cf_model_set(&r->committed, k, kn, v, vn), 0);
    }
    assert_ok(kvq_txn_commit(t));
    kvq_txn_reset(t);
}

static void one_op(struct run *r)
{
    kvq_txn *t = r->txn;
    uint8_t k[64], k2[64], v[CF_MODEL_VAL];
    size_t kn, k2n, vn;
    char a[64], b[64], c[64];
    uint32_t pick = cf_below(&r->rng, 100);
    int rc;
    if (pick < 20) { /* set */
        kn = rand_key(r, k);
        vn = rand_value(r, v);
        kname(a, sizeof(a), k, kn);
        hex(b, sizeof(b), v, vn);
        logf_op(r, "set %s = %s", a, b);
        if ((rc = kvq_txn_set(t, k, kn, v, vn)) != 0)
            fail_run(r, "set -> %d %s", rc, kvq_errname(rc));
        assert_int_equal(cf_model_set(&r->view, k, kn, v, vn), 0);
        r->writes++;
    } else if (pick < 28) { /* clear */
        kn = rand_key(r, k);
        kname(a, sizeof(a), k, kn);
        logf_op(r, "clear %s", a);
        if ((rc = kvq_txn_clear(t, k, kn)) != 0)
            fail_run(r, "clear -> %d %s", rc, kvq_errname(rc));
        cf_model_clear(&r->view, k, kn);
        r->writes++;
    } else if (pick < 35) { /* clear_range */
        kn = rand_bound(r, k);
        k2n = rand_bound(r, k2);
        cf_bytes_order(k, &kn, k2, &k2n);
        kname(a, sizeof(a), k, kn);
        kname(b, sizeof(b), k2, k2n);
        logf_op(r, "clear_range [%s, %s)", a, b);
        if ((rc = kvq_txn_clear_range(t, k, kn, k2, k2n)) != 0)
            fail_run(r, "clear_range -> %d %s", rc, kvq_errname(rc));
        cf_model_clear_range(&r->view, k, kn, k2, k2n);
        r->writes++;
    } else if (pick < 50) { /* atomic */
        static const size_t widths[] = { 1, 2, 4, 8 };
        /* ADD, MAX and BYTE_MIN mostly; now and then the others. */
        static const kvq_mutation others[] = {
            KVQ_MUT_MIN,     KVQ_MUT_BYTE_MAX,       KVQ_MUT_BIT_AND,          KVQ_MUT_BIT_OR,
            KVQ_MUT_BIT_XOR, KVQ_MUT_APPEND_IF_FITS, KVQ_MUT_COMPARE_AND_CLEAR
        };
        static const char *const other_names[] = {
            "min", "byte_max", "and", "or", "xor", "append_if_fits", "compare_and_clear"
        };
        _Static_assert(sizeof(others) / sizeof(others[0]) ==
                           sizeof(other_names) / sizeof(other_names[0]),
                       "names");
        kvq_mutation op;
        const char *opname;
        uint32_t o = cf_below(&r->rng, 10);
        if (o < 4) {
            op = KVQ_MUT_ADD;
            opname = "add";
            vn = widths[cf_below(&r->rng, 4)];
            for (size_t i = 0; i < vn; i++)
                v[i] = (uint8_t)cf_rand(&r->rng);
        } else {
            if (o < 6) {
                op = KVQ_MUT_MAX;
                opname = "max";
            } else if (o < 8) {
                op = KVQ_MUT_BYTE_MIN;
                opname = "byte_min";
            } else {
                uint32_t x = cf_below(&r->rng, sizeof(others) / sizeof(others[0]));
                op = others[x];
                opname = other_names[x];
            }
            vn = rand_value(r, v);
            if (vn == 0 && op != KVQ_MUT_APPEND_IF_FITS && op != KVQ_MUT_COMPARE_AND_CLEAR) {
                vn = 1;
                v[0] = (uint8_t)'x';
            }
        }
        kn = rand_key(r, k);
        const cf_mentry *cur = cf_model_find(&r->view, k, kn);
        if (op == KVQ_MUT_COMPARE_AND_CLEAR && cur != NULL && cf_chance(&r->rng, 60)) {
            /* The current value: the key is cleared. */
            memcpy(v, cur->v, cur->vn);
            vn = cur->vn;
        }
        if (op == KVQ_MUT_APPEND_IF_FITS && cur != NULL && cur->vn + vn > CF_MODEL_VAL) {
            /* Longer than the model holds (far below the 100,000 bytes of a value). */
            op = KVQ_MUT_COMPARE_AND_CLEAR;
            opname = "compare_and_clear";
        }
        kname(a, sizeof(a), k, kn);
        hex(b, sizeof(b), v, vn);
        logf_op(r, "%s %s, %s", opname, a, b);
        if ((rc = kvq_txn_atomic_op(t, k, kn, v, vn, op)) != 0)
            fail_run(r, "atomic_op -> %d %s", rc, kvq_errname(rc));
        assert_int_equal(cf_model_atomic(&r->view, k, kn, op, v, vn), 0);
        r->writes++;
    } else if (pick < 72) { /* get */
        unsigned flags = cf_chance(&r->rng, 50) ? KVQ_SNAPSHOT : 0;
        kn = rand_key(r, k);
        kname(a, sizeof(a), k, kn);
        logf_op(r, "get %s%s", a, flags ? " (snapshot)" : "");
        kvq_bytes got;
        int present = -1;
        if ((rc = kvq_txn_get(&got, &present, t, k, kn, flags)) != 0)
            fail_run(r, "get -> %d %s (%s)", rc, kvq_errname(rc), kvq_last_error());
        const cf_mentry *me = cf_model_find(&r->view, k, kn);
        if ((me != NULL) != (present == 1))
            fail_run(r, "get %s: expected %s, got %s", a, me ? "present" : "absent",
                     present == 1 ? "present" : "absent");
        if (me != NULL && cf_bytes_cmp(got.data, got.len, me->v, me->vn) != 0) {
            hex(b, sizeof(b), me->v, me->vn);
            hex(c, sizeof(c), got.data, got.len);
            fail_run(r, "get %s: expected %s, got %s", a, b, c);
        }
        r->reads++;
    } else { /* get_range */
        unsigned flags = (cf_chance(&r->rng, 50) ? KVQ_SNAPSHOT : 0) |
                         (cf_chance(&r->rng, 50) ? KVQ_REVERSE : 0);
        int limit = cf_chance(&r->rng, 30) ? 0 : 1 + (int)cf_below(&r->rng, 5);
        kn = rand_bound(r, k);
        k2n = rand_bound(r, k2);
        cf_bytes_order(k, &kn, k2, &k2n);
        kname(a, sizeof(a), k, kn);
        kname(b, sizeof(b), k2, k2n);
        char what[200];
        snprintf(what, sizeof(what), "get_range [%s, %s) limit %d%s%s", a, b, limit,
                 flags & KVQ_REVERSE ? " reverse" : "", flags & KVQ_SNAPSHOT ? " snapshot" : "");
        logf_op(r, "%s", what);
        const kvq_kv *kvs;
        size_t count;
        bool more = true;
        if ((rc = kvq_txn_get_range(&kvs, &count, &more, t, k, kn, k2, k2n, limit, flags)) != 0)
            fail_run(r, "%s -> %d %s (%s)", what, rc, kvq_errname(rc), kvq_last_error());
        check_rows(r, &r->view, kvs, count, more, k, kn, k2, k2n, limit, (flags & KVQ_REVERSE) != 0,
                   what);
        r->reads++;
        r->rows += count;
    }
}

static void test_ryw_against_model(void **state)
{
    (void)state;
    struct run *r = calloc(1, sizeof(*r));
    assert_non_null(r);
    r->seed = cf_seed("test_ryw_against_model");
    r->rng.s = r->seed;
    r->db = cf_open(NULL);
    assert_ok(kvq_txn_create(&r->txn, r->db));
    const char *soak = getenv("KVQ_SOAK");
    long sequences = soak != NULL && soak[0] == '1' ? 50000 : 5000;
    long committed = 0, dropped = 0;
    for (r->seq = 0; r->seq < sequences; r->seq++) {
        if (r->seq % 40 == 0)
            reseed(r);
        r->nlog = 0;
        assert_int_equal(cf_model_copy(&r->view, &r->committed), 0);
        int nops = 1 + (int)cf_below(&r->rng, 24);
        for (int i = 0; i < nops; i++)
            one_op(r);
        if (cf_chance(&r->rng, 10)) {
            /* Drop the transaction: nothing of it may reach the database. */
            logf_op(r, "reset (dropped)");
            kvq_txn_reset(r->txn);
            dropped++;
        } else {
            logf_op(r, "commit");
            int rc = kvq_txn_commit(r->txn);
            if (rc != 0)
                fail_run(r, "commit -> %d %s (%s)", rc, kvq_errname(rc), kvq_last_error());
            kvq_txn_reset(r->txn);
            assert_int_equal(cf_model_copy(&r->committed, &r->view), 0);
            committed++;
        }
        check_database(r, &r->committed, "database after the sequence");
    }
    print_message("%ld sequences (%ld committed, %ld dropped): %" PRIu64 " reads (%" PRIu64
                  " rows), %" PRIu64 " writes\n",
                  sequences, committed, dropped, r->reads, r->rows, r->writes);
    kvq_txn_destroy(r->txn);
    kvq_db_close(r->db);
    cf_model_free(&r->committed);
    cf_model_free(&r->view);
    free(r->idx);
    free(r);
}

/* The model itself, on FoundationDB's documented results, so that a wrong model cannot make
 * the random test agree with a wrong engine. */
static void test_model_self_check(void **state)
{
    (void)state;
    uint8_t out[16];
    size_t n;
    static const uint8_t ff[] = { 0xff }, one2[] = { 1, 0 }, v9[] = { 9 }, p11[] = { 1, 1 };
    cf_atomic_apply(1, ff, 1, KVQ_MUT_ADD, one2, 2, out, &n);
    assert_int_equal(n, 2);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 1);
    cf_atomic_apply(0, NULL, 0, KVQ_MUT_MIN, one2, 2, out, &n);
    assert_int_equal(n, 2);
    assert_int_equal(out[0], 1);
    cf_atomic_apply(1, v9, 1, KVQ_MUT_MAX, p11, 2, out, &n);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 1);
    cf_atomic_apply(1, v9, 1, KVQ_MUT_MAX, one2, 2, out, &n);
    assert_int_equal(out[0], 9);
    assert_int_equal(out[1], 0);
    cf_atomic_apply(1, (const uint8_t *)"ab", 2, KVQ_MUT_BYTE_MIN, (const uint8_t *)"abc", 3, out,
                    &n);
    assert_int_equal(n, 2);
    /* APPEND_IF_FITS: a missing key is empty. COMPARE_AND_CLEAR: absent when equal or missing. */
    assert_int_equal(cf_atomic_apply(1, (const uint8_t *)"ab", 2, KVQ_MUT_APPEND_IF_FITS,
                                     (const uint8_t *)"c", 1, out, &n),
                     1);
    assert_int_equal(n, 3);
    assert_memory_equal(out, "abc", 3);
    assert_int_equal(
        cf_atomic_apply(0, NULL, 0, KVQ_MUT_APPEND_IF_FITS, (const uint8_t *)"c", 1, out, &n), 1);
    assert_int_equal(n, 1);
    assert_int_equal(cf_atomic_apply(1, (const uint8_t *)"ab", 2, KVQ_MUT_COMPARE_AND_CLEAR,
                                     (const uint8_t *)"ab", 2, out, &n),
                     0);
    assert_int_equal(cf_atomic_apply(1, (const uint8_t *)"ab", 2, KVQ_MUT_COMPARE_AND_CLEAR,
                                     (const uint8_t *)"a", 1, out, &n),
                     1);
    assert_int_equal(n, 2);
    assert_int_equal(
        cf_atomic_apply(0, NULL, 0, KVQ_MUT_COMPARE_AND_CLEAR, (const uint8_t *)"", 0, out, &n), 0);
    cf_model m = { NULL, 0, 0 };
    assert_int_equal(cf_model_set(&m, (const uint8_t *)"b", 1, (const uint8_t *)"1", 1), 0);
    assert_int_equal(cf_model_set(&m, (const uint8_t *)"a", 1, (const uint8_t *)"2", 1), 0);
    assert_int_equal(cf_model_set(&m, (const uint8_t *)"c", 1, (const uint8_t *)"3", 1), 0);
    size_t idx[4];
    int more;
    assert_int_equal(
        cf_model_range(&m, (const uint8_t *)"a", 1, (const uint8_t *)"d", 1, 2, 1, idx, &more), 2);
    assert_int_equal(more, 1);
    assert_int_equal(m.e[idx[0]].k[0], 'c');
    cf_model_clear_range(&m, (const uint8_t *)"a\x00", 2, (const uint8_t *)"c", 1);
    assert_int_equal(m.n, 2);
    cf_model_free(&m);
}

int main(int argc, char **argv)
{
    cf_init(argc, argv, NULL, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_self_check),
        cmocka_unit_test(test_ryw_against_model),
    };
    return CF_RUN("ryw_model", tests);
}
