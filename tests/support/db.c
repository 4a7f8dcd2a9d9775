/* The tests' databases on either engine: the one named by $KVQ_TEST_URL (ctest runs the
 * conformance tests and a few unit tests again with fdb:<cluster file>, on the fdb engine through
 * libkvq_fdb_c.so), else a fresh directory on the embedded engine. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq_test.h"

static char db_dir[PATH_MAX]; /* the fresh directory of kt_db_setup, "" for a given URL */
static char db_url[PATH_MAX];
static int url_given;
static int no_engine; /* an open found the engine unavailable */

int kt_db_setup(const char *tag)
{
    const char *url = getenv("KVQ_TEST_URL");
    db_dir[0] = '\0';
    url_given = url != NULL && url[0] != '\0';
    if (url_given) {
        int n = snprintf(db_url, sizeof(db_url), "%s", url);
        return n < 0 || (size_t)n >= sizeof(db_url) ? -1 : 0;
    }
    if (kt_mkdtemp(db_dir, sizeof(db_dir) - 8, tag != NULL ? tag : "test") != 0)
        return -1;
    int n = snprintf(db_url, sizeof(db_url), "%s/db", db_dir);
    return n < 0 || (size_t)n >= sizeof(db_url) ? -1 : 0;
}

int kt_db_teardown(void)
{
    if (db_dir[0] == '\0')
        return 0;
    int rc = kt_rm_rf(db_dir);
    db_dir[0] = '\0';
    return rc;
}

const char *kt_db_url(void)
{
    return db_url;
}

const char *kt_db_dir(void)
{
    return db_dir;
}

int kt_db_url_given(void)
{
    const char *url = getenv("KVQ_TEST_URL");
    return url_given || (url != NULL && url[0] != '\0');
}

int kt_db_is_fdb(void)
{
    const char *url = url_given ? db_url : getenv("KVQ_TEST_URL");
    return url != NULL && strncmp(url, "fdb:", 4) == 0;
}

int kt_db_try_open(kvq_db **out,
                   const char *url,
                   const kvq_db_options *opts,
                   const kvq_testing_options *t)
{
    if (out == NULL || url == NULL)
        return KVQ_EINVAL;
    *out = NULL;
    if (no_engine)
        return KVQ_ENOENGINE;
    int rc = kvq_db_open_testing(out, url, opts, t);
    if (rc == KVQ_ENOENGINE) {
        no_engine = 1;
        fprintf(stderr, "the engine of %s is not available here (%s): skipped\n", url,
                kvq_last_error());
    }
    return rc;
}

void kt_db_skip_unavailable(void)
{
    if (no_engine)
        skip();
}

kvq_db *kt_db_open_url(const char *url, const kvq_db_options *opts, const kvq_testing_options *t)
{
    kt_db_skip_unavailable();
    kvq_db *db = NULL;
    int rc = kt_db_try_open(&db, url, opts, t);
    if (rc == KVQ_ENOENGINE)
        skip();
    if (rc != 0)
        fail_msg("kvq_db_open(%s) -> %d %s (%s)", url, rc, kvq_errname(rc), kvq_last_error());
    assert_non_null(db);
    return db;
}

static kvq_db **group_db;
static const char *group_tag = "test";
static kt_tmp group_tmp;
void kt_group_db(kvq_db **db, const char *tag)
{
    group_db = db;
    group_tag = tag != NULL ? tag : "test";
}

int kt_group_db_setup(void **state)
{
    (void)state;
    if (group_db == NULL || kt_tmp_make(&group_tmp, group_tag) != 0)
        return -1;
    int rc = kvq_db_open(group_db, group_tmp.db, NULL);
    if (rc != 0) {
        fprintf(stderr, "kvq_db_open(%s) -> %d %s (%s)\n", group_tmp.db, rc, kvq_errname(rc),
                kvq_last_error());
        (void)kt_tmp_remove(&group_tmp);
        return -1;
    }
    return 0;
}

int kt_group_db_teardown(void **state)
{
    (void)state;
    if (group_db != NULL && *group_db != NULL) {
        kvq_db_close(*group_db);
        *group_db = NULL;
    }
    return kt_tmp_remove(&group_tmp);
}

const char *kt_group_db_path(void)
{
    return group_tmp.db;
}

int kt_put(kvq_db *db, const char *k, const char *v)
{
    kvq_txn *t = NULL;
    int rc = kvq_txn_create(&t, db);
    if (rc == 0)
        rc = kvq_txn_set(t, (const uint8_t *)k, strlen(k), (const uint8_t *)v, strlen(v));
    if (rc == 0)
        rc = kvq_txn_commit(t);
    kvq_txn_destroy(t);
    return rc;
}
