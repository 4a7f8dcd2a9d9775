/* libkvq_fdb_c.so through FoundationDB's C API, as a program written for FoundationDB uses it:
 * the checks follow FoundationDB's documentation (api-c.rst) and fdb_c_options, not kvq's own
 * API. Linked against libkvq_fdb_c.so itself. */
#include "kvq_test.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdbc/fdbc_extra.h"

#define KVQ_FDB_PROTOTYPE(ret, name, params) ret name params;
KVQ_FDB_FUNCTIONS(KVQ_FDB_PROTOTYPE)
#undef KVQ_FDB_PROTOTYPE

static char dir[64], cluster[128];
static pthread_t net_thread;
static FDBDatabase *db;

static void *run_net(void *arg)
{
    (void)arg;
    fdb_error_t e = fdb_run_network();
    return e == 0 ? NULL : (void *)1;
}

/* Waits for f and returns its error. */
static fdb_error_t wait_f(FDBFuture *f)
{
    assert_int_equal(fdb_future_block_until_ready(f), 0);
    assert_true(fdb_future_is_ready(f));
    return fdb_future_get_error(f);
}

static FDBTransaction *new_tr(void)
{
    FDBTransaction *tr = NULL;
    assert_int_equal(fdb_database_create_transaction(db, &tr), 0);
    return tr;
}

static void set_s(FDBTransaction *tr, const char *k, const char *v)
{
    fdb_transaction_set(tr, (const uint8_t *)k, (int)strlen(k), (const uint8_t *)v,
                        (int)strlen(v));
}

static fdb_error_t commit(FDBTransaction *tr)
{
    FDBFuture *f = fdb_transaction_commit(tr);
    fdb_error_t e = wait_f(f);
    fdb_future_destroy(f);
    return e;
}

/* Reads k, as a snapshot read or not: 0 absent, 1 present (the value copied into out). */
static fdb_error_t get_err(FDBTransaction *tr, const char *k, int snapshot, int *present,
                           char *out, size_t cap)
{
    FDBFuture *f = fdb_transaction_get(tr, (const uint8_t *)k, (int)strlen(k), snapshot);
    fdb_error_t e = wait_f(f);
    if (e == 0) {
        fdb_bool_t p = 0;
        const uint8_t *v = NULL;
        int n = 0;
        assert_int_equal(fdb_future_get_value(f, &p, &v, &n), 0);
        *present = p;
        snprintf(out, cap, "%.*s", n, (const char *)v);
    }
    fdb_future_destroy(f);
    return e;
}

static fdb_error_t get_s(FDBTransaction *tr, const char *k, int *present, char *out, size_t cap)
{
    return get_err(tr, k, 0, present, out, cap);
}

static void test_versions_and_network_options(void **state)
{
    (void)state;
    assert_true(fdb_get_max_api_version() >= 730);
    assert_non_null(fdb_get_client_version());
    /* Chosen once (in setup). */
    assert_int_equal(fdb_select_api_version_impl(710, 710), 2201);
    assert_int_equal(fdb_setup_network(), 2009);
    /* Client-side options mean nothing locally and are accepted; others are refused (and the
     * multi-version client's switches once the network is set up, as it is here). */
    assert_int_equal(fdb_network_set_option(30, (const uint8_t *)"/tmp", 4), 0);
    assert_int_equal(fdb_network_set_option(60, NULL, 0), 2007);
    assert_int_equal(fdb_network_set_option(91, (const uint8_t *)"/tmp", 4), 2007); /* 730 only */
    assert_int_equal(fdb_network_set_option(12345, NULL, 0), 2007);
    assert_int_equal(fdb_network_set_option(30, NULL, -1), 2006);
    assert_string_equal(fdb_get_error(2007), fdb_get_error(2007));
    assert_non_null(fdb_get_error(1020));
}

static void test_error_predicates(void **state)
{
    (void)state;
    /* API 710: 1021 and 1039 maybe committed; 1020, 1007, ... and 2137 retryable, not
     * committed; 1031 (timed out) neither. */
    assert_true(fdb_error_predicate(FDB_ERROR_PREDICATE_MAYBE_COMMITTED, 1021));
    assert_true(fdb_error_predicate(FDB_ERROR_PREDICATE_MAYBE_COMMITTED, 1039));
    assert_false(fdb_error_predicate(FDB_ERROR_PREDICATE_MAYBE_COMMITTED, 1020));
    assert_true(fdb_error_predicate(FDB_ERROR_PREDICATE_RETRYABLE_NOT_COMMITTED, 1020));
    assert_true(fdb_error_predicate(FDB_ERROR_PREDICATE_RETRYABLE_NOT_COMMITTED, 1007));
    assert_true(fdb_error_predicate(FDB_ERROR_PREDICATE_RETRYABLE_NOT_COMMITTED, 2137));
    assert_false(fdb_error_predicate(FDB_ERROR_PREDICATE_RETRYABLE_NOT_COMMITTED, 1078));
    assert_false(fdb_error_predicate(FDB_ERROR_PREDICATE_RETRYABLE_NOT_COMMITTED, 1021));
    assert_true(fdb_error_predicate(FDB_ERROR_PREDICATE_RETRYABLE, 1021));
    assert_true(fdb_error_predicate(FDB_ERROR_PREDICATE_RETRYABLE, 1213));
    assert_false(fdb_error_predicate(FDB_ERROR_PREDICATE_RETRYABLE, 1031));
    assert_false(fdb_error_predicate(FDB_ERROR_PREDICATE_RETRYABLE, 0));
    assert_false(fdb_error_predicate(12345, 1020));
}

static void test_cluster_files(void **state)
{
    (void)state;
    FDBDatabase *d = NULL;
    char path[160];
    snprintf(path, sizeof(path), "%s/missing.cluster", dir);
    assert_int_equal(fdb_create_database(path, &d), 1515); /* no_cluster_file_found */
    assert_null(d);
    snprintf(path, sizeof(path), "%s/other.cluster", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("desc:id@127.0.0.1:4500\n", f); /* a real cluster's: not a kvq directory */
    fclose(f);
    assert_int_equal(fdb_create_database(path, &d), 2104);
    assert_null(d);
}

static void test_set_get_clear_and_ranges(void **state)
{
    (void)state;
    FDBTransaction *tr = new_tr();
    set_s(tr, "r/a", "1");
    set_s(tr, "r/b", "2");
    set_s(tr, "r/c", "3");
    set_s(tr, "r/d", "4");
    fdb_transaction_clear(tr, (const uint8_t *)"r/b", 3);
    fdb_transaction_clear_range(tr, (const uint8_t *)"r/c", 3, (const uint8_t *)"r/d", 3);
    assert_int_equal(commit(tr), 0);
    int64_t cv = 0;
    assert_int_equal(fdb_transaction_get_committed_version(tr, &cv), 0);
    assert_true(cv > 0);
    fdb_transaction_destroy(tr);

    tr = new_tr();
    int present = -1;
    char v[16];
    assert_int_equal(get_s(tr, "r/b", &present, v, sizeof(v)), 0);
    assert_int_equal(present, 0);
    assert_int_equal(get_s(tr, "r/d", &present, v, sizeof(v)), 0);
    assert_int_equal(present, 1);
    assert_string_equal(v, "4");
    /* The whole range, all at once: a and d, nothing more to read. */
    FDBFuture *f = fdb_transaction_get_range(tr, (const uint8_t *)"r/", 2, 0, 1,
                                             (const uint8_t *)"r0", 2, 0, 1, 0, 0,
                                             FDB_STREAMING_MODE_WANT_ALL, 0, 0, 0);
    assert_int_equal(wait_f(f), 0);
    const FDBKeyValue *kv;
    int count = 0;
    fdb_bool_t more = 1;
    assert_int_equal(fdb_future_get_keyvalue_array(f, &kv, &count, &more), 0);
    assert_int_equal(count, 2);
    assert_false(more);
    assert_memory_equal(kv[0].key, "r/a", 3);
    assert_memory_equal(kv[1].key, "r/d", 3);
    /* Released results are gone: reading them again is future_released (1102). */
    fdb_future_release_memory(f);
    assert_int_equal(fdb_future_get_keyvalue_array(f, &kv, &count, &more), 1102);
    fdb_future_destroy(f);
    /* Reverse with a limit of 1: the last key, and more to come. */
    f = fdb_transaction_get_range(tr, (const uint8_t *)"r/", 2, 0, 1, (const uint8_t *)"r0", 2,
                                  0, 1, 1, 0, FDB_STREAMING_MODE_EXACT, 0, 0, 1);
    assert_int_equal(wait_f(f), 0);
    assert_int_equal(fdb_future_get_keyvalue_array(f, &kv, &count, &more), 0);
    assert_int_equal(count, 1);
    assert_memory_equal(kv[0].key, "r/d", 3);
    assert_true(more);
    fdb_future_destroy(f);
    fdb_transaction_destroy(tr);
}

/* Under a's reads, b writes key (= value) and commits; then a writes other (= other_value)
 * and commits: a's result, 0 when its reads did not cover key, not_committed (1020) when they
 * did. */
static fdb_error_t write_under(FDBTransaction *a,
                               FDBTransaction *b,
                               const char *key,
                               const char *value,
                               const char *other,
                               const char *other_value)
{
    set_s(b, key, value);
    assert_int_equal(commit(b), 0);
    set_s(a, other, other_value);
    return commit(a);
}

static void test_conflict_and_retry_class(void **state)
{
    (void)state;
    FDBTransaction *a = new_tr(), *b = new_tr();
    int present;
    char v[16];
    assert_int_equal(get_s(a, "x/k", &present, v, sizeof(v)), 0);
    fdb_error_t e = write_under(a, b, "x/k", "b", "x/other", "a");
    assert_int_equal(e, 1020);
    assert_true(fdb_error_predicate(FDB_ERROR_PREDICATE_RETRYABLE, e));
    assert_false(fdb_error_predicate(FDB_ERROR_PREDICATE_MAYBE_COMMITTED, e));
    fdb_transaction_reset(a);
    assert_int_equal(get_s(a, "x/k", &present, v, sizeof(v)), 0);
    assert_string_equal(v, "b");
    fdb_transaction_destroy(a);
    fdb_transaction_destroy(b);
}

static fdb_error_t on_error(FDBTransaction *tr, fdb_error_t e)
{
    FDBFuture *f = fdb_transaction_on_error(tr, e);
    fdb_error_t r = wait_f(f);
    fdb_future_destroy(f);
    return r;
}

/* The retry loop every binding runs: commit, and on an error wait for on_error's future; a
 * retryable error resets the transaction, any other comes back. */
static void test_on_error_retry_loop(void **state)
{
    (void)state;
    FDBTransaction *a = new_tr(), *b = new_tr();
    int present, attempts = 0;
    char v[16];
    fdb_error_t e;
    for (;;) {
        attempts++;
        assert_int_equal(get_s(a, "e/k", &present, v, sizeof(v)), 0);
        if (attempts == 1) { /* someone else writes what this attempt read */
            set_s(b, "e/k", "b");
            assert_int_equal(commit(b), 0);
        }
        set_s(a, "e/seen", present ? v : "none");
        e = commit(a);
        if (e == 0)
            break;
        assert_int_equal(e, 1020);
        assert_int_equal(on_error(a, e), 0);
    }
    assert_int_equal(attempts, 2);
    fdb_transaction_reset(a);
    assert_int_equal(get_s(a, "e/seen", &present, v, sizeof(v)), 0);
    assert_string_equal(v, "b");
    /* Not retryable: the error itself comes back. */
    assert_int_equal(on_error(a, 2000), 2000);
    /* A retry limit of 0: the first retryable error is final. */
    fdb_transaction_reset(a);
    uint8_t zero[8] = { 0 };
    assert_int_equal(fdb_transaction_set_option(a, FDB_TR_OPTION_RETRY_LIMIT, zero, 8), 0);
    assert_int_equal(on_error(a, 1020), 1020);
    fdb_transaction_destroy(a);
    fdb_transaction_destroy(b);
}

static void test_cancel(void **state)
{
    (void)state;
    FDBTransaction *tr = new_tr();
    fdb_transaction_cancel(tr);
    int present;
    char v[16];
    assert_int_equal(get_s(tr, "c/k", &present, v, sizeof(v)), 1025);
    set_s(tr, "c/k", "1");
    assert_int_equal(commit(tr), 1025);
    fdb_transaction_reset(tr);
    set_s(tr, "c/k", "1");
    assert_int_equal(commit(tr), 0);
    fdb_transaction_destroy(tr);
}

static void test_database_options(void **state)
{
    (void)state;
    uint8_t one_ms[8] = { 1 };
    assert_int_equal(fdb_database_set_option(db, 12345, one_ms, 8), 2007);
    assert_int_equal(fdb_database_set_option(db, 500, one_ms, 4), 2006);
    assert_int_equal(fdb_database_set_option(db, 20, one_ms, 8), 0);
    /* A database-wide timeout of 1 ms reaches new transactions: a read 50 ms later fails with
     * transaction_timed_out (1031). */
    assert_int_equal(fdb_database_set_option(db, 500, one_ms, 8), 0);
    FDBTransaction *tr = new_tr();
    usleep(50000);
    int present;
    char v[16];
    assert_int_equal(get_s(tr, "o/k", &present, v, sizeof(v)), 1031);
    fdb_transaction_destroy(tr);
    uint8_t off[8] = { 0 };
    assert_int_equal(fdb_database_set_option(db, 500, off, 8), 0);
    tr = new_tr();
    usleep(50000);
    assert_int_equal(get_s(tr, "o/k", &present, v, sizeof(v)), 0);
    fdb_transaction_destroy(tr);
}

/* get_key of a selector; the key copied into out ("" and "\xff" are the ends). */
static fdb_error_t key_of(FDBTransaction *tr, const char *k, int or_equal, int offset, int snapshot,
                          char *out, size_t cap)
{
    FDBFuture *f = fdb_transaction_get_key(tr, (const uint8_t *)k, (int)strlen(k), or_equal,
                                           offset, snapshot);
    fdb_error_t e = wait_f(f);
    if (e == 0) {
        const uint8_t *key = NULL;
        int n = 0;
        assert_int_equal(fdb_future_get_key(f, &key, &n), 0);
        snprintf(out, cap, "%.*s", n, (const char *)key);
    }
    fdb_future_destroy(f);
    return e;
}

static void test_key_selectors(void **state)
{
    (void)state;
    FDBTransaction *tr = new_tr();
    set_s(tr, "s/1", "1");
    set_s(tr, "s/2", "2");
    set_s(tr, "s/3", "3");
    set_s(tr, "s/4", "4");
    set_s(tr, "s/5", "5");
    assert_int_equal(commit(tr), 0);
    fdb_transaction_reset(tr);
    char k[32];
    /* FoundationDB's four named selectors, and offsets beyond them. */
    assert_int_equal(key_of(tr, "s/3", 0, 1, 0, k, sizeof(k)), 0); /* first_greater_or_equal */
    assert_string_equal(k, "s/3");
    assert_int_equal(key_of(tr, "s/3", 1, 1, 0, k, sizeof(k)), 0); /* first_greater_than */
    assert_string_equal(k, "s/4");
    assert_int_equal(key_of(tr, "s/3", 1, 0, 0, k, sizeof(k)), 0); /* last_less_or_equal */
    assert_string_equal(k, "s/3");
    assert_int_equal(key_of(tr, "s/3", 0, 0, 0, k, sizeof(k)), 0); /* last_less_than */
    assert_string_equal(k, "s/2");
    assert_int_equal(key_of(tr, "s/25", 0, 1, 0, k, sizeof(k)), 0); /* between keys */
    assert_string_equal(k, "s/3");
    assert_int_equal(key_of(tr, "s/1", 0, 3, 0, k, sizeof(k)), 0); /* + 2 */
    assert_string_equal(k, "s/3");
    assert_int_equal(key_of(tr, "s/5", 1, -1, 0, k, sizeof(k)), 0); /* - 1 */
    assert_string_equal(k, "s/4");
    /* Past the last key: \xff; before the first: the empty key. */
    assert_int_equal(key_of(tr, "s/5", 1, 1000, 0, k, sizeof(k)), 0);
    assert_string_equal(k, "\xff");
    assert_int_equal(key_of(tr, "", 0, 0, 0, k, sizeof(k)), 0);
    assert_string_equal(k, "");
    /* A range between selectors: last_less_or_equal(s/2) to first_greater_than(s/4). */
    FDBFuture *f = fdb_transaction_get_range(tr, (const uint8_t *)"s/2", 3, 1, 0,
                                             (const uint8_t *)"s/4", 3, 1, 1, 0, 0,
                                             FDB_STREAMING_MODE_WANT_ALL, 0, 0, 0);
    assert_int_equal(wait_f(f), 0);
    const FDBKeyValue *kv;
    int count = 0;
    fdb_bool_t more = 1;
    assert_int_equal(fdb_future_get_keyvalue_array(f, &kv, &count, &more), 0);
    assert_int_equal(count, 3);
    assert_memory_equal(kv[0].key, "s/2", 3);
    assert_memory_equal(kv[2].key, "s/4", 3);
    fdb_future_destroy(f);
    fdb_transaction_destroy(tr);

    /* Resolving a selector reads the keys it passes: a key written there meanwhile conflicts,
     * unless the read was a snapshot read. */
    for (int snapshot = 0; snapshot < 2; snapshot++) {
        FDBTransaction *a = new_tr(), *b = new_tr();
        assert_int_equal(key_of(a, snapshot ? "s/4" : "s/3", 1, 1, snapshot, k, sizeof(k)), 0);
        assert_string_equal(k, snapshot ? "s/5" : "s/4");
        /* b writes between the key and what it found. */
        const char *between = snapshot ? "s/45" : "s/35";
        assert_int_equal(write_under(a, b, between, "new", "s/written", "a"), snapshot ? 0 : 1020);
        fdb_transaction_destroy(a);
        fdb_transaction_destroy(b);
    }
}

/* An Int option value: 8 bytes, little-endian. */
static void le64(uint8_t out[8], int64_t v)
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)((uint64_t)v >> (8 * i));
}

