/* The work queue's upkeep: leases that ended go back to the queue (or to the dead letters), due
 * delayed items become ready, old settled-lease markers, dedup keys and age index entries are
 * pruned. A receive runs one pass when something is due; kvq_workq_recover runs passes until
 * none is left. */
#include <string.h>

#include "kvq/workq_batch.h"
#include "layers/workq_internal.h"

#define SETTLED_WINDOW_BUCKETS 60
#define BATCH_BUDGET (2 * 1000 * 1000)

/* ---- recovery ------------------------------------------------------------------------------ */

/* One upkeep transaction: up to KVQ__WQ_BATCH expired leases back, up to KVQ__WQ_BATCH due delayed
 * items ready, old markers pruned. *more = 1 when a batch was full. Expired leases are handled
 * first: the durable promotions write versionstamped keys, after which the item range is
 * unreadable. */
static int recover_pass(kvq_workq *w, kvq_txn *txn, uint64_t *moved, int *more)
{
    int64_t rv;
    int rc = kvq_txn_get_read_version(&rv, txn);
    if (rc != 0)
        return rc;
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT, k = KVQ_BUF_INIT, m = KVQ_BUF_INIT,
            v = KVQ_BUF_INIT;
    kvq_tuple *t = NULL;
    const kvq_kv *kvs;
    size_t got = 0;
    kvq_tuple_elem e = kvq_tuple_int(rv);
    kvq_tuple_elem ex = kvq_tuple_int(kvq__wq_expiry_bound(w, rv));
    /* Bytes of batch items one pass gives back at most (a batch of large values takes more
     * than one pass rather than one transaction too large). */
    int64_t budget = BATCH_BUDGET;
    /* Expired leases: the range read (not snapshot) makes two recoverers of one lease conflict,
     * and an ack that commits meanwhile (it cannot: the lease has expired) would too. */
    rc = kvq__wq_range_of(&lo, &hi, &w->base_x);
    if (rc == 0)
        rc = kvq__wq_key_of(&hi, &w->base_x, &ex, 1);
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo.data, lo.len, hi.data, hi.len,
                               KVQ__WQ_BATCH, 0);
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
        if (rc != 0 || kvq_tuple_count(t) != 2 || kvq_tuple_at(t, 1)->type != KVQ_TUPLE_BYTES ||
            (kvq_tuple_at(t, 1)->v.bytes.len != 16 &&
             kvq_tuple_at(t, 1)->v.bytes.len != KVQ__WQ_BATCH_ID)) {
            rc = kvq__error(KVQ_EDAMAGED, "a malformed lease expiry key");
            break;
        }
        if (kvq_tuple_at(t, 1)->v.bytes.len == KVQ__WQ_BATCH_ID) {
            /* A batch lease (workq_batch.c): its items, as far as the pass's budget goes. */
            uint8_t bid[KVQ__WQ_BATCH_ID];
            memcpy(bid, kvq_tuple_at(t, 1)->v.bytes.data, sizeof(bid));
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
        memcpy(id, kvq_tuple_at(t, 1)->v.bytes.data, 16);
        kvq_tuple_destroy(t);
        t = NULL;
        rc = kvq_txn_clear(txn, xk, xl);
        kvq_bytes lv, vv;
        int lp = 0, vp = 0;
        if (rc == 0)
            rc = kvq__wq_id_key(&k, &w->base_l, id);
        if (rc == 0)
            rc = kvq_txn_get(&lv, &lp, txn, k.data, k.len, 0);
        if (rc == 0 && lp)
            rc = kvq__buf_set(&m, lv.data, lv.len);
        if (rc == 0 && lp)
            rc = kvq_txn_clear(txn, k.data, k.len);
        if (rc == 0)
            rc = kvq__wq_id_key(&k, &w->base_v, id);
        if (rc == 0)
            rc = kvq_txn_get(&vv, &vp, txn, k.data, k.len, 0);
        if (rc == 0 && vp)
            rc = kvq__buf_set(&v, vv.data, vv.len);
        if (rc == 0 && vp)
            rc = kvq_txn_clear(txn, k.data, k.len);
        if (rc != 0 || !lp || !vp || m.len < 20)
            continue; /* a stale index entry: cleared */
        uint32_t deliv = (uint32_t)kvq__le_get(m.data + 8, 4);
        kvq_bytes val = { v.data, v.len };
        int64_t since = -1;
        rc = kvq__wq_age_take(w, txn, id, &since);
        if (rc == 0)
            rc = kvq__wq_counter_add(txn, &w->n_inflight, -1);
        if (rc == 0)
            rc = kvq__wq_give_back(w, txn, m.data + 20, m.len - 20, val, deliv, since, &k, NULL);
        if (rc == 0)
            (*moved)++;
    }
    kvq__free(xoff);
    kvq_buf_dispose(&xkeys);
    /* Due delayed items. */
    if (rc == 0)
        rc = kvq__wq_range_of(&lo, &hi, &w->base_y);
    if (rc == 0)
        rc = kvq__wq_key_of(&hi, &w->base_y, &e, 1);
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo.data, lo.len, hi.data, hi.len,
                               KVQ__WQ_BATCH, 0);
    if (rc == 0 && got == KVQ__WQ_BATCH)
        *more = 1;
    for (size_t i = 0; rc == 0 && i < got; i++) {
        /* kvs stays valid: only writes follow. */
        rc = kvq_tuple_unpack(&t, kvs[i].key.data + w->base_y.len, kvs[i].key.len - w->base_y.len);
        if (rc != 0 || kvq_tuple_count(t) != 4 || kvq_tuple_at(t, 2)->type != KVQ_TUPLE_INT ||
            kvq_tuple_at(t, 3)->type != KVQ_TUPLE_INT) {
            rc = kvq__error(KVQ_EDAMAGED, "a malformed delayed-item key");
            break;
        }
        int64_t prio = kvq_tuple_at(t, 2)->v.i;
        uint32_t deliv = (uint32_t)kvq_tuple_at(t, 3)->v.i;
        kvq_tuple_destroy(t);
        t = NULL;
        rc = kvq_txn_clear(txn, kvs[i].key.data, kvs[i].key.len);
        if (rc == 0)
            rc = kvq__wq_counter_add(txn, &w->n_delayed, -1);
        if (rc == 0)
            rc = kvq__wq_push_ready(w, txn, prio, deliv, kvs[i].value, &k);
        if (rc == 0)
            (*moved)++;
    }
    /* Prune age index entries left by plain pops, settled markers and dedup keys. */
    if (rc == 0 && w->q->type == KVQ_QUEUE_PRIORITY) {
        int64_t since;
        rc = kvq__wq_age_head(w, txn, 1, &since);
    }
    if (rc == 0) {
        int64_t cut = rv / KVQ__BUCKET_VERSIONS - SETTLED_WINDOW_BUCKETS;
        kvq_tuple_elem ce = kvq_tuple_int(cut);
        if (cut > 0) {
            rc = kvq__wq_range_of(&lo, &hi, &w->base_s);
            if (rc == 0)
                rc = kvq__wq_key_of(&hi, &w->base_s, &ce, 1);
            if (rc == 0)
                rc = kvq_txn_clear_range(txn, lo.data, lo.len, hi.data, hi.len);
        }
    }
    if (rc == 0) {
        kvq_tuple_elem de = kvq_tuple_int(rv - w->opts.dedup_window_ms * KVQ__VERSIONS_PER_MS);
        rc = kvq__wq_range_of(&lo, &hi, &w->base_ddx);
        if (rc == 0)
            rc = kvq__wq_key_of(&hi, &w->base_ddx, &de, 1);
        if (rc == 0)
            rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo.data, lo.len, hi.data, hi.len,
                                   KVQ__WQ_BATCH, KVQ_SNAPSHOT);
        for (size_t i = 0; rc == 0 && i < got; i++) {
            rc = kvq_tuple_unpack(&t, kvs[i].key.data + w->base_ddx.len,
                                  kvs[i].key.len - w->base_ddx.len);
            if (rc != 0 || kvq_tuple_count(t) != 2 || kvq_tuple_at(t, 1)->type != KVQ_TUPLE_BYTES) {
                rc = kvq__error(KVQ_EDAMAGED, "a malformed dedup index key");
                break;
            }
            int64_t at = kvq_tuple_at(t, 0)->v.i;
            kvq_tuple_elem de2 = *kvq_tuple_at(t, 1);
            rc = kvq__wq_key_of(&k, &w->base_dd, &de2, 1);
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
                rc = kvq_txn_get(&dv, &dp, txn, k.data, k.len, 0);
            if (rc == 0 && dp && dv.len >= 8 && (int64_t)kvq__le_get(dv.data, 8) == at)
                rc = kvq_txn_clear(txn, k.data, k.len);
        }
    }
    kvq_tuple_destroy(t);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&m);
    kvq_buf_dispose(&v);
    return rc;
}

