/* Batches of the work queue (kvq/workq.h): receive, ack and nack many items in one transaction,
 * so that a consumer of small jobs pays one commit per batch instead of one per item. Each item
 * goes through the same steps as a single receive or settle (workq.c), so batches and single
 * operations mix freely. */
#include <string.h>

#include "kvq/workq_batch.h"
#include "layers/workq_internal.h"
#include "util/util.h"

#define MANY_MAX 10000

int kvq_workq_receive_many_txn(kvq_bytes *outs,
                               kvq_workq_lease *leases,
                               size_t *n,
                               kvq_workq *w,
                               kvq_txn *txn,
                               size_t k,
                               int64_t lease_ms)
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
    /* The head's keys and values are copied before anything is written: views into txn are
     * not promised to outlive its next write. Values handed out are borrowed from txn: they are
     * the in-flight copies this transaction writes. */
    kvq_buf keys = KVQ_BUF_INIT, vals = KVQ_BUF_INIT;
    size_t *offs = kvq__malloc(4 * k * sizeof(*offs));
    if (offs == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for a batch of %zu", k);
    /* The leases of a batch get adjacent ids that grow with time: the read version (8 bytes,
     * big-endian), 6 random bytes, then the item's number (2 bytes; k is at most 10,000). Every key of a lease starts with its
     * id (or its deadline, then its id), so a batch's records sit together at the end of their
     * ranges, as a durable queue's versionstamped items do: a batch of 100 writes a few pages
     * where random ids would write one page each, and its acks clear them together. Ids stay
     * unique: two batches with one read version differ in 48 random bits, and a lease id is
     * only ever compared for equality. */
    uint8_t id[16];
    rc = kvq__random_bytes(id + 8, 6);
    for (int b = 0; b < 8; b++)
        id[b] = (uint8_t)((uint64_t)rv >> (56 - 8 * b));
    uint32_t seq = 0;
    /* Items over their deliveries go to the dead letters on the way; a few passes at most. */
    for (int pass = 0; rc == 0 && *n < k && pass < 4; pass++) {
        size_t want = k - *n, found = 0;
        const kvq_kv *kvs;
        rc = kvq__q_head(w->q, txn, KVQ__END_MIN, (int)want, 0, &kvs, &found);
        if (rc != 0 || found == 0)
            break;
        keys.len = vals.len = 0;
        for (size_t i = 0; rc == 0 && i < found; i++) {
            offs[4 * i] = keys.len;
            offs[4 * i + 1] = kvs[i].key.len;
            offs[4 * i + 2] = vals.len;
            offs[4 * i + 3] = kvs[i].value.len;
            rc = kvq_buf_append(&keys, kvs[i].key.data, kvs[i].key.len);
            if (rc == 0)
                rc = kvq_buf_append(&vals, kvs[i].value.data, kvs[i].value.len);
        }
        /* The run read is consecutive in the queue (a range read that conflicts with any
         * change inside it): one clear_range takes its items off, and the counters move once. */
        kvq__wq_tally t;
        memset(&t, 0, sizeof(t));
        t.skip_item_clear = 1;
        t.spans = 1;
        size_t dead_here = 0;
        for (size_t i = 0; rc == 0 && i < found; i++) {
            kvq_bytes key = { keys.data + offs[4 * i], offs[4 * i + 1] };
            kvq_bytes val = { vals.data + offs[4 * i + 2], offs[4 * i + 3] };
            int dead = 0;
            seq++;
            id[14] = (uint8_t)(seq >> 8);
            id[15] = (uint8_t)seq;
            rc = kvq__wq_receive_item(w, txn, key, val, rv, lv, id, &t, &leases[*n], &dead);
            if (rc == 0 && dead)
                dead_here++;
            else if (rc == 0)
                (*n)++;
        }
        if (rc == 0) {
            size_t last = 4 * (found - 1);
            kvq_buf end = KVQ_BUF_INIT;
            rc = kvq_buf_append(&end, keys.data + offs[last], offs[last + 1]);
            if (rc == 0)
                rc = kvq_buf_append(&end, "", 1);
            if (rc == 0)
                rc = kvq_txn_clear_range(txn, keys.data, offs[1], end.data, end.len);
            kvq_buf_dispose(&end);
        }
        if (rc == 0)
            rc = kvq__wq_tally_apply(w, txn, &t);
        kvq__wq_tally_dispose(&t);
        if (rc == 0 && (found < want || dead_here == 0))
            break;
    }
    kvq_buf_dispose(&keys);
    kvq_buf_dispose(&vals);
    kvq__free(offs);
    if (rc != 0)
        return rc;
    /* The values as this transaction wrote them (the leases' value keys). */
    kvq_buf vk = KVQ_BUF_INIT;
    for (size_t i = 0; rc == 0 && i < *n; i++) {
        int present = 0;
        rc = kvq__wq_id_key(&vk, &w->base_v, leases[i].id);
        if (rc == 0)
            rc = kvq_txn_get(&outs[i], &present, txn, vk.data, vk.len, KVQ_SNAPSHOT);
        if (rc == 0 && !present)
            rc = kvq__error(KVQ_EINTERNAL_ERROR, "a lease written in this transaction is gone");
    }
    kvq_buf_dispose(&vk);
    if (rc == 0 && *n == 0)
        rc = kvq__error(KVQ_ENOTFOUND, "the work queue has no ready item");
    return rc;
}

