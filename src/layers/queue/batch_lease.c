/* Batch leases of the work queue (batch_lease_internal.h, which describes the record): loading
 * a batch's record and states, settling one of its items, moving an extended item out, the
 * upkeep of an expired batch and the listing of its items in flight. */
#include <string.h>

#include "layers/queue/batch_lease_internal.h"
#include "layers/queue/leases_internal.h"
#include "util/util.h"

void kvq__wq_b_dispose(batch *b)
{
    kvq__free(b->state);
    kvq__free(b->changed);
    kvq__free(b->items);
    kvq_buf_dispose(&b->meta);
    kvq_buf_dispose(&b->vals);
    memset(b, 0, sizeof(*b));
}

uint32_t kvq__wq_b_item_of(const uint8_t *lease_id)
{
    return (uint32_t)lease_id[BID] << 8 | lease_id[BID + 1];
}

/* out = base + pack((bid,)): the prefix of everything of one batch under base. */
int kvq__wq_b_bid_key(kvq_buf *out, const kvq_buf *base, const uint8_t *bid)
{
    kvq_tuple_elem e = kvq_tuple_bytes(bid, BID);
    return kvq__wq_key_of(out, base, &e, 1);
}

int kvq__wq_b_chunk_key(kvq_buf *out, kvq_workq *w, const uint8_t *bid, int stream, int64_t i)
{
    kvq_tuple_elem e[3] = { kvq_tuple_bytes(bid, BID), kvq_tuple_int(stream), kvq_tuple_int(i) };
    return kvq__wq_key_of(out, &w->base_b, e, 3);
}

static int state_key(kvq_buf *out, kvq_workq *w, const uint8_t *bid, uint32_t idx)
{
    return kvq__wq_b_chunk_key(out, w, bid, STREAM_STATE, idx);
}

/* [lo, hi): the settled states of a batch. */
static int state_range(kvq_buf *lo, kvq_buf *hi, kvq_workq *w, const uint8_t *bid)
{
    kvq_tuple_elem e[2] = { kvq_tuple_bytes(bid, BID), kvq_tuple_int(STREAM_STATE) };
    int rc = kvq__wq_key_of(lo, &w->base_b, e, 2);
    e[1] = kvq_tuple_int(STREAM_STATE + 1);
    if (rc == 0)
        rc = kvq__wq_key_of(hi, &w->base_b, e, 2);
    return rc;
}

int kvq__wq_b_bx_key(kvq_buf *out, kvq_workq *w, int64_t deadline, const uint8_t *bid)
{
    kvq_tuple_elem e[2] = { kvq_tuple_int(deadline), kvq_tuple_bytes(bid, BID) };
    return kvq__wq_key_of(out, &w->base_x, e, 2);
}

static int mark_key(kvq_buf *out, kvq_workq *w, int64_t received, const uint8_t *bid)
{
    kvq_tuple_elem e[2] = { kvq_tuple_int(received / KVQ__BUCKET_VERSIONS),
                            kvq_tuple_bytes(bid, BID) };
    return kvq__wq_key_of(out, &w->base_s, e, 2);
}

/* [lo, hi): every key under base + pack((bid,)). */
static int bid_range(kvq_buf *lo, kvq_buf *hi, const kvq_buf *base, const uint8_t *bid)
{
    static const uint8_t ff = 0xff;
    int rc = kvq__wq_b_bid_key(lo, base, bid);
    if (rc == 0)
        rc = kvq__buf_set(hi, lo->data, lo->len);
    if (rc == 0)
        rc = kvq_buf_append(hi, &ff, 1);
    return rc;
}

/* The tuple after a prefix: its integers (up to 2), or -1 when it is not that. */
static int tail_ints(const uint8_t *key, size_t len, size_t plen, int64_t *out, size_t want)
{
    kvq_tuple *t = NULL;
    if (len < plen || kvq_tuple_unpack(&t, key + plen, len - plen) != 0)
        return -1;
    int ok = kvq_tuple_get_count(t) == want;
    for (size_t i = 0; ok && i < want; i++) {
        ok = kvq_tuple_get_elem(t, i)->type == KVQ_TUPLE_INT;
        if (ok)
            out[i] = kvq_tuple_get_elem(t, i)->v.i;
    }
    kvq_tuple_destroy(t);
    return ok ? 0 : -1;
}

