/**
 * @file kvq/common.h
 * @brief Macros and basic types shared by every kvq header.
 */
#ifndef KVQ_COMMON_H
#define KVQ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define KVQ_API
#elif defined(__GNUC__) && __GNUC__ >= 4
#define KVQ_API __attribute__((visibility("default")))
#else
#define KVQ_API
#endif

/*
 * KVQ_NODISCARD marks every public function that returns a value: a KVQ_E* code to check, or
 * the value the call is made for (a getter, a predicate, a name). Ignoring it is a bug, so the
 * compiler says so. Only functions returning void go without it (tests/headertest/api_scheme.py
 * checks both in every header). GCC warns even through a cast to void: keep the result in a
 * variable where it is truly not needed, and say why.
 */
#if defined(__GNUC__)
#define KVQ_NODISCARD __attribute__((warn_unused_result))
#else
#define KVQ_NODISCARD
#endif

#define KVQ_VERSION_MAJOR  0
#define KVQ_VERSION_MINOR  1
#define KVQ_VERSION_PATCH  0
#define KVQ_VERSION_STRING "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * A borrowed view of bytes. kvq never frees what a kvq_bytes points at; each function that
 * returns one says how long the memory stays valid.
 */
typedef struct kvq_bytes {
    const uint8_t *data; /**< first byte; may be NULL when len is 0 */
    size_t len;          /**< number of bytes */
} kvq_bytes;

/**
 * A growable byte buffer filled by kvq. Initialise it with KVQ_BUF_INIT (or zero it); release
 * its memory with kvq_buf_dispose, never with free().
 */
typedef struct kvq_buf {
    uint8_t *data; /**< the bytes (NULL while empty and never grown) */
    size_t len;    /**< bytes in use */
    size_t cap;    /**< bytes allocated */
} kvq_buf;

#define KVQ_BUF_INIT \
    {                \
        NULL, 0, 0   \
    }

/** Frees a buffer's memory and sets it back to empty. NULL is a no-op. */
KVQ_API void kvq_buf_dispose(kvq_buf *buf);

/**
 * Makes room for at least `extra` more bytes. Returns 0, KVQ_EINVAL (buf is NULL) or
 * KVQ_ENOMEM.
 */
KVQ_API KVQ_NODISCARD int kvq_buf_grow(kvq_buf *buf, size_t extra);

/** Appends len bytes. Returns 0, KVQ_EINVAL or KVQ_ENOMEM; on error buf is unchanged. */
KVQ_API KVQ_NODISCARD int kvq_buf_append(kvq_buf *buf, const void *data, size_t len);

/** Returns the library's version as "MAJOR.MINOR.PATCH"; a static string. */
KVQ_API KVQ_NODISCARD const char *kvq_version(void);

#ifdef __cplusplus
}
#endif

#endif /* KVQ_COMMON_H */
