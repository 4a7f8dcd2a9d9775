/* libkvq_fdb_c.so: transactions (FDBTransaction): their states (cancelled, timed out, used
 * after a commit), point reads and writes, the commit, on_error, watches and versionstamps; and
 * the public fdb_transaction_* calls, each run whole, one at a time, on its transaction. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fdbc/fdbc_internal.h"
#include "util/util.h"

/* Takes the transaction for one call: waits for the calls of other threads, and for the thread
 * of an fdb_transaction_on_error (its backoff and retry) to end. */
static void tr_lock(FDBTransaction *tr)
{
    if (tr == NULL)
        kvq__fdbc_misuse("a transaction call on a NULL transaction");
    pthread_mutex_lock(&tr->mu);
    while (tr->on_error_live)
        pthread_cond_wait(&tr->cond, &tr->mu);
}

static void tr_unlock(FDBTransaction *tr)
{
    pthread_mutex_unlock(&tr->mu);
}

/* Whether a write may go to the embedded transaction: not after a deferred error (the first is
 * kept), and not once a commit was attempted (used_during_commit, deferred). */
static int tr_writable(FDBTransaction *tr)
{
    if (tr->deferred != 0)
        return 0;
    fdb_error_t err = kvq__fdbc_tr_error(tr, 1);
    if (err == FDB_ERR_USED_DURING_COMMIT)
        tr->deferred = err;
    return err != FDB_ERR_USED_DURING_COMMIT;
}

static void defer(FDBTransaction *tr, int rc)
{
    if (rc != 0 && tr->deferred == 0)
        tr->deferred = rc;
}

/* Completes the pending versionstamp futures: with the stamp after a successful commit, else
 * with err. */
static void stamps_complete(FDBTransaction *tr, fdb_error_t err)
{
    while (tr->stamps != NULL) {
        FDBFuture *f = tr->stamps;
        tr->stamps = f->next;
        fdb_error_t e = err;
        if (e == 0) {
            uint8_t stamp[10];
            e = kvq_txn_get_versionstamp(stamp, tr->kt);
            if (e == 0) {
                f->bytes = malloc(sizeof(stamp));
                if (f->bytes == NULL)
                    kvq__fdbc_misuse("out of memory");
                memcpy(f->bytes, stamp, sizeof(stamp));
                f->len = (int)sizeof(stamp);
            }
        }
        kvq__fdbc_fut_complete(f, e);
        kvq__fdbc_fut_unref(f);
    }
}

fdb_error_t fdb_database_create_transaction(FDBDatabase *d, FDBTransaction **out_transaction)
{
    if (d == NULL || out_transaction == NULL)
        kvq__fdbc_misuse("fdb_database_create_transaction with a NULL argument");
    *out_transaction = NULL;
    FDBTransaction *tr = calloc(1, sizeof(*tr));
    if (tr == NULL)
        return FDB_ERR_INTERNAL_ERROR;
    int rc = kvq_txn_create(&tr->kt, d->kdb);
    if (rc != 0) {
        free(tr);
        return kvq__fdbc_fdb_code(rc);
    }
    pthread_mutex_lock(&d->mu);
    d->refs++;
    pthread_mutex_unlock(&d->mu);
    pthread_mutex_init(&tr->mu, NULL);
    pthread_cond_init(&tr->cond, NULL);
    tr->db = d;
    tr->start_us = kvq__mono_us();
    kvq__fdbc_knobs_read(tr);
    rc = kvq__fdbc_db_defaults(tr, 1);
    if (rc != 0) {
        fdb_transaction_destroy(tr);
        return kvq__fdbc_fdb_code(rc);
    }
    *out_transaction = tr;
    return 0;
}

void fdb_transaction_destroy(FDBTransaction *tr)
{
    /* Waits for the calls of other threads and for on_error's thread; using the transaction
     * once it is destroyed is the caller's error, as with libfdb_c. */
    tr_lock(tr);
    stamps_complete(tr, FDB_ERR_TRANSACTION_CANCELLED);
    /* Uncommitted watches end with 1025 through the embedded engine. */
    kvq_txn_destroy(tr->kt);
    kvq__fdbc_db_unref(tr->db);
    tr_unlock(tr);
    pthread_cond_destroy(&tr->cond);
    pthread_mutex_destroy(&tr->mu);
    free(tr);
}

