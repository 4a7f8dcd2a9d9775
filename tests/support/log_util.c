/* The log store tests' directories and segment paths (test_log_util.h says what each does). */
#include "test_log_util.h"

void tl_mkdir(char *buf, size_t cap, const char *tag)
{
    if (kt_mkdtemp(buf, cap, tag) != 0)
        abort();
}

void tl_rmdir(const char *dir)
{
    if (kt_rm_rf(dir) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

void tl_seg_path(char *buf, size_t cap, const char *dir, unsigned long long seq)
{
    snprintf(buf, cap, "%s/log-%016llx.seg", dir, seq);
}

unsigned tl_seed(void)
{
    const char *s = getenv("KVQ_TEST_SEED");
    return s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)getpid() * 2654435761u;
}
