/* Crash campaign over the work-queue layer in at-least-once mode: Jepsen's total-queue check,
 * with every duplicate delivery explained (TESTING.md S4, issue 7 item 8).
 *
 * Two producer processes push numbered items with kvq_workq_push (every fourth with a dedup
 * key); two consumer processes of two threads each receive with a 300 ms lease, "work" (a few ms,
 * or about one time in thirty longer than the lease) and ack: thread 0 with kvq_workq_ack, thread 1
 * with kvq_workq_ack_txn inside its own retry loop, which lets it log the read version at which
 * its ack was refused. The parent SIGKILLs one or more random processes every 50-250 ms (every
 * tenth cycle: all of them) and starts them again, each with posix_spawn of this binary in a
 * helper mode (no fork of a threaded process).
 *
 * Every process appends its history with plain write(2) (the page cache survives kill -9):
 *   producers   "i w s" before a push, "o w s" after it returned
 *   consumers   "r w s lease deliveries received deadline" after a receive returned,
 *               "A lease" before the ack, then "a lease" (acked) or "x lease rv" (refused with
 *               KVQ_ELEASE_EXPIRED; rv is the refusing read version, or -1 when not known)
 * At the end the parent kills everyone, then drains with acks (waiting for the leases of killed
 * consumers to run out), resolves acks whose outcome nobody logged (killed between "A" and "a")
 * by the lease's settled marker in the database, and checks:
 *   lost         an acknowledged push, or a delivered item, that was never acked        = 0
 *   unexpected   a delivered value that no producer ever tried to push                  = 0
 *   unexplained  a delivery after the item was acked (an item acked twice), a
 *                redelivery at a read version before the previous lease's deadline, two
 *                deliveries with one delivery count, or an ack refused as expired at a
 *                read version before its deadline                                       = 0
 * Every redelivery must follow a delivery that ended without an ack (its consumer was killed, or
 * its ack came too late and was refused), at or after that lease's end: the comparison is of
 * database versions only, so no clock or speed is assumed. Deliveries whose consumer was killed
 * before it could log them show up as gaps in the delivery counts; the check then requires
 * lease_ms of versions per missing delivery.
 *
 * The checker is shown to fail: consumers whose work queue has KVQ_WORKQ_TEST_IGNORE_LEASES
 * return every in-flight item at each upkeep, and the check must count unexplained deliveries.
 *
 * One line per campaign: "crash: workload=workq-at-least-once... lost=0 unexpected=0
 * unexplained=0". KVQ_TEST_SEED (or --seed) replays the random choices (not the interleaving);
 * KVQ_TEST_SCALE multiplies the cycles. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <time.h>
#include <sys/wait.h>

#include "test_queue_common.h"
#include "layers/workq/workq_internal.h"
#include "test_scale.h"

extern char **environ;

#define PRODUCERS 2
#define CONSUMERS 2
#define CTHREADS  2
#define NPROCS    (PRODUCERS + CONSUMERS)
#define LEASE_MS  300
#define LEASE_V   (LEASE_MS * KVQ__VERSIONS_PER_MS)
#define DRAIN_US  120000000LL
#define NO_ITEM   0xffffffffu

static kvq_db *open_db(const char *dir)
{
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.retry_limit = -1;
    o.timeout_ms = 0;
    o.max_retry_delay_ms = 50;
    kvq_db *db = NULL;
    if (kvq_db_open(&db, dir, &o) != 0)
        return NULL;
    return db;
}

static int open_wq(kvq_db *db, kvq_queue_type type, unsigned wflags, kvq_queue **q, kvq_workq **w)
{
    kvq_workq_options wo = KVQ_WORKQ_OPTIONS_INIT;
    wo.lease_ms = LEASE_MS;
    wo.max_deliveries = 0; /* items come back however often their leases are lost */
    int rc = kvq_queue_open(q, db, type, NULL, NULL);
    if (rc == 0)
        rc = kvq_workq_open(w, *q, &wo);
    if (rc == 0)
        rc = kvq_testing_workq_flags(*w, wflags);
    return rc;
}

/* A line of a history (kt_writef: one write(2), which the page cache keeps through kill -9). */
#define log_line(fd, ...)                      \
    do {                                       \
        if (kt_writef((fd), __VA_ARGS__) != 0) \
            _exit(21);                         \
    } while (0)

static void hex16(char out[33], const uint8_t id[16])
{
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", id[i]);
}

static int open_log(const char *dir, const char *name)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
}

/* ---- helper processes ---------------------------------------------------------------------- */

