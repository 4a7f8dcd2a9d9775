/* High-contention pops for FIFO and priority queues: FoundationDB's staging technique (the
 * high-contention queue layer), with two fixes: a popper that dies after registering never
 * strands an item (waiters and results older than the staging timeout go back), and waiting
 * poppers sleep on a watch instead of polling.
 *
 * A pop moves through these steps, each one transaction:
 *
 *   SIMPLE    if no waiter is registered, the recipe's pop (read the head, clear it); when
 *             waiters exist, register directly (as FoundationDB's layer does)
 *   REGISTER  after SIMPLE lost a race: write our waiter ("hc","pop",index,rand) with a
 *             snapshot read of the last index, so registrations never conflict
 *   LEAD      snapshot-read up to hc_batch waiters. The first live waiter's popper fulfils:
 *             it reads as many items from the ends they want, pairs them in order, and for each
 *             pair takes read conflicts on exactly the waiter and item keys, clears both and
 *             hands the value over in ("hc","res",rand) (its own pair it pops directly);
 *             waiters left without an item, and stale ones, are cleared (they start again and
 *             find the queue empty); the commit bumps the turn counter ("hc","turn").
 *             Any other popper checks its result slot and otherwise sleeps on a watch of the
 *             turn counter (set in the same transaction, so no fulfil is missed), and looks
 *             again when a fulfil commits; if none commits within a while (the first waiter's
 *             popper died), it fulfils itself.
 *   CHECK     after LEAD lost a race or did not see our waiter: a result is claimed (cleared,
 *             with the pop's result slot written, in one transaction); a waiter still present
 *             leads again; a waiter gone without result starts over.
 *
 * Every step that can remove an item for us writes the pop's result slot, so that a commit
 * reported as 1021 is resolved by the next step (kvq__qop_begin reads the slot first).
 */
#include <string.h>

#include "layers/queue/queue_internal.h"

enum {
    PH_SIMPLE,
    PH_REGISTER,
    PH_LEAD,
    PH_CHECK,
    PH_WAIT,
    PH_RESTART,
    PH_DONE,
};

#define MAX_STEPS    200000
#define MAX_RESTARTS 10000
/* How long a waiter trusts the first waiter's popper to fulfil before doing it itself. */
#define LEAD_WAIT_MS 50
/* A lost simple pop adds PRESSURE_STEP; each pop that skips the simple path takes 1 off. */
#define PRESSURE_STEP 8
#define PRESSURE_MAX  64

typedef struct hc {
    kvq_queue *q;
    kvq__qop *o;
    int end;
    int anon; /* a fulfil on behalf of nobody (tests) */
    uint8_t me[KVQ__RAND_LEN];
    int64_t my_index; /* -1 until chosen */
    kvq_buf wkey, reskey, rkkey;
    int registering;  /* the current SIMPLE attempt registers instead of popping */
    int reg_maybe;    /* a registration attempt may have committed */
    int force;        /* lead even when not first in line (the first did not) */
    int fulfil_wrote; /* the LEAD attempt fulfilled (rather than waited) */
    size_t served;
    kvq_buf turnkey;
    kvq_watch *watch;
    /* consume: when the simple path finds the queue empty, a watch on the push counter set in
     * that transaction goes here (NULL: a plain pop, which reports the queue empty). */
    kvq_watch **out_watch;
    kvq__rng rng;
} hc;

static kvq_bytes pfx(const kvq_queue *q)
{
    kvq_bytes b = { q->prefix.data, q->prefix.len };
    return b;
}

static int new_identity(hc *h)
{
    h->my_index = -1;
    h->reg_maybe = 0;
    h->wkey.len = h->reskey.len = h->rkkey.len = 0;
    int rc = kvq__random_bytes(h->me, sizeof(h->me));
    if (rc == 0 && h->turnkey.len == 0)
        rc = kvq__qk_hc_kind(&h->turnkey, pfx(h->q), "turn");
    if (rc == 0)
        rc = kvq__qk_hc_slot(&h->reskey, pfx(h->q), "res", h->me);
    if (rc == 0)
        rc = kvq__qk_hc_slot(&h->rkkey, pfx(h->q), "rk", h->me);
    return rc;
}

static void hc_free(hc *h)
{
    kvq_buf_dispose(&h->wkey);
    kvq_buf_dispose(&h->reskey);
    kvq_buf_dispose(&h->rkkey);
    kvq_buf_dispose(&h->turnkey);
    kvq_watch_destroy(h->watch);
    h->watch = NULL;
}

