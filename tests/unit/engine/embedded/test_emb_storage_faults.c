/* Storage faults injected under strace (TESTING.md S5): the disk refuses one write, or every
 * write from some point on, with ENOSPC or EIO, or a sync fails with EIO.
 *
 * A child process (this binary in its "child" mode) runs a small workload on an existing
 * database: transaction i sets two keys a/i and b/i (2,000-byte values, so that one commit writes
 * several WAL frames) and adds 1 to a counter, and the child writes "I i", then "OK i" or
 * "F i <code>" to its standard output around each commit. It runs under
 *   strace -f -e inject=pwrite64,pwritev:error=ENOSPC|EIO:when=N[+]
 *   strace -f -e inject=fdatasync,fsync:error=EIO:when=N[+]
 * at points N spread over the workload's calls (counted in a dry run: the workload is
 * single-threaded, and strace counts per thread). The checks:
 *
 * - the child neither crashes nor hangs (a 60 s limit), and every failed commit returns a clear
 *   kvq error: KVQ_ENOSPC, KVQ_EIO or 1021 (commit_unknown_result), with a message;
 * - a failed sync of a commit is reported as 1021, never as success or as a definite failure:
 *   its WAL frames are written and may or may not survive, so kvq cannot tell;
 * - the database then opens (without strace) and reads intact, and takes a new commit;
 * - each transaction is wholly there or wholly absent (a/i, b/i and its share of the counter);
 *   an acknowledged one is there; one that failed with a definite error is absent; a 1021 is
 *   either, and the test counts how each was resolved;
 * - after a single refused write, the same process commits again (in-process recovery).
 *
 * Some runs end the child right after its first failure, without closing the database, as a
 * crash would: then a 1021 whose frames reached the WAL may be resolved as committed.
 *
 * Prints "storagefaults: runs=... injected=... lost=0 unexpected=0 half=0 ...". Reports itself
 * skipped to ctest (exit 77) when strace is missing or ptrace is refused. */
#include "kvq_test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq/testing.h"
#include "test_scale.h"
#include "util/bytes.h"

#define NTXN 12
#define VLEN 2000

static const char *self;

/* ---- the child ----------------------------------------------------------------------------- */

/* A line of the child's report on stdout: kt_writef, one write(2), so that nothing is lost in a
 * stdio buffer if the child dies. */
#define say(...)                            \
    do {                                    \
        if (kt_writef(1, __VA_ARGS__) != 0) \
            _exit(6);                       \
    } while (0)

static void value_of(uint8_t *v, int i, char which)
{
    for (int j = 0; j < VLEN; j++)
        v[j] = (uint8_t)(which + i + j * 7);
}

static int one_txn(kvq_db *db, int i)
{
    kvq_txn *t;
    int rc = kvq_txn_create(&t, db);
    if (rc != 0)
        return rc;
    static uint8_t v[VLEN];
    char key[32];
    for (int w = 0; w < 2 && rc == 0; w++) {
        char which = w == 0 ? 'a' : 'b';
        int kn = snprintf(key, sizeof(key), "%c/%03d", which, i);
        value_of(v, i, which);
        rc = kvq_txn_set(t, (const uint8_t *)key, (size_t)kn, v, VLEN);
    }
    static const uint8_t one[8] = { 1 };
    if (rc == 0)
        rc = kvq_txn_atomic_op(t, (const uint8_t *)"counter", 7, one, 8, KVQ_MUT_ADD);
    if (rc == 0)
        rc = kvq_txn_commit(t);
    kvq_txn_destroy(t);
    return rc;
}