static int damaged(const char *what)
{
    return kvq__error(KVQ_EDAMAGED, "a malformed batch lease record (%s)", what);
}

/* Reads what is known of batch bid: its header (hflags: 0 or KVQ_SNAPSHOT) and the states of its
 * settled items (sflags), or else its settled marker (the bucket of `received`; -1: not looked
 * for). Settlers read the states as a snapshot and take a read conflict on the items they
 * settle (kvq__wq_b_flush), so that settling different items of one batch never conflicts. */
int kvq__wq_b_load(batch *b,
                   kvq_workq *w,
                   kvq_txn *txn,
                   const uint8_t *bid,
                   int64_t received,
                   unsigned int hflags,
                   unsigned int sflags)
{
    kvq__wq_b_dispose(b);
    memcpy(b->id, bid, BID);
    kvq_buf k = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    kvq_bytes v;
    int present = 0;
    int rc = kvq__wq_b_bid_key(&k, &w->base_b, bid);
    if (rc == 0)
        rc = kvq_txn_get(&v, &present, txn, k.data, k.len, hflags);
    if (rc == 0 && present) {
        if (v.len < HDR || v.data[0] != FORMAT) {
            rc = v.len > 0 && v.data[0] != FORMAT
                     ? kvq__error(KVQ_EDAMAGED,
                                  "a batch lease of format %u, which this kvq does not know "
                                  "(written by a newer kvq?)",
                                  v.data[0])
                     : damaged("short header");
            goto out;
        }
        b->n = (uint32_t)kvq__le_get(v.data + 1, 4);
        b->deadline = (int64_t)kvq__le_get(v.data + 5, 8);
        b->received = (int64_t)kvq__le_get(v.data + 13, 8);
        if (b->n < 1 || b->n > MANY_MAX) {
            rc = damaged("item count");
            goto out;
        }
        b->state = kvq__calloc(b->n, 1);
        b->changed = kvq__calloc(b->n, 1);
        if (b->state == NULL || b->changed == NULL) {
            rc = kvq__error(KVQ_ENOMEM, "out of memory for a batch of %u", b->n);
            goto out;
        }
        const kvq_kv *kvs;
        size_t got = 0;
        rc = state_range(&k, &hi, w, bid);
        if (rc == 0)
            rc =
                kvq_txn_get_range(&kvs, &got, NULL, txn, k.data, k.len, hi.data, hi.len, 0, sflags);
        for (size_t i = 0; rc == 0 && i < got; i++) {
            int64_t idx;
            if (tail_ints(kvs[i].key.data, kvs[i].key.len, k.len, &idx, 1) != 0 || idx < 0 ||
                idx >= b->n || kvs[i].value.len != 1)
                rc = damaged("settled item");
            else
                b->state[idx] = kvs[i].value.data[0];
        }
        if (rc == 0)
            b->kind = B_LIVE;
    } else if (rc == 0 && received >= 0) {
        rc = mark_key(&k, w, received, bid);
        if (rc == 0)
            rc = kvq_txn_get(&v, &present, txn, k.data, k.len, hflags);
        if (rc == 0 && present && v.len >= 1 && v.len <= MANY_MAX) {
            b->n = (uint32_t)v.len;
            b->state = kvq__malloc(v.len);
            if (b->state == NULL)
                rc = kvq__error(KVQ_ENOMEM, "out of memory");
            else
                memcpy(b->state, v.data, v.len);
            b->kind = B_MARKED;
            b->received = received;
        }
    }
out:
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&hi);
    return rc;
}

