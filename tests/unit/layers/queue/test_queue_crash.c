/* Crash campaign over the queue layers, with Jepsen's total-queue check made stricter
 * (TESTING.md S4).
 *
 * Two producer processes push numbered items with the idempotent convenience push; two consumer
 * processes of two threads each pop items in the transactional-outbox form: one transaction pops
 * an item and adds 1 to the item's "done" counter. The parent SIGKILLs one or more random
 * processes every 50-250 ms (every tenth cycle: all of them) and starts them again.
 *
 * Producers write "i writer seq" to their own file with write(2) before a push and "o writer seq"
 * after it returned (the page cache survives kill -9). At the end the parent stops everyone,
 * drains the queue with the same outbox transaction and checks:
 *   lost        acknowledged pushes whose item was never popped (no done counter)   must be 0
 *   unexpected  popped items that no producer ever attempted                        must be 0
 *   duplicated  pops beyond the first of an item (done counter - 1)                 must be 0
 * and reports info (attempted, not acknowledged) and recovered (of those, the ones that did
 * commit). One line: "crash: workload=queue-<type> ... lost=0 unexpected=0 duplicated=0".
 *
 * The checker is shown to fail: consumers on a handle with KVQ_TEST_SKIP_CONFLICT_CHECK pop the
 * same item twice and the check must count duplicates.
 *
 * KVQ_TEST_SEED (or --seed) replays the random choices (not the interleaving); KVQ_TEST_SCALE
 * multiplies the cycles. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>

#include "test_queue_common.h"
#include "kvq/testing.h"
#include "test_scale.h"

#define PRODUCERS 2
#define CONSUMERS 2
#define CTHREADS  2
#define NPROCS    (PRODUCERS + CONSUMERS)
#define DONE_PFX  "done/"

static kvq_queue_type cur_type;
static unsigned cur_test_flags;

static kvq_db *open_db(unsigned test_flags)
{
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    kvq_testing_options t = KVQ_TESTING_OPTIONS_INIT;
    o.retry_limit = -1;
    o.max_retry_delay_ms = 50;
    t.flags = test_flags;
    kvq_db *db = NULL;
    if (kvq_db_open_testing(&db, tq_dir, &o, &t) != 0)
        return NULL;
    return db;
}

static void done_key(uint8_t out[13], uint32_t w, uint32_t s)
{
    memcpy(out, DONE_PFX, 5);
    for (int i = 0; i < 4; i++) {
        out[5 + i] = (uint8_t)(w >> (24 - 8 * i));
        out[9 + i] = (uint8_t)(s >> (24 - 8 * i));
    }
}

typedef struct pop_ctx {
    kvq_queue *q;
    int empty;
    int bad_value;
} pop_ctx;

/* The outbox transaction: pop one item and count it as done. */
static int pop_one(kvq_txn *txn, void *arg)
{
    pop_ctx *c = arg;
    c->empty = 0;
    kvq_bytes v;
    int64_t prio;
    int rc = kvq_queue_get_type(c->q) == KVQ_QUEUE_PRIORITY
                 ? kvq_queue_pop_prio_txn(&v, &prio, c->q, txn, KVQ_QUEUE_MIN)
                 : kvq_queue_pop_txn(&v, c->q, txn);
    if (rc == KVQ_ENOTFOUND) {
        c->empty = 1;
        return 0;
    }
    if (rc != 0)
        return rc;
    uint32_t w, s;
    if (tq_parse(v.data, v.len, &w, &s) != 0) {
        c->bad_value = 1;
        return KVQ_EUSER;
    }
    uint8_t key[13];
    done_key(key, w, s);
    static const uint8_t one[8] = { 1 };
    return kvq_txn_atomic_op(txn, key, sizeof(key), one, sizeof(one), KVQ_MUT_ADD);
}

static void *consumer_thread(void *arg)
{
    kvq_db *db = arg;
    kvq_queue *q;
    if (kvq_queue_open(&q, db, cur_type, NULL, NULL) != 0)
        _exit(11);
    pop_ctx c = { q, 0, 0 };
    for (;;) {
        int rc = kvq_db_transact(db, pop_one, &c);
        if (rc != 0 && !kvq_error_retryable(rc)) {
            fprintf(stderr, "consumer: %s (%s)%s\n", kvq_errname(rc), kvq_last_error(),
                    c.bad_value ? ": an item that is not ours" : "");
            _exit(12);
        }
        if (rc == 0 && c.empty)
            usleep(1000);
    }
    return NULL;
}

