/* Conformance: the serializability oracle of TESTING.md (S2), in small.
 *
 * Workers (threads of this process, and threads of child processes that open the database
 * themselves) run random transactions over 12 hot keys: gets and range reads (limits, reverse,
 * snapshot or not), sets, clears, clear_ranges, atomic adds, and read-modify-write increments of
 * a counter without atomics. Each transaction also writes a log record under a versionstamped
 * key, in the same transaction, whose value lists its operations in order with what every read
 * returned. Only committed transactions leave a record, and the versionstamps order them as
 * they committed.
 *
 * The checker replays the records in versionstamp order into an in-memory model, starting from
 * the seeded state: every non-snapshot read must equal the model just before that transaction
 * plus its own earlier writes, and the final database must equal the model. Independently, the
 * counter must equal the number of committed increments.
 *
 * The checker is shown to fail: the same workload on a handle opened with the test-only knob
 * KVQ_TEST_SKIP_CONFLICT_CHECK (and increments that pause between read and write) must produce
 * anomalies. A checker that cannot fail is not a test.
 *
 * $KVQ_TEST_SEED replays the random choices (not the thread interleaving); $KVQ_TEST_SCALE
 * multiplies the duration of the mixed workload. Prints "oracle: ... anomalies=0 ...". */
#include "conformance.h"
#include "model.h"
#include "test_scale.h"

#include <pthread.h>

#define HOT_PFX "cf/ser/h/"
#define LOG_PFX "cf/ser/log/"
#define CNT_KEY "cf/ser/c/cnt"
#define NHOT    12

enum { MODE_MIXED = 0, MODE_INCREMENTS = 1 };

/* Log record opcodes. */
enum {
    OP_GET = 'G',   /* flags, key, present, value */
    OP_RANGE = 'R', /* flags, limit, begin, end, count, rows */
    OP_SET = 'S',   /* key, value */
    OP_CLEAR = 'C', /* key */
    OP_CLRNG = 'X', /* begin, end */
    OP_ADD = 'A',   /* key, operand */
};

struct wstats {
    uint64_t committed, conflicts, increments, other_retryable, failed;
};

struct enc {
    uint8_t b[16384];
    size_t n;
    int overflow;
};

static void put_byte(struct enc *e, uint8_t c)
{
    if (e->n < sizeof(e->b))
        e->b[e->n++] = c;
    else
        e->overflow = 1;
}

static void put_bytes(struct enc *e, const uint8_t *p, size_t n)
{
    put_byte(e, (uint8_t)n);
    for (size_t i = 0; i < n; i++)
        put_byte(e, p[i]);
}

static size_t hot_key(uint8_t *out, unsigned i)
{
    return (size_t)sprintf((char *)out, HOT_PFX "k%02u", i);
}

/* A range bound: a hot key, a key between hot keys, or an end of the hot range. */
static size_t hot_bound(cf_rng *r, uint8_t *out)
{
    uint32_t c = cf_below(r, 12);
    if (c == 0)
        return (size_t)sprintf((char *)out, HOT_PFX);
    if (c == 1) {
        size_t n = (size_t)sprintf((char *)out, HOT_PFX);
        out[n] = 0xff;
        return n + 1;
    }
    size_t n = hot_key(out, cf_below(r, NHOT));
    if (c == 2) /* just after a hot key */
        out[n++] = 0x00;
    return n;
}

struct worker {
    const char *url;
    uint64_t seed;
    int id;
    int mode;
    int64_t dur_ms;
    unsigned test_flags;
    kvq_db *db;
    struct wstats st;
    char err[256];
};

/* One transaction's body: random operations, logged into e. Returns a kvq error or 0;
 * *incr counts the increments it made. */
