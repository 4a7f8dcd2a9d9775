/* libkvq_fdb_c.so: options of the network, databases and transactions: which are known, the
 * values each takes (checked as libfdb_c checks them), and what they change. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fdbc/fdbc_internal.h"

/* Option values ------------------------------------------------------------------------------
 *
 * An option's value is present when the pointer is not NULL (an empty value is present, and
 * empty). Each option says what it takes, as FoundationDB's client checks it:
 * invalid_option_value (2006) for a missing value an option needs, or a non-empty one given to
 * an option that takes none. */

/* An option that takes no value: none, or an empty one. */
static fdb_error_t no_param(const uint8_t *value, int value_length)
{
    return value != NULL && value_length > 0 ? FDB_ERR_INVALID_OPTION_VALUE : 0;
}

/* An option that needs a value (of `min` to `max` bytes). */
static fdb_error_t str_param(const uint8_t *value, int value_length, int min, int max)
{
    return value == NULL || value_length < min || value_length > max
               ? FDB_ERR_INVALID_OPTION_VALUE
               : 0;
}

/* An Int option parameter: 8 bytes, little-endian, from `min` to `max`. */
static fdb_error_t
int_param(const uint8_t *value, int value_length, int64_t min, int64_t max, int64_t *out)
{
    if (value == NULL || value_length != 8)
        return FDB_ERR_INVALID_OPTION_VALUE;
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u |= (uint64_t)value[i] << (8 * i);
    if ((int64_t)u < min || (int64_t)u > max)
        return FDB_ERR_INVALID_OPTION_VALUE;
    if (out != NULL)
        *out = (int64_t)u;
    return 0;
}

/* The value of a transaction option (as given to a transaction, or to a database as the default
 * of its transactions): 0 if it is one the option takes. */
static fdb_error_t tr_option_value(int option, const uint8_t *value, int value_length)
{
    switch (option) {
    case 10: case 20: case 23: case 30: case 40: case 50: case 51: case 52: case 200:
    case 201: case 300: case 301: case 302: case 303: case 400: case 404: case 406: case 505:
    case 600: case 601: case 700: case 701: case 702: case 710: case 711: case 712: case 713:
    case 714: case 1000: case 1100: case 1101: case 1102:
        return no_param(value, value_length);
    case 402: /* transaction_logging_enable */
    case 403: /* debug_transaction_identifier: 1 to 100 bytes */
        return str_param(value, value_length, 1, 100);
    case 405: { /* transaction_logging_max_field_length: -1 (none) or positive */
        int64_t v = 0;
        fdb_error_t err = int_param(value, value_length, -1, INT32_MAX, &v);
        return err != 0 || v != 0 ? err : FDB_ERR_INVALID_OPTION_VALUE;
    }
    case FDB_TR_OPTION_TIMEOUT:
        return int_param(value, value_length, 0, INT32_MAX, NULL);
    case FDB_TR_OPTION_RETRY_LIMIT:
        return int_param(value, value_length, -1, INT32_MAX, NULL);
    case FDB_TR_OPTION_MAX_RETRY_DELAY:
        return int_param(value, value_length, 0, INT32_MAX, NULL);
    case FDB_TR_OPTION_SIZE_LIMIT:
        return int_param(value, value_length, 32, KVQ_MAX_TXN_SIZE, NULL);
    case 504: /* idempotency_id: 16 to 255 bytes, else invalid_option */
        if (value == NULL)
            return FDB_ERR_INVALID_OPTION_VALUE;
        return value_length >= 16 && value_length < 256 ? 0 : FDB_ERR_INVALID_OPTION;
    case 800: /* tag */
    case 801: /* auto_throttle_tag */
        return str_param(value, value_length, 0, INT32_MAX);
    case 900: /* span_parent: a serialized span context of 33 bytes */
        return str_param(value, value_length, 33, 33);
    default: /* the others take a value or not, as the caller likes */
        return 0;
    }
}

