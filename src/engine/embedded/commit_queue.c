/* The commit queue shared by every process (kvq.cq): one storage transaction for the pending
 * commits of every process, not only of the threads of one.
 *
 * A process whose commits find the commit lock taken does not wait on the lock: it publishes
 * its batch, self-contained as FoundationDB's commit requests are (read version, read and
 * write-conflict ranges, mutations), in a slot of kvq.cq, and sleeps on the slot's futex word.
 * Whoever holds the commit lock next takes every published slot into its own batch, resolves
 * and applies each request in order like its own, commits once, writes each request's outcome
 * (error or version and versionstamp) into its slot and wakes its owner, all before it releases
 * the lock. The owner then waits for the shared sync of that version like any committer
 * (sync.c), so the sync is shared too. After releasing the lock, the leader wakes the owner of
 * one slot that is still waiting, which takes the lock and leads the next batch; an owner that
 * is not woken looks again every 2 ms.
 *
 * A slot moves FREE -> FILLING (its owner writes the requests) -> READY -> TAKEN (a lock
 * holder took it) -> DONE (outcomes written) -> FREE (its owner read them). Only the commit
 * lock holder moves a slot to TAKEN, and it moves every slot it took to DONE before it releases
 * the lock. So a lock holder that finds a slot TAKEN knows that the leader that took it died
 * (the kernel released its flock). Before that leader's storage commit, it wrote the outcomes it
 * would report and the batch's version, then set outcome_ready; the new holder compares that
 * version with the database's (read under the lock, before it commits anything): if the
 * database has it, the dead leader's COMMIT happened and the outcomes stand (DONE); if not,
 * nothing of it happened and the slot is READY again, to be applied by the new holder. A waiter
 * whose leader dies thus learns its true outcome, never sees its commit applied twice, and
 * never hangs.
 *
 * An owner holds an open-file-description lock on its slot's byte of kvq.cq from claiming the
 * slot until it is FREE again: a slot left FILLING or DONE by an owner that died is freed by a
 * later leader that can take that lock, and a READY one that has not changed for a while is
 * dropped, not applied (its committer is gone). A slot that a dead leader left TAKEN turns READY
 * with a fresh time, so the next leader applies it even when its owner died too: a commit nobody
 * was told the outcome of may end either way, and its version tells a waiter which way it went.
 * The file holds nothing that must survive:
 * it is cleared when it was last used before this boot (its slots may be torn) or is not kvq's.
 * A batch that does not fit a slot, or finds no free slot, waits on the commit lock itself. */
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
#include <time.h>
#include <unistd.h>

#include "emb.h"
#include "room.h"

#define CQ_MAGIC      0x6b767163u /* "kvqc" */
#define CQ_FILE_BYTES (EMB_CQ_HEADER_BYTES + (size_t)EMB_CQ_SLOTS * EMB_CQ_SLOT_BYTES)
_Static_assert(CQ_FILE_BYTES == KVQ__CQ_FILE_BYTES, "room.h says the size of kvq.cq");
/* A slot not FREE, unchanged for this long, is checked for a living owner. */
#define CQ_STALE_US 1000000
/* An owner that is not woken looks at its slot and the lock again after this long. */
#define CQ_LOOK_US 2000

enum { CQ_FREE = EMB_CQ_FREE, CQ_FILLING, CQ_READY = EMB_CQ_READY, CQ_TAKEN, CQ_DONE };
_Static_assert(CQ_READY == 2, "the states are numbered as emb.h says");

typedef struct cq_header {
    uint32_t magic;
    uint32_t pad_;
    uint64_t boot[2]; /* the boot that last cleared the file */
} cq_header;

/* One request's outcome. */
typedef struct cq_out {
    int32_t rc;
    uint32_t committed; /* applied at the slot's version */
    uint8_t stamp[10];
    char msg[246];
} cq_out;

