/* The log store's writes (store_log_internal.h): the write in progress (an overlay and the
 * record being built), commit (one record of the log, applied here), the shared sync, the
 * repair after a failed sync, and room on a full disk (space_short). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "engine/embedded/files.h"
#include "engine/embedded/logstore/store_log.h"
#include "engine/embedded/logstore/store_log_internal.h"
#include "kvq/db.h"
#include "util/bytes.h"

/* Room on a full disk (see space_short): how often the free space is looked at, and the slack
 * a transaction that moves stored keys may write beyond what it frees (the engine's
 * DRAIN_MOVE_SLACK, reserve.c: the store must accept whatever drain mode accepts). */
#define LS_SPACE_RECHECK_US 50000
#define LS_DRAIN_MOVE_SLACK 512
/* A give-back on a short disk that gave nothing is not tried again for this long. */
#define LS_GIVE_BACK_RETRY_US 1000000

/* ---- writing ---- */

static void write_end(emb_store *s)
{
    kvq__ls_snap_close(s->wview);
    s->wview = NULL;
    kvq__vmap_free(s->ov);
    s->ov = NULL;
    s->rec.len = 0;
    s->add_cost = 0;
    s->writing = 0;
}

/* Does the table hold free pages, as of its applier's last pass, for the log not applied yet
 * (and at least a segment's worth): what the file holds beyond its pages in use. A pass then
 * writes the log into them, and the file does not grow. */
static int table_spare(emb_store *s, uint64_t seg)
{
    uint64_t live = __atomic_load_n(&s->table_live, __ATOMIC_ACQUIRE);
    uint64_t tail = kvq__log_tail(s->log), at = __atomic_load_n(&s->ckpt_lsn, __ATOMIC_ACQUIRE);
    uint64_t log = tail > at ? tail - at : 0;
    struct stat st;
    if (live == UINT64_MAX || fstatat(s->dir_fd, "data.db", &st, 0) != 0 || st.st_size < 0)
        return 0;
    uint64_t file = (uint64_t)st.st_size, free_bytes = file > live ? file - live : 0;
    return free_bytes >= seg && free_bytes >= log;
}

static int space_short(emb_store *s);

/* After one of space_short's steps that make room (taken with space_forced set, so that the
 * look below does not take it again): the room looked at anew. */
static int space_recheck(emb_store *s)
{
    s->space_at = 0;
    int short_now = space_short(s);
    s->space_forced = 0;
    return short_now;
}

/* Is the disk short of the room the log store needs to go on: room for a checkpoint of its
 * live data (written whole before the log it replaces is released: the only way the log's disk
 * is ever given back) and for a spare segment when none is ready? Segments are preallocated, so
 * a full disk is never met inside one; without this room, it would be met only when the next
 * segment or checkpoint must be made, with nothing left to drain the queue with. The room is
 * kept in ckpt.reserve (grown off the commit path, so that another file cannot take it), or is
 * free. While it is short, a batch that would grow the data is refused with KVQ_ENOSPC (the
 * engine then gives up its reserve and enters drain mode, reserve.c); pops, and anything that
 * frees what it writes, go on, and the checkpoint they need fits in the reserve. Looked at
 * every LS_SPACE_RECHECK_US, or sooner when the data grew by half the headroom last seen.
 * Commit lock held. */