/* Applies one of the four Int transaction options (timeout, retry limit, max retry delay, size
 * limit) with its value. */
static fdb_error_t set_int_option(FDBTransaction *tr, FDBTransactionOption option, int64_t v)
{
    if (option == FDB_TR_OPTION_RETRY_LIMIT)
        return kvq_txn_set_option(tr->kt, KVQ_TXN_RETRY_LIMIT, v);
    if (option == FDB_TR_OPTION_MAX_RETRY_DELAY)
        return kvq_txn_set_option(tr->kt, KVQ_TXN_MAX_RETRY_DELAY_MS, v);
    if (option == FDB_TR_OPTION_SIZE_LIMIT)
        return kvq_txn_set_option(tr->kt, KVQ_TXN_SIZE_LIMIT, v);
    /* Counted from the transaction's start (its creation or reset), as libfdb_c counts it. A
     * timeout that has fired stays fired. */
    kvq__fdbc_tr_timeout_check(tr);
    fdb_error_t err = kvq_txn_set_option(tr->kt, KVQ_TXN_TIMEOUT_MS, v);
    if (err == 0)
        tr->timeout_ms = v;
    return err;
}

/* Gives a transaction the database's transaction options (fdb_database_set_option), as it is
 * created and each time it is reset (`all`), and after a retry (not `all`): a retry keeps the
 * timeout, retry limit and max retry delay the transaction had (FoundationDB's persistent
 * options, from API 610) but not its size limit or snapshot read-your-writes choice, which go
 * back to the database's. The transaction may override them. */
int kvq__fdbc_db_defaults(FDBTransaction *tr, int all)
{
    FDBDatabase *d = tr->db;
    pthread_mutex_lock(&d->mu);
    int64_t defaults[4];
    memcpy(defaults, d->tr_defaults, sizeof(defaults));
    unsigned has = d->tr_has_default;
    int snapshot_ryw = d->snapshot_ryw;
    pthread_mutex_unlock(&d->mu);
    int rc = 0;
    tr->snapshot_no_ryw = 0;
    if (snapshot_ryw != 0) {
        rc = kvq_txn_set_option(tr->kt, (kvq_txn_option)snapshot_ryw, 0);
        tr->snapshot_no_ryw = rc == 0 && snapshot_ryw == FDB_TR_OPTION_SNAPSHOT_RYW_DISABLE;
    }
    for (int i = all ? 0 : 3; i < 4 && rc == 0; i++)
        if (has & (1u << i))
            rc = set_int_option(tr, (FDBTransactionOption)(FDB_TR_OPTION_TIMEOUT + i),
                                defaults[i]);
    return rc;
}

/* Whether libfdb_c (7.1 under API 710, 7.3 from 730) knows a transaction option: 1 if it does
 * and kvq honours it or accepts it without effect, 2 if kvq cannot honour it, 0 if unknown. */