/* Back to a new transaction's state: no error, no cancellation, no timeout fired, the
 * database's options, and the time counted from now. */
static void tr_reset(FDBTransaction *tr)
{
    stamps_complete(tr, FDB_ERR_TRANSACTION_CANCELLED);
    kvq_txn_reset(tr->kt);
    tr->deferred = 0;
    tr->reset_err = 0;
    tr->timeout_ms = 0;
    tr->start_us = kvq__mono_us();
    tr->system_keys = 0;
    tr->special_writes = 0;
    tr->commit_started = 0;
    defer(tr, kvq__fdbc_db_defaults(tr, 1));
}

static FDBFuture *tr_get_read_version(FDBTransaction *tr)
{
    fdb_error_t gate = kvq__fdbc_tr_error(tr, 0);
    if (gate != 0)
        return kvq__fdbc_fut_error(FUT_INT64, gate);
    FDBFuture *f = kvq__fdbc_fut_new(FUT_INT64);
    kvq__fdbc_fut_settle(f, kvq_txn_get_read_version(&f->i64, tr->kt));
    return f;
}

/* $KVQ_FDBC_READ_DELAY_MS plays a slow storage server: reads wait that long first. */
static FDBFuture *tr_get(FDBTransaction *tr,
                         const uint8_t *key_name,
                         int key_name_length,
                         fdb_bool_t snapshot)
{
    if (key_name == NULL || key_name_length < 0)
        kvq__fdbc_misuse("fdb_transaction_get with a NULL key or a negative length");
    fdb_error_t gate = kvq__fdbc_tr_error(tr, 1);
    if (gate != 0)
        return kvq__fdbc_fut_error(FUT_VALUE, gate);
    kvq__fdbc_read_delay(tr);
    FDBFuture *f = kvq__fdbc_fut_new(FUT_VALUE);
    if (kvq__fdbc_is_special(key_name, (size_t)key_name_length)) {
        size_t vl = 0;
        int rc = kvq__fdbc_special_value(tr, key_name, (size_t)key_name_length, &f->present,
                                         &f->bytes, &vl);
        f->len = (int)vl;
        kvq__fdbc_fut_settle(f, rc);
        return f;
    }
    kvq_bytes v;
    int present = 0;
    int rc = kvq_txn_get(&v, &present, tr->kt, key_name, (size_t)key_name_length,
                         snapshot ? KVQ_SNAPSHOT : 0);
    if (rc == 0 && present) {
        f->present = 1;
        /* Small values (most) are kept in the future itself: one allocation fewer. */
        f->bytes = v.len <= sizeof(f->small) ? f->small : kvq__fdbc_copy_bytes(v.data, v.len);
        if (v.len > 0 && f->bytes == f->small)
            memcpy(f->small, v.data, v.len);
        f->len = (int)v.len;
    }
    kvq__fdbc_fut_settle(f, rc);
    return f;
}

static void tr_set(FDBTransaction *tr,
                   const uint8_t *key_name,
                   int key_name_length,
                   const uint8_t *value,
                   int value_length)
{
    if (key_name == NULL || value == NULL || key_name_length < 0 || value_length < 0)
        kvq__fdbc_misuse("fdb_transaction_set with a NULL pointer or a negative length");
    if (!kvq__fdbc_special_write(tr, 0, key_name, key_name_length, NULL, 0) && tr_writable(tr))
        defer(tr,
              kvq_txn_set(tr->kt, key_name, (size_t)key_name_length, value, (size_t)value_length));
}

static void tr_clear_range(FDBTransaction *tr,
                           const uint8_t *begin_key_name,
                           int begin_key_name_length,
                           const uint8_t *end_key_name,
                           int end_key_name_length)
{
    if (begin_key_name == NULL || end_key_name == NULL || begin_key_name_length < 0 ||
        end_key_name_length < 0)
        kvq__fdbc_misuse("fdb_transaction_clear_range with a NULL key or a negative length");
    if (!kvq__fdbc_special_write(tr, 1, begin_key_name, begin_key_name_length, end_key_name,
                                 end_key_name_length) &&
        tr_writable(tr))
        defer(tr, kvq_txn_clear_range(tr->kt, begin_key_name, (size_t)begin_key_name_length,
                                      end_key_name, (size_t)end_key_name_length));
}

