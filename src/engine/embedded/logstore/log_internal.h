/* The log's internals (log.h is its interface), shared by its files: log_seg.c (the segment
 * files: making, caching, spares), log_append.c (the append lock, appending, the shared sync,
 * group commit) and log.c (opening, recovery, reading, release). Calls go one way: log.c may
 * call log_append.c; both call log_seg.c, which calls neither. */
#ifndef KVQ_LOGSTORE_LOG_INTERNAL_H
#define KVQ_LOGSTORE_LOG_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/embedded/logstore/log.h"
#include "util/util.h"

#define HOOK(s)                    \
    do {                           \
        if (kvq__log_test_hook)    \
            kvq__log_test_hook(s); \
    } while (0)

#define REC_MAGIC 0x5251564bu /* "KVQR" little-endian */
#define SHM_MAGIC 0x4d53514bu

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

static inline uint64_t align8(uint64_t n)
{
    return (n + 7u) & ~(uint64_t)7u;
}

/* Record header, KVQ__LOG_REC_HEADER bytes:
 *   0 magic  4 crc (of bytes 8..40 and the payload)  8 prev (the previous record's crc)
 *  12 type  16 lsn (its own position)  24 synced (the log's synced position when written)
 *  32 len (payload bytes)  36 reserved (0)
 * then the payload, padded with zeros to a multiple of 8. */
static inline uint32_t rec_crc(const uint8_t *hdr, const void *data, size_t len)
{
    uint32_t c = kvq__crc32c(0, hdr + 8, KVQ__LOG_REC_HEADER - 8);
    return kvq__crc32c(c, data, len);
}

static inline uint64_t seg_of(const kvq__log *log, uint64_t lsn)
{
    return lsn / log->sb;
}

static inline void seg_name(char *buf, size_t cap, uint64_t seq)
{
    snprintf(buf, cap, "log-%016llx.seg", (unsigned long long)seq);
}

static inline int sys_err(int err, const char *what, const char *name)
{
    int e = errno;
    if (e == ENOSPC || e == EDQUOT)
        return kvq__error(KVQ_ENOSPC, "log: %s %s: %s", what, name, strerror(e));
    if (e == EACCES || e == EPERM || e == EROFS)
        return kvq__error(KVQ_EPERM, "log: %s %s: %s", what, name, strerror(e));
    return kvq__error(err, "log: %s %s: %s", what, name, strerror(e));
}

/* ---- segment files (log_seg.c) ---- */

void kvq__log_seg_close(kvq__log *log, seg_file *s);
/* Forgets this handle's open file of segment seq (replaced on disk). Caller holds seg_mu. */
void kvq__log_seg_forget(kvq__log *log, uint64_t seq);
void kvq__log_seg_forget_all(kvq__log *log);
/* The open segment seq, opened and mapped on first use; NULL (with the error set) when it does
 * not exist or is not a segment of this log. Caller holds seg_mu. */
seg_file *kvq__log_seg_get(kvq__log *log, uint64_t seq, int *rc_out);
/* Finds a spare file; returns 1 with its name, 0 when there is none. */
int kvq__log_spare_find(kvq__log *log, char *name, size_t cap, unsigned int *count);
/* Makes segment seq from a spare (or a new file), its header written and synced and its name
 * durable in the directory. */
int kvq__log_seg_make(kvq__log *log, uint64_t seq);
/* The segment size of an existing log, from the header of segment seq. */
int kvq__log_read_seg_bytes(kvq__log *log, uint64_t seq, uint64_t *sb);

#endif
