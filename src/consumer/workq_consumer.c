/* The work queue's consumer runtime (kvq_workq_consumer_*, at least once): workers receive one
 * item at a time with a lease, hand it to the handler, and ack or nack by its answer; a
 * heartbeat thread extends the leases of the items in hand. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "consumer/crew.h"
#include "kvq/consumer.h"
#include "kvq/workq.h"
#include "layers/workq/workq_internal.h"

#define MAX_WORKERS 1024
/* How long one wait of a worker lasts; a worker with nothing to do waits again. It sleeps on
 * watches and the due times of delayed items and leases, and a stop wakes it at once, so this
 * only bounds one call. */
#define WAIT_MS 3600000

typedef struct slot slot;

struct kvq_workq_consumer {
    kvq_workq *w;
    kvq_workq_consumer_fn fn;
    void *payload;
    kvq_workq_consumer_options opts;
    int64_t lease_ms; /* opts.lease_ms, or the work queue's */
    slot *slots;
    kvq__crew crew; /* the workers' threads; its mu guards stats, its exit_cv wakes the heart */
    int heart_started;
    pthread_t heart;

    int stop; /* atomic */
    kvq_workq_consumer_stats stats;
};

/* A worker and the lease it holds. The heartbeat extends the lease under mu; the worker settles
 * it under mu, so that the two never use the lease at once. */
struct slot {
    kvq_workq_consumer *c;
    int id;
    pthread_mutex_t mu;
    int holding;          /* a lease is in hand */
    int64_t next_extend;  /* monotonic microseconds */
    kvq_workq_lease lease;
    kvq__wq_waker waker;  /* the worker's long poll; stopped by kvq_workq_consumer_stop */
    int waker_ready;
};

static void count(kvq_workq_consumer *c, uint64_t *field)
{
    kvq__crew_add(&c->crew, field, 1);
}

static void fail(kvq_workq_consumer *c, int rc)
{
    kvq__crew_fail(&c->crew, rc);
    kvq_workq_consumer_stop(c);
}

static int stopping(kvq_workq_consumer *c)
{
    return __atomic_load_n(&c->stop, __ATOMIC_ACQUIRE);
}

/* Settles the lease in hand by the handler's answer. 0, or an error that stops everything. */
static int settle(slot *s, int answer)
{
    kvq_workq_consumer *c = s->c;
    pthread_mutex_lock(&s->mu);
    s->holding = 0;
    int rc;
    if (answer == KVQ_WORKQ_ACK)
        rc = kvq_workq_ack(c->w, &s->lease);
    else
        rc = kvq_workq_nack(c->w, &s->lease,
                            answer == KVQ_WORKQ_RELEASE ? 0 : c->opts.nack_delay_ms);
    pthread_mutex_unlock(&s->mu);
    if (rc == KVQ_ELEASE_EXPIRED || rc == KVQ_ELEASE_SETTLED) {
        count(c, &c->stats.lost_leases);
        return 0;
    }
    if (rc != 0)
        return rc;
    count(c, answer == KVQ_WORKQ_ACK       ? &c->stats.acked
             : answer == KVQ_WORKQ_RELEASE ? &c->stats.released
                                           : &c->stats.nacked);
    return 0;
}

/* Counts the outcome of an ack that rode on a receive (kvq__wq_ack_receive). 0, or an error
 * that stops everything (the ack did not commit). */
static int count_ack(kvq_workq_consumer *c, int ack_rc)
{
    if (ack_rc == KVQ_ELEASE_EXPIRED || ack_rc == KVQ_ELEASE_SETTLED) {
        count(c, &c->stats.lost_leases);
        return 0;
    }
    if (ack_rc != 0)
        return ack_rc;
    count(c, &c->stats.acked);
    return 0;
}

/* One item at a time. An item the handler acks is acked in the transaction of the worker's next
 * receive (one commit per item), and alone, at once, when that receive finds nothing ready or
 * the consumer is stopping: its ack never waits for another item. */