/* exit_on_fail: end the process at the first failure without closing the database. */
static int child(const char *dir, int exit_on_fail, unsigned int test_flags)
{
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    kvq_testing_options tk = KVQ_TESTING_OPTIONS_INIT;
    o.flags |= KVQ_DB_NO_CREATE;
    tk.flags = test_flags;
    kvq_db *db;
    int rc = kvq_db_open_testing(&db, dir, &o, &tk);
    if (rc != 0) {
        say("OPENFAIL %d %s\n", rc, kvq_last_error()[0] ? "msg" : "nomsg");
        return 3;
    }
    int failed = 0;
    for (int i = 0; i < NTXN; i++) {
        say("I %d\n", i);
        rc = one_txn(db, i);
        if (rc == 0) {
            say("OK %d\n", i);
            continue;
        }
        say("F %d %d %s\n", i, rc, kvq_last_error()[0] ? "msg" : "nomsg");
        failed = 1;
        if (exit_on_fail)
            _exit(0);
    }
    /* After a fault the same handle must work again: a refused write is not a broken engine.
     * (Drain mode after an ENOSPC lasts until the engine sees free space again.) */
    if (failed) {
        struct timespec t0, now;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            kvq_txn *t;
            rc = kvq_txn_create(&t, db);
            if (rc == 0)
                rc = kvq_txn_set(t, (const uint8_t *)"after", 5, (const uint8_t *)"x", 1);
            if (rc == 0)
                rc = kvq_txn_commit(t);
            kvq_txn_destroy(t);
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (rc == 0 || now.tv_sec - t0.tv_sec > 5)
                break;
            usleep(20000);
        }
        say(rc == 0 ? "RECOVERED\n" : "NOTRECOVERED %d\n", rc);
    }
    kvq_db_close(db);
    say("CLOSED\n");
    return 0;
}

/* ---- the parent ---------------------------------------------------------------------------- */

static struct {
    int runs, injected, commits_failed, enospc, eio, unknown, unknown_present, unknown_absent;
    int lost, unexpected, half, unclear, crashes, hangs, reopen_failures, open_failures;
    int recovered, recover_expected;
    int sync_fail_not_unknown;
} S;

static void seed_db(const char *db)
{
    kvq_db *h;
    assert_int_equal(kvq_db_open(&h, db, NULL), 0);
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, h), 0);
    assert_int_equal(kvq_txn_set(t, (const uint8_t *)"seed", 4, (const uint8_t *)"1", 1), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
    kvq_db_close(h);
}

