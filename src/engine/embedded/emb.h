/* The embedded engine's internal header: FoundationDB's transaction model over a storage
 * (store.h) in a database directory. docs/engine.md ("Layout") says which file holds what.
 *
 * Files in the database directory that are the engine's (a storage adds its own; the SQLite
 * storage's are data.db, data.db-wal and data.db-shm):
 *   kvq.marker              written once the database is complete; with it present, a missing
 *                           or damaged storage file is reported, never re-created empty
 *   kvq.lock                kvq's cross-process commit lock (flock)
 *   kvq.shm                 a shared page (shm.c): a counter bumped by every commit, on which
 *                           watchers sleep with a futex (watches across processes without
 *                           polling), and the counters that let read versions advance with
 *                           time (read_version.c) and commits share one sync (sync.c)
 *   kvq.cq                  the commit queue shared by every process (commit_queue.c)
 *   kvq.reserve             space kept free for draining on a full disk (reserve.c) */
#ifndef KVQ_EMB_H
#define KVQ_EMB_H

#include <pthread.h>
#include <stdint.h>

#include "engine/engine.h"
#include "ranges.h"
#include "store.h"

/* The shared-memory page of a database (kvq.shm), mapped by every process that opens it. Fields
 * are only ever accessed with atomic operations. New fields go at the end: the page is zero
 * filled when created, and zero is every field's starting value. */
#define EMB_WATCH_BUCKETS 512

typedef struct emb_shm {
    uint32_t magic;
    uint32_t seq;     /* bumped after every commit; futex word */
    uint32_t waiters; /* processes' watcher threads asleep on seq */
    uint32_t pad_;
    /* Read versions that advance with time (read_version.c). */
    uint64_t commit_seq;      /* odd while a commit is between choosing its version and the end
                                 of its storage write (commit or abort); written by the lock
                                 holder */
    int64_t rv_floor;         /* the maximum of readers' clock readings and commit versions */
    int64_t inflight_version; /* the version chosen by the commit in flight... */
    uint64_t inflight_seq;    /* ...whose odd commit_seq this is */
    /* Version time (read_version.c): the clock of versions is vbase_version + (CLOCK_MONOTONIC -
     * vbase_mono), fixed once per boot (vbase_boot) by a read-write open under the commit lock;
     * vbase_gen is odd while it is written (a seqlock), 0 while unset. */
    uint64_t vbase_gen;
    int64_t vbase_version;
    int64_t vbase_mono;
    uint64_t vbase_boot[2];
    /* The watch filter (watch.c): a commit adds 1 to the counter of each bucket (a hash of the
     * key) whose key it wrote or deleted, after its storage commit and before its in-flight mark
     * ends; any_gen moves when a commit's keys are unknown (its committer died in flight). A
     * watcher re-reads a watched key only when its bucket or any_gen moved. */
    uint64_t any_gen;
    uint32_t key_gen[EMB_WATCH_BUCKETS];
    /* The shared sync (sync.c): the newest commit version that is written (set by the commit
     * lock holder once its storage commit returned), and the newest known to be on disk. */
    int64_t written_version;
    int64_t synced_version;
    uint32_t sync_gen; /* futex word: bumped after each sync */
    /* Set by a sync that failed, by any process: the kernel may have dropped the pages it was
     * to write, and a later sync that succeeds cannot vouch for them, nor for the commits
     * written after them. Cleared once the storage's repairing sync succeeded (SQLite: a
     * checkpoint copied the whole WAL into the database file and synced it; sync.c). Zero in a
     * kvq.shm of an older kvq. */
    uint32_t sync_broken;
    /* The newest commit of a relaxed handle (written, acknowledged, not synced). While it is
     * above synced_version, a durable reader cannot read at synced_version, which would miss a
     * commit already acknowledged: it reads the newest and has it synced first (txn.c). Zero in
     * a kvq.shm of an older kvq. */
    int64_t relaxed_version;
} emb_shm;

_Static_assert(sizeof(emb_shm) <= 4096, "kvq.shm is one page");

/* Processes share the page's atomics: they must be lock-free, not guarded by a local lock. */
#if !defined(__GCC_ATOMIC_LLONG_LOCK_FREE) || __GCC_ATOMIC_LLONG_LOCK_FREE != 2
#error "kvq.shm needs lock-free 64-bit atomics"
#endif

typedef struct emb_commit_req emb_commit_req;
typedef struct emb_txn emb_txn;