static void consumer(void)
{
    kvq_db *db = open_db(cur_test_flags);
    if (db == NULL)
        _exit(10);
    pthread_t th[CTHREADS];
    for (int i = 0; i < CTHREADS; i++)
        pthread_create(&th[i], NULL, consumer_thread, db);
    for (;;)
        pause();
}

static void producer(uint32_t writer)
{
    char path[320];
    snprintf(path, sizeof(path), "%s/hist.%u", tq_dir, writer);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    kvq_db *db = open_db(0);
    kvq_queue *q;
    if (fd < 0 || db == NULL || kvq_queue_open(&q, db, cur_type, NULL, NULL) != 0)
        _exit(20);
    for (uint32_t s = 0;; s++) {
        char line[64];
        int n = snprintf(line, sizeof(line), "i %u %u\n", writer, s);
        if (write(fd, line, (size_t)n) != n)
            _exit(21);
        uint8_t v[16];
        size_t vn = tq_value(v, writer, s);
        int rc = cur_type == KVQ_QUEUE_PRIORITY ? kvq_queue_push_prio(q, v, vn, (int64_t)(s % 3))
                                                : kvq_queue_push(q, v, vn);
        if (rc != 0) {
            /* The retry loop has no limit here: any error is a failure. */
            fprintf(stderr, "producer: %s (%s)\n", kvq_errname(rc), kvq_last_error());
            _exit(22);
        }
        line[0] = 'o';
        if (write(fd, line, (size_t)n) != n)
            _exit(21);
    }
}

/* Process slot i: producers first. Each incarnation of a producer gets a new writer id. */
static pid_t spawn(int slot, void *arg)
{
    uint32_t *incarnation = arg;
    uint32_t writer = ((*incarnation)++ << 4) | (uint32_t)slot;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (slot < PRODUCERS)
            producer(writer);
        consumer();
    }
    return pid;
}

typedef struct result {
    size_t invoked, acked, popped, drained, lost, unexpected, duplicated, recovered, kills;
} result;

typedef struct done_scan {
    uint64_t *ids;
    uint64_t *counts;
    size_t n, cap;
    uint8_t begin[16];
    size_t blen;
    bool more;
} done_scan;

static int scan_page(kvq_txn *txn, void *arg)
{
    done_scan *d = arg;
    const kvq_kv *kvs;
    size_t n;
    int rc = kvq_txn_get_range(&kvs, &n, &d->more, txn, d->begin, d->blen, (const uint8_t *)"done0",
                               5, 1000, KVQ_SNAPSHOT);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        if (kvs[i].key.len != 13 || kvs[i].value.len != 8)
            return KVQ_EUSER;
        if (d->n == d->cap) {
            d->cap = d->cap ? d->cap * 2 : 4096;
            d->ids = realloc(d->ids, d->cap * sizeof(*d->ids));
            d->counts = realloc(d->counts, d->cap * sizeof(*d->counts));
        }
        uint64_t id = 0;
        for (int j = 5; j < 13; j++)
            id = id << 8 | kvs[i].key.data[j];
        d->ids[d->n] = id;
        d->counts[d->n++] = kvq__le_get(kvs[i].value.data, 8);
    }
    if (n > 0) {
        memcpy(d->begin, kvs[n - 1].key.data, 13);
        d->begin[13] = 0;
        d->blen = 14;
    }
    return 0;
}

