/* The command's queue operations, on the queue layers of kvq/queue.h. A queue named NAME lives
 * under the subspace ("NAME",) when it is a FIFO or priority queue (the recipes use string
 * elements) and (b"NAME",) when it is a durable queue (erlfdb uses bytes), so that programs using
 * the recipes on the same keys see the same queues. */
#include <string.h>

#include "cli/qops.h"
#include "util/bytes.h"
#include "util/util.h"

const char *cli_type_name(kvq_queue_type t)
{
    switch (t) {
    case KVQ_QUEUE_FIFO:
        return "fifo";
    case KVQ_QUEUE_PRIORITY:
        return "priority";
    case KVQ_QUEUE_DURABLE:
        return "durable";
    default:
        return "none";
    }
}

int cli_type_parse(const char *s, kvq_queue_type *out)
{
    if (strcmp(s, "fifo") == 0)
        *out = KVQ_QUEUE_FIFO;
    else if (strcmp(s, "priority") == 0)
        *out = KVQ_QUEUE_PRIORITY;
    else if (strcmp(s, "durable") == 0)
        *out = KVQ_QUEUE_DURABLE;
    else
        return KVQ_EINVAL;
    return 0;
}

struct cli_queue {
    kvq_db *db;
    kvq_queue_type type;
    kvq_queue *q;
    kvq_workq *w; /* opened by cli_queue_workq */
};

