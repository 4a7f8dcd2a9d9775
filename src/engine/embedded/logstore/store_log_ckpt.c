/* The log store's applier (store_log_internal.h): the thread that applies the log's batches
 * older than the window into the table (logstore/data.db, the SQLite storage) in large
 * transactions, syncs the table and releases the log it holds; and the reserve ckpt.reserve
 * that keeps room for the table to take the log on a full disk. (Its functions keep the
 * name "checkpoint": a pass of the applier is this storage's checkpoint.) */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "engine/embedded/logstore/ckpt.h"
#include "engine/embedded/logstore/store_log_internal.h"
#include "engine/embedded/logstore/store_log.h"
#include "engine/embedded/store_sqlite.h"
#include "util/bytes.h"

/* ---- the checkpoint reserve (ckpt.reserve) ---- */

/* The room the applier needs, on a full disk, to bring the table up to the log's tail and to
 * delete everything it holds: the table's WAL takes about twice the log it applies (pages
 * rewritten whole) and, for deletions, the pages they touch (at most the table's pages in use:
 * its free pages, left by what was deleted, are not written again). */
uint64_t kvq__ls_ckpt_estimate(emb_store *s)
{
    uint64_t tail = kvq__log_tail(s->log), at = __atomic_load_n(&s->ckpt_lsn, __ATOMIC_ACQUIRE);
    uint64_t table = __atomic_load_n(&s->table_live, __ATOMIC_ACQUIRE);
    if (table == UINT64_MAX) {
        struct stat st;
        table = fstatat(s->dir_fd, "data.db", &st, 0) == 0 ? (uint64_t)st.st_size : 0;
    }
    return table + 2 * (tail > at ? tail - at : 0) + (1u << 20);
}

/* table_live from the table's writer (ckpt_write_mu held, or no applier yet). */
void kvq__ls_table_live_update(emb_store *s)
{
    uint64_t live = 0;
    if (kvq__sqlite_live_bytes(s->table, &live) != 0) {
        kvq__error_clear();
        live = UINT64_MAX;
    }
    __atomic_store_n(&s->table_live, live, __ATOMIC_RELEASE);
}

uint64_t kvq__ls_reserve_size(emb_store *s)
{
    struct stat st;
    if (s->reserve_fd < 0 || fstat(s->reserve_fd, &st) != 0 || st.st_size < 0)
        return 0;
    return (uint64_t)st.st_size;
}

/* What the reserve should hold: room for a checkpoint of the live data and for one segment. */
uint64_t kvq__ls_reserve_target(emb_store *s)
{
    return kvq__ls_ckpt_estimate(s) + kvq__log_segment_bytes(s->log);
}

/* Grows the reserve to its target (a full disk stops it short: space_short then refuses what
 * would grow the data), or shrinks it when the data shrank. Off the commit path. */
static void reserve_adjust(emb_store *s)
{
    if (s->reserve_fd < 0)
        return;
    uint64_t have = kvq__ls_reserve_size(s), want = kvq__ls_reserve_target(s);
    uint64_t seg = kvq__log_segment_bytes(s->log);
    if (have < want) {
        /* a little beyond, so that it is not grown at every item */
        uint64_t to = want + want / 8;
        if (posix_fallocate(s->reserve_fd, 0, (off_t)to) != 0)
            posix_fallocate(s->reserve_fd, 0, (off_t)want);
    } else if (have > want + want / 4 + seg) {
        if (ftruncate(s->reserve_fd, (off_t)(want + want / 8)) != 0) {
            /* kept as it is: the next adjustment tries again */
        }
    }
}

/* Gives the reserve's room back to the file system, for a checkpoint or a segment that needs
 * it now. */
void kvq__ls_reserve_release(emb_store *s, uint64_t keep)
{
    if (s->reserve_fd >= 0 && kvq__ls_reserve_size(s) > keep &&
        ftruncate(s->reserve_fd, (off_t)keep) == 0)
        fdatasync(s->reserve_fd);
}

/* Gives a segment's worth of the reserve back when the reserve holds more than the next
 * checkpoint needs (its target holds one segment beyond it: a spare, or the next segment, on
 * a full disk). Returns 1 when it did. */
int kvq__ls_reserve_give_segment(emb_store *s)
{
    uint64_t have = kvq__ls_reserve_size(s), seg = kvq__log_segment_bytes(s->log);
    if (have < kvq__ls_ckpt_estimate(s) + seg)
        return 0;
    kvq__ls_reserve_release(s, have - seg);
    return 1;
}

