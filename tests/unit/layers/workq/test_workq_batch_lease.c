/* Batch leases of the work queue (src/layers/queue/batch_lease.c): a batch received in one
 * transaction is leased as one record, and every guarantee of a lease holds for each of its
 * items:
 *   - the token of one item settles that item alone, once (ack, nack, extend by token; a second
 *     settle says "settled", also once the whole batch is gone);
 *   - items not settled come back when the batch's lease ends, once each, with one more
 *     delivery, or go to the dead letters at the queue's max; acks of them then say "expired";
 *   - a batch of large values comes back over several upkeep passes, each item once;
 *   - a batch of 3,000 items (its records span several keys) is nacked and received again;
 *   - no key of a batch stays behind once all its items are settled (also when two settlers
 *     of its last items each saw the other's in flight: upkeep removes it at the lease's end);
 *   - kill -9 of a process holding a batch lease: every item comes back once, not before the
 *     lease's end (compared in database versions), and the dead consumer's tokens are expired;
 *   - a kill campaign over batch consumers (SIGKILL at random, some too slow for their
 *     leases): in the end every item is acked exactly once;
 *   - consumer threads receiving and settling batches concurrently: every item is acked exactly
 *     once; threads acking the same tokens at once (whole batch, or one by one): each item is
 *     acked by exactly one of them.
 * Time: lease ends are either forced with the test knob KVQ_WORKQ_TEST_IGNORE_LEASES (upkeep
 * then returns every lease) or awaited by polling with a bound of a minute; what is asserted
 * never depends on how fast the machine is. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvq/testing.h"
#include "test_queue_common.h"

extern char **environ;

typedef struct env {
    kvq_db *db;
    kvq_queue *q;
    kvq_workq *w;
} env;

static void open_in(env *e, kvq_queue_type type, uint32_t max_deliveries)
{
    kvq_db_options o = tq_options();
    assert_ok(kvq_db_open(&e->db, tq_dir, &o));
    kvq_subspace *sub = tq_sub_tuple(kvq_tuple_str("blease"), NULL);
    assert_ok(kvq_queue_open(&e->q, e->db, type, sub, NULL));
    kvq_subspace_destroy(sub);
    kvq_workq_options wo = KVQ_WORKQ_OPTIONS_INIT;
    wo.max_deliveries = max_deliveries;
    assert_ok(kvq_workq_open(&e->w, e->q, &wo));
}

static env env_open(kvq_queue_type type, uint32_t max_deliveries)
{
    env e;
    tq_mkdir();
    open_in(&e, type, max_deliveries);
    return e;
}

static void env_close(env *e)
{
    kvq_workq_close(e->w);
    kvq_queue_close(e->q);
    kvq_db_close(e->db);
    tq_rmdir();
}

/* Pushes "v%05d" for from..to-1, padded with 'p' to pad bytes when pad is larger. */
static void push_n(env *e, int from, int to, size_t pad)
{
    uint8_t *v = malloc(pad > 16 ? pad : 16);
    assert_non_null(v);
    for (int i = from; i < to; i++) {
        int n = snprintf((char *)v, 16, "v%05d", i);
        size_t len = (size_t)n;
        if (pad > len) {
            memset(v + len, 'p', pad - len);
            len = pad;
        }
        assert_ok(kvq_workq_push(NULL, e->w, v, len, NULL));
    }
    free(v);
}

static int item_no(kvq_bytes v)
{
    assert_true(v.len >= 6 && v.data[0] == 'v');
    int n = 0;
    for (int d = 1; d < 6; d++)
        n = n * 10 + (v.data[d] - '0');
    return n;
}

static kvq_workq_stats metrics(env *e)
{
    kvq_workq_stats m;
    assert_ok(kvq_workq_get_stats(&m, e->w));
    return m;
}

static void dispose_all(kvq_buf *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        kvq_buf_dispose(&b[i]);
}

static kvq_bytes view(const kvq_buf *b)
{
    kvq_bytes v = { b->data, b->len };
    return v;
}

/* Returns every lease now (upkeep with the test knob), then the knob is off again. */
static uint64_t force_expiry(env *e)
{
    uint64_t moved = 0;
    assert_ok(kvq_testing_workq_flags(e->w, KVQ_WORKQ_TEST_IGNORE_LEASES));
    assert_ok(kvq_workq_recover(&moved, e->w));
    assert_ok(kvq_testing_workq_flags(e->w, 0));
    return moved;
}

typedef struct listed {
    size_t n;
    int items[64];
    kvq_workq_lease leases[64];
} listed;

static int list_fn(const kvq_workq_item *it, void *arg)
{
    listed *l = arg;
    if (l->n < 64) {
        l->items[l->n] = item_no(it->value);
        l->leases[l->n] = it->lease;
    }
    l->n++;
    return 0;
}

