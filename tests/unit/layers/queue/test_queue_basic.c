/* The queue layers one operation at a time: key bytes against hand-derived vectors, every
 * operation of each layer on empty and full queues, the transaction forms, bad arguments, many
 * named queues side by side, iteration in pages, tokens and the idempotency window. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "layers/queue/queue_internal.h"
#include "test_queue_common.h"

static kvq_db *db;

static kvq_queue *open_q(kvq_queue_type t, const kvq_subspace *sub, unsigned int flags)
{
    kvq_queue_options o = KVQ_QUEUE_OPTIONS_INIT;
    o.flags = flags;
    kvq_queue *q = NULL;
    assert_ok(kvq_queue_open(&q, db, t, sub, &o));
    return q;
}

static uint64_t len_of(kvq_queue *q)
{
    uint64_t n = 99999;
    assert_ok(kvq_queue_len(&n, q));
    return n;
}

/* ---- key vectors ------------------------------------------------------------------------ */

static const uint8_t RND[20] = { 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09,
                                 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0xff };

/* The item keys a batch writes (the prefix once, each item's tail after it, by the tuple layer's
 * element writers) are the bytes the generic codec packs, at every integer length and sign and
 * for random bytes full of zeros. */
static void test_item_tails(void **state)
{
    (void)state;
    static const int64_t ints[] = { 0, 1, -1, 255, 256, -255, -256, 0x1234, 65535, 65536,
                                    -65536, INT32_MAX, INT32_MIN, (int64_t)1 << 40,
                                    -((int64_t)1 << 40), INT64_MAX - 1, INT64_MAX, INT64_MIN + 1,
                                    INT64_MIN };
    const size_t n = sizeof(ints) / sizeof(ints[0]);
    uint8_t zeros[20] = { 0 };
    const uint8_t *rands[2] = { RND, zeros };
    kvq_buf tail = KVQ_BUF_INIT;
    for (size_t r = 0; r < 2; r++) {
        for (size_t i = 0; i < n; i++) {
            for (size_t j = 0; j < n; j += 3) {
                uint8_t want[80];
                size_t wn = 0;
                kvq_tuple_elem f[2] = { kvq_tuple_int(ints[i]), kvq_tuple_bytes(rands[r], 20) };
                assert_ok(kvq_tuple_pack(want, sizeof(want), &wn, f, 2));
                tail.len = 0;
                assert_ok(kvq__qk_fifo_item_tail(&tail, ints[i], rands[r]));
                assert_bytes(tail.data, tail.len, want, wn);
                kvq_tuple_elem p[3] = { kvq_tuple_int(ints[i]), kvq_tuple_int(ints[j]),
                                        kvq_tuple_bytes(rands[r], 20) };
                assert_ok(kvq_tuple_pack(want, sizeof(want), &wn, p, 3));
                tail.len = 0;
                assert_ok(kvq__qk_prio_item_tail(&tail, ints[i], ints[j], rands[r]));
                assert_bytes(tail.data, tail.len, want, wn);
            }
        }
    }
    kvq_buf_dispose(&tail);

    /* A durable push key whose user version is rewritten is the key packed with that one. */
    kvq_bytes dprefix = { (const uint8_t *)"\x01q\x00", 3 };
    kvq_buf k = KVQ_BUF_INIT, fresh = KVQ_BUF_INIT;
    assert_ok(kvq__qk_durable_push(&k, dprefix, 0));
    static const uint16_t uvs[] = { 1, 0xff, 0x100, 0x1234, 0xffff, 0 };
    for (size_t i = 0; i < sizeof(uvs) / sizeof(uvs[0]); i++) {
        kvq__qk_durable_push_set_uv(&k, uvs[i]);
        fresh.len = 0;
        assert_ok(kvq__qk_durable_push(&fresh, dprefix, uvs[i]));
        assert_bytes(k.data, k.len, fresh.data, fresh.len);
    }
    kvq_buf_dispose(&k);
    kvq_buf_dispose(&fresh);
}

