/* The work queue's long poll (kvq_workq_receive_wait) and the waker the leased consumer stops
 * it with. */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "kvq/testing.h"
#include "layers/workq/workq_internal.h"

/* ---- waiting for an item ------------------------------------------------------------------- */

/* A long poll looks (a receive), arms watches, looks again, and then sleeps until the earliest
 * of its deadline, the due time of the first delayed item and the end of the first lease (an
 * ended lease gives its item back), or until one of these keys changes:
 *
 *   the ready counter   every push and every return to the queue: npush of a durable queue;
 *                       of a priority queue, n_ready (what this API makes ready) and kvq's push
 *                       counter beside the recipe (bk + ("npush",)), which every kvq push adds
 *                       to (kvq_queue_push_prio, push_many, the staging upkeep's returns)
 *   n_delayed           a delayed push or a nack with a delay: perhaps an earlier due time
 *   n_inflight          a receive: a new lease, perhaps ending before the others
 *   tick                an extend that shortens a lease (and kvq_workq_recover)
 *
 * The due time and the lease end are read with snapshot reads (no conflicts) in the transaction
 * that arms the watches, and measured from its read version, so that anything that moves them
 * after that version fires a watch and the waiter works them out again. There is no periodic
 * slice: an idle waiter sleeps until its deadline. Only when a watch cannot be had (too many
 * watches, or one failed) or a helper thread cannot be started does it look every
 * WAIT_SLICE_MS, as a safe fallback. A program that writes a priority recipe's items itself
 * (not through kvq) moves neither counter: as for kvq_queue_watch, its items are found by the
 * next look, but do not wake a sleeping waiter. */
#define WAIT_SLICE_MS 200
#define N_WAIT_KEYS   5 /* a durable queue's waiter watches the first 4 */
/* Something was due and yet nothing was received (another waiter took it): sleep at least this
 * much before looking again, doubling up to WAIT_BACKOFF_MAX_MS while it lasts. */
#define WAIT_BACKOFF_MAX_MS 100

int kvq__wq_waker_init(kvq__wq_waker *k)
{
    memset(k, 0, sizeof(*k));
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return kvq__error(KVQ_ENOMEM, "out of memory for a waiter");
    int err = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (err == 0)
        err = pthread_cond_init(&k->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (err != 0)
        return kvq__error(KVQ_ENOMEM, "out of memory for a waiter");
    if (pthread_mutex_init(&k->mu, NULL) != 0) {
        pthread_cond_destroy(&k->cond);
        return kvq__error(KVQ_ENOMEM, "out of memory for a waiter");
    }
    return 0;
}

void kvq__wq_waker_destroy(kvq__wq_waker *k)
{
    pthread_cond_destroy(&k->cond);
    pthread_mutex_destroy(&k->mu);
}

void kvq__wq_waker_stop(kvq__wq_waker *k)
{
    pthread_mutex_lock(&k->mu);
    k->stop = 1;
    pthread_cond_broadcast(&k->cond);
    pthread_mutex_unlock(&k->mu);
}

static int waker_stopped(kvq__wq_waker *k)
{
    if (k == NULL)
        return 0;
    pthread_mutex_lock(&k->mu);
    int s = k->stop;
    pthread_mutex_unlock(&k->mu);
    return s;
}

typedef struct arm_ctx {
    kvq_workq *w;
    int n;                         /* how many keys this queue's waiter watches */
    kvq_watch *watch[N_WAIT_KEYS]; /* armed, or NULL */
    int64_t rv;                    /* the arming transaction's read version */
    int64_t mono_us;               /* the monotonic clock just after rv was taken */
    int64_t next;                  /* the first due time or lease end (versions; INT64_MAX: none) */
} arm_ctx;

static void arm_release(arm_ctx *c)
{
    for (int i = 0; i < N_WAIT_KEYS; i++) {
        kvq_watch_destroy(c->watch[i]);
        c->watch[i] = NULL;
    }
}

/* The time (first tuple element) of the first key of an index, or INT64_MAX when it is empty. */
static int first_time(kvq_txn *txn, const kvq_buf *base, kvq_buf *lo, kvq_buf *hi, int64_t *out)
{
    *out = INT64_MAX;
    const kvq_kv *kvs;
    size_t got = 0;
    int rc = kvq__wq_range_of(lo, hi, base);
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo->data, lo->len, hi->data, hi->len, 1,
                               KVQ_SNAPSHOT);
    if (rc != 0 || got == 0)
        return rc;
    kvq_tuple *t = NULL;
    rc = kvq_tuple_unpack(&t, kvs[0].key.data + base->len, kvs[0].key.len - base->len);
    if (rc != 0 || kvq_tuple_get_count(t) < 2 || kvq_tuple_get_elem(t, 0)->type != KVQ_TUPLE_INT)
        rc = kvq__error(KVQ_EDAMAGED, "a malformed delayed-item or lease-expiry key");
    else
        *out = kvq_tuple_get_elem(t, 0)->v.i;
    kvq_tuple_destroy(t);
    return rc;
}

