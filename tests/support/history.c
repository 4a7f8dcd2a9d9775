/* The histories of the crash campaigns: ids of operations, appended with write(2) by processes
 * that may be killed at any moment, read back and compared by the parent. */
#include <stdio.h>
#include <stdlib.h>

#include "kvq_test.h"

int kt_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void kt_ids_push(kt_ids *a, uint64_t id)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 4096;
        uint64_t *v = realloc(a->v, cap * sizeof(*v));
        if (v == NULL)
            fail_msg("out of memory for %zu ids", cap);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
}

void kt_ids_sort(kt_ids *a)
{
    if (a->n > 1)
        qsort(a->v, a->n, sizeof(*a->v), kt_cmp_u64);
}

int kt_ids_has(const kt_ids *a, uint64_t id)
{
    return a->n > 0 && bsearch(&id, a->v, a->n, sizeof(*a->v), kt_cmp_u64) != NULL;
}

void kt_ids_free(kt_ids *a)
{
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

void kt_history_read(const char *path, kt_ids *invoked, kt_ids *ok)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    char kind;
    unsigned w, s;
    while (fscanf(f, " %c %u %u", &kind, &w, &s) == 3) {
        uint64_t id = (uint64_t)w << 32 | s;
        kt_ids_push(kind == 'i' ? invoked : ok, id);
    }
    fclose(f);
}
