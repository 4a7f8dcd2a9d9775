/* The log store: the embedded engine's second storage (store.h), shaped like FoundationDB's
 * transaction logs and memory storage engine. A batch is one record of the log (log.h): its
 * version, its mutations and its write-conflict ranges, written with one pwrite by write_commit
 * and made durable by the shared sync. Reads come from memory: each handle keeps the data in a
 * versioned map (vmap.h), brought up to date from the log's new records (written by any
 * process) before it serves a snapshot or starts a write, and keeping the last seconds of
 * versions so that a snapshot can be taken at any version of the window (EMB_STORE_MVCC).
 * Checkpoints (ckpt.h), written by a thread off the commit path, let the log be recycled.
 *
 * Files, in <database>/logstore/: the log's (log-*.seg, spare-*.seg, log.shm, log.lock,
 * log.init), the newest checkpoint ckpt-*.kvq, ckpt.lock (one checkpointer at a time; held
 * shared while a handle loads a checkpoint) and readers.shm (the log position each open
 * writable handle has applied, so that the log is not recycled under a handle that still needs
 * it). Record format and numbers: docs/logstore.md. */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "engine/embedded/files.h"
#include "engine/embedded/logstore/ckpt.h"
#include "engine/embedded/logstore/log.h"
#include "engine/embedded/logstore/store_log.h"
#include "engine/embedded/logstore/vmap.h"
#include "engine/embedded/store.h"
#include "kvq/db.h"
#include "util/bytes.h"

#define LS_REC_COMMIT (KVQ__LOG_REC_USER)
#define LS_REC_FORMAT 1
#define LS_REC_HDR    24u
/* Versions kept behind the newest for reads at an older version: FoundationDB's 5 seconds (a
 * million versions a second), with a margin. */
#define LS_WINDOW 6000000
#define LS_SLOTS  128
/* A checkpoint is written once the log since the last one is larger than this and than the
 * live data (so the log stays within about twice the data, and recovery reads as much). */
#define LS_CKPT_MIN_BYTES (64ull << 20)
/* Room on a full disk (see space_short): how often the free space is looked at, and the slack
 * a transaction that moves stored keys may write beyond what it frees (the engine's
 * DRAIN_MOVE_SLACK, reserve.c: the store must accept whatever drain mode accepts). */
#define LS_SPACE_RECHECK_US 50000
#define LS_DRAIN_MOVE_SLACK 512

enum { OP_SET = 1, OP_CLEAR = 2, OP_CLEAR_RANGE = 3 };

typedef struct cl_entry {
    int64_t version;
    uint8_t *packed;
    size_t n;
} cl_entry;

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

    /* The write in progress. */
    int writing;
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
    int space_short;

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
};

struct emb_snap {
    emb_store *s;
    int64_t version;
};

struct emb_cursor {
    emb_snap *snap;
    kvq__vmap_cursor c;
    uint8_t *b, *e;
};

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0')
        return dflt;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    return end != v ? (uint64_t)x : dflt;
}

/* The default memory limit: a quarter of the machine's memory. */
static uint64_t default_limit(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    uint64_t ram = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : (4ull << 30);
    return ram / 4;
}

/* ---- records ---- */

/* Record payload (LS_REC_COMMIT):
 *   0 u8 format (1), u8 kind (1: a batch), u16 0, u32 length of the mutations
 *   8 i64 version
 *  16 u32 length of the packed write-conflict ranges, u32 0
 *  24 mutations: u8 op, u32 a length, then for SET and CLEAR_RANGE u32 b length; a; b
 *     then the packed ranges (ranges.h) */

static int bad_record(uint64_t lsn)
{
    return kvq__error(KVQ_EDAMAGED, "log store: the record at %llu of the log is malformed",
                      (unsigned long long)lsn);
}

static void cl_push(emb_store *s, int64_t version, const uint8_t *p, size_t n)
{
    if (s->cl_len == s->cl_cap) {
        size_t cap = s->cl_cap ? s->cl_cap * 2 : 1024;
        cl_entry *v = kvq__malloc(cap * sizeof *v);
        if (v == NULL)
            goto lost;
        for (size_t i = 0; i < s->cl_len; i++)
            v[i] = s->cl[(s->cl_head + i) % s->cl_cap];
        kvq__free(s->cl);
        s->cl = v;
        s->cl_cap = cap;
        s->cl_head = 0;
    }
    uint8_t *copy = NULL;
    if (n > 0 && (copy = kvq__memdup(p, n)) == NULL)
        goto lost;
    s->cl[(s->cl_head + s->cl_len) % s->cl_cap] = (cl_entry){ version, copy, n };
    s->cl_len++;
    __atomic_add_fetch(&s->cl_bytes, n + 16, __ATOMIC_RELAXED);
    return;
lost:
    /* Out of memory for the conflict log: forget all of it, so that older transactions get
     * transaction_too_old rather than a commit that misses a conflict. */
    while (s->cl_len > 0) {
        kvq__free(s->cl[s->cl_head].packed);
        s->cl_head = (s->cl_head + 1) % s->cl_cap;
        s->cl_len--;
    }
    s->cl_bytes = 0;
    s->cl_floor = version;
}

static void cl_prune(emb_store *s, int64_t before)
{
    while (s->cl_len > 1) {
        cl_entry *c = &s->cl[s->cl_head];
        if (c->version >= before)
            break;
        s->cl_floor = c->version;
        __atomic_sub_fetch(&s->cl_bytes, c->n + 16, __ATOMIC_RELAXED);
        kvq__free(c->packed);
        s->cl_head = (s->cl_head + 1) % s->cl_cap;
        s->cl_len--;
    }
}

