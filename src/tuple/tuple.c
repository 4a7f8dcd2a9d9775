/* FoundationDB's tuple encoding (design/tuple.md): packing, strict bounded unpacking, the
 * ordering of packed tuples, ranges and strinc. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kvq/tuple.h"
#include "tuple/tuple_internal.h"
#include "util/bytes.h"
#include "util/util.h"

/* Type codes. Integers use every code from CODE_NEG_LONG to CODE_POS_LONG: 0x14 - n for an
 * n-byte negative number, 0x14 + n for an n-byte positive one. */
enum {
    CODE_NULL = 0x00,
    CODE_BYTES = 0x01,
    CODE_STRING = 0x02,
    CODE_NESTED_OLD_BEGIN = 0x03, /* deprecated nested tuples, 0x03 ... 0x04 */
    CODE_NESTED_OLD_END = 0x04,
    CODE_NESTED = 0x05,
    CODE_NEG_RESERVED = 0x0a, /* reserved for a future negative big-integer form */
    CODE_NEG_LONG = 0x0b,     /* negative, 9-255 bytes (Python and Java write it) */
    CODE_NEG_8 = 0x0c,
    CODE_ZERO = 0x14,
    CODE_POS_8 = 0x1c,
    CODE_POS_LONG = 0x1d,     /* positive, 9-255 bytes */
    CODE_POS_RESERVED = 0x1e, /* reserved for a future positive big-integer form */
    CODE_FLOAT = 0x20,
    CODE_DOUBLE = 0x21,
    CODE_LONG_DOUBLE = 0x22, /* reserved */
    CODE_DECIMAL_A = 0x23,   /* reserved */
    CODE_DECIMAL_B = 0x24,   /* reserved */
    CODE_OLD_TRUE = 0x25,    /* deprecated */
    CODE_FALSE = 0x26,
    CODE_TRUE = 0x27,
    CODE_UUID = 0x30,
    CODE_ID64 = 0x31, /* reserved: 64-bit identifier */
    CODE_VS80 = 0x32, /* reserved: 80-bit versionstamp */
    CODE_VS96 = 0x33,
    CODE_USER_FIRST = 0x40, /* 0x40 ... 0x4f: user type codes */
    CODE_USER_LAST = 0x4f,
    CODE_ESCAPE = 0xff
};

_Static_assert(CODE_ZERO - CODE_NEG_8 == 8 && CODE_POS_8 - CODE_ZERO == 8,
               "integer codes cover 1 to 8 bytes each side of zero");
_Static_assert(sizeof(float) == 4 && sizeof(double) == 8, "IEEE binary32 and binary64 expected");
_Static_assert(sizeof(((kvq_tuple_elem *)0)->v.uuid) == 16, "a UUID is 16 bytes");
_Static_assert(sizeof(((kvq_tuple_elem *)0)->v.vs.tr) == 10, "a versionstamp's stamp is 10 bytes");

/* ---- UTF-8 --------------------------------------------------------------------------------- */

/* Returns the offset of the first byte of the first invalid sequence, or len when p[0..len) is
 * valid UTF-8: no overlong forms, no surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no
 * stray continuation bytes, no sequence cut short. U+0000 is valid (written as one 0x00). */
static size_t utf8_invalid_at(const uint8_t *p, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = p[i];
        size_t n;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            n = 1;
            cp = c & 0x1fu;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            cp = c & 0x0fu;
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            cp = c & 0x07u;
        } else {
            return i; /* a continuation byte, 0xc0/0xc1 (always overlong) or 0xf5 and above */
        }
        if (len - i <= n)
            return i;
        for (size_t k = 1; k <= n; k++) {
            if ((p[i + k] & 0xc0) != 0x80)
                return i;
            cp = (cp << 6) | (p[i + k] & 0x3fu);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return i;
        i += n + 1;
    }
    return len;
}

/* ---- packing ------------------------------------------------------------------------------- */

/* A writer that counts bytes past the end of its buffer, so that one pass gives the size
 * needed and a second one (or the same one, when the buffer is big enough) writes. */
typedef struct writer {
    uint8_t *buf;
    size_t cap, len;
    size_t vs_count; /* incomplete versionstamps seen */
    size_t vs_at;    /* offset of the last one's 10 stamp bytes */
} writer;

static void put(writer *w, uint8_t b)
{
    if (w->len < w->cap)
        w->buf[w->len] = b;
    w->len++;
}

/* Bytes with each 0x00 written as 00 FF, then the terminating 00. */
static void put_escaped(writer *w, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        put(w, p[i]);
        if (p[i] == 0x00)
            put(w, 0xff);
    }
    put(w, 0x00);
}

/* Number of bytes in the minimal big-endian form of m (0 for 0). */
static unsigned byte_len(uint64_t m)
{
    unsigned n = 0;
    while (m != 0) {
        n++;
        m >>= 8;
    }
    return n;
}

static void put_be(writer *w, uint64_t v, unsigned n)
{
    uint8_t b[8];
    kvq__be_put(b, v, n);
    for (unsigned i = 0; i < n; i++)
        put(w, b[i]);
}

/* 0 is 0x14 alone; otherwise 0x14 + n and n big-endian bytes. UINT64_MAX takes the 8-byte code
 * 0x1c (as Java, Go and erlfdb write it; Python writes 1d 08 ff..ff). */
