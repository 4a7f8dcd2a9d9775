/* Processes paused with SIGSTOP (TESTING.md S4, "pauses"). Every process here is this binary in
 * a helper mode, started with posix_spawn.
 *
 * A reader paused for longer than the 5 s transaction window: a child takes a read version
 * (reads a key) and is stopped for 5.5 s while the test keeps committing. Its commits are not
 * held up by the stopped reader's snapshot. Resumed, the reader's next read fails with
 * transaction_too_old (1007); kvq_txn_on_error then retries it, and the retry reads the latest
 * value and commits.
 *
 * A process paused while holding kvq's commit lock: a committer runs under strace, which stops
 * it with SIGSTOP on entering a pwrite64 (writing its WAL frames, with the commit lock held: the
 * test checks that the lock is taken). Two other writer processes then wait: none of their
 * commits completes while the holder is stopped, whereas reads go on. Once the holder is
 * resumed (SIGCONT), every process finishes its commits, and the database is intact: every
 * acknowledged commit is there and the counter they all add to equals their number.
 *
 * A process paused while it runs the shared sync (stopped on entering fdatasync, holding the
 * sync lock on kvq.shm, the commit lock free): the two other writers are not held up (each
 * syncs for itself once the syncer has kept it waiting 20 ms) and finish all their commits
 * while it is stopped; reads go on; after the resume, the same checks.
 *
 * Prints "pause: kind=reader ...", "pause: kind=commit_lock_holder ..." and
 * "pause: kind=syncer ...". The holder's pause
 * is 2 s (KVQ_TEST_SCALE multiplies it, up to 30 s). Reports itself skipped (exit 77) when strace
 * cannot trace here; the reader part needs no strace, but one binary is one ctest test. */
#include "kvq_test.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "test_scale.h"
#include "util/bytes.h"

extern char **environ;
static const char *self;

#define WRITER_COMMITS 20

/* ---- helpers ------------------------------------------------------------------------------- */

/* A line of the child's report on stdout (kt_writef). */
#define say(...)                            \
    do {                                    \
        if (kt_writef(1, __VA_ARGS__) != 0) \
            _exit(6);                       \
    } while (0)

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Adds 1 to "counter" and sets `key`, in one transaction (retried on retryable errors). */
typedef struct add_args {
    const char *key;
} add_args;

static int add_fn(kvq_txn *t, void *p)
{
    add_args *a = p;
    static const uint8_t one[8] = { 1 };
    int rc = kvq_txn_atomic_op(t, (const uint8_t *)"counter", 7, one, 8, KVQ_MUT_ADD);
    if (rc == 0)
        rc = kvq_txn_set(t, (const uint8_t *)a->key, strlen(a->key), (const uint8_t *)"v", 1);
    return rc;
}

/* ---- the helper modes ---------------------------------------------------------------------- */

/* Reads "k", says READ, waits for a line on stdin, then reads again, retries and commits. */
static int reader(const char *dir)
{
    alarm(60);
    kvq_db *db;
    if (kvq_db_open(&db, dir, NULL) != 0)
        return 3;
    kvq_txn *t;
    if (kvq_txn_create(&t, db) != 0)
        return 4;
    kvq_bytes v;
    int present = 0;
    int rc = kvq_txn_get(&v, &present, t, (const uint8_t *)"k", 1, 0);
    if (rc != 0)
        return 5;
    say("READ %.*s\n", (int)v.len, (const char *)v.data);
    char go[8];
    if (read(0, go, sizeof(go)) <= 0)
        return 7;
    rc = kvq_txn_get(&v, &present, t, (const uint8_t *)"k2", 2, 0);
    say("GET_AFTER_PAUSE %d\n", rc);
    int retry = kvq_txn_on_error(t, rc);
    say("ON_ERROR %d\n", retry);
    if (retry != 0)
        return 0;
    rc = kvq_txn_get(&v, &present, t, (const uint8_t *)"k", 1, 0);
    if (rc == 0)
        say("REREAD %.*s\n", (int)v.len, (const char *)v.data);
    if (rc == 0)
        rc = kvq_txn_set(t, (const uint8_t *)"reader", 6, (const uint8_t *)"done", 4);
    if (rc == 0)
        rc = kvq_txn_commit(t);
    say("COMMIT %d\n", rc);
    kvq_txn_destroy(t);
    kvq_db_close(db);
    return 0;
}

