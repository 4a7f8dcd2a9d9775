/* The engine's arena: a transaction's mutations, conflict ranges and read-your-writes overlay,
 * and the memory its reads hand out (keys, values, result arrays), valid until the transaction
 * is reset, and freed all at once. Blocks grow from a small first one (a transaction of one
 * push needs little) to ARENA_BLOCK. */
#include "emb.h"

#define ARENA_FIRST 16384
#define ARENA_BLOCK 65536

void *emb_arena_alloc(emb_arena *a, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    emb_arena_block *b = a->head;
    if (b == NULL || b->cap - b->used < n) {
        size_t step = b == NULL ? ARENA_FIRST : b->cap * 2;
        if (step > ARENA_BLOCK)
            step = ARENA_BLOCK;
        size_t cap = n > step / 2 ? n : step;
        emb_arena_block *nb = kvq__malloc(sizeof(*nb) + cap);
        if (nb == NULL)
            return NULL;
        nb->cap = cap;
        nb->used = 0;
        if (b != NULL && n > step / 2) {
            /* A large block goes behind the current one, which keeps its free room. */
            nb->next = b->next;
            b->next = nb;
            nb->used = n;
            return nb->data;
        }
        nb->next = b;
        a->head = nb;
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

void emb_arena_free(emb_arena *a)
{
    emb_arena_block *b = a->head;
    while (b != NULL) {
        emb_arena_block *n = b->next;
        kvq__free(b);
        b = n;
    }
    a->head = NULL;
}
