/* What the power-cut worker writes and the checker expects (tests/powercut).
 *
 * Each producer (one thread of one worker run) commits transactions numbered 1, 2, ...; the
 * transaction numbered s sets the item (p, s) to a payload derived from (p, s) alone, clears the
 * item (p, s - PC_WINDOW), sets p's last number to s and adds 1 to a counter shared by all. So
 * after any cut the items of p must be exactly (p, max(1, m - PC_WINDOW + 1)) .. (p, m) for m =
 * p's last number, every payload intact, and the counter the sum of every producer's m: a
 * transaction half applied, applied twice or not applied breaks one of these. The worker logs
 * "I p s" before each commit and "A p s" once it returned success, with write(2) to a file
 * outside the simulated file system, so the log survives the cut; every acknowledged s must be
 * at most m, and m at most the last invoked.
 *
 * Rides (early lock release, docs/engine.md "Early reads"; on when the worker's TEST_FLAGS have
 * KVQ_TEST_EARLY_READ_ALL): the transaction (p, s) also reads, early, the last number s' of a
 * neighbour producer p' (its commit may be written and not yet synced) and sets p's ride to
 * (p', s'), as a pop that rides an unsynced push does. So after any cut the ride of p names a
 * number p' has: last(p') >= s'. A cut that kept the ride but lost the commit it read breaks
 * that. PC_RIDE_AHEAD (a worker-only bit of TEST_FLAGS, never passed to kvq) makes the worker
 * claim s' + 1, a number not yet committed: the checker must see it. */
#ifndef KVQ_PC_COMMON_H
#define KVQ_PC_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The worker's exit codes: the layer cut the power; the layer met something it does not model. */
#define PC_EXIT_CUT         86
#define PC_EXIT_LAYER_ERROR 87

#define PC_WINDOW    40
#define PC_KEY_BYTES 19

/* "pc/" + producer + number, both 8-byte big-endian (items); "pl/" + producer (last number). */
static inline size_t pc_item_key(uint8_t *k, uint64_t p, uint64_t s)
{
    memcpy(k, "pc/", 3);
    for (int i = 0; i < 8; i++) {
        k[3 + i] = (uint8_t)(p >> (56 - 8 * i));
        k[11 + i] = (uint8_t)(s >> (56 - 8 * i));
    }
    return PC_KEY_BYTES;
}

static inline size_t pc_last_key(uint8_t *k, uint64_t p)
{
    memcpy(k, "pl/", 3);
    for (int i = 0; i < 8; i++)
        k[3 + i] = (uint8_t)(p >> (56 - 8 * i));
    return 11;
}

/* "pr/" + producer: the ride (pc_common.h, above); its value is p' and s', 8-byte big-endian. */
static inline size_t pc_ride_key(uint8_t *k, uint64_t p)
{
    memcpy(k, "pr/", 3);
    for (int i = 0; i < 8; i++)
        k[3 + i] = (uint8_t)(p >> (56 - 8 * i));
    return 11;
}

#define PC_RIDE_AHEAD (1u << 30)

static inline uint64_t pc_be64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | b[i];
    return v;
}

static inline uint64_t pc_le64(const uint8_t *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | b[i];
    return v;
}

static inline uint64_t pc_mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x;
}

/* The payload of (p, s): its length (16 to 30,015 bytes: most small, one in three large, so that
 * commits span from one to several WAL pages), and its bytes. */
static inline size_t pc_payload_len(uint64_t p, uint64_t s)
{
    uint64_t h = pc_mix(p * 1000003u + s);
    return 16 + (size_t)(h % 3 == 0 ? (h >> 8) % 30000 : (h >> 8) % 600);
}

static inline void pc_payload(uint8_t *out, uint64_t p, uint64_t s, size_t len)
{
    uint64_t x = pc_mix(p ^ (s << 20)) | 1;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = (uint8_t)x;
    }
    for (int i = 0; i < 8 && (size_t)(16) <= len; i++) {
        out[i] = (uint8_t)(p >> (56 - 8 * i));
        out[8 + i] = (uint8_t)(s >> (56 - 8 * i));
    }
}

#endif