/* Commits WRITER_COMMITS times (keys <name>/<i>), saying "OK i" after each. */
static int writer(const char *dir, const char *name)
{
    alarm(120);
    say("PID %d\n", (int)getpid());
    kvq_db *db;
    if (kvq_db_open(&db, dir, NULL) != 0)
        return 3;
    for (int i = 0; i < WRITER_COMMITS; i++) {
        char key[64];
        snprintf(key, sizeof(key), "%s/%02d", name, i);
        add_args a = { key };
        int rc = kvq_db_transact(db, add_fn, &a);
        if (rc != 0) {
            say("F %d %d\n", i, rc);
            return 8;
        }
        say("OK %d\n", i);
    }
    kvq_db_close(db);
    say("DONE\n");
    return 0;
}

/* ---- the parent ---------------------------------------------------------------------------- */

static pid_t spawn(char *const argv[], int in_fd, const char *out)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (in_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    return pid;
}

static int wait_exit(pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return st;
}

/* Waits (at most timeout_ms) for a line starting with `prefix` in file `path`; copies it. */
static int wait_line(const char *path, const char *prefix, char *line, size_t n, int timeout_ms)
{
    int64_t end = now_ms() + timeout_ms;
    while (now_ms() < end) {
        FILE *f = fopen(path, "r");
        if (f != NULL) {
            while (fgets(line, (int)n, f) != NULL) {
                if (strncmp(line, prefix, strlen(prefix)) == 0) {
                    fclose(f);
                    return 1;
                }
            }
            fclose(f);
        }
        usleep(20000);
    }
    return 0;
}

static int count_prefix(const char *path, const char *prefix)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    char line[256];
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        n += strncmp(line, prefix, strlen(prefix)) == 0;
    fclose(f);
    return n;
}

static void put(kvq_db *db, const char *key, const char *value)
{
    assert_int_equal(kt_put(db, key, value), 0);
}

static void test_paused_reader_gets_too_old(void **state)
{
    (void)state;
    char dir[256];
    assert_int_equal(kt_mkdtemp(dir, sizeof(dir), "pause-r"), 0);
    char db_path[300], out[300];
    snprintf(db_path, sizeof(db_path), "%s/db", dir);
    snprintf(out, sizeof(out), "%s/reader.out", dir);
    kvq_db *db;
    assert_int_equal(kvq_db_open(&db, db_path, NULL), 0);
    put(db, "k", "v0");

    int go[2];
    assert_int_equal(pipe(go), 0);
    char *argv[] = { (char *)self, "reader", db_path, NULL };
    pid_t pid = spawn(argv, go[0], out);
    close(go[0]);
    char line[256];
    assert_true(wait_line(out, "READ v0", line, sizeof(line), 20000));
    assert_int_equal(kill(pid, SIGSTOP), 0);

    /* 5.5 s stopped; meanwhile others commit, not held up by the stopped reader's snapshot. */
    int64_t t0 = now_ms();
    int commits = 0;
    char last[32] = "v0";
    while (now_ms() - t0 < 5500) {
        snprintf(last, sizeof(last), "v%d", ++commits);
        put(db, "k", last);
        usleep(20000);
    }
    int64_t stopped_ms = now_ms() - t0;
    assert_int_equal(kill(pid, SIGCONT), 0);
    assert_int_equal(write(go[1], "go\n", 3), 3);
    close(go[1]);
    int st = wait_exit(pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    int get_rc = -1, on_error = -1, commit_rc = -1;
    char reread[32] = "";
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        sscanf(line, "GET_AFTER_PAUSE %d", &get_rc);
        sscanf(line, "ON_ERROR %d", &on_error);
        sscanf(line, "REREAD %31s", reread);
        sscanf(line, "COMMIT %d", &commit_rc);
    }
    fclose(f);
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    kvq_bytes v;
    int present = 0;
    assert_int_equal(kvq_txn_get(&v, &present, t, (const uint8_t *)"reader", 6, 0), 0);
    kvq_txn_destroy(t);
    kvq_db_close(db);
    printf("pause: kind=reader stopped_ms=%lld commits_meanwhile=%d read_after_resume=%s "
           "retry=%s reread_latest=%s commit_after_retry=%s\n",
           (long long)stopped_ms, commits, get_rc >= 0 ? kvq_errname(get_rc) : "none",
           on_error == 0 ? "yes" : "no", strcmp(reread, last) == 0 ? "yes" : "no",
           commit_rc >= 0 ? kvq_errname(commit_rc) : "none");
    fflush(stdout);
    assert_true(commits > 0);
    assert_int_equal(get_rc, KVQ_ETRANSACTION_TOO_OLD);
    assert_int_equal(on_error, 0);
    assert_string_equal(reread, last);
    assert_int_equal(commit_rc, 0);
    assert_true(present);
    assert_int_equal(kt_rm_rf(dir), 0);
}

