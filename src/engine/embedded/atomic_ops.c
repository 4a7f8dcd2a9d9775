/* Atomic operations, as FoundationDB defines them: applied to a value at commit and to the
 * stored value a transaction reads back. */
#include <stdlib.h>
#include <string.h>

#include "emb.h"

static int cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    return kvq__bytes_cmp(a, an, b, bn);
}

/* Copies old into out, zero-extended or truncated to n bytes (little-endian integers). */
static void fit(uint8_t *out, const uint8_t *old, size_t oldn, size_t n)
{
    size_t c = oldn < n ? oldn : n;
    if (c > 0)
        memcpy(out, old, c);
    if (n > c)
        memset(out + c, 0, n - c);
}

/* Compares two little-endian unsigned integers of n bytes. */
static int le_cmp(const uint8_t *a, const uint8_t *b, size_t n)
{
    for (size_t i = n; i-- > 0;) {
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    }
    return 0;
}

int emb_apply_atomic(kvq_buf *out,
                     int *out_present,
                     int op,
                     const uint8_t *old,
                     size_t oldn,
                     int present,
                     const uint8_t *param,
                     size_t pn)
{
    out->len = 0;
    *out_present = 1;
    if (op == KVQ_MUT_COMPARE_AND_CLEAR) {
        /* Cleared when the value equals the operand; a missing key stays missing. */
        if (!present || cmp(old, oldn, param, pn) == 0) {
            *out_present = 0;
            return 0;
        }
        return kvq_buf_append(out, old, oldn);
    }
    if (op == KVQ_MUT_APPEND_IF_FITS) {
        /* A missing key counts as empty; a result longer than a value may be leaves the value
         * as it was. */
        size_t have = present ? oldn : 0;
        int rc = have > 0 ? kvq_buf_append(out, old, have) : 0;
        if (rc == 0 && have + pn <= KVQ_MAX_VALUE_SIZE)
            rc = kvq_buf_append(out, param, pn);
        return rc;
    }
    if (!present && (op == KVQ_MUT_BIT_AND || op == KVQ_MUT_MIN || op == KVQ_MUT_BYTE_MIN ||
                     op == KVQ_MUT_BYTE_MAX || op == KVQ_MUT_MAX)) {
        /* A missing key takes the operand (FoundationDB's behaviour since API 510). */
        return kvq_buf_append(out, param, pn);
    }
    if (op == KVQ_MUT_BYTE_MIN || op == KVQ_MUT_BYTE_MAX) {
        int c = cmp(old, oldn, param, pn);
        int take_old = op == KVQ_MUT_BYTE_MIN ? c <= 0 : c >= 0;
        return take_old ? kvq_buf_append(out, old, oldn) : kvq_buf_append(out, param, pn);
    }
    int rc = kvq_buf_grow(out, pn);
    if (rc != 0)
        return rc;
    uint8_t *r = out->data;
    fit(r, present ? old : NULL, present ? oldn : 0, pn);
    switch (op) {
    case KVQ_MUT_ADD: {
        unsigned carry = 0;
        for (size_t i = 0; i < pn; i++) {
            unsigned s = (unsigned)r[i] + param[i] + carry;
            r[i] = (uint8_t)s;
            carry = s >> 8;
        }
        break;
    }
    case KVQ_MUT_BIT_AND:
        for (size_t i = 0; i < pn; i++)
            r[i] &= param[i];
        break;
    case KVQ_MUT_BIT_OR:
        for (size_t i = 0; i < pn; i++)
            r[i] |= param[i];
        break;
    case KVQ_MUT_BIT_XOR:
        for (size_t i = 0; i < pn; i++)
            r[i] ^= param[i];
        break;
    case KVQ_MUT_MAX:
        if (le_cmp(r, param, pn) < 0)
            memcpy(r, param, pn);
        break;
    case KVQ_MUT_MIN:
        if (le_cmp(r, param, pn) > 0)
            memcpy(r, param, pn);
        break;
    default:
        return kvq__error(KVQ_EINVALID_MUTATION_TYPE, "unknown atomic operation %d", op);
    }
    out->len = pn;
    return 0;
}
