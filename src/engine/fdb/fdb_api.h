/* kvq's own declarations of the part of FoundationDB's C client (libfdb_c) that the fdb engine
 * uses, written from FoundationDB's documentation (api-c.rst) and the numbers of its options
 * and errors. kvq never includes fdb_c.h: libfdb_c is loaded at run time with dlopen, so kvq
 * builds and runs without it.
 *
 * Everything here is the same for API versions 710 and 730. libkvq_fdb_c.so (src/fdbc), which
 * the engine is tested through, exports these functions under the same names from the same
 * declarations, so that its signatures and struct layouts cannot drift from the binding's. */
#ifndef KVQ_FDB_API_H
#define KVQ_FDB_API_H

#include <stddef.h>
#include <stdint.h>

/* Opaque handles. */
typedef struct FDB_future FDBFuture;
typedef struct FDB_database FDBDatabase;
typedef struct FDB_transaction FDBTransaction;

typedef int fdb_error_t;
typedef int fdb_bool_t;

typedef void (*FDBCallback)(FDBFuture *future, void *callback_parameter);

/* libfdb_c declares its structs inside `#pragma pack(push, 4)`: on x86_64 a key-value pair is
 * 24 bytes, with the value pointer at offset 12 (not 32 bytes with padding). */
#pragma pack(push, 4)
typedef struct FDBKeyValue {
    const uint8_t *key;
    int key_length;
    const uint8_t *value;
    int value_length;
} FDBKeyValue;
#pragma pack(pop)

_Static_assert(sizeof(void *) != 8 || sizeof(FDBKeyValue) == 24,
               "FDBKeyValue must be packed to 4 bytes, as libfdb_c declares it");
_Static_assert(sizeof(void *) != 8 || offsetof(FDBKeyValue, value) == 12,
               "FDBKeyValue.value must be at offset 12");
_Static_assert(sizeof(void *) != 8 || offsetof(FDBKeyValue, value_length) == 20,
               "FDBKeyValue.value_length must be at offset 20");

/* API versions kvq knows how to speak. */
enum { FDB_API_VERSION_710 = 710, FDB_API_VERSION_730 = 730 };

typedef enum FDBStreamingMode {
    FDB_STREAMING_MODE_WANT_ALL = -2,
    FDB_STREAMING_MODE_ITERATOR = -1,
    FDB_STREAMING_MODE_EXACT = 0,
    FDB_STREAMING_MODE_SMALL = 1,
    FDB_STREAMING_MODE_MEDIUM = 2,
    FDB_STREAMING_MODE_LARGE = 3,
    FDB_STREAMING_MODE_SERIAL = 4
} FDBStreamingMode;

typedef enum FDBMutationType {
    FDB_MUTATION_TYPE_ADD = 2,
    FDB_MUTATION_TYPE_BIT_AND = 6,
    FDB_MUTATION_TYPE_BIT_OR = 7,
    FDB_MUTATION_TYPE_BIT_XOR = 8,
    FDB_MUTATION_TYPE_APPEND_IF_FITS = 9,
    FDB_MUTATION_TYPE_MAX = 12,
    FDB_MUTATION_TYPE_MIN = 13,
    FDB_MUTATION_TYPE_SET_VERSIONSTAMPED_KEY = 14,
    FDB_MUTATION_TYPE_SET_VERSIONSTAMPED_VALUE = 15,
    FDB_MUTATION_TYPE_BYTE_MIN = 16,
    FDB_MUTATION_TYPE_BYTE_MAX = 17,
    FDB_MUTATION_TYPE_COMPARE_AND_CLEAR = 20
} FDBMutationType;

typedef enum FDBConflictRangeType {
    FDB_CONFLICT_RANGE_TYPE_READ = 0,
    FDB_CONFLICT_RANGE_TYPE_WRITE = 1
} FDBConflictRangeType;

/* Transaction options used by kvq. Integer parameters are 8 bytes, little-endian. */
typedef enum FDBTransactionOption {
    FDB_TR_OPTION_TIMEOUT = 500,
    FDB_TR_OPTION_RETRY_LIMIT = 501,
    FDB_TR_OPTION_MAX_RETRY_DELAY = 502,
    FDB_TR_OPTION_SIZE_LIMIT = 503
} FDBTransactionOption;

/* Error numbers the binding and the double name (kvq's error list has most of them too). */
enum {
    FDB_ERR_OPERATION_CANCELLED = 1101,
    FDB_ERR_TRANSACTION_CANCELLED = 1025,
    FDB_ERR_FUTURE_RELEASED = 1102,
    FDB_ERR_CLIENT_INVALID_OPERATION = 2000,
    FDB_ERR_INVALID_OPTION_VALUE = 2006,
    FDB_ERR_INVALID_OPTION = 2007,
    FDB_ERR_NETWORK_NOT_SETUP = 2008,
    FDB_ERR_NETWORK_ALREADY_SETUP = 2009,
    FDB_ERR_FUTURE_NOT_SET = 2015,
    FDB_ERR_NO_COMMIT_VERSION = 2021,
    FDB_ERR_CONNECTION_STRING_INVALID = 2104,
    FDB_ERR_API_VERSION_UNSET = 2200,
    FDB_ERR_API_VERSION_ALREADY_SET = 2201,
    FDB_ERR_API_VERSION_INVALID = 2202,
    FDB_ERR_API_VERSION_NOT_SUPPORTED = 2203,
    FDB_ERR_INTERNAL_ERROR = 4100
};

