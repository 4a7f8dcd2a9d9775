/* Named queues: the database's registry of queues by name (name -> type and work-queue
 * settings), which `kvq create` writes and kvq_queue_open_named reads, so that a program opens a
 * queue by the name the command line uses, with the type and settings it was created with, and
 * never reads a queue as another type.
 *
 * A registry value is the type byte (1 fifo, 2 priority, 3 durable: kvq_queue_type), then
 * optionally the lease in milliseconds (8 bytes, big-endian) and the maximum number of
 * deliveries (4 bytes, big-endian). It lives under keys that start with 0xFE, which no
 * tuple-encoded key can start with, so it never mixes with queue data. A queue named N lives in
 * the subspace (N,): a string for FIFO and priority queues (as the recipes name theirs), bytes
 * for durable ones (as erlfdb does). */
#include <string.h>

#include "layers/queue/queue_internal.h"
#include "layers/queue/queue_salvage.h"

static const char PREFIX[] = "\xfekvq\x00queues\x00";
#define PREFIX_LEN    (sizeof(PREFIX) - 1)
#define VALUE_LEN     13
#define MAX_NAME_LEN  200

int kvq_queue_check_name(const char *name)
{
    if (name == NULL)
        return kvq__error(KVQ_EINVAL, "the queue name is NULL");
    size_t n = strlen(name);
    if (n == 0 || n > MAX_NAME_LEN)
        return kvq__error(KVQ_EINVAL, "a queue name has 1 to %d bytes, not %zu", MAX_NAME_LEN, n);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch < 0x20 || ch == 0x7f)
            return kvq__error(KVQ_EINVAL, "a queue name has no control characters (byte %zu)",
                              i);
    }
    return 0;
}

static size_t make_key(uint8_t *buf, const char *name)
{
    size_t n = strlen(name);
    memcpy(buf, PREFIX, PREFIX_LEN);
    memcpy(buf + PREFIX_LEN, name, n);
    return PREFIX_LEN + n;
}

/* Decodes a value; type 0 when absent or not one of kvq's. */
static void decode(kvq_bytes v, int present, kvq_queue_settings *s)
{
    memset(s, 0, sizeof(*s));
    s->version = KVQ_QUEUE_SETTINGS_VERSION;
    if (!present || v.len < 1 || v.data[0] < KVQ_QUEUE_FIFO || v.data[0] > KVQ_QUEUE_DURABLE)
        return;
    s->type = (kvq_queue_type)v.data[0];
    if (v.len == VALUE_LEN) {
        s->lease_ms = (int64_t)kvq__be_get(v.data + 1, 8);
        s->max_deliveries = (uint32_t)kvq__be_get(v.data + 9, 4);
    }
}

static int write_entry(kvq_txn *txn, const char *name, const kvq_queue_settings *s)
{
    uint8_t key[PREFIX_LEN + MAX_NAME_LEN];
    size_t kn = make_key(key, name);
    uint8_t v[VALUE_LEN];
    v[0] = (uint8_t)s->type;
    kvq__be_put(v + 1, (uint64_t)s->lease_ms, 8);
    kvq__be_put(v + 9, s->max_deliveries, 4);
    return kvq_txn_set(txn, key, kn, v, sizeof(v));
}

static int read_entry(kvq_txn *txn, const char *name, kvq_queue_settings *s)
{
    uint8_t key[PREFIX_LEN + MAX_NAME_LEN];
    size_t kn = make_key(key, name);
    kvq_bytes v;
    int present;
    int rc = kvq_txn_get(&v, &present, txn, key, kn, 0);
    if (rc == 0)
        decode(v, present, s);
    return rc;
}

