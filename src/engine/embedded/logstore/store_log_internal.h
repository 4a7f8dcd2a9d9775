/* The log store's internals (store_log.c is its table of operations, store.h), shared by its
 * files: store_log_apply.c (records applied to the map, the conflict log, readers.shm),
 * store_log_ckpt.c (the checkpoint thread, checkpoints, the reserve ckpt.reserve) and
 * store_log_write.c (the write in progress, commit, sync; room on a full disk). Calls go one
 * way: store_log.c calls the three; store_log_write.c calls store_log_ckpt.c; both call
 * store_log_apply.c, which calls neither. */
#ifndef KVQ_LOGSTORE_STORE_LOG_INTERNAL_H
#define KVQ_LOGSTORE_STORE_LOG_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/embedded/logstore/log.h"
#include "engine/embedded/logstore/vmap.h"
#include "engine/embedded/store.h"
#include "util/util.h"

/* Record payload (LS_REC_COMMIT):
 *   0 u8 format (1), u8 kind (1: a batch), u16 0, u32 length of the mutations
 *   8 i64 version
 *  16 u32 length of the packed write-conflict ranges, u32 0
 *  24 mutations: u8 op, u32 a length, then for SET and CLEAR_RANGE u32 b length; a; b
 *     then the packed ranges (ranges.h) */
#define LS_REC_COMMIT (KVQ__LOG_REC_USER)
#define LS_REC_FORMAT 1
#define LS_REC_HDR    24u
/* Versions kept behind the newest for reads at an older version: FoundationDB's 5 seconds (a
 * million versions a second), with a margin. */
#define LS_WINDOW 6000000
#define LS_SLOTS  128

enum { OP_SET = 1, OP_CLEAR = 2, OP_CLEAR_RANGE = 3 };

typedef struct cl_entry {
    int64_t version;
    uint8_t *packed;
    size_t n;
} cl_entry;

/* What a forward cursor learned of the table (kvq__ls_cursor_next): for the table at version
 * tver, every row with a key in [lo, hi] is hidden from a read at any version >= v by an entry
 * of the map newer than tver, at or before v (the items a queue popped in the window, which the
 * table still holds). The table's rows at one version never change, and the map keeps every
 * entry newer than an open snapshot's table, so a later cursor on that table, reading at v or
 * later from a key inside [lo, hi], starts the table's cursor just past hi: a queue's head read
 * steps over the window's popped items once, not at every pop.
 *
 * clean: no key of [lo, hi] had a value at v in the map either. Then the run holds for every
 * later table up to v too (tver <= t <= v): a row of such a table in [lo, hi] was a row of the
 * table at tver, or was set by a batch in (tver, t]; either way its key's newest entry at v was
 * not a value (clean), so it is a tombstone in (t, v] (one at or before t would have deleted the
 * row) and still hides the row. So the run outlives the applier's passes, which trail v by the
 * window: the window's pops are walked once, not once a pass. */
#define LS_SKIPS 8
typedef struct ls_skip {
    int used, clean;
    int64_t tver, v;
    kvq_buf lo, hi;
} ls_skip;

typedef struct reader_slot {
    uint64_t owner; /* pid << 16 | handle number, 0: free */
    uint64_t applied;
} reader_slot;

struct emb_store {
    char *dir; /* <database>/logstore */
    int dir_fd, ckpt_fd, readers_fd;
    int reserve_fd; /* ckpt.reserve: room kept for the next checkpoint (-1: read-only) */
    int read_only, durable;
    unsigned int mode;
    uint64_t limit;
    uint64_t ckpt_min;
    kvq__log *log;
    kvq__vmap *map;
    /* The table behind the log: the SQLite storage (store_sqlite.c) on logstore/data.db, an
     * emb_store of that storage (void: the name emb_store is this file's). It holds every
     * batch up to its version, written by one applier at a time (ckpt.lock); the map holds
     * only the batches after it. */
    void *table;
    int64_t table_known; /* the newest table version this handle has seen (under pin_mu) */
    /* How far the applier trails the newest version (LS_WINDOW), and how often it looks
     * (milliseconds); tests shorten both (KVQ_LOGSTORE_APPLY_LAG_US, KVQ_LOGSTORE_APPLY_MS). */
    int64_t lag;
    uint64_t apply_ms;

