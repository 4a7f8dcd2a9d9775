/* A crew: the worker threads of a consumer runtime (consumer.c, workq_consumer.c) and their
 * lifecycle, written once. The crew starts its threads, counts those that ended, keeps the first
 * error that stopped one, and joins them once. Its mutex also guards what the runtime keeps
 * beside it (statistics, the stop flag); exit_cv is broadcast each time a worker ends. */
#ifndef KVQ_CONSUMER_CREW_H
#define KVQ_CONSUMER_CREW_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kvq__crew {
    pthread_mutex_t mu;
    pthread_cond_t exit_cv;
    pthread_t *threads;
    int size;    /* threads the crew has room for */
    int started; /* threads started (under mu) */
    int exited;  /* threads that ended (under mu) */
    int joined;
    int error; /* the first error that stopped a worker (under mu) */
} kvq__crew;

/* Room for n threads; 0 or KVQ_ENOMEM (what = the caller, for the message). Nothing started. */
int kvq__crew_init(kvq__crew *k, int n, const char *what);
/* Starts the crew's n threads, thread i running main(args + i * stride), with mu held until all
 * are started. 0, or KVQ_ENOMEM when a thread cannot be started (those before it run: the caller
 * stops and joins them). */
int kvq__crew_start(
    kvq__crew *k, void *(*main)(void *), void *args, size_t stride, const char *what);
/* A worker ends (its last call): counts it and wakes those that wait on exit_cv. */
void kvq__crew_exit(kvq__crew *k);
/* Records err as the crew's error unless one was recorded first. Takes mu. */
void kvq__crew_fail(kvq__crew *k, int err);
/* The same, for a caller that holds mu. */
void kvq__crew_fail_locked(kvq__crew *k, int err);
/* Adds n to a counter guarded by mu. */
void kvq__crew_add(kvq__crew *k, uint64_t *field, uint64_t n);
/* Copies n bytes guarded by mu (the runtime's statistics) to dst. */
void kvq__crew_read(kvq__crew *k, void *dst, const void *src, size_t n);
/* Joins the started threads (once; later calls only read) and returns the crew's error. */
int kvq__crew_join(kvq__crew *k);
/* The crew's error so far (0: none). */
int kvq__crew_error(kvq__crew *k);
/* Whether every started thread has ended. */
int kvq__crew_finished(kvq__crew *k);
/* Releases what init took (threads joined first). */
void kvq__crew_destroy(kvq__crew *k);

#endif /* KVQ_CONSUMER_CREW_H */
