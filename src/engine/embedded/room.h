/* The room the embedded engine keeps and needs on a disk, in one place: reserve.c uses it, and the
 * kvq command's messages (src/cli/report.c) quote it, so that what they say is what the code
 * does. */
#ifndef KVQ_EMB_ROOM_H
#define KVQ_EMB_ROOM_H

/* kvq.reserve: kept free for draining on a full disk (reserve.c). */
#define KVQ__RESERVE_BYTES (8u << 20)
/* Free space beyond the reserve needed before it is taken (back) and drain mode ends: a WAL
 * growing to its checkpoint size (1,000 pages of 4 KiB, store_sqlite.c). */
#define KVQ__RESERVE_MARGIN (4u << 20)
/* kvq.cq, the commit queue: a page of header and 16 slots of 128 KiB (emb.h, EMB_CQ_*;
 * commit_queue.c checks that the two agree). */
#define KVQ__CQ_FILE_BYTES (4096u + 16u * (128u << 10))
/* The small files of a new SQLite database beside them (data.db's first pages, kvq.shm, the
 * WAL's first frames, the marker), rounded up. */
#define KVQ__SQLITE_NEW_FILES (128u << 10)
/* What a new database of the SQLite storage needs free to take pushes. */
#define KVQ__SQLITE_NEW_DB_BYTES                                                           \
    ((unsigned long long)KVQ__CQ_FILE_BYTES + KVQ__SQLITE_NEW_FILES + KVQ__RESERVE_BYTES + \
     KVQ__RESERVE_MARGIN)
/* The log store's new database with segments of s bytes (docs/logstore.md, "A full disk"): its
 * first segment; ckpt.reserve, a segment and a pass's room (1 MiB for a new table), grown an
 * eighth past that; kvq.cq and the small files; the engine's reserve; and free beside them the
 * segment's worth the log store wants, or the reserve's margin when that is more (the engine
 * takes its reserve only with the margin free). 211.3 MiB with the default segments (211
 * measured on tmpfs); with the smallest a small disk gets (KVQ__LOG_SEG_SMALL), 15.8 MiB. */
#define KVQ__LOG_NEW_DB_BYTES(s)                                                            \
    (2ull * (s) + ((s) + (1ull << 20)) / 8 + (1ull << 20) + KVQ__CQ_FILE_BYTES +            \
     KVQ__SQLITE_NEW_FILES + KVQ__RESERVE_BYTES +                                           \
     ((s) > KVQ__RESERVE_MARGIN ? (unsigned long long)(s) : KVQ__RESERVE_MARGIN))

#endif /* KVQ_EMB_ROOM_H */