/* Arms the watches and reads, at the same read version, when the next item falls due. */
static int arm_body(kvq_txn *txn, void *arg)
{
    arm_ctx *c = arg;
    kvq_workq *w = c->w;
    arm_release(c); /* an earlier attempt's */
    /* The ready counter first; a durable queue's is npush, so its waiter watches 4 keys. */
    const kvq_buf *keys[N_WAIT_KEYS] = { w->q->type == KVQ_QUEUE_DURABLE ? &w->q->npush
                                                                         : &w->n_ready,
                                         &w->n_delayed, &w->n_inflight, &w->tick, &w->q->npush };
    int rc = kvq_txn_get_read_version(&c->rv, txn);
    c->mono_us = kvq__mono_us();
    for (int i = 0; rc == 0 && i < c->n; i++)
        rc = kvq_txn_watch(&c->watch[i], txn, keys[i]->data, keys[i]->len);
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    int64_t due = INT64_MAX, ends = INT64_MAX;
    if (rc == 0)
        rc = first_time(txn, &w->base_y, &lo, &hi, &due);
    if (rc == 0)
        rc = first_time(txn, &w->base_x, &lo, &hi, &ends);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    if (ends != INT64_MAX && kvq__wq_expiry_bound(w, c->rv) == INT64_MAX)
        ends = c->rv; /* test knob: upkeep returns every lease at once */
    c->next = due < ends ? due : ends;
    return rc;
}

typedef struct wait_helper {
    kvq_watch *watch;
    kvq__wq_waker *k;
    pthread_t thread;
} wait_helper;

/* Waits on one watch and tells the waker; a cancel (the sleep is over) tells nothing. */
static void *helper_main(void *arg)
{
    wait_helper *h = arg;
    int rc = kvq_watch_wait(h->watch, -1);
    pthread_mutex_lock(&h->k->mu);
    if (rc == 0)
        h->k->fired = 1;
    else if (rc != KVQ_EWATCH_CANCELLED)
        h->k->failed = 1;
    pthread_cond_broadcast(&h->k->cond);
    pthread_mutex_unlock(&h->k->mu);
    return NULL;
}

/* Sleeps until until_us (monotonic), one of the n watches fires or the waker is stopped;
 * without all its watches (or once one failed) at most WAIT_SLICE_MS. kvq_watch_wait waits on
 * one watch, so each watch gets a helper thread for the sleep; they end before this returns.
 * Returns 1 when a watch ended the sleep, else 0. */
static int sleep_on(kvq__wq_waker *k, kvq_watch *const *watch, int n, int64_t until_us)
{
    wait_helper h[N_WAIT_KEYS];
    int started = 0;
    pthread_mutex_lock(&k->mu);
    k->fired = 0;
    k->failed = 0;
    pthread_mutex_unlock(&k->mu);
    for (int i = 0; i < n && watch[i] != NULL; i++) {
        h[i].watch = watch[i];
        h[i].k = k;
        if (pthread_create(&h[i].thread, NULL, helper_main, &h[i]) != 0)
            break;
        started++;
    }
    int64_t slice_end = kvq__mono_us() + WAIT_SLICE_MS * 1000;
    pthread_mutex_lock(&k->mu);
    for (;;) {
        int64_t end = until_us;
        if ((started < n || k->failed) && slice_end < end)
            end = slice_end;
        if (k->stop || k->fired || kvq__mono_us() >= end)
            break;
        struct timespec ts = { (time_t)(end / 1000000), (long)(end % 1000000) * 1000 };
        (void)pthread_cond_timedwait(&k->cond, &k->mu, &ts);
    }
    int woken = k->fired;
    pthread_mutex_unlock(&k->mu);
    for (int i = 0; i < started; i++)
        kvq_watch_cancel(h[i].watch);
    for (int i = 0; i < started; i++)
        pthread_join(h[i].thread, NULL);
    return woken;
}

/* One look: kvq_workq_receive, counted for the tests once it has returned (so that a test that
 * sees the second look counted knows that it found nothing and the watches are armed). */
static int look(kvq_workq *w, kvq_buf *out, kvq_workq_lease *lease, int64_t lease_ms)
{
    int rc = kvq_workq_receive(out, lease, w, lease_ms);
    __atomic_add_fetch(&w->wait_looks, 1, __ATOMIC_RELEASE);
    return rc;
}

