/* The queue consumer runtime (kvq_consumer_*, for durable queues): worker threads popping
 * batches, sleeping on a watch when the queue is empty, stopping cleanly. The work queue's
 * runtime, with leases, is workq_consumer.c. */
#include <pthread.h>
#include <string.h>

#include "kvq/consumer.h"
#include "util/util.h"

#define MAX_WORKERS 1024
#define MAX_BATCH   10000

typedef struct worker worker;

struct kvq_consumer {
    kvq_db *db;
    kvq_consumer_source src;
    uint8_t *wake_key;
    kvq_consumer_fn fn;
    void *payload;
    kvq_consumer_options opts;
    worker *workers;
    int started;
    int joined;

    pthread_mutex_t mu;
    int stopping;
    int error;  /* the first error that stopped a worker */
    int exited; /* workers that have ended */
    int64_t restart_window_start_us;
    int restarts_in_window;
    kvq_consumer_stats stats;
};

struct worker {
    kvq_consumer *c;
    int id;
    pthread_t thread;
    kvq_watch *watch; /* armed while the worker sleeps; cancelled by stop */
};

typedef struct pop_ctx {
    kvq_consumer *c;
    kvq_bytes *values;
    size_t n;
    kvq_watch *watch;
} pop_ctx;

/* One transaction: pop up to K; when fewer came back, also watch the wake key, so that a push
 * committed after this read fires the watch and no wake-up is lost. */
static int pop_body(kvq_txn *txn, void *arg)
{
    pop_ctx *p = arg;
    kvq_consumer *c = p->c;
    if (p->watch != NULL) {
        kvq_watch_destroy(p->watch);
        p->watch = NULL;
    }
    p->n = 0;
    int rc = c->src.pop(c->src.queue, txn, (size_t)c->opts.batch, p->values, &p->n);
    if (rc != 0)
        return rc;
    if (p->n < (size_t)c->opts.batch && !c->opts.drain)
        rc = kvq_txn_watch(&p->watch, txn, c->wake_key, c->src.wake_key.len);
    return rc;
}

static int stopping(kvq_consumer *c)
{
    pthread_mutex_lock(&c->mu);
    int s = c->stopping;
    pthread_mutex_unlock(&c->mu);
    return s;
}

static void add_stat(kvq_consumer *c, uint64_t *field, uint64_t n)
{
    pthread_mutex_lock(&c->mu);
    *field += n;
    pthread_mutex_unlock(&c->mu);
}

static void set_error(kvq_consumer *c, int rc)
{
    pthread_mutex_lock(&c->mu);
    if (c->error == 0)
        c->error = rc;
    c->stopping = 1;
    pthread_mutex_unlock(&c->mu);
}