static int64_t min_pin(emb_store *s, int64_t dflt)
{
    int64_t m = dflt;
    for (size_t i = 0; i < s->n_pins; i++)
        if (s->pins[i] < m)
            m = s->pins[i];
    return m;
}

/* Forgets what no read at floor or later, and no open snapshot, can see. */
static void forget_to(emb_store *s, int64_t floor)
{
    pthread_mutex_lock(&s->pin_mu);
    floor = min_pin(s, floor);
    if (floor > s->floor) {
        s->floor = floor;
        kvq__vmap_wrlock(s->map);
        kvq__vmap_forget(s->map, floor);
        kvq__vmap_wrunlock(s->map);
    }
    pthread_mutex_unlock(&s->pin_mu);
}

/* Forgets versions older than the window that no snapshot holds. apply_mu held. */
static void maybe_forget(emb_store *s)
{
    if (s->applied_version - s->last_forget < 100000)
        return;
    s->last_forget = s->applied_version;
    pthread_mutex_lock(&s->pin_mu);
    /* While the log is replayed at open, no transaction reads an older version. */
    int64_t floor = min_pin(s, s->applied_version - (s->replaying ? 0 : LS_WINDOW));
    if (floor > s->floor) {
        s->floor = floor;
        kvq__vmap_wrlock(s->map);
        kvq__vmap_forget(s->map, floor);
        kvq__vmap_wrunlock(s->map);
    }
    pthread_mutex_unlock(&s->pin_mu);
}

/* Applies one record of the log to the map (apply_mu held). */
static int apply_record(emb_store *s, const kvq__log_rec *r)
{
    if (r->type != LS_REC_COMMIT) {
        __atomic_store_n(&s->applied_lsn, r->end, __ATOMIC_RELEASE);
        return 0;
    }
    const uint8_t *p = r->data;
    if (r->len < LS_REC_HDR || p[0] != LS_REC_FORMAT || p[1] != 1)
        return bad_record(r->lsn);
    uint64_t ops_len = kvq__le32_get(p + 4), packed_len = kvq__le32_get(p + 16);
    int64_t version = (int64_t)kvq__le64_get(p + 8);
    if (LS_REC_HDR + ops_len + packed_len != r->len)
        return bad_record(r->lsn);
    if (version <= s->applied_version) {
        /* held by the checkpoint already */
        __atomic_store_n(&s->applied_lsn, r->end, __ATOMIC_RELEASE);
        return 0;
    }
    const uint8_t *o = p + LS_REC_HDR, *end = o + ops_len;
    int rc = 0;
    kvq__vmap_wrlock(s->map);
    while (o < end && rc == 0) {
        uint8_t op = o[0];
        if (end - o < 5) {
            rc = bad_record(r->lsn);
            break;
        }
        uint64_t al = kvq__le32_get(o + 1), bl = 0;
        o += 5;
        if (op == OP_SET || op == OP_CLEAR_RANGE) {
            if (end - o < 4) {
                rc = bad_record(r->lsn);
                break;
            }
            bl = kvq__le32_get(o);
            o += 4;
        }
        if ((uint64_t)(end - o) < al + bl) {
            rc = bad_record(r->lsn);
            break;
        }
        if (op == OP_SET)
            rc = kvq__vmap_set(s->map, version, o, (size_t)al, o + al, (size_t)bl);
        else if (op == OP_CLEAR)
            rc = kvq__vmap_clear(s->map, version, o, (size_t)al);
        else if (op == OP_CLEAR_RANGE)
            rc = kvq__vmap_clear_range(s->map, version, o, (size_t)al, o + al, (size_t)bl, NULL,
                                       NULL);
        else
            rc = bad_record(r->lsn);
        o += al + bl;
    }
    kvq__vmap_set_version(s->map, version);
    kvq__vmap_wrunlock(s->map);
    if (rc != 0)
        return rc;
    cl_push(s, version, end, (size_t)packed_len);
    s->applied_version = version;
    __atomic_store_n(&s->applied_lsn, r->end, __ATOMIC_RELEASE);
    if (s->slots && s->slot >= 0)
        __atomic_store_n(&s->slots[s->slot].applied, r->end, __ATOMIC_RELEASE);
    maybe_forget(s);
    return 0;
}

static int replay_fn(void *arg, const kvq__log_rec *r)
{
    return apply_record(arg, r);
}

/* Brings the map up to the log's tail (records other processes wrote). apply_mu held. */
static int catch_up_locked(emb_store *s)
{
    if (kvq__log_tail(s->log) <= s->applied_lsn)
        return 0;
    uint64_t next;
    int rc = kvq__log_read(s->log, s->applied_lsn, replay_fn, s, &next);
    if (rc == KVQ_ENOTFOUND)
        return kvq__error(KVQ_EIO, "log store: this handle fell behind the log, which was "
                                   "recycled since; reopen the database");
    return rc;
}

