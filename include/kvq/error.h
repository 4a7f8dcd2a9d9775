/**
 * @file kvq/error.h
 * @brief Error codes, their names and messages.
 *
 * Every kvq function that can fail returns 0 on success or one of the codes below. Codes that
 * FoundationDB also has keep FoundationDB's number and name, so that both engines report the same
 * code and FoundationDB users recognise it. kvq's own conditions use the 9000 band.
 */
#ifndef KVQ_ERROR_H
#define KVQ_ERROR_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One list generates the enum, kvq_errname and kvq_strerror, so they cannot drift apart.
 * X(SUFFIX, number, name, message) */
#define KVQ_ERROR_MAP(X)                                                                           \
    X(TIMED_OUT, 1004, "timed_out", "operation timed out")                                      \
    X(TRANSACTION_TOO_OLD, 1007, "transaction_too_old",                                            \
      "transaction is too old to perform reads or be committed")                                  \
    X(FUTURE_VERSION, 1009, "future_version", "request for future version")                     \
    X(NOT_COMMITTED, 1020, "not_committed",                                                        \
      "transaction not committed due to conflict with another transaction")                       \
    X(COMMIT_UNKNOWN_RESULT, 1021, "commit_unknown_result",                                        \
      "transaction may or may not have committed")                                                 \
    X(TRANSACTION_CANCELLED, 1025, "transaction_cancelled", "operation aborted because the "     \
                                                            "transaction was cancelled")          \
    X(WATCH_CANCELLED, 1029, "watch_cancelled", "operation aborted because the watch was cancelled") \
    X(TRANSACTION_TIMED_OUT, 1031, "transaction_timed_out",                                        \
      "operation aborted because the transaction timed out")                                       \
    X(TOO_MANY_WATCHES, 1032, "too_many_watches", "too many watches are currently set")         \
    X(WATCHES_DISABLED, 1034, "watches_disabled", "watches are disabled")                       \
    X(ACCESSED_UNREADABLE, 1036, "accessed_unreadable",                                            \
      "read or wrote an unreadable key (one written with a versionstamp in this transaction)")    \
    X(PROCESS_BEHIND, 1037, "process_behind", "storage process is behind")                      \
    X(DATABASE_LOCKED, 1038, "database_locked", "database is locked")                           \
    X(CLUSTER_VERSION_CHANGED, 1039, "cluster_version_changed",                                    \
      "the protocol version of the cluster has changed")                                           \
    X(OPERATION_CANCELLED, 1101, "operation_cancelled", "asynchronous operation cancelled")     \
    X(PROXY_MEMORY_LIMIT_EXCEEDED, 1042, "commit_proxy_memory_limit_exceeded",                     \
      "the cluster's commit proxies are out of memory")                                           \
    X(BATCH_TRANSACTION_THROTTLED, 1051, "batch_transaction_throttled",                            \
      "batch priority transaction throttled")                                                      \
    X(GRV_PROXY_MEMORY_LIMIT_EXCEEDED, 1078, "grv_proxy_memory_limit_exceeded",                    \
      "the cluster's read version proxies are out of memory")                                     \
    X(TAG_THROTTLED, 1213, "tag_throttled", "transaction tag is being throttled")               \
    X(PROXY_TAG_THROTTLED, 1223, "proxy_tag_throttled",                                            \
      "exceeded the longest time a proxy may throttle a transaction's tag")                       \
    X(TRANSACTION_THROTTLED_HOT_SHARD, 1235, "transaction_throttled_hot_shard",                    \
      "transaction throttled because it writes to a hot shard")                                    \
    X(TRANSACTION_REJECTED_RANGE_LOCKED, 1242, "transaction_rejected_range_locked",                \
      "transaction rejected because a range is locked")                                            \
    X(CLIENT_INVALID_OPERATION, 2000, "client_invalid_operation", "invalid API call")           \
    X(KEY_OUTSIDE_LEGAL_RANGE, 2004, "key_outside_legal_range",                                    \
      "key outside legal range (keys starting with 0xFF are reserved)")                            \
    X(INVERTED_RANGE, 2005, "inverted_range", "range begin key is larger than end key")         \
    X(INVALID_OPTION_VALUE, 2006, "invalid_option_value", "option set with an invalid value")   \
    X(INVALID_OPTION, 2007, "invalid_option", "option not valid in this context")               \
    X(NETWORK_NOT_SETUP, 2008, "network_not_setup",                                                \
      "the client network must be set up before this operation")                                   \
    X(NETWORK_ALREADY_SETUP, 2009, "network_already_setup", "the client network is already set up") \
    X(READ_VERSION_ALREADY_SET, 2010, "read_version_already_set",                                  \
      "the transaction already has a read version")                                            \
    X(VERSION_INVALID, 2011, "version_invalid", "the version is not valid")                     \
    X(USED_DURING_COMMIT, 2017, "used_during_commit",                                              \
      "operation issued while a commit was outstanding")                                           \
    X(INVALID_MUTATION_TYPE, 2018, "invalid_mutation_type", "unrecognized atomic mutation type") \
    X(NO_COMMIT_VERSION, 2021, "no_commit_version",                                                \
      "transaction has no commit version (it was read-only or not committed)")                    \
    X(TRANSACTION_TOO_LARGE, 2101, "transaction_too_large",                                        \
      "transaction exceeds the 10,000,000 byte limit")                                             \
    X(KEY_TOO_LARGE, 2102, "key_too_large", "key is longer than 10,000 bytes")                  \
    X(VALUE_TOO_LARGE, 2103, "value_too_large", "value is longer than 100,000 bytes")           \
    X(CONNECTION_STRING_INVALID, 2104, "connection_string_invalid",                                \
      "connection string or database URL is invalid")                                              \
    X(UNSUPPORTED_OPERATION, 2108, "unsupported_operation", "unsupported operation")            \
    X(SPECIAL_KEYS_NO_MODULE_FOUND, 2113, "special_keys_no_module_found",                          \
      "the special key range read belongs to no module")                                       \
    X(SPECIAL_KEYS_WRITE_DISABLED, 2114, "special_keys_write_disabled",                            \
      "writes to special keys are disabled")                                                   \
    X(TENANTS_DISABLED, 2136, "tenants_disabled", "tenants are disabled on this database")       \
    X(UNKNOWN_TENANT, 2137, "unknown_tenant", "the tenant was not found (retryable in 7.1)")    \
    X(API_VERSION_UNSET, 2200, "api_version_unset", "the API version is not set")              \
    X(API_VERSION_ALREADY_SET, 2201, "api_version_already_set", "the API version may be set only once") \
    X(API_VERSION_INVALID, 2202, "api_version_invalid", "API version is not valid")             \
    X(API_VERSION_NOT_SUPPORTED, 2203, "api_version_not_supported",                                \
      "API version not supported by the installed client library")                               \
    X(UNKNOWN_ERROR, 4000, "unknown_error", "an unknown error occurred")                        \
    X(INTERNAL_ERROR, 4100, "internal_error", "an internal error occurred")                     \
    X(INVAL, 9001, "invalid_argument", "invalid argument")                                      \
    X(NOMEM, 9002, "out_of_memory", "out of memory")                                            \
    X(NOTFOUND, 9003, "not_found", "not found (or the queue is empty)")                         \
    X(DAMAGED, 9004, "database_damaged", "the database is damaged")                             \
    X(IO, 9005, "io_error", "input/output error")                                               \
    X(NOENGINE, 9006, "engine_unavailable", "the requested engine is not available")            \
    X(USER, 9007, "user_error", "the caller's function reported a failure")                     \
    X(NOBUFS, 9008, "buffer_too_small", "the output buffer is too small")                       \
    X(TUPLE, 9009, "invalid_tuple", "malformed tuple encoding")                                 \
    X(RANGE, 9010, "out_of_range", "value is out of the representable range")                   \
    X(EXISTS, 9011, "already_exists", "already exists")                                         \
    X(WRONGTYPE, 9012, "wrong_type", "the object has another type")                             \
    X(NOSPC, 9013, "disk_full", "no space left on the device")                                  \
    X(PERM, 9014, "permission_denied", "permission denied")                                     \
    X(BUSY, 9015, "busy", "the resource is busy")                                               \
    X(UNSUPPORTED, 9016, "unsupported", "operation not supported by this engine")            \
    X(LEASE_EXPIRED, 9017, "lease_expired",                                                        \
      "the lease has expired; the item was or will be delivered again")                          \
    X(LEASE_SETTLED, 9018, "lease_settled", "the lease was already ended by an ack or a nack")

