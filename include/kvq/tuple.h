/**
 * @file kvq/tuple.h
 * @brief FoundationDB's tuple encoding, byte for byte, and subspaces.
 *
 * A tuple is a list of typed elements packed into bytes whose order (memcmp, a prefix first) is
 * the order of the tuples. Keys packed here are the keys FoundationDB's bindings (Python, Java,
 * Go, erlfdb) pack for the same tuples, so programs in any of them share data with kvq.
 *
 * | code      | type                                   | kvq_tuple_type          |
 * |-----------|----------------------------------------|-------------------------|
 * | 0x00      | null (inside a nested tuple: 00 FF)    | KVQ_TUPLE_NULL          |
 * | 0x01      | bytes (00 escaped as 00 FF, ended 00)  | KVQ_TUPLE_BYTES         |
 * | 0x02      | UTF-8 string, escaped like bytes       | KVQ_TUPLE_STRING        |
 * | 0x05      | nested tuple, ended by 00              | KVQ_TUPLE_NESTED        |
 * | 0x0b-0x1d | integer                                | KVQ_TUPLE_INT, _UINT, _NEG_UINT |
 * | 0x20      | float (IEEE binary32)                  | KVQ_TUPLE_FLOAT         |
 * | 0x21      | double (IEEE binary64)                 | KVQ_TUPLE_DOUBLE        |
 * | 0x26/0x27 | false / true                           | KVQ_TUPLE_BOOL          |
 * | 0x30      | UUID (16 bytes)                        | KVQ_TUPLE_UUID          |
 * | 0x33      | 96-bit versionstamp (10 + 2 bytes)     | KVQ_TUPLE_VERSIONSTAMP  |
 *
 * **Integers.** Every integer from -(2^64-1) to 2^64-1. +/-(2^64-1) use the 8-byte codes
 * (`1c ffx8`, `0c 00x8`), as the Java, Go and erlfdb bindings write them; the decoder also
 * accepts the long codes 0x1d/0x0b (Python writes 2^64-1 as `1d 08 ffx8` and -(2^64-1) as
 * `0b f7 00x8`) and non-minimal lengths (`16 00 05` is 5), as every binding's decoder does; kvq
 * itself only writes minimal forms. Positive values above INT64_MAX decode as KVQ_TUPLE_UINT,
 * negative values below INT64_MIN as KVQ_TUPLE_NEG_UINT (the magnitude), all others as
 * KVQ_TUPLE_INT. Values beyond 64 bits of magnitude are KVQ_ERANGE.
 *
 * **Floats** keep their exact bits: -0.0 and NaN payloads round-trip.
 *
 * **Decoding is strict and bounded**: it never reads outside its input and never nests more than
 * KVQ_TUPLE_MAX_DEPTH levels. Truncated input, unterminated bytes, strings or nested tuples,
 * deprecated codes (0x03, 0x04, 0x25), reserved ones (0x0a, 0x1e, 0x22-0x24, 0x31, 0xff), user
 * codes (0x40-0x4f), the 80-bit versionstamp 0x32 (reserved by the specification; kvq never
 * writes it and refuses it rather than decode it as a 96-bit one that would re-pack differently),
 * unknown codes, invalid UTF-8 and nesting too deep all fail with KVQ_ETUPLE, and
 * kvq_last_error() names the problem and its byte offset.
 *
 * @note Nothing here keeps global state: every function may be called from any thread. A
 * kvq_tuple or kvq_subspace may be read by many threads at once.
 */
#ifndef KVQ_TUPLE_H
#define KVQ_TUPLE_H

#include "common.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * The deepest nesting packed or unpacked: a tuple may hold nested tuples 64 levels deep (64
 * 0x05 codes open at once); the 65th level is KVQ_EINVAL when packing, KVQ_ETUPLE when
 * unpacking.
 */
#define KVQ_TUPLE_MAX_DEPTH 64

