/* libkvq_fdb_c.so: key selectors and range reads (pages sized as libfdb_c sizes them), and what
 * is measured over ranges: estimated sizes, split points, addresses. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "fdbc/fdbc_internal.h"

/* The key a selector (key, or_equal, offset) names, as FoundationDB resolves it: the last key
 * below `key` (at or below it, with or_equal) is the base, and the selector names the key
 * `offset` places after the base (offset 1: the next key; 0: the base itself; -1: the one
 * before). Before the first key it resolves to the empty key, past the last one to \xff (to
 * \xff\xff when the transaction may read the system keys, which it then searches too). For
 * a range boundary with offset 1 the search key itself serves (the same rows), so no read is
 * needed unless `exact` asks for the key itself (get_key). The reads made are the
 * transaction's (snapshot or not), so they take their read-conflict ranges. */
static int resolve_selector(FDBTransaction *tr, const uint8_t *key, int len, fdb_bool_t or_equal,
                            int offset, int snapshot, int exact, uint8_t **out, size_t *out_len)
{
    or_equal = or_equal != 0; /* an fdb_bool_t: any non-zero value is true */
    /* start: the first key after the base (key, or key + 00 with or_equal). */
    size_t slen = (size_t)len + (or_equal ? 1 : 0);
    uint8_t *start = malloc(slen + 1);
    if (start == NULL)
        kvq__fdbc_misuse("out of memory");
    if (len > 0)
        memcpy(start, key, (size_t)len);
    start[len] = 0;
    if (offset == 1 && !exact) {
        *out = start;
        *out_len = slen;
        return 0;
    }
    static const uint8_t end_key[2] = { 0xff, 0xff };
    size_t end_len = tr->system_keys ? 2 : 1;
    const kvq_kv *kvs = NULL;
    size_t got = 0;
    unsigned flags = snapshot ? KVQ_SNAPSHOT : 0;
    int rc;
    size_t want;
    if (offset >= 1) {
        want = (size_t)offset;
        rc = kvq__fdbc_key_less(start, slen, end_key, end_len)
                 ? kvq_txn_get_range(&kvs, &got, NULL, tr->kt, start, slen, end_key, end_len,
                                     (int)(want > INT32_MAX ? INT32_MAX : want), flags)
                 : 0;
    } else {
        want = (size_t)(1 - (int64_t)offset);
        rc = slen > 0 ? kvq_txn_get_range(&kvs, &got, NULL, tr->kt, (const uint8_t *)"", 0, start,
                                          slen, (int)(want > INT32_MAX ? INT32_MAX : want),
                                          flags | KVQ_REVERSE)
                      : 0;
    }
    free(start);
    if (rc != 0)
        return rc;
    const uint8_t *k = offset >= 1 ? end_key : (const uint8_t *)"";
    size_t klen = offset >= 1 ? end_len : 0;
    if (got >= want) {
        k = kvs[want - 1].key.data;
        klen = kvs[want - 1].key.len;
    }
    *out = malloc(klen + 1);
    if (*out == NULL)
        kvq__fdbc_misuse("out of memory");
    if (klen > 0)
        memcpy(*out, k, klen);
    (*out)[klen] = 0;
    *out_len = klen;
    return 0;
}

/* The limits of one get_range answer (a page; `more` tells the caller to ask again), as
 * FoundationDB's client sizes its requests: a byte budget per streaming mode (none for EXACT,
 * 256 bytes for SMALL, 1,000 for MEDIUM, 4,096 for LARGE, 80,000 for SERIAL and WANT_ALL;
 * ITERATOR from 4,096 growing by half with each iteration to 120,000), lowered to target_bytes
 * when that is smaller (or target_bytes alone with EXACT), and the row limit. A row costs its
 * key, its value and 8 bytes; the page ends with the row that fills the budget, so it holds at
 * least one. $KVQ_FDBC_PAGE_ROWS caps the rows too, except for EXACT with a row limit.
 * *budget is -1 when there is no byte limit. */
