/* The embedded engine's storage interface.
 *
 * The engine (transactions, commit, read versions, watches, the commit queue, the shared sync,
 * the disk-full reserve) keeps FoundationDB's contract; a storage keeps bytes. A storage is a
 * table of functions (emb_store_ops) over its own handle (emb_store), in the manner of a VFS:
 * it owns its files in the database directory and knows nothing of transactions, versions'
 * meaning, conflicts' semantics, watches or other processes' commit requests. The SQLite
 * storage (store_sqlite.c) is the first; docs/engine.md ("Layout") states the same contract.
 *
 * What the engine guarantees a storage:
 *   - Writes are serialised across every process: write_begin .. write_commit / write_abort
 *     run only while the caller holds kvq's commit lock (an flock on kvq.lock, the engine's
 *     file), one batch at a time, on one thread of one handle. Versions given to write_commit
 *     increase strictly, across processes and restarts.
 *   - open with create = 1 runs with the commit lock held (creations are serialised).
 *   - close runs when no other operation of the handle is in flight.
 *   - Keys are at most 10,000 bytes, values at most 100,000; a key range [b, e) has b < e
 *     unless said otherwise. Every pointer argument is valid (the engine validated the input).
 *
 * What a storage guarantees the engine:
 *   - Snapshots are consistent: a snapshot holds every batch committed before it was taken
 *     and nothing of a later one, and its version is the version of the newest batch it holds.
 *   - Every value it returns was checked against its checksum (or an equivalent): a stored
 *     value that fails it is KVQ_EDAMAGED, never returned as data.
 *   - Errors are kvq codes with a message set by kvq__error (util.h): KVQ_ENOMEM, KVQ_ENOSPC
 *     (the disk is full: the engine then frees its reserve and retries in drain mode),
 *     KVQ_EDAMAGED, KVQ_EPERM, KVQ_EBUSY, KVQ_EIO, KVQ_EUNSUPPORTED (a format it does not read),
 *     KVQ_ENOTFOUND, and KVQ_ECOMMIT_UNKNOWN_RESULT from write_commit only.
 *   - Bytes it returns are borrowed: valid until the next call on the same snapshot, cursor or
 *     write, or until that object is closed. The engine copies what it keeps.
 *
 * Threads: snapshots may be opened by many threads at once; one snapshot (and its cursor) is
 * used by one thread at a time. sync may run on any thread, concurrently with snapshots and
 * with a write of the same or another handle. */
#ifndef KVQ_EMB_STORE_H
#define KVQ_EMB_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "ranges.h"

#define EMB_STORE_OPS_VERSION 1

/* Defined by each storage. */
typedef struct emb_store emb_store;   /* one open database of one kvq_db handle */
typedef struct emb_snap emb_snap;     /* a read snapshot */
typedef struct emb_cursor emb_cursor; /* a range cursor of a snapshot */

/* How the engine opens a storage. */
typedef struct emb_store_config {
    const char *dir;           /* the database directory; it exists */
    const kvq__db_opts *opts;  /* flags (KVQ_DB_READ_ONLY, ...), file_mode, test_flags */
    /* 1: the directory has no kvq.marker (a new database, or a creation that died halfway):
     * create the storage's files, or finish creating them, with opts->file_mode; the engine
     * holds the commit lock, and writes and syncs the marker (and the directory) once open
     * returns 0. 0: the marker exists, so the database is complete: a missing, empty,
     * truncated or foreign file is KVQ_EDAMAGED, and nothing is ever re-created. */
    int create;
    /* 1: the engine will call sync before it reports a commit (or a read of one); the
     * storage may open what sync needs now, so that running out of descriptors is an open
     * error rather than a commit of unknown outcome. 0: relaxed, sync is never called. */
    int durable;
} emb_store_config;

/* A snapshot's versions (snap_open). */
typedef struct emb_snap_info {
    int64_t version; /* the version of the newest batch the snapshot holds */
    int64_t latest;  /* the newest batch the storage held when the snapshot was taken: equal
                        to version unless an older version was asked for (EMB_STORE_MVCC) */
} emb_snap_info;

