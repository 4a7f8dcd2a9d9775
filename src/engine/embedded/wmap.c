/* The transaction's in-memory structures: owned strings, key ranges, the read-your-writes
 * overlay, and the arithmetic of atomic operations. */
#include <stdlib.h>
#include <string.h>

#include "emb.h"

int emb_str_set(emb_str *s, const uint8_t *p, size_t n)
{
    uint8_t *q = kvq__malloc(n);
    if (q == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for %zu bytes", n);
    if (n > 0)
        memcpy(q, p, n);
    s->p = q;
    s->n = n;
    return 0;
}

void emb_str_free(emb_str *s)
{
    kvq__free(s->p);
    s->p = NULL;
    s->n = 0;
}

static int cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    return kvq__bytes_cmp(a, an, b, bn);
}

int emb_ranges_add(emb_ranges *r, const uint8_t *b, size_t bn, const uint8_t *e, size_t en)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 8;
        emb_range *v = kvq__realloc(r->v, cap * sizeof(*v));
        if (v == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory for conflict ranges");
        r->v = v;
        r->cap = cap;
    }
    emb_range *x = &r->v[r->n];
    if (emb_str_set(&x->b, b, bn) != 0)
        return KVQ_ENOMEM;
    if (emb_str_set(&x->e, e, en) != 0) {
        emb_str_free(&x->b);
        return KVQ_ENOMEM;
    }
    r->n++;
    return 0;
}

void emb_ranges_clear(emb_ranges *r)
{
    for (size_t i = 0; i < r->n; i++) {
        emb_str_free(&r->v[i].b);
        emb_str_free(&r->v[i].e);
    }
    r->n = 0;
}

void emb_ranges_free(emb_ranges *r)
{
    emb_ranges_clear(r);
    kvq__free(r->v);
    r->v = NULL;
    r->cap = 0;
}

static int range_cmp(const void *x, const void *y)
{
    const emb_range *a = x, *b = y;
    return cmp(a->b.p, a->b.n, b->b.p, b->b.n);
}

void emb_ranges_normalize(emb_ranges *r)
{
    /* Empty ranges cover nothing: drop them first. */
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (cmp(r->v[i].b.p, r->v[i].b.n, r->v[i].e.p, r->v[i].e.n) >= 0) {
            emb_str_free(&r->v[i].b);
            emb_str_free(&r->v[i].e);
        } else {
            r->v[k++] = r->v[i];
        }
    }
    r->n = k;
    if (r->n < 2)
        return;
    qsort(r->v, r->n, sizeof(*r->v), range_cmp);
    size_t w = 0;
    for (size_t i = 1; i < r->n; i++) {
        emb_range *last = &r->v[w];
        emb_range *cur = &r->v[i];
        if (cmp(cur->b.p, cur->b.n, last->e.p, last->e.n) <= 0) {
            /* Overlapping or touching: extend the last range. */
            if (cmp(cur->e.p, cur->e.n, last->e.p, last->e.n) > 0) {
                emb_str_free(&last->e);
                last->e = cur->e;
                cur->e.p = NULL;
            }
            emb_str_free(&cur->b);
            emb_str_free(&cur->e);
        } else {
            w++;
            if (w != i) {
                r->v[w] = *cur;
                cur->b.p = cur->e.p = NULL;
            }
        }
    }
    r->n = w + 1;
}

/* Index of the last range whose begin is <= k, or -1. */
static long last_begin_le(const emb_ranges *r, const uint8_t *k, size_t kn)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp(r->v[mid].b.p, r->v[mid].b.n, k, kn) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (long)lo - 1;
}