int cli_queue_open(cli_queue **out, kvq_db *db, const char *name, kvq_queue_type type)
{
    *out = NULL;
    kvq_queue_type qt = type == KVQ_QUEUE_FIFO       ? KVQ_QUEUE_FIFO
                        : type == KVQ_QUEUE_PRIORITY ? KVQ_QUEUE_PRIORITY
                        : type == KVQ_QUEUE_DURABLE  ? KVQ_QUEUE_DURABLE
                                              : (kvq_queue_type)0;
    if (qt == 0)
        return kvq__error(KVQ_EINVAL, "queue '%s' has an unknown type", name);
    cli_queue *q = kvq__calloc(1, sizeof(*q));
    if (q == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    q->db = db;
    q->type = type;
    /* By name, as any program would: the library keeps the name -> subspace rule. */
    kvq_queue_settings s;
    int rc = kvq_queue_open_named(&q->q, &s, db, name);
    if (rc == 0 && s.type != qt)
        rc = kvq__error(KVQ_EWRONGTYPE, "queue '%s' is now a %s queue", name,
                        kvq_queue_type_name(s.type));
    if (rc != 0) {
        cli_queue_close(q);
        return rc;
    }
    *out = q;
    return 0;
}

void cli_queue_close(cli_queue *q)
{
    if (q == NULL)
        return;
    kvq_workq_close(q->w);
    kvq_queue_close(q->q);
    kvq__free(q);
}

kvq_queue *cli_queue_queue(cli_queue *q)
{
    return q->q;
}

int cli_queue_workq(cli_queue *q, const kvq_queue_settings *info, kvq_workq **out)
{
    *out = NULL;
    if (q->type == KVQ_QUEUE_FIFO)
        return kvq__error(KVQ_EWRONGTYPE,
                          "leases, delays and dedup need a durable or priority queue; this one "
                          "is a fifo queue");
    if (q->w == NULL) {
        kvq_workq_options o = KVQ_WORKQ_OPTIONS_INIT;
        if (info != NULL && info->lease_ms > 0)
            o.lease_ms = info->lease_ms;
        if (info != NULL)
            o.max_deliveries = info->max_deliveries;
        int rc = kvq_workq_open(&q->w, q->q, &o);
        if (rc != 0)
            return rc;
    }
    *out = q->w;
    return 0;
}

int cli_queue_push(cli_queue *q, const uint8_t *v, size_t n, int64_t priority)
{
    if (q->type == KVQ_QUEUE_PRIORITY)
        return kvq_queue_push_prio(q->q, v, n, priority);
    return kvq_queue_push(q->q, v, n);
}

int cli_queue_push_many(cli_queue *q, const kvq_bytes *values, size_t n, int64_t priority, size_t *done)
{
    *done = 0;
    if (q->type == KVQ_QUEUE_DURABLE) {
        int rc = kvq_queue_push_many(q->q, values, n);
        if (rc == 0)
            *done = n;
        return rc;
    }
    /* The recipes have no batch push: one idempotent push each. */
    for (size_t i = 0; i < n; i++) {
        int rc = cli_queue_push(q, values[i].data, values[i].len, priority);
        if (rc != 0)
            return rc;
        (*done)++;
    }
    return 0;
}

/* The most items one pop transaction takes; larger counts pop in several transactions. */
#define CLI_QUEUE_POP_CHUNK 1000

int cli_queue_pop(cli_queue *q, size_t k, int max, int (*fn)(const uint8_t *v, size_t n, void *arg), void *arg,
           size_t *popped)
{
    size_t done = 0;
    *popped = 0;
    int rc = 0;
    if (max) {
        /* Highest first, one item per transaction. */
        kvq_buf v = KVQ_BUF_INIT;
        while (rc == 0 && done < k) {
            rc = kvq_queue_pop_prio(&v, NULL, q->q, KVQ_QUEUE_MAX);
            if (rc == 0) {
                done++;
                rc = fn(v.data, v.len, arg);
            }
        }
        kvq_buf_dispose(&v);
    } else {
        size_t chunk = k < CLI_QUEUE_POP_CHUNK ? k : CLI_QUEUE_POP_CHUNK;
        kvq_buf *outs = kvq__calloc(chunk, sizeof(*outs));
        if (outs == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory");
        while (rc == 0 && done < k) {
            size_t want = k - done < chunk ? k - done : chunk, got = 0;
            rc = kvq_queue_pop_k(outs, &got, q->q, want);
            for (size_t i = 0; rc == 0 && i < got; i++)
                rc = fn(outs[i].data, outs[i].len, arg);
            done += got;
            if (rc == 0 && got < want)
                break; /* the queue ran empty */
        }
        for (size_t i = 0; i < chunk; i++)
            kvq_buf_dispose(&outs[i]);
        kvq__free(outs);
    }
    *popped = done;
    /* Empty is an error only when nothing at all was popped. */
    if (rc == KVQ_ENOTFOUND && done > 0)
        rc = 0;
    return rc;
}

int cli_queue_peek(cli_queue *q, int max, kvq_buf *out)
{
    if (max)
        return kvq_queue_peek_prio(out, NULL, q->q, KVQ_QUEUE_MAX);
    return kvq_queue_peek(out, q->q);
}

int cli_queue_len(cli_queue *q, uint64_t *out)
{
    return kvq_queue_len(out, q->q);
}

typedef struct list_ctx {
    size_t limit, done;
    int (*fn)(const uint8_t *v, size_t n, void *arg);
    void *arg;
} list_ctx;

/* Stops the iteration with this once the limit is reached (never a kvq error number). */
#define CLI_QUEUE_LIST_DONE (-1)

static int list_one(kvq_bytes value, int64_t priority, void *payload)
{
    (void)priority;
    list_ctx *lc = payload;
    int rc = lc->fn(value.data, value.len, lc->arg);
    if (rc == 0 && lc->limit > 0 && ++lc->done >= lc->limit)
        rc = CLI_QUEUE_LIST_DONE;
    return rc;
}

int cli_queue_list(cli_queue *q, size_t limit, int (*fn)(const uint8_t *v, size_t n, void *arg), void *arg)
{
    list_ctx lc = { limit, 0, fn, arg };
    int rc = kvq_queue_iterate(q->q, list_one, &lc);
    return rc == CLI_QUEUE_LIST_DONE ? 0 : rc;
}

int cli_queue_clear(cli_queue *q)
{
    return kvq_queue_clear(q->q);
}

int cli_queue_delete(cli_queue *q)
{
    return kvq_queue_delete(q->q);
}

int cli_queue_watch(cli_queue *q, int64_t timeout_ms)
{
    if (q->type != KVQ_QUEUE_DURABLE)
        return kvq__error(KVQ_EWRONGTYPE,
                          "watch needs a durable queue (a %s queue has no push counter to watch)",
                          cli_type_name(q->type));
    kvq_watch *w = NULL;
    int rc = kvq_queue_watch(&w, q->q);
    if (rc == 0)
        rc = kvq_watch_wait(w, timeout_ms);
    kvq_watch_destroy(w);
    return rc;
}

/* Durable queues: the push and pop counters (snapshot reads). */
static int durable_stats(cli_queue *q, kvq_txn *txn, cli_queue_stats *out)
{
    kvq_bytes prefix = kvq_queue_get_prefix(q->q);
    uint64_t c[2] = { 0, 0 };
    const char *names[2] = { "npush", "npop" };
    int rc = 0;
    for (int i = 0; rc == 0 && i < 2; i++) {
        kvq_buf key = KVQ_BUF_INIT;
        kvq_tuple_elem e = kvq_tuple_bytes(names[i], strlen(names[i]));
        rc = kvq_buf_append(&key, prefix.data, prefix.len);
        if (rc == 0)
            rc = kvq_tuple_pack_buf(&key, &e, 1);
        kvq_bytes v;
        int present = 0;
        if (rc == 0)
            rc = kvq_txn_get(&v, &present, txn, key.data, key.len, KVQ_SNAPSHOT);
        if (rc == 0 && present)
            c[i] = kvq__le_get(v.data, v.len);
        kvq_buf_dispose(&key);
    }
    if (rc != 0)
        return rc;
    out->length = c[0] >= c[1] ? c[0] - c[1] : 0;
    out->has_counters = 1;
    out->pushes = c[0];
    out->pops = c[1];
    return 0;
}

int cli_queue_stats_get(cli_queue *q, cli_queue_stats *out)
{
    if (q->type != KVQ_QUEUE_DURABLE) {
        /* The recipes keep no counters and their keys carry no time: the length only. */
        return kvq_queue_len(&out->length, q->q);
    }
    kvq_txn *txn;
    int rc = kvq_txn_create(&txn, q->db);
    if (rc == 0)
        rc = durable_stats(q, txn, out);
    kvq_txn_destroy(txn);
    return rc;
}

int cli_queue_source(cli_queue *q, kvq_consumer_source *out)
{
    return kvq_queue_consumer_source(out, q->q);
}