static void test_key_vectors(void **state)
{
    (void)state;
    kvq_buf k = KVQ_BUF_INIT;
    kvq_bytes fifo = { (const uint8_t *)"\x02Q\x00", 3 };
    /* ("Q", 1, rand): 02 51 00 | 15 01 | 01 <rand, 00 escaped as 00 ff> 00 */
    static const uint8_t fifo1[] = { 0x02, 0x51, 0x00, 0x15, 0x01, 0x01, 0x00, 0xff, 0x01, 0x02,
                                     0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c,
                                     0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0xff, 0x00 };
    assert_ok(kvq__qk_fifo_item(&k, fifo, 1, RND));
    assert_bytes(k.data, k.len, fifo1, sizeof(fifo1));
    /* Index 0x1234 takes two bytes: 16 12 34. */
    k.len = 0;
    assert_ok(kvq__qk_fifo_item(&k, fifo, 0x1234, RND));
    static const uint8_t idx[] = { 0x02, 0x51, 0x00, 0x16, 0x12, 0x34, 0x01 };
    assert_bytes(k.data, 7, idx, sizeof(idx));

    /* ("P", -5, 0, rand): 02 50 00 | 13 fa | 14 | 01 ... 00 */
    kvq_bytes prio = { (const uint8_t *)"\x02P\x00", 3 };
    k.len = 0;
    assert_ok(kvq__qk_prio_item(&k, prio, -5, 0, RND));
    static const uint8_t p1[] = { 0x02, 0x50, 0x00, 0x13, 0xfa, 0x14, 0x01, 0x00, 0xff, 0x01 };
    assert_bytes(k.data, sizeof(p1), p1, sizeof(p1));
    assert_int_equal(k.len, 3 + 2 + 1 + 1 + 21 + 1);
    /* Priority 300, count 7: 16 01 2c | 15 07. Priority -300: 12 fe d3. */
    k.len = 0;
    assert_ok(kvq__qk_prio_item(&k, prio, 300, 7, RND));
    static const uint8_t p2[] = { 0x02, 0x50, 0x00, 0x16, 0x01, 0x2c, 0x15, 0x07, 0x01 };
    assert_bytes(k.data, sizeof(p2), p2, sizeof(p2));
    k.len = 0;
    assert_ok(kvq__qk_prio_item(&k, prio, -300, 0, RND));
    static const uint8_t p3[] = { 0x02, 0x50, 0x00, 0x12, 0xfe, 0xd3, 0x14 };
    assert_bytes(k.data, sizeof(p3), p3, sizeof(p3));
    int64_t pr, cnt;
    assert_ok(kvq__qk_parse_prio(k.data + 3, k.len - 3, &pr, &cnt));
    assert_int_equal(pr, -300);
    assert_int_equal(cnt, 0);
    k.len = 0;
    assert_ok(kvq__qk_prio_item(&k, prio, INT64_MIN, INT64_MAX, RND));
    assert_ok(kvq__qk_parse_prio(k.data + 3, k.len - 3, &pr, &cnt));
    assert_true(pr == INT64_MIN && cnt == INT64_MAX);

    /* Durable: npush, npop and the push key with its placeholder (user version 0). */
    kvq_queue *q = open_q(KVQ_QUEUE_DURABLE, NULL, 0);
    static const uint8_t npush[] = { 0x01, 0x71, 0x00, 0x01, 0x6e, 0x70, 0x75, 0x73, 0x68, 0x00 };
    static const uint8_t npop[] = { 0x01, 0x71, 0x00, 0x01, 0x6e, 0x70, 0x6f, 0x70, 0x00 };
    assert_bytes(q->npush.data, q->npush.len, npush, sizeof(npush));
    assert_bytes(q->npop.data, q->npop.len, npop, sizeof(npop));
    k.len = 0;
    assert_ok(kvq__qk_durable_push(&k, kvq_queue_get_prefix(q), 0));
    static const uint8_t vs[] = { 0x01, 0x71, 0x00, 0x01, 0x76, 0x61, 0x6c, 0x00, 0x33,
                                  0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  0xff, 0x00, 0x00, 0x09, 0x00, 0x00, 0x00 };
    assert_bytes(k.data, k.len, vs, sizeof(vs));
    k.len = 0;
    assert_ok(kvq__qk_durable_push(&k, kvq_queue_get_prefix(q), 0x0102));
    assert_int_equal(k.data[19], 0x01);
    assert_int_equal(k.data[20], 0x02);
    kvq_queue_close(q);

    /* Bookkeeping: prefix + ff + ("m", 5, id). */
    uint8_t id[16];
    memset(id, 0xab, sizeof(id));
    k.len = 0;
    assert_ok(kvq__qk_mark(&k, fifo, "m", 5, id));
    static const uint8_t m[] = { 0x02, 0x51, 0x00, 0xff, 0x02, 0x6d, 0x00, 0x15, 0x05, 0x01, 0xab };
    assert_bytes(k.data, sizeof(m), m, sizeof(m));
    assert_int_equal(k.len, sizeof(m) - 1 + 16 + 1);
    /* Waiter: prefix + ff + ("hc", "pop", 3, rand). */
    k.len = 0;
    assert_ok(kvq__qk_hc_waiter(&k, fifo, 3, RND));
    static const uint8_t w[] = { 0x02, 0x51, 0x00, 0xff, 0x02, 0x68, 0x63, 0x00, 0x02,
                                 0x70, 0x6f, 0x70, 0x00, 0x15, 0x03, 0x01, 0x00, 0xff };
    assert_bytes(k.data, sizeof(w), w, sizeof(w));
    int64_t wi;
    uint8_t wr[20];
    assert_ok(kvq__qk_parse_waiter(k.data + 4, k.len - 4, &wi, wr));
    assert_int_equal(wi, 3);
    assert_memory_equal(wr, RND, 20);
    /* The default subspaces are pack(("Q",)), pack(("P",)) and pack((b"q",)). */
    static const kvq_queue_type ts[3] = { KVQ_QUEUE_FIFO, KVQ_QUEUE_PRIORITY, KVQ_QUEUE_DURABLE };
    kvq_tuple_elem de[3] = { kvq_tuple_str("Q"), kvq_tuple_str("P"), kvq_tuple_bytes("q", 1) };
    for (int i = 0; i < 3; i++) {
        k.len = 0;
        assert_ok(kvq_tuple_pack_buf(&k, &de[i], 1));
        q = open_q(ts[i], NULL, 0);
        kvq_bytes pf = kvq_queue_get_prefix(q);
        assert_bytes(pf.data, pf.len, k.data, k.len);
        kvq_queue_close(q);
    }
    kvq_buf_dispose(&k);
}

/* What a push writes, read back as raw keys: the recipes' and erlfdb's bytes. */
typedef struct raw {
    kvq_buf key, val;
    size_t n;
} raw;

static int read_raw(kvq_txn *txn, void *arg)
{
    raw *r = arg;
    const kvq_kv *kvs;
    size_t got;
    /* Everything but kvq's bookkeeping under the three default prefixes. */
    int rc = kvq_txn_get_range(&kvs, &got, NULL, txn, (const uint8_t *)"\x01q\x00", 3,
                               (const uint8_t *)"\x01q\x00\xff", 4, 0, 0);
    r->n = got;
    for (size_t i = 0; rc == 0 && i < got; i++) {
        if (kvs[i].key.len == 21) {
            rc = kvq__buf_set(&r->key, kvs[i].key.data, kvs[i].key.len);
            if (rc == 0)
                rc = kvq__buf_set(&r->val, kvs[i].value.data, kvs[i].value.len);
        }
    }
    return rc;
}

static int read_fifo_raw(kvq_txn *txn, void *arg)
{
    raw *r = arg;
    const kvq_kv *kvs;
    size_t got;
    int rc = kvq_txn_get_range(&kvs, &got, NULL, txn, (const uint8_t *)"\x02Q\x00\x00", 4,
                               (const uint8_t *)"\x02Q\x00\xff", 4, 0, 0);
    r->n = got;
    if (rc == 0 && got > 0) {
        rc = kvq__buf_set(&r->key, kvs[0].key.data, kvs[0].key.len);
        if (rc == 0)
            rc = kvq__buf_set(&r->val, kvs[0].value.data, kvs[0].value.len);
    }
    return rc;
}

static void test_stored_bytes(void **state)
{
    (void)state;
    kvq_queue *q = open_q(KVQ_QUEUE_DURABLE, NULL, 0);
    tq_push_s(q, "hello");
    raw r = { KVQ_BUF_INIT, KVQ_BUF_INIT, 0 };
    assert_ok(kvq_db_transact(db, read_raw, &r));
    /* npop absent, npush = 01 00.. (8 bytes LE), one item key of 21 bytes (9 + 10-byte stamp +
     * 2-byte user version). */
    assert_int_equal(r.n, 2);
    static const uint8_t head[] = { 0x01, 0x71, 0x00, 0x01, 0x76, 0x61, 0x6c, 0x00, 0x33 };
    assert_bytes(r.key.data, 9, head, sizeof(head));
    assert_int_equal(r.key.data[19], 0); /* user version 0 */
    assert_int_equal(r.key.data[20], 0);
    assert_bytes(r.val.data, r.val.len, (const uint8_t *)"hello", 5);
    tq_pop_expect(q, "hello");
    kvq_queue_close(q);

    q = open_q(KVQ_QUEUE_FIFO, NULL, 0);
    tq_push_s(q, "v1");
    assert_ok(kvq_db_transact(db, read_fifo_raw, &r));
    assert_int_equal(r.n, 1);
    static const uint8_t fh[] = { 0x02, 0x51, 0x00, 0x15, 0x01, 0x01 };
    assert_bytes(r.key.data, 6, fh, sizeof(fh));
    assert_int_equal(r.key.data[r.key.len - 1], 0x00);
    assert_bytes(r.val.data, r.val.len, (const uint8_t *)"v1", 2);
    tq_push_s(q, "v2");
    tq_push_s(q, "v3");
    assert_int_equal(len_of(q), 3);
    assert_ok(kvq_queue_delete(q));
    kvq_queue_close(q);
    kvq_buf_dispose(&r.key);
    kvq_buf_dispose(&r.val);
}

/* ---- FIFO ------------------------------------------------------------------------------- */