static void tr_atomic_op(FDBTransaction *tr,
                         const uint8_t *key_name,
                         int key_name_length,
                         const uint8_t *param,
                         int param_length,
                         FDBMutationType operation_type)
{
    if (key_name == NULL || param == NULL || key_name_length < 0 || param_length < 0)
        kvq__fdbc_misuse("fdb_transaction_atomic_op with a NULL pointer or a negative length");
    /* The mutation types are kvq's numbers: every atomic operation, APPEND_IF_FITS and
     * COMPARE_AND_CLEAR included, is applied at commit without a read conflict. */
    if (!kvq__fdbc_special_write(tr, 0, key_name, key_name_length, NULL, 0) && tr_writable(tr))
        defer(tr, kvq_txn_atomic_op(tr->kt, key_name, (size_t)key_name_length, param,
                                    (size_t)param_length, (kvq_mutation)operation_type));
}

static fdb_error_t tr_add_conflict_range(FDBTransaction *tr,
                                         const uint8_t *begin_key_name,
                                         int begin_key_name_length,
                                         const uint8_t *end_key_name,
                                         int end_key_name_length,
                                         FDBConflictRangeType type)
{
    if (begin_key_name == NULL || end_key_name == NULL || begin_key_name_length < 0 ||
        end_key_name_length < 0)
        kvq__fdbc_misuse("fdb_transaction_add_conflict_range with a NULL key or a negative length");
    if (type != FDB_CONFLICT_RANGE_TYPE_READ && type != FDB_CONFLICT_RANGE_TYPE_WRITE)
        return FDB_ERR_CLIENT_INVALID_OPERATION;
    if (tr->commit_started) {
        if (tr->reset_err == 0)
            tr->reset_err = FDB_ERR_USED_DURING_COMMIT;
        return FDB_ERR_USED_DURING_COMMIT;
    }
    return kvq_txn_add_conflict_range(tr->kt, begin_key_name, (size_t)begin_key_name_length,
                                      end_key_name, (size_t)end_key_name_length,
                                      (kvq_conflict_type)type);
}

static FDBFuture *tr_commit(FDBTransaction *tr)
{
    fdb_error_t err = kvq__fdbc_tr_error(tr, 1);
    if (err == 0) {
        tr->commit_started = 1;
        err = kvq_txn_commit(tr->kt);
    }
    stamps_complete(tr, err);
    return kvq__fdbc_fut_error(FUT_VOID, err);
}

static fdb_error_t tr_get_committed_version(FDBTransaction *tr, int64_t *out_version)
{
    /* Read-only (or uncommitted) transactions have -1. */
    if (kvq_txn_get_committed_version(out_version, tr->kt) != 0)
        *out_version = -1;
    return 0;
}

static FDBFuture *tr_get_versionstamp(FDBTransaction *tr)
{
    /* Asked for before the commit; once it was attempted, used_during_commit. */
    if (tr->commit_started)
        return kvq__fdbc_fut_error(FUT_KEY, kvq__fdbc_tr_error(tr, 1));
    FDBFuture *f = kvq__fdbc_fut_new(FUT_KEY);
    kvq__fdbc_fut_ref(f); /* the transaction's, until the commit */
    f->next = tr->stamps;
    tr->stamps = f;
    return f;
}

static void *watch_main(void *arg)
{
    FDBFuture *f = arg;
    pthread_mutex_lock(&f->mu);
    kvq_watch *kw = f->kw;
    pthread_mutex_unlock(&f->mu);
    int rc = kvq_watch_wait(kw, -1);
    pthread_mutex_lock(&f->mu);
    int cancelled = f->cancelled;
    f->kw = NULL;
    pthread_mutex_unlock(&f->mu);
    kvq_watch_destroy(kw);
    kvq__fdbc_fut_complete(f, cancelled ? FDB_ERR_OPERATION_CANCELLED : rc);
    FDBDatabase *d = f->db;
    pthread_mutex_lock(&d->mu);
    if (f->wprev != NULL)
        f->wprev->wnext = f->wnext;
    else
        d->watches = f->wnext;
    if (f->wnext != NULL)
        f->wnext->wprev = f->wprev;
    d->watch_threads--;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->mu);
    kvq__fdbc_fut_unref(f);
    return NULL;
}

