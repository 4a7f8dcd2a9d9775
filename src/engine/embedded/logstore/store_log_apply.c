/* The log store's records (store_log_internal.h): applying the log's records to the map, the
 * conflict log, forgetting versions past the window, catching up with the log, and each
 * handle's slot in readers.shm. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
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

/* Drops from the map what the table holds (the versions up to the newest table version this
 * handle has seen), except what an open snapshot's older table snapshot still lacks. Every
 * snapshot opened later reads a table at least that new (its version only grows). */
void kvq__ls_drop(emb_store *s)
{
    pthread_mutex_lock(&s->pin_mu);
    int64_t floor = min_pin(s, s->table_known);
    if (floor > s->floor) {
        s->floor = floor;
        kvq__vmap_wrlock(s->map);
        kvq__vmap_drop(s->map, floor);
        kvq__vmap_wrunlock(s->map);
    }
    pthread_mutex_unlock(&s->pin_mu);
}

/* Drops now and then (apply_mu held). */
static void maybe_forget(emb_store *s)
{
    if (s->applied_version - s->last_forget < 100000)
        return;
    s->last_forget = s->applied_version;
    kvq__ls_drop(s);
}

/* The keys the table holds in [b, e), as u32 length + key in *out. */
static int table_keys(emb_store *s, const uint8_t *b, size_t bl, const uint8_t *e, size_t el,
                      kvq_buf *out)
{
    const emb_store_ops *t = &emb_sqlite_store;
    emb_snap *ts = NULL;
    emb_snap_info ti;
    int rc = t->snap_open(s->table, 0, &ts, &ti);
    if (rc != 0)
        return rc;
    pthread_mutex_lock(&s->pin_mu);
    if (ti.version > s->table_known)
        s->table_known = ti.version;
    pthread_mutex_unlock(&s->pin_mu);
    emb_cursor *c = NULL;
    rc = t->cursor_open(ts, b, bl, e, el, 0, &c);
    for (int has = 1; rc == 0 && has;) {
        kvq_bytes k, v;
        rc = t->cursor_next(c, &k, &v, &has);
        if (rc == 0 && has) {
            if (kvq_buf_grow(out, 4 + k.len) != 0) {
                rc = kvq__error(KVQ_ENOMEM, "out of memory");
                break;
            }
            kvq__le32_put(out->data + out->len, (uint32_t)k.len);
            memcpy(out->data + out->len + 4, k.data, k.len);
            out->len += 4 + k.len;
        }
    }
    t->cursor_close(c);
    t->snap_close(ts);
    return rc;
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
            rc = kvq__vmap_tombstone(s->map, version, o, (size_t)al);
        else if (op == OP_CLEAR_RANGE) {
            /* the keys only the table holds get a tombstone each */
            rc = kvq__vmap_clear_range(s->map, version, o, (size_t)al, o + al, (size_t)bl, NULL,
                                       NULL);
            if (rc == 0 && kvq__bytes_cmp(o, (size_t)al, o + al, (size_t)bl) < 0) {
                kvq_buf keys = KVQ_BUF_INIT;
                kvq__vmap_wrunlock(s->map);
                rc = table_keys(s, o, (size_t)al, o + al, (size_t)bl, &keys);
                kvq__vmap_wrlock(s->map);
                for (size_t q = 0; rc == 0 && q < keys.len;) {
                    size_t kl = kvq__le32_get(keys.data + q);
                    rc = kvq__vmap_tombstone(s->map, version, keys.data + q + 4, kl);
                    q += 4 + kl;
                }
                kvq_buf_dispose(&keys);
            }
        } else
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

/* ---- snapshots: the table's merged with the map's newer versions ---- */

static int pin_push(emb_store *s, int64_t v)
{
    if (s->n_pins == s->cap_pins) {
        size_t cap = s->cap_pins ? s->cap_pins * 2 : 16;
        int64_t *p = kvq__realloc(s->pins, cap * sizeof *p);
        if (p == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory");
        s->pins = p;
        s->cap_pins = cap;
    }
    s->pins[s->n_pins++] = v;
    return 0;
}

static void pin_drop(emb_store *s, int64_t v)
{
    for (size_t i = 0; i < s->n_pins; i++)
        if (s->pins[i] == v) {
            s->pins[i] = s->pins[--s->n_pins];
            return;
        }
}

static void pin_move(emb_store *s, int64_t from, int64_t to)
{
    for (size_t i = 0; i < s->n_pins; i++)
        if (s->pins[i] == from) {
            s->pins[i] = to;
            return;
        }
}

int kvq__ls_table_refresh(emb_store *s)
{
    emb_snap *ts = NULL;
    emb_snap_info ti;
    int rc = emb_sqlite_store.snap_open(s->table, 0, &ts, &ti);
    if (rc != 0)
        return rc;
    emb_sqlite_store.snap_close(ts);
    pthread_mutex_lock(&s->pin_mu);
    if (ti.version > s->table_known)
        s->table_known = ti.version;
    pthread_mutex_unlock(&s->pin_mu);
    return 0;
}

/* The newest batch at or before at that the conflict log knows (at when none). apply_mu held. */
static int64_t batch_at(emb_store *s, int64_t at)
{
    for (size_t i = s->cl_len; i > 0; i--) {
        int64_t cv = s->cl[(s->cl_head + i - 1) % s->cl_cap].version;
        if (cv <= at)
            return cv;
    }
    return at;
}

int kvq__ls_snap_open(emb_store *s, int64_t at, struct emb_snap **out, emb_snap_info *info)
{
    struct emb_snap *sn = kvq__calloc(1, sizeof *sn);
    if (sn == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    sn->s = s;
    /* Pinned at the newest table version seen before the table's snapshot starts: that
     * snapshot is at least as new, so the map keeps all it lacks. */
    pthread_mutex_lock(&s->pin_mu);
    int64_t pin = s->table_known;
    int rc = pin_push(s, pin);
    pthread_mutex_unlock(&s->pin_mu);
    if (rc != 0) {
        kvq__free(sn);
        return rc;
    }
    /* The map first, then the table's snapshot: a clear-range applied while catching up puts
     * tombstones on the keys of the table as it is then (a newer table may not hold keys the
     * batch deleted), so the table this snapshot reads must be at least that new. When the
     * table is newer than the map (an applier elsewhere went past this handle), the map
     * catches up again and the table's snapshot is taken again after it. */
    int64_t latest = 0, v = 0, read_at = 0;
    for (int i = 0; rc == 0; i++) {
        rc = kvq__ls_catch_up(s);
        if (rc != 0)
            break;
        pthread_mutex_lock(&s->apply_mu);
        latest = s->applied_version;
        v = at > 0 && at < latest ? batch_at(s, at) : latest;
        pthread_mutex_unlock(&s->apply_mu);
        read_at = at > 0 && at < latest ? at : latest;
        emb_snap_info ti;
        rc = emb_sqlite_store.snap_open(s->table, 0, (emb_snap **)&sn->tsnap, &ti);
        if (rc != 0)
            break;
        pthread_mutex_lock(&s->pin_mu);
        pin_move(s, pin, ti.version);
        pin = ti.version;
        if (ti.version > s->table_known)
            s->table_known = ti.version;
        pthread_mutex_unlock(&s->pin_mu);
        sn->tver = ti.version;
        if (latest >= sn->tver || i == 3)
            break;
        emb_sqlite_store.snap_close(sn->tsnap);
        sn->tsnap = NULL;
    }
    if (rc == 0 && latest < sn->tver)
        rc = kvq__error(KVQ_EIO, "log store: the table is at version %lld, past the log's %lld",
                        (long long)sn->tver, (long long)latest);
    if (rc == 0 && read_at < sn->tver)
        rc = kvq__error(KVQ_ETRANSACTION_TOO_OLD,
                        "version %lld is older than the versions the log store keeps",
                        (long long)at);
    if (rc != 0) {
        if (sn->tsnap)
            emb_sqlite_store.snap_close(sn->tsnap);
        pthread_mutex_lock(&s->pin_mu);
        pin_drop(s, pin);
        pthread_mutex_unlock(&s->pin_mu);
        kvq__free(sn);
        return rc;
    }
    sn->version = read_at;
    info->version = v;
    info->latest = latest;
    *out = sn;
    return 0;
}

void kvq__ls_snap_close(struct emb_snap *sn)
{
    if (sn == NULL)
        return;
    emb_store *s = sn->s;
    emb_sqlite_store.snap_close(sn->tsnap);
    pthread_mutex_lock(&s->pin_mu);
    pin_drop(s, sn->tver);
    pthread_mutex_unlock(&s->pin_mu);
    kvq__free(sn);
}

int kvq__ls_get(struct emb_snap *sn, const uint8_t *key, size_t key_len, kvq_bytes *value,
                int *present)
{
    int64_t ever = 0;
    kvq__vmap_rdlock(sn->s->map);
    int p = kvq__vmap_probe_ver(sn->s->map, sn->version, key, key_len, value, &ever);
    kvq__vmap_rdunlock(sn->s->map);
    if (p != 0 && ever > sn->tver) {
        *present = p > 0;
        return 0;
    }
    return emb_sqlite_store.get(sn->tsnap, key, key_len, value, present);
}

/* Whether the map deletes key at the snapshot's version, with a tombstone newer than its table. */
static int ls_deleted_after_table(struct emb_snap *sn, const uint8_t *key, size_t key_len)
{
    int64_t ever = 0;
    kvq_bytes v;
    kvq__vmap_rdlock(sn->s->map);
    int p = kvq__vmap_probe_ver(sn->s->map, sn->version, key, key_len, &v, &ever);
    kvq__vmap_rdunlock(sn->s->map);
    return p < 0 && ever > sn->tver;
}

/* ---- runs of hidden table rows (ls_skip) ---- */

/* Whether run k holds for the table at tver (see ls_skip). */
static int skip_holds(const ls_skip *k, int64_t tver)
{
    return k->tver == tver || (k->clean && k->tver <= tver && tver <= k->v);
}

/* The run reaching furthest, of those that hold for the table at tver and a read at version,
 * that holds key (NULL: none). skip_mu held. */
static ls_skip *skip_find(emb_store *s, int64_t tver, int64_t version, const uint8_t *key,
                          size_t klen)
{
    ls_skip *best = NULL;
    for (int i = 0; i < LS_SKIPS; i++) {
        ls_skip *k = &s->skips[i];
        if (k->used && skip_holds(k, tver) && k->v <= version &&
            kvq__bytes_cmp(k->lo.data, k->lo.len, key, klen) <= 0 &&
            kvq__bytes_cmp(key, klen, k->hi.data, k->hi.len) <= 0 &&
            (best == NULL ||
             kvq__bytes_cmp(k->hi.data, k->hi.len, best->hi.data, best->hi.len) > 0))
            best = k;
    }
    return best;
}

/* Whether the map had no value in the cursor's run [lo, hi] at its version: it looked from lo
 * (no known run skipped before its start), returned no value inside the run, and the value it
 * holds for its next row, if any, is past hi (the values come in key order). */
static int cursor_clean(struct emb_cursor *c)
{
    if (c->from.len > 0 && kvq__bytes_cmp(c->lo.data, c->lo.len, c->b, (size_t)(c->e - c->b)))
        return 0;
    if (c->a_inside)
        return 0;
    return c->a_need || !c->a_has ||
           kvq__bytes_cmp(c->ak.data, c->ak.len, c->hi.data, c->hi.len) > 0;
}

/* Records the run a cursor walked, unless a known run of the same table and start says as much
 * (reaches as far, for reads as old, as clean); it replaces a run it says more than, else a free
 * slot, else the slot of the oldest table. Out of memory: nothing is recorded (the next cursor
 * walks again). */
static void skip_publish(emb_store *s, struct emb_cursor *c)
{
    int64_t tver = c->snap->tver, v = c->snap->version;
    int clean = cursor_clean(c);
    /* the run starts where the known run did, else at the cursor's start */
    const uint8_t *lo = c->from.len > 0 ? c->lo.data : c->b;
    size_t lol = c->from.len > 0 ? c->lo.len : (size_t)(c->e - c->b);
    pthread_mutex_lock(&s->skip_mu);
    ls_skip *slot = NULL;
    for (int i = 0; i < LS_SKIPS; i++) {
        ls_skip *k = &s->skips[i];
        if (!k->used || k->tver != tver || kvq__bytes_cmp(k->lo.data, k->lo.len, lo, lol) != 0)
            continue;
        int d = kvq__bytes_cmp(c->hi.data, c->hi.len, k->hi.data, k->hi.len);
        if (d <= 0 && k->v <= v && k->clean >= clean) {
            pthread_mutex_unlock(&s->skip_mu);
            return;
        }
        if (slot == NULL && d >= 0 && v <= k->v && clean >= k->clean)
            slot = k;
    }
    for (int i = 0; i < LS_SKIPS && slot == NULL; i++)
        if (!s->skips[i].used)
            slot = &s->skips[i];
    if (slot == NULL) {
        slot = &s->skips[0];
        for (int i = 1; i < LS_SKIPS; i++)
            if (s->skips[i].tver < slot->tver)
                slot = &s->skips[i];
    }
    slot->used = 0;
    if (kvq__buf_set(&slot->lo, lo, lol) == 0 &&
        kvq__buf_set(&slot->hi, c->hi.data, c->hi.len) == 0) {
        slot->used = 1;
        slot->clean = clean;
        slot->tver = tver;
        slot->v = v;
    } else {
        kvq__error_clear();
    }
    pthread_mutex_unlock(&s->skip_mu);
}

void kvq__ls_skips_free(emb_store *s)
{
    for (int i = 0; i < LS_SKIPS; i++) {
        kvq_buf_dispose(&s->skips[i].lo);
        kvq_buf_dispose(&s->skips[i].hi);
        s->skips[i].used = 0;
    }
}

static void cursor_free(struct emb_cursor *c)
{
    kvq_buf_dispose(&c->lo);
    kvq_buf_dispose(&c->hi);
    kvq_buf_dispose(&c->from);
    kvq__free(c);
}

/* Where a forward cursor's table part starts: past the known run of hidden rows that holds
 * its start, if any (c->from), else at its start. */
static int skip_start(emb_store *s, struct emb_cursor *c, size_t begin_len)
{
    int rc = 0;
    c->walking = 1;
    pthread_mutex_lock(&s->skip_mu);
    ls_skip *k = skip_find(s, c->snap->tver, c->snap->version, c->b, begin_len);
    if (k != NULL) {
        __atomic_add_fetch(&s->n_skips, 1, __ATOMIC_RELAXED);
        if (k->tver != c->snap->tver)
            __atomic_add_fetch(&s->n_skips_carried, 1, __ATOMIC_RELAXED);
        if (kvq__buf_set(&c->lo, k->lo.data, k->lo.len) != 0 ||
            kvq__buf_set(&c->hi, k->hi.data, k->hi.len) != 0 ||
            kvq__buf_set(&c->from, k->hi.data, k->hi.len) != 0 ||
            kvq_buf_append(&c->from, "", 1) != 0)
            rc = kvq__error(KVQ_ENOMEM, "out of memory");
    }
    pthread_mutex_unlock(&s->skip_mu);
    return rc;
}

int kvq__ls_cursor_open(struct emb_snap *sn, const uint8_t *begin, size_t begin_len,
                        const uint8_t *end, size_t end_len, int reverse, struct emb_cursor **out)
{
    struct emb_cursor *c = kvq__calloc(1, sizeof *c + begin_len + end_len + 1);
    if (c == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    c->snap = sn;
    c->b = (uint8_t *)(c + 1);
    c->e = c->b + begin_len;
    if (begin_len)
        memcpy(c->b, begin, begin_len);
    if (end_len)
        memcpy(c->e, end, end_len);
    c->lo = c->hi = c->from = (kvq_buf)KVQ_BUF_INIT;
    int rc = reverse ? 0 : skip_start(sn->s, c, begin_len);
    if (rc == 0) {
        const uint8_t *tb = c->from.len ? c->from.data : c->b;
        size_t tbl = c->from.len ? c->from.len : begin_len;
        rc = emb_sqlite_store.cursor_open(sn->tsnap, tb, tbl, c->e, end_len, reverse,
                                          (emb_cursor **)&c->tcur);
    }
    if (rc != 0) {
        cursor_free(c);
        return rc;
    }
    /* The map's values only: a tombstone matters where the table has the key, and is looked up
     * there (kvq__ls_cursor_next), so that the items popped in the window are not walked one by
     * one by every read of the queue's head (most of them never reached the table). */
    kvq__vmap_cursor_init(&c->c, sn->s->map, sn->version, c->b, begin_len, c->e, end_len, reverse);
    c->a_need = c->b_need = 1;
    c->reverse = reverse;
    *out = c;
    return 0;
}

int kvq__ls_cursor_next(struct emb_cursor *c, kvq_bytes *key, kvq_bytes *value, int *has)
{
    for (;;) {
        if (c->a_need) {
            c->a_need = 0;
            kvq__vmap *m = c->snap->s->map;
            int64_t ever = 0;
            kvq__vmap_rdlock(m);
            do {
                c->a_has = kvq__vmap_cursor_next_ver(&c->c, &c->ak, &c->av, &c->a_dead, &ever);
            } while (c->a_has && ever <= c->snap->tver);
            kvq__vmap_rdunlock(m);
        }
        while (c->b_need) {
            c->b_need = 0;
            int rc = emb_sqlite_store.cursor_next(c->tcur, &c->bk, &c->bv, &c->b_has);
            if (rc != 0)
                return rc;
            if (!c->b_has || !ls_deleted_after_table(c->snap, c->bk.data, c->bk.len)) {
                c->walking = 0; /* the run ends at a row that is not hidden, or the end */
                continue;
            }
            c->b_need = 1; /* a row of the table deleted in the map: the next one */
            c->n_walked++;
            if (c->walking) {
                /* the run of hidden rows from the cursor's start reaches this one */
                c->walked = kvq__buf_set(&c->hi, c->bk.data, c->bk.len) == 0;
                if (!c->walked) {
                    kvq__error_clear();
                    c->walking = 0;
                }
            }
        }
        if (!c->a_has && !c->b_has) {
            *has = 0;
            return 0;
        }
        int d;
        if (!c->b_has)
            d = -1;
        else if (!c->a_has)
            d = 1;
        else
            d = kvq__bytes_cmp(c->ak.data, c->ak.len, c->bk.data, c->bk.len) *
                (c->reverse ? -1 : 1);
        if (d > 0) {
            c->b_need = 1;
            *key = c->bk;
            *value = c->bv;
            *has = 1;
            return 0;
        }
        c->a_need = 1;
        if (d == 0)
            c->b_need = 1;
        if (c->a_dead)
            continue;
        /* the run was walked by this call's first steps of the table: a value of the map
         * inside it makes it unclean */
        if (c->walked && kvq__bytes_cmp(c->ak.data, c->ak.len, c->hi.data, c->hi.len) <= 0)
            c->a_inside = 1;
        *key = c->ak;
        *value = c->av;
        *has = 1;
        return 0;
    }
}

void kvq__ls_cursor_close(struct emb_cursor *c)
{
    if (c == NULL)
        return;
    emb_sqlite_store.cursor_close(c->tcur);
    if (c->n_walked)
        __atomic_add_fetch(&c->snap->s->n_rows_walked, c->n_walked, __ATOMIC_RELAXED);
    if (c->walked)
        skip_publish(c->snap->s, c);
    cursor_free(c);
}
