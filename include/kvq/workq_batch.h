/**
 * @file kvq/workq_batch.h
 * @brief Batches of the work queue: receive, ack and nack many items in one transaction, and
 *        the lease token as text.
 *
 * A consumer of small jobs that receives and acks one item per transaction pays two commits per
 * item; these take one commit per batch (and per direction). A batch received together is
 * leased as one record (docs/workq.md): its items leave the queue with one range clear, and an
 * ack of the whole batch clears its record, so a batch costs a few row writes each way rather
 * than several per item. Every guarantee of a lease holds for each item: its lease (and token)
 * settles it alone, exactly once; an item not settled comes back when the batch's lease ends,
 * with one more delivery (or goes to the dead letters); kvq_workq_ack, _nack and _extend take
 * a batch item's lease too (an extend moves that item to a lease of its own). Batches and single
 * operations mix freely, and the conflict rules are theirs: receivers of one queue compete for
 * its head, and settling different leases never conflicts (two settlers of one item do).
 *
 * As everywhere in kvq (kvq/kvq.h), outputs come first. Errors common to every function: KVQ_EINVAL
 * for NULL or invalid arguments (counts from 1 to 10,000), KVQ_EWRONGTYPE for a FIFO queue, and the
 * transaction errors of kvq/db.h (after the retry budget for convenience forms). Details are in
 * kvq_last_error().
 */
#ifndef KVQ_WORKQ_BATCH_H
#define KVQ_WORKQ_BATCH_H

#include "common.h"
#include "workq.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Receives up to k ready items in one transaction, each with its own lease, all ending at the
 * same version (convenience form: its own retry loop, after the upkeep kvq_workq_receive does).
 * Items that have had their deliveries go to the dead letters on the way, as with
 * kvq_workq_receive.
 * @param[out] outs    caller array of at least k buffers; outs[0..*n) receive the values
 *                     (free each with kvq_buf_dispose)
 * @param[out] leases  caller array of at least k leases; leases[0..*n) are filled
 * @param[out] n       how many were received
 * @param k            at most this many, 1 to 10,000
 * @param lease_ms     the lease of each, or 0 for the handle's default
 * @return 0 with *n from 1 to k; KVQ_ENOTFOUND (nothing ready); KVQ_ENOMEM; a transaction
 *         error (nothing received).
 * @note Under 1021 a batch that did commit is retried and receives other items; the first
 *       batch's items are then leased to nobody and come back after their leases (at least
 *       once), as with kvq_workq_receive.
 */
KVQ_API KVQ_NODISCARD int kvq_workq_receive_many(
    kvq_buf *outs, kvq_workq_lease *leases, size_t *n, kvq_workq *w, size_t k, int64_t lease_ms);

/** kvq_workq_receive_many inside the caller's transaction (no upkeep pass). `outs` are views
 * borrowed from txn. Do not push to a durable queue earlier in the same transaction. */
KVQ_API KVQ_NODISCARD int kvq_workq_receive_many_txn(kvq_bytes *outs,
                                                     kvq_workq_lease *leases,
                                                     size_t *n,
                                                     kvq_workq *w,
                                                     kvq_txn *txn,
                                                     size_t k,
                                                     int64_t lease_ms);

/**
 * Acknowledges n leases in one transaction (convenience form). A lease that has expired or was
 * already settled changes nothing and does not stop the others: they are acked.
 * @param[out] out  NULL, or an array of n: 0 (acked), KVQ_ELEASE_EXPIRED or KVQ_ELEASE_SETTLED
 *                  for each lease
 * @return 0 when every lease was acked; KVQ_ELEASE_EXPIRED or KVQ_ELEASE_SETTLED (the first
 *         lease's that failed) when some were not, the others having been acked; a transaction
 *         error (nothing acked).
 * @note As kvq_workq_ack, a retry after a commit that may have happened counts the leases it
 *       finds settled as acked.
 */
KVQ_API KVQ_NODISCARD int
kvq_workq_ack_many(int *out, kvq_workq *w, const kvq_workq_lease *leases, size_t n);

/** kvq_workq_ack_many inside the caller's transaction: returns as it does, having written the
 * acks of the leases that are valid (the caller commits them, or not). */
KVQ_API KVQ_NODISCARD int kvq_workq_ack_many_txn(
    int *out, kvq_workq *w, kvq_txn *txn, const kvq_workq_lease *leases, size_t n);