/** Element types. */
typedef enum kvq_tuple_type {
    KVQ_TUPLE_NULL = 0,
    KVQ_TUPLE_BYTES,        /**< v.bytes */
    KVQ_TUPLE_STRING,       /**< v.bytes: UTF-8, not NUL-terminated, may contain U+0000 */
    KVQ_TUPLE_NESTED,       /**< v.nested */
    KVQ_TUPLE_INT,          /**< v.i: an int64 */
    KVQ_TUPLE_UINT,         /**< v.u: a uint64; decoding gives it only for values above INT64_MAX */
    KVQ_TUPLE_FLOAT,        /**< v.f */
    KVQ_TUPLE_DOUBLE,       /**< v.d */
    KVQ_TUPLE_BOOL,         /**< v.b: 0 or 1 (packing takes any nonzero as true) */
    KVQ_TUPLE_UUID,         /**< v.uuid: 16 bytes in network order */
    KVQ_TUPLE_VERSIONSTAMP, /**< v.vs */
    /** v.u: the magnitude of a negative integer, -v.u; decoding gives it only for values below
     * INT64_MIN, down to -(2^64-1) */
    KVQ_TUPLE_NEG_UINT
} kvq_tuple_type;

/**
 * One element. Byte and string data and nested elements are borrowed: from the caller when
 * packing (only for the call), from the kvq_tuple when unpacked (until kvq_tuple_destroy).
 */
typedef struct kvq_tuple_elem {
    kvq_tuple_type type;
    union {
        int64_t i;        /**< KVQ_TUPLE_INT */
        uint64_t u;       /**< KVQ_TUPLE_UINT */
        float f;          /**< KVQ_TUPLE_FLOAT */
        double d;         /**< KVQ_TUPLE_DOUBLE */
        int b;            /**< KVQ_TUPLE_BOOL */
        kvq_bytes bytes;  /**< KVQ_TUPLE_BYTES, KVQ_TUPLE_STRING */
        uint8_t uuid[16]; /**< KVQ_TUPLE_UUID */
        /** KVQ_TUPLE_VERSIONSTAMP */
        struct {
            uint8_t tr[10]; /**< big-endian commit version (8) and batch order (2) */
            uint16_t user;  /**< the user version, written big-endian after tr */
            /** 0: incomplete, filled in at commit (see kvq_tuple_pack_vs); tr is then ignored
             * when packing and all 0xFF when unpacked. A complete stamp's tr cannot be all
             * 0xFF, since that marks an incomplete one. */
            int complete;
        } vs;
        /** KVQ_TUPLE_NESTED: an array of count elements (NULL allowed when count is 0) */
        struct {
            const struct kvq_tuple_elem *elems;
            size_t count;
        } nested;
    } v;
} kvq_tuple_elem;

/** @name Element constructors (the data they point at is borrowed, not copied)
 * @{ */
