/**
 * @file kvq/db.h
 * @brief Databases and transactions: FoundationDB's transaction model on every engine.
 *
 * A kvq_db is opened from a URL: a directory path selects the embedded engine, `fdb:` or
 * `fdb:/path/to/fdb.cluster` a FoundationDB cluster. Everything below behaves the same on both.
 * The embedded engine's storage (docs/engine.md, docs/logstore.md): commits go to a log, an
 * ordered SQLite table trails it. The older SQLite storage is kept for the databases made with
 * it: such a directory opens as what it is, and a new one is made on it only by the URL
 * `sqlite:/path/to/dir` or the environment variable `KVQ_STORAGE=sqlite` (`log:DIR` names the
 * default storage). An existing database is opened with the storage it was made with, whatever
 * the variable says; a URL prefix naming its other storage is refused (KVQ_EINVAL), never
 * converted.
 *
 * Transactions read at one read version (taken at their first read) and see their own writes.
 * Writes are buffered and applied atomically at commit. A commit fails with KVQ_ENOT_COMMITTED
 * (1020) when a transaction that committed after this one's read version wrote into a range
 * this one read without the KVQ_SNAPSHOT flag. kvq_db_transact runs a function in such a
 * transaction and retries it on retryable errors.
 *
 * Threads: a kvq_db may be shared by any number of threads. A kvq_txn is used by one thread at
 * a time. Processes: never use a handle across fork(); open the database again in the child.
 *
 * Returned memory: a kvq_bytes or kvq_kv returned by a read is borrowed from the transaction
 * and stays valid until the transaction is reset, committed, destroyed or retried.
 */
#ifndef KVQ_DB_H
#define KVQ_DB_H

#include "common.h"
#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** A database handle; shared by threads. */
typedef struct kvq_db kvq_db;
/** A transaction; one thread at a time. */
typedef struct kvq_txn kvq_txn;
/** A watch on one key. */
typedef struct kvq_watch kvq_watch;

/** A key and its value, borrowed from the transaction that read them. */
typedef struct kvq_kv {
    kvq_bytes key;
    kvq_bytes value;
} kvq_kv;

/** The limits kvq enforces on every engine (FoundationDB's). */
#define KVQ_MAX_KEY_SIZE   10000
#define KVQ_MAX_VALUE_SIZE 100000
#define KVQ_MAX_TXN_SIZE   10000000
/** Transactions older than this (microseconds from their first read) fail with 1007. */
#define KVQ_MAX_TXN_AGE_US 5000000

/** Flags of kvq_db_options.flags. */
enum {
    /** Do not wait for each commit to reach the disk (not durable; never the default). */
    KVQ_DB_RELAXED = 1u << 0,
    /** Fail with KVQ_ENOTFOUND instead of creating a missing database. */
    KVQ_DB_NO_CREATE = 1u << 1,
    /** Open read-only: commits that write fail with KVQ_EPERM. */
    KVQ_DB_READ_ONLY = 1u << 2,
};

#define KVQ_DB_OPTIONS_VERSION 2

/** Options for kvq_db_open. Initialise with KVQ_DB_OPTIONS_INIT, then change what you need. */
typedef struct kvq_db_options {
    unsigned int version; /**< KVQ_DB_OPTIONS_VERSION */
    unsigned int flags;   /**< KVQ_DB_* */
    /** Default retry limit of kvq_db_transact: retries after the first attempt; -1 is none. */
    int retry_limit;
    /** Default time budget of a transaction in milliseconds (1031 after it); 0 is none. */
    int64_t timeout_ms;
    /** The longest backoff between retries, in milliseconds. */
    int64_t max_retry_delay_ms;
    /** Mode of files the embedded engine creates (e.g. 0600). */
    unsigned int file_mode;
    /** The fdb engine's API version (710 by default; 730 when asked). */
    int api_version;
} kvq_db_options;

