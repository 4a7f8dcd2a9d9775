/* The log's append and sync (log.h): the cross-process append lock, records written at the
 * tail, the sync shared by every process, the repair after a failed sync, and group commit. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "engine/embedded/logstore/log_internal.h"
#include "util/bytes.h"

#if defined(__SANITIZE_THREAD__)
#define KVQ__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KVQ__TSAN 1
#endif
#endif
#ifdef KVQ__TSAN
#include <sanitizer/tsan_interface.h>
#endif

#define SYNC_PATIENCE_NS 20000000L

static void rec_header(uint8_t *h,
                       uint32_t prev,
                       uint32_t type,
                       uint64_t lsn,
                       uint64_t synced,
                       const void *data,
                       size_t len)
{
    memset(h, 0, KVQ__LOG_REC_HEADER);
    kvq__le32_put(h, REC_MAGIC);
    kvq__le32_put(h + 8, prev);
    kvq__le32_put(h + 12, type);
    kvq__le64_put(h + 16, lsn);
    kvq__le64_put(h + 24, synced);
    kvq__le32_put(h + 32, (uint32_t)len);
    kvq__le32_put(h + 4, rec_crc(h, data, len));
}

static void futex_wake(uint32_t *w)
{
    syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Takes a robust process-shared mutex; a holder that died leaves it consistent again (the state
 * it guards is only ever published after it is complete). */
static int robust_lock(pthread_mutex_t *m)
{
    int rc = pthread_mutex_lock(m);
    if (rc == EOWNERDEAD) {
        pthread_mutex_consistent(m);
        rc = 0;
    }
    if (rc != 0)
        return kvq__error(KVQ_EIO, "log: shared lock: %s", strerror(rc));
    return 0;
}

/* ---- append, sync ---- */

int kvq__log_lock(kvq__log *log)
{
    if (log == NULL || log->read_only)
        return kvq__error(KVQ_EINVAL, "log: not writable");
    return robust_lock(&log->shm->append_mu);
}

void kvq__log_unlock(kvq__log *log)
{
    pthread_mutex_unlock(&log->shm->append_mu);
}

/* Writes a record at the tail with one pwritev; lock held. */
static int put_record(kvq__log *log,
                      seg_file *s,
                      uint32_t type,
                      const void *data,
                      size_t len,
                      uint64_t *lsn_out,
                      uint64_t *end_out)
{
    log_shm *sh = log->shm;
    uint64_t lsn = sh->tail;
    uint8_t h[KVQ__LOG_REC_HEADER];
    static const uint8_t pad[8];
    uint64_t synced = __atomic_load_n(&sh->synced, __ATOMIC_ACQUIRE);
    rec_header(h, sh->tail_crc, type, lsn, synced, data, len);
    size_t total = sizeof h + (size_t)align8(len);
    /* One contiguous buffer, one pwrite: the record reaches the file in one system call. */
    if (total > log->wcap) {
        size_t cap = log->wcap ? log->wcap : 4096;
        while (cap < total)
            cap *= 2;
        uint8_t *b = kvq__realloc(log->wbuf, cap);
        if (b == NULL)
            return kvq__error(KVQ_ENOMEM, "log: out of memory");
        log->wbuf = b;
        log->wcap = cap;
    }
    memcpy(log->wbuf, h, sizeof h);
    if (len)
        memcpy(log->wbuf + sizeof h, data, len);
    memcpy(log->wbuf + sizeof h + len, pad, (size_t)(align8(len) - len));
    HOOK("append.before");
    log->wrote = 1;
    off_t off = (off_t)(lsn % log->sb);
    ssize_t w;
    do {
        w = pwrite(s->fd, log->wbuf, total, off);
    } while (w < 0 && errno == EINTR);
    if (w != (ssize_t)total) {
        if (w >= 0)
            errno = EIO;
        return sys_err(KVQ_EIO, "write", "log record");
    }
    __atomic_add_fetch(&log->st.pwrites, 1, __ATOMIC_RELAXED);
    HOOK("append.after_pwrite");
    sh->tail_crc = kvq__le32_get(h + 4);
    __atomic_store_n(&sh->tail, lsn + total, __ATOMIC_RELEASE);
    __atomic_add_fetch(&sh->tail_gen, 1, __ATOMIC_RELEASE);
    if (__atomic_load_n(&sh->tail_waiters, __ATOMIC_ACQUIRE))
        futex_wake(&sh->tail_gen);
    HOOK("append.after_tail");
    if (lsn_out)
        *lsn_out = lsn;
    if (end_out)
        *end_out = lsn + total;
    return 0;
}