static inline kvq_tuple_elem kvq_tuple_null(void)
{
    kvq_tuple_elem e;
    e.type = KVQ_TUPLE_NULL;
    e.v.u = 0;
    return e;
}
static inline kvq_tuple_elem kvq_tuple_int(int64_t v)
{
    kvq_tuple_elem e;
    e.type = KVQ_TUPLE_INT;
    e.v.i = v;
    return e;
}
static inline kvq_tuple_elem kvq_tuple_uint(uint64_t v)
{
    kvq_tuple_elem e;
    e.type = KVQ_TUPLE_UINT;
    e.v.u = v;
    return e;
}
/** The integer -magnitude (any magnitude up to 2^64-1: -(2^64-1) .. 0). */
static inline kvq_tuple_elem kvq_tuple_neg_uint(uint64_t magnitude)
{
    kvq_tuple_elem e;
    e.type = KVQ_TUPLE_NEG_UINT;
    e.v.u = magnitude;
    return e;
}
/** Bytes p[0..n); p may be NULL when n is 0. */
static inline kvq_tuple_elem kvq_tuple_bytes(const void *p, size_t n)
{
    kvq_tuple_elem e;
    e.type = KVQ_TUPLE_BYTES;
    e.v.bytes.data = (const uint8_t *)p;
    e.v.bytes.len = n;
    return e;
}
/** A string of n UTF-8 bytes (which may include NULs). */
static inline kvq_tuple_elem kvq_tuple_strn(const char *s, size_t n)
{
    kvq_tuple_elem e;
    e.type = KVQ_TUPLE_STRING;
    e.v.bytes.data = (const uint8_t *)s;
    e.v.bytes.len = n;
    return e;
}
/** A string from a NUL-terminated UTF-8 C string (NULL is the empty string). */
static inline kvq_tuple_elem kvq_tuple_str(const char *s)
{
    size_t n = 0;
    if (s != NULL)
        while (s[n] != '\0')
            n++;
    return kvq_tuple_strn(s, n);
}
static inline kvq_tuple_elem kvq_tuple_bool(int b)
{
    kvq_tuple_elem e;
    e.type = KVQ_TUPLE_BOOL;
    e.v.b = b ? 1 : 0;
    return e;
}
static inline kvq_tuple_elem kvq_tuple_float(float f)
{
    kvq_tuple_elem e;
    e.type = KVQ_TUPLE_FLOAT;
    e.v.f = f;
    return e;
}
static inline kvq_tuple_elem kvq_tuple_double(double d)
{
    kvq_tuple_elem e;
    e.type = KVQ_TUPLE_DOUBLE;
    e.v.d = d;
    return e;
}
/** A UUID from its 16 bytes (copied). */
static inline kvq_tuple_elem kvq_tuple_uuid(const uint8_t uuid[16])
{
    kvq_tuple_elem e;
    int i;
    e.type = KVQ_TUPLE_UUID;
    for (i = 0; i < 16; i++)
        e.v.uuid[i] = uuid[i];
    return e;
}
/** A nested tuple of count elements. */
static inline kvq_tuple_elem kvq_tuple_nested(const kvq_tuple_elem *elems, size_t count)
{
    kvq_tuple_elem e;
    e.type = KVQ_TUPLE_NESTED;
    e.v.nested.elems = elems;
    e.v.nested.count = count;
    return e;
}
/** A complete versionstamp: the 10 bytes a commit wrote (copied), then a user version. */
static inline kvq_tuple_elem kvq_tuple_vs(const uint8_t tr[10], uint16_t user)
{
    kvq_tuple_elem e;
    int i;
    e.type = KVQ_TUPLE_VERSIONSTAMP;
    for (i = 0; i < 10; i++)
        e.v.vs.tr[i] = tr[i];
    e.v.vs.user = user;
    e.v.vs.complete = 1;
    return e;
}
/** An incomplete versionstamp with a user version, to be filled at commit (see
 * kvq_tuple_pack_vs). */
static inline kvq_tuple_elem kvq_tuple_vs_incomplete(uint16_t user)
{
    kvq_tuple_elem e;
    int i;
    e.type = KVQ_TUPLE_VERSIONSTAMP;
    for (i = 0; i < 10; i++)
        e.v.vs.tr[i] = 0xff;
    e.v.vs.user = user;
    e.v.vs.complete = 0;
    return e;
}
/** @} */

/**
 * Packs elements into a caller buffer.
 *
 * @param[out] out    where to write; may be NULL when cap is 0 (to ask for the size)
 * @param[in]  cap    the size of out
 * @param[out] len    the bytes written; with KVQ_ENOBUFS the size needed; 0 on other errors
 * @param[in]  elems  the elements (borrowed for the call); may be NULL when count is 0
 * @param[in]  count  the number of elements
 * @return 0;
 *         KVQ_ENOBUFS when cap is too small (out then holds a prefix of the encoding);
 *         KVQ_EINVAL for a NULL len, a NULL out with cap > 0, NULL elems or element data
 *         with a nonzero count or length, a string that is not valid UTF-8, an unknown type,
 *         nesting deeper than KVQ_TUPLE_MAX_DEPTH, an incomplete versionstamp (use
 *         kvq_tuple_pack_vs) or a complete one whose 10 bytes are all 0xFF.
 */
