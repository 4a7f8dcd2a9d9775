/* Helpers shared by the queue-layer tests: fresh database directories, seeds and their replay
 * commands, and small value codecs. Include after <cmocka.h>. */
#ifndef KVQ_TEST_QUEUE_COMMON_H
#define KVQ_TEST_QUEUE_COMMON_H

#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq/testing.h"
#include "layers/layers_internal.h"
#include "util/util.h"

static char tq_dir[256];
static const char *tq_prog = "test";
static uint64_t tq_seed;
static unsigned int tq_test_flags; /* KVQ_TEST_* of the handles tq_open_db opens */

static inline int tq_rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* A fresh database directory in tq_dir. */
static inline void tq_mkdir(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(tq_dir, sizeof(tq_dir), "%s/kvq-queue-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(tq_dir) == NULL) {
        perror("mkdtemp");
        abort();
    }
}

static inline void tq_rmdir(void)
{
    if (tq_dir[0] != 0)
        nftw(tq_dir, tq_rm_one, 16, FTW_DEPTH | FTW_PHYS);
    tq_dir[0] = 0;
}

/* Reads --seed N from argv or KVQ_TEST_SEED, else a random seed; prints it with the command
 * that replays the run. */
static inline void tq_seed_init(int argc, char **argv)
{
    tq_prog = argc > 0 ? argv[0] : "test";
    const char *s = getenv("KVQ_TEST_SEED");
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--seed") == 0)
            s = argv[i + 1];
    if (s != NULL)
        tq_seed = strtoull(s, NULL, 0);
    else if (kvq__random_bytes(&tq_seed, sizeof(tq_seed)) != 0)
        tq_seed = (uint64_t)kvq__now_us();
    printf("# seed %" PRIu64 " (replay: %s --seed %" PRIu64 ")\n", tq_seed, tq_prog, tq_seed);
    fflush(stdout);
}

/* A subspace of raw prefix bytes (free it with kvq_subspace_destroy). */
static inline kvq_subspace *tq_sub(const char *prefix, size_t len)
{
    kvq_subspace *s = NULL;
    if (kvq_subspace_new(&s, (const uint8_t *)prefix, len, NULL, 0) != 0)
        abort();
    return s;
}

/* A subspace of one or two tuple elements. */
static inline kvq_subspace *tq_sub_tuple(kvq_tuple_elem a, const kvq_tuple_elem *b)
{
    kvq_tuple_elem e[2] = { a, b != NULL ? *b : a };
    kvq_subspace *s = NULL;
    if (kvq_subspace_new(&s, NULL, 0, e, b != NULL ? 2 : 1) != 0)
        abort();
    return s;
}

static inline kvq_db *tq_open_db(double fault_rate, unsigned int kinds, uint64_t seed)
{
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    kvq_testing_options t = KVQ_TESTING_OPTIONS_INIT;
    t.fault_rate = fault_rate;
    t.fault_kinds = kinds;
    t.fault_seed = seed;
    o.retry_limit = -1;
    o.timeout_ms = 0;
    o.max_retry_delay_ms = 50;
    t.flags = tq_test_flags;
    kvq_db *db = NULL;
    int rc = kvq_db_open_testing(&db, tq_dir, &o, &t);
    if (rc != 0) {
        fprintf(stderr, "kvq_db_open(%s): %s (%s)\n", tq_dir, kvq_strerror(rc), kvq_last_error());
        abort();
    }
    return db;
}

/* Values of the concurrency tests: producer id (4 bytes BE) + sequence (4 bytes BE) + filler. */
static inline size_t tq_value(uint8_t *out, uint32_t producer, uint32_t seq)
{
    for (int i = 0; i < 4; i++) {
        out[i] = (uint8_t)(producer >> (24 - 8 * i));
        out[4 + i] = (uint8_t)(seq >> (24 - 8 * i));
    }
    memcpy(out + 8, "kvq-item", 8);
    return 16;
}

static inline int tq_parse(const uint8_t *v, size_t n, uint32_t *producer, uint32_t *seq)
{
    if (n != 16 || memcmp(v + 8, "kvq-item", 8) != 0)
        return -1;
    *producer = 0;
    *seq = 0;
    for (int i = 0; i < 4; i++) {
        *producer = (*producer << 8) | v[i];
        *seq = (*seq << 8) | v[4 + i];
    }
    return 0;
}

static inline void tq_hex(const char *what, const uint8_t *p, size_t n)
{
    fprintf(stderr, "%s (%zu):", what, n);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %02x", p[i]);
    fprintf(stderr, "\n");
}

#define assert_bytes(got, got_len, want, want_len)                               \
    do {                                                                         \
        if ((got_len) != (want_len) || memcmp((got), (want), (want_len)) != 0) { \
            tq_hex("got ", (got), (got_len));                                    \
            tq_hex("want", (want), (want_len));                                  \
            fail_msg("byte mismatch");                                           \
        }                                                                        \
    } while (0)

#define assert_ok(expr)                                                                   \
    do {                                                                                  \
        int rc_ = (expr);                                                                 \
        if (rc_ != 0)                                                                     \
            fail_msg("%s -> %d %s (%s)", #expr, rc_, kvq_errname(rc_), kvq_last_error()); \
    } while (0)

#endif /* KVQ_TEST_QUEUE_COMMON_H */