static void check_empty(kvq_queue *q)
{
    kvq_buf b = KVQ_BUF_INIT;
    assert_int_equal(kvq_queue_pop(&b, q), KVQ_ENOTFOUND);
    assert_int_equal(kvq_queue_peek(&b, q), KVQ_ENOTFOUND);
    size_t n = 7;
    assert_int_equal(kvq_queue_pop_k(&b, &n, q, 5), KVQ_ENOTFOUND);
    assert_int_equal(len_of(q), 0);
    kvq_buf_dispose(&b);
}

static void fifo_like(kvq_queue *q)
{
    check_empty(q);
    char v[32];
    for (int i = 0; i < 25; i++) {
        snprintf(v, sizeof(v), "item-%02d", i);
        tq_push_s(q, v);
    }
    assert_int_equal(len_of(q), 25);
    kvq_buf b = KVQ_BUF_INIT;
    assert_ok(kvq_queue_peek(&b, q));
    assert_bytes(b.data, b.len, (const uint8_t *)"item-00", 7);
    tq_pop_expect(q, "item-00");
    tq_pop_expect(q, "item-01");
    kvq_buf outs[5] = { KVQ_BUF_INIT, KVQ_BUF_INIT, KVQ_BUF_INIT, KVQ_BUF_INIT, KVQ_BUF_INIT };
    size_t n = 0;
    assert_ok(kvq_queue_pop_k(outs, &n, q, 5));
    assert_int_equal(n, 5);
    for (int i = 0; i < 5; i++) {
        snprintf(v, sizeof(v), "item-%02d", 2 + i);
        assert_bytes(outs[i].data, outs[i].len, (const uint8_t *)v, strlen(v));
    }
    assert_int_equal(len_of(q), 18);
    assert_ok(kvq_queue_clear(q));
    check_empty(q);
    /* An empty value and the largest value go through; one byte more is refused. */
    assert_ok(kvq_queue_push(q, NULL, 0));
    uint8_t *big = calloc(1, KVQ_MAX_VALUE_SIZE + 1);
    assert_non_null(big);
    big[0] = 0x5a;
    assert_ok(kvq_queue_push(q, big, KVQ_MAX_VALUE_SIZE));
    assert_int_equal(kvq_queue_push(q, big, KVQ_MAX_VALUE_SIZE + 1), KVQ_EVALUE_TOO_LARGE);
    assert_non_null(strstr(kvq_last_error(), "100000"));
    tq_pop_expect(q, "");
    assert_ok(kvq_queue_pop(&b, q));
    assert_int_equal(b.len, KVQ_MAX_VALUE_SIZE);
    assert_int_equal(b.data[0], 0x5a);
    check_empty(q);
    free(big);
    /* Fewer than k left: pop_k returns what there is. */
    tq_push_s(q, "a");
    tq_push_s(q, "b");
    assert_ok(kvq_queue_pop_k(outs, &n, q, 5));
    assert_int_equal(n, 2);
    assert_bytes(outs[1].data, outs[1].len, (const uint8_t *)"b", 1);
    for (int i = 0; i < 5; i++)
        kvq_buf_dispose(&outs[i]);
    kvq_buf_dispose(&b);
}

static void test_fifo(void **state)
{
    (void)state;
    kvq_queue *q = open_q(KVQ_QUEUE_FIFO, NULL, 0);
    fifo_like(q);
    kvq_queue_close(q);
    q = open_q(KVQ_QUEUE_FIFO, NULL, KVQ_QUEUE_HIGH_CONTENTION);
    fifo_like(q);
    kvq_queue_close(q);
}

/* ---- priority ------------------------------------------------------------------------------- */

static void prio_like(kvq_queue *q)
{
    check_empty(q);
    kvq_buf b = KVQ_BUF_INIT;
    int64_t p = 42;
    assert_int_equal(kvq_queue_pop_prio(&b, &p, q, KVQ_QUEUE_MIN), KVQ_ENOTFOUND);
    assert_int_equal(kvq_queue_pop_prio(&b, &p, q, KVQ_QUEUE_MAX), KVQ_ENOTFOUND);
    assert_int_equal(kvq_queue_peek_prio(&b, &p, q, KVQ_QUEUE_MAX), KVQ_ENOTFOUND);
    static const int64_t prios[] = { 5, -3, 100, 5, 0, INT64_MIN, INT64_MAX, 5, -3 };
    char v[32];
    for (size_t i = 0; i < sizeof(prios) / sizeof(prios[0]); i++) {
        snprintf(v, sizeof(v), "p%zu", i);
        assert_ok(kvq_queue_push_prio(q, (const uint8_t *)v, strlen(v), prios[i]));
    }
    assert_int_equal(len_of(q), 9);
    assert_ok(kvq_queue_peek_prio(&b, &p, q, KVQ_QUEUE_MIN));
    assert_int_equal(p, INT64_MIN);
    assert_bytes(b.data, b.len, (const uint8_t *)"p5", 2);
    assert_ok(kvq_queue_peek_prio(&b, &p, q, KVQ_QUEUE_MAX));
    assert_int_equal(p, INT64_MAX);
    assert_ok(kvq_queue_pop_prio(&b, &p, q, KVQ_QUEUE_MAX));
    assert_bytes(b.data, b.len, (const uint8_t *)"p6", 2);
    assert_ok(kvq_queue_pop_prio(&b, &p, q, KVQ_QUEUE_MAX));
    assert_int_equal(p, 100);
    /* The max end of priority 5 is its newest item. */
    assert_ok(kvq_queue_pop_prio(&b, &p, q, KVQ_QUEUE_MAX));
    assert_int_equal(p, 5);
    assert_bytes(b.data, b.len, (const uint8_t *)"p7", 2);
    /* Min: INT64_MIN, then -3 in push order, then 0, then 5 in push order. */
    static const char *const order[] = { "p5", "p1", "p8", "p4", "p0", "p3" };
    static const int64_t oprio[] = { INT64_MIN, -3, -3, 0, 5, 5 };
    for (int i = 0; i < 6; i++) {
        assert_ok(kvq_queue_pop_prio(&b, &p, q, KVQ_QUEUE_MIN));
        assert_bytes(b.data, b.len, (const uint8_t *)order[i], strlen(order[i]));
        assert_int_equal(p, oprio[i]);
    }
    check_empty(q);
    /* The generic push puts items at priority 0; the generic pop is pop_min. */
    tq_push_s(q, "zero");
    assert_ok(kvq_queue_push_prio(q, (const uint8_t *)"neg", 3, -1));
    tq_pop_expect(q, "neg");
    assert_ok(kvq_queue_pop_prio(&b, &p, q, KVQ_QUEUE_MIN));
    assert_int_equal(p, 0);
    kvq_buf_dispose(&b);
}

