/* The log store's memory bound (docs/logstore.md, "Memory"): past half its limit the map slows
 * commits while the applier brings the table up; at the limit a commit applies itself. Never
 * refused, and the map never holds more than the limit after a commit, even with the applier
 * held back (this test holds ckpt.lock, as another process's applier at work would). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "engine/embedded/emb.h"
#include "engine/embedded/logstore/store_log.h"
#include "engine/engine.h"
#include "kvq/kvq.h"
#include "kvq_test.h"

#define K(s)  (const uint8_t *)(s), strlen(s)
#define LIMIT 200000

static char base[64];

static int setup(void **state)
{
    (void)state;
    return kt_mkdtemp(base, sizeof(base), "log-pressure");
}

static int teardown(void **state)
{
    (void)state;
    return kt_rm_rf(base) == 0 ? 0 : -1;
}

static void stats_of(kvq_db *db, kvq__logstore_stats *st)
{
    emb_db *e = db->engine;
    kvq__logstore_get_stats(e->store, st);
}

static int put(kvq_db *db, const char *k, const char *v)
{
    return kt_put(db, k, v);
}

static size_t count_prefix(kvq_db *db, const char *b, const char *e)
{
    kvq_txn *t = NULL;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    size_t total = 0;
    const uint8_t *from = (const uint8_t *)b;
    size_t from_len = strlen(b);
    uint8_t last[64];
    for (;;) {
        const kvq_kv *kv = NULL;
        size_t n = 0;
        bool more = false;
        assert_int_equal(kvq_txn_get_range(&kv, &n, &more, t, from, from_len, K(e), 500, 0), 0);
        total += n;
        if (!more || n == 0)
            break;
        memcpy(last, kv[n - 1].key.data, kv[n - 1].key.len);
        last[kv[n - 1].key.len] = 0;
        from = last;
        from_len = kv[n - 1].key.len + 1;
    }
    kvq_txn_destroy(t);
    return total;
}

/* The stand-in for another process's applier: holds ckpt.lock until a commit has reached the
 * limit (a pass of its own, waiting for the lock), then lets it go. */
struct holder {
    kvq_db *db;
    int fd;
    int released;
};

static void *holder_main(void *arg)
{
    struct holder *h = arg;
    for (;;) {
        kvq__logstore_stats st;
        stats_of(h->db, &st);
        if (st.forced > 0)
            break;
        kt_sleep_ms(2);
    }
    flock(h->fd, LOCK_UN);
    __atomic_store_n(&h->released, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void test_held_back_applier(void **state)
{
    (void)state;
    char dir[128], url[160], lock[192], key[32], val[1000];
    snprintf(dir, sizeof dir, "%s/held", base);
    snprintf(url, sizeof url, "log:%s", dir);
    snprintf(lock, sizeof lock, "%s/logstore/ckpt.lock", dir);
    kvq_db *db = NULL;
    assert_int_equal(kvq_db_open(&db, url, NULL), 0);
    struct holder h = { db, open(lock, O_RDWR | O_CLOEXEC), 0 };
    assert_true(h.fd >= 0);
    /* A separate open file: its flock excludes the store's, in this process too. */
    assert_int_equal(flock(h.fd, LOCK_EX | LOCK_NB), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, holder_main, &h), 0);

    memset(val, 'v', sizeof val - 1);
    val[sizeof val - 1] = '\0';
    int n = 0, rc = 0;
    uint64_t throttled_held = 0;
    /* 2 MB of values against a 200 KB map: ten times the limit, with the applier held back for
     * the first part. */
    for (; n < 2000 && rc == 0; n++) {
        snprintf(key, sizeof key, "k%05d", n);
        rc = put(db, key, val);
        if (!__atomic_load_n(&h.released, __ATOMIC_ACQUIRE)) {
            kvq__logstore_stats st;
            stats_of(db, &st);
            throttled_held = st.throttled;
        }
    }
    if (rc != 0)
        fail_msg("commit %d: %s", n, kvq_last_error());
    assert_int_equal(pthread_join(th, NULL), 0);
    close(h.fd);
    kvq__logstore_stats st;
    stats_of(db, &st);
    printf("pressure: limit=%d peak=%llu throttled=%llu (while held back %llu) waited=%llu us "
           "forced=%llu\n",
           LIMIT, (unsigned long long)st.map_peak, (unsigned long long)st.throttled,
           (unsigned long long)throttled_held, (unsigned long long)st.throttle_us,
           (unsigned long long)st.forced);
    /* slowed before the limit, applied at it, and never over it */
    assert_true(throttled_held > 0);
    assert_true(st.forced >= 1);
    assert_true(st.map_peak > 0);
    assert_true(st.map_peak <= LIMIT);
    assert_int_equal(count_prefix(db, "k", "l"), 2000);
    kvq_db_close(db);
    /* everything is there after a reopen too */
    assert_int_equal(kvq_db_open(&db, url, NULL), 0);
    assert_int_equal(count_prefix(db, "k", "l"), 2000);
    kvq_db_close(db);
}

/* Far under the limit nothing is slowed. */
static void test_no_pressure(void **state)
{
    (void)state;
    char dir[128], url[160], key[32];
    snprintf(dir, sizeof dir, "%s/calm", base);
    snprintf(url, sizeof url, "log:%s", dir);
    setenv("KVQ_LOGSTORE_MEMORY_LIMIT", "100000000", 1);
    kvq_db *db = NULL;
    assert_int_equal(kvq_db_open(&db, url, NULL), 0);
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof key, "c%05d", i);
        assert_int_equal(put(db, key, "small"), 0);
    }
    kvq__logstore_stats st;
    stats_of(db, &st);
    assert_int_equal(st.throttled, 0);
    assert_int_equal(st.forced, 0);
    kvq_db_close(db);
    setenv("KVQ_LOGSTORE_MEMORY_LIMIT", "200000", 1);
}

int main(void)
{
    /* The applier's own passes never come by themselves (an hour apart): only pressure, and
     * the commit at the limit, apply. */
    setenv("KVQ_LOGSTORE_MEMORY_LIMIT", "200000", 1);
    setenv("KVQ_LOGSTORE_APPLY_MS", "3600000", 1);
    unsetenv("KVQ_STORAGE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_held_back_applier),
        cmocka_unit_test(test_no_pressure),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