#define KVQ_DB_OPTIONS_INIT                                              \
    {                                                                    \
        KVQ_DB_OPTIONS_VERSION, 0, 100, 0, 1000, 0600, 710 \
    }

/**
 * Opens (creating if needed) a database. An embedded create that fails (a disk too small, a
 * file it may not write) removes what it made: the directory it made, or the files it put into
 * an empty directory, which stays; a database that was complete is never touched.
 *
 * @param[out] out   the handle; NULL on failure
 * @param[in]  url   a directory path (embedded engine; `sqlite:DIR` makes a new database on
 *                   the older SQLite storage, as `$KVQ_STORAGE=sqlite` does; `log:DIR` on the
 *                   default log store) or `fdb:[cluster-file]`; NULL means
 *                   `$KVQ_DB` or else `./kvq-data`
 * @param[in]  opts  options, or NULL for the defaults
 * @return 0; KVQ_EINVAL (bad argument or option); KVQ_ENOTFOUND (missing and KVQ_DB_NO_CREATE);
 *         KVQ_EDAMAGED (the database existed and is damaged: kvq never re-creates it empty);
 *         KVQ_EPERM; KVQ_EIO; KVQ_ENOSPC; KVQ_ENOENGINE (the fdb client library is missing);
 *         KVQ_ENOMEM.
 */
KVQ_API KVQ_NODISCARD int kvq_db_open(kvq_db **out, const char *url, const kvq_db_options *opts);

/** Closes a database. Every transaction and watch of it must be destroyed first. NULL is a
 * no-op. */
KVQ_API void kvq_db_close(kvq_db *db);

/** Returns the engine's name ("embedded" or "fdb"). */
KVQ_API KVQ_NODISCARD const char *kvq_db_get_engine(const kvq_db *db);

/** Counters of a database handle, for benchmarks and tests. */
typedef struct kvq_db_stats {
    uint64_t commits;         /**< successful commits that wrote something */
    uint64_t conflicts;       /**< commits that failed with 1020 */
    uint64_t retries;         /**< retries made by kvq_txn_on_error */
    /** Storage transactions this handle wrote. On the embedded engine one may carry commits
     * queued by other processes, and this handle's commits may ride in another process's, so
     * commits / batches is not this handle's batch size alone. */
    uint64_t batches;
    uint64_t injected_faults; /**< faults injected (kvq_db_open_testing, kvq/testing.h) */
    /** Embedded engine: syncs of the disk this handle made. One sync covers the commits of
     * every process written by then, so a process may see its commits synced by another. */
    uint64_t syncs;
} kvq_db_stats;

/** Reads the handle's counters. Returns 0 or KVQ_EINVAL. */
KVQ_API KVQ_NODISCARD int kvq_db_get_stats(kvq_db_stats *out, const kvq_db *db);

/** Creates a transaction. Returns 0, KVQ_EINVAL or KVQ_ENOMEM. */
KVQ_API KVQ_NODISCARD int kvq_txn_create(kvq_txn **out, kvq_db *db);

/** Destroys a transaction, dropping uncommitted writes. NULL is a no-op. */
KVQ_API void kvq_txn_destroy(kvq_txn *txn);

/** Drops all reads, writes and the read version; the transaction can be used afresh. Retry
 * budget (retries made, start time) is reset too. */
KVQ_API void kvq_txn_reset(kvq_txn *txn);

/** Flags for reads. */
enum {
    /** Read without adding a read-conflict range. */
    KVQ_SNAPSHOT = 1u << 0,
    /** get_range: return keys from the end of the range backwards. */
    KVQ_REVERSE = 1u << 1,
};