/* The commit queue shared by every process (commit_queue.c): slots of kvq.cq, each one process's batch. */
#define EMB_CQ_SLOTS        16
#define EMB_CQ_MAX_REQS     64
#define EMB_CQ_SLOT_BYTES   (128u << 10)
/* Slot i starts at EMB_CQ_HEADER_BYTES + i * EMB_CQ_SLOT_BYTES, with its state (a uint32_t):
 * free 0, being filled 1, ready 2, taken 3, done 4 (tests read them). */
#define EMB_CQ_HEADER_BYTES 4096u
enum { EMB_CQ_FREE = 0, EMB_CQ_READY = 2 };

/* The requests a leader took from other processes' slots. */
typedef struct emb_cq_taken {
    size_t n, n_slots;
    int slot[EMB_CQ_SLOTS];
    size_t first[EMB_CQ_SLOTS], count[EMB_CQ_SLOTS];
    emb_commit_req *reqs; /* EMB_CQ_SLOTS * EMB_CQ_MAX_REQS of each */
    emb_txn *txns;
} emb_cq_taken;

typedef struct emb_db {
    kvq_db *db;
    char *dir;
    kvq__db_opts opts;
    int lock_fd;

    /* The storage (store.h): its table of functions and its handle. */
    const emb_store_ops *so;
    emb_store *store;

    /* Group commit: committers queue up; one leader writes a whole queue in one storage
     * write with one sync. */
    pthread_mutex_t gc_mu;
    emb_commit_req *queue_head, *queue_tail;
    int leader_active;
    uint64_t commits_since_prune;
    int upkeep_busy; /* a thread is in the storage's checkpoint hook (atomic) */
    int64_t log_floor; /* leader only: the conflict log's floor, read by write_begin */

    /* Drain mode on a full disk (reserve.c); leader only. */
    int drain_only;
    int64_t drain_checked_us;
    /* The reserve could not be taken for a reason other than space (no descriptor left, ...):
     * writes go on without it, and it is taken again at the next chance (reserve.c). */
    int reserve_missing;

    /* Watches. */
    emb_shm *shm;
    int shm_fd;
    uint64_t boot_id[2]; /* this boot's id (zeros when the system does not say) */
    /* The shared sync (sync.c). */
    int durable;         /* commits and reads wait for the storage's sync */
    pthread_mutex_t sync_mu; /* without the commit pipeline: the syncer of this handle */
    int sync_busy; /* with it: a thread of this handle is the syncer, or trying to be (atomic) */
    pthread_mutex_t watch_mu;
    kvq_watch *watches; /* armed watches, a doubly linked list */
    size_t n_watches;
    int watch_thread_started;
    int watch_stop;
    int watch_rescan;
    pthread_t watch_thread;
    uint64_t watch_reads, watch_scans; /* keys read and scans made by the watcher (tests) */
    /* Leader only, under the commit lock: the watch buckets the batch touched. */
    uint64_t touched[EMB_WATCH_BUCKETS / 64];
    /* The shared commit queue (commit_queue.c); NULL for a read-only handle. cq_own: the slot this
     * handle's batch is in, or -1 (one batch of a handle at a time: its leader's). */
    void *cq;
    int cq_fd;
    int cq_own;
    emb_cq_taken cq_taken; /* leader only */
} emb_db;

/* One buffered write, applied in order at commit. */
typedef struct emb_mut {
    int op;       /* kvq_mutation, or EMB_OP_SET / EMB_OP_CLEAR_RANGE */
    emb_str a, b; /* key and value/param, or begin and end */
} emb_mut;

enum { EMB_OP_SET = 100, EMB_OP_CLEAR_RANGE = 101 };

/* Read-your-writes overlay: what the transaction's reads see of its own writes. */
enum { OV_SET = 1, OV_ATOMIC, OV_UNREADABLE };

typedef struct ov_atomic {
    int op;
    emb_str param;
} ov_atomic;

typedef struct ov_entry {
    emb_str key;
    int kind;
    emb_str value;  /* OV_SET */
    ov_atomic *ops; /* OV_ATOMIC: applied in order to the stored value */
    size_t n_ops, cap_ops;
} ov_entry;

typedef struct emb_overlay {
    ov_entry **v; /* sorted by key */
    size_t n, cap;
    emb_ranges cleared; /* sorted, disjoint, not adjacent; in the arena */
    emb_arena *arena;   /* the transaction's: entries, computed values */
} emb_overlay;