static void page_limits(const FDBTransaction *tr, int limit, int target_bytes,
                        FDBStreamingMode mode, int iteration, int *rows, long *budget)
{
    static const int progression[] = { 4096,  6144,  9216,  13824, 20736,
                                       31104, 46656, 69984, 80000, 120000 };
    long mode_bytes;
    switch (mode) {
    case FDB_STREAMING_MODE_EXACT:
        mode_bytes = -1;
        break;
    case FDB_STREAMING_MODE_SMALL:
        mode_bytes = 256;
        break;
    case FDB_STREAMING_MODE_MEDIUM:
        mode_bytes = 1000;
        break;
    case FDB_STREAMING_MODE_LARGE:
        mode_bytes = 4096;
        break;
    case FDB_STREAMING_MODE_ITERATOR: {
        int n = (int)(sizeof(progression) / sizeof(progression[0]));
        int it = iteration < 1 ? 1 : iteration > n ? n : iteration;
        mode_bytes = progression[it - 1];
        break;
    }
    default: /* WANT_ALL, SERIAL */
        mode_bytes = 80000;
        break;
    }
    long b = mode_bytes;
    if (target_bytes > 0 && (b < 0 || target_bytes < b))
        b = target_bytes;
    *budget = b;
    /* At most the rows the budget can hold (each costs at least 8 bytes), or the limit. */
    long r = b < 0 ? INT32_MAX : b / 8 + 1;
    if (limit > 0 && limit < r)
        r = limit;
    if (tr->page_rows > 0 && tr->page_rows < r && !(mode == FDB_STREAMING_MODE_EXACT && limit > 0))
        r = tr->page_rows;
    *rows = (int)r;
}

/* The rows of a page, gathered from the transaction's reads (whose results stay valid until it
 * is reset). */
typedef struct page {
    kvq_kv *v;
    size_t n, cap;
    int byte_limited; /* the byte budget ended the page */
} page;

/* Reads the page of [b, e) with snapshot reads, in chunks that grow: at most `rows` rows,
 * ending with the row that fills `budget` bytes. */
static int page_probe(FDBTransaction *tr, const uint8_t *b, size_t blen, const uint8_t *e,
                      size_t elen, int rows, long budget, int reverse, page *pg)
{
    long acc = 0;
    size_t chunk = (size_t)(budget / 128 + 1);
    chunk = chunk < 8 ? 8 : chunk > 256 ? 256 : chunk;
    uint8_t *after = NULL; /* forward: the key just after the last one read */
    int rc = 0;
    for (;;) {
        size_t want = (size_t)rows - pg->n;
        if (want > chunk)
            want = chunk;
        const kvq_kv *kvs = NULL;
        size_t got = 0;
        rc = kvq_txn_get_range(&kvs, &got, NULL, tr->kt, b, blen, e, elen, (int)want,
                               KVQ_SNAPSHOT | (reverse ? KVQ_REVERSE : 0));
        if (rc != 0)
            break;
        if (pg->n + got > pg->cap) {
            size_t cap = pg->cap == 0 ? 64 : pg->cap;
            while (cap < pg->n + got)
                cap *= 2;
            kvq_kv *v = realloc(pg->v, cap * sizeof(*v));
            if (v == NULL)
                kvq__fdbc_misuse("out of memory");
            pg->v = v;
            pg->cap = cap;
        }
        for (size_t i = 0; i < got; i++) {
            pg->v[pg->n++] = kvs[i];
            acc += 8 + (long)kvs[i].key.len + (long)kvs[i].value.len;
            if (acc >= budget) {
                pg->byte_limited = 1;
                free(after);
                return 0;
            }
        }
        if (got < want || pg->n >= (size_t)rows)
            break;
        /* On from the last key read. */
        const kvq_bytes *last = &kvs[got - 1].key;
        if (reverse) {
            e = last->data;
            elen = last->len;
        } else {
            uint8_t *k = realloc(after, last->len + 1);
            if (k == NULL)
                kvq__fdbc_misuse("out of memory");
            if (last->len > 0)
                memmove(k, last->data, last->len);
            k[last->len] = 0;
            after = k;
            b = after;
            blen = last->len + 1;
        }
        if (chunk < 4096)
            chunk *= 2;
    }
    free(after);
    return rc;
}

