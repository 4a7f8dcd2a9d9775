/* The log store's log (log.h): segments, records, append, shared sync, group commit, recovery,
 * reading and recycling. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

#include "engine/embedded/logstore/log.h"
#include "util/util.h"
#include "util/bytes.h"

void (*kvq__log_test_hook)(const char *step);

#define HOOK(s)                    \
    do {                           \
        if (kvq__log_test_hook)    \
            kvq__log_test_hook(s); \
    } while (0)

#define REC_MAGIC        0x5251564bu /* "KVQR" little-endian */
#define SYNC_PATIENCE_NS 20000000L
#define SHM_MAGIC        0x4d53514bu
static const char seg_magic[8] = { 'K', 'V', 'Q', 'L', 'O', 'G', 'S', 'G' };

/* The shared state of a log (log.shm), mapped by every process that has the log open. */
typedef struct log_shm {
    uint32_t magic, format;
    uint64_t seg_bytes;
    pthread_mutex_t append_mu; /* robust, process-shared: the append lock */
    pthread_mutex_t sync_mu;   /* robust, process-shared: one sync at a time */
    uint64_t tail;             /* end of the last completely written record */
    uint32_t tail_crc;         /* that record's checksum: the next record's prev */
    uint32_t tail_gen;         /* futex word, bumped after each append */
    uint32_t tail_waiters;
    uint32_t sync_failed;
    uint64_t synced; /* every record ending at or before it is on disk */
    uint64_t first;  /* the oldest position still in the log */
} log_shm;

/* One segment file this handle has opened. */
typedef struct seg_file {
    uint64_t seq;
    int fd;
    uint8_t *map; /* read-only mapping of the whole file */
} seg_file;

#define SEG_CACHE 8

struct kvq__log {
    char *dir;
    int dir_fd, lock_fd, shm_fd;
    log_shm *shm;
    uint64_t sb; /* segment bytes */
    unsigned int mode, spares;
    int read_only;
    pthread_mutex_t seg_mu; /* guards segs */
    seg_file segs[SEG_CACHE];
    unsigned int seg_clock;
    /* Group commit of this process. */
    pthread_mutex_t gc_mu;
    pthread_cond_t gc_cv;
    kvq__log_req *q_head, *q_tail;
    int leader;
    uint8_t *buf; /* the leader's payload buffer */
    size_t buf_cap;
    kvq__log_stats st;
    int spare_wanted; /* a spare was used: make another, off the commit path */
    int wrote;        /* the last append reached its pwrite (append lock held) */
    uint8_t *wbuf;    /* the record being written (append lock held) */
    size_t wcap;
};

static uint64_t align8(uint64_t n)
{
    return (n + 7u) & ~(uint64_t)7u;
}

/* Record header, KVQ__LOG_REC_HEADER bytes:
 *   0 magic  4 crc (of bytes 8..40 and the payload)  8 prev (the previous record's crc)
 *  12 type  16 lsn (its own position)  24 synced (the log's synced position when written)
 *  32 len (payload bytes)  36 reserved (0)
 * then the payload, padded with zeros to a multiple of 8. */
static uint32_t rec_crc(const uint8_t *hdr, const void *data, size_t len)
{
    uint32_t c = kvq__crc32c(0, hdr + 8, KVQ__LOG_REC_HEADER - 8);
    return kvq__crc32c(c, data, len);
}

static void rec_header(uint8_t *h,
                       uint32_t prev,
                       uint32_t type,
                       uint64_t lsn,
                       uint64_t synced,
                       const void *data,
                       size_t len)
{
    memset(h, 0, KVQ__LOG_REC_HEADER);
    kvq__le32_put(h, REC_MAGIC);
    kvq__le32_put(h + 8, prev);
    kvq__le32_put(h + 12, type);
    kvq__le64_put(h + 16, lsn);
    kvq__le64_put(h + 24, synced);
    kvq__le32_put(h + 32, (uint32_t)len);
    kvq__le32_put(h + 4, rec_crc(h, data, len));
}

static uint64_t seg_of(const kvq__log *log, uint64_t lsn)
{
    return lsn / log->sb;
}