/* Whether an expired lease or a due delayed item waits (snapshot reads at txn's version). */
static int upkeep_due(kvq_workq *w, kvq_txn *txn, int *due)
{
    int64_t rv;
    int rc = kvq_txn_get_read_version(&rv, txn);
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    const kvq_buf *bases[2] = { &w->base_x, &w->base_y };
    *due = 0;
    for (int i = 0; rc == 0 && i < 2 && !*due; i++) {
        kvq_tuple_elem e = kvq_tuple_int(i == 0 ? kvq__wq_expiry_bound(w, rv) : rv);
        rc = kvq__wq_range_of(&lo, &hi, bases[i]);
        if (rc == 0)
            rc = kvq__wq_key_of(&hi, bases[i], &e, 1);
        const kvq_kv *kvs;
        size_t got = 0;
        if (rc == 0)
            rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo.data, lo.len, hi.data, hi.len, 1,
                                   KVQ_SNAPSHOT);
        if (rc == 0 && got > 0)
            *due = 1;
    }
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    return rc;
}

typedef struct pass_ctx {
    kvq_workq *w;
    uint64_t moved;
    int more;
    int check_first;
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
    return recover_pass(c->w, txn, &c->moved, &c->more);
}

int kvq__wq_upkeep_if_due(kvq_workq *w)
{
    pass_ctx p = { w, 0, 0, 1 };
    return kvq_db_transact(w->q->db, pass_body, &p);
}