static void test_priority(void **state)
{
    (void)state;
    kvq_queue *q = open_q(KVQ_QUEUE_PRIORITY, NULL, 0);
    prio_like(q);
    kvq_queue_close(q);
    q = open_q(KVQ_QUEUE_PRIORITY, NULL, KVQ_QUEUE_HIGH_CONTENTION);
    prio_like(q);
    kvq_queue_close(q);
    /* Priority-only operations on other types. */
    q = open_q(KVQ_QUEUE_FIFO, NULL, 0);
    kvq_buf b = KVQ_BUF_INIT;
    assert_int_equal(kvq_queue_push_prio(q, (const uint8_t *)"x", 1, 1), KVQ_EWRONGTYPE);
    assert_int_equal(kvq_queue_pop_prio(&b, NULL, q, KVQ_QUEUE_MAX), KVQ_EWRONGTYPE);
    assert_int_equal(kvq_queue_peek_prio(&b, NULL, q, KVQ_QUEUE_MIN), KVQ_EWRONGTYPE);
    kvq_queue_close(q);
}

/* ---- durable -------------------------------------------------------------------------------- */

static int count_cb(kvq_bytes v, int64_t prio, void *payload)
{
    (void)prio;
    int *n = payload;
    char want[32];
    snprintf(want, sizeof(want), "d%03d", *n);
    if (v.len != strlen(want) || memcmp(v.data, want, v.len) != 0)
        return 77;
    (*n)++;
    return *n == 1000 ? 5 : 0;
}

static void test_durable(void **state)
{
    (void)state;
    kvq_queue_options o = KVQ_QUEUE_OPTIONS_INIT;
    o.page_size = 7;
    kvq_queue *q = NULL;
    assert_ok(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, &o));
    check_empty(q);
    kvq_buf b = KVQ_BUF_INIT;
    size_t n;
    kvq_watch *w = NULL;
    kvq_buf outs[10];
    for (int i = 0; i < 10; i++)
        outs[i] = (kvq_buf)KVQ_BUF_INIT;
    /* consume_k on an empty queue: nothing, and a watch that a push fires. */
    assert_ok(kvq_queue_consume_k(outs, &n, &w, q, 3));
    assert_int_equal(n, 0);
    assert_non_null(w);
    assert_int_equal(kvq_watch_wait(w, 0), KVQ_ETIMED_OUT);
    tq_push_s(q, "d000");
    assert_ok(kvq_watch_wait(w, 5000));
    kvq_watch_destroy(w);

    char v[16][16];
    kvq_bytes vals[16];
    for (int i = 0; i < 16; i++) {
        snprintf(v[i], sizeof(v[i]), "d%03d", i + 1);
        vals[i].data = (const uint8_t *)v[i];
        vals[i].len = 4;
    }
    assert_ok(kvq_queue_push_many(q, vals, 16));
    assert_int_equal(len_of(q), 17);
    int seen = 0;
    assert_ok(kvq_queue_iterate(q, count_cb, &seen));
    assert_int_equal(seen, 17);
    assert_ok(kvq_queue_peek(&b, q));
    assert_bytes(b.data, b.len, (const uint8_t *)"d000", 4);
    assert_ok(kvq_queue_pop_k(outs, &n, q, 10));
    assert_int_equal(n, 10);
    assert_bytes(outs[9].data, outs[9].len, (const uint8_t *)"d009", 4);
    assert_int_equal(len_of(q), 7);
    /* consume_k with fewer than k items left: all of them and a watch. */
    assert_ok(kvq_queue_consume_k(outs, &n, &w, q, 10));
    assert_int_equal(n, 7);
    assert_non_null(w);
    assert_bytes(outs[6].data, outs[6].len, (const uint8_t *)"d016", 4);
    assert_int_equal(kvq_watch_wait(w, 0), KVQ_ETIMED_OUT);
    kvq_watch_destroy(w);
    /* k available: no watch. */
    assert_ok(kvq_queue_push_many(q, vals, 3));
    assert_ok(kvq_queue_consume_k(outs, &n, &w, q, 3));
    assert_int_equal(n, 3);
    assert_null(w);
    check_empty(q);
    /* kvq_queue_watch fires on the next push only. */
    assert_ok(kvq_queue_watch(&w, q));
    assert_int_equal(kvq_watch_wait(w, 50), KVQ_ETIMED_OUT);
    tq_push_s(q, "x");
    assert_ok(kvq_watch_wait(w, 5000));
    kvq_watch_destroy(w);
    /* Clear keeps npush − npop equal to the item count. */
    assert_ok(kvq_queue_push_many(q, vals, 5));
    assert_int_equal(len_of(q), 6);
    assert_ok(kvq_queue_clear(q));
    check_empty(q);
    tq_push_s(q, "after");
    assert_int_equal(len_of(q), 1);
    /* Delete removes every key, counters included. */
    assert_ok(kvq_queue_delete(q));
    raw r = { KVQ_BUF_INIT, KVQ_BUF_INIT, 0 };
    assert_ok(kvq_db_transact(db, read_raw, &r));
    assert_int_equal(r.n, 0);
    check_empty(q);
    /* Iteration stops when the callback says so and returns its code; 1,000 items, page 7. */
    for (int i = 0; i < 1000; i += 100) {
        kvq_bytes many[100];
        char mv[100][16];
        for (int j = 0; j < 100; j++) {
            snprintf(mv[j], sizeof(mv[j]), "d%03d", i + j);
            many[j].data = (const uint8_t *)mv[j];
            many[j].len = 4;
        }
        assert_ok(kvq_queue_push_many(q, many, 100));
    }
    seen = 0;
    assert_int_equal(kvq_queue_iterate(q, count_cb, &seen), 5);
    assert_int_equal(seen, 1000);
    assert_int_equal(len_of(q), 1000);
    assert_ok(kvq_queue_delete(q));
    for (int i = 0; i < 10; i++)
        kvq_buf_dispose(&outs[i]);
    kvq_buf_dispose(&b);
    kvq_buf_dispose(&r.key);
    kvq_buf_dispose(&r.val);
    kvq_queue_close(q);
}

/* ---- transaction forms ---------------------------------------------------------------------- */

typedef struct outbox {
    kvq_queue *q;
    const char *v;
    kvq_buf got;
    int rc;
} outbox;

static int push_and_write(kvq_txn *txn, void *arg)
{
    outbox *o = arg;
    int rc = kvq_queue_push_txn(o->q, txn, (const uint8_t *)o->v, strlen(o->v));
    if (rc == 0)
        rc = kvq_txn_set(txn, (const uint8_t *)"app/x", 5, (const uint8_t *)"1", 1);
    return rc;
}

static int pop_and_write(kvq_txn *txn, void *arg)
{
    outbox *o = arg;
    kvq_bytes v;
    o->rc = kvq_queue_pop_txn(&v, o->q, txn);
    if (o->rc != 0)
        return 0; /* commit nothing */
    int rc = kvq__buf_set(&o->got, v.data, v.len);
    if (rc == 0)
        rc = kvq_txn_set(txn, (const uint8_t *)"app/y", 5, v.data, v.len);
    return rc;
}

static int fail_after_push(kvq_txn *txn, void *arg)
{
    int rc = push_and_write(txn, arg);
    return rc == 0 ? KVQ_EUSER : rc;
}

/* Racing consumers of a durable queue spread out (kvq__q_pop_spread): a pop takes k
 * consecutive items of those present, starting within the first spread * k; two pops
 * from one read version that take different items both commit, overlapping ones conflict; a
 * handle under pressure spreads its convenience pops, and goes back to the head once it wins;
 * only a race lost to another pop raises the pressure. */
