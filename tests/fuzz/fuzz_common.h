/* Helpers shared by the tuple fuzz targets. */
#ifndef KVQ_FUZZ_COMMON_H
#define KVQ_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq/tuple.h"
#include "util/bytes.h"

/* Stops the run with a message; libFuzzer then saves the input that did it. */
#define FUZZ_CHECK(cond)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, \
                    #cond, kvq_last_error());                                                 \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

/* Incomplete versionstamps anywhere in the elements (nested included). */
static inline size_t fuzz_incomplete_stamps(const kvq_tuple_elem *e, size_t n)
{
    size_t found = 0;
    for (size_t i = 0; i < n; i++) {
        if (e[i].type == KVQ_TUPLE_VERSIONSTAMP && !e[i].v.vs.complete)
            found++;
        else if (e[i].type == KVQ_TUPLE_NESTED)
            found += fuzz_incomplete_stamps(e[i].v.nested.elems, e[i].v.nested.count);
    }
    return found;
}

/* The sign of memcmp with a shorter prefix first: FoundationDB's key order. */
static inline int fuzz_key_order(const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
    size_t m = na < nb ? na : nb;
    int c = m > 0 ? memcmp(a, b, m) : 0;
    if (c != 0)
        return c < 0 ? -1 : 1;
    return na < nb ? -1 : (na > nb ? 1 : 0);
}

/* Packs a decoded tuple canonically into out (which must be empty): plainly, or with pack_vs
 * and the 4 offset bytes dropped when it holds one incomplete stamp. Returns 0, or -1 when it
 * holds several (no canonical form kvq can write). Aborts when kvq refuses what it decoded. */
static inline int fuzz_canonical(kvq_buf *out, const kvq_tuple *t)
{
    size_t n = kvq_tuple_get_count(t);
    const kvq_tuple_elem *e = kvq_tuple_get_elem(t, 0);
    size_t stamps = fuzz_incomplete_stamps(e, n);
    if (stamps == 0) {
        FUZZ_CHECK(kvq_tuple_pack_buf(out, e, n) == 0);
        return 0;
    }
    FUZZ_CHECK(kvq_tuple_pack_buf(out, e, n) == KVQ_EINVAL);
    if (stamps > 1) {
        FUZZ_CHECK(kvq_tuple_pack_vs(out, e, n) == KVQ_EINVAL);
        FUZZ_CHECK(out->len == 0);
        return -1;
    }
    FUZZ_CHECK(kvq_tuple_pack_vs(out, e, n) == 0);
    FUZZ_CHECK(out->len >= 4 + 13);
    out->len -= 4;
    const uint8_t *off = out->data + out->len;
    uint32_t at = (uint32_t)kvq__le_get(off, 4);
    /* The offset names the 10 stamp bytes, just after a 0x33. */
    FUZZ_CHECK(at >= 1 && (size_t)at + 12 <= out->len && out->data[at - 1] == 0x33);
    for (size_t i = 0; i < 10; i++)
        FUZZ_CHECK(out->data[at + i] == 0xff);
    return 0;
}

#endif /* KVQ_FUZZ_COMMON_H */