static int catch_up(emb_store *s)
{
    if (kvq__log_tail(s->log) <= __atomic_load_n(&s->applied_lsn, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&s->apply_mu);
    int rc = catch_up_locked(s);
    pthread_mutex_unlock(&s->apply_mu);
    return rc;
}

static int ls_checkpoint(emb_store *s);

/* The memory the store's data takes: the map and the conflict log. */
static uint64_t mem_used(emb_store *s)
{
    return kvq__vmap_mem(s->map) + __atomic_load_n(&s->cl_bytes, __ATOMIC_RELAXED) +
           s->cl_cap * sizeof(cl_entry);
}

/* ---- readers.shm ---- */

/* Takes a slot in readers.shm. A read-only handle (create = 0) takes one when the file exists
 * and may be written (a read-only handle on a writable directory), so that the log it has not
 * yet applied is not recycled under it; otherwise it goes without (on a read-only file system
 * nothing is recycled anyway). */
static int slots_open(emb_store *s, int create)
{
    s->slot = -1;
    s->readers_fd =
        openat(s->dir_fd, "readers.shm", O_RDWR | (create ? O_CREAT : 0) | O_CLOEXEC, s->mode);
    if (s->readers_fd < 0 && !create)
        return 0;
    if (s->readers_fd < 0)
        return emb_errno_error(errno, "cannot open", "logstore/readers.shm");
    size_t bytes = LS_SLOTS * sizeof(reader_slot);
    struct stat st;
    if (fstat(s->readers_fd, &st) != 0 ||
        ((size_t)st.st_size < bytes && (!create || ftruncate(s->readers_fd, (off_t)bytes) != 0))) {
        if (!create) {
            close(s->readers_fd);
            s->readers_fd = -1;
            return 0;
        }
        return emb_errno_error(errno, "cannot size", "logstore/readers.shm");
    }
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->readers_fd, 0);
    if (m == MAP_FAILED) {
        if (!create) {
            close(s->readers_fd);
            s->readers_fd = -1;
            return 0;
        }
        return emb_errno_error(errno, "cannot map", "logstore/readers.shm");
    }
    s->slots = m;
    static uint64_t counter;
    uint64_t me =
        ((uint64_t)getpid() << 16) | (__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) & 0xffff);
    for (int i = 0; i < LS_SLOTS; i++) {
        uint64_t o = __atomic_load_n(&s->slots[i].owner, __ATOMIC_ACQUIRE);
        if (o != 0 && !(kill((pid_t)(o >> 16), 0) != 0 && errno == ESRCH))
            continue;
        /* set the position first, so that a checkpointer never sees the slot at 0 */
        if (__atomic_compare_exchange_n(&s->slots[i].owner, &o, me, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            __atomic_store_n(&s->slots[i].applied, s->applied_lsn, __ATOMIC_RELEASE);
            s->slot = i;
            return 0;
        }
    }
    /* No slot: this handle's log may be recycled under it (it then reports it and must be
     * reopened). */
    return 0;
}

/* The oldest log position a live handle still needs. */
static uint64_t slots_min(emb_store *s, uint64_t dflt)
{
    uint64_t m = dflt;
    if (s->slots == NULL)
        return m;
    for (int i = 0; i < LS_SLOTS; i++) {
        uint64_t o = __atomic_load_n(&s->slots[i].owner, __ATOMIC_ACQUIRE);
        if (o == 0 || (kill((pid_t)(o >> 16), 0) != 0 && errno == ESRCH))
            continue;
        uint64_t a = __atomic_load_n(&s->slots[i].applied, __ATOMIC_ACQUIRE);
        if (a < m)
            m = a;
    }
    return m;
}

/* ---- checkpoints ---- */

/* ---- the checkpoint reserve (ckpt.reserve) ---- */

/* The bytes a checkpoint of the live data takes: 8 per item, header and trailer. */
static uint64_t ckpt_estimate(emb_store *s)
{
    kvq__vmap_stats st;
    kvq__vmap_rdlock(s->map);
    kvq__vmap_get_stats(s->map, &st);
    kvq__vmap_rdunlock(s->map);
    return st.live_bytes + 8 * st.live_keys + 4096;
}

static uint64_t reserve_size(emb_store *s)
{
    struct stat st;
    if (s->reserve_fd < 0 || fstat(s->reserve_fd, &st) != 0 || st.st_size < 0)
        return 0;
    return (uint64_t)st.st_size;
}

/* What the reserve should hold: room for a checkpoint of the live data and for one segment. */
static uint64_t reserve_target(emb_store *s)
{
    return ckpt_estimate(s) + kvq__log_segment_bytes(s->log);
}

/* Grows the reserve to its target (a full disk stops it short: space_short then refuses what
 * would grow the data), or shrinks it when the data shrank. Off the commit path. */
