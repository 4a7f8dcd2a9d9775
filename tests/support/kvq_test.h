/* kvq's test support library (tests/support, linked into every test program): the scaffolding
 * the tests share, written once.
 *
 *   temporary directories   kt_mkdtemp, kt_rm_rf (no shell), kt_path
 *   seeds                   kt_seed_init (--seed N or $KVQ_TEST_SEED, printed with the command
 *                           that replays the run), kt_seed, kt_seed_for, kt_campaign_seed
 *   databases               kt_db_setup / kt_db_teardown (the database named by $KVQ_TEST_URL,
 *                           any engine, or a fresh embedded one), kt_db_open_url (skips the test
 *                           when the engine is not available), kt_db_try_open
 *   crash loops             kt_kill_campaign: spawn, SIGKILL at random, start again;
 *                           kt_history_read, kt_ids: the histories they leave
 *   skips                   test_skip.h (a skipped program exits 77, ctest's "skipped")
 *   assertions              assert_ok, assert_err, assert_bytes, and K("key") for the
 *                           (pointer, length) pair of a C string
 *   queue-layer tests       test_queue_common.h (queue.c): tq_dir, tq_open_db, fixtures,
 *                           subspaces, tq_crash_cycles, the tq_value codec
 *                           test_queue_conc.h (queue_conc.c): producers and their checker
 *   conformance tests       model.h (model.c): the key-value model the checkers replay into
 *   log store tests         test_log_util.h (log_util.c): directories, segment paths, seeds
 *   scale and wall time     test_scale.h: kvq_test_scaled (counts), kvq_test_time_factor (a
 *                           span a thread must keep up with is that many times wider)
 *
 * Include it instead of <cmocka.h>; it includes cmocka with the headers cmocka needs. */
#ifndef KVQ_TEST_H
#define KVQ_TEST_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "kvq/kvq.h"
#include "kvq/testing.h"
#include "test_scale.h"
#include "test_skip.h"

/* ---- temporary directories ----------------------------------------------------------------- */

/* Makes a fresh directory "<parent>/kvq-<tag>-XXXXXX" and writes its path to out (cap bytes).
 * parent NULL means $TMPDIR, or /tmp when that is not set. Returns 0, or -1 with a message on
 * stderr (errno set). */
int kt_mkdtemp_in(char *out, size_t cap, const char *parent, const char *tag);

/* kt_mkdtemp_in(out, cap, NULL, tag). */
int kt_mkdtemp(char *out, size_t cap, const char *tag);

/* Removes a file or a directory tree (nftw, no shell); a missing one is not an error. Returns 0,
 * or -1 with a message on stderr. */
int kt_rm_rf(const char *path);

/* Removes everything inside a directory and keeps the directory (a mount point, say). Returns 0,
 * or -1 with a message on stderr. */
int kt_empty_dir(const char *path);

/* Mounts a tmpfs of `size` (mount's "size=" value, e.g. "24m") on a fresh kt_mkdtemp(tag)
 * directory, whose path goes to out. Returns 0 when mounted; 1 when mounting is refused (out is
 * then "", the directory removed and the reason on stderr: the caller skips); -1 when no
 * directory could be made. */
int kt_tmpfs_mount(char *out, size_t cap, const char *tag, const char *size);

/* Unmounts (detached, so even a database a failed test left open does not hold it) and removes
 * a kt_tmpfs_mount directory, then sets mnt to ""; nothing when mnt is "". */
void kt_tmpfs_unmount(char *mnt);

/* Fills what is left of the file system with the file `path` (created, truncated first when
 * truncate is set, else appended to): 0, or -1 when it cannot be opened. */
int kt_fill_disk(const char *path, int truncate);

/* The bytes free for an unprivileged user on the file system of `path` (-1 on error). */
long long kt_free_bytes(const char *path);

/* A fresh directory and the path of a database in it ("<dir>/db"), the most common fixture. */
typedef struct kt_tmp {
    char dir[240];
    char db[256];
} kt_tmp;

/* Makes t->dir with kt_mkdtemp(tag) and sets t->db. Returns 0 or -1 (t->dir then empty). */
int kt_tmp_make(kt_tmp *t, const char *tag);

/* Removes t->dir and all in it (nothing when it is empty), then empties it. Returns 0 or -1. */
int kt_tmp_remove(kt_tmp *t);

/* Writes "dir/name" to out; fails the current test when it does not fit. */
void kt_path(char *out, size_t cap, const char *dir, const char *name);

/* ---- time ---------------------------------------------------------------------------------- */

/* Sleeps ms milliseconds (the whole time, through signals). */
void kt_sleep_ms(long ms);