int kvq__wq_receive_wait(kvq_buf *out,
                         kvq_workq_lease *lease,
                         kvq_workq *w,
                         int64_t lease_ms,
                         int64_t wait_ms,
                         kvq__wq_waker *waker,
                         kvq_workq_lease *ack,
                         int *ack_rc)
{
    int64_t deadline = kvq__mono_us() + wait_ms * 1000;
    int rc;
    if (ack != NULL) {
        /* The first look carries the ack (committed alone when nothing is ready). */
        rc = kvq__wq_ack_receive(out, lease, w, lease_ms, ack, ack_rc);
        __atomic_add_fetch(&w->wait_looks, 1, __ATOMIC_RELEASE);
    } else {
        rc = look(w, out, lease, lease_ms);
    }
    if (rc != KVQ_ENOTFOUND || wait_ms == 0 || waker_stopped(waker))
        return rc;
    kvq__wq_waker local;
    if (waker == NULL) {
        int lrc = kvq__wq_waker_init(&local);
        if (lrc != 0)
            return lrc;
    }
    kvq__wq_waker *k = waker != NULL ? waker : &local;
    arm_ctx c;
    memset(&c, 0, sizeof(c));
    c.w = w;
    c.n = w->q->type == KVQ_QUEUE_DURABLE ? N_WAIT_KEYS - 1 : N_WAIT_KEYS;
    int64_t backoff_ms = 0;
    for (;;) {
        /* Armed before the second look, so that nothing made ready after it goes unnoticed. */
        int arc = kvq_db_transact(w->q->db, arm_body, &c);
        if (arc != 0) {
            arm_release(&c); /* then sleep_on looks every WAIT_SLICE_MS */
            if (arc != KVQ_ETOO_MANY_WATCHES) {
                rc = arc;
                break;
            }
        }
        rc = look(w, out, lease, lease_ms);
        int64_t now = kvq__mono_us();
        if (rc != KVQ_ENOTFOUND || now >= deadline)
            break;
        int64_t until = deadline;
        if (arc == 0 && c.next != INT64_MAX) {
            int64_t dv = c.next - c.rv; /* versions until the next item falls due */
            if (dv <= 0) {
                /* Due, yet not received: another waiter was first. Not a busy loop. */
                backoff_ms = backoff_ms == 0 ? 1 : backoff_ms * 2;
                if (backoff_ms > WAIT_BACKOFF_MAX_MS)
                    backoff_ms = WAIT_BACKOFF_MAX_MS;
                dv = backoff_ms * KVQ__VERSIONS_PER_MS;
            } else {
                backoff_ms = 0;
            }
            /* Upkeep moves an item once its time is below the read version: a millisecond
             * later, the item is due for certain. */
            if (dv / KVQ__VERSIONS_PER_MS < (deadline - c.mono_us) / 1000)
                until = c.mono_us + (dv / KVQ__VERSIONS_PER_MS + 1) * 1000;
        }
        int woken = sleep_on(k, c.watch, c.n, until);
        arm_release(&c);
        __atomic_add_fetch(&w->wait_sleeps, 1, __ATOMIC_RELAXED);
        if (woken)
            __atomic_add_fetch(&w->wait_wakes, 1, __ATOMIC_RELAXED);
        if (waker_stopped(k)) {
            rc = KVQ_ENOTFOUND;
            kvq__error(rc, "the wait was stopped with nothing ready");
            break;
        }
        if (kvq__mono_us() >= deadline) {
            rc = look(w, out, lease, lease_ms); /* the last look, at the deadline */
            break;
        }
    }
    arm_release(&c);
    if (waker == NULL)
        kvq__wq_waker_destroy(&local);
    return rc;
}

int kvq_testing_workq_wait_counts(uint64_t *looks, uint64_t *sleeps, kvq_workq *w)
{
    if (w == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_testing_workq_wait_counts: w is NULL");
    if (looks != NULL)
        *looks = __atomic_load_n(&w->wait_looks, __ATOMIC_ACQUIRE);
    if (sleeps != NULL)
        *sleeps = __atomic_load_n(&w->wait_sleeps, __ATOMIC_RELAXED);
    return 0;
}

int kvq_testing_workq_wait_wakes(uint64_t *wakes, kvq_workq *w)
{
    if (w == NULL || wakes == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_testing_workq_wait_wakes: NULL w or wakes");
    *wakes = __atomic_load_n(&w->wait_wakes, __ATOMIC_RELAXED);
    return 0;
}

int kvq_workq_receive_wait(
    kvq_buf *out, kvq_workq_lease *lease, kvq_workq *w, int64_t lease_ms, int64_t wait_ms)
{
    int rc = kvq__wq_check(w, NULL, 0, "kvq_workq_receive_wait");
    if (rc == 0 && (out == NULL || lease == NULL))
        rc = kvq__error(KVQ_EINVAL, "kvq_workq_receive_wait: NULL out or lease");
    if (rc == 0 && (wait_ms < 0 || wait_ms > 86400000))
        rc = kvq__error(KVQ_EINVAL,
                        "kvq_workq_receive_wait: a wait of %lld ms is out of range "
                        "(0 to 1 day)",
                        (long long)wait_ms);
    if (rc != 0)
        return rc;
    return kvq__wq_receive_wait(out, lease, w, lease_ms, wait_ms, NULL, NULL, NULL);
}
