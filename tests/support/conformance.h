/* The conformance harness: helpers shared by tests/conformance/test_*.c, part of the test
 * support library (conformance.c), and written against the public API alone, so that the same
 * programs test every engine.
 *
 * The scaffolding (temporary directories, seeds, opening the database, skips, assertions) is
 * the test support library's (tests/support/kvq_test.h); this header adds what only the
 * conformance tests use.
 *
 * Which database: $KVQ_TEST_URL when set (for example fdb:/etc/foundationdb/fdb.cluster), else
 * a fresh directory made under $TMPDIR (or /tmp) for each test group, removed afterwards
 * (kt_db_setup). When the URL names an engine that is not available (KVQ_ENOENGINE), the tests
 * report themselves skipped, never passed.
 *
 * Every test keeps its keys under its own prefix and clears it first, so that tests can share
 * one database (a real cluster).
 *
 * Child processes: cf_spawn() forks and the child re-executes this program with
 * "--cf-child ROLE ARGS...", which cf_init() dispatches; the role opens its own handle. A forked
 * child never runs on without exec: the parent has threads (a log-store handle's checkpoint
 * thread, the watch thread, libfdb_c's network thread), and one of them may hold a lock of the
 * allocator at the fork (AddressSanitizer's allocator has no fork handler in clang 14: such a
 * child hung in its first malloc). Role functions never use cmocka: they report through their
 * exit status and pipes.
 *
 * Randomized tests take the run's seed (--seed N or $KVQ_TEST_SEED, else random) and print it
 * with the command that replays them ($KVQ_TEST_FILTER selects tests by name).
 */
#ifndef KVQ_CONFORMANCE_H
#define KVQ_CONFORMANCE_H

#include "kvq_test.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- state of the program ------------------------------------------------------------------ */

/* A role a child process can play: argv[0] is the role's name, then its arguments. Returns the
 * child's exit status. */
typedef int (*cf_role_fn)(int argc, char **argv);

struct cf_role {
    const char *name;
    cf_role_fn fn;
};

extern char cf_url[PATH_MAX];  /* the database every test of the group opens (kt_db_url) */
extern char cf_self[PATH_MAX]; /* this program, for re-executing children */

/* Whether cf_url names the fdb engine. */
int cf_is_fdb(void);

/* ---- random numbers (splitmix64: tiny, and the same sequence everywhere) -------------------- */

typedef struct cf_rng {
    uint64_t s;
} cf_rng;

uint64_t cf_rand(cf_rng *r);

/* A number in [0, n). */
uint32_t cf_below(cf_rng *r, uint32_t n);

int cf_chance(cf_rng *r, unsigned percent);

/* The seed of a randomized test: the run's (kt_seed). Prints it and how to replay the test. */
uint64_t cf_seed(const char *test);

/* ---- time ---------------------------------------------------------------------------------- */

int64_t cf_now_ns(void);

void cf_sleep_ms(int64_t ms);

/* ---- opening the database ------------------------------------------------------------------ */

/* A URL for a database of this test's own: a fresh path in the group's directory on the
 * embedded engine (the previous one of that name is removed), the shared cf_url on fdb. */
const char *cf_fresh_url(char *out, size_t cap, const char *name);

/* Opens `url`. Skips the test when its engine is not available; fails it on any other error. */
kvq_db *
cf_open_url_testing(const char *url, const kvq_db_options *opts, const kvq_testing_options *t);

kvq_db *cf_open_url(const char *url, const kvq_db_options *opts);

kvq_db *cf_open(const kvq_db_options *opts);

/* cf_open with injected faults or test knobs (kvq/testing.h). */
kvq_db *cf_open_testing(const kvq_testing_options *t);

/* Skips the current test unless the engine is the embedded one. */
void cf_embedded_only(const char *why);

/* ---- keys ---------------------------------------------------------------------------------- */

/* Every test's keys live under "cf/<test>/". */
typedef struct cf_key {
    uint8_t b[256];
    size_t n;
} cf_key;

cf_key cf_k(const char *prefix, const char *suffix);

/* The key just after every key that starts with `p` (p + 0xFF). */
cf_key cf_after_prefix(const cf_key *p);

/* Commits the removal of every key under "cf/<prefix>/". */
void cf_clear_prefix(kvq_db *db, const char *prefix);

/* The start of most tests: cf_open(NULL), then cf_clear_prefix of the test's own prefix. */
kvq_db *cf_open_clean(const char *prefix);

/* ---- reading helpers ----------------------------------------------------------------------- */

/* Asserts that `key` reads as the given value in txn (absent when val is NULL). */
void cf_expect_value(kvq_txn *txn,
                     const uint8_t *key,
                     size_t key_len,
                     unsigned flags,
                     const void *val,
                     size_t val_len,
                     const char *where);

/* Reads one key in a transaction of its own. Returns the value's length, or -1 when absent;
 * copies at most cap bytes into out. */
long cf_read_key(kvq_db *db, const uint8_t *key, size_t key_len, void *out, size_t cap);

/* Writes one key in a transaction of its own (with retries). */
void cf_write_key(kvq_db *db, const uint8_t *key, size_t key_len, const void *val, size_t val_len);

uint64_t cf_le64(const uint8_t *p, size_t n);

void cf_put_le(uint8_t *p, uint64_t v, size_t n);

uint64_t cf_be64(const uint8_t *p);

/* ---- child processes ----------------------------------------------------------------------- */

const struct cf_role *cf_find_role(const char *name);

/* Starts a child process playing `role` with the given arguments (NULL-terminated). */
pid_t cf_spawn(const char *role, const char *const *args);

/* Waits for a child at most timeout_s seconds (then kills it). Returns its wait status. */
int cf_wait(pid_t pid, int timeout_s);

/* Asserts that a child exited normally with status 0. */
void cf_wait_ok(pid_t pid, int timeout_s, const char *what);

/* Writes all of buf to fd (pipes). */
int cf_write_all(int fd, const void *buf, size_t n);

/* Reads exactly n bytes; returns 0, or -1 at end of file or on error. */
int cf_read_all(int fd, void *buf, size_t n);

/* ---- the program --------------------------------------------------------------------------- */

/* Call first in main(): records who we are and runs a child role when asked to. */
void cf_init(int argc, char **argv, const struct cf_role *roles, size_t nroles);

int cf_group_setup(void **state);

int cf_group_teardown(void **state);

#define CF_RUN(name, tests) \
    cmocka_run_group_tests_name(name, tests, cf_group_setup, cf_group_teardown)

#endif /* KVQ_CONFORMANCE_H */
