/* CRC32C (Castagnoli polynomial, reflected 0x82F63B78), as used to check every stored value.
 * A table-driven version (eight bytes a step) serves every machine; on x86-64 processors with
 * SSE 4.2 the crc32 instruction is used instead, chosen once at run time. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "util/util.h"

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t len)
{
    pthread_once(&table_once, table_init);
    crc = ~crc;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint32_t lo = (uint32_t)w ^ crc;
        uint32_t hi = (uint32_t)(w >> 32);
        crc = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
              table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
              table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len-- > 0)
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

#if defined(__x86_64__) && defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p, size_t len)
{
    uint64_t c = ~crc;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len-- > 0)
        c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}

static int have_hw;
static pthread_once_t hw_once = PTHREAD_ONCE_INIT;

static void hw_init(void)
{
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
}

uint32_t kvq__crc32c(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&hw_once, hw_init);
    return have_hw ? crc_hw(crc, data, len) : crc_sw(crc, data, len);
}

/* For the tests: the portable path, whatever the processor. */
uint32_t kvq__crc32c_sw(uint32_t crc, const void *data, size_t len);
uint32_t kvq__crc32c_sw(uint32_t crc, const void *data, size_t len)
{
    return crc_sw(crc, data, len);
}
#else
uint32_t kvq__crc32c(uint32_t crc, const void *data, size_t len)
{
    return crc_sw(crc, data, len);
}

uint32_t kvq__crc32c_sw(uint32_t crc, const void *data, size_t len);
uint32_t kvq__crc32c_sw(uint32_t crc, const void *data, size_t len)
{
    return crc_sw(crc, data, len);
}
#endif
