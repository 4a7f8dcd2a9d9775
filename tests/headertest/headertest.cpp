// Compiles the umbrella header as C++; the build fails if a public header is not C++-clean.
#include <kvq/kvq.h>
#include <kvq/testing.h>

int kvq_headertest_cxx();
int kvq_headertest_cxx()
{
    return KVQ_OK;
}
