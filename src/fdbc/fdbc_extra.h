/* The functions of FoundationDB's C API that libkvq_fdb_c.so exports beyond those kvq's own fdb
 * binding loads (engine/fdb/fdb_api.h), with fdb_c.h's signatures (its enum parameters are
 * ints here, the same in the ABI). Shared by src/fdbc and tests/fdbc. */
#ifndef KVQ_FDBC_EXTRA_H
#define KVQ_FDBC_EXTRA_H

#include "engine/fdb/fdb_api.h"

/* FDBErrorPredicate (fdb_c_options.g.h). */
enum {
    FDB_ERROR_PREDICATE_RETRYABLE = 50000,
    FDB_ERROR_PREDICATE_MAYBE_COMMITTED = 50001,
    FDB_ERROR_PREDICATE_RETRYABLE_NOT_COMMITTED = 50002
};

/* More handles and result types of fdb_c.h. The tenant, result and blob-granule ones are only
 * ever passed by pointer here (tenants and blob granules are not supported), except the
 * granule reading context, passed by value, whose layout is fdb_c.h's. */
typedef struct FDB_tenant FDBTenant;
typedef struct FDB_result FDBResult;
typedef struct FDBMappedKeyValue FDBMappedKeyValue;
typedef struct FDBKeyRange FDBKeyRange;
typedef struct FDBGranuleSummary FDBGranuleSummary;
typedef struct FDBBGFileDescription FDBBGFileDescription;
typedef struct FDBBGMutation FDBBGMutation;
typedef struct FDBBGTenantPrefix FDBBGTenantPrefix;
typedef struct FDBBGEncryptionCtx FDBBGEncryptionCtx;

#pragma pack(push, 4)
typedef struct FDBKey {
    const uint8_t *key;
    int key_length;
} FDBKey;
#pragma pack(pop)

_Static_assert(sizeof(void *) != 8 || sizeof(FDBKey) == 12,
               "FDBKey must be packed to 4 bytes, as libfdb_c declares it");

typedef struct FDBReadBlobGranuleContext {
    void *userContext;
    int64_t (*start_load_f)(const char *filename, int filename_length, int64_t offset,
                            int64_t length, int64_t full_file_length, void *context);
    uint8_t *(*get_load_f)(int64_t load_id, void *context);
    void (*free_load_f)(int64_t load_id, void *context);
    fdb_bool_t debugNoMaterialize;
    int granuleParallelism;
} FDBReadBlobGranuleContext;