struct emb_txn {
    emb_db *e;
    kvq_txn *owner;
    emb_snap *snap; /* the storage's snapshot, held from the first read to commit or reset */
    int has_rv;
    int64_t rv;
    int64_t rv_mono_us;

    emb_overlay ov;
    emb_mut *muts; /* their bytes are in the arena */
    size_t n_muts, cap_muts;
    size_t ov_muts; /* the mutations the overlay reflects (txn.c: ov_catch_up) */
    int ov_rc;      /* the overlay could not be brought up to date (out of memory) */
    emb_ranges reads, writes, unreadable;
    size_t size; /* bytes of mutations and conflict ranges, for the 10 MB limit */
    /* Options, cleared by a reset: a lower size limit (0: KVQ_MAX_TXN_SIZE), reads that do
     * not see this transaction's writes (all, or snapshot reads only), the next write without a write-conflict range, and a
     * read version asked for (kvq_txn_set_read_version; 0: none). */
    size_t size_limit;
    int no_ryw;
    int snapshot_no_ryw;
    int next_write_no_conflict;
    int64_t wanted_rv;
    /* Early lock release (kvq__txn_early_read, cleared by a reset): the first read takes the
     * newest written snapshot without waiting for its sync; early_upto is then the newest
     * commit it holds that was not yet synced (0: none), which a commit that writes nothing,
     * or an attempt settled without a commit, waits for. */
    int early_read;
    int64_t early_upto;

    emb_arena arena;

    int committing;
    int committed;
    int64_t committed_version;
    uint8_t stamp[10];

    kvq_watch **pending_watches;
    size_t n_pending, cap_pending;
};

/* Per-watch engine data. */
typedef struct emb_watch {
    emb_db *e;
    emb_str key;
    int present;
    emb_str value;
    int linked;
    /* The filter's counters when the value was last found unchanged (seen_valid), and as
     * loaded before the current scan's snapshot. */
    uint32_t bucket, seen_gen, cur_gen;
    uint64_t seen_any;
    int seen_valid;
} emb_watch;

struct emb_commit_req {
    emb_txn *t;
    int fault;   /* KVQ_FAULT_* chosen for this commit, or 0 */
    int done;    /* set under gc_mu once the batch is written */
    int applied; /* leader only: applied in the batch, pending the storage commit */
    int rc;
    char msg[256]; /* the detail of rc */
    pthread_cond_t cond;
    emb_commit_req *next;
};

/* strings and ranges: ranges.h (ranges.c) */

/* the read-your-writes overlay (overlay.c). Keys, values and parameters given to it are lent:
 * they must stay valid until ov->arena is freed (they are the transaction's mutations). Frees
 * the array of entries (the rest is in the arena); ov->arena stays set. */
void emb_overlay_free(emb_overlay *ov);
/* Finds the entry for key, or NULL; *pos gets the insertion position. */
ov_entry *emb_overlay_find(const emb_overlay *ov, const uint8_t *k, size_t kn, size_t *pos);
/* First position whose key is >= k. */
size_t emb_overlay_lower(const emb_overlay *ov, const uint8_t *k, size_t kn);
int emb_overlay_set(emb_overlay *ov, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn);
int emb_overlay_clear_range(
    emb_overlay *ov, const uint8_t *b, size_t bn, const uint8_t *e, size_t en);
int emb_overlay_atomic(
    emb_overlay *ov, const uint8_t *k, size_t kn, const uint8_t *param, size_t pn, int op);
int emb_overlay_unreadable(emb_overlay *ov, const uint8_t *k, size_t kn);
int emb_overlay_cleared(const emb_overlay *ov, const uint8_t *k, size_t kn);

/* atomic operations (atomic_ops.c): applies an atomic operation to a value (present or not); the result goes to out, and
 * *out_present says whether there is one (COMPARE_AND_CLEAR may leave the key absent). */
int emb_apply_atomic(kvq_buf *out,
                     int *out_present,
                     int op,
                     const uint8_t *old,
                     size_t oldn,
                     int present,
                     const uint8_t *param,
                     size_t pn);

/* the arena (arena.c): ranges.h */

/* transactions (txn.c): the engine operations, and helpers */
int emb_txn_create(void **out, void *ep, kvq_txn *owner);
void emb_txn_destroy(void *tp);
void emb_txn_reset(void *tp);
int emb_get(void *tp,
            kvq_bytes *value,
            int *present,
            const uint8_t *key,
            size_t key_len,
            unsigned int flags);
