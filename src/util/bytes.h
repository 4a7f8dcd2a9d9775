/* Fixed-width integers in byte strings: little-endian (counters and records, as FoundationDB's
 * atomic ADD and MAX read them) and big-endian (ordered keys and ids, which sort bytewise). One
 * copy for every part of kvq; header-only, so that each use is a few inlined instructions. */
#ifndef KVQ_UTIL_BYTES_H
#define KVQ_UTIL_BYTES_H

#include <stddef.h>
#include <stdint.h>

/* Writes v as n (at most 8) little-endian bytes at p. */
static inline void kvq__le_put(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n && i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void kvq__le64_put(uint8_t *p, uint64_t v)
{
    kvq__le_put(p, v, 8);
}

static inline void kvq__le32_put(uint8_t *p, uint32_t v)
{
    kvq__le_put(p, v, 4);
}

/* Reads the first n (at most 8; more are ignored) bytes at p as a little-endian integer. */
static inline uint64_t kvq__le_get(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n && i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static inline uint64_t kvq__le64_get(const uint8_t *p)
{
    return kvq__le_get(p, 8);
}

static inline uint32_t kvq__le32_get(const uint8_t *p)
{
    return (uint32_t)kvq__le_get(p, 4);
}

/* Writes the low n (at most 8) bytes of v big-endian at p. */
static inline void kvq__be_put(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n && i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * (n - 1 - i)));
}

/* Reads n (at most 8) big-endian bytes at p. */
static inline uint64_t kvq__be_get(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n && i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

#endif /* KVQ_UTIL_BYTES_H */
