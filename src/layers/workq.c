/* Work-queue semantics over the durable and priority queues (kvq/workq.h): leases, ack, nack,
 * extend, delivery counts, dead letters, delayed items, deduplicated pushes and metrics.
 *
 * Written only against the transaction interface and the queue's key layout, so it runs the
 * same on every engine. Keys (bk = the queue's prefix + 0xFF; "suffix" is a ready item's key
 * after the queue's prefix, appended raw, so it stays parseable and ordered):
 *
 *   ready item       prefix + suffix                     the recipe's own key and raw value
 *   bk ("wq","c") + suffix      4-byte LE delivery count of a ready or dead item (absent: 0)
 *   bk ("wq","dlq") + suffix    a dead letter's value
 *   bk ("wq","l", id16)         lease: 8 LE deadline, 4 LE deliveries, 8 LE received, suffix
 *   bk ("wq","v", id16)         the leased item's value
 *   bk ("wq","x", deadline, id16)           expiry index of leases (empty value)
 *   bk ("wq","y", due, id16, prio, deliv)   a delayed item's value
 *   bk ("wq","s", bucket, id16)             settled-lease marker (1 byte: 'a' ack, 'n' nack)
 *   bk ("wq","dd", key)                     dedup key: 8 LE version, 16-byte push id
 *   bk ("wq","ddx", version, key)           dedup index for pruning (empty value)
 *   bk ("wq","n", name)                     8-byte LE counters: inflight, delayed, dead, ready;
 *                                           and, only ever growing: received, taken, acked,
 *                                           requeued, deadlettered; and tick, bumped by
 *                                           recover and by an extend that shortens a lease
 *
 * The ready count of a durable queue is npush - npop: a receive adds 1 to npop, a return to the
 * queue adds 1 to npush (which also wakes consumers watching npush).
 *
 * Conflicts: a receive reads the head (as a pop does) and the head's count key. Ack, nack and
 * extend read only their lease's own keys; counters change by atomic adds. So settling leases of
 * different items never conflicts, and nothing a push writes is read by them. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "kvq/testing.h"
#include "kvq/workq.h"
#include "layers/layers_internal.h"

#define VPM KVQ__VERSIONS_PER_MS
/* Settled-lease markers are kept for this many buckets (minutes) after the lease's receive. */
#define SETTLED_WINDOW_BUCKETS 60
#define BATCH                  64
#define MAX_DEDUP_KEY          1000

struct kvq_workq {
    kvq_queue *q;
    kvq_workq_options opts;
    unsigned int test_flags; /* KVQ_WORKQ_TEST_* (kvq/testing.h) */
    kvq_buf base_c, base_dlq, base_l, base_v, base_x, base_y, base_s, base_dd, base_ddx;
    kvq_buf base_a, base_t; /* priority queues: the age index, leased items' ready versions */
    kvq_buf n_inflight, n_delayed, n_dead, n_ready, tick;
    /* Totals since the queue was made (atomic adds; only read by the metrics). */
    kvq_buf n_received, n_taken, n_acked, n_requeued, n_deadlettered;
    /* Long polls through this handle (atomic; read by kvq_testing_workq_wait_counts): looks
     * (receives) and sleeps. */
    uint64_t wait_looks, wait_sleeps;
};

enum { OUT_ACK = 'a', OUT_NACK = 'n' };

/* ---- keys ---------------------------------------------------------------------------------- */

static kvq_bytes bytes_of(const kvq_buf *b)
{
    kvq_bytes r = { b->data, b->len };
    return r;
}

/* out = bk + pack(("wq", tag)) [+ pack((name,)) when name != NULL] */
static int make_base(kvq_workq *w, kvq_buf *out, const char *tag, const char *name)
{
    static const uint8_t ff = 0xff;
    kvq_tuple_elem e[3] = { kvq_tuple_str("wq"), kvq_tuple_str(tag),
                            kvq_tuple_str(name != NULL ? name : "") };
    int rc = kvq_buf_append(out, w->q->prefix.data, w->q->prefix.len);
    if (rc == 0)
        rc = kvq_buf_append(out, &ff, 1);
    if (rc == 0)
        rc = kvq_tuple_pack_buf(out, e, name != NULL ? 3 : 2);
    return rc;
}

/* out = base + pack(e) (out reset first). */
static int key_of(kvq_buf *out, const kvq_buf *base, const kvq_tuple_elem *e, size_t n)
{
    out->len = 0;
    int rc = kvq_buf_append(out, base->data, base->len);
    if (rc == 0 && n > 0)
        rc = kvq_tuple_pack_buf(out, e, n);
    return rc;
}

/* out = base + raw bytes (out reset first). */
static int key_raw(kvq_buf *out, const kvq_buf *base, const uint8_t *p, size_t n)
{
    out->len = 0;
    int rc = kvq_buf_append(out, base->data, base->len);
    if (rc == 0 && n > 0)
        rc = kvq_buf_append(out, p, n);
    return rc;
}

/* [base + 00, base + FF): the range of one kind. */
static int range_of(kvq_buf *lo, kvq_buf *hi, const kvq_buf *base)
{
    static const uint8_t z = 0, f = 0xff;
    int rc = key_raw(lo, base, &z, 1);
    if (rc == 0)
        rc = key_raw(hi, base, &f, 1);
    return rc;
}

static int id_key(kvq_buf *out, const kvq_buf *base, const uint8_t *id)
{
    kvq_tuple_elem e = kvq_tuple_bytes(id, 16);
    return key_of(out, base, &e, 1);
}

static int x_key(kvq_buf *out, kvq_workq *w, int64_t deadline, const uint8_t *id)
{
    kvq_tuple_elem e[2] = { kvq_tuple_int(deadline), kvq_tuple_bytes(id, 16) };
    return key_of(out, &w->base_x, e, 2);
}

static int s_key(kvq_buf *out, kvq_workq *w, int64_t received, const uint8_t *id)
{
    kvq_tuple_elem e[2] = { kvq_tuple_int(received / KVQ__BUCKET_VERSIONS),
                            kvq_tuple_bytes(id, 16) };
    return key_of(out, &w->base_s, e, 2);
}

static int counter_add(kvq_txn *txn, const kvq_buf *key, int64_t delta)
{
    uint8_t p[8];
    kvq__le64_put(p, (uint64_t)delta);
    return kvq_txn_atomic_op(txn, key->data, key->len, p, 8, KVQ_MUT_ADD);
}

static int read_counter(kvq_txn *txn, const kvq_buf *key, int64_t *out)
{
    kvq_bytes v;
    int present;
    int rc = kvq_txn_get(&v, &present, txn, key->data, key->len, KVQ_SNAPSHOT);
    *out = rc == 0 && present ? (int64_t)kvq__le_get(v.data, v.len) : 0;
    return rc;
}

/* The ready count goes up or down by delta. */
static int ready_add(kvq_workq *w, kvq_txn *txn, int64_t delta)
{
    kvq_queue *q = w->q;
    if (q->type == KVQ_QUEUE_DURABLE)
        return delta > 0 ? counter_add(txn, &q->npush, delta) : counter_add(txn, &q->npop, -delta);
    return counter_add(txn, &w->n_ready, delta);
}

/* ---- open / close -------------------------------------------------------------------------- */

void kvq_workq_close(kvq_workq *w)
{
    if (w == NULL)
        return;
    kvq_buf *bufs[] = { &w->base_c,   &w->base_dlq,   &w->base_l,    &w->base_v,
                        &w->base_x,   &w->base_y,     &w->base_s,    &w->base_dd,
                        &w->base_ddx, &w->n_inflight, &w->n_delayed, &w->n_dead,
                        &w->n_ready,  &w->tick,       &w->base_a,    &w->base_t,
                        &w->n_received, &w->n_taken,  &w->n_acked,   &w->n_requeued,
                        &w->n_deadlettered };
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        kvq_buf_dispose(bufs[i]);
    kvq__free(w);
}

