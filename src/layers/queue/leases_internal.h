/* The states of the items of a durable or priority queue used as a work queue (kvq/workq.h):
 * ready, in flight (leased, alone or in a batch), delayed and dead, their keys and counters, the
 * moves between them, and the upkeep that brings ended leases and due delayed items back to
 * ready. They are the queue's, because every reader of such a queue runs that upkeep first
 * (kvq__q_due_gate), whether or not it opened a work queue; the work queue above
 * (layers/workq/) leases, settles and lists items through them. The work queue's settings
 * reach them as data: a kvq_workq holds its keys and options and nothing else of the work
 * queue. Files:
 *
 *   lease_items.c   keys, counters, the age of priority items, moving items between states
 *   batch_lease.c   batch leases: their record, settling an item, expiry
 *   due.c           ended leases and due delayed items back to ready, pruning, every reader's
 *                   gate
 *
 * Written only against the transaction interface and the queue's key layout, so it runs the
 * same on every engine. Keys (bk = the queue's prefix + 0xFF; "suffix" is a ready item's key
 * after the queue's prefix, appended raw, so it stays parseable and ordered):
 *
 *   ready item       prefix + suffix                     the recipe's own key and raw value
 *   bk ("wq","c") + suffix      4-byte LE delivery count of a ready or dead item (absent: 0)
 *   bk ("wq","dlq") + suffix    a dead letter's value
 *   bk ("wq","l", id16)         lease: 8 LE deadline, 4 LE deliveries, 8 LE received, suffix
 *   bk ("wq","v", id16)         the leased item's value
 *   bk ("wq","x", deadline, id16)           expiry index of leases (empty value)
 *   bk ("wq","x", deadline, bid14)          expiry index of a batch lease (batch_lease.c)
 *   bk ("wq","b", bid14)                    batch lease: header and the items' records
 *   bk ("wq","b", bid14, 0|1, n)            more item records (0) and the values (1)
 *   bk ("wq","b", bid14, 2, item)           an item of a live batch settled (1 byte: 'a' ack,
 *                                           'n' nack, 'e' expired and given back, 'm' moved
 *                                           to a lease of its own by an extend)
 *   bk ("wq","s", bucket, bid14)            a batch settled: one such byte per item
 *   bk ("wq","y", due, id16, prio, deliv)   a delayed item's value
 *   bk ("wq","s", bucket, id16)             settled-lease marker (1 byte: 'a' ack, 'n' nack)
 *   bk ("wq","dd", key)                     dedup key: 8 LE version, 16-byte push id
 *   bk ("wq","ddx", version, key)           dedup index for pruning (empty value)
 *   bk ("wq","n", name)                     8-byte LE counters: inflight, delayed, dead, ready;
 *                                           and, only ever growing: received, taken, acked,
 *                                           requeued, deadlettered, cleared, clearedr
 *                                           (purged: all, and the ready ones); and tick, bumped by
 *                                           recover and by an extend that shortens a lease
 *
 * The ready count of a durable queue is npush - npop: a receive adds 1 to npop, a return to the
 * queue adds 1 to npush (which also wakes consumers watching npush).
 *
 * Conflicts: a receive reads the item it takes (the head, or under contention one of the first
 * items: workq.c, "Receivers that spread") and that item's count key. Ack, nack and
 * extend read only their lease's own keys; counters change by atomic adds. So settling leases of
 * different items never conflicts, and nothing a push writes is read by them. */
#ifndef KVQ_LEASES_INTERNAL_H
#define KVQ_LEASES_INTERNAL_H

#include "kvq/workq.h"
#include "layers/queue/queue_internal.h"

/* Rows a work-queue transaction reads or moves at most (upkeep passes, listings, redrives). */
#define KVQ__WQ_BATCH 64

