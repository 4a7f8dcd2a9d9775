/* Batch leases of the work queue, shared by batch_lease.c (the lease record: loading, settling
 * its items, expiry, listing) and the work queue's workq_batch.c (receive, ack and nack of many,
 * which writes the record). Calls go one way: workq_batch.c calls batch_lease.c. */
#ifndef KVQ_BATCH_LEASE_INTERNAL_H
#define KVQ_BATCH_LEASE_INTERNAL_H

#include "layers/queue/leases_internal.h"

#define MANY_MAX 10000

/* ---- batch leases ---------------------------------------------------------------------------
 *
 * A batch of items received in one transaction is leased as one record instead of one lease per
 * item: the items leave the queue with one clear_range (the run read from its head), and their
 * keys, delivery counts and values go into the batch's record, under bk ("wq","b", bid14); one
 * expiry index entry bk ("wq","x", deadline, bid14) brings the batch back when it ends. So a
 * receive of 100 writes a few keys, as a pop of 100 does, and an ack of the whole batch clears
 * two ranges and writes one marker, instead of some seven keys per item each way.
 *
 * An item's lease id is the batch id and the item's number, so its token settles it alone. An
 * item settled while others of its batch are in flight gets a byte under bk ("wq","bs", bid14,
 * item); when every item is settled, the batch's keys go and a marker bk ("wq","s", bucket,
 * bid14) keeps one byte per item ('a', 'n', 'e', 'm'), so that a late ack still tells "settled"
 * from "expired" (as a single lease's marker does). An extend moves its item out to a lease of
 * its own (workq.c's layout, same id), marked 'm'; the single-lease path settles it from then on.
 *
 * The record (format 1): the header key holds
 *   format (1) | items (4 LE) | deadline (8 LE) | received (8 LE) | more item-record keys (4 LE)
 *   | value keys (4 LE) | item records...
 * and an item record is deliveries (4 LE) | ready since (8 LE, -1: none; priority queues) |
 * key suffix length (2 LE) | value length (4 LE) | key suffix. Item records that do not fit in
 * META_CHUNK bytes continue, whole, in bk ("wq","b", bid14, 0, 1..); the values follow, packed
 * whole and in order, in bk ("wq","b", bid14, 1, 0..) of at most VAL_CHUNK bytes each: a value
 * starts a new key when it does not fit in the current one. */

#define BID        KVQ__WQ_BATCH_ID
#define FORMAT     1
#define HDR        29
#define ENTRY      18
#define META_CHUNK 90000
#define VAL_CHUNK  100000

enum { STREAM_META = 0, STREAM_VAL = 1, STREAM_STATE = 2 };
enum { ST_LIVE = 0, ST_ACK = 'a', ST_NACK = 'n', ST_EXPIRED = 'e', ST_MOVED = 'm' };
enum { B_NONE, B_LIVE, B_MARKED };

typedef struct bitem {
    uint32_t deliv;
    int64_t since;
    size_t soff, slen, voff, vlen;
} bitem;

typedef struct batch {
    uint8_t id[BID];
    int kind;
    int64_t deadline, received;
    uint32_t n;
    uint8_t *state;   /* n bytes: ST_* */
    uint8_t *changed; /* n flags: state written in this transaction, not yet stored */
    uint32_t lo, hi;  /* span of the changed items */
    int any, full;
    kvq_buf meta, vals; /* full: the item records and the values */
    bitem *items;
} batch;

void kvq__wq_b_dispose(batch *b);
uint32_t kvq__wq_b_item_of(const uint8_t *lease_id);
int kvq__wq_b_bid_key(kvq_buf *out, const kvq_buf *base, const uint8_t *bid);
int kvq__wq_b_chunk_key(kvq_buf *out, kvq_workq *w, const uint8_t *bid, int stream, int64_t i);
int kvq__wq_b_bx_key(kvq_buf *out, kvq_workq *w, int64_t deadline, const uint8_t *bid);
int kvq__wq_b_load(batch *b,
                   kvq_workq *w,
                   kvq_txn *txn,
                   const uint8_t *bid,
                   int64_t received,
                   unsigned int hflags,
                   unsigned int sflags);
int kvq__wq_b_flush(batch *b, kvq_workq *w, kvq_txn *txn);
int kvq__wq_b_owns(const batch *b, uint32_t idx);
int kvq__wq_b_settle_item(batch *b,
                          kvq_workq *w,
                          kvq_txn *txn,
                          uint32_t idx,
                          kvq_workq_lease *lease,
                          int kind,
                          int64_t arg,
                          int64_t rv,
                          kvq__wq_tally *t);
int kvq__wq_b_marked_outcome(const batch *b, uint32_t idx);

#endif
