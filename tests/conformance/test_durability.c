/* Conformance: durability and damage.
 *
 * kill -9: a child process commits keys one by one (or ten per transaction, or from four threads
 * at once, so that group commits are cut too), reporting each acknowledged commit to the parent
 * over a pipe, and is killed with SIGKILL at a random point.
 * After reopening, every acknowledged commit is there, whole, and nothing beyond the one commit
 * that may have been in flight. (A kill leaves the page cache intact, so this says nothing
 * about fsync; the engine's own tests trace the sync.)
 *
 * Damage (embedded engine only; skipped on fdb): a database is created and closed, then its
 * SQLite file (the log store's table `<dir>/logstore/data.db`, or the SQLite storage's
 * `<dir>/data.db`) is deleted, truncated to 0 bytes or to half, while kvq's marker
 * `<dir>/kvq.marker` stays. Reopening must fail with KVQ_EDAMAGED (9004), never succeed empty.
 * Each such open runs in a forked child under alarm(), and must end with a clean exit, not a
 * signal. */
#include "conformance.h"

#include <pthread.h>

static kvq_txn *new_txn(kvq_db *db)
{
    kvq_txn *t = NULL;
    assert_ok(kvq_txn_create(&t, db));
    return t;
}

static size_t item_key(uint8_t *out, const char *p, unsigned i)
{
    return (size_t)sprintf((char *)out, "cf/%s/%08u", p, i);
}

/* The value of item i: its number and a pattern, 40 to 1,000 bytes. */
static size_t item_value(uint8_t *out, unsigned i)
{
    size_t n = 40 + (i * 7919u) % 961u;
    for (size_t j = 0; j < n; j++)
        out[j] = (uint8_t)(i * 31u + j);
    cf_put_le(out, i, 4);
    return n;
}

struct committer {
    kvq_db *db;
    char prefix[64];
    unsigned id, batch;
    int fd;
    int rc;
};

/* One committing thread: items 0, 1, 2 ... under its prefix, BATCH per transaction; after every
 * commit it writes {thread, items committed so far} (two uint32, one atomic pipe write). */
static void *committer_main(void *arg)
{
    struct committer *c = arg;
    kvq_txn *t = NULL;
    if ((c->rc = kvq_txn_create(&t, c->db)) != 0)
        return NULL;
    for (uint32_t next = 0; next < 1000000; next += c->batch) {
        for (;;) {
            kvq_txn_reset(t);
            int rc = 0;
            for (unsigned j = 0; j < c->batch && rc == 0; j++) {
                uint8_t k[128], v[1024];
                size_t kn = item_key(k, c->prefix, next + j), vn = item_value(v, next + j);
                rc = kvq_txn_set(t, k, kn, v, vn);
            }
            if (rc == 0)
                rc = kvq_txn_commit(t);
            if (rc == 0)
                break;
            if (kvq_txn_on_error(t, rc) != 0) {
                fprintf(stderr, "committer: %s\n", kvq_errname(rc));
                c->rc = rc;
                kvq_txn_destroy(t);
                return NULL;
            }
        }
        uint32_t msg[2] = { c->id, next + c->batch };
        if (cf_write_all(c->fd, msg, sizeof(msg)) != 0)
            break;
    }
    kvq_txn_destroy(t);
    return NULL;
}

/* Child role: URL PREFIX BATCH THREADS FD. THREADS threads commit until killed (see
 * committer_main), thread i under PREFIX/t<i>. */