static void test_sizes_split_points_addresses(void **state)
{
    (void)state;
    FDBTransaction *tr = new_tr();
    char k[16], v[101];
    memset(v, 'v', 100);
    v[100] = '\0';
    int64_t total = 0;
    for (int i = 0; i < 100; i++) {
        snprintf(k, sizeof(k), "z/%02d", i);
        set_s(tr, k, v);
        total += (int64_t)strlen(k) + 100;
    }
    /* The approximate size counts what the transaction writes, and grows with it. */
    FDBFuture *f = fdb_transaction_get_approximate_size(tr);
    int64_t size1 = 0, size2 = 0;
    assert_int_equal(wait_f(f), 0);
    assert_int_equal(fdb_future_get_int64(f, &size1), 0);
    fdb_future_destroy(f);
    assert_true(size1 >= total);
    set_s(tr, "z/extra", v);
    f = fdb_transaction_get_approximate_size(tr);
    assert_int_equal(wait_f(f), 0);
    assert_int_equal(fdb_future_get_int64(f, &size2), 0);
    fdb_future_destroy(f);
    assert_true(size2 >= size1 + 107);
    fdb_transaction_clear(tr, (const uint8_t *)"z/extra", 7);
    assert_int_equal(commit(tr), 0);
    fdb_transaction_destroy(tr);

    tr = new_tr();
    /* The range size is the stored bytes of the range (exact on a kvq directory). */
    f = fdb_transaction_get_estimated_range_size_bytes(tr, (const uint8_t *)"z/", 2,
                                                       (const uint8_t *)"z0", 2);
    int64_t est = 0;
    assert_int_equal(wait_f(f), 0);
    assert_int_equal(fdb_future_get_int64(f, &est), 0);
    fdb_future_destroy(f);
    assert_int_equal(est, total);
    /* Split points: the range's begin first, its end last, and chunks near the size asked. */
    f = fdb_transaction_get_range_split_points(tr, (const uint8_t *)"z/", 2,
                                               (const uint8_t *)"z0", 2, 1000);
    assert_int_equal(wait_f(f), 0);
    const FDBKey *keys = NULL;
    int n = 0;
    assert_int_equal(fdb_future_get_key_array(f, &keys, &n), 0);
    assert_true(n >= 2 + (int)(total / 1000) - 1 && n <= 2 + (int)(total / 1000) + 1);
    assert_int_equal(keys[0].key_length, 2);
    assert_memory_equal(keys[0].key, "z/", 2);
    assert_int_equal(keys[n - 1].key_length, 2);
    assert_memory_equal(keys[n - 1].key, "z0", 2);
    for (int i = 1; i < n; i++) {
        int c = memcmp(keys[i - 1].key, keys[i].key,
                       (size_t)(keys[i - 1].key_length < keys[i].key_length
                                    ? keys[i - 1].key_length
                                    : keys[i].key_length));
        assert_true(c < 0 || (c == 0 && keys[i - 1].key_length < keys[i].key_length));
    }
    /* Each chunk holds at most 1000 bytes: 9 rows of 104. */
    assert_int_equal(keys[1].key_length, 4);
    assert_memory_equal(keys[1].key, "z/09", 4);
    fdb_future_release_memory(f);
    assert_int_equal(fdb_future_get_key_array(f, &keys, &n), 1102);
    fdb_future_destroy(f);
    f = fdb_transaction_get_range_split_points(tr, (const uint8_t *)"z/", 2,
                                               (const uint8_t *)"z0", 2, 0);
    assert_int_equal(wait_f(f), 2006);
    fdb_future_destroy(f);
    /* Every key is on this machine. */
    f = fdb_transaction_get_addresses_for_key(tr, (const uint8_t *)"z/01", 4);
    assert_int_equal(wait_f(f), 0);
    const char **addrs = NULL;
    assert_int_equal(fdb_future_get_string_array(f, &addrs, &n), 0);
    assert_int_equal(n, 1);
    assert_non_null(strchr(addrs[0], ':'));
    assert_memory_equal(addrs[0], "127.0.0.1", 9);
    fdb_future_destroy(f);
    fdb_transaction_destroy(tr);
}

static void test_set_read_version(void **state)
{
    (void)state;
    FDBTransaction *a = new_tr();
    set_s(a, "rv/k", "one");
    assert_int_equal(commit(a), 0);
    fdb_transaction_reset(a);
    FDBFuture *f = fdb_transaction_get_read_version(a);
    int64_t rv = 0;
    assert_int_equal(wait_f(f), 0);
    assert_int_equal(fdb_future_get_int64(f, &rv), 0);
    fdb_future_destroy(f);
    /* Nothing committed since: another transaction reads at that version. */
    FDBTransaction *b = new_tr();
    fdb_transaction_set_read_version(b, rv);
    int present = 0;
    char out[32];
    assert_int_equal(get_err(b, "rv/k", 0, &present, out, sizeof(out)), 0);
    assert_true(present);
    assert_string_equal(out, "one");
    f = fdb_transaction_get_read_version(b);
    int64_t got = 0;
    assert_int_equal(wait_f(f), 0);
    assert_int_equal(fdb_future_get_int64(f, &got), 0);
    fdb_future_destroy(f);
    assert_int_equal(got, rv);
    /* Once read, the version cannot change: read_version_already_set, deferred. */
    fdb_transaction_set_read_version(b, rv);
    assert_int_equal(get_err(b, "rv/k", 0, &present, out, sizeof(out)), 2010);
    fdb_transaction_reset(b);
    fdb_transaction_set_read_version(b, 0);
    assert_int_equal(get_err(b, "rv/k", 0, &present, out, sizeof(out)), 2011);
    /* After a commit the old version still reads its state, inside the window of versions the
     * storage keeps (as FoundationDB's 5 seconds); a version older than the window is
     * transaction_too_old, which on_error retries with a fresh read version. */
    fdb_transaction_reset(b);
    set_s(b, "rv/k", "two");
    assert_int_equal(commit(b), 0);
    fdb_transaction_reset(b);
    fdb_transaction_set_read_version(b, rv);
    assert_int_equal(get_err(b, "rv/k", 0, &present, out, sizeof(out)), 0);
    assert_string_equal(out, "one");
    fdb_transaction_reset(b);
    fdb_transaction_set_read_version(b, 1);
    fdb_error_t e = get_err(b, "rv/k", 0, &present, out, sizeof(out));
    assert_int_equal(e, 1007);
    f = fdb_transaction_on_error(b, e);
    assert_int_equal(wait_f(f), 0);
    fdb_future_destroy(f);
    assert_int_equal(get_err(b, "rv/k", 0, &present, out, sizeof(out)), 0);
    assert_string_equal(out, "two");
    /* A version the database has not reached: future_version. */
    fdb_transaction_reset(b);
    fdb_transaction_set_read_version(b, rv + 1000000000000LL);
    assert_int_equal(get_err(b, "rv/k", 0, &present, out, sizeof(out)), 1009);
    fdb_transaction_destroy(a);
    fdb_transaction_destroy(b);
}

static fdb_error_t opt(FDBTransaction *tr, int option)
{
    return fdb_transaction_set_option(tr, (FDBTransactionOption)option, NULL, 0);
}

/* The error a transaction holds for its next operation, read through a read-version request. */
static fdb_error_t deferred_err(FDBTransaction *tr)
{
    FDBFuture *f = fdb_transaction_get_read_version(tr);
    fdb_error_t err = wait_f(f);
    fdb_future_destroy(f);
    return err;
}

/* A transaction option as libfdb_c answers it: the call refuses only an unknown option (2007);
 * any other error (a bad value, an option set too late) becomes the transaction's deferred
 * error, returned by its next operation. Returns whichever there is, then resets tr. */
static fdb_error_t tr_opt(FDBTransaction *tr, int option, const uint8_t *value, int length)
{
    fdb_error_t err = fdb_transaction_set_option(tr, (FDBTransactionOption)option, value, length);
    if (err == 0)
        err = deferred_err(tr);
    fdb_transaction_reset(tr);
    return err;
}

static void test_transaction_options(void **state)
{
    (void)state;
    FDBTransaction *tr = new_tr();
    set_s(tr, "o/k", "stored");
    assert_int_equal(commit(tr), 0);
    fdb_transaction_reset(tr);
    int present = 0;
    char out[32];
    /* read_your_writes_disable: reads see the database, not the transaction's writes; it must
     * come first; watches are disabled. */
    assert_int_equal(opt(tr, FDB_TR_OPTION_READ_YOUR_WRITES_DISABLE), 0);
    set_s(tr, "o/k", "mine");
    assert_int_equal(get_err(tr, "o/k", 0, &present, out, sizeof(out)), 0);
    assert_string_equal(out, "stored");
    FDBFuture *w = fdb_transaction_watch(tr, (const uint8_t *)"o/k", 3);
    assert_int_equal(wait_f(w), 1034);
    fdb_future_destroy(w);
    /* Too late: the call succeeds and the transaction's next operation fails, as libfdb_c
     * hands options to the transaction on its network thread. */
    assert_int_equal(opt(tr, FDB_TR_OPTION_READ_YOUR_WRITES_DISABLE), 0);
    assert_int_equal(deferred_err(tr), 2000);
    assert_int_equal(commit(tr), 2000);
    fdb_transaction_reset(tr);
    assert_int_equal(get_err(tr, "o/k", 0, &present, out, sizeof(out)), 0);
    assert_int_equal(opt(tr, FDB_TR_OPTION_READ_YOUR_WRITES_DISABLE), 0);
    assert_int_equal(get_err(tr, "o/k", 0, &present, out, sizeof(out)), 2000);
    /* snapshot_ryw_disable: snapshot reads skip the transaction's writes, others see them. */
    fdb_transaction_reset(tr);
    assert_int_equal(opt(tr, FDB_TR_OPTION_SNAPSHOT_RYW_DISABLE), 0);
    set_s(tr, "o/k", "mine");
    assert_int_equal(get_err(tr, "o/k", 1, &present, out, sizeof(out)), 0);
    assert_string_equal(out, "stored");
    assert_int_equal(get_err(tr, "o/k", 0, &present, out, sizeof(out)), 0);
    assert_string_equal(out, "mine");
    assert_int_equal(opt(tr, FDB_TR_OPTION_SNAPSHOT_RYW_ENABLE), 0);
    assert_int_equal(get_err(tr, "o/k", 1, &present, out, sizeof(out)), 0);
    assert_string_equal(out, "mine");
    /* next_write_no_write_conflict_range: a reader of the key does not conflict with that
     * write; without the option it does. */
    for (int with = 0; with < 2; with++) {
        FDBTransaction *reader = new_tr();
        FDBTransaction *writer = new_tr();
        assert_int_equal(get_err(reader, "o/c", 0, &present, out, sizeof(out)), 0);
        if (with)
            assert_int_equal(opt(writer, FDB_TR_OPTION_NEXT_WRITE_NO_WRITE_CONFLICT_RANGE), 0);
        assert_int_equal(write_under(reader, writer, "o/c", "w", "o/r", "r"), with ? 0 : 1020);
        fdb_transaction_destroy(reader);
        fdb_transaction_destroy(writer);
    }
    /* size_limit: past it the transaction is too large (2101); out of range values are
     * refused. */
    fdb_transaction_reset(tr);
    uint8_t v8[8];
    le64(v8, 100);
    assert_int_equal(fdb_transaction_set_option(tr, FDB_TR_OPTION_SIZE_LIMIT, v8, 8), 0);
    char big[201];
    memset(big, 'b', 200);
    big[200] = '\0';
    set_s(tr, "o/big", big);
    assert_int_equal(commit(tr), 2101);
    le64(v8, 31);
    fdb_transaction_reset(tr);
    assert_int_equal(tr_opt(tr, FDB_TR_OPTION_SIZE_LIMIT, v8, 8), 2006);
    /* The system keys: writes need access_system_keys, reads read_system_keys (or access). */
    static const uint8_t sys[] = { 0xff, 's', 'y', 's' };
    fdb_transaction_reset(tr);
    fdb_transaction_set(tr, sys, 4, (const uint8_t *)"x", 1);
    assert_int_equal(commit(tr), 2004);
    fdb_transaction_reset(tr);
    assert_int_equal(opt(tr, FDB_TR_OPTION_ACCESS_SYSTEM_KEYS), 0);
    fdb_transaction_set(tr, sys, 4, (const uint8_t *)"x", 1);
    assert_int_equal(commit(tr), 0);
    fdb_transaction_reset(tr);
    FDBFuture *f = fdb_transaction_get(tr, sys, 4, 0);
    assert_int_equal(wait_f(f), 2004);
    fdb_future_destroy(f);
    fdb_transaction_reset(tr);
    assert_int_equal(opt(tr, FDB_TR_OPTION_READ_SYSTEM_KEYS), 0);
    f = fdb_transaction_get(tr, sys, 4, 0);
    assert_int_equal(wait_f(f), 0);
    fdb_bool_t p = 0;
    const uint8_t *val = NULL;
    int n = 0;
    assert_int_equal(fdb_future_get_value(f, &p, &val, &n), 0);
    assert_true(p && n == 1 && val[0] == 'x');
    fdb_future_destroy(f);
    fdb_transaction_set(tr, sys, 4, (const uint8_t *)"y", 1); /* read access only */
    assert_int_equal(commit(tr), 2004);
    /* Options about a cluster are accepted without effect; unknown ones are refused. */
    fdb_transaction_reset(tr);
    assert_int_equal(opt(tr, FDB_TR_OPTION_CAUSAL_READ_RISKY), 0);
    assert_int_equal(opt(tr, FDB_TR_OPTION_PRIORITY_BATCH), 0);
    assert_int_equal(fdb_transaction_set_option(tr, (FDBTransactionOption)FDB_TR_OPTION_TAG, (const uint8_t *)"t", 1),
                     0);
    assert_int_equal(opt(tr, FDB_TR_OPTION_READ_PRIORITY_LOW), 2007); /* 730 only */
    assert_int_equal(opt(tr, 12345), 2007);
    fdb_transaction_destroy(tr);
}

