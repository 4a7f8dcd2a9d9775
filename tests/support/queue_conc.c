/* The queue concurrency tests' producers and checker (test_queue_conc.h says what each does). */
#include "test_queue_conc.h"

int conc_log_add(conc_log *l, uint32_t p, uint32_t s, int64_t prio, uint32_t batch)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 1024;
        uint32_t *a = realloc(l->prod, cap * sizeof(*a));
        if (a != NULL)
            l->prod = a;
        uint32_t *b = realloc(l->seq, cap * sizeof(*b));
        if (b != NULL)
            l->seq = b;
        int64_t *c = realloc(l->prio, cap * sizeof(*c));
        if (c != NULL)
            l->prio = c;
        uint32_t *d = realloc(l->batch, cap * sizeof(*d));
        if (d != NULL)
            l->batch = d;
        if (a == NULL || b == NULL || c == NULL || d == NULL)
            return -1;
        l->cap = cap;
    }
    l->prod[l->n] = p;
    l->seq[l->n] = s;
    l->prio[l->n] = prio;
    l->batch[l->n] = batch;
    l->n++;
    return 0;
}

void conc_log_free(conc_log *l)
{
    free(l->prod);
    free(l->seq);
    free(l->prio);
    free(l->batch);
    memset(l, 0, sizeof(*l));
}

int64_t conc_prio(uint32_t producer, uint32_t seq)
{
    return (int64_t)((producer * 7919u + seq * 104729u) % 21u) - 10;
}

int conc_prio_body(kvq_txn *txn, void *arg)
{
    conc_prio_batch *b = arg;
    int rc = 0;
    for (size_t j = 0; rc == 0 && j < b->n; j++)
        rc = kvq_queue_push_prio_txn(b->q, txn, b->vals[j].data, b->vals[j].len,
                                     conc_prio(b->p, b->s + (uint32_t)j));
    return rc;
}

int conc_produce(const conc_cfg *c, kvq_db *pdb, uint32_t p, char *err, size_t errn)
{
    kvq_queue *q = NULL;
    int rc = kvq_queue_open(&q, pdb, c->type, NULL, NULL);
    size_t per = c->items / (size_t)c->producers;
    uint8_t(*vb)[16] = calloc((size_t)c->push_batch, 16);
    kvq_bytes *vals = calloc((size_t)c->push_batch, sizeof(kvq_bytes));
    if (vb == NULL || vals == NULL)
        rc = KVQ_ENOMEM;
    for (size_t s = 0; rc == 0 && s < per;) {
        size_t n = per - s < (size_t)c->push_batch ? per - s : (size_t)c->push_batch;
        for (size_t j = 0; j < n; j++) {
            tq_value(vb[j], p, (uint32_t)(s + j));
            vals[j].data = vb[j];
            vals[j].len = 16;
        }
        if (c->type == KVQ_QUEUE_PRIORITY && n > 1) {
            /* A transaction of push_prio_txn calls (no idempotency marker). */
            conc_prio_batch b = { q, vals, n, p, (uint32_t)s };
            rc = kvq_db_transact(pdb, conc_prio_body, &b);
        } else if (c->type == KVQ_QUEUE_PRIORITY) {
            for (size_t j = 0; rc == 0 && j < n; j++)
                rc = kvq_queue_push_prio(q, vals[j].data, 16, conc_prio(p, (uint32_t)(s + j)));
        } else if (n == 1) {
            rc = kvq_queue_push(q, vals[0].data, 16);
        } else {
            rc = kvq_queue_push_many(q, vals, n);
        }
        s += n;
    }
    if (rc != 0)
        snprintf(err, errn, "producer %u: %s (%s)", p, kvq_errname(rc), kvq_last_error());
    free(vb);
    free(vals);
    kvq_queue_close(q);
    return rc;
}

