/* Batches of the work queue (kvq/workq_batch.h): receive, ack and nack many items in one
 * transaction, on durable and priority queues; per-lease failures that do not stop the others;
 * dead letters on the way; bad input; injected 1021s that had committed (an ack batch reports
 * done, nothing is acked twice or lost).
 *
 * Timing: one test lets a lease of 100 ms expire; it only checks that it did, with a wait that
 * polls for up to 20 s. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_queue_common.h"

typedef struct env {
    kvq_db *db;
    kvq_queue *q;
    kvq_workq *w;
} env;

static env env_open(kvq_queue_type type, uint32_t max_deliveries, double fault_rate)
{
    env e;
    tq_mkdir();
    e.db = tq_open_db(fault_rate, KVQ_FAULT_UNKNOWN_COMMITTED, kt_seed());
    kvq_subspace *sub = tq_sub_tuple(kvq_tuple_str("batch"), NULL);
    assert_ok(kvq_queue_open(&e.q, e.db, type, sub, NULL));
    kvq_subspace_destroy(sub);
    kvq_workq_options o = KVQ_WORKQ_OPTIONS_INIT;
    o.max_deliveries = max_deliveries;
    assert_ok(kvq_workq_open(&e.w, e.q, &o));
    return e;
}

static void env_close(env *e)
{
    kvq_workq_close(e->w);
    kvq_queue_close(e->q);
    kvq_db_close(e->db);
    tq_rmdir();
}

static void push_n(env *e, int from, int to, int64_t prio)
{
    for (int i = from; i < to; i++) {
        char v[16];
        int n = snprintf(v, sizeof(v), "v%04d", i);
        kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
        po.priority = prio;
        assert_ok(kvq_workq_push(NULL, e->w, (const uint8_t *)v, (size_t)n, &po));
    }
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

static void receive_ack_case(kvq_queue_type type)
{
    env e = env_open(type, 0, 0);
    push_n(&e, 0, 250, 0);
    kvq_buf outs[300] = { 0 };
    kvq_workq_lease leases[300];
    size_t got = 0;
    /* One batch: 100 items in queue order, one lease each. */
    assert_ok(kvq_workq_receive_many(outs, leases, &got, e.w, 100, 0));
    assert_int_equal(got, 100);
    for (size_t i = 0; i < got; i++) {
        char want[16];
        int n = snprintf(want, sizeof(want), "v%04zu", i);
        assert_bytes(outs[i].data, outs[i].len, (const uint8_t *)want, (size_t)n);
        assert_int_equal(leases[i].deliveries, 1);
        if (i > 0)
            assert_memory_not_equal(leases[i].id, leases[i - 1].id, 16);
    }
    kvq_workq_stats m = metrics(&e);
    assert_int_equal(m.inflight, 100);
    assert_int_equal(m.ready, 150);
    assert_int_equal(m.received, 100);
    /* The rest: fewer than asked. */
    size_t got2 = 0;
    assert_ok(kvq_workq_receive_many(outs + 100, leases + 100, &got2, e.w, 200, 0));
    assert_int_equal(got2, 150);
    assert_bytes(outs[249].data, outs[249].len, (const uint8_t *)"v0249", 5);
    size_t none = 9;
    assert_int_equal(kvq_workq_receive_many(outs + 250, leases + 250, &none, e.w, 10, 0),
                     KVQ_ENOTFOUND);
    assert_int_equal(none, 0);
    /* Ack all in two batches; a second ack of the same leases settles nothing. */
    int results[250];
    assert_ok(kvq_workq_ack_many(results, e.w, leases, 100));
    assert_ok(kvq_workq_ack_many(NULL, e.w, leases + 100, 150));
    for (int i = 0; i < 100; i++)
        assert_int_equal(results[i], 0);
    m = metrics(&e);
    assert_int_equal(m.inflight, 0);
    assert_int_equal(m.acked, 250);
    assert_int_equal(kvq_workq_ack_many(results, e.w, leases, 3), KVQ_ELEASE_SETTLED);
    for (int i = 0; i < 3; i++)
        assert_int_equal(results[i], KVQ_ELEASE_SETTLED);
    assert_int_equal(metrics(&e).acked, 250);
    dispose_all(outs, 300);
    env_close(&e);
}