static int check_settings(const kvq_queue_settings *s, const char *what)
{
    if (s == NULL)
        return kvq__error(KVQ_EINVAL, "%s: settings are NULL", what);
    if (s->flags & ~(unsigned int)KVQ_QUEUE_ADOPT)
        return kvq__error(KVQ_EINVAL, "%s: unknown flags 0x%x", what, s->flags);
    if (s->version != KVQ_QUEUE_SETTINGS_VERSION)
        return kvq__error(KVQ_EINVAL, "%s: settings of version %u (this kvq knows %d: initialise "
                          "them with KVQ_QUEUE_SETTINGS_INIT)", what, s->version,
                          KVQ_QUEUE_SETTINGS_VERSION);
    if (s->type < KVQ_QUEUE_FIFO || s->type > KVQ_QUEUE_DURABLE)
        return kvq__error(KVQ_EINVAL, "%s: unknown queue type %d", what, (int)s->type);
    if (s->lease_ms < 0 || s->lease_ms > 86400000)
        return kvq__error(KVQ_EINVAL, "%s: lease of %lld ms is out of range (0 to 1 day)", what,
                          (long long)s->lease_ms);
    if (s->type == KVQ_QUEUE_FIFO && (s->lease_ms != 0 || s->max_deliveries != 0))
        return kvq__error(KVQ_EINVAL, "%s: a FIFO queue has no lease or deliveries", what);
    return 0;
}

typedef struct named_op {
    const char *name;
    kvq_queue_settings want, have;
    int64_t lease_ms, max_deliveries; /* alter: -1 keeps */
    int outcome;                      /* create: 1 created, 0 exists alike, -1 other type */
} named_op;

/* The subspace of a named queue: (name,) as a string (FIFO, priority) or bytes (durable). */
static int queue_prefix(kvq_buf *out, const char *name, kvq_queue_type type)
{
    kvq_tuple_elem e = type == KVQ_QUEUE_DURABLE ? kvq_tuple_bytes(name, strlen(name))
                                                 : kvq_tuple_str(name);
    out->len = 0;
    return kvq_tuple_pack_buf(out, &e, 1);
}

/* Whether anything lives in the queue's subspace: [prefix, prefix with its final 0x00 -> 0x01). */
static int prefix_used(kvq_txn *txn, const char *name, kvq_queue_type type, int *used)
{
    kvq_buf p = KVQ_BUF_INIT, end = KVQ_BUF_INIT;
    int rc = queue_prefix(&p, name, type);
    if (rc == 0)
        rc = kvq_buf_append(&end, p.data, p.len);
    const kvq_kv *kvs;
    size_t n = 0;
    bool more;
    if (rc == 0) {
        end.data[end.len - 1]++;
        rc = kvq_txn_get_range(&kvs, &n, &more, txn, p.data, p.len, end.data, end.len, 1, 0);
    }
    *used = rc == 0 && n > 0;
    kvq_buf_dispose(&p);
    kvq_buf_dispose(&end);
    return rc;
}

static int create_fn(kvq_txn *txn, void *arg)
{
    named_op *op = arg;
    int rc = read_entry(txn, op->name, &op->have);
    if (rc != 0)
        return rc;
    if (op->have.type != 0) {
        op->outcome = op->have.type == op->want.type ? 0 : -1;
        return 0;
    }
    if (!(op->want.flags & KVQ_QUEUE_ADOPT)) {
        int used = 0;
        rc = prefix_used(txn, op->name, op->want.type, &used);
        if (rc != 0)
            return rc;
        if (used) {
            op->outcome = -2;
            return 0;
        }
    }
    op->outcome = 1;
    op->want.flags = 0;
    op->have = op->want;
    return write_entry(txn, op->name, &op->want);
}

