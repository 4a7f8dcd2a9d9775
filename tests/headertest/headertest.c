/* Compiles the umbrella header as C99; the build fails if a public header needs more. */
#include <kvq/kvq.h>
#include <kvq/testing.h> /* apart from the umbrella header, and must compile too */

int kvq_headertest_c99(void);
int kvq_headertest_c99(void)
{
    return KVQ_OK;
}