struct kvq_workq {
    kvq_queue *q;
    kvq_workq_options opts;
    unsigned int test_flags; /* KVQ_WORKQ_TEST_* (kvq/testing.h) */
    kvq_buf base_c, base_dlq, base_l, base_v, base_x, base_y, base_s, base_dd, base_ddx;
    kvq_buf base_a, base_t; /* priority queues: the age index, leased items' ready versions */
    kvq_buf base_b;         /* batch leases (batch_lease.c) */
    kvq_buf n_inflight, n_delayed, n_dead, n_ready, tick;
    /* Totals since the queue was made (atomic adds; only read by the statistics). */
    kvq_buf n_received, n_taken, n_acked, n_requeued, n_deadlettered;
    /* Items removed by kvq_workq_purge, all and those that were ready (workq_purge.c). */
    kvq_buf n_cleared, n_cleared_ready;
    /* Long polls through this handle (atomic; read by kvq_testing_workq_wait_counts and
     * kvq_testing_workq_wait_wakes): looks (receives), sleeps, and the sleeps a watch ended. */
    uint64_t wait_looks, wait_sleeps, wait_wakes;
    /* Receivers of this handle spread out while they lose races for their items (workq.c,
     * "Receivers that spread"): a pressure (atomic: raised by a race lost, lowered by each item
     * taken) and the ticket that places each receive of a spread in the window (atomic; starts
     * at a random value, so that two processes' receivers start apart). */
    int recv_pressure;
    uint64_t recv_ticket;
};

/* Fills w's keys for queue q, with options o (checked by the caller); 0 or KVQ_ENOMEM (w's
 * keys then disposed). */
int kvq__wq_keys_init(kvq_workq *w, kvq_queue *q, const kvq_workq_options *o);
/* Disposes of w's keys (not of w). */
void kvq__wq_keys_dispose(kvq_workq *w);

/* ---- keys (lease_items.c) ---------------------------------------------------------------- */

/* out = base + pack(e) (out reset first). */
int kvq__wq_key_of(kvq_buf *out, const kvq_buf *base, const kvq_tuple_elem *e, size_t n);
/* out = base + raw bytes (out reset first). */
int kvq__wq_key_raw(kvq_buf *out, const kvq_buf *base, const uint8_t *p, size_t n);
/* [base + 00, base + FF): the range of one kind. */
int kvq__wq_range_of(kvq_buf *lo, kvq_buf *hi, const kvq_buf *base);
/* out = base + pack((id16,)). */
int kvq__wq_id_key(kvq_buf *out, const kvq_buf *base, const uint8_t *id);
/* Adds delta to an 8-byte LE counter (an atomic add: no conflict). */
int kvq__wq_counter_add(kvq_txn *txn, const kvq_buf *key, int64_t delta);
/* The ready count goes up or down by delta. */
int kvq__wq_ready_add(kvq_workq *w, kvq_txn *txn, int64_t delta);
/* Counters of a batch, added once at its end (kvq__wq_tally_apply) instead of once per item. */
typedef struct kvq__wq_tally {
    int64_t ready, taken, inflight, received, acked;
} kvq__wq_tally;
/* Adds the batch's counters. */
int kvq__wq_tally_apply(kvq_workq *w, kvq_txn *txn, kvq__wq_tally *t);
/* KVQ_EINVAL when w is NULL, or txn is NULL while need_txn is set (fn names the caller). */
int kvq__wq_check(const kvq_workq *w, const kvq_txn *txn, int need_txn, const char *fn);
/* Upkeep returns the leases whose deadline is below this bound: the read version, or (test-only
 * knob) everything, so that a checker can be shown to catch early redeliveries. */
int64_t kvq__wq_expiry_bound(const kvq_workq *w, int64_t rv);

/* ---- the age of ready items on priority queues (lease_items.c) ---------------------------- */

/* out = bk ("wq","a", since) + suffix */
int kvq__wq_age_key(kvq_buf *out, kvq_workq *w, int64_t since, const uint8_t *suffix, size_t slen);
/* A leased priority item's ready version: read and cleared (-1 when it has none). */
int kvq__wq_age_take(kvq_workq *w, kvq_txn *txn, const uint8_t *id, int64_t *since);
/* The ready version of the oldest ready item of a priority queue (-1: none found); with prune
 * set, clears the index entries of items that are gone. */
int kvq__wq_age_head(kvq_workq *w, kvq_txn *txn, int prune, int64_t *out);

