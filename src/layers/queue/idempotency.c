/* The idempotency machinery of the queues' convenience forms: push markers and pop result slots
 * keyed by time buckets, their pruning, the retry loop that tells an attempt which earlier one
 * committed, and the public idempotency tokens. */
#include <string.h>

#include "layers/queue/queue_internal.h"

/* ---- idempotency ---------------------------------------------------------------------------- */

/* Idempotency markers and pop result slots are keyed by a time bucket (minutes of database
 * versions). The queue's clock key bk + ("clock",) holds the latest bucket any pruner has seen
 * (an atomic MAX); pruning removes the buckets older than clock - window. So a marker of bucket
 * B can only be gone once clock - window > B, which a retry can check: absence proves nothing
 * then, and the caller is told 1021. */

static int clock_key(kvq_queue *q, kvq_buf *key)
{
    key->len = 0;
    return kvq__qk_mark_bound(key, kvq__buf_bytes(&q->prefix), "clock", 0, 0);
}

/* Reads the clock (0 and *present = 0 when it was never set). */
static int read_clock(kvq_queue *q, kvq_txn *txn, unsigned int flags, int64_t *out, int *present)
{
    kvq_buf key = KVQ_BUF_INIT;
    int rc = clock_key(q, &key);
    kvq_bytes v;
    int p = 0;
    if (rc == 0)
        rc = kvq_txn_get(&v, &p, txn, key.data, key.len, flags);
    kvq_buf_dispose(&key);
    *out = rc == 0 && p ? (int64_t)kvq__le_get(v.data, v.len) : 0;
    if (present != NULL)
        *present = p;
    return rc;
}

/* Prunes old buckets once per bucket and handle, and raises the clock. The clock is an atomic
 * MAX, so pruners never conflict with each other; the clear adds a write-conflict range over
 * old buckets only. Call it after reading any marker in the same transaction. */