static const kvq_workq_lease *find_listed(const listed *l, int item)
{
    for (size_t i = 0; i < l->n && i < 64; i++)
        if (l->items[i] == item)
            return &l->leases[i];
    return NULL;
}

/* One item's token settles that item alone; ack, nack and extend by token; the listing shows
 * a batch's items in flight with their leases; settles after the batch is gone still say
 * "settled". */
static void token_case(kvq_queue_type type)
{
    env e = env_open(type, 0);
    push_n(&e, 0, 6, 0);
    kvq_buf outs[6] = { 0 };
    kvq_workq_lease ls[6];
    size_t n = 0;
    assert_ok(kvq_workq_receive_many(outs, ls, &n, e.w, 6, 0));
    assert_int_equal(n, 6);
    /* The token of item 2, as `kvq receive` prints it, acks item 2 only, once. */
    char tok[KVQ_WORKQ_TOKEN_LEN + 1];
    size_t toklen;
    kvq_workq_lease back;
    assert_ok(kvq_workq_lease_format(tok, sizeof(tok), &toklen, &ls[2]));
    assert_ok(kvq_workq_lease_parse(&back, tok));
    assert_ok(kvq_workq_ack(e.w, &back));
    assert_int_equal(kvq_workq_ack(e.w, &back), KVQ_ELEASE_SETTLED);
    assert_int_equal(kvq_workq_nack(e.w, &ls[2], 0), KVQ_ELEASE_SETTLED);
    kvq_workq_stats m = metrics(&e);
    assert_int_equal(m.inflight, 5);
    assert_int_equal(m.acked, 1);
    /* Nack of item 3: it is ready again, at its place, with one more delivery. */
    assert_ok(kvq_workq_nack(e.w, &ls[3], 0));
    kvq_buf v = KVQ_BUF_INIT;
    kvq_workq_lease l3;
    assert_ok(kvq_workq_receive(&v, &l3, e.w, 0));
    assert_int_equal(item_no(view(&v)), 3);
    assert_int_equal(l3.deliveries, 2);
    assert_ok(kvq_workq_ack(e.w, &l3));
    /* Extend of item 4: its lease moves; the listing shows items 0, 1, 4 and 5 in flight, item
     * 4 with the new end and the others with the batch's. */
    kvq_workq_lease l4 = ls[4];
    assert_ok(kvq_workq_extend(e.w, &l4, 600000));
    assert_true(l4.deadline > ls[4].deadline);
    listed li = { 0 };
    assert_ok(kvq_workq_list_inflight(e.w, list_fn, &li));
    assert_int_equal(li.n, 4);
    const int live[] = { 0, 1, 4, 5 };
    for (int i = 0; i < 4; i++) {
        const kvq_workq_lease *ll = find_listed(&li, live[i]);
        assert_non_null(ll);
        assert_memory_equal(ll->id, ls[live[i]].id, 16);
        assert_int_equal(ll->deliveries, 1);
        assert_int_equal(ll->deadline, live[i] == 4 ? l4.deadline : ls[live[i]].deadline);
    }
    /* A batch ack of all six: 2 and 3 were settled, the others are acked now (4 through the
     * lease of its own). */
    ls[4] = l4;
    int r[6];
    assert_int_equal(kvq_workq_ack_many(r, e.w, ls, 6), KVQ_ELEASE_SETTLED);
    const int want[] = { 0, 0, KVQ_ELEASE_SETTLED, KVQ_ELEASE_SETTLED, 0, 0 };
    for (int i = 0; i < 6; i++)
        assert_int_equal(r[i], want[i]);
    m = metrics(&e);
    assert_int_equal(m.inflight, 0);
    assert_int_equal(m.acked, 6);
    assert_int_equal(m.ready, 0);
    li.n = 0;
    assert_ok(kvq_workq_list_inflight(e.w, list_fn, &li));
    assert_int_equal(li.n, 0);
    /* The batch is gone; its marker still tells settled from expired. */
    for (int i = 0; i < 6; i++)
        assert_int_equal(kvq_workq_ack(e.w, &ls[i]), KVQ_ELEASE_SETTLED);
    assert_int_equal(kvq_workq_extend(e.w, &ls[0], 1000), KVQ_ELEASE_SETTLED);
    assert_int_equal(metrics(&e).acked, 6);
    kvq_buf_dispose(&v);
    dispose_all(outs, 6);
    env_close(&e);
}

static void test_token_durable(void **state)
{
    (void)state;
    token_case(KVQ_QUEUE_DURABLE);
}

static void test_token_priority(void **state)
{
    (void)state;
    token_case(KVQ_QUEUE_PRIORITY);
}

/* A batch's lease ends: what was settled stays settled, the rest comes back once each, in queue
 * order, with one more delivery (a single lease alongside too); at the max they go to the dead
 * letters. */