static void seg_name(char *buf, size_t cap, uint64_t seq)
{
    snprintf(buf, cap, "log-%016llx.seg", (unsigned long long)seq);
}

static int sys_err(int err, const char *what, const char *name)
{
    int e = errno;
    if (e == ENOSPC || e == EDQUOT)
        return kvq__error(KVQ_ENOSPC, "log: %s %s: %s", what, name, strerror(e));
    if (e == EACCES || e == EPERM || e == EROFS)
        return kvq__error(KVQ_EPERM, "log: %s %s: %s", what, name, strerror(e));
    return kvq__error(err, "log: %s %s: %s", what, name, strerror(e));
}

static void futex_wake(uint32_t *w)
{
    syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Takes a robust process-shared mutex; a holder that died leaves it consistent again (the state
 * it guards is only ever published after it is complete). */
static int robust_lock(pthread_mutex_t *m)
{
    int rc = pthread_mutex_lock(m);
    if (rc == EOWNERDEAD) {
        pthread_mutex_consistent(m);
        rc = 0;
    }
    if (rc != 0)
        return kvq__error(KVQ_EIO, "log: shared lock: %s", strerror(rc));
    return 0;
}

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

/* ---- segment files ---- */

static void seg_close(kvq__log *log, seg_file *s)
{
    if (s->map)
        munmap(s->map, log->sb);
    if (s->fd >= 0)
        close(s->fd);
    s->map = NULL;
    s->fd = -1;
    s->seq = 0;
}

/* Forgets this handle's open file of segment seq (replaced on disk). Caller holds seg_mu. */
static void seg_forget(kvq__log *log, uint64_t seq)
{
    for (unsigned int i = 0; i < SEG_CACHE; i++)
        if (log->segs[i].fd >= 0 && log->segs[i].seq == seq)
            seg_close(log, &log->segs[i]);
}

static void seg_forget_all(kvq__log *log)
{
    for (unsigned int i = 0; i < SEG_CACHE; i++)
        seg_close(log, &log->segs[i]);
}

/* The open segment seq, opened and mapped on first use; NULL (with the error set) when it does
 * not exist or is not a segment of this log. Caller holds seg_mu. */
static seg_file *seg_get(kvq__log *log, uint64_t seq, int *rc_out)
{
    *rc_out = 0;
    for (unsigned int i = 0; i < SEG_CACHE; i++)
        if (log->segs[i].fd >= 0 && log->segs[i].seq == seq)
            return &log->segs[i];
    char name[64];
    seg_name(name, sizeof name, seq);
    int fd = openat(log->dir_fd, name, (log->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (fd < 0) {
        *rc_out = errno == ENOENT ? kvq__error(KVQ_ENOTFOUND, "log: no segment %s", name)
                                  : sys_err(KVQ_EIO, "open", name);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != log->sb) {
        close(fd);
        *rc_out = kvq__error(KVQ_EDAMAGED, "log: segment %s has the wrong size", name);
        return NULL;
    }
    void *m = mmap(NULL, log->sb, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        close(fd);
        *rc_out = sys_err(KVQ_EIO, "map", name);
        return NULL;
    }
    const uint8_t *h = m;
    if (memcmp(h, seg_magic, 8) != 0 || kvq__le32_get(h + 8) != KVQ__LOG_FORMAT ||
        kvq__le64_get(h + 16) != seq || kvq__le64_get(h + 24) != log->sb ||
        kvq__le32_get(h + 12) != kvq__crc32c(0, h + 16, 16)) {
        munmap(m, log->sb);
        close(fd);
        *rc_out = kvq__error(KVQ_EDAMAGED, "log: segment %s has a bad header", name);
        return NULL;
    }
    seg_file *s = &log->segs[log->seg_clock++ % SEG_CACHE];
    seg_close(log, s);
    s->seq = seq;
    s->fd = fd;
    s->map = m;
    return s;
}

static int write_full(int fd, const void *p, size_t n, uint64_t off)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = pwrite(fd, b, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

/* Writes a segment header for seq into fd (and syncs it). */
static int seg_write_header(kvq__log *log, int fd, uint64_t seq)
{
    uint8_t h[KVQ__LOG_SEG_HEADER];
    memset(h, 0, sizeof h);
    memcpy(h, seg_magic, 8);
    kvq__le32_put(h + 8, KVQ__LOG_FORMAT);
    kvq__le64_put(h + 16, seq);
    kvq__le64_put(h + 24, log->sb);
    kvq__le32_put(h + 12, kvq__crc32c(0, h + 16, 16));
    if (write_full(fd, h, sizeof h, 0) != 0 || fdatasync(fd) != 0)
        return sys_err(KVQ_EIO, "write header of", "segment");
    return 0;
}

/* Creates a zero-filled spare file of the segment size: written, not only allocated, so that
 * later writes into it change no file metadata and fdatasync has no journal to commit. */
static int spare_create(kvq__log *log, const char *name)
{
    char tmp[96];
    snprintf(tmp, sizeof tmp, "tmp-%ld-%s", (long)getpid(), name);
    int fd = openat(log->dir_fd, tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, log->mode);
    if (fd < 0)
        return sys_err(KVQ_EIO, "create", tmp);
    int rc = 0;
    int e = posix_fallocate(fd, 0, (off_t)log->sb);
    if (e != 0) {
        errno = e;
        rc = sys_err(KVQ_EIO, "allocate", tmp);
        goto fail;
    }
    static const uint8_t zeros[1 << 20];
    for (uint64_t off = 0; off < log->sb; off += sizeof zeros) {
        size_t n = log->sb - off < sizeof zeros ? (size_t)(log->sb - off) : sizeof zeros;
        if (write_full(fd, zeros, n, off) != 0) {
            rc = sys_err(KVQ_EIO, "zero-fill", tmp);
            goto fail;
        }
    }
    if (fsync(fd) != 0) {
        rc = sys_err(KVQ_EIO, "sync", tmp);
        goto fail;
    }
    close(fd);
    if (renameat(log->dir_fd, tmp, log->dir_fd, name) != 0) {
        rc = sys_err(KVQ_EIO, "rename", tmp);
        unlinkat(log->dir_fd, tmp, 0);
        return rc;
    }
    if (fsync(log->dir_fd) != 0)
        return sys_err(KVQ_EIO, "sync", "log directory");
    log->st.segments_created++;
    return 0;
fail:
    close(fd);
    unlinkat(log->dir_fd, tmp, 0);
    return rc;
}

int kvq__dir_each(int dir_fd, int (*fn)(void *arg, const char *name), void *arg)
{
    int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    /* struct linux_dirent64, as the kernel writes it */
    _Alignas(8) uint8_t buf[8192];
    int rc = 0, stop = 0;
    while (!stop) {
        long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n < 0) {
            rc = -1;
            break;
        }
        if (n == 0)
            break;
        for (long off = 0; off < n && !stop;) {
            unsigned short reclen;
            memcpy(&reclen, buf + off + 16, sizeof reclen);
            const char *name = (const char *)buf + off + 19;
            if (reclen == 0)
                break;
            if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0)
                stop = fn(arg, name);
            off += reclen;
        }
    }
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

typedef struct spare_scan {
    char *name;
    size_t cap;
    int found;
    unsigned int n;
} spare_scan;

static int spare_one(void *arg, const char *name)
{
    spare_scan *sc = arg;
    if (strncmp(name, "spare-", 6) == 0 && strstr(name, ".seg") != NULL) {
        sc->n++;
        if (!sc->found && strlen(name) < sc->cap) {
            strcpy(sc->name, name);
            sc->found = 1;
        }
    }
    return 0;
}

/* Finds a spare file; returns 1 with its name, 0 when there is none. */
static int spare_find(kvq__log *log, char *name, size_t cap, unsigned int *count)
{
    spare_scan sc = { name, cap, 0, 0 };
    if (kvq__dir_each(log->dir_fd, spare_one, &sc) != 0)
        return 0;
    if (count)
        *count = sc.n;
    return sc.found;
}

/* Makes segment seq from a spare (or a new file), its header written and synced and its name
 * durable in the directory. */
static int seg_make(kvq__log *log, uint64_t seq)
{
    char spare[256];
    int rc;
    if (!spare_find(log, spare, sizeof spare, NULL)) {
        snprintf(spare, sizeof spare, "spare-new-%016llx.seg", (unsigned long long)seq);
        if ((rc = spare_create(log, spare)) != 0)
            return rc;
    } else {
        log->st.segments_recycled++;
    }
    if (seq > 1) /* the first segment of a new log needs no spare yet */
        __atomic_store_n(&log->spare_wanted, 1, __ATOMIC_RELEASE);
    int fd = openat(log->dir_fd, spare, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return sys_err(KVQ_EIO, "open", spare);
    rc = seg_write_header(log, fd, seq);
    close(fd);
    if (rc != 0)
        return rc;
    char name[64];
    seg_name(name, sizeof name, seq);
    seg_forget(log, seq);
    if (renameat(log->dir_fd, spare, log->dir_fd, name) != 0)
        return sys_err(KVQ_EIO, "rename", spare);
    HOOK("segment.renamed");
    if (fsync(log->dir_fd) != 0)
        return sys_err(KVQ_EIO, "sync", "log directory");
    return 0;
}

int kvq__log_prepare_spare(kvq__log *log)
{
    if (log == NULL || log->read_only)
        return kvq__error(KVQ_EINVAL, "log: no writable log");
    char spare[256];
    if (spare_find(log, spare, sizeof spare, NULL))
        return 0;
    snprintf(spare, sizeof spare, "spare-new-%ld-%lld.seg", (long)getpid(),
             (long long)kvq__mono_us());
    return spare_create(log, spare);
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
        seg_file *s = seg_get(log, seg_of(log, pos), &rc);
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
             * since segments are only unmapped when evicted by seg_get of this handle */
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
        seg_file *s = seg_get(log, s_i, &rc);
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

/* The segment size of an existing log, from the header of segment seq. */
static int read_seg_bytes(kvq__log *log, uint64_t seq, uint64_t *sb)
{
    char name[64];
    seg_name(name, sizeof name, seq);
    int fd = openat(log->dir_fd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sys_err(KVQ_EIO, "open", name);
    uint8_t h[32];
    ssize_t n = pread(fd, h, sizeof h, 0);
    close(fd);
    if (n != (ssize_t)sizeof h || memcmp(h, seg_magic, 8) != 0)
        return kvq__error(KVQ_EDAMAGED, "log: segment %s has a bad header", name);
    if (kvq__le32_get(h + 8) != KVQ__LOG_FORMAT)
        return kvq__error(KVQ_EDAMAGED, "log: segment %s has format %u, this kvq reads %u", name,
                          kvq__le32_get(h + 8), KVQ__LOG_FORMAT);
    *sb = kvq__le64_get(h + 24);
    if (*sb < KVQ__LOG_SEG_MIN || *sb % 4096 != 0 ||
        kvq__le32_get(h + 12) != kvq__crc32c(0, h + 16, 16))
        return kvq__error(KVQ_EDAMAGED, "log: segment %s has a bad header", name);
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
        if ((rc = seg_make(log, 1)) != 0)
            return rc;
        low = 1;
    } else if ((rc = read_seg_bytes(log, low, &log->sb)) != 0) {
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
        seg_file *s = seg_get(log, s_i, &rc);
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
    seg_forget_all(log);
    pthread_mutex_unlock(&log->seg_mu);
    if (rc != 0)
        return rc;
    /* Segments before the start are left from a checkpoint whose release did not finish:
     * they become spares (or go). */
    if (!log->read_only) {
        unsigned int nspare = 0;
        char tmp[256];
        spare_find(log, tmp, sizeof tmp, &nspare);
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
        seg_close(log, &log->segs[i]);
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

/* ---- append, sync ---- */

int kvq__log_lock(kvq__log *log)
{
    if (log == NULL || log->read_only)
        return kvq__error(KVQ_EINVAL, "log: not writable");
    return robust_lock(&log->shm->append_mu);
}

void kvq__log_unlock(kvq__log *log)
{
    pthread_mutex_unlock(&log->shm->append_mu);
}

/* Writes a record at the tail with one pwritev; lock held. */
static int put_record(kvq__log *log,
                      seg_file *s,
                      uint32_t type,
                      const void *data,
                      size_t len,
                      uint64_t *lsn_out,
                      uint64_t *end_out)
{
    log_shm *sh = log->shm;
    uint64_t lsn = sh->tail;
    uint8_t h[KVQ__LOG_REC_HEADER];
    static const uint8_t pad[8];
    uint64_t synced = __atomic_load_n(&sh->synced, __ATOMIC_ACQUIRE);
    rec_header(h, sh->tail_crc, type, lsn, synced, data, len);
    size_t total = sizeof h + (size_t)align8(len);
    /* One contiguous buffer, one pwrite: the record reaches the file in one system call. */
    if (total > log->wcap) {
        size_t cap = log->wcap ? log->wcap : 4096;
        while (cap < total)
            cap *= 2;
        uint8_t *b = kvq__realloc(log->wbuf, cap);
        if (b == NULL)
            return kvq__error(KVQ_ENOMEM, "log: out of memory");
        log->wbuf = b;
        log->wcap = cap;
    }
    memcpy(log->wbuf, h, sizeof h);
    if (len)
        memcpy(log->wbuf + sizeof h, data, len);
    memcpy(log->wbuf + sizeof h + len, pad, (size_t)(align8(len) - len));
    HOOK("append.before");
    log->wrote = 1;
    off_t off = (off_t)(lsn % log->sb);
    ssize_t w;
    do {
        w = pwrite(s->fd, log->wbuf, total, off);
    } while (w < 0 && errno == EINTR);
    if (w != (ssize_t)total) {
        if (w >= 0)
            errno = EIO;
        return sys_err(KVQ_EIO, "write", "log record");
    }
    log->st.pwrites++;
    HOOK("append.after_pwrite");
    sh->tail_crc = kvq__le32_get(h + 4);
    __atomic_store_n(&sh->tail, lsn + total, __ATOMIC_RELEASE);
    __atomic_add_fetch(&sh->tail_gen, 1, __ATOMIC_RELEASE);
    if (__atomic_load_n(&sh->tail_waiters, __ATOMIC_ACQUIRE))
        futex_wake(&sh->tail_gen);
    HOOK("append.after_tail");
    if (lsn_out)
        *lsn_out = lsn;
    if (end_out)
        *end_out = lsn + total;
    return 0;
}

int kvq__log_append_locked(kvq__log *log,
                           uint32_t type,
                           const void *data,
                           size_t len,
                           uint64_t *lsn_out,
                           uint64_t *end_out)
{
    if (log == NULL || (data == NULL && len > 0) || type < KVQ__LOG_REC_BATCH)
        return kvq__error(KVQ_EINVAL, "log: bad append");
    uint64_t need = KVQ__LOG_REC_HEADER + align8(len);
    if (need + KVQ__LOG_SEG_HEADER + KVQ__LOG_REC_HEADER > log->sb)
        return kvq__error(KVQ_EINVAL, "log: a record of %zu bytes does not fit in a segment", len);
    log->wrote = 0;
    if (__atomic_load_n(&log->shm->sync_failed, __ATOMIC_ACQUIRE))
        return kvq__error(KVQ_EIO, "log: an earlier sync failed; reopen the database");
    log_shm *sh = log->shm;
    int rc = 0;
    pthread_mutex_lock(&log->seg_mu);
    uint64_t seq = seg_of(log, sh->tail);
    seg_file *s = seg_get(log, seq, &rc);
    if (s == NULL && rc == KVQ_ENOTFOUND && sh->tail % log->sb == KVQ__LOG_SEG_HEADER) {
        kvq__error_clear();
        if ((rc = seg_make(log, seq)) == 0)
            s = seg_get(log, seq, &rc);
    }
    if (s == NULL)
        goto out;
    if (sh->tail % log->sb + need + KVQ__LOG_REC_HEADER > log->sb) {
        /* The record does not fit: close this segment with a SEGEND record and go on in the
         * next one, made ready (and its name synced) before anything is written into it. */
        if ((rc = seg_make(log, seq + 1)) != 0)
            goto out;
        uint64_t e;
        if ((rc = put_record(log, s, KVQ__LOG_REC_SEGEND, NULL, 0, NULL, &e)) != 0)
            goto out;
        (void)e;
        __atomic_store_n(&sh->tail, (seq + 1) * log->sb + KVQ__LOG_SEG_HEADER, __ATOMIC_RELEASE);
        s = seg_get(log, seq + 1, &rc);
        if (s == NULL)
            goto out;
    }
    rc = put_record(log, s, type, data, len, lsn_out, end_out);
    if (rc == 0)
        log->st.records++;
out:
    pthread_mutex_unlock(&log->seg_mu);
    return rc;
}

int kvq__log_sync(kvq__log *log, uint64_t lsn, int *issued)
{
    if (issued)
        *issued = 0;
    if (log == NULL || log->read_only)
        return kvq__error(KVQ_EINVAL, "log: not writable");
    log_shm *sh = log->shm;
    if (__atomic_load_n(&sh->synced, __ATOMIC_ACQUIRE) >= lsn)
        return 0;
    /* Wait for the sync at work (it may cover lsn), but not for long: a syncer that is stopped
     * (SIGSTOP, a debugger) must not hold up every committer. Past the patience, sync alone. */
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += SYNC_PATIENCE_NS;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    int rc = 0, locked = 1;
    int e = pthread_mutex_timedlock(&sh->sync_mu, &dl);
    if (e == EOWNERDEAD)
        pthread_mutex_consistent(&sh->sync_mu);
    else if (e == ETIMEDOUT)
        locked = 0;
    else if (e != 0)
        return kvq__error(KVQ_EIO, "log: shared lock: %s", strerror(e));
    if (__atomic_load_n(&sh->sync_failed, __ATOMIC_ACQUIRE)) {
        rc = kvq__error(KVQ_EIO, "log: an earlier sync failed; reopen the database");
        goto out;
    }
again:;
    uint64_t from = __atomic_load_n(&sh->synced, __ATOMIC_ACQUIRE);
    if (from >= lsn)
        goto out;
    /* Everything written so far: one fdatasync per segment it spans (one, but at a switch). */
    uint64_t to = __atomic_load_n(&sh->tail, __ATOMIC_ACQUIRE);
    HOOK("sync.before");
    /* The files to sync, taken under seg_mu (dup'ed: the cache may close its own), synced
     * outside it, so that readers of the log are not held up by the disk. */
    int fds[4], nfd = 0;
    pthread_mutex_lock(&log->seg_mu);
    /* The log before `first` was released: a checkpoint, synced, holds it (records written
     * but not yet synced included), and its segments may be gone. Read under seg_mu, which
     * the release holds while it renames them. */
    uint64_t first = __atomic_load_n(&sh->first, __ATOMIC_ACQUIRE);
    if (from < first) {
        uint64_t cur = from;
        while (cur < first && !__atomic_compare_exchange_n(&sh->synced, &cur, first, 0,
                                                           __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        }
        from = first;
        if (from >= lsn || from >= to) {
            pthread_mutex_unlock(&log->seg_mu);
            goto out;
        }
    }
    for (uint64_t seq = seg_of(log, from); seq <= seg_of(log, to - 1) && nfd < 4; seq++) {
        seg_file *s = seg_get(log, seq, &rc);
        if (s == NULL)
            break;
        if ((fds[nfd] = dup(s->fd)) < 0) {
            if (errno != EMFILE && errno != ENFILE) {
                rc = sys_err(KVQ_EIO, "dup", "log segment");
                break;
            }
            /* Out of descriptors: sync the cached file itself, holding seg_mu (readers of the
             * log wait for the disk this once) rather than leave the commit unknown. */
            if (issued)
                *issued = 1;
            if (fdatasync(s->fd) != 0) {
                rc = sys_err(KVQ_EIO, "sync", "log segment");
                __atomic_store_n(&sh->sync_failed, 1, __ATOMIC_RELEASE);
                break;
            }
            __atomic_add_fetch(&log->st.syncs, 1, __ATOMIC_RELAXED);
            fds[nfd] = -1;
        }
        nfd++;
    }
    pthread_mutex_unlock(&log->seg_mu);
    if (rc == 0 && seg_of(log, from) + (uint64_t)nfd <= seg_of(log, to - 1))
        to = (seg_of(log, from) + (uint64_t)nfd) * log->sb; /* the rest at the next sync */
    for (int i = 0; i < nfd; i++) {
        if (fds[i] < 0)
            continue; /* synced above */
        if (rc == 0) {
            /* issued says that fdatasync ran, failed or not: the engine learns from a failed
             * one that a repair is due before the log can be trusted again (store.h). */
            if (issued)
                *issued = 1;
            if (fdatasync(fds[i]) != 0) {
                rc = sys_err(KVQ_EIO, "sync", "log segment");
                __atomic_store_n(&sh->sync_failed, 1, __ATOMIC_RELEASE);
            } else {
                __atomic_add_fetch(&log->st.syncs, 1, __ATOMIC_RELAXED);
            }
        }
        close(fds[i]);
    }
    if (rc == 0) {
        HOOK("sync.after");
        /* a solo syncer may race with the holder: the synced position only moves forward */
        uint64_t cur = __atomic_load_n(&sh->synced, __ATOMIC_ACQUIRE);
        while (cur < to && !__atomic_compare_exchange_n(&sh->synced, &cur, to, 0, __ATOMIC_ACQ_REL,
                                                        __ATOMIC_ACQUIRE)) {
        }
        if (nfd > 0 && to < lsn)
            goto again; /* more segments than one round takes */
    }
out:
    if (locked)
        pthread_mutex_unlock(&sh->sync_mu);
    return rc;
}

int kvq__log_append_wrote(kvq__log *log)
{
    return log != NULL && log->wrote;
}

int kvq__log_sync_failed(kvq__log *log)
{
    return log != NULL && __atomic_load_n(&log->shm->sync_failed, __ATOMIC_ACQUIRE) != 0;
}

int kvq__log_repaired(kvq__log *log, uint64_t covered)
{
    if (log == NULL || log->read_only)
        return kvq__error(KVQ_EINVAL, "log: not writable");
    log_shm *sh = log->shm;
    int rc = robust_lock(&sh->append_mu);
    if (rc != 0)
        return rc;
    uint64_t tail = sh->tail;
    if (__atomic_load_n(&sh->sync_failed, __ATOMIC_ACQUIRE)) {
        if (covered < tail) {
            rc = kvq__error(KVQ_EIO, "log: the repair covers %llu of %llu",
                            (unsigned long long)covered, (unsigned long long)tail);
        } else {
            __atomic_store_n(&sh->synced, tail, __ATOMIC_RELEASE);
            __atomic_store_n(&sh->sync_failed, 0, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&sh->append_mu);
    return rc;
}

/* ---- group commit ---- */

static int buf_reserve(kvq__log *log, size_t need)
{
    if (need <= log->buf_cap)
        return 0;
    size_t cap = log->buf_cap ? log->buf_cap : 4096;
    while (cap < need)
        cap *= 2;
    uint8_t *b = kvq__realloc(log->buf, cap);
    if (b == NULL)
        return kvq__error(KVQ_ENOMEM, "log: out of memory");
    log->buf = b;
    log->buf_cap = cap;
    return 0;
}

#define GC_MAX_REQS  256
#define GC_MAX_BYTES (8u << 20)

/* The leader's turn: take pending requests, write them as one record, then sync it. */
static void lead(kvq__log *log, kvq__log_build_fn build, void *arg)
{
    kvq__log_req *reqs[GC_MAX_REQS];
    size_t n = 0, bytes = 0;
    while (log->q_head && n < GC_MAX_REQS) {
        kvq__log_req *r = log->q_head;
        if (n > 0 && bytes + r->len + 8 > GC_MAX_BYTES)
            break;
        log->q_head = r->next;
        reqs[n++] = r;
        bytes += align8(r->len + 4);
    }
    if (log->q_head == NULL)
        log->q_tail = NULL;
    pthread_mutex_unlock(&log->gc_mu);

    uint64_t lsn = 0, end = 0;
    int rc = kvq__log_lock(log);
    if (rc == 0) {
        for (size_t i = 0; i < n; i++)
            reqs[i]->rc = 0;
        if (build)
            rc = build(arg, reqs, n);
        size_t len = 0;
        if (rc == 0) {
            for (size_t i = 0; i < n; i++)
                if (reqs[i]->rc == 0)
                    len += (size_t)align8(4 + reqs[i]->len);
            rc = buf_reserve(log, len ? len : 1);
        }
        if (rc == 0 && len > 0) {
            size_t p = 0;
            for (size_t i = 0; i < n; i++) {
                if (reqs[i]->rc != 0)
                    continue;
                kvq__le32_put(log->buf + p, (uint32_t)reqs[i]->len);
                if (reqs[i]->len)
                    memcpy(log->buf + p + 4, reqs[i]->data, reqs[i]->len);
                size_t step = (size_t)align8(4 + reqs[i]->len);
                memset(log->buf + p + 4 + reqs[i]->len, 0, step - 4 - reqs[i]->len);
                p += step;
            }
            rc = kvq__log_append_locked(log, KVQ__LOG_REC_BATCH, log->buf, len, &lsn, &end);
            if (rc == 0)
                log->st.batches_entries += n;
        }
        kvq__log_unlock(log);
    }
    /* The next leader may write its batch while this one syncs. */
    pthread_mutex_lock(&log->gc_mu);
    log->leader = 0;
    pthread_cond_broadcast(&log->gc_cv);
    pthread_mutex_unlock(&log->gc_mu);
    if (rc == 0 && end > 0)
        rc = kvq__log_sync(log, end, NULL);
    pthread_mutex_lock(&log->gc_mu);
    for (size_t i = 0; i < n; i++) {
        if (rc != 0 && reqs[i]->rc == 0)
            reqs[i]->rc = rc;
        reqs[i]->lsn = lsn;
        reqs[i]->end = end;
        reqs[i]->done = 1;
    }
    pthread_cond_broadcast(&log->gc_cv);
}

int kvq__log_group_commit(kvq__log *log, kvq__log_req *req, kvq__log_build_fn build, void *arg)
{
    if (log == NULL || req == NULL || (req->data == NULL && req->len > 0) ||
        req->len > GC_MAX_BYTES || log->read_only)
        return kvq__error(KVQ_EINVAL, "log: bad commit request");
    req->next = NULL;
    req->done = 0;
    req->rc = 0;
    pthread_mutex_lock(&log->gc_mu);
    if (log->q_tail)
        log->q_tail->next = req;
    else
        log->q_head = req;
    log->q_tail = req;
    while (!req->done) {
        if (!log->leader) {
            log->leader = 1;
            lead(log, build, arg); /* returns with gc_mu held */
        } else {
            pthread_cond_wait(&log->gc_cv, &log->gc_mu);
        }
    }
    pthread_mutex_unlock(&log->gc_mu);
    return req->rc;
}

int kvq__log_batch_next(
    const uint8_t *payload, size_t len, size_t *pos, const uint8_t **entry, size_t *entry_len)
{
    if (payload == NULL || pos == NULL || entry == NULL || entry_len == NULL)
        return -1;
    if (*pos >= len)
        return 0;
    if (len - *pos < 4)
        return -1;
    uint32_t n = kvq__le32_get(payload + *pos);
    if ((uint64_t)n > len - *pos - 4)
        return -1;
    *entry = payload + *pos + 4;
    *entry_len = n;
    *pos +=
        (size_t)align8(4 + (uint64_t)n) < len - *pos ? (size_t)align8(4 + (uint64_t)n) : len - *pos;
    return 1;
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
    spare_find(log, tmp, sizeof tmp, &nspare);
    pthread_mutex_lock(&log->seg_mu);
    for (uint64_t seq = seg_of(log, first); seq < seg_of(log, keep_lsn); seq++) {
        seg_forget(log, seq);
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

int kvq__log_spare_ready(kvq__log *log)
{
    char name[256];
    return log != NULL && spare_find(log, name, sizeof name, NULL);
}

int kvq__log_spare_wanted(kvq__log *log)
{
    return log != NULL && __atomic_exchange_n(&log->spare_wanted, 0, __ATOMIC_ACQ_REL);
}
