/* Unit tests of the embedded engine's in-memory structures: key ranges, the read-your-writes
 * overlay, and the arithmetic of atomic operations. */
#include "kvq_test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/embedded/emb.h"
#include "util/bytes.h"

#define S(x) (const uint8_t *)(x), strlen(x)

static void test_ranges_normalize(void **state)
{
    (void)state;
    emb_ranges r = { 0 };
    assert_int_equal(emb_ranges_add(&r, S("m"), S("p")), 0);
    assert_int_equal(emb_ranges_add(&r, S("a"), S("c")), 0);
    assert_int_equal(emb_ranges_add(&r, S("b"), S("d")), 0); /* overlaps a..c */
    assert_int_equal(emb_ranges_add(&r, S("d"), S("e")), 0); /* touches a..d */
    assert_int_equal(emb_ranges_add(&r, S("x"), S("z")), 0);
    emb_ranges_normalize(&r);
    assert_int_equal(r.n, 3);
    assert_memory_equal(r.v[0].b.p, "a", 1);
    assert_memory_equal(r.v[0].e.p, "e", 1);
    assert_memory_equal(r.v[1].b.p, "m", 1);
    assert_memory_equal(r.v[2].e.p, "z", 1);
    assert_true(emb_ranges_contains(&r, S("a")));
    assert_true(emb_ranges_contains(&r, S("dz")));
    assert_false(emb_ranges_contains(&r, S("e")));
    assert_false(emb_ranges_contains(&r, S("")));
    assert_true(emb_ranges_intersects(&r, S("0"), S("b")));
    assert_false(emb_ranges_intersects(&r, S("e"), S("m")));
    assert_true(emb_ranges_intersects(&r, S("e"), S("m\x01")));
    assert_true(emb_ranges_intersects(&r, S("n"), S("o")));  /* inside m..p */
    assert_false(emb_ranges_intersects(&r, S("q"), S("q"))); /* empty */
    emb_ranges_free(&r);
}

/* Random ranges against a brute-force model over a small key space. */
/* emb_ranges_insert keeps ranges normalized: after every insertion of a random range (short keys
 * over a small alphabet, so that ranges overlap, touch and nest), the ranges equal those of
 * adding everything and normalizing once. */
static void test_ranges_insert_random(void **state)
{
    (void)state;
    srand(12345);
    for (int round = 0; round < 200; round++) {
        emb_ranges inc = { 0 }, all = { 0 };
        int n = 1 + rand() % 40;
        for (int i = 0; i < n; i++) {
            char b[4] = { 0 }, e[4] = { 0 };
            size_t bn = 1 + (size_t)(rand() % 3), en = 1 + (size_t)(rand() % 3);
            for (size_t j = 0; j < bn; j++)
                b[j] = (char)('a' + rand() % 4);
            for (size_t j = 0; j < en; j++)
                e[j] = (char)('a' + rand() % 4);
            if (rand() % 3 == 0) { /* a point: [b, b + 0x00) */
                memcpy(e, b, bn);
                e[bn] = 0;
                en = bn + 1;
            }
            assert_int_equal(
                emb_ranges_insert(&inc, (const uint8_t *)b, bn, (const uint8_t *)e, en), 0);
            assert_int_equal(emb_ranges_add(&all, (const uint8_t *)b, bn, (const uint8_t *)e, en),
                             0);
            emb_ranges copy = { 0 };
            for (size_t k = 0; k < all.n; k++)
                assert_int_equal(
                    emb_ranges_add(&copy, all.v[k].b.p, all.v[k].b.n, all.v[k].e.p, all.v[k].e.n),
                    0);
            emb_ranges_normalize(&copy);
            assert_int_equal(inc.n, copy.n);
            for (size_t k = 0; k < inc.n; k++) {
                assert_int_equal(inc.v[k].b.n, copy.v[k].b.n);
                assert_memory_equal(inc.v[k].b.p, copy.v[k].b.p, copy.v[k].b.n);
                assert_int_equal(inc.v[k].e.n, copy.v[k].e.n);
                assert_memory_equal(inc.v[k].e.p, copy.v[k].e.p, copy.v[k].e.n);
            }
            emb_ranges_free(&copy);
        }
        emb_ranges_free(&inc);
        emb_ranges_free(&all);
    }
}