int kvq_queue_create_named(kvq_db *db, const char *name, const kvq_queue_settings *settings)
{
    int rc = db == NULL ? kvq__error(KVQ_EINVAL, "kvq_queue_create_named: db is NULL") : 0;
    if (rc == 0)
        rc = kvq_queue_check_name(name);
    if (rc == 0)
        rc = check_settings(settings, "kvq_queue_create_named");
    if (rc != 0)
        return rc;
    named_op op = { .name = name, .want = *settings };
    rc = kvq_db_transact(db, create_fn, &op);
    if (rc != 0)
        return rc;
    if (op.outcome == -2)
        return kvq__error(KVQ_EWRONGTYPE,
                          "the subspace (%s\"%s\",) of a %s queue named '%s' already holds keys, "
                          "which kvq did not write under this name (the application's own data?); "
                          "to name a queue another program wrote there, adopt it",
                          op.want.type == KVQ_QUEUE_DURABLE ? "b" : "", name,
                          kvq_queue_type_name(op.want.type), name);
    if (op.outcome < 0)
        return kvq__error(KVQ_EWRONGTYPE, "queue '%s' exists as a %s queue", name,
                          kvq_queue_type_name(op.have.type));
    if (op.outcome == 0)
        return kvq__error(KVQ_EEXISTS, "queue '%s' exists", name);
    return 0;
}

static int get_fn(kvq_txn *txn, void *arg)
{
    named_op *op = arg;
    return read_entry(txn, op->name, &op->have);
}

int kvq_queue_get_named(kvq_queue_settings *out, kvq_db *db, const char *name)
{
    int rc = db == NULL || out == NULL
                 ? kvq__error(KVQ_EINVAL, "kvq_queue_get_named: NULL db or out")
                 : kvq_queue_check_name(name);
    if (rc != 0)
        return rc;
    named_op op = { .name = name };
    rc = kvq_db_transact(db, get_fn, &op);
    if (rc != 0)
        return rc;
    if (op.have.type == 0)
        return kvq__error(KVQ_ENOTFOUND, "no queue named '%s'", name);
    *out = op.have;
    return 0;
}

static int alter_fn(kvq_txn *txn, void *arg)
{
    named_op *op = arg;
    int rc = read_entry(txn, op->name, &op->have);
    if (rc != 0 || op->have.type == 0 || op->have.type == KVQ_QUEUE_FIFO)
        return rc;
    if (op->lease_ms >= 0)
        op->have.lease_ms = op->lease_ms;
    if (op->max_deliveries >= 0)
        op->have.max_deliveries = (uint32_t)op->max_deliveries;
    return write_entry(txn, op->name, &op->have);
}

int kvq_queue_alter_named(
    kvq_queue_settings *out, kvq_db *db, const char *name, int64_t lease_ms, int64_t max_deliveries)
{
    int rc = db == NULL ? kvq__error(KVQ_EINVAL, "kvq_queue_alter_named: db is NULL")
                        : kvq_queue_check_name(name);
    if (rc == 0 && (lease_ms < -1 || lease_ms == 0 || lease_ms > 86400000))
        rc = kvq__error(KVQ_EINVAL, "lease of %lld ms is out of range (1 ms to 1 day; -1 keeps)",
                        (long long)lease_ms);
    if (rc == 0 && (max_deliveries < -1 || max_deliveries > UINT32_MAX))
        rc = kvq__error(KVQ_EINVAL, "max deliveries %lld is out of range (-1 keeps)",
                        (long long)max_deliveries);
    if (rc != 0)
        return rc;
    named_op op = { .name = name, .lease_ms = lease_ms, .max_deliveries = max_deliveries };
    rc = kvq_db_transact(db, alter_fn, &op);
    if (rc != 0)
        return rc;
    if (op.have.type == 0)
        return kvq__error(KVQ_ENOTFOUND, "no queue named '%s'", name);
    if (op.have.type == KVQ_QUEUE_FIFO)
        return kvq__error(KVQ_EWRONGTYPE, "'%s' is a FIFO queue: it has no lease or deliveries",
                          name);
    if (out != NULL)
        *out = op.have;
    return 0;
}

static int forget_fn(kvq_txn *txn, void *arg)
{
    named_op *op = arg;
    uint8_t key[PREFIX_LEN + MAX_NAME_LEN];
    size_t kn = make_key(key, op->name);
    return kvq_txn_clear(txn, key, kn);
}

