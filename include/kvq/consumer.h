/**
 * @file kvq/consumer.h
 * @brief The consumer runtimes: worker threads that pop batches and sleep on a watch (at most
 *        once), and workers that receive with leases and ack on success (at least once; see
 *        kvq_workq_consumer_start below).
 *
 * N worker threads each pop up to K items per transaction and hand them, after the commit and
 * outside any transaction, to a callback. When a pop finds fewer than K items, the same
 * transaction arms a watch on the queue's push counter, and a worker that found nothing sleeps
 * on it (no polling) until something is pushed. kvq_consumer_stop wakes every worker; items a
 * worker has already popped are still handed to the callback before it exits.
 *
 * Delivery is at most once, as the queue recipes' pop is: an item is removed when its
 * transaction commits. With a source that has a `consume` function (the durable queue's has),
 * a pop whose commit reported 1021 still delivers what it took. An item whose callback fails is not retried; the runtime counts it
 * (kvq_consumer_stats.undelivered) so that the application can report it.
 */
#ifndef KVQ_CONSUMER_H
#define KVQ_CONSUMER_H

#include "common.h"
#include "db.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A running set of consumer workers. */
typedef struct kvq_consumer kvq_consumer;

/**
 * Called for each popped item, in queue order within a batch, on the worker's thread and
 * outside any transaction. The value is valid during the call only. Return 0 when the item is
 * done; anything else ends this worker's batch: the rest of the batch is counted as undelivered
 * and the worker is restarted (see kvq_consumer_options.max_restarts_per_minute).
 */
typedef int (*kvq_consumer_fn)(kvq_bytes value, int worker, void *payload);

/**
 * Where the items come from. The durable queue provides one (kvq_queue_consumer_source,
 * below); applications may write their own.
 */
typedef struct kvq_consumer_source {
    /** Pops up to k items inside txn into values[0..*n) (borrowed from txn). */
    int (*pop)(void *queue, kvq_txn *txn, size_t k, kvq_bytes *values, size_t *n);
    /** The key that changes whenever something is pushed (the durable queue's npush). */
    kvq_bytes wake_key;
    /** Passed to pop and consume. */
    void *queue;
    /**
     * Optional (NULL: not used). Pops up to k items in its own retry loop, idempotently (a pop
     * whose commit reported 1021 still returns the items it took), copying them into
     * outs[0..*n); when fewer than k came back it may also return an armed watch on the wake
     * key in *watch (the caller destroys it), as kvq_queue_consume_k does. When set, the
     * runtime uses it instead of pop, so that no popped batch is lost to a 1021.
     */
    int (*consume)(void *queue, size_t k, kvq_buf *outs, size_t *n, kvq_watch **watch);
} kvq_consumer_source;

struct kvq_queue;

/**
 * Fills a source that pops from a durable queue (kvq/queue.h) with kvq_queue_consume_k and
 * wakes on its npush. The source borrows q, which must outlive the consumer.
 * @return 0; KVQ_EINVAL; KVQ_EWRONGTYPE.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_consumer_source(kvq_consumer_source *out,
                                                    struct kvq_queue *q);

#define KVQ_CONSUMER_OPTIONS_VERSION 1

/** Options of kvq_consumer_start; initialise with KVQ_CONSUMER_OPTIONS_INIT. */
typedef struct kvq_consumer_options {
    unsigned int version;
    int workers;                 /**< worker threads, 1 to 1024 (default 1) */
    int batch;                   /**< items popped per transaction, 1 to 10,000 (default 10) */
    int drain;                   /**< 1: stop once a pop finds the queue empty (default 0) */
    int max_restarts_per_minute; /**< restarts after failed callbacks before giving up (10) */
} kvq_consumer_options;

#define KVQ_CONSUMER_OPTIONS_INIT                  \
    {                                              \
        KVQ_CONSUMER_OPTIONS_VERSION, 1, 10, 0, 10 \
    }

/** Counters of a consumer. */
typedef struct kvq_consumer_stats {
    uint64_t items;       /**< items handed to the callback and accepted */
    uint64_t batches;     /**< pop transactions that committed with at least one item */
    uint64_t empty_waits; /**< times a worker slept on the watch */
    uint64_t retries;     /**< transaction retries (conflicts with other consumers) */
    uint64_t undelivered; /**< items popped whose callback failed (or that were never passed) */
    uint64_t restarts;    /**< worker restarts after a failed callback */
} kvq_consumer_stats;

/**
 * Starts the workers.
 * @param[out] out  the consumer; NULL on failure
 * @param db        the database (must outlive the consumer)
 * @param src       where items come from (copied; its queue must outlive the consumer)
 * @return 0, KVQ_EINVAL, KVQ_ENOMEM.
 */
KVQ_API KVQ_NODISCARD int kvq_consumer_start(kvq_consumer **out,
                                             kvq_db *db,
                                             const kvq_consumer_source *src,
                                             kvq_consumer_fn fn,
                                             void *payload,
                                             const kvq_consumer_options *opts);

/** Asks every worker to stop after delivering what it has popped. Safe from any thread; does
 * not wait. */
KVQ_API void kvq_consumer_stop(kvq_consumer *c);

/**
 * Waits until every worker has stopped (after kvq_consumer_stop, after a drain, or after too
 * many restarts). Returns 0, or the error that stopped a worker (KVQ_EUSER when callbacks kept
 * failing).
 */
KVQ_API KVQ_NODISCARD int kvq_consumer_join(kvq_consumer *c);

/** true once every worker has ended (after a stop, a drain or a failure), else false (true
 * for NULL). */
KVQ_API KVQ_NODISCARD bool kvq_consumer_finished(kvq_consumer *c);