/* ---- the applier: the log's batches into the table ---- */

/* The newest version the applier takes: what is older than the window, in the versions' clock
 * (microseconds: a batch committed lag ago or earlier), so that the last batches reach the
 * table once the window has passed even when nothing is committed after them. */
int64_t kvq__ls_horizon(emb_store *s, int64_t newest)
{
    int64_t h = kvq__now_us() - s->lag;
    return h < newest ? h : newest;
}

/* One pass of the applier: the batches read from the log, folded into their net effect
 * (an overlay: a key's last value or its deletion; the ranges cleared), written to the table in
 * one transaction. An item pushed and popped within the pass is a deletion of a key the table
 * never held: nothing of it is written. */
typedef struct apply_pass {
    int64_t tver, horizon, last_version;
    uint64_t limit, last_end;
    kvq__vmap *ov;
    kvq_buf ranges; /* u32 length, begin, u32 length, end */
    size_t batches;
    int err;
} apply_pass;

#define PASS_STOP 1

static int pass_rec(void *arg, const kvq__log_rec *r)
{
    apply_pass *p = arg;
    if (r->end > p->limit)
        return PASS_STOP;
    if (r->type != LS_REC_COMMIT) {
        p->last_end = r->end;
        return 0;
    }
    const uint8_t *d = r->data;
    if (r->len < LS_REC_HDR || d[0] != LS_REC_FORMAT || d[1] != 1)
        return kvq__error(KVQ_EDAMAGED, "log store: the record at %llu of the log is malformed",
                          (unsigned long long)r->lsn);
    uint64_t ops_len = kvq__le32_get(d + 4);
    int64_t version = (int64_t)kvq__le64_get(d + 8);
    if (LS_REC_HDR + ops_len > r->len)
        return kvq__error(KVQ_EDAMAGED, "log store: the record at %llu of the log is malformed",
                          (unsigned long long)r->lsn);
    if (version <= p->tver) {
        p->last_end = r->end;
        return 0;
    }
    if (version > p->horizon)
        return PASS_STOP;
    const uint8_t *o = d + LS_REC_HDR, *end = o + ops_len;
    int rc = 0;
    while (o < end && rc == 0) {
        uint8_t op = o[0];
        if (end - o < 5)
            goto bad;
        uint64_t al = kvq__le32_get(o + 1), bl = 0;
        o += 5;
        if (op == OP_SET || op == OP_CLEAR_RANGE) {
            if (end - o < 4)
                goto bad;
            bl = kvq__le32_get(o);
            o += 4;
        }
        if ((uint64_t)(end - o) < al + bl)
            goto bad;
        if (op == OP_SET) {
            rc = kvq__vmap_set(p->ov, 1, o, (size_t)al, o + al, (size_t)bl);
        } else if (op == OP_CLEAR) {
            rc = kvq__vmap_tombstone(p->ov, 1, o, (size_t)al);
        } else if (op == OP_CLEAR_RANGE) {
            rc = kvq__vmap_clear_range(p->ov, 1, o, (size_t)al, o + al, (size_t)bl, NULL, NULL);
            if (rc == 0 && kvq_buf_grow(&p->ranges, 8 + al + bl) != 0)
                rc = kvq__error(KVQ_ENOMEM, "out of memory");
            if (rc == 0) {
                uint8_t *w = p->ranges.data + p->ranges.len;
                kvq__le32_put(w, (uint32_t)al);
                memcpy(w + 4, o, (size_t)al);
                kvq__le32_put(w + 4 + al, (uint32_t)bl);
                memcpy(w + 8 + al, o + al, (size_t)bl);
                p->ranges.len += 8 + al + bl;
            }
        } else {
            goto bad;
        }
        o += al + bl;
    }
    if (rc != 0)
        return rc;
    p->last_version = version;
    p->last_end = r->end;
    p->batches++;
    return 0;
bad:
    return kvq__error(KVQ_EDAMAGED, "log store: the record at %llu of the log is malformed",
                      (unsigned long long)r->lsn);
}

typedef struct flush_arg {
    void *table;
    int dead; /* this round writes the deletions (1) or the values (0) */
    int rc;
} flush_arg;

