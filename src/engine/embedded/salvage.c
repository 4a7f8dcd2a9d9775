/* Salvage: every row a damaged database still gives, read-only, never repairing (issue 32,
 * item 3).
 *
 * The SQLite storage (and the log store's table, the same format) checks each row's CRC32C:
 * a row that fails it is skipped and counted. A page SQLite itself cannot read stops a range
 * scan; the scan is then taken from the other end, backwards, down to the last key read
 * forwards, so that what lies on either side of the damage is read, and the stretch between is
 * counted as a gap. The rows read backwards are handed out in key order. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/engine.h"
#include "files.h"
#include "salvage.h"
#include "store.h"
#include "store_sqlite.h"

struct kvq__salvage {
    emb_store *table;  /* the SQLite storage's data.db, or the log store's table */
    char *table_path;  /* for the messages */
    int log_store;
};

void kvq__salvage_close(kvq__salvage *s)
{
    if (s == NULL)
        return;
    if (s->table != NULL)
        emb_sqlite_store.close(s->table);
    kvq__free(s->table_path);
    kvq__free(s);
}

int kvq__salvage_open(kvq__salvage **out, const char *url)
{
    if (out == NULL || url == NULL)
        return kvq__error(KVQ_EINVAL, "kvq__salvage_open: NULL argument");
    *out = NULL;
    if (strncmp(url, "fdb:", 4) == 0)
        return kvq__error(KVQ_EUNSUPPORTED, "salvage reads an embedded database, not a cluster");
    const char *dir = strncmp(url, "log:", 4) == 0 ? url + 4 : url;
    kvq__salvage *s = kvq__calloc(1, sizeof(*s));
    if (s == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    char *ls = emb_path_join(dir, "logstore");
    struct stat st;
    s->log_store = ls != NULL && stat(ls, &st) == 0 && S_ISDIR(st.st_mode);
    const char *tdir = s->log_store ? ls : dir;
    s->table_path = tdir != NULL ? emb_path_join(tdir, "data.db") : NULL;
    int rc = 0;
    if (ls == NULL || s->table_path == NULL)
        rc = kvq__error(KVQ_ENOMEM, "out of memory");
    if (rc == 0 && stat(s->table_path, &st) != 0)
        rc = emb_errno_error(errno, "salvage: cannot open", s->table_path);
    if (rc == 0) {
        kvq__db_opts opts;
        memset(&opts, 0, sizeof(opts));
        opts.flags = KVQ_DB_READ_ONLY;
        opts.file_mode = 0600;
        emb_store_config cfg = { .dir = tdir, .opts = &opts, .create = 0, .durable = 0 };
        rc = emb_sqlite_store.open(&s->table, &cfg);
    }
    kvq__free(ls);
    if (rc != 0) {
        kvq__salvage_close(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* ---- a range, past damaged rows and pages ------------------------------------------------ */

#define USER_STOP (-77001) /* the caller's fn stopped the scan (its code in user_rc) */

typedef struct row_copy {
    kvq_buf key, value;
} row_copy;

typedef struct scan_ctx {
    kvq__salvage *s;
    kvq__salvage_fn fn;
    void *arg;
    kvq__salvage_stats *st;
    int user_rc;
    kvq_buf last;      /* the last key the scan saw (good or bad) */
    int seen;          /* whether it saw any */
    row_copy *rows;    /* the backward scan's rows, newest key first */
    size_t n_rows, cap_rows;
    int backward;
} scan_ctx;

static void say(kvq__salvage_stats *st, const char *text)
{
    size_t used = strlen(st->where);
    if (used + 2 >= sizeof(st->where))
        return;
    if (used > 0) {
        st->where[used++] = ';';
        st->where[used++] = ' ';
        st->where[used] = '\0';
    }
    snprintf(st->where + used, sizeof(st->where) - used, "%s", text);
}

/* A key as hex, shortened, for the messages. */
static void key_hex(char *out, size_t cap, const uint8_t *k, size_t n)
{
    size_t o = 0;
    if (n == 0) {
        snprintf(out, cap, "(empty)");
        return;
    }
    for (size_t i = 0; i < n && o + 3 < cap; i++) {
        if (o + 6 >= cap) {
            snprintf(out + o, cap - o, "...");
            return;
        }
        o += (size_t)snprintf(out + o, cap - o, "%02x", k[i]);
    }
    out[o] = '\0';
}

static int on_row(void *arg, kvq_bytes key, kvq_bytes value, int ok)
{
    scan_ctx *x = arg;
    x->seen = 1;
    if (kvq__buf_set(&x->last, key.data, key.len) != 0)
        return KVQ_ENOMEM;
    if (!ok) {
        if (x->st->bad_rows < 4) {
            char hex[80], text[700];
            key_hex(hex, sizeof(hex), key.data, key.len);
            snprintf(text, sizeof(text), "%s: the row of key %s failed its checksum",
                     x->s->table_path, hex);
            say(x->st, text);
        }
        x->st->bad_rows++;
        return 0;
    }
    if (x->backward) {
        if (x->n_rows == x->cap_rows) {
            size_t cap = x->cap_rows ? 2 * x->cap_rows : 256;
            row_copy *r = kvq__realloc(x->rows, cap * sizeof(*r));
            if (r == NULL)
                return kvq__error(KVQ_ENOMEM, "out of memory for the rows read backwards");
            memset(r + x->cap_rows, 0, (cap - x->cap_rows) * sizeof(*r));
            x->rows = r;
            x->cap_rows = cap;
        }
        row_copy *r = &x->rows[x->n_rows++];
        if (kvq__buf_set(&r->key, key.data, key.len) != 0 ||
            kvq__buf_set(&r->value, value.data, value.len) != 0)
            return kvq__error(KVQ_ENOMEM, "out of memory for the rows read backwards");
        return 0;
    }
    x->st->rows++;
    int rc = x->fn(x->arg, key, value);
    if (rc != 0) {
        x->user_rc = rc;
        return USER_STOP;
    }
    return 0;
}

int kvq__salvage_range(kvq__salvage *s,
                       const uint8_t *begin,
                       size_t begin_len,
                       const uint8_t *end,
                       size_t end_len,
                       kvq__salvage_fn fn,
                       void *arg,
                       kvq__salvage_stats *st)
{
    if (s == NULL || fn == NULL || st == NULL || (begin == NULL && begin_len > 0) ||
        (end == NULL && end_len > 0))
        return kvq__error(KVQ_EINVAL, "kvq__salvage_range: bad argument");
    scan_ctx x;
    memset(&x, 0, sizeof(x));
    x.s = s;
    x.fn = fn;
    x.arg = arg;
    x.st = st;
    int rc = kvq__sqlite_salvage_scan(s->table, begin, begin_len, end, end_len, 0, on_row, &x);
    if (rc == KVQ_EDAMAGED || rc == 0) {
        /* From the other end, backwards, down to what was read: past a page SQLite cannot
         * read (an error), or one whose damage ended the forward scan early without one (a
         * page header that says it holds fewer cells, a broken sibling link). When the file is
         * sound, this finds nothing after one descent. */
        int failed = rc != 0;
        char detail[256] = "";
        if (failed)
            snprintf(detail, sizeof(detail), " (%s)", kvq_last_error());
        kvq_buf from = KVQ_BUF_INIT;
        int mrc = 0;
        if (x.seen) {
            static const uint8_t zero = 0;
            mrc = kvq_buf_append(&from, x.last.data, x.last.len);
            if (mrc == 0)
                mrc = kvq_buf_append(&from, &zero, 1);
        } else if (begin_len > 0) {
            mrc = kvq_buf_append(&from, begin, begin_len);
        }
        char lo[80] = "the start of the range", hi[80] = "its end";
        if (x.seen)
            key_hex(lo, sizeof(lo), x.last.data, x.last.len);
        x.backward = 1;
        x.seen = 0;
        uint64_t bad_before = st->bad_rows;
        rc = mrc != 0 ? mrc
                      : kvq__sqlite_salvage_scan(s->table, from.data, from.len, end, end_len, 1,
                                                 on_row, &x);
        int back_failed = rc == KVQ_EDAMAGED;
        if (back_failed && !failed)
            snprintf(detail, sizeof(detail), " (%s)", kvq_last_error());
        if (back_failed)
            rc = 0; /* the rows between the two damaged points are the gap's */
        if (x.n_rows > 0)
            key_hex(hi, sizeof(hi), x.rows[x.n_rows - 1].key.data,
                    x.rows[x.n_rows - 1].key.len);
        if (failed || back_failed || x.n_rows > 0 || st->bad_rows > bad_before) {
            st->gaps++;
            char what[900];
            snprintf(what, sizeof(what),
                     "%s: damaged pages%s hide the keys after %s and before %s: skipped",
                     s->table_path, detail, lo, hi);
            say(st, what);
        }
        kvq_buf_dispose(&from);
        /* Handed out in key order. */
        for (size_t i = x.n_rows; rc == 0 && i > 0; i--) {
            row_copy *r = &x.rows[i - 1];
            kvq_bytes k = { r->key.data, r->key.len }, v = { r->value.data, r->value.len };
            st->rows++;
            rc = fn(arg, k, v);
        }
    } else if (rc == USER_STOP) {
        rc = x.user_rc;
    }
    for (size_t i = 0; i < x.cap_rows; i++) {
        kvq_buf_dispose(&x.rows[i].key);
        kvq_buf_dispose(&x.rows[i].value);
    }
    kvq__free(x.rows);
    kvq_buf_dispose(&x.last);
    return rc;
}
