/* Named queues next to the application's own data: a FIFO queue named "app" lives in the
 * subspace ("app",), where the application may keep ("app", "orders", 17). kvq_queue_create_named
 * refuses a subspace that holds keys (unless KVQ_QUEUE_ADOPT names a queue another program wrote
 * there), and kvq_queue_delete_named clears only the queue's own keys. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_queue_common.h"

typedef struct app_key {
    uint8_t b[64];
    size_t n;
} app_key;

/* ("app", "orders", 17), or (b"app", "orders", 17) for a durable queue's subspace. */
static app_key app_order(int bytes)
{
    kvq_tuple_elem e[3] = { bytes ? kvq_tuple_bytes("app", 3) : kvq_tuple_str("app"),
                            kvq_tuple_str("orders"), kvq_tuple_int(17) };
    app_key k;
    assert_ok(kvq_tuple_pack(k.b, sizeof(k.b), &k.n, e, 3));
    return k;
}

static int put_fn(kvq_txn *txn, void *arg)
{
    app_key *k = arg;
    return kvq_txn_set(txn, k->b, k->n, (const uint8_t *)"mine", 4);
}

typedef struct get_arg {
    app_key *k;
    int present;
} get_arg;

static int get_fn(kvq_txn *txn, void *arg)
{
    get_arg *g = arg;
    kvq_bytes v;
    return kvq_txn_get(&v, &g->present, txn, g->k->b, g->k->n, 0);
}

static int app_key_present(kvq_db *db, app_key *k)
{
    get_arg g = { k, 0 };
    assert_ok(kvq_db_transact(db, get_fn, &g));
    return g.present;
}

static void safety_case(kvq_queue_type type)
{
    tq_mkdir();
    kvq_db *db = tq_open_db(0, 0, 0);
    app_key k = app_order(type == KVQ_QUEUE_DURABLE);
    assert_ok(kvq_db_transact(db, put_fn, &k));
    kvq_queue_settings s = KVQ_QUEUE_SETTINGS_INIT;
    s.type = type;
    if (type == KVQ_QUEUE_FIFO)
        s.max_deliveries = 0;
    /* The subspace holds the application's key: refused, nothing recorded. */
    assert_int_equal(kvq_queue_create_named(db, "app", &s), KVQ_EWRONGTYPE);
    kvq_queue_settings got;
    assert_int_equal(kvq_queue_get_named(&got, db, "app"), KVQ_ENOTFOUND);
    /* Adopted on purpose: the queue works beside the key. */
    s.flags = KVQ_QUEUE_ADOPT;
    assert_ok(kvq_queue_create_named(db, "app", &s));
    assert_ok(kvq_queue_get_named(&got, db, "app"));
    assert_int_equal(got.flags, 0);
    assert_int_equal(got.version, KVQ_QUEUE_SETTINGS_VERSION);
    kvq_queue *q = NULL;
    assert_ok(kvq_queue_open_named(&q, NULL, db, "app"));
    if (type == KVQ_QUEUE_PRIORITY)
        assert_ok(kvq_queue_push_prio(q, (const uint8_t *)"job", 3, -4));
    else
        assert_ok(kvq_queue_push(q, (const uint8_t *)"job", 3));
    assert_ok(kvq_queue_push(q, (const uint8_t *)"job2", 4));
    if (type != KVQ_QUEUE_FIFO) {
        /* Bookkeeping too: a lease in flight. */
        kvq_workq *w = NULL;
        assert_ok(kvq_workq_open(&w, q, NULL));
        kvq_buf v = KVQ_BUF_INIT;
        kvq_workq_lease l;
        assert_ok(kvq_workq_receive(&v, &l, w, 0));
        kvq_buf_dispose(&v);
        kvq_workq_close(w);
    }
    kvq_queue_close(q);
    /* Delete: the queue's keys and name go, the application's key stays. */
    assert_ok(kvq_queue_delete_named(db, "app"));
    assert_true(app_key_present(db, &k));
    assert_int_equal(kvq_queue_get_named(&got, db, "app"), KVQ_ENOTFOUND);
    assert_int_equal(kvq_queue_delete_named(db, "app"), KVQ_ENOTFOUND);
    /* Nothing of the queue is left: a plain queue on the same subspace is empty. */
    kvq_tuple_elem e = type == KVQ_QUEUE_DURABLE ? kvq_tuple_bytes("app", 3) : kvq_tuple_str("app");
    kvq_subspace *sub = NULL;
    assert_ok(kvq_subspace_new(&sub, NULL, 0, &e, 1));
    assert_ok(kvq_queue_open(&q, db, type, sub, NULL));
    kvq_subspace_destroy(sub);
    uint64_t len = 9;
    assert_ok(kvq_queue_len(&len, q));
    assert_int_equal(len, 0);
    kvq_queue_close(q);
    /* A fresh subspace is never refused, and a bad flag is. */
    s.flags = 0;
    assert_ok(kvq_queue_create_named(db, "fresh", &s));
    s.flags = 0x80;
    assert_int_equal(kvq_queue_create_named(db, "fresh2", &s), KVQ_EINVAL);
    s.flags = 0;
    s.version = 0;
    assert_int_equal(kvq_queue_create_named(db, "fresh3", &s), KVQ_EINVAL);
    assert_int_equal(kvq_queue_delete_named(NULL, "fresh"), KVQ_EINVAL);
    kvq_db_close(db);
    tq_rmdir();
}

static void test_fifo(void **state)
{
    (void)state;
    safety_case(KVQ_QUEUE_FIFO);
}

static void test_priority(void **state)
{
    (void)state;
    safety_case(KVQ_QUEUE_PRIORITY);
}

static void test_durable(void **state)
{
    (void)state;
    safety_case(KVQ_QUEUE_DURABLE);
}

int main(int argc, char **argv)
{
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo),
        cmocka_unit_test(test_priority),
        cmocka_unit_test(test_durable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
