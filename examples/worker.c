/* A work-queue worker: at-least-once processing with leases, as `kvq consume` does it.
 *
 * The queue is opened by the name `kvq create` gave it, with the lease and maximum deliveries
 * stored there. Each item is received with a lease; the worker acks it once done, or nacks it
 * (back in the queue after a delay) when the work fails; an item that keeps failing ends in the
 * dead letters after the queue's maximum deliveries. A worker that dies holding a lease loses
 * nothing: the item comes back when the lease ends.
 *
 * This example makes its own queue "jobs" (2 deliveries at most), pushes five jobs, one of which
 * always fails ("poison"), works until nothing is ready, and checks the outcome: four done, the
 * poison item dead-lettered. Exit status 0 when so.
 *
 *   cc worker.c $(pkg-config --cflags --libs kvq)
 *   ./a.out [database-directory] */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <kvq/kvq.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The work: fails for "poison". */
static int handle(const kvq_buf *item)
{
    return item->len == 6 && memcmp(item->data, "poison", 6) == 0 ? -1 : 0;
}

static int count_dead(kvq_bytes value, uint32_t deliveries, void *payload)
{
    (void)value;
    (void)deliveries;
    (*(int *)payload)++;
    return 0;
}

int main(int argc, char **argv)
{
    char tmp[] = "/tmp/kvq-worker-XXXXXX";
    const char *dir = argc > 1 ? argv[1] : mkdtemp(tmp);
    kvq_db *db = NULL;
    if (dir == NULL || kvq_db_open(&db, dir, NULL) != 0) {
        fprintf(stderr, "cannot open a database: %s\n", kvq_last_error());
        return 1;
    }
    /* What `kvq create jobs --lease 5s --max-deliveries 2` does. */
    kvq_queue_settings settings = KVQ_QUEUE_SETTINGS_INIT;
    settings.lease_ms = 5000;
    settings.max_deliveries = 2;
    int rc = kvq_queue_create_named(db, "jobs", &settings);
    if (rc == KVQ_EEXISTS)
        rc = 0;
    kvq_queue *q = NULL;
    kvq_workq *w = NULL;
    if (rc == 0)
        rc = kvq_queue_open_named(&q, NULL, db, "jobs");
    if (rc == 0) /* NULL options: the lease and deliveries stored with the name */
        rc = kvq_workq_open(&w, q, NULL);
    const char *jobs[] = { "a", "b", "poison", "c", "d" };
    for (int i = 0; rc == 0 && i < 5; i++)
        rc = kvq_workq_push(NULL, w, (const uint8_t *)jobs[i], strlen(jobs[i]), NULL);

    int done = 0, failed = 0;
    kvq_buf item = KVQ_BUF_INIT;
    while (rc == 0) {
        kvq_workq_lease lease;
        rc = kvq_workq_receive(&item, &lease, w, 0);
        if (rc == KVQ_ENOTFOUND) { /* nothing ready: this example stops there */
            rc = 0;
            break;
        }
        if (rc != 0)
            break;
        if (handle(&item) == 0) {
            rc = kvq_workq_ack(w, &lease);
            done++;
        } else {
            rc = kvq_workq_nack(w, &lease, 0); /* a real worker would wait a little */
            failed++;
        }
    }
    int dead = 0;
    if (rc == 0)
        rc = kvq_workq_dlq_list(w, count_dead, &dead);
    kvq_buf_dispose(&item);
    kvq_workq_close(w);
    kvq_queue_close(q);
    kvq_db_close(db);
    if (rc != 0) {
        fprintf(stderr, "failed: %s (%s)\n", kvq_strerror(rc), kvq_last_error());
        return 1;
    }
    printf("%d jobs done, %d failed attempts, %d dead letters\n", done, failed, dead);
    return done == 4 && failed == 2 && dead == 1 ? 0 : 1;
}