typedef struct cq_slot {
    uint32_t state;
    uint32_t gen; /* futex word of the owner: bumped when it should look */
    uint32_t n;   /* requests */
    uint32_t len; /* payload bytes */
    uint32_t outcome_ready;
    uint32_t pad_;
    int64_t version;  /* the batch version of the leader that took it */
    int64_t since_us; /* CLOCK_MONOTONIC of the last change of state */
    cq_out out[EMB_CQ_MAX_REQS];
    uint8_t payload[];
} cq_slot;

#define CQ_PAYLOAD_BYTES (EMB_CQ_SLOT_BYTES - sizeof(cq_slot))

_Static_assert(sizeof(cq_header) <= EMB_CQ_HEADER_BYTES, "the header fits its page");
_Static_assert(sizeof(cq_slot) + 4096 < EMB_CQ_SLOT_BYTES, "a slot has room for requests");

static cq_slot *slot_at(const emb_db *e, int i)
{
    return (cq_slot *)((uint8_t *)e->cq + EMB_CQ_HEADER_BYTES + (size_t)i * EMB_CQ_SLOT_BYTES);
}

static uint32_t ld(const uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

static void set_state(cq_slot *s, uint32_t state)
{
    __atomic_store_n(&s->since_us, kvq__mono_us(), __ATOMIC_SEQ_CST);
    __atomic_store_n(&s->state, state, __ATOMIC_SEQ_CST);
}

static void wake(cq_slot *s)
{
    __atomic_add_fetch(&s->gen, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_futex, &s->gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* The owner's lock on slot i: F_SETLK (take), F_UNLCK (release); 0 when done. */
static int slot_lock(const emb_db *e, int i, short type)
{
    struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = i, .l_len = 1 };
    return fcntl(e->cq_fd, F_OFD_SETLK, &fl);
}

/* Is kvq.cq set up by this boot? */
static int cq_ready(const emb_db *e, int fd)
{
    struct stat st;
    cq_header h = { 0 };
    return fstat(fd, &st) == 0 && (size_t)st.st_size == CQ_FILE_BYTES &&
           pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) && h.magic == CQ_MAGIC &&
           h.boot[0] == e->boot_id[0] && h.boot[1] == e->boot_id[1];
}

/* Clears kvq.cq and allocates its blocks (a store into a page of a sparse file on a full disk
 * would kill the process with SIGBUS); the magic goes last, so that on any failure nobody uses
 * the file. Under the commit lock. */
static int cq_setup(const emb_db *e, int fd)
{
    cq_header h = { .magic = CQ_MAGIC, .boot = { e->boot_id[0], e->boot_id[1] } };
    if (ftruncate(fd, 0) == 0 && ftruncate(fd, (off_t)CQ_FILE_BYTES) == 0 &&
        posix_fallocate(fd, 0, (off_t)CQ_FILE_BYTES) == 0 &&
        pwrite(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h))
        return 1;
    int freed = ftruncate(fd, 0); /* the space back; nothing else to do if that fails too */
    (void)freed;
    return 0;
}

void emb_cq_open(emb_db *e)
{
    e->cq = NULL;
    e->cq_fd = -1;
    e->cq_own = -1;
    /* Without the file (read-only, no boot id to tell a torn file from this boot's, no room,
     * no descriptor), commits of this handle wait on the commit lock alone. */
    if ((e->opts.flags & KVQ_DB_READ_ONLY) || e->lock_fd < 0 ||
        (e->boot_id[0] == 0 && e->boot_id[1] == 0))
        return;
    size_t n = strlen(e->dir) + 16;
    char *p = kvq__malloc(n);
    if (p == NULL)
        return;
    snprintf(p, n, "%s/kvq.cq", e->dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, e->opts.file_mode);
    kvq__free(p);
    if (fd < 0)
        return;
    /* A file this boot already set up is used as it is, without waiting for the lock;
     * otherwise it is set up under the lock, so that two first openers agree. */
    int ok = cq_ready(e, fd);
    if (!ok) {
        while (flock(e->lock_fd, LOCK_EX) != 0 && errno == EINTR) {
        }
        ok = cq_ready(e, fd) || cq_setup(e, fd);
        flock(e->lock_fd, LOCK_UN);
    }
    void *m =
        ok ? mmap(NULL, CQ_FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (m == MAP_FAILED) {
        close(fd);
        return;
    }
    e->cq = m;
    e->cq_fd = fd;
}

void emb_cq_close(emb_db *e)
{
    if (e->cq != NULL)
        munmap(e->cq, CQ_FILE_BYTES);
    if (e->cq_fd >= 0)
        close(e->cq_fd);
    kvq__free(e->cq_taken.reqs);
    kvq__free(e->cq_taken.txns);
    e->cq_taken.reqs = NULL;
    e->cq_taken.txns = NULL;
    e->cq = NULL;
    e->cq_fd = -1;
}

/* ---- the owner ------------------------------------------------------------------------------ */

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
} wbuf;

static int put(wbuf *w, const void *src, size_t n)
{
    if (w->cap - w->n < n)
        return -1;
    if (n > 0)
        memcpy(w->p + w->n, src, n);
    w->n += n;
    return 0;
}

static int put32(wbuf *w, uint32_t v)
{
    return put(w, &v, 4);
}

static int put_str(wbuf *w, const emb_str *s)
{
    if (s->n > UINT32_MAX)
        return -1;
    return put32(w, (uint32_t)s->n) || put(w, s->p, s->n);
}

static int put_ranges(wbuf *w, const emb_ranges *r)
{
    if (put32(w, (uint32_t)r->n))
        return -1;
    for (size_t i = 0; i < r->n; i++)
        if (put_str(w, &r->v[i].b) || put_str(w, &r->v[i].e))
            return -1;
    return 0;
}

static int put_req(wbuf *w, const emb_commit_req *r)
{
    const emb_txn *t = r->t;
    uint64_t size = t->size;
    int64_t rv = t->rv;
    if (put32(w, (uint32_t)r->fault) || put32(w, (uint32_t)t->has_rv) || put(w, &rv, 8) ||
        put(w, &size, 8) || put_ranges(w, &t->reads) || put_ranges(w, &t->writes) ||
        put32(w, (uint32_t)t->n_muts))
        return -1;
    for (size_t i = 0; i < t->n_muts; i++) {
        const emb_mut *m = &t->muts[i];
        if (put32(w, (uint32_t)m->op) || put_str(w, &m->a) || put_str(w, &m->b))
            return -1;
    }
    return 0;
}

int emb_cq_publish(emb_db *e, emb_commit_req **reqs, size_t n)
{
    if (e->cq == NULL || n == 0 || n > EMB_CQ_MAX_REQS)
        return -1;
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += reqs[i]->t->size;
    if (bytes > CQ_PAYLOAD_BYTES)
        return -1;
    for (int i = 0; i < EMB_CQ_SLOTS; i++) {
        cq_slot *s = slot_at(e, i);
        if (ld(&s->state) != CQ_FREE)
            continue;
        /* The lock first: a leader that holds it (checking for a dead owner) may free the
         * slot under us otherwise. */
        if (slot_lock(e, i, F_WRLCK) != 0)
            continue;
        uint32_t expect = CQ_FREE;
        if (!__atomic_compare_exchange_n(&s->state, &expect, CQ_FILLING, 0, __ATOMIC_SEQ_CST,
                                         __ATOMIC_SEQ_CST)) {
            slot_lock(e, i, F_UNLCK);
            continue;
        }
        __atomic_store_n(&s->since_us, kvq__mono_us(), __ATOMIC_SEQ_CST);
        wbuf w = { s->payload, 0, CQ_PAYLOAD_BYTES };
        int bad = 0;
        for (size_t j = 0; j < n && !bad; j++)
            bad = put_req(&w, reqs[j]);
        if (bad) {
            set_state(s, CQ_FREE);
            slot_lock(e, i, F_UNLCK);
            return -1;
        }
        s->n = (uint32_t)n;
        s->len = (uint32_t)w.n;
        __atomic_store_n(&s->outcome_ready, 0, __ATOMIC_SEQ_CST);
        set_state(s, CQ_READY);
        e->cq_own = i;
        return i;
    }
    return -1;
}

int emb_cq_wait(emb_db *e, int own)
{
    cq_slot *s = slot_at(e, own);
    for (;;) {
        uint32_t g = ld(&s->gen);
        if (ld(&s->state) == CQ_DONE)
            return 0;
        if (flock(e->lock_fd, LOCK_EX | LOCK_NB) == 0)
            return 1;
        struct timespec ts = { 0, CQ_LOOK_US * 1000L };
        if (ld(&s->state) != CQ_DONE)
            syscall(SYS_futex, &s->gen, FUTEX_WAIT, g, &ts, NULL, 0);
    }
}

int emb_cq_own_claim(emb_db *e, int own)
{
    cq_slot *s = slot_at(e, own);
    uint32_t st = ld(&s->state);
    if (st == CQ_DONE)
        return 2;
    set_state(s, CQ_FILLING);
    return st == CQ_TAKEN;
}

int64_t emb_cq_collect(emb_db *e, int own, emb_commit_req **reqs, size_t n)
{
    cq_slot *s = slot_at(e, own);
    int64_t version = __atomic_load_n(&s->version, __ATOMIC_SEQ_CST);
    int64_t to_sync = 0;
    for (size_t i = 0; i < n && i < s->n; i++) {
        const cq_out *o = &s->out[i];
        emb_commit_req *r = reqs[i];
        r->rc = o->rc;
        memcpy(r->msg, o->msg, sizeof(o->msg));
        r->msg[sizeof(o->msg) - 1] = '\0';
        if (o->committed) {
            r->t->committed_version = version;
            memcpy(r->t->stamp, o->stamp, 10);
            to_sync = version;
        }
    }
    emb_cq_release(e, own);
    return to_sync;
}

void emb_cq_release(emb_db *e, int own)
{
    if (own < 0)
        return;
    set_state(slot_at(e, own), CQ_FREE);
    slot_lock(e, own, F_UNLCK);
    e->cq_own = -1;
}

/* ---- the leader ----------------------------------------------------------------------------- */

typedef struct rbuf {
    const uint8_t *p;
    size_t n, off;
} rbuf;

static int get(rbuf *r, void *dst, size_t n)
{
    if (r->n - r->off < n)
        return -1;
    if (n > 0)
        memcpy(dst, r->p + r->off, n);
    r->off += n;
    return 0;
}

static int get32(rbuf *r, uint32_t *v)
{
    return get(r, v, 4);
}

/* A string of the payload, copied (the slot is the owner's once it is DONE). */
static int get_str(rbuf *r, emb_str *s)
{
    uint32_t n;
    if (get32(r, &n) || r->n - r->off < n)
        return -1;
    int rc = emb_str_set(s, r->p + r->off, n);
    r->off += n;
    return rc == 0 ? 0 : -1;
}

static int get_ranges(rbuf *r, emb_ranges *out)
{
    uint32_t n;
    if (get32(r, &n))
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t bn, en;
        if (get32(r, &bn) || r->n - r->off < bn)
            return -1;
        const uint8_t *b = r->p + r->off;
        r->off += bn;
        if (get32(r, &en) || r->n - r->off < en)
            return -1;
        const uint8_t *end = r->p + r->off;
        r->off += en;
        if (emb_ranges_add(out, b, bn, end, en) != 0)
            return -1;
    }
    return 0;
}