static void test_ranges_random(void **state)
{
    (void)state;
    srand((unsigned)kt_seed_print("test_ranges_random"));
    for (int round = 0; round < 500; round++) {
        emb_ranges r = { 0 };
        int in[26] = { 0 };
        int n = rand() % 6;
        for (int i = 0; i < n; i++) {
            int a = rand() % 26, b = rand() % 27;
            if (a > b) {
                int t = a;
                a = b;
                b = t;
            }
            uint8_t ka = (uint8_t)('a' + a), kb = (uint8_t)('a' + b);
            assert_int_equal(emb_ranges_add(&r, &ka, 1, &kb, 1), 0);
            for (int k = a; k < b; k++)
                in[k] = 1;
        }
        emb_ranges_normalize(&r);
        for (int k = 0; k < 26; k++) {
            uint8_t kk = (uint8_t)('a' + k);
            assert_int_equal(emb_ranges_contains(&r, &kk, 1), in[k]);
        }
        for (int a = 0; a < 26; a++) {
            for (int b = a; b <= 26; b++) {
                int expect = 0;
                for (int k = a; k < b; k++)
                    expect |= in[k];
                uint8_t ka = (uint8_t)('a' + a), kb = (uint8_t)('a' + b);
                assert_int_equal(emb_ranges_intersects(&r, &ka, 1, &kb, 1), expect);
            }
        }
        emb_ranges_free(&r);
    }
}