int kvq_workq_open(kvq_workq **out, kvq_queue *q, const kvq_workq_options *opts)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_workq_open: out is NULL");
    *out = NULL;
    if (q == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_workq_open: queue is NULL");
    if (q->type != KVQ_QUEUE_DURABLE && q->type != KVQ_QUEUE_PRIORITY)
        return kvq__error(KVQ_EWRONGTYPE,
                          "work queues apply to durable and priority queues, not FIFO queues");
    kvq_workq_options o = KVQ_WORKQ_OPTIONS_INIT;
    if (opts == NULL && q->is_named) {
        /* A queue opened by name: the settings `kvq create` stored. */
        if (q->named.lease_ms > 0)
            o.lease_ms = q->named.lease_ms;
        o.max_deliveries = q->named.max_deliveries;
    }
    if (opts != NULL) {
        if (opts->version != KVQ_WORKQ_OPTIONS_VERSION)
            return kvq__error(KVQ_EINVAL, "kvq_workq_open: options version %u (expected %d)",
                              opts->version, KVQ_WORKQ_OPTIONS_VERSION);
        o = *opts;
    }
    if (o.lease_ms < 1 || o.lease_ms > 86400000)
        return kvq__error(KVQ_EINVAL, "lease of %lld ms is out of range (1 ms to 1 day)",
                          (long long)o.lease_ms);
    if (o.dedup_window_ms < 1 || o.dedup_window_ms > 7LL * 86400000)
        return kvq__error(KVQ_EINVAL, "dedup window of %lld ms is out of range (1 ms to 7 days)",
                          (long long)o.dedup_window_ms);
    kvq_workq *w = kvq__calloc(1, sizeof(*w));
    if (w == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for a work queue");
    w->q = q;
    w->opts = o;
    int rc = make_base(w, &w->base_c, "c", NULL);
    if (rc == 0)
        rc = make_base(w, &w->base_dlq, "dlq", NULL);
    if (rc == 0)
        rc = make_base(w, &w->base_l, "l", NULL);
    if (rc == 0)
        rc = make_base(w, &w->base_v, "v", NULL);
    if (rc == 0)
        rc = make_base(w, &w->base_x, "x", NULL);
    if (rc == 0)
        rc = make_base(w, &w->base_y, "y", NULL);
    if (rc == 0)
        rc = make_base(w, &w->base_s, "s", NULL);
    if (rc == 0)
        rc = make_base(w, &w->base_dd, "dd", NULL);
    if (rc == 0)
        rc = make_base(w, &w->base_ddx, "ddx", NULL);
    if (rc == 0)
        rc = make_base(w, &w->base_a, "a", NULL);
    if (rc == 0)
        rc = make_base(w, &w->base_t, "t", NULL);
    if (rc == 0)
        rc = make_base(w, &w->n_inflight, "n", "inflight");
    if (rc == 0)
        rc = make_base(w, &w->n_delayed, "n", "delayed");
    if (rc == 0)
        rc = make_base(w, &w->n_dead, "n", "dead");
    if (rc == 0)
        rc = make_base(w, &w->n_ready, "n", "ready");
    if (rc == 0)
        rc = make_base(w, &w->tick, "n", "tick");
    if (rc == 0)
        rc = make_base(w, &w->n_received, "n", "received");
    if (rc == 0)
        rc = make_base(w, &w->n_taken, "n", "taken");
    if (rc == 0)
        rc = make_base(w, &w->n_acked, "n", "acked");
    if (rc == 0)
        rc = make_base(w, &w->n_requeued, "n", "requeued");
    if (rc == 0)
        rc = make_base(w, &w->n_deadlettered, "n", "deadlettered");
    if (rc != 0) {
        kvq_workq_close(w);
        return kvq__error(KVQ_ENOMEM, "out of memory for a work queue's keys");
    }
    *out = w;
    return 0;
}

static int check_w(const kvq_workq *w, const kvq_txn *txn, int need_txn, const char *fn)
{
    if (w == NULL || (need_txn && txn == NULL))
        return kvq__error(KVQ_EINVAL, "%s: NULL work queue or transaction", fn);
    return 0;
}

static int lease_versions(const kvq_workq *w, int64_t lease_ms, int64_t *out)
{
    if (lease_ms == 0)
        lease_ms = w->opts.lease_ms;
    if (lease_ms < 1 || lease_ms > 86400000)
        return kvq__error(KVQ_EINVAL, "lease of %lld ms is out of range (1 ms to 1 day)",
                          (long long)lease_ms);
    *out = lease_ms * VPM;
    return 0;
}

/* Upkeep returns the leases whose deadline is below this bound: the read version, or (test-only
 * knob) everything, so that a checker can be shown to catch early redeliveries. */
static int64_t expiry_bound(const kvq_workq *w, int64_t rv)
{
    return (w->test_flags & KVQ_WORKQ_TEST_IGNORE_LEASES) ? INT64_MAX : rv;
}

/* ---- the age of ready items on priority queues --------------------------------------------- */

/* A priority queue's keys carry no time, so the layer keeps one: `since`, the read version at
 * which an item first became ready through this API (a push, a due delayed item, a redrive). A
 * ready item has it in its count key (4 LE deliveries, then 8 LE since) and in the age index
 * bk ("wq","a", since) + suffix, whose first entry is the oldest ready item; while the item is
 * in flight it is kept in bk ("wq","t", id16), so that an item given back keeps its age (as a
 * durable item keeps its versionstamp). Only blind writes and clears: no new conflicts. */

/* out = bk ("wq","a", since) + suffix */
static int age_key(kvq_buf *out, kvq_workq *w, int64_t since, const uint8_t *suffix, size_t slen)
{
    kvq_tuple_elem e = kvq_tuple_int(since);
    int rc = key_of(out, &w->base_a, &e, 1);
    if (rc == 0 && slen > 0)
        rc = kvq_buf_append(out, suffix, slen);
    return rc;
}

/* Marks a priority item ready since `since` (-1: this transaction's read version): its count
 * key with its deliveries, and its age index entry. */
static int age_mark(kvq_workq *w,
                    kvq_txn *txn,
                    const uint8_t *suffix,
                    size_t slen,
                    uint32_t deliveries,
                    int64_t since)
{
    int rc = since < 0 ? kvq_txn_get_read_version(&since, txn) : 0;
    uint8_t v[12];
    kvq__le32_put(v, deliveries);
    kvq__le64_put(v + 4, (uint64_t)since);
    kvq_buf k = KVQ_BUF_INIT;
    if (rc == 0)
        rc = key_raw(&k, &w->base_c, suffix, slen);
    if (rc == 0)
        rc = kvq_txn_set(txn, k.data, k.len, v, sizeof(v));
    if (rc == 0)
        rc = age_key(&k, w, since, suffix, slen);
    if (rc == 0)
        rc = kvq_txn_set(txn, k.data, k.len, NULL, 0);
    kvq_buf_dispose(&k);
    return rc;
}

/* A leased priority item's ready version: read and cleared (-1 when it has none: pushed with a
 * plain kvq_queue push, or before the layer kept ages). */
static int age_take(kvq_workq *w, kvq_txn *txn, const uint8_t *id, int64_t *since)
{
    *since = -1;
    if (w->q->type != KVQ_QUEUE_PRIORITY)
        return 0;
    kvq_buf k = KVQ_BUF_INIT;
    kvq_bytes v;
    int present = 0;
    int rc = id_key(&k, &w->base_t, id);
    if (rc == 0)
        rc = kvq_txn_get(&v, &present, txn, k.data, k.len, 0);
    if (rc == 0 && present && v.len == 8)
        *since = (int64_t)kvq__le_get(v.data, 8);
    if (rc == 0 && present)
        rc = kvq_txn_clear(txn, k.data, k.len);
    kvq_buf_dispose(&k);
    return rc;
}

/* Entries of the age index looked at per metrics read or upkeep pass. */
#define AGE_PROBE 16

/* The ready version of the oldest ready item of a priority queue (-1: none found), from the
 * first AGE_PROBE entries of the age index (snapshot reads). An entry whose item is gone was
 * left by a plain pop (kvq_queue_pop_min does not know the index): it is skipped, and with
 * prune set it is cleared with its count key (the item cannot come back, so no conflict is
 * needed). */
static int age_head(kvq_workq *w, kvq_txn *txn, int prune, int64_t *out)
{
    *out = -1;
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT, k = KVQ_BUF_INIT, keys = KVQ_BUF_INIT;
    size_t off[AGE_PROBE + 1];
    const kvq_kv *kvs;
    size_t got = 0;
    kvq_tuple *t = NULL;
    int rc = range_of(&lo, &hi, &w->base_a);
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo.data, lo.len, hi.data, hi.len, AGE_PROBE,
                               KVQ_SNAPSHOT);
    /* kvs is borrowed: copy the keys before reading more. */
    for (size_t i = 0; rc == 0 && i < got; i++) {
        off[i] = keys.len;
        rc = kvq_buf_append(&keys, kvs[i].key.data, kvs[i].key.len);
    }
    off[got] = keys.len;
    for (size_t i = 0; rc == 0 && i < got; i++) {
        const uint8_t *ak = keys.data + off[i];
        size_t al = off[i + 1] - off[i];
        rc = kvq_tuple_unpack(&t, ak + w->base_a.len, al - w->base_a.len);
        if (rc != 0 || kvq_tuple_count(t) < 2 || kvq_tuple_at(t, 0)->type != KVQ_TUPLE_INT) {
            rc = kvq__error(KVQ_EDAMAGED, "a malformed age index key");
            break;
        }
        int64_t since = kvq_tuple_at(t, 0)->v.i;
        kvq_tuple_free(t);
        t = NULL;
        rc = age_key(&k, w, since, NULL, 0);
        if (rc != 0)
            break;
        const uint8_t *suffix = ak + k.len;
        size_t slen = al - k.len;
        kvq_bytes v;
        int present = 0;
        rc = key_raw(&k, &w->q->prefix, suffix, slen);
        if (rc == 0)
            rc = kvq_txn_get(&v, &present, txn, k.data, k.len, KVQ_SNAPSHOT);
        if (rc == 0 && present) {
            *out = since;
            break;
        }
        if (rc == 0 && prune)
            rc = kvq_txn_clear(txn, ak, al);
        if (rc == 0 && prune)
            rc = key_raw(&k, &w->base_c, suffix, slen);
        if (rc == 0 && prune)
            rc = kvq_txn_clear(txn, k.data, k.len);
    }
    kvq_tuple_free(t);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&keys);
    return rc;
}

/* ---- moving items -------------------------------------------------------------------------- */

/* Writes a ready item back at prefix + suffix with its delivery count (and, on a priority queue,
 * its ready version `since`; -1: from now). */
static int to_ready(kvq_workq *w,
                    kvq_txn *txn,
                    const uint8_t *suffix,
                    size_t slen,
                    kvq_bytes value,
                    uint32_t deliveries,
                    int64_t since,
                    kvq_buf *tmp)
{
    int rc = key_raw(tmp, &w->q->prefix, suffix, slen);
    if (rc == 0)
        rc = kvq_txn_set(txn, tmp->data, tmp->len, value.data, value.len);
    if (rc == 0) /* every caller gives an item back: a nack, an ended lease, a redrive */
        rc = counter_add(txn, &w->n_requeued, 1);
    if (rc == 0 && w->q->type == KVQ_QUEUE_PRIORITY) {
        rc = age_mark(w, txn, suffix, slen, deliveries, since);
        return rc == 0 ? ready_add(w, txn, 1) : rc;
    }
    if (rc == 0)
        rc = key_raw(tmp, &w->base_c, suffix, slen);
    if (rc == 0 && deliveries > 0) {
        uint8_t d[4];
        kvq__le32_put(d, deliveries);
        rc = kvq_txn_set(txn, tmp->data, tmp->len, d, 4);
    } else if (rc == 0) {
        rc = kvq_txn_clear(txn, tmp->data, tmp->len);
    }
    if (rc == 0)
        rc = ready_add(w, txn, 1);
    return rc;
}

