/* Durability beyond kill -9: a commit is acknowledged only after its WAL frames are synced.
 *
 * A child process commits transactions and writes "ACK n" to its standard output after each
 * commit returns. It runs under strace, which records (with file names) every write to the WAL,
 * every fsync/fdatasync, and the acknowledgements. The checker then requires, for every ACK, a
 * sync of the WAL after the last WAL write that precedes it. The same checker must fail on a
 * relaxed database (which does not sync each commit) and on a "durable" database broken with the
 * test-only knob KVQ_TEST_ACK_BEFORE_SYNC: a checker that cannot fail proves nothing. The test
 * is skipped (and says so, "syncorder: ... skipped=strace") when strace is not installed.
 * Prints "syncorder: acks=... unsynced_acks=0 ...".
 *
 * Crash points at the sync: the same child runs under strace with
 * "-e inject=fdatasync,fsync:signal=SIGKILL:when=N", so it dies on its Nth sync, after WAL frames
 * were written and before they were synced (or, for small N, while the database is being
 * created). The database must then open, every acknowledged key must be there, and the keys
 * present must be a prefix key-0..key-m (each commit all or nothing, none out of order). Prints
 * "crash: workload=sync-kill points=... lost=0 unexpected=0 damaged=0". */
#include "kvq_test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq/testing.h"
#include "test_scale.h"

static const char *self;

/* mode 0: durable; 1: relaxed; 2: durable, broken with KVQ_TEST_ACK_BEFORE_SYNC. */
static int child(const char *dir, int mode)
{
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    kvq_testing_options tk = KVQ_TESTING_OPTIONS_INIT;
    if (mode == 1)
        o.flags |= KVQ_DB_RELAXED;
    if (mode == 2)
        tk.flags |= KVQ_TEST_ACK_BEFORE_SYNC;
    kvq_db *db;
    if (kvq_db_open_testing(&db, dir, &o, &tk) != 0)
        return 3;
    setvbuf(stdout, NULL, _IONBF, 0);
    for (int i = 0; i < 20; i++) {
        kvq_txn *t;
        if (kvq_txn_create(&t, db) != 0)
            return 4;
        char key[32];
        int kn = snprintf(key, sizeof(key), "key-%d", i);
        if (kvq_txn_set(t, (const uint8_t *)key, (size_t)kn, (const uint8_t *)"v", 1) != 0 ||
            kvq_txn_commit(t) != 0)
            return 5;
        kvq_txn_destroy(t);
        char ack[32];
        int an = snprintf(ack, sizeof(ack), "ACK %d\n", i);
        if (write(1, ack, (size_t)an) != an)
            return 6;
    }
    kvq_db_close(db);
    return 0;
}

/* Runs the child under strace; returns the number of acknowledgements that were not preceded by
 * a sync of the WAL (after the WAL's last write), or -1 on failure to run. */
static int run_and_check(int mode, int *acks_out)
{
    char dir[256];
    if (kt_mkdtemp(dir, sizeof(dir), "sync") != 0)
        return -1;
    char db[300], log[300], cmd[2048];
    snprintf(db, sizeof(db), "%s/db", dir);
    snprintf(log, sizeof(log), "%s/trace", dir);
    snprintf(cmd, sizeof(cmd),
             /* LeakSanitizer cannot run under ptrace: switch it off in the traced child. */
             "ASAN_OPTIONS=detect_leaks=0 "
             "strace -f -qq -y -s 16 -e trace=pwrite64,pwritev,write,fsync,fdatasync -o %s "
             "%s child %s %d > /dev/null",
             log, self, db, mode);
    if (system(cmd) != 0)
        return -1;
    FILE *f = fopen(log, "r");
    if (f == NULL)
        return -1;
    char line[4096];
    int dirty = 0; /* the WAL was written since its last sync */
    int bad = 0, acks = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        int is_wal = strstr(line, "-wal>") != NULL;
        if (is_wal &&
            (strstr(line, "pwrite64(") || strstr(line, "pwritev(") || strstr(line, " write(")))
            dirty = 1;
        else if (is_wal && (strstr(line, "fdatasync(") || strstr(line, "fsync(")))
            dirty = 0;
        else if (strstr(line, "write(1") && strstr(line, "\"ACK ")) {
            acks++;
            if (dirty)
                bad++;
        }
    }
    fclose(f);
    if (kt_rm_rf(dir) != 0)
        return -1;
    *acks_out = acks;
    return bad;
}

static int have_strace(void)
{
    return kvq_test_have_strace("syncorder");
}

static void test_ack_after_sync(void **state)
{
    (void)state;
    if (!have_strace())
        skip();
    int acks = 0;
    int bad = run_and_check(0, &acks);
    printf("syncorder: mode=durable acks=%d unsynced_acks=%d\n", acks, bad);
    assert_int_equal(acks, 20);
    assert_int_equal(bad, 0);
}