/* The number of a value "sNNN" (the value is not NUL-terminated). */
static int seq_of(kvq_bytes v)
{
    if (v.len != 4)
        return -1;
    int n = 0;
    for (size_t i = 1; i < 4; i++)
        n = n * 10 + (v.data[i] - '0');
    return n;
}

static void test_durable_spread(void **state)
{
    (void)state;
    kvq_subspace *sub = tq_sub("spread", 6);
    kvq_queue *q = NULL;
    assert_ok(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, sub, NULL));
    int present[400], np = 0;
    char v[8];
    for (int i = 0; i < 400; i++) {
        snprintf(v, sizeof(v), "s%03d", i);
        tq_push_s(q, v);
        present[np++] = i;
    }
    const size_t k = 3;
    kvq_bytes outs[3];
    for (uint64_t seed = 1; seed <= 40; seed++) {
        kvq_txn *t;
        size_t n = 0;
        assert_ok(kvq_txn_create(&t, db));
        assert_ok(kvq__q_pop_spread(q, t, k, 32, seed * 7919, outs, &n, NULL));
        assert_int_equal(n, k);
        int at = -1;
        for (int i = 0; i < np; i++)
            if (present[i] == seq_of(outs[0]))
                at = i;
        /* Within the window, and consecutive among the items present. */
        assert_true(at >= 0 && (size_t)at + k <= 32 * k);
        for (size_t j = 0; j < k; j++)
            assert_int_equal(seq_of(outs[j]), present[at + (int)j]);
        assert_ok(kvq_txn_commit(t));
        kvq_txn_destroy(t);
        memmove(&present[at], &present[at + (int)k], (size_t)(np - at - (int)k) * sizeof(int));
        np -= (int)k;
    }
    uint64_t len = 0;
    assert_ok(kvq_queue_len(&len, q));
    assert_int_equal(len, (uint64_t)np);

    /* Two pops at one read version: disjoint runs both commit, overlapping ones conflict. */
    for (int overlap = 0; overlap < 2; overlap++) {
        kvq_txn *a, *b;
        size_t na = 0, nb = 0;
        assert_ok(kvq_txn_create(&a, db));
        assert_ok(kvq_txn_create(&b, db));
        /* Both read before either commits: concurrent. Seeds 0 and 1 take runs at positions 0
         * and 1 (overlapping); 0 and 10, disjoint ones. */
        assert_ok(kvq__q_pop_spread(q, a, k, 32, 0, outs, &na, NULL));
        int first_a = seq_of(outs[0]);
        assert_ok(kvq__q_pop_spread(q, b, k, 32, overlap ? 1 : 10, outs, &nb, NULL));
        assert_true(na == k && nb == k && seq_of(outs[0]) > first_a);
        assert_ok(kvq_txn_commit(a));
        assert_int_equal(kvq_txn_commit(b), overlap ? KVQ_ENOT_COMMITTED : 0);
        kvq_txn_destroy(a);
        kvq_txn_destroy(b);
    }

    /* A handle under pressure spreads its pops; each win lowers the pressure, back to the head. */
    __atomic_store_n(&q->pop_pressure, 4, __ATOMIC_RELAXED);
    kvq_buf got = KVQ_BUF_INIT;
    for (int i = 0; i < 4; i++)
        assert_ok(kvq_queue_pop(&got, q));
    assert_int_equal(__atomic_load_n(&q->pop_pressure, __ATOMIC_RELAXED), 0);
    kvq_txn *t;
    const kvq_kv *kvs;
    size_t nkv;
    assert_ok(kvq_txn_create(&t, db));
    assert_ok(kvq__q_head(q, t, KVQ__END_MIN, 1, KVQ_SNAPSHOT, &kvs, &nkv));
    assert_int_equal(nkv, 1);
    int head = seq_of(kvs[0].value);
    kvq_txn_destroy(t);
    assert_ok(kvq_queue_pop(&got, q));
    assert_int_equal(seq_of((kvq_bytes){ got.data, got.len }), head);
    kvq_buf_dispose(&got);

    /* Only a race lost to another pop raises the pressure: a pop that conflicted while its items
     * are still there (a push, the pruning, an injected fault) leaves it at 0; one whose items
     * another pop took raises it. */
    for (int other_pop = 0; other_pop < 2; other_pop++) {
        kvq_txn *a, *b;
        size_t na = 0, nb = 0;
        kvq_bytes oa[2], ob[2];
        kvq__q_taken taken = { KVQ_BUF_INIT, KVQ_BUF_INIT, 0 };
        assert_ok(kvq_txn_create(&a, db));
        assert_ok(kvq_txn_create(&b, db));
        assert_ok(kvq__q_pop_k_end_ex(q, a, KVQ__END_MIN, 2, oa, NULL, &na, 0, &taken));
        assert_int_equal(na, 2);
        assert_int_equal(taken.n, 2);
        if (other_pop)
            assert_ok(kvq__q_pop_k_end_ex(q, b, KVQ__END_MIN, 1, ob, NULL, &nb, 0, NULL));
        else /* a write that a's read conflicts with, which takes no item: its own conflict */
            assert_ok(kvq_txn_add_conflict_range(b, taken.lo.data, taken.lo.len, taken.hi.data,
                                                 taken.hi.len, KVQ_CONFLICT_WRITE));
        assert_ok(kvq_txn_set(b, (const uint8_t *)"zz", 2, (const uint8_t *)"", 0));
        assert_ok(kvq_txn_commit(b));
        assert_int_equal(kvq_txn_commit(a), KVQ_ENOT_COMMITTED);
        kvq_txn_destroy(a);
        kvq_txn_destroy(b);
        assert_ok(kvq_txn_create(&a, db));
        int lost = -1;
        assert_int_equal(__atomic_load_n(&q->pop_pressure, __ATOMIC_RELAXED), 0);
        assert_ok(kvq__q_pop_lost_race(q, a, &taken, &lost));
        assert_int_equal(lost, other_pop);
        assert_int_equal(__atomic_load_n(&q->pop_pressure, __ATOMIC_RELAXED), other_pop ? 24 : 0);
        kvq_txn_destroy(a);
        kvq_buf_dispose(&taken.lo);
        kvq_buf_dispose(&taken.hi);
        __atomic_store_n(&q->pop_pressure, 0, __ATOMIC_RELAXED);
    }
    kvq_txn *t2;
    assert_ok(kvq_txn_create(&t2, db));
    assert_ok(kvq_txn_clear(t2, (const uint8_t *)"zz", 2));
    assert_ok(kvq_txn_commit(t2));
    kvq_txn_destroy(t2);
    assert_ok(kvq_queue_clear(q));
    kvq_queue_close(q);
    kvq_subspace_destroy(sub);
}

/* Named queues: the registry `kvq create` writes, through the library. */
static int count_named(const char *name, const kvq_queue_settings *st, void *arg)
{
    (void)st;
    if (strncmp(name, "named-", 6) == 0)
        (*(int *)arg)++;
    return 0;
}

