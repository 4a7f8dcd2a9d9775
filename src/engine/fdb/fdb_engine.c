/* The fdb engine: a FoundationDB cluster through its C client, libfdb_c, loaded at run time.
 *
 * The library is opened with dlopen ($KVQ_FDB_LIB first, then "libfdb_c.so"), so kvq builds
 * and runs without it; opening an `fdb:` database without it fails with KVQ_ENOENGINE and says
 * what to install. The first successful open selects the API version (710, or 730 when asked)
 * and starts the network thread, once per process; an atexit handler stops and joins it.
 *
 * Each operation maps one to one onto an fdb_transaction_* call and its future: block until
 * ready, then get. FoundationDB's error numbers are kvq's, so they pass through unchanged.
 * Futures own the memory of their results, so a transaction keeps the futures behind every
 * kvq_bytes and kvq_kv it returned until it is reset or destroyed.
 *
 * The retry loop (backoff, retry limit, timeout) is kvq's own, in engine.c: this engine never
 * calls fdb_transaction_on_error, which would sleep a second time; txn_reset resets the FDB
 * transaction instead. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/fdb/fdb_api.h"
#include "util/bytes.h"

/* kvq's numbers are FoundationDB's, so values cross the boundary without translation. */
_Static_assert((int)KVQ_MUT_ADD == (int)FDB_MUTATION_TYPE_ADD, "mutation numbers");
_Static_assert((int)KVQ_MUT_BIT_AND == (int)FDB_MUTATION_TYPE_BIT_AND, "mutation numbers");
_Static_assert((int)KVQ_MUT_BIT_OR == (int)FDB_MUTATION_TYPE_BIT_OR, "mutation numbers");
_Static_assert((int)KVQ_MUT_BIT_XOR == (int)FDB_MUTATION_TYPE_BIT_XOR, "mutation numbers");
_Static_assert((int)KVQ_MUT_MAX == (int)FDB_MUTATION_TYPE_MAX, "mutation numbers");
_Static_assert((int)KVQ_MUT_MIN == (int)FDB_MUTATION_TYPE_MIN, "mutation numbers");
_Static_assert((int)KVQ_MUT_SET_VERSIONSTAMPED_KEY == (int)FDB_MUTATION_TYPE_SET_VERSIONSTAMPED_KEY,
               "mutation numbers");
_Static_assert((int)KVQ_MUT_SET_VERSIONSTAMPED_VALUE ==
                   (int)FDB_MUTATION_TYPE_SET_VERSIONSTAMPED_VALUE,
               "mutation numbers");
_Static_assert((int)KVQ_MUT_BYTE_MIN == (int)FDB_MUTATION_TYPE_BYTE_MIN, "mutation numbers");
_Static_assert((int)KVQ_MUT_BYTE_MAX == (int)FDB_MUTATION_TYPE_BYTE_MAX, "mutation numbers");
_Static_assert((int)KVQ_MUT_APPEND_IF_FITS == (int)FDB_MUTATION_TYPE_APPEND_IF_FITS,
               "mutation numbers");
_Static_assert((int)KVQ_MUT_COMPARE_AND_CLEAR == (int)FDB_MUTATION_TYPE_COMPARE_AND_CLEAR,
               "mutation numbers");
_Static_assert((int)KVQ_CONFLICT_READ == (int)FDB_CONFLICT_RANGE_TYPE_READ, "conflict types");
_Static_assert((int)KVQ_CONFLICT_WRITE == (int)FDB_CONFLICT_RANGE_TYPE_WRITE, "conflict types");
_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "dlsym returns function pointers");

#define DEFAULT_LIBRARY "libfdb_c.so"

/* The library, loaded once per process. */
typedef struct fdb_lib {
#define KVQ_FDB_POINTER(ret, name, params) ret(*name) params;
    KVQ_FDB_FUNCTIONS(KVQ_FDB_POINTER)
#undef KVQ_FDB_POINTER
} fdb_lib;

/* Process-wide state. A mutex rather than pthread_once guards it: a failed load must be
 * retryable (after $KVQ_FDB_LIB is set, say), and the first open chooses the API version. */
static struct {
    pthread_mutex_t mu;
    void *handle;
    char *path;      /* the library that was loaded */
    int api_version; /* selected; 0 until then */
    int network;     /* 1 once the network thread runs */
    int forked;      /* 1 in a child forked after the network started */
    pthread_t thread;
    fdb_error_t run_error;
    fdb_lib fn;
} g = { .mu = PTHREAD_MUTEX_INITIALIZER };

#define F (g.fn)

typedef struct fdb_engine {
    kvq_db *db;
    FDBDatabase *fdb;
    kvq__db_opts opts;
    /* Injected commit faults (kvq_testing_options.fault_rate), as the embedded engine has them. */
} fdb_engine;

