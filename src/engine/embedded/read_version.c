/* Read versions that advance with time, even when nothing commits.
 *
 * A transaction's snapshot is a storage snapshot (store.h); the version stored in it (S) is the
 * version of the last commit the snapshot sees. Handing out S as the read version is correct but
 * stands still on a quiet database, whereas FoundationDB's read versions advance about a million
 * a second, and kvq measures time (leases, staging timeouts) in read versions. A read version R
 * promises: every commit with a version <= R is in the snapshot, and every commit not in it has
 * a version > R (the conflict check treats versions > R as concurrent, and a versionstamped
 * key's unreadable range starts at R + 1). So R may exceed S only as far as every commit the
 * snapshot misses is guaranteed a larger version. Two counters in kvq.shm provide that:
 *
 * - rv_floor: readers publish their clock reading into it (an atomic max) before their snapshot;
 *   every commit picks a version >= rv_floor, read after it marked itself in flight.
 * - commit_seq: the commit lock holder makes it odd before choosing its version and even again
 *   after its storage commit (or abort) is done, before releasing the lock.
 *
 * Reader: f = max(rv_floor, clock) (published); s1 = commit_seq; snapshot (S); s2 = commit_seq.
 * If s1 == s2 and even, no commit was in flight at any time between the two loads, so a commit
 * the snapshot misses marked itself in flight after s2 was loaded, hence chose its version after
 * f was published: its version is >= f, and R = max(S, f - 1) is safe. (A commit that ended
 * before s1 was loaded is in the snapshot: its COMMIT had returned.)
 *
 * If s1 == s2 and odd, one commit K was in flight throughout. K publishes its version v (with
 * its odd counter value as a tag) and raises rv_floor to v before its COMMIT; every commit after
 * K then gets a version >= v. The snapshot may or may not hold K, so R = max(S, v - 1) is safe
 * once the tag shows that v is K's (K may not have chosen v yet). Otherwise R = S.
 *
 * Every operation is sequentially consistent: the argument is a store-buffering one (the reader
 * writes rv_floor then reads commit_seq; the committer writes commit_seq then reads rv_floor),
 * which needs a single total order. The lock holder is the only writer of commit_seq,
 * inflight_version and inflight_seq. A committer killed while commit_seq is odd leaves it odd,
 * with the commit lock free: the next reader that finds it so takes the lock for a moment and
 * makes the counter even (repair_dead_commit), and the next committer moves it to the next odd
 * value in any case. Until then readers fall back to its published version (or S), which is
 * safe but stands still.
 *
 * The clock is not the wall clock but the version clock: vbase_version + (CLOCK_MONOTONIC -
 * vbase_mono), its base fixed in kvq.shm once per boot from the wall clock (raised above
 * rv_floor and the stored version, should either be ahead of it), so
 * that every process counts from the same origin and a step of the wall clock, forward or back,
 * does not move versions (a step forward, later corrected, would otherwise hold versions still
 * for as long as the step, and with them every lease and delay). CLOCK_MONOTONIC is one clock
 * for the whole machine and starts again at boot, hence the boot id with the base.
 *
 * Versions never go back, even across restarts: a commit's version is also > the previous
 * one (stored in the database) and >= rv_floor, and readers take the maximum published reading. */
#include <errno.h>
#include <stdio.h>
#include <sys/file.h>

#include "emb.h"

/* This boot's id from /proc (a UUID, kept as 128 bits); zeros when it cannot be read. */
static void read_boot_id(uint64_t out[2])
{
    out[0] = out[1] = 0;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f == NULL)
        return;
    char buf[64];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    int digits = 0;
    for (size_t i = 0; i < n && digits < 32; i++) {
        int d = buf[i] >= '0' && buf[i] <= '9'   ? buf[i] - '0'
                : buf[i] >= 'a' && buf[i] <= 'f' ? buf[i] - 'a' + 10
                                                 : -1;
        if (d < 0)
            continue;
        out[digits / 16] = out[digits / 16] << 4 | (uint64_t)d;
        digits++;
    }
}

