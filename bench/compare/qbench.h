/* The interface between qbench's workloads and the queues it drives. Every driver moves
 * fixed-size messages (qb_options.size bytes) one at a time and, where the system has one, in
 * batches. A driver's calls return 0, QB_EMPTY (nothing to pop within the wait) or QB_FAIL
 * after printing one line to stderr. */
#ifndef QBENCH_H
#define QBENCH_H

#include <stddef.h>
#include <stdint.h>

#include "table.h"

#define QB_EMPTY 1
#define QB_FAIL  (-1)

/* kvq's commit pipeline during one phase, in memory shared with forked clients: the kvq driver
 * adds each database handle's totals when it closes it. */
typedef struct qb_pipeline {
    unsigned long long commits, syncs, conflicts; /* atomic adds */
} qb_pipeline;

/* What a workload tells the driver when it prepares a fresh queue. */
typedef struct qb_setup {
    const qb_options *opt;
    int sys;          /* QB_SYS_* this queue is measured as */
    int run;          /* 1-based */
    char workload;    /* 'a'..'d' */
    int low_latency;  /* (d): consumers wait on an empty queue; wake them promptly */
    int processes;    /* clients will connect from forked child processes */
    char path[600];   /* a fresh directory for embedded systems (already created) */
    qb_pipeline *pipeline; /* zeroed before the phase; kvq's driver adds to it */
} qb_setup;

typedef struct qb_conn qb_conn; /* one client connection, one thread */

typedef struct qb_driver {
    const char *name;
    /* Prepares an empty queue for one workload run and returns the driver's shared state. */
    int (*setup)(void **state, const qb_setup *su);
    /* Opens a client; called in the thread (or child process) that uses it. */
    int (*connect)(qb_conn **out, void *state);
    /* Pushes one message. */
    int (*push)(qb_conn *c, const uint8_t *msg, size_t size);
    /* Pushes count messages stored back to back, in one operation; NULL: no batches. */
    int (*push_batch)(qb_conn *c, const uint8_t *msgs, size_t size, size_t count);
    /* Pops one message into buf (size bytes), waiting up to wait_ms for one to arrive. */
    int (*pop)(qb_conn *c, uint8_t *buf, size_t size, int wait_ms);
    /* Pops up to max messages into buf, back to back, in one operation; *got tells how many.
     * Waits up to wait_ms while the queue is empty. */
    int (*pop_batch)(qb_conn *c, uint8_t *buf, size_t size, size_t max, size_t *got, int wait_ms);
    void (*disconnect)(qb_conn *c);
    /* Drops the queue's data where cheap and frees the shared state. */
    void (*teardown)(void *state);
    /* Writes the system's version into buf (may connect); optional. */
    void (*version)(char *buf, size_t cap, const qb_options *opt, int sys);
} qb_driver;

extern const qb_driver qb_beanstalkd_driver;
extern const qb_driver qb_redis_driver;
extern const qb_driver qb_postgres_driver;
extern const qb_driver qb_sqlite_driver;
extern const qb_driver qb_kvq_driver;

/* The memory rows of one storage's durable queue (drv_kvq.c). */
typedef struct qb_memory {
    double one;       /* bytes of anonymous memory per byte of live data: one process */
    double many;      /* the same, mean of o->mem_procs processes holding it open at once */
    double many_max;  /* the largest of those */
    long item_bytes;  /* key + value bytes of one queued item */
    double fill_s;    /* seconds taken to queue the items */
    double open_one_s;  /* seconds from open to the first read done, one process */
    double open_many_s; /* the same, the slowest of the processes opening at once */
    /* Past the window (the log store only; past is 0 when not measured): the same figures
     * taken again once the storage reported that its table held every item. */
    int past;
    double one_past, many_past, many_past_max, open_one_past_s, open_many_past_s;
    double wait_s;             /* seconds the waiting process waited for the table */
    unsigned long long window_keys, window_map_bytes; /* its map at its open: the window */
    unsigned long long map_bytes_after; /* its map once the table held every item */
    unsigned long long table_live; /* bytes of the table's pages in use then (~0: not known) */
} qb_memory;

/* Queues o->mem_items items of o->size bytes in a new durable queue under path, on the storage
 * of sys (QB_SYS_KVQ or QB_SYS_KVQ_SQLITE), then opens it in one child process and then in
 * o->mem_procs at once, each measuring its anonymous memory before the open and after reading
 * the queue's length and head. On the log store, a child then holds the database open until
 * the store's statistics say that its table holds every item (QB_MEM_PAST_WAIT_S at most), and
 * the two measurements are taken again (out->past). Stops (killing what is left) at the
 * monotonic time deadline. Returns 0 (out->past 0 when the second measurement failed or does
 * not apply), or -1 after printing why. */
int qb_kvq_memory(qb_memory *out, const qb_options *o, int sys, const char *path,
                  double deadline);

/* Monotonic time. */
double qb_now(void);
/* Sleeps for a few microseconds (used by drivers that poll). */
void qb_sleep_us(long us);

/* TCP to a loopback endpoint with TCP_NODELAY and receive/send timeouts of timeout_ms; -1 after
 * printing why. */
int qb_tcp_connect(const qb_endpoint *ep, int timeout_ms);

#endif /* QBENCH_H */
