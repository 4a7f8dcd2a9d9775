/**
 * @file kvq/consumer.h
 * @brief The consumer runtime: worker threads that pop batches and sleep on a watch.
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
 * Where the items come from. The durable queue provides one (kvq_queue_consumer_source in
 * kvq/queue.h); applications may write their own.
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
KVQ_API int kvq_consumer_join(kvq_consumer *c);

/** 1 once every worker has ended (after a stop, a drain or a failure), else 0. */
KVQ_API int kvq_consumer_finished(kvq_consumer *c);

/** Reads the counters (any time). */
KVQ_API int kvq_consumer_get_stats(kvq_consumer_stats *out, kvq_consumer *c);

/** Stops, joins and frees the consumer. NULL is a no-op. */
KVQ_API void kvq_consumer_free(kvq_consumer *c);

#ifdef __cplusplus
}
#endif

#endif /* KVQ_CONSUMER_H */
