/* Salvage: every row a damaged database still gives, read-only, never repairing (issue 32,
 * item 3).
 *
 * The SQLite storage (and the log store's table, the same format) checks each row's CRC32C:
 * a row that fails it is skipped and counted. A page SQLite itself cannot read stops a range
 * scan; the scan is then taken from the other end, backwards, down to the last key read
 * forwards, so that what lies on either side of the damage is read, and the stretch between is
 * counted as a gap. The rows read backwards are handed out in key order.
 *
 * The log store: its table is read so, and the log after the table's position (meta.log_lsn)
 * is read record by record from the segment files (their format: logstore/log.h, the store's
 * records: logstore/store_log_internal.h), each checked against its checksum, and laid over the
 * table's rows as the store's reads do (its sets, clears and clear-ranges, in order). At the
 * first record that is neither valid nor the log's end (zeros), the log's rest is skipped: the
 * records found valid beyond it (their headers name their own positions) are counted, with the
 * keys they (and, as far as it can be parsed, the damaged one) set in the range read. A record
 * after a damaged one may depend on it (a pop of what it pushed), so none is applied. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "files.h"
#include "salvage.h"
#include "store.h"
#include "store_sqlite.h"
#include "logstore/log.h"
#include "util/bytes.h"

struct kvq__salvage {
    emb_store *table;  /* the SQLite storage's data.db, or the log store's table */
    char *table_path;  /* for the messages */
    int log_store;
    char *log_dir;     /* the log store's logstore/ */
    uint64_t log_lsn;  /* where the table's replay starts */
    int64_t table_version;
    int through_damage; /* kvq__salvage_set_through */
};

void kvq__salvage_set_through(kvq__salvage *s, int through)
{
    if (s != NULL)
        s->through_damage = through;
}

void kvq__salvage_close(kvq__salvage *s)
{
    if (s == NULL)
        return;
    if (s->table != NULL)
        emb_sqlite_store.close(s->table);
    kvq__free(s->table_path);
    kvq__free(s->log_dir);
    kvq__free(s);
}

int kvq__salvage_open(kvq__salvage **out, const char *url)
{
    if (out == NULL || url == NULL)
        return kvq__error(KVQ_EINVAL, "kvq__salvage_open: NULL argument");
    *out = NULL;
    if (strncmp(url, "fdb:", 4) == 0)
        return kvq__error(KVQ_EUNSUPPORTED, "salvage reads an embedded database, not a cluster");
    const char *dir = emb_url_dir(url);
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
    if (rc == 0 && s->log_store) {
        /* The table's version and log position, in one snapshot. */
        emb_snap *snap = NULL;
        emb_snap_info info = { 0, 0 };
        int64_t lsn = 0;
        int found = 0;
        rc = emb_sqlite_store.snap_open(s->table, 0, &snap, &info);
        if (rc == 0)
            rc = kvq__sqlite_snap_meta(snap, "log_lsn", &lsn, &found);
        emb_sqlite_store.snap_close(snap);
        if (rc == 0 && !found)
            rc = kvq__error(KVQ_EDAMAGED, "%s has no log position: the table is damaged",
                            s->table_path);
        s->log_lsn = (uint64_t)lsn;
        s->table_version = info.version;
        s->log_dir = ls;
        ls = NULL;
    }
    kvq__free(ls);
    if (rc != 0) {
        kvq__salvage_close(s);
        return rc;
    }
    *out = s;
    return 0;
}


static void say(kvq__salvage_stats *st, const char *text);

/* ---- the log store's log after the table ------------------------------------------------- */

#define LOG_REC_MAGIC  0x5251564bu /* logstore/log_internal.h */
#define LS_COMMIT_TYPE (KVQ__LOG_REC_USER)
#define LS_HDR         24u
enum { LS_OP_SET = 1, LS_OP_CLEAR = 2, LS_OP_CLEAR_RANGE = 3 };

/* One change of the log, laid over the table: a set (has_value), a clear, or a clear-range
 * [key, end) (is_range), numbered in log order. */
typedef struct log_op {
    kvq_buf key, end, value;
    int is_range, has_value;
    uint64_t seq;
} log_op;

typedef struct log_view {
    log_op *ops;
    size_t n, cap;
    uint64_t seq;
} log_view;

static void view_free(log_view *v)
{
    for (size_t i = 0; i < v->n; i++) {
        kvq_buf_dispose(&v->ops[i].key);
        kvq_buf_dispose(&v->ops[i].end);
        kvq_buf_dispose(&v->ops[i].value);
    }
    kvq__free(v->ops);
    memset(v, 0, sizeof(*v));
}