static void put_uint(writer *w, uint64_t v)
{
    unsigned n = byte_len(v);
    put(w, (uint8_t)(CODE_ZERO + n));
    put_be(w, v, n);
}

/* The integer -m: 0x14 - n and the one's complement of the magnitude m in n bytes, so that -1
 * is 13 FE and -(2^64-1) is 0c 00x8 (the 8-byte form the Java, Go and erlfdb bindings write). */
static void put_neg(writer *w, uint64_t m)
{
    if (m == 0) {
        put_uint(w, 0);
        return;
    }
    unsigned n = byte_len(m);
    uint64_t mask = n == 8 ? UINT64_MAX : (((uint64_t)1 << (8 * n)) - 1u);
    put(w, (uint8_t)(CODE_ZERO - n));
    put_be(w, mask - m, n);
}

static void put_int(writer *w, int64_t v)
{
    if (v >= 0) {
        put_uint(w, (uint64_t)v);
        return;
    }
    put_neg(w, (uint64_t)(-(v + 1)) + 1u); /* the magnitude, without overflow at INT64_MIN */
}

size_t kvq__tuple_put_int(uint8_t *p, int64_t v)
{
    writer w = { p, KVQ__TUPLE_INT_MAX, 0, 0, 0 };
    put_int(&w, v);
    return w.len;
}

size_t kvq__tuple_put_bytes(uint8_t *p, const uint8_t *bytes, size_t n)
{
    writer w = { p, 2 * n + 2, 0, 0, 0 };
    put(&w, CODE_BYTES);
    put_escaped(&w, bytes, n);
    return w.len;
}

/* IEEE bits, transformed so that unsigned order is numeric order: a set sign bit flips every
 * bit, a clear one flips only the sign. */
static uint32_t float_key(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

static uint64_t double_key(double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof(bits));
    return (bits & 0x8000000000000000u) ? ~bits : (bits | 0x8000000000000000u);
}

static int all_ff(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != 0xff)
            return 0;
    return 1;
}

static int pack_elems(writer *w, const kvq_tuple_elem *elems, size_t count, int depth);

/* depth is the nesting level of the tuple holding e: 0 at the top. */
static int pack_elem(writer *w, const kvq_tuple_elem *e, int depth)
{
    switch (e->type) {
    case KVQ_TUPLE_NULL:
        put(w, CODE_NULL);
        if (depth > 0)
            put(w, CODE_ESCAPE);
        return 0;
    case KVQ_TUPLE_BYTES:
    case KVQ_TUPLE_STRING:
        if (e->v.bytes.data == NULL && e->v.bytes.len > 0)
            return kvq__error(KVQ_EINVAL, "tuple: %s element has NULL data and length %zu",
                              e->type == KVQ_TUPLE_BYTES ? "bytes" : "string", e->v.bytes.len);
        if (e->type == KVQ_TUPLE_STRING) {
            size_t bad = utf8_invalid_at(e->v.bytes.data, e->v.bytes.len);
            if (bad < e->v.bytes.len)
                return kvq__error(KVQ_EINVAL,
                                  "tuple: string element is not valid UTF-8 at its byte %zu", bad);
        }
        put(w, e->type == KVQ_TUPLE_BYTES ? CODE_BYTES : CODE_STRING);
        put_escaped(w, e->v.bytes.data, e->v.bytes.len);
        return 0;
    case KVQ_TUPLE_NESTED: {
        if (depth + 1 > KVQ_TUPLE_MAX_DEPTH)
            return kvq__error(KVQ_EINVAL, "tuple: nested tuples deeper than %d levels",
                              KVQ_TUPLE_MAX_DEPTH);
        if (e->v.nested.elems == NULL && e->v.nested.count > 0)
            return kvq__error(KVQ_EINVAL, "tuple: nested element has NULL elements and count %zu",
                              e->v.nested.count);
        put(w, CODE_NESTED);
        int rc = pack_elems(w, e->v.nested.elems, e->v.nested.count, depth + 1);
        if (rc != 0)
            return rc;
        put(w, 0x00);
        return 0;
    }
    case KVQ_TUPLE_INT:
        put_int(w, e->v.i);
        return 0;
    case KVQ_TUPLE_UINT:
        put_uint(w, e->v.u);
        return 0;
    case KVQ_TUPLE_NEG_UINT:
        put_neg(w, e->v.u);
        return 0;
    case KVQ_TUPLE_FLOAT:
        put(w, CODE_FLOAT);
        put_be(w, float_key(e->v.f), 4);
        return 0;
    case KVQ_TUPLE_DOUBLE:
        put(w, CODE_DOUBLE);
        put_be(w, double_key(e->v.d), 8);
        return 0;
    case KVQ_TUPLE_BOOL:
        put(w, e->v.b ? CODE_TRUE : CODE_FALSE);
        return 0;
    case KVQ_TUPLE_UUID:
        put(w, CODE_UUID);
        for (int i = 0; i < 16; i++)
            put(w, e->v.uuid[i]);
        return 0;
    case KVQ_TUPLE_VERSIONSTAMP:
        put(w, CODE_VS96);
        if (!e->v.vs.complete) {
            w->vs_count++;
            w->vs_at = w->len;
            for (int i = 0; i < 10; i++)
                put(w, 0xff);
        } else {
            /* Ten 0xFF bytes are what marks a stamp incomplete (every binding reads them so); a
             * complete one cannot have them. */
            if (all_ff(e->v.vs.tr, 10))
                return kvq__error(KVQ_EINVAL, "tuple: a complete versionstamp's 10 bytes are all "
                                              "0xFF, the mark of an incomplete one");
            for (int i = 0; i < 10; i++)
                put(w, e->v.vs.tr[i]);
        }
        put_be(w, e->v.vs.user, 2);
        return 0;
    default:
        return kvq__error(KVQ_EINVAL, "tuple: unknown element type %d", (int)e->type);
    }
}

