/* kvq's queues on the embedded engine in its default, durable mode (every commit returns once
 * its WAL frames are synced; commits from threads of one process are grouped into one sync).
 *
 * Rows: the durable queue (erlfdb's layout), the FIFO recipe and the priority queue recipe
 * (FIFO and priority in high-contention mode, meant for many consumers), all through the
 * convenience forms a program would call: kvq_queue_push / push_prio, and kvq_queue_consume_k
 * (pop up to k, and a watch on the push counter when the queue came up short; for FIFO and
 * priority queues with k = 1, the high-contention pop).
 * Batches: kvq_queue_push_many on every queue (FIFO and priority: K recipe items in one
 * transaction, priority 0).
 *
 * The work-queue row (kvq-workq) pushes as the durable queue's does and consumes as an
 * at-least-once consumer: kvq_workq_receive_many then kvq_workq_ack_many, two transactions per
 * batch (kvq_workq_receive and kvq_workq_ack for one message).
 *
 * Threads of one process share one kvq_db handle (that is what group commit needs); the
 * processes row opens the database in each forked client. An empty queue of every type is waited
 * on with the watch kvq_queue_consume_k returns (npush of a durable queue; the push counter kvq
 * keeps beside a FIFO or priority recipe's items). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qbench.h"

#ifndef QBENCH_HAVE_KVQ_QUEUE
static int kq_unavailable(void **state, const qb_setup *su)
{
    (void)state;
    (void)su;
    fprintf(stderr, "qbench: this kvq has no include/kvq/queue.h yet: kvq's queues skipped\n");
    return -1;
}

const qb_driver qb_kvq_driver = {
    .name = "kvq",
    .setup = kq_unavailable,
};
#else

#include <pthread.h>

#include "kvq/kvq.h"
#include "kvq/queue.h"
#include "kvq/workq.h"
#include "kvq/workq_batch.h"

typedef struct kq_state {
    char url[700];
    kvq_queue_type type;
    int sys; /* the row measured (QB_SYS_KVQ...) */
    pthread_mutex_t mu;
    int refs; /* connections of this process using db and q */
    qb_pipeline *pipeline; /* the phase's shared counters (may be NULL) */
    kvq_db *db;
    kvq_queue *q;
    kvq_workq *w; /* the work-queue row: receive with a lease, then ack */
} kq_state;

typedef struct kq_conn {
    kq_state *s;
    kvq_buf *bufs; /* batch of popped values */
    kvq_bytes *views;
    kvq_workq_lease *leases;
    size_t cap;
} kq_conn;

static int kq_fail(const char *what, int rc)
{
    fprintf(stderr, "qbench: kvq %s: %s (%s)\n", what, kvq_strerror(rc), kvq_last_error());
    return QB_FAIL;
}

static int kq_setup(void **state, const qb_setup *su)
{
    kq_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -1;
    /* A fresh database under the run's fresh directory. Nothing is opened here: a forked
     * client must not inherit an open handle. */
    snprintf(s->url, sizeof(s->url), "%s/kvq-db", su->path);
    s->type = su->sys == QB_SYS_KVQ_FIFO       ? KVQ_QUEUE_FIFO
              : su->sys == QB_SYS_KVQ_PRIORITY ? KVQ_QUEUE_PRIORITY
                                               : KVQ_QUEUE_DURABLE;
    s->sys = su->sys;
    s->pipeline = su->pipeline;
    pthread_mutex_init(&s->mu, NULL);
    *state = s;
    return 0;
}

/* Opens the process's handles on first use. */
static int kq_acquire(kq_state *s)
{
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    if (s->refs == 0) {
        kvq_db_options o = KVQ_DB_OPTIONS_INIT;
        /* Durable (flags 0, the default). Retry as long as it takes within 10 s, so that a
         * busy moment shows as a slower rate rather than a failed run. */
        o.retry_limit = -1;
        o.timeout_ms = 10000;
        kvq_queue_options qo = KVQ_QUEUE_OPTIONS_INIT;
        if (s->type != KVQ_QUEUE_DURABLE)
            qo.flags |= KVQ_QUEUE_HIGH_CONTENTION;
        rc = kvq_db_open(&s->db, s->url, &o);
        if (rc != 0) {
            kq_fail("open", rc);
        } else if ((rc = kvq_queue_open(&s->q, s->db, s->type, NULL, &qo)) != 0) {
            kq_fail("queue open", rc);
            kvq_db_close(s->db);
            s->db = NULL;
        } else if (s->sys == QB_SYS_KVQ_WORKQ && (rc = kvq_workq_open(&s->w, s->q, NULL)) != 0) {
            kq_fail("work queue open", rc);
            kvq_queue_close(s->q);
            kvq_db_close(s->db);
            s->q = NULL;
            s->db = NULL;
        }
    }
    if (rc == 0)
        s->refs++;
    pthread_mutex_unlock(&s->mu);
    return rc == 0 ? 0 : -1;
}

