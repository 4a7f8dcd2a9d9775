/* Unit tests of the error table, CRC32C and the byte helpers. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "kvq/kvq.h"
#include "engine/engine.h"
#include "util/util.h"

uint32_t kvq__crc32c_sw(uint32_t crc, const void *data, size_t len);

static void test_error_names(void **state)
{
    (void)state;
    assert_int_equal(KVQ_ENOT_COMMITTED, 1020);
    assert_int_equal(KVQ_ECOMMIT_UNKNOWN_RESULT, 1021);
    assert_int_equal(KVQ_ETRANSACTION_TOO_OLD, 1007);
    assert_int_equal(KVQ_EKEY_TOO_LARGE, 2102);
    assert_string_equal(kvq_errname(1020), "not_committed");
    assert_string_equal(kvq_errname(2103), "value_too_large");
    assert_string_equal(kvq_errname(0), "success");
    assert_string_equal(kvq_errname(123456), "unknown");
    assert_string_equal(kvq_strerror(-5), "unknown error code");
    assert_non_null(strstr(kvq_strerror(KVQ_EKEY_TOO_LARGE), "10,000"));
}

static void test_error_predicates(void **state)
{
    (void)state;
    assert_true(kvq_error_retryable(1020));
    assert_true(kvq_error_retryable(1021));
    assert_true(kvq_error_retryable(1007));
    assert_false(kvq_error_retryable(2102));
    assert_false(kvq_error_retryable(KVQ_EINVAL));
    assert_true(kvq_error_maybe_committed(1021));
    assert_false(kvq_error_maybe_committed(1020));
    assert_true(kvq_error_retryable_not_committed(1020));
    assert_false(kvq_error_retryable_not_committed(1021));
}

/* FoundationDB's error numbers and names (flow's error_definitions.h): 1223 is
 * proxy_tag_throttled (7.3), 1235 transaction_throttled_hot_shard and 1242
 * transaction_rejected_range_locked (7.4); all three are retried, never committed. */
static void test_error_names_throttling(void **state)
{
    (void)state;
    assert_string_equal(kvq_errname(1223), "proxy_tag_throttled");
    assert_string_equal(kvq_errname(1235), "transaction_throttled_hot_shard");
    assert_string_equal(kvq_errname(1242), "transaction_rejected_range_locked");
    assert_string_equal(kvq_errname(1042), "commit_proxy_memory_limit_exceeded");
    assert_int_equal(KVQ_ETRANSACTION_REJECTED_RANGE_LOCKED, 1242);
    static const int retried[] = { 1007, 1009, 1020, 1037, 1038, 1042,
                                   1051, 1078, 1213, 1223, 1235, 1242 };
    for (size_t i = 0; i < sizeof(retried) / sizeof(retried[0]); i++) {
        assert_true(kvq_error_retryable(retried[i]));
        assert_true(kvq_error_retryable_not_committed(retried[i]));
        assert_false(kvq_error_maybe_committed(retried[i]));
    }
    assert_false(kvq_error_retryable(1031));
}

/* The retry loop's backoff follows FoundationDB's on_error: it starts at the engine's initial
 * backoff, each retry sleeps a fraction of it and doubles it up to max_retry_delay; 1007 and
 * 1009 sleep a fixed 10 ms without growing it; throttling by resources grows it up to 30 s. */
static void test_retry_backoff(void **state)
{
    (void)state;
    int64_t b = 0;
    const int64_t max = 1000000; /* 1 s, max_retry_delay's default */
    /* unit 0.999...: the sleep is (almost) the whole backoff. */
    const double u = 0.999999;
    assert_int_equal(kvq__retry_delay_us(&b, 1020, max, 10000, u) / 1000, 9);
    assert_int_equal(b, 20000);
    assert_int_equal(kvq__retry_delay_us(&b, 1020, max, 10000, u) / 1000, 19);
    assert_int_equal(b, 40000);
    /* 1007 and 1009: a fixed 10 ms; the backoff does not grow. */
    assert_int_equal(kvq__retry_delay_us(&b, 1007, max, 10000, u), 10000);
    assert_int_equal(kvq__retry_delay_us(&b, 1009, max, 10000, 0.0), 10000);
    assert_int_equal(b, 40000);
    for (int i = 0; i < 20; i++)
        (void)kvq__retry_delay_us(&b, 1020, max, 10000, u);
    assert_int_equal(b, max);
    /* Resource-constrained errors grow past max_retry_delay, up to 30 s. */
    for (int i = 0; i < 20; i++)
        (void)kvq__retry_delay_us(&b, 1042, max, 10000, u);
    assert_int_equal(b, 30000000);
    int64_t c = 0;
    for (int i = 0; i < 20; i++)
        (void)kvq__retry_delay_us(&c, 1242, max, 10000, u);
    assert_int_equal(c, 30000000);
    /* A retry delay of 0 never sleeps. */
    int64_t z = 0;
    assert_int_equal(kvq__retry_delay_us(&z, 1020, 0, 10000, u), 0);
    assert_int_equal(kvq__retry_delay_us(&z, 1007, 0, 10000, u), 0);
}

