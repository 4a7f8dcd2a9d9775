/* The log store's versioned map against a naive model: gets and ranges (forward, reverse, with
 * limits) at any version of the window, forgetting, memory accounting and its limit. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdint.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/embedded/logstore/vmap.h"
#include "util/util.h"
#include "test_log_util.h"
#include "test_scale.h"

#define NKEYS 48
#define MAXH  4096

/* The model: for each key, its history of (version, value length, value byte, dead). */
typedef struct hist {
    int64_t v[MAXH];
    int len[MAXH];
    uint8_t byte[MAXH];
    int dead[MAXH];
    int n;
} hist;

static hist model[NKEYS];

static void key_of(int i, uint8_t *k, size_t *kl)
{
    /* keys of 1 to 3 bytes whose order is i's order */
    k[0] = (uint8_t)(i / 4);
    *kl = 1 + (size_t)(i % 4 > 0) + (size_t)(i % 4 > 1);
    k[1] = (uint8_t)(i % 4);
    k[2] = 0;
    if (i % 4 == 3)
        k[2] = 7;
}

static int model_at(int i, int64_t ver, int *len, uint8_t *byte)
{
    hist *h = &model[i];
    for (int j = h->n - 1; j >= 0; j--) {
        if (h->v[j] <= ver) {
            if (h->dead[j])
                return 0;
            *len = h->len[j];
            *byte = h->byte[j];
            return 1;
        }
    }
    return 0;
}

static void model_put(int i, int64_t ver, int len, uint8_t byte, int dead)
{
    hist *h = &model[i];
    if (h->n > 0 && h->v[h->n - 1] == ver) {
        h->n--;
    } else if (dead && !(h->n > 0 && !h->dead[h->n - 1])) {
        return; /* a clear of an absent key writes nothing */
    }
    assert_true(h->n < MAXH);
    h->v[h->n] = ver;
    h->len[h->n] = len;
    h->byte[h->n] = byte;
    h->dead[h->n] = dead;
    h->n++;
}

static void check_value(kvq_bytes v, int len, uint8_t byte)
{
    assert_int_equal(v.len, (size_t)len);
    for (int j = 0; j < len; j++)
        assert_int_equal(v.data[j], byte);
}

static void check_read(kvq__vmap *m, int64_t ver, kvq__rng *r)
{
    uint8_t k[3];
    size_t kl;
    int len;
    uint8_t byte;
    int i = (int)(kvq__rng_next(r) % NKEYS);
    key_of(i, k, &kl);
    kvq_bytes v;
    kvq__vmap_rdlock(m);
    int got = kvq__vmap_get(m, ver, k, kl, &v);
    kvq__vmap_rdunlock(m);
    int want = model_at(i, ver, &len, &byte);
    assert_int_equal(got, want);
    if (want)
        check_value(v, len, byte);
    /* a range [a, b) with a limit, forward or reverse */
    int a = (int)(kvq__rng_next(r) % (NKEYS + 1)), b = (int)(kvq__rng_next(r) % (NKEYS + 1));
    if (a > b) {
        int t = a;
        a = b;
        b = t;
    }
    int reverse = (int)(kvq__rng_next(r) % 2), limit = 1 + (int)(kvq__rng_next(r) % 10);
    uint8_t bk[3], ek[3];
    size_t bl = 0, el = 0;
    if (a < NKEYS)
        key_of(a, bk, &bl);
    if (b < NKEYS)
        key_of(b, ek, &el);
    kvq__vmap_cursor c;
    kvq__vmap_cursor_init(&c, m, ver, a < NKEYS ? bk : NULL, bl, b < NKEYS ? ek : NULL, el,
                          reverse);
    int expect[NKEYS], ne = 0;
    for (int j = reverse ? b - 1 : a; reverse ? j >= a : j < b; j += reverse ? -1 : 1) {
        if (j >= NKEYS || ne == limit)
            continue;
        if (model_at(j, ver, &len, &byte))
            expect[ne++] = j;
    }
    if (a >= NKEYS)
        ne = 0;
    for (int n = 0; n < ne; n++) {
        kvq_bytes kk, vv;
        /* the lock is taken per step, as the store does */
        kvq__vmap_rdlock(m);
        int has = kvq__vmap_cursor_next(&c, &kk, &vv);
        kvq__vmap_rdunlock(m);
        assert_int_equal(has, 1);
        uint8_t ek2[3];
        size_t el2;
        key_of(expect[n], ek2, &el2);
        assert_int_equal(kk.len, el2);
        assert_memory_equal(kk.data, ek2, el2);
        model_at(expect[n], ver, &len, &byte);
        check_value(vv, len, byte);
    }
    if (ne < limit && a < NKEYS) {
        kvq_bytes kk, vv;
        kvq__vmap_rdlock(m);
        assert_int_equal(kvq__vmap_cursor_next(&c, &kk, &vv), 0);
        kvq__vmap_rdunlock(m);
    }
}

