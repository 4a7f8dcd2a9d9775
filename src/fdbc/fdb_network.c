/* libkvq_fdb_c.so: the network (API version selection, setup, the network thread that runs
 * the callbacks of futures completed later, its completion hooks), the client's version, error
 * texts and predicates. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fdbc/fdbc_internal.h"

int fdb_get_max_api_version(void)
{
    /* $KVQ_FDBC_MAX_API_VERSION plays an older client (710). */
    const char *env = getenv("KVQ_FDBC_MAX_API_VERSION");
    int v = env != NULL ? atoi(env) : 0;
    return v > 0 ? v : MAX_API_VERSION;
}

const char *fdb_get_client_version(void)
{
    return "kvq " KVQ_VERSION_STRING " (FoundationDB's C API on a kvq directory)";
}

/* FoundationDB's own texts (fdb_errors.c): "Success" for 0, "UNKNOWN_ERROR" for a code that
 * names no error, and unknown_error's text for codes outside 0..30000. */
const char *fdb_get_error(fdb_error_t code)
{
    return kvq__fdbc_message(code);
}

fdb_error_t fdb_select_api_version_impl(int runtime_version, int header_version)
{
    fdb_error_t err = 0;
    pthread_mutex_lock(&kvq__fdbc_net.mu);
    if (kvq__fdbc_net.api != 0)
        err = FDB_ERR_API_VERSION_ALREADY_SET;
    else if (runtime_version > header_version)
        err = FDB_ERR_API_VERSION_INVALID;
    else if (header_version > fdb_get_max_api_version() || runtime_version < 13)
        err = FDB_ERR_API_VERSION_NOT_SUPPORTED;
    else
        kvq__fdbc_net.api = runtime_version;
    pthread_mutex_unlock(&kvq__fdbc_net.mu);
    return err;
}

fdb_error_t fdb_setup_network(void)
{
    fdb_error_t err = 0;
    pthread_mutex_lock(&kvq__fdbc_net.mu);
    if (kvq__fdbc_net.api == 0)
        err = FDB_ERR_API_VERSION_UNSET;
    else if (kvq__fdbc_net.setup)
        err = FDB_ERR_NETWORK_ALREADY_SETUP;
    else
        kvq__fdbc_net.setup = 1;
    pthread_mutex_unlock(&kvq__fdbc_net.mu);
    return err;
}

fdb_error_t fdb_run_network(void)
{
    pthread_mutex_lock(&kvq__fdbc_net.mu);
    if (!kvq__fdbc_net.setup) {
        pthread_mutex_unlock(&kvq__fdbc_net.mu);
        return FDB_ERR_NETWORK_NOT_SETUP;
    }
    if (kvq__fdbc_net.running || kvq__fdbc_net.finished) {
        pthread_mutex_unlock(&kvq__fdbc_net.mu);
        return FDB_ERR_NETWORK_ALREADY_SETUP;
    }
    kvq__fdbc_net.running = 1;
    pthread_cond_broadcast(&kvq__fdbc_net.cond);
    for (;;) {
        /* Callbacks queued before the stop still run. */
        while (kvq__fdbc_net.head != NULL) {
            FDBFuture *f = kvq__fdbc_net.head;
            kvq__fdbc_net.head = f->next;
            if (kvq__fdbc_net.head == NULL)
                kvq__fdbc_net.tail = NULL;
            pthread_mutex_unlock(&kvq__fdbc_net.mu);
            /* Every callback set on the future, in the order they were set. */
            f->cb(f, f->cb_arg);
            for (int i = 0; i < f->n_more_cbs; i++)
                f->more_cbs[i].cb(f, f->more_cbs[i].arg);
            kvq__fdbc_fut_unref(f);
            pthread_mutex_lock(&kvq__fdbc_net.mu);
        }
        if (kvq__fdbc_net.stop)
            break;
        pthread_cond_wait(&kvq__fdbc_net.cond, &kvq__fdbc_net.mu);
    }
    kvq__fdbc_net.running = 0;
    kvq__fdbc_net.finished = 1;
    pthread_cond_broadcast(&kvq__fdbc_net.cond);
    int n_hooks = kvq__fdbc_net.n_hooks;
    pthread_mutex_unlock(&kvq__fdbc_net.mu);
    /* As libfdb_c does when its network thread is about to end. */
    for (int i = 0; i < n_hooks; i++)
        kvq__fdbc_net.hooks[i].fn(kvq__fdbc_net.hooks[i].arg);
    return 0;
}

fdb_error_t fdb_stop_network(void)
{
    pthread_mutex_lock(&kvq__fdbc_net.mu);
    if (!kvq__fdbc_net.setup) {
        pthread_mutex_unlock(&kvq__fdbc_net.mu);
        return FDB_ERR_NETWORK_NOT_SETUP;
    }
    kvq__fdbc_net.stop = 1;
    pthread_cond_broadcast(&kvq__fdbc_net.cond);
    pthread_mutex_unlock(&kvq__fdbc_net.mu);
    return 0;
}

static int in_set(fdb_error_t code, const fdb_error_t *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (set[i] == code)
            return 1;
    return 0;
}

/* As fdb_c.cpp defines them for the API version selected (7.3 adds 1078 and 1223, 7.1 has
 * 2137). */
fdb_bool_t fdb_error_predicate(int predicate_test, fdb_error_t code)
{
    static const fdb_error_t maybe[] = { 1021, 1039 };
    static const fdb_error_t not_committed[] = { 1020, 1007, 1009, 1038, 1042, 1051, 1037, 1213 };
    static const fdb_error_t since_730[] = { 1078, 1223 };
    static const fdb_error_t until_730[] = { 2137 };
    pthread_mutex_lock(&kvq__fdbc_net.mu);
    int api = kvq__fdbc_net.api;
    pthread_mutex_unlock(&kvq__fdbc_net.mu);
    int m = in_set(code, maybe, 2);
    int r = in_set(code, not_committed, 8) ||
            (api >= 730 ? in_set(code, since_730, 2) : in_set(code, until_730, 1));
    switch (predicate_test) {
    case FDB_ERROR_PREDICATE_RETRYABLE:
        return m || r;
    case FDB_ERROR_PREDICATE_MAYBE_COMMITTED:
        return m;
    case FDB_ERROR_PREDICATE_RETRYABLE_NOT_COMMITTED:
        return r;
    default:
        return 0;
    }
}

fdb_error_t fdb_add_network_thread_completion_hook(void (*hook)(void *), void *hook_parameter)
{
    if (hook == NULL)
        return FDB_ERR_INVALID_OPTION_VALUE;
    fdb_error_t err = 0;
    pthread_mutex_lock(&kvq__fdbc_net.mu);
    if (!kvq__fdbc_net.setup)
        err = FDB_ERR_NETWORK_NOT_SETUP;
    else if (kvq__fdbc_net.n_hooks ==
             (int)(sizeof(kvq__fdbc_net.hooks) / sizeof(kvq__fdbc_net.hooks[0])))
        err = FDB_ERR_CLIENT_INVALID_OPERATION;
    else
        kvq__fdbc_net.hooks[kvq__fdbc_net.n_hooks++] = (struct net_hook){ hook, hook_parameter };
    pthread_mutex_unlock(&kvq__fdbc_net.mu);
    return err;
}
