/* The read-your-writes overlay of a transaction: what its reads see of its own writes (values
 * set, ranges cleared, atomic operations pending on values it has not read, keys it made
 * unreadable with versionstamps). Everything it holds is in the transaction's arena: its keys,
 * values and parameters are the transaction's mutations' own bytes (lent, not copied), and what
 * it computes (a folded atomic operation, its entries) is carved from the arena, so freeing it
 * frees one array. */
#include <stdlib.h>
#include <string.h>

#include "emb.h"

static int cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    return kvq__bytes_cmp(a, an, b, bn);
}

void emb_overlay_free(emb_overlay *ov)
{
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
    ov_entry *x = emb_arena_alloc(ov->arena, sizeof(*x));
    if (x == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for the write buffer");
    memset(x, 0, sizeof(*x));
    x->key.p = (uint8_t *)k;
    x->key.n = kn;
    if (pos < ov->n)
        memmove(&ov->v[pos + 1], &ov->v[pos], (ov->n - pos) * sizeof(*ov->v));
    ov->v[pos] = x;
    ov->n++;
    *out = x;
    return 0;
}

static void entry_reset(ov_entry *x)
{
    x->value.p = NULL;
    x->value.n = 0;
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
    x->value.p = (uint8_t *)v;
    x->value.n = vn;
    return 0;
}

/* A computed value, copied into the arena. */
static int arena_copy(emb_overlay *ov, const uint8_t *p, size_t n, const uint8_t **out)
{
    uint8_t *q = emb_arena_alloc(ov->arena, n);
    if (q == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for the write buffer");
    if (n > 0)
        memcpy(q, p, n);
    *out = q;
    return 0;
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
    while (j < ov->n && cmp(ov->v[j]->key.p, ov->v[j]->key.n, e, en) < 0)
        j++;
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
        const uint8_t *v = NULL;
        if (rc == 0 && present) {
            rc = arena_copy(ov, out.data, out.len, &v);
            if (rc == 0) {
                x->value.p = (uint8_t *)v;
                x->value.n = out.len;
            }
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
        const uint8_t *v = NULL;
        if (rc == 0 && present)
            rc = arena_copy(ov, out.data, out.len, &v);
        if (rc == 0 && present)
            rc = emb_overlay_set(ov, k, kn, v, out.len);
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
        /* Doubling in the arena: what an entry leaves behind is at most what it holds. */
        size_t cap = x->cap_ops ? x->cap_ops * 2 : 4;
        ov_atomic *v = emb_arena_alloc(ov->arena, cap * sizeof(*v));
        if (v == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory for the write buffer");
        if (x->n_ops > 0)
            memcpy(v, x->ops, x->n_ops * sizeof(*v));
        x->ops = v;
        x->cap_ops = cap;
    }
    x->ops[x->n_ops].param.p = (uint8_t *)param;
    x->ops[x->n_ops].param.n = pn;
    x->ops[x->n_ops].op = op;
    x->n_ops++;
    return 0;
}
