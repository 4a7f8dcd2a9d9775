/* Pops of every queue type: the transaction forms, the convenience forms (idempotent, sleeping
 * on a watch for consume), the combined pops of one handle's threads, and the consumer source
 * built on them. Peeks, lengths and the rest of the shared operations are in queue.c. */
#include <string.h>

#include "layers/queue/queue_internal.h"

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

int kvq_queue_pop_prio_txn(
    kvq_bytes *out, int64_t *priority, kvq_queue *q, kvq_txn *txn, kvq_queue_end end)
{
    int rc = kvq__q_check_end(end, "kvq_queue_pop_prio_txn");
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
    /* durable: where the items the last attempt took lay (to tell a race lost to another pop
     * from any other conflict) */
    kvq__q_taken taken;
} pop_arg;

static void pop_arg_dispose(pop_arg *a)
{
    kvq_buf_dispose(&a->taken.lo);
    kvq_buf_dispose(&a->taken.hi);
}

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
    if (q->type == KVQ_QUEUE_DURABLE && o->last_rc == KVQ_ENOT_COMMITTED) {
        /* The last attempt's commit conflicted: a race lost to another consumer only if the
         * items it took are gone. */
        int lost;
        rc = kvq__q_pop_lost_race(q, txn, &a->taken, &lost);
        if (rc != 0)
            return rc;
    }
    a->taken.n = 0;
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
        rc = kvq__q_pop_spread(q, txn, a->k, kvq__q_pop_spread_width(q), seed, a->views, &n,
                               &a->taken);
    } else {
        /* A durable queue found empty: nothing is taken, and the watch (consume) holds the push
         * counter of this read version, so the attempt needs no read conflict on the items (a
         * push committing meanwhile would make it lose a race for nothing: it may be ordered
         * before the push). */
        unsigned int fl = q->type == KVQ_QUEUE_DURABLE ? KVQ__POP_EMPTY_NO_CONFLICT : 0;
        rc = kvq__q_pop_k_end_ex(q, txn, a->end, a->k, a->views, &prio, &n, fl, &a->taken);
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
    pop_arg a = { .end = end, .k = k, .want_watch = watch != NULL };
    int rc = kvq__qop_init(&o, q, "r", k);
    if (rc != 0) {
        kvq__qop_free(&o);
        return rc;
    }
    if (q->type == KVQ_QUEUE_DURABLE)
        o.after_commit = kvq__q_pop_pressure_note;
    o.early = 1;
    int hc = (q->opts.flags & KVQ_QUEUE_HIGH_CONTENTION) && k == 1;
    if (hc) {
        /* Its steps do not look for due items: a transaction of its own does first. */
        rc = q->type == KVQ_QUEUE_PRIORITY ? kvq_db_transact(q->db, gate_body, q) : 0;
        if (rc == 0)
            rc = kvq__staging_pop(q, &o, end, watch != NULL ? &a.watch : NULL);
    } else {
        a.views = kvq__calloc(k, sizeof(kvq_bytes));
        rc = a.views == NULL ? kvq__error(KVQ_ENOMEM, "out of memory")
                             : kvq__qop_run(&o, pop_body, &a);
        kvq__free(a.views);
        pop_arg_dispose(&a);
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
        uint64_t back = kvq__staging_maybe_sweep(q);
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
    pop_arg a = { .end = reqs[0]->end,
                  .k = total,
                  .views = views,
                  .want_watch = nw > 0,
                  .nwatch = nw,
                  .watches = ws };
    kvq__qop o;
    int rc = kvq__qop_init(&o, q, "r", total);
    if (q->type == KVQ_QUEUE_DURABLE)
        o.after_commit = kvq__q_pop_pressure_note;
    o.early = 1;
    if (rc == 0 && views == NULL)
        rc = kvq__error(KVQ_ENOMEM, "out of memory");
    if (rc == 0)
        rc = kvq__qop_run(&o, pop_body, &a);
    kvq__free(views);
    pop_arg_dispose(&a);
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
    uint64_t back = kvq__staging_maybe_sweep(q);
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
    int rc = kvq__q_check_end(end, "kvq_queue_pop_prio");
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
