/* Internals of the queue layers, shared by their source files and reachable by tests. The files:
 *
 *   keys.c          key builders and parsers (the layouts below), key helpers
 *   queue_items.c   what every queue operation shares: checks, reading the head, taking items
 *   queue.c         handles, peeks, lengths, clear, delete, iteration
 *   queue_pop.c     pops (combined across a handle's threads), watches, consume, the source
 *   queue_push.c    pushes
 *   idempotency.c   markers and result slots of the convenience forms, tokens, their retry loop
 *   staging.c       high-contention pops (waiters and hand-overs)
 *   named.c         named queues and their stored settings
 *   producer.c      the batching producer
 *   lease_items.c, batch_lease.c, due.c   the states of a work queue's items and their upkeep
 *                   (leases_internal.h)
 *
 * Keys (prefix = the queue's subspace prefix):
 *   FIFO item       prefix + pack((index, rand20))
 *   priority item   prefix + pack((priority, count, rand20))
 *   durable         prefix + pack((b"npush",)), prefix + pack((b"npop",)),
 *                   prefix + pack((b"val", versionstamp96))
 *   bookkeeping     prefix + 0xFF + pack(...):
 *     ("m", bucket, id16)          push marker (value empty)
 *     ("r", bucket, id16)          pop result slot (value: 4-byte LE attempt number)
 *     ("hc", "pop", index, rand20) high-contention waiter (value: 8-byte LE registration
 *                                  version, then 1 byte: 0 pops the head/min, 1 the max)
 *     ("hc", "res", rand20)        value handed to that waiter
 *     ("hc", "rk", rand20)         8-byte LE version of the hand-over, rand20, the item's key
 *     ("hc", "tick")               8-byte LE counter bumped before a sweep (moves versions on)
 *     ("npush",)                   FIFO and priority: 8-byte LE count of the pushes kvq made
 *                                  (atomic ADD), the key their waiting consumers watch
 */
#ifndef KVQ_QUEUE_INTERNAL_H
#define KVQ_QUEUE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "engine/engine_layers.h"
#include "kvq/queue.h"
#include "kvq/workq.h" /* kvq_workq, the settings of kvq__q_due_gate */
#include "kvq/consumer.h"
#include "util/bytes.h"
#include "util/util.h"

#define KVQ__RAND_LEN 20
#define KVQ__ID_LEN   16
/* Database versions per idempotency bucket: one minute (versions advance ~1e6 per second). */
#define KVQ__BUCKET_VERSIONS 60000000LL
/* Versions per millisecond, for the staging timeout. */
#define KVQ__VERSIONS_PER_MS 1000LL
#define KVQ__MAX_K           10000

/* Which end a pop takes. */
enum { KVQ__END_MIN = 0, KVQ__END_MAX = 1 };

struct kvq_queue {
    kvq_db *db;
    kvq_queue_type type;
    kvq_queue_options opts;
    kvq_buf prefix;
    /* Item range [items_lo, items_hi). FIFO and priority: the keys whose first element is an
     * integer (type codes 0x0b..0x1d), so that queues in nested subspaces ("Q", "x") never
     * look like items. Durable: prefix + (b"val",) + 00 .. + FF. */
    kvq_buf items_lo, items_hi;
    kvq_buf val_prefix; /* durable: prefix + pack((b"val",)) */
    /* Durable: prefix + (b"npush",) and (b"npop",). FIFO and priority: npush is the push
     * counter bk + ("npush",) that waiting consumers watch; npop is unused. */
    kvq_buf npush, npop;
    kvq_buf bk;                   /* prefix + 0xFF */
    kvq_buf hc_pop_lo, hc_pop_hi; /* waiters */
    kvq_buf hc_rk_lo, hc_rk_hi;   /* hand-over records */
    int64_t bucket_versions;      /* KVQ__BUCKET_VERSIONS; tests shrink it */
    int64_t pruned_bucket;        /* atomic: the last bucket this handle pruned at */
    int64_t next_sweep;           /* atomic: monotonic µs after which a pop sweeps staging */
    int hc_pressure;              /* atomic: recent simple-path losses (high contention) */
    int pop_pressure;             /* atomic: recent lost races of durable convenience pops */
    int is_named;                 /* opened by kvq_queue_open_named: its stored settings */
    kvq_queue_settings named;
    kvq_queue_stats stats; /* atomic counters */
    /* Durable and priority queues: where a work queue keeps its leases' expiry index and its
     * delayed items (bk + pack(("wq", "x")) and ("wq", "y"); workq_internal.h), which every
     * reader looks at first (kvq__q_due_gate). */
    kvq_buf wq_x, wq_y;
    /* atomic: max deliveries of the work queue last opened over this handle (-1: none), with
     * which a plain reader makes ended leases ready (due.c). */
    int64_t wq_max_deliveries;
    /* Single-item convenience pops of FIFO and priority queues by many threads of this handle
     * are combined (queue_pop.c): one thread pops for all that are waiting, in one transaction. */
    pthread_mutex_t cmb_mu;
    pthread_cond_t cmb_cv;
    int cmb_ready;                 /* mu and cv initialised */
    int cmb_leader;                /* a thread is serving a batch */
    struct kvq__cmb_req *cmb_head; /* waiting requests, in arrival order */
    uint64_t cmb_batches;          /* atomic: batches of more than one pop served */
    uint64_t cmb_items;            /* atomic: items those batches popped */
};

