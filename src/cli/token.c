/* The lease token of receive, ack, nack, extend and list --in-flight: the lease's fields in
 * hexadecimal. */
#include <string.h>

#include "cli.h"
#include "util/bytes.h"

/* id (16) + received (8) + deadline (8) + deliveries (4) + priority (8), big-endian. */
#define TOKEN_BYTES 44

void cli_token_format(const kvq_workq_lease *l, char out[CLI_TOKEN_LEN + 1])
{
    uint8_t b[TOKEN_BYTES];
    memcpy(b, l->id, 16);
    kvq__be_put(b + 16, (uint64_t)l->received, 8);
    kvq__be_put(b + 24, (uint64_t)l->deadline, 8);
    kvq__be_put(b + 32, l->deliveries, 4);
    kvq__be_put(b + 36, (uint64_t)l->priority, 8);
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < TOKEN_BYTES; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[CLI_TOKEN_LEN] = '\0';
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

int cli_token_parse(const char *s, kvq_workq_lease *l)
{
    if (strlen(s) != CLI_TOKEN_LEN)
        return -1;
    uint8_t b[TOKEN_BYTES];
    for (int i = 0; i < TOKEN_BYTES; i++) {
        int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        b[i] = (uint8_t)(hi << 4 | lo);
    }
    memcpy(l->id, b, 16);
    l->received = (int64_t)kvq__be_get(b + 16, 8);
    l->deadline = (int64_t)kvq__be_get(b + 24, 8);
    l->deliveries = (uint32_t)kvq__be_get(b + 32, 4);
    l->priority = (int64_t)kvq__be_get(b + 36, 8);
    return 0;
}