static void test_special_keys(void **state)
{
    (void)state;
    FDBTransaction *tr = new_tr();
    int present = 0;
    char out[4096];
    assert_int_equal(get_err(tr, "\xff\xff/cluster_file_path", 0, &present, out, sizeof(out)),
                     0);
    char real[4096];
    assert_non_null(realpath(cluster, real));
    assert_true(present);
    assert_string_equal(out, real);
    assert_int_equal(get_err(tr, "\xff\xff/connection_string", 0, &present, out, sizeof(out)),
                     0);
    char want[160];
    snprintf(want, sizeof(want), "kvq:%s/db", dir);
    assert_string_equal(out, want);
    assert_int_equal(get_err(tr, "\xff\xff/status/json", 0, &present, out, sizeof(out)), 0);
    assert_true(out[0] == '{');
    assert_non_null(strstr(out, "\"available\":true"));
    assert_int_equal(get_err(tr, "\xff\xff/no/such/module", 0, &present, out, sizeof(out)), 2113);
    /* The conflicting-keys module is there, and empty. */
    static const char ck[] = "\xff\xff/transaction/conflicting_keys/";
    static const char ck_end[] = "\xff\xff/transaction/conflicting_keys/\xff";
    FDBFuture *f = fdb_transaction_get_range(tr, (const uint8_t *)ck, (int)strlen(ck), 0, 1,
                                             (const uint8_t *)ck_end, (int)strlen(ck_end), 0, 1,
                                             0, 0, FDB_STREAMING_MODE_WANT_ALL, 1, 0, 0);
    assert_int_equal(wait_f(f), 0);
    const FDBKeyValue *kvs = NULL;
    int n = -1;
    fdb_bool_t more = 1;
    assert_int_equal(fdb_future_get_keyvalue_array(f, &kvs, &n, &more), 0);
    assert_int_equal(n, 0);
    assert_false(more);
    fdb_future_destroy(f);
    /* A range over the single-key modules returns them, in order. */
    f = fdb_transaction_get_range(tr, (const uint8_t *)"\xff\xff/c", 4, 0, 1,
                                  (const uint8_t *)"\xff\xff/d", 4, 0, 1, 0, 0,
                                  FDB_STREAMING_MODE_WANT_ALL, 1, 0, 0);
    assert_int_equal(wait_f(f), 0);
    assert_int_equal(fdb_future_get_keyvalue_array(f, &kvs, &n, &more), 0);
    assert_int_equal(n, 2);
    assert_memory_equal(kvs[0].key, "\xff\xff/cluster_file_path", 20);
    assert_memory_equal(kvs[1].key, "\xff\xff/connection_string", 20);
    fdb_future_destroy(f);
    /* Writes are disabled. */
    set_s(tr, "\xff\xff/cluster_file_path", "elsewhere");
    assert_int_equal(commit(tr), 2114);
    fdb_transaction_destroy(tr);
}

static int hook_runs;

static void hook(void *arg)
{
    *(int *)arg += 1;
}

static void test_unsupported_and_more(void **state)
{
    (void)state;
    /* Tenants: disabled. */
    FDBTenant *tenant = (FDBTenant *)&tenant;
    assert_int_equal(fdb_database_open_tenant(db, (const uint8_t *)"t", 1, &tenant), 2136);
    assert_null(tenant);
    FDBTransaction *tr = (FDBTransaction *)&tr;
    assert_int_equal(fdb_tenant_create_transaction(NULL, &tr), 2136);
    assert_null(tr);
    FDBFuture *f = fdb_tenant_get_id(NULL);
    assert_int_equal(wait_f(f), 2136);
    int64_t i64 = 0;
    assert_int_equal(fdb_future_get_int64(f, &i64), 2136);
    fdb_future_destroy(f);
    fdb_tenant_destroy(NULL);
    /* Management and blob granules: unsupported_operation, from every getter. */
    f = fdb_database_reboot_worker(db, (const uint8_t *)"127.0.0.1:4500", 14, 0, 0);
    assert_int_equal(wait_f(f), 2108);
    fdb_future_destroy(f);
    f = fdb_database_get_server_protocol(db, 0);
    uint64_t u64 = 0;
    assert_int_equal(wait_f(f), 2108);
    assert_int_equal(fdb_future_get_uint64(f, &u64), 2108);
    fdb_future_destroy(f);
    f = fdb_database_blobbify_range(db, (const uint8_t *)"a", 1, (const uint8_t *)"b", 1);
    fdb_bool_t b = 0;
    assert_int_equal(wait_f(f), 2108);
    assert_int_equal(fdb_future_get_bool(f, &b), 2108);
    fdb_future_destroy(f);
    assert_true(fdb_database_get_main_thread_busyness(db) == 0.0);
    tr = new_tr();
    f = fdb_transaction_get_tag_throttled_duration(tr);
    double d = 1.0;
    assert_int_equal(wait_f(f), 2108);
    assert_int_equal(fdb_future_get_double(f, &d), 2108);
    fdb_future_destroy(f);
    f = fdb_transaction_get_mapped_range(tr, (const uint8_t *)"a", 1, 0, 1, (const uint8_t *)"b",
                                         1, 0, 1, (const uint8_t *)"m", 1, 0, 0,
                                         FDB_STREAMING_MODE_WANT_ALL, 1, 0, 0);
    const FDBMappedKeyValue *mkv = NULL;
    int n = 0;
    fdb_bool_t more = 0;
    assert_int_equal(wait_f(f), 2108);
    assert_int_equal(fdb_future_get_mappedkeyvalue_array(f, &mkv, &n, &more), 2108);
    fdb_future_destroy(f);
    f = fdb_transaction_get_blob_granule_ranges(tr, (const uint8_t *)"a", 1,
                                                (const uint8_t *)"b", 1, 10);
    const FDBKeyRange *ranges = NULL;
    assert_int_equal(wait_f(f), 2108);
    assert_int_equal(fdb_future_get_keyrange_array(f, &ranges, &n), 2108);
    fdb_future_destroy(f);
    FDBReadBlobGranuleContext ctx;
    memset(&ctx, 0, sizeof(ctx));
    FDBResult *r = fdb_transaction_read_blob_granules(tr, (const uint8_t *)"a", 1,
                                                      (const uint8_t *)"b", 1, 0, -2, ctx);
    const FDBKeyValue *kvs = NULL;
    assert_non_null(r);
    assert_int_equal(fdb_result_get_keyvalue_array(r, &kvs, &n, &more), 2108);
    fdb_result_destroy(r);
    fdb_transaction_destroy(tr);
    /* A database from a connection string sees the same directory. */
    char conn[160];
    snprintf(conn, sizeof(conn), "kvq:%s/db", dir);
    FDBDatabase *d2 = NULL;
    assert_int_equal(fdb_create_database_from_connection_string(conn, &d2), 0);
    tr = NULL;
    assert_int_equal(fdb_database_create_transaction(d2, &tr), 0);
    int present = 0;
    char out[32];
    assert_int_equal(get_err(tr, "o/k", 0, &present, out, sizeof(out)), 0);
    assert_string_equal(out, "stored");
    fdb_transaction_destroy(tr);
    fdb_database_destroy(d2);
    assert_int_equal(fdb_create_database_from_connection_string("desc:id@127.0.0.1:4500", &d2),
                     2104);
    /* The completion hook runs as the network thread ends (checked in teardown). */
    assert_int_equal(fdb_add_network_thread_completion_hook(hook, &hook_runs), 0);
    assert_int_equal(fdb_add_network_thread_completion_hook(NULL, NULL), 2006);
}

/* A get_range of the plain range [b, e) with the given limits: its error, the rows and `more`. */
static fdb_error_t range_of(FDBTransaction *tr, const char *b, const char *e, int limit,
                           int target_bytes, FDBStreamingMode mode, int iteration, int *count,
                           fdb_bool_t *more)
{
    FDBFuture *f = fdb_transaction_get_range(tr, (const uint8_t *)b, (int)strlen(b), 0, 1,
                                             (const uint8_t *)e, (int)strlen(e), 0, 1, limit,
                                             target_bytes, mode, iteration, 0, 0);
    fdb_error_t err = wait_f(f);
    *count = -1;
    if (err == 0) {
        const FDBKeyValue *kv;
        assert_int_equal(fdb_future_get_keyvalue_array(f, &kv, count, more), 0);
    }
    fdb_future_destroy(f);
    return err;
}

/* get_range's parameters as api-c.rst and fdb_c.cpp define them: 0 is no limit, and so is -1;
 * below that the limits are invalid (2012); EXACT needs a limit (2210); ITERATOR counts from 1
 * and an unknown mode is an invalid operation (2000). A key selector's or_equal is a boolean:
 * any non-zero value is true. */
static void test_range_parameters(void **state)
{
    (void)state;
    FDBTransaction *tr = new_tr();
    set_s(tr, "p/a", "1");
    set_s(tr, "p/b", "2");
    set_s(tr, "p/c", "3");
    assert_int_equal(commit(tr), 0);
    fdb_transaction_reset(tr);
    int n;
    fdb_bool_t more;
    assert_int_equal(range_of(tr, "p/", "p0", 0, 0, FDB_STREAMING_MODE_ITERATOR, 1, &n, &more), 0);
    assert_int_equal(n, 3);
    assert_int_equal(range_of(tr, "p/", "p0", 0, 0, FDB_STREAMING_MODE_ITERATOR, 0, &n, &more),
                     2000);
    assert_int_equal(range_of(tr, "p/", "p0", 0, 0, (FDBStreamingMode)5, 1, &n, &more), 2000);
    assert_int_equal(range_of(tr, "p/", "p0", 0, 0, (FDBStreamingMode)-3, 1, &n, &more), 2000);
    assert_int_equal(range_of(tr, "p/", "p0", 0, 0, FDB_STREAMING_MODE_EXACT, 0, &n, &more), 2210);
    assert_int_equal(range_of(tr, "p/", "p0", -1, -1, FDB_STREAMING_MODE_EXACT, 0, &n, &more),
                     2210);
    /* A byte limit alone is a limit: at least one row comes back. */
    assert_int_equal(range_of(tr, "p/", "p0", 0, 10, FDB_STREAMING_MODE_EXACT, 0, &n, &more), 0);
    assert_true(n >= 1);
    assert_int_equal(range_of(tr, "p/", "p0", -1, 0, FDB_STREAMING_MODE_WANT_ALL, 0, &n, &more),
                     0);
    assert_int_equal(n, 3);
    assert_int_equal(range_of(tr, "p/", "p0", -2, 0, FDB_STREAMING_MODE_WANT_ALL, 0, &n, &more),
                     2012);
    assert_int_equal(range_of(tr, "p/", "p0", 0, -2, FDB_STREAMING_MODE_WANT_ALL, 0, &n, &more),
                     2012);
    /* or_equal 2 is true: first_greater_than(p/a) is p/b. */
    FDBFuture *f = fdb_transaction_get_range(tr, (const uint8_t *)"p/a", 3, 2, 1,
                                             (const uint8_t *)"p0", 2, 0, 1, 0, 0,
                                             FDB_STREAMING_MODE_WANT_ALL, 0, 0, 0);
    assert_int_equal(wait_f(f), 0);
    const FDBKeyValue *kv;
    assert_int_equal(fdb_future_get_keyvalue_array(f, &kv, &n, &more), 0);
    assert_int_equal(n, 2);
    assert_memory_equal(kv[0].key, "p/b", 3);
    fdb_future_destroy(f);
    char k[16];
    assert_int_equal(key_of(tr, "p/a", 2, 1, 0, k, sizeof(k)), 0);
    assert_string_equal(k, "p/b");
    /* A selector in the system keys needs read_system_keys (key_outside_legal_range). */
    assert_int_equal(key_of(tr, "\xff/x", 0, 1, 0, k, sizeof(k)), 2004);
    fdb_transaction_reset(tr);
    assert_int_equal(opt(tr, FDB_TR_OPTION_READ_SYSTEM_KEYS), 0);
    assert_int_equal(key_of(tr, "\xff/x", 0, 1, 0, k, sizeof(k)), 0);
    fdb_transaction_destroy(tr);
}

/* on_error of a success is an invalid operation (2000); once on_error has failed, the
 * transaction is cancelled (1025) until it is reset. add_conflict_range takes READ or WRITE
 * only. */