/* Transaction options beyond the four Int ones of fdb_api.h (fdb_c_options.g.h). */
enum {
    FDB_TR_OPTION_CAUSAL_WRITE_RISKY = 10,
    FDB_TR_OPTION_CAUSAL_READ_RISKY = 20,
    FDB_TR_OPTION_CAUSAL_READ_DISABLE = 21,
    FDB_TR_OPTION_NEXT_WRITE_NO_WRITE_CONFLICT_RANGE = 30,
    FDB_TR_OPTION_READ_YOUR_WRITES_DISABLE = 51,
    FDB_TR_OPTION_DURABILITY_DATACENTER = 110,
    FDB_TR_OPTION_DURABILITY_RISKY = 120,
    FDB_TR_OPTION_PRIORITY_SYSTEM_IMMEDIATE = 200,
    FDB_TR_OPTION_PRIORITY_BATCH = 201,
    FDB_TR_OPTION_ACCESS_SYSTEM_KEYS = 301,
    FDB_TR_OPTION_READ_SYSTEM_KEYS = 302,
    FDB_TR_OPTION_DEBUG_TRANSACTION_IDENTIFIER = 403,
    FDB_TR_OPTION_LOG_TRANSACTION = 404,
    FDB_TR_OPTION_SNAPSHOT_RYW_ENABLE = 600,
    FDB_TR_OPTION_SNAPSHOT_RYW_DISABLE = 601,
    FDB_TR_OPTION_LOCK_AWARE = 700,
    FDB_TR_OPTION_USED_DURING_COMMIT_PROTECTION_DISABLE = 701,
    FDB_TR_OPTION_READ_LOCK_AWARE = 702,
    FDB_TR_OPTION_REPORT_CONFLICTING_KEYS = 712,
    FDB_TR_OPTION_TAG = 800,
    FDB_TR_OPTION_AUTO_THROTTLE_TAG = 801,
    FDB_TR_OPTION_USE_GRV_CACHE = 1101,
    FDB_TR_OPTION_READ_PRIORITY_NORMAL = 509,
    FDB_TR_OPTION_READ_PRIORITY_LOW = 510,
    FDB_TR_OPTION_READ_PRIORITY_HIGH = 511
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
    X(void, fdb_future_release_memory, (FDBFuture *f))                                             \
    X(fdb_error_t, fdb_future_get_bool, (FDBFuture *f, fdb_bool_t *out))                           \
    X(fdb_error_t, fdb_future_get_uint64, (FDBFuture *f, uint64_t *out))                           \
    X(fdb_error_t, fdb_future_get_double, (FDBFuture *f, double *out))                             \
    X(fdb_error_t, fdb_future_get_key_array,                                                       \
      (FDBFuture *f, const FDBKey **out_key_array, int *out_count))                                \
    X(fdb_error_t, fdb_future_get_string_array,                                                    \
      (FDBFuture *f, const char ***out_strings, int *out_count))                                   \
    X(fdb_error_t, fdb_future_get_mappedkeyvalue_array,                                            \
      (FDBFuture *f, const FDBMappedKeyValue **out_kv, int *out_count, fdb_bool_t *out_more))      \
    X(fdb_error_t, fdb_future_get_keyrange_array,                                                  \
      (FDBFuture *f, const FDBKeyRange **out_ranges, int *out_count))                              \
    X(fdb_error_t, fdb_future_get_granule_summary_array,                                           \
      (FDBFuture *f, const FDBGranuleSummary **out_summaries, int *out_count))                     \
    X(fdb_error_t, fdb_future_readbg_get_descriptions,                                             \
      (FDBFuture *f, FDBBGFileDescription **out, int *desc_count))                                 \
    X(FDBResult *, fdb_readbg_parse_snapshot_file,                                                 \
      (const uint8_t *file_data, int file_len, const FDBBGTenantPrefix *tenant_prefix,             \
       const FDBBGEncryptionCtx *encryption_ctx))                                                  \
    X(FDBResult *, fdb_readbg_parse_delta_file,                                                    \
      (const uint8_t *file_data, int file_len, const FDBBGTenantPrefix *tenant_prefix,             \
       const FDBBGEncryptionCtx *encryption_ctx))                                                  \
    X(void, fdb_result_destroy, (FDBResult *r))                                                    \
    X(fdb_error_t, fdb_result_get_keyvalue_array,                                                  \
      (FDBResult *r, const FDBKeyValue **out_kv, int *out_count, fdb_bool_t *out_more))            \
    X(fdb_error_t, fdb_result_get_bg_mutations_array,                                              \
      (FDBResult *r, const FDBBGMutation **out_mutations, int *out_count))                         \
    X(fdb_error_t, fdb_add_network_thread_completion_hook,                                         \
      (void (*hook)(void *), void *hook_parameter))                                                \
    X(fdb_error_t, fdb_create_database_from_connection_string,                                     \
      (const char *connection_string, FDBDatabase **out_database))                                 \
    X(fdb_error_t, fdb_database_open_tenant,                                                       \
      (FDBDatabase *d, const uint8_t *tenant_name, int tenant_name_length, FDBTenant **out_tenant)) \
    X(FDBFuture *, fdb_database_reboot_worker,                                                     \
      (FDBDatabase *db, const uint8_t *address, int address_length, fdb_bool_t check,              \
       int duration))                                                                              \
    X(FDBFuture *, fdb_database_force_recovery_with_data_loss,                                     \
      (FDBDatabase *db, const uint8_t *dcid, int dcid_length))                                     \
    X(FDBFuture *, fdb_database_create_snapshot,                                                   \
      (FDBDatabase *db, const uint8_t *uid, int uid_length, const uint8_t *snap_command,           \
       int snap_command_length))                                                                   \
    X(double, fdb_database_get_main_thread_busyness, (FDBDatabase *db))                            \
    X(FDBFuture *, fdb_database_get_server_protocol, (FDBDatabase *db, uint64_t expected_version)) \
    X(FDBFuture *, fdb_database_purge_blob_granules,                                               \
      (FDBDatabase *db, const uint8_t *begin_key_name, int begin_key_name_length,                  \
       const uint8_t *end_key_name, int end_key_name_length, int64_t purge_version,                \
       fdb_bool_t force))                                                                          \
    X(FDBFuture *, fdb_database_wait_purge_granules_complete,                                      \
      (FDBDatabase *db, const uint8_t *purge_key_name, int purge_key_name_length))                 \
    X(FDBFuture *, fdb_database_blobbify_range,                                                    \
      (FDBDatabase *db, const uint8_t *begin_key_name, int begin_key_name_length,                  \
       const uint8_t *end_key_name, int end_key_name_length))                                      \
    X(FDBFuture *, fdb_database_blobbify_range_blocking,                                           \
      (FDBDatabase *db, const uint8_t *begin_key_name, int begin_key_name_length,                  \
       const uint8_t *end_key_name, int end_key_name_length))                                      \
    X(FDBFuture *, fdb_database_unblobbify_range,                                                  \
      (FDBDatabase *db, const uint8_t *begin_key_name, int begin_key_name_length,                  \
       const uint8_t *end_key_name, int end_key_name_length))                                      \
    X(FDBFuture *, fdb_database_list_blobbified_ranges,                                            \
      (FDBDatabase *db, const uint8_t *begin_key_name, int begin_key_name_length,                  \
       const uint8_t *end_key_name, int end_key_name_length, int range_limit))                     \
    X(FDBFuture *, fdb_database_verify_blob_range,                                                 \
      (FDBDatabase *db, const uint8_t *begin_key_name, int begin_key_name_length,                  \
       const uint8_t *end_key_name, int end_key_name_length, int64_t version))                     \
    X(FDBFuture *, fdb_database_flush_blob_range,                                                  \
      (FDBDatabase *db, const uint8_t *begin_key_name, int begin_key_name_length,                  \
       const uint8_t *end_key_name, int end_key_name_length, fdb_bool_t compact, int64_t version))  \
    X(FDBFuture *, fdb_database_get_client_status, (FDBDatabase *db))                              \
    X(fdb_error_t, fdb_tenant_create_transaction,                                                  \
      (FDBTenant *tenant, FDBTransaction **out_transaction))                                       \
    X(FDBFuture *, fdb_tenant_purge_blob_granules,                                                 \
      (FDBTenant *tenant, const uint8_t *begin_key_name, int begin_key_name_length,                \
       const uint8_t *end_key_name, int end_key_name_length, int64_t purge_version,                \
       fdb_bool_t force))                                                                          \
    X(FDBFuture *, fdb_tenant_wait_purge_granules_complete,                                        \
      (FDBTenant *tenant, const uint8_t *purge_key_name, int purge_key_name_length))               \
    X(FDBFuture *, fdb_tenant_blobbify_range,                                                      \
      (FDBTenant *tenant, const uint8_t *begin_key_name, int begin_key_name_length,                \
       const uint8_t *end_key_name, int end_key_name_length))                                      \
    X(FDBFuture *, fdb_tenant_blobbify_range_blocking,                                             \
      (FDBTenant *tenant, const uint8_t *begin_key_name, int begin_key_name_length,                \
       const uint8_t *end_key_name, int end_key_name_length))                                      \
    X(FDBFuture *, fdb_tenant_unblobbify_range,                                                    \
      (FDBTenant *tenant, const uint8_t *begin_key_name, int begin_key_name_length,                \
       const uint8_t *end_key_name, int end_key_name_length))                                      \
    X(FDBFuture *, fdb_tenant_list_blobbified_ranges,                                              \
      (FDBTenant *tenant, const uint8_t *begin_key_name, int begin_key_name_length,                \
       const uint8_t *end_key_name, int end_key_name_length, int range_limit))                     \
    X(FDBFuture *, fdb_tenant_verify_blob_range,                                                   \
      (FDBTenant *tenant, const uint8_t *begin_key_name, int begin_key_name_length,                \
       const uint8_t *end_key_name, int end_key_name_length, int64_t version))                     \
    X(FDBFuture *, fdb_tenant_flush_blob_range,                                                    \
      (FDBTenant *tenant, const uint8_t *begin_key_name, int begin_key_name_length,                \
       const uint8_t *end_key_name, int end_key_name_length, fdb_bool_t compact, int64_t version))  \
    X(FDBFuture *, fdb_tenant_get_id, (FDBTenant *tenant))                                         \
    X(void, fdb_tenant_destroy, (FDBTenant *tenant))                                               \
    X(FDBFuture *, fdb_transaction_get_addresses_for_key,                                          \
      (FDBTransaction *tr, const uint8_t *key_name, int key_name_length))                          \
    X(FDBFuture *, fdb_transaction_get_mapped_range,                                               \
      (FDBTransaction *tr, const uint8_t *begin_key_name, int begin_key_name_length,               \
       fdb_bool_t begin_or_equal, int begin_offset, const uint8_t *end_key_name,                   \
       int end_key_name_length, fdb_bool_t end_or_equal, int end_offset,                           \
       const uint8_t *mapper_name, int mapper_name_length, int limit, int target_bytes,            \
       FDBStreamingMode mode, int iteration, fdb_bool_t snapshot, fdb_bool_t reverse))             \
    X(FDBFuture *, fdb_transaction_get_tag_throttled_duration, (FDBTransaction *tr))               \
    X(FDBFuture *, fdb_transaction_get_total_cost, (FDBTransaction *tr))                           \
    X(FDBFuture *, fdb_transaction_get_estimated_range_size_bytes,                                 \
      (FDBTransaction *tr, const uint8_t *begin_key_name, int begin_key_name_length,               \
       const uint8_t *end_key_name, int end_key_name_length))                                      \
    X(FDBFuture *, fdb_transaction_get_range_split_points,                                         \
      (FDBTransaction *tr, const uint8_t *begin_key_name, int begin_key_name_length,               \
       const uint8_t *end_key_name, int end_key_name_length, int64_t chunk_size))                  \
    X(FDBFuture *, fdb_transaction_get_blob_granule_ranges,                                        \
      (FDBTransaction *tr, const uint8_t *begin_key_name, int begin_key_name_length,               \
       const uint8_t *end_key_name, int end_key_name_length, int range_limit))                     \
    X(FDBResult *, fdb_transaction_read_blob_granules,                                             \
      (FDBTransaction *tr, const uint8_t *begin_key_name, int begin_key_name_length,               \
       const uint8_t *end_key_name, int end_key_name_length, int64_t begin_version,                \
       int64_t read_version, FDBReadBlobGranuleContext granule_context))                           \
    X(FDBFuture *, fdb_transaction_summarize_blob_granules,                                        \
      (FDBTransaction *tr, const uint8_t *begin_key_name, int begin_key_name_length,               \
       const uint8_t *end_key_name, int end_key_name_length, int64_t summary_version,              \
       int range_limit))                                                                           \
    X(FDBFuture *, fdb_transaction_read_blob_granules_description,                                 \
      (FDBTransaction *tr, const uint8_t *begin_key_name, int begin_key_name_length,               \
       const uint8_t *end_key_name, int end_key_name_length, int64_t begin_version,                \
       int64_t read_version, int64_t *read_version_out))
/* clang-format on */

#define KVQ_FDBC_EXTRA_PROTOTYPE(ret, name, params) ret name params;
KVQ_FDBC_EXTRA_FUNCTIONS(KVQ_FDBC_EXTRA_PROTOTYPE)
#undef KVQ_FDBC_EXTRA_PROTOTYPE

#endif /* KVQ_FDBC_EXTRA_H */
