/* Pushes to every type of queue: the transaction forms, which write one item (or a batch) at
 * the key its type's recipe gives, and the convenience forms, idempotent through push markers
 * (idempotency.c). */
#include <string.h>

#include "layers/queue/queue_internal.h"

/* ---- pushes (transaction forms) ----------------------------------------------------------- */

/* The recipe's next FIFO index: 1 + the last index, by a snapshot read (so that pushes never
 * conflict), 1 for an empty queue. */
static int fifo_next_index(int64_t *out, kvq_queue *q, kvq_txn *txn)
{
    const kvq_kv *kvs;
    size_t got;
    int rc = kvq__q_head(q, txn, KVQ__END_MAX, 1, KVQ_SNAPSHOT, &kvs, &got);
    if (rc != 0)
        return rc;
    *out = 1;
    if (got == 1) {
        int64_t last;
        rc = kvq__qk_parse_fifo(kvs[0].key.data + q->prefix.len, kvs[0].key.len - q->prefix.len,
                                &last);
        if (rc != 0)
            return rc;
        if (last == INT64_MAX)
            return kvq__error(KVQ_ERANGE, "the FIFO queue's last index is the largest integer");
        *out = last + 1;
    }
    return 0;
}

/* n FIFO or priority items, as n pushes of the recipe one after the other in txn would write
 * them: each push's read would see the previous one's item, so the indexes (counts) follow on
 * from one read: last + 1, last + 2, ... */
static int
recipe_push_many_txn(kvq_queue *q, kvq_txn *txn, const kvq_bytes *values, size_t n, int64_t p)
{
    int64_t next = 0;
    int rc = q->type == KVQ_QUEUE_FIFO ? fifo_next_index(&next, q, txn)
                                       : kvq__q_prio_next_count(&next, q, txn, p);
    /* The prefix is written once; each item's key is its tail after it. The random parts are
     * drawn RAND_CHUNK items at a time (one getrandom for each chunk, not one per item). */
    enum { RAND_CHUNK = 64 };
    uint8_t rnd[RAND_CHUNK][KVQ__RAND_LEN];
    kvq_buf key = KVQ_BUF_INIT;
    if (rc == 0 && kvq_buf_append(&key, q->prefix.data, q->prefix.len) != 0)
        rc = kvq__error(KVQ_ENOMEM, "out of memory for a key");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (i % RAND_CHUNK == 0) {
            size_t m = n - i < RAND_CHUNK ? n - i : RAND_CHUNK;
            rc = kvq__random_bytes(rnd, m * KVQ__RAND_LEN);
        }
        key.len = q->prefix.len;
        if (rc == 0)
            rc = q->type == KVQ_QUEUE_FIFO
                     ? kvq__qk_fifo_item_tail(&key, next, rnd[i % RAND_CHUNK])
                     : kvq__qk_prio_item_tail(&key, p, next, rnd[i % RAND_CHUNK]);
        if (rc == 0)
            rc = kvq_txn_set(txn, key.data, key.len, values[i].data, values[i].len);
        if (rc == 0 && i + 1 < n) {
            if (next == INT64_MAX)
                rc = kvq__error(KVQ_ERANGE, "a recipe index passed the largest integer");
            else
                next++;
        }
    }
    kvq_buf_dispose(&key);
    return rc;
}

/* Adds n to the push counter (npush): the durable queue's, or the key a FIFO or priority
 * queue's waiting consumers watch. An atomic add: pushes still never conflict. */
static int count_pushes(kvq_queue *q, kvq_txn *txn, size_t n)
{
    uint8_t add[8];
    kvq__le64_put(add, (uint64_t)n);
    return kvq_txn_atomic_op(txn, q->npush.data, q->npush.len, add, 8, KVQ_MUT_ADD);
}

static int durable_push_many_txn(kvq_queue *q, kvq_txn *txn, const kvq_bytes *values, size_t n)
{
    kvq_buf key = KVQ_BUF_INIT;
    int rc = 0;
    /* One key is packed; each item changes only its user version. */
    for (size_t i = 0; rc == 0 && i < n; i++) {
        uint16_t uv;
        rc = kvq_txn_next_user_version(&uv, txn);
        if (rc == 0 && i == 0)
            rc = kvq__qk_durable_push(&key, kvq__buf_bytes(&q->prefix), uv);
        else if (rc == 0)
            kvq__qk_durable_push_set_uv(&key, uv);
        if (rc == 0)
            rc = kvq_txn_set_versionstamped_key(txn, key.data, key.len, values[i].data,
                                                values[i].len);
    }
    kvq_buf_dispose(&key);
    if (rc == 0 && n > 0)
        rc = count_pushes(q, txn, n);
    return rc;
}

