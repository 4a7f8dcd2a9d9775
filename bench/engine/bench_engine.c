/* Commits per second of the embedded engine, beside the two things that bound it, measured in
 * the same run: a raw SQLite commit loop (same table, same sync settings) and the disk's own
 * fsync rate. One small key per transaction, durable mode.
 *
 *   bench_engine [--seconds S] [--dir DIR] [--quick]
 */
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "util/util.h"

static double seconds = 2.0;
static char base[512] = "";

static double now_s(void)
{
    return (double)kvq__mono_us() / 1e6;
}

static void rmrf(const char *p)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", p);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", p);
}

static double fsync_rate(void)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/fsync.dat", base);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || posix_fallocate(fd, 0, 4096 * 256) != 0) {
        perror("fsync file");
        exit(1);
    }
    fdatasync(fd);
    char buf[4096];
    memset(buf, 'x', sizeof(buf));
    long n = 0;
    double t0 = now_s(), t;
    do {
        if (pwrite(fd, buf, sizeof(buf), (off_t)(n % 256) * 4096) != (ssize_t)sizeof(buf) ||
            fdatasync(fd) != 0) {
            perror("fsync loop");
            exit(1);
        }
        n++;
        t = now_s();
    } while (t - t0 < seconds);
    close(fd);
    unlink(path);
    return (double)n / (t - t0);
}

static double sqlite_rate(void)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/raw.db", base);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) {
        fprintf(stderr, "sqlite open failed\n");
        exit(1);
    }
    sqlite3_exec(db,
                 "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                 "CREATE TABLE kv(key BLOB PRIMARY KEY, value BLOB NOT NULL, crc INTEGER NOT "
                 "NULL) WITHOUT ROWID;",
                 NULL, NULL, NULL);
    sqlite3_stmt *st;
    sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO kv VALUES (?1, ?2, 0)", -1, &st, NULL);
    long n = 0;
    double t0 = now_s(), t;
    do {
        char key[32];
        int kn = snprintf(key, sizeof(key), "k%08ld", n % 1000);
        sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        sqlite3_bind_blob(st, 1, key, kn, SQLITE_STATIC);
        sqlite3_bind_blob(st, 2, "value-of-sixteen", 16, SQLITE_STATIC);
        sqlite3_step(st);
        sqlite3_reset(st);
        if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
            fprintf(stderr, "sqlite commit failed\n");
            exit(1);
        }
        n++;
        t = now_s();
    } while (t - t0 < seconds);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return (double)n / (t - t0);
}

typedef struct worker {
    kvq_db *db;
    int id;
    double deadline;
    long commits;
    int rc;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    kvq_txn *txn;
    if ((w->rc = kvq_txn_create(&txn, w->db)) != 0)
        return NULL;
    long i = 0;
    while (now_s() < w->deadline) {
        char key[32];
        int kn = snprintf(key, sizeof(key), "t%02d-%08ld", w->id, i % 1000);
        for (;;) {
            int rc = kvq_txn_set(txn, (const uint8_t *)key, (size_t)kn,
                                 (const uint8_t *)"value-of-sixteen", 16);
            if (rc == 0)
                rc = kvq_txn_commit(txn);
            if (rc == 0)
                break;
            rc = kvq_txn_on_error(txn, rc);
            if (rc != 0) {
                w->rc = rc;
                kvq_txn_destroy(txn);
                return NULL;
            }
        }
        kvq_txn_reset(txn);
        w->commits++;
        i++;
    }
    kvq_txn_destroy(txn);
    return NULL;
}

static double kvq_rate(const char *path, int threads, uint64_t *batches)
{
    kvq_db *db;
    int rc = kvq_db_open(&db, path, NULL);
    if (rc != 0) {
        fprintf(stderr, "open: %s\n", kvq_last_error());
        exit(1);
    }
    worker w[64];
    pthread_t th[64];
    double t0 = now_s();
    for (int i = 0; i < threads; i++) {
        w[i] = (worker){ .db = db, .id = i, .deadline = t0 + seconds };
        pthread_create(&th[i], NULL, work, &w[i]);
    }
    long total = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        if (w[i].rc != 0) {
            fprintf(stderr, "worker: %s\n", kvq_strerror(w[i].rc));
            exit(1);
        }
        total += w[i].commits;
    }
    double t = now_s() - t0;
    kvq_db_stats s;
    if (kvq_db_get_stats(&s, db) == 0 && batches != NULL)
        *batches = s.batches;
    kvq_db_close(db);
    return (double)total / t;
}