static void kq_release(kq_state *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->refs > 0 && --s->refs == 0) {
        /* How well commits were grouped (the group-commit batch actually reached), for the
         * progress log; with separate processes, one line per process. */
        kvq_db_stats st;
        int have = kvq_db_get_stats(&st, s->db) == 0;
        if (have && s->pipeline != NULL) {
            __atomic_add_fetch(&s->pipeline->commits, st.commits, __ATOMIC_SEQ_CST);
            __atomic_add_fetch(&s->pipeline->syncs, st.syncs, __ATOMIC_SEQ_CST);
            __atomic_add_fetch(&s->pipeline->conflicts, st.conflicts, __ATOMIC_SEQ_CST);
        }
        if (have && st.batches > 0)
            fprintf(stderr,
                    "    %s: %llu commits in %llu storage transactions (%.2f per transaction), "
                    "%llu syncs made by this handle (%.2f commits per sync; another process's "
                    "sync may cover them), %llu conflicts, %llu retries\n",
                    qb_system_names[s->sys], (unsigned long long)st.commits,
                    (unsigned long long)st.batches, (double)st.commits / (double)st.batches,
                    (unsigned long long)st.syncs,
                    st.syncs ? (double)st.commits / (double)st.syncs : 0.0,
                    (unsigned long long)st.conflicts, (unsigned long long)st.retries);
        kvq_workq_close(s->w);
        kvq_queue_close(s->q);
        kvq_db_close(s->db);
        s->w = NULL;
        s->q = NULL;
        s->db = NULL;
    }
    pthread_mutex_unlock(&s->mu);
}

static int kq_connect(qb_conn **out, void *state)
{
    kq_state *s = state;
    kq_conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -1;
    if (kq_acquire(s) != 0) {
        free(c);
        return -1;
    }
    c->s = s;
    *out = (qb_conn *)c;
    return 0;
}

static int kq_reserve(kq_conn *c, size_t n)
{
    if (n <= c->cap)
        return 0;
    kvq_buf *bufs = calloc(n, sizeof(*bufs));
    kvq_bytes *views = calloc(n, sizeof(*views));
    kvq_workq_lease *leases = calloc(n, sizeof(*leases));
    if (bufs == NULL || views == NULL || leases == NULL) {
        free(bufs);
        free(views);
        free(leases);
        return -1;
    }
    for (size_t i = 0; i < c->cap; i++)
        kvq_buf_dispose(&c->bufs[i]);
    free(c->bufs);
    free(c->views);
    free(c->leases);
    c->bufs = bufs;
    c->views = views;
    c->leases = leases;
    c->cap = n;
    return 0;
}

static int kq_push(qb_conn *qc, const uint8_t *msg, size_t size)
{
    kq_conn *c = (kq_conn *)qc;
    int rc = c->s->type == KVQ_QUEUE_PRIORITY ? kvq_queue_push_prio(c->s->q, msg, size, 0)
                                              : kvq_queue_push(c->s->q, msg, size);
    return rc == 0 ? 0 : kq_fail("push", rc);
}

static int kq_push_batch(qb_conn *qc, const uint8_t *msgs, size_t size, size_t count)
{
    kq_conn *c = (kq_conn *)qc;
    if (kq_reserve(c, count) != 0)
        return QB_FAIL;
    for (size_t i = 0; i < count; i++) {
        c->views[i].data = msgs + i * size;
        c->views[i].len = size;
    }
    int rc = kvq_queue_push_many(c->s->q, c->views, count);
    return rc == 0 ? 0 : kq_fail("push batch", rc);
}

static int take(uint8_t *dst, const kvq_buf *b, size_t size)
{
    if (b->len != size) {
        fprintf(stderr, "qbench: kvq: popped a %zu-byte value, want %zu\n", b->len, size);
        return QB_FAIL;
    }
    memcpy(dst, b->data, size);
    return 0;
}

/* The work-queue row: up to max items received in one transaction (a lease each), then acked
 * in one transaction, as an at-least-once consumer of small jobs does; an empty queue is waited
 * on with the long poll (one item, then acked). */