static void expiry_case(kvq_queue_type type)
{
    env e = env_open(type, 2);
    push_n(&e, 0, 21, 0);
    kvq_buf outs[21] = { 0 };
    kvq_workq_lease ls[21];
    size_t n = 0;
    assert_ok(kvq_workq_receive_many(outs, ls, &n, e.w, 20, 0));
    assert_int_equal(n, 20);
    kvq_buf one = KVQ_BUF_INIT;
    kvq_workq_lease single;
    assert_ok(kvq_workq_receive(&one, &single, e.w, 0)); /* item 20: a single lease */
    assert_int_equal(item_no(view(&one)), 20);
    assert_ok(kvq_workq_ack_many(NULL, e.w, ls, 5)); /* 0-4 */
    assert_ok(kvq_workq_nack(e.w, &ls[5], 0));        /* 5: ready, delivery count 1 */
    assert_ok(kvq_workq_ack(e.w, &ls[6]));            /* 6 */
    /* 7-19 and the single lease come back. */
    assert_int_equal(force_expiry(&e), 14);
    kvq_workq_stats m = metrics(&e);
    assert_int_equal(m.inflight, 0);
    assert_int_equal(m.ready, 15);
    int r[21];
    assert_int_equal(kvq_workq_ack_many(r, e.w, ls, 20), KVQ_ELEASE_SETTLED);
    for (int i = 0; i < 20; i++)
        assert_int_equal(r[i], i <= 6 ? KVQ_ELEASE_SETTLED : KVQ_ELEASE_EXPIRED);
    assert_int_equal(kvq_workq_ack(e.w, &ls[12]), KVQ_ELEASE_EXPIRED);
    assert_int_equal(kvq_workq_nack(e.w, &ls[19], 0), KVQ_ELEASE_EXPIRED);
    assert_int_equal(kvq_workq_ack(e.w, &single), KVQ_ELEASE_EXPIRED);
    assert_int_equal(metrics(&e).acked, 6);
    /* Received again: 5 and 7-20, in order, each once, each on its second delivery. */
    dispose_all(outs, 21);
    assert_ok(kvq_workq_receive_many(outs, ls, &n, e.w, 21, 0));
    assert_int_equal(n, 15);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(item_no(view(&outs[i])), i == 0 ? 5 : (int)i + 6);
        assert_int_equal(ls[i].deliveries, 2);
    }
    /* Their lease ends too: max 2 deliveries, so all 15 are dead letters. */
    assert_int_equal(force_expiry(&e), 15);
    m = metrics(&e);
    assert_int_equal(m.dead, 15);
    assert_int_equal(m.ready, 0);
    assert_int_equal(m.inflight, 0);
    assert_int_equal(kvq_workq_receive_many(outs, ls, &n, e.w, 5, 0), KVQ_ENOTFOUND);
    kvq_buf_dispose(&one);
    dispose_all(outs, 21);
    env_close(&e);
}

static void test_expiry_durable(void **state)
{
    (void)state;
    expiry_case(KVQ_QUEUE_DURABLE);
}

static void test_expiry_priority(void **state)
{
    (void)state;
    expiry_case(KVQ_QUEUE_PRIORITY);
}

/* A batch of 3.6 MB of values comes back over several upkeep passes (each has a byte budget),
 * all of them run by the next reader (a receive makes everything due ready before it takes an
 * item): each item back once. */
static void test_expiry_in_passes(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 0);
    enum { N = 40, SIZE = 90000 };
    push_n(&e, 0, N, SIZE);
    kvq_buf outs[N] = { 0 };
    kvq_workq_lease ls[N];
    size_t n = 0;
    assert_ok(kvq_workq_receive_many(outs, ls, &n, e.w, N, 0));
    assert_int_equal(n, N);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(outs[i].len, SIZE);
        assert_int_equal(item_no(view(&outs[i])), (int)i);
        assert_int_equal(outs[i].data[SIZE - 1], 'p');
    }
    /* The upkeep passes a receive runs first, with every lease due. */
    assert_ok(kvq_testing_workq_flags(e.w, KVQ_WORKQ_TEST_IGNORE_LEASES));
    kvq_buf v = KVQ_BUF_INIT;
    kvq_workq_lease l;
    assert_ok(kvq_workq_receive(&v, &l, e.w, 0));
    assert_ok(kvq_testing_workq_flags(e.w, 0));
    assert_int_equal(item_no(view(&v)), 0);
    kvq_workq_stats m = metrics(&e);
    assert_int_equal(m.inflight, 1); /* item 0 again; the whole batch came back */
    assert_int_equal(m.ready, N - 1);
    listed li = { 0 };
    assert_ok(kvq_workq_list_inflight(e.w, list_fn, &li));
    assert_int_equal(li.n, (size_t)m.inflight);
    assert_ok(kvq_workq_ack(e.w, &l));
    assert_int_equal(force_expiry(&e), 0);
    dispose_all(outs, N);
    assert_ok(kvq_workq_receive_many(outs, ls, &n, e.w, N, 0));
    assert_int_equal(n, N - 1);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(item_no(view(&outs[i])), (int)i + 1);
        assert_int_equal(outs[i].len, SIZE);
        assert_int_equal(ls[i].deliveries, 2);
    }
    assert_ok(kvq_workq_ack_many(NULL, e.w, ls, n));
    m = metrics(&e);
    assert_int_equal(m.acked, N);
    assert_int_equal(m.inflight, 0);
    assert_int_equal(m.ready, 0);
    kvq_buf_dispose(&v);
    dispose_all(outs, N);
    env_close(&e);
}