static double kvq_proc_rate(const char *path, int procs)
{
    int fds[16][2];
    for (int p = 0; p < procs; p++) {
        if (pipe(fds[p]) != 0)
            exit(1);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[p][0]);
            double r = kvq_rate(path, 1, NULL);
            if (write(fds[p][1], &r, sizeof(r)) != (ssize_t)sizeof(r))
                _exit(1);
            _exit(0);
        }
        close(fds[p][1]);
    }
    double sum = 0;
    for (int p = 0; p < procs; p++) {
        double r = 0;
        if (read(fds[p][0], &r, sizeof(r)) != (ssize_t)sizeof(r))
            fprintf(stderr, "child %d failed\n", p);
        sum += r;
        close(fds[p][0]);
    }
    while (wait(NULL) > 0) {
    }
    return sum;
}

/* Seconds to buffer n point writes (clears, or sets for the baseline) in one transaction, in
 * key order as a batch pop clears its items; nothing is committed. */
static double buffer_time(const char *path, int n, int clears)
{
    kvq_db *db = NULL;
    kvq_txn *t = NULL;
    if (kvq_db_open(&db, path, NULL) != 0 || kvq_txn_create(&t, db) != 0) {
        fprintf(stderr, "bench_engine: %s\n", kvq_last_error());
        exit(1);
    }
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        char k[32];
        int kn = snprintf(k, sizeof(k), "clear/%08d", i);
        int rc = clears ? kvq_txn_clear(t, (const uint8_t *)k, (size_t)kn)
                        : kvq_txn_set(t, (const uint8_t *)k, (size_t)kn, (const uint8_t *)"", 0);
        if (rc != 0) {
            fprintf(stderr, "bench_engine: %s\n", kvq_last_error());
            exit(1);
        }
    }
    double dt = now_s() - t0;
    kvq_txn_destroy(t);
    kvq_db_close(db);
    return dt;
}

int main(int argc, char **argv)
{
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            seconds = 0.3;
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else {
            fprintf(stderr, "usage: bench_engine [--seconds S] [--dir DIR] [--quick]\n");
            return 2;
        }
    }
    snprintf(base, sizeof(base), "%s/kvq-bench-XXXXXX",
             dir ? dir : (getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp"));
    if (mkdtemp(base) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    printf("embedded engine, durable commits, one 16-byte value per transaction, %.1f s each\n",
           seconds);
    double fs = fsync_rate();
    double raw = sqlite_rate();
    printf("| what | commits/s | ratio |\n|---|---:|---:|\n");
    printf("| disk fdatasync loop (4 KiB writes) | %.0f | |\n", fs);
    printf("| raw SQLite loop (WAL, synchronous=FULL) | %.0f | 1.00 x raw |\n", raw);
    double one = 0;
    int counts[] = { 1, 2, 4, 8 };
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        char path[600];
        snprintf(path, sizeof(path), "%s/kvq-%d", base, counts[i]);
        uint64_t batches = 0;
        double r = kvq_rate(path, counts[i], &batches);
        if (counts[i] == 1)
            one = r;
        double per = batches > 0 ? r * seconds / (double)batches : 0.0;
        printf("| kvq, %d thread%s | %.0f | %.2f x raw, %.2f x 1 thread, %.1f commits per sync |\n",
               counts[i], counts[i] == 1 ? "" : "s", r, r / raw, one > 0 ? r / one : 0.0, per);
        rmrf(path);
    }
    char path[600];
    snprintf(path, sizeof(path), "%s/kvq-procs", base);
    double pr = kvq_proc_rate(path, 2);
    printf("| kvq, 2 processes | %.0f | %.2f x raw, %.2f x 1 thread |\n", pr, pr / raw,
           one > 0 ? pr / one : 0.0);
    snprintf(path, sizeof(path), "%s/kvq-clears", base);
    int nclear = seconds < 1.0 ? 2000 : 10000;
    double ts = buffer_time(path, nclear, 0), tc = buffer_time(path, nclear, 1);
    printf("| kvq, %d point clears in one transaction (buffering only) | %.0f ms | %.2f x "
           "as many sets |\n",
           nclear, tc * 1e3, ts > 0 ? tc / ts : 0.0);
    rmrf(path);
    rmrf(base);
    return 0;
}
