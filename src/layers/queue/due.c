/* The upkeep of the states of a work queue's items (leases_internal.h): leases that ended go
 * back to the queue (or to the dead letters), due delayed items become ready, old settled-lease
 * markers, dedup keys and age index entries are pruned. Every reader of a durable or priority
 * queue runs passes when something is due (kvq__q_due_gate); kvq_workq_recover runs passes until
 * none is left. */
#include <string.h>

#include "layers/queue/leases_internal.h"

#define SETTLED_WINDOW_BUCKETS 60
#define BATCH_BUDGET           (2 * 1000 * 1000)

/* ---- recovery ------------------------------------------------------------------------------ */

/* Scratch buffers of one upkeep pass, reused by its steps. */
typedef struct pass_bufs {
    kvq_buf lo, hi, k, m, v;
} pass_bufs;

/* An expired single lease whose expiry index entry xk was read: the entry, the lease and its
 * value are cleared and the item goes back to the queue (or to the dead letters). A lease or
 * value already gone leaves a stale index entry, which is only cleared. */
static int expire_lease(kvq_workq *w,
                        kvq_txn *txn,
                        const uint8_t *xk,
                        size_t xl,
                        const uint8_t *id,
                        pass_bufs *b,
                        uint64_t *moved)
{
    int rc = kvq_txn_clear(txn, xk, xl);
    kvq_bytes lv, vv;
    int lp = 0, vp = 0;
    if (rc == 0)
        rc = kvq__wq_id_key(&b->k, &w->base_l, id);
    if (rc == 0)
        rc = kvq_txn_get(&lv, &lp, txn, b->k.data, b->k.len, 0);
    if (rc == 0 && lp)
        rc = kvq__buf_set(&b->m, lv.data, lv.len);
    if (rc == 0 && lp)
        rc = kvq_txn_clear(txn, b->k.data, b->k.len);
    if (rc == 0)
        rc = kvq__wq_id_key(&b->k, &w->base_v, id);
    if (rc == 0)
        rc = kvq_txn_get(&vv, &vp, txn, b->k.data, b->k.len, 0);
    if (rc == 0 && vp)
        rc = kvq__buf_set(&b->v, vv.data, vv.len);
    if (rc == 0 && vp)
        rc = kvq_txn_clear(txn, b->k.data, b->k.len);
    if (rc != 0 || !lp || !vp || b->m.len < 20)
        return rc; /* a stale index entry: cleared */
    uint32_t deliv = (uint32_t)kvq__le_get(b->m.data + 8, 4);
    kvq_bytes val = { b->v.data, b->v.len };
    int64_t since = -1;
    rc = kvq__wq_age_take(w, txn, id, &since);
    if (rc == 0)
        rc = kvq__wq_counter_add(txn, &w->n_inflight, -1);
    if (rc == 0)
        rc = kvq__wq_give_back(w, txn, b->m.data + 20, b->m.len - 20, val, deliv, since, &b->k,
                               NULL);
    if (rc == 0)
        (*moved)++;
    return rc;
}

/* Leases that ended before the expiry bound, single or batch, up to KVQ__WQ_BATCH index entries
 * and a batch budget of bytes. The range read (not snapshot) makes two recoverers of one lease
 * conflict, and an ack that commits meanwhile (it cannot: the lease has expired) would too. */
