/* Allocation, clocks, randomness and byte comparison used throughout kvq. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "util/util.h"

void *kvq__malloc(size_t n)
{
    return malloc(n == 0 ? 1 : n);
}

void *kvq__calloc(size_t n, size_t size)
{
    if (n == 0 || size == 0)
        return calloc(1, 1);
    return calloc(n, size);
}

void *kvq__realloc(void *p, size_t n)
{
    return realloc(p, n == 0 ? 1 : n);
}

void kvq__free(void *p)
{
    free(p);
}

void *kvq__memdup(const void *p, size_t n)
{
    void *q = kvq__malloc(n);
    if (q != NULL && n > 0)
        memcpy(q, p, n);
    return q;
}

char *kvq__strdup(const char *s)
{
    return kvq__memdup(s, strlen(s) + 1);
}

uint8_t *kvq__key_succ(uint8_t *stack, size_t cap, const uint8_t *key, size_t len)
{
    uint8_t *p = len + 1 <= cap ? stack : kvq__malloc(len + 1);
    if (p == NULL)
        return NULL;
    if (len > 0)
        memcpy(p, key, len);
    p[len] = 0;
    return p;
}

void kvq__key_succ_free(uint8_t *succ, const uint8_t *stack)
{
    if (succ != stack)
        kvq__free(succ);
}

static int64_t clock_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t kvq__test_wall_step_us;

int64_t kvq__now_us(void)
{
    return clock_us(CLOCK_REALTIME) + __atomic_load_n(&kvq__test_wall_step_us, __ATOMIC_RELAXED);
}

int64_t kvq__mono_us(void)
{
    return clock_us(CLOCK_MONOTONIC);
}

void kvq__sleep_us(int64_t us)
{
    if (us <= 0)
        return;
    struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000 };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int kvq__random_bytes(void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return kvq__error(KVQ_EIO, "getrandom failed: %s", strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

uint64_t kvq__rng_next(kvq__rng *r)
{
    /* splitmix64: tiny, fast, and any seed (even 0) gives a good sequence. */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double kvq__rng_unit(kvq__rng *r)
{
    return (double)(kvq__rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

int kvq__bytes_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
    size_t n = alen < blen ? alen : blen;
    int c = n > 0 ? memcmp(a, b, n) : 0;
    if (c != 0)
        return c;
    return alen < blen ? -1 : (alen > blen ? 1 : 0);
}

void kvq_buf_dispose(kvq_buf *buf)
{
    if (buf == NULL)
        return;
    kvq__free(buf->data);
    buf->data = NULL;
    buf->len = 0;
    buf->cap = 0;
}

int kvq_buf_grow(kvq_buf *buf, size_t extra)
{
    if (buf == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_buf_grow: buf is NULL");
    if (buf->len > buf->cap || (buf->data == NULL && buf->cap != 0))
        return kvq__error(KVQ_EINVAL, "kvq_buf_grow: buf is not initialised");
    if (extra > SIZE_MAX - buf->len)
        return kvq__error(KVQ_ENOMEM, "kvq_buf_grow: size overflow");
    size_t need = buf->len + extra;
    if (need <= buf->cap && buf->data != NULL)
        return 0;
    size_t cap = buf->cap < 64 ? 64 : buf->cap;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = kvq__realloc(buf->data, cap);
    if (p == NULL)
        return kvq__error(KVQ_ENOMEM, "kvq_buf_grow: out of memory for %zu bytes", cap);
    buf->data = p;
    buf->cap = cap;
    return 0;
}

int kvq_buf_append(kvq_buf *buf, const void *data, size_t len)
{
    if (buf == NULL || (data == NULL && len > 0))
        return kvq__error(KVQ_EINVAL, "kvq_buf_append: NULL argument");
    int rc = kvq_buf_grow(buf, len);
    if (rc != 0)
        return rc;
    if (len > 0)
        memcpy(buf->data + buf->len, data, len);
    buf->len += len;
    return 0;
}

int kvq__buf_set(kvq_buf *dst, const uint8_t *p, size_t n)
{
    dst->len = 0;
    if (n == 0)
        return kvq_buf_grow(dst, 1);
    return kvq_buf_append(dst, p, n);
}