void conc_consume(const conc_cfg *c, kvq_db *cdb, int id, size_t *consumed, conc_log *log)
{
    kvq_queue_options o = KVQ_QUEUE_OPTIONS_INIT;
    o.flags = c->flags;
    kvq_queue *q = NULL;
    int rc = kvq_queue_open(&q, cdb, c->type, NULL, &o);
    size_t k = (size_t)c->pop_batch;
    kvq_buf *outs = calloc(k, sizeof(kvq_buf));
    if (outs == NULL)
        rc = KVQ_ENOMEM;
    uint32_t calls = 0;
    while (rc == 0 && __atomic_load_n(consumed, __ATOMIC_RELAXED) < c->items) {
        size_t n = 0;
        int64_t prio = 0;
        kvq_watch *w = NULL;
        calls++;
        if (c->type == KVQ_QUEUE_DURABLE && k > 1) {
            rc = kvq_queue_consume_k(outs, &n, &w, q, k);
        } else if (k > 1) {
            rc = kvq_queue_pop_k(outs, &n, q, k);
        } else if (c->type == KVQ_QUEUE_PRIORITY) {
            /* Even consumers take the minimum, odd ones the maximum. */
            rc = id % 2 ? kvq_queue_pop_prio(&outs[0], &prio, q, KVQ_QUEUE_MAX)
                        : kvq_queue_pop_prio(&outs[0], &prio, q, KVQ_QUEUE_MIN);
            n = rc == 0;
        } else {
            rc = kvq_queue_pop(&outs[0], q);
            n = rc == 0;
        }
        if (rc == KVQ_ENOTFOUND && c->stop_on_empty)
            break;
        if (rc == KVQ_ENOTFOUND)
            rc = 0;
        if (rc != 0)
            break;
        if (n == 0 && c->stop_on_empty) {
            kvq_watch_destroy(w);
            break;
        }
        for (size_t i = 0; i < n; i++) {
            uint32_t p, s;
            if (tq_parse(outs[i].data, outs[i].len, &p, &s) != 0) {
                rc = -1;
                snprintf(log->err, sizeof(log->err),
                         "consumer %d: a value that no producer "
                         "pushed (%zu bytes)",
                         id, outs[i].len);
                break;
            }
            int64_t pr = c->type == KVQ_QUEUE_PRIORITY ? conc_prio(p, s) : 0;
            if (k == 1 && c->type == KVQ_QUEUE_PRIORITY && pr != prio) {
                rc = -1;
                snprintf(log->err, sizeof(log->err),
                         "consumer %d: priority %lld reported for "
                         "an item pushed at %lld",
                         id, (long long)prio, (long long)pr);
                break;
            }
            if (conc_log_add(log, p, s, pr, calls) != 0) {
                rc = KVQ_ENOMEM;
                break;
            }
        }
        __atomic_add_fetch(consumed, n, __ATOMIC_RELAXED);
        if (w != NULL) {
            /* Asleep until a push (or a short while, to notice the end). */
            int wr = kvq_watch_wait(w, 100);
            (void)wr;
            kvq_watch_destroy(w);
        } else if (n == 0) {
            kvq__sleep_us(1000);
        }
    }
    if (rc != 0 && log->err[0] == 0)
        snprintf(log->err, sizeof(log->err), "consumer %d: %d %s (%s)", id, rc, kvq_errname(rc),
                 kvq_last_error());
    log->rc = rc;
    for (size_t i = 0; outs != NULL && i < k; i++)
        kvq_buf_dispose(&outs[i]);
    free(outs);
    kvq_queue_close(q);
}

int conc_check(const conc_cfg *c, conc_log *logs, int nlogs)
{
    size_t per = c->items / (size_t)c->producers;
    unsigned char *seen = calloc(c->items, 1);
    int bad = 0;
    size_t total = 0;
    for (int i = 0; i < nlogs && bad < 10; i++) {
        conc_log *l = &logs[i];
        if (l->rc != 0) {
            fprintf(stderr, "%s: %s\n", c->name, l->err);
            bad++;
        }
        int64_t *last = malloc((size_t)c->producers * sizeof(int64_t));
        uint32_t *last_batch = malloc((size_t)c->producers * sizeof(uint32_t));
        for (int p = 0; p < c->producers; p++) {
            last[p] = -1;
            last_batch[p] = UINT32_MAX;
        }
        for (size_t j = 0; j < l->n && bad < 10; j++) {
            uint32_t p = l->prod[j], s = l->seq[j];
            if (p >= (uint32_t)c->producers || s >= per) {
                fprintf(stderr, "%s: consumer %d popped unknown item (%u, %u)\n", c->name, i, p, s);
                bad++;
                continue;
            }
            total++;
            if (++seen[(size_t)p * per + s] == 2) {
                fprintf(stderr, "%s: item (%u, %u) popped twice\n", c->name, p, s);
                bad++;
            }
            /* A durable queue's consumers that race spread out (kvq__q_pop_spread): a pop takes
             * consecutive items among the first few present, so one consumer's
             * later pop may take an earlier item; within one pop, they are in order
             * (test_queue_basic checks the window itself). */
            int across = c->type == KVQ_QUEUE_DURABLE && last_batch[p] != l->batch[j];
            if (c->type != KVQ_QUEUE_PRIORITY && !across && (int64_t)s <= last[p]) {
                fprintf(stderr, "%s: consumer %d popped (%u, %u) after (%u, %lld)\n", c->name, i, p,
                        s, p, (long long)last[p]);
                bad++;
            }
            last[p] = s;
            last_batch[p] = l->batch[j];
            if (c->type == KVQ_QUEUE_PRIORITY && j > 0 && l->batch[j] == l->batch[j - 1] &&
                l->prio[j] < l->prio[j - 1]) {
                fprintf(stderr, "%s: consumer %d's batch is not min-first\n", c->name, i);
                bad++;
            }
        }
        free(last);
        free(last_batch);
    }
    for (size_t i = 0; i < c->items && bad < 10; i++)
        if (seen[i] == 0) {
            fprintf(stderr, "%s: item (%zu, %zu) lost\n", c->name, i / per, i % per);
            bad++;
        }
    free(seen);
    if (bad == 0 && total != c->items) {
        fprintf(stderr, "%s: %zu items popped, %zu pushed\n", c->name, total, c->items);
        bad++;
    }
    return bad ? -1 : 0;
}
