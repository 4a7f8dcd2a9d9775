/* Batches of the work queue (kvq/workq_batch.h): receive, ack and nack many items in one
 * transaction, so that a consumer of small jobs pays one commit per batch instead of one per
 * item; a batch received together is leased as one record (batch_lease.c). Leases of single
 * receives (workq.c) and of batch items mix freely in every call: an item's lease is settled by the
 * batch that holds it, any other by workq.c's single-lease path. */
#include <string.h>

#include "kvq/workq_batch.h"
#include "layers/queue/batch_lease_internal.h"
#include "layers/workq/workq_internal.h"
#include "util/util.h"

/* ---- receive ----------------------------------------------------------------------------------
 */

/* The items a receive batch collects before it writes them. */
typedef struct collect {
    kvq_buf suf, val;
    bitem *items;
    uint32_t n;
} collect;

/* Writes the batch record of c's items (layers/queue/batch_lease_internal.h) and its expiry
 * entry. */
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
                rc = chunk == 0 ? kvq__wq_b_bid_key(&k, &w->base_b, bid)
                                : kvq__wq_b_chunk_key(&k, w, bid, STREAM_META, chunk);
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
            rc = kvq__wq_b_chunk_key(&k, w, bid, STREAM_VAL, chunk++);
            if (rc == 0)
                rc = kvq_txn_set(txn, k.data, k.len, c->val.data + from, len);
            from += len;
            len = 0;
        }
        len += vl;
    }
    if (rc == 0)
        rc = kvq__wq_b_bx_key(&k, w, deadline, bid);
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
        rc = kvq__wq_b_bid_key(&key, &w->base_b, bid);
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
            rc = kvq__wq_b_chunk_key(&key, w, bid, STREAM_VAL, (int64_t)ci);
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
        uint32_t idx = kvq__wq_b_item_of(l.id);
        if (!loaded || memcmp(b.id, l.id, BID) != 0) {
            rc = kvq__wq_b_flush(&b, w, txn);
            if (rc == 0)
                rc = kvq__wq_b_load(&b, w, txn, l.id, l.received, 0, KVQ_SNAPSHOT);
            loaded = rc == 0;
            if (rc != 0)
                break;
        }
        int r;
        if (kvq__wq_b_owns(&b, idx))
            r = b.kind == B_LIVE ? kvq__wq_b_settle_item(&b, w, txn, idx, &l, kind, arg, rv, &t)
                                 : kvq__wq_b_marked_outcome(&b, idx);
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
        rc = kvq__wq_b_flush(&b, w, txn);
    if (rc == 0)
        rc = kvq__wq_tally_apply(w, txn, &t);
    kvq__wq_b_dispose(&b);
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