static void test_receive_ack_durable(void **state)
{
    (void)state;
    receive_ack_case(KVQ_QUEUE_DURABLE);
}

static void test_receive_ack_priority(void **state)
{
    (void)state;
    receive_ack_case(KVQ_QUEUE_PRIORITY);
}

/* One expired lease in an ack batch: it fails alone, the others are acked and the expired
 * item comes back. */
static void test_partial_failure(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 0, 0);
    push_n(&e, 0, 3, 0);
    kvq_buf outs[3] = { 0 };
    kvq_workq_lease leases[3], shortl;
    size_t got = 0;
    /* Short, but the next receive must come inside it (wider in slow builds). */
    assert_ok(kvq_workq_receive_many(outs, &shortl, &got, e.w, 1, 100 * kvq_test_time_factor()));
    assert_int_equal(got, 1);
    assert_ok(kvq_workq_receive_many(outs + 1, leases + 1, &got, e.w, 2, 0));
    assert_int_equal(got, 2);
    leases[0] = shortl;
    /* Wait until the short lease has surely ended in database time. */
    for (int i = 0; i < 2000; i++) {
        kvq_buf b = KVQ_BUF_INIT;
        kvq_workq_lease l;
        int rc = kvq_workq_receive(&b, &l, e.w, 0);
        kvq_buf_dispose(&b);
        if (rc == 0) {
            assert_ok(kvq_workq_ack(e.w, &l)); /* the expired item, redelivered: done */
            break;
        }
        assert_int_equal(rc, KVQ_ENOTFOUND);
        kvq__sleep_us(10000);
    }
    int results[3];
    assert_int_equal(kvq_workq_ack_many(results, e.w, leases, 3), KVQ_ELEASE_EXPIRED);
    assert_int_equal(results[0], KVQ_ELEASE_EXPIRED);
    assert_int_equal(results[1], 0);
    assert_int_equal(results[2], 0);
    kvq_workq_stats m = metrics(&e);
    assert_int_equal(m.inflight, 0);
    assert_int_equal(m.acked, 3);
    assert_int_equal(m.ready, 0);
    dispose_all(outs, 3);
    env_close(&e);
}

/* Nack of a batch: the items are back in their places with one more delivery; with a max of 2
 * deliveries, the next nack sends them to the dead letters, and a receive batch skips nothing
 * that is ready. */
static void test_nack_and_dead_letters(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 2, 0);
    push_n(&e, 0, 5, 0);
    kvq_buf outs[5] = { 0 };
    kvq_workq_lease leases[5];
    size_t got = 0;
    assert_ok(kvq_workq_receive_many(outs, leases, &got, e.w, 5, 0));
    assert_ok(kvq_workq_nack_many(NULL, e.w, leases, 5, 0));
    assert_int_equal(metrics(&e).ready, 5);
    assert_ok(kvq_workq_receive_many(outs, leases, &got, e.w, 5, 0));
    assert_int_equal(got, 5);
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(leases[i].deliveries, 2);
        char want[16];
        int n = snprintf(want, sizeof(want), "v%04zu", i);
        assert_bytes(outs[i].data, outs[i].len, (const uint8_t *)want, (size_t)n);
    }
    /* Nack three with a delay and two at once: max deliveries reached, all five are dead. */
    assert_ok(kvq_workq_nack_many(NULL, e.w, leases, 3, 60000));
    assert_ok(kvq_workq_nack_many(NULL, e.w, leases + 3, 2, 0));
    kvq_workq_stats m = metrics(&e);
    assert_int_equal(m.dead, 5);
    assert_int_equal(m.delayed, 0);
    assert_int_equal(m.inflight, 0);
    assert_int_equal(kvq_workq_receive_many(outs, leases, &got, e.w, 5, 0), KVQ_ENOTFOUND);
    dispose_all(outs, 5);
    env_close(&e);
}

/* A batch reads the delivery counts of its run with one range read, among which a dead letter's
 * count may sit (an item given back at its place behind one that died): each item still gets its
 * own count. */
