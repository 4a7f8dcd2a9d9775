/* Commit: conflict resolution against the log of recent write ranges, group commit, versions
 * that advance with time, versionstamps, and injected faults.
 *
 * Committers of one process queue up; the first becomes the leader and takes the whole queue.
 * The leader takes kvq's cross-process commit lock (flock on kvq.lock, so a dead holder
 * releases it and waiters are woken by the kernel), starts one storage write (store.h),
 * resolves each queued transaction in order against the write ranges of everything committed
 * after its read version (including those accepted earlier in the same batch), applies the
 * accepted ones, and commits once: one sync for the whole batch. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include "emb.h"

/* Write ranges older than this many versions (microseconds) are pruned from the log: the
 * transaction window and a second more. Any transaction whose read version is older than what
 * is kept fails with 1007. */
#define WLOG_KEEP_VERSIONS(e) ((e)->opts.txn_window_us + 1000000)
#define PRUNE_EVERY        512
#define MAX_BATCH          512
/* A batch's write ranges are one entry of the conflict log: its transactions' sizes (mutations
 * and conflict ranges, each at most 10 MB) are kept under this, so the entry stays far below
 * the largest a storage takes (SQLite's largest blob). */
#define MAX_BATCH_BYTES (32u << 20)

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Does any write range logged after rv intersect the transaction's read ranges? `batch` holds
 * the ranges of the transactions accepted earlier in this batch (packed, not yet in the log). */
static int has_conflict(emb_db *e, emb_txn *t, const kvq_buf *batch, int *conflict)
{
    *conflict = 0;
    if (t->reads.n == 0)
        return 0;
    emb_ranges_normalize(&t->reads);
    int rc = emb_ranges_packed_intersects(&t->reads, batch->data, batch->len, conflict);
    if (rc != 0 || *conflict)
        return rc;
    return e->so->log_check(e->store, t->rv, &t->reads, conflict);
}

/* Is the log still complete after rv? Pruning records the newest version it removed; a
 * transaction that read before it cannot be checked any more. Commits that wrote nothing
 * conflict with nobody, so only logged versions matter. */
static int log_covers(emb_db *e, int64_t rv)
{
    return rv >= e->log_floor;
}

static int put_row(emb_db *e, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    emb_watch_touch(e, k, kn);
    return e->so->write_put(e->store, k, kn, v, vn);
}

static void touch_deleted(void *arg, const uint8_t *key, size_t key_len)
{
    emb_watch_touch(arg, key, key_len);
}

/* Deletes [a, b), noting each deleted key for the watch filter (a key that was absent has not
 * changed, whatever the range). */
static int delete_range(emb_db *e, const emb_str *a, const emb_str *b)
{
    return e->so->write_clear_range(e->store, a->p, a->n, b->p, b->n, touch_deleted, e);
}

/* Deletes one key that is stored, noting it for the watch filter. */
static int delete_row(emb_db *e, const uint8_t *k, size_t kn)
{
    emb_watch_touch(e, k, kn);
    return e->so->write_clear(e->store, k, kn);
}

static int apply_atomic_row(emb_db *e, const emb_mut *m)
{
    static const uint8_t z[1] = { 0 };
    kvq_bytes v = { NULL, 0 };
    int had = 0;
    int rc = e->so->write_get(e->store, m->a.p, m->a.n, &v, &had);
    kvq_buf out = KVQ_BUF_INIT;
    int present = 0, same = 0;
    if (rc == 0 && had) {
        rc = emb_apply_atomic(&out, &present, m->op, v.data, v.len, 1, m->b.p, m->b.n);
        /* COMPARE_AND_CLEAR that does not match, or APPEND_IF_FITS that does not fit, leave
         * the row as it is: nothing to write. */
        same = rc == 0 && present && (m->op == KVQ_MUT_COMPARE_AND_CLEAR ||
                                      (m->op == KVQ_MUT_APPEND_IF_FITS && out.len == v.len));
    } else if (rc == 0) {
        rc = emb_apply_atomic(&out, &present, m->op, NULL, 0, 0, m->b.p, m->b.n);
    }
    if (rc == 0 && present && !same)
        rc = put_row(e, m->a.p, m->a.n, out.len > 0 ? out.data : z, out.len);
    else if (rc == 0 && !present && had)
        rc = delete_row(e, m->a.p, m->a.n);
    kvq_buf_dispose(&out);
    return rc;
}