/* A batch of 3,000 items: its item records take more than one key; nacked, the items are back
 * in order with their counts, and a second batch gets each on its second delivery. */
typedef struct push_run {
    kvq_workq *w;
    int from, to;
} push_run;

static int push_run_body(kvq_txn *txn, void *arg)
{
    push_run *p = arg;
    for (int i = p->from; i < p->to; i++) {
        char v[16];
        int n = snprintf(v, sizeof(v), "v%05d", i);
        int rc = kvq_workq_push_txn(NULL, p->w, txn, (const uint8_t *)v, (size_t)n, NULL);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static void test_large_batch(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 0);
    enum { N = 3000 };
    for (int i = 0; i < N; i += 500) {
        push_run p = { e.w, i, i + 500 };
        assert_ok(kvq_db_transact(e.db, push_run_body, &p));
    }
    kvq_buf *outs = calloc(N, sizeof(*outs));
    kvq_workq_lease *ls = calloc(N, sizeof(*ls));
    assert_non_null(outs);
    assert_non_null(ls);
    size_t n = 0;
    for (int round = 1; round <= 2; round++) {
        assert_ok(kvq_workq_receive_many(outs, ls, &n, e.w, N, 0));
        assert_int_equal(n, N);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(item_no(view(&outs[i])), (int)i);
            assert_int_equal(ls[i].deliveries, round);
        }
        assert_int_equal(metrics(&e).inflight, N);
        if (round == 1)
            assert_ok(kvq_workq_nack_many(NULL, e.w, ls, n, 0));
        else
            assert_ok(kvq_workq_ack_many(NULL, e.w, ls, n));
    }
    kvq_workq_stats m = metrics(&e);
    assert_int_equal(m.acked, N);
    assert_int_equal(m.inflight, 0);
    assert_int_equal(m.ready, 0);
    dispose_all(outs, N);
    free(outs);
    free(ls);
    env_close(&e);
}

/* Keys of the batch leases kind (bk ("wq","b") ...) in the database. */
typedef struct count_ctx {
    kvq_queue *q;
    size_t n;
} count_ctx;

static int count_body(kvq_txn *txn, void *arg)
{
    count_ctx *c = arg;
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT;
    kvq_tuple_elem e[2] = { kvq_tuple_str("wq"), kvq_tuple_str("b") };
    int rc = kvq_buf_append(&lo, c->q->bk.data, c->q->bk.len);
    if (rc == 0)
        rc = kvq_tuple_pack_buf(&lo, e, 2);
    if (rc == 0)
        rc = kvq_buf_append(&hi, lo.data, lo.len);
    static const uint8_t ff = 0xff;
    if (rc == 0)
        rc = kvq_buf_append(&hi, &ff, 1);
    const kvq_kv *kvs;
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &c->n, NULL, txn, lo.data, lo.len, hi.data, hi.len, 0,
                               KVQ_SNAPSHOT);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    return rc;
}

static size_t batch_keys(env *e)
{
    count_ctx c = { e->q, 0 };
    assert_ok(kvq_db_transact(e->db, count_body, &c));
    return c.n;
}

typedef struct ack_in {
    kvq_workq *w;
    kvq_workq_lease *l;
} ack_in;

static int ack_in_body(kvq_txn *txn, void *arg)
{
    ack_in *a = arg;
    return kvq_workq_ack_txn(a->w, txn, a->l);
}

/* Two settlers of a batch's last two items, each seeing the other's in flight, both commit (no
 * conflict: different items) and leave the record with every item settled; upkeep removes it
 * when the lease ends, and the tokens still say "settled". An ack of the whole batch leaves no
 * key of it behind. */