static void reserve_adjust(emb_store *s)
{
    if (s->reserve_fd < 0)
        return;
    uint64_t have = reserve_size(s), want = reserve_target(s);
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
static void reserve_release(emb_store *s, uint64_t keep)
{
    if (s->reserve_fd >= 0 && reserve_size(s) > keep && ftruncate(s->reserve_fd, (off_t)keep) == 0)
        fdatasync(s->reserve_fd);
}

/* Gives a segment's worth of the reserve back when the reserve holds more than the next
 * checkpoint needs (its target holds one segment beyond it: a spare, or the next segment, on
 * a full disk). Returns 1 when it did. */
static int reserve_give_segment(emb_store *s)
{
    uint64_t have = reserve_size(s), seg = kvq__log_segment_bytes(s->log);
    if (have < ckpt_estimate(s) + seg)
        return 0;
    reserve_release(s, have - seg);
    return 1;
}

/* Writes a checkpoint of everything applied; wait: wait for another checkpointer rather than
 * leave it to it. *covered (may be NULL) gets the log position the newest checkpoint covers. */
static int do_checkpoint_locked(emb_store *s, uint64_t *covered);

static int do_checkpoint(emb_store *s, int wait, uint64_t *covered)
{
    /* One checkpointer per handle (the flock below does not exclude the threads of one
     * process: they share its open file), then one per database. */
    if (wait)
        pthread_mutex_lock(&s->ckpt_write_mu);
    else if (pthread_mutex_trylock(&s->ckpt_write_mu) != 0)
        return 0; /* this handle is writing one */
    int rc = 0;
    if (flock(s->ckpt_fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB) == 0)
        rc = do_checkpoint_locked(s, covered);
    /* else another handle is writing one */
    pthread_mutex_unlock(&s->ckpt_write_mu);
    return rc;
}

/* do_checkpoint's work, ckpt.lock held (released here). */
static int do_checkpoint_locked(emb_store *s, uint64_t *covered)
{
    pthread_mutex_lock(&s->apply_mu);
    int rc = catch_up_locked(s);
    int64_t v = s->applied_version;
    uint64_t lsn = s->applied_lsn;
    pthread_mutex_unlock(&s->apply_mu);
    kvq__ckpt_info have;
    int found = 0;
    if (rc == 0)
        rc = kvq__ckpt_find(s->dir_fd, &have, &found);
    if (rc != 0 || (found && have.version >= v)) {
        if (rc == 0 && covered)
            *covered = have.lsn;
        flock(s->ckpt_fd, LOCK_UN);
        return rc;
    }
    /* Hold version v in the map while it is written. */
    pthread_mutex_lock(&s->pin_mu);
    if (v < s->floor) {
        pthread_mutex_unlock(&s->pin_mu);
        flock(s->ckpt_fd, LOCK_UN);
        return 0;
    }
    if (s->n_pins == s->cap_pins) {
        size_t cap = s->cap_pins ? s->cap_pins * 2 : 16;
        int64_t *p = kvq__realloc(s->pins, cap * sizeof *p);
        if (p == NULL) {
            pthread_mutex_unlock(&s->pin_mu);
            flock(s->ckpt_fd, LOCK_UN);
            return kvq__error(KVQ_ENOMEM, "out of memory");
        }
        s->pins = p;
        s->cap_pins = cap;
    }
    s->pins[s->n_pins++] = v;
    pthread_mutex_unlock(&s->pin_mu);
    kvq__ckpt_info info;
    rc = kvq__ckpt_write(s->dir_fd, s->map, v, lsn, s->mode, &info);
    if (rc == KVQ_ENOSPC && reserve_size(s) > 0) {
        /* the room kept for it */
        kvq__error_clear();
        reserve_release(s, 0);
        rc = kvq__ckpt_write(s->dir_fd, s->map, v, lsn, s->mode, &info);
    }
    pthread_mutex_lock(&s->pin_mu);
    for (size_t i = 0; i < s->n_pins; i++)
        if (s->pins[i] == v) {
            s->pins[i] = s->pins[--s->n_pins];
            break;
        }
    pthread_mutex_unlock(&s->pin_mu);
    if (rc == 0) {
        if (covered)
            *covered = lsn;
        s->ckpt_version = v;
        __atomic_store_n(&s->ckpt_lsn, lsn, __ATOMIC_RELEASE);
        s->n_ckpts++;
        /* The log before the checkpoint goes, except what a live handle has not applied. */
        rc = kvq__log_release(s->log, slots_min(s, lsn));
        if (rc == 0)
            kvq__log_prepare_spare(s->log);
    }
    flock(s->ckpt_fd, LOCK_UN);
    return rc;
}

static void *ckpt_main(void *arg)
{
    emb_store *s = arg;
    pthread_mutex_lock(&s->ckpt_mu);
    while (!s->ckpt_stop) {
        if (!s->ckpt_wanted && !s->reserve_wanted) {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_sec += 1;
            if (pthread_cond_timedwait(&s->ckpt_cv, &s->ckpt_mu, &dl) == ETIMEDOUT) {
                /* A handle that is open but idle still applies the log now and then, so that
                 * it does not keep the log from being recycled (readers.shm). */
                pthread_mutex_unlock(&s->ckpt_mu);
                if (kvq__log_tail(s->log) - __atomic_load_n(&s->applied_lsn, __ATOMIC_ACQUIRE) >
                        (4u << 20) &&
                    catch_up(s) != 0)
                    kvq__error_clear();
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
        if (ckpt && do_checkpoint(s, 0, NULL) != 0)
            kvq__error_clear();
        if (src == KVQ_ENOSPC) {
            kvq__error_clear();
            src = kvq__log_prepare_spare(s->log);
            if (src == KVQ_ENOSPC && reserve_give_segment(s)) {
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
    if (since < s->ckpt_min)
        return 0;
    kvq__vmap_stats st;
    kvq__vmap_rdlock(s->map);
    kvq__vmap_get_stats(s->map, &st);
    kvq__vmap_rdunlock(s->map);
    return since > st.live_bytes;
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
static void wake_reserve(emb_store *s)
{
    if (!s->ckpt_started)
        return;
    pthread_mutex_lock(&s->ckpt_mu);
    s->reserve_wanted = 1;
    pthread_cond_signal(&s->ckpt_cv);
    pthread_mutex_unlock(&s->ckpt_mu);
}

static int ls_checkpoint(emb_store *s)
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
    return do_checkpoint(s, 1, NULL);
}

/* ---- open, close ---- */

static void ls_close(emb_store *s)
{
    if (s == NULL)
        return;
    if (s->ckpt_started) {
        pthread_mutex_lock(&s->ckpt_mu);
        s->ckpt_stop = 1;
        pthread_cond_signal(&s->ckpt_cv);
        pthread_mutex_unlock(&s->ckpt_mu);
        pthread_join(s->ckpt_thread, NULL);
    }
    if (s->slots) {
        if (s->slot >= 0)
            __atomic_store_n(&s->slots[s->slot].owner, 0, __ATOMIC_RELEASE);
        munmap(s->slots, LS_SLOTS * sizeof(reader_slot));
    }
    kvq__log_close(s->log);
    kvq__vmap_free(s->map);
    kvq__vmap_free(s->ov);
    kvq_buf_dispose(&s->rec);
    while (s->cl_len > 0) {
        kvq__free(s->cl[s->cl_head].packed);
        s->cl_head = (s->cl_head + 1) % s->cl_cap;
        s->cl_len--;
    }
    kvq__free(s->cl);
    kvq__free(s->pins);
    if (s->readers_fd >= 0)
        close(s->readers_fd);
    if (s->ckpt_fd >= 0)
        close(s->ckpt_fd);
    if (s->reserve_fd >= 0)
        close(s->reserve_fd);
    if (s->dir_fd >= 0)
        close(s->dir_fd);
    pthread_mutex_destroy(&s->apply_mu);
    pthread_mutex_destroy(&s->pin_mu);
    pthread_mutex_destroy(&s->ckpt_mu);
    pthread_mutex_destroy(&s->ckpt_write_mu);
    pthread_cond_destroy(&s->ckpt_cv);
    kvq__free(s->dir);
    kvq__free(s);
}

/* Does dir hold a log store? */
int kvq__logstore_present(const char *dir)
{
    char *p = emb_path_join(dir, "logstore");
    if (p == NULL)
        return 0;
    struct stat st;
    int yes = stat(p, &st) == 0 && S_ISDIR(st.st_mode);
    kvq__free(p);
    return yes;
}

/* 1 when the directory holds a segment or a checkpoint, 0 when not, -1 (errno set) when it
 * cannot be read: out of descriptors is not a damaged database. */
static int seg_or_ckpt_one(void *arg, const char *name)
{
    int *yes = arg;
    if (strncmp(name, "log-", 4) == 0 || strncmp(name, "ckpt-", 5) == 0)
        *yes = 1;
    return *yes;
}

static int has_segment_or_ckpt(int dir_fd)
{
    int yes = 0;
    if (kvq__dir_each(dir_fd, seg_or_ckpt_one, &yes) != 0)
        return -1;
    return yes;
}

static int ls_open(emb_store **out, const emb_store_config *cfg)
{
    emb_store *s = kvq__calloc(1, sizeof *s);
    if (s == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    s->dir_fd = s->ckpt_fd = s->readers_fd = s->reserve_fd = -1;
    s->slot = -1;
    pthread_mutex_init(&s->apply_mu, NULL);
    pthread_mutex_init(&s->pin_mu, NULL);
    pthread_mutex_init(&s->ckpt_mu, NULL);
    pthread_mutex_init(&s->ckpt_write_mu, NULL);
    pthread_cond_init(&s->ckpt_cv, NULL);
    s->read_only = (cfg->opts->flags & KVQ_DB_READ_ONLY) != 0;
    s->durable = cfg->durable;
    s->mode = cfg->opts->file_mode ? cfg->opts->file_mode : 0600;
    s->limit = env_u64("KVQ_LOGSTORE_MEMORY_LIMIT", default_limit());
    s->ckpt_min = env_u64("KVQ_LOGSTORE_CHECKPOINT_BYTES", LS_CKPT_MIN_BYTES);
    uint64_t seg = env_u64("KVQ_LOGSTORE_SEGMENT_BYTES", 0);
    int rc = 0;
    s->dir = emb_path_join(cfg->dir, "logstore");
    s->map = kvq__vmap_new(0);
    if (s->dir == NULL || s->map == NULL) {
        rc = kvq__error(KVQ_ENOMEM, "out of memory");
        goto fail;
    }
    if (cfg->create) {
        mode_t dmode = (mode_t)(s->mode | ((s->mode & 0444) >> 2));
        if (mkdir(s->dir, dmode) != 0 && errno != EEXIST) {
            rc = emb_errno_error(errno, "cannot create", s->dir);
            goto fail;
        }
        if ((rc = emb_fsync_dir(cfg->dir)) != 0)
            goto fail;
    }
    s->dir_fd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dir_fd < 0) {
        rc = errno == ENOENT
                 ? kvq__error(KVQ_EDAMAGED, "the log store's directory %s is missing", s->dir)
                 : emb_errno_error(errno, "cannot open", s->dir);
        goto fail;
    }
    if (!cfg->create) {
        int has = has_segment_or_ckpt(s->dir_fd);
        if (has < 0) {
            rc = emb_errno_error(errno, "cannot read", s->dir);
            goto fail;
        }
        if (has == 0) {
            rc = kvq__error(KVQ_EDAMAGED, "the log store in %s has neither log nor checkpoint",
                            s->dir);
            goto fail;
        }
    }
    s->ckpt_fd = openat(s->dir_fd, "ckpt.lock",
                        (s->read_only ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, s->mode);
    if (s->ckpt_fd < 0) {
        rc = emb_errno_error(errno, "cannot open", "logstore/ckpt.lock");
        goto fail;
    }
    /* No checkpointer may replace the checkpoint and recycle the log while it is loaded. */
    while (flock(s->ckpt_fd, LOCK_SH) != 0 && errno == EINTR) {
    }
    kvq__ckpt_info ci = { 0 };
    int found = 0;
    rc = kvq__ckpt_load(s->dir_fd, s->map, &ci, &found);
    if (rc == 0) {
        if (found) {
            s->applied_version = ci.version;
            s->ckpt_version = ci.version;
            s->ckpt_lsn = ci.lsn;
            s->cl_floor = ci.version;
            __atomic_store_n(&s->applied_lsn, ci.lsn, __ATOMIC_RELEASE);
        }
        kvq__log_options lo = { .segment_bytes = seg,
                                .file_mode = s->mode,
                                .read_only = s->read_only };
        pthread_mutex_lock(&s->apply_mu);
        s->replaying = 1;
        rc = kvq__log_open(&s->log, s->dir, &lo, found ? ci.lsn : 0, replay_fn, s);
        if (rc == 0 && s->applied_lsn < kvq__log_first(s->log))
            __atomic_store_n(&s->applied_lsn, kvq__log_first(s->log), __ATOMIC_RELEASE);
        if (rc == 0 && !found)
            s->ckpt_lsn = kvq__log_first(s->log);
        if (rc == 0)
            rc = catch_up_locked(s);
        s->replaying = 0;
        pthread_mutex_unlock(&s->apply_mu);
    }
    /* Registered before a checkpointer may run, so that it keeps what this handle still needs
     * of the log. */
    if (rc == 0)
        rc = slots_open(s, !s->read_only);
    flock(s->ckpt_fd, LOCK_UN);
    if (rc != 0)
        goto fail;
    /* No transaction of this handle has a read version yet: the conflict log and the versions
     * of the window start from here (a read version from before is answered with 1007). */
    cl_prune(s, s->applied_version);
    forget_to(s, s->applied_version);
    /* The replay freed what the log's popped items took: give it back to the system. */
    malloc_trim(0);
    if (s->limit && mem_used(s) > s->limit) {
        rc = kvq__error(KVQ_ENOMEM,
                        "the log store's data takes %llu bytes of memory, past its limit of "
                        "%llu (KVQ_LOGSTORE_MEMORY_LIMIT): raise it, or keep data this large "
                        "in the SQLite storage",
                        (unsigned long long)mem_used(s), (unsigned long long)s->limit);
        goto fail;
    }
    if (!s->read_only) {
        /* A file that cannot be made (a full disk, no descriptor) leaves the store without a
         * reserve: space_short then counts on free space alone. */
        s->reserve_fd = openat(s->dir_fd, "ckpt.reserve", O_RDWR | O_CREAT | O_CLOEXEC, s->mode);
        /* Room the data no longer needs goes back now, before the engine looks at the free
         * space (its own reserve, drain mode); growing it is the thread's. */
        uint64_t want = reserve_target(s);
        if (reserve_size(s) > want + want / 4 + kvq__log_segment_bytes(s->log))
            reserve_release(s, want + want / 8);
        s->reserve_wanted = 1;
        if (pthread_create(&s->ckpt_thread, NULL, ckpt_main, s) == 0) {
            s->ckpt_started = 1;
        }
    } else if (s->slot >= 0) {
        /* A read-only handle with a slot holds the log back from recycling until it applies
         * it: its thread applies the log of an idle handle now and then (and does nothing
         * else: ls_checkpoint and the wake-ups are for writable handles). */
        if (pthread_create(&s->ckpt_thread, NULL, ckpt_main, s) == 0)
            s->ckpt_started = 1;
    }
    *out = s;
    return 0;
fail:
    ls_close(s);
    return rc;
}

/* ---- snapshots ---- */

static int ls_snap_open(emb_store *s, int64_t at, emb_snap **out, emb_snap_info *info)
{
    int rc = catch_up(s);
    if (rc != 0)
        return rc;
    emb_snap *sn = kvq__malloc(sizeof *sn);
    if (sn == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    pthread_mutex_lock(&s->apply_mu);
    int64_t latest = s->applied_version, v = latest;
    if (at > 0 && at < latest) {
        /* the newest batch at or before at */
        v = at;
        for (size_t i = s->cl_len; i > 0; i--) {
            int64_t cv = s->cl[(s->cl_head + i - 1) % s->cl_cap].version;
            if (cv <= at) {
                v = cv;
                break;
            }
        }
    }
    pthread_mutex_lock(&s->pin_mu);
    pthread_mutex_unlock(&s->apply_mu);
    if (at > 0 && at < latest && at < s->floor) {
        pthread_mutex_unlock(&s->pin_mu);
        kvq__free(sn);
        return kvq__error(KVQ_ETRANSACTION_TOO_OLD,
                          "version %lld is older than the versions the log store keeps",
                          (long long)at);
    }
    if (s->n_pins == s->cap_pins) {
        size_t cap = s->cap_pins ? s->cap_pins * 2 : 16;
        int64_t *p = kvq__realloc(s->pins, cap * sizeof *p);
        if (p == NULL) {
            pthread_mutex_unlock(&s->pin_mu);
            kvq__free(sn);
            return kvq__error(KVQ_ENOMEM, "out of memory");
        }
        s->pins = p;
        s->cap_pins = cap;
    }
    int64_t read_at = at > 0 && at < latest ? at : latest;
    s->pins[s->n_pins++] = read_at;
    pthread_mutex_unlock(&s->pin_mu);
    sn->s = s;
    sn->version = read_at;
    info->version = v;
    info->latest = latest;
    *out = sn;
    return 0;
}

static void ls_snap_close(emb_snap *sn)
{
    if (sn == NULL)
        return;
    emb_store *s = sn->s;
    pthread_mutex_lock(&s->pin_mu);
    for (size_t i = 0; i < s->n_pins; i++)
        if (s->pins[i] == sn->version) {
            s->pins[i] = s->pins[--s->n_pins];
            break;
        }
    pthread_mutex_unlock(&s->pin_mu);
    kvq__free(sn);
}

static int ls_get(emb_snap *sn, const uint8_t *key, size_t key_len, kvq_bytes *value, int *present)
{
    kvq__vmap_rdlock(sn->s->map);
    *present = kvq__vmap_get(sn->s->map, sn->version, key, key_len, value);
    kvq__vmap_rdunlock(sn->s->map);
    return 0;
}

static int ls_cursor_open(emb_snap *sn,
                          const uint8_t *begin,
                          size_t begin_len,
                          const uint8_t *end,
                          size_t end_len,
                          int reverse,
                          emb_cursor **out)
{
    emb_cursor *c = kvq__calloc(1, sizeof *c + begin_len + end_len + 1);
    if (c == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    c->snap = sn;
    c->b = (uint8_t *)(c + 1);
    c->e = c->b + begin_len;
    if (begin_len)
        memcpy(c->b, begin, begin_len);
    if (end_len)
        memcpy(c->e, end, end_len);
    kvq__vmap_cursor_init(&c->c, sn->s->map, sn->version, c->b, begin_len, c->e, end_len, reverse);
    *out = c;
    return 0;
}

static int ls_cursor_next(emb_cursor *c, kvq_bytes *key, kvq_bytes *value, int *has)
{
    kvq__vmap_rdlock(c->snap->s->map);
    *has = kvq__vmap_cursor_next(&c->c, key, value);
    kvq__vmap_rdunlock(c->snap->s->map);
    return 0;
}

static void ls_cursor_close(emb_cursor *c)
{
    kvq__free(c);
}

/* ---- writing ---- */

static void write_end(emb_store *s)
{
    kvq__vmap_free(s->ov);
    s->ov = NULL;
    s->rec.len = 0;
    s->add_cost = 0;
    s->writing = 0;
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
    uint64_t ckpt = ckpt_estimate(s);
    int64_t now = kvq__mono_us();
    if (s->space_at != 0 && now - s->space_at < LS_SPACE_RECHECK_US && ckpt <= s->space_live_ok)
        return s->space_short;
    uint64_t seg = kvq__log_segment_bytes(s->log);
    uint64_t reserve = reserve_size(s);
    s->space_at = now;
    /* the reserve off its target: the checkpoint thread adjusts it */
    if (s->reserve_fd >= 0 && (reserve < ckpt + seg || reserve > 2 * (ckpt + seg) + seg))
        wake_reserve(s);
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
    uint64_t room = avail > need ? avail - need : 0;
    if (fs - (fs < seg ? fs : seg) < room)
        room = fs - (fs < seg ? fs : seg);
    s->space_live_ok = ckpt + room / 2;
    return s->space_short;
}

static int ls_write_begin(emb_store *s, emb_store_head *head)
{
    if (s->read_only)
        return kvq__error(KVQ_EPERM, "the database is open read-only");
    if (s->writing)
        write_end(s);
    int rc = catch_up(s);
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
    s->w_counting = space_short(s);
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
    kvq__vmap_rdlock(s->map);
    int got = kvq__vmap_get(s->map, s->applied_version, key, kl, v);
    kvq__vmap_rdunlock(s->map);
    return got;
}

static int
ls_write_get(emb_store *s, const uint8_t *key, size_t key_len, kvq_bytes *value, int *present)
{
    if (!s->writing)
        return kvq__error(KVQ_EINVAL, "log store: no write in progress");
    *present = write_view(s, key, key_len, value);
    if (!*present) {
        value->data = NULL;
        value->len = 0;
    }
    return 0;
}

static int ls_write_put(
    emb_store *s, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len)
{
    if (!s->writing)
        return kvq__error(KVQ_EINVAL, "log store: no write in progress");
    if (s->w_counting) {
        kvq_bytes old;
        if (write_view(s, key, key_len, &old))
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

static int ls_write_clear(emb_store *s, const uint8_t *key, size_t key_len)
{
    if (!s->writing)
        return kvq__error(KVQ_EINVAL, "log store: no write in progress");
    if (s->w_counting) {
        kvq_bytes old;
        if (write_view(s, key, key_len, &old)) {
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
    kvq__vmap_cursor_init(&c, s->map, s->applied_version, b, bl, e, el, 0);
    for (;;) {
        kvq__vmap_rdlock(s->map);
        int has = kvq__vmap_cursor_next(&c, &k, &v);
        kvq__vmap_rdunlock(s->map);
        if (!has)
            break;
        int p = kvq__vmap_probe(s->ov, 1, k.data, k.len, &ov);
        if (p == 0)
            stop = fn(arg, k.data, k.len, v.len);
        if (stop)
            return stop;
    }
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

static int ls_write_clear_range(emb_store *s,
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
    each_in_view(s, begin, begin_len, end, end_len, collect_key, &l);
    int rc = l.err ? kvq__error(KVQ_ENOMEM, "out of memory") : 0;
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

static int ls_write_range_bytes(emb_store *s,
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
    if (kvq__bytes_cmp(begin, begin_len, end, end_len) < 0)
        each_in_view(s, begin, begin_len, end, end_len, sum_key, &a);
    *bytes = a.sum;
    return 0;
}

static int ls_log_check(emb_store *s, int64_t after, const emb_ranges *reads, int *hit)
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

static int ls_log_prune(emb_store *s, int64_t before)
{
    pthread_mutex_lock(&s->apply_mu);
    cl_prune(s, before);
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
    int rc = do_checkpoint(s, 1, &covered);
    /* The checkpoint may be one an earlier attempt renamed without syncing the directory
     * (that sync failed): the name must be durable before the log is taken as repaired. */
    if (rc == 0 && fsync(s->dir_fd) != 0)
        rc = emb_errno_error(errno, "cannot sync", s->dir);
    if (rc == 0)
        rc = kvq__log_repaired(s->log, covered);
    return rc;
}

static int ls_write_commit(emb_store *s, int64_t version, const uint8_t *packed, size_t n)
{
    if (!s->writing)
        return kvq__error(KVQ_EINVAL, "log store: no write in progress");
    if (version == 0) {
        write_end(s);
        return 0;
    }
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
    if (s->limit && s->add_cost > 0 && mem_used(s) + s->add_cost > s->limit)
        /* Short of memory: the versions of the window go first (reads at an older version then
         * get transaction_too_old), except what open snapshots read. */
        forget_to(s, s->applied_version);
    if (s->limit && s->add_cost > 0 && mem_used(s) + s->add_cost > s->limit) {
        rc = kvq__error(KVQ_ENOMEM,
                        "the log store's data would take %llu bytes of memory, past its limit "
                        "of %llu (KVQ_LOGSTORE_MEMORY_LIMIT): raise it, or keep data this "
                        "large in the SQLite storage",
                        (unsigned long long)(mem_used(s) + s->add_cost),
                        (unsigned long long)s->limit);
        goto out;
    }
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
    rc = catch_up_locked(s);
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
                made = reserve_give_segment(s);
            } else if (step == 1) {
                pthread_mutex_unlock(&s->apply_mu);
                uint64_t covered = 0;
                made = do_checkpoint(s, 1, &covered) == 0;
                pthread_mutex_lock(&s->apply_mu);
                if (!made)
                    snprintf(why, sizeof why, "%s", kvq_last_error());
            } else if (reserve_size(s) > 0) {
                reserve_release(s, 0);
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
            if ((rc = catch_up_locked(s)) == 0 && (rc = kvq__log_lock(s->log)) == 0) {
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
        rc = apply_record(s, &r);
        if (rc != 0)
            /* written, not applied here: another handle (or the next open) applies it */
            rc = unknown_result();
    }
    pthread_mutex_unlock(&s->apply_mu);
    /* The checkpoint thread is told when the log has grown enough (the engine does not call
     * the checkpoint operation yet); it never runs on the committer's thread. */
    if (rc == 0)
        ls_checkpoint(s);
out:
    write_end(s);
    return rc;
}

static void ls_write_abort(emb_store *s)
{
    if (s && s->writing)
        write_end(s);
}

static int ls_sync(emb_store *s, int repair, int *issued)
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

void kvq__logstore_get_stats(emb_store *s, kvq__logstore_stats *out)
{
    if (s == NULL || out == NULL)
        return;
    memset(out, 0, sizeof *out);
    kvq__vmap_stats st;
    kvq__vmap_rdlock(s->map);
    kvq__vmap_get_stats(s->map, &st);
    kvq__vmap_rdunlock(s->map);
    out->mem = mem_used(s);
    out->live_bytes = st.live_bytes;
    out->live_keys = st.live_keys;
    out->limit = s->limit;
    out->log_bytes = kvq__log_tail(s->log) - kvq__log_first(s->log);
    out->checkpoints = s->n_ckpts;
    out->applied_version = s->applied_version;
    kvq__log_stats ls;
    kvq__log_get_stats(s->log, &ls);
    out->log_syncs = ls.syncs;
    out->log_records = ls.records;
}

const emb_store_ops emb_log_store = {
    .version = EMB_STORE_OPS_VERSION,
    .name = "log",
    .caps = EMB_STORE_MVCC,
    .open = ls_open,
    .close = ls_close,
    .snap_open = ls_snap_open,
    .snap_close = ls_snap_close,
    .get = ls_get,
    .cursor_open = ls_cursor_open,
    .cursor_next = ls_cursor_next,
    .cursor_close = ls_cursor_close,
    .write_begin = ls_write_begin,
    .write_get = ls_write_get,
    .write_put = ls_write_put,
    .write_clear = ls_write_clear,
    .write_clear_range = ls_write_clear_range,
    .write_range_bytes = ls_write_range_bytes,
    .log_check = ls_log_check,
    .log_prune = ls_log_prune,
    .write_commit = ls_write_commit,
    .write_abort = ls_write_abort,
    .sync = ls_sync,
    .checkpoint = ls_checkpoint,
};