int kvq_workq_ready_due(uint64_t *out, kvq_workq *w)
{
    int rc = kvq__wq_check(w, NULL, 0, "kvq_workq_ready_due");
    if (rc != 0)
        return rc;
    if (out != NULL)
        *out = 0;
    /* As a receive does first: a read-only look, and passes only while something is due. */
    pass_ctx p = { w, 0, 1, 1 };
    while (rc == 0 && p.more) {
        rc = kvq_db_transact(w->q->db, pass_body, &p);
        if (rc == 0 && out != NULL)
            *out += p.moved;
    }
    return rc;
}

static int tick_body(kvq_txn *txn, void *arg)
{
    kvq_workq *w = arg;
    return kvq__wq_counter_add(txn, &w->tick, 1);
}

int kvq_workq_recover(uint64_t *out, kvq_workq *w)
{
    int rc = kvq__wq_check(w, NULL, 0, "kvq_workq_recover");
    if (rc != 0)
        return rc;
    if (out != NULL)
        *out = 0;
    /* A tiny commit, so that the read versions below are the present on every engine. */
    rc = kvq_db_transact(w->q->db, tick_body, w);
    pass_ctx p = { w, 0, 1, 0 };
    while (rc == 0 && p.more) {
        rc = kvq_db_transact(w->q->db, pass_body, &p);
        if (rc == 0 && out != NULL)
            *out += p.moved;
    }
    return rc;
}
