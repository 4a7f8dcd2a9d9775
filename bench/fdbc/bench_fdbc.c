/* FoundationDB's C API (libkvq_fdb_c.so) against kvq's own transaction API, on the same
 * embedded engine, the same directory and the same process: the cost of the C API's layer
 * (futures, copies of results, the network thread's rules).
 *
 *   bench_fdbc [--seconds S] [--dir DIR] [--quick]
 *
 * Three workloads, each run in alternating chunks through both APIs, so that both meet the same
 * machine conditions: a transaction of 10 point reads, a transaction reading a range of 100 rows,
 * and a transaction writing one key (a durable commit). Prints a Markdown table: transactions
 * per second through each API and the ratio of the C API to kvq's (1.00 is the same speed; the
 * target is at least 0.90). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fdbc/fdbc_extra.h"
#include "kvq/kvq.h"

#define KVQ_FDB_PROTOTYPE(ret, name, params) ret name params;
KVQ_FDB_FUNCTIONS(KVQ_FDB_PROTOTYPE)
#undef KVQ_FDB_PROTOTYPE

#define ROWS  1000
#define CHUNK 100

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int err)
{
    fprintf(stderr, "bench_fdbc: %s: error %d (%s)\n", what, err, kvq_strerror(err));
    exit(1);
}

static void key_of(char *out, int i)
{
    snprintf(out, 16, "b/%05d", i);
}

/* ---- kvq's API -------------------------------------------------------------------------------- */

static void kvq_gets(kvq_txn *t, unsigned *seed)
{
    for (int i = 0; i < 10; i++) {
        char k[16];
        key_of(k, (int)(rand_r(seed) % ROWS));
        kvq_bytes v;
        int present;
        int rc = kvq_txn_get(&v, &present, t, (const uint8_t *)k, strlen(k), 0);
        if (rc != 0 || !present)
            die("kvq get", rc);
    }
}

static void kvq_range(kvq_txn *t, unsigned *seed)
{
    char b[16];
    key_of(b, (int)(rand_r(seed) % (ROWS - 100)));
    const kvq_kv *kvs;
    size_t n;
    int rc = kvq_txn_get_range(&kvs, &n, NULL, t, (const uint8_t *)b, strlen(b),
                               (const uint8_t *)"b0", 2, 100, 0);
    if (rc != 0 || n != 100)
        die("kvq get_range", rc);
}

static void kvq_write(kvq_txn *t, unsigned *seed)
{
    char k[16];
    key_of(k, (int)(rand_r(seed) % ROWS));
    int rc = kvq_txn_set(t, (const uint8_t *)k, strlen(k), (const uint8_t *)"value-w", 7);
    if (rc != 0)
        die("kvq set", rc);
}

static void run_kvq(kvq_db *db, void (*body)(kvq_txn *, unsigned *), unsigned *seed, int n)
{
    kvq_txn *t;
    int rc = kvq_txn_create(&t, db);
    if (rc != 0)
        die("kvq_txn_create", rc);
    for (int i = 0; i < n; i++) {
        body(t, seed);
        rc = kvq_txn_commit(t);
        if (rc != 0)
            die("kvq commit", rc);
        kvq_txn_reset(t);
    }
    kvq_txn_destroy(t);
}

/* ---- the C API -------------------------------------------------------------------------------- */

static fdb_error_t wait_f(FDBFuture *f)
{
    fdb_error_t e = fdb_future_block_until_ready(f);
    return e != 0 ? e : fdb_future_get_error(f);
}

static void c_gets(FDBTransaction *tr, unsigned *seed)
{
    for (int i = 0; i < 10; i++) {
        char k[16];
        key_of(k, (int)(rand_r(seed) % ROWS));
        FDBFuture *f = fdb_transaction_get(tr, (const uint8_t *)k, (int)strlen(k), 0);
        fdb_bool_t present = 0;
        const uint8_t *v;
        int len;
        fdb_error_t e = wait_f(f);
        if (e == 0)
            e = fdb_future_get_value(f, &present, &v, &len);
        if (e != 0 || !present)
            die("fdb get", e);
        fdb_future_destroy(f);
    }
}

static void c_range(FDBTransaction *tr, unsigned *seed)
{
    char b[16];
    key_of(b, (int)(rand_r(seed) % (ROWS - 100)));
    FDBFuture *f = fdb_transaction_get_range(tr, (const uint8_t *)b, (int)strlen(b), 0, 1,
                                             (const uint8_t *)"b0", 2, 0, 1, 100, 0,
                                             FDB_STREAMING_MODE_EXACT, 1, 0, 0);
    const FDBKeyValue *kvs;
    int n = 0;
    fdb_bool_t more;
    fdb_error_t e = wait_f(f);
    if (e == 0)
        e = fdb_future_get_keyvalue_array(f, &kvs, &n, &more);
    if (e != 0 || n != 100)
        die("fdb get_range", e);
    fdb_future_destroy(f);
}

static void c_write(FDBTransaction *tr, unsigned *seed)
{
    char k[16];
    key_of(k, (int)(rand_r(seed) % ROWS));
    fdb_transaction_set(tr, (const uint8_t *)k, (int)strlen(k), (const uint8_t *)"value-w", 7);
}

