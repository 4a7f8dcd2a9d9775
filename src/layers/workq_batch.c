/* Batches of the work queue (kvq/workq_batch.h): receive, ack and nack many items in one
 * transaction, so that a consumer of small jobs pays one commit per batch instead of one per
 * item; a batch received together is leased as one record (below). Leases of single receives
 * (workq.c) and of batch items mix freely in every call: an item's lease is settled by the batch
 * that holds it, any other by workq.c's single-lease path. */
#include <string.h>

#include "kvq/workq_batch.h"
#include "layers/workq_internal.h"
#include "util/util.h"

#define MANY_MAX 10000

/* ---- batch leases ---------------------------------------------------------------------------
 *
 * A batch of items received in one transaction is leased as one record instead of one lease per
 * item: the items leave the queue with one clear_range (the run read from its head), and their
 * keys, delivery counts and values go into the batch's record, under bk ("wq","b", bid14); one
 * expiry index entry bk ("wq","x", deadline, bid14) brings the batch back when it ends. So a
 * receive of 100 writes a few keys, as a pop of 100 does, and an ack of the whole batch clears
 * two ranges and writes one marker, instead of some seven keys per item each way.
 *
 * An item's lease id is the batch id and the item's number, so its token settles it alone. An
 * item settled while others of its batch are in flight gets a byte under bk ("wq","bs", bid14,
 * item); when every item is settled, the batch's keys go and a marker bk ("wq","s", bucket,
 * bid14) keeps one byte per item ('a', 'n', 'e', 'm'), so that a late ack still tells "settled"
 * from "expired" (as a single lease's marker does). An extend moves its item out to a lease of
 * its own (workq.c's layout, same id), marked 'm'; the single-lease path settles it from then on.
 *
 * The record (format 1): the header key holds
 *   format (1) | items (4 LE) | deadline (8 LE) | received (8 LE) | more item-record keys (4 LE)
 *   | value keys (4 LE) | item records...
 * and an item record is deliveries (4 LE) | ready since (8 LE, -1: none; priority queues) |
 * key suffix length (2 LE) | value length (4 LE) | key suffix. Item records that do not fit in
 * META_CHUNK bytes continue, whole, in bk ("wq","b", bid14, 0, 1..); the values follow, packed
 * whole and in order, in bk ("wq","b", bid14, 1, 0..) of at most VAL_CHUNK bytes each: a value
 * starts a new key when it does not fit in the current one. */

#define BID        KVQ__WQ_BATCH_ID
#define FORMAT     1
#define HDR        29
#define ENTRY      18
#define META_CHUNK 90000
#define VAL_CHUNK  100000

enum { STREAM_META = 0, STREAM_VAL = 1, STREAM_STATE = 2 };
enum { ST_LIVE = 0, ST_ACK = 'a', ST_NACK = 'n', ST_EXPIRED = 'e', ST_MOVED = 'm' };
enum { B_NONE, B_LIVE, B_MARKED };

typedef struct bitem {
    uint32_t deliv;
    int64_t since;
    size_t soff, slen, voff, vlen;
} bitem;

typedef struct batch {
    uint8_t id[BID];
    int kind;
    int64_t deadline, received;
    uint32_t n;
    uint8_t *state;   /* n bytes: ST_* */
    uint8_t *changed; /* n flags: state written in this transaction, not yet stored */
    uint32_t lo, hi;  /* span of the changed items */
    int any, full;
    kvq_buf meta, vals; /* full: the item records and the values */
    bitem *items;
} batch;

static void batch_dispose(batch *b)
{
    kvq__free(b->state);
    kvq__free(b->changed);
    kvq__free(b->items);
    kvq_buf_dispose(&b->meta);
    kvq_buf_dispose(&b->vals);
    memset(b, 0, sizeof(*b));
}

static uint32_t item_of(const uint8_t *lease_id)
{
    return (uint32_t)lease_id[BID] << 8 | lease_id[BID + 1];
}

