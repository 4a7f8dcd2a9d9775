/* The log store with its table (docs/logstore.md): memory per byte of live data and the time
 * to open after kill -9, with many items queued. Run by hand (a bench, never a timed test):
 *
 *   bench_logstore [--items N] [--procs P] [--dir DIR] [--growth]
 *
 * 1. fill: N items of 100 bytes pushed into a durable queue of a new "log:" database (batches
 *    of 1,000), then the database kept open past the window so that its applier takes the
 *    last batches into the table; closed.
 * 2. memory: 1 process, then P at once, each opens the database in a fresh child, reads the
 *    queue's length and its head (a peek), and reports its resident anonymous memory before and
 *    after;
 *    bytes of memory per byte of live data (the items' values) per process.
 * 3. kill -9: a child pushes and pops (one item each, durable) beside the N items for 3 s and
 *    is killed with SIGKILL; the time a fresh process takes to open the database and read the
 *    queue's length and its head (a peek).
 * 4. growth (--growth; issue 31's growth row): push and pop rates, one durable item per
 *    transaction and batches of 100, on the queue with the N items (pushes at its tail, pops
 *    its oldest items, which the table holds) and on an empty queue of a second new database,
 *    alternated (empty, full, empty, full, ...) for ROUNDS rounds in the same run; prints each
 *    rate and the ratio full / empty of the medians.
 * Prints one line per measure. Wall-clock figures on a shared machine are noisy: say so. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvq/kvq.h"

enum { VLEN = 100, BATCH = 1000, MAX_PROCS = 64, ROUNDS = 5, OPS = 400, BOPS = 40, BK = 100 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long rss_anon_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "RssAnon: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "bench_logstore: %s: %s (%s)\n", what, kvq_strerror(rc), kvq_last_error());
    _exit(1);
}

static void open_queue(kvq_db **db, kvq_queue **q, const char *url)
{
    int rc = kvq_db_open(db, url, NULL);
    if (rc != 0)
        die("open", rc);
    if ((rc = kvq_queue_open(q, *db, KVQ_QUEUE_DURABLE, NULL, NULL)) != 0)
        die("queue open", rc);
}

static void fill(const char *url, long items)
{
    kvq_db *db;
    kvq_queue *q;
    open_queue(&db, &q, url);
    static uint8_t vals[BATCH][VLEN];
    static kvq_bytes views[BATCH];
    double t0 = now_s();
    for (long i = 0; i < items; i += BATCH) {
        size_t k = (size_t)(items - i < BATCH ? items - i : BATCH);
        for (size_t j = 0; j < k; j++) {
            uint64_t seq = (uint64_t)i + j;
            memcpy(vals[j], &seq, sizeof seq);
            memset(vals[j] + sizeof seq, 'a' + (int)(seq % 26), VLEN - sizeof seq);
            views[j].data = vals[j];
            views[j].len = VLEN;
        }
        int rc = kvq_queue_push_many(q, views, k);
        if (rc != 0)
            die("push", rc);
    }
    double t1 = now_s();
    /* past the window (6 s), so that the applier takes the last batches too */
    sleep(8);
    kvq_queue_close(q);
    kvq_db_close(db);
    printf("fill: items=%ld value_bytes=%d push_s=%.1f (then 8 s open past the window)\n", items,
           VLEN, t1 - t0);
    fflush(stdout);
}

typedef struct shared {
    double delta_kb[MAX_PROCS], open_s[MAX_PROCS];
    uint64_t len[MAX_PROCS];
    int ready;
} shared;

/* Child: open, read the length and the head; report memory and time; wait for the others. */
static void measure(const char *url, shared *sh, int idx, int n)
{
    long before = rss_anon_kb();
    double t0 = now_s();
    kvq_db *db;
    kvq_queue *q;
    open_queue(&db, &q, url);
    uint64_t len = 0;
    int rc = kvq_queue_len(&len, q);
    if (rc != 0)
        die("len", rc);
    kvq_buf head = KVQ_BUF_INIT;
    if ((rc = kvq_queue_peek(&head, q)) != 0)
        die("peek", rc);
    if (head.len != VLEN)
        die("peek: not an item", KVQ_EINVAL);
    sh->open_s[idx] = now_s() - t0;
    sh->delta_kb[idx] = (double)(rss_anon_kb() - before);
    sh->len[idx] = len;
    __atomic_add_fetch(&sh->ready, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&sh->ready, __ATOMIC_SEQ_CST) < n)
        usleep(10000);
    kvq_buf_dispose(&head);
    kvq_queue_close(q);
    kvq_db_close(db);
    _exit(0);
}