static void flush_one(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl,
                      int dead)
{
    flush_arg *f = arg;
    if (f->rc != 0 || dead != f->dead)
        return;
    f->rc = dead ? emb_sqlite_store.write_clear(f->table, k, kl)
                 : emb_sqlite_store.write_put(f->table, k, kl, v, vl);
}

/* Writes the pass to the table and commits it. Deletions before values: a key deleted and set
 * again within the pass is in both of the overlay's lists, and its value is the newer. */
static int pass_write(emb_store *s, apply_pass *p)
{
    int rc = 0;
    for (size_t at = 0; rc == 0 && at < p->ranges.len;) {
        const uint8_t *w = p->ranges.data + at;
        size_t bl = kvq__le32_get(w), el = kvq__le32_get(w + 4 + bl);
        const uint8_t *b = w + 4, *e = w + 8 + bl;
        if (kvq__bytes_cmp(b, bl, e, el) < 0)
            rc = emb_sqlite_store.write_clear_range(s->table, b, bl, e, el, NULL, NULL);
        at += 8 + bl + el;
    }
    flush_arg f = { s->table, 1, rc };
    kvq__vmap_each(p->ov, flush_one, &f);
    f.dead = 0;
    kvq__vmap_each(p->ov, flush_one, &f);
    rc = f.rc;
    if (rc == 0)
        rc = kvq__sqlite_meta_put(s->table, LS_META_LSN, (int64_t)p->last_end);
    if (rc == 0 && p->batches > 0)
        rc = emb_sqlite_store.log_prune(s->table, p->last_version);
    if (rc == 0)
        rc = emb_sqlite_store.write_commit(s->table, p->batches > 0 ? p->last_version : 0, NULL,
                                           0);
    else
        emb_sqlite_store.write_abort(s->table);
    return rc;
}

static void test_step(const char *step)
{
    if (kvq__ckpt_test_hook)
        kvq__ckpt_test_hook(step);
}

/* Copies the table's WAL into its file, so that the next pass writes the WAL from its
 * beginning again, in the room the file already holds (ckpt_write_mu held). A snapshot open
 * since before the last pass keeps the frames it may read, and a WAL that SQLite cannot start
 * again grows with every pass: under a steady stream of transactions one is nearly always
 * open, so the WAL outgrew the room kept for it on a full disk and the drain stopped. So a kept
 * WAL is tried again before the next pass's write and by the checkpoint thread soon after
 * (wal_kept): readers that begin once every frame is copied read the file alone,
 * and once those before them end, the WAL starts again. */
static void wal_checkpoint(emb_store *s)
{
    int complete = 1;
    if (kvq__sqlite_checkpoint(s->table, &complete) != 0) {
        kvq__error_clear();
        complete = 0;
    }
    __atomic_store_n(&s->wal_kept, !complete, __ATOMIC_RELEASE);
}

/* The checkpoint thread's retry of a kept WAL; never waits for another applier. */
static void wal_retry(emb_store *s)
{
    if (pthread_mutex_trylock(&s->ckpt_write_mu) != 0)
        return;
    if (__atomic_load_n(&s->wal_kept, __ATOMIC_ACQUIRE))
        wal_checkpoint(s);
    pthread_mutex_unlock(&s->ckpt_write_mu);
}

/* One applier pass, ckpt.lock held exclusively: the batches of the log older than the window
 * (all = 1: every batch, synced or not: a repair, a full disk, tests) into the table, which is
 * then synced; then the log it holds is released and the map drops it. *covered (may be NULL)
 * gets the log position the table holds up to. */
