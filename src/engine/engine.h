/* The private interface between kvq's public transaction API (engine.c) and its engines.
 *
 * engine.c validates every argument, enforces FoundationDB's limits and runs the retry loop;
 * an engine only implements the operations, on arguments already checked. Engines translate
 * their native errors into kvq codes here and nowhere else. */
#ifndef KVQ_ENGINE_H
#define KVQ_ENGINE_H

#include <pthread.h>
#include <stdint.h>

#include "engine/engine_layers.h"
#include "kvq/db.h"
#include "kvq/testing.h"
#include "util/util.h"

/* Every option a handle is opened with: kvq_db_options's, then kvq_testing_options's
 * (kvq/testing.h; all 0 for kvq_db_open). The engines read them from here. */
typedef struct kvq__db_opts {
    unsigned int version;
    unsigned int flags;
    int retry_limit;
    int64_t timeout_ms;
    int64_t max_retry_delay_ms;
    unsigned int file_mode;
    int api_version;
    double fault_rate;
    unsigned int fault_kinds;
    uint64_t fault_seed;
    unsigned int test_flags;
    /* The transaction window (1007 past it): KVQ_MAX_TXN_AGE_US, or for tests in slow builds
     * (valgrind, sanitizers) $KVQ_TEST_TXN_WINDOW_MS, read at every open (engine.c). */
    int64_t txn_window_us;
} kvq__db_opts;

#define KVQ__ENGINE_OPS_VERSION 1

/* Internal transaction options, never public (kvq_txn_set_option refuses them): early reads
 * and their settling (engine_layers.h, kvq__txn_early_read), passed to the embedded engine's
 * set_option. */
#define KVQ__TXN_EARLY_READ   ((kvq_txn_option)90001)
#define KVQ__TXN_EARLY_SETTLE ((kvq_txn_option)90002)

typedef struct kvq__engine_ops {
    unsigned int version;
    const char *name;

    int (*open)(void **out, kvq_db *db, const char *path, const kvq__db_opts *opts);
    void (*close)(void *engine);

    int (*txn_create)(void **out, void *engine, kvq_txn *txn);
    void (*txn_destroy)(void *t);
    void (*txn_reset)(void *t);

    int (*get)(void *t,
               kvq_bytes *value,
               int *present,
               const uint8_t *key,
               size_t key_len,
               unsigned int flags);
    int (*get_range)(void *t,
                     const kvq_kv **kvs,
                     size_t *count,
                     int *more,
                     const uint8_t *begin,
                     size_t begin_len,
                     const uint8_t *end,
                     size_t end_len,
                     int limit,
                     unsigned int flags);
    int (*set)(void *t, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len);
    int (*clear_range)(
        void *t, const uint8_t *begin, size_t begin_len, const uint8_t *end, size_t end_len);
    /* Every kvq_mutation, including the two versionstamped forms (already validated). */
    int (*atomic_op)(void *t,
                     const uint8_t *key,
                     size_t key_len,
                     const uint8_t *param,
                     size_t param_len,
                     kvq_mutation op);
    int (*add_conflict_range)(void *t,
                              const uint8_t *begin,
                              size_t begin_len,
                              const uint8_t *end,
                              size_t end_len,
                              kvq_conflict_type type);
    int (*get_read_version)(void *t, int64_t *out);
    int (*commit)(void *t);
    int (*get_committed_version)(void *t, int64_t *out);
    int (*get_versionstamp)(void *t, uint8_t out[10]);
    /* Optional (NULL: the engine does not have them; kvq reports KVQ_EUNSUPPORTED). */
    int (*set_read_version)(void *t, int64_t version);
    int (*get_approximate_size)(void *t, int64_t *out);
    /* KVQ_TXN_NEXT_WRITE_NO_WRITE_CONFLICT_RANGE, _READ_YOUR_WRITES_DISABLE, _SIZE_LIMIT,
     * _ACCESS_SYSTEM_KEYS, _READ_SYSTEM_KEYS, _SNAPSHOT_RYW_* (validated); cleared by
     * txn_reset. */
    int (*set_option)(void *t, kvq_txn_option option, int64_t value);

    /* Watches: the engine fills the watch it is given (see struct kvq_watch below). */
    int (*watch)(void *t, kvq_watch *w, const uint8_t *key, size_t key_len);
    /* Optional: called by kvq_watch_cancel so the engine can drop the watch early. */
    void (*watch_cancel)(kvq_watch *w);
    void (*watch_release)(kvq_watch *w);
} kvq__engine_ops;