KVQ_API KVQ_NODISCARD int
kvq_tuple_pack(uint8_t *out, size_t cap, size_t *len, const kvq_tuple_elem *elems, size_t count);

/**
 * Packs elements and appends them to out, which may already hold bytes (a raw prefix).
 *
 * @param[in,out] out  a buffer (KVQ_BUF_INIT or already used); release it with kvq_buf_dispose
 * @param[in] elems, count  as kvq_tuple_pack
 * @return 0; KVQ_EINVAL as kvq_tuple_pack, or a NULL out; KVQ_ENOMEM.
 *         On error out->len is unchanged.
 */
KVQ_API KVQ_NODISCARD int
kvq_tuple_pack_buf(kvq_buf *out, const kvq_tuple_elem *elems, size_t count);

/**
 * Packs elements holding exactly one incomplete versionstamp (anywhere, nested tuples
 * included) and appends them to out, then the 4-byte little-endian offset of the stamp's 10
 * bytes counted from the start of out->data, so that a raw prefix already in out counts: the
 * key (or value) form that set_versionstamped_key and set_versionstamped_value take (API >= 520).
 *
 * @param[in,out] out  a buffer, possibly holding a raw prefix
 * @param[in] elems, count  as kvq_tuple_pack, but with one incomplete versionstamp
 * @return 0; KVQ_EINVAL as kvq_tuple_pack_buf, for no or several incomplete versionstamps, or
 *         an offset beyond 32 bits; KVQ_ENOMEM. On error out->len is unchanged.
 */
KVQ_API KVQ_NODISCARD int
kvq_tuple_pack_vs(kvq_buf *out, const kvq_tuple_elem *elems, size_t count);

/**
 * @name Building a packed tuple element by element
 *
 * For keys whose shape is not known in advance, or nested tuples without arrays kept by hand:
 *
 *     kvq_buf key = KVQ_BUF_INIT;
 *     kvq_tuple_builder b;
 *     kvq_tuple_builder_init(&b, &key);          // key may already hold a raw prefix
 *     kvq_tuple_add(&b, kvq_tuple_str("orders"));
 *     kvq_tuple_nest_begin(&b);                  // a nested tuple ...
 *     kvq_tuple_add(&b, kvq_tuple_int(2026));
 *     kvq_tuple_add(&b, kvq_tuple_null());       // (null inside a nested tuple: 00 FF)
 *     kvq_tuple_nest_end(&b);                    // ... ends here
 *     int rc = kvq_tuple_builder_finish(&b);     // 0, or the first error
 *
 * The bytes are those kvq_tuple_pack writes for the same elements. Errors are kept: after the
 * first one (an element packing refuses, an end without a begin, memory), further calls do
 * nothing, and kvq_tuple_builder_finish returns it and puts out->len back to where it was. An
 * incomplete versionstamp may be added once; finish then appends its 4-byte little-endian
 * offset, as kvq_tuple_pack_vs does (the form set_versionstamped_key takes).
 * @{ */

/** A builder's state (the fields are the library's; use only the functions). */
typedef struct kvq_tuple_builder {
    kvq_buf *out;
    size_t start;
    int depth;
    int error;
    size_t vs_count;
    size_t vs_at;
} kvq_tuple_builder;

/**
 * Starts building into dest (appending to it; the builder b is what this call fills). A NULL
 * dest is an error that finish reports.
 */