/* The write-conflict ranges of a transaction's versionstamped keys, one per run: keys that
 * share everything up to the end of their stamp (the same template prefix, and the stamp is
 * the transaction's own) and come in ascending order are covered by one range from the first
 * to the last. Every key inside such a range begins with the transaction's unique stamp, so
 * only this transaction can ever write one: the range conflicts with exactly the readers that
 * the single keys would, and a push of a hundred items costs one range, not a hundred. */
typedef struct stamp_run {
    kvq_buf lo, hi; /* hi holds the last key and a 0x00 after it: the range's end */
    size_t shared;  /* the bytes every key of the run shares: prefix and stamp */
    int open;
} stamp_run;

static int run_flush(emb_txn *t, stamp_run *r)
{
    if (!r->open)
        return 0;
    r->open = 0;
    return emb_ranges_add(&t->writes, r->lo.data, r->lo.len, r->hi.data, r->hi.len);
}

static int run_add(emb_txn *t, stamp_run *r, const uint8_t *k, size_t kn, size_t shared)
{
    if (r->open && shared == r->shared && r->lo.len >= shared &&
        memcmp(r->lo.data, k, shared) == 0 &&
        kvq__bytes_cmp(k, kn, r->hi.data, r->hi.len - 1) > 0) {
        r->hi.len = 0;
    } else {
        int rc = run_flush(t, r);
        if (rc != 0)
            return rc;
        r->lo.len = 0;
        r->hi.len = 0;
        if (kvq_buf_grow(&r->lo, kn) != 0)
            return kvq__error(KVQ_ENOMEM, "out of memory");
        memcpy(r->lo.data, k, kn);
        r->lo.len = kn;
        r->shared = shared;
        r->open = 1;
    }
    if (kvq_buf_grow(&r->hi, kn + 1) != 0)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    memcpy(r->hi.data, k, kn);
    r->hi.data[kn] = 0;
    r->hi.len = kn + 1;
    return 0;
}

/* Applies the transaction's mutations in the order they were made. scratch: a buffer the
 * caller keeps for the batch, so that stamping a key or value allocates nothing per item. */
static int apply(emb_db *e, emb_txn *t, kvq_buf *scratch, stamp_run *run)
{
    int rc = 0;
    run->open = 0;
    for (size_t i = 0; rc == 0 && i < t->n_muts; i++) {
        const emb_mut *m = &t->muts[i];
        switch (m->op) {
        case EMB_OP_SET:
            rc = put_row(e, m->a.p, m->a.n, m->b.p, m->b.n);
            break;
        case EMB_OP_CLEAR_RANGE:
            rc = delete_range(e, &m->a, &m->b);
            break;
        case KVQ_MUT_SET_VERSIONSTAMPED_KEY: {
            size_t kn = m->a.n - 4;
            uint32_t off = le32(m->a.p + kn);
            scratch->len = 0;
            if (kvq_buf_grow(scratch, kn + 1) != 0)
                return kvq__error(KVQ_ENOMEM, "out of memory");
            uint8_t *k = scratch->data;
            memcpy(k, m->a.p, kn);
            memcpy(k + off, t->stamp, 10);
            k[kn] = 0;
            rc = put_row(e, k, kn, m->b.p, m->b.n);
            /* The stamped key is a write like any other for the transactions that read its
             * range: it gets a write-conflict range once its stamp is known (one per run of
             * such keys, above). The transaction itself still reads nothing, so pushes never
             * conflict with each other. */
            if (rc == 0)
                rc = run_add(t, run, k, kn, (size_t)off + 10);
            break;
        }
        case KVQ_MUT_SET_VERSIONSTAMPED_VALUE: {
            size_t vn = m->b.n - 4;
            uint32_t off = le32(m->b.p + vn);
            scratch->len = 0;
            if (kvq_buf_grow(scratch, vn + 1) != 0)
                return kvq__error(KVQ_ENOMEM, "out of memory");
            uint8_t *v = scratch->data;
            memcpy(v, m->b.p, vn);
            memcpy(v + off, t->stamp, 10);
            rc = put_row(e, m->a.p, m->a.n, v, vn);
            break;
        }
        default:
            rc = apply_atomic_row(e, m);
            break;
        }
    }
    if (rc == 0)
        rc = run_flush(t, run);
    return rc;
}