static int to_dead(kvq_workq *w,
                   kvq_txn *txn,
                   const uint8_t *suffix,
                   size_t slen,
                   kvq_bytes value,
                   uint32_t deliveries,
                   kvq_buf *tmp)
{
    uint8_t d[4];
    kvq__le32_put(d, deliveries);
    int rc = key_raw(tmp, &w->base_dlq, suffix, slen);
    if (rc == 0)
        rc = kvq_txn_set(txn, tmp->data, tmp->len, value.data, value.len);
    if (rc == 0)
        rc = key_raw(tmp, &w->base_c, suffix, slen);
    if (rc == 0)
        rc = kvq_txn_set(txn, tmp->data, tmp->len, d, 4);
    if (rc == 0)
        rc = counter_add(txn, &w->n_dead, 1);
    if (rc == 0)
        rc = counter_add(txn, &w->n_deadlettered, 1);
    return rc;
}

/* Back to the queue, or to the dead letters when the item has had its deliveries. */
static int give_back(kvq_workq *w,
                     kvq_txn *txn,
                     const uint8_t *suffix,
                     size_t slen,
                     kvq_bytes value,
                     uint32_t deliveries,
                     int64_t since,
                     kvq_buf *tmp,
                     int *dead)
{
    int d = w->opts.max_deliveries > 0 && deliveries >= w->opts.max_deliveries;
    if (dead != NULL)
        *dead = d;
    return d ? to_dead(w, txn, suffix, slen, value, deliveries, tmp)
             : to_ready(w, txn, suffix, slen, value, deliveries, since, tmp);
}

static int put_delayed(kvq_workq *w,
                       kvq_txn *txn,
                       int64_t due,
                       int64_t prio,
                       uint32_t deliveries,
                       kvq_bytes value,
                       kvq_buf *tmp)
{
    uint8_t id[16];
    int rc = kvq__random_bytes(id, sizeof(id));
    kvq_tuple_elem e[4] = { kvq_tuple_int(due), kvq_tuple_bytes(id, 16), kvq_tuple_int(prio),
                            kvq_tuple_int((int64_t)deliveries) };
    if (rc == 0)
        rc = key_of(tmp, &w->base_y, e, 4);
    if (rc == 0)
        rc = kvq_txn_set(txn, tmp->data, tmp->len, value.data, value.len);
    if (rc == 0)
        rc = counter_add(txn, &w->n_delayed, 1);
    return rc;
}

/* Pushes a value to the ready queue at a new key (the tail of a durable queue, the end of its
 * priority in a priority queue), with a delivery count. Never reads anything that conflicts. */
static int push_ready(
    kvq_workq *w, kvq_txn *txn, int64_t prio, uint32_t deliveries, kvq_bytes value, kvq_buf *tmp)
{
    kvq_queue *q = w->q;
    uint8_t d[4];
    kvq__le32_put(d, deliveries);
    /* An item delivered before comes back (a delayed nack falling due): a requeue. */
    int rc = deliveries > 0 ? counter_add(txn, &w->n_requeued, 1) : 0;
    if (rc != 0)
        return rc;
    if (q->type == KVQ_QUEUE_DURABLE) {
        uint16_t uv;
        rc = kvq_txn_next_user_version(&uv, txn);
        tmp->len = 0;
        if (rc == 0)
            rc = kvq__qk_durable_push(tmp, bytes_of(&q->prefix), uv);
        if (rc == 0)
            rc = kvq_txn_set_versionstamped_key(txn, tmp->data, tmp->len, value.data, value.len);
        if (rc == 0 && deliveries > 0) {
            /* The count key holds the same stamp: same user version, same commit. */
            tmp->len = 0;
            rc = kvq__qk_durable_push(tmp, bytes_of(&w->base_c), uv);
            if (rc == 0)
                rc = kvq_txn_set_versionstamped_key(txn, tmp->data, tmp->len, d, 4);
        }
        if (rc == 0)
            rc = counter_add(txn, &q->npush, 1);
        return rc;
    }
    /* The priority recipe: the last count of this priority by a snapshot read. */
    uint8_t rnd[KVQ__RAND_LEN];
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    rc = kvq__random_bytes(rnd, sizeof(rnd));
    if (rc == 0)
        rc = kvq__qk_prio_prefix(&lo, bytes_of(&q->prefix), prio);
    if (rc == 0)
        rc = kvq_buf_append(&hi, lo.data, lo.len);
    static const uint8_t z = 0, f = 0xff;
    if (rc == 0)
        rc = kvq_buf_append(&lo, &z, 1);
    if (rc == 0)
        rc = kvq_buf_append(&hi, &f, 1);
    const kvq_kv *kvs;
    size_t got = 0;
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo.data, lo.len, hi.data, hi.len, 1,
                               KVQ_SNAPSHOT | KVQ_REVERSE);
    int64_t count = 0;
    if (rc == 0 && got == 1) {
        int64_t p, last;
        rc = kvq__qk_parse_prio(kvs[0].key.data + q->prefix.len, kvs[0].key.len - q->prefix.len, &p,
                                &last);
        if (rc == 0 && last == INT64_MAX)
            rc = kvq__error(KVQ_ERANGE, "the priority's last count is the largest integer");
        if (rc == 0)
            count = last + 1;
    }
    tmp->len = 0;
    if (rc == 0)
        rc = kvq__qk_prio_item(tmp, bytes_of(&q->prefix), prio, count, rnd);
    if (rc == 0) {
        size_t plen = q->prefix.len;
        rc = kvq_txn_set(txn, tmp->data, tmp->len, value.data, value.len);
        if (rc == 0)
            rc = age_mark(w, txn, tmp->data + plen, tmp->len - plen, deliveries, -1);
    }
    if (rc == 0)
        rc = counter_add(txn, &w->n_ready, 1);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    return rc;
}

/* ---- push ---------------------------------------------------------------------------------- */

static int check_push(kvq_workq *w,
                      const uint8_t *value,
                      size_t len,
                      const kvq_workq_push_options *po,
                      kvq_workq_push_options *o)
{
    kvq_workq_push_options d = KVQ_WORKQ_PUSH_OPTIONS_INIT;
    if (po != NULL) {
        if (po->version != KVQ_WORKQ_PUSH_OPTIONS_VERSION)
            return kvq__error(KVQ_EINVAL, "push options version %u (expected %d)", po->version,
                              KVQ_WORKQ_PUSH_OPTIONS_VERSION);
        d = *po;
    }
    int rc = kvq__q_check_value(value, len);
    if (rc != 0)
        return rc;
    if (d.priority != 0 && w->q->type != KVQ_QUEUE_PRIORITY)
        return kvq__error(KVQ_EWRONGTYPE, "a priority was given for a durable queue");
    if (d.delay_ms < 0 || d.delay_ms > 366LL * 86400000 || d.not_before < 0)
        return kvq__error(KVQ_EINVAL, "delay of %lld ms or not_before %lld is out of range",
                          (long long)d.delay_ms, (long long)d.not_before);
    if (d.dedup_key == NULL && d.dedup_len != 0)
        return kvq__error(KVQ_EINVAL, "dedup key is NULL with a length of %zu", d.dedup_len);
    if (d.dedup_key != NULL && (d.dedup_len < 1 || d.dedup_len > MAX_DEDUP_KEY))
        return kvq__error(KVQ_EINVAL, "dedup key of %zu bytes (1 to %d allowed)", d.dedup_len,
                          MAX_DEDUP_KEY);
    *o = d;
    return 0;
}

/* The body shared by both push forms. push_id (16 bytes) identifies the push for dedup keys:
 * a retry that finds its own id in the dedup key knows that it was its own commit. */
static int push_body_any(kvq_workq *w,
                         kvq_txn *txn,
                         const uint8_t *value,
                         size_t len,
                         const kvq_workq_push_options *o,
                         const uint8_t *push_id,
                         int *enqueued)
{
    int64_t rv;
    int rc = kvq_txn_get_read_version(&rv, txn);
    if (rc != 0)
        return rc;
    *enqueued = 0;
    kvq_buf k = KVQ_BUF_INIT, k2 = KVQ_BUF_INIT;
    if (o->dedup_key != NULL) {
        kvq_tuple_elem e = kvq_tuple_bytes(o->dedup_key, o->dedup_len);
        rc = key_of(&k, &w->base_dd, &e, 1);
        kvq_bytes v;
        int present = 0;
        if (rc == 0)
            rc = kvq_txn_get(&v, &present, txn, k.data, k.len, 0);
        if (rc != 0)
            goto out;
        if (present && v.len >= 24) {
            int64_t at = (int64_t)kvq__le_get(v.data, 8);
            if (memcmp(v.data + 8, push_id, 16) == 0) {
                *enqueued = 1; /* this push's own earlier attempt committed */
                goto out;
            }
            if (rv - at < w->opts.dedup_window_ms * VPM)
                goto out; /* a duplicate within the window */
            kvq_tuple_elem e2[2] = { kvq_tuple_int(at), e };
            rc = key_of(&k2, &w->base_ddx, e2, 2);
            if (rc == 0)
                rc = kvq_txn_clear(txn, k2.data, k2.len);
        }
        uint8_t mv[24];
        kvq__le64_put(mv, (uint64_t)rv);
        memcpy(mv + 8, push_id, 16);
        if (rc == 0)
            rc = kvq_txn_set(txn, k.data, k.len, mv, sizeof(mv));
        kvq_tuple_elem e3[2] = { kvq_tuple_int(rv), e };
        if (rc == 0)
            rc = key_of(&k2, &w->base_ddx, e3, 2);
        if (rc == 0)
            rc = kvq_txn_set(txn, k2.data, k2.len, NULL, 0);
        if (rc != 0)
            goto out;
    }
    int64_t due = o->delay_ms > 0 ? rv + o->delay_ms * VPM : 0;
    if (o->not_before > due)
        due = o->not_before;
    kvq_bytes val = { value, len };
    if (due > rv)
        rc = put_delayed(w, txn, due, o->priority, 0, val, &k);
    else
        rc = push_ready(w, txn, o->priority, 0, val, &k);
    if (rc == 0)
        *enqueued = 1;
out:
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&k2);
    return rc;
}