static void test_against_model(void **state)
{
    (void)state;
    unsigned seed = tl_seed();
    printf("vmap model: seed %u (replay: KVQ_TEST_SEED=%u)\n", seed, seed);
    kvq__rng r = { seed };
    memset(model, 0, sizeof model);
    kvq__vmap *m = kvq__vmap_new(0);
    assert_non_null(m);
    int64_t ver = 100, floor = 0;
    long steps = kvq_test_scaled(3000);
    if (steps > 12000)
        steps = 12000; /* the model keeps every version: bounded by its histories */
    static uint8_t val[300];
    for (long s = 0; s < steps; s++) {
        /* one batch of 1 to 4 mutations at a new version */
        ver += 1 + (int64_t)(kvq__rng_next(&r) % 3);
        int nm = 1 + (int)(kvq__rng_next(&r) % 4);
        kvq__vmap_wrlock(m);
        for (int j = 0; j < nm; j++) {
            int i = (int)(kvq__rng_next(&r) % NKEYS);
            uint8_t k[3];
            size_t kl;
            key_of(i, k, &kl);
            int op = (int)(kvq__rng_next(&r) % 10);
            if (op < 6) {
                int len = (int)(kvq__rng_next(&r) % sizeof val);
                uint8_t byte = (uint8_t)kvq__rng_next(&r);
                memset(val, byte, (size_t)len);
                assert_int_equal(kvq__vmap_set(m, ver, k, kl, val, (size_t)len), 0);
                model_put(i, ver, len, byte, 0);
            } else if (op < 8) {
                assert_int_equal(kvq__vmap_clear(m, ver, k, kl), 0);
                model_put(i, ver, 0, 0, 1);
            } else {
                int i2 = i + (int)(kvq__rng_next(&r) % 6);
                uint8_t e[3];
                size_t elen = 0;
                if (i2 < NKEYS)
                    key_of(i2, e, &elen);
                int cleared = 0;
                assert_int_equal(kvq__vmap_clear_range(m, ver, k, kl, i2 < NKEYS ? e : NULL, elen,
                                                       NULL, NULL),
                                 0);
                for (int x = i; x < i2 && x < NKEYS; x++) {
                    int len;
                    uint8_t byte;
                    if (model_at(x, ver, &len, &byte)) {
                        model_put(x, ver, 0, 0, 1);
                        cleared++;
                    }
                }
                (void)cleared;
            }
        }
        kvq__vmap_wrunlock(m);
        assert_int_equal(kvq__vmap_version(m), ver);
        /* reads at the newest version and at older ones in the window */
        for (int q = 0; q < 3; q++) {
            int64_t at = ver - (int64_t)(kvq__rng_next(&r) % (uint64_t)(ver - floor + 1));
            if (at < floor)
                at = floor;
            check_read(m, at, &r);
        }
        if (kvq__rng_next(&r) % 20 == 0) {
            int64_t f = ver - (int64_t)(kvq__rng_next(&r) % 50);
            if (f > floor) {
                floor = f;
                kvq__vmap_wrlock(m);
                kvq__vmap_forget(m, floor);
                kvq__vmap_wrunlock(m);
            }
        }
    }
    /* live bytes agree with the model */
    kvq__vmap_stats st;
    kvq__vmap_get_stats(m, &st);
    uint64_t live = 0, keys = 0;
    for (int i = 0; i < NKEYS; i++) {
        int len;
        uint8_t byte, k[3];
        size_t kl;
        key_of(i, k, &kl);
        if (model_at(i, ver, &len, &byte)) {
            live += kl + (uint64_t)len;
            keys++;
        }
    }
    assert_int_equal(st.live_bytes, live);
    assert_int_equal(st.live_keys, keys);
    /* everything cleared and forgotten: no node, no entry, no byte left but the queue */
    kvq__vmap_wrlock(m);
    assert_int_equal(kvq__vmap_clear_range(m, ver + 1, NULL, 0, NULL, 0, NULL, NULL), 0);
    kvq__vmap_forget(m, ver + 1);
    kvq__vmap_wrunlock(m);
    kvq__vmap_get_stats(m, &st);
    assert_int_equal(st.nodes, 0);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.live_bytes, 0);
    kvq__vmap_free(m);
}

