/* Owned strings and key ranges (ranges.h), and the packed form of write-conflict ranges. */
#include <stdlib.h>
#include <string.h>

#include "ranges.h"

/* s becomes a copy of p[0..n) in q, freshly allocated (NULL: out of memory). */
static int str_fill(emb_str *s, uint8_t *q, const uint8_t *p, size_t n)
{
    if (q == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for %zu bytes", n);
    if (n > 0)
        memcpy(q, p, n);
    s->p = q;
    s->n = n;
    return 0;
}

int emb_str_set(emb_str *s, const uint8_t *p, size_t n)
{
    return str_fill(s, kvq__malloc(n), p, n);
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

/* A string of r: from r's arena if it has one, else owned. */
static int rstr_set(const emb_ranges *r, emb_str *s, const uint8_t *p, size_t n)
{
    if (r->arena == NULL)
        return emb_str_set(s, p, n);
    return str_fill(s, emb_arena_alloc(r->arena, n), p, n);
}

static void rstr_free(const emb_ranges *r, emb_str *s)
{
    if (r->arena == NULL) {
        emb_str_free(s);
    } else {
        s->p = NULL;
        s->n = 0;
    }
}

/* Room for one more range at the end. */
static int ranges_room(emb_ranges *r)
{
    if (r->n < r->cap)
        return 0;
    size_t cap = r->cap ? r->cap * 2 : 8;
    emb_range *v = kvq__realloc(r->v, cap * sizeof(*v));
    if (v == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for conflict ranges");
    r->v = v;
    r->cap = cap;
    return 0;
}

int emb_ranges_add(emb_ranges *r, const uint8_t *b, size_t bn, const uint8_t *e, size_t en)
{
    if (ranges_room(r) != 0)
        return KVQ_ENOMEM;
    emb_range *x = &r->v[r->n];
    if (rstr_set(r, &x->b, b, bn) != 0)
        return KVQ_ENOMEM;
    if (rstr_set(r, &x->e, e, en) != 0) {
        rstr_free(r, &x->b);
        return KVQ_ENOMEM;
    }
    r->n++;
    return 0;
}

int emb_ranges_add_lent(emb_ranges *r, const uint8_t *b, size_t bn, const uint8_t *e, size_t en)
{
    if (r->arena == NULL)
        return emb_ranges_add(r, b, bn, e, en);
    if (ranges_room(r) != 0)
        return KVQ_ENOMEM;
    emb_range *x = &r->v[r->n++];
    x->b.p = (uint8_t *)b;
    x->b.n = bn;
    x->e.p = (uint8_t *)e;
    x->e.n = en;
    return 0;
}

void emb_ranges_clear(emb_ranges *r)
{
    for (size_t i = 0; i < r->n; i++) {
        rstr_free(r, &r->v[i].b);
        rstr_free(r, &r->v[i].e);
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
            rstr_free(r, &r->v[i].b);
            rstr_free(r, &r->v[i].e);
        } else {
            r->v[k++] = r->v[i];
        }
    }
    r->n = k;
    if (r->n < 2)
        return;
    /* Ranges mostly come in key order (a batch's keys, a pop's reads): sort only when not. */
    size_t sorted = 1;
    while (sorted < r->n && range_cmp(&r->v[sorted - 1], &r->v[sorted]) <= 0)
        sorted++;
    if (sorted < r->n)
        qsort(r->v, r->n, sizeof(*r->v), range_cmp);
    size_t w = 0;
    for (size_t i = 1; i < r->n; i++) {
        emb_range *last = &r->v[w];
        emb_range *cur = &r->v[i];
        if (cmp(cur->b.p, cur->b.n, last->e.p, last->e.n) <= 0) {
            /* Overlapping or touching: extend the last range. */
            if (cmp(cur->e.p, cur->e.n, last->e.p, last->e.n) > 0) {
                rstr_free(r, &last->e);
                last->e = cur->e;
                cur->e.p = NULL;
            }
            rstr_free(r, &cur->b);
            rstr_free(r, &cur->e);
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
        if (rstr_set(r, &nb, b, bn) != 0)
            return KVQ_ENOMEM;
        rstr_free(r, &m->b);
        m->b = nb;
    }
    const emb_str *last_e = &r->v[j].e;
    int take_new = cmp(e, en, last_e->p, last_e->n) > 0;
    emb_str ne = { NULL, 0 };
    if (take_new && rstr_set(r, &ne, e, en) != 0)
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
            rstr_free(r, &r->v[x].b);
            rstr_free(r, &r->v[x].e);
        }
        memmove(&r->v[s + 1], &r->v[j + 1], (r->n - (size_t)j - 1) * sizeof(*r->v));
        r->n -= (size_t)j - s;
    }
    if (take_new) {
        rstr_free(r, &m->e);
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
            if (rstr_set(r, &nb, b, bn) != 0)
                return KVQ_ENOMEM;
            rstr_free(r, &x->e);
            x->e = nb;
        } else if (keep_right) {
            emb_str ne;
            if (rstr_set(r, &ne, e, en) != 0)
                return KVQ_ENOMEM;
            rstr_free(r, &x->b);
            x->b = ne;
        } else {
            /* Wholly covered: leave an empty range, which normalizing drops. */
            rstr_free(r, &x->e);
            if (rstr_set(r, &x->e, x->b.p, x->b.n) != 0)
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

/* ---- packed ranges ------------------------------------------------------------------------ */

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void le32_put(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int emb_ranges_pack(kvq_buf *out, const emb_ranges *w)
{
    size_t need = 0;
    for (size_t i = 0; i < w->n; i++)
        need += 8 + w->v[i].b.n + w->v[i].e.n;
    if (kvq_buf_grow(out, need) != 0)
        return kvq__error(KVQ_ENOMEM, "out of memory for the write log");
    uint8_t *p = out->data + out->len;
    for (size_t i = 0; i < w->n; i++) {
        const emb_str *s[2] = { &w->v[i].b, &w->v[i].e };
        for (int j = 0; j < 2; j++) {
            le32_put(p, (uint32_t)s[j]->n);
            if (s[j]->n > 0)
                memcpy(p + 4, s[j]->p, s[j]->n);
            p += 4 + s[j]->n;
        }
    }
    out->len += need;
    return 0;
}

int emb_ranges_packed_intersects(const emb_ranges *reads, const uint8_t *p, size_t n, int *hit)
{
    static const uint8_t z[1] = { 0 };
    size_t off = 0;
    *hit = 0;
    while (off < n) {
        const uint8_t *s[2];
        size_t sn[2];
        for (int j = 0; j < 2; j++) {
            if (n - off < 4 || n - off - 4 < le32(p + off))
                return kvq__error(KVQ_EDAMAGED,
                                  "an entry of the conflict log is malformed: the database file "
                                  "is damaged");
            sn[j] = le32(p + off);
            s[j] = sn[j] > 0 ? p + off + 4 : z;
            off += 4 + sn[j];
        }
        if (emb_ranges_intersects(reads, s[0], sn[0], s[1], sn[1])) {
            *hit = 1;
            return 0;
        }
    }
    return 0;
}