/* Reads a live batch's item records and values (flags: 0 or KVQ_SNAPSHOT). */
static int batch_load_full(batch *b, kvq_workq *w, kvq_txn *txn, unsigned int flags)
{
    if (b->full)
        return 0;
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    size_t *vstart = NULL, *vlen = NULL, nv = 0;
    const kvq_kv *kvs;
    size_t got = 0;
    b->meta.len = b->vals.len = 0;
    int rc = bid_range(&lo, &hi, &w->base_b, b->id);
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo.data, lo.len, hi.data, hi.len, 0, flags);
    if (rc == 0 && (got == 0 || kvs[0].key.len != lo.len || kvs[0].value.len < HDR))
        rc = damaged("no header");
    if (rc == 0) {
        vstart = kvq__calloc(got, sizeof(*vstart));
        vlen = kvq__calloc(got, sizeof(*vlen));
        b->items = kvq__calloc(b->n, sizeof(*b->items));
        if (vstart == NULL || vlen == NULL || b->items == NULL)
            rc = kvq__error(KVQ_ENOMEM, "out of memory for a batch of %u", b->n);
    }
    if (rc == 0)
        rc = kvq_buf_append(&b->meta, kvs[0].value.data + HDR, kvs[0].value.len - HDR);
    for (size_t i = 1; rc == 0 && i < got; i++) {
        int64_t si[2];
        if (tail_ints(kvs[i].key.data, kvs[i].key.len, lo.len, si, 2) != 0) {
            rc = damaged("chunk key");
        } else if (si[0] == STREAM_STATE) {
            continue;
        } else if (si[0] == STREAM_META) {
            rc = kvq_buf_append(&b->meta, kvs[i].value.data, kvs[i].value.len);
        } else {
            vstart[nv] = b->vals.len;
            vlen[nv++] = kvs[i].value.len;
            rc = kvq_buf_append(&b->vals, kvs[i].value.data, kvs[i].value.len);
        }
    }
    /* The item records in order; each value where the packing rule put it, or (no value keys)
     * all of them after the records, in the header. */
    int inline_vals = rc == 0 && kvq__le_get(kvs[0].value.data + 25, 4) == 0;
    size_t mo = 0, c = 0, o = 0;
    for (uint32_t i = 0; rc == 0 && i < b->n; i++) {
        bitem *it = &b->items[i];
        if (b->meta.len - mo < ENTRY) {
            rc = damaged("item records");
            break;
        }
        const uint8_t *p = b->meta.data + mo;
        it->deliv = (uint32_t)kvq__le_get(p, 4);
        it->since = (int64_t)kvq__le_get(p + 4, 8);
        it->slen = (size_t)kvq__le_get(p + 12, 2);
        it->vlen = (size_t)kvq__le_get(p + 14, 4);
        it->soff = mo + ENTRY;
        mo += ENTRY + it->slen;
        if (mo > b->meta.len || it->vlen > VAL_CHUNK) {
            rc = damaged("item record");
            break;
        }
        if (inline_vals) {
            it->voff = o; /* from the end of the records, fixed below */
            o += it->vlen;
            continue;
        }
        if (c < nv && o + it->vlen > vlen[c]) {
            c++;
            o = 0;
        }
        if (c >= nv || o + it->vlen > vlen[c]) {
            rc = damaged("values");
            break;
        }
        it->voff = vstart[c] + o;
        o += it->vlen;
    }
    if (rc == 0 && inline_vals) {
        if (b->meta.len - mo != o)
            rc = damaged("values");
        else
            rc = kvq__buf_set(&b->vals, b->meta.data + mo, o);
    }
    if (rc == 0)
        b->full = 1;
    kvq__free(vstart);
    kvq__free(vlen);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    return rc;
}

static void batch_mark(batch *b, uint32_t idx, uint8_t st)
{
    b->state[idx] = st;
    b->changed[idx] = 1;
    if (!b->any || idx < b->lo)
        b->lo = idx;
    if (!b->any || idx > b->hi)
        b->hi = idx;
    b->any = 1;
}

/* Stores the states changed in this transaction, with a read conflict on them (two settlers
 * of one item conflict); when every item is settled, the batch's keys go and its marker stays. */
