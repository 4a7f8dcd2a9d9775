/* libkvq_fdb_c.so: futures (FDBFuture), their lifetime, callbacks and results, and the results
 * (FDBResult) of the blob-granule calls. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fdbc/fdbc_internal.h"

/* Each thread keeps a few freed futures for its next ones: a read makes and frees one, and the
 * allocation would otherwise be a good part of its cost. The cache is freed as the thread
 * ends. */
#define FUT_CACHE 8

static pthread_key_t fut_cache_key;

static pthread_once_t fut_cache_once = PTHREAD_ONCE_INIT;

typedef struct fut_cache {
    FDBFuture *v[FUT_CACHE];
    int n;
} fut_cache;

static void fut_cache_drop(void *p)
{
    fut_cache *c = p;
    for (int i = 0; i < c->n; i++)
        free(c->v[i]);
    free(c);
}

static void fut_cache_init(void)
{
    if (pthread_key_create(&fut_cache_key, fut_cache_drop) != 0)
        kvq__fdbc_misuse("cannot create a thread key");
}

static fut_cache *fut_cache_get(void)
{
    pthread_once(&fut_cache_once, fut_cache_init);
    fut_cache *c = pthread_getspecific(fut_cache_key);
    if (c == NULL) {
        c = calloc(1, sizeof(*c));
        if (c == NULL || pthread_setspecific(fut_cache_key, c) != 0) {
            free(c);
            return NULL;
        }
    }
    return c;
}

FDBFuture *kvq__fdbc_fut_new(int kind)
{
    fut_cache *c = fut_cache_get();
    FDBFuture *f = c != NULL && c->n > 0 ? c->v[--c->n] : malloc(sizeof(*f));
    if (f == NULL)
        kvq__fdbc_misuse("out of memory");
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cond, NULL);
    f->refs = 1;
    f->kind = kind;
    return f;
}

void kvq__fdbc_fut_ref(FDBFuture *f)
{
    pthread_mutex_lock(&f->mu);
    f->refs++;
    pthread_mutex_unlock(&f->mu);
}

/* Frees the future's byte results unless they sit in the future itself. */
static void bytes_free(FDBFuture *f)
{
    if (f->bytes != f->small)
        free(f->bytes);
    f->bytes = NULL;
}

static void fut_free(FDBFuture *f)
{
    bytes_free(f);
    free(f->kvs);
    free(f->keys);
    free(f->strs);
    free(f->more_cbs);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->mu);
    fut_cache *c = fut_cache_get();
    if (c != NULL && c->n < FUT_CACHE)
        c->v[c->n++] = f;
    else
        free(f);
}

void kvq__fdbc_fut_unref(FDBFuture *f)
{
    pthread_mutex_lock(&f->mu);
    int left = --f->refs;
    pthread_mutex_unlock(&f->mu);
    if (left == 0)
        fut_free(f);
}

/* Hands a completed future's callback to the network thread. */
static void net_post(FDBFuture *f)
{
    kvq__fdbc_fut_ref(f);
    pthread_mutex_lock(&kvq__fdbc_net.mu);
    if (kvq__fdbc_net.finished) {
        /* A stopped network runs nothing, as libfdb_c's. */
        pthread_mutex_unlock(&kvq__fdbc_net.mu);
        kvq__fdbc_fut_unref(f);
        return;
    }
    f->next = NULL;
    if (kvq__fdbc_net.tail != NULL)
        kvq__fdbc_net.tail->next = f;
    else
        kvq__fdbc_net.head = f;
    kvq__fdbc_net.tail = f;
    pthread_cond_broadcast(&kvq__fdbc_net.cond);
    pthread_mutex_unlock(&kvq__fdbc_net.mu);
}

/* The FoundationDB error for an outcome of kvq's: kvq's transaction errors are FoundationDB's
 * own numbers and pass unchanged; its own conditions (the 9000 band: a directory that cannot be
 * opened, a damaged file, a full disk) leave this library as the FoundationDB errors closest to
 * them, never as numbers FoundationDB does not have. */