/**
 * Reads one key.
 *
 * @param[out] out      the value, borrowed from the transaction (see the file comment); set to
 *                      {NULL, 0} when the key is absent
 * @param[out] present  1 if the key exists, else 0
 * @param flags         0 or KVQ_SNAPSHOT
 * @return 0; KVQ_EINVAL; KVQ_EKEY_TOO_LARGE; KVQ_EKEY_OUTSIDE_LEGAL_RANGE (keys from 0xFF);
 *         KVQ_EACCESSED_UNREADABLE; KVQ_ETRANSACTION_TOO_OLD; KVQ_ETRANSACTION_TIMED_OUT;
 *         KVQ_EDAMAGED (a stored value failed its checksum); KVQ_EIO.
 */
KVQ_API KVQ_NODISCARD int kvq_txn_get(kvq_bytes *out,
                                      int *present,
                                      kvq_txn *txn,
                                      const uint8_t *key,
                                      size_t key_len,
                                      unsigned int flags);

/**
 * Reads the keys in [begin, end), in order (or in reverse with KVQ_REVERSE).
 *
 * @param[out] out    array of *count pairs, borrowed from the transaction
 * @param[out] count  number of pairs
 * @param[out] more   true if the limit stopped the read before the end of the range (may be
 *                    NULL); on the fdb engine it may also be true when exactly `limit` keys
 *                    remained
 * @param limit       the most pairs to return; 0 means all
 * @param flags       KVQ_SNAPSHOT, KVQ_REVERSE
 * @return as kvq_txn_get, and KVQ_EINVERTED_RANGE when begin > end.
 * @note To page through a large range, read with a limit and continue from just after the last
 *       key returned (forward: begin = last key + 0x00; reverse: end = last key).
 */
KVQ_API KVQ_NODISCARD int kvq_txn_get_range(const kvq_kv **out,
                                            size_t *count,
                                            bool *more,
                                            kvq_txn *txn,
                                            const uint8_t *begin,
                                            size_t begin_len,
                                            const uint8_t *end,
                                            size_t end_len,
                                            int limit,
                                            unsigned int flags);

/** Sets a key. Errors: KVQ_EINVAL, KVQ_EKEY_TOO_LARGE, KVQ_EVALUE_TOO_LARGE,
 * KVQ_EKEY_OUTSIDE_LEGAL_RANGE, KVQ_ETRANSACTION_TOO_LARGE, KVQ_EUSED_DURING_COMMIT. */
KVQ_API KVQ_NODISCARD int kvq_txn_set(
    kvq_txn *txn, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len);

/** Clears a key. Errors as kvq_txn_set. */
KVQ_API KVQ_NODISCARD int kvq_txn_clear(kvq_txn *txn, const uint8_t *key, size_t key_len);

/** Clears every key in [begin, end). Errors as kvq_txn_set, and KVQ_EINVERTED_RANGE. */
KVQ_API KVQ_NODISCARD int kvq_txn_clear_range(
    kvq_txn *txn, const uint8_t *begin, size_t begin_len, const uint8_t *end, size_t end_len);

/** Atomic operations, with FoundationDB's numbers. */
typedef enum kvq_mutation {
    KVQ_MUT_ADD = 2,                       /**< add little-endian integers */
    KVQ_MUT_BIT_AND = 6,                   /**< bitwise and (a missing key takes the operand) */
    KVQ_MUT_BIT_OR = 7,                    /**< bitwise or */
    KVQ_MUT_BIT_XOR = 8,                   /**< bitwise xor */
    KVQ_MUT_APPEND_IF_FITS = 9,            /**< append, unless the value would pass 100,000
                                                bytes (then unchanged); a missing key is empty */
    KVQ_MUT_MAX = 12,                      /**< larger as unsigned little-endian integers */
    KVQ_MUT_MIN = 13,                      /**< smaller (a missing key takes the operand) */
    KVQ_MUT_SET_VERSIONSTAMPED_KEY = 14,   /**< see kvq_txn_set_versionstamped_key */
    KVQ_MUT_SET_VERSIONSTAMPED_VALUE = 15, /**< see kvq_txn_set_versionstamped_value */
    KVQ_MUT_BYTE_MIN = 16,                 /**< lexicographically smaller */
    KVQ_MUT_BYTE_MAX = 17,                 /**< lexicographically larger */
    KVQ_MUT_COMPARE_AND_CLEAR = 20,        /**< clear the key if its value equals the operand */
} kvq_mutation;

