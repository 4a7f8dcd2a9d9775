/* libkvq_fdb_c.so: the network (API version selection, setup, the network thread that runs
 * the callbacks of futures completed later, its completion hooks), the client's version, error
 * texts and predicates, and the library's reports of misuse. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fdbc/fdbc_internal.h"

/* A misuse that a real client would punish with a crash or a hang: stop loudly. */
void misuse(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("libkvq_fdb_c: misuse: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void complain(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("libkvq_fdb_c: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

struct fdbc_net net = { .mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

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
    pthread_mutex_lock(&net.mu);
    if (net.api != 0)
        err = FDB_ERR_API_VERSION_ALREADY_SET;
    else if (runtime_version > header_version)
        err = FDB_ERR_API_VERSION_INVALID;
    else if (header_version > fdb_get_max_api_version() || runtime_version < 13)
        err = FDB_ERR_API_VERSION_NOT_SUPPORTED;
    else
        net.api = runtime_version;
    pthread_mutex_unlock(&net.mu);
    return err;
}

fdb_error_t fdb_setup_network(void)
{
    fdb_error_t err = 0;
    pthread_mutex_lock(&net.mu);
    if (net.api == 0)
        err = FDB_ERR_API_VERSION_UNSET;
    else if (net.setup)
        err = FDB_ERR_NETWORK_ALREADY_SETUP;
    else
        net.setup = 1;
    pthread_mutex_unlock(&net.mu);
    return err;
}

fdb_error_t fdb_run_network(void)
{
    pthread_mutex_lock(&net.mu);
    if (!net.setup) {
        pthread_mutex_unlock(&net.mu);
        return FDB_ERR_NETWORK_NOT_SETUP;
    }
    if (net.running || net.finished) {
        pthread_mutex_unlock(&net.mu);
        return FDB_ERR_NETWORK_ALREADY_SETUP;
    }
    net.running = 1;
    pthread_cond_broadcast(&net.cond);
    for (;;) {
        /* Callbacks queued before the stop still run. */
        while (net.head != NULL) {
            FDBFuture *f = net.head;
            net.head = f->next;
            if (net.head == NULL)
                net.tail = NULL;
            pthread_mutex_unlock(&net.mu);
            /* Every callback set on the future, in the order they were set. */
            f->cb(f, f->cb_arg);
            for (int i = 0; i < f->n_more_cbs; i++)
                f->more_cbs[i].cb(f, f->more_cbs[i].arg);
            fut_unref(f);
            pthread_mutex_lock(&net.mu);
        }
        if (net.stop)
            break;
        pthread_cond_wait(&net.cond, &net.mu);
    }
    net.running = 0;
    net.finished = 1;
    pthread_cond_broadcast(&net.cond);
    int n_hooks = net.n_hooks;
    pthread_mutex_unlock(&net.mu);
    /* As libfdb_c does when its network thread is about to end. */
    for (int i = 0; i < n_hooks; i++)
        net.hooks[i].fn(net.hooks[i].arg);
    return 0;
}

fdb_error_t fdb_stop_network(void)
{
    pthread_mutex_lock(&net.mu);
    if (!net.setup) {
        pthread_mutex_unlock(&net.mu);
        return FDB_ERR_NETWORK_NOT_SETUP;
    }
    net.stop = 1;
    pthread_cond_broadcast(&net.cond);
    pthread_mutex_unlock(&net.mu);
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
    pthread_mutex_lock(&net.mu);
    int api = net.api;
    pthread_mutex_unlock(&net.mu);
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
    pthread_mutex_lock(&net.mu);
    if (!net.setup)
        err = FDB_ERR_NETWORK_NOT_SETUP;
    else if (net.n_hooks == (int)(sizeof(net.hooks) / sizeof(net.hooks[0])))
        err = FDB_ERR_CLIENT_INVALID_OPERATION;
    else
        net.hooks[net.n_hooks++] = (struct net_hook){ hook, hook_parameter };
    pthread_mutex_unlock(&net.mu);
    return err;
}