static int
expire_leases(kvq_workq *w, kvq_txn *txn, int64_t rv, pass_bufs *b, uint64_t *moved, int *more)
{
    const kvq_kv *kvs;
    size_t got = 0;
    kvq_tuple *t = NULL;
    kvq_tuple_elem ex = kvq_tuple_int(kvq__wq_expiry_bound(w, rv));
    /* Bytes of batch items one pass gives back at most (a batch of large values takes more
     * than one pass rather than one transaction too large). */
    int64_t budget = BATCH_BUDGET;
    int rc = kvq__wq_range_of(&b->lo, &b->hi, &w->base_x);
    if (rc == 0)
        rc = kvq__wq_key_of(&b->hi, &w->base_x, &ex, 1);
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, b->lo.data, b->lo.len, b->hi.data,
                               b->hi.len, KVQ__WQ_BATCH, 0);
    if (rc == 0 && got == KVQ__WQ_BATCH)
        *more = 1;
    /* kvs is borrowed; copy the keys we need before reading more. */
    kvq_buf xkeys = KVQ_BUF_INIT;
    size_t nx = got;
    size_t *xoff = NULL;
    if (rc == 0 && nx > 0) {
        xoff = kvq__calloc(nx + 1, sizeof(size_t));
        if (xoff == NULL)
            rc = kvq__error(KVQ_ENOMEM, "out of memory");
        for (size_t i = 0; rc == 0 && i < nx; i++) {
            xoff[i] = xkeys.len;
            rc = kvq_buf_append(&xkeys, kvs[i].key.data, kvs[i].key.len);
        }
        if (xoff != NULL)
            xoff[nx] = xkeys.len;
    }
    for (size_t i = 0; rc == 0 && i < nx; i++) {
        const uint8_t *xk = xkeys.data + xoff[i];
        size_t xl = xoff[i + 1] - xoff[i];
        rc = kvq_tuple_unpack(&t, xk + w->base_x.len, xl - w->base_x.len);
        if (rc != 0 || kvq_tuple_get_count(t) != 2 ||
            kvq_tuple_get_elem(t, 1)->type != KVQ_TUPLE_BYTES ||
            (kvq_tuple_get_elem(t, 1)->v.bytes.len != 16 &&
             kvq_tuple_get_elem(t, 1)->v.bytes.len != KVQ__WQ_BATCH_ID)) {
            rc = kvq__error(KVQ_EDAMAGED, "a malformed lease expiry key");
            break;
        }
        if (kvq_tuple_get_elem(t, 1)->v.bytes.len == KVQ__WQ_BATCH_ID) {
            /* A batch lease (batch_lease.c): its items, as far as the pass's budget goes. */
            uint8_t bid[KVQ__WQ_BATCH_ID];
            memcpy(bid, kvq_tuple_get_elem(t, 1)->v.bytes.data, sizeof(bid));
            kvq_tuple_destroy(t);
            t = NULL;
            int done = 0;
            rc = kvq__wq_batch_expire(w, txn, bid, &budget, moved, &done);
            if (rc == 0 && done)
                rc = kvq_txn_clear(txn, xk, xl);
            if (rc == 0 && !done) {
                *more = 1;
                break;
            }
            continue;
        }
        uint8_t id[16];
        memcpy(id, kvq_tuple_get_elem(t, 1)->v.bytes.data, 16);
        kvq_tuple_destroy(t);
        t = NULL;
        rc = expire_lease(w, txn, xk, xl, id, b, moved);
    }
    kvq_tuple_destroy(t);
    kvq__free(xoff);
    kvq_buf_dispose(&xkeys);
    return rc;
}

/* Delayed items due at rv, up to KVQ__WQ_BATCH: each goes to the ready queue. */
static int
ready_delayed(kvq_workq *w, kvq_txn *txn, int64_t rv, pass_bufs *b, uint64_t *moved, int *more)
{
    const kvq_kv *kvs;
    size_t got = 0;
    kvq_tuple *t = NULL;
    kvq_tuple_elem e = kvq_tuple_int(rv);
    int rc = kvq__wq_range_of(&b->lo, &b->hi, &w->base_y);
    if (rc == 0)
        rc = kvq__wq_key_of(&b->hi, &w->base_y, &e, 1);
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, b->lo.data, b->lo.len, b->hi.data,
                               b->hi.len, KVQ__WQ_BATCH, 0);
    if (rc == 0 && got == KVQ__WQ_BATCH)
        *more = 1;
    for (size_t i = 0; rc == 0 && i < got; i++) {
        /* kvs stays valid: only writes follow. */
        rc = kvq_tuple_unpack(&t, kvs[i].key.data + w->base_y.len, kvs[i].key.len - w->base_y.len);
        if (rc != 0 || kvq_tuple_get_count(t) != 4 ||
            kvq_tuple_get_elem(t, 2)->type != KVQ_TUPLE_INT ||
            kvq_tuple_get_elem(t, 3)->type != KVQ_TUPLE_INT) {
            rc = kvq__error(KVQ_EDAMAGED, "a malformed delayed-item key");
            break;
        }
        int64_t prio = kvq_tuple_get_elem(t, 2)->v.i;
        uint32_t deliv = (uint32_t)kvq_tuple_get_elem(t, 3)->v.i;
        kvq_tuple_destroy(t);
        t = NULL;
        rc = kvq_txn_clear(txn, kvs[i].key.data, kvs[i].key.len);
        if (rc == 0)
            rc = kvq__wq_counter_add(txn, &w->n_delayed, -1);
        if (rc == 0)
            rc = kvq__wq_push_ready(w, txn, prio, deliv, kvs[i].value, &b->k);
        if (rc == 0)
            (*moved)++;
    }
    kvq_tuple_destroy(t);
    return rc;
}

