/* The engine's arena: memory handed out by a transaction's reads (keys, values, result
 * arrays), valid until the transaction is reset, and freed all at once. */
#include "emb.h"

#define ARENA_BLOCK 65536

void *emb_arena_alloc(emb_arena *a, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    emb_arena_block *b = a->head;
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK / 2 ? n : ARENA_BLOCK;
        emb_arena_block *nb = kvq__malloc(sizeof(*nb) + cap);
        if (nb == NULL)
            return NULL;
        nb->cap = cap;
        nb->used = 0;
        if (b != NULL && n > ARENA_BLOCK / 2) {
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