static void test_record_cleanup(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 0);
    push_n(&e, 0, 4, 0);
    kvq_buf outs[2] = { 0 };
    kvq_workq_lease ls[2];
    size_t n = 0;
    assert_ok(kvq_workq_receive_many(outs, ls, &n, e.w, 2, 0));
    assert_int_equal(batch_keys(&e), 1); /* small: one key */
    kvq_txn *t1;
    assert_ok(kvq_txn_create(&t1, e.db));
    assert_ok(kvq_workq_ack_txn(e.w, t1, &ls[0])); /* sees item 1 in flight */
    ack_in a = { e.w, &ls[1] };
    assert_ok(kvq_db_transact(e.db, ack_in_body, &a)); /* sees item 0 in flight */
    assert_ok(kvq_txn_commit(t1));
    kvq_txn_destroy(t1);
    assert_true(batch_keys(&e) > 1); /* the record and two settled items */
    assert_int_equal(metrics(&e).acked, 2);
    assert_int_equal(force_expiry(&e), 0);
    assert_int_equal(batch_keys(&e), 0);
    assert_int_equal(kvq_workq_ack(e.w, &ls[0]), KVQ_ELEASE_SETTLED);
    assert_int_equal(kvq_workq_ack(e.w, &ls[1]), KVQ_ELEASE_SETTLED);
    /* A whole batch acked: nothing of it stays but its marker (another kind). */
    assert_ok(kvq_workq_receive_many(outs, ls, &n, e.w, 2, 0));
    assert_ok(kvq_workq_ack_many(NULL, e.w, ls, n));
    assert_int_equal(batch_keys(&e), 0);
    kvq_workq_stats m = metrics(&e);
    assert_int_equal(m.acked, 4);
    assert_int_equal(m.inflight, 0);
    dispose_all(outs, 2);
    env_close(&e);
}

/* ---- kill -9 of a batch holder ---------------------------------------------------------------- */

#define CRASH_N 100
/* The parent must see the batch in flight before its lease ends: wider in slow builds. */
#define CRASH_LEASE_MS (300 * kvq_test_time_factor())

/* The child: receives a batch, prints its tokens and "held", and waits to be killed. */
static int holder_main(const char *dir)
{
    snprintf(tq_dir, sizeof(tq_dir), "%s", dir);
    env e;
    open_in(&e, KVQ_QUEUE_DURABLE, 0);
    kvq_buf outs[CRASH_N] = { 0 };
    kvq_workq_lease ls[CRASH_N];
    size_t n = 0;
    if (kvq_workq_receive_many(outs, ls, &n, e.w, CRASH_N, CRASH_LEASE_MS) != 0)
        return 3;
    for (size_t i = 0; i < n; i++) {
        char tok[KVQ_WORKQ_TOKEN_LEN + 1];
        size_t toklen;
        if (kvq_workq_lease_format(tok, sizeof(tok), &toklen, &ls[i]) != 0)
            return 4;
        printf("%s\n", tok);
    }
    printf("held\n");
    fflush(stdout);
    for (;;)
        pause();
}

static void test_kill_batch_holder(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 0);
    push_n(&e, 0, CRASH_N, 0);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    posix_spawn_file_actions_t fa;
    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    assert_int_equal(posix_spawn_file_actions_adddup2(&fa, fds[1], 1), 0);
    assert_int_equal(posix_spawn_file_actions_addclose(&fa, fds[0]), 0);
    char *args[] = { (char *)kt_prog(), "--batch-holder", tq_dir, NULL };
    fflush(stdout);
    fflush(stderr);
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    FILE *in = fdopen(fds[0], "r");
    assert_non_null(in);
    kvq_workq_lease held[CRASH_N];
    size_t nheld = 0;
    char line[256];
    int done = 0;
    while (!done && fgets(line, sizeof(line), in) != NULL) {
        line[strcspn(line, "\n")] = 0;
        if (strcmp(line, "held") == 0)
            done = 1;
        else if (nheld < CRASH_N)
            assert_ok(kvq_workq_lease_parse(&held[nheld++], line));
    }
    assert_true(done);
    assert_int_equal(nheld, CRASH_N);
    /* The holder dies with its batch in flight. */
    assert_int_equal(kill(pid, SIGKILL), 0);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    fclose(in);
    assert_int_equal(metrics(&e).inflight, CRASH_N);
    /* Every item comes back once, at or after the lease's end, on its second delivery. */
    int seen[CRASH_N] = { 0 };
    size_t back = 0;
    kvq_buf outs[CRASH_N] = { 0 };
    kvq_workq_lease ls[CRASH_N];
    int64_t t0 = kvq__mono_us();
    while (back < CRASH_N) {
        size_t n = 0;
        int rc = kvq_workq_receive_many(outs, ls, &n, e.w, CRASH_N, 600000);
        if (rc == KVQ_ENOTFOUND) {
            assert_true(kvq__mono_us() - t0 < 60000000); /* a minute, for a busy machine */
            kvq__sleep_us(10000);
            continue;
        }
        assert_ok(rc);
        for (size_t i = 0; i < n; i++) {
            int it = item_no(view(&outs[i]));
            assert_true(it >= 0 && it < CRASH_N);
            seen[it]++;
            assert_int_equal(ls[i].deliveries, 2);
            assert_true(ls[i].received >= held[it].deadline);
        }
        assert_ok(kvq_workq_ack_many(NULL, e.w, ls, n));
        back += n;
    }
    for (int i = 0; i < CRASH_N; i++)
        assert_int_equal(seen[i], 1);
    /* The dead holder's tokens: expired, nothing changes. */
    int r[CRASH_N];
    assert_int_equal(kvq_workq_ack_many(r, e.w, held, CRASH_N), KVQ_ELEASE_EXPIRED);
    for (int i = 0; i < CRASH_N; i++)
        assert_int_equal(r[i], KVQ_ELEASE_EXPIRED);
    kvq_workq_stats m = metrics(&e);
    assert_int_equal(m.acked, CRASH_N);
    assert_int_equal(m.inflight, 0);
    assert_int_equal(m.ready, 0);
    size_t none = 0;
    assert_int_equal(kvq_workq_receive_many(outs, ls, &none, e.w, 1, 0), KVQ_ENOTFOUND);
    dispose_all(outs, CRASH_N);
    env_close(&e);
}