static void producer_main(const char *dir, kvq_queue_type type, uint32_t writer, uint64_t seed)
{
    char name[32];
    snprintf(name, sizeof(name), "p.%u", writer);
    int fd = open_log(dir, name);
    kvq_db *db = open_db(dir);
    kvq_queue *q;
    kvq_workq *w;
    if (fd < 0 || db == NULL || open_wq(db, type, 0, &q, &w) != 0)
        _exit(20);
    kvq__rng rng = { seed * 0x9e3779b97f4a7c15ULL + writer };
    for (uint32_t s = 0;; s++) {
        log_line(fd, "i %u %u\n", writer, s);
        uint8_t v[16];
        size_t vn = tq_value(v, writer, s);
        kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
        if (type == KVQ_QUEUE_PRIORITY)
            po.priority = (int64_t)(s % 3);
        if (s % 4 == 0) {
            po.dedup_key = v; /* unique per item: exactly once through the dedup key */
            po.dedup_len = 8;
        }
        bool enq = false;
        int rc = kvq_workq_push(&enq, w, v, vn, &po);
        if (rc != 0 || enq != 1) {
            /* The retry loop has no limit here: any error is a failure. */
            fprintf(stderr, "producer: %s (%s) enqueued=%d\n", kvq_errname(rc), kvq_last_error(),
                    enq);
            _exit(22);
        }
        log_line(fd, "o %u %u\n", writer, s);
        kvq__sleep_us((int64_t)(kvq__rng_next(&rng) % 8000));
    }
}

typedef struct consumer_arg {
    const char *dir;
    kvq_db *db;
    kvq_workq *w;
    uint32_t tag;
    int thread;
    uint64_t seed;
} consumer_arg;

typedef struct ack_ctx {
    kvq_workq *w;
    kvq_workq_lease *l;
    int64_t rv;
} ack_ctx;

static int ack_body(kvq_txn *txn, void *arg)
{
    ack_ctx *a = arg;
    int rc = kvq_txn_get_read_version(&a->rv, txn);
    if (rc == 0)
        rc = kvq_workq_ack_txn(a->w, txn, a->l);
    return rc;
}

/* How a consumer thread settles: kvq_workq_ack; kvq_workq_ack_txn in its own retry loop; or
 * the consumer runtime's way, the ack of the last item in the transaction of the next receive
 * (kvq__wq_ack_receive, issue 30 item 5). */
enum { SETTLE_PLAIN, SETTLE_TXN, SETTLE_PIGGY };

/* One consumer thread's state across items (the piggybacked ack waits for the next receive). */
typedef struct cstate {
    int mode;
    int pending; /* SETTLE_PIGGY: `held` is done, its ack rides on the next receive */
    kvq_workq_lease held;
    char held_id[33];
} cstate;

/* Logs the outcome of an ack: "a" acked, "x" refused as expired (rv: the refusing read
 * version, or -1). 0, or the error to stop on. */
static int log_ack(int fd, const char *id, int rc, int64_t rv)
{
    if (rc == 0)
        log_line(fd, "a %s\n", id);
    else if (rc == KVQ_ELEASE_EXPIRED)
        log_line(fd, "x %s %" PRId64 "\n", id, rv);
    else
        return rc;
    return 0;
}

/* Receives, logs, works, settles: the loop of one consumer thread (also the parent's drain).
 * Every end of a lease that the thread sees is logged: "a" (acked), "x" (its ack refused: the
 * thread was too slow or paused past the lease), "n" (nacked); a lease whose holder died has
 * no end in the log, and is the last delivery of its log. */