static void *worker_main(void *arg)
{
    slot *s = arg;
    kvq_workq_consumer *c = s->c;
    kvq_buf v = KVQ_BUF_INIT;
    kvq_workq_lease lease, done;
    int pending = 0; /* done holds a finished item's lease, not yet acked */
    while (!stopping(c)) {
        int ack_rc = 0;
        int rc = kvq__wq_receive_wait(&v, &lease, c->w, c->lease_ms, c->opts.drain ? 0 : WAIT_MS,
                                      &s->waker, pending ? &done : NULL, &ack_rc);
        if (pending) {
            pending = 0;
            int arc = count_ack(c, ack_rc);
            if (arc != 0) {
                fail(c, arc);
                break;
            }
        }
        if (rc == KVQ_ENOTFOUND) {
            if (c->opts.drain)
                break;
            continue;
        }
        if (rc != 0) {
            fail(c, rc);
            break;
        }
        count(c, &c->stats.received);
        pthread_mutex_lock(&s->mu);
        s->lease = lease;
        s->holding = 1;
        s->next_extend = kvq__mono_us() + c->lease_ms * 1000 / 3;
        pthread_mutex_unlock(&s->mu);
        kvq_bytes item = { v.data, v.len };
        int answer = c->fn(item, &lease, s->id, c->payload);
        if (answer != KVQ_WORKQ_ACK && answer != KVQ_WORKQ_RELEASE)
            answer = KVQ_WORKQ_NACK;
        if (answer == KVQ_WORKQ_ACK && !stopping(c)) {
            /* The heartbeat stops extending it; the next receive acks it. */
            pthread_mutex_lock(&s->mu);
            s->holding = 0;
            done = s->lease;
            pthread_mutex_unlock(&s->mu);
            pending = 1;
            continue;
        }
        rc = settle(s, answer);
        if (rc != 0) {
            fail(c, rc);
            break;
        }
        if (answer == KVQ_WORKQ_RELEASE)
            kvq_workq_consumer_stop(c);
    }
    if (pending) {
        /* Stopped before the next receive: the ack alone. */
        int rc = kvq_workq_ack(c->w, &done);
        rc = rc == 0 ? count_ack(c, 0) : count_ack(c, rc);
        if (rc != 0)
            fail(c, rc);
    }
    kvq_buf_dispose(&v);
    kvq__crew_exit(&c->crew);
    return NULL;
}