static void count_key(void *arg, const uint8_t *k, size_t kl)
{
    (void)k;
    (void)kl;
    (*(int *)arg)++;
}

static void test_memory_limit_and_accounting(void **state)
{
    (void)state;
    kvq__vmap *m = kvq__vmap_new(200000);
    assert_non_null(m);
    uint8_t key[16], val[100];
    memset(val, 'v', sizeof val);
    int64_t ver = 1;
    int stored = 0, rc = 0;
    kvq__vmap_wrlock(m);
    for (int i = 0; i < 100000; i++) {
        snprintf((char *)key, sizeof key, "k%08d", i);
        rc = kvq__vmap_set(m, ver++, key, 9, val, sizeof val);
        if (rc != 0)
            break;
        stored++;
    }
    assert_int_equal(rc, KVQ_ENOMEM);
    assert_non_null(strstr(kvq_last_error(), "limit"));
    kvq__vmap_stats st;
    kvq__vmap_get_stats(m, &st);
    assert_true(st.mem <= 200000);
    assert_int_equal(st.live_keys, (uint64_t)stored);
    printf("vmap: %d items of 9+100 bytes in %llu bytes: %.2f bytes of memory per live byte\n",
           stored, (unsigned long long)st.mem, (double)st.mem / (double)st.live_bytes);
    /* the refused set changed nothing */
    kvq_bytes v;
    snprintf((char *)key, sizeof key, "k%08d", stored);
    assert_int_equal(kvq__vmap_get(m, ver, key, 9, &v), 0);
    /* deletes are never refused, and forgetting gives the memory back */
    int deleted = 0;
    assert_int_equal(kvq__vmap_clear_range(m, ver, (const uint8_t *)"k", 1, (const uint8_t *)"l",
                                           1, count_key, &deleted),
                     0);
    assert_int_equal(deleted, stored);
    kvq__vmap_forget(m, ver);
    kvq__vmap_get_stats(m, &st);
    assert_int_equal(st.nodes, 0);
    assert_true(st.mem < 200000 / 4);
    /* a write below the newest version is refused */
    assert_int_equal(kvq__vmap_set(m, ver - 5, key, 9, val, 1), KVQ_EINVAL);
    assert_int_equal(kvq__vmap_set(m, ver + 1, key, 9, val, 1), 0);
    kvq__vmap_wrunlock(m);
    kvq__vmap_free(m);
}

/* Old versions stay readable until forgotten, and a cursor keeps its snapshot while newer
 * batches are applied between its steps. */
