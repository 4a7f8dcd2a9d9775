/* libkvq_fdb_c.so through FoundationDB's C API, as a program written for FoundationDB uses it:
 * the checks follow FoundationDB's documentation (api-c.rst) and fdb_c_options, not kvq's own
 * API. Linked against libkvq_fdb_c.so itself. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Reads k: 0 absent, 1 present (the value copied into out). */
static fdb_error_t get_s(FDBTransaction *tr, const char *k, int *present, char *out, size_t cap)
{
    FDBFuture *f = fdb_transaction_get(tr, (const uint8_t *)k, (int)strlen(k), 0);
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

static void test_versions_and_network_options(void **state)
{
    (void)state;
    assert_true(fdb_get_max_api_version() >= 730);
    assert_non_null(fdb_get_client_version());
    /* Chosen once (in setup). */
    assert_int_equal(fdb_select_api_version_impl(710, 710), 2201);
    assert_int_equal(fdb_setup_network(), 2009);
    /* Client-side options mean nothing locally and are accepted; others are refused. */
    assert_int_equal(fdb_network_set_option(30, (const uint8_t *)"/tmp", 4), 0);
    assert_int_equal(fdb_network_set_option(60, NULL, 0), 0);
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
    assert_int_equal(fdb_create_database(path, &d), 2104);
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

static void test_conflict_and_retry_class(void **state)
{
    (void)state;
    FDBTransaction *a = new_tr(), *b = new_tr();
    int present;
    char v[16];
    assert_int_equal(get_s(a, "x/k", &present, v, sizeof(v)), 0);
    set_s(b, "x/k", "b");
    assert_int_equal(commit(b), 0);
    set_s(a, "x/other", "a");
    fdb_error_t e = commit(a);
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
        set_s(b, snapshot ? "s/45" : "s/35", "new"); /* between the key and what it found */
        assert_int_equal(commit(b), 0);
        set_s(a, "s/written", "a");
        assert_int_equal(commit(a), snapshot ? 0 : 1020);
        fdb_transaction_destroy(a);
        fdb_transaction_destroy(b);
    }
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/kvq-fdbc-XXXXXX");
    if (mkdtemp(dir) == NULL)
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
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) == 0 && ret == NULL ? 0 : -1;
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
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