static int body(struct worker *w, cf_rng *r, kvq_txn *t, struct enc *e, int *incr)
{
    int nops = w->mode == MODE_INCREMENTS ? 1 : 1 + (int)cf_below(r, 6);
    *incr = 0;
    for (int i = 0; i < nops && !e->overflow; i++) {
        uint32_t pick = w->mode == MODE_INCREMENTS ? 99 : cf_below(r, 100);
        uint8_t k[64], k2[64], v[8];
        size_t kn, k2n;
        int rc;
        if (pick < 25) { /* get */
            unsigned flags = cf_chance(r, 25) ? KVQ_SNAPSHOT : 0;
            kn = hot_key(k, cf_below(r, NHOT));
            kvq_bytes got;
            int present;
            if ((rc = kvq_txn_get(&got, &present, t, k, kn, flags)) != 0)
                return rc;
            put_byte(e, OP_GET);
            put_byte(e, (uint8_t)flags);
            put_bytes(e, k, kn);
            put_byte(e, (uint8_t)present);
            put_bytes(e, got.data, present ? got.len : 0);
        } else if (pick < 45) { /* get_range */
            unsigned flags =
                (cf_chance(r, 25) ? KVQ_SNAPSHOT : 0) | (cf_chance(r, 50) ? KVQ_REVERSE : 0);
            int limit = (int)cf_below(r, 5);
            kn = hot_bound(r, k);
            k2n = hot_bound(r, k2);
            cf_bytes_order(k, &kn, k2, &k2n);
            const kvq_kv *kvs;
            size_t count;
            if ((rc = kvq_txn_get_range(&kvs, &count, NULL, t, k, kn, k2, k2n, limit, flags)) != 0)
                return rc;
            put_byte(e, OP_RANGE);
            put_byte(e, (uint8_t)flags);
            put_byte(e, (uint8_t)limit);
            put_bytes(e, k, kn);
            put_bytes(e, k2, k2n);
            put_byte(e, (uint8_t)count);
            for (size_t j = 0; j < count; j++) {
                put_bytes(e, kvs[j].key.data, kvs[j].key.len);
                put_bytes(e, kvs[j].value.data, kvs[j].value.len);
            }
        } else if (pick < 65) { /* set: a value unique to this worker */
            kn = hot_key(k, cf_below(r, NHOT));
            cf_put_le(v, ((uint64_t)w->id << 48) | (cf_rand(r) & 0xffffffffffffull), 8);
            if ((rc = kvq_txn_set(t, k, kn, v, 8)) != 0)
                return rc;
            put_byte(e, OP_SET);
            put_bytes(e, k, kn);
            put_bytes(e, v, 8);
        } else if (pick < 72) { /* clear */
            kn = hot_key(k, cf_below(r, NHOT));
            if ((rc = kvq_txn_clear(t, k, kn)) != 0)
                return rc;
            put_byte(e, OP_CLEAR);
            put_bytes(e, k, kn);
        } else if (pick < 76) { /* clear_range of two or three neighbours */
            unsigned a = cf_below(r, NHOT);
            kn = hot_key(k, a);
            k2n = hot_key(k2, a + 1 + cf_below(r, 2));
            if ((rc = kvq_txn_clear_range(t, k, kn, k2, k2n)) != 0)
                return rc;
            put_byte(e, OP_CLRNG);
            put_bytes(e, k, kn);
            put_bytes(e, k2, k2n);
        } else if (pick < 90) { /* atomic add */
            kn = hot_key(k, cf_below(r, NHOT));
            cf_put_le(v, 1 + cf_below(r, 1000), 8);
            if ((rc = kvq_txn_atomic_op(t, k, kn, v, 8, KVQ_MUT_ADD)) != 0)
                return rc;
            put_byte(e, OP_ADD);
            put_bytes(e, k, kn);
            put_bytes(e, v, 8);
        } else { /* increment the counter by reading and writing it */
            kvq_bytes got;
            int present;
            if ((rc = kvq_txn_get(&got, &present, t, K(CNT_KEY), 0)) != 0)
                return rc;
            uint64_t n = present ? cf_le64(got.data, got.len) : 0;
            put_byte(e, OP_GET);
            put_byte(e, 0);
            put_bytes(e, (const uint8_t *)CNT_KEY, strlen(CNT_KEY));
            put_byte(e, (uint8_t)present);
            put_bytes(e, got.data, present ? got.len : 0);
            if (w->mode == MODE_INCREMENTS)
                cf_sleep_ms(1); /* widen the window between read and write */
            cf_put_le(v, n + 1, 8);
            if ((rc = kvq_txn_set(t, K(CNT_KEY), v, 8)) != 0)
                return rc;
            put_byte(e, OP_SET);
            put_bytes(e, (const uint8_t *)CNT_KEY, strlen(CNT_KEY));
            put_bytes(e, v, 8);
            (*incr)++;
        }
    }
    return 0;
}

