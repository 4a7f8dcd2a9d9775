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
 * batch; one message at a time, as the consumer runtime does (issue 30 item 5), the ack of the
 * message handed over last rides in the transaction of the next receive (kvq_workq_ack_txn with
 * kvq_workq_receive_txn): one transaction per message, the ack alone when nothing is ready.
 *
 * Every row runs on both storages of the embedded engine: the log store (a plain path, the
 * default) and the older SQLite storage (the kvq-sqlite rows: a "sqlite:" URL; only kvq-sqlite
 * by default). qb_kvq_memory measures the
 * memory rows (bytes of memory per byte of live data) of either storage's durable queue: on the
 * log store straight after the push (every item inside the window) and again once the store's
 * statistics (kvq__logstore_get_stats, an internal header of the kvq tree measured) say that
 * its table holds every item.
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

int qb_kvq_memory(qb_memory *out, const qb_options *o, int sys, const char *path,
                  double deadline)
{
    (void)out;
    (void)o;
    (void)sys;
    (void)path;
    (void)deadline;
    return kq_unavailable(NULL, NULL);
}
#else

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq/queue.h"
#include "kvq/workq.h"
#include "kvq/workq_batch.h"
#ifdef QBENCH_HAVE_LOGSTORE_STATS
#include "engine/embedded/emb.h"
#include "engine/embedded/logstore/store_log.h"
#include "engine/engine.h"
#endif