static result campaign(kvq_queue_type type, const char *name, int cycles, unsigned test_flags)
{
    cur_type = type;
    cur_test_flags = test_flags;
    result r;
    memset(&r, 0, sizeof(r));
    uint32_t incarnation = 1;
    pid_t pids[NPROCS];
    r.kills = tq_crash_cycles(name, cycles, pids, NPROCS, spawn, &incarnation, 0, "hist.");

    /* Drain with the same outbox transaction, on a correct handle. */
    kvq_db *db = open_db(0);
    assert_non_null(db);
    kvq_queue *q;
    assert_int_equal(kvq_queue_open(&q, db, type, NULL, NULL), 0);
    pop_ctx pc = { q, 0, 0 };
    for (;;) {
        assert_int_equal(kvq_db_transact(db, pop_one, &pc), 0);
        if (pc.empty)
            break;
        r.drained++;
    }
    uint64_t len = 1;
    assert_int_equal(kvq_queue_len(&len, q), 0);
    assert_int_equal(len, 0);
    kvq_queue_close(q);
    done_scan d;
    memset(&d, 0, sizeof(d));
    memcpy(d.begin, DONE_PFX, 5);
    d.blen = 5;
    do
        assert_int_equal(kvq_db_transact(db, scan_page, &d), 0);
    while (d.more);
    kvq_db_close(db);

    /* The histories. */
    kt_ids inv = { 0 }, ack = { 0 };
    for (uint32_t inc = 1; inc < incarnation; inc++)
        for (uint32_t slot = 0; slot < PRODUCERS; slot++) {
            char path[320];
            snprintf(path, sizeof(path), "%s/hist.%u", tq_dir, inc << 4 | slot);
            kt_history_read(path, &inv, &ack);
        }
    kt_ids_sort(&inv);
    kt_ids_sort(&ack);
    /* d.ids is in key order, which is (writer, seq) order: already sorted. */
    for (size_t i = 0; i < d.n; i++) {
        r.popped += (size_t)d.counts[i];
        if (d.counts[i] > 1)
            r.duplicated += (size_t)(d.counts[i] - 1);
        if (!kt_ids_has(&inv, d.ids[i]))
            r.unexpected++;
        else if (!kt_ids_has(&ack, d.ids[i]))
            r.recovered++;
    }
    for (size_t i = 0; i < ack.n; i++)
        r.lost += bsearch(&ack.v[i], d.ids, d.n, sizeof(*d.ids), kt_cmp_u64) == NULL;
    r.invoked = inv.n;
    r.acked = ack.n;
    printf("crash: workload=%s cycles=%d kills=%zu invoked=%zu acked=%zu info=%zu recovered=%zu "
           "popped=%zu drained=%zu lost=%zu unexpected=%zu duplicated=%zu broken_engine=%s "
           "seed=%" PRIu64 "\n",
           name, cycles, r.kills, r.invoked, r.acked, r.invoked - r.acked, r.recovered, r.popped,
           r.drained, r.lost, r.unexpected, r.duplicated, test_flags ? "skip_conflict_check" : "no",
           kt_seed());
    fflush(stdout);
    kt_ids_free(&inv);
    kt_ids_free(&ack);
    free(d.ids);
    free(d.counts);
    tq_rmdir();
    return r;
}

static void check_clean(result r)
{
    assert_true(r.acked > 0);
    assert_true(r.popped > 0);
    assert_int_equal(r.lost, 0);
    assert_int_equal(r.unexpected, 0);
    assert_int_equal(r.duplicated, 0);
}

static void test_durable(void **state)
{
    (void)state;
    check_clean(campaign(KVQ_QUEUE_DURABLE, "queue-durable", (int)kvq_test_scaled(20), 0));
}

static void test_fifo(void **state)
{
    (void)state;
    check_clean(campaign(KVQ_QUEUE_FIFO, "queue-fifo", (int)kvq_test_scaled(10), 0));
}

static void test_priority(void **state)
{
    (void)state;
    check_clean(campaign(KVQ_QUEUE_PRIORITY, "queue-priority", (int)kvq_test_scaled(10), 0));
}

/* The total-queue check can fail: without the conflict check, two consumers pop one item. */
static void test_checker_catches_broken_engine(void **state)
{
    (void)state;
    result r =
        campaign(KVQ_QUEUE_DURABLE, "queue-durable-broken", 10, KVQ_TEST_SKIP_CONFLICT_CHECK);
    printf("# the total-queue check %s the broken engine (%zu duplicated)\n",
           r.duplicated ? "caught" : "MISSED", r.duplicated);
    assert_true(r.duplicated > 0);
}

int main(int argc, char **argv)
{
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durable),
        cmocka_unit_test(test_fifo),
        cmocka_unit_test(test_priority),
        cmocka_unit_test(test_checker_catches_broken_engine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