static void run_worker(struct worker *w)
{
    cf_rng r = { w->seed ^ ((uint64_t)(w->id + 1) * 0x9e3779b97f4a7c15ull) };
    kvq_txn *t = NULL;
    int rc = kvq_txn_create(&t, w->db);
    if (rc != 0) {
        snprintf(w->err, sizeof(w->err), "txn_create: %s", kvq_errname(rc));
        w->st.failed = 1;
        return;
    }
    struct enc *e = malloc(sizeof(*e));
    if (e == NULL) {
        w->st.failed = 1;
        kvq_txn_destroy(t);
        return;
    }
    uint8_t logkey[64];
    size_t lp = strlen(LOG_PFX);
    memcpy(logkey, LOG_PFX, lp);
    memset(logkey + lp, 0, 10);
    cf_put_le(logkey + lp + 10, lp, 4);
    int64_t deadline = cf_now_ns() + w->dur_ms * 1000000;
    while (cf_now_ns() < deadline) {
        kvq_txn_reset(t);
        e->n = 0;
        e->overflow = 0;
        int incr = 0;
        rc = body(w, &r, t, e, &incr);
        if (rc == 0 && e->overflow) {
            snprintf(w->err, sizeof(w->err), "log record overflow");
            w->st.failed = 1;
            break;
        }
        if (rc == 0)
            rc = kvq_txn_set_versionstamped_key(t, logkey, lp + 14, e->b, e->n);
        if (rc == 0)
            rc = kvq_txn_commit(t);
        if (rc == 0) {
            w->st.committed++;
            w->st.increments += (uint64_t)incr;
        } else if (rc == KVQ_ENOT_COMMITTED) {
            w->st.conflicts++;
        } else if (kvq_error_retryable_not_committed(rc)) {
            w->st.other_retryable++;
        } else {
            /* 1021 cannot happen without injected faults; anything else is a failure. */
            snprintf(w->err, sizeof(w->err), "worker %d: %d %s (%s)", w->id, rc, kvq_errname(rc),
                     kvq_last_error());
            w->st.failed = 1;
            break;
        }
    }
    free(e);
    kvq_txn_destroy(t);
}

static void *worker_thread(void *arg)
{
    run_worker(arg);
    return NULL;
}

/* Runs `threads` workers with ids from first_id on one handle; sums their stats. */
static int run_workers(kvq_db *db,
                       const char *url,
                       uint64_t seed,
                       int first_id,
                       int threads,
                       int mode,
                       int64_t dur_ms,
                       struct wstats *sum,
                       char *err,
                       size_t errcap)
{
    struct worker w[8];
    pthread_t th[8];
    memset(sum, 0, sizeof(*sum));
    if (threads > 8)
        threads = 8;
    for (int i = 0; i < threads; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].url = url;
        w[i].seed = seed;
        w[i].id = first_id + i;
        w[i].mode = mode;
        w[i].dur_ms = dur_ms;
        w[i].db = db;
        if (pthread_create(&th[i], NULL, worker_thread, &w[i]) != 0)
            return -1;
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        sum->committed += w[i].st.committed;
        sum->conflicts += w[i].st.conflicts;
        sum->increments += w[i].st.increments;
        sum->other_retryable += w[i].st.other_retryable;
        sum->failed += w[i].st.failed;
        if (w[i].st.failed && err[0] == '\0')
            snprintf(err, errcap, "%s", w[i].err);
    }
    return 0;
}