KVQ_API void kvq_tuple_builder_init(kvq_tuple_builder *b, kvq_buf *dest);
/** Appends one element (any type; a nested element packs its whole array). */
KVQ_API void kvq_tuple_add(kvq_tuple_builder *b, kvq_tuple_elem e);
/** Opens a nested tuple: what is added until kvq_tuple_nest_end goes inside it. */
KVQ_API void kvq_tuple_nest_begin(kvq_tuple_builder *b);
/** Closes the innermost open nested tuple. */
KVQ_API void kvq_tuple_nest_end(kvq_tuple_builder *b);
/**
 * Ends the build.
 * @return 0; KVQ_EINVAL (a NULL builder or out, an element kvq_tuple_pack refuses, a second
 *         incomplete versionstamp, an unbalanced open/close, nesting deeper than
 *         KVQ_TUPLE_MAX_DEPTH); KVQ_ENOMEM. On error out->len is as before init.
 */
KVQ_API KVQ_NODISCARD int kvq_tuple_builder_finish(kvq_tuple_builder *b);
/** @} */

/** An unpacked tuple. It owns the memory its elements point into. */
typedef struct kvq_tuple kvq_tuple;

/**
 * Unpacks bytes into a tuple, strictly (see the file's notes).
 *
 * @param[out] out   the tuple, to free with kvq_tuple_destroy; set to NULL on failure
 * @param[in]  data  the encoding (borrowed for the call; the tuple keeps a copy of what it
 *                   needs); may be NULL when len is 0, which is the empty tuple
 * @param[in]  len   its length
 * @note Decoded bytes and strings are followed by a 0 byte not counted in their length (a
 *       string may still contain U+0000 within it).
 * @return 0; KVQ_ETUPLE for a malformed encoding (kvq_last_error() says what and at which byte
 *         offset); KVQ_ERANGE for an integer outside 64 bits; KVQ_EINVAL for a NULL out, or
 *         NULL data with len > 0; KVQ_ENOMEM.
 */
KVQ_API KVQ_NODISCARD int kvq_tuple_unpack(kvq_tuple **out, const uint8_t *data, size_t len);

/** Returns the number of top-level elements (0 for NULL). */
KVQ_API KVQ_NODISCARD size_t kvq_tuple_get_count(const kvq_tuple *t);

/**
 * Returns element i, or NULL when t is NULL or i is out of range. The elements are one array:
 * kvq_tuple_get_elem(t, 0) points at kvq_tuple_get_count(t) of them (so it can be handed to
 * kvq_tuple_pack or kvq_tuple_compare), and so do nested elements' v.nested.elems.
 * @note Valid until kvq_tuple_destroy(t), as are the bytes and nested elements they point at.
 */
KVQ_API KVQ_NODISCARD const kvq_tuple_elem *kvq_tuple_get_elem(const kvq_tuple *t, size_t i);

/** Frees a tuple. NULL is a no-op. */
KVQ_API void kvq_tuple_destroy(kvq_tuple *t);

/**
 * Compares two tuples in the order of their packed bytes: by type code (null < bytes < string <
 * nested < integers < float < double < bool < UUID < versionstamp), then by value -- integers
 * numerically (a UINT equal to an INT is equal), bytes and strings bytewise, nested tuples
 * recursively, floats and doubles by their encodings (so -0.0 < 0.0 and NaNs have a place),
 * false < true, UUIDs and versionstamps bytewise -- and a tuple that is a prefix of the other
 * first. So kvq_tuple_compare(a, b) has the sign of memcmp-with-length of pack(a) and pack(b).
 *
 * @param[in] a, na  the first tuple's elements (NULL is taken as empty)
 * @param[in] b, nb  the second's
 * @return -1, 0 or 1. Elements that packing refuses compare without crashing, but in no
 *         specified order; nesting deeper than KVQ_TUPLE_MAX_DEPTH is not looked into.
 */
KVQ_API KVQ_NODISCARD int
kvq_tuple_compare(const kvq_tuple_elem *a, size_t na, const kvq_tuple_elem *b, size_t nb);