static void lock_commit(emb_db *e)
{
    while (flock(e->lock_fd, LOCK_EX) != 0 && errno == EINTR) {
    }
}

static void unlock_commit(emb_db *e)
{
    flock(e->lock_fd, LOCK_UN);
}

static void req_fail(emb_commit_req *r, int rc);

/* The test knobs KVQ_TEST_LEADER_STOP_*: wait for another process's batch to take. */
static void stall_for_remote(emb_db *e)
{
    for (int i = 0; i < 10000 && !emb_cq_any_ready(e); i++)
        usleep(1000);
}

static void stop_here(emb_db *e, unsigned int flag, const emb_cq_taken *tk)
{
    if ((e->opts.test_flags & flag) && tk->n_slots > 0)
        raise(SIGSTOP);
}

/* The requests a batch failed before writing anything: this process's, unless another leader
 * wrote them (*own_done), and of unknown outcome if a leader that died had taken them. */
static void fail_early(emb_db *e, emb_commit_req **reqs, size_t n, int own, int *own_done, int rc)
{
    int st = own >= 0 ? emb_cq_own_claim(e, own) : 0;
    if (st == 2) {
        *own_done = 1;
        return;
    }
    if (st == 1)
        rc = kvq__error(KVQ_ECOMMIT_UNKNOWN_RESULT,
                        "the process writing this commit died, and the database could not be "
                        "read to learn whether it was written: %s",
                        kvq_last_error());
    for (size_t i = 0; i < n; i++)
        req_fail(reqs[i], rc);
}

/* A request's final outcome once the storage commit is done (rc: its result). */
static void settle(emb_commit_req *r, int rc)
{
    if (r->applied) {
        r->applied = 0;
        if (rc != 0) {
            req_fail(r, rc);
            r->t->committed_version = 0;
        }
    } else if (rc != 0 && r->rc == 0) {
        req_fail(r, rc);
    }
}

/* Writes one batch, with the commit lock held by the caller; releases it. The batch is this
 * process's requests (reqs, n) and the batches other processes published in kvq.cq (commit_queue.c).
 * own: the slot of kvq.cq where this process published reqs before it got the lock (-1: none);
 * if another leader wrote them meanwhile, *own_done is set and they are not written again.
 * Sets each request's rc. Returns KVQ_ENOSPC when the disk filled up while the batch was
 * written outside drain mode (the caller then retries it in drain mode). */
