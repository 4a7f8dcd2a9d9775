/* Fuzz target: versionstamped keys, from the tuple layer to the stored key and back.
 *
 * The input (after its first byte, which picks choices) is used twice:
 *
 * 1. As a raw versionstamped key: key bytes, then the 4-byte little-endian offset of the 10
 *    stamp bytes. kvq_txn_set_versionstamped_key (and _value, with the same bytes as the value)
 *    must accept it exactly when the offset leaves 10 bytes inside the key and the key is legal,
 *    and refuse it otherwise with client_invalid_operation (2000), key_outside_legal_range
 *    (2004) or key_too_large (2102); nothing may read or write out of bounds. An accepted key is
 *    committed on the embedded engine: the stored key is the input's key with the commit's
 *    versionstamp at the offset, and the stored value likewise.
 *
 * 2. As a tuple: when it decodes, an incomplete versionstamp (user version from the first byte)
 *    is put into it (at a position the first byte picks) unless it holds one already, and
 *    kvq_tuple_pack_vs packs it. The packed key goes through the same commit, and the key the
 *    database holds must decode to the same elements with the stamp completed: the commit's 10
 *    bytes, the same user version. A raw input that is exactly such a canonical packing (case 1)
 *    is checked the same way.
 *
 * The database is a relaxed embedded one in a temporary directory (under /dev/shm when there is
 * one), emptied by every commit. */
#include <unistd.h>

#include "fuzz_common.h"
#include "kvq/db.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kvq_db *db;
static char dir[64];