static void test_snapshot_stability(void **state)
{
    (void)state;
    kvq__vmap *m = kvq__vmap_new(0);
    uint8_t k[16];
    kvq__vmap_wrlock(m);
    for (int i = 0; i < 100; i++) {
        snprintf((char *)k, sizeof k, "q%03d", i);
        assert_int_equal(kvq__vmap_set(m, 10, k, 4, k, 4), 0);
    }
    kvq__vmap_wrunlock(m);
    kvq__vmap_cursor c;
    kvq__vmap_cursor_init(&c, m, 10, NULL, 0, NULL, 0, 0);
    kvq_bytes kk, vv;
    int seen = 0;
    for (int step = 0; step < 100; step++) {
        kvq__vmap_rdlock(m);
        int has = kvq__vmap_cursor_next(&c, &kk, &vv);
        kvq__vmap_rdunlock(m);
        assert_int_equal(has, 1);
        char want[16];
        snprintf(want, sizeof want, "q%03d", step);
        assert_memory_equal(kk.data, want, 4);
        seen++;
        /* a pop of the head and a push at the tail, at newer versions */
        kvq__vmap_wrlock(m);
        assert_int_equal(kvq__vmap_clear(m, 11 + step, kk.data, 4), 0);
        snprintf((char *)k, sizeof k, "q%03d", 100 + step);
        assert_int_equal(kvq__vmap_set(m, 11 + step, k, 4, k, 4), 0);
        kvq__vmap_forget(m, 10);
        kvq__vmap_wrunlock(m);
    }
    kvq__vmap_rdlock(m);
    assert_int_equal(kvq__vmap_cursor_next(&c, &kk, &vv), 0);
    kvq__vmap_rdunlock(m);
    assert_int_equal(seen, 100);
    /* at the newest version: q100..q199 */
    kvq__vmap_cursor_init(&c, m, 110, NULL, 0, NULL, 0, 1);
    kvq__vmap_rdlock(m);
    assert_int_equal(kvq__vmap_cursor_next(&c, &kk, &vv), 1);
    assert_memory_equal(kk.data, "q199", 4);
    kvq__vmap_rdunlock(m);
    kvq__vmap_free(m);
}

/* Readers iterate at pinned versions, a step at a time with the lock let go between steps,
 * while a writer pushes at the tail, pops at the head (moving nodes to the graveyard) and
 * forgets below the oldest pin: every reader sees its snapshot exactly (a run of consecutive
 * items), and nothing it was handed is freed under it (the sanitizer build checks that). */
#define STRESS_READERS 3

typedef struct stress {
    kvq__vmap *m;
    pthread_mutex_t mu;
    int64_t pins[STRESS_READERS];
    int64_t version;
    int stop, bad;
    long reads;
} stress;

static void *stress_reader(void *p)
{
    stress *st = p;
    static __thread int me = -1;
    static int next_id;
    pthread_mutex_lock(&st->mu);
    me = next_id++;
    pthread_mutex_unlock(&st->mu);
    while (!__atomic_load_n(&st->stop, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&st->mu);
        int64_t v = st->version;
        st->pins[me] = v;
        pthread_mutex_unlock(&st->mu);
        kvq__vmap_cursor c;
        int reverse = (int)(v % 2);
        kvq__vmap_cursor_init(&c, st->m, v, NULL, 0, NULL, 0, reverse);
        long prev = -1;
        uint8_t kb[16];
        for (;;) {
            kvq_bytes k, val;
            kvq__vmap_rdlock(st->m);
            int has = kvq__vmap_cursor_next(&c, &k, &val);
            if (has) {
                /* copy while the lock is held, as the store's caller does before its next
                 * call; then check after letting go */
                size_t kn = k.len < sizeof kb - 1 ? k.len : sizeof kb - 1;
                memcpy(kb, k.data, kn);
                kb[kn] = '\0'; /* strtol below reads the digits up to here, no further */
                if (k.len != 9 || val.len != 9 || memcmp(k.data, val.data, 9) != 0)
                    st->bad = 1;
            }
            kvq__vmap_rdunlock(st->m);
            if (!has)
                break;
            long n = strtol((const char *)kb + 1, NULL, 10);
            if (prev >= 0 && n != (reverse ? prev - 1 : prev + 1))
                st->bad = 2;
            prev = n;
            sched_yield();
        }
        pthread_mutex_lock(&st->mu);
        st->pins[me] = INT64_MAX;
        st->reads++;
        pthread_mutex_unlock(&st->mu);
    }
    return NULL;
}