static int consume_one(kvq_db *db,
                       kvq_workq *w,
                       int fd,
                       cstate *st,
                       kvq__rng *rng,
                       int64_t lease_ms,
                       int slow_permille,
                       kvq_buf *b)
{
    kvq_workq_lease l;
    int rc;
    if (st->pending) {
        int ack_rc = 0;
        rc = kvq__wq_ack_receive(b, &l, w, lease_ms, &st->held, &ack_rc);
        st->pending = 0;
        /* The piggybacked ack's refusal has no read version to show. */
        int lrc = log_ack(fd, st->held_id, ack_rc, -1);
        if (lrc != 0)
            return lrc;
    } else {
        rc = kvq_workq_receive(b, &l, w, lease_ms);
    }
    if (rc != 0)
        return rc;
    uint32_t pw = NO_ITEM, ps = NO_ITEM;
    if (tq_parse(b->data, b->len, &pw, &ps) != 0)
        pw = ps = NO_ITEM;
    char id[33];
    hex16(id, l.id);
    log_line(fd, "r %u %u %s %u %" PRId64 " %" PRId64 "\n", pw, ps, id, l.deliveries, l.received,
             l.deadline);
    int nack = 0;
    if (rng != NULL) {
        if (kvq__rng_next(rng) % 150 == 0) {
            log_line(fd, "P %s\n", id);
            kill(getpid(), SIGSTOP); /* until the waker's next SIGCONT */
        }
        uint64_t roll = kvq__rng_next(rng) % 1000;
        if ((int)roll < slow_permille) /* too slow: the ack must fail */
            kvq__sleep_us(LEASE_MS * 1000 + 50000 + (int64_t)(kvq__rng_next(rng) % 150000));
        else
            kvq__sleep_us((int64_t)(kvq__rng_next(rng) % 2000));
        nack = roll >= 960; /* one in 25: the work failed, the item goes back at once */
    }
    if (nack) {
        log_line(fd, "N %s\n", id);
        rc = kvq_workq_nack(w, &l, 0);
        if (rc == 0)
            log_line(fd, "n %s\n", id);
        return rc == 0 ? 0 : log_ack(fd, id, rc, -1);
    }
    log_line(fd, "A %s\n", id);
    if (st->mode == SETTLE_PIGGY) {
        st->held = l;
        memcpy(st->held_id, id, sizeof(id));
        st->pending = 1;
        return 0;
    }
    int64_t rv = -1;
    if (st->mode == SETTLE_TXN) {
        ack_ctx a = { w, &l, -1 };
        rc = kvq_db_transact(db, ack_body, &a);
        rv = a.rv;
    } else {
        rc = kvq_workq_ack(w, &l);
    }
    return log_ack(fd, id, rc, rv);
}

static void *consumer_thread(void *arg)
{
    consumer_arg *c = arg;
    char name[32];
    snprintf(name, sizeof(name), "c.%u.%d", c->tag, c->thread);
    int fd = open_log(c->dir, name);
    if (fd < 0)
        _exit(11);
    kvq__rng rng = { c->seed * 0x9e3779b97f4a7c15ULL + c->tag * 7 + (uint64_t)c->thread + 1 };
    kvq_buf b = KVQ_BUF_INIT;
    /* Thread 1 acks in its own transaction; thread 0 acks alone or, every other incarnation, as
     * the consumer runtime does, with its next receive. */
    cstate st;
    memset(&st, 0, sizeof(st));
    st.mode = c->thread % 2 ? SETTLE_TXN : (c->tag >> 4) % 2 ? SETTLE_PIGGY : SETTLE_PLAIN;
    for (;;) {
        int rc = consume_one(c->db, c->w, fd, &st, &rng, LEASE_MS, 30, &b);
        if (rc == KVQ_ENOTFOUND) {
            kvq__sleep_us(2000);
        } else if (rc != 0) {
            fprintf(stderr, "consumer: %s (%s)\n", kvq_errname(rc), kvq_last_error());
            _exit(12);
        }
    }
    return NULL;
}

/* Pauses: a consumer thread stops its whole process now and then (SIGSTOP, "P" logged first),
 * as an operator's or a debugger's pause does; a waker process forked at the start sends it
 * SIGCONT every WAKE_MS, so that a pause lasts up to that, often past the 300 ms lease. Its
 * in-flight items are then delivered to others, and its late acks are refused. */
#define WAKE_MS 450

static void start_waker(void)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return; /* no waker (fork failed): a paused consumer stays paused until it is killed */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (;;) {
        struct timespec ts = { 0, WAKE_MS * 1000000L };
        nanosleep(&ts, NULL);
        if (getppid() != parent)
            _exit(0);
        kill(parent, SIGCONT);
    }
}

static void
consumer_main(const char *dir, kvq_queue_type type, uint32_t tag, unsigned wflags, uint64_t seed)
{
    start_waker();
    kvq_db *db = open_db(dir);
    kvq_queue *q;
    kvq_workq *w;
    if (db == NULL || open_wq(db, type, wflags, &q, &w) != 0)
        _exit(10);
    pthread_t th[CTHREADS];
    consumer_arg args[CTHREADS];
    for (int i = 0; i < CTHREADS; i++) {
        args[i] = (consumer_arg){ dir, db, w, tag, i, seed };
        if (pthread_create(&th[i], NULL, consumer_thread, &args[i]) != 0)
            _exit(13);
    }
    for (;;)
        pause();
}

