/* What every file of libkvq_fdb_c.so uses, below them all: the reports of misuse, the
 * network's state (fdb_network.c runs it, fdb_future.c queues callbacks on it) and copies of
 * bytes the library owns. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fdbc/fdbc_internal.h"

/* A misuse that a real client would punish with a crash or a hang: stop loudly. */
void kvq__fdbc_misuse(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("libkvq_fdb_c: misuse: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void kvq__fdbc_complain(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("libkvq_fdb_c: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

struct kvq__fdbc_net_state kvq__fdbc_net = { .mu = PTHREAD_MUTEX_INITIALIZER,
                                             .cond = PTHREAD_COND_INITIALIZER };

uint8_t *kvq__fdbc_copy_bytes(const uint8_t *p, size_t n)
{
    uint8_t *c = malloc(n > 0 ? n : 1);
    if (c == NULL)
        kvq__fdbc_misuse("out of memory");
    if (n > 0)
        memcpy(c, p, n);
    return c;
}