/* The wall clock (CLOCK_REALTIME), in microseconds. */
int64_t kt_wall_us(void);

/* ---- seeds --------------------------------------------------------------------------------- */

/* Call first in main(). The run's seed: --seed N in argv, else $KVQ_TEST_SEED, else random.
 * Prints "# seed N (replay: KVQ_TEST_SEED=N <program>)". Returns the seed. $KVQ_TEST_FILTER, when
 * set, selects the tests that run by name (cmocka_set_test_filter). */
uint64_t kt_seed_init(int argc, char **argv);

/* The same without printing (for programs whose randomized tests print kt_seed_print). kt_seed()
 * calls it lazily when main() did not. */
void kt_seed_setup(int argc, char **argv);

/* The run's seed. */
uint64_t kt_seed(void);

/* The program, as it was started (argv[0]). */
const char *kt_prog(void);

/* A seed of its own for one named part of the run (a campaign, a case): the run's seed mixed
 * with the name. */
uint64_t kt_seed_for(const char *name);

/* Prints how to replay the test `test` alone ("# seed N (replay: KVQ_TEST_SEED=N
 * KVQ_TEST_FILTER=test [KVQ_TEST_URL=...] <program>)") and returns the run's seed. */
uint64_t kt_seed_print(const char *test);

/* The start of a crash campaign: prints "# name: N cycles, seed S (replay: ...)" and returns
 * the campaign's own seed for rand_r(). */
unsigned kt_campaign_seed(const char *name, int cycles);

/* ---- databases on either engine ------------------------------------------------------------ */

/* The program's test database: the URL in $KVQ_TEST_URL when set (e.g. fdb:<cluster file>, any
 * engine), else "<fresh directory>/db" on the embedded engine, the directory made here as
 * kt_mkdtemp(tag). Returns 0 or -1 (a cmocka group setup may return it). */
int kt_db_setup(const char *tag);

/* Removes the fresh directory of kt_db_setup, if any. Returns 0 or -1. */
int kt_db_teardown(void);

/* The URL of kt_db_setup; kt_db_dir() its fresh directory ("" when $KVQ_TEST_URL named it). */
const char *kt_db_url(void);
const char *kt_db_dir(void);

/* Whether $KVQ_TEST_URL names the database, and whether it names the fdb engine. */
int kt_db_url_given(void);
int kt_db_is_fdb(void);

/* Opens url with the given options (NULL: defaults) inside a test: skips the test when the
 * URL's engine is not available here (and every later open in the program), fails it on any
 * other error. */
kvq_db *kt_db_open_url(const char *url, const kvq_db_options *opts, const kvq_testing_options *t);

/* Opens url outside a test (a fixture): returns kvq_db_open_testing's code. KVQ_ENOENGINE is
 * reported on stderr and remembered: kt_db_skip_unavailable() then skips each test. */
int kt_db_try_open(kvq_db **out,
                   const char *url,
                   const kvq_db_options *opts,
                   const kvq_testing_options *t);

/* Skips the current test when an open found the engine unavailable. */
void kt_db_skip_unavailable(void);

/* Sets key k to v (strings) in a transaction of its own, committed once (no retry): 0, or the
 * first error. */
int kt_put(kvq_db *db, const char *k, const char *v);

/* One fresh embedded database for a whole cmocka group, opened into *db with default options:
 *     kt_group_db(&db, "tag");
 *     return cmocka_run_group_tests(tests, kt_group_db_setup, kt_group_db_teardown);
 * The database is "<kt_mkdtemp(tag)>/db" (kt_group_db_path()); the teardown closes it and
 * removes the directory. */
void kt_group_db(kvq_db **db, const char *tag);
int kt_group_db_setup(void **state);
int kt_group_db_teardown(void **state);
const char *kt_group_db_path(void);

/* ---- spawn-and-kill loops of the crash tests ----------------------------------------------- */

/* Starts (again) the process of slot `slot`; returns its pid. */
typedef pid_t (*kt_spawn_fn)(int slot, void *arg);

/* A kill campaign over n processes, slot i's pid in pids[i], started with spawn(i, arg). Who
 * dies in a cycle: every `all_every`-th cycle all of them; otherwise one random victim (when
 * one_victim) and each other process with a chance of 1 in `one_in`. Random choices come from
 * rand_r(&seed). */