/* ---- moving items (lease_items.c) --------------------------------------------------------- */

/* Writes a ready item back at prefix + suffix with its delivery count (and, on a priority queue,
 * its ready version `since`; -1: from now). */
int kvq__wq_to_ready(kvq_workq *w,
                     kvq_txn *txn,
                     const uint8_t *suffix,
                     size_t slen,
                     kvq_bytes value,
                     uint32_t deliveries,
                     int64_t since,
                     kvq_buf *tmp);
/* Moves an item to the dead letters with its delivery count. */
int kvq__wq_to_dead(kvq_workq *w,
                    kvq_txn *txn,
                    const uint8_t *suffix,
                    size_t slen,
                    kvq_bytes value,
                    uint32_t deliveries,
                    kvq_buf *tmp);
/* Back to the queue, or to the dead letters when the item has had its deliveries (*dead, when
 * not NULL, tells which). */
int kvq__wq_give_back(kvq_workq *w,
                      kvq_txn *txn,
                      const uint8_t *suffix,
                      size_t slen,
                      kvq_bytes value,
                      uint32_t deliveries,
                      int64_t since,
                      kvq_buf *tmp,
                      int *dead);
/* Writes a delayed item, due at version `due`. */
int kvq__wq_put_delayed(kvq_workq *w,
                        kvq_txn *txn,
                        int64_t due,
                        int64_t prio,
                        uint32_t deliveries,
                        kvq_bytes value,
                        kvq_buf *tmp);
/* Pushes a value to the ready queue at a new key (the tail of a durable queue, the end of its
 * priority in a priority queue), with a delivery count. Never reads anything that conflicts. */
int kvq__wq_push_ready(
    kvq_workq *w, kvq_txn *txn, int64_t prio, uint32_t deliveries, kvq_bytes value, kvq_buf *tmp);

enum { SETTLE_ACK, SETTLE_NACK, SETTLE_EXTEND };

/* ---- batch leases (batch_lease.c) ---------------------------------------------------- */

/* Bytes of a batch's id; an item's lease id is the batch id and the item's number (2 bytes,
 * big-endian). A single lease's id has 16 bytes, so expiry index keys tell the two apart. */
#define KVQ__WQ_BATCH_ID 14

/* Settles (ack, nack, extend as kvq__wq_settle_txn) the lease of an item of a batch lease.
 * *handled = 0 when the lease is no such item (a single lease, or an item an extend moved to a
 * lease of its own): nothing was written, the single-lease path applies. tally may be NULL. */
int kvq__wq_batch_settle(int *handled,
                         kvq_workq *w,
                         kvq_txn *txn,
                         kvq_workq_lease *lease,
                         int kind,
                         int64_t arg,
                         kvq__wq_tally *tally);
/* Upkeep of a batch lease whose expiry index entry was read: its unsettled items go back to the
 * queue (or to the dead letters) while *budget (bytes) lasts; *done = 1 once nothing of the
 * batch is left (its records cleared, its index entry too), 0 when the budget ran out first. */
int kvq__wq_batch_expire(
    kvq_workq *w, kvq_txn *txn, const uint8_t *bid, int64_t *budget, uint64_t *moved, int *done);
/* Calls fn for each item still in flight of a batch (snapshot reads); nothing when it is gone. */
typedef int (*kvq__wq_batch_item_fn)(const kvq_workq_lease *lease, kvq_bytes value, void *arg);
int kvq__wq_batch_items(
    kvq_workq *w, kvq_txn *txn, const uint8_t *bid, kvq__wq_batch_item_fn fn, void *arg);

/* ---- upkeep (due.c) ------------------------------------------------------------------------ */

/* Upkeep passes, each a transaction that first looks again, while something is due; *out (may be
 * NULL) adds what they moved. prune: also prune old markers, dedup keys and age entries. */
int kvq__wq_passes_while_due(kvq_workq *w, int prune, uint64_t *out);
/* Upkeep passes until none is left, without looking first (kvq_workq_recover). */
int kvq__wq_recover_all(kvq_workq *w, uint64_t *out);

#endif /* KVQ_LEASES_INTERNAL_H */
