/* Watches across threads and processes, without polling.
 *
 * kvq.shm holds a counter that every commit bumps after its data is durable. Each process that
 * has armed watches runs one watcher thread, asleep on that counter with a shared futex. When it
 * changes, the thread reads every armed watch's key in one read transaction and fires those whose
 * value differs from the value their transaction saw. The counter is read before the keys, so a
 * commit that lands during the scan changes it and the thread scans again: no change is missed. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "emb.h"

#define SHM_MAGIC   0x6b767131u /* "kvq1" */
#define MAX_WATCHES 10000

static long futex(uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

int emb_shm_open(emb_db *e)
{
    size_t n = strlen(e->dir) + 16;
    char *p = kvq__malloc(n);
    if (p == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    snprintf(p, n, "%s/kvq.shm", e->dir);
    int ro = (e->opts.flags & KVQ_DB_READ_ONLY) != 0;
    int fd = open(p, (ro ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, e->opts.file_mode);
    if (fd < 0) {
        int rc = kvq__error(errno == EACCES ? KVQ_EPERM : KVQ_EIO, "cannot open %s: %s", p,
                            strerror(errno));
        kvq__free(p);
        return rc;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = kvq__error(KVQ_EIO, "cannot stat %s: %s", p, strerror(errno));
        close(fd);
        kvq__free(p);
        return rc;
    }
    /* A read-only handle cannot mend the page; a short one would fault when read (SIGBUS). */
    if (ro && st.st_size < 4096) {
        int rc = kvq__error(KVQ_EDAMAGED,
                            "%s is %lld bytes, not kvq's 4096: open the database read-write once "
                            "to rebuild it",
                            p, (long long)st.st_size);
        close(fd);
        kvq__free(p);
        return rc;
    }
    if (!ro && st.st_size != 4096 && ftruncate(fd, 4096) != 0) {
        int rc = kvq__error(KVQ_EIO, "cannot size %s: %s", p, strerror(errno));
        close(fd);
        kvq__free(p);
        return rc;
    }
    void *m = mmap(NULL, 4096, ro ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int rc = kvq__error(KVQ_EIO, "cannot map %s: %s", p, strerror(errno));
        close(fd);
        kvq__free(p);
        return rc;
    }
    emb_shm *shm = m;
    uint32_t magic = __atomic_load_n(&shm->magic, __ATOMIC_SEQ_CST);
    if (ro && magic != SHM_MAGIC && magic != 0) {
        int rc = kvq__error(KVQ_EDAMAGED,
                            "%s is not kvq's (magic 0x%08x): open the database read-write once to "
                            "rebuild it",
                            p, (unsigned)magic);
        munmap(m, 4096);
        close(fd);
        kvq__free(p);
        return rc;
    }
    if (!ro && magic != SHM_MAGIC) {
        /* New, or not kvq's (junk, another program's file): every process of this kvq marks the
         * page when it opens it, so nobody is using this one. Start it from zeros, every
         * field's starting value, under the commit lock so that two first openers agree. */
        if (e->lock_fd >= 0)
            while (flock(e->lock_fd, LOCK_EX) != 0 && errno == EINTR) {
            }
        if (__atomic_load_n(&shm->magic, __ATOMIC_SEQ_CST) != SHM_MAGIC) {
            memset(m, 0, 4096);
            __atomic_store_n(&shm->magic, SHM_MAGIC, __ATOMIC_SEQ_CST);
        }
        if (e->lock_fd >= 0)
            flock(e->lock_fd, LOCK_UN);
    }
    kvq__free(p);
    e->shm = m;
    e->shm_fd = fd;
    return 0;
}

void emb_notify_commit(emb_db *e)
{
    if (e->shm == NULL)
        return;
    __atomic_add_fetch(&e->shm->seq, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&e->shm->waiters, __ATOMIC_SEQ_CST) > 0)
        futex(&e->shm->seq, FUTEX_WAKE, INT_MAX, NULL);
}

/* ---- the watch filter --------------------------------------------------------------------- */

uint32_t emb_watch_bucket(const uint8_t *key, size_t n)
{
    /* FNV-1a: the same in every process, as the buckets are shared. */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ key[i]) * 0x100000001b3ULL;
    return (uint32_t)((h ^ (h >> 32)) % EMB_WATCH_BUCKETS);
}

void emb_watch_touch(emb_db *e, const uint8_t *key, size_t n)
{
    uint32_t b = emb_watch_bucket(key, n);
    e->touched[b / 64] |= 1ULL << (b % 64);
}

void emb_watch_publish(emb_db *e)
{
    for (uint32_t w = 0; w < EMB_WATCH_BUCKETS / 64; w++) {
        uint64_t bits = e->touched[w];
        e->touched[w] = 0;
        while (bits != 0 && e->shm != NULL) {
            uint32_t b = w * 64 + (uint32_t)__builtin_ctzll(bits);
            bits &= bits - 1;
            __atomic_add_fetch(&e->shm->key_gen[b], 1, __ATOMIC_SEQ_CST);
        }
    }
}

void emb_watch_touch_all(emb_shm *m)
{
    __atomic_add_fetch(&m->any_gen, 1, __ATOMIC_SEQ_CST);
}

/* watch_key_changed's answer when SQLite refused the read transiently. */
#define WATCH_READ_AGAIN 1

static int watch_key_changed(emb_db *e, emb_watch *ew, int *changed)
{
    emb_conn *c = e->watch_conn;
    sqlite3_stmt *st = c->get;
    static const uint8_t z[1] = { 0 };
    sqlite3_bind_blob(st, 1, ew->key.n ? ew->key.p : z, (int)ew->key.n, SQLITE_STATIC);
    int src = sqlite3_step(st);
    int rc = 0;
    if (src == SQLITE_ROW) {
        const uint8_t *v = sqlite3_column_blob(st, 1);
        size_t vn = (size_t)sqlite3_column_bytes(st, 1);
        *changed = !ew->present || kvq__bytes_cmp(v, vn, ew->value.p, ew->value.n) != 0;
    } else if (src == SQLITE_DONE) {
        *changed = ew->present;
    } else if ((src & 0xff) == SQLITE_BUSY || (src & 0xff) == SQLITE_PROTOCOL) {
        /* The scan's snapshot could not start for a moment (the first read of a WAL read
         * transaction): transient, not the watch's error. */
        rc = WATCH_READ_AGAIN;
    } else {
        rc = emb_sqlite_error(c->db, src, "reading a watched key");
    }
    sqlite3_reset(st);
    return rc;
}

/* Whether the filter lets this watch's key be skipped: its value was found unchanged when the
 * counters were as they are now. */
static int filter_skips(const emb_watch *ew, uint64_t any)
{
    return ew->seen_valid && ew->cur_gen == ew->seen_gen && ew->seen_any == any;
}

/* Reads the key of every armed watch whose bucket moved and fires the changed ones. Called with
 * watch_mu held.
 *
 * The counters are loaded before the scan's snapshot starts, and a commit moves them after its
 * own COMMIT: so a commit missing from the snapshot moves them after they were loaded, and the
 * next scan (its wake-up comes after that) reads the key again. */
static void scan(emb_db *e)
{
    if (e->watches == NULL)
        return;
    uint64_t any = __atomic_load_n(&e->shm->any_gen, __ATOMIC_SEQ_CST);
    int need = 0;
    for (kvq_watch *w = e->watches; w != NULL; w = w->next) {
        emb_watch *ew = w->engine_data;
        ew->cur_gen = __atomic_load_n(&e->shm->key_gen[ew->bucket], __ATOMIC_SEQ_CST);
        pthread_mutex_lock(&w->mu);
        int done = w->state == KVQ__WATCH_DONE;
        pthread_mutex_unlock(&w->mu);
        need |= done || !filter_skips(ew, any);
    }
    if (!need)
        return;
    if (e->watch_conn == NULL && emb_conn_acquire(e, &e->watch_conn) != 0)
        return;
    emb_conn *c = e->watch_conn;
    if (sqlite3_step(c->begin) != SQLITE_DONE) {
        sqlite3_reset(c->begin);
        return;
    }
    sqlite3_reset(c->begin);
    e->watch_scans++;
    kvq_watch *w = e->watches;
    while (w != NULL) {
        kvq_watch *next = w->next;
        emb_watch *ew = w->engine_data;
        pthread_mutex_lock(&w->mu);
        int done = w->state == KVQ__WATCH_DONE;
        pthread_mutex_unlock(&w->mu);
        if (!done && filter_skips(ew, any)) {
            w = next;
            continue;
        }
        int changed = 0;
        int rc = done ? 0 : watch_key_changed(e, ew, &changed);
        e->watch_reads += !done;
        if (rc == WATCH_READ_AGAIN) {
            /* Scan again in a moment, from a new snapshot; the watches stay armed. */
            sqlite3_step(c->rollback);
            sqlite3_reset(c->rollback);
            kvq__sleep_us(1000);
            e->watch_rescan = 1;
            return;
        }
        if (rc == 0 && !changed && !done) {
            ew->seen_gen = ew->cur_gen;
            ew->seen_any = any;
            ew->seen_valid = 1;
        }
        if (rc != 0 || changed || done) {
            /* Unlink and drop the engine's reference. */
            if (w->prev != NULL)
                w->prev->next = w->next;
            else
                e->watches = w->next;
            if (w->next != NULL)
                w->next->prev = w->prev;
            w->next = w->prev = NULL;
            ew->linked = 0;
            e->n_watches--;
            kvq__watch_settle(w, rc);
            kvq__watch_unref(w);
        }
        w = next;
    }
    sqlite3_step(c->rollback);
    sqlite3_reset(c->rollback);
}

static void *watch_thread(void *arg)
{
    emb_db *e = arg;
    pthread_mutex_lock(&e->watch_mu);
    while (!e->watch_stop) {
        uint32_t seq = __atomic_load_n(&e->shm->seq, __ATOMIC_SEQ_CST);
        e->watch_rescan = 0;
        scan(e);
        if (e->watch_stop || e->watch_rescan)
            continue;
        pthread_mutex_unlock(&e->watch_mu);
        __atomic_add_fetch(&e->shm->waiters, 1, __ATOMIC_SEQ_CST);
        /* Sleeps until a commit (of any process) bumps the counter, or a local event wakes
         * it; the timeout only bounds the damage of a lost wake-up from a crashed process. */
        struct timespec ts = { .tv_sec = 1, .tv_nsec = 0 };
        if (__atomic_load_n(&e->shm->seq, __ATOMIC_SEQ_CST) == seq)
            futex(&e->shm->seq, FUTEX_WAIT, seq, &ts);
        __atomic_sub_fetch(&e->shm->waiters, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_lock(&e->watch_mu);
    }
    pthread_mutex_unlock(&e->watch_mu);
    return NULL;
}

/* Wakes this process's watcher thread (it may be asleep on the shared counter). */
static void wake_local(emb_db *e)
{
    e->watch_rescan = 1;
    futex(&e->shm->seq, FUTEX_WAKE, INT_MAX, NULL);
}

int emb_watch_create(void *tp, kvq_watch *w, const uint8_t *key, size_t key_len)
{
    emb_txn *t = tp;
    if (t->committing || t->committed)
        return kvq__error(KVQ_EUSED_DURING_COMMIT, "the transaction has committed");
    if (t->no_ryw)
        return kvq__error(KVQ_EWATCHES_DISABLED,
                          "watches cannot be set when read-your-writes is disabled");
    /* The value the transaction sees now (its own write, or the value at its read version) is
     * the one the watch compares against. It is read as a snapshot: a watch adds no conflict. */
    kvq_bytes v;
    int present = 0;
    int rc = kvq_txn_get(&v, &present, t->owner, key, key_len, KVQ_SNAPSHOT);
    if (rc != 0)
        return rc;
    emb_watch *ew = kvq__calloc(1, sizeof(*ew));
    if (ew == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for a watch");
    ew->e = t->e;
    if (emb_str_set(&ew->key, key, key_len) != 0 || emb_str_set(&ew->value, v.data, v.len) != 0) {
        emb_str_free(&ew->key);
        kvq__free(ew);
        return KVQ_ENOMEM;
    }
    ew->present = present;
    ew->bucket = emb_watch_bucket(key, key_len);
    w->engine_data = ew;
    if (t->n_pending == t->cap_pending) {
        size_t cap = t->cap_pending ? t->cap_pending * 2 : 4;
        kvq_watch **p = kvq__realloc(t->pending_watches, cap * sizeof(*p));
        if (p == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory for a watch");
        t->pending_watches = p;
        t->cap_pending = cap;
    }
    /* The transaction holds a reference until it commits or is abandoned. */
    kvq__watch_ref(w);
    t->pending_watches[t->n_pending++] = w;
    return 0;
}

static int start_thread(emb_db *e)
{
    if (e->watch_thread_started)
        return 0;
    if (pthread_create(&e->watch_thread, NULL, watch_thread, e) != 0)
        return kvq__error(KVQ_ENOMEM, "cannot start the watch thread");
    e->watch_thread_started = 1;
    return 0;
}

void emb_watches_after_commit(emb_txn *t, int rc)
{
    emb_db *e = t->e;
    if (t->n_pending == 0)
        return;
    pthread_mutex_lock(&e->watch_mu);
    for (size_t i = 0; i < t->n_pending; i++) {
        kvq_watch *w = t->pending_watches[i];
        emb_watch *ew = w->engine_data;
        int err = rc;
        if (err == 0 && e->n_watches >= MAX_WATCHES)
            err = KVQ_ETOO_MANY_WATCHES;
        if (err == 0)
            err = start_thread(e);
        if (err != 0) {
            kvq__watch_settle(w, err);
            kvq__watch_unref(w);
            continue;
        }
        /* Arm: the list takes over the transaction's reference. */
        pthread_mutex_lock(&w->mu);
        if (w->state == KVQ__WATCH_PENDING)
            w->state = KVQ__WATCH_ARMED;
        pthread_mutex_unlock(&w->mu);
        w->prev = NULL;
        w->next = e->watches;
        if (e->watches != NULL)
            e->watches->prev = w;
        e->watches = w;
        ew->linked = 1;
        e->n_watches++;
    }
    t->n_pending = 0;
    wake_local(e);
    pthread_mutex_unlock(&e->watch_mu);
}

void emb_watches_abandon(emb_txn *t)
{
    for (size_t i = 0; i < t->n_pending; i++) {
        kvq__watch_settle(t->pending_watches[i], KVQ_ETRANSACTION_CANCELLED);
        kvq__watch_unref(t->pending_watches[i]);
    }
    t->n_pending = 0;
}

void emb_watch_release(kvq_watch *w)
{
    emb_watch *ew = w->engine_data;
    if (ew == NULL)
        return;
    emb_str_free(&ew->key);
    emb_str_free(&ew->value);
    kvq__free(ew);
    w->engine_data = NULL;
}

void emb_watch_shutdown(emb_db *e)
{
    if (e->watch_thread_started) {
        pthread_mutex_lock(&e->watch_mu);
        e->watch_stop = 1;
        wake_local(e);
        pthread_mutex_unlock(&e->watch_mu);
        pthread_join(e->watch_thread, NULL);
        e->watch_thread_started = 0;
    }
    /* Watches still armed end as cancelled. */
    kvq_watch *w = e->watches;
    while (w != NULL) {
        kvq_watch *next = w->next;
        w->next = w->prev = NULL;
        kvq__watch_settle(w, KVQ_EWATCH_CANCELLED);
        kvq__watch_unref(w);
        w = next;
    }
    e->watches = NULL;
    e->n_watches = 0;
    if (e->watch_conn != NULL) {
        emb_conn_release(e, e->watch_conn);
        e->watch_conn = NULL;
    }
    if (e->shm != NULL) {
        munmap(e->shm, 4096);
        e->shm = NULL;
    }
    if (e->shm_fd >= 0) {
        close(e->shm_fd);
        e->shm_fd = -1;
    }
}
