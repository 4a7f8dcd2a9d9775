/**
 * @file kvq/workq.h
 * @brief Work-queue semantics on a durable or priority queue: receive with a lease, ack, nack,
 *        extend, delivery counts and dead letters, delayed delivery, deduplicated pushes and
 *        statistics.
 *
 * A kvq_workq wraps an open kvq_queue of type KVQ_QUEUE_DURABLE or KVQ_QUEUE_PRIORITY. Ready
 * items stay where the queue's recipe puts them (so kvq_queue_len, peek and iterate still see
 * them); everything else lives under the queue's bookkeeping prefix (`prefix + 0xFF`), see
 * docs/workq.md for the keyspace.
 *
 * **Time** is measured in database read versions (about 1,000,000 per second on both engines);
 * no client clock is used. A lease received at read version `rv` for `lease_ms` ends at version
 * `rv + lease_ms * 1000`.
 *
 * **Leases.** kvq_workq_receive moves the first ready item into an in-flight record and returns
 * it with a lease (kvq_workq_lease). Until the lease ends nobody else receives the item. Then:
 * kvq_workq_ack deletes it; kvq_workq_nack returns it to the queue now or after a delay;
 * kvq_workq_extend moves the lease's end. A lease whose end has passed is *expired*: ack, nack
 * and extend fail with KVQ_ELEASE_EXPIRED and change nothing, and the item goes back to the
 * queue (at its original key) when anyone next reads the queue. A lease that was already acked
 * or nacked fails with KVQ_ELEASE_SETTLED.
 *
 * **Due means ready, for every reader.** A delayed item whose time has come and an item whose
 * lease ended are ready for every reader of the queue: kvq_queue pops, peeks, lengths and
 * iteration (convenience and _txn forms), receives, statistics and listings. Each first looks at
 * its read version (two snapshot reads; nothing more when nothing is due) and, when something is
 * due, makes it ready in transactions of its own and reads again (a _txn form returns
 * KVQ_ENOT_COMMITTED, 1020, for the caller's retry loop). See docs/workq.md ("Time") for the
 * settings a plain kvq_queue handle applies to an ended lease.
 *
 * **Conflicts.** A receive conflicts only with another receive of the same item. A receiver
 * alone takes the head; a handle whose receives lose races to other receivers spreads them
 * over the first ready items (docs/workq.md, "Conflicts"), as durable pops do. Acks, nacks and
 * extends of
 * different items touch disjoint keys (counters are atomic adds), so they never conflict with
 * each other, with pushes or with receives of other items. Pushes never conflict with each
 * other (a deduplicated push conflicts only with another push of the same key).
 *
 * **Mixing.** Plain kvq_queue pushes and pops still work on the queue; items they push are
 * received normally. On a priority queue the statistics' ready count and oldest age only count
 * items that went through this API (the priority recipe keeps no counter and its keys no time);
 * an item of this API taken with a plain pop leaves its age entry behind, which the statistics skip
 * and kvq_workq_recover removes.
 *
 * Errors common to every function: KVQ_EINVAL for NULL or invalid arguments, KVQ_EWRONGTYPE for a
 * FIFO queue, and the transaction errors of kvq/db.h (after the retry budget for convenience
 * forms). Details are in kvq_last_error().
 *
 * Threads: a kvq_workq may be shared by threads, as its kvq_queue may.
 */
#ifndef KVQ_WORKQ_H
#define KVQ_WORKQ_H

#include "common.h"
#include "error.h"
#include "db.h"
#include "queue.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A work queue over a kvq_queue. Shared by threads. */
typedef struct kvq_workq kvq_workq;

#define KVQ_WORKQ_OPTIONS_VERSION 2

/** Options of kvq_workq_open. Initialise with KVQ_WORKQ_OPTIONS_INIT. */
typedef struct kvq_workq_options {
    unsigned int version; /**< KVQ_WORKQ_OPTIONS_VERSION */
    /** Default lease in milliseconds of database time (default 30,000; 1 ms to 1 day). */
    int64_t lease_ms;
    /** Deliveries after which an item that is nacked or whose lease expires goes to the dead
     * letters instead of back to the queue (default KVQ_DEFAULT_MAX_DELIVERIES, 5, as
     * `kvq create`); 0 never dead-letters. */
    uint32_t max_deliveries;
    /** Milliseconds a deduplication key is remembered (default 300,000; 1 ms to 7 days). */
    int64_t dedup_window_ms;
} kvq_workq_options;

#define KVQ_WORKQ_OPTIONS_INIT                                               \
    {                                                                        \
        KVQ_WORKQ_OPTIONS_VERSION, 30000, KVQ_DEFAULT_MAX_DELIVERIES, 300000 \
    }