static void test_counts_around_a_dead_letter(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 2, 0);
    push_n(&e, 0, 5, 0);
    kvq_buf outs[5] = { 0 };
    kvq_workq_lease ls[5], l1;
    size_t n = 0;
    assert_ok(kvq_workq_receive_many(outs, ls, &n, e.w, 3, 0)); /* v0, v1, v2: delivery 1 */
    assert_int_equal(n, 3);
    assert_ok(kvq_workq_nack(e.w, &ls[1], 0));                  /* v1 back, count 1 */
    assert_ok(kvq_workq_receive_many(outs, &l1, &n, e.w, 1, 0)); /* v1 again: delivery 2 */
    assert_bytes(outs[0].data, outs[0].len, (const uint8_t *)"v0001", 5);
    assert_int_equal(l1.deliveries, 2);
    assert_ok(kvq_workq_nack(e.w, &l1, 0)); /* its max: a dead letter, its count kept */
    assert_ok(kvq_workq_nack(e.w, &ls[0], 0));
    assert_ok(kvq_workq_nack(e.w, &ls[2], 0));
    assert_int_equal(metrics(&e).dead, 1);
    /* Ready: v0 (count 1), v2 (count 1), v3, v4; v1's count sits between v0's and v2's. */
    assert_ok(kvq_workq_receive_many(outs, ls, &n, e.w, 5, 0));
    assert_int_equal(n, 4);
    const char *want[] = { "v0000", "v0002", "v0003", "v0004" };
    uint32_t deliv[] = { 2, 2, 1, 1 };
    for (size_t i = 0; i < 4; i++) {
        assert_bytes(outs[i].data, outs[i].len, (const uint8_t *)want[i], 5);
        assert_int_equal(ls[i].deliveries, deliv[i]);
    }
    dispose_all(outs, 5);
    env_close(&e);
}

static void test_bad_input(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 0, 0);
    kvq_buf outs[2] = { 0 };
    kvq_workq_lease leases[2] = { 0 };
    size_t got = 7;
    assert_int_equal(kvq_workq_receive_many(outs, leases, &got, e.w, 0, 0), KVQ_EINVAL);
    assert_int_equal(got, 0);
    assert_int_equal(kvq_workq_receive_many(outs, leases, &got, e.w, 10001, 0), KVQ_EINVAL);
    assert_int_equal(kvq_workq_receive_many(NULL, leases, &got, e.w, 1, 0), KVQ_EINVAL);
    assert_int_equal(kvq_workq_receive_many(outs, leases, NULL, e.w, 1, 0), KVQ_EINVAL);
    assert_int_equal(kvq_workq_receive_many(outs, leases, &got, NULL, 1, 0), KVQ_EINVAL);
    assert_int_equal(kvq_workq_receive_many(outs, leases, &got, e.w, 1, -1), KVQ_EINVAL);
    assert_int_equal(kvq_workq_ack_many(NULL, e.w, NULL, 1), KVQ_EINVAL);
    assert_int_equal(kvq_workq_ack_many(NULL, e.w, leases, 0), KVQ_EINVAL);
    assert_int_equal(kvq_workq_nack_many(NULL, e.w, leases, 1, -5), KVQ_EINVAL);
    assert_int_equal(kvq_workq_ack_many_txn(NULL, e.w, NULL, leases, 1), KVQ_EINVAL);
    /* A lease nobody handed out: expired (unknown), the batch commits nothing. */
    int r[1];
    assert_int_equal(kvq_workq_ack_many(r, e.w, leases, 1), KVQ_ELEASE_EXPIRED);
    assert_int_equal(r[0], KVQ_ELEASE_EXPIRED);
    env_close(&e);
}

/* Injected 1021s whose commit happened: every item is received and acked exactly as asked; a
 * receive batch that committed and is retried strands its items until their leases end (at
 * least once), so the test drains with receives until everything is acked, and counts. */
