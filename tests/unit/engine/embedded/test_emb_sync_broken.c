/* After a sync of the WAL fails (src/engine/embedded/sync.c), no later commit is reported as
 * durable on the strength of a later sync alone: the kernel may have dropped the failed pages,
 * and the WAL is replayed only up to its first bad frame, so every commit written after them is
 * in doubt too. A commit is acknowledged again only once a checkpoint has copied the whole WAL
 * into the database file and synced it; until then commits return commit_unknown_result (1021),
 * and reads that need the sync fail with an I/O error.
 *
 * The failed sync is played by setting the flag in kvq.shm, exactly as a failed fdatasync sets
 * it (test_emb_storage_faults injects real ones with strace and checks the outcomes). */
#include "kvq_test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/embedded/emb.h"
#include "engine/engine.h"
#include "kvq/kvq.h"

static kt_tmp tmp;
static const char *const dir = tmp.db; /* the database, in a fresh directory */

static int set_key(kvq_db *db, const char *k, const char *v)
{
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_set(t, K(k), K(v)), 0);
    int rc = kvq_txn_commit(t);
    kvq_txn_destroy(t);
    return rc;
}

static void play_failed_sync(kvq_db *db)
{
    emb_db *e = db->engine;
    __atomic_store_n(&e->shm->sync_broken, 1, __ATOMIC_SEQ_CST);
}

static uint32_t broken(kvq_db *db)
{
    emb_db *e = db->engine;
    return __atomic_load_n(&e->shm->sync_broken, __ATOMIC_SEQ_CST);
}

static int get_key(kvq_db *db, const char *k, char *out, size_t cap)
{
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    kvq_bytes v;
    int present = 0;
    int rc = kvq_txn_get(&v, &present, t, K(k), 0);
    if (rc == 0) {
        assert_true(present && v.len < cap);
        memcpy(out, v.data, v.len);
        out[v.len] = 0;
    }
    kvq_txn_destroy(t);
    return rc;
}

static kvq_db *open_db(void)
{
    kvq_db *db;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    return db;
}

static void make_dir(void)
{
    assert_int_equal(kt_tmp_make(&tmp, "sync-broken"), 0);
}

static int remove_dir(void **state)
{
    (void)state;
    return kt_tmp_remove(&tmp);
}

/* With nothing in the way, the next commit's sync runs the checkpoint, which copies the WAL
 * into the database file: the commit is acknowledged and the flag is gone, for every process
 * (another handle sees it cleared). */
static void test_checkpoint_repairs(void **state)
{
    (void)state;
    make_dir();
    kvq_db *db = open_db(), *other = open_db();
    assert_int_equal(set_key(db, "a", "1"), 0);
    play_failed_sync(db);
    assert_true(broken(other));
    assert_int_equal(set_key(other, "b", "2"), 0);
    assert_false(broken(db));
    char v[16];
    assert_int_equal(get_key(db, "a", v, sizeof(v)), 0);
    assert_string_equal(v, "1");
    assert_int_equal(get_key(db, "b", v, sizeof(v)), 0);
    assert_string_equal(v, "2");
    kvq_db_close(other);
    kvq_db_close(db);
}

/* A reader holding an old snapshot keeps the checkpoint from copying the newer frames: the WAL
 * is still not known to be on disk, so a commit is reported as of unknown outcome (it was
 * written, and is read back), never as a success. Once the reader lets go, the next commit
 * repairs it and is acknowledged. */
static void test_blocked_checkpoint_reports_unknown(void **state)
{
    (void)state;
    make_dir();
    kvq_db *db = open_db(), *other = open_db();
    assert_int_equal(set_key(db, "a", "1"), 0);
    kvq_txn *old;
    assert_int_equal(kvq_txn_create(&old, other), 0);
    kvq_bytes v0;
    int present = 0;
    assert_int_equal(kvq_txn_get(&v0, &present, old, K("a"), 0), 0); /* holds its snapshot */
    assert_int_equal(set_key(db, "b", "2"), 0); /* a frame the old snapshot does not have */
    play_failed_sync(db);
    int rc = set_key(db, "c", "3");
    assert_int_equal(rc, KVQ_ECOMMIT_UNKNOWN_RESULT);
    assert_true(broken(db));
    kvq_txn_destroy(old); /* the reader lets go */
    assert_int_equal(set_key(db, "d", "4"), 0);
    assert_false(broken(db));
    char v[16];
    assert_int_equal(get_key(db, "c", v, sizeof(v)), 0); /* written, and now on disk */
    assert_string_equal(v, "3");
    kvq_db_close(other);
    kvq_db_close(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_checkpoint_repairs, remove_dir),
        cmocka_unit_test_teardown(test_blocked_checkpoint_reports_unknown, remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
