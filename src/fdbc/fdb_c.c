/* FoundationDB's C client API served by kvq's embedded engine: libkvq_fdb_c.so. Programs and
 * bindings written for FoundationDB load it as libfdb_c.so (a symlink of that name sits beside
 * it) and run on a local kvq directory, named by a line `kvq:<directory>` in the cluster file
 * (or by $KVQ_FDBC_DIR). Range reads answer in pages sized by the streaming mode, as a storage
 * server does. kvq's own fdb engine is tested through this library.
 *
 * It checks that it is driven the way libfdb_c must be driven, and that what kvq promises
 * survives the trip:
 *
 * - the API version is selected first and once (2200/2201/2202/2203), the network is set up
 *   once (2009), run on a thread of its own and stopped (2008 when misused); futures complete
 *   only once the network thread runs, and callbacks of futures that complete later run on
 *   that thread;
 * - futures are real objects that own their results until fdb_future_destroy, which must come
 *   exactly once (a second destroy, or reading a future as the wrong kind, aborts, as using
 *   freed memory would in libfdb_c);
 * - errors of write calls (which return nothing) are deferred to the next read or the commit;
 *   error numbers are FoundationDB's (kvq's own conditions are given FoundationDB's closest
 *   numbers), with FoundationDB's texts;
 * - any thread may call anything, several threads one transaction at once: each call on a
 *   transaction runs whole while its other calls wait, as libfdb_c runs them one after another
 *   on its network thread;
 * - a transaction's states are FoundationDB's: cancelled, timed out (a timeout that has passed
 *   has fired, counted from the transaction's start), used after its commit, and their errors
 *   through on_error;
 * - watches complete from another thread, or with 1101 when cancelled.
 *
 * Three environment variables (the first two read as each transaction is created) let an
 * application test itself against conditions a cluster
 * brings: $KVQ_FDBC_PAGE_ROWS (range reads answer at most that many rows at a time, so that
 * paging loops run on small data), $KVQ_FDBC_READ_DELAY_MS (every read waits that long first,
 * as from a slow storage server) and $KVQ_FDBC_MAX_API_VERSION (the library says it is that
 * old, 710 for a 7.1 client).
 *
 * Transactions, conflicts, versionstamps and watches are the embedded engine's, which has
 * FoundationDB's semantics. It is one machine: no cluster-wide failures, no latency model.
 * What differs is listed in docs/fdb.md. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kvq/kvq.h"
#include "engine/fdb/fdb_api.h"
#include "fdbc/fdbc_extra.h"
#include "fdbc/fdbc_internal.h"

#define KVQ_FDB_PROTOTYPE(ret, name, params) ret name params;
KVQ_FDB_FUNCTIONS(KVQ_FDB_PROTOTYPE)
#undef KVQ_FDB_PROTOTYPE

#define MAX_API_VERSION  730

/* Errors of get_range's parameters (as fdb_c.h's caller meets them). */
enum { FDB_ERR_RANGE_LIMITS_INVALID = 2012, FDB_ERR_EXACT_MODE_WITHOUT_LIMITS = 2210 };
/* A file an option names does not exist. */
enum { FDB_ERR_FILE_NOT_FOUND = 1511 };
/* A transaction's timeout fired; a transaction was used once its commit was attempted. */
enum { FDB_ERR_TRANSACTION_TIMED_OUT = 1031, FDB_ERR_USED_DURING_COMMIT = 2017 };
#define NETWORK_WAIT_SEC 5

