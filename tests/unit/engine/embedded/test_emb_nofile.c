/* Few file descriptors (TESTING.md S5, "low RLIMIT_NOFILE").
 *
 * A child (this binary in its "child" mode, started with posix_spawn) closes every descriptor
 * but 0-2, lowers RLIMIT_NOFILE to 3 + `extra`, and then opens a database (an existing one, or a
 * new one it creates) and runs transactions: eight open at once (each reads, so each holds a
 * connection of its own), then a watch, then commits. With too few descriptors some step
 * fails; it must fail with a clear kvq error (KVQ_EIO, its message naming "Too many open
 * files"; never a claim that the database is damaged or the disk full: an earlier kvq refused
 * writes as "disk full" when it could not open its reserve file), never crash or hang (the child
 * has a 30 s alarm). The parent then reopens the database with the normal limit: it opens (a
 * creation cut short is finished), every commit the child had acknowledged is there, and it takes
 * new commits. With enough descriptors every step succeeds.
 *
 * Prints "resources: kind=nofile limits=... clean_errors=... crashes=0 hangs=0 ...". */
#include "kvq_test.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvq/kvq.h"

#define NTXN 8

extern char **environ;
static const char *self;

/* ---- the child ----------------------------------------------------------------------------- */

static void say(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n > 0 && write(1, line, (size_t)(n < (int)sizeof(line) ? n : (int)sizeof(line) - 1)) < 0)
        _exit(6);
}

/* Reports a failed step: "E step code message". */
static int failed(const char *step, int rc)
{
    say("E %s %d %s\n", step, rc, kvq_last_error());
    return rc;
}

static int child(const char *dir, int extra)
{
    alarm(30);
    /* Only 0, 1 and 2 stay open; the limit counts descriptor numbers. */
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    struct rlimit rl = { (rlim_t)(3 + extra), (rlim_t)(3 + extra) };
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 5;
    kvq_db *db = NULL;
    int rc = kvq_db_open(&db, dir, NULL);
    if (rc != 0)
        return failed("open", rc), 0;
    kvq_txn *t[NTXN] = { 0 };
    int ok[NTXN] = { 0 };
    for (int i = 0; i < NTXN; i++) {
        rc = kvq_txn_create(&t[i], db);
        if (rc != 0) {
            failed("create", rc);
            t[i] = NULL;
            continue;
        }
        kvq_bytes v;
        int present;
        rc = kvq_txn_get(&v, &present, t[i], (const uint8_t *)"seed", 4, 0);
        if (rc != 0) {
            failed("get", rc);
            continue;
        }
        char key[32];
        int kn = snprintf(key, sizeof(key), "t/%d/%d", extra, i);
        rc = kvq_txn_set(t[i], (const uint8_t *)key, (size_t)kn, (const uint8_t *)"v", 1);
        if (rc != 0) {
            failed("set", rc);
            continue;
        }
        ok[i] = 1;
    }
    /* A watch, fired by a later commit. */
    kvq_watch *w = NULL;
    kvq_txn *wt = NULL;
    rc = kvq_txn_create(&wt, db);
    if (rc == 0)
        rc = kvq_txn_watch(&w, wt, (const uint8_t *)"w", 1);
    if (rc == 0)
        rc = kvq_txn_commit(wt);
    if (rc != 0) {
        failed("watch", rc);
        kvq_watch_destroy(w);
        w = NULL;
    }
    kvq_txn_destroy(wt);
    for (int i = 0; i < NTXN; i++) {
        if (t[i] == NULL)
            continue;
        if (ok[i]) {
            /* Distinct keys, blind of each other: none conflicts. */
            rc = kvq_txn_commit(t[i]);
            if (rc == 0)
                say("OK %d\n", i);
            else
                failed("commit", rc);
        }
        kvq_txn_destroy(t[i]);
    }
    rc = kvq_txn_create(&wt, db);
    if (rc == 0)
        rc = kvq_txn_set(wt, (const uint8_t *)"w", 1, (const uint8_t *)"x", 1);
    if (rc == 0)
        rc = kvq_txn_commit(wt);
    if (rc != 0)
        failed("fire", rc);
    kvq_txn_destroy(wt);
    if (w != NULL && rc == 0) {
        rc = kvq_watch_wait(w, 10000);
        if (rc != 0)
            failed("watch_wait", rc);
        else
            say("WATCH fired\n");
    }
    kvq_watch_destroy(w);
    kvq_db_close(db);
    say("CLOSED\n");
    return 0;
}

/* ---- the parent ---------------------------------------------------------------------------- */

static struct {
    int runs, steps_failed, clean_errors, unclear_errors, crashes, hangs, lost, reopen_failures;
    int acked, watches_fired;
    int full_runs_failed; /* with enough descriptors, something failed */
} S;

/* Runs the child with 3 + extra descriptors on dir; returns its wait status and reads its
 * report into out (a file). */