static int write_batch(emb_db *e, emb_commit_req **reqs, size_t n, int own, int *own_done,
                       int64_t *to_sync)
{
    *to_sync = 0;
    *own_done = 0;
    emb_reserve_refresh(e);
    emb_store_head head = { 0, 0 };
    int rc = e->so->write_begin(e->store, &head);
    int64_t prev = head.version, version = 0;
    e->log_floor = head.log_floor;
    if (rc != 0) {
        fail_early(e, reqs, n, own, own_done, rc);
        unlock_commit(e);
        emb_cq_wake_next(e);
        return 0;
    }
    /* Before anything is committed: the slots of a leader that died are settled against the
     * version just read. */
    emb_cq_recover(e, prev);
    if (own >= 0 && emb_cq_own_claim(e, own) == 2) {
        *own_done = 1;
        n = 0;
    }
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += reqs[i]->t->size;
    emb_cq_taken *tk = &e->cq_taken;
    if (e->cq != NULL) {
        if (e->opts.test_flags &
            (KVQ_TEST_LEADER_STOP_BEFORE_COMMIT | KVQ_TEST_LEADER_STOP_AFTER_COMMIT))
            stall_for_remote(e);
        emb_cq_take(e, n < MAX_BATCH ? MAX_BATCH - n : 0,
                    bytes < MAX_BATCH_BYTES ? MAX_BATCH_BYTES - bytes : 0, tk);
    }
    size_t total = n + tk->n;
    if (total == 0) {
        e->so->write_abort(e->store);
        unlock_commit(e);
        emb_cq_wake_next(e);
        return 0;
    }
    emb_commit_req **all = kvq__malloc(total * sizeof(*all));
    if (all == NULL) {
        rc = kvq__error(KVQ_ENOMEM, "out of memory for a batch");
        e->so->write_abort(e->store);
        emb_cq_untake(e, tk);
        int ignored = 0;
        fail_early(e, reqs, n, -1, &ignored, rc);
        unlock_commit(e);
        emb_cq_wake_next(e);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        all[i] = reqs[i];
    for (size_t i = 0; i < tk->n; i++)
        all[n + i] = &tk->reqs[i];
    /* From here until the storage's commit or abort is done, this commit is marked in flight
     * in kvq.shm, so that readers never hand out a read version at or above its version unless
     * their snapshot holds it (read_version.c). */
    version = emb_rv_commit_begin(e, prev);

    int skip_check = (e->opts.test_flags & KVQ_TEST_SKIP_CONFLICT_CHECK) != 0;
    uint16_t order = 0;
    kvq_buf batch = KVQ_BUF_INIT, scratch = KVQ_BUF_INIT;
    stamp_run run = { KVQ_BUF_INIT, KVQ_BUF_INIT, 0, 0 };
    size_t applied = 0;
    for (size_t i = 0; i < total && rc == 0; i++) {
        emb_commit_req *r = all[i];
        emb_txn *t = r->t;
        if (t->has_rv && t->reads.n > 0) {
            if (!log_covers(e, t->rv)) {
                req_fail(r, kvq__error(KVQ_ETRANSACTION_TOO_OLD,
                                       "the transaction's read version is older than the conflict "
                                       "log"));
                continue;
            }
            int conflict = 0;
            if (!skip_check) {
                rc = has_conflict(e, t, &batch, &conflict);
                if (rc != 0)
                    break;
            }
            if (conflict) {
                req_fail(r, kvq__error(KVQ_ENOT_COMMITTED, "conflict with another transaction"));
                continue;
            }
        }
        if (e->drain_only) {
            int grows = 0;
            rc = emb_txn_grows(e, t, &grows);
            if (rc != 0)
                break;
            if (grows) {
                req_fail(r, kvq__error(KVQ_ENOSPC,
                                       "the disk is full: only transactions that free more than "
                                       "they write are accepted until space is freed"));
                continue;
            }
        }
        if (r->fault == KVQ_FAULT_NOT_COMMITTED) {
            req_fail(r, kvq__error(KVQ_ENOT_COMMITTED, "injected fault: not committed"));
            continue;
        }
        if (r->fault == KVQ_FAULT_UNKNOWN_NOT_COMMITTED) {
            req_fail(r, kvq__error(KVQ_ECOMMIT_UNKNOWN_RESULT,
                                   "injected fault: result unknown (not committed)"));
            continue;
        }
        if (r->fault == KVQ_FAULT_TIMED_OUT_NOT_COMMITTED) {
            req_fail(r, kvq__error(KVQ_ETRANSACTION_TIMED_OUT,
                                   "injected fault: commit timed out (not committed)"));
            continue;
        }
        uint8_t *s = t->stamp;
        for (int b = 0; b < 8; b++)
            s[b] = (uint8_t)((uint64_t)version >> (56 - 8 * b));
        s[8] = (uint8_t)(order >> 8);
        s[9] = (uint8_t)order;
        order++;
        rc = apply(e, t, &scratch, &run);
        if (rc == 0) {
            emb_ranges_normalize(&t->writes);
            rc = emb_ranges_pack(&batch, &t->writes);
        }
        if (rc != 0)
            break;
        t->committed_version = version;
        if (r->fault == KVQ_FAULT_UNKNOWN_COMMITTED)
            req_fail(r, kvq__error(KVQ_ECOMMIT_UNKNOWN_RESULT,
                                   "injected fault: result unknown (committed)"));
        else if (r->fault == KVQ_FAULT_TIMED_OUT_COMMITTED)
            req_fail(r, kvq__error(KVQ_ETRANSACTION_TIMED_OUT,
                                   "injected fault: commit timed out (committed)"));
        else
            r->rc = 0;
        r->applied = 1; /* pending the storage commit */
        applied++;
    }
    if (rc == 0 && applied > 0 && ++e->commits_since_prune >= PRUNE_EVERY) {
        e->commits_since_prune = 0;
        rc = e->so->log_prune(e->store, version - WLOG_KEEP_VERSIONS(e));
    }
    if (rc == 0) {
        /* What the other processes' requests will be told, written before the storage commit:
         * if this process dies after it, the next lock holder finds the version in the
         * database and hands these on (commit_queue.c). */
        emb_cq_outcomes(e, tk, version, 0);
        stop_here(e, KVQ_TEST_LEADER_STOP_BEFORE_COMMIT, tk);
        /* The batch's version becomes the stored version with its write ranges (for SQLite, the
         * newest entry of the log: it costs no page of its own). */
        rc = e->so->write_commit(e->store, applied > 0 ? version : 0, batch.data, batch.len);
        /* KVQ_TEST_IOERR_AS_DEFINITE is the test-only broken engine of the storage-fault
         * checker (test_emb_storage_faults): it claims a definite failure where the storage
         * could not tell. */
        if (rc == KVQ_ECOMMIT_UNKNOWN_RESULT && (e->opts.test_flags & KVQ_TEST_IOERR_AS_DEFINITE))
            rc = kvq__error(KVQ_EIO, "%s", kvq_last_error());
        if (rc == 0)
            stop_here(e, KVQ_TEST_LEADER_STOP_AFTER_COMMIT, tk);
    } else {
        e->so->write_abort(e->store);
    }
    kvq_buf_dispose(&batch);
    kvq_buf_dispose(&scratch);
    kvq_buf_dispose(&run.lo);
    kvq_buf_dispose(&run.hi);
    if (rc == 0 && applied > 0) {
        /* Written, not yet synced: the committers wait for the shared sync (sync.c) once the
         * commit lock is free for the next batch. */
        emb_sync_written(e, version);
        *to_sync = version;
    }
    emb_watch_publish(e);
    emb_rv_commit_end(e);
    if (rc == KVQ_ENOSPC && !e->drain_only && emb_reserve_release(e)) {
        /* Retry the whole batch in drain mode, on the space the reserve held; the other
         * processes' batches go back to their slots for it or the next leader. */
        emb_cq_untake(e, tk);
        unlock_commit(e);
        for (size_t i = 0; i < n; i++) {
            reqs[i]->applied = 0;
            reqs[i]->rc = 0;
            reqs[i]->msg[0] = '\0';
            reqs[i]->t->committed_version = 0;
        }
        kvq__free(all);
        return KVQ_ENOSPC;
    }
    /* The other processes' outcomes are final before the lock is released: a lock holder that
     * finds a slot still taken knows its leader died. */
    for (size_t i = n; i < total; i++)
        settle(all[i], rc);
    emb_cq_outcomes(e, tk, version, 1);
    emb_cq_free_taken(tk);
    unlock_commit(e);
    emb_cq_wake_next(e);
    for (size_t i = 0; i < n; i++)
        settle(all[i], rc);
    kvq__free(all);
    if (rc == 0 && applied > 0) {
        __atomic_add_fetch(&e->db->n_batches, 1, __ATOMIC_RELAXED);
        emb_notify_commit(e);
    }
    return 0;
}

/* Records a request's outcome with the detail the leader's thread recorded for it, so that the
 * committer's thread can report it as its own. */
static void req_fail(emb_commit_req *r, int rc)
{
    r->rc = rc;
    snprintf(r->msg, sizeof(r->msg), "%s", kvq_last_error());
}

/* The batch's frames are written but syncing them failed: whether its commits survive a crash
 * is unknown, so none of them is reported as committed. */
static void sync_failed(emb_db *e, emb_commit_req **batch, size_t n)
{
    char why[200];
    snprintf(why, sizeof(why), "%s", kvq_last_error());
    /* KVQ_TEST_IOERR_AS_DEFINITE is the test-only broken engine of the storage-fault checker
     * (test_emb_storage_faults): it claims a definite failure. */
    int code = (e->opts.test_flags & KVQ_TEST_IOERR_AS_DEFINITE) ? KVQ_EIO
                                                                 : KVQ_ECOMMIT_UNKNOWN_RESULT;
    for (size_t i = 0; i < n; i++) {
        emb_commit_req *r = batch[i];
        if (r->t->committed_version > 0) {
            req_fail(r, kvq__error(code, "the commit was written but syncing it to disk failed: %s",
                                   why));
            if (code == KVQ_EIO)
                r->t->committed_version = 0;
        }
    }
}

int emb_commit(void *tp)
{
    emb_txn *t = tp;
    emb_db *e = t->e;
    if (t->committing || t->committed)
        return kvq__error(KVQ_EUSED_DURING_COMMIT, "the transaction was already committed");
    /* Only a transaction with read-conflict ranges can be too old to commit: one that wrote
     * blindly or read only with snapshot reads is checked against nothing (FoundationDB's
     * resolver, likewise, judges the age only of transactions that have read ranges). */
    if (t->has_rv && t->reads.n > 0 && kvq__mono_us() - t->rv_mono_us > e->opts.txn_window_us) {
        emb_txn_end_read(t);
        int rc = kvq__error(KVQ_ETRANSACTION_TOO_OLD,
                            "the transaction's read version is more than 5 seconds old");
        emb_watches_after_commit(t, rc);
        return rc;
    }
    /* The snapshot is no longer needed: conflicts are found in the log, not in the snapshot. */
    emb_txn_end_read(t);
    if (t->n_muts == 0 && t->writes.n == 0) {
        /* Read-only transactions always commit; one that read early (txn.c) only once what it
         * read is durable, since its caller is told the outcome now. */
        int rc = emb_txn_early_settle(t);
        if (rc != 0) {
            emb_watches_after_commit(t, rc);
            return rc;
        }
        t->committed = 1;
        t->committed_version = -1;
        emb_watches_after_commit(t, 0);
        return 0;
    }
    if (e->opts.flags & KVQ_DB_READ_ONLY) {
        int rc = kvq__error(KVQ_EPERM, "the database was opened read-only");
        emb_watches_after_commit(t, rc);
        return rc;
    }
    emb_commit_req req = { .t = t, .fault = (int)kvq__choose_fault(e->db), .done = 0, .rc = 0 };
    pthread_cond_init(&req.cond, NULL);
    t->committing = 1;

    int upkeep = 0;
    pthread_mutex_lock(&e->gc_mu);
    if (e->queue_tail != NULL)
        e->queue_tail->next = &req;
    else
        e->queue_head = &req;
    e->queue_tail = &req;
    while (!req.done) {
        if (!e->leader_active) {
            /* Lead: take the queue as it stands and write it as one batch. */
            e->leader_active = 1;
            emb_commit_req *batch[MAX_BATCH];
            size_t n = 0;
            size_t bytes = 0;
            while (e->queue_head != NULL && n < MAX_BATCH &&
                   (n == 0 || bytes + e->queue_head->t->size <= MAX_BATCH_BYTES)) {
                bytes += e->queue_head->t->size;
                batch[n++] = e->queue_head;
                e->queue_head = e->queue_head->next;
            }
            if (e->queue_head == NULL)
                e->queue_tail = NULL;
            pthread_mutex_unlock(&e->gc_mu);
            int64_t to_sync = 0;
            int own = -1, own_done = 0, locked = 0;
            if (e->cq != NULL) {
                /* The lock is taken: publish the batch for its holder (or the next) to write
                 * with its own, and sleep until it is written or the lock is ours. */
                if (flock(e->lock_fd, LOCK_EX | LOCK_NB) == 0)
                    locked = 1;
                else if ((own = emb_cq_publish(e, batch, n)) >= 0)
                    locked = emb_cq_wait(e, own);
            }
            if (own < 0 && !locked) {
                lock_commit(e);
                locked = 1;
            }
            if (!locked) {
                own_done = 1;
            } else if (write_batch(e, batch, n, own, &own_done, &to_sync) == KVQ_ENOSPC) {
                int ignored;
                lock_commit(e);
                write_batch(e, batch, own_done ? 0 : n, -1, &ignored, &to_sync);
            }
            if (own >= 0 && own_done)
                to_sync = emb_cq_collect(e, own, batch, n);
            else if (own >= 0)
                emb_cq_release(e, own);
            /* The batch is written: hand the leadership on before the sync, so that this
             * process's next batch is written while this one waits for the disk (as other
             * processes' are: the commit lock is free). Its sync then covers this one's, or
             * starts as soon as this one ends (sync.c). */
            if (!e->durable && to_sync > 0 && e->shm != NULL &&
                !(e->opts.flags & KVQ_DB_READ_ONLY)) {
                int64_t cur = __atomic_load_n(&e->shm->relaxed_version, __ATOMIC_SEQ_CST);
                while (cur < to_sync &&
                       !__atomic_compare_exchange_n(&e->shm->relaxed_version, &cur, to_sync, 0,
                                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
                }
            }
            int pipelined = emb_pipelined(e);
            if (pipelined) {
                pthread_mutex_lock(&e->gc_mu);
                e->leader_active = 0;
                if (e->queue_head != NULL)
                    pthread_cond_signal(&e->queue_head->cond);
                pthread_mutex_unlock(&e->gc_mu);
            }
            int src = to_sync > 0 ? emb_sync_upto(e, to_sync) : 0;
            upkeep |= src == 0 && to_sync > 0;
            pthread_mutex_lock(&e->gc_mu);
            if (src != 0)
                sync_failed(e, batch, n);
            if (!pipelined) {
                /* Without the pipeline the leadership is kept through the sync: this
                 * process's next commits gather meanwhile and go as the next batch. */
                e->leader_active = 0;
                if (e->queue_head != NULL)
                    pthread_cond_signal(&e->queue_head->cond);
            }
            /* Each waiter sleeps on its own condition, so only the finished ones and the next
             * leader (the head of the queue) are woken, not every committer. */
            for (size_t i = 0; i < n; i++) {
                batch[i]->done = 1;
                if (batch[i] != &req)
                    pthread_cond_signal(&batch[i]->cond);
            }
        } else {
            pthread_cond_wait(&req.cond, &e->gc_mu);
        }
    }
    pthread_mutex_unlock(&e->gc_mu);
    pthread_cond_destroy(&req.cond);
    /* The storage's upkeep, after this thread led a batch that is now synced and its
     * committers are woken: no lock is held (store.h). */
    if (upkeep && e->so->checkpoint != NULL &&
        !__atomic_exchange_n(&e->upkeep_busy, 1, __ATOMIC_ACQUIRE)) {
        (void)e->so->checkpoint(e->store);
        __atomic_store_n(&e->upkeep_busy, 0, __ATOMIC_RELEASE);
    }

    t->committing = 0;
    int rc = req.rc;
    if (rc == 0 || (rc == KVQ_ECOMMIT_UNKNOWN_RESULT && t->committed_version > 0)) {
        t->committed = 1;
        if (rc == 0)
            __atomic_add_fetch(&e->db->n_commits, 1, __ATOMIC_RELAXED);
    }
    if (rc != 0) {
        /* Keep the detail for the caller's thread (it was recorded on the leader's). */
        kvq__error(rc, "%s", req.msg[0] ? req.msg : kvq_strerror(rc));
    }
    emb_watches_after_commit(t, rc);
    return rc;
}
