// Compiles the umbrella header as C++; the build fails if a public header is not C++-clean.
#include <kvq/kvq.h>

int kvq_headertest_cxx();
int kvq_headertest_cxx()
{
    return KVQ_OK;
}
