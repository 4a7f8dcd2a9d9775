/* Read-your-writes against an in-memory model: thousands of random operation sequences, each in
 * one transaction over randomly pre-seeded data (sets, clears, clear_ranges, atomic ADD, MAX,
 * BYTE_MIN, APPEND_IF_FITS and COMPARE_AND_CLEAR, gets, ranges with limits in both directions,
 * snapshot or not). Every read is checked
 * against the model; after commit the whole key range is compared with it. */
#include "conformance.h"

#define NKEYS 12
#define VMAX  64 /* room for 12 appends of 4 bytes to a 4-byte value */

/* The model: keys "t/m/" + one letter 'a'..; values up to VMAX bytes. */
typedef struct model {
    int present[NKEYS];
    uint8_t val[NKEYS][VMAX];
    size_t len[NKEYS];
} model;

static void mkkey(char *out, int i)
{
    sprintf(out, "t/m/%c", 'a' + i);
}

static void le_fit(uint8_t *r, const uint8_t *old, size_t oldn, size_t n)
{
    memset(r, 0, n);
    memcpy(r, old, oldn < n ? oldn : n);
}

static void model_atomic(model *m, int k, int op, const uint8_t *p, size_t n)
{
    uint8_t r[VMAX];
    if (op == KVQ_MUT_APPEND_IF_FITS) {
        /* A missing key is empty (values here stay far below the 100,000-byte limit). */
        size_t old = m->present[k] ? m->len[k] : 0;
        if (old + n > VMAX)
            fail_msg("the model cannot hold %zu bytes", old + n);
        memcpy(m->val[k] + old, p, n);
        m->len[k] = old + n;
        m->present[k] = 1;
        return;
    }
    if (op == KVQ_MUT_COMPARE_AND_CLEAR) {
        if (m->present[k] && m->len[k] == n && memcmp(m->val[k], p, n) == 0)
            m->present[k] = 0;
        return;
    }
    if (op == KVQ_MUT_ADD) {
        le_fit(r, m->val[k], m->present[k] ? m->len[k] : 0, n);
        unsigned carry = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned s = (unsigned)r[i] + p[i] + carry;
            r[i] = (uint8_t)s;
            carry = s >> 8;
        }
    } else if (op == KVQ_MUT_MAX) {
        if (!m->present[k]) {
            memcpy(r, p, n);
        } else {
            le_fit(r, m->val[k], m->len[k], n);
            int bigger = 0;
            for (size_t i = n; i-- > 0;)
                if (r[i] != p[i]) {
                    bigger = p[i] > r[i];
                    break;
                }
            if (bigger)
                memcpy(r, p, n);
        }
    } else { /* BYTE_MIN */
        if (m->present[k]) {
            size_t mn = m->len[k] < n ? m->len[k] : n;
            int c = memcmp(m->val[k], p, mn);
            if (c < 0 || (c == 0 && m->len[k] <= n)) {
                return; /* the stored value is smaller: unchanged */
            }
        }
        memcpy(r, p, n);
    }
    memcpy(m->val[k], r, n);
    m->len[k] = n;
    m->present[k] = 1;
}

static kvq_db *db;

static int clear_all(kvq_txn *t, void *arg)
{
    (void)arg;
    return kvq_txn_clear_range(t, K("t/m/"), K("t/m0"));
}

typedef struct seed_ctx {
    model *m;
} seed_ctx;

static int seed_data(kvq_txn *t, void *arg)
{
    model *m = ((seed_ctx *)arg)->m;
    int rc = kvq_txn_clear_range(t, K("t/m/"), K("t/m0"));
    for (int i = 0; rc == 0 && i < NKEYS; i++) {
        char k[16];
        mkkey(k, i);
        if (m->present[i])
            rc = kvq_txn_set(t, K(k), m->val[i], m->len[i]);
    }
    return rc;
}

static void check_range(kvq_txn *t,
                        const model *m,
                        int lo,
                        int hi,
                        int limit,
                        int reverse,
                        int snapshot,
                        int round,
                        int op)
{
    char b[16], e[16];
    mkkey(b, lo);
    mkkey(e, hi);
    const kvq_kv *kvs;
    size_t n;
    bool more;
    assert_ok(kvq_txn_get_range(&kvs, &n, &more, t, K(b), K(e), limit,
                                (reverse ? KVQ_REVERSE : 0) | (snapshot ? KVQ_SNAPSHOT : 0)));
    size_t j = 0;
    for (int s = 0; s < hi - lo; s++) {
        int i = reverse ? hi - 1 - s : lo + s;
        if (!m->present[i])
            continue;
        if (limit > 0 && j == (size_t)limit) {
            if (!more)
                fail_msg("round %d op %d: more not set with items left", round, op);
            return;
        }
        char k[16];
        mkkey(k, i);
        if (j >= n)
            fail_msg("round %d op %d: range [%s,%s) lim %d rev %d is missing %s", round, op, b, e,
                     limit, reverse, k);
        if (kvs[j].key.len != strlen(k) || memcmp(kvs[j].key.data, k, strlen(k)) != 0 ||
            kvs[j].value.len != m->len[i] || memcmp(kvs[j].value.data, m->val[i], m->len[i]))
            fail_msg("round %d op %d: range item %zu differs from the model (%s)", round, op, j, k);
        j++;
    }
    if (j != n)
        fail_msg("round %d op %d: range returned %zu items, the model has %zu", round, op, n, j);
}

