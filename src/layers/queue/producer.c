/* kvq_queue_produce: producer threads that push what a callback makes, in batches where the
 * queue's type has them. Written only against the public queue API. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "kvq/queue.h"
#include "util/util.h"

#define PRODUCER_MAX_THREADS 1024
#define PRODUCER_MAX_BATCH   10000

typedef struct producer_run {
    kvq_queue *q;
    kvq_producer_fn fn;
    void *payload;
    int batch;
    int stop;         /* set (atomically) by the first thread that fails */
    int error;        /* the first error, under mu */
    char detail[256]; /* its kvq_last_error() on the thread that failed */
    uint64_t items, transactions;
    pthread_mutex_t mu;
} producer_run;

typedef struct producer_thread {
    producer_run *run;
    int id;
} producer_thread;

static void fail_run(producer_run *r, int rc)
{
    pthread_mutex_lock(&r->mu);
    if (r->error == 0) {
        r->error = rc;
        snprintf(r->detail, sizeof(r->detail), "%s", kvq_last_error());
    }
    pthread_mutex_unlock(&r->mu);
    __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
}

/* Pushes values[0..n): one transaction for a durable or FIFO queue (kvq_queue_push_many), one
 * per item for a priority queue (each item has its own priority). */
static int
push_batch(producer_run *r, kvq_buf *values, kvq_bytes *views, const int64_t *prios, size_t n)
{
    if (kvq_queue_get_type(r->q) != KVQ_QUEUE_PRIORITY) {
        for (size_t i = 0; i < n; i++) {
            views[i].data = values[i].data;
            views[i].len = values[i].len;
        }
        int rc = kvq_queue_push_many(r->q, views, n);
        if (rc == 0) {
            __atomic_add_fetch(&r->items, n, __ATOMIC_RELAXED);
            __atomic_add_fetch(&r->transactions, 1, __ATOMIC_RELAXED);
        }
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        int rc = kvq_queue_get_type(r->q) == KVQ_QUEUE_PRIORITY
                     ? kvq_queue_push_prio(r->q, values[i].data, values[i].len, prios[i])
                     : kvq_queue_push(r->q, values[i].data, values[i].len);
        if (rc != 0)
            return rc;
        __atomic_add_fetch(&r->items, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&r->transactions, 1, __ATOMIC_RELAXED);
    }
    return 0;
}

static void *producer_main(void *arg)
{
    producer_thread *pt = arg;
    producer_run *r = pt->run;
    size_t cap = (size_t)r->batch;
    kvq_buf *values = kvq__calloc(cap, sizeof(*values));
    kvq_bytes *views = kvq__calloc(cap, sizeof(*views));
    int64_t *prios = kvq__calloc(cap, sizeof(*prios));
    if (values == NULL || views == NULL || prios == NULL) {
        fail_run(r, kvq__error(KVQ_ENOMEM, "out of memory for a producer's batch"));
        goto out;
    }
    uint64_t seq = 0;
    int more = 1;
    while (more && !__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
        size_t n = 0;
        while (n < cap) {
            values[n].len = 0;
            prios[n] = 0;
            int rc = r->fn(&values[n], &prios[n], pt->id, seq, r->payload);
            if (rc == KVQ_ENOTFOUND) {
                more = 0;
                break;
            }
            if (rc != 0) {
                fail_run(r, rc);
                goto out;
            }
            seq++;
            n++;
        }
        if (n > 0) {
            int rc = push_batch(r, values, views, prios, n);
            if (rc != 0) {
                fail_run(r, rc);
                break;
            }
        }
    }
out:
    for (size_t i = 0; values != NULL && i < cap; i++)
        kvq_buf_dispose(&values[i]);
    kvq__free(values);
    kvq__free(views);
    kvq__free(prios);
    return NULL;
}

int kvq_queue_produce(kvq_producer_stats *out,
                      kvq_queue *q,
                      kvq_producer_fn fn,
                      void *payload,
                      const kvq_producer_options *opts)
{
    if (out != NULL)
        memset(out, 0, sizeof(*out));
    if (q == NULL || fn == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_queue_produce: NULL %s", q == NULL ? "queue" : "fn");
    kvq_producer_options o = KVQ_PRODUCER_OPTIONS_INIT;
    if (opts != NULL) {
        if (opts->version != KVQ_PRODUCER_OPTIONS_VERSION)
            return kvq__error(KVQ_EINVAL, "kvq_queue_produce: options version %u (expected %d)",
                              opts->version, KVQ_PRODUCER_OPTIONS_VERSION);
        o = *opts;
    }
    if (o.threads < 1 || o.threads > PRODUCER_MAX_THREADS)
        return kvq__error(KVQ_EINVAL, "kvq_queue_produce: %d threads (1 to %d allowed)", o.threads,
                          PRODUCER_MAX_THREADS);
    if (o.batch < 1 || o.batch > PRODUCER_MAX_BATCH)
        return kvq__error(KVQ_EINVAL, "kvq_queue_produce: batch of %d (1 to %d allowed)", o.batch,
                          PRODUCER_MAX_BATCH);
    producer_run r = { .q = q, .fn = fn, .payload = payload, .batch = o.batch };
    pthread_mutex_init(&r.mu, NULL);
    producer_thread *pts = kvq__calloc((size_t)o.threads, sizeof(*pts));
    pthread_t *th = kvq__calloc((size_t)o.threads, sizeof(*th));
    int started = 0, rc = 0;
    if (pts == NULL || th == NULL)
        rc = kvq__error(KVQ_ENOMEM, "out of memory for %d producer threads", o.threads);
    for (; rc == 0 && started < o.threads; started++) {
        pts[started] = (producer_thread){ &r, started };
        if (pthread_create(&th[started], NULL, producer_main, &pts[started]) != 0) {
            rc = kvq__error(KVQ_ENOMEM, "cannot start producer thread %d", started);
            fail_run(&r, rc);
            break;
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (rc == 0 && r.error != 0)
        rc = kvq__error(r.error, "%s", r.detail); /* the detail, on the caller's thread */
    if (out != NULL) {
        out->items = r.items;
        out->transactions = r.transactions;
    }
    pthread_mutex_destroy(&r.mu);
    kvq__free(pts);
    kvq__free(th);
    return rc;
}
