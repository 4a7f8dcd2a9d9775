/* The C side of bench/python/bench_py.py: the same four runs over the public API of libkvq.so,
 * so that the Python package's figures are a ratio to C measured in the same run.
 *
 *   bench_pyref URL N BATCHES
 *
 * On a named durable queue "bench" of the database at URL (made if missing): N pushes one at a
 * time, N pops one at a time, BATCHES push_many of 100 items, BATCHES pop_k of 100. Values are
 * 16 bytes. Prints one line: "push1 pop1 push100 pop100" in items per second. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvq/kvq.h"

#define BATCH 100

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_pyref: %s: %s (%s)\n", what, kvq_strerror(rc), kvq_last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: bench_pyref URL N BATCHES\n");
        return 2;
    }
    long n = atol(argv[2]);
    long batches = atol(argv[3]);
    if (n < 1 || batches < 1) {
        fprintf(stderr, "bench_pyref: N and BATCHES must be positive\n");
        return 2;
    }
    kvq_db *db = NULL;
    kvq_queue *q = NULL;
    kvq_queue_settings durable = KVQ_QUEUE_SETTINGS_INIT;
    int rc = kvq_db_open(&db, argv[1], NULL);
    if (rc != 0)
        die("open", rc);
    rc = kvq_queue_create_named(db, "bench", &durable);
    if (rc != 0 && rc != KVQ_EEXISTS)
        die("create", rc);
    rc = kvq_queue_open_named(&q, NULL, db, "bench");
    if (rc != 0)
        die("open the queue", rc);

    uint8_t value[16];
    memset(value, 'v', sizeof(value));
    double rate[4];
    kvq_buf buf = KVQ_BUF_INIT;

    double t0 = now();
    for (long i = 0; i < n; i++)
        if ((rc = kvq_queue_push(q, value, sizeof(value))) != 0)
            die("push", rc);
    rate[0] = (double)n / (now() - t0);

    t0 = now();
    for (long i = 0; i < n; i++)
        if ((rc = kvq_queue_pop(&buf, q)) != 0)
            die("pop", rc);
    rate[1] = (double)n / (now() - t0);

    kvq_bytes views[BATCH];
    for (int i = 0; i < BATCH; i++)
        views[i] = (kvq_bytes){ value, sizeof(value) };
    t0 = now();
    for (long b = 0; b < batches; b++)
        if ((rc = kvq_queue_push_many(q, views, BATCH)) != 0)
            die("push_many", rc);
    rate[2] = (double)(batches * BATCH) / (now() - t0);

    kvq_buf outs[BATCH];
    memset(outs, 0, sizeof(outs));
    t0 = now();
    for (long b = 0; b < batches; b++) {
        size_t got = 0;
        if ((rc = kvq_queue_pop_k(outs, &got, q, BATCH)) != 0)
            die("pop_k", rc);
        if (got != BATCH) {
            fprintf(stderr, "bench_pyref: pop_k returned %zu items\n", got);
            return 1;
        }
    }
    rate[3] = (double)(batches * BATCH) / (now() - t0);

    for (int i = 0; i < BATCH; i++)
        kvq_buf_dispose(&outs[i]);
    kvq_buf_dispose(&buf);
    kvq_queue_close(q);
    kvq_db_close(db);
    printf("%.1f %.1f %.1f %.1f\n", rate[0], rate[1], rate[2], rate[3]);
    return 0;
}