/* A callback failed: allow a restart unless the limit per minute is used up. */
static int allow_restart(kvq_consumer *c)
{
    pthread_mutex_lock(&c->mu);
    int64_t now = kvq__mono_us();
    if (now - c->restart_window_start_us > 60 * 1000000LL) {
        c->restart_window_start_us = now;
        c->restarts_in_window = 0;
    }
    int ok = c->restarts_in_window < c->opts.max_restarts_per_minute;
    if (ok) {
        c->restarts_in_window++;
        c->stats.restarts++;
    }
    pthread_mutex_unlock(&c->mu);
    return ok;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    kvq_consumer *c = w->c;
    kvq_bytes *values = kvq__calloc((size_t)c->opts.batch, sizeof(*values));
    kvq_txn *txn = NULL;
    int rc = values == NULL ? kvq__error(KVQ_ENOMEM, "consumer: out of memory") : 0;
    if (rc == 0)
        rc = kvq_txn_create(&txn, c->db);
    if (rc != 0) {
        set_error(c, rc);
        kvq__free(values);
        pthread_mutex_lock(&c->mu);
        c->exited++;
        pthread_mutex_unlock(&c->mu);
        return NULL;
    }
    pop_ctx p = { .c = c, .values = values };
    kvq_buf *bufs = NULL; /* the source's own pops copy into these */
    if (c->src.consume != NULL) {
        bufs = kvq__calloc((size_t)c->opts.batch, sizeof(*bufs));
        if (bufs == NULL)
            set_error(c, kvq__error(KVQ_ENOMEM, "consumer: out of memory"));
    }
    while (!stopping(c)) {
        if (bufs != NULL) {
            /* The source's idempotent pop: a commit that reported 1021 still hands over what
             * it took, so nothing popped is lost to a retry. */
            p.n = 0;
            rc = c->src.consume(c->src.queue, (size_t)c->opts.batch, bufs, &p.n, &p.watch);
            for (size_t i = 0; rc == 0 && i < p.n; i++) {
                values[i].data = bufs[i].data;
                values[i].len = bufs[i].len;
            }
            if (rc == 0 && c->opts.drain && p.watch != NULL) {
                kvq_watch_destroy(p.watch);
                p.watch = NULL;
            }
        } else {
            rc = kvq_txn_run(txn, pop_body, &p);
            add_stat(c, &c->stats.retries, (uint64_t)kvq_txn_retries(txn));
        }
        if (rc != 0) {
            set_error(c, rc);
            break;
        }
        if (p.n > 0)
            add_stat(c, &c->stats.batches, 1);
        /* Deliver everything popped, even when asked to stop: it has left the queue. */
        size_t done = 0;
        for (; done < p.n; done++)
            if (c->fn(p.values[done], w->id, c->payload) != 0)
                break;
        add_stat(c, &c->stats.items, done);
        if (done < p.n) {
            add_stat(c, &c->stats.undelivered, p.n - done);
            if (!allow_restart(c)) {
                set_error(c, kvq__error(KVQ_EUSER,
                                        "consumer: callbacks kept failing; more "
                                        "than %d restarts in a minute",
                                        c->opts.max_restarts_per_minute));
                break;
            }
        }
        if (p.n == 0 && c->opts.drain)
            break;
        if (p.n == 0 && p.watch != NULL) {
            pthread_mutex_lock(&c->mu);
            int s = c->stopping;
            if (!s)
                w->watch = p.watch;
            pthread_mutex_unlock(&c->mu);
            if (!s) {
                add_stat(c, &c->stats.empty_waits, 1);
                int wrc = kvq_watch_wait(p.watch, -1);
                pthread_mutex_lock(&c->mu);
                w->watch = NULL;
                pthread_mutex_unlock(&c->mu);
                if (wrc != 0 && wrc != KVQ_EWATCH_CANCELLED) {
                    set_error(c, wrc);
                    break;
                }
            }
        }
        if (p.watch != NULL) {
            kvq_watch_destroy(p.watch);
            p.watch = NULL;
        }
    }
    if (p.watch != NULL)
        kvq_watch_destroy(p.watch);
    for (int i = 0; bufs != NULL && i < c->opts.batch; i++)
        kvq_buf_dispose(&bufs[i]);
    kvq__free(bufs);
    kvq_txn_destroy(txn);
    kvq__free(values);
    pthread_mutex_lock(&c->mu);
    c->exited++;
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

int kvq_consumer_start(kvq_consumer **out,
                       kvq_db *db,
                       const kvq_consumer_source *src,
                       kvq_consumer_fn fn,
                       void *payload,
                       const kvq_consumer_options *opts)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_consumer_start: out is NULL");
    *out = NULL;
    kvq_consumer_options def = KVQ_CONSUMER_OPTIONS_INIT;
    if (opts == NULL)
        opts = &def;
    if (db == NULL || src == NULL || fn == NULL || src->pop == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_consumer_start: NULL argument");
    if (opts->version != KVQ_CONSUMER_OPTIONS_VERSION)
        return kvq__error(KVQ_EINVAL, "kvq_consumer_start: options version %u is not %u",
                          opts->version, KVQ_CONSUMER_OPTIONS_VERSION);
    if (opts->workers < 1 || opts->workers > MAX_WORKERS)
        return kvq__error(KVQ_EINVAL, "kvq_consumer_start: workers must be 1 to %d", MAX_WORKERS);
    if (opts->batch < 1 || opts->batch > MAX_BATCH)
        return kvq__error(KVQ_EINVAL, "kvq_consumer_start: batch must be 1 to %d", MAX_BATCH);
    if (opts->max_restarts_per_minute < 0)
        return kvq__error(KVQ_EINVAL, "kvq_consumer_start: negative restart limit");
    if (src->wake_key.len == 0 || src->wake_key.data == NULL ||
        src->wake_key.len > KVQ_MAX_KEY_SIZE)
        return kvq__error(KVQ_EINVAL, "kvq_consumer_start: the source needs a wake key");
    kvq_consumer *c = kvq__calloc(1, sizeof(*c));
    if (c == NULL)
        return kvq__error(KVQ_ENOMEM, "kvq_consumer_start: out of memory");
    c->db = db;
    c->src = *src;
    c->fn = fn;
    c->payload = payload;
    c->opts = *opts;
    c->wake_key = kvq__memdup(src->wake_key.data, src->wake_key.len);
    c->src.wake_key.data = c->wake_key;
    c->workers = kvq__calloc((size_t)opts->workers, sizeof(*c->workers));
    c->restart_window_start_us = kvq__mono_us();
    pthread_mutex_init(&c->mu, NULL);
    if (c->wake_key == NULL || c->workers == NULL) {
        kvq_consumer_free(c);
        return kvq__error(KVQ_ENOMEM, "kvq_consumer_start: out of memory");
    }
    for (int i = 0; i < opts->workers; i++) {
        c->workers[i].c = c;
        c->workers[i].id = i;
        if (pthread_create(&c->workers[i].thread, NULL, worker_main, &c->workers[i]) != 0) {
            kvq_consumer_stop(c);
            kvq_consumer_join(c);
            kvq_consumer_free(c);
            return kvq__error(KVQ_ENOMEM, "kvq_consumer_start: cannot start a thread");
        }
        pthread_mutex_lock(&c->mu);
        c->started++;
        pthread_mutex_unlock(&c->mu);
    }
    *out = c;
    return 0;
}

void kvq_consumer_stop(kvq_consumer *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    for (int i = 0; i < c->started; i++)
        if (c->workers[i].watch != NULL)
            kvq_watch_cancel(c->workers[i].watch);
    pthread_mutex_unlock(&c->mu);
}

int kvq_consumer_join(kvq_consumer *c)
{
    if (c == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_consumer_join: consumer is NULL");
    if (!c->joined) {
        for (int i = 0; i < c->started; i++)
            pthread_join(c->workers[i].thread, NULL);
        c->joined = 1;
    }
    pthread_mutex_lock(&c->mu);
    int rc = c->error;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int kvq_consumer_finished(kvq_consumer *c)
{
    if (c == NULL)
        return 1;
    pthread_mutex_lock(&c->mu);
    int done = c->exited >= c->started;
    pthread_mutex_unlock(&c->mu);
    return done;
}

int kvq_consumer_get_stats(kvq_consumer_stats *out, kvq_consumer *c)
{
    if (out == NULL || c == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_consumer_get_stats: NULL argument");
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

void kvq_consumer_free(kvq_consumer *c)
{
    if (c == NULL)
        return;
    kvq_consumer_stop(c);
    if (!c->joined)
        (void)kvq_consumer_join(c);
    pthread_mutex_destroy(&c->mu);
    kvq__free(c->wake_key);
    kvq__free(c->workers);
    kvq__free(c);
}