static FDBFuture *tr_watch(FDBTransaction *tr, const uint8_t *key_name, int key_name_length)
{
    if (key_name == NULL || key_name_length < 0)
        kvq__fdbc_misuse("fdb_transaction_watch with a NULL key or a negative length");
    fdb_error_t gate = kvq__fdbc_tr_error(tr, 1);
    if (gate != 0)
        return kvq__fdbc_fut_error(FUT_VOID, gate);
    /* FoundationDB's watch compares against what a read of the key in the transaction sees, its
     * own writes included whatever snapshot_ryw says, and that read is not a snapshot: it adds
     * a read conflict on the key unless the transaction wrote it (RYWImpl::watch reads with
     * Snapshot::False). The embedded watch reads as a snapshot: snapshot reads are made to see
     * the transaction's writes for it, and a plain read then adds the conflict. */
    int toggled = tr->snapshot_no_ryw &&
                  kvq_txn_set_option(tr->kt, KVQ_TXN_SNAPSHOT_RYW_ENABLE, 0) == 0;
    kvq_watch *kw = NULL;
    int rc = kvq_txn_watch(&kw, tr->kt, key_name, (size_t)key_name_length);
    if (toggled && kvq_txn_set_option(tr->kt, KVQ_TXN_SNAPSHOT_RYW_DISABLE, 0) != 0)
        kvq__fdbc_misuse("cannot restore snapshot_ryw_disable");
    if (rc == 0) {
        kvq_bytes v;
        int present;
        rc = kvq_txn_get(&v, &present, tr->kt, key_name, (size_t)key_name_length, 0);
        if (rc != 0) {
            kvq_watch_cancel(kw);
            kvq_watch_destroy(kw);
        }
    }
    if (rc != 0)
        return kvq__fdbc_fut_error(FUT_VOID, rc);
    FDBFuture *f = kvq__fdbc_fut_new(FUT_VOID);
    f->kw = kw;
    f->db = tr->db;
    f->refs++; /* the watch thread's */
    FDBDatabase *d = tr->db;
    pthread_mutex_lock(&d->mu);
    f->wnext = d->watches;
    if (d->watches != NULL)
        d->watches->wprev = f;
    d->watches = f;
    d->watch_threads++;
    pthread_mutex_unlock(&d->mu);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    if (pthread_create(&th, &attr, watch_main, f) != 0) {
        /* No thread to wait: the watch ends at once, as cancelled (1029, as a storage server
         * that drops a watch says). */
        kvq_watch_cancel(kw);
        watch_main(f);
    }
    pthread_attr_destroy(&attr);
    return f;
}

static void tr_clear(FDBTransaction *tr, const uint8_t *key_name, int key_name_length)
{
    if (key_name == NULL || key_name_length < 0)
        kvq__fdbc_misuse("fdb_transaction_clear with a NULL key or a negative length");
    if (!kvq__fdbc_special_write(tr, 1, key_name, key_name_length, NULL, 0) && tr_writable(tr))
        defer(tr, kvq_txn_clear(tr->kt, key_name, (size_t)key_name_length));
}

/* Every later operation fails with transaction_cancelled (1025) until fdb_transaction_reset. */
static void tr_cancel(FDBTransaction *tr)
{
    stamps_complete(tr, FDB_ERR_TRANSACTION_CANCELLED);
    if (tr->reset_err == 0)
        tr->reset_err = FDB_ERR_TRANSACTION_CANCELLED;
}

typedef struct on_error_job {
    FDBTransaction *tr;
    FDBFuture *f;
    fdb_error_t err;
} on_error_job;

/* The thread of an fdb_transaction_on_error: the backoff, slept here off the caller's thread
 * (other calls on the transaction wait for it), then the retry or the failure. */