static void test_unknown_results(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 0, 0.3);
    push_n(&e, 0, 300, 0);
    kvq_buf outs[50] = { 0 };
    kvq_workq_lease leases[50];
    int seen[300] = { 0 };
    int acked_batches = 0;
    for (int round = 0; round < 100000; round++) {
        size_t got = 0;
        int rc = kvq_workq_receive_many(outs, leases, &got, e.w, 50, 1000);
        if (rc == KVQ_ENOTFOUND) {
            kvq_workq_stats m = metrics(&e);
            if (m.inflight == 0 && m.ready == 0)
                break;
            kvq__sleep_us(20000);
            continue;
        }
        assert_ok(rc);
        int results[50];
        rc = kvq_workq_ack_many(results, e.w, leases, got);
        /* On a slow machine a lease may end first: that item comes back, the rest are acked. */
        if (rc != KVQ_ELEASE_EXPIRED)
            assert_ok(rc);
        acked_batches++;
        for (size_t i = 0; i < got; i++) {
            if (results[i] == KVQ_ELEASE_EXPIRED)
                continue;
            assert_int_equal(results[i], 0);
            assert_int_equal(outs[i].len, 5);
            int v = 0;
            for (int d = 1; d < 5; d++)
                v = v * 10 + (outs[i].data[d] - '0');
            assert_true(v >= 0 && v < 300);
            seen[v]++;
        }
    }
    kvq_workq_stats m = metrics(&e);
    assert_int_equal(m.ready, 0);
    assert_int_equal(m.inflight, 0);
    assert_int_equal(m.acked, 300);
    for (int i = 0; i < 300; i++)
        assert_int_equal(seen[i], 1);
    assert_true(acked_batches >= 6);
    dispose_all(outs, 50);
    env_close(&e);
}

/* Lease tokens: a fixed vector (the text `kvq receive` prints for these fields), round trips,
 * and what is refused. */
