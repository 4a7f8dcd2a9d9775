/* The queue-layer tests' helpers (test_queue_common.h says what each does). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_queue_common.h"

char tq_dir[256];
unsigned int tq_test_flags; /* KVQ_TEST_* of the handles tq_open_db opens */

/* A fresh database directory in tq_dir. */
void tq_mkdir(void)
{
    if (kt_mkdtemp(tq_dir, sizeof(tq_dir), "queue") != 0)
        abort();
}

void tq_rmdir(void)
{
    if (tq_dir[0] != 0)
        (void)kt_rm_rf(tq_dir);
    tq_dir[0] = 0;
}

/* Fixtures: a fresh tq_dir for each test. */
int tq_dir_setup(void **state)
{
    (void)state;
    tq_mkdir();
    return 0;
}

int tq_dir_teardown(void **state)
{
    (void)state;
    tq_rmdir();
    return 0;
}

/* A subspace of raw prefix bytes (free it with kvq_subspace_destroy). */
kvq_subspace *tq_sub(const char *prefix, size_t len)
{
    kvq_subspace *s = NULL;
    if (kvq_subspace_new(&s, (const uint8_t *)prefix, len, NULL, 0) != 0)
        abort();
    return s;
}

/* A subspace of one or two tuple elements. */
kvq_subspace *tq_sub_tuple(kvq_tuple_elem a, const kvq_tuple_elem *b)
{
    kvq_tuple_elem e[2] = { a, b != NULL ? *b : a };
    kvq_subspace *s = NULL;
    if (kvq_subspace_new(&s, NULL, 0, e, b != NULL ? 2 : 1) != 0)
        abort();
    return s;
}

/* The options of the queue tests' handles: retries without limit, short backoff. */
kvq_db_options tq_options(void)
{
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.retry_limit = -1;
    o.timeout_ms = 0;
    o.max_retry_delay_ms = 50;
    return o;
}

kvq_db *tq_open_db(double fault_rate, unsigned int kinds, uint64_t seed)
{
    kvq_db_options o = tq_options();
    kvq_testing_options t = KVQ_TESTING_OPTIONS_INIT;
    t.fault_rate = fault_rate;
    t.fault_kinds = kinds;
    t.fault_seed = seed;
    t.flags = tq_test_flags;
    kvq_db *db = NULL;
    int rc = kvq_db_open_testing(&db, tq_dir, &o, &t);
    if (rc != 0) {
        fprintf(stderr, "kvq_db_open(%s): %s (%s)\n", tq_dir, kvq_strerror(rc), kvq_last_error());
        abort();
    }
    return db;
}

/* Fixtures: a database in a fresh tq_dir, opened with tq_open_db(0, 0, 0) into the pointer
 * given to tq_group() (for a group, or for each test). */
static kvq_db **tq_group_db;

void tq_group(kvq_db **db)
{
    tq_group_db = db;
}

int tq_db_setup(void **state)
{
    int rc = tq_dir_setup(state);
    *tq_group_db = tq_open_db(0, 0, 0);
    return rc;
}

int tq_db_teardown(void **state)
{
    kvq_db_close(*tq_group_db);
    *tq_group_db = NULL;
    return tq_dir_teardown(state);
}

/* The kill cycles of the queue layers' crash campaigns (test_queue_crash.c, test_workq_crash.c):
 * prints the campaign's seed, makes tq_dir with an empty database, then starts nprocs processes
 * with spawn(slot, arg) and kills them at random for `cycles` cycles (kt_kill_campaign: every
 * tenth cycle all of them, otherwise one victim and each other process one time in four), last
 * all of them. Fails the test when a process exited by itself (an error it found) during the
 * cycles, or when check_end, at the end. Returns how many processes were killed. */
size_t tq_crash_cycles(const char *name,
                       int cycles,
                       pid_t *pids,
                       int nprocs,
                       kt_spawn_fn spawn,
                       void *arg,
                       int check_end,
                       const char *history_prefixes)
{
    unsigned seed = kt_campaign_seed(name, cycles);
    tq_mkdir();
    kvq_db *db = NULL;
    assert_ok(kvq_db_open(&db, tq_dir, NULL)); /* the database exists before the processes */
    kvq_db_close(db);
    kt_kill_loop kl = { pids, nprocs, spawn, arg, 1, 4, 10, seed, 0, tq_dir, history_prefixes };
    int failed = kt_kill_campaign(&kl, cycles, check_end);
    if (failed != 0)
        fail_msg("%s: a worker process failed by itself (exit %d); replay: KVQ_TEST_SEED=%" PRIu64
                 " %s",
                 name, failed, kt_seed(), kt_prog());
    return kl.kills;
}

/* Values of the concurrency tests: producer id (4 bytes BE) + sequence (4 bytes BE) + filler. */
size_t tq_value(uint8_t *out, uint32_t producer, uint32_t seq)
{
    for (int i = 0; i < 4; i++) {
        out[i] = (uint8_t)(producer >> (24 - 8 * i));
        out[4 + i] = (uint8_t)(seq >> (24 - 8 * i));
    }
    memcpy(out + 8, "kvq-item", 8);
    return 16;
}

int tq_parse(const uint8_t *v, size_t n, uint32_t *producer, uint32_t *seq)
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

void tq_push_s(kvq_queue *q, const char *s)
{
    assert_ok(kvq_queue_push(q, (const uint8_t *)s, strlen(s)));
}

void tq_pop_expect(kvq_queue *q, const char *want)
{
    kvq_buf b = KVQ_BUF_INIT;
    int rc = kvq_queue_pop(&b, q);
    if (want == NULL) {
        if (rc != KVQ_ENOTFOUND)
            fail_msg("expected an empty queue, got rc %d value '%.*s'", rc, (int)b.len,
                     (const char *)b.data);
    } else {
        assert_ok(rc);
        assert_bytes(b.data, b.len, (const uint8_t *)want, strlen(want));
    }
    kvq_buf_dispose(&b);
}
