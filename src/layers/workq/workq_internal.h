/* Internals of the work queue (kvq/workq.h): leases, ack, nack, extend, delivery counts, dead
 * letters, delayed items, deduplicated pushes and statistics. Its files:
 *
 *   workq.c         handles, pushes, receives, settling leases (ack, nack, extend)
 *   workq_upkeep.c  kvq_workq_ready_due and kvq_workq_recover
 *   workq_wait.c    the long poll (kvq_workq_receive_wait)
 *   workq_admin.c   dead letters, listings of items in flight and delayed, statistics
 *   workq_batch.c   receive, ack and nack of many items in one transaction
 *   workq_purge.c   removing every item, whatever its state
 *   workq_token.c   leases as text
 *
 * The states of a work queue's items (their keys, their moves between ready, in flight, delayed
 * and dead, batch leases and the upkeep that every reader runs) are the queue's, below it:
 * layers/queue/leases_internal.h describes their keys and conflicts. */
#ifndef KVQ_WORKQ_INTERNAL_H
#define KVQ_WORKQ_INTERNAL_H

#include <pthread.h>

#include "kvq/workq.h"
#include "layers/queue/leases_internal.h"

/* kvq_workq_open without noting the options in q (workq.c). */
int kvq__wq_open(kvq_workq **out, kvq_queue *q, const kvq_workq_options *opts);

/* ---- receiving and settling one item (workq.c; batches in workq_batch.c) ------------------ */

/* A lease in versions: lease_ms (0: the handle's default) checked and converted. */
int kvq__wq_lease_versions(const kvq_workq *w, int64_t lease_ms, int64_t *out);
/* Takes the ready item at key (value: its value) off the queue in txn, read at version rv, and
 * leases it for lv versions (*lease filled); or, when it has had its deliveries, moves it to the
 * dead letters (*dead = 1, *lease untouched). key and value must stay valid across the writes
 * (copies, not views borrowed from txn). lease_id: the lease's 16-byte id, or NULL for a random
 * one; tally: NULL, or a batch's counters (the counters' adds are left to the batch). */
int kvq__wq_receive_item(kvq_workq *w,
                         kvq_txn *txn,
                         kvq_bytes key,
                         kvq_bytes value,
                         int64_t rv,
                         int64_t lv,
                         const uint8_t *lease_id,
                         kvq__wq_tally *tally,
                         kvq_workq_lease *lease,
                         int *dead);
/* Acks, nacks (arg: the delay in versions) or extends (arg: the new lease in versions) a lease
 * in txn. A lease that is expired or settled fails with KVQ_ELEASE_EXPIRED or
 * KVQ_ELEASE_SETTLED having written nothing. tally as kvq__wq_receive_item's. */
int kvq__wq_settle_txn(kvq_workq *w,
                       kvq_txn *txn,
                       kvq_workq_lease *lease,
                       int kind,
                       int64_t arg,
                       kvq__wq_tally *tally);
/* The retry loop of the idempotent convenience forms (workq.c); *maybe_out (may be NULL): an
 * attempt may have committed before the one that did. */
int kvq__wq_run_idempotent(
    kvq_db *db, kvq_txn_fn body, void *ctx, int settled_done, int *maybe_out);

/* ---- the long poll, for the consumer runtime (workq_wait.c, workq.c) -------------------- */

/* What a long poll sleeps on: its watches' helper threads and a stop request wake it through
 * cond. One waiter uses a waker at a time; kvq__wq_waker_stop may be called from any thread. */
typedef struct kvq__wq_waker {
    pthread_mutex_t mu;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    int stop;            /* set once by kvq__wq_waker_stop: the waiter gives up */
    int fired;           /* a watch of the current sleep fired */
    int failed;          /* a watch of the current sleep failed (too many watches, ...) */
} kvq__wq_waker;

/* 0 or KVQ_ENOMEM. */
int kvq__wq_waker_init(kvq__wq_waker *k);
void kvq__wq_waker_destroy(kvq__wq_waker *k);
/* Asks the waiter to give up and wakes it at once. */
void kvq__wq_waker_stop(kvq__wq_waker *k);

/* kvq_workq_receive_wait without the argument checks, that also gives up, at once, when the
 * waker (NULL: none) is stopped. With ack (NULL: none), its first look also acks that lease in
 * the same transaction (kvq__wq_ack_receive): one commit for the ack and the next item, and the
 * ack alone, at once, when nothing is ready; *ack_rc (when ack is given) gets its outcome. */
int kvq__wq_receive_wait(kvq_buf *out,
                         kvq_workq_lease *lease,
                         kvq_workq *w,
                         int64_t lease_ms,
                         int64_t wait_ms,
                         kvq__wq_waker *waker,
                         kvq_workq_lease *ack,
                         int *ack_rc);

/* Acks `ack` and receives the next ready item in one transaction (its own retry loop). Returns
 * the receive's result (0, KVQ_ENOTFOUND, an error); *ack_rc gets the ack's: 0 (acked, also
 * when nothing was ready: the ack then commits alone), KVQ_ELEASE_EXPIRED or KVQ_ELEASE_SETTLED
 * (nothing changed; the receive still ran), or the transaction's error (not acked). After a
 * 1021 a retry that finds the lease settled counts it as acked by the attempt that committed. */
int kvq__wq_ack_receive(kvq_buf *out,
                        kvq_workq_lease *lease,
                        kvq_workq *w,
                        int64_t lease_ms,
                        kvq_workq_lease *ack,
                        int *ack_rc);

/* The work queue's default lease. */
int64_t kvq__wq_lease_ms(const kvq_workq *w);

#endif /* KVQ_WORKQ_INTERNAL_H */