int kvq__log_append_locked(kvq__log *log,
                           uint32_t type,
                           const void *data,
                           size_t len,
                           uint64_t *lsn_out,
                           uint64_t *end_out)
{
    if (log == NULL || (data == NULL && len > 0) || type < KVQ__LOG_REC_BATCH)
        return kvq__error(KVQ_EINVAL, "log: bad append");
    uint64_t need = KVQ__LOG_REC_HEADER + align8(len);
    if (need + KVQ__LOG_SEG_HEADER + KVQ__LOG_REC_HEADER > log->sb)
        return kvq__error(KVQ_EINVAL, "log: a record of %zu bytes does not fit in a segment", len);
    log->wrote = 0;
    if (__atomic_load_n(&log->shm->sync_failed, __ATOMIC_ACQUIRE))
        return kvq__error(KVQ_EIO, "log: an earlier sync failed; reopen the database");
    log_shm *sh = log->shm;
    int rc = 0;
    pthread_mutex_lock(&log->seg_mu);
    uint64_t seq = seg_of(log, sh->tail);
    seg_file *s = kvq__log_seg_get(log, seq, &rc);
    if (s == NULL && rc == KVQ_ENOTFOUND && sh->tail % log->sb == KVQ__LOG_SEG_HEADER) {
        kvq__error_clear();
        if ((rc = kvq__log_seg_make(log, seq)) == 0)
            s = kvq__log_seg_get(log, seq, &rc);
    }
    if (s == NULL)
        goto out;
    if (sh->tail % log->sb + need + KVQ__LOG_REC_HEADER > log->sb) {
        /* The record does not fit: close this segment with a SEGEND record and go on in the
         * next one, made ready (and its name synced) before anything is written into it. */
        if ((rc = kvq__log_seg_make(log, seq + 1)) != 0)
            goto out;
        uint64_t e;
        if ((rc = put_record(log, s, KVQ__LOG_REC_SEGEND, NULL, 0, NULL, &e)) != 0)
            goto out;
        (void)e;
        __atomic_store_n(&sh->tail, (seq + 1) * log->sb + KVQ__LOG_SEG_HEADER, __ATOMIC_RELEASE);
        s = kvq__log_seg_get(log, seq + 1, &rc);
        if (s == NULL)
            goto out;
    }
    rc = put_record(log, s, type, data, len, lsn_out, end_out);
    if (rc == 0)
        __atomic_add_fetch(&log->st.records, 1, __ATOMIC_RELAXED);
out:
    pthread_mutex_unlock(&log->seg_mu);
    return rc;
}