/* get_range's limits and streaming mode, checked as libfdb_c checks them: 0 (or -1) is no
 * limit, anything below -1 is range_limits_invalid (2012); EXACT needs a row or byte limit
 * (2210); ITERATOR counts its calls from 1; other modes are client_invalid_operation (2000). */
static fdb_error_t range_params(int limit, int target_bytes, FDBStreamingMode mode, int iteration)
{
    if ((int)mode < FDB_STREAMING_MODE_WANT_ALL || (int)mode > FDB_STREAMING_MODE_SERIAL ||
        (mode == FDB_STREAMING_MODE_ITERATOR && iteration <= 0)) {
        kvq__fdbc_complain("get_range: streaming mode %d with iteration %d", (int)mode, iteration);
        return FDB_ERR_CLIENT_INVALID_OPERATION;
    }
    if (mode == FDB_STREAMING_MODE_EXACT && limit <= 0 && target_bytes <= 0 &&
        limit >= -1 && target_bytes >= -1)
        return FDB_ERR_EXACT_MODE_WITHOUT_LIMITS;
    if (limit < -1 || target_bytes < -1)
        return FDB_ERR_RANGE_LIMITS_INVALID;
    return 0;
}

FDBFuture *kvq__fdbc_tr_get_range(FDBTransaction *tr,
                                  const uint8_t *begin_key_name,
                                  int begin_key_name_length,
                                  fdb_bool_t begin_or_equal,
                                  int begin_offset,
                                  const uint8_t *end_key_name,
                                  int end_key_name_length,
                                  fdb_bool_t end_or_equal,
                                  int end_offset,
                                  int limit,
                                  int target_bytes,
                                  FDBStreamingMode mode,
                                  int iteration,
                                  fdb_bool_t snapshot,
                                  fdb_bool_t reverse)
{
    if (begin_key_name == NULL || end_key_name == NULL || begin_key_name_length < 0 ||
        end_key_name_length < 0)
        kvq__fdbc_misuse("fdb_transaction_get_range with a NULL key or a negative length");
    fdb_error_t perr = range_params(limit, target_bytes, mode, iteration);
    if (perr != 0)
        return kvq__fdbc_fut_error(FUT_KV_ARRAY, perr);
    fdb_error_t gate = kvq__fdbc_tr_error(tr, 1);
    if (gate != 0)
        return kvq__fdbc_fut_error(FUT_KV_ARRAY, gate);
    if (limit == -1)
        limit = 0; /* -1 is "no limit" too */
    if (kvq__fdbc_is_special(begin_key_name, (size_t)begin_key_name_length)) {
        /* The special space is read as plain [begin, end): its keys are few and fixed. */
        FDBFuture *f = kvq__fdbc_fut_new(FUT_KV_ARRAY);
        kvq__fdbc_fut_settle(f, kvq__fdbc_special_range(tr, begin_key_name,
                                                        (size_t)begin_key_name_length, end_key_name,
                                                        (size_t)end_key_name_length, f));
        return f;
    }
    uint8_t *b = NULL, *e = NULL;
    size_t blen = 0, elen = 0;
    int rc = resolve_selector(tr, begin_key_name, begin_key_name_length, begin_or_equal,
                              begin_offset, snapshot, 0, &b, &blen);
    if (rc == 0)
        rc = resolve_selector(tr, end_key_name, end_key_name_length, end_or_equal, end_offset,
                              snapshot, 0, &e, &elen);
    kvq__fdbc_read_delay(tr);
    FDBFuture *f = kvq__fdbc_fut_new(FUT_KV_ARRAY);
    int rows = 0;
    long budget = -1;
    page_limits(tr, limit, target_bytes, mode, iteration, &rows, &budget);
    const kvq_kv *kvs = NULL;
    size_t n = 0;
    int more = 0;
    page pg = { 0 };
    unsigned flags = (snapshot ? KVQ_SNAPSHOT : 0) | (reverse ? KVQ_REVERSE : 0);
    /* Selectors that meet or cross resolve to an empty range, not an error. */
    if (rc == 0 && kvq__fdbc_key_less(b, blen, e, elen)) {
        if (budget < 0) {
            /* Rows only: one read. */
            rc = kvq_txn_get_range(&kvs, &n, NULL, tr->kt, b, blen, e, elen, rows, flags);
            more = n == (size_t)rows;
        } else {
            /* The page is found with snapshot reads, which see what this read sees (snapshot
             * reads see the transaction's writes for the while) and add no conflict. */
            int toggled = !snapshot && tr->snapshot_no_ryw &&
                          kvq_txn_set_option(tr->kt, KVQ_TXN_SNAPSHOT_RYW_ENABLE, 0) == 0;
            rc = page_probe(tr, b, blen, e, elen, rows, budget, reverse != 0, &pg);
            if (toggled && kvq_txn_set_option(tr->kt, KVQ_TXN_SNAPSHOT_RYW_DISABLE, 0) != 0)
                kvq__fdbc_misuse("cannot restore snapshot_ryw_disable");
            if (rc == 0 && snapshot) {
                kvs = pg.v;
                n = pg.n;
                more = pg.byte_limited || n == (size_t)rows;
            } else if (rc == 0) {
                /* Then the read itself, limited to the rows of the page when the byte budget
                 * ended it, so that its read-conflict range ends just after the last key it
                 * returns (before the first, in reverse), as FoundationDB's does. */
                int lim = pg.byte_limited ? (int)pg.n : rows;
                rc = kvq_txn_get_range(&kvs, &n, NULL, tr->kt, b, blen, e, elen, lim, flags);
                more = pg.byte_limited || n == (size_t)lim;
            }
        }
    }
    free(b);
    free(e);
    if (rc == 0 && n > 0) {
        size_t total = 0;
        for (size_t i = 0; i < n; i++)
            total += kvs[i].key.len + kvs[i].value.len;
        f->kvs = malloc(n * sizeof(*f->kvs));
        f->bytes = malloc(total > 0 ? total : 1);
        if (f->kvs == NULL || f->bytes == NULL)
            kvq__fdbc_misuse("out of memory");
        uint8_t *p = f->bytes;
        for (size_t i = 0; i < n; i++) {
            memcpy(p, kvs[i].key.data, kvs[i].key.len);
            f->kvs[i].key = p;
            f->kvs[i].key_length = (int)kvs[i].key.len;
            p += kvs[i].key.len;
            if (kvs[i].value.len > 0)
                memcpy(p, kvs[i].value.data, kvs[i].value.len);
            f->kvs[i].value = p;
            f->kvs[i].value_length = (int)kvs[i].value.len;
            p += kvs[i].value.len;
        }
        f->count = (int)n;
        /* As a storage server does: `more` whenever a limit was reached, even if the range
         * happens to end there. */
        f->more = more;
    }
    free(pg.v);
    kvq__fdbc_fut_settle(f, rc);
    return f;
}