/* The last registered waiter's index + 1 (1 when none), by a snapshot read. */
static int next_waiter_index(kvq_queue *q, kvq_txn *txn, int64_t *out)
{
    const kvq_kv *kvs;
    size_t got;
    int rc = kvq_txn_get_range(&kvs, &got, NULL, txn, q->hc_pop_lo.data, q->hc_pop_lo.len,
                               q->hc_pop_hi.data, q->hc_pop_hi.len, 1, KVQ_SNAPSHOT | KVQ_REVERSE);
    if (rc != 0)
        return rc;
    *out = 1;
    if (got == 1) {
        int64_t last;
        uint8_t r[KVQ__RAND_LEN];
        rc =
            kvq__qk_parse_waiter(kvs[0].key.data + q->bk.len, kvs[0].key.len - q->bk.len, &last, r);
        if (rc != 0)
            return rc;
        *out = last < INT64_MAX ? last + 1 : last;
    }
    return 0;
}

static int write_waiter(hc *h, kvq_txn *txn)
{
    uint8_t val[9];
    kvq__le64_put(val, (uint64_t)h->o->rv);
    val[8] = (uint8_t)h->end;
    h->wkey.len = 0;
    int rc = kvq__qk_hc_waiter(&h->wkey, pfx(h->q), h->my_index, h->me);
    if (rc == 0)
        rc = kvq_txn_set(txn, h->wkey.data, h->wkey.len, val, sizeof(val));
    return rc;
}

/* Takes a result handed to us: clears it and its record, keeps the value, writes the slot. */
static int claim(hc *h, kvq_txn *txn, kvq_bytes value, int *next)
{
    kvq_bytes rk;
    int present;
    int rc = kvq_txn_get(&rk, &present, txn, h->rkkey.data, h->rkkey.len, 0);
    int64_t prio = 0;
    if (rc == 0 && present && rk.len > 8 + KVQ__RAND_LEN)
        prio = kvq__q_key_priority(h->q, rk.data + 8 + KVQ__RAND_LEN, rk.len - 8 - KVQ__RAND_LEN);
    if (rc == 0)
        rc = kvq_txn_clear(txn, h->reskey.data, h->reskey.len);
    if (rc == 0)
        rc = kvq_txn_clear(txn, h->rkkey.data, h->rkkey.len);
    if (rc == 0)
        rc = kvq__qop_keep(h->o, &value, 1, prio);
    if (rc == 0)
        rc = kvq__qop_mark(h->o, txn);
    if (rc == 0)
        *next = PH_DONE;
    return rc;
}

/* Before registering: a queue that is empty at this read version (a snapshot read) has nothing
 * to hand over, so registering would only cost a waiter, a fulfil that clears it and a restart.
 * Finishes the pop instead: empty (KVQ_ENOTFOUND), or for a consume a watch on the push counter
 * set in this transaction. Returns 1 through *done when it did. */
static int empty_instead_of_register(hc *h, kvq_txn *txn, int *next, int *done)
{
    const kvq_kv *kvs;
    size_t got;
    *done = 0;
    int rc = kvq__q_head(h->q, txn, h->end, 1, KVQ_SNAPSHOT, &kvs, &got);
    if (rc != 0 || got > 0)
        return rc;
    *done = 1;
    h->registering = 0;
    if (h->out_watch == NULL)
        return KVQ_ENOTFOUND;
    rc = kvq__qop_keep(h->o, NULL, 0, 0);
    if (rc == 0)
        rc = kvq_txn_watch(h->out_watch, txn, h->q->npush.data, h->q->npush.len);
    if (rc == 0)
        *next = PH_DONE;
    return rc;
}