typedef struct kq_state {
    char url[700];
    kvq_queue_type type;
    int sys;  /* the row measured (QB_SYS_KVQ...) */
    int base; /* the same row of the SQLite storage (qb_system_kvq_base) */
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
    int pending; /* done: the lease of the message handed over last, not yet acked */
    kvq_workq_lease done;
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
    snprintf(s->url, sizeof(s->url), "%s%s/kvq-db", qb_system_is_sqlite(su->sys) ? "sqlite:" : "",
             su->path);
    s->base = qb_system_kvq_base(su->sys);
    s->type = s->base == QB_SYS_KVQ_FIFO       ? KVQ_QUEUE_FIFO
              : s->base == QB_SYS_KVQ_PRIORITY ? KVQ_QUEUE_PRIORITY
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
        } else if (s->base == QB_SYS_KVQ_WORKQ &&
                   (rc = kvq_workq_open(&s->w, s->q, NULL)) != 0) {
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

/* One message: ack the pending lease and receive the next in one transaction. */
typedef struct ackrecv {
    kq_conn *c;
    kvq_bytes got;
    int empty, maybe;
} ackrecv;

static int ackrecv_body(kvq_txn *txn, void *arg)
{
    ackrecv *a = arg;
    kq_conn *c = a->c;
    a->empty = 0;
    int rc = kvq_workq_ack_txn(c->s->w, txn, &c->done);
    if (rc == KVQ_ELEASE_SETTLED && a->maybe)
        rc = 0; /* an attempt that reported 1021 had committed it */
    if (rc != 0)
        return rc;
    rc = kvq_workq_receive_txn(&a->got, &c->leases[0], c->s->w, txn, 0);
    if (rc == KVQ_ENOTFOUND) {
        a->empty = 1; /* the ack alone */
        return 0;
    }
    if (rc == 0) {
        c->bufs[0].len = 0;
        if (kvq_buf_append(&c->bufs[0], a->got.data, a->got.len) != 0)
            rc = KVQ_ENOMEM;
    }
    return rc;
}

static int ack_receive(kq_conn *c)
{
    ackrecv a = { c, { NULL, 0 }, 0, 0 };
    kvq_txn *txn;
    int rc = kvq_txn_create(&txn, c->s->db);
    for (; rc == 0;) {
        rc = ackrecv_body(txn, &a);
        if (rc == 0)
            rc = kvq_txn_commit(txn);
        if (rc == 0)
            break;
        if (kvq_error_maybe_committed(rc))
            a.maybe = 1;
        rc = kvq_txn_on_error(txn, rc);
    }
    kvq_txn_destroy(txn);
    c->pending = 0;
    return rc == 0 && a.empty ? KVQ_ENOTFOUND : rc;
}

/* The work-queue row: up to max items received in one transaction (a lease each), then acked
 * in one transaction, as an at-least-once consumer of small jobs does; an empty queue is waited
 * on with the long poll (one item, then acked). */
static int wq_pop_batch(kq_conn *c, uint8_t *buf, size_t size, size_t max, size_t *got,
                        int wait_ms)
{
    kvq_workq *w = c->s->w;
    size_t n = 0;
    int rc = max == 1 && c->pending ? ack_receive(c)
             : max == 1             ? kvq_workq_receive(&c->bufs[0], &c->leases[0], w, 0)
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
    if (max == 1 && n == 1) {
        /* Acked with the next receive (or at disconnect). */
        c->done = c->leases[0];
        c->pending = 1;
        *got = 1;
        return 0;
    }
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
    if (c->s->base == QB_SYS_KVQ_WORKQ) {
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
    if (c->pending && kvq_workq_ack(c->s->w, &c->done) != 0)
        (void)kq_fail("ack", kvq_last_error_code());
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

/* ---- the memory rows --------------------------------------------------------------------------
 * Each step runs in a child process, so that no process measures memory it inherited or had
 * used before, and qbench itself never holds a handle a forked client could inherit. The steps:
 * fill; measure (1 process, then o->mem_procs); on the log store, wait (one process holds the
 * database open until its table holds every item), then measure again. */

enum { MEM_MAX_PROCS = 64 };

typedef struct mem_shared {
    int ready;  /* children that have measured (atomic) */
    int failed; /* a child failed (atomic) */
    long item_bytes;
    double delta_kb[MEM_MAX_PROCS];
    double open_s[MEM_MAX_PROCS];
    double fill_s;
    double wait_s;
    unsigned long long window_keys, window_map_bytes, map_bytes_after, table_live;
} mem_shared;

enum { MEM_FILL, MEM_MEASURE, MEM_WAIT };

/* The process's resident anonymous memory in KiB, or -1. */
static long rss_anon_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "RssAnon: %ld kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb;
}

static int mem_open(kvq_db **db, kvq_queue **q, const char *url)
{
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.retry_limit = -1;
    o.timeout_ms = 60000;
    int rc = kvq_db_open(db, url, &o);
    if (rc != 0)
        return kq_fail("memory: open", rc);
    rc = kvq_queue_open(q, *db, KVQ_QUEUE_DURABLE, NULL, NULL);
    if (rc != 0) {
        kvq_db_close(*db);
        return kq_fail("memory: queue open", rc);
    }
    return 0;
}

/* Queues the items, 1,000 per transaction, and records the bytes (key + value) of one. */
static int mem_fill(const char *url, const qb_options *o, mem_shared *sh)
{
    kvq_db *db = NULL;
    kvq_queue *q = NULL;
    if (mem_open(&db, &q, url) != 0)
        return -1;
    enum { K = 1000 };
    size_t size = (size_t)o->size;
    uint8_t *vals = malloc(size * K);
    kvq_bytes *views = calloc(K, sizeof(*views));
    int rc = vals == NULL || views == NULL ? KVQ_ENOMEM : 0;
    double t0 = qb_now();
    for (long i = 0; rc == 0 && i < o->mem_items; i += K) {
        size_t k = (size_t)(o->mem_items - i < K ? o->mem_items - i : K);
        for (size_t j = 0; j < k; j++) {
            uint64_t seq = (uint64_t)i + j;
            uint8_t *v = vals + j * size;
            memcpy(v, &seq, sizeof(seq));
            for (size_t b = sizeof(seq); b < size; b++)
                v[b] = (uint8_t)('a' + (seq + b) % 26);
            views[j].data = v;
            views[j].len = size;
        }
        rc = kvq_queue_push_many(q, views, k);
    }
    sh->fill_s = qb_now() - t0;
    if (rc != 0)
        kq_fail("memory: push", rc);
    /* The last item: the last key under prefix + pack((b"val",)). */
    kvq_txn *txn = NULL;
    kvq_bytes pfx = kvq_queue_get_prefix(q);
    uint8_t lo[300], hi[300];
    static const uint8_t val[] = { 0x01, 'v', 'a', 'l', 0x00 };
    if (rc == 0 && pfx.len + sizeof(val) > sizeof(lo)) {
        fprintf(stderr, "qbench: memory: the queue's prefix is too long\n");
        rc = -1;
    }
    if (rc == 0 && (rc = kvq_txn_create(&txn, db)) != 0)
        kq_fail("memory: transaction", rc);
    if (rc == 0) {
        memcpy(lo, pfx.data, pfx.len);
        memcpy(lo + pfx.len, val, sizeof(val));
        memcpy(hi, lo, pfx.len + sizeof(val));
        hi[pfx.len + sizeof(val) - 1] = 0x01;
        const kvq_kv *kv = NULL;
        size_t n = 0;
        rc = kvq_txn_get_range(&kv, &n, NULL, txn, lo, pfx.len + sizeof(val), hi,
                               pfx.len + sizeof(val), 1, KVQ_SNAPSHOT | KVQ_REVERSE);
        if (rc != 0)
            kq_fail("memory: read", rc);
        else if (n != 1 || kv[0].value.len != size) {
            fprintf(stderr, "qbench: memory: the queue's last key is not an item\n");
            rc = -1;
        } else {
            sh->item_bytes = (long)(kv[0].key.len + kv[0].value.len);
        }
        kvq_txn_destroy(txn);
    }
    free(vals);
    free(views);
    kvq_queue_close(q);
    kvq_db_close(db);
    return rc == 0 ? 0 : -1;
}

/* One of nprocs processes: opens the queue, reads its length and head, measures, and holds the
 * database open until every process has measured (or the deadline). */
static int mem_measure(const char *url, const qb_options *o, mem_shared *sh, int idx,
                       int nprocs, double deadline)
{
    long before = rss_anon_kb();
    double t0 = qb_now();
    kvq_db *db = NULL;
    kvq_queue *q = NULL;
    if (before < 0 || mem_open(&db, &q, url) != 0)
        return -1;
    uint64_t len = 0;
    kvq_buf head = KVQ_BUF_INIT;
    int rc = kvq_queue_len(&len, q);
    if (rc == 0)
        rc = kvq_queue_peek(&head, q);
    long after = rss_anon_kb();
    if (rc != 0) {
        kq_fail("memory: read", rc);
    } else if (len != (uint64_t)o->mem_items || head.len != (size_t)o->size || after < 0) {
        fprintf(stderr, "qbench: memory: the queue holds %llu items, want %ld\n",
                (unsigned long long)len, o->mem_items);
        rc = -1;
    } else {
        sh->delta_kb[idx] = (double)(after - before);
        sh->open_s[idx] = qb_now() - t0;
        __atomic_add_fetch(&sh->ready, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&sh->ready, __ATOMIC_SEQ_CST) < nprocs &&
               !__atomic_load_n(&sh->failed, __ATOMIC_SEQ_CST) && qb_now() < deadline)
            qb_sleep_us(10000);
    }
    kvq_buf_dispose(&head);
    kvq_queue_close(q);
    kvq_db_close(db);
    return rc == 0 ? 0 : -1;
}

/* The wait step: opens the database (which replays into this process's map whatever the table
 * does not hold: the window, at first) and holds it open while its applier moves those batches
 * into the table, until the log store's statistics show no live key left in the map (the map
 * holds only the batches newer than the table), for QB_MEM_PAST_WAIT_S at most. Nothing commits
 * meanwhile, so the table then holds every item. */
static int mem_wait(const char *url, mem_shared *sh, double deadline)
{
#ifndef QBENCH_HAVE_LOGSTORE_STATS
    (void)url;
    (void)sh;
    (void)deadline;
    fprintf(stderr, "qbench: memory: the kvq tree measured has no log store statistics "
                    "(src/engine/embedded/logstore/store_log.h): no figures past the window\n");
    return -1;
#else
    kvq_db *db = NULL;
    kvq_queue *q = NULL;
    if (mem_open(&db, &q, url) != 0)
        return -1;
    int rc = -1;
    emb_db *e = strcmp(kvq_db_get_engine(db), "embedded") == 0 ? db->engine : NULL;
    if (e == NULL || e->so != &emb_log_store) {
        fprintf(stderr, "qbench: memory: %s is not on the log store: no figures past the "
                        "window\n", url);
    } else {
        kvq__logstore_stats st;
        kvq__logstore_get_stats(e->store, &st);
        sh->window_keys = st.live_keys;
        sh->window_map_bytes = st.map_mem;
        double t0 = qb_now(), until = t0 + QB_MEM_PAST_WAIT_S;
        if (until > deadline)
            until = deadline;
        while (st.live_keys > 0 && qb_now() < until) {
            qb_sleep_us(50000);
            kvq__logstore_get_stats(e->store, &st);
        }
        sh->wait_s = qb_now() - t0;
        sh->table_live = st.table_live;
        sh->map_bytes_after = st.map_mem;
        if (st.live_keys == 0)
            rc = 0;
        else
            fprintf(stderr, "qbench: memory: %llu keys still newer than the table after %.0f s: "
                            "no figures past the window\n",
                    (unsigned long long)st.live_keys, sh->wait_s);
    }
    kvq_queue_close(q);
    kvq_db_close(db);
    return rc;
#endif
}

/* Runs step (MEM_*) in nprocs children and waits for them until the deadline. */
static int mem_children(const char *url, const qb_options *o, mem_shared *sh, int step,
                        int nprocs, double deadline)
{
    pid_t pids[MEM_MAX_PROCS];
    int started = 0, rc = 0;
    sh->ready = 0;
    sh->failed = 0;
    for (int i = 0; i < nprocs; i++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            int crc = step == MEM_FILL      ? mem_fill(url, o, sh)
                      : step == MEM_MEASURE ? mem_measure(url, o, sh, i, nprocs, deadline)
                                            : mem_wait(url, sh, deadline);
            if (crc != 0)
                __atomic_store_n(&sh->failed, 1, __ATOMIC_SEQ_CST);
            _exit(crc == 0 ? 0 : 1);
        }
        if (pid < 0) {
            perror("qbench: memory: fork");
            __atomic_store_n(&sh->failed, 1, __ATOMIC_SEQ_CST);
            rc = -1;
            break;
        }
        pids[started++] = pid;
    }
    int left = started;
    while (left > 0) {
        for (int i = 0; i < started; i++) {
            int status = 0;
            if (pids[i] > 0 && waitpid(pids[i], &status, WNOHANG) == pids[i]) {
                if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                    rc = -1;
                pids[i] = 0;
                left--;
            }
        }
        if (left > 0 && qb_now() > deadline + 15.0) {
            fprintf(stderr, "qbench: memory: out of time; stopping %d processes\n", left);
            for (int i = 0; i < started; i++) {
                if (pids[i] > 0) {
                    kill(pids[i], SIGKILL);
                    waitpid(pids[i], NULL, 0);
                }
            }
            return -1;
        }
        if (left > 0)
            qb_sleep_us(5000);
    }
    return rc == 0 && !sh->failed ? 0 : -1;
}

