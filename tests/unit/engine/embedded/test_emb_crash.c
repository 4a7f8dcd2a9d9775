/* Crash campaign for the engine (TESTING.md S4, engine part). Worker processes, two threads
 * each, run transactions while the parent kills them with SIGKILL at random moments and starts
 * them again. Each transaction
 *   - adds 1 to a counter, and writes a log record under a versionstamped key, in one commit
 *     ("acked" to a per-process file with write(2) once the commit returned), or
 *   - rotates three links of a ring of keys (FoundationDB's cycle workload: read, then write,
 *     relying on conflict detection).
 * Afterwards: every acknowledged record is present, the counter equals the number of records
 * (all-or-nothing commits), and the ring is still one cycle. Each log transaction is announced
 * ("i writer seq") before it starts and acknowledged ("o writer seq") after it returned, so the
 * check also counts records nobody attempted (unexpected) and unacknowledged attempts that did
 * commit (recovered). It prints one line, "crash: workload=engine ... lost=0 unexpected=0
 * duplicated=0 seed=...". Seeds are printed; KVQ_TEST_SEED replays, KVQ_TEST_SCALE (or
 * KVQ_SOAK=1, x20) multiplies the cycles. */
#include "kvq_test.h"
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq/testing.h"
#include "test_scale.h"

#define RING    16
#define PROCS   3
#define THREADS 2

static char base[128], dbdir[160];
static unsigned worker_test_flags; /* KVQ_TEST_* for the workers: the broken-engine check */

static void ring_key(char *out, int i)
{
    sprintf(out, "ring/%02d", i);
}

typedef struct wctx {
    kvq_db *db;
    int proc, thread;
    int ackfd;
    unsigned seed;
} wctx;

typedef struct log_op {
    uint32_t writer;
    uint32_t seq;
} log_op;

static int log_fn(kvq_txn *t, void *arg)
{
    log_op *op = arg;
    uint8_t one[8] = { 1 };
    int rc = kvq_txn_atomic_op(t, (const uint8_t *)"counter", 7, one, 8, KVQ_MUT_ADD);
    uint16_t uv;
    if (rc == 0)
        rc = kvq_txn_next_user_version(&uv, t);
    if (rc != 0)
        return rc;
    /* "log/" + 10-byte stamp + 2-byte user version, then the 4-byte offset (4). */
    uint8_t key[4 + 12 + 4];
    memcpy(key, "log/", 4);
    memset(key + 4, 0xff, 10);
    key[14] = (uint8_t)(uv >> 8);
    key[15] = (uint8_t)uv;
    key[16] = 4;
    key[17] = key[18] = key[19] = 0;
    uint8_t val[8];
    memcpy(val, &op->writer, 4);
    memcpy(val + 4, &op->seq, 4);
    return kvq_txn_set_versionstamped_key(t, key, sizeof(key), val, sizeof(val));
}

typedef struct ring_op {
    int start;
} ring_op;

static int get_link(kvq_txn *t, int i, int *out)
{
    char k[16];
    ring_key(k, i);
    kvq_bytes v;
    int present;
    int rc = kvq_txn_get(&v, &present, t, (const uint8_t *)k, strlen(k), 0);
    if (rc != 0)
        return rc;
    if (!present || v.len != 1)
        return KVQ_EUSER;
    *out = v.data[0];
    return 0;
}

static int set_link(kvq_txn *t, int i, int to)
{
    char k[16];
    ring_key(k, i);
    uint8_t v = (uint8_t)to;
    return kvq_txn_set(t, (const uint8_t *)k, strlen(k), &v, 1);
}

/* a -> b -> c -> d becomes a -> c -> b -> d. */
static int ring_fn(kvq_txn *t, void *arg)
{
    ring_op *op = arg;
    int a = op->start, b, c, d;
    int rc = get_link(t, a, &b);
    if (rc == 0)
        rc = get_link(t, b, &c);
    if (rc == 0)
        rc = get_link(t, c, &d);
    if (rc == 0)
        rc = set_link(t, a, c);
    if (rc == 0)
        rc = set_link(t, c, b);
    if (rc == 0)
        rc = set_link(t, b, d);
    return rc;
}

