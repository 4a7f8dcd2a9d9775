/* Queue handles, the operations every type shares, and the idempotency machinery of the
 * convenience forms (push markers, pop result slots, their pruning, the retry loop). */
#include <string.h>

#include "layers/layers_internal.h"

/* ---- small helpers ---------------------------------------------------------------------- */

void kvq__le64_put(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void kvq__le32_put(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t kvq__le_get(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n && i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int kvq__buf_set(kvq_buf *dst, const uint8_t *p, size_t n)
{
    dst->len = 0;
    if (n == 0)
        return kvq_buf_grow(dst, 1);
    return kvq_buf_append(dst, p, n);
}

int kvq__key_after(kvq_buf *out, const uint8_t *key, size_t len)
{
    static const uint8_t zero = 0;
    out->len = 0;
    int rc = kvq_buf_append(out, key, len);
    if (rc == 0)
        rc = kvq_buf_append(out, &zero, 1);
    return rc;
}

int kvq__conflict_key(kvq_txn *txn, const uint8_t *key, size_t len)
{
    uint8_t after[KVQ_MAX_KEY_SIZE + 1];
    if (len > KVQ_MAX_KEY_SIZE)
        return kvq__error(KVQ_EKEY_TOO_LARGE, "conflict key of %zu bytes", len);
    memcpy(after, key, len);
    after[len] = 0;
    return kvq_txn_add_conflict_range(txn, key, len, after, len + 1, KVQ_CONFLICT_READ);
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

static int check_q(const kvq_queue *q, const char *fn)
{
    if (q == NULL)
        return kvq__error(KVQ_EINVAL, "%s: queue is NULL", fn);
    return 0;
}

static int check_qt(const kvq_queue *q, kvq_txn *txn, const char *fn)
{
    if (q == NULL || txn == NULL)
        return kvq__error(KVQ_EINVAL, "%s: NULL queue or transaction", fn);
    return 0;
}

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

static const char *type_name(kvq_queue_type t)
{
    return kvq_queue_type_name(t);
}

static int wrong_type(const kvq_queue *q, const char *fn)
{
    return kvq__error(KVQ_EWRONGTYPE, "%s does not apply to a %s queue", fn, type_name(q->type));
}

static kvq_bytes bytes_of(const kvq_buf *b)
{
    kvq_bytes r = { b->data, b->len };
    return r;
}

/* ---- open / close ------------------------------------------------------------------------ */

static int append_byte(kvq_buf *b, uint8_t c)
{
    return kvq_buf_append(b, &c, 1);
}

static int build_keys(kvq_queue *q)
{
    kvq_bytes p = bytes_of(&q->prefix);
    int rc = 0;
    if (q->type == KVQ_QUEUE_DURABLE) {
        rc = kvq__qk_counter(&q->npush, p, "npush");
        if (rc == 0)
            rc = kvq__qk_counter(&q->npop, p, "npop");
        if (rc == 0)
            rc = kvq__qk_counter(&q->val_prefix, p, "val");
        if (rc == 0)
            rc = kvq_buf_append(&q->items_lo, q->val_prefix.data, q->val_prefix.len);
        if (rc == 0)
            rc = append_byte(&q->items_lo, 0x00);
        if (rc == 0)
            rc = kvq_buf_append(&q->items_hi, q->val_prefix.data, q->val_prefix.len);
        if (rc == 0)
            rc = append_byte(&q->items_hi, 0xff);
    } else {
        /* Integer type codes of the tuple encoding run from 0x0b to 0x1d. */
        rc = kvq_buf_append(&q->items_lo, p.data, p.len);
        if (rc == 0)
            rc = append_byte(&q->items_lo, 0x0b);
        if (rc == 0)
            rc = kvq_buf_append(&q->items_hi, p.data, p.len);
        if (rc == 0)
            rc = append_byte(&q->items_hi, 0x1e);
    }
    if (rc == 0)
        rc = kvq_buf_append(&q->bk, p.data, p.len);
    if (rc == 0)
        rc = append_byte(&q->bk, 0xff);
    if (rc == 0)
        rc = kvq__qk_hc_kind(&q->hc_pop_lo, p, "pop");
    if (rc == 0)
        rc = kvq_buf_append(&q->hc_pop_hi, q->hc_pop_lo.data, q->hc_pop_lo.len);
    if (rc == 0)
        rc = append_byte(&q->hc_pop_lo, 0x00);
    if (rc == 0)
        rc = append_byte(&q->hc_pop_hi, 0xff);
    if (rc == 0)
        rc = kvq__qk_hc_kind(&q->hc_rk_lo, p, "rk");
    if (rc == 0)
        rc = kvq_buf_append(&q->hc_rk_hi, q->hc_rk_lo.data, q->hc_rk_lo.len);
    if (rc == 0)
        rc = append_byte(&q->hc_rk_lo, 0x00);
    if (rc == 0)
        rc = append_byte(&q->hc_rk_hi, 0xff);
    return rc;
}

/* Default prefixes: pack(("Q",)) and pack(("P",)) (string elements) and pack((b"q",)) (a bytes
 * element), spelled out; test_queue_basic checks them against kvq_tuple_pack. */
static const uint8_t DEF_FIFO[] = { 0x02, 'Q', 0x00 };
static const uint8_t DEF_PRIO[] = { 0x02, 'P', 0x00 };
static const uint8_t DEF_DURABLE[] = { 0x01, 'q', 0x00 };

/* The longest prefix for which every key of the queue stays under the key limit: the largest
 * key kvq writes is a hand-over record holding the prefix and an item key. */
#define MAX_PREFIX 4000

int kvq_queue_open(kvq_queue **out,
                   kvq_db *db,
                   kvq_queue_type type,
                   const kvq_subspace *sub,
                   const kvq_queue_options *opts)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_queue_open: out is NULL");
    *out = NULL;
    if (db == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_queue_open: db is NULL");
    if (type != KVQ_QUEUE_FIFO && type != KVQ_QUEUE_PRIORITY && type != KVQ_QUEUE_DURABLE)
        return kvq__error(KVQ_EINVAL, "kvq_queue_open: unknown queue type %d", (int)type);
    kvq_queue_options o = KVQ_QUEUE_OPTIONS_INIT;
    if (opts != NULL) {
        if (opts->version != KVQ_QUEUE_OPTIONS_VERSION)
            return kvq__error(KVQ_EINVAL, "kvq_queue_open: options version %u (expected %d)",
                              opts->version, KVQ_QUEUE_OPTIONS_VERSION);
        o = *opts;
    }
    if ((o.flags & ~(unsigned int)KVQ_QUEUE_HIGH_CONTENTION) != 0)
        return kvq__error(KVQ_EINVAL, "kvq_queue_open: unknown flags 0x%x", o.flags);
    if ((o.flags & KVQ_QUEUE_HIGH_CONTENTION) && type == KVQ_QUEUE_DURABLE)
        return kvq__error(KVQ_EINVAL, "high-contention mode applies to FIFO and priority queues, "
                                      "not to durable queues (their pops batch with pop_k)");
    if (o.staging_timeout_ms < 1 || o.staging_timeout_ms > 86400000)
        return kvq__error(KVQ_EINVAL, "staging timeout of %lld ms is out of range (1 ms to 1 day)",
                          (long long)o.staging_timeout_ms);
    if (o.page_size < 1 || o.page_size > 100000)
        return kvq__error(KVQ_EINVAL, "page size %d is out of range (1 to 100,000)", o.page_size);
    if (o.hc_batch < 1 || o.hc_batch > 10000)
        return kvq__error(KVQ_EINVAL, "hc_batch %d is out of range (1 to 10,000)", o.hc_batch);
    if (o.idempotency_window_min < 2 || o.idempotency_window_min > 1440)
        return kvq__error(KVQ_EINVAL,
                          "idempotency window of %d minutes is out of range (2 to 1440)",
                          o.idempotency_window_min);

    const uint8_t *pfx;
    size_t pfx_len;
    if (sub == NULL) {
        pfx = type == KVQ_QUEUE_FIFO       ? DEF_FIFO
              : type == KVQ_QUEUE_PRIORITY ? DEF_PRIO
                                           : DEF_DURABLE;
        pfx_len = 3;
    } else {
        kvq_bytes b = kvq_subspace_prefix(sub);
        pfx = b.data;
        pfx_len = b.len;
    }
    if (pfx_len == 0 || pfx == NULL)
        return kvq__error(KVQ_EINVAL, "a queue's subspace prefix must not be empty (its "
                                      "bookkeeping lives at prefix + 0xFF)");
    if (pfx[0] == 0xff)
        return kvq__error(KVQ_EINVAL, "a queue's prefix must not start with 0xFF (system keys)");
    if (pfx_len > MAX_PREFIX)
        return kvq__error(KVQ_EINVAL, "a queue's prefix of %zu bytes is longer than %d bytes",
                          pfx_len, MAX_PREFIX);

    kvq_queue *q = kvq__calloc(1, sizeof(*q));
    if (q == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory opening a queue");
    q->db = db;
    q->type = type;
    q->opts = o;
    q->bucket_versions = KVQ__BUCKET_VERSIONS;
    int rc = kvq_buf_append(&q->prefix, pfx, pfx_len);
    if (rc == 0)
        rc = build_keys(q);
    if (rc != 0) {
        kvq_queue_close(q);
        return rc;
    }
    *out = q;
    return 0;
}

void kvq_queue_close(kvq_queue *q)
{
    if (q == NULL)
        return;
    kvq_buf *bufs[] = { &q->prefix,    &q->items_lo, &q->items_hi, &q->val_prefix,
                        &q->npush,     &q->npop,     &q->bk,       &q->hc_pop_lo,
                        &q->hc_pop_hi, &q->hc_rk_lo, &q->hc_rk_hi };
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        kvq_buf_dispose(bufs[i]);
    kvq__free(q);
}

kvq_queue_type kvq_queue_get_type(const kvq_queue *q)
{
    return q == NULL ? (kvq_queue_type)0 : q->type;
}

kvq_bytes kvq_queue_prefix(const kvq_queue *q)
{
    kvq_bytes none = { NULL, 0 };
    return q == NULL ? none : bytes_of(&q->prefix);
}

int kvq_queue_get_stats(kvq_queue_stats *out, const kvq_queue *q)
{
    if (out == NULL || q == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_queue_get_stats: NULL argument");
    const uint64_t *src = (const uint64_t *)&q->stats;
    uint64_t *dst = (uint64_t *)out;
    for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
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

int kvq__q_pop_k_end(
    kvq_queue *q, kvq_txn *txn, int end, size_t k, kvq_bytes *outs, int64_t *prio, size_t *n)
{
    const kvq_kv *kvs;
    size_t got;
    *n = 0;
    int rc = kvq__q_head(q, txn, end, (int)k, 0, &kvs, &got);
    if (rc != 0)
        return rc;
    if (got == 0)
        return KVQ_ENOTFOUND;
    if (q->type == KVQ_QUEUE_DURABLE) {
        /* erlfdb's pop: one clear of the range read, one ADD to npop. */
        uint8_t after[KVQ_MAX_KEY_SIZE + 1];
        const kvq_bytes *last = &kvs[got - 1].key;
        memcpy(after, last->data, last->len);
        after[last->len] = 0;
        rc = kvq_txn_clear_range(txn, kvs[0].key.data, kvs[0].key.len, after, last->len + 1);
        uint8_t add[8];
        kvq__le64_put(add, (uint64_t)got);
        if (rc == 0)
            rc = kvq_txn_atomic_op(txn, q->npop.data, q->npop.len, add, 8, KVQ_MUT_ADD);
    } else {
        /* Clear exactly the keys read: a concurrent push may land between them. */
        for (size_t i = 0; rc == 0 && i < got; i++)
            rc = kvq_txn_clear(txn, kvs[i].key.data, kvs[i].key.len);
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

int kvq__q_pop_spread(kvq_queue *q, kvq_txn *txn, size_t k, size_t spread, uint64_t seed,
                      kvq_bytes *outs, size_t *n)
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

/* ---- pushes (transaction forms) ----------------------------------------------------------- */

static int fifo_push_txn(kvq_queue *q, kvq_txn *txn, const uint8_t *value, size_t len)
{
    uint8_t rnd[KVQ__RAND_LEN];
    int rc = kvq__random_bytes(rnd, sizeof(rnd));
    if (rc != 0)
        return rc;
    /* The recipe: the last index by a snapshot read, so that pushes never conflict. */
    const kvq_kv *kvs;
    size_t got;
    rc = kvq__q_head(q, txn, KVQ__END_MAX, 1, KVQ_SNAPSHOT, &kvs, &got);
    if (rc != 0)
        return rc;
    int64_t index = 1;
    if (got == 1) {
        int64_t last;
        rc = kvq__qk_parse_fifo(kvs[0].key.data + q->prefix.len, kvs[0].key.len - q->prefix.len,
                                &last);
        if (rc != 0)
            return rc;
        if (last == INT64_MAX)
            return kvq__error(KVQ_ERANGE, "the FIFO queue's last index is the largest integer");
        index = last + 1;
    }
    kvq_buf key = KVQ_BUF_INIT;
    rc = kvq__qk_fifo_item(&key, bytes_of(&q->prefix), index, rnd);
    if (rc == 0)
        rc = kvq_txn_set(txn, key.data, key.len, value, len);
    kvq_buf_dispose(&key);
    return rc;
}

static int prio_push_txn(kvq_queue *q, kvq_txn *txn, const uint8_t *value, size_t len, int64_t p)
{
    uint8_t rnd[KVQ__RAND_LEN];
    int rc = kvq__random_bytes(rnd, sizeof(rnd));
    if (rc != 0)
        return rc;
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT, key = KVQ_BUF_INIT;
    rc = kvq__qk_prio_prefix(&lo, bytes_of(&q->prefix), p);
    if (rc == 0)
        rc = kvq_buf_append(&hi, lo.data, lo.len);
    if (rc == 0)
        rc = append_byte(&lo, 0x00);
    if (rc == 0)
        rc = append_byte(&hi, 0xff);
    const kvq_kv *kvs;
    size_t got = 0;
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo.data, lo.len, hi.data, hi.len, 1,
                               KVQ_SNAPSHOT | KVQ_REVERSE);
    int64_t count = 0;
    if (rc == 0 && got == 1) {
        int64_t prio, last;
        rc = kvq__qk_parse_prio(kvs[0].key.data + q->prefix.len, kvs[0].key.len - q->prefix.len,
                                &prio, &last);
        if (rc == 0 && last == INT64_MAX)
            rc = kvq__error(KVQ_ERANGE, "the priority's last count is the largest integer");
        if (rc == 0)
            count = last + 1;
    }
    if (rc == 0)
        rc = kvq__qk_prio_item(&key, bytes_of(&q->prefix), p, count, rnd);
    if (rc == 0)
        rc = kvq_txn_set(txn, key.data, key.len, value, len);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    kvq_buf_dispose(&key);
    return rc;
}

static int durable_push_many_txn(kvq_queue *q, kvq_txn *txn, const kvq_bytes *values, size_t n)
{
    kvq_buf key = KVQ_BUF_INIT;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        uint16_t uv;
        rc = kvq_txn_next_user_version(&uv, txn);
        key.len = 0;
        if (rc == 0)
            rc = kvq__qk_durable_push(&key, bytes_of(&q->prefix), uv);
        if (rc == 0)
            rc = kvq_txn_set_versionstamped_key(txn, key.data, key.len, values[i].data,
                                                values[i].len);
    }
    kvq_buf_dispose(&key);
    if (rc == 0 && n > 0) {
        uint8_t add[8];
        kvq__le64_put(add, (uint64_t)n);
        rc = kvq_txn_atomic_op(txn, q->npush.data, q->npush.len, add, 8, KVQ_MUT_ADD);
    }
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
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = q->type == KVQ_QUEUE_FIFO ? fifo_push_txn(q, txn, values[i].data, values[i].len)
                                       : prio_push_txn(q, txn, values[i].data, values[i].len, p);
    return rc;
}

int kvq_queue_push_txn(kvq_queue *q, kvq_txn *txn, const uint8_t *value, size_t len)
{
    int rc = check_qt(q, txn, "kvq_queue_push_txn");
    if (rc == 0)
        rc = kvq__q_check_value(value, len);
    if (rc != 0)
        return rc;
    kvq_bytes v = { value, len };
    return push_many_any(q, txn, &v, 1, 0);
}

int kvq_queue_push_many_txn(kvq_queue *q, kvq_txn *txn, const kvq_bytes *values, size_t n)
{
    int rc = check_qt(q, txn, "kvq_queue_push_many_txn");
    if (rc == 0)
        rc = check_values(values, n);
    if (rc != 0)
        return rc;
    return push_many_any(q, txn, values, n, 0);
}

int kvq_queue_push_prio_txn(
    kvq_queue *q, kvq_txn *txn, const uint8_t *value, size_t len, int64_t priority)
{
    int rc = check_qt(q, txn, "kvq_queue_push_prio_txn");
    if (rc != 0)
        return rc;
    if (q->type != KVQ_QUEUE_PRIORITY)
        return wrong_type(q, "kvq_queue_push_prio_txn");
    rc = kvq__q_check_value(value, len);
    if (rc != 0)
        return rc;
    return prio_push_txn(q, txn, value, len, priority);
}

/* ---- idempotency ---------------------------------------------------------------------------- */

/* Idempotency markers and pop result slots are keyed by a time bucket (minutes of database
 * versions). The queue's clock key bk + ("clock",) holds the latest bucket any pruner has seen
 * (an atomic MAX); pruning removes the buckets older than clock - window. So a marker of bucket
 * B can only be gone once clock - window > B, which a retry can check: absence proves nothing
 * then, and the caller is told 1021. */

static int clock_key(kvq_queue *q, kvq_buf *key)
{
    key->len = 0;
    return kvq__qk_mark_bound(key, bytes_of(&q->prefix), "clock", 0, 0);
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
        rc = kvq__qk_mark_bound(&lo, bytes_of(&q->prefix), tags[i], 0, 0);
        if (rc == 0)
            rc = kvq__qk_mark_bound(&hi, bytes_of(&q->prefix), tags[i], cut, 1);
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
    int rc = kvq__qk_mark(&key, bytes_of(&q->prefix), tag, bucket, id);
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
    int rc = kvq__qk_mark_bound(&key, bytes_of(&q->prefix), "tick", 0, 0);
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
    return kvq__qk_mark(key, bytes_of(&o->q->prefix), o->tag, o->bucket, o->id);
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

typedef int (*qop_body)(kvq_txn *txn, kvq__qop *o, void *arg);

/* A durable pop that lost the race for its items raises the handle's pressure (the next pops
 * spread out, kvq__q_pop_spread); each pop that commits lowers it, so that a consumer alone
 * goes back to taking the head, in order. */
#define POP_PRESSURE_STEP 24
#define POP_PRESSURE_MAX  512

/* How many runs of k items the spread pop chooses among: more while the races go on. The
 * pressure settles where about one pop in POP_PRESSURE_STEP + 1 loses (a loss adds the step, a
 * win takes 1 off), so the window grows until conflicts are that rare. */
static size_t pop_spread(kvq_queue *q)
{
    int p = __atomic_load_n(&q->pop_pressure, __ATOMIC_RELAXED);
    return p / 2 < 8 ? 8 : (size_t)(p / 2);
}

static void pop_pressure_note(kvq_queue *q, int rc)
{
    int p = __atomic_load_n(&q->pop_pressure, __ATOMIC_RELAXED);
    if (rc == KVQ_ENOT_COMMITTED && p < POP_PRESSURE_MAX)
        __atomic_compare_exchange_n(&q->pop_pressure, &p, p + POP_PRESSURE_STEP, 0,
                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    else if (rc == 0 && p > 0)
        __atomic_compare_exchange_n(&q->pop_pressure, &p, p - 1, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
}

/* The retry loop of the convenience forms: kvq_txn_run's, plus the bookkeeping of attempts that
 * may have committed. */
static int qop_run(kvq__qop *o, qop_body body, void *arg)
{
    kvq_txn *txn;
    int rc = kvq_txn_create(&txn, o->q->db);
    if (rc != 0)
        return rc;
    for (;;) {
        o->attempt++;
        rc = body(txn, o, arg);
        if (rc == 0)
            rc = kvq_txn_commit(txn);
        if (o->tag[0] == 'r' && o->q->type == KVQ_QUEUE_DURABLE)
            pop_pressure_note(o->q, rc);
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

/* ---- convenience pushes ------------------------------------------------------------------- */

typedef struct push_arg {
    const kvq_bytes *values;
    size_t n;
    int64_t prio;
} push_arg;

static int push_body(kvq_txn *txn, kvq__qop *o, void *arg)
{
    push_arg *a = arg;
    int rc = kvq__qop_begin(o, txn);
    if (rc != 0 || o->found)
        return rc;
    rc = push_many_any(o->q, txn, a->values, a->n, a->prio);
    if (rc == 0)
        rc = kvq__qop_mark(o, txn);
    return rc;
}

static int push_conv(kvq_queue *q, const kvq_bytes *values, size_t n, int64_t prio)
{
    kvq__qop o;
    int rc = kvq__qop_init(&o, q, "m", 0);
    push_arg a = { values, n, prio };
    if (rc == 0)
        rc = qop_run(&o, push_body, &a);
    kvq__qop_free(&o);
    return rc;
}

int kvq_queue_push(kvq_queue *q, const uint8_t *value, size_t len)
{
    int rc = check_q(q, "kvq_queue_push");
    if (rc == 0)
        rc = kvq__q_check_value(value, len);
    if (rc != 0)
        return rc;
    kvq_bytes v = { value, len };
    return push_conv(q, &v, 1, 0);
}

int kvq_queue_push_many(kvq_queue *q, const kvq_bytes *values, size_t n)
{
    int rc = check_q(q, "kvq_queue_push_many");
    if (rc == 0)
        rc = check_values(values, n);
    if (rc != 0)
        return rc;
    return push_conv(q, values, n, 0);
}

int kvq_queue_push_prio(kvq_queue *q, const uint8_t *value, size_t len, int64_t priority)
{
    int rc = check_q(q, "kvq_queue_push_prio");
    if (rc != 0)
        return rc;
    if (q->type != KVQ_QUEUE_PRIORITY)
        return wrong_type(q, "kvq_queue_push_prio");
    rc = kvq__q_check_value(value, len);
    if (rc != 0)
        return rc;
    kvq_bytes v = { value, len };
    return push_conv(q, &v, 1, priority);
}

/* ---- pops (transaction forms) ------------------------------------------------------------- */

int kvq_queue_pop_txn(kvq_queue *q, kvq_txn *txn, kvq_bytes *out)
{
    int rc = check_qt(q, txn, "kvq_queue_pop_txn");
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_pop_txn: out is NULL");
    if (rc != 0)
        return rc;
    size_t n;
    return kvq__q_pop_k_end(q, txn, KVQ__END_MIN, 1, out, NULL, &n);
}

int kvq_queue_pop_k_txn(kvq_queue *q, kvq_txn *txn, size_t k, kvq_bytes *outs, size_t *n)
{
    int rc = check_qt(q, txn, "kvq_queue_pop_k_txn");
    if (rc == 0 && (outs == NULL || n == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_pop_k_txn: NULL outs or n");
    if (rc == 0 && (k < 1 || k > KVQ__MAX_K))
        rc = kvq__error(KVQ_EINVAL, "pop of %zu items (1 to %d allowed)", k, KVQ__MAX_K);
    if (rc != 0)
        return rc;
    return kvq__q_pop_k_end(q, txn, KVQ__END_MIN, k, outs, NULL, n);
}

static int
pop_end_txn(kvq_queue *q, kvq_txn *txn, kvq_bytes *out, int64_t *priority, int end, const char *fn)
{
    int rc = check_qt(q, txn, fn);
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "%s: out is NULL", fn);
    if (rc != 0)
        return rc;
    if (q->type != KVQ_QUEUE_PRIORITY)
        return wrong_type(q, fn);
    size_t n;
    return kvq__q_pop_k_end(q, txn, end, 1, out, priority, &n);
}

int kvq_queue_pop_min_txn(kvq_queue *q, kvq_txn *txn, kvq_bytes *out, int64_t *priority)
{
    return pop_end_txn(q, txn, out, priority, KVQ__END_MIN, "kvq_queue_pop_min_txn");
}

int kvq_queue_pop_max_txn(kvq_queue *q, kvq_txn *txn, kvq_bytes *out, int64_t *priority)
{
    return pop_end_txn(q, txn, out, priority, KVQ__END_MAX, "kvq_queue_pop_max_txn");
}

/* ---- convenience pops ----------------------------------------------------------------------- */

typedef struct pop_arg {
    int end;
    size_t k;
    kvq_bytes *views;
    /* consume_k */
    int want_watch;
    kvq_watch *watch;
} pop_arg;

static int read_npush(kvq_queue *q, kvq_txn *txn, uint64_t *out)
{
    kvq_bytes v;
    int present;
    int rc = kvq_txn_get(&v, &present, txn, q->npush.data, q->npush.len, KVQ_SNAPSHOT);
    if (rc == 0)
        *out = present ? kvq__le_get(v.data, v.len) : 0;
    return rc;
}

static int pop_body(kvq_txn *txn, kvq__qop *o, void *arg)
{
    pop_arg *a = arg;
    kvq_queue *q = o->q;
    if (a->watch != NULL) {
        kvq_watch_destroy(a->watch);
        a->watch = NULL;
    }
    int rc = kvq__qop_begin(o, txn);
    if (rc != 0)
        return rc;
    if (o->found) {
        kvq__qres *r = kvq__qop_result(o);
        if (r == NULL)
            return KVQ_ECOMMIT_UNKNOWN_RESULT;
        if (a->want_watch && r->n < a->k) {
            /* Arm the watch here only if nothing was pushed since the attempt that committed
             * saw npush; otherwise the caller must not sleep (it gets no watch). */
            uint64_t now;
            rc = read_npush(q, txn, &now);
            if (rc == 0 && now == r->npush_seen)
                rc = kvq_queue_watch_txn(q, txn, &a->watch);
        }
        return rc;
    }
    size_t n = 0;
    int64_t prio = 0;
    if (q->type == KVQ_QUEUE_DURABLE && __atomic_load_n(&q->pop_pressure, __ATOMIC_RELAXED) > 0) {
        /* Consumers are racing for the head: take items at a position of this attempt's own
         * (the pop id and the attempt number choose it). */
        uint64_t seed = kvq__le_get(o->id, 8) ^ ((uint64_t)o->attempt * 0x9e3779b97f4a7c15ULL);
        seed ^= seed >> 29;
        seed *= 0xbf58476d1ce4e5b9ULL;
        seed ^= seed >> 32;
        rc = kvq__q_pop_spread(q, txn, a->k, pop_spread(q), seed, a->views, &n);
    } else {
        rc = kvq__q_pop_k_end(q, txn, a->end, a->k, a->views, &prio, &n);
    }
    if (rc == KVQ_ENOTFOUND && a->want_watch)
        rc = 0;
    if (rc != 0)
        return rc;
    rc = kvq__qop_keep(o, a->views, n, prio);
    if (rc == 0 && n > 0)
        rc = kvq__qop_mark(o, txn);
    if (rc == 0 && a->want_watch && n < a->k) {
        rc = read_npush(q, txn, &o->cur.npush_seen);
        if (rc == 0)
            rc = kvq_queue_watch_txn(q, txn, &a->watch);
    }
    return rc;
}

/* Runs a convenience pop of up to k items from one end into outs; *n receives the count. */
static int pop_conv(kvq_queue *q,
                    int end,
                    size_t k,
                    kvq_buf *outs,
                    size_t *n,
                    int64_t *prio,
                    kvq_watch **watch,
                    uint64_t *swept)
{
    kvq__qop o;
    pop_arg a = { end, k, NULL, watch != NULL, NULL };
    int rc = kvq__qop_init(&o, q, "r", k);
    if (rc != 0) {
        kvq__qop_free(&o);
        return rc;
    }
    int hc = (q->opts.flags & KVQ_QUEUE_HIGH_CONTENTION) && k == 1 && watch == NULL;
    if (hc) {
        rc = kvq__hc_pop(q, &o, end);
    } else {
        a.views = kvq__calloc(k, sizeof(kvq_bytes));
        rc = a.views == NULL ? kvq__error(KVQ_ENOMEM, "out of memory") : qop_run(&o, pop_body, &a);
        kvq__free(a.views);
    }
    kvq__qres *r = NULL;
    if (rc == 0) {
        r = kvq__qop_result(&o);
        if (r == NULL)
            rc = KVQ_ECOMMIT_UNKNOWN_RESULT;
    }
    if (rc == 0) {
        if (r->n == 0 && watch == NULL)
            rc = KVQ_ENOTFOUND;
        else {
            kvq__qres_deliver(r, outs);
            *n = r->n;
            if (prio != NULL)
                *prio = r->prio;
            KVQ__STAT_ADD(q, pops, r->n);
        }
    }
    if (watch != NULL) {
        *watch = rc == 0 ? a.watch : NULL;
        if (rc != 0)
            kvq_watch_destroy(a.watch);
    }
    if (q->type != KVQ_QUEUE_DURABLE) {
        uint64_t back = kvq__hc_maybe_sweep(q);
        if (swept != NULL)
            *swept = back;
    }
    kvq__qop_free(&o);
    return rc;
}

static int pop_one(kvq_queue *q, int end, kvq_buf *out, int64_t *prio, const char *fn)
{
    int rc = check_q(q, fn);
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "%s: out is NULL", fn);
    if (rc != 0)
        return rc;
    size_t n;
    uint64_t swept = 0;
    rc = pop_conv(q, end, 1, out, &n, prio, NULL, &swept);
    /* The queue looked empty, but staging upkeep has just put stranded items back. */
    if (rc == KVQ_ENOTFOUND && swept > 0)
        rc = pop_conv(q, end, 1, out, &n, prio, NULL, &swept);
    if (rc == KVQ_ENOTFOUND)
        return kvq__error(KVQ_ENOTFOUND, "the queue is empty");
    return rc;
}

int kvq_queue_pop(kvq_queue *q, kvq_buf *out)
{
    return pop_one(q, KVQ__END_MIN, out, NULL, "kvq_queue_pop");
}

int kvq_queue_pop_min(kvq_queue *q, kvq_buf *out, int64_t *priority)
{
    if (q != NULL && q->type != KVQ_QUEUE_PRIORITY)
        return wrong_type(q, "kvq_queue_pop_min");
    return pop_one(q, KVQ__END_MIN, out, priority, "kvq_queue_pop_min");
}

int kvq_queue_pop_max(kvq_queue *q, kvq_buf *out, int64_t *priority)
{
    if (q != NULL && q->type != KVQ_QUEUE_PRIORITY)
        return wrong_type(q, "kvq_queue_pop_max");
    return pop_one(q, KVQ__END_MAX, out, priority, "kvq_queue_pop_max");
}

int kvq_queue_pop_k(kvq_queue *q, size_t k, kvq_buf *outs, size_t *n)
{
    int rc = check_q(q, "kvq_queue_pop_k");
    if (rc == 0 && (outs == NULL || n == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_pop_k: NULL outs or n");
    if (rc == 0 && (k < 1 || k > KVQ__MAX_K))
        rc = kvq__error(KVQ_EINVAL, "pop of %zu items (1 to %d allowed)", k, KVQ__MAX_K);
    if (rc != 0)
        return rc;
    *n = 0;
    rc = pop_conv(q, KVQ__END_MIN, k, outs, n, NULL, NULL, NULL);
    if (rc == KVQ_ENOTFOUND)
        return kvq__error(KVQ_ENOTFOUND, "the queue is empty");
    return rc;
}

/* ---- peeks ------------------------------------------------------------------------------------
 */

static int peek_end_txn(kvq_queue *q,
                        kvq_txn *txn,
                        int end,
                        kvq_bytes *out,
                        int64_t *priority,
                        unsigned int flags,
                        const char *fn)
{
    int rc = check_qt(q, txn, fn);
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "%s: out is NULL", fn);
    if (rc == 0 && (flags & ~(unsigned int)KVQ_SNAPSHOT) != 0)
        rc = kvq__error(KVQ_EINVAL, "%s: flags 0x%x (only KVQ_SNAPSHOT allowed)", fn, flags);
    if (rc != 0)
        return rc;
    const kvq_kv *kvs;
    size_t got;
    rc = kvq__q_head(q, txn, end, 1, flags, &kvs, &got);
    if (rc != 0)
        return rc;
    if (got == 0)
        return KVQ_ENOTFOUND;
    *out = kvs[0].value;
    if (priority != NULL)
        *priority = kvq__q_key_priority(q, kvs[0].key.data, kvs[0].key.len);
    return 0;
}

int kvq_queue_peek_txn(kvq_queue *q, kvq_txn *txn, kvq_bytes *out, unsigned int flags)
{
    return peek_end_txn(q, txn, KVQ__END_MIN, out, NULL, flags, "kvq_queue_peek_txn");
}

int kvq_queue_peek_min_txn(
    kvq_queue *q, kvq_txn *txn, kvq_bytes *out, int64_t *priority, unsigned int flags)
{
    if (q != NULL && q->type != KVQ_QUEUE_PRIORITY)
        return wrong_type(q, "kvq_queue_peek_min_txn");
    return peek_end_txn(q, txn, KVQ__END_MIN, out, priority, flags, "kvq_queue_peek_min_txn");
}

int kvq_queue_peek_max_txn(
    kvq_queue *q, kvq_txn *txn, kvq_bytes *out, int64_t *priority, unsigned int flags)
{
    if (q != NULL && q->type != KVQ_QUEUE_PRIORITY)
        return wrong_type(q, "kvq_queue_peek_max_txn");
    return peek_end_txn(q, txn, KVQ__END_MAX, out, priority, flags, "kvq_queue_peek_max_txn");
}

typedef struct peek_arg {
    kvq_queue *q;
    int end;
    kvq_buf *out;
    int64_t prio;
} peek_arg;

static int peek_body(kvq_txn *txn, void *arg)
{
    peek_arg *a = arg;
    kvq_bytes v;
    int rc = peek_end_txn(a->q, txn, a->end, &v, &a->prio, KVQ_SNAPSHOT, "kvq_queue_peek");
    if (rc == 0)
        rc = kvq__buf_set(a->out, v.data, v.len);
    return rc;
}

static int peek_conv(kvq_queue *q, int end, kvq_buf *out, int64_t *priority, const char *fn)
{
    int rc = check_q(q, fn);
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "%s: out is NULL", fn);
    if (rc != 0)
        return rc;
    peek_arg a = { q, end, out, 0 };
    rc = kvq_db_transact(q->db, peek_body, &a);
    if (rc == KVQ_ENOTFOUND)
        return kvq__error(KVQ_ENOTFOUND, "the queue is empty");
    if (rc == 0 && priority != NULL)
        *priority = a.prio;
    return rc;
}

int kvq_queue_peek(kvq_queue *q, kvq_buf *out)
{
    return peek_conv(q, KVQ__END_MIN, out, NULL, "kvq_queue_peek");
}

int kvq_queue_peek_min(kvq_queue *q, kvq_buf *out, int64_t *priority)
{
    if (q != NULL && q->type != KVQ_QUEUE_PRIORITY)
        return wrong_type(q, "kvq_queue_peek_min");
    return peek_conv(q, KVQ__END_MIN, out, priority, "kvq_queue_peek_min");
}

int kvq_queue_peek_max(kvq_queue *q, kvq_buf *out, int64_t *priority)
{
    if (q != NULL && q->type != KVQ_QUEUE_PRIORITY)
        return wrong_type(q, "kvq_queue_peek_max");
    return peek_conv(q, KVQ__END_MAX, out, priority, "kvq_queue_peek_max");
}

/* ---- length -----------------------------------------------------------------------------------
 */

static int durable_len_txn(kvq_queue *q, kvq_txn *txn, uint64_t *out, unsigned int flags)
{
    kvq_bytes a, b;
    int pa, pb;
    int rc = kvq_txn_get(&a, &pa, txn, q->npush.data, q->npush.len, flags);
    uint64_t push = 0, pop = 0;
    if (rc == 0 && pa)
        push = kvq__le_get(a.data, a.len);
    if (rc == 0)
        rc = kvq_txn_get(&b, &pb, txn, q->npop.data, q->npop.len, flags);
    if (rc == 0 && pb)
        pop = kvq__le_get(b.data, b.len);
    if (rc == 0)
        *out = push > pop ? push - pop : 0;
    return rc;
}

/* Counts the items from *cursor (a key; empty means the start) to the end, at most `pages`
 * pages; leaves *cursor after the last key counted, and *done = 1 at the end of the range. */
static int count_pages(kvq_queue *q,
                       kvq_txn *txn,
                       kvq_buf *cursor,
                       int pages,
                       unsigned int flags,
                       uint64_t *count,
                       int *done)
{
    *done = 0;
    for (int p = 0; pages < 0 || p < pages; p++) {
        const uint8_t *b = cursor->len ? cursor->data : q->items_lo.data;
        size_t bl = cursor->len ? cursor->len : q->items_lo.len;
        const kvq_kv *kvs;
        size_t got;
        int more = 0;
        int rc = kvq_txn_get_range(&kvs, &got, &more, txn, b, bl, q->items_hi.data, q->items_hi.len,
                                   q->opts.page_size, flags);
        if (rc != 0)
            return rc;
        *count += got;
        if (got < (size_t)q->opts.page_size) {
            *done = 1;
            return 0;
        }
        rc = kvq__key_after(cursor, kvs[got - 1].key.data, kvs[got - 1].key.len);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int kvq_queue_len_txn(kvq_queue *q, kvq_txn *txn, uint64_t *out, unsigned int flags)
{
    int rc = check_qt(q, txn, "kvq_queue_len_txn");
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_len_txn: out is NULL");
    if (rc == 0 && (flags & ~(unsigned int)KVQ_SNAPSHOT) != 0)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_len_txn: flags 0x%x", flags);
    if (rc != 0)
        return rc;
    if (q->type == KVQ_QUEUE_DURABLE)
        return durable_len_txn(q, txn, out, flags);
    kvq_buf cursor = KVQ_BUF_INIT;
    uint64_t n = 0;
    int done;
    rc = count_pages(q, txn, &cursor, -1, flags, &n, &done);
    kvq_buf_dispose(&cursor);
    if (rc == 0)
        *out = n;
    return rc;
}

typedef struct len_arg {
    kvq_queue *q;
    kvq_buf cursor;
    uint64_t base, count;
    int done;
} len_arg;

static int len_page_body(kvq_txn *txn, void *arg)
{
    len_arg *a = arg;
    if (a->q->type == KVQ_QUEUE_DURABLE) {
        a->done = 1;
        return durable_len_txn(a->q, txn, &a->count, 0);
    }
    /* A retry starts the page again from the cursor of the last committed page. */
    a->count = 0;
    kvq_buf cur = KVQ_BUF_INIT;
    int rc = kvq__buf_set(&cur, a->cursor.data, a->cursor.len);
    if (rc == 0)
        rc = count_pages(a->q, txn, &cur, 1, KVQ_SNAPSHOT, &a->count, &a->done);
    if (rc == 0) {
        kvq_buf t = a->cursor;
        a->cursor = cur;
        cur = t;
    }
    kvq_buf_dispose(&cur);
    return rc;
}

int kvq_queue_len(kvq_queue *q, uint64_t *out)
{
    int rc = check_q(q, "kvq_queue_len");
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_len: out is NULL");
    if (rc != 0)
        return rc;
    len_arg a = { q, KVQ_BUF_INIT, 0, 0, 0 };
    while (rc == 0 && !a.done) {
        rc = kvq_db_transact(q->db, len_page_body, &a);
        a.base += a.count;
    }
    kvq_buf_dispose(&a.cursor);
    if (rc == 0)
        *out = q->type == KVQ_QUEUE_DURABLE ? a.count : a.base;
    return rc;
}

/* ---- clear, delete
 * ------------------------------------------------------------------------------- */

int kvq_queue_clear_txn(kvq_queue *q, kvq_txn *txn)
{
    int rc = check_qt(q, txn, "kvq_queue_clear_txn");
    if (rc != 0)
        return rc;
    rc = kvq_txn_clear_range(txn, q->items_lo.data, q->items_lo.len, q->items_hi.data,
                             q->items_hi.len);
    if (rc != 0 || q->type != KVQ_QUEUE_DURABLE)
        return rc;
    /* Keep npush − npop equal to the number of items: npop := npush. Reading npush without
     * snapshot makes a concurrent push (whose item this clear would miss or remove) conflict. */
    kvq_bytes v;
    int present;
    rc = kvq_txn_get(&v, &present, txn, q->npush.data, q->npush.len, 0);
    if (rc != 0)
        return rc;
    uint8_t val[8];
    kvq__le64_put(val, present ? kvq__le_get(v.data, v.len) : 0);
    return kvq_txn_set(txn, q->npop.data, q->npop.len, val, 8);
}

static int clear_body(kvq_txn *txn, void *arg)
{
    return kvq_queue_clear_txn(arg, txn);
}

int kvq_queue_clear(kvq_queue *q)
{
    int rc = check_q(q, "kvq_queue_clear");
    if (rc != 0)
        return rc;
    return kvq_db_transact(q->db, clear_body, q);
}

int kvq_queue_delete_txn(kvq_queue *q, kvq_txn *txn)
{
    int rc = check_qt(q, txn, "kvq_queue_delete_txn");
    if (rc != 0)
        return rc;
    /* Everything that starts with the prefix: [prefix, strinc(prefix)). The prefix never
     * starts with 0xFF, so strinc exists. */
    kvq_buf end = KVQ_BUF_INIT;
    rc = kvq_strinc(&end, q->prefix.data, q->prefix.len);
    if (rc == 0)
        rc = kvq_txn_clear_range(txn, q->prefix.data, q->prefix.len, end.data, end.len);
    kvq_buf_dispose(&end);
    return rc;
}

static int delete_body(kvq_txn *txn, void *arg)
{
    return kvq_queue_delete_txn(arg, txn);
}

int kvq_queue_delete(kvq_queue *q)
{
    int rc = check_q(q, "kvq_queue_delete");
    if (rc != 0)
        return rc;
    return kvq_db_transact(q->db, delete_body, q);
}

/* ---- iteration ----------------------------------------------------------------------------------
 */

int kvq_queue_iterate_txn(kvq_queue *q, kvq_txn *txn, kvq_queue_iter_fn fn, void *payload)
{
    int rc = check_qt(q, txn, "kvq_queue_iterate_txn");
    if (rc == 0 && fn == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_iterate_txn: fn is NULL");
    if (rc != 0)
        return rc;
    kvq_buf cursor = KVQ_BUF_INIT;
    for (;;) {
        const uint8_t *b = cursor.len ? cursor.data : q->items_lo.data;
        size_t bl = cursor.len ? cursor.len : q->items_lo.len;
        const kvq_kv *kvs;
        size_t got;
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, b, bl, q->items_hi.data, q->items_hi.len,
                               q->opts.page_size, KVQ_SNAPSHOT);
        for (size_t i = 0; rc == 0 && i < got; i++)
            rc = fn(kvs[i].value, kvq__q_key_priority(q, kvs[i].key.data, kvs[i].key.len), payload);
        if (rc != 0 || got < (size_t)q->opts.page_size)
            break;
        rc = kvq__key_after(&cursor, kvs[got - 1].key.data, kvs[got - 1].key.len);
        if (rc != 0)
            break;
    }
    kvq_buf_dispose(&cursor);
    return rc;
}

typedef struct iter_arg {
    kvq_queue *q;
    kvq_buf cursor; /* where the next page starts (empty: the beginning) */
    kvq_buf next;   /* where the page after this one starts */
    kvq_buf *vals;  /* page_size values */
    int64_t *prios;
    size_t n;
    int done;
} iter_arg;

static int iter_page_body(kvq_txn *txn, void *arg)
{
    iter_arg *a = arg;
    kvq_queue *q = a->q;
    const uint8_t *b = a->cursor.len ? a->cursor.data : q->items_lo.data;
    size_t bl = a->cursor.len ? a->cursor.len : q->items_lo.len;
    const kvq_kv *kvs;
    size_t got;
    a->n = 0;
    int rc = kvq_txn_get_range(&kvs, &got, NULL, txn, b, bl, q->items_hi.data, q->items_hi.len,
                               q->opts.page_size, KVQ_SNAPSHOT);
    for (size_t i = 0; rc == 0 && i < got; i++) {
        rc = kvq__buf_set(&a->vals[i], kvs[i].value.data, kvs[i].value.len);
        a->prios[i] = kvq__q_key_priority(q, kvs[i].key.data, kvs[i].key.len);
    }
    if (rc != 0)
        return rc;
    a->n = got;
    a->done = got < (size_t)q->opts.page_size;
    if (!a->done)
        rc = kvq__key_after(&a->next, kvs[got - 1].key.data, kvs[got - 1].key.len);
    return rc;
}

int kvq_queue_iterate(kvq_queue *q, kvq_queue_iter_fn fn, void *payload)
{
    int rc = check_q(q, "kvq_queue_iterate");
    if (rc == 0 && fn == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_iterate: fn is NULL");
    if (rc != 0)
        return rc;
    size_t ps = (size_t)q->opts.page_size;
    iter_arg a = { q, KVQ_BUF_INIT, KVQ_BUF_INIT, NULL, NULL, 0, 0 };
    a.vals = kvq__calloc(ps, sizeof(kvq_buf));
    a.prios = kvq__calloc(ps, sizeof(int64_t));
    if (a.vals == NULL || a.prios == NULL)
        rc = kvq__error(KVQ_ENOMEM, "out of memory for a page of %zu values", ps);
    while (rc == 0) {
        rc = kvq_db_transact(q->db, iter_page_body, &a);
        for (size_t i = 0; rc == 0 && i < a.n; i++) {
            kvq_bytes v = { a.vals[i].data, a.vals[i].len };
            rc = fn(v, a.prios[i], payload);
        }
        if (rc != 0 || a.done)
            break;
        kvq_buf t = a.cursor;
        a.cursor = a.next;
        a.next = t;
    }
    if (a.vals != NULL)
        for (size_t i = 0; i < ps; i++)
            kvq_buf_dispose(&a.vals[i]);
    kvq__free(a.vals);
    kvq__free(a.prios);
    kvq_buf_dispose(&a.cursor);
    kvq_buf_dispose(&a.next);
    return rc;
}

/* ---- durable extras
 * ------------------------------------------------------------------------------ */

int kvq_queue_watch_txn(kvq_queue *q, kvq_txn *txn, kvq_watch **out)
{
    int rc = check_qt(q, txn, "kvq_queue_watch_txn");
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_watch_txn: out is NULL");
    if (rc != 0)
        return rc;
    *out = NULL;
    if (q->type != KVQ_QUEUE_DURABLE)
        return wrong_type(q, "kvq_queue_watch_txn");
    return kvq_txn_watch(out, txn, q->npush.data, q->npush.len);
}

typedef struct watch_arg {
    kvq_queue *q;
    kvq_watch *w;
} watch_arg;

static int watch_body(kvq_txn *txn, void *arg)
{
    watch_arg *a = arg;
    kvq_watch_destroy(a->w);
    a->w = NULL;
    return kvq_queue_watch_txn(a->q, txn, &a->w);
}

int kvq_queue_watch(kvq_queue *q, kvq_watch **out)
{
    int rc = check_q(q, "kvq_queue_watch");
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_watch: out is NULL");
    if (rc != 0)
        return rc;
    *out = NULL;
    if (q->type != KVQ_QUEUE_DURABLE)
        return wrong_type(q, "kvq_queue_watch");
    watch_arg a = { q, NULL };
    rc = kvq_db_transact(q->db, watch_body, &a);
    if (rc != 0) {
        kvq_watch_destroy(a.w);
        return rc;
    }
    *out = a.w;
    return 0;
}

int kvq_queue_consume_k_txn(
    kvq_queue *q, kvq_txn *txn, size_t k, kvq_bytes *outs, size_t *n, kvq_watch **watch)
{
    int rc = check_qt(q, txn, "kvq_queue_consume_k_txn");
    if (rc == 0 && (outs == NULL || n == NULL || watch == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_consume_k_txn: NULL outs, n or watch");
    if (rc == 0 && (k < 1 || k > KVQ__MAX_K))
        rc = kvq__error(KVQ_EINVAL, "consume of %zu items (1 to %d allowed)", k, KVQ__MAX_K);
    if (rc != 0)
        return rc;
    *watch = NULL;
    *n = 0;
    if (q->type != KVQ_QUEUE_DURABLE)
        return wrong_type(q, "kvq_queue_consume_k_txn");
    rc = kvq__q_pop_k_end(q, txn, KVQ__END_MIN, k, outs, NULL, n);
    if (rc == KVQ_ENOTFOUND)
        rc = 0;
    if (rc == 0 && *n < k)
        rc = kvq_queue_watch_txn(q, txn, watch);
    return rc;
}

int kvq_queue_consume_k(kvq_queue *q, size_t k, kvq_buf *outs, size_t *n, kvq_watch **watch)
{
    int rc = check_q(q, "kvq_queue_consume_k");
    if (rc == 0 && (outs == NULL || n == NULL || watch == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_consume_k: NULL outs, n or watch");
    if (rc == 0 && (k < 1 || k > KVQ__MAX_K))
        rc = kvq__error(KVQ_EINVAL, "consume of %zu items (1 to %d allowed)", k, KVQ__MAX_K);
    if (rc != 0)
        return rc;
    *watch = NULL;
    *n = 0;
    if (q->type != KVQ_QUEUE_DURABLE)
        return wrong_type(q, "kvq_queue_consume_k");
    return pop_conv(q, KVQ__END_MIN, k, outs, n, NULL, watch, NULL);
}

static int source_pop(void *queue, kvq_txn *txn, size_t k, kvq_bytes *values, size_t *n)
{
    int rc = kvq_queue_pop_k_txn(queue, txn, k, values, n);
    if (rc == KVQ_ENOTFOUND) {
        *n = 0;
        rc = 0;
    }
    return rc;
}

/* The runtime's idempotent pop: kvq_queue_consume_k, whose result slots return a batch whose
 * commit reported 1021 instead of losing it. */
static int source_consume(void *queue, size_t k, kvq_buf *outs, size_t *n, kvq_watch **watch)
{
    return kvq_queue_consume_k(queue, k, outs, n, watch);
}

int kvq_queue_consumer_source(kvq_consumer_source *out, kvq_queue *q)
{
    if (out == NULL || q == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_queue_consumer_source: NULL argument");
    if (q->type != KVQ_QUEUE_DURABLE)
        return wrong_type(q, "kvq_queue_consumer_source");
    memset(out, 0, sizeof(*out));
    out->pop = source_pop;
    out->consume = source_consume;
    out->queue = q;
    out->wake_key = bytes_of(&q->npush);
    return 0;
}

/* ---- tokens -------------------------------------------------------------------------------------
 */

int kvq_queue_token_init(kvq_queue_token *tok)
{
    if (tok == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_queue_token_init: tok is NULL");
    tok->bucket = -1;
    return kvq__q_new_id(tok->id);
}

int kvq_queue_token_apply_txn(kvq_queue *q, kvq_txn *txn, kvq_queue_token *tok, int *already)
{
    int rc = check_qt(q, txn, "kvq_queue_token_apply_txn");
    if (rc == 0 && (tok == NULL || already == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_token_apply_txn: NULL tok or already");
    if (rc != 0)
        return rc;
    *already = 0;
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
        *already = 1;
        return 0;
    }
    kvq_buf key = KVQ_BUF_INIT;
    rc = kvq__qk_mark(&key, bytes_of(&q->prefix), "m", tok->bucket, tok->id);
    if (rc == 0)
        rc = kvq_txn_set(txn, key.data, key.len, NULL, 0);
    kvq_buf_dispose(&key);
    return rc;
}
