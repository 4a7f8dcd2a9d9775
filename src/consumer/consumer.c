/* The queue consumer runtime (kvq_consumer_*, for durable queues): worker threads popping
 * batches, sleeping on a watch when the queue is empty, stopping cleanly. The work queue's
 * runtime, with leases, is workq_consumer.c. */
#include <pthread.h>
#include <string.h>

#include "consumer/crew.h"
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
    kvq__crew crew; /* the workers' threads; its mu guards what follows */
    int stopping;
    int64_t restart_window_start_us;
    int restarts_in_window;
    kvq_consumer_stats stats;
};

struct worker {
    kvq_consumer *c;
    int id;
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
    pthread_mutex_lock(&c->crew.mu);
    int s = c->stopping;
    pthread_mutex_unlock(&c->crew.mu);
    return s;
}

static void add_stat(kvq_consumer *c, uint64_t *field, uint64_t n)
{
    kvq__crew_add(&c->crew, field, n);
}

static void set_error(kvq_consumer *c, int rc)
{
    pthread_mutex_lock(&c->crew.mu);
    kvq__crew_fail_locked(&c->crew, rc);
    c->stopping = 1;
    pthread_mutex_unlock(&c->crew.mu);
}

/* A callback failed: allow a restart unless the limit per minute is used up. */
static int allow_restart(kvq_consumer *c)
{
    pthread_mutex_lock(&c->crew.mu);
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
    pthread_mutex_unlock(&c->crew.mu);
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
        kvq__crew_exit(&c->crew);
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
            add_stat(c, &c->stats.retries, (uint64_t)kvq_txn_get_retries(txn));
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
            pthread_mutex_lock(&c->crew.mu);
            int s = c->stopping;
            if (!s)
                w->watch = p.watch;
            pthread_mutex_unlock(&c->crew.mu);
            if (!s) {
                add_stat(c, &c->stats.empty_waits, 1);
                int wrc = kvq_watch_wait(p.watch, -1);
                pthread_mutex_lock(&c->crew.mu);
                w->watch = NULL;
                pthread_mutex_unlock(&c->crew.mu);
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
    kvq__crew_exit(&c->crew);
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
    int rc = kvq__crew_init(&c->crew, opts->workers, "kvq_consumer_start");
    if (rc != 0) {
        kvq__free(c);
        return rc;
    }
    c->db = db;
    c->src = *src;
    c->fn = fn;
    c->payload = payload;
    c->opts = *opts;
    c->wake_key = kvq__memdup(src->wake_key.data, src->wake_key.len);
    c->src.wake_key.data = c->wake_key;
    c->workers = kvq__calloc((size_t)opts->workers, sizeof(*c->workers));
    c->restart_window_start_us = kvq__mono_us();
    if (c->wake_key == NULL || c->workers == NULL) {
        kvq_consumer_destroy(c);
        return kvq__error(KVQ_ENOMEM, "kvq_consumer_start: out of memory");
    }
    for (int i = 0; i < opts->workers; i++) {
        c->workers[i].c = c;
        c->workers[i].id = i;
    }
    rc = kvq__crew_start(&c->crew, worker_main, c->workers, sizeof(*c->workers),
                         "kvq_consumer_start");
    if (rc != 0) {
        kvq_consumer_destroy(c); /* stops and joins the workers that started */
        return rc;
    }
    *out = c;
    return 0;
}

void kvq_consumer_stop(kvq_consumer *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->crew.mu);
    c->stopping = 1;
    for (int i = 0; i < c->crew.started; i++)
        if (c->workers[i].watch != NULL)
            kvq_watch_cancel(c->workers[i].watch);
    pthread_mutex_unlock(&c->crew.mu);
}

int kvq_consumer_join(kvq_consumer *c)
{
    if (c == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_consumer_join: consumer is NULL");
    return kvq__crew_join(&c->crew);
}

bool kvq_consumer_finished(kvq_consumer *c)
{
    return c == NULL ? 1 : kvq__crew_finished(&c->crew);
}

int kvq_consumer_get_stats(kvq_consumer_stats *out, kvq_consumer *c)
{
    if (out == NULL || c == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_consumer_get_stats: NULL argument");
    kvq__crew_read(&c->crew, out, &c->stats, sizeof(*out));
    return 0;
}

void kvq_consumer_destroy(kvq_consumer *c)
{
    if (c == NULL)
        return;
    kvq_consumer_stop(c);
    kvq__crew_destroy(&c->crew); /* joins the workers first */
    kvq__free(c->wake_key);
    kvq__free(c->workers);
    kvq__free(c);
}
