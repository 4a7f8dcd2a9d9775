/* 8 producer processes and 8 consumer processes (fork; each opens its own database handle) on
 * each layer: every item popped exactly once, per-producer order kept (FIFO, durable),
 * min-first batches (priority), and no push ever conflicts. Counts are multiplied by
 * $KVQ_TEST_SCALE (default 1). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "test_queue_conc.h"
#include "test_scale.h"

typedef struct shared {
    size_t consumed;
    uint64_t push_conflicts[64];
    int failed;
} shared;

static void write_log(const char *path, const conc_log *l)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        _exit(3);
    size_t n = l->n;
    int ok = fwrite(&n, sizeof(n), 1, f) == 1 && fwrite(&l->rc, sizeof(l->rc), 1, f) == 1 &&
             fwrite(l->err, sizeof(l->err), 1, f) == 1;
    if (n > 0)
        ok = ok && fwrite(l->prod, sizeof(uint32_t), n, f) == n &&
             fwrite(l->seq, sizeof(uint32_t), n, f) == n &&
             fwrite(l->prio, sizeof(int64_t), n, f) == n &&
             fwrite(l->batch, sizeof(uint32_t), n, f) == n;
    if (fclose(f) != 0 || !ok)
        _exit(3);
}

static int read_log(const char *path, conc_log *l)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    size_t n = 0;
    int ok = fread(&n, sizeof(n), 1, f) == 1 && fread(&l->rc, sizeof(l->rc), 1, f) == 1 &&
             fread(l->err, sizeof(l->err), 1, f) == 1 && n < 100000000;
    if (ok && n > 0) {
        l->prod = malloc(n * sizeof(uint32_t));
        l->seq = malloc(n * sizeof(uint32_t));
        l->prio = malloc(n * sizeof(int64_t));
        l->batch = malloc(n * sizeof(uint32_t));
        ok = l->prod && l->seq && l->prio && l->batch &&
             fread(l->prod, sizeof(uint32_t), n, f) == n &&
             fread(l->seq, sizeof(uint32_t), n, f) == n &&
             fread(l->prio, sizeof(int64_t), n, f) == n &&
             fread(l->batch, sizeof(uint32_t), n, f) == n;
        l->n = l->cap = n;
    }
    fclose(f);
    return ok ? 0 : -1;
}

static double scale(void)
{
    return kvq_test_scale();
}

static void run(conc_cfg c)
{
    c.items = (size_t)((double)c.items * scale());
    c.items -= c.items % (size_t)c.producers;
    tq_mkdir();
    /* Create the database before forking, then close it: children open their own handles. */
    kvq_db_close(tq_open_db(0, 0, 0));
    shared *sh =
        mmap(NULL, sizeof(shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(sh != MAP_FAILED);
    memset(sh, 0, sizeof(*sh));
    fflush(stdout);
    fflush(stderr);
    int n = c.producers + c.consumers;
    pid_t *pids = calloc((size_t)n, sizeof(pid_t));
    int64_t t0 = kvq__mono_us();
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            kvq_db *db = tq_open_db(0, 0, 0);
            if (i < c.consumers) {
                conc_log log;
                memset(&log, 0, sizeof(log));
                conc_consume(&c, db, i, &sh->consumed, &log);
                char path[320];
                snprintf(path, sizeof(path), "%s/log-%d", tq_dir, i);
                write_log(path, &log);
            } else {
                char err[200];
                int p = i - c.consumers;
                if (conc_produce(&c, db, (uint32_t)p, err, sizeof(err)) != 0) {
                    fprintf(stderr, "%s: %s\n", c.name, err);
                    __atomic_store_n(&sh->failed, 1, __ATOMIC_RELAXED);
                    __atomic_store_n(&sh->consumed, c.items, __ATOMIC_RELAXED);
                }
                kvq_db_stats st;
                if (kvq_db_get_stats(&st, db) == 0)
                    sh->push_conflicts[p] = st.conflicts;
            }
            kvq_db_close(db);
            _exit(0);
        }
        pids[i] = pid;
    }
    int crashed = 0;
    for (int i = 0; i < n; i++) {
        int status;
        waitpid(pids[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "%s: child %d ended with status 0x%x\n", c.name, i, status);
            crashed = 1;
        }
    }
    double secs = (double)(kvq__mono_us() - t0) / 1e6;
    conc_log *logs = calloc((size_t)c.consumers, sizeof(*logs));
    for (int i = 0; i < c.consumers && !crashed; i++) {
        char path[320];
        snprintf(path, sizeof(path), "%s/log-%d", tq_dir, i);
        if (read_log(path, &logs[i]) != 0) {
            fprintf(stderr, "%s: cannot read consumer %d's log\n", c.name, i);
            crashed = 1;
        }
    }
    int bad = crashed ? 1 : conc_check(&c, logs, c.consumers);
    uint64_t conflicts = 0;
    for (int p = 0; p < c.producers; p++)
        conflicts += sh->push_conflicts[p];
    printf("# %s: %zu items, %d+%d processes, %.1f s (%.0f items/s), push conflicts %llu\n", c.name,
           c.items, c.producers, c.consumers, secs, (double)c.items / secs,
           (unsigned long long)conflicts);
    fflush(stdout);
    int failed = sh->failed;
    for (int i = 0; i < c.consumers; i++)
        conc_log_free(&logs[i]);
    free(logs);
    free(pids);
    munmap(sh, sizeof(*sh));
    tq_rmdir();
    assert_false(failed);
    assert_int_equal(bad, 0);
    assert_int_equal(conflicts, 0);
}

static void test_durable(void **state)
{
    (void)state;
    run((conc_cfg){ "procs-durable", KVQ_QUEUE_DURABLE, 0, 100000, 8, 8, 20, 20, 0 });
}

static void test_fifo(void **state)
{
    (void)state;
    run((conc_cfg){ "procs-fifo", KVQ_QUEUE_FIFO, 0, 100000, 8, 8, 20, 20, 0 });
}

static void test_priority(void **state)
{
    (void)state;
    run((conc_cfg){ "procs-priority", KVQ_QUEUE_PRIORITY, 0, 20000, 8, 8, 20, 20, 0 });
}

static void test_fifo_hc(void **state)
{
    (void)state;
    run((conc_cfg){ "procs-fifo-hc", KVQ_QUEUE_FIFO, KVQ_QUEUE_HIGH_CONTENTION, 3000, 8, 8, 20, 1,
                    0 });
}

int main(int argc, char **argv)
{
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durable),
        cmocka_unit_test(test_fifo),
        cmocka_unit_test(test_priority),
        cmocka_unit_test(test_fifo_hc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
