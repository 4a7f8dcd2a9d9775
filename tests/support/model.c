/* The conformance tests' model of the key-value store (model.h says what each does). */
#include <assert.h>

#include "model.h"

int cf_bytes_cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    size_t m = an < bn ? an : bn;
    int c = m > 0 ? memcmp(a, b, m) : 0;
    if (c != 0)
        return c < 0 ? -1 : 1;
    return an < bn ? -1 : an > bn ? 1 : 0;
}

void cf_bytes_order(uint8_t *a, size_t *an, uint8_t *b, size_t *bn)
{
    if (cf_bytes_cmp(a, *an, b, *bn) <= 0)
        return;
    assert(*an <= CF_MODEL_KEY_MAX && *bn <= CF_MODEL_KEY_MAX);
    uint8_t tmp[CF_MODEL_KEY_MAX];
    size_t tn = *an;
    memcpy(tmp, a, tn);
    memcpy(a, b, *bn);
    *an = *bn;
    memcpy(b, tmp, tn);
    *bn = tn;
}

size_t cf_model_lower(const cf_model *m, const uint8_t *k, size_t kn)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cf_bytes_cmp(m->e[mid].k, m->e[mid].kn, k, kn) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

cf_mentry *cf_model_find(const cf_model *m, const uint8_t *k, size_t kn)
{
    size_t i = cf_model_lower(m, k, kn);
    if (i < m->n && cf_bytes_cmp(m->e[i].k, m->e[i].kn, k, kn) == 0)
        return &m->e[i];
    return NULL;
}

int cf_model_set(cf_model *m, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    if (kn > CF_MODEL_KEY || vn > CF_MODEL_VAL)
        return -1;
    size_t i = cf_model_lower(m, k, kn);
    if (i == m->n || cf_bytes_cmp(m->e[i].k, m->e[i].kn, k, kn) != 0) {
        if (m->n == m->cap) {
            size_t cap = m->cap ? m->cap * 2 : 64;
            cf_mentry *e = realloc(m->e, cap * sizeof(*e));
            if (e == NULL)
                return -1;
            m->e = e;
            m->cap = cap;
        }
        memmove(&m->e[i + 1], &m->e[i], (m->n - i) * sizeof(*m->e));
        m->n++;
        if (kn > 0)
            memcpy(m->e[i].k, k, kn);
        m->e[i].kn = kn;
    }
    if (vn > 0)
        memcpy(m->e[i].v, v, vn);
    m->e[i].vn = vn;
    return 0;
}

void cf_model_clear_range(cf_model *m, const uint8_t *b, size_t bn, const uint8_t *e, size_t en)
{
    if (cf_bytes_cmp(b, bn, e, en) >= 0)
        return;
    size_t i = cf_model_lower(m, b, bn), j = cf_model_lower(m, e, en);
    if (j > i) {
        memmove(&m->e[i], &m->e[j], (m->n - j) * sizeof(*m->e));
        m->n -= j - i;
    }
}

void cf_model_clear(cf_model *m, const uint8_t *k, size_t kn)
{
    size_t i = cf_model_lower(m, k, kn);
    if (i < m->n && cf_bytes_cmp(m->e[i].k, m->e[i].kn, k, kn) == 0) {
        memmove(&m->e[i], &m->e[i + 1], (m->n - i - 1) * sizeof(*m->e));
        m->n--;
    }
}

void cf_fit(uint8_t *out, const uint8_t *from, size_t from_n, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = i < from_n ? from[i] : 0;
}

