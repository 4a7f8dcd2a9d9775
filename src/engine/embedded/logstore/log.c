/* The log store's log (log.h): opening it, recovery (the scan that finds the tail and cuts a
 * torn one), reading records, the shared positions and releasing the log a checkpoint holds.
 * The segment files are log_seg.c's, appending and syncing log_append.c's (log_internal.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "engine/embedded/logstore/log_internal.h"
#include "util/bytes.h"

static int robust_init(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    int rc = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return rc;
}

/* ---- records ---- */

/* Checks the record at lsn in a mapped segment; returns its payload length and type, or -1
 * when no valid record is there. prev_known: check the chain against prev. */
static int rec_check(const kvq__log *log,
                     const uint8_t *map,
                     uint64_t lsn,
                     int prev_known,
                     uint32_t prev,
                     uint32_t *type,
                     size_t *len,
                     uint32_t *crc,
                     uint64_t *synced)
{
    uint64_t off = lsn % log->sb;
    if (off < KVQ__LOG_SEG_HEADER || off + KVQ__LOG_REC_HEADER > log->sb)
        return -1;
    const uint8_t *h = map + off;
    if (kvq__le32_get(h) != REC_MAGIC || kvq__le64_get(h + 16) != lsn)
        return -1;
    uint64_t n = kvq__le32_get(h + 32);
    if (off + KVQ__LOG_REC_HEADER + align8(n) > log->sb)
        return -1;
    uint32_t c = kvq__le32_get(h + 4);
    if (rec_crc(h, h + KVQ__LOG_REC_HEADER, (size_t)n) != c)
        return -1;
    if (prev_known && kvq__le32_get(h + 8) != prev)
        return -1;
    *type = kvq__le32_get(h + 12);
    *len = (size_t)n;
    *crc = c;
    if (synced)
        *synced = kvq__le64_get(h + 24);
    return 0;
}

/* Walks records from lsn while they are valid and chained, up to limit (0: no limit), calling
 * fn. Sets *end to the position after the last valid one and *crc to its checksum. Caller holds
 * seg_mu. */
static int walk(kvq__log *log,
                uint64_t lsn,
                uint64_t limit,
                int prev_known,
                uint32_t prev,
                kvq__log_rec_fn fn,
                void *arg,
                uint64_t *end,
                uint32_t *crc_out,
                uint64_t *count)
{
    int rc = 0;
    uint64_t pos = lsn;
    uint32_t crc = prev;
    while (limit == 0 || pos < limit) {
        seg_file *s = kvq__log_seg_get(log, seg_of(log, pos), &rc);
        if (s == NULL) {
            if (rc == KVQ_ENOTFOUND && pos == lsn && pos % log->sb == KVQ__LOG_SEG_HEADER) {
                /* the log starts (and ends) at a segment not made yet */
                kvq__error_clear();
                rc = 0;
            } else if (rc == KVQ_ENOTFOUND) {
                /* a segment is made, and its name synced, before the record that leads into
                 * it is written: one that is gone was lost */
                rc = kvq__error(KVQ_EDAMAGED, "log: the segment holding %llu is missing",
                                (unsigned long long)pos);
            }
            break;
        }
        uint32_t type, c;
        size_t len;
        if (rec_check(log, s->map, pos, prev_known, crc, &type, &len, &c, NULL) != 0)
            break;
        prev_known = 1;
        crc = c;
        uint64_t next = pos + KVQ__LOG_REC_HEADER + align8(len);
        if (type == KVQ__LOG_REC_SEGEND) {
            next = (seg_of(log, pos) + 1) * log->sb + KVQ__LOG_SEG_HEADER;
        } else if (fn) {
            kvq__log_rec r = { pos, next, type, s->map + pos % log->sb + KVQ__LOG_REC_HEADER, len };
            /* the callback may read other segments: the mapping stays valid while it runs,
             * since segments are only unmapped when evicted by kvq__log_seg_get of this handle */
            if ((rc = fn(arg, &r)) != 0) {
                pos = next;
                if (count)
                    (*count)++;
                break;
            }
        }
        if (count)
            (*count)++;
        pos = next;
    }
    *end = pos;
    *crc_out = crc;
    return rc;
}

/* After the scan stopped at cut: a valid record past it whose writer knew the log was synced
 * beyond cut proves that synced data was damaged. */