/* The functions, as one list: X(return type, name, (parameters)). The binding turns it into a
 * table of pointers filled with dlsym; the double into prototypes of the functions it exports.
 * fdb_select_api_version() is a macro in fdb_c.h, so a dlopen user calls the _impl function.
 * (clang-format would write `T * p` in the parameter lists.) */
/* clang-format off */
#define KVQ_FDB_FUNCTIONS(X)                                                                       \
    X(fdb_error_t, fdb_select_api_version_impl, (int runtime_version, int header_version))         \
    X(int, fdb_get_max_api_version, (void))                                                        \
    X(const char *, fdb_get_client_version, (void))                                                \
    X(const char *, fdb_get_error, (fdb_error_t code))                                             \
    X(fdb_error_t, fdb_setup_network, (void))                                                      \
    X(fdb_error_t, fdb_run_network, (void))                                                        \
    X(fdb_error_t, fdb_stop_network, (void))                                                       \
    X(fdb_error_t, fdb_create_database,                                                            \
      (const char *cluster_file_path, FDBDatabase **out_database))                                 \
    X(void, fdb_database_destroy, (FDBDatabase *d))                                                \
    X(fdb_error_t, fdb_database_create_transaction,                                                \
      (FDBDatabase *d, FDBTransaction **out_transaction))                                          \
    X(void, fdb_transaction_destroy, (FDBTransaction *tr))                                         \
    X(void, fdb_transaction_reset, (FDBTransaction *tr))                                           \
    X(fdb_error_t, fdb_transaction_set_option,                                                     \
      (FDBTransaction *tr, FDBTransactionOption option, const uint8_t *value, int value_length))   \
    X(FDBFuture *, fdb_transaction_get_read_version, (FDBTransaction *tr))                         \
    X(FDBFuture *, fdb_transaction_get,                                                            \
      (FDBTransaction *tr, const uint8_t *key_name, int key_name_length, fdb_bool_t snapshot))     \
    X(FDBFuture *, fdb_transaction_get_range,                                                      \
      (FDBTransaction *tr, const uint8_t *begin_key_name, int begin_key_name_length,               \
       fdb_bool_t begin_or_equal, int begin_offset, const uint8_t *end_key_name,                   \
       int end_key_name_length, fdb_bool_t end_or_equal, int end_offset, int limit,                \
       int target_bytes, FDBStreamingMode mode, int iteration, fdb_bool_t snapshot,                \
       fdb_bool_t reverse))                                                                        \
    X(void, fdb_transaction_set,                                                                   \
      (FDBTransaction *tr, const uint8_t *key_name, int key_name_length, const uint8_t *value,     \
       int value_length))                                                                          \
    X(void, fdb_transaction_clear_range,                                                           \
      (FDBTransaction *tr, const uint8_t *begin_key_name, int begin_key_name_length,               \
       const uint8_t *end_key_name, int end_key_name_length))                                      \
    X(void, fdb_transaction_atomic_op,                                                             \
      (FDBTransaction *tr, const uint8_t *key_name, int key_name_length, const uint8_t *param,     \
       int param_length, FDBMutationType operation_type))                                          \
    X(FDBFuture *, fdb_transaction_commit, (FDBTransaction *tr))                                   \
    X(fdb_error_t, fdb_transaction_get_committed_version,                                          \
      (FDBTransaction *tr, int64_t *out_version))                                                  \
    X(FDBFuture *, fdb_transaction_get_versionstamp, (FDBTransaction *tr))                         \
    X(void, fdb_transaction_set_read_version, (FDBTransaction *tr, int64_t version))               \
    X(FDBFuture *, fdb_transaction_get_approximate_size, (FDBTransaction *tr))                     \
    X(FDBFuture *, fdb_transaction_watch,                                                          \
      (FDBTransaction *tr, const uint8_t *key_name, int key_name_length))                          \
    X(fdb_error_t, fdb_transaction_add_conflict_range,                                             \
      (FDBTransaction *tr, const uint8_t *begin_key_name, int begin_key_name_length,               \
       const uint8_t *end_key_name, int end_key_name_length, FDBConflictRangeType type))           \
    X(fdb_error_t, fdb_future_block_until_ready, (FDBFuture *f))                                   \
    X(fdb_error_t, fdb_future_set_callback,                                                        \
      (FDBFuture *f, FDBCallback callback, void *callback_parameter))                              \
    X(void, fdb_future_cancel, (FDBFuture *f))                                                     \
    X(void, fdb_future_destroy, (FDBFuture *f))                                                    \
    X(fdb_error_t, fdb_future_get_error, (FDBFuture *f))                                           \
    X(fdb_error_t, fdb_future_get_int64, (FDBFuture *f, int64_t *out))                             \
    X(fdb_error_t, fdb_future_get_key,                                                             \
      (FDBFuture *f, const uint8_t **out_key, int *out_key_length))                                \
    X(fdb_error_t, fdb_future_get_value,                                                           \
      (FDBFuture *f, fdb_bool_t *out_present, const uint8_t **out_value,                           \
       int *out_value_length))                                                                     \
    X(fdb_error_t, fdb_future_get_keyvalue_array,                                                  \
      (FDBFuture *f, const FDBKeyValue **out_kv, int *out_count, fdb_bool_t *out_more))
/* clang-format on */

#endif /* KVQ_FDB_API_H */