/** Gives n leases back in one transaction, as kvq_workq_nack each (delay_ms 0: ready at once;
 * to the dead letters after the queue's max deliveries): out and return as
 * kvq_workq_ack_many. */
KVQ_API KVQ_NODISCARD int kvq_workq_nack_many(
    int *out, kvq_workq *w, const kvq_workq_lease *leases, size_t n, int64_t delay_ms);

/** kvq_workq_nack_many inside the caller's transaction. */
KVQ_API KVQ_NODISCARD int kvq_workq_nack_many_txn(int *out,
                                                  kvq_workq *w,
                                                  kvq_txn *txn,
                                                  const kvq_workq_lease *leases,
                                                  size_t n,
                                                  int64_t delay_ms);

/* ---------------------------------------------------------------------------------------- */
/* Readers                                                                                   */
/* ---------------------------------------------------------------------------------------- */

/**
 * Makes what is due ready now: delayed items whose time has come, and items whose lease ended
 * (or that go to the dead letters instead). Optional: every reader of a durable or priority
 * queue (pops, peeks, lengths, iteration, receives, statistics, listings; kvq/queue.h) already
 * does this when it finds something due at its read version, so a due item is ready for every
 * reader without this call. It serves to make them ready at a time of the caller's choosing,
 * for instance so that the push counter moves and wakes the watchers of a durable queue
 * (`kvq consume` calls it every 200 ms). A read-only look when nothing is due.
 * @param[out] out  items made ready or moved (may be NULL)
 * @return 0; KVQ_EINVAL; a transaction error (KVQ_EPERM on a read-only handle with work due).
 */
KVQ_API KVQ_NODISCARD int kvq_workq_ready_due(uint64_t *out, kvq_workq *w);

/**
 * Removes every item of the queue, whatever its state: ready, in flight (their leases end:
 * a late ack fails with KVQ_ELEASE_EXPIRED), delayed and dead letters, in one transaction
 * (`kvq clear`). They are counted in kvq_workq_stats.cleared, not as popped or acked. Dedup
 * keys stay (a deduplicated push within the window still enqueues nothing).
 * @param[out] out  items removed (may be NULL)
 * @return 0; KVQ_EINVAL; a transaction error (nothing removed).
 */
KVQ_API KVQ_NODISCARD int kvq_workq_purge(uint64_t *out, kvq_workq *w);

/* ---------------------------------------------------------------------------------------- */
/* Lease tokens: a lease as text, as `kvq receive` prints it and `kvq ack` takes it           */
/* ---------------------------------------------------------------------------------------- */

/** Characters of a lease token, without the terminating NUL. */
#define KVQ_WORKQ_TOKEN_LEN 88

/**
 * Writes a lease as a token: its fields in lowercase hexadecimal (id, received, deadline,
 * deliveries, priority, big-endian), the same text the kvq command prints, so that a lease can
 * travel between programs and commands (`kvq receive` in a script, kvq_workq_ack in C).
 * The caller's buffer is passed as kvq_tuple_pack's is: (out, cap, &len), then the input.
 *
 * @param[out] out    at least KVQ_WORKQ_TOKEN_LEN + 1 bytes; receives the token and a NUL; may
 *                    be NULL when cap is 0 (to ask for the size)
 * @param[in]  cap    the size of out
 * @param[out] len    the characters written, the NUL not counted (KVQ_WORKQ_TOKEN_LEN); with
 *                    KVQ_ENOBUFS the size needed, the NUL counted; 0 on other errors
 * @param[in]  lease  the lease
 * @return 0; KVQ_EINVAL (a NULL len or lease, a NULL out with cap > 0); KVQ_ENOBUFS (cap too
 *         small: nothing written).
 */
KVQ_API KVQ_NODISCARD int
kvq_workq_lease_format(char *out, size_t cap, size_t *len, const kvq_workq_lease *lease);

/**
 * Reads a token written by kvq_workq_lease_format (or printed by the kvq command): exactly
 * KVQ_WORKQ_TOKEN_LEN hexadecimal digits, either case.
 * @param[out] out  the lease; untouched on failure
 * @return 0; KVQ_EINVAL (NULL, or not such a token).
 */
KVQ_API KVQ_NODISCARD int kvq_workq_lease_parse(kvq_workq_lease *out, const char *token);

#ifdef __cplusplus
}
#endif

#endif /* KVQ_WORKQ_BATCH_H */