static int check_past_cut(kvq__log *log, uint64_t cut)
{
    uint64_t seq = seg_of(log, cut);
    for (uint64_t s_i = seq; s_i <= seq + 1; s_i++) {
        int rc;
        seg_file *s = kvq__log_seg_get(log, s_i, &rc);
        if (s == NULL) {
            kvq__error_clear();
            continue;
        }
        uint64_t from = s_i == seq ? cut + 8 : s_i * log->sb + KVQ__LOG_SEG_HEADER;
        for (uint64_t p = from; p + KVQ__LOG_REC_HEADER <= (s_i + 1) * log->sb; p += 8) {
            if (kvq__le32_get(s->map + p % log->sb) != REC_MAGIC)
                continue;
            uint32_t type, c;
            size_t len;
            uint64_t synced;
            if (rec_check(log, s->map, p, 0, 0, &type, &len, &c, &synced) == 0 && synced > cut)
                return kvq__error(KVQ_EDAMAGED,
                                  "log: the record at %llu is damaged, yet a later record says "
                                  "the log was synced to %llu",
                                  (unsigned long long)cut, (unsigned long long)synced);
        }
    }
    return 0;
}

/* ---- open, recovery ---- */

static int lowest_one(void *arg, const char *name)
{
    uint64_t *best = arg;
    unsigned long long v;
    char tail[8];
    if (sscanf(name, "log-%16llx.%3s", &v, tail) == 2 && strcmp(tail, "seg") == 0 && v > 0 &&
        (*best == 0 || v < *best))
        *best = v;
    return 0;
}

static int lowest_segment(kvq__log *log, uint64_t *seq_out)
{
    uint64_t best = 0;
    if (kvq__dir_each(log->dir_fd, lowest_one, &best) != 0)
        return sys_err(KVQ_EIO, "read", "log directory");
    *seq_out = best;
    return 0;
}

static int recover(kvq__log *log, uint64_t start, kvq__log_rec_fn fn, void *arg)
{
    log_shm *sh = log->shm;
    uint64_t low = 0;
    int rc = lowest_segment(log, &low);
    if (rc != 0)
        return rc;
    if (low == 0) {
        if (start != 0)
            return kvq__error(KVQ_EDAMAGED, "log: the log is missing (expected it from %llu)",
                              (unsigned long long)start);
        if (log->read_only)
            return kvq__error(KVQ_ENOTFOUND, "log: no log to open read-only");
        if ((rc = kvq__log_seg_make(log, 1)) != 0)
            return rc;
        low = 1;
    } else if ((rc = kvq__log_read_seg_bytes(log, low, &log->sb)) != 0) {
        return rc;
    } else if (start == 0 && low > 1) {
        /* The log's first segments are released only once a checkpoint holds them: a log
         * that starts later with no checkpoint lost it. */
        return kvq__error(KVQ_EDAMAGED,
                          "log: the log starts at segment %llu, but no "
                          "checkpoint holds what came before it",
                          (unsigned long long)low);
    }
    if (start == 0)
        start = low * log->sb + KVQ__LOG_SEG_HEADER;
    else if (seg_of(log, start) < low)
        return kvq__error(KVQ_EDAMAGED, "log: the segment holding %llu is missing",
                          (unsigned long long)start);
    uint64_t end, count = 0;
    uint32_t crc;
    pthread_mutex_lock(&log->seg_mu);
    rc = walk(log, start, 0, 0, 0, fn, arg, &end, &crc, &count);
    if (rc == 0)
        rc = check_past_cut(log, end);
    /* What the scan found may be only in the page cache (its writer died before the sync):
     * make it durable before anyone is told it is. */
    for (uint64_t s_i = seg_of(log, start); rc == 0 && s_i <= seg_of(log, end); s_i++) {
        seg_file *s = kvq__log_seg_get(log, s_i, &rc);
        if (s == NULL) {
            if (s_i == seg_of(log, end) && rc == KVQ_ENOTFOUND &&
                end % log->sb == KVQ__LOG_SEG_HEADER) {
                /* the log ends at the start of a segment not made yet */
                kvq__error_clear();
                rc = 0;
                break;
            }
            break;
        }
        if (!log->read_only && fdatasync(s->fd) != 0)
            rc = sys_err(KVQ_EIO, "sync", "segment");
    }
    /* The scan past the cut may have opened files that a writer will replace. */
    kvq__log_seg_forget_all(log);
    pthread_mutex_unlock(&log->seg_mu);
    if (rc != 0)
        return rc;
    /* Segments before the start are left from a checkpoint whose release did not finish:
     * they become spares (or go). */
    if (!log->read_only) {
        unsigned int nspare = 0;
        char tmp[256];
        kvq__log_spare_find(log, tmp, sizeof tmp, &nspare);
        for (uint64_t s_i = low; s_i < seg_of(log, start); s_i++) {
            char name[64], spare[64];
            seg_name(name, sizeof name, s_i);
            snprintf(spare, sizeof spare, "spare-%016llx.seg", (unsigned long long)s_i);
            if (nspare < log->spares && renameat(log->dir_fd, name, log->dir_fd, spare) == 0)
                nspare++;
            else
                unlinkat(log->dir_fd, name, 0);
        }
        if (low < seg_of(log, start))
            fsync(log->dir_fd);
    }
    sh->seg_bytes = log->sb;
    sh->tail = end;
    sh->tail_crc = crc;
    sh->synced = end;
    sh->first = start;
    sh->sync_failed = 0;
    log->st.recovered_records = count;
    return 0;
}