fdb_error_t kvq__fdbc_fdb_code(int rc)
{
    switch (rc) {
    case KVQ_EINVAL:
        return FDB_ERR_CLIENT_INVALID_OPERATION;
    case KVQ_ENOTFOUND:
        return FDB_ERR_FILE_NOT_FOUND;
    case KVQ_EDAMAGED:
        return 1522; /* file_corrupt */
    case KVQ_EIO:
    case KVQ_ENOSPC:
        return 1510; /* io_error */
    case KVQ_EPERM:
        return 1514; /* file_not_writable */
    case KVQ_EBUSY:
        return 1529; /* lock_file_failure */
    case KVQ_EUNSUPPORTED:
        return KVQ_EUNSUPPORTED_OPERATION;
    default:
        return rc >= 9000 ? FDB_ERR_INTERNAL_ERROR : rc;
    }
}

/* Sets a future's outcome (once; later outcomes are ignored). The results must be in place. */
void kvq__fdbc_fut_complete(FDBFuture *f, fdb_error_t err)
{
    err = kvq__fdbc_fdb_code(err);
    pthread_mutex_lock(&f->mu);
    if (f->ready) {
        pthread_mutex_unlock(&f->mu);
        return;
    }
    f->err = err;
    __atomic_store_n(&f->ready, 1, __ATOMIC_RELEASE); /* after the results: see fut_lock */
    int post = f->cb_set;
    pthread_cond_broadcast(&f->cond);
    pthread_mutex_unlock(&f->mu);
    if (post)
        net_post(f);
}

/* Sets the outcome of a future this thread has just made and not yet handed out: nobody else
 * can see it, so no lock, and no callback can be set yet. */
void kvq__fdbc_fut_settle(FDBFuture *f, fdb_error_t err)
{
    f->ready = 1;
    f->err = kvq__fdbc_fdb_code(err);
}

FDBFuture *kvq__fdbc_fut_error(int kind, fdb_error_t err)
{
    FDBFuture *f = kvq__fdbc_fut_new(kind);
    kvq__fdbc_fut_settle(f, err);
    return f;
}

fdb_error_t fdb_future_block_until_ready(FDBFuture *f)
{
    /* A future that is ready has nothing to wait for (most are, at once: reads are local). */
    if (__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE)) {
        if (f->destroyed)
            kvq__fdbc_misuse("fdb_future_block_until_ready on a destroyed future");
        return 0;
    }
    /* Nothing completes unless the network thread runs: wait a while for it to start. */
    pthread_mutex_lock(&kvq__fdbc_net.mu);
    if (!kvq__fdbc_net.setup) {
        pthread_mutex_unlock(&kvq__fdbc_net.mu);
        kvq__fdbc_complain("fdb_future_block_until_ready before fdb_setup_network");
        return FDB_ERR_NETWORK_NOT_SETUP;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += NETWORK_WAIT_SEC;
    while (!kvq__fdbc_net.running && !kvq__fdbc_net.finished) {
        if (pthread_cond_timedwait(&kvq__fdbc_net.cond, &kvq__fdbc_net.mu, &deadline) ==
            ETIMEDOUT) {
            pthread_mutex_unlock(&kvq__fdbc_net.mu);
            kvq__fdbc_complain(
                "fdb_future_block_until_ready: nobody called fdb_run_network within %d s",
                NETWORK_WAIT_SEC);
            return FDB_ERR_NETWORK_NOT_SETUP;
        }
    }
    int finished = kvq__fdbc_net.finished;
    pthread_mutex_unlock(&kvq__fdbc_net.mu);
    pthread_mutex_lock(&f->mu);
    if (f->destroyed)
        kvq__fdbc_misuse("fdb_future_block_until_ready on a destroyed future");
    if (finished && !f->ready) {
        pthread_mutex_unlock(&f->mu);
        kvq__fdbc_complain("fdb_future_block_until_ready after the network was stopped");
        return FDB_ERR_NETWORK_NOT_SETUP;
    }
    while (!f->ready)
        pthread_cond_wait(&f->cond, &f->mu);
    pthread_mutex_unlock(&f->mu);
    return 0;
}

