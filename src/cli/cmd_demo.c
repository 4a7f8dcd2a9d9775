/* kvq demo: the erlfdb tutorial's scenario on the embedded engine. Producer threads push items
 * concurrently while consumer workers pop them in batches; then every item is checked to have
 * been consumed exactly once. How often one worker saw a producer's item after a newer one is
 * counted too: consumers that race spread out over the first items of the queue
 * (docs/queues.md), so that is expected under contention, never a failure. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/qops.h"
#include "util/util.h"

typedef struct demo {
    cli_queue *q;
    int producers, consumers;
    long items, per_producer;
    int push_batch;
    uint32_t *seen;    /* producers x per_producer counters */
    int64_t *last_seq; /* consumers x producers: the last sequence each worker saw */
    uint64_t out_of_order, malformed, consumed;
    uint64_t *made; /* per producer thread: items it has asked for (all but the last pushed) */
    int push_error;
    int progress_stop; /* atomic: the progress thread ends */
    int64_t progress_ms; /* between progress lines */
    pthread_mutex_t progress_mu;
    pthread_cond_t progress_cv;
} demo;

/* Producer thread `thread` makes its items "pNNN:SSSSSSSSS" in sequence. */
static int make_item(kvq_buf *value, int64_t *priority, int thread, uint64_t seq, void *payload)
{
    (void)priority;
    demo *d = payload;
    /* One item per transaction and in sequence: asking for item seq means seq items are pushed. */
    __atomic_store_n(&d->made[thread], seq, __ATOMIC_RELAXED);
    if (seq >= (uint64_t)d->per_producer)
        return KVQ_ENOTFOUND;
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "p%03d:%09llu", thread, (unsigned long long)seq);
    return kvq_buf_append(value, buf, (size_t)n);
}

static int consume(kvq_bytes v, int worker, void *payload)
{
    demo *d = payload;
    int id;
    long seq;
    char buf[64];
    if (v.len >= sizeof(buf))
        goto bad;
    memcpy(buf, v.data, v.len);
    buf[v.len] = '\0';
    if (sscanf(buf, "p%d:%ld", &id, &seq) != 2 || id < 0 || id >= d->producers || seq < 0 ||
        seq >= d->per_producer)
        goto bad;
    __atomic_add_fetch(&d->seen[(size_t)id * (size_t)d->per_producer + (size_t)seq], 1,
                       __ATOMIC_RELAXED);
    /* Out of order for this worker: an item older than one it already saw (racing pops spread). */
    int64_t *last = &d->last_seq[(size_t)worker * (size_t)d->producers + (size_t)id];
    if (seq <= *last)
        __atomic_add_fetch(&d->out_of_order, 1, __ATOMIC_RELAXED);
    *last = seq;
    __atomic_add_fetch(&d->consumed, 1, __ATOMIC_RELAXED);
    return 0;
bad:
    __atomic_add_fetch(&d->malformed, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&d->consumed, 1, __ATOMIC_RELAXED);
    return 0;
}

/* Prints a progress line every progress_ms until the demo ends. */
static void *progress(void *arg)
{
    demo *d = arg;
    int64_t t0 = kvq__mono_us();
    pthread_mutex_lock(&d->progress_mu);
    for (;;) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = ts.tv_nsec + d->progress_ms * 1000000;
        ts.tv_sec += (time_t)(ns / 1000000000);
        ts.tv_nsec = (long)(ns % 1000000000);
        while (!d->progress_stop &&
               pthread_cond_timedwait(&d->progress_cv, &d->progress_mu, &ts) == 0) {
        }
        if (d->progress_stop)
            break;
        uint64_t pushed = 0;
        for (int i = 0; i < d->producers; i++)
            pushed += __atomic_load_n(&d->made[i], __ATOMIC_RELAXED);
        uint64_t consumed = __atomic_load_n(&d->consumed, __ATOMIC_RELAXED);
        printf("  %5.1f s: %llu of %ld pushed, %llu consumed\n",
               (double)(kvq__mono_us() - t0) / 1e6, (unsigned long long)pushed, d->items,
               (unsigned long long)consumed);
        fflush(stdout);
    }
    pthread_mutex_unlock(&d->progress_mu);
    return NULL;
}