typedef struct kt_kill_loop {
    pid_t *pids;
    int n;
    kt_spawn_fn spawn;
    void *arg;
    int one_victim;
    unsigned one_in;
    int all_every;
    unsigned seed;
    size_t kills; /* out: how many processes were killed in the cycles */
    /* Optional: the files that grow as the processes work (their histories): those in
     * progress_dir whose names start with one of the '|'-separated progress_prefixes. */
    const char *progress_dir;
    const char *progress_prefixes;
} kt_kill_loop;

/* Starts the n processes, then runs up to `cycles` kill cycles: sleeps 50-250 ms, SIGKILLs the
 * plan's choice, reaps each one and starts it again. A cycle in which the progress files did not
 * grow since the previous kill goes on, up to 8 times its span in every build (or
 * kvq_test_time_factor() times in slow builds, when more): a process, its start and its
 * database's open can take longer than a cycle on a busy machine (sanitizer builds most), and a
 * campaign whose processes never got past their start tests nothing. A process that had exited by itself (it
 * found an error) ends the cycles. Last, kills and reaps them all, so that none outlives the
 * test. Returns the exit status of a process that exited by itself during the cycles (-1 when it
 * was not an exit), or when check_end, at the end; else 0. */
int kt_kill_campaign(kt_kill_loop *l, int cycles, int check_end);

/* ---- histories of the crash campaigns -------------------------------------------------------- */

/* Processes append "i writer seq" before an operation and "o writer seq" after it returned
 * (kt_writef: the page cache keeps a write(2) through kill -9); the parent reads them back as ids
 * (writer << 32 | seq). */
typedef struct kt_ids {
    uint64_t *v;
    size_t n, cap;
} kt_ids;

/* Appends id (fails the test when out of memory). */
void kt_ids_push(kt_ids *a, uint64_t id);

/* Sorts the ids (kt_ids_has needs it). */
void kt_ids_sort(kt_ids *a);

/* Whether the sorted array holds id. */
int kt_ids_has(const kt_ids *a, uint64_t id);

void kt_ids_free(kt_ids *a);

/* qsort/bsearch order of uint64_t. */
int kt_cmp_u64(const void *a, const void *b);

/* Appends the ids of the history at path: "i" lines to invoked, the others ("o") to ok. A file
 * that does not exist (a process killed before it wrote) adds nothing. */
void kt_history_read(const char *path, kt_ids *invoked, kt_ids *ok);

/* ---- child processes ----------------------------------------------------------------------- */

/* printf to fd with one write(2), so that nothing is lost in a stdio buffer when the process is
 * killed (histories of the crash tests, a child's report). Returns 0, or -1 when the line is
 * longer than 1,000 bytes or was not written whole. */
int kt_writef(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- assertions ---------------------------------------------------------------------------- */

/* Prints "what (n): xx xx ..." to stderr. */
void kt_hex(const char *what, const uint8_t *p, size_t n);

/* Asserts that a kvq call returns 0, naming the error and the library's detail otherwise. */
#define assert_ok(expr)                                                                            \
    do {                                                                                           \
        int kt_rc_ = (expr);                                                                       \
        if (kt_rc_ != 0)                                                                           \
            fail_msg("%s\n  -> %d %s (%s)", #expr, kt_rc_, kvq_errname(kt_rc_), kvq_last_error()); \
    } while (0)

/* Asserts that a kvq call returns exactly `want`. */
#define assert_err(expr, want)                                                              \
    do {                                                                                    \
        int kt_rc_ = (expr);                                                                \
        int kt_want_ = (want);                                                              \
        if (kt_rc_ != kt_want_)                                                             \
            fail_msg("%s\n  expected %d %s, got %d %s (%s)", #expr, kt_want_,               \
                     kvq_errname(kt_want_), kt_rc_, kvq_errname(kt_rc_), kvq_last_error()); \
    } while (0)

/* Asserts that (got, got_len) holds exactly the bytes (want, want_len). */
#define assert_bytes(got, got_len, want, want_len)                                       \
    do {                                                                                 \
        size_t kt_gl_ = (got_len), kt_wl_ = (want_len);                                  \
        const uint8_t *kt_g_ = (const uint8_t *)(got), *kt_w_ = (const uint8_t *)(want); \
        if (kt_gl_ != kt_wl_ || (kt_wl_ > 0 && memcmp(kt_g_, kt_w_, kt_wl_) != 0)) {     \
            kt_hex("got ", kt_g_, kt_gl_);                                               \
            kt_hex("want", kt_w_, kt_wl_);                                               \
            fail_msg("%s: byte mismatch", #got);                                         \
        }                                                                                \
    } while (0)

/* A C string as the (pointer, length) pair the API takes. */
#define K(s) (const uint8_t *)(s), strlen(s)

#endif /* KVQ_TEST_H */