int kvq_queue_forget_named(kvq_db *db, const char *name)
{
    int rc = db == NULL ? kvq__error(KVQ_EINVAL, "kvq_queue_forget_named: db is NULL")
                        : kvq_queue_check_name(name);
    if (rc != 0)
        return rc;
    named_op op = { .name = name };
    return kvq_db_transact(db, forget_fn, &op);
}

/* Clears [prefix + lo, prefix + hi). */
static int clear_part(kvq_txn *txn, const kvq_buf *prefix, const uint8_t *lo, size_t lon,
                      const uint8_t *hi, size_t hin)
{
    kvq_buf a = KVQ_BUF_INIT, b = KVQ_BUF_INIT;
    int rc = kvq_buf_append(&a, prefix->data, prefix->len);
    if (rc == 0)
        rc = kvq_buf_append(&a, lo, lon);
    if (rc == 0)
        rc = kvq_buf_append(&b, prefix->data, prefix->len);
    if (rc == 0)
        rc = kvq_buf_append(&b, hi, hin);
    if (rc == 0)
        rc = kvq_txn_clear_range(txn, a.data, a.len, b.data, b.len);
    kvq_buf_dispose(&a);
    kvq_buf_dispose(&b);
    return rc;
}

static int delete_fn(kvq_txn *txn, void *arg)
{
    named_op *op = arg;
    int rc = read_entry(txn, op->name, &op->have);
    if (rc != 0 || op->have.type == 0)
        return rc;
    kvq_buf p = KVQ_BUF_INIT;
    rc = queue_prefix(&p, op->name, op->have.type);
    if (rc == 0 && op->have.type != KVQ_QUEUE_DURABLE) {
        /* Items: (index, random) and (priority, count, random), an integer first (the tuple
         * codes of integers are 0x0b to 0x1d). */
        static const uint8_t lo = 0x0b, hi = 0x1e;
        rc = clear_part(txn, &p, &lo, 1, &hi, 1);
    } else if (rc == 0) {
        /* (b"val", versionstamp) items and the two counters. */
        static const uint8_t val[] = { 0x01, 'v', 'a', 'l', 0x00 }, val_end[] = { 0x01, 'v', 'a',
                                                                                 'l', 0x01 };
        static const uint8_t npush[] = { 0x01, 'n', 'p', 'u', 's', 'h', 0x00, 0x00 };
        static const uint8_t npop[] = { 0x01, 'n', 'p', 'o', 'p', 0x00, 0x00 };
        rc = clear_part(txn, &p, val, sizeof(val), val_end, sizeof(val_end));
        /* Each counter key alone: [key, key + 0x00). */
        if (rc == 0)
            rc = clear_part(txn, &p, npush, sizeof(npush) - 1, npush, sizeof(npush));
        if (rc == 0)
            rc = clear_part(txn, &p, npop, sizeof(npop) - 1, npop, sizeof(npop));
    }
    /* kvq's bookkeeping: prefix + 0xFF + ..., up to the end of the subspace. */
    if (rc == 0) {
        static const uint8_t ff = 0xff;
        kvq_buf end = KVQ_BUF_INIT;
        rc = kvq_buf_append(&end, p.data, p.len);
        if (rc == 0) {
            end.data[end.len - 1]++;
            kvq_buf b = KVQ_BUF_INIT;
            rc = kvq_buf_append(&b, p.data, p.len);
            if (rc == 0)
                rc = kvq_buf_append(&b, &ff, 1);
            if (rc == 0)
                rc = kvq_txn_clear_range(txn, b.data, b.len, end.data, end.len);
            kvq_buf_dispose(&b);
        }
        kvq_buf_dispose(&end);
    }
    kvq_buf_dispose(&p);
    if (rc == 0)
        rc = forget_fn(txn, op);
    return rc;
}