/* ---- concurrent batch consumers ------------------------------------------------------------ */

#define CONC_ITEMS 3000
#define CONC_THREADS 4

typedef struct conc {
    env *e;
    int acks[CONC_ITEMS]; /* atomic */
    int total;            /* atomic: items acked */
    int failed;           /* atomic */
    uint64_t seed;
} conc;

typedef struct conc_arg {
    conc *c;
    int id;
} conc_arg;

static void *conc_thread(void *arg)
{
    conc_arg *a = arg;
    conc *c = a->c;
    kvq_workq *w = c->e->w;
    kvq__rng rng = { c->seed * 0x9e3779b97f4a7c15ULL + (uint64_t)a->id + 1 };
    kvq_buf outs[64] = { 0 };
    kvq_workq_lease ls[64];
    int r[64];
    int64_t t0 = kvq__mono_us();
    while (__atomic_load_n(&c->total, __ATOMIC_SEQ_CST) < CONC_ITEMS &&
           !__atomic_load_n(&c->failed, __ATOMIC_SEQ_CST)) {
        if (kvq__mono_us() - t0 > 300000000LL) { /* five minutes: something is stuck */
            __atomic_store_n(&c->failed, 1, __ATOMIC_SEQ_CST);
            break;
        }
        size_t k = 1 + (size_t)(kvq__rng_next(&rng) % 64), n = 0;
        int rc = kvq_workq_receive_many(outs, ls, &n, w, k, 600000);
        if (rc == KVQ_ENOTFOUND) {
            kvq__sleep_us(1000);
            continue;
        }
        if (rc != 0) {
            fprintf(stderr, "receive: %s (%s)\n", kvq_errname(rc), kvq_last_error());
            __atomic_store_n(&c->failed, 2, __ATOMIC_SEQ_CST);
            break;
        }
        unsigned how = (unsigned)(kvq__rng_next(&rng) % 10);
        size_t nack_from = n; /* items from here are nacked, the rest acked */
        if (how == 0)
            nack_from = n / 2;
        if (how == 1) {
            /* One by one, each through its token. */
            for (size_t i = 0; i < n && rc == 0; i++) {
                char tok[KVQ_WORKQ_TOKEN_LEN + 1];
                size_t toklen;
                kvq_workq_lease l;
                rc = kvq_workq_lease_format(tok, sizeof(tok), &toklen, &ls[i]);
                if (rc == 0)
                    rc = kvq_workq_lease_parse(&l, tok);
                if (rc == 0)
                    rc = kvq_workq_ack(w, &l);
                r[i] = rc;
            }
        } else {
            rc = nack_from > 0 ? kvq_workq_ack_many(r, w, ls, nack_from) : 0;
            if (rc == 0 && nack_from < n)
                rc = kvq_workq_nack_many(NULL, w, ls + nack_from, n - nack_from, 0);
        }
        if (rc != 0) {
            fprintf(stderr, "settle: %s (%s)\n", kvq_errname(rc), kvq_last_error());
            __atomic_store_n(&c->failed, 3, __ATOMIC_SEQ_CST);
            break;
        }
        for (size_t i = 0; i < nack_from; i++) {
            int it = item_no(view(&outs[i]));
            if (it < 0 || it >= CONC_ITEMS || r[i] != 0) {
                __atomic_store_n(&c->failed, 4, __ATOMIC_SEQ_CST);
                break;
            }
            __atomic_add_fetch(&c->acks[it], 1, __ATOMIC_SEQ_CST);
            __atomic_add_fetch(&c->total, 1, __ATOMIC_SEQ_CST);
        }
    }
    dispose_all(outs, 64);
    return NULL;
}

static void test_concurrent_exactly_once(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 0);
    push_n(&e, 0, CONC_ITEMS, 0);
    conc *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->e = &e;
    c->seed = kt_seed();
    pthread_t th[CONC_THREADS];
    conc_arg args[CONC_THREADS];
    for (int i = 0; i < CONC_THREADS; i++) {
        args[i] = (conc_arg){ c, i };
        assert_int_equal(pthread_create(&th[i], NULL, conc_thread, &args[i]), 0);
    }
    for (int i = 0; i < CONC_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(c->failed, 0);
    assert_int_equal(c->total, CONC_ITEMS);
    for (int i = 0; i < CONC_ITEMS; i++)
        assert_int_equal(c->acks[i], 1);
    kvq_workq_stats m = metrics(&e);
    assert_int_equal(m.acked, CONC_ITEMS);
    assert_int_equal(m.inflight, 0);
    assert_int_equal(m.ready, 0);
    free(c);
    env_close(&e);
}