static void test_on_error_failures(void **state)
{
    (void)state;
    FDBTransaction *tr = new_tr();
    int present;
    char v[16];
    assert_int_equal(on_error(tr, 0), 2000);
    assert_int_equal(get_s(tr, "oe/k", &present, v, sizeof(v)), 1025);
    set_s(tr, "oe/k", "1");
    assert_int_equal(commit(tr), 1025);
    fdb_transaction_reset(tr);
    assert_int_equal(get_s(tr, "oe/k", &present, v, sizeof(v)), 0);
    assert_int_equal(on_error(tr, 2004), 2004);
    assert_int_equal(get_s(tr, "oe/k", &present, v, sizeof(v)), 1025);
    fdb_transaction_reset(tr);
    assert_int_equal(on_error(tr, 1020), 0); /* retried: usable at once */
    assert_int_equal(get_s(tr, "oe/k", &present, v, sizeof(v)), 0);
    assert_int_equal(fdb_transaction_add_conflict_range(tr, (const uint8_t *)"a", 1,
                                                        (const uint8_t *)"b", 1,
                                                        (FDBConflictRangeType)2),
                     2000);
    assert_int_equal(fdb_transaction_add_conflict_range(tr, (const uint8_t *)"b", 1,
                                                        (const uint8_t *)"a", 1,
                                                        FDB_CONFLICT_RANGE_TYPE_READ),
                     2005);
    assert_int_equal(fdb_transaction_add_conflict_range(tr, (const uint8_t *)"\xff/a", 2,
                                                        (const uint8_t *)"\xff/b", 2,
                                                        FDB_CONFLICT_RANGE_TYPE_WRITE),
                     2004);
    fdb_transaction_destroy(tr);
}

/* The value of k after one atomic operation on `old` (NULL: a missing key), in a committed
 * transaction; *n its length, or -1 when the key is gone. */
static void atomic_on(const char *k, const uint8_t *old, int old_len, int op, const uint8_t *param,
                      int param_len, uint8_t *out, int *n)
{
    FDBTransaction *tr = new_tr();
    if (old != NULL)
        fdb_transaction_set(tr, (const uint8_t *)k, (int)strlen(k), old, old_len);
    else
        fdb_transaction_clear(tr, (const uint8_t *)k, (int)strlen(k));
    assert_int_equal(commit(tr), 0);
    fdb_transaction_reset(tr);
    fdb_transaction_atomic_op(tr, (const uint8_t *)k, (int)strlen(k), param, param_len,
                              (FDBMutationType)op);
    assert_int_equal(commit(tr), 0);
    fdb_transaction_reset(tr);
    FDBFuture *f = fdb_transaction_get(tr, (const uint8_t *)k, (int)strlen(k), 0);
    assert_int_equal(wait_f(f), 0);
    fdb_bool_t present = 0;
    const uint8_t *v = NULL;
    assert_int_equal(fdb_future_get_value(f, &present, &v, n), 0);
    if (present)
        memcpy(out, v, (size_t)*n);
    else
        *n = -1;
    fdb_future_destroy(f);
    fdb_transaction_destroy(tr);
}

#define U8(...) ((const uint8_t[]){ __VA_ARGS__ })

/* Every mutation type of fdb_c_options (api-c.rst, "atomic operations"), each on a present and
 * a missing key where that differs. */
static void test_atomic_ops(void **state)
{
    (void)state;
    uint8_t v[64];
    int n;
    /* ADD: little-endian; the old value is zero-extended or cut to the operand's length. */
    atomic_on("m/add", U8(0xff, 0x00), 2, 2, U8(0x01, 0x00, 0x00), 3, v, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(v, U8(0x00, 0x01, 0x00), 3);
    atomic_on("m/add", U8(0x05, 0x07), 2, 2, U8(0x01), 1, v, &n);
    assert_int_equal(n, 1);
    assert_int_equal(v[0], 0x06);
    atomic_on("m/add", NULL, 0, 2, U8(0x09), 1, v, &n);
    assert_int_equal(n, 1);
    assert_int_equal(v[0], 0x09);
    atomic_on("m/and", U8(0x0f), 1, 6, U8(0x3c), 1, v, &n);
    assert_int_equal(v[0], 0x0c);
    atomic_on("m/and", NULL, 0, 6, U8(0x3c), 1, v, &n);
    assert_int_equal(v[0], 0x3c);
    atomic_on("m/or", U8(0x0f), 1, 7, U8(0x30), 1, v, &n);
    assert_int_equal(v[0], 0x3f);
    atomic_on("m/xor", U8(0x0f), 1, 8, U8(0x3c), 1, v, &n);
    assert_int_equal(v[0], 0x33);
    /* MAX and MIN: unsigned little-endian integers. */
    atomic_on("m/max", U8(0x00, 0x01), 2, 12, U8(0xff, 0x00), 2, v, &n);
    assert_memory_equal(v, U8(0x00, 0x01), 2);
    atomic_on("m/min", U8(0x00, 0x01), 2, 13, U8(0xff, 0x00), 2, v, &n);
    assert_memory_equal(v, U8(0xff, 0x00), 2);
    atomic_on("m/min", NULL, 0, 13, U8(0x07), 1, v, &n);
    assert_int_equal(v[0], 0x07);
    /* BYTE_MIN and BYTE_MAX: lexicographic. */
    atomic_on("m/bmin", (const uint8_t *)"b", 1, 16, (const uint8_t *)"ab", 2, v, &n);
    assert_int_equal(n, 2);
    assert_memory_equal(v, "ab", 2);
    atomic_on("m/bmax", (const uint8_t *)"b", 1, 17, (const uint8_t *)"ab", 2, v, &n);
    assert_int_equal(n, 1);
    assert_memory_equal(v, "b", 1);
    /* APPEND_IF_FITS: appended (to nothing when missing), unless the value would be too long,
     * which changes nothing and is no error. */
    atomic_on("m/app", (const uint8_t *)"ab", 2, 9, (const uint8_t *)"cd", 2, v, &n);
    assert_int_equal(n, 4);
    assert_memory_equal(v, "abcd", 4);
    atomic_on("m/app", NULL, 0, 9, (const uint8_t *)"cd", 2, v, &n);
    assert_int_equal(n, 2);
    assert_memory_equal(v, "cd", 2);
    uint8_t *big = calloc(100000, 1);
    assert_non_null(big);
    atomic_on("m/app", (const uint8_t *)"ab", 2, 9, big, 99999, v, &n);
    assert_int_equal(n, 2);
    assert_memory_equal(v, "ab", 2);
    free(big);
    /* COMPARE_AND_CLEAR: cleared when equal, else untouched. */
    atomic_on("m/cac", (const uint8_t *)"same", 4, 20, (const uint8_t *)"same", 4, v, &n);
    assert_int_equal(n, -1);
    atomic_on("m/cac", (const uint8_t *)"same", 4, 20, (const uint8_t *)"other", 5, v, &n);
    assert_int_equal(n, 4);
    atomic_on("m/cac", NULL, 0, 20, (const uint8_t *)"x", 1, v, &n);
    assert_int_equal(n, -1);
    /* Read back in the same transaction: the applied value. */
    FDBTransaction *tr = new_tr();
    fdb_transaction_set(tr, (const uint8_t *)"m/ryw", 5, (const uint8_t *)"ab", 2);
    fdb_transaction_atomic_op(tr, (const uint8_t *)"m/ryw", 5, (const uint8_t *)"c", 1,
                              (FDBMutationType)9);
    int present;
    char s[16];
    assert_int_equal(get_s(tr, "m/ryw", &present, s, sizeof(s)), 0);
    assert_string_equal(s, "abc");
    fdb_transaction_atomic_op(tr, (const uint8_t *)"m/ryw", 5, (const uint8_t *)"abc", 3,
                              (FDBMutationType)20);
    assert_int_equal(get_s(tr, "m/ryw", &present, s, sizeof(s)), 0);
    assert_int_equal(present, 0);
    assert_int_equal(commit(tr), 0);
    fdb_transaction_reset(tr);
    /* Neither reads its key: a change of it by a transaction that commits first is no conflict,
     * and they apply to the value that one committed. */
    set_s(tr, "m/cc", "old");
    set_s(tr, "m/ca", "a");
    assert_int_equal(commit(tr), 0);
    fdb_transaction_reset(tr);
    FDBTransaction *other = new_tr();
    assert_int_equal(get_s(tr, "m/unrelated", &present, s, sizeof(s)), 0); /* a read version */
    fdb_transaction_atomic_op(tr, (const uint8_t *)"m/cc", 4, (const uint8_t *)"new", 3,
                              (FDBMutationType)20);
    fdb_transaction_atomic_op(tr, (const uint8_t *)"m/ca", 4, (const uint8_t *)"c", 1,
                              (FDBMutationType)9);
    set_s(other, "m/cc", "new");
    fdb_transaction_atomic_op(other, (const uint8_t *)"m/ca", 4, (const uint8_t *)"b", 1,
                              (FDBMutationType)9);
    assert_int_equal(commit(other), 0);
    assert_int_equal(commit(tr), 0);
    fdb_transaction_reset(tr);
    assert_int_equal(get_s(tr, "m/cc", &present, s, sizeof(s)), 0);
    assert_int_equal(present, 0);
    assert_int_equal(get_s(tr, "m/ca", &present, s, sizeof(s)), 0);
    assert_string_equal(s, "abc");
    fdb_transaction_reset(tr);
    fdb_transaction_destroy(other);
    /* An unknown type is invalid_mutation_type (2018), with the commit. */
    fdb_transaction_atomic_op(tr, (const uint8_t *)"m/bad", 5, U8(1), 1, (FDBMutationType)99);
    assert_int_equal(commit(tr), 2018);
    fdb_transaction_reset(tr);
    /* SET_VERSIONSTAMPED_KEY and _VALUE: the 10-byte stamp at the offset given by the last 4
     * bytes (little-endian), the one fdb_transaction_get_versionstamp reports. */
    FDBFuture *vs = fdb_transaction_get_versionstamp(tr);
    assert_false(fdb_future_is_ready(vs));
    uint8_t key[2 + 10 + 4] = { 'm', '/', 0 };
    key[12] = 2;
    fdb_transaction_atomic_op(tr, key, (int)sizeof(key), (const uint8_t *)"kv", 2,
                              FDB_MUTATION_TYPE_SET_VERSIONSTAMPED_KEY);
    uint8_t val[1 + 10 + 4] = { 'v' };
    val[11] = 1;
    fdb_transaction_atomic_op(tr, (const uint8_t *)"m/vsv", 5, val, (int)sizeof(val),
                              FDB_MUTATION_TYPE_SET_VERSIONSTAMPED_VALUE);
    assert_int_equal(commit(tr), 0);
    assert_int_equal(wait_f(vs), 0);
    const uint8_t *stamp;
    int stamp_len = 0;
    assert_int_equal(fdb_future_get_key(vs, &stamp, &stamp_len), 0);
    assert_int_equal(stamp_len, 10);
    fdb_transaction_reset(tr);
    FDBFuture *f = fdb_transaction_get(tr, (const uint8_t *)"m/vsv", 5, 0);
    assert_int_equal(wait_f(f), 0);
    fdb_bool_t p = 0;
    const uint8_t *got;
    int got_len = 0;
    assert_int_equal(fdb_future_get_value(f, &p, &got, &got_len), 0);
    assert_int_equal(got_len, 11);
    assert_memory_equal(got + 1, stamp, 10);
    fdb_future_destroy(f);
    memcpy(key + 2, stamp, 10);
    f = fdb_transaction_get(tr, key, 12, 0);
    assert_int_equal(wait_f(f), 0);
    assert_int_equal(fdb_future_get_value(f, &p, &got, &got_len), 0);
    assert_true(p);
    fdb_future_destroy(f);
    fdb_future_destroy(vs);
    /* A read-only commit has no versionstamp (no_commit_version, 2021); a placeholder past the
     * key's end is client_invalid_operation (2000). */
    fdb_transaction_reset(tr);
    vs = fdb_transaction_get_versionstamp(tr);
    assert_int_equal(commit(tr), 0);
    assert_int_equal(wait_f(vs), 2021);
    fdb_future_destroy(vs);
    fdb_transaction_reset(tr);
    fdb_transaction_atomic_op(tr, (const uint8_t *)"ab\x00\x00\x00\x00", 6, U8(1), 1,
                              FDB_MUTATION_TYPE_SET_VERSIONSTAMPED_KEY);
    assert_int_equal(commit(tr), 2000);
    fdb_transaction_destroy(tr);
}

/* The options of fdb_c_options for API 710: those without a local meaning are accepted, the
 * 7.3 ones refused (invalid_option), and the database's transaction options reach every new or
 * reset transaction. */
static void test_option_lists(void **state)
{
    (void)state;
    assert_int_equal(fdb_network_set_option(61, NULL, 0), 2007); /* after setup */
    assert_int_equal(fdb_network_set_option(43, (const uint8_t *)"/c.pem", 6), 0); /* TLS path */
    assert_int_equal(fdb_network_set_option(70, NULL, 0), 0);
    assert_int_equal(fdb_network_set_option(37, NULL, 0), 2007); /* 730 only */
    uint8_t i64[8] = { 16 };
    assert_int_equal(fdb_database_set_option(db, 10, i64, 8), 0); /* location_cache_size */
    assert_int_equal(fdb_database_set_option(db, 21, (const uint8_t *)"m", 1), 0);
    assert_int_equal(fdb_database_set_option(db, 506, NULL, 0), 2007); /* 730 only */
    FDBTransaction *tr = new_tr();
    static const int accepted[] = { 23, 52, 130, 303, 406, 711, 713, 714, 1000 };
    for (size_t i = 0; i < sizeof(accepted) / sizeof(accepted[0]); i++)
        assert_int_equal(opt(tr, accepted[i]), 0);
    static const int refused[] = { 300, 1100, 2000, 505, 9999 };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        assert_int_equal(opt(tr, refused[i]), 2007);
    fdb_transaction_destroy(tr);
    /* snapshot_ryw_disable on the database: snapshot reads of new transactions do not see
     * their own writes; after a reset neither. */
    assert_int_equal(fdb_database_set_option(db, 27, NULL, 0), 0);
    tr = new_tr();
    for (int round = 0; round < 2; round++) {
        set_s(tr, "ol/k", "mine");
        FDBFuture *f = fdb_transaction_get(tr, (const uint8_t *)"ol/k", 4, 1);
        assert_int_equal(wait_f(f), 0);
        fdb_bool_t present = 1;
        const uint8_t *v;
        int n;
        assert_int_equal(fdb_future_get_value(f, &present, &v, &n), 0);
        assert_false(present);
        fdb_future_destroy(f);
        fdb_transaction_reset(tr);
    }
    fdb_transaction_destroy(tr);
    assert_int_equal(fdb_database_set_option(db, 26, NULL, 0), 0);
    /* The database's timeout survives a reset. */
    uint8_t one_ms[8] = { 1 };
    assert_int_equal(fdb_database_set_option(db, 500, one_ms, 8), 0);
    tr = new_tr();
    fdb_transaction_reset(tr);
    usleep(50000);
    int present;
    char v[16];
    assert_int_equal(get_s(tr, "ol/k", &present, v, sizeof(v)), 1031);
    fdb_transaction_destroy(tr);
    uint8_t off[8] = { 0 };
    assert_int_equal(fdb_database_set_option(db, 500, off, 8), 0);
}

/* Waits until *n reaches want, a callback on the network thread having counted there; bounded
 * only so that a lost callback fails the test instead of hanging it (a busy machine may take
 * seconds). */
static void wait_count(int *n, int want)
{
    for (int i = 0; i < 60000 && __atomic_load_n(n, __ATOMIC_SEQ_CST) < want; i++)
        usleep(1000);
}

struct cb_seen {
    int runs;
    pthread_t thread;
};

static void on_ready(FDBFuture *f, void *arg)
{
    (void)f;
    struct cb_seen *c = arg;
    c->thread = pthread_self();
    __atomic_add_fetch(&c->runs, 1, __ATOMIC_SEQ_CST);
}

/* Callbacks run once: at once in the caller's thread for a ready future, else on the network
 * thread when it completes. fdb_future_cancel ends a watch with operation_cancelled (1101) and
 * leaves a ready future as it was. The unsupported calls answer unsupported_operation (2108)
 * or tenants_disabled (2136). */
static void test_callbacks_cancel_unsupported(void **state)
{
    (void)state;
    FDBTransaction *tr = new_tr();
    struct cb_seen c = { 0 };
    FDBFuture *f = fdb_transaction_get(tr, (const uint8_t *)"cb/k", 4, 0);
    assert_int_equal(fdb_future_block_until_ready(f), 0);
    assert_int_equal(fdb_future_set_callback(f, on_ready, &c), 0);
    assert_int_equal(c.runs, 1);
    assert_true(pthread_equal(c.thread, pthread_self()));
    fdb_future_cancel(f);
    assert_int_equal(fdb_future_get_error(f), 0);
    fdb_future_destroy(f);
    /* A watch completes later, on the network thread. */
    FDBFuture *w = fdb_transaction_watch(tr, (const uint8_t *)"cb/k", 4);
    assert_int_equal(commit(tr), 0);
    struct cb_seen cw = { 0 };
    assert_int_equal(fdb_future_set_callback(w, on_ready, &cw), 0);
    FDBTransaction *other = new_tr();
    set_s(other, "cb/k", "changed");
    assert_int_equal(commit(other), 0);
    assert_int_equal(wait_f(w), 0);
    wait_count(&cw.runs, 1);
    assert_int_equal(__atomic_load_n(&cw.runs, __ATOMIC_SEQ_CST), 1);
    assert_false(pthread_equal(cw.thread, pthread_self()));
    fdb_future_destroy(w);
    fdb_transaction_reset(tr);
    w = fdb_transaction_watch(tr, (const uint8_t *)"cb/k", 4);
    assert_int_equal(commit(tr), 0);
    fdb_future_cancel(w);
    assert_int_equal(wait_f(w), 1101);
    fdb_future_destroy(w);
    fdb_transaction_destroy(other);
    /* Unsupported calls. */
    const uint8_t *a = (const uint8_t *)"a", *b = (const uint8_t *)"b";
    FDBFuture *u[] = {
        fdb_database_create_snapshot(db, a, 1, b, 1),
        fdb_database_force_recovery_with_data_loss(db, a, 1),
        fdb_database_purge_blob_granules(db, a, 1, b, 1, 0, 0),
        fdb_database_wait_purge_granules_complete(db, a, 1),
        fdb_database_blobbify_range_blocking(db, a, 1, b, 1),
        fdb_database_unblobbify_range(db, a, 1, b, 1),
        fdb_database_list_blobbified_ranges(db, a, 1, b, 1, 10),
        fdb_database_verify_blob_range(db, a, 1, b, 1, 0),
        fdb_database_flush_blob_range(db, a, 1, b, 1, 0, 0),
        fdb_database_get_client_status(db),
        fdb_transaction_get_total_cost(tr),
        fdb_transaction_summarize_blob_granules(tr, a, 1, b, 1, 0, 10),
        fdb_transaction_read_blob_granules_description(tr, a, 1, b, 1, 0, 0, NULL),
    };
    for (size_t i = 0; i < sizeof(u) / sizeof(u[0]); i++) {
        assert_int_equal(wait_f(u[i]), 2108);
        fdb_future_destroy(u[i]);
    }
    FDBFuture *t[] = {
        fdb_tenant_purge_blob_granules(NULL, a, 1, b, 1, 0, 0),
        fdb_tenant_wait_purge_granules_complete(NULL, a, 1),
        fdb_tenant_blobbify_range(NULL, a, 1, b, 1),
        fdb_tenant_blobbify_range_blocking(NULL, a, 1, b, 1),
        fdb_tenant_unblobbify_range(NULL, a, 1, b, 1),
        fdb_tenant_list_blobbified_ranges(NULL, a, 1, b, 1, 10),
        fdb_tenant_verify_blob_range(NULL, a, 1, b, 1, 0),
        fdb_tenant_flush_blob_range(NULL, a, 1, b, 1, 0, 0),
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        fdb_error_t e = wait_f(t[i]);
        assert_true(e == 2136 || e == 2108);
        fdb_future_destroy(t[i]);
    }
    f = fdb_transaction_summarize_blob_granules(tr, a, 1, b, 1, 0, 10);
    const FDBGranuleSummary *gs;
    int n;
    assert_int_equal(wait_f(f), 2108);
    assert_int_equal(fdb_future_get_granule_summary_array(f, &gs, &n), 2108);
    fdb_future_destroy(f);
    f = fdb_transaction_read_blob_granules_description(tr, a, 1, b, 1, 0, 0, NULL);
    FDBBGFileDescription *desc;
    assert_int_equal(wait_f(f), 2108);
    assert_int_equal(fdb_future_readbg_get_descriptions(f, &desc, &n), 2108);
    fdb_future_destroy(f);
    FDBResult *r = fdb_readbg_parse_snapshot_file(a, 1, NULL, NULL);
    const FDBKeyValue *kvs;
    fdb_bool_t more;
    assert_int_equal(fdb_result_get_keyvalue_array(r, &kvs, &n, &more), 2108);
    fdb_result_destroy(r);
    r = fdb_readbg_parse_delta_file(a, 1, NULL, NULL);
    const FDBBGMutation *muts;
    assert_int_equal(fdb_result_get_bg_mutations_array(r, &muts, &n), 2108);
    fdb_result_destroy(r);
    fdb_transaction_destroy(tr);
}

/* Option values as FoundationDB's client checks them (NativeAPI, ReadYourWrites and
 * MultiVersionTransaction's option handling): a value is present when its pointer is not NULL.
 * An option that takes none refuses a non-empty value, one that needs a value refuses a missing
 * one, Int options take 8 bytes within their range: invalid_option_value (2006) otherwise. A
 * transaction option's error is the transaction's deferred error (tr_opt); a database or
 * network option's is the call's. */
static void test_option_values(void **state)
{
    (void)state;
    const uint8_t *x = (const uint8_t *)"x";
    const uint8_t *empty = (const uint8_t *)"";
    uint8_t v8[8];
    FDBTransaction *tr = new_tr();
    /* Options without a value. */
    static const int none[] = { 10, 20, 23, 30, 51, 52, 200, 201, 301, 302, 303,
                                600, 601, 700, 701, 702, 712, 713, 1101 };
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
        assert_int_equal(tr_opt(tr, none[i], x, 1), 2006);
        assert_int_equal(tr_opt(tr, none[i], empty, 0), 0);
    }
    fdb_transaction_reset(tr);
    /* Options that need one. */
    assert_int_equal(tr_opt(tr, 800, NULL, 0), 2006);
    assert_int_equal(tr_opt(tr, 800, x, 1), 0);
    assert_int_equal(tr_opt(tr, 801, NULL, 0), 2006);
    assert_int_equal(tr_opt(tr, 403, NULL, 0), 2006);
    assert_int_equal(tr_opt(tr, 403, empty, 0), 2006);
    uint8_t long_id[101];
    memset(long_id, 'i', sizeof(long_id));
    assert_int_equal(tr_opt(tr, 403, long_id, 101), 2006);
    assert_int_equal(tr_opt(tr, 403, long_id, 100), 0);
    assert_int_equal(tr_opt(tr, 900, x, 1), 2006);
    /* Int options: 8 bytes, within range. */
    assert_int_equal(tr_opt(tr, FDB_TR_OPTION_TIMEOUT, NULL, 0), 2006);
    assert_int_equal(tr_opt(tr, FDB_TR_OPTION_TIMEOUT, v8, 4), 2006);
    le64(v8, -1);
    assert_int_equal(tr_opt(tr, FDB_TR_OPTION_TIMEOUT, v8, 8), 2006);
    assert_int_equal(tr_opt(tr, FDB_TR_OPTION_RETRY_LIMIT, v8, 8), 0);
    assert_int_equal(tr_opt(tr, FDB_TR_OPTION_MAX_RETRY_DELAY, v8, 8), 2006);
    le64(v8, -2);
    assert_int_equal(tr_opt(tr, FDB_TR_OPTION_RETRY_LIMIT, v8, 8), 2006);
    le64(v8, 0);
    assert_int_equal(tr_opt(tr, 405, v8, 8), 2006);
    le64(v8, 1000);
    assert_int_equal(tr_opt(tr, 405, v8, 8), 0);
    /* The options were checked, not applied: the transaction works. */
    set_s(tr, "ov/k", "v");
    assert_int_equal(commit(tr), 0);
    fdb_transaction_destroy(tr);

    /* Database options. */
    assert_int_equal(fdb_database_set_option(db, 26, x, 1), 2006);
    assert_int_equal(fdb_database_set_option(db, 27, x, 1), 2006);
    assert_int_equal(fdb_database_set_option(db, 504, x, 1), 2006);
    assert_int_equal(fdb_database_set_option(db, 700, x, 1), 2006);
    assert_int_equal(fdb_database_set_option(db, 800, x, 1), 2006);
    assert_int_equal(fdb_database_set_option(db, 10, NULL, 0), 2006);
    assert_int_equal(fdb_database_set_option(db, 20, NULL, 0), 2006);
    le64(v8, 2000000);
    assert_int_equal(fdb_database_set_option(db, 20, v8, 8), 2006); /* at most 1,000,000 */
    le64(v8, 101);
    assert_int_equal(fdb_database_set_option(db, 900, v8, 8), 2006); /* a percentage */
    le64(v8, 10000);
    assert_int_equal(fdb_database_set_option(db, 20, v8, 8), 0);
    assert_int_equal(fdb_database_set_option(db, 504, empty, 0), 0);

    /* Network options. */
    assert_int_equal(fdb_network_set_option(70, x, 1), 2006);
    assert_int_equal(fdb_network_set_option(71, x, 1), 2006);
    assert_int_equal(fdb_network_set_option(31, NULL, 0), 2006);
    assert_int_equal(fdb_network_set_option(31, x, 1), 2006);
    assert_int_equal(fdb_network_set_option(43, NULL, 0), 2006);
    assert_int_equal(fdb_network_set_option(40, NULL, 0), 2006);
    assert_int_equal(fdb_network_set_option(40, (const uint8_t *)"no_equals", 9), 2006);
    assert_int_equal(fdb_network_set_option(40, (const uint8_t *)"k=v", 3), 0);
    assert_int_equal(fdb_network_set_option(34, (const uint8_t *)"yaml", 4), 2006);
    assert_int_equal(fdb_network_set_option(34, (const uint8_t *)"json", 4), 0);
    assert_int_equal(fdb_network_set_option(35, (const uint8_t *)"realtime", 8), 0);
    assert_int_equal(fdb_network_set_option(35, (const uint8_t *)"later", 5), 2006);
    assert_int_equal(fdb_network_set_option(36, (const uint8_t *)"bad id", 6), 2006);
    assert_int_equal(fdb_network_set_option(36, (const uint8_t *)"good_id1", 8), 0);
    assert_int_equal(fdb_network_set_option(90, (const uint8_t *)"other", 5), 2006);
    le64(v8, 101);
    assert_int_equal(fdb_network_set_option(82, v8, 8), 2006);
    le64(v8, 50);
    assert_int_equal(fdb_network_set_option(82, v8, 8), 0);
    assert_int_equal(fdb_network_set_option(30, NULL, 0), 0); /* trace_enable: optional */
    assert_int_equal(fdb_network_set_option(48, x, 1), 0);    /* buggify_enable: unchecked */
}

