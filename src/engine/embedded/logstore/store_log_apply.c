/* The log store's records (store_log_internal.h): applying the log's records to the map, the
 * conflict log, forgetting versions past the window, catching up with the log, and each
 * handle's slot in readers.shm. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/embedded/files.h"
#include "engine/embedded/logstore/store_log_internal.h"
#include "util/bytes.h"

/* ---- records ---- */

static int bad_record(uint64_t lsn)
{
    return kvq__error(KVQ_EDAMAGED, "log store: the record at %llu of the log is malformed",
                      (unsigned long long)lsn);
}

static void cl_push(emb_store *s, int64_t version, const uint8_t *p, size_t n)
{
    if (s->cl_len == s->cl_cap) {
        size_t cap = s->cl_cap ? s->cl_cap * 2 : 1024;
        cl_entry *v = kvq__malloc(cap * sizeof *v);
        if (v == NULL)
            goto lost;
        for (size_t i = 0; i < s->cl_len; i++)
            v[i] = s->cl[(s->cl_head + i) % s->cl_cap];
        kvq__free(s->cl);
        s->cl = v;
        s->cl_cap = cap;
        s->cl_head = 0;
    }
    uint8_t *copy = NULL;
    if (n > 0 && (copy = kvq__memdup(p, n)) == NULL)
        goto lost;
    s->cl[(s->cl_head + s->cl_len) % s->cl_cap] = (cl_entry){ version, copy, n };
    s->cl_len++;
    __atomic_add_fetch(&s->cl_bytes, n + 16, __ATOMIC_RELAXED);
    return;
lost:
    /* Out of memory for the conflict log: forget all of it, so that older transactions get
     * transaction_too_old rather than a commit that misses a conflict. */
    while (s->cl_len > 0) {
        kvq__free(s->cl[s->cl_head].packed);
        s->cl_head = (s->cl_head + 1) % s->cl_cap;
        s->cl_len--;
    }
    s->cl_bytes = 0;
    s->cl_floor = version;
}

void kvq__ls_cl_prune(emb_store *s, int64_t before)
{
    while (s->cl_len > 1) {
        cl_entry *c = &s->cl[s->cl_head];
        if (c->version >= before)
            break;
        s->cl_floor = c->version;
        __atomic_sub_fetch(&s->cl_bytes, c->n + 16, __ATOMIC_RELAXED);
        kvq__free(c->packed);
        s->cl_head = (s->cl_head + 1) % s->cl_cap;
        s->cl_len--;
    }
}

static int64_t min_pin(emb_store *s, int64_t dflt)
{
    int64_t m = dflt;
    for (size_t i = 0; i < s->n_pins; i++)
        if (s->pins[i] < m)
            m = s->pins[i];
    return m;
}

/* Forgets what no read at floor or later, and no open snapshot, can see. */
void kvq__ls_forget_to(emb_store *s, int64_t floor)
{
    pthread_mutex_lock(&s->pin_mu);
    floor = min_pin(s, floor);
    if (floor > s->floor) {
        s->floor = floor;
        kvq__vmap_wrlock(s->map);
        kvq__vmap_forget(s->map, floor);
        kvq__vmap_wrunlock(s->map);
    }
    pthread_mutex_unlock(&s->pin_mu);
}

/* Forgets versions older than the window that no snapshot holds. apply_mu held. */
static void maybe_forget(emb_store *s)
{
    if (s->applied_version - s->last_forget < 100000)
        return;
    s->last_forget = s->applied_version;
    pthread_mutex_lock(&s->pin_mu);
    /* While the log is replayed at open, no transaction reads an older version. */
    int64_t floor = min_pin(s, s->applied_version - (s->replaying ? 0 : LS_WINDOW));
    if (floor > s->floor) {
        s->floor = floor;
        kvq__vmap_wrlock(s->map);
        kvq__vmap_forget(s->map, floor);
        kvq__vmap_wrunlock(s->map);
    }
    pthread_mutex_unlock(&s->pin_mu);
}

/* Applies one record of the log to the map (apply_mu held). */
int kvq__ls_apply_record(emb_store *s, const kvq__log_rec *r)
{
    if (r->type != LS_REC_COMMIT) {
        __atomic_store_n(&s->applied_lsn, r->end, __ATOMIC_RELEASE);
        return 0;
    }
    const uint8_t *p = r->data;
    if (r->len < LS_REC_HDR || p[0] != LS_REC_FORMAT || p[1] != 1)
        return bad_record(r->lsn);
    uint64_t ops_len = kvq__le32_get(p + 4), packed_len = kvq__le32_get(p + 16);
    int64_t version = (int64_t)kvq__le64_get(p + 8);
    if (LS_REC_HDR + ops_len + packed_len != r->len)
        return bad_record(r->lsn);
    if (version <= s->applied_version) {
        /* held by the checkpoint already */
        __atomic_store_n(&s->applied_lsn, r->end, __ATOMIC_RELEASE);
        return 0;
    }
    const uint8_t *o = p + LS_REC_HDR, *end = o + ops_len;
    int rc = 0;
    kvq__vmap_wrlock(s->map);
    while (o < end && rc == 0) {
        uint8_t op = o[0];
        if (end - o < 5) {
            rc = bad_record(r->lsn);
            break;
        }
        uint64_t al = kvq__le32_get(o + 1), bl = 0;
        o += 5;
        if (op == OP_SET || op == OP_CLEAR_RANGE) {
            if (end - o < 4) {
                rc = bad_record(r->lsn);
                break;
            }
            bl = kvq__le32_get(o);
            o += 4;
        }
        if ((uint64_t)(end - o) < al + bl) {
            rc = bad_record(r->lsn);
            break;
        }
        if (op == OP_SET)
            rc = kvq__vmap_set(s->map, version, o, (size_t)al, o + al, (size_t)bl);
        else if (op == OP_CLEAR)
            rc = kvq__vmap_clear(s->map, version, o, (size_t)al);
        else if (op == OP_CLEAR_RANGE)
            rc = kvq__vmap_clear_range(s->map, version, o, (size_t)al, o + al, (size_t)bl, NULL,
                                       NULL);
        else
            rc = bad_record(r->lsn);
        o += al + bl;
    }
    kvq__vmap_set_version(s->map, version);
    kvq__vmap_wrunlock(s->map);
    if (rc != 0)
        return rc;
    cl_push(s, version, end, (size_t)packed_len);
    s->applied_version = version;
    __atomic_store_n(&s->applied_lsn, r->end, __ATOMIC_RELEASE);
    if (s->slots && s->slot >= 0)
        __atomic_store_n(&s->slots[s->slot].applied, r->end, __ATOMIC_RELEASE);
    maybe_forget(s);
    return 0;
}

