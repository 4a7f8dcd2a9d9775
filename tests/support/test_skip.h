/* Skipped tests and ctest (see test_skip.c): a test program with a skipped test and no failed
 * one exits with KVQ_TEST_SKIPPED, which ctest reports as skipped. */
#ifndef KVQ_TEST_SKIP_H
#define KVQ_TEST_SKIP_H

/* ctest's SKIP_RETURN_CODE for every kvq test (tests/CMakeLists.txt). */
#define KVQ_TEST_SKIPPED 77

void kvq_test_skip_not_applicable_mark(void);

/* Skips the current test without counting it as skipped: it does not apply by design (not a
 * missing prerequisite). */
#define kvq_test_skip_not_applicable()       \
    do {                                     \
        kvq_test_skip_not_applicable_mark(); \
        skip();                              \
    } while (0)

/* Whether strace is installed and may trace here (ptrace can be refused in a container). When
 * not, prints "<who>: skipped=strace_missing" or "<who>: skipped=ptrace_refused" and returns 0:
 * the caller skips (skip(), or exit KVQ_TEST_SKIPPED before any test ran). */
int kvq_test_have_strace(const char *who);

#endif