static int apply_locked(emb_store *s, int all, uint64_t *covered)
{
    pthread_mutex_lock(&s->apply_mu);
    int rc = kvq__ls_catch_up_locked(s);
    int64_t newest = s->applied_version;
    pthread_mutex_unlock(&s->apply_mu);
    if (rc != 0)
        return rc;
    apply_pass p = { 0 };
    p.ranges = (kvq_buf)KVQ_BUF_INIT;
    p.horizon = all ? INT64_MAX : kvq__ls_horizon(s, newest);
    p.limit = kvq__log_tail(s->log);
    /* Only what the log holds durably goes to the table, whose position must never pass the
     * log's after a power cut; a repair applies everything (the log's sync failed: the table,
     * synced, is what makes it durable). */
    if (!(all && kvq__log_sync_failed(s->log))) {
        rc = kvq__log_sync(s->log, p.limit, NULL);
        if (rc != 0)
            return rc;
    }
    if (__atomic_load_n(&s->wal_kept, __ATOMIC_ACQUIRE))
        wal_checkpoint(s);
    emb_store_head head;
    rc = emb_sqlite_store.write_begin(s->table, &head);
    int64_t lsn = 0;
    int found = 0;
    if (rc == 0)
        rc = kvq__sqlite_meta_get(s->table, LS_META_LSN, &lsn, &found);
    if (rc == 0 && !found)
        rc = kvq__error(KVQ_EDAMAGED, "the log store's table has no log position");
    if (rc == 0 && (p.ov = kvq__vmap_new(0)) == NULL)
        rc = kvq__error(KVQ_ENOMEM, "out of memory");
    if (rc != 0) {
        emb_sqlite_store.write_abort(s->table);
        kvq__vmap_free(p.ov);
        return rc;
    }
    p.tver = head.version;
    p.last_end = (uint64_t)lsn;
    if (p.last_end < kvq__log_first(s->log))
        p.last_end = kvq__log_first(s->log);
    uint64_t next;
    rc = kvq__log_read(s->log, p.last_end, pass_rec, &p, &next);
    if (rc == PASS_STOP)
        rc = 0;
    if (rc == 0 && (p.batches > 0 || p.last_end != (uint64_t)lsn)) {
        rc = pass_write(s, &p);
        if (rc == 0)
            test_step("apply.committed");
        int issued = 0;
        if (rc == 0)
            rc = emb_sqlite_store.sync(s->table, 0, &issued);
        if (rc == 0)
            test_step("apply.synced");
        /* The WAL back into the table's file, so that it does not grow (a full disk needs its
         * room); and the table's pages in use, for the reserve. */
        if (rc == 0) {
            wal_checkpoint(s);
            kvq__ls_table_live_update(s);
        }
    } else {
        emb_sqlite_store.write_abort(s->table);
    }
    kvq__vmap_free(p.ov);
    kvq_buf_dispose(&p.ranges);
    if (rc != 0)
        return rc;
    int64_t tv = p.batches > 0 ? p.last_version : p.tver;
    pthread_mutex_lock(&s->pin_mu);
    if (tv > s->table_known)
        s->table_known = tv;
    pthread_mutex_unlock(&s->pin_mu);
    if (covered)
        *covered = p.last_end;
    if (p.batches > 0 || p.last_end > s->ckpt_lsn) {
        s->ckpt_version = tv;
        __atomic_store_n(&s->ckpt_lsn, p.last_end, __ATOMIC_RELEASE);
        __atomic_add_fetch(&s->n_ckpts, 1, __ATOMIC_RELAXED);
        /* The log the table holds goes, except what a live handle has not applied. */
        rc = kvq__log_release(s->log, kvq__ls_slots_min(s, p.last_end));
        if (rc == 0)
            kvq__log_prepare_spare(s->log);
        test_step("apply.released");
    }
    kvq__ls_drop(s);
    return rc;
}

/* Runs an applier pass; wait: wait for another applier rather than leave it to it; all: apply
 * every batch, not only those older than the window. */
static int run_pass(emb_store *s, int wait, int all, uint64_t *covered)
{
    /* One applier per handle (the flock below does not exclude the threads of one process:
     * they share its open file), then one per database. */
    if (wait)
        pthread_mutex_lock(&s->ckpt_write_mu);
    else if (pthread_mutex_trylock(&s->ckpt_write_mu) != 0)
        return 0;
    int rc = 0;
    if (flock(s->ckpt_fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB) == 0) {
        rc = apply_locked(s, all, covered);
        if (rc == KVQ_ENOSPC && kvq__ls_reserve_size(s) > 0) {
            /* the room kept for it */
            kvq__error_clear();
            kvq__ls_reserve_release(s, 0);
            rc = apply_locked(s, all, covered);
        }
        flock(s->ckpt_fd, LOCK_UN);
    }
    pthread_mutex_unlock(&s->ckpt_write_mu);
    return rc;
}

/* Runs an applier pass; wait: wait for another applier rather than leave it to it (and apply
 * every batch, not only those older than the window). */
int kvq__ls_do_checkpoint(emb_store *s, int wait, uint64_t *covered)
{
    return run_pass(s, wait, wait, covered);
}

/* Free space beyond the table's pages in use that a compaction needs: the WAL's headers and
 * the pages VACUUM rewrites beside the copy (the schema, the free-list's). */
