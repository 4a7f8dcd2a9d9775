/* Helpers shared by the queue-layer tests: a fresh database directory per test, handles with
 * injected faults, subspaces and small value codecs. The scaffolding (directories, seeds,
 * assertions) is the test support library's (tests/support/kvq_test.h). */
#ifndef KVQ_TEST_QUEUE_COMMON_H
#define KVQ_TEST_QUEUE_COMMON_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvq_test.h"
#include "layers/layers_internal.h"
#include "util/util.h"

static char tq_dir[256];
static unsigned int tq_test_flags; /* KVQ_TEST_* of the handles tq_open_db opens */

/* A fresh database directory in tq_dir. */
static inline void tq_mkdir(void)
{
    if (kt_mkdtemp(tq_dir, sizeof(tq_dir), "queue") != 0)
        abort();
}

static inline void tq_rmdir(void)
{
    if (tq_dir[0] != 0)
        (void)kt_rm_rf(tq_dir);
    tq_dir[0] = 0;
}

/* A subspace of raw prefix bytes (free it with kvq_subspace_free). */
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

#endif /* KVQ_TEST_QUEUE_COMMON_H */