/* A misuse that a real client would punish with a crash or a hang: stop loudly. */
static void misuse(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("libkvq_fdb_c: misuse: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

static void complain(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("libkvq_fdb_c: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* The network ------------------------------------------------------------------------------ */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int api;                /* the selected API version; 0 until then */
    int setup;              /* fdb_setup_network was called */
    int running;            /* fdb_run_network is in its loop */
    int stop;               /* fdb_stop_network was called */
    int finished;           /* fdb_run_network returned */
    FDBFuture *head, *tail; /* futures whose callbacks the network thread is to run */
    struct net_hook {
        void (*fn)(void *);
        void *arg;
    } hooks[16]; /* fdb_add_network_thread_completion_hook, run as fdb_run_network ends */
    int n_hooks;
} net = { .mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

/* Futures ---------------------------------------------------------------------------------- */

enum {
    FUT_VOID,
    FUT_INT64,
    FUT_KEY,
    FUT_VALUE,
    FUT_KV_ARRAY,
    FUT_BOOL,
    FUT_UINT64,
    FUT_DOUBLE,
    FUT_KEY_ARRAY,
    FUT_STRING_ARRAY,
    FUT_NONE /* the future of an unsupported call: it only ever holds an error */
};

struct FDB_future {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int refs; /* the caller's handle, the network queue, a watch thread, a transaction */
    int kind;
    int ready;
    fdb_error_t err;
    int destroyed; /* fdb_future_destroy was called */
    int released;  /* fdb_future_release_memory was called: the results are gone */
    int cb_set;
    FDBCallback cb; /* the first callback set */
    void *cb_arg;
    struct fut_cb {
        FDBCallback cb;
        void *arg;
    } *more_cbs; /* callbacks set after the first, in order */
    int n_more_cbs;
    /* Results, owned by the future. */
    int64_t i64;
    uint8_t *bytes; /* malloc'd, or `small` */
    uint8_t small[48];
    int len;
    int present;
    FDBKeyValue *kvs;
    FDBKey *keys;
    const char **strs;
    double dbl;
    int count;
    int more;
    /* A watch: the embedded watch it waits on (its thread's until it ends). */
    kvq_watch *kw;
    int cancelled;
    struct FDB_database *db;
    FDBFuture *wprev, *wnext; /* the database's live watches */
    FDBFuture *next;          /* the network queue, or a transaction's pending stamps */
};

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
        misuse("cannot create a thread key");
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

static FDBFuture *fut_new(int kind)
{
    fut_cache *c = fut_cache_get();
    FDBFuture *f = c != NULL && c->n > 0 ? c->v[--c->n] : malloc(sizeof(*f));
    if (f == NULL)
        misuse("out of memory");
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cond, NULL);
    f->refs = 1;
    f->kind = kind;
    return f;
}

static void fut_ref(FDBFuture *f)
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

static void fut_unref(FDBFuture *f)
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
    fut_ref(f);
    pthread_mutex_lock(&net.mu);
    if (net.finished) {
        /* A stopped network runs nothing, as libfdb_c's. */
        pthread_mutex_unlock(&net.mu);
        fut_unref(f);
        return;
    }
    f->next = NULL;
    if (net.tail != NULL)
        net.tail->next = f;
    else
        net.head = f;
    net.tail = f;
    pthread_cond_broadcast(&net.cond);
    pthread_mutex_unlock(&net.mu);
}

/* The FoundationDB error for an outcome of kvq's: kvq's transaction errors are FoundationDB's
 * own numbers and pass unchanged; its own conditions (the 9000 band: a directory that cannot be
 * opened, a damaged file, a full disk) leave this library as the FoundationDB errors closest to
 * them, never as numbers FoundationDB does not have. */
static fdb_error_t fdb_code(int rc)
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
static void fut_complete(FDBFuture *f, fdb_error_t err)
{
    err = fdb_code(err);
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
static void fut_settle(FDBFuture *f, fdb_error_t err)
{
    f->ready = 1;
    f->err = fdb_code(err);
}

static FDBFuture *fut_error(int kind, fdb_error_t err)
{
    FDBFuture *f = fut_new(kind);
    fut_settle(f, err);
    return f;
}

/* Setup ------------------------------------------------------------------------------------ */

int fdb_get_max_api_version(void)
{
    /* $KVQ_FDBC_MAX_API_VERSION plays an older client (710). */
    const char *env = getenv("KVQ_FDBC_MAX_API_VERSION");
    int v = env != NULL ? atoi(env) : 0;
    return v > 0 ? v : MAX_API_VERSION;
}

const char *fdb_get_client_version(void)
{
    return "kvq " KVQ_VERSION_STRING " (FoundationDB's C API on a kvq directory)";
}

/* FoundationDB's own texts (fdb_errors.c): "Success" for 0, "UNKNOWN_ERROR" for a code that
 * names no error, and unknown_error's text for codes outside 0..30000. */
const char *fdb_get_error(fdb_error_t code)
{
    return kvq__fdbc_message(code);
}

fdb_error_t fdb_select_api_version_impl(int runtime_version, int header_version)
{
    fdb_error_t err = 0;
    pthread_mutex_lock(&net.mu);
    if (net.api != 0)
        err = FDB_ERR_API_VERSION_ALREADY_SET;
    else if (runtime_version > header_version)
        err = FDB_ERR_API_VERSION_INVALID;
    else if (header_version > fdb_get_max_api_version() || runtime_version < 13)
        err = FDB_ERR_API_VERSION_NOT_SUPPORTED;
    else
        net.api = runtime_version;
    pthread_mutex_unlock(&net.mu);
    return err;
}

fdb_error_t fdb_setup_network(void)
{
    fdb_error_t err = 0;
    pthread_mutex_lock(&net.mu);
    if (net.api == 0)
        err = FDB_ERR_API_VERSION_UNSET;
    else if (net.setup)
        err = FDB_ERR_NETWORK_ALREADY_SETUP;
    else
        net.setup = 1;
    pthread_mutex_unlock(&net.mu);
    return err;
}

fdb_error_t fdb_run_network(void)
{
    pthread_mutex_lock(&net.mu);
    if (!net.setup) {
        pthread_mutex_unlock(&net.mu);
        return FDB_ERR_NETWORK_NOT_SETUP;
    }
    if (net.running || net.finished) {
        pthread_mutex_unlock(&net.mu);
        return FDB_ERR_NETWORK_ALREADY_SETUP;
    }
    net.running = 1;
    pthread_cond_broadcast(&net.cond);
    for (;;) {
        /* Callbacks queued before the stop still run. */
        while (net.head != NULL) {
            FDBFuture *f = net.head;
            net.head = f->next;
            if (net.head == NULL)
                net.tail = NULL;
            pthread_mutex_unlock(&net.mu);
            /* Every callback set on the future, in the order they were set. */
            f->cb(f, f->cb_arg);
            for (int i = 0; i < f->n_more_cbs; i++)
                f->more_cbs[i].cb(f, f->more_cbs[i].arg);
            fut_unref(f);
            pthread_mutex_lock(&net.mu);
        }
        if (net.stop)
            break;
        pthread_cond_wait(&net.cond, &net.mu);
    }
    net.running = 0;
    net.finished = 1;
    pthread_cond_broadcast(&net.cond);
    int n_hooks = net.n_hooks;
    pthread_mutex_unlock(&net.mu);
    /* As libfdb_c does when its network thread is about to end. */
    for (int i = 0; i < n_hooks; i++)
        net.hooks[i].fn(net.hooks[i].arg);
    return 0;
}

fdb_error_t fdb_stop_network(void)
{
    pthread_mutex_lock(&net.mu);
    if (!net.setup) {
        pthread_mutex_unlock(&net.mu);
        return FDB_ERR_NETWORK_NOT_SETUP;
    }
    net.stop = 1;
    pthread_cond_broadcast(&net.cond);
    pthread_mutex_unlock(&net.mu);
    return 0;
}

/* Futures ---------------------------------------------------------------------------------- */

fdb_error_t fdb_future_block_until_ready(FDBFuture *f)
{
    /* A future that is ready has nothing to wait for (most are, at once: reads are local). */
    if (__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE)) {
        if (f->destroyed)
            misuse("fdb_future_block_until_ready on a destroyed future");
        return 0;
    }
    /* Nothing completes unless the network thread runs: wait a while for it to start. */
    pthread_mutex_lock(&net.mu);
    if (!net.setup) {
        pthread_mutex_unlock(&net.mu);
        complain("fdb_future_block_until_ready before fdb_setup_network");
        return FDB_ERR_NETWORK_NOT_SETUP;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += NETWORK_WAIT_SEC;
    while (!net.running && !net.finished) {
        if (pthread_cond_timedwait(&net.cond, &net.mu, &deadline) == ETIMEDOUT) {
            pthread_mutex_unlock(&net.mu);
            complain("fdb_future_block_until_ready: nobody called fdb_run_network within %d s",
                     NETWORK_WAIT_SEC);
            return FDB_ERR_NETWORK_NOT_SETUP;
        }
    }
    int finished = net.finished;
    pthread_mutex_unlock(&net.mu);
    pthread_mutex_lock(&f->mu);
    if (f->destroyed)
        misuse("fdb_future_block_until_ready on a destroyed future");
    if (finished && !f->ready) {
        pthread_mutex_unlock(&f->mu);
        complain("fdb_future_block_until_ready after the network was stopped");
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
        misuse("fdb_future_set_callback on a destroyed future");
    int ready = f->ready;
    if (ready) {
        /* Runs now, below; the future keeps nothing. */
    } else if (f->cb_set) {
        /* A callback set again (or another one) is added: each runs once, in order. */
        struct fut_cb *v = realloc(f->more_cbs, ((size_t)f->n_more_cbs + 1) * sizeof(*v));
        if (v == NULL)
            misuse("out of memory");
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
    fut_complete(f, FDB_ERR_OPERATION_CANCELLED);
}

void fdb_future_destroy(FDBFuture *f)
{
    pthread_mutex_lock(&f->mu);
    if (f->destroyed)
        misuse("fdb_future_destroy called twice on one future");
    f->destroyed = 1;
    int ready = f->ready;
    if (ready)
        f->refs--; /* the caller's reference; a ready future has nothing to cancel */
    int left = f->refs;
    pthread_mutex_unlock(&f->mu);
    if (!ready) {
        fdb_future_cancel(f);
        fut_unref(f);
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
        misuse("%s on a destroyed future", what);
    if (!f->ready)
        return FDB_ERR_FUTURE_NOT_SET;
    if (f->err != 0)
        return f->err;
    if (f->released)
        return FDB_ERR_FUTURE_RELEASED;
    if (f->kind != kind)
        misuse("%s on a future of another kind (%d, not %d)", what, f->kind, kind);
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

/* Databases -------------------------------------------------------------------------------- */

struct FDB_database {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int refs;          /* the handle and each transaction */
    int watch_threads; /* threads waiting on embedded watches */
    FDBFuture *watches;
    kvq_db *kdb;
    char *conn;         /* the connection string (\xff\xff/connection_string) */
    char *cluster_file; /* the cluster file's path, or "" (\xff\xff/cluster_file_path) */
    /* Transaction options set on the database (fdb_database_set_option), given to each new
     * transaction: timeout, retry limit, max retry delay, size limit; bit i of tr_has_default
     * is set once tr_defaults[i] is. */
    int64_t tr_defaults[4];
    unsigned tr_has_default;
    int snapshot_ryw; /* 0, or the snapshot RYW option every new transaction gets */
};

/* The directory a connection string names: $KVQ_FDBC_DIR when set, else the string
 * `kvq:<directory>`. */
static fdb_error_t dir_of(const char *line, char *dir, size_t cap)
{
    const char *env = getenv("KVQ_FDBC_DIR");
    const char *d = NULL;
    if (env != NULL && env[0] != '\0')
        d = env;
    else if (strncmp(line, "kvq:", 4) == 0 && line[4] != '\0')
        d = line + 4;
    if (d == NULL || strlen(d) >= cap) {
        complain("no kvq directory: write `kvq:<directory>` as the cluster file's first line "
                 "(or set $KVQ_FDBC_DIR)");
        return FDB_ERR_CONNECTION_STRING_INVALID;
    }
    memcpy(dir, d, strlen(d) + 1);
    return 0;
}

/* Creates the directories above `dir` that are missing (as mkdir -p; kvq_db_open creates
 * `dir` itself). 0, or the FoundationDB error for the directory that could not be made. */
static fdb_error_t make_parents(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s", dir);
    for (char *p = path + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST) {
            int e = errno;
            complain("cannot create the directory %s: %s", path, strerror(e));
            return e == EACCES || e == EPERM || e == EROFS ? 1514 /* file_not_writable */
                   : e == ENOSPC || e == EIO              ? 1510 /* io_error */
                                                          : FDB_ERR_FILE_NOT_FOUND;
        }
        *p = '/';
    }
    return 0;
}

/* Opens the database a connection string names; cluster_file is the file it came from. */
static fdb_error_t db_open(const char *conn, const char *cluster_file, FDBDatabase **out_database)
{
    *out_database = NULL;
    pthread_mutex_lock(&net.mu);
    fdb_error_t err = net.api == 0 ? FDB_ERR_API_VERSION_UNSET
                      : !net.setup ? FDB_ERR_NETWORK_NOT_SETUP
                                   : 0;
    pthread_mutex_unlock(&net.mu);
    if (err != 0)
        return err;
    char dir[4096];
    err = dir_of(conn, dir, sizeof(dir));
    if (err == 0)
        err = make_parents(dir);
    if (err != 0)
        return err;
    FDBDatabase *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return FDB_ERR_INTERNAL_ERROR;
    d->conn = strdup(conn);
    d->cluster_file = strdup(cluster_file);
    if (d->conn == NULL || d->cluster_file == NULL) {
        free(d->conn);
        free(d->cluster_file);
        free(d);
        return FDB_ERR_INTERNAL_ERROR;
    }
    /* FoundationDB's transactions retry without limit unless told otherwise (retry_limit -1),
     * and have no timeout: kvq's defaults for its own retry loop (100 retries) do not apply. */
    kvq_db_options opts = KVQ_DB_OPTIONS_INIT;
    opts.retry_limit = -1;
    opts.timeout_ms = 0;
    int rc = kvq_db_open(&d->kdb, dir, &opts);
    if (rc != 0) {
        complain("cannot open the embedded database %s: %s", dir, kvq_last_error());
        free(d->conn);
        free(d->cluster_file);
        free(d);
        return fdb_code(rc);
    }
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cond, NULL);
    d->refs = 1;
    *out_database = d;
    return 0;
}

/* The cluster file libfdb_c reads when none is named (ClusterConnectionFile's lookup): the one
 * $FDB_CLUSTER_FILE names (that one only, whether it exists or not), else fdb.cluster in the
 * working directory, else /etc/foundationdb/fdb.cluster. */
static const char *default_cluster_file(void)
{
    const char *env = getenv("FDB_CLUSTER_FILE");
    if (env != NULL)
        return env;
    struct stat st;
    if (stat("fdb.cluster", &st) == 0 && !S_ISDIR(st.st_mode))
        return "fdb.cluster";
    return "/etc/foundationdb/fdb.cluster";
}

/* The cluster file's first line is the connection string. The file must exist, as for libfdb_c
 * (no_cluster_file_found, 1515; file_not_readable, 1513, when it cannot be read), except that
 * without a named file $KVQ_FDBC_DIR alone may name the directory. */
fdb_error_t fdb_create_database(const char *cluster_file_path, FDBDatabase **out_database)
{
    if (out_database == NULL)
        misuse("fdb_create_database with a NULL out_database");
    *out_database = NULL;
    int named = cluster_file_path != NULL && cluster_file_path[0] != '\0';
    const char *file = named ? cluster_file_path : default_cluster_file();
    char line[4096] = "";
    char path[4096] = "";
    FILE *fp = file[0] != '\0' ? fopen(file, "r") : NULL;
    if (fp == NULL) {
        int e = file[0] != '\0' ? errno : ENOENT;
        const char *env = getenv("KVQ_FDBC_DIR");
        if (!named && env != NULL && env[0] != '\0')
            return db_open("", "", out_database);
        complain("cannot read the cluster file %s: %s", file[0] != '\0' ? file : "(none)",
                 strerror(e));
        return e == ENOENT ? 1515 /* no_cluster_file_found */ : 1513 /* file_not_readable */;
    }
    if (fgets(line, sizeof(line), fp) == NULL)
        line[0] = '\0';
    fclose(fp);
    line[strcspn(line, "\r\n")] = '\0';
    if (realpath(file, path) == NULL)
        snprintf(path, sizeof(path), "%s", file);
    return db_open(line, path, out_database);
}

fdb_error_t fdb_create_database_from_connection_string(const char *connection_string,
                                                       FDBDatabase **out_database)
{
    if (connection_string == NULL || out_database == NULL)
        misuse("fdb_create_database_from_connection_string with a NULL argument");
    return db_open(connection_string, "", out_database);
}

/* Drops a reference; the last one cancels the watches still waiting, waits for their threads
 * and closes the embedded database. */
static void db_unref(FDBDatabase *d)
{
    pthread_mutex_lock(&d->mu);
    if (--d->refs > 0) {
        pthread_mutex_unlock(&d->mu);
        return;
    }
    for (FDBFuture *f = d->watches; f != NULL; f = f->wnext) {
        pthread_mutex_lock(&f->mu);
        f->cancelled = 1;
        if (f->kw != NULL)
            kvq_watch_cancel(f->kw);
        pthread_mutex_unlock(&f->mu);
    }
    while (d->watch_threads > 0)
        pthread_cond_wait(&d->cond, &d->mu);
    pthread_mutex_unlock(&d->mu);
    kvq_db_close(d->kdb);
    free(d->conn);
    free(d->cluster_file);
    pthread_cond_destroy(&d->cond);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

void fdb_database_destroy(FDBDatabase *d)
{
    /* Transactions keep the database alive, as in libfdb_c. */
    db_unref(d);
}

/* Transactions ----------------------------------------------------------------------------- */

/* libfdb_c runs every call on a transaction on its network thread, one after another, so a
 * program may call a transaction from several threads at once (FoundationDB's bindingtester
 * does, with transactions its threads share). Here the calls run on the caller's thread: `mu`
 * makes them run one at a time, as whole calls, and the embedded transaction below is only ever
 * used under it. A call waits while another runs, including a commit and on_error's backoff. */
struct FDB_transaction {
    pthread_mutex_t mu;
    pthread_cond_t cond;  /* on_error's thread has ended */
    FDBDatabase *db;
    kvq_txn *kt;
    fdb_error_t deferred; /* the first error of a call that returns nothing */
    /* Set once the transaction is cancelled (1025), its timeout has fired (1031) or an
     * on_error failed (1025): reads, watches, the commit and on_error fail with it until a
     * reset (or, for none of these, a retry). libfdb_c's transactions keep this state (their
     * "reset promise") apart from the deferred error, which they report first. */
    fdb_error_t reset_err;
    /* The timeout (500) in force, 0 for none, and when the transaction started (created or
     * reset; a retry keeps it), in microseconds of CLOCK_MONOTONIC: a timeout fires once that
     * long has passed, whenever it was set. */
    int64_t timeout_ms;
    int64_t start_us;
    FDBFuture *stamps;    /* versionstamp futures waiting for the commit */
    int on_error_live;    /* the thread of an fdb_transaction_on_error is running */
    /* $KVQ_FDBC_READ_DELAY_MS and $KVQ_FDBC_PAGE_ROWS, read when the transaction is created
     * (0: none). */
    long read_delay_ms;
    int page_rows;
    /* Kept as the engine keeps them (until a reset or a retry): access_system_keys or
     * read_system_keys was set (key selectors may then resolve into the system keys), and
     * snapshot reads do not see the transaction's writes (snapshot_ryw_disable). */
    int system_keys;
    int snapshot_no_ryw;
    int special_writes; /* special_key_space_enable_writes, until a reset or a retry */
    int commit_started; /* a commit was attempted, until a reset or a retry */
};

static void knobs_read(FDBTransaction *tr)
{
    const char *env = getenv("KVQ_FDBC_READ_DELAY_MS");
    tr->read_delay_ms = env != NULL && atol(env) > 0 ? atol(env) : 0;
    env = getenv("KVQ_FDBC_PAGE_ROWS");
    tr->page_rows = env != NULL && atoi(env) > 0 ? atoi(env) : 0;
}

/* Takes the transaction for one call: waits for the calls of other threads, and for the thread
 * of an fdb_transaction_on_error (its backoff and retry) to end. */
static void tr_lock(FDBTransaction *tr)
{
    if (tr == NULL)
        misuse("a transaction call on a NULL transaction");
    pthread_mutex_lock(&tr->mu);
    while (tr->on_error_live)
        pthread_cond_wait(&tr->cond, &tr->mu);
}

static void tr_unlock(FDBTransaction *tr)
{
    pthread_mutex_unlock(&tr->mu);
}

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A timeout that has passed has fired, as libfdb_c's timer would have fired by now: the
 * transaction stays timed out (1031) until it is reset, whatever timeout is set afterwards. */
static void tr_timeout_check(FDBTransaction *tr)
{
    if (tr->reset_err == 0 && tr->timeout_ms > 0 &&
        mono_us() - tr->start_us >= tr->timeout_ms * 1000)
        tr->reset_err = FDB_ERR_TRANSACTION_TIMED_OUT;
}

/* The error a call fails with before it starts, as ReadYourWritesTransaction orders them: the
 * deferred error of a call that returned nothing; then, for a call that may not follow a commit
 * (`after_commit`: reads, writes, watches, the commit itself), used_during_commit (2017) once a
 * commit has been attempted, which also leaves the transaction in that state until a reset or a
 * retry; then the state of a cancelled or timed-out transaction. */
static fdb_error_t tr_error(FDBTransaction *tr, int after_commit)
{
    tr_timeout_check(tr);
    if (tr->deferred != 0)
        return tr->deferred;
    if (after_commit && tr->commit_started) {
        if (tr->reset_err == 0)
            tr->reset_err = FDB_ERR_USED_DURING_COMMIT;
        return FDB_ERR_USED_DURING_COMMIT;
    }
    return tr->reset_err;
}

/* Whether a write may go to the embedded transaction: not after a deferred error (the first is
 * kept), and not once a commit was attempted (used_during_commit, deferred). */
static int tr_writable(FDBTransaction *tr)
{
    if (tr->deferred != 0)
        return 0;
    fdb_error_t err = tr_error(tr, 1);
    if (err == FDB_ERR_USED_DURING_COMMIT)
        tr->deferred = err;
    return err != FDB_ERR_USED_DURING_COMMIT;
}

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
    tr_timeout_check(tr);
    fdb_error_t err = kvq_txn_set_option(tr->kt, KVQ_TXN_TIMEOUT_MS, v);
    if (err == 0)
        tr->timeout_ms = v;
    return err;
}

static void defer(FDBTransaction *tr, int rc)
{
    if (rc != 0 && tr->deferred == 0)
        tr->deferred = rc;
}

/* Gives a transaction the database's transaction options (fdb_database_set_option), as it is
 * created and each time it is reset (`all`), and after a retry (not `all`): a retry keeps the
 * timeout, retry limit and max retry delay the transaction had (FoundationDB's persistent
 * options, from API 610) but not its size limit or snapshot read-your-writes choice, which go
 * back to the database's. The transaction may override them. */
static int db_defaults(FDBTransaction *tr, int all)
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

fdb_error_t fdb_database_create_transaction(FDBDatabase *d, FDBTransaction **out_transaction)
{
    if (d == NULL || out_transaction == NULL)
        misuse("fdb_database_create_transaction with a NULL argument");
    *out_transaction = NULL;
    FDBTransaction *tr = calloc(1, sizeof(*tr));
    if (tr == NULL)
        return FDB_ERR_INTERNAL_ERROR;
    int rc = kvq_txn_create(&tr->kt, d->kdb);
    if (rc != 0) {
        free(tr);
        return fdb_code(rc);
    }
    pthread_mutex_lock(&d->mu);
    d->refs++;
    pthread_mutex_unlock(&d->mu);
    pthread_mutex_init(&tr->mu, NULL);
    pthread_cond_init(&tr->cond, NULL);
    tr->db = d;
    tr->start_us = mono_us();
    knobs_read(tr);
    rc = db_defaults(tr, 1);
    if (rc != 0) {
        fdb_transaction_destroy(tr);
        return fdb_code(rc);
    }
    *out_transaction = tr;
    return 0;
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
                    misuse("out of memory");
                memcpy(f->bytes, stamp, sizeof(stamp));
                f->len = (int)sizeof(stamp);
            }
        }
        fut_complete(f, e);
        fut_unref(f);
    }
}

void fdb_transaction_destroy(FDBTransaction *tr)
{
    /* Waits for the calls of other threads and for on_error's thread; using the transaction
     * once it is destroyed is the caller's error, as with libfdb_c. */
    tr_lock(tr);
    stamps_complete(tr, FDB_ERR_TRANSACTION_CANCELLED);
    /* Uncommitted watches end with 1025 through the embedded engine. */
    kvq_txn_destroy(tr->kt);
    db_unref(tr->db);
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
    tr->start_us = mono_us();
    tr->system_keys = 0;
    tr->special_writes = 0;
    tr->commit_started = 0;
    defer(tr, db_defaults(tr, 1));
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
        pthread_mutex_lock(&net.mu);
        int api = net.api;
        pthread_mutex_unlock(&net.mu);
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

static fdb_error_t tr_set_option(FDBTransaction *tr,
                                 FDBTransactionOption option,
                                 const uint8_t *value,
                                 int value_length)
{
    if (value_length < 0)
        return FDB_ERR_INVALID_OPTION_VALUE;
    int known = tr_option_known((int)option);
    if (known != 1) {
        complain("transaction option %d is not supported on a kvq directory", (int)option);
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

static FDBFuture *tr_get_read_version(FDBTransaction *tr)
{
    fdb_error_t gate = tr_error(tr, 0);
    if (gate != 0)
        return fut_error(FUT_INT64, gate);
    FDBFuture *f = fut_new(FUT_INT64);
    fut_settle(f, kvq_txn_get_read_version(&f->i64, tr->kt));
    return f;
}

/* $KVQ_FDBC_READ_DELAY_MS plays a slow storage server: reads wait that long first. */
static void read_delay(const FDBTransaction *tr)
{
    long ms = tr->read_delay_ms;
    if (ms > 0) {
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

static uint8_t *copy_bytes(const uint8_t *p, size_t n)
{
    uint8_t *c = malloc(n > 0 ? n : 1);
    if (c == NULL)
        misuse("out of memory");
    if (n > 0)
        memcpy(c, p, n);
    return c;
}

/* Whether key a sorts before key b. */
static int key_less(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c < 0 || (c == 0 && alen < blen);
}

/* Special keys (from 0xFF 0xFF) --------------------------------------------------------------- */

/* FoundationDB materialises these keys when they are read. Those with a local meaning answer:
 * the cluster file's path, the connection string, a status document, and the (always empty)
 * conflicting-keys module. Reads elsewhere in the special space fail with
 * special_keys_no_module_found (2113); writes with special_keys_write_disabled (2114). */
#define SPECIAL_CONFLICTING "\xff\xff/transaction/conflicting_keys/"

static int is_special(const uint8_t *k, size_t len)
{
    return len >= 2 && k[0] == 0xff && k[1] == 0xff;
}

static int has_prefix(const uint8_t *k, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && memcmp(k, prefix, n) == 0;
}

/* Appends s to the buffer as the inside of a JSON string. */
static void json_str(char *out, size_t cap, const char *s)
{
    size_t o = strlen(out);
    for (; *s != '\0' && o + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(out + o, cap - o, "\\%c", c);
        else if (c < 0x20)
            o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
        else
            out[o++] = (char)c;
    }
    out[o] = '\0';
}

/* The value of one special key, malloc'd into *val (present), or 2113 when no module has it. */
static int special_value(FDBTransaction *tr, const uint8_t *k, size_t len, int *present,
                         uint8_t **val, size_t *vlen)
{
    static const char *const names[] = { "\xff\xff/cluster_file_path",
                                         "\xff\xff/connection_string", "\xff\xff/status/json" };
    *present = 0;
    *val = NULL;
    *vlen = 0;
    if (has_prefix(k, len, SPECIAL_CONFLICTING))
        return 0;
    int which = -1;
    for (int i = 0; i < 3; i++)
        if (len == strlen(names[i]) && memcmp(k, names[i], len) == 0)
            which = i;
    if (which < 0) {
        complain("no special key module holds this key (kvq has cluster_file_path, "
                 "connection_string, status/json and transaction/conflicting_keys/)");
        return KVQ_ESPECIAL_KEYS_NO_MODULE_FOUND;
    }
    char doc[8192] = "";
    if (which == 0)
        snprintf(doc, sizeof(doc), "%s", tr->db->cluster_file);
    else if (which == 1)
        snprintf(doc, sizeof(doc), "%s", tr->db->conn);
    else {
        /* The client's view of a database that is always available: it is a local directory. */
        snprintf(doc, sizeof(doc), "{\"client\":{\"cluster_file\":{\"path\":\"");
        json_str(doc, sizeof(doc), tr->db->cluster_file);
        size_t o = strlen(doc);
        snprintf(doc + o, sizeof(doc) - o,
                 "\",\"up_to_date\":true},\"coordinators\":{\"quorum_reachable\":true,"
                 "\"coordinators\":[]},\"database_status\":{\"available\":true,"
                 "\"healthy\":true},\"messages\":[],\"timestamp\":%lld},"
                 "\"cluster\":{\"kvq\":{\"directory\":\"",
                 (long long)time(NULL));
        char dir[4096];
        if (dir_of(tr->db->conn, dir, sizeof(dir)) == 0)
            json_str(doc, sizeof(doc), dir);
        o = strlen(doc);
        snprintf(doc + o, sizeof(doc) - o, "\"}}}");
    }
    *present = 1;
    *vlen = strlen(doc);
    *val = copy_bytes((const uint8_t *)doc, *vlen);
    return 0;
}

/* A range read in the special space: the special keys within [b, e), which must lie in it. */
static int special_range(FDBTransaction *tr, const uint8_t *b, size_t bl, const uint8_t *e,
                         size_t el, FDBFuture *f)
{
    static const char *const names[] = { "\xff\xff/cluster_file_path",
                                         "\xff\xff/connection_string", "\xff\xff/status/json" };
    if (!is_special(b, bl) || !is_special(e, el))
        return KVQ_EKEY_OUTSIDE_LEGAL_RANGE;
    FDBKeyValue kv[3];
    uint8_t *vals[3];
    int n = 0;
    for (int i = 0; i < 3; i++) {
        const uint8_t *k = (const uint8_t *)names[i];
        size_t kl = strlen(names[i]);
        if (key_less(k, kl, b, bl) || !key_less(k, kl, e, el))
            continue;
        int present;
        size_t vl;
        int rc = special_value(tr, k, kl, &present, &vals[n], &vl);
        if (rc != 0)
            return rc;
        kv[n] = (FDBKeyValue){ k, (int)kl, vals[n], (int)vl };
        n++;
    }
    if (n == 0 && !(has_prefix(b, bl, SPECIAL_CONFLICTING) &&
                    !key_less((const uint8_t *)SPECIAL_CONFLICTING "\xff",
                              strlen(SPECIAL_CONFLICTING) + 1, e, el))) {
        complain("no special key module holds this range");
        return KVQ_ESPECIAL_KEYS_NO_MODULE_FOUND;
    }
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += (size_t)kv[i].key_length + (size_t)kv[i].value_length;
    f->kvs = malloc((size_t)(n > 0 ? n : 1) * sizeof(*f->kvs));
    f->bytes = malloc(total > 0 ? total : 1);
    if (f->kvs == NULL || f->bytes == NULL)
        misuse("out of memory");
    uint8_t *p = f->bytes;
    for (int i = 0; i < n; i++) {
        memcpy(p, kv[i].key, (size_t)kv[i].key_length);
        f->kvs[i].key = p;
        f->kvs[i].key_length = kv[i].key_length;
        p += kv[i].key_length;
        memcpy(p, kv[i].value, (size_t)kv[i].value_length);
        f->kvs[i].value = p;
        f->kvs[i].value_length = kv[i].value_length;
        p += kv[i].value_length;
        free(vals[i]);
    }
    f->count = n;
    return 0;
}

/* The tenant map's write module: under 7.3's name and 7.1's. */
static const char *const tenant_maps[][2] = {
    { "\xff\xff/management/tenant/map/", "\xff\xff/management/tenant/map0" },
    { "\xff\xff/management/tenant_map/", "\xff\xff/management/tenant_map0" },
};

/* Whether [b, e) (a clear) lies in the tenant map. */
static int in_tenant_map(const uint8_t *b, size_t bl, const uint8_t *e, size_t el)
{
    for (size_t i = 0; i < sizeof(tenant_maps) / sizeof(tenant_maps[0]); i++) {
        const uint8_t *lo = (const uint8_t *)tenant_maps[i][0];
        const uint8_t *hi = (const uint8_t *)tenant_maps[i][1];
        size_t lol = strlen(tenant_maps[i][0]), hil = strlen(tenant_maps[i][1]);
        if (!key_less(b, bl, lo, lol) && !key_less(hi, hil, e, el))
            return 1;
    }
    return 0;
}

/* A write to the special keys: 1 if [b, e) (a key k, a range, or the key of a set with e NULL)
 * is there, the write then handled here. Without special_key_space_enable_writes (714) every
 * such write fails with special_keys_write_disabled (2114). With it, a database without tenants
 * can honour one write module: the tenant map, where a clear has nothing to delete (FoundationDB's
 * bindingtester clears it before each test) and a set would create a tenant (tenants_disabled,
 * 2136). kvq has no other write module (special_keys_no_write_module_found, 2115). Errors are
 * deferred, as every write error is. */
static int special_write(FDBTransaction *tr, int clear, const uint8_t *b, int bl, const uint8_t *e,
                         int el)
{
    if (!is_special(b, (size_t)bl))
        return 0;
    if (e == NULL) {
        e = b;
        el = bl;
    }
    int err = 0;
    if (!tr->special_writes) {
        complain("writes to special keys are disabled (special_key_space_enable_writes)");
        err = KVQ_ESPECIAL_KEYS_WRITE_DISABLED;
    } else if (in_tenant_map(b, (size_t)bl, e, (size_t)el) && clear) {
        err = 0; /* no tenants: nothing to delete */
    } else if (in_tenant_map(b, (size_t)bl, e, (size_t)el)) {
        complain("a kvq directory has no tenants");
        err = KVQ_ETENANTS_DISABLED;
    } else {
        complain("no special key write module of a kvq directory holds this key or range");
        err = 2115; /* special_keys_no_write_module_found */
    }
    if (err != 0 && tr->deferred == 0)
        tr->deferred = err;
    return 1;
}

static FDBFuture *tr_get(FDBTransaction *tr,
                         const uint8_t *key_name,
                         int key_name_length,
                         fdb_bool_t snapshot)
{
    if (key_name == NULL || key_name_length < 0)
        misuse("fdb_transaction_get with a NULL key or a negative length");
    fdb_error_t gate = tr_error(tr, 1);
    if (gate != 0)
        return fut_error(FUT_VALUE, gate);
    read_delay(tr);
    FDBFuture *f = fut_new(FUT_VALUE);
    if (is_special(key_name, (size_t)key_name_length)) {
        size_t vl = 0;
        int rc = special_value(tr, key_name, (size_t)key_name_length, &f->present, &f->bytes,
                               &vl);
        f->len = (int)vl;
        fut_settle(f, rc);
        return f;
    }
    kvq_bytes v;
    int present = 0;
    int rc = kvq_txn_get(&v, &present, tr->kt, key_name, (size_t)key_name_length,
                         snapshot ? KVQ_SNAPSHOT : 0);
    if (rc == 0 && present) {
        f->present = 1;
        /* Small values (most) are kept in the future itself: one allocation fewer. */
        f->bytes = v.len <= sizeof(f->small) ? f->small : copy_bytes(v.data, v.len);
        if (v.len > 0 && f->bytes == f->small)
            memcpy(f->small, v.data, v.len);
        f->len = (int)v.len;
    }
    fut_settle(f, rc);
    return f;
}


/* The key a selector (key, or_equal, offset) names, as FoundationDB resolves it: the last key
 * below `key` (at or below it, with or_equal) is the base, and the selector names the key
 * `offset` places after the base (offset 1: the next key; 0: the base itself; -1: the one
 * before). Before the first key it resolves to the empty key, past the last one to \xff (to
 * \xff\xff when the transaction may read the system keys, which it then searches too). For
 * a range boundary with offset 1 the search key itself serves (the same rows), so no read is
 * needed unless `exact` asks for the key itself (get_key). The reads made are the
 * transaction's (snapshot or not), so they take their read-conflict ranges. */
static int resolve_selector(FDBTransaction *tr, const uint8_t *key, int len, fdb_bool_t or_equal,
                            int offset, int snapshot, int exact, uint8_t **out, size_t *out_len)
{
    or_equal = or_equal != 0; /* an fdb_bool_t: any non-zero value is true */
    /* start: the first key after the base (key, or key + 00 with or_equal). */
    size_t slen = (size_t)len + (or_equal ? 1 : 0);
    uint8_t *start = malloc(slen + 1);
    if (start == NULL)
        misuse("out of memory");
    if (len > 0)
        memcpy(start, key, (size_t)len);
    start[len] = 0;
    if (offset == 1 && !exact) {
        *out = start;
        *out_len = slen;
        return 0;
    }
    static const uint8_t end_key[2] = { 0xff, 0xff };
    size_t end_len = tr->system_keys ? 2 : 1;
    const kvq_kv *kvs = NULL;
    size_t got = 0;
    unsigned flags = snapshot ? KVQ_SNAPSHOT : 0;
    int rc;
    size_t want;
    if (offset >= 1) {
        want = (size_t)offset;
        rc = key_less(start, slen, end_key, end_len)
                 ? kvq_txn_get_range(&kvs, &got, NULL, tr->kt, start, slen, end_key, end_len,
                                     (int)(want > INT32_MAX ? INT32_MAX : want), flags)
                 : 0;
    } else {
        want = (size_t)(1 - (int64_t)offset);
        rc = slen > 0 ? kvq_txn_get_range(&kvs, &got, NULL, tr->kt, (const uint8_t *)"", 0, start,
                                          slen, (int)(want > INT32_MAX ? INT32_MAX : want),
                                          flags | KVQ_REVERSE)
                      : 0;
    }
    free(start);
    if (rc != 0)
        return rc;
    const uint8_t *k = offset >= 1 ? end_key : (const uint8_t *)"";
    size_t klen = offset >= 1 ? end_len : 0;
    if (got >= want) {
        k = kvs[want - 1].key.data;
        klen = kvs[want - 1].key.len;
    }
    *out = malloc(klen + 1);
    if (*out == NULL)
        misuse("out of memory");
    if (klen > 0)
        memcpy(*out, k, klen);
    (*out)[klen] = 0;
    *out_len = klen;
    return 0;
}


/* The limits of one get_range answer (a page; `more` tells the caller to ask again), as
 * FoundationDB's client sizes its requests: a byte budget per streaming mode (none for EXACT,
 * 256 bytes for SMALL, 1,000 for MEDIUM, 4,096 for LARGE, 80,000 for SERIAL and WANT_ALL;
 * ITERATOR from 4,096 growing by half with each iteration to 120,000), lowered to target_bytes
 * when that is smaller (or target_bytes alone with EXACT), and the row limit. A row costs its
 * key, its value and 8 bytes; the page ends with the row that fills the budget, so it holds at
 * least one. $KVQ_FDBC_PAGE_ROWS caps the rows too, except for EXACT with a row limit.
 * *budget is -1 when there is no byte limit. */
static void page_limits(const FDBTransaction *tr, int limit, int target_bytes,
                        FDBStreamingMode mode, int iteration, int *rows, long *budget)
{
    static const int progression[] = { 4096,  6144,  9216,  13824, 20736,
                                       31104, 46656, 69984, 80000, 120000 };
    long mode_bytes;
    switch (mode) {
    case FDB_STREAMING_MODE_EXACT:
        mode_bytes = -1;
        break;
    case FDB_STREAMING_MODE_SMALL:
        mode_bytes = 256;
        break;
    case FDB_STREAMING_MODE_MEDIUM:
        mode_bytes = 1000;
        break;
    case FDB_STREAMING_MODE_LARGE:
        mode_bytes = 4096;
        break;
    case FDB_STREAMING_MODE_ITERATOR: {
        int n = (int)(sizeof(progression) / sizeof(progression[0]));
        int it = iteration < 1 ? 1 : iteration > n ? n : iteration;
        mode_bytes = progression[it - 1];
        break;
    }
    default: /* WANT_ALL, SERIAL */
        mode_bytes = 80000;
        break;
    }
    long b = mode_bytes;
    if (target_bytes > 0 && (b < 0 || target_bytes < b))
        b = target_bytes;
    *budget = b;
    /* At most the rows the budget can hold (each costs at least 8 bytes), or the limit. */
    long r = b < 0 ? INT32_MAX : b / 8 + 1;
    if (limit > 0 && limit < r)
        r = limit;
    if (tr->page_rows > 0 && tr->page_rows < r && !(mode == FDB_STREAMING_MODE_EXACT && limit > 0))
        r = tr->page_rows;
    *rows = (int)r;
}

/* The rows of a page, gathered from the transaction's reads (whose results stay valid until it
 * is reset). */
typedef struct page {
    kvq_kv *v;
    size_t n, cap;
    int byte_limited; /* the byte budget ended the page */
} page;

/* Reads the page of [b, e) with snapshot reads, in chunks that grow: at most `rows` rows,
 * ending with the row that fills `budget` bytes. */
static int page_probe(FDBTransaction *tr, const uint8_t *b, size_t blen, const uint8_t *e,
                      size_t elen, int rows, long budget, int reverse, page *pg)
{
    long acc = 0;
    size_t chunk = (size_t)(budget / 128 + 1);
    chunk = chunk < 8 ? 8 : chunk > 256 ? 256 : chunk;
    uint8_t *after = NULL; /* forward: the key just after the last one read */
    int rc = 0;
    for (;;) {
        size_t want = (size_t)rows - pg->n;
        if (want > chunk)
            want = chunk;
        const kvq_kv *kvs = NULL;
        size_t got = 0;
        rc = kvq_txn_get_range(&kvs, &got, NULL, tr->kt, b, blen, e, elen, (int)want,
                               KVQ_SNAPSHOT | (reverse ? KVQ_REVERSE : 0));
        if (rc != 0)
            break;
        if (pg->n + got > pg->cap) {
            size_t cap = pg->cap == 0 ? 64 : pg->cap;
            while (cap < pg->n + got)
                cap *= 2;
            kvq_kv *v = realloc(pg->v, cap * sizeof(*v));
            if (v == NULL)
                misuse("out of memory");
            pg->v = v;
            pg->cap = cap;
        }
        for (size_t i = 0; i < got; i++) {
            pg->v[pg->n++] = kvs[i];
            acc += 8 + (long)kvs[i].key.len + (long)kvs[i].value.len;
            if (acc >= budget) {
                pg->byte_limited = 1;
                free(after);
                return 0;
            }
        }
        if (got < want || pg->n >= (size_t)rows)
            break;
        /* On from the last key read. */
        const kvq_bytes *last = &kvs[got - 1].key;
        if (reverse) {
            e = last->data;
            elen = last->len;
        } else {
            uint8_t *k = realloc(after, last->len + 1);
            if (k == NULL)
                misuse("out of memory");
            if (last->len > 0)
                memmove(k, last->data, last->len);
            k[last->len] = 0;
            after = k;
            b = after;
            blen = last->len + 1;
        }
        if (chunk < 4096)
            chunk *= 2;
    }
    free(after);
    return rc;
}

/* get_range's limits and streaming mode, checked as libfdb_c checks them: 0 (or -1) is no
 * limit, anything below -1 is range_limits_invalid (2012); EXACT needs a row or byte limit
 * (2210); ITERATOR counts its calls from 1; other modes are client_invalid_operation (2000). */
static fdb_error_t range_params(int limit, int target_bytes, FDBStreamingMode mode, int iteration)
{
    if ((int)mode < FDB_STREAMING_MODE_WANT_ALL || (int)mode > FDB_STREAMING_MODE_SERIAL ||
        (mode == FDB_STREAMING_MODE_ITERATOR && iteration <= 0)) {
        complain("get_range: streaming mode %d with iteration %d", (int)mode, iteration);
        return FDB_ERR_CLIENT_INVALID_OPERATION;
    }
    if (mode == FDB_STREAMING_MODE_EXACT && limit <= 0 && target_bytes <= 0 &&
        limit >= -1 && target_bytes >= -1)
        return FDB_ERR_EXACT_MODE_WITHOUT_LIMITS;
    if (limit < -1 || target_bytes < -1)
        return FDB_ERR_RANGE_LIMITS_INVALID;
    return 0;
}

static FDBFuture *tr_get_range(FDBTransaction *tr,
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
    if (begin_key_name == NULL || end_key_name == NULL || begin_key_name_length < 0 ||
        end_key_name_length < 0)
        misuse("fdb_transaction_get_range with a NULL key or a negative length");
    fdb_error_t perr = range_params(limit, target_bytes, mode, iteration);
    if (perr != 0)
        return fut_error(FUT_KV_ARRAY, perr);
    fdb_error_t gate = tr_error(tr, 1);
    if (gate != 0)
        return fut_error(FUT_KV_ARRAY, gate);
    if (limit == -1)
        limit = 0; /* -1 is "no limit" too */
    if (is_special(begin_key_name, (size_t)begin_key_name_length)) {
        /* The special space is read as plain [begin, end): its keys are few and fixed. */
        FDBFuture *f = fut_new(FUT_KV_ARRAY);
        fut_settle(f, special_range(tr, begin_key_name, (size_t)begin_key_name_length,
                                      end_key_name, (size_t)end_key_name_length, f));
        return f;
    }
    uint8_t *b = NULL, *e = NULL;
    size_t blen = 0, elen = 0;
    int rc = resolve_selector(tr, begin_key_name, begin_key_name_length, begin_or_equal,
                              begin_offset, snapshot, 0, &b, &blen);
    if (rc == 0)
        rc = resolve_selector(tr, end_key_name, end_key_name_length, end_or_equal, end_offset,
                              snapshot, 0, &e, &elen);
    read_delay(tr);
    FDBFuture *f = fut_new(FUT_KV_ARRAY);
    int rows = 0;
    long budget = -1;
    page_limits(tr, limit, target_bytes, mode, iteration, &rows, &budget);
    const kvq_kv *kvs = NULL;
    size_t n = 0;
    int more = 0;
    page pg = { 0 };
    unsigned flags = (snapshot ? KVQ_SNAPSHOT : 0) | (reverse ? KVQ_REVERSE : 0);
    /* Selectors that meet or cross resolve to an empty range, not an error. */
    if (rc == 0 && key_less(b, blen, e, elen)) {
        if (budget < 0) {
            /* Rows only: one read. */
            rc = kvq_txn_get_range(&kvs, &n, NULL, tr->kt, b, blen, e, elen, rows, flags);
            more = n == (size_t)rows;
        } else {
            /* The page is found with snapshot reads, which see what this read sees (snapshot
             * reads see the transaction's writes for the while) and add no conflict. */
            int toggled = !snapshot && tr->snapshot_no_ryw &&
                          kvq_txn_set_option(tr->kt, KVQ_TXN_SNAPSHOT_RYW_ENABLE, 0) == 0;
            rc = page_probe(tr, b, blen, e, elen, rows, budget, reverse != 0, &pg);
            if (toggled && kvq_txn_set_option(tr->kt, KVQ_TXN_SNAPSHOT_RYW_DISABLE, 0) != 0)
                misuse("cannot restore snapshot_ryw_disable");
            if (rc == 0 && snapshot) {
                kvs = pg.v;
                n = pg.n;
                more = pg.byte_limited || n == (size_t)rows;
            } else if (rc == 0) {
                /* Then the read itself, limited to the rows of the page when the byte budget
                 * ended it, so that its read-conflict range ends just after the last key it
                 * returns (before the first, in reverse), as FoundationDB's does. */
                int lim = pg.byte_limited ? (int)pg.n : rows;
                rc = kvq_txn_get_range(&kvs, &n, NULL, tr->kt, b, blen, e, elen, lim, flags);
                more = pg.byte_limited || n == (size_t)lim;
            }
        }
    }
    free(b);
    free(e);
    if (rc == 0 && n > 0) {
        size_t total = 0;
        for (size_t i = 0; i < n; i++)
            total += kvs[i].key.len + kvs[i].value.len;
        f->kvs = malloc(n * sizeof(*f->kvs));
        f->bytes = malloc(total > 0 ? total : 1);
        if (f->kvs == NULL || f->bytes == NULL)
            misuse("out of memory");
        uint8_t *p = f->bytes;
        for (size_t i = 0; i < n; i++) {
            memcpy(p, kvs[i].key.data, kvs[i].key.len);
            f->kvs[i].key = p;
            f->kvs[i].key_length = (int)kvs[i].key.len;
            p += kvs[i].key.len;
            if (kvs[i].value.len > 0)
                memcpy(p, kvs[i].value.data, kvs[i].value.len);
            f->kvs[i].value = p;
            f->kvs[i].value_length = (int)kvs[i].value.len;
            p += kvs[i].value.len;
        }
        f->count = (int)n;
        /* As a storage server does: `more` whenever a limit was reached, even if the range
         * happens to end there. */
        f->more = more;
    }
    free(pg.v);
    fut_settle(f, rc);
    return f;
}


static void tr_set(FDBTransaction *tr,
                   const uint8_t *key_name,
                   int key_name_length,
                   const uint8_t *value,
                   int value_length)
{
    if (key_name == NULL || value == NULL || key_name_length < 0 || value_length < 0)
        misuse("fdb_transaction_set with a NULL pointer or a negative length");
    if (!special_write(tr, 0, key_name, key_name_length, NULL, 0) && tr_writable(tr))
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
        misuse("fdb_transaction_clear_range with a NULL key or a negative length");
    if (!special_write(tr, 1, begin_key_name, begin_key_name_length, end_key_name,
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
        misuse("fdb_transaction_atomic_op with a NULL pointer or a negative length");
    /* The mutation types are kvq's numbers: every atomic operation, APPEND_IF_FITS and
     * COMPARE_AND_CLEAR included, is applied at commit without a read conflict. */
    if (!special_write(tr, 0, key_name, key_name_length, NULL, 0) && tr_writable(tr))
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
        misuse("fdb_transaction_add_conflict_range with a NULL key or a negative length");
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
    fdb_error_t err = tr_error(tr, 1);
    if (err == 0) {
        tr->commit_started = 1;
        err = kvq_txn_commit(tr->kt);
    }
    stamps_complete(tr, err);
    return fut_error(FUT_VOID, err);
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
        return fut_error(FUT_KEY, tr_error(tr, 1));
    FDBFuture *f = fut_new(FUT_KEY);
    fut_ref(f); /* the transaction's, until the commit */
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
    fut_complete(f, cancelled ? FDB_ERR_OPERATION_CANCELLED : rc);
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
    fut_unref(f);
    return NULL;
}

static FDBFuture *tr_watch(FDBTransaction *tr, const uint8_t *key_name, int key_name_length)
{
    if (key_name == NULL || key_name_length < 0)
        misuse("fdb_transaction_watch with a NULL key or a negative length");
    fdb_error_t gate = tr_error(tr, 1);
    if (gate != 0)
        return fut_error(FUT_VOID, gate);
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
        misuse("cannot restore snapshot_ryw_disable");
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
        return fut_error(FUT_VOID, rc);
    FDBFuture *f = fut_new(FUT_VOID);
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

/* Beyond what kvq's binding uses (fdbc_extra.h) ------------------------------------------- */

static int in_set(fdb_error_t code, const fdb_error_t *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (set[i] == code)
            return 1;
    return 0;
}

/* As fdb_c.cpp defines them for the API version selected (7.3 adds 1078 and 1223, 7.1 has
 * 2137). */
fdb_bool_t fdb_error_predicate(int predicate_test, fdb_error_t code)
{
    static const fdb_error_t maybe[] = { 1021, 1039 };
    static const fdb_error_t not_committed[] = { 1020, 1007, 1009, 1038, 1042, 1051, 1037, 1213 };
    static const fdb_error_t since_730[] = { 1078, 1223 };
    static const fdb_error_t until_730[] = { 2137 };
    pthread_mutex_lock(&net.mu);
    int api = net.api;
    pthread_mutex_unlock(&net.mu);
    int m = in_set(code, maybe, 2);
    int r = in_set(code, not_committed, 8) ||
            (api >= 730 ? in_set(code, since_730, 2) : in_set(code, until_730, 1));
    switch (predicate_test) {
    case FDB_ERROR_PREDICATE_RETRYABLE:
        return m || r;
    case FDB_ERROR_PREDICATE_MAYBE_COMMITTED:
        return m;
    case FDB_ERROR_PREDICATE_RETRYABLE_NOT_COMMITTED:
        return r;
    default:
        return 0;
    }
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
    pthread_mutex_lock(&net.mu);
    int api = net.api;
    int setup = net.setup;
    pthread_mutex_unlock(&net.mu);
    if (api == 0)
        return FDB_ERR_API_VERSION_UNSET;
    static const char *const formats[] = { "xml", "json", NULL };
    static const char *const clocks[] = { "now", "realtime", NULL };
    static const char *const tracers[] = { "none", "disabled", "logfile", "file",
                                           "log_file", "network_lossy", NULL };
    fdb_error_t err = 0;
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
    case 61: /* callbacks_on_external_threads */
        err = no_param(value, value_length);
        return err != 0 ? err : setup ? FDB_ERR_INVALID_OPTION : 0;
    case 67: /* retain_client_library_copies */
        return no_param(value, value_length);
    case 60: /* disable_multi_version_client_api */
        err = no_param(value, value_length);
        if (err != 0)
            return err;
        pthread_mutex_lock(&net.mu);
        if (net.setup || mv.local_client_disabled || mv.bypass_disabled)
            err = FDB_ERR_INVALID_OPTION;
        else
            mv.multi_version_disabled = 1;
        pthread_mutex_unlock(&net.mu);
        return err;
    case 64: /* disable_local_client */
        err = no_param(value, value_length);
        if (err != 0)
            return err;
        pthread_mutex_lock(&net.mu);
        if (net.setup || mv.multi_version_disabled)
            err = FDB_ERR_INVALID_OPTION;
        else
            mv.local_client_disabled = 1;
        pthread_mutex_unlock(&net.mu);
        return err;
    case 62: /* external_client_library */
    case 66: /* future_version_client_library (730) */
        if (option == 66 && api < 730)
            break;
        err = str_param(value, value_length, 1, INT32_MAX);
        if (err == 0) {
            /* The library must exist (file_not_found, 1511), though kvq never loads it. */
            char *path = malloc((size_t)value_length + 1);
            if (path == NULL)
                return FDB_ERR_INTERNAL_ERROR;
            memcpy(path, value, (size_t)value_length);
            path[value_length] = 0;
            struct stat st;
            int found = stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
            free(path);
            err = !found ? FDB_ERR_FILE_NOT_FOUND : setup ? FDB_ERR_INVALID_OPTION : 0;
        }
        return err;
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
    case 37: /* trace_share_among_client_threads (730) */
    case 68: /* ignore_external_client_failures */
    case 69: /* fail_incompatible_client */
        if (api < 730)
            break;
        return no_param(value, value_length);
    case 38: /* trace_initialize_on_setup (730) */
        if (api < 730)
            break;
        return 0;
    case 91: /* client_tmp_dir (730) */
        if (api < 730)
            break;
        return str_param(value, value_length, 1, INT32_MAX);
    case 72: /* disable_client_bypass (730) */
        if (api < 730)
            break;
        pthread_mutex_lock(&net.mu);
        if (net.setup)
            err = FDB_ERR_INTERNAL_ERROR;
        else if (mv.multi_version_disabled)
            err = FDB_ERR_INVALID_OPTION;
        else
            mv.bypass_disabled = 1;
        pthread_mutex_unlock(&net.mu);
        return err;
    default:
        break;
    }
    complain("network option %d is not supported on a kvq directory", option);
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
        misuse("fdb_database_set_option on a NULL database");
    if (value_length < 0)
        return FDB_ERR_INVALID_OPTION_VALUE;
    pthread_mutex_lock(&net.mu);
    int api = net.api;
    pthread_mutex_unlock(&net.mu);
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
        complain("database option %d is not supported on a kvq directory", option);
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

static void tr_clear(FDBTransaction *tr, const uint8_t *key_name, int key_name_length)
{
    if (key_name == NULL || key_name_length < 0)
        misuse("fdb_transaction_clear with a NULL key or a negative length");
    if (!special_write(tr, 1, key_name, key_name_length, NULL, 0) && tr_writable(tr))
        defer(tr, kvq_txn_clear(tr->kt, key_name, (size_t)key_name_length));
}

/* Every later operation fails with transaction_cancelled (1025) until fdb_transaction_reset. */
static void tr_cancel(FDBTransaction *tr)
{
    stamps_complete(tr, FDB_ERR_TRANSACTION_CANCELLED);
    if (tr->reset_err == 0)
        tr->reset_err = FDB_ERR_TRANSACTION_CANCELLED;
}

fdb_bool_t fdb_future_is_ready(FDBFuture *f)
{
    pthread_mutex_lock(&f->mu);
    if (f->destroyed)
        misuse("fdb_future_is_ready on a destroyed future");
    int r = f->ready;
    pthread_mutex_unlock(&f->mu);
    return r;
}

/* Frees a ready future's results; reading them afterwards gives future_released (1102). */
void fdb_future_release_memory(FDBFuture *f)
{
    pthread_mutex_lock(&f->mu);
    if (f->destroyed)
        misuse("fdb_future_release_memory on a destroyed future");
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

static FDBFuture *tr_get_key(FDBTransaction *tr,
                             const uint8_t *key_name,
                             int key_name_length,
                             fdb_bool_t or_equal,
                             int offset,
                             fdb_bool_t snapshot)
{
    if (key_name == NULL || key_name_length < 0)
        misuse("fdb_transaction_get_key with a NULL key or a negative length");
    fdb_error_t gate = tr_error(tr, 1);
    if (gate != 0)
        return fut_error(FUT_KEY, gate);
    read_delay(tr);
    FDBFuture *f = fut_new(FUT_KEY);
    uint8_t *k = NULL;
    size_t klen = 0;
    int rc = 0;
    if (key_name_length > 1 && key_name[0] == 0xff) {
        /* A selector in the system keys needs the option that lets them be read (2004 without
         * it): a snapshot read of its key, which adds no conflict, asks the transaction. */
        kvq_bytes v;
        int present;
        rc = kvq_txn_get(&v, &present, tr->kt, key_name, (size_t)key_name_length, KVQ_SNAPSHOT);
    }
    if (rc == 0)
        rc = resolve_selector(tr, key_name, key_name_length, or_equal, offset, snapshot, 1, &k,
                              &klen);
    if (rc == 0) {
        f->bytes = k;
        f->len = (int)klen;
    }
    fut_settle(f, rc);
    return f;
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
        tr_timeout_check(tr);
        rc = tr->reset_err;
    }
    if (rc == 0) {
        /* The retry resets what does not outlive it, as the engine does; the database's size
         * limit and snapshot read-your-writes choice apply again. */
        tr->deferred = 0;
        tr->system_keys = 0;
        tr->special_writes = 0;
        tr->commit_started = 0;
        defer(tr, db_defaults(tr, 0));
    } else if (tr->reset_err == 0) {
        /* A transaction that is not to be retried is cancelled until it is reset (one whose
         * timeout fired stays timed out), as libfdb_c does from API 610. */
        tr->reset_err = rc == FDB_ERR_TRANSACTION_TIMED_OUT ? rc : FDB_ERR_TRANSACTION_CANCELLED;
    }
    tr->on_error_live = 0;
    pthread_cond_broadcast(&tr->cond);
    pthread_mutex_unlock(&tr->mu);
    /* The transaction is the caller's again before the future says so. */
    fut_complete(j->f, rc);
    fut_unref(j->f);
    free(j);
    return NULL;
}

/* The future is ready once the backoff has passed: with no error when the transaction was reset
 * for a retry, else with the error to report. A cancelled or timed-out transaction, or one whose
 * on_error failed, fails at once with that state's error (1025 or 1031), retrying nothing. */
static FDBFuture *tr_on_error(FDBTransaction *tr, fdb_error_t error)
{
    stamps_complete(tr, error != 0 ? error : FDB_ERR_TRANSACTION_CANCELLED);
    tr_timeout_check(tr);
    if (tr->reset_err != 0)
        return fut_error(FUT_VOID, tr->reset_err);
    if (error == 0) {
        tr->reset_err = FDB_ERR_TRANSACTION_CANCELLED;
        return fut_error(FUT_VOID, FDB_ERR_CLIENT_INVALID_OPERATION);
    }
    FDBFuture *f = fut_new(FUT_VOID);
    on_error_job *j = malloc(sizeof(*j));
    if (j == NULL)
        misuse("out of memory");
    j->tr = tr;
    j->f = f;
    j->err = error;
    fut_ref(f); /* the thread's */
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    tr->on_error_live = 1;
    if (pthread_create(&th, &attr, on_error_main, j) != 0) {
        tr->on_error_live = 0;
        fut_unref(f);
        free(j);
        fut_complete(f, FDB_ERR_INTERNAL_ERROR);
    }
    pthread_attr_destroy(&attr);
    return f;
}

/* Read versions, sizes, split points, addresses ----------------------------------------------- */

/* An error (a read before it, a version that is not positive) comes with the next read or the
 * commit, as libfdb_c defers it. */
static void tr_set_read_version(FDBTransaction *tr, int64_t version)
{
    if (tr->deferred == 0)
        defer(tr, kvq_txn_set_read_version(tr->kt, version));
}

static FDBFuture *tr_get_approximate_size(FDBTransaction *tr)
{
    fdb_error_t gate = tr_error(tr, 0);
    if (gate != 0)
        return fut_error(FUT_INT64, gate);
    FDBFuture *f = fut_new(FUT_INT64);
    fut_settle(f, kvq_txn_get_approximate_size(&f->i64, tr->kt));
    return f;
}

/* Walks the stored rows of [b, e) in a transaction of its own (the committed data, as a
 * storage server's statistics describe it, not this transaction's writes), calling `row` with
 * each row's size. The reads are snapshots: they add no conflicts. */
static int walk_range(FDBTransaction *tr, const uint8_t *b, int bl, const uint8_t *e, int el,
                      int (*row)(void *, const kvq_kv *), void *arg)
{
    if (b == NULL || e == NULL || bl < 0 || el < 0)
        misuse("a range with a NULL key or a negative length");
    kvq_txn *t;
    int rc = kvq_txn_create(&t, tr->db->kdb);
    if (rc != 0)
        return rc;
    uint8_t *from = copy_bytes(b, (size_t)bl);
    size_t from_len = (size_t)bl;
    for (;;) {
        const kvq_kv *kvs;
        size_t n = 0;
        int more = 0;
        rc = kvq_txn_get_range(&kvs, &n, &more, t, from, from_len, e, (size_t)el, 1000,
                               KVQ_SNAPSHOT);
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = row(arg, &kvs[i]);
        if (rc != 0 || n < 1000)
            break;
        /* On from the key after the last one. */
        free(from);
        from_len = kvs[n - 1].key.len + 1;
        from = malloc(from_len);
        if (from == NULL)
            misuse("out of memory");
        memcpy(from, kvs[n - 1].key.data, from_len - 1);
        from[from_len - 1] = 0;
        /* A long walk must not meet the 5-second limit of one read version. */
        kvq_txn_reset(t);
    }
    free(from);
    kvq_txn_destroy(t);
    return rc;
}

static int add_row_size(void *arg, const kvq_kv *kv)
{
    *(int64_t *)arg += (int64_t)(kv->key.len + kv->value.len);
    return 0;
}

/* Exact, not an estimate: the bytes of the keys and values stored in the range. */
static FDBFuture *tr_get_estimated_range_size_bytes(FDBTransaction *tr, const uint8_t *b,
                                                    int bl, const uint8_t *e, int el)
{
    fdb_error_t gate = tr_error(tr, 1);
    if (gate != 0)
        return fut_error(FUT_INT64, gate);
    FDBFuture *f = fut_new(FUT_INT64);
    fut_settle(f, walk_range(tr, b, bl, e, el, add_row_size, &f->i64));
    return f;
}

/* The keys of a key array being built: their bytes are copied into one buffer at the end. */
typedef struct split_walk {
    int64_t chunk, acc;
    uint8_t **keys;
    size_t *lens;
    size_t n, cap;
} split_walk;

static void split_add(split_walk *w, const uint8_t *k, size_t len)
{
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 16;
        w->keys = realloc(w->keys, w->cap * sizeof(*w->keys));
        w->lens = realloc(w->lens, w->cap * sizeof(*w->lens));
        if (w->keys == NULL || w->lens == NULL)
            misuse("out of memory");
    }
    w->keys[w->n] = copy_bytes(k, len);
    w->lens[w->n++] = len;
}

static int split_row(void *arg, const kvq_kv *kv)
{
    split_walk *w = arg;
    /* A chunk ends before the row that would take it past chunk_size (a chunk holds at least
     * one row). */
    int64_t sz = (int64_t)(kv->key.len + kv->value.len);
    if (w->acc > 0 && w->acc + sz > w->chunk) {
        split_add(w, kv->key.data, kv->key.len);
        w->acc = 0;
    }
    w->acc += sz;
    return 0;
}

/* Keys that cut [b, e) into chunks of about chunk_size bytes, b first and e last. */
static FDBFuture *tr_get_range_split_points(FDBTransaction *tr, const uint8_t *b, int bl,
                                            const uint8_t *e, int el, int64_t chunk_size)
{
    fdb_error_t gate = tr_error(tr, 1);
    if (gate != 0)
        return fut_error(FUT_KEY_ARRAY, gate);
    if (chunk_size <= 0) {
        complain("fdb_transaction_get_range_split_points: chunk_size %lld is not positive",
                 (long long)chunk_size);
        return fut_error(FUT_KEY_ARRAY, FDB_ERR_INVALID_OPTION_VALUE);
    }
    split_walk w = { .chunk = chunk_size };
    split_add(&w, b, (size_t)(bl < 0 ? 0 : bl));
    int rc = walk_range(tr, b, bl, e, el, split_row, &w);
    split_add(&w, e, (size_t)(el < 0 ? 0 : el));
    FDBFuture *f = fut_new(FUT_KEY_ARRAY);
    if (rc == 0) {
        size_t total = 0;
        for (size_t i = 0; i < w.n; i++)
            total += w.lens[i];
        f->keys = malloc(w.n * sizeof(*f->keys));
        f->bytes = malloc(total > 0 ? total : 1);
        if (f->keys == NULL || f->bytes == NULL)
            misuse("out of memory");
        uint8_t *p = f->bytes;
        for (size_t i = 0; i < w.n; i++) {
            if (w.lens[i] > 0)
                memcpy(p, w.keys[i], w.lens[i]);
            f->keys[i].key = p;
            f->keys[i].key_length = (int)w.lens[i];
            p += w.lens[i];
        }
        f->count = (int)w.n;
    }
    for (size_t i = 0; i < w.n; i++)
        free(w.keys[i]);
    free(w.keys);
    free(w.lens);
    fut_settle(f, rc);
    return f;
}

/* Every key lives in this process's local directory: one local address, in FoundationDB's
 * ip:port form (nothing listens on it; it names the one machine). */
static FDBFuture *tr_get_addresses_for_key(FDBTransaction *tr, const uint8_t *key_name,
                                           int key_name_length)
{
    if (key_name == NULL || key_name_length < 0)
        misuse("fdb_transaction_get_addresses_for_key with a NULL key or a negative length");
    fdb_error_t gate = tr_error(tr, 1);
    if (gate != 0)
        return fut_error(FUT_STRING_ARRAY, gate);
    static const char local[] = "127.0.0.1:4500";
    FDBFuture *f = fut_new(FUT_STRING_ARRAY);
    f->strs = malloc(sizeof(*f->strs));
    if (f->strs == NULL)
        misuse("out of memory");
    f->bytes = copy_bytes((const uint8_t *)local, sizeof(local));
    f->strs[0] = (const char *)f->bytes;
    f->count = 1;
    fut_settle(f, 0);
    return f;
}

/* Getters of the other result kinds ---------------------------------------------------------- */

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
        misuse("%s on a future that holds no such result", what);
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

static FDBResult *result_error(fdb_error_t err)
{
    FDBResult *r = malloc(sizeof(*r));
    if (r == NULL)
        misuse("out of memory");
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
    return result_error(KVQ_EUNSUPPORTED_OPERATION);
}

FDBResult *fdb_readbg_parse_delta_file(const uint8_t *file_data, int file_len,
                                       const FDBBGTenantPrefix *tenant_prefix,
                                       const FDBBGEncryptionCtx *encryption_ctx)
{
    (void)file_data;
    (void)file_len;
    (void)tenant_prefix;
    (void)encryption_ctx;
    return result_error(KVQ_EUNSUPPORTED_OPERATION);
}

/* The network's completion hooks ------------------------------------------------------------ */

fdb_error_t fdb_add_network_thread_completion_hook(void (*hook)(void *), void *hook_parameter)
{
    if (hook == NULL)
        return FDB_ERR_INVALID_OPTION_VALUE;
    fdb_error_t err = 0;
    pthread_mutex_lock(&net.mu);
    if (!net.setup)
        err = FDB_ERR_NETWORK_NOT_SETUP;
    else if (net.n_hooks == (int)(sizeof(net.hooks) / sizeof(net.hooks[0])))
        err = FDB_ERR_CLIENT_INVALID_OPERATION;
    else
        net.hooks[net.n_hooks++] = (struct net_hook){ hook, hook_parameter };
    pthread_mutex_unlock(&net.mu);
    return err;
}

/* Management, tenants and blob granules: not on a kvq directory ------------------------------ */

/* The future of a call kvq does not have: ready at once with unsupported_operation (2108), or
 * tenants_disabled (2136) for tenants (a FoundationDB cluster without tenants says the same). */
static FDBFuture *unsupported(const char *what)
{
    complain("%s is not supported on a kvq directory", what);
    return fut_error(FUT_NONE, KVQ_EUNSUPPORTED_OPERATION);
}

static FDBFuture *no_tenants(void)
{
    return fut_error(FUT_NONE, KVQ_ETENANTS_DISABLED);
}

fdb_error_t fdb_database_open_tenant(FDBDatabase *d, const uint8_t *tenant_name,
                                     int tenant_name_length, FDBTenant **out_tenant)
{
    (void)d;
    (void)tenant_name;
    (void)tenant_name_length;
    *out_tenant = NULL;
    return KVQ_ETENANTS_DISABLED;
}

FDBFuture *fdb_database_reboot_worker(FDBDatabase *db, const uint8_t *address, int address_length,
                                      fdb_bool_t check, int duration)
{
    (void)db;
    (void)address;
    (void)address_length;
    (void)check;
    (void)duration;
    return unsupported("fdb_database_reboot_worker");
}

FDBFuture *fdb_database_force_recovery_with_data_loss(FDBDatabase *db, const uint8_t *dcid,
                                                      int dcid_length)
{
    (void)db;
    (void)dcid;
    (void)dcid_length;
    return unsupported("fdb_database_force_recovery_with_data_loss");
}

FDBFuture *fdb_database_create_snapshot(FDBDatabase *db, const uint8_t *uid, int uid_length,
                                        const uint8_t *snap_command, int snap_command_length)
{
    (void)db;
    (void)uid;
    (void)uid_length;
    (void)snap_command;
    (void)snap_command_length;
    return unsupported("fdb_database_create_snapshot");
}

/* No network thread does any work here: it is never busy. */
double fdb_database_get_main_thread_busyness(FDBDatabase *db)
{
    (void)db;
    return 0.0;
}

FDBFuture *fdb_database_get_server_protocol(FDBDatabase *db, uint64_t expected_version)
{
    (void)db;
    (void)expected_version;
    return unsupported("fdb_database_get_server_protocol");
}

FDBFuture *fdb_database_purge_blob_granules(FDBDatabase *db, const uint8_t *b, int bl,
                                            const uint8_t *e, int el, int64_t purge_version,
                                            fdb_bool_t force)
{
    (void)db, (void)b, (void)bl, (void)e, (void)el, (void)purge_version, (void)force;
    return unsupported("fdb_database_purge_blob_granules");
}

FDBFuture *fdb_database_wait_purge_granules_complete(FDBDatabase *db, const uint8_t *k, int kl)
{
    (void)db, (void)k, (void)kl;
    return unsupported("fdb_database_wait_purge_granules_complete");
}

FDBFuture *fdb_database_blobbify_range(FDBDatabase *db, const uint8_t *b, int bl,
                                       const uint8_t *e, int el)
{
    (void)db, (void)b, (void)bl, (void)e, (void)el;
    return unsupported("fdb_database_blobbify_range");
}

FDBFuture *fdb_database_blobbify_range_blocking(FDBDatabase *db, const uint8_t *b, int bl,
                                                const uint8_t *e, int el)
{
    (void)db, (void)b, (void)bl, (void)e, (void)el;
    return unsupported("fdb_database_blobbify_range_blocking");
}

FDBFuture *fdb_database_unblobbify_range(FDBDatabase *db, const uint8_t *b, int bl,
                                         const uint8_t *e, int el)
{
    (void)db, (void)b, (void)bl, (void)e, (void)el;
    return unsupported("fdb_database_unblobbify_range");
}

FDBFuture *fdb_database_list_blobbified_ranges(FDBDatabase *db, const uint8_t *b, int bl,
                                               const uint8_t *e, int el, int range_limit)
{
    (void)db, (void)b, (void)bl, (void)e, (void)el, (void)range_limit;
    return unsupported("fdb_database_list_blobbified_ranges");
}

FDBFuture *fdb_database_verify_blob_range(FDBDatabase *db, const uint8_t *b, int bl,
                                          const uint8_t *e, int el, int64_t version)
{
    (void)db, (void)b, (void)bl, (void)e, (void)el, (void)version;
    return unsupported("fdb_database_verify_blob_range");
}

FDBFuture *fdb_database_flush_blob_range(FDBDatabase *db, const uint8_t *b, int bl,
                                         const uint8_t *e, int el, fdb_bool_t compact,
                                         int64_t version)
{
    (void)db, (void)b, (void)bl, (void)e, (void)el, (void)compact, (void)version;
    return unsupported("fdb_database_flush_blob_range");
}

FDBFuture *fdb_database_get_client_status(FDBDatabase *db)
{
    (void)db;
    return unsupported("fdb_database_get_client_status");
}

/* fdb_database_open_tenant never hands out a tenant, so these only answer that tenants are
 * disabled (a NULL tenant is accepted by fdb_tenant_destroy). */
fdb_error_t fdb_tenant_create_transaction(FDBTenant *tenant, FDBTransaction **out_transaction)
{
    (void)tenant;
    *out_transaction = NULL;
    return KVQ_ETENANTS_DISABLED;
}

FDBFuture *fdb_tenant_purge_blob_granules(FDBTenant *t, const uint8_t *b, int bl,
                                          const uint8_t *e, int el, int64_t purge_version,
                                          fdb_bool_t force)
{
    (void)t, (void)b, (void)bl, (void)e, (void)el, (void)purge_version, (void)force;
    return no_tenants();
}

FDBFuture *fdb_tenant_wait_purge_granules_complete(FDBTenant *t, const uint8_t *k, int kl)
{
    (void)t, (void)k, (void)kl;
    return no_tenants();
}

FDBFuture *fdb_tenant_blobbify_range(FDBTenant *t, const uint8_t *b, int bl, const uint8_t *e,
                                     int el)
{
    (void)t, (void)b, (void)bl, (void)e, (void)el;
    return no_tenants();
}

FDBFuture *fdb_tenant_blobbify_range_blocking(FDBTenant *t, const uint8_t *b, int bl,
                                              const uint8_t *e, int el)
{
    (void)t, (void)b, (void)bl, (void)e, (void)el;
    return no_tenants();
}

FDBFuture *fdb_tenant_unblobbify_range(FDBTenant *t, const uint8_t *b, int bl, const uint8_t *e,
                                       int el)
{
    (void)t, (void)b, (void)bl, (void)e, (void)el;
    return no_tenants();
}

FDBFuture *fdb_tenant_list_blobbified_ranges(FDBTenant *t, const uint8_t *b, int bl,
                                             const uint8_t *e, int el, int range_limit)
{
    (void)t, (void)b, (void)bl, (void)e, (void)el, (void)range_limit;
    return no_tenants();
}

FDBFuture *fdb_tenant_verify_blob_range(FDBTenant *t, const uint8_t *b, int bl, const uint8_t *e,
                                        int el, int64_t version)
{
    (void)t, (void)b, (void)bl, (void)e, (void)el, (void)version;
    return no_tenants();
}

FDBFuture *fdb_tenant_flush_blob_range(FDBTenant *t, const uint8_t *b, int bl, const uint8_t *e,
                                       int el, fdb_bool_t compact, int64_t version)
{
    (void)t, (void)b, (void)bl, (void)e, (void)el, (void)compact, (void)version;
    return no_tenants();
}

FDBFuture *fdb_tenant_get_id(FDBTenant *t)
{
    (void)t;
    return no_tenants();
}

void fdb_tenant_destroy(FDBTenant *t)
{
    if (t != NULL)
        misuse("fdb_tenant_destroy of a tenant this library never made");
}

FDBFuture *fdb_transaction_get_mapped_range(FDBTransaction *tr, const uint8_t *b, int bl,
                                            fdb_bool_t boe, int bo, const uint8_t *e, int el,
                                            fdb_bool_t eoe, int eo, const uint8_t *mapper,
                                            int mapper_length, int limit, int target_bytes,
                                            FDBStreamingMode mode, int iteration,
                                            fdb_bool_t snapshot, fdb_bool_t reverse)
{
    (void)tr, (void)b, (void)bl, (void)boe, (void)bo, (void)e, (void)el, (void)eoe, (void)eo;
    (void)mapper, (void)mapper_length, (void)limit, (void)target_bytes, (void)mode;
    (void)iteration, (void)snapshot, (void)reverse;
    return unsupported("fdb_transaction_get_mapped_range");
}

/* Tag throttling and cost accounting belong to a cluster's ratekeeper, which kvq has not. */
FDBFuture *fdb_transaction_get_tag_throttled_duration(FDBTransaction *tr)
{
    (void)tr;
    return unsupported("fdb_transaction_get_tag_throttled_duration");
}

FDBFuture *fdb_transaction_get_total_cost(FDBTransaction *tr)
{
    (void)tr;
    return unsupported("fdb_transaction_get_total_cost");
}

FDBFuture *fdb_transaction_get_blob_granule_ranges(FDBTransaction *tr, const uint8_t *b, int bl,
                                                   const uint8_t *e, int el, int range_limit)
{
    (void)tr, (void)b, (void)bl, (void)e, (void)el, (void)range_limit;
    return unsupported("fdb_transaction_get_blob_granule_ranges");
}

FDBResult *fdb_transaction_read_blob_granules(FDBTransaction *tr, const uint8_t *b, int bl,
                                              const uint8_t *e, int el, int64_t begin_version,
                                              int64_t read_version,
                                              FDBReadBlobGranuleContext granule_context)
{
    (void)tr, (void)b, (void)bl, (void)e, (void)el, (void)begin_version, (void)read_version;
    (void)granule_context;
    complain("fdb_transaction_read_blob_granules is not supported on a kvq directory");
    return result_error(KVQ_EUNSUPPORTED_OPERATION);
}

FDBFuture *fdb_transaction_summarize_blob_granules(FDBTransaction *tr, const uint8_t *b, int bl,
                                                   const uint8_t *e, int el,
                                                   int64_t summary_version, int range_limit)
{
    (void)tr, (void)b, (void)bl, (void)e, (void)el, (void)summary_version, (void)range_limit;
    return unsupported("fdb_transaction_summarize_blob_granules");
}

FDBFuture *fdb_transaction_read_blob_granules_description(FDBTransaction *tr, const uint8_t *b,
                                                          int bl, const uint8_t *e, int el,
                                                          int64_t begin_version,
                                                          int64_t read_version,
                                                          int64_t *read_version_out)
{
    (void)tr, (void)b, (void)bl, (void)e, (void)el, (void)begin_version, (void)read_version;
    (void)read_version_out;
    return unsupported("fdb_transaction_read_blob_granules_description");
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
    fdb_error_t r = tr_set_option(tr, option, value, value_length);
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
        tr_get_range(tr, begin_key_name, begin_key_name_length, begin_or_equal, begin_offset,
                     end_key_name, end_key_name_length, end_or_equal, end_offset, limit,
                     target_bytes, mode, iteration, snapshot, reverse);
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
    fdb_error_t r = fdb_code(tr_add_conflict_range(tr, begin_key_name, begin_key_name_length,
                                                   end_key_name, end_key_name_length, type));
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
    FDBFuture *r = tr_get_key(tr, key_name, key_name_length, or_equal, offset, snapshot);
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
    FDBFuture *r = tr_get_estimated_range_size_bytes(tr, b, bl, e, el);
    tr_unlock(tr);
    return r;
}

FDBFuture *fdb_transaction_get_range_split_points(
    FDBTransaction *tr, const uint8_t *b, int bl, const uint8_t *e, int el, int64_t chunk_size)
{
    tr_lock(tr);
    FDBFuture *r = tr_get_range_split_points(tr, b, bl, e, el, chunk_size);
    tr_unlock(tr);
    return r;
}

FDBFuture *fdb_transaction_get_addresses_for_key(FDBTransaction *tr,
                                                 const uint8_t *key_name,
                                                 int key_name_length)
{
    tr_lock(tr);
    FDBFuture *r = tr_get_addresses_for_key(tr, key_name, key_name_length);
    tr_unlock(tr);
    return r;
}