/* A watch's engine side: the FDB watch future and the kvq_watch it settles. The kvq_watch may be
 * freed before the future completes (its release nulls `w` under `mu`), and the callback may run
 * after the future is destroyed, so this outlives both: one reference for the kvq_watch, one for
 * the callback, one while the transaction has not committed. */
typedef struct fdb_watch {
    pthread_mutex_t mu;
    int refs;
    kvq_watch *w;
    FDBFuture *f;
} fdb_watch;

typedef struct ptr_vec {
    void **v;
    size_t n, cap;
} ptr_vec;

typedef struct fdb_txn {
    fdb_engine *e;
    kvq_txn *owner;
    FDBTransaction *tr;
    ptr_vec futures;  /* futures whose memory backs returned kvq_bytes / kvq_kv */
    ptr_vec blocks;   /* kvq_kv arrays returned by get_range */
    ptr_vec watches;  /* fdb_watch of this transaction, until it commits */
    FDBFuture *stamp; /* the versionstamp, requested before commit */
    int wrote;        /* a mutation or write-conflict range was added */
    int read;         /* a key or range was read */
    int committed;
    int64_t committed_version;
    /* The FoundationDB timeout option last applied, and when the FDB transaction started. */
    int64_t applied_timeout_ms;
    int64_t fdb_start_mono_us;
} fdb_txn;

static const uint8_t empty_key[1] = { 0 };

/* Errors --------------------------------------------------------------------------------- */

static int fdb_fail(fdb_error_t err, const char *what)
{
    const char *msg = F.fdb_get_error != NULL ? F.fdb_get_error(err) : NULL;
    return kvq__error(err, "fdb: %s: %s (%d)", what, msg != NULL ? msg : kvq_strerror(err), err);
}

/* Blocks until f is ready and returns its error (0 when it holds a value). */
static int await(FDBFuture *f, const char *what)
{
    fdb_error_t err = F.fdb_future_block_until_ready(f);
    if (err == 0)
        err = F.fdb_future_get_error(f);
    return err != 0 ? fdb_fail(err, what) : 0;
}

/* Loading the library and starting the network ----------------------------------------- */

static void *network_main(void *arg)
{
    (void)arg;
    fdb_error_t err = F.fdb_run_network();
    /* Nonzero only if the network could not run at all; later opens report it. */
    __atomic_store_n(&g.run_error, err, __ATOMIC_RELEASE);
    return NULL;
}

static void network_atexit(void)
{
    if (!g.network || g.forked)
        return;
    F.fdb_stop_network();
    if (!pthread_equal(pthread_self(), g.thread))
        pthread_join(g.thread, NULL);
    g.network = 0;
}

/* libfdb_c cannot be used in a forked child: its network thread did not survive the fork. The
 * lock is held across fork() so that the child finds the state consistent. */
static void before_fork(void)
{
    pthread_mutex_lock(&g.mu);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&g.mu);
}

static void after_fork_child(void)
{
    if (g.network)
        g.forked = 1;
    pthread_mutex_unlock(&g.mu);
}