static void *worker_thread(void *arg)
{
    wctx *w = arg;
    uint32_t writer = (uint32_t)(w->proc * 1000 + w->thread) * 100000u + (w->seed % 100000u);
    for (uint32_t seq = 0;; seq++) {
        int rc;
        if (rand_r(&w->seed) % 2 == 0) {
            log_op op = { writer, seq };
            char line[64];
            int n = snprintf(line, sizeof(line), "i %u %u\n", writer, seq);
            if (write(w->ackfd, line, (size_t)n) != n)
                _exit(7);
            rc = kvq_db_transact(w->db, log_fn, &op);
            if (rc == 0) {
                line[0] = 'o';
                if (write(w->ackfd, line, (size_t)n) != n)
                    _exit(7);
            }
        } else {
            ring_op op = { (int)(rand_r(&w->seed) % RING) };
            rc = kvq_db_transact(w->db, ring_fn, &op);
        }
        /* Giving up after the retry limit (a hot ring on a loaded machine) is not a fault;
         * anything else is. */
        if (rc != 0 && !kvq_error_retryable(rc)) {
            fprintf(stderr, "worker: transaction failed: %s (%s)\n", kvq_last_error(),
                    kvq_errname(rc));
            _exit(8);
        }
    }
    return NULL;
}

static void worker(int proc, unsigned seed)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/acks.%d", base, proc);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd < 0)
        _exit(5);
    kvq_db *db;
    kvq_testing_options o = KVQ_TESTING_OPTIONS_INIT;
    o.flags = worker_test_flags;
    int rc = kvq_db_open_testing(&db, dbdir, NULL, &o);
    if (rc != 0) {
        fprintf(stderr, "worker %d: cannot open the database: %s (%s)\n", proc, kvq_last_error(),
                kvq_errname(rc));
        _exit(6);
    }
    wctx w[THREADS];
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (wctx){ db, proc, i, fd, seed * 7919u + (unsigned)i };
        pthread_create(&th[i], NULL, worker_thread, &w[i]);
    }
    for (;;)
        pause();
}

/* Starts worker `proc` with a seed of its own from rand_r(arg). */
static pid_t spawn(int proc, void *arg)
{
    unsigned seed = (unsigned)rand_r(arg);
    pid_t pid = fork();
    if (pid == 0)
        worker(proc, seed);
    return pid;
}

static int init_ring(kvq_txn *t, void *arg)
{
    (void)arg;
    for (int i = 0; i < RING; i++) {
        int rc = set_link(t, i, (i + 1) % RING);
        if (rc != 0)
            return rc;
    }
    return 0;
}

typedef struct outcome {
    size_t acked, lost, dup, records, unexpected;
    uint64_t counter;
    int ring_ok;
} outcome;

static outcome campaign(int cycles);

static void test_crash_campaign(void **state)
{
    (void)state;
    outcome o = campaign((int)kvq_test_scaled(30));
    assert_true(o.acked > 0);
    assert_int_equal(o.lost, 0);
    assert_int_equal(o.unexpected, 0);
    assert_int_equal(o.dup, 0);
    assert_int_equal(o.counter, o.records);
    assert_true(o.ring_ok);
}

/* The same checks against an engine whose conflict check is switched off must find the ring
 * broken: the checker can fail. */
static void test_checker_catches_broken_engine(void **state)
{
    (void)state;
    worker_test_flags = KVQ_TEST_SKIP_CONFLICT_CHECK;
    outcome o = campaign(10);
    worker_test_flags = 0;
    assert_false(o.ring_ok);
}

