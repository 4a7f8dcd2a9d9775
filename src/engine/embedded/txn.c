/* Embedded transactions: reads at one read version (a storage snapshot held from the first
 * read), read-your-writes through the overlay, and the buffered writes and conflict ranges
 * that commit.c applies.
 *
 * A write costs no allocation of its own: its bytes go into the transaction's arena once (the
 * key, a 0x00, the value), its write-conflict range lends them, and the read-your-writes
 * overlay indexes it only when a read of this transaction next needs the overlay (ov_catch_up),
 * so the writes of a batch that reads nothing back (a push of a hundred items) are only
 * appended. */
#include <string.h>

#include "emb.h"

int emb_txn_create(void **out, void *ep, kvq_txn *owner)
{
    emb_txn *t = kvq__calloc(1, sizeof(*t));
    if (t == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for a transaction");
    t->e = ep;
    t->owner = owner;
    t->ov.arena = &t->arena;
    t->ov.cleared.arena = &t->arena;
    t->reads.arena = &t->arena;
    t->writes.arena = &t->arena;
    t->unreadable.arena = &t->arena;
    *out = t;
    return 0;
}

void emb_txn_end_read(emb_txn *t)
{
    if (t->snap == NULL)
        return;
    t->e->so->snap_close(t->snap);
    t->snap = NULL;
}

/* The mutations' bytes are in the arena. */
static void muts_free(emb_txn *t)
{
    kvq__free(t->muts);
    t->muts = NULL;
    t->n_muts = t->cap_muts = 0;
    t->ov_muts = 0;
    t->ov_rc = 0;
}

static void txn_clear(emb_txn *t)
{
    emb_watches_abandon(t);
    emb_txn_end_read(t);
    emb_overlay_free(&t->ov);
    muts_free(t);
    emb_ranges_free(&t->reads);
    emb_ranges_free(&t->writes);
    emb_ranges_free(&t->unreadable);
    emb_arena_free(&t->arena);
    t->has_rv = 0;
    t->rv = 0;
    t->size = 0;
    t->size_limit = 0;
    t->no_ryw = 0;
    t->snapshot_no_ryw = 0;
    t->next_write_no_conflict = 0;
    t->wanted_rv = 0;
    t->early_read = 0;
    t->early_upto = 0;
    t->committing = 0;
    t->committed = 0;
    t->committed_version = 0;
    memset(t->stamp, 0, sizeof(t->stamp));
}

void emb_txn_destroy(void *tp)
{
    emb_txn *t = tp;
    txn_clear(t);
    kvq__free(t->pending_watches);
    kvq__free(t);
}

void emb_txn_reset(void *tp)
{
    txn_clear(tp);
}

/* Copies bytes into the arena, so that what a read returns outlives later writes. */
static int arena_bytes(emb_txn *t, const uint8_t *p, size_t n, kvq_bytes *out)
{
    uint8_t *mem = emb_arena_alloc(&t->arena, n);
    if (mem == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for a read");
    if (n > 0)
        memcpy(mem, p, n);
    out->data = mem;
    out->len = n;
    return 0;
}

static int check_state(emb_txn *t)
{
    if (t->committing)
        return kvq__error(KVQ_EUSED_DURING_COMMIT, "the transaction is being committed");
    if (t->committed)
        return kvq__error(KVQ_EUSED_DURING_COMMIT,
                          "the transaction has committed; reset it before using it again");
    return 0;
}

/* Takes the storage snapshot that is this transaction's read version. */
static int ensure_rv(emb_txn *t)
{
    if (t->has_rv) {
        if (kvq__mono_us() - t->rv_mono_us > t->e->opts.txn_window_us) {
            /* Its snapshot is of no more use: let the storage reclaim what it holds. */
            if (t->snap != NULL)
                emb_txn_end_read(t);
            return kvq__error(KVQ_ETRANSACTION_TOO_OLD,
                              "the transaction's read version is more than 5 seconds old");
        }
        /* A commit that failed ended the read (emb_commit): there is no snapshot to read
         * from until a reset, as FoundationDB says of a transaction used after its commit. */
        if (t->snap == NULL)
            return kvq__error(KVQ_EUSED_DURING_COMMIT,
                              "the transaction's commit was attempted; reset it before using it "
                              "again");
        return 0;
    }
    emb_db *e = t->e;
    /* The read version handed out may be later than the snapshot's stored version, by the
     * clock (read_version.c). */
    emb_rv_probe probe;
    emb_snap_info info;
    /* Reads see only durable data. A storage that keeps versions is read at the newest durable
     * one, synced_version, so a read never waits for a sync: every commit up to it is written
     * (it was synced), and the snapshot holds all of them. Unless a relaxed handle's commit,
     * acknowledged without a sync, is newer than it: a read must see that commit (it returned
     * before this read began), so the read takes the path below and has it synced. */
    /* An early read (kvq__txn_early_read: early lock release, issue 30 item 4) takes the newest
     * written snapshot and does not wait for its sync: its transaction hands nothing out
     * before its own commit (ordered after every commit it read, and synced with them) or its
     * settling (emb_txn_early_settle) has returned. */
    int early = t->wanted_rv == 0 &&
                ((t->early_read && emb_early_read(e)) ||
                 ((e->opts.test_flags & KVQ_TEST_EARLY_READ_ALL) && emb_early_read_possible(e)));
    int64_t durable = 0;
    if (!early && emb_pipelined(e) && (e->so->caps & EMB_STORE_MVCC) && t->wanted_rv == 0 &&
        e->shm != NULL && !(e->opts.flags & KVQ_DB_READ_ONLY)) {
        durable = __atomic_load_n(&e->shm->synced_version, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&e->shm->relaxed_version, __ATOMIC_SEQ_CST) > durable)
            durable = 0;
    }
    emb_rv_before_snapshot(e, &probe);
    int rc = e->so->snap_open(e->store, durable > 0 ? durable : t->wanted_rv, &t->snap, &info);
    if (rc == KVQ_ETRANSACTION_TOO_OLD && durable > 0) {
        /* The storage no longer keeps that version (short of memory): read the newest, and
         * wait for its sync as below. */
        kvq__error_clear();
        durable = 0;
        rc = e->so->snap_open(e->store, 0, &t->snap, &info);
    }
    if (rc != 0) {
        t->snap = NULL;
        return rc;
    }
    int64_t stored = info.latest;
    if (durable > 0 && stored > durable) {
        /* The snapshot is at the durable version, and newer commits are written: the read
         * version is the durable one, below each of theirs (no later commit can take a
         * version at or below it, as every commit up to it is written). */
        t->rv = durable;
    } else {
        /* Without versions kept, a snapshot that holds a commit not yet synced waits for the
         * shared sync (or runs it). (With them, the snapshot holds only durable commits.) */
        rc = durable > 0 || early ? 0 : emb_sync_upto(e, stored);
        if (rc != 0) {
            emb_txn_end_read(t);
            return rc;
        }
        t->early_upto = early && !emb_synced(e, stored) ? stored : 0;
        t->rv = emb_rv_after_snapshot(e, &probe, stored);
    }
    if (t->wanted_rv > 0) {
        /* The snapshot is the database at every version from its newest commit to t->rv (no
         * commit can take a version in between): a version asked for in that span reads
         * exactly as FoundationDB would at it. Older ones are gone (unless the storage keeps
         * versions, EMB_STORE_MVCC, and gave the snapshot at the version asked for), newer
         * ones are not yet. */
        rc = 0;
        if (t->wanted_rv < info.version)
            rc = kvq__error(KVQ_ETRANSACTION_TOO_OLD,
                            "read version %lld: the database has changed since (version %lld)",
                            (long long)t->wanted_rv, (long long)info.version);
        else if (t->rv - t->wanted_rv > t->e->opts.txn_window_us)
            rc = kvq__error(KVQ_ETRANSACTION_TOO_OLD,
                            "read version %lld is more than 5 seconds old",
                            (long long)t->wanted_rv);
        else if (t->wanted_rv > t->rv)
            rc = kvq__error(KVQ_EFUTURE_VERSION,
                            "read version %lld is ahead of the database (version %lld)",
                            (long long)t->wanted_rv, (long long)t->rv);
        if (rc != 0) {
            emb_txn_end_read(t);
            return rc;
        }
        t->rv = t->wanted_rv;
    }
    t->has_rv = 1;
    t->rv_mono_us = kvq__mono_us();
    return 0;
}

int emb_txn_early_settle(emb_txn *t)
{
    int64_t v = t->early_upto;
    if (v == 0 || emb_synced(t->e, v))
        return 0;
    int rc = emb_sync_upto(t->e, v);
    if (rc == 0)
        t->early_upto = 0;
    return rc;
}

int emb_set_read_version(void *tp, int64_t version)
{
    emb_txn *t = tp;
    int rc = check_state(t);
    if (rc != 0)
        return rc;
    if (t->has_rv || t->wanted_rv > 0)
        return kvq__error(KVQ_EREAD_VERSION_ALREADY_SET,
                          "the transaction already has a read version");
    t->wanted_rv = version;
    return 0;
}

int emb_get_approximate_size(void *tp, int64_t *out)
{
    emb_txn *t = tp;
    *out = (int64_t)t->size;
    return 0;
}

int emb_set_option(void *tp, kvq_txn_option option, int64_t value)
{
    emb_txn *t = tp;
    /* The internal options (engine.h), outside the enumeration, in any state: an early read is
     * asked for before the first read only (a read version taken is kept, and a transaction
     * that committed reads no more), and settling only syncs. */
    if ((int)option == (int)KVQ__TXN_EARLY_READ) {
        t->early_read = !t->has_rv && !t->committing && !t->committed;
        return 0;
    }
    if ((int)option == (int)KVQ__TXN_EARLY_SETTLE)
        return emb_txn_early_settle(t);
    int rc = check_state(t);
    if (rc != 0)
        return rc;
    switch (option) {
    case KVQ_TXN_SIZE_LIMIT:
        t->size_limit = (size_t)value;
        return 0;
    case KVQ_TXN_NEXT_WRITE_NO_WRITE_CONFLICT_RANGE:
        t->next_write_no_conflict = 1;
        return 0;
    case KVQ_TXN_READ_YOUR_WRITES_DISABLE:
        if (t->has_rv || t->n_muts > 0 || t->reads.n > 0 || t->writes.n > 0)
            return kvq__error(KVQ_ECLIENT_INVALID_OPERATION,
                              "read-your-writes can be disabled only before the first read or "
                              "write");
        t->no_ryw = 1;
        return 0;
    case KVQ_TXN_SNAPSHOT_RYW_ENABLE:
    case KVQ_TXN_SNAPSHOT_RYW_DISABLE:
        t->snapshot_no_ryw = option == KVQ_TXN_SNAPSHOT_RYW_DISABLE;
        return 0;
    case KVQ_TXN_ACCESS_SYSTEM_KEYS:
    case KVQ_TXN_READ_SYSTEM_KEYS:
        return 0; /* kvq_txn_set_option keeps them: keys are checked before the engine */
    default:
        return kvq__error(KVQ_EINVALID_OPTION, "transaction option %d", (int)option);
    }
}

/* Whether this write adds its write-conflict range (not after option 30, which it uses up). */
static int write_conflicts(emb_txn *t)
{
    if (!t->next_write_no_conflict)
        return 1;
    t->next_write_no_conflict = 0;
    return 0;
}

int emb_get_read_version(void *tp, int64_t *out)
{
    emb_txn *t = tp;
    int rc = check_state(t);
    if (rc == 0)
        rc = ensure_rv(t);
    if (rc == 0)
        *out = t->rv;
    return rc;
}

static int add_size(emb_txn *t, size_t n)
{
    size_t limit = t->size_limit > 0 ? t->size_limit : KVQ_MAX_TXN_SIZE;
    if (n > limit || t->size + n > limit)
        return kvq__error(KVQ_ETRANSACTION_TOO_LARGE,
                          "the transaction's mutations and conflict ranges exceed %zu bytes",
                          limit);
    t->size += n;
    return 0;
}

static int add_read_conflict(emb_txn *t, const uint8_t *b, size_t bn, const uint8_t *e, size_t en)
{
    int rc = add_size(t, bn + en);
    if (rc == 0)
        rc = emb_ranges_add(&t->reads, b, bn, e, en);
    return rc;
}

/* [key, key + 0x00), both ends one copy of the key and a 0x00 in the arena. */
static int point_range(emb_txn *t, emb_ranges *r, const uint8_t *k, size_t kn)
{
    uint8_t *p = emb_arena_alloc(&t->arena, kn + 1);
    if (p == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for conflict ranges");
    if (kn > 0)
        memcpy(p, k, kn);
    p[kn] = 0;
    return emb_ranges_add_lent(r, p, kn, p, kn + 1);
}

static int add_point_read(emb_txn *t, const uint8_t *k, size_t kn)
{
    int rc = add_size(t, 2 * kn + 1);
    if (rc == 0)
        rc = point_range(t, &t->reads, k, kn);
    return rc;
}

/* Brings the overlay up to date with the mutations made since a read last needed it, applying
 * them in order: the overlay is then exactly what it would be had each write updated it at
 * once. A failure (out of memory) sticks: the overlay cannot be trusted any more. */
static int ov_catch_up(emb_txn *t)
{
    if (t->ov_rc != 0)
        return kvq__error(t->ov_rc, "out of memory for the transaction's own writes");
    for (; t->ov_muts < t->n_muts; t->ov_muts++) {
        const emb_mut *m = &t->muts[t->ov_muts];
        int rc;
        switch (m->op) {
        case EMB_OP_SET:
            rc = emb_overlay_set(&t->ov, m->a.p, m->a.n, m->b.p, m->b.n);
            break;
        case EMB_OP_CLEAR_RANGE:
            rc = emb_overlay_clear_range(&t->ov, m->a.p, m->a.n, m->b.p, m->b.n);
            break;
        case KVQ_MUT_SET_VERSIONSTAMPED_KEY:
            rc = 0; /* its key is not known before the commit: t->unreadable covers it */
            break;
        case KVQ_MUT_SET_VERSIONSTAMPED_VALUE:
            rc = emb_overlay_unreadable(&t->ov, m->a.p, m->a.n);
            break;
        default:
            rc = emb_overlay_atomic(&t->ov, m->a.p, m->a.n, m->b.p, m->b.n, m->op);
            break;
        }
        if (rc != 0) {
            t->ov_rc = rc;
            return rc;
        }
    }
    return 0;
}

static int check_unreadable(emb_txn *t, const uint8_t *b, size_t bn, const uint8_t *e, size_t en)
{
    if (t->unreadable.n == 0)
        return 0;
    emb_ranges_normalize(&t->unreadable);
    if (emb_ranges_intersects(&t->unreadable, b, bn, e, en))
        return kvq__error(KVQ_EACCESSED_UNREADABLE,
                          "the read touches a key written with a versionstamp in this "
                          "transaction");
    return 0;
}

/* Reads the stored value of a key at the read version. */
static int storage_get(emb_txn *t, const uint8_t *k, size_t kn, kvq_bytes *value, int *present)
{
    int rc = ensure_rv(t);
    if (rc != 0)
        return rc;
    kvq_bytes v;
    rc = t->e->so->get(t->snap, k, kn, &v, present);
    if (rc == 0 && *present)
        return arena_bytes(t, v.data, v.len, value);
    value->data = NULL;
    value->len = 0;
    return rc;
}

/* Applies an overlay entry's pending atomic operations to a stored value. */
static int resolve_atomic(emb_txn *t, const ov_entry *x, kvq_bytes *value, int *present)
{
    kvq_buf cur = KVQ_BUF_INIT, next = KVQ_BUF_INIT;
    int rc = 0;
    int have = *present;
    if (have)
        rc = kvq_buf_append(&cur, value->data, value->len);
    for (size_t i = 0; rc == 0 && i < x->n_ops; i++) {
        rc = emb_apply_atomic(&next, &have, x->ops[i].op, cur.data, cur.len, have,
                              x->ops[i].param.p, x->ops[i].param.n);
        kvq_buf tmp = cur;
        cur = next;
        next = tmp;
    }
    if (rc == 0 && !have) {
        /* COMPARE_AND_CLEAR cleared it. */
        value->data = NULL;
        value->len = 0;
        *present = 0;
    } else if (rc == 0) {
        uint8_t *mem = emb_arena_alloc(&t->arena, cur.len);
        if (mem == NULL) {
            rc = kvq__error(KVQ_ENOMEM, "out of memory for a read");
        } else {
            if (cur.len > 0)
                memcpy(mem, cur.data, cur.len);
            value->data = mem;
            value->len = cur.len;
            *present = 1;
        }
    }
    kvq_buf_dispose(&cur);
    kvq_buf_dispose(&next);
    return rc;
}

int emb_get(void *tp,
            kvq_bytes *value,
            int *present,
            const uint8_t *key,
            size_t key_len,
            unsigned int flags)
{
    emb_txn *t = tp;
    int rc = check_state(t);
    if (rc == 0)
        rc = ensure_rv(t);
    if (rc == 0)
        rc = ov_catch_up(t);
    if (rc != 0)
        return rc;
    uint8_t zero = 0;
    if (key == NULL)
        key = &zero;
    if (t->no_ryw || ((flags & KVQ_SNAPSHOT) && t->snapshot_no_ryw)) {
        /* The database at the read version, whatever this transaction wrote. */
        if (!(flags & KVQ_SNAPSHOT)) {
            rc = add_point_read(t, key, key_len);
            if (rc != 0)
                return rc;
        }
        return storage_get(t, key, key_len, value, present);
    }
    if (t->unreadable.n > 0) {
        emb_ranges_normalize(&t->unreadable);
        if (emb_ranges_contains(&t->unreadable, key, key_len))
            return kvq__error(KVQ_EACCESSED_UNREADABLE,
                              "the key may be written with a versionstamp in this transaction");
    }
    ov_entry *x = emb_overlay_find(&t->ov, key, key_len, NULL);
    if (x != NULL && x->kind == OV_UNREADABLE)
        return kvq__error(KVQ_EACCESSED_UNREADABLE,
                          "the key's value is written with a versionstamp in this transaction");
    /* A read answered wholly by this transaction's own writes depends on nothing stored, so,
     * as in FoundationDB, it adds no read conflict. */
    int own = (x != NULL && x->kind == OV_SET) ||
              (x == NULL && emb_overlay_cleared(&t->ov, key, key_len));
    if (!(flags & KVQ_SNAPSHOT) && !own) {
        rc = add_point_read(t, key, key_len);
        if (rc != 0)
            return rc;
    }
    if (x != NULL && x->kind == OV_SET) {
        *present = 1;
        return arena_bytes(t, x->value.p, x->value.n, value);
    }
    if (x == NULL && emb_overlay_cleared(&t->ov, key, key_len)) {
        *present = 0;
        return 0;
    }
    rc = storage_get(t, key, key_len, value, present);
    if (rc == 0 && x != NULL)
        rc = resolve_atomic(t, x, value, present);
    return rc;
}

/* A cursor over stored rows of a range that skips rows the transaction cleared; the rows it
 * keeps are copied into the arena (one block for key and value). */
typedef struct cursor {
    emb_txn *t;
    emb_cursor *sc;
    int reverse;
    int has;
    kvq_bytes key, value;
} cursor;

static int cursor_next(cursor *c)
{
    for (;;) {
        kvq_bytes k, v;
        int has = 0;
        int rc = c->t->e->so->cursor_next(c->sc, &k, &v, &has);
        c->has = 0;
        if (rc != 0 || !has)
            return rc;
        if (c->t->ov.cleared.n > 0 && emb_overlay_cleared(&c->t->ov, k.data, k.len))
            continue;
        uint8_t *mem = emb_arena_alloc(&c->t->arena, k.len + v.len);
        if (mem == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory for a read");
        if (k.len > 0)
            memcpy(mem, k.data, k.len);
        if (v.len > 0)
            memcpy(mem + k.len, v.data, v.len);
        c->key.data = mem;
        c->key.len = k.len;
        c->value.data = mem + k.len;
        c->value.len = v.len;
        c->has = 1;
        return 0;
    }
}

typedef struct kv_vec {
    kvq_kv *v;
    size_t n, cap;
} kv_vec;

static int kv_push(kv_vec *o, kvq_bytes k, kvq_bytes v)
{
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 16;
        kvq_kv *nv = kvq__realloc(o->v, cap * sizeof(*nv));
        if (nv == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory for a range read");
        o->v = nv;
        o->cap = cap;
    }
    o->v[o->n].key = k;
    o->v[o->n].value = v;
    o->n++;
    return 0;
}

/* Adds a range read's conflict range [b, e) minus the parts this transaction's own writes
 * decide (ranges it cleared, keys it set), as FoundationDB does: only what came from storage can
 * be changed by someone else. */
static int
add_range_read_conflict(emb_txn *t, const uint8_t *b, size_t bn, const uint8_t *e, size_t en)
{
    const emb_ranges *cl = &t->ov.cleared;
    size_t ci = 0;
    while (ci < cl->n && kvq__bytes_cmp(cl->v[ci].e.p, cl->v[ci].e.n, b, bn) <= 0)
        ci++;
    size_t oi = emb_overlay_lower(&t->ov, b, bn);
    /* cur: the start of the part not yet accounted for. */
    const uint8_t *cur = b;
    size_t curn = bn;
    int rc = 0;
    for (;;) {
        /* The next own interval by begin: a cleared range, or a set key [k, k + 0x00). */
        while (oi < t->ov.n && t->ov.v[oi]->kind != OV_SET)
            oi++;
        int have_c = ci < cl->n && kvq__bytes_cmp(cl->v[ci].b.p, cl->v[ci].b.n, e, en) < 0;
        int have_k =
            oi < t->ov.n && kvq__bytes_cmp(t->ov.v[oi]->key.p, t->ov.v[oi]->key.n, e, en) < 0;
        if (!have_c && !have_k)
            break;
        const uint8_t *sb, *se;
        size_t sbn, sen;
        if (have_c && (!have_k || kvq__bytes_cmp(cl->v[ci].b.p, cl->v[ci].b.n, t->ov.v[oi]->key.p,
                                                 t->ov.v[oi]->key.n) <= 0)) {
            sb = cl->v[ci].b.p;
            sbn = cl->v[ci].b.n;
            se = cl->v[ci].e.p;
            sen = cl->v[ci].e.n;
            ci++;
        } else {
            sb = t->ov.v[oi]->key.p;
            sbn = t->ov.v[oi]->key.n;
            uint8_t *endk = emb_arena_alloc(&t->arena, sbn + 1);
            if (endk == NULL)
                return kvq__error(KVQ_ENOMEM, "out of memory");
            if (sbn > 0)
                memcpy(endk, sb, sbn);
            endk[sbn] = 0;
            se = endk;
            sen = sbn + 1;
            oi++;
        }
        if (kvq__bytes_cmp(cur, curn, sb, sbn) < 0) {
            rc = add_read_conflict(t, cur, curn, sb, sbn);
            if (rc != 0)
                return rc;
        }
        if (kvq__bytes_cmp(se, sen, cur, curn) > 0) {
            cur = se;
            curn = sen;
        }
        if (kvq__bytes_cmp(cur, curn, e, en) >= 0)
            return 0;
    }
    return add_read_conflict(t, cur, curn, e, en);
}

int emb_get_range(void *tp,
                  const kvq_kv **kvs,
                  size_t *count,
                  int *more,
                  const uint8_t *begin,
                  size_t begin_len,
                  const uint8_t *end,
                  size_t end_len,
                  int limit,
                  unsigned int flags)
{
    emb_txn *t = tp;
    int rc = check_state(t);
    if (rc == 0)
        rc = ensure_rv(t);
    if (rc == 0)
        rc = ov_catch_up(t);
    if (rc != 0)
        return rc;
    static const uint8_t empty[1] = { 0 };
    if (begin == NULL)
        begin = empty;
    if (end == NULL)
        end = empty;
    if (kvq__bytes_cmp(begin, begin_len, end, end_len) >= 0) {
        *count = 0;
        return 0;
    }
    int ryw = !t->no_ryw && !((flags & KVQ_SNAPSHOT) && t->snapshot_no_ryw);
    rc = ryw ? check_unreadable(t, begin, begin_len, end, end_len) : 0;
    if (rc != 0)
        return rc;
    int reverse = (flags & KVQ_REVERSE) != 0;
    cursor c = { .t = t, .reverse = reverse };
    rc = t->e->so->cursor_open(t->snap, begin, begin_len, end, end_len, reverse, &c.sc);
    if (rc != 0)
        return rc;

    /* Overlay entries within the range, walked in the same direction as the rows. */
    size_t lo = emb_overlay_lower(&t->ov, begin, begin_len);
    size_t hi = ryw ? emb_overlay_lower(&t->ov, end, end_len) : lo;
    size_t oi = reverse ? hi : lo; /* reverse: next is oi - 1 */

    kv_vec out = { 0 };
    int stopped = 0;
    rc = cursor_next(&c);
    while (rc == 0) {
        int have_ov = reverse ? oi > lo : oi < hi;
        ov_entry *x = have_ov ? t->ov.v[reverse ? oi - 1 : oi] : NULL;
        if (!c.has && x == NULL)
            break;
        if (limit > 0 && out.n == (size_t)limit) {
            stopped = 1;
            break;
        }
        int order; /* < 0: the stored row comes first in this direction */
        if (!c.has)
            order = 1;
        else if (x == NULL)
            order = -1;
        else {
            order = kvq__bytes_cmp(c.key.data, c.key.len, x->key.p, x->key.n);
            if (reverse)
                order = -order;
        }
        if (order < 0) {
            rc = kv_push(&out, c.key, c.value);
            if (rc == 0)
                rc = cursor_next(&c);
            continue;
        }
        /* The overlay entry comes first, or has the same key as the stored row. */
        kvq_bytes k = { NULL, 0 };
        kvq_bytes v = { NULL, 0 };
        rc = arena_bytes(t, x->key.p, x->key.n, &k);
        if (rc != 0)
            break;
        int present = 0;
        if (order == 0) {
            v = c.value;
            present = 1;
        }
        if (x->kind == OV_UNREADABLE) {
            rc = kvq__error(KVQ_EACCESSED_UNREADABLE,
                            "the range holds a value written with a versionstamp in this "
                            "transaction");
            break;
        }
        if (x->kind == OV_SET) {
            present = 1;
            rc = arena_bytes(t, x->value.p, x->value.n, &v);
        } else {
            rc = resolve_atomic(t, x, &v, &present);
        }
        if (rc == 0 && present) /* absent when COMPARE_AND_CLEAR cleared it */
            rc = kv_push(&out, k, v);
        oi = reverse ? oi - 1 : oi + 1;
        if (rc == 0 && order == 0)
            rc = cursor_next(&c);
    }
    t->e->so->cursor_close(c.sc);
    if (rc != 0) {
        kvq__free(out.v);
        return rc;
    }

    if (!(flags & KVQ_SNAPSHOT)) {
        /* The read covers what it actually saw: up to and including the last key when the
         * limit stopped it. */
        if (stopped && out.n > 0) {
            const kvq_bytes *last = &out.v[out.n - 1].key;
            if (!reverse) {
                uint8_t *after = emb_arena_alloc(&t->arena, last->len + 1);
                if (after == NULL)
                    rc = kvq__error(KVQ_ENOMEM, "out of memory");
                else {
                    if (last->len > 0)
                        memcpy(after, last->data, last->len);
                    after[last->len] = 0;
                    rc = add_range_read_conflict(t, begin, begin_len, after, last->len + 1);
                }
            } else {
                rc = add_range_read_conflict(t, last->data, last->len, end, end_len);
            }
        } else {
            rc = add_range_read_conflict(t, begin, begin_len, end, end_len);
        }
    }
    if (rc != 0) {
        kvq__free(out.v);
        return rc;
    }
    kvq_kv *res = emb_arena_alloc(&t->arena, out.n * sizeof(*res));
    if (res == NULL && out.n > 0) {
        kvq__free(out.v);
        return kvq__error(KVQ_ENOMEM, "out of memory for a range read");
    }
    if (out.n > 0)
        memcpy(res, out.v, out.n * sizeof(*res));
    kvq__free(out.v);
    *kvs = res;
    *count = out.n;
    *more = stopped;
    return 0;
}

/* Appends a mutation: one arena block holds a, a 0x00 (so that [a, a + 0x00) can be lent to a
 * conflict range) and b. *out: the mutation, valid until the next one is appended. */
static int push_mut(
    emb_txn *t, int op, const uint8_t *a, size_t an, const uint8_t *b, size_t bn, emb_mut **out)
{
    int rc = add_size(t, an + bn);
    if (rc != 0)
        return rc;
    if (t->n_muts == t->cap_muts) {
        size_t cap = t->cap_muts ? t->cap_muts * 2 : 16;
        emb_mut *v = kvq__realloc(t->muts, cap * sizeof(*v));
        if (v == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory for the write buffer");
        t->muts = v;
        t->cap_muts = cap;
    }
    uint8_t *p = emb_arena_alloc(&t->arena, an + 1 + bn);
    if (p == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for the write buffer");
    if (an > 0)
        memcpy(p, a, an);
    p[an] = 0;
    if (bn > 0)
        memcpy(p + an + 1, b, bn);
    emb_mut *m = &t->muts[t->n_muts++];
    m->op = op;
    m->a.p = p;
    m->a.n = an;
    m->b.p = p + an + 1;
    m->b.n = bn;
    if (out != NULL)
        *out = m;
    return 0;
}

/* The point write-conflict range of a mutation's key, lent by the mutation. */
static int add_point_write(emb_txn *t, const emb_mut *m)
{
    int rc = add_size(t, 2 * m->a.n + 1);
    if (rc == 0)
        rc = emb_ranges_add_lent(&t->writes, m->a.p, m->a.n, m->a.p, m->a.n + 1);
    return rc;
}

int emb_set(void *tp, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len)
{
    emb_txn *t = tp;
    int rc = check_state(t);
    if (rc != 0)
        return rc;
    uint8_t zero = 0;
    if (key == NULL)
        key = &zero;
    if (value == NULL)
        value = &zero;
    emb_mut *m = NULL;
    rc = push_mut(t, EMB_OP_SET, key, key_len, value, value_len, &m);
    if (rc == 0 && write_conflicts(t))
        rc = add_point_write(t, m);
    return rc;
}

int emb_clear_range(
    void *tp, const uint8_t *begin, size_t begin_len, const uint8_t *end, size_t end_len)
{
    emb_txn *t = tp;
    int rc = check_state(t);
    if (rc != 0)
        return rc;
    static const uint8_t empty[1] = { 0 };
    if (begin == NULL)
        begin = empty;
    emb_mut *m = NULL;
    rc = push_mut(t, EMB_OP_CLEAR_RANGE, begin, begin_len, end, end_len, &m);
    if (rc == 0 && write_conflicts(t))
        rc = emb_ranges_add_lent(&t->writes, m->a.p, m->a.n, m->b.p, m->b.n);
    /* What a clear covers reads as empty, even inside the span a versionstamped key made
     * unreadable (FoundationDB's read-your-writes map does the same). */
    if (rc == 0 && t->unreadable.n > 0)
        rc = emb_ranges_subtract(&t->unreadable, begin, begin_len, end, end_len);
    return rc;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int emb_atomic_op(void *tp,
                  const uint8_t *key,
                  size_t key_len,
                  const uint8_t *param,
                  size_t param_len,
                  kvq_mutation op)
{
    emb_txn *t = tp;
    int rc = check_state(t);
    if (rc != 0)
        return rc;
    uint8_t zero = 0;
    if (param == NULL)
        param = &zero;
    if (key == NULL)
        key = &zero;
    if (op == KVQ_MUT_SET_VERSIONSTAMPED_KEY) {
        /* Its write-conflict range is added at commit, on the stamped key, as FoundationDB's
         * commit proxy adds it: option 30 is used up but cannot take it away. */
        (void)write_conflicts(t);
        size_t kn = key_len - 4;
        uint32_t off = le32(key + kn);
        rc = push_mut(t, op, key, key_len, param, param_len, NULL);
        if (rc != 0)
            return rc;
        /* The keys this stamp may produce become unreadable: from the key with the stamp
         * (read version + 1, order 0), or zeros without a read version, to the key with 0xFF
         * stamp bytes, inclusive. */
        uint8_t *lo = emb_arena_alloc(&t->arena, 2 * kn + 1);
        if (lo == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory");
        uint8_t *hi = lo + kn;
        memcpy(lo, key, kn);
        memcpy(hi, key, kn);
        uint64_t v = t->has_rv ? (uint64_t)t->rv + 1 : 0;
        for (int i = 0; i < 8; i++)
            lo[off + (size_t)i] = (uint8_t)(v >> (56 - 8 * i));
        lo[off + 8] = lo[off + 9] = 0;
        memset(hi + off, 0xff, 10);
        hi[kn] = 0;
        /* A batch of stamped keys of one template (a push of many items: the same prefix, user
         * versions that grow) makes ranges that each overlap the one before: they join it,
         * rather than adding a range per key that every read would sort. */
        emb_ranges *u = &t->unreadable;
        if (u->n > 0) {
            emb_range *last = &u->v[u->n - 1];
            if (kvq__bytes_cmp(last->b.p, last->b.n, lo, kn) <= 0 &&
                kvq__bytes_cmp(lo, kn, last->e.p, last->e.n) <= 0) {
                if (kvq__bytes_cmp(hi, kn + 1, last->e.p, last->e.n) > 0) {
                    last->e.p = hi;
                    last->e.n = kn + 1;
                }
                return 0;
            }
        }
        return emb_ranges_add_lent(u, lo, kn, hi, kn + 1);
    }
    emb_mut *m = NULL;
    rc = push_mut(t, op, key, key_len, param, param_len, &m);
    if (rc == 0 && write_conflicts(t))
        rc = add_point_write(t, m);
    return rc;
}

int emb_add_conflict_range(void *tp,
                           const uint8_t *begin,
                           size_t begin_len,
                           const uint8_t *end,
                           size_t end_len,
                           kvq_conflict_type type)
{
    emb_txn *t = tp;
    int rc = check_state(t);
    if (rc != 0)
        return rc;
    static const uint8_t empty[1] = { 0 };
    if (begin == NULL)
        begin = empty;
    rc = add_size(t, begin_len + end_len);
    if (rc != 0)
        return rc;
    if (type == KVQ_CONFLICT_READ) {
        /* A read conflict needs a read version to be checked against. */
        rc = ensure_rv(t);
        if (rc == 0)
            rc = emb_ranges_add(&t->reads, begin, begin_len, end, end_len);
        return rc;
    }
    return emb_ranges_add(&t->writes, begin, begin_len, end, end_len);
}

int emb_get_committed_version(void *tp, int64_t *out)
{
    emb_txn *t = tp;
    if (!t->committed || t->committed_version <= 0)
        return kvq__error(KVQ_ENO_COMMIT_VERSION,
                          "the transaction has no commit version (not committed, or read-only)");
    *out = t->committed_version;
    return 0;
}

int emb_get_versionstamp(void *tp, uint8_t out[10])
{
    emb_txn *t = tp;
    if (!t->committed || t->committed_version <= 0)
        return kvq__error(KVQ_ENO_COMMIT_VERSION,
                          "the transaction has no versionstamp (not committed, or read-only)");
    memcpy(out, t->stamp, 10);
    return 0;
}