    /* Applying records (catch-up, commits): one thread at a time. */
    pthread_mutex_t apply_mu;
    uint64_t applied_lsn;
    int64_t applied_version;
    int64_t ckpt_version; /* what the last loaded or written checkpoint holds */
    uint64_t ckpt_lsn;
    /* The conflict log: the write ranges of every batch with a version > cl_floor, in order
     * (under apply_mu). */
    cl_entry *cl;
    size_t cl_head, cl_len, cl_cap;
    int64_t cl_floor;
    uint64_t cl_bytes; /* memory the conflict log's ranges take */
    int64_t last_forget;
    int replaying;

    /* Open snapshots' versions: the map keeps what they read (under pin_mu). */
    pthread_mutex_t pin_mu;
    int64_t *pins;
    size_t n_pins, cap_pins;
    int64_t floor;

    /* Runs of hidden table rows (ls_skip), under skip_mu; the counters (atomic) are those of
     * kvq__logstore_stats. */
    pthread_mutex_t skip_mu;
    ls_skip skips[LS_SKIPS];
    uint64_t n_skips, n_skips_carried, n_rows_walked;

    /* The write in progress, and its view (table + map) at the version it starts from. */
    int writing;
    struct emb_snap *wview;
    kvq__vmap *ov;
    kvq_buf rec;
    uint64_t add_cost;
    /* Its growth on disk, counted while the disk is short of room (space_short): bytes its
     * sets add (net of the values they replace), bytes its deletes free, stored keys it
     * deleted one by one (moves). */
    int w_counting;
    int64_t w_grow, w_freed, w_moves;

    /* Free space (space_short), under the commit lock. */
    int64_t space_at;
    uint64_t space_need, space_avail, space_live_ok;
    int space_short, space_forced;
    int64_t give_back_at; /* when a give-back gave nothing (0: none did) */

    /* readers.shm */
    reader_slot *slots;
    int slot;

    /* The checkpoint thread. */
    pthread_t ckpt_thread;
    int ckpt_started, ckpt_stop, ckpt_wanted, spare_wanted, reserve_wanted;
    uint64_t spare_seg; /* the segment during which a spare was last asked for */
    pthread_mutex_t ckpt_mu;
    pthread_cond_t ckpt_cv;
    pthread_mutex_t ckpt_write_mu; /* one checkpoint written at a time by this handle */
    uint64_t n_ckpts;
    /* A reader kept the table's WAL from being truncated after a pass (atomic; set under
     * ckpt_write_mu): the checkpoint thread tries again soon, not at the next pass. */
    int wal_kept;
    /* The bytes of the table's pages in use, as of the last pass or the open (atomic;
     * UINT64_MAX: not known, the file's size counts). */
    uint64_t table_live;

    /* Memory pressure (kvq__ls_throttle): the map past half its limit asks the checkpoint
     * thread for a pass of every batch (pressure_wanted, under ckpt_mu), and each commit waits
     * on pressure_cv (with ckpt_mu) for a delay growing with the excess; the counters are
     * atomic: commits delayed, microseconds they waited, passes run by a committer at the
     * limit, and the most the map held after a commit. */
    int pressure_wanted;
    pthread_cond_t pressure_cv;
    uint64_t n_throttled, throttle_us, n_forced, mem_peak;
};

/* A snapshot: the table's (a SQLite read transaction at table version tver) merged with the
 * map's entries newer than tver, read at version. Pinned: the map keeps every entry newer
 * than tver while it is open. */
struct emb_snap {
    emb_store *s;
    int64_t version, tver;
    void *tsnap; /* the table's emb_snap */
};

/* A cursor over a snapshot: the map's values newer than the table's, merged with the table's
 * cursor, whose rows the map deletes (a tombstone newer than the table) are skipped. */
struct emb_cursor {
    struct emb_snap *snap;
    kvq__vmap_cursor c;
    void *tcur;
    uint8_t *b, *e;
    int a_need, a_has, a_dead, b_need, b_has, reverse;
    kvq_bytes ak, av, bk, bv;
    /* The run of hidden table rows from the cursor's start (forward only, ls_skip): [lo, hi],
     * hidden at the cursor's version, the rows its first steps of the table skipped (walking =
     * 0 at the first row that is not hidden); walked = 1 when this cursor lengthened the run,
     * a_inside = 1 when it returned a value of the map inside it. from: where the table's
     * cursor starts when a known run was skipped (empty: none, the run starts at b). */
    int walking, walked, a_inside;
    uint64_t n_walked; /* hidden rows stepped over (kvq__logstore_stats) */
    kvq_buf lo, hi, from;
};