static void test_ryw_model(void **state)
{
    (void)state;
    db = cf_open(NULL);
    srand((unsigned)cf_seed("test_contract_model"));
    int rounds = getenv("KVQ_SOAK") ? 20000 : 1500;
    for (int round = 0; round < rounds; round++) {
        model m;
        memset(&m, 0, sizeof(m));
        for (int i = 0; i < NKEYS; i++) {
            if (rand() % 2) {
                m.present[i] = 1;
                m.len[i] = (size_t)(1 + rand() % 4);
                for (size_t j = 0; j < m.len[i]; j++)
                    m.val[i][j] = (uint8_t)(rand() % 4);
            }
        }
        seed_ctx sc = { &m };
        assert_ok(kvq_db_transact(db, seed_data, &sc));
        kvq_txn *t;
        assert_ok(kvq_txn_create(&t, db));
        int nops = 1 + rand() % 12;
        for (int op = 0; op < nops; op++) {
            int kind = rand() % 8;
            int k = rand() % NKEYS;
            char key[16];
            mkkey(key, k);
            if (kind == 0) {
                uint8_t v[VMAX];
                size_t n = (size_t)(rand() % 5);
                for (size_t j = 0; j < n; j++)
                    v[j] = (uint8_t)(rand() % 4);
                assert_ok(kvq_txn_set(t, K(key), v, n));
                memcpy(m.val[k], v, n);
                m.len[k] = n;
                m.present[k] = 1;
            } else if (kind == 1) {
                assert_ok(kvq_txn_clear(t, K(key)));
                m.present[k] = 0;
            } else if (kind == 2) {
                int lo = rand() % NKEYS, hi = lo + rand() % (NKEYS - lo + 1);
                char b[16], e[16];
                mkkey(b, lo);
                mkkey(e, hi);
                assert_ok(kvq_txn_clear_range(t, K(b), K(e)));
                for (int i = lo; i < hi; i++)
                    m.present[i] = 0;
            } else if (kind == 3) {
                static const int ops[] = { KVQ_MUT_ADD, KVQ_MUT_MAX, KVQ_MUT_BYTE_MIN,
                                           KVQ_MUT_APPEND_IF_FITS, KVQ_MUT_COMPARE_AND_CLEAR };
                int o = ops[rand() % 5];
                uint8_t p[VMAX];
                size_t n = (size_t)(1 + rand() % 4);
                for (size_t j = 0; j < n; j++)
                    p[j] = (uint8_t)(rand() % 256);
                if (o == KVQ_MUT_COMPARE_AND_CLEAR && m.present[k] && rand() % 3 != 0) {
                    /* The current value: the key is cleared. */
                    n = m.len[k];
                    memcpy(p, m.val[k], n);
                }
                assert_ok(kvq_txn_atomic_op(t, K(key), p, n, (kvq_mutation)o));
                model_atomic(&m, k, o, p, n);
            } else if (kind <= 5) {
                kvq_bytes v;
                int present;
                assert_ok(kvq_txn_get(&v, &present, t, K(key), rand() % 2 ? KVQ_SNAPSHOT : 0));
                if (present != m.present[k] ||
                    (present && (v.len != m.len[k] || memcmp(v.data, m.val[k], v.len) != 0)))
                    fail_msg("round %d op %d: get %s differs from the model", round, op, key);
            } else {
                int lo = rand() % NKEYS, hi = lo + rand() % (NKEYS - lo + 1);
                check_range(t, &m, lo, hi, rand() % 4, rand() % 2, rand() % 2, round, op);
            }
        }
        int rc = kvq_txn_commit(t);
        if (rc != 0)
            fail_msg("round %d: commit %s", round, kvq_errname(rc));
        kvq_txn_destroy(t);
        assert_ok(kvq_txn_create(&t, db));
        check_range(t, &m, 0, NKEYS, 0, 0, 0, round, -1);
        kvq_txn_destroy(t);
    }
    assert_ok(kvq_db_transact(db, clear_all, NULL));
    kvq_db_close(db);
}

int main(int argc, char **argv)
{
    kt_seed_setup(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ryw_model),
    };
    return cmocka_run_group_tests(tests, cf_group_setup, cf_group_teardown);
}
