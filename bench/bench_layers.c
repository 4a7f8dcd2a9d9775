/* Push and pop throughput of the queue layers on the embedded engine (durable commits by
 * default): each layer at 1, 4 and 8 client threads and 1, 10 and 100 items per transaction,
 * with conflicts and retries per item from the database handle's counters.
 *
 *   bench_layers [--n N] [--quick] [--dir DIR] [--relaxed] [--layers fifo,fifo-hc,priority,durable]
 *                [--threads 1,4,8] [--batches 1,10,100]
 *
 * N items are pushed and then popped per configuration (default 5,000; --quick: 200, and only
 * 1 and 8 threads). Pushes of batch 1 use the convenience push (idempotent, with its marker);
 * larger batches push_many (FIFO, durable) or a transaction of push_prio_txn calls (priority).
 * Pops of batch 1 use the convenience pop (high-contention mode for fifo-hc), larger batches
 * pop_k. A fresh database directory is used for each configuration. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq/queue.h"
#include "util/util.h"

static size_t n_items = 5000;
static char base[512] = "";
static int relaxed = 0;

typedef struct layer {
    const char *name;
    kvq_queue_type type;
    unsigned int flags;
} layer;

static const layer LAYERS[] = {
    { "fifo", KVQ_QUEUE_FIFO, 0 },
    { "fifo-hc", KVQ_QUEUE_FIFO, KVQ_QUEUE_HIGH_CONTENTION },
    { "priority", KVQ_QUEUE_PRIORITY, 0 },
    { "durable", KVQ_QUEUE_DURABLE, 0 },
};

static void rmrf(const char *p)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", p);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", p);
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_layers: %s: %s (%s)\n", what, kvq_strerror(rc), kvq_last_error());
    exit(1);
}

typedef struct job {
    kvq_db *db;
    const layer *l;
    int batch;
    size_t items; /* pushes: this thread's share; pops: unused */
    size_t *left; /* pops: items still in the queue (shared) */
    int id;
} job;

typedef struct prio_batch {
    kvq_queue *q;
    kvq_bytes *vals;
    int n;
    int64_t base;
} prio_batch;

static int prio_batch_body(kvq_txn *txn, void *arg)
{
    prio_batch *b = arg;
    int rc = 0;
    for (int i = 0; rc == 0 && i < b->n; i++)
        rc =
            kvq_queue_push_prio_txn(b->q, txn, b->vals[i].data, b->vals[i].len, (b->base + i) % 16);
    return rc;
}

static void *pusher(void *arg)
{
    job *j = arg;
    kvq_queue *q;
    int rc = kvq_queue_open(&q, j->db, j->l->type, NULL, NULL);
    if (rc != 0)
        die("open", rc);
    uint8_t val[100][32];
    kvq_bytes vals[100];
    for (size_t done = 0; done < j->items;) {
        int n = (int)(j->items - done < (size_t)j->batch ? j->items - done : (size_t)j->batch);
        for (int i = 0; i < n; i++) {
            int len = snprintf((char *)val[i], sizeof(val[i]), "t%02d-%09zu", j->id, done + i);
            vals[i].data = val[i];
            vals[i].len = (size_t)len;
        }
        if (n == 1 && j->l->type == KVQ_QUEUE_PRIORITY)
            rc = kvq_queue_push_prio(q, vals[0].data, vals[0].len, (int64_t)(done % 16));
        else if (n == 1)
            rc = kvq_queue_push(q, vals[0].data, vals[0].len);
        else if (j->l->type == KVQ_QUEUE_PRIORITY) {
            prio_batch b = { q, vals, n, (int64_t)done };
            rc = kvq_db_transact(j->db, prio_batch_body, &b);
        } else
            rc = kvq_queue_push_many(q, vals, (size_t)n);
        if (rc != 0)
            die("push", rc);
        done += (size_t)n;
    }
    kvq_queue_close(q);
    return NULL;
}

static void *popper(void *arg)
{
    job *j = arg;
    kvq_queue_options o = KVQ_QUEUE_OPTIONS_INIT;
    o.flags = j->l->flags;
    kvq_queue *q;
    int rc = kvq_queue_open(&q, j->db, j->l->type, NULL, &o);
    if (rc != 0)
        die("open", rc);
    kvq_buf outs[100];
    memset(outs, 0, sizeof(outs));
    while (__atomic_load_n(j->left, __ATOMIC_RELAXED) > 0) {
        size_t n = 0;
        if (j->batch == 1) {
            rc = kvq_queue_pop(&outs[0], q);
            n = rc == 0;
        } else {
            rc = kvq_queue_pop_k(outs, &n, q, (size_t)j->batch);
        }
        if (rc == KVQ_ENOTFOUND)
            break;
        if (rc != 0)
            die("pop", rc);
        __atomic_sub_fetch(j->left, n, __ATOMIC_RELAXED);
    }
    for (int i = 0; i < 100; i++)
        kvq_buf_dispose(&outs[i]);
    kvq_queue_close(q);
    return NULL;
}

typedef struct phase {
    double ops_s, conflicts, retries;
} phase;

