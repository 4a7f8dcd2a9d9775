/* The log store's versioned ordered map (vmap.h).
 *
 * Two skip lists. The live list holds the keys that have a value at the newest version, each
 * with its chain of values (newest first). A delete moves the key's node, its chain topped by
 * a tombstone, to the graveyard list (merging it with the key's older graveyard history, if
 * any); a later set of the key starts a new node in the live list. A read at the newest
 * version - every snapshot but those taken at an older version - never looks at the graveyard,
 * so the items a queue popped in the last seconds cost its consumers nothing. A read at an
 * older version v merges the live list with only the graveyard nodes whose tombstone is newer
 * than v (a key buried at or before v is deleted for it, as for a reader at the newest
 * version): each link of the graveyard carries the newest tombstone of the nodes it spans, so
 * a cursor steps over a run of older burials in one hop per level (an augmented skip list),
 * and the graveyard of the window costs it a few steps, not one per popped item. A queue of
 * (version, node) tells forget where old entries are. Nodes taken out of both lists wait in a
 * limbo until no snapshot that could have reached them is open (their version stamp is below
 * the floor given to forget, which the store keeps at or below its oldest open snapshot). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/embedded/logstore/vmap.h"
#include "util/util.h"

#define MAX_LEVEL       24
#define MALLOC_OVERHEAD 16u

enum { LIVE = 0, GRAVE = 1 };

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
    uint8_t level, unlinked, list;
    uint32_t trim_gen; /* the forget pass that last trimmed it (in the padding: no cost) */
    int64_t stamp;     /* unlinked: the newest version when it was */
    vm_node *limbo;    /* unlinked: the next node of the limbo */
    vm_node *next[];   /* level links, then (graveyard) level span maxima: see span() */
};

_Static_assert(sizeof(void *) != 8 || sizeof(vm_node) == 56, "trim_gen fits in the padding");

typedef struct gc_rec {
    int64_t version;
    vm_node *node;
} gc_rec;

struct kvq__vmap {
    pthread_rwlock_t lock;
    vm_node *head[2];    /* sentinels, MAX_LEVEL links */
    uint32_t forget_gen; /* bumped by each kvq__vmap_forget */
    int level[2];
    uint64_t rng;
    uint64_t mem, limit, live_bytes, live_keys, nodes, entries;
    int64_t version, floor;
    int64_t grave_max; /* the newest tombstone that ever went to the graveyard */
    uint64_t gen;      /* moves a node between lists: cursors look again */
    gc_rec *q;         /* ring */
    size_t q_cap, q_head, q_len;
    vm_node *limbo, *limbo_tail;
};

/* Each level has a link and, for the graveyard, the newest tombstone of the nodes the link spans
 * (span()). */
#define LINK_SIZE (sizeof(vm_node *) + sizeof(int64_t))

static int64_t *span(vm_node *x);

