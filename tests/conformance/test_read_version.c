/* Conformance: read versions advance with time, as FoundationDB's do (about a million a second),
 * even when nothing commits, without giving up serializability.
 *
 * - Two read versions taken 200 ms apart on a quiet database differ by at least 100,000 (and,
 *   as a sanity bound, at most 100,000,000).
 * - A read version taken after a commit returned is >= that commit's version.
 * - A commit made after a reader took its read version (the database otherwise idle, so that
 *   the reader's read version is ahead of the last stored commit, by the clock) gets a larger
 *   version than that read version, and the reader, which read the key it wrote, fails with
 *   not_committed (1020). The writer is another thread, then another process (started with
 *   posix_spawn, never a bare fork of this threaded program).
 *
 * Timing: no test asserts a speed. Sleeps only make time pass; every bound is generous. */
#include "conformance.h"

#include <pthread.h>
#include <spawn.h>

extern char **environ;

#define ROUNDS 200

static kvq_txn *new_txn(kvq_db *db)
{
    kvq_txn *t = NULL;
    assert_ok(kvq_txn_create(&t, db));
    return t;
}

static int64_t read_version(kvq_db *db)
{
    kvq_txn *t = new_txn(db);
    int64_t rv = 0;
    assert_ok(kvq_txn_get_read_version(&rv, t));
    kvq_txn_destroy(t);
    return rv;
}

/* Commits key = val; returns the commit's version. */
static int64_t commit_write(kvq_db *db, const cf_key *k, uint64_t val)
{
    uint8_t v[8];
    cf_put_le(v, val, 8);
    kvq_txn *t = new_txn(db);
    int64_t cv = 0;
    for (;;) {
        int rc = kvq_txn_set(t, k->b, k->n, v, sizeof(v));
        if (rc == 0)
            rc = kvq_txn_commit(t);
        if (rc == 0)
            break;
        assert_ok(kvq_txn_on_error(t, rc));
    }
    assert_ok(kvq_txn_get_committed_version(&cv, t));
    kvq_txn_destroy(t);
    return cv;
}

/* ---- read versions advance with time --------------------------------------------------------- */

static void test_advances_without_commits(void **state)
{
    (void)state;
    const char *p = "rv_idle";
    char url[PATH_MAX];
    kvq_db *db = cf_open_url(cf_fresh_url(url, sizeof(url), p), NULL);
    cf_clear_prefix(db, p);
    /* On a fresh database, and again some time after a commit. */
    for (int round = 0; round < 2; round++) {
        int64_t r1 = read_version(db);
        cf_sleep_ms(200);
        int64_t r2 = read_version(db);
        if (r2 - r1 < 100000 || r2 - r1 > 100000000)
            fail_msg("round %d: read versions 200 ms apart: %" PRId64 " then %" PRId64
                     " (difference %" PRId64 ", expected 100,000 to 100,000,000)",
                     round, r1, r2, r2 - r1);
        cf_key k = cf_k(p, "k");
        int64_t cv = commit_write(db, &k, 1);
        cf_sleep_ms(50);
        int64_t r3 = read_version(db);
        if (r3 < cv)
            fail_msg("round %d: read version %" PRId64 " after a commit at %" PRId64, round, r3,
                     cv);
    }
    kvq_db_close(db);
}

/* A read version taken after a commit returned is >= its version, from this handle, another
 * handle, and after commits of many threads. */
struct committer {
    kvq_db *db, *other;
    int id;
    int failures;
    char why[160];
};

static void *committer_main(void *arg)
{
    struct committer *c = arg;
    char name[32];
    snprintf(name, sizeof(name), "k%d", c->id);
    cf_key k = cf_k("rv_after", name);
    for (int i = 0; i < 50 && c->failures == 0; i++) {
        uint8_t v[8];
        cf_put_le(v, (uint64_t)i, 8);
        kvq_txn *t = NULL;
        int rc = kvq_txn_create(&t, c->db);
        for (; rc == 0;) {
            rc = kvq_txn_set(t, k.b, k.n, v, sizeof(v));
            if (rc == 0)
                rc = kvq_txn_commit(t);
            if (rc == 0)
                break;
            rc = kvq_txn_on_error(t, rc);
        }
        int64_t cv = 0, rv = 0;
        if (rc == 0)
            rc = kvq_txn_get_committed_version(&cv, t);
        kvq_txn_destroy(t);
        kvq_txn *r = NULL;
        if (rc == 0)
            rc = kvq_txn_create(&r, (i & 1) ? c->other : c->db);
        if (rc == 0)
            rc = kvq_txn_get_read_version(&rv, r);
        kvq_txn_destroy(r);
        if (rc != 0) {
            c->failures++;
            snprintf(c->why, sizeof(c->why), "error %d %s", rc, kvq_errname(rc));
        } else if (rv < cv) {
            c->failures++;
            snprintf(c->why, sizeof(c->why), "read version %" PRId64 " < commit version %" PRId64,
                     rv, cv);
        }
    }
    return NULL;
}

