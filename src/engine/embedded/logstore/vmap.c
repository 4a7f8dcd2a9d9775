/* The log store's versioned ordered map (vmap.h): a skip list of keys, each with a chain of
 * versioned values, and a queue of (version, key) that tells forget where old entries are. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/embedded/logstore/vmap.h"
#include "util/util.h"

#define MAX_LEVEL 24
#define MALLOC_OVERHEAD 16u

typedef struct vm_ver {
    struct vm_ver *older;
    int64_t version;
    uint32_t len;
    uint32_t dead; /* a tombstone */
    uint8_t val[];
} vm_ver;

struct vm_node {
    vm_ver *vers; /* newest first */
    vm_node *prev;
    uint8_t *key;
    uint32_t klen;
    uint32_t gc_refs; /* records of the forget queue that name this node */
    uint8_t level, unlinked;
    vm_node *next[];
};

typedef struct gc_rec {
    int64_t version;
    vm_node *node;
} gc_rec;

struct kvq__vmap {
    pthread_rwlock_t lock;
    vm_node *head; /* sentinel, MAX_LEVEL links */
    int level;
    uint64_t rng;
    uint64_t mem, limit, live_bytes, live_keys, nodes, entries;
    int64_t version, floor;
    gc_rec *q; /* ring */
    size_t q_cap, q_head, q_len;
};

static uint64_t node_cost(size_t klen, int level)
{
    return sizeof(vm_node) + (uint64_t)level * sizeof(vm_node *) + klen + MALLOC_OVERHEAD;
}

static uint64_t ver_cost(size_t vlen)
{
    return sizeof(vm_ver) + vlen + MALLOC_OVERHEAD;
}

uint64_t kvq__vmap_cost(size_t klen, size_t vlen)
{
    return node_cost(klen, MAX_LEVEL) + ver_cost(vlen) + sizeof(gc_rec);
}

kvq__vmap *kvq__vmap_new(uint64_t limit)
{
    kvq__vmap *m = kvq__calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    m->head = kvq__calloc(1, sizeof(vm_node) + MAX_LEVEL * sizeof(vm_node *));
    if (m->head == NULL) {
        kvq__free(m);
        return NULL;
    }
    m->head->level = MAX_LEVEL;
    m->level = 1;
    m->rng = 0x9e3779b97f4a7c15ull;
    m->limit = limit;
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&m->lock, &a);
    pthread_rwlockattr_destroy(&a);
    return m;
}

static void free_node(vm_node *n)
{
    vm_ver *v = n->vers;
    while (v) {
        vm_ver *o = v->older;
        kvq__free(v);
        v = o;
    }
    kvq__free(n);
}

void kvq__vmap_free(kvq__vmap *m)
{
    if (m == NULL)
        return;
    /* Unlinked nodes still named by the queue are freed through it. */
    for (size_t i = 0; i < m->q_len; i++) {
        gc_rec *r = &m->q[(m->q_head + i) % m->q_cap];
        if (--r->node->gc_refs == 0 && r->node->unlinked)
            free_node(r->node);
    }
    vm_node *n = m->head->next[0];
    while (n) {
        vm_node *nx = n->next[0];
        free_node(n);
        n = nx;
    }
    kvq__free(m->q);
    kvq__free(m->head);
    pthread_rwlock_destroy(&m->lock);
    kvq__free(m);
}

void kvq__vmap_rdlock(kvq__vmap *m)
{
    pthread_rwlock_rdlock(&m->lock);
}
void kvq__vmap_rdunlock(kvq__vmap *m)
{
    pthread_rwlock_unlock(&m->lock);
}
void kvq__vmap_wrlock(kvq__vmap *m)
{
    pthread_rwlock_wrlock(&m->lock);
}
void kvq__vmap_wrunlock(kvq__vmap *m)
{
    pthread_rwlock_unlock(&m->lock);
}

static int cmp(const vm_node *n, const uint8_t *k, size_t kl)
{
    return kvq__bytes_cmp(n->key, n->klen, k, kl);
}

/* The first node >= key (or > key when after), filling preds with each level's last node
 * before it. */
static vm_node *find(kvq__vmap *m, const uint8_t *k, size_t kl, vm_node **preds, int after)
{
    vm_node *x = m->head;
    for (int l = m->level - 1; l >= 0; l--) {
        while (x->next[l] != NULL) {
            int c = cmp(x->next[l], k, kl);
            if (c < 0 || (after && c == 0))
                x = x->next[l];
            else
                break;
        }
        if (preds)
            preds[l] = x;
    }
    return x->next[0];
}