static int pack_elems(writer *w, const kvq_tuple_elem *elems, size_t count, int depth)
{
    for (size_t i = 0; i < count; i++) {
        int rc = pack_elem(w, &elems[i], depth);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int pack_into(writer *w, const kvq_tuple_elem *elems, size_t count, const char *fn)
{
    if (elems == NULL && count > 0)
        return kvq__error(KVQ_EINVAL, "%s: elems is NULL and count is %zu", fn, count);
    return pack_elems(w, elems, count, 0);
}

int kvq_tuple_pack(uint8_t *out, size_t cap, size_t *len, const kvq_tuple_elem *elems, size_t count)
{
    if (len == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_tuple_pack: len is NULL");
    *len = 0;
    if (out == NULL && cap > 0)
        return kvq__error(KVQ_EINVAL, "kvq_tuple_pack: out is NULL and cap is %zu", cap);
    writer w = { out, cap, 0, 0, 0 };
    int rc = pack_into(&w, elems, count, "kvq_tuple_pack");
    if (rc != 0)
        return rc;
    if (w.vs_count > 0)
        return kvq__error(KVQ_EINVAL, "kvq_tuple_pack: the tuple holds an incomplete "
                                      "versionstamp; pack it with kvq_tuple_pack_vs");
    *len = w.len;
    if (w.len > cap)
        return kvq__error(KVQ_ENOBUFS, "kvq_tuple_pack: needs %zu bytes, the buffer has %zu", w.len,
                          cap);
    return 0;
}

/* Packs and appends to out. With vs: exactly one incomplete stamp, and its offset (from the
 * start of out->data) appended as 4 little-endian bytes. On error out->len is unchanged. */
static int
pack_append(kvq_buf *out, const kvq_tuple_elem *elems, size_t count, int vs, const char *fn)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "%s: out is NULL", fn);
    writer sizing = { NULL, 0, 0, 0, 0 };
    int rc = pack_into(&sizing, elems, count, fn);
    if (rc != 0)
        return rc;
    if (!vs && sizing.vs_count > 0)
        return kvq__error(KVQ_EINVAL,
                          "%s: the tuple holds an incomplete versionstamp; pack it "
                          "with kvq_tuple_pack_vs",
                          fn);
    if (vs && sizing.vs_count != 1)
        return kvq__error(KVQ_EINVAL, "%s: needs exactly one incomplete versionstamp, found %zu",
                          fn, sizing.vs_count);
    if (vs && (uint64_t)out->len + sizing.vs_at > UINT32_MAX)
        return kvq__error(KVQ_EINVAL, "%s: the versionstamp's offset does not fit 32 bits", fn);
    size_t extra = sizing.len + (vs ? 4u : 0u);
    rc = kvq_buf_grow(out, extra);
    if (rc != 0)
        return rc;
    writer w = { out->data + out->len, sizing.len, 0, 0, 0 };
    rc = pack_into(&w, elems, count, fn);
    if (rc != 0)
        return rc;
    if (vs) {
        uint32_t off = (uint32_t)(out->len + w.vs_at);
        kvq__le32_put(out->data + out->len + sizing.len, off);
    }
    out->len += extra;
    return 0;
}

int kvq_tuple_pack_buf(kvq_buf *out, const kvq_tuple_elem *elems, size_t count)
{
    return pack_append(out, elems, count, 0, "kvq_tuple_pack_buf");
}

int kvq_tuple_pack_vs(kvq_buf *out, const kvq_tuple_elem *elems, size_t count)
{
    return pack_append(out, elems, count, 1, "kvq_tuple_pack_vs");
}

/* ---- strict equality ----------------------------------------------------------------------- */

bool kvq_tuple_equal(const kvq_tuple_elem *a, size_t na, const kvq_tuple_elem *b, size_t nb)
{
    writer wa = { NULL, 0, 0, 0, 0 }, wb = { NULL, 0, 0, 0, 0 };
    if ((a == NULL && na > 0) || (b == NULL && nb > 0) || pack_elems(&wa, a, na, 0) != 0 ||
        pack_elems(&wb, b, nb, 0) != 0 || wa.len != wb.len)
        return false;
    if (wa.len == 0)
        return true;
    uint8_t *pa = kvq__malloc(wa.len), *pb = kvq__malloc(wb.len);
    int eq = 0;
    if (pa != NULL && pb != NULL) {
        writer xa = { pa, wa.len, 0, 0, 0 }, xb = { pb, wb.len, 0, 0, 0 };
        eq = pack_elems(&xa, a, na, 0) == 0 && pack_elems(&xb, b, nb, 0) == 0 &&
             memcmp(pa, pb, wa.len) == 0;
    } else {
        /* No memory for the bytes: the order, whose 0 means the same encoding. */
        eq = kvq_tuple_compare(a, na, b, nb) == 0;
    }
    kvq__free(pa);
    kvq__free(pb);
    return eq;
}

/* ---- building, element by element ----------------------------------------------------------- */

static void build_fail(kvq_tuple_builder *b, int rc)
{
    if (b->error == 0)
        b->error = rc;
}

/* Appends bytes the writer made at depth (0: the top) to b->out. */
static void build_elem(kvq_tuple_builder *b, const kvq_tuple_elem *e)
{
    writer sizing = { NULL, 0, 0, 0, 0 };
    int rc = pack_elem(&sizing, e, b->depth);
    if (rc == 0 && b->vs_count + sizing.vs_count > 1)
        rc = kvq__error(KVQ_EINVAL, "kvq_tuple_add: a second incomplete versionstamp");
    if (rc == 0)
        rc = kvq_buf_grow(b->out, sizing.len);
    if (rc != 0) {
        build_fail(b, rc);
        return;
    }
    writer w = { b->out->data + b->out->len, sizing.len, 0, 0, 0 };
    rc = pack_elem(&w, e, b->depth);
    if (rc != 0) {
        build_fail(b, rc);
        return;
    }
    if (w.vs_count > 0) {
        b->vs_count++;
        b->vs_at = b->out->len + w.vs_at;
    }
    b->out->len += sizing.len;
}

void kvq_tuple_builder_init(kvq_tuple_builder *b, kvq_buf *dest)
{
    if (b == NULL)
        return;
    memset(b, 0, sizeof(*b));
    b->out = dest;
    if (dest == NULL)
        b->error = kvq__error(KVQ_EINVAL, "kvq_tuple_builder_init: dest is NULL");
    else
        b->start = dest->len;
}

void kvq_tuple_add(kvq_tuple_builder *b, kvq_tuple_elem e)
{
    if (b != NULL && b->error == 0)
        build_elem(b, &e);
}

void kvq_tuple_nest_begin(kvq_tuple_builder *b)
{
    if (b == NULL || b->error != 0)
        return;
    if (b->depth + 1 > KVQ_TUPLE_MAX_DEPTH) {
        build_fail(b, kvq__error(KVQ_EINVAL,
                                 "kvq_tuple_nest_begin: nested tuples deeper than %d levels",
                                 KVQ_TUPLE_MAX_DEPTH));
        return;
    }
    uint8_t code = CODE_NESTED;
    int rc = kvq_buf_append(b->out, &code, 1);
    if (rc != 0)
        build_fail(b, rc);
    else
        b->depth++;
}

void kvq_tuple_nest_end(kvq_tuple_builder *b)
{
    if (b == NULL || b->error != 0)
        return;
    if (b->depth == 0) {
        build_fail(b, kvq__error(KVQ_EINVAL, "kvq_tuple_nest_end: no nested tuple is open"));
        return;
    }
    uint8_t end = 0x00;
    int rc = kvq_buf_append(b->out, &end, 1);
    if (rc != 0)
        build_fail(b, rc);
    else
        b->depth--;
}

int kvq_tuple_builder_finish(kvq_tuple_builder *b)
{
    if (b == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_tuple_builder_finish: builder is NULL");
    if (b->error == 0 && b->depth != 0)
        build_fail(b, kvq__error(KVQ_EINVAL,
                                 "kvq_tuple_builder_finish: %d nested tuple(s) still "
                                 "open",
                                 b->depth));
    if (b->error == 0 && b->vs_count == 1) {
        if ((uint64_t)b->vs_at > UINT32_MAX) {
            build_fail(b, kvq__error(KVQ_EINVAL, "kvq_tuple_builder_finish: the versionstamp's "
                                                 "offset does not fit 32 bits"));
        } else {
            uint8_t off[4];
            kvq__le32_put(off, (uint32_t)b->vs_at);
            int rc = kvq_buf_append(b->out, off, 4);
            if (rc != 0)
                build_fail(b, rc);
        }
    }
    if (b->error != 0 && b->out != NULL)
        b->out->len = b->start; /* nothing of a failed build stays */
    return b->error;
}

/* ---- unpacking ----------------------------------------------------------------------------- */

/* Memory of an unpacked tuple: blocks freed together with it. Each nested tuple's elements are
 * one array in a block, so kvq_tuple_get_elem(t, 0) and v.nested.elems are arrays. */
typedef struct block {
    struct block *next;
    size_t used, cap;
    max_align_t data[];
} block;

struct kvq_tuple {
    kvq_tuple_elem *elems;
    size_t count;
    block *blocks;
};

static void *tuple_alloc(kvq_tuple *t, size_t n)
{
    const size_t align = _Alignof(max_align_t);
    n = (n + align - 1) / align * align;
    block *b = t->blocks;
    if (b == NULL || b->cap - b->used < n) {
        /* Start small (most tuples are keys of a few elements) and double. */
        size_t cap = b == NULL ? 256 : (b->cap < SIZE_MAX / 4 ? 2 * b->cap : b->cap);
        if (cap < n)
            cap = n;
        block *nb = kvq__malloc(sizeof(*nb) + cap);
        if (nb == NULL)
            return NULL;
        nb->cap = cap;
        nb->used = 0;
        nb->next = t->blocks;
        t->blocks = nb;
        b = nb;
    }
    void *p = (uint8_t *)b->data + b->used;
    b->used += n;
    return p;
}

typedef struct reader {
    const uint8_t *p;
    size_t len, pos;
    kvq_tuple *t;
} reader;

/* Records "tuple: <what> at byte <at> of <len> (<why>)" as a KVQ_ETUPLE error; why may be NULL. */
static int malformed(const reader *r, size_t at, const char *why, const char *fmt, ...)
    KVQ__PRINTF(4, 5);
static int malformed(const reader *r, size_t at, const char *why, const char *fmt, ...)
{
    char what[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return kvq__error(KVQ_ETUPLE, "tuple: %s at byte %zu of %zu%s%s%s", what, at, r->len,
                      why ? " (" : "", why ? why : "", why ? ")" : "");
}

/* The input offset of decoded byte k of an escaped element whose payload starts at start. */
static size_t escaped_offset(const reader *r, size_t start, size_t k)
{
    size_t i = start;
    for (size_t d = 0; d < k; d++)
        i += r->p[i] == 0x00 ? 2 : 1;
    return i;
}

/* Reads an escaped payload (bytes or string) up to its terminator: 00 FF is an escaped 0x00 and
 * any other 00 ends the element, so a 00 can never be left unexplained. */
static int read_escaped(reader *r, size_t at, kvq_tuple_elem *e)
{
    size_t start = r->pos, n = 0, i = r->pos;
    for (;;) {
        if (i >= r->len)
            return malformed(r, at, "no 00 before the end of the input", "unterminated %s",
                             e->type == KVQ_TUPLE_BYTES ? "byte string" : "string");
        if (r->p[i] == 0x00) {
            if (i + 1 < r->len && r->p[i + 1] == 0xff) {
                i += 2;
                n++;
                continue;
            }
            break;
        }
        i++;
        n++;
    }
    uint8_t *dst = tuple_alloc(r->t, n + 1);
    if (dst == NULL)
        return kvq__error(KVQ_ENOMEM, "tuple: out of memory");
    size_t k = 0;
    for (size_t j = start; j < i; j++) {
        dst[k++] = r->p[j];
        if (r->p[j] == 0x00)
            j++; /* the escape's FF */
    }
    dst[k] = 0; /* not part of the value; makes printing a string easy */
    e->v.bytes.data = dst;
    e->v.bytes.len = n;
    r->pos = i + 1;
    if (e->type == KVQ_TUPLE_STRING) {
        size_t bad = utf8_invalid_at(dst, n);
        if (bad < n)
            return kvq__error(KVQ_ETUPLE,
                              "tuple: invalid UTF-8 at byte %zu of %zu (in the string at byte %zu)",
                              escaped_offset(r, start, bad), r->len, at);
    }
    return 0;
}

static int need(const reader *r, size_t n, size_t at, const char *what)
{
    if (r->len - r->pos < n) {
        char why[96];
        snprintf(why, sizeof(why), "needs %zu more bytes, %zu left", n, r->len - r->pos);
        return malformed(r, at, why, "truncated %s", what);
    }
    return 0;
}

/* Reads the n magnitude bytes of an integer that must fit 64 bits. Non-minimal lengths (leading
 * 00 bytes, or FF bytes of a negative number's one's complement) are accepted, as every
 * FoundationDB binding accepts them. */
static int read_magnitude(reader *r, size_t n, size_t at, int negative, uint64_t *out)
{
    int rc = need(r, n, at, "integer");
    if (rc != 0)
        return rc;
    const uint8_t *q = r->p + r->pos;
    const uint8_t lead = negative ? 0xff : 0x00;
    size_t skip = 0;
    while (skip < n && q[skip] == lead)
        skip++;
    size_t m = n - skip;
    if (m > 8)
        return kvq__error(KVQ_ERANGE,
                          "tuple: %s integer of %zu significant bytes is beyond "
                          "64 bits at byte %zu of %zu",
                          negative ? "negative" : "positive", m, at, r->len);
    uint64_t raw = kvq__be_get(q + skip, m);
    if (negative) {
        uint64_t mask = m == 8 ? UINT64_MAX : (((uint64_t)1 << (8 * m)) - 1u);
        raw = mask - raw;
    }
    r->pos += n;
    *out = raw;
    return 0;
}

static void set_negative(uint64_t m, kvq_tuple_elem *e)
{
    if (m > (uint64_t)INT64_MAX + 1u) {
        /* Below INT64_MIN, down to -(2^64-1): the magnitude. */
        e->type = KVQ_TUPLE_NEG_UINT;
        e->v.u = m;
        return;
    }
    e->type = KVQ_TUPLE_INT;
    e->v.i = m == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)m;
}

static void set_positive(uint64_t v, kvq_tuple_elem *e)
{
    if (v > (uint64_t)INT64_MAX) {
        e->type = KVQ_TUPLE_UINT;
        e->v.u = v;
    } else {
        e->type = KVQ_TUPLE_INT;
        e->v.i = (int64_t)v;
    }
}

/* Why a code that is not a type kvq decodes is refused. */
static const char *refused_code(uint8_t code)
{
    if (code == CODE_NESTED_OLD_BEGIN || code == CODE_NESTED_OLD_END)
        return "deprecated type code (old nested tuple)";
    if (code == CODE_OLD_TRUE)
        return "deprecated type code (old true)";
    if (code == CODE_NEG_RESERVED || code == CODE_POS_RESERVED)
        return "reserved type code (big integer)";
    if (code == CODE_LONG_DOUBLE)
        return "reserved type code (long double)";
    if (code == CODE_DECIMAL_A || code == CODE_DECIMAL_B)
        return "reserved type code (decimal)";
    if (code == CODE_ID64)
        return "reserved type code (64-bit identifier)";
    if (code == CODE_VS80)
        return "unsupported type code (80-bit versionstamp)";
    if (code >= CODE_USER_FIRST && code <= CODE_USER_LAST)
        return "unsupported user type code";
    if (code == CODE_ESCAPE)
        return "reserved type code (the escape byte)";
    return "unknown type code";
}

static int read_elems(reader *r, int depth, kvq_tuple_elem **out, size_t *count);

/* Reads one element of the tuple at nesting level depth (0 at the top). */
static int read_elem(reader *r, int depth, kvq_tuple_elem *e)
{
    size_t at = r->pos;
    uint8_t code = r->p[r->pos++];
    memset(e, 0, sizeof(*e));
    if (code == CODE_NULL) {
        /* A nested null is 00 FF; read_elems has seen the FF. */
        e->type = KVQ_TUPLE_NULL;
        if (depth > 0)
            r->pos++;
        return 0;
    }
    if (code == CODE_BYTES || code == CODE_STRING) {
        e->type = code == CODE_BYTES ? KVQ_TUPLE_BYTES : KVQ_TUPLE_STRING;
        return read_escaped(r, at, e);
    }
    if (code == CODE_NESTED) {
        if (depth + 1 > KVQ_TUPLE_MAX_DEPTH)
            return malformed(r, at, NULL, "nested tuple deeper than the limit of %d levels",
                             KVQ_TUPLE_MAX_DEPTH);
        e->type = KVQ_TUPLE_NESTED;
        kvq_tuple_elem *elems = NULL;
        size_t n = 0;
        int rc = read_elems(r, depth + 1, &elems, &n);
        e->v.nested.elems = elems;
        e->v.nested.count = n;
        return rc;
    }
    if (code >= CODE_NEG_8 && code < CODE_ZERO) {
        uint64_t m;
        int rc = read_magnitude(r, (size_t)(CODE_ZERO - code), at, 1, &m);
        if (rc == 0)
            set_negative(m, e);
        return rc;
    }
    if (code >= CODE_ZERO && code <= CODE_POS_8) {
        uint64_t v;
        int rc = read_magnitude(r, (size_t)(code - CODE_ZERO), at, 0, &v);
        if (rc == 0)
            set_positive(v, e);
        return rc;
    }
    if (code == CODE_POS_LONG || code == CODE_NEG_LONG) {
        int negative = code == CODE_NEG_LONG;
        int rc = need(r, 1, at, "integer length");
        if (rc != 0)
            return rc;
        uint8_t n = r->p[r->pos++];
        if (negative)
            n = (uint8_t)~n; /* the length is complemented too, to keep the order */
        uint64_t v;
        rc = read_magnitude(r, n, at, negative, &v);
        if (rc != 0)
            return rc;
        if (negative)
            set_negative(v, e);
        else
            set_positive(v, e);
        return 0;
    }
    if (code == CODE_FLOAT) {
        int rc = need(r, 4, at, "float");
        if (rc != 0)
            return rc;
        uint32_t bits = (uint32_t)kvq__be_get(r->p + r->pos, 4);
        bits = (bits & 0x80000000u) ? (bits & 0x7fffffffu) : ~bits;
        memcpy(&e->v.f, &bits, 4);
        e->type = KVQ_TUPLE_FLOAT;
        r->pos += 4;
        return 0;
    }
    if (code == CODE_DOUBLE) {
        int rc = need(r, 8, at, "double");
        if (rc != 0)
            return rc;
        uint64_t bits = kvq__be_get(r->p + r->pos, 8);
        bits = (bits & 0x8000000000000000u) ? (bits & 0x7fffffffffffffffu) : ~bits;
        memcpy(&e->v.d, &bits, 8);
        e->type = KVQ_TUPLE_DOUBLE;
        r->pos += 8;
        return 0;
    }
    if (code == CODE_FALSE || code == CODE_TRUE) {
        e->type = KVQ_TUPLE_BOOL;
        e->v.b = code == CODE_TRUE;
        return 0;
    }
    if (code == CODE_UUID) {
        int rc = need(r, 16, at, "UUID");
        if (rc != 0)
            return rc;
        e->type = KVQ_TUPLE_UUID;
        memcpy(e->v.uuid, r->p + r->pos, 16);
        r->pos += 16;
        return 0;
    }
    if (code == CODE_VS96) {
        int rc = need(r, 12, at, "versionstamp");
        if (rc != 0)
            return rc;
        e->type = KVQ_TUPLE_VERSIONSTAMP;
        memcpy(e->v.vs.tr, r->p + r->pos, 10);
        e->v.vs.user = (uint16_t)kvq__be_get(r->p + r->pos + 10, 2);
        e->v.vs.complete = !all_ff(e->v.vs.tr, 10);
        r->pos += 12;
        return 0;
    }
    return malformed(r, at, NULL, "%s 0x%02x", refused_code(code), code);
}

/* Reads elements up to the end of the input (depth 0) or up to the nested tuple's end: a 00
 * that is not the start of a nested null (00 FF). */
static int read_elems(reader *r, int depth, kvq_tuple_elem **out, size_t *count)
{
    size_t n = 0, cap = 0;
    kvq_tuple_elem *v = NULL;
    size_t start = r->pos;
    int rc = 0;
    for (;;) {
        if (r->pos >= r->len) {
            if (depth > 0) {
                rc = malformed(r, start - 1, "no 00 before the end of the input",
                               "unterminated nested tuple");
                goto fail;
            }
            break;
        }
        if (depth > 0 && r->p[r->pos] == 0x00 &&
            !(r->pos + 1 < r->len && r->p[r->pos + 1] == CODE_ESCAPE)) {
            r->pos++;
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 4;
            kvq_tuple_elem *nv = kvq__realloc(v, cap * sizeof(*nv));
            if (nv == NULL) {
                rc = kvq__error(KVQ_ENOMEM, "tuple: out of memory");
                goto fail;
            }
            v = nv;
        }
        rc = read_elem(r, depth, &v[n]);
        if (rc != 0)
            goto fail;
        n++;
    }
    kvq_tuple_elem *dst = tuple_alloc(r->t, n > 0 ? n * sizeof(*dst) : 1);
    if (dst == NULL) {
        rc = kvq__error(KVQ_ENOMEM, "tuple: out of memory");
        goto fail;
    }
    if (n > 0)
        memcpy(dst, v, n * sizeof(*dst));
    kvq__free(v);
    *out = dst;
    *count = n;
    return 0;
fail:
    kvq__free(v);
    return rc;
}

int kvq__tuple_unpack_from(kvq_tuple **out, const uint8_t *data, size_t len, size_t start)
{
    *out = NULL;
    kvq_tuple *t = kvq__calloc(1, sizeof(*t));
    if (t == NULL)
        return kvq__error(KVQ_ENOMEM, "tuple: out of memory");
    static const uint8_t empty[1] = { 0 };
    reader r = { data != NULL ? data : empty, len, start, t };
    int rc = read_elems(&r, 0, &t->elems, &t->count);
    if (rc != 0) {
        kvq_tuple_destroy(t);
        return rc;
    }
    *out = t;
    return 0;
}

int kvq_tuple_unpack(kvq_tuple **out, const uint8_t *data, size_t len)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_tuple_unpack: out is NULL");
    *out = NULL;
    if (data == NULL && len > 0)
        return kvq__error(KVQ_EINVAL, "kvq_tuple_unpack: data is NULL and len is %zu", len);
    return kvq__tuple_unpack_from(out, data, len, 0);
}

size_t kvq_tuple_get_count(const kvq_tuple *t)
{
    return t == NULL ? 0 : t->count;
}

const kvq_tuple_elem *kvq_tuple_get_elem(const kvq_tuple *t, size_t i)
{
    return (t == NULL || i >= t->count) ? NULL : &t->elems[i];
}

void kvq_tuple_destroy(kvq_tuple *t)
{
    if (t == NULL)
        return;
    block *b = t->blocks;
    while (b != NULL) {
        block *next = b->next;
        kvq__free(b);
        b = next;
    }
    kvq__free(t);
}

/* ---- order --------------------------------------------------------------------------------- */

/* Elements compare first by the type code their encoding starts with (all integers share one
 * rank: their codes order them by value). */
static int type_rank(const kvq_tuple_elem *e)
{
    switch (e->type) {
    case KVQ_TUPLE_NULL:
        return CODE_NULL;
    case KVQ_TUPLE_BYTES:
        return CODE_BYTES;
    case KVQ_TUPLE_STRING:
        return CODE_STRING;
    case KVQ_TUPLE_NESTED:
        return CODE_NESTED;
    case KVQ_TUPLE_INT:
    case KVQ_TUPLE_UINT:
    case KVQ_TUPLE_NEG_UINT:
        return CODE_ZERO;
    case KVQ_TUPLE_FLOAT:
        return CODE_FLOAT;
    case KVQ_TUPLE_DOUBLE:
        return CODE_DOUBLE;
    case KVQ_TUPLE_BOOL:
        return CODE_FALSE;
    case KVQ_TUPLE_UUID:
        return CODE_UUID;
    case KVQ_TUPLE_VERSIONSTAMP:
        return CODE_VS96;
    default:
        return 0x100; /* not a type: after every type */
    }
}

static int cmp_u64(uint64_t a, uint64_t b)
{
    return a < b ? -1 : (a > b ? 1 : 0);
}

/* An integer element as a sign (-1, 0 or 1) and a magnitude. */
static int int_parts(const kvq_tuple_elem *e, uint64_t *mag)
{
    if (e->type == KVQ_TUPLE_UINT) {
        *mag = e->v.u;
    } else if (e->type == KVQ_TUPLE_NEG_UINT) {
        *mag = e->v.u;
        return e->v.u == 0 ? 0 : -1;
    } else if (e->v.i < 0) {
        *mag = (uint64_t)(-(e->v.i + 1)) + 1u;
        return -1;
    } else {
        *mag = (uint64_t)e->v.i;
    }
    return *mag == 0 ? 0 : 1;
}

static int cmp_int(const kvq_tuple_elem *a, const kvq_tuple_elem *b)
{
    uint64_t x, y;
    int sa = int_parts(a, &x), sb = int_parts(b, &y);
    if (sa != sb)
        return sa < sb ? -1 : 1;
    return sa < 0 ? cmp_u64(y, x) : cmp_u64(x, y);
}

/* The bytes of an element's data, or none when they are missing. */
static kvq_bytes data_of(const kvq_tuple_elem *e)
{
    kvq_bytes b = e->v.bytes;
    if (b.data == NULL)
        b.len = 0;
    return b;
}

static const uint8_t *stamp_of(const kvq_tuple_elem *e)
{
    static const uint8_t incomplete[10] = { 0xff, 0xff, 0xff, 0xff, 0xff,
                                            0xff, 0xff, 0xff, 0xff, 0xff };
    return e->v.vs.complete ? e->v.vs.tr : incomplete;
}

static int
cmp_elems(const kvq_tuple_elem *a, size_t na, const kvq_tuple_elem *b, size_t nb, int depth);

static int cmp_elem(const kvq_tuple_elem *a, const kvq_tuple_elem *b, int depth)
{
    int ra = type_rank(a), rb = type_rank(b);
    if (ra != rb)
        return ra < rb ? -1 : 1;
    switch (a->type) {
    case KVQ_TUPLE_BYTES:
    case KVQ_TUPLE_STRING: {
        kvq_bytes x = data_of(a), y = data_of(b);
        return kvq__bytes_cmp(x.data, x.len, y.data, y.len);
    }
    case KVQ_TUPLE_NESTED:
        /* Deeper than pack or unpack ever go (or a cycle): compare no further. */
        if (depth + 1 > KVQ_TUPLE_MAX_DEPTH)
            return 0;
        return cmp_elems(a->v.nested.elems, a->v.nested.count, b->v.nested.elems, b->v.nested.count,
                         depth + 1);
    case KVQ_TUPLE_INT:
    case KVQ_TUPLE_UINT:
    case KVQ_TUPLE_NEG_UINT:
        return cmp_int(a, b);
    case KVQ_TUPLE_FLOAT:
        return cmp_u64(float_key(a->v.f), float_key(b->v.f));
    case KVQ_TUPLE_DOUBLE:
        return cmp_u64(double_key(a->v.d), double_key(b->v.d));
    case KVQ_TUPLE_BOOL:
        return (a->v.b != 0) - (b->v.b != 0);
    case KVQ_TUPLE_UUID:
        return memcmp(a->v.uuid, b->v.uuid, 16);
    case KVQ_TUPLE_VERSIONSTAMP: {
        int c = memcmp(stamp_of(a), stamp_of(b), 10);
        return c != 0 ? c : cmp_u64(a->v.vs.user, b->v.vs.user);
    }
    default: /* null, and elements that are not of a type */
        return 0;
    }
}

static int
cmp_elems(const kvq_tuple_elem *a, size_t na, const kvq_tuple_elem *b, size_t nb, int depth)
{
    if (a == NULL)
        na = 0;
    if (b == NULL)
        nb = 0;
    size_t n = na < nb ? na : nb;
    for (size_t i = 0; i < n; i++) {
        int c = cmp_elem(&a[i], &b[i], depth);
        if (c != 0)
            return c < 0 ? -1 : 1;
    }
    return na < nb ? -1 : (na > nb ? 1 : 0);
}

int kvq_tuple_compare(const kvq_tuple_elem *a, size_t na, const kvq_tuple_elem *b, size_t nb)
{
    return cmp_elems(a, na, b, nb, 0);
}

/* ---- ranges -------------------------------------------------------------------------------- */

int kvq_tuple_range(kvq_buf *begin, kvq_buf *end, const uint8_t *prefix, size_t len)
{
    if (begin == NULL || end == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_tuple_range: %s is NULL", begin ? "end" : "begin");
    if (begin == end)
        return kvq__error(KVQ_EINVAL, "kvq_tuple_range: begin and end are the same buffer");
    if (prefix == NULL && len > 0)
        return kvq__error(KVQ_EINVAL, "kvq_tuple_range: prefix is NULL and len is %zu", len);
    size_t b0 = begin->len, e0 = end->len;
    const uint8_t lo = 0x00, hi = 0xff;
    int rc = kvq_buf_grow(begin, len + 1);
    if (rc == 0)
        rc = kvq_buf_grow(end, len + 1);
    if (rc == 0)
        rc = kvq_buf_append(begin, prefix, len);
    if (rc == 0)
        rc = kvq_buf_append(begin, &lo, 1);
    if (rc == 0)
        rc = kvq_buf_append(end, prefix, len);
    if (rc == 0)
        rc = kvq_buf_append(end, &hi, 1);
    if (rc != 0) {
        begin->len = b0;
        end->len = e0;
    }
    return rc;
}

int kvq_bytes_strinc(kvq_buf *out, const uint8_t *key, size_t len)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_bytes_strinc: out is NULL");
    if (key == NULL && len > 0)
        return kvq__error(KVQ_EINVAL, "kvq_bytes_strinc: key is NULL and len is %zu", len);
    size_t n = len;
    while (n > 0 && key[n - 1] == 0xff)
        n--;
    if (n == 0)
        return kvq__error(KVQ_EINVAL,
                          "kvq_bytes_strinc: the key is %s; no key follows all keys that "
                          "start with it",
                          len == 0 ? "empty" : "all 0xFF");
    size_t start = out->len;
    int rc = kvq_buf_append(out, key, n);
    if (rc != 0)
        return rc;
    out->data[start + n - 1]++;
    return 0;
}
