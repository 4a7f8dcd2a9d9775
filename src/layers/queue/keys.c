/* Key builders and parsers of the queue layers (see queue_internal.h for the layouts). */
#include <string.h>

#include "layers/queue/queue_internal.h"
#include "tuple/tuple_internal.h"

/* Appends prefix (+ 0xFF for bookkeeping keys) + pack(elems); out->len is unchanged on error. */
static int put_key(kvq_buf *out, kvq_bytes prefix, int bk, const kvq_tuple_elem *e, size_t n)
{
    static const uint8_t ff = 0xff;
    size_t old = out->len;
    int rc = kvq_buf_append(out, prefix.data, prefix.len);
    if (rc == 0 && bk)
        rc = kvq_buf_append(out, &ff, 1);
    if (rc == 0)
        rc = kvq_tuple_pack_buf(out, e, n);
    if (rc != 0)
        out->len = old;
    return rc;
}

/* Unpacks rest and checks that it has `count` elements of the given types (0 ends the list
 * early: any further elements are refused). */
static int unpack_typed(kvq_tuple **t,
                        const uint8_t *rest,
                        size_t len,
                        const char *what,
                        size_t count,
                        const kvq_tuple_type *types)
{
    int rc = kvq_tuple_unpack(t, rest, len);
    if (rc != 0)
        return rc;
    if (kvq_tuple_get_count(*t) != count)
        goto bad;
    for (size_t i = 0; i < count; i++) {
        const kvq_tuple_elem *e = kvq_tuple_get_elem(*t, i);
        if (e->type != types[i]) {
            if (types[i] == KVQ_TUPLE_INT && e->type == KVQ_TUPLE_UINT) {
                kvq_tuple_destroy(*t);
                *t = NULL;
                return kvq__error(KVQ_ERANGE, "%s holds an integer above 2^63-1", what);
            }
            goto bad;
        }
    }
    return 0;
bad:
    kvq_tuple_destroy(*t);
    *t = NULL;
    return kvq__error(KVQ_ETUPLE, "a key under the queue's prefix is not a %s", what);
}

/* The tail of an item's key: n integers, then the random bytes, written with the tuple layer's
 * element writers (the same bytes as kvq_tuple_pack of those elements). */
static int put_item_tail(kvq_buf *out, const int64_t *ints, size_t n, const uint8_t *rand20)
{
    size_t room = n * KVQ__TUPLE_INT_MAX + 2 * KVQ__RAND_LEN + 2;
    if (kvq_buf_grow(out, room) != 0)
        return kvq__error(KVQ_ENOMEM, "out of memory for a key");
    uint8_t *p = out->data + out->len;
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += kvq__tuple_put_int(p + len, ints[i]);
    len += kvq__tuple_put_bytes(p + len, rand20, KVQ__RAND_LEN);
    out->len += len;
    return 0;
}

int kvq__qk_fifo_item_tail(kvq_buf *out, int64_t index, const uint8_t *rand20)
{
    return put_item_tail(out, &index, 1, rand20);
}

int kvq__qk_prio_item_tail(kvq_buf *out, int64_t priority, int64_t count, const uint8_t *rand20)
{
    int64_t ints[2] = { priority, count };
    return put_item_tail(out, ints, 2, rand20);
}

int kvq__qk_fifo_item(kvq_buf *out, kvq_bytes prefix, int64_t index, const uint8_t *rand20)
{
    size_t old = out->len;
    int rc = kvq_buf_append(out, prefix.data, prefix.len);
    if (rc == 0)
        rc = kvq__qk_fifo_item_tail(out, index, rand20);
    if (rc != 0)
        out->len = old;
    return rc;
}

int kvq__qk_prio_item(
    kvq_buf *out, kvq_bytes prefix, int64_t priority, int64_t count, const uint8_t *rand20)
{
    size_t old = out->len;
    int rc = kvq_buf_append(out, prefix.data, prefix.len);
    if (rc == 0)
        rc = kvq__qk_prio_item_tail(out, priority, count, rand20);
    if (rc != 0)
        out->len = old;
    return rc;
}

int kvq__qk_prio_prefix(kvq_buf *out, kvq_bytes prefix, int64_t priority)
{
    kvq_tuple_elem e = kvq_tuple_int(priority);
    return put_key(out, prefix, 0, &e, 1);
}

int kvq__qk_durable_push(kvq_buf *out, kvq_bytes prefix, uint16_t uv)
{
    /* The offset pack_vs appends counts from out->data: the prefix is part of the key. */
    size_t old = out->len;
    kvq_tuple_elem e[2] = { kvq_tuple_bytes("val", 3), kvq_tuple_vs_incomplete(uv) };
    int rc = kvq_buf_append(out, prefix.data, prefix.len);
    if (rc == 0)
        rc = kvq_tuple_pack_vs(out, e, 2);
    if (rc != 0)
        out->len = old;
    return rc;
}

void kvq__qk_durable_push_set_uv(kvq_buf *key, uint16_t uv)
{
    /* The incomplete stamp is 10 bytes of transaction version then the user version, big
     * endian; the offset of the 10 bytes is the key's last 4 bytes. */
    uint32_t off = kvq__le32_get(key->data + key->len - 4);
    key->data[off + 10] = (uint8_t)(uv >> 8);
    key->data[off + 11] = (uint8_t)uv;
}

int kvq__qk_counter(kvq_buf *out, kvq_bytes prefix, const char *name)
{
    kvq_tuple_elem e = kvq_tuple_bytes(name, strlen(name));
    return put_key(out, prefix, 0, &e, 1);
}