/* The last node < key (NULL key: the last node); NULL when none. */
static vm_node *find_before(kvq__vmap *m, const uint8_t *k, size_t kl)
{
    vm_node *x = m->head;
    for (int l = m->level - 1; l >= 0; l--)
        while (x->next[l] != NULL && (k == NULL || cmp(x->next[l], k, kl) < 0))
            x = x->next[l];
    return x == m->head ? NULL : x;
}

static int random_level(kvq__vmap *m)
{
    m->rng ^= m->rng << 13;
    m->rng ^= m->rng >> 7;
    m->rng ^= m->rng << 17;
    uint64_t r = m->rng;
    int l = 1;
    while (l < MAX_LEVEL && (r & 3) == 0) {
        l++;
        r >>= 2;
    }
    return l;
}

static int q_push(kvq__vmap *m, int64_t version, vm_node *n)
{
    if (m->q_len == m->q_cap) {
        size_t cap = m->q_cap ? m->q_cap * 2 : 256;
        gc_rec *q = kvq__malloc(cap * sizeof *q);
        if (q == NULL)
            return kvq__error(KVQ_ENOMEM, "log store: out of memory");
        for (size_t i = 0; i < m->q_len; i++)
            q[i] = m->q[(m->q_head + i) % m->q_cap];
        kvq__free(m->q);
        m->q = q;
        m->q_cap = cap;
        m->q_head = 0;
    }
    m->q[(m->q_head + m->q_len) % m->q_cap] = (gc_rec){ version, n };
    m->q_len++;
    n->gc_refs++;
    return 0;
}

static void live_sub(kvq__vmap *m, const vm_node *n)
{
    if (n->vers && !n->vers->dead) {
        m->live_bytes -= n->klen + n->vers->len;
        m->live_keys--;
    }
}

static void live_add(kvq__vmap *m, const vm_node *n)
{
    if (n->vers && !n->vers->dead) {
        m->live_bytes += n->klen + n->vers->len;
        m->live_keys++;
    }
}

/* Puts an entry (value, or a tombstone when dead) at version on node n (NULL: a new node for
 * key, linked after preds). */
static int put(kvq__vmap *m, int64_t version, vm_node *n, vm_node **preds, const uint8_t *key,
               size_t klen, const uint8_t *val, size_t vlen, int dead, int check_limit)
{
    uint64_t add = ver_cost(vlen);
    int level = 0;
    if (n == NULL) {
        level = random_level(m);
        add += node_cost(klen, level);
    }
    if (m->q_len == m->q_cap)
        add += (m->q_cap ? m->q_cap : 256) * sizeof(gc_rec); /* the queue grows */
    uint64_t total = m->mem + m->q_cap * sizeof(gc_rec) + add;
    if (check_limit && m->limit && total > m->limit)
        return kvq__error(KVQ_ENOMEM,
                          "log store: the data would take %llu bytes of memory, past the limit "
                          "of %llu (raise it, or use the SQLite storage for data this large)",
                          (unsigned long long)total, (unsigned long long)m->limit);
    if (m->q_len == m->q_cap)
        add -= (m->q_cap ? m->q_cap : 256) * sizeof(gc_rec);
    vm_ver *v = kvq__malloc(sizeof *v + vlen);
    if (v == NULL)
        return kvq__error(KVQ_ENOMEM, "log store: out of memory");
    v->version = version;
    v->len = (uint32_t)vlen;
    v->dead = (uint32_t)dead;
    if (vlen)
        memcpy(v->val, val, vlen);
    if (n == NULL) {
        n = kvq__malloc(sizeof *n + (size_t)level * sizeof(vm_node *) + klen);
        if (n == NULL) {
            kvq__free(v);
            return kvq__error(KVQ_ENOMEM, "log store: out of memory");
        }
        memset(n, 0, sizeof *n);
        n->key = (uint8_t *)&n->next[level];
        memcpy(n->key, key, klen);
        n->klen = (uint32_t)klen;
        n->level = (uint8_t)level;
        if (q_push(m, version, n) != 0) {
            kvq__free(v);
            kvq__free(n);
            return KVQ_ENOMEM;
        }
        if (level > m->level) {
            for (int l = m->level; l < level; l++)
                preds[l] = m->head;
            m->level = level;
        }
        for (int l = 0; l < level; l++) {
            n->next[l] = preds[l]->next[l];
            preds[l]->next[l] = n;
        }
        n->prev = preds[0] == m->head ? NULL : preds[0];
        if (n->next[0])
            n->next[0]->prev = n;
        m->nodes++;
        v->older = NULL;
        n->vers = v;
        m->entries++;
    } else {
        live_sub(m, n);
        if (n->vers && n->vers->version == version) {
            /* the same batch wrote this key before: replace its entry */
            vm_ver *old = n->vers;
            v->older = old->older;
            m->mem -= ver_cost(old->len);
            kvq__free(old);
        } else {
            if (q_push(m, version, n) != 0) {
                live_add(m, n);
                kvq__free(v);
                return KVQ_ENOMEM;
            }
            v->older = n->vers;
            m->entries++;
        }
        n->vers = v;
    }
    m->mem += add;
    live_add(m, n);
    m->version = version;
    return 0;
}