static int shm_open_map(kvq__log *log, int *fresh)
{
    log->shm_fd = openat(log->dir_fd, "log.shm",
                         (log->read_only ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, log->mode);
    if (log->shm_fd < 0) {
        if (log->read_only && errno == ENOENT) {
            /* a read-only handle with no writer ever: a private page */
            log->shm = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (log->shm == MAP_FAILED) {
                log->shm = NULL;
                return sys_err(KVQ_ENOMEM, "map", "log.shm");
            }
            *fresh = 1;
            return 0;
        }
        return sys_err(KVQ_EIO, "open", "log.shm");
    }
    if (!log->read_only && ftruncate(log->shm_fd, 4096) != 0)
        return sys_err(KVQ_EIO, "size", "log.shm");
    /* A read-only handle keeps a private copy: it may not lock the shared page. */
    log->shm = mmap(NULL, 4096, PROT_READ | PROT_WRITE, log->read_only ? MAP_PRIVATE : MAP_SHARED,
                    log->shm_fd, 0);
    if (log->shm == MAP_FAILED) {
        log->shm = NULL;
        return sys_err(KVQ_EIO, "map", "log.shm");
    }
    return 0;
}

_Static_assert(sizeof(log_shm) <= 4096, "log.shm is one page");

int kvq__log_open(kvq__log **out,
                  const char *dir,
                  const kvq__log_options *opt,
                  uint64_t start_lsn,
                  kvq__log_rec_fn fn,
                  void *arg)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "log: out is NULL");
    *out = NULL;
    if (dir == NULL)
        return kvq__error(KVQ_EINVAL, "log: dir is NULL");
    kvq__log_options o = { 0 };
    if (opt)
        o = *opt;
    if (o.segment_bytes == 0)
        o.segment_bytes = KVQ__LOG_SEG_DEFAULT;
    if (o.segment_bytes < KVQ__LOG_SEG_MIN || o.segment_bytes % 4096 != 0 ||
        o.segment_bytes > (1ull << 40))
        return kvq__error(KVQ_EINVAL,
                          "log: segment size %llu is not a multiple of 4096 in "
                          "[64 KiB, 1 TiB]",
                          (unsigned long long)o.segment_bytes);
    kvq__log *log = kvq__calloc(1, sizeof *log);
    if (log == NULL)
        return kvq__error(KVQ_ENOMEM, "log: out of memory");
    log->dir_fd = log->lock_fd = log->shm_fd = -1;
    for (unsigned int i = 0; i < SEG_CACHE; i++)
        log->segs[i].fd = -1;
    log->sb = o.segment_bytes;
    log->mode = o.file_mode ? o.file_mode : 0600;
    log->spares = o.spares ? o.spares : 1;
    log->read_only = o.read_only;
    pthread_mutex_init(&log->seg_mu, NULL);
    pthread_mutex_init(&log->gc_mu, NULL);
    pthread_cond_init(&log->gc_cv, NULL);
    int rc = 0, init_fd = -1;
    uint64_t attach_from = 0;
    log->dir = kvq__strdup(dir);
    if (log->dir == NULL) {
        rc = kvq__error(KVQ_ENOMEM, "log: out of memory");
        goto fail;
    }
    log->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (log->dir_fd < 0) {
        rc = sys_err(KVQ_EIO, "open directory", dir);
        goto fail;
    }
    /* Opening is serialised by log.init; log.lock is held shared by every open handle, so
     * that one that can take it exclusively knows it is alone and recovers. */
    int flags = (log->read_only ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC;
    init_fd = openat(log->dir_fd, "log.init", flags, log->mode);
    log->lock_fd = openat(log->dir_fd, "log.lock", flags, log->mode);
    if (init_fd < 0 || log->lock_fd < 0) {
        if (log->read_only && errno == ENOENT && init_fd < 0) {
            rc = kvq__error(KVQ_ENOTFOUND, "log: no log in %s to open read-only", dir);
            goto fail;
        }
        rc = sys_err(KVQ_EIO, "open lock file in", dir);
        goto fail;
    }
    while (flock(init_fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            rc = sys_err(KVQ_EIO, "lock", "log.init");
            goto fail;
        }
    }
    int alone = flock(log->lock_fd, LOCK_EX | LOCK_NB) == 0;
    int fresh = 0;
    if ((rc = shm_open_map(log, &fresh)) != 0)
        goto fail;
    log_shm *sh = log->shm;
    if (alone || fresh || sh->magic != SHM_MAGIC || sh->format != KVQ__LOG_FORMAT) {
        if (!alone && !log->read_only) {
            rc = kvq__error(KVQ_EDAMAGED, "log: log.shm is not valid while the log is open");
            goto fail;
        }
        memset(sh, 0, sizeof *sh);
        if (robust_init(&sh->append_mu) != 0 || robust_init(&sh->sync_mu) != 0) {
            rc = kvq__error(KVQ_EIO, "log: cannot set up the shared locks");
            goto fail;
        }
        if ((rc = recover(log, start_lsn, fn, arg)) != 0)
            goto fail;
        sh->format = KVQ__LOG_FORMAT;
        __atomic_store_n(&sh->magic, SHM_MAGIC, __ATOMIC_RELEASE);
    } else {
        log->sb = sh->seg_bytes;
        uint64_t first = __atomic_load_n(&sh->first, __ATOMIC_ACQUIRE);
        if (start_lsn == 0)
            start_lsn = first;
        if (start_lsn < first) {
            rc = kvq__error(KVQ_ENOTFOUND, "log: %llu was recycled (the log starts at %llu)",
                            (unsigned long long)start_lsn, (unsigned long long)first);
            goto fail;
        }
        attach_from = start_lsn;
    }
    if (!log->read_only) {
        while (flock(log->lock_fd, LOCK_SH) != 0) {
            if (errno != EINTR) {
                rc = sys_err(KVQ_EIO, "lock", "log.lock");
                goto fail;
            }
        }
    } else {
        flock(log->lock_fd, LOCK_UN);
    }
    close(init_fd);
    init_fd = -1;
    /* Joining a log that others have open: its records are read once the next opener may go
     * on (the shared lock held keeps the log from being recovered under this reader). */
    if (attach_from != 0 && fn != NULL) {
        uint64_t next;
        if ((rc = kvq__log_read(log, attach_from, fn, arg, &next)) != 0)
            goto fail;
    }
    *out = log;
    return 0;
fail:
    if (init_fd >= 0)
        close(init_fd);
    kvq__log_close(log);
    return rc;
}