/**
 * Applies an atomic operation to a key at commit. Adds a write-conflict range for the key but
 * no read conflict, so concurrent atomic operations on one key never conflict. A later read of
 * the key in this transaction returns the applied value (absent when COMPARE_AND_CLEAR cleared
 * it). The operand is at most KVQ_MAX_VALUE_SIZE bytes.
 * @return as kvq_txn_set, and KVQ_EINVALID_MUTATION_TYPE.
 */
KVQ_API KVQ_NODISCARD int kvq_txn_atomic_op(kvq_txn *txn,
                                            const uint8_t *key,
                                            size_t key_len,
                                            const uint8_t *param,
                                            size_t param_len,
                                            kvq_mutation op);

/**
 * Sets a key whose 10 bytes at a given offset are replaced at commit by the transaction's
 * versionstamp. `key` ends with that offset as 4 little-endian bytes (so key_len counts them);
 * they are stripped. Adds no read conflict; at commit the stamped key gets a single-key
 * write-conflict range, so a transaction that read its range and commits later fails with
 * 1020 (as on FoundationDB). The span of keys the stamp may produce becomes unreadable in this
 * transaction (1036).
 * @return as kvq_txn_set, and KVQ_ECLIENT_INVALID_OPERATION for a bad offset.
 */
KVQ_API KVQ_NODISCARD int kvq_txn_set_versionstamped_key(
    kvq_txn *txn, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len);

/** Sets a key to a value whose 10 bytes at an offset (the value's last 4 bytes, little-endian)
 * are replaced by the versionstamp at commit. The key becomes unreadable in this transaction. */
KVQ_API KVQ_NODISCARD int kvq_txn_set_versionstamped_value(
    kvq_txn *txn, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len);

/**
 * Returns the next 2-byte "user version" of this transaction: 0, 1, 2 ... Layers put it after
 * the 10-byte versionstamp of keys (FoundationDB's 12-byte tuple versionstamps), so that many
 * versionstamped keys of one transaction stay distinct. The counter is reset by kvq_txn_reset
 * but not by kvq_txn_on_error, as erlfdb does.
 * @return 0, KVQ_EINVAL, or KVQ_ECLIENT_INVALID_OPERATION after 65,536 of them.
 */
KVQ_API KVQ_NODISCARD int kvq_txn_next_user_version(uint16_t *out, kvq_txn *txn);

/** Conflict range kinds. */
typedef enum kvq_conflict_type { KVQ_CONFLICT_READ = 0, KVQ_CONFLICT_WRITE = 1 } kvq_conflict_type;

/** Adds a read- or write-conflict range [begin, end) without reading or writing. */
KVQ_API KVQ_NODISCARD int kvq_txn_add_conflict_range(kvq_txn *txn,
                                                     const uint8_t *begin,
                                                     size_t begin_len,
                                                     const uint8_t *end,
                                                     size_t end_len,
                                                     kvq_conflict_type type);

/**
 * Gets the transaction's read version, taking one if it has none yet. Read versions advance with
 * time, about 1,000,000 a second, even when nothing commits (on both engines), and one taken
 * after a commit returned is at least that commit's version.
 */
KVQ_API KVQ_NODISCARD int kvq_txn_get_read_version(int64_t *out, kvq_txn *txn);

/**
 * Commits. On success the writes are durable (unless the database is relaxed) and visible to
 * every transaction that starts afterwards. Read-only transactions always commit.
 * @return 0; KVQ_ENOT_COMMITTED; KVQ_ECOMMIT_UNKNOWN_RESULT (maybe committed);
 *         KVQ_ETRANSACTION_TOO_OLD; KVQ_ETRANSACTION_TIMED_OUT; KVQ_ETRANSACTION_TOO_LARGE;
 *         KVQ_ENOSPC; KVQ_EIO; KVQ_EPERM (read-only database).
 */