static void run_c(FDBDatabase *db, void (*body)(FDBTransaction *, unsigned *), unsigned *seed,
                  int n)
{
    FDBTransaction *tr;
    fdb_error_t e = fdb_database_create_transaction(db, &tr);
    if (e != 0)
        die("fdb_database_create_transaction", e);
    for (int i = 0; i < n; i++) {
        body(tr, seed);
        FDBFuture *f = fdb_transaction_commit(tr);
        e = wait_f(f);
        fdb_future_destroy(f);
        if (e != 0)
            die("fdb commit", e);
        fdb_transaction_reset(tr);
    }
    fdb_transaction_destroy(tr);
}

static void *run_net(void *arg)
{
    (void)arg;
    fdb_error_t e = fdb_run_network();
    if (e != 0)
        die("fdb_run_network", e);
    return NULL;
}

int main(int argc, char **argv)
{
    double seconds = 2.0;
    char dir[512] = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            snprintf(dir, sizeof(dir), "%s/bench-fdbc-XXXXXX", argv[++i]);
        else if (strcmp(argv[i], "--quick") == 0)
            seconds = 0.3;
        else {
            fprintf(stderr, "usage: bench_fdbc [--seconds S] [--dir DIR] [--quick]\n");
            return 2;
        }
    }
    if (seconds <= 0) {
        fprintf(stderr, "bench_fdbc: --seconds must be positive\n");
        return 2;
    }
    if (dir[0] == '\0') {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/bench-fdbc-XXXXXX", tmp != NULL ? tmp : "/tmp");
    }
    if (mkdtemp(dir) == NULL) {
        perror("bench_fdbc: mkdtemp");
        return 1;
    }
    char path[600], cluster[600];
    snprintf(path, sizeof(path), "%s/db", dir);
    snprintf(cluster, sizeof(cluster), "%s/kvq.cluster", dir);
    FILE *fp = fopen(cluster, "w");
    if (fp == NULL) {
        perror("bench_fdbc: cluster file");
        return 1;
    }
    fprintf(fp, "kvq:%s\n", path);
    fclose(fp);

    kvq_db *kdb;
    int rc = kvq_db_open(&kdb, path, NULL);
    if (rc != 0)
        die("kvq_db_open", rc);
    kvq_txn *t;
    if ((rc = kvq_txn_create(&t, kdb)) != 0)
        die("kvq_txn_create", rc);
    for (int i = 0; i < ROWS; i++) {
        char k[16];
        key_of(k, i);
        if ((rc = kvq_txn_set(t, (const uint8_t *)k, strlen(k), (const uint8_t *)"value-0", 7)))
            die("load", rc);
    }
    if ((rc = kvq_txn_commit(t)) != 0)
        die("load commit", rc);
    kvq_txn_destroy(t);

    pthread_t net;
    fdb_error_t e = fdb_select_api_version_impl(730, 730);
    if (e == 0)
        e = fdb_setup_network();
    if (e != 0)
        die("network", e);
    if (pthread_create(&net, NULL, run_net, NULL) != 0)
        die("pthread_create", KVQ_EINTERNAL_ERROR);
    FDBDatabase *fdb;
    if ((e = fdb_create_database(cluster, &fdb)) != 0)
        die("fdb_create_database", e);

    static const struct {
        const char *name;
        void (*k)(kvq_txn *, unsigned *);
        void (*c)(FDBTransaction *, unsigned *);
    } loads[] = {
        { "10 point reads per transaction", kvq_gets, c_gets },
        { "a range of 100 rows per transaction", kvq_range, c_range },
        { "one write per transaction (durable commit)", kvq_write, c_write },
    };
    printf("| workload | kvq API (txn/s) | C API (txn/s) | C API / kvq API |\n");
    printf("| --- | ---: | ---: | ---: |\n");
    int worst_ok = 1;
    for (size_t w = 0; w < sizeof(loads) / sizeof(loads[0]); w++) {
        unsigned seed = 12345;
        double tk = 0, tc = 0;
        long nk = 0, nc = 0;
        /* Warm both up, then alternate chunks until each has had its share of the time. */
        run_kvq(kdb, loads[w].k, &seed, 20);
        run_c(fdb, loads[w].c, &seed, 20);
        while (tk + tc < seconds) {
            double t0 = now_s();
            run_c(fdb, loads[w].c, &seed, CHUNK);
            double t1 = now_s();
            run_kvq(kdb, loads[w].k, &seed, CHUNK);
            double t2 = now_s();
            tc += t1 - t0;
            tk += t2 - t1;
            nk += CHUNK;
            nc += CHUNK;
        }
        double rk = (double)nk / tk, rc2 = (double)nc / tc;
        printf("| %s | %.0f | %.0f | %.2f |\n", loads[w].name, rk, rc2, rc2 / rk);
        if (rc2 / rk < 0.90)
            worst_ok = 0;
    }
    printf("\nC API within 10%% of kvq's API in every workload: %s\n", worst_ok ? "yes" : "no");
    fflush(stdout);

    fdb_database_destroy(fdb);
    if ((e = fdb_stop_network()) != 0)
        die("fdb_stop_network", e);
    pthread_join(net, NULL);
    kvq_db_close(kdb);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_fdbc: cannot remove %s\n", dir);
    return 0;
}
