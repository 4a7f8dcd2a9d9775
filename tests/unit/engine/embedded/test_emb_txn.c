/* Engine behaviours beyond the shared conformance suite: reads answered by a transaction's own
 * writes add no conflict; group commit puts concurrent commits into one sync with distinct,
 * increasing versionstamps. */
#include "kvq_test.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvq/kvq.h"

static kvq_db *db;

static void test_own_write_read_no_conflict(void **state)
{
    (void)state;
    kvq_txn *t1, *t2;
    assert_int_equal(kvq_txn_create(&t1, db), 0);
    assert_int_equal(kvq_txn_create(&t2, db), 0);
    kvq_bytes v;
    int present;
    /* t1 takes a read version, then writes k and reads it back. */
    assert_int_equal(kvq_txn_get(&v, &present, t1, K("other"), 0), 0);
    assert_int_equal(kvq_txn_set(t1, K("k"), K("mine")), 0);
    assert_int_equal(kvq_txn_get(&v, &present, t1, K("k"), 0), 0);
    assert_true(present);
    assert_memory_equal(v.data, "mine", 4);
    /* t2 writes k and commits first. */
    assert_int_equal(kvq_txn_set(t2, K("k"), K("theirs")), 0);
    assert_int_equal(kvq_txn_commit(t2), 0);
    /* t1's read of k came from its own write: no conflict. */
    assert_int_equal(kvq_txn_commit(t1), 0);

    /* A read of a stored key does conflict, as the contract says. */
    kvq_txn_reset(t1);
    kvq_txn_reset(t2);
    assert_int_equal(kvq_txn_get(&v, &present, t1, K("k"), 0), 0);
    assert_int_equal(kvq_txn_set(t1, K("x"), K("1")), 0);
    assert_int_equal(kvq_txn_set(t2, K("k"), K("again")), 0);
    assert_int_equal(kvq_txn_commit(t2), 0);
    assert_int_equal(kvq_txn_commit(t1), KVQ_ENOT_COMMITTED);
    kvq_txn_destroy(t1);
    kvq_txn_destroy(t2);
}

/* A key "s" + 10 stamp bytes + a 2-byte user version (+ its offset, 1, for the template). */
static size_t stamp_key(uint8_t *k, const uint8_t stamp[10], unsigned uv, int tmpl)
{
    k[0] = 's';
    memcpy(k + 1, stamp, 10);
    k[11] = (uint8_t)(uv >> 8);
    k[12] = (uint8_t)uv;
    if (!tmpl)
        return 13;
    static const uint8_t off[4] = { 1, 0, 0, 0 };
    memcpy(k + 13, off, 4);
    return 17;
}

/* A batch of stamped keys of one template (user versions growing, as a push of many items
 * writes them) makes unreadable exactly the union of their spans: every key any of their stamps
 * may produce, and nothing past the last span's end; writes made between reads are all seen by
 * the next read, in order. */