void kvq__log_close(kvq__log *log)
{
    if (log == NULL)
        return;
    for (unsigned int i = 0; i < SEG_CACHE; i++)
        kvq__log_seg_close(log, &log->segs[i]);
    if (log->shm)
        munmap(log->shm, 4096);
    if (log->shm_fd >= 0)
        close(log->shm_fd);
    if (log->lock_fd >= 0)
        close(log->lock_fd);
    if (log->dir_fd >= 0)
        close(log->dir_fd);
    pthread_mutex_destroy(&log->seg_mu);
    pthread_mutex_destroy(&log->gc_mu);
    pthread_cond_destroy(&log->gc_cv);
    kvq__free(log->buf);
    kvq__free(log->wbuf);
    kvq__free(log->dir);
    kvq__free(log);
}

/* ---- reading, positions ---- */

int kvq__log_read(kvq__log *log, uint64_t lsn, kvq__log_rec_fn fn, void *arg, uint64_t *next_out)
{
    if (log == NULL || next_out == NULL)
        return kvq__error(KVQ_EINVAL, "log: bad read");
    log_shm *sh = log->shm;
    uint64_t tail = __atomic_load_n(&sh->tail, __ATOMIC_ACQUIRE);
    if (lsn < __atomic_load_n(&sh->first, __ATOMIC_ACQUIRE))
        return kvq__error(KVQ_ENOTFOUND, "log: %llu was recycled", (unsigned long long)lsn);
    if (lsn >= tail) {
        *next_out = lsn;
        return 0;
    }
    uint64_t end;
    uint32_t crc;
    pthread_mutex_lock(&log->seg_mu);
    int rc = walk(log, lsn, tail, 0, 0, fn, arg, &end, &crc, NULL);
    pthread_mutex_unlock(&log->seg_mu);
    if (rc != 0)
        return rc;
    if (end < tail && fn != NULL && lsn < __atomic_load_n(&sh->first, __ATOMIC_ACQUIRE))
        return kvq__error(KVQ_ENOTFOUND, "log: %llu was recycled while read",
                          (unsigned long long)lsn);
    if (end < tail)
        return kvq__error(KVQ_EDAMAGED, "log: record at %llu is not valid below the tail %llu",
                          (unsigned long long)end, (unsigned long long)tail);
    *next_out = end;
    return 0;
}