/* After fdb_setup_network, as MultiVersionApi::setNetworkOption decides: the options that
 * shape the multi-version client are invalid_option (2007), an external library is looked for
 * first (file_not_found, 1511), the hidden external_client is an internal_error (4100), and
 * supported_client_versions is taken only now; every other option is still accepted. */
static void test_network_options_after_setup(void **state)
{
    (void)state;
    uint8_t v8[8];
    le64(v8, 2);
    assert_int_equal(fdb_network_set_option(60, NULL, 0), 2007); /* disable_multi_version */
    assert_int_equal(fdb_network_set_option(61, NULL, 0), 2007); /* callbacks_on_external */
    assert_int_equal(fdb_network_set_option(64, NULL, 0), 2007); /* disable_local_client */
    assert_int_equal(fdb_network_set_option(65, v8, 8), 2007);   /* client_threads_per_version */
    assert_int_equal(fdb_network_set_option(63, (const uint8_t *)"/tmp", 4), 2007);
    assert_int_equal(fdb_network_set_option(62, (const uint8_t *)"/nonexistent/libfdb_c.so", 24),
                     1511);
    assert_int_equal(fdb_network_set_option(62, (const uint8_t *)cluster, (int)strlen(cluster)),
                     2007);
    assert_int_equal(fdb_network_set_option(62, NULL, 0), 2006);
    assert_int_equal(fdb_network_set_option(1001, NULL, 0), 4100);
    assert_int_equal(fdb_network_set_option(1000, (const uint8_t *)"7.1.0", 5), 0);
    assert_int_equal(fdb_network_set_option(1000, NULL, 0), 4100);
    /* Tracing, knobs, TLS, buggify: accepted after setup too. */
    assert_int_equal(fdb_network_set_option(30, (const uint8_t *)"/tmp", 4), 0);
    assert_int_equal(fdb_network_set_option(40, (const uint8_t *)"k=v", 3), 0);
    assert_int_equal(fdb_network_set_option(43, (const uint8_t *)"/c.pem", 6), 0);
    assert_int_equal(fdb_network_set_option(80, NULL, 0), 0);
    assert_int_equal(fdb_network_set_option(70, NULL, 0), 0);
}

/* A second fdb_future_set_callback on one future adds a callback: libfdb_c keeps every callback
 * set (its ThreadMultiCallback) and runs each once, in order. */
static struct cb_order {
    int seen[4];
    int n;    /* slots taken */
    int done; /* slots written: seen[0..done) may be read once done is loaded */
} cb_order;

static void cb_order_note(int who)
{
    int i = __atomic_fetch_add(&cb_order.n, 1, __ATOMIC_SEQ_CST);
    if (i < 4)
        __atomic_store_n(&cb_order.seen[i], who, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&cb_order.done, 1, __ATOMIC_SEQ_CST);
}

static void on_ready_a(FDBFuture *f, void *arg)
{
    (void)f;
    (void)arg;
    cb_order_note('a');
}

static void on_ready_b(FDBFuture *f, void *arg)
{
    (void)f;
    (void)arg;
    cb_order_note('b');
}