static int space_short(emb_store *s)
{
    uint64_t ckpt = kvq__ls_ckpt_estimate(s);
    int64_t now = kvq__mono_us();
    if (s->space_at != 0 && now - s->space_at < LS_SPACE_RECHECK_US && ckpt <= s->space_live_ok)
        return s->space_short;
    uint64_t seg = kvq__log_segment_bytes(s->log);
    uint64_t reserve = kvq__ls_reserve_size(s);
    s->space_at = now;
    /* the reserve off its target: the checkpoint thread adjusts it */
    if (s->reserve_fd >= 0 && (reserve < ckpt + seg || reserve > 2 * (ckpt + seg) + seg))
        kvq__ls_wake_reserve(s);
    struct statvfs v;
    if (statvfs(s->dir, &v) != 0) {
        s->space_short = 0; /* unknown: refuse nothing */
        s->space_live_ok = ckpt;
        return 0;
    }
    uint64_t fs = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize, avail = fs + reserve;
    uint64_t need = ckpt + (kvq__log_spare_ready(s->log) ? 0 : seg);
    s->space_avail = avail;
    s->space_need = need;
    /* Less than a segment free on the file system is a full disk too, whatever the reserve
     * holds: the reserve is for draining, as the engine's is (pushes are refused at once on a
     * disk another file filled, as on the SQLite storage). */
    s->space_short = avail < need || fs < seg;
    if (s->space_short && avail < need && ckpt > (2u << 20) && !s->space_forced) {
        /* What the table needs to take the log is what is short: the table takes it now (a
         * pass of every batch, which the reserve has room for), and the log it held goes. */
        s->space_forced = 1;
        if (kvq__ls_do_checkpoint(s, 1, NULL) != 0)
            kvq__error_clear();
        return space_recheck(s);
    }
    if (s->space_short && !s->space_forced && table_spare(s, seg) &&
        (s->give_back_at == 0 || now - s->give_back_at >= LS_GIVE_BACK_RETRY_US)) {
        /* Short, and the table holds free pages (a database drained on a disk that was once
         * full): counted nowhere and never freed, they would refuse the pushes of a drained
         * database for good. The table takes the log (a pass of every batch: the last pops'
         * deletions reach it, and what it applies goes into its free pages, the file does not
         * grow), gives its free pages back to the file system when they outweigh its pages in
         * use, and ckpt.reserve shrinks with it (kvq__logstore_give_back). Tried again after
         * LS_GIVE_BACK_RETRY_US when it gave nothing. */
        s->space_forced = 1;
        uint64_t lack = avail < need ? need - avail : 0;
        if (fs < seg && seg - fs > lack)
            lack = seg - fs;
        int gave = kvq__logstore_give_back(s, lack > 0 ? lack : 1);
        s->give_back_at = gave ? 0 : now;
        return space_recheck(s);
    }
    uint64_t room = avail > need ? avail - need : 0;
    if (fs - (fs < seg ? fs : seg) < room)
        room = fs - (fs < seg ? fs : seg);
    s->space_live_ok = ckpt + room / 2;
    return s->space_short;
}

int kvq__ls_write_begin(emb_store *s, emb_store_head *head)
{
    if (s->read_only)
        return kvq__error(KVQ_EPERM, "the database is open read-only");
    if (s->writing)
        write_end(s);
    int rc = kvq__ls_catch_up(s);
    if (rc != 0)
        return rc;
    /* Before the write's view is open: a give-back (space_short) compacts the table. */
    int counting = space_short(s);
    /* The write reads the table and the map at the newest version (the commit lock keeps it
     * the newest until the write ends). */
    emb_snap_info wi;
    rc = kvq__ls_snap_open(s, 0, &s->wview, &wi);
    if (rc != 0)
        return rc;
    s->ov = kvq__vmap_new(0);
    if (s->ov == NULL || kvq_buf_grow(&s->rec, LS_REC_HDR) != 0) {
        write_end(s);
        return kvq__error(KVQ_ENOMEM, "out of memory");
    }
    s->rec.len = LS_REC_HDR;
    s->writing = 1;
    s->w_grow = s->w_freed = s->w_moves = 0;
    s->w_counting = counting;
    pthread_mutex_lock(&s->apply_mu);
    head->version = s->applied_version;
    head->log_floor = s->cl_floor;
    pthread_mutex_unlock(&s->apply_mu);
    return 0;
}

static int
rec_op(emb_store *s, uint8_t op, const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    int two = op != OP_CLEAR;
    if (kvq_buf_grow(&s->rec, 9 + al + bl) != 0)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    uint8_t *p = s->rec.data + s->rec.len;
    p[0] = op;
    kvq__le32_put(p + 1, (uint32_t)al);
    p += 5;
    if (two) {
        kvq__le32_put(p, (uint32_t)bl);
        p += 4;
    }
    if (al)
        memcpy(p, a, al);
    if (bl)
        memcpy(p + al, b, bl);
    s->rec.len += 5 + (two ? 4u : 0u) + al + bl;
    return 0;
}

