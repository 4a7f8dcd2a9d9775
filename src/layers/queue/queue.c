/* Queue handles and the operations every type shares: peeks, lengths, clearing, iteration.
 * Pops, watches and the consumer source are in queue_pop.c, pushes in queue_push.c, reading and
 * taking items in queue_items.c, the idempotency machinery of the convenience forms in
 * idempotency.c, the high-contention pops in staging.c. */
#include <string.h>

#include "layers/queue/queue_internal.h"

/* ---- open / close ------------------------------------------------------------------------ */

static int build_keys(kvq_queue *q)
{
    kvq_bytes p = kvq__buf_bytes(&q->prefix);
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
            rc = kvq__buf_put_byte(&q->items_lo, 0x00);
        if (rc == 0)
            rc = kvq_buf_append(&q->items_hi, q->val_prefix.data, q->val_prefix.len);
        if (rc == 0)
            rc = kvq__buf_put_byte(&q->items_hi, 0xff);
    } else {
        /* Integer type codes of the tuple encoding run from 0x0b to 0x1d. */
        rc = kvq_buf_append(&q->items_lo, p.data, p.len);
        if (rc == 0)
            rc = kvq__buf_put_byte(&q->items_lo, 0x0b);
        if (rc == 0)
            rc = kvq_buf_append(&q->items_hi, p.data, p.len);
        if (rc == 0)
            rc = kvq__buf_put_byte(&q->items_hi, 0x1e);
        /* The recipes keep no counter; kvq's pushes bump one of its own, outside their item
         * range, so that a consumer can sleep on a watch instead of polling. */
        if (rc == 0)
            rc = kvq__qk_bk_counter(&q->npush, p, "npush");
    }
    if (q->type != KVQ_QUEUE_FIFO) {
        /* A work queue's lease expiry index and delayed items (workq.c builds the same). */
        kvq_tuple_elem x[2] = { kvq_tuple_str("wq"), kvq_tuple_str("x") };
        kvq_tuple_elem y[2] = { kvq_tuple_str("wq"), kvq_tuple_str("y") };
        for (int i = 0; rc == 0 && i < 2; i++) {
            kvq_buf *b = i == 0 ? &q->wq_x : &q->wq_y;
            rc = kvq_buf_append(b, p.data, p.len);
            if (rc == 0)
                rc = kvq__buf_put_byte(b, 0xff);
            if (rc == 0)
                rc = kvq_tuple_pack_buf(b, i == 0 ? x : y, 2);
        }
    }
    if (rc == 0)
        rc = kvq_buf_append(&q->bk, p.data, p.len);
    if (rc == 0)
        rc = kvq__buf_put_byte(&q->bk, 0xff);
    if (rc == 0)
        rc = kvq__qk_hc_kind(&q->hc_pop_lo, p, "pop");
    if (rc == 0)
        rc = kvq_buf_append(&q->hc_pop_hi, q->hc_pop_lo.data, q->hc_pop_lo.len);
    if (rc == 0)
        rc = kvq__buf_put_byte(&q->hc_pop_lo, 0x00);
    if (rc == 0)
        rc = kvq__buf_put_byte(&q->hc_pop_hi, 0xff);
    if (rc == 0)
        rc = kvq__qk_hc_kind(&q->hc_rk_lo, p, "rk");
    if (rc == 0)
        rc = kvq_buf_append(&q->hc_rk_hi, q->hc_rk_lo.data, q->hc_rk_lo.len);
    if (rc == 0)
        rc = kvq__buf_put_byte(&q->hc_rk_lo, 0x00);
    if (rc == 0)
        rc = kvq__buf_put_byte(&q->hc_rk_hi, 0xff);
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
        kvq_bytes b = kvq_subspace_get_prefix(sub);
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
    q->wq_max_deliveries = -1;
    if (pthread_mutex_init(&q->cmb_mu, NULL) != 0) {
        kvq__free(q);
        return kvq__error(KVQ_ENOMEM, "out of memory opening a queue");
    }
    if (pthread_cond_init(&q->cmb_cv, NULL) != 0) {
        pthread_mutex_destroy(&q->cmb_mu);
        kvq__free(q);
        return kvq__error(KVQ_ENOMEM, "out of memory opening a queue");
    }
    q->cmb_ready = 1;
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
    kvq_buf *bufs[] = { &q->prefix,   &q->items_lo, &q->items_hi,  &q->val_prefix, &q->npush,
                        &q->npop,     &q->bk,       &q->hc_pop_lo, &q->hc_pop_hi,  &q->hc_rk_lo,
                        &q->hc_rk_hi, &q->wq_x,     &q->wq_y };
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        kvq_buf_dispose(bufs[i]);
    if (q->cmb_ready) {
        pthread_cond_destroy(&q->cmb_cv);
        pthread_mutex_destroy(&q->cmb_mu);
    }
    kvq__free(q);
}

kvq_queue_type kvq_queue_get_type(const kvq_queue *q)
{
    return q == NULL ? (kvq_queue_type)0 : q->type;
}