/**
 * Strict equality: true when the two tuples pack to the same bytes, else false. So 1 and 1.0 differ
 * (an integer is not a double), as do a float and a double of the same value, "a" and b"a",
 * 0.0 and -0.0, and NaNs with different bits; an INT and a UINT of the same value are equal
 * (one encoding); nested tuples compare element by element. Incomplete versionstamps compare by
 * their user version. Tuples with an element kvq_tuple_pack refuses (invalid UTF-8, a bad type)
 * are equal to nothing, themselves included.
 */
KVQ_API KVQ_NODISCARD bool
kvq_tuple_equal(const kvq_tuple_elem *a, size_t na, const kvq_tuple_elem *b, size_t nb);

/**
 * Appends a readable form of bytes, as FoundationDB's `printable` writes them: bytes 0x20 to
 * 0x7E stand for themselves, except the backslash, which is doubled; every other byte is
 * `\xNN` (two lowercase hex digits). "a\x00b" for the three bytes 61 00 62.
 *
 * @param[in,out] out  a buffer; the text is appended and followed by a NUL not counted in
 *                     out->len, so that out->data is a C string
 * @return 0; KVQ_EINVAL (NULL out, NULL data with len > 0); KVQ_ENOMEM (out->len unchanged).
 */
KVQ_API KVQ_NODISCARD int kvq_bytes_format(kvq_buf *out, const uint8_t *data, size_t len);

/**
 * Appends a readable form of a tuple: `("orders", (2026, null), b"\x01\x02", -5, 1.5, true)`.
 * Strings are in double quotes and bytes in b"...", both written as kvq_bytes_format writes them,
 * with a double quote as \x22; integers in decimal (all 64-bit magnitudes); a float ends in
 * `f` (`1.5f`), a double does not, both in the shortest form that reads back to the same value
 * (`nan`, `inf` and `-inf` as such); `true`/`false`; `null`;
 * `UUID(00112233-4455-6677-8899-aabbccddeeff)`; `Versionstamp(<20 hex digits>, user)` or
 * `Versionstamp(incomplete, user)`; a nested tuple in parentheses.
 *
 * @param[in,out] out  a buffer; the text is appended, followed by a NUL not counted in out->len
 * @return 0; KVQ_EINVAL (NULL out, NULL elems with count > 0, an unknown type, nesting deeper
 *         than KVQ_TUPLE_MAX_DEPTH); KVQ_ENOMEM. On error out->len is unchanged.
 */
KVQ_API KVQ_NODISCARD int
kvq_tuple_format(kvq_buf *out, const kvq_tuple_elem *elems, size_t count);

/**
 * Appends the range of every key that starts with prefix and is longer: prefix + 0x00 to begin,
 * prefix + 0xFF to end (the range of a packed tuple's children, as Python's fdb.tuple.range).
 *
 * @param[in,out] begin, end  two different buffers; prefix must not point into them
 * @param[in] prefix, len     the prefix; NULL allowed when len is 0
 * @return 0; KVQ_EINVAL (NULL or identical buffers, NULL prefix with len > 0); KVQ_ENOMEM.
 *         On error both buffers keep their lengths.
 */
KVQ_API KVQ_NODISCARD int
kvq_tuple_range(kvq_buf *begin, kvq_buf *end, const uint8_t *prefix, size_t len);

/**
 * Appends the first key after every key that starts with key (FoundationDB's strinc): key with its
 * trailing 0xFF bytes dropped and its last byte then incremented ("ab\xff" gives "ac").
 *
 * @param[in,out] out  the buffer to append to; key must not point into it
 * @param[in] key, len the key
 * @return 0; KVQ_EINVAL for a NULL out or key, or a key that is empty or all 0xFF (no key
 *         follows them); KVQ_ENOMEM. On error out is unchanged.
 */
KVQ_API KVQ_NODISCARD int kvq_bytes_strinc(kvq_buf *out, const uint8_t *key, size_t len);

/** A subspace: a key prefix made of raw bytes followed by a packed tuple. Immutable. */
typedef struct kvq_subspace kvq_subspace;

