/* The embedded engine's commit pipeline (src/engine/embedded/sync.c, txn.c, watch.c): with the
 * disk's sync held back, a commit is written but not durable. Then
 *   - a new transaction reads at once and sees only durable data (with the pipeline on a
 *     storage that keeps versions, the log store; on SQLite, which keeps none, or without the
 *     pipeline, the read may wait for the sync of what its snapshot holds, but never returns
 *     what is not durable);
 *   - a watch does not fire until the write it announces is synced, then fires, and the woken
 *     reader sees the write (with the pipeline or without it, on both storages).
 * Each run tests the mode its environment gives ($KVQ_STORAGE, $KVQ_PIPELINE): the default of
 * each storage (unit. on the log store, sqlite. on SQLite) and the other mode (the pipeline label, tests/CMakeLists.txt).
 * The sync is held back by wrapping fdatasync at link time (-Wl,--wrap=fdatasync, in
 * tests/CMakeLists.txt): every sync of the storages, which kvq calls itself, passes through the
 * gate below. The waits below only bound a hang; no result depends on how long anything takes. */
#include "kvq_test.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/embedded/emb.h"
#include "engine/engine.h"
#include "kvq/kvq.h"

/* How long a step may take before the test calls it a hang (a loaded machine is slow, a hang
 * is forever). */
#define HANG_MS 30000

int __real_fdatasync(int fd);
int __wrap_fdatasync(int fd);

static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_closed;

int __wrap_fdatasync(int fd)
{
    pthread_mutex_lock(&gate_mu);
    while (gate_closed)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    return __real_fdatasync(fd);
}

static void gate(int closed)
{
    pthread_mutex_lock(&gate_mu);
    gate_closed = closed;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

static kt_tmp tmp;
static const char *const dir = tmp.db;

static int is_log_store(kvq_db *db)
{
    emb_db *e = db->engine;
    return strcmp(e->so->name, "log") == 0;
}

/* Do reads of this handle never wait for a sync (the pipeline on a storage that keeps
 * versions)? */
static int reads_at_durable(kvq_db *db)
{
    emb_db *e = db->engine;
    return emb_pipelined(e) && (e->so->caps & EMB_STORE_MVCC) != 0;
}

static int64_t written_of(kvq_db *db)
{
    emb_db *e = db->engine;
    return __atomic_load_n(&e->shm->written_version, __ATOMIC_SEQ_CST);
}

static uint64_t scans_of(kvq_db *db)
{
    emb_db *e = db->engine;
    pthread_mutex_lock(&e->watch_mu);
    uint64_t r = e->watch_scans;
    pthread_mutex_unlock(&e->watch_mu);
    return r;
}

static void set_key(kvq_db *db, const char *k, const char *v)
{
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_set(t, K(k), K(v)), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
}

/* A commit on its own thread: it returns once the gate lets its sync through. */
typedef struct pusher {
    kvq_db *db;
    const char *key, *value;
    int rc;
    pthread_t th;
} pusher;

static void *push_main(void *arg)
{
    pusher *p = arg;
    kvq_txn *t = NULL;
    p->rc = kvq_txn_create(&t, p->db);
    if (p->rc == 0 && (p->rc = kvq_txn_set(t, K(p->key), K(p->value))) == 0)
        p->rc = kvq_txn_commit(t);
    if (t != NULL)
        kvq_txn_destroy(t);
    return NULL;
}

/* Starts a push with the gate closed and returns once it is written (not synced). */
static void push_unsynced(pusher *p, kvq_db *db, const char *k, const char *v)
{
    int64_t w0 = written_of(db);
    *p = (pusher){ .db = db, .key = k, .value = v, .rc = -1 };
    gate(1);
    assert_int_equal(pthread_create(&p->th, NULL, push_main, p), 0);
    for (int i = 0; written_of(db) <= w0; i++) {
        assert_true(i < HANG_MS);
        kt_sleep_ms(1);
    }
}

/* A read on its own thread. */
typedef struct reader {
    kvq_db *db;
    int done, present, base_ok, rc, gate_was_closed;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} reader;

static void *read_main(void *arg)
{
    reader *r = arg;
    kvq_txn *t = NULL;
    kvq_bytes v;
    int present = 0, base = 0, rc = kvq_txn_create(&t, r->db);
    if (rc == 0)
        rc = kvq_txn_get(&v, &present, t, K("k"), 0);
    kvq_bytes b;
    if (rc == 0)
        rc = kvq_txn_get(&b, &base, t, K("k0"), 0);
    base = rc == 0 && base && b.len == 1 && b.data[0] == 'a';
    if (t != NULL)
        kvq_txn_destroy(t);
    pthread_mutex_lock(&gate_mu);
    int closed = gate_closed;
    pthread_mutex_unlock(&gate_mu);
    pthread_mutex_lock(&r->mu);
    r->rc = rc;
    r->present = present;
    r->base_ok = base;
    r->gate_was_closed = closed;
    r->done = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Waits for the reader up to ms; whether it is done. */
static int reader_wait(reader *r, long ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += ms / 1000;
    dl.tv_nsec += (ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&r->mu);
    while (!r->done && pthread_cond_timedwait(&r->cv, &r->mu, &dl) == 0) {
    }
    int done = r->done;
    pthread_mutex_unlock(&r->mu);
    return done;
}

static void test_read_does_not_wait_for_sync(void **state)
{
    (void)state;
    assert_int_equal(kt_tmp_make(&tmp, "pipeline-read"), 0);
    kvq_db *db;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    set_key(db, "k0", "a");
    static pusher p;
    push_unsynced(&p, db, "k", "pushed");

    static reader r;
    r = (reader){ .db = db, .rc = -1 };
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, read_main, &r), 0);
    int log = is_log_store(db), at_durable = reads_at_durable(db);
    /* With the pipeline, the log store keeps versions: the read must end while the sync is
     * still held back. Otherwise it may wait for the sync; give it a moment, then let the sync
     * through. */
    int done = reader_wait(&r, at_durable ? HANG_MS : 200);
    gate(0);
    assert_true(reader_wait(&r, HANG_MS));
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(pthread_join(p.th, NULL), 0);
    printf("# %s storage, pipeline %s: the read %s while the sync was held back\n",
           log ? "log" : "SQLite", emb_pipelined(db->engine) ? "on" : "off",
           done ? "ended" : "waited");
    if (at_durable)
        assert_true(done);
    assert_int_equal(r.rc, 0);
    assert_int_equal(p.rc, 0);
    assert_true(r.base_ok);
    /* What the read returned while the push was not durable does not hold it. */
    if (r.gate_was_closed)
        assert_false(r.present);

    /* Once the push has returned, a new transaction sees it. */
    kvq_txn *t;
    kvq_bytes v;
    int present = 0;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_get(&v, &present, t, K("k"), 0), 0);
    assert_true(present);
    kvq_txn_destroy(t);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
    kvq_db_close(db);
    assert_int_equal(kt_tmp_remove(&tmp), 0);
}

