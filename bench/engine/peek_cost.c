/* The instructions of a queue's head read with K popped items still in the window, for
 * callgrind (docs/logstore.md, "Growth"); run by hand:
 *
 *   KVQ_LOGSTORE_APPLY_LAG_US=0 KVQ_LOGSTORE_APPLY_MS=100 peek_cost log:DIR fill
 *   KVQ_LOGSTORE_APPLY_LAG_US=60000000 valgrind --tool=callgrind --instr-atstart=no \
 *       peek_cost log:DIR peek K
 *
 * fill pushes 30,000 items of 100 bytes and waits 2 s, so that an applier with no lag takes them
 * into the table (with a lag of 60 s instead they stay in the map only); peek pops K of them
 * (the applier, 60 s behind, leaves the table as it is) and instruments 20 peeks of the head.
 * `peek K warm` peeks once more before the 20, uninstrumented: a cursor that walks the table's
 * hidden rows records the run for the next ones (store_log_apply.c, ls_skip), so the first of
 * the 20 otherwise pays for the walk over the last batch of pops, which the others skip.
 * `peek K pop100` (`pop1`) instruments 20 pops of 100 items (of 1), kvq_queue_pop_k, in place of
 * the peeks, after the uninstrumented peek of `warm`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <valgrind/callgrind.h>

#include "kvq/kvq.h"

enum { ITEMS = 30000, VLEN = 100, BATCH = 1000, PEEKS = 20 };

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[2], "peek") == 0 && argc < 4)) {
        fprintf(stderr, "usage: peek_cost URL fill | peek_cost URL peek K [warm|pop1|pop100]\n");
        return 2;
    }
    kvq_db *db;
    kvq_queue *q;
    if (kvq_db_open(&db, argv[1], NULL) != 0 ||
        kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL) != 0) {
        fprintf(stderr, "peek_cost: open: %s\n", kvq_last_error());
        return 1;
    }
    int rc = 0;
    if (strcmp(argv[2], "fill") == 0) {
        static uint8_t v[BATCH][VLEN];
        static kvq_bytes views[BATCH];
        for (int j = 0; j < BATCH; j++) {
            memset(v[j], 'a' + j % 26, VLEN);
            views[j] = (kvq_bytes){ v[j], VLEN };
        }
        for (int i = 0; i < ITEMS / BATCH && rc == 0; i++)
            rc = kvq_queue_push_many(q, views, BATCH);
        sleep(2);
    } else {
        long k = atol(argv[3]);
        static kvq_buf outs[BATCH];
        for (long done = 0; done < k && rc == 0;) {
            size_t n = 0;
            rc = kvq_queue_pop_k(outs, &n, q, k - done > BATCH ? BATCH : (size_t)(k - done));
            done += (long)n;
        }
        for (int j = 0; j < BATCH; j++)
            kvq_buf_dispose(&outs[j]);
        kvq_buf b = KVQ_BUF_INIT;
        size_t pops = argc > 4 && strcmp(argv[4], "pop100") == 0 ? 100
                      : argc > 4 && strcmp(argv[4], "pop1") == 0 ? 1
                                                                 : 0;
        if (rc == 0 && argc > 4 && (pops > 0 || strcmp(argv[4], "warm") == 0))
            rc = kvq_queue_peek(&b, q);
        CALLGRIND_START_INSTRUMENTATION;
        for (int i = 0; i < PEEKS && rc == 0; i++) {
            size_t n = 0;
            rc = pops ? kvq_queue_pop_k(outs, &n, q, pops) : kvq_queue_peek(&b, q);
        }
        CALLGRIND_STOP_INSTRUMENTATION;
        for (int j = 0; j < BATCH; j++)
            kvq_buf_dispose(&outs[j]);
        kvq_buf_dispose(&b);
    }
    if (rc != 0)
        fprintf(stderr, "peek_cost: %s (%s)\n", kvq_strerror(rc), kvq_last_error());
    kvq_queue_close(q);
    kvq_db_close(db);
    return rc == 0 ? 0 : 1;
}
