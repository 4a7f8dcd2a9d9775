/* What the layers (src/layers, src/consumer) use of the engine beyond the public kvq/db.h: a
 * small header, so that they do not see the engines' structures (engine.h). */
#ifndef KVQ_ENGINE_LAYERS_H
#define KVQ_ENGINE_LAYERS_H

#include "kvq/db.h"
#include "kvq/testing.h"

/* Whether err, just returned by kvq_txn_commit or an operation of txn, leaves the transaction
 * possibly committed: 1021 and 1039, and 1031 when it came from the engine's commit. */
int kvq__txn_maybe_committed(const kvq_txn *txn, int err);

/* Early lock release (issue 30, item 4; docs/engine.md, "Early reads"): lets the first read of
 * txn see commits that are written but not yet durable, for kvq's own operations that hand the
 * caller nothing of what they read before their commit has returned (a pop, consume, receive):
 * their commit is ordered after what they read, and a sync covers everything written before it,
 * so a crash loses both or neither. Never for a transaction the application reads through, nor
 * for a read-only operation. Call it before the first read of each attempt (a reset clears it);
 * an engine that has no such reads (fdb) ignores it. */
void kvq__txn_early_read(kvq_txn *txn);
/* An early-read attempt that ends without a commit (its body failed: an empty queue, an error)
 * calls this before its outcome is told: it waits until what its reads saw is durable. 0, or
 * the sync's error (the outcome is then that error). */
int kvq__txn_early_settle(kvq_txn *txn);

/* The handle's KVQ_TEST_* flags (kvq/testing.h), for the layers' test-only knobs. */
unsigned int kvq__db_test_flags(const kvq_db *db);

#endif /* KVQ_ENGINE_LAYERS_H */
