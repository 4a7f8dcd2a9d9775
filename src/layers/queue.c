/* Queue handles and the operations every type shares: pops, peeks, lengths, clearing,
 * iteration, watches, the consumer source. Pushes are in queue_push.c, reading and taking items
 * in queue_items.c, the idempotency machinery of the convenience forms in idempotency.c, the
 * high-contention pops in staging.c. */
#include <string.h>

#include "layers/layers_internal.h"

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

kvq_bytes kvq_queue_prefix(const kvq_queue *q)
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

/* ---- pops (transaction forms) ------------------------------------------------------------- */

int kvq_queue_pop_txn(kvq_bytes *out, kvq_queue *q, kvq_txn *txn)
{
    int rc = kvq__q_check_txn(q, txn, "kvq_queue_pop_txn");
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_pop_txn: out is NULL");
    if (rc == 0)
        rc = kvq__q_due_gate(q, NULL, txn);
    if (rc != 0)
        return rc;
    size_t n;
    return kvq__q_pop_k_end(q, txn, KVQ__END_MIN, 1, out, NULL, &n);
}

int kvq_queue_pop_k_txn(kvq_bytes *outs, size_t *n, kvq_queue *q, kvq_txn *txn, size_t k)
{
    int rc = kvq__q_check_txn(q, txn, "kvq_queue_pop_k_txn");
    if (rc == 0 && (outs == NULL || n == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_pop_k_txn: NULL outs or n");
    if (rc == 0 && (k < 1 || k > KVQ__MAX_K))
        rc = kvq__error(KVQ_EINVAL, "pop of %zu items (1 to %d allowed)", k, KVQ__MAX_K);
    if (rc == 0)
        rc = kvq__q_due_gate(q, NULL, txn);
    if (rc != 0)
        return rc;
    return kvq__q_pop_k_end(q, txn, KVQ__END_MIN, k, outs, NULL, n);
}

static int
pop_end_txn(kvq_queue *q, kvq_txn *txn, kvq_bytes *out, int64_t *priority, int end, const char *fn)
{
    int rc = kvq__q_check_txn(q, txn, fn);
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "%s: out is NULL", fn);
    if (rc != 0)
        return rc;
    if (q->type != KVQ_QUEUE_PRIORITY)
        return kvq__q_wrong_type(q, fn);
    rc = kvq__q_due_gate(q, NULL, txn);
    if (rc != 0)
        return rc;
    size_t n;
    return kvq__q_pop_k_end(q, txn, end, 1, out, priority, &n);
}

/* KVQ_EINVAL unless end is KVQ_QUEUE_MIN or KVQ_QUEUE_MAX (whose values are KVQ__END_MIN and
 * KVQ__END_MAX). */
static int check_end(kvq_queue_end end, const char *fn)
{
    if (end != KVQ_QUEUE_MIN && end != KVQ_QUEUE_MAX)
        return kvq__error(KVQ_EINVAL, "%s: end %d is neither KVQ_QUEUE_MIN nor KVQ_QUEUE_MAX", fn,
                          (int)end);
    return 0;
}

int kvq_queue_pop_prio_txn(
    kvq_bytes *out, int64_t *priority, kvq_queue *q, kvq_txn *txn, kvq_queue_end end)
{
    int rc = check_end(end, "kvq_queue_pop_prio_txn");
    return rc != 0 ? rc : pop_end_txn(q, txn, out, priority, (int)end, "kvq_queue_pop_prio_txn");
}

/* ---- convenience pops ----------------------------------------------------------------------- */

typedef struct pop_arg {
    int end;
    size_t k;
    kvq_bytes *views;
    /* consume_k */
    int want_watch;
    kvq_watch *watch;
    /* a combined pop (nwatch > 0): as many watches, one for each caller that wants one */
    size_t nwatch;
    kvq_watch **watches;
} pop_arg;

static void drop_watches(pop_arg *a)
{
    kvq_watch_destroy(a->watch);
    a->watch = NULL;
    for (size_t i = 0; i < a->nwatch; i++) {
        kvq_watch_destroy(a->watches[i]);
        a->watches[i] = NULL;
    }
}

static int arm_watches(pop_arg *a, kvq_queue *q, kvq_txn *txn)
{
    if (a->nwatch == 0)
        return kvq_queue_watch_txn(&a->watch, q, txn);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < a->nwatch; i++)
        rc = kvq_queue_watch_txn(&a->watches[i], q, txn);
    return rc;
}

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
    drop_watches(a);
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
                rc = arm_watches(a, q, txn);
        }
        return rc;
    }
    /* Due delayed items and ended leases first (a retry then sees them ready). */
    rc = kvq__q_due_gate(q, NULL, txn);
    if (rc != 0)
        return rc;
    size_t n = 0;
    int64_t prio = 0;
    if (q->type == KVQ_QUEUE_DURABLE && __atomic_load_n(&q->pop_pressure, __ATOMIC_RELAXED) > 0) {
        /* Consumers are racing for the head: take items at a position of this attempt's own
         * (the pop id and the attempt number choose it). */
        uint64_t seed = kvq__le_get(o->id, 8) ^ ((uint64_t)o->attempt * 0x9e3779b97f4a7c15ULL);
        seed ^= seed >> 29;
        seed *= 0xbf58476d1ce4e5b9ULL;
        seed ^= seed >> 32;
        rc = kvq__q_pop_spread(q, txn, a->k, kvq__q_pop_spread_width(q), seed, a->views, &n);
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
            rc = arm_watches(a, q, txn);
    }
    return rc;
}

