/* The CPU of a batch push, for callgrind: kvq_queue_push_many of --k values of --size bytes,
 * --batches times, on one thread, into a new database. By default on the log store and
 * relaxed (no sync), so that only the CPU path is counted; --durable syncs each batch, --sqlite
 * uses the SQLite storage; --type fifo or priority pushes to a recipe queue instead of the
 * durable one; --pop then pops everything back with kvq_queue_pop_k of --k. Run by hand:
 *
 *   valgrind --tool=callgrind bench/engine/push_batch --batches 300
 *
 * and divide the instructions by batches x k (opening and closing the database included: run
 * it twice with different --batches to take them out; the pops' share is the difference of a
 * run with --pop and one without). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq/kvq.h"

static void die(const char *what, int rc)
{
    fprintf(stderr, "push_batch: %s: %s (%d): %s\n", what, kvq_strerror(rc), rc, kvq_last_error());
    exit(1);
}

int main(int argc, char **argv)
{
    long batches = 300, k = 100, size = 100;
    int durable = 0, sqlite = 0, pop = 0;
    kvq_queue_type type = KVQ_QUEUE_DURABLE;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--batches") == 0 && i + 1 < argc)
            batches = atol(argv[++i]);
        else if (strcmp(argv[i], "--k") == 0 && i + 1 < argc)
            k = atol(argv[++i]);
        else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc)
            size = atol(argv[++i]);
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--durable") == 0)
            durable = 1;
        else if (strcmp(argv[i], "--sqlite") == 0)
            sqlite = 1;
        else if (strcmp(argv[i], "--pop") == 0)
            pop = 1;
        else if (strcmp(argv[i], "--type") == 0 && i + 1 < argc && strcmp(argv[i + 1], "fifo") == 0)
            type = KVQ_QUEUE_FIFO, i++;
        else if (strcmp(argv[i], "--type") == 0 && i + 1 < argc &&
                 strcmp(argv[i + 1], "priority") == 0)
            type = KVQ_QUEUE_PRIORITY, i++;
        else if (strcmp(argv[i], "--type") == 0 && i + 1 < argc &&
                 strcmp(argv[i + 1], "durable") == 0)
            type = KVQ_QUEUE_DURABLE, i++;
        else {
            fprintf(stderr, "usage: push_batch [--batches N] [--k K] [--size B] [--dir DIR] "
                            "[--durable] [--sqlite] [--type durable|fifo|priority] [--pop]\n");
            return 2;
        }
    }
    if (batches < 1 || k < 1 || k > 10000 || size < 1 || size > 100000) {
        fprintf(stderr, "push_batch: bad --batches, --k or --size\n");
        return 2;
    }
    char tmpl[] = "/tmp/kvq-push-batch.XXXXXX";
    char path[600];
    if (dir == NULL) {
        if (mkdtemp(tmpl) == NULL) {
            perror("mkdtemp");
            return 1;
        }
        dir = tmpl;
    }
    snprintf(path, sizeof(path), "%s%s/db", sqlite ? "" : "log:", dir);
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    if (!durable)
        o.flags |= KVQ_DB_RELAXED;
    kvq_db *db;
    kvq_queue *q;
    int rc = kvq_db_open(&db, path, &o);
    if (rc != 0)
        die("open", rc);
    if ((rc = kvq_queue_open(&q, db, type, NULL, NULL)) != 0)
        die("queue", rc);
    uint8_t *val = calloc((size_t)k, (size_t)size);
    kvq_bytes *vals = calloc((size_t)k, sizeof(*vals));
    if (val == NULL || vals == NULL)
        die("memory", KVQ_ENOMEM);
    for (long i = 0; i < k; i++)
        vals[i] = (kvq_bytes){ val + i * size, (size_t)size };
    for (long b = 0; b < batches; b++) {
        memcpy(val, &b, sizeof(b) < (size_t)size ? sizeof(b) : (size_t)size);
        if ((rc = kvq_queue_push_many(q, vals, (size_t)k)) != 0)
            die("push_many", rc);
    }
    long popped = 0;
    if (pop) {
        kvq_buf *outs = calloc((size_t)k, sizeof(*outs));
        if (outs == NULL)
            die("memory", KVQ_ENOMEM);
        for (;;) {
            size_t got = 0;
            rc = kvq_queue_pop_k(outs, &got, q, (size_t)k);
            if (rc == KVQ_ENOTFOUND)
                break;
            if (rc != 0)
                die("pop_k", rc);
            for (size_t i = 0; i < got; i++)
                kvq_buf_dispose(&outs[i]);
            popped += (long)got;
        }
        free(outs);
        if (popped != batches * k) {
            fprintf(stderr, "push_batch: popped %ld of %ld\n", popped, batches * k);
            return 1;
        }
    }
    printf("push_batch: %ld batches of %ld values of %ld bytes to a %s queue, %ld popped (%s, "
           "%s)\n",
           batches, k, size, kvq_queue_type_name(type), popped,
           sqlite ? "SQLite storage" : "log store", durable ? "durable" : "relaxed");
    kvq_queue_close(q);
    kvq_db_close(db);
    free(vals);
    free(val);
    return 0;
}