/* argv: --wq-crash-child producer|consumer DIR TYPE ID WFLAGS SEED */
static int child_main(char **argv)
{
    const char *dir = argv[3];
    kvq_queue_type type = (kvq_queue_type)atoi(argv[4]);
    uint32_t id = (uint32_t)strtoul(argv[5], NULL, 10);
    unsigned wflags = (unsigned)strtoul(argv[6], NULL, 10);
    uint64_t seed = strtoull(argv[7], NULL, 10);
    if (strcmp(argv[2], "producer") == 0)
        producer_main(dir, type, id, seed);
    consumer_main(dir, type, id, wflags, seed);
    return 1;
}

static kvq_queue_type cur_type;
static unsigned cur_wflags;

/* Process slot i: producers first. Each incarnation gets a new id (its log files' names). */
static pid_t spawn(int slot, void *arg)
{
    uint32_t *incarnation = arg;
    uint32_t id = ((*incarnation)++ << 4) | (uint32_t)slot;
    char a_type[16], a_id[16], a_flags[16], a_seed[32];
    snprintf(a_type, sizeof(a_type), "%d", (int)cur_type);
    snprintf(a_id, sizeof(a_id), "%u", id);
    snprintf(a_flags, sizeof(a_flags), "%u", slot < PRODUCERS ? 0u : cur_wflags);
    snprintf(a_seed, sizeof(a_seed), "%" PRIu64, kt_seed());
    char *args[] = { (char *)kt_prog(),
                     "--wq-crash-child",
                     slot < PRODUCERS ? "producer" : "consumer",
                     tq_dir,
                     a_type,
                     a_id,
                     a_flags,
                     a_seed,
                     NULL };
    fflush(stdout);
    fflush(stderr);
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ), 0);
    return pid;
}

/* ---- the check ----------------------------------------------------------------------------- */

typedef struct delivery {
    uint64_t item; /* writer << 32 | seq */
    uint8_t lid[16];
    uint32_t deliv;
    int64_t received, deadline;
    int ack_invoked, acked, expired;
    int nack_invoked, nacked;
    int followed; /* its thread logged another delivery after it (so its holder lived on) */
    int64_t ack_rv;
    int acked_final;  /* acked, or an unlogged ack that the settled marker shows committed */
    int nacked_final; /* nacked, or an unlogged nack that the settled marker shows committed */
} delivery;

typedef struct history {
    delivery *d;
    size_t nd, capd;
    kt_ids inv, ok; /* producers' histories: pushes invoked, pushes returned */
    size_t pauses;  /* consumers' pauses (SIGSTOP of their process) */
} history;

static int parse_hex16(uint8_t out[16], const char *s)
{
    if (strlen(s) != 32)
        return -1;
    for (int i = 0; i < 16; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1)
            return -1;
        out[i] = (uint8_t)v;
    }
    return 0;
}

/* A consumer's log: each "A", "a", "x" follows the "r" of its own delivery (one thread). A torn
 * last line (killed mid-write cannot tear a write(2), but be safe) ends the parse. */
static void read_consumer_log(history *h, const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    char line[256];
    delivery *cur = NULL;
    while (fgets(line, sizeof(line), f) != NULL) {
        char hex[40];
        if (line[0] == 'r') {
            unsigned w, s, dl;
            int64_t rcv, dead;
            if (sscanf(line, "r %u %u %39s %u %" SCNd64 " %" SCNd64, &w, &s, hex, &dl, &rcv,
                       &dead) != 6)
                break;
            if (h->nd == h->capd) {
                h->capd = h->capd ? h->capd * 2 : 4096;
                h->d = realloc(h->d, h->capd * sizeof(*h->d));
                assert_non_null(h->d);
            }
            if (cur != NULL)
                cur->followed = 1;
            cur = &h->d[h->nd++];
            memset(cur, 0, sizeof(*cur));
            cur->item = (uint64_t)w << 32 | s;
            if (parse_hex16(cur->lid, hex) != 0)
                fail_msg("%s: a bad lease id in \"%s\"", path, line);
            cur->deliv = dl;
            cur->received = rcv;
            cur->deadline = dead;
            cur->ack_rv = -1;
            continue;
        }
        uint8_t lid[16];
        int64_t rv = -1;
        if (sscanf(line, "%*c %39s %" SCNd64, hex, &rv) < 1 || parse_hex16(lid, hex) != 0)
            break;
        if (cur == NULL || memcmp(lid, cur->lid, 16) != 0)
            fail_msg("%s: \"%s\" does not follow its receive", path, line);
        if (line[0] == 'P')
            h->pauses++;
        else if (line[0] == 'A')
            cur->ack_invoked = 1;
        else if (line[0] == 'N')
            cur->nack_invoked = 1;
        else if (line[0] == 'n')
            cur->nacked = 1;
        else if (line[0] == 'a')
            cur->acked = 1;
        else if (line[0] == 'x') {
            cur->expired = 1;
            cur->ack_rv = rv;
        }
    }
    fclose(f);
}

