/* The shared sync: one sync of the storage for the commits of every process.
 *
 * A storage's write_commit returns without syncing (SQLite runs with synchronous=NORMAL: a
 * commit writes its WAL frames under the commit lock). kvq then makes it durable before anyone
 * learns of it: the committer calls emb_sync_upto with its version after releasing the commit
 * lock and handing its process's leadership on (commit.c), so the next batch (of any process)
 * is written while this one waits for the disk, and one sync (SQLite: an fdatasync of the WAL;
 * the log store: of its segment) covers every commit written by then. Two counters in kvq.shm
 * carry it: written_version, set by the commit lock holder once its storage commit has returned
 * (versions grow in commit order), and synced_version, raised by whoever synced. One sync runs
 * at a time: its syncer holds an flock on kvq.shm (a dead syncer releases it) that nobody waits
 * on. With the commit pipeline on (emb_pipelined), every other thread, of this process or
 * another, sleeps on the futex sync_gen, which the syncer bumps when done, and the first of them
 * whose commit is still not covered starts the next sync at once: while commits wait, a sync is
 * under way, and no mutex is held across one. Without it, the threads of one handle take turns
 * on sync_mu, held across the sync, as before the pipeline.
 *
 * Readers keep FoundationDB's promise that a read sees only durable data: with the pipeline on,
 * on a storage that keeps versions (EMB_STORE_MVCC), a transaction reads at synced_version and
 * never waits (txn.c); otherwise, a snapshot whose newest commit is not yet synced waits for it
 * (or syncs it: it is written, since the snapshot sees it). A commit that is synced implies
 * every earlier one is (store.h: sync covers every commit written by then; for SQLite, the WAL
 * is one file written in commit order, and a checkpoint syncs the WAL before it copies frames
 * and the database file before the WAL is reused). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "emb.h"

void emb_sync_written(emb_db *e, int64_t v)
{
    if (e->shm == NULL || (e->opts.flags & KVQ_DB_READ_ONLY))
        return;
    int64_t cur = __atomic_load_n(&e->shm->written_version, __ATOMIC_SEQ_CST);
    while (cur < v &&
           !__atomic_compare_exchange_n(&e->shm->written_version, &cur, v, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST)) {
    }
}

/* How long a committer or reader waits for another process's sync before it syncs for itself
 * (a syncer that is stopped or stuck must not stop the others). */
#define SYNC_PATIENCE_US 20000

