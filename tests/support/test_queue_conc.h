/* The producer/consumer workload shared by the thread and process concurrency tests.
 *
 * Producers push values that encode (producer, sequence); consumers pop them and record what
 * they saw. The checks: every item popped exactly once; per producer, the items one consumer
 * pops come out in push order (for FIFO queues: each pop takes the head of the queue, so a later
 * pop by the same consumer can only see later items of a producer; for durable queues, whose
 * racing consumers spread out, in order within each pop); within
 * one pop_k batch of a priority queue, priorities are non-decreasing. Producers use their own
 * database handle, so that its conflict counter counts pushes only: it must stay 0. */
#ifndef KVQ_TEST_QUEUE_CONC_H
#define KVQ_TEST_QUEUE_CONC_H

#include <pthread.h>

#include "test_queue_common.h"

typedef struct conc_cfg {
    const char *name;
    kvq_queue_type type;
    unsigned int flags; /* queue flags of the consumers */
    size_t items;       /* in total, a multiple of producers */
    int producers, consumers;
    int push_batch;    /* items per push transaction */
    int pop_batch;     /* 1: kvq_queue_pop (or pop_min/max); more: pop_k / consume_k */
    int stop_on_empty; /* consumers stop at the first empty pop (everything was pushed) */
} conc_cfg;

/* What one consumer saw: its items in pop order, with the priority of each. */
typedef struct conc_log {
    uint32_t *prod, *seq;
    int64_t *prio;
    uint32_t *batch; /* number of the pop call that returned the item */
    size_t n, cap;
    int rc;
    char err[200];
} conc_log;

int conc_log_add(conc_log *l, uint32_t p, uint32_t s, int64_t prio, uint32_t batch);

void conc_log_free(conc_log *l);

int64_t conc_prio(uint32_t producer, uint32_t seq);

typedef struct conc_prio_batch {
    kvq_queue *q;
    const kvq_bytes *vals;
    size_t n;
    uint32_t p, s;
} conc_prio_batch;

int conc_prio_body(kvq_txn *txn, void *arg);

/* Pushes producer p's share. Returns 0 or an error. */
int conc_produce(const conc_cfg *c, kvq_db *pdb, uint32_t p, char *err, size_t errn);

/* Pops until *consumed reaches the total. */
void conc_consume(const conc_cfg *c, kvq_db *cdb, int id, size_t *consumed, conc_log *log);

/* Checks the consumers' logs; returns 0 or prints what is wrong and returns -1. */
int conc_check(const conc_cfg *c, conc_log *logs, int nlogs);

#endif /* KVQ_TEST_QUEUE_CONC_H */