/* The summary as text: throughput, conflicts and the verification. */
static void print_text(const demo *d,
                       double push_s,
                       double all_s,
                       const kvq_consumer_stats *cs,
                       const kvq_db_stats *before,
                       const kvq_db_stats *after,
                       long missing,
                       long dup,
                       uint64_t left,
                       int ok)
{
    printf("pushed   %ld items in %.2f s: %.0f pushes/s (one item per transaction)\n", d->items,
           push_s, (double)d->items / push_s);
    printf("consumed %llu items in %.2f s: %.0f items/s, %llu pop transactions (%.1f items "
           "each), %llu waits on the watch\n",
           (unsigned long long)cs->items, all_s, (double)cs->items / all_s,
           (unsigned long long)cs->batches, cs->batches ? (double)cs->items / (double)cs->batches : 0.0,
           (unsigned long long)cs->empty_waits);
    printf("conflicts %llu, retries %llu, commits %llu in %llu storage transactions and %llu "
           "syncs\n",
           (unsigned long long)(after->conflicts - before->conflicts),
           (unsigned long long)(after->retries - before->retries),
           (unsigned long long)(after->commits - before->commits),
           (unsigned long long)(after->batches - before->batches),
           (unsigned long long)(after->syncs - before->syncs));
    printf("order: %llu items reached a worker after a newer one of the same producer (racing "
           "consumers spread out over the queue's first items)\n",
           (unsigned long long)d->out_of_order);
    printf("verified: %ld missing, %ld duplicated, %llu malformed, %llu left in the queue: %s\n",
           missing, dup, (unsigned long long)d->malformed, (unsigned long long)left,
           ok ? "every item consumed exactly once" : "FAILED");
}

/* The summary as one JSON object (--json): the same figures, and "verified". When a producer or
 * a consumer failed, the error is the one JSON value instead (printed by the caller). */
static void print_json(const demo *d,
                       const char *name,
                       long long batch,
                       double push_s,
                       double all_s,
                       const kvq_consumer_stats *cs,
                       const kvq_db_stats *before,
                       const kvq_db_stats *after,
                       long missing,
                       long dup,
                       uint64_t left,
                       int ok,
                       int err)
{
    if (err != 0)
        return;
    printf("{\"queue\":");
    cli_json_str(stdout, (const uint8_t *)name, strlen(name));
    printf(",\"items\":%ld,\"producers\":%d,\"consumers\":%d,\"batch\":%lld,"
           "\"push_seconds\":%.3f,\"consume_seconds\":%.3f,\"pushes_per_second\":%.0f,"
           "\"items_per_second\":%.0f,\"consumed\":%llu,\"pop_transactions\":%llu,"
           "\"watch_waits\":%llu,\"conflicts\":%llu,\"retries\":%llu,\"commits\":%llu,"
           "\"syncs\":%llu,\"out_of_order\":%llu,\"missing\":%ld,\"duplicated\":%ld,"
           "\"malformed\":%llu,\"left\":%llu,\"verified\":%s}\n",
           d->items, d->producers, d->consumers, batch, push_s, all_s,
           push_s > 0 ? (double)d->items / push_s : 0.0,
           all_s > 0 ? (double)cs->items / all_s : 0.0, (unsigned long long)cs->items,
           (unsigned long long)cs->batches, (unsigned long long)cs->empty_waits,
           (unsigned long long)(after->conflicts - before->conflicts),
           (unsigned long long)(after->retries - before->retries),
           (unsigned long long)(after->commits - before->commits),
           (unsigned long long)(after->syncs - before->syncs),
           (unsigned long long)d->out_of_order, missing, dup, (unsigned long long)d->malformed,
           (unsigned long long)left, ok ? "true" : "false");
}

/* What the command line asks of the demo. */
typedef struct demo_args {
    long long producers, consumers, items, batch, progress_ms;
    const char *name;
} demo_args;

/* Reads the demo's options; the queue's name is qname (a default made there) or --queue's. 0, or
 * the usage error's exit code. */
