/* The tuple layer: byte vectors derived by hand from FoundationDB's tuple specification
 * (design/tuple.md), erlfdb's durable-queue keys, random round trips and order preservation,
 * malformed input, ranges, strinc, subspaces and bad arguments.
 *
 * The random tests print their seed; KVQ_TEST_SEED=<seed> (or --seed <seed>) replays a run, and
 * KVQ_SOAK=1 runs ten times as many rounds. */
#include "kvq_test.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvq/kvq.h"
#include "util/util.h" /* kvq__error_clear */

/* ---- helpers ------------------------------------------------------------------------------- */

typedef struct hexbuf {
    uint8_t b[1024];
    size_t n;
} hexbuf;

/* Parses "01 71 00" (spaces optional between bytes). */
static hexbuf hex(const char *s)
{
    hexbuf h;
    h.n = 0;
    while (*s) {
        if (*s == ' ') {
            s++;
            continue;
        }
        unsigned v;
        if (sscanf(s, "%2x", &v) != 1 || h.n >= sizeof(h.b))
            fail_msg("bad hex in test: %s", s);
        h.b[h.n++] = (uint8_t)v;
        s += 2;
    }
    return h;
}

static void print_hex(char *out, size_t cap, const uint8_t *p, size_t n)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && o + 4 < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%02x ", p[i]);
}

/* Unpacks from an exact-size heap copy, so that AddressSanitizer sees any read past the end. */
static int unpack_exact(kvq_tuple **t, const uint8_t *p, size_t n)
{
    uint8_t *copy = malloc(n > 0 ? n : 1);
    assert_non_null(copy);
    if (n > 0)
        memcpy(copy, p, n);
    int rc = kvq_tuple_unpack(t, n > 0 ? copy : NULL, n);
    free(copy);
    return rc;
}

static const kvq_tuple_elem *elems_of(const kvq_tuple *t)
{
    return kvq_tuple_get_elem(t, 0);
}

/* Packs elems both ways (caller buffer, kvq_buf), checks the bytes against the hex string, then
 * unpacks them back to an equal tuple that re-packs to the same bytes. */
static void expect_hex(const kvq_tuple_elem *elems, size_t n, const char *want_hex)
{
    hexbuf want = hex(want_hex);
    size_t need = 99;
    int rc = kvq_tuple_pack(NULL, 0, &need, elems, n);
    assert_true(rc == KVQ_ENOBUFS || (rc == 0 && need == 0));
    assert_int_equal(need, want.n);
    uint8_t *got = malloc(need > 0 ? need : 1);
    size_t gn = 0;
    assert_int_equal(kvq_tuple_pack(got, need, &gn, elems, n), 0);
    assert_bytes(got, gn, want.b, want.n);
    kvq_buf b = KVQ_BUF_INIT;
    assert_int_equal(kvq_tuple_pack_buf(&b, elems, n), 0);
    assert_bytes(b.data, b.len, want.b, want.n);
    kvq_buf_dispose(&b);

    kvq_tuple *t;
    assert_int_equal(unpack_exact(&t, got, gn), 0);
    assert_int_equal(kvq_tuple_get_count(t), n);
    assert_int_equal(kvq_tuple_compare(elems_of(t), n, elems, n), 0);
    assert_int_equal(kvq_tuple_pack_buf(&b, elems_of(t), kvq_tuple_get_count(t)), 0);
    assert_bytes(b.data, b.len, want.b, want.n);
    kvq_buf_dispose(&b);
    kvq_tuple_destroy(t);
    free(got);
}

#define ONE(e, h)                     \
    do {                              \
        kvq_tuple_elem x_[1] = { e }; \
        expect_hex(x_, 1, h);         \
    } while (0)

/* Unpacks hex that must decode to one element. The caller frees *t. */
static const kvq_tuple_elem *decode_one(kvq_tuple **t, const char *h)
{
    hexbuf in = hex(h);
    int rc = unpack_exact(t, in.b, in.n);
    if (rc != 0)
        fail_msg("decoding %s: %s (%s)", h, kvq_errname(rc), kvq_last_error());
    assert_int_equal(kvq_tuple_get_count(*t), 1);
    return kvq_tuple_get_elem(*t, 0);
}

/* Unpacking must fail with code, and the detail must contain each non-NULL needle. */
static void expect_bad_bytes(const uint8_t *p, size_t n, int code, const char *n1, const char *n2)
{
    kvq_tuple *t = (kvq_tuple *)&t; /* not NULL: unpack must set it to NULL */
    int rc = unpack_exact(&t, p, n);
    if (rc != code) {
        char h[400];
        print_hex(h, sizeof(h), p, n);
        fail_msg("unpacking %s: got %s (%s), expected %s", h, kvq_errname(rc), kvq_last_error(),
                 kvq_errname(code));
    }
    assert_null(t);
    assert_int_equal(kvq_last_error_code(), code);
    if (n1 != NULL && strstr(kvq_last_error(), n1) == NULL)
        fail_msg("detail '%s' lacks '%s'", kvq_last_error(), n1);
    if (n2 != NULL && strstr(kvq_last_error(), n2) == NULL)
        fail_msg("detail '%s' lacks '%s'", kvq_last_error(), n2);
}

static void expect_bad(const char *h, int code, const char *n1, const char *n2)
{
    hexbuf in = hex(h);
    expect_bad_bytes(in.b, in.n, code, n1, n2);
}

static float f_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static double d_bits(uint64_t bits)
{
    double d;
    memcpy(&d, &bits, 8);
    return d;
}

/* ---- hand-derived vectors ------------------------------------------------------------------ */

static void test_spec_examples(void **state)
{
    (void)state;
    /* The test cases of design/tuple.md. */
    ONE(kvq_tuple_bytes("foo\0bar", 7), "01 66 6f 6f 00 ff 62 61 72 00");
    ONE(kvq_tuple_strn("F\xc3\x94O\0bar", 8), "02 46 c3 94 4f 00 ff 62 61 72 00");
    /* ((b"foo\x00bar", None, ()),): nested, its null as 00 ff, an empty nested 05 00, end 00. */
    kvq_tuple_elem inner[3] = { kvq_tuple_bytes("foo\0bar", 7), kvq_tuple_null(),
                                kvq_tuple_nested(NULL, 0) };
    ONE(kvq_tuple_nested(inner, 3), "05 01 66 6f 6f 00 ff 62 61 72 00 00 ff 05 00 00");
    /* -5551212: magnitude 0x54b46c (3 bytes) -> code 0x14-3 = 0x11; 0xffffff-0x54b46c = ab4b93 */
    ONE(kvq_tuple_int(-5551212), "11 ab 4b 93");
    /* -42f = 0xc2280000: sign set, so every bit flips: 3d d7 ff ff */
    ONE(kvq_tuple_float(-42.0f), "20 3d d7 ff ff");
}

static void test_null_and_nested(void **state)
{
    (void)state;
    ONE(kvq_tuple_null(), "00"); /* top level: the code alone */
    kvq_tuple_elem two_nulls[2] = { kvq_tuple_null(), kvq_tuple_null() };
    expect_hex(two_nulls, 2, "00 00");
    kvq_tuple_elem n1[1] = { kvq_tuple_null() };
    ONE(kvq_tuple_nested(n1, 1), "05 00 ff 00"); /* nested null is 00 ff, then the end 00 */
    ONE(kvq_tuple_nested(NULL, 0), "05 00");     /* the empty nested tuple */
    kvq_tuple_elem inner[2] = { kvq_tuple_null(), kvq_tuple_int(1) };
    ONE(kvq_tuple_nested(inner, 2), "05 00 ff 15 01 00");
    /* Two levels: the inner null is still 00 ff, each level ends with its own 00. */
    kvq_tuple_elem mid[1] = { kvq_tuple_nested(inner, 2) };
    ONE(kvq_tuple_nested(mid, 1), "05 05 00 ff 15 01 00 00");
    /* Bytes inside a nested tuple keep their own escaping; nothing else is escaped. */
    kvq_tuple_elem b[2] = { kvq_tuple_bytes("\0", 1), kvq_tuple_bytes("", 0) };
    ONE(kvq_tuple_nested(b, 2), "05 01 00 ff 00 01 00 00");
    /* Decoding: an empty nested tuple followed by a top-level null. */
    kvq_tuple *t;
    hexbuf in = hex("05 00 00");
    assert_int_equal(unpack_exact(&t, in.b, in.n), 0);
    assert_int_equal(kvq_tuple_get_count(t), 2);
    assert_int_equal(kvq_tuple_get_elem(t, 0)->type, KVQ_TUPLE_NESTED);
    assert_int_equal(kvq_tuple_get_elem(t, 0)->v.nested.count, 0);
    assert_int_equal(kvq_tuple_get_elem(t, 1)->type, KVQ_TUPLE_NULL);
    kvq_tuple_destroy(t);
}

static void test_bytes_and_strings(void **state)
{
    (void)state;
    ONE(kvq_tuple_bytes("", 0), "01 00");
    ONE(kvq_tuple_bytes(NULL, 0), "01 00");
    ONE(kvq_tuple_bytes("\0", 1), "01 00 ff 00");
    ONE(kvq_tuple_bytes("\0\0", 2), "01 00 ff 00 ff 00");
    ONE(kvq_tuple_bytes("a\0b", 3), "01 61 00 ff 62 00");
    ONE(kvq_tuple_bytes("\xff", 1), "01 ff 00"); /* 0xff needs no escape */
    ONE(kvq_tuple_strn("", 0), "02 00");
    ONE(kvq_tuple_str("Q"), "02 51 00");
    ONE(kvq_tuple_str(NULL), "02 00");
    ONE(kvq_tuple_strn("\0", 1), "02 00 ff 00");                 /* U+0000 */
    ONE(kvq_tuple_str("\xc3\xa9"), "02 c3 a9 00");               /* U+00E9, 2 bytes */
    ONE(kvq_tuple_str("\xe2\x82\xac"), "02 e2 82 ac 00");        /* U+20AC, 3 bytes */
    ONE(kvq_tuple_str("\xf0\x9f\x98\x80"), "02 f0 9f 98 80 00"); /* U+1F600, 4 bytes */
    ONE(kvq_tuple_str("\xf4\x8f\xbf\xbf"), "02 f4 8f bf bf 00"); /* U+10FFFF, the last */
    ONE(kvq_tuple_str("\xef\xbf\xbf"), "02 ef bf bf 00");        /* U+FFFF (a noncharacter) */
    /* Decoded data is NUL-terminated for convenience, beyond its length. */
    kvq_tuple *t;
    const kvq_tuple_elem *e = decode_one(&t, "02 61 62 00");
    assert_int_equal(e->type, KVQ_TUPLE_STRING);
    assert_int_equal(e->v.bytes.len, 2);
    assert_string_equal((const char *)e->v.bytes.data, "ab");
    kvq_tuple_destroy(t);
}