/* The value of key as the write sees it: 1 present, 0 absent. */
static int write_view(emb_store *s, const uint8_t *key, size_t kl, kvq_bytes *v)
{
    int p = kvq__vmap_probe(s->ov, 1, key, kl, v);
    if (p != 0)
        return p > 0;
    int got = 0;
    if (kvq__ls_get(s->wview, key, kl, v, &got) != 0)
        return -1;
    return got;
}

int kvq__ls_write_get(
    emb_store *s, const uint8_t *key, size_t key_len, kvq_bytes *value, int *present)
{
    if (!s->writing)
        return kvq__error(KVQ_EINVAL, "log store: no write in progress");
    int got = write_view(s, key, key_len, value);
    if (got < 0)
        return kvq_last_error_code();
    *present = got;
    if (!*present) {
        value->data = NULL;
        value->len = 0;
    }
    return 0;
}

int kvq__ls_write_put(
    emb_store *s, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len)
{
    if (!s->writing)
        return kvq__error(KVQ_EINVAL, "log store: no write in progress");
    if (s->w_counting) {
        kvq_bytes old;
        if (write_view(s, key, key_len, &old) > 0)
            s->w_grow += (int64_t)value_len - (int64_t)old.len;
        else
            s->w_grow += (int64_t)(key_len + value_len);
    }
    int rc = kvq__vmap_set(s->ov, 1, key, key_len, value, value_len);
    if (rc == 0)
        rc = rec_op(s, OP_SET, key, key_len, value, value_len);
    if (rc == 0)
        s->add_cost += kvq__vmap_cost(key_len, value_len);
    return rc;
}

int kvq__ls_write_clear(emb_store *s, const uint8_t *key, size_t key_len)
{
    if (!s->writing)
        return kvq__error(KVQ_EINVAL, "log store: no write in progress");
    if (s->w_counting) {
        kvq_bytes old;
        if (write_view(s, key, key_len, &old) > 0) {
            s->w_freed += (int64_t)(key_len + old.len);
            s->w_moves++;
        }
    }
    int rc = kvq__vmap_tombstone(s->ov, 1, key, key_len);
    if (rc == 0)
        rc = rec_op(s, OP_CLEAR, key, key_len, NULL, 0);
    return rc;
}

/* The keys present in [b, e) as the write sees them, each passed to fn with its value; fn
 * returns nonzero to stop. */
typedef int (*view_fn)(void *arg, const uint8_t *k, size_t kl, size_t vl);

static int each_in_view(
    emb_store *s, const uint8_t *b, size_t bl, const uint8_t *e, size_t el, view_fn fn, void *arg)
{
    kvq__vmap_cursor c;
    kvq_bytes k, v, ov;
    int stop = 0;
    struct emb_cursor *tc = NULL;
    int rc = kvq__ls_cursor_open(s->wview, b, bl, e, el, 0, &tc);
    for (int has = 1; rc == 0;) {
        rc = kvq__ls_cursor_next(tc, &k, &v, &has);
        if (rc != 0 || !has)
            break;
        int p = kvq__vmap_probe(s->ov, 1, k.data, k.len, &ov);
        if (p == 0)
            stop = fn(arg, k.data, k.len, v.len);
        if (stop)
            break;
    }
    kvq__ls_cursor_close(tc);
    if (rc != 0)
        return -1;
    if (stop)
        return stop;
    /* the write's own values */
    kvq__vmap_cursor_init(&c, s->ov, 1, b, bl, e, el, 0);
    while (kvq__vmap_cursor_next(&c, &k, &v)) {
        if ((stop = fn(arg, k.data, k.len, v.len)) != 0)
            return stop;
    }
    return 0;
}

typedef struct keylist {
    kvq_buf b;
    int err;
    int64_t bytes, keys; /* keys and values collected */
} keylist;