FDBFuture *kvq__fdbc_tr_get_key(FDBTransaction *tr,
                                const uint8_t *key_name,
                                int key_name_length,
                                fdb_bool_t or_equal,
                                int offset,
                                fdb_bool_t snapshot)
{
    if (key_name == NULL || key_name_length < 0)
        kvq__fdbc_misuse("fdb_transaction_get_key with a NULL key or a negative length");
    fdb_error_t gate = kvq__fdbc_tr_error(tr, 1);
    if (gate != 0)
        return kvq__fdbc_fut_error(FUT_KEY, gate);
    kvq__fdbc_read_delay(tr);
    FDBFuture *f = kvq__fdbc_fut_new(FUT_KEY);
    uint8_t *k = NULL;
    size_t klen = 0;
    int rc = 0;
    if (key_name_length > 1 && key_name[0] == 0xff) {
        /* A selector in the system keys needs the option that lets them be read (2004 without
         * it): a snapshot read of its key, which adds no conflict, asks the transaction. */
        kvq_bytes v;
        int present;
        rc = kvq_txn_get(&v, &present, tr->kt, key_name, (size_t)key_name_length, KVQ_SNAPSHOT);
    }
    if (rc == 0)
        rc = resolve_selector(tr, key_name, key_name_length, or_equal, offset, snapshot, 1, &k,
                              &klen);
    if (rc == 0) {
        f->bytes = k;
        f->len = (int)klen;
    }
    kvq__fdbc_fut_settle(f, rc);
    return f;
}

