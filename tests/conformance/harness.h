/* Shared helpers of the conformance tests. They use only the public API, and open the database
 * named by $KVQ_TEST_URL (e.g. fdb:/etc/foundationdb/fdb.cluster), or else a fresh directory
 * (the embedded engine). When the URL's engine is unavailable the tests report themselves
 * skipped, never passed. */
#ifndef KVQ_CONFORMANCE_HARNESS_H
#define KVQ_CONFORMANCE_HARNESS_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq/testing.h"

static char h_dir[128];
static char h_url[512];
static int h_unavailable;

static inline int h_is_fdb(void)
{
    return strncmp(h_url, "fdb:", 4) == 0;
}

/* Opens a handle on the test database with the given options (NULL: defaults). Skips the test
 * when the engine is not available. */
static inline kvq_db *h_open_testing(const kvq_db_options *o, const kvq_testing_options *t)
{
    if (h_unavailable)
        skip();
    kvq_db *db = NULL;
    int rc = kvq_db_open_testing(&db, h_url, o, t);
    if (rc == KVQ_ENOENGINE) {
        h_unavailable = 1;
        fprintf(stderr, "engine unavailable (%s): skipped\n", kvq_last_error());
        skip();
    }
    if (rc != 0)
        fail_msg("kvq_db_open(%s): %s (%s)", h_url, kvq_errname(rc), kvq_last_error());
    return db;
}

static inline kvq_db *h_open(const kvq_db_options *o)
{
    return h_open_testing(o, NULL);
}

/* Every test works under its own prefix, so that tests sharing one database (fdb) never see
 * each other's keys. */
static inline void h_key(char *out, size_t n, const char *test, const char *k)
{
    snprintf(out, n, "t/%s/%s", test, k);
}

static inline int h_group_setup(void **state)
{
    (void)state;
    const char *url = getenv("KVQ_TEST_URL");
    if (url != NULL && url[0] != '\0') {
        snprintf(h_url, sizeof(h_url), "%s", url);
        return 0;
    }
    snprintf(h_dir, sizeof(h_dir), "/tmp/kvq-conf-XXXXXX");
    if (mkdtemp(h_dir) == NULL)
        return -1;
    snprintf(h_url, sizeof(h_url), "%s/db", h_dir);
    return 0;
}

static inline int h_group_teardown(void **state)
{
    (void)state;
    if (h_dir[0] != '\0') {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", h_dir);
        return system(cmd) == 0 ? 0 : -1;
    }
    return 0;
}

static inline unsigned h_seed(const char *prog)
{
    unsigned s = getenv("KVQ_TEST_SEED") ? (unsigned)strtoul(getenv("KVQ_TEST_SEED"), NULL, 10)
                                         : (unsigned)time(NULL);
    printf("seed %u (replay: KVQ_TEST_SEED=%u %s)\n", s, s, prog);
    return s;
}

#define K(s) (const uint8_t *)(s), strlen(s)
#define OK(x)                                                                          \
    do {                                                                               \
        int rc_ = (x);                                                                 \
        if (rc_ != 0)                                                                  \
            fail_msg("%s -> %d %s (%s)", #x, rc_, kvq_errname(rc_), kvq_last_error()); \
    } while (0)

#endif /* KVQ_CONFORMANCE_HARNESS_H */
