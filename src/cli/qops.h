/* What the command needs of a queue, whatever its type. qops.c maps these onto the queue layers
 * (kvq/queue.h). */
#ifndef KVQ_CLI_QOPS_H
#define KVQ_CLI_QOPS_H

#include "cli.h"

typedef struct cq cq; /* an open queue of the command */

/* Opens the queue NAME of the given type (its data lives under the subspace ("NAME",) for fifo
 * and priority queues, as the recipes use strings, and (b"NAME",) for durable queues). */
int cq_open(cq **out, kvq_db *db, const char *name, cli_qtype type);
void cq_close(cq *q);
/* The layer's handle, borrowed (valid until cq_close). */
kvq_queue *cq_queue(cq *q);
/* The work-queue handle (leases, delays, dedup, dead letters) with the queue's registered
 * settings, opened on first use and borrowed; KVQ_EWRONGTYPE for a fifo queue. */
int cq_workq(cq *q, const cli_qinfo *info, kvq_workq **out);

/* Pushes one value (priority: priority queues only). Idempotent under 1021. */
int cq_push(cq *q, const uint8_t *v, size_t n, int64_t priority);
/* Pushes n values: a durable queue in one transaction (all or none), the others one by one;
 * *done counts those pushed. */
int cq_push_many(cq *q, const kvq_bytes *values, size_t n, int64_t priority, size_t *done);
/* Pops up to k items, in transactions of up to 1,000 items (max: the highest priorities, one
 * per transaction); calls fn for each, in order, after its commit, and stops popping when fn
 * fails (returning what it returned). *popped counts the items popped (committed), fn's failed
 * one and those after it in its transaction included. KVQ_ENOTFOUND when the queue was empty. */
int cq_pop(cq *q, size_t k, int max, int (*fn)(const uint8_t *v, size_t n, void *arg), void *arg,
           size_t *popped);
int cq_peek(cq *q, int max, kvq_buf *out);
int cq_len(cq *q, uint64_t *out);
/* Calls fn for up to limit items in order (0: all), reading in pages. */
int cq_list(cq *q, size_t limit, int (*fn)(const uint8_t *v, size_t n, void *arg), void *arg);
int cq_clear(cq *q);
/* Removes every key of the queue. */
int cq_delete(cq *q);
/* Waits until something is pushed (or timeout_ms passes: KVQ_ETIMED_OUT; -1 waits forever).
 * Durable queues only (KVQ_EWRONGTYPE else): the recipes keep no counter to watch. */
int cq_watch(cq *q, int64_t timeout_ms);

typedef struct cq_stats {
    uint64_t length;
    int has_counters;
    uint64_t pushes, pops;
} cq_stats;
int cq_stats_get(cq *q, cq_stats *out);

/* The consumer runtime's source for this queue (durable queues only: KVQ_EWRONGTYPE else). */
int cq_source(cq *q, kvq_consumer_source *out);

/* Checks argv[1] as the queue NAME of command cmd (a usage error naming the problem else). */
int cli_need_name(const char *cmd, int argc, char **argv, const char **name);
/* Opens the database and the named queue, which must exist (prints the error and returns an
 * exit code else); info (may be NULL) receives its registry entry. */
int cli_open_queue(cli *c, const char *name, cq **q, cli_qinfo *info);

#endif /* KVQ_CLI_QOPS_H */