int kvq__vmap_set(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen,
                  const uint8_t *val, size_t vlen)
{
    if (m == NULL || (key == NULL && klen) || (val == NULL && vlen) || version < m->version ||
        klen > UINT32_MAX || vlen > UINT32_MAX)
        return kvq__error(KVQ_EINVAL, "vmap: bad set");
    vm_node *preds[MAX_LEVEL];
    vm_node *n = find(m, key, klen, preds, 0);
    if (n != NULL && cmp(n, key, klen) != 0)
        n = NULL;
    return put(m, version, n, preds, key, klen, val, vlen, 0, 1);
}

int kvq__vmap_clear(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen)
{
    if (m == NULL || (key == NULL && klen) || version < m->version)
        return kvq__error(KVQ_EINVAL, "vmap: bad clear");
    vm_node *n = find(m, key, klen, NULL, 0);
    if (n == NULL || cmp(n, key, klen) != 0 || n->vers == NULL || n->vers->dead) {
        m->version = version;
        return 0;
    }
    /* Deletes are never refused for memory: they are how a full map is drained. */
    return put(m, version, n, NULL, key, klen, NULL, 0, 1, 0);
}

int kvq__vmap_clear_range(kvq__vmap *m, int64_t version, const uint8_t *b, size_t blen,
                          const uint8_t *e, size_t elen, kvq__vmap_key_fn fn, void *arg)
{
    if (m == NULL || (b == NULL && blen) || (e == NULL && elen) || version < m->version)
        return kvq__error(KVQ_EINVAL, "vmap: bad clear_range");
    vm_node *n = find(m, b, blen, NULL, 0);
    for (; n != NULL && (e == NULL || cmp(n, e, elen) < 0); n = n->next[0]) {
        if (n->vers == NULL || n->vers->dead)
            continue;
        int rc = put(m, version, n, NULL, n->key, n->klen, NULL, 0, 1, 0);
        if (rc != 0)
            return rc;
        if (fn)
            fn(arg, n->key, n->klen);
    }
    m->version = version;
    return 0;
}

int kvq__vmap_tombstone(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen)
{
    if (m == NULL || (key == NULL && klen) || version < m->version || klen > UINT32_MAX)
        return kvq__error(KVQ_EINVAL, "vmap: bad tombstone");
    vm_node *preds[MAX_LEVEL];
    vm_node *n = find(m, key, klen, preds, 0);
    if (n != NULL && cmp(n, key, klen) != 0)
        n = NULL;
    if (n != NULL && n->vers != NULL && n->vers->dead && n->vers->version == version)
        return 0;
    return put(m, version, n, preds, key, klen, NULL, 0, 1, 0);
}

int kvq__vmap_probe(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen,
                    kvq_bytes *val)
{
    val->data = NULL;
    val->len = 0;
    if (m == NULL || (key == NULL && klen))
        return 0;
    vm_node *n = find(m, key, klen, NULL, 0);
    if (n == NULL || cmp(n, key, klen) != 0)
        return 0;
    const vm_ver *v = n->vers;
    while (v && v->version > version)
        v = v->older;
    if (v == NULL)
        return 0;
    if (v->dead)
        return -1;
    val->data = v->val;
    val->len = v->len;
    return 1;
}

void kvq__vmap_set_version(kvq__vmap *m, int64_t version)
{
    if (m && version > m->version)
        m->version = version;
}

static const vm_ver *visible(const vm_node *n, int64_t version)
{
    const vm_ver *v = n->vers;
    while (v && v->version > version)
        v = v->older;
    return v && !v->dead ? v : NULL;
}

int kvq__vmap_get(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen,
                  kvq_bytes *val)
{
    if (m == NULL || val == NULL || (key == NULL && klen))
        return 0;
    vm_node *n = find(m, key, klen, NULL, 0);
    val->data = NULL;
    val->len = 0;
    if (n == NULL || cmp(n, key, klen) != 0)
        return 0;
    const vm_ver *v = visible(n, version);
    if (v == NULL)
        return 0;
    val->data = v->val;
    val->len = v->len;
    return 1;
}