/* Settlers racing on the same tokens: each item is settled by exactly one of them (the others
 * are told "settled"), whether they ack the whole batch or item by item in another order. */
#define RACE_ITEMS 200
#define RACE_THREADS 4

typedef struct race {
    env *e;
    kvq_workq_lease ls[RACE_ITEMS];
    int wins[RACE_ITEMS]; /* atomic */
    int start;            /* atomic: threads waiting for the start */
    int failed;           /* atomic */
} race;

typedef struct race_arg {
    race *r;
    int id;
} race_arg;

static void *race_thread(void *arg)
{
    race_arg *a = arg;
    race *r = a->r;
    __atomic_add_fetch(&r->start, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&r->start, __ATOMIC_SEQ_CST) < RACE_THREADS)
        sched_yield();
    int res[RACE_ITEMS];
    if (a->id % 2 == 0) {
        int rc = kvq_workq_ack_many(res, r->e->w, r->ls, RACE_ITEMS);
        if (rc != 0 && rc != KVQ_ELEASE_SETTLED)
            __atomic_store_n(&r->failed, 1, __ATOMIC_SEQ_CST);
    } else {
        for (int i = RACE_ITEMS - 1; i >= 0; i--) {
            kvq_workq_lease l = r->ls[i];
            res[i] = kvq_workq_ack(r->e->w, &l);
        }
    }
    for (int i = 0; i < RACE_ITEMS; i++) {
        if (res[i] == 0)
            __atomic_add_fetch(&r->wins[i], 1, __ATOMIC_SEQ_CST);
        else if (res[i] != KVQ_ELEASE_SETTLED)
            __atomic_store_n(&r->failed, 2, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

static void test_racing_settlers(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 0);
    enum { ROUNDS = 5 };
    push_n(&e, 0, ROUNDS * RACE_ITEMS, 0);
    kvq_buf outs[RACE_ITEMS] = { 0 };
    for (int round = 0; round < ROUNDS; round++) {
        race *r = calloc(1, sizeof(*r));
        assert_non_null(r);
        r->e = &e;
        size_t n = 0;
        assert_ok(kvq_workq_receive_many(outs, r->ls, &n, e.w, RACE_ITEMS, 600000));
        assert_int_equal(n, RACE_ITEMS);
        pthread_t th[RACE_THREADS];
        race_arg args[RACE_THREADS];
        for (int i = 0; i < RACE_THREADS; i++) {
            args[i] = (race_arg){ r, i };
            assert_int_equal(pthread_create(&th[i], NULL, race_thread, &args[i]), 0);
        }
        for (int i = 0; i < RACE_THREADS; i++)
            assert_int_equal(pthread_join(th[i], NULL), 0);
        assert_int_equal(r->failed, 0);
        for (int i = 0; i < RACE_ITEMS; i++)
            assert_int_equal(r->wins[i], 1);
        kvq_workq_stats m = metrics(&e);
        assert_int_equal(m.acked, (round + 1) * RACE_ITEMS);
        assert_int_equal(m.inflight, 0);
        free(r);
    }
    dispose_all(outs, RACE_ITEMS);
    env_close(&e);
}

/* ---- a kill campaign over batch consumers ----------------------------------------------------- */

#define CAMP_ITEMS 2000
#define CAMP_PROCS 3
#define CAMP_CYCLES 25

/* A consumer process: receives batches of 1 to 50 with a 300 ms lease and acks them, logging
 * each ack that returned 0 as "a ITEM" (kt_writef: one write(2), kept through kill -9). */
static int consumer_main(const char *dir, const char *logpath, unsigned seed)
{
    snprintf(tq_dir, sizeof(tq_dir), "%s", dir);
    env e;
    open_in(&e, KVQ_QUEUE_DURABLE, 0);
    int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd < 0)
        return 5;
    kvq_buf outs[50] = { 0 };
    kvq_workq_lease ls[50];
    int r[50];
    for (;;) {
        size_t k = 1 + (size_t)(rand_r(&seed) % 50), n = 0;
        int rc = kvq_workq_receive_many(outs, ls, &n, e.w, k, 300);
        if (rc == KVQ_ENOTFOUND) {
            kvq__sleep_us(2000);
            continue;
        }
        if (rc != 0)
            return 6;
        if (rand_r(&seed) % 30 == 0)
            kvq__sleep_us(400000); /* too slow: the acks must fail as expired */
        rc = kvq_workq_ack_many(r, e.w, ls, n);
        if (rc != 0 && rc != KVQ_ELEASE_EXPIRED)
            return 7;
        for (size_t i = 0; i < n; i++)
            if (r[i] == 0)
                kt_writef(fd, "a %d\n", item_no(view(&outs[i])));
    }
}