fdb_error_t fdb_future_set_callback(FDBFuture *f, FDBCallback callback, void *callback_parameter)
{
    pthread_mutex_lock(&f->mu);
    if (f->destroyed)
        kvq__fdbc_misuse("fdb_future_set_callback on a destroyed future");
    int ready = f->ready;
    if (ready) {
        /* Runs now, below; the future keeps nothing. */
    } else if (f->cb_set) {
        /* A callback set again (or another one) is added: each runs once, in order. */
        struct fut_cb *v = realloc(f->more_cbs, ((size_t)f->n_more_cbs + 1) * sizeof(*v));
        if (v == NULL)
            kvq__fdbc_misuse("out of memory");
        v[f->n_more_cbs].cb = callback;
        v[f->n_more_cbs].arg = callback_parameter;
        f->more_cbs = v;
        f->n_more_cbs++;
    } else {
        f->cb_set = 1;
        f->cb = callback;
        f->cb_arg = callback_parameter;
    }
    pthread_mutex_unlock(&f->mu);
    /* A ready future's callback runs at once, in this thread (libfdb_c may do either). */
    if (ready)
        callback(f, callback_parameter);
    return 0;
}

void fdb_future_cancel(FDBFuture *f)
{
    pthread_mutex_lock(&f->mu);
    if (f->ready) {
        pthread_mutex_unlock(&f->mu);
        return;
    }
    f->cancelled = 1;
    if (f->kw != NULL)
        kvq_watch_cancel(f->kw); /* wakes the watch's thread */
    pthread_mutex_unlock(&f->mu);
    kvq__fdbc_fut_complete(f, FDB_ERR_OPERATION_CANCELLED);
}

void fdb_future_destroy(FDBFuture *f)
{
    pthread_mutex_lock(&f->mu);
    if (f->destroyed)
        kvq__fdbc_misuse("fdb_future_destroy called twice on one future");
    f->destroyed = 1;
    int ready = f->ready;
    if (ready)
        f->refs--; /* the caller's reference; a ready future has nothing to cancel */
    int left = f->refs;
    pthread_mutex_unlock(&f->mu);
    if (!ready) {
        fdb_future_cancel(f);
        kvq__fdbc_fut_unref(f);
    } else if (left == 0) {
        fut_free(f);
    }
}

/* A ready future's outcome and results never change again (fdb_future_release_memory aside,
 * which its owner does not call while reading them), so its getters read them without the lock:
 * fut_lock takes the lock only for a future not yet ready. */
static int fut_lock(FDBFuture *f)
{
    if (__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&f->mu);
    return 1;
}

static void fut_unlock(FDBFuture *f, int locked)
{
    if (locked)
        pthread_mutex_unlock(&f->mu);
}

/* Checks that a future may be read as `kind` and returns its error. Called under fut_lock. */
static fdb_error_t fut_check(FDBFuture *f, int kind, const char *what)
{
    if (f->destroyed)
        kvq__fdbc_misuse("%s on a destroyed future", what);
    if (!f->ready)
        return FDB_ERR_FUTURE_NOT_SET;
    if (f->err != 0)
        return f->err;
    if (f->released)
        return FDB_ERR_FUTURE_RELEASED;
    if (f->kind != kind)
        kvq__fdbc_misuse("%s on a future of another kind (%d, not %d)", what, f->kind, kind);
    return 0;
}

fdb_error_t fdb_future_get_error(FDBFuture *f)
{
    pthread_mutex_lock(&f->mu);
    fdb_error_t err = f->ready ? f->err : FDB_ERR_FUTURE_NOT_SET;
    pthread_mutex_unlock(&f->mu);
    return err;
}

fdb_error_t fdb_future_get_int64(FDBFuture *f, int64_t *out)
{
    int locked = fut_lock(f);
    fdb_error_t err = fut_check(f, FUT_INT64, "fdb_future_get_int64");
    if (err == 0)
        *out = f->i64;
    fut_unlock(f, locked);
    return err;
}