/* A borrowed view of a buffer's bytes. */
static inline kvq_bytes kvq__buf_bytes(const kvq_buf *b)
{
    kvq_bytes r = { b->data, b->len };
    return r;
}

/* Appends one byte to b. */
static inline int kvq__buf_put_byte(kvq_buf *b, uint8_t c)
{
    return kvq_buf_append(b, &c, 1);
}

#define KVQ__STAT_INC(q, field) __atomic_add_fetch(&(q)->stats.field, 1, __ATOMIC_RELAXED)
#define KVQ__STAT_ADD(q, field, n) \
    __atomic_add_fetch(&(q)->stats.field, (uint64_t)(n), __ATOMIC_RELAXED)

/* The database's KVQ_TEST_* flags (engine.c): KVQ_TEST_DROP_IDEMPOTENCY_MARKER makes the
 * convenience forms skip their markers, to show that the tests' checkers catch it. */
unsigned int kvq__db_test_flags(const kvq_db *db);

/* ---- key builders (keys.c) ---------------------------------------------------------------- */

/* Each appends to out (callers reset out->len first when they want a fresh key). */
int kvq__qk_fifo_item(kvq_buf *out, kvq_bytes prefix, int64_t index, const uint8_t *rand20);
/* The part of a FIFO or priority item's key after the queue's prefix (the tuple (index, rand20)
 * or (priority, count, rand20)), appended to out: a batch writes the prefix once and each item's
 * tail after it, without packing the tuple through the generic codec. */
int kvq__qk_fifo_item_tail(kvq_buf *out, int64_t index, const uint8_t *rand20);
int kvq__qk_prio_item_tail(kvq_buf *out, int64_t priority, int64_t count, const uint8_t *rand20);
int kvq__qk_prio_item(
    kvq_buf *out, kvq_bytes prefix, int64_t priority, int64_t count, const uint8_t *rand20);
/* prefix + pack_vs((b"val", incomplete versionstamp with user version uv)) + 4-byte LE offset. */
int kvq__qk_durable_push(kvq_buf *out, kvq_bytes prefix, uint16_t uv);
/* Rewrites the user version of a key kvq__qk_durable_push built (the two bytes after its stamp,
 * found by the offset at its end): a batch packs one key and changes only that per item. */
void kvq__qk_durable_push_set_uv(kvq_buf *key, uint16_t uv);
/* prefix + pack((b"npush",)) or (b"npop",). */
int kvq__qk_counter(kvq_buf *out, kvq_bytes prefix, const char *name);
/* prefix + 0xFF + pack((name,)), name a string: a FIFO or priority queue's push counter. */
int kvq__qk_bk_counter(kvq_buf *out, kvq_bytes prefix, const char *name);
/* prefix + pack((priority,)) (the range of one priority is that + 00 .. + FF). */
int kvq__qk_prio_prefix(kvq_buf *out, kvq_bytes prefix, int64_t priority);
/* A new id for a marker, result slot or token: the clock's microseconds (8 bytes, big-endian)
 * then 8 random bytes. Ids made later sort later, so a bucket's markers are appended at its end
 * rather than scattered through it (one B-tree leaf written per push, seldom split). */
int kvq__q_new_id(uint8_t id[KVQ__ID_LEN]);
/* prefix + 0xFF + pack((tag, bucket, id16)), tag "m" or "r". */
int kvq__qk_mark(
    kvq_buf *out, kvq_bytes prefix, const char *tag, int64_t bucket, const uint8_t *id16);