/* Reads the base if this boot set it: 1 and the base, or 0. */
static int load_base(const emb_db *e, int64_t *version, int64_t *mono)
{
    const emb_shm *m = e->shm;
    uint64_t g1 = __atomic_load_n(&m->vbase_gen, __ATOMIC_ACQUIRE);
    if (g1 == 0 || (g1 & 1))
        return 0;
    *version = __atomic_load_n(&m->vbase_version, __ATOMIC_RELAXED);
    *mono = __atomic_load_n(&m->vbase_mono, __ATOMIC_RELAXED);
    uint64_t b0 = __atomic_load_n(&m->vbase_boot[0], __ATOMIC_RELAXED);
    uint64_t b1 = __atomic_load_n(&m->vbase_boot[1], __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&m->vbase_gen, __ATOMIC_RELAXED) != g1)
        return 0;
    return b0 == e->boot_id[0] && b1 == e->boot_id[1];
}

/* Raises *p to at least v; returns the value *p then holds (>= v). */
static int64_t atomic_max(int64_t *p, int64_t v);

/* The stored version (that of the newest commit), from a snapshot of the storage; 0 when it
 * cannot be read (the base then comes from the clock and rv_floor alone, as before). */
static int64_t stored_version(emb_db *e)
{
    emb_snap *snap = NULL;
    emb_snap_info info = { 0, 0 };
    if (e->store == NULL || e->so->snap_open(e->store, 0, &snap, &info) != 0)
        return 0;
    e->so->snap_close(snap);
    return info.version;
}

void emb_rv_clock_open(emb_db *e)
{
    read_boot_id(e->boot_id);
    emb_shm *m = e->shm;
    int64_t v, mono;
    if (m == NULL || (e->opts.flags & KVQ_DB_READ_ONLY) || load_base(e, &v, &mono))
        return;
    /* Another boot's base, or none: fix this boot's, under the commit lock so that processes
     * opening together agree (the first one sets it; the others find it set). */
    if (e->lock_fd >= 0)
        while (flock(e->lock_fd, LOCK_EX) != 0 && errno == EINTR) {
        }
    if (!load_base(e, &v, &mono)) {
        int64_t base = kvq__now_us();
        int64_t floor = __atomic_load_n(&m->rv_floor, __ATOMIC_SEQ_CST);
        if (base <= floor)
            base = floor + 1;
        /* Above the stored version too: a kvq.shm that was lost or rebuilt (rv_floor 0) while
         * the database's versions ran ahead of the wall clock would otherwise hold read
         * versions at the stored one until the clock caught up. */
        int64_t stored = stored_version(e);
        if (base <= stored)
            base = stored + 1;
        uint64_t g = __atomic_load_n(&m->vbase_gen, __ATOMIC_RELAXED);
        g = (g + 1) | 1;
        __atomic_store_n(&m->vbase_gen, g, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_RELEASE);
        __atomic_store_n(&m->vbase_version, base, __ATOMIC_RELAXED);
        __atomic_store_n(&m->vbase_mono, kvq__mono_us(), __ATOMIC_RELAXED);
        __atomic_store_n(&m->vbase_boot[0], e->boot_id[0], __ATOMIC_RELAXED);
        __atomic_store_n(&m->vbase_boot[1], e->boot_id[1], __ATOMIC_RELAXED);
        __atomic_store_n(&m->vbase_gen, g + 1, __ATOMIC_RELEASE);
    }
    if (e->lock_fd >= 0)
        flock(e->lock_fd, LOCK_UN);
}

int64_t emb_rv_clock(emb_db *e)
{
    int64_t v, mono;
    if (e->shm == NULL || !load_base(e, &v, &mono))
        return kvq__now_us();
    return v + (kvq__mono_us() - mono);
}

