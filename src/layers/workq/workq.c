/* Work-queue semantics over the durable and priority queues (kvq/workq.h): handles, pushes
 * (delayed and deduplicated), receives and the settling of leases (ack, nack, extend). The
 * long poll is in workq_wait.c, upkeep in layers/queue/due.c, dead letters, listings and statistics
 * in workq_admin.c; the key layout and the conflicts are described in workq_internal.h. */
#include <signal.h>
#include <string.h>

#include "kvq/testing.h"
#include "layers/workq/workq_internal.h"

#define MAX_DEDUP_KEY 1000

enum { OUT_ACK = 'a', OUT_NACK = 'n' };

/* ---- keys of leases -------------------------------------------------------------------- */

static int x_key(kvq_buf *out, kvq_workq *w, int64_t deadline, const uint8_t *id)
{
    kvq_tuple_elem e[2] = { kvq_tuple_int(deadline), kvq_tuple_bytes(id, 16) };
    return kvq__wq_key_of(out, &w->base_x, e, 2);
}

static int s_key(kvq_buf *out, kvq_workq *w, int64_t received, const uint8_t *id)
{
    kvq_tuple_elem e[2] = { kvq_tuple_int(received / KVQ__BUCKET_VERSIONS),
                            kvq_tuple_bytes(id, 16) };
    return kvq__wq_key_of(out, &w->base_s, e, 2);
}

/* ---- open / close -------------------------------------------------------------------------- */

void kvq_workq_close(kvq_workq *w)
{
    if (w == NULL)
        return;
    kvq__wq_keys_dispose(w);
    kvq__free(w);
}

int kvq_workq_open(kvq_workq **out, kvq_queue *q, const kvq_workq_options *opts)
{
    int rc = kvq__wq_open(out, q, opts);
    /* Plain readers of this handle make ended leases ready with these settings. */
    if (rc == 0)
        __atomic_store_n(&q->wq_max_deliveries, (int64_t)(*out)->opts.max_deliveries,
                         __ATOMIC_RELAXED);
    return rc;
}

int kvq__wq_open(kvq_workq **out, kvq_queue *q, const kvq_workq_options *opts)
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
    int rc = kvq__wq_keys_init(w, q, &o);
    if (rc != 0) {
        kvq_workq_close(w);
        return kvq__error(KVQ_ENOMEM, "out of memory for a work queue's keys");
    }
    rc = kvq__random_bytes(&w->recv_ticket, sizeof(w->recv_ticket));
    if (rc != 0) {
        kvq_workq_close(w);
        return rc;
    }
    *out = w;
    return 0;
}

int kvq__wq_lease_versions(const kvq_workq *w, int64_t lease_ms, int64_t *out)
{
    if (lease_ms == 0)
        lease_ms = w->opts.lease_ms;
    if (lease_ms < 1 || lease_ms > 86400000)
        return kvq__error(KVQ_EINVAL, "lease of %lld ms is out of range (1 ms to 1 day)",
                          (long long)lease_ms);
    *out = lease_ms * KVQ__VERSIONS_PER_MS;
    return 0;
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
        rc = kvq__wq_key_of(&k, &w->base_dd, &e, 1);
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
            if (rv - at < w->opts.dedup_window_ms * KVQ__VERSIONS_PER_MS)
                goto out; /* a duplicate within the window */
            kvq_tuple_elem e2[2] = { kvq_tuple_int(at), e };
            rc = kvq__wq_key_of(&k2, &w->base_ddx, e2, 2);
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
            rc = kvq__wq_key_of(&k2, &w->base_ddx, e3, 2);
        if (rc == 0)
            rc = kvq_txn_set(txn, k2.data, k2.len, NULL, 0);
        if (rc != 0)
            goto out;
    }
    int64_t due = o->delay_ms > 0 ? rv + o->delay_ms * KVQ__VERSIONS_PER_MS : 0;
    if (o->not_before > due)
        due = o->not_before;
    kvq_bytes val = { value, len };
    if (due > rv)
        rc = kvq__wq_put_delayed(w, txn, due, o->priority, 0, val, &k);
    else
        rc = kvq__wq_push_ready(w, txn, o->priority, 0, val, &k);
    if (rc == 0)
        *enqueued = 1;
out:
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&k2);
    return rc;
}