/* prefix + 0xFF + pack((tag,)) and prefix + 0xFF + pack((tag, bucket)): pruning bounds. */
int kvq__qk_mark_bound(kvq_buf *out, kvq_bytes prefix, const char *tag, int64_t bucket, int with_b);
/* prefix + 0xFF + pack(("hc", "pop", index, rand20)). */
int kvq__qk_hc_waiter(kvq_buf *out, kvq_bytes prefix, int64_t index, const uint8_t *rand20);
/* prefix + 0xFF + pack(("hc", kind, rand20)), kind "res" or "rk". */
int kvq__qk_hc_slot(kvq_buf *out, kvq_bytes prefix, const char *kind, const uint8_t *rand20);
/* prefix + 0xFF + pack(("hc", kind)): the range of kind is that + 00 .. + FF. */
int kvq__qk_hc_kind(kvq_buf *out, kvq_bytes prefix, const char *kind);

/* Parsers of a key's part after the prefix. */
/* FIFO item: (index, rand). KVQ_ETUPLE when the key is not a FIFO item. */
int kvq__qk_parse_fifo(const uint8_t *rest, size_t len, int64_t *index);
/* Priority item: (priority, count, rand). */
int kvq__qk_parse_prio(const uint8_t *rest, size_t len, int64_t *priority, int64_t *count);
/* Waiter key suffix after prefix + 0xFF: ("hc", "pop", index, rand20). */
int kvq__qk_parse_waiter(const uint8_t *rest, size_t len, int64_t *index, uint8_t *rand20);

/* ---- key helpers (keys.c) ------------------------------------------------------------------ */

/* Appends key + 0x00 (the first key after key) into out (reset first). */
int kvq__key_after(kvq_buf *out, const uint8_t *key, size_t len);
/* Adds a read-conflict range on exactly one key. */
int kvq__conflict_key(kvq_txn *txn, const uint8_t *key, size_t len);

/* ---- shared by every queue operation (queue_items.c) ---------------------------------------- */

/* KVQ_EINVAL when q is NULL (fn names the caller in the message). */
int kvq__q_check(const kvq_queue *q, const char *fn);
/* KVQ_EINVAL when q or txn is NULL. */
int kvq__q_check_txn(const kvq_queue *q, kvq_txn *txn, const char *fn);
/* KVQ_EWRONGTYPE: fn does not apply to q's type. */
int kvq__q_wrong_type(const kvq_queue *q, const char *fn);
/* KVQ_EINVAL unless end is KVQ_QUEUE_MIN or KVQ_QUEUE_MAX. */
int kvq__q_check_end(kvq_queue_end end, const char *fn);
/* KVQ_EINVAL or KVQ_EVALUE_TOO_LARGE for a value no queue takes. */
int kvq__q_check_value(const uint8_t *value, size_t len);
/* Reads the first (end MIN) or last (end MAX) up to `limit` items. */
int kvq__q_head(kvq_queue *q,
                kvq_txn *txn,
                int end,
                int limit,
                unsigned int flags,
                const kvq_kv **kvs,
                size_t *count);
/* Pops up to k items from one end of a FIFO/priority queue, or the head of a durable one: a
 * snapshot read, read conflicts on exactly the items taken, and, when the queue is empty, on the
 * whole item range (KVQ_ENOTFOUND). */
int kvq__q_pop_k_end(
    kvq_queue *q, kvq_txn *txn, int end, size_t k, kvq_bytes *outs, int64_t *prio, size_t *n);
/* kvq__q_pop_k_end's flags: an empty queue adds no read conflict (a convenience pop that found
 * nothing returns nothing, and its watch holds the push counter of its read version). */
#define KVQ__POP_EMPTY_NO_CONFLICT 1u
/* Where the items a durable pop took lay: keys [lo, hi), n items (0: it took none). */
typedef struct kvq__q_taken {
    kvq_buf lo, hi;
    size_t n;
} kvq__q_taken;
/* kvq__q_pop_k_end with flags; taken (may be NULL) receives where the items taken lay. */
int kvq__q_pop_k_end_ex(kvq_queue *q,
                        kvq_txn *txn,
                        int end,
                        size_t k,
                        kvq_bytes *outs,
                        int64_t *prio,
                        size_t *n,
                        unsigned int flags,
                        kvq__q_taken *taken);
