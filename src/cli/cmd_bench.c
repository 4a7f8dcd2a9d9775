/* kvq bench: push and pop throughput of each queue type, on the database given with --db (a
 * scratch queue is created and deleted), with a progress line on a terminal. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/qops.h"
#include "util/util.h"

typedef struct bench_run {
    cli_queue *q;
    long per_thread;
    int pop;
    long done;
    int err;
} bench_run;

static int count_item(const uint8_t *v, size_t n, void *arg)
{
    (void)v;
    (void)n;
    (*(long *)arg)++;
    return 0;
}

static void *bench_thread(void *arg)
{
    bench_run *r = arg;
    uint8_t value[100];
    memset(value, 'x', sizeof(value));
    for (long i = 0; i < r->per_thread; i++) {
        int rc;
        if (r->pop) {
            long got = 0;
            size_t popped;
            rc = cli_queue_pop(r->q, 1, 0, count_item, &got, &popped);
            if (rc == KVQ_ENOTFOUND)
                break;
        } else {
            rc = cli_queue_push(r->q, value, sizeof(value), (int64_t)(i % 10));
        }
        if (rc != 0) {
            r->err = rc;
            break;
        }
        r->done++;
    }
    return NULL;
}

static double run_phase(cli_queue *q, int threads, long items, int pop, int *err)
{
    bench_run *runs = kvq__calloc((size_t)threads, sizeof(*runs));
    pthread_t *th = kvq__calloc((size_t)threads, sizeof(*th));
    int64_t t0 = kvq__mono_us();
    for (int i = 0; i < threads; i++) {
        runs[i] = (bench_run){ q, items / threads, pop, 0, 0 };
        pthread_create(&th[i], NULL, bench_thread, &runs[i]);
    }
    long done = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        done += runs[i].done;
        if (runs[i].err != 0 && *err == 0)
            *err = runs[i].err;
    }
    double s = (double)(kvq__mono_us() - t0) / 1e6;
    kvq__free(runs);
    kvq__free(th);
    return s > 0 ? (double)done / s : 0.0;
}

int cmd_bench(cli *c, int argc, char **argv)
{
    long long items = 20000, threads = 4;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            items = 2000;
        } else if (strcmp(argv[i], "--items") == 0) {
            if (i + 1 >= argc || cli_parse_int(argv[i + 1], 1, 10000000, &items) != 0)
                return cli_usage("bench", "--items needs a count");
            i++;
        } else if (strcmp(argv[i], "--threads") == 0) {
            if (i + 1 >= argc || cli_parse_int(argv[i + 1], 1, 256, &threads) != 0)
                return cli_usage("bench", "--threads needs a count from 1 to 256");
            i++;
        } else {
            return cli_usage("bench", "unexpected argument '%s'", cli_arg(argv[i]));
        }
    }
    c->create_db = 1;
    int rc = cli_open(c);
    if (rc != 0)
        return rc;
    int tty = isatty(2);
    kvq_queue_type types[] = { KVQ_QUEUE_DURABLE, KVQ_QUEUE_FIFO, KVQ_QUEUE_PRIORITY };
    if (c->json)
        printf("[");
    else
        printf("| queue | threads | pushes/s | pops/s |\n|---|---:|---:|---:|\n");
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
        char name[64];
        snprintf(name, sizeof(name), "bench-%s-%ld", cli_type_name(types[t]), (long)getpid());
        kvq_queue_settings settings = KVQ_QUEUE_SETTINGS_INIT;
        settings.type = types[t];
        settings.max_deliveries = 0;
        int err = kvq_queue_create_named(c->db, name, &settings);
        cli_queue *q = NULL;
        if (err == 0)
            err = cli_queue_open(&q, c->db, name, types[t]);
        if (err != 0)
            return cli_fail(err, "cannot create a scratch queue");
        if (tty)
            fprintf(stderr, "\r%s: pushing %lld items with %lld threads...   ",
                    cli_type_name(types[t]), items, threads);
        double push = run_phase(q, (int)threads, (long)items, 0, &err);
        if (tty)
            fprintf(stderr, "\r%s: popping %lld items with %lld threads...    ",
                    cli_type_name(types[t]), items, threads);
        double pop = err == 0 ? run_phase(q, (int)threads, (long)items, 1, &err) : 0.0;
        if (tty)
            fprintf(stderr, "\r%60s\r", "");
        (void)cli_queue_delete(q);
        cli_queue_close(q);
        if (kvq_queue_forget_named(c->db, name) != 0)
            fprintf(stderr, "kvq: the scratch queue %s could not be removed: %s\n", name,
                    kvq_last_error());
        if (err != 0)
            return cli_fail(err, "bench failed");
        if (c->json)
            printf("%s{\"queue\":\"%s\",\"threads\":%lld,\"pushes_per_s\":%.0f,"
                   "\"pops_per_s\":%.0f}",
                   t ? "," : "", cli_type_name(types[t]), threads, push, pop);
        else
            printf("| %s | %lld | %.0f | %.0f |\n", cli_type_name(types[t]), threads, push, pop);
        fflush(stdout);
    }
    if (c->json)
        printf("]\n");
    return 0;
}