static void test_last_error(void **state)
{
    (void)state;
    assert_int_equal(kvq__error(KVQ_EINVAL, "bad %s\nline", "thing"), KVQ_EINVAL);
    assert_int_equal(kvq_last_error_code(), KVQ_EINVAL);
    assert_string_equal(kvq_last_error(), "bad thing line");
    kvq__error_clear();
    assert_string_equal(kvq_last_error(), "");
}

static void test_crc32c(void **state)
{
    (void)state;
    /* The check value of CRC-32C over "123456789" is 0xE3069283. */
    assert_int_equal(kvq__crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(kvq__crc32c_sw(0, "123456789", 9), 0xE3069283u);
    /* 32 bytes of zeros: 0x8A9136AA (RFC 3720, B.4). */
    uint8_t z[32] = { 0 };
    assert_int_equal(kvq__crc32c(0, z, sizeof(z)), 0x8A9136AAu);
    uint8_t ff[32];
    memset(ff, 0xff, sizeof(ff));
    assert_int_equal(kvq__crc32c(0, ff, sizeof(ff)), 0x62A8AB43u);
    /* Continuation equals one pass, and both paths agree at every length and alignment. */
    uint8_t buf[300];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 31 + 7);
    for (size_t off = 0; off < 9; off++) {
        for (size_t len = 0; len + off <= sizeof(buf); len += 13) {
            uint32_t one = kvq__crc32c(0, buf + off, len);
            assert_int_equal(one, kvq__crc32c_sw(0, buf + off, len));
            uint32_t two =
                kvq__crc32c(kvq__crc32c(0, buf + off, len / 2), buf + off + len / 2, len - len / 2);
            assert_int_equal(one, two);
        }
    }
}

static void test_bytes_cmp(void **state)
{
    (void)state;
    const uint8_t a[] = { 1, 2, 3 };
    const uint8_t b[] = { 1, 2, 4 };
    assert_true(kvq__bytes_cmp(a, 3, b, 3) < 0);
    assert_true(kvq__bytes_cmp(a, 2, a, 3) < 0);
    assert_true(kvq__bytes_cmp(a, 3, a, 2) > 0);
    assert_int_equal(kvq__bytes_cmp(a, 3, a, 3), 0);
    assert_int_equal(kvq__bytes_cmp(NULL, 0, NULL, 0), 0);
}

/* docs/errors.md lists every code with its name and message, so the documentation cannot drift
 * from the one list in kvq/error.h. */
static void test_errors_documented(void **state)
{
    (void)state;
    FILE *f = fopen(KVQ_SOURCE_DIR "/docs/errors.md", "r");
    assert_non_null(f);
    static char doc[65536];
    size_t n = fread(doc, 1, sizeof(doc) - 1, f);
    fclose(f);
    doc[n] = '\0';
    char row[512];
#define CHECK_ROW(suffix, num, name, msg)                                                  \
    snprintf(row, sizeof(row), "| %d | `KVQ_E%s` | `%s` | %s |", num, #suffix, name, msg); \
    if (strstr(doc, row) == NULL)                                                          \
        fail_msg("docs/errors.md lacks the row: %s", row);
    KVQ_ERROR_MAP(CHECK_ROW)
#undef CHECK_ROW
}

static void test_version(void **state)
{
    (void)state;
    assert_string_equal(kvq_version(), KVQ_VERSION_STRING);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_names),
        cmocka_unit_test(test_error_predicates),
        cmocka_unit_test(test_error_names_throttling),
        cmocka_unit_test(test_retry_backoff),
        cmocka_unit_test(test_last_error),
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_bytes_cmp),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_errors_documented),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