static void free_txn(emb_txn *t)
{
    for (size_t i = 0; i < t->n_muts; i++) {
        emb_str_free(&t->muts[i].a);
        emb_str_free(&t->muts[i].b);
    }
    kvq__free(t->muts);
    emb_ranges_free(&t->reads);
    emb_ranges_free(&t->writes);
}

static int get_req(rbuf *r, emb_db *e, emb_txn *t, emb_commit_req *q)
{
    uint32_t fault, has_rv, nm;
    int64_t rv;
    uint64_t size;
    memset(t, 0, sizeof(*t));
    t->e = e;
    if (get32(r, &fault) || get32(r, &has_rv) || get(r, &rv, 8) || get(r, &size, 8) ||
        get_ranges(r, &t->reads) || get_ranges(r, &t->writes) || get32(r, &nm))
        return -1;
    if (nm > (r->n - r->off) / 12)
        return -1;
    t->muts = kvq__calloc(nm ? nm : 1, sizeof(emb_mut));
    if (t->muts == NULL)
        return -1;
    for (uint32_t i = 0; i < nm; i++) {
        uint32_t op;
        emb_mut *m = &t->muts[i];
        if (get32(r, &op))
            return -1;
        t->n_muts = i + 1;
        m->op = (int)op;
        if (get_str(r, &m->a) || get_str(r, &m->b))
            return -1;
    }
    t->has_rv = has_rv != 0;
    t->rv = rv;
    t->size = (size_t)size;
    q->t = t;
    q->fault = (int)fault;
    return 0;
}