static uint64_t node_cost(size_t klen, int level)
{
    return sizeof(vm_node) + (uint64_t)level * LINK_SIZE + klen + MALLOC_OVERHEAD;
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
    for (int l = 0; l < 2; l++) {
        m->head[l] = kvq__calloc(1, sizeof(vm_node) + MAX_LEVEL * LINK_SIZE);
        if (m->head[l] == NULL) {
            kvq__free(m->head[0]);
            kvq__free(m);
            return NULL;
        }
        m->head[l]->level = MAX_LEVEL;
        m->level[l] = 1;
        for (int lv = 0; lv < MAX_LEVEL; lv++)
            span(m->head[l])[lv] = INT64_MIN;
    }
    m->rng = 0x9e3779b97f4a7c15ull;
    m->limit = limit;
    m->grave_max = INT64_MIN;
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
    /* Every node is in one of the lists or in the limbo. */
    for (vm_node *n = m->limbo; n;) {
        vm_node *nx = n->limbo;
        free_node(n);
        n = nx;
    }
    for (int l = 0; l < 2; l++) {
        vm_node *n = m->head[l]->next[0];
        while (n) {
            vm_node *nx = n->next[0];
            free_node(n);
            n = nx;
        }
        kvq__free(m->head[l]);
    }
    kvq__free(m->q);
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

/* The first node of list l >= key (> key when after), filling preds. */
static vm_node *find(kvq__vmap *m, int l, const uint8_t *k, size_t kl, vm_node **preds, int after)
{
    vm_node *x = m->head[l];
    for (int lv = m->level[l] - 1; lv >= 0; lv--) {
        while (x->next[lv] != NULL) {
            int c = cmp(x->next[lv], k, kl);
            if (c < 0 || (after && c == 0))
                x = x->next[lv];
            else
                break;
        }
        if (preds)
            preds[lv] = x;
    }
    return x->next[0];
}

static vm_node *find_exact(kvq__vmap *m, int l, const uint8_t *k, size_t kl, vm_node **preds)
{
    vm_node *n = find(m, l, k, kl, preds, 0);
    return n != NULL && cmp(n, k, kl) == 0 ? n : NULL;
}

/* The last node of list l < key (NULL key: the last node), or <= key when incl; NULL: none. */
static vm_node *find_before(kvq__vmap *m, int l, const uint8_t *k, size_t kl, int incl)
{
    vm_node *x = m->head[l];
    for (int lv = m->level[l] - 1; lv >= 0; lv--) {
        while (x->next[lv] != NULL) {
            int c = k == NULL ? -1 : cmp(x->next[lv], k, kl);
            if (c < 0 || (incl && c == 0))
                x = x->next[lv];
            else
                break;
        }
    }
    return x == m->head[l] ? NULL : x;
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

/* The graveyard's span maxima: span(x)[lv] is the newest tombstone (the top entry) of the nodes
 * x's link at level lv steps over, from the one after x up to x->next[lv] included (to the end
 * of the list when that is NULL); INT64_MIN for none. Kept in the graveyard only (a live node's
 * are garbage until it is buried). */
static int64_t *span(vm_node *x)
{
    return (int64_t *)(void *)&x->next[x->level];
}

static int64_t top_version(const vm_node *n)
{
    return n->vers != NULL ? n->vers->version : INT64_MIN;
}

/* span(x)[lv] from the spans of the level below, which tile it. */
static int64_t span_of(vm_node *x, int lv)
{
    if (lv == 0)
        return x->next[0] != NULL ? top_version(x->next[0]) : INT64_MIN;
    vm_node *end = x->next[lv];
    int64_t mx = INT64_MIN;
    for (vm_node *y = x; y != end; y = y->next[lv - 1])
        if (span(y)[lv - 1] > mx)
            mx = span(y)[lv - 1];
    return mx;
}

/* Brings the graveyard's spans up to date after a node was linked (n), unlinked (n NULL) or
 * given a newer tombstone (n NULL), preds being its predecessors at every level: only their
 * spans and n's own changed. Bottom up, as each level is computed from the one below. */
static void fix_spans(kvq__vmap *m, vm_node **preds, vm_node *n)
{
    for (int lv = 0; lv < m->level[GRAVE]; lv++) {
        if (n != NULL && lv < n->level)
            span(n)[lv] = span_of(n, lv);
        span(preds[lv])[lv] = span_of(preds[lv], lv);
    }
}

/* The first graveyard node after x (a node or the head) whose tombstone is newer than v: a
 * link whose span holds none is stepped over whole (its end node is in it, so not wanted). */
static vm_node *grave_after(kvq__vmap *m, vm_node *x, int64_t v)
{
    int lv = (x == m->head[GRAVE] ? m->level[GRAVE] : x->level) - 1;
    for (;;) {
        if (span(x)[lv] > v) {
            if (lv == 0)
                return x->next[0];
            lv--;
        } else {
            x = x->next[lv];
            if (x == NULL)
                return NULL;
            lv = x->level - 1;
        }
    }
}

/* The first graveyard node >= key (> key when after) whose tombstone is newer than v. */
static vm_node *grave_seek(kvq__vmap *m, const uint8_t *k, size_t kl, int after, int64_t v)
{
    vm_node *x = m->head[GRAVE];
    for (int lv = m->level[GRAVE] - 1; lv >= 0; lv--) {
        while (x->next[lv] != NULL) {
            int c = cmp(x->next[lv], k, kl);
            if (c < 0 || (after && c == 0))
                x = x->next[lv];
            else
                break;
        }
    }
    return grave_after(m, x, v);
}

/* The last graveyard node < key (NULL key: the last node) whose tombstone is newer than v. The
 * links a search for key steps over tile the nodes before key, later ones further on: the last
 * of them whose span holds such a node holds the one wanted, found by going down inside it. */
static vm_node *grave_before(kvq__vmap *m, const uint8_t *k, size_t kl, int64_t v)
{
    vm_node *x = m->head[GRAVE], *cx = NULL;
    int clv = 0;
    for (int lv = m->level[GRAVE] - 1; lv >= 0; lv--) {
        while (x->next[lv] != NULL && (k == NULL || cmp(x->next[lv], k, kl) < 0)) {
            if (span(x)[lv] > v) {
                cx = x;
                clv = lv;
            }
            x = x->next[lv];
        }
    }
    if (cx == NULL)
        return NULL;
    for (int lv = clv; lv > 0; lv--) {
        vm_node *end = cx->next[lv], *best = cx;
        for (vm_node *y = cx; y != end; y = y->next[lv - 1])
            if (span(y)[lv - 1] > v)
                best = y;
        cx = best;
    }
    return cx->next[0];
}

/* Links n into list l after preds (from find on that list). */
static void link_node(kvq__vmap *m, int l, vm_node *n, vm_node **preds)
{
    if (n->level > m->level[l]) {
        for (int lv = m->level[l]; lv < n->level; lv++)
            preds[lv] = m->head[l];
        m->level[l] = n->level;
    }
    for (int lv = 0; lv < n->level; lv++) {
        n->next[lv] = preds[lv]->next[lv];
        preds[lv]->next[lv] = n;
    }
    n->prev = preds[0] == m->head[l] ? NULL : preds[0];
    if (n->next[0])
        n->next[0]->prev = n;
    n->list = (uint8_t)l;
    if (l == GRAVE)
        fix_spans(m, preds, n);
}

static void unlink_from(kvq__vmap *m, vm_node *n)
{
    int l = n->list;
    vm_node *preds[MAX_LEVEL];
    find(m, l, n->key, n->klen, preds, 0);
    for (int lv = 0; lv < n->level; lv++)
        if (preds[lv]->next[lv] == n)
            preds[lv]->next[lv] = n->next[lv];
    if (n->next[0])
        n->next[0]->prev = n->prev;
    while (m->level[l] > 1 && m->head[l]->next[m->level[l] - 1] == NULL)
        m->level[l]--;
    if (l == GRAVE)
        fix_spans(m, preds, NULL);
    m->gen++;
}

/* Takes n out of the map for good; freed once no snapshot can still read it. */
static void retire(kvq__vmap *m, vm_node *n)
{
    unlink_from(m, n);
    n->unlinked = 1;
    n->stamp = m->version;
    n->limbo = NULL;
    if (m->limbo_tail)
        m->limbo_tail->limbo = n;
    else
        m->limbo = n;
    m->limbo_tail = n;
    m->nodes--;
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
        __atomic_store_n(&m->q_cap, cap, __ATOMIC_RELAXED);
        m->q_head = 0;
    }
    m->q[(m->q_head + m->q_len) % m->q_cap] = (gc_rec){ version, n };
    m->q_len++;
    n->gc_refs++;
    return 0;
}

static vm_ver *new_ver(int64_t version, const uint8_t *val, size_t vlen, int dead)
{
    vm_ver *v = kvq__malloc(sizeof *v + vlen);
    if (v == NULL)
        return NULL;
    v->older = NULL;
    v->version = version;
    v->len = (uint32_t)vlen;
    v->dead = (uint32_t)dead;
    if (vlen)
        memcpy(v->val, val, vlen);
    return v;
}

static vm_node *new_node(kvq__vmap *m, const uint8_t *key, size_t klen)
{
    int level = random_level(m);
    vm_node *n = kvq__malloc(sizeof *n + (size_t)level * LINK_SIZE + klen);
    if (n == NULL)
        return NULL;
    memset(n, 0, sizeof *n);
    n->key = (uint8_t *)&n->next[level] + (size_t)level * sizeof(int64_t);
    if (klen)
        memcpy(n->key, key, klen);
    n->klen = (uint32_t)klen;
    n->level = (uint8_t)level;
    n->stamp = INT64_MAX;
    return n;
}

/* Puts entry v (at v->version) on top of n's chain: replacing an entry of the same version,
 * else pushing (and queueing the node for forget). */
static int push_ver(kvq__vmap *m, vm_node *n, vm_ver *v)
{
    if (n->vers && n->vers->version == v->version) {
        vm_ver *old = n->vers;
        v->older = old->older;
        __atomic_sub_fetch(&m->mem, ver_cost(old->len), __ATOMIC_RELAXED);
        kvq__free(old);
        n->vers = v;
        return 0;
    }
    if (q_push(m, v->version, n) != 0)
        return KVQ_ENOMEM;
    v->older = n->vers;
    n->vers = v;
    m->entries++;
    return 0;
}

static int check_room(kvq__vmap *m, uint64_t add)
{
    if (m->q_len == m->q_cap)
        add += (m->q_cap ? m->q_cap : 256) * sizeof(gc_rec); /* the queue grows */
    uint64_t total = m->mem + m->q_cap * sizeof(gc_rec) + add;
    if (m->limit && total > m->limit)
        return kvq__error(KVQ_ENOMEM,
                          "log store: the data would take %llu bytes of memory, past the limit "
                          "of %llu (raise it, or use the SQLite storage for data this large)",
                          (unsigned long long)total, (unsigned long long)m->limit);
    return 0;
}

int kvq__vmap_set(
    kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen, const uint8_t *val, size_t vlen)
{
    if (m == NULL || (key == NULL && klen) || (val == NULL && vlen) || version < m->version ||
        klen > UINT32_MAX || vlen > UINT32_MAX)
        return kvq__error(KVQ_EINVAL, "vmap: bad set");
    vm_node *preds[MAX_LEVEL];
    vm_node *n = find_exact(m, LIVE, key, klen, preds);
    uint64_t add = ver_cost(vlen) + (n == NULL ? node_cost(klen, MAX_LEVEL) : 0);
    int rc = check_room(m, add);
    if (rc != 0)
        return rc;
    vm_ver *v = new_ver(version, val, vlen, 0);
    if (v == NULL)
        return kvq__error(KVQ_ENOMEM, "log store: out of memory");
    if (n != NULL) {
        m->live_bytes -= n->klen + n->vers->len;
        if ((rc = push_ver(m, n, v)) != 0) {
            m->live_bytes += n->klen + n->vers->len;
            kvq__free(v);
            return rc;
        }
        m->live_bytes += n->klen + vlen;
        __atomic_add_fetch(&m->mem, ver_cost(vlen), __ATOMIC_RELAXED);
    } else {
        n = new_node(m, key, klen);
        if (n == NULL || q_push(m, version, n) != 0) {
            kvq__free(v);
            kvq__free(n);
            return kvq__error(KVQ_ENOMEM, "log store: out of memory");
        }
        n->vers = v;
        link_node(m, LIVE, n, preds);
        m->nodes++;
        m->entries++;
        __atomic_add_fetch(&m->mem, ver_cost(vlen) + node_cost(klen, n->level), __ATOMIC_RELAXED);
        m->live_bytes += klen + vlen;
        m->live_keys++;
    }
    m->version = version;
    return 0;
}

/* Moves live node n to the graveyard with a tombstone at version on top. */
static int bury(kvq__vmap *m, vm_node *n, int64_t version)
{
    vm_ver *t = new_ver(version, NULL, 0, 1);
    if (t == NULL)
        return kvq__error(KVQ_ENOMEM, "log store: out of memory");
    uint32_t vlen = n->vers->len;
    if (push_ver(m, n, t) != 0) {
        kvq__free(t);
        return KVQ_ENOMEM;
    }
    __atomic_add_fetch(&m->mem, ver_cost(0), __ATOMIC_RELAXED);
    m->live_bytes -= n->klen + vlen;
    m->live_keys--;
    unlink_from(m, n);
    vm_node *preds[MAX_LEVEL];
    vm_node *g = find_exact(m, GRAVE, n->key, n->klen, preds);
    if (g != NULL) {
        /* the key's older history goes under n's chain, and g leaves the map */
        vm_ver *last = n->vers;
        while (last->older)
            last = last->older;
        last->older = g->vers;
        g->vers = NULL;
        __atomic_sub_fetch(&m->mem, node_cost(g->klen, g->level), __ATOMIC_RELAXED);
        retire(m, g);
        find(m, GRAVE, n->key, n->klen, preds, 0);
    }
    link_node(m, GRAVE, n, preds);
    if (version > m->grave_max)
        m->grave_max = version;
    return 0;
}

int kvq__vmap_clear(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen)
{
    if (m == NULL || (key == NULL && klen) || version < m->version)
        return kvq__error(KVQ_EINVAL, "vmap: bad clear");
    /* Deletes are never refused for memory: they are how a full map is drained. */
    vm_node *n = find_exact(m, LIVE, key, klen, NULL);
    int rc = n != NULL ? bury(m, n, version) : 0;
    if (rc == 0)
        m->version = version;
    return rc;
}

int kvq__vmap_clear_range(kvq__vmap *m,
                          int64_t version,
                          const uint8_t *b,
                          size_t blen,
                          const uint8_t *e,
                          size_t elen,
                          kvq__vmap_key_fn fn,
                          void *arg)
{
    if (m == NULL || (b == NULL && blen) || (e == NULL && elen) || version < m->version)
        return kvq__error(KVQ_EINVAL, "vmap: bad clear_range");
    vm_node *n = find(m, LIVE, b, blen, NULL, 0);
    while (n != NULL && (e == NULL || cmp(n, e, elen) < 0)) {
        vm_node *nx = n->next[0];
        int rc = bury(m, n, version);
        if (rc != 0)
            return rc;
        if (fn)
            fn(arg, n->key, n->klen);
        n = nx;
    }
    m->version = version;
    return 0;
}

int kvq__vmap_tombstone(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen)
{
    if (m == NULL || (key == NULL && klen) || version < m->version || klen > UINT32_MAX)
        return kvq__error(KVQ_EINVAL, "vmap: bad tombstone");
    vm_node *n = find_exact(m, LIVE, key, klen, NULL);
    if (n != NULL)
        return bury(m, n, version);
    vm_node *preds[MAX_LEVEL];
    vm_node *g = find_exact(m, GRAVE, key, klen, preds);
    if (g != NULL && g->vers != NULL && g->vers->dead && g->vers->version == version)
        return 0;
    vm_ver *t = new_ver(version, NULL, 0, 1);
    if (t == NULL)
        return kvq__error(KVQ_ENOMEM, "log store: out of memory");
    if (g == NULL) {
        g = new_node(m, key, klen);
        if (g == NULL || q_push(m, version, g) != 0) {
            kvq__free(t);
            kvq__free(g);
            return kvq__error(KVQ_ENOMEM, "log store: out of memory");
        }
        g->vers = t;
        link_node(m, GRAVE, g, preds);
        m->nodes++;
        m->entries++;
        __atomic_add_fetch(&m->mem, node_cost(klen, g->level), __ATOMIC_RELAXED);
    } else if (push_ver(m, g, t) != 0) {
        kvq__free(t);
        return KVQ_ENOMEM;
    } else {
        fix_spans(m, preds, NULL); /* g's tombstone is newer */
    }
    __atomic_add_fetch(&m->mem, ver_cost(0), __ATOMIC_RELAXED);
    if (version > m->grave_max)
        m->grave_max = version;
    m->version = version;
    return 0;
}

void kvq__vmap_set_version(kvq__vmap *m, int64_t version)
{
    if (m && version > m->version)
        m->version = version;
}

/* The newest entry of n at or before version (NULL: none). */
static const vm_ver *at_version(const vm_node *n, int64_t version)
{
    const vm_ver *v = n ? n->vers : NULL;
    while (v && v->version > version)
        v = v->older;
    return v;
}

/* What a key is at version, from its live node l and graveyard node g (either may be NULL):
 * the live node's history is the newer one. */
static const vm_ver *resolve(const vm_node *l, const vm_node *g, int64_t version)
{
    const vm_ver *v = at_version(l, version);
    if (v == NULL)
        v = at_version(g, version);
    return v;
}

int kvq__vmap_probe(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen, kvq_bytes *val)
{
    int64_t ever;
    return kvq__vmap_probe_ver(m, version, key, klen, val, &ever);
}

int kvq__vmap_probe_ver(
    kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen, kvq_bytes *val, int64_t *ever)
{
    val->data = NULL;
    val->len = 0;
    *ever = 0;
    if (m == NULL || (key == NULL && klen))
        return 0;
    vm_node *l = find_exact(m, LIVE, key, klen, NULL);
    vm_node *g = (l == NULL || at_version(l, version) == NULL)
                     ? find_exact(m, GRAVE, key, klen, NULL)
                     : NULL;
    const vm_ver *v = resolve(l, g, version);
    if (v == NULL)
        return 0;
    *ever = v->version;
    if (v->dead)
        return -1;
    val->data = v->val;
    val->len = v->len;
    return 1;
}

int kvq__vmap_get(kvq__vmap *m, int64_t version, const uint8_t *key, size_t klen, kvq_bytes *val)
{
    if (m == NULL || val == NULL)
        return 0;
    return kvq__vmap_probe(m, version, key, klen, val) > 0;
}

void kvq__vmap_cursor_init(kvq__vmap_cursor *c,
                           kvq__vmap *m,
                           int64_t version,
                           const uint8_t *b,
                           size_t blen,
                           const uint8_t *e,
                           size_t elen,
                           int reverse)
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

static int in_range(const kvq__vmap_cursor *c, const vm_node *n)
{
    if (n == NULL)
        return 0;
    return c->reverse ? (c->b == NULL || cmp(n, c->b, c->blen) >= 0)
                      : (c->e == NULL || cmp(n, c->e, c->elen) < 0);
}

/* Positions the cursor's two lists at the first node of the range, or just past `after`
 * (a key returned before) when it is not NULL. */
static void seek(kvq__vmap_cursor *c, const uint8_t *after, size_t alen)
{
    kvq__vmap *m = c->m;
    int use_grave = c->all || c->version < m->grave_max;
    for (int l = 0; l < 2; l++) {
        vm_node *n = NULL;
        if (l == GRAVE && !use_grave)
            n = NULL;
        else if (l == GRAVE && !c->all)
            /* only the keys buried after the cursor's version */
            n = !c->reverse ? (after ? grave_seek(m, after, alen, 1, c->version)
                                     : grave_seek(m, c->b, c->blen, 0, c->version))
                            : (after ? grave_before(m, after, alen, c->version)
                                     : grave_before(m, c->e, c->elen, c->version));
        else if (!c->reverse)
            n = after ? find(m, l, after, alen, NULL, 1) : find(m, l, c->b, c->blen, NULL, 0);
        else
            n = after ? find_before(m, l, after, alen, 0) : find_before(m, l, c->e, c->elen, 0);
        if (l == LIVE)
            c->at = n;
        else
            c->at_grave = n;
    }
    c->gen = m->gen;
}

int kvq__vmap_cursor_next(kvq__vmap_cursor *c, kvq_bytes *key, kvq_bytes *val)
{
    int dead;
    int64_t ever;
    return kvq__vmap_cursor_next_ver(c, key, val, &dead, &ever);
}

int kvq__vmap_cursor_next_ver(
    kvq__vmap_cursor *c, kvq_bytes *key, kvq_bytes *val, int *dead, int64_t *ever)
{
    if (c == NULL || c->m == NULL || c->done)
        return 0;
    kvq__vmap *m = c->m;
    if (!c->started) {
        c->started = 1;
        seek(c, NULL, 0);
    } else if (c->gen != m->gen) {
        /* nodes moved between the lists since the last step: find the place again, just past
         * the key last returned (its node is still in memory: see retire) */
        seek(c, c->last->key, c->last->klen);
    }
    for (;;) {
        vm_node *l = in_range(c, c->at) ? c->at : NULL;
        vm_node *g = in_range(c, c->at_grave) ? c->at_grave : NULL;
        if (l == NULL && g == NULL) {
            c->done = 1;
            return 0;
        }
        /* d < 0: the live node comes first in the cursor's direction; > 0 the graveyard's;
         * 0: the same key in both */
        int d;
        if (l == NULL)
            d = 1;
        else if (g == NULL)
            d = -1;
        else
            d = kvq__bytes_cmp(l->key, l->klen, g->key, g->klen) * (c->reverse ? -1 : 1);
        vm_node *kl = d <= 0 ? l : NULL, *kg = d >= 0 ? g : NULL;
        if (kl)
            c->at = c->reverse ? kl->prev : kl->next[0];
        if (kg && c->all)
            c->at_grave = c->reverse ? kg->prev : kg->next[0];
        else if (kg)
            c->at_grave = c->reverse ? grave_before(m, kg->key, kg->klen, c->version)
                                     : grave_after(m, kg, c->version);
        const vm_ver *v = resolve(kl, kg, c->version);
        if (v == NULL || (v->dead && !c->all))
            continue;
        vm_node *n = kl ? kl : kg;
        c->last = n;
        key->data = n->key;
        key->len = n->klen;
        val->data = v->val;
        val->len = v->len;
        *dead = v->dead != 0;
        *ever = v->version;
        return 1;
    }
}

/* Drops the entries of n that no read at >= floor sees; a graveyard node left with only its
 * tombstone leaves the map. */
static void trim(kvq__vmap *m, vm_node *n, int64_t floor)
{
    /* A key written by every batch (a queue's counters) has a record in the forget queue for
     * each of its versions: trimmed once per pass, not once per record, or each pass would
     * walk its chain as many times as it has versions (quadratic: a drain on a fast disk
     * stalled for minutes). */
    if (n->unlinked || n->trim_gen == m->forget_gen)
        return;
    n->trim_gen = m->forget_gen;
    vm_ver *v = n->vers;
    while (v && v->version > floor)
        v = v->older;
    if (v == NULL)
        return;
    vm_ver *o = v->older;
    v->older = NULL;
    while (o) {
        vm_ver *nx = o->older;
        __atomic_sub_fetch(&m->mem, ver_cost(o->len), __ATOMIC_RELAXED);
        m->entries--;
        kvq__free(o);
        o = nx;
    }
    if (v == n->vers && v->dead) {
        __atomic_sub_fetch(&m->mem, ver_cost(0) + node_cost(n->klen, n->level), __ATOMIC_RELAXED);
        m->entries--;
        retire(m, n);
    }
}

/* One pass of the version queue up to floor: each node queued at a version <= floor is trimmed
 * by trim_fn (once per pass: trim_gen), then the nodes out of the map since before every open
 * snapshot are freed, and a queue that grew during a burst gives its memory back. */
static void
forget_pass(kvq__vmap *m, int64_t floor, void (*trim_fn)(kvq__vmap *, vm_node *, int64_t))
{
    if (m == NULL || floor <= m->floor)
        return;
    m->floor = floor;
    m->forget_gen++;
    while (m->q_len > 0) {
        gc_rec *r = &m->q[m->q_head];
        if (r->version > floor)
            break;
        vm_node *n = r->node;
        m->q_head = (m->q_head + 1) % m->q_cap;
        m->q_len--;
        trim_fn(m, n, floor);
        n->gc_refs--;
    }
    /* Nodes out of the map since before every open snapshot: nobody can reach them. */
    while (m->limbo != NULL && m->limbo->stamp < floor && m->limbo->gc_refs == 0) {
        vm_node *n = m->limbo;
        m->limbo = n->limbo;
        if (m->limbo == NULL)
            m->limbo_tail = NULL;
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
            __atomic_store_n(&m->q_cap, cap, __ATOMIC_RELAXED);
            m->q_head = 0;
        }
    }
}

