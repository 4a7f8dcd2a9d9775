/* A drained log store is cheap (issue 32, item 6): after a queue of 50,000 items (5 MB of
 * values) has been pushed, taken into the table and popped whole, the database opens with
 * nearly nothing in memory and nearly nothing to replay, whatever it once held: the map, the
 * log kept and the table's pages in use are each a small fraction of the data that was there.
 * (Sizes and counts, not times: the open's cost is what it replays and what it keeps.) */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/embedded/emb.h"
#include "engine/embedded/logstore/store_log.h"
#include "engine/engine.h"
#include "kvq/kvq.h"
#include "kvq_test.h"

#define ITEMS 50000
#define VLEN  100
#define SEG   262144

static char base[64];

static int setup(void **state)
{
    (void)state;
    return kt_mkdtemp(base, sizeof(base), "log-drained");
}

static int teardown(void **state)
{
    (void)state;
    return kt_rm_rf(base) == 0 ? 0 : -1;
}

static emb_store *store_of(kvq_db *db)
{
    emb_db *e = db->engine;
    return e->store;
}

static void open_queue(kvq_db **db, kvq_queue **q, const char *url)
{
    assert_int_equal(kvq_db_open(db, url, NULL), 0);
    assert_int_equal(kvq_queue_open(q, *db, KVQ_QUEUE_DURABLE, NULL, NULL), 0);
}

static void test_drained_opens_small(void **state)
{
    (void)state;
    char url[160], table[192];
    snprintf(url, sizeof url, "log:%s/db", base);
    snprintf(table, sizeof table, "%s/db/logstore/data.db", base);
    kvq_db *db;
    kvq_queue *q;
    open_queue(&db, &q, url);
    static uint8_t vals[1000][VLEN];
    static kvq_bytes views[1000];
    for (int i = 0; i < ITEMS; i += 1000) {
        for (int j = 0; j < 1000; j++) {
            memset(vals[j], 'a' + (i / 1000 + j) % 26, VLEN);
            views[j] = (kvq_bytes){ vals[j], VLEN };
        }
        assert_int_equal(kvq_queue_push_many(q, views, 1000), 0);
    }
    /* the map and the log with the items, then the items go to the table, as the applier
     * takes them past the window */
    kvq__logstore_stats full;
    kvq__logstore_get_stats(store_of(db), &full);
    assert_int_equal(kvq__logstore_checkpoint_now(store_of(db)), 0);
    kvq__logstore_stats applied;
    kvq__logstore_get_stats(store_of(db), &applied);
    uint64_t len = 0;
    assert_int_equal(kvq_queue_len(&len, q), 0);
    assert_int_equal(len, ITEMS);
    static kvq_buf outs[1000];
    for (int popped = 0; popped < ITEMS;) {
        size_t n = 0;
        assert_int_equal(kvq_queue_pop_k(outs, &n, q, 1000), 0);
        popped += (int)n;
    }
    for (int j = 0; j < 1000; j++)
        kvq_buf_dispose(&outs[j]);
    assert_int_equal(kvq_queue_len(&len, q), 0);
    assert_int_equal(kvq__logstore_checkpoint_now(store_of(db)), 0);
    kvq_queue_close(q);
    kvq_db_close(db);

    /* The drained database, opened again. */
    open_queue(&db, &q, url);
    assert_int_equal(kvq_queue_len(&len, q), 0);
    kvq_buf head = KVQ_BUF_INIT;
    assert_int_equal(kvq_queue_peek(&head, q), KVQ_ENOTFOUND);
    kvq__logstore_stats st;
    kvq__logstore_get_stats(store_of(db), &st);
    struct stat ts;
    assert_int_equal(stat(table, &ts), 0);
    printf("drained: data_bytes=%d map_mem=%llu (full %llu) log_kept=%llu (full %llu) "
           "table_live=%llu (full %llu) table_file=%lld\n",
           ITEMS * VLEN, (unsigned long long)st.map_mem, (unsigned long long)full.map_mem,
           (unsigned long long)st.log_bytes, (unsigned long long)full.log_bytes,
           (unsigned long long)st.table_live, (unsigned long long)applied.table_live,
           (long long)ts.st_size);
    /* the full state was what it says */
    assert_true(full.map_mem > ITEMS * VLEN);
    assert_true(full.log_bytes > ITEMS * VLEN);
    assert_true(applied.table_live != UINT64_MAX && applied.table_live > ITEMS * VLEN);
    /* the map holds what the table lacks: nothing of the 5 MB (a few KiB of bookkeeping) */
    assert_true(st.map_mem < 64 * 1024);
    /* the log the open replays and keeps: at most the segment in use and a spare */
    assert_true(st.log_bytes <= 2 * SEG);
    /* the table's pages in use: its schema and a few index pages, not the 5 MB (its file keeps
     * its free pages: SQLite gives them back only to a vacuum) */
    assert_true(st.table_live != UINT64_MAX && st.table_live < 256 * 1024);
    kvq_queue_close(q);
    kvq_db_close(db);
}

int main(void)
{
    setenv("KVQ_LOGSTORE_SEGMENT_BYTES", "262144", 1);
    unsetenv("KVQ_STORAGE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drained_opens_small),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
