/* An in-memory model of a key-value store with FoundationDB's semantics, for the randomized
 * conformance tests: an ordered map of byte strings, with set, clear, clear_range, every atomic
 * operation (FoundationDB's byte rules, API >= 510) and limited range reads in both
 * directions. Small and slow on purpose (a sorted array): it must be obviously right. */
#ifndef KVQ_CONFORMANCE_MODEL_H
#define KVQ_CONFORMANCE_MODEL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <kvq/kvq.h>

#define CF_MODEL_KEY 64
#define CF_MODEL_VAL 64

typedef struct cf_mentry {
    uint8_t k[CF_MODEL_KEY];
    size_t kn;
    uint8_t v[CF_MODEL_VAL];
    size_t vn;
} cf_mentry;

typedef struct cf_model {
    cf_mentry *e;
    size_t n, cap;
} cf_model;

int cf_bytes_cmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn);

/* Puts the bounds of a range in order: swaps the keys a and b (each in a buffer of
 * CF_MODEL_KEY_MAX bytes) when a sorts after b. */
#define CF_MODEL_KEY_MAX 64
void cf_bytes_order(uint8_t *a, size_t *an, uint8_t *b, size_t *bn);

/* The first index whose key is >= k. */
size_t cf_model_lower(const cf_model *m, const uint8_t *k, size_t kn);

cf_mentry *cf_model_find(const cf_model *m, const uint8_t *k, size_t kn);

/* Returns 0, or -1 when the key or value does not fit the model (a bug in the test). */
int cf_model_set(cf_model *m, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn);

void cf_model_clear_range(cf_model *m, const uint8_t *b, size_t bn, const uint8_t *e, size_t en);

void cf_model_clear(cf_model *m, const uint8_t *k, size_t kn);

/* Copies `from` truncated or zero-extended to n bytes. */
void cf_fit(uint8_t *out, const uint8_t *from, size_t from_n, size_t n);

/* FoundationDB's atomic operations (fdbclient/Atomic.h; MIN and AND as MinV2 and AndV2).
 * `present` says whether the key exists; out gets at most old_n + p_n bytes. Returns 1, or 0
 * when the key is absent afterwards (COMPARE_AND_CLEAR). */
int cf_atomic_apply(int present,
                    const uint8_t *old,
                    size_t old_n,
                    kvq_mutation op,
                    const uint8_t *p,
                    size_t p_n,
                    uint8_t *out,
                    size_t *out_n);

int cf_model_atomic(
    cf_model *m, const uint8_t *k, size_t kn, kvq_mutation op, const uint8_t *p, size_t pn);

/* The rows of [b, e) in order (or reverse), at most `limit` (0: all): their indices go to idx
 * (room for m->n); returns the count, and *more = 1 when rows were left out. */
size_t cf_model_range(const cf_model *m,
                      const uint8_t *b,
                      size_t bn,
                      const uint8_t *e,
                      size_t en,
                      int limit,
                      int reverse,
                      size_t *idx,
                      int *more);

int cf_model_copy(cf_model *dst, const cf_model *src);

void cf_model_free(cf_model *m);

#endif /* KVQ_CONFORMANCE_MODEL_H */