#define LS_COMPACT_SLACK (1u << 20)

int kvq__logstore_give_back(emb_store *s, uint64_t shortfall)
{
    if (s == NULL || s->read_only || shortfall == 0)
        return 0;
    if (kvq__ls_do_checkpoint(s, 1, NULL) != 0)
        kvq__error_clear(); /* the compaction below may still give room */
    pthread_mutex_lock(&s->ckpt_write_mu);
    int gave = 0;
    if (flock(s->ckpt_fd, LOCK_EX | LOCK_NB) == 0) {
        uint64_t free_bytes = 0, live = 0;
        uint64_t had = kvq__ls_reserve_size(s);
        struct statvfs v;
        uint64_t fs = statvfs(s->dir, &v) == 0 ? (uint64_t)v.f_bavail * (uint64_t)v.f_frsize : 0;
        /* The copy costs at most what it gives back, and fits in what the file system has
         * free (VACUUM writes the pages in use into the WAL before the file is cut: a copy
         * that ran out of room would leave a WAL that large, and ckpt.reserve is not for it);
         * after it there are no free pages, so it is not tried again until pops free more.
         * Then ckpt.reserve shrinks with the table. */
        if (kvq__sqlite_room(s->table, &free_bytes, &live) != 0) {
            kvq__error_clear();
        } else if (free_bytes > 0 && live <= free_bytes && fs >= live + LS_COMPACT_SLACK) {
            if (kvq__sqlite_compact(s->table) == 0)
                gave = 1;
            else
                kvq__error_clear(); /* no room for the copy yet, or a reader in the way */
        }
        if (!gave) {
            /* The pass above grew the WAL (about twice the log it applied, out of the
             * reserve on a full disk): its room back, or a full disk keeps it for good. */
            struct stat st;
            uint64_t wal =
                fstatat(s->dir_fd, "data.db-wal", &st, 0) == 0 ? (uint64_t)st.st_size : 0;
            if (wal > 0 && kvq__sqlite_wal_cut(s->table) != 0)
                kvq__error_clear();
            if (wal > 0 && fstatat(s->dir_fd, "data.db-wal", &st, 0) == 0 &&
                (uint64_t)st.st_size < wal)
                gave = 1;
        }
        kvq__ls_table_live_update(s);
        reserve_adjust(s);
        gave |= kvq__ls_reserve_size(s) < had;
        flock(s->ckpt_fd, LOCK_UN);
    }
    pthread_mutex_unlock(&s->ckpt_write_mu);
    return gave;
}

/* ---- memory pressure ---- */

/* The map bounds its memory as FoundationDB's ratekeeper bounds its storage servers' queues:
 * not by refusing commits, but by slowing them while the applier catches up. Past half the
 * limit (soft) the checkpoint thread is asked for a pass of every batch (reads at versions
 * older than the newest table version then get transaction_too_old), and each commit waits
 * until the map is back under soft, or at most a delay growing with the excess: nothing just
 * past soft, LS_DELAY_MAX_US at the limit. A commit that would still take the map past the
 * limit runs a pass itself (waiting for another process's applier if one is at work); the map
 * then holds only what open snapshots still read. */
#define LS_DELAY_MAX_US 100000

static uint64_t soft_limit(const emb_store *s)
{
    return s->limit / 2;
}

/* Wakes the commits waiting on the map (ckpt_mu not held). */
static void pressure_eased(emb_store *s)
{
    pthread_mutex_lock(&s->ckpt_mu);
    pthread_cond_broadcast(&s->pressure_cv);
    pthread_mutex_unlock(&s->ckpt_mu);
}

/* The checkpoint thread's pass under pressure: the table may have been brought up by another
 * process's applier; if not, every batch goes to it, unless another applier is at work. */
static void pressure_pass(emb_store *s)
{
    if (kvq__ls_table_refresh(s) != 0)
        kvq__error_clear();
    kvq__ls_drop(s);
    if (kvq__vmap_mem(s->map) > soft_limit(s) && run_pass(s, 0, 1, NULL) != 0)
        kvq__error_clear();
    pressure_eased(s);
}

