/* The log store's log: checksummed records appended to preallocated, zero-filled, fixed-size
 * segment files, shared by every process that opens the directory.
 *
 * Positions are log sequence numbers (LSNs): segment seq * segment_bytes + offset in the segment.
 * A record is written with one pwrite at the log's tail, under a lock shared by every process
 * (a robust mutex in log.shm), and made durable by one fdatasync that covers every record
 * written before it, whichever process wrote it (kvq__log_sync). Threads of one process share
 * a leader (kvq__log_group_commit): it puts every pending request of its process into one
 * record, so a batch of commits is one pwrite, and the sync is shared across processes.
 *
 * On-disk format (KVQ__LOG_FORMAT, docs/logstore.md):
 *   log-<seq as 16 hex digits>.seg  a segment: a 4096-byte header, then records
 *   spare-<n>.seg                   a zero-filled or recycled file, ready to become a segment
 *   log.shm                         shared state (tail, synced position, locks); rebuilt by
 *                                   recovery when no process has the log open
 *   log.lock                        flock: held shared by every process with the log open
 *   log.init                        flock: serialises opening and recovery
 *
 * The first open with no other process alive recovers: it scans from the start LSN it is given
 * (the checkpoint's) and cuts the log at the first record that is torn, bit-flipped or stale
 * (left by an earlier use of a recycled file, or past an earlier cut). A record also carries
 * the log's synced position when it was written: a valid record past the cut that says the cut
 * position was already synced proves damage inside the durable log, reported as KVQ_EDAMAGED
 * rather than silently dropping acknowledged commits. */
#ifndef KVQ_LOGSTORE_LOG_H
#define KVQ_LOGSTORE_LOG_H

#include <stddef.h>
#include <stdint.h>

#define KVQ__LOG_FORMAT     1
#define KVQ__LOG_SEG_HEADER 4096u
#define KVQ__LOG_REC_HEADER 40u
/* The default segment size; a record (a batch of commits) must fit in one segment. */
#define KVQ__LOG_SEG_DEFAULT (64u << 20)
#define KVQ__LOG_SEG_MIN     (64u << 10)
/* A new database on a disk with less than 32 default segments free gets segments of a 32nd of
 * the free space (a power of two), no smaller than this (store_log.c, new_segment_bytes). */
#define KVQ__LOG_SEG_SMALL (256u << 10)

/* Record types. Types below 16 belong to the log itself. */
enum {
    KVQ__LOG_REC_SEGEND = 1, /* the rest of this segment is unused: the log goes on in the next */
    KVQ__LOG_REC_BATCH = 16, /* a batch of entries (kvq__log_group_commit) */
    KVQ__LOG_REC_USER = 32   /* first type free for the store */
};

typedef struct kvq__log kvq__log;

typedef struct kvq__log_options {
    uint64_t segment_bytes; /* 0: KVQ__LOG_SEG_DEFAULT; a multiple of 4096, >= KVQ__LOG_SEG_MIN */
    unsigned int file_mode; /* 0: 0600 */
    int read_only;          /* open without writing (no recovery that would write) */
    unsigned int spares;    /* zero-filled segments kept ready (0: 1) */
} kvq__log_options;

/* One record, as the scan and the reader hand it out. The payload is borrowed for the callback. */
typedef struct kvq__log_rec {
    uint64_t lsn, end; /* its position and the position after it */
    uint32_t type;
    const uint8_t *data;
    size_t len;
} kvq__log_rec;

/* Called for each record; a nonzero return stops and is returned. */
typedef int (*kvq__log_rec_fn)(void *arg, const kvq__log_rec *rec);

/* Opens (creating when absent and not read-only) the log in directory dir, which must exist.
 * start_lsn is where the log begins (0: the first record ever written); every record from there
 * to the tail is passed to fn (may be NULL), in order. When this process is the only one with
 * the log open, the tail is found by scanning and a torn tail is cut; otherwise the tail is the
 * shared one. Errors: KVQ_EINVAL, KVQ_EIO, KVQ_ENOSPC, KVQ_EDAMAGED, KVQ_ENOMEM, or fn's code. */
int kvq__log_open(kvq__log **out,
                  const char *dir,
                  const kvq__log_options *opt,
                  uint64_t start_lsn,
                  kvq__log_rec_fn fn,
                  void *arg);
void kvq__log_close(kvq__log *log);

/* The cross-process append lock; the holder may append. A holder that died is detected and its
 * unfinished record overwritten. */
int kvq__log_lock(kvq__log *log);
void kvq__log_unlock(kvq__log *log);

/* Appends one record with one pwrite (two when it starts a new segment), lock held. The record
 * is written but not yet durable: call kvq__log_sync(*end_out). Errors: KVQ_EINVAL (too large
 * for a segment), KVQ_EIO, KVQ_ENOSPC (no segment could be made). */
int kvq__log_append_locked(kvq__log *log,
                           uint32_t type,
                           const void *data,
                           size_t len,
                           uint64_t *lsn_out,
                           uint64_t *end_out);