void kvq__vmap_forget(kvq__vmap *m, int64_t floor)
{
    forget_pass(m, floor, trim);
}

/* Drops every entry of n with a version <= floor (kvq__vmap_drop); a node left with none
 * leaves the map. */
static void trim_all(kvq__vmap *m, vm_node *n, int64_t floor)
{
    if (n->unlinked || n->trim_gen == m->forget_gen)
        return;
    n->trim_gen = m->forget_gen;
    vm_ver **pv = &n->vers;
    while (*pv && (*pv)->version > floor)
        pv = &(*pv)->older;
    vm_ver *o = *pv;
    if (o == NULL)
        return;
    int was_top = o == n->vers;
    if (was_top && n->list == LIVE) {
        m->live_bytes -= n->klen + o->len;
        m->live_keys--;
    }
    *pv = NULL;
    while (o) {
        vm_ver *nx = o->older;
        __atomic_sub_fetch(&m->mem, ver_cost(o->len), __ATOMIC_RELAXED);
        m->entries--;
        kvq__free(o);
        o = nx;
    }
    if (n->vers == NULL) {
        __atomic_sub_fetch(&m->mem, node_cost(n->klen, n->level), __ATOMIC_RELAXED);
        retire(m, n);
    }
}

void kvq__vmap_drop(kvq__vmap *m, int64_t floor)
{
    forget_pass(m, floor, trim_all);
}