/**
 * Creates a subspace whose prefix is raw_prefix followed by pack(elems); either part may be
 * empty.
 *
 * @param[out] out  the subspace, to free with kvq_subspace_destroy; NULL on failure
 * @param[in] raw_prefix, raw_len  raw bytes (copied); NULL allowed when raw_len is 0
 * @param[in] elems, count  the tuple (packed and copied); no incomplete versionstamp
 * @return 0; KVQ_EINVAL (NULL out, NULL data with a length, elements kvq_tuple_pack refuses, a
 *         prefix over 10,000 bytes, FoundationDB's key limit); KVQ_ENOMEM.
 */
KVQ_API KVQ_NODISCARD int kvq_subspace_new(kvq_subspace **out,
                                           const uint8_t *raw_prefix,
                                           size_t raw_len,
                                           const kvq_tuple_elem *elems,
                                           size_t count);

/** Frees a subspace. NULL is a no-op. */
KVQ_API void kvq_subspace_destroy(kvq_subspace *s);

/** Returns the subspace's prefix, borrowed: valid until kvq_subspace_destroy. {NULL, 0} for NULL;
 * the data may be NULL when the prefix is empty. */
KVQ_API KVQ_NODISCARD kvq_bytes kvq_subspace_get_prefix(const kvq_subspace *s);

/**
 * Appends prefix + pack(elems) to out.
 * @return 0; KVQ_EINVAL (NULL out or s, or as kvq_tuple_pack_buf); KVQ_ENOMEM. On error out->len
 *         is unchanged.
 */
KVQ_API KVQ_NODISCARD int
kvq_subspace_pack(kvq_buf *out, const kvq_subspace *s, const kvq_tuple_elem *elems, size_t count);

/**
 * Appends prefix + pack(elems) and the 4-byte little-endian offset of the one incomplete
 * versionstamp's 10 bytes, as kvq_tuple_pack_vs does.
 * @note The offset counts from the start of out->data, so out is normally empty before the call
 *       (otherwise whatever it holds becomes part of the key).
 * @return as kvq_tuple_pack_vs, and KVQ_EINVAL for a NULL s. On error out->len is unchanged.
 */
KVQ_API KVQ_NODISCARD int kvq_subspace_pack_vs(kvq_buf *out,
                                               const kvq_subspace *s,
                                               const kvq_tuple_elem *elems,
                                               size_t count);

/**
 * Unpacks the tuple that follows the subspace's prefix in key.
 * @param[out] out  the tuple (free with kvq_tuple_destroy); NULL on failure
 * @return 0; KVQ_EINVAL for NULL arguments or a key that does not start with the prefix;
 *         otherwise as kvq_tuple_unpack (byte offsets in the detail count from the start of key).
 */
KVQ_API KVQ_NODISCARD int
kvq_subspace_unpack(kvq_tuple **out, const kvq_subspace *s, const uint8_t *key, size_t len);

/** Returns true if key starts with the subspace's prefix, else false (also for NULL arguments,
 * which record a KVQ_EINVAL detail for kvq_last_error()). */
KVQ_API KVQ_NODISCARD bool
kvq_subspace_contains(const kvq_subspace *s, const uint8_t *key, size_t len);

/**
 * Appends the range of the keys strictly inside prefix + pack(elems): that + 0x00 to begin,
 * that + 0xFF to end. With no elements it is the range of the whole subspace but its prefix.
 * @return 0; KVQ_EINVAL (NULL or identical buffers, NULL s, elements packing refuses);
 *         KVQ_ENOMEM. On error both buffers keep their lengths.
 */
KVQ_API KVQ_NODISCARD int kvq_subspace_range(
    kvq_buf *begin, kvq_buf *end, const kvq_subspace *s, const kvq_tuple_elem *elems, size_t count);

#ifdef __cplusplus
}
#endif

#endif /* KVQ_TUPLE_H */