static void test_readers_while_popping(void **state)
{
    (void)state;
    stress st = { .m = kvq__vmap_new(0) };
    pthread_mutex_init(&st.mu, NULL);
    for (int i = 0; i < STRESS_READERS; i++)
        st.pins[i] = INT64_MAX;
    char k[32];
    long head = 0, tail = 0;
    int64_t v = 1;
    kvq__vmap_wrlock(st.m);
    for (; tail < 200; tail++) {
        snprintf(k, sizeof k, "q%08ld", tail);
        assert_int_equal(kvq__vmap_set(st.m, v, (uint8_t *)k, 9, (uint8_t *)k, 9), 0);
    }
    kvq__vmap_wrunlock(st.m);
    st.version = v;
    pthread_t th[STRESS_READERS];
    for (int i = 0; i < STRESS_READERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, stress_reader, &st), 0);
    /* until the readers made enough scans (a cap keeps a stuck reader from hanging it) */
    long want = kvq_test_scaled(30), steps = 0;
    for (long s = 0; s < 2000000; s++) {
        pthread_mutex_lock(&st.mu);
        long reads = st.reads;
        pthread_mutex_unlock(&st.mu);
        if (reads >= want && s >= 2000)
            break;
        steps++;
        sched_yield();
        v++;
        kvq__vmap_wrlock(st.m);
        snprintf(k, sizeof k, "q%08ld", tail++);
        assert_int_equal(kvq__vmap_set(st.m, v, (uint8_t *)k, 9, (uint8_t *)k, 9), 0);
        snprintf(k, sizeof k, "q%08ld", head++);
        assert_int_equal(kvq__vmap_clear(st.m, v, (uint8_t *)k, 9), 0);
        kvq__vmap_wrunlock(st.m);
        pthread_mutex_lock(&st.mu);
        st.version = v;
        int64_t floor = v - 20;
        for (int i = 0; i < STRESS_READERS; i++)
            if (st.pins[i] < floor)
                floor = st.pins[i];
        pthread_mutex_unlock(&st.mu);
        kvq__vmap_wrlock(st.m);
        kvq__vmap_forget(st.m, floor);
        kvq__vmap_wrunlock(st.m);
    }
    __atomic_store_n(&st.stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < STRESS_READERS; i++)
        pthread_join(th[i], NULL);
    printf("vmap stress: %ld pushes and pops, %ld full scans by %d readers\n", steps, st.reads,
           STRESS_READERS);
    assert_int_equal(st.bad, 0);
    assert_true(st.reads > 0);
    kvq__vmap_stats ss;
    kvq__vmap_get_stats(st.m, &ss);
    assert_int_equal(ss.live_keys, 200);
    kvq__vmap_free(st.m);
    pthread_mutex_destroy(&st.mu);
}

/* A queue's pattern over thousands of keys (pushes at the tail, pops at the head, sets, clears,
 * tombstones of absent keys, clear-ranges) read at the newest version and a few versions back,
 * as readers at the durable version do, and anywhere in the window: every read agrees with a
 * model, and the graveyard's links (which let a read skip the keys buried at or before its
 * version) agree with its nodes after every batch. */
#define QKEYS 4096

typedef struct qhist {
    int64_t *v;
    int32_t *val; /* -1: a tombstone */
    int n, cap;
} qhist;

static qhist qmodel[QKEYS];

static void q_key(int i, uint8_t k[2])
{
    k[0] = (uint8_t)(i >> 8);
    k[1] = (uint8_t)i;
}

static void q_put(int i, int64_t ver, int32_t val)
{
    qhist *h = &qmodel[i];
    if (h->n > 0 && h->v[h->n - 1] == ver) {
        h->val[h->n - 1] = val;
        return;
    }
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 8;
        h->v = realloc(h->v, (size_t)h->cap * sizeof *h->v);
        h->val = realloc(h->val, (size_t)h->cap * sizeof *h->val);
        assert_non_null(h->v);
        assert_non_null(h->val);
    }
    h->v[h->n] = ver;
    h->val[h->n] = val;
    h->n++;
}

/* The value of key i at ver, -1 when absent. */
static int32_t q_at(int i, int64_t ver)
{
    const qhist *h = &qmodel[i];
    for (int j = h->n - 1; j >= 0; j--)
        if (h->v[j] <= ver)
            return h->val[j];
    return -1;
}

static void q_set(kvq__vmap *m, int64_t ver, int i, int32_t val)
{
    uint8_t k[2];
    q_key(i, k);
    assert_int_equal(kvq__vmap_set(m, ver, k, 2, (const uint8_t *)&val, sizeof val), 0);
    q_put(i, ver, val);
}

static void q_clear(kvq__vmap *m, int64_t ver, int i, int tomb)
{
    uint8_t k[2];
    q_key(i, k);
    if (tomb)
        assert_int_equal(kvq__vmap_tombstone(m, ver, k, 2), 0);
    else
        assert_int_equal(kvq__vmap_clear(m, ver, k, 2), 0);
    if (tomb || q_at(i, ver) >= 0)
        q_put(i, ver, -1);
}