int kvq__wq_b_flush(batch *b, kvq_workq *w, kvq_txn *txn)
{
    if (b->kind != B_LIVE || !b->any)
        return 0;
    kvq_buf k = KVQ_BUF_INIT, k2 = KVQ_BUF_INIT;
    static const uint8_t zero = 0;
    int rc = state_key(&k, w, b->id, b->lo);
    if (rc == 0)
        rc = state_key(&k2, w, b->id, b->hi);
    if (rc == 0)
        rc = kvq_buf_append(&k2, &zero, 1);
    if (rc == 0)
        rc = kvq_txn_add_conflict_range(txn, k.data, k.len, k2.data, k2.len, KVQ_CONFLICT_READ);
    int all = 1;
    for (uint32_t i = 0; i < b->n && all; i++)
        all = b->state[i] != ST_LIVE;
    if (rc == 0 && all) {
        rc = bid_range(&k, &k2, &w->base_b, b->id);
        if (rc == 0)
            rc = kvq_txn_clear_range(txn, k.data, k.len, k2.data, k2.len);
        if (rc == 0)
            rc = kvq__wq_b_bx_key(&k, w, b->deadline, b->id);
        if (rc == 0)
            rc = kvq_txn_clear(txn, k.data, k.len);
        if (rc == 0)
            rc = mark_key(&k, w, b->received, b->id);
        if (rc == 0)
            rc = kvq_txn_set(txn, k.data, k.len, b->state, b->n);
        if (rc == 0)
            b->kind = B_MARKED;
    } else {
        for (uint32_t i = b->lo; rc == 0 && i <= b->hi; i++) {
            if (!b->changed[i])
                continue;
            rc = state_key(&k, w, b->id, i);
            if (rc == 0)
                rc = kvq_txn_set(txn, k.data, k.len, &b->state[i], 1);
        }
    }
    if (rc == 0 && b->changed != NULL) {
        memset(b->changed, 0, b->n);
        b->any = 0;
    }
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&k2);
    return rc;
}

/* Whether b holds the lease of its item idx (else the single-lease path does). */
int kvq__wq_b_owns(const batch *b, uint32_t idx)
{
    return b->kind != B_NONE && idx < b->n && b->state[idx] != ST_MOVED;
}

/* An extended item leaves its batch for a lease of its own, with the same id (workq.c's
 * layout: lease record, value, expiry index, ready version). */
static int move_out(
    batch *b, kvq_workq *w, kvq_txn *txn, uint32_t idx, const kvq_workq_lease *lease, int64_t nd)
{
    const bitem *it = &b->items[idx];
    uint8_t m[20];
    kvq__le64_put(m, (uint64_t)nd);
    kvq__le32_put(m + 8, it->deliv);
    kvq__le64_put(m + 12, (uint64_t)b->received);
    kvq_buf k = KVQ_BUF_INIT, v = KVQ_BUF_INIT;
    int rc = kvq_buf_append(&v, m, sizeof(m));
    if (rc == 0)
        rc = kvq_buf_append(&v, b->meta.data + it->soff, it->slen);
    if (rc == 0)
        rc = kvq__wq_id_key(&k, &w->base_l, lease->id);
    if (rc == 0)
        rc = kvq_txn_set(txn, k.data, k.len, v.data, v.len);
    if (rc == 0)
        rc = kvq__wq_id_key(&k, &w->base_v, lease->id);
    if (rc == 0)
        rc = kvq_txn_set(txn, k.data, k.len, b->vals.data + it->voff, it->vlen);
    kvq_tuple_elem e[2] = { kvq_tuple_int(nd), kvq_tuple_bytes(lease->id, 16) };
    if (rc == 0)
        rc = kvq__wq_key_of(&k, &w->base_x, e, 2);
    if (rc == 0)
        rc = kvq_txn_set(txn, k.data, k.len, NULL, 0);
    if (rc == 0 && it->since >= 0) {
        uint8_t sv[8];
        kvq__le64_put(sv, (uint64_t)it->since);
        rc = kvq__wq_id_key(&k, &w->base_t, lease->id);
        if (rc == 0)
            rc = kvq_txn_set(txn, k.data, k.len, sv, sizeof(sv));
    }
    /* Long polls sleep until the first lease ends: wake them when this one ends sooner. */
    if (rc == 0 && nd < b->deadline)
        rc = kvq__wq_counter_add(txn, &w->tick, 1);
    if (rc == 0)
        batch_mark(b, idx, ST_MOVED);
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&v);
    return rc;
}