/* Only makes what is due ready (kvq__q_due_gate; its 1020 makes the retry loop look again). */
static int gate_body(kvq_txn *txn, void *arg)
{
    return kvq__q_due_gate(arg, NULL, txn);
}

/* Runs a convenience pop of up to k items from one end into outs; *n receives the count. */
static int pop_single(kvq_queue *q,
                      int end,
                      size_t k,
                      kvq_buf *outs,
                      size_t *n,
                      int64_t *prio,
                      kvq_watch **watch,
                      uint64_t *swept)
{
    kvq__qop o;
    pop_arg a = { end, k, NULL, watch != NULL, NULL, 0, NULL };
    int rc = kvq__qop_init(&o, q, "r", k);
    if (rc != 0) {
        kvq__qop_free(&o);
        return rc;
    }
    int hc = (q->opts.flags & KVQ_QUEUE_HIGH_CONTENTION) && k == 1;
    if (hc) {
        /* Its steps do not look for due items: a transaction of its own does first. */
        rc = q->type == KVQ_QUEUE_PRIORITY ? kvq_db_transact(q->db, gate_body, q) : 0;
        if (rc == 0)
            rc = kvq__hc_pop(q, &o, end, watch != NULL ? &a.watch : NULL);
    } else {
        a.views = kvq__calloc(k, sizeof(kvq_bytes));
        rc = a.views == NULL ? kvq__error(KVQ_ENOMEM, "out of memory")
                             : kvq__qop_run(&o, pop_body, &a);
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

/* ---- combined pops ------------------------------------------------------------------------- */

/* Threads of one handle popping from a FIFO or priority queue would all read the same head, and
 * all but one would lose the race (or, in high-contention mode, pay a waiter's registration and
 * hand-over: two commits each). Instead, waiting pops are combined: the first thread to come
 * pops for every pop waiting for the same end (up to CMB_MAX pops, KVQ__MAX_K items), in one
 * idempotent transaction of kvq__qop_run (a pop of their k's added up: one result slot, exactly
 * once across 1021), and hands the items out in arrival order, each pop its next k; a pop alone
 * takes the ordinary path. The items of a batch are in queue order and a thread's next pop is
 * served by a later batch, so each thread still receives one producer's items in push order; a
 * queue with fewer items than the pops want leaves the last ones short or empty-handed (with a
 * watch set in the same transaction, for consume). */
#define CMB_MAX 64

typedef struct kvq__cmb_req {
    int end;
    size_t k;
    int want_watch;
    kvq_buf *out; /* k buffers */
    size_t n;
    kvq_watch *watch;
    uint64_t swept;
    int rc;
    int done;
    struct kvq__cmb_req *next;
} kvq__cmb_req;

static void serve_batch(kvq_queue *q, kvq__cmb_req **reqs, size_t m)
{
    if (m == 1) {
        kvq__cmb_req *r = reqs[0];
        r->rc = pop_single(q, r->end, r->k, r->out, &r->n, NULL, r->want_watch ? &r->watch : NULL,
                           &r->swept);
        return;
    }
    kvq_watch *ws[CMB_MAX] = { NULL };
    size_t nw = 0, total = 0;
    for (size_t i = 0; i < m; i++) {
        nw += reqs[i]->want_watch != 0;
        total += reqs[i]->k;
    }
    kvq_bytes *views = kvq__calloc(total, sizeof(kvq_bytes));
    pop_arg a = { reqs[0]->end, total, views, nw > 0, NULL, nw, ws };
    kvq__qop o;
    int rc = kvq__qop_init(&o, q, "r", total);
    if (rc == 0 && views == NULL)
        rc = kvq__error(KVQ_ENOMEM, "out of memory");
    if (rc == 0)
        rc = kvq__qop_run(&o, pop_body, &a);
    kvq__free(views);
    kvq__qres *res = NULL;
    if (rc == 0) {
        res = kvq__qop_result(&o);
        if (res == NULL)
            rc = KVQ_ECOMMIT_UNKNOWN_RESULT;
    }
    size_t got = rc == 0 ? res->n : 0;
    if (rc == 0) {
        KVQ__STAT_ADD(q, pops, got);
        __atomic_add_fetch(&q->cmb_batches, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&q->cmb_items, (uint64_t)got, __ATOMIC_RELAXED);
    }
    uint64_t back = kvq__hc_maybe_sweep(q);
    size_t wi = 0, next = 0;
    for (size_t i = 0; i < m; i++) {
        kvq__cmb_req *r = reqs[i];
        kvq_watch *w = NULL;
        if (r->want_watch)
            w = ws[wi++];
        r->swept = back;
        r->n = 0;
        r->rc = rc;
        /* The next r->k items (or what is left) are this pop's, in queue order. */
        while (rc == 0 && r->n < r->k && next < got) {
            kvq_buf t = r->out[r->n];
            r->out[r->n] = res->vals[next];
            res->vals[next] = t;
            res->vals[next].len = 0;
            r->n++;
            next++;
        }
        if (rc == 0 && r->n < r->k && r->want_watch) {
            r->watch = w; /* may be NULL after a 1021: the caller looks again */
            w = NULL;
        } else if (rc == 0 && r->n == 0) {
            r->rc = KVQ_ENOTFOUND;
        }
        kvq_watch_destroy(w);
    }
    kvq__qop_free(&o);
}

static int pop_combined(
    kvq_queue *q, int end, size_t k, kvq_buf *out, size_t *n, kvq_watch **watch, uint64_t *swept)
{
    kvq__cmb_req r;
    memset(&r, 0, sizeof(r));
    r.end = end;
    r.k = k;
    r.want_watch = watch != NULL;
    r.out = out;
    pthread_mutex_lock(&q->cmb_mu);
    kvq__cmb_req **tail = &q->cmb_head;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = &r;
    while (!r.done) {
        if (q->cmb_leader) {
            pthread_cond_wait(&q->cmb_cv, &q->cmb_mu);
            continue;
        }
        /* Lead: take the waiting pops for the first one's end, in arrival order, up to
         * KVQ__MAX_K items in all. */
        q->cmb_leader = 1;
        kvq__cmb_req *batch[CMB_MAX];
        size_t m = 0, items = 0;
        int e = q->cmb_head->end;
        for (kvq__cmb_req **pp = &q->cmb_head; *pp != NULL && m < CMB_MAX;) {
            if ((*pp)->end == e && (m == 0 || items + (*pp)->k <= KVQ__MAX_K)) {
                items += (*pp)->k;
                batch[m++] = *pp;
                *pp = (*pp)->next;
            } else {
                pp = &(*pp)->next;
            }
        }
        pthread_mutex_unlock(&q->cmb_mu);
        serve_batch(q, batch, m);
        pthread_mutex_lock(&q->cmb_mu);
        for (size_t i = 0; i < m; i++)
            batch[i]->done = 1;
        q->cmb_leader = 0;
        pthread_cond_broadcast(&q->cmb_cv);
    }
    pthread_mutex_unlock(&q->cmb_mu);
    *n = r.n;
    if (watch != NULL)
        *watch = r.watch;
    if (swept != NULL)
        *swept = r.swept;
    if (r.rc != 0 && r.rc != KVQ_ENOTFOUND)
        kvq__error(r.rc, "a combined pop failed: %s", kvq_strerror(r.rc));
    return r.rc;
}

/* A convenience pop: combined with the other threads' pops of a FIFO or priority queue (when
 * the caller does not ask for the priority), else on its own. */
static int pop_conv(kvq_queue *q,
                    int end,
                    size_t k,
                    kvq_buf *outs,
                    size_t *n,
                    int64_t *prio,
                    kvq_watch **watch,
                    uint64_t *swept)
{
    if (q->type != KVQ_QUEUE_DURABLE && prio == NULL)
        return pop_combined(q, end, k, outs, n, watch, swept);
    return pop_single(q, end, k, outs, n, prio, watch, swept);
}

static int pop_one(kvq_queue *q, int end, kvq_buf *out, int64_t *prio, const char *fn)
{
    int rc = kvq__q_check(q, fn);
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

int kvq_queue_pop(kvq_buf *out, kvq_queue *q)
{
    return pop_one(q, KVQ__END_MIN, out, NULL, "kvq_queue_pop");
}

int kvq_queue_pop_prio(kvq_buf *out, int64_t *priority, kvq_queue *q, kvq_queue_end end)
{
    int rc = check_end(end, "kvq_queue_pop_prio");
    if (rc != 0)
        return rc;
    if (q != NULL && q->type != KVQ_QUEUE_PRIORITY)
        return kvq__q_wrong_type(q, "kvq_queue_pop_prio");
    return pop_one(q, (int)end, out, priority, "kvq_queue_pop_prio");
}

int kvq_queue_pop_k(kvq_buf *outs, size_t *n, kvq_queue *q, size_t k)
{
    int rc = kvq__q_check(q, "kvq_queue_pop_k");
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
    int rc = check_end(end, "kvq_queue_peek_prio_txn");
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
    int rc = check_end(end, "kvq_queue_peek_prio");
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

/* ---- watches and consumers ------------------------------------------------------------------ */

int kvq_queue_watch_txn(kvq_watch **out, kvq_queue *q, kvq_txn *txn)
{
    int rc = kvq__q_check_txn(q, txn, "kvq_queue_watch_txn");
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_watch_txn: out is NULL");
    if (rc != 0)
        return rc;
    *out = NULL;
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
    return kvq_queue_watch_txn(&a->w, a->q, txn);
}

int kvq_queue_watch(kvq_watch **out, kvq_queue *q)
{
    int rc = kvq__q_check(q, "kvq_queue_watch");
    if (rc == 0 && out == NULL)
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_watch: out is NULL");
    if (rc != 0)
        return rc;
    *out = NULL;
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
    kvq_bytes *outs, size_t *n, kvq_watch **watch, kvq_queue *q, kvq_txn *txn, size_t k)
{
    int rc = kvq__q_check_txn(q, txn, "kvq_queue_consume_k_txn");
    if (rc == 0 && (outs == NULL || n == NULL || watch == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_consume_k_txn: NULL outs, n or watch");
    if (rc == 0 && (k < 1 || k > KVQ__MAX_K))
        rc = kvq__error(KVQ_EINVAL, "consume of %zu items (1 to %d allowed)", k, KVQ__MAX_K);
    if (rc != 0)
        return rc;
    *watch = NULL;
    *n = 0;
    rc = kvq__q_due_gate(q, NULL, txn);
    if (rc == 0)
        rc = kvq__q_pop_k_end(q, txn, KVQ__END_MIN, k, outs, NULL, n);
    if (rc == KVQ_ENOTFOUND)
        rc = 0;
    if (rc == 0 && *n < k)
        rc = kvq_queue_watch_txn(watch, q, txn);
    return rc;
}

int kvq_queue_consume_k(kvq_buf *outs, size_t *n, kvq_watch **watch, kvq_queue *q, size_t k)
{
    int rc = kvq__q_check(q, "kvq_queue_consume_k");
    if (rc == 0 && (outs == NULL || n == NULL || watch == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_queue_consume_k: NULL outs, n or watch");
    if (rc == 0 && (k < 1 || k > KVQ__MAX_K))
        rc = kvq__error(KVQ_EINVAL, "consume of %zu items (1 to %d allowed)", k, KVQ__MAX_K);
    if (rc != 0)
        return rc;
    *watch = NULL;
    *n = 0;
    return pop_conv(q, KVQ__END_MIN, k, outs, n, NULL, watch, NULL);
}

static int source_pop(void *queue, kvq_txn *txn, size_t k, kvq_bytes *values, size_t *n)
{
    int rc = kvq_queue_pop_k_txn(values, n, queue, txn, k);
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
    return kvq_queue_consume_k(outs, n, watch, queue, k);
}

int kvq_queue_consumer_source(kvq_consumer_source *out, kvq_queue *q)
{
    if (out == NULL || q == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_queue_consumer_source: NULL argument");
    if (q->type != KVQ_QUEUE_DURABLE)
        return kvq__q_wrong_type(q, "kvq_queue_consumer_source");
    memset(out, 0, sizeof(*out));
    out->pop = source_pop;
    out->consume = source_consume;
    out->queue = q;
    out->wake_key = kvq__buf_bytes(&q->npush);
    return 0;
}