static int cmp_delivery(const void *a, const void *b)
{
    const delivery *x = a, *y = b;
    if (x->item != y->item)
        return x->item < y->item ? -1 : 1;
    if (x->deliv != y->deliv)
        return x->deliv < y->deliv ? -1 : 1;
    return x->received < y->received ? -1 : x->received > y->received;
}

/* Acks whose outcome nobody logged: did they commit? Their lease's settled marker says. The
 * logged acks' markers are looked up too, which shows that the lookup finds what it should. */
typedef struct marker_ctx {
    kvq_queue *q;
    history *h;
    size_t info, recovered, logged_missing;
} marker_ctx;

static int marker_body(kvq_txn *txn, void *arg)
{
    marker_ctx *c = arg;
    c->info = c->recovered = c->logged_missing = 0;
    kvq_buf k = KVQ_BUF_INIT;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < c->h->nd; i++) {
        delivery *d = &c->h->d[i];
        d->acked_final = d->acked;
        d->nacked_final = d->nacked;
        if ((!d->ack_invoked && !d->nack_invoked) || d->expired)
            continue;
        kvq_tuple_elem e[4] = { kvq_tuple_str("wq"), kvq_tuple_str("s"),
                                kvq_tuple_int(d->received / KVQ__BUCKET_VERSIONS),
                                kvq_tuple_bytes(d->lid, 16) };
        k.len = 0;
        rc = kvq_buf_append(&k, c->q->bk.data, c->q->bk.len);
        if (rc == 0)
            rc = kvq_tuple_pack_buf(&k, e, 4);
        kvq_bytes v;
        int present = 0;
        if (rc == 0)
            rc = kvq_txn_get(&v, &present, txn, k.data, k.len, KVQ_SNAPSHOT);
        if (d->nack_invoked) {
            /* A nack: its marker says 'n' once it committed. */
            if (!d->nacked && rc == 0 && present && v.len == 1 && v.data[0] == 'n')
                d->nacked_final = 1;
            continue;
        }
        int marked = rc == 0 && present && v.len == 1 && v.data[0] == 'a';
        if (d->acked) {
            c->logged_missing += !marked;
            continue;
        }
        c->info++;
        if (marked) {
            d->acked_final = 1;
            c->recovered++;
        }
    }
    kvq_buf_dispose(&k);
    return rc;
}

typedef struct result {
    size_t kills, invoked, acked, push_recovered, deliveries, items, consumer_acks, redelivered,
        explained, ex_killed, ex_late, ex_nacked, ex_unlogged, late_acks, ack_info, ack_recovered, drained,
        lost, unexpected, unexplained, count_mismatch;
} result;

/* The first few violations are printed; the counts say how many there were. */
static int report_budget;