static void test_callback_set_twice(void **state)
{
    (void)state;
    FDBTransaction *tr = new_tr();
    /* Not ready yet: both run on the network thread when it completes. */
    FDBFuture *w = fdb_transaction_watch(tr, (const uint8_t *)"cb2/k", 5);
    assert_int_equal(commit(tr), 0);
    memset(&cb_order, 0, sizeof(cb_order));
    assert_int_equal(fdb_future_set_callback(w, on_ready_a, NULL), 0);
    assert_int_equal(fdb_future_set_callback(w, on_ready_b, NULL), 0);
    FDBTransaction *other = new_tr();
    set_s(other, "cb2/k", "changed");
    assert_int_equal(commit(other), 0);
    assert_int_equal(wait_f(w), 0);
    wait_count(&cb_order.done, 2);
    assert_int_equal(__atomic_load_n(&cb_order.n, __ATOMIC_SEQ_CST), 2);
    assert_int_equal(__atomic_load_n(&cb_order.seen[0], __ATOMIC_SEQ_CST), 'a');
    assert_int_equal(__atomic_load_n(&cb_order.seen[1], __ATOMIC_SEQ_CST), 'b');
    fdb_future_destroy(w);
    /* Ready: each runs at once. */
    fdb_transaction_reset(tr);
    memset(&cb_order, 0, sizeof(cb_order));
    FDBFuture *f = fdb_transaction_get(tr, (const uint8_t *)"cb2/k", 5, 0);
    assert_int_equal(wait_f(f), 0);
    assert_int_equal(fdb_future_set_callback(f, on_ready_a, NULL), 0);
    assert_int_equal(fdb_future_set_callback(f, on_ready_a, NULL), 0);
    assert_int_equal(cb_order.n, 2);
    fdb_future_destroy(f);
    fdb_transaction_destroy(other);
    fdb_transaction_destroy(tr);
}

/* Reads [b, e) with a byte budget: the rows' count, `more`, and the first and last keys. */
static void page_of(FDBTransaction *tr, const char *b, const char *e, int limit, int target_bytes,
                    FDBStreamingMode mode, int iteration, fdb_bool_t reverse, int *count,
                    fdb_bool_t *more, char *first, char *last)
{
    FDBFuture *f = fdb_transaction_get_range(tr, (const uint8_t *)b, (int)strlen(b), 0, 1,
                                             (const uint8_t *)e, (int)strlen(e), 0, 1, limit,
                                             target_bytes, mode, iteration, 0, reverse);
    assert_int_equal(wait_f(f), 0);
    const FDBKeyValue *kv;
    assert_int_equal(fdb_future_get_keyvalue_array(f, &kv, count, more), 0);
    first[0] = last[0] = 0;
    if (*count > 0) {
        snprintf(first, 16, "%.*s", kv[0].key_length, (const char *)kv[0].key);
        snprintf(last, 16, "%.*s", kv[*count - 1].key_length, (const char *)kv[*count - 1].key);
    }
    fdb_future_destroy(f);
}

/* Pages by bytes, as fdb_c.cpp and GetRangeLimits size them: SMALL 256 bytes, MEDIUM 1,000,
 * LARGE 4,096, SERIAL and WANT_ALL 80,000, ITERATOR from 4,096; target_bytes lowers the budget;
 * a row costs its key, its value and 8 bytes, and a page ends with the row that fills the budget
 * (so at least one). The read-conflict range of a page ends just after its last key (begins at
 * it, in reverse): a write beyond is no conflict. */
static void test_range_pages_by_bytes(void **state)
{
    (void)state;
    FDBTransaction *tr = new_tr();
    char val[101];
    memset(val, 'v', 100);
    val[100] = 0;
    char k[16];
    for (int i = 0; i < 10; i++) {
        snprintf(k, sizeof(k), "rb/%02d", i); /* 5 bytes: a row costs 5 + 100 + 8 = 113 */
        set_s(tr, k, val);
    }
    assert_int_equal(commit(tr), 0);
    fdb_transaction_reset(tr);
    int n;
    fdb_bool_t more;
    char first[16], last[16];
    page_of(tr, "rb/", "rb0", 0, 0, FDB_STREAMING_MODE_SMALL, 0, 0, &n, &more, first, last);
    assert_int_equal(n, 3); /* 113, 226, 339 >= 256 */
    assert_true(more);
    assert_string_equal(last, "rb/02");
    page_of(tr, "rb/", "rb0", 0, 0, FDB_STREAMING_MODE_MEDIUM, 0, 0, &n, &more, first, last);
    assert_int_equal(n, 9); /* 1017 >= 1000 */
    assert_true(more);
    page_of(tr, "rb/", "rb0", 0, 0, FDB_STREAMING_MODE_WANT_ALL, 0, 0, &n, &more, first, last);
    assert_int_equal(n, 10);
    assert_false(more);
    page_of(tr, "rb/", "rb0", 0, 0, FDB_STREAMING_MODE_ITERATOR, 1, 0, &n, &more, first, last);
    assert_int_equal(n, 10);
    assert_false(more);
    /* target_bytes: a soft cap, at least one row. */
    page_of(tr, "rb/", "rb0", 0, 50, FDB_STREAMING_MODE_WANT_ALL, 0, 0, &n, &more, first, last);
    assert_int_equal(n, 1);
    assert_true(more);
    page_of(tr, "rb/", "rb0", 0, 250, FDB_STREAMING_MODE_EXACT, 0, 0, &n, &more, first, last);
    assert_int_equal(n, 3);
    assert_true(more);
    page_of(tr, "rb/", "rb0", 0, 500, FDB_STREAMING_MODE_SMALL, 0, 0, &n, &more, first, last);
    assert_int_equal(n, 3); /* the smaller of the two budgets */
    /* The row limit still applies; EXACT with a limit has no byte budget. */
    page_of(tr, "rb/", "rb0", 2, 0, FDB_STREAMING_MODE_SMALL, 0, 0, &n, &more, first, last);
    assert_int_equal(n, 2);
    assert_true(more);
    page_of(tr, "rb/", "rb0", 8, 0, FDB_STREAMING_MODE_EXACT, 0, 0, &n, &more, first, last);
    assert_int_equal(n, 8);
    /* Reverse. */
    page_of(tr, "rb/", "rb0", 0, 0, FDB_STREAMING_MODE_SMALL, 0, 1, &n, &more, first, last);
    assert_int_equal(n, 3);
    assert_string_equal(first, "rb/09");
    assert_string_equal(last, "rb/07");
    fdb_transaction_destroy(tr);

    /* Conflicts: a forward SMALL page covers rb/00..rb/02, no further; a reverse one
     * rb/07..rb/09. A write just outside the page does not conflict with it, one inside does. */
    static const struct {
        int reverse;
        const char *key, *value;
        fdb_error_t want;
    } writes[] = {
        { 0, "rb/03", "changed", 0 },
        { 0, "rb/02", "changed", 1020 },
        { 1, "rb/06", "changed", 0 },
        { 1, "rb/07", "changed2", 1020 },
    };
    FDBTransaction *r = new_tr(), *w = new_tr();
    for (size_t i = 0; i < sizeof(writes) / sizeof(writes[0]); i++) {
        page_of(r, "rb/", "rb0", 0, 0, FDB_STREAMING_MODE_SMALL, 0, writes[i].reverse, &n, &more,
                first, last);
        if (i == 0)
            assert_int_equal(n, 3);
        if (i == 2)
            assert_string_equal(last, "rb/07");
        assert_int_equal(write_under(r, w, writes[i].key, writes[i].value, "rb-out/1", "x"),
                         writes[i].want);
        fdb_transaction_reset(r);
        fdb_transaction_reset(w);
    }
    /* The transaction's own writes count, with snapshot_ryw_disable too. */
    assert_int_equal(fdb_transaction_set_option(r, (FDBTransactionOption)FDB_TR_OPTION_SNAPSHOT_RYW_DISABLE, NULL, 0),
                     0);
    char big[301];
    memset(big, 'b', 300);
    big[300] = 0;
    set_s(r, "rb/00", big);
    FDBFuture *f = fdb_transaction_get_range(r, (const uint8_t *)"rb/", 3, 0, 1,
                                             (const uint8_t *)"rb0", 3, 0, 1, 0, 0,
                                             FDB_STREAMING_MODE_SMALL, 0, 0, 0);
    assert_int_equal(wait_f(f), 0);
    const FDBKeyValue *kv;
    assert_int_equal(fdb_future_get_keyvalue_array(f, &kv, &n, &more), 0);
    assert_int_equal(n, 1); /* 5 + 300 + 8 >= 256 */
    assert_int_equal(kv[0].value_length, 300);
    assert_true(more);
    fdb_future_destroy(f);
    fdb_transaction_destroy(r);
    fdb_transaction_destroy(w);
}

/* With read_system_keys (or access_system_keys) a key selector resolves into the system keys,
 * and past the last key to \xff\xff, as FoundationDB's do (its getMaxReadKey); without them
 * past the last key is \xff. */
static void test_selectors_in_system_keys(void **state)
{
    (void)state;
    FDBTransaction *tr = new_tr();
    assert_int_equal(fdb_transaction_set_option(tr, (FDBTransactionOption)FDB_TR_OPTION_ACCESS_SYSTEM_KEYS, NULL, 0), 0);
    set_s(tr, "\xff\xfe/kvq-sel", "s");
    assert_int_equal(commit(tr), 0);
    fdb_transaction_reset(tr);
    char k[32];
    /* Without the option. */
    assert_int_equal(key_of(tr, "\xfe", 0, 1, 0, k, sizeof(k)), 0);
    assert_string_equal(k, "\xff");
    assert_int_equal(fdb_transaction_set_option(tr, (FDBTransactionOption)FDB_TR_OPTION_READ_SYSTEM_KEYS, NULL, 0), 0);
    assert_int_equal(key_of(tr, "\xff\xfe", 0, 1, 0, k, sizeof(k)), 0);
    assert_string_equal(k, "\xff\xfe/kvq-sel");
    assert_int_equal(key_of(tr, "\xff\xfe/kvq-sel", 1, 1, 0, k, sizeof(k)), 0);
    assert_string_equal(k, "\xff\xff");
    /* A range whose end selector resolves past the last key reads the system keys too. */
    FDBFuture *f = fdb_transaction_get_range(tr, (const uint8_t *)"\xff\xfe", 2, 0, 1,
                                             (const uint8_t *)"\xff\xfe/kvq-sel", 10, 1, 2, 0, 0,
                                             FDB_STREAMING_MODE_WANT_ALL, 0, 0, 0);
    assert_int_equal(wait_f(f), 0);
    const FDBKeyValue *kv;
    int n;
    fdb_bool_t more;
    assert_int_equal(fdb_future_get_keyvalue_array(f, &kv, &n, &more), 0);
    assert_int_equal(n, 1);
    fdb_future_destroy(f);
    /* A reset ends the option. */
    fdb_transaction_reset(tr);
    assert_int_equal(key_of(tr, "\xfe", 0, 1, 0, k, sizeof(k)), 0);
    assert_string_equal(k, "\xff");
    fdb_transaction_destroy(tr);
}

/* Database options of fdb_c_options (transaction_retry_limit, transaction_size_limit). */
enum { DB_TR_RETRY_LIMIT = 501, DB_TR_SIZE_LIMIT = 503 };

/* An Int option's value: 8 bytes, little-endian. */
static void int_opt(uint8_t out[8], int64_t v)
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)((uint64_t)v >> (8 * i));
}

static fdb_error_t on_error_n(FDBTransaction *tr, fdb_error_t e, int n)
{
    for (int i = 0; i < n; i++) {
        fdb_error_t r = on_error(tr, e);
        if (r != 0)
            return r;
    }
    return 0;
}

/* A database's transaction_retry_limit of -1 is no limit, as for a transaction: transactions
 * are created, and retry (cancellation_timeout_tests.py sets it to go back to the default). */
static void test_db_retry_limit_none(void **state)
{
    (void)state;
    uint8_t v[8], no_delay[8];
    int_opt(no_delay, 0);
    FDBTransaction *tr;
    int_opt(v, -1);
    assert_int_equal(fdb_database_set_option(db, DB_TR_RETRY_LIMIT, v, 8), 0);
    tr = NULL;
    assert_int_equal(fdb_database_create_transaction(db, &tr), 0);
    assert_non_null(tr);
    assert_int_equal(fdb_transaction_set_option(tr, FDB_TR_OPTION_MAX_RETRY_DELAY, no_delay, 8),
                     0);
    assert_int_equal(on_error_n(tr, 1020, 150), 0);
    set_s(tr, "rl/k", "1");
    assert_int_equal(commit(tr), 0);
    fdb_transaction_destroy(tr);
}

/* Retry limits as fdb.options states them (retry_limit: -1 disables the limit; unlimited is
 * the default; a database's transaction_retry_limit is every transaction's default) and as
 * FoundationDB's Python binding tests them (cancellation_timeout_tests.py, test_retry_limits
 * and test_db_retry_limits). Retries of 1020 with max_retry_delay 0 sleep nothing. */
static void test_retry_limits(void **state)
{
    (void)state;
    uint8_t v[8], no_delay[8];
    int_opt(no_delay, 0);
    /* No limit by default: 150 retries. */
    FDBTransaction *tr = new_tr();
    assert_int_equal(fdb_transaction_set_option(tr, FDB_TR_OPTION_MAX_RETRY_DELAY, no_delay, 8),
                     0);
    assert_int_equal(on_error_n(tr, 1020, 150), 0);
    fdb_transaction_destroy(tr);
    /* A database's limit of 1: one retry, then the error, then the transaction is cancelled. */
    int_opt(v, 1);
    assert_int_equal(fdb_database_set_option(db, DB_TR_RETRY_LIMIT, v, 8), 0);
    tr = new_tr();
    set_s(tr, "rl/k", "1");
    assert_int_equal(on_error(tr, 1007), 0);
    set_s(tr, "rl/k", "1");
    assert_int_equal(on_error(tr, 1007), 1007);
    set_s(tr, "rl/k", "1");
    assert_int_equal(on_error(tr, 1007), 1025);
    assert_int_equal(commit(tr), 1025);
    /* A reset counts retries from 0 again, under the database's limit. */
    fdb_transaction_reset(tr);
    assert_int_equal(on_error(tr, 1007), 0);
    assert_int_equal(on_error(tr, 1007), 1007);
    /* The transaction's own limit wins, and survives on_error. */
    fdb_transaction_reset(tr);
    int_opt(v, 2);
    assert_int_equal(fdb_transaction_set_option(tr, FDB_TR_OPTION_RETRY_LIMIT, v, 8), 0);
    assert_int_equal(on_error_n(tr, 1007, 2), 0);
    assert_int_equal(on_error(tr, 1007), 1007);
    fdb_transaction_destroy(tr);
    /* Retries count while there is no limit, and a limit set later counts them. */
    int_opt(v, -1);
    assert_int_equal(fdb_database_set_option(db, DB_TR_RETRY_LIMIT, v, 8), 0);
    tr = new_tr();
    assert_int_equal(on_error_n(tr, 1007, 2), 0);
    int_opt(v, 1);
    assert_int_equal(fdb_transaction_set_option(tr, FDB_TR_OPTION_RETRY_LIMIT, v, 8), 0);
    assert_int_equal(on_error(tr, 1007), 1007);
    int_opt(v, 4);
    assert_int_equal(fdb_transaction_set_option(tr, FDB_TR_OPTION_RETRY_LIMIT, v, 8), 0);
    assert_int_equal(on_error(tr, 1007), 1025);
    fdb_transaction_destroy(tr);
}