/* Whether another process holds an flock on db_path/file: kvq.lock is the commit lock, kvq.shm
 * the shared sync's lock. */
static int lock_held(const char *db_path, const char *file)
{
    char p[400];
    snprintf(p, sizeof(p), "%s/%s", db_path, file);
    int fd = open(p, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    int held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (!held)
        flock(fd, LOCK_UN);
    close(fd);
    return held;
}

static char proc_state(pid_t pid)
{
    char p[64], buf[512];
    snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(p, "r");
    if (f == NULL)
        return '?';
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *r = strrchr(buf, ')');
    return r != NULL && r[1] == ' ' ? r[2] : '?';
}

/* kind 0: the commit lock holder, stopped while it writes its WAL frames (a pwrite64 under the
 * lock): the other writers wait; kind 1: the process running the shared sync, stopped on its
 * fdatasync (the commit lock free): the other writers' commits go on, synced by themselves. */
/* killed: after the pause the holder gets SIGKILL instead of SIGCONT (a leader dying in the
 * middle of its commit, or of the sync the others wait for): the others must still finish, and
 * the holder's commit in flight is there whole or not at all. */
static void paused_holder(int kind, int killed)
{
    const char *sys = kind == 0 ? "pwrite64" : "fdatasync";
    const char *lock_file = kind == 0 ? "kvq.lock" : "kvq.shm";
    double scale = kvq_test_scale();
    int pause_ms = (int)(2000 * scale);
    if (pause_ms > 30000)
        pause_ms = 30000;
    char dir[256];
    char db_path[300], hold_out[300], out[2][300];
    kvq_db *db = NULL;
    pid_t strace_pid = -1, holder = -1;
    int held = 0;
    /* The holder stops on entering its Nth sync. Which sync falls inside a commit, with the
     * commit lock held, depends on how many the opening and a checkpoint take: start at the
     * 4th (inside its second or third commit, after the WAL frames were written) and, if the
     * lock turns out not to be held there, try the next one on a fresh database. */
    for (int when = 4; !held && when <= 40; when++) {
        if (db != NULL) {
            /* The last try stopped outside a commit: end it and start again. */
            kill(holder, SIGKILL);
            kill(holder, SIGCONT);
            wait_exit(strace_pid);
            kvq_db_close(db);
            assert_int_equal(kt_rm_rf(dir), 0);
        }
        assert_int_equal(kt_mkdtemp(dir, sizeof(dir), "pause-w"), 0);
        snprintf(db_path, sizeof(db_path), "%s/db", dir);
        snprintf(hold_out, sizeof(hold_out), "%s/holder.out", dir);
        assert_int_equal(kvq_db_open(&db, db_path, NULL), 0);
        put(db, "seed", "1");
        char inject[64];
        char trace[32];
        snprintf(trace, sizeof(trace), "trace=%s", sys);
        snprintf(inject, sizeof(inject), "inject=%s:signal=SIGSTOP:when=%d", sys, when);
        /* LeakSanitizer cannot run under ptrace: switch it off in the traced child. */
        char *hargv[] = { "env",
                          "ASAN_OPTIONS=detect_leaks=0",
                          "strace",
                          "-f",
                          "-qq",
                          "-o",
                          "/dev/null",
                          "-e",
                          trace,
                          "-e",
                          inject,
                          (char *)self,
                          "writer",
                          db_path,
                          "h",
                          NULL };
        strace_pid = spawn(hargv, -1, hold_out);
        char line[256];
        assert_true(wait_line(hold_out, "PID ", line, sizeof(line), 20000));
        holder = (pid_t)atoi(line + 4);
        /* A traced process also shows 't' for a moment at each traced syscall, while strace
         * looks at it: only a stop that lasts (half a second of samples) is the injected one. */
        int64_t t0 = now_ms();
        int stopped_samples = 0;
        while (now_ms() - t0 < 60000 && stopped_samples < 50) {
            char ps = proc_state(holder);
            if (ps == '?' || ps == 'Z')
                break; /* it ended without stopping */
            stopped_samples = ps == 't' || ps == 'T' ? stopped_samples + 1 : 0;
            usleep(10000);
        }
        assert_true(stopped_samples >= 50);
        held = lock_held(db_path, lock_file) && (kind == 0 || !lock_held(db_path, "kvq.lock"));
        if (!held)
            printf("# the holder's %s %d was not where this test wants it; trying the next one\n",
                   sys, when);
    }
    int holder_acked_before = count_prefix(hold_out, "OK ");

    /* Two writers: they must wait while the commit lock holder is stopped, and go on while the
     * syncer is. */
    pid_t w[2];
    for (int i = 0; i < 2; i++) {
        snprintf(out[i], sizeof(out[i]), "%s/w%d.out", dir, i);
        char name[8];
        snprintf(name, sizeof(name), "w%d", i);
        char *wargv[] = { (char *)self, "writer", db_path, name, NULL };
        w[i] = spawn(wargv, -1, out[i]);
    }
    /* Reads do not wait for the lock. */
    int64_t r0 = now_ms();
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    kvq_bytes v;
    int present = 0;
    assert_int_equal(kvq_txn_get(&v, &present, t, (const uint8_t *)"seed", 4, 0), 0);
    assert_true(present);
    kvq_txn_destroy(t);
    int64_t read_ms = now_ms() - r0;
    usleep((useconds_t)pause_ms * 1000);
    int waited_acks = count_prefix(out[0], "OK ") + count_prefix(out[1], "OK ");
    /* The stopped syncer holds nobody up: the writers finish while it is still stopped, however
     * long a busy machine takes them (up to 120 s; the pause above is only the least). */
    for (int64_t w0 = now_ms(); kind == 1 && waited_acks < 2 * WRITER_COMMITS &&
                                now_ms() - w0 < 120000;
         waited_acks = count_prefix(out[0], "OK ") + count_prefix(out[1], "OK "))
        usleep(50000);
    int still_held = lock_held(db_path, lock_file);

    /* Resume (or kill): everyone else progresses. */
    assert_int_equal(kill(holder, killed ? SIGKILL : SIGCONT), 0);
    int st = wait_exit(strace_pid);
    int holder_ok = killed || (WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int holder_acked = count_prefix(hold_out, "OK ");
    int writers_ok = 1;
    for (int i = 0; i < 2; i++) {
        st = wait_exit(w[i]);
        writers_ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    int acked =
        count_prefix(hold_out, "OK ") + count_prefix(out[0], "OK ") + count_prefix(out[1], "OK ");

    /* Nothing lost, nothing half-done: every key, and the counter equals their number. */
    kvq_db_close(db);
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.flags |= KVQ_DB_NO_CREATE;
    assert_int_equal(kvq_db_open(&db, db_path, &o), 0);
    assert_int_equal(kvq_txn_create(&t, db), 0);
    const char *names[] = { "h", "w0", "w1" };
    int missing = 0, holder_present = 0, holder_acked_missing = 0;
    for (int n = 0; n < 3; n++) {
        for (int i = 0; i < WRITER_COMMITS; i++) {
            char key[32];
            snprintf(key, sizeof(key), "%s/%02d", names[n], i);
            assert_int_equal(kvq_txn_get(&v, &present, t, (const uint8_t *)key, strlen(key), 0), 0);
            if (n == 0 && killed) {
                /* The killed holder: what it acknowledged is there; what it did not, absent,
                 * except the one commit in flight when it died, which may be there whole. */
                holder_present += present;
                holder_acked_missing += i < holder_acked && !present;
            } else {
                missing += !present;
            }
        }
    }
    assert_int_equal(kvq_txn_get(&v, &present, t, (const uint8_t *)"counter", 7, 0), 0);
    uint64_t counter = present && v.len == 8 ? kvq__le_get(v.data, 8) : 0;
    const kvq_kv *kvs;
    size_t nkv = 0;
    /* A full scan checks every stored row's checksum. */
    int scan_rc = kvq_txn_get_range(&kvs, &nkv, NULL, t, (const uint8_t *)"", 0,
                                    (const uint8_t *)"\xff", 1, 0, 0);
    kvq_txn_destroy(t);
    kvq_db_close(db);
    printf("pause: kind=%s%s stopped_ms=%d lock_held=%s holder_acked_before=%d "
           "others_acked_while_stopped=%d read_while_stopped_ms=%lld %s_all_done=%s "
           "acked=%d missing=%d holder_present=%d holder_acked_missing=%d counter=%llu "
           "scan=%s\n",
           kind == 0 ? "commit_lock_holder" : "syncer", killed ? "_killed" : "", pause_ms,
           held && still_held ? "yes" : "no", holder_acked_before, waited_acks,
           (long long)read_ms, killed ? "others" : "resumed",
           holder_ok && writers_ok ? "yes" : "no", acked, missing, holder_present,
           holder_acked_missing, (unsigned long long)counter, kvq_errname(scan_rc));
    fflush(stdout);
    assert_true(held && still_held);
    if (kind == 0)
        assert_int_equal(waited_acks, 0);
    else
        assert_int_equal(waited_acks, 2 * WRITER_COMMITS);
    /* The read returned while the holder was stopped, which is the point; one that had waited
     * for the lock would have taken SQLite's busy timeout (30 s) or failed. */
    assert_true(read_ms < 20000);
    assert_true(holder_ok && writers_ok);
    assert_int_equal(missing, 0);
    assert_int_equal(scan_rc, 0);
    if (!killed) {
        assert_int_equal(acked, 3 * WRITER_COMMITS);
        assert_int_equal(counter, (uint64_t)acked);
        assert_int_equal(nkv, (size_t)(3 * WRITER_COMMITS + 2));
    } else {
        assert_int_equal(holder_acked_missing, 0);
        assert_true(holder_present == holder_acked || holder_present == holder_acked + 1);
        assert_int_equal(acked, 2 * WRITER_COMMITS + holder_acked);
        /* All or nothing: the counter counts exactly the commits that are there. */
        assert_int_equal(counter, (uint64_t)(2 * WRITER_COMMITS + holder_present));
        assert_int_equal(nkv, (size_t)(2 * WRITER_COMMITS + holder_present + 2));
    }
    assert_int_equal(kt_rm_rf(dir), 0);
}

static void test_paused_lock_holder(void **state)
{
    (void)state;
    paused_holder(0, 0);
}

static void test_paused_syncer(void **state)
{
    (void)state;
    paused_holder(1, 0);
}

/* kill -9 of the leader in the middle of its batch: while it writes the WAL frames under the
 * commit lock, and while it runs the sync the other processes' commits wait for. */
static void test_killed_lock_holder(void **state)
{
    (void)state;
    paused_holder(0, 1);
}

static void test_killed_syncer(void **state)
{
    (void)state;
    paused_holder(1, 1);
}

int main(int argc, char **argv)
{
    self = argv[0];
    /* The reader's pause is measured against the real 5 s window, whatever a slow build's
     * $KVQ_TEST_TXN_WINDOW_MS says (the children inherit it). */
    setenv("KVQ_TEST_TXN_WINDOW_MS", "5000", 1);
    if (argc == 3 && strcmp(argv[1], "reader") == 0)
        return reader(argv[2]);
    if (argc == 4 && strcmp(argv[1], "writer") == 0)
        return writer(argv[2], argv[3]);
    if (!kvq_test_have_strace("pause")) {
        return 77; /* ctest: skipped (SKIP_RETURN_CODE), never counted as passed */
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paused_reader_gets_too_old),
        cmocka_unit_test(test_paused_lock_holder),
        cmocka_unit_test(test_paused_syncer),
        cmocka_unit_test(test_killed_lock_holder),
        cmocka_unit_test(test_killed_syncer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
