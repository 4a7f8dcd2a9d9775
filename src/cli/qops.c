/* The command's queue operations. Durable queues use the erlfdb layout, byte for byte:
 * under the prefix pack((b"NAME",)), the counters (b"npush",) and (b"npop",) (8-byte
 * little-endian, atomic add) and the items (b"val", versionstamp) written with versionstamped
 * keys, so pushes never conflict. */
#include <string.h>

#include "qops.h"
#include "util/util.h"

struct cq {
    kvq_db *db;
    cli_qtype type;
    kvq_buf prefix;   /* pack((b"NAME",)) */
    kvq_buf npush;    /* prefix + (b"npush",) */
    kvq_buf npop;     /* prefix + (b"npop",) */
    kvq_buf items_lo; /* prefix + (b"val",) + 0x00 */
    kvq_buf items_hi; /* prefix + (b"val",) + 0xff */
};

/* Appends a tuple bytes element: 0x01, the bytes with each 0x00 written 0x00 0xff, then 0x00. */
static int put_bytes(kvq_buf *b, const void *p, size_t n)
{
    const uint8_t *s = p;
    uint8_t code = 0x01, nul = 0x00, esc = 0xff;
    int rc = kvq_buf_append(b, &code, 1);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = kvq_buf_append(b, &s[i], 1);
        if (rc == 0 && s[i] == 0)
            rc = kvq_buf_append(b, &esc, 1);
    }
    if (rc == 0)
        rc = kvq_buf_append(b, &nul, 1);
    return rc;
}

static int key_with(kvq_buf *out, const kvq_buf *prefix, const char *elem, int tail)
{
    int rc = kvq_buf_append(out, prefix->data, prefix->len);
    if (rc == 0)
        rc = put_bytes(out, elem, strlen(elem));
    if (rc == 0 && tail >= 0) {
        uint8_t t = (uint8_t)tail;
        rc = kvq_buf_append(out, &t, 1);
    }
    return rc;
}

int cq_open(cq **out, kvq_db *db, const char *name, cli_qtype type)
{
    *out = NULL;
    if (type != QT_DURABLE)
        return kvq__error(KVQ_EUNSUPPORTED,
                          "this build of the command handles durable queues "
                          "only; '%s' is a %s queue",
                          name, cli_qtype_name(type));
    cq *q = kvq__calloc(1, sizeof(*q));
    if (q == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    q->db = db;
    q->type = type;
    int rc = put_bytes(&q->prefix, name, strlen(name));
    if (rc == 0)
        rc = key_with(&q->npush, &q->prefix, "npush", -1);
    if (rc == 0)
        rc = key_with(&q->npop, &q->prefix, "npop", -1);
    if (rc == 0)
        rc = key_with(&q->items_lo, &q->prefix, "val", 0x00);
    if (rc == 0)
        rc = key_with(&q->items_hi, &q->prefix, "val", 0xff);
    if (rc != 0) {
        cq_close(q);
        return rc;
    }
    *out = q;
    return 0;
}

void cq_close(cq *q)
{
    if (q == NULL)
        return;
    kvq_buf_dispose(&q->prefix);
    kvq_buf_dispose(&q->npush);
    kvq_buf_dispose(&q->npop);
    kvq_buf_dispose(&q->items_lo);
    kvq_buf_dispose(&q->items_hi);
    kvq__free(q);
}

static const uint8_t ONE[8] = { 1 };

typedef struct push_ctx {
    cq *q;
    const uint8_t *v;
    size_t n;
} push_ctx;

static int push_body(kvq_txn *txn, void *arg)
{
    push_ctx *p = arg;
    cq *q = p->q;
    uint16_t uv;
    int rc = kvq_txn_next_user_version(&uv, txn);
    if (rc != 0)
        return rc;
    /* prefix + (b"val", incomplete versionstamp) + the 4-byte offset of its 10 stamp bytes. */
    uint8_t key[512];
    size_t base = q->items_lo.len - 1; /* prefix + (b"val",) */
    if (base + 1 + 12 + 4 > sizeof(key))
        return kvq__error(KVQ_EINVAL, "the queue name is too long");
    memcpy(key, q->items_lo.data, base);
    size_t off = base + 1;
    key[base] = 0x33;
    memset(key + off, 0xff, 10);
    key[off + 10] = (uint8_t)(uv >> 8);
    key[off + 11] = (uint8_t)uv;
    for (int i = 0; i < 4; i++)
        key[off + 12 + (size_t)i] = (uint8_t)(off >> (8 * i));
    rc = kvq_txn_set_versionstamped_key(txn, key, off + 16, p->v, p->n);
    if (rc == 0)
        rc = kvq_txn_atomic_op(txn, q->npush.data, q->npush.len, ONE, 8, KVQ_MUT_ADD);
    return rc;
}

int cq_push(cq *q, const uint8_t *v, size_t n, int64_t priority)
{
    (void)priority;
    if (n > KVQ_MAX_VALUE_SIZE)
        return kvq__error(KVQ_EVALUE_TOO_LARGE, "a value of %zu bytes is over the limit of %d", n,
                          KVQ_MAX_VALUE_SIZE);
    push_ctx p = { q, v, n };
    return kvq_db_transact(q->db, push_body, &p);
}

/* Pops up to k items in txn: one range read, one clear of the range read, npop += n. */
static int pop_in(void *queue, kvq_txn *txn, size_t k, kvq_bytes *values, size_t *n)
{
    cq *q = queue;
    const kvq_kv *kvs;
    size_t got;
    *n = 0;
    int rc = kvq_txn_get_range(&kvs, &got, NULL, txn, q->items_lo.data, q->items_lo.len,
                               q->items_hi.data, q->items_hi.len, (int)k, 0);
    if (rc != 0 || got == 0)
        return rc;
    const kvq_bytes *last = &kvs[got - 1].key;
    uint8_t after[KVQ_MAX_KEY_SIZE + 1];
    memcpy(after, last->data, last->len);
    after[last->len] = 0;
    rc = kvq_txn_clear_range(txn, kvs[0].key.data, kvs[0].key.len, after, last->len + 1);
    uint8_t add[8];
    for (int i = 0; i < 8; i++)
        add[i] = (uint8_t)((uint64_t)got >> (8 * i));
    if (rc == 0)
        rc = kvq_txn_atomic_op(txn, q->npop.data, q->npop.len, add, 8, KVQ_MUT_ADD);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < got; i++)
        values[i] = kvs[i].value;
    *n = got;
    return 0;
}

