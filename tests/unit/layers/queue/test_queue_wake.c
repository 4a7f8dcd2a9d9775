/* Waiting consumers of the recipes' queues (FIFO and priority): kvq's pushes count themselves in
 * the queue's push counter (prefix + 0xFF + ("npush",), outside the recipe's item range), and
 * kvq_queue_consume_k on a queue it finds empty returns a watch on that counter set in the same
 * transaction. The tests: a consumer blocked on that watch wakes when another process pushes (it
 * makes no call at all while it waits: the watch fires, it does not time out); a push made in a
 * caller's transaction wakes it too; a push to another queue does not; an item written as
 * FoundationDB's recipe writes it (no counter) is still popped by the next consume; the counter's
 * bytes; consume_k batches on both types. ctest runs this program again on the fdb engine
 * (fdb.test_queue_wake, through libkvq_fdb_c.so), where the producer is a thread with a handle
 * of its own instead of a process: a child forked after the fdb client's network started cannot
 * start it again. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <sys/wait.h>

#include "test_queue_common.h"

static uint64_t run_id; /* queues of this run get their own subspaces (a shared fdb database) */
static int sub_seq;

static kvq_db_options db_opts(void)
{
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.retry_limit = -1;
    o.timeout_ms = 0;
    o.max_retry_delay_ms = 50;
    return o;
}

static kvq_db *open_db(void)
{
    kvq_db_options o = db_opts();
    return kt_db_open_url(kt_db_url(), &o, NULL);
}

/* A fresh subspace ("wake", run, n) for each queue of the run. */
static kvq_subspace *fresh_sub(void)
{
    kvq_tuple_elem e[3] = { kvq_tuple_str("wake"), kvq_tuple_int((int64_t)(run_id >> 1)),
                            kvq_tuple_int(++sub_seq) };
    kvq_subspace *s = NULL;
    if (kvq_subspace_new(&s, NULL, 0, e, 3) != 0)
        abort();
    return s;
}

static kvq_queue *open_q(kvq_db *db, kvq_queue_type t, unsigned int flags, kvq_subspace *s)
{
    kvq_queue_options o = KVQ_QUEUE_OPTIONS_INIT;
    o.flags = flags;
    kvq_queue *q = NULL;
    assert_ok(kvq_queue_open(&q, db, t, s, &o));
    return q;
}

static int push_one(kvq_queue *q, const char *v)
{
    if (kvq_queue_get_type(q) == KVQ_QUEUE_PRIORITY)
        return kvq_queue_push_prio(q, (const uint8_t *)v, strlen(v), 7);
    return kvq_queue_push(q, (const uint8_t *)v, strlen(v));
}

/* consume_k of one item on an empty queue: nothing, and a watch. */
static kvq_watch *consume_empty(kvq_queue *q)
{
    kvq_buf b = KVQ_BUF_INIT;
    size_t n = 99;
    kvq_watch *w = NULL;
    assert_ok(kvq_queue_consume_k(&b, &n, &w, q, 1));
    assert_int_equal(n, 0);
    assert_non_null(w);
    kvq_buf_dispose(&b);
    return w;
}

static void consume_expect(kvq_queue *q, const char *want)
{
    kvq_buf b = KVQ_BUF_INIT;
    size_t n = 0;
    kvq_watch *w = NULL;
    assert_ok(kvq_queue_consume_k(&b, &n, &w, q, 1));
    assert_int_equal(n, 1);
    assert_null(w); /* k items came back: no watch */
    assert_bytes(b.data, b.len, (const uint8_t *)want, strlen(want));
    kvq_buf_dispose(&b);
}

/* ---- a consumer in one process, a producer in another ----------------------------------------- */

typedef struct producer {
    int go;              /* read end of the pipe that says "push now" */
    kvq_queue_type type;
    kvq_subspace *sub;
    int rc;              /* 0, or what failed */
} producer;

/* Waits for the go, opens a handle of its own and pushes one item. */
static int produce(producer *p)
{
    char c;
    if (read(p->go, &c, 1) != 1)
        return 2;
    kvq_db_options o = db_opts();
    kvq_db *cdb = NULL;
    kvq_queue_options qo = KVQ_QUEUE_OPTIONS_INIT;
    kvq_queue *cq = NULL;
    if (kvq_db_open(&cdb, kt_db_url(), &o) != 0 ||
        kvq_queue_open(&cq, cdb, p->type, p->sub, &qo) != 0) {
        kvq_db_close(cdb);
        return 3;
    }
    int rc = push_one(cq, "from-the-producer");
    kvq_queue_close(cq);
    kvq_db_close(cdb);
    return rc == 0 ? 0 : 4;
}