/* Measures 1 process, then o->mem_procs at once: their bytes per live byte into *one, *many
 * (the mean) and *many_max, their open times into *open_one and *open_many (the slowest). */
static int mem_measure_both(const char *url, const qb_options *o, mem_shared *sh, double live,
                            double deadline, double *one, double *many, double *many_max,
                            double *open_one, double *open_many)
{
    int rc = mem_children(url, o, sh, MEM_MEASURE, 1, deadline);
    if (rc != 0)
        return rc;
    *one = sh->delta_kb[0] * 1024.0 / live;
    *open_one = sh->open_s[0];
    rc = mem_children(url, o, sh, MEM_MEASURE, o->mem_procs, deadline);
    if (rc != 0)
        return rc;
    double sum = 0;
    *many_max = 0;
    *open_many = 0;
    for (int i = 0; i < o->mem_procs; i++) {
        double v = sh->delta_kb[i] * 1024.0 / live;
        sum += v;
        if (v > *many_max)
            *many_max = v;
        if (sh->open_s[i] > *open_many)
            *open_many = sh->open_s[i];
    }
    *many = sum / o->mem_procs;
    return 0;
}

int qb_kvq_memory(qb_memory *out, const qb_options *o, int sys, const char *path,
                  double deadline)
{
    if (out == NULL || o == NULL || path == NULL ||
        (sys != QB_SYS_KVQ && sys != QB_SYS_KVQ_SQLITE) || o->mem_procs < 2 ||
        o->mem_procs > MEM_MAX_PROCS || o->mem_items < 1) {
        fprintf(stderr, "qbench: memory: bad arguments\n");
        return -1;
    }
    memset(out, 0, sizeof(*out));
    char url[700];
    snprintf(url, sizeof(url), "%s%s/kvq-db", qb_system_is_sqlite(sys) ? "sqlite:" : "", path);
    mem_shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                          -1, 0);
    if (sh == MAP_FAILED) {
        perror("qbench: memory: mmap");
        return -1;
    }
    memset(sh, 0, sizeof(*sh));
    int rc = mem_children(url, o, sh, MEM_FILL, 1, deadline);
    double live = (double)o->mem_items * (double)sh->item_bytes;
    out->item_bytes = sh->item_bytes;
    out->fill_s = sh->fill_s;
    if (rc == 0 && !(live > 0))
        rc = -1;
    /* Straight after the push: on the log store, every item is inside the window. */
    if (rc == 0)
        rc = mem_measure_both(url, o, sh, live, deadline, &out->one, &out->many, &out->many_max,
                              &out->open_one_s, &out->open_many_s);
    /* Past the window (the log store): the same database once its table holds every item. A
     * failure here leaves the figures above standing. */
    if (rc == 0 && !qb_system_is_sqlite(sys)) {
        int prc = mem_children(url, o, sh, MEM_WAIT, 1, deadline);
        out->wait_s = sh->wait_s;
        out->window_keys = sh->window_keys;
        out->window_map_bytes = sh->window_map_bytes;
        out->table_live = sh->table_live;
        out->map_bytes_after = sh->map_bytes_after;
        if (prc == 0)
            prc = mem_measure_both(url, o, sh, live, deadline, &out->one_past, &out->many_past,
                                   &out->many_past_max, &out->open_one_past_s,
                                   &out->open_many_past_s);
        out->past = prc == 0;
    }
    munmap(sh, sizeof(*sh));
    return rc == 0 ? 0 : -1;
}
#endif