static int step_simple(hc *h, kvq_txn *txn, int *next)
{
    kvq_queue *q = h->q;
    const kvq_kv *kvs;
    size_t got;
    h->registering = 0;
    int rc = kvq_txn_get_range(&kvs, &got, NULL, txn, q->hc_pop_lo.data, q->hc_pop_lo.len,
                               q->hc_pop_hi.data, q->hc_pop_hi.len, 1, KVQ_SNAPSHOT | KVQ_REVERSE);
    if (rc != 0)
        return rc;
    if (got == 1 || h->reg_maybe) {
        /* Others are waiting: join them rather than fight for the head. */
        h->registering = 1;
        if (h->reg_maybe) {
            *next = PH_REGISTER;
            return 0;
        }
        int done;
        rc = empty_instead_of_register(h, txn, next, &done);
        if (rc != 0 || done)
            return rc;
        if (h->my_index < 0)
            rc = next_waiter_index(q, txn, &h->my_index);
        if (rc == 0)
            rc = write_waiter(h, txn);
        if (rc == 0)
            *next = PH_LEAD;
        return rc;
    }
    kvq_bytes v;
    size_t n;
    int64_t prio = 0;
    rc = kvq__q_pop_k_end(q, txn, h->end, 1, &v, &prio, &n);
    if (rc == KVQ_ENOTFOUND && h->out_watch != NULL) {
        /* Empty at this read version: any push that commits after it moves the counter. */
        rc = kvq__qop_keep(h->o, NULL, 0, 0);
        if (rc == 0)
            rc = kvq_txn_watch(h->out_watch, txn, q->npush.data, q->npush.len);
        if (rc == 0)
            *next = PH_DONE;
        return rc;
    }
    if (rc == 0)
        rc = kvq__qop_keep(h->o, &v, 1, prio);
    if (rc == 0)
        rc = kvq__qop_mark(h->o, txn);
    if (rc == 0)
        *next = PH_DONE;
    return rc;
}

static int step_register(hc *h, kvq_txn *txn, int *next)
{
    int rc;
    kvq_bytes v;
    int present;
    if (h->reg_maybe && h->wkey.len > 0) {
        /* An earlier registration may have committed: never register twice (two waiters with
         * one result slot would lose an item). */
        rc = kvq_txn_get(&v, &present, txn, h->reskey.data, h->reskey.len, 0);
        if (rc != 0)
            return rc;
        if (present)
            return claim(h, txn, v, next);
        rc = kvq_txn_get(&v, &present, txn, h->wkey.data, h->wkey.len, 0);
        if (rc != 0)
            return rc;
        if (present) {
            *next = PH_LEAD;
            return 0;
        }
    }
    int done;
    rc = empty_instead_of_register(h, txn, next, &done);
    if (rc != 0 || done)
        return rc;
    if (h->my_index < 0)
        rc = next_waiter_index(h->q, txn, &h->my_index);
    if (rc == 0)
        rc = write_waiter(h, txn);
    if (rc == 0)
        *next = PH_LEAD;
    return rc;
}

typedef struct waiter {
    const kvq_kv *kv;
    uint8_t rand[KVQ__RAND_LEN];
    int64_t reg;
    int end;
} waiter;

/* Not our turn: take our result if it is there, else sleep on the turn counter. */
static int wait_turn(hc *h, kvq_txn *txn, int *next)
{
    kvq_bytes v;
    int present;
    int rc = kvq_txn_get(&v, &present, txn, h->reskey.data, h->reskey.len, 0);
    if (rc != 0)
        return rc;
    if (present)
        return claim(h, txn, v, next);
    kvq_watch_destroy(h->watch);
    h->watch = NULL;
    rc = kvq_txn_watch(&h->watch, txn, h->turnkey.data, h->turnkey.len);
    if (rc == 0)
        *next = PH_WAIT;
    return rc;
}

/* Reads the nw waiters wk into ws: each one's id, registration version and end. want[end]:
 * the live ones (registered within timeout_v of the read version) of each end; *first_live:
 * the first of them, *mine_at: this popper's own (both nw when none). 0, or a malformed key's
 * error. */
static int read_waiters(const hc *h,
                        waiter *ws,
                        const kvq_kv *wk,
                        size_t nw,
                        int64_t timeout_v,
                        int want[2],
                        size_t *first_live,
                        size_t *mine_at)
{
    const kvq_queue *q = h->q;
    int64_t rv = h->o->rv;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < nw; i++) {
        int64_t index;
        rc = kvq__qk_parse_waiter(wk[i].key.data + q->bk.len, wk[i].key.len - q->bk.len, &index,
                                  ws[i].rand);
        ws[i].kv = &wk[i];
        ws[i].reg = wk[i].value.len >= 8 ? (int64_t)kvq__le_get(wk[i].value.data, 8) : 0;
        ws[i].end =
            wk[i].value.len >= 9 && wk[i].value.data[8] == 1 && q->type == KVQ_QUEUE_PRIORITY
                ? KVQ__END_MAX
                : KVQ__END_MIN;
        if (rv - ws[i].reg <= timeout_v) {
            want[ws[i].end]++;
            if (*first_live == nw)
                *first_live = i;
        }
        if (!h->anon && memcmp(ws[i].rand, h->me, KVQ__RAND_LEN) == 0)
            *mine_at = i;
    }
    return rc;
}