static kvq_testing_options worker_options(unsigned test_flags)
{
    kvq_testing_options o = KVQ_TESTING_OPTIONS_INIT;
    o.flags = test_flags;
    return o;
}

/* Child role: URL SEED FIRST_ID THREADS MODE DUR_MS TEST_FLAGS FD. Writes its struct wstats to
 * FD and exits 0, or 1 when a worker failed. */
static int role_workers(int argc, char **argv)
{
    if (argc != 9)
        return 2;
    const char *url = argv[1];
    uint64_t seed = strtoull(argv[2], NULL, 10);
    int first = atoi(argv[3]), threads = atoi(argv[4]), mode = atoi(argv[5]);
    int64_t dur = atoll(argv[6]);
    unsigned flags = (unsigned)strtoul(argv[7], NULL, 10);
    int fd = atoi(argv[8]);
    kvq_testing_options o = worker_options(flags);
    kvq_db *db = NULL;
    int rc = kvq_db_open_testing(&db, url, NULL, &o);
    if (rc != 0) {
        fprintf(stderr, "child: open %s: %s (%s)\n", url, kvq_errname(rc), kvq_last_error());
        return 3;
    }
    struct wstats sum;
    char err[256] = "";
    if (run_workers(db, url, seed, first, threads, mode, dur, &sum, err, sizeof(err)) != 0)
        return 4;
    kvq_db_close(db);
    if (err[0] != '\0')
        fprintf(stderr, "child: %s\n", err);
    if (cf_write_all(fd, &sum, sizeof(sum)) != 0)
        return 5;
    return sum.failed ? 1 : 0;
}

static const struct cf_role roles[] = { { "workers", role_workers } };

/* ---- the checker --------------------------------------------------------------------------- */

struct check {
    long txns, reads_checked, anomalies, final_mismatches;
    char first[400];
    cf_model model;
    size_t idx[64];
};

struct dec {
    const uint8_t *p;
    size_t n, at;
    int bad;
};

static uint8_t get_byte(struct dec *d)
{
    if (d->at >= d->n) {
        d->bad = 1;
        return 0;
    }
    return d->p[d->at++];
}

static const uint8_t *get_bytes(struct dec *d, size_t *len)
{
    *len = get_byte(d);
    if (d->bad || d->at + *len > d->n) {
        d->bad = 1;
        *len = 0;
        return (const uint8_t *)"";
    }
    const uint8_t *r = d->p + d->at;
    d->at += *len;
    return r;
}

static void anomaly(struct check *c, const char *fmt, ...)
{
    c->anomalies++;
    if (c->first[0] != '\0')
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->first, sizeof(c->first), fmt, ap);
    va_end(ap);
}

