/* The CPU of a batch push, for callgrind: kvq_queue_push_many of --k values of --size bytes,
 * --batches times, on one thread, into a new database. By default on the log store and
 * relaxed (no sync), so that only the CPU path is counted; --durable syncs each batch, --sqlite
 * uses the SQLite storage. Run by hand:
 *
 *   valgrind --tool=callgrind bench/engine/push_batch --batches 300
 *
 * and divide the instructions by batches x k (opening and closing the database included: run
 * it twice with different --batches to take them out). */
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
    int durable = 0, sqlite = 0;
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
        else {
            fprintf(stderr, "usage: push_batch [--batches N] [--k K] [--size B] [--dir DIR] "
                            "[--durable] [--sqlite]\n");
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
    if ((rc = kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL)) != 0)
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
    printf("push_batch: %ld batches of %ld values of %ld bytes (%s, %s)\n", batches, k, size,
           sqlite ? "SQLite storage" : "log store", durable ? "durable" : "relaxed");
    kvq_queue_close(q);
    kvq_db_close(db);
    free(vals);
    free(val);
    return 0;
}