int kvq_workq_push_txn(kvq_workq *w,
                       kvq_txn *txn,
                       const uint8_t *value,
                       size_t len,
                       const kvq_workq_push_options *po,
                       int *enqueued)
{
    kvq_workq_push_options o;
    int rc = check_w(w, txn, 1, "kvq_workq_push_txn");
    if (rc == 0)
        rc = check_push(w, value, len, po, &o);
    if (rc != 0)
        return rc;
    uint8_t id[16];
    rc = kvq__random_bytes(id, sizeof(id));
    int e = 0;
    if (rc == 0)
        rc = push_body_any(w, txn, value, len, &o, id, &e);
    if (enqueued != NULL)
        *enqueued = e;
    return rc;
}

typedef struct push_ctx {
    kvq_workq *w;
    const uint8_t *value;
    size_t len;
    kvq_workq_push_options o;
    kvq_queue_token tok;
    int enqueued;
} push_ctx;

static int run_idempotent(kvq_db *db, kvq_txn_fn body, void *ctx, int settled_done);

static int push_conv_body(kvq_txn *txn, void *arg)
{
    push_ctx *c = arg;
    if (c->o.dedup_key == NULL) {
        /* No dedup key: the queue's idempotency token makes a retry after 1021 a no-op. */
        int already = 0;
        int rc = kvq_queue_token_apply_txn(c->w->q, txn, &c->tok, &already);
        if (rc != 0)
            return rc;
        if (already) {
            c->enqueued = 1;
            return 0;
        }
    }
    return push_body_any(c->w, txn, c->value, c->len, &c->o, c->tok.id, &c->enqueued);
}

int kvq_workq_push(
    kvq_workq *w, const uint8_t *value, size_t len, const kvq_workq_push_options *po, int *enqueued)
{
    push_ctx c;
    memset(&c, 0, sizeof(c));
    int rc = check_w(w, NULL, 0, "kvq_workq_push");
    if (rc == 0)
        rc = check_push(w, value, len, po, &c.o);
    if (rc == 0)
        rc = kvq_queue_token_init(&c.tok);
    if (rc != 0)
        return rc;
    c.w = w;
    c.value = value;
    c.len = len;
    rc = run_idempotent(w->q->db, push_conv_body, &c, 0);
    if (enqueued != NULL)
        *enqueued = rc == 0 ? c.enqueued : 0;
    return rc;
}

/* ---- receive ------------------------------------------------------------------------------- */

static int lease_meta(kvq_buf *out,
                      int64_t deadline,
                      uint32_t deliv,
                      int64_t received,
                      const uint8_t *suffix,
                      size_t slen)
{
    uint8_t m[20];
    kvq__le64_put(m, (uint64_t)deadline);
    kvq__le32_put(m + 8, deliv);
    kvq__le64_put(m + 12, (uint64_t)received);
    out->len = 0;
    int rc = kvq_buf_append(out, m, sizeof(m));
    if (rc == 0)
        rc = kvq_buf_append(out, suffix, slen);
    return rc;
}

