/* libkvq_fdb_c.so: the special keys (from \xff\xff): the modules a kvq directory answers for,
 * and the writes it takes (the tenant map's clears). */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fdbc/fdbc_internal.h"

/* FoundationDB materialises these keys when they are read. Those with a local meaning answer:
 * the cluster file's path, the connection string, a status document, and the (always empty)
 * conflicting-keys module. Reads elsewhere in the special space fail with
 * special_keys_no_module_found (2113); writes with special_keys_write_disabled (2114). */
#define SPECIAL_CONFLICTING "\xff\xff/transaction/conflicting_keys/"

int kvq__fdbc_is_special(const uint8_t *k, size_t len)
{
    return len >= 2 && k[0] == 0xff && k[1] == 0xff;
}

static int has_prefix(const uint8_t *k, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && memcmp(k, prefix, n) == 0;
}

/* Appends s to the buffer as the inside of a JSON string. */
static void json_str(char *out, size_t cap, const char *s)
{
    size_t o = strlen(out);
    for (; *s != '\0' && o + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(out + o, cap - o, "\\%c", c);
        else if (c < 0x20)
            o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
        else
            out[o++] = (char)c;
    }
    out[o] = '\0';
}

/* The value of one special key, malloc'd into *val (present), or 2113 when no module has it. */
int kvq__fdbc_special_value(
    FDBTransaction *tr, const uint8_t *k, size_t len, int *present, uint8_t **val, size_t *vlen)
{
    static const char *const names[] = { "\xff\xff/cluster_file_path",
                                         "\xff\xff/connection_string", "\xff\xff/status/json" };
    *present = 0;
    *val = NULL;
    *vlen = 0;
    if (has_prefix(k, len, SPECIAL_CONFLICTING))
        return 0;
    int which = -1;
    for (int i = 0; i < 3; i++)
        if (len == strlen(names[i]) && memcmp(k, names[i], len) == 0)
            which = i;
    if (which < 0) {
        kvq__fdbc_complain("no special key module holds this key (kvq has cluster_file_path, "
                           "connection_string, status/json and transaction/conflicting_keys/)");
        return KVQ_ESPECIAL_KEYS_NO_MODULE_FOUND;
    }
    char doc[8192] = "";
    if (which == 0)
        snprintf(doc, sizeof(doc), "%s", tr->db->cluster_file);
    else if (which == 1)
        snprintf(doc, sizeof(doc), "%s", tr->db->conn);
    else {
        /* The client's view of a database that is always available: it is a local directory. */
        snprintf(doc, sizeof(doc), "{\"client\":{\"cluster_file\":{\"path\":\"");
        json_str(doc, sizeof(doc), tr->db->cluster_file);
        size_t o = strlen(doc);
        snprintf(doc + o, sizeof(doc) - o,
                 "\",\"up_to_date\":true},\"coordinators\":{\"quorum_reachable\":true,"
                 "\"coordinators\":[]},\"database_status\":{\"available\":true,"
                 "\"healthy\":true},\"messages\":[],\"timestamp\":%lld},"
                 "\"cluster\":{\"kvq\":{\"directory\":\"",
                 (long long)time(NULL));
        char dir[4096];
        if (kvq__fdbc_dir_of(tr->db->conn, dir, sizeof(dir)) == 0)
            json_str(doc, sizeof(doc), dir);
        o = strlen(doc);
        snprintf(doc + o, sizeof(doc) - o, "\"}}}");
    }
    *present = 1;
    *vlen = strlen(doc);
    *val = kvq__fdbc_copy_bytes((const uint8_t *)doc, *vlen);
    return 0;
}