void kvq__vmap_cursor_init(kvq__vmap_cursor *c, kvq__vmap *m, int64_t version, const uint8_t *b,
                           size_t blen, const uint8_t *e, size_t elen, int reverse)
{
    memset(c, 0, sizeof *c);
    c->m = m;
    c->version = version;
    c->b = b;
    c->blen = blen;
    c->e = e;
    c->elen = elen;
    c->reverse = reverse;
}

int kvq__vmap_cursor_next(kvq__vmap_cursor *c, kvq_bytes *key, kvq_bytes *val)
{
    if (c == NULL || c->m == NULL)
        return 0;
    vm_node *n;
    if (!c->started) {
        c->started = 1;
        n = c->reverse ? find_before(c->m, c->e, c->elen) : find(c->m, c->b, c->blen, NULL, 0);
    } else if (c->at == NULL) {
        return 0;
    } else {
        n = c->reverse ? c->at->prev : c->at->next[0];
    }
    for (; n != NULL; n = c->reverse ? n->prev : n->next[0]) {
        if (c->reverse ? (c->b != NULL && cmp(n, c->b, c->blen) < 0)
                       : (c->e != NULL && cmp(n, c->e, c->elen) >= 0))
            break;
        const vm_ver *v = visible(n, c->version);
        if (v == NULL)
            continue;
        c->at = n;
        key->data = n->key;
        key->len = n->klen;
        val->data = v->val;
        val->len = v->len;
        return 1;
    }
    c->at = NULL;
    return 0;
}

static void unlink_node(kvq__vmap *m, vm_node *n)
{
    vm_node *preds[MAX_LEVEL];
    vm_node *x = find(m, n->key, n->klen, preds, 0);
    if (x != n)
        return; /* cannot happen: keys are unique */
    for (int l = 0; l < n->level; l++)
        if (preds[l]->next[l] == n)
            preds[l]->next[l] = n->next[l];
    if (n->next[0])
        n->next[0]->prev = n->prev;
    while (m->level > 1 && m->head->next[m->level - 1] == NULL)
        m->level--;
    n->unlinked = 1;
    m->nodes--;
}

/* Drops the entries of n that no read at >= floor sees. */
static void trim(kvq__vmap *m, vm_node *n, int64_t floor)
{
    if (n->unlinked)
        return;
    vm_ver *v = n->vers;
    while (v && v->version > floor)
        v = v->older;
    if (v == NULL)
        return;
    vm_ver *o = v->older;
    v->older = NULL;
    while (o) {
        vm_ver *nx = o->older;
        m->mem -= ver_cost(o->len);
        m->entries--;
        kvq__free(o);
        o = nx;
    }
    if (v == n->vers && v->dead) {
        unlink_node(m, n);
        m->mem -= ver_cost(0) + node_cost(n->klen, n->level);
        m->entries--;
        kvq__free(v);
        n->vers = NULL;
    }
}

void kvq__vmap_forget(kvq__vmap *m, int64_t floor)
{
    if (m == NULL || floor <= m->floor)
        return;
    m->floor = floor;
    while (m->q_len > 0) {
        gc_rec *r = &m->q[m->q_head];
        if (r->version > floor)
            break;
        vm_node *n = r->node;
        m->q_head = (m->q_head + 1) % m->q_cap;
        m->q_len--;
        trim(m, n, floor);
        if (--n->gc_refs == 0 && n->unlinked)
            free_node(n);
    }
    /* A queue that grew during a burst gives its memory back once mostly empty. */
    if (m->q_cap > 1024 && m->q_len < m->q_cap / 8) {
        size_t cap = m->q_cap / 2;
        while (cap > 1024 && m->q_len < cap / 8)
            cap /= 2;
        gc_rec *q = kvq__malloc(cap * sizeof *q);
        if (q != NULL) {
            for (size_t i = 0; i < m->q_len; i++)
                q[i] = m->q[(m->q_head + i) % m->q_cap];
            kvq__free(m->q);
            m->q = q;
            m->q_cap = cap;
            m->q_head = 0;
        }
    }
}

void kvq__vmap_get_stats(kvq__vmap *m, kvq__vmap_stats *out)
{
    if (m == NULL || out == NULL)
        return;
    *out = (kvq__vmap_stats){ m->mem + m->q_cap * sizeof(gc_rec),
                              m->live_bytes,
                              m->live_keys,
                              m->nodes,
                              m->entries,
                              m->version,
                              m->floor,
                              m->limit };
}

uint64_t kvq__vmap_mem(kvq__vmap *m)
{
    return m->mem + m->q_cap * sizeof(gc_rec);
}
uint64_t kvq__vmap_limit(kvq__vmap *m)
{
    return m->limit;
}
int64_t kvq__vmap_version(kvq__vmap *m)
{
    return m->version;
}