static void test_atomic_ops(void **state)
{
    (void)state;
    kvq_buf out = KVQ_BUF_INIT;
    int pres = 0;
    uint8_t a[8], b[8];
    /* ADD: little-endian, carries, truncation to the operand's width. */
    kvq__le_put(a, 0xff, 2);
    kvq__le_put(b, 1, 2);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_ADD, a, 2, 1, b, 2), 0);
    assert_int_equal(out.len, 2);
    assert_int_equal(out.data[0], 0x00);
    assert_int_equal(out.data[1], 0x01);
    /* The stored value is longer than the operand: truncated. */
    kvq__le_put(a, 0x010203040506ULL, 6);
    kvq__le_put(b, 1, 2);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_ADD, a, 6, 1, b, 2), 0);
    assert_int_equal(out.len, 2);
    assert_int_equal(out.data[0], 0x07);
    assert_int_equal(out.data[1], 0x05);
    /* Shorter: zero-extended. Missing: zero. Wraps at the operand's width. */
    kvq__le_put(a, 5, 1);
    kvq__le_put(b, 0xffffffffffffffffULL, 8);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_ADD, a, 1, 1, b, 8), 0);
    uint64_t v = 0;
    memcpy(&v, out.data, 8);
    assert_int_equal(v, 4);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_ADD, NULL, 0, 0, b, 8), 0);
    memcpy(&v, out.data, 8);
    assert_int_equal(v, 0xffffffffffffffffULL);
    /* MAX and MIN compare unsigned little-endian integers; a missing key takes the operand. */
    kvq__le_put(a, 0x0100, 2);
    kvq__le_put(b, 0x00ff, 2);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_MAX, a, 2, 1, b, 2), 0);
    assert_memory_equal(out.data, a, 2);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_MIN, a, 2, 1, b, 2), 0);
    assert_memory_equal(out.data, b, 2);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_MIN, NULL, 0, 0, a, 2), 0);
    assert_memory_equal(out.data, a, 2);
    /* Bitwise. AND on a missing key takes the operand; OR and XOR see zeros. */
    kvq__le_put(a, 0x0f0f, 2);
    kvq__le_put(b, 0x00ff, 2);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_BIT_AND, a, 2, 1, b, 2), 0);
    assert_int_equal(out.data[0], 0x0f);
    assert_int_equal(out.data[1], 0x00);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_BIT_OR, a, 2, 1, b, 2), 0);
    assert_int_equal(out.data[0], 0xff);
    assert_int_equal(out.data[1], 0x0f);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_BIT_XOR, a, 2, 1, b, 2), 0);
    assert_int_equal(out.data[0], 0xf0);
    assert_int_equal(out.data[1], 0x0f);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_BIT_AND, NULL, 0, 0, b, 2), 0);
    assert_memory_equal(out.data, b, 2);
    /* BYTE_MIN / BYTE_MAX: lexicographic, lengths kept. */
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_BYTE_MIN, S("abc"), 1, S("ab")), 0);
    assert_int_equal(out.len, 2);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_BYTE_MAX, S("abc"), 1, S("ab")), 0);
    assert_int_equal(out.len, 3);
    assert_int_equal(emb_apply_atomic(&out, &pres, 99, S("abc"), 1, S("ab")),
                     KVQ_EINVALID_MUTATION_TYPE);
    /* APPEND_IF_FITS: appended (a missing key is empty) while the result fits in a value. */
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_APPEND_IF_FITS, S("ab"), 1, S("cd")), 0);
    assert_true(pres);
    assert_int_equal(out.len, 4);
    assert_memory_equal(out.data, "abcd", 4);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_APPEND_IF_FITS, NULL, 0, 0, S("cd")), 0);
    assert_true(pres);
    assert_int_equal(out.len, 2);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_APPEND_IF_FITS, NULL, 0, 0, NULL, 0), 0);
    assert_true(pres);
    assert_int_equal(out.len, 0);
    uint8_t *big = calloc(KVQ_MAX_VALUE_SIZE, 1);
    assert_non_null(big);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_APPEND_IF_FITS, big,
                                      KVQ_MAX_VALUE_SIZE - 2, 1, S("cd")),
                     0);
    assert_int_equal(out.len, KVQ_MAX_VALUE_SIZE);
    assert_memory_equal(out.data + KVQ_MAX_VALUE_SIZE - 2, "cd", 2);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_APPEND_IF_FITS, big,
                                      KVQ_MAX_VALUE_SIZE - 1, 1, S("cd")),
                     0);
    assert_true(pres);
    assert_int_equal(out.len, KVQ_MAX_VALUE_SIZE - 1);
    assert_int_equal(out.data[KVQ_MAX_VALUE_SIZE - 2], 0);
    free(big);
    /* COMPARE_AND_CLEAR: absent when equal (or missing), else unchanged. */
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_COMPARE_AND_CLEAR, S("ab"), 1, S("ab")),
                     0);
    assert_false(pres);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_COMPARE_AND_CLEAR, S("ab"), 1, S("abc")),
                     0);
    assert_true(pres);
    assert_int_equal(out.len, 2);
    assert_memory_equal(out.data, "ab", 2);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_COMPARE_AND_CLEAR, NULL, 0, 0, NULL, 0),
                     0);
    assert_false(pres);
    assert_int_equal(emb_apply_atomic(&out, &pres, KVQ_MUT_COMPARE_AND_CLEAR, S(""), 1, NULL, 0),
                     0);
    assert_false(pres);
    kvq_buf_dispose(&out);
}