/** Error codes. 0 is success; every error is a positive number. */
typedef enum kvq_error {
    KVQ_OK = 0,
#define KVQ__ERRDEF(suffix, num, name, msg) KVQ_E##suffix = num,
    KVQ_ERROR_MAP(KVQ__ERRDEF)
#undef KVQ__ERRDEF
} kvq_error;

/**
 * Returns a one-line message for an error code. Never NULL; the string is static, never freed,
 * and safe to use from any thread. An unknown code gives "unknown error code".
 */
KVQ_API KVQ_NODISCARD const char *kvq_strerror(int err);

/** Returns the short name of an error code ("not_committed"), or "unknown" for an unknown code. */
KVQ_API KVQ_NODISCARD const char *kvq_errname(int err);

/**
 * Returns the detail recorded by the last failing kvq call on this thread: a one-line message
 * that names what went wrong (for example which byte of a tuple is malformed, or the SQLite
 * message behind an I/O error). Valid until the next kvq call on this thread. Never NULL: an
 * empty string when nothing was recorded.
 */
KVQ_API KVQ_NODISCARD const char *kvq_last_error(void);

/** The code the last failing kvq call on this thread recorded with its detail, or 0. */
KVQ_API KVQ_NODISCARD int kvq_last_error_code(void);

/**
 * Retryable: the transaction may be retried after kvq_txn_on_error (1007, 1009, 1020, 1021,
 * 1037, 1038, 1039, 1042, 1051, 1078, 1213, 1223, 1235, 1242, 2137): the union of what
 * FoundationDB's predicates (7.1 to 7.4) and its on_error retry.
 */
KVQ_API KVQ_NODISCARD bool kvq_error_retryable(int err);

/** Maybe committed: the transaction may have committed (1021, 1039). A 1031 returned by
 * kvq_txn_commit may also have committed on the fdb engine (the timeout passed with the commit
 * in flight); this predicate cannot tell where a 1031 came from, so check it yourself. */
KVQ_API KVQ_NODISCARD bool kvq_error_maybe_committed(int err);

/** Retryable and certainly not committed (the retryable codes but 1021 and 1039). */
KVQ_API KVQ_NODISCARD bool kvq_error_retryable_not_committed(int err);

#ifdef __cplusplus
}
#endif

#endif /* KVQ_ERROR_H */