/* Settled-lease markers older than the settled window. */
static int prune_settled(kvq_workq *w, kvq_txn *txn, int64_t rv, pass_bufs *b)
{
    int64_t cut = rv / KVQ__BUCKET_VERSIONS - SETTLED_WINDOW_BUCKETS;
    kvq_tuple_elem ce = kvq_tuple_int(cut);
    if (cut <= 0)
        return 0;
    int rc = kvq__wq_range_of(&b->lo, &b->hi, &w->base_s);
    if (rc == 0)
        rc = kvq__wq_key_of(&b->hi, &w->base_s, &ce, 1);
    if (rc == 0)
        rc = kvq_txn_clear_range(txn, b->lo.data, b->lo.len, b->hi.data, b->hi.len);
    return rc;
}

/* Dedup keys older than the dedup window, up to KVQ__WQ_BATCH, through their index. */
static int prune_dedup(kvq_workq *w, kvq_txn *txn, int64_t rv, pass_bufs *b)
{
    const kvq_kv *kvs;
    size_t got = 0;
    kvq_tuple *t = NULL;
    kvq_tuple_elem de = kvq_tuple_int(rv - w->opts.dedup_window_ms * KVQ__VERSIONS_PER_MS);
    int rc = kvq__wq_range_of(&b->lo, &b->hi, &w->base_ddx);
    if (rc == 0)
        rc = kvq__wq_key_of(&b->hi, &w->base_ddx, &de, 1);
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, b->lo.data, b->lo.len, b->hi.data,
                               b->hi.len, KVQ__WQ_BATCH, KVQ_SNAPSHOT);
    for (size_t i = 0; rc == 0 && i < got; i++) {
        rc = kvq_tuple_unpack(&t, kvs[i].key.data + w->base_ddx.len,
                              kvs[i].key.len - w->base_ddx.len);
        if (rc != 0 || kvq_tuple_get_count(t) != 2 ||
            kvq_tuple_get_elem(t, 1)->type != KVQ_TUPLE_BYTES) {
            rc = kvq__error(KVQ_EDAMAGED, "a malformed dedup index key");
            break;
        }
        int64_t at = kvq_tuple_get_elem(t, 0)->v.i;
        kvq_tuple_elem de2 = *kvq_tuple_get_elem(t, 1);
        rc = kvq__wq_key_of(&b->k, &w->base_dd, &de2, 1);
        kvq_tuple_destroy(t);
        t = NULL;
        /* Clear the dedup key only if it still names this push (not a newer one). */
        kvq_bytes dv;
        int dp = 0;
        if (rc == 0)
            rc = kvq__conflict_key(txn, kvs[i].key.data, kvs[i].key.len);
        if (rc == 0)
            rc = kvq_txn_clear(txn, kvs[i].key.data, kvs[i].key.len);
        if (rc == 0)
            rc = kvq_txn_get(&dv, &dp, txn, b->k.data, b->k.len, 0);
        if (rc == 0 && dp && dv.len >= 8 && (int64_t)kvq__le_get(dv.data, 8) == at)
            rc = kvq_txn_clear(txn, b->k.data, b->k.len);
    }
    kvq_tuple_destroy(t);
    return rc;
}

/* One upkeep transaction: up to KVQ__WQ_BATCH expired leases back, up to KVQ__WQ_BATCH due delayed
 * items ready, old markers pruned. *more = 1 when a batch was full. Expired leases are handled
 * first: the durable promotions write versionstamped keys, after which the item range is
 * unreadable. Pruning (age index entries left by plain pops, settled markers and dedup keys)
 * is not in the passes of plain readers, which do not know the queue's dedup window. */