static void *on_error_main(void *arg)
{
    on_error_job *j = arg;
    FDBTransaction *tr = j->tr;
    pthread_mutex_lock(&tr->mu);
    /* kvq's retry rules are FoundationDB's: which errors are retried, the backoff, the retry
     * limit and the timeout, then the reset. */
    int rc = kvq_txn_on_error(tr->kt, j->err);
    if (rc == 0) {
        /* A timeout that fired during the backoff ends the retry, as in libfdb_c. */
        kvq__fdbc_tr_timeout_check(tr);
        rc = tr->reset_err;
    }
    if (rc == 0) {
        /* The retry resets what does not outlive it, as the engine does; the database's size
         * limit and snapshot read-your-writes choice apply again. */
        tr->deferred = 0;
        tr->system_keys = 0;
        tr->special_writes = 0;
        tr->commit_started = 0;
        defer(tr, kvq__fdbc_db_defaults(tr, 0));
    } else if (tr->reset_err == 0) {
        /* A transaction that is not to be retried is cancelled until it is reset (one whose
         * timeout fired stays timed out), as libfdb_c does from API 610. */
        tr->reset_err = rc == FDB_ERR_TRANSACTION_TIMED_OUT ? rc : FDB_ERR_TRANSACTION_CANCELLED;
    }
    tr->on_error_live = 0;
    pthread_cond_broadcast(&tr->cond);
    pthread_mutex_unlock(&tr->mu);
    /* The transaction is the caller's again before the future says so. */
    kvq__fdbc_fut_complete(j->f, rc);
    kvq__fdbc_fut_unref(j->f);
    free(j);
    return NULL;
}

/* The future is ready once the backoff has passed: with no error when the transaction was reset
 * for a retry, else with the error to report. A cancelled or timed-out transaction, or one whose
 * on_error failed, fails at once with that state's error (1025 or 1031), retrying nothing. */
static FDBFuture *tr_on_error(FDBTransaction *tr, fdb_error_t error)
{
    stamps_complete(tr, error != 0 ? error : FDB_ERR_TRANSACTION_CANCELLED);
    kvq__fdbc_tr_timeout_check(tr);
    if (tr->reset_err != 0)
        return kvq__fdbc_fut_error(FUT_VOID, tr->reset_err);
    if (error == 0) {
        tr->reset_err = FDB_ERR_TRANSACTION_CANCELLED;
        return kvq__fdbc_fut_error(FUT_VOID, FDB_ERR_CLIENT_INVALID_OPERATION);
    }
    FDBFuture *f = kvq__fdbc_fut_new(FUT_VOID);
    on_error_job *j = malloc(sizeof(*j));
    if (j == NULL)
        kvq__fdbc_misuse("out of memory");
    j->tr = tr;
    j->f = f;
    j->err = error;
    kvq__fdbc_fut_ref(f); /* the thread's */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    tr->on_error_live = 1;
    if (pthread_create(&th, &attr, on_error_main, j) != 0) {
        tr->on_error_live = 0;
        kvq__fdbc_fut_unref(f);
        free(j);
        kvq__fdbc_fut_complete(f, FDB_ERR_INTERNAL_ERROR);
    }
    pthread_attr_destroy(&attr);
    return f;
}

/* An error (a read before it, a version that is not positive) comes with the next read or the
 * commit, as libfdb_c defers it. */
static void tr_set_read_version(FDBTransaction *tr, int64_t version)
{
    if (tr->deferred == 0)
        defer(tr, kvq_txn_set_read_version(tr->kt, version));
}

static FDBFuture *tr_get_approximate_size(FDBTransaction *tr)
{
    fdb_error_t gate = kvq__fdbc_tr_error(tr, 0);
    if (gate != 0)
        return kvq__fdbc_fut_error(FUT_INT64, gate);
    FDBFuture *f = kvq__fdbc_fut_new(FUT_INT64);
    kvq__fdbc_fut_settle(f, kvq_txn_get_approximate_size(&f->i64, tr->kt));
    return f;
}

/* Tag throttling and cost accounting belong to a cluster's ratekeeper, which kvq has not. */
FDBFuture *fdb_transaction_get_tag_throttled_duration(FDBTransaction *tr)
{
    (void)tr;
    return kvq__fdbc_unsupported("fdb_transaction_get_tag_throttled_duration");
}

FDBFuture *fdb_transaction_get_total_cost(FDBTransaction *tr)
{
    (void)tr;
    return kvq__fdbc_unsupported("fdb_transaction_get_total_cost");
}

FDBFuture *fdb_transaction_get_blob_granule_ranges(FDBTransaction *tr, const uint8_t *b, int bl,
                                                   const uint8_t *e, int el, int range_limit)
{
    (void)tr, (void)b, (void)bl, (void)e, (void)el, (void)range_limit;
    return kvq__fdbc_unsupported("fdb_transaction_get_blob_granule_ranges");
}

