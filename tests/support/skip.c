/* Skipped tests are reported to ctest as skipped, never as passed.
 *
 * cmocka's skip() marks one test as skipped, but the test program still exits 0, so ctest
 * counted a program whose tests could not run here (no strace, no permission to mount, no fdb
 * engine ...) as passed. Every test program is linked with --wrap for cmocka's _skip and
 * _cmocka_run_group_tests (tests/CMakeLists.txt): skips are counted, and a run with no failure
 * and at least one skip exits with 77, which ctest reports as skipped (SKIP_RETURN_CODE).
 *
 * A test that does not apply by design (an embedded-engine-only test in a run on the fdb
 * engine) is not a missing prerequisite: kvq_test_skip_not_applicable() skips it without
 * counting it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_skip.h"

void __real__skip(const char *const file, const int line);
void __wrap__skip(const char *const file, const int line);
int __real__cmocka_run_group_tests(const char *group_name,
                                   const struct CMUnitTest *const tests,
                                   const size_t num_tests,
                                   CMFixtureFunction group_setup,
                                   CMFixtureFunction group_teardown);
int __wrap__cmocka_run_group_tests(const char *group_name,
                                   const struct CMUnitTest *const tests,
                                   const size_t num_tests,
                                   CMFixtureFunction group_setup,
                                   CMFixtureFunction group_teardown);

static int skipped;
static int not_applicable;

void kvq_test_skip_not_applicable_mark(void)
{
    not_applicable = 1;
}

void __wrap__skip(const char *const file, const int line)
{
    if (not_applicable)
        not_applicable = 0;
    else
        skipped++;
    __real__skip(file, line);
}

int __wrap__cmocka_run_group_tests(const char *group_name,
                                   const struct CMUnitTest *const tests,
                                   const size_t num_tests,
                                   CMFixtureFunction group_setup,
                                   CMFixtureFunction group_teardown)
{
    int failed =
        __real__cmocka_run_group_tests(group_name, tests, num_tests, group_setup, group_teardown);
    if (failed == 0 && skipped > 0) {
        fflush(stdout);
        fprintf(stderr,
                "%s: %d test(s) skipped (a prerequisite is missing here): reporting the "
                "program as skipped (exit 77)\n",
                group_name, skipped);
        return KVQ_TEST_SKIPPED;
    }
    return failed;
}

int kvq_test_have_strace(const char *who)
{
    if (system("command -v strace > /dev/null 2>&1") != 0) {
        printf("%s: skipped=strace_missing\n", who);
        return 0;
    }
    if (system("strace -f -qq -o /dev/null true > /dev/null 2>&1") != 0) {
        printf("%s: skipped=ptrace_refused\n", who);
        return 0;
    }
    return 1;
}
