/* The log store's reads at older versions of the window while the items a queue popped are
 * still rows of its table: a head read at the newest version steps over them once per table
 * version (store_log_apply.c, ls_skip) and later cursors start past them, which must never hide
 * them from a read at an older version, before or after the applier takes the pops into the
 * table (docs/logstore.md, "Growth"). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/embedded/emb.h"
#include "engine/embedded/logstore/store_log.h"
#include "engine/engine.h"
#include "kvq/kvq.h"
#include "util/util.h"
#include "test_log_util.h"
#include "test_scale.h"

enum { ITEMS = 100 };

static char base[128];

static kvq_db *open_db(const char *url)
{
    kvq_db *db = NULL;
    int rc = kvq_db_open(&db, url, NULL);
    if (rc != 0)
        fprintf(stderr, "open %s: %s (%s)\n", url, kvq_strerror(rc), kvq_last_error());
    assert_int_equal(rc, 0);
    return db;
}

static void item_key(char *buf, size_t cap, int i)
{
    snprintf(buf, cap, "q/%04d", i);
}

/* Commits one transaction: the items [from, to) set (set = 1) or cleared one by one, or
 * cleared as one range (set = -1). */
static void write_items(kvq_db *db, int from, int to, int set)
{
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    int rc;
    for (;;) {
        rc = 0;
        char k[32], e[32];
        if (set < 0) {
            item_key(k, sizeof k, from);
            item_key(e, sizeof e, to);
            rc = kvq_txn_clear_range(t, (const uint8_t *)k, strlen(k), (const uint8_t *)e,
                                     strlen(e));
        }
        for (int i = from; set >= 0 && i < to && rc == 0; i++) {
            item_key(k, sizeof k, i);
            rc = set ? kvq_txn_set(t, (const uint8_t *)k, strlen(k), (const uint8_t *)"value", 5)
                     : kvq_txn_clear(t, (const uint8_t *)k, strlen(k));
        }
        if (rc == 0)
            rc = kvq_txn_commit(t);
        if (rc == 0 || kvq_txn_on_error(t, rc) != 0)
            break;
    }
    assert_int_equal(rc, 0);
    kvq_txn_destroy(t);
}

static int64_t newest_version(kvq_db *db)
{
    kvq_txn *t;
    int64_t rv = 0;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_get_read_version(&rv, t), 0);
    kvq_txn_destroy(t);
    return rv;
}

/* The items t reads from the head (the first at *first, -1 when none): how many. */
static int head_read(kvq_txn *t, int *first, int *rc_out)
{
    const kvq_kv *kvs;
    size_t n = 0;
    bool more = false;
    int rc = kvq_txn_get_range(&kvs, &n, &more, t, (const uint8_t *)"q/", 2, (const uint8_t *)"q0",
                               2, 0, 0);
    *first = -1;
    if (rc_out)
        *rc_out = rc;
    if (rc != 0)
        return 0;
    if (n > 0)
        assert_int_equal(sscanf((const char *)kvs[0].key.data + 2, "%d", first), 1);
    for (size_t i = 0; i < n; i++) {
        char k[32];
        item_key(k, sizeof k, *first + (int)i);
        assert_int_equal(kvs[i].key.len, strlen(k));
        assert_memory_equal(kvs[i].key.data, k, strlen(k)); /* none missing in between */
        assert_int_equal(kvs[i].value.len, 5);
    }
    return (int)n;
}

/* A head read of a new transaction at version rv (0: the newest): its count and first item. */
static int head_at(kvq_db *db, int64_t rv, int *first, int *rc_out)
{
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    int rc = rv > 0 ? kvq_txn_set_read_version(t, rv) : 0;
    int n = 0;
    if (rc == 0)
        n = head_read(t, first, &rc);
    if (rc_out)
        *rc_out = rc;
    else
        assert_int_equal(rc, 0);
    kvq_txn_destroy(t);
    return n;
}

static void stats_of(kvq_db *db, kvq__logstore_stats *st)
{
    emb_db *e = db->engine;
    kvq__logstore_get_stats(e->store, st);
}

static int get_item(kvq_txn *t, int i)
{
    char k[32];
    item_key(k, sizeof k, i);
    kvq_bytes v;
    int present = 0;
    assert_int_equal(kvq_txn_get(&v, &present, t, (const uint8_t *)k, strlen(k), 0), 0);
    return present;
}