/* Hands item to another popper's waiter w: its result slot (the value) and the slot of the
 * item's key, with the read version rv and the waiter's id. */
static int give_result(kvq_queue *q, kvq_txn *txn, const waiter *w, const kvq_kv *item, int64_t rv)
{
    kvq_buf res = KVQ_BUF_INIT, rk = KVQ_BUF_INIT, rkv = KVQ_BUF_INIT;
    uint8_t ver[8];
    kvq__le64_put(ver, (uint64_t)rv);
    int rc = kvq__qk_hc_slot(&res, pfx(q), "res", w->rand);
    if (rc == 0)
        rc = kvq__qk_hc_slot(&rk, pfx(q), "rk", w->rand);
    if (rc == 0)
        rc = kvq_buf_append(&rkv, ver, 8);
    if (rc == 0)
        rc = kvq_buf_append(&rkv, w->rand, KVQ__RAND_LEN);
    if (rc == 0)
        rc = kvq_buf_append(&rkv, item->key.data, item->key.len);
    if (rc == 0)
        rc = kvq_txn_set(txn, res.data, res.len, item->value.data, item->value.len);
    if (rc == 0)
        rc = kvq_txn_set(txn, rk.data, rk.len, rkv.data, rkv.len);
    kvq_buf_dispose(&res);
    kvq_buf_dispose(&rk);
    kvq_buf_dispose(&rkv);
    return rc;
}