static void report(const char *fmt, ...)
{
    if (report_budget <= 0)
        return;
    if (--report_budget == 0) {
        fputs("(further violations are counted, not printed)\n", stderr);
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

static void check(history *h, result *r)
{
    report_budget = 11;
    kt_ids_sort(&h->inv);
    kt_ids_sort(&h->ok);
    qsort(h->d, h->nd, sizeof(*h->d), cmp_delivery);
    r->invoked = h->inv.n;
    r->acked = h->ok.n;
    r->deliveries = h->nd;
    kt_ids done = { 0 }; /* items acked at least once */
    for (size_t i = 0; i < h->nd;) {
        size_t j = i;
        while (j < h->nd && h->d[j].item == h->d[i].item)
            j++;
        const delivery *first = &h->d[i];
        r->items++;
        int known = kt_ids_has(&h->inv, first->item);
        if (!known) {
            r->unexpected++;
            i = j;
            continue;
        }
        if (!kt_ids_has(&h->ok, first->item))
            r->push_recovered++;
        /* Deliveries before the first logged one: consumers killed before logging them. */
        if (first->deliv > 1) {
            r->redelivered += first->deliv - 1;
            r->explained += first->deliv - 1;
            r->ex_unlogged += first->deliv - 1;
        }
        size_t acks = 0;
        for (size_t k = i; k < j; k++) {
            const delivery *d = &h->d[k];
            acks += (size_t)d->acked_final;
            r->consumer_acks += (size_t)d->acked_final;
            if (d->expired) {
                r->late_acks++;
                /* Refused as expired: at a read version at or after the deadline. */
                if (d->ack_rv >= 0 && d->ack_rv < d->deadline) {
                    r->unexplained++;
                    report("unexplained: item %u/%u delivery %u refused as expired at version "
                           "%" PRId64 ", before its deadline %" PRId64 "\n",
                           (unsigned)(d->item >> 32), (unsigned)d->item, d->deliv, d->ack_rv,
                           d->deadline);
                }
            }
            if (k == i)
                continue;
            const delivery *p = &h->d[k - 1];
            uint32_t steps = d->deliv - p->deliv;
            if (d->deliv == p->deliv) {
                r->redelivered++;
                r->unexplained++;
                report("unexplained: item %u/%u delivered twice as delivery %u\n",
                       (unsigned)(d->item >> 32), (unsigned)d->item, d->deliv);
                continue;
            }
            r->redelivered += steps;
            /* The previous lease's end must be known: an ack (then no redelivery may follow), a
             * nack, a refused ack (too slow or paused past the lease: the lease had ended), or
             * the death of its holder (its log ends with that delivery). */
            const char *why = NULL;
            if (p->acked_final)
                why = "after it was acked";
            else if (!p->nacked_final && !p->expired && p->followed)
                why = "although its previous lease ended with no cause (its holder lived on, "
                      "and neither acked nor nacked it nor was refused)";
            else if (!p->nacked_final &&
                     d->received < p->deadline + (int64_t)(steps - 1) * LEASE_V)
                why = "before the previous lease ended";
            if (why != NULL) {
                r->unexplained += steps;
                report("unexplained: item %u/%u delivery %u (received at %" PRId64 ") %s "
                       "(delivery %u, deadline %" PRId64 ")\n",
                       (unsigned)(d->item >> 32), (unsigned)d->item, d->deliv, d->received, why,
                       p->deliv, p->deadline);
                continue;
            }
            r->explained += steps;
            r->ex_unlogged += steps - 1;
            if (p->nacked_final)
                r->ex_nacked++;
            else if (p->expired)
                r->ex_late++;
            else
                r->ex_killed++;
        }
        if (acks == 0) {
            r->lost++;
            report("lost: item %u/%u delivered %zu times, never acked\n",
                   (unsigned)(first->item >> 32), (unsigned)first->item, j - i);
        } else {
            kt_ids_push(&done, first->item);
            if (acks > 1) {
                r->unexplained += acks - 1;
                report("unexplained: item %u/%u acked %zu times\n", (unsigned)(first->item >> 32),
                       (unsigned)first->item, acks);
            }
        }
        i = j;
    }
    /* done is in item order already (deliveries are sorted by item). */
    for (size_t i = 0; i < h->ok.n; i++) {
        if (kt_ids_has(&done, h->ok.v[i]))
            continue;
        /* Never delivered at all (a delivered one without an ack is counted above). */
        size_t lo = 0, hi = h->nd;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (h->d[mid].item < h->ok.v[i])
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo == h->nd || h->d[lo].item != h->ok.v[i]) {
            r->lost++;
            report("lost: acknowledged push %u/%u never delivered\n", (unsigned)(h->ok.v[i] >> 32),
                   (unsigned)h->ok.v[i]);
        }
    }
    kt_ids_free(&done);
}

/* ---- at rest, every count agrees (issue 32 item 12) ---------------------------------------- */

static int count_item(kvq_bytes value, int64_t priority, void *payload)
{
    (void)value;
    (void)priority;
    (*(uint64_t *)payload)++;
    return 0;
}

static int count_listed(const kvq_workq_item *item, void *payload)
{
    (void)item;
    (*(uint64_t *)payload)++;
    return 0;
}

/* No process runs: every count that kvq prints about the queue must agree. The leases of the
 * killed consumers are let run out and made ready first (kvq_workq_recover), so that nothing
 * moves between the reads: then len (npush - npop of a durable queue, the items counted on a
 * priority queue: what `kvq len` and `kvq stats` print), the items listed (`kvq list`), the
 * metrics' ready count and the listings of in-flight and delayed items against the metrics'
 * counters. Returns how many disagreed (each printed). */
static size_t check_at_rest(kvq_queue_type type, const char *when)
{
    kvq_db *db = open_db(tq_dir);
    assert_non_null(db);
    kvq_queue *q;
    kvq_workq *w;
    assert_int_equal(open_wq(db, type, 0, &q, &w), 0);
    kvq__sleep_us((LEASE_MS + 100) * 1000);
    assert_ok(kvq_workq_recover(NULL, w));
    uint64_t len = 0, listed = 0, inflight = 0, delayed = 0;
    kvq_workq_stats m;
    assert_ok(kvq_queue_len(&len, q));
    assert_ok(kvq_queue_iterate(q, count_item, &listed));
    assert_ok(kvq_workq_get_stats(&m, w));
    assert_ok(kvq_workq_list_inflight(w, count_listed, &inflight));
    assert_ok(kvq_workq_list_delayed(w, count_listed, &delayed));
    uint64_t len2 = 0;
    assert_ok(kvq_queue_len(&len2, q));
    size_t bad = 0;
    printf("# at rest %s: len=%llu listed=%llu ready=%lld inflight=%lld/%llu listed "
           "delayed=%lld/%llu listed dead=%lld\n",
           when, (unsigned long long)len, (unsigned long long)listed, (long long)m.ready,
           (long long)m.inflight, (unsigned long long)inflight, (long long)m.delayed,
           (unsigned long long)delayed, (long long)m.dead);
    bad += len != listed;
    bad += len2 != len;
    bad += m.ready < 0 || (uint64_t)m.ready != len;
    bad += m.inflight < 0 || (uint64_t)m.inflight != inflight;
    bad += m.delayed < 0 || (uint64_t)m.delayed != delayed;
    if (bad > 0)
        fprintf(stderr, "counts disagree at rest %s (replay: %s --seed %" PRIu64 ")\n", when,
                kt_prog(), kt_seed());
    kvq_workq_close(w);
    kvq_queue_close(q);
    kvq_db_close(db);
    return bad;
}

/* ---- the campaign -------------------------------------------------------------------------- */

static result campaign(kvq_queue_type type, const char *name, int cycles, unsigned wflags)
{
    cur_type = type;
    cur_wflags = wflags;
    result r;
    memset(&r, 0, sizeof(r));
    uint32_t incarnation = 1;
    pid_t pids[NPROCS];
    /* A process that had exited by itself when the campaign ends fails it too. */
    r.kills = tq_crash_cycles(name, cycles, pids, NPROCS, spawn, &incarnation, 1, "p.|c.");
    r.count_mismatch = check_at_rest(type, "after the kills");

    /* Drain with acks on a correct handle, with long leases; the leases of killed consumers
     * run out meanwhile and their items come back. */
    kvq_db *db = open_db(tq_dir);
    assert_non_null(db);
    kvq_queue *q;
    kvq_workq *w;
    assert_int_equal(open_wq(db, type, 0, &q, &w), 0);
    int fd = open_log(tq_dir, "c.drain");
    assert_true(fd >= 0);
    kvq_buf b = KVQ_BUF_INIT;
    int64_t end = kvq__mono_us() + DRAIN_US;
    kvq_workq_stats m;
    for (;;) {
        cstate st;
        memset(&st, 0, sizeof(st));
        st.mode = SETTLE_PLAIN;
        int rc = consume_one(db, w, fd, &st, NULL, 60000, 0, &b);
        if (rc == 0) {
            r.drained++;
            continue;
        }
        if (rc != KVQ_ENOTFOUND)
            fail_msg("drain: %s (%s)", kvq_errname(rc), kvq_last_error());
        assert_ok(kvq_workq_get_stats(&m, w));
        if (m.ready == 0 && m.inflight == 0 && m.delayed == 0)
            break;
        if (kvq__mono_us() > end)
            fail_msg("drain: still %" PRId64 " ready and %" PRId64 " in flight after %lld s "
                     "(replay: %s --seed %" PRIu64 ")",
                     m.ready, m.inflight, DRAIN_US / 1000000, kt_prog(), kt_seed());
        assert_ok(kvq_workq_recover(NULL, w));
        kvq__sleep_us(20000);
    }
    close(fd);
    kvq_buf_dispose(&b);
    /* The counters survived the kills: nothing left anywhere. */
    uint64_t len = 1;
    assert_ok(kvq_queue_len(&len, q));
    assert_int_equal(len, 0);
    assert_int_equal(m.dead, 0);
    r.count_mismatch += check_at_rest(type, "after the drain");

    /* The histories. */
    history h;
    memset(&h, 0, sizeof(h));
    char path[400];
    for (uint32_t inc = 1; inc < incarnation; inc++)
        for (uint32_t slot = 0; slot < NPROCS; slot++) {
            uint32_t id = inc << 4 | slot;
            if (slot < PRODUCERS) {
                snprintf(path, sizeof(path), "%s/p.%u", tq_dir, id);
                kt_history_read(path, &h.inv, &h.ok);
                continue;
            }
            for (int t = 0; t < CTHREADS; t++) {
                snprintf(path, sizeof(path), "%s/c.%u.%d", tq_dir, id, t);
                read_consumer_log(&h, path);
            }
        }
    snprintf(path, sizeof(path), "%s/c.drain", tq_dir);
    read_consumer_log(&h, path);
    marker_ctx mc = { q, &h, 0, 0, 0 };
    assert_ok(kvq_db_transact(db, marker_body, &mc));
    if (mc.logged_missing > 0)
        fail_msg("%zu acked leases have no settled marker: the lookup that resolves unlogged "
                 "acks is wrong",
                 mc.logged_missing);
    r.ack_info = mc.info;
    r.ack_recovered = mc.recovered;
    kvq_workq_close(w);
    kvq_queue_close(q);
    kvq_db_close(db);
    check(&h, &r);

    printf("crash: workload=%s cycles=%d kills=%zu invoked=%zu acked=%zu info=%zu recovered=%zu "
           "deliveries=%zu items=%zu consumer_acks=%zu redelivered=%zu explained=%zu "
           "explained_killed=%zu explained_late_ack=%zu explained_nacked=%zu explained_unlogged=%zu "
           "late_acks=%zu "
           "ack_info=%zu ack_recovered=%zu drained=%zu lost=%zu unexpected=%zu unexplained=%zu "
           "counts_disagreeing=%zu pauses=%zu broken_engine=%s seed=%" PRIu64 "\n",
           name, cycles, r.kills, r.invoked, r.acked, r.invoked - r.acked, r.push_recovered,
           r.deliveries, r.items, r.consumer_acks, r.redelivered, r.explained, r.ex_killed,
           r.ex_late, r.ex_nacked, r.ex_unlogged, r.late_acks, r.ack_info, r.ack_recovered, r.drained, r.lost,
           r.unexpected, r.unexplained, r.count_mismatch, h.pauses,
           wflags ? "workq_ignore_leases" : "no", kt_seed());
    fflush(stdout);
    free(h.d);
    kt_ids_free(&h.inv);
    kt_ids_free(&h.ok);
    tq_rmdir();
    return r;
}

static void check_clean(result r)
{
    assert_int_equal(r.count_mismatch, 0);
    assert_true(r.acked > 0);
    assert_true(r.consumer_acks > 0);
    assert_int_equal(r.lost, 0);
    assert_int_equal(r.unexpected, 0);
    assert_int_equal(r.unexplained, 0);
    assert_int_equal(r.redelivered, r.explained);
}

static void test_durable(void **state)
{
    (void)state;
    check_clean(
        campaign(KVQ_QUEUE_DURABLE, "workq-at-least-once-durable", (int)kvq_test_scaled(20), 0));
}

static void test_priority(void **state)
{
    (void)state;
    check_clean(
        campaign(KVQ_QUEUE_PRIORITY, "workq-at-least-once-priority", (int)kvq_test_scaled(10), 0));
}

/* The check can fail: consumers whose upkeep ignores leases deliver items again early. How
 * often they do depends on how far the consumers get before the final drain, which a loaded
 * machine (a sanitizer build beside other tests) can squeeze to almost nothing: up to three
 * campaigns run, and the check must catch the broken queue in one of them. */
static void test_checker_catches_broken_leases(void **state)
{
    (void)state;
    result r = { 0 };
    for (int round = 0; round < 3 && r.unexplained == 0; round++) {
        r = campaign(KVQ_QUEUE_DURABLE, "workq-at-least-once-broken", 10,
                     KVQ_WORKQ_TEST_IGNORE_LEASES);
        printf("# the at-least-once check %s the broken work queue (%zu unexplained)\n",
               r.unexplained ? "caught" : "MISSED", r.unexplained);
    }
    assert_true(r.unexplained > 0);
}

int main(int argc, char **argv)
{
    if (argc == 8 && strcmp(argv[1], "--wq-crash-child") == 0)
        return child_main(argv);
    kt_seed_init(argc, argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durable),
        cmocka_unit_test(test_priority),
        cmocka_unit_test(test_checker_catches_broken_leases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