/* Is the owner of slot i gone? Tried only on a slot unchanged for a while. Takes the owner's
 * lock for a moment: while it is held, no owner can claim the slot. */
static int owner_gone(emb_db *e, int i, cq_slot *s, uint32_t state)
{
    if (kvq__mono_us() - __atomic_load_n(&s->since_us, __ATOMIC_SEQ_CST) < CQ_STALE_US)
        return 0;
    if (slot_lock(e, i, F_WRLCK) != 0)
        return 0;
    uint32_t expect = state;
    int gone = __atomic_compare_exchange_n(&s->state, &expect, CQ_FREE, 0, __ATOMIC_SEQ_CST,
                                           __ATOMIC_SEQ_CST);
    slot_lock(e, i, F_UNLCK);
    return gone;
}

void emb_cq_recover(emb_db *e, int64_t db_version)
{
    if (e->cq == NULL)
        return;
    for (int i = 0; i < EMB_CQ_SLOTS; i++) {
        cq_slot *s = slot_at(e, i);
        uint32_t st = ld(&s->state);
        if (st == CQ_TAKEN) {
            /* Its leader died holding the lock (this handle's own slot included). */
            int64_t v = __atomic_load_n(&s->version, __ATOMIC_SEQ_CST);
            if (ld(&s->outcome_ready) && v > 0 && db_version >= v) {
                set_state(s, CQ_DONE);
            } else {
                __atomic_store_n(&s->outcome_ready, 0, __ATOMIC_SEQ_CST);
                set_state(s, CQ_READY);
            }
            wake(s);
        } else if (i != e->cq_own && (st == CQ_FILLING || st == CQ_DONE)) {
            owner_gone(e, i, s, st);
        }
    }
}