/* Settles item idx of b, which owns it (kvq__wq_b_owns). */
int kvq__wq_b_settle_item(batch *b,
                          kvq_workq *w,
                          kvq_txn *txn,
                          uint32_t idx,
                          kvq_workq_lease *lease,
                          int kind,
                          int64_t arg,
                          int64_t rv,
                          kvq__wq_tally *t)
{
    uint8_t st = b->state[idx];
    if (st == ST_ACK || st == ST_NACK)
        return kvq__error(KVQ_ELEASE_SETTLED, "the lease was already %s",
                          st == ST_NACK ? "nacked" : "acked");
    if (st != ST_LIVE || b->kind != B_LIVE)
        return kvq__error(KVQ_ELEASE_EXPIRED,
                          "the lease expired and its item went back to the queue");
    if (rv >= b->deadline)
        return kvq__error(KVQ_ELEASE_EXPIRED,
                          "the lease ended %lld ms ago (at version %lld); nothing was changed",
                          (long long)((rv - b->deadline) / KVQ__VERSIONS_PER_MS),
                          (long long)b->deadline);
    if (kind == SETTLE_ACK) {
        batch_mark(b, idx, ST_ACK);
        t->inflight--;
        t->acked++;
        return 0;
    }
    int rc = batch_load_full(b, w, txn, 0);
    if (rc != 0)
        return rc;
    if (kind == SETTLE_EXTEND) {
        rc = move_out(b, w, txn, idx, lease, rv + arg);
        if (rc == 0)
            lease->deadline = rv + arg;
        return rc;
    }
    const bitem *it = &b->items[idx];
    const uint8_t *suffix = b->meta.data + it->soff;
    kvq_bytes v = { b->vals.data + it->voff, it->vlen };
    kvq_buf k = KVQ_BUF_INIT;
    batch_mark(b, idx, ST_NACK);
    t->inflight--;
    if (w->opts.max_deliveries > 0 && it->deliv >= w->opts.max_deliveries) {
        rc = kvq__wq_to_dead(w, txn, suffix, it->slen, v, it->deliv, &k);
    } else if (arg > 0) {
        rc = kvq__wq_key_raw(&k, &w->q->prefix, suffix, it->slen);
        int64_t prio = rc == 0 ? kvq__q_key_priority(w->q, k.data, k.len) : 0;
        if (rc == 0)
            rc = kvq__wq_put_delayed(w, txn, rv + arg, prio, it->deliv, v, &k);
    } else {
        rc = kvq__wq_to_ready(w, txn, suffix, it->slen, v, it->deliv, it->since, &k);
    }
    kvq_buf_dispose(&k);
    return rc;
}

/* The outcome of a lease that b knows of, when b is not live (its marker). */
int kvq__wq_b_marked_outcome(const batch *b, uint32_t idx)
{
    uint8_t st = b->state[idx];
    if (st == ST_ACK || st == ST_NACK)
        return kvq__error(KVQ_ELEASE_SETTLED, "the lease was already %s",
                          st == ST_NACK ? "nacked" : "acked");
    return kvq__error(KVQ_ELEASE_EXPIRED, "the lease expired and its item went back to the queue");
}

int kvq__wq_batch_settle(int *handled,
                         kvq_workq *w,
                         kvq_txn *txn,
                         kvq_workq_lease *lease,
                         int kind,
                         int64_t arg,
                         kvq__wq_tally *tally)
{
    *handled = 0;
    int64_t rv;
    int rc = kvq_txn_get_read_version(&rv, txn);
    if (rc != 0)
        return rc;
    batch b;
    memset(&b, 0, sizeof(b));
    uint32_t idx = kvq__wq_b_item_of(lease->id);
    rc = kvq__wq_b_load(&b, w, txn, lease->id, lease->received, 0, KVQ_SNAPSHOT);
    if (rc == 0 && kvq__wq_b_owns(&b, idx)) {
        *handled = 1;
        kvq__wq_tally own;
        memset(&own, 0, sizeof(own));
        kvq__wq_tally *t = tally != NULL ? tally : &own;
        rc = b.kind == B_LIVE ? kvq__wq_b_settle_item(&b, w, txn, idx, lease, kind, arg, rv, t)
                              : kvq__wq_b_marked_outcome(&b, idx);
        if (rc == 0)
            rc = kvq__wq_b_flush(&b, w, txn);
        if (rc == 0 && tally == NULL)
            rc = kvq__wq_tally_apply(w, txn, &own);
    }
    kvq__wq_b_dispose(&b);
    return rc;
}

