/* The keys, counters and moves of a work queue's items (leases_internal.h, which describes the
 * key layout): the key builders, the age of ready items on priority queues, and the moves of an
 * item between ready, in flight, delayed and dead. */
#include <string.h>

#include "layers/queue/leases_internal.h"

/* ---- keys ---------------------------------------------------------------------------------- */

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

int kvq__wq_keys_init(kvq_workq *w, kvq_queue *q, const kvq_workq_options *o)
{
    w->q = q;
    w->opts = *o;
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
        rc = make_base(w, &w->base_b, "b", NULL);
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
    if (rc == 0)
        rc = make_base(w, &w->n_cleared, "n", "cleared");
    if (rc == 0)
        rc = make_base(w, &w->n_cleared_ready, "n", "clearedr");
    if (rc != 0)
        kvq__wq_keys_dispose(w);
    return rc;
}

void kvq__wq_keys_dispose(kvq_workq *w)
{
    kvq_buf *bufs[] = { &w->base_c,         &w->base_dlq,   &w->base_l,          &w->base_v,
                        &w->base_x,         &w->base_y,     &w->base_s,          &w->base_dd,
                        &w->base_ddx,       &w->n_inflight, &w->n_delayed,       &w->n_dead,
                        &w->n_ready,        &w->tick,       &w->base_a,          &w->base_t,
                        &w->n_received,     &w->n_taken,    &w->n_acked,         &w->n_requeued,
                        &w->n_deadlettered, &w->n_cleared,  &w->n_cleared_ready, &w->base_b };
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        kvq_buf_dispose(bufs[i]);
}


/* out = base + pack(e) (out reset first). */
int kvq__wq_key_of(kvq_buf *out, const kvq_buf *base, const kvq_tuple_elem *e, size_t n)
{
    out->len = 0;
    int rc = kvq_buf_append(out, base->data, base->len);
    if (rc == 0 && n > 0)
        rc = kvq_tuple_pack_buf(out, e, n);
    return rc;
}

/* out = base + raw bytes (out reset first). */
int kvq__wq_key_raw(kvq_buf *out, const kvq_buf *base, const uint8_t *p, size_t n)
{
    out->len = 0;
    int rc = kvq_buf_append(out, base->data, base->len);
    if (rc == 0 && n > 0)
        rc = kvq_buf_append(out, p, n);
    return rc;
}

/* [base + 00, base + FF): the range of one kind. */
int kvq__wq_range_of(kvq_buf *lo, kvq_buf *hi, const kvq_buf *base)
{
    static const uint8_t z = 0, f = 0xff;
    int rc = kvq__wq_key_raw(lo, base, &z, 1);
    if (rc == 0)
        rc = kvq__wq_key_raw(hi, base, &f, 1);
    return rc;
}

int kvq__wq_id_key(kvq_buf *out, const kvq_buf *base, const uint8_t *id)
{
    kvq_tuple_elem e = kvq_tuple_bytes(id, 16);
    return kvq__wq_key_of(out, base, &e, 1);
}

int kvq__wq_counter_add(kvq_txn *txn, const kvq_buf *key, int64_t delta)
{
    uint8_t p[8];
    kvq__le64_put(p, (uint64_t)delta);
    return kvq_txn_atomic_op(txn, key->data, key->len, p, 8, KVQ_MUT_ADD);
}

/* The ready count goes up or down by delta. */
int kvq__wq_ready_add(kvq_workq *w, kvq_txn *txn, int64_t delta)
{
    kvq_queue *q = w->q;
    if (q->type == KVQ_QUEUE_DURABLE)
        return delta > 0 ? kvq__wq_counter_add(txn, &q->npush, delta)
                         : kvq__wq_counter_add(txn, &q->npop, -delta);
    return kvq__wq_counter_add(txn, &w->n_ready, delta);
}

int kvq__wq_tally_apply(kvq_workq *w, kvq_txn *txn, kvq__wq_tally *t)
{
    int rc = 0;
    if (t->ready != 0)
        rc = kvq__wq_ready_add(w, txn, t->ready);
    if (rc == 0 && t->taken != 0)
        rc = kvq__wq_counter_add(txn, &w->n_taken, t->taken);
    if (rc == 0 && t->inflight != 0)
        rc = kvq__wq_counter_add(txn, &w->n_inflight, t->inflight);
    if (rc == 0 && t->received != 0)
        rc = kvq__wq_counter_add(txn, &w->n_received, t->received);
    if (rc == 0 && t->acked != 0)
        rc = kvq__wq_counter_add(txn, &w->n_acked, t->acked);
    return rc;
}

int kvq__wq_check(const kvq_workq *w, const kvq_txn *txn, int need_txn, const char *fn)
{
    if (w == NULL || (need_txn && txn == NULL))
        return kvq__error(KVQ_EINVAL, "%s: NULL work queue or transaction", fn);
    return 0;
}

/* Upkeep returns the leases whose deadline is below this bound: the read version, or (test-only
 * knob) everything, so that a checker can be shown to catch early redeliveries. */
