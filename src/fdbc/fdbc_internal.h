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

/* This header: what the files of libkvq_fdb_c.so (src/fdbc) share, its types, constants and
 * internal functions. Never installed. One file per FoundationDB object: fdb_network.c,
 * fdb_future.c, fdb_database.c, fdb_transaction.c (with fdb_ranges.c, fdb_options.c and
 * fdb_special.c, the calls it hands on); below them, fdb_txn_state.c (a transaction's state
 * every call reads first) and fdb_common.c (misuse reports, the network's state, copies);
 * fdb_errors.c holds the error texts. Calls go one way: fdb_network.c and fdb_transaction.c at
 * the top; then fdb_ranges.c and fdb_options.c; fdb_special.c; fdb_database.c; fdb_future.c
 * and fdb_txn_state.c; fdb_common.c at the bottom. Internal names are kvq__fdbc_ (the fdb_
 * names are FoundationDB's API). */
#ifndef KVQ_FDBC_INTERNAL_H
#define KVQ_FDBC_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kvq/kvq.h"
#include "engine/fdb/fdb_api.h"
#include "fdbc/fdbc_extra.h"
#include "util/util.h"

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


/* The network: its state, shared by every file (fdb_common.c defines it; fdb_network.c runs it). */
struct kvq__fdbc_net_state {
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
};

extern struct kvq__fdbc_net_state kvq__fdbc_net;

/* The kinds of results a future holds. */
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

/* FoundationDB's message for an error code (fdb_errors.c): never NULL, static. */
const char *kvq__fdbc_message(int code);

/* fdb_common.c */
void kvq__fdbc_misuse(const char *fmt, ...);
void kvq__fdbc_complain(const char *fmt, ...);
uint8_t *kvq__fdbc_copy_bytes(const uint8_t *p, size_t n);
/* Whether key a sorts before key b. */
static inline int kvq__fdbc_key_less(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    return kvq__bytes_cmp(a, alen, b, blen) < 0;
}

/* fdb_future.c */
FDBFuture *kvq__fdbc_fut_new(int kind);
void kvq__fdbc_fut_ref(FDBFuture *f);
void kvq__fdbc_fut_unref(FDBFuture *f);
fdb_error_t kvq__fdbc_fdb_code(int rc);
void kvq__fdbc_fut_complete(FDBFuture *f, fdb_error_t err);
void kvq__fdbc_fut_settle(FDBFuture *f, fdb_error_t err);
FDBFuture *kvq__fdbc_fut_error(int kind, fdb_error_t err);
FDBResult *kvq__fdbc_result_error(fdb_error_t err);
FDBFuture *kvq__fdbc_unsupported(const char *what);

/* fdb_database.c */
fdb_error_t kvq__fdbc_dir_of(const char *line, char *dir, size_t cap);
void kvq__fdbc_db_unref(FDBDatabase *d);

/* fdb_txn_state.c */
void kvq__fdbc_knobs_read(FDBTransaction *tr);
void kvq__fdbc_tr_timeout_check(FDBTransaction *tr);
fdb_error_t kvq__fdbc_tr_error(FDBTransaction *tr, int after_commit);
void kvq__fdbc_read_delay(const FDBTransaction *tr);

/* fdb_ranges.c */
FDBFuture *kvq__fdbc_tr_get_range(FDBTransaction *tr,
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
                                  fdb_bool_t reverse);
FDBFuture *kvq__fdbc_tr_get_key(FDBTransaction *tr,
                                const uint8_t *key_name,
                                int key_name_length,
                                fdb_bool_t or_equal,
                                int offset,
                                fdb_bool_t snapshot);
FDBFuture *kvq__fdbc_tr_get_estimated_range_size_bytes(
    FDBTransaction *tr, const uint8_t *b, int bl, const uint8_t *e, int el);
FDBFuture *kvq__fdbc_tr_get_range_split_points(
    FDBTransaction *tr, const uint8_t *b, int bl, const uint8_t *e, int el, int64_t chunk_size);
FDBFuture *kvq__fdbc_tr_get_addresses_for_key(FDBTransaction *tr,
                                              const uint8_t *key_name,
                                              int key_name_length);

/* fdb_options.c */
int kvq__fdbc_db_defaults(FDBTransaction *tr, int all);
fdb_error_t kvq__fdbc_tr_set_option(FDBTransaction *tr,
                                    FDBTransactionOption option,
                                    const uint8_t *value,
                                    int value_length);

/* fdb_special.c */
int kvq__fdbc_is_special(const uint8_t *k, size_t len);
int kvq__fdbc_special_value(
    FDBTransaction *tr, const uint8_t *k, size_t len, int *present, uint8_t **val, size_t *vlen);
int kvq__fdbc_special_range(
    FDBTransaction *tr, const uint8_t *b, size_t bl, const uint8_t *e, size_t el, FDBFuture *f);
int kvq__fdbc_special_write(
    FDBTransaction *tr, int clear, const uint8_t *b, int bl, const uint8_t *e, int el);

#endif /* KVQ_FDBC_INTERNAL_H */
