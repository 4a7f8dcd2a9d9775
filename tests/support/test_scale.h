/* The scale of the randomized and campaign tests: how many cycles, items, seconds they run.
 *
 * $KVQ_TEST_SCALE multiplies every count (default 1; scripts/soak.sh sets 20). $KVQ_SOAK=1, the
 * older spelling, means a scale of 20 when $KVQ_TEST_SCALE is not set. */
#ifndef KVQ_TEST_SCALE_H
#define KVQ_TEST_SCALE_H

#include <stdlib.h>

static inline double kvq_test_scale(void)
{
    const char *s = getenv("KVQ_TEST_SCALE");
    if (s != NULL && s[0] != '\0') {
        double f = strtod(s, NULL);
        return f > 0 ? f : 1.0;
    }
    s = getenv("KVQ_SOAK");
    return s != NULL && s[0] != '\0' && s[0] != '0' ? 20.0 : 1.0;
}

/* n scaled, at least 1. */
static inline long kvq_test_scaled(long n)
{
    double v = (double)n * kvq_test_scale();
    return v < 1 ? 1 : (long)v;
}

/* How much longer a wall-time span of a test must be in this build: the lease a heartbeat must
 * keep, the wait before a redelivery would show. A test that needs a thread to run within a span
 * of wall time cannot control the clock; it widens the span instead (TESTING.md). 4 in the
 * sanitizer builds (KVQ_TEST_SLOW_BUILD, set by tests/CMakeLists.txt), 1 otherwise; $KVQ_TEST_TIME_FACTOR
 * overrides it (valgrind, a very loaded machine). */
#ifndef KVQ_TEST_SLOW_BUILD
#define KVQ_TEST_SLOW_BUILD 1
#endif
static inline long kvq_test_time_factor(void)
{
    const char *s = getenv("KVQ_TEST_TIME_FACTOR");
    if (s != NULL && s[0] != '\0') {
        long f = strtol(s, NULL, 10);
        return f >= 1 && f <= 100 ? f : 1;
    }
    return KVQ_TEST_SLOW_BUILD;
}

#endif