/* out = base + pack((bid,)): the prefix of everything of one batch under base. */
static int bid_key(kvq_buf *out, const kvq_buf *base, const uint8_t *bid)
{
    kvq_tuple_elem e = kvq_tuple_bytes(bid, BID);
    return kvq__wq_key_of(out, base, &e, 1);
}

static int chunk_key(kvq_buf *out, kvq_workq *w, const uint8_t *bid, int stream, int64_t i)
{
    kvq_tuple_elem e[3] = { kvq_tuple_bytes(bid, BID), kvq_tuple_int(stream), kvq_tuple_int(i) };
    return kvq__wq_key_of(out, &w->base_b, e, 3);
}

static int state_key(kvq_buf *out, kvq_workq *w, const uint8_t *bid, uint32_t idx)
{
    return chunk_key(out, w, bid, STREAM_STATE, idx);
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

static int bx_key(kvq_buf *out, kvq_workq *w, int64_t deadline, const uint8_t *bid)
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
    int rc = bid_key(lo, base, bid);
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
    int ok = kvq_tuple_count(t) == want;
    for (size_t i = 0; ok && i < want; i++) {
        ok = kvq_tuple_at(t, i)->type == KVQ_TUPLE_INT;
        if (ok)
            out[i] = kvq_tuple_at(t, i)->v.i;
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
 * settle (batch_flush), so that settling different items of one batch never conflicts. */
static int batch_load(batch *b,
                      kvq_workq *w,
                      kvq_txn *txn,
                      const uint8_t *bid,
                      int64_t received,
                      unsigned int hflags,
                      unsigned int sflags)
{
    batch_dispose(b);
    memcpy(b->id, bid, BID);
    kvq_buf k = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    kvq_bytes v;
    int present = 0;
    int rc = bid_key(&k, &w->base_b, bid);
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
static int batch_flush(batch *b, kvq_workq *w, kvq_txn *txn)
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
            rc = bx_key(&k, w, b->deadline, b->id);
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
static int batch_owns(const batch *b, uint32_t idx)
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

/* Settles item idx of b, which owns it (batch_owns). */
static int settle_item(batch *b,
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
static int marked_outcome(const batch *b, uint32_t idx)
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
    uint32_t idx = item_of(lease->id);
    rc = batch_load(&b, w, txn, lease->id, lease->received, 0, KVQ_SNAPSHOT);
    if (rc == 0 && batch_owns(&b, idx)) {
        *handled = 1;
        kvq__wq_tally own;
        memset(&own, 0, sizeof(own));
        kvq__wq_tally *t = tally != NULL ? tally : &own;
        rc = b.kind == B_LIVE ? settle_item(&b, w, txn, idx, lease, kind, arg, rv, t)
                              : marked_outcome(&b, idx);
        if (rc == 0)
            rc = batch_flush(&b, w, txn);
        if (rc == 0 && tally == NULL)
            rc = kvq__wq_tally_apply(w, txn, &own);
    }
    batch_dispose(&b);
    return rc;
}

int kvq__wq_batch_expire(
    kvq_workq *w, kvq_txn *txn, const uint8_t *bid, int64_t *budget, uint64_t *moved, int *done)
{
    *done = 1;
    batch b;
    memset(&b, 0, sizeof(b));
    /* Not snapshots: a settler of an item that commits meanwhile makes this pass retry. */
    int rc = batch_load(&b, w, txn, bid, -1, 0, 0);
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
        rc = batch_flush(&b, w, txn);
    kvq_buf_dispose(&k);
    batch_dispose(&b);
    return rc;
}

int kvq__wq_batch_items(
    kvq_workq *w, kvq_txn *txn, const uint8_t *bid, kvq__wq_batch_item_fn fn, void *arg)
{
    batch b;
    memset(&b, 0, sizeof(b));
    int rc = batch_load(&b, w, txn, bid, -1, KVQ_SNAPSHOT, KVQ_SNAPSHOT);
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
    batch_dispose(&b);
    return rc;
}

/* ---- receive ----------------------------------------------------------------------------------
 */

/* The items a receive batch collects before it writes them. */
typedef struct collect {
    kvq_buf suf, val;
    bitem *items;
    uint32_t n;
} collect;

/* Writes the batch record of c's items (see the top of this file) and its expiry entry. */
static int write_batch(
    kvq_workq *w, kvq_txn *txn, const uint8_t *bid, int64_t deadline, int64_t rv, const collect *c)
{
    /* How many keys of each kind, by the packing rules. */
    uint32_t nm = 1, nv = 1;
    size_t cur = HDR;
    for (uint32_t i = 0; i < c->n; i++) {
        size_t e = ENTRY + c->items[i].slen;
        if (cur + e > META_CHUNK) {
            nm++;
            cur = 0;
        }
        cur += e;
    }
    cur = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        if (cur + c->items[i].vlen > VAL_CHUNK) {
            nv++;
            cur = 0;
        }
        cur += c->items[i].vlen;
    }
    /* Small batches (all of a receive of 100 small values) keep their values in the header
     * key, after the item records: one key to write, one to clear. */
    size_t total = c->val.len;
    for (uint32_t i = 0; nm == 1 && i < c->n; i++)
        total += ENTRY + c->items[i].slen;
    int inl = nm == 1 && HDR + total <= VAL_CHUNK;
    if (inl)
        nv = 0;
    uint8_t h[HDR];
    h[0] = FORMAT;
    kvq__le32_put(h + 1, c->n);
    kvq__le64_put(h + 5, (uint64_t)deadline);
    kvq__le64_put(h + 13, (uint64_t)rv);
    kvq__le32_put(h + 21, nm - 1);
    kvq__le32_put(h + 25, nv);
    kvq_buf k = KVQ_BUF_INIT, buf = KVQ_BUF_INIT;
    int rc = kvq_buf_append(&buf, h, sizeof(h));
    int64_t chunk = 0;
    for (uint32_t i = 0; rc == 0 && i <= c->n; i++) {
        size_t e = i < c->n ? ENTRY + c->items[i].slen : 0;
        if (i == c->n && inl)
            rc = kvq_buf_append(&buf, c->val.data, c->val.len);
        if (i == c->n || buf.len + e > META_CHUNK) {
            if (rc == 0)
                rc = chunk == 0 ? bid_key(&k, &w->base_b, bid)
                                : chunk_key(&k, w, bid, STREAM_META, chunk);
            if (rc == 0)
                rc = kvq_txn_set(txn, k.data, k.len, buf.data, buf.len);
            chunk++;
            buf.len = 0;
            if (i == c->n)
                break;
        }
        const bitem *it = &c->items[i];
        uint8_t r[ENTRY];
        kvq__le32_put(r, it->deliv);
        kvq__le64_put(r + 4, (uint64_t)it->since);
        kvq__le_put(r + 12, it->slen, 2);
        kvq__le32_put(r + 14, (uint32_t)it->vlen);
        if (rc == 0)
            rc = kvq_buf_append(&buf, r, sizeof(r));
        if (rc == 0)
            rc = kvq_buf_append(&buf, c->suf.data + it->soff, it->slen);
    }
    /* The values: runs of whole values, each run one key, written straight from c. */
    chunk = 0;
    size_t from = 0, len = 0;
    for (uint32_t i = 0; rc == 0 && !inl && i <= c->n; i++) {
        size_t vl = i < c->n ? c->items[i].vlen : 0;
        if (i == c->n || len + vl > VAL_CHUNK) {
            rc = chunk_key(&k, w, bid, STREAM_VAL, chunk++);
            if (rc == 0)
                rc = kvq_txn_set(txn, k.data, k.len, c->val.data + from, len);
            from += len;
            len = 0;
        }
        len += vl;
    }
    if (rc == 0)
        rc = bx_key(&k, w, deadline, bid);
    if (rc == 0)
        rc = kvq_txn_set(txn, k.data, k.len, NULL, 0);
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&buf);
    return rc;
}

/* Takes the run kvs[0..found) off the queue: one clear_range for the items, their delivery
 * counts (one range read), dead letters for those over their deliveries, the others into c. */
static int take_run(kvq_workq *w,
                    kvq_txn *txn,
                    const kvq_kv *kvs,
                    size_t found,
                    collect *c,
                    kvq__wq_tally *t,
                    size_t *dead)
{
    kvq_queue *q = w->q;
    size_t plen = q->prefix.len;
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT, k = KVQ_BUF_INIT;
    static const uint8_t zero = 0;
    const kvq_kv *cs;
    size_t ncs = 0, j = 0;
    /* The counts of the run's items lie in [c + first suffix, c + last suffix + 00), with
     * perhaps those of dead letters between them: matched by suffix. */
    int rc = kvq__wq_key_raw(&lo, &w->base_c, kvs[0].key.data + plen, kvs[0].key.len - plen);
    if (rc == 0)
        rc = kvq__wq_key_raw(&hi, &w->base_c, kvs[found - 1].key.data + plen,
                             kvs[found - 1].key.len - plen);
    if (rc == 0)
        rc = kvq_buf_append(&hi, &zero, 1);
    if (rc == 0)
        rc = kvq_txn_get_range(&cs, &ncs, NULL, txn, lo.data, lo.len, hi.data, hi.len, 0, 0);
    size_t cplen = w->base_c.len;
    for (size_t i = 0; rc == 0 && i < found; i++) {
        const uint8_t *suffix = kvs[i].key.data + plen;
        size_t slen = kvs[i].key.len - plen;
        if (slen > 0xffff) {
            rc = kvq__error(KVQ_EINTERNAL_ERROR, "an item key of %zu bytes", kvs[i].key.len);
            break;
        }
        uint32_t deliv = 0;
        int64_t since = -1;
        while (j < ncs &&
               kvq__bytes_cmp(cs[j].key.data + cplen, cs[j].key.len - cplen, suffix, slen) < 0)
            j++;
        if (j < ncs &&
            kvq__bytes_cmp(cs[j].key.data + cplen, cs[j].key.len - cplen, suffix, slen) == 0) {
            kvq_bytes cv = cs[j].value;
            deliv = (uint32_t)kvq__le_get(cv.data, cv.len < 4 ? cv.len : 4);
            if (cv.len >= 12 && q->type == KVQ_QUEUE_PRIORITY)
                since = (int64_t)kvq__le_get(cv.data + 4, 8);
            rc = kvq_txn_clear(txn, cs[j].key.data, cs[j].key.len);
            if (rc == 0 && since >= 0)
                rc = kvq__wq_age_key(&k, w, since, suffix, slen);
            if (rc == 0 && since >= 0)
                rc = kvq_txn_clear(txn, k.data, k.len);
            j++;
        }
        t->ready--;
        t->taken++;
        if (rc != 0)
            break;
        if (w->opts.max_deliveries > 0 && deliv >= w->opts.max_deliveries) {
            (*dead)++;
            rc = kvq__wq_to_dead(w, txn, suffix, slen, kvs[i].value, deliv, &k);
            continue;
        }
        if (c->n >= MANY_MAX) {
            rc = kvq__error(KVQ_EINTERNAL_ERROR, "a batch of more than %d items", MANY_MAX);
            break;
        }
        bitem *it = &c->items[c->n++];
        it->deliv = deliv + 1;
        it->since = since;
        it->soff = c->suf.len;
        it->slen = slen;
        it->voff = c->val.len;
        it->vlen = kvs[i].value.len;
        rc = kvq_buf_append(&c->suf, suffix, slen);
        if (rc == 0)
            rc = kvq_buf_append(&c->val, kvs[i].value.data, kvs[i].value.len);
    }
    /* The run is consecutive in the queue (a range read that conflicts with any change inside
     * it): one clear_range takes its items off. */
    if (rc == 0)
        rc = kvq__key_after(&hi, kvs[found - 1].key.data, kvs[found - 1].key.len);
    if (rc == 0)
        rc = kvq_txn_clear_range(txn, kvs[0].key.data, kvs[0].key.len, hi.data, hi.len);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    kvq_buf_dispose(&k);
    return rc;
}

/* kvq_workq_receive_many_txn; *ndead (may be NULL) counts the items it moved to the dead letters
 * on the way, which a KVQ_ENOTFOUND still leaves written in txn. */
static int receive_many_in(kvq_bytes *outs,
                           kvq_workq_lease *leases,
                           size_t *n,
                           kvq_workq *w,
                           kvq_txn *txn,
                           size_t k,
                           int64_t lease_ms,
                           size_t *ndead)
{
    if (n != NULL)
        *n = 0;
    int rc = kvq__wq_check(w, txn, 1, "kvq_workq_receive_many_txn");
    if (rc == 0 && (outs == NULL || leases == NULL || n == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_workq_receive_many_txn: NULL outs, leases or n");
    if (rc == 0 && (k < 1 || k > MANY_MAX))
        rc = kvq__error(KVQ_EINVAL, "kvq_workq_receive_many_txn: k = %zu (1 to %d)", k, MANY_MAX);
    int64_t lv = 0, rv = 0;
    if (rc == 0)
        rc = kvq__wq_lease_versions(w, lease_ms, &lv);
    if (rc == 0)
        rc = kvq_txn_get_read_version(&rv, txn);
    if (rc == 0)
        rc = kvq__q_due_gate(w->q, w, txn); /* what is due first (its 1020: read again) */
    if (rc != 0)
        return rc;
    collect c;
    memset(&c, 0, sizeof(c));
    c.items = kvq__calloc(k, sizeof(*c.items));
    if (c.items == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for a batch of %zu", k);
    /* A batch id grows with time: the read version (8 bytes, big-endian), then 6 random bytes
     * (two batches with one read version differ in 48 random bits; ids are only ever compared
     * for equality). The batch's keys sit together at the ends of their ranges. */
    uint8_t bid[BID];
    rc = kvq__random_bytes(bid + 8, BID - 8);
    for (int b = 0; b < 8; b++)
        bid[b] = (uint8_t)((uint64_t)rv >> (56 - 8 * b));
    kvq__wq_tally t;
    memset(&t, 0, sizeof(t));
    /* Items over their deliveries go to the dead letters on the way; a few passes at most. */
    for (int pass = 0; rc == 0 && c.n < k && pass < 4; pass++) {
        size_t want = k - c.n, found = 0, dead = 0;
        const kvq_kv *kvs;
        rc = kvq__q_head(w->q, txn, KVQ__END_MIN, (int)want, 0, &kvs, &found);
        if (rc != 0 || found == 0)
            break;
        rc = take_run(w, txn, kvs, found, &c, &t, &dead);
        if (ndead != NULL)
            *ndead += dead;
        if (rc == 0 && (found < want || dead == 0))
            break;
    }
    int64_t deadline = rv + lv;
    if (rc == 0 && c.n > 0)
        rc = write_batch(w, txn, bid, deadline, rv, &c);
    if (rc == 0) {
        t.inflight += c.n;
        t.received += c.n;
        rc = kvq__wq_tally_apply(w, txn, &t);
    }
    /* The leases, and the values as this transaction wrote them (borrowed from txn): in the
     * header after the item records, or in the value keys. */
    kvq_buf key = KVQ_BUF_INIT;
    kvq_bytes chunk = { NULL, 0 };
    size_t ci = 0, co = 0;
    int have = 0;
    if (rc == 0 && c.n > 0) {
        int present = 0;
        rc = bid_key(&key, &w->base_b, bid);
        if (rc == 0)
            rc = kvq_txn_get(&chunk, &present, txn, key.data, key.len, KVQ_SNAPSHOT);
        if (rc == 0 && (!present || chunk.len < HDR))
            rc = kvq__error(KVQ_EINTERNAL_ERROR, "a batch written in this transaction is gone");
        if (rc == 0 && kvq__le_get(chunk.data + 25, 4) == 0) {
            /* Inline: the values start after the records. */
            have = 1;
            co = chunk.len - c.val.len;
        }
    }
    for (uint32_t i = 0; rc == 0 && i < c.n; i++) {
        const bitem *it = &c.items[i];
        if (!have || co + it->vlen > chunk.len) {
            int present = 0;
            if (have)
                ci++;
            rc = chunk_key(&key, w, bid, STREAM_VAL, (int64_t)ci);
            if (rc == 0)
                rc = kvq_txn_get(&chunk, &present, txn, key.data, key.len, KVQ_SNAPSHOT);
            if (rc == 0 && (!present || it->vlen > chunk.len))
                rc = kvq__error(KVQ_EINTERNAL_ERROR, "a batch written in this transaction is gone");
            have = 1;
            co = 0;
            if (rc != 0)
                break;
        }
        outs[i].data = chunk.data + co;
        outs[i].len = it->vlen;
        co += it->vlen;
        kvq_workq_lease *l = &leases[i];
        memcpy(l->id, bid, BID);
        l->id[BID] = (uint8_t)(i >> 8);
        l->id[BID + 1] = (uint8_t)i;
        l->received = rv;
        l->deadline = deadline;
        l->deliveries = it->deliv;
        rc = kvq__wq_key_raw(&key, &w->q->prefix, c.suf.data + it->soff, it->slen);
        l->priority = rc == 0 ? kvq__q_key_priority(w->q, key.data, key.len) : 0;
    }
    kvq_buf_dispose(&key);
    if (rc == 0)
        *n = c.n;
    kvq_buf_dispose(&c.suf);
    kvq_buf_dispose(&c.val);
    kvq__free(c.items);
    if (rc == 0 && *n == 0)
        rc = kvq__error(KVQ_ENOTFOUND, "the work queue has no ready item");
    return rc;
}

int kvq_workq_receive_many_txn(kvq_bytes *outs,
                               kvq_workq_lease *leases,
                               size_t *n,
                               kvq_workq *w,
                               kvq_txn *txn,
                               size_t k,
                               int64_t lease_ms)
{
    return receive_many_in(outs, leases, n, w, txn, k, lease_ms, NULL);
}

typedef struct recv_many_ctx {
    kvq_workq *w;
    kvq_buf *outs;
    kvq_workq_lease *leases;
    size_t k, n;
    int64_t lease_ms;
    kvq_bytes *views;
    int empty; /* nothing received, but items moved to the dead letters on the way */
} recv_many_ctx;

static int recv_many_body(kvq_txn *txn, void *arg)
{
    recv_many_ctx *c = arg;
    c->n = 0;
    c->empty = 0;
    size_t n = 0, ndead = 0;
    int rc = receive_many_in(c->views, c->leases, &n, c->w, txn, c->k, c->lease_ms, &ndead);
    if (rc == KVQ_ENOTFOUND && ndead > 0) {
        /* Commit the moves to the dead letters (else every receive would find those items
         * again, move them again and roll back), and report the queue empty. */
        c->empty = 1;
        return 0;
    }
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (kvq__buf_set(&c->outs[i], c->views[i].data, c->views[i].len) != 0)
            rc = kvq__error(KVQ_ENOMEM, "out of memory copying a received value");
    if (rc == 0)
        c->n = n;
    return rc;
}

int kvq_workq_receive_many(
    kvq_buf *outs, kvq_workq_lease *leases, size_t *n, kvq_workq *w, size_t k, int64_t lease_ms)
{
    if (n != NULL)
        *n = 0;
    int rc = kvq__wq_check(w, NULL, 0, "kvq_workq_receive_many");
    if (rc == 0 && (outs == NULL || leases == NULL || n == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_workq_receive_many: NULL outs, leases or n");
    if (rc == 0 && (k < 1 || k > MANY_MAX))
        rc = kvq__error(KVQ_EINVAL, "kvq_workq_receive_many: k = %zu (1 to %d)", k, MANY_MAX);
    int64_t lv;
    if (rc == 0)
        rc = kvq__wq_lease_versions(w, lease_ms, &lv);
    if (rc != 0)
        return rc;
    recv_many_ctx c = { w, outs, leases, k, 0, lease_ms, NULL, 0 };
    c.views = kvq__malloc(k * sizeof(*c.views));
    if (c.views == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for a batch of %zu", k);
    rc = kvq_db_transact(w->q->db, recv_many_body, &c);
    kvq__free(c.views);
    if (rc == 0 && c.empty)
        rc = kvq__error(KVQ_ENOTFOUND, "the work queue has no ready item");
    if (rc == 0)
        *n = c.n;
    return rc;
}

/* ---- ack and nack of many leases ------------------------------------------------------------ */

static int settle_many_txn(int *out,
                           kvq_workq *w,
                           kvq_txn *txn,
                           const kvq_workq_lease *leases,
                           size_t n,
                           int kind,
                           int64_t arg)
{
    int64_t rv;
    int rc = kvq_txn_get_read_version(&rv, txn);
    if (rc != 0)
        return rc;
    int first = 0;
    kvq__wq_tally t;
    memset(&t, 0, sizeof(t));
    /* The batch of the leases at hand, read once for a run of its items. */
    batch b;
    memset(&b, 0, sizeof(b));
    int loaded = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        kvq_workq_lease l = leases[i];
        uint32_t idx = item_of(l.id);
        if (!loaded || memcmp(b.id, l.id, BID) != 0) {
            rc = batch_flush(&b, w, txn);
            if (rc == 0)
                rc = batch_load(&b, w, txn, l.id, l.received, 0, KVQ_SNAPSHOT);
            loaded = rc == 0;
            if (rc != 0)
                break;
        }
        int r;
        if (batch_owns(&b, idx))
            r = b.kind == B_LIVE ? settle_item(&b, w, txn, idx, &l, kind, arg, rv, &t)
                                 : marked_outcome(&b, idx);
        else
            r = kvq__wq_settle_txn(w, txn, &l, kind, arg, &t);
        if (r == KVQ_ELEASE_EXPIRED || r == KVQ_ELEASE_SETTLED) {
            /* Nothing was written for this lease: the others go on. */
            if (first == 0)
                first = r;
        } else if (r != 0) {
            rc = r;
        }
        if (out != NULL)
            out[i] = r;
    }
    if (rc == 0)
        rc = batch_flush(&b, w, txn);
    if (rc == 0)
        rc = kvq__wq_tally_apply(w, txn, &t);
    batch_dispose(&b);
    return rc != 0 ? rc : first;
}

static int check_many(const char *fn,
                      kvq_workq *w,
                      kvq_txn *txn,
                      int need_txn,
                      const kvq_workq_lease *leases,
                      size_t n)
{
    int rc = kvq__wq_check(w, txn, need_txn, fn);
    if (rc == 0 && leases == NULL)
        rc = kvq__error(KVQ_EINVAL, "%s: leases is NULL", fn);
    if (rc == 0 && (n < 1 || n > MANY_MAX))
        rc = kvq__error(KVQ_EINVAL, "%s: n = %zu (1 to %d)", fn, n, MANY_MAX);
    return rc;
}

int kvq_workq_ack_many_txn(
    int *out, kvq_workq *w, kvq_txn *txn, const kvq_workq_lease *leases, size_t n)
{
    int rc = check_many("kvq_workq_ack_many_txn", w, txn, 1, leases, n);
    return rc != 0 ? rc : settle_many_txn(out, w, txn, leases, n, SETTLE_ACK, 0);
}

int kvq_workq_nack_many_txn(
    int *out, kvq_workq *w, kvq_txn *txn, const kvq_workq_lease *leases, size_t n, int64_t delay_ms)
{
    int rc = check_many("kvq_workq_nack_many_txn", w, txn, 1, leases, n);
    if (rc == 0 && (delay_ms < 0 || delay_ms > 366LL * 86400000))
        rc = kvq__error(KVQ_EINVAL, "nack delay of %lld ms is out of range", (long long)delay_ms);
    return rc != 0 ? rc
                   : settle_many_txn(out, w, txn, leases, n, SETTLE_NACK,
                                     delay_ms * KVQ__VERSIONS_PER_MS);
}

typedef struct settle_many_ctx {
    kvq_workq *w;
    const kvq_workq_lease *leases;
    size_t n;
    int kind;
    int64_t arg;
    int *out;       /* per lease, of the last attempt */
    int first_fail; /* the last attempt's first per-lease failure */
} settle_many_ctx;

static int settle_many_body(kvq_txn *txn, void *arg)
{
    settle_many_ctx *c = arg;
    int rc = settle_many_txn(c->out, c->w, txn, c->leases, c->n, c->kind, c->arg);
    if (rc == KVQ_ELEASE_EXPIRED || rc == KVQ_ELEASE_SETTLED) {
        /* Commit what did settle; the failures are in results. */
        c->first_fail = rc;
        return 0;
    }
    c->first_fail = 0;
    return rc;
}

static int
settle_many(int *out, kvq_workq *w, const kvq_workq_lease *leases, size_t n, int kind, int64_t arg)
{
    int *own = kvq__calloc(n, sizeof(*own));
    if (own == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for a batch of %zu", n);
    settle_many_ctx c = { w, leases, n, kind, arg, own, 0 };
    int maybe = 0;
    int rc = kvq__wq_run_idempotent(w->q->db, settle_many_body, &c, 1, &maybe);
    if (rc == 0 && maybe) {
        /* A retry after an attempt that may have committed finds that attempt's leases settled:
         * those are done. (As for one lease, a lease settled before the batch began cannot be
         * told apart then.) */
        c.first_fail = 0;
        for (size_t i = 0; i < n; i++) {
            if (own[i] == KVQ_ELEASE_SETTLED)
                own[i] = 0;
            if (own[i] != 0 && c.first_fail == 0)
                c.first_fail = own[i];
        }
    }
    if (out != NULL)
        memcpy(out, own, n * sizeof(*own));
    kvq__free(own);
    if (rc == 0 && c.first_fail != 0)
        rc = kvq__error(c.first_fail, "some leases of the batch had %s; the others are settled",
                        c.first_fail == KVQ_ELEASE_EXPIRED ? "expired" : "been settled already");
    return rc;
}

int kvq_workq_ack_many(int *out, kvq_workq *w, const kvq_workq_lease *leases, size_t n)
{
    int rc = check_many("kvq_workq_ack_many", w, NULL, 0, leases, n);
    return rc != 0 ? rc : settle_many(out, w, leases, n, SETTLE_ACK, 0);
}

int kvq_workq_nack_many(
    int *out, kvq_workq *w, const kvq_workq_lease *leases, size_t n, int64_t delay_ms)
{
    int rc = check_many("kvq_workq_nack_many", w, NULL, 0, leases, n);
    if (rc == 0 && (delay_ms < 0 || delay_ms > 366LL * 86400000))
        rc = kvq__error(KVQ_EINVAL, "nack delay of %lld ms is out of range", (long long)delay_ms);
    return rc != 0 ? rc
                   : settle_many(out, w, leases, n, SETTLE_NACK, delay_ms * KVQ__VERSIONS_PER_MS);
}