FDBResult *fdb_transaction_read_blob_granules(FDBTransaction *tr, const uint8_t *b, int bl,
                                              const uint8_t *e, int el, int64_t begin_version,
                                              int64_t read_version,
                                              FDBReadBlobGranuleContext granule_context)
{
    (void)tr, (void)b, (void)bl, (void)e, (void)el, (void)begin_version, (void)read_version;
    (void)granule_context;
    kvq__fdbc_complain("fdb_transaction_read_blob_granules is not supported on a kvq directory");
    return kvq__fdbc_result_error(KVQ_EUNSUPPORTED_OPERATION);
}

FDBFuture *fdb_transaction_summarize_blob_granules(FDBTransaction *tr, const uint8_t *b, int bl,
                                                   const uint8_t *e, int el,
                                                   int64_t summary_version, int range_limit)
{
    (void)tr, (void)b, (void)bl, (void)e, (void)el, (void)summary_version, (void)range_limit;
    return kvq__fdbc_unsupported("fdb_transaction_summarize_blob_granules");
}

FDBFuture *fdb_transaction_read_blob_granules_description(FDBTransaction *tr, const uint8_t *b,
                                                          int bl, const uint8_t *e, int el,
                                                          int64_t begin_version,
                                                          int64_t read_version,
                                                          int64_t *read_version_out)
{
    (void)tr, (void)b, (void)bl, (void)e, (void)el, (void)begin_version, (void)read_version;
    (void)read_version_out;
    return kvq__fdbc_unsupported("fdb_transaction_read_blob_granules_description");
}

/* The transaction calls: each runs whole, one at a time (tr_lock). ------------------------- */

void fdb_transaction_reset(FDBTransaction *tr)
{
    tr_lock(tr);
    tr_reset(tr);
    tr_unlock(tr);
}

FDBFuture *fdb_transaction_on_error(FDBTransaction *tr, fdb_error_t error)
{
    tr_lock(tr);
    FDBFuture *f = tr_on_error(tr, error);
    tr_unlock(tr);
    return f;
}

fdb_error_t fdb_transaction_set_option(FDBTransaction *tr,
                                       FDBTransactionOption option,
                                       const uint8_t *value,
                                       int value_length)
{
    tr_lock(tr);
    fdb_error_t r = kvq__fdbc_tr_set_option(tr, option, value, value_length);
    tr_unlock(tr);
    return r;
}

FDBFuture *fdb_transaction_get_read_version(FDBTransaction *tr)
{
    tr_lock(tr);
    FDBFuture *r = tr_get_read_version(tr);
    tr_unlock(tr);
    return r;
}

FDBFuture *fdb_transaction_get(FDBTransaction *tr,
                               const uint8_t *key_name,
                               int key_name_length,
                               fdb_bool_t snapshot)
{
    tr_lock(tr);
    FDBFuture *r = tr_get(tr, key_name, key_name_length, snapshot);
    tr_unlock(tr);
    return r;
}

FDBFuture *fdb_transaction_get_range(FDBTransaction *tr,
                                     const uint8_t *begin_key_name,
                                     int begin_key_name_length,
                                     fdb_bool_t begin_or_equal,
                                     int begin_offset,
                                     const uint8_t *end_key_name,
                                     int end_key_name_length,
                                     fdb_bool_t end_or_equal,
                                     int end_offset,
                                     int limit,
                                     int target_bytes,
                                     FDBStreamingMode mode,
                                     int iteration,
                                     fdb_bool_t snapshot,
                                     fdb_bool_t reverse)
{
    tr_lock(tr);
    FDBFuture *r =
        kvq__fdbc_tr_get_range(tr, begin_key_name, begin_key_name_length, begin_or_equal,
                               begin_offset, end_key_name, end_key_name_length, end_or_equal,
                               end_offset, limit, target_bytes, mode, iteration, snapshot, reverse);
    tr_unlock(tr);
    return r;
}

void fdb_transaction_set(FDBTransaction *tr,
                         const uint8_t *key_name,
                         int key_name_length,
                         const uint8_t *value,
                         int value_length)
{
    tr_lock(tr);
    tr_set(tr, key_name, key_name_length, value, value_length);
    tr_unlock(tr);
}

void fdb_transaction_clear_range(FDBTransaction *tr,
                                 const uint8_t *begin_key_name,
                                 int begin_key_name_length,
                                 const uint8_t *end_key_name,
                                 int end_key_name_length)
{
    tr_lock(tr);
    tr_clear_range(tr, begin_key_name, begin_key_name_length, end_key_name, end_key_name_length);
    tr_unlock(tr);
}