/* A durable queue's pop under contention: up to k consecutive items starting at a position
 * chosen by seed among the first spread * k (at most 4,096, or k), read as a snapshot, with read
 * conflicts on exactly the items taken, so that concurrent consumers rarely take the same ones.
 * taken (may be NULL) receives where they lay. */
int kvq__q_pop_spread(kvq_queue *q,
                      kvq_txn *txn,
                      size_t k,
                      size_t spread,
                      uint64_t seed,
                      kvq_bytes *outs,
                      size_t *n,
                      kvq__q_taken *taken);
/* The priority of an item key of a priority queue (0 for other types or on a parse error). */
int64_t kvq__q_key_priority(const kvq_queue *q, const uint8_t *key, size_t len);
/* How many runs of k items the spread pop chooses among (from the handle's pressure). */
size_t kvq__q_pop_spread_width(kvq_queue *q);
/* Notes the outcome rc of a durable convenience pop's commit in the handle's pressure: a commit
 * lowers it. A failure does not raise it: kvq__q_pop_lost_race decides whether it was a race. */
void kvq__q_pop_pressure_note(kvq_queue *q, int rc);
/* At the start of the attempt after a durable pop's commit failed with 1020, which took the
 * items *taken: raises the handle's pressure when another pop has taken some of them since (a
 * snapshot read at txn's read version), that is, when the race was lost to another consumer.
 * A conflict with anything else (a pusher, the pruning of markers, a fault injected for tests)
 * leaves it as it is, so that a consumer alone keeps popping the head. *lost receives which. */
int kvq__q_pop_lost_race(kvq_queue *q, kvq_txn *txn, const kvq__q_taken *taken, int *lost);
/* The count a new item of this priority takes in the priority recipe: 1 + the last count of
 * that priority, read with a snapshot read (so pushes never conflict), or 0 for the first. */
int kvq__q_prio_next_count(int64_t *out, kvq_queue *q, kvq_txn *txn, int64_t priority);

/* ---- idempotent operations (idempotency.c) ------------------------------------------------ */

/* The values one attempt of a pop took (copied out of its transaction). */
typedef struct kvq__qres {
    uint32_t attempt;
    size_t n;
    kvq_buf *vals; /* cap entries */
    int64_t prio;  /* priority of vals[0] */
    uint64_t npush_seen;
} kvq__qres;

/* One convenience operation across its attempts and transactions. */
typedef struct kvq__qop {
    kvq_queue *q;
    const char *tag; /* "m" (push marker) or "r" (pop result slot) */
    uint8_t id[KVQ__ID_LEN];
    int64_t bucket;   /* fixed by the first attempt's read version; -1 before */
    uint32_t attempt; /* number of the current attempt, from 1 */
    int maybe;        /* an earlier attempt may have committed */
    int expired;      /* the window passed while maybe */
    int checking;     /* the attempts ran out of time while maybe: only look for the marker */
    int settled;      /* checking found that no attempt committed, and fenced them */
    int found;        /* this attempt found the marker/slot of an earlier commit */
    uint32_t found_attempt;
    int64_t rv;       /* read version of the current attempt */
    size_t cap;       /* values per result */
    kvq__qres cur;    /* what the current attempt popped */
    kvq__qres *cands; /* results of attempts that may have committed */
    size_t ncands;
    /* Called by kvq__qop_run with each attempt's commit outcome (NULL: nothing); the durable
     * queue's pops note their contention with it (kvq__q_pop_pressure_note). */
    void (*after_commit)(kvq_queue *q, int rc);
    int last_rc; /* the outcome of the previous attempt (its body's error, or its commit's) */
    /* Each attempt reads early (kvq__txn_early_read: a pop hands nothing out before its commit,
     * or before its settling when it ends without one): set by the convenience pops. */
    int early;
} kvq__qop;

int kvq__qop_init(kvq__qop *o, kvq_queue *q, const char *tag, size_t cap);
void kvq__qop_free(kvq__qop *o);
/* Starts an attempt in txn: takes the read version, fixes the bucket, prunes old buckets now and
 * then and, after a maybe-committed attempt, reads the marker/slot (o->found). Returns 0 or an
 * error (KVQ_ECOMMIT_UNKNOWN_RESULT with o->expired set when the window has passed). */