struct kvq_db {
    const kvq__engine_ops *ops;
    void *engine;
    kvq__db_opts opts;
    /* Injected faults (kvq__choose_fault). */
    pthread_mutex_t fault_mu;
    kvq__rng fault_rng;
    /* Counters; updated with atomic operations. */
    uint64_t n_commits, n_conflicts, n_retries, n_batches, n_faults, n_syncs;
};

struct kvq_txn {
    kvq_db *db;
    void *t;
    /* Retry state, kept across kvq_txn_on_error and cleared by kvq_txn_reset. */
    int retries;
    int retry_limit;
    int64_t timeout_ms;
    int64_t max_retry_delay_ms;
    int64_t start_mono_us;
    int64_t backoff_us;
    kvq__rng rng;
    uint32_t next_user_version;
    int commit_timed_out; /* the last kvq_txn_commit failed with 1031 inside the engine */
    unsigned int system_keys; /* KVQ__SYSTEM_READ, KVQ__SYSTEM_WRITE: options 302 and 301 */
};

enum { KVQ__SYSTEM_READ = 1u << 0, KVQ__SYSTEM_WRITE = 1u << 1 };

/* kvq__txn_maybe_committed and kvq__db_test_flags: engine_layers.h. */

/* Every kind of injected fault. */
#define KVQ__FAULT_KNOWN                                                                   \
    (KVQ_FAULT_ALL | KVQ_FAULT_TIMED_OUT_COMMITTED | KVQ_FAULT_TIMED_OUT_NOT_COMMITTED)

/* A watch is shared by the waiter and the engine (which fires it from another thread), so it is
 * reference counted: the caller's handle holds one reference, the engine another while armed. */
enum { KVQ__WATCH_PENDING = 0, KVQ__WATCH_ARMED, KVQ__WATCH_DONE };

struct kvq_watch {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int refs;
    int state;  /* KVQ__WATCH_* */
    int result; /* when DONE: 0 fired, or an error */
    kvq_db *db;
    /* Engine-owned fields. */
    void *engine_data;
    struct kvq_watch *next, *prev;
};

/* Settles a watch with a result (0: fired) unless it is already settled; wakes waiters. */
void kvq__watch_settle(kvq_watch *w, int result);
/* Drops one reference; the last one frees the watch (calling ops->watch_release). */
void kvq__watch_unref(kvq_watch *w);
void kvq__watch_ref(kvq_watch *w);

/* Decides whether this commit gets an injected fault (kvq_testing_options.fault_rate): 0 or one of
 * the KVQ_FAULT_* kinds asked for, counted in the database's stats. */
unsigned int kvq__choose_fault(kvq_db *db);


/* Validation shared by the engines. */
int kvq__check_key(const uint8_t *key, size_t len, const char *what);

extern const kvq__engine_ops kvq__embedded_ops;
extern const kvq__engine_ops kvq__fdb_ops;

/* The retry loop's backoff, FoundationDB's on_error rules: a backoff that starts at initial_us
 * (10 ms on the fdb engine, as FoundationDB's client; 1 ms on the embedded engine, whose
 * commits take far less than a cluster's) and doubles after each retry up to max_delay_us
 * (30 s for 1042, 1078, 1235 and 1242); each retry sleeps a random fraction `unit` (in [0, 1))
 * of it. 1007 and 1009 sleep a fixed min(initial_us, max_delay_us) and leave it unchanged.
 * Returns the sleep and updates *backoff_us (0: not started). */
#define KVQ__FDB_INITIAL_BACKOFF_US  10000
#define KVQ__EMB_INITIAL_BACKOFF_US  1000
#define KVQ__RESOURCE_MAX_BACKOFF_US 30000000
int64_t kvq__retry_delay_us(
    int64_t *backoff_us, int err, int64_t max_delay_us, int64_t initial_us, double unit);

#endif /* KVQ_ENGINE_H */