/* Counts the lines of a file that contain `needle`, or -1. */
static int count_lines(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

typedef struct run_spec {
    const char *calls; /* "pwrite64,pwritev" or "fdatasync,fsync" */
    const char *err;   /* "ENOSPC" or "EIO" */
    int when;          /* the call that fails; 0: none (the dry run) */
    int persistent;    /* every call from `when` on fails */
    int exit_on_fail;
    unsigned int test_flags; /* KVQ_TEST_*: the broken engine */
} run_spec;

typedef struct run_result {
    int status;        /* the wait status of strace (it passes on the child's) */
    int injected;      /* calls strace failed */
    int calls[2];      /* the main thread's write and sync calls (dry run) */
    int outcome[NTXN]; /* -1 not invoked, 0 ok, else the failing code */
    int invoked[NTXN];
    int open_failed, recovered, not_recovered, closed;
    int nomsg;
} run_result;

static void run_child(const char *dir, const run_spec *sp, run_result *r)
{
    char db[128], trace[128], out[128], cmd[1536];
    snprintf(db, sizeof(db), "%s/db", dir);
    snprintf(trace, sizeof(trace), "%s/trace", dir);
    snprintf(out, sizeof(out), "%s/out", dir);
    char inject[128] = "";
    if (sp->when > 0)
        snprintf(inject, sizeof(inject), "-e inject=%s:error=%s:when=%d%s", sp->calls, sp->err,
                 sp->when, sp->persistent ? "+" : "");
    snprintf(cmd, sizeof(cmd),
             /* LeakSanitizer cannot run under ptrace: switch it off in the traced child. */
             "ASAN_OPTIONS=detect_leaks=0 timeout -s KILL 60 "
             "strace -f -qq -o %s -e trace=pwrite64,pwritev,fsync,fdatasync %s "
             "%s child %s %d %u > %s 2>/dev/null",
             trace, inject, self, db, sp->exit_on_fail, sp->test_flags, out);
    memset(r, 0, sizeof(*r));
    for (int i = 0; i < NTXN; i++)
        r->outcome[i] = -1;
    r->status = system(cmd);
    r->injected = count_lines(trace, "(INJECTED)");
    r->calls[0] = count_lines(trace, "pwrite");
    r->calls[1] = count_lines(trace, "sync(");
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    char line[256];
    while (fgets(line, sizeof(line), f) != NULL) {
        int i, code;
        char msg[16];
        if (sscanf(line, "I %d", &i) == 1 && i >= 0 && i < NTXN) {
            r->invoked[i] = 1;
        } else if (sscanf(line, "OK %d", &i) == 1 && i >= 0 && i < NTXN) {
            r->outcome[i] = 0;
        } else if (sscanf(line, "F %d %d %15s", &i, &code, msg) == 3 && i >= 0 && i < NTXN) {
            r->outcome[i] = code;
            r->nomsg += strcmp(msg, "nomsg") == 0;
        } else if (sscanf(line, "OPENFAIL %d %15s", &code, msg) == 2) {
            r->open_failed = code;
            r->nomsg += strcmp(msg, "nomsg") == 0;
        } else if (strncmp(line, "RECOVERED", 9) == 0) {
            r->recovered = 1;
        } else if (strncmp(line, "NOTRECOVERED", 12) == 0) {
            r->not_recovered = 1;
        } else if (strncmp(line, "CLOSED", 6) == 0) {
            r->closed = 1;
        }
    }
    fclose(f);
}

/* Reopens the database and checks it against the child's outcomes. */
static void check_db(const char *dir, const run_spec *sp, const run_result *r)
{
    char db[128];
    snprintf(db, sizeof(db), "%s/db", dir);
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.flags |= KVQ_DB_NO_CREATE;
    kvq_db *h = NULL;
    int rc = kvq_db_open(&h, db, &o);
    if (rc != 0) {
        fprintf(stderr, "run %s:%s:when=%d%s: reopening failed: %s (%s)\n", sp->calls, sp->err,
                sp->when, sp->persistent ? "+" : "", kvq_errname(rc), kvq_last_error());
        S.reopen_failures++;
        return;
    }
    kvq_txn *t;
    /* A commit first, whose sync covers whatever the child wrote: with the commit pipeline (on
     * by default on the log store) a read sees only what is known to be synced, and the
     * child's last batch, whose sync failed, is not until a sync covers it. */
    assert_int_equal(kvq_txn_create(&t, h), 0);
    assert_int_equal(kvq_txn_set(t, (const uint8_t *)"z/reopened", 10, (const uint8_t *)"1", 1), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_reset(t);
    uint64_t present_count = 0;
    static uint8_t want[VLEN];
    for (int i = 0; i < NTXN; i++) {
        int present[2] = { 0, 0 };
        for (int w = 0; w < 2; w++) {
            char which = w == 0 ? 'a' : 'b';
            char key[32];
            int kn = snprintf(key, sizeof(key), "%c/%03d", which, i);
            kvq_bytes v;
            rc = kvq_txn_get(&v, &present[w], t, (const uint8_t *)key, (size_t)kn, 0);
            if (rc != 0) {
                fprintf(stderr, "reading %s: %s (%s)\n", key, kvq_errname(rc), kvq_last_error());
                S.reopen_failures++;
                present[w] = 0;
                continue;
            }
            value_of(want, i, which);
            if (present[w] && (v.len != VLEN || memcmp(v.data, want, VLEN) != 0))
                S.half++; /* a value that is not the one written */
        }
        if (present[0] != present[1]) {
            fprintf(stderr, "txn %d: half there (a=%d b=%d)\n", i, present[0], present[1]);
            S.half++;
        }
        int there = present[0] && present[1];
        present_count += (uint64_t)there;
        int out = r->outcome[i];
        if (out == 0 && !there) {
            fprintf(stderr, "txn %d: acknowledged but lost\n", i);
            S.lost++;
        } else if (out == KVQ_ECOMMIT_UNKNOWN_RESULT) {
            if (there)
                S.unknown_present++;
            else
                S.unknown_absent++;
        } else if (out != 0 && there) {
            /* A definite failure, or never acknowledged (not invoked, or the child died before
             * it could say): only an invoked commit whose outcome the child never reported may
             * be there. */
            if (!(out == -1 && r->invoked[i])) {
                fprintf(stderr, "txn %d: failed with %d but present\n", i, out);
                S.unexpected++;
            }
        }
    }
    kvq_bytes cv;
    int cp = 0;
    assert_int_equal(kvq_txn_get(&cv, &cp, t, (const uint8_t *)"counter", 7, 0), 0);
    uint64_t counter = cp && cv.len == 8 ? kvq__le_get(cv.data, 8) : 0;
    if (counter != present_count) {
        fprintf(stderr, "counter %llu, but %llu transactions present\n",
                (unsigned long long)counter, (unsigned long long)present_count);
        S.half++;
    }
    kvq_txn_destroy(t);
    /* The reopened database takes a new commit. */
    assert_int_equal(kvq_txn_create(&t, h), 0);
    assert_int_equal(kvq_txn_set(t, (const uint8_t *)"reopened", 8, (const uint8_t *)"y", 1), 0);
    rc = kvq_txn_commit(t);
    if (rc != 0) {
        fprintf(stderr, "commit after reopening: %s (%s)\n", kvq_errname(rc), kvq_last_error());
        S.reopen_failures++;
    }
    kvq_txn_destroy(t);
    kvq_db_close(h);
}

static void one_run(const run_spec *sp, int dry_calls[2])
{
    char dir[96];
    assert_int_equal(kt_mkdtemp(dir, sizeof(dir), "stfault"), 0);
    char db[128];
    snprintf(db, sizeof(db), "%s/db", dir);
    seed_db(db);
    run_result r;
    run_child(dir, sp, &r);
    if (dry_calls != NULL) {
        dry_calls[0] = r.calls[0];
        dry_calls[1] = r.calls[1];
    }
    S.runs++;
    S.injected += r.injected;
    if (WIFSIGNALED(r.status) || (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 137)) {
        fprintf(stderr, "run %s:%s:when=%d%s: the child hung or was killed (status %#x)\n",
                sp->calls, sp->err, sp->when, sp->persistent ? "+" : "", r.status);
        S.hangs++;
    } else if (!WIFEXITED(r.status) || (WEXITSTATUS(r.status) != 0 && WEXITSTATUS(r.status) != 3)) {
        fprintf(stderr, "run %s:%s:when=%d%s: the child crashed (status %#x)\n", sp->calls, sp->err,
                sp->when, sp->persistent ? "+" : "", r.status);
        S.crashes++;
    }
    S.unclear += r.nomsg;
    if (r.open_failed) {
        S.open_failures++;
        if (r.open_failed != KVQ_ENOSPC && r.open_failed != KVQ_EIO)
            S.unclear++;
    }
    int failed_here = 0;
    for (int i = 0; i < NTXN; i++) {
        int c = r.outcome[i];
        if (c <= 0)
            continue;
        failed_here++;
        S.commits_failed++;
        if (c == KVQ_ENOSPC)
            S.enospc++;
        else if (c == KVQ_EIO)
            S.eio++;
        else if (c == KVQ_ECOMMIT_UNKNOWN_RESULT)
            S.unknown++;
        else {
            fprintf(stderr, "txn %d: unclear error %d (%s)\n", i, c, kvq_errname(c));
            S.unclear++;
        }
        /* A sync that failed leaves the outcome unknown: nothing else is honest. */
        if (strstr(sp->calls, "sync") != NULL && c != KVQ_ECOMMIT_UNKNOWN_RESULT)
            S.sync_fail_not_unknown++;
    }
    /* A single refused write or sync is transient: the handle must commit again. */
    if (failed_here > 0 && !sp->persistent && !sp->exit_on_fail) {
        S.recover_expected++;
        S.recovered += r.recovered;
        if (!r.recovered)
            fprintf(stderr, "run %s:%s:when=%d: the handle did not recover\n", sp->calls, sp->err,
                    sp->when);
    }
    if (sp->when > 0 && r.injected == 0)
        fprintf(stderr, "run %s:%s:when=%d: nothing injected\n", sp->calls, sp->err, sp->when);
    check_db(dir, sp, &r);
    assert_int_equal(kt_rm_rf(dir), 0);
}

static void test_injected_storage_faults(void **state)
{
    (void)state;
    /* The dry run: how many write and sync calls the workload makes. */
    run_spec dry = { "pwrite64,pwritev", "ENOSPC", 0, 0, 0, 0 };
    int calls[2] = { 0, 0 };
    one_run(&dry, calls);
    assert_true(calls[0] > 0 && calls[1] > 0);
    int points = (int)kvq_test_scaled(5);
    static const struct {
        const char *calls, *err;
        int which, persistent, exit_on_fail;
    } kinds[] = {
        { "pwrite64,pwritev", "ENOSPC", 0, 0, 0 }, { "pwrite64,pwritev", "EIO", 0, 0, 0 },
        { "fdatasync,fsync", "EIO", 1, 0, 0 },     { "fdatasync,fsync", "EIO", 1, 0, 1 },
        { "pwrite64,pwritev", "EIO", 0, 0, 1 },    { "pwrite64,pwritev", "ENOSPC", 0, 1, 0 },
        { "pwrite64,pwritev", "EIO", 0, 1, 0 },    { "fdatasync,fsync", "EIO", 1, 1, 0 },
    };
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        int total = calls[kinds[k].which];
        /* Persistent faults need one point only: they start early and last. */
        int np = kinds[k].persistent ? 1 : points;
        if (np > total)
            np = total;
        for (int p = 1; p <= np; p++) {
            run_spec sp = { kinds[k].calls,      kinds[k].err,          0,
                            kinds[k].persistent, kinds[k].exit_on_fail, 0 };
            sp.when = kinds[k].persistent ? total / 3 + 1 : (int)((long)total * p / (np + 1)) + 1;
            one_run(&sp, NULL);
        }
    }
    printf("storagefaults: runs=%d dry_run_calls=write:%d,sync:%d injected=%d "
           "failed_commits=%d enospc=%d eio=%d unknown=%d (present %d, absent %d) "
           "sync_failures_not_unknown=%d recovered=%d/%d open_failures=%d lost=%d unexpected=%d "
           "half=%d unclear_errors=%d crashes=%d hangs=%d reopen_failures=%d\n",
           S.runs, calls[0], calls[1], S.injected, S.commits_failed, S.enospc, S.eio, S.unknown,
           S.unknown_present, S.unknown_absent, S.sync_fail_not_unknown, S.recovered,
           S.recover_expected, S.open_failures, S.lost, S.unexpected, S.half, S.unclear, S.crashes,
           S.hangs, S.reopen_failures);
    fflush(stdout);
    assert_true(S.injected > 0);
    assert_true(S.commits_failed > 0);
    assert_true(S.unknown > 0);
    assert_int_equal(S.sync_fail_not_unknown, 0);
    assert_int_equal(S.recovered, S.recover_expected);
    assert_int_equal(S.lost, 0);
    assert_int_equal(S.unexpected, 0);
    assert_int_equal(S.half, 0);
    assert_int_equal(S.unclear, 0);
    assert_int_equal(S.crashes, 0);
    assert_int_equal(S.hangs, 0);
    assert_int_equal(S.reopen_failures, 0);
}

/* The broken engine: a failed sync reported as a definite KVQ_EIO. The checker must see it, and
 * see a commit that "failed" and is there all the same (the child ends at its first failure, so
 * the frames it wrote are recovered from the WAL). */
static void test_checker_catches_ioerr_as_definite(void **state)
{
    (void)state;
    memset(&S, 0, sizeof(S));
    run_spec dry = { "fdatasync,fsync", "EIO", 0, 0, 0, 0 };
    int calls[2] = { 0, 0 };
    one_run(&dry, calls);
    int points = (int)kvq_test_scaled(4);
    for (int p = 1; p <= points && p <= calls[1]; p++) {
        run_spec sp = { "fdatasync,fsync", "EIO", 0, 0, 1, KVQ_TEST_IOERR_AS_DEFINITE };
        sp.when = (int)((long)calls[1] * p / (points + 1)) + 1;
        one_run(&sp, NULL);
    }
    printf("storagefaults: runs=%d injected=%d failed_commits=%d eio=%d unknown=%d "
           "sync_failures_not_unknown=%d unexpected=%d broken_engine=ioerr_as_definite (the "
           "checker must see them)\n",
           S.runs, S.injected, S.commits_failed, S.eio, S.unknown, S.sync_fail_not_unknown,
           S.unexpected);
    fflush(stdout);
    assert_true(S.sync_fail_not_unknown > 0);
    assert_true(S.unexpected > 0);
}

int main(int argc, char **argv)
{
    self = argv[0];
    if (argc == 5 && strcmp(argv[1], "child") == 0)
        return child(argv[2], atoi(argv[3]), (unsigned int)strtoul(argv[4], NULL, 10));
    if (!kvq_test_have_strace("storagefaults"))
        return 77; /* ctest: skipped (SKIP_RETURN_CODE), never counted as passed */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_injected_storage_faults),
        cmocka_unit_test(test_checker_catches_ioerr_as_definite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
