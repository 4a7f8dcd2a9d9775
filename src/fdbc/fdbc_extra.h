/* The functions of FoundationDB's C API that libkvq_fdb_c.so exports beyond those kvq's own fdb
 * binding loads (engine/fdb/fdb_api.h), with fdb_c.h's signatures (its enum parameters are
 * ints here, the same in the ABI). Shared by fdb_c.c and tests/fdbc. */
#ifndef KVQ_FDBC_EXTRA_H
#define KVQ_FDBC_EXTRA_H

#include "engine/fdb/fdb_api.h"

/* FDBErrorPredicate (fdb_c_options.g.h). */
enum {
    FDB_ERROR_PREDICATE_RETRYABLE = 50000,
    FDB_ERROR_PREDICATE_MAYBE_COMMITTED = 50001,
    FDB_ERROR_PREDICATE_RETRYABLE_NOT_COMMITTED = 50002
};

/* clang-format off */
#define KVQ_FDBC_EXTRA_FUNCTIONS(X)                                                                \
    X(fdb_bool_t, fdb_error_predicate, (int predicate_test, fdb_error_t code))                     \
    X(fdb_error_t, fdb_network_set_option,                                                         \
      (int option, const uint8_t *value, int value_length))                                        \
    X(fdb_error_t, fdb_database_set_option,                                                        \
      (FDBDatabase *d, int option, const uint8_t *value, int value_length))                        \
    X(void, fdb_transaction_clear, (FDBTransaction *tr, const uint8_t *key_name, int key_name_length)) \
    X(void, fdb_transaction_cancel, (FDBTransaction *tr))                                          \
    X(FDBFuture *, fdb_transaction_on_error, (FDBTransaction *tr, fdb_error_t error))              \
    X(fdb_bool_t, fdb_future_is_ready, (FDBFuture *f))                                             \
    X(FDBFuture *, fdb_transaction_get_key,                                                        \
      (FDBTransaction *tr, const uint8_t *key_name, int key_name_length, fdb_bool_t or_equal,      \
       int offset, fdb_bool_t snapshot))                                                           \
    X(void, fdb_future_release_memory, (FDBFuture *f))
/* clang-format on */

#define KVQ_FDBC_EXTRA_PROTOTYPE(ret, name, params) ret name params;
KVQ_FDBC_EXTRA_FUNCTIONS(KVQ_FDBC_EXTRA_PROTOTYPE)
#undef KVQ_FDBC_EXTRA_PROTOTYPE

#endif /* KVQ_FDBC_EXTRA_H */