static void q_check_read(kvq__vmap *m, int64_t ver, int head, int tail, kvq__rng *r)
{
    /* mostly around the queue's head, where consumers read */
    int span = tail - head + 64;
    int a = head - 32 + (int)(kvq__rng_next(r) % (uint64_t)span);
    if (kvq__rng_next(r) % 4 == 0)
        a = (int)(kvq__rng_next(r) % QKEYS);
    if (a < 0)
        a = 0;
    if (a > QKEYS)
        a = QKEYS;
    int b = a + (int)(kvq__rng_next(r) % 400);
    if (b > QKEYS)
        b = QKEYS;
    int reverse = (int)(kvq__rng_next(r) % 2), limit = 1 + (int)(kvq__rng_next(r) % 20);
    uint8_t bk[2], ek[2];
    q_key(a, bk);
    q_key(b, ek);
    kvq__vmap_cursor c;
    kvq__vmap_cursor_init(&c, m, ver, bk, a < QKEYS ? 2 : 0, b < QKEYS ? ek : NULL,
                          b < QKEYS ? 2 : 0, reverse);
    if (a == QKEYS)
        kvq__vmap_cursor_init(&c, m, ver, (const uint8_t *)"\xff\xff\xff", 3, NULL, 0, reverse);
    int got = 0;
    for (int j = reverse ? b - 1 : a; (reverse ? j >= a : j < b) && got < limit;
         j += reverse ? -1 : 1) {
        int32_t want = q_at(j, ver);
        if (want < 0)
            continue;
        kvq_bytes kk, vv;
        kvq__vmap_rdlock(m);
        int has = kvq__vmap_cursor_next(&c, &kk, &vv);
        kvq__vmap_rdunlock(m);
        assert_int_equal(has, 1);
        uint8_t k[2];
        q_key(j, k);
        assert_int_equal(kk.len, 2);
        assert_memory_equal(kk.data, k, 2);
        assert_int_equal(vv.len, sizeof want);
        assert_memory_equal(vv.data, &want, sizeof want);
        got++;
    }
    if (got < limit) {
        kvq_bytes kk, vv;
        kvq__vmap_rdlock(m);
        assert_int_equal(kvq__vmap_cursor_next(&c, &kk, &vv), 0);
        kvq__vmap_rdunlock(m);
    }
    /* and one key's probe */
    int i = (int)(kvq__rng_next(r) % QKEYS);
    uint8_t k[2];
    q_key(i, k);
    kvq_bytes v;
    int32_t want = q_at(i, ver);
    kvq__vmap_rdlock(m);
    int p = kvq__vmap_get(m, ver, k, 2, &v);
    kvq__vmap_rdunlock(m);
    assert_int_equal(p, want >= 0);
    if (want >= 0)
        assert_memory_equal(v.data, &want, sizeof want);
}