static int recover_pass(kvq_workq *w, kvq_txn *txn, int prune, uint64_t *moved, int *more)
{
    int64_t rv;
    int rc = kvq_txn_get_read_version(&rv, txn);
    if (rc != 0)
        return rc;
    pass_bufs b = { KVQ_BUF_INIT, KVQ_BUF_INIT, KVQ_BUF_INIT, KVQ_BUF_INIT, KVQ_BUF_INIT };
    rc = expire_leases(w, txn, rv, &b, moved, more);
    if (rc == 0)
        rc = ready_delayed(w, txn, rv, &b, moved, more);
    if (rc == 0 && prune && w->q->type == KVQ_QUEUE_PRIORITY) {
        int64_t since;
        rc = kvq__wq_age_head(w, txn, 1, &since);
    }
    if (rc == 0 && prune)
        rc = prune_settled(w, txn, rv, &b);
    if (rc == 0 && prune)
        rc = prune_dedup(w, txn, rv, &b);
    kvq_buf_dispose(&b.lo);
    kvq_buf_dispose(&b.hi);
    kvq_buf_dispose(&b.k);
    kvq_buf_dispose(&b.m);
    kvq_buf_dispose(&b.v);
    return rc;
}

/* Writes base + pack((v,)) at out (v >= 0) and returns its length: the tuple encoding of a
 * non-negative integer (kvq/tuple.h), 0x14 alone for 0, else 0x14 + n and n big-endian bytes,
 * written here without a buffer of the heap since every reader calls this. */
static size_t put_bound(uint8_t *out, const kvq_buf *base, int64_t v)
{
    memcpy(out, base->data, base->len);
    size_t n = 0;
    for (uint64_t u = (uint64_t)v; u != 0; u >>= 8)
        n++;
    out[base->len] = (uint8_t)(0x14 + n);
    for (size_t i = 0; i < n; i++)
        out[base->len + 1 + i] = (uint8_t)((uint64_t)v >> (8 * (n - 1 - i)));
    return base->len + 1 + n;
}

/* Whether a lease that ended before xbound or a delayed item due at rv waits in q, read with
 * snapshot reads at txn's version (no conflict range). The queue's own key bases (q->wq_x,
 * q->wq_y) are a work queue's base_x and base_y; no key of another kind lies between the two
 * ranges, so one read of [x + 00, y + pack((rv,))) with a limit of 1 answers when no lease is in
 * flight (the common case): it returns nothing (nothing due), a due delayed item, or the lease
 * that ends first (due when it ends before xbound; else a second read looks at the delayed
 * items alone). */