static int tr_option_known(int option)
{
    switch (option) {
    case FDB_TR_OPTION_TIMEOUT:
    case FDB_TR_OPTION_RETRY_LIMIT:
    case FDB_TR_OPTION_MAX_RETRY_DELAY:
    case FDB_TR_OPTION_SIZE_LIMIT:
    case FDB_TR_OPTION_NEXT_WRITE_NO_WRITE_CONFLICT_RANGE:
    case FDB_TR_OPTION_READ_YOUR_WRITES_DISABLE:
    case FDB_TR_OPTION_ACCESS_SYSTEM_KEYS:
    case FDB_TR_OPTION_READ_SYSTEM_KEYS:
    case FDB_TR_OPTION_SNAPSHOT_RYW_ENABLE:
    case FDB_TR_OPTION_SNAPSHOT_RYW_DISABLE:
    /* Without a local meaning: causality across proxies, durability across datacenters,
     * priorities, tags, locks, logging, the read-version cache, port numbers in addresses,
     * proxies, read-ahead, raw access (there are no tenants), tracing, special-key-space
     * relaxation, clear cost estimates; and the hidden ones. */
    case FDB_TR_OPTION_CAUSAL_WRITE_RISKY:
    case FDB_TR_OPTION_CAUSAL_READ_RISKY:
    case FDB_TR_OPTION_CAUSAL_READ_DISABLE:
    case FDB_TR_OPTION_DURABILITY_DATACENTER:
    case FDB_TR_OPTION_DURABILITY_RISKY:
    case FDB_TR_OPTION_PRIORITY_SYSTEM_IMMEDIATE:
    case FDB_TR_OPTION_PRIORITY_BATCH:
    case FDB_TR_OPTION_DEBUG_TRANSACTION_IDENTIFIER:
    case FDB_TR_OPTION_LOG_TRANSACTION:
    case FDB_TR_OPTION_LOCK_AWARE:
    case FDB_TR_OPTION_USED_DURING_COMMIT_PROTECTION_DISABLE:
    case FDB_TR_OPTION_READ_LOCK_AWARE:
    case FDB_TR_OPTION_REPORT_CONFLICTING_KEYS:
    case FDB_TR_OPTION_TAG:
    case FDB_TR_OPTION_AUTO_THROTTLE_TAG:
    case FDB_TR_OPTION_USE_GRV_CACHE:
    case 23:   /* include_port_in_address */
    case 40:   /* commit_on_first_proxy */
    case 50:   /* check_writes_enable */
    case 52:   /* read_ahead_disable */
    case 130:  /* durability_dev_null_is_web_scale */
    case 303:  /* raw_access */
    case 400:  /* debug_dump */
    case 401:  /* debug_retry_logging */
    case 402:  /* transaction_logging_enable */
    case 405:  /* transaction_logging_max_field_length */
    case 406:  /* server_request_tracing */
    case 710:  /* first_in_batch */
    case 711:  /* use_provisional_proxies */
    case 713:  /* special_key_space_relaxed */
    case 900:  /* span_parent */
    case 1000: /* expensive_clear_cost_estimation_enable */
    case 1102: /* skip_grv_cache */
        return 1;
    case 714: /* special_key_space_enable_writes: the tenant map's clears (special_write) */
        return 1;
    case 300:  /* initialize_new_database */
    case 1100: /* bypass_unreadable */
        return 2;
    case 304:  /* bypass_storage_quota */
    case 504:  /* idempotency_id */
    case 505:  /* automatic_idempotency */
    case 507:  /* read_server_side_cache_enable */
    case 508:  /* read_server_side_cache_disable */
    case 2000: /* authorization_token */
    case FDB_TR_OPTION_READ_PRIORITY_NORMAL:
    case FDB_TR_OPTION_READ_PRIORITY_LOW:
    case FDB_TR_OPTION_READ_PRIORITY_HIGH: {
        pthread_mutex_lock(&kvq__fdbc_net.mu);
        int api = kvq__fdbc_net.api;
        pthread_mutex_unlock(&kvq__fdbc_net.mu);
        return api >= 730;
    }
    default:
        return 0;
    }
}

/* Transaction options: those with a local meaning go to kvq under the same numbers; those that
 * concern a cluster have nothing to change on one machine and are accepted without effect (their
 * values checked all the same). Unknown ones, and the few kvq cannot honour, are refused with
 * invalid_option (2007). */