/* A cancelled transaction stays cancelled through on_error, which fails with 1025 (retrying
 * nothing) whatever the error given and the retry limit; only a reset ends it
 * (cancellation_timeout_tests.py, test_cancellation and test_combinations). */
static void test_cancel_survives_on_error(void **state)
{
    (void)state;
    FDBTransaction *tr = new_tr();
    fdb_transaction_cancel(tr);
    assert_int_equal(on_error(tr, 1007), 1025);
    assert_int_equal(on_error(tr, 1020), 1025);
    set_s(tr, "cs/k", "1");
    assert_int_equal(commit(tr), 1025);
    FDBFuture *f = fdb_transaction_get_read_version(tr);
    assert_int_equal(wait_f(f), 1025);
    fdb_future_destroy(f);
    fdb_transaction_reset(tr);
    set_s(tr, "cs/k", "1");
    assert_int_equal(commit(tr), 0);
    fdb_transaction_reset(tr);
    uint8_t zero[8] = { 0 };
    assert_int_equal(fdb_transaction_set_option(tr, FDB_TR_OPTION_RETRY_LIMIT, zero, 8), 0);
    fdb_transaction_cancel(tr);
    assert_int_equal(on_error(tr, 1007), 1025);
    assert_int_equal(commit(tr), 1025);
    fdb_transaction_destroy(tr);
}

/* A timeout that has passed has fired: setting another timeout, or none, does not bring the
 * transaction back, nor does on_error; a reset does (cancellation_timeout_tests.py,
 * test_timeouts (3), (6), (10)). Each sleep is 20 times the 1 ms timeout: the timeout has
 * passed. */
static void test_timeout_fired(void **state)
{
    (void)state;
    uint8_t one_ms[8], off[8];
    int_opt(one_ms, 1);
    int_opt(off, 0);
    FDBTransaction *tr = new_tr();
    set_s(tr, "tf/k", "1");
    assert_int_equal(fdb_transaction_set_option(tr, FDB_TR_OPTION_TIMEOUT, one_ms, 8), 0);
    usleep(20000);
    assert_int_equal(fdb_transaction_set_option(tr, FDB_TR_OPTION_TIMEOUT, off, 8), 0);
    assert_int_equal(commit(tr), 1031);
    fdb_transaction_reset(tr);
    set_s(tr, "tf/k", "1");
    assert_int_equal(commit(tr), 0);
    fdb_transaction_reset(tr);
    assert_int_equal(fdb_transaction_set_option(tr, FDB_TR_OPTION_TIMEOUT, one_ms, 8), 0);
    usleep(20000);
    assert_int_equal(on_error(tr, 1007), 1031);
    assert_int_equal(fdb_transaction_set_option(tr, FDB_TR_OPTION_TIMEOUT, off, 8), 0);
    assert_int_equal(commit(tr), 1031);
    /* Set after the time has passed, a timeout fires at once. */
    fdb_transaction_reset(tr);
    set_s(tr, "tf/k", "1");
    usleep(20000);
    assert_int_equal(fdb_transaction_set_option(tr, FDB_TR_OPTION_TIMEOUT, one_ms, 8), 0);
    assert_int_equal(commit(tr), 1031);
    fdb_transaction_destroy(tr);

}

/* After a retry (on_error), the database's transaction_size_limit applies again: the size
 * limit is not one of the options a retry keeps (size_limit_tests.py). */
static void test_retry_size_limit(void **state)
{
    (void)state;
    uint8_t v[8];
    FDBTransaction *tr;
    /* The database's size limit, after a retry. */
    int_opt(v, 1000);
    assert_int_equal(fdb_database_set_option(db, DB_TR_SIZE_LIMIT, v, 8), 0);
    tr = new_tr();
    set_s(tr, "tf/t4", "bar");
    assert_int_equal(on_error(tr, 1007), 0);
    char big[1025];
    memset(big, 'a', 1024);
    big[1024] = 0;
    set_s(tr, "tf/t4", big);
    assert_int_equal(commit(tr), 2101);
    fdb_transaction_destroy(tr);
    int_opt(v, 10000000);
    assert_int_equal(fdb_database_set_option(db, DB_TR_SIZE_LIMIT, v, 8), 0);
    tr = new_tr();
    set_s(tr, "tf/t4", big);
    assert_int_equal(commit(tr), 0);
    fdb_transaction_destroy(tr);
}

/* Writes a cluster file at path whose connection string is `kvq:<the test's directory>/<sub>`. */
static void write_cluster(const char *path, const char *sub)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "kvq:%s/%s\n", dir, sub);
    assert_int_equal(fclose(f), 0);
}

/* The cluster file a database was opened from, as its special key \xff\xff/cluster_file_path
 * says; and a write that commits there. */
static void opened_from(FDBDatabase *d, char *out, size_t cap)
{
    FDBTransaction *tr = NULL;
    assert_int_equal(fdb_database_create_transaction(d, &tr), 0);
    const char *k = "\xff\xff/cluster_file_path";
    FDBFuture *f = fdb_transaction_get(tr, (const uint8_t *)k, (int)strlen(k), 0);
    assert_int_equal(wait_f(f), 0);
    fdb_bool_t present = 0;
    const uint8_t *v = NULL;
    int n = 0;
    assert_int_equal(fdb_future_get_value(f, &present, &v, &n), 0);
    assert_true(present);
    snprintf(out, cap, "%.*s", n, (const char *)v);
    fdb_future_destroy(f);
    set_s(tr, "cf/k", "1");
    assert_int_equal(commit(tr), 0);
    fdb_transaction_destroy(tr);
}

/* Without a named cluster file, fdb_create_database looks for one as libfdb_c does
 * (ClusterConnectionFile::lookupClusterFileName; api-c.rst, "cluster file"): the file
 * $FDB_CLUSTER_FILE names, and that one only; else fdb.cluster in the working directory; else
 * /etc/foundationdb/fdb.cluster. None found is no_cluster_file_found (1515), as is a named
 * file that does not exist. */