int cq_source(cq *q, kvq_consumer_source *out)
{
    out->pop = pop_in;
    out->queue = q;
    out->wake_key.data = q->npush.data;
    out->wake_key.len = q->npush.len;
    return 0;
}

typedef struct pop_ctx {
    cq *q;
    size_t k;
    kvq_bytes *values;
    size_t n;
    kvq_buf copy; /* the values, copied out of the transaction for the callback */
    size_t *lens;
} pop_ctx;

static int pop_body(kvq_txn *txn, void *arg)
{
    pop_ctx *p = arg;
    return pop_in(p->q, txn, p->k, p->values, &p->n);
}

int cq_pop(cq *q, size_t k, int max, int (*fn)(const uint8_t *v, size_t n, void *arg), void *arg)
{
    (void)max;
    pop_ctx p = { .q = q, .k = k };
    p.values = kvq__calloc(k, sizeof(*p.values));
    if (p.values == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    kvq_txn *txn;
    int rc = kvq_txn_create(&txn, q->db);
    if (rc == 0)
        rc = kvq_txn_run(txn, pop_body, &p);
    if (rc == 0 && p.n == 0)
        rc = KVQ_ENOTFOUND;
    /* The values stay valid until the transaction is reset or destroyed. */
    for (size_t i = 0; rc == 0 && i < p.n; i++)
        rc = fn(p.values[i].data, p.values[i].len, arg);
    kvq_txn_destroy(txn);
    kvq__free(p.values);
    return rc;
}

int cq_peek(cq *q, int max, kvq_buf *out)
{
    (void)max;
    kvq_txn *txn;
    int rc = kvq_txn_create(&txn, q->db);
    if (rc != 0)
        return rc;
    const kvq_kv *kvs;
    size_t n;
    rc = kvq_txn_get_range(&kvs, &n, NULL, txn, q->items_lo.data, q->items_lo.len, q->items_hi.data,
                           q->items_hi.len, 1, KVQ_SNAPSHOT);
    if (rc == 0 && n == 0)
        rc = KVQ_ENOTFOUND;
    if (rc == 0)
        rc = kvq_buf_append(out, kvs[0].value.data, kvs[0].value.len);
    kvq_txn_destroy(txn);
    return rc;
}

static uint64_t le64(kvq_bytes v, int present)
{
    uint64_t x = 0;
    for (size_t i = 0; present && i < v.len && i < 8; i++)
        x |= (uint64_t)v.data[i] << (8 * i);
    return x;
}

static int read_counters(cq *q, kvq_txn *txn, uint64_t *push, uint64_t *pop)
{
    kvq_bytes v;
    int present;
    int rc = kvq_txn_get(&v, &present, txn, q->npush.data, q->npush.len, KVQ_SNAPSHOT);
    if (rc != 0)
        return rc;
    *push = le64(v, present);
    rc = kvq_txn_get(&v, &present, txn, q->npop.data, q->npop.len, KVQ_SNAPSHOT);
    if (rc != 0)
        return rc;
    *pop = le64(v, present);
    return 0;
}

int cq_len(cq *q, uint64_t *out)
{
    kvq_txn *txn;
    int rc = kvq_txn_create(&txn, q->db);
    uint64_t push = 0, pop = 0;
    if (rc == 0)
        rc = read_counters(q, txn, &push, &pop);
    kvq_txn_destroy(txn);
    if (rc == 0)
        *out = push >= pop ? push - pop : 0;
    return rc;
}

int cq_list(cq *q, size_t limit, int (*fn)(const uint8_t *v, size_t n, void *arg), void *arg)
{
    kvq_txn *txn;
    int rc = kvq_txn_create(&txn, q->db);
    if (rc != 0)
        return rc;
    kvq_buf begin = KVQ_BUF_INIT;
    rc = kvq_buf_append(&begin, q->items_lo.data, q->items_lo.len);
    size_t done = 0;
    while (rc == 0) {
        /* Each page in a fresh transaction, so a long listing never grows too old. */
        kvq_txn_reset(txn);
        const kvq_kv *kvs;
        size_t n;
        int more;
        size_t page = 1000;
        if (limit > 0 && limit - done < page)
            page = limit - done;
        rc = kvq_txn_get_range(&kvs, &n, &more, txn, begin.data, begin.len, q->items_hi.data,
                               q->items_hi.len, (int)page, KVQ_SNAPSHOT);
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = fn(kvs[i].value.data, kvs[i].value.len, arg);
        done += n;
        if (rc != 0 || !more || n == 0 || (limit > 0 && done >= limit))
            break;
        begin.len = 0;
        rc = kvq_buf_append(&begin, kvs[n - 1].key.data, kvs[n - 1].key.len);
        uint8_t zero = 0;
        if (rc == 0)
            rc = kvq_buf_append(&begin, &zero, 1);
    }
    kvq_buf_dispose(&begin);
    kvq_txn_destroy(txn);
    return rc;
}

static int clear_body(kvq_txn *txn, void *arg)
{
    cq *q = arg;
    uint64_t push, pop;
    int rc = read_counters(q, txn, &push, &pop);
    if (rc == 0)
        rc = kvq_txn_clear_range(txn, q->items_lo.data, q->items_lo.len, q->items_hi.data,
                                 q->items_hi.len);
    /* Everything pushed so far counts as popped: npop = npush. */
    uint8_t v[8];
    for (int i = 0; i < 8; i++)
        v[i] = (uint8_t)(push >> (8 * i));
    if (rc == 0)
        rc = kvq_txn_set(txn, q->npop.data, q->npop.len, v, 8);
    return rc;
}

int cq_clear(cq *q)
{
    return kvq_db_transact(q->db, clear_body, q);
}

static int delete_body(kvq_txn *txn, void *arg)
{
    cq *q = arg;
    /* Every key that starts with the prefix: [prefix, prefix + 0xff...) via strinc. */
    uint8_t end[512];
    size_t n = q->prefix.len;
    memcpy(end, q->prefix.data, n);
    while (n > 0 && end[n - 1] == 0xff)
        n--;
    end[n - 1]++;
    return kvq_txn_clear_range(txn, q->prefix.data, q->prefix.len, end, n);
}

int cq_delete(cq *q)
{
    return kvq_db_transact(q->db, delete_body, q);
}

typedef struct watch_ctx {
    cq *q;
    kvq_watch *w;
} watch_ctx;

static int watch_body(kvq_txn *txn, void *arg)
{
    watch_ctx *wc = arg;
    kvq_watch_destroy(wc->w);
    wc->w = NULL;
    return kvq_txn_watch(&wc->w, txn, wc->q->npush.data, wc->q->npush.len);
}

int cq_watch(cq *q, int64_t timeout_ms)
{
    watch_ctx wc = { q, NULL };
    int rc = kvq_db_transact(q->db, watch_body, &wc);
    if (rc == 0)
        rc = kvq_watch_wait(wc.w, timeout_ms);
    kvq_watch_destroy(wc.w);
    return rc;
}

int cq_stats_get(cq *q, cq_stats *out)
{
    kvq_txn *txn;
    int rc = kvq_txn_create(&txn, q->db);
    if (rc != 0)
        return rc;
    uint64_t push = 0, pop = 0;
    rc = read_counters(q, txn, &push, &pop);
    const kvq_kv *kvs;
    size_t n = 0;
    if (rc == 0)
        rc = kvq_txn_get_range(&kvs, &n, NULL, txn, q->items_lo.data, q->items_lo.len,
                               q->items_hi.data, q->items_hi.len, 1, KVQ_SNAPSHOT);
    if (rc == 0) {
        out->length = push >= pop ? push - pop : 0;
        out->has_counters = 1;
        out->pushes = push;
        out->pops = pop;
        /* The oldest item's versionstamp starts with its commit version, which advances with
         * the clock (a million a second) on both engines. */
        size_t at = q->items_lo.len; /* after prefix + (b"val",) comes 0x33 */
        if (n == 1 && kvs[0].key.len >= at + 10 && kvs[0].key.data[at - 1] == 0x33) {
            uint64_t version = 0;
            for (int i = 0; i < 8; i++)
                version = version << 8 | kvs[0].key.data[at + (size_t)i];
            int64_t now = kvq__now_us();
            out->has_age = 1;
            out->oldest_age_s =
                now > (int64_t)version ? (double)(now - (int64_t)version) / 1e6 : 0.0;
        }
    }
    kvq_txn_destroy(txn);
    return rc;
}