int kvq_queue_delete_named(kvq_db *db, const char *name)
{
    int rc = db == NULL ? kvq__error(KVQ_EINVAL, "kvq_queue_delete_named: db is NULL")
                        : kvq_queue_check_name(name);
    if (rc != 0)
        return rc;
    named_op op = { .name = name };
    rc = kvq_db_transact(db, delete_fn, &op);
    if (rc == 0 && op.have.type == 0)
        rc = kvq__error(KVQ_ENOTFOUND, "no queue named '%s'", name);
    return rc;
}

int kvq_queue_list_named(kvq_db *db, kvq_queue_named_fn fn, void *payload)
{
    if (db == NULL || fn == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_queue_list_named: NULL db or fn");
    kvq_txn *txn;
    int rc = kvq_txn_create(&txn, db);
    if (rc != 0)
        return rc;
    /* The range of every registry key: the prefix ends with 0x00, so the next prefix ends with
     * 0x01. Pages of 100, each continuing just after the last key of the one before. */
    uint8_t begin[PREFIX_LEN + MAX_NAME_LEN + 1], end[PREFIX_LEN];
    memcpy(begin, PREFIX, PREFIX_LEN);
    memcpy(end, PREFIX, PREFIX_LEN);
    end[PREFIX_LEN - 1] = 1;
    size_t blen = PREFIX_LEN;
    for (;;) {
        const kvq_kv *kvs;
        size_t n;
        bool more;
        rc = kvq_txn_get_range(&kvs, &n, &more, txn, begin, blen, end, PREFIX_LEN, 100,
                               KVQ_SNAPSHOT);
        if (rc != 0)
            break;
        for (size_t i = 0; i < n && rc == 0; i++) {
            char name[MAX_NAME_LEN + 1];
            size_t nl = kvs[i].key.len - PREFIX_LEN;
            if (nl > MAX_NAME_LEN)
                continue;
            memcpy(name, kvs[i].key.data + PREFIX_LEN, nl);
            name[nl] = '\0';
            kvq_queue_settings s;
            decode(kvs[i].value, 1, &s);
            if (s.type != 0)
                rc = fn(name, &s, payload);
        }
        if (rc != 0 || !more || n == 0)
            break;
        const kvq_bytes *last = &kvs[n - 1].key;
        if (last->len + 1 > sizeof(begin))
            break;
        memcpy(begin, last->data, last->len);
        begin[last->len] = 0;
        blen = last->len + 1;
    }
    kvq_txn_destroy(txn);
    return rc;
}

int kvq_queue_open_named(kvq_queue **out,
                         kvq_queue_settings *settings,
                         kvq_db *db,
                         const char *name)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_queue_open_named: out is NULL");
    *out = NULL;
    kvq_queue_settings s;
    int rc = kvq_queue_get_named(&s, db, name);
    if (rc != 0)
        return rc;
    kvq_tuple_elem elem = s.type == KVQ_QUEUE_DURABLE ? kvq_tuple_bytes(name, strlen(name))
                                                      : kvq_tuple_str(name);
    kvq_subspace *sub = NULL;
    rc = kvq_subspace_new(&sub, NULL, 0, &elem, 1);
    if (rc == 0)
        rc = kvq_queue_open(out, db, s.type, sub, NULL);
    kvq_subspace_destroy(sub);
    if (rc != 0)
        return rc;
    (*out)->named = s;
    (*out)->is_named = 1;
    if (settings != NULL)
        *settings = s;
    return 0;
}

/* ---- salvage (salvage.h) --------------------------------------------------------------------- */

typedef struct salvage_one {
    kvq_buf value;
    int found, bad;
} salvage_one;

static int take_one(void *arg, kvq_bytes key, kvq_bytes value)
{
    (void)key;
    salvage_one *o = arg;
    o->found = 1;
    return kvq__buf_set(&o->value, value.data, value.len);
}