void kvq__ls_throttle(emb_store *s, uint64_t add)
{
    uint64_t soft = soft_limit(s);
    uint64_t need = kvq__vmap_mem(s->map) + add;
    if (s->limit == 0 || need <= soft)
        return;
    int64_t start = kvq__mono_us();
    uint64_t span = s->limit - soft;
    int64_t delay = need - soft >= span
                        ? LS_DELAY_MAX_US
                        : (int64_t)((double)LS_DELAY_MAX_US * (double)(need - soft) / (double)span);
    pthread_mutex_lock(&s->ckpt_mu);
    if (s->ckpt_started && !s->ckpt_stop) {
        s->pressure_wanted = 1;
        pthread_cond_signal(&s->ckpt_cv);
        for (;;) {
            int64_t left = start + delay - kvq__mono_us();
            if (left <= 0 || kvq__vmap_mem(s->map) + add <= soft)
                break;
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_sec += (time_t)(left / 1000000);
            dl.tv_nsec += (long)(left % 1000000) * 1000L;
            if (dl.tv_nsec >= 1000000000L) {
                dl.tv_sec++;
                dl.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&s->pressure_cv, &s->ckpt_mu, &dl);
        }
    }
    pthread_mutex_unlock(&s->ckpt_mu);
    __atomic_add_fetch(&s->n_throttled, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->throttle_us, (uint64_t)(kvq__mono_us() - start), __ATOMIC_RELAXED);
    if (kvq__vmap_mem(s->map) + add <= s->limit)
        return;
    /* The applier did not keep up (held back, or another process's applier is slow): the
     * commit brings the table up to the newest batch itself. A batch larger than the limit
     * passes it for as long as the next pass takes. */
    __atomic_add_fetch(&s->n_forced, 1, __ATOMIC_RELAXED);
    if (kvq__ls_do_checkpoint(s, 1, NULL) != 0)
        kvq__error_clear();
    kvq__ls_drop(s);
}

void *kvq__ls_ckpt_main(void *arg)
{
    emb_store *s = arg;
    int64_t tick_at = kvq__mono_us() + (int64_t)s->apply_ms * 1000, retry_us = 1000;
    pthread_mutex_lock(&s->ckpt_mu);
    while (!s->ckpt_stop) {
        if (s->pressure_wanted) {
            s->pressure_wanted = 0;
            pthread_mutex_unlock(&s->ckpt_mu);
            pressure_pass(s);
            pthread_mutex_lock(&s->ckpt_mu);
            continue;
        }
        if (!s->ckpt_wanted && !s->reserve_wanted) {
            /* The periodic work every apply_ms; a kept WAL is tried again after a
             * millisecond, then less and less often, until every frame is copied. */
            int kept = __atomic_load_n(&s->wal_kept, __ATOMIC_ACQUIRE);
            if (!kept)
                retry_us = 1000;
            int64_t wait_us = tick_at - kvq__mono_us();
            if (kept && wait_us > retry_us)
                wait_us = retry_us;
            if (wait_us < 0)
                wait_us = 0;
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_sec += (time_t)(wait_us / 1000000);
            dl.tv_nsec += (long)(wait_us % 1000000) * 1000L;
            if (dl.tv_nsec >= 1000000000L) {
                dl.tv_sec++;
                dl.tv_nsec -= 1000000000L;
            }
            if (pthread_cond_timedwait(&s->ckpt_cv, &s->ckpt_mu, &dl) != ETIMEDOUT)
                continue;
            if (kept) {
                pthread_mutex_unlock(&s->ckpt_mu);
                wal_retry(s);
                pthread_mutex_lock(&s->ckpt_mu);
                if (retry_us < 64000)
                    retry_us *= 2;
            }
            if (kvq__mono_us() >= tick_at) {
                tick_at = kvq__mono_us() + (int64_t)s->apply_ms * 1000;
                /* A handle that is open but idle still applies the log now and then, so that
                 * it does not keep the log from being recycled (readers.shm). */
                pthread_mutex_unlock(&s->ckpt_mu);
                if (kvq__log_tail(s->log) - __atomic_load_n(&s->applied_lsn, __ATOMIC_ACQUIRE) >
                        (4u << 20) &&
                    kvq__ls_catch_up(s) != 0)
                    kvq__error_clear();
                /* The applier's pass, once a second, when batches older than the window are
                 * not in the table yet (another process's applier may have applied them). */
                if (!s->read_only) {
                    if (kvq__ls_table_refresh(s) != 0)
                        kvq__error_clear();
                    pthread_mutex_lock(&s->pin_mu);
                    int64_t tk = s->table_known;
                    pthread_mutex_unlock(&s->pin_mu);
                    pthread_mutex_lock(&s->apply_mu);
                    int64_t newest = s->applied_version;
                    pthread_mutex_unlock(&s->apply_mu);
                    if (kvq__ls_horizon(s, newest) > tk && kvq__ls_do_checkpoint(s, 0, NULL) != 0)
                        kvq__error_clear();
                    kvq__ls_drop(s);
                    /* past half the limit without a commit to say so (another process's
                     * batches, applied by reads) */
                    if (s->limit && kvq__vmap_mem(s->map) > soft_limit(s))
                        pressure_pass(s);
                }
                pthread_mutex_lock(&s->ckpt_mu);
            }
            continue;
        }
        int spare = s->spare_wanted, reserve = s->reserve_wanted;
        int ckpt = s->ckpt_wanted > 1 || (!spare && !reserve);
        s->ckpt_wanted = 0;
        s->spare_wanted = 0;
        s->reserve_wanted = 0;
        pthread_mutex_unlock(&s->ckpt_mu);
        if (reserve)
            reserve_adjust(s);
        /* Errors are reported when space runs out; the next trigger tries again. */
        int src = spare ? kvq__log_prepare_spare(s->log) : 0;
        /* No room for a spare: a checkpoint may free whole segments of the log (it is
         * written only if newer than the last), after which the spare is tried again; then
         * the segment the reserve holds beyond the next checkpoint. */
        if (src == KVQ_ENOSPC)
            ckpt = 1;
        if (ckpt && kvq__ls_do_checkpoint(s, 0, NULL) != 0)
            kvq__error_clear();
        if (ckpt)
            pressure_eased(s);
        if (src == KVQ_ENOSPC) {
            kvq__error_clear();
            src = kvq__log_prepare_spare(s->log);
            if (src == KVQ_ENOSPC && kvq__ls_reserve_give_segment(s)) {
                kvq__error_clear();
                src = kvq__log_prepare_spare(s->log);
            }
        }
        if (src != 0)
            kvq__error_clear();
        if (ckpt || src == KVQ_ENOSPC)
            reserve_adjust(s); /* the data may have shrunk, or a checkpoint used it */
        pthread_mutex_lock(&s->ckpt_mu);
    }
    pthread_mutex_unlock(&s->ckpt_mu);
    return NULL;
}