static int collect_key(void *arg, const uint8_t *k, size_t kl, size_t vl)
{
    keylist *l = arg;
    l->bytes += (int64_t)(kl + vl);
    l->keys++;
    if (kvq_buf_grow(&l->b, 4 + kl) != 0) {
        l->err = KVQ_ENOMEM;
        return 1;
    }
    kvq__le32_put(l->b.data + l->b.len, (uint32_t)kl);
    memcpy(l->b.data + l->b.len + 4, k, kl);
    l->b.len += 4 + kl;
    return 0;
}

int kvq__ls_write_clear_range(emb_store *s,
                              const uint8_t *begin,
                              size_t begin_len,
                              const uint8_t *end,
                              size_t end_len,
                              emb_key_fn deleted,
                              void *arg)
{
    if (!s->writing)
        return kvq__error(KVQ_EINVAL, "log store: no write in progress");
    if (kvq__bytes_cmp(begin, begin_len, end, end_len) >= 0)
        return 0;
    keylist l = { KVQ_BUF_INIT, 0, 0, 0 };
    int rc = each_in_view(s, begin, begin_len, end, end_len, collect_key, &l) < 0
                 ? kvq_last_error_code()
                 : l.err ? kvq__error(KVQ_ENOMEM, "out of memory")
                         : 0;
    if (s->w_counting) {
        s->w_freed += l.bytes;
        /* one key cleared as a range [k, k + 0x00): a move, as the engine counts it */
        if (l.keys > 0 && end_len == begin_len + 1 && end[begin_len] == 0 &&
            (begin_len == 0 || memcmp(begin, end, begin_len) == 0))
            s->w_moves++;
    }
    for (size_t p = 0; rc == 0 && p < l.b.len;) {
        size_t kl = kvq__le32_get(l.b.data + p);
        const uint8_t *k = l.b.data + p + 4;
        rc = kvq__vmap_tombstone(s->ov, 1, k, kl);
        if (rc == 0 && deleted)
            deleted(arg, k, kl);
        p += 4 + kl;
    }
    kvq_buf_dispose(&l.b);
    if (rc == 0)
        rc = rec_op(s, OP_CLEAR_RANGE, begin, begin_len, end, end_len);
    return rc;
}

typedef struct sum_arg {
    int64_t sum, stop;
} sum_arg;

static int sum_key(void *arg, const uint8_t *k, size_t kl, size_t vl)
{
    (void)k;
    sum_arg *a = arg;
    a->sum += (int64_t)(kl + vl);
    return a->sum > a->stop;
}

int kvq__ls_write_range_bytes(emb_store *s,
                              const uint8_t *begin,
                              size_t begin_len,
                              const uint8_t *end,
                              size_t end_len,
                              int64_t stop,
                              int64_t *bytes)
{
    if (!s->writing)
        return kvq__error(KVQ_EINVAL, "log store: no write in progress");
    sum_arg a = { 0, stop };
    if (kvq__bytes_cmp(begin, begin_len, end, end_len) < 0 &&
        each_in_view(s, begin, begin_len, end, end_len, sum_key, &a) < 0)
        return kvq_last_error_code();
    *bytes = a.sum;
    return 0;
}

int kvq__ls_log_check(emb_store *s, int64_t after, const emb_ranges *reads, int *hit)
{
    *hit = 0;
    int rc = 0;
    pthread_mutex_lock(&s->apply_mu);
    /* entries are in version order: walk back from the newest */
    for (size_t i = s->cl_len; i > 0 && rc == 0 && !*hit; i--) {
        cl_entry *c = &s->cl[(s->cl_head + i - 1) % s->cl_cap];
        if (c->version <= after)
            break;
        if (c->n > 0)
            rc = emb_ranges_packed_intersects(reads, c->packed, c->n, hit);
    }
    pthread_mutex_unlock(&s->apply_mu);
    return rc;
}

int kvq__ls_log_prune(emb_store *s, int64_t before)
{
    pthread_mutex_lock(&s->apply_mu);
    kvq__ls_cl_prune(s, before);
    pthread_mutex_unlock(&s->apply_mu);
    return 0;
}