/* The value of one key, read past damage: found = 0 when absent or unreadable (bad = 1). */
static int salvage_get(kvq__salvage *sv, const uint8_t *key, size_t n, salvage_one *o)
{
    uint8_t end[PREFIX_LEN + MAX_NAME_LEN + 64];
    if (n + 1 > sizeof(end))
        return kvq__error(KVQ_EINVAL, "key too long");
    memcpy(end, key, n);
    end[n] = 0x00;
    kvq__salvage_stats st;
    memset(&st, 0, sizeof(st));
    o->found = 0;
    int rc = kvq__salvage_range(sv, key, n, end, n + 1, take_one, o, &st);
    o->bad = st.bad_rows > 0 || st.gaps > 0;
    return rc;
}

typedef struct salvage_items {
    kvq__queue_salvage_fn fn;
    void *payload;
    kvq_queue_type type;
    size_t prefix_len;
    uint64_t n;
} salvage_items;

static int give_item(void *arg, kvq_bytes key, kvq_bytes value)
{
    salvage_items *x = arg;
    int64_t prio = 0, count = 0;
    if (x->type == KVQ_QUEUE_PRIORITY && key.len >= x->prefix_len &&
        kvq__qk_parse_prio(key.data + x->prefix_len, key.len - x->prefix_len, &prio, &count) != 0)
        prio = 0;
    x->n++;
    return x->fn(value, prio, x->payload);
}

static uint64_t le64(const kvq_buf *b)
{
    uint64_t v = 0;
    for (size_t i = b->len < 8 ? b->len : 8; i > 0; i--)
        v = v << 8 | b->data[i - 1];
    return v;
}

int kvq__queue_salvage(const char *url,
                       const char *name,
                       kvq__queue_salvage_fn fn,
                       void *payload,
                       kvq__queue_salvage_report *rep)
{
    if (url == NULL || fn == NULL || rep == NULL)
        return kvq__error(KVQ_EINVAL, "kvq__queue_salvage: NULL argument");
    memset(rep, 0, sizeof(*rep));
    int rc = kvq_queue_check_name(name);
    if (rc != 0)
        return rc;
    kvq__salvage *sv = NULL;
    rc = kvq__salvage_open(&sv, url);
    if (rc != 0)
        return rc;
    uint8_t key[PREFIX_LEN + MAX_NAME_LEN];
    size_t kn = make_key(key, name);
    salvage_one reg = { KVQ_BUF_INIT, 0, 0 }, c1 = { KVQ_BUF_INIT, 0, 0 },
                c2 = { KVQ_BUF_INIT, 0, 0 };
    kvq_buf lo = KVQ_BUF_INIT, hi = KVQ_BUF_INIT, npush = KVQ_BUF_INIT, npop = KVQ_BUF_INIT;
    kvq_subspace *sub = NULL;
    rc = salvage_get(sv, key, kn, &reg);
    kvq_queue_settings s;
    memset(&s, 0, sizeof(s));
    if (rc == 0) {
        kvq_bytes v = { reg.value.data, reg.value.len };
        decode(v, reg.found, &s);
        if (s.type == 0)
            rc = kvq__error(KVQ_ENOTFOUND, reg.bad ? "the registry entry of queue '%s' is damaged"
                                                   : "no queue named '%s'",
                            name);
    }
    kvq_tuple_elem elem = kvq_tuple_str(name);
    if (rc == 0) {
        rep->type = s.type;
        if (s.type == KVQ_QUEUE_DURABLE)
            elem = kvq_tuple_bytes(name, strlen(name));
        rc = kvq_subspace_new(&sub, NULL, 0, &elem, 1);
    }
    kvq_bytes p = { NULL, 0 };
    if (rc == 0) {
        p = kvq_subspace_get_prefix(sub);
        if (s.type == KVQ_QUEUE_DURABLE) {
            kvq_buf val = KVQ_BUF_INIT;
            rc = kvq__qk_counter(&val, p, "val");
            if (rc == 0)
                rc = kvq__qk_counter(&npush, p, "npush");
            if (rc == 0)
                rc = kvq__qk_counter(&npop, p, "npop");
            if (rc == 0)
                rc = kvq_buf_append(&lo, val.data, val.len);
            if (rc == 0)
                rc = kvq__buf_put_byte(&lo, 0x00);
            if (rc == 0)
                rc = kvq_buf_append(&hi, val.data, val.len);
            if (rc == 0)
                rc = kvq__buf_put_byte(&hi, 0xff);
            kvq_buf_dispose(&val);
        } else {
            /* The items' keys: the prefix, then an integer (type codes 0x0b to 0x1d). */
            rc = kvq_buf_append(&lo, p.data, p.len);
            if (rc == 0)
                rc = kvq__buf_put_byte(&lo, 0x0b);
            if (rc == 0)
                rc = kvq_buf_append(&hi, p.data, p.len);
            if (rc == 0)
                rc = kvq__buf_put_byte(&hi, 0x1e);
        }
    }
    salvage_items x = { fn, payload, s.type, p.len, 0 };
    if (rc == 0)
        rc = kvq__salvage_range(sv, lo.data, lo.len, hi.data, hi.len, give_item, &x, &rep->st);
    if (rc == 0) {
        rep->items = x.n;
        rep->skipped = rep->st.bad_rows + rep->st.log_skipped_sets;
        rep->skipped_exact = rep->st.gaps == 0;
        /* A durable queue's counters say how many items it holds: what is missing from them
         * was skipped (rows of a stretch that could not be read), when they can be read. */
        if (s.type == KVQ_QUEUE_DURABLE) {
            /* The newest counters, from the log's valid records past a damaged one too. */
            kvq__salvage_set_through(sv, 1);
            rc = salvage_get(sv, npush.data, npush.len, &c1);
            if (rc == 0)
                rc = salvage_get(sv, npop.data, npop.len, &c2);
            kvq__salvage_set_through(sv, 0);
            if (rc == 0 && !c1.bad && !c2.bad) {
                uint64_t len = le64(&c1.value) - le64(&c2.value);
                if (len >= x.n && len - x.n >= rep->skipped) {
                    rep->skipped = len - x.n;
                    rep->skipped_exact = 1;
                }
            }
        }
    }
    kvq_subspace_destroy(sub);
    kvq_buf_dispose(&reg.value);
    kvq_buf_dispose(&c1.value);
    kvq_buf_dispose(&c2.value);
    kvq_buf_dispose(&lo);
    kvq_buf_dispose(&hi);
    kvq_buf_dispose(&npush);
    kvq_buf_dispose(&npop);
    kvq__salvage_close(sv);
    return rc;
}