/* Replays one committed transaction's record. Returns -1 if the record is malformed. */
static int replay(struct check *c, const uint8_t *rec, size_t n)
{
    struct dec d = { rec, n, 0, 0 };
    while (d.at < d.n && !d.bad) {
        uint8_t op = get_byte(&d);
        size_t kn, k2n, vn;
        const uint8_t *k, *k2, *v;
        switch (op) {
        case OP_GET: {
            uint8_t flags = get_byte(&d);
            k = get_bytes(&d, &kn);
            uint8_t present = get_byte(&d);
            v = get_bytes(&d, &vn);
            if (d.bad)
                return -1;
            if (flags & KVQ_SNAPSHOT)
                break;
            c->reads_checked++;
            const cf_mentry *me = cf_model_find(&c->model, k, kn);
            if ((me != NULL) != (present != 0) ||
                (me != NULL && cf_bytes_cmp(me->v, me->vn, v, vn) != 0))
                anomaly(c, "txn %ld: get %.*s saw %s%" PRIu64 ", serial order says %s%" PRIu64,
                        c->txns, (int)kn, (const char *)k, present ? "" : "absent/",
                        present ? cf_le64(v, vn) : 0, me ? "" : "absent/",
                        me ? cf_le64(me->v, me->vn) : 0);
            break;
        }
        case OP_RANGE: {
            uint8_t flags = get_byte(&d), limit = get_byte(&d);
            k = get_bytes(&d, &kn);
            k2 = get_bytes(&d, &k2n);
            size_t count = get_byte(&d);
            int more;
            size_t want = 0;
            int checked = !(flags & KVQ_SNAPSHOT);
            if (checked) {
                if (c->model.n > 64)
                    return -1;
                want = cf_model_range(&c->model, k, kn, k2, k2n, limit, (flags & KVQ_REVERSE) != 0,
                                      c->idx, &more);
                c->reads_checked++;
            }
            int bad = checked && want != count;
            for (size_t j = 0; j < count; j++) {
                const uint8_t *rk = get_bytes(&d, &kn);
                const uint8_t *rv = get_bytes(&d, &vn);
                if (d.bad)
                    return -1;
                if (checked && !bad) {
                    const cf_mentry *me = &c->model.e[c->idx[j]];
                    if (cf_bytes_cmp(me->k, me->kn, rk, kn) != 0 ||
                        cf_bytes_cmp(me->v, me->vn, rv, vn) != 0)
                        bad = 1;
                }
            }
            if (bad)
                anomaly(c,
                        "txn %ld: get_range [%.*s, %.*s) limit %u%s returned %zu rows that "
                        "differ from serial order (%zu rows)",
                        c->txns, (int)kn, (const char *)k, (int)k2n, (const char *)k2, limit,
                        flags & KVQ_REVERSE ? " reverse" : "", count, want);
            break;
        }
        case OP_SET:
            k = get_bytes(&d, &kn);
            v = get_bytes(&d, &vn);
            if (d.bad || cf_model_set(&c->model, k, kn, v, vn) != 0)
                return -1;
            break;
        case OP_CLEAR:
            k = get_bytes(&d, &kn);
            if (d.bad)
                return -1;
            cf_model_clear(&c->model, k, kn);
            break;
        case OP_CLRNG:
            k = get_bytes(&d, &kn);
            k2 = get_bytes(&d, &k2n);
            if (d.bad)
                return -1;
            cf_model_clear_range(&c->model, k, kn, k2, k2n);
            break;
        case OP_ADD:
            k = get_bytes(&d, &kn);
            v = get_bytes(&d, &vn);
            if (d.bad || cf_model_atomic(&c->model, k, kn, KVQ_MUT_ADD, v, vn) != 0)
                return -1;
            break;
        default:
            return -1;
        }
    }
    return d.bad ? -1 : 0;
}

/* Reads the log in versionstamp order, replays it over `initial`, and compares the final state
 * of the hot keys and the counter with the database. */