static int parse_demo_args(demo_args *a, char *qname, size_t qcap, int argc, char **argv)
{
    *a = (demo_args){ .producers = 8, .consumers = 4, .items = 100000, .batch = 100,
                      .progress_ms = 1000, .name = qname };
    snprintf(qname, qcap, "demo-%ld", (long)getpid());
    for (int i = 1; i < argc; i++) {
        long long *dst = NULL;
        long long lo = 1, hi = 0;
        if (strcmp(argv[i], "--producers") == 0)
            dst = &a->producers, hi = 256;
        else if (strcmp(argv[i], "--consumers") == 0)
            dst = &a->consumers, hi = 256;
        else if (strcmp(argv[i], "--items") == 0)
            dst = &a->items, hi = 100000000;
        else if (strcmp(argv[i], "--batch") == 0)
            dst = &a->batch, hi = 10000;
        else if (strcmp(argv[i], "--progress") == 0) {
            if (i + 1 >= argc || cli_parse_ms(argv[i + 1], 0, 3600000, &a->progress_ms) != 0)
                return cli_usage("demo", "--progress needs a duration from 0 to 1h (500ms, 1s)");
            i++;
            continue;
        } else if (strcmp(argv[i], "--queue") == 0 && i + 1 < argc) {
            a->name = argv[++i];
            if (kvq_queue_check_name(a->name) != 0)
                return cli_usage("demo", "invalid queue name '%s'", cli_arg(a->name));
            continue;
        } else
            return cli_usage("demo", "unexpected argument '%s'", cli_arg(argv[i]));
        if (i + 1 >= argc || cli_parse_int(argv[i + 1], lo, hi, dst) != 0)
            return cli_usage("demo", "%s needs a number from %lld to %lld", argv[i], lo, hi);
        i++;
    }
    if (a->items < a->producers)
        return cli_usage("demo", "--items must be at least --producers");
    return 0;
}

/* The demo's run, its consumers started: the progress thread (unless --json), the producers
 * until they pushed every item (*t_push), then the wait for the consumers to catch up, bounded
 * (a stuck consumer fails the demo; *t_done). */
static void run_demo(cli *c,
                     demo *d,
                     kvq_consumer *cons,
                     long long progress_ms,
                     int64_t *t_push,
                     int64_t *t_done)
{
    pthread_mutex_init(&d->progress_mu, NULL);
    pthread_cond_init(&d->progress_cv, NULL);
    pthread_t progress_thread;
    d->progress_ms = progress_ms;
    /* With --json, the one JSON value at the end is all there is on standard output. */
    int progress_on =
        progress_ms > 0 && !c->json && pthread_create(&progress_thread, NULL, progress, d) == 0;
    kvq_producer_options po = KVQ_PRODUCER_OPTIONS_INIT;
    po.threads = d->producers;
    po.batch = 1; /* one item per transaction, as the tutorial's producers push */
    d->push_error = kvq_queue_produce(NULL, cli_queue_queue(d->q), make_item, d, &po);
    *t_push = kvq__mono_us();
    /* Wait for the consumers to catch up (bounded: a stuck consumer fails the demo). */
    int64_t deadline = *t_push + 120 * 1000000LL;
    while (__atomic_load_n(&d->consumed, __ATOMIC_RELAXED) < (uint64_t)d->items &&
           kvq__mono_us() < deadline && d->push_error == 0 && !kvq_consumer_finished(cons))
        kvq__sleep_us(2000);
    *t_done = kvq__mono_us();
    pthread_mutex_lock(&d->progress_mu);
    d->progress_stop = 1;
    pthread_cond_signal(&d->progress_cv);
    pthread_mutex_unlock(&d->progress_mu);
    if (progress_on)
        pthread_join(progress_thread, NULL);
    pthread_cond_destroy(&d->progress_cv);
    pthread_mutex_destroy(&d->progress_mu);
}