static int load_symbols(void *h, const char *path)
{
#define KVQ_FDB_RESOLVE(ret, name, params)                                                     \
    {                                                                                          \
        void *sym = dlsym(h, #name);                                                           \
        if (sym == NULL)                                                                       \
            return kvq__error(KVQ_ENOENGINE,                                                   \
                              "the fdb engine: %s has no symbol %s; it is not FoundationDB's " \
                              "client library libfdb_c.so (7.1 or newer)",                     \
                              path, #name);                                                    \
        memcpy(&g.fn.name, &sym, sizeof(sym));                                                 \
    }
    KVQ_FDB_FUNCTIONS(KVQ_FDB_RESOLVE)
#undef KVQ_FDB_RESOLVE
    return 0;
}

/* Opens libfdb_c: $KVQ_FDB_LIB first, then the system's libfdb_c.so. Called with g.mu held. */
static int load_library(void)
{
    if (g.handle != NULL)
        return 0;
    const char *env = getenv("KVQ_FDB_LIB");
    char tried[1024] = "";
    const char *candidates[2] = { env != NULL && env[0] != '\0' ? env : NULL, DEFAULT_LIBRARY };
    for (int i = 0; i < 2; i++) {
        const char *path = candidates[i];
        if (path == NULL)
            continue;
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h == NULL) {
            const char *why = dlerror();
            size_t used = strlen(tried);
            snprintf(tried + used, sizeof(tried) - used, "%s%s", used > 0 ? "; " : "",
                     why != NULL ? why : path);
            continue;
        }
        int rc = load_symbols(h, path);
        if (rc != 0) {
            /* No pointer into an unloaded library stays behind. */
            memset(&g.fn, 0, sizeof(g.fn));
            dlclose(h);
            return rc;
        }
        g.path = kvq__strdup(path);
        if (g.path == NULL) {
            memset(&g.fn, 0, sizeof(g.fn));
            dlclose(h);
            return kvq__error(KVQ_ENOMEM, "out of memory");
        }
        g.handle = h;
        return 0;
    }
    return kvq__error(KVQ_ENOENGINE,
                      "the fdb engine needs FoundationDB's client library libfdb_c.so, which "
                      "was not found: install FoundationDB's client package "
                      "(foundationdb-clients, from FoundationDB's releases) or set "
                      "$KVQ_FDB_LIB to the path of libfdb_c.so (%s)",
                      tried);
}

/* Selects the API version and starts the network thread, once per process. Called with g.mu
 * held, after load_library. */
static int start_client(int api_version)
{
    if (g.api_version == 0) {
        int max = F.fdb_get_max_api_version();
        if (api_version > max)
            return kvq__error(KVQ_EAPI_VERSION_NOT_SUPPORTED,
                              "the fdb engine: API version %d was asked, but %s (client %s) "
                              "supports at most %d",
                              api_version, g.path, F.fdb_get_client_version(), max);
        /* fdb_select_api_version(v) is fdb_select_api_version_impl(v, FDB_API_VERSION) in
         * fdb_c.h; kvq's declarations are those of header version v itself. */
        fdb_error_t err = F.fdb_select_api_version_impl(api_version, api_version);
        if (err != 0)
            return fdb_fail(err, "selecting the API version");
        g.api_version = api_version;
    } else if (g.api_version != api_version) {
        return kvq__error(KVQ_EAPI_VERSION_INVALID,
                          "the fdb engine: API version %d was already selected in this process "
                          "and cannot be changed to %d",
                          g.api_version, api_version);
    }
    if (g.network)
        return 0;
    fdb_error_t err = F.fdb_setup_network();
    if (err != 0)
        return fdb_fail(err, "setting up the network");
    if (pthread_create(&g.thread, NULL, network_main, NULL) != 0) {
        /* The network was set up and cannot be set up again: stay unusable. */
        return kvq__error(KVQ_ENOMEM, "the fdb engine: cannot start the network thread");
    }
    g.network = 1;
    /* Reached once per process: the network cannot be set up twice. */
    atexit(network_atexit);
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    return 0;
}

/* The database ---------------------------------------------------------------------------- */

static int fdb_open(void **out, kvq_db *db, const char *path, const kvq__db_opts *opts)
{
    if (opts->api_version != FDB_API_VERSION_710 && opts->api_version != FDB_API_VERSION_730)
        return kvq__error(KVQ_EAPI_VERSION_INVALID,
                          "the fdb engine: API version %d is not one kvq speaks (710 or 730)",
                          opts->api_version);
    pthread_mutex_lock(&g.mu);
    int rc = 0;
    if (g.forked)
        rc = kvq__error(KVQ_EUNSUPPORTED,
                        "the fdb engine: this process was forked from one that had started "
                        "FoundationDB's client, which does not survive fork(); fork before "
                        "the first fdb open, or exec a new program");
    if (rc == 0)
        rc = load_library();
    if (rc == 0)
        rc = start_client(opts->api_version);
    if (rc == 0) {
        fdb_error_t err = __atomic_load_n(&g.run_error, __ATOMIC_ACQUIRE);
        if (err != 0)
            rc = fdb_fail(err, "the network thread stopped");
    }
    pthread_mutex_unlock(&g.mu);
    if (rc != 0)
        return rc;

    fdb_engine *e = kvq__calloc(1, sizeof(*e));
    if (e == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    e->db = db;
    e->opts = *opts;
    /* An empty path is FoundationDB's default cluster file. */
    fdb_error_t err = F.fdb_create_database(path[0] != '\0' ? path : NULL, &e->fdb);
    if (err != 0) {
        kvq__free(e);
        const char *msg = F.fdb_get_error(err);
        return kvq__error(err, "fdb: cannot open the cluster %s: %s (%d)",
                          path[0] != '\0' ? path : "of the default cluster file",
                          msg != NULL ? msg : kvq_strerror(err), err);
    }
    *out = e;
    return 0;
}

static void fdb_close(void *ep)
{
    fdb_engine *e = ep;
    if (e == NULL)
        return;
    F.fdb_database_destroy(e->fdb);
    kvq__free(e);
}

/* Transactions ---------------------------------------------------------------------------- */

static int vec_reserve(ptr_vec *v)
{
    if (v->n < v->cap)
        return 0;
    size_t cap = v->cap ? v->cap * 2 : 8;
    void **nv = kvq__realloc(v->v, cap * sizeof(*nv));
    if (nv == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    v->v = nv;
    v->cap = cap;
    return 0;
}

static void watch_unref(fdb_watch *fw)
{
    pthread_mutex_lock(&fw->mu);
    int left = --fw->refs;
    pthread_mutex_unlock(&fw->mu);
    if (left > 0)
        return;
    pthread_mutex_destroy(&fw->mu);
    kvq__free(fw);
}

/* Drops everything the transaction holds: the memory of what it returned, its versionstamp
 * and its claim on watches that never committed (their futures fail with 1025 when the FDB
 * transaction is reset or destroyed). */
static void txn_clear(fdb_txn *t)
{
    for (size_t i = 0; i < t->futures.n; i++)
        F.fdb_future_destroy(t->futures.v[i]);
    t->futures.n = 0;
    for (size_t i = 0; i < t->blocks.n; i++)
        kvq__free(t->blocks.v[i]);
    t->blocks.n = 0;
    for (size_t i = 0; i < t->watches.n; i++)
        watch_unref(t->watches.v[i]);
    t->watches.n = 0;
    if (t->stamp != NULL) {
        F.fdb_future_destroy(t->stamp);
        t->stamp = NULL;
    }
    t->wrote = 0;
    t->read = 0;
    t->committed = 0;
    t->committed_version = 0;
    t->applied_timeout_ms = 0;
    t->fdb_start_mono_us = kvq__mono_us();
}

static int fdb_txn_create(void **out, void *ep, kvq_txn *owner)
{
    fdb_engine *e = ep;
    fdb_txn *t = kvq__calloc(1, sizeof(*t));
    if (t == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for a transaction");
    fdb_error_t err = F.fdb_database_create_transaction(e->fdb, &t->tr);
    if (err != 0) {
        kvq__free(t);
        return fdb_fail(err, "creating a transaction");
    }
    t->e = e;
    t->owner = owner;
    t->fdb_start_mono_us = kvq__mono_us();
    *out = t;
    return 0;
}

static void fdb_txn_destroy(void *tp)
{
    fdb_txn *t = tp;
    txn_clear(t);
    /* Destroying an uncommitted transaction drops its writes. */
    F.fdb_transaction_destroy(t->tr);
    kvq__free(t->futures.v);
    kvq__free(t->blocks.v);
    kvq__free(t->watches.v);
    kvq__free(t);
}

static void fdb_txn_reset(void *tp)
{
    fdb_txn *t = tp;
    txn_clear(t);
    F.fdb_transaction_reset(t->tr);
}

/* Before each operation: refuse use after commit (as the embedded engine does), and make kvq's
 * time budget (KVQ_TXN_TIMEOUT_MS) bind inside calls that block on the cluster too, through
 * FoundationDB's own timeout option, which counts from the transaction's start and fails
 * with the same 1031. engine.c checks the budget between calls. */
static int prepare(fdb_txn *t)
{
    if (t->committed)
        return kvq__error(KVQ_EUSED_DURING_COMMIT,
                          "the transaction has committed; reset it before using it again");
    int64_t want = 0;
    if (t->owner->timeout_ms > 0) {
        int64_t deadline_us = t->owner->start_mono_us + t->owner->timeout_ms * 1000;
        want = (deadline_us - t->fdb_start_mono_us + 999) / 1000;
        if (want < 1)
            want = 1;
    }
    if (want == t->applied_timeout_ms)
        return 0;
    uint8_t param[8];
    kvq__le64_put(param, (uint64_t)want);
    fdb_error_t err = F.fdb_transaction_set_option(t->tr, FDB_TR_OPTION_TIMEOUT, param, 8);
    if (err != 0)
        return fdb_fail(err, "setting the transaction timeout");
    t->applied_timeout_ms = want;
    return 0;
}

static int keep_future(fdb_txn *t, FDBFuture *f)
{
    int rc = vec_reserve(&t->futures);
    if (rc != 0) {
        F.fdb_future_destroy(f);
        return rc;
    }
    t->futures.v[t->futures.n++] = f;
    return 0;
}

/* KVQ_TEST_SKIP_CONFLICT_CHECK, the test knob that must make commits never fail with 1020: on
 * a cluster, reads that add no read-conflict range have exactly that effect. */
static int snapshot_flag(const fdb_txn *t, unsigned int flags)
{
    return (flags & KVQ_SNAPSHOT) != 0 || (t->e->opts.test_flags & KVQ_TEST_SKIP_CONFLICT_CHECK);
}

static int fdb_get(void *tp,
                   kvq_bytes *value,
                   int *present,
                   const uint8_t *key,
                   size_t key_len,
                   unsigned int flags)
{
    fdb_txn *t = tp;
    int rc = prepare(t);
    if (rc != 0)
        return rc;
    t->read = 1;
    FDBFuture *f = F.fdb_transaction_get(t->tr, key != NULL ? key : empty_key, (int)key_len,
                                         snapshot_flag(t, flags));
    rc = await(f, "get");
    fdb_bool_t found = 0;
    const uint8_t *v = NULL;
    int vlen = 0;
    if (rc == 0) {
        fdb_error_t err = F.fdb_future_get_value(f, &found, &v, &vlen);
        if (err != 0)
            rc = fdb_fail(err, "get");
    }
    if (rc != 0 || !found) {
        F.fdb_future_destroy(f);
        return rc;
    }
    rc = keep_future(t, f);
    if (rc != 0)
        return rc;
    *present = 1;
    value->data = v;
    value->len = (size_t)vlen;
    return 0;
}

typedef struct kv_vec {
    kvq_kv *v;
    size_t n, cap;
} kv_vec;

static int kv_append(kv_vec *o, const FDBKeyValue *kvs, int n)
{
    if (o->n + (size_t)n > o->cap) {
        size_t cap = o->cap ? o->cap : 16;
        while (cap < o->n + (size_t)n)
            cap *= 2;
        kvq_kv *nv = kvq__realloc(o->v, cap * sizeof(*nv));
        if (nv == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory for a range read");
        o->v = nv;
        o->cap = cap;
    }
    for (int i = 0; i < n; i++) {
        /* Members are read one by one: the struct is packed. */
        kvq_kv *kv = &o->v[o->n++];
        kv->key.data = kvs[i].key;
        kv->key.len = (size_t)kvs[i].key_length;
        kv->value.data = kvs[i].value;
        kv->value.len = (size_t)kvs[i].value_length;
    }
    return 0;
}

/* Reads [begin, end) with first-greater-or-equal selectors at both ends. The server may answer
 * a part (`more` before the limit is filled); the rest is read from just after the last key
 * (forward) or up to it (reverse) until the limit is filled or the range ends. Each part adds
 * the read-conflict range it covered, so together they cover exactly what was returned. */
static int fdb_get_range(void *tp,
                         const kvq_kv **kvs,
                         size_t *count,
                         int *more,
                         const uint8_t *begin,
                         size_t begin_len,
                         const uint8_t *end,
                         size_t end_len,
                         int limit,
                         unsigned int flags)
{
    fdb_txn *t = tp;
    int rc = prepare(t);
    if (rc != 0)
        return rc;
    t->read = 1;
    int reverse = (flags & KVQ_REVERSE) != 0;
    int snapshot = snapshot_flag(t, flags);
    const uint8_t *b = begin != NULL ? begin : empty_key;
    const uint8_t *e = end != NULL ? end : empty_key;
    int blen = (int)begin_len, elen = (int)end_len;
    uint8_t *after = NULL; /* forward: the last key returned + 0x00 */
    kv_vec out = { 0 };
    int left = limit; /* 0: no limit */
    int m = 0;
    for (;;) {
        FDBFuture *f =
            F.fdb_transaction_get_range(t->tr, b, blen, 0, 1, e, elen, 0, 1, left, 0,
                                        FDB_STREAMING_MODE_WANT_ALL, 0, snapshot, reverse);
        rc = await(f, "get_range");
        const FDBKeyValue *part = NULL;
        int n = 0;
        if (rc == 0) {
            fdb_error_t err = F.fdb_future_get_keyvalue_array(f, &part, &n, &m);
            if (err != 0)
                rc = fdb_fail(err, "get_range");
        }
        if (rc == 0 && limit > 0 && n > left)
            n = left; /* never more than asked, whatever the server says */
        if (rc == 0 && n > 0)
            rc = kv_append(&out, part, n);
        if (rc != 0 || n == 0) {
            F.fdb_future_destroy(f);
            if (rc != 0)
                break;
        } else if ((rc = keep_future(t, f)) != 0) {
            break;
        }
        if (limit > 0)
            left -= n;
        /* A server that says `more` but returned nothing would have us ask the same again. */
        if (!m || (limit > 0 && left <= 0) || n == 0)
            break;
        const kvq_bytes *last = &out.v[out.n - 1].key;
        if (reverse) {
            e = last->data;
            elen = (int)last->len;
        } else {
            uint8_t *na = kvq__realloc(after, last->len + 1);
            if (na == NULL) {
                rc = kvq__error(KVQ_ENOMEM, "out of memory for a range read");
                break;
            }
            after = na;
            memcpy(after, last->data, last->len);
            after[last->len] = 0;
            b = after;
            blen = (int)last->len + 1;
        }
    }
    kvq__free(after);
    if (rc == 0 && out.n > 0) {
        rc = vec_reserve(&t->blocks);
        if (rc == 0)
            t->blocks.v[t->blocks.n++] = out.v;
    }
    if (rc != 0) {
        kvq__free(out.v);
        return rc;
    }
    *kvs = out.v;
    *count = out.n;
    /* Like FoundationDB, `more` may be 1 when exactly `limit` keys were left. */
    *more = m && out.n > 0;
    return 0;
}

static int fdb_set(void *tp, const uint8_t *key, size_t key_len, const uint8_t *value, size_t n)
{
    fdb_txn *t = tp;
    int rc = prepare(t);
    if (rc != 0)
        return rc;
    F.fdb_transaction_set(t->tr, key != NULL ? key : empty_key, (int)key_len,
                          value != NULL ? value : empty_key, (int)n);
    t->wrote = 1;
    return 0;
}

static int fdb_clear_range(
    void *tp, const uint8_t *begin, size_t begin_len, const uint8_t *end, size_t end_len)
{
    fdb_txn *t = tp;
    int rc = prepare(t);
    if (rc != 0)
        return rc;
    F.fdb_transaction_clear_range(t->tr, begin != NULL ? begin : empty_key, (int)begin_len,
                                  end != NULL ? end : empty_key, (int)end_len);
    t->wrote = 1;
    return 0;
}

static int fdb_atomic_op(void *tp,
                         const uint8_t *key,
                         size_t key_len,
                         const uint8_t *param,
                         size_t param_len,
                         kvq_mutation op)
{
    fdb_txn *t = tp;
    int rc = prepare(t);
    if (rc != 0)
        return rc;
    /* Versionstamped keys and values carry their 4-byte little-endian offset, which is the
     * form of FoundationDB's API 520 and later: they pass unchanged. */
    F.fdb_transaction_atomic_op(t->tr, key != NULL ? key : empty_key, (int)key_len,
                                param != NULL ? param : empty_key, (int)param_len,
                                (FDBMutationType)op);
    t->wrote = 1;
    return 0;
}

static int fdb_add_conflict_range(void *tp,
                                  const uint8_t *begin,
                                  size_t begin_len,
                                  const uint8_t *end,
                                  size_t end_len,
                                  kvq_conflict_type type)
{
    fdb_txn *t = tp;
    int rc = prepare(t);
    if (rc != 0)
        return rc;
    if (type == KVQ_CONFLICT_READ && (t->e->opts.test_flags & KVQ_TEST_SKIP_CONFLICT_CHECK))
        return 0;
    fdb_error_t err = F.fdb_transaction_add_conflict_range(
        t->tr, begin != NULL ? begin : empty_key, (int)begin_len, end != NULL ? end : empty_key,
        (int)end_len, (FDBConflictRangeType)type);
    if (err != 0)
        return fdb_fail(err, "add_conflict_range");
    if (type == KVQ_CONFLICT_WRITE)
        t->wrote = 1;
    return 0;
}

static int fdb_get_read_version(void *tp, int64_t *out)
{
    fdb_txn *t = tp;
    int rc = prepare(t);
    if (rc != 0)
        return rc;
    FDBFuture *f = F.fdb_transaction_get_read_version(t->tr);
    rc = await(f, "get_read_version");
    if (rc == 0) {
        fdb_error_t err = F.fdb_future_get_int64(f, out);
        if (err != 0)
            rc = fdb_fail(err, "get_read_version");
    }
    F.fdb_future_destroy(f);
    return rc;
}

/* libfdb_c reports a bad read version at the next read, as it does any deferred error. */
static int fdb_set_read_version(void *tp, int64_t version)
{
    fdb_txn *t = tp;
    int rc = prepare(t);
    if (rc == 0)
        F.fdb_transaction_set_read_version(t->tr, version);
    return rc;
}

static int fdb_get_approximate_size(void *tp, int64_t *out)
{
    fdb_txn *t = tp;
    int rc = prepare(t);
    if (rc != 0)
        return rc;
    FDBFuture *f = F.fdb_transaction_get_approximate_size(t->tr);
    rc = await(f, "get_approximate_size");
    if (rc == 0) {
        fdb_error_t err = F.fdb_future_get_int64(f, out);
        if (err != 0)
            rc = fdb_fail(err, "get_approximate_size");
    }
    F.fdb_future_destroy(f);
    return rc;
}

/* The options pass to FoundationDB under the same numbers; only the size limit has a value. */
static int fdb_set_option(void *tp, kvq_txn_option option, int64_t value)
{
    fdb_txn *t = tp;
    int rc = prepare(t);
    if (rc != 0)
        return rc;
    /* libfdb_c reports an option's misuse only at the transaction's next operation; kvq reports
     * it from the call, as the embedded engine does, so the error means the same on both. */
    if (option == KVQ_TXN_READ_YOUR_WRITES_DISABLE && (t->read || t->wrote))
        return kvq__error(KVQ_ECLIENT_INVALID_OPERATION,
                          "read-your-writes can be disabled only before the first read or write");
    uint8_t param[8];
    kvq__le64_put(param, (uint64_t)value);
    int sized = option == KVQ_TXN_SIZE_LIMIT;
    fdb_error_t err = F.fdb_transaction_set_option(t->tr, (FDBTransactionOption)option,
                                                   sized ? param : NULL, sized ? 8 : 0);
    return err != 0 ? fdb_fail(err, "setting a transaction option") : 0;
}

/* Settles the transaction's watches that will never be armed (an injected fault). */
static void watches_fail(fdb_txn *t, int rc)
{
    for (size_t i = 0; i < t->watches.n; i++) {
        fdb_watch *fw = t->watches.v[i];
        pthread_mutex_lock(&fw->mu);
        if (fw->w != NULL)
            kvq__watch_settle(fw->w, rc);
        pthread_mutex_unlock(&fw->mu);
    }
}

/* After a successful commit, the transaction's watches are armed (FoundationDB arms them
 * itself; kvq records the state) and the transaction lets go of them. */
static void watches_arm(fdb_txn *t)
{
    for (size_t i = 0; i < t->watches.n; i++) {
        fdb_watch *fw = t->watches.v[i];
        pthread_mutex_lock(&fw->mu);
        if (fw->w != NULL) {
            pthread_mutex_lock(&fw->w->mu);
            if (fw->w->state == KVQ__WATCH_PENDING)
                fw->w->state = KVQ__WATCH_ARMED;
            pthread_mutex_unlock(&fw->w->mu);
        }
        pthread_mutex_unlock(&fw->mu);
        watch_unref(fw);
    }
    t->watches.n = 0;
}


static int fdb_commit(void *tp)
{
    fdb_txn *t = tp;
    fdb_engine *e = t->e;
    int rc = prepare(t);
    if (rc != 0)
        return rc;
    unsigned int fault = 0;
    if (t->wrote) {
        if (e->opts.flags & KVQ_DB_READ_ONLY) {
            rc = kvq__error(KVQ_EPERM, "the database was opened read-only");
            watches_fail(t, rc);
            return rc;
        }
        fault = kvq__choose_fault(e->db);
        if (fault == KVQ_FAULT_NOT_COMMITTED || fault == KVQ_FAULT_UNKNOWN_NOT_COMMITTED ||
            fault == KVQ_FAULT_TIMED_OUT_NOT_COMMITTED) {
            rc = fault == KVQ_FAULT_NOT_COMMITTED
                     ? kvq__error(KVQ_ENOT_COMMITTED, "injected fault: not committed")
                 : fault == KVQ_FAULT_UNKNOWN_NOT_COMMITTED
                     ? kvq__error(KVQ_ECOMMIT_UNKNOWN_RESULT,
                                  "injected fault: result unknown (not committed)")
                     : kvq__error(KVQ_ETRANSACTION_TIMED_OUT,
                                  "injected fault: commit timed out (not committed)");
            watches_fail(t, rc);
            return rc;
        }
    }
    /* The versionstamp must be asked for before the commit; it is ready after it. A read-only
     * transaction has none. */
    if (t->stamp == NULL && t->wrote)
        t->stamp = F.fdb_transaction_get_versionstamp(t->tr);
    FDBFuture *f = F.fdb_transaction_commit(t->tr);
    rc = await(f, "commit");
    F.fdb_future_destroy(f);
    if (rc != 0)
        return rc; /* FoundationDB fails the watches with the same error */
    t->committed = 1;
    int64_t cv = -1;
    if (F.fdb_transaction_get_committed_version(t->tr, &cv) != 0)
        cv = -1;
    t->committed_version = cv;
    if (cv > 0) {
        __atomic_add_fetch(&e->db->n_commits, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&e->db->n_batches, 1, __ATOMIC_RELAXED);
    }
    watches_arm(t);
    if (fault == KVQ_FAULT_UNKNOWN_COMMITTED)
        return kvq__error(KVQ_ECOMMIT_UNKNOWN_RESULT, "injected fault: result unknown (committed)");
    if (fault == KVQ_FAULT_TIMED_OUT_COMMITTED)
        return kvq__error(KVQ_ETRANSACTION_TIMED_OUT, "injected fault: commit timed out (committed)");
    return 0;
}

static int fdb_get_committed_version(void *tp, int64_t *out)
{
    fdb_txn *t = tp;
    if (!t->committed || t->committed_version <= 0)
        return kvq__error(KVQ_ENO_COMMIT_VERSION,
                          "the transaction has no commit version (not committed, or read-only)");
    *out = t->committed_version;
    return 0;
}

static int fdb_get_versionstamp(void *tp, uint8_t out[10])
{
    fdb_txn *t = tp;
    if (!t->committed || t->committed_version <= 0 || t->stamp == NULL)
        return kvq__error(KVQ_ENO_COMMIT_VERSION,
                          "the transaction has no versionstamp (not committed, or read-only)");
    int rc = await(t->stamp, "get_versionstamp");
    if (rc != 0)
        return rc;
    const uint8_t *k = NULL;
    int n = 0;
    fdb_error_t err = F.fdb_future_get_key(t->stamp, &k, &n);
    if (err != 0)
        return fdb_fail(err, "get_versionstamp");
    if (n != 10)
        return kvq__error(KVQ_EINTERNAL_ERROR, "fdb: the versionstamp has %d bytes, not 10", n);
    memcpy(out, k, 10);
    return 0;
}

/* Watches ---------------------------------------------------------------------------------- */

/* Runs once, when the watch future is ready: on the network thread, or at once in the thread
 * that set the callback. Never blocks. */
static void watch_fired(FDBFuture *f, void *arg)
{
    fdb_watch *fw = arg;
    pthread_mutex_lock(&fw->mu);
    /* A released watch has destroyed its future: f must not be touched then. */
    if (fw->w != NULL)
        kvq__watch_settle(fw->w, F.fdb_future_get_error(f));
    pthread_mutex_unlock(&fw->mu);
    watch_unref(fw);
}

static int fdb_watch_create(void *tp, kvq_watch *w, const uint8_t *key, size_t key_len)
{
    fdb_txn *t = tp;
    int rc = prepare(t);
    if (rc == 0)
        rc = vec_reserve(&t->watches);
    if (rc != 0)
        return rc;
    fdb_watch *fw = kvq__calloc(1, sizeof(*fw));
    if (fw == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for a watch");
    pthread_mutex_init(&fw->mu, NULL);
    fw->refs = 3; /* the kvq_watch, the callback, the transaction until it commits */
    fw->w = w;
    fw->f = F.fdb_transaction_watch(t->tr, key != NULL ? key : empty_key, (int)key_len);
    w->engine_data = fw;
    t->watches.v[t->watches.n++] = fw;
    fdb_error_t err = F.fdb_future_set_callback(fw->f, watch_fired, fw);
    if (err != 0) {
        kvq__watch_settle(w, fdb_fail(err, "watch"));
        watch_unref(fw); /* the callback will never run */
    }
    return 0;
}

/* kvq_watch_cancel: drop the cluster's watch now rather than when the handle is destroyed, so
 * that it stops counting against the cluster's limit on watches. The callback then runs with
 * operation_cancelled and finds the watch already settled. */
static void fdb_watch_cancel(kvq_watch *w)
{
    fdb_watch *fw = w->engine_data;
    if (fw != NULL)
        F.fdb_future_cancel(fw->f);
}

/* The last reference to the kvq_watch is gone: cancel the FDB watch and free its future. The
 * callback may still run later, on the network thread; it finds `w` NULL and only lets go. */
static void fdb_watch_release(kvq_watch *w)
{
    fdb_watch *fw = w->engine_data;
    if (fw == NULL)
        return;
    w->engine_data = NULL;
    pthread_mutex_lock(&fw->mu);
    fw->w = NULL;
    pthread_mutex_unlock(&fw->mu);
    F.fdb_future_cancel(fw->f);
    F.fdb_future_destroy(fw->f);
    watch_unref(fw);
}

const kvq__engine_ops kvq__fdb_ops = {
    .version = KVQ__ENGINE_OPS_VERSION,
    .name = "fdb",
    .open = fdb_open,
    .close = fdb_close,
    .txn_create = fdb_txn_create,
    .txn_destroy = fdb_txn_destroy,
    .txn_reset = fdb_txn_reset,
    .get = fdb_get,
    .get_range = fdb_get_range,
    .set = fdb_set,
    .clear_range = fdb_clear_range,
    .atomic_op = fdb_atomic_op,
    .add_conflict_range = fdb_add_conflict_range,
    .get_read_version = fdb_get_read_version,
    .commit = fdb_commit,
    .get_committed_version = fdb_get_committed_version,
    .get_versionstamp = fdb_get_versionstamp,
    .set_read_version = fdb_set_read_version,
    .get_approximate_size = fdb_get_approximate_size,
    .set_option = fdb_set_option,
    .watch = fdb_watch_create,
    .watch_cancel = fdb_watch_cancel,
    .watch_release = fdb_watch_release,
};
