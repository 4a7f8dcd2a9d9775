/* Watches across threads and processes, without polling.
 *
 * kvq.shm holds a counter that every commit bumps once its data is written. Each process that
 * has armed watches runs one watcher thread, asleep on that counter with a shared futex. When it
 * changes, the thread reads every armed watch's key in one snapshot and, once that snapshot is
 * durable (it waits for the sync under way, sync.c), fires those whose value differs from the
 * value their transaction saw: a watch never announces what a crash could take back, and the
 * woken reader, whose read version is the durable one, sees the change at once. The counter is
 * read before the keys, so a commit that lands during the scan changes it and the thread scans
 * again: no change is missed. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "emb.h"

#define MAX_WATCHES 10000

static long futex(uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
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

static int watch_key_changed(emb_db *e, emb_snap *snap, emb_watch *ew, int *changed)
{
    kvq_bytes v;
    int present = 0;
    int rc = e->so->get(snap, ew->key.p, ew->key.n, &v, &present);
    if (rc == 0)
        *changed = present != ew->present ||
                   (present && kvq__bytes_cmp(v.data, v.len, ew->value.p, ew->value.n) != 0);
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
    emb_snap *snap = NULL;
    emb_snap_info info;
    if (e->so->snap_open(e->store, 0, &snap, &info) != 0) {
        /* The storage could not start a snapshot (it retries transient refusals itself): scan
         * again in a moment; the watches stay armed. */
        kvq__sleep_us(1000);
        e->watch_rescan = 1;
        return;
    }
    e->watch_scans++;
    /* A watch fires only on durable data, with or without the commit pipeline: a commit wakes
     * the watchers once it is written, before its sync, so a snapshot that holds a commit not
     * yet synced waits for its sync first (usually the one under way), without watch_mu, so
     * that committers arming watches do not wait behind it. Watches armed meanwhile are read
     * as well: their counters, loaded before the snapshot or not at all, can only make the
     * next scan read them again. */
    if (!emb_synced(e, info.latest)) {
        pthread_mutex_unlock(&e->watch_mu);
        int rc = emb_sync_upto(e, info.latest);
        pthread_mutex_lock(&e->watch_mu);
        if (rc != 0 || e->watch_stop) {
            e->so->snap_close(snap);
            if (!e->watch_stop)
                kvq__sleep_us(1000);
            e->watch_rescan = 1;
            return;
        }
    }
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
        int rc = done ? 0 : watch_key_changed(e, snap, ew, &changed);
        e->watch_reads += !done;
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
    e->so->snap_close(snap);
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
}
