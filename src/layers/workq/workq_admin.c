/* The work queue's administration: dead letters (list, redrive, purge), listings of the items
 * in flight and delayed, and statistics. All reads are snapshot reads in pages of KVQ__WQ_BATCH. */
#include <string.h>

#include "layers/workq/workq_internal.h"

/* ---- dead letters -------------------------------------------------------------------------- */

typedef struct dlq_page {
    kvq_workq *w;
    kvq_buf after; /* continue after this key (empty: from the start) */
    kvq_buf vals[KVQ__WQ_BATCH];
    uint32_t deliv[KVQ__WQ_BATCH];
    size_t n;
    bool more;
} dlq_page;

/* One page of snapshot reads of the range [base + 00, base + FF), after the key `after` when it
 * is not empty: up to KVQ__WQ_BATCH rows into *kvs (valid until the next read of txn). */
static int read_page(kvq_txn *txn,
                     const kvq_buf *base,
                     const kvq_buf *after,
                     const kvq_kv **kvs,
                     size_t *got,
                     bool *more)
{
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    int rc = kvq__wq_range_of(&lo, &hi, base);
    if (rc == 0 && after->len > 0)
        rc = kvq__key_after(&lo, after->data, after->len);
    *got = 0;
    *more = false;
    if (rc == 0)
        rc = kvq_txn_get_range(kvs, got, more, txn, lo.data, lo.len, hi.data, hi.len, KVQ__WQ_BATCH,
                               KVQ_SNAPSHOT);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    return rc;
}

static int dlq_page_body(kvq_txn *txn, void *arg)
{
    dlq_page *p = arg;
    kvq_workq *w = p->w;
    kvq_buf k = KVQ_BUF_INIT;
    const kvq_kv *kvs;
    size_t got = 0;
    p->n = 0;
    /* What is due first (an ended lease may become a dead letter). */
    int rc = p->after.len == 0 ? kvq__q_due_gate(w->q, w, txn) : 0;
    if (rc == 0)
        rc = read_page(txn, &w->base_dlq, &p->after, &kvs, &got, &p->more);
    for (size_t i = 0; rc == 0 && i < got; i++) {
        rc = kvq__buf_set(&p->vals[i], kvs[i].value.data, kvs[i].value.len);
        kvq_bytes cv;
        int cp = 0;
        size_t plen = w->base_dlq.len;
        if (rc == 0)
            rc = kvq__wq_key_raw(&k, &w->base_c, kvs[i].key.data + plen, kvs[i].key.len - plen);
        if (rc == 0)
            rc = kvq_txn_get(&cv, &cp, txn, k.data, k.len, KVQ_SNAPSHOT);
        p->deliv[i] = rc == 0 && cp ? (uint32_t)kvq__le_get(cv.data, cv.len < 4 ? cv.len : 4) : 0;
        if (rc == 0 && i + 1 == got)
            rc = kvq__buf_set(&p->after, kvs[i].key.data, kvs[i].key.len);
    }
    if (rc == 0)
        p->n = got;
    kvq_buf_dispose(&k);
    return rc;
}