/* Extends every lease in hand that is a third of the way through, until every worker ended. */
static void *heart_main(void *arg)
{
    kvq_workq_consumer *c = arg;
    int64_t every_ms = c->lease_ms / 6;
    if (every_ms < 1)
        every_ms = 1;
    if (every_ms > 1000)
        every_ms = 1000;
    kvq__crew *k = &c->crew;
    pthread_mutex_lock(&k->mu);
    while (k->exited < k->started) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = ts.tv_nsec + every_ms * 1000000;
        ts.tv_sec += (time_t)(ns / 1000000000);
        ts.tv_nsec = (long)(ns % 1000000000);
        pthread_cond_timedwait(&k->exit_cv, &k->mu, &ts);
        int n = k->started;
        pthread_mutex_unlock(&k->mu);
        for (int i = 0; i < n; i++) {
            slot *s = &c->slots[i];
            pthread_mutex_lock(&s->mu);
            if (s->holding && kvq__mono_us() >= s->next_extend) {
                int rc = kvq_workq_extend(c->w, &s->lease, c->lease_ms);
                s->next_extend = kvq__mono_us() + c->lease_ms * 1000 / 3;
                if (rc == 0)
                    count(c, &c->stats.extends);
                /* Failure (the lease already ended): the settlement will say so. */
            }
            pthread_mutex_unlock(&s->mu);
        }
        pthread_mutex_lock(&k->mu);
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

int kvq_workq_consumer_start(kvq_workq_consumer **out,
                             struct kvq_workq *w,
                             kvq_workq_consumer_fn fn,
                             void *payload,
                             const kvq_workq_consumer_options *opts)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_workq_consumer_start: out is NULL");
    *out = NULL;
    kvq_workq_consumer_options def = KVQ_WORKQ_CONSUMER_OPTIONS_INIT;
    if (opts == NULL)
        opts = &def;
    if (w == NULL || fn == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_workq_consumer_start: NULL work queue or handler");
    if (opts->version != KVQ_WORKQ_CONSUMER_OPTIONS_VERSION)
        return kvq__error(KVQ_EINVAL, "kvq_workq_consumer_start: options version %u is not %u",
                          opts->version, KVQ_WORKQ_CONSUMER_OPTIONS_VERSION);
    if (opts->workers < 1 || opts->workers > MAX_WORKERS)
        return kvq__error(KVQ_EINVAL, "kvq_workq_consumer_start: workers must be 1 to %d",
                          MAX_WORKERS);
    if (opts->lease_ms < 0 || opts->lease_ms > 86400000)
        return kvq__error(KVQ_EINVAL, "kvq_workq_consumer_start: a lease of %lld ms is out of "
                                      "range (0 for the queue's, up to 1 day)",
                          (long long)opts->lease_ms);
    if (opts->nack_delay_ms < 0 || opts->nack_delay_ms > 86400000)
        return kvq__error(KVQ_EINVAL, "kvq_workq_consumer_start: a nack delay of %lld ms is out "
                                      "of range (0 to 1 day)",
                          (long long)opts->nack_delay_ms);
    kvq_workq_consumer *c = kvq__calloc(1, sizeof(*c));
    slot *slots = kvq__calloc((size_t)opts->workers, sizeof(*slots));
    if (c == NULL || slots == NULL) {
        kvq__free(c);
        kvq__free(slots);
        return kvq__error(KVQ_ENOMEM, "kvq_workq_consumer_start: out of memory");
    }
    int rc = kvq__crew_init(&c->crew, opts->workers, "kvq_workq_consumer_start");
    if (rc != 0) {
        kvq__free(c);
        kvq__free(slots);
        return rc;
    }
    c->w = w;
    c->fn = fn;
    c->payload = payload;
    c->opts = *opts;
    c->lease_ms = opts->lease_ms > 0 ? opts->lease_ms : kvq__wq_lease_ms(w);
    c->slots = slots;
    for (int i = 0; i < opts->workers; i++) {
        slots[i].c = c;
        slots[i].id = i;
        pthread_mutex_init(&slots[i].mu, NULL);
        if (rc == 0)
            rc = kvq__wq_waker_init(&slots[i].waker);
        slots[i].waker_ready = rc == 0;
    }
    if (rc == 0)
        rc = kvq__crew_start(&c->crew, worker_main, slots, sizeof(*slots),
                             "kvq_workq_consumer_start");
    if (rc == 0) {
        if (pthread_create(&c->heart, NULL, heart_main, c) != 0)
            rc = kvq__error(KVQ_ENOMEM, "kvq_workq_consumer_start: cannot start a thread");
        else
            c->heart_started = 1;
    }
    if (rc != 0) {
        kvq_workq_consumer_destroy(c);
        return rc;
    }
    *out = c;
    return 0;
}

void kvq_workq_consumer_stop(kvq_workq_consumer *c)
{
    if (c == NULL)
        return;
    __atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
    /* Wakes the workers that wait for an item. */
    for (int i = 0; i < c->opts.workers; i++)
        if (c->slots[i].waker_ready)
            kvq__wq_waker_stop(&c->slots[i].waker);
}

int kvq_workq_consumer_join(kvq_workq_consumer *c)
{
    if (c == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_workq_consumer_join: consumer is NULL");
    (void)kvq__crew_join(&c->crew);
    if (c->heart_started) { /* it ends once every worker has */
        pthread_join(c->heart, NULL);
        c->heart_started = 0;
    }
    return kvq__crew_error(&c->crew);
}

bool kvq_workq_consumer_finished(kvq_workq_consumer *c)
{
    return c == NULL ? 1 : kvq__crew_finished(&c->crew);
}

int kvq_workq_consumer_get_stats(kvq_workq_consumer_stats *out, kvq_workq_consumer *c)
{
    if (out == NULL || c == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_workq_consumer_get_stats: NULL argument");
    kvq__crew_read(&c->crew, out, &c->stats, sizeof(*out));
    return 0;
}

void kvq_workq_consumer_destroy(kvq_workq_consumer *c)
{
    if (c == NULL)
        return;
    kvq_workq_consumer_stop(c);
    /* The consumer's result was for kvq_workq_consumer_join; destroying only needs the join. */
    int joined = kvq_workq_consumer_join(c);
    (void)joined;
    for (int i = 0; i < c->opts.workers; i++) {
        pthread_mutex_destroy(&c->slots[i].mu);
        if (c->slots[i].waker_ready)
            kvq__wq_waker_destroy(&c->slots[i].waker);
    }
    kvq__crew_destroy(&c->crew);
    kvq__free(c->slots);
    kvq__free(c);
}