static int role_committer(int argc, char **argv)
{
    if (argc != 6)
        return 2;
    const char *url = argv[1], *p = argv[2];
    unsigned batch = (unsigned)atoi(argv[3]), threads = (unsigned)atoi(argv[4]);
    int fd = atoi(argv[5]);
    if (threads < 1 || threads > 8)
        return 2;
    kvq_db *db = NULL;
    int rc = kvq_db_open(&db, url, NULL);
    if (rc != 0) {
        fprintf(stderr, "committer: open: %s (%s)\n", kvq_errname(rc), kvq_last_error());
        return 3;
    }
    struct committer c[8];
    pthread_t th[8];
    for (unsigned i = 0; i < threads; i++) {
        c[i] = (struct committer){ db, "", i, batch, fd, 0 };
        snprintf(c[i].prefix, sizeof(c[i].prefix), "%s/t%u", p, i);
        if (pthread_create(&th[i], NULL, committer_main, &c[i]) != 0)
            return 4;
    }
    for (unsigned i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    kvq_db_close(db);
    return 5; /* only a kill should end it */
}

/* Child role: URL. Opens the database; exits 0 if that fails with KVQ_EDAMAGED, 10 if it
 * succeeds (11 if it then looks empty), 12 on any other error. */
static int role_open_damaged(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    alarm(20);
    kvq_db *db = NULL;
    int rc = kvq_db_open(&db, argv[1], NULL);
    if (rc == KVQ_EDAMAGED) {
        printf("  open refused: %s (%s)\n", kvq_errname(rc), kvq_last_error());
        return 0;
    }
    if (rc != 0) {
        fprintf(stderr, "  open failed with %d %s (%s), expected database_damaged\n", rc,
                kvq_errname(rc), kvq_last_error());
        return 12;
    }
    /* It opened: does it look empty? */
    int status = 10;
    kvq_txn *t = NULL;
    if (kvq_txn_create(&t, db) == 0) {
        const kvq_kv *kvs;
        size_t n = 0;
        static const uint8_t b[] = "cf/", e[] = "cf0";
        rc = kvq_txn_get_range(&kvs, &n, NULL, t, b, 3, e, 3, 0, 0);
        fprintf(stderr, "  the database opened; a read returned %s with %zu rows\n",
                kvq_errname(rc), n);
        if (rc == 0 && n == 0)
            status = 11;
        kvq_txn_destroy(t);
    }
    kvq_db_close(db);
    return status;
}

static const struct cf_role roles[] = {
    { "committer", role_committer },
    { "open_damaged", role_open_damaged },
};

/* ---- kill -9 ------------------------------------------------------------------------------- */

static void kill_cycle(kvq_db *db, const char *p, unsigned batch, unsigned threads, cf_rng *r)
{
    cf_clear_prefix(db, p);
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    char a_batch[24], a_threads[24], a_fd[24];
    snprintf(a_batch, sizeof(a_batch), "%u", batch);
    snprintf(a_threads, sizeof(a_threads), "%u", threads);
    snprintf(a_fd, sizeof(a_fd), "%d", pfd[1]);
    const char *args[] = { cf_url, p, a_batch, a_threads, a_fd, NULL };
    pid_t pid = cf_spawn("committer", args);
    close(pfd[1]);
    /* Kill after a random number of acknowledgements; then read the ones still in the pipe,
     * written before the kill, up to end of file. */
    uint32_t kill_after = 1 + cf_below(r, 300), total = 0, acked[8] = { 0 }, msg[2];
    int killed = 0;
    while (cf_read_all(pfd[0], msg, sizeof(msg)) == 0) {
        if (msg[0] >= threads)
            fail_msg("garbled acknowledgement");
        if (msg[1] > acked[msg[0]])
            acked[msg[0]] = msg[1];
        if (!killed && ++total >= kill_after) {
            kill(pid, SIGKILL);
            killed = 1;
        }
    }
    close(pfd[0]);
    int st = cf_wait(pid, 30);
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL))
        fail_msg("the committer was not killed by SIGKILL (status 0x%x)", st);

    /* Reopen and check each thread's items: 0 .. acked-1 present and intact, at most the one
     * batch in flight beyond, no gap, every batch whole. */
    kvq_db *again = cf_open(NULL);
    kvq_txn *t = new_txn(again);
    size_t present_total = 0;
    for (unsigned th = 0; th < threads; th++) {
        char tp[64];
        snprintf(tp, sizeof(tp), "%s/t%u", p, th);
        cf_key b = cf_k(tp, ""), e = cf_after_prefix(&b);
        const kvq_kv *kvs;
        size_t n;
        assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, b.b, b.n, e.b, e.n, 0, 0));
        if (n < acked[th])
            fail_msg("thread %u: %u items acknowledged, only %zu after the crash", th, acked[th],
                     n);
        if (n != acked[th] && n != (size_t)acked[th] + batch)
            fail_msg("thread %u: %u items acknowledged in batches of %u, %zu after the crash", th,
                     acked[th], batch, n);
        for (size_t i = 0; i < n; i++) {
            uint8_t k[128], v[1024];
            size_t kn = item_key(k, tp, (unsigned)i), vn = item_value(v, (unsigned)i);
            if (kvs[i].key.len != kn || memcmp(kvs[i].key.data, k, kn) != 0)
                fail_msg("thread %u: item %zu is missing after the crash", th, i);
            if (kvs[i].value.len != vn || memcmp(kvs[i].value.data, v, vn) != 0)
                fail_msg("thread %u: item %zu has a wrong value after the crash", th, i);
        }
        present_total += n;
    }
    print_message("%u thread(s), batch %u: killed after %u acknowledged commits; %zu items "
                  "present\n",
                  threads, batch, total, present_total);
    kvq_txn_destroy(t);
    kvq_db_close(again);
}