/* Raises *p to at least v; returns the value *p then holds (>= v). */
static int64_t atomic_max(int64_t *p, int64_t v)
{
    int64_t cur = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (cur < v) {
        if (__atomic_compare_exchange_n(p, &cur, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return v;
    }
    return cur;
}

/* An odd commit_seq with the commit lock free means its committer died between marking itself
 * in flight and the end of its commit: a live one holds the lock throughout. Whatever it did,
 * its storage write is now committed or undone, and every later commit takes a
 * version at least its published one (rv_floor was raised to it first), so ending its in-flight
 * mark is safe; without it, read versions would stand still until some process commits. The
 * commit lock is also what this process's own leader holds while it commits, and flock does not
 * exclude two holders of one descriptor: the leader flag, under gc_mu, tells that case apart.
 * Returns the counter as it then stands. */
static uint64_t repair_dead_commit(emb_db *e)
{
    emb_shm *m = e->shm;
    if (e->lock_fd >= 0) {
        pthread_mutex_lock(&e->gc_mu);
        if (!e->leader_active && flock(e->lock_fd, LOCK_EX | LOCK_NB) == 0) {
            uint64_t s = __atomic_load_n(&m->commit_seq, __ATOMIC_SEQ_CST);
            if (s & 1) {
                /* Which keys it changed is unknown: every watcher looks again. */
                emb_shm_touch_all(m);
                __atomic_store_n(&m->commit_seq, s + 1, __ATOMIC_SEQ_CST);
                emb_notify_commit(e);
            }
            flock(e->lock_fd, LOCK_UN);
        }
        pthread_mutex_unlock(&e->gc_mu);
    }
    return __atomic_load_n(&m->commit_seq, __ATOMIC_SEQ_CST);
}

void emb_rv_before_snapshot(emb_db *e, emb_rv_probe *p)
{
    p->published = 0;
    p->floor = 0;
    p->seq = 0;
    emb_shm *m = e->shm;
    if (m == NULL)
        return;
    /* A read-only handle maps the page read-only: it cannot publish, and so its read versions
     * advance with time only while a commit is in flight (below). */
    if (!(e->opts.flags & KVQ_DB_READ_ONLY)) {
        p->floor = atomic_max(&m->rv_floor, emb_rv_clock(e));
        p->published = 1;
    }
    p->seq = __atomic_load_n(&m->commit_seq, __ATOMIC_SEQ_CST);
    if ((p->seq & 1) && p->published)
        p->seq = repair_dead_commit(e);
}

int64_t emb_rv_after_snapshot(emb_db *e, const emb_rv_probe *p, int64_t stored)
{
    emb_shm *m = e->shm;
    if (m == NULL)
        return stored;
    uint64_t s2 = __atomic_load_n(&m->commit_seq, __ATOMIC_SEQ_CST);
    if (s2 != p->seq)
        return stored; /* a commit started or ended meanwhile: it may be in the snapshot or not */
    int64_t rv = stored;
    if ((s2 & 1) == 0) {
        if (p->published && p->floor - 1 > rv)
            rv = p->floor - 1;
        return rv;
    }
    /* One commit in flight throughout: use its version once it has published it. */
    uint64_t tag = __atomic_load_n(&m->inflight_seq, __ATOMIC_SEQ_CST);
    int64_t v = __atomic_load_n(&m->inflight_version, __ATOMIC_SEQ_CST);
    uint64_t s3 = __atomic_load_n(&m->commit_seq, __ATOMIC_SEQ_CST);
    if (tag == s2 && s3 == s2 && v - 1 > rv)
        rv = v - 1;
    return rv;
}

int64_t emb_rv_commit_begin(emb_db *e, int64_t prev)
{
    /* Versions advance with time, about a million a second, as FoundationDB's do. */
    int64_t version = emb_rv_clock(e);
    if (version < prev + 1)
        version = prev + 1;
    emb_shm *m = e->shm;
    if (m == NULL)
        return version;
    /* The next odd value: from an even counter, +1; from an odd one (a committer died in its
     * commit), +2, which also repairs it. */
    uint64_t before = __atomic_load_n(&m->commit_seq, __ATOMIC_SEQ_CST);
    if (before & 1)
        emb_shm_touch_all(m); /* the dead committer's keys are unknown */
    uint64_t mine = (before + 1) | 1;
    __atomic_store_n(&m->commit_seq, mine, __ATOMIC_SEQ_CST);
    int64_t floor = __atomic_load_n(&m->rv_floor, __ATOMIC_SEQ_CST);
    if (version < floor)
        version = floor;
    /* Commits after this one get a larger or equal version even if this one fails and the
     * clock steps back: readers that saw it in flight rely on that. */
    atomic_max(&m->rv_floor, version);
    __atomic_store_n(&m->inflight_version, version, __ATOMIC_SEQ_CST);
    __atomic_store_n(&m->inflight_seq, mine, __ATOMIC_SEQ_CST);
    return version;
}

void emb_rv_commit_end(emb_db *e)
{
    emb_shm *m = e->shm;
    if (m == NULL)
        return;
    uint64_t s = __atomic_load_n(&m->commit_seq, __ATOMIC_SEQ_CST);
    if (s & 1)
        __atomic_store_n(&m->commit_seq, s + 1, __ATOMIC_SEQ_CST);
}