int emb_ranges_insert(emb_ranges *r, const uint8_t *b, size_t bn, const uint8_t *e, size_t en)
{
    if (cmp(b, bn, e, en) >= 0)
        return 0; /* an empty range covers nothing */
    /* The ranges that overlap or touch [b, e) are s..j: the last one beginning at or before b
     * (if it reaches b), and every one beginning in (b, e]. */
    long i = last_begin_le(r, b, bn);
    size_t s = (i >= 0 && cmp(b, bn, r->v[i].e.p, r->v[i].e.n) <= 0) ? (size_t)i : (size_t)(i + 1);
    long j = last_begin_le(r, e, en);
    if (j < (long)s) {
        /* Nothing to merge with: insert at s (at the end when clears come in key order). */
        size_t n = r->n;
        int rc = emb_ranges_add(r, b, bn, e, en);
        if (rc != 0)
            return rc;
        if (s < n) {
            emb_range x = r->v[n];
            memmove(&r->v[s + 1], &r->v[s], (n - s) * sizeof(*r->v));
            r->v[s] = x;
        }
        return 0;
    }
    emb_range *m = &r->v[s];
    if (cmp(b, bn, m->b.p, m->b.n) < 0) {
        emb_str nb;
        if (emb_str_set(&nb, b, bn) != 0)
            return KVQ_ENOMEM;
        emb_str_free(&m->b);
        m->b = nb;
    }
    const emb_str *last_e = &r->v[j].e;
    int take_new = cmp(e, en, last_e->p, last_e->n) > 0;
    emb_str ne = { NULL, 0 };
    if (take_new && emb_str_set(&ne, e, en) != 0)
        return KVQ_ENOMEM;
    if ((size_t)j > s) {
        if (!take_new) {
            /* Keep the end of range j: move it into m before range j is freed. */
            ne = r->v[j].e;
            r->v[j].e.p = NULL;
            r->v[j].e.n = 0;
            take_new = 1;
        }
        for (size_t x = s + 1; x <= (size_t)j; x++) {
            emb_str_free(&r->v[x].b);
            emb_str_free(&r->v[x].e);
        }
        memmove(&r->v[s + 1], &r->v[j + 1], (r->n - (size_t)j - 1) * sizeof(*r->v));
        r->n -= (size_t)j - s;
    }
    if (take_new) {
        emb_str_free(&m->e);
        m->e = ne;
    }
    return 0;
}

int emb_ranges_subtract(emb_ranges *r, const uint8_t *b, size_t bn, const uint8_t *e, size_t en)
{
    if (cmp(b, bn, e, en) >= 0)
        return 0;
    size_t n = r->n;
    for (size_t i = 0; i < n; i++) {
        emb_range *x = &r->v[i];
        if (cmp(x->e.p, x->e.n, b, bn) <= 0 || cmp(e, en, x->b.p, x->b.n) <= 0)
            continue; /* disjoint */
        int keep_left = cmp(x->b.p, x->b.n, b, bn) < 0;
        int keep_right = cmp(e, en, x->e.p, x->e.n) < 0;
        if (keep_left && keep_right) {
            /* [xb, b) stays here, [e, xe) is added at the end. */
            int rc = emb_ranges_add(r, e, en, r->v[i].e.p, r->v[i].e.n);
            if (rc != 0)
                return rc;
            x = &r->v[i];
        }
        if (keep_left) {
            emb_str nb;
            if (emb_str_set(&nb, b, bn) != 0)
                return KVQ_ENOMEM;
            emb_str_free(&x->e);
            x->e = nb;
        } else if (keep_right) {
            emb_str ne;
            if (emb_str_set(&ne, e, en) != 0)
                return KVQ_ENOMEM;
            emb_str_free(&x->b);
            x->b = ne;
        } else {
            /* Wholly covered: leave an empty range, which normalizing drops. */
            emb_str_free(&x->e);
            if (emb_str_set(&x->e, x->b.p, x->b.n) != 0)
                return KVQ_ENOMEM;
        }
    }
    return 0;
}

int emb_ranges_contains(const emb_ranges *r, const uint8_t *k, size_t kn)
{
    long i = last_begin_le(r, k, kn);
    return i >= 0 && cmp(k, kn, r->v[i].e.p, r->v[i].e.n) < 0;
}

