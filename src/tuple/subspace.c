/* Subspaces: a key prefix made of raw bytes and a packed tuple. The prefix is copied, so a
 * subspace depends on nothing its creator passed. */
#include <string.h>

#include "kvq/tuple.h"
#include "tuple/tuple_internal.h"
#include "util/util.h"

/* FoundationDB's key size limit: a longer prefix could not start any key. */
#define MAX_PREFIX 10000

struct kvq_subspace {
    kvq_buf prefix;
};

int kvq_subspace_new(kvq_subspace **out,
                     const uint8_t *raw_prefix,
                     size_t raw_len,
                     const kvq_tuple_elem *elems,
                     size_t count)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_subspace_new: out is NULL");
    *out = NULL;
    if (raw_prefix == NULL && raw_len > 0)
        return kvq__error(KVQ_EINVAL, "kvq_subspace_new: raw_prefix is NULL and raw_len is %zu",
                          raw_len);
    kvq_subspace *s = kvq__calloc(1, sizeof(*s));
    if (s == NULL)
        return kvq__error(KVQ_ENOMEM, "kvq_subspace_new: out of memory");
    int rc = kvq_buf_append(&s->prefix, raw_prefix, raw_len);
    if (rc == 0)
        rc = kvq_tuple_pack_buf(&s->prefix, elems, count);
    if (rc == 0 && s->prefix.len > MAX_PREFIX)
        rc = kvq__error(KVQ_EINVAL, "kvq_subspace_new: prefix of %zu bytes is over %d",
                        s->prefix.len, MAX_PREFIX);
    if (rc != 0) {
        kvq_subspace_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}

void kvq_subspace_destroy(kvq_subspace *s)
{
    if (s == NULL)
        return;
    kvq_buf_dispose(&s->prefix);
    kvq__free(s);
}

kvq_bytes kvq_subspace_get_prefix(const kvq_subspace *s)
{
    kvq_bytes b = { NULL, 0 };
    if (s != NULL) {
        b.data = s->prefix.data;
        b.len = s->prefix.len;
    }
    return b;
}

static int append_prefix(kvq_buf *out, const kvq_subspace *s, const char *fn)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "%s: out is NULL", fn);
    if (s == NULL)
        return kvq__error(KVQ_EINVAL, "%s: the subspace is NULL", fn);
    return kvq_buf_append(out, s->prefix.data, s->prefix.len);
}

int kvq_subspace_pack(kvq_buf *out,
                      const kvq_subspace *s,
                      const kvq_tuple_elem *elems,
                      size_t count)
{
    size_t before = out != NULL ? out->len : 0;
    int rc = append_prefix(out, s, "kvq_subspace_pack");
    if (rc == 0)
        rc = kvq_tuple_pack_buf(out, elems, count);
    if (rc != 0 && out != NULL)
        out->len = before;
    return rc;
}

int kvq_subspace_pack_vs(kvq_buf *out,
                         const kvq_subspace *s,
                         const kvq_tuple_elem *elems,
                         size_t count)
{
    size_t before = out != NULL ? out->len : 0;
    int rc = append_prefix(out, s, "kvq_subspace_pack_vs");
    if (rc == 0)
        rc = kvq_tuple_pack_vs(out, elems, count);
    if (rc != 0 && out != NULL)
        out->len = before;
    return rc;
}

bool kvq_subspace_contains(const kvq_subspace *s, const uint8_t *key, size_t len)
{
    if (s == NULL) {
        (void)kvq__error(KVQ_EINVAL, "kvq_subspace_contains: the subspace is NULL");
        return false;
    }
    if (key == NULL && len > 0) {
        (void)kvq__error(KVQ_EINVAL, "kvq_subspace_contains: key is NULL and len is %zu", len);
        return false;
    }
    return len >= s->prefix.len &&
           (s->prefix.len == 0 || memcmp(key, s->prefix.data, s->prefix.len) == 0);
}

int kvq_subspace_unpack(kvq_tuple **out, const kvq_subspace *s, const uint8_t *key, size_t len)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_subspace_unpack: out is NULL");
    *out = NULL;
    if (s == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_subspace_unpack: the subspace is NULL");
    if (key == NULL && len > 0)
        return kvq__error(KVQ_EINVAL, "kvq_subspace_unpack: key is NULL and len is %zu", len);
    if (!kvq_subspace_contains(s, key, len))
        return kvq__error(KVQ_EINVAL,
                          "kvq_subspace_unpack: the key (%zu bytes) does not start "
                          "with the subspace's %zu-byte prefix",
                          len, s->prefix.len);
    return kvq__tuple_unpack_from(out, key, len, s->prefix.len);
}

int kvq_subspace_range(
    kvq_buf *begin, kvq_buf *end, const kvq_subspace *s, const kvq_tuple_elem *elems, size_t count)
{
    if (begin == NULL || end == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_subspace_range: %s is NULL", begin ? "end" : "begin");
    if (s == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_subspace_range: the subspace is NULL");
    kvq_buf key = KVQ_BUF_INIT;
    int rc = kvq_subspace_pack(&key, s, elems, count);
    if (rc == 0)
        rc = kvq_tuple_range(begin, end, key.data, key.len);
    kvq_buf_dispose(&key);
    return rc;
}