fdb_error_t fdb_future_get_key(FDBFuture *f, const uint8_t **out_key, int *out_key_length)
{
    int locked = fut_lock(f);
    fdb_error_t err = fut_check(f, FUT_KEY, "fdb_future_get_key");
    if (err == 0) {
        *out_key = f->bytes;
        *out_key_length = f->len;
    }
    fut_unlock(f, locked);
    return err;
}

fdb_error_t fdb_future_get_value(FDBFuture *f,
                                 fdb_bool_t *out_present,
                                 const uint8_t **out_value,
                                 int *out_value_length)
{
    int locked = fut_lock(f);
    fdb_error_t err = fut_check(f, FUT_VALUE, "fdb_future_get_value");
    if (err == 0) {
        *out_present = f->present;
        *out_value = f->bytes;
        *out_value_length = f->len;
    }
    fut_unlock(f, locked);
    return err;
}

fdb_error_t fdb_future_get_keyvalue_array(FDBFuture *f,
                                          const FDBKeyValue **out_kv,
                                          int *out_count,
                                          fdb_bool_t *out_more)
{
    int locked = fut_lock(f);
    fdb_error_t err = fut_check(f, FUT_KV_ARRAY, "fdb_future_get_keyvalue_array");
    if (err == 0) {
        *out_kv = f->kvs;
        *out_count = f->count;
        *out_more = f->more;
    }
    fut_unlock(f, locked);
    return err;
}

fdb_bool_t fdb_future_is_ready(FDBFuture *f)
{
    pthread_mutex_lock(&f->mu);
    if (f->destroyed)
        kvq__fdbc_misuse("fdb_future_is_ready on a destroyed future");
    int r = f->ready;
    pthread_mutex_unlock(&f->mu);
    return r;
}

/* Frees a ready future's results; reading them afterwards gives future_released (1102). */
void fdb_future_release_memory(FDBFuture *f)
{
    pthread_mutex_lock(&f->mu);
    if (f->destroyed)
        kvq__fdbc_misuse("fdb_future_release_memory on a destroyed future");
    if (f->ready && f->err == 0) {
        bytes_free(f);
        free(f->kvs);
        free(f->keys);
        free(f->strs);
        f->kvs = NULL;
        f->keys = NULL;
        f->strs = NULL;
        f->len = f->count = 0;
        f->released = 1;
    }
    pthread_mutex_unlock(&f->mu);
}

fdb_error_t fdb_future_get_bool(FDBFuture *f, fdb_bool_t *out)
{
    int locked = fut_lock(f);
    fdb_error_t err = fut_check(f, FUT_BOOL, "fdb_future_get_bool");
    if (err == 0)
        *out = f->i64 != 0;
    fut_unlock(f, locked);
    return err;
}

fdb_error_t fdb_future_get_uint64(FDBFuture *f, uint64_t *out)
{
    int locked = fut_lock(f);
    fdb_error_t err = fut_check(f, FUT_UINT64, "fdb_future_get_uint64");
    if (err == 0)
        *out = (uint64_t)f->i64;
    fut_unlock(f, locked);
    return err;
}

fdb_error_t fdb_future_get_double(FDBFuture *f, double *out)
{
    int locked = fut_lock(f);
    fdb_error_t err = fut_check(f, FUT_DOUBLE, "fdb_future_get_double");
    if (err == 0)
        *out = f->dbl;
    fut_unlock(f, locked);
    return err;
}

fdb_error_t fdb_future_get_key_array(FDBFuture *f, const FDBKey **out_key_array, int *out_count)
{
    int locked = fut_lock(f);
    fdb_error_t err = fut_check(f, FUT_KEY_ARRAY, "fdb_future_get_key_array");
    if (err == 0) {
        *out_key_array = f->keys;
        *out_count = f->count;
    }
    fut_unlock(f, locked);
    return err;
}

fdb_error_t fdb_future_get_string_array(FDBFuture *f, const char ***out_strings, int *out_count)
{
    int locked = fut_lock(f);
    fdb_error_t err = fut_check(f, FUT_STRING_ARRAY, "fdb_future_get_string_array");
    if (err == 0) {
        *out_strings = f->strs;
        *out_count = f->count;
    }
    fut_unlock(f, locked);
    return err;
}