static void test_queue_reads_back_in_the_window(void **state)
{
    (void)state;
    unsigned seed = tl_seed();
    printf("vmap queue model: seed %u (replay: KVQ_TEST_SEED=%u)\n", seed, seed);
    kvq__rng r = { seed };
    memset(qmodel, 0, sizeof qmodel);
    kvq__vmap *m = kvq__vmap_new(0);
    assert_non_null(m);
    int64_t ver = 10, floor = 0;
    int head = 0, tail = 0;
    long steps = kvq_test_scaled(4000);
    for (long s = 0; s < steps; s++) {
        ver += 1 + (int64_t)(kvq__rng_next(&r) % 2);
        int nm = 1 + (int)(kvq__rng_next(&r) % 8);
        kvq__vmap_wrlock(m);
        for (int j = 0; j < nm; j++) {
            int op = (int)(kvq__rng_next(&r) % 20);
            int i = (int)(kvq__rng_next(&r) % QKEYS);
            if (op < 8 && tail < QKEYS) {
                q_set(m, ver, tail++, (int32_t)s);
            } else if (op < 14 && head < tail) {
                q_clear(m, ver, head++, 0);
            } else if (op < 16) {
                q_set(m, ver, i, (int32_t)(s * 8 + j));
            } else if (op < 17) {
                q_clear(m, ver, i, 0);
            } else if (op < 19) {
                q_clear(m, ver, i, 1);
            } else {
                int e = i + 1 + (int)(kvq__rng_next(&r) % 30);
                if (e > QKEYS)
                    e = QKEYS;
                uint8_t bk[2], ek[2];
                q_key(i, bk);
                q_key(e, ek);
                assert_int_equal(kvq__vmap_clear_range(m, ver, bk, 2, e < QKEYS ? ek : NULL,
                                                       e < QKEYS ? 2 : 0, NULL, NULL),
                                 0);
                for (int x = i; x < e; x++)
                    if (q_at(x, ver) >= 0)
                        q_put(x, ver, -1);
            }
        }
        if (head == QKEYS || (tail == QKEYS && head == tail))
            head = tail = 0; /* around again over the same keys */
        if (kvq__rng_next(&r) % 50 == 0) {
            int64_t f = ver - 20 - (int64_t)(kvq__rng_next(&r) % 60);
            if (f > floor) {
                floor = f;
                kvq__vmap_forget(m, floor);
            }
        }
        if (s % 8 == 0 || s < 200)
            assert_int_equal(kvq__vmap_check(m), 0);
        kvq__vmap_wrunlock(m);
        for (int q = 0; q < 3; q++) {
            int64_t at = ver - (int64_t)(kvq__rng_next(&r) % 6);
            if (q == 2)
                at = ver - (int64_t)(kvq__rng_next(&r) % (uint64_t)(ver - floor + 1));
            if (at < floor)
                at = floor;
            q_check_read(m, at, head, tail, &r);
        }
    }
    /* the map gives up what it holds: everything cleared and forgotten */
    kvq__vmap_wrlock(m);
    assert_int_equal(kvq__vmap_clear_range(m, ver + 1, NULL, 0, NULL, 0, NULL, NULL), 0);
    kvq__vmap_forget(m, ver + 1);
    assert_int_equal(kvq__vmap_check(m), 0);
    kvq__vmap_wrunlock(m);
    kvq__vmap_stats st;
    kvq__vmap_get_stats(m, &st);
    assert_int_equal(st.nodes, 0);
    kvq__vmap_free(m);
    for (int i = 0; i < QKEYS; i++) {
        free(qmodel[i].v);
        free(qmodel[i].val);
    }
}

/* The store's use: kvq__vmap_drop of what the table holds keeps the graveyard's links right. */
static void test_drop_keeps_the_graveyard_whole(void **state)
{
    (void)state;
    kvq__vmap *m = kvq__vmap_new(0);
    uint8_t k[2];
    kvq__vmap_wrlock(m);
    for (int i = 0; i < 3000; i++) {
        q_key(i, k);
        assert_int_equal(kvq__vmap_set(m, 1 + i, k, 2, k, 2), 0);
        if (i >= 10) {
            q_key(i - 10, k);
            assert_int_equal(kvq__vmap_clear(m, 1 + i, k, 2), 0);
        }
        if (i % 100 == 99) {
            kvq__vmap_drop(m, i - 50);
            assert_int_equal(kvq__vmap_check(m), 0);
        }
    }
    kvq__vmap_wrunlock(m);
    /* at version 2990: keys 2980..2989 (pushed at i+1 <= 2990, popped at key+11 > 2990) */
    kvq__vmap_cursor c;
    kvq__vmap_cursor_init(&c, m, 2990, NULL, 0, NULL, 0, 0);
    kvq_bytes kk, vv;
    int n = 0;
    kvq__vmap_rdlock(m);
    while (kvq__vmap_cursor_next(&c, &kk, &vv)) {
        assert_int_equal(kk.len, 2);
        assert_int_equal(kk.data[0] * 256 + kk.data[1], 2980 + n);
        n++;
    }
    kvq__vmap_rdunlock(m);
    assert_int_equal(n, 10);
    kvq__vmap_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_model),
        cmocka_unit_test(test_memory_limit_and_accounting),
        cmocka_unit_test(test_snapshot_stability),
        cmocka_unit_test(test_readers_while_popping),
        cmocka_unit_test(test_queue_reads_back_in_the_window),
        cmocka_unit_test(test_drop_keeps_the_graveyard_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
