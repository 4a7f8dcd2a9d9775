/* The lifecycle of a consumer runtime's worker threads (crew.h). */
#include <string.h>

#include "consumer/crew.h"
#include "util/util.h"

int kvq__crew_init(kvq__crew *k, int n, const char *what)
{
    k->threads = kvq__calloc((size_t)n, sizeof(*k->threads));
    if (k->threads == NULL)
        return kvq__error(KVQ_ENOMEM, "%s: out of memory", what);
    k->size = n;
    k->started = k->exited = k->joined = k->error = 0;
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->exit_cv, NULL);
    return 0;
}

int kvq__crew_start(
    kvq__crew *k, void *(*main)(void *), void *args, size_t stride, const char *what)
{
    int rc = 0;
    pthread_mutex_lock(&k->mu);
    for (int i = 0; i < k->size && rc == 0; i++) {
        if (pthread_create(&k->threads[i], NULL, main, (char *)args + (size_t)i * stride) != 0)
            rc = kvq__error(KVQ_ENOMEM, "%s: cannot start a thread", what);
        else
            k->started++;
    }
    pthread_mutex_unlock(&k->mu);
    return rc;
}

void kvq__crew_exit(kvq__crew *k)
{
    pthread_mutex_lock(&k->mu);
    k->exited++;
    pthread_cond_broadcast(&k->exit_cv);
    pthread_mutex_unlock(&k->mu);
}

void kvq__crew_fail_locked(kvq__crew *k, int err)
{
    if (k->error == 0)
        k->error = err;
}

void kvq__crew_fail(kvq__crew *k, int err)
{
    pthread_mutex_lock(&k->mu);
    kvq__crew_fail_locked(k, err);
    pthread_mutex_unlock(&k->mu);
}

void kvq__crew_add(kvq__crew *k, uint64_t *field, uint64_t n)
{
    pthread_mutex_lock(&k->mu);
    *field += n;
    pthread_mutex_unlock(&k->mu);
}

void kvq__crew_read(kvq__crew *k, void *dst, const void *src, size_t n)
{
    pthread_mutex_lock(&k->mu);
    memcpy(dst, src, n);
    pthread_mutex_unlock(&k->mu);
}

int kvq__crew_error(kvq__crew *k)
{
    pthread_mutex_lock(&k->mu);
    int rc = k->error;
    pthread_mutex_unlock(&k->mu);
    return rc;
}

int kvq__crew_join(kvq__crew *k)
{
    if (!k->joined) {
        for (int i = 0; i < k->started; i++)
            pthread_join(k->threads[i], NULL);
        k->joined = 1;
    }
    return kvq__crew_error(k);
}

int kvq__crew_finished(kvq__crew *k)
{
    pthread_mutex_lock(&k->mu);
    int done = k->exited >= k->started;
    pthread_mutex_unlock(&k->mu);
    return done;
}

void kvq__crew_destroy(kvq__crew *k)
{
    if (k->threads == NULL)
        return;
    (void)kvq__crew_join(k);
    pthread_cond_destroy(&k->exit_cv);
    pthread_mutex_destroy(&k->mu);
    kvq__free(k->threads);
    k->threads = NULL;
}