int emb_ranges_intersects(
    const emb_ranges *r, const uint8_t *b, size_t bn, const uint8_t *e, size_t en)
{
    if (r->n == 0 || cmp(b, bn, e, en) >= 0)
        return 0;
    /* The candidate is the last range starting at or before b, or the first starting after. */
    long i = last_begin_le(r, b, bn);
    if (i >= 0 && cmp(b, bn, r->v[i].e.p, r->v[i].e.n) < 0)
        return 1;
    size_t j = (size_t)(i + 1);
    return j < r->n && cmp(r->v[j].b.p, r->v[j].b.n, e, en) < 0;
}

/* The overlay ------------------------------------------------------------------------------ */

static void entry_free(ov_entry *x)
{
    emb_str_free(&x->key);
    emb_str_free(&x->value);
    for (size_t i = 0; i < x->n_ops; i++)
        emb_str_free(&x->ops[i].param);
    kvq__free(x->ops);
    kvq__free(x);
}

void emb_overlay_free(emb_overlay *ov)
{
    for (size_t i = 0; i < ov->n; i++)
        entry_free(ov->v[i]);
    kvq__free(ov->v);
    ov->v = NULL;
    ov->n = ov->cap = 0;
    emb_ranges_free(&ov->cleared);
}

size_t emb_overlay_lower(const emb_overlay *ov, const uint8_t *k, size_t kn)
{
    /* Appending in key order is the common case (queue pushes): check the end first. */
    if (ov->n > 0 && cmp(ov->v[ov->n - 1]->key.p, ov->v[ov->n - 1]->key.n, k, kn) < 0)
        return ov->n;
    size_t lo = 0, hi = ov->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp(ov->v[mid]->key.p, ov->v[mid]->key.n, k, kn) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

ov_entry *emb_overlay_find(const emb_overlay *ov, const uint8_t *k, size_t kn, size_t *pos)
{
    size_t i = emb_overlay_lower(ov, k, kn);
    if (pos != NULL)
        *pos = i;
    if (i < ov->n && cmp(ov->v[i]->key.p, ov->v[i]->key.n, k, kn) == 0)
        return ov->v[i];
    return NULL;
}

static int overlay_insert(emb_overlay *ov, size_t pos, const uint8_t *k, size_t kn, ov_entry **out)
{
    if (ov->n == ov->cap) {
        size_t cap = ov->cap ? ov->cap * 2 : 16;
        ov_entry **v = kvq__realloc(ov->v, cap * sizeof(*v));
        if (v == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory for the write buffer");
        ov->v = v;
        ov->cap = cap;
    }
    ov_entry *x = kvq__calloc(1, sizeof(*x));
    if (x == NULL || emb_str_set(&x->key, k, kn) != 0) {
        kvq__free(x);
        return kvq__error(KVQ_ENOMEM, "out of memory for the write buffer");
    }
    if (pos < ov->n)
        memmove(&ov->v[pos + 1], &ov->v[pos], (ov->n - pos) * sizeof(*ov->v));
    ov->v[pos] = x;
    ov->n++;
    *out = x;
    return 0;
}

static void entry_reset(ov_entry *x)
{
    emb_str_free(&x->value);
    for (size_t i = 0; i < x->n_ops; i++)
        emb_str_free(&x->ops[i].param);
    x->n_ops = 0;
}

static int entry_get(emb_overlay *ov, const uint8_t *k, size_t kn, ov_entry **out)
{
    size_t pos;
    ov_entry *x = emb_overlay_find(ov, k, kn, &pos);
    if (x != NULL) {
        *out = x;
        return 0;
    }
    return overlay_insert(ov, pos, k, kn, out);
}

int emb_overlay_set(emb_overlay *ov, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    ov_entry *x;
    int rc = entry_get(ov, k, kn, &x);
    if (rc != 0)
        return rc;
    /* A key whose value carries this transaction's versionstamp stays unreadable when it is set
     * again (as on FoundationDB): only a clear makes it readable. */
    if (x->kind == OV_UNREADABLE)
        return 0;
    entry_reset(x);
    x->kind = OV_SET;
    return emb_str_set(&x->value, v, vn);
}

int emb_overlay_unreadable(emb_overlay *ov, const uint8_t *k, size_t kn)
{
    ov_entry *x;
    int rc = entry_get(ov, k, kn, &x);
    if (rc != 0)
        return rc;
    entry_reset(x);
    x->kind = OV_UNREADABLE;
    return 0;
}

int emb_overlay_cleared(const emb_overlay *ov, const uint8_t *k, size_t kn)
{
    return emb_ranges_contains(&ov->cleared, k, kn);
}

int emb_overlay_clear_range(
    emb_overlay *ov, const uint8_t *b, size_t bn, const uint8_t *e, size_t en)
{
    size_t i = emb_overlay_lower(ov, b, bn);
    size_t j = i;
    while (j < ov->n && cmp(ov->v[j]->key.p, ov->v[j]->key.n, e, en) < 0) {
        entry_free(ov->v[j]);
        j++;
    }
    if (j > i) {
        memmove(&ov->v[i], &ov->v[j], (ov->n - j) * sizeof(*ov->v));
        ov->n -= j - i;
    }
    /* The cleared ranges stay sorted and merged: one insertion, not a sort per clear. */
    return emb_ranges_insert(&ov->cleared, b, bn, e, en);
}

/* Makes a key read as cleared: [k, k + 0x00) joins the cleared ranges, its entry goes. */
static int overlay_clear_key(emb_overlay *ov, const uint8_t *k, size_t kn)
{
    uint8_t stack[256];
    uint8_t *e = kvq__key_succ(stack, sizeof(stack), k, kn);
    if (e == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for the write buffer");
    int rc = emb_overlay_clear_range(ov, k, kn, e, kn + 1);
    kvq__key_succ_free(e, stack);
    return rc;
}

int emb_overlay_atomic(
    emb_overlay *ov, const uint8_t *k, size_t kn, const uint8_t *param, size_t pn, int op)
{
    size_t pos;
    ov_entry *x = emb_overlay_find(ov, k, kn, &pos);
    int rc;
    if (x != NULL && x->kind == OV_UNREADABLE)
        return 0;
    if (x != NULL && x->kind == OV_SET) {
        /* The base value is known: fold the operation in now. */
        kvq_buf out = KVQ_BUF_INIT;
        int present;
        rc = emb_apply_atomic(&out, &present, op, x->value.p, x->value.n, 1, param, pn);
        if (rc == 0 && present) {
            emb_str_free(&x->value);
            rc = emb_str_set(&x->value, out.data, out.len);
        } else if (rc == 0) {
            /* COMPARE_AND_CLEAR cleared it: the key now reads as cleared. */
            rc = overlay_clear_key(ov, k, kn);
        }
        kvq_buf_dispose(&out);
        return rc;
    }
    if (x == NULL && emb_overlay_cleared(ov, k, kn)) {
        /* Cleared earlier in this transaction: the base is a missing value. */
        kvq_buf out = KVQ_BUF_INIT;
        int present;
        rc = emb_apply_atomic(&out, &present, op, NULL, 0, 0, param, pn);
        if (rc == 0 && present)
            rc = emb_overlay_set(ov, k, kn, out.data, out.len);
        kvq_buf_dispose(&out);
        return rc;
    }
    if (x == NULL) {
        rc = overlay_insert(ov, pos, k, kn, &x);
        if (rc != 0)
            return rc;
        x->kind = OV_ATOMIC;
    }
    if (x->n_ops == x->cap_ops) {
        size_t cap = x->cap_ops ? x->cap_ops * 2 : 4;
        ov_atomic *v = kvq__realloc(x->ops, cap * sizeof(*v));
        if (v == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory for the write buffer");
        x->ops = v;
        x->cap_ops = cap;
    }
    rc = emb_str_set(&x->ops[x->n_ops].param, param, pn);
    if (rc != 0)
        return rc;
    x->ops[x->n_ops].op = op;
    x->n_ops++;
    return 0;
}

/* Atomic operations, as FoundationDB defines them ------------------------------------------ */

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
