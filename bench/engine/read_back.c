/* The CPU of a queue head's read a few versions back, for callgrind: a consumer at the durable
 * version (the commit pipeline) reads its queue's head at a version some batches older than
 * the newest, past the tombstones of the items popped in the log store's window. The driver
 * pushes --items keys, pops --pops of them from the head (one commit each), then makes --reads
 * reads of the first live key at the version --back pops before the last (0: the newest), each
 * in its own transaction. Log store, relaxed, the applier's lag past the run (every pop stays
 * in the map's window). Run by hand:
 *
 *   valgrind --tool=callgrind bench/engine/read_back --reads 2000 --back 3
 *
 * twice with different --reads: the difference over the difference of reads is the
 * instructions per read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq/kvq.h"

static void die(const char *what, int rc)
{
    fprintf(stderr, "read_back: %s: %s (%d): %s\n", what, kvq_strerror(rc), rc, kvq_last_error());
    exit(1);
}

static void key_of(long i, uint8_t k[9])
{
    k[0] = 'i';
    for (int j = 0; j < 8; j++)
        k[1 + j] = (uint8_t)((unsigned long)i >> (56 - 8 * j));
}

int main(int argc, char **argv)
{
    long items = 6000, pops = 5000, reads = 1000, back = 3;
    int sqlite = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--items") == 0 && i + 1 < argc)
            items = atol(argv[++i]);
        else if (strcmp(argv[i], "--pops") == 0 && i + 1 < argc)
            pops = atol(argv[++i]);
        else if (strcmp(argv[i], "--reads") == 0 && i + 1 < argc)
            reads = atol(argv[++i]);
        else if (strcmp(argv[i], "--back") == 0 && i + 1 < argc)
            back = atol(argv[++i]);
        else if (strcmp(argv[i], "--sqlite") == 0)
            sqlite = 1;
        else {
            fprintf(stderr, "usage: read_back [--items N] [--pops P] [--reads R] [--back B] "
                            "[--sqlite]\n");
            return 2;
        }
    }
    if (items < 1 || pops < 0 || pops >= items || reads < 0 || back < 0 || back > pops) {
        fprintf(stderr, "read_back: bad --items, --pops, --reads or --back\n");
        return 2;
    }
    setenv("KVQ_LOGSTORE_APPLY_LAG_US", "3600000000", 0);
    char tmpl[] = "/tmp/kvq-read-back.XXXXXX";
    if (mkdtemp(tmpl) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char path[600];
    snprintf(path, sizeof(path), "%s%s/db", sqlite ? "" : "log:", tmpl);
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.flags |= KVQ_DB_RELAXED;
    kvq_db *db;
    int rc = kvq_db_open(&db, path, &o);
    if (rc != 0)
        die("open", rc);
    kvq_txn *t;
    if ((rc = kvq_txn_create(&t, db)) != 0)
        die("txn", rc);
    uint8_t k[9], val[100];
    memset(val, 'v', sizeof val);
    for (long i = 0; i < items; i++) {
        key_of(i, k);
        if ((rc = kvq_txn_set(t, k, sizeof k, val, sizeof val)) != 0)
            die("set", rc);
        if ((i % 100 == 99 || i == items - 1) && (rc = kvq_txn_commit(t)) != 0)
            die("commit", rc);
        if (i % 100 == 99)
            kvq_txn_reset(t);
    }
    kvq_txn_reset(t);
    int64_t *ver = calloc((size_t)pops + 1, sizeof *ver);
    if (ver == NULL)
        die("memory", KVQ_ENOMEM);
    for (long i = 0; i < pops; i++) {
        key_of(i, k);
        if ((rc = kvq_txn_clear(t, k, sizeof k)) != 0 || (rc = kvq_txn_commit(t)) != 0)
            die("pop", rc);
        if ((rc = kvq_txn_get_committed_version(&ver[i], t)) != 0)
            die("version", rc);
        kvq_txn_reset(t);
    }
    int64_t at = pops > 0 ? ver[pops - 1 - back] : 0;
    long want = pops - back; /* the first key live at that version */
    for (long r = 0; r < reads; r++) {
        if (at > 0 && (rc = kvq_txn_set_read_version(t, at)) != 0)
            die("set_read_version", rc);
        const kvq_kv *kv;
        size_t n;
        bool more;
        if ((rc = kvq_txn_get_range(&kv, &n, &more, t, (const uint8_t *)"i", 1,
                                    (const uint8_t *)"j", 1, 1, 0)) != 0)
            die("get_range", rc);
        key_of(want, k);
        if (n != 1 || kv[0].key.len != sizeof k || memcmp(kv[0].key.data, k, sizeof k) != 0) {
            fprintf(stderr, "read_back: the read at version %lld did not find item %ld\n",
                    (long long)at, want);
            return 1;
        }
        kvq_txn_reset(t);
    }
    printf("read_back: %ld reads of the head %ld pops back, past %ld popped items (%s)\n", reads,
           back, pops, sqlite ? "SQLite storage" : "log store");
    kvq_txn_destroy(t);
    kvq_db_close(db);
    free(ver);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
    return system(cmd) == 0 ? 0 : 1;
}