static int spawn_child(const char *dir, int extra, const char *out)
{
    char extra_s[16];
    snprintf(extra_s, sizeof(extra_s), "%d", extra);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    char *argv[] = { (char *)self, "child", (char *)dir, extra_s, NULL };
    /* LeakSanitizer needs descriptors of its own at exit (it reads /proc/self/task): a child
     * left without any cannot run it, so it runs only where there are descriptors to spare. */
    static char *saved;
    static int have_saved;
    if (!have_saved) {
        const char *s = getenv("ASAN_OPTIONS");
        saved = s != NULL ? strdup(s) : NULL;
        have_saved = 1;
    }
    char opts[512];
    snprintf(opts, sizeof(opts), "%s%sdetect_leaks=%d", saved ? saved : "", saved ? ":" : "",
             extra >= 200 ? 1 : 0);
    setenv("ASAN_OPTIONS", opts, 1);
    pid_t pid;
    int rc = posix_spawn(&pid, self, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return st;
}

static void one_run(const char *dir, int extra, int fresh)
{
    char out[256];
    snprintf(out, sizeof(out), "%s.out", dir);
    int st = spawn_child(dir, extra, out);
    S.runs++;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) {
        fprintf(stderr, "limit %d: the child hung\n", 3 + extra);
        S.hangs++;
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "limit %d: the child crashed or failed (status %#x)\n", 3 + extra, st);
        S.crashes++;
    }
    int acked[NTXN] = { 0 };
    int errors = 0;
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    char line[600];
    while (fgets(line, sizeof(line), f) != NULL) {
        char step[32];
        int code, i, msg_at = 0;
        if (sscanf(line, "E %31s %d %n", step, &code, &msg_at) == 2) {
            errors++;
            S.steps_failed++;
            const char *msg = line + msg_at;
            /* Out of descriptors is an I/O condition, and the message says so; it is never
             * reported as a damaged database or a full disk. */
            int clear = code == KVQ_EIO && strstr(msg, "Too many open files") != NULL;
            if (clear)
                S.clean_errors++;
            else
                S.unclear_errors++;
            if (!clear || getenv("KVQ_TEST_VERBOSE") != NULL)
                fprintf(stderr, "limit %d (%s): %s failed: %d %s: %s", 3 + extra,
                        fresh ? "new" : "existing", step, code, kvq_errname(code), msg);
        } else if (sscanf(line, "OK %d", &i) == 1 && i >= 0 && i < NTXN) {
            acked[i] = 1;
            S.acked++;
        } else if (strncmp(line, "WATCH fired", 11) == 0) {
            S.watches_fired++;
        }
    }
    fclose(f);
    unlink(out);
    if (extra >= 200 && errors > 0)
        S.full_runs_failed++;

    /* With the normal limit the database opens, holds every acknowledged commit, and works. */
    kvq_db *db = NULL;
    int rc = kvq_db_open(&db, dir, NULL);
    if (rc != 0) {
        fprintf(stderr, "limit %d: reopening failed: %s (%s)\n", 3 + extra, kvq_errname(rc),
                kvq_last_error());
        S.reopen_failures++;
        return;
    }
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    for (int i = 0; i < NTXN; i++) {
        char key[32];
        int kn = snprintf(key, sizeof(key), "t/%d/%d", extra, i);
        kvq_bytes v;
        int present = 0;
        assert_int_equal(kvq_txn_get(&v, &present, t, (const uint8_t *)key, (size_t)kn, 0), 0);
        if (acked[i] && !present) {
            fprintf(stderr, "limit %d: acknowledged %s lost\n", 3 + extra, key);
            S.lost++;
        }
    }
    assert_int_equal(kvq_txn_set(t, (const uint8_t *)"after", 5, (const uint8_t *)"y", 1), 0);
    rc = kvq_txn_commit(t);
    if (rc != 0) {
        fprintf(stderr, "limit %d: commit after reopening: %s (%s)\n", 3 + extra, kvq_errname(rc),
                kvq_last_error());
        S.reopen_failures++;
    }
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_few_descriptors(void **state)
{
    (void)state;
    char base[96];
    assert_int_equal(kt_mkdtemp(base, sizeof(base), "nofile"), 0);
    /* Every limit from none spare to comfortably enough, then plenty. */
    int extras[64], n = 0;
    for (int x = 0; x <= 28; x++)
        extras[n++] = x;
    extras[n++] = 256;
    for (int fresh = 0; fresh <= 1; fresh++) {
        for (int k = 0; k < n; k++) {
            char dir[128];
            snprintf(dir, sizeof(dir), "%s/%s-%d", base, fresh ? "new" : "old", extras[k]);
            if (!fresh) {
                kvq_db *db;
                assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
                kvq_txn *t;
                assert_int_equal(kvq_txn_create(&t, db), 0);
                assert_int_equal(
                    kvq_txn_set(t, (const uint8_t *)"seed", 4, (const uint8_t *)"1", 1), 0);
                assert_int_equal(kvq_txn_commit(t), 0);
                kvq_txn_destroy(t);
                kvq_db_close(db);
            }
            one_run(dir, extras[k], fresh);
        }
    }
    assert_int_equal(kt_rm_rf(base), 0);
    printf("resources: kind=nofile limits=3..%d,%d runs=%d steps_failed=%d clean_errors=%d "
           "unclear_errors=%d acked=%d lost=%d watches_fired=%d crashes=%d hangs=%d "
           "reopen_failures=%d enough_failed=%d\n",
           3 + 28, 3 + 256, S.runs, S.steps_failed, S.clean_errors, S.unclear_errors, S.acked,
           S.lost, S.watches_fired, S.crashes, S.hangs, S.reopen_failures, S.full_runs_failed);
    fflush(stdout);
    assert_true(S.steps_failed > 0); /* the low limits did bite */
    assert_int_equal(S.unclear_errors, 0);
    assert_int_equal(S.crashes, 0);
    assert_int_equal(S.hangs, 0);
    assert_int_equal(S.lost, 0);
    assert_int_equal(S.reopen_failures, 0);
    assert_int_equal(S.full_runs_failed, 0);
}

int main(int argc, char **argv)
{
    self = argv[0];
    if (argc == 4 && strcmp(argv[1], "child") == 0)
        return child(argv[2], atoi(argv[3]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_few_descriptors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