/**
 * A lease on a received item. The caller owns the struct; pass it to ack, nack or extend.
 * Copies are fine (any holder of the token may settle the lease).
 */
typedef struct kvq_workq_lease {
    uint8_t id[16];      /**< random, unique per delivery */
    int64_t received;    /**< read version of the receive */
    int64_t deadline;    /**< version at which the lease ends (updated by extend) */
    uint32_t deliveries; /**< this is the item's deliveries-th delivery (1 for the first) */
    int64_t priority;    /**< the item's priority (priority queues; 0 otherwise) */
} kvq_workq_lease;

/**
 * Opens a work queue over q, which must be a durable or priority queue and must outlive it.
 * Nothing is read or written. With NULL opts, the defaults, except for a queue opened with
 * kvq_queue_open_named: its stored lease and max deliveries (`kvq create`, `kvq alter`).
 * @return 0; KVQ_EINVAL (NULL, bad option); KVQ_EWRONGTYPE (a FIFO queue); KVQ_ENOMEM.
 */
KVQ_API KVQ_NODISCARD int
kvq_workq_open(kvq_workq **out, kvq_queue *q, const kvq_workq_options *opts);

/** Frees a work queue handle (not the queue). NULL is a no-op. */
KVQ_API void kvq_workq_close(kvq_workq *w);

#define KVQ_WORKQ_PUSH_OPTIONS_VERSION 1

/** Options of one push. Initialise with KVQ_WORKQ_PUSH_OPTIONS_INIT. */
typedef struct kvq_workq_push_options {
    unsigned int version; /**< KVQ_WORKQ_PUSH_OPTIONS_VERSION */
    int64_t priority;     /**< priority queues only (must be 0 on a durable queue) */
    /** Milliseconds of database time before the item becomes visible (0: at once). */
    int64_t delay_ms;
    /** Or an absolute read version before which it stays invisible (0: none). When both are
     * given the later one counts. */
    int64_t not_before;
    /** Optional deduplication key (NULL: none; 1 to 1,000 bytes): a push whose key was pushed
     * within the dedup window enqueues nothing. */
    const uint8_t *dedup_key;
    size_t dedup_len;
} kvq_workq_push_options;

#define KVQ_WORKQ_PUSH_OPTIONS_INIT                      \
    {                                                    \
        KVQ_WORKQ_PUSH_OPTIONS_VERSION, 0, 0, 0, NULL, 0 \
    }

/**
 * Pushes a value (convenience form, its own retry loop; exactly once under 1021: a random
 * idempotency token, or the dedup key, is written with the item).
 * @param[out] out  true when the item was enqueued by this call, false when the dedup key was
 *                  already pushed within the window (may be NULL)
 * @param po        options, or NULL for KVQ_WORKQ_PUSH_OPTIONS_INIT
 * @return 0; KVQ_EINVAL; KVQ_EVALUE_TOO_LARGE; a transaction error.
 */
KVQ_API KVQ_NODISCARD int kvq_workq_push(
    bool *out, kvq_workq *w, const uint8_t *value, size_t len, const kvq_workq_push_options *po);

/** kvq_workq_push inside the caller's transaction (idempotent only through the dedup key or
 * the caller's own token). Errors as kvq_workq_push. */
KVQ_API KVQ_NODISCARD int kvq_workq_push_txn(bool *out,
                                             kvq_workq *w,
                                             kvq_txn *txn,
                                             const uint8_t *value,
                                             size_t len,
                                             const kvq_workq_push_options *po);

/**
 * Receives the first ready item (durable: the oldest; priority: the lowest priority) with a
 * lease; while this handle's receives lose races to other receivers, one of the first ready
 * items instead (of the first item's priority), none left behind for good (docs/workq.md,
 * "Conflicts"). Expired leases and due delayed items count as ready (made ready first, in
 * transactions of their own, when any are due).
 * @param[out] out    the value (replaced); free with kvq_buf_dispose
 * @param[out] lease  the lease token
 * @param lease_ms    the lease, or 0 for the default of the options
 * @return 0; KVQ_ENOTFOUND (nothing ready); KVQ_EINVAL; a transaction error.
 * @note Under 1021 a receive that did commit is retried and receives another item; the first
 *       one is then leased to nobody and comes back after its lease (at least once).
 */
KVQ_API KVQ_NODISCARD int
kvq_workq_receive(kvq_buf *out, kvq_workq_lease *lease, kvq_workq *w, int64_t lease_ms);