static void run_measure(const char *url, shared *sh, int n, long items)
{
    memset(sh, 0, sizeof *sh);
    pid_t pids[MAX_PROCS];
    for (int i = 0; i < n; i++) {
        fflush(NULL);
        if ((pids[i] = fork()) == 0)
            measure(url, sh, i, n);
    }
    for (int i = 0; i < n; i++)
        waitpid(pids[i], NULL, 0);
    double kb = 0, worst = 0, open_max = 0;
    for (int i = 0; i < n; i++) {
        kb += sh->delta_kb[i];
        if (sh->delta_kb[i] > worst)
            worst = sh->delta_kb[i];
        if (sh->open_s[i] > open_max)
            open_max = sh->open_s[i];
    }
    double live = (double)items * VLEN;
    printf("memory: procs=%d items=%llu anon_kib_per_proc_mean=%.0f max=%.0f "
           "bytes_per_live_byte_per_proc=%.4f (max %.4f) open_and_first_read_s_max=%.3f\n",
           n, (unsigned long long)sh->len[0], kb / n, worst, kb / n * 1024 / live,
           worst * 1024 / live, open_max);
}

static void churn(const char *url)
{
    kvq_db *db;
    kvq_queue *q;
    open_queue(&db, &q, url);
    uint8_t v[VLEN];
    memset(v, 'c', sizeof v);
    kvq_buf out = KVQ_BUF_INIT;
    for (;;) {
        int rc = kvq_queue_push(q, v, sizeof v);
        if (rc != 0)
            die("churn push", rc);
        /* pops take the queue's head: the oldest of the N items */
        if ((rc = kvq_queue_pop(&out, q)) != 0 && rc != KVQ_ENOTFOUND)
            die("churn pop", rc);
    }
}

/* ---- growth: rates with the N items queued against an empty queue ---- */

/* The rates of one measure, items per second: single pushes, single pops, batched pushes,
 * batched pops. */
typedef struct rates {
    double push1, pop1, push100, pop100;
} rates;