static void test_tokens(void **state)
{
    (void)state;
    kvq_workq_lease l;
    for (int i = 0; i < 16; i++)
        l.id[i] = (uint8_t)(0xa0 + i);
    l.received = 0x0102030405060708LL;
    l.deadline = 0x1112131415161718LL;
    l.deliveries = 3;
    l.priority = -2;
    char tok[KVQ_WORKQ_TOKEN_LEN + 1];
    size_t toklen;
    assert_ok(kvq_workq_lease_format(tok, sizeof(tok), &toklen, &l));
    assert_int_equal(toklen, KVQ_WORKQ_TOKEN_LEN);
    assert_string_equal(tok, "a0a1a2a3a4a5a6a7a8a9aaabacadaeaf"
                             "0102030405060708" "1112131415161718" "00000003"
                             "fffffffffffffffe");
    kvq_workq_lease back;
    assert_ok(kvq_workq_lease_parse(&back, tok));
    assert_memory_equal(back.id, l.id, 16);
    assert_int_equal(back.received, l.received);
    assert_int_equal(back.deadline, l.deadline);
    assert_int_equal(back.deliveries, 3);
    assert_int_equal(back.priority, -2);
    /* Upper case is read too. */
    char up[KVQ_WORKQ_TOKEN_LEN + 1];
    for (int i = 0; i <= KVQ_WORKQ_TOKEN_LEN; i++)
        up[i] = (char)(tok[i] >= 'a' && tok[i] <= 'f' ? tok[i] - 32 : tok[i]);
    assert_ok(kvq_workq_lease_parse(&back, up));
    assert_int_equal(back.deadline, l.deadline);
    char small[KVQ_WORKQ_TOKEN_LEN];
    /* The caller-buffer form of kvq_tuple_pack: the size needed with KVQ_ENOBUFS, 0 on errors. */
    assert_int_equal(kvq_workq_lease_format(small, sizeof(small), &toklen, &l), KVQ_ENOBUFS);
    assert_int_equal(toklen, KVQ_WORKQ_TOKEN_LEN + 1);
    assert_int_equal(kvq_workq_lease_format(NULL, 0, &toklen, &l), KVQ_ENOBUFS);
    assert_int_equal(toklen, KVQ_WORKQ_TOKEN_LEN + 1);
    assert_int_equal(kvq_workq_lease_format(NULL, 100, &toklen, &l), KVQ_EINVAL);
    assert_int_equal(toklen, 0);
    assert_int_equal(kvq_workq_lease_format(tok, sizeof(tok), &toklen, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_workq_lease_format(tok, sizeof(tok), NULL, &l), KVQ_EINVAL);
    assert_int_equal(kvq_workq_lease_parse(NULL, tok), KVQ_EINVAL);
    assert_int_equal(kvq_workq_lease_parse(&back, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_workq_lease_parse(&back, ""), KVQ_EINVAL);
    assert_int_equal(kvq_workq_lease_parse(&back, "abc"), KVQ_EINVAL);
    char bad[KVQ_WORKQ_TOKEN_LEN + 2];
    memcpy(bad, tok, sizeof(tok));
    bad[40] = 'g';
    assert_int_equal(kvq_workq_lease_parse(&back, bad), KVQ_EINVAL);
    memcpy(bad, tok, KVQ_WORKQ_TOKEN_LEN);
    bad[KVQ_WORKQ_TOKEN_LEN] = '0';
    bad[KVQ_WORKQ_TOKEN_LEN + 1] = '\0';
    assert_int_equal(kvq_workq_lease_parse(&back, bad), KVQ_EINVAL);
    /* A received lease survives the trip and settles its item. */
    env e = env_open(KVQ_QUEUE_DURABLE, 0, 0);
    push_n(&e, 0, 1, 0);
    kvq_buf v = KVQ_BUF_INIT;
    kvq_workq_lease got;
    assert_ok(kvq_workq_receive(&v, &got, e.w, 0));
    assert_ok(kvq_workq_lease_format(tok, sizeof(tok), &toklen, &got));
    assert_ok(kvq_workq_lease_parse(&back, tok));
    assert_ok(kvq_workq_ack(e.w, &back));
    assert_int_equal(metrics(&e).acked, 1);
    kvq_buf_dispose(&v);
    env_close(&e);
}

/* kvq_workq_purge removes every state and counts it as cleared; kvq_workq_ready_due makes a due
 * delayed item ready for a plain pop. */
static void test_purge_and_due(void **state)
{
    (void)state;
    env e = env_open(KVQ_QUEUE_DURABLE, 1, 0);
    push_n(&e, 0, 4, 0);
    kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
    po.delay_ms = 60000;
    assert_ok(kvq_workq_push(NULL, e.w, (const uint8_t *)"later", 5, &po));
    kvq_buf outs[2] = { 0 };
    kvq_workq_lease leases[2];
    size_t n = 0;
    assert_ok(kvq_workq_receive_many(outs, leases, &n, e.w, 2, 0));
    assert_ok(kvq_workq_nack(e.w, &leases[0], 0)); /* max 1 delivery: dead */
    kvq_workq_stats m = metrics(&e);
    assert_int_equal(m.ready + m.inflight + m.delayed + m.dead, 5);
    uint64_t cleared = 0;
    assert_ok(kvq_workq_purge(&cleared, e.w));
    assert_int_equal(cleared, 5);
    m = metrics(&e);
    assert_int_equal(m.ready, 0);
    assert_int_equal(m.inflight, 0);
    assert_int_equal(m.delayed, 0);
    assert_int_equal(m.dead, 0);
    assert_int_equal(m.cleared, 5);
    assert_int_equal(m.cleared_ready, 2);
    assert_int_equal(kvq_workq_ack(e.w, &leases[1]), KVQ_ELEASE_EXPIRED);
    uint64_t len = 9;
    assert_ok(kvq_queue_len(&len, e.q));
    assert_int_equal(len, 0);
    /* A delayed item due: ready for a plain pop once ready_due has run. */
    po.delay_ms = 1;
    assert_ok(kvq_workq_push(NULL, e.w, (const uint8_t *)"soon", 4, &po));
    kvq_buf v = KVQ_BUF_INIT;
    for (int i = 0; i < 2000; i++) {
        uint64_t moved = 0;
        assert_ok(kvq_workq_ready_due(&moved, e.w));
        if (moved > 0)
            break;
        kvq__sleep_us(10000);
    }
    assert_ok(kvq_queue_pop(&v, e.q));
    assert_bytes(v.data, v.len, (const uint8_t *)"soon", 4);
    assert_int_equal(kvq_workq_ready_due(NULL, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_workq_purge(NULL, NULL), KVQ_EINVAL);
    kvq_buf_dispose(&v);
    dispose_all(outs, 2);
    env_close(&e);
}

int main(int argc, char **argv)
{
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_receive_ack_durable),   cmocka_unit_test(test_receive_ack_priority),
        cmocka_unit_test(test_partial_failure),       cmocka_unit_test(test_nack_and_dead_letters),
        cmocka_unit_test(test_bad_input),             cmocka_unit_test(test_unknown_results),
        cmocka_unit_test(test_tokens),                cmocka_unit_test(test_purge_and_due),
        cmocka_unit_test(test_counts_around_a_dead_letter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