static void test_integers(void **state)
{
    (void)state;
    /* 0 is the code alone; a positive n-byte value is 0x14+n and n big-endian bytes. */
    ONE(kvq_tuple_int(0), "14");
    ONE(kvq_tuple_int(1), "15 01");
    ONE(kvq_tuple_int(255), "15 ff");
    ONE(kvq_tuple_int(256), "16 01 00");
    ONE(kvq_tuple_int(65535), "16 ff ff");
    ONE(kvq_tuple_int(65536), "17 01 00 00");
    ONE(kvq_tuple_int(4294967295LL), "18 ff ff ff ff");
    ONE(kvq_tuple_int(4294967296LL), "19 01 00 00 00 00"); /* 2^32: 5 bytes */
    ONE(kvq_tuple_int(INT64_MAX), "1c 7f ff ff ff ff ff ff ff");
    ONE(kvq_tuple_uint((uint64_t)INT64_MAX + 1), "1c 80 00 00 00 00 00 00 00");
    /* UINT64_MAX = 2^64-1 in the 8-byte form (Java, Go, erlfdb), not Python's 1d 08 ff.. */
    ONE(kvq_tuple_uint(UINT64_MAX), "1c ff ff ff ff ff ff ff ff");
    /* Negative: 0x14-n, then (2^(8n)-1) - |v| in n bytes, the one's complement. */
    ONE(kvq_tuple_int(-1), "13 fe");                                 /* ff - 01 */
    ONE(kvq_tuple_int(-255), "13 00");                               /* ff - ff */
    ONE(kvq_tuple_int(-256), "12 fe ff");                            /* ffff - 0100 */
    ONE(kvq_tuple_int(-65536), "11 fe ff ff");                       /* ffffff - 010000 */
    ONE(kvq_tuple_int(-4294967295LL), "10 00 00 00 00");             /* ffffffff - ffffffff */
    ONE(kvq_tuple_int(-4294967296LL), "0f fe ff ff ff ff");          /* ffffffffff - 0100000000 */
    ONE(kvq_tuple_int(INT64_MIN + 1), "0c 80 00 00 00 00 00 00 00"); /* 2^64-1 - (2^63-1) */
    ONE(kvq_tuple_int(INT64_MIN), "0c 7f ff ff ff ff ff ff ff");     /* 2^64-1 - 2^63 */
    /* A UINT that fits an int64 packs exactly as that int64 (and decodes as an INT). */
    ONE(kvq_tuple_uint(0), "14");
    ONE(kvq_tuple_uint(5), "15 05");
    ONE(kvq_tuple_uint(256), "16 01 00");
    ONE(kvq_tuple_uint((uint64_t)INT64_MAX), "1c 7f ff ff ff ff ff ff ff");
    kvq_tuple *t;
    assert_int_equal(decode_one(&t, "1c 7f ff ff ff ff ff ff ff")->type, KVQ_TUPLE_INT);
    kvq_tuple_destroy(t);
}

static void expect_uint(const char *h, uint64_t want)
{
    kvq_tuple *t;
    const kvq_tuple_elem *e = decode_one(&t, h);
    assert_int_equal(e->type, KVQ_TUPLE_UINT);
    assert_true(e->v.u == want);
    kvq_tuple_destroy(t);
}

static void expect_int(const char *h, int64_t want)
{
    kvq_tuple *t;
    const kvq_tuple_elem *e = decode_one(&t, h);
    assert_int_equal(e->type, KVQ_TUPLE_INT);
    if (e->v.i != want)
        fail_msg("%s decoded to %" PRId64 ", expected %" PRId64, h, e->v.i, want);
    kvq_tuple_destroy(t);
}

static void expect_neg_uint(const char *h, uint64_t magnitude)
{
    kvq_tuple *t;
    const kvq_tuple_elem *e = decode_one(&t, h);
    assert_int_equal(e->type, KVQ_TUPLE_NEG_UINT);
    assert_true(e->v.u == magnitude);
    kvq_tuple_destroy(t);
}

/* Integers below INT64_MIN, down to -(2^64-1), as other bindings write them: packed in the
 * 8-byte form, ordered with every other integer, and a magnitude that fits an int64 packs
 * exactly as that int64. */
static void test_integers_below_int64_min(void **state)
{
    (void)state;
    ONE(kvq_tuple_neg_uint(UINT64_MAX), "0c 00 00 00 00 00 00 00 00");
    ONE(kvq_tuple_neg_uint((uint64_t)INT64_MAX + 2), "0c 7f ff ff ff ff ff ff fe");
    kvq_buf a = KVQ_BUF_INIT, b = KVQ_BUF_INIT;
    static const uint64_t small[] = {
        0, 1, 255, 256, (uint64_t)INT64_MAX, (uint64_t)INT64_MAX + 1
    };
    for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++) {
        kvq_tuple_elem x = kvq_tuple_neg_uint(small[i]);
        kvq_tuple_elem y =
            kvq_tuple_int(small[i] == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)small[i]);
        assert_int_equal(kvq_tuple_pack_buf(&a, &x, 1), 0);
        assert_int_equal(kvq_tuple_pack_buf(&b, &y, 1), 0);
        assert_int_equal(a.len, b.len);
        assert_memory_equal(a.data, b.data, a.len);
        assert_int_equal(kvq_tuple_compare(&x, 1, &y, 1), 0);
    }
    /* Ascending order, as elements and as packed bytes. */
    const kvq_tuple_elem order[] = { kvq_tuple_neg_uint(UINT64_MAX),
                                     kvq_tuple_neg_uint(UINT64_MAX - 1),
                                     kvq_tuple_neg_uint((uint64_t)INT64_MAX + 2),
                                     kvq_tuple_int(INT64_MIN),
                                     kvq_tuple_int(INT64_MIN + 1),
                                     kvq_tuple_int(-1),
                                     kvq_tuple_neg_uint(0),
                                     kvq_tuple_int(1),
                                     kvq_tuple_uint(UINT64_MAX) };
    size_t n = sizeof(order) / sizeof(order[0]);
    for (size_t i = 0; i + 1 < n; i++) {
        assert_true(kvq_tuple_compare(&order[i], 1, &order[i + 1], 1) < 0);
        assert_true(kvq_tuple_compare(&order[i + 1], 1, &order[i], 1) > 0);
        assert_int_equal(kvq_tuple_pack_buf(&a, &order[i], 1), 0);
        assert_int_equal(kvq_tuple_pack_buf(&b, &order[i + 1], 1), 0);
        assert_true(kvq__bytes_cmp(a.data, a.len, b.data, b.len) < 0);
    }
    kvq_buf_dispose(&a);
    kvq_buf_dispose(&b);
}

static void test_integer_decoding_edges(void **state)
{
    (void)state;
    /* 2^64-1: the 8-byte form and Python's long form (0x1d, length 8). */
    expect_uint("1c ff ff ff ff ff ff ff ff", UINT64_MAX);
    expect_uint("1d 08 ff ff ff ff ff ff ff ff", UINT64_MAX);
    expect_uint("1c 80 00 00 00 00 00 00 00", (uint64_t)INT64_MAX + 1);
    /* Long forms of values that fit 8 bytes, and leading zeros past 8 bytes. */
    expect_int("1d 08 7f ff ff ff ff ff ff ff", INT64_MAX);
    expect_uint("1d 0a 00 00 ff ff ff ff ff ff ff ff", UINT64_MAX);
    expect_int("1d 00", 0);
    /* INT64_MIN in the long negative form: length 8 complemented is f7. */
    expect_int("0b f7 7f ff ff ff ff ff ff ff", INT64_MIN);
    expect_int("0b ff", 0);
    /* Non-minimal lengths are accepted (as FoundationDB's decoders accept them). */
    expect_int("16 00 05", 5);
    expect_int("12 ff fe", -1);
    expect_int("13 ff", 0);
    expect_int("1c 00 00 00 00 00 00 00 01", 1);
    expect_int("0c ff ff ff ff ff ff ff fe", -1);
    /* 2^64 needs 9 bytes: beyond 64 bits. */
    expect_bad("1d 09 01 00 00 00 00 00 00 00 00", KVQ_ERANGE, "beyond 64 bits", "byte 0");
    /* The longest form, 255 bytes (1 then 254 zeros), after a 0 at byte 0. */
    uint8_t longest[3 + 255] = { 0x14, 0x1d, 0xff, 0x01 };
    expect_bad_bytes(longest, sizeof(longest), KVQ_ERANGE, "255 significant bytes", "at byte 1");
    longest[3] = 0x00;
    longest[sizeof(longest) - 1] = 0x2a; /* 254 leading zeros then 42: fits */
    kvq_tuple *t;
    assert_int_equal(unpack_exact(&t, longest, sizeof(longest)), 0);
    assert_int_equal(kvq_tuple_get_elem(t, 1)->v.i, 42);
    kvq_tuple_destroy(t);
    /* -(2^64-1) in both forms (the 8-byte one of Java, Go and erlfdb, Python's long one), and
     * INT64_MIN - 1 = -(2^63+1): below INT64_MIN, they decode as magnitudes. */
    expect_neg_uint("0c 00 00 00 00 00 00 00 00", UINT64_MAX);
    expect_neg_uint("0b f7 00 00 00 00 00 00 00 00", UINT64_MAX);
    expect_neg_uint("0c 7f ff ff ff ff ff ff fe", (uint64_t)INT64_MAX + 2);
    expect_neg_uint("0b f6 ff 7f ff ff ff ff ff ff fe", (uint64_t)INT64_MAX + 2);
    /* -(2^64): 9 magnitude bytes 01 00.., complemented fe ff..; length 9 complemented f6. */
    expect_bad("0b f6 fe ff ff ff ff ff ff ff ff", KVQ_ERANGE, "beyond 64 bits", NULL);
}

static void test_floats_and_doubles(void **state)
{
    (void)state;
    /* float: big-endian binary32; a clear sign bit is set, a set one flips every bit. */
    ONE(kvq_tuple_float(0.0f), "20 80 00 00 00");                /* 00000000 */
    ONE(kvq_tuple_float(f_bits(0x80000000u)), "20 7f ff ff ff"); /* -0.0 */
    ONE(kvq_tuple_float(1.0f), "20 bf 80 00 00");                /* 3f800000 */
    ONE(kvq_tuple_float(-1.0f), "20 40 7f ff ff");               /* bf800000 */
    ONE(kvq_tuple_float(f_bits(0x7f800000u)), "20 ff 80 00 00"); /* +inf */
    ONE(kvq_tuple_float(f_bits(0xff800000u)), "20 00 7f ff ff"); /* -inf */
    ONE(kvq_tuple_float(f_bits(0x7fc00000u)), "20 ff c0 00 00"); /* quiet NaN */
    ONE(kvq_tuple_float(f_bits(0x7fc00001u)), "20 ff c0 00 01"); /* NaN with a payload */
    ONE(kvq_tuple_float(f_bits(0xffc00000u)), "20 00 3f ff ff"); /* negative NaN */
    ONE(kvq_tuple_float(f_bits(0x7f800001u)), "20 ff 80 00 01"); /* signalling NaN */
    /* double: the same on binary64. */
    ONE(kvq_tuple_double(0.0), "21 80 00 00 00 00 00 00 00");
    ONE(kvq_tuple_double(d_bits(0x8000000000000000u)), "21 7f ff ff ff ff ff ff ff");
    ONE(kvq_tuple_double(1.0), "21 bf f0 00 00 00 00 00 00");  /* 3ff0000000000000 */
    ONE(kvq_tuple_double(-1.0), "21 40 0f ff ff ff ff ff ff"); /* bff0000000000000 */
    ONE(kvq_tuple_double(d_bits(0x7ff0000000000000u)), "21 ff f0 00 00 00 00 00 00");
    ONE(kvq_tuple_double(d_bits(0xfff0000000000000u)), "21 00 0f ff ff ff ff ff ff");
    ONE(kvq_tuple_double(d_bits(0x7ff8000000000000u)), "21 ff f8 00 00 00 00 00 00");
    ONE(kvq_tuple_double(d_bits(0x7ff8000000000123u)), "21 ff f8 00 00 00 00 01 23");
    ONE(kvq_tuple_double(d_bits(0xfff8000000000000u)), "21 00 07 ff ff ff ff ff ff");
    ONE(kvq_tuple_double(d_bits(0x7ff0000000000001u)), "21 ff f0 00 00 00 00 00 01");
    ONE(kvq_tuple_double(d_bits(0x0000000000000001u)), "21 80 00 00 00 00 00 00 01");

    /* The bits come back exactly: -0.0 stays negative, NaN payloads stay. */
    static const uint64_t dbits[] = { 0x8000000000000000u, 0x7ff8000000000123u, 0xfff0000000000abcu,
                                      0x7ff0000000000001u };
    for (size_t i = 0; i < sizeof(dbits) / sizeof(dbits[0]); i++) {
        kvq_tuple_elem e = kvq_tuple_double(d_bits(dbits[i]));
        uint8_t buf[16];
        size_t n;
        assert_int_equal(kvq_tuple_pack(buf, sizeof(buf), &n, &e, 1), 0);
        kvq_tuple *t;
        assert_int_equal(unpack_exact(&t, buf, n), 0);
        uint64_t back;
        memcpy(&back, &kvq_tuple_get_elem(t, 0)->v.d, 8);
        assert_true(back == dbits[i]);
        kvq_tuple_destroy(t);
    }
    static const uint32_t fbits[] = { 0x80000000u, 0x7fc00001u, 0xff800123u, 0x7f800001u };
    for (size_t i = 0; i < sizeof(fbits) / sizeof(fbits[0]); i++) {
        kvq_tuple_elem e = kvq_tuple_float(f_bits(fbits[i]));
        uint8_t buf[8];
        size_t n;
        assert_int_equal(kvq_tuple_pack(buf, sizeof(buf), &n, &e, 1), 0);
        kvq_tuple *t;
        assert_int_equal(unpack_exact(&t, buf, n), 0);
        uint32_t back;
        memcpy(&back, &kvq_tuple_get_elem(t, 0)->v.f, 4);
        assert_true(back == fbits[i]);
        kvq_tuple_destroy(t);
    }
    /* Order: -NaN < -inf < -1 < -0.0 < 0.0 < 1 < inf < NaN. */
    kvq_tuple_elem order[] = {
        kvq_tuple_double(d_bits(0xfff8000000000000u)),
        kvq_tuple_double(d_bits(0xfff0000000000000u)),
        kvq_tuple_double(-1.0),
        kvq_tuple_double(d_bits(0x8000000000000000u)),
        kvq_tuple_double(0.0),
        kvq_tuple_double(1.0),
        kvq_tuple_double(d_bits(0x7ff0000000000000u)),
        kvq_tuple_double(d_bits(0x7ff8000000000000u)),
    };
    for (size_t i = 0; i + 1 < sizeof(order) / sizeof(order[0]); i++)
        assert_int_equal(kvq_tuple_compare(&order[i], 1, &order[i + 1], 1), -1);
}