static void *produce_thread(void *arg)
{
    producer *p = arg;
    p->rc = produce(p);
    return NULL;
}

static void wake_across_processes(kvq_queue_type t, unsigned int flags)
{
    kvq_subspace *s = fresh_sub();
    int go[2];
    assert_int_equal(pipe(go), 0);
    producer prod = { go[0], t, s, -1 };
    int as_thread = kt_db_is_fdb();
    pid_t pid = -1;
    pthread_t th;
    if (as_thread) {
        assert_int_equal(pthread_create(&th, NULL, produce_thread, &prod), 0);
    } else {
        fflush(stdout);
        fflush(stderr);
        /* The child is forked before this process opens anything, and opens its own handle. */
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(go[1]);
            _exit(produce(&prod));
        }
        close(go[0]);
    }
    kvq_db *db = open_db();
    kvq_queue *q = open_q(db, t, flags, s);
    kvq_watch *w = consume_empty(q);
    /* Only now may the child push: the consumer is already asleep on its watch (or about to be;
     * the watch holds the counter's value at the transaction that found the queue empty). */
    assert_int_equal(write(go[1], "x", 1), 1);
    close(go[1]);
    int64_t t0 = kvq__mono_us();
    int rc = kvq_watch_wait(w, 60000);
    int64_t waited_ms = (kvq__mono_us() - t0) / 1000;
    assert_ok(rc); /* fired by the push, not timed out */
    kvq_watch_destroy(w);
    if (as_thread) {
        assert_int_equal(pthread_join(th, NULL), 0);
        close(go[0]);
        assert_int_equal(prod.rc, 0);
    } else {
        int status = 0;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    consume_expect(q, "from-the-producer");
    printf("# %s%s: woke %lld ms after the go (producer: %s)\n", kvq_queue_type_name(t),
           flags ? " (high contention)" : "", (long long)waited_ms,
           as_thread ? "a thread with its own handle" : "another process");
    kvq_queue_close(q);
    kvq_db_close(db);
    kvq_subspace_destroy(s);
}

static void test_wake_across_processes_fifo(void **state)
{
    (void)state;
    wake_across_processes(KVQ_QUEUE_FIFO, 0);
}

static void test_wake_across_processes_fifo_hc(void **state)
{
    (void)state;
    wake_across_processes(KVQ_QUEUE_FIFO, KVQ_QUEUE_HIGH_CONTENTION);
}

static void test_wake_across_processes_priority_hc(void **state)
{
    (void)state;
    wake_across_processes(KVQ_QUEUE_PRIORITY, KVQ_QUEUE_HIGH_CONTENTION);
}

/* ---- in one process ------------------------------------------------------------------------- */

typedef struct push_txn_arg {
    kvq_queue *q;
    const char *v;
} push_txn_arg;

static int push_txn_body(kvq_txn *txn, void *arg)
{
    push_txn_arg *a = arg;
    if (kvq_queue_get_type(a->q) == KVQ_QUEUE_PRIORITY)
        return kvq_queue_push_prio_txn(a->q, txn, (const uint8_t *)a->v, strlen(a->v), -2);
    return kvq_queue_push_txn(a->q, txn, (const uint8_t *)a->v, strlen(a->v));
}

static void test_push_txn_wakes(void **state)
{
    (void)state;
    kvq_db *db = open_db();
    kvq_queue_type types[2] = { KVQ_QUEUE_FIFO, KVQ_QUEUE_PRIORITY };
    for (int i = 0; i < 2; i++) {
        kvq_subspace *s = fresh_sub();
        kvq_queue *q = open_q(db, types[i], KVQ_QUEUE_HIGH_CONTENTION, s);
        kvq_watch *w = consume_empty(q);
        push_txn_arg a = { q, "in-a-transaction" };
        assert_ok(kvq_db_transact(db, push_txn_body, &a));
        assert_ok(kvq_watch_wait(w, 60000));
        kvq_watch_destroy(w);
        consume_expect(q, "in-a-transaction");
        kvq_queue_close(q);
        kvq_subspace_destroy(s);
    }
    kvq_db_close(db);
}