int kvq__vmap_check(kvq__vmap *m)
{
    vm_node *h = m->head[GRAVE];
    for (int lv = 0; lv < m->level[GRAVE]; lv++) {
        for (vm_node *x = h; x != NULL; x = x->next[lv]) {
            int64_t mx = INT64_MIN;
            for (vm_node *y = x->next[0]; y != NULL; y = y->next[0]) {
                if (top_version(y) > mx)
                    mx = top_version(y);
                if (y == x->next[lv])
                    break;
            }
            if (span(x)[lv] != mx)
                return -1;
        }
    }
    for (vm_node *y = h->next[0]; y != NULL; y = y->next[0])
        if (y->list != GRAVE || y->vers == NULL || !y->vers->dead)
            return -1;
    return 0;
}

void kvq__vmap_each(kvq__vmap *m, kvq__vmap_entry_fn fn, void *arg)
{
    for (int l = 0; l < 2; l++)
        for (vm_node *n = m->head[l]->next[0]; n != NULL; n = n->next[0])
            if (n->vers != NULL)
                fn(arg, n->key, n->klen, n->vers->val, n->vers->len, n->vers->dead != 0);
}

void kvq__vmap_get_stats(kvq__vmap *m, kvq__vmap_stats *out)
{
    if (m == NULL || out == NULL)
        return;
    *out = (kvq__vmap_stats){ kvq__vmap_mem(m), m->live_bytes, m->live_keys, m->nodes,
                              m->entries,       m->version,    m->floor,     m->limit };
}

uint64_t kvq__vmap_mem(kvq__vmap *m)
{
    /* Read without the map's lock (the commit path's limit check, statistics): mem and q_cap
     * move with atomic operations, under the write lock. */
    return __atomic_load_n(&m->mem, __ATOMIC_RELAXED) +
           __atomic_load_n(&m->q_cap, __ATOMIC_RELAXED) * sizeof(gc_rec);
}
uint64_t kvq__vmap_limit(kvq__vmap *m)
{
    return m->limit;
}
int64_t kvq__vmap_version(kvq__vmap *m)
{
    return m->version;
}
