/* Owned byte strings and key ranges (ranges.c): the vocabulary shared by the embedded engine
 * and its storages (store.h). Nothing here knows about a storage. */
#ifndef KVQ_EMB_RANGES_H
#define KVQ_EMB_RANGES_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

/* A byte string owned by the engine. */
typedef struct emb_str {
    uint8_t *p;
    size_t n;
} emb_str;

/* A half-open key range [b, e). */
typedef struct emb_range {
    emb_str b, e;
} emb_range;

/* Memory freed all at once (arena.c): a transaction's strings and ranges, and what its reads
 * hand out, valid until the transaction is reset. */
typedef struct emb_arena_block {
    struct emb_arena_block *next;
    size_t used, cap;
    uint8_t data[];
} emb_arena_block;

typedef struct emb_arena {
    emb_arena_block *head;
} emb_arena;

/* n bytes, 8-aligned, valid until emb_arena_free; NULL when out of memory. */
void *emb_arena_alloc(emb_arena *a, size_t n);
void emb_arena_free(emb_arena *a);

/* Ranges own their strings (one allocation each) unless arena is set: their strings then come
 * from that arena and are never freed one by one (freeing the ranges frees only the array), so
 * emb_ranges_add_lent may also store strings that live in the arena without copying them. A
 * zeroed emb_ranges owns its strings. */
typedef struct emb_ranges {
    emb_range *v;
    size_t n, cap;
    emb_arena *arena;
} emb_ranges;

int emb_str_set(emb_str *s, const uint8_t *p, size_t n);
void emb_str_free(emb_str *s);
int emb_ranges_add(emb_ranges *r, const uint8_t *b, size_t bn, const uint8_t *e, size_t en);
/* Adds [b, e) without copying the strings when r has an arena (they must then stay valid until
 * that arena is freed); copies them otherwise. */
int emb_ranges_add_lent(emb_ranges *r, const uint8_t *b, size_t bn, const uint8_t *e, size_t en);
/* Frees the ranges (the array too); the arena, if any, stays set. */
void emb_ranges_free(emb_ranges *r);
void emb_ranges_clear(emb_ranges *r);
/* Sorts and merges overlapping or touching ranges in place. */
void emb_ranges_normalize(emb_ranges *r);
/* Adds [b, e) to normalized ranges, keeping them normalized (sorted, disjoint, not touching):
 * a binary search, then a merge with the neighbours it overlaps; O(1) moves when ranges come
 * in key order. */
int emb_ranges_insert(emb_ranges *r, const uint8_t *b, size_t bn, const uint8_t *e, size_t en);
/* Removes [b, e) from ranges (normalized or not); a range it cuts in two leaves its right part
 * at the end. */
int emb_ranges_subtract(emb_ranges *r, const uint8_t *b, size_t bn, const uint8_t *e, size_t en);
/* With r normalized: does [b, e) intersect any range? */
int emb_ranges_intersects(
    const emb_ranges *r, const uint8_t *b, size_t bn, const uint8_t *e, size_t en);
/* With r normalized: is key inside a range? */
int emb_ranges_contains(const emb_ranges *r, const uint8_t *k, size_t kn);

/* Packed write-conflict ranges: the form in which a batch's write ranges reach a storage
 * (store.h, log_append) and in which storages may keep them. A packed list is a sequence of
 * ranges, each (u32 little-endian length, begin bytes, u32 little-endian length, end bytes);
 * an empty list is zero bytes. */

/* Appends the ranges of w to a packed list. 0 or KVQ_ENOMEM. */
int emb_ranges_pack(kvq_buf *out, const emb_ranges *w);
/* Does a packed list intersect reads (normalized)? *hit = 1 if so. A malformed list is
 * KVQ_EDAMAGED ("an entry of the conflict log is malformed"). */
int emb_ranges_packed_intersects(const emb_ranges *reads, const uint8_t *p, size_t n, int *hit);

#endif /* KVQ_EMB_RANGES_H */