int emb_cq_take(emb_db *e, size_t room, size_t bytes_room, emb_cq_taken *out)
{
    out->n = 0;
    out->n_slots = 0;
    if (e->cq == NULL)
        return 0;
    if (out->reqs == NULL) {
        /* The first time this handle leads: room for every slot's requests. Without it, the
         * slots wait for another leader. */
        out->reqs = kvq__calloc((size_t)EMB_CQ_SLOTS * EMB_CQ_MAX_REQS, sizeof(emb_commit_req));
        out->txns = kvq__calloc((size_t)EMB_CQ_SLOTS * EMB_CQ_MAX_REQS, sizeof(emb_txn));
        if (out->reqs == NULL || out->txns == NULL) {
            kvq__free(out->reqs);
            kvq__free(out->txns);
            out->reqs = NULL;
            out->txns = NULL;
            return 0;
        }
    }
    size_t total = 0, bytes = 0;
    for (int i = 0; i < EMB_CQ_SLOTS; i++) {
        if (i == e->cq_own)
            continue;
        cq_slot *s = slot_at(e, i);
        if (ld(&s->state) != CQ_READY)
            continue;
        if (owner_gone(e, i, s, CQ_READY))
            continue; /* dropped: its committer is gone */
        uint32_t n = s->n, len = s->len;
        if (n == 0 || n > EMB_CQ_MAX_REQS || len > CQ_PAYLOAD_BYTES)
            continue; /* not a batch kvq wrote: left for its owner to find undone */
        if (total + n > room || bytes + len > bytes_room)
            break; /* for the next batch */
        /* Read once, every string copied: the slot is its owner's again once it is DONE. */
        rbuf r = { s->payload, len, 0 };
        size_t first = out->n;
        int bad = 0;
        for (uint32_t j = 0; j < n && !bad; j++) {
            emb_txn *t = &out->txns[out->n];
            emb_commit_req *q = &out->reqs[out->n];
            memset(q, 0, sizeof(*q));
            bad = get_req(&r, e, t, q);
            out->n++;
        }
        if (bad) {
            for (size_t j = first; j < out->n; j++)
                free_txn(&out->txns[j]);
            out->n = first;
            for (uint32_t j = 0; j < n; j++) {
                s->out[j].rc = KVQ_EINTERNAL_ERROR;
                s->out[j].committed = 0;
                snprintf(s->out[j].msg, sizeof(s->out[j].msg),
                         "a commit request in kvq.cq could not be read");
            }
            set_state(s, CQ_DONE);
            wake(s);
            continue;
        }
        __atomic_store_n(&s->outcome_ready, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(&s->version, 0, __ATOMIC_SEQ_CST);
        set_state(s, CQ_TAKEN);
        out->slot[out->n_slots] = i;
        out->first[out->n_slots] = first;
        out->count[out->n_slots] = n;
        out->n_slots++;
        total += n;
        bytes += len;
    }
    return 0;
}

void emb_cq_outcomes(emb_db *e, emb_cq_taken *tk, int64_t version, int final)
{
    for (size_t k = 0; k < tk->n_slots; k++) {
        cq_slot *s = slot_at(e, tk->slot[k]);
        for (size_t j = 0; j < tk->count[k]; j++) {
            const emb_commit_req *q = &tk->reqs[tk->first[k] + j];
            cq_out *o = &s->out[j];
            int committed = q->t->committed_version > 0;
            o->rc = q->rc;
            o->committed = (uint32_t)committed;
            memcpy(o->stamp, q->t->stamp, 10);
            size_t m = q->rc != 0 ? strnlen(q->msg, sizeof(o->msg) - 1) : 0;
            memcpy(o->msg, q->msg, m);
            o->msg[m] = '\0';
        }
        __atomic_store_n(&s->version, version, __ATOMIC_SEQ_CST);
        if (!final) {
            __atomic_store_n(&s->outcome_ready, 1, __ATOMIC_SEQ_CST);
        } else {
            set_state(s, CQ_DONE);
            wake(s);
        }
    }
}

void emb_cq_untake(emb_db *e, emb_cq_taken *tk)
{
    for (size_t k = 0; k < tk->n_slots; k++) {
        cq_slot *s = slot_at(e, tk->slot[k]);
        __atomic_store_n(&s->outcome_ready, 0, __ATOMIC_SEQ_CST);
        set_state(s, CQ_READY);
    }
    emb_cq_free_taken(tk);
}

void emb_cq_free_taken(emb_cq_taken *tk)
{
    for (size_t j = 0; j < tk->n; j++)
        free_txn(&tk->txns[j]);
    tk->n = 0;
    tk->n_slots = 0;
}

/* The first slot of another handle's batch waiting to be taken, or -1. */
static int first_ready(emb_db *e)
{
    if (e->cq == NULL)
        return -1;
    for (int i = 0; i < EMB_CQ_SLOTS; i++)
        if (i != e->cq_own && ld(&slot_at(e, i)->state) == CQ_READY)
            return i;
    return -1;
}

void emb_cq_wake_next(emb_db *e)
{
    int i = first_ready(e);
    if (i >= 0)
        wake(slot_at(e, i));
}

int emb_cq_any_ready(emb_db *e)
{
    return first_ready(e) >= 0;
}