static void test_other_queue_does_not_wake(void **state)
{
    (void)state;
    kvq_db *db = open_db();
    kvq_subspace *s1 = fresh_sub(), *s2 = fresh_sub();
    kvq_queue *q1 = open_q(db, KVQ_QUEUE_FIFO, 0, s1);
    kvq_queue *q2 = open_q(db, KVQ_QUEUE_FIFO, 0, s2);
    kvq_watch *w = consume_empty(q1);
    assert_ok(push_one(q2, "elsewhere"));
    /* Nothing moved q1's counter: the watch cannot fire, so this wait can only time out. */
    assert_int_equal(kvq_watch_wait(w, 200), KVQ_ETIMED_OUT);
    assert_ok(push_one(q1, "here"));
    assert_ok(kvq_watch_wait(w, 60000));
    kvq_watch_destroy(w);
    consume_expect(q1, "here");
    consume_expect(q2, "elsewhere");
    kvq_queue_close(q1);
    kvq_queue_close(q2);
    kvq_subspace_destroy(s1);
    kvq_subspace_destroy(s2);
    kvq_db_close(db);
}

/* ---- the recipe's own layout ------------------------------------------------------------------ */

typedef struct raw_arg {
    kvq_queue *q;
    uint64_t counter;
    int counter_present;
    size_t items, others;
} raw_arg;

/* Writes an item as FoundationDB's queue recipe does: prefix + (index, 20 random bytes), and
 * nothing else. */
static int recipe_push_body(kvq_txn *txn, void *arg)
{
    kvq_queue *q = arg;
    kvq_bytes p = kvq_queue_get_prefix(q);
    uint8_t rnd[20];
    memset(rnd, 0x5a, sizeof(rnd));
    kvq_tuple_elem e[2] = { kvq_tuple_int(1), kvq_tuple_bytes(rnd, sizeof(rnd)) };
    kvq_buf key = KVQ_BUF_INIT;
    int rc = kvq_buf_append(&key, p.data, p.len);
    if (rc == 0)
        rc = kvq_tuple_pack_buf(&key, e, 2);
    if (rc == 0)
        rc = kvq_txn_set(txn, key.data, key.len, (const uint8_t *)"by-the-recipe", 13);
    kvq_buf_dispose(&key);
    return rc;
}

/* Reads the counter, and counts the keys in the recipe's range [prefix + 00, prefix + FF). */
static int raw_body(kvq_txn *txn, void *arg)
{
    raw_arg *a = arg;
    kvq_bytes p = kvq_queue_get_prefix(a->q);
    uint8_t lo[64], hi[64], ck[64];
    assert_true(p.len + 16 < sizeof(lo));
    memcpy(lo, p.data, p.len);
    memcpy(hi, p.data, p.len);
    memcpy(ck, p.data, p.len);
    lo[p.len] = 0x00;
    hi[p.len] = 0xff;
    /* prefix FF, then the tuple ("npush",): 02 'npush' 00. */
    static const uint8_t tail[] = { 0xff, 0x02, 'n', 'p', 'u', 's', 'h', 0x00 };
    memcpy(ck + p.len, tail, sizeof(tail));
    kvq_bytes v;
    int rc = kvq_txn_get(&v, &a->counter_present, txn, ck, p.len + sizeof(tail), 0);
    a->counter = 0;
    if (rc == 0 && a->counter_present) {
        assert_int_equal(v.len, 8);
        a->counter = kvq__le_get(v.data, 8);
    }
    const kvq_kv *kvs;
    size_t got = 0;
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &got, NULL, txn, lo, p.len + 1, hi, p.len + 1, 0, 0);
    a->items = a->others = 0;
    for (size_t i = 0; rc == 0 && i < got; i++) {
        uint8_t c = kvs[i].key.data[p.len]; /* an item's first element is an integer */
        if (c >= 0x0b && c <= 0x1d)
            a->items++;
        else
            a->others++;
    }
    return rc;
}

