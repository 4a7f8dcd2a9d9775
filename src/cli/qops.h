/* What the command needs of a queue, whatever its type. qops.c maps these onto the queue layers
 * (kvq/queue.h). */
#ifndef KVQ_CLI_QOPS_H
#define KVQ_CLI_QOPS_H

#include "cli/cli.h"

typedef struct cli_queue cli_queue; /* an open queue of the command */

/* Opens the queue NAME of the given type (its data lives under the subspace ("NAME",) for fifo
 * and priority queues, as the recipes use strings, and (b"NAME",) for durable queues). */
int cli_queue_open(cli_queue **out, kvq_db *db, const char *name, kvq_queue_type type);
void cli_queue_close(cli_queue *q);
/* The layer's handle, borrowed (valid until cli_queue_close). */
kvq_queue *cli_queue_queue(cli_queue *q);
/* The work-queue handle (leases, delays, dedup, dead letters) with the queue's registered
 * settings, opened on first use and borrowed; KVQ_EWRONGTYPE for a fifo queue. */
int cli_queue_workq(cli_queue *q, const kvq_queue_settings *info, kvq_workq **out);

/* Pushes one value (priority: priority queues only). Idempotent under 1021. */
int cli_queue_push(cli_queue *q, const uint8_t *v, size_t n, int64_t priority);
/* Pushes n values: a durable queue in one transaction (all or none), the others one by one;
 * *done counts those pushed. */
int cli_queue_push_many(cli_queue *q, const kvq_bytes *values, size_t n, int64_t priority, size_t *done);
/* Pops up to k items, in transactions of up to 1,000 items (max: the highest priorities, one
 * per transaction); calls fn for each, in order, after its commit, and stops popping when fn
 * fails (returning what it returned). *popped counts the items popped (committed), fn's failed
 * one and those after it in its transaction included. KVQ_ENOTFOUND when the queue was empty. */
int cli_queue_pop(cli_queue *q, size_t k, int max, int (*fn)(const uint8_t *v, size_t n, void *arg), void *arg,
           size_t *popped);
int cli_queue_peek(cli_queue *q, int max, kvq_buf *out);
int cli_queue_len(cli_queue *q, uint64_t *out);
/* Calls fn for up to limit items in order (0: all), reading in pages. */
int cli_queue_list(cli_queue *q, size_t limit, int (*fn)(const uint8_t *v, size_t n, void *arg), void *arg);
int cli_queue_clear(cli_queue *q);
/* Removes every key of the queue. */
int cli_queue_delete(cli_queue *q);
/* Waits until something is pushed (or timeout_ms passes: KVQ_ETIMED_OUT; -1 waits forever).
 * Durable queues only (KVQ_EWRONGTYPE else): the recipes keep no counter to watch. */
int cli_queue_watch(cli_queue *q, int64_t timeout_ms);

typedef struct cli_queue_stats {
    uint64_t length;
    int has_counters;
    uint64_t pushes, pops;
} cli_queue_stats;
int cli_queue_stats_get(cli_queue *q, cli_queue_stats *out);

/* The consumer runtime's source for this queue (durable queues only: KVQ_EWRONGTYPE else). */
int cli_queue_source(cli_queue *q, kvq_consumer_source *out);

/* Checks argv[1] as the queue NAME of command cmd (a usage error naming the problem else). */
int cli_need_name(const char *cmd, int argc, char **argv, const char **name);
/* Opens the database and the named queue, which must exist (prints the error and returns an
 * exit code else); info (may be NULL) receives its registry entry. */
int cli_open_named(cli *c, const char *name, cli_queue **q, kvq_queue_settings *info);

/* Opens the database, the named queue and its work queue (a usage error for a fifo queue);
 * prints the error and returns an exit code on failure. cmd names the command. */
int cli_open_workq(cli *c, const char *cmd, const char *name, cli_queue **q, kvq_workq **w);

#endif /* KVQ_CLI_QOPS_H */
