/**
 * @file kvq/kvq.h
 * @brief kvq: durable, transactional queues for C. Include this one header.
 *
 * One convention holds in every header (docs/api.md has it in full, with the renames of 0.1's
 * last round; tests/headertest/api_scheme.py checks it; a new function follows it):
 *
 * - **Names**: `kvq_<object>_<verb>`; the `_txn` form of an operation runs inside the caller's
 *   transaction, the plain form runs its own retry loop. Getters are `kvq_<object>_get_<noun>`:
 *   they return the value when they cannot fail (kvq_queue_get_type), else write `out`
 *   (kvq_db_get_stats); counts are "stats"; predicates return bool (kvq_error_retryable).
 * - **Checked results**: every function returning a value is KVQ_NODISCARD (kvq/common.h).
 * - **Caller buffers**: (out, cap, &len, inputs), as kvq_tuple_pack and kvq_workq_lease_format.
 * - **Arguments**: outputs first. The only output, or the main one, is named `out` (`outs` for
 *   an array the caller provides); further outputs follow it, named for what they hold (`n`,
 *   `priority`, `lease`, `watch`). Then the object acted on (database, queue, work queue,
 *   consumer), then the transaction of a `_txn` form, then the inputs, then the options
 *   (NULL for the defaults). A callback is followed by its `payload`, which it receives last.
 * - **Variants**: one function with an argument, not a pair of functions (kvq_queue_end picks
 *   the end of a priority queue: kvq_queue_pop_prio(&out, &priority, q, KVQ_QUEUE_MAX)).
 * - **Results**: 0 or a KVQ_E* code (kvq/error.h); kvq_last_error() has a one-line detail.
 * - **Lifetimes**: one destructor verb per kind of object, and every destructor takes NULL:
 *   - a handle on stored state is opened and closed: kvq_db_open / kvq_db_close,
 *     kvq_queue_open / kvq_queue_close, kvq_workq_open / kvq_workq_close;
 *   - an object that lives in memory is made (create, new, start, unpack, watch) and destroyed:
 *     kvq_txn_destroy, kvq_watch_destroy, kvq_consumer_destroy, kvq_workq_consumer_destroy,
 *     kvq_tuple_destroy, kvq_subspace_destroy;
 *   - a caller's kvq_buf is filled by kvq and disposed of by the caller: kvq_buf_dispose.
 *   Returned views (kvq_bytes) are borrowed: each function says until when.
 */
#ifndef KVQ_KVQ_H
#define KVQ_KVQ_H

#include "common.h"
#include "error.h"
#include "db.h"
#include "consumer.h"
#include "tuple.h"
#include "queue.h"
#include "workq.h"
#include "workq_batch.h"

#endif /* KVQ_KVQ_H */