KVQ_API KVQ_NODISCARD int kvq_txn_commit(kvq_txn *txn);

/** After a successful commit that wrote something, its commit version. KVQ_ENO_COMMIT_VERSION
 * otherwise. */
KVQ_API KVQ_NODISCARD int kvq_txn_get_committed_version(int64_t *out, kvq_txn *txn);

/** After a successful commit that wrote something, its 10-byte versionstamp (8-byte big-endian
 * commit version, 2-byte big-endian order in its batch). KVQ_ENO_COMMIT_VERSION otherwise. */
KVQ_API KVQ_NODISCARD int kvq_txn_get_versionstamp(uint8_t out[10], kvq_txn *txn);

/**
 * Handles an error from a transaction's operation or commit. For a retryable error within the
 * retry budget it resets the transaction, sleeps with exponential backoff and jitter, and
 * returns 0: run the body again. Otherwise it returns an error to report: `err` itself, or
 * KVQ_ETRANSACTION_TIMED_OUT when the timeout has passed, or the last error when the retry
 * limit is reached.
 */
KVQ_API KVQ_NODISCARD int kvq_txn_on_error(kvq_txn *txn, int err);

/** Transaction options (kvq_txn_set_option), numbered as FoundationDB numbers them. */
typedef enum kvq_txn_option {
    /** The next write (set, clear, clear range or atomic operation) adds no write-conflict
     * range: transactions that read its key do not conflict with it. Value ignored. */
    KVQ_TXN_NEXT_WRITE_NO_WRITE_CONFLICT_RANGE = 30,
    /** Reads see the database at the read version, not this transaction's own writes; watches
     * fail with KVQ_EWATCHES_DISABLED. Only before the first read or write
     * (KVQ_ECLIENT_INVALID_OPERATION after). Value ignored. */
    KVQ_TXN_READ_YOUR_WRITES_DISABLE = 51,
    /** Keys from 0xFF up to 0xFF 0xFF may be read and written (the system key space, which
     * kvq leaves to the application). Value ignored. */
    KVQ_TXN_ACCESS_SYSTEM_KEYS = 301,
    /** Keys from 0xFF up to 0xFF 0xFF may be read, not written. Value ignored. */
    KVQ_TXN_READ_SYSTEM_KEYS = 302,
    /** Milliseconds from the first use until the transaction fails with 1031; 0 is none. */
    KVQ_TXN_TIMEOUT_MS = 500,
    /** Retries allowed by kvq_txn_on_error; -1 is unlimited. */
    KVQ_TXN_RETRY_LIMIT = 501,
    /** Longest backoff in milliseconds. */
    KVQ_TXN_MAX_RETRY_DELAY_MS = 502,
    /** The transaction's size limit in bytes (32 to KVQ_MAX_TXN_SIZE): past it, writes fail
     * with KVQ_ETRANSACTION_TOO_LARGE. */
    KVQ_TXN_SIZE_LIMIT = 503,
    /** Snapshot reads see this transaction's own writes (the default). Value ignored. */
    KVQ_TXN_SNAPSHOT_RYW_ENABLE = 600,
    /** Snapshot reads see the database at the read version, not this transaction's own
     * writes. Value ignored. */
    KVQ_TXN_SNAPSHOT_RYW_DISABLE = 601,
} kvq_txn_option;

/** Sets a transaction option. The timeout, the retry limit and the retry delay survive
 * kvq_txn_on_error; every option is cleared by kvq_txn_reset, and the others by
 * kvq_txn_on_error too (as FoundationDB's options are). */
KVQ_API KVQ_NODISCARD int kvq_txn_set_option(kvq_txn *txn, kvq_txn_option option, int64_t value);