/** Reads the counters (any time). */
KVQ_API KVQ_NODISCARD int kvq_consumer_get_stats(kvq_consumer_stats *out, kvq_consumer *c);

/** Stops, joins and frees the consumer. NULL is a no-op. */
KVQ_API void kvq_consumer_destroy(kvq_consumer *c);

/* ---- at least once: the work-queue consumer ------------------------------------------------ */

/*
 * N worker threads each receive one item at a time from a work queue (kvq/workq.h) with a lease,
 * hand it to a handler outside any transaction, and settle the lease by what the handler
 * returns: acknowledged (deleted) on KVQ_WORKQ_ACK, given back after the nack delay on
 * KVQ_WORKQ_NACK (to the dead letters once the queue's max deliveries are reached), given back
 * at once with the whole consumer stopping on KVQ_WORKQ_RELEASE (for a handler whose output went
 * away). While a handler runs, a heartbeat thread extends its lease every third of the lease,
 * so a long job is not delivered to another worker; if the lease ends all the same (the process
 * stalled past it), the item goes to someone else and the late settlement is counted in
 * lost_leases. An empty queue is waited on without polling (kvq_workq_receive_wait).
 *
 * Delivery is **at least once**: an item is deleted only after its handler succeeded; a crash
 * of the process gives every item in hand back when its lease ends.
 */

struct kvq_workq;
struct kvq_workq_lease;

/** What a kvq_workq_consumer_fn returns. Any other value counts as KVQ_WORKQ_NACK. */
enum {
    KVQ_WORKQ_ACK = 0,     /**< done: acknowledge the lease (the item is deleted) */
    KVQ_WORKQ_NACK = 1,    /**< failed: give it back after the nack delay */
    KVQ_WORKQ_RELEASE = 2, /**< not handled: give it back at once and stop every worker */
};

/**
 * Handles one leased item, on the worker's thread and outside any transaction. value is valid
 * during the call only; lease is the item's lease (read-only: lease->deliveries says how many
 * times it has been delivered, this one included). Returns KVQ_WORKQ_ACK, _NACK or _RELEASE.
 */
typedef int (*kvq_workq_consumer_fn)(kvq_bytes value,
                                     const struct kvq_workq_lease *lease,
                                     int worker,
                                     void *payload);

/** A running set of work-queue consumer workers. */
typedef struct kvq_workq_consumer kvq_workq_consumer;

#define KVQ_WORKQ_CONSUMER_OPTIONS_VERSION 1

/** Options of kvq_workq_consumer_start; initialise with KVQ_WORKQ_CONSUMER_OPTIONS_INIT. */
typedef struct kvq_workq_consumer_options {
    unsigned int version;
    int workers;           /**< worker threads, 1 to 1024 (default 1) */
    int64_t lease_ms;      /**< each receive's lease; 0 (default): the work queue's */
    int64_t nack_delay_ms; /**< delay before a failed item is ready again, 0 to a day (1000) */
    int drain;             /**< 1: a worker stops once nothing is ready (default 0) */
} kvq_workq_consumer_options;

#define KVQ_WORKQ_CONSUMER_OPTIONS_INIT                 \
    {                                                   \
        KVQ_WORKQ_CONSUMER_OPTIONS_VERSION, 1, 0, 1000, 0 \
    }

/** Counters of a work-queue consumer. */
typedef struct kvq_workq_consumer_stats {
    uint64_t received;    /**< items received (leases taken) */
    uint64_t acked;       /**< items handled and acknowledged */
    uint64_t nacked;      /**< items whose handler failed, given back after the nack delay */
    uint64_t released;    /**< items given back at once by KVQ_WORKQ_RELEASE */
    uint64_t lost_leases; /**< settlements refused because the lease had ended first (the item
                               is delivered again, or was, elsewhere) */
    uint64_t extends;     /**< lease extensions by the heartbeat */
} kvq_workq_consumer_stats;

/**
 * Starts the workers (and the heartbeat thread).
 * @param[out] out  the consumer; NULL on failure
 * @param w         the work queue (must outlive the consumer)
 * @return 0, KVQ_EINVAL (NULL, a bad option), KVQ_ENOMEM (memory or threads).
 */
KVQ_API KVQ_NODISCARD int kvq_workq_consumer_start(kvq_workq_consumer **out,
                                                   struct kvq_workq *w,
                                                   kvq_workq_consumer_fn fn,
                                                   void *payload,
                                                   const kvq_workq_consumer_options *opts);

/** Asks every worker to stop once its item in hand is settled (a worker waiting for an item
 * is woken and stops at once). Safe from any thread, and from a handler; does not wait. */
KVQ_API void kvq_workq_consumer_stop(kvq_workq_consumer *c);

/**
 * Waits until every worker has stopped (after kvq_workq_consumer_stop, a drain, a
 * KVQ_WORKQ_RELEASE or an error). Returns 0, or the error that stopped a worker (a receive, ack
 * or nack that failed other than by an ended lease).
 */
KVQ_API KVQ_NODISCARD int kvq_workq_consumer_join(kvq_workq_consumer *c);

/** true once every worker has ended, else false (true for NULL). */
KVQ_API KVQ_NODISCARD bool kvq_workq_consumer_finished(kvq_workq_consumer *c);

/** Reads the counters (any time). @return 0; KVQ_EINVAL for NULL. */
KVQ_API KVQ_NODISCARD int kvq_workq_consumer_get_stats(kvq_workq_consumer_stats *out,
                                                       kvq_workq_consumer *c);

/** Stops, joins and frees the consumer. NULL is a no-op. */
KVQ_API void kvq_workq_consumer_destroy(kvq_workq_consumer *c);

#ifdef __cplusplus
}
#endif

#endif /* KVQ_CONSUMER_H */