typedef struct salvage_names {
    kvq__queue_salvage_name_fn fn;
    void *arg;
} salvage_names;

static int give_name(void *arg, kvq_bytes key, kvq_bytes value)
{
    (void)value;
    salvage_names *x = arg;
    char name[MAX_NAME_LEN + 1];
    size_t n = key.len - PREFIX_LEN;
    if (key.len <= PREFIX_LEN || n > MAX_NAME_LEN)
        return 0;
    memcpy(name, key.data + PREFIX_LEN, n);
    name[n] = '\0';
    return x->fn(name, x->arg);
}

int kvq__queue_salvage_names(const char *url, kvq__queue_salvage_name_fn fn, void *arg,
                             kvq__salvage_stats *st)
{
    if (url == NULL || fn == NULL || st == NULL)
        return kvq__error(KVQ_EINVAL, "kvq__queue_salvage_names: NULL argument");
    kvq__salvage *sv = NULL;
    int rc = kvq__salvage_open(&sv, url);
    if (rc != 0)
        return rc;
    uint8_t hi[PREFIX_LEN + 1];
    memcpy(hi, PREFIX, PREFIX_LEN);
    hi[PREFIX_LEN] = 0xff;
    salvage_names x = { fn, arg };
    rc = kvq__salvage_range(sv, (const uint8_t *)PREFIX, PREFIX_LEN, hi, PREFIX_LEN + 1,
                            give_name, &x, st);
    kvq__salvage_close(sv);
    return rc;
}
