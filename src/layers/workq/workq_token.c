/* Lease tokens (kvq/workq_batch.h): a lease's fields, big-endian, in hexadecimal. The kvq
 * command prints and reads the same text, so a lease received by one can be settled by the
 * other. */
#include <string.h>

#include "kvq/workq_batch.h"
#include "util/bytes.h"
#include "util/util.h"

/* id (16) + received (8) + deadline (8) + deliveries (4) + priority (8). */
#define TOKEN_BYTES 44
_Static_assert(2 * TOKEN_BYTES == KVQ_WORKQ_TOKEN_LEN, "a token is two digits a byte");

int kvq_workq_lease_format(char *out, size_t cap, size_t *len, const kvq_workq_lease *lease)
{
    if (len == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_workq_lease_format: len is NULL");
    *len = 0;
    if (lease == NULL || (out == NULL && cap > 0))
        return kvq__error(KVQ_EINVAL, "kvq_workq_lease_format: NULL lease, or NULL out and cap %zu",
                          cap);
    if (cap < KVQ_WORKQ_TOKEN_LEN + 1) {
        *len = KVQ_WORKQ_TOKEN_LEN + 1;
        return kvq__error(KVQ_ENOBUFS, "kvq_workq_lease_format: %zu bytes, a token needs %d",
                          cap, KVQ_WORKQ_TOKEN_LEN + 1);
    }
    uint8_t b[TOKEN_BYTES];
    memcpy(b, lease->id, 16);
    kvq__be_put(b + 16, (uint64_t)lease->received, 8);
    kvq__be_put(b + 24, (uint64_t)lease->deadline, 8);
    kvq__be_put(b + 32, lease->deliveries, 4);
    kvq__be_put(b + 36, (uint64_t)lease->priority, 8);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < TOKEN_BYTES; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[KVQ_WORKQ_TOKEN_LEN] = '\0';
    *len = KVQ_WORKQ_TOKEN_LEN;
    return 0;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

int kvq_workq_lease_parse(kvq_workq_lease *out, const char *token)
{
    if (out == NULL || token == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_workq_lease_parse: NULL out or token");
    uint8_t b[TOKEN_BYTES];
    for (int i = 0; i < TOKEN_BYTES; i++) {
        /* A shorter string ends at its NUL, which is no digit: refused before reading on. */
        int hi = hexval(token[2 * i]);
        int lo = hi < 0 ? -1 : hexval(token[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return kvq__error(KVQ_EINVAL, "not a lease token: %d hexadecimal digits expected",
                              KVQ_WORKQ_TOKEN_LEN);
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    if (token[KVQ_WORKQ_TOKEN_LEN] != '\0')
        return kvq__error(KVQ_EINVAL, "not a lease token: longer than %d digits",
                          KVQ_WORKQ_TOKEN_LEN);
    memcpy(out->id, b, 16);
    out->received = (int64_t)kvq__be_get(b + 16, 8);
    out->deadline = (int64_t)kvq__be_get(b + 24, 8);
    out->deliveries = (uint32_t)kvq__be_get(b + 32, 4);
    out->priority = (int64_t)kvq__be_get(b + 36, 8);
    return 0;
}