int kvq__ls_replay_fn(void *arg, const kvq__log_rec *r)
{
    return kvq__ls_apply_record(arg, r);
}

/* Brings the map up to the log's tail (records other processes wrote). apply_mu held. */
int kvq__ls_catch_up_locked(emb_store *s)
{
    if (kvq__log_tail(s->log) <= s->applied_lsn)
        return 0;
    uint64_t next;
    int rc = kvq__log_read(s->log, s->applied_lsn, kvq__ls_replay_fn, s, &next);
    if (rc == KVQ_ENOTFOUND)
        return kvq__error(KVQ_EIO, "log store: this handle fell behind the log, which was "
                                   "recycled since; reopen the database");
    return rc;
}

int kvq__ls_catch_up(emb_store *s)
{
    if (kvq__log_tail(s->log) <= __atomic_load_n(&s->applied_lsn, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&s->apply_mu);
    int rc = kvq__ls_catch_up_locked(s);
    pthread_mutex_unlock(&s->apply_mu);
    return rc;
}

/* The memory the store's data takes: the map and the conflict log. */
uint64_t kvq__ls_mem_used(emb_store *s)
{
    return kvq__vmap_mem(s->map) + __atomic_load_n(&s->cl_bytes, __ATOMIC_RELAXED) +
           s->cl_cap * sizeof(cl_entry);
}

/* ---- readers.shm ---- */

/* Takes a slot in readers.shm. A read-only handle (create = 0) takes one when the file exists
 * and may be written (a read-only handle on a writable directory), so that the log it has not
 * yet applied is not recycled under it; otherwise it goes without (on a read-only file system
 * nothing is recycled anyway). */
int kvq__ls_slots_open(emb_store *s, int create)
{
    s->slot = -1;
    s->readers_fd =
        openat(s->dir_fd, "readers.shm", O_RDWR | (create ? O_CREAT : 0) | O_CLOEXEC, s->mode);
    if (s->readers_fd < 0 && !create)
        return 0;
    if (s->readers_fd < 0)
        return emb_errno_error(errno, "cannot open", "logstore/readers.shm");
    size_t bytes = LS_SLOTS * sizeof(reader_slot);
    struct stat st;
    if (fstat(s->readers_fd, &st) != 0 ||
        ((size_t)st.st_size < bytes && (!create || ftruncate(s->readers_fd, (off_t)bytes) != 0))) {
        if (!create) {
            close(s->readers_fd);
            s->readers_fd = -1;
            return 0;
        }
        return emb_errno_error(errno, "cannot size", "logstore/readers.shm");
    }
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->readers_fd, 0);
    if (m == MAP_FAILED) {
        if (!create) {
            close(s->readers_fd);
            s->readers_fd = -1;
            return 0;
        }
        return emb_errno_error(errno, "cannot map", "logstore/readers.shm");
    }
    s->slots = m;
    static uint64_t counter;
    uint64_t me =
        ((uint64_t)getpid() << 16) | (__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) & 0xffff);
    for (int i = 0; i < LS_SLOTS; i++) {
        uint64_t o = __atomic_load_n(&s->slots[i].owner, __ATOMIC_ACQUIRE);
        if (o != 0 && !(kill((pid_t)(o >> 16), 0) != 0 && errno == ESRCH))
            continue;
        /* set the position first, so that a checkpointer never sees the slot at 0 */
        if (__atomic_compare_exchange_n(&s->slots[i].owner, &o, me, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            __atomic_store_n(&s->slots[i].applied, s->applied_lsn, __ATOMIC_RELEASE);
            s->slot = i;
            return 0;
        }
    }
    /* No slot: this handle's log may be recycled under it (it then reports it and must be
     * reopened). */
    return 0;
}

/* The oldest log position a live handle still needs. */
uint64_t kvq__ls_slots_min(emb_store *s, uint64_t dflt)
{
    uint64_t m = dflt;
    if (s->slots == NULL)
        return m;
    for (int i = 0; i < LS_SLOTS; i++) {
        uint64_t o = __atomic_load_n(&s->slots[i].owner, __ATOMIC_ACQUIRE);
        if (o == 0 || (kill((pid_t)(o >> 16), 0) != 0 && errno == ESRCH))
            continue;
        uint64_t a = __atomic_load_n(&s->slots[i].applied, __ATOMIC_ACQUIRE);
        if (a < m)
            m = a;
    }
    return m;
}