int kvq_workq_receive_txn(
    kvq_workq *w, kvq_txn *txn, kvq_bytes *out, kvq_workq_lease *lease, int64_t lease_ms)
{
    int rc = check_w(w, txn, 1, "kvq_workq_receive_txn");
    if (rc == 0 && (out == NULL || lease == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_workq_receive_txn: NULL out or lease");
    int64_t lv = 0, rv = 0;
    if (rc == 0)
        rc = lease_versions(w, lease_ms, &lv);
    if (rc == 0)
        rc = kvq_txn_get_read_version(&rv, txn);
    if (rc != 0)
        return rc;
    kvq_queue *q = w->q;
    kvq_buf k = KVQ_BUF_INIT, m = KVQ_BUF_INIT;
    /* Items already over their deliveries (max lowered since) go to the dead letters; a few
     * at most per receive. */
    for (int tries = 0; tries < 16; tries++) {
        const kvq_kv *kvs;
        size_t got;
        rc = kvq__q_head(q, txn, KVQ__END_MIN, 1, 0, &kvs, &got);
        if (rc != 0)
            break;
        if (got == 0) {
            rc = KVQ_ENOTFOUND;
            kvq__error(rc, "the work queue has no ready item");
            break;
        }
        kvq_bytes key = kvs[0].key, value = kvs[0].value;
        const uint8_t *suffix = key.data + q->prefix.len;
        size_t slen = key.len - q->prefix.len;
        kvq_bytes cv;
        int present = 0;
        rc = key_raw(&k, &w->base_c, suffix, slen);
        if (rc == 0)
            rc = kvq_txn_get(&cv, &present, txn, k.data, k.len, 0);
        if (rc != 0)
            break;
        uint32_t deliv = present ? (uint32_t)kvq__le_get(cv.data, cv.len < 4 ? cv.len : 4) : 0;
        int64_t since = present && cv.len >= 12 && q->type == KVQ_QUEUE_PRIORITY
                            ? (int64_t)kvq__le_get(cv.data + 4, 8)
                            : -1;
        if (present)
            rc = kvq_txn_clear(txn, k.data, k.len);
        if (rc == 0 && since >= 0)
            rc = age_key(&k, w, since, suffix, slen);
        if (rc == 0 && since >= 0)
            rc = kvq_txn_clear(txn, k.data, k.len);
        if (rc == 0)
            rc = kvq_txn_clear(txn, key.data, key.len);
        if (rc == 0)
            rc = ready_add(w, txn, -1);
        if (rc == 0)
            rc = counter_add(txn, &w->n_taken, 1);
        if (rc != 0)
            break;
        if (w->opts.max_deliveries > 0 && deliv >= w->opts.max_deliveries) {
            rc = to_dead(w, txn, suffix, slen, value, deliv, &k);
            if (rc != 0)
                break;
            continue;
        }
        deliv++;
        uint8_t id[16];
        rc = kvq__random_bytes(id, sizeof(id));
        int64_t deadline = rv + lv;
        if (rc == 0)
            rc = lease_meta(&m, deadline, deliv, rv, suffix, slen);
        if (rc == 0)
            rc = id_key(&k, &w->base_l, id);
        if (rc == 0)
            rc = kvq_txn_set(txn, k.data, k.len, m.data, m.len);
        if (rc == 0)
            rc = id_key(&k, &w->base_v, id);
        if (rc == 0)
            rc = kvq_txn_set(txn, k.data, k.len, value.data, value.len);
        if (rc == 0)
            rc = x_key(&k, w, deadline, id);
        if (rc == 0)
            rc = kvq_txn_set(txn, k.data, k.len, NULL, 0);
        if (rc == 0)
            rc = counter_add(txn, &w->n_inflight, 1);
        if (rc == 0)
            rc = counter_add(txn, &w->n_received, 1);
        if (rc == 0 && since >= 0) {
            uint8_t sv[8];
            kvq__le64_put(sv, (uint64_t)since);
            rc = id_key(&k, &w->base_t, id);
            if (rc == 0)
                rc = kvq_txn_set(txn, k.data, k.len, sv, sizeof(sv));
        }
        if (rc == 0) {
            memcpy(lease->id, id, 16);
            lease->received = rv;
            lease->deadline = deadline;
            lease->deliveries = deliv;
            lease->priority = kvq__q_key_priority(q, key.data, key.len);
            *out = value;
        }
        break;
    }
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&m);
    return rc;
}

typedef struct recv_ctx {
    kvq_workq *w;
    kvq_buf *out;
    kvq_workq_lease *lease;
    int64_t lease_ms;
} recv_ctx;

static int recv_body(kvq_txn *txn, void *arg)
{
    recv_ctx *c = arg;
    kvq_bytes v;
    int rc = kvq_workq_receive_txn(c->w, txn, &v, c->lease, c->lease_ms);
    if (rc == 0 && kvq__buf_set(c->out, v.data, v.len) != 0)
        rc = kvq__error(KVQ_ENOMEM, "out of memory copying a received value");
    return rc;
}

static int recover_pass(kvq_workq *w, kvq_txn *txn, uint64_t *moved, int *more);

/* Whether an expired lease or a due delayed item waits (snapshot reads at txn's version). */
static int upkeep_due(kvq_workq *w, kvq_txn *txn, int *due)
{
    int64_t rv;
    int rc = kvq_txn_get_read_version(&rv, txn);
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    const kvq_buf *bases[2] = { &w->base_x, &w->base_y };
    *due = 0;
    for (int i = 0; rc == 0 && i < 2 && !*due; i++) {
        kvq_tuple_elem e = kvq_tuple_int(i == 0 ? expiry_bound(w, rv) : rv);
        rc = range_of(&lo, &hi, bases[i]);
        if (rc == 0)
            rc = key_of(&hi, bases[i], &e, 1);
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

int kvq_workq_receive(kvq_workq *w, kvq_buf *out, kvq_workq_lease *lease, int64_t lease_ms)
{
    int rc = check_w(w, NULL, 0, "kvq_workq_receive");
    if (rc == 0 && (out == NULL || lease == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_workq_receive: NULL out or lease");
    int64_t lv;
    if (rc == 0)
        rc = lease_versions(w, lease_ms, &lv);
    if (rc != 0)
        return rc;
    /* Lazy upkeep: one pass when something is due (a read-only check otherwise). */
    pass_ctx p = { w, 0, 0, 1 };
    rc = kvq_db_transact(w->q->db, pass_body, &p);
    if (rc != 0)
        return rc;
    recv_ctx c = { w, out, lease, lease_ms };
    return kvq_db_transact(w->q->db, recv_body, &c);
}

int kvq_testing_workq_flags(kvq_workq *w, unsigned int flags)
{
    if (w == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_testing_workq_flags: w is NULL");
    if ((flags & ~(unsigned int)KVQ_WORKQ_TEST_IGNORE_LEASES) != 0)
        return kvq__error(KVQ_EINVAL, "kvq_testing_workq_flags: unknown flags 0x%x", flags);
    w->test_flags = flags;
    return 0;
}

int64_t kvq__workq_lease_ms(const kvq_workq *w)
{
    return w->opts.lease_ms;
}

/* ---- waiting for an item ------------------------------------------------------------------- */

/* A long poll looks (a receive), arms watches, looks again, and then sleeps until the earliest
 * of its deadline, the due time of the first delayed item and the end of the first lease (an
 * ended lease gives its item back), or until one of these keys changes:
 *
 *   the ready counter   every push and every return to the queue: npush of a durable queue;
 *                       n_ready of a priority queue (what this API makes ready)
 *   n_delayed           a delayed push or a nack with a delay: perhaps an earlier due time
 *   n_inflight          a receive: a new lease, perhaps ending before the others
 *   tick                an extend that shortens a lease (and kvq_workq_recover)
 *
 * The due time and the lease end are read with snapshot reads (no conflicts) in the transaction
 * that arms the watches, and measured from its read version, so that anything that moves them
 * after that version fires a watch and the waiter works them out again. There is no periodic
 * slice: an idle waiter sleeps until its deadline. Only when a watch cannot be had (too many
 * watches, or one failed) or a helper thread cannot be started does it look every
 * WAIT_SLICE_MS, as a safe fallback. */
#define WAIT_SLICE_MS 200
#define N_WAIT_KEYS   4
/* A plain kvq_queue_push_prio moves no counter a waiter can watch: on a priority queue the
 * waiter also looks this often, so that such an item is received within it (not at the end of a
 * long wait). Durable queues need no such look: every push moves npush. */
#define PRIO_PLAIN_LOOK_MS 1000
/* Something was due and yet nothing was received (another waiter took it): sleep at least this
 * much before looking again, doubling up to WAIT_BACKOFF_MAX_MS while it lasts. */
#define WAIT_BACKOFF_MAX_MS 100

int kvq__wq_waker_init(kvq__wq_waker *k)
{
    memset(k, 0, sizeof(*k));
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return kvq__error(KVQ_ENOMEM, "out of memory for a waiter");
    int err = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (err == 0)
        err = pthread_cond_init(&k->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (err != 0)
        return kvq__error(KVQ_ENOMEM, "out of memory for a waiter");
    if (pthread_mutex_init(&k->mu, NULL) != 0) {
        pthread_cond_destroy(&k->cond);
        return kvq__error(KVQ_ENOMEM, "out of memory for a waiter");
    }
    return 0;
}

void kvq__wq_waker_destroy(kvq__wq_waker *k)
{
    pthread_cond_destroy(&k->cond);
    pthread_mutex_destroy(&k->mu);
}

void kvq__wq_waker_stop(kvq__wq_waker *k)
{
    pthread_mutex_lock(&k->mu);
    k->stop = 1;
    pthread_cond_broadcast(&k->cond);
    pthread_mutex_unlock(&k->mu);
}

static int waker_stopped(kvq__wq_waker *k)
{
    if (k == NULL)
        return 0;
    pthread_mutex_lock(&k->mu);
    int s = k->stop;
    pthread_mutex_unlock(&k->mu);
    return s;
}

typedef struct arm_ctx {
    kvq_workq *w;
    kvq_watch *watch[N_WAIT_KEYS];
    int64_t rv;      /* the arming transaction's read version */
    int64_t mono_us; /* the monotonic clock just after rv was taken */
    int64_t next;    /* the first due time or lease end (versions; INT64_MAX: none) */
} arm_ctx;

static void arm_release(arm_ctx *c)
{
    for (int i = 0; i < N_WAIT_KEYS; i++) {
        kvq_watch_destroy(c->watch[i]);
        c->watch[i] = NULL;
    }
}

/* The time (first tuple element) of the first key of an index, or INT64_MAX when it is empty. */
static int first_time(kvq_txn *txn, const kvq_buf *base, kvq_buf *lo, kvq_buf *hi, int64_t *out)
{
    *out = INT64_MAX;
    const kvq_kv *kvs;
    size_t got = 0;
    int rc = range_of(lo, hi, base);
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo->data, lo->len, hi->data, hi->len, 1,
                               KVQ_SNAPSHOT);
    if (rc != 0 || got == 0)
        return rc;
    kvq_tuple *t = NULL;
    rc = kvq_tuple_unpack(&t, kvs[0].key.data + base->len, kvs[0].key.len - base->len);
    if (rc != 0 || kvq_tuple_count(t) < 2 || kvq_tuple_at(t, 0)->type != KVQ_TUPLE_INT)
        rc = kvq__error(KVQ_EDAMAGED, "a malformed delayed-item or lease-expiry key");
    else
        *out = kvq_tuple_at(t, 0)->v.i;
    kvq_tuple_free(t);
    return rc;
}

/* Arms the watches and reads, at the same read version, when the next item falls due. */
static int arm_body(kvq_txn *txn, void *arg)
{
    arm_ctx *c = arg;
    kvq_workq *w = c->w;
    arm_release(c); /* an earlier attempt's */
    const kvq_buf *keys[N_WAIT_KEYS] = {
        w->q->type == KVQ_QUEUE_DURABLE ? &w->q->npush : &w->n_ready, &w->n_delayed,
        &w->n_inflight, &w->tick
    };
    int rc = kvq_txn_get_read_version(&c->rv, txn);
    c->mono_us = kvq__mono_us();
    for (int i = 0; rc == 0 && i < N_WAIT_KEYS; i++)
        rc = kvq_txn_watch(&c->watch[i], txn, keys[i]->data, keys[i]->len);
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    int64_t due = INT64_MAX, ends = INT64_MAX;
    if (rc == 0)
        rc = first_time(txn, &w->base_y, &lo, &hi, &due);
    if (rc == 0)
        rc = first_time(txn, &w->base_x, &lo, &hi, &ends);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    if (ends != INT64_MAX && expiry_bound(w, c->rv) == INT64_MAX)
        ends = c->rv; /* test knob: upkeep returns every lease at once */
    c->next = due < ends ? due : ends;
    return rc;
}

typedef struct wait_helper {
    kvq_watch *watch;
    kvq__wq_waker *k;
    pthread_t thread;
} wait_helper;

/* Waits on one watch and tells the waker; a cancel (the sleep is over) tells nothing. */
static void *helper_main(void *arg)
{
    wait_helper *h = arg;
    int rc = kvq_watch_wait(h->watch, -1);
    pthread_mutex_lock(&h->k->mu);
    if (rc == 0)
        h->k->fired = 1;
    else if (rc != KVQ_EWATCH_CANCELLED)
        h->k->failed = 1;
    pthread_cond_broadcast(&h->k->cond);
    pthread_mutex_unlock(&h->k->mu);
    return NULL;
}

/* Sleeps until until_us (monotonic), a watch fires or the waker is stopped; without all its
 * watches (or once one failed) at most WAIT_SLICE_MS. kvq_watch_wait waits on one watch, so
 * each watch gets a helper thread for the sleep; they end before this returns. */
static void sleep_on(kvq__wq_waker *k, kvq_watch *const *watch, int64_t until_us)
{
    wait_helper h[N_WAIT_KEYS];
    int started = 0;
    pthread_mutex_lock(&k->mu);
    k->fired = 0;
    k->failed = 0;
    pthread_mutex_unlock(&k->mu);
    for (int i = 0; i < N_WAIT_KEYS && watch[i] != NULL; i++) {
        h[i].watch = watch[i];
        h[i].k = k;
        if (pthread_create(&h[i].thread, NULL, helper_main, &h[i]) != 0)
            break;
        started++;
    }
    int64_t slice_end = kvq__mono_us() + WAIT_SLICE_MS * 1000;
    pthread_mutex_lock(&k->mu);
    for (;;) {
        int64_t end = until_us;
        if ((started < N_WAIT_KEYS || k->failed) && slice_end < end)
            end = slice_end;
        if (k->stop || k->fired || kvq__mono_us() >= end)
            break;
        struct timespec ts = { (time_t)(end / 1000000), (long)(end % 1000000) * 1000 };
        (void)pthread_cond_timedwait(&k->cond, &k->mu, &ts);
    }
    pthread_mutex_unlock(&k->mu);
    for (int i = 0; i < started; i++)
        kvq_watch_cancel(h[i].watch);
    for (int i = 0; i < started; i++)
        pthread_join(h[i].thread, NULL);
}

/* One look: kvq_workq_receive, counted for the tests. */
static int look(kvq_workq *w, kvq_buf *out, kvq_workq_lease *lease, int64_t lease_ms)
{
    __atomic_add_fetch(&w->wait_looks, 1, __ATOMIC_RELAXED);
    return kvq_workq_receive(w, out, lease, lease_ms);
}

int kvq__workq_receive_wait(kvq_workq *w,
                            kvq_buf *out,
                            kvq_workq_lease *lease,
                            int64_t lease_ms,
                            int64_t wait_ms,
                            kvq__wq_waker *waker)
{
    int64_t deadline = kvq__mono_us() + wait_ms * 1000;
    int rc = look(w, out, lease, lease_ms);
    if (rc != KVQ_ENOTFOUND || wait_ms == 0 || waker_stopped(waker))
        return rc;
    kvq__wq_waker local;
    if (waker == NULL) {
        int lrc = kvq__wq_waker_init(&local);
        if (lrc != 0)
            return lrc;
    }
    kvq__wq_waker *k = waker != NULL ? waker : &local;
    arm_ctx c;
    memset(&c, 0, sizeof(c));
    c.w = w;
    int64_t backoff_ms = 0;
    for (;;) {
        /* Armed before the second look, so that nothing made ready after it goes unnoticed. */
        int arc = kvq_db_transact(w->q->db, arm_body, &c);
        if (arc != 0) {
            arm_release(&c); /* then sleep_on looks every WAIT_SLICE_MS */
            if (arc != KVQ_ETOO_MANY_WATCHES) {
                rc = arc;
                break;
            }
        }
        rc = look(w, out, lease, lease_ms);
        int64_t now = kvq__mono_us();
        if (rc != KVQ_ENOTFOUND || now >= deadline)
            break;
        int64_t until = deadline;
        if (arc == 0 && c.next != INT64_MAX) {
            int64_t dv = c.next - c.rv; /* versions until the next item falls due */
            if (dv <= 0) {
                /* Due, yet not received: another waiter was first. Not a busy loop. */
                backoff_ms = backoff_ms == 0 ? 1 : backoff_ms * 2;
                if (backoff_ms > WAIT_BACKOFF_MAX_MS)
                    backoff_ms = WAIT_BACKOFF_MAX_MS;
                dv = backoff_ms * VPM;
            } else {
                backoff_ms = 0;
            }
            /* Upkeep moves an item once its time is below the read version: a millisecond
             * later, the item is due for certain. */
            if (dv / VPM < (deadline - c.mono_us) / 1000)
                until = c.mono_us + (dv / VPM + 1) * 1000;
        }
        if (w->q->type == KVQ_QUEUE_PRIORITY && until > now + PRIO_PLAIN_LOOK_MS * 1000)
            until = now + PRIO_PLAIN_LOOK_MS * 1000;
        sleep_on(k, c.watch, until);
        arm_release(&c);
        __atomic_add_fetch(&w->wait_sleeps, 1, __ATOMIC_RELAXED);
        if (waker_stopped(k)) {
            rc = KVQ_ENOTFOUND;
            kvq__error(rc, "the wait was stopped with nothing ready");
            break;
        }
        if (kvq__mono_us() >= deadline) {
            rc = look(w, out, lease, lease_ms); /* the last look, at the deadline */
            break;
        }
    }
    arm_release(&c);
    if (waker == NULL)
        kvq__wq_waker_destroy(&local);
    return rc;
}

int kvq_testing_workq_wait_counts(kvq_workq *w, uint64_t *looks, uint64_t *sleeps)
{
    if (w == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_testing_workq_wait_counts: w is NULL");
    if (looks != NULL)
        *looks = __atomic_load_n(&w->wait_looks, __ATOMIC_RELAXED);
    if (sleeps != NULL)
        *sleeps = __atomic_load_n(&w->wait_sleeps, __ATOMIC_RELAXED);
    return 0;
}

int kvq_workq_receive_wait(
    kvq_workq *w, kvq_buf *out, kvq_workq_lease *lease, int64_t lease_ms, int64_t wait_ms)
{
    int rc = check_w(w, NULL, 0, "kvq_workq_receive_wait");
    if (rc == 0 && (out == NULL || lease == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_workq_receive_wait: NULL out or lease");
    if (rc == 0 && (wait_ms < 0 || wait_ms > 86400000))
        rc = kvq__error(KVQ_EINVAL, "kvq_workq_receive_wait: a wait of %lld ms is out of range "
                                    "(0 to 1 day)",
                        (long long)wait_ms);
    if (rc != 0)
        return rc;
    return kvq__workq_receive_wait(w, out, lease, lease_ms, wait_ms, NULL);
}

/* ---- settle: ack, nack, extend ------------------------------------------------------------- */

enum { SETTLE_ACK, SETTLE_NACK, SETTLE_EXTEND };

static int settle_txn(kvq_workq *w, kvq_txn *txn, kvq_workq_lease *lease, int kind, int64_t arg)
{
    int64_t rv;
    int rc = kvq_txn_get_read_version(&rv, txn);
    if (rc != 0)
        return rc;
    kvq_buf k = KVQ_BUF_INIT, m = KVQ_BUF_INIT;
    kvq_bytes lv;
    int present = 0;
    rc = id_key(&k, &w->base_l, lease->id);
    if (rc == 0)
        rc = kvq_txn_get(&lv, &present, txn, k.data, k.len, 0);
    if (rc != 0)
        goto out;
    if (!present || lv.len < 20) {
        /* Either settled (its marker says so) or expired and given back. */
        kvq_bytes sv;
        int settled = 0;
        rc = s_key(&k, w, lease->received, lease->id);
        if (rc == 0)
            rc = kvq_txn_get(&sv, &settled, txn, k.data, k.len, 0);
        if (rc == 0)
            rc = settled ? kvq__error(KVQ_ELEASE_SETTLED, "the lease was already %s",
                                      sv.len > 0 && sv.data[0] == OUT_NACK ? "nacked" : "acked")
                         : kvq__error(KVQ_ELEASE_EXPIRED,
                                      "the lease expired and its item went back to the queue");
        goto out;
    }
    int64_t deadline = (int64_t)kvq__le_get(lv.data, 8);
    uint32_t deliv = (uint32_t)kvq__le_get(lv.data + 8, 4);
    int64_t received = (int64_t)kvq__le_get(lv.data + 12, 8);
    const uint8_t *suffix = lv.data + 20;
    size_t slen = lv.len - 20;
    if (rv >= deadline) {
        rc = kvq__error(KVQ_ELEASE_EXPIRED,
                        "the lease ended %lld ms ago (at version %lld); nothing was changed",
                        (long long)((rv - deadline) / VPM), (long long)deadline);
        goto out;
    }
    /* Copy what the lease record holds before writing (borrowed memory). */
    rc = kvq_buf_append(&m, lv.data, lv.len);
    if (rc != 0)
        goto out;
    suffix = m.data + 20;
    if (kind == SETTLE_EXTEND) {
        int64_t nd = rv + arg;
        rc = x_key(&k, w, deadline, lease->id);
        if (rc == 0)
            rc = kvq_txn_clear(txn, k.data, k.len);
        if (rc == 0)
            rc = x_key(&k, w, nd, lease->id);
        if (rc == 0)
            rc = kvq_txn_set(txn, k.data, k.len, NULL, 0);
        /* A lease that now ends earlier may be the first to end: wake the long polls, which
         * sleep until the first lease ends (they watch tick). */
        if (rc == 0 && nd < deadline)
            rc = counter_add(txn, &w->tick, 1);
        kvq__le64_put(m.data, (uint64_t)nd);
        if (rc == 0)
            rc = id_key(&k, &w->base_l, lease->id);
        if (rc == 0)
            rc = kvq_txn_set(txn, k.data, k.len, m.data, m.len);
        if (rc == 0)
            lease->deadline = nd;
        goto out;
    }
    kvq_buf val = KVQ_BUF_INIT;
    if (kind == SETTLE_NACK) {
        kvq_bytes vv;
        int vp = 0;
        rc = id_key(&k, &w->base_v, lease->id);
        if (rc == 0)
            rc = kvq_txn_get(&vv, &vp, txn, k.data, k.len, 0);
        if (rc == 0 && !vp)
            rc = kvq__error(KVQ_EDAMAGED, "a lease record has no value");
        if (rc == 0)
            rc = kvq__buf_set(&val, vv.data, vv.len);
    }
    /* Clear the lease, write the settled marker. */
    if (rc == 0)
        rc = id_key(&k, &w->base_l, lease->id);
    if (rc == 0)
        rc = kvq_txn_clear(txn, k.data, k.len);
    if (rc == 0)
        rc = id_key(&k, &w->base_v, lease->id);
    if (rc == 0)
        rc = kvq_txn_clear(txn, k.data, k.len);
    if (rc == 0)
        rc = x_key(&k, w, deadline, lease->id);
    if (rc == 0)
        rc = kvq_txn_clear(txn, k.data, k.len);
    int64_t since = -1;
    if (rc == 0)
        rc = age_take(w, txn, lease->id, &since);
    uint8_t outcome = kind == SETTLE_ACK ? OUT_ACK : OUT_NACK;
    if (rc == 0)
        rc = s_key(&k, w, received, lease->id);
    if (rc == 0)
        rc = kvq_txn_set(txn, k.data, k.len, &outcome, 1);
    if (rc == 0)
        rc = counter_add(txn, &w->n_inflight, -1);
    if (rc == 0 && kind == SETTLE_ACK)
        rc = counter_add(txn, &w->n_acked, 1);
    if (rc == 0 && kind == SETTLE_NACK) {
        kvq_bytes v = { val.data, val.len };
        if (w->opts.max_deliveries > 0 && deliv >= w->opts.max_deliveries)
            rc = to_dead(w, txn, suffix, slen, v, deliv, &k);
        else if (arg > 0) {
            rc = key_raw(&k, &w->q->prefix, suffix, slen);
            int64_t prio = rc == 0 ? kvq__q_key_priority(w->q, k.data, k.len) : 0;
            if (rc == 0)
                rc = put_delayed(w, txn, rv + arg, prio, deliv, v, &k);
        } else
            rc = to_ready(w, txn, suffix, slen, v, deliv, since, &k);
    }
    kvq_buf_dispose(&val);
out:
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&m);
    return rc;
}

static int
check_settle(kvq_workq *w, kvq_txn *txn, int need_txn, kvq_workq_lease *lease, const char *fn)
{
    int rc = check_w(w, txn, need_txn, fn);
    if (rc == 0 && lease == NULL)
        rc = kvq__error(KVQ_EINVAL, "%s: lease is NULL", fn);
    return rc;
}

int kvq_workq_ack_txn(kvq_workq *w, kvq_txn *txn, kvq_workq_lease *lease)
{
    int rc = check_settle(w, txn, 1, lease, "kvq_workq_ack_txn");
    return rc != 0 ? rc : settle_txn(w, txn, lease, SETTLE_ACK, 0);
}

int kvq_workq_nack_txn(kvq_workq *w, kvq_txn *txn, kvq_workq_lease *lease, int64_t delay_ms)
{
    int rc = check_settle(w, txn, 1, lease, "kvq_workq_nack_txn");
    if (rc == 0 && (delay_ms < 0 || delay_ms > 366LL * 86400000))
        rc = kvq__error(KVQ_EINVAL, "nack delay of %lld ms is out of range", (long long)delay_ms);
    return rc != 0 ? rc : settle_txn(w, txn, lease, SETTLE_NACK, delay_ms * VPM);
}

int kvq_workq_extend_txn(kvq_workq *w, kvq_txn *txn, kvq_workq_lease *lease, int64_t lease_ms)
{
    int rc = check_settle(w, txn, 1, lease, "kvq_workq_extend_txn");
    int64_t lv = 0;
    if (rc == 0)
        rc = lease_versions(w, lease_ms, &lv);
    return rc != 0 ? rc : settle_txn(w, txn, lease, SETTLE_EXTEND, lv);
}

typedef struct settle_ctx {
    kvq_workq *w;
    kvq_workq_lease lease;
    int kind;
    int64_t arg;
} settle_ctx;

static int settle_body(kvq_txn *txn, void *arg)
{
    settle_ctx *c = arg;
    return settle_txn(c->w, txn, &c->lease, c->kind, c->arg);
}

/* The retry loop of the idempotent convenience forms: kvq_txn_run's, where after an attempt
 * that may have committed a retry tells what happened (a push's token is applied; a settle finds
 * the lease settled: KVQ_ELEASE_SETTLED, which then means done when settled_done is set). When
 * time runs out with the outcome unknown, one more attempt with a fresh budget settles it: it
 * reads and writes keys each earlier attempt read, so none still in flight can commit after it. */
static int run_idempotent(kvq_db *db, kvq_txn_fn body, void *ctx, int settled_done)
{
    kvq_txn *txn;
    int rc = kvq_txn_create(&txn, db);
    if (rc != 0)
        return rc;
    int maybe = 0, last_try = 0;
    for (;;) {
        rc = body(txn, ctx);
        if (rc == 0)
            rc = kvq_txn_commit(txn);
        if (rc == 0)
            break;
        if (maybe && rc == KVQ_ELEASE_SETTLED && settled_done) {
            rc = 0;
            break;
        }
        if (kvq__txn_maybe_committed(txn, rc))
            maybe = 1;
        int rc2 = kvq_txn_on_error(txn, rc);
        if (rc2 == KVQ_ETRANSACTION_TIMED_OUT && maybe && !last_try) {
            last_try = 1;
            kvq_txn_reset(txn);
            continue;
        }
        if (rc2 != 0) {
            rc = rc2;
            if (maybe && rc2 == KVQ_ETRANSACTION_TIMED_OUT)
                rc = kvq__error(KVQ_ECOMMIT_UNKNOWN_RESULT,
                                "an attempt may have committed, and the attempt that would tell "
                                "ran out of time too");
            break;
        }
    }
    kvq_txn_destroy(txn);
    return rc;
}

static int settle_conv(kvq_workq *w, kvq_workq_lease *lease, int kind, int64_t arg)
{
    settle_ctx c = { w, *lease, kind, arg };
    int rc = run_idempotent(w->q->db, settle_body, &c, kind != SETTLE_EXTEND);
    if (rc == 0)
        lease->deadline = c.lease.deadline;
    return rc;
}

int kvq_workq_ack(kvq_workq *w, kvq_workq_lease *lease)
{
    int rc = check_settle(w, NULL, 0, lease, "kvq_workq_ack");
    return rc != 0 ? rc : settle_conv(w, lease, SETTLE_ACK, 0);
}

int kvq_workq_nack(kvq_workq *w, kvq_workq_lease *lease, int64_t delay_ms)
{
    int rc = check_settle(w, NULL, 0, lease, "kvq_workq_nack");
    if (rc == 0 && (delay_ms < 0 || delay_ms > 366LL * 86400000))
        rc = kvq__error(KVQ_EINVAL, "nack delay of %lld ms is out of range", (long long)delay_ms);
    return rc != 0 ? rc : settle_conv(w, lease, SETTLE_NACK, delay_ms * VPM);
}

int kvq_workq_extend(kvq_workq *w, kvq_workq_lease *lease, int64_t lease_ms)
{
    int rc = check_settle(w, NULL, 0, lease, "kvq_workq_extend");
    int64_t lv = 0;
    if (rc == 0)
        rc = lease_versions(w, lease_ms, &lv);
    return rc != 0 ? rc : settle_conv(w, lease, SETTLE_EXTEND, lv);
}

/* ---- recovery ------------------------------------------------------------------------------ */

/* One upkeep transaction: up to BATCH expired leases back, up to BATCH due delayed items ready,
 * old markers pruned. *more = 1 when a batch was full. Expired leases are handled first: the
 * durable promotions write versionstamped keys, after which the item range is unreadable. */
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
    kvq_tuple_elem ex = kvq_tuple_int(expiry_bound(w, rv));
    /* Expired leases: the range read (not snapshot) makes two recoverers of one lease conflict,
     * and an ack that commits meanwhile (it cannot: the lease has expired) would too. */
    rc = range_of(&lo, &hi, &w->base_x);
    if (rc == 0)
        rc = key_of(&hi, &w->base_x, &ex, 1);
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo.data, lo.len, hi.data, hi.len, BATCH, 0);
    if (rc == 0 && got == BATCH)
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
            kvq_tuple_at(t, 1)->v.bytes.len != 16) {
            rc = kvq__error(KVQ_EDAMAGED, "a malformed lease expiry key");
            break;
        }
        uint8_t id[16];
        memcpy(id, kvq_tuple_at(t, 1)->v.bytes.data, 16);
        kvq_tuple_free(t);
        t = NULL;
        rc = kvq_txn_clear(txn, xk, xl);
        kvq_bytes lv, vv;
        int lp = 0, vp = 0;
        if (rc == 0)
            rc = id_key(&k, &w->base_l, id);
        if (rc == 0)
            rc = kvq_txn_get(&lv, &lp, txn, k.data, k.len, 0);
        if (rc == 0 && lp)
            rc = kvq__buf_set(&m, lv.data, lv.len);
        if (rc == 0 && lp)
            rc = kvq_txn_clear(txn, k.data, k.len);
        if (rc == 0)
            rc = id_key(&k, &w->base_v, id);
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
        rc = age_take(w, txn, id, &since);
        if (rc == 0)
            rc = counter_add(txn, &w->n_inflight, -1);
        if (rc == 0)
            rc = give_back(w, txn, m.data + 20, m.len - 20, val, deliv, since, &k, NULL);
        if (rc == 0)
            (*moved)++;
    }
    kvq__free(xoff);
    kvq_buf_dispose(&xkeys);
    /* Due delayed items. */
    if (rc == 0)
        rc = range_of(&lo, &hi, &w->base_y);
    if (rc == 0)
        rc = key_of(&hi, &w->base_y, &e, 1);
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo.data, lo.len, hi.data, hi.len, BATCH, 0);
    if (rc == 0 && got == BATCH)
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
        kvq_tuple_free(t);
        t = NULL;
        rc = kvq_txn_clear(txn, kvs[i].key.data, kvs[i].key.len);
        if (rc == 0)
            rc = counter_add(txn, &w->n_delayed, -1);
        if (rc == 0)
            rc = push_ready(w, txn, prio, deliv, kvs[i].value, &k);
        if (rc == 0)
            (*moved)++;
    }
    /* Prune age index entries left by plain pops, settled markers and dedup keys. */
    if (rc == 0 && w->q->type == KVQ_QUEUE_PRIORITY) {
        int64_t since;
        rc = age_head(w, txn, 1, &since);
    }
    if (rc == 0) {
        int64_t cut = rv / KVQ__BUCKET_VERSIONS - SETTLED_WINDOW_BUCKETS;
        kvq_tuple_elem ce = kvq_tuple_int(cut);
        if (cut > 0) {
            rc = range_of(&lo, &hi, &w->base_s);
            if (rc == 0)
                rc = key_of(&hi, &w->base_s, &ce, 1);
            if (rc == 0)
                rc = kvq_txn_clear_range(txn, lo.data, lo.len, hi.data, hi.len);
        }
    }
    if (rc == 0) {
        kvq_tuple_elem de = kvq_tuple_int(rv - w->opts.dedup_window_ms * VPM);
        rc = range_of(&lo, &hi, &w->base_ddx);
        if (rc == 0)
            rc = key_of(&hi, &w->base_ddx, &de, 1);
        if (rc == 0)
            rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo.data, lo.len, hi.data, hi.len, BATCH,
                                   KVQ_SNAPSHOT);
        for (size_t i = 0; rc == 0 && i < got; i++) {
            rc = kvq_tuple_unpack(&t, kvs[i].key.data + w->base_ddx.len,
                                  kvs[i].key.len - w->base_ddx.len);
            if (rc != 0 || kvq_tuple_count(t) != 2 || kvq_tuple_at(t, 1)->type != KVQ_TUPLE_BYTES) {
                rc = kvq__error(KVQ_EDAMAGED, "a malformed dedup index key");
                break;
            }
            int64_t at = kvq_tuple_at(t, 0)->v.i;
            kvq_tuple_elem de2 = *kvq_tuple_at(t, 1);
            rc = key_of(&k, &w->base_dd, &de2, 1);
            kvq_tuple_free(t);
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
    kvq_tuple_free(t);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&m);
    kvq_buf_dispose(&v);
    return rc;
}

static int tick_body(kvq_txn *txn, void *arg)
{
    kvq_workq *w = arg;
    return counter_add(txn, &w->tick, 1);
}

int kvq_workq_recover(kvq_workq *w, uint64_t *moved)
{
    int rc = check_w(w, NULL, 0, "kvq_workq_recover");
    if (rc != 0)
        return rc;
    if (moved != NULL)
        *moved = 0;
    /* A tiny commit, so that the read versions below are the present on every engine. */
    rc = kvq_db_transact(w->q->db, tick_body, w);
    pass_ctx p = { w, 0, 1, 0 };
    while (rc == 0 && p.more) {
        rc = kvq_db_transact(w->q->db, pass_body, &p);
        if (rc == 0 && moved != NULL)
            *moved += p.moved;
    }
    return rc;
}

/* ---- dead letters -------------------------------------------------------------------------- */

typedef struct dlq_page {
    kvq_workq *w;
    kvq_buf after; /* continue after this key (empty: from the start) */
    kvq_buf vals[BATCH];
    uint32_t deliv[BATCH];
    size_t n;
    int more;
} dlq_page;

/* One page of snapshot reads of the range [base + 00, base + FF), after the key `after` when it
 * is not empty: up to BATCH rows into *kvs (valid until the next read of txn). */
static int read_page(kvq_txn *txn, const kvq_buf *base, const kvq_buf *after, const kvq_kv **kvs,
                     size_t *got, int *more)
{
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    int rc = range_of(&lo, &hi, base);
    if (rc == 0 && after->len > 0)
        rc = kvq__key_after(&lo, after->data, after->len);
    *got = 0;
    *more = 0;
    if (rc == 0)
        rc = kvq_txn_get_range(kvs, got, more, txn, lo.data, lo.len, hi.data, hi.len, BATCH,
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
    int rc = read_page(txn, &w->base_dlq, &p->after, &kvs, &got, &p->more);
    for (size_t i = 0; rc == 0 && i < got; i++) {
        rc = kvq__buf_set(&p->vals[i], kvs[i].value.data, kvs[i].value.len);
        kvq_bytes cv;
        int cp = 0;
        size_t plen = w->base_dlq.len;
        if (rc == 0)
            rc = key_raw(&k, &w->base_c, kvs[i].key.data + plen, kvs[i].key.len - plen);
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
    int rc = check_w(w, NULL, 0, "kvq_workq_dlq_list");
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
    for (size_t i = 0; i < BATCH; i++)
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
    kvq_buf vals[BATCH];
    kvq_workq_item info[BATCH];
    size_t n;
    int more;
} item_page;

/* One in-flight item from its expiry-index key: its lease record and value (snapshot reads).
 * *found is 0 when the lease was settled meanwhile. */
static int inflight_item(kvq_workq *w, kvq_txn *txn, kvq_bytes xkey, int64_t rv, kvq_buf *val,
                         kvq_workq_item *it, int *found, kvq_buf *k)
{
    *found = 0;
    kvq_tuple *t = NULL;
    int rc = kvq_tuple_unpack(&t, xkey.data + w->base_x.len, xkey.len - w->base_x.len);
    if (rc != 0 || kvq_tuple_count(t) != 2 || kvq_tuple_at(t, 1)->type != KVQ_TUPLE_BYTES ||
        kvq_tuple_at(t, 1)->v.bytes.len != 16) {
        kvq_tuple_free(t);
        return kvq__error(KVQ_EDAMAGED, "a malformed lease-expiry key");
    }
    memset(it, 0, sizeof(*it));
    memcpy(it->lease.id, kvq_tuple_at(t, 1)->v.bytes.data, 16);
    kvq_tuple_free(t);
    kvq_bytes m, v;
    int pm = 0, pv = 0;
    rc = id_key(k, &w->base_l, it->lease.id);
    if (rc == 0)
        rc = kvq_txn_get(&m, &pm, txn, k->data, k->len, KVQ_SNAPSHOT);
    if (rc == 0 && pm)
        rc = id_key(k, &w->base_v, it->lease.id);
    if (rc == 0 && pm)
        rc = kvq_txn_get(&v, &pv, txn, k->data, k->len, KVQ_SNAPSHOT);
    if (rc != 0 || !pm || !pv)
        return rc;
    if (m.len < 20)
        return kvq__error(KVQ_EDAMAGED, "a malformed lease record");
    it->lease.deadline = (int64_t)kvq__le_get(m.data, 8);
    it->lease.deliveries = (uint32_t)kvq__le_get(m.data + 8, 4);
    it->lease.received = (int64_t)kvq__le_get(m.data + 12, 8);
    rc = key_raw(k, &w->q->prefix, m.data + 20, m.len - 20);
    if (rc == 0)
        it->lease.priority = w->q->type == KVQ_QUEUE_PRIORITY
                                 ? kvq__q_key_priority(w->q, k->data, k->len)
                                 : 0;
    if (rc == 0)
        rc = kvq__buf_set(val, v.data, v.len);
    it->deliveries = it->lease.deliveries;
    it->priority = it->lease.priority;
    it->due_ms = (it->lease.deadline - rv) / VPM;
    *found = rc == 0;
    return rc;
}

/* One delayed item from its key (due, id, priority, deliveries) and value. */
static int delayed_item(kvq_workq *w, kvq_kv kv, int64_t rv, kvq_buf *val, kvq_workq_item *it)
{
    kvq_tuple *t = NULL;
    int rc = kvq_tuple_unpack(&t, kv.key.data + w->base_y.len, kv.key.len - w->base_y.len);
    if (rc != 0 || kvq_tuple_count(t) != 4 || kvq_tuple_at(t, 0)->type != KVQ_TUPLE_INT ||
        kvq_tuple_at(t, 2)->type != KVQ_TUPLE_INT || kvq_tuple_at(t, 3)->type != KVQ_TUPLE_INT) {
        kvq_tuple_free(t);
        return kvq__error(KVQ_EDAMAGED, "a malformed delayed-item key");
    }
    memset(it, 0, sizeof(*it));
    it->due_ms = (kvq_tuple_at(t, 0)->v.i - rv) / VPM;
    it->priority = kvq_tuple_at(t, 2)->v.i;
    it->deliveries = (uint32_t)kvq_tuple_at(t, 3)->v.i;
    kvq_tuple_free(t);
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
    p->more = 0;
    int rc = kvq_txn_get_read_version(&rv, txn);
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
            rc = inflight_item(w, txn, xk, rv, &p->vals[p->n], &p->info[p->n], &found, &k);
            if (rc == 0 && found)
                p->n++;
        }
        for (size_t i = 0; keys != NULL && i < got; i++)
            kvq_buf_dispose(&keys[i]);
        kvq__free(keys);
    } else {
        for (size_t i = 0; rc == 0 && i < got; i++) {
            rc = delayed_item(w, kvs[i], rv, &p->vals[i], &p->info[i]);
            if (rc == 0)
                p->n++;
        }
    }
    if (rc == 0 && got == 0)
        p->more = 0;
    kvq_buf_dispose(&k);
    return rc;
}

static int list_items(kvq_workq *w, int delayed, kvq_workq_item_fn fn, void *payload,
                      const char *name)
{
    int rc = check_w(w, NULL, 0, name);
    if (rc == 0 && fn == NULL)
        rc = kvq__error(KVQ_EINVAL, "%s: fn is NULL", name);
    if (rc != 0)
        return rc;
    item_page *p = kvq__calloc(1, sizeof(*p));
    if (p == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    p->w = w;
    p->delayed = delayed;
    int more;
    do {
        rc = kvq_db_transact(w->q->db, item_page_body, p);
        more = p->more;
        for (size_t i = 0; rc == 0 && i < p->n; i++) {
            p->info[i].value.data = p->vals[i].data;
            p->info[i].value.len = p->vals[i].len;
            rc = fn(&p->info[i], payload);
        }
    } while (rc == 0 && more);
    for (size_t i = 0; i < BATCH; i++)
        kvq_buf_dispose(&p->vals[i]);
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
    int rc = range_of(&lo, &hi, &w->base_dlq);
    const kvq_kv *kvs;
    size_t got = 0;
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo.data, lo.len, hi.data, hi.len, BATCH, 0);
    if (rc == 0 && got == BATCH)
        c->more = 1;
    size_t plen = w->base_dlq.len;
    for (size_t i = 0; rc == 0 && i < got; i++) {
        rc = kvq_txn_clear(txn, kvs[i].key.data, kvs[i].key.len);
        if (rc == 0)
            rc = counter_add(txn, &w->n_dead, -1);
        if (rc == 0 && !c->purge)
            rc = to_ready(w, txn, kvs[i].key.data + plen, kvs[i].key.len - plen, kvs[i].value, 0,
                          -1, &k);
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

int kvq_workq_dlq_redrive(kvq_workq *w, uint64_t *moved)
{
    int rc = check_w(w, NULL, 0, "kvq_workq_dlq_redrive");
    return rc != 0 ? rc : dlq_drain(w, moved, 0);
}

int kvq_workq_dlq_purge(kvq_workq *w, uint64_t *purged)
{
    int rc = check_w(w, NULL, 0, "kvq_workq_dlq_purge");
    return rc != 0 ? rc : dlq_drain(w, purged, 1);
}

/* ---- metrics ------------------------------------------------------------------------------- */

typedef struct metrics_ctx {
    kvq_workq *w;
    kvq_workq_metrics m;
} metrics_ctx;

static int metrics_body(kvq_txn *txn, void *arg)
{
    metrics_ctx *c = arg;
    kvq_workq *w = c->w;
    kvq_queue *q = w->q;
    int64_t rv;
    int rc = kvq_txn_get_read_version(&rv, txn);
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
    c->m.oldest_ready_age_ms = -1;
    if (rc != 0)
        return rc;
    if (q->type == KVQ_QUEUE_PRIORITY) {
        int64_t since = -1;
        rc = read_counter(txn, &w->n_ready, &c->m.ready);
        if (rc == 0)
            rc = age_head(w, txn, 0, &since);
        if (rc == 0 && since >= 0)
            c->m.oldest_ready_age_ms = rv - since < 0 ? 0 : (rv - since) / VPM;
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
        int64_t ver = 0;
        for (int i = 0; i < 8; i++)
            ver = (int64_t)(((uint64_t)ver << 8) | vs[i]);
        int64_t age = (rv - ver) / VPM;
        c->m.oldest_ready_age_ms = age < 0 ? 0 : age;
    }
    return rc;
}

int kvq_workq_get_metrics(kvq_workq *w, kvq_workq_metrics *out)
{
    int rc = check_w(w, NULL, 0, "kvq_workq_get_metrics");
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_workq_get_metrics: out is NULL");
    if (rc != 0)
        return rc;
    metrics_ctx c;
    memset(&c, 0, sizeof(c));
    c.w = w;
    rc = kvq_db_transact(w->q->db, metrics_body, &c);
    if (rc == 0)
        *out = c.m;
    return rc;
}
