/* LD_PRELOAD library for scripts/tests/tsan_skip_check.sh: appends a line "PID thread" to
 * $KVQ_THREADS_LOG each time a process creates a thread (at once, so that a process killed
 * later is counted too). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    static create_fn real;
    if (real == NULL)
        real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
    const char *log = getenv("KVQ_THREADS_LOG");
    if (log != NULL) {
        int fd = open(log, O_WRONLY | O_APPEND | O_CREAT, 0600);
        if (fd >= 0) {
            char line[64];
            int n = snprintf(line, sizeof(line), "%d thread\n", (int)getpid());
            if (n > 0 && write(fd, line, (size_t)n) != n)
                n = 0;
            close(fd);
        }
    }
    return real(t, attr, fn, arg);
}