static int wq_pop_batch(kq_conn *c, uint8_t *buf, size_t size, size_t max, size_t *got,
                        int wait_ms)
{
    kvq_workq *w = c->s->w;
    size_t n = 0;
    int rc = max == 1 ? kvq_workq_receive(&c->bufs[0], &c->leases[0], w, 0)
                      : kvq_workq_receive_many(c->bufs, c->leases, &n, w, max, 0);
    if (max == 1 && rc == 0)
        n = 1;
    if (rc == KVQ_ENOTFOUND && wait_ms > 0) {
        rc = kvq_workq_receive_wait(&c->bufs[0], &c->leases[0], w, 0, wait_ms);
        n = rc == 0;
    }
    if (rc == KVQ_ENOTFOUND)
        return QB_EMPTY;
    if (rc != 0)
        return kq_fail("receive", rc);
    for (size_t i = 0; i < n; i++)
        if (take(buf + i * size, &c->bufs[i], size) != 0)
            return QB_FAIL;
    rc = n == 1 ? kvq_workq_ack(w, &c->leases[0]) : kvq_workq_ack_many(NULL, w, c->leases, n);
    if (rc != 0)
        return kq_fail("ack", rc);
    *got = n;
    return 0;
}

static int kq_pop_batch(qb_conn *qc, uint8_t *buf, size_t size, size_t max, size_t *got,
                        int wait_ms)
{
    kq_conn *c = (kq_conn *)qc;
    if (c->s->sys == QB_SYS_KVQ_WORKQ) {
        *got = 0;
        if (kq_reserve(c, max) != 0)
            return QB_FAIL;
        return wq_pop_batch(c, buf, size, max, got, wait_ms);
    }
    kvq_queue *q = c->s->q;
    *got = 0;
    if (kq_reserve(c, max) != 0)
        return QB_FAIL;
    double until = qb_now() + wait_ms / 1000.0;
    for (long tries = 0; tries < 1000000; tries++) {
        size_t n = 0;
        /* Pop, and in the same transaction arm a watch when the queue came up short. */
        kvq_watch *w = NULL;
        int rc = kvq_queue_consume_k(c->bufs, &n, &w, q, max);
        if (rc != 0)
            return kq_fail("consume", rc);
        if (n == 0 && w != NULL) {
            double left = until - qb_now();
            if (left > 0) {
                int wrc = kvq_watch_wait(w, (int64_t)(left * 1000.0) + 1);
                if (wrc != 0 && wrc != KVQ_ETIMED_OUT) {
                    kvq_watch_destroy(w);
                    return kq_fail("watch", wrc);
                }
            }
        }
        kvq_watch_destroy(w);
        for (size_t i = 0; i < n && i < max; i++) {
            if (take(buf + i * size, &c->bufs[i], size) != 0)
                return QB_FAIL;
        }
        *got = n;
        if (n > 0)
            return 0;
        if (qb_now() >= until)
            return QB_EMPTY;
    }
    return QB_EMPTY;
}

static int kq_pop(qb_conn *qc, uint8_t *buf, size_t size, int wait_ms)
{
    size_t got;
    return kq_pop_batch(qc, buf, size, 1, &got, wait_ms);
}

static void kq_disconnect(qb_conn *qc)
{
    kq_conn *c = (kq_conn *)qc;
    if (c == NULL)
        return;
    kq_release(c->s);
    for (size_t i = 0; i < c->cap; i++)
        kvq_buf_dispose(&c->bufs[i]);
    free(c->bufs);
    free(c->views);
    free(c->leases);
    free(c);
}

static void kq_teardown(void *state)
{
    kq_state *s = state;
    pthread_mutex_lock(&s->mu);
    if (s->refs > 0) {
        kvq_workq_close(s->w);
        kvq_queue_close(s->q);
        kvq_db_close(s->db);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static void kq_version(char *buf, size_t cap, const qb_options *opt, int sys)
{
    (void)opt;
    (void)sys;
    snprintf(buf, cap, "%s", kvq_version());
}

const qb_driver qb_kvq_driver = {
    .name = "kvq",
    .setup = kq_setup,
    .connect = kq_connect,
    .push = kq_push,
    .push_batch = kq_push_batch,
    .pop = kq_pop,
    .pop_batch = kq_pop_batch,
    .disconnect = kq_disconnect,
    .teardown = kq_teardown,
    .version = kq_version,
};
#endif