int cmd_demo(cli *c, int argc, char **argv)
{
    demo_args a;
    char qname[64];
    int rc = parse_demo_args(&a, qname, sizeof(qname), argc, argv);
    if (rc != 0)
        return rc;
    long long producers = a.producers, consumers = a.consumers, batch = a.batch;
    const char *name = a.name;
    c->create_db = 1;
    rc = cli_open(c);
    if (rc != 0)
        return rc;
    kvq_queue_settings settings = KVQ_QUEUE_SETTINGS_INIT;
    settings.max_deliveries = 0;
    int err = kvq_queue_create_named(c->db, name, &settings);
    if (err == KVQ_EEXISTS || err == KVQ_EWRONGTYPE) {
        return cli_usage("demo", "queue '%s' already exists; name another with --queue", name);
    }
    if (err != 0)
        return cli_fail(err, "cannot create the demo queue");
    demo d = { .producers = (int)producers, .consumers = (int)consumers };
    d.per_producer = a.items / producers;
    d.items = d.per_producer * producers;
    d.seen = kvq__calloc((size_t)d.items, sizeof(*d.seen));
    d.last_seq = kvq__malloc((size_t)(consumers * producers) * sizeof(*d.last_seq));
    d.made = kvq__calloc((size_t)producers, sizeof(*d.made));
    if (d.seen == NULL || d.last_seq == NULL || d.made == NULL) {
        return cli_fail(KVQ_ENOMEM, "demo");
    }
    for (long long i = 0; i < consumers * producers; i++)
        d.last_seq[i] = -1;
    err = cli_queue_open(&d.q, c->db, name, KVQ_QUEUE_DURABLE);
    kvq_consumer_source src;
    if (err == 0)
        err = cli_queue_source(d.q, &src);
    if (err != 0)
        return cli_fail(err, "cannot open the demo queue");

    if (!c->json)
        printf("kvq demo: %ld items, %d producer threads, %d consumer workers popping up to %lld "
               "per transaction, durable queue '%s' in %s\n",
               d.items, d.producers, d.consumers, batch, name,
               c->db_url ? c->db_url : (getenv("KVQ_DB") ? getenv("KVQ_DB") : "./kvq-data"));
    kvq_db_stats before;
    if (kvq_db_get_stats(&before, c->db) != 0) /* cannot fail on a live handle; zeros if it ever does */
        memset(&before, 0, sizeof before);
    int64_t t0 = kvq__mono_us();
    kvq_consumer_options o = KVQ_CONSUMER_OPTIONS_INIT;
    o.workers = d.consumers;
    o.batch = (int)batch;
    kvq_consumer *cons;
    err = kvq_consumer_start(&cons, c->db, &src, consume, &d, &o);
    if (err != 0)
        return cli_fail(err, "cannot start the consumers");
    int64_t t_push, t_done;
    run_demo(c, &d, cons, a.progress_ms, &t_push, &t_done);
    kvq_consumer_stop(cons);
    int cerr = kvq_consumer_join(cons);
    kvq_consumer_stats cs;
    if (kvq_consumer_get_stats(&cs, cons) != 0) /* cannot fail on a live handle; zeros if it ever does */
        memset(&cs, 0, sizeof cs);
    kvq_consumer_destroy(cons);
    kvq_db_stats after;
    if (kvq_db_get_stats(&after, c->db) != 0) /* cannot fail on a live handle; zeros if it ever does */
        memset(&after, 0, sizeof after);
    uint64_t left = 0;
    (void)cli_queue_len(d.q, &left);

    long missing = 0, dup = 0;
    for (long i = 0; i < d.items; i++) {
        missing += d.seen[i] == 0;
        dup += d.seen[i] > 1;
    }
    double push_s = (double)(t_push - t0) / 1e6, all_s = (double)(t_done - t0) / 1e6;
    int ok = d.push_error == 0 && cerr == 0 && missing == 0 && dup == 0 && d.malformed == 0 &&
             left == 0;
    if (c->json)
        print_json(&d, name, batch, push_s, all_s, &cs, &before, &after, missing, dup, left, ok,
                   d.push_error != 0 ? d.push_error : cerr);
    else
        print_text(&d, push_s, all_s, &cs, &before, &after, missing, dup, left, ok);
    if (d.push_error != 0)
        cli_fail(d.push_error, "a producer failed");
    else if (cerr != 0)
        cli_fail(cerr, "a consumer failed");
    /* The demo cleans up after itself. */
    if (cli_queue_delete(d.q) != 0 || kvq_queue_forget_named(c->db, name) != 0)
        fprintf(stderr, "kvq: the scratch queue %s could not be removed: %s\n", name,
                kvq_last_error());
    cli_queue_close(d.q);
    kvq__free(d.seen);
    kvq__free(d.last_seq);
    kvq__free(d.made);
    return ok ? 0 : EXIT_FAILED;
}
