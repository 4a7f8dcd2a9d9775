/* The public transaction API: argument checks, FoundationDB's limits, the retry loop and
 * watches, dispatched to the engine a database was opened with. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine.h"
#include "util/bytes.h"

#define ATOMIC_INC(p) __atomic_add_fetch((p), 1, __ATOMIC_RELAXED)

static const char *default_url(void)
{
    const char *env = getenv("KVQ_DB");
    return (env != NULL && env[0] != '\0') ? env : "./kvq-data";
}

/* The test knob $KVQ_TEST_TXN_WINDOW_MS: the transaction window in milliseconds, 100 to 600,000,
 * instead of FoundationDB's 5 s. Slow builds (valgrind, sanitizers) run the tests with a wider
 * one, so that a transaction that takes a test a few seconds there does not fail with 1007;
 * tests of the window itself set it back to 5,000 (or shrink it). Unset or empty: 5 s. */
static int txn_window_us(int64_t *out, const char *fn)
{
    *out = KVQ_MAX_TXN_AGE_US;
    const char *env = getenv("KVQ_TEST_TXN_WINDOW_MS");
    if (env == NULL || env[0] == '\0')
        return 0;
    char *end;
    errno = 0;
    long long ms = strtoll(env, &end, 10);
    if (env[0] < '0' || env[0] > '9' || errno != 0 || *end != '\0' || ms < 100 || ms > 600000)
        return kvq__error(KVQ_EINVAL,
                          "%s: $KVQ_TEST_TXN_WINDOW_MS=%s is not a number of milliseconds from "
                          "100 to 600000",
                          fn, env);
    *out = (int64_t)ms * 1000;
    return 0;
}

#define KVQ__TEST_FLAGS_KNOWN                                                                \
    (KVQ_TEST_SKIP_CONFLICT_CHECK | KVQ_TEST_DROP_IDEMPOTENCY_MARKER | KVQ_TEST_ACK_BEFORE_SYNC | \
     KVQ_TEST_IOERR_AS_DEFINITE | KVQ_TEST_LEADER_STOP_BEFORE_COMMIT |                           \
     KVQ_TEST_LEADER_STOP_AFTER_COMMIT | KVQ_TEST_EARLY_READ_ALL)

static int db_open(kvq_db **out, const char *url, const kvq_db_options *opts,
                   const kvq_testing_options *testing, const char *fn)
{
    kvq__error_clear();
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "%s: out is NULL", fn);
    *out = NULL;
    kvq_db_options def = KVQ_DB_OPTIONS_INIT;
    if (opts == NULL)
        opts = &def;
    kvq_testing_options tdef = KVQ_TESTING_OPTIONS_INIT;
    if (testing == NULL)
        testing = &tdef;
    if (opts->version != KVQ_DB_OPTIONS_VERSION)
        return kvq__error(KVQ_EINVAL,
                          "%s: options version %u is not %u (use KVQ_DB_OPTIONS_INIT)", fn,
                          opts->version, KVQ_DB_OPTIONS_VERSION);
    if (testing->version != KVQ_TESTING_OPTIONS_VERSION)
        return kvq__error(KVQ_EINVAL,
                          "%s: testing options version %u is not %u (use "
                          "KVQ_TESTING_OPTIONS_INIT)",
                          fn, testing->version, KVQ_TESTING_OPTIONS_VERSION);
    if (opts->retry_limit < -1)
        return kvq__error(KVQ_EINVAL, "%s: retry_limit %d is below -1", fn, opts->retry_limit);
    if (opts->timeout_ms < 0 || opts->max_retry_delay_ms < 0)
        return kvq__error(KVQ_EINVAL, "%s: negative timeout or retry delay", fn);
    if (!(testing->fault_rate >= 0.0 && testing->fault_rate <= 1.0))
        return kvq__error(KVQ_EINVAL, "%s: fault_rate must be within [0, 1]", fn);
    if ((testing->fault_kinds & ~(unsigned int)KVQ__FAULT_KNOWN) != 0 ||
        (testing->fault_rate > 0.0 && testing->fault_kinds == 0))
        return kvq__error(KVQ_EINVAL, "%s: fault_kinds must name at least one KVQ_FAULT_*", fn);
    if ((testing->flags & ~(unsigned int)KVQ__TEST_FLAGS_KNOWN) != 0)
        return kvq__error(KVQ_EINVAL, "%s: unknown KVQ_TEST_* flags 0x%x", fn, testing->flags);
    if ((opts->file_mode & ~0777u) != 0)
        return kvq__error(KVQ_EINVAL, "%s: file_mode %o is not a permission mode", fn,
                          opts->file_mode);
    int64_t window_us;
    int wrc = txn_window_us(&window_us, fn);
    if (wrc != 0)
        return wrc;
    if (url == NULL)
        url = default_url();
    if (url[0] == '\0')
        return kvq__error(KVQ_EINVAL, "%s: the database URL is empty", fn);

    const kvq__engine_ops *ops;
    const char *path;
    if (strncmp(url, "fdb:", 4) == 0) {
        ops = &kvq__fdb_ops;
        path = url + 4;
    } else {
        ops = &kvq__embedded_ops;
        path = url;
        if (strncmp(url, "file:", 5) == 0)
            path = url + 5;
        if (path[0] == '\0')
            return kvq__error(KVQ_EINVAL, "%s: the database path is empty", fn);
    }

    kvq_db *db = kvq__calloc(1, sizeof(*db));
    if (db == NULL)
        return kvq__error(KVQ_ENOMEM, "%s: out of memory", fn);
    db->ops = ops;
    db->opts.version = opts->version;
    db->opts.flags = opts->flags;
    db->opts.retry_limit = opts->retry_limit;
    db->opts.timeout_ms = opts->timeout_ms;
    db->opts.max_retry_delay_ms = opts->max_retry_delay_ms;
    db->opts.file_mode = opts->file_mode;
    db->opts.api_version = opts->api_version;
    db->opts.fault_rate = testing->fault_rate;
    db->opts.fault_kinds = testing->fault_kinds;
    db->opts.fault_seed = testing->fault_seed;
    db->opts.test_flags = testing->flags;
    db->opts.txn_window_us = window_us;
    pthread_mutex_init(&db->fault_mu, NULL);
    db->fault_rng.s = testing->fault_seed;
    int rc = ops->open(&db->engine, db, path, &db->opts);
    if (rc != 0) {
        pthread_mutex_destroy(&db->fault_mu);
        kvq__free(db);
        return rc;
    }
    *out = db;
    return 0;
}

