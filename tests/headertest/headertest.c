/* Compiles the umbrella header as C99; the build fails if a public header needs more. */
#include <kvq/kvq.h>

int kvq_headertest_c99(void);
int kvq_headertest_c99(void)
{
    return KVQ_OK;
}