static int group_setup(void **state)
{
    (void)state;
    tl_mkdir(base, sizeof base, "logwindow");
    unsetenv("KVQ_STORAGE");
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    tl_rmdir(base);
    unsetenv("KVQ_LOGSTORE_APPLY_LAG_US");
    unsetenv("KVQ_LOGSTORE_APPLY_MS");
    return 0;
}

static void test_popped_rows_at_old_versions(void **state)
{
    (void)state;
    char url[256];
    snprintf(url, sizeof url, "log:%s/w", base);
    /* The items go to the table: an applier with no window, then the database closed. */
    setenv("KVQ_LOGSTORE_APPLY_LAG_US", "0", 1);
    setenv("KVQ_LOGSTORE_APPLY_MS", "2", 1);
    kvq_db *db = open_db(url);
    write_items(db, 0, ITEMS, 1);
    kvq_db_close(db); /* a handle applies the window as it closes */
    /* Reopened with a window of a minute and an applier that waits as long: the pops stay in
     * the map, their items rows of the table. */
    setenv("KVQ_LOGSTORE_APPLY_LAG_US", "60000000", 1);
    setenv("KVQ_LOGSTORE_APPLY_MS", "60000", 1);
    db = open_db(url);
    int first = 0;
    assert_int_equal(head_at(db, 0, &first, NULL), ITEMS);
    assert_int_equal(first, 0);

    int64_t rv0 = newest_version(db);
    kvq_txn *old; /* a transaction at rv0, open across the applier's pass below */
    assert_int_equal(kvq_txn_create(&old, db), 0);
    assert_int_equal(kvq_txn_set_read_version(old, rv0), 0);
    assert_true(get_item(old, 0));

    for (int i = 0; i < 30; i++)
        write_items(db, i, i + 1, 0); /* pops, one a transaction */
    int64_t rv30 = newest_version(db);
    write_items(db, 30, 60, 0);  /* 30 in one transaction */
    write_items(db, 60, 80, -1); /* 20 by a clear-range */

    /* The newest version, read twice (the second starts past the run the first walked), then
     * older versions of the same table: every item popped after them is there. */
    kvq__logstore_stats s0, s1;
    stats_of(db, &s0);
    for (int r = 0; r < 2; r++) {
        assert_int_equal(head_at(db, 0, &first, NULL), ITEMS - 80);
        assert_int_equal(first, 80);
    }
    stats_of(db, &s1);
    assert_int_equal(s1.rows_walked, s0.rows_walked + 80);
    assert_int_equal(s1.skips, s0.skips + 1);
    assert_int_equal(head_at(db, rv30, &first, NULL), ITEMS - 30);
    assert_int_equal(first, 30);
    assert_int_equal(head_at(db, 0, &first, NULL), ITEMS - 80);
    assert_int_equal(first, 80);
    assert_int_equal(head_read(old, &first, NULL), ITEMS);
    assert_int_equal(first, 0);
    assert_int_equal(head_at(db, rv0, &first, NULL), ITEMS);
    assert_int_equal(first, 0);
    /* A pop of one more item after the run was recorded: the run holds at the older version
     * only, and the newest read finds the new head. */
    write_items(db, 80, 81, 0);
    assert_int_equal(head_at(db, 0, &first, NULL), ITEMS - 81);
    assert_int_equal(first, 81);
    assert_int_equal(head_at(db, rv30, &first, NULL), ITEMS - 30);
    assert_int_equal(first, 30);

    /* The item just popped pushed again: inside the run recorded for this table, a value of
     * the map. */
    write_items(db, 80, 81, 1);
    assert_int_equal(head_at(db, 0, &first, NULL), ITEMS - 80);
    assert_int_equal(first, 80);

    /* A second handle, with no window, takes the pops into the table (as another process's
     * applier would): the transaction open at rv0 still reads every item popped since, a new
     * one at rv30 is refused (the table passed it), and the newest version reads the rest,
     * the item pushed again now a row of the new table, inside the run of the old one. */
    setenv("KVQ_LOGSTORE_APPLY_LAG_US", "0", 1);
    setenv("KVQ_LOGSTORE_APPLY_MS", "2", 1);
    kvq_db *applier = open_db(url);
    long waits = 30000L * kvq_test_time_factor();
    int rc = 0;
    for (long w = 0; w < waits; w++) {
        head_at(db, rv30, &first, &rc);
        if (rc != 0)
            break;
        kvq__sleep_us(2000);
    }
    assert_int_equal(rc, KVQ_ETRANSACTION_TOO_OLD);
    assert_int_equal(head_read(old, &first, NULL), ITEMS);
    assert_int_equal(first, 0);
    for (int i = 0; i < ITEMS; i++)
        assert_true(get_item(old, i));
    for (int r = 0; r < 2; r++) {
        assert_int_equal(head_at(db, 0, &first, NULL), ITEMS - 80);
        assert_int_equal(first, 80);
        assert_int_equal(head_at(applier, 0, &first, NULL), ITEMS - 80);
        assert_int_equal(first, 80);
    }
    kvq_txn_destroy(old);
    kvq_db_close(applier);
    kvq_db_close(db);
}