static void check_history(kvq_db *db, const cf_model *initial, struct check *c)
{
    memset(c, 0, sizeof(*c));
    assert_int_equal(cf_model_copy(&c->model, initial), 0);
    kvq_txn *t = NULL;
    assert_ok(kvq_txn_create(&t, db));
    uint8_t b[64], e[64];
    size_t bn = strlen(LOG_PFX);
    memcpy(b, LOG_PFX, bn);
    memcpy(e, LOG_PFX, bn);
    e[bn] = 0xff;
    const kvq_kv *kvs;
    size_t n;
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, b, bn, e, bn + 1, 0, KVQ_SNAPSHOT));
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && cf_bytes_cmp(kvs[i - 1].key.data, kvs[i - 1].key.len, kvs[i].key.data,
                                  kvs[i].key.len) >= 0)
            fail_msg("log keys out of order at %zu", i);
        if (replay(c, kvs[i].value.data, kvs[i].value.len) != 0)
            fail_msg("log record %zu is malformed", i);
        c->txns++;
    }
    /* The final state: hot keys and counter. */
    size_t hn = strlen(HOT_PFX);
    memcpy(b, HOT_PFX, hn);
    memcpy(e, HOT_PFX, hn);
    e[hn] = 0xff;
    assert_ok(kvq_txn_get_range(&kvs, &n, NULL, t, b, hn, e, hn + 1, 0, KVQ_SNAPSHOT));
    int more;
    size_t want = cf_model_range(&c->model, b, hn, e, hn + 1, 0, 0, c->idx, &more);
    if (want != n)
        c->final_mismatches++;
    for (size_t i = 0; i < n && i < want; i++) {
        const cf_mentry *me = &c->model.e[c->idx[i]];
        if (cf_bytes_cmp(me->k, me->kn, kvs[i].key.data, kvs[i].key.len) != 0 ||
            cf_bytes_cmp(me->v, me->vn, kvs[i].value.data, kvs[i].value.len) != 0)
            c->final_mismatches++;
    }
    kvq_bytes v;
    int present;
    assert_ok(kvq_txn_get(&v, &present, t, K(CNT_KEY), KVQ_SNAPSHOT));
    const cf_mentry *me = cf_model_find(&c->model, (const uint8_t *)CNT_KEY, strlen(CNT_KEY));
    if ((me != NULL) != (present != 0) ||
        (me != NULL && cf_bytes_cmp(me->v, me->vn, v.data, v.len) != 0))
        c->final_mismatches++;
    kvq_txn_destroy(t);
}

static uint64_t read_counter(kvq_db *db)
{
    uint8_t v[8] = { 0 };
    long n = cf_read_key(db, K(CNT_KEY), v, 8);
    return n < 0 ? 0 : cf_le64(v, (size_t)n);
}

/* Seeds the hot keys and returns the model of that state. */
static void seed_state(kvq_db *db, cf_rng *r, cf_model *m)
{
    cf_clear_prefix(db, "ser");
    kvq_txn *t = NULL;
    assert_ok(kvq_txn_create(&t, db));
    m->n = 0;
    for (unsigned i = 0; i < NHOT; i++) {
        if (cf_chance(r, 30))
            continue;
        uint8_t k[64], v[8];
        size_t kn = hot_key(k, i);
        cf_put_le(v, cf_below(r, 100), 8);
        assert_ok(kvq_txn_set(t, k, kn, v, 8));
        assert_int_equal(cf_model_set(m, k, kn, v, 8), 0);
    }
    assert_ok(kvq_txn_commit(t));
    kvq_txn_destroy(t);
}

/* Runs the workload: `procs` child processes with `threads` threads each, and `here` threads
 * in this process. */
