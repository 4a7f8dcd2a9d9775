/* What the SQLite storage (store_sqlite.c) offers beyond store.h, for the log store, whose
 * table it is (logstore/store_log.c): named integers in its meta table, read and written with
 * the data, so that the table can record how far into the log it holds. */
#ifndef KVQ_EMB_STORE_SQLITE_H
#define KVQ_EMB_STORE_SQLITE_H

#include <stdint.h>

#include "store.h"

/* During a write of s (emb_sqlite_store): meta row name = value, committed with the write. */
int kvq__sqlite_meta_put(emb_store *s, const char *name, int64_t value);
/* During a write of s: meta row name (*found = 0 when there is none). */
int kvq__sqlite_meta_get(emb_store *s, const char *name, int64_t *value, int *found);
/* In snapshot c (of emb_sqlite_store): meta row name (*found = 0 when there is none). */
int kvq__sqlite_snap_meta(emb_snap *c, const char *name, int64_t *value, int *found);

/* Copies the WAL into the database file, when no reader needs its frames (never waiting for
 * one), so that the next write starts the WAL again from its beginning (the file keeps its
 * size, up to journal_size_limit: its room stays the database's); the database file is synced.
 * *complete = 0 when a reader kept the WAL (its frames are copied as far as the readers allow:
 * a later call finishes). Not during a write. */
int kvq__sqlite_checkpoint(emb_store *s, int *complete);

/* The bytes of the database's pages in use (its size less its free pages), as its writer sees
 * them. Not while another thread uses the writer. */
int kvq__sqlite_live_bytes(emb_store *s, uint64_t *bytes);

/* The bytes of the database's free pages (room the storage reuses before it grows its file) and
 * of its pages in use, as its writer sees them. Not while another thread uses the writer. */
int kvq__sqlite_room(emb_store *s, uint64_t *free_bytes, uint64_t *live_bytes);

/* Gives the database's free pages back to the file system (VACUUM, then a checkpoint that cuts
 * the file and the WAL, without waiting for readers). Costs a copy of the pages in use, and room
 * for them in the WAL. With the commit lock held and no write open (reserve.c, on a full disk). */
int kvq__sqlite_compact(emb_store *s);

/* Copies the WAL into the database file and cuts the WAL to nothing, without waiting for
 * readers (one that holds its frames leaves it as it is): its room back to the file system,
 * on a full disk. Not during a write. */
int kvq__sqlite_wal_cut(emb_store *s);

/* Salvage (salvage.c): the rows of [begin, end) in key order (reverse = 1: descending), each
 * passed to fn with ok = 1, or ok = 0 (and no value) when it fails its checksum; in a read
 * transaction of its own, on a connection of its own. A page SQLite cannot read ends the scan
 * with its error (KVQ_EDAMAGED for a damaged file); fn's nonzero return ends it with that. */
typedef int (*kvq__sqlite_row_fn)(void *arg, kvq_bytes key, kvq_bytes value, int ok);
int kvq__sqlite_salvage_scan(emb_store *s,
                             const uint8_t *begin,
                             size_t begin_len,
                             const uint8_t *end,
                             size_t end_len,
                             int reverse,
                             kvq__sqlite_row_fn fn,
                             void *arg);

#endif