int kvq_workq_push_txn(bool *out,
                       kvq_workq *w,
                       kvq_txn *txn,
                       const uint8_t *value,
                       size_t len,
                       const kvq_workq_push_options *po)
{
    kvq_workq_push_options o;
    int rc = kvq__wq_check(w, txn, 1, "kvq_workq_push_txn");
    if (rc == 0)
        rc = check_push(w, value, len, po, &o);
    if (rc != 0)
        return rc;
    uint8_t id[16];
    rc = kvq__random_bytes(id, sizeof(id));
    int e = 0;
    if (rc == 0)
        rc = push_body_any(w, txn, value, len, &o, id, &e);
    if (out != NULL)
        *out = e;
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

static int push_conv_body(kvq_txn *txn, void *arg)
{
    push_ctx *c = arg;
    if (c->o.dedup_key == NULL) {
        /* No dedup key: the queue's idempotency token makes a retry after 1021 a no-op. */
        bool already = false;
        int rc = kvq_queue_token_apply_txn(&already, c->w->q, txn, &c->tok);
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
    bool *out, kvq_workq *w, const uint8_t *value, size_t len, const kvq_workq_push_options *po)
{
    push_ctx c;
    memset(&c, 0, sizeof(c));
    int rc = kvq__wq_check(w, NULL, 0, "kvq_workq_push");
    if (rc == 0)
        rc = check_push(w, value, len, po, &c.o);
    if (rc == 0)
        rc = kvq_queue_token_init(&c.tok);
    if (rc != 0)
        return rc;
    c.w = w;
    c.value = value;
    c.len = len;
    rc = kvq__wq_run_idempotent(w->q->db, push_conv_body, &c, 0, NULL);
    if (out != NULL)
        *out = rc == 0 ? c.enqueued : 0;
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

int kvq__wq_receive_item(kvq_workq *w,
                         kvq_txn *txn,
                         kvq_bytes key,
                         kvq_bytes value,
                         int64_t rv,
                         int64_t lv,
                         const uint8_t *lease_id,
                         kvq__wq_tally *tally,
                         kvq_workq_lease *lease,
                         int *dead)
{
    kvq_queue *q = w->q;
    kvq_buf k = KVQ_BUF_INIT, m = KVQ_BUF_INIT;
    const uint8_t *suffix = key.data + q->prefix.len;
    size_t slen = key.len - q->prefix.len;
    kvq_bytes cv;
    int present = 0;
    *dead = 0;
    int rc = kvq__wq_key_raw(&k, &w->base_c, suffix, slen);
    if (rc == 0)
        rc = kvq_txn_get(&cv, &present, txn, k.data, k.len, 0);
    if (rc != 0)
        goto out;
    uint32_t deliv = present ? (uint32_t)kvq__le_get(cv.data, cv.len < 4 ? cv.len : 4) : 0;
    int64_t since = present && cv.len >= 12 && q->type == KVQ_QUEUE_PRIORITY
                        ? (int64_t)kvq__le_get(cv.data + 4, 8)
                        : -1;
    if (present)
        rc = kvq_txn_clear(txn, k.data, k.len);
    if (rc == 0 && since >= 0)
        rc = kvq__wq_age_key(&k, w, since, suffix, slen);
    if (rc == 0 && since >= 0)
        rc = kvq_txn_clear(txn, k.data, k.len);
    if (rc == 0)
        rc = kvq_txn_clear(txn, key.data, key.len);
    if (rc == 0 && tally != NULL) {
        tally->ready--;
        tally->taken++;
    } else {
        if (rc == 0)
            rc = kvq__wq_ready_add(w, txn, -1);
        if (rc == 0)
            rc = kvq__wq_counter_add(txn, &w->n_taken, 1);
    }
    if (rc != 0)
        goto out;
    if (w->opts.max_deliveries > 0 && deliv >= w->opts.max_deliveries) {
        *dead = 1;
        rc = kvq__wq_to_dead(w, txn, suffix, slen, value, deliv, &k);
        goto out;
    }
    deliv++;
    uint8_t id[16];
    if (lease_id != NULL)
        memcpy(id, lease_id, sizeof(id));
    else
        rc = kvq__random_bytes(id, sizeof(id));
    int64_t deadline = rv + lv;
    if (rc == 0)
        rc = lease_meta(&m, deadline, deliv, rv, suffix, slen);
    if (rc == 0)
        rc = kvq__wq_id_key(&k, &w->base_l, id);
    if (rc == 0)
        rc = kvq_txn_set(txn, k.data, k.len, m.data, m.len);
    if (rc == 0)
        rc = kvq__wq_id_key(&k, &w->base_v, id);
    if (rc == 0)
        rc = kvq_txn_set(txn, k.data, k.len, value.data, value.len);
    if (rc == 0)
        rc = x_key(&k, w, deadline, id);
    if (rc == 0)
        rc = kvq_txn_set(txn, k.data, k.len, NULL, 0);
    if (rc == 0 && tally != NULL) {
        tally->inflight++;
        tally->received++;
    } else {
        if (rc == 0)
            rc = kvq__wq_counter_add(txn, &w->n_inflight, 1);
        if (rc == 0)
            rc = kvq__wq_counter_add(txn, &w->n_received, 1);
    }
    if (rc == 0 && since >= 0) {
        uint8_t sv[8];
        kvq__le64_put(sv, (uint64_t)since);
        rc = kvq__wq_id_key(&k, &w->base_t, id);
        if (rc == 0)
            rc = kvq_txn_set(txn, k.data, k.len, sv, sizeof(sv));
    }
    if (rc == 0) {
        memcpy(lease->id, id, 16);
        lease->received = rv;
        lease->deadline = deadline;
        lease->deliveries = deliv;
        lease->priority = kvq__q_key_priority(q, key.data, key.len);
    }
out:
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&m);
    return rc;
}

/* ---- receivers that spread ------------------------------------------------------------------
 *
 * Receivers that all take the head collide: of those that read it at one version one commits
 * and the others fail with 1020 and read again. A receive therefore reads the first items with a
 * snapshot read and takes a read conflict on exactly the item it takes (and its count key, which
 * kvq__wq_receive_item reads), so that two receives conflict only when they take the same item;
 * an empty answer keeps a read conflict on the whole item range, as a plain read of it would
 * (a caller's transaction that saw the queue empty is refused when a push lands meanwhile).
 *
 * A receiver alone takes the head, in order. While a handle's receivers lose races to others
 * (an attempt retried after 1020 finds that the item it took is gone: the durable queue's pops
 * measure their contention the same way, kvq__q_pop_lost_race) the handle's pressure rises by
 * PRESSURE_STEP, and each item taken lowers it by 1; under pressure a receive takes the item at
 * the handle's next ticket among the first `width` ready items of the head's priority (width:
 * half the pressure, at least 8, rounded down to a power of two so that it seldom changes
 * between two receives). Successive receives of one handle take successive places, so its
 * threads reading at one version take different items; each handle's tickets start at a random
 * value, so that two processes rarely take the same place either. Nothing starves: while the
 * window is full, a handle's receives take the head at least once in every `width` of them, and
 * every item is in the window once fewer than `width` are ahead of it. The pressure settles
 * where about one receive in PRESSURE_STEP + 1 loses a race.
 *
 * Whether an attempt is the retry of the one before is told by the transaction's retry count
 * (kvq_txn_get_retries), so that the _txn forms, which run in a caller's retry loop, see their
 * races too: the thread's last take (below) names the transaction and retry count of the attempt
 * that took it. */
#define PRESSURE_STEP 24
#define PRESSURE_MAX  512
/* Longer keys are not remembered: a receive of such a queue does not notice its lost races. */
#define TAKE_KEY_MAX 512

typedef struct last_take {
    const kvq_workq *w;
    const kvq_txn *txn;
    int retries;
    size_t len;
    uint8_t key[TAKE_KEY_MAX];
} last_take;

static _Thread_local last_take this_thread_take;

static void remember_take(const kvq_workq *w, kvq_txn *txn, kvq_bytes key)
{
    last_take *t = &this_thread_take;
    t->w = NULL;
    if (key.len > TAKE_KEY_MAX)
        return;
    memcpy(t->key, key.data, key.len);
    t->len = key.len;
    t->txn = txn;
    t->retries = kvq_txn_get_retries(txn);
    t->w = w;
}

/* Raises w's pressure when this attempt retries the one that took this thread's last item and
 * another receiver has taken that item since (a snapshot read at this attempt's version). The
 * record is used up by the thread's next receive, whatever it is: a transaction that ended and
 * a new one at the same address (or reset) whose first attempt took nothing must not be taken
 * for a retry of it. */
static int note_lost_race(kvq_workq *w, kvq_txn *txn)
{
    last_take *t = &this_thread_take;
    int retry = t->w == w && t->txn == txn && kvq_txn_get_retries(txn) == t->retries + 1;
    t->w = NULL;
    if (!retry)
        return 0;
    kvq_bytes v;
    int present = 1;
    int rc = kvq_txn_get(&v, &present, txn, t->key, t->len, KVQ_SNAPSHOT);
    if (rc == 0 && !present) {
        int p = __atomic_load_n(&w->recv_pressure, __ATOMIC_RELAXED);
        if (p < PRESSURE_MAX)
            __atomic_compare_exchange_n(&w->recv_pressure, &p, p + PRESSURE_STEP, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
    return rc;
}

/* The ready item a receive takes (*kv, borrowed from txn), with a read conflict on its key: the
 * head, or under pressure the one at the handle's next ticket (above). KVQ_ENOTFOUND, with a
 * read conflict on the whole item range, when nothing is ready. */
static int pick_ready(kvq_workq *w, kvq_txn *txn, const kvq_kv **kv)
{
    kvq_queue *q = w->q;
    int p = __atomic_load_n(&w->recv_pressure, __ATOMIC_RELAXED);
    int width = 1;
    if (p > 0) /* half the pressure, at least 8, rounded down to a power of two */
        for (width = 8; width * 4 <= p; width *= 2)
            ;
    const kvq_kv *kvs;
    size_t got;
    int rc = kvq__q_head(q, txn, KVQ__END_MIN, width, KVQ_SNAPSHOT, &kvs, &got);
    if (rc != 0)
        return rc;
    if (got == 0) {
        rc = kvq_txn_add_conflict_range(txn, q->items_lo.data, q->items_lo.len, q->items_hi.data,
                                        q->items_hi.len, KVQ_CONFLICT_READ);
        if (rc == 0)
            rc = kvq__error(KVQ_ENOTFOUND, "the work queue has no ready item");
        return rc;
    }
    size_t n = got, i = 0;
    if (q->type == KVQ_QUEUE_PRIORITY && n > 1) {
        /* Only among the items of the head's priority: the order of priorities holds. */
        int64_t first = kvq__q_key_priority(q, kvs[0].key.data, kvs[0].key.len);
        for (n = 1; n < got; n++)
            if (kvq__q_key_priority(q, kvs[n].key.data, kvs[n].key.len) != first)
                break;
    }
    if (n > 1)
        i = (size_t)(__atomic_fetch_add(&w->recv_ticket, 1, __ATOMIC_RELAXED) % n);
    rc = kvq__conflict_key(txn, kvs[i].key.data, kvs[i].key.len);
    if (rc == 0 && p > 0)
        __atomic_compare_exchange_n(&w->recv_pressure, &p, p - 1, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
    *kv = &kvs[i];
    return rc;
}

/* kvq_workq_receive_txn; *dead (may be NULL) counts the items it moved to the dead letters on
 * the way, which a KVQ_ENOTFOUND still leaves written in txn. */
static int receive_in(kvq_bytes *out,
                      kvq_workq_lease *lease,
                      kvq_workq *w,
                      kvq_txn *txn,
                      int64_t lease_ms,
                      int *ndead)
{
    int rc = kvq__wq_check(w, txn, 1, "kvq_workq_receive_txn");
    if (rc == 0 && (out == NULL || lease == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_workq_receive_txn: NULL out or lease");
    int64_t lv = 0, rv = 0;
    if (rc == 0)
        rc = kvq__wq_lease_versions(w, lease_ms, &lv);
    if (rc == 0)
        rc = kvq_txn_get_read_version(&rv, txn);
    if (rc == 0)
        rc = note_lost_race(w, txn);
    /* Due delayed items and ended leases first (a retry then sees them ready). */
    if (rc == 0)
        rc = kvq__q_due_gate(w->q, w, txn);
    if (rc != 0)
        return rc;
    /* Items already over their deliveries (max lowered since) go to the dead letters; a few
     * at most per receive. */
    for (int tries = 0; tries < 16; tries++) {
        const kvq_kv *kv = NULL;
        rc = pick_ready(w, txn, &kv);
        if (rc != 0)
            break;
        int dead = 0;
        rc = kvq__wq_receive_item(w, txn, kv->key, kv->value, rv, lv, NULL, NULL, lease, &dead);
        if (rc == 0 && dead && ndead != NULL)
            (*ndead)++;
        if (rc != 0 || !dead) {
            if (rc == 0) {
                remember_take(w, txn, kv->key);
                *out = kv->value;
            }
            return rc;
        }
    }
    /* Every try found an item over its deliveries: nothing received this time. */
    if (rc == 0)
        rc = kvq__error(KVQ_ENOTFOUND, "no ready item received (items over their deliveries "
                                       "were moved to the dead letters)");
    return rc;
}

int kvq_workq_receive_txn(
    kvq_bytes *out, kvq_workq_lease *lease, kvq_workq *w, kvq_txn *txn, int64_t lease_ms)
{
    return receive_in(out, lease, w, txn, lease_ms, NULL);
}

typedef struct recv_ctx {
    kvq_workq *w;
    kvq_buf *out;
    kvq_workq_lease *lease;
    int64_t lease_ms;
    int empty; /* nothing received, but items moved to the dead letters on the way */
} recv_ctx;

static int recv_body(kvq_txn *txn, void *arg)
{
    recv_ctx *c = arg;
    kvq_bytes v;
    int ndead = 0;
    c->empty = 0;
    int rc = receive_in(&v, c->lease, c->w, txn, c->lease_ms, &ndead);
    if (rc == KVQ_ENOTFOUND && ndead > 0) {
        /* Commit the moves to the dead letters (else every receive would find those items
         * again, move them again and roll back), and report the queue empty. */
        c->empty = 1;
        return 0;
    }
    if (rc == 0 && kvq__buf_set(c->out, v.data, v.len) != 0)
        rc = kvq__error(KVQ_ENOMEM, "out of memory copying a received value");
    return rc;
}

int kvq_workq_receive(kvq_buf *out, kvq_workq_lease *lease, kvq_workq *w, int64_t lease_ms)
{
    int rc = kvq__wq_check(w, NULL, 0, "kvq_workq_receive");
    if (rc == 0 && (out == NULL || lease == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_workq_receive: NULL out or lease");
    int64_t lv;
    if (rc == 0)
        rc = kvq__wq_lease_versions(w, lease_ms, &lv);
    if (rc != 0)
        return rc;
    recv_ctx c = { w, out, lease, lease_ms, 0 };
    rc = kvq_db_transact(w->q->db, recv_body, &c);
    if (rc == 0 && c.empty)
        rc = kvq__error(KVQ_ENOTFOUND, "the work queue has no ready item");
    return rc;
}

/* ---- ack and receive in one commit --------------------------------------------------------- */

/* A one-at-a-time consumer (the leased consumer runtime, `kvq consume --ack`) acks the item it
 * finished in the transaction of its next receive, so that one item costs one commit. The
 * guarantees stay those of a separate ack and receive: the ack reads and writes only the lease's
 * own keys, so it commits exactly when the receive does; when nothing is ready the transaction
 * still commits, with the ack alone, so that no finished item waits for its ack. */
typedef struct ackrecv_ctx {
    kvq_workq *w;
    kvq_buf *out;
    kvq_workq_lease *lease;
    kvq_workq_lease *ack;
    int64_t lease_ms;
    int maybe;  /* an earlier attempt may have committed */
    int ack_rc; /* the ack's outcome in this attempt */
    int empty;  /* committed without receiving an item */
} ackrecv_ctx;

static int ackrecv_body(kvq_txn *txn, ackrecv_ctx *c)
{
    c->empty = 0;
    c->ack_rc = 0;
    int rc = kvq__wq_settle_txn(c->w, txn, c->ack, SETTLE_ACK, 0, NULL);
    if (rc == KVQ_ELEASE_SETTLED && c->maybe)
        rc = 0; /* an attempt that reported 1021 had committed the ack */
    if (rc == KVQ_ELEASE_EXPIRED || rc == KVQ_ELEASE_SETTLED) {
        /* Refused: the settle wrote nothing; the receive goes on alone. */
        c->ack_rc = rc;
        rc = 0;
    }
    if (rc != 0)
        return rc;
    kvq_bytes v;
    int ndead = 0;
    rc = receive_in(&v, c->lease, c->w, txn, c->lease_ms, &ndead);
    if (rc == KVQ_ENOTFOUND && (ndead > 0 || c->ack_rc == 0)) {
        /* Nothing to receive: commit the ack (and any moves to the dead letters) now. */
        c->empty = 1;
        return 0;
    }
    if (rc == 0 && kvq__buf_set(c->out, v.data, v.len) != 0)
        rc = kvq__error(KVQ_ENOMEM, "out of memory copying a received value");
    return rc;
}

int kvq__wq_ack_receive(kvq_buf *out,
                        kvq_workq_lease *lease,
                        kvq_workq *w,
                        int64_t lease_ms,
                        kvq_workq_lease *ack,
                        int *ack_rc)
{
    *ack_rc = KVQ_EINVAL;
    int rc = kvq__wq_check(w, NULL, 0, "kvq__wq_ack_receive");
    int64_t lv;
    if (rc == 0)
        rc = kvq__wq_lease_versions(w, lease_ms, &lv);
    kvq_txn *txn = NULL;
    if (rc == 0)
        rc = kvq_txn_create(&txn, w->q->db);
    if (rc != 0) {
        *ack_rc = rc;
        return rc;
    }
    ackrecv_ctx c = { w, out, lease, ack, lease_ms, 0, 0, 0 };
    for (;;) {
        rc = ackrecv_body(txn, &c);
        if (rc == 0 && (w->test_flags & KVQ_WORKQ_TEST_STOP_BEFORE_ACK_RECEIVE))
            raise(SIGSTOP); /* a crash point: the test kills the process here */
        if (rc == 0)
            rc = kvq_txn_commit(txn);
        if (rc == 0)
            break;
        if (rc == KVQ_ENOTFOUND)
            break; /* nothing ready and nothing to commit (the ack was refused) */
        if (kvq__txn_maybe_committed(txn, rc))
            c.maybe = 1;
        int rc2 = kvq_txn_on_error(txn, rc);
        if (rc2 != 0) {
            rc = rc2;
            if (c.maybe && rc2 == KVQ_ETRANSACTION_TIMED_OUT)
                rc = kvq__error(KVQ_ECOMMIT_UNKNOWN_RESULT,
                                "an ack and receive may have committed, and the attempt that "
                                "would tell ran out of time");
            break;
        }
    }
    kvq_txn_destroy(txn);
    if (rc == 0 && (w->test_flags & KVQ_WORKQ_TEST_STOP_AFTER_ACK_RECEIVE))
        raise(SIGSTOP); /* a crash point: committed, and nobody knows yet */
    *ack_rc = rc == 0 || rc == KVQ_ENOTFOUND ? c.ack_rc : rc;
    if (rc == 0 && c.empty)
        rc = kvq__error(KVQ_ENOTFOUND, "the work queue has no ready item");
    return rc;
}

int kvq_testing_workq_flags(kvq_workq *w, unsigned int flags)
{
    if (w == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_testing_workq_flags: w is NULL");
    unsigned int known = KVQ_WORKQ_TEST_IGNORE_LEASES | KVQ_WORKQ_TEST_STOP_BEFORE_ACK_RECEIVE |
                         KVQ_WORKQ_TEST_STOP_AFTER_ACK_RECEIVE;
    if ((flags & ~known) != 0)
        return kvq__error(KVQ_EINVAL, "kvq_testing_workq_flags: unknown flags 0x%x", flags);
    w->test_flags = flags;
    return 0;
}

int64_t kvq__wq_lease_ms(const kvq_workq *w)
{
    return w->opts.lease_ms;
}

/* ---- settle: ack, nack, extend ------------------------------------------------------------- */

/* The lease's record is gone: says why, from its settled marker (KVQ_ELEASE_SETTLED: acked or
 * nacked) or its absence (KVQ_ELEASE_EXPIRED: the item went back to the queue). k: scratch. */
static int lease_gone(kvq_workq *w, kvq_txn *txn, const kvq_workq_lease *lease, kvq_buf *k)
{
    kvq_bytes sv;
    int settled = 0;
    int rc = s_key(k, w, lease->received, lease->id);
    if (rc == 0)
        rc = kvq_txn_get(&sv, &settled, txn, k->data, k->len, 0);
    if (rc == 0)
        rc = settled ? kvq__error(KVQ_ELEASE_SETTLED, "the lease was already %s",
                                  sv.len > 0 && sv.data[0] == OUT_NACK ? "nacked" : "acked")
                     : kvq__error(KVQ_ELEASE_EXPIRED,
                                  "the lease expired and its item went back to the queue");
    return rc;
}

/* Moves a live lease's end from deadline to nd: its expiry index entry, and its record m (a
 * copy of the stored one, rewritten with the new end). k: scratch. */
static int extend_lease(kvq_workq *w,
                        kvq_txn *txn,
                        kvq_workq_lease *lease,
                        kvq_buf *k,
                        kvq_buf *m,
                        int64_t deadline,
                        int64_t nd)
{
    int rc = x_key(k, w, deadline, lease->id);
    if (rc == 0)
        rc = kvq_txn_clear(txn, k->data, k->len);
    if (rc == 0)
        rc = x_key(k, w, nd, lease->id);
    if (rc == 0)
        rc = kvq_txn_set(txn, k->data, k->len, NULL, 0);
    /* A lease that now ends earlier may be the first to end: wake the long polls, which sleep
     * until the first lease ends (they watch tick). */
    if (rc == 0 && nd < deadline)
        rc = kvq__wq_counter_add(txn, &w->tick, 1);
    kvq__le64_put(m->data, (uint64_t)nd);
    if (rc == 0)
        rc = kvq__wq_id_key(k, &w->base_l, lease->id);
    if (rc == 0)
        rc = kvq_txn_set(txn, k->data, k->len, m->data, m->len);
    if (rc == 0)
        lease->deadline = nd;
    return rc;
}

int kvq__wq_settle_txn(
    kvq_workq *w, kvq_txn *txn, kvq_workq_lease *lease, int kind, int64_t arg, kvq__wq_tally *tally)
{
    /* An item of a batch lease (batch_lease.c) is settled there. */
    int handled = 0;
    int rc = kvq__wq_batch_settle(&handled, w, txn, lease, kind, arg, tally);
    if (rc != 0 || handled)
        return rc;
    int64_t rv;
    rc = kvq_txn_get_read_version(&rv, txn);
    if (rc != 0)
        return rc;
    kvq_buf k = KVQ_BUF_INIT, m = KVQ_BUF_INIT;
    kvq_bytes lv;
    int present = 0;
    rc = kvq__wq_id_key(&k, &w->base_l, lease->id);
    if (rc == 0)
        rc = kvq_txn_get(&lv, &present, txn, k.data, k.len, 0);
    if (rc != 0)
        goto out;
    if (!present || lv.len < 20) {
        rc = lease_gone(w, txn, lease, &k);
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
                        (long long)((rv - deadline) / KVQ__VERSIONS_PER_MS), (long long)deadline);
        goto out;
    }
    /* Copy what the lease record holds before writing (borrowed memory). */
    rc = kvq_buf_append(&m, lv.data, lv.len);
    if (rc != 0)
        goto out;
    suffix = m.data + 20;
    if (kind == SETTLE_EXTEND) {
        rc = extend_lease(w, txn, lease, &k, &m, deadline, rv + arg);
        goto out;
    }
    kvq_buf val = KVQ_BUF_INIT;
    if (kind == SETTLE_NACK) {
        kvq_bytes vv;
        int vp = 0;
        rc = kvq__wq_id_key(&k, &w->base_v, lease->id);
        if (rc == 0)
            rc = kvq_txn_get(&vv, &vp, txn, k.data, k.len, 0);
        if (rc == 0 && !vp)
            rc = kvq__error(KVQ_EDAMAGED, "a lease record has no value");
        if (rc == 0)
            rc = kvq__buf_set(&val, vv.data, vv.len);
    }
    /* Clear the lease, write the settled marker. */
    if (rc == 0)
        rc = kvq__wq_id_key(&k, &w->base_l, lease->id);
    if (rc == 0)
        rc = kvq_txn_clear(txn, k.data, k.len);
    if (rc == 0)
        rc = kvq__wq_id_key(&k, &w->base_v, lease->id);
    if (rc == 0)
        rc = kvq_txn_clear(txn, k.data, k.len);
    if (rc == 0)
        rc = x_key(&k, w, deadline, lease->id);
    if (rc == 0)
        rc = kvq_txn_clear(txn, k.data, k.len);
    int64_t since = -1;
    if (rc == 0)
        rc = kvq__wq_age_take(w, txn, lease->id, &since);
    uint8_t outcome = kind == SETTLE_ACK ? OUT_ACK : OUT_NACK;
    if (rc == 0)
        rc = s_key(&k, w, received, lease->id);
    if (rc == 0)
        rc = kvq_txn_set(txn, k.data, k.len, &outcome, 1);
    if (rc == 0 && tally != NULL) {
        tally->inflight--;
        tally->acked += kind == SETTLE_ACK;
    } else {
        if (rc == 0)
            rc = kvq__wq_counter_add(txn, &w->n_inflight, -1);
        if (rc == 0 && kind == SETTLE_ACK)
            rc = kvq__wq_counter_add(txn, &w->n_acked, 1);
    }
    if (rc == 0 && kind == SETTLE_NACK) {
        kvq_bytes v = { val.data, val.len };
        if (w->opts.max_deliveries > 0 && deliv >= w->opts.max_deliveries)
            rc = kvq__wq_to_dead(w, txn, suffix, slen, v, deliv, &k);
        else if (arg > 0) {
            rc = kvq__wq_key_raw(&k, &w->q->prefix, suffix, slen);
            int64_t prio = rc == 0 ? kvq__q_key_priority(w->q, k.data, k.len) : 0;
            if (rc == 0)
                rc = kvq__wq_put_delayed(w, txn, rv + arg, prio, deliv, v, &k);
        } else
            rc = kvq__wq_to_ready(w, txn, suffix, slen, v, deliv, since, &k);
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
    int rc = kvq__wq_check(w, txn, need_txn, fn);
    if (rc == 0 && lease == NULL)
        rc = kvq__error(KVQ_EINVAL, "%s: lease is NULL", fn);
    return rc;
}

int kvq_workq_ack_txn(kvq_workq *w, kvq_txn *txn, kvq_workq_lease *lease)
{
    int rc = check_settle(w, txn, 1, lease, "kvq_workq_ack_txn");
    return rc != 0 ? rc : kvq__wq_settle_txn(w, txn, lease, SETTLE_ACK, 0, NULL);
}

int kvq_workq_nack_txn(kvq_workq *w, kvq_txn *txn, kvq_workq_lease *lease, int64_t delay_ms)
{
    int rc = check_settle(w, txn, 1, lease, "kvq_workq_nack_txn");
    if (rc == 0 && (delay_ms < 0 || delay_ms > 366LL * 86400000))
        rc = kvq__error(KVQ_EINVAL, "nack delay of %lld ms is out of range", (long long)delay_ms);
    return rc != 0 ? rc
                   : kvq__wq_settle_txn(w, txn, lease, SETTLE_NACK, delay_ms * KVQ__VERSIONS_PER_MS,
                                        NULL);
}

int kvq_workq_extend_txn(kvq_workq *w, kvq_txn *txn, kvq_workq_lease *lease, int64_t lease_ms)
{
    int rc = check_settle(w, txn, 1, lease, "kvq_workq_extend_txn");
    int64_t lv = 0;
    if (rc == 0)
        rc = kvq__wq_lease_versions(w, lease_ms, &lv);
    return rc != 0 ? rc : kvq__wq_settle_txn(w, txn, lease, SETTLE_EXTEND, lv, NULL);
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
    return kvq__wq_settle_txn(c->w, txn, &c->lease, c->kind, c->arg, NULL);
}

/* The retry loop of the idempotent convenience forms: kvq_txn_run's, where after an attempt
 * that may have committed a retry tells what happened (a push's token is applied; a settle finds
 * the lease settled: KVQ_ELEASE_SETTLED, which then means done when settled_done is set). When
 * time runs out with the outcome unknown, one more attempt with a fresh budget settles it: it
 * reads and writes keys each earlier attempt read, so none still in flight can commit after it. */
int kvq__wq_run_idempotent(kvq_db *db, kvq_txn_fn body, void *ctx, int settled_done, int *maybe_out)
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
    if (maybe_out != NULL)
        *maybe_out = maybe;
    return rc;
}

static int settle_conv(kvq_workq *w, kvq_workq_lease *lease, int kind, int64_t arg)
{
    settle_ctx c = { w, *lease, kind, arg };
    int rc = kvq__wq_run_idempotent(w->q->db, settle_body, &c, kind != SETTLE_EXTEND, NULL);
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
    return rc != 0 ? rc : settle_conv(w, lease, SETTLE_NACK, delay_ms * KVQ__VERSIONS_PER_MS);
}

int kvq_workq_extend(kvq_workq *w, kvq_workq_lease *lease, int64_t lease_ms)
{
    int rc = check_settle(w, NULL, 0, lease, "kvq_workq_extend");
    int64_t lv = 0;
    if (rc == 0)
        rc = kvq__wq_lease_versions(w, lease_ms, &lv);
    return rc != 0 ? rc : settle_conv(w, lease, SETTLE_EXTEND, lv);
}