/* Applies a known transaction option whose value has been checked. */
static fdb_error_t tr_option_apply(FDBTransaction *tr,
                                   FDBTransactionOption option,
                                   const uint8_t *value,
                                   int value_length)
{
    int rc = 0;
    switch ((int)option) {
    case FDB_TR_OPTION_TIMEOUT:
    case FDB_TR_OPTION_RETRY_LIMIT:
    case FDB_TR_OPTION_MAX_RETRY_DELAY:
    case FDB_TR_OPTION_SIZE_LIMIT: {
        int64_t v = 0;
        (void)int_param(value, value_length, INT64_MIN, INT64_MAX, &v);
        return set_int_option(tr, option, v);
    }
    case FDB_TR_OPTION_ACCESS_SYSTEM_KEYS:
    case FDB_TR_OPTION_READ_SYSTEM_KEYS:
        rc = kvq_txn_set_option(tr->kt, (kvq_txn_option)option, 0);
        if (rc == 0)
            tr->system_keys = 1;
        return rc;
    case FDB_TR_OPTION_SNAPSHOT_RYW_ENABLE:
    case FDB_TR_OPTION_SNAPSHOT_RYW_DISABLE:
        rc = kvq_txn_set_option(tr->kt, (kvq_txn_option)option, 0);
        if (rc == 0)
            tr->snapshot_no_ryw = (int)option == FDB_TR_OPTION_SNAPSHOT_RYW_DISABLE;
        return rc;
    case FDB_TR_OPTION_NEXT_WRITE_NO_WRITE_CONFLICT_RANGE:
    case FDB_TR_OPTION_READ_YOUR_WRITES_DISABLE:
        return kvq_txn_set_option(tr->kt, (kvq_txn_option)option, 0);
    case 714: /* special_key_space_enable_writes */
        tr->special_writes = 1;
        return 0;
    default:
        return 0;
    }
}

fdb_error_t kvq__fdbc_tr_set_option(FDBTransaction *tr,
                                    FDBTransactionOption option,
                                    const uint8_t *value,
                                    int value_length)
{
    if (value_length < 0)
        return FDB_ERR_INVALID_OPTION_VALUE;
    int known = tr_option_known((int)option);
    if (known != 1) {
        kvq__fdbc_complain("transaction option %d is not supported on a kvq directory",
                           (int)option);
        return FDB_ERR_INVALID_OPTION;
    }
    /* Only an unknown option is refused by the call itself. As with libfdb_c, which hands a
     * known option to the transaction on its network thread, any other error (a bad value, an
     * option too late) is the transaction's deferred error: the next read or the commit
     * returns it. */
    fdb_error_t err = tr_option_value((int)option, value, value_length);
    if (err == 0)
        err = tr_option_apply(tr, option, value, value_length);
    if (err != 0 && tr->deferred == 0)
        tr->deferred = err;
    return 0;
}

/* Whether `value` (of `len` bytes) is one of the NULL-terminated `words`. */
static int one_of(const uint8_t *value, int len, const char *const *words)
{
    for (; *words != NULL; words++)
        if (strlen(*words) == (size_t)len && memcmp(value, *words, (size_t)len) == 0)
            return 1;
    return 0;
}