static void run_workload(const char *url,
                         uint64_t seed,
                         int mode,
                         int here,
                         int procs,
                         int threads,
                         int64_t dur_ms,
                         unsigned test_flags,
                         struct wstats *total)
{
    kvq_testing_options o = worker_options(test_flags);
    kvq_db *db = cf_open_url_testing(url, NULL, &o);
    memset(total, 0, sizeof(*total));
    pid_t pids[4];
    int fds[4];
    for (int p = 0; p < procs; p++) {
        int pfd[2];
        assert_int_equal(pipe(pfd), 0);
        char a_seed[32], a_first[24], a_threads[24], a_mode[24], a_dur[32], a_flags[24], a_fd[24];
        snprintf(a_seed, sizeof(a_seed), "%" PRIu64, seed);
        snprintf(a_first, sizeof(a_first), "%d", (p + 1) * 16);
        snprintf(a_threads, sizeof(a_threads), "%d", threads);
        snprintf(a_mode, sizeof(a_mode), "%d", mode);
        snprintf(a_dur, sizeof(a_dur), "%" PRId64, dur_ms);
        snprintf(a_flags, sizeof(a_flags), "%u", test_flags);
        snprintf(a_fd, sizeof(a_fd), "%d", pfd[1]);
        const char *args[] = {
            url, a_seed, a_first, a_threads, a_mode, a_dur, a_flags, a_fd, NULL
        };
        pids[p] = cf_spawn("workers", args);
        close(pfd[1]);
        fds[p] = pfd[0];
    }
    char err[256] = "";
    struct wstats mine;
    assert_int_equal(run_workers(db, url, seed, 0, here, mode, dur_ms, &mine, err, sizeof(err)), 0);
    kvq_db_close(db);
    *total = mine;
    for (int p = 0; p < procs; p++) {
        struct wstats cs;
        int got = cf_read_all(fds[p], &cs, sizeof(cs));
        close(fds[p]);
        cf_wait_ok(pids[p], 60 + (int)(dur_ms / 1000), "worker process");
        assert_int_equal(got, 0);
        total->committed += cs.committed;
        total->conflicts += cs.conflicts;
        total->increments += cs.increments;
        total->other_retryable += cs.other_retryable;
        total->failed += cs.failed;
    }
    if (err[0] != '\0')
        fail_msg("%s", err);
    assert_int_equal(total->failed, 0);
}

/* test_flags: 0, or KVQ_TEST_EARLY_READ_ALL (every transaction reads early: early lock
 * release met by transactions of every shape, which must stay as serializable). */
static void serializable_history(const char *name, unsigned test_flags)
{
    uint64_t seed = cf_seed(name);
    cf_rng r = { seed };
    kvq_db *db = cf_open(NULL);
    cf_model initial = { NULL, 0, 0 };
    seed_state(db, &r, &initial);
    struct wstats tot;
    /* 4 threads here and 2 processes of 2 threads. */
    run_workload(cf_url, seed, MODE_MIXED, 4, 2, 2, kvq_test_scaled(4000), test_flags, &tot);
    struct check *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    check_history(db, &initial, c);
    uint64_t counter = read_counter(db);
    print_message("%" PRIu64 " commits, %" PRIu64 " conflicts, %" PRIu64
                  " other retries; %ld records replayed, %ld reads checked, %ld anomalies, "
                  "%ld final mismatches; counter %" PRIu64 " / %" PRIu64 " increments\n",
                  tot.committed, tot.conflicts, tot.other_retryable, c->txns, c->reads_checked,
                  c->anomalies, c->final_mismatches, counter, tot.increments);
    printf("oracle: engine=%s txns=%" PRIu64 " committed=%ld 1020=%" PRIu64
           " other_retryable=%" PRIu64 " reads_checked=%ld anomalies=%ld final_mismatches=%ld "
           "lost_increments=%" PRId64 " broken_engine=no early_reads=%s seed=%" PRIu64 "\n",
           kvq_db_get_engine(db), tot.committed + tot.conflicts + tot.other_retryable, c->txns,
           tot.conflicts, tot.other_retryable, c->reads_checked, c->anomalies, c->final_mismatches,
           (int64_t)(tot.increments - counter), test_flags ? "all" : "no", seed);
    fflush(stdout);
    if (c->anomalies != 0)
        fail_msg("%ld anomalies (seed %" PRIu64 "); the first: %s", c->anomalies, seed, c->first);
    assert_int_equal(c->final_mismatches, 0);
    assert_int_equal((uint64_t)c->txns, tot.committed);
    assert_int_equal(counter, tot.increments);
    /* The run must have been contended, or it proved nothing. */
    assert_true(tot.committed >= 100);
    assert_true(tot.conflicts > 0);
    assert_true(c->reads_checked > 0);
    cf_model_free(&c->model);
    free(c);
    cf_model_free(&initial);
    kvq_db_close(db);
}

