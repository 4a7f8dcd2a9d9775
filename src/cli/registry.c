/* The command's registry of queues: name -> type (and the work-queue settings), so that a queue
 * is never read as another type by mistake and `kvq queues` can list them. A value is the type
 * byte, then optionally the lease in milliseconds (8 bytes, big-endian) and the maximum number
 * of deliveries (4 bytes, big-endian). It lives under keys that start with 0xFE, which no
 * tuple-encoded key can start with, so it never mixes with queue data. */
#include <string.h>

#include "cli.h"

static const char PREFIX[] = "\xfekvq\x00queues\x00";
#define PREFIX_LEN (sizeof(PREFIX) - 1)

const char *cli_qtype_name(cli_qtype t)
{
    switch (t) {
    case QT_FIFO:
        return "fifo";
    case QT_PRIORITY:
        return "priority";
    case QT_DURABLE:
        return "durable";
    default:
        return "none";
    }
}

int cli_qtype_parse(const char *s, cli_qtype *out)
{
    if (strcmp(s, "fifo") == 0)
        *out = QT_FIFO;
    else if (strcmp(s, "priority") == 0)
        *out = QT_PRIORITY;
    else if (strcmp(s, "durable") == 0)
        *out = QT_DURABLE;
    else
        return KVQ_EINVAL;
    return 0;
}

int cli_check_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 200)
        return KVQ_EINVAL;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch < 0x20 || ch == 0x7f)
            return KVQ_EINVAL;
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

typedef struct reg_op {
    const char *name;
    cli_qtype type;
    int64_t lease_ms;
    uint32_t max_deliveries;
    int create;
} reg_op;

#define REG_VALUE_LEN 13

static void decode_value(kvq_bytes v, int present, reg_op *op)
{
    op->type = (present && v.len >= 1) ? (cli_qtype)v.data[0] : QT_NONE;
    op->lease_ms = 0;
    op->max_deliveries = 0;
    if (present && v.len == REG_VALUE_LEN) {
        op->lease_ms = (int64_t)cli_get_be(v.data + 1, 8);
        op->max_deliveries = (uint32_t)cli_get_be(v.data + 9, 4);
    }
}

static int get_fn(kvq_txn *txn, void *arg)
{
    reg_op *op = arg;
    uint8_t key[PREFIX_LEN + 256];
    size_t kn = make_key(key, op->name);
    kvq_bytes v;
    int present;
    int rc = kvq_txn_get(&v, &present, txn, key, kn, 0);
    if (rc != 0)
        return rc;
    decode_value(v, present, op);
    return 0;
}

int cli_registry_info(kvq_db *db, const char *name, cli_qinfo *out)
{
    reg_op op = { .name = name };
    int rc = kvq_db_transact(db, get_fn, &op);
    if (rc != 0)
        return rc;
    out->type = op.type;
    out->lease_ms = op.lease_ms;
    out->max_deliveries = op.max_deliveries;
    return op.type == QT_NONE ? KVQ_ENOTFOUND : 0;
}

int cli_registry_get(kvq_db *db, const char *name, cli_qtype *out)
{
    cli_qinfo info = { QT_NONE, 0, 0 };
    int rc = cli_registry_info(db, name, &info);
    *out = info.type;
    return rc;
}

static int create_fn(kvq_txn *txn, void *arg)
{
    reg_op *op = arg;
    reg_op want = *op;
    int rc = get_fn(txn, op);
    if (rc != 0)
        return rc;
    if (op->type != QT_NONE) {
        op->create = op->type == want.type ? 0 : -1;
        return 0;
    }
    uint8_t key[PREFIX_LEN + 256];
    size_t kn = make_key(key, op->name);
    uint8_t v[REG_VALUE_LEN];
    v[0] = (uint8_t)want.type;
    cli_put_be(v + 1, (uint64_t)want.lease_ms, 8);
    cli_put_be(v + 9, want.max_deliveries, 4);
    *op = want;
    op->create = 1;
    return kvq_txn_set(txn, key, kn, v, sizeof(v));
}