static void test_watch_fires_after_sync(void **state)
{
    (void)state;
    assert_int_equal(kt_tmp_make(&tmp, "pipeline-watch"), 0);
    kvq_db *db;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    set_key(db, "other", "x");

    uint64_t s = scans_of(db);
    kvq_txn *t;
    kvq_watch *w;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_watch(&w, t, K("w")), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
    /* The watcher's first look at the armed watch (the scan is counted under watch_mu). */
    for (int i = 0; scans_of(db) <= s; i++) {
        assert_true(i < HANG_MS);
        kt_sleep_ms(1);
    }
    uint64_t s0 = scans_of(db);
    static pusher p;
    push_unsynced(&p, db, "w", "1");
    /* The push's wake-up makes the watcher scan a snapshot that holds it: wait for that scan
     * (counted when its snapshot is open; a scan that fires does so before it lets go of
     * watch_mu, so once it is counted here a watch it fired has fired). */
    for (int i = 0; scans_of(db) <= s0; i++) {
        assert_true(i < HANG_MS);
        kt_sleep_ms(1);
    }
    int early = kvq_watch_wait(w, 0);
    gate(0);
    assert_int_equal(pthread_join(p.th, NULL), 0);
    assert_int_equal(p.rc, 0);
    assert_int_equal(early, KVQ_ETIMED_OUT);
    /* Synced: it fires, and the woken reader sees the write at once. */
    assert_int_equal(kvq_watch_wait(w, HANG_MS), 0);
    kvq_watch_destroy(w);
    kvq_bytes v;
    int present = 0;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_get(&v, &present, t, K("w"), 0), 0);
    assert_true(present);
    assert_int_equal(v.len, 1);
    kvq_txn_destroy(t);
    kvq_db_close(db);
    assert_int_equal(kt_tmp_remove(&tmp), 0);
}

/* A relaxed handle's commit returns before any sync. A durable handle's read that begins after
 * it returned must see it, although nothing has synced it (with the pipeline, reads are at the
 * newest synced version; this one must take the newest and have it synced). The gate stays
 * open: the relaxed commit makes no sync of its own, and the read's sync passes. */
static void test_relaxed_commit_seen(void **state)
{
    (void)state;
    assert_int_equal(kt_tmp_make(&tmp, "pipeline-relaxed"), 0);
    kvq_db *db, *fast;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    set_key(db, "k0", "a");
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.flags |= KVQ_DB_RELAXED;
    assert_int_equal(kvq_db_open(&fast, dir, &o), 0);
    for (int i = 0; i < 20; i++) {
        char v[16];
        snprintf(v, sizeof v, "r%d", i);
        set_key(fast, "k", v);
        kvq_txn *t;
        kvq_bytes got;
        int present = 0;
        assert_int_equal(kvq_txn_create(&t, db), 0);
        assert_int_equal(kvq_txn_get(&got, &present, t, K("k"), 0), 0);
        assert_true(present);
        assert_int_equal(got.len, strlen(v));
        assert_memory_equal(got.data, v, got.len);
        kvq_txn_destroy(t);
    }
    kvq_db_close(fast);
    kvq_db_close(db);
    assert_int_equal(kt_tmp_remove(&tmp), 0);
}

/* A failed assertion leaves the gate closed: open it for the threads still in a sync. */
static int open_gate(void **state)
{
    (void)state;
    gate(0);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_read_does_not_wait_for_sync, open_gate),
        cmocka_unit_test_teardown(test_watch_fires_after_sync, open_gate),
        cmocka_unit_test_teardown(test_relaxed_commit_seen, open_gate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