static void test_after_commit_at_least_its_version(void **state)
{
    (void)state;
    kvq_db *db = cf_open(NULL);
    kvq_db *other = cf_open(NULL);
    cf_clear_prefix(db, "rv_after");
    struct committer c[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        c[i] = (struct committer){ .db = db, .other = other, .id = i };
        assert_int_equal(pthread_create(&th[i], NULL, committer_main, &c[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++)
        if (c[i].failures != 0)
            fail_msg("committer %d: %s", i, c[i].why);
    kvq_db_close(other);
    kvq_db_close(db);
}

/* ---- a commit after the read version conflicts, with read versions ahead of commits ------- */

/* The writer side of one round: commits a write of the shared key and returns its version. */
typedef struct writer writer;
typedef int64_t (*write_fn)(writer *w, uint64_t val);

/* Runs ROUNDS rounds: the reader takes its read version by reading the key, the writer then
 * commits a write of that key, and the reader's commit must fail with 1020. */
static void conflict_rounds(kvq_db *db, const char *p, write_fn wr, writer *w)
{
    cf_key k = cf_k(p, "k"), mine = cf_k(p, "mine");
    int64_t last_cv = commit_write(db, &k, 0);
    int ahead = 0;
    for (int i = 1; i <= ROUNDS; i++) {
        /* Let the clock pass the last commit: the database is idle now. */
        cf_sleep_ms(1);
        kvq_txn *r = new_txn(db);
        kvq_bytes v;
        int present = 0;
        assert_ok(kvq_txn_get(&v, &present, r, k.b, k.n, 0));
        assert_true(present && v.len == 8);
        if (cf_le64(v.data, 8) != (uint64_t)(i - 1))
            fail_msg("round %d: the reader sees %" PRIu64 ", expected the last commit's %d", i,
                     cf_le64(v.data, 8), i - 1);
        int64_t rv = 0;
        assert_ok(kvq_txn_get_read_version(&rv, r));
        if (rv < last_cv)
            fail_msg("round %d: read version %" PRId64 " below the last commit's %" PRId64, i, rv,
                     last_cv);
        if (rv > last_cv)
            ahead++;

        int64_t cv = wr(w, (uint64_t)i);
        if (cv <= rv)
            fail_msg("round %d: a commit made after read version %" PRId64 " got version %" PRId64,
                     i, rv, cv);
        last_cv = cv;

        assert_ok(kvq_txn_set(r, mine.b, mine.n, K("x")));
        int rc = kvq_txn_commit(r);
        if (rc != KVQ_ENOT_COMMITTED)
            fail_msg("round %d: the reader (read version %" PRId64 ") committed with %d %s after "
                     "a write at %" PRId64 " to the key it read; expected not_committed",
                     i, rv, rc, kvq_errname(rc), cv);
        kvq_txn_destroy(r);

        /* And a read version taken now is at least the writer's. */
        int64_t after = read_version(db);
        if (after < cv)
            fail_msg("round %d: read version %" PRId64 " after a commit at %" PRId64, i, after, cv);
    }
    /* The point of the test: read versions were ahead of the stored version, by the clock. */
    print_message("%d of %d read versions were ahead of the last commit\n", ahead, ROUNDS);
    if (ahead < ROUNDS / 2)
        fail_msg("only %d of %d read versions were ahead of the last commit on an idle database",
                 ahead, ROUNDS);
}

/* Writer in another thread of this process, with its own handle. */
struct writer {
    kvq_db *db;
    cf_key k;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go, quit;
    uint64_t val;
    int64_t version; /* -1: none yet */
    /* a child process */
    pid_t pid;
    int to_child, from_child;
};

static void *writer_thread(void *arg)
{
    writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->go && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit)
            break;
        uint64_t val = w->val;
        pthread_mutex_unlock(&w->mu);
        int64_t cv = commit_write(w->db, &w->k, val);
        pthread_mutex_lock(&w->mu);
        w->version = cv;
        w->go = 0;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int64_t thread_write(writer *w, uint64_t val)
{
    pthread_mutex_lock(&w->mu);
    w->val = val;
    w->version = -1;
    w->go = 1;
    pthread_cond_broadcast(&w->cv);
    while (w->go)
        pthread_cond_wait(&w->cv, &w->mu);
    int64_t v = w->version;
    pthread_mutex_unlock(&w->mu);
    return v;
}

static void test_conflict_writer_thread(void **state)
{
    (void)state;
    const char *p = "rv_conflict_thread";
    kvq_db *db = cf_open_clean(p);
    writer w = { .db = cf_open(NULL), .k = cf_k(p, "k") };
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, writer_thread, &w), 0);
    conflict_rounds(db, p, thread_write, &w);
    pthread_mutex_lock(&w.mu);
    w.quit = 1;
    pthread_cond_broadcast(&w.cv);
    pthread_mutex_unlock(&w.mu);
    pthread_join(th, NULL);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    kvq_db_close(w.db);
    kvq_db_close(db);
}

/* Writer in a child process: "writer URL PREFIX IN_FD OUT_FD". For each 8-byte value read from
 * IN_FD it commits key = value and answers with the commit's 8-byte version (0 on failure). */
static int role_writer(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    int in = atoi(argv[3]), out = atoi(argv[4]);
    kvq_db *db = NULL;
    int rc = kvq_db_open(&db, argv[1], NULL);
    if (rc != 0) {
        fprintf(stderr, "writer: open %s: %s (%s)\n", argv[1], kvq_errname(rc), kvq_last_error());
        return 3;
    }
    cf_key k = cf_k(argv[2], "k");
    uint8_t buf[8];
    int status = 0;
    while (cf_read_all(in, buf, 8) == 0) {
        kvq_txn *t = NULL;
        rc = kvq_txn_create(&t, db);
        for (; rc == 0;) {
            rc = kvq_txn_set(t, k.b, k.n, buf, 8);
            if (rc == 0)
                rc = kvq_txn_commit(t);
            if (rc == 0)
                break;
            rc = kvq_txn_on_error(t, rc);
        }
        int64_t cv = 0;
        if (rc == 0)
            rc = kvq_txn_get_committed_version(&cv, t);
        kvq_txn_destroy(t);
        if (rc != 0) {
            fprintf(stderr, "writer: commit: %s (%s)\n", kvq_errname(rc), kvq_last_error());
            cv = 0;
            status = 4;
        }
        uint8_t ans[8];
        cf_put_le(ans, (uint64_t)cv, 8);
        if (cf_write_all(out, ans, 8) != 0) {
            status = 5;
            break;
        }
    }
    kvq_db_close(db);
    return status;
}

static int64_t process_write(writer *w, uint64_t val)
{
    uint8_t buf[8];
    cf_put_le(buf, val, 8);
    if (cf_write_all(w->to_child, buf, 8) != 0 || cf_read_all(w->from_child, buf, 8) != 0)
        fail_msg("the writer process stopped answering");
    int64_t cv = (int64_t)cf_le64(buf, 8);
    if (cv <= 0)
        fail_msg("the writer process could not commit");
    return cv;
}

static void test_conflict_writer_process(void **state)
{
    (void)state;
    const char *p = "rv_conflict_proc";
    kvq_db *db = cf_open_clean(p);
    int down[2], up[2];
    /* Close-on-exec, so that the child keeps only its own ends, as descriptors 3 and 4 (dup2
     * clears the flag): it must see end of file once we close our writing end. */
    assert_int_equal(pipe2(down, O_CLOEXEC), 0);
    assert_int_equal(pipe2(up, O_CLOEXEC), 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, down[0], 3);
    posix_spawn_file_actions_adddup2(&fa, up[1], 4);
    char *argv[] = { cf_self,   (char *)"--cf-child", (char *)"writer", cf_url,
                     (char *)p, (char *)"3",          (char *)"4",      NULL };
    fflush(stdout);
    fflush(stderr);
    pid_t pid = 0;
    int err = posix_spawn(&pid, cf_self, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(down[0]);
    close(up[1]);
    if (err != 0)
        fail_msg("posix_spawn %s: %s", cf_self, strerror(err));
    writer w = { .pid = pid, .to_child = down[1], .from_child = up[0] };
    conflict_rounds(db, p, process_write, &w);
    close(down[1]); /* end of input: the child exits */
    close(up[0]);
    cf_wait_ok(pid, 120, "writer process");
    kvq_db_close(db);
}

static const struct cf_role roles[] = { { "writer", role_writer } };

int main(int argc, char **argv)
{
    cf_init(argc, argv, roles, sizeof(roles) / sizeof(roles[0]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_advances_without_commits),
        cmocka_unit_test(test_after_commit_at_least_its_version),
        cmocka_unit_test(test_conflict_writer_thread),
        cmocka_unit_test(test_conflict_writer_process),
    };
    return CF_RUN("read_version", tests);
}
