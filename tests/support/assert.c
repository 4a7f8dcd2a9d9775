/* What the assertion macros of kvq_test.h print. */
#include <stdio.h>

#include "kvq_test.h"

void kt_hex(const char *what, const uint8_t *p, size_t n)
{
    fprintf(stderr, "%s (%zu):", what != NULL ? what : "", n);
    for (size_t i = 0; p != NULL && i < n; i++)
        fprintf(stderr, " %02x", p[i]);
    fprintf(stderr, "\n");
}