static void test_overlay(void **state)
{
    (void)state;
    /* The overlay lives in an arena (its transaction's) and keeps the bytes it is given. */
    emb_arena arena = { 0 };
    emb_overlay ov = { 0 };
    ov.arena = &arena;
    ov.cleared.arena = &arena;
    assert_int_equal(emb_overlay_set(&ov, S("b"), S("1")), 0);
    assert_int_equal(emb_overlay_set(&ov, S("a"), S("0")), 0);
    assert_int_equal(emb_overlay_set(&ov, S("d"), S("3")), 0);
    assert_int_equal(ov.n, 3);
    assert_memory_equal(ov.v[0]->key.p, "a", 1);
    /* A clear removes entries and records the range. */
    assert_int_equal(emb_overlay_clear_range(&ov, S("b"), S("d")), 0);
    assert_int_equal(ov.n, 2);
    assert_true(emb_overlay_cleared(&ov, S("c")));
    assert_false(emb_overlay_cleared(&ov, S("d")));
    /* An atomic op on a cleared key resolves at once against a missing value. */
    uint8_t one = 1;
    assert_int_equal(emb_overlay_atomic(&ov, S("c"), &one, 1, KVQ_MUT_ADD), 0);
    ov_entry *x = emb_overlay_find(&ov, S("c"), NULL);
    assert_non_null(x);
    assert_int_equal(x->kind, OV_SET);
    assert_int_equal(x->value.n, 1);
    assert_int_equal(x->value.p[0], 1);
    /* On a set key it folds into the value; on an unknown key it stays pending. */
    assert_int_equal(emb_overlay_atomic(&ov, S("c"), &one, 1, KVQ_MUT_ADD), 0);
    assert_int_equal(x->value.p[0], 2);
    assert_int_equal(emb_overlay_atomic(&ov, S("z"), &one, 1, KVQ_MUT_ADD), 0);
    x = emb_overlay_find(&ov, S("z"), NULL);
    assert_non_null(x);
    assert_int_equal(x->kind, OV_ATOMIC);
    assert_int_equal(x->n_ops, 1);
    assert_int_equal(emb_overlay_unreadable(&ov, S("y")), 0);
    assert_int_equal(emb_overlay_find(&ov, S("y"), NULL)->kind, OV_UNREADABLE);
    emb_overlay_free(&ov);
    emb_arena_free(&arena);
}

/* Ranges with an arena: strings come from it (lent ones are kept as given), and normalizing,
 * inserting and subtracting behave as with owned strings. */
static void test_ranges_arena(void **state)
{
    (void)state;
    emb_arena arena = { 0 };
    emb_ranges r = { 0 };
    r.arena = &arena;
    static const uint8_t lent[] = { 'k', 0 };
    assert_int_equal(emb_ranges_add_lent(&r, lent, 1, lent, 2), 0);
    assert_ptr_equal(r.v[0].b.p, lent);
    assert_int_equal(emb_ranges_add(&r, S("a"), S("c")), 0);
    assert_int_equal(emb_ranges_add(&r, S("b"), S("d")), 0);
    emb_ranges_normalize(&r);
    assert_int_equal(r.n, 2);
    assert_true(emb_ranges_contains(&r, S("k")));
    assert_false(emb_ranges_contains(&r, lent, 2)); /* k 0x00: the end */
    assert_int_equal(emb_ranges_insert(&r, S("c"), S("l")), 0);
    assert_int_equal(r.n, 1);
    assert_int_equal(emb_ranges_subtract(&r, S("e"), S("f")), 0);
    emb_ranges_normalize(&r);
    assert_int_equal(r.n, 2);
    assert_true(emb_ranges_contains(&r, S("d")));
    assert_false(emb_ranges_contains(&r, S("e")));
    assert_true(emb_ranges_contains(&r, S("f")));
    emb_ranges_free(&r);
    assert_ptr_equal(r.arena, &arena);
    emb_arena_free(&arena);
}

int main(int argc, char **argv)
{
    kt_seed_setup(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranges_normalize),
        cmocka_unit_test(test_ranges_random),
        cmocka_unit_test(test_ranges_insert_random),
        cmocka_unit_test(test_atomic_ops),
        cmocka_unit_test(test_overlay),
        cmocka_unit_test(test_ranges_arena),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
