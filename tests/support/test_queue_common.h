/* Helpers shared by the queue-layer tests: a fresh database directory per test, handles with
 * injected faults, subspaces and small value codecs; part of the test support library
 * (queue.c), beside its scaffolding (directories, seeds, assertions: kvq_test.h). */
#ifndef KVQ_TEST_QUEUE_COMMON_H
#define KVQ_TEST_QUEUE_COMMON_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvq_test.h"
#include "layers/queue/queue_internal.h"
#include "util/util.h"

extern char tq_dir[256];
extern unsigned int tq_test_flags; /* KVQ_TEST_* of the handles tq_open_db opens */

/* A fresh database directory in tq_dir. */
void tq_mkdir(void);

void tq_rmdir(void);

/* Fixtures: a fresh tq_dir for each test. */
int tq_dir_setup(void **state);

int tq_dir_teardown(void **state);

/* A subspace of raw prefix bytes (free it with kvq_subspace_destroy). */
kvq_subspace *tq_sub(const char *prefix, size_t len);

/* A subspace of one or two tuple elements. */
kvq_subspace *tq_sub_tuple(kvq_tuple_elem a, const kvq_tuple_elem *b);

/* The options of the queue tests' handles: retries without limit, short backoff. */
kvq_db_options tq_options(void);

kvq_db *tq_open_db(double fault_rate, unsigned int kinds, uint64_t seed);

/* Fixtures: a database in a fresh tq_dir, opened with tq_open_db(0, 0, 0) into the pointer
 * given to tq_group() (for a group, or for each test). */
void tq_group(kvq_db **db);

int tq_db_setup(void **state);

int tq_db_teardown(void **state);

/* The kill cycles of the queue layers' crash campaigns (test_queue_crash.c, test_workq_crash.c):
 * prints the campaign's seed, makes tq_dir with an empty database, then starts nprocs processes
 * with spawn(slot, arg) and kills them at random for `cycles` cycles (kt_kill_campaign: every
 * tenth cycle all of them, otherwise one victim and each other process one time in four), last
 * all of them. Fails the test when a process exited by itself (an error it found) during the
 * cycles, or when check_end, at the end. Returns how many processes were killed. The histories
 * the processes write in tq_dir are the files whose names start with one of the '|'-separated
 * history_prefixes (kt_kill_loop's progress files). */
size_t tq_crash_cycles(const char *name,
                       int cycles,
                       pid_t *pids,
                       int nprocs,
                       kt_spawn_fn spawn,
                       void *arg,
                       int check_end,
                       const char *history_prefixes);

/* Pushes the string s (without its NUL). */
void tq_push_s(kvq_queue *q, const char *s);

/* Pops one value and checks it is the string want; want NULL: the queue must be empty. */
void tq_pop_expect(kvq_queue *q, const char *want);

/* Values of the concurrency tests: producer id (4 bytes BE) + sequence (4 bytes BE) + filler. */
size_t tq_value(uint8_t *out, uint32_t producer, uint32_t seq);

int tq_parse(const uint8_t *v, size_t n, uint32_t *producer, uint32_t *seq);

#endif /* KVQ_TEST_QUEUE_COMMON_H */