void fdb_transaction_atomic_op(FDBTransaction *tr,
                               const uint8_t *key_name,
                               int key_name_length,
                               const uint8_t *param,
                               int param_length,
                               FDBMutationType operation_type)
{
    tr_lock(tr);
    tr_atomic_op(tr, key_name, key_name_length, param, param_length, operation_type);
    tr_unlock(tr);
}

fdb_error_t fdb_transaction_add_conflict_range(FDBTransaction *tr,
                                               const uint8_t *begin_key_name,
                                               int begin_key_name_length,
                                               const uint8_t *end_key_name,
                                               int end_key_name_length,
                                               FDBConflictRangeType type)
{
    tr_lock(tr);
    fdb_error_t r = kvq__fdbc_fdb_code(tr_add_conflict_range(
        tr, begin_key_name, begin_key_name_length, end_key_name, end_key_name_length, type));
    tr_unlock(tr);
    return r;
}

FDBFuture *fdb_transaction_commit(FDBTransaction *tr)
{
    tr_lock(tr);
    FDBFuture *r = tr_commit(tr);
    tr_unlock(tr);
    return r;
}

fdb_error_t fdb_transaction_get_committed_version(FDBTransaction *tr, int64_t *out_version)
{
    tr_lock(tr);
    fdb_error_t r = tr_get_committed_version(tr, out_version);
    tr_unlock(tr);
    return r;
}

FDBFuture *fdb_transaction_get_versionstamp(FDBTransaction *tr)
{
    tr_lock(tr);
    FDBFuture *r = tr_get_versionstamp(tr);
    tr_unlock(tr);
    return r;
}

FDBFuture *fdb_transaction_watch(FDBTransaction *tr, const uint8_t *key_name, int key_name_length)
{
    tr_lock(tr);
    FDBFuture *r = tr_watch(tr, key_name, key_name_length);
    tr_unlock(tr);
    return r;
}

void fdb_transaction_clear(FDBTransaction *tr, const uint8_t *key_name, int key_name_length)
{
    tr_lock(tr);
    tr_clear(tr, key_name, key_name_length);
    tr_unlock(tr);
}

void fdb_transaction_cancel(FDBTransaction *tr)
{
    tr_lock(tr);
    tr_cancel(tr);
    tr_unlock(tr);
}

FDBFuture *fdb_transaction_get_key(FDBTransaction *tr,
                                   const uint8_t *key_name,
                                   int key_name_length,
                                   fdb_bool_t or_equal,
                                   int offset,
                                   fdb_bool_t snapshot)
{
    tr_lock(tr);
    FDBFuture *r = kvq__fdbc_tr_get_key(tr, key_name, key_name_length, or_equal, offset, snapshot);
    tr_unlock(tr);
    return r;
}

void fdb_transaction_set_read_version(FDBTransaction *tr, int64_t version)
{
    tr_lock(tr);
    tr_set_read_version(tr, version);
    tr_unlock(tr);
}

FDBFuture *fdb_transaction_get_approximate_size(FDBTransaction *tr)
{
    tr_lock(tr);
    FDBFuture *r = tr_get_approximate_size(tr);
    tr_unlock(tr);
    return r;
}

FDBFuture *fdb_transaction_get_estimated_range_size_bytes(
    FDBTransaction *tr, const uint8_t *b, int bl, const uint8_t *e, int el)
{
    tr_lock(tr);
    FDBFuture *r = kvq__fdbc_tr_get_estimated_range_size_bytes(tr, b, bl, e, el);
    tr_unlock(tr);
    return r;
}

FDBFuture *fdb_transaction_get_range_split_points(
    FDBTransaction *tr, const uint8_t *b, int bl, const uint8_t *e, int el, int64_t chunk_size)
{
    tr_lock(tr);
    FDBFuture *r = kvq__fdbc_tr_get_range_split_points(tr, b, bl, e, el, chunk_size);
    tr_unlock(tr);
    return r;
}

FDBFuture *fdb_transaction_get_addresses_for_key(FDBTransaction *tr,
                                                 const uint8_t *key_name,
                                                 int key_name_length)
{
    tr_lock(tr);
    FDBFuture *r = kvq__fdbc_tr_get_addresses_for_key(tr, key_name, key_name_length);
    tr_unlock(tr);
    return r;
}