/**
 * kvq_workq_receive that waits up to wait_ms for an item (a long poll). A push or an item
 * given back wakes it at once on a durable queue (it sleeps on the push counter), and so do, on
 * a priority queue, items this API makes ready and every kvq push (kvq_queue_push_prio moves
 * kvq's push counter beside the recipe; an item written by a program that does not go through
 * kvq is found at the next wake-up or at the deadline). A delayed item is
 * received when it falls due and an item whose lease ends when it ends: the waiter sleeps
 * until the first of these times, and delayed pushes, nacks, receives and shortening extends
 * wake it to work that time out again. It never polls on a timer (except as a fallback when
 * no watch can be set: then it looks every 200 ms) and never spins.
 * @param wait_ms  0 (look once) to 86,400,000 (a day)
 * @return as kvq_workq_receive: KVQ_ENOTFOUND once wait_ms has passed with nothing ready.
 */
KVQ_API KVQ_NODISCARD int kvq_workq_receive_wait(
    kvq_buf *out, kvq_workq_lease *lease, kvq_workq *w, int64_t lease_ms, int64_t wait_ms);

/** kvq_workq_receive inside the caller's transaction. `out` is borrowed from txn. When something
 * is due it is made ready in transactions of its own and KVQ_ENOT_COMMITTED (1020) is returned:
 * the caller's retry loop then reads it as ready. Do not push to a durable queue earlier in the
 * same transaction (its head becomes unreadable, 1036). */
KVQ_API KVQ_NODISCARD int kvq_workq_receive_txn(
    kvq_bytes *out, kvq_workq_lease *lease, kvq_workq *w, kvq_txn *txn, int64_t lease_ms);

/**
 * Acknowledges a lease: deletes the item. Convenience form; a retry after a 1021 whose commit
 * happened returns 0.
 * @return 0; KVQ_ELEASE_EXPIRED (the lease ended; nothing changed); KVQ_ELEASE_SETTLED (already
 *         acked or nacked); KVQ_EINVAL; a transaction error.
 */
KVQ_API KVQ_NODISCARD int kvq_workq_ack(kvq_workq *w, kvq_workq_lease *lease);

/**
 * Acknowledges inside the caller's transaction, so that the consumer's own effect commits
 * together with the ack (exactly-once processing). Call it in every attempt with the same
 * lease. On a retry after 1021, KVQ_ELEASE_SETTLED means that an earlier attempt committed —
 * with the caller's effect; KVQ_ELEASE_EXPIRED means no attempt committed and the item will be
 * delivered again.
 * @return as kvq_workq_ack.
 */
KVQ_API KVQ_NODISCARD int kvq_workq_ack_txn(kvq_workq *w, kvq_txn *txn, kvq_workq_lease *lease);

/**
 * Gives a lease back: the item returns to the queue at its original place (delay_ms 0) or
 * becomes ready again after delay_ms; either way it goes to the dead letters instead when it
 * has had max_deliveries deliveries. Convenience form.
 * @return as kvq_workq_ack.
 */
KVQ_API KVQ_NODISCARD int kvq_workq_nack(kvq_workq *w, kvq_workq_lease *lease, int64_t delay_ms);

/** kvq_workq_nack inside the caller's transaction. */
KVQ_API KVQ_NODISCARD int
kvq_workq_nack_txn(kvq_workq *w, kvq_txn *txn, kvq_workq_lease *lease, int64_t delay_ms);

/**
 * Extends a lease that has not expired: it now ends lease_ms (0: the default) after this
 * transaction's read version; lease->deadline is updated.
 * @return as kvq_workq_ack.
 */
KVQ_API KVQ_NODISCARD int kvq_workq_extend(kvq_workq *w, kvq_workq_lease *lease, int64_t lease_ms);

/** kvq_workq_extend inside the caller's transaction (lease->deadline is updated at once; it is
 * only true once txn commits). */
KVQ_API KVQ_NODISCARD int
kvq_workq_extend_txn(kvq_workq *w, kvq_txn *txn, kvq_workq_lease *lease, int64_t lease_ms);

/**
 * Upkeep, safe at any time from any process: returns items whose lease expired to the queue
 * (or to the dead letters), makes due delayed items ready, and prunes old dedup keys and
 * settled-lease markers. It first commits a tiny write so that the read version is current.
 * @param[out] out  items returned or made ready (may be NULL)
 * @return 0; KVQ_EINVAL; a transaction error.
 */
KVQ_API KVQ_NODISCARD int kvq_workq_recover(uint64_t *out, kvq_workq *w);

/** Called by kvq_workq_dlq_list for each dead letter, in key order; value valid during the call.
 * Return 0 to go on; anything else stops the listing and is returned. */