int kvq__wq_batch_expire(
    kvq_workq *w, kvq_txn *txn, const uint8_t *bid, int64_t *budget, uint64_t *moved, int *done)
{
    *done = 1;
    batch b;
    memset(&b, 0, sizeof(b));
    /* Not snapshots: a settler of an item that commits meanwhile makes this pass retry. */
    int rc = kvq__wq_b_load(&b, w, txn, bid, -1, 0, 0);
    if (rc == 0 && b.kind == B_LIVE)
        rc = batch_load_full(&b, w, txn, 0);
    int64_t back = 0;
    kvq_buf k = KVQ_BUF_INIT;
    for (uint32_t i = 0; rc == 0 && b.kind == B_LIVE && i < b.n; i++) {
        if (b.state[i] != ST_LIVE)
            continue;
        if (*budget <= 0) {
            *done = 0;
            break;
        }
        const bitem *it = &b.items[i];
        kvq_bytes v = { b.vals.data + it->voff, it->vlen };
        rc = kvq__wq_give_back(w, txn, b.meta.data + it->soff, it->slen, v, it->deliv, it->since,
                               &k, NULL);
        batch_mark(&b, i, ST_EXPIRED);
        back++;
        (*moved)++;
        *budget -= (int64_t)(it->vlen + 2 * it->slen + 64);
    }
    if (rc == 0 && back > 0)
        rc = kvq__wq_counter_add(txn, &w->n_inflight, -back);
    /* Every item settled already (two settlers of its last items, each seeing the other's
     * item in flight, both left the record): it goes now all the same. */
    if (rc == 0 && b.kind == B_LIVE && *done && !b.any) {
        b.any = 1;
        b.lo = b.hi = 0;
    }
    if (rc == 0)
        rc = kvq__wq_b_flush(&b, w, txn);
    kvq_buf_dispose(&k);
    kvq__wq_b_dispose(&b);
    return rc;
}

int kvq__wq_batch_items(
    kvq_workq *w, kvq_txn *txn, const uint8_t *bid, kvq__wq_batch_item_fn fn, void *arg)
{
    batch b;
    memset(&b, 0, sizeof(b));
    int rc = kvq__wq_b_load(&b, w, txn, bid, -1, KVQ_SNAPSHOT, KVQ_SNAPSHOT);
    if (rc == 0 && b.kind == B_LIVE)
        rc = batch_load_full(&b, w, txn, KVQ_SNAPSHOT);
    kvq_buf k = KVQ_BUF_INIT;
    for (uint32_t i = 0; rc == 0 && b.kind == B_LIVE && i < b.n; i++) {
        if (b.state[i] != ST_LIVE)
            continue;
        const bitem *it = &b.items[i];
        kvq_workq_lease l;
        memcpy(l.id, bid, BID);
        l.id[BID] = (uint8_t)(i >> 8);
        l.id[BID + 1] = (uint8_t)i;
        l.received = b.received;
        l.deadline = b.deadline;
        l.deliveries = it->deliv;
        rc = kvq__wq_key_raw(&k, &w->q->prefix, b.meta.data + it->soff, it->slen);
        l.priority = rc == 0 ? kvq__q_key_priority(w->q, k.data, k.len) : 0;
        kvq_bytes v = { b.vals.data + it->voff, it->vlen };
        if (rc == 0)
            rc = fn(&l, v, arg);
    }
    kvq_buf_dispose(&k);
    kvq__wq_b_dispose(&b);
    return rc;
}