/* Walks the stored rows of [b, e) in a transaction of its own (the committed data, as a
 * storage server's statistics describe it, not this transaction's writes), calling `row` with
 * each row's size. The reads are snapshots: they add no conflicts. */
static int walk_range(FDBTransaction *tr, const uint8_t *b, int bl, const uint8_t *e, int el,
                      int (*row)(void *, const kvq_kv *), void *arg)
{
    if (b == NULL || e == NULL || bl < 0 || el < 0)
        kvq__fdbc_misuse("a range with a NULL key or a negative length");
    kvq_txn *t;
    int rc = kvq_txn_create(&t, tr->db->kdb);
    if (rc != 0)
        return rc;
    uint8_t *from = kvq__fdbc_copy_bytes(b, (size_t)bl);
    size_t from_len = (size_t)bl;
    for (;;) {
        const kvq_kv *kvs;
        size_t n = 0;
        bool more = false;
        rc = kvq_txn_get_range(&kvs, &n, &more, t, from, from_len, e, (size_t)el, 1000,
                               KVQ_SNAPSHOT);
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = row(arg, &kvs[i]);
        if (rc != 0 || n < 1000)
            break;
        /* On from the key after the last one. */
        free(from);
        from_len = kvs[n - 1].key.len + 1;
        from = malloc(from_len);
        if (from == NULL)
            kvq__fdbc_misuse("out of memory");
        memcpy(from, kvs[n - 1].key.data, from_len - 1);
        from[from_len - 1] = 0;
        /* A long walk must not meet the 5-second limit of one read version. */
        kvq_txn_reset(t);
    }
    free(from);
    kvq_txn_destroy(t);
    return rc;
}

static int add_row_size(void *arg, const kvq_kv *kv)
{
    *(int64_t *)arg += (int64_t)(kv->key.len + kv->value.len);
    return 0;
}

/* Exact, not an estimate: the bytes of the keys and values stored in the range. */
FDBFuture *kvq__fdbc_tr_get_estimated_range_size_bytes(
    FDBTransaction *tr, const uint8_t *b, int bl, const uint8_t *e, int el)
{
    fdb_error_t gate = kvq__fdbc_tr_error(tr, 1);
    if (gate != 0)
        return kvq__fdbc_fut_error(FUT_INT64, gate);
    FDBFuture *f = kvq__fdbc_fut_new(FUT_INT64);
    kvq__fdbc_fut_settle(f, walk_range(tr, b, bl, e, el, add_row_size, &f->i64));
    return f;
}

/* The keys of a key array being built: their bytes are copied into one buffer at the end. */
typedef struct split_walk {
    int64_t chunk, acc;
    uint8_t **keys;
    size_t *lens;
    size_t n, cap;
} split_walk;

static void split_add(split_walk *w, const uint8_t *k, size_t len)
{
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 16;
        w->keys = realloc(w->keys, w->cap * sizeof(*w->keys));
        w->lens = realloc(w->lens, w->cap * sizeof(*w->lens));
        if (w->keys == NULL || w->lens == NULL)
            kvq__fdbc_misuse("out of memory");
    }
    w->keys[w->n] = kvq__fdbc_copy_bytes(k, len);
    w->lens[w->n++] = len;
}

static int split_row(void *arg, const kvq_kv *kv)
{
    split_walk *w = arg;
    /* A chunk ends before the row that would take it past chunk_size (a chunk holds at least
     * one row). */
    int64_t sz = (int64_t)(kv->key.len + kv->value.len);
    if (w->acc > 0 && w->acc + sz > w->chunk) {
        split_add(w, kv->key.data, kv->key.len);
        w->acc = 0;
    }
    w->acc += sz;
    return 0;
}