static phase run_phase(kvq_db *db, const layer *l, int threads, int batch, int pushing)
{
    kvq_db_stats s0, s1;
    if (kvq_db_get_stats(&s0, db) != 0)
        exit(1);
    pthread_t th[64];
    job jobs[64];
    size_t left = n_items;
    int64_t t0 = kvq__mono_us();
    for (int i = 0; i < threads; i++) {
        size_t share = n_items / (size_t)threads + ((size_t)i < n_items % (size_t)threads);
        jobs[i] = (job){ db, l, batch, share, &left, i };
        if (pthread_create(&th[i], NULL, pushing ? pusher : popper, &jobs[i]) != 0)
            exit(1);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    double secs = (double)(kvq__mono_us() - t0) / 1e6;
    if (kvq_db_get_stats(&s1, db) != 0)
        exit(1);
    if (!pushing && left != 0) {
        fprintf(stderr, "bench_layers: %zu items left after the pops\n", left);
        exit(1);
    }
    phase p = { (double)n_items / secs, (double)(s1.conflicts - s0.conflicts) / (double)n_items,
                (double)(s1.retries - s0.retries) / (double)n_items };
    return p;
}

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        out[n++] = atoi(s);
        const char *c = strchr(s, ',');
        if (c == NULL)
            break;
        s = c + 1;
    }
    return n;
}

int main(int argc, char **argv)
{
    int quick = 0;
    const char *layers = "fifo,fifo-hc,priority,durable";
    int threads[8] = { 1, 4, 8 }, nthreads = 3;
    int batches[8] = { 1, 10, 100 }, nbatches = 3;
    int n_set = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--relaxed") == 0)
            relaxed = 1;
        else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
            n_items = (size_t)strtoul(argv[++i], NULL, 10);
            n_set = 1;
        } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            snprintf(base, sizeof(base), "%s", argv[++i]);
        else if (strcmp(argv[i], "--layers") == 0 && i + 1 < argc)
            layers = argv[++i];
        else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            nthreads = parse_list(argv[++i], threads, 8);
        else if (strcmp(argv[i], "--batches") == 0 && i + 1 < argc)
            nbatches = parse_list(argv[++i], batches, 8);
        else {
            fprintf(stderr, "usage: bench_layers [--n N] [--quick] [--dir DIR] [--relaxed] "
                            "[--layers fifo,fifo-hc,priority,durable] [--threads 1,4,8] "
                            "[--batches 1,10,100]\n");
            return 2;
        }
    }
    if (quick) {
        if (!n_set)
            n_items = 200;
        threads[0] = 1;
        threads[1] = 8;
        nthreads = 2;
    }
    for (int i = 0; i < nthreads; i++)
        if (threads[i] < 1 || threads[i] > 64) {
            fprintf(stderr, "bench_layers: threads must be 1 to 64\n");
            return 2;
        }
    for (int i = 0; i < nbatches; i++)
        if (batches[i] < 1 || batches[i] > 100) {
            fprintf(stderr, "bench_layers: batches must be 1 to 100\n");
            return 2;
        }
    if (n_items < 1) {
        fprintf(stderr, "bench_layers: --n must be at least 1\n");
        return 2;
    }
    int made = 0;
    if (base[0] == 0) {
        made = 1;
        const char *tmp = getenv("TMPDIR");
        snprintf(base, sizeof(base), "%s/kvq-bench-layers-XXXXXX", tmp ? tmp : "/tmp");
        if (mkdtemp(base) == NULL) {
            perror("mkdtemp");
            return 1;
        }
    }
    printf("queue layers, embedded engine, %s commits, %zu items pushed then popped per row\n",
           relaxed ? "relaxed (not durable)" : "durable", n_items);
    printf("| layer | threads | batch | push items/s | push conflicts/item | push retries/item "
           "| pop items/s | pop conflicts/item | pop retries/item |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t li = 0; li < sizeof(LAYERS) / sizeof(LAYERS[0]); li++) {
        const layer *l = &LAYERS[li];
        /* Match whole names in the comma-separated list. */
        int wanted = 0;
        size_t nl = strlen(l->name);
        for (const char *s = layers; (s = strstr(s, l->name)) != NULL; s += nl)
            if ((s == layers || s[-1] == ',') && (s[nl] == 0 || s[nl] == ','))
                wanted = 1;
        if (!wanted)
            continue;
        for (int ti = 0; ti < nthreads; ti++) {
            for (int bi = 0; bi < nbatches; bi++) {
                char dir[600];
                snprintf(dir, sizeof(dir), "%s/db", base);
                rmrf(dir);
                kvq_db_options o = KVQ_DB_OPTIONS_INIT;
                o.retry_limit = -1;
                if (relaxed)
                    o.flags |= KVQ_DB_RELAXED;
                kvq_db *db;
                int rc = kvq_db_open(&db, dir, &o);
                if (rc != 0)
                    die("open the database", rc);
                phase push = run_phase(db, l, threads[ti], batches[bi], 1);
                phase pop = run_phase(db, l, threads[ti], batches[bi], 0);
                kvq_db_close(db);
                printf("| %s | %d | %d | %.0f | %.3f | %.3f | %.0f | %.3f | %.3f |\n", l->name,
                       threads[ti], batches[bi], push.ops_s, push.conflicts, push.retries,
                       pop.ops_s, pop.conflicts, pop.retries);
                fflush(stdout);
            }
        }
    }
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/db", base);
    rmrf(dir);
    if (made && rmdir(base) != 0)
        fprintf(stderr, "bench_layers: cannot remove %s\n", base);
    return 0;
}