int cli_registry_create_info(kvq_db *db, const char *name, const cli_qinfo *info)
{
    reg_op op = { .name = name,
                  .type = info->type,
                  .lease_ms = info->lease_ms,
                  .max_deliveries = info->max_deliveries };
    int rc = kvq_db_transact(db, create_fn, &op);
    if (rc != 0)
        return rc;
    if (op.create < 0)
        return KVQ_EWRONGTYPE;
    return op.create == 0 ? KVQ_EEXISTS : 0;
}

int cli_registry_create(kvq_db *db, const char *name, cli_qtype type)
{
    cli_qinfo info = { type, 0, 0 };
    return cli_registry_create_info(db, name, &info);
}

typedef struct alter_op {
    reg_op r;
    int64_t lease_ms;    /* -1: keep */
    int64_t max_deliveries; /* -1: keep */
} alter_op;

static int alter_fn(kvq_txn *txn, void *arg)
{
    alter_op *a = arg;
    int rc = get_fn(txn, &a->r);
    if (rc != 0 || a->r.type == QT_NONE || a->r.type == QT_FIFO)
        return rc;
    if (a->lease_ms >= 0)
        a->r.lease_ms = a->lease_ms;
    if (a->max_deliveries >= 0)
        a->r.max_deliveries = (uint32_t)a->max_deliveries;
    uint8_t key[PREFIX_LEN + 256];
    size_t kn = make_key(key, a->r.name);
    uint8_t v[REG_VALUE_LEN];
    v[0] = (uint8_t)a->r.type;
    cli_put_be(v + 1, (uint64_t)a->r.lease_ms, 8);
    cli_put_be(v + 9, a->r.max_deliveries, 4);
    return kvq_txn_set(txn, key, kn, v, sizeof(v));
}

int cli_registry_alter(kvq_db *db, const char *name, int64_t lease_ms, int64_t max_deliveries,
                       cli_qinfo *out)
{
    alter_op a = { .r = { .name = name }, .lease_ms = lease_ms, .max_deliveries = max_deliveries };
    int rc = kvq_db_transact(db, alter_fn, &a);
    if (rc != 0)
        return rc;
    if (a.r.type == QT_NONE)
        return KVQ_ENOTFOUND;
    if (a.r.type == QT_FIFO)
        return KVQ_EWRONGTYPE;
    out->type = a.r.type;
    out->lease_ms = a.r.lease_ms;
    out->max_deliveries = a.r.max_deliveries;
    return 0;
}

static int delete_fn(kvq_txn *txn, void *arg)
{
    reg_op *op = arg;
    uint8_t key[PREFIX_LEN + 256];
    size_t kn = make_key(key, op->name);
    return kvq_txn_clear(txn, key, kn);
}

int cli_registry_delete(kvq_db *db, const char *name)
{
    reg_op op = { .name = name };
    return kvq_db_transact(db, delete_fn, &op);
}

int cli_registry_list(kvq_db *db, int (*fn)(const char *name, cli_qtype t, void *arg), void *arg)
{
    kvq_txn *txn;
    int rc = kvq_txn_create(&txn, db);
    if (rc != 0)
        return rc;
    /* The range of every registry key: the prefix ends with 0x00, so the next prefix ends with
     * 0x01. Pages of 100, each continuing just after the last key of the one before. */
    uint8_t begin[PREFIX_LEN + 257], end[PREFIX_LEN];
    memcpy(begin, PREFIX, PREFIX_LEN);
    memcpy(end, PREFIX, PREFIX_LEN);
    end[PREFIX_LEN - 1] = 1;
    size_t blen = PREFIX_LEN;
    for (;;) {
        const kvq_kv *kvs;
        size_t n;
        int more;
        rc = kvq_txn_get_range(&kvs, &n, &more, txn, begin, blen, end, PREFIX_LEN, 100,
                               KVQ_SNAPSHOT);
        if (rc != 0)
            break;
        for (size_t i = 0; i < n && rc == 0; i++) {
            char name[256];
            size_t nl = kvs[i].key.len - PREFIX_LEN;
            if (nl >= sizeof(name))
                continue;
            memcpy(name, kvs[i].key.data + PREFIX_LEN, nl);
            name[nl] = '\0';
            reg_op op;
            decode_value(kvs[i].value, 1, &op);
            rc = fn(name, op.type, arg);
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