static int needs_checkpoint(emb_store *s)
{
    uint64_t since = kvq__log_tail(s->log) - __atomic_load_n(&s->ckpt_lsn, __ATOMIC_ACQUIRE);
    return since >= s->ckpt_min;
}

/* Tells the checkpoint thread what to do: a checkpoint (2), a spare segment (spare). */
static void wake_thread(emb_store *s, int ckpt, int spare)
{
    pthread_mutex_lock(&s->ckpt_mu);
    if (ckpt)
        s->ckpt_wanted = 2;
    else if (!s->ckpt_wanted)
        s->ckpt_wanted = 1;
    if (spare)
        s->spare_wanted = 1;
    pthread_cond_signal(&s->ckpt_cv);
    pthread_mutex_unlock(&s->ckpt_mu);
}

/* Tells the checkpoint thread to adjust the reserve. */
void kvq__ls_wake_reserve(emb_store *s)
{
    if (!s->ckpt_started)
        return;
    pthread_mutex_lock(&s->ckpt_mu);
    s->reserve_wanted = 1;
    pthread_cond_signal(&s->ckpt_cv);
    pthread_mutex_unlock(&s->ckpt_mu);
}

int kvq__ls_checkpoint(emb_store *s)
{
    if (s->read_only || !s->ckpt_started)
        return 0;
    int spare = kvq__log_spare_wanted(s->log), ckpt = needs_checkpoint(s);
    /* Half way through a segment, make sure a spare is ready for the next one, so that no
     * committer zero-fills a segment. */
    uint64_t tail = kvq__log_tail(s->log), sb = kvq__log_segment_bytes(s->log);
    if (tail / sb != s->spare_seg && tail % sb > sb / 2) {
        s->spare_seg = tail / sb;
        spare = 1;
    }
    if (spare || ckpt)
        wake_thread(s, ckpt, spare);
    return 0;
}

int kvq__logstore_checkpoint_now(emb_store *s)
{
    if (s == NULL || s->read_only)
        return kvq__error(KVQ_EINVAL, "log store: no writable store");
    return kvq__ls_do_checkpoint(s, 1, NULL);
}
