/* Internal helpers shared by every part of kvq: allocation, error detail, time, CRC32C. */
#ifndef KVQ_UTIL_H
#define KVQ_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "kvq/common.h"
#include "kvq/error.h"

#if defined(__GNUC__)
#define KVQ__PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define KVQ__PRINTF(f, a)
#endif

void *kvq__malloc(size_t n);
void *kvq__calloc(size_t n, size_t size);
void *kvq__realloc(void *p, size_t n);
void kvq__free(void *p);
/* Copies n bytes into a new allocation (n may be 0; the result is still a valid pointer). */
void *kvq__memdup(const void *p, size_t n);
char *kvq__strdup(const char *s);
/* The key just after `key` (key + 0x00, the end of the point range [key, key + 0x00)): built in
 * `stack` when it has room (cap bytes), else in a new allocation; NULL when out of memory.
 * Release it with kvq__key_succ_free(result, stack). */
uint8_t *kvq__key_succ(uint8_t *stack, size_t cap, const uint8_t *key, size_t len);
void kvq__key_succ_free(uint8_t *succ, const uint8_t *stack);

/* Copies n bytes at p into dst, replacing its content (dst holds an allocation even when n is 0).
 * 0 or KVQ_ENOMEM. */
int kvq__buf_set(kvq_buf *dst, const uint8_t *p, size_t n);

/* Records a one-line detail for err on this thread and returns err, so that callers can write
 * `return kvq__error(KVQ_EINVAL, "key is NULL");`. */
int kvq__error(int err, const char *fmt, ...) KVQ__PRINTF(2, 3);
int kvq__verror(int err, const char *fmt, va_list ap);
/* Clears this thread's detail. */
void kvq__error_clear(void);

/* Microseconds of CLOCK_REALTIME (shared by every process) and of CLOCK_MONOTONIC. */
int64_t kvq__now_us(void);
int64_t kvq__mono_us(void);
/* Tests only: added to every reading of kvq__now_us, to play a step of the wall clock. */
extern int64_t kvq__test_wall_step_us;
/* Sleeps for us microseconds (interrupted sleeps are resumed). */
void kvq__sleep_us(int64_t us);

/* CRC32C (Castagnoli), continuing from crc (start with 0). */
uint32_t kvq__crc32c(uint32_t crc, const void *data, size_t len);

/* Fills buf with len bytes from the operating system's random source. Returns 0 or KVQ_EIO. */
int kvq__random_bytes(void *buf, size_t len);

/* A small, fast, seedable generator for jitter and fault injection (not for keys). */
typedef struct kvq__rng {
    uint64_t s;
} kvq__rng;
uint64_t kvq__rng_next(kvq__rng *r);
/* A double in [0, 1). */
double kvq__rng_unit(kvq__rng *r);

/* Compares two byte strings as FoundationDB orders keys: bytewise, a prefix first. */
int kvq__bytes_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen);

#endif /* KVQ_UTIL_H */
