/**
 * @file kvq/queue.h
 * @brief The queue layers: FIFO queue, priority queue and durable queue.
 *
 * Three kinds of queue, each byte-compatible with the program it comes from, so that a queue
 * written by kvq can be read by that program on the same FoundationDB cluster and the reverse:
 *
 * - **FIFO** (FoundationDB's "Queues" recipe): items at `sub + (index, 20 random bytes)`; the
 *   default subspace is the string tuple `("Q",)`.
 * - **priority** (the "Priority Queues" recipe): items at
 *   `sub + (priority, count, 20 random bytes)`; default subspace `("P",)`.
 * - **durable** (erlfdb's kv_queue): counters `sub + (b"npush",)` and `sub + (b"npop",)`
 *   (8-byte little-endian, atomic add), items at `sub + (b"val", versionstamp)`; default
 *   subspace `(b"q",)` (a bytes element).
 *
 * Values are stored as they are given (no envelope). kvq's own bookkeeping (idempotency
 * markers, pop result slots, high-contention staging, and the push counter `("npush",)` that
 * kvq's FIFO and priority pushes add to so that consumers can wait on a watch) lives under
 * `prefix + 0xFF + (...)`,
 * outside the recipes' item range, so programs using the recipes never see it; it still belongs
 * to the queue and kvq_queue_delete removes it.
 *
 * **Two forms of every operation.** A `_txn` form runs inside the caller's transaction, so that
 * an enqueue or a dequeue commits together with the application's own writes (a transactional
 * outbox); it returns values borrowed from that transaction and is exactly as idempotent as the
 * caller's transaction is (see kvq_queue_token for a marker the caller may add). A convenience
 * form runs its own retry loop and is idempotent under `commit_unknown_result` (1021):
 *
 * - a convenience push pushes exactly once: it writes a marker keyed by a random push id in the
 *   same transaction, and a retry first reads that marker;
 * - a convenience pop removes at most one item per call (at most k for kvq_queue_pop_k) and
 *   returns that item even if its commit reported 1021: it writes a result slot keyed by a
 *   random pop id and, on a retry, returns the value remembered from the attempt that
 *   committed instead of popping again;
 * - markers and slots are kept for the idempotency window (kvq_queue_options.idempotency_window_min
 *   minutes of database time) and then pruned. A retry loop still running after the window
 *   cannot tell, so it returns KVQ_ECOMMIT_UNKNOWN_RESULT to the caller rather than guess.
 *
 * **Errors** common to every function: KVQ_EINVAL for a NULL or invalid argument (never a
 * crash), KVQ_EWRONGTYPE when an operation does not apply to the queue's type, KVQ_ENOTFOUND
 * when a pop or peek finds the queue empty, KVQ_EVALUE_TOO_LARGE for a value over 100,000
 * bytes, and any transaction error of kvq/db.h (after the retry budget, for convenience forms).
 * Details are in kvq_last_error().
 *
 * **Work queues** (kvq/workq.h) keep delayed items and leases beside a durable or priority
 * queue. Every reader here (pop, pop_k, pop_prio, peek, peek_prio, len, iterate, consume_k, in
 * both forms) sees a delayed item that is due, and an item whose lease ended, as ready: it looks
 * for such items at its read version first (two snapshot reads), and when there are some it makes
 * them ready in transactions of its own and reads again. A `_txn` form then returns
 * KVQ_ENOT_COMMITTED (1020), which the caller's retry loop retries like any conflict; a
 * read-only database is read as stored.
 *
 * **Threads**: a kvq_queue may be shared by any number of threads; a kvq_txn still belongs to
 * one thread at a time. **Processes**: open the database and the queue again after fork().
 */
#ifndef KVQ_QUEUE_H
#define KVQ_QUEUE_H

#include "common.h"
#include "error.h"
#include "db.h"
#include "tuple.h"

