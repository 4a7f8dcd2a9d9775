/* The power-cut test's workload (tests/powercut/pc_common.h says what it writes), run by
 * test_powercut over the file system layer (pc_shim.c, LD_PRELOAD), which ends it with a cut.
 *
 *   pc_worker URL LOG RUN THREADS TXNS PHASES TEST_FLAGS
 *
 * Opens URL twice (the storage is chosen by the URL, as the engine chooses it: two handles, as
 * two processes would, share the commit queue kvq.cq and the shared sync, so that a commit
 * leader writes and syncs the other handle's commits too), runs THREADS producers of TXNS
 * transactions each (thread t on handle t % 2), closes the database, and does that PHASES
 * times, so that cuts also
 * fall into opening (recovery, creation) and closing (the last checkpoint, the WAL's removal).
 * Producer t of run RUN is RUN * 16 + t. TEST_FLAGS are kvq_testing_options.flags (a broken
 * engine, to show that the test can fail; KVQ_TEST_EARLY_READ_ALL also makes each transaction
 * ride producer t + 1's newest commit, and PC_RIDE_AHEAD claim one more: pc_common.h). Appends "I p s" before each commit and "A p s" after
 * each acknowledged one to LOG; an error ends that producer ("F p s code"). At the end, asks the
 * layer to cut (a cut after a clean close); without the layer, exits 0. */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq/testing.h"
#include "pc_common.h"

static const char *url;
static int log_fd;
#define HANDLES 2
static kvq_db *dbs[HANDLES];
static int txns, threads;
static unsigned int worker_flags; /* PC_RIDE_AHEAD, KVQ_TEST_EARLY_READ_ALL (rides) */
static uint64_t next_seq[16];
static int stopped[16];
static uint64_t run;

static void log_line(const char *fmt, uint64_t p, uint64_t s, int code)
{
    char line[96];
    int n = snprintf(line, sizeof(line), fmt, (unsigned long long)p, (unsigned long long)s, code);
    if (write(log_fd, line, (size_t)n) != n)
        _exit(3);
}

/* The ride of transaction (p, s): reads the last number of producer q early (a snapshot read: it
 * adds no conflict) and sets p's ride to it (pc_common.h). */
static int ride(kvq_txn *t, uint64_t p, uint64_t q)
{
    uint8_t lk[11], rk[11], v[16];
    kvq_bytes got;
    int present = 0;
    int rc = kvq_txn_get(&got, &present, t, lk, pc_last_key(lk, q), KVQ_SNAPSHOT);
    if (rc != 0)
        return rc;
    uint64_t seen = present && got.len == 8 ? pc_le64(got.data) : 0;
    if (worker_flags & PC_RIDE_AHEAD)
        seen++;
    if (seen == 0)
        return 0;
    for (int i = 0; i < 8; i++) {
        v[i] = (uint8_t)(q >> (56 - 8 * i));
        v[8 + i] = (uint8_t)(seen >> (56 - 8 * i));
    }
    return kvq_txn_set(t, rk, pc_ride_key(rk, p), v, 16);
}

static int one_txn(kvq_db *db, uint64_t p, uint64_t s, uint64_t neighbour)
{
    static const uint8_t one[8] = { 1 };
    uint8_t k[PC_KEY_BYTES], lk[11], le[8];
    size_t len = pc_payload_len(p, s);
    uint8_t *v = malloc(len);
    if (v == NULL)
        return KVQ_ENOMEM;
    pc_payload(v, p, s, len);
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(s >> (8 * i));
    kvq_txn *t;
    int rc = kvq_txn_create(&t, db);
    if (rc == 0 && (worker_flags & KVQ_TEST_EARLY_READ_ALL))
        rc = ride(t, p, neighbour);
    if (rc == 0)
        rc = kvq_txn_set(t, k, pc_item_key(k, p, s), v, len);
    if (rc == 0 && s > PC_WINDOW)
        rc = kvq_txn_clear(t, k, pc_item_key(k, p, s - PC_WINDOW));
    if (rc == 0)
        rc = kvq_txn_set(t, lk, pc_last_key(lk, p), le, 8);
    if (rc == 0)
        rc = kvq_txn_atomic_op(t, (const uint8_t *)"pn", 2, one, 8, KVQ_MUT_ADD);
    if (rc == 0) {
        log_line("I %llu %llu\n", p, s, 0);
        rc = kvq_txn_commit(t);
    }
    kvq_txn_destroy(t);
    free(v);
    return rc;
}

static void *producer(void *arg)
{
    int t = (int)(intptr_t)arg;
    uint64_t p = run * 16 + (uint64_t)t;
    for (int i = 0; i < txns && !stopped[t]; i++) {
        uint64_t s = ++next_seq[t];
        int rc = one_txn(dbs[t % HANDLES], p, s, run * 16 + (uint64_t)((t + 1) % threads));
        if (rc == 0) {
            log_line("A %llu %llu\n", p, s, 0);
        } else {
            log_line("F %llu %llu %d\n", p, s, rc);
            fprintf(stderr, "pc_worker: producer %llu, transaction %llu: %s (%s)\n",
                    (unsigned long long)p, (unsigned long long)s, kvq_errname(rc),
                    kvq_last_error());
            stopped[t] = 1;
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: pc_worker URL LOG RUN THREADS TXNS PHASES TEST_FLAGS\n");
        return 2;
    }
    url = argv[1];
    run = strtoull(argv[3], NULL, 10);
    threads = atoi(argv[4]);
    txns = atoi(argv[5]);
    int phases = atoi(argv[6]);
    worker_flags = (unsigned int)strtoul(argv[7], NULL, 0);
    unsigned int flags = worker_flags & ~PC_RIDE_AHEAD;
    if (threads < 1 || threads > 16 || txns < 1 || phases < 1) {
        fprintf(stderr, "pc_worker: bad THREADS, TXNS or PHASES\n");
        return 2;
    }
    alarm(120); /* never hang a test */
    log_fd = open(argv[2], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (log_fd < 0) {
        perror(argv[2]);
        return 2;
    }
    for (int ph = 0; ph < phases; ph++) {
        kvq_testing_options to = KVQ_TESTING_OPTIONS_INIT;
        to.flags = flags;
        for (int h = 0; h < HANDLES; h++) {
            int rc = kvq_db_open_testing(&dbs[h], url, NULL, &to);
            if (rc != 0) {
                fprintf(stderr, "pc_worker: opening %s: %s (%s)\n", url, kvq_errname(rc),
                        kvq_last_error());
                return 4;
            }
        }
        pthread_t th[16];
        for (int t = 0; t < threads; t++)
            if (pthread_create(&th[t], NULL, producer, (void *)(intptr_t)t) != 0)
                return 5;
        for (int t = 0; t < threads; t++)
            pthread_join(th[t], NULL);
        for (int h = HANDLES - 1; h >= 0; h--) {
            kvq_db_close(dbs[h]);
            dbs[h] = NULL;
        }
    }
    void (*cut_now)(void) = NULL;
    void *sym = dlsym(RTLD_DEFAULT, "kvq_pc_cut_now");
    memcpy(&cut_now, &sym, sizeof(cut_now)); /* an object pointer to a function pointer */
    if (cut_now != NULL)
        cut_now();
    for (int t = 0; t < threads; t++)
        if (stopped[t])
            return 6;
    return 0;
}
