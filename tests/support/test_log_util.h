/* Helpers shared by the log store's unit tests (test_log_*.c). */
#ifndef TEST_LOG_UTIL_H
#define TEST_LOG_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvq_test.h"

/* A fresh directory (kt_mkdtemp); removed by tl_rmdir. */
void tl_mkdir(char *buf, size_t cap, const char *tag);

void tl_rmdir(const char *dir);

/* Path of segment seq in dir. */
void tl_seg_path(char *buf, size_t cap, const char *dir, unsigned long long seq);

unsigned tl_seed(void);

#endif