int kvq__log_sync(kvq__log *log, uint64_t lsn, int *issued)
{
    if (issued)
        *issued = 0;
    if (log == NULL || log->read_only)
        return kvq__error(KVQ_EINVAL, "log: not writable");
    log_shm *sh = log->shm;
    if (__atomic_load_n(&sh->synced, __ATOMIC_ACQUIRE) >= lsn)
        return 0;
    /* Wait for the sync at work (it may cover lsn), but not for long: a syncer that is stopped
     * (SIGSTOP, a debugger) must not hold up every committer. Past the patience, sync alone. */
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += SYNC_PATIENCE_NS;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    int rc = 0, locked = 1;
    int e = pthread_mutex_timedlock(&sh->sync_mu, &dl);
    if (e == EOWNERDEAD) {
        /* The holder died (kill -9 mid-sync): the mutex is ours, and what it guards is only
         * the position of the sync, published atomically. ThreadSanitizer's interceptor of
         * pthread_mutex_timedlock records the lock on 0 only (its lock and trylock take
         * EOWNERDEAD as locked too), so without this it reports the unlock below as "unlock
         * of an unlocked mutex": tell it the lock is held (a try-lock's annotations, which
         * come in pairs). */
#ifdef KVQ__TSAN
        __tsan_mutex_pre_lock(&sh->sync_mu, __tsan_mutex_try_lock);
        __tsan_mutex_post_lock(&sh->sync_mu, __tsan_mutex_try_lock, 0);
#endif
        pthread_mutex_consistent(&sh->sync_mu);
    } else if (e == ETIMEDOUT) {
        locked = 0;
    } else if (e != 0) {
        return kvq__error(KVQ_EIO, "log: shared lock: %s", strerror(e));
    }
    if (__atomic_load_n(&sh->sync_failed, __ATOMIC_ACQUIRE)) {
        rc = kvq__error(KVQ_EIO, "log: an earlier sync failed; reopen the database");
        goto out;
    }
again:;
    uint64_t from = __atomic_load_n(&sh->synced, __ATOMIC_ACQUIRE);
    if (from >= lsn)
        goto out;
    /* Everything written so far: one fdatasync per segment it spans (one, but at a switch). */
    uint64_t to = __atomic_load_n(&sh->tail, __ATOMIC_ACQUIRE);
    HOOK("sync.before");
    /* The files to sync, taken under seg_mu (dup'ed: the cache may close its own), synced
     * outside it, so that readers of the log are not held up by the disk. */
    int fds[4], nfd = 0;
    pthread_mutex_lock(&log->seg_mu);
    /* The log before `first` was released: a checkpoint, synced, holds it (records written
     * but not yet synced included), and its segments may be gone. Read under seg_mu, which
     * the release holds while it renames them. */
    uint64_t first = __atomic_load_n(&sh->first, __ATOMIC_ACQUIRE);
    if (from < first) {
        uint64_t cur = from;
        while (cur < first && !__atomic_compare_exchange_n(&sh->synced, &cur, first, 0,
                                                           __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        }
        from = first;
        if (from >= lsn || from >= to) {
            pthread_mutex_unlock(&log->seg_mu);
            goto out;
        }
    }
    for (uint64_t seq = seg_of(log, from); seq <= seg_of(log, to - 1) && nfd < 4; seq++) {
        seg_file *s = kvq__log_seg_get(log, seq, &rc);
        if (s == NULL)
            break;
        if ((fds[nfd] = dup(s->fd)) < 0) {
            if (errno != EMFILE && errno != ENFILE) {
                rc = sys_err(KVQ_EIO, "dup", "log segment");
                break;
            }
            /* Out of descriptors: sync the cached file itself, holding seg_mu (readers of the
             * log wait for the disk this once) rather than leave the commit unknown. */
            if (issued)
                *issued = 1;
            if (fdatasync(s->fd) != 0) {
                rc = sys_err(KVQ_EIO, "sync", "log segment");
                __atomic_store_n(&sh->sync_failed, 1, __ATOMIC_RELEASE);
                break;
            }
            __atomic_add_fetch(&log->st.syncs, 1, __ATOMIC_RELAXED);
            fds[nfd] = -1;
        }
        nfd++;
    }
    pthread_mutex_unlock(&log->seg_mu);
    if (rc == 0 && seg_of(log, from) + (uint64_t)nfd <= seg_of(log, to - 1))
        to = (seg_of(log, from) + (uint64_t)nfd) * log->sb; /* the rest at the next sync */
    for (int i = 0; i < nfd; i++) {
        if (fds[i] < 0)
            continue; /* synced above */
        if (rc == 0) {
            /* issued says that fdatasync ran, failed or not: the engine learns from a failed
             * one that a repair is due before the log can be trusted again (store.h). */
            if (issued)
                *issued = 1;
            if (fdatasync(fds[i]) != 0) {
                rc = sys_err(KVQ_EIO, "sync", "log segment");
                __atomic_store_n(&sh->sync_failed, 1, __ATOMIC_RELEASE);
            } else {
                __atomic_add_fetch(&log->st.syncs, 1, __ATOMIC_RELAXED);
            }
        }
        close(fds[i]);
    }
    if (rc == 0) {
        HOOK("sync.after");
        /* a solo syncer may race with the holder: the synced position only moves forward */
        uint64_t cur = __atomic_load_n(&sh->synced, __ATOMIC_ACQUIRE);
        while (cur < to && !__atomic_compare_exchange_n(&sh->synced, &cur, to, 0, __ATOMIC_ACQ_REL,
                                                        __ATOMIC_ACQUIRE)) {
        }
        if (nfd > 0 && to < lsn)
            goto again; /* more segments than one round takes */
    }
out:
    if (locked)
        pthread_mutex_unlock(&sh->sync_mu);
    return rc;
}

int kvq__log_append_wrote(kvq__log *log)
{
    return log != NULL && log->wrote;
}

int kvq__log_sync_failed(kvq__log *log)
{
    return log != NULL && __atomic_load_n(&log->shm->sync_failed, __ATOMIC_ACQUIRE) != 0;
}

int kvq__log_repaired(kvq__log *log, uint64_t covered)
{
    if (log == NULL || log->read_only)
        return kvq__error(KVQ_EINVAL, "log: not writable");
    log_shm *sh = log->shm;
    int rc = robust_lock(&sh->append_mu);
    if (rc != 0)
        return rc;
    uint64_t tail = sh->tail;
    if (__atomic_load_n(&sh->sync_failed, __ATOMIC_ACQUIRE)) {
        if (covered < tail) {
            rc = kvq__error(KVQ_EIO, "log: the repair covers %llu of %llu",
                            (unsigned long long)covered, (unsigned long long)tail);
        } else {
            __atomic_store_n(&sh->synced, tail, __ATOMIC_RELEASE);
            __atomic_store_n(&sh->sync_failed, 0, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&sh->append_mu);
    return rc;
}

/* ---- group commit ---- */

static int buf_reserve(kvq__log *log, size_t need)
{
    if (need <= log->buf_cap)
        return 0;
    size_t cap = log->buf_cap ? log->buf_cap : 4096;
    while (cap < need)
        cap *= 2;
    uint8_t *b = kvq__realloc(log->buf, cap);
    if (b == NULL)
        return kvq__error(KVQ_ENOMEM, "log: out of memory");
    log->buf = b;
    log->buf_cap = cap;
    return 0;
}

#define GC_MAX_REQS  256
#define GC_MAX_BYTES (8u << 20)

/* The leader's turn: take pending requests, write them as one record, then sync it. */
static void lead(kvq__log *log, kvq__log_build_fn build, void *arg)
{
    kvq__log_req *reqs[GC_MAX_REQS];
    size_t n = 0, bytes = 0;
    while (log->q_head && n < GC_MAX_REQS) {
        kvq__log_req *r = log->q_head;
        if (n > 0 && bytes + r->len + 8 > GC_MAX_BYTES)
            break;
        log->q_head = r->next;
        reqs[n++] = r;
        bytes += align8(r->len + 4);
    }
    if (log->q_head == NULL)
        log->q_tail = NULL;
    pthread_mutex_unlock(&log->gc_mu);

    uint64_t lsn = 0, end = 0;
    int rc = kvq__log_lock(log);
    if (rc == 0) {
        for (size_t i = 0; i < n; i++)
            reqs[i]->rc = 0;
        if (build)
            rc = build(arg, reqs, n);
        size_t len = 0;
        if (rc == 0) {
            for (size_t i = 0; i < n; i++)
                if (reqs[i]->rc == 0)
                    len += (size_t)align8(4 + reqs[i]->len);
            rc = buf_reserve(log, len ? len : 1);
        }
        if (rc == 0 && len > 0) {
            size_t p = 0;
            for (size_t i = 0; i < n; i++) {
                if (reqs[i]->rc != 0)
                    continue;
                kvq__le32_put(log->buf + p, (uint32_t)reqs[i]->len);
                if (reqs[i]->len)
                    memcpy(log->buf + p + 4, reqs[i]->data, reqs[i]->len);
                size_t step = (size_t)align8(4 + reqs[i]->len);
                memset(log->buf + p + 4 + reqs[i]->len, 0, step - 4 - reqs[i]->len);
                p += step;
            }
            rc = kvq__log_append_locked(log, KVQ__LOG_REC_BATCH, log->buf, len, &lsn, &end);
            if (rc == 0)
                __atomic_add_fetch(&log->st.batches_entries, n, __ATOMIC_RELAXED);
        }
        kvq__log_unlock(log);
    }
    /* The next leader may write its batch while this one syncs. */
    pthread_mutex_lock(&log->gc_mu);
    log->leader = 0;
    pthread_cond_broadcast(&log->gc_cv);
    pthread_mutex_unlock(&log->gc_mu);
    if (rc == 0 && end > 0)
        rc = kvq__log_sync(log, end, NULL);
    pthread_mutex_lock(&log->gc_mu);
    for (size_t i = 0; i < n; i++) {
        if (rc != 0 && reqs[i]->rc == 0)
            reqs[i]->rc = rc;
        reqs[i]->lsn = lsn;
        reqs[i]->end = end;
        reqs[i]->done = 1;
    }
    pthread_cond_broadcast(&log->gc_cv);
}

int kvq__log_group_commit(kvq__log *log, kvq__log_req *req, kvq__log_build_fn build, void *arg)
{
    if (log == NULL || req == NULL || (req->data == NULL && req->len > 0) ||
        req->len > GC_MAX_BYTES || log->read_only)
        return kvq__error(KVQ_EINVAL, "log: bad commit request");
    req->next = NULL;
    req->done = 0;
    req->rc = 0;
    pthread_mutex_lock(&log->gc_mu);
    if (log->q_tail)
        log->q_tail->next = req;
    else
        log->q_head = req;
    log->q_tail = req;
    while (!req->done) {
        if (!log->leader) {
            log->leader = 1;
            lead(log, build, arg); /* returns with gc_mu held */
        } else {
            pthread_cond_wait(&log->gc_cv, &log->gc_mu);
        }
    }
    pthread_mutex_unlock(&log->gc_mu);
    return req->rc;
}

int kvq__log_batch_next(
    const uint8_t *payload, size_t len, size_t *pos, const uint8_t **entry, size_t *entry_len)
{
    if (payload == NULL || pos == NULL || entry == NULL || entry_len == NULL)
        return -1;
    if (*pos >= len)
        return 0;
    if (len - *pos < 4)
        return -1;
    uint32_t n = kvq__le32_get(payload + *pos);
    if ((uint64_t)n > len - *pos - 4)
        return -1;
    *entry = payload + *pos + 4;
    *entry_len = n;
    *pos +=
        (size_t)align8(4 + (uint64_t)n) < len - *pos ? (size_t)align8(4 + (uint64_t)n) : len - *pos;
    return 1;
}