static void test_recipe_layout_and_counter(void **state)
{
    (void)state;
    kvq_db *db = open_db();
    kvq_subspace *s = fresh_sub();
    kvq_queue *q = open_q(db, KVQ_QUEUE_FIFO, KVQ_QUEUE_HIGH_CONTENTION, s);
    raw_arg r = { q, 0, 0, 0, 0 };
    assert_ok(kvq_db_transact(db, raw_body, &r));
    assert_false(r.counter_present);
    assert_ok(push_one(q, "a"));
    assert_ok(push_one(q, "b"));
    kvq_bytes two[2] = { { (const uint8_t *)"c", 1 }, { (const uint8_t *)"d", 1 } };
    assert_ok(kvq_queue_push_many(q, two, 2));
    assert_ok(kvq_db_transact(db, raw_body, &r));
    assert_true(r.counter_present);
    assert_int_equal(r.counter, 4);
    assert_int_equal(r.items, 4);
    assert_int_equal(r.others, 0); /* the recipe's range holds items only */
    /* Pops do not move it (only pushes wake consumers). */
    consume_expect(q, "a");
    assert_ok(kvq_db_transact(db, raw_body, &r));
    assert_int_equal(r.counter, 4);
    consume_expect(q, "b");
    consume_expect(q, "c");
    consume_expect(q, "d");
    /* A program using the recipe itself pushes without the counter: no wake-up, but the next
     * consume finds its item. */
    kvq_watch *w = consume_empty(q);
    assert_ok(kvq_db_transact(db, recipe_push_body, q));
    assert_int_equal(kvq_watch_wait(w, 100), KVQ_ETIMED_OUT);
    kvq_watch_destroy(w);
    consume_expect(q, "by-the-recipe");
    assert_ok(kvq_db_transact(db, raw_body, &r));
    assert_int_equal(r.counter, 4);
    assert_int_equal(r.items, 0);
    kvq_queue_close(q);
    kvq_subspace_destroy(s);
    kvq_db_close(db);
}

/* ---- batches ----------------------------------------------------------------------------------- */

static void test_consume_batches(void **state)
{
    (void)state;
    kvq_db *db = open_db();
    kvq_subspace *s1 = fresh_sub(), *s2 = fresh_sub();
    kvq_queue *f = open_q(db, KVQ_QUEUE_FIFO, KVQ_QUEUE_HIGH_CONTENTION, s1);
    kvq_queue *p = open_q(db, KVQ_QUEUE_PRIORITY, KVQ_QUEUE_HIGH_CONTENTION, s2);
    assert_ok(push_one(f, "f1"));
    assert_ok(push_one(f, "f2"));
    assert_ok(kvq_queue_push_prio(p, (const uint8_t *)"p5", 2, 5));
    assert_ok(kvq_queue_push_prio(p, (const uint8_t *)"p1", 2, 1));
    kvq_buf b[3] = { KVQ_BUF_INIT, KVQ_BUF_INIT, KVQ_BUF_INIT };
    size_t n = 0;
    kvq_watch *w = NULL;
    /* Fewer than k: the items in order, and a watch. */
    assert_ok(kvq_queue_consume_k(b, &n, &w, f, 3));
    assert_int_equal(n, 2);
    assert_non_null(w);
    kvq_watch_destroy(w);
    assert_bytes(b[0].data, b[0].len, (const uint8_t *)"f1", 2);
    assert_bytes(b[1].data, b[1].len, (const uint8_t *)"f2", 2);
    assert_ok(kvq_queue_consume_k(b, &n, &w, p, 3));
    assert_int_equal(n, 2);
    assert_non_null(w);
    kvq_watch_destroy(w);
    assert_bytes(b[0].data, b[0].len, (const uint8_t *)"p1", 2); /* lowest priority first */
    assert_bytes(b[1].data, b[1].len, (const uint8_t *)"p5", 2);
    /* The watch a batch returned fires on the next push. */
    assert_ok(kvq_queue_consume_k(b, &n, &w, p, 3));
    assert_int_equal(n, 0);
    assert_ok(kvq_queue_push_prio(p, (const uint8_t *)"p0", 2, 0));
    assert_ok(kvq_watch_wait(w, 60000));
    kvq_watch_destroy(w);
    /* kvq_queue_watch alone, too. */
    assert_ok(kvq_queue_watch(&w, f));
    assert_ok(push_one(f, "f3"));
    assert_ok(kvq_watch_wait(w, 60000));
    kvq_watch_destroy(w);
    for (int i = 0; i < 3; i++)
        kvq_buf_dispose(&b[i]);
    kvq_queue_close(f);
    kvq_queue_close(p);
    kvq_subspace_destroy(s1);
    kvq_subspace_destroy(s2);
    kvq_db_close(db);
}

static int setup(void **state)
{
    (void)state;
    if (kvq__random_bytes(&run_id, sizeof(run_id)) != 0)
        run_id = (uint64_t)kvq__mono_us();
    return kt_db_setup("qwake");
}

static int teardown(void **state)
{
    (void)state;
    return kt_db_teardown();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wake_across_processes_fifo),
        cmocka_unit_test(test_wake_across_processes_fifo_hc),
        cmocka_unit_test(test_wake_across_processes_priority_hc),
        cmocka_unit_test(test_push_txn_wakes),
        cmocka_unit_test(test_other_queue_does_not_wake),
        cmocka_unit_test(test_recipe_layout_and_counter),
        cmocka_unit_test(test_consume_batches),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