/* Keys that cut [b, e) into chunks of about chunk_size bytes, b first and e last. */
FDBFuture *kvq__fdbc_tr_get_range_split_points(
    FDBTransaction *tr, const uint8_t *b, int bl, const uint8_t *e, int el, int64_t chunk_size)
{
    fdb_error_t gate = kvq__fdbc_tr_error(tr, 1);
    if (gate != 0)
        return kvq__fdbc_fut_error(FUT_KEY_ARRAY, gate);
    if (chunk_size <= 0) {
        kvq__fdbc_complain(
            "fdb_transaction_get_range_split_points: chunk_size %lld is not positive",
            (long long)chunk_size);
        return kvq__fdbc_fut_error(FUT_KEY_ARRAY, FDB_ERR_INVALID_OPTION_VALUE);
    }
    split_walk w = { .chunk = chunk_size };
    split_add(&w, b, (size_t)(bl < 0 ? 0 : bl));
    int rc = walk_range(tr, b, bl, e, el, split_row, &w);
    split_add(&w, e, (size_t)(el < 0 ? 0 : el));
    FDBFuture *f = kvq__fdbc_fut_new(FUT_KEY_ARRAY);
    if (rc == 0) {
        size_t total = 0;
        for (size_t i = 0; i < w.n; i++)
            total += w.lens[i];
        f->keys = malloc(w.n * sizeof(*f->keys));
        f->bytes = malloc(total > 0 ? total : 1);
        if (f->keys == NULL || f->bytes == NULL)
            kvq__fdbc_misuse("out of memory");
        uint8_t *p = f->bytes;
        for (size_t i = 0; i < w.n; i++) {
            if (w.lens[i] > 0)
                memcpy(p, w.keys[i], w.lens[i]);
            f->keys[i].key = p;
            f->keys[i].key_length = (int)w.lens[i];
            p += w.lens[i];
        }
        f->count = (int)w.n;
    }
    for (size_t i = 0; i < w.n; i++)
        free(w.keys[i]);
    free(w.keys);
    free(w.lens);
    kvq__fdbc_fut_settle(f, rc);
    return f;
}

/* Every key lives in this process's local directory: one local address, in FoundationDB's
 * ip:port form (nothing listens on it; it names the one machine). */
FDBFuture *
kvq__fdbc_tr_get_addresses_for_key(FDBTransaction *tr, const uint8_t *key_name, int key_name_length)
{
    if (key_name == NULL || key_name_length < 0)
        kvq__fdbc_misuse(
            "fdb_transaction_get_addresses_for_key with a NULL key or a negative length");
    fdb_error_t gate = kvq__fdbc_tr_error(tr, 1);
    if (gate != 0)
        return kvq__fdbc_fut_error(FUT_STRING_ARRAY, gate);
    static const char local[] = "127.0.0.1:4500";
    FDBFuture *f = kvq__fdbc_fut_new(FUT_STRING_ARRAY);
    f->strs = malloc(sizeof(*f->strs));
    if (f->strs == NULL)
        kvq__fdbc_misuse("out of memory");
    f->bytes = kvq__fdbc_copy_bytes((const uint8_t *)local, sizeof(local));
    f->strs[0] = (const char *)f->bytes;
    f->count = 1;
    kvq__fdbc_fut_settle(f, 0);
    return f;
}

FDBFuture *fdb_transaction_get_mapped_range(FDBTransaction *tr, const uint8_t *b, int bl,
                                            fdb_bool_t boe, int bo, const uint8_t *e, int el,
                                            fdb_bool_t eoe, int eo, const uint8_t *mapper,
                                            int mapper_length, int limit, int target_bytes,
                                            FDBStreamingMode mode, int iteration,
                                            fdb_bool_t snapshot, fdb_bool_t reverse)
{
    (void)tr, (void)b, (void)bl, (void)boe, (void)bo, (void)e, (void)el, (void)eoe, (void)eo;
    (void)mapper, (void)mapper_length, (void)limit, (void)target_bytes, (void)mode;
    (void)iteration, (void)snapshot, (void)reverse;
    return kvq__fdbc_unsupported("fdb_transaction_get_mapped_range");
}