int64_t kvq__wq_expiry_bound(const kvq_workq *w, int64_t rv)
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
int kvq__wq_age_key(kvq_buf *out, kvq_workq *w, int64_t since, const uint8_t *suffix, size_t slen)
{
    kvq_tuple_elem e = kvq_tuple_int(since);
    int rc = kvq__wq_key_of(out, &w->base_a, &e, 1);
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
        rc = kvq__wq_key_raw(&k, &w->base_c, suffix, slen);
    if (rc == 0)
        rc = kvq_txn_set(txn, k.data, k.len, v, sizeof(v));
    if (rc == 0)
        rc = kvq__wq_age_key(&k, w, since, suffix, slen);
    if (rc == 0)
        rc = kvq_txn_set(txn, k.data, k.len, NULL, 0);
    kvq_buf_dispose(&k);
    return rc;
}

/* A leased priority item's ready version: read and cleared (-1 when it has none: pushed with a
 * plain kvq_queue push, or before the layer kept ages). */
int kvq__wq_age_take(kvq_workq *w, kvq_txn *txn, const uint8_t *id, int64_t *since)
{
    *since = -1;
    if (w->q->type != KVQ_QUEUE_PRIORITY)
        return 0;
    kvq_buf k = KVQ_BUF_INIT;
    kvq_bytes v;
    int present = 0;
    int rc = kvq__wq_id_key(&k, &w->base_t, id);
    if (rc == 0)
        rc = kvq_txn_get(&v, &present, txn, k.data, k.len, 0);
    if (rc == 0 && present && v.len == 8)
        *since = (int64_t)kvq__le_get(v.data, 8);
    if (rc == 0 && present)
        rc = kvq_txn_clear(txn, k.data, k.len);
    kvq_buf_dispose(&k);
    return rc;
}

/* Entries of the age index looked at per statistics read or upkeep pass. */
#define AGE_PROBE 16

/* The ready version of the oldest ready item of a priority queue (-1: none found), from the
 * first AGE_PROBE entries of the age index (snapshot reads). An entry whose item is gone was
 * left by a plain pop (kvq_queue_pop_prio does not know the index): it is skipped, and with
 * prune set it is cleared with its count key (the item cannot come back, so no conflict is
 * needed). */
int kvq__wq_age_head(kvq_workq *w, kvq_txn *txn, int prune, int64_t *out)
{
    *out = -1;
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT, k = KVQ_BUF_INIT, keys = KVQ_BUF_INIT;
    size_t off[AGE_PROBE + 1];
    const kvq_kv *kvs;
    size_t got = 0;
    kvq_tuple *t = NULL;
    int rc = kvq__wq_range_of(&lo, &hi, &w->base_a);
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
        if (rc != 0 || kvq_tuple_get_count(t) < 2 ||
            kvq_tuple_get_elem(t, 0)->type != KVQ_TUPLE_INT) {
            rc = kvq__error(KVQ_EDAMAGED, "a malformed age index key");
            break;
        }
        int64_t since = kvq_tuple_get_elem(t, 0)->v.i;
        kvq_tuple_destroy(t);
        t = NULL;
        rc = kvq__wq_age_key(&k, w, since, NULL, 0);
        if (rc != 0)
            break;
        const uint8_t *suffix = ak + k.len;
        size_t slen = al - k.len;
        kvq_bytes v;
        int present = 0;
        rc = kvq__wq_key_raw(&k, &w->q->prefix, suffix, slen);
        if (rc == 0)
            rc = kvq_txn_get(&v, &present, txn, k.data, k.len, KVQ_SNAPSHOT);
        if (rc == 0 && present) {
            *out = since;
            break;
        }
        if (rc == 0 && prune)
            rc = kvq_txn_clear(txn, ak, al);
        if (rc == 0 && prune)
            rc = kvq__wq_key_raw(&k, &w->base_c, suffix, slen);
        if (rc == 0 && prune)
            rc = kvq_txn_clear(txn, k.data, k.len);
    }
    kvq_tuple_destroy(t);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&keys);
    return rc;
}

/* ---- moving items -------------------------------------------------------------------------- */

/* Writes a ready item back at prefix + suffix with its delivery count (and, on a priority queue,
 * its ready version `since`; -1: from now). */
int kvq__wq_to_ready(kvq_workq *w,
                     kvq_txn *txn,
                     const uint8_t *suffix,
                     size_t slen,
                     kvq_bytes value,
                     uint32_t deliveries,
                     int64_t since,
                     kvq_buf *tmp)
{
    int rc = kvq__wq_key_raw(tmp, &w->q->prefix, suffix, slen);
    if (rc == 0)
        rc = kvq_txn_set(txn, tmp->data, tmp->len, value.data, value.len);
    if (rc == 0) /* every caller gives an item back: a nack, an ended lease, a redrive */
        rc = kvq__wq_counter_add(txn, &w->n_requeued, 1);
    if (rc == 0 && w->q->type == KVQ_QUEUE_PRIORITY) {
        rc = age_mark(w, txn, suffix, slen, deliveries, since);
        return rc == 0 ? kvq__wq_ready_add(w, txn, 1) : rc;
    }
    if (rc == 0)
        rc = kvq__wq_key_raw(tmp, &w->base_c, suffix, slen);
    if (rc == 0 && deliveries > 0) {
        uint8_t d[4];
        kvq__le32_put(d, deliveries);
        rc = kvq_txn_set(txn, tmp->data, tmp->len, d, 4);
    } else if (rc == 0) {
        rc = kvq_txn_clear(txn, tmp->data, tmp->len);
    }
    if (rc == 0)
        rc = kvq__wq_ready_add(w, txn, 1);
    return rc;
}