int kvq_workq_dlq_list(kvq_workq *w, kvq_workq_dlq_fn fn, void *payload)
{
    int rc = kvq__wq_check(w, NULL, 0, "kvq_workq_dlq_list");
    if (rc == 0 && fn == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_workq_dlq_list: fn is NULL");
    if (rc != 0)
        return rc;
    dlq_page *p = kvq__calloc(1, sizeof(*p));
    if (p == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    p->w = w;
    do {
        rc = kvq_db_transact(w->q->db, dlq_page_body, p);
        for (size_t i = 0; rc == 0 && i < p->n; i++) {
            kvq_bytes v = { p->vals[i].data, p->vals[i].len };
            rc = fn(v, p->deliv[i], payload);
        }
    } while (rc == 0 && p->more && p->n > 0);
    for (size_t i = 0; i < KVQ__WQ_BATCH; i++)
        kvq_buf_dispose(&p->vals[i]);
    kvq_buf_dispose(&p->after);
    kvq__free(p);
    return rc;
}

/* ---- listing in-flight and delayed items -------------------------------------------------- */

typedef struct item_page {
    kvq_workq *w;
    int delayed;   /* 0: in-flight items (by lease end), 1: delayed items (by due time) */
    kvq_buf after; /* continue after this index key (empty: from the start) */
    /* A page lists up to KVQ__WQ_BATCH index entries; a batch lease's entry lists all its items
     * in flight (batch_lease.c), so the page grows as needed. */
    kvq_buf *vals;
    kvq_workq_item *info;
    size_t n, cap;
    bool more;
} item_page;

/* Room for one more item in p. */
static int page_room(item_page *p)
{
    if (p->n < p->cap)
        return 0;
    size_t cap = p->cap == 0 ? KVQ__WQ_BATCH : 2 * p->cap;
    kvq_buf *vals = kvq__realloc(p->vals, cap * sizeof(*vals));
    if (vals == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    p->vals = vals;
    kvq_workq_item *info = kvq__realloc(p->info, cap * sizeof(*info));
    if (info == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    p->info = info;
    for (size_t i = p->cap; i < cap; i++) {
        kvq_buf b = KVQ_BUF_INIT;
        p->vals[i] = b;
    }
    p->cap = cap;
    return 0;
}

typedef struct batch_list_ctx {
    item_page *p;
    int64_t rv;
} batch_list_ctx;

/* One in-flight item of a batch lease into the page. */
static int batch_item(const kvq_workq_lease *lease, kvq_bytes value, void *arg)
{
    batch_list_ctx *c = arg;
    item_page *p = c->p;
    int rc = page_room(p);
    if (rc != 0)
        return rc;
    kvq_workq_item *it = &p->info[p->n];
    memset(it, 0, sizeof(*it));
    it->lease = *lease;
    it->deliveries = lease->deliveries;
    it->priority = lease->priority;
    it->due_ms = (lease->deadline - c->rv) / KVQ__VERSIONS_PER_MS;
    rc = kvq__buf_set(&p->vals[p->n], value.data, value.len);
    if (rc == 0)
        p->n++;
    return rc;
}

/* Whether an expiry-index key is a batch lease's (then *bid is its id). */
static int batch_entry(kvq_workq *w, kvq_bytes xkey, uint8_t *bid)
{
    kvq_tuple *t = NULL;
    int is = 0;
    if (kvq_tuple_unpack(&t, xkey.data + w->base_x.len, xkey.len - w->base_x.len) == 0 &&
        kvq_tuple_get_count(t) == 2 && kvq_tuple_get_elem(t, 1)->type == KVQ_TUPLE_BYTES &&
        kvq_tuple_get_elem(t, 1)->v.bytes.len == KVQ__WQ_BATCH_ID) {
        memcpy(bid, kvq_tuple_get_elem(t, 1)->v.bytes.data, KVQ__WQ_BATCH_ID);
        is = 1;
    }
    kvq_tuple_destroy(t);
    return is;
}

/* One in-flight item from its expiry-index key: its lease record and value (snapshot reads).
 * *found is 0 when the lease was settled meanwhile. */
static int inflight_item(kvq_workq *w,
                         kvq_txn *txn,
                         kvq_bytes xkey,
                         int64_t rv,
                         kvq_buf *val,
                         kvq_workq_item *it,
                         int *found,
                         kvq_buf *k)
{
    *found = 0;
    kvq_tuple *t = NULL;
    int rc = kvq_tuple_unpack(&t, xkey.data + w->base_x.len, xkey.len - w->base_x.len);
    if (rc != 0 || kvq_tuple_get_count(t) != 2 ||
        kvq_tuple_get_elem(t, 1)->type != KVQ_TUPLE_BYTES ||
        kvq_tuple_get_elem(t, 1)->v.bytes.len != 16) {
        kvq_tuple_destroy(t);
        return kvq__error(KVQ_EDAMAGED, "a malformed lease-expiry key");
    }
    memset(it, 0, sizeof(*it));
    memcpy(it->lease.id, kvq_tuple_get_elem(t, 1)->v.bytes.data, 16);
    kvq_tuple_destroy(t);
    kvq_bytes m, v;
    int pm = 0, pv = 0;
    rc = kvq__wq_id_key(k, &w->base_l, it->lease.id);
    if (rc == 0)
        rc = kvq_txn_get(&m, &pm, txn, k->data, k->len, KVQ_SNAPSHOT);
    if (rc == 0 && pm)
        rc = kvq__wq_id_key(k, &w->base_v, it->lease.id);
    if (rc == 0 && pm)
        rc = kvq_txn_get(&v, &pv, txn, k->data, k->len, KVQ_SNAPSHOT);
    if (rc != 0 || !pm || !pv)
        return rc;
    if (m.len < 20)
        return kvq__error(KVQ_EDAMAGED, "a malformed lease record");
    it->lease.deadline = (int64_t)kvq__le_get(m.data, 8);
    it->lease.deliveries = (uint32_t)kvq__le_get(m.data + 8, 4);
    it->lease.received = (int64_t)kvq__le_get(m.data + 12, 8);
    rc = kvq__wq_key_raw(k, &w->q->prefix, m.data + 20, m.len - 20);
    if (rc == 0)
        it->lease.priority =
            w->q->type == KVQ_QUEUE_PRIORITY ? kvq__q_key_priority(w->q, k->data, k->len) : 0;
    if (rc == 0)
        rc = kvq__buf_set(val, v.data, v.len);
    it->deliveries = it->lease.deliveries;
    it->priority = it->lease.priority;
    it->due_ms = (it->lease.deadline - rv) / KVQ__VERSIONS_PER_MS;
    *found = rc == 0;
    return rc;
}

/* One delayed item from its key (due, id, priority, deliveries) and value. */
static int delayed_item(kvq_workq *w, kvq_kv kv, int64_t rv, kvq_buf *val, kvq_workq_item *it)
{
    kvq_tuple *t = NULL;
    int rc = kvq_tuple_unpack(&t, kv.key.data + w->base_y.len, kv.key.len - w->base_y.len);
    if (rc != 0 || kvq_tuple_get_count(t) != 4 || kvq_tuple_get_elem(t, 0)->type != KVQ_TUPLE_INT ||
        kvq_tuple_get_elem(t, 2)->type != KVQ_TUPLE_INT ||
        kvq_tuple_get_elem(t, 3)->type != KVQ_TUPLE_INT) {
        kvq_tuple_destroy(t);
        return kvq__error(KVQ_EDAMAGED, "a malformed delayed-item key");
    }
    memset(it, 0, sizeof(*it));
    it->due_ms = (kvq_tuple_get_elem(t, 0)->v.i - rv) / KVQ__VERSIONS_PER_MS;
    it->priority = kvq_tuple_get_elem(t, 2)->v.i;
    it->deliveries = (uint32_t)kvq_tuple_get_elem(t, 3)->v.i;
    kvq_tuple_destroy(t);
    return kvq__buf_set(val, kv.value.data, kv.value.len);
}

static int item_page_body(kvq_txn *txn, void *arg)
{
    item_page *p = arg;
    kvq_workq *w = p->w;
    const kvq_buf *base = p->delayed ? &w->base_y : &w->base_x;
    kvq_buf k = KVQ_BUF_INIT;
    int64_t rv = 0;
    const kvq_kv *kvs;
    size_t got = 0;
    p->n = 0;
    p->more = false;
    int rc = kvq_txn_get_read_version(&rv, txn);
    /* What is due is ready first, so it is listed as neither (at the first page). */
    if (rc == 0 && p->after.len == 0)
        rc = kvq__q_due_gate(w->q, w, txn);
    if (rc == 0)
        rc = read_page(txn, base, &p->after, &kvs, &got, &p->more);
    /* kvs belongs to the range read; copy the last key before reading more. */
    if (rc == 0 && got > 0)
        rc = kvq__buf_set(&p->after, kvs[got - 1].key.data, kvs[got - 1].key.len);
    if (rc == 0 && got > 0 && !p->delayed) {
        /* Only the index keys are needed; the lease reads below may reuse the range's memory. */
        kvq_buf *keys = kvq__calloc(got, sizeof(*keys));
        if (keys == NULL)
            rc = kvq__error(KVQ_ENOMEM, "out of memory");
        for (size_t i = 0; rc == 0 && i < got; i++)
            rc = kvq__buf_set(&keys[i], kvs[i].key.data, kvs[i].key.len);
        for (size_t i = 0; rc == 0 && i < got; i++) {
            int found = 0;
            kvq_bytes xk = { keys[i].data, keys[i].len };
            uint8_t bid[KVQ__WQ_BATCH_ID];
            if (batch_entry(w, xk, bid)) {
                batch_list_ctx bc = { p, rv };
                rc = kvq__wq_batch_items(w, txn, bid, batch_item, &bc);
                continue;
            }
            rc = page_room(p);
            if (rc == 0)
                rc = inflight_item(w, txn, xk, rv, &p->vals[p->n], &p->info[p->n], &found, &k);
            if (rc == 0 && found)
                p->n++;
        }
        for (size_t i = 0; keys != NULL && i < got; i++)
            kvq_buf_dispose(&keys[i]);
        kvq__free(keys);
    } else {
        for (size_t i = 0; rc == 0 && i < got; i++) {
            rc = page_room(p);
            if (rc == 0)
                rc = delayed_item(w, kvs[i], rv, &p->vals[i], &p->info[i]);
            if (rc == 0)
                p->n++;
        }
    }
    if (rc == 0 && got == 0)
        p->more = false;
    kvq_buf_dispose(&k);
    return rc;
}

static int
list_items(kvq_workq *w, int delayed, kvq_workq_item_fn fn, void *payload, const char *name)
{
    int rc = kvq__wq_check(w, NULL, 0, name);
    if (rc == 0 && fn == NULL)
        rc = kvq__error(KVQ_EINVAL, "%s: fn is NULL", name);
    if (rc != 0)
        return rc;
    item_page *p = kvq__calloc(1, sizeof(*p));
    if (p == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    p->w = w;
    p->delayed = delayed;
    bool more;
    do {
        rc = kvq_db_transact(w->q->db, item_page_body, p);
        more = p->more;
        for (size_t i = 0; rc == 0 && i < p->n; i++) {
            p->info[i].value.data = p->vals[i].data;
            p->info[i].value.len = p->vals[i].len;
            rc = fn(&p->info[i], payload);
        }
    } while (rc == 0 && more);
    for (size_t i = 0; i < p->cap; i++)
        kvq_buf_dispose(&p->vals[i]);
    kvq__free(p->vals);
    kvq__free(p->info);
    kvq_buf_dispose(&p->after);
    kvq__free(p);
    return rc;
}

int kvq_workq_list_inflight(kvq_workq *w, kvq_workq_item_fn fn, void *payload)
{
    return list_items(w, 0, fn, payload, "kvq_workq_list_inflight");
}

int kvq_workq_list_delayed(kvq_workq *w, kvq_workq_item_fn fn, void *payload)
{
    return list_items(w, 1, fn, payload, "kvq_workq_list_delayed");
}

typedef struct redrive_ctx {
    kvq_workq *w;
    uint64_t moved;
    int more;
    int purge; /* delete the dead letters instead of moving them back */
} redrive_ctx;

static int redrive_body(kvq_txn *txn, void *arg)
{
    redrive_ctx *c = arg;
    kvq_workq *w = c->w;
    c->moved = 0;
    c->more = 0;
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT, k = KVQ_BUF_INIT;
    int rc = kvq__wq_range_of(&lo, &hi, &w->base_dlq);
    const kvq_kv *kvs;
    size_t got = 0;
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo.data, lo.len, hi.data, hi.len,
                               KVQ__WQ_BATCH, 0);
    if (rc == 0 && got == KVQ__WQ_BATCH)
        c->more = 1;
    size_t plen = w->base_dlq.len;
    for (size_t i = 0; rc == 0 && i < got; i++) {
        rc = kvq_txn_clear(txn, kvs[i].key.data, kvs[i].key.len);
        if (rc == 0)
            rc = kvq__wq_counter_add(txn, &w->n_dead, -1);
        if (rc == 0 && !c->purge)
            rc = kvq__wq_to_ready(w, txn, kvs[i].key.data + plen, kvs[i].key.len - plen,
                                  kvs[i].value, 0, -1, &k);
        if (rc == 0)
            c->moved++;
    }
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    kvq_buf_dispose(&k);
    return rc;
}

static int dlq_drain(kvq_workq *w, uint64_t *moved, int purge)
{
    if (moved != NULL)
        *moved = 0;
    int rc = 0;
    redrive_ctx c = { w, 0, 1, purge };
    while (rc == 0 && c.more) {
        rc = kvq_db_transact(w->q->db, redrive_body, &c);
        if (rc == 0 && moved != NULL)
            *moved += c.moved;
    }
    return rc;
}

int kvq_workq_dlq_redrive(uint64_t *out, kvq_workq *w)
{
    int rc = kvq__wq_check(w, NULL, 0, "kvq_workq_dlq_redrive");
    return rc != 0 ? rc : dlq_drain(w, out, 0);
}

int kvq_workq_dlq_purge(uint64_t *out, kvq_workq *w)
{
    int rc = kvq__wq_check(w, NULL, 0, "kvq_workq_dlq_purge");
    return rc != 0 ? rc : dlq_drain(w, out, 1);
}

/* ---- statistics -------------------------------------------------------------------------------
 */

static int read_counter(kvq_txn *txn, const kvq_buf *key, int64_t *out)
{
    kvq_bytes v;
    int present;
    int rc = kvq_txn_get(&v, &present, txn, key->data, key->len, KVQ_SNAPSHOT);
    *out = rc == 0 && present ? (int64_t)kvq__le_get(v.data, v.len) : 0;
    return rc;
}

typedef struct stats_ctx {
    kvq_workq *w;
    kvq_workq_stats m;
} stats_ctx;

static int stats_body(kvq_txn *txn, void *arg)
{
    stats_ctx *c = arg;
    kvq_workq *w = c->w;
    kvq_queue *q = w->q;
    int64_t rv;
    int rc = kvq_txn_get_read_version(&rv, txn);
    /* What is due is counted as ready (kvq__q_due_gate). */
    if (rc == 0)
        rc = kvq__q_due_gate(q, w, txn);
    if (rc == 0)
        rc = read_counter(txn, &w->n_inflight, &c->m.inflight);
    if (rc == 0)
        rc = read_counter(txn, &w->n_delayed, &c->m.delayed);
    if (rc == 0)
        rc = read_counter(txn, &w->n_dead, &c->m.dead);
    if (rc == 0)
        rc = read_counter(txn, &w->n_received, &c->m.received);
    if (rc == 0)
        rc = read_counter(txn, &w->n_taken, &c->m.taken);
    if (rc == 0)
        rc = read_counter(txn, &w->n_acked, &c->m.acked);
    if (rc == 0)
        rc = read_counter(txn, &w->n_requeued, &c->m.requeued);
    if (rc == 0)
        rc = read_counter(txn, &w->n_deadlettered, &c->m.dead_lettered);
    if (rc == 0)
        rc = read_counter(txn, &w->n_cleared, &c->m.cleared);
    if (rc == 0)
        rc = read_counter(txn, &w->n_cleared_ready, &c->m.cleared_ready);
    c->m.oldest_ready_age_ms = -1;
    if (rc != 0)
        return rc;
    if (q->type == KVQ_QUEUE_PRIORITY) {
        int64_t since = -1;
        rc = read_counter(txn, &w->n_ready, &c->m.ready);
        if (rc == 0)
            rc = kvq__wq_age_head(w, txn, 0, &since);
        if (rc == 0 && since >= 0)
            c->m.oldest_ready_age_ms = rv - since < 0 ? 0 : (rv - since) / KVQ__VERSIONS_PER_MS;
        return rc;
    }
    int64_t np, nq;
    rc = read_counter(txn, &q->npush, &np);
    if (rc == 0)
        rc = read_counter(txn, &q->npop, &nq);
    if (rc != 0)
        return rc;
    c->m.ready = np - nq;
    const kvq_kv *kvs;
    size_t got = 0;
    rc = kvq__q_head(q, txn, KVQ__END_MIN, 1, KVQ_SNAPSHOT, &kvs, &got);
    /* A durable item key ends with the 12-byte tuple versionstamp: 8 bytes of version first. */
    if (rc == 0 && got == 1 && kvs[0].key.len >= q->val_prefix.len + 13) {
        const uint8_t *vs = kvs[0].key.data + kvs[0].key.len - 12;
        int64_t ver = (int64_t)kvq__be_get(vs, 8);
        int64_t age = (rv - ver) / KVQ__VERSIONS_PER_MS;
        c->m.oldest_ready_age_ms = age < 0 ? 0 : age;
    }
    return rc;
}

int kvq_workq_get_stats(kvq_workq_stats *out, kvq_workq *w)
{
    int rc = kvq__wq_check(w, NULL, 0, "kvq_workq_get_stats");
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_workq_get_stats: out is NULL");
    if (rc != 0)
        return rc;
    stats_ctx c;
    memset(&c, 0, sizeof(c));
    c.w = w;
    rc = kvq_db_transact(w->q->db, stats_body, &c);
    if (rc == 0)
        *out = c.m;
    return rc;
}
