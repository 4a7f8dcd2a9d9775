/* What every queue operation shares, below the public API and the staging of high-contention
 * pops: argument checks, reading the head of either end, a pop of up to k items, the spread pop
 * of durable queues under contention and its pressure. */
#include <string.h>

#include "layers/queue/queue_internal.h"

/* ---- argument checks -------------------------------------------------------------------- */

const char *kvq_queue_type_name(kvq_queue_type t)
{
    switch (t) {
    case KVQ_QUEUE_FIFO:
        return "FIFO";
    case KVQ_QUEUE_PRIORITY:
        return "priority";
    case KVQ_QUEUE_DURABLE:
        return "durable";
    }
    return "unknown";
}

int kvq__q_check(const kvq_queue *q, const char *fn)
{
    if (q == NULL)
        return kvq__error(KVQ_EINVAL, "%s: queue is NULL", fn);
    return 0;
}

int kvq__q_check_txn(const kvq_queue *q, kvq_txn *txn, const char *fn)
{
    if (q == NULL || txn == NULL)
        return kvq__error(KVQ_EINVAL, "%s: NULL queue or transaction", fn);
    return 0;
}

int kvq__q_wrong_type(const kvq_queue *q, const char *fn)
{
    return kvq__error(KVQ_EWRONGTYPE, "%s does not apply to a %s queue", fn,
                      kvq_queue_type_name(q->type));
}

/* KVQ_EINVAL unless end is KVQ_QUEUE_MIN or KVQ_QUEUE_MAX (whose values are KVQ__END_MIN and
 * KVQ__END_MAX). */
int kvq__q_check_end(kvq_queue_end end, const char *fn)
{
    if (end != KVQ_QUEUE_MIN && end != KVQ_QUEUE_MAX)
        return kvq__error(KVQ_EINVAL, "%s: end %d is neither KVQ_QUEUE_MIN nor KVQ_QUEUE_MAX", fn,
                          (int)end);
    return 0;
}

int kvq__q_check_value(const uint8_t *value, size_t len)
{
    if (value == NULL && len > 0)
        return kvq__error(KVQ_EINVAL, "queue value is NULL with a length of %zu", len);
    if (len > KVQ_MAX_VALUE_SIZE)
        return kvq__error(KVQ_EVALUE_TOO_LARGE,
                          "queue value of %zu bytes is larger than the limit of %d bytes", len,
                          KVQ_MAX_VALUE_SIZE);
    return 0;
}

/* ---- reading and popping items ------------------------------------------------------------ */

int kvq__q_head(kvq_queue *q,
                kvq_txn *txn,
                int end,
                int limit,
                unsigned int flags,
                const kvq_kv **kvs,
                size_t *count)
{
    if (end == KVQ__END_MAX)
        flags |= KVQ_REVERSE;
    return kvq_txn_get_range(kvs, count, NULL, txn, q->items_lo.data, q->items_lo.len,
                             q->items_hi.data, q->items_hi.len, limit, flags);
}

int64_t kvq__q_key_priority(const kvq_queue *q, const uint8_t *key, size_t len)
{
    int64_t prio = 0, count;
    if (q->type != KVQ_QUEUE_PRIORITY || len < q->prefix.len)
        return 0;
    if (kvq__qk_parse_prio(key + q->prefix.len, len - q->prefix.len, &prio, &count) != 0)
        return 0;
    return prio;
}

/* Records in taken (when not NULL) that n items were taken from [*first, after). */
static int note_taken(
    kvq__q_taken *taken, const kvq_bytes *first, const uint8_t *after, size_t after_len, size_t n)
{
    if (taken == NULL)
        return 0;
    taken->n = 0;
    if (kvq__buf_set(&taken->lo, first->data, first->len) != 0 ||
        kvq__buf_set(&taken->hi, after, after_len) != 0)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    taken->n = n;
    return 0;
}

int kvq__q_pop_k_end(
    kvq_queue *q, kvq_txn *txn, int end, size_t k, kvq_bytes *outs, int64_t *prio, size_t *n)
{
    return kvq__q_pop_k_end_ex(q, txn, end, k, outs, prio, n, 0, NULL);
}

