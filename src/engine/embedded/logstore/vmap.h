/* The log store's in-memory data: an ordered map of keys to version chains (MVCC), in two skip
 * lists (keys with a value at the newest version; deleted keys whose history is still kept).
 *
 * Each key keeps its values newest first, each tagged with the version of the batch that wrote
 * it (a delete is a tombstone). A read at version v sees, for each key, the newest entry with a
 * version <= v. Versions are applied in increasing order; several mutations of one batch share
 * its version (the later replaces the earlier). kvq__vmap_forget(floor) drops what no read at a
 * version >= floor can see: every entry older than a key's newest entry <= floor, and a key
 * whose only entry left is a tombstone <= floor.
 *
 * Locking is the caller's: mutations and forget under kvq__vmap_wrlock, reads (get, cursors)
 * under kvq__vmap_rdlock, taken per call. A node a cursor has seen is never freed while the
 * cursor's version is >= every floor given to forget (the store pins its open snapshots' versions
 * for that), so a cursor may release the lock between steps; it finds its place again when
 * nodes moved meanwhile.
 *
 * Memory: every node and entry is counted (allocation sizes with their headers); a mutation
 * that would take the count past the limit fails with KVQ_ENOMEM and changes nothing. */
#ifndef KVQ_LOGSTORE_VMAP_H
#define KVQ_LOGSTORE_VMAP_H

#include <stddef.h>
#include <stdint.h>

#include "kvq/common.h"

typedef struct kvq__vmap kvq__vmap;
typedef struct vm_node vm_node;

/* limit: bytes of memory the map may use (0: no limit). */
kvq__vmap *kvq__vmap_new(uint64_t limit);
void kvq__vmap_free(kvq__vmap *m);

void kvq__vmap_rdlock(kvq__vmap *m);
void kvq__vmap_rdunlock(kvq__vmap *m);
void kvq__vmap_wrlock(kvq__vmap *m);
void kvq__vmap_wrunlock(kvq__vmap *m);

/* Mutations at version (>= the newest version applied, else KVQ_EINVAL). clear_range calls
 * fn (if not NULL) with each key it deletes (one that had a value at the newest version). */
int kvq__vmap_set(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen,
                  const uint8_t *val, size_t vlen);
int kvq__vmap_clear(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen);
typedef void (*kvq__vmap_key_fn)(void *arg, const uint8_t *key, size_t klen);
int kvq__vmap_clear_range(kvq__vmap *m, int64_t version, const uint8_t *b, size_t blen,
                          const uint8_t *e, size_t elen, kvq__vmap_key_fn fn, void *arg);
/* A tombstone for key at version whether or not the key has a value (a write's overlay uses it
 * to hide the key from the map below it). */
int kvq__vmap_tombstone(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen);
/* What key's newest entry at version is: 1 a value (*val, borrowed), -1 a tombstone, 0 none. */
int kvq__vmap_probe(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen,
                    kvq_bytes *val);
/* Raises the newest version without a mutation (a batch that wrote nothing). */
void kvq__vmap_set_version(kvq__vmap *m, int64_t version);

/* As kvq__vmap_probe, also giving the version of the entry found (*ever; 0 when none). */
int kvq__vmap_probe_ver(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen,
                        kvq_bytes *val, int64_t *ever);

/* The value of key at version: 1 with *val (borrowed), 0 when absent. */
int kvq__vmap_get(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen,
                  kvq_bytes *val);

/* A cursor over [b, e) at version (e NULL: to the end), forward or reverse. Limits are the
 * caller's: it stops calling next. At an older version than the newest it visits, of the
 * deleted keys, only those deleted after its version (a few steps for the window's graveyard);
 * with `all` it returns every tombstone in the range, and walks them all. */
typedef struct kvq__vmap_cursor {
    kvq__vmap *m;
    int64_t version;
    const uint8_t *b, *e;
    size_t blen, elen;
    int reverse, started, done;
    vm_node *at, *at_grave; /* the next node of each list */
    vm_node *last;          /* the node last returned */
    uint64_t gen;
    /* Set by the caller after init: return tombstones too (as rows with *dead = 1), and the
     * version of each row's entry (kvq__vmap_cursor_next_ver). */
    int all;
} kvq__vmap_cursor;
void kvq__vmap_cursor_init(kvq__vmap_cursor *c, kvq__vmap *m, int64_t version, const uint8_t *b,
                           size_t blen, const uint8_t *e, size_t elen, int reverse);
/* 1 with the next row (borrowed), 0 at the end. */
int kvq__vmap_cursor_next(kvq__vmap_cursor *c, kvq_bytes *key, kvq_bytes *val);

/* kvq__vmap_cursor_next with the row's entry: *dead = 1 for a tombstone (only with c->all),
 * *ever its version. */
int kvq__vmap_cursor_next_ver(kvq__vmap_cursor *c, kvq_bytes *key, kvq_bytes *val, int *dead,
                              int64_t *ever);

/* Drops what no read at a version >= floor can see (see above). */
void kvq__vmap_forget(kvq__vmap *m, int64_t floor);

/* Drops every entry with a version <= floor, the newest of a key's too (the store's table
 * holds them): what is left is the versions after floor. A key left without entries leaves
 * the map. Readers must not look at entries <= floor (a reader whose table snapshot holds
 * version t reads only entries > t, and floor <= t). */
void kvq__vmap_drop(kvq__vmap *m, int64_t floor);

/* Calls fn with every key of the map and its newest entry (dead: a tombstone), in key order
 * within each list (live keys, then deleted ones). */
typedef void (*kvq__vmap_entry_fn)(void *arg, const uint8_t *key, size_t klen,
                                   const uint8_t *val, size_t vlen, int dead);
void kvq__vmap_each(kvq__vmap *m, kvq__vmap_entry_fn fn, void *arg);

/* For tests: 0 when the graveyard's links agree with its nodes (vmap.c, span()), else -1. */
int kvq__vmap_check(kvq__vmap *m);

typedef struct kvq__vmap_stats {
    uint64_t mem;        /* bytes allocated for nodes and entries */
    uint64_t live_bytes; /* keys plus values visible at the newest version */
    uint64_t live_keys;
    uint64_t nodes, entries;
    int64_t version;     /* newest version applied */
    int64_t floor;       /* the last floor given to forget */
    uint64_t limit;
} kvq__vmap_stats;
void kvq__vmap_get_stats(kvq__vmap *m, kvq__vmap_stats *out);
/* The bytes a set of klen/vlen would add at most (for admission before logging). */
uint64_t kvq__vmap_cost(size_t klen, size_t vlen);
uint64_t kvq__vmap_mem(kvq__vmap *m);
uint64_t kvq__vmap_limit(kvq__vmap *m);
int64_t kvq__vmap_version(kvq__vmap *m);

#endif