/* A trace file identifier: at most 50 letters, digits and underscores. */
static int identifier_ok(const uint8_t *value, int len)
{
    if (len > 50)
        return 0;
    for (int i = 0; i < len; i++) {
        uint8_t c = value[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_'))
            return 0;
    }
    return 1;
}

/* The multi-version client's switches, which exclude one another and must come before
 * fdb_setup_network. */
static struct {
    int multi_version_disabled; /* disable_multi_version_client_api */
    int local_client_disabled;  /* disable_local_client */
    int bypass_disabled;        /* disable_client_bypass */
} mv;

/* What the option groups below return for an option that is not theirs (or not of this API
 * version): no fdb_error_t is negative. */
#define NOT_THIS_GROUP (-1)

/* The options of tracing, knobs, buggify and TLS: accepted without effect at any time, their
 * values checked. */
static fdb_error_t trace_option(int option, const uint8_t *value, int value_length, int api)
{
    static const char *const formats[] = { "xml", "json", NULL };
    static const char *const clocks[] = { "now", "realtime", NULL };
    static const char *const tracers[] = { "none", "disabled", "logfile", "file",
                                           "log_file", "network_lossy", NULL };
    switch (option) {
    case 10: /* local_address */
    case 20: /* cluster_file */
    case 30: /* trace_enable: a directory, or none */
    case 33: /* trace_log_group */
    case 48: /* buggify_enable */
    case 49: /* buggify_disable */
    case 50: /* buggify_section_activated_probability */
    case 51: /* buggify_section_fired_probability */
    case 80: /* client_buggify_enable */
    case 81: /* client_buggify_disable */
    case 1002: /* external_client_transport_id */
        return 0;
    case 31: /* trace_roll_size */
    case 32: /* trace_max_logs_size */
        return int_param(value, value_length, 0, INT64_MAX, NULL);
    case 82: /* client_buggify_section_activated_probability */
    case 83: /* client_buggify_section_fired_probability */
        return int_param(value, value_length, 0, 100, NULL);
    case 34: /* trace_format */
        return value != NULL && one_of(value, value_length, formats)
                   ? 0
                   : FDB_ERR_INVALID_OPTION_VALUE;
    case 35: /* trace_clock_source */
        return value != NULL && one_of(value, value_length, clocks)
                   ? 0
                   : FDB_ERR_INVALID_OPTION_VALUE;
    case 90: /* distributed_client_tracer */
        return value != NULL && one_of(value, value_length, tracers)
                   ? 0
                   : FDB_ERR_INVALID_OPTION_VALUE;
    case 36: /* trace_file_identifier */
        return value != NULL && identifier_ok(value, value_length)
                   ? 0
                   : FDB_ERR_INVALID_OPTION_VALUE;
    case 40: /* knob: name=value (unknown names are ignored) */
        return value != NULL && memchr(value, '=', (size_t)value_length) != NULL
                   ? 0
                   : FDB_ERR_INVALID_OPTION_VALUE;
    case 39: /* trace_partial_file_suffix */
    case 41: /* TLS_plugin */
    case 42: /* TLS_cert_bytes */
    case 43: /* TLS_cert_path */
    case 45: /* TLS_key_bytes */
    case 46: /* TLS_key_path */
    case 47: /* TLS_verify_peers */
    case 52: /* TLS_ca_bytes */
    case 53: /* TLS_ca_path */
    case 54: /* TLS_password */
        return str_param(value, value_length, 0, INT32_MAX);
    case 70: /* disable_client_statistics_logging */
    case 71: /* enable_slow_task_profiling, enable_run_loop_profiling */
        return no_param(value, value_length);
    case 37: /* trace_share_among_client_threads (730) */
        return api < 730 ? NOT_THIS_GROUP : no_param(value, value_length);
    case 38: /* trace_initialize_on_setup (730) */
        return api < 730 ? NOT_THIS_GROUP : 0;
    default:
        return NOT_THIS_GROUP;
    }
}

/* external_client_library, future_version_client_library: the library must exist
 * (file_not_found, 1511), though kvq never loads it. */
static fdb_error_t client_library_option(const uint8_t *value, int value_length, int setup)
{
    fdb_error_t err = str_param(value, value_length, 1, INT32_MAX);
    if (err != 0)
        return err;
    char *path = malloc((size_t)value_length + 1);
    if (path == NULL)
        return FDB_ERR_INTERNAL_ERROR;
    memcpy(path, value, (size_t)value_length);
    path[value_length] = 0;
    struct stat st;
    int found = stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
    free(path);
    return !found ? FDB_ERR_FILE_NOT_FOUND : setup ? FDB_ERR_INVALID_OPTION : 0;
}

/* The multi-version client's exclusive switches. */
enum { MV_MULTI_VERSION, MV_LOCAL_CLIENT, MV_BYPASS };

/* Sets one of the multi-version client's switches under the network's lock: refused once the
 * network is set up (with after_setup) or when a switch it excludes is on. */
static fdb_error_t mv_switch(int which, fdb_error_t after_setup)
{
    fdb_error_t err = 0;
    pthread_mutex_lock(&kvq__fdbc_net.mu);
    int excluded = which == MV_MULTI_VERSION ? mv.local_client_disabled || mv.bypass_disabled
                                             : mv.multi_version_disabled;
    if (kvq__fdbc_net.setup)
        err = after_setup;
    else if (excluded)
        err = FDB_ERR_INVALID_OPTION;
    else if (which == MV_MULTI_VERSION)
        mv.multi_version_disabled = 1;
    else if (which == MV_LOCAL_CLIENT)
        mv.local_client_disabled = 1;
    else
        mv.bypass_disabled = 1;
    pthread_mutex_unlock(&kvq__fdbc_net.mu);
    return err;
}

/* The options of the multi-version client (which client libraries, how many threads, where
 * callbacks run): most are refused once the network is set up. */
static fdb_error_t
client_option(int option, const uint8_t *value, int value_length, int api, int setup)
{
    fdb_error_t err;
    switch (option) {
    case 61: /* callbacks_on_external_threads */
        err = no_param(value, value_length);
        return err != 0 ? err : setup ? FDB_ERR_INVALID_OPTION : 0;
    case 67: /* retain_client_library_copies */
        return no_param(value, value_length);
    case 60: /* disable_multi_version_client_api */
        err = no_param(value, value_length);
        if (err != 0)
            return err;
        return mv_switch(MV_MULTI_VERSION, FDB_ERR_INVALID_OPTION);
    case 64: /* disable_local_client */
        err = no_param(value, value_length);
        if (err != 0)
            return err;
        return mv_switch(MV_LOCAL_CLIENT, FDB_ERR_INVALID_OPTION);
    case 62: /* external_client_library */
        return client_library_option(value, value_length, setup);
    case 66: /* future_version_client_library (730) */
        return api < 730 ? NOT_THIS_GROUP : client_library_option(value, value_length, setup);
    case 63: /* external_client_directory */
        err = str_param(value, value_length, 1, INT32_MAX);
        return err != 0 ? err : setup ? FDB_ERR_INVALID_OPTION : 0;
    case 65: /* client_threads_per_version */
        err = str_param(value, value_length, 1, INT32_MAX);
        if (err == 0 && setup)
            return FDB_ERR_INVALID_OPTION;
        return err != 0 ? err : int_param(value, value_length, 1, 1024, NULL);
    case 1000: /* supported_client_versions: only after setup, with a value */
        return value != NULL && setup ? 0 : FDB_ERR_INTERNAL_ERROR;
    case 1001: /* external_client: only before setup, without a value */
        return value == NULL && !setup ? 0 : FDB_ERR_INTERNAL_ERROR;
    case 68: /* ignore_external_client_failures (730) */
    case 69: /* fail_incompatible_client (730) */
        return api < 730 ? NOT_THIS_GROUP : no_param(value, value_length);
    case 91: /* client_tmp_dir (730) */
        return api < 730 ? NOT_THIS_GROUP : str_param(value, value_length, 1, INT32_MAX);
    case 72: /* disable_client_bypass (730) */
        if (api < 730)
            return NOT_THIS_GROUP;
        return mv_switch(MV_BYPASS, FDB_ERR_INTERNAL_ERROR);
    default:
        return NOT_THIS_GROUP;
    }
}

/* Network options: the client-side ones (tracing, TLS, knobs, the multi-version client, client
 * threads, a temporary directory) mean nothing for a local directory; they are accepted and have
 * no effect, their values checked as FoundationDB's client checks them. Those that shape the
 * multi-version client (which client libraries, how many threads, where callbacks run) are
 * refused once the network is set up, with invalid_option (2007); the others may come later
 * too. Unknown options are refused with invalid_option. */
fdb_error_t fdb_network_set_option(int option, const uint8_t *value, int value_length)
{
    if (value_length < 0)
        return FDB_ERR_INVALID_OPTION_VALUE;
    pthread_mutex_lock(&kvq__fdbc_net.mu);
    int api = kvq__fdbc_net.api;
    int setup = kvq__fdbc_net.setup;
    pthread_mutex_unlock(&kvq__fdbc_net.mu);
    if (api == 0)
        return FDB_ERR_API_VERSION_UNSET;
    fdb_error_t err = trace_option(option, value, value_length, api);
    if (err == NOT_THIS_GROUP)
        err = client_option(option, value, value_length, api, setup);
    if (err != NOT_THIS_GROUP)
        return err;
    kvq__fdbc_complain("network option %d is not supported on a kvq directory", option);
    return FDB_ERR_INVALID_OPTION;
}

/* Database options: the transaction defaults (timeout, retry limit, max retry delay, size
 * limit) go to every transaction created afterwards, and snapshot_ryw_enable/_disable too. The
 * others are accepted without effect (kvq's own watch limit applies; local reads are always
 * causal and never unreadable). Values are checked as FoundationDB's client checks them; a
 * default for transactions as the transaction option it stands for. */
fdb_error_t fdb_database_set_option(FDBDatabase *d, int option, const uint8_t *value,
                                    int value_length)
{
    if (d == NULL)
        kvq__fdbc_misuse("fdb_database_set_option on a NULL database");
    if (value_length < 0)
        return FDB_ERR_INVALID_OPTION_VALUE;
    pthread_mutex_lock(&kvq__fdbc_net.mu);
    int api = kvq__fdbc_net.api;
    pthread_mutex_unlock(&kvq__fdbc_net.mu);
    switch (option) {
    case 10: /* location_cache_size */
        return int_param(value, value_length, 0, INT32_MAX, NULL);
    case 20: /* max_watches */
        return int_param(value, value_length, 0, 1000000, NULL);
    case 900: /* test_causal_read_risky: a percentage */
        return int_param(value, value_length, 0, 100, NULL);
    case 21:  /* machine_id */
    case 22:  /* datacenter_id */
        return 0;
    case 800: /* use_config_database */
        return no_param(value, value_length);
    case 405: /* transaction_logging_max_field_length */
        return tr_option_value(405, value, value_length);
    case 504: /* transaction_causal_read_risky */
    case 505: /* transaction_include_port_in_address */
    case 700: /* transaction_bypass_unreadable */
        return no_param(value, value_length);
    case 506: /* transaction_automatic_idempotency (730) */
    case 701: /* transaction_used_during_commit_protection_disable */
    case 702: /* transaction_report_conflicting_keys */
        if (api < 730)
            return FDB_ERR_INVALID_OPTION;
        return no_param(value, value_length);
    case 26: /* snapshot_ryw_enable: the default of new transactions */
    case 27: /* snapshot_ryw_disable */ {
        fdb_error_t err = no_param(value, value_length);
        if (err != 0)
            return err;
        pthread_mutex_lock(&d->mu);
        d->snapshot_ryw = option == 26 ? FDB_TR_OPTION_SNAPSHOT_RYW_ENABLE
                                       : FDB_TR_OPTION_SNAPSHOT_RYW_DISABLE;
        pthread_mutex_unlock(&d->mu);
        return 0;
    }
    case 500:
    case 501:
    case 502:
    case 503:
        break;
    default:
        kvq__fdbc_complain("database option %d is not supported on a kvq directory", option);
        return FDB_ERR_INVALID_OPTION;
    }
    fdb_error_t err = tr_option_value(option, value, value_length);
    if (err != 0)
        return err;
    int64_t v = 0;
    (void)int_param(value, value_length, INT64_MIN, INT64_MAX, &v);
    pthread_mutex_lock(&d->mu);
    d->tr_defaults[option - 500] = v; /* a retry limit of -1 is none, as for a transaction */
    d->tr_has_default |= 1u << (option - 500);
    pthread_mutex_unlock(&d->mu);
    return 0;
}