typedef struct camp {
    char logs[CAMP_PROCS][300];
    unsigned incarnation;
} camp;

static pid_t camp_spawn(int slot, void *arg)
{
    camp *c = arg;
    char seed[32];
    snprintf(seed, sizeof(seed), "%u", (unsigned)kt_seed() + 7919u * c->incarnation++);
    char *args[] = { (char *)kt_prog(), "--batch-consumer", tq_dir, c->logs[slot], seed, NULL };
    fflush(stdout);
    fflush(stderr);
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ), 0);
    return pid;
}

/* Batch consumers killed at random (one or more every 50-250 ms, all of them every fifth
 * cycle), started again, some too slow for their leases; then the parent drains. Each item is
 * acked exactly once in the end: the acked count is the number of items, no ack that returned 0
 * is logged twice for an item, and nothing is left. */
static void test_kill_campaign(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 0);
    for (int i = 0; i < CAMP_ITEMS; i += 500) {
        push_run p = { e.w, i, i + 500 };
        assert_ok(kvq_db_transact(e.db, push_run_body, &p));
    }
    camp *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    for (int i = 0; i < CAMP_PROCS; i++) {
        char name[16];
        snprintf(name, sizeof(name), "c%d.log", i);
        kt_path(c->logs[i], sizeof(c->logs[i]), tq_dir, name);
    }
    pid_t pids[CAMP_PROCS];
    kt_kill_loop l = { pids,   CAMP_PROCS, camp_spawn, c, 1, 3, 5, (unsigned)kt_seed(), 0,
                       tq_dir, "c0.log|c1.log|c2.log" };
    assert_int_equal(kt_kill_campaign(&l, CAMP_CYCLES, 0), 0);
    /* Drain: the killed consumers' leases end, their items come back. */
    int *acks = calloc(CAMP_ITEMS, sizeof(*acks));
    assert_non_null(acks);
    kvq_buf outs[100] = { 0 };
    kvq_workq_lease ls[100];
    int r[100];
    int64_t t0 = kvq__mono_us();
    for (;;) {
        size_t n = 0;
        int rc = kvq_workq_receive_many(outs, ls, &n, e.w, 100, 600000);
        if (rc == KVQ_ENOTFOUND) {
            kvq_workq_stats m = metrics(&e);
            if (m.ready == 0 && m.inflight == 0 && m.delayed == 0)
                break;
            assert_true(kvq__mono_us() - t0 < 60000000);
            kvq__sleep_us(10000);
            continue;
        }
        assert_ok(rc);
        assert_ok(kvq_workq_ack_many(r, e.w, ls, n));
        for (size_t i = 0; i < n; i++)
            acks[item_no(view(&outs[i]))]++;
    }
    for (int i = 0; i < CAMP_PROCS; i++) {
        FILE *f = fopen(c->logs[i], "r");
        if (f == NULL)
            continue;
        int it;
        while (fscanf(f, "a %d\n", &it) == 1) {
            assert_true(it >= 0 && it < CAMP_ITEMS);
            acks[it]++;
        }
        fclose(f);
    }
    kvq_workq_stats m = metrics(&e);
    size_t seen = 0;
    for (int i = 0; i < CAMP_ITEMS; i++) {
        assert_true(acks[i] <= 1); /* two acks of one item that both returned 0: never */
        seen += (size_t)acks[i];
    }
    /* Acks that committed as their consumer was killed count in m.acked but were not logged. */
    assert_int_equal(m.acked, CAMP_ITEMS);
    printf("# batch kill campaign: %zu kills, %zu of %d acks seen returning 0, %lld deliveries "
           "again\n",
           l.kills, seen, CAMP_ITEMS, (long long)(m.received - CAMP_ITEMS));
    dispose_all(outs, 100);
    free(acks);
    free(c);
    env_close(&e);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--batch-holder") == 0)
        return holder_main(argv[2]);
    if (argc == 5 && strcmp(argv[1], "--batch-consumer") == 0)
        return consumer_main(argv[2], argv[3], (unsigned)strtoul(argv[4], NULL, 10));
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_durable),
        cmocka_unit_test(test_token_priority),
        cmocka_unit_test(test_expiry_durable),
        cmocka_unit_test(test_expiry_priority),
        cmocka_unit_test(test_expiry_in_passes),
        cmocka_unit_test(test_large_batch),
        cmocka_unit_test(test_record_cleanup),
        cmocka_unit_test(test_kill_batch_holder),
        cmocka_unit_test(test_kill_campaign),
        cmocka_unit_test(test_concurrent_exactly_once),
        cmocka_unit_test(test_racing_settlers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