typedef int (*kvq_workq_dlq_fn)(kvq_bytes value, uint32_t deliveries, void *payload);

/** Lists the dead letters (pages of read-only transactions; fn runs outside them). */
KVQ_API KVQ_NODISCARD int kvq_workq_dlq_list(kvq_workq *w, kvq_workq_dlq_fn fn, void *payload);

/** Moves every dead letter back to the queue with its delivery count reset to 0.
 * @param[out] out  how many (may be NULL) */
KVQ_API KVQ_NODISCARD int kvq_workq_dlq_redrive(uint64_t *out, kvq_workq *w);

/** Deletes every dead letter, a batch per transaction; *out (may be NULL) gets the count.
 * @return 0; KVQ_EINVAL; a transaction error (the batches before it are deleted). */
KVQ_API KVQ_NODISCARD int kvq_workq_dlq_purge(uint64_t *out, kvq_workq *w);

/** An in-flight or delayed item, as the listings hand it over (valid during the call). */
typedef struct kvq_workq_item {
    kvq_bytes value;
    uint32_t deliveries; /**< deliveries so far (in flight: this one included) */
    int64_t priority;    /**< priority queues; 0 otherwise */
    /** Milliseconds from the listing's read version until the lease ends (in flight) or the
     * item falls due (delayed). The listing makes what is due ready first, so this is seldom
     * negative (only for what fell due while a long listing ran). */
    int64_t due_ms;
    /** In flight: the item's lease, which kvq_workq_ack, _nack and _extend accept (an operator
     * can settle a stuck item). Zero for delayed items. */
    kvq_workq_lease lease;
} kvq_workq_item;

/** Called for each listed item; a nonzero return stops the listing and is returned. */
typedef int (*kvq_workq_item_fn)(const kvq_workq_item *item, void *payload);

/** Lists the in-flight (leased) items, the lease ending soonest first, in pages of snapshot
 * reads (no conflicts; a long listing is not one snapshot). Ended leases are made ready first.
 * @return 0; KVQ_EINVAL; a transaction error; or what fn returned. */
KVQ_API KVQ_NODISCARD int
kvq_workq_list_inflight(kvq_workq *w, kvq_workq_item_fn fn, void *payload);

/** Lists the delayed items, the one due soonest first (as kvq_workq_list_inflight). */
KVQ_API KVQ_NODISCARD int kvq_workq_list_delayed(kvq_workq *w, kvq_workq_item_fn fn, void *payload);

/** Counts of a work queue, read from counters (no scans). */
typedef struct kvq_workq_stats {
    int64_t ready;    /**< items that can be received now (due items made ready first) */
    int64_t inflight; /**< leased items (ended leases are made ready first) */
    int64_t delayed;  /**< items waiting for their time */
    int64_t dead;     /**< dead letters */
    /** Milliseconds since the oldest ready item was first pushed, or -1 when the queue has no
     * ready item. The time counts from the push (or, for a delayed item, from when it fell due;
     * for a redriven dead letter, from the redrive) and keeps running while the item is in
     * flight and after it is given back. Priority queues: only items that went through this API
     * are seen (a small index of ready versions kept with them; items pushed with a plain
     * kvq_queue_push_prio count only once they have been given back). */
    int64_t oldest_ready_age_ms;
    /* Totals since the queue was made, counted by this API's operations only (each means one
     * thing; a plain kvq_queue pop or push is in none of them): */
    int64_t received;      /**< leases handed out (each delivery once) */
    int64_t taken;         /**< items receives took off the ready queue: leased, or moved to
                                the dead letters on the way because they had had their
                                deliveries */
    int64_t acked;         /**< leases acknowledged (items done and deleted) */
    int64_t requeued;      /**< items given back to the ready queue after a delivery: by a
                                nack (at once, or when its delay fell due), an ended lease, or a
                                redrive of dead letters */
    int64_t dead_lettered; /**< items moved to the dead letters */
    /** Items removed by kvq_workq_purge (`kvq clear`), whatever their state; cleared_ready:
     * those of them that were ready (on a durable queue they also moved npop, which counts
     * them as popped in erlfdb's length, npush - npop). */
    int64_t cleared, cleared_ready;
} kvq_workq_stats;

/** Reads the statistics in one read-only transaction of snapshot reads.
 * @return 0; KVQ_EINVAL; a transaction error. */
KVQ_API KVQ_NODISCARD int kvq_workq_get_stats(kvq_workq_stats *out, kvq_workq *w);

#ifdef __cplusplus
}
#endif

#endif /* KVQ_WORKQ_H */