static void test_kill9_keeps_acknowledged_commits(void **state)
{
    (void)state;
    uint64_t seed = cf_seed("test_kill9_keeps_acknowledged_commits");
    cf_rng r = { seed };
    kvq_db *db = cf_open(NULL);
    for (int cycle = 0; cycle < 18; cycle++) {
        static const unsigned batches[] = { 1, 10, 1 }, threads[] = { 1, 1, 4 };
        kill_cycle(db, "dur_kill", batches[cycle % 3], threads[cycle % 3], &r);
    }
    kvq_db_close(db);
}

/* ---- damaged files ------------------------------------------------------------------------- */

enum damage { DELETE_DATA, DELETE_ALL_SQLITE, TRUNCATE_ZERO, TRUNCATE_HALF };

static const char *damage_name(enum damage d)
{
    switch (d) {
    case DELETE_DATA:
        return "data.db deleted";
    case DELETE_ALL_SQLITE:
        return "data.db and its -wal and -shm deleted";
    case TRUNCATE_ZERO:
        return "data.db truncated to 0 bytes";
    case TRUNCATE_HALF:
        return "data.db truncated to half";
    }
    return "?";
}

static void damaged_case(enum damage d)
{
    char url[PATH_MAX], path[PATH_MAX + 32];
    char name[32];
    snprintf(name, sizeof(name), "damaged%d", (int)d);
    cf_fresh_url(url, sizeof(url), name);
    /* Create a database with some data, and close it. */
    kvq_db *db = cf_open_url(url, NULL);
    kvq_txn *t = new_txn(db);
    for (unsigned i = 0; i < 400; i++) {
        uint8_t k[128], v[1024];
        size_t kn = item_key(k, "damaged", i), vn = item_value(v, i);
        assert_ok(kvq_txn_set(t, k, kn, v, vn));
    }
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
    kvq_db_close(db);

    /* The layout contract: the SQLite file and kvq's marker; the file is the log store's table
     * (logstore/data.db) on the default storage, <dir>/data.db on the SQLite storage. */
    struct stat st;
    snprintf(path, sizeof(path), "%s/kvq.marker", url);
    if (stat(path, &st) != 0)
        fail_msg("%s: no kvq.marker (the layout contract changed?)", url);
    char table[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/logstore", url);
    snprintf(table, sizeof(table), "%s%s", url, stat(path, &st) == 0 ? "/logstore" : "");
    snprintf(path, sizeof(path), "%s/data.db", table);
    if (stat(path, &st) != 0)
        fail_msg("%s: no data.db (the layout contract changed?)", url);
    off_t size = st.st_size;
    switch (d) {
    case DELETE_DATA:
        assert_int_equal(unlink(path), 0);
        break;
    case DELETE_ALL_SQLITE:
        assert_int_equal(unlink(path), 0);
        snprintf(path, sizeof(path), "%s/data.db-wal", table);
        (void)unlink(path);
        snprintf(path, sizeof(path), "%s/data.db-shm", table);
        (void)unlink(path);
        break;
    case TRUNCATE_ZERO:
        assert_int_equal(truncate(path, 0), 0);
        break;
    case TRUNCATE_HALF:
        if (size < 8192)
            fail_msg("data.db is only %lld bytes", (long long)size);
        assert_int_equal(truncate(path, size / 2), 0);
        break;
    }
    /* Twice: a refused open must not have re-created the database either. */
    for (int attempt = 0; attempt < 2; attempt++) {
        const char *args[] = { url, NULL };
        pid_t pid = cf_spawn("open_damaged", args);
        int status = cf_wait(pid, 30);
        if (WIFSIGNALED(status))
            fail_msg("%s: the open died with signal %d", damage_name(d), WTERMSIG(status));
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            fail_msg("%s (attempt %d): expected the open to fail with KVQ_EDAMAGED; child "
                     "status %d (10: opened, 11: opened EMPTY, 12: another error)",
                     damage_name(d), attempt + 1, WEXITSTATUS(status));
    }
}

static void test_damaged_data_deleted(void **state)
{
    (void)state;
    cf_embedded_only("the damage tests edit the embedded engine's files");
    damaged_case(DELETE_DATA);
    damaged_case(DELETE_ALL_SQLITE);
}

static void test_damaged_truncated_to_zero(void **state)
{
    (void)state;
    cf_embedded_only("the damage tests edit the embedded engine's files");
    damaged_case(TRUNCATE_ZERO);
}

static void test_damaged_truncated_to_half(void **state)
{
    (void)state;
    cf_embedded_only("the damage tests edit the embedded engine's files");
    damaged_case(TRUNCATE_HALF);
}

/* An undamaged database reopens with its data, as a control for the cases above. */
static void test_reopen_keeps_data(void **state)
{
    (void)state;
    char url[PATH_MAX];
    cf_fresh_url(url, sizeof(url), "reopen");
    kvq_db *db = cf_open_url(url, NULL);
    cf_clear_prefix(db, "dur_reopen");
    cf_key k = cf_k("dur_reopen", "k");
    cf_write_key(db, k.b, k.n, "kept", 4);
    kvq_db_close(db);
    db = cf_open_url(url, NULL);
    char got[8];
    assert_int_equal(cf_read_key(db, k.b, k.n, got, sizeof(got)), 4);
    assert_memory_equal(got, "kept", 4);
    kvq_db_close(db);
    if (!cf_is_fdb()) {
        const char *args[] = { url, NULL };
        pid_t pid = cf_spawn("open_damaged", args);
        int status = cf_wait(pid, 30);
        /* The child reports "opened" (10) for a healthy database. */
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 10);
    }
}