static void test_named(void **state)
{
    (void)state;
    kvq_queue_settings st = { KVQ_QUEUE_SETTINGS_VERSION, KVQ_QUEUE_DURABLE, 1500, 2, 0 }, got;
    assert_ok(kvq_queue_create_named(db, "named-jobs", &st));
    assert_int_equal(kvq_queue_create_named(db, "named-jobs", &st), KVQ_EEXISTS);
    kvq_queue_settings fifo = { KVQ_QUEUE_SETTINGS_VERSION, KVQ_QUEUE_FIFO, 0, 0, 0 };
    assert_int_equal(kvq_queue_create_named(db, "named-jobs", &fifo), KVQ_EWRONGTYPE);
    assert_ok(kvq_queue_create_named(db, "named-f", &fifo));
    kvq_queue_settings bad = { KVQ_QUEUE_SETTINGS_VERSION, KVQ_QUEUE_FIFO, 10, 0, 0 };
    assert_int_equal(kvq_queue_create_named(db, "named-x", &bad), KVQ_EINVAL);
    assert_int_equal(kvq_queue_create_named(db, "", &st), KVQ_EINVAL);
    assert_int_equal(kvq_queue_create_named(db, "bad\nname", &st), KVQ_EINVAL);
    assert_int_equal(kvq_queue_get_named(&got, db, "named-none"), KVQ_ENOTFOUND);

    /* Opened by name: its type, the subspace (b"named-jobs",), and the stored lease. */
    kvq_queue *q = NULL;
    assert_ok(kvq_queue_open_named(&q, &got, db, "named-jobs"));
    assert_int_equal(got.type, KVQ_QUEUE_DURABLE);
    assert_int_equal(got.lease_ms, 1500);
    assert_int_equal(got.max_deliveries, 2);
    assert_int_equal(kvq_queue_get_type(q), KVQ_QUEUE_DURABLE);
    kvq_bytes pre = kvq_queue_get_prefix(q);
    static const uint8_t want[] = { 0x01, 'n', 'a', 'm', 'e', 'd', '-', 'j', 'o', 'b', 's', 0x00 };
    assert_bytes(pre.data, pre.len, want, sizeof(want));
    tq_push_s(q, "w1");
    kvq_workq *w = NULL;
    assert_ok(kvq_workq_open(&w, q, NULL));
    kvq_buf v = KVQ_BUF_INIT;
    kvq_workq_lease l;
    assert_ok(kvq_workq_receive(&v, &l, w, 0));
    int64_t span = l.deadline - l.received;
    assert_true(span >= 1400000 && span <= 1600000);
    /* Two deliveries, then the dead letters. */
    assert_ok(kvq_workq_nack(w, &l, 0));
    assert_ok(kvq_workq_receive(&v, &l, w, 0));
    assert_int_equal(l.deliveries, 2);
    assert_ok(kvq_workq_nack(w, &l, 0));
    assert_int_equal(kvq_workq_receive(&v, &l, w, 0), KVQ_ENOTFOUND);
    kvq_workq_close(w);
    kvq_buf_dispose(&v);
    kvq_queue_close(q);

    /* alter, list, forget. */
    assert_ok(kvq_queue_alter_named(&got, db, "named-jobs", 2000, -1));
    assert_int_equal(got.lease_ms, 2000);
    assert_int_equal(got.max_deliveries, 2);
    assert_int_equal(kvq_queue_alter_named(NULL, db, "named-f", 2000, -1), KVQ_EWRONGTYPE);
    assert_int_equal(kvq_queue_alter_named(NULL, db, "named-none", 2000, -1), KVQ_ENOTFOUND);
    assert_int_equal(kvq_queue_alter_named(NULL, db, "named-jobs", 0, -1), KVQ_EINVAL);
    int n = 0;
    assert_ok(kvq_queue_list_named(db, count_named, &n));
    assert_int_equal(n, 2);
    assert_ok(kvq_queue_open_named(&q, NULL, db, "named-f"));
    assert_int_equal(kvq_queue_get_type(q), KVQ_QUEUE_FIFO);
    assert_int_equal(kvq_workq_open(&w, q, NULL), KVQ_EWRONGTYPE);
    kvq_queue_close(q);
    assert_ok(kvq_queue_forget_named(db, "named-f"));
    assert_int_equal(kvq_queue_open_named(&q, NULL, db, "named-f"), KVQ_ENOTFOUND);
    assert_null(q);
    assert_int_equal(kvq_queue_open_named(NULL, NULL, db, "named-jobs"), KVQ_EINVAL);
}

static void test_txn_forms(void **state)
{
    (void)state;
    for (int t = KVQ_QUEUE_FIFO; t <= KVQ_QUEUE_DURABLE; t++) {
        kvq_queue *q = open_q((kvq_queue_type)t, NULL, 0);
        outbox o = { q, "tx-item", KVQ_BUF_INIT, 0 };
        /* A body that fails commits nothing: no item. */
        assert_int_equal(kvq_db_transact(db, fail_after_push, &o), KVQ_EUSER);
        assert_int_equal(len_of(q), 0);
        assert_ok(kvq_db_transact(db, push_and_write, &o));
        assert_int_equal(len_of(q), 1);
        assert_ok(kvq_db_transact(db, pop_and_write, &o));
        assert_ok(o.rc);
        assert_bytes(o.got.data, o.got.len, (const uint8_t *)"tx-item", 7);
        assert_ok(kvq_db_transact(db, pop_and_write, &o));
        assert_int_equal(o.rc, KVQ_ENOTFOUND);
        kvq_buf_dispose(&o.got);
        assert_ok(kvq_queue_delete(q));
        kvq_queue_close(q);
    }
}

/* ---- bad arguments -------------------------------------------------------------------------- */