static void test_checker_catches_relaxed(void **state)
{
    (void)state;
    if (!have_strace())
        skip();
    int acks = 0;
    int bad = run_and_check(1, &acks);
    printf("syncorder: mode=relaxed acks=%d unsynced_acks=%d (the checker must see them)\n", acks,
           bad);
    assert_int_equal(acks, 20);
    assert_true(bad > 0);
}

/* The broken engine: durable in name, acknowledging before the sync. */
static void test_checker_catches_ack_before_sync(void **state)
{
    (void)state;
    if (!have_strace())
        skip();
    int acks = 0;
    int bad = run_and_check(2, &acks);
    printf("syncorder: mode=broken_ack_before_sync acks=%d unsynced_acks=%d (the checker must see "
           "them)\n",
           acks, bad);
    assert_int_equal(acks, 20);
    assert_true(bad > 0);
}

/* Runs the child under strace, killed at its n-th sync. Returns the number of acknowledgements
 * it wrote, -1 if it could not run; fills the database directory in dir. */
static int run_killed_at_sync(const char *dir, int n)
{
    char db[96], out[96], cmd[1024];
    snprintf(db, sizeof(db), "%s/db", dir);
    snprintf(out, sizeof(out), "%s/acks", dir);
    snprintf(cmd, sizeof(cmd),
             "ASAN_OPTIONS=detect_leaks=0 "
             "strace -f -qq -o /dev/null -e trace=fsync,fdatasync "
             "-e inject=fsync,fdatasync:signal=SIGKILL:when=%d %s child %s 0 > %s 2>/dev/null",
             n, self, db, out);
    /* The child is killed, or finishes when it syncs fewer than n times. */
    if (system(cmd) == -1)
        return -1;
    FILE *f = fopen(out, "r");
    if (f == NULL)
        return -1;
    int acks = 0, i;
    while (fscanf(f, "ACK %d\n", &i) == 1)
        acks++;
    fclose(f);
    return acks;
}

static void test_killed_at_sync(void **state)
{
    (void)state;
    if (!have_strace())
        skip();
    int points = (int)kvq_test_scaled(40);
    int killed_points = 0, acked = 0, lost = 0, unexpected = 0, damaged = 0;
    for (int n = 1; n <= points; n++) {
        char dir[88];
        assert_int_equal(kt_mkdtemp(dir, sizeof(dir), "synckill"), 0);
        int acks = run_killed_at_sync(dir, n);
        assert_true(acks >= 0);
        killed_points += acks < 20;
        acked += acks;
        char db[96];
        snprintf(db, sizeof(db), "%s/db", dir);
        kvq_db *h = NULL;
        kvq_db_options o = KVQ_DB_OPTIONS_INIT;
        o.flags |= KVQ_DB_NO_CREATE;
        int rc = kvq_db_open(&h, db, &o);
        /* Killed before the database existed: nothing was acknowledged, nothing to check. */
        if (rc == KVQ_ENOTFOUND && acks == 0) {
            assert_int_equal(kt_rm_rf(dir), 0);
            continue;
        }
        if (rc != 0) {
            fprintf(stderr, "kill at sync %d: reopening failed: %s (%s)\n", n, kvq_errname(rc),
                    kvq_last_error());
            damaged++;
        } else {
            kvq_txn *t;
            assert_int_equal(kvq_txn_create(&t, h), 0);
            int last_present = -1;
            for (int i = 0; i < 20; i++) {
                char key[32];
                int kn = snprintf(key, sizeof(key), "key-%d", i);
                kvq_bytes v;
                int present = 0;
                rc = kvq_txn_get(&v, &present, t, (const uint8_t *)key, (size_t)kn, 0);
                if (rc != 0) {
                    damaged++;
                    break;
                }
                if (present && last_present != i - 1)
                    unexpected++; /* a later commit present without an earlier one */
                if (present)
                    last_present = i;
                if (!present && i < acks)
                    lost++;
            }
            kvq_txn_destroy(t);
            kvq_db_close(h);
        }
        assert_int_equal(kt_rm_rf(dir), 0);
    }
    printf("crash: workload=sync-kill points=%d killed=%d acked=%d lost=%d unexpected=%d "
           "damaged=%d\n",
           points, killed_points, acked, lost, unexpected, damaged);
    fflush(stdout);
    assert_true(killed_points > 0);
    assert_int_equal(lost, 0);
    assert_int_equal(unexpected, 0);
    assert_int_equal(damaged, 0);
}

int main(int argc, char **argv)
{
    self = argv[0];
    if (argc == 4 && strcmp(argv[1], "child") == 0)
        return child(argv[2], atoi(argv[3]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ack_after_sync),
        cmocka_unit_test(test_checker_catches_relaxed),
        cmocka_unit_test(test_checker_catches_ack_before_sync),
        cmocka_unit_test(test_killed_at_sync),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