/* One LEAD transaction: the first waiter's popper pairs waiters with items in order. */
static int step_lead(hc *h, kvq_txn *txn, int *next)
{
    kvq_queue *q = h->q;
    const kvq_kv *wk;
    size_t nw;
    h->fulfil_wrote = 0;
    h->served = 0;
    int rc = kvq_txn_get_range(&wk, &nw, NULL, txn, q->hc_pop_lo.data, q->hc_pop_lo.len,
                               q->hc_pop_hi.data, q->hc_pop_hi.len, q->opts.hc_batch, KVQ_SNAPSHOT);
    if (rc != 0)
        return rc;
    *next = h->anon ? PH_DONE : PH_CHECK;
    if (nw == 0)
        return 0;
    waiter *ws = kvq__calloc(nw, sizeof(*ws));
    if (ws == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    int64_t rv = h->o->rv;
    int64_t timeout_v = q->opts.staging_timeout_ms * KVQ__VERSIONS_PER_MS;
    int want[2] = { 0, 0 };
    size_t first_live = nw, mine_at = nw;
    rc = read_waiters(h, ws, wk, nw, timeout_v, want, &first_live, &mine_at);
    if (rc == 0 && !h->anon && !h->force) {
        /* Only the first live waiter's popper fulfils; the others wait for its commit. */
        if (mine_at == nw && nw < (size_t)q->opts.hc_batch) {
            kvq__free(ws);
            return 0; /* our waiter is gone: CHECK */
        }
        if (mine_at != first_live) {
            kvq__free(ws);
            return wait_turn(h, txn, next);
        }
    }
    const kvq_kv *items[2] = { NULL, NULL };
    size_t nitems[2] = { 0, 0 };
    for (int e = 0; rc == 0 && e < 2; e++)
        if (want[e] > 0)
            rc = kvq__q_head(q, txn, e, want[e], KVQ_SNAPSHOT, &items[e], &nitems[e]);

    size_t taken[2] = { 0, 0 };
    int mine_seen = 0, mine_gone = 0;
    for (size_t i = 0; rc == 0 && i < nw; i++) {
        waiter *w = &ws[i];
        int mine = !h->anon && memcmp(w->rand, h->me, KVQ__RAND_LEN) == 0;
        mine_seen |= mine;
        const kvq_kv *item = NULL;
        if (rv - w->reg <= timeout_v) {
            int e = w->end, o = 1 - e;
            if (taken[e] < nitems[e]) {
                const kvq_kv *c = &items[e][taken[e]];
                /* The other end may already have taken this item (a short queue). */
                const kvq_kv *lo = taken[o] > 0 ? &items[o][taken[o] - 1] : NULL;
                int cmp = lo == NULL
                              ? -1
                              : kvq__bytes_cmp(c->key.data, c->key.len, lo->key.data, lo->key.len);
                if (lo == NULL || (e == KVQ__END_MIN ? cmp < 0 : cmp > 0)) {
                    item = c;
                    taken[e]++;
                }
            }
        }
        rc = kvq__conflict_key(txn, w->kv->key.data, w->kv->key.len);
        if (rc == 0)
            rc = kvq_txn_clear(txn, w->kv->key.data, w->kv->key.len);
        h->fulfil_wrote = 1;
        if (rc != 0)
            break;
        if (item == NULL) {
            /* No item for it (or it is stale): it starts over and will see the queue. */
            mine_gone |= mine;
            continue;
        }
        rc = kvq__conflict_key(txn, item->key.data, item->key.len);
        if (rc == 0)
            rc = kvq_txn_clear(txn, item->key.data, item->key.len);
        if (rc != 0)
            break;
        h->served++;
        if (mine) {
            rc = kvq__qop_keep(h->o, &item->value, 1,
                               kvq__q_key_priority(q, item->key.data, item->key.len));
            if (rc == 0)
                rc = kvq__qop_mark(h->o, txn);
            *next = PH_DONE;
            continue;
        }
        rc = give_result(q, txn, w, item, rv);
    }
    kvq__free(ws);
    static const uint8_t one[8] = { 1 };
    if (rc == 0 && h->fulfil_wrote)
        rc = kvq_txn_atomic_op(txn, h->turnkey.data, h->turnkey.len, one, 8, KVQ_MUT_ADD);
    if (rc == 0 && !h->anon && *next != PH_DONE) {
        if (mine_gone)
            *next = PH_RESTART;
        else if (!mine_seen)
            *next = PH_CHECK;
    }
    return rc;
}

static int step_check(hc *h, kvq_txn *txn, int *next)
{
    kvq_bytes v;
    int present;
    int rc = kvq_txn_get(&v, &present, txn, h->reskey.data, h->reskey.len, 0);
    if (rc != 0)
        return rc;
    if (present)
        return claim(h, txn, v, next);
    rc = kvq_txn_get(&v, &present, txn, h->wkey.data, h->wkey.len, 0);
    if (rc == 0)
        *next = present ? PH_LEAD : PH_RESTART;
    return rc;
}

static void do_wait(hc *h, int *next)
{
    int64_t ms = LEAD_WAIT_MS + (int64_t)(kvq__rng_unit(&h->rng) * LEAD_WAIT_MS);
    KVQ__STAT_INC(h->q, hc_waits);
    int rc = kvq_watch_wait(h->watch, ms);
    kvq_watch_destroy(h->watch);
    h->watch = NULL;
    /* A fulfil committed (look again), or none did for a while: lead ourselves. */
    h->force = rc != 0;
    *next = PH_LEAD;
}

/* One attempt of the pop's current phase in txn (the idempotency marker's check first: a pop
 * found done is PH_DONE). *next: the phase after it, once txn commits. */
static int run_step(hc *h, kvq_txn *txn, int phase, int *next)
{
    kvq__qop *o = h->o;
    o->attempt++;
    int rc = kvq__qop_begin(o, txn);
    if (rc != 0)
        return rc;
    if (o->found) {
        *next = PH_DONE;
        return 0;
    }
    switch (phase) {
    case PH_SIMPLE:
        return step_simple(h, txn, next);
    case PH_REGISTER:
        return step_register(h, txn, next);
    case PH_LEAD:
        return step_lead(h, txn, next);
    default:
        return step_check(h, txn, next);
    }
}

/* A step committed: its statistics, and the handle's contention pressure, which a pop done by
 * the simple path lowers. */
static void step_committed(hc *h, int phase, int next)
{
    kvq_queue *q = h->q;
    if (phase == PH_SIMPLE && next == PH_DONE && !h->o->found)
        KVQ__STAT_INC(q, hc_simple);
    if (phase == PH_SIMPLE && next == PH_DONE &&
        __atomic_load_n(&q->hc_pressure, __ATOMIC_RELAXED) > 0)
        __atomic_sub_fetch(&q->hc_pressure, 1, __ATOMIC_RELAXED);
    if ((phase == PH_SIMPLE || phase == PH_REGISTER) && next == PH_LEAD && !h->reg_maybe)
        KVQ__STAT_INC(q, hc_registered);
    if (phase == PH_LEAD && h->fulfil_wrote) {
        KVQ__STAT_INC(q, hc_fulfils);
        h->force = 0;
    }
}

int kvq__staging_pop(kvq_queue *q, kvq__qop *o, int end, kvq_watch **watch)
{
    hc h;
    memset(&h, 0, sizeof(h));
    h.q = q;
    h.o = o;
    h.end = end;
    h.out_watch = watch;
    uint64_t seed;
    int rc = kvq__random_bytes(&seed, sizeof(seed));
    h.rng.s = seed;
    if (rc == 0)
        rc = new_identity(&h);
    kvq_txn *txn = NULL;
    if (rc == 0)
        rc = kvq_txn_create(&txn, q->db);
    /* Under recent contention on this handle, skip the simple path (it would most likely lose
     * the race for the head) and register at once; each skip lowers the pressure, so the simple
     * path is tried again as contention fades. */
    int phase = PH_SIMPLE, restarts = 0;
    int pressure = __atomic_load_n(&q->hc_pressure, __ATOMIC_RELAXED);
    if (pressure > 0) {
        __atomic_compare_exchange_n(&q->hc_pressure, &pressure, pressure - 1, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED);
        phase = PH_REGISTER;
    }
    for (int steps = 0; rc == 0; steps++) {
        if (steps > MAX_STEPS || restarts > MAX_RESTARTS) {
            rc = kvq__error(KVQ_ETIMED_OUT, "a high-contention pop made no progress in %d steps",
                            steps);
            break;
        }
        if (phase == PH_WAIT) {
            do_wait(&h, &phase);
            continue;
        }
        if (phase == PH_RESTART) {
            restarts++;
            rc = new_identity(&h);
            phase = PH_SIMPLE;
            continue;
        }
        if (watch != NULL) {
            /* Only the attempt that commits may leave a watch (one that fails holds an error). */
            kvq_watch_destroy(*watch);
            *watch = NULL;
        }
        int next = phase;
        rc = run_step(&h, txn, phase, &next);
        if (rc == 0)
            rc = kvq_txn_commit(txn);
        if (rc == 0) {
            step_committed(&h, phase, next);
            if (next == PH_DONE)
                break;
            kvq_txn_reset(txn);
            phase = next;
            continue;
        }
        if (o->expired || o->settled)
            break;
        /* Lost races are the protocol's next step, not retries. */
        if (rc == KVQ_ENOT_COMMITTED && phase == PH_SIMPLE && !h.registering) {
            int p = __atomic_load_n(&q->hc_pressure, __ATOMIC_RELAXED);
            if (p < PRESSURE_MAX)
                __atomic_compare_exchange_n(&q->hc_pressure, &p, p + PRESSURE_STEP, 0,
                                            __ATOMIC_RELAXED, __ATOMIC_RELAXED);
            kvq_txn_reset(txn);
            rc = 0;
            phase = PH_REGISTER;
            continue;
        }
        if (rc == KVQ_ENOT_COMMITTED && phase == PH_LEAD && h.fulfil_wrote) {
            KVQ__STAT_INC(q, hc_fulfil_lost);
            kvq_txn_reset(txn);
            rc = 0;
            phase = PH_CHECK;
            continue;
        }
        int maybe = kvq__txn_maybe_committed(txn, rc);
        if (maybe) {
            int r2 = kvq__qop_maybe(o);
            if (r2 != 0) {
                rc = r2;
                break;
            }
            if (phase == PH_REGISTER || (phase == PH_SIMPLE && h.registering))
                h.reg_maybe = 1;
        }
        int rc2 = kvq_txn_on_error(txn, rc);
        if (rc2 != 0) {
            rc = kvq__qop_out_of_time(o, txn, rc2);
            if (rc != 0)
                break;
        }
        rc = 0;
        if (maybe && phase == PH_LEAD)
            phase = PH_CHECK;
        if (h.reg_maybe && phase == PH_SIMPLE)
            phase = PH_REGISTER;
    }
    kvq_txn_destroy(txn);
    hc_free(&h);
    return rc;
}

/* ---- upkeep ---------------------------------------------------------------------------------- */

typedef struct sweep_arg {
    kvq_queue *q;
    uint64_t returned;
} sweep_arg;

static int sweep_body(kvq_txn *txn, void *arg)
{
    sweep_arg *a = arg;
    kvq_queue *q = a->q;
    a->returned = 0;
    int64_t rv;
    int rc = kvq_txn_get_read_version(&rv, txn);
    if (rc != 0)
        return rc;
    int64_t timeout_v = q->opts.staging_timeout_ms * KVQ__VERSIONS_PER_MS;
    const kvq_kv *kvs;
    size_t got;
    rc = kvq_txn_get_range(&kvs, &got, NULL, txn, q->hc_rk_lo.data, q->hc_rk_lo.len,
                           q->hc_rk_hi.data, q->hc_rk_hi.len, q->opts.page_size, KVQ_SNAPSHOT);
    kvq_buf res = KVQ_BUF_INIT;
    for (size_t i = 0; rc == 0 && i < got; i++) {
        kvq_bytes r = kvs[i].value;
        if (r.len < 8 + KVQ__RAND_LEN + 1)
            continue;
        int64_t at = (int64_t)kvq__le_get(r.data, 8);
        if (rv - at <= timeout_v)
            continue;
        res.len = 0;
        rc = kvq__qk_hc_slot(&res, pfx(q), "res", r.data + 8);
        kvq_bytes v;
        int present = 0;
        /* Without snapshot: a popper claiming it concurrently makes one of us fail. */
        if (rc == 0)
            rc = kvq_txn_get(&v, &present, txn, res.data, res.len, 0);
        if (rc == 0 && present) {
            /* Back at its original key: its old place in the queue. */
            rc = kvq_txn_set(txn, r.data + 8 + KVQ__RAND_LEN, r.len - 8 - KVQ__RAND_LEN, v.data,
                             v.len);
            if (rc == 0)
                rc = kvq_txn_clear(txn, res.data, res.len);
            a->returned++;
        }
        if (rc == 0)
            rc = kvq__conflict_key(txn, kvs[i].key.data, kvs[i].key.len);
        if (rc == 0)
            rc = kvq_txn_clear(txn, kvs[i].key.data, kvs[i].key.len);
    }
    kvq_buf_dispose(&res);
    if (rc == 0 && a->returned > 0) {
        /* Items are back in the queue: wake the consumers sleeping on the push counter. */
        uint8_t add[8];
        kvq__le64_put(add, a->returned);
        rc = kvq_txn_atomic_op(txn, q->npush.data, q->npush.len, add, 8, KVQ_MUT_ADD);
    }
    if (rc == 0)
        rc =
            kvq_txn_get_range(&kvs, &got, NULL, txn, q->hc_pop_lo.data, q->hc_pop_lo.len,
                              q->hc_pop_hi.data, q->hc_pop_hi.len, q->opts.page_size, KVQ_SNAPSHOT);
    int removed = 0;
    for (size_t i = 0; rc == 0 && i < got; i++) {
        int64_t reg = kvs[i].value.len >= 8 ? (int64_t)kvq__le_get(kvs[i].value.data, 8) : 0;
        if (rv - reg <= timeout_v)
            continue;
        rc = kvq__conflict_key(txn, kvs[i].key.data, kvs[i].key.len);
        if (rc == 0)
            rc = kvq_txn_clear(txn, kvs[i].key.data, kvs[i].key.len);
        removed = 1;
    }
    if (rc == 0 && removed) {
        /* The line moved: wake the waiters so that the new first one leads. */
        static const uint8_t one[8] = { 1 };
        kvq_buf key = KVQ_BUF_INIT;
        rc = kvq__qk_hc_kind(&key, pfx(q), "turn");
        if (rc == 0)
            rc = kvq_txn_atomic_op(txn, key.data, key.len, one, 8, KVQ_MUT_ADD);
        kvq_buf_dispose(&key);
    }
    return rc;
}

static int tick_body(kvq_txn *txn, void *arg)
{
    kvq_queue *q = arg;
    static const uint8_t one[8] = { 1 };
    kvq_buf key = KVQ_BUF_INIT;
    int rc = kvq__qk_hc_kind(&key, pfx(q), "tick");
    if (rc == 0)
        rc = kvq_txn_atomic_op(txn, key.data, key.len, one, sizeof(one), KVQ_MUT_ADD);
    kvq_buf_dispose(&key);
    return rc;
}

int kvq__staging_sweep(kvq_queue *q, uint64_t *returned)
{
    /* Ages are measured in database versions. A read version advances with time, but on the
     * embedded engine one taken while a commit is in flight may be the last commit's version,
     * old after an idle period; so commit a tick first: the sweep's read version is then at
     * least the tick's version, the present. The tick is an atomic add: it never conflicts. */
    int rc = kvq_db_transact(q->db, tick_body, q);
    sweep_arg a = { q, 0 };
    if (rc == 0)
        rc = kvq_db_transact(q->db, sweep_body, &a);
    if (rc == 0) {
        KVQ__STAT_ADD(q, hc_returned, a.returned);
        if (returned != NULL)
            *returned = a.returned;
    }
    return rc;
}

uint64_t kvq__staging_maybe_sweep(kvq_queue *q)
{
    /* When to sweep is this process's decision, so its own clock decides it. */
    int64_t now = kvq__mono_us();
    int64_t due = __atomic_load_n(&q->next_sweep, __ATOMIC_RELAXED);
    if (now < due)
        return 0;
    int64_t next = now + q->opts.staging_timeout_ms * 1000 / 2;
    if (!__atomic_compare_exchange_n(&q->next_sweep, &due, next, 0, __ATOMIC_RELAXED,
                                     __ATOMIC_RELAXED))
        return 0;
    uint64_t back = 0;
    /* Upkeep: a failure here is not the pop's failure; the next sweep tries again. */
    if (kvq__staging_sweep(q, &back) != 0)
        return 0;
    return back;
}

int kvq_queue_recover(uint64_t *out, kvq_queue *q)
{
    if (q == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_queue_recover: queue is NULL");
    if (out != NULL)
        *out = 0;
    if (q->type == KVQ_QUEUE_DURABLE)
        return kvq__error(KVQ_EWRONGTYPE, "durable queues have no staging to recover");
    return kvq__staging_sweep(q, out);
}

/* ---- test hooks ------------------------------------------------------------------------------ */

typedef struct reg_arg {
    hc *h;
} reg_arg;

static int reg_body(kvq_txn *txn, void *arg)
{
    hc *h = ((reg_arg *)arg)->h;
    int rc = kvq_txn_get_read_version(&h->o->rv, txn);
    if (rc == 0 && h->my_index < 0)
        rc = next_waiter_index(h->q, txn, &h->my_index);
    if (rc == 0)
        rc = write_waiter(h, txn);
    return rc;
}

int kvq__staging_register(kvq_queue *q, int end, uint8_t *rand20)
{
    kvq__qop o;
    hc h;
    memset(&h, 0, sizeof(h));
    int rc = kvq__qop_init(&o, q, "r", 1);
    h.q = q;
    h.o = &o;
    h.end = end;
    if (rc == 0)
        rc = new_identity(&h);
    reg_arg a = { &h };
    if (rc == 0)
        rc = kvq_db_transact(q->db, reg_body, &a);
    if (rc == 0)
        memcpy(rand20, h.me, KVQ__RAND_LEN);
    hc_free(&h);
    kvq__qop_free(&o);
    return rc;
}

static int fulfil_body(kvq_txn *txn, void *arg)
{
    hc *h = ((reg_arg *)arg)->h;
    int next;
    int rc = kvq_txn_get_read_version(&h->o->rv, txn);
    if (rc == 0)
        rc = step_lead(h, txn, &next);
    return rc;
}

int kvq__staging_fulfil_once(kvq_queue *q, size_t *served)
{
    kvq__qop o;
    hc h;
    memset(&h, 0, sizeof(h));
    int rc = kvq__qop_init(&o, q, "r", 1);
    h.q = q;
    h.o = &o;
    h.anon = 1;
    reg_arg a = { &h };
    if (rc == 0)
        rc = kvq__qk_hc_kind(&h.turnkey, pfx(q), "turn");
    if (rc == 0)
        rc = kvq_db_transact(q->db, fulfil_body, &a);
    if (rc == 0 && served != NULL)
        *served = h.served;
    hc_free(&h);
    kvq__qop_free(&o);
    return rc;
}

typedef struct collect_arg {
    kvq_queue *q;
    const uint8_t *rand;
    kvq_buf *out;
} collect_arg;

static int collect_body(kvq_txn *txn, void *arg)
{
    collect_arg *a = arg;
    kvq_buf res = KVQ_BUF_INIT, rk = KVQ_BUF_INIT;
    int rc = kvq__qk_hc_slot(&res, pfx(a->q), "res", a->rand);
    if (rc == 0)
        rc = kvq__qk_hc_slot(&rk, pfx(a->q), "rk", a->rand);
    kvq_bytes v;
    int present = 0;
    if (rc == 0)
        rc = kvq_txn_get(&v, &present, txn, res.data, res.len, 0);
    if (rc == 0 && !present)
        rc = KVQ_ENOTFOUND;
    if (rc == 0)
        rc = kvq__buf_set(a->out, v.data, v.len);
    if (rc == 0)
        rc = kvq_txn_clear(txn, res.data, res.len);
    if (rc == 0)
        rc = kvq_txn_clear(txn, rk.data, rk.len);
    kvq_buf_dispose(&res);
    kvq_buf_dispose(&rk);
    return rc;
}

int kvq__staging_collect(kvq_queue *q, const uint8_t *rand20, kvq_buf *out)
{
    collect_arg a = { q, rand20, out };
    return kvq_db_transact(q->db, collect_body, &a);
}