/* Files are created with mode 0600 unless kvq_db_options.file_mode says otherwise. */
static void check_modes(const char *url, unsigned want)
{
    char path[PATH_MAX + 300];
    static const char *const files[] = { "data.db",  "data.db-wal", "data.db-shm", "kvq.marker",
                                         "kvq.lock", "kvq.shm",     "kvq.reserve", "kvq.cq" };
    int seen = 0;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", url, files[i]);
        struct stat st;
        if (stat(path, &st) != 0)
            continue;
        seen++;
        if ((st.st_mode & 0777) != want)
            fail_msg("%s has mode %03o, expected %03o", path, (unsigned)(st.st_mode & 0777), want);
    }
    assert_true(seen >= 2);
}

static void test_file_modes(void **state)
{
    (void)state;
    cf_embedded_only("file modes are the embedded engine's");
    mode_t old = umask(022);
    char url[PATH_MAX];
    cf_fresh_url(url, sizeof(url), "mode_default");
    kvq_db *db = cf_open_url(url, NULL);
    cf_key k = cf_k("dur_mode", "k");
    cf_write_key(db, k.b, k.n, "v", 1);
    check_modes(url, 0600);
    kvq_db_close(db);
    cf_fresh_url(url, sizeof(url), "mode_0640");
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.file_mode = 0640;
    db = cf_open_url(url, &o);
    cf_write_key(db, k.b, k.n, "v", 1);
    check_modes(url, 0640);
    kvq_db_close(db);
    umask(old);
}

int main(int argc, char **argv)
{
    cf_init(argc, argv, roles, sizeof(roles) / sizeof(roles[0]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reopen_keeps_data),
        cmocka_unit_test(test_kill9_keeps_acknowledged_commits),
        cmocka_unit_test(test_damaged_data_deleted),
        cmocka_unit_test(test_damaged_truncated_to_zero),
        cmocka_unit_test(test_damaged_truncated_to_half),
        cmocka_unit_test(test_file_modes),
    };
    return CF_RUN("durability", tests);
}
