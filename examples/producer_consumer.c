/* A producer and a consumer on one durable queue, as two threads of one program (they could as
 * well be two processes on the same database directory).
 *
 * The producer pushes 1,000 numbered items; the consumer takes them in batches with
 * kvq_queue_consume_k, which also hands back a watch when the queue runs dry, so the consumer
 * sleeps until the next push instead of polling. At the end every number must have arrived
 * exactly once: the program exits 1 otherwise.
 *
 *   cc producer_consumer.c $(pkg-config --cflags --libs kvq) -lpthread
 *   ./a.out [database-directory]       (default: a fresh directory under /tmp) */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <kvq/kvq.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ITEMS 1000

static kvq_db *db;
static int producer_rc;
static atomic_int producer_done;

static void *producer(void *arg)
{
    kvq_queue *q = arg;
    for (int i = 0; i < ITEMS && producer_rc == 0; i++) {
        char v[16];
        int n = snprintf(v, sizeof(v), "item-%d", i);
        /* Exactly once, even when a commit's outcome is unknown (the queue keeps a marker). */
        producer_rc = kvq_queue_push(q, (const uint8_t *)v, (size_t)n);
    }
    atomic_store(&producer_done, 1);
    return NULL;
}

/* The number in "item-N", or -1. Values are bytes, not C strings: no terminating NUL. */
static int item_number(const kvq_buf *b)
{
    char s[16];
    if (b->len >= sizeof(s))
        return -1;
    memcpy(s, b->data, b->len);
    s[b->len] = '\0';
    int k = -1;
    return sscanf(s, "item-%d", &k) == 1 && k >= 0 && k < ITEMS ? k : -1;
}

int main(int argc, char **argv)
{
    char tmp[] = "/tmp/kvq-example-XXXXXX";
    const char *dir = argc > 1 ? argv[1] : mkdtemp(tmp);
    if (dir == NULL || kvq_db_open(&db, dir, NULL) != 0) {
        fprintf(stderr, "cannot open a database: %s\n", kvq_last_error());
        return 1;
    }
    /* Each thread has its own queue handle on the shared database handle. */
    kvq_queue *pq = NULL, *cq = NULL;
    int rc = kvq_queue_open(&pq, db, KVQ_QUEUE_DURABLE, NULL, NULL);
    if (rc == 0)
        rc = kvq_queue_open(&cq, db, KVQ_QUEUE_DURABLE, NULL, NULL);
    pthread_t t;
    int started = 0;
    if (rc == 0) {
        started = pthread_create(&t, NULL, producer, pq) == 0;
        if (!started)
            rc = KVQ_ENOMEM;
    }
    static unsigned char seen[ITEMS];
    int got = 0, bad = 0;
    kvq_buf items[50];
    for (int i = 0; i < 50; i++)
        items[i] = (kvq_buf)KVQ_BUF_INIT;
    while (rc == 0 && got < ITEMS) {
        size_t n = 0;
        kvq_watch *w = NULL;
        int finished = atomic_load(&producer_done); /* read before the pop: then empty is final */
        rc = kvq_queue_consume_k(items, &n, &w, cq, 50);
        for (size_t i = 0; rc == 0 && i < n; i++) {
            int k = item_number(&items[i]);
            if (k >= 0 && seen[k]++ == 0)
                got++;
            else
                bad++;
        }
        if (rc == 0 && n == 0 && w != NULL && finished) {
            kvq_watch_destroy(w);
            break; /* the producer is done and the queue is empty */
        }
        if (rc == 0 && w != NULL) { /* the queue was empty: sleep until a push (or 1 s) */
            int wrc = kvq_watch_wait(w, 1000);
            if (wrc != 0 && wrc != KVQ_ETIMED_OUT)
                rc = wrc;
        }
        kvq_watch_destroy(w);
    }
    if (started)
        pthread_join(t, NULL);
    for (int i = 0; i < 50; i++)
        kvq_buf_dispose(&items[i]);
    kvq_queue_close(pq);
    kvq_queue_close(cq);
    kvq_db_close(db);
    if (rc != 0 || producer_rc != 0) {
        fprintf(stderr, "failed: %s (%s)\n", kvq_strerror(rc ? rc : producer_rc), kvq_last_error());
        return 1;
    }
    printf("%d items consumed exactly once, %d unexpected\n", got, bad);
    return got == ITEMS && bad == 0 ? 0 : 1;
}