/* The first key t reads from the head into buf ("" when none). */
static void head_key(kvq_db *db, char *buf, size_t cap)
{
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    const kvq_kv *kvs;
    size_t n = 0;
    bool more = false;
    assert_int_equal(kvq_txn_get_range(&kvs, &n, &more, t, (const uint8_t *)"q/", 2,
                                       (const uint8_t *)"q0", 2, 1, 0),
                     0);
    buf[0] = '\0';
    if (n > 0) {
        assert_true(kvs[0].key.len < cap);
        memcpy(buf, kvs[0].key.data, kvs[0].key.len);
        buf[kvs[0].key.len] = '\0';
    }
    kvq_txn_destroy(t);
}

/* Waits (up to a minute, widened in slow builds) until db's reads at rv are refused: the table
 * passed rv. */
static void wait_table_past(kvq_db *db, int64_t rv)
{
    long waits = 30000L * kvq_test_time_factor();
    int rc = 0, first;
    for (long w = 0; w < waits; w++) {
        head_at(db, rv, &first, &rc);
        if (rc != 0)
            break;
        kvq__sleep_us(2000);
    }
    assert_int_equal(rc, KVQ_ETRANSACTION_TOO_OLD);
}

/* A run recorded on one table holds for the next tables up to its read version when the map had
 * no value inside it (the head read after another handle's pass skips it, walking nothing), and
 * only then: a key set inside the run (not a row of the first table) becomes a row of the next
 * one, and is read there. */
static void test_run_across_passes(void **state)
{
    (void)state;
    char url[256], k[32];
    snprintf(url, sizeof url, "log:%s/p", base);
    setenv("KVQ_LOGSTORE_APPLY_LAG_US", "0", 1);
    setenv("KVQ_LOGSTORE_APPLY_MS", "2", 1);
    kvq_db *db = open_db(url);
    write_items(db, 0, ITEMS, 1);
    kvq_db_close(db);
    setenv("KVQ_LOGSTORE_APPLY_LAG_US", "60000000", 1);
    setenv("KVQ_LOGSTORE_APPLY_MS", "60000", 1);
    db = open_db(url);
    kvq__logstore_stats s0, s1;

    /* a clean run [q/, q/0029], then a pass of another handle up to the pops: no newer batch,
     * so the new table is no newer than the run's read version */
    int64_t rv0 = newest_version(db);
    write_items(db, 0, 30, 0);
    head_key(db, k, sizeof k);
    assert_string_equal(k, "q/0030");
    stats_of(db, &s0);
    assert_true(s0.rows_walked >= 30);
    setenv("KVQ_LOGSTORE_APPLY_LAG_US", "0", 1);
    setenv("KVQ_LOGSTORE_APPLY_MS", "2", 1);
    kvq_db *applier = open_db(url);
    wait_table_past(db, rv0);
    kvq_db_close(applier);
    stats_of(db, &s0);
    head_key(db, k, sizeof k);
    assert_string_equal(k, "q/0030");
    stats_of(db, &s1);
    assert_int_equal(s1.skips_carried, s0.skips_carried + 1);
    assert_int_equal(s1.rows_walked, s0.rows_walked);

    /* a run [q/, q/0059] with a value of the map inside, then a pass up to it */
    int64_t rv1 = newest_version(db);
    write_items(db, 30, 60, 0);
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_set(t, (const uint8_t *)"q/0010a", 7, (const uint8_t *)"value", 5), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
    for (int r = 0; r < 2; r++) {
        head_key(db, k, sizeof k);
        assert_string_equal(k, "q/0010a");
    }
    applier = open_db(url);
    wait_table_past(db, rv1);
    stats_of(db, &s0);
    for (int r = 0; r < 2; r++) {
        head_key(db, k, sizeof k);
        assert_string_equal(k, "q/0010a");
    }
    stats_of(db, &s1);
    assert_int_equal(s1.skips_carried, s0.skips_carried);
    kvq_db_close(applier);
    kvq_db_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_popped_rows_at_old_versions),
        cmocka_unit_test(test_run_across_passes),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