int emb_get_range(void *tp,
                  const kvq_kv **kvs,
                  size_t *count,
                  int *more,
                  const uint8_t *begin,
                  size_t begin_len,
                  const uint8_t *end,
                  size_t end_len,
                  int limit,
                  unsigned int flags);
int emb_set(void *tp, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len);
int emb_clear_range(
    void *tp, const uint8_t *begin, size_t begin_len, const uint8_t *end, size_t end_len);
int emb_atomic_op(void *tp,
                  const uint8_t *key,
                  size_t key_len,
                  const uint8_t *param,
                  size_t param_len,
                  kvq_mutation op);
int emb_add_conflict_range(void *tp,
                           const uint8_t *begin,
                           size_t begin_len,
                           const uint8_t *end,
                           size_t end_len,
                           kvq_conflict_type type);
int emb_get_read_version(void *tp, int64_t *out);
int emb_get_committed_version(void *tp, int64_t *out);
int emb_get_versionstamp(void *tp, uint8_t out[10]);
int emb_set_read_version(void *tp, int64_t version);
int emb_get_approximate_size(void *tp, int64_t *out);
int emb_set_option(void *tp, kvq_txn_option option, int64_t value);

/* Ends the transaction's snapshot, if it has one. */
void emb_txn_end_read(emb_txn *t);

/* commit (commit.c) */
int emb_commit(void *tp);

/* kvq.shm (shm.c) */
int emb_shm_open(emb_db *e);
void emb_shm_close(emb_db *e);
/* After a commit: bumps the counter watchers sleep on and wakes them. */
void emb_notify_commit(emb_db *e);
/* Every watcher must read its keys again (a commit whose keys are unknown). */
void emb_shm_touch_all(emb_shm *m);

/* watches (watch.c) */
int emb_watch_create(void *tp, kvq_watch *w, const uint8_t *key, size_t key_len);
void emb_watch_release(kvq_watch *w);
/* After a commit: arms (or fails) the transaction's pending watches. */
void emb_watches_after_commit(emb_txn *t, int rc);
/* After reset or destroy before commit: fails pending watches with 1025. */
void emb_watches_abandon(emb_txn *t);
void emb_watch_shutdown(emb_db *e);
/* The watch bucket of a key. */
uint32_t emb_watch_bucket(const uint8_t *key, size_t n);
/* Leader: notes that the batch wrote or deleted key. */
void emb_watch_touch(emb_db *e, const uint8_t *key, size_t n);
/* Leader, after the batch's storage commit or abort, still in flight: publishes the touched
 * buckets. */
void emb_watch_publish(emb_db *e);

/* the shared sync (sync.c) */
/* Makes sure every commit up to version v (written by the storage) is on disk: returns at once
 * when the shared sync already covered it, else has the storage sync for every process (one
 * sync covers all the commits written so far) or waits for the process that is syncing.
 * 0, or KVQ_EIO when the sync failed (the commits' durability is then unknown). */
int emb_sync_upto(emb_db *e, int64_t v);
/* The commit pipeline of issue 30 (docs/engine.md): reads at the durable version on a storage
 * that keeps versions, leadership handed on before the sync, watches fired once durable. On by
 * default on such a storage (the log store), off on SQLite; $KVQ_PIPELINE=0 turns it off, =1 on
 * for every storage (read once per process). */
int emb_pipelined(const emb_db *e);
/* Early reads (issue 30, item 4; kvq__txn_early_read): honoured on a durable read-write handle
 * of either storage when $KVQ_EARLY_READ is 1 (read once per process; off otherwise). */
int emb_early_read(const emb_db *e);
/* Whether the handle can read early at all (durable, read-write, kvq.shm mapped). */
int emb_early_read_possible(const emb_db *e);
/* An early-read transaction that hands out what it read without a commit of its own (a
 * read-only commit, a settled attempt): waits for the sync of what it read. */
int emb_txn_early_settle(emb_txn *t);
/* Is every commit up to version v known to be on disk (or the handle relaxed)? */
int emb_synced(emb_db *e, int64_t v);
/* Notes, under the commit lock, that commit version v is written. */
void emb_sync_written(emb_db *e, int64_t v);

