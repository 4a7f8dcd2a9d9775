/* The log store's checkpoints: a snapshot of the live data at one version, written off the
 * commit path into a file of its own, so that the log before it can be recycled and recovery
 * reads the snapshot plus the log after it.
 *
 * File ckpt-<version as 16 hex digits>.kvq (format KVQ__CKPT_FORMAT, docs/logstore.md):
 *   header, 64 bytes: "KVQCKPT\0", u32 format, u32 crc of bytes 16..64, i64 version,
 *                     u64 lsn (where the log's replay starts), u32 prev (reserved), zeros
 *   items:            u32 key length, u32 value length, key, value; in key order
 *   trailer, 32 bytes: "KVQCKEND", u64 items, u64 item bytes, u32 crc of the items,
 *                     u32 crc of the trailer's first 28 bytes
 * It is written as ckpt.tmp, synced, renamed and the directory synced; only then is the log
 * before it released and older checkpoints removed. The newest checkpoint is the one recovery
 * uses; a damaged newest checkpoint is KVQ_EDAMAGED (never an older one silently). */
#ifndef KVQ_LOGSTORE_CKPT_H
#define KVQ_LOGSTORE_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/embedded/logstore/vmap.h"

#define KVQ__CKPT_FORMAT 1

typedef struct kvq__ckpt_info {
    int64_t version;
    uint64_t lsn;
    uint64_t items, bytes;
} kvq__ckpt_info;

/* Writes a checkpoint of m as of version (which the caller keeps readable while this runs:
 * the map's lock is taken per item) whose replay starts at lsn, in directory dir_fd. Then
 * removes older checkpoints. Errors: KVQ_EIO, KVQ_ENOSPC, KVQ_EPERM. */
int kvq__ckpt_write(int dir_fd, kvq__vmap *m, int64_t version, uint64_t lsn, unsigned int mode,
                    kvq__ckpt_info *info);

/* Finds the newest checkpoint in dir_fd: 1 with *info, 0 when there is none (a leftover
 * ckpt.tmp is ignored). Checks only its header. */
int kvq__ckpt_find(int dir_fd, kvq__ckpt_info *info, int *found);

/* Loads the newest checkpoint into m (empty) at its version, checking every byte; a damaged
 * file is KVQ_EDAMAGED. *found = 0 when there is none (m untouched). */
int kvq__ckpt_load(int dir_fd, kvq__vmap *m, kvq__ckpt_info *info, int *found);

/* Tests only: called at the steps of a checkpoint ("ckpt.written", "ckpt.renamed"). */
extern void (*kvq__ckpt_test_hook)(const char *step);

#endif