static int prune_maybe(kvq_queue *q, kvq_txn *txn, int64_t bucket)
{
    int64_t last = __atomic_load_n(&q->pruned_bucket, __ATOMIC_RELAXED);
    if (bucket <= last)
        return 0;
    if (!__atomic_compare_exchange_n(&q->pruned_bucket, &last, bucket, 0, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
        return 0;
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    int rc = 0;
    int64_t cut = bucket - q->opts.idempotency_window_min;
    static const char *const tags[] = { "m", "r" };
    for (size_t i = 0; rc == 0 && cut > 0 && i < 2; i++) {
        lo.len = hi.len = 0;
        rc = kvq__qk_mark_bound(&lo, kvq__buf_bytes(&q->prefix), tags[i], 0, 0);
        if (rc == 0)
            rc = kvq__qk_mark_bound(&hi, kvq__buf_bytes(&q->prefix), tags[i], cut, 1);
        if (rc == 0)
            rc = kvq_txn_clear_range(txn, lo.data, lo.len, hi.data, hi.len);
    }
    uint8_t b[8];
    kvq__le64_put(b, (uint64_t)bucket);
    if (rc == 0)
        rc = clock_key(q, &lo);
    if (rc == 0)
        rc = kvq_txn_atomic_op(txn, lo.data, lo.len, b, 8, KVQ_MUT_MAX);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    return rc;
}

/* Reads the marker or slot of (tag, bucket, id), without snapshot. When it is absent, also
 * reads the clock: a marker of a bucket below clock - window may have been pruned, so absence
 * proves nothing (*expired = 1). A prune that commits meanwhile makes this transaction retry. */
static int read_mark(kvq_queue *q,
                     kvq_txn *txn,
                     const char *tag,
                     int64_t bucket,
                     const uint8_t *id,
                     kvq_bytes *value,
                     int *present,
                     int *expired)
{
    kvq_buf key = KVQ_BUF_INIT;
    *expired = 0;
    int rc = kvq__qk_mark(&key, kvq__buf_bytes(&q->prefix), tag, bucket, id);
    if (rc == 0)
        rc = kvq_txn_get(value, present, txn, key.data, key.len, 0);
    kvq_buf_dispose(&key);
    if (rc == 0 && !*present) {
        int64_t clock;
        rc = read_clock(q, txn, 0, &clock, NULL);
        if (rc == 0 && clock - q->opts.idempotency_window_min > bucket)
            *expired = 1;
    }
    return rc;
}

static int64_t bucket_of(const kvq_queue *q, int64_t version)
{
    return version < 0 ? 0 : version / q->bucket_versions;
}

/* Fixes the bucket of an operation from its first attempt: the read version's bucket, but never
 * older than the clock (a read version can lag: on the embedded engine it advances with time,
 * but is the last commit's version when it was taken during a commit, and after an idle period
 * that is old). *fresh = 0 when the queue has no clock yet. */
static int first_bucket(kvq_queue *q, kvq_txn *txn, int64_t rv, int64_t *out, int *fresh)
{
    int64_t clock;
    int present;
    int rc = read_clock(q, txn, KVQ_SNAPSHOT, &clock, &present);
    if (rc != 0)
        return rc;
    int64_t b = bucket_of(q, rv);
    *out = clock > b ? clock : b;
    *fresh = present;
    return 0;
}

static int tick_body(kvq_txn *txn, void *arg)
{
    kvq_queue *q = arg;
    static const uint8_t one[8] = { 1 };
    kvq_buf key = KVQ_BUF_INIT;
    int rc = kvq__qk_mark_bound(&key, kvq__buf_bytes(&q->prefix), "tick", 0, 0);
    if (rc == 0)
        rc = kvq_txn_atomic_op(txn, key.data, key.len, one, 8, KVQ_MUT_ADD);
    kvq_buf_dispose(&key);
    return rc;
}

int kvq__qop_init(kvq__qop *o, kvq_queue *q, const char *tag, size_t cap)
{
    memset(o, 0, sizeof(*o));
    o->q = q;
    o->tag = tag;
    o->bucket = -1;
    o->cap = cap;
    int rc = kvq__q_new_id(o->id);
    if (rc != 0)
        return rc;
    if (cap > 0) {
        o->cur.vals = kvq__calloc(cap, sizeof(kvq_buf));
        if (o->cur.vals == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory for %zu pop results", cap);
    }
    return 0;
}

static void qres_free(kvq__qres *r, size_t cap)
{
    if (r->vals == NULL)
        return;
    for (size_t i = 0; i < cap; i++)
        kvq_buf_dispose(&r->vals[i]);
    kvq__free(r->vals);
    r->vals = NULL;
}

void kvq__qop_free(kvq__qop *o)
{
    qres_free(&o->cur, o->cap);
    for (size_t i = 0; i < o->ncands; i++)
        qres_free(&o->cands[i], o->cap);
    kvq__free(o->cands);
    o->cands = NULL;
    o->ncands = 0;
}

static int mark_key(kvq__qop *o, kvq_buf *key)
{
    key->len = 0;
    return kvq__qk_mark(key, kvq__buf_bytes(&o->q->prefix), o->tag, o->bucket, o->id);
}

/* No attempt has committed as of this read version. Writing the marker (attempt 0, which no
 * attempt has) makes any attempt still in flight fail: each holds a read conflict on it. */
static int qop_fence(kvq__qop *o, kvq_txn *txn)
{
    kvq_buf key = KVQ_BUF_INIT;
    static const uint8_t none[4] = { 0 };
    int rc = mark_key(o, &key);
    if (rc == 0)
        rc = kvq_txn_set(txn, key.data, key.len, none, o->tag[0] == 'r' ? 4 : 0);
    kvq_buf_dispose(&key);
    if (rc == 0)
        rc = kvq_txn_commit(txn);
    if (rc != 0)
        return rc;
    o->settled = 1;
    return kvq__error(KVQ_ETRANSACTION_TIMED_OUT,
                      "the queue operation ran out of time and did not take effect");
}

int kvq__qop_begin(kvq__qop *o, kvq_txn *txn)
{
    kvq_queue *q = o->q;
    o->found = 0;
    o->cur.n = 0;
    o->cur.attempt = o->attempt;
    int64_t rv;
    int rc = kvq_txn_get_read_version(&rv, txn);
    if (rc != 0)
        return rc;
    if (o->bucket < 0) {
        int fresh;
        rc = first_bucket(q, txn, rv, &o->bucket, &fresh);
        if (rc == 0 && !fresh) {
            /* A queue without a clock (new, or never used by a convenience form): commit a
             * tick so that the read version is the present, then start the attempt again. */
            kvq_txn_reset(txn);
            rc = kvq_db_transact(q->db, tick_body, q);
            if (rc == 0)
                rc = kvq_txn_get_read_version(&rv, txn);
            if (rc == 0)
                rc = first_bucket(q, txn, rv, &o->bucket, &fresh);
        }
        if (rc != 0) {
            o->bucket = -1;
            return rc;
        }
    }
    o->rv = rv;
    if (o->maybe && !(kvq__db_test_flags(q->db) & KVQ_TEST_DROP_IDEMPOTENCY_MARKER)) {
        kvq_bytes v;
        int present = 0, expired = 0;
        rc = read_mark(q, txn, o->tag, o->bucket, o->id, &v, &present, &expired);
        if (rc != 0)
            return rc;
        if (expired) {
            o->expired = 1;
            return kvq__error(KVQ_ECOMMIT_UNKNOWN_RESULT,
                              "an attempt of this queue operation may have committed, and its "
                              "idempotency marker is older than the %d-minute window: the "
                              "outcome is unknown",
                              q->opts.idempotency_window_min);
        }
        if (present) {
            o->found = 1;
            o->found_attempt = v.len >= 4 ? (uint32_t)kvq__le_get(v.data, 4) : 0;
            KVQ__STAT_INC(q, dedup);
        } else if (o->checking) {
            return qop_fence(o, txn);
        }
    }
    return prune_maybe(q, txn, bucket_of(q, rv));
}

int kvq__qop_mark(kvq__qop *o, kvq_txn *txn)
{
    kvq_buf key = KVQ_BUF_INIT;
    int rc = mark_key(o, &key);
    uint8_t att[4];
    kvq__le32_put(att, o->attempt);
    if (rc == 0)
        rc = kvq_txn_set(txn, key.data, key.len, att, o->tag[0] == 'r' ? 4 : 0);
    /* The fence of qop_fence: this attempt cannot commit once the marker has been written. */
    if (rc == 0 && key.len < KVQ_MAX_KEY_SIZE) {
        key.data[key.len] = 0;
        rc = kvq_txn_add_conflict_range(txn, key.data, key.len, key.data, key.len + 1,
                                        KVQ_CONFLICT_READ);
    }
    kvq_buf_dispose(&key);
    return rc;
}

int kvq__qop_keep(kvq__qop *o, const kvq_bytes *vals, size_t n, int64_t prio)
{
    if (n > o->cap)
        return kvq__error(KVQ_EINTERNAL_ERROR, "kept %zu values, room for %zu", n, o->cap);
    for (size_t i = 0; i < n; i++) {
        int rc = kvq__buf_set(&o->cur.vals[i], vals[i].data, vals[i].len);
        if (rc != 0)
            return kvq__error(KVQ_ENOMEM, "out of memory copying a popped value");
    }
    o->cur.n = n;
    o->cur.prio = prio;
    o->cur.attempt = o->attempt;
    return 0;
}

int kvq__qop_maybe(kvq__qop *o)
{
    o->maybe = 1;
    if (o->cur.n == 0)
        return 0;
    kvq__qres *c = kvq__realloc(o->cands, (o->ncands + 1) * sizeof(*c));
    if (c == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    o->cands = c;
    kvq_buf *fresh = kvq__calloc(o->cap, sizeof(kvq_buf));
    if (fresh == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    o->cands[o->ncands++] = o->cur;
    memset(&o->cur, 0, sizeof(o->cur));
    o->cur.vals = fresh;
    return 0;
}

int kvq__qop_out_of_time(kvq__qop *o, kvq_txn *txn, int err)
{
    if (err != KVQ_ETRANSACTION_TIMED_OUT || !o->maybe || o->expired)
        return err;
    if (o->checking)
        return kvq__error(KVQ_ECOMMIT_UNKNOWN_RESULT,
                          "the queue operation ran out of time after an attempt that may have "
                          "committed, and looking for its marker failed too (error %d %s)",
                          err, kvq_errname(err));
    o->checking = 1;
    kvq_txn_reset(txn);
    return 0;
}

kvq__qres *kvq__qop_result(kvq__qop *o)
{
    if (!o->found)
        return &o->cur;
    for (size_t i = 0; i < o->ncands; i++)
        if (o->cands[i].attempt == o->found_attempt)
            return &o->cands[i];
    kvq__error(KVQ_ECOMMIT_UNKNOWN_RESULT,
               "the pop's result slot names attempt %u, which this call did not make",
               (unsigned)o->found_attempt);
    return NULL;
}

int kvq__qres_deliver(kvq__qres *r, kvq_buf *outs)
{
    for (size_t i = 0; i < r->n; i++) {
        kvq_buf t = outs[i];
        outs[i] = r->vals[i];
        r->vals[i] = t;
        r->vals[i].len = 0;
    }
    return 0;
}

/* The retry loop of the convenience forms: kvq_txn_run's, plus the bookkeeping of attempts that
 * may have committed. */
int kvq__qop_run(kvq__qop *o, kvq__qop_body body, void *arg)
{
    kvq_txn *txn;
    int rc = kvq_txn_create(&txn, o->q->db);
    if (rc != 0)
        return rc;
    for (;;) {
        o->attempt++;
        if (o->early)
            kvq__txn_early_read(txn);
        rc = body(txn, o, arg);
        if (rc != 0 && o->early) {
            /* No commit: what the attempt read must be durable before its outcome (an empty
             * queue, an error) is told or acted on. */
            int src = kvq__txn_early_settle(txn);
            if (src != 0)
                rc = src;
        }
        if (rc == 0)
            rc = kvq_txn_commit(txn);
        if (o->after_commit != NULL)
            o->after_commit(o->q, rc);
        o->last_rc = rc;
        if (rc == 0 || o->expired || o->settled)
            break;
        if (kvq__txn_maybe_committed(txn, rc)) {
            int r2 = kvq__qop_maybe(o);
            if (r2 != 0) {
                rc = r2;
                break;
            }
        }
        int rc2 = kvq_txn_on_error(txn, rc);
        if (rc2 != 0) {
            rc = kvq__qop_out_of_time(o, txn, rc2);
            if (rc == 0)
                continue;
            break;
        }
    }
    kvq_txn_destroy(txn);
    return rc;
}

typedef struct marked_arg {
    kvq__qop_write write;
    void *arg;
} marked_arg;

static int marked_body(kvq_txn *txn, kvq__qop *o, void *arg)
{
    marked_arg *m = arg;
    int rc = kvq__qop_begin(o, txn);
    if (rc != 0 || o->found)
        return rc;
    rc = m->write(txn, o->q, m->arg);
    if (rc == 0)
        rc = kvq__qop_mark(o, txn);
    return rc;
}

int kvq__qop_run_marked(kvq__qop *o, kvq__qop_write write, void *arg)
{
    marked_arg m = { write, arg };
    return kvq__qop_run(o, marked_body, &m);
}

/* ---- tokens ------------------------------------------------------------------------------- */

int kvq_queue_token_init(kvq_queue_token *tok)
{
    if (tok == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_queue_token_init: tok is NULL");
    tok->bucket = -1;
    return kvq__q_new_id(tok->id);
}

int kvq_queue_token_apply_txn(bool *out, kvq_queue *q, kvq_txn *txn, kvq_queue_token *tok)
{
    int rc = 0;
    if (q == NULL || txn == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_token_apply_txn: NULL queue or transaction");
    if (rc == 0 && (tok == NULL || out == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_token_apply_txn: NULL tok or out");
    if (rc != 0)
        return rc;
    *out = 0;
    int64_t rv;
    rc = kvq_txn_get_read_version(&rv, txn);
    if (rc != 0)
        return rc;
    if (tok->bucket < 0) {
        int fresh;
        rc = first_bucket(q, txn, rv, &tok->bucket, &fresh);
        if (rc != 0) {
            tok->bucket = -1;
            return rc;
        }
    }
    kvq_bytes v;
    int present = 0, expired = 0;
    rc = read_mark(q, txn, "m", tok->bucket, tok->id, &v, &present, &expired);
    if (rc == 0 && expired)
        rc = kvq__error(KVQ_ETIMED_OUT,
                        "the idempotency token is older than the %d-minute window; whether an "
                        "earlier attempt committed cannot be known",
                        q->opts.idempotency_window_min);
    if (rc == 0)
        rc = prune_maybe(q, txn, bucket_of(q, rv));
    if (rc != 0)
        return rc;
    if (present) {
        *out = 1;
        return 0;
    }
    kvq_buf key = KVQ_BUF_INIT;
    rc = kvq__qk_mark(&key, kvq__buf_bytes(&q->prefix), "m", tok->bucket, tok->id);
    if (rc == 0)
        rc = kvq_txn_set(txn, key.data, key.len, NULL, 0);
    kvq_buf_dispose(&key);
    return rc;
}