/* What a write starts from (write_begin), read under the commit lock. */
typedef struct emb_store_head {
    int64_t version;   /* the stored version: that of the newest committed batch (0: none) */
    int64_t log_floor; /* the conflict log holds the write ranges of every batch with a
                          version > log_floor (log_prune raises it) */
} emb_store_head;

/* Called for each stored key a clear_range deletes. */
typedef void (*emb_key_fn)(void *arg, const uint8_t *key, size_t key_len);

/* Capabilities (emb_store_ops.caps). */
enum {
    /* snap_open honours `at`: it keeps the versions of the last 5 seconds (and more) and reads
     * the database as of any of them. Without it, snapshots are of the newest state only. */
    EMB_STORE_MVCC = 1u << 0,
};

typedef struct emb_store_ops {
    unsigned int version; /* EMB_STORE_OPS_VERSION */
    const char *name;     /* "sqlite", ... */
    unsigned int caps;    /* EMB_STORE_* */

    /* ---- opening ---------------------------------------------------------------------- */

    /* Opens (or creates, cfg->create) the storage of the database in cfg->dir. On success
     * *out is the handle, owned by the caller until close. On failure nothing is left open
     * and *out is untouched; the files of a database that existed are never changed. */
    int (*open)(emb_store **out, const emb_store_config *cfg);
    /* Closes the handle and frees everything it owns; may do a last checkpoint. NULL is a
     * no-op. */
    void (*close)(emb_store *s);

    /* ---- reading ---------------------------------------------------------------------- */

    /* Takes a snapshot. at = 0: of the newest state. at > 0 (only with EMB_STORE_MVCC; other
     * storages ignore it): as of version at, holding every batch with a version <= at and
     * none after (KVQ_ETRANSACTION_TOO_OLD if the storage no longer keeps it). *out is owned
     * by the caller until snap_close; *info gets its versions. A storage may retry internally
     * while its snapshot cannot start for a moment; what it reports is final. */
    int (*snap_open)(emb_store *s, int64_t at, emb_snap **out, emb_snap_info *info);
    /* Ends a snapshot (and frees what it held, so that old data can be reclaimed). NULL is a
     * no-op. Never fails. */
    void (*snap_close)(emb_snap *snap);
    /* The value of key in the snapshot: *present = 1 and *value (borrowed), or *present = 0
     * and *value = {NULL, 0}. */
    int (*get)(emb_snap *snap, const uint8_t *key, size_t key_len, kvq_bytes *value,
               int *present);
    /* Opens a cursor over the snapshot's keys in [begin, end), ascending or (reverse = 1)
     * descending. Cursors are lazy: a cursor that is closed early costs only the rows it
     * returned, so the engine's limits need no argument. At most one cursor per snapshot is
     * open at a time; get may be called while it is. *out is owned by the caller until
     * cursor_close. */
    int (*cursor_open)(emb_snap *snap,
                       const uint8_t *begin,
                       size_t begin_len,
                       const uint8_t *end,
                       size_t end_len,
                       int reverse,
                       emb_cursor **out);
    /* The next row: *has = 1 with *key and *value (borrowed), or *has = 0 at the end. After an
     * error, only cursor_close may be called. */
    int (*cursor_next)(emb_cursor *c, kvq_bytes *key, kvq_bytes *value, int *has);
    /* NULL is a no-op. */
    void (*cursor_close)(emb_cursor *c);

    /* ---- writing (the commit lock held; one write at a time per database) ------------- */

    /* Starts the write of one batch and reads its starting point. Everything until
     * write_commit is invisible to snapshots and to other processes, and undone by
     * write_abort or a crash. */
    int (*write_begin)(emb_store *s, emb_store_head *head);
    /* The value of key as this write sees it (its own puts and clears included):
     * borrowed until the next write call. */
    int (*write_get)(emb_store *s, const uint8_t *key, size_t key_len, kvq_bytes *value,
                     int *present);
    /* Stores key = value (inserting or replacing). */
    int (*write_put)(emb_store *s,
                     const uint8_t *key,
                     size_t key_len,
                     const uint8_t *value,
                     size_t value_len);
    /* Deletes key (a key write_get found present). */
    int (*write_clear)(emb_store *s, const uint8_t *key, size_t key_len);
    /* Deletes every key in [begin, end) (begin >= end deletes nothing), calling deleted (if
     * not NULL) once per key that was stored, before the call returns. */
    int (*write_clear_range)(emb_store *s,
                             const uint8_t *begin,
                             size_t begin_len,
                             const uint8_t *end,
                             size_t end_len,
                             emb_key_fn deleted,
                             void *arg);
    /* The bytes (keys plus values) stored in [begin, end) as this write sees them, summed
     * until the sum passes stop (the answer may then be any value > stop): what clearing the
     * range would free, for drain mode on a full disk. */
    int (*write_range_bytes)(emb_store *s,
                             const uint8_t *begin,
                             size_t begin_len,
                             const uint8_t *end,
                             size_t end_len,
                             int64_t stop,
                             int64_t *bytes);

    /* The conflict log: the write-conflict ranges of recent batches, by version, shared by
     * every process. log_check: *hit = 1 if any range logged by a batch with a version > after
     * intersects reads (normalized, see ranges.h); the caller has checked after >= log_floor.
     * A malformed entry is KVQ_EDAMAGED. Called during a write, so it also sees what the
     * batches before this one committed. */
    int (*log_check)(emb_store *s, int64_t after, const emb_ranges *reads, int *hit);
    /* During a write: forgets the ranges of batches with versions < before, except the
     * newest batch's, and raises log_floor to the newest version it dropped (kept by the
     * write, so it holds once it commits). A storage may also prune on its own, as long as
     * log_floor says what it dropped. */
    int (*log_prune)(emb_store *s, int64_t before);

    /* Commits the write as batch `version` (> head.version) whose write-conflict ranges are
     * packed (ranges.h; n may be 0): from then on it is the stored version, its ranges are
     * in the conflict log and snapshots hold it. version = 0: the batch applied nothing; the
     * write ends without recording a version (packed is ignored). On 0 the batch is committed
     * but not necessarily durable: the engine calls sync before it reports it. On
     * KVQ_ECOMMIT_UNKNOWN_RESULT it may or may not have committed (the storage failed while
     * writing it); on any other error it did not, and the write is over. */
    int (*write_commit)(emb_store *s, int64_t version, const uint8_t *packed, size_t n);
    /* Ends a write without committing it (a no-op when none is open). Never fails. */
    void (*write_abort)(emb_store *s);

    /* ---- durability and upkeep ------------------------------------------------------- */

    /* Makes durable every batch whose write_commit has returned, in any process: on 0, a
     * crash or power cut loses none of them. *issued = 1 if it called the system's sync (a
     * failure then may have dropped written pages; a success is counted as one sync in
     * kvq_db_stats), else 0 (nothing to sync). repair = 1: a sync of this database failed
     * earlier (in any process), so pages written before it cannot be trusted to a new sync;
     * make them durable another way first (SQLite: a checkpoint that copies the whole WAL into
     * the database file and syncs it), or fail with KVQ_EIO. A storage that syncs inside
     * write_commit implements this as a no-op. */
    int (*sync)(emb_store *s, int repair, int *issued);
    /* Optional (NULL: none). Called by the thread that led a batch, once the batch is synced
     * and its other committers are woken, with no lock held, so that a storage can bound its
     * files (checkpoint a log, recycle segments) off the commit path; cheap when there is
     * nothing to do. Never by two threads of one handle at once (a thread that finds the hook
     * busy skips it); other handles and processes may call theirs meanwhile. Errors are not
     * reported to anyone: a storage that cannot checkpoint reports it when space runs out. */
    int (*checkpoint)(emb_store *s);
} emb_store_ops;

/* The SQLite storage (store_sqlite.c). */
extern const emb_store_ops emb_sqlite_store;

#endif /* KVQ_EMB_STORE_H */
