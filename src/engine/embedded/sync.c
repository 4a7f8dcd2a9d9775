/* The shared sync: one fdatasync of the WAL for the commits of every process.
 *
 * SQLite runs with synchronous=NORMAL: a commit writes its WAL frames under the commit lock and
 * returns without syncing them. kvq then makes it durable before anyone learns of it: the
 * committer calls emb_sync_upto with its version after releasing the commit lock, so the next
 * commit (of any process) writes its frames while this one waits for the disk, and one sync
 * covers every commit written by then. Two counters in kvq.shm carry it: written_version, set
 * by the commit lock holder once its COMMIT has returned (versions grow in commit order), and
 * synced_version, raised by whoever synced. The sync itself is serialised by an flock on
 * kvq.shm (a dead syncer releases it) and, among the threads of one handle, by sync_mu.
 *
 * Readers keep FoundationDB's promise that a read sees only durable data: a snapshot whose newest
 * commit is not yet synced waits for it (or syncs it: its frames are written, since the snapshot
 * sees them). A commit that is synced implies every earlier one is, as the WAL is one file
 * written in commit order, and a checkpoint syncs the WAL before it copies frames and the
 * database file before the WAL is reused. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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

/* Opens the WAL for syncing (once); a WAL that does not exist holds nothing to sync. A WAL this
 * handle has not seen before gets its directory entry synced too, since SQLite no longer syncs
 * it (it never syncs in NORMAL mode outside checkpoints). */
static int open_wal(emb_db *e, int *none);

int emb_sync_open(emb_db *e)
{
    int none;
    return e->durable ? open_wal(e, &none) : 0;
}

static int open_wal(emb_db *e, int *none)
{
    *none = 0;
    if (e->wal_fd >= 0)
        return 0;
    size_t n = strlen(e->path) + 5;
    char *p = kvq__malloc(n);
    if (p == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    snprintf(p, n, "%s-wal", e->path);
    int ro = (e->opts.flags & KVQ_DB_READ_ONLY) != 0;
    int fd = open(p, (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    int err = errno;
    kvq__free(p);
    if (fd < 0 && err == ENOENT) {
        *none = 1;
        return 0;
    }
    if (fd < 0)
        return kvq__error(KVQ_EIO, "cannot open the WAL to sync it: %s", strerror(err));
    int dfd = open(e->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        int src = fsync(dfd);
        err = errno;
        close(dfd);
        if (src != 0 && err != EINVAL) {
            close(fd);
            return kvq__error(KVQ_EIO, "cannot sync the database directory: %s", strerror(err));
        }
    }
    e->wal_fd = fd;
    return 0;
}

/* How long a committer or reader waits for another process's sync before it syncs for itself
 * (a syncer that is stopped or stuck must not stop the others). */
#define SYNC_PATIENCE_US 20000

static void futex_wait(uint32_t *word, uint32_t val, int64_t us)
{
    struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };
    syscall(SYS_futex, word, FUTEX_WAIT, val, &ts, NULL, 0);
}

static int covered(const emb_shm *m, int64_t v)
{
    return m != NULL && __atomic_load_n(&m->synced_version, __ATOMIC_SEQ_CST) >= v;
}

/* After a failed sync (sync_broken), nothing written to the WAL is known to be on disk, and a
 * sync that now succeeds proves nothing about pages the kernel gave up on. What does: a
 * checkpoint that copies every frame of the WAL into the database file, which SQLite then syncs.
 * Until one has done so, commits are reported as of unknown outcome (the caller's 1021). */
static int repair_broken_sync(emb_db *e)
{
    emb_shm *m = e->shm;
    emb_conn *c = NULL;
    int rc = emb_conn_acquire(e, &c);
    if (rc != 0)
        return rc;
    int log = 0, done = 0;
    /* A reader's snapshot may keep the checkpoint from copying every frame: then the WAL is
     * still not known to be on disk. Never wait for readers or the commit lock here. */
    sqlite3_busy_timeout(c->db, 0);
    int src = sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
    sqlite3_busy_timeout(c->db, EMB_BUSY_TIMEOUT_MS);
    emb_conn_release(e, c);
    if (src == SQLITE_OK && done >= log) {
        __atomic_store_n(&m->sync_broken, 0, __ATOMIC_SEQ_CST);
        return 0;
    }
    return kvq__error(KVQ_EIO,
                      "an earlier sync of the WAL failed, and the checkpoint that would make its "
                      "commits durable has not completed (%s)",
                      src == SQLITE_OK ? "a reader still needs old frames" : sqlite3_errstr(src));
}

/* Syncs the WAL and publishes what that covers: target and every commit written by now. */
static int sync_now(emb_db *e, int64_t target)
{
    emb_shm *m = e->shm;
    int rw = m != NULL && !(e->opts.flags & KVQ_DB_READ_ONLY);
    if (m != NULL) {
        int64_t w = __atomic_load_n(&m->written_version, __ATOMIC_SEQ_CST);
        if (w > target)
            target = w;
    }
    int none = 0;
    int rc = 0;
    if (rw && __atomic_load_n(&m->sync_broken, __ATOMIC_SEQ_CST))
        rc = repair_broken_sync(e);
    if (rc == 0)
        rc = open_wal(e, &none);
    if (rc == 0 && !none) {
        if (fdatasync(e->wal_fd) != 0) {
            rc = kvq__error(KVQ_EIO, "syncing the WAL failed: %s", strerror(errno));
            if (rw)
                __atomic_store_n(&m->sync_broken, 1, __ATOMIC_SEQ_CST);
        } else {
            __atomic_add_fetch(&e->db->n_syncs, 1, __ATOMIC_RELAXED);
        }
    }
    /* A read-only handle maps the page read-only: it syncs for itself alone. */
    if (rc == 0 && rw) {
        int64_t cur = __atomic_load_n(&m->synced_version, __ATOMIC_SEQ_CST);
        while (cur < target &&
               !__atomic_compare_exchange_n(&m->synced_version, &cur, target, 0, __ATOMIC_SEQ_CST,
                                            __ATOMIC_SEQ_CST)) {
        }
        __atomic_add_fetch(&m->sync_gen, 1, __ATOMIC_SEQ_CST);
        syscall(SYS_futex, &m->sync_gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    }
    return rc;
}

int emb_sync_upto(emb_db *e, int64_t v)
{
    if (!e->durable)
        return 0;
    emb_shm *m = e->shm;
    if (covered(m, v))
        return 0;
    pthread_mutex_lock(&e->sync_mu);
    /* Become the syncer, or wait for the one at work: its sync may cover v. */
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

void emb_sync_close(emb_db *e)
{
    if (e->wal_fd >= 0)
        close(e->wal_fd);
    e->wal_fd = -1;
}