static void test_default_cluster_file(void **state)
{
    (void)state;
    char cwd[4096], path[512], want[4096], got[4096], sub[256];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    const char *kd = getenv("KVQ_FDBC_DIR");
    char *saved_kvq_dir = kd != NULL ? strdup(kd) : NULL;
    unsetenv("KVQ_FDBC_DIR");
    unsetenv("FDB_CLUSTER_FILE");
    FDBDatabase *d = NULL;

    snprintf(path, sizeof(path), "%s/env.cluster", dir);
    write_cluster(path, "env-db");
    assert_int_equal(setenv("FDB_CLUSTER_FILE", path, 1), 0);
    assert_int_equal(fdb_create_database(NULL, &d), 0);
    assert_non_null(realpath(path, want));
    opened_from(d, got, sizeof(got));
    assert_string_equal(got, want);
    fdb_database_destroy(d);
    d = NULL;
    assert_int_equal(fdb_create_database("", &d), 0); /* "" is no name too */
    fdb_database_destroy(d);
    d = NULL;

    /* ./fdb.cluster, in a working directory of its own. */
    snprintf(sub, sizeof(sub), "%s/cwd", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    snprintf(path, sizeof(path), "%s/fdb.cluster", sub);
    write_cluster(path, "cwd-db");
    assert_int_equal(chdir(sub), 0);
    /* $FDB_CLUSTER_FILE naming a missing file is not looked past. */
    snprintf(path, sizeof(path), "%s/missing.cluster", dir);
    assert_int_equal(setenv("FDB_CLUSTER_FILE", path, 1), 0);
    assert_int_equal(fdb_create_database(NULL, &d), 1515);
    assert_null(d);
    unsetenv("FDB_CLUSTER_FILE");
    assert_int_equal(fdb_create_database(NULL, &d), 0);
    snprintf(path, sizeof(path), "%s/fdb.cluster", sub);
    assert_non_null(realpath(path, want));
    opened_from(d, got, sizeof(got));
    assert_string_equal(got, want);
    fdb_database_destroy(d);
    d = NULL;

    /* Nothing to find (unless this machine has /etc/foundationdb/fdb.cluster). */
    snprintf(sub, sizeof(sub), "%s/empty", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    assert_int_equal(chdir(sub), 0);
    if (access("/etc/foundationdb/fdb.cluster", F_OK) != 0) {
        assert_int_equal(fdb_create_database(NULL, &d), 1515);
        assert_null(d);
    }
    assert_int_equal(chdir(cwd), 0);
    if (saved_kvq_dir != NULL)
        assert_int_equal(setenv("KVQ_FDBC_DIR", saved_kvq_dir, 1), 0);
    free(saved_kvq_dir);
}

/* A kvq: directory is created if missing, the directories above it too (docs/fdb.md). A
 * directory that cannot be made (a file stands where a parent must be) fails with one of
 * FoundationDB's errors, never with one of kvq's own numbers (9000 and up), which
 * FoundationDB's error table does not have. */
static void test_directory_parents(void **state)
{
    (void)state;
    char path[256], file[256];
    FDBDatabase *d = NULL;
    snprintf(path, sizeof(path), "%s/deep.cluster", dir);
    write_cluster(path, "a/b/c/db");
    assert_int_equal(fdb_create_database(path, &d), 0);
    char got[4096];
    opened_from(d, got, sizeof(got));
    fdb_database_destroy(d);
    d = NULL;

    snprintf(file, sizeof(file), "%s/plain-file", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    assert_int_equal(fclose(f), 0);
    write_cluster(path, "plain-file/db");
    fdb_error_t e = fdb_create_database(path, &d);
    assert_null(d);
    assert_true(e > 0 && e < 9000);
    assert_string_not_equal(fdb_get_error(e), "UNKNOWN_ERROR");
    write_cluster(path, "plain-file/x/db");
    e = fdb_create_database(path, &d);
    assert_null(d);
    assert_true(e > 0 && e < 9000);
    assert_string_not_equal(fdb_get_error(e), "UNKNOWN_ERROR");
}

/* fdb_get_error gives FoundationDB's own texts (its error table, flow/error_definitions.h):
 * programs and bindings show and compare them. tests/bindings/run_fdb_suites.sh compares every
 * code against a FoundationDB source tree. */
static void test_error_messages(void **state)
{
    (void)state;
    assert_string_equal(fdb_get_error(0), "Success");
    assert_string_equal(fdb_get_error(1007),
                        "Transaction is too old to perform reads or be committed");
    assert_string_equal(fdb_get_error(1020),
                        "Transaction not committed due to conflict with another transaction");
    assert_string_equal(fdb_get_error(1025),
                        "Operation aborted because the transaction was cancelled");
    assert_string_equal(fdb_get_error(1031), "Operation aborted because the transaction timed out");
    assert_string_equal(fdb_get_error(1515),
                        "No cluster file found in current directory or default location");
    assert_string_equal(fdb_get_error(2101), "Transaction exceeds byte limit");
    assert_string_equal(fdb_get_error(2104), "Connection string invalid");
    assert_string_equal(fdb_get_error(2136), "Tenants have been disabled in the cluster");
    assert_string_equal(fdb_get_error(2032),
                        "\"{...}\" must be the last element of the mapper tuple");
    assert_string_equal(fdb_get_error(2134), "Tenant name cannot begin with \\xff");
    assert_string_equal(fdb_get_error(4000), "An unknown error occurred");
    assert_string_equal(fdb_get_error(4100), "An internal error occurred");
    /* A code that names no error; kvq's own numbers are not FoundationDB's. */
    assert_string_equal(fdb_get_error(5), "UNKNOWN_ERROR");
    assert_string_equal(fdb_get_error(9003), "UNKNOWN_ERROR");
    assert_string_equal(fdb_get_error(30000), "UNKNOWN_ERROR");
    /* Outside 0..30000: unknown_error. */
    assert_string_equal(fdb_get_error(-1), "An unknown error occurred");
    assert_string_equal(fdb_get_error(30001), "An unknown error occurred");
}

static void clear_range_s(FDBTransaction *tr, const char *b, const char *e)
{
    fdb_transaction_clear_range(tr, (const uint8_t *)b, (int)strlen(b), (const uint8_t *)e,
                                (int)strlen(e));
}

/* special_key_space_enable_writes (714) is accepted, and with it a clear of the tenant map
 * (FoundationDB's bindingtester clears it, under 7.3's name, before each test): a database
 * without tenants has none to delete. A set there would create a tenant (tenants_disabled,
 * 2136); kvq has no other special write module (special_keys_no_write_module_found, 2115);
 * without the option, special_keys_write_disabled (2114). The option ends with a reset. */
static void test_special_key_writes(void **state)
{
    (void)state;
    static const char map_b[] = "\xff\xff/management/tenant/map/";
    static const char map_e[] = "\xff\xff/management/tenant/map0";
    FDBTransaction *tr = new_tr();
    assert_int_equal(fdb_transaction_set_option(tr, 714, NULL, 0), 0);
    clear_range_s(tr, map_b, map_e);
    set_s(tr, "sk/k", "1");
    assert_int_equal(commit(tr), 0);
    /* 7.1's name of the module, and a single tenant's key. */
    fdb_transaction_reset(tr);
    assert_int_equal(fdb_transaction_set_option(tr, 714, NULL, 0), 0);
    clear_range_s(tr, "\xff\xff/management/tenant_map/", "\xff\xff/management/tenant_map0");
    const char *t1 = "\xff\xff/management/tenant/map/t1";
    fdb_transaction_clear(tr, (const uint8_t *)t1, (int)strlen(t1));
    assert_int_equal(commit(tr), 0);
    /* The option ends with the reset. */
    fdb_transaction_reset(tr);
    clear_range_s(tr, map_b, map_e);
    assert_int_equal(commit(tr), 2114);
    fdb_transaction_reset(tr);
    assert_int_equal(fdb_transaction_set_option(tr, 714, NULL, 0), 0);
    set_s(tr, "\xff\xff/management/tenant/map/t1", "");
    assert_int_equal(commit(tr), 2136);
    fdb_transaction_reset(tr);
    assert_int_equal(fdb_transaction_set_option(tr, 714, NULL, 0), 0);
    set_s(tr, "\xff\xff/management/db_locked", "x");
    assert_int_equal(commit(tr), 2115);
    /* A clear reaching past the tenant map is not the tenant map's. */
    fdb_transaction_reset(tr);
    assert_int_equal(fdb_transaction_set_option(tr, 714, NULL, 0), 0);
    clear_range_s(tr, map_b, "\xff\xff/management0");
    assert_int_equal(commit(tr), 2115);
    fdb_transaction_destroy(tr);
}

/* Once a commit was attempted, successful or not, the transaction is not to be used until a
 * reset or a retry: reads, writes, watches and another commit fail with used_during_commit
 * (2017), and it stays in that state, so that on_error too then fails with 2017
 * (ReadYourWritesTransaction::checkUsedDuringCommit). A read after a commit that failed used to
 * crash the process (a NULL connection in the embedded engine's read; the bindingtester's api
 * test with --concurrency 4 met it). */
static void test_used_after_commit(void **state)
{
    (void)state;
    FDBTransaction *a = new_tr(), *b = new_tr();
    int present;
    char v[16];
    assert_int_equal(get_s(a, "uc/k", &present, v, sizeof(v)), 0);
    assert_int_equal(write_under(a, b, "uc/k", "b", "uc/other", "a"), 1020);
    assert_int_equal(get_s(a, "uc/k", &present, v, sizeof(v)), 2017);
    FDBFuture *f = fdb_transaction_get_range(a, (const uint8_t *)"uc/", 3, 0, 1,
                                             (const uint8_t *)"uc0", 3, 0, 1, 0, 0,
                                             FDB_STREAMING_MODE_WANT_ALL, 0, 0, 0);
    assert_int_equal(wait_f(f), 2017);
    fdb_future_destroy(f);
    assert_int_equal(commit(a), 2017);
    assert_int_equal(on_error(a, 1020), 2017);
    /* A retry right after the failed commit is the normal path. */
    fdb_transaction_reset(a);
    assert_int_equal(get_s(a, "uc/k", &present, v, sizeof(v)), 0);
    set_s(b, "uc/k", "b2");
    fdb_transaction_reset(b);
    assert_int_equal(write_under(a, b, "uc/k", "b2", "uc/other", "a"), 1020);
    assert_int_equal(on_error(a, 1020), 0);
    assert_int_equal(get_s(a, "uc/k", &present, v, sizeof(v)), 0);
    assert_string_equal(v, "b2");
    set_s(a, "uc/other", "a");
    assert_int_equal(commit(a), 0);
    /* After a commit that succeeded, likewise; a write is deferred to the next commit. */
    set_s(a, "uc/late", "x");
    assert_int_equal(commit(a), 2017);
    assert_int_equal(fdb_transaction_add_conflict_range(a, (const uint8_t *)"a", 1,
                                                        (const uint8_t *)"b", 1,
                                                        FDB_CONFLICT_RANGE_TYPE_READ),
                     2017);
    f = fdb_transaction_get_versionstamp(a);
    assert_int_equal(wait_f(f), 2017);
    fdb_future_destroy(f);
    /* The committed version stays readable. */
    int64_t cv = 0;
    assert_int_equal(fdb_transaction_get_committed_version(a, &cv), 0);
    assert_true(cv > 0);
    fdb_transaction_destroy(a);
    fdb_transaction_destroy(b);
}

/* A watch compares against what a read of its key in the transaction sees, the transaction's
 * own write included even when snapshot reads do not see it (a database's snapshot_ryw_disable;
 * unit_tests.py's test_watches runs after test_db_options sets it), and that read is not a
 * snapshot: it adds a read conflict on the key (RYWImpl::watch, Snapshot::False). */
static void test_watch_reads_own_write(void **state)
{
    (void)state;
    assert_int_equal(fdb_database_set_option(db, 27, NULL, 0), 0); /* snapshot_ryw_disable */
    FDBTransaction *tr = new_tr();
    set_s(tr, "wo/k", "2");
    FDBFuture *w = fdb_transaction_watch(tr, (const uint8_t *)"wo/k", 4);
    assert_int_equal(commit(tr), 0);
    /* The value is the one the watch saw: it does not fire (a wrong one fires at once). */
    usleep(200000);
    assert_false(fdb_future_is_ready(w));
    fdb_transaction_reset(tr);
    set_s(tr, "wo/k", "3");
    assert_int_equal(commit(tr), 0);
    assert_int_equal(wait_f(w), 0);
    fdb_future_destroy(w);
    assert_int_equal(fdb_database_set_option(db, 26, NULL, 0), 0); /* snapshot_ryw_enable */

    /* The watch's read conflicts with a write of the key committed meanwhile. */
    FDBTransaction *a = new_tr(), *b = new_tr();
    int present;
    char v[16];
    assert_int_equal(get_s(a, "wo/other", &present, v, sizeof(v)), 0);
    w = fdb_transaction_watch(a, (const uint8_t *)"wo/k", 4);
    assert_int_equal(write_under(a, b, "wo/k", "4", "wo/x", "1"), 1020);
    assert_int_equal(wait_f(w), 1020);
    fdb_future_destroy(w);
    fdb_transaction_destroy(a);
    fdb_transaction_destroy(b);
    fdb_transaction_destroy(tr);
}

/* Several threads on one database, as FoundationDB's bindingtester runs them
 * (directory_hca --concurrency 4): transactions shared by every thread, each thread reading and
 * writing in them at once before one of them commits; and each thread's own transactions
 * getting and committing at once, retried with on_error. libfdb_c serializes the calls of
 * every thread on one transaction; nothing may crash, no write may be lost. cmocka's checks
 * belong to the main thread: the threads check with THR_CHECK, which stops the program. */
#define THR_N      4
#define THR_ROUNDS 30
#define THR_KEYS   8
#define THR_CHECK(c)                                                                      \
    do {                                                                                  \
        if (!(c)) {                                                                       \
            fprintf(stderr, "%s:%d: check failed in a thread: %s\n", __FILE__, __LINE__, #c); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

static pthread_barrier_t thr_barrier;
static FDBTransaction *thr_shared[3];

static void thr_key(char *out, size_t cap, int round, int thread, int i)
{
    snprintf(out, cap, "thr/s/%03d/%d/%02d", round, thread, i);
}

static fdb_error_t thr_wait(FDBFuture *f)
{
    THR_CHECK(fdb_future_block_until_ready(f) == 0);
    return fdb_future_get_error(f);
}

/* Reads k into out ("" when absent); *present says whether it is there. */
static fdb_error_t thr_get(FDBTransaction *tr, const char *k, int *present, char *out, size_t cap)
{
    FDBFuture *f = fdb_transaction_get(tr, (const uint8_t *)k, (int)strlen(k), 0);
    fdb_error_t e = thr_wait(f);
    out[0] = 0;
    if (e == 0) {
        fdb_bool_t p = 0;
        const uint8_t *v = NULL;
        int n = 0;
        THR_CHECK(fdb_future_get_value(f, &p, &v, &n) == 0);
        *present = p;
        if (p)
            snprintf(out, cap, "%.*s", n, (const char *)v);
    }
    fdb_future_destroy(f);
    return e;
}

/* Waits for a future of a void result (a commit, an on_error) and returns its error. */
static fdb_error_t thr_void(FDBFuture *f)
{
    fdb_error_t e = thr_wait(f);
    fdb_future_destroy(f);
    return e;
}

static FDBTransaction *thr_new(void)
{
    FDBTransaction *tr = NULL;
    THR_CHECK(fdb_database_create_transaction(db, &tr) == 0);
    return tr;
}

/* One read-modify-write of this thread's counter and of a counter every thread changes, in a
 * transaction of its own, retried: the commits conflict and go through on_error. */
static void thr_bump(int thread)
{
    FDBTransaction *tr = thr_new();
    char k[32], v[32], all[32];
    snprintf(k, sizeof(k), "thr/c/%d", thread);
    for (;;) {
        int present = 0, all_present = 0;
        fdb_error_t e = thr_get(tr, k, &present, v, sizeof(v));
        if (e == 0)
            e = thr_get(tr, "thr/all", &all_present, all, sizeof(all));
        if (e == 0) {
            char nv[32];
            snprintf(nv, sizeof(nv), "%d", present ? atoi(v) + 1 : 1);
            set_s(tr, k, nv);
            snprintf(nv, sizeof(nv), "%d", all_present ? atoi(all) + 1 : 1);
            set_s(tr, "thr/all", nv);
            e = thr_void(fdb_transaction_commit(tr));
        }
        if (e == 0)
            break;
        THR_CHECK(thr_void(fdb_transaction_on_error(tr, e)) == 0);
    }
    fdb_transaction_destroy(tr);
}

static void *thr_main(void *arg)
{
    int thread = (int)(intptr_t)arg;
    for (int round = 0; round < THR_ROUNDS; round++) {
        FDBTransaction *tr = thr_shared[round % 3];
        char k[32], v[32];
        for (int i = 0; i < THR_KEYS; i++) {
            int present = 1;
            thr_key(k, sizeof(k), round, thread, i);
            THR_CHECK(thr_get(tr, k, &present, v, sizeof(v)) == 0);
            THR_CHECK(present == 0);
            set_s(tr, k, "v");
            /* The thread's own writes so far, through a range read of the shared
             * transaction. */
            char b[32], e[32];
            thr_key(b, sizeof(b), round, thread, 0);
            thr_key(e, sizeof(e), round, thread, THR_KEYS);
            FDBFuture *f = fdb_transaction_get_range(tr, (const uint8_t *)b, (int)strlen(b), 0, 1,
                                                     (const uint8_t *)e, (int)strlen(e), 0, 1, 0,
                                                     0, FDB_STREAMING_MODE_WANT_ALL, 0, 0, 0);
            THR_CHECK(thr_wait(f) == 0);
            const FDBKeyValue *kv;
            int count = -1;
            fdb_bool_t more;
            THR_CHECK(fdb_future_get_keyvalue_array(f, &kv, &count, &more) == 0);
            THR_CHECK(count == i + 1);
            fdb_future_destroy(f);
        }
        thr_bump(thread);
        int w = pthread_barrier_wait(&thr_barrier);
        THR_CHECK(w == 0 || w == PTHREAD_BARRIER_SERIAL_THREAD);
        if (thread == 0) {
            THR_CHECK(thr_void(fdb_transaction_commit(tr)) == 0);
            fdb_transaction_reset(tr);
        } else if (round > 0) {
            /* Meanwhile the others read, in their own transactions, what the round before
             * committed. */
            FDBTransaction *r = thr_new();
            int present = 0;
            thr_key(k, sizeof(k), round - 1, thread, 0);
            THR_CHECK(thr_get(r, k, &present, v, sizeof(v)) == 0);
            THR_CHECK(present == 1);
            fdb_transaction_destroy(r);
        }
        w = pthread_barrier_wait(&thr_barrier);
        THR_CHECK(w == 0 || w == PTHREAD_BARRIER_SERIAL_THREAD);
    }
    return NULL;
}

static void test_threads_share_a_database(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++)
        thr_shared[i] = new_tr();
    assert_int_equal(pthread_barrier_init(&thr_barrier, NULL, THR_N), 0);
    pthread_t th[THR_N];
    for (int t = 0; t < THR_N; t++)
        assert_int_equal(pthread_create(&th[t], NULL, thr_main, (void *)(intptr_t)t), 0);
    for (int t = 0; t < THR_N; t++)
        assert_int_equal(pthread_join(th[t], NULL), 0);
    pthread_barrier_destroy(&thr_barrier);
    for (int i = 0; i < 3; i++)
        fdb_transaction_destroy(thr_shared[i]);
    /* Every write of every round, and every increment. */
    FDBTransaction *tr = new_tr();
    FDBFuture *f = fdb_transaction_get_range(tr, (const uint8_t *)"thr/s/", 6, 0, 1,
                                             (const uint8_t *)"thr/s0", 6, 0, 1, 0, 0,
                                             FDB_STREAMING_MODE_WANT_ALL, 0, 0, 0);
    assert_int_equal(wait_f(f), 0);
    const FDBKeyValue *kv;
    int count = 0;
    fdb_bool_t more;
    assert_int_equal(fdb_future_get_keyvalue_array(f, &kv, &count, &more), 0);
    assert_int_equal(count, THR_N * THR_ROUNDS * THR_KEYS);
    fdb_future_destroy(f);
    int present = 0;
    char v[32];
    assert_int_equal(get_s(tr, "thr/all", &present, v, sizeof(v)), 0);
    assert_int_equal(atoi(v), THR_N * THR_ROUNDS);
    for (int t = 0; t < THR_N; t++) {
        char k[32];
        snprintf(k, sizeof(k), "thr/c/%d", t);
        assert_int_equal(get_s(tr, k, &present, v, sizeof(v)), 0);
        assert_int_equal(atoi(v), THR_ROUNDS);
    }
    fdb_transaction_destroy(tr);
}

static int setup(void **state)
{
    (void)state;
    if (kt_mkdtemp(dir, sizeof(dir), "fdbc") != 0)
        return -1;
    snprintf(cluster, sizeof(cluster), "%s/fdb.cluster", dir);
    FILE *f = fopen(cluster, "w");
    if (f == NULL)
        return -1;
    fprintf(f, "kvq:%s/db\n", dir);
    fclose(f);
    if (fdb_select_api_version_impl(710, 710) != 0 || fdb_setup_network() != 0 ||
        pthread_create(&net_thread, NULL, run_net, NULL) != 0)
        return -1;
    return fdb_create_database(cluster, &db) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    fdb_database_destroy(db);
    if (fdb_stop_network() != 0)
        return -1;
    void *ret;
    pthread_join(net_thread, &ret);
    /* (Unless a filter left out the test that adds the hook.) */
    if (hook_runs != 1 && getenv("KVQ_TEST_FILTER") == NULL) {
        fprintf(stderr, "the network's completion hook ran %d times, not once\n", hook_runs);
        return -1;
    }
    return kt_rm_rf(dir) == 0 && ret == NULL ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_versions_and_network_options),
        cmocka_unit_test(test_error_predicates),
        cmocka_unit_test(test_cluster_files),
        cmocka_unit_test(test_set_get_clear_and_ranges),
        cmocka_unit_test(test_conflict_and_retry_class),
        cmocka_unit_test(test_on_error_retry_loop),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_database_options),
        cmocka_unit_test(test_key_selectors),
        cmocka_unit_test(test_sizes_split_points_addresses),
        cmocka_unit_test(test_set_read_version),
        cmocka_unit_test(test_transaction_options),
        cmocka_unit_test(test_special_keys),
        cmocka_unit_test(test_unsupported_and_more),
        cmocka_unit_test(test_range_parameters),
        cmocka_unit_test(test_on_error_failures),
        cmocka_unit_test(test_atomic_ops),
        cmocka_unit_test(test_option_lists),
        cmocka_unit_test(test_callbacks_cancel_unsupported),
        cmocka_unit_test(test_option_values),
        cmocka_unit_test(test_network_options_after_setup),
        cmocka_unit_test(test_callback_set_twice),
        cmocka_unit_test(test_range_pages_by_bytes),
        cmocka_unit_test(test_selectors_in_system_keys),
        cmocka_unit_test(test_threads_share_a_database),
        cmocka_unit_test(test_db_retry_limit_none),
        cmocka_unit_test(test_retry_limits),
        cmocka_unit_test(test_cancel_survives_on_error),
        cmocka_unit_test(test_timeout_fired),
        cmocka_unit_test(test_retry_size_limit),
        cmocka_unit_test(test_default_cluster_file),
        cmocka_unit_test(test_directory_parents),
        cmocka_unit_test(test_error_messages),
        cmocka_unit_test(test_special_key_writes),
        cmocka_unit_test(test_used_after_commit),
        cmocka_unit_test(test_watch_reads_own_write),
    };
    /* $KVQ_TEST_FILTER runs only the tests whose names match it (a cmocka pattern). */
    if (getenv("KVQ_TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("KVQ_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