/* Meta records of the table: the log position its replay starts from. */
#define LS_META_LSN "log_lsn"

/* ---- records, the conflict log, readers.shm, snapshots (store_log_apply.c) ---- */

int kvq__ls_snap_open(emb_store *s, int64_t at, struct emb_snap **out, emb_snap_info *info);
void kvq__ls_snap_close(struct emb_snap *sn);
int kvq__ls_get(struct emb_snap *sn, const uint8_t *key, size_t key_len, kvq_bytes *value,
                int *present);
int kvq__ls_cursor_open(struct emb_snap *sn, const uint8_t *begin, size_t begin_len,
                        const uint8_t *end, size_t end_len, int reverse, struct emb_cursor **out);
int kvq__ls_cursor_next(struct emb_cursor *c, kvq_bytes *key, kvq_bytes *value, int *has);
void kvq__ls_cursor_close(struct emb_cursor *c);
/* Frees the runs of hidden table rows the cursors recorded (ls_skip). */
void kvq__ls_skips_free(emb_store *s);
/* The table's version as a new snapshot of it sees it (raising table_known). */
int kvq__ls_table_refresh(emb_store *s);
/* Drops the map's entries that the table holds and no open snapshot needs. */
void kvq__ls_drop(emb_store *s);

void kvq__ls_cl_prune(emb_store *s, int64_t before);
int kvq__ls_apply_record(emb_store *s, const kvq__log_rec *r);
int kvq__ls_replay_fn(void *arg, const kvq__log_rec *r);
int kvq__ls_catch_up_locked(emb_store *s);
int kvq__ls_catch_up(emb_store *s);
uint64_t kvq__ls_mem_used(emb_store *s);
int kvq__ls_slots_open(emb_store *s, int create);
uint64_t kvq__ls_slots_min(emb_store *s, uint64_t dflt);

/* ---- checkpoints and the reserve (store_log_ckpt.c) ---- */

int64_t kvq__ls_horizon(emb_store *s, int64_t newest);
uint64_t kvq__ls_ckpt_estimate(emb_store *s);
void kvq__ls_table_live_update(emb_store *s);
uint64_t kvq__ls_reserve_size(emb_store *s);
uint64_t kvq__ls_reserve_target(emb_store *s);
void kvq__ls_reserve_release(emb_store *s, uint64_t keep);
int kvq__ls_reserve_give_segment(emb_store *s);
int kvq__ls_do_checkpoint(emb_store *s, int wait, uint64_t *covered);
void *kvq__ls_ckpt_main(void *arg);
void kvq__ls_wake_reserve(emb_store *s);
void kvq__ls_throttle(emb_store *s, uint64_t add);
int kvq__ls_checkpoint(emb_store *s);

/* ---- writing (store_log_write.c) ---- */

int kvq__ls_write_begin(emb_store *s, emb_store_head *head);
int kvq__ls_write_get(
    emb_store *s, const uint8_t *key, size_t key_len, kvq_bytes *value, int *present);
int kvq__ls_write_put(
    emb_store *s, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len);
int kvq__ls_write_clear(emb_store *s, const uint8_t *key, size_t key_len);
int kvq__ls_write_clear_range(emb_store *s,
                              const uint8_t *begin,
                              size_t begin_len,
                              const uint8_t *end,
                              size_t end_len,
                              emb_key_fn deleted,
                              void *arg);
int kvq__ls_write_range_bytes(emb_store *s,
                              const uint8_t *begin,
                              size_t begin_len,
                              const uint8_t *end,
                              size_t end_len,
                              int64_t stop,
                              int64_t *bytes);
int kvq__ls_log_check(emb_store *s, int64_t after, const emb_ranges *reads, int *hit);
int kvq__ls_log_prune(emb_store *s, int64_t before);
int kvq__ls_write_commit(emb_store *s, int64_t version, const uint8_t *packed, size_t n);
void kvq__ls_write_abort(emb_store *s);
int kvq__ls_sync(emb_store *s, int repair, int *issued);

#endif