kvq_bytes kvq_queue_get_prefix(const kvq_queue *q)
{
    kvq_bytes none = { NULL, 0 };
    return q == NULL ? none : kvq__buf_bytes(&q->prefix);
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

/* ---- peeks ----------------------------------------------------------------------------------- */

static int peek_end_txn(kvq_queue *q,
                        kvq_txn *txn,
                        int end,
                        kvq_bytes *out,
                        int64_t *priority,
                        unsigned int flags,
                        const char *fn)
{
    int rc = kvq__q_check_txn(q, txn, fn);
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "%s: out is NULL", fn);
    if (rc == 0 && (flags & ~(unsigned int)KVQ_SNAPSHOT) != 0)
        rc = kvq__error(KVQ_EINVAL, "%s: flags 0x%x (only KVQ_SNAPSHOT allowed)", fn, flags);
    if (rc == 0)
        rc = kvq__q_due_gate(q, NULL, txn);
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

int kvq_queue_peek_txn(kvq_bytes *out, kvq_queue *q, kvq_txn *txn, unsigned int flags)
{
    return peek_end_txn(q, txn, KVQ__END_MIN, out, NULL, flags, "kvq_queue_peek_txn");
}

int kvq_queue_peek_prio_txn(kvq_bytes *out,
                            int64_t *priority,
                            kvq_queue *q,
                            kvq_txn *txn,
                            kvq_queue_end end,
                            unsigned int flags)
{
    int rc = kvq__q_check_end(end, "kvq_queue_peek_prio_txn");
    if (rc != 0)
        return rc;
    if (q != NULL && q->type != KVQ_QUEUE_PRIORITY)
        return kvq__q_wrong_type(q, "kvq_queue_peek_prio_txn");
    return peek_end_txn(q, txn, (int)end, out, priority, flags, "kvq_queue_peek_prio_txn");
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
    int rc = kvq__q_check(q, fn);
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

int kvq_queue_peek(kvq_buf *out, kvq_queue *q)
{
    return peek_conv(q, KVQ__END_MIN, out, NULL, "kvq_queue_peek");
}

int kvq_queue_peek_prio(kvq_buf *out, int64_t *priority, kvq_queue *q, kvq_queue_end end)
{
    int rc = kvq__q_check_end(end, "kvq_queue_peek_prio");
    if (rc != 0)
        return rc;
    if (q != NULL && q->type != KVQ_QUEUE_PRIORITY)
        return kvq__q_wrong_type(q, "kvq_queue_peek_prio");
    return peek_conv(q, (int)end, out, priority, "kvq_queue_peek_prio");
}

/* ---- length ---------------------------------------------------------------------------------- */

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
        bool more = false;
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

int kvq_queue_len_txn(uint64_t *out, kvq_queue *q, kvq_txn *txn, unsigned int flags)
{
    int rc = kvq__q_check_txn(q, txn, "kvq_queue_len_txn");
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_len_txn: out is NULL");
    if (rc == 0 && (flags & ~(unsigned int)KVQ_SNAPSHOT) != 0)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_len_txn: flags 0x%x", flags);
    if (rc == 0)
        rc = kvq__q_due_gate(q, NULL, txn);
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
    /* Due items first, at the first page (a count over pages is approximate anyway). */
    int rc = a->cursor.len == 0 ? kvq__q_due_gate(a->q, NULL, txn) : 0;
    if (rc != 0)
        return rc;
    if (a->q->type == KVQ_QUEUE_DURABLE) {
        a->done = 1;
        return durable_len_txn(a->q, txn, &a->count, 0);
    }
    /* A retry starts the page again from the cursor of the last committed page. */
    a->count = 0;
    kvq_buf cur = KVQ_BUF_INIT;
    rc = kvq__buf_set(&cur, a->cursor.data, a->cursor.len);
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

int kvq_queue_len(uint64_t *out, kvq_queue *q)
{
    int rc = kvq__q_check(q, "kvq_queue_len");
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
    int rc = kvq__q_check_txn(q, txn, "kvq_queue_clear_txn");
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
    int rc = kvq__q_check(q, "kvq_queue_clear");
    if (rc != 0)
        return rc;
    return kvq_db_transact(q->db, clear_body, q);
}

int kvq_queue_delete_txn(kvq_queue *q, kvq_txn *txn)
{
    int rc = kvq__q_check_txn(q, txn, "kvq_queue_delete_txn");
    if (rc != 0)
        return rc;
    /* Everything that starts with the prefix: [prefix, strinc(prefix)). The prefix never
     * starts with 0xFF, so strinc exists. */
    kvq_buf end = KVQ_BUF_INIT;
    rc = kvq_bytes_strinc(&end, q->prefix.data, q->prefix.len);
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
    int rc = kvq__q_check(q, "kvq_queue_delete");
    if (rc != 0)
        return rc;
    return kvq_db_transact(q->db, delete_body, q);
}

/* ---- iteration ------------------------------------------------------------------------------- */

int kvq_queue_iterate_txn(kvq_queue *q, kvq_txn *txn, kvq_queue_iter_fn fn, void *payload)
{
    int rc = kvq__q_check_txn(q, txn, "kvq_queue_iterate_txn");
    if (rc == 0 && fn == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_iterate_txn: fn is NULL");
    if (rc == 0)
        rc = kvq__q_due_gate(q, NULL, txn);
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
    const kvq_kv *kvs = NULL;
    size_t got = 0;
    a->n = 0;
    int rc = a->cursor.len == 0 ? kvq__q_due_gate(q, NULL, txn) : 0;
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, b, bl, q->items_hi.data, q->items_hi.len,
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
    int rc = kvq__q_check(q, "kvq_queue_iterate");
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