int kvq__wq_to_dead(kvq_workq *w,
                    kvq_txn *txn,
                    const uint8_t *suffix,
                    size_t slen,
                    kvq_bytes value,
                    uint32_t deliveries,
                    kvq_buf *tmp)
{
    uint8_t d[4];
    kvq__le32_put(d, deliveries);
    int rc = kvq__wq_key_raw(tmp, &w->base_dlq, suffix, slen);
    if (rc == 0)
        rc = kvq_txn_set(txn, tmp->data, tmp->len, value.data, value.len);
    if (rc == 0)
        rc = kvq__wq_key_raw(tmp, &w->base_c, suffix, slen);
    if (rc == 0)
        rc = kvq_txn_set(txn, tmp->data, tmp->len, d, 4);
    if (rc == 0)
        rc = kvq__wq_counter_add(txn, &w->n_dead, 1);
    if (rc == 0)
        rc = kvq__wq_counter_add(txn, &w->n_deadlettered, 1);
    return rc;
}

/* Back to the queue, or to the dead letters when the item has had its deliveries. */
int kvq__wq_give_back(kvq_workq *w,
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
    return d ? kvq__wq_to_dead(w, txn, suffix, slen, value, deliveries, tmp)
             : kvq__wq_to_ready(w, txn, suffix, slen, value, deliveries, since, tmp);
}

int kvq__wq_put_delayed(kvq_workq *w,
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
        rc = kvq__wq_key_of(tmp, &w->base_y, e, 4);
    if (rc == 0)
        rc = kvq_txn_set(txn, tmp->data, tmp->len, value.data, value.len);
    if (rc == 0)
        rc = kvq__wq_counter_add(txn, &w->n_delayed, 1);
    return rc;
}

/* Pushes a value to the ready queue at a new key (the tail of a durable queue, the end of its
 * priority in a priority queue), with a delivery count. Never reads anything that conflicts. */
int kvq__wq_push_ready(
    kvq_workq *w, kvq_txn *txn, int64_t prio, uint32_t deliveries, kvq_bytes value, kvq_buf *tmp)
{
    kvq_queue *q = w->q;
    uint8_t d[4];
    kvq__le32_put(d, deliveries);
    /* An item delivered before comes back (a delayed nack falling due): a requeue. */
    int rc = deliveries > 0 ? kvq__wq_counter_add(txn, &w->n_requeued, 1) : 0;
    if (rc != 0)
        return rc;
    if (q->type == KVQ_QUEUE_DURABLE) {
        uint16_t uv;
        rc = kvq_txn_next_user_version(&uv, txn);
        tmp->len = 0;
        if (rc == 0)
            rc = kvq__qk_durable_push(tmp, kvq__buf_bytes(&q->prefix), uv);
        if (rc == 0)
            rc = kvq_txn_set_versionstamped_key(txn, tmp->data, tmp->len, value.data, value.len);
        if (rc == 0 && deliveries > 0) {
            /* The count key holds the same stamp: same user version, same commit. */
            tmp->len = 0;
            rc = kvq__qk_durable_push(tmp, kvq__buf_bytes(&w->base_c), uv);
            if (rc == 0)
                rc = kvq_txn_set_versionstamped_key(txn, tmp->data, tmp->len, d, 4);
        }
        if (rc == 0)
            rc = kvq__wq_counter_add(txn, &q->npush, 1);
        return rc;
    }
    /* The priority recipe: the last count of this priority by a snapshot read. */
    uint8_t rnd[KVQ__RAND_LEN];
    int64_t count = 0;
    rc = kvq__random_bytes(rnd, sizeof(rnd));
    if (rc == 0)
        rc = kvq__q_prio_next_count(&count, q, txn, prio);
    tmp->len = 0;
    if (rc == 0)
        rc = kvq__qk_prio_item(tmp, kvq__buf_bytes(&q->prefix), prio, count, rnd);
    if (rc == 0) {
        size_t plen = q->prefix.len;
        rc = kvq_txn_set(txn, tmp->data, tmp->len, value.data, value.len);
        if (rc == 0)
            rc = age_mark(w, txn, tmp->data + plen, tmp->len - plen, deliveries, -1);
    }
    if (rc == 0)
        rc = kvq__wq_counter_add(txn, &w->n_ready, 1);
    return rc;
}