static int in_range(const uint8_t *k, size_t kn, const uint8_t *b, size_t bl, const uint8_t *e,
                    size_t el)
{
    return kvq__bytes_cmp(k, kn, b, bl) >= 0 && kvq__bytes_cmp(k, kn, e, el) < 0;
}

/* An array of *cap items of size bytes doubled (first: its first capacity), the new items
 * zeroed, *cap raised; NULL when out of memory (items and *cap are unchanged then). */
static void *grow_zeroed(void *items, size_t *cap, size_t size, size_t first)
{
    size_t n = *cap ? 2 * *cap : first;
    uint8_t *p = kvq__realloc(items, n * size);
    if (p == NULL)
        return NULL;
    memset(p + *cap * size, 0, (n - *cap) * size);
    *cap = n;
    return p;
}

static int view_add(log_view *v, int op, const uint8_t *a, size_t al, const uint8_t *b, size_t bl)
{
    if (v->n == v->cap) {
        log_op *o = grow_zeroed(v->ops, &v->cap, sizeof(*o), 64);
        if (o == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory for the log's changes");
        v->ops = o;
    }
    log_op *o = &v->ops[v->n++];
    o->seq = v->seq++;
    o->is_range = op == LS_OP_CLEAR_RANGE;
    o->has_value = op == LS_OP_SET;
    int rc = kvq__buf_set(&o->key, a, al);
    if (rc == 0 && op != LS_OP_CLEAR)
        rc = op == LS_OP_SET ? kvq__buf_set(&o->value, b, bl) : kvq__buf_set(&o->end, b, bl);
    return rc == 0 ? 0 : kvq__error(KVQ_ENOMEM, "out of memory for the log's changes");
}

/* The mutations of a commit record's payload: into v when v != NULL (those touching [b, e)),
 * else counted (*sets: the keys set in [b, e)). -1 when the payload does not parse. */
static int parse_commit(const uint8_t *p, size_t len, int64_t after_version, const uint8_t *b,
                        size_t bl, const uint8_t *e, size_t el, log_view *v, uint64_t *sets)
{
    if (len < LS_HDR || p[0] != 1 || p[1] != 1)
        return -1;
    uint64_t ops_len = kvq__le32_get(p + 4);
    int64_t version = (int64_t)kvq__le64_get(p + 8);
    if (LS_HDR + ops_len > len)
        return -1;
    if (version <= after_version)
        return 0; /* the table holds it */
    const uint8_t *o = p + LS_HDR, *end = o + ops_len;
    while (o < end) {
        if (end - o < 5)
            return -1;
        uint8_t op = o[0];
        uint64_t al = kvq__le32_get(o + 1), xl = 0;
        o += 5;
        if (op == LS_OP_SET || op == LS_OP_CLEAR_RANGE) {
            if (end - o < 4)
                return -1;
            xl = kvq__le32_get(o);
            o += 4;
        } else if (op != LS_OP_CLEAR) {
            return -1;
        }
        if ((uint64_t)(end - o) < al + xl)
            return -1;
        const uint8_t *a = o, *x = o + al;
        int touches = op == LS_OP_CLEAR_RANGE
                          ? kvq__bytes_cmp(a, (size_t)al, e, el) < 0 &&
                                kvq__bytes_cmp(x, (size_t)xl, b, bl) > 0
                          : in_range(a, (size_t)al, b, bl, e, el);
        if (touches && v != NULL) {
            int rc = view_add(v, op, a, (size_t)al, x, (size_t)xl);
            if (rc != 0)
                return rc;
        } else if (touches && op == LS_OP_SET && sets != NULL) {
            (*sets)++;
        }
        o += al + xl;
    }
    return 0;
}

typedef struct seg_reader {
    const char *dir;
    uint64_t sb; /* segment bytes (0: not known yet) */
    uint64_t seq;
    int fd;
    const uint8_t *map; /* the segment, mapped read-only (sb bytes) */
} seg_reader;

static void seg_close(seg_reader *r)
{
    if (r->map != NULL)
        munmap((void *)r->map, (size_t)r->sb);
    r->map = NULL;
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
}

/* Opens segment seq (read-only): 0, or KVQ_ENOTFOUND when there is none. */
static int seg_open(seg_reader *r, uint64_t seq)
{
    if (r->fd >= 0 && r->seq == seq)
        return 0;
    seg_close(r);
    char name[64];
    snprintf(name, sizeof(name), "log-%016llx.seg", (unsigned long long)seq);
    char *path = emb_path_join(r->dir, name);
    if (path == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    int rc = 0;
    struct stat st;
    if (r->fd < 0)
        rc = errno == ENOENT ? KVQ_ENOTFOUND : emb_errno_error(errno, "cannot open", path);
    else if (fstat(r->fd, &st) != 0 || st.st_size < (off_t)KVQ__LOG_SEG_MIN)
        rc = kvq__error(KVQ_EDAMAGED, "%s is too short", path);
    else if (r->sb == 0)
        r->sb = (uint64_t)st.st_size;
    else if ((uint64_t)st.st_size < r->sb)
        rc = kvq__error(KVQ_EDAMAGED, "%s is shorter than a segment", path);
    if (rc == 0) {
        void *m = mmap(NULL, (size_t)r->sb, PROT_READ, MAP_SHARED, r->fd, 0);
        if (m == MAP_FAILED)
            rc = emb_errno_error(errno, "cannot map", path);
        else
            r->map = m;
    }
    kvq__free(path);
    if (rc != 0)
        seg_close(r);
    r->seq = seq;
    return rc;
}

/* The record at lsn: 1 and its payload in *buf when valid, 0 when the bytes there are zeros
 * (the log's end), -1 when they are neither (damage, or a torn tail). */
static int rec_at(seg_reader *r, uint64_t lsn, uint32_t *type, kvq_buf *buf, uint64_t *next)
{
    uint64_t off = lsn % r->sb;
    if (off < KVQ__LOG_SEG_HEADER || off + KVQ__LOG_REC_HEADER > r->sb)
        return -1;
    const uint8_t *h = r->map + off;
    if (kvq__le32_get(h) != LOG_REC_MAGIC) {
        int zero = 1;
        for (size_t i = 0; i < KVQ__LOG_REC_HEADER && zero; i++)
            zero = h[i] == 0;
        return zero ? 0 : -1;
    }
    if (kvq__le64_get(h + 16) != lsn)
        return -1;
    uint64_t n = kvq__le32_get(h + 32);
    if (off + KVQ__LOG_REC_HEADER + n > r->sb)
        return -1;
    uint32_t c = kvq__crc32c(0, h + 8, KVQ__LOG_REC_HEADER - 8);
    c = kvq__crc32c(c, h + KVQ__LOG_REC_HEADER, (size_t)n);
    if (c != kvq__le32_get(h + 4))
        return -1;
    buf->len = 0;
    if (kvq_buf_append(buf, h + KVQ__LOG_REC_HEADER, (size_t)n) != 0)
        return -1;
    *type = kvq__le32_get(h + 12);
    *next = lsn + KVQ__LOG_REC_HEADER + ((n + 7u) & ~(uint64_t)7u);
    if (*type == KVQ__LOG_REC_SEGEND)
        *next = (lsn / r->sb + 1) * r->sb + KVQ__LOG_SEG_HEADER;
    return 1;
}

/* Reads the log after the table: the changes to [b, e) into v, up to the first damaged record;
 * what lies beyond it counted into st (or, through_damage, applied too). */
static int read_log(kvq__salvage *s, const uint8_t *b, size_t bl, const uint8_t *e, size_t el,
                    log_view *v, kvq__salvage_stats *st)
{
    seg_reader r = { s->log_dir, 0, 0, -1, NULL };
    kvq_buf buf = KVQ_BUF_INIT;
    uint64_t pos = s->log_lsn;
    /* The segment size: every segment file has it (preallocated whole). */
    int rc = 0;
    DIR *d = opendir(s->log_dir);
    if (d == NULL)
        rc = emb_errno_error(errno, "cannot open", s->log_dir);
    struct dirent *de;
    while (rc == 0 && r.sb == 0 && (de = readdir(d)) != NULL) {
        unsigned long long seq = 0;
        char tail[8] = "";
        if (sscanf(de->d_name, "log-%16llx.%4s", &seq, tail) == 2 && strcmp(tail, "seg") == 0) {
            int orc = seg_open(&r, seq);
            if (orc != 0 && orc != KVQ_ENOTFOUND)
                rc = orc;
            kvq__error_clear();
        }
    }
    if (d != NULL)
        closedir(d);
    if (rc == 0 && r.sb == 0 && pos > KVQ__LOG_SEG_HEADER)
        rc = kvq__error(KVQ_EDAMAGED, "%s holds no log segment after the table's position",
                        s->log_dir);
    if (rc != 0 || r.sb == 0) {
        seg_close(&r);
        return rc;
    }
    if (pos % r.sb < KVQ__LOG_SEG_HEADER)
        pos = pos / r.sb * r.sb + KVQ__LOG_SEG_HEADER;
    int damaged = 0;
    uint64_t damaged_at = 0;
    for (;;) {
        int orc = seg_open(&r, pos / r.sb);
        if (orc == KVQ_ENOTFOUND) {
            kvq__error_clear();
            break; /* the log ends where no segment was made yet */
        }
        if (orc != 0) {
            rc = orc;
            break;
        }
        uint32_t type = 0;
        uint64_t next = 0;
        int got = rec_at(&r, pos, &type, &buf, &next);
        if (got == 0)
            break;
        if (got < 0) {
            damaged = 1;
            damaged_at = pos;
            break;
        }
        if (type == LS_COMMIT_TYPE &&
            parse_commit(buf.data, buf.len, s->table_version, b, bl, e, el, v, NULL) != 0) {
            damaged = 1;
            damaged_at = pos;
            break;
        }
        pos = next;
    }
    if (rc == 0 && damaged) {
        /* The damaged record: its keys as far as its header and payload parse. */
        uint64_t off = damaged_at % r.sb, sets = 0, records = 1;
        const uint8_t *h = r.map + off;
        if (off + KVQ__LOG_REC_HEADER <= r.sb && kvq__le32_get(h + 12) == LS_COMMIT_TYPE) {
            uint64_t n = kvq__le32_get(h + 32);
            if (off + KVQ__LOG_REC_HEADER + n <= r.sb)
                (void)parse_commit(h + KVQ__LOG_REC_HEADER, (size_t)n, s->table_version, b, bl,
                                   e, el, NULL, &sets);
        }
        /* Beyond it: every valid record, found by its header (which names its position), in
         * this segment and the next ones. */
        for (uint64_t at = damaged_at + 8;;) {
            if (at % r.sb + KVQ__LOG_REC_HEADER > r.sb)
                at = (at / r.sb + 1) * r.sb + KVQ__LOG_SEG_HEADER;
            int orc = seg_open(&r, at / r.sb);
            if (orc != 0) {
                kvq__error_clear();
                break;
            }
            uint32_t type = 0;
            uint64_t next = 0;
            int got = rec_at(&r, at, &type, &buf, &next);
            if (got == 1) {
                records++;
                if (type == LS_COMMIT_TYPE)
                    (void)parse_commit(buf.data, buf.len, s->table_version, b, bl, e, el,
                                       s->through_damage ? v : NULL, &sets);
                at = next;
            } else {
                at += 8;
            }
        }
        st->log_skipped_records += records;
        st->log_skipped_sets += sets;
        char text[700];
        snprintf(text, sizeof(text),
                 "%s: the log record at %llu (segment log-%016llx.seg) is damaged: it and the "
                 "%llu valid records after it are skipped (%llu keys they set in the range)",
                 s->log_dir, (unsigned long long)damaged_at,
                 (unsigned long long)(damaged_at / r.sb), (unsigned long long)(records - 1),
                 (unsigned long long)sets);
        say(st, text);
    }
    seg_close(&r);
    kvq_buf_dispose(&buf);
    return rc;
}

/* The log's final word on each key: sorted by key, the newest change per key last; ranges
 * apart. */
static int op_cmp(const void *pa, const void *pb)
{
    const log_op *a = pa, *b = pb;
    int c = kvq__bytes_cmp(a->key.data, a->key.len, b->key.data, b->key.len);
    if (c != 0)
        return c;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

typedef struct merge_ctx {
    kvq__salvage_fn fn;
    void *arg;
    log_op *points; /* the newest change of each key, in key order */
    size_t n_points, next;
    log_op *ranges;
    size_t n_ranges;
    uint64_t emitted;
} merge_ctx;

/* Whether a clear-range newer than seq covers key. */
static int cleared_after(const merge_ctx *m, const uint8_t *k, size_t kn, uint64_t seq, int any)
{
    for (size_t i = 0; i < m->n_ranges; i++) {
        const log_op *r = &m->ranges[i];
        if ((any || r->seq > seq) && in_range(k, kn, r->key.data, r->key.len, r->end.data,
                                              r->end.len))
            return 1;
    }
    return 0;
}

/* Hands out the log's sets up to (not including) key, or all of them (key NULL). */
static int flush_points(merge_ctx *m, const uint8_t *k, size_t kn)
{
    while (m->next < m->n_points) {
        log_op *o = &m->points[m->next];
        if (k != NULL && kvq__bytes_cmp(o->key.data, o->key.len, k, kn) >= 0)
            break;
        m->next++;
        if (o->has_value && !cleared_after(m, o->key.data, o->key.len, o->seq, 0)) {
            kvq_bytes kk = { o->key.data, o->key.len }, vv = { o->value.data, o->value.len };
            m->emitted++;
            int rc = m->fn(m->arg, kk, vv);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

static int merge_row(void *arg, kvq_bytes key, kvq_bytes value)
{
    merge_ctx *m = arg;
    int rc = flush_points(m, key.data, key.len);
    if (rc != 0)
        return rc;
    if (m->next < m->n_points &&
        kvq__bytes_cmp(m->points[m->next].key.data, m->points[m->next].key.len, key.data,
                       key.len) == 0)
        return 0; /* the log's change of this key wins: flush_points hands it out */
    if (cleared_after(m, key.data, key.len, 0, 1))
        return 0;
    m->emitted++;
    return m->fn(m->arg, key, value);
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
            row_copy *r = grow_zeroed(x->rows, &x->cap_rows, sizeof(*r), 256);
            if (r == NULL)
                return kvq__error(KVQ_ENOMEM, "out of memory for the rows read backwards");
            x->rows = r;
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

static int table_range(kvq__salvage *s,
                       const uint8_t *begin,
                       size_t begin_len,
                       const uint8_t *end,
                       size_t end_len,
                       kvq__salvage_fn fn,
                       void *arg,
                       kvq__salvage_stats *st)
{
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
    if (!s->log_store)
        return table_range(s, begin, begin_len, end, end_len, fn, arg, st);
    log_view v;
    memset(&v, 0, sizeof(v));
    int rc = read_log(s, begin, begin_len, end, end_len, &v, st);
    /* Points (the newest change of each key) and ranges apart. */
    log_view pts, rgs;
    memset(&pts, 0, sizeof(pts));
    memset(&rgs, 0, sizeof(rgs));
    for (size_t i = 0; rc == 0 && i < v.n; i++) {
        log_view *to = v.ops[i].is_range ? &rgs : &pts;
        if (to->n == to->cap) {
            size_t cap = to->cap ? 2 * to->cap : 64;
            log_op *o = kvq__realloc(to->ops, cap * sizeof(*o));
            if (o == NULL) {
                rc = kvq__error(KVQ_ENOMEM, "out of memory for the log's changes");
                break;
            }
            to->ops = o;
            to->cap = cap;
        }
        to->ops[to->n++] = v.ops[i]; /* moved: v keeps no ownership */
    }
    size_t kept = 0;
    if (rc == 0 && pts.n > 0) {
        qsort(pts.ops, pts.n, sizeof(log_op), op_cmp);
        for (size_t i = 0; i < pts.n; i++) {
            int last = i + 1 == pts.n ||
                       kvq__bytes_cmp(pts.ops[i].key.data, pts.ops[i].key.len,
                                      pts.ops[i + 1].key.data, pts.ops[i + 1].key.len) != 0;
            if (last) {
                pts.ops[kept++] = pts.ops[i];
            } else {
                kvq_buf_dispose(&pts.ops[i].key);
                kvq_buf_dispose(&pts.ops[i].end);
                kvq_buf_dispose(&pts.ops[i].value);
            }
        }
        pts.n = kept;
    }
    if (rc == 0) {
        merge_ctx m = { fn, arg, pts.ops, pts.n, 0, rgs.ops, rgs.n, 0 };
        uint64_t rows = st->rows;
        rc = table_range(s, begin, begin_len, end, end_len, merge_row, &m, st);
        if (rc == 0)
            rc = flush_points(&m, NULL, 0);
        st->rows = rows + m.emitted;
    }
    if (rc != 0 && v.n > 0 && pts.n == 0 && rgs.n == 0) {
        view_free(&v); /* nothing was moved */
    } else {
        kvq__free(v.ops);
        v.ops = NULL;
    }
    /* every op moved into pts or rgs is freed there */
    view_free(&pts);
    view_free(&rgs);
    return rc;
}