static void measure_rates(kvq_queue *q, rates *out)
{
    uint8_t v[VLEN];
    memset(v, 'g', sizeof v);
    kvq_buf b = KVQ_BUF_INIT;
    double t0 = now_s();
    for (int i = 0; i < OPS; i++) {
        int rc = kvq_queue_push(q, v, sizeof v);
        if (rc != 0)
            die("growth push", rc);
    }
    double t1 = now_s();
    for (int i = 0; i < OPS; i++) {
        int rc = kvq_queue_pop(&b, q);
        if (rc != 0)
            die("growth pop", rc);
    }
    double t2 = now_s();
    static kvq_bytes views[BK];
    for (int j = 0; j < BK; j++)
        views[j] = (kvq_bytes){ v, VLEN };
    for (int i = 0; i < BOPS; i++) {
        int rc = kvq_queue_push_many(q, views, BK);
        if (rc != 0)
            die("growth push_many", rc);
    }
    double t3 = now_s();
    static kvq_buf outs[BK];
    for (int i = 0; i < BOPS; i++) {
        size_t n = 0;
        int rc = kvq_queue_pop_k(outs, &n, q, BK);
        if (rc != 0 || n != BK)
            die("growth pop_k", rc != 0 ? rc : KVQ_EINVAL);
    }
    double t4 = now_s();
    for (int j = 0; j < BK; j++)
        kvq_buf_dispose(&outs[j]);
    kvq_buf_dispose(&b);
    out->push1 = OPS / (t1 - t0);
    out->pop1 = OPS / (t2 - t1);
    out->push100 = (double)BOPS * BK / (t3 - t2);
    out->pop100 = (double)BOPS * BK / (t4 - t3);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void growth(const char *full_url, const char *empty_url, long items)
{
    kvq_db *fdb, *edb;
    kvq_queue *fq, *eq;
    open_queue(&fdb, &fq, full_url);
    open_queue(&edb, &eq, empty_url);
    rates r[2][ROUNDS];
    for (int i = 0; i < ROUNDS; i++) {
        measure_rates(eq, &r[0][i]);
        measure_rates(fq, &r[1][i]);
        printf("growth: round=%d empty push1=%.0f pop1=%.0f push100=%.0f pop100=%.0f | "
               "queued=%ld push1=%.0f pop1=%.0f push100=%.0f pop100=%.0f (items/s)\n",
               i, r[0][i].push1, r[0][i].pop1, r[0][i].push100, r[0][i].pop100, items,
               r[1][i].push1, r[1][i].pop1, r[1][i].push100, r[1][i].pop100);
        fflush(stdout);
    }
    double m[2][4];
    for (int w = 0; w < 2; w++) {
        double a[4][ROUNDS];
        for (int i = 0; i < ROUNDS; i++) {
            a[0][i] = r[w][i].push1;
            a[1][i] = r[w][i].pop1;
            a[2][i] = r[w][i].push100;
            a[3][i] = r[w][i].pop100;
        }
        for (int k = 0; k < 4; k++)
            m[w][k] = median(a[k], ROUNDS);
    }
    printf("growth: queued=%ld ratio full/empty of the medians: push1=%.2f pop1=%.2f "
           "push100=%.2f pop100=%.2f\n",
           items, m[1][0] / m[0][0], m[1][1] / m[0][1], m[1][2] / m[0][2], m[1][3] / m[0][3]);
    uint64_t len = 0;
    int rc = kvq_queue_len(&len, fq);
    if (rc != 0)
        die("len", rc);
    printf("growth: queued after=%llu (the rounds push and pop as many)\n",
           (unsigned long long)len);
    fflush(stdout);
    kvq_queue_close(fq);
    kvq_db_close(fdb);
    kvq_queue_close(eq);
    kvq_db_close(edb);
}

int main(int argc, char **argv)
{
    long items = 1000000;
    int procs = 8;
    const char *dir = NULL;
    int do_growth = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--items") == 0 && i + 1 < argc)
            items = atol(argv[++i]);
        else if (strcmp(argv[i], "--procs") == 0 && i + 1 < argc)
            procs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--growth") == 0)
            do_growth = 1;
        else {
            fprintf(stderr,
                    "usage: bench_logstore [--items N] [--procs P] [--dir DIR] [--growth]\n");
            return 2;
        }
    }
    if (items < 1 || procs < 1 || procs > MAX_PROCS)
        return 2;
    char tmp[] = "/tmp/kvq-bench-logstore-XXXXXX";
    if (dir == NULL && (dir = mkdtemp(tmp)) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char url[600];
    snprintf(url, sizeof url, "log:%s/db", dir);
    shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    fflush(NULL);
    pid_t p = fork();
    if (p == 0) {
        fill(url, items);
        _exit(0);
    }
    waitpid(p, NULL, 0);
    run_measure(url, sh, 1, items);
    if (procs > 1)
        run_measure(url, sh, procs, items);
    /* kill -9 while pushing and popping beside the N items */
    fflush(NULL);
    p = fork();
    if (p == 0)
        churn(url);
    sleep(3);
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    double t0 = now_s();
    p = fork();
    if (p == 0) {
        kvq_db *db;
        kvq_queue *q;
        open_queue(&db, &q, url);
        uint64_t len = 0;
        kvq_buf out = KVQ_BUF_INIT;
        int rc = kvq_queue_len(&len, q);
        if (rc != 0)
            die("len after kill", rc);
        if ((rc = kvq_queue_peek(&out, q)) != 0)
            die("peek after kill", rc);
        printf("kill -9: queued=%llu\n", (unsigned long long)len);
        fflush(stdout);
        kvq_buf_dispose(&out);
        kvq_queue_close(q);
        kvq_db_close(db);
        _exit(0);
    }
    waitpid(p, NULL, 0);
    printf("kill -9: open_len_and_peek_s=%.3f (one process, page cache warm)\n", now_s() - t0);
    if (do_growth) {
        char empty_url[600];
        snprintf(empty_url, sizeof empty_url, "log:%s/empty", dir);
        fflush(NULL);
        p = fork();
        if (p == 0) {
            growth(url, empty_url, items);
            _exit(0);
        }
        waitpid(p, NULL, 0);
    }
    return 0;
}
