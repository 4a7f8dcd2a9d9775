/* kvq_workq_purge (kvq/workq_batch.h): every item of a work queue removed in one transaction,
 * whatever its state (ready, in flight, delayed, dead), and counted as cleared rather than as
 * popped. */
#include "kvq/workq_batch.h"
#include "layers/workq/workq_internal.h"
#include "util/util.h"

static int read_count(kvq_txn *txn, const kvq_buf *key, int64_t *out)
{
    kvq_bytes v;
    int present;
    /* Not a snapshot: a concurrent change of the count makes the purge retry, so the counts it
     * sets back to zero are exact. */
    int rc = kvq_txn_get(&v, &present, txn, key->data, key->len, 0);
    *out = rc == 0 && present ? (int64_t)kvq__le_get(v.data, v.len) : 0;
    return rc;
}

typedef struct purge_ctx {
    kvq_workq *w;
    uint64_t cleared;
} purge_ctx;

static int purge_body(kvq_txn *txn, void *arg)
{
    purge_ctx *c = arg;
    kvq_workq *w = c->w;
    kvq_queue *q = w->q;
    int64_t inflight = 0, delayed = 0, dead = 0, ready = 0, np = 0, nq = 0;
    int rc = read_count(txn, &w->n_inflight, &inflight);
    if (rc == 0)
        rc = read_count(txn, &w->n_delayed, &delayed);
    if (rc == 0)
        rc = read_count(txn, &w->n_dead, &dead);
    if (rc == 0 && q->type == KVQ_QUEUE_DURABLE) {
        rc = read_count(txn, &q->npush, &np);
        if (rc == 0)
            rc = read_count(txn, &q->npop, &nq);
        ready = np - nq;
    } else if (rc == 0) {
        /* The priority recipe keeps no count: its items are counted (every page in txn). */
        uint64_t n = 0;
        rc = kvq_queue_len_txn(&n, q, txn, 0);
        ready = (int64_t)n;
    }
    /* The ready items (a durable queue's npop catches up with npush), then every state the
     * work queue keeps. */
    if (rc == 0)
        rc = kvq_queue_clear_txn(q, txn);
    const kvq_buf *kinds[] = { &w->base_c, &w->base_dlq, &w->base_l, &w->base_v, &w->base_x,
                               &w->base_y, &w->base_a,   &w->base_t, &w->base_b };
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    for (size_t i = 0; rc == 0 && i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        rc = kvq__wq_range_of(&lo, &hi, kinds[i]);
        if (rc == 0)
            rc = kvq_txn_clear_range(txn, lo.data, lo.len, hi.data, hi.len);
    }
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    if (ready < 0)
        ready = 0;
    if (rc == 0 && inflight != 0)
        rc = kvq__wq_counter_add(txn, &w->n_inflight, -inflight);
    if (rc == 0 && delayed != 0)
        rc = kvq__wq_counter_add(txn, &w->n_delayed, -delayed);
    if (rc == 0 && dead != 0)
        rc = kvq__wq_counter_add(txn, &w->n_dead, -dead);
    if (rc == 0 && q->type == KVQ_QUEUE_PRIORITY) {
        int64_t counted = 0;
        rc = read_count(txn, &w->n_ready, &counted);
        if (rc == 0 && counted != 0)
            rc = kvq__wq_counter_add(txn, &w->n_ready, -counted);
    }
    int64_t all =
        ready + (inflight > 0 ? inflight : 0) + (delayed > 0 ? delayed : 0) + (dead > 0 ? dead : 0);
    if (rc == 0 && all > 0)
        rc = kvq__wq_counter_add(txn, &w->n_cleared, all);
    if (rc == 0 && ready > 0 && q->type == KVQ_QUEUE_DURABLE)
        rc = kvq__wq_counter_add(txn, &w->n_cleared_ready, ready);
    /* Long polls sleep until the first lease ends or delayed item falls due: wake them. */
    if (rc == 0)
        rc = kvq__wq_counter_add(txn, &w->tick, 1);
    if (rc == 0)
        c->cleared = (uint64_t)all;
    return rc;
}

int kvq_workq_purge(uint64_t *out, kvq_workq *w)
{
    int rc = kvq__wq_check(w, NULL, 0, "kvq_workq_purge");
    if (rc != 0)
        return rc;
    purge_ctx c = { w, 0 };
    rc = kvq_db_transact(w->q->db, purge_body, &c);
    if (out != NULL)
        *out = rc == 0 ? c.cleared : 0;
    return rc;
}