/* The getters of results only unsupported calls produce: such futures hold an error, which is
 * returned; any other future read this way is a misuse. */
static fdb_error_t get_none(FDBFuture *f, const char *what)
{
    pthread_mutex_lock(&f->mu);
    fdb_error_t err = fut_check(f, FUT_NONE, what);
    pthread_mutex_unlock(&f->mu);
    if (err == 0)
        kvq__fdbc_misuse("%s on a future that holds no such result", what);
    return err;
}

fdb_error_t fdb_future_get_mappedkeyvalue_array(FDBFuture *f,
                                                const FDBMappedKeyValue **out_kv,
                                                int *out_count,
                                                fdb_bool_t *out_more)
{
    (void)out_kv;
    (void)out_count;
    (void)out_more;
    return get_none(f, "fdb_future_get_mappedkeyvalue_array");
}

fdb_error_t fdb_future_get_keyrange_array(FDBFuture *f, const FDBKeyRange **out_ranges,
                                          int *out_count)
{
    (void)out_ranges;
    (void)out_count;
    return get_none(f, "fdb_future_get_keyrange_array");
}

fdb_error_t fdb_future_get_granule_summary_array(FDBFuture *f,
                                                 const FDBGranuleSummary **out_summaries,
                                                 int *out_count)
{
    (void)out_summaries;
    (void)out_count;
    return get_none(f, "fdb_future_get_granule_summary_array");
}

fdb_error_t fdb_future_readbg_get_descriptions(FDBFuture *f, FDBBGFileDescription **out,
                                               int *desc_count)
{
    (void)out;
    (void)desc_count;
    return get_none(f, "fdb_future_readbg_get_descriptions");
}

/* Results (FDBResult) come only from blob-granule calls, which are not supported: each holds an
 * error. */
struct FDB_result {
    fdb_error_t err;
};

FDBResult *kvq__fdbc_result_error(fdb_error_t err)
{
    FDBResult *r = malloc(sizeof(*r));
    if (r == NULL)
        kvq__fdbc_misuse("out of memory");
    r->err = err;
    return r;
}

void fdb_result_destroy(FDBResult *r)
{
    free(r);
}

fdb_error_t fdb_result_get_keyvalue_array(FDBResult *r, const FDBKeyValue **out_kv,
                                          int *out_count, fdb_bool_t *out_more)
{
    (void)out_kv;
    (void)out_more;
    *out_count = 0;
    return r->err;
}

fdb_error_t fdb_result_get_bg_mutations_array(FDBResult *r, const FDBBGMutation **out_mutations,
                                              int *out_count)
{
    (void)out_mutations;
    *out_count = 0;
    return r->err;
}

FDBResult *fdb_readbg_parse_snapshot_file(const uint8_t *file_data, int file_len,
                                          const FDBBGTenantPrefix *tenant_prefix,
                                          const FDBBGEncryptionCtx *encryption_ctx)
{
    (void)file_data;
    (void)file_len;
    (void)tenant_prefix;
    (void)encryption_ctx;
    return kvq__fdbc_result_error(KVQ_EUNSUPPORTED_OPERATION);
}

FDBResult *fdb_readbg_parse_delta_file(const uint8_t *file_data, int file_len,
                                       const FDBBGTenantPrefix *tenant_prefix,
                                       const FDBBGEncryptionCtx *encryption_ctx)
{
    (void)file_data;
    (void)file_len;
    (void)tenant_prefix;
    (void)encryption_ctx;
    return kvq__fdbc_result_error(KVQ_EUNSUPPORTED_OPERATION);
}

/* The future of a call kvq does not have: ready at once with unsupported_operation (2108), or
 * tenants_disabled (2136) for tenants (a FoundationDB cluster without tenants says the same). */
FDBFuture *kvq__fdbc_unsupported(const char *what)
{
    kvq__fdbc_complain("%s is not supported on a kvq directory", what);
    return kvq__fdbc_fut_error(FUT_NONE, KVQ_EUNSUPPORTED_OPERATION);
}