/* KVQ_ECOMMIT_UNKNOWN_RESULT with the message of the failure that caused it (copied first:
 * the message buffer is the one kvq__error writes). */
static int unknown_result(void)
{
    char why[256];
    snprintf(why, sizeof why, "%s", kvq_last_error());
    return kvq__error(KVQ_ECOMMIT_UNKNOWN_RESULT, "log store: %s", why);
}

/* After a failed sync (of any process), the log takes no record until a repair: a checkpoint
 * of everything applied, written and synced whole, covering the log's tail. */
static int repair_log(emb_store *s)
{
    uint64_t covered = 0;
    int rc = kvq__ls_do_checkpoint(s, 1, &covered);
    /* The checkpoint may be one an earlier attempt renamed without syncing the directory
     * (that sync failed): the name must be durable before the log is taken as repaired. */
    if (rc == 0 && fsync(s->dir_fd) != 0)
        rc = emb_errno_error(errno, "cannot sync", s->dir);
    if (rc == 0)
        rc = kvq__log_repaired(s->log, covered);
    return rc;
}

int kvq__ls_write_commit(emb_store *s, int64_t version, const uint8_t *packed, size_t n)
{
    if (!s->writing)
        return kvq__error(KVQ_EINVAL, "log store: no write in progress");
    if (version == 0) {
        write_end(s);
        return 0;
    }
    /* The record is built: the write's view is not read again. */
    kvq__ls_snap_close(s->wview);
    s->wview = NULL;
    int rc = 0;
    if (s->w_counting && s->w_grow > s->w_freed + s->w_moves * LS_DRAIN_MOVE_SLACK) {
        rc = kvq__error(KVQ_ENOSPC,
                        "the disk is full: the log store keeps room for a checkpoint of its "
                        "data and a spare segment (%llu bytes; %llu free or kept), so only "
                        "transactions that free more than they write are accepted until "
                        "space is freed",
                        (unsigned long long)s->space_need, (unsigned long long)s->space_avail);
        goto out;
    }
    if (version <= s->applied_version) {
        rc = kvq__error(KVQ_EINVAL, "log store: version %lld is not after %lld", (long long)version,
                        (long long)s->applied_version);
        goto out;
    }
    /* The map past half its limit: the commit is slowed, the more the nearer the limit, while
     * the applier brings the table up to the newest batch; at the limit it applies itself.
     * Never refused for memory (kvq__ls_throttle). */
    if (s->limit && s->add_cost > 0)
        kvq__ls_throttle(s, s->add_cost);
    if (kvq_buf_grow(&s->rec, n) != 0) {
        rc = kvq__error(KVQ_ENOMEM, "out of memory");
        goto out;
    }
    uint8_t *h = s->rec.data;
    uint32_t ops_len = (uint32_t)(s->rec.len - LS_REC_HDR);
    memset(h, 0, LS_REC_HDR);
    h[0] = LS_REC_FORMAT;
    h[1] = 1;
    kvq__le32_put(h + 4, ops_len);
    kvq__le64_put(h + 8, (uint64_t)version);
    kvq__le32_put(h + 16, (uint32_t)n);
    if (n)
        memcpy(s->rec.data + s->rec.len, packed, n);
    s->rec.len += n;
    if (kvq__log_sync_failed(s->log) && (rc = repair_log(s)) != 0) {
        /* Nothing of this batch was written, but it is reported as the sync failure it
         * follows is, and as the SQLite storage reports a failed repair: of unknown outcome
         * (always true; the caller's retry decides). */
        char why[256];
        snprintf(why, sizeof why, "%s", kvq_last_error());
        rc = kvq__error(KVQ_ECOMMIT_UNKNOWN_RESULT,
                        "log store: a sync of the log failed, and so did its repair (a "
                        "checkpoint): %s",
                        why);
        goto out;
    }
    pthread_mutex_lock(&s->apply_mu);
    rc = kvq__ls_catch_up_locked(s);
    uint64_t lsn = 0, end = 0;
    if (rc == 0)
        rc = kvq__log_lock(s->log);
    if (rc == 0) {
        rc = kvq__log_append_locked(s->log, LS_REC_COMMIT, s->rec.data, s->rec.len, &lsn, &end);
        kvq__log_unlock(s->log);
        /* No room for the next segment. Nothing was written yet, and no other write can
         * start (the engine's commit lock is held): make room and write the batch. First the
         * segment the reserve keeps beyond the next checkpoint; then a checkpoint of the data
         * (which the reserve has room for), releasing the log before it, whose segments become
         * the spare; last, whatever the reserve still holds. */
        for (int step = 0; step < 3 && rc == KVQ_ENOSPC && !kvq__log_append_wrote(s->log); step++) {
            char why[256];
            snprintf(why, sizeof why, "%s", kvq_last_error());
            int made = 0;
            if (step == 0) {
                made = kvq__ls_reserve_give_segment(s);
            } else if (step == 1) {
                pthread_mutex_unlock(&s->apply_mu);
                uint64_t covered = 0;
                made = kvq__ls_do_checkpoint(s, 1, &covered) == 0;
                pthread_mutex_lock(&s->apply_mu);
                if (!made)
                    snprintf(why, sizeof why, "%s", kvq_last_error());
            } else if (kvq__ls_reserve_size(s) > 0) {
                kvq__ls_reserve_release(s, 0);
                made = 1;
            }
            if (!made) {
                rc = kvq__error(KVQ_ENOSPC,
                                "the disk is full: no room for the log store's "
                                "next segment (%s)",
                                why);
                continue;
            }
            kvq__error_clear();
            if ((rc = kvq__ls_catch_up_locked(s)) == 0 && (rc = kvq__log_lock(s->log)) == 0) {
                rc = kvq__log_append_locked(s->log, LS_REC_COMMIT, s->rec.data, s->rec.len, &lsn,
                                            &end);
                kvq__log_unlock(s->log);
            }
        }
        if (rc == KVQ_EIO && kvq__log_append_wrote(s->log))
            /* the bytes may be on disk whole: a recovery could find the batch */
            rc = unknown_result();
    }
    if (rc == 0) {
        kvq__log_rec r = { lsn, end, LS_REC_COMMIT, s->rec.data, s->rec.len };
        rc = kvq__ls_apply_record(s, &r);
        if (rc != 0)
            /* written, not applied here: another handle (or the next open) applies it */
            rc = unknown_result();
    }
    pthread_mutex_unlock(&s->apply_mu);
    if (rc == 0) {
        uint64_t mem = kvq__vmap_mem(s->map);
        uint64_t peak = __atomic_load_n(&s->mem_peak, __ATOMIC_RELAXED);
        while (mem > peak && !__atomic_compare_exchange_n(&s->mem_peak, &peak, mem, 0,
                                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
    }
    /* The checkpoint thread is told when the log has grown enough (the engine does not call
     * the checkpoint operation yet); it never runs on the committer's thread. */
    if (rc == 0)
        kvq__ls_checkpoint(s);
out:
    write_end(s);
    return rc;
}

void kvq__ls_write_abort(emb_store *s)
{
    if (s && s->writing)
        write_end(s);
}

int kvq__ls_sync(emb_store *s, int repair, int *issued)
{
    *issued = 0;
    if (s->read_only)
        return 0;
    /* The engine asks for a repair after a sync it saw fail; a failure another handle saw
     * (whose process may have died before it could tell the engine) is repaired the same way. */
    if (repair || kvq__log_sync_failed(s->log)) {
        /* A sync failed: the kernel may have dropped pages of the log, which a later sync
         * cannot vouch for. Everything is in memory: a checkpoint of it, written and synced
         * whole, makes the log before it unneeded (the SQLite storage's checkpoint of its WAL
         * plays the same part). */
        int rc = repair_log(s);
        if (rc != 0)
            return rc;
    }
    return kvq__log_sync(s->log, kvq__log_tail(s->log), issued);
}