int kvq__qk_bk_counter(kvq_buf *out, kvq_bytes prefix, const char *name)
{
    kvq_tuple_elem e = kvq_tuple_str(name);
    return put_key(out, prefix, 1, &e, 1);
}

int kvq__q_new_id(uint8_t id[KVQ__ID_LEN])
{
    _Static_assert(KVQ__ID_LEN == 16, "an id is 8 bytes of time and 8 random bytes");
    uint64_t t = (uint64_t)kvq__now_us();
    for (int i = 0; i < 8; i++)
        id[i] = (uint8_t)(t >> (56 - 8 * i));
    return kvq__random_bytes(id + 8, 8);
}

int kvq__qk_mark(
    kvq_buf *out, kvq_bytes prefix, const char *tag, int64_t bucket, const uint8_t *id16)
{
    kvq_tuple_elem e[3] = { kvq_tuple_str(tag), kvq_tuple_int(bucket),
                            kvq_tuple_bytes(id16, KVQ__ID_LEN) };
    return put_key(out, prefix, 1, e, 3);
}

int kvq__qk_mark_bound(kvq_buf *out, kvq_bytes prefix, const char *tag, int64_t bucket, int with_b)
{
    kvq_tuple_elem e[2] = { kvq_tuple_str(tag), kvq_tuple_int(bucket) };
    return put_key(out, prefix, 1, e, with_b ? 2 : 1);
}

int kvq__qk_hc_kind(kvq_buf *out, kvq_bytes prefix, const char *kind)
{
    kvq_tuple_elem e[2] = { kvq_tuple_str("hc"), kvq_tuple_str(kind) };
    return put_key(out, prefix, 1, e, 2);
}

int kvq__qk_hc_waiter(kvq_buf *out, kvq_bytes prefix, int64_t index, const uint8_t *rand20)
{
    kvq_tuple_elem e[4] = { kvq_tuple_str("hc"), kvq_tuple_str("pop"), kvq_tuple_int(index),
                            kvq_tuple_bytes(rand20, KVQ__RAND_LEN) };
    return put_key(out, prefix, 1, e, 4);
}

int kvq__qk_hc_slot(kvq_buf *out, kvq_bytes prefix, const char *kind, const uint8_t *rand20)
{
    kvq_tuple_elem e[3] = { kvq_tuple_str("hc"), kvq_tuple_str(kind),
                            kvq_tuple_bytes(rand20, KVQ__RAND_LEN) };
    return put_key(out, prefix, 1, e, 3);
}

int kvq__qk_parse_fifo(const uint8_t *rest, size_t len, int64_t *index)
{
    static const kvq_tuple_type types[] = { KVQ_TUPLE_INT, KVQ_TUPLE_BYTES };
    kvq_tuple *t;
    int rc = unpack_typed(&t, rest, len, "FIFO item (index, random bytes)", 2, types);
    if (rc != 0)
        return rc;
    *index = kvq_tuple_get_elem(t, 0)->v.i;
    kvq_tuple_destroy(t);
    return 0;
}

int kvq__qk_parse_prio(const uint8_t *rest, size_t len, int64_t *priority, int64_t *count)
{
    static const kvq_tuple_type types[] = { KVQ_TUPLE_INT, KVQ_TUPLE_INT, KVQ_TUPLE_BYTES };
    kvq_tuple *t;
    int rc = unpack_typed(&t, rest, len, "priority item (priority, count, random bytes)", 3, types);
    if (rc != 0)
        return rc;
    *priority = kvq_tuple_get_elem(t, 0)->v.i;
    *count = kvq_tuple_get_elem(t, 1)->v.i;
    kvq_tuple_destroy(t);
    return 0;
}

int kvq__qk_parse_waiter(const uint8_t *rest, size_t len, int64_t *index, uint8_t *rand20)
{
    static const kvq_tuple_type types[] = { KVQ_TUPLE_STRING, KVQ_TUPLE_STRING, KVQ_TUPLE_INT,
                                            KVQ_TUPLE_BYTES };
    kvq_tuple *t;
    int rc = unpack_typed(&t, rest, len, "high-contention waiter", 4, types);
    if (rc != 0)
        return rc;
    const kvq_tuple_elem *r = kvq_tuple_get_elem(t, 3);
    if (r->v.bytes.len != KVQ__RAND_LEN) {
        kvq_tuple_destroy(t);
        return kvq__error(KVQ_ETUPLE, "a high-contention waiter's id is not %d bytes",
                          KVQ__RAND_LEN);
    }
    *index = kvq_tuple_get_elem(t, 2)->v.i;
    memcpy(rand20, r->v.bytes.data, KVQ__RAND_LEN);
    kvq_tuple_destroy(t);
    return 0;
}

/* ---- key helpers ------------------------------------------------------------------------- */

int kvq__key_after(kvq_buf *out, const uint8_t *key, size_t len)
{
    static const uint8_t zero = 0;
    out->len = 0;
    int rc = kvq_buf_append(out, key, len);
    if (rc == 0)
        rc = kvq_buf_append(out, &zero, 1);
    return rc;
}

int kvq__conflict_key(kvq_txn *txn, const uint8_t *key, size_t len)
{
    uint8_t after[KVQ_MAX_KEY_SIZE + 1];
    if (len > KVQ_MAX_KEY_SIZE)
        return kvq__error(KVQ_EKEY_TOO_LARGE, "conflict key of %zu bytes", len);
    memcpy(after, key, len);
    after[len] = 0;
    return kvq_txn_add_conflict_range(txn, key, len, after, len + 1, KVQ_CONFLICT_READ);
}
