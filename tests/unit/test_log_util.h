/* Helpers shared by the log store's unit tests (test_log_*.c). */
#ifndef TEST_LOG_UTIL_H
#define TEST_LOG_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvq_test.h"

/* A fresh directory (kt_mkdtemp); removed by tl_rmdir. */
static inline void tl_mkdir(char *buf, size_t cap, const char *tag)
{
    if (kt_mkdtemp(buf, cap, tag) != 0)
        abort();
}

static inline void tl_rmdir(const char *dir)
{
    if (kt_rm_rf(dir) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* Path of segment seq in dir. */
static inline void tl_seg_path(char *buf, size_t cap, const char *dir, unsigned long long seq)
{
    snprintf(buf, cap, "%s/log-%016llx.seg", dir, seq);
}

static inline unsigned tl_seed(void)
{
    const char *s = getenv("KVQ_TEST_SEED");
    return s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)getpid() * 2654435761u;
}

#endif