static void cleanup(void)
{
    kvq_db_close(db);
    db = NULL;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

static void open_db(void)
{
    if (db != NULL)
        return;
    snprintf(dir, sizeof(dir), "%s/kvq-fuzz-vs-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    FUZZ_CHECK(mkdtemp(dir) != NULL);
    char path[96];
    snprintf(path, sizeof(path), "%s/db", dir);
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.flags |= KVQ_DB_RELAXED;
    FUZZ_CHECK(kvq_db_open(&db, path, &o) == 0);
    atexit(cleanup);
}

/* Are the decoded elements a[] the wanted elements b[] with their incomplete stamps completed by
 * `stamp` (nested tuples included)? Counts the completed stamps. */
static void match(const kvq_tuple_elem *a,
                  const kvq_tuple_elem *b,
                  size_t n,
                  const uint8_t stamp[10],
                  size_t *completed)
{
    for (size_t i = 0; i < n; i++) {
        if (b[i].type == KVQ_TUPLE_VERSIONSTAMP && !b[i].v.vs.complete) {
            FUZZ_CHECK(a[i].type == KVQ_TUPLE_VERSIONSTAMP && a[i].v.vs.complete);
            FUZZ_CHECK(memcmp(a[i].v.vs.tr, stamp, 10) == 0);
            FUZZ_CHECK(a[i].v.vs.user == b[i].v.vs.user);
            (*completed)++;
        } else if (b[i].type == KVQ_TUPLE_NESTED) {
            FUZZ_CHECK(a[i].type == KVQ_TUPLE_NESTED);
            FUZZ_CHECK(a[i].v.nested.count == b[i].v.nested.count);
            match(a[i].v.nested.elems, b[i].v.nested.elems, b[i].v.nested.count, stamp, completed);
        } else {
            FUZZ_CHECK(kvq_tuple_compare(&a[i], 1, &b[i], 1) == 0);
        }
    }
}

/* The stored key decodes to `want` with its one incomplete stamp completed by `stamp`. */
static void check_completed(const uint8_t *stored,
                            size_t stored_len,
                            const kvq_tuple_elem *want,
                            size_t n,
                            const uint8_t stamp[10])
{
    kvq_tuple *t = NULL;
    FUZZ_CHECK(kvq_tuple_unpack(&t, stored, stored_len) == 0);
    FUZZ_CHECK(kvq_tuple_get_count(t) == n);
    const kvq_tuple_elem *got = kvq_tuple_get_elem(t, 0);
    FUZZ_CHECK(fuzz_incomplete_stamps(got, n) == 0);
    size_t completed = 0;
    match(got, want, n, stamp, &completed);
    FUZZ_CHECK(completed == 1);
    kvq_tuple_destroy(t);
}

/* Sets `vkey` (key bytes + 4-byte offset) as a versionstamped key, and the same bytes as a
 * versionstamped value of key "v", in a transaction that first empties the database; commits;
 * checks what was stored. Returns 1 if it was accepted, with the commit's stamp in stamp[]. */
static int commit_stamped(const uint8_t *vkey, size_t n, uint8_t stamp[10])
{
    static const uint8_t value[3] = { 'v', 'a', 'l' };
    int off_ok = n >= 4 && kvq__le_get(vkey + n - 4, 4) + 10 <= n - 4;
    int legal = n <= KVQ_MAX_KEY_SIZE && (n == 0 || vkey[0] != 0xff);
    kvq_txn *t;
    FUZZ_CHECK(kvq_txn_create(&t, db) == 0);
    FUZZ_CHECK(kvq_txn_clear_range(t, (const uint8_t *)"", 0, (const uint8_t *)"\xff", 1) == 0);
    int rk = kvq_txn_set_versionstamped_key(t, n ? vkey : NULL, n, value, sizeof(value));
    if (off_ok && legal)
        FUZZ_CHECK(rk == 0);
    else
        FUZZ_CHECK(rk == KVQ_ECLIENT_INVALID_OPERATION || rk == KVQ_EKEY_OUTSIDE_LEGAL_RANGE ||
                   rk == KVQ_EKEY_TOO_LARGE || (n == 0 && rk == KVQ_EINVAL));
    int rv = kvq_txn_set_versionstamped_value(t, (const uint8_t *)"v", 1, n ? vkey : NULL, n);
    if (off_ok)
        FUZZ_CHECK(rv == 0);
    else
        FUZZ_CHECK(rv == KVQ_ECLIENT_INVALID_OPERATION || (n == 0 && rv == KVQ_EINVAL));
    FUZZ_CHECK(kvq_txn_commit(t) == 0);
    int wrote = rk == 0 || rv == 0;
    if (wrote)
        FUZZ_CHECK(kvq_txn_get_versionstamp(stamp, t) == 0);
    kvq_txn_destroy(t);
    if (!wrote)
        return 0;

    /* What the database holds: at most the stamped key and "v". */
    FUZZ_CHECK(kvq_txn_create(&t, db) == 0);
    const kvq_kv *kvs;
    size_t count = 0;
    FUZZ_CHECK(kvq_txn_get_range(&kvs, &count, NULL, t, (const uint8_t *)"", 0,
                                 (const uint8_t *)"\xff", 1, 0, 0) == 0);
    uint8_t *want = malloc(n + 1);
    FUZZ_CHECK(want != NULL);
    size_t found = 0;
    if (off_ok) {
        memcpy(want, vkey, n - 4);
        memcpy(want + kvq__le_get(vkey + n - 4, 4), stamp, 10);
    }
    /* The stamped key may be "v" itself, which the stamped value (set after it) overwrote. */
    int same = rk == 0 && rv == 0 && n - 4 == 1 && want[0] == 'v';
    for (size_t i = 0; i < count; i++) {
        const kvq_kv *kv = &kvs[i];
        if (rv == 0 && kv->key.len == 1 && kv->key.data[0] == 'v') {
            FUZZ_CHECK(kv->value.len == n - 4 && memcmp(kv->value.data, want, n - 4) == 0);
            found++;
        } else if (rk == 0 && kv->key.len == n - 4 && memcmp(kv->key.data, want, n - 4) == 0) {
            FUZZ_CHECK(kv->value.len == sizeof(value) &&
                       memcmp(kv->value.data, value, sizeof(value)) == 0);
            found++;
        }
    }
    FUZZ_CHECK(count == (size_t)(rk == 0) + (size_t)(rv == 0) - (size_t)same);
    FUZZ_CHECK(found == count);
    free(want);
    kvq_txn_destroy(t);
    return rk == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    open_db();
    uint8_t choice = data[0];
    const uint8_t *in = data + 1;
    size_t n = size - 1;
    uint8_t stamp[10];

    /* 1. The raw bytes as a versionstamped key. */
    int accepted = commit_stamped(in, n, stamp);
    if (accepted) {
        /* A canonical packing of a tuple with one incomplete stamp at that offset decodes,
         * once stored, to the tuple with the stamp completed. */
        kvq_tuple *t = NULL;
        if (kvq_tuple_unpack(&t, in, n - 4) == 0) {
            kvq_buf again = KVQ_BUF_INIT;
            const kvq_tuple_elem *e = kvq_tuple_get_elem(t, 0);
            size_t c = kvq_tuple_get_count(t);
            if (fuzz_incomplete_stamps(e, c) == 1 && kvq_tuple_pack_vs(&again, e, c) == 0 &&
                again.len == n && memcmp(again.data, in, n) == 0) {
                uint8_t stored[1100];
                memcpy(stored, in, n - 4);
                memcpy(stored + kvq__le_get(in + n - 4, 4), stamp, 10);
                check_completed(stored, n - 4, e, c, stamp);
            }
            kvq_buf_dispose(&again);
        }
        kvq_tuple_destroy(t);
    }

    /* 2. The bytes as a tuple, given one incomplete stamp, packed with pack_vs. */
    kvq_tuple *t = NULL;
    if (kvq_tuple_unpack(&t, in, n) != 0)
        return 0;
    size_t c = kvq_tuple_get_count(t);
    const kvq_tuple_elem *e = kvq_tuple_get_elem(t, 0);
    size_t stamps = fuzz_incomplete_stamps(e, c);
    kvq_tuple_elem *elems = malloc((c + 1) * sizeof(*elems));
    FUZZ_CHECK(elems != NULL);
    size_t m = 0;
    if (stamps == 0) {
        size_t at = choice % (c + 1);
        for (size_t i = 0; i < c; i++) {
            if (i == at)
                elems[m++] = kvq_tuple_vs_incomplete((uint16_t)(choice * 257u));
            elems[m++] = e[i];
        }
        if (at == c)
            elems[m++] = kvq_tuple_vs_incomplete((uint16_t)(choice * 257u));
    } else {
        memcpy(elems, e, c * sizeof(*elems));
        m = c;
    }
    kvq_buf packed = KVQ_BUF_INIT;
    int rc = kvq_tuple_pack_vs(&packed, elems, m);
    if (stamps > 1) {
        FUZZ_CHECK(rc == KVQ_EINVAL && packed.len == 0);
    } else {
        FUZZ_CHECK(rc == 0);
        FUZZ_CHECK(packed.len >= 4 + 11);
        uint32_t off = (uint32_t)kvq__le_get(packed.data + packed.len - 4, 4);
        FUZZ_CHECK(off >= 1 && packed.data[off - 1] == 0x33);
        if (packed.len <= 1100 && (packed.len == 4 || packed.data[0] != 0xff)) {
            FUZZ_CHECK(commit_stamped(packed.data, packed.len, stamp) == 1);
            uint8_t stored[1100];
            memcpy(stored, packed.data, packed.len - 4);
            memcpy(stored + off, stamp, 10);
            check_completed(stored, packed.len - 4, elems, m, stamp);
        }
    }
    kvq_buf_dispose(&packed);
    free(elems);
    kvq_tuple_destroy(t);
    return 0;
}
