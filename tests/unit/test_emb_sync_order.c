/* Durability beyond kill -9: a commit is acknowledged only after its WAL frames are synced.
 *
 * A child process commits transactions and writes "ACK n" to its standard output after each
 * commit returns. It runs under strace, which records (with file names) every write to the WAL,
 * every fsync/fdatasync, and the acknowledgements. The checker then requires, for every ACK, a
 * sync of the WAL after the last WAL write that precedes it. The same checker must fail on a
 * relaxed database (which does not sync each commit) and on a "durable" database broken with the
 * test-only knob KVQ_TEST_ACK_BEFORE_SYNC: a checker that cannot fail proves nothing. The test
 * is skipped (and says so, "syncorder: ... skipped=strace") when strace is not installed.
 * Prints "syncorder: acks=... unsynced_acks=0 ...". */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvq/kvq.h"

static const char *self;

/* mode 0: durable; 1: relaxed; 2: durable, broken with KVQ_TEST_ACK_BEFORE_SYNC. */
static int child(const char *dir, int mode)
{
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    if (mode == 1)
        o.flags |= KVQ_DB_RELAXED;
    if (mode == 2)
        o.test_flags |= KVQ_TEST_ACK_BEFORE_SYNC;
    kvq_db *db;
    if (kvq_db_open(&db, dir, &o) != 0)
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
    char dir[] = "/tmp/kvq-sync-XXXXXX";
    if (mkdtemp(dir) == NULL)
        return -1;
    char db[64], log[64], cmd[1024];
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
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        return -1;
    *acks_out = acks;
    return bad;
}

static int have_strace(void)
{
    if (system("command -v strace > /dev/null 2>&1") == 0)
        return 1;
    printf("syncorder: skipped=strace_missing\n");
    return 0;
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

int main(int argc, char **argv)
{
    self = argv[0];
    if (argc == 4 && strcmp(argv[1], "child") == 0)
        return child(argv[2], atoi(argv[3]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ack_after_sync),
        cmocka_unit_test(test_checker_catches_relaxed),
        cmocka_unit_test(test_checker_catches_ack_before_sync),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
