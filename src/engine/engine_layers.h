/* What the layers (src/layers, src/consumer) use of the engine beyond the public kvq/db.h: a
 * small header, so that they do not see the engines' structures (engine.h). */
#ifndef KVQ_ENGINE_LAYERS_H
#define KVQ_ENGINE_LAYERS_H

#include "kvq/db.h"
#include "kvq/testing.h"

/* Whether err, just returned by kvq_txn_commit or an operation of txn, leaves the transaction
 * possibly committed: 1021 and 1039, and 1031 when it came from the engine's commit. */
int kvq__txn_maybe_committed(const kvq_txn *txn, int err);

/* The handle's KVQ_TEST_* flags (kvq/testing.h), for the layers' test-only knobs. */
unsigned int kvq__db_test_flags(const kvq_db *db);

#endif /* KVQ_ENGINE_LAYERS_H */