typedef struct recv_many_ctx {
    kvq_workq *w;
    kvq_buf *outs;
    kvq_workq_lease *leases;
    size_t k, n;
    int64_t lease_ms;
    kvq_bytes *views;
} recv_many_ctx;

static int recv_many_body(kvq_txn *txn, void *arg)
{
    recv_many_ctx *c = arg;
    c->n = 0;
    size_t n = 0;
    int rc = kvq_workq_receive_many_txn(c->views, c->leases, &n, c->w, txn, c->k, c->lease_ms);
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (kvq__buf_set(&c->outs[i], c->views[i].data, c->views[i].len) != 0)
            rc = kvq__error(KVQ_ENOMEM, "out of memory copying a received value");
    if (rc == 0)
        c->n = n;
    return rc;
}

int kvq_workq_receive_many(kvq_buf *outs,
                           kvq_workq_lease *leases,
                           size_t *n,
                           kvq_workq *w,
                           size_t k,
                           int64_t lease_ms)
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
    recv_many_ctx c = { w, outs, leases, k, 0, lease_ms, NULL };
    c.views = kvq__malloc(k * sizeof(*c.views));
    if (c.views == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for a batch of %zu", k);
    rc = kvq_db_transact(w->q->db, recv_many_body, &c);
    kvq__free(c.views);
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
    int first = 0;
    kvq__wq_tally t;
    memset(&t, 0, sizeof(t));
    t.spans = 1;
    for (size_t i = 0; i < n; i++) {
        kvq_workq_lease l = leases[i];
        int rc = kvq__wq_settle_txn(w, txn, &l, kind, arg, &t);
        if (rc == KVQ_ELEASE_EXPIRED || rc == KVQ_ELEASE_SETTLED) {
            /* Nothing was written for this lease: the others go on. */
            if (first == 0)
                first = rc;
        } else if (rc != 0) {
            kvq__wq_tally_dispose(&t);
            return rc;
        }
        if (out != NULL)
            out[i] = rc;
    }
    int rc = kvq__wq_tally_apply(w, txn, &t);
    kvq__wq_tally_dispose(&t);
    return rc != 0 ? rc : first;
}

static int check_many(const char *fn, kvq_workq *w, kvq_txn *txn, int need_txn,
                      const kvq_workq_lease *leases, size_t n)
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

int kvq_workq_nack_many_txn(int *out,
                            kvq_workq *w,
                            kvq_txn *txn,
                            const kvq_workq_lease *leases,
                            size_t n,
                            int64_t delay_ms)
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
    int *out;   /* per lease, of the last attempt */
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

static int settle_many(int *out,
                       kvq_workq *w,
                       const kvq_workq_lease *leases,
                       size_t n,
                       int kind,
                       int64_t arg)
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