int kvq__qop_begin(kvq__qop *o, kvq_txn *txn);
/* Writes the marker (push) or the result slot with the attempt number (pop). */
int kvq__qop_mark(kvq__qop *o, kvq_txn *txn);
/* Copies n values into o->cur for this attempt. */
int kvq__qop_keep(kvq__qop *o, const kvq_bytes *vals, size_t n, int64_t prio);
/* After an attempt failed with a maybe-committed error: keeps o->cur as a candidate. */
int kvq__qop_maybe(kvq__qop *o);
/* After kvq_txn_on_error gave up with err: when time ran out after an attempt that may have
 * committed, resets txn, sets o->checking and returns 0 (run one more attempt); else an error.
 * With o->checking set, kvq__qop_begin settles the operation instead of starting an attempt:
 * when no attempt committed it fences them (writes the marker, which every attempt holds a
 * read conflict on, so an attempt still in flight fails), commits, sets o->settled and returns
 * 1031. */
int kvq__qop_out_of_time(kvq__qop *o, kvq_txn *txn, int err);
/* After success: the result that committed (o->cur, or the candidate the slot names), or NULL
 * (KVQ_ECOMMIT_UNKNOWN_RESULT recorded) when the slot names an attempt we do not have. */
kvq__qres *kvq__qop_result(kvq__qop *o);
/* Moves a result's values into caller buffers. */
int kvq__qres_deliver(kvq__qres *r, kvq_buf *outs);
/* One attempt of a convenience operation in txn, which runs the attempt's protocol itself:
 * kvq__qop_begin first (and nothing more when o->found), kvq__qop_mark once it took effect (the
 * pops, whose marks depend on what they took and whose found results arm watches). */
typedef int (*kvq__qop_body)(kvq_txn *txn, kvq__qop *o, void *arg);
/* The retry loop of the convenience forms: kvq_txn_run's, plus the bookkeeping of attempts that
 * may have committed. */
int kvq__qop_run(kvq__qop *o, kvq__qop_body body, void *arg);
/* The writes of one attempt of a marked write (a convenience push), nothing else. */
typedef int (*kvq__qop_write)(kvq_txn *txn, kvq_queue *q, void *arg);
/* kvq__qop_run for a marked write: each attempt begins (kvq__qop_begin), stops there when an
 * earlier attempt's marker is found (it committed), else calls write and writes the marker. */
int kvq__qop_run_marked(kvq__qop *o, kvq__qop_write write, void *arg);

/* ---- high-contention staging (staging.c) --------------------------------------------------- */

/* A convenience pop in high-contention mode (end MIN/MAX). Fills o's result; 0 or an error.
 * With watch non-NULL (consume), an empty queue is not an error: o's result holds no value and
 * *watch a watch on the push counter set in the transaction that found it empty. */
int kvq__staging_pop(kvq_queue *q, kvq__qop *o, int end, kvq_watch **watch);
/* Runs the staging upkeep when it is due (every staging_timeout/2 of this process's clock);
 * returns the number of items it put back. */
uint64_t kvq__staging_maybe_sweep(kvq_queue *q);
/* Runs the staging upkeep now. */
int kvq__staging_sweep(kvq_queue *q, uint64_t *returned);
/* Test hooks: register a waiter for end (rand20 receives its id); run one fulfil transaction
 * on behalf of nobody (*served receives the number of waiters served). */
int kvq__staging_register(kvq_queue *q, int end, uint8_t *rand20);
int kvq__staging_fulfil_once(kvq_queue *q, size_t *served);
/* Test hook: collects the result of waiter rand20 (KVQ_ENOTFOUND when none). */
int kvq__staging_collect(kvq_queue *q, const uint8_t *rand20, kvq_buf *out);

/* ---- due items of work queues, for every reader (due.c) ------------------------------------ */

/* Called by every reader of a durable or priority queue in its transaction, before it reads
 * (FIFO queues: a no-op). Two snapshot reads at txn's read version look for a delayed item that
 * is due or a lease that has ended (no conflict range, nothing written). When one is found, it
 * and every other that is due are made ready in transactions of their own (with w's keys and
 * settings, or, when w is NULL, with the max deliveries q holds: wq_max_deliveries), and
 * KVQ_ENOT_COMMITTED is returned: the caller's retry loop then reads again at a newer version,
 * which sees them ready. A read-only database, where nothing can be moved, is read as it is
 * stored (0). */
int kvq__q_due_gate(kvq_queue *q, kvq_workq *w, kvq_txn *txn);

#endif /* KVQ_QUEUE_INTERNAL_H */