static int look_due(kvq_queue *q, kvq_txn *txn, int64_t xbound, int64_t rv, int *due)
{
    /* Four keys: x + 00, y + 00, x + pack((xbound,)), y + pack((rv,)); on the stack unless the
     * queue's prefix is long. */
    uint8_t stack[512];
    size_t need = 2 * (q->wq_x.len + q->wq_y.len) + 2 * 10;
    uint8_t *mem = need <= sizeof(stack) ? stack : kvq__malloc(need);
    if (mem == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    if (xbound < 0)
        xbound = 0;
    if (rv < 0)
        rv = 0;
    uint8_t *xlo = mem, *ylo = xlo + q->wq_x.len + 1;
    memcpy(xlo, q->wq_x.data, q->wq_x.len);
    xlo[q->wq_x.len] = 0x00;
    memcpy(ylo, q->wq_y.data, q->wq_y.len);
    ylo[q->wq_y.len] = 0x00;
    uint8_t *xhi = ylo + q->wq_y.len + 1;
    size_t xhi_len = put_bound(xhi, &q->wq_x, xbound);
    uint8_t *yhi = xhi + xhi_len;
    size_t yhi_len = put_bound(yhi, &q->wq_y, rv);
    const kvq_kv *kvs;
    size_t got = 0;
    *due = 0;
    int rc = kvq_txn_get_range(&kvs, &got, NULL, txn, xlo, q->wq_x.len + 1, yhi, yhi_len, 1,
                               KVQ_SNAPSHOT);
    if (rc == 0 && got > 0) {
        const kvq_bytes *k = &kvs[0].key;
        int lease = k->len >= q->wq_x.len && memcmp(k->data, q->wq_x.data, q->wq_x.len) == 0;
        if (!lease) /* a delayed item below y + pack((rv,)) */
            *due = 1;
        else if (kvq__bytes_cmp(k->data, k->len, xhi, xhi_len) < 0)
            *due = 1; /* the first lease ended before xbound */
        else          /* leases in flight, none ended: the delayed items alone */
            rc = kvq_txn_get_range(&kvs, &got, NULL, txn, ylo, q->wq_y.len + 1, yhi, yhi_len, 1,
                                   KVQ_SNAPSHOT);
        if (rc == 0 && lease && !*due && got > 0)
            *due = 1;
    }
    if (mem != stack)
        kvq__free(mem);
    return rc;
}

/* Whether an expired lease or a due delayed item waits (snapshot reads at txn's version). */
static int upkeep_due(kvq_workq *w, kvq_txn *txn, int *due)
{
    int64_t rv;
    int rc = kvq_txn_get_read_version(&rv, txn);
    if (rc == 0)
        rc = look_due(w->q, txn, kvq__wq_expiry_bound(w, rv), rv, due);
    return rc;
}

typedef struct pass_ctx {
    kvq_workq *w;
    uint64_t moved;
    int more;
    int check_first;
    int prune;
} pass_ctx;

static int pass_body(kvq_txn *txn, void *arg)
{
    pass_ctx *c = arg;
    c->moved = 0;
    c->more = 0;
    if (c->check_first) {
        int due = 0;
        int rc = upkeep_due(c->w, txn, &due);
        if (rc != 0 || !due)
            return rc;
    }
    return recover_pass(c->w, txn, c->prune, &c->moved, &c->more);
}

int kvq__wq_passes_while_due(kvq_workq *w, int prune, uint64_t *out)
{
    pass_ctx p = { w, 0, 1, 1, prune };
    int rc = 0;
    while (rc == 0 && p.more) {
        rc = kvq_db_transact(w->q->db, pass_body, &p);
        if (rc == 0 && out != NULL)
            *out += p.moved;
    }
    return rc;
}

/* ---- every reader makes what is due ready first ------------------------------------------------
 */

/* The passes of a reader that has no work-queue handle: transient keys over q, with the max
 * deliveries of the work queue last opened over q, else of the named queue's settings, else 0
 * (an ended lease always goes back to the queue; a receiver that takes an item which has had its
 * deliveries moves it to the dead letters then, with its own settings). No pruning: the dedup
 * window is the work queue's, unknown here. */
static int reader_passes(kvq_queue *q)
{
    kvq_workq_options o = KVQ_WORKQ_OPTIONS_INIT;
    int64_t md = __atomic_load_n(&q->wq_max_deliveries, __ATOMIC_RELAXED);
    o.max_deliveries = md >= 0 ? (uint32_t)md : q->is_named ? q->named.max_deliveries : 0;
    kvq_workq w;
    memset(&w, 0, sizeof(w));
    int rc = kvq__wq_keys_init(&w, q, &o);
    if (rc == 0)
        rc = kvq__wq_passes_while_due(&w, 0, NULL);
    kvq__wq_keys_dispose(&w);
    return rc;
}

int kvq__q_due_gate(kvq_queue *q, kvq_workq *w, kvq_txn *txn)
{
    if (q->type == KVQ_QUEUE_FIFO)
        return 0;
    int64_t rv;
    int due = 0;
    int rc = kvq_txn_get_read_version(&rv, txn);
    if (rc == 0)
        rc = look_due(q, txn, w != NULL ? kvq__wq_expiry_bound(w, rv) : rv, rv, &due);
    if (rc != 0 || !due)
        return rc;
    rc = w != NULL ? kvq__wq_passes_while_due(w, 1, NULL) : reader_passes(q);
    if (rc == KVQ_EPERM)
        return 0; /* a read-only database: read as it is stored */
    if (rc != 0)
        return rc;
    return kvq__error(KVQ_ENOT_COMMITTED,
                      "due items were made ready after this transaction's read version; read "
                      "again (a retry loop does)");
}

static int tick_body(kvq_txn *txn, void *arg)
{
    kvq_workq *w = arg;
    return kvq__wq_counter_add(txn, &w->tick, 1);
}

int kvq__wq_recover_all(kvq_workq *w, uint64_t *out)
{
    /* A tiny commit, so that the read versions below are the present on every engine. */
    int rc = kvq_db_transact(w->q->db, tick_body, w);
    pass_ctx p = { w, 0, 1, 0, 1 };
    while (rc == 0 && p.more) {
        rc = kvq_db_transact(w->q->db, pass_body, &p);
        if (rc == 0 && out != NULL)
            *out += p.moved;
    }
    return rc;
}