/* A range read in the special space: the special keys within [b, e), which must lie in it. */
int kvq__fdbc_special_range(
    FDBTransaction *tr, const uint8_t *b, size_t bl, const uint8_t *e, size_t el, FDBFuture *f)
{
    static const char *const names[] = { "\xff\xff/cluster_file_path",
                                         "\xff\xff/connection_string", "\xff\xff/status/json" };
    if (!kvq__fdbc_is_special(b, bl) || !kvq__fdbc_is_special(e, el))
        return KVQ_EKEY_OUTSIDE_LEGAL_RANGE;
    FDBKeyValue kv[3];
    uint8_t *vals[3];
    int n = 0;
    for (int i = 0; i < 3; i++) {
        const uint8_t *k = (const uint8_t *)names[i];
        size_t kl = strlen(names[i]);
        if (kvq__fdbc_key_less(k, kl, b, bl) || !kvq__fdbc_key_less(k, kl, e, el))
            continue;
        int present;
        size_t vl;
        int rc = kvq__fdbc_special_value(tr, k, kl, &present, &vals[n], &vl);
        if (rc != 0)
            return rc;
        kv[n] = (FDBKeyValue){ k, (int)kl, vals[n], (int)vl };
        n++;
    }
    if (n == 0 && !(has_prefix(b, bl, SPECIAL_CONFLICTING) &&
                    !kvq__fdbc_key_less((const uint8_t *)SPECIAL_CONFLICTING "\xff",
                                        strlen(SPECIAL_CONFLICTING) + 1, e, el))) {
        kvq__fdbc_complain("no special key module holds this range");
        return KVQ_ESPECIAL_KEYS_NO_MODULE_FOUND;
    }
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += (size_t)kv[i].key_length + (size_t)kv[i].value_length;
    f->kvs = malloc((size_t)(n > 0 ? n : 1) * sizeof(*f->kvs));
    f->bytes = malloc(total > 0 ? total : 1);
    if (f->kvs == NULL || f->bytes == NULL)
        kvq__fdbc_misuse("out of memory");
    uint8_t *p = f->bytes;
    for (int i = 0; i < n; i++) {
        memcpy(p, kv[i].key, (size_t)kv[i].key_length);
        f->kvs[i].key = p;
        f->kvs[i].key_length = kv[i].key_length;
        p += kv[i].key_length;
        memcpy(p, kv[i].value, (size_t)kv[i].value_length);
        f->kvs[i].value = p;
        f->kvs[i].value_length = kv[i].value_length;
        p += kv[i].value_length;
        free(vals[i]);
    }
    f->count = n;
    return 0;
}

/* The tenant map's write module: under 7.3's name and 7.1's. */
static const char *const tenant_maps[][2] = {
    { "\xff\xff/management/tenant/map/", "\xff\xff/management/tenant/map0" },
    { "\xff\xff/management/tenant_map/", "\xff\xff/management/tenant_map0" },
};

/* Whether [b, e) (a clear) lies in the tenant map. */
static int in_tenant_map(const uint8_t *b, size_t bl, const uint8_t *e, size_t el)
{
    for (size_t i = 0; i < sizeof(tenant_maps) / sizeof(tenant_maps[0]); i++) {
        const uint8_t *lo = (const uint8_t *)tenant_maps[i][0];
        const uint8_t *hi = (const uint8_t *)tenant_maps[i][1];
        size_t lol = strlen(tenant_maps[i][0]), hil = strlen(tenant_maps[i][1]);
        if (!kvq__fdbc_key_less(b, bl, lo, lol) && !kvq__fdbc_key_less(hi, hil, e, el))
            return 1;
    }
    return 0;
}

/* A write to the special keys: 1 if [b, e) (a key k, a range, or the key of a set with e NULL)
 * is there, the write then handled here. Without special_key_space_enable_writes (714) every
 * such write fails with special_keys_write_disabled (2114). With it, a database without tenants
 * can honour one write module: the tenant map, where a clear has nothing to delete (FoundationDB's
 * bindingtester clears it before each test) and a set would create a tenant (tenants_disabled,
 * 2136). kvq has no other write module (special_keys_no_write_module_found, 2115). Errors are
 * deferred, as every write error is. */
int kvq__fdbc_special_write(
    FDBTransaction *tr, int clear, const uint8_t *b, int bl, const uint8_t *e, int el)
{
    if (!kvq__fdbc_is_special(b, (size_t)bl))
        return 0;
    if (e == NULL) {
        e = b;
        el = bl;
    }
    int err = 0;
    if (!tr->special_writes) {
        kvq__fdbc_complain("writes to special keys are disabled (special_key_space_enable_writes)");
        err = KVQ_ESPECIAL_KEYS_WRITE_DISABLED;
    } else if (in_tenant_map(b, (size_t)bl, e, (size_t)el) && clear) {
        err = 0; /* no tenants: nothing to delete */
    } else if (in_tenant_map(b, (size_t)bl, e, (size_t)el)) {
        kvq__fdbc_complain("a kvq directory has no tenants");
        err = KVQ_ETENANTS_DISABLED;
    } else {
        kvq__fdbc_complain(
            "no special key write module of a kvq directory holds this key or range");
        err = 2115; /* special_keys_no_write_module_found */
    }
    if (err != 0 && tr->deferred == 0)
        tr->deferred = err;
    return 1;
}