uint64_t kvq__log_tail(kvq__log *log)
{
    return __atomic_load_n(&log->shm->tail, __ATOMIC_ACQUIRE);
}
uint64_t kvq__log_synced(kvq__log *log)
{
    return __atomic_load_n(&log->shm->synced, __ATOMIC_ACQUIRE);
}
uint64_t kvq__log_first(kvq__log *log)
{
    return __atomic_load_n(&log->shm->first, __ATOMIC_ACQUIRE);
}
uint64_t kvq__log_segment_bytes(kvq__log *log)
{
    return log->sb;
}
uint32_t kvq__log_tail_gen(kvq__log *log)
{
    return __atomic_load_n(&log->shm->tail_gen, __ATOMIC_ACQUIRE);
}

void kvq__log_wait_tail(kvq__log *log, uint32_t seen_gen, int64_t timeout_us)
{
    log_shm *sh = log->shm;
    __atomic_add_fetch(&sh->tail_waiters, 1, __ATOMIC_ACQ_REL);
    if (__atomic_load_n(&sh->tail_gen, __ATOMIC_ACQUIRE) == seen_gen) {
        struct timespec ts = { (time_t)(timeout_us / 1000000),
                               (long)(timeout_us % 1000000) * 1000 };
        syscall(SYS_futex, &sh->tail_gen, FUTEX_WAIT, seen_gen, &ts, NULL, 0);
    }
    __atomic_sub_fetch(&sh->tail_waiters, 1, __ATOMIC_ACQ_REL);
}

int kvq__log_release(kvq__log *log, uint64_t keep_lsn)
{
    if (log == NULL || log->read_only)
        return kvq__error(KVQ_EINVAL, "log: not writable");
    log_shm *sh = log->shm;
    int rc = kvq__log_lock(log);
    if (rc != 0)
        return rc;
    if (keep_lsn > sh->tail)
        keep_lsn = sh->tail;
    uint64_t first = sh->first;
    if (keep_lsn <= first)
        goto out;
    __atomic_store_n(&sh->first, keep_lsn, __ATOMIC_RELEASE);
    unsigned int nspare = 0;
    char tmp[256];
    kvq__log_spare_find(log, tmp, sizeof tmp, &nspare);
    pthread_mutex_lock(&log->seg_mu);
    for (uint64_t seq = seg_of(log, first); seq < seg_of(log, keep_lsn); seq++) {
        kvq__log_seg_forget(log, seq);
        char name[64], spare[64];
        seg_name(name, sizeof name, seq);
        snprintf(spare, sizeof spare, "spare-%016llx.seg", (unsigned long long)seq);
        if (nspare < log->spares) {
            if (renameat(log->dir_fd, name, log->dir_fd, spare) == 0)
                nspare++;
        } else {
            unlinkat(log->dir_fd, name, 0);
        }
        HOOK("release.renamed");
    }
    pthread_mutex_unlock(&log->seg_mu);
    if (fsync(log->dir_fd) != 0)
        rc = sys_err(KVQ_EIO, "sync", "log directory");
out:
    kvq__log_unlock(log);
    return rc;
}

void kvq__log_get_stats(kvq__log *log, kvq__log_stats *out)
{
    if (log && out)
        *out = log->st;
}

int kvq__log_peek(const char *dir, uint64_t *synced, uint64_t *tail, uint64_t *seg_bytes)
{
    if (dir == NULL || synced == NULL || tail == NULL || seg_bytes == NULL)
        return kvq__error(KVQ_EINVAL, "log: bad peek");
    char p[4096];
    snprintf(p, sizeof p, "%s/log.shm", dir);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sys_err(KVQ_EIO, "open", p);
    log_shm sh;
    ssize_t n = pread(fd, &sh, sizeof sh, 0);
    close(fd);
    if (n != (ssize_t)sizeof sh || sh.magic != SHM_MAGIC)
        return kvq__error(KVQ_EDAMAGED, "log: %s is not valid", p);
    *synced = sh.synced;
    *tail = sh.tail;
    *seg_bytes = sh.seg_bytes;
    return 0;
}