/* Makes every record that ends at or before lsn durable. One fdatasync serves every process
 * waiting at once. After a failed sync every later sync fails too (the kernel may have dropped
 * the pages): KVQ_EIO. *issued (may be NULL) is 1 when this call ran fdatasync. */
int kvq__log_sync(kvq__log *log, uint64_t lsn, int *issued);

/* After a failed sync: the log before covered is no longer needed (a checkpoint holds it,
 * written and synced by other means). When covered reaches the tail, the log is usable again:
 * everything written is taken as synced and appends resume. KVQ_EIO when it does not. */
int kvq__log_repaired(kvq__log *log, uint64_t covered);

/* 1 when the last kvq__log_append_locked of this handle reached its pwrite: after a failure,
 * the record may be on disk whole (its outcome is unknown); 0: nothing was written. */
int kvq__log_append_wrote(kvq__log *log);

/* 1 while a failed sync (of any process) has not been repaired. */
int kvq__log_sync_failed(kvq__log *log);

/* Group commit. Each thread's request is one entry; the leader puts the pending entries of
 * this process into one KVQ__LOG_REC_BATCH record (entries are u32 length + bytes, 8-aligned),
 * writes it with one pwrite and syncs it. build, when not NULL, is called by the leader under
 * the append lock with the batch's requests in order, before they are encoded: it may refuse a
 * request (its rc nonzero: it is not written) or rewrite its data (for instance to assign
 * versions); its return value, when nonzero, fails the whole batch. */
typedef struct kvq__log_req {
    const void *data;
    size_t len;
    int rc;            /* the request's outcome */
    uint64_t lsn, end; /* the record it was written in */
    struct kvq__log_req *next;
    int done;
    void *user;
} kvq__log_req;

typedef int (*kvq__log_build_fn)(void *arg, kvq__log_req **reqs, size_t n);

int kvq__log_group_commit(kvq__log *log, kvq__log_req *req, kvq__log_build_fn build, void *arg);

/* Iterates over the entries of a KVQ__LOG_REC_BATCH record's payload: returns 1 and sets
 * entry and entry_len to the next one, 0 at the end, -1 when the payload is malformed. */
int kvq__log_batch_next(
    const uint8_t *payload, size_t len, size_t *pos, const uint8_t **entry, size_t *entry_len);

/* Reads the records from lsn (a record boundary) up to the shared tail, passing each to fn.
 * *next_out is where the next read starts. KVQ_ENOTFOUND when lsn is before the start of the
 * log (recycled since): the reader must start again from a checkpoint. */
int kvq__log_read(kvq__log *log, uint64_t lsn, kvq__log_rec_fn fn, void *arg, uint64_t *next_out);

/* The shared positions. */
uint64_t kvq__log_tail(kvq__log *log);
uint64_t kvq__log_synced(kvq__log *log);
uint64_t kvq__log_first(kvq__log *log);
uint64_t kvq__log_segment_bytes(kvq__log *log);
/* The futex word bumped after each append (for tailers that sleep), and a wait on it. */
uint32_t kvq__log_tail_gen(kvq__log *log);
void kvq__log_wait_tail(kvq__log *log, uint32_t seen_gen, int64_t timeout_us);

/* Declares that the log before keep_lsn is no longer needed (a checkpoint covers it): whole
 * segments before it become spares (renamed, their headers rewritten when reused) or are
 * removed past the number of spares kept. */
int kvq__log_release(kvq__log *log, uint64_t keep_lsn);

/* Makes sure a spare segment is ready, off the commit path (the appender otherwise creates one
 * when it needs it). */
int kvq__log_prepare_spare(kvq__log *log);

/* 1 when a spare segment is ready (a look at the directory). */
int kvq__log_spare_ready(kvq__log *log);

/* 1 (once) when this handle used up a spare since the last call: time to prepare another. */
int kvq__log_spare_wanted(kvq__log *log);

/* Statistics of this handle (tests and benchmarks). */
typedef struct kvq__log_stats {
    uint64_t records, pwrites, syncs, segments_created, segments_recycled, batches_entries;
    uint64_t recovered_records, cut_bytes; /* the last recovery's */
} kvq__log_stats;
void kvq__log_get_stats(kvq__log *log, kvq__log_stats *out);

/* Calls fn(arg, name) for each entry of directory dir_fd but "." and "..", until fn returns
 * nonzero. It reads the directory with getdents64 on a descriptor of its own, closed with
 * close(): no DIR stream, whose closedir closes its descriptor out of sight of a layer that
 * interposes close (the power-cut test's keeps a table of descriptors). Returns 0, or -1 with
 * errno set. */
int kvq__dir_each(int dir_fd, int (*fn)(void *arg, const char *name), void *arg);

/* Tests only: the shared positions of the log in dir, read from log.shm without opening the
 * log (so without recovery), for a test that simulates a power cut. */
int kvq__log_peek(const char *dir, uint64_t *synced, uint64_t *tail, uint64_t *seg_bytes);

/* Tests only: a crash point. When set, the process calls it with a step name ("append.before",
 * "append.after_pwrite", "append.after_tail", "sync.before", "sync.after", "segment.renamed",
 * "release.renamed"...) and it may kill the process there. */
extern void (*kvq__log_test_hook)(const char *step);

#endif