#ifdef __cplusplus
extern "C" {
#endif

/** An open queue: a database, a subspace and a type. Shared by threads. */
typedef struct kvq_queue kvq_queue;

/** The three kinds of queue. */
typedef enum kvq_queue_type {
    KVQ_QUEUE_FIFO = 1,     /**< FoundationDB's queue recipe */
    KVQ_QUEUE_PRIORITY = 2, /**< FoundationDB's priority queue recipe */
    KVQ_QUEUE_DURABLE = 3,  /**< erlfdb's versionstamped queue with counters */
} kvq_queue_type;

/** Flags of kvq_queue_options.flags. */
enum {
    /**
     * High-contention pops (FIFO and priority queues): a pop that loses a race registers as a
     * waiter and is served by a batch "fulfil" transaction, so that many consumers share a few
     * commits instead of fighting over the head. See docs/queues.md.
     */
    KVQ_QUEUE_HIGH_CONTENTION = 1u << 0,
};

#define KVQ_QUEUE_OPTIONS_VERSION 1

/** Options of kvq_queue_open. Initialise with KVQ_QUEUE_OPTIONS_INIT, then change fields. */
typedef struct kvq_queue_options {
    unsigned int version; /**< KVQ_QUEUE_OPTIONS_VERSION */
    unsigned int flags;   /**< KVQ_QUEUE_* flags */
    /**
     * High-contention mode: milliseconds (of database time) after which a registered waiter
     * nobody serves, or a result its popper never collected, goes back: the result is put back
     * into the queue at its original key, the waiter is removed. Default 30,000; at least 1.
     */
    int64_t staging_timeout_ms;
    /** Keys read per transaction by len, iterate and clear scans (default 1,000; 1 to 100,000). */
    int page_size;
    /** Waiters (and items) one high-contention fulfil transaction serves (default 100). */
    int hc_batch;
    /** Minutes idempotency markers and pop result slots are kept (default 5; 2 to 1,440). */
    int idempotency_window_min;
} kvq_queue_options;

#define KVQ_QUEUE_OPTIONS_INIT                            \
    {                                                     \
        KVQ_QUEUE_OPTIONS_VERSION, 0, 30000, 1000, 100, 5 \
    }

/**
 * Opens a queue. No transaction is run: opening never touches the database.
 *
 * @param[out] out  the handle; NULL on failure. Close it with kvq_queue_close.
 * @param db        the database; it must outlive the handle
 * @param type      the kind of queue
 * @param sub       the queue's subspace (copied), or NULL for the default of the type:
 *                  `("Q",)` for FIFO, `("P",)` for priority (string elements) and `(b"q",)` for
 *                  durable (a bytes element). Its prefix must not be empty.
 * @param opts      options (copied), or NULL for KVQ_QUEUE_OPTIONS_INIT
 * @return 0; KVQ_EINVAL (NULL db or out, unknown type, empty prefix, bad option, prefix so long
 *         that keys would exceed 10,000 bytes; high contention asked of a durable queue);
 *         KVQ_ENOMEM.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_open(kvq_queue **out,
                                         kvq_db *db,
                                         kvq_queue_type type,
                                         const kvq_subspace *sub,
                                         const kvq_queue_options *opts);

/** Frees a queue handle (the data stays in the database). NULL is a no-op. No other thread may
 * be using the handle. */
KVQ_API void kvq_queue_close(kvq_queue *q);

/** The queue's type, or 0 for NULL. */
KVQ_API KVQ_NODISCARD kvq_queue_type kvq_queue_get_type(const kvq_queue *q);

/** The queue's key prefix, borrowed from the handle (valid until kvq_queue_close). */
KVQ_API KVQ_NODISCARD kvq_bytes kvq_queue_get_prefix(const kvq_queue *q);

/* ---------------------------------------------------------------------------------------- */
/* Named queues: the database's registry, shared with the kvq command                        */
/* ---------------------------------------------------------------------------------------- */

/** Deliveries after which an item that keeps failing goes to the dead letters, by default: the
 * one default of kvq_queue_settings, kvq_workq_options and `kvq create`. */
#define KVQ_DEFAULT_MAX_DELIVERIES 5

#define KVQ_QUEUE_SETTINGS_VERSION 1

/** A named queue's type and work-queue settings, as `kvq create` (or kvq_queue_create_named)
 * stores them in the database. Initialise with KVQ_QUEUE_SETTINGS_INIT, then change fields. */
typedef struct kvq_queue_settings {
    unsigned int version; /**< KVQ_QUEUE_SETTINGS_VERSION */
    kvq_queue_type type;  /**< default KVQ_QUEUE_DURABLE */
    /** Lease of work-queue receives in milliseconds; 0 leaves the library's default (30 s). */
    int64_t lease_ms;
    /** Deliveries after which an item goes to the dead letters (default
     * KVQ_DEFAULT_MAX_DELIVERIES); 0 never. A FIFO queue has neither: set both to 0. */
    uint32_t max_deliveries;
    /** KVQ_QUEUE_ADOPT, for kvq_queue_create_named only (not stored; 0 when read). */
    unsigned int flags;
} kvq_queue_settings;

/** Flags of kvq_queue_settings.flags. */
enum {
    /** kvq_queue_create_named may name a subspace that already holds keys: a queue of this type
     * that another program wrote there (the recipes' own layout), which becomes the named
     * queue. Without it, a subspace holding any key is refused, as it may be the
     * application's own data. */
    KVQ_QUEUE_ADOPT = 1u << 0,
};

#define KVQ_QUEUE_SETTINGS_INIT                                                         \
    {                                                                                   \
        KVQ_QUEUE_SETTINGS_VERSION, KVQ_QUEUE_DURABLE, 0, KVQ_DEFAULT_MAX_DELIVERIES, 0 \
    }

/** The name of a queue type ("FIFO", "priority", "durable"; "unknown" otherwise). */
KVQ_API KVQ_NODISCARD const char *kvq_queue_type_name(kvq_queue_type type);

/** Checks a queue name: 1 to 200 bytes without control characters. 0 or KVQ_EINVAL. */
KVQ_API KVQ_NODISCARD int kvq_queue_check_name(const char *name);

/**
 * Records a named queue in the database (nothing else is written): it then lives in the
 * subspace `(name,)`, a string element for FIFO and priority queues and a bytes element for
 * durable ones, as the command line's queues do. That subspace may be the application's own
 * (`("app", "orders", 17)` lies in the subspace of a FIFO queue named "app"): a subspace that
 * already holds any key is refused unless settings->flags has KVQ_QUEUE_ADOPT.
 * @return 0; KVQ_EEXISTS (it exists with this type; its settings stay); KVQ_EWRONGTYPE (it
 *         exists with another type, or its subspace holds keys and KVQ_QUEUE_ADOPT was not
 *         given); KVQ_EINVAL (name, type, version, lease up to 1 day, FIFO settings).
 */
KVQ_API KVQ_NODISCARD int
kvq_queue_create_named(kvq_db *db, const char *name, const kvq_queue_settings *settings);

/** Reads a named queue's settings. 0, KVQ_ENOTFOUND, KVQ_EINVAL. */
KVQ_API KVQ_NODISCARD int
kvq_queue_get_named(kvq_queue_settings *out, kvq_db *db, const char *name);

/**
 * Changes a durable or priority named queue's lease (1 ms to 1 day) and max deliveries; -1
 * keeps either. *out (may be NULL) receives the settings now stored.
 * @return 0; KVQ_ENOTFOUND; KVQ_EWRONGTYPE (a FIFO queue); KVQ_EINVAL.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_alter_named(kvq_queue_settings *out,
                                                kvq_db *db,
                                                const char *name,
                                                int64_t lease_ms,
                                                int64_t max_deliveries);

/** Removes a name from the registry (not the queue's data: see kvq_queue_delete). */
KVQ_API KVQ_NODISCARD int kvq_queue_forget_named(kvq_db *db, const char *name);

/**
 * Deletes a named queue: its data and its name, in one transaction. Only the keys a queue of its
 * type writes are cleared (FIFO and priority: items, whose first element is an integer;
 * durable: (b"val", ...), (b"npush",), (b"npop",); every type: kvq's bookkeeping), so keys of
 * the application that share the subspace `(name,)` stay.
 * @return 0; KVQ_ENOTFOUND (no such name); KVQ_EINVAL; a transaction error.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_delete_named(kvq_db *db, const char *name);

/** Called for each named queue, in name order; a non-zero return stops the listing and is
 * returned. */
typedef int (*kvq_queue_named_fn)(const char *name,
                                  const kvq_queue_settings *settings,
                                  void *payload);

/** Lists the named queues. */
KVQ_API KVQ_NODISCARD int kvq_queue_list_named(kvq_db *db, kvq_queue_named_fn fn, void *payload);

/**
 * Opens a queue by the name `kvq create` gave it, with its type; kvq_workq_open with NULL
 * options then takes its stored lease and max deliveries.
 * @param[out] out       the handle; NULL on failure. Close it with kvq_queue_close.
 * @param[out] settings  receives the stored settings (may be NULL)
 * @return 0; KVQ_ENOTFOUND (no such name); KVQ_EINVAL; KVQ_ENOMEM.
 */
KVQ_API KVQ_NODISCARD int
kvq_queue_open_named(kvq_queue **out, kvq_queue_settings *settings, kvq_db *db, const char *name);

/* ---------------------------------------------------------------------------------------- */
/* Operations on every type                                                                  */
/* ---------------------------------------------------------------------------------------- */

/**
 * Pushes a value (idempotent convenience form; its own retry loop). A priority queue gets it at
 * priority 0.
 *
 * @param value  the bytes (copied); may be NULL when len is 0
 * @return 0; KVQ_EINVAL; KVQ_EVALUE_TOO_LARGE; KVQ_ECOMMIT_UNKNOWN_RESULT (only after the
 *         idempotency window); a transaction error after the retry budget.
 * @note Pushes never conflict with each other nor with pops.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_push(kvq_queue *q, const uint8_t *value, size_t len);

/**
 * Pushes a value inside the caller's transaction. Nothing is written before the transaction
 * commits. No idempotency marker is written (see kvq_queue_token).
 * @return 0; KVQ_EINVAL; KVQ_EVALUE_TOO_LARGE; a transaction error (return it from the
 *         transaction's function unchanged).
 */
KVQ_API KVQ_NODISCARD int
kvq_queue_push_txn(kvq_queue *q, kvq_txn *txn, const uint8_t *value, size_t len);

/**
 * Pops the first item (FIFO and durable: the oldest; priority: the lowest priority) and copies
 * its value into `out` (idempotent convenience form). In high-contention mode this may take
 * several transactions (see docs/queues.md).
 *
 * @param[out] out  receives the value (its previous content is replaced); caller-owned, free
 *                  with kvq_buf_dispose
 * @return 0; KVQ_ENOTFOUND (empty); KVQ_EINVAL; KVQ_ENOMEM; KVQ_ECOMMIT_UNKNOWN_RESULT (only
 *         after the idempotency window); a transaction error after the retry budget.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_pop(kvq_buf *out, kvq_queue *q);

/**
 * Pops the first item inside the caller's transaction (always the simple path, even in
 * high-contention mode). The item is removed when the transaction commits.
 *
 * @param[out] out  the value, borrowed from txn (valid until it commits, resets or retries)
 * @return 0; KVQ_ENOTFOUND (empty; nothing written); KVQ_EINVAL; a transaction error.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_pop_txn(kvq_bytes *out, kvq_queue *q, kvq_txn *txn);

/**
 * Copies the first item's value into `out` without removing it (a read-only transaction).
 * @return 0; KVQ_ENOTFOUND; KVQ_EINVAL; KVQ_ENOMEM; a transaction error.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_peek(kvq_buf *out, kvq_queue *q);

/**
 * Reads the first item's value inside the caller's transaction.
 * @param[out] out  borrowed from txn
 * @param flags     0 (the read adds a read-conflict range: the caller's commit fails if the head
 *                  changes) or KVQ_SNAPSHOT
 * @return 0; KVQ_ENOTFOUND; KVQ_EINVAL; a transaction error.
 */
KVQ_API KVQ_NODISCARD int
kvq_queue_peek_txn(kvq_bytes *out, kvq_queue *q, kvq_txn *txn, unsigned int flags);

/**
 * The number of items. Durable queues: npush − npop (two reads). FIFO and priority queues: a
 * count of the item keys, read in pages of page_size keys, each page in its own transaction
 * (so the count of a queue that changes meanwhile is approximate).
 * @return 0; KVQ_EINVAL; a transaction error.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_len(uint64_t *out, kvq_queue *q);

/**
 * The number of items, inside the caller's transaction (FIFO and priority: every page in this
 * transaction, so a very long queue may exceed the 5-second transaction limit).
 * @param flags  0 or KVQ_SNAPSHOT (without it, the caller's commit conflicts with any push or pop)
 */
KVQ_API KVQ_NODISCARD int
kvq_queue_len_txn(uint64_t *out, kvq_queue *q, kvq_txn *txn, unsigned int flags);

/**
 * Removes every item, keeping the queue's bookkeeping. Durable queues: one transaction that
 * clears the item range and sets npop to npush. FIFO and priority queues: one clear of the item
 * range (values handed to high-contention waiters but not yet collected are not affected).
 * @return 0; KVQ_EINVAL; a transaction error.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_clear(kvq_queue *q);

/** kvq_queue_clear inside the caller's transaction. */
KVQ_API KVQ_NODISCARD int kvq_queue_clear_txn(kvq_queue *q, kvq_txn *txn);

/**
 * Removes every key of the queue: items, counters and bookkeeping (everything whose key starts
 * with the queue's prefix, including queues in subspaces nested inside it).
 * @return 0; KVQ_EINVAL; a transaction error.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_delete(kvq_queue *q);

/** kvq_queue_delete inside the caller's transaction. */
KVQ_API KVQ_NODISCARD int kvq_queue_delete_txn(kvq_queue *q, kvq_txn *txn);

/**
 * Called by kvq_queue_iterate for each item, in queue order. `value` is valid during the call
 * only. For priority queues `priority` is the item's priority (0 for other types). Return 0 to
 * go on; anything else stops the iteration and is returned by kvq_queue_iterate.
 */
typedef int (*kvq_queue_iter_fn)(kvq_bytes value, int64_t priority, void *payload);

/**
 * Calls fn for every item in queue order without removing any. Items are read in pages of
 * page_size, each page in its own read-only transaction, and fn runs outside any transaction;
 * the whole queue is never held in memory. Items pushed or popped during the iteration may or
 * may not be seen; none is seen twice.
 * @return 0; fn's non-zero return; KVQ_EINVAL; KVQ_ENOMEM; a transaction error.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_iterate(kvq_queue *q, kvq_queue_iter_fn fn, void *payload);

/**
 * Iterates inside the caller's transaction (pages of page_size, all in txn; values borrowed from
 * txn during the call). Snapshot reads: the iteration adds no read conflicts.
 */
KVQ_API KVQ_NODISCARD int
kvq_queue_iterate_txn(kvq_queue *q, kvq_txn *txn, kvq_queue_iter_fn fn, void *payload);

/**
 * Pops up to k items from the head in one transaction (durable queue: one range read, one
 * clear_range, one ADD to npop; priority queue: the k lowest; high-contention mode does not
 * apply). Idempotent convenience form.
 *
 * @param k          1 to 10,000
 * @param[out] outs  caller-owned array of at least k buffers; outs[0..*n) receive the values
 *                   (the rest are left untouched); free each with kvq_buf_dispose
 * @param[out] n     how many were popped
 * @return 0 when at least one item was popped (*n may be less than k); KVQ_ENOTFOUND (empty);
 *         KVQ_EINVAL; KVQ_ENOMEM; KVQ_ECOMMIT_UNKNOWN_RESULT (only after the idempotency
 *         window); a transaction error.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_pop_k(kvq_buf *outs, size_t *n, kvq_queue *q, size_t k);

/**
 * Pops up to k items inside the caller's transaction.
 * @param[out] outs  caller array of at least k views, borrowed from txn
 * @return 0 with *n ≥ 1; KVQ_ENOTFOUND (empty; nothing written); KVQ_EINVAL; a transaction error.
 */
KVQ_API KVQ_NODISCARD int
kvq_queue_pop_k_txn(kvq_bytes *outs, size_t *n, kvq_queue *q, kvq_txn *txn, size_t k);

/* ---------------------------------------------------------------------------------------- */
/* Priority queues                                                                           */
/* ---------------------------------------------------------------------------------------- */

/** Pushes a value at a priority (idempotent convenience form). Lower priorities come out of
 * kvq_queue_pop_prio with KVQ_QUEUE_MIN first; items of one priority keep push order from one
 * producer. Errors as kvq_queue_push, and KVQ_EWRONGTYPE for a queue that is not a priority
 * queue. */
KVQ_API KVQ_NODISCARD int
kvq_queue_push_prio(kvq_queue *q, const uint8_t *value, size_t len, int64_t priority);

/** kvq_queue_push_prio inside the caller's transaction. */
KVQ_API KVQ_NODISCARD int kvq_queue_push_prio_txn(
    kvq_queue *q, kvq_txn *txn, const uint8_t *value, size_t len, int64_t priority);

/** Which end of a priority queue: the lowest priority or the highest. */
typedef enum kvq_queue_end {
    KVQ_QUEUE_MIN = 0, /**< the lowest priority; of that priority, the oldest item */
    KVQ_QUEUE_MAX = 1  /**< the highest priority; of that priority, the newest item */
} kvq_queue_end;

/**
 * Pops the item at one end of a priority queue into `out` (idempotent convenience form;
 * high-contention mode applies).
 * @param[out] out       receives the value (replaced); free with kvq_buf_dispose
 * @param[out] priority  receives its priority (may be NULL)
 * @param end            KVQ_QUEUE_MIN or KVQ_QUEUE_MAX
 * @return as kvq_queue_pop; KVQ_EWRONGTYPE (not a priority queue); KVQ_EINVAL (also an `end`
 *         that is neither).
 */
KVQ_API KVQ_NODISCARD int
kvq_queue_pop_prio(kvq_buf *out, int64_t *priority, kvq_queue *q, kvq_queue_end end);

/** kvq_queue_pop_prio inside the caller's transaction; `out` borrowed from txn. */
KVQ_API KVQ_NODISCARD int kvq_queue_pop_prio_txn(
    kvq_bytes *out, int64_t *priority, kvq_queue *q, kvq_txn *txn, kvq_queue_end end);

/** Copies the item at one end of a priority queue without removing it. Errors as
 * kvq_queue_peek, and as kvq_queue_pop_prio. */
KVQ_API KVQ_NODISCARD int
kvq_queue_peek_prio(kvq_buf *out, int64_t *priority, kvq_queue *q, kvq_queue_end end);

/** kvq_queue_peek_prio inside the caller's transaction (flags: 0 or KVQ_SNAPSHOT). */
KVQ_API KVQ_NODISCARD int kvq_queue_peek_prio_txn(kvq_bytes *out,
                                                  int64_t *priority,
                                                  kvq_queue *q,
                                                  kvq_txn *txn,
                                                  kvq_queue_end end,
                                                  unsigned int flags);

/* ---------------------------------------------------------------------------------------- */
/* Batches and waiting consumers (every type)                                                */
/* ---------------------------------------------------------------------------------------- */

/**
 * Pushes n values in one transaction, in order. Durable queues: each gets its own user version
 * after the commit's versionstamp. FIFO and priority queues (priority 0): the keys n recipe
 * pushes in one transaction would write, numbered on from one snapshot read of the last index
 * (count). Idempotent convenience form: all or none, exactly once.
 * @param values  n views (copied); n from 1 to 10,000
 * @return as kvq_queue_push; KVQ_ETRANSACTION_TOO_LARGE when the batch
 *         exceeds the 10 MB transaction limit.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_push_many(kvq_queue *q, const kvq_bytes *values, size_t n);

/** kvq_queue_push_many inside the caller's transaction. */
KVQ_API KVQ_NODISCARD int
kvq_queue_push_many_txn(kvq_queue *q, kvq_txn *txn, const kvq_bytes *values, size_t n);

/**
 * Arms a watch on the queue's push counter in its own transaction: it fires on the first push
 * that commits after this call. The counter is npush of a durable queue; of a FIFO or priority
 * queue, kvq's own `prefix + 0xFF + ("npush",)`, which every kvq push adds to (an atomic add, so
 * pushes still never conflict). A program that pushes with FoundationDB's recipe itself does not
 * move it: its items are found by the next pop, but do not wake a waiting consumer.
 * @param[out] out  the watch; wait with kvq_watch_wait, free with kvq_watch_destroy
 * @return 0; KVQ_EINVAL; KVQ_ETOO_MANY_WATCHES; a transaction error.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_watch(kvq_watch **out, kvq_queue *q);

/** Sets a watch on the push counter inside the caller's transaction; it is armed when txn
 * commits and fires once the counter differs from the value txn saw. */
KVQ_API KVQ_NODISCARD int kvq_queue_watch_txn(kvq_watch **out, kvq_queue *q, kvq_txn *txn);

/**
 * Pops up to k items and, when fewer than k were found, also returns a watch on the push
 * counter (see kvq_queue_watch) set in the same transaction, so that the caller can sleep on it
 * without missing a push that committed after the pop (idempotent convenience form; every
 * type: a priority queue gives its lowest priorities first). With k = 1 in high-contention
 * mode this is the staged pop of kvq_queue_pop, which arms the watch when it finds the queue
 * empty.
 *
 * @param[out] outs   caller array of at least k buffers (as kvq_queue_pop_k)
 * @param[out] n      items popped (0 is not an error here)
 * @param[out] watch  NULL when *n == k; else an armed watch the caller must destroy. It may
 *                    also be NULL when fewer than k came back in the rare case that a commit
 *                    reported 1021 and a push may have happened since: call again without
 *                    sleeping.
 * @return 0; KVQ_EINVAL; KVQ_ENOMEM; KVQ_ECOMMIT_UNKNOWN_RESULT (only after the idempotency
 *         window); a transaction error.
 */
KVQ_API KVQ_NODISCARD int
kvq_queue_consume_k(kvq_buf *outs, size_t *n, kvq_watch **watch, kvq_queue *q, size_t k);

/**
 * kvq_queue_consume_k inside the caller's transaction: *watch (when fewer than k items came
 * back) is armed when txn commits. The caller destroys it; if txn is retried instead, the watch
 * fails with 1025 and must be destroyed too.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_consume_k_txn(
    kvq_bytes *outs, size_t *n, kvq_watch **watch, kvq_queue *q, kvq_txn *txn, size_t k);

/* kvq_queue_consumer_source, the source of the consumer runtime that pops from a durable queue,
 * is declared in kvq/consumer.h, with the runtime. */

/* ---------------------------------------------------------------------------------------- */
/* Producers                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/**
 * Makes one item for kvq_queue_produce, on producer thread `thread` (0 to threads − 1); `seq`
 * counts that thread's items from 0. Append the value to `value` (it is empty on entry) and, for
 * a priority queue, set *priority (0 on entry).
 * @return 0 to push the item; KVQ_ENOTFOUND when this thread has no more items; anything else
 *         stops every thread and is returned by kvq_queue_produce.
 */
typedef int (*kvq_producer_fn)(
    kvq_buf *value, int64_t *priority, int thread, uint64_t seq, void *payload);

#define KVQ_PRODUCER_OPTIONS_VERSION 1

/** Options of kvq_queue_produce; initialise with KVQ_PRODUCER_OPTIONS_INIT. */
typedef struct kvq_producer_options {
    unsigned int version; /**< KVQ_PRODUCER_OPTIONS_VERSION */
    int threads;          /**< producer threads, 1 to 1,024 (default 4) */
    /** Items per transaction, 1 to 10,000 (default 1). Durable and FIFO queues push a batch
     * with kvq_queue_push_many; a priority queue's items each have their own priority, so they
     * are pushed one per transaction whatever this says. */
    int batch;
} kvq_producer_options;

#define KVQ_PRODUCER_OPTIONS_INIT          \
    {                                      \
        KVQ_PRODUCER_OPTIONS_VERSION, 4, 1 \
    }

/** What kvq_queue_produce did. */
typedef struct kvq_producer_stats {
    uint64_t items;        /**< items pushed (committed) */
    uint64_t transactions; /**< push transactions committed */
} kvq_producer_stats;

/**
 * Pushes items from many threads: starts opts->threads threads, each calling fn for its next
 * item and pushing it (idempotent convenience pushes, so every item made is pushed exactly once
 * even across 1021), and returns once every thread has run out of items or one has failed.
 * Items of one thread keep their order in the queue (FIFO and durable; within a priority for
 * priority queues).
 *
 * @param[out] out  receives the counts (may be NULL); filled also on failure
 * @return 0; KVQ_EINVAL (NULL q or fn, bad options); KVQ_ENOMEM; the first error of fn or of a
 *         push (the other threads then stop before their next item; items a thread had made
 *         but not pushed are not pushed).
 */
KVQ_API KVQ_NODISCARD int kvq_queue_produce(kvq_producer_stats *out,
                                            kvq_queue *q,
                                            kvq_producer_fn fn,
                                            void *payload,
                                            const kvq_producer_options *opts);

/* ---------------------------------------------------------------------------------------- */
/* Idempotency for the caller's own transactions; high-contention upkeep                     */
/* ---------------------------------------------------------------------------------------- */

/**
 * An idempotency token for a caller's transaction (the same machinery the convenience forms
 * use). Make one with kvq_queue_token_init before the retry loop, and call
 * kvq_queue_token_apply_txn in every attempt.
 */
typedef struct kvq_queue_token {
    uint8_t id[16]; /**< the clock's microseconds (8 bytes, big-endian), then 8 random bytes */
    int64_t bucket; /**< the time bucket, fixed by the first attempt (-1 before) */
} kvq_queue_token;

/** Fills a token with a fresh id (time, then random bytes). Returns 0, KVQ_EINVAL or KVQ_EIO. */
KVQ_API KVQ_NODISCARD int kvq_queue_token_init(kvq_queue_token *tok);

/**
 * Reads the token's marker and writes it. *out = true means an earlier attempt with this token
 * committed: the caller should skip its work and commit (nothing else happens). *out = false:
 * the marker is now written in txn; do the work. The read is of the marker key only, so tokens
 * never make transactions conflict with each other.
 * @return 0; KVQ_EINVAL; KVQ_ETIMED_OUT when the token is older than the idempotency window
 *         (whether the earlier attempt committed cannot be known any more); a transaction error.
 */
KVQ_API KVQ_NODISCARD int
kvq_queue_token_apply_txn(bool *out, kvq_queue *q, kvq_txn *txn, kvq_queue_token *tok);

/**
 * High-contention upkeep, run automatically by pops from time to time: puts results older than
 * the staging timeout back into the queue at their original keys, and removes waiters older
 * than it. Safe to call any time, from any process, in any mode.
 * @param[out] out  items put back (may be NULL)
 * @return 0; KVQ_EINVAL; KVQ_EWRONGTYPE (durable queues have no staging); a transaction error.
 */
KVQ_API KVQ_NODISCARD int kvq_queue_recover(uint64_t *out, kvq_queue *q);

/** Counters of a queue handle (all threads), for tests and benchmarks. */
typedef struct kvq_queue_stats {
    uint64_t pops;           /**< items popped by convenience pops of this handle */
    uint64_t hc_simple;      /**< high-contention pops served by the simple path */
    uint64_t hc_registered;  /**< waiters registered */
    uint64_t hc_fulfils;     /**< fulfil transactions committed */
    uint64_t hc_fulfil_lost; /**< fulfil transactions that lost a race (1020) */
    uint64_t hc_returned;    /**< stale results put back by recovery */
    uint64_t hc_waits;       /**< times a waiter slept on its watch */
    uint64_t dedup;          /**< retries resolved by a marker or slot (1021 that had committed) */
} kvq_queue_stats;

/** Reads a handle's counters. Returns 0 or KVQ_EINVAL. */
KVQ_API KVQ_NODISCARD int kvq_queue_get_stats(kvq_queue_stats *out, const kvq_queue *q);

#ifdef __cplusplus
}
#endif

#endif /* KVQ_QUEUE_H */