static void test_stamped_batch_and_reads_between_writes(void **state)
{
    (void)state;
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    static const uint8_t zeros[10] = { 0 };
    static const uint8_t ffs[10] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
    uint8_t k[20];
    for (unsigned uv = 10; uv < 110; uv++)
        assert_int_equal(kvq_txn_set_versionstamped_key(t, k, stamp_key(k, zeros, uv, 1), K("v")),
                         0);
    kvq_bytes v;
    int present = 1;
    /* Inside: the lowest stamp of the first key, one between two user versions, the highest
     * stamp of the last key. */
    assert_int_equal(kvq_txn_get(&v, &present, t, k, stamp_key(k, zeros, 10, 0), 0),
                     KVQ_EACCESSED_UNREADABLE);
    static const uint8_t mid[10] = { 0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
    assert_int_equal(kvq_txn_get(&v, &present, t, k, stamp_key(k, mid, 60, 0), 0),
                     KVQ_EACCESSED_UNREADABLE);
    assert_int_equal(kvq_txn_get(&v, &present, t, k, stamp_key(k, ffs, 109, 0), 0),
                     KVQ_EACCESSED_UNREADABLE);
    /* Outside: below the first span, and the last span's end (its last key + 0x00). */
    assert_int_equal(kvq_txn_get(&v, &present, t, K("s"), 0), 0);
    assert_false(present);
    size_t n = stamp_key(k, ffs, 109, 0);
    k[n] = 0;
    assert_int_equal(kvq_txn_get(&v, &present, t, k, n + 1, 0), 0);
    assert_false(present);

    /* Writes between reads: a set, an atomic add on it, a clear of another key written before
     * the last read, then one read that sees them all. */
    assert_int_equal(kvq_txn_set(t, K("ra"), K("\x01")), 0);
    assert_int_equal(kvq_txn_set(t, K("rb"), K("b")), 0);
    assert_int_equal(kvq_txn_get(&v, &present, t, K("rb"), 0), 0);
    assert_true(present && v.len == 1 && v.data[0] == 'b');
    static const uint8_t one = 1;
    assert_int_equal(kvq_txn_atomic_op(t, K("ra"), &one, 1, KVQ_MUT_ADD), 0);
    assert_int_equal(kvq_txn_clear(t, K("rb")), 0);
    assert_int_equal(kvq_txn_set(t, K("rc"), K("c")), 0);
    const kvq_kv *kvs;
    size_t count;
    bool more;
    assert_int_equal(kvq_txn_get_range(&kvs, &count, &more, t, K("r"), K("s"), 0, 0), 0);
    assert_int_equal(count, 2);
    assert_memory_equal(kvs[0].key.data, "ra", 2);
    assert_true(kvs[0].value.len == 1 && kvs[0].value.data[0] == 2);
    assert_memory_equal(kvs[1].key.data, "rc", 2);
    kvq_txn_destroy(t);
}

#define THREADS    8
#define PER_THREAD 50

typedef struct stamp_rec {
    uint8_t stamp[THREADS * PER_THREAD][10];
    int n[THREADS];
} stamp_rec;

static stamp_rec rec;

static void *committer(void *arg)
{
    int id = (int)(intptr_t)arg;
    kvq_txn *t;
    if (kvq_txn_create(&t, db) != 0)
        return NULL;
    for (int i = 0; i < PER_THREAD; i++) {
        char key[32];
        int kn = snprintf(key, sizeof(key), "gc/%d/%d", id, i);
        if (kvq_txn_set(t, (const uint8_t *)key, (size_t)kn, (const uint8_t *)"v", 1) != 0 ||
            kvq_txn_commit(t) != 0)
            break;
        if (kvq_txn_get_versionstamp(rec.stamp[id * PER_THREAD + i], t) != 0)
            break;
        rec.n[id]++;
        kvq_txn_reset(t);
    }
    kvq_txn_destroy(t);
    return NULL;
}

static int stamp_cmp(const void *a, const void *b)
{
    return memcmp(a, b, 10);
}

static void test_group_commit_stamps(void **state)
{
    (void)state;
    kvq_db_stats before, after;
    assert_int_equal(kvq_db_get_stats(&before, db), 0);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, committer, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(rec.n[i], PER_THREAD);
    assert_int_equal(kvq_db_get_stats(&after, db), 0);
    uint64_t commits = after.commits - before.commits;
    uint64_t batches = after.batches - before.batches;
    uint64_t syncs = after.syncs - before.syncs;
    printf("%llu commits in %llu storage transactions, %llu syncs\n", (unsigned long long)commits,
           (unsigned long long)batches, (unsigned long long)syncs);
    assert_int_equal(commits, THREADS * PER_THREAD);
    /* Concurrent committers share syncs: in one storage transaction (a batch), or, with the
     * commit pipeline (on by default on the log store), in batches written one after another
     * while a sync runs and covered by the next one. */
    assert_true(batches < commits || syncs < commits);
    /* Every stamp is distinct; stamps of one thread increase. */
    for (int i = 0; i < THREADS; i++)
        for (int j = 1; j < PER_THREAD; j++)
            assert_true(
                memcmp(rec.stamp[i * PER_THREAD + j - 1], rec.stamp[i * PER_THREAD + j], 10) < 0);
    qsort(rec.stamp, THREADS * PER_THREAD, 10, stamp_cmp);
    int shared_version = 0;
    for (int i = 1; i < THREADS * PER_THREAD; i++) {
        assert_true(memcmp(rec.stamp[i - 1], rec.stamp[i], 10) < 0);
        if (memcmp(rec.stamp[i - 1], rec.stamp[i], 8) == 0)
            shared_version = 1;
    }
    /* Commits of one storage transaction share its version, told apart by their order in the
     * batch (the pipeline may also write each commit as a batch of its own, sharing syncs). */
    if (batches < commits)
        assert_true(shared_version);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_own_write_read_no_conflict),
        cmocka_unit_test(test_group_commit_stamps),
        cmocka_unit_test(test_stamped_batch_and_reads_between_writes),
    };
    kt_group_db(&db, "emb-txn");
    return cmocka_run_group_tests(tests, kt_group_db_setup, kt_group_db_teardown);
}