static void futex_wait(uint32_t *word, uint32_t val, int64_t us)
{
    struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };
    syscall(SYS_futex, word, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void wake_syncwaiters(emb_shm *m);

static int covered(const emb_shm *m, int64_t v)
{
    return m != NULL && __atomic_load_n(&m->synced_version, __ATOMIC_SEQ_CST) >= v;
}

int emb_pipelined(const emb_db *e)
{
    /* $KVQ_PIPELINE, read once per process: 0 off, 1 on for every storage; unset (or anything
     * else) on for a storage that keeps versions (the log store), whose reads never wait, and
     * off for SQLite, whose reads would wait for ever newer writes (BENCHMARKS.md). */
    static int mode = -2;
    int v = __atomic_load_n(&mode, __ATOMIC_RELAXED);
    if (v == -2) {
        const char *s = getenv("KVQ_PIPELINE");
        v = s == NULL ? -1 : strcmp(s, "0") == 0 ? 0 : strcmp(s, "1") == 0 ? 1 : -1;
        __atomic_store_n(&mode, v, __ATOMIC_RELAXED);
    }
    if (!e->durable)
        return 0;
    return v < 0 ? (e->so->caps & EMB_STORE_MVCC) != 0 : v;
}

int emb_early_read(const emb_db *e)
{
    /* $KVQ_EARLY_READ, read once per process: 1 on; unset (or anything else) off, until it
     * measures better (BENCHMARKS.md). */
    static int mode = -2;
    int v = __atomic_load_n(&mode, __ATOMIC_RELAXED);
    if (v == -2) {
        const char *s = getenv("KVQ_EARLY_READ");
        v = s == NULL ? -1 : strcmp(s, "0") == 0 ? 0 : strcmp(s, "1") == 0 ? 1 : -1;
        __atomic_store_n(&mode, v, __ATOMIC_RELAXED);
    }
    return v == 1 && emb_early_read_possible(e);
}

int emb_early_read_possible(const emb_db *e)
{
    return e->durable && e->shm != NULL && !(e->opts.flags & KVQ_DB_READ_ONLY);
}

int emb_synced(emb_db *e, int64_t v)
{
    return !e->durable || covered(e->shm, v);
}

/* Has the storage sync (sync_broken: after a failed sync, by repairing first) and publishes
 * what that covers: target and every commit written by now. After a failed sync, nothing
 * written is known to be on disk, and a sync that now succeeds proves nothing about pages the
 * kernel gave up on: until the storage's repair has succeeded, commits are reported as of
 * unknown outcome (the caller's 1021). */
static int sync_now(emb_db *e, int64_t target)
{
    emb_shm *m = e->shm;
    int rw = m != NULL && !(e->opts.flags & KVQ_DB_READ_ONLY);
    if (m != NULL) {
        int64_t w = __atomic_load_n(&m->written_version, __ATOMIC_SEQ_CST);
        if (w > target)
            target = w;
    }
    int repair = rw && __atomic_load_n(&m->sync_broken, __ATOMIC_SEQ_CST);
    int issued = 0;
    int rc = e->so->sync(e->store, repair, &issued);
    if (rc == 0 && repair)
        __atomic_store_n(&m->sync_broken, 0, __ATOMIC_SEQ_CST);
    if (issued && rc != 0 && rw)
        __atomic_store_n(&m->sync_broken, 1, __ATOMIC_SEQ_CST);
    if (issued && rc == 0)
        __atomic_add_fetch(&e->db->n_syncs, 1, __ATOMIC_RELAXED);
    /* A read-only handle maps the page read-only: it syncs for itself alone. */
    if (rc == 0 && rw) {
        int64_t cur = __atomic_load_n(&m->synced_version, __ATOMIC_SEQ_CST);
        while (cur < target &&
               !__atomic_compare_exchange_n(&m->synced_version, &cur, target, 0, __ATOMIC_SEQ_CST,
                                            __ATOMIC_SEQ_CST)) {
        }
        __atomic_add_fetch(&m->sync_gen, 1, __ATOMIC_SEQ_CST);
        wake_syncwaiters(m);
    }
    return rc;
}

/* Wakes every thread, of any process, asleep on sync_gen (they look at synced_version again). */
static void wake_syncwaiters(emb_shm *m)
{
    syscall(SYS_futex, &m->sync_gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Without the commit pipeline: the threads of a handle take turns on sync_mu, held across the
 * sync; the syncer of each handle tries the flock and otherwise waits on sync_gen. */
static int sync_upto_locked(emb_db *e, int64_t v)
{
    emb_shm *m = e->shm;
    pthread_mutex_lock(&e->sync_mu);
    int locked = 0;
    int64_t deadline = kvq__mono_us() + SYNC_PATIENCE_US;
    int rw = m != NULL && e->shm_fd >= 0 && !(e->opts.flags & KVQ_DB_READ_ONLY);
    while (rw && !covered(m, v)) {
        uint32_t gen = __atomic_load_n(&m->sync_gen, __ATOMIC_SEQ_CST);
        if (flock(e->shm_fd, LOCK_EX | LOCK_NB) == 0) {
            locked = 1;
            break;
        }
        int64_t left = deadline - kvq__mono_us();
        if (left <= 0)
            break; /* the syncer is stuck: sync without it */
        if (!covered(m, v))
            futex_wait(&m->sync_gen, gen, left < 2000 ? left : 2000);
    }
    int rc = covered(m, v) ? 0 : sync_now(e, v);
    if (locked)
        flock(e->shm_fd, LOCK_UN);
    pthread_mutex_unlock(&e->sync_mu);
    return rc;
}

int emb_sync_upto(emb_db *e, int64_t v)
{
    if (!e->durable)
        return 0;
    emb_shm *m = e->shm;
    if (covered(m, v))
        return 0;
    if (!emb_pipelined(e))
        return sync_upto_locked(e, v);
    int rw = m != NULL && e->shm_fd >= 0 && !(e->opts.flags & KVQ_DB_READ_ONLY);
    if (!rw)
        return sync_now(e, v); /* a storage's sync may run on many threads at once (store.h) */
    /* Become the syncer, or sleep on sync_gen until the one at work is done: its sync may
     * cover v, and if it does not, a waiter starts the next one at once. No lock is held
     * across the sync but the flock on kvq.shm, which nobody sleeps on: one thread of a
     * process tries it (sync_busy), the others and other processes' threads sleep on the
     * futex. */
    int64_t deadline = kvq__mono_us() + SYNC_PATIENCE_US;
    for (;;) {
        uint32_t gen = __atomic_load_n(&m->sync_gen, __ATOMIC_SEQ_CST);
        if (covered(m, v))
            return 0;
        if (!__atomic_exchange_n(&e->sync_busy, 1, __ATOMIC_ACQUIRE)) {
            int locked = flock(e->shm_fd, LOCK_EX | LOCK_NB) == 0;
            /* Another process's syncer may be stopped or stuck: past the patience, sync
             * without it. */
            if (locked || kvq__mono_us() >= deadline) {
                int rc = covered(m, v) ? 0 : sync_now(e, v);
                if (locked)
                    flock(e->shm_fd, LOCK_UN);
                __atomic_store_n(&e->sync_busy, 0, __ATOMIC_RELEASE);
                wake_syncwaiters(m);
                return rc;
            }
            __atomic_store_n(&e->sync_busy, 0, __ATOMIC_RELEASE);
        }
        /* The syncer bumps sync_gen when done; the timeout bounds the wait for one of
         * another process that died, or for a thread of this one that gave up the flock. */
        if (!covered(m, v) && __atomic_load_n(&m->sync_gen, __ATOMIC_SEQ_CST) == gen)
            futex_wait(&m->sync_gen, gen, 2000);
    }
}