static void test_bad_args(void **state)
{
    (void)state;
    kvq_queue *q = NULL;
    kvq_buf b = KVQ_BUF_INIT;
    kvq_bytes v;
    size_t n;
    uint64_t len;
    kvq_queue_options o = KVQ_QUEUE_OPTIONS_INIT;
    assert_int_equal(kvq_queue_open(NULL, db, KVQ_QUEUE_FIFO, NULL, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_queue_open(&q, NULL, KVQ_QUEUE_FIFO, NULL, NULL), KVQ_EINVAL);
    assert_null(q);
    assert_int_equal(kvq_queue_open(&q, db, (kvq_queue_type)9, NULL, NULL), KVQ_EINVAL);
    o.flags = KVQ_QUEUE_HIGH_CONTENTION;
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, &o), KVQ_EINVAL);
    o.flags = 0x80;
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_FIFO, NULL, &o), KVQ_EINVAL);
    o = (kvq_queue_options)KVQ_QUEUE_OPTIONS_INIT;
    o.version = 77;
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_FIFO, NULL, &o), KVQ_EINVAL);
    o = (kvq_queue_options)KVQ_QUEUE_OPTIONS_INIT;
    o.page_size = 0;
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_FIFO, NULL, &o), KVQ_EINVAL);
    o = (kvq_queue_options)KVQ_QUEUE_OPTIONS_INIT;
    o.staging_timeout_ms = 0;
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_FIFO, NULL, &o), KVQ_EINVAL);
    o = (kvq_queue_options)KVQ_QUEUE_OPTIONS_INIT;
    o.idempotency_window_min = 1;
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_FIFO, NULL, &o), KVQ_EINVAL);
    kvq_subspace *s = tq_sub("", 0);
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_FIFO, s, NULL), KVQ_EINVAL);
    kvq_subspace_destroy(s);
    s = tq_sub("\xff", 1);
    assert_int_equal(kvq_queue_open(&q, db, KVQ_QUEUE_FIFO, s, NULL), KVQ_EINVAL);
    kvq_subspace_destroy(s);

    /* NULL handles and outputs. */
    assert_int_equal(kvq_queue_push(NULL, (const uint8_t *)"x", 1), KVQ_EINVAL);
    assert_int_equal(kvq_queue_pop(&b, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_queue_peek(&b, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_queue_len(&len, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_queue_clear(NULL), KVQ_EINVAL);
    assert_int_equal(kvq_queue_delete(NULL), KVQ_EINVAL);
    assert_int_equal(kvq_queue_iterate(NULL, count_cb, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_queue_recover(NULL, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_queue_push_txn(NULL, NULL, NULL, 0), KVQ_EINVAL);
    assert_int_equal(kvq_queue_pop_txn(&v, NULL, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_queue_get_type(NULL), 0);
    assert_null(kvq_queue_get_prefix(NULL).data);
    kvq_queue_close(NULL);

    q = open_q(KVQ_QUEUE_DURABLE, NULL, 0);
    assert_int_equal(kvq_queue_pop(NULL, q), KVQ_EINVAL);
    assert_int_equal(kvq_queue_peek(NULL, q), KVQ_EINVAL);
    assert_int_equal(kvq_queue_len(NULL, q), KVQ_EINVAL);
    assert_int_equal(kvq_queue_push(q, NULL, 3), KVQ_EINVAL);
    assert_int_equal(kvq_queue_pop_k(&b, &n, q, 0), KVQ_EINVAL);
    assert_int_equal(kvq_queue_pop_k(&b, &n, q, 10001), KVQ_EINVAL);
    assert_int_equal(kvq_queue_pop_k(NULL, &n, q, 1), KVQ_EINVAL);
    assert_int_equal(kvq_queue_push_many(q, NULL, 1), KVQ_EINVAL);
    kvq_bytes one = { (const uint8_t *)"a", 1 };
    assert_int_equal(kvq_queue_push_many(q, &one, 0), KVQ_EINVAL);
    kvq_bytes bad = { NULL, 5 };
    kvq_bytes two[2] = { one, bad };
    assert_int_equal(kvq_queue_push_many(q, two, 2), KVQ_EINVAL);
    assert_int_equal(len_of(q), 0);
    assert_int_equal(kvq_queue_consume_k(&b, &n, NULL, q, 1), KVQ_EINVAL);
    assert_int_equal(kvq_queue_watch(NULL, q), KVQ_EINVAL);
    assert_int_equal(kvq_queue_iterate(q, NULL, NULL), KVQ_EINVAL);
    assert_int_equal(kvq_queue_recover(NULL, q), KVQ_EWRONGTYPE);
    kvq_consumer_source src;
    assert_int_equal(kvq_queue_consumer_source(NULL, q), KVQ_EINVAL);
    assert_ok(kvq_queue_consumer_source(&src, q));
    assert_int_equal(src.wake_key.len, q->npush.len);
    kvq_queue_close(q);

    q = open_q(KVQ_QUEUE_FIFO, NULL, 0);
    kvq_watch *w = (kvq_watch *)&b;
    /* FIFO and priority queues have a push counter of kvq's own to watch (test_queue_wake). */
    assert_int_equal(kvq_queue_consume_k(&b, &n, NULL, q, 1), KVQ_EINVAL);
    assert_int_equal(kvq_queue_consume_k(&b, &n, &w, q, 0), KVQ_EINVAL);
    assert_int_equal(kvq_queue_watch(NULL, q), KVQ_EINVAL);
    assert_int_equal(kvq_queue_consumer_source(&src, q), KVQ_EWRONGTYPE);
    kvq_queue_token tok;
    bool already;
    assert_int_equal(kvq_queue_token_init(NULL), KVQ_EINVAL);
    assert_ok(kvq_queue_token_init(&tok));
    assert_int_equal(kvq_queue_token_apply_txn(&already, q, NULL, &tok), KVQ_EINVAL);
    kvq_queue_stats st;
    assert_int_equal(kvq_queue_get_stats(NULL, q), KVQ_EINVAL);
    assert_ok(kvq_queue_get_stats(&st, q));
    kvq_queue_close(q);
}

/* ---- many queues side by side ---------------------------------------------------------------- */

static void test_side_by_side(void **state)
{
    (void)state;
    /* ("Q",), ("Q", "a") nested inside it, ("R",), (b"q",), (b"q2",), ("P",), ("P", "x").
     * (A subspace nested under an integer element, such as ("P", 1), would share the keys of
     * the outer queue's items: that is the recipes' layout, documented in docs/queues.md.) */
    kvq_subspace *s[7];
    kvq_queue *q[7];
    kvq_tuple_elem a = kvq_tuple_str("a"), x = kvq_tuple_str("x");
    s[0] = tq_sub_tuple(kvq_tuple_str("Q"), NULL);
    s[1] = tq_sub_tuple(kvq_tuple_str("Q"), &a);
    s[2] = tq_sub_tuple(kvq_tuple_str("R"), NULL);
    s[3] = tq_sub_tuple(kvq_tuple_bytes("q", 1), NULL);
    s[4] = tq_sub_tuple(kvq_tuple_bytes("q2", 2), NULL);
    s[5] = tq_sub_tuple(kvq_tuple_str("P"), NULL);
    s[6] = tq_sub_tuple(kvq_tuple_str("P"), &x);
    static const kvq_queue_type types[7] = { KVQ_QUEUE_FIFO,    KVQ_QUEUE_FIFO,
                                             KVQ_QUEUE_FIFO,    KVQ_QUEUE_DURABLE,
                                             KVQ_QUEUE_DURABLE, KVQ_QUEUE_PRIORITY,
                                             KVQ_QUEUE_PRIORITY };
    for (int i = 0; i < 7; i++)
        q[i] = open_q(types[i], s[i], i % 2 ? KVQ_QUEUE_HIGH_CONTENTION * (types[i] != 3) : 0);
    char v[32];
    for (int r = 0; r < 5; r++)
        for (int i = 0; i < 7; i++) {
            snprintf(v, sizeof(v), "q%d-%d", i, r);
            tq_push_s(q[i], v);
        }
    for (int i = 0; i < 7; i++)
        assert_int_equal(len_of(q[i]), 5);
    /* Interleaved pops: each queue gives back exactly its own items, in order. */
    for (int r = 0; r < 5; r++)
        for (int i = 6; i >= 0; i--) {
            snprintf(v, sizeof(v), "q%d-%d", i, r);
            tq_pop_expect(q[i], v);
        }
    for (int i = 0; i < 7; i++)
        check_empty(q[i]);
    /* Deleting ("R",) and (b"q",) leaves the others; deleting ("Q",) also removes the queue
     * nested in it (documented). */
    for (int i = 0; i < 7; i++)
        tq_push_s(q[i], "again");
    assert_ok(kvq_queue_delete(q[2]));
    assert_ok(kvq_queue_delete(q[3]));
    assert_int_equal(len_of(q[2]), 0);
    assert_int_equal(len_of(q[3]), 0);
    assert_int_equal(len_of(q[4]), 1);
    assert_int_equal(len_of(q[0]), 1);
    assert_int_equal(len_of(q[1]), 1);
    assert_ok(kvq_queue_clear(q[0]));
    assert_int_equal(len_of(q[1]), 1); /* clear of ("Q",) keeps ("Q","a") */
    assert_ok(kvq_queue_delete(q[0]));
    assert_int_equal(len_of(q[1]), 0);
    for (int i = 0; i < 7; i++) {
        assert_ok(kvq_queue_delete(q[i]));
        kvq_queue_close(q[i]);
        kvq_subspace_destroy(s[i]);
    }
}

/* ---- iteration with pages ----------------------------------------------------------------------
 */

typedef struct it {
    int fifo;
    int n;
    int64_t last_prio;
    int ordered;
} it;

static int it_cb(kvq_bytes v, int64_t prio, void *payload)
{
    it *s = payload;
    char want[16];
    snprintf(want, sizeof(want), "%d", s->n);
    if (s->n > 0 && prio < s->last_prio)
        s->ordered = 0;
    s->last_prio = prio;
    if (s->fifo && (v.len != strlen(want) || memcmp(v.data, want, v.len) != 0))
        s->ordered = 0;
    s->n++;
    return 0;
}

static void test_iterate(void **state)
{
    (void)state;
    kvq_queue_options o = KVQ_QUEUE_OPTIONS_INIT;
    o.page_size = 3;
    kvq_queue *f = NULL, *p = NULL;
    assert_ok(kvq_queue_open(&f, db, KVQ_QUEUE_FIFO, NULL, &o));
    assert_ok(kvq_queue_open(&p, db, KVQ_QUEUE_PRIORITY, NULL, &o));
    char v[16];
    for (int i = 0; i < 10; i++) {
        snprintf(v, sizeof(v), "%d", i);
        tq_push_s(f, v);
        assert_ok(kvq_queue_push_prio(p, (const uint8_t *)v, strlen(v), (i * 7) % 5 - 2));
    }
    assert_int_equal(len_of(f), 10);
    assert_int_equal(len_of(p), 10);
    it s = { 1, 0, 0, 1 };
    assert_ok(kvq_queue_iterate(f, it_cb, &s));
    assert_int_equal(s.n, 10);
    assert_true(s.ordered);
    s = (it){ 0, 0, 0, 1 };
    assert_ok(kvq_queue_iterate(p, it_cb, &s));
    assert_int_equal(s.n, 10);
    assert_true(s.ordered);
    /* The transaction forms. */
    kvq_txn *txn;
    assert_ok(kvq_txn_create(&txn, db));
    s = (it){ 1, 0, 0, 1 };
    assert_ok(kvq_queue_iterate_txn(f, txn, it_cb, &s));
    assert_int_equal(s.n, 10);
    uint64_t n = 0;
    assert_ok(kvq_queue_len_txn(&n, p, txn, KVQ_SNAPSHOT));
    assert_int_equal(n, 10);
    kvq_bytes b;
    int64_t pr;
    assert_ok(kvq_queue_peek_prio_txn(&b, &pr, p, txn, KVQ_QUEUE_MAX, 0));
    assert_int_equal(pr, 2);
    assert_int_equal(kvq_queue_peek_txn(&b, p, txn, 0x10), KVQ_EINVAL);
    kvq_txn_destroy(txn);
    assert_ok(kvq_queue_delete(f));
    assert_ok(kvq_queue_delete(p));
    kvq_queue_close(f);
    kvq_queue_close(p);
}

/* ---- tokens, pruning and the window
 * --------------------------------------------------------------- */

typedef struct tok_arg {
    kvq_queue *q;
    kvq_queue_token *tok;
    bool already;
} tok_arg;

static int tok_body(kvq_txn *txn, void *arg)
{
    tok_arg *a = arg;
    int rc = kvq_queue_token_apply_txn(&a->already, a->q, txn, a->tok);
    if (rc == 0 && !a->already)
        rc = kvq_queue_push_txn(a->q, txn, (const uint8_t *)"t", 1);
    return rc;
}

static int count_marks(kvq_txn *txn, void *arg)
{
    size_t *n = arg;
    const kvq_kv *kvs;
    /* The push markers: prefix ff ("m", ...). */
    return kvq_txn_get_range(&kvs, n, NULL, txn, (const uint8_t *)"\x02Q\x00\xff\x02m\x00", 7,
                             (const uint8_t *)"\x02Q\x00\xff\x02m\x01", 7, 0, 0);
}

static void test_tokens_and_window(void **state)
{
    (void)state;
    kvq_queue *q = open_q(KVQ_QUEUE_FIFO, NULL, 0);
    kvq_queue_token tok;
    assert_ok(kvq_queue_token_init(&tok));
    tok_arg a = { q, &tok, 0 };
    assert_ok(kvq_db_transact(db, tok_body, &a));
    assert_int_equal(a.already, 0);
    assert_ok(kvq_db_transact(db, tok_body, &a));
    assert_int_equal(a.already, 1);
    assert_int_equal(len_of(q), 1);
    /* Buckets of 2 ms: the token is soon older than the window, and markers get pruned. Read
     * versions advance with time, as FoundationDB's do, so a sleep alone moves them on. */
    q->bucket_versions = 2000;
    kvq__sleep_us(20000);
    tq_push_s(q, "tick"); /* reads a version 10 buckets on: prunes the token's marker */
    assert_int_equal(kvq_db_transact(db, tok_body, &a), KVQ_ETIMED_OUT);
    size_t before = 0, after = 0;
    for (int i = 0; i < 20; i++)
        tq_push_s(q, "m");
    assert_ok(kvq_db_transact(db, count_marks, &before));
    kvq__sleep_us(20000);
    tq_push_s(q, "m"); /* reads a version 10 buckets on: prunes the older buckets, with every
                     * earlier marker, and leaves its own */
    assert_ok(kvq_db_transact(db, count_marks, &after));
    assert_true(before >= 1);
    assert_int_equal(after, 1);
    assert_ok(kvq_queue_delete(q));
    kvq_queue_close(q);
}

int main(int argc, char **argv)
{
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_vectors), cmocka_unit_test(test_item_tails),
        cmocka_unit_test(test_stored_bytes),
        cmocka_unit_test(test_fifo),        cmocka_unit_test(test_priority),
        cmocka_unit_test(test_durable),     cmocka_unit_test(test_durable_spread),
        cmocka_unit_test(test_named),       cmocka_unit_test(test_txn_forms),
        cmocka_unit_test(test_bad_args),    cmocka_unit_test(test_side_by_side),
        cmocka_unit_test(test_iterate),     cmocka_unit_test(test_tokens_and_window),
    };
    tq_group(&db);
    return cmocka_run_group_tests(tests, tq_db_setup, tq_db_teardown);
}