/**
 * Reads at `version` rather than a fresh read version (a version kept from an earlier
 * transaction, for instance). It must come before the first read (KVQ_EREAD_VERSION_ALREADY_SET
 * after) and be positive (KVQ_EVERSION_INVALID). The reads then fail with
 * KVQ_ETRANSACTION_TOO_OLD when the database has changed since `version` (the embedded engine
 * keeps only the newest state) or when it is more than 5 seconds old, and with
 * KVQ_EFUTURE_VERSION when it is newer than the database's present; kvq_txn_on_error retries
 * both with a fresh read version.
 */
KVQ_API KVQ_NODISCARD int kvq_txn_set_read_version(kvq_txn *txn, int64_t version);

/** The bytes the transaction counts against its size limit so far: keys and values written,
 * cleared ranges and conflict ranges. */
KVQ_API KVQ_NODISCARD int kvq_txn_get_approximate_size(int64_t *out, kvq_txn *txn);

/** How many retries kvq_txn_on_error has made in this transaction. */
KVQ_API KVQ_NODISCARD int kvq_txn_get_retries(const kvq_txn *txn);

/**
 * Watches a key. The watch is armed when this transaction commits and fires once the key's
 * value differs from the value this transaction saw (its own write, or the value at its read
 * version). It fails with the commit's error if the commit fails, and with 1025 if the
 * transaction is reset or destroyed before commit.
 *
 * @param[out] out  the watch; destroy it with kvq_watch_destroy (also after it fired)
 */
KVQ_API KVQ_NODISCARD int
kvq_txn_watch(kvq_watch **out, kvq_txn *txn, const uint8_t *key, size_t key_len);

/**
 * Waits for a watch without using the processor.
 * @param timeout_ms  how long to wait; -1 is forever, 0 only checks
 * @return 0 (the key changed); KVQ_ETIMED_OUT; KVQ_EWATCH_CANCELLED; or the error that ended
 *         the watch (the commit's error, 1025).
 */
KVQ_API KVQ_NODISCARD int kvq_watch_wait(kvq_watch *w, int64_t timeout_ms);

/** Cancels a watch: waiters return KVQ_EWATCH_CANCELLED. Safe from any thread. */
KVQ_API void kvq_watch_cancel(kvq_watch *w);

/** Cancels and frees a watch. NULL is a no-op. */
KVQ_API void kvq_watch_destroy(kvq_watch *w);

/**
 * The body of a transaction, run by kvq_db_transact. It may run several times, so it must have
 * no effect outside the transaction except filling result slots in `payload`, and must not
 * block for long (transactions older than 5 s fail). Return 0 to commit, or an error: a kvq
 * code received from a call (unchanged), or KVQ_EUSER for the function's own failure. Nothing
 * is committed after a non-zero return.
 */
typedef int (*kvq_txn_fn)(kvq_txn *txn, void *payload);

/**
 * Runs fn in a transaction and commits it, retrying on retryable errors (conflicts, 1007,
 * 1021 ...) within the database's retry limit and timeout.
 *
 * @note A commit that ends with KVQ_ECOMMIT_UNKNOWN_RESULT is retried like any retryable error,
 *       so fn may then have committed twice unless it is idempotent; the queue layers are.
 * @return 0 or the final error.
 */
KVQ_API KVQ_NODISCARD int kvq_db_transact(kvq_db *db, kvq_txn_fn fn, void *payload);

/** As kvq_db_transact, with a caller-created transaction whose options are kept. The
 * transaction is reset first; after success it holds the committed state, so that
 * kvq_txn_get_versionstamp and kvq_txn_get_committed_version answer, until it is reset. */
KVQ_API KVQ_NODISCARD int kvq_txn_run(kvq_txn *txn, kvq_txn_fn fn, void *payload);

#ifdef __cplusplus
}
#endif

#endif /* KVQ_DB_H */