static void test_bool_and_uuid(void **state)
{
    (void)state;
    ONE(kvq_tuple_bool(0), "26");
    ONE(kvq_tuple_bool(1), "27");
    kvq_tuple_elem five = { .type = KVQ_TUPLE_BOOL, .v.b = 5 }; /* any nonzero is true */
    ONE(five, "27");
    kvq_tuple *t;
    assert_int_equal(decode_one(&t, "27")->v.b, 1);
    kvq_tuple_destroy(t);
    uint8_t u[16];
    for (int i = 0; i < 16; i++)
        u[i] = (uint8_t)(i * 17);
    ONE(kvq_tuple_uuid(u), "30 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff");
    const kvq_tuple_elem *e = decode_one(&t, "30 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff");
    assert_int_equal(e->type, KVQ_TUPLE_UUID);
    assert_memory_equal(e->v.uuid, u, 16);
    kvq_tuple_destroy(t);
}

static void test_versionstamps(void **state)
{
    (void)state;
    /* Complete: 33, the 10 stamp bytes, the user version big-endian. */
    const uint8_t tr[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
    ONE(kvq_tuple_vs(tr, 0x0203), "33 01 02 03 04 05 06 07 08 09 0a 02 03");
    /* Incomplete stamps decode as such (complete 0, tr all ff). */
    kvq_tuple *t;
    const kvq_tuple_elem *e = decode_one(&t, "33 ff ff ff ff ff ff ff ff ff ff 00 07");
    assert_int_equal(e->type, KVQ_TUPLE_VERSIONSTAMP);
    assert_int_equal(e->v.vs.complete, 0);
    assert_int_equal(e->v.vs.user, 7);
    /* ... and plain packing refuses them, pack_vs takes them. */
    uint8_t buf[64];
    size_t n = 99;
    assert_int_equal(kvq_tuple_pack(buf, sizeof(buf), &n, e, 1), KVQ_EINVAL);
    assert_int_equal(n, 0);
    assert_non_null(strstr(kvq_last_error(), "incomplete"));
    kvq_buf out = KVQ_BUF_INIT;
    assert_int_equal(kvq_tuple_pack_vs(&out, e, 1), 0);
    hexbuf want = hex("33 ff ff ff ff ff ff ff ff ff ff 00 07  01 00 00 00");
    assert_bytes(out.data, out.len, want.b, want.n);
    kvq_tuple_destroy(t);
    /* A complete stamp cannot have the incomplete mark. */
    const uint8_t ff[10] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
    kvq_tuple_elem bad = kvq_tuple_vs(ff, 1);
    assert_int_equal(kvq_tuple_pack(buf, sizeof(buf), &n, &bad, 1), KVQ_EINVAL);
    /* A stamp with only some 0xff bytes is complete. */
    e = decode_one(&t, "33 ff ff ff ff ff ff ff ff ff fe 00 00");
    assert_int_equal(e->v.vs.complete, 1);
    kvq_tuple_destroy(t);

    /* pack_vs after a raw prefix: the offset counts the prefix (2 + 1 = 3). */
    out.len = 0;
    assert_int_equal(kvq_buf_append(&out, "ab", 2), 0);
    kvq_tuple_elem one[1] = { kvq_tuple_vs_incomplete(5) };
    assert_int_equal(kvq_tuple_pack_vs(&out, one, 1), 0);
    want = hex("61 62 33 ff ff ff ff ff ff ff ff ff ff 00 05 03 00 00 00");
    assert_bytes(out.data, out.len, want.b, want.n);
    /* Nested: (b"x", ((stamp,),)): 01 78 00 05 05 33 -> the stamp starts at 6. */
    kvq_tuple_elem in1[1] = { kvq_tuple_vs_incomplete(0x0102) };
    kvq_tuple_elem in2[1] = { kvq_tuple_nested(in1, 1) };
    kvq_tuple_elem nest[2] = { kvq_tuple_bytes("x", 1), kvq_tuple_nested(in2, 1) };
    out.len = 0;
    assert_int_equal(kvq_tuple_pack_vs(&out, nest, 2), 0);
    want = hex("01 78 00 05 05 33 ff ff ff ff ff ff ff ff ff ff 01 02 00 00 06 00 00 00");
    assert_bytes(out.data, out.len, want.b, want.n);
    /* An offset above 255 uses the higher bytes: a 300-byte prefix puts the stamp at 301. */
    out.len = 0;
    uint8_t raw[300];
    memset(raw, 'r', sizeof(raw));
    assert_int_equal(kvq_buf_append(&out, raw, sizeof(raw)), 0);
    assert_int_equal(kvq_tuple_pack_vs(&out, one, 1), 0);
    assert_int_equal(out.len, 300 + 13 + 4);
    assert_memory_equal(out.data + out.len - 4, "\x2d\x01\x00\x00", 4);
    /* None, two (one of them nested), or a complete one only: KVQ_EINVAL, out unchanged. */
    size_t before = out.len;
    kvq_tuple_elem two[2] = { kvq_tuple_vs_incomplete(0), kvq_tuple_nested(in2, 1) };
    assert_int_equal(kvq_tuple_pack_vs(&out, two, 2), KVQ_EINVAL);
    assert_non_null(strstr(kvq_last_error(), "found 2"));
    kvq_tuple_elem none[1] = { kvq_tuple_vs(tr, 0) };
    assert_int_equal(kvq_tuple_pack_vs(&out, none, 1), KVQ_EINVAL);
    assert_non_null(strstr(kvq_last_error(), "found 0"));
    assert_int_equal(kvq_tuple_pack_vs(&out, NULL, 0), KVQ_EINVAL);
    assert_int_equal(out.len, before);
    /* Plain pack_buf refuses an incomplete stamp, nested too. */
    assert_int_equal(kvq_tuple_pack_buf(&out, nest, 2), KVQ_EINVAL);
    assert_int_equal(out.len, before);
    kvq_buf_dispose(&out);
}

static void test_erlfdb_keys(void **state)
{
    (void)state;
    /* erlfdb binaries are bytes (0x01). */
    kvq_tuple_elem npush[2] = { kvq_tuple_bytes("q", 1), kvq_tuple_bytes("npush", 5) };
    expect_hex(npush, 2, "01 71 00 01 6e 70 75 73 68 00");
    kvq_tuple_elem npop[2] = { kvq_tuple_bytes("q", 1), kvq_tuple_bytes("npop", 4) };
    expect_hex(npop, 2, "01 71 00 01 6e 70 6f 70 00");
    /* The push key: 01 71 00 01 76 61 6c 00 is 8 bytes, 33 at 8, so the stamp is at 9. */
    kvq_tuple_elem push[3] = { kvq_tuple_bytes("q", 1), kvq_tuple_bytes("val", 3),
                               kvq_tuple_vs_incomplete(0) };
    kvq_buf out = KVQ_BUF_INIT;
    assert_int_equal(kvq_tuple_pack_vs(&out, push, 3), 0);
    hexbuf want = hex("01 71 00 01 76 61 6c 00 33 ff ff ff ff ff ff ff ff ff ff 00 00 09 00 00 00");
    assert_int_equal(want.n, 25);
    assert_bytes(out.data, out.len, want.b, want.n);
    /* The stored key once the engine filled the stamp (version 0x0102030405060708, batch 9,
     * user version 0) decodes to the complete versionstamp. */
    hexbuf stored = hex("01 71 00 01 76 61 6c 00 33 01 02 03 04 05 06 07 08 00 09 00 00");
    kvq_tuple *t;
    assert_int_equal(unpack_exact(&t, stored.b, stored.n), 0);
    assert_int_equal(kvq_tuple_get_count(t), 3);
    const kvq_tuple_elem *vs = kvq_tuple_get_elem(t, 2);
    assert_int_equal(vs->type, KVQ_TUPLE_VERSIONSTAMP);
    assert_int_equal(vs->v.vs.complete, 1);
    assert_memory_equal(vs->v.vs.tr, "\x01\x02\x03\x04\x05\x06\x07\x08\x00\x09", 10);
    assert_int_equal(vs->v.vs.user, 0);
    kvq_tuple_destroy(t);
    /* The item range and the delete-all range. */
    kvq_buf b = KVQ_BUF_INIT, e = KVQ_BUF_INIT;
    kvq_tuple_elem val[2] = { kvq_tuple_bytes("q", 1), kvq_tuple_bytes("val", 3) };
    out.len = 0;
    assert_int_equal(kvq_tuple_pack_buf(&out, val, 2), 0);
    assert_int_equal(kvq_tuple_range(&b, &e, out.data, out.len), 0);
    want = hex("01 71 00 01 76 61 6c 00 00");
    assert_bytes(b.data, b.len, want.b, want.n);
    want = hex("01 71 00 01 76 61 6c 00 ff");
    assert_bytes(e.data, e.len, want.b, want.n);
    kvq_buf_dispose(&out);
    kvq_buf_dispose(&b);
    kvq_buf_dispose(&e);
}

static void test_recipe_keys(void **state)
{
    (void)state;
    /* ("Q", 1, b"\x00\x01") as the FIFO recipe's item key (Python 3 strings are 0x02). */
    kvq_tuple_elem item[3] = { kvq_tuple_str("Q"), kvq_tuple_int(1), kvq_tuple_bytes("\0\1", 2) };
    expect_hex(item, 3, "02 51 00 15 01 01 00 ff 01 00");
    /* ("P", -3, 0, b"r") as a priority-queue key. */
    kvq_tuple_elem prio[4] = { kvq_tuple_str("P"), kvq_tuple_int(-3), kvq_tuple_int(0),
                               kvq_tuple_bytes("r", 1) };
    expect_hex(prio, 4, "02 50 00 13 fc 14 01 72 00");
}

static void test_caller_buffer(void **state)
{
    (void)state;
    kvq_tuple_elem e[2] = { kvq_tuple_int(300), kvq_tuple_str("ab") }; /* 16 01 2c 02 61 62 00 */
    size_t n = 0;
    assert_int_equal(kvq_tuple_pack(NULL, 0, &n, e, 2), KVQ_ENOBUFS);
    assert_int_equal(n, 7);
    assert_non_null(strstr(kvq_last_error(), "needs 7 bytes"));
    uint8_t buf[7];
    memset(buf, 0xee, sizeof(buf));
    assert_int_equal(kvq_tuple_pack(buf, 6, &n, e, 2), KVQ_ENOBUFS);
    assert_int_equal(n, 7);
    assert_int_equal(buf[6], 0xee); /* nothing written past cap */
    assert_int_equal(kvq_tuple_pack(buf, 7, &n, e, 2), 0);
    assert_int_equal(n, 7);
    assert_memory_equal(buf, "\x16\x01\x2c\x02\x61\x62\x00", 7);
    /* The empty tuple packs to nothing. */
    assert_int_equal(kvq_tuple_pack(NULL, 0, &n, NULL, 0), 0);
    assert_int_equal(n, 0);
    /* pack_buf appends after what the buffer holds. */
    kvq_buf out = KVQ_BUF_INIT;
    assert_int_equal(kvq_buf_append(&out, "\xfe", 1), 0);
    assert_int_equal(kvq_tuple_pack_buf(&out, e, 2), 0);
    assert_int_equal(out.len, 8);
    assert_memory_equal(out.data, "\xfe\x16\x01\x2c\x02\x61\x62\x00", 8);
    kvq_buf_dispose(&out);
}

static void test_compare(void **state)
{
    (void)state;
    /* An INT and a UINT of the same value are equal; negative INTs precede every UINT. */
    kvq_tuple_elem i5 = kvq_tuple_int(5), u5 = kvq_tuple_uint(5);
    kvq_tuple_elem ibig = kvq_tuple_int(INT64_MAX), ubig = kvq_tuple_uint(UINT64_MAX);
    kvq_tuple_elem neg = kvq_tuple_int(-1);
    assert_int_equal(kvq_tuple_compare(&i5, 1, &u5, 1), 0);
    assert_int_equal(kvq_tuple_compare(&ibig, 1, &ubig, 1), -1);
    assert_int_equal(kvq_tuple_compare(&neg, 1, &u5, 1), -1);
    assert_int_equal(kvq_tuple_compare(&ubig, 1, &neg, 1), 1);
    /* Type order: null < bytes < string < nested < int < float < double < bool < uuid < vs. */
    uint8_t u[16] = { 0 };
    const uint8_t tr[10] = { 0 };
    kvq_tuple_elem types[] = { kvq_tuple_null(),          kvq_tuple_bytes("z", 1),
                               kvq_tuple_str("a"),        kvq_tuple_nested(NULL, 0),
                               kvq_tuple_int(-9),         kvq_tuple_uint(UINT64_MAX),
                               kvq_tuple_float(-1e30f),   kvq_tuple_double(-1e300),
                               kvq_tuple_bool(0),         kvq_tuple_bool(1),
                               kvq_tuple_uuid(u),         kvq_tuple_vs(tr, 0),
                               kvq_tuple_vs_incomplete(0) };
    size_t nt = sizeof(types) / sizeof(types[0]);
    for (size_t i = 0; i < nt; i++)
        for (size_t j = 0; j < nt; j++) {
            int want = i < j ? -1 : (i > j ? 1 : 0);
            assert_int_equal(kvq_tuple_compare(&types[i], 1, &types[j], 1), want);
        }
    /* A prefix sorts first; NULL is the empty tuple. */
    assert_int_equal(kvq_tuple_compare(types, 1, types, 2), -1);
    assert_int_equal(kvq_tuple_compare(NULL, 5, types, 1), -1);
    assert_int_equal(kvq_tuple_compare(NULL, 0, NULL, 3), 0);
    /* A bool holding 5 is true. */
    kvq_tuple_elem five = { .type = KVQ_TUPLE_BOOL, .v.b = 5 };
    assert_int_equal(kvq_tuple_compare(&five, 1, &types[9], 1), 0);
    /* A cycle (packing refuses it) compares without recursing forever. */
    kvq_tuple_elem cyc;
    cyc = kvq_tuple_nested(&cyc, 1);
    assert_int_equal(kvq_tuple_compare(&cyc, 1, &cyc, 1), 0);
    uint8_t buf[256];
    size_t n;
    assert_int_equal(kvq_tuple_pack(buf, sizeof(buf), &n, &cyc, 1), KVQ_EINVAL);
    assert_non_null(strstr(kvq_last_error(), "deeper"));
}

/* ---- random round trips and order ---------------------------------------------------------- */

static uint64_t seed;
static uint64_t rng_state;

static uint64_t rnd(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static unsigned below(unsigned n)
{
    return (unsigned)(rnd() % n);
}

static int64_t edge_int(void)
{
    static const int64_t edges[] = { 0,
                                     1,
                                     -1,
                                     2,
                                     -2,
                                     255,
                                     256,
                                     -255,
                                     -256,
                                     -257,
                                     65535,
                                     65536,
                                     -65536,
                                     4294967295LL,
                                     4294967296LL,
                                     -4294967296LL,
                                     INT64_MAX,
                                     INT64_MAX - 1,
                                     INT64_MIN,
                                     INT64_MIN + 1 };
    if (below(3) == 0)
        return edges[below(sizeof(edges) / sizeof(edges[0]))];
    int64_t v = (int64_t)(rnd() >> below(64));
    return below(2) ? v : -v;
}

/* Appends the UTF-8 form of a random code point (no surrogates), biased to the edges of each
 * length. */
static size_t random_utf8(uint8_t *d)
{
    static const uint32_t edges[] = { 0x0,    0x7f,   0x80,   0x7ff,   0x800,
                                      0xd7ff, 0xe000, 0xffff, 0x10000, 0x10ffff };
    uint32_t cp;
    switch (below(4)) {
    case 0:
        cp = edges[below(sizeof(edges) / sizeof(edges[0]))];
        break;
    case 1:
        cp = (uint32_t)('a' + below(3));
        break;
    default:
        do
            cp = (uint32_t)(rnd() % 0x110000);
        while (cp >= 0xd800 && cp <= 0xdfff);
    }
    if (cp < 0x80) {
        d[0] = (uint8_t)cp;
        return 1;
    } else if (cp < 0x800) {
        d[0] = (uint8_t)(0xc0 | (cp >> 6));
        d[1] = (uint8_t)(0x80 | (cp & 0x3f));
        return 2;
    } else if (cp < 0x10000) {
        d[0] = (uint8_t)(0xe0 | (cp >> 12));
        d[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        d[2] = (uint8_t)(0x80 | (cp & 0x3f));
        return 3;
    }
    d[0] = (uint8_t)(0xf0 | (cp >> 18));
    d[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
    d[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
    d[3] = (uint8_t)(0x80 | (cp & 0x3f));
    return 4;
}

/* Storage for one round's random elements and their data. */
typedef struct pool {
    kvq_tuple_elem elems[8192];
    uint8_t data[65536];
    size_t ne, nd;
} pool;

static kvq_tuple_elem *pool_elems(pool *p, size_t n)
{
    assert_true(p->ne + n <= sizeof(p->elems) / sizeof(p->elems[0]));
    kvq_tuple_elem *e = p->elems + p->ne;
    p->ne += n;
    return e;
}

static void random_elem(pool *p, kvq_tuple_elem *e, int depth)
{
    unsigned kind = below(depth < 4 ? 12 : 11);
    memset(e, 0, sizeof(*e));
    if (p->nd + 32 > sizeof(p->data) || p->ne + 8 > sizeof(p->elems) / sizeof(p->elems[0]))
        kind = 0; /* the pool is full: a null */
    switch (kind) {
    case 0:
        *e = kvq_tuple_null();
        break;
    case 1: { /* bytes, small alphabet with 00 and ff so that escapes and prefixes meet */
        size_t n = below(6);
        uint8_t *d = p->data + p->nd;
        static const uint8_t alpha[] = { 0x00, 0x00, 0x01, 0x61, 0x62, 0xfe, 0xff };
        for (size_t i = 0; i < n; i++)
            d[i] = below(4) == 0 ? (uint8_t)rnd() : alpha[below(sizeof(alpha))];
        p->nd += n;
        *e = kvq_tuple_bytes(d, n);
        break;
    }
    case 2: {
        size_t chars = below(5), n = 0;
        uint8_t *d = p->data + p->nd;
        for (size_t i = 0; i < chars; i++)
            n += random_utf8(d + n);
        p->nd += n;
        *e = kvq_tuple_strn((const char *)d, n);
        break;
    }
    case 3:
    case 4:
        *e = kvq_tuple_int(edge_int());
        break;
    case 5: {
        uint64_t u = below(3) == 0 ? UINT64_MAX - below(3) : rnd() | 0x8000000000000000u;
        *e = below(4) == 0 ? kvq_tuple_uint(u >> 1) : kvq_tuple_uint(u); /* some fit int64 */
        break;
    }
    case 6: {
        static const uint32_t edges[] = { 0,           0x80000000u, 0x3f800000u,
                                          0xbf800000u, 0x7f800000u, 0xff800000u,
                                          0x7fc00000u, 0xffc00001u, 1 };
        uint32_t bits = below(2) ? edges[below(sizeof(edges) / sizeof(edges[0]))] : (uint32_t)rnd();
        *e = kvq_tuple_float(f_bits(bits));
        break;
    }
    case 7: {
        static const uint64_t edges[] = { 0,
                                          0x8000000000000000u,
                                          0x3ff0000000000000u,
                                          0xbff0000000000000u,
                                          0x7ff0000000000000u,
                                          0xfff0000000000000u,
                                          0x7ff8000000000001u,
                                          0xfff8000000000000u,
                                          1 };
        uint64_t bits = below(2) ? edges[below(sizeof(edges) / sizeof(edges[0]))] : rnd();
        *e = kvq_tuple_double(d_bits(bits));
        break;
    }
    case 8:
        *e = kvq_tuple_bool((int)below(2));
        break;
    case 9: {
        uint8_t u[16];
        for (int i = 0; i < 16; i++)
            u[i] = (uint8_t)(below(2) ? below(3) : 0xff - below(2));
        *e = kvq_tuple_uuid(u);
        break;
    }
    case 10: {
        uint8_t tr[10];
        for (int i = 0; i < 10; i++)
            tr[i] = (uint8_t)(below(2) ? below(3) : 0xff);
        tr[9] = (uint8_t)below(3); /* never all 0xff: that is the incomplete mark */
        *e = kvq_tuple_vs(tr, (uint16_t)below(3));
        break;
    }
    default: {
        size_t n = below(4);
        kvq_tuple_elem *kids = pool_elems(p, n);
        for (size_t i = 0; i < n; i++)
            random_elem(p, &kids[i], depth + 1);
        *e = kvq_tuple_nested(kids, n);
        break;
    }
    }
}

static size_t random_tuple(pool *p, kvq_tuple_elem **out)
{
    size_t n = below(5);
    kvq_tuple_elem *t = pool_elems(p, n);
    for (size_t i = 0; i < n; i++)
        random_elem(p, &t[i], 0);
    *out = t;
    return n;
}

/* Often a copy of a's first elements followed by random ones, so that comparisons go deep. */
static size_t related_tuple(pool *p, const kvq_tuple_elem *a, size_t na, kvq_tuple_elem **out)
{
    if (na == 0 || below(2) == 0)
        return random_tuple(p, out);
    size_t keep = below((unsigned)na + 1), extra = below(3);
    kvq_tuple_elem *t = pool_elems(p, keep + extra);
    memcpy(t, a, keep * sizeof(*t));
    for (size_t i = 0; i < extra; i++)
        random_elem(p, &t[keep + i], 0);
    *out = t;
    return keep + extra;
}

static int sign(int c)
{
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

static int bytes_order(const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
    size_t m = na < nb ? na : nb;
    int c = m ? memcmp(a, b, m) : 0;
    return c != 0 ? sign(c) : (na < nb ? -1 : (na > nb ? 1 : 0));
}

static int rounds(int base)
{
    const char *soak = getenv("KVQ_SOAK");
    return soak != NULL && strcmp(soak, "1") == 0 ? base * 10 : base;
}

static void test_random_round_trip_and_order(void **state)
{
    (void)state;
    rng_state = seed;
    pool *p = malloc(sizeof(*p));
    assert_non_null(p);
    int n_rounds = rounds(20000);
    size_t truncations = 0;
    for (int round = 0; round < n_rounds; round++) {
        p->ne = p->nd = 0;
        kvq_tuple_elem *a, *b;
        size_t na = random_tuple(p, &a);
        size_t nb = related_tuple(p, a, na, &b);
        kvq_buf pa = KVQ_BUF_INIT, pb = KVQ_BUF_INIT;
        assert_int_equal(kvq_tuple_pack_buf(&pa, a, na), 0);
        assert_int_equal(kvq_tuple_pack_buf(&pb, b, nb), 0);

        /* pack -> unpack gives an equal tuple, which packs to the same bytes. */
        kvq_tuple *ta;
        int rc = unpack_exact(&ta, pa.data, pa.len);
        if (rc != 0)
            fail_msg("round %d (seed %" PRIu64 "): unpack failed: %s", round, seed,
                     kvq_last_error());
        assert_int_equal(kvq_tuple_get_count(ta), na);
        assert_int_equal(kvq_tuple_compare(elems_of(ta), na, a, na), 0);
        kvq_buf again = KVQ_BUF_INIT;
        assert_int_equal(kvq_tuple_pack_buf(&again, elems_of(ta), na), 0);
        assert_bytes(again.data, again.len, pa.data, pa.len);
        kvq_buf_dispose(&again);
        kvq_tuple_destroy(ta);

        /* Byte order is tuple order, and the comparison is antisymmetric. */
        int by_bytes = bytes_order(pa.data, pa.len, pb.data, pb.len);
        int by_tuples = kvq_tuple_compare(a, na, b, nb);
        if (by_bytes != by_tuples)
            fail_msg("round %d (seed %" PRIu64 "): bytes order %d, tuple order %d", round, seed,
                     by_bytes, by_tuples);
        assert_int_equal(kvq_tuple_compare(b, nb, a, na), -by_tuples);

        /* Every prefix of a valid encoding either decodes to a tuple that packs to exactly
         * those bytes, or fails cleanly, naming a byte (every other round). */
        if (round % 2 == 0) {
            for (size_t cut = 0; cut < pa.len; cut++) {
                kvq_tuple *tc;
                rc = unpack_exact(&tc, pa.data, cut);
                truncations++;
                if (rc == 0) {
                    kvq_buf re = KVQ_BUF_INIT;
                    assert_int_equal(kvq_tuple_pack_buf(&re, elems_of(tc), kvq_tuple_get_count(tc)),
                                     0);
                    assert_bytes(re.data, re.len, pa.data, cut);
                    kvq_buf_dispose(&re);
                    kvq_tuple_destroy(tc);
                } else {
                    assert_int_equal(rc, KVQ_ETUPLE);
                    assert_non_null(strstr(kvq_last_error(), "at byte"));
                }
            }
        }
        kvq_buf_dispose(&pa);
        kvq_buf_dispose(&pb);
    }
    free(p);
    printf("test_tuple: %d random round trips and order checks, %zu truncations\n", n_rounds,
           truncations);
}

/* Sorting tuples with kvq_tuple_compare sorts their packed keys too. */
enum { SORT_N = 200 };
static kvq_tuple_elem *sort_elems[SORT_N];
static size_t sort_counts[SORT_N];

static int cmp_sort_index(const void *x, const void *y)
{
    int i = *(const int *)x, j = *(const int *)y;
    return kvq_tuple_compare(sort_elems[i], sort_counts[i], sort_elems[j], sort_counts[j]);
}

static void test_random_sort(void **state)
{
    (void)state;
    rng_state = seed ^ 0x5bd1e995u;
    pool *p = malloc(sizeof(*p));
    assert_non_null(p);
    p->ne = p->nd = 0;
    int idx[SORT_N];
    kvq_buf keys[SORT_N];
    for (int i = 0; i < SORT_N; i++) {
        sort_counts[i] =
            i > 0 ? related_tuple(p, sort_elems[i - 1], sort_counts[i - 1], &sort_elems[i])
                  : random_tuple(p, &sort_elems[i]);
        idx[i] = i;
        keys[i] = (kvq_buf)KVQ_BUF_INIT;
        assert_int_equal(kvq_tuple_pack_buf(&keys[i], sort_elems[i], sort_counts[i]), 0);
    }
    qsort(idx, SORT_N, sizeof(idx[0]), cmp_sort_index);
    for (int i = 0; i + 1 < SORT_N; i++) {
        const kvq_buf *x = &keys[idx[i]], *y = &keys[idx[i + 1]];
        assert_true(bytes_order(x->data, x->len, y->data, y->len) <= 0);
    }
    for (int i = 0; i < SORT_N; i++)
        kvq_buf_dispose(&keys[i]);
    free(p);
}

/* ---- malformed input ----------------------------------------------------------------------- */

static void test_malformed(void **state)
{
    (void)state;
    /* Unterminated: the offset is the element's type code. */
    expect_bad("01 61", KVQ_ETUPLE, "unterminated byte string", "at byte 0 of 2");
    expect_bad("14 01 61", KVQ_ETUPLE, "unterminated byte string", "at byte 1");
    expect_bad("02 61 62", KVQ_ETUPLE, "unterminated string", "at byte 0");
    /* 00 ff is always an escaped 00, so this byte string has no terminator. */
    expect_bad("01 61 00 ff", KVQ_ETUPLE, "unterminated byte string", "at byte 0");
    expect_bad("05 15 01", KVQ_ETUPLE, "unterminated nested tuple", "at byte 0");
    expect_bad("14 05 05 00", KVQ_ETUPLE, "unterminated nested tuple", "at byte 1");
    /* Inside a nested tuple 00 ff is a null, so 05 14 00 ff does not end the tuple. */
    expect_bad("05 14 00 ff", KVQ_ETUPLE, "unterminated nested tuple", "at byte 0");
    /* Truncated fixed-size payloads. */
    expect_bad("15", KVQ_ETUPLE, "truncated integer", "at byte 0");
    expect_bad("14 1c 01 02", KVQ_ETUPLE, "truncated integer", "at byte 1");
    expect_bad("1d", KVQ_ETUPLE, "truncated integer length", "at byte 0");
    expect_bad("1d 03 01", KVQ_ETUPLE, "truncated integer at byte 0", "needs 3 more bytes, 1 left");
    expect_bad("0b", KVQ_ETUPLE, "truncated integer length", "at byte 0");
    expect_bad("0b fc 00", KVQ_ETUPLE, "truncated integer", "at byte 0");
    expect_bad("20 00 00 00", KVQ_ETUPLE, "truncated float", "at byte 0");
    expect_bad("21 00", KVQ_ETUPLE, "truncated double", "at byte 0");
    expect_bad("30 00", KVQ_ETUPLE, "truncated UUID", "at byte 0");
    expect_bad("33 00 00", KVQ_ETUPLE, "truncated versionstamp", "at byte 0");
    /* Trailing garbage after a nested tuple's end is an element that does not exist. */
    expect_bad("05 14 00 fe", KVQ_ETUPLE, "unknown type code 0xfe", "at byte 3");
    expect_bad("05 00 07", KVQ_ETUPLE, "unknown type code 0x07", "at byte 2");
    /* At the top level 00 is a null; an ff after it is the reserved escape byte. */
    expect_bad("00 ff", KVQ_ETUPLE, "escape byte", "at byte 1");
    /* Named refusals. */
    expect_bad("14 03", KVQ_ETUPLE, "deprecated type code (old nested tuple) 0x03", "at byte 1");
    expect_bad("14 04", KVQ_ETUPLE, "deprecated", "0x04");
    expect_bad("14 25", KVQ_ETUPLE, "deprecated type code (old true) 0x25", NULL);
    expect_bad("14 0a", KVQ_ETUPLE, "reserved type code (big integer) 0x0a", NULL);
    expect_bad("14 1e", KVQ_ETUPLE, "reserved type code (big integer) 0x1e", NULL);
    expect_bad("14 22", KVQ_ETUPLE, "long double", NULL);
    expect_bad("14 23", KVQ_ETUPLE, "decimal", NULL);
    expect_bad("14 24", KVQ_ETUPLE, "decimal", NULL);
    expect_bad("14 31", KVQ_ETUPLE, "64-bit identifier", NULL);
    expect_bad("14 32 00 00 00 00 00 00 00 00 00 01", KVQ_ETUPLE,
               "unsupported type code (80-bit versionstamp) 0x32", "at byte 1");
    expect_bad("14 40", KVQ_ETUPLE, "user type code 0x40", NULL);
    expect_bad("14 4f", KVQ_ETUPLE, "user type code 0x4f", NULL);
    /* Every code that is not a type kvq decodes fails at its offset and is named. */
    int refused = 0;
    for (int c = 0; c < 256; c++) {
        int valid = c == 0x00 || c == 0x01 || c == 0x02 || c == 0x05 || (c >= 0x0b && c <= 0x1d) ||
                    c == 0x20 || c == 0x21 || c == 0x26 || c == 0x27 || c == 0x30 || c == 0x33;
        if (valid)
            continue;
        uint8_t in[2] = { 0x27, (uint8_t)c };
        char code[8];
        snprintf(code, sizeof(code), "0x%02x", c);
        expect_bad_bytes(in, 2, KVQ_ETUPLE, code, "at byte 1 of 2");
        refused++;
    }
    assert_int_equal(refused, 256 - 3 - 1 - 19 - 2 - 2 - 2);

    /* Invalid UTF-8, with the offset of the bad sequence's first byte. */
    expect_bad("02 61 c0 af 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 2");    /* overlong '/' */
    expect_bad("02 c1 bf 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 1");       /* overlong */
    expect_bad("02 e0 80 80 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 1");    /* overlong NUL */
    expect_bad("02 f0 8f bf bf 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 1"); /* overlong */
    expect_bad("02 ed a0 80 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 1");    /* U+D800 */
    expect_bad("02 ed bf bf 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 1");    /* U+DFFF */
    expect_bad("02 f4 90 80 80 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 1"); /* > U+10FFFF */
    expect_bad("02 f5 80 80 80 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 1");
    expect_bad("02 80 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 1");       /* lone continuation */
    expect_bad("02 e2 82 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 1");    /* cut sequence */
    expect_bad("02 61 62 c3 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 3"); /* cut at the end */
    expect_bad("02 c3 00 ff 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 1"); /* cut by U+0000 */
    expect_bad("02 fe 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 1");
    /* The offset counts escapes: "a", U+0000 (00 ff), then a bad byte at input offset 4. */
    expect_bad("02 61 00 ff c3 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 4");
    expect_bad("15 01 05 02 61 80 00 00", KVQ_ETUPLE, "invalid UTF-8", "at byte 5");
    /* Bytes (0x01) take anything. */
    kvq_tuple *t;
    decode_one(&t, "01 c0 af ed a0 80 fe 00");
    kvq_tuple_destroy(t);
}

/* Every proper prefix of these single elements is an error naming the element's byte, or (where
 * the prefix ends just before an escape's FF) a shorter element that packs to the same bytes. */
static void test_truncations(void **state)
{
    (void)state;
    static const char *const vectors[] = {
        "01 66 6f 6f 00 ff 62 61 72 00",
        "02 46 c3 94 4f 00 ff 62 61 72 00",
        "02 f0 9f 98 80 00",
        "11 ab 4b 93",
        "1c ff ff ff ff ff ff ff ff",
        "1d 08 ff ff ff ff ff ff ff ff",
        "0b f7 7f ff ff ff ff ff ff ff",
        "0c 7f ff ff ff ff ff ff ff",
        "20 3d d7 ff ff",
        "21 bf f0 00 00 00 00 00 00",
        "30 00 11 22 33 44 55 66 77 88 99 aa bb cc dd ee ff",
        "33 01 02 03 04 05 06 07 08 09 0a 02 03",
        "33 ff ff ff ff ff ff ff ff ff ff 00 00",
    };
    for (size_t v = 0; v < sizeof(vectors) / sizeof(vectors[0]); v++) {
        hexbuf in = hex(vectors[v]);
        kvq_tuple *t;
        assert_int_equal(unpack_exact(&t, in.b, in.n), 0);
        kvq_tuple_destroy(t);
        for (size_t cut = 1; cut < in.n; cut++) {
            if (unpack_exact(&t, in.b, cut) == 0) {
                kvq_buf re = KVQ_BUF_INIT;
                assert_int_equal(kvq_tuple_pack_buf(&re, elems_of(t), kvq_tuple_get_count(t)), 0);
                assert_bytes(re.data, re.len, in.b, cut);
                kvq_buf_dispose(&re);
                kvq_tuple_destroy(t);
                continue;
            }
            expect_bad_bytes(in.b, cut, KVQ_ETUPLE, "at byte 0 of", NULL);
        }
    }
    /* A nested tuple: the error is at the element cut short, whichever it is. */
    static const struct {
        size_t cut;
        const char *detail;
    } nested[] = {
        { 1, "unterminated nested tuple at byte 0" },
        { 2, "truncated integer at byte 1" },
        { 3, "unterminated nested tuple at byte 0" },
        { 4, "unterminated byte string at byte 3" },
        { 5, "unterminated byte string at byte 3" },
        { 6, "unterminated nested tuple at byte 0" },
        { 7, "unterminated nested tuple at byte 6" },
        { 8, "unterminated string at byte 7" },
        { 9, "unterminated string at byte 7" },
        { 10, "unterminated nested tuple at byte 6" },
        { 11, "unterminated nested tuple at byte 0" },
    };
    hexbuf in = hex("05 15 01 01 61 00 05 02 62 00 00 00");
    for (size_t i = 0; i < sizeof(nested) / sizeof(nested[0]); i++)
        expect_bad_bytes(in.b, nested[i].cut, KVQ_ETUPLE, nested[i].detail, NULL);
}

static void test_depth_limit(void **state)
{
    (void)state;
    /* Exactly KVQ_TUPLE_MAX_DEPTH levels decode; one more is refused at its 05. */
    enum { D = KVQ_TUPLE_MAX_DEPTH };
    uint8_t ok[2 * (D + 1)];
    memset(ok, 0x05, D);
    memset(ok + D, 0x00, D);
    kvq_tuple *t;
    assert_int_equal(unpack_exact(&t, ok, 2 * D), 0);
    const kvq_tuple_elem *e = kvq_tuple_get_elem(t, 0);
    int levels = 0;
    while (e != NULL && e->type == KVQ_TUPLE_NESTED) {
        levels++;
        e = e->v.nested.count ? e->v.nested.elems : NULL;
    }
    assert_int_equal(levels, D);
    kvq_tuple_destroy(t);
    memset(ok, 0x05, D + 1);
    memset(ok + D + 1, 0x00, D + 1);
    expect_bad_bytes(ok, 2 * (D + 1), KVQ_ETUPLE, "deeper than the limit of 64", "at byte 64");
    /* 10^5 levels: the same error, no stack overflow. */
    size_t deep = 100000;
    uint8_t *d = malloc(deep);
    memset(d, 0x05, deep);
    expect_bad_bytes(d, deep, KVQ_ETUPLE, "deeper", "at byte 64 of 100000");
    /* Nested nulls all the way down: 05 00 ff 05 00 ff ... */
    for (size_t i = 0; i + 3 <= deep; i += 3)
        memcpy(d + i, "\x05\x00\xff", 3);
    expect_bad_bytes(d, deep - deep % 3, KVQ_ETUPLE, "deeper", "at byte 192");
    free(d);

    /* Packing: 64 levels pack, 65 are KVQ_EINVAL. */
    kvq_tuple_elem chain[D + 1];
    chain[0] = kvq_tuple_int(7);
    for (int i = 1; i <= D; i++)
        chain[i] = kvq_tuple_nested(&chain[i - 1], 1);
    kvq_buf out = KVQ_BUF_INIT;
    assert_int_equal(kvq_tuple_pack_buf(&out, &chain[D], 1), 0);
    assert_int_equal(out.len, D + 2 + D);
    kvq_tuple_elem top = kvq_tuple_nested(&chain[D], 1);
    out.len = 0;
    assert_int_equal(kvq_tuple_pack_buf(&out, &top, 1), KVQ_EINVAL);
    assert_non_null(strstr(kvq_last_error(), "deeper than 64"));
    assert_int_equal(out.len, 0);
    kvq_buf_dispose(&out);
}

static void test_invalid_elements(void **state)
{
    (void)state;
    uint8_t buf[64];
    size_t n = 99;
    kvq_tuple_elem bad_utf8[] = { kvq_tuple_strn("\xff", 1), kvq_tuple_strn("a\xed\xa0\x80", 4),
                                  kvq_tuple_strn("\xc3", 1), kvq_tuple_strn("\xc0\x80", 2) };
    for (size_t i = 0; i < sizeof(bad_utf8) / sizeof(bad_utf8[0]); i++) {
        assert_int_equal(kvq_tuple_pack(buf, sizeof(buf), &n, &bad_utf8[i], 1), KVQ_EINVAL);
        assert_int_equal(n, 0);
        assert_non_null(strstr(kvq_last_error(), "UTF-8"));
    }
    assert_non_null(strstr(kvq_last_error(), "byte 0"));
    kvq_tuple_elem e = kvq_tuple_strn("a\xed\xa0\x80", 4);
    assert_int_equal(kvq_tuple_pack(buf, sizeof(buf), &n, &e, 1), KVQ_EINVAL);
    assert_non_null(strstr(kvq_last_error(), "byte 1"));
    kvq_tuple_elem unknown = { .type = (kvq_tuple_type)99 };
    assert_int_equal(kvq_tuple_pack(buf, sizeof(buf), &n, &unknown, 1), KVQ_EINVAL);
    assert_non_null(strstr(kvq_last_error(), "unknown element type 99"));
    kvq_tuple_elem null_bytes = kvq_tuple_bytes(NULL, 3);
    assert_int_equal(kvq_tuple_pack(buf, sizeof(buf), &n, &null_bytes, 1), KVQ_EINVAL);
    kvq_tuple_elem null_str = kvq_tuple_strn(NULL, 3);
    assert_int_equal(kvq_tuple_pack(buf, sizeof(buf), &n, &null_str, 1), KVQ_EINVAL);
    kvq_tuple_elem null_nested = kvq_tuple_nested(NULL, 2);
    assert_int_equal(kvq_tuple_pack(buf, sizeof(buf), &n, &null_nested, 1), KVQ_EINVAL);
    /* A bad element deep inside a nested tuple is found too. */
    kvq_tuple_elem inner[2] = { kvq_tuple_int(1), kvq_tuple_strn("\xff", 1) };
    kvq_tuple_elem outer = kvq_tuple_nested(inner, 2);
    assert_int_equal(kvq_tuple_pack(buf, sizeof(buf), &n, &outer, 1), KVQ_EINVAL);
}

/* ---- ranges, strinc, subspaces --------------------------------------------------------------- */

static void test_ranges_and_strinc(void **state)
{
    (void)state;
    kvq_buf b = KVQ_BUF_INIT, e = KVQ_BUF_INIT, s = KVQ_BUF_INIT;
    assert_int_equal(kvq_tuple_range(&b, &e, (const uint8_t *)"\x02Q\x00", 3), 0);
    assert_bytes(b.data, b.len, (const uint8_t *)"\x02Q\x00\x00", 4);
    assert_bytes(e.data, e.len, (const uint8_t *)"\x02Q\x00\xff", 4);
    /* The empty prefix: everything from 00 to ff. */
    b.len = e.len = 0;
    assert_int_equal(kvq_tuple_range(&b, &e, NULL, 0), 0);
    assert_bytes(b.data, b.len, (const uint8_t *)"\x00", 1);
    assert_bytes(e.data, e.len, (const uint8_t *)"\xff", 1);
    /* erlfdb's delete-all range of (b"q",). */
    b.len = e.len = 0;
    assert_int_equal(kvq_tuple_range(&b, &e, (const uint8_t *)"\x01q\x00", 3), 0);
    assert_bytes(b.data, b.len, (const uint8_t *)"\x01q\x00\x00", 4);
    assert_bytes(e.data, e.len, (const uint8_t *)"\x01q\x00\xff", 4);

    assert_int_equal(kvq_bytes_strinc(&s, (const uint8_t *)"ab\xff\xff", 4), 0);
    assert_bytes(s.data, s.len, (const uint8_t *)"ac", 2);
    s.len = 0;
    assert_int_equal(kvq_bytes_strinc(&s, (const uint8_t *)"a\xfe", 2), 0);
    assert_bytes(s.data, s.len, (const uint8_t *)"a\xff", 2);
    s.len = 0;
    assert_int_equal(kvq_bytes_strinc(&s, (const uint8_t *)"\x00", 1), 0);
    assert_bytes(s.data, s.len, (const uint8_t *)"\x01", 1);
    /* It appends. */
    assert_int_equal(kvq_bytes_strinc(&s, (const uint8_t *)"\x01q\x00\xff", 4), 0);
    assert_bytes(s.data, s.len, (const uint8_t *)"\x01\x01q\x01", 4);
    size_t before = s.len;
    assert_int_equal(kvq_bytes_strinc(&s, (const uint8_t *)"\xff\xff", 2), KVQ_EINVAL);
    assert_non_null(strstr(kvq_last_error(), "all 0xFF"));
    assert_int_equal(kvq_bytes_strinc(&s, (const uint8_t *)"x", 0), KVQ_EINVAL);
    assert_non_null(strstr(kvq_last_error(), "empty"));
    assert_int_equal(s.len, before);
    kvq_buf_dispose(&b);
    kvq_buf_dispose(&e);
    kvq_buf_dispose(&s);
}

static void test_subspaces(void **state)
{
    (void)state;
    kvq_tuple_elem q[1] = { kvq_tuple_bytes("q", 1) };
    kvq_subspace *sub;
    assert_int_equal(kvq_subspace_new(&sub, (const uint8_t *)"\xfe", 1, q, 1), 0);
    kvq_bytes p = kvq_subspace_get_prefix(sub);
    assert_bytes(p.data, p.len, (const uint8_t *)"\xfe\x01q\x00", 4);
    kvq_tuple_elem key[2] = { kvq_tuple_str("x"), kvq_tuple_int(7) };
    kvq_buf k = KVQ_BUF_INIT;
    assert_int_equal(kvq_subspace_pack(&k, sub, key, 2), 0);
    assert_bytes(k.data, k.len, (const uint8_t *)"\xfe\x01q\x00\x02x\x00\x15\x07", 9);
    assert_int_equal(kvq_subspace_contains(sub, k.data, k.len), 1);
    assert_int_equal(kvq_subspace_contains(sub, p.data, p.len), 1); /* the prefix itself */
    kvq_tuple *t;
    assert_int_equal(kvq_subspace_unpack(&t, sub, k.data, k.len), 0);
    assert_int_equal(kvq_tuple_get_count(t), 2);
    assert_int_equal(kvq_tuple_compare(elems_of(t), 2, key, 2), 0);
    kvq_tuple_destroy(t);
    /* Outside: shorter than the prefix, or a different prefix. */
    assert_int_equal(kvq_subspace_contains(sub, (const uint8_t *)"\xfe\x01q", 3), 0);
    assert_int_equal(kvq_subspace_contains(sub, (const uint8_t *)"\x01q\x00\x14", 4), 0);
    assert_int_equal(kvq_subspace_contains(sub, NULL, 0), 0);
    t = (kvq_tuple *)&t;
    assert_int_equal(kvq_subspace_unpack(&t, sub, (const uint8_t *)"\x01q\x00\x14", 4), KVQ_EINVAL);
    assert_null(t);
    assert_non_null(strstr(kvq_last_error(), "does not start with"));
    /* A malformed tuple after the prefix: offsets count from the key's start. */
    assert_int_equal(kvq_subspace_unpack(&t, sub, (const uint8_t *)"\xfe\x01q\x00\x14\x15", 6),
                     KVQ_ETUPLE);
    assert_non_null(strstr(kvq_last_error(), "at byte 5 of 6"));
    /* The prefix alone is the empty tuple. */
    assert_int_equal(kvq_subspace_unpack(&t, sub, p.data, p.len), 0);
    assert_int_equal(kvq_tuple_get_count(t), 0);
    kvq_tuple_destroy(t);

    /* Range: strictly inside prefix + pack(("x",)). */
    kvq_buf b = KVQ_BUF_INIT, e = KVQ_BUF_INIT;
    assert_int_equal(kvq_subspace_range(&b, &e, sub, key, 1), 0);
    assert_bytes(b.data, b.len, (const uint8_t *)"\xfe\x01q\x00\x02x\x00\x00", 8);
    assert_bytes(e.data, e.len, (const uint8_t *)"\xfe\x01q\x00\x02x\x00\xff", 8);
    assert_true(bytes_order(b.data, b.len, k.data, k.len) < 0);
    assert_true(bytes_order(k.data, k.len, e.data, e.len) < 0);
    /* With no elements: the whole subspace. */
    b.len = e.len = 0;
    assert_int_equal(kvq_subspace_range(&b, &e, sub, NULL, 0), 0);
    assert_bytes(b.data, b.len, (const uint8_t *)"\xfe\x01q\x00\x00", 5);
    assert_bytes(e.data, e.len, (const uint8_t *)"\xfe\x01q\x00\xff", 5);

    /* pack_vs offsets count the prefix: 4 bytes of prefix, 33 at 4, the stamp at 5. */
    kvq_buf v = KVQ_BUF_INIT;
    kvq_tuple_elem stamp[1] = { kvq_tuple_vs_incomplete(3) };
    assert_int_equal(kvq_subspace_pack_vs(&v, sub, stamp, 1), 0);
    hexbuf want = hex("fe 01 71 00 33 ff ff ff ff ff ff ff ff ff ff 00 03 05 00 00 00");
    assert_bytes(v.data, v.len, want.b, want.n);
    /* Errors leave the buffer as it was. */
    size_t before = v.len;
    assert_int_equal(kvq_subspace_pack_vs(&v, sub, key, 2), KVQ_EINVAL);
    assert_int_equal(kvq_subspace_pack(&v, sub, stamp, 1), KVQ_EINVAL);
    assert_int_equal(v.len, before);
    kvq_subspace_destroy(sub);

    /* erlfdb's durable queue through a subspace (b"q",): exactly its push key. */
    assert_int_equal(kvq_subspace_new(&sub, NULL, 0, q, 1), 0);
    kvq_tuple_elem push[2] = { kvq_tuple_bytes("val", 3), kvq_tuple_vs_incomplete(0) };
    v.len = 0;
    assert_int_equal(kvq_subspace_pack_vs(&v, sub, push, 2), 0);
    want = hex("01 71 00 01 76 61 6c 00 33 ff ff ff ff ff ff ff ff ff ff 00 00 09 00 00 00");
    assert_bytes(v.data, v.len, want.b, want.n);
    kvq_subspace_destroy(sub);

    /* Raw prefix only; and the empty subspace, which holds every key. */
    assert_int_equal(kvq_subspace_new(&sub, (const uint8_t *)"ab", 2, NULL, 0), 0);
    assert_bytes(kvq_subspace_get_prefix(sub).data, kvq_subspace_get_prefix(sub).len,
                 (const uint8_t *)"ab", 2);
    kvq_subspace_destroy(sub);
    assert_int_equal(kvq_subspace_new(&sub, NULL, 0, NULL, 0), 0);
    assert_int_equal(kvq_subspace_get_prefix(sub).len, 0);
    assert_int_equal(kvq_subspace_contains(sub, NULL, 0), 1);
    assert_int_equal(kvq_subspace_contains(sub, (const uint8_t *)"\xff", 1), 1);
    kvq_subspace_destroy(sub);

    /* A prefix longer than a key may be. */
    uint8_t *big = calloc(1, 10001);
    assert_int_equal(kvq_subspace_new(&sub, big, 10000, NULL, 0), 0);
    kvq_subspace_destroy(sub);
    sub = (kvq_subspace *)&sub;
    assert_int_equal(kvq_subspace_new(&sub, big, 10001, NULL, 0), KVQ_EINVAL);
    assert_null(sub);
    assert_non_null(strstr(kvq_last_error(), "10001"));
    free(big);
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&b);
    kvq_buf_dispose(&e);
    kvq_buf_dispose(&v);
}

/* ---- bad arguments --------------------------------------------------------------------------- */

/* The call fails with KVQ_EINVAL and records a detail of its own. */
#define EXPECT_EINVAL(call)                                  \
    do {                                                     \
        kvq__error_clear();                                  \
        assert_int_equal((call), KVQ_EINVAL);                \
        assert_true(kvq_last_error()[0] != '\0');            \
        assert_int_equal(kvq_last_error_code(), KVQ_EINVAL); \
    } while (0)

static void test_bad_arguments(void **state)
{
    (void)state;
    uint8_t buf[8];
    size_t n;
    kvq_tuple_elem e = kvq_tuple_int(300);
    kvq_tuple *t;
    kvq_buf b = KVQ_BUF_INIT, b2 = KVQ_BUF_INIT;
    kvq_subspace *s;
    assert_int_equal(kvq_subspace_new(&s, NULL, 0, &e, 1), 0);

    EXPECT_EINVAL(kvq_tuple_pack(NULL, 0, NULL, &e, 1));
    EXPECT_EINVAL(kvq_tuple_pack(buf, sizeof(buf), NULL, &e, 1));
    EXPECT_EINVAL(kvq_tuple_pack(NULL, 5, &n, &e, 1));
    EXPECT_EINVAL(kvq_tuple_pack(buf, sizeof(buf), &n, NULL, 1));
    EXPECT_EINVAL(kvq_tuple_pack_buf(NULL, &e, 1));
    EXPECT_EINVAL(kvq_tuple_pack_buf(&b, NULL, 2));
    EXPECT_EINVAL(kvq_tuple_pack_vs(NULL, &e, 1));
    EXPECT_EINVAL(kvq_tuple_pack_vs(&b, NULL, 2));
    EXPECT_EINVAL(kvq_tuple_unpack(NULL, buf, 1));
    t = (kvq_tuple *)&t;
    EXPECT_EINVAL(kvq_tuple_unpack(&t, NULL, 1));
    assert_null(t);
    assert_int_equal(kvq_tuple_get_count(NULL), 0);
    assert_null(kvq_tuple_get_elem(NULL, 0));
    kvq_tuple_destroy(NULL);
    EXPECT_EINVAL(kvq_tuple_range(NULL, &b2, NULL, 0));
    EXPECT_EINVAL(kvq_tuple_range(&b, NULL, NULL, 0));
    EXPECT_EINVAL(kvq_tuple_range(&b, &b, NULL, 0));
    EXPECT_EINVAL(kvq_tuple_range(&b, &b2, NULL, 3));
    EXPECT_EINVAL(kvq_bytes_strinc(NULL, buf, 1));
    EXPECT_EINVAL(kvq_bytes_strinc(&b, NULL, 1));
    EXPECT_EINVAL(kvq_bytes_strinc(&b, NULL, 0));
    EXPECT_EINVAL(kvq_subspace_new(NULL, NULL, 0, NULL, 0));
    kvq_subspace *s2 = (kvq_subspace *)&s2;
    EXPECT_EINVAL(kvq_subspace_new(&s2, NULL, 3, NULL, 0));
    assert_null(s2);
    EXPECT_EINVAL(kvq_subspace_new(&s2, NULL, 0, NULL, 1));
    kvq_tuple_elem vs = kvq_tuple_vs_incomplete(0);
    EXPECT_EINVAL(kvq_subspace_new(&s2, NULL, 0, &vs, 1));
    assert_null(s2);
    kvq_subspace_destroy(NULL);
    assert_null(kvq_subspace_get_prefix(NULL).data);
    assert_int_equal(kvq_subspace_get_prefix(NULL).len, 0);
    EXPECT_EINVAL(kvq_subspace_pack(NULL, s, &e, 1));
    EXPECT_EINVAL(kvq_subspace_pack(&b, NULL, &e, 1));
    EXPECT_EINVAL(kvq_subspace_pack(&b, s, NULL, 1));
    EXPECT_EINVAL(kvq_subspace_pack_vs(NULL, s, &vs, 1));
    EXPECT_EINVAL(kvq_subspace_pack_vs(&b, NULL, &vs, 1));
    EXPECT_EINVAL(kvq_subspace_pack_vs(&b, s, NULL, 1));
    assert_int_equal(b.len, 0);
    EXPECT_EINVAL(kvq_subspace_unpack(NULL, s, buf, 1));
    t = (kvq_tuple *)&t;
    EXPECT_EINVAL(kvq_subspace_unpack(&t, NULL, buf, 1));
    assert_null(t);
    EXPECT_EINVAL(kvq_subspace_unpack(&t, s, NULL, 1));
    kvq__error_clear();
    assert_int_equal(kvq_subspace_contains(NULL, buf, 1), 0);
    assert_non_null(strstr(kvq_last_error(), "kvq_subspace_contains"));
    kvq__error_clear();
    assert_int_equal(kvq_subspace_contains(s, NULL, 1), 0);
    assert_non_null(strstr(kvq_last_error(), "kvq_subspace_contains"));
    EXPECT_EINVAL(kvq_subspace_range(NULL, &b2, s, NULL, 0));
    EXPECT_EINVAL(kvq_subspace_range(&b, NULL, s, NULL, 0));
    EXPECT_EINVAL(kvq_subspace_range(&b, &b2, NULL, NULL, 0));
    EXPECT_EINVAL(kvq_subspace_range(&b, &b, s, NULL, 0));
    EXPECT_EINVAL(kvq_subspace_range(&b, &b2, s, NULL, 4));
    assert_int_equal(b.len, 0);
    assert_int_equal(b2.len, 0);
    /* An uninitialised-looking buffer is refused, not written through. */
    kvq_buf junk = { NULL, 5, 0 };
    EXPECT_EINVAL(kvq_tuple_pack_buf(&junk, &e, 1));
    /* The empty input is the empty tuple, also with NULL data. */
    assert_int_equal(kvq_tuple_unpack(&t, NULL, 0), 0);
    assert_int_equal(kvq_tuple_get_count(t), 0);
    assert_null(kvq_tuple_get_elem(t, 0));
    kvq_tuple_destroy(t);
    kvq_subspace_destroy(s);
    kvq_buf_dispose(&b);
    kvq_buf_dispose(&b2);
}

/* ---- the builder, strict equality, printable and format ---- */

static void test_builder_matches_pack(void **state)
{
    (void)state;
    /* ("orders", (2026, null, b"\x00z"), -5, ()) packed from arrays ... */
    kvq_tuple_elem inner[3] = { kvq_tuple_int(2026), kvq_tuple_null(),
                                kvq_tuple_bytes("\x00z", 2) };
    kvq_tuple_elem t[4] = { kvq_tuple_str("orders"), kvq_tuple_nested(inner, 3),
                            kvq_tuple_int(-5), kvq_tuple_nested(NULL, 0) };
    kvq_buf want = KVQ_BUF_INIT, got = KVQ_BUF_INIT;
    assert_int_equal(kvq_tuple_pack_buf(&want, t, 4), 0);
    /* ... and built element by element, after a raw prefix. */
    assert_int_equal(kvq_buf_append(&got, "P", 1), 0);
    kvq_tuple_builder b;
    kvq_tuple_builder_init(&b, &got);
    kvq_tuple_add(&b, kvq_tuple_str("orders"));
    kvq_tuple_nest_begin(&b);
    kvq_tuple_add(&b, kvq_tuple_int(2026));
    kvq_tuple_add(&b, kvq_tuple_null());
    kvq_tuple_add(&b, kvq_tuple_bytes("\x00z", 2));
    kvq_tuple_nest_end(&b);
    kvq_tuple_add(&b, kvq_tuple_int(-5));
    kvq_tuple_nest_begin(&b);
    kvq_tuple_nest_end(&b);
    assert_int_equal(kvq_tuple_builder_finish(&b), 0);
    assert_int_equal(got.len, want.len + 1);
    assert_memory_equal(got.data + 1, want.data, want.len);
    /* The nested null is 00 FF; the top-level one would be 00. */
    assert_non_null(memmem(got.data, got.len, "\x05\x16\x07\xea\x00\xff\x01\x00\xffz\x00\x00", 12));
    /* An incomplete versionstamp: the same bytes and offset as kvq_tuple_pack_vs. */
    kvq_tuple_elem v[2] = { kvq_tuple_str("q"), kvq_tuple_vs_incomplete(7) };
    kvq_tuple_elem vt[2] = { kvq_tuple_int(1), kvq_tuple_nested(v, 2) };
    want.len = 0;
    assert_int_equal(kvq_buf_append(&want, "raw", 3), 0);
    assert_int_equal(kvq_tuple_pack_vs(&want, vt, 2), 0);
    got.len = 0;
    assert_int_equal(kvq_buf_append(&got, "raw", 3), 0);
    kvq_tuple_builder_init(&b, &got);
    kvq_tuple_add(&b, kvq_tuple_int(1));
    kvq_tuple_nest_begin(&b);
    kvq_tuple_add(&b, kvq_tuple_str("q"));
    kvq_tuple_add(&b, kvq_tuple_vs_incomplete(7));
    kvq_tuple_nest_end(&b);
    assert_int_equal(kvq_tuple_builder_finish(&b), 0);
    assert_int_equal(got.len, want.len);
    assert_memory_equal(got.data, want.data, want.len);
    kvq_buf_dispose(&want);
    kvq_buf_dispose(&got);
}

static void test_builder_errors(void **state)
{
    (void)state;
    kvq_buf out = KVQ_BUF_INIT;
    assert_int_equal(kvq_buf_append(&out, "keep", 4), 0);
    kvq_tuple_builder b;
    /* A close without an open; the first error stays, later calls do nothing. */
    kvq_tuple_builder_init(&b, &out);
    kvq_tuple_add(&b, kvq_tuple_int(1));
    kvq_tuple_nest_end(&b);
    kvq_tuple_add(&b, kvq_tuple_int(2));
    assert_int_equal(kvq_tuple_builder_finish(&b), KVQ_EINVAL);
    assert_int_equal(out.len, 4);
    /* A nested tuple left open. */
    kvq_tuple_builder_init(&b, &out);
    kvq_tuple_nest_begin(&b);
    assert_int_equal(kvq_tuple_builder_finish(&b), KVQ_EINVAL);
    assert_int_equal(out.len, 4);
    /* A string that is not UTF-8. */
    kvq_tuple_builder_init(&b, &out);
    kvq_tuple_add(&b, kvq_tuple_strn("\xff", 1));
    assert_int_equal(kvq_tuple_builder_finish(&b), KVQ_EINVAL);
    assert_int_equal(out.len, 4);
    /* Two incomplete versionstamps. */
    kvq_tuple_builder_init(&b, &out);
    kvq_tuple_add(&b, kvq_tuple_vs_incomplete(1));
    kvq_tuple_add(&b, kvq_tuple_vs_incomplete(2));
    assert_int_equal(kvq_tuple_builder_finish(&b), KVQ_EINVAL);
    assert_int_equal(out.len, 4);
    /* Nesting: 64 levels are fine, the 65th is not. */
    kvq_tuple_builder_init(&b, &out);
    for (int i = 0; i < KVQ_TUPLE_MAX_DEPTH; i++)
        kvq_tuple_nest_begin(&b);
    for (int i = 0; i < KVQ_TUPLE_MAX_DEPTH; i++)
        kvq_tuple_nest_end(&b);
    assert_int_equal(kvq_tuple_builder_finish(&b), 0);
    assert_int_equal(out.len, 4 + 2 * KVQ_TUPLE_MAX_DEPTH);
    out.len = 4;
    kvq_tuple_builder_init(&b, &out);
    for (int i = 0; i <= KVQ_TUPLE_MAX_DEPTH; i++)
        kvq_tuple_nest_begin(&b);
    assert_int_equal(kvq_tuple_builder_finish(&b), KVQ_EINVAL);
    assert_int_equal(out.len, 4);
    /* NULLs. */
    kvq_tuple_builder_init(&b, NULL);
    kvq_tuple_add(&b, kvq_tuple_int(1));
    kvq_tuple_nest_begin(&b);
    assert_int_equal(kvq_tuple_builder_finish(&b), KVQ_EINVAL);
    assert_int_equal(kvq_tuple_builder_finish(NULL), KVQ_EINVAL);
    kvq_tuple_builder_init(NULL, &out);
    kvq_tuple_add(NULL, kvq_tuple_int(1));
    kvq_tuple_nest_begin(NULL);
    kvq_tuple_nest_end(NULL);
    assert_int_equal(out.len, 4);
    kvq_buf_dispose(&out);
}

static void test_strict_equality(void **state)
{
    (void)state;
    kvq_tuple_elem i1 = kvq_tuple_int(1), d1 = kvq_tuple_double(1.0), f1 = kvq_tuple_float(1.0f);
    kvq_tuple_elem u5 = kvq_tuple_uint(5), i5 = kvq_tuple_int(5);
    kvq_tuple_elem pz = kvq_tuple_double(0.0), nz = kvq_tuple_double(-0.0);
    kvq_tuple_elem s = kvq_tuple_str("a"), by = kvq_tuple_bytes("a", 1);
    assert_int_equal(kvq_tuple_equal(&i1, 1, &i1, 1), 1);
    assert_int_equal(kvq_tuple_equal(&i1, 1, &d1, 1), 0);
    assert_int_equal(kvq_tuple_equal(&d1, 1, &f1, 1), 0);
    assert_int_equal(kvq_tuple_equal(&u5, 1, &i5, 1), 1);
    assert_int_equal(kvq_tuple_equal(&pz, 1, &nz, 1), 0);
    assert_int_equal(kvq_tuple_equal(&s, 1, &by, 1), 0);
    assert_int_equal(kvq_tuple_equal(NULL, 0, NULL, 0), 1);
    assert_int_equal(kvq_tuple_equal(&i1, 1, NULL, 0), 0);
    assert_int_equal(kvq_tuple_equal(NULL, 1, &i1, 1), 0);
    /* A prefix is not equal. */
    kvq_tuple_elem two[2] = { kvq_tuple_int(1), kvq_tuple_int(2) };
    assert_int_equal(kvq_tuple_equal(two, 1, two, 2), 0);
    /* Nested, element by element. */
    kvq_tuple_elem in_a[2] = { kvq_tuple_str("x"), kvq_tuple_null() };
    kvq_tuple_elem in_b[2] = { kvq_tuple_str("x"), kvq_tuple_null() };
    kvq_tuple_elem in_c[2] = { kvq_tuple_str("x"), kvq_tuple_bool(0) };
    kvq_tuple_elem na = kvq_tuple_nested(in_a, 2), nb = kvq_tuple_nested(in_b, 2),
                   nc = kvq_tuple_nested(in_c, 2);
    assert_int_equal(kvq_tuple_equal(&na, 1, &nb, 1), 1);
    assert_int_equal(kvq_tuple_equal(&na, 1, &nc, 1), 0);
    /* What packing refuses equals nothing, itself included. */
    kvq_tuple_elem bad = kvq_tuple_strn("\xc3", 1);
    assert_int_equal(kvq_tuple_equal(&bad, 1, &bad, 1), 0);
}

static void test_printable_and_format(void **state)
{
    (void)state;
    kvq_buf out = KVQ_BUF_INIT;
    assert_int_equal(kvq_bytes_format(&out, (const uint8_t *)"a\x00\\ ~\x7f\xff\"", 8), 0);
    assert_string_equal((const char *)out.data, "a\\x00\\\\ ~\\x7f\\xff\"");
    assert_int_equal(out.len, strlen("a\\x00\\\\ ~\\x7f\\xff\""));
    assert_int_equal(kvq_bytes_format(NULL, NULL, 0), KVQ_EINVAL);
    assert_int_equal(kvq_bytes_format(&out, NULL, 1), KVQ_EINVAL);
    out.len = 0;
    assert_int_equal(kvq_bytes_format(&out, NULL, 0), 0);
    assert_string_equal((const char *)out.data, "");

    uint8_t uuid[16], tr[10];
    for (int i = 0; i < 16; i++)
        uuid[i] = (uint8_t)(i * 17);
    for (int i = 0; i < 10; i++)
        tr[i] = (uint8_t)i;
    kvq_tuple_elem inner[2] = { kvq_tuple_int(2026), kvq_tuple_null() };
    kvq_tuple_elem t[] = {
        kvq_tuple_str("or\"ders"),     kvq_tuple_nested(inner, 2), kvq_tuple_bytes("\x01\\", 2),
        kvq_tuple_int(-5),             kvq_tuple_uint(UINT64_MAX), kvq_tuple_neg_uint(UINT64_MAX),
        kvq_tuple_float(1.5f),         kvq_tuple_double(0.1),      kvq_tuple_double(3.0),
        kvq_tuple_bool(1),             kvq_tuple_uuid(uuid),       kvq_tuple_vs(tr, 9),
        kvq_tuple_vs_incomplete(2),    kvq_tuple_nested(NULL, 0),
    };
    out.len = 0;
    assert_int_equal(kvq_tuple_format(&out, t, sizeof(t) / sizeof(t[0])), 0);
    assert_string_equal((const char *)out.data,
                        "(\"or\\x22ders\", (2026, null), b\"\\x01\\\\\", -5, 18446744073709551615, "
                        "-18446744073709551615, 1.5f, 0.1, 3.0, true, "
                        "UUID(00112233-4455-6677-8899-aabbccddeeff), "
                        "Versionstamp(00010203040506070809, 9), Versionstamp(incomplete, 2), ())");
    /* Special doubles, and the empty tuple. */
    kvq_tuple_elem sp[3] = { kvq_tuple_double(-INFINITY), kvq_tuple_double(NAN),
                             kvq_tuple_float(0.1f) };
    out.len = 0;
    assert_int_equal(kvq_tuple_format(&out, sp, 3), 0);
    assert_string_equal((const char *)out.data, "(-inf, nan, 0.1f)");
    out.len = 0;
    assert_int_equal(kvq_tuple_format(&out, NULL, 0), 0);
    assert_string_equal((const char *)out.data, "()");
    /* Bad input leaves out as it was. */
    size_t before = out.len;
    kvq_tuple_elem unknown = kvq_tuple_int(0);
    unknown.type = (kvq_tuple_type)99;
    assert_int_equal(kvq_tuple_format(&out, &unknown, 1), KVQ_EINVAL);
    assert_int_equal(out.len, before);
    assert_int_equal(kvq_tuple_format(NULL, t, 1), KVQ_EINVAL);
    assert_int_equal(kvq_tuple_format(&out, NULL, 1), KVQ_EINVAL);
    /* What an unpacked tuple prints is what was packed. */
    kvq_buf packed = KVQ_BUF_INIT;
    assert_int_equal(kvq_tuple_pack_buf(&packed, t, 12), 0);
    kvq_tuple *u;
    assert_int_equal(kvq_tuple_unpack(&u, packed.data, packed.len), 0);
    kvq_buf again = KVQ_BUF_INIT;
    out.len = 0;
    assert_int_equal(kvq_tuple_format(&out, t, 12), 0);
    assert_int_equal(kvq_tuple_format(&again, kvq_tuple_get_elem(u, 0), kvq_tuple_get_count(u)), 0);
    assert_string_equal((const char *)again.data, (const char *)out.data);
    assert_int_equal(kvq_tuple_equal(kvq_tuple_get_elem(u, 0), kvq_tuple_get_count(u), t, 12), 1);
    kvq_tuple_destroy(u);
    kvq_buf_dispose(&packed);
    kvq_buf_dispose(&again);
    kvq_buf_dispose(&out);
}

int main(int argc, char **argv)
{
    seed = kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_examples),
        cmocka_unit_test(test_null_and_nested),
        cmocka_unit_test(test_bytes_and_strings),
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_integer_decoding_edges),
        cmocka_unit_test(test_integers_below_int64_min),
        cmocka_unit_test(test_floats_and_doubles),
        cmocka_unit_test(test_bool_and_uuid),
        cmocka_unit_test(test_versionstamps),
        cmocka_unit_test(test_erlfdb_keys),
        cmocka_unit_test(test_recipe_keys),
        cmocka_unit_test(test_caller_buffer),
        cmocka_unit_test(test_compare),
        cmocka_unit_test(test_random_round_trip_and_order),
        cmocka_unit_test(test_random_sort),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_invalid_elements),
        cmocka_unit_test(test_ranges_and_strinc),
        cmocka_unit_test(test_subspaces),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_builder_matches_pack),
        cmocka_unit_test(test_builder_errors),
        cmocka_unit_test(test_strict_equality),
        cmocka_unit_test(test_printable_and_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