/* read versions that advance with time (read_version.c) */
typedef struct emb_rv_probe {
    int published; /* the reader's clock reading went into rv_floor */
    int64_t floor; /* rv_floor once it did */
    uint64_t seq;  /* commit_seq before the snapshot */
} emb_rv_probe;
/* Before a reader's snapshot: publishes the clock and notes the commit counter. */
/* Fixes the version clock's base in kvq.shm unless this boot already did (a read-write open,
 * before any commit of the handle). */
void emb_rv_clock_open(emb_db *e);
/* The version clock: microseconds that advance with CLOCK_MONOTONIC from the shared base, so a
 * step of the wall clock does not move versions; the wall clock when no base is set. */
int64_t emb_rv_clock(emb_db *e);
void emb_rv_before_snapshot(emb_db *e, emb_rv_probe *p);
/* After the snapshot, whose stored version (of the last commit it sees) is `stored`: the read
 * version to hand out, >= stored, and below the version of every commit the snapshot misses. */
int64_t emb_rv_after_snapshot(emb_db *e, const emb_rv_probe *p, int64_t stored);
/* Committer, with the commit lock held and `prev` the stored version read by write_begin:
 * marks a commit in flight and returns its version, max(clock, prev + 1, rv_floor). */
int64_t emb_rv_commit_begin(emb_db *e, int64_t prev);
/* Committer, after the storage's commit or abort and before the commit lock is released. */
void emb_rv_commit_end(emb_db *e);

/* the disk-full reserve (reserve.c) */
void emb_reserve_open(emb_db *e);
/* Frees the reserve and enters drain mode; returns 1 if space was freed. */
int emb_reserve_release(emb_db *e);
/* In drain mode, takes the reserve back once the disk has room; takes a missing reserve. */
void emb_reserve_refresh(emb_db *e);
/* Drain mode's test, under the commit lock: *grows = 1 unless the transaction frees more bytes
 * (stored rows its clears delete) than it writes (keys and values it sets). */
int emb_txn_grows(emb_db *e, const emb_txn *t, int *grows);

/* the commit queue shared by every process (commit_queue.c) */
/* Maps kvq.cq for a read-write handle that knows this boot's id; without it (or on any
 * failure) the handle's commits wait on the commit lock alone. */
void emb_cq_open(emb_db *e);
void emb_cq_close(emb_db *e);
/* Owner: publishes a batch in a free slot; its index, or -1 (no slot free, too large). */
int emb_cq_publish(emb_db *e, emb_commit_req **reqs, size_t n);
/* Owner: sleeps until the slot is DONE (0) or this thread holds the commit lock (1). */
int emb_cq_wait(emb_db *e, int own);
/* Owner holding the commit lock: 2 if its slot is DONE (another leader wrote its requests);
 * otherwise the slot is private again, the owner leads its requests itself, and the result is 1
 * if a leader that died had taken them (only before emb_cq_recover: their outcome is unknown),
 * 0 if not. */
int emb_cq_own_claim(emb_db *e, int own);
/* Owner: copies the outcomes of a DONE slot into its requests and frees the slot; the version
 * to sync, or 0 when none committed. */
int64_t emb_cq_collect(emb_db *e, int own, emb_commit_req **reqs, size_t n);
/* Owner: frees its slot. */
void emb_cq_release(emb_db *e, int own);
/* Lock holder, with the database's version read under the lock, before it commits anything:
 * settles the slots of a leader that died (DONE if its COMMIT happened, READY otherwise) and
 * frees the slots of owners that died. */
void emb_cq_recover(emb_db *e, int64_t db_version);
/* Lock holder: takes READY slots, whole, while they fit in room requests and bytes_room bytes. */
int emb_cq_take(emb_db *e, size_t room, size_t bytes_room, emb_cq_taken *out);
/* Lock holder: writes the taken requests' outcomes; tentative (before the COMMIT, for a leader
 * that would die before the final ones) or final (the slots become DONE, owners are woken). */
void emb_cq_outcomes(emb_db *e, emb_cq_taken *tk, int64_t version, int final);
/* Lock holder giving up its batch before committing: the taken slots are READY again. */
void emb_cq_untake(emb_db *e, emb_cq_taken *tk);
void emb_cq_free_taken(emb_cq_taken *tk);
/* After releasing the lock: wakes the owner of a slot still waiting, to lead the next batch. */
void emb_cq_wake_next(emb_db *e);
/* Is another process's batch waiting in a slot? */
int emb_cq_any_ready(emb_db *e);

#endif /* KVQ_EMB_H */