static outcome campaign(int cycles)
{
    unsigned seed = kt_campaign_seed(worker_test_flags ? "engine-broken" : "engine", cycles);
    assert_int_equal(kt_mkdtemp(base, sizeof(base), "crash"), 0);
    snprintf(dbdir, sizeof(dbdir), "%s/db", base);
    kvq_db *db;
    assert_int_equal(kvq_db_open(&db, dbdir, NULL), 0);
    assert_int_equal(kvq_db_transact(db, init_ring, NULL), 0);
    kvq_db_close(db);

    /* Every tenth cycle kills all; otherwise each process one time in PROCS. The workers'
     * seeds come from the campaign's. Every worker is stopped before any assertion. */
    pid_t pids[PROCS];
    unsigned wseed = seed;
    kt_kill_loop kl = { pids, PROCS, spawn, &wseed, 0, PROCS, 10, seed, 0, base, "acks." };
    int worker_failed = kt_kill_campaign(&kl, cycles, 0);
    size_t kills = kl.kills;
    if (worker_failed != 0)
        fail_msg("a worker process failed by itself (exit %d); seed %" PRIu64, worker_failed,
                 kt_seed());

    /* Check. */
    assert_int_equal(kvq_db_open(&db, dbdir, NULL), 0);
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    kvq_bytes v;
    int present;
    assert_int_equal(kvq_txn_get(&v, &present, t, (const uint8_t *)"counter", 7, 0), 0);
    uint64_t counter = 0;
    if (present)
        memcpy(&counter, v.data, 8);
    /* Read the log in pages; remember every (writer, seq). */
    size_t cap = 1 << 16, n_log = 0;
    uint64_t *logged = malloc(cap * sizeof(*logged));
    uint8_t begin[32] = "log/";
    size_t blen = 4;
    for (;;) {
        const kvq_kv *kvs;
        size_t n;
        bool more;
        assert_int_equal(kvq_txn_get_range(&kvs, &n, &more, t, begin, blen, (const uint8_t *)"log0",
                                           4, 1000, KVQ_SNAPSHOT),
                         0);
        for (size_t i = 0; i < n; i++) {
            if (n_log == cap) {
                cap *= 2;
                logged = realloc(logged, cap * sizeof(*logged));
            }
            uint32_t w, s;
            memcpy(&w, kvs[i].value.data, 4);
            memcpy(&s, kvs[i].value.data + 4, 4);
            logged[n_log++] = (uint64_t)w << 32 | s;
        }
        if (!more)
            break;
        memcpy(begin, kvs[n - 1].key.data, kvs[n - 1].key.len);
        begin[kvs[n - 1].key.len] = 0;
        blen = kvs[n - 1].key.len + 1;
    }
    int ring_ok = 1, at = 0;
    for (int i = 0; i < RING; i++) {
        int next;
        if (get_link(t, at, &next) != 0) {
            ring_ok = 0;
            break;
        }
        at = next;
        if (at == 0 && i < RING - 1)
            ring_ok = 0;
    }
    ring_ok = ring_ok && at == 0;
    kvq_txn_destroy(t);
    kvq_db_close(db);

    /* Records must be unique: sort, count neighbours, then look acknowledgements up. */
    qsort(logged, n_log, sizeof(*logged), kt_cmp_u64);
    size_t dup = 0;
    for (size_t i = 1; i < n_log; i++)
        dup += logged[i] == logged[i - 1];
    kt_ids inv = { 0 }, ack = { 0 };
    for (int p = 0; p < PROCS; p++) {
        char path[160];
        snprintf(path, sizeof(path), "%s/acks.%d", base, p);
        kt_history_read(path, &inv, &ack);
    }
    size_t invoked = inv.n, acked = ack.n, lost = 0;
    for (size_t i = 0; i < ack.n; i++)
        lost += bsearch(&ack.v[i], logged, n_log, sizeof(*logged), kt_cmp_u64) == NULL;
    /* A record nobody announced is unexpected; an announced but unacknowledged attempt whose
     * record exists was recovered (it committed, then its process died before the reply). */
    kt_ids_sort(&inv);
    kt_ids_sort(&ack);
    size_t unexpected = 0, recovered = 0;
    for (size_t i = 0; i < n_log; i++) {
        if (!kt_ids_has(&inv, logged[i]))
            unexpected++;
        else if (!kt_ids_has(&ack, logged[i]))
            recovered++;
    }
    kt_ids_free(&inv);
    kt_ids_free(&ack);
    free(logged);
    printf("crash: workload=engine cycles=%d kills=%zu invoked=%zu acked=%zu info=%zu "
           "recovered=%zu records=%zu counter=%llu lost=%zu unexpected=%zu duplicated=%zu "
           "ring=%s broken_engine=%s seed=%" PRIu64 "\n",
           cycles, kills, invoked, acked, invoked - acked, recovered, n_log,
           (unsigned long long)counter, lost, unexpected, dup, ring_ok ? "ok" : "BROKEN",
           worker_test_flags ? "skip_conflict_check" : "no", kt_seed());
    fflush(stdout);
    assert_int_equal(kt_rm_rf(base), 0);
    outcome o = { acked, lost, dup, n_log, unexpected, counter, ring_ok };
    return o;
}

int main(int argc, char **argv)
{
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crash_campaign),
        cmocka_unit_test(test_checker_catches_broken_engine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