int kvq_db_open(kvq_db **out, const char *url, const kvq_db_options *opts)
{
    return db_open(out, url, opts, NULL, "kvq_db_open");
}

int kvq_db_open_testing(kvq_db **out,
                        const char *url,
                        const kvq_db_options *opts,
                        const kvq_testing_options *testing)
{
    return db_open(out, url, opts, testing, "kvq_db_open_testing");
}

void kvq_db_close(kvq_db *db)
{
    if (db == NULL)
        return;
    db->ops->close(db->engine);
    pthread_mutex_destroy(&db->fault_mu);
    kvq__free(db);
}

const char *kvq_db_get_engine(const kvq_db *db)
{
    return db == NULL ? "none" : db->ops->name;
}

unsigned int kvq__db_test_flags(const kvq_db *db)
{
    return db->opts.test_flags;
}

int kvq_db_get_stats(kvq_db_stats *out, const kvq_db *db)
{
    if (out == NULL || db == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_db_get_stats: NULL argument");
    out->commits = __atomic_load_n(&db->n_commits, __ATOMIC_RELAXED);
    out->conflicts = __atomic_load_n(&db->n_conflicts, __ATOMIC_RELAXED);
    out->retries = __atomic_load_n(&db->n_retries, __ATOMIC_RELAXED);
    out->batches = __atomic_load_n(&db->n_batches, __ATOMIC_RELAXED);
    out->injected_faults = __atomic_load_n(&db->n_faults, __ATOMIC_RELAXED);
    out->syncs = __atomic_load_n(&db->n_syncs, __ATOMIC_RELAXED);
    return 0;
}

static void retry_state_init(kvq_txn *txn)
{
    txn->retries = 0;
    txn->retry_limit = txn->db->opts.retry_limit;
    txn->timeout_ms = txn->db->opts.timeout_ms;
    txn->max_retry_delay_ms = txn->db->opts.max_retry_delay_ms;
    txn->start_mono_us = kvq__mono_us();
    txn->backoff_us = 0;
    txn->commit_timed_out = 0;
}

int kvq__txn_maybe_committed(const kvq_txn *txn, int err)
{
    return kvq_error_maybe_committed(err) ||
           (err == KVQ_ETRANSACTION_TIMED_OUT && txn != NULL && txn->commit_timed_out);
}

int kvq_txn_create(kvq_txn **out, kvq_db *db)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_txn_create: out is NULL");
    *out = NULL;
    if (db == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_txn_create: db is NULL");
    kvq_txn *txn = kvq__calloc(1, sizeof(*txn));
    if (txn == NULL)
        return kvq__error(KVQ_ENOMEM, "kvq_txn_create: out of memory");
    txn->db = db;
    uint64_t seed = 0;
    if (kvq__random_bytes(&seed, sizeof(seed)) != 0)
        seed = (uint64_t)kvq__mono_us() ^ (uint64_t)(uintptr_t)txn;
    txn->rng.s = seed;
    retry_state_init(txn);
    int rc = db->ops->txn_create(&txn->t, db->engine, txn);
    if (rc != 0) {
        kvq__free(txn);
        return rc;
    }
    *out = txn;
    return 0;
}

void kvq_txn_destroy(kvq_txn *txn)
{
    if (txn == NULL)
        return;
    txn->db->ops->txn_destroy(txn->t);
    kvq__free(txn);
}

void kvq_txn_reset(kvq_txn *txn)
{
    if (txn == NULL)
        return;
    txn->db->ops->txn_reset(txn->t);
    retry_state_init(txn);
    txn->next_user_version = 0;
    txn->system_keys = 0;
}

int kvq_txn_next_user_version(uint16_t *out, kvq_txn *txn)
{
    if (out == NULL || txn == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_txn_next_user_version: NULL argument");
    if (txn->next_user_version > UINT16_MAX)
        return kvq__error(KVQ_ECLIENT_INVALID_OPERATION,
                          "a transaction has at most 65,536 user versions");
    *out = (uint16_t)txn->next_user_version++;
    return 0;
}

/* The transaction's own time budget (KVQ_TXN_TIMEOUT_MS), checked before each operation. */
static int check_timeout(kvq_txn *txn)
{
    if (txn->timeout_ms > 0 && kvq__mono_us() - txn->start_mono_us > txn->timeout_ms * 1000)
        return kvq__error(KVQ_ETRANSACTION_TIMED_OUT, "transaction exceeded its timeout of %lld ms",
                          (long long)txn->timeout_ms);
    return 0;
}

int kvq__check_key(const uint8_t *key, size_t len, const char *what)
{
    if (key == NULL && len > 0)
        return kvq__error(KVQ_EINVAL, "%s: key is NULL with length %zu", what, len);
    if (len > KVQ_MAX_KEY_SIZE)
        return kvq__error(KVQ_EKEY_TOO_LARGE, "%s: key of %zu bytes is over the limit of %d", what,
                          len, KVQ_MAX_KEY_SIZE);
    if (len > 0 && key[0] == 0xff)
        return kvq__error(KVQ_EKEY_OUTSIDE_LEGAL_RANGE, "%s: keys starting with 0xFF are reserved",
                          what);
    return 0;
}

/* Range ends may be anything up to (and including) the single byte 0xFF, FoundationDB's end of
 * the normal key space. */
static int
check_range(const uint8_t *b, size_t blen, const uint8_t *e, size_t elen, const char *what)
{
    if ((b == NULL && blen > 0) || (e == NULL && elen > 0))
        return kvq__error(KVQ_EINVAL, "%s: range key is NULL", what);
    if (blen > KVQ_MAX_KEY_SIZE + 1 || elen > KVQ_MAX_KEY_SIZE + 1)
        return kvq__error(KVQ_EKEY_TOO_LARGE, "%s: range key is over the limit of %d bytes", what,
                          KVQ_MAX_KEY_SIZE);
    if ((blen > 0 && b[0] == 0xff && !(blen == 1)) || (elen > 0 && e[0] == 0xff && elen != 1))
        return kvq__error(KVQ_EKEY_OUTSIDE_LEGAL_RANGE,
                          "%s: range reaches into the reserved 0xFF key space", what);
    if (kvq__bytes_cmp(b, blen, e, elen) > 0)
        return kvq__error(KVQ_EINVERTED_RANGE, "%s: begin key is after end key", what);
    return 0;
}

/* A key of the transaction: keys from 0xFF need the system key options (reads: 302 or 301;
 * writes: 301), and reach at most below 0xFF 0xFF. */
static int txn_key(kvq_txn *txn, const uint8_t *key, size_t len, int write, const char *what)
{
    unsigned int need = write ? KVQ__SYSTEM_WRITE : KVQ__SYSTEM_READ | KVQ__SYSTEM_WRITE;
    if (len == 0 || key == NULL || key[0] != 0xff || !(txn->system_keys & need))
        return kvq__check_key(key, len, what);
    if (len > KVQ_MAX_KEY_SIZE)
        return kvq__error(KVQ_EKEY_TOO_LARGE, "%s: key of %zu bytes is over the limit of %d", what,
                          len, KVQ_MAX_KEY_SIZE);
    if (len > 1 && key[1] == 0xff)
        return kvq__error(KVQ_EKEY_OUTSIDE_LEGAL_RANGE,
                          "%s: keys from 0xFF 0xFF are special keys, not stored ones", what);
    return 0;
}

/* A range of the transaction: ends may reach 0xFF, or 0xFF 0xFF with the system key options. */
static int txn_range(kvq_txn *txn,
                     const uint8_t *b,
                     size_t blen,
                     const uint8_t *e,
                     size_t elen,
                     int write,
                     const char *what)
{
    unsigned int need = write ? KVQ__SYSTEM_WRITE : KVQ__SYSTEM_READ | KVQ__SYSTEM_WRITE;
    if (!(txn->system_keys & need))
        return check_range(b, blen, e, elen, what);
    if ((b == NULL && blen > 0) || (e == NULL && elen > 0))
        return kvq__error(KVQ_EINVAL, "%s: range key is NULL", what);
    if (blen > KVQ_MAX_KEY_SIZE + 1 || elen > KVQ_MAX_KEY_SIZE + 1)
        return kvq__error(KVQ_EKEY_TOO_LARGE, "%s: range key is over the limit of %d bytes", what,
                          KVQ_MAX_KEY_SIZE);
    static const uint8_t top[2] = { 0xff, 0xff };
    if (kvq__bytes_cmp(b, blen, top, 2) > 0 || kvq__bytes_cmp(e, elen, top, 2) > 0)
        return kvq__error(KVQ_EKEY_OUTSIDE_LEGAL_RANGE,
                          "%s: range reaches past 0xFF 0xFF, into the special keys", what);
    if (kvq__bytes_cmp(b, blen, e, elen) > 0)
        return kvq__error(KVQ_EINVERTED_RANGE, "%s: begin key is after end key", what);
    return 0;
}

#define TXN_CHECK(txn, what)                                        \
    do {                                                            \
        kvq__error_clear();                                         \
        if ((txn) == NULL)                                          \
            return kvq__error(KVQ_EINVAL, "%s: txn is NULL", what); \
        int trc_ = check_timeout(txn);                              \
        if (trc_ != 0)                                              \
            return trc_;                                            \
    } while (0)

int kvq_txn_get(kvq_bytes *value,
                int *present,
                kvq_txn *txn,
                const uint8_t *key,
                size_t key_len,
                unsigned int flags)
{
    TXN_CHECK(txn, "kvq_txn_get");
    if (value == NULL || present == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_txn_get: NULL output");
    value->data = NULL;
    value->len = 0;
    *present = 0;
    if ((flags & ~(unsigned int)KVQ_SNAPSHOT) != 0)
        return kvq__error(KVQ_EINVAL, "kvq_txn_get: unknown flags 0x%x", flags);
    int rc = txn_key(txn, key, key_len, 0, "kvq_txn_get");
    if (rc != 0)
        return rc;
    return txn->db->ops->get(txn->t, value, present, key, key_len, flags);
}

int kvq_txn_get_range(const kvq_kv **kvs,
                      size_t *count,
                      bool *more,
                      kvq_txn *txn,
                      const uint8_t *begin,
                      size_t begin_len,
                      const uint8_t *end,
                      size_t end_len,
                      int limit,
                      unsigned int flags)
{
    TXN_CHECK(txn, "kvq_txn_get_range");
    if (kvs == NULL || count == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_txn_get_range: NULL output");
    *kvs = NULL;
    *count = 0;
    if (more != NULL)
        *more = false;
    if ((flags & ~(unsigned int)(KVQ_SNAPSHOT | KVQ_REVERSE)) != 0)
        return kvq__error(KVQ_EINVAL, "kvq_txn_get_range: unknown flags 0x%x", flags);
    if (limit < 0)
        return kvq__error(KVQ_EINVAL, "kvq_txn_get_range: negative limit %d", limit);
    int rc = txn_range(txn, begin, begin_len, end, end_len, 0, "kvq_txn_get_range");
    if (rc != 0)
        return rc;
    int m = 0;
    rc = txn->db->ops->get_range(txn->t, kvs, count, &m, begin, begin_len, end, end_len, limit,
                                 flags);
    if (more != NULL)
        *more = m != 0;
    return rc;
}

static int check_value(size_t len, const uint8_t *value, const char *what)
{
    if (value == NULL && len > 0)
        return kvq__error(KVQ_EINVAL, "%s: value is NULL with length %zu", what, len);
    if (len > KVQ_MAX_VALUE_SIZE)
        return kvq__error(KVQ_EVALUE_TOO_LARGE, "%s: value of %zu bytes is over the limit of %d",
                          what, len, KVQ_MAX_VALUE_SIZE);
    return 0;
}

int kvq_txn_set(
    kvq_txn *txn, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len)
{
    TXN_CHECK(txn, "kvq_txn_set");
    int rc = txn_key(txn, key, key_len, 1, "kvq_txn_set");
    if (rc == 0)
        rc = check_value(value_len, value, "kvq_txn_set");
    if (rc != 0)
        return rc;
    return txn->db->ops->set(txn->t, key, key_len, value, value_len);
}

int kvq_txn_clear(kvq_txn *txn, const uint8_t *key, size_t key_len)
{
    TXN_CHECK(txn, "kvq_txn_clear");
    int rc = txn_key(txn, key, key_len, 1, "kvq_txn_clear");
    if (rc != 0)
        return rc;
    /* A point clear is the range [key, key + 0x00). */
    uint8_t stack[256];
    uint8_t *end = kvq__key_succ(stack, sizeof(stack), key, key_len);
    if (end == NULL)
        return kvq__error(KVQ_ENOMEM, "kvq_txn_clear: out of memory");
    rc = txn->db->ops->clear_range(txn->t, key, key_len, end, key_len + 1);
    kvq__key_succ_free(end, stack);
    return rc;
}

int kvq_txn_clear_range(
    kvq_txn *txn, const uint8_t *begin, size_t begin_len, const uint8_t *end, size_t end_len)
{
    TXN_CHECK(txn, "kvq_txn_clear_range");
    int rc = txn_range(txn, begin, begin_len, end, end_len, 1, "kvq_txn_clear_range");
    if (rc != 0)
        return rc;
    if (kvq__bytes_cmp(begin, begin_len, end, end_len) == 0)
        return 0;
    return txn->db->ops->clear_range(txn->t, begin, begin_len, end, end_len);
}

/* The 4-byte little-endian offset at the end of a versionstamped key or value. */
static int check_stamp_offset(const uint8_t *p, size_t len, const char *what)
{
    if (len < 4)
        return kvq__error(KVQ_ECLIENT_INVALID_OPERATION,
                          "%s: %zu bytes cannot hold the 4-byte versionstamp offset", what, len);
    uint32_t off = (uint32_t)kvq__le_get(p + len - 4, 4);
    if ((uint64_t)off + 10 > len - 4)
        return kvq__error(KVQ_ECLIENT_INVALID_OPERATION,
                          "%s: versionstamp offset %u does not leave 10 bytes within %zu", what,
                          off, len - 4);
    return 0;
}

int kvq_txn_atomic_op(kvq_txn *txn,
                      const uint8_t *key,
                      size_t key_len,
                      const uint8_t *param,
                      size_t param_len,
                      kvq_mutation op)
{
    TXN_CHECK(txn, "kvq_txn_atomic_op");
    int rc;
    switch (op) {
    case KVQ_MUT_ADD:
    case KVQ_MUT_BIT_AND:
    case KVQ_MUT_BIT_OR:
    case KVQ_MUT_BIT_XOR:
    case KVQ_MUT_MAX:
    case KVQ_MUT_MIN:
    case KVQ_MUT_BYTE_MIN:
    case KVQ_MUT_BYTE_MAX:
    case KVQ_MUT_APPEND_IF_FITS:
    case KVQ_MUT_COMPARE_AND_CLEAR:
        rc = txn_key(txn, key, key_len, 1, "kvq_txn_atomic_op");
        break;
    case KVQ_MUT_SET_VERSIONSTAMPED_KEY:
        /* FoundationDB counts the 4-byte offset suffix in the key size limit. */
        if (key == NULL)
            return kvq__error(KVQ_EINVAL, "set_versionstamped_key: key is NULL");
        rc = txn_key(txn, key, key_len, 1, "set_versionstamped_key");
        if (rc == 0)
            rc = check_stamp_offset(key, key_len, "set_versionstamped_key");
        break;
    case KVQ_MUT_SET_VERSIONSTAMPED_VALUE:
        rc = txn_key(txn, key, key_len, 1, "set_versionstamped_value");
        if (rc == 0 && param == NULL)
            rc = kvq__error(KVQ_EINVAL, "set_versionstamped_value: value is NULL");
        if (rc == 0)
            rc = check_stamp_offset(param, param_len, "set_versionstamped_value");
        break;
    default:
        return kvq__error(KVQ_EINVALID_MUTATION_TYPE, "kvq_txn_atomic_op: unknown mutation %d",
                          (int)op);
    }
    if (rc == 0)
        rc = check_value(param_len, param, "kvq_txn_atomic_op");
    if (rc != 0)
        return rc;
    return txn->db->ops->atomic_op(txn->t, key, key_len, param, param_len, op);
}

int kvq_txn_set_versionstamped_key(
    kvq_txn *txn, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len)
{
    return kvq_txn_atomic_op(txn, key, key_len, value, value_len, KVQ_MUT_SET_VERSIONSTAMPED_KEY);
}

int kvq_txn_set_versionstamped_value(
    kvq_txn *txn, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len)
{
    return kvq_txn_atomic_op(txn, key, key_len, value, value_len, KVQ_MUT_SET_VERSIONSTAMPED_VALUE);
}

int kvq_txn_add_conflict_range(kvq_txn *txn,
                               const uint8_t *begin,
                               size_t begin_len,
                               const uint8_t *end,
                               size_t end_len,
                               kvq_conflict_type type)
{
    TXN_CHECK(txn, "kvq_txn_add_conflict_range");
    if (type != KVQ_CONFLICT_READ && type != KVQ_CONFLICT_WRITE)
        return kvq__error(KVQ_EINVAL, "kvq_txn_add_conflict_range: unknown type %d", (int)type);
    int rc = txn_range(txn, begin, begin_len, end, end_len, 0, "kvq_txn_add_conflict_range");
    if (rc != 0)
        return rc;
    if (kvq__bytes_cmp(begin, begin_len, end, end_len) == 0)
        return 0;
    return txn->db->ops->add_conflict_range(txn->t, begin, begin_len, end, end_len, type);
}

int kvq_txn_get_read_version(int64_t *out, kvq_txn *txn)
{
    TXN_CHECK(txn, "kvq_txn_get_read_version");
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_txn_get_read_version: out is NULL");
    return txn->db->ops->get_read_version(txn->t, out);
}

int kvq_txn_commit(kvq_txn *txn)
{
    TXN_CHECK(txn, "kvq_txn_commit");
    int rc = txn->db->ops->commit(txn->t);
    if (rc == KVQ_ENOT_COMMITTED)
        ATOMIC_INC(&txn->db->n_conflicts);
    /* The engine's own commit ran out of time: the request may have reached the commit
     * pipeline, so the transaction may still commit (FoundationDB's client says the same). */
    txn->commit_timed_out = rc == KVQ_ETRANSACTION_TIMED_OUT;
    return rc;
}

int kvq_txn_get_committed_version(int64_t *out, kvq_txn *txn)
{
    if (out == NULL || txn == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_txn_get_committed_version: NULL argument");
    return txn->db->ops->get_committed_version(txn->t, out);
}

int kvq_txn_get_versionstamp(uint8_t out[10], kvq_txn *txn)
{
    if (out == NULL || txn == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_txn_get_versionstamp: NULL argument");
    return txn->db->ops->get_versionstamp(txn->t, out);
}

void kvq__txn_early_read(kvq_txn *txn)
{
    /* Only the embedded engine has such reads: a cluster's read versions are its own. */
    if (txn != NULL && txn->db->ops == &kvq__embedded_ops)
        (void)txn->db->ops->set_option(txn->t, KVQ__TXN_EARLY_READ, 1);
}

int kvq__txn_early_settle(kvq_txn *txn)
{
    if (txn == NULL || txn->db->ops != &kvq__embedded_ops)
        return 0;
    return txn->db->ops->set_option(txn->t, KVQ__TXN_EARLY_SETTLE, 0);
}

int kvq_txn_set_option(kvq_txn *txn, kvq_txn_option option, int64_t value)
{
    if (txn == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_txn_set_option: txn is NULL");
    switch (option) {
    case KVQ_TXN_TIMEOUT_MS:
        if (value < 0)
            return kvq__error(KVQ_EINVALID_OPTION_VALUE, "timeout %lld ms is negative",
                              (long long)value);
        txn->timeout_ms = value;
        return 0;
    case KVQ_TXN_RETRY_LIMIT:
        if (value < -1 || value > INT32_MAX)
            return kvq__error(KVQ_EINVALID_OPTION_VALUE, "retry limit %lld is out of range",
                              (long long)value);
        txn->retry_limit = (int)value;
        return 0;
    case KVQ_TXN_MAX_RETRY_DELAY_MS:
        if (value < 0)
            return kvq__error(KVQ_EINVALID_OPTION_VALUE, "retry delay %lld ms is negative",
                              (long long)value);
        txn->max_retry_delay_ms = value;
        return 0;
    case KVQ_TXN_SIZE_LIMIT:
        if (value < 32 || value > KVQ_MAX_TXN_SIZE)
            return kvq__error(KVQ_EINVALID_OPTION_VALUE,
                              "size limit %lld is outside 32 to %d bytes", (long long)value,
                              KVQ_MAX_TXN_SIZE);
        break;
    case KVQ_TXN_ACCESS_SYSTEM_KEYS:
    case KVQ_TXN_READ_SYSTEM_KEYS:
    case KVQ_TXN_NEXT_WRITE_NO_WRITE_CONFLICT_RANGE:
    case KVQ_TXN_READ_YOUR_WRITES_DISABLE:
    case KVQ_TXN_SNAPSHOT_RYW_ENABLE:
    case KVQ_TXN_SNAPSHOT_RYW_DISABLE:
        break;
    default:
        return kvq__error(KVQ_EINVALID_OPTION, "unknown transaction option %d", (int)option);
    }
    if (txn->db->ops->set_option == NULL)
        return kvq__error(KVQ_EUNSUPPORTED, "the %s engine does not have transaction option %d",
                          txn->db->ops->name, (int)option);
    int rc = txn->db->ops->set_option(txn->t, option, value);
    if (rc == 0 && option == KVQ_TXN_ACCESS_SYSTEM_KEYS)
        txn->system_keys |= KVQ__SYSTEM_WRITE;
    if (rc == 0 && option == KVQ_TXN_READ_SYSTEM_KEYS)
        txn->system_keys |= KVQ__SYSTEM_READ;
    return rc;
}

int kvq_txn_set_read_version(kvq_txn *txn, int64_t version)
{
    TXN_CHECK(txn, "kvq_txn_set_read_version");
    if (version <= 0)
        return kvq__error(KVQ_EVERSION_INVALID, "read version %lld is not positive",
                          (long long)version);
    if (txn->db->ops->set_read_version == NULL)
        return kvq__error(KVQ_EUNSUPPORTED, "the %s engine cannot set a read version",
                          txn->db->ops->name);
    return txn->db->ops->set_read_version(txn->t, version);
}

int kvq_txn_get_approximate_size(int64_t *out, kvq_txn *txn)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_txn_get_approximate_size: out is NULL");
    *out = 0;
    TXN_CHECK(txn, "kvq_txn_get_approximate_size");
    if (txn->db->ops->get_approximate_size == NULL)
        return kvq__error(KVQ_EUNSUPPORTED, "the %s engine cannot tell a transaction's size",
                          txn->db->ops->name);
    return txn->db->ops->get_approximate_size(txn->t, out);
}

int kvq_txn_get_retries(const kvq_txn *txn)
{
    return txn == NULL ? 0 : txn->retries;
}

int64_t kvq__retry_delay_us(
    int64_t *backoff_us, int err, int64_t max_delay_us, int64_t initial_us, double unit)
{
    if (max_delay_us < 0)
        max_delay_us = 0;
    if (err == KVQ_ETRANSACTION_TOO_OLD || err == KVQ_EFUTURE_VERSION)
        /* A fixed short pause, and the backoff does not grow: a newer read version is all it
         * takes. */
        return initial_us < max_delay_us ? initial_us : max_delay_us;
    if (*backoff_us <= 0)
        *backoff_us = initial_us < max_delay_us ? initial_us : max_delay_us;
    int64_t sleep_us = (int64_t)(unit * (double)*backoff_us);
    /* Resource-constrained clusters get up to 30 s whatever max_retry_delay says. */
    int64_t cap = max_delay_us;
    if (err == KVQ_EPROXY_MEMORY_LIMIT_EXCEEDED || err == KVQ_EGRV_PROXY_MEMORY_LIMIT_EXCEEDED ||
        err == KVQ_ETRANSACTION_THROTTLED_HOT_SHARD ||
        err == KVQ_ETRANSACTION_REJECTED_RANGE_LOCKED)
        cap = KVQ__RESOURCE_MAX_BACKOFF_US;
    *backoff_us = *backoff_us * 2 < cap ? *backoff_us * 2 : cap;
    return sleep_us;
}

int kvq_txn_on_error(kvq_txn *txn, int err)
{
    if (txn == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_txn_on_error: txn is NULL");
    if (!kvq_error_retryable(err))
        return err;
    if (txn->retry_limit >= 0 && txn->retries >= txn->retry_limit)
        return err;
    int fdb = strcmp(txn->db->ops->name, "fdb") == 0;
    int64_t sleep_us = kvq__retry_delay_us(
        &txn->backoff_us, err, txn->max_retry_delay_ms * 1000,
        fdb ? KVQ__FDB_INITIAL_BACKOFF_US : KVQ__EMB_INITIAL_BACKOFF_US, kvq__rng_unit(&txn->rng));
    if (txn->timeout_ms > 0) {
        int64_t left = txn->timeout_ms * 1000 - (kvq__mono_us() - txn->start_mono_us);
        if (left <= 0)
            return kvq__error(KVQ_ETRANSACTION_TIMED_OUT,
                              "transaction timed out after %d retries (last error %d %s)",
                              txn->retries, err, kvq_errname(err));
        if (sleep_us > left)
            sleep_us = left;
    }
    kvq__sleep_us(sleep_us);
    txn->retries++;
    txn->commit_timed_out = 0;
    ATOMIC_INC(&txn->db->n_retries);
    txn->db->ops->txn_reset(txn->t);
    txn->system_keys = 0;
    return 0;
}

int kvq_txn_run(kvq_txn *txn, kvq_txn_fn fn, void *payload)
{
    if (txn == NULL || fn == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_txn_run: NULL argument");
    int64_t timeout = txn->timeout_ms, delay = txn->max_retry_delay_ms;
    int limit = txn->retry_limit;
    kvq_txn_reset(txn);
    txn->timeout_ms = timeout;
    txn->max_retry_delay_ms = delay;
    txn->retry_limit = limit;
    for (;;) {
        int rc = fn(txn, payload);
        if (rc == 0)
            rc = kvq_txn_commit(txn);
        if (rc == 0)
            return 0;
        int rc2 = kvq_txn_on_error(txn, rc);
        if (rc2 != 0) {
            /* Keep the detail of the error being reported. */
            if (kvq_last_error_code() != rc2)
                kvq__error(rc2, "%s", kvq_strerror(rc2));
            return rc2;
        }
    }
}

int kvq_db_transact(kvq_db *db, kvq_txn_fn fn, void *payload)
{
    if (db == NULL || fn == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_db_transact: NULL argument");
    kvq_txn *txn;
    int rc = kvq_txn_create(&txn, db);
    if (rc != 0)
        return rc;
    rc = kvq_txn_run(txn, fn, payload);
    kvq_txn_destroy(txn);
    return rc;
}

/* Watches ---------------------------------------------------------------------------------- */

int kvq_txn_watch(kvq_watch **out, kvq_txn *txn, const uint8_t *key, size_t key_len)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_txn_watch: out is NULL");
    *out = NULL;
    TXN_CHECK(txn, "kvq_txn_watch");
    int rc = txn_key(txn, key, key_len, 0, "kvq_txn_watch");
    if (rc != 0)
        return rc;
    kvq_watch *w = kvq__calloc(1, sizeof(*w));
    if (w == NULL)
        return kvq__error(KVQ_ENOMEM, "kvq_txn_watch: out of memory");
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    w->refs = 1;
    w->db = txn->db;
    rc = txn->db->ops->watch(txn->t, w, key, key_len);
    if (rc != 0) {
        kvq__watch_unref(w);
        return rc;
    }
    *out = w;
    return 0;
}

int kvq_watch_wait(kvq_watch *w, int64_t timeout_ms)
{
    if (w == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_watch_wait: watch is NULL");
    if (timeout_ms < -1)
        return kvq__error(KVQ_EINVAL, "kvq_watch_wait: timeout %lld is below -1",
                          (long long)timeout_ms);
    struct timespec deadline;
    if (timeout_ms > 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    while (w->state != KVQ__WATCH_DONE) {
        if (timeout_ms == 0) {
            rc = ETIMEDOUT;
            break;
        }
        if (timeout_ms < 0)
            rc = pthread_cond_wait(&w->cond, &w->mu);
        else
            rc = pthread_cond_timedwait(&w->cond, &w->mu, &deadline);
        if (rc == ETIMEDOUT)
            break;
    }
    int result = w->state == KVQ__WATCH_DONE ? w->result : KVQ_ETIMED_OUT;
    pthread_mutex_unlock(&w->mu);
    if (result != 0)
        return kvq__error(result, "watch: %s", kvq_strerror(result));
    return 0;
}

void kvq_watch_cancel(kvq_watch *w)
{
    if (w == NULL)
        return;
    kvq__watch_settle(w, KVQ_EWATCH_CANCELLED);
    if (w->db != NULL && w->db->ops->watch_cancel != NULL)
        w->db->ops->watch_cancel(w);
}

void kvq_watch_destroy(kvq_watch *w)
{
    if (w == NULL)
        return;
    kvq_watch_cancel(w);
    kvq__watch_unref(w);
}
