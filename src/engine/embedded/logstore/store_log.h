/* The log store (store_log.c): the embedded engine's default storage, behind store.h. */
#ifndef KVQ_LOGSTORE_STORE_LOG_H
#define KVQ_LOGSTORE_STORE_LOG_H

#include <stdint.h>

#include "engine/embedded/store.h"

extern const emb_store_ops emb_log_store;

/* 1 when directory dir (a database) holds a log store (its logstore/ directory). */
int kvq__logstore_present(const char *dir);

/* The engine's drain mode on a full disk (reserve.c), and the log store's own refusal of a
 * batch (space_short), commit lock held, no write open, shortfall (> 0) the bytes it lacks:
 * brings the table up to the newest batch (the drain's pops reach it), gives the table's free
 * pages back to the file system when its pages in use are no more than them and the file
 * system has room for their copy (VACUUM, and a checkpoint that cuts the file and the WAL),
 * else cuts the WAL, and shrinks ckpt.reserve to what the table now needs. 1 when it gave some
 * back. Its own failures are nobody's error (cleared). */
int kvq__logstore_give_back(emb_store *s, uint64_t shortfall);

/* Writes a checkpoint now (tests, and the checkpoint thread). */
int kvq__logstore_checkpoint_now(emb_store *s);

/* mem: the map and the conflict log; map_mem: the map alone, which the limit bounds, and
 * map_peak the most it held after a commit; throttled: commits delayed by memory pressure,
 * throttle_us the microseconds they waited; forced: passes a committer ran at the limit;
 * skips: cursors whose table part started past a known run of rows the map hides (ls_skip),
 * skips_carried those whose run was recorded on an older table, rows_walked the hidden rows
 * cursors stepped over one by one. */
typedef struct kvq__logstore_stats {
    uint64_t mem, live_bytes, live_keys, limit;
    uint64_t map_mem, map_peak, throttled, throttle_us, forced, table_live;
    uint64_t skips, skips_carried, rows_walked;
    uint64_t log_bytes, log_syncs, log_records, checkpoints;
    int64_t applied_version;
} kvq__logstore_stats;
void kvq__logstore_get_stats(emb_store *s, kvq__logstore_stats *out);

#endif