int cf_atomic_apply(int present,
                    const uint8_t *old,
                    size_t old_n,
                    kvq_mutation op,
                    const uint8_t *p,
                    size_t p_n,
                    uint8_t *out,
                    size_t *out_n)
{
    if (!present)
        old_n = 0;
    *out_n = p_n;
    switch (op) {
    case KVQ_MUT_APPEND_IF_FITS:
        /* A missing key is empty; a result longer than a value may be leaves it unchanged. */
        if (old_n > 0)
            memcpy(out, old, old_n);
        *out_n = old_n;
        if (old_n + p_n <= KVQ_MAX_VALUE_SIZE) {
            if (p_n > 0)
                memcpy(out + old_n, p, p_n);
            *out_n = old_n + p_n;
        }
        return 1;
    case KVQ_MUT_COMPARE_AND_CLEAR:
        /* Cleared when the value equals the operand; a missing key stays missing. */
        if (!present || cf_bytes_cmp(old, old_n, p, p_n) == 0) {
            *out_n = 0;
            return 0;
        }
        if (old_n > 0)
            memcpy(out, old, old_n);
        *out_n = old_n;
        return 1;
    case KVQ_MUT_ADD: {
        if (old_n == 0 || p_n == 0) {
            memcpy(out, p, p_n);
            return 1;
        }
        unsigned carry = 0;
        for (size_t i = 0; i < p_n; i++) {
            unsigned s = (i < old_n ? old[i] : 0u) + p[i] + carry;
            out[i] = (uint8_t)s;
            carry = s >> 8;
        }
        return 1;
    }
    case KVQ_MUT_BIT_AND:
        if (!present) {
            memcpy(out, p, p_n);
            return 1;
        }
        for (size_t i = 0; i < p_n; i++)
            out[i] = (uint8_t)((i < old_n ? old[i] : 0) & p[i]);
        return 1;
    case KVQ_MUT_BIT_OR:
    case KVQ_MUT_BIT_XOR:
        if (old_n == 0 || p_n == 0) {
            memcpy(out, p, p_n);
            return 1;
        }
        for (size_t i = 0; i < p_n; i++) {
            uint8_t a = i < old_n ? old[i] : 0;
            out[i] = (uint8_t)(op == KVQ_MUT_BIT_OR ? (a | p[i]) : (a ^ p[i]));
        }
        return 1;
    case KVQ_MUT_MAX:
    case KVQ_MUT_MIN: {
        if (op == KVQ_MUT_MAX && (old_n == 0 || p_n == 0)) {
            memcpy(out, p, p_n);
            return 1;
        }
        if (op == KVQ_MUT_MIN && (!present || p_n == 0)) {
            memcpy(out, p, p_n);
            return 1;
        }
        /* Compare the old value fitted to the operand's width, as unsigned little-endian. */
        uint8_t fitted[CF_MODEL_VAL > 128 ? CF_MODEL_VAL : 128];
        cf_fit(fitted, old, old_n, p_n);
        int cmp = 0;
        for (size_t i = p_n; i-- > 0;) {
            if (fitted[i] != p[i]) {
                cmp = fitted[i] < p[i] ? -1 : 1;
                break;
            }
        }
        int take_old = op == KVQ_MUT_MAX ? cmp > 0 : cmp < 0;
        memcpy(out, take_old ? fitted : p, p_n);
        return 1;
    }
    case KVQ_MUT_BYTE_MIN:
    case KVQ_MUT_BYTE_MAX: {
        if (!present) {
            memcpy(out, p, p_n);
            return 1;
        }
        int c = cf_bytes_cmp(old, old_n, p, p_n);
        int take_old = op == KVQ_MUT_BYTE_MIN ? c < 0 : c > 0;
        if (take_old) {
            memcpy(out, old, old_n);
            *out_n = old_n;
        } else {
            memcpy(out, p, p_n);
        }
        return 1;
    }
    default:
        memcpy(out, p, p_n);
        return 1;
    }
}

int cf_model_atomic(
    cf_model *m, const uint8_t *k, size_t kn, kvq_mutation op, const uint8_t *p, size_t pn)
{
    const cf_mentry *cur = cf_model_find(m, k, kn);
    uint8_t out[2 * CF_MODEL_VAL];
    size_t on = 0;
    if (pn > CF_MODEL_VAL)
        return -1;
    if (!cf_atomic_apply(cur != NULL, cur ? cur->v : NULL, cur ? cur->vn : 0, op, p, pn, out,
                         &on)) {
        cf_model_clear(m, k, kn);
        return 0;
    }
    return cf_model_set(m, k, kn, out, on);
}

size_t cf_model_range(const cf_model *m,
                      const uint8_t *b,
                      size_t bn,
                      const uint8_t *e,
                      size_t en,
                      int limit,
                      int reverse,
                      size_t *idx,
                      int *more)
{
    *more = 0;
    if (cf_bytes_cmp(b, bn, e, en) >= 0)
        return 0;
    size_t i = cf_model_lower(m, b, bn), j = cf_model_lower(m, e, en);
    size_t total = j - i, n = total;
    if (limit > 0 && n > (size_t)limit) {
        n = (size_t)limit;
        *more = 1;
    }
    for (size_t r = 0; r < n; r++)
        idx[r] = reverse ? j - 1 - r : i + r;
    return n;
}

int cf_model_copy(cf_model *dst, const cf_model *src)
{
    if (dst->cap < src->n) {
        cf_mentry *e = realloc(dst->e, (src->n + 1) * sizeof(*e));
        if (e == NULL)
            return -1;
        dst->e = e;
        dst->cap = src->n + 1;
    }
    if (src->n > 0)
        memcpy(dst->e, src->e, src->n * sizeof(*src->e));
    dst->n = src->n;
    return 0;
}

void cf_model_free(cf_model *m)
{
    free(m->e);
    m->e = NULL;
    m->n = m->cap = 0;
}