static void test_serializable_history(void **state)
{
    (void)state;
    serializable_history("test_serializable_history", 0);
}

/* Early lock release (docs/engine.md, "Early reads"), which only kvq's pops use, on every
 * transaction of the workload. */
static void test_serializable_history_early_reads(void **state)
{
    (void)state;
    serializable_history("test_serializable_history_early_reads", KVQ_TEST_EARLY_READ_ALL);
}

/* The same checker must catch a broken engine: with the conflict check switched off, racing
 * read-modify-write increments lose updates and the replay finds reads that no serial order
 * explains. */
static void test_checker_catches_broken_engine(void **state)
{
    (void)state;
    uint64_t seed = cf_seed("test_checker_catches_broken_engine");
    cf_rng r = { seed };
    kvq_db *db = cf_open(NULL);
    cf_model initial = { NULL, 0, 0 };
    seed_state(db, &r, &initial);
    struct wstats tot;
    run_workload(cf_url, seed, MODE_INCREMENTS, 2, 1, 2, 1500, KVQ_TEST_SKIP_CONFLICT_CHECK, &tot);
    struct check *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    check_history(db, &initial, c);
    uint64_t counter = read_counter(db);
    print_message("broken engine: %" PRIu64 " commits, %" PRIu64
                  " conflicts; %ld anomalies (first: %s); counter %" PRIu64 " / %" PRIu64
                  " increments\n",
                  tot.committed, tot.conflicts, c->anomalies, c->first, counter, tot.increments);
    printf("oracle: engine=%s txns=%" PRIu64 " committed=%ld 1020=%" PRIu64
           " reads_checked=%ld anomalies=%ld final_mismatches=%ld lost_increments=%" PRId64
           " broken_engine=skip_conflict_check seed=%" PRIu64 "\n",
           kvq_db_get_engine(db), tot.committed + tot.conflicts + tot.other_retryable, c->txns,
           tot.conflicts, c->reads_checked, c->anomalies, c->final_mismatches,
           (int64_t)(tot.increments - counter), seed);
    fflush(stdout);
    assert_int_equal(tot.conflicts, 0);
    if (c->anomalies == 0)
        fail_msg("the checker found no anomaly with the conflict check off (%" PRIu64
                 " commits): it cannot fail",
                 tot.committed);
    assert_true(counter < tot.increments);
    cf_model_free(&c->model);
    free(c);
    cf_model_free(&initial);
    kvq_db_close(db);
}

/* The same increments with the conflict check on: no update is lost. */
static void test_increments_not_lost(void **state)
{
    (void)state;
    uint64_t seed = cf_seed("test_increments_not_lost");
    cf_rng r = { seed };
    kvq_db *db = cf_open(NULL);
    cf_model initial = { NULL, 0, 0 };
    seed_state(db, &r, &initial);
    struct wstats tot;
    run_workload(cf_url, seed, MODE_INCREMENTS, 2, 1, 2, 1500, 0, &tot);
    struct check *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    check_history(db, &initial, c);
    uint64_t counter = read_counter(db);
    print_message("%" PRIu64 " commits, %" PRIu64 " conflicts; counter %" PRIu64 " / %" PRIu64 "\n",
                  tot.committed, tot.conflicts, counter, tot.increments);
    assert_int_equal(c->anomalies, 0);
    assert_int_equal(c->final_mismatches, 0);
    assert_int_equal(counter, tot.increments);
    assert_true(tot.conflicts > 0);
    cf_model_free(&c->model);
    free(c);
    cf_model_free(&initial);
    kvq_db_close(db);
}

int main(int argc, char **argv)
{
    cf_init(argc, argv, roles, sizeof(roles) / sizeof(roles[0]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serializable_history),
        cmocka_unit_test(test_serializable_history_early_reads),
        cmocka_unit_test(test_increments_not_lost),
        cmocka_unit_test(test_checker_catches_broken_engine),
    };
    return CF_RUN("serializability", tests);
}