int kvq__q_pop_k_end_ex(kvq_queue *q,
                        kvq_txn *txn,
                        int end,
                        size_t k,
                        kvq_bytes *outs,
                        int64_t *prio,
                        size_t *n,
                        unsigned int flags,
                        kvq__q_taken *taken)
{
    const kvq_kv *kvs;
    size_t got;
    *n = 0;
    /* A snapshot read, then read conflicts on exactly the span taken (below), as the
     * high-contention fulfil takes them on exactly its keys. A plain read would also cover the
     * keys before the head, where a FIFO or priority push lands when the recipe's index
     * restarts at 1 on an emptied queue (or a lower priority arrives), and, when it returns
     * fewer than k items, the keys after the tail, where every durable push lands: the pop
     * would lose to such a push for nothing, since it reads nothing there and so may be ordered
     * before it. (A durable consumer alone beside a pusher would then lose races, raise its
     * pressure and spread out of order.) An empty answer covers the whole item range, as the
     * plain read did, unless the caller asks for none (KVQ__POP_EMPTY_NO_CONFLICT). */
    int rc = kvq__q_head(q, txn, end, (int)k, KVQ_SNAPSHOT, &kvs, &got);
    if (rc != 0)
        return rc;
    if (got == 0) {
        if (!(flags & KVQ__POP_EMPTY_NO_CONFLICT))
            rc = kvq_txn_add_conflict_range(txn, q->items_lo.data, q->items_lo.len,
                                            q->items_hi.data, q->items_hi.len, KVQ_CONFLICT_READ);
        return rc != 0 ? rc : KVQ_ENOTFOUND;
    }
    if (q->type == KVQ_QUEUE_DURABLE) {
        /* erlfdb's pop: one clear of the items read, one ADD to npop. Pushes append after every
         * item there is (their versionstamps are newer), so nothing can appear between the
         * items read: the conflict range and the clear cover exactly them. */
        uint8_t after[KVQ_MAX_KEY_SIZE + 1];
        const kvq_bytes *last = &kvs[got - 1].key;
        memcpy(after, last->data, last->len);
        after[last->len] = 0;
        rc = kvq_txn_add_conflict_range(txn, kvs[0].key.data, kvs[0].key.len, after, last->len + 1,
                                        KVQ_CONFLICT_READ);
        if (rc == 0)
            rc = kvq_txn_clear_range(txn, kvs[0].key.data, kvs[0].key.len, after, last->len + 1);
        if (rc == 0)
            rc = note_taken(taken, &kvs[0].key, after, last->len + 1, got);
        uint8_t add[8];
        kvq__le64_put(add, (uint64_t)got);
        if (rc == 0)
            rc = kvq_txn_atomic_op(txn, q->npop.data, q->npop.len, add, 8, KVQ_MUT_ADD);
    } else {
        /* The span from the smallest key read to just after the largest (the read went
         * backwards from the end for KVQ__END_MAX): a read conflict on it, and one clear of it.
         * The read returned every key in the span (its own writes included), so the clear
         * removes exactly the keys read, and an item pushed into the span after the read
         * version makes the commit fail with 1020 rather than be cleared. */
        const kvq_bytes *lo = end == KVQ__END_MAX ? &kvs[got - 1].key : &kvs[0].key;
        const kvq_bytes *hi = end == KVQ__END_MAX ? &kvs[0].key : &kvs[got - 1].key;
        uint8_t after[KVQ_MAX_KEY_SIZE + 1];
        memcpy(after, hi->data, hi->len);
        after[hi->len] = 0;
        rc = kvq_txn_add_conflict_range(txn, lo->data, lo->len, after, hi->len + 1,
                                        KVQ_CONFLICT_READ);
        if (rc == 0 && got == 1)
            rc = kvq_txn_clear(txn, lo->data, lo->len);
        else if (rc == 0)
            rc = kvq_txn_clear_range(txn, lo->data, lo->len, after, hi->len + 1);
    }
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < got; i++)
        outs[i] = kvs[i].value;
    if (prio != NULL)
        *prio = kvq__q_key_priority(q, kvs[0].key.data, kvs[0].key.len);
    *n = got;
    return 0;
}