static int check_values(const kvq_bytes *values, size_t n)
{
    if (values == NULL)
        return kvq__error(KVQ_EINVAL, "values is NULL");
    if (n < 1 || n > KVQ__MAX_K)
        return kvq__error(KVQ_EINVAL, "a batch of %zu values (1 to %d allowed)", n, KVQ__MAX_K);
    for (size_t i = 0; i < n; i++) {
        int rc = kvq__q_check_value(values[i].data, values[i].len);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Pushes values (already checked) at priority p (priority queues only). */
static int push_many_any(kvq_queue *q, kvq_txn *txn, const kvq_bytes *values, size_t n, int64_t p)
{
    if (q->type == KVQ_QUEUE_DURABLE)
        return durable_push_many_txn(q, txn, values, n);
    int rc = recipe_push_many_txn(q, txn, values, n, p);
    if (rc == 0 && n > 0)
        rc = count_pushes(q, txn, n);
    return rc;
}

int kvq_queue_push_txn(kvq_queue *q, kvq_txn *txn, const uint8_t *value, size_t len)
{
    int rc = kvq__q_check_txn(q, txn, "kvq_queue_push_txn");
    if (rc == 0)
        rc = kvq__q_check_value(value, len);
    if (rc != 0)
        return rc;
    kvq_bytes v = { value, len };
    return push_many_any(q, txn, &v, 1, 0);
}

int kvq_queue_push_many_txn(kvq_queue *q, kvq_txn *txn, const kvq_bytes *values, size_t n)
{
    int rc = kvq__q_check_txn(q, txn, "kvq_queue_push_many_txn");
    if (rc == 0)
        rc = check_values(values, n);
    if (rc != 0)
        return rc;
    return push_many_any(q, txn, values, n, 0);
}

int kvq_queue_push_prio_txn(
    kvq_queue *q, kvq_txn *txn, const uint8_t *value, size_t len, int64_t priority)
{
    int rc = kvq__q_check_txn(q, txn, "kvq_queue_push_prio_txn");
    if (rc != 0)
        return rc;
    if (q->type != KVQ_QUEUE_PRIORITY)
        return kvq__q_wrong_type(q, "kvq_queue_push_prio_txn");
    rc = kvq__q_check_value(value, len);
    if (rc != 0)
        return rc;
    kvq_bytes v = { value, len };
    return push_many_any(q, txn, &v, 1, priority);
}

/* ---- convenience pushes ------------------------------------------------------------------- */

typedef struct push_arg {
    const kvq_bytes *values;
    size_t n;
    int64_t prio;
} push_arg;

/* The writes of one attempt; kvq__qop_run_marked begins it and writes its marker. */
static int push_write(kvq_txn *txn, kvq_queue *q, void *arg)
{
    push_arg *a = arg;
    return push_many_any(q, txn, a->values, a->n, a->prio);
}

static int push_conv(kvq_queue *q, const kvq_bytes *values, size_t n, int64_t prio)
{
    kvq__qop o;
    int rc = kvq__qop_init(&o, q, "m", 0);
    push_arg a = { values, n, prio };
    if (rc == 0)
        rc = kvq__qop_run_marked(&o, push_write, &a);
    kvq__qop_free(&o);
    return rc;
}

int kvq_queue_push(kvq_queue *q, const uint8_t *value, size_t len)
{
    int rc = kvq__q_check(q, "kvq_queue_push");
    if (rc == 0)
        rc = kvq__q_check_value(value, len);
    if (rc != 0)
        return rc;
    kvq_bytes v = { value, len };
    return push_conv(q, &v, 1, 0);
}

int kvq_queue_push_many(kvq_queue *q, const kvq_bytes *values, size_t n)
{
    int rc = kvq__q_check(q, "kvq_queue_push_many");
    if (rc == 0)
        rc = check_values(values, n);
    if (rc != 0)
        return rc;
    return push_conv(q, values, n, 0);
}

int kvq_queue_push_prio(kvq_queue *q, const uint8_t *value, size_t len, int64_t priority)
{
    int rc = kvq__q_check(q, "kvq_queue_push_prio");
    if (rc != 0)
        return rc;
    if (q->type != KVQ_QUEUE_PRIORITY)
        return kvq__q_wrong_type(q, "kvq_queue_push_prio");
    rc = kvq__q_check_value(value, len);
    if (rc != 0)
        return rc;
    kvq_bytes v = { value, len };
    return push_conv(q, &v, 1, priority);
}