int kvq__q_pop_spread(kvq_queue *q,
                      kvq_txn *txn,
                      size_t k,
                      size_t spread,
                      uint64_t seed,
                      kvq_bytes *outs,
                      size_t *n,
                      kvq__q_taken *taken)
{
    *n = 0;
    size_t window = k * (spread > 0 ? spread : 1);
    if (window > 4096)
        window = k > 4096 ? k : 4096;
    const kvq_kv *kvs;
    size_t got;
    int rc = kvq__q_head(q, txn, KVQ__END_MIN, (int)window, KVQ_SNAPSHOT, &kvs, &got);
    if (rc != 0)
        return rc;
    if (got == 0)
        return KVQ_ENOTFOUND; /* a snapshot read: the empty answer is that of the read version */
    size_t take = got < k ? got : k;
    size_t off = (size_t)(seed % (uint64_t)(got - take + 1));
    const kvq_bytes *first = &kvs[off].key, *last = &kvs[off + take - 1].key;
    uint8_t after[KVQ_MAX_KEY_SIZE + 1];
    memcpy(after, last->data, last->len);
    after[last->len] = 0;
    /* Pushes append after every item there is (their versionstamps are newer), so nothing can
     * appear between the items taken: the conflict range and the clear cover exactly them. */
    rc = kvq_txn_add_conflict_range(txn, first->data, first->len, after, last->len + 1,
                                    KVQ_CONFLICT_READ);
    if (rc == 0)
        rc = kvq_txn_clear_range(txn, first->data, first->len, after, last->len + 1);
    if (rc == 0)
        rc = note_taken(taken, first, after, last->len + 1, take);
    uint8_t add[8];
    kvq__le64_put(add, (uint64_t)take);
    if (rc == 0)
        rc = kvq_txn_atomic_op(txn, q->npop.data, q->npop.len, add, 8, KVQ_MUT_ADD);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < take; i++)
        outs[i] = kvs[off + i].value;
    *n = take;
    return 0;
}

/* ---- the spread pop's pressure ------------------------------------------------------------ */

/* A durable pop that lost the race for its items to another pop raises the handle's pressure
 * (the next pops spread out, kvq__q_pop_spread); each pop that commits lowers it, so that a
 * consumer that is alone again goes back to taking the head, in order. */
#define POP_PRESSURE_STEP 24
#define POP_PRESSURE_MAX  512

/* How many runs of k items the spread pop chooses among: more while the races go on. The
 * pressure settles where about one pop in POP_PRESSURE_STEP + 1 loses (a loss adds the step, a
 * win takes 1 off), so the window grows until conflicts are that rare. */
size_t kvq__q_pop_spread_width(kvq_queue *q)
{
    int p = __atomic_load_n(&q->pop_pressure, __ATOMIC_RELAXED);
    return p / 2 < 8 ? 8 : (size_t)(p / 2);
}

void kvq__q_pop_pressure_note(kvq_queue *q, int rc)
{
    int p = __atomic_load_n(&q->pop_pressure, __ATOMIC_RELAXED);
    if (rc == 0 && p > 0)
        __atomic_compare_exchange_n(&q->pop_pressure, &p, p - 1, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
}

int kvq__q_pop_lost_race(kvq_queue *q, kvq_txn *txn, const kvq__q_taken *taken, int *lost)
{
    *lost = 0;
    if (taken->n == 0)
        return 0;
    const kvq_kv *kvs;
    size_t got = 0;
    int rc = kvq_txn_get_range(&kvs, &got, NULL, txn, taken->lo.data, taken->lo.len, taken->hi.data,
                               taken->hi.len, (int)taken->n, KVQ_SNAPSHOT);
    if (rc != 0)
        return rc;
    if (got < taken->n) {
        *lost = 1;
        int p = __atomic_load_n(&q->pop_pressure, __ATOMIC_RELAXED);
        if (p < POP_PRESSURE_MAX)
            __atomic_compare_exchange_n(&q->pop_pressure, &p, p + POP_PRESSURE_STEP, 0,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
    return 0;
}

/* ---- the priority recipe's counts ------------------------------------------------------------ */

int kvq__q_prio_next_count(int64_t *out, kvq_queue *q, kvq_txn *txn, int64_t priority)
{
    *out = 0;
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    int rc = kvq__qk_prio_prefix(&lo, kvq__buf_bytes(&q->prefix), priority);
    if (rc == 0)
        rc = kvq_buf_append(&hi, lo.data, lo.len);
    if (rc == 0)
        rc = kvq__buf_put_byte(&lo, 0x00);
    if (rc == 0)
        rc = kvq__buf_put_byte(&hi, 0xff);
    const kvq_kv *kvs;
    size_t got = 0;
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo.data, lo.len, hi.data, hi.len, 1,
                               KVQ_SNAPSHOT | KVQ_REVERSE);
    if (rc == 0 && got == 1) {
        int64_t prio, last;
        rc = kvq__qk_parse_prio(kvs[0].key.data + q->prefix.len, kvs[0].key.len - q->prefix.len,
                                &prio, &last);
        if (rc == 0 && last == INT64_MAX)
            rc = kvq__error(KVQ_ERANGE, "the priority's last count is the largest integer");
        if (rc == 0)
            *out = last + 1;
    }
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    return rc;
}
