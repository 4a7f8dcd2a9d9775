/* The SQLite storage of the embedded engine (store.h): every SQLite call and SQL statement of
 * the engine is in this file.
 *
 * Files: data.db (+ -wal, -shm), SQLite in WAL mode:
 *   kv(key BLOB PRIMARY KEY, value BLOB, crc INTEGER) WITHOUT ROWID: the data; crc is the
 *       CRC32C of (key length as u32 LE, key, value), checked on every row read;
 *   meta(name TEXT PRIMARY KEY, value) WITHOUT ROWID: 'format' (FORMAT_VERSION) and
 *       'wlog_floor' (the conflict log's floor);
 *   wlog(version INTEGER PRIMARY KEY, ranges BLOB): the conflict log, one row per batch, keyed
 *       by its version, with its write ranges packed (ranges.h); the newest row's version is
 *       the stored version (row 0 for a new database), so a commit writes no page of its own
 *       for it. One row per batch appends to the log's last page (a rowid table grows at its
 *       end), where one row per range in a table keyed by (version, seq) rebalanced its last
 *       pages and rewrote their parent much more often.
 *
 * Snapshots are SQLite read transactions on pooled connections; the snapshot is fixed by
 * snap_open's read of the stored version. Writes run on one connection per handle (the
 * writer) inside BEGIN IMMEDIATE. SQLite runs with synchronous=NORMAL: it does not sync commits
 * (sync does, once for the commits of every process), but its checkpoints sync the WAL and the
 * database file.
 *
 * Checkpoints: the writer checkpoints after the commit that takes the WAL past CKPT_PAGES, as
 * SQLite's automatic checkpoint would (a passive checkpoint: it blocks nobody, and costs the
 * committer about a millisecond per thousand pages). Running it on a separate thread was
 * measured to halve commit throughput: the WAL then restarted only every few thousand pages, so
 * commits kept extending the file, and a sync that extends a file costs more than one that
 * overwrites it. A passive checkpoint cannot finish while an older reader needs frames; if
 * readers keep it from finishing and the WAL passes CKPT_HARD_PAGES, the writer tries to
 * truncate the WAL without waiting (it runs under kvq's commit lock: waiting on a reader would
 * stall every commit). A reader stops holding the WAL back when its snapshot closes, and a
 * later commit's checkpoint catches up. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "store.h"
#include "store_sqlite.h"

/* The layout of data.db (meta 'format'). 1: the version in a meta row, one wlog row per write
 * range; 2: the version is the newest entry of wlog, so a commit writes no meta page; 3: one
 * wlog row per batch, a rowid table keyed by the version. A database of another format is
 * refused at open (no format before 3 was released). */
#define FORMAT_VERSION 3

/* How long SQLite waits for its own locks before SQLITE_BUSY. */
#define BUSY_TIMEOUT_MS 30000
/* How many times a snapshot that SQLite refuses transiently is started again (about 0.4 s). */
#define READ_START_RETRIES 50
/* Pages of WAL (4 KiB each by default) that trigger a checkpoint, and the hard bound. */
#define CKPT_PAGES      1000
#define CKPT_HARD_PAGES 16384

/* A cursor is a snapshot's range statement. */
struct emb_cursor {
    struct emb_snap *snap;
    sqlite3_stmt *st;
    /* The bound the statement leaves to the cursor (the end of a forward range, the beginning
     * of a reverse one; sq_cursor_next); done once a row past it was met. */
    const uint8_t *stop;
    size_t stop_len;
    int reverse, done;
};

/* A snapshot is a pooled connection with its prepared statements, in a read transaction. */
struct emb_snap {
    struct emb_store *s;
    sqlite3 *db;
    sqlite3_stmt *begin, *rollback, *version, *get, *range_fwd, *range_rev;
    struct emb_cursor cur;
    struct emb_snap *next; /* free list of the pool */
};

struct emb_store {
    char *dir;
    char *path; /* dir/data.db */
    kvq__db_opts opts;
    int read_only;

    /* Reader connections, reused by snapshots. */
    pthread_mutex_t pool_mu;
    struct emb_snap *pool;

    /* The writer: used under the commit lock only. */
    sqlite3 *writer;
    sqlite3_stmt *w_get, *w_put, *w_del, *w_del_range, *w_version, *w_wlog_scan, *w_wlog_put,
        *w_meta_get, *w_meta_put;
    int w_get_pending; /* w_get holds a row whose bytes were lent out */
    int64_t log_floor;

    /* The WAL, opened for syncing it; -1 until needed. */
    int wal_fd;
    uint64_t n_checkpoints;
};

static int sqlite_error(sqlite3 *db, int src, const char *what)
{
    int prim = src & 0xff;
    const char *msg = db != NULL ? sqlite3_errmsg(db) : sqlite3_errstr(src);
    /* SQLite's messages for failed system calls ("unable to open database file", "disk I/O
     * error") do not say why: add the system's reason (say, "Too many open files"). */
    char detail[512];
    int sys = db != NULL ? sqlite3_system_errno(db) : 0;
    if (sys != 0 && (prim == SQLITE_CANTOPEN || prim == SQLITE_IOERR || prim == SQLITE_FULL)) {
        snprintf(detail, sizeof(detail), "%s: %s", msg, strerror(sys));
        msg = detail;
    }
    /* A file SQLite could not create or grow for lack of space (its -shm and -wal files, at
     * open or at a read's start) is a full disk, whatever SQLite calls it. */
    if ((sys == ENOSPC || sys == EDQUOT) && (prim == SQLITE_CANTOPEN || prim == SQLITE_IOERR))
        prim = SQLITE_FULL;
    switch (prim) {
    case SQLITE_NOMEM:
        return kvq__error(KVQ_ENOMEM, "%s: out of memory (%s)", what, msg);
    case SQLITE_FULL:
        return kvq__error(KVQ_ENOSPC, "%s: the disk is full (%s)", what, msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return kvq__error(KVQ_EDAMAGED, "%s: the database file is damaged (%s)", what, msg);
    case SQLITE_PERM:
    case SQLITE_READONLY:
    case SQLITE_AUTH:
        return kvq__error(KVQ_EPERM, "%s: permission denied (%s)", what, msg);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return kvq__error(KVQ_EBUSY, "%s: the database is busy (%s)", what, msg);
    case SQLITE_CANTOPEN:
        return kvq__error(KVQ_EIO, "%s: cannot open the database file (%s)", what, msg);
    default:
        return kvq__error(KVQ_EIO, "%s: storage error %d (%s)", what, src, msg);
    }
}

static int exec(sqlite3 *db, const char *sql, const char *what)
{
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) {
        int code = sqlite_error(db, rc, what);
        sqlite3_free(err);
        return code;
    }
    return 0;
}

static int prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st)
{
    int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL);
    if (rc != SQLITE_OK)
        return sqlite_error(db, rc, "preparing a statement");
    return 0;
}

/* Read-only media (a read-only handle on a directory it cannot write, with no WAL left by a
 * writer): SQLite cannot create the WAL index there, so the file is opened as immutable, which
 * it is. A URI with the path percent-encoded; NULL when not applicable or out of memory. */
static char *immutable_uri(const struct emb_store *s)
{
    if (!s->read_only)
        return NULL;
    size_t n = strlen(s->path);
    char *tmp = malloc(n + 5);
    if (tmp == NULL)
        return NULL;
    memcpy(tmp, s->path, n);
    memcpy(tmp + n, "-wal", 5);
    int wal = access(tmp, F_OK) == 0;
    const char *slash = strrchr(s->path, '/');
    if (slash == NULL)
        strcpy(tmp, ".");
    else if (slash == s->path)
        strcpy(tmp, "/");
    else {
        memcpy(tmp, s->path, (size_t)(slash - s->path));
        tmp[slash - s->path] = '\0';
    }
    int dir_writable = access(tmp, W_OK) == 0;
    free(tmp);
    if (wal || dir_writable)
        return NULL;
    char *uri = malloc(3 * n + 32);
    if (uri == NULL)
        return NULL;
    size_t o = (size_t)sprintf(uri, "file:");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s->path[i];
        if (ch == '?' || ch == '#' || ch == '%' || ch < 0x21 || ch > 0x7e)
            o += (size_t)sprintf(uri + o, "%%%02X", ch);
        else
            uri[o++] = (char)ch;
    }
    strcpy(uri + o, "?immutable=1");
    return uri;
}

/* The main file of a connection as SQLite holds it, or NULL. kvq reads data.db's header through
 * it rather than through a descriptor of its own: a close() of any descriptor on a file
 * releases every POSIX lock the process holds on it, SQLite's included, and then another
 * process closing its last connection takes the file's exclusive lock, checkpoints under this
 * process's readers and deletes the WAL and its index (test_emb_file_locks). */
static sqlite3_file *main_file(sqlite3 *db)
{
    sqlite3_file *f = NULL;
    if (db == NULL ||
        sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK || f == NULL ||
        f->pMethods == NULL)
        return NULL;
    return f;
}

/* Reads n bytes at off of the connection's main file; 0, or -1 when they are not all there. */
static int main_file_read(sqlite3 *db, void *buf, int n, sqlite3_int64 off)
{
    sqlite3_file *f = main_file(db);
    return f != NULL && f->pMethods->xRead(f, buf, n, off) == SQLITE_OK ? 0 : -1;
}

/* A read-only handle opened as immutable reports the journal mode "delete": the file's header
 * (bytes 18 and 19 are 2 in WAL mode) says what it is. */
static int wal_header(const struct emb_store *s)
{
    if (!s->read_only)
        return 0;
    uint8_t h[2];
    return main_file_read(s->writer, h, 2, 18) == 0 && h[0] == 2 && h[1] == 2;
}

static int open_sqlite(struct emb_store *s, sqlite3 **out, int create)
{
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
    if (create)
        flags |= SQLITE_OPEN_CREATE;
    if (s->read_only)
        flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX;
    sqlite3 *db = NULL;
    char *uri = immutable_uri(s);
    int rc = sqlite3_open_v2(uri != NULL ? uri : s->path, &db,
                             uri != NULL ? flags | SQLITE_OPEN_URI : flags, NULL);
    free(uri);
    if (rc != SQLITE_OK) {
        int code = sqlite_error(db, rc, "opening the database file");
        sqlite3_close_v2(db);
        return code;
    }
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
    /* SQLite does not sync commits: kvq does, once for the commits of every process (sync),
     * unless the handle is relaxed. Checkpoints still sync the WAL and the database file. */
    rc = exec(db, "PRAGMA synchronous=NORMAL;", "setting synchronous");
    if (rc == 0)
        rc = exec(db, "PRAGMA cache_size=-16384; PRAGMA temp_store=MEMORY;", "setting pragmas");
    if (rc != 0) {
        sqlite3_close_v2(db);
        return rc;
    }
    *out = db;
    return 0;
}

/* ---- checksums ---------------------------------------------------------------------------- */

static uint32_t row_crc(const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    /* The checksum covers the key and the value, so a flipped bit in either is caught. */
    uint8_t lenbuf[4] = { (uint8_t)kn, (uint8_t)(kn >> 8), (uint8_t)(kn >> 16),
                          (uint8_t)(kn >> 24) };
    uint32_t c = kvq__crc32c(0, lenbuf, 4);
    c = kvq__crc32c(c, k, kn);
    return kvq__crc32c(c, v, vn);
}

/* Lends out the key (kcol, or the given key when kcol < 0), the value and checks the row's
 * checksum: the one place where a stored row is checked. */
static int row_out(sqlite3_stmt *st,
                   int kcol,
                   const uint8_t *key,
                   size_t key_len,
                   int vcol,
                   int ccol,
                   kvq_bytes *k_out,
                   kvq_bytes *v_out)
{
    const uint8_t *k = key;
    size_t kn = key_len;
    if (kcol >= 0) {
        k = sqlite3_column_blob(st, kcol);
        kn = (size_t)sqlite3_column_bytes(st, kcol);
    }
    const uint8_t *v = sqlite3_column_blob(st, vcol);
    size_t vn = (size_t)sqlite3_column_bytes(st, vcol);
    uint32_t crc = (uint32_t)sqlite3_column_int64(st, ccol);
    if (row_crc(k, kn, v, vn) != crc)
        return kvq__error(KVQ_EDAMAGED,
                          "a stored value failed its checksum (key of %zu bytes): the database "
                          "file is damaged",
                          kn);
    if (k_out != NULL) {
        k_out->data = k;
        k_out->len = kn;
    }
    v_out->data = v;
    v_out->len = vn;
    return 0;
}

/* ---- snapshots ---------------------------------------------------------------------------- */

static void snap_free(struct emb_snap *c)
{
    sqlite3_finalize(c->begin);
    sqlite3_finalize(c->rollback);
    sqlite3_finalize(c->version);
    sqlite3_finalize(c->get);
    sqlite3_finalize(c->range_fwd);
    sqlite3_finalize(c->range_rev);
    sqlite3_close_v2(c->db);
    kvq__free(c);
}

static int conn_acquire(struct emb_store *s, struct emb_snap **out)
{
    pthread_mutex_lock(&s->pool_mu);
    struct emb_snap *c = s->pool;
    if (c != NULL)
        s->pool = c->next;
    pthread_mutex_unlock(&s->pool_mu);
    if (c != NULL) {
        c->next = NULL;
        *out = c;
        return 0;
    }
    c = kvq__calloc(1, sizeof(*c));
    if (c == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for a connection");
    c->s = s;
    c->cur.snap = c;
    int rc = open_sqlite(s, &c->db, 0);
    if (rc == 0)
        rc = prepare(c->db, "BEGIN", &c->begin);
    if (rc == 0)
        rc = prepare(c->db, "ROLLBACK", &c->rollback);
    if (rc == 0)
        rc = prepare(c->db, "SELECT max(version) FROM wlog", &c->version);
    if (rc == 0)
        rc = prepare(c->db, "SELECT value, crc FROM kv WHERE key = ?1", &c->get);
    /* A range's far bound is the cursor's to check (sq_cursor_next), not the statement's. */
    if (rc == 0)
        rc = prepare(c->db, "SELECT key, value, crc FROM kv WHERE key >= ?1 ORDER BY key",
                     &c->range_fwd);
    if (rc == 0)
        rc = prepare(c->db, "SELECT key, value, crc FROM kv WHERE key < ?1 ORDER BY key DESC",
                     &c->range_rev);
    if (rc != 0) {
        snap_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

static void conn_release(struct emb_store *s, struct emb_snap *c)
{
    pthread_mutex_lock(&s->pool_mu);
    c->next = s->pool;
    s->pool = c;
    pthread_mutex_unlock(&s->pool_mu);
}

static void sq_snap_close(emb_snap *c)
{
    if (c == NULL)
        return;
    sqlite3_reset(c->get);
    sqlite3_reset(c->range_fwd);
    sqlite3_reset(c->range_rev);
    sqlite3_reset(c->version);
    sqlite3_step(c->rollback);
    sqlite3_reset(c->rollback);
    conn_release(c->s, c);
}

static int sq_snap_open(emb_store *s, int64_t at, emb_snap **out, emb_snap_info *info)
{
    (void)at; /* no versions kept: the newest state only */
    struct emb_snap *c = NULL;
    int rc, src;
    /* SQLite may refuse to start a WAL read for a moment under heavy contention
     * (SQLITE_PROTOCOL, after its own retries) or while a connection recovers the WAL
     * (SQLITE_BUSY): both are transient, so try again a few times before reporting them. */
    for (int attempt = 0;; attempt++) {
        rc = conn_acquire(s, &c);
        if (rc != 0)
            return rc;
        src = sqlite3_step(c->begin);
        sqlite3_reset(c->begin);
        if (src != SQLITE_DONE) {
            rc = sqlite_error(c->db, src, "starting a read");
            conn_release(s, c);
            return rc;
        }
        /* The snapshot is fixed by the first read after BEGIN: the stored version, the newest
         * version in the write log (max() of its key: one descent of the log's B-tree). */
        src = sqlite3_step(c->version);
        int prim = src & 0xff;
        if ((prim == SQLITE_PROTOCOL || prim == SQLITE_BUSY) && attempt < READ_START_RETRIES) {
            sq_snap_close(c);
            kvq__sleep_us(1000 * (attempt < 10 ? attempt + 1 : 10));
            continue;
        }
        break;
    }
    if (src != SQLITE_ROW || sqlite3_column_type(c->version, 0) == SQLITE_NULL) {
        /* An empty log has lost its version record. */
        rc = src == SQLITE_ROW || src == SQLITE_DONE
                 ? kvq__error(KVQ_EDAMAGED, "the database has no version record")
                 : sqlite_error(c->db, src, "reading the version");
        sq_snap_close(c);
        return rc;
    }
    int64_t v = sqlite3_column_int64(c->version, 0);
    sqlite3_reset(c->version);
    info->version = v;
    info->latest = v;
    *out = c;
    return 0;
}

static int sq_get(emb_snap *c, const uint8_t *key, size_t key_len, kvq_bytes *value, int *present)
{
    static const uint8_t z[1] = { 0 };
    sqlite3_stmt *st = c->get;
    sqlite3_reset(st); /* the previous row was lent until now */
    sqlite3_bind_blob(st, 1, key_len > 0 ? (const void *)key : z, (int)key_len, SQLITE_STATIC);
    int src = sqlite3_step(st);
    if (src == SQLITE_ROW) {
        *present = 1;
        return row_out(st, -1, key, key_len, 0, 1, NULL, value);
    }
    *present = 0;
    value->data = NULL;
    value->len = 0;
    if (src == SQLITE_DONE)
        return 0;
    int rc = sqlite_error(c->db, src, "reading a key");
    sqlite3_reset(st);
    return rc;
}

static int sq_cursor_open(emb_snap *c,
                          const uint8_t *begin,
                          size_t begin_len,
                          const uint8_t *end,
                          size_t end_len,
                          int reverse,
                          emb_cursor **out)
{
    static const uint8_t z[1] = { 0 };
    struct emb_cursor *cur = &c->cur;
    cur->st = reverse ? c->range_rev : c->range_fwd;
    cur->reverse = reverse;
    cur->done = 0;
    /* The statement seeks to the near bound; the cursor stops at the far one. */
    const uint8_t *from = reverse ? end : begin;
    size_t from_len = reverse ? end_len : begin_len;
    cur->stop = reverse ? begin : end;
    cur->stop_len = reverse ? begin_len : end_len;
    sqlite3_bind_blob(cur->st, 1, from_len > 0 ? (const void *)from : z, (int)from_len,
                      SQLITE_STATIC);
    *out = cur;
    return 0;
}

/* Is key past the cursor's far bound (at or after the end of a forward range, before the
 * beginning of a reverse one)? Keys compare as SQLite compares blobs: bytes, then length. */
static int past_stop(const struct emb_cursor *cur, const uint8_t *key, size_t key_len)
{
    size_t n = key_len < cur->stop_len ? key_len : cur->stop_len;
    int c = n > 0 ? memcmp(key, cur->stop, n) : 0;
    if (c == 0)
        c = key_len < cur->stop_len ? -1 : key_len > cur->stop_len;
    return cur->reverse ? c < 0 : c >= 0;
}

/* The range ends at the first row past the far bound, and only at a sound one: a key damaged in
 * the file (bytes flipped) may sort past the bound, and a range that ended there would end early
 * without a word, all the rows after it unread. The row's checksum, over its key too, tells the
 * two apart (KVQ_EDAMAGED). */
static int sq_cursor_next(emb_cursor *cur, kvq_bytes *key, kvq_bytes *value, int *has)
{
    *has = 0;
    if (cur->done)
        return 0;
    int src = sqlite3_step(cur->st);
    if (src == SQLITE_DONE) {
        cur->done = 1;
        return 0;
    }
    if (src != SQLITE_ROW) {
        char what[600];
        snprintf(what, sizeof what, "reading a range of %s", cur->snap->s->path);
        return sqlite_error(cur->snap->db, src, what);
    }
    if (row_out(cur->st, 0, NULL, 0, 1, 2, key, value) != 0)
        return kvq__error(KVQ_EDAMAGED,
                          "reading a range of %s: a row failed its checksum (key of %zu bytes): "
                          "the file is damaged",
                          cur->snap->s->path, (size_t)sqlite3_column_bytes(cur->st, 0));
    if (past_stop(cur, key->data, key->len)) {
        cur->done = 1;
        return 0;
    }
    *has = 1;
    return 0;
}

static void sq_cursor_close(emb_cursor *cur)
{
    if (cur == NULL || cur->st == NULL)
        return;
    sqlite3_reset(cur->st);
    sqlite3_clear_bindings(cur->st);
    cur->st = NULL;
}

/* ---- writes ------------------------------------------------------------------------------- */

static void w_get_done(struct emb_store *s)
{
    if (s->w_get_pending) {
        sqlite3_reset(s->w_get);
        s->w_get_pending = 0;
    }
}

static int step_done(struct emb_store *s, sqlite3_stmt *st, const char *what)
{
    int src = sqlite3_step(st);
    sqlite3_reset(st);
    if (src != SQLITE_DONE && src != SQLITE_ROW)
        return sqlite_error(s->writer, src, what);
    return 0;
}

static int read_int(struct emb_store *s, sqlite3_stmt *st, int64_t *out, const char *what)
{
    int src = sqlite3_step(st);
    int rc = 0;
    if (src == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        *out = sqlite3_column_int64(st, 0);
    else if (src == SQLITE_ROW || src == SQLITE_DONE)
        rc = kvq__error(KVQ_EDAMAGED, "%s: record missing", what);
    else
        rc = sqlite_error(s->writer, src, what);
    sqlite3_reset(st);
    return rc;
}

static void sq_write_abort(emb_store *s)
{
    w_get_done(s);
    if (s->writer != NULL && !sqlite3_get_autocommit(s->writer))
        sqlite3_exec(s->writer, "ROLLBACK", NULL, NULL, NULL);
}

static int sq_write_begin(emb_store *s, emb_store_head *head)
{
    int rc = exec(s->writer, "BEGIN IMMEDIATE", "starting a commit");
    if (rc == 0)
        rc = read_int(s, s->w_version, &head->version, "reading the version");
    if (rc == 0) {
        sqlite3_bind_text(s->w_meta_get, 1, "wlog_floor", -1, SQLITE_STATIC);
        rc = read_int(s, s->w_meta_get, &s->log_floor, "reading the log floor");
    }
    if (rc != 0) {
        sq_write_abort(s);
        return rc;
    }
    head->log_floor = s->log_floor;
    return 0;
}

static int sq_write_get(emb_store *s, const uint8_t *key, size_t key_len, kvq_bytes *value,
                        int *present)
{
    static const uint8_t z[1] = { 0 };
    w_get_done(s);
    sqlite3_stmt *st = s->w_get;
    sqlite3_bind_blob(st, 1, key_len > 0 ? (const void *)key : z, (int)key_len, SQLITE_STATIC);
    int src = sqlite3_step(st);
    *present = 0;
    value->data = NULL;
    value->len = 0;
    if (src == SQLITE_ROW) {
        s->w_get_pending = 1;
        *present = 1;
        int rc = row_out(st, -1, key, key_len, 0, 1, NULL, value);
        if (rc != 0)
            kvq__error(KVQ_EDAMAGED, "a stored value failed its checksum during an atomic "
                                     "operation: the database file is damaged");
        return rc;
    }
    sqlite3_reset(st);
    if (src == SQLITE_DONE)
        return 0;
    return sqlite_error(s->writer, src, "reading a key for an atomic operation");
}

static int sq_write_put(
    emb_store *s, const uint8_t *key, size_t key_len, const uint8_t *value, size_t value_len)
{
    static const uint8_t z[1] = { 0 };
    w_get_done(s);
    sqlite3_stmt *st = s->w_put;
    sqlite3_bind_blob(st, 1, key_len ? key : z, (int)key_len, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, value_len ? value : z, (int)value_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, (int64_t)row_crc(key, key_len, value, value_len));
    return step_done(s, st, "writing a key");
}

static int sq_write_clear(emb_store *s, const uint8_t *key, size_t key_len)
{
    static const uint8_t z[1] = { 0 };
    w_get_done(s);
    sqlite3_stmt *st = s->w_del;
    sqlite3_bind_blob(st, 1, key_len ? key : z, (int)key_len, SQLITE_STATIC);
    return step_done(s, st, "clearing a key");
}

static int sq_write_clear_range(emb_store *s,
                                const uint8_t *begin,
                                size_t begin_len,
                                const uint8_t *end,
                                size_t end_len,
                                emb_key_fn deleted,
                                void *arg)
{
    static const uint8_t z[1] = { 0 };
    w_get_done(s);
    sqlite3_stmt *st = s->w_del_range;
    sqlite3_bind_blob(st, 1, begin_len ? begin : z, (int)begin_len, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, end_len ? end : z, (int)end_len, SQLITE_STATIC);
    int src;
    while ((src = sqlite3_step(st)) == SQLITE_ROW) {
        if (deleted != NULL)
            deleted(arg, sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0));
    }
    sqlite3_reset(st);
    return src == SQLITE_DONE ? 0 : sqlite_error(s->writer, src, "clearing a range");
}

static int sq_write_range_bytes(emb_store *s,
                                const uint8_t *begin,
                                size_t begin_len,
                                const uint8_t *end,
                                size_t end_len,
                                int64_t stop,
                                int64_t *bytes)
{
    static const uint8_t z[1] = { 0 };
    w_get_done(s);
    sqlite3_stmt *st;
    int src = sqlite3_prepare_v2(s->writer,
                                 "SELECT length(key) + length(value) FROM kv "
                                 "WHERE key >= ?1 AND key < ?2",
                                 -1, &st, NULL);
    if (src != SQLITE_OK)
        return sqlite_error(s->writer, src, "measuring what a clear frees");
    sqlite3_bind_blob(st, 1, begin_len ? begin : z, (int)begin_len, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, end_len ? end : z, (int)end_len, SQLITE_STATIC);
    int64_t sum = 0;
    while (sum <= stop && (src = sqlite3_step(st)) == SQLITE_ROW)
        sum += sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (src != SQLITE_ROW && src != SQLITE_DONE)
        return sqlite_error(s->writer, src, "measuring what a clear frees");
    *bytes = sum;
    return 0;
}

static int sq_log_check(emb_store *s, int64_t after, const emb_ranges *reads, int *hit)
{
    w_get_done(s);
    sqlite3_stmt *st = s->w_wlog_scan;
    sqlite3_bind_int64(st, 1, after);
    int rc = 0;
    *hit = 0;
    for (;;) {
        int src = sqlite3_step(st);
        if (src == SQLITE_DONE)
            break;
        if (src != SQLITE_ROW) {
            rc = sqlite_error(s->writer, src, "checking conflicts");
            break;
        }
        const uint8_t *p = sqlite3_column_blob(st, 0);
        size_t n = (size_t)sqlite3_column_bytes(st, 0);
        rc = emb_ranges_packed_intersects(reads, p, n, hit);
        if (rc != 0 || *hit)
            break;
    }
    sqlite3_reset(st);
    return rc;
}

/* Removes the log's rows older than `before`. The newest row is never removed (it is the
 * database's version): the caller's batch is younger than the cut. */
static int sq_log_prune(emb_store *s, int64_t before)
{
    w_get_done(s);
    sqlite3_stmt *st;
    int src = sqlite3_prepare_v2(s->writer, "SELECT max(version) FROM wlog WHERE version < ?1", -1,
                                 &st, NULL);
    if (src != SQLITE_OK)
        return sqlite_error(s->writer, src, "pruning the write log");
    sqlite3_bind_int64(st, 1, before);
    int64_t pruned_max = 0;
    src = sqlite3_step(st);
    if (src == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        pruned_max = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (src != SQLITE_ROW)
        return sqlite_error(s->writer, src, "pruning the write log");
    if (pruned_max <= s->log_floor)
        return 0; /* nothing to prune */
    src = sqlite3_prepare_v2(s->writer, "DELETE FROM wlog WHERE version <= ?1", -1, &st, NULL);
    if (src != SQLITE_OK)
        return sqlite_error(s->writer, src, "pruning the write log");
    sqlite3_bind_int64(st, 1, pruned_max);
    int rc = step_done(s, st, "pruning the write log");
    sqlite3_finalize(st);
    if (rc != 0)
        return rc;
    sqlite3_bind_text(s->w_meta_put, 1, "wlog_floor", -1, SQLITE_STATIC);
    sqlite3_bind_int64(s->w_meta_put, 2, pruned_max);
    rc = step_done(s, s->w_meta_put, "recording the log floor");
    if (rc == 0)
        s->log_floor = pruned_max;
    return rc;
}

static int sq_write_commit(emb_store *s, int64_t version, const uint8_t *packed, size_t n)
{
    static const uint8_t z[1] = { 0 };
    w_get_done(s);
    int rc = 0;
    if (version > 0) {
        /* One row keyed by the batch's version, with the write ranges it accepted (none for a
         * batch of versionstamped keys only: the row still records the database's version). */
        sqlite3_stmt *st = s->w_wlog_put;
        sqlite3_bind_int64(st, 1, version);
        sqlite3_bind_blob64(st, 2, n > 0 ? packed : z, n, SQLITE_STATIC);
        rc = step_done(s, st, "logging write ranges");
        sqlite3_clear_bindings(st);
    }
    if (rc != 0) {
        sq_write_abort(s);
        return rc;
    }
    int src = sqlite3_exec(s->writer, "COMMIT", NULL, NULL, NULL);
    if (src == SQLITE_OK)
        return 0;
    /* A failed COMMIT rolls back, except that a failure while writing may leave the outcome
     * unknown: say so rather than claim either. */
    rc = sqlite_error(s->writer, src, "committing");
    if ((src & 0xff) == SQLITE_IOERR)
        rc = kvq__error(KVQ_ECOMMIT_UNKNOWN_RESULT, "the storage failed while committing: %s",
                        sqlite3_errmsg(s->writer));
    sq_write_abort(s);
    return rc;
}

/* ---- durability --------------------------------------------------------------------------- */

/* Opens the WAL for syncing (once); a WAL that does not exist holds nothing to sync. A WAL this
 * handle has not seen before gets its directory entry synced too, since SQLite no longer syncs
 * it (it never syncs in NORMAL mode outside checkpoints). */
static int open_wal(struct emb_store *s, int *none)
{
    *none = 0;
    if (s->wal_fd >= 0)
        return 0;
    size_t n = strlen(s->path) + 5;
    char *p = kvq__malloc(n);
    if (p == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    snprintf(p, n, "%s-wal", s->path);
    int fd = open(p, (s->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    int err = errno;
    kvq__free(p);
    if (fd < 0 && err == ENOENT) {
        *none = 1;
        return 0;
    }
    if (fd < 0)
        return kvq__error(KVQ_EIO, "cannot open the WAL to sync it: %s", strerror(err));
    int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        int src = fsync(dfd);
        err = errno;
        close(dfd);
        if (src != 0 && err != EINVAL) {
            close(fd);
            return kvq__error(KVQ_EIO, "cannot sync the database directory: %s", strerror(err));
        }
    }
    s->wal_fd = fd;
    return 0;
}

/* After a failed sync, nothing written to the WAL is known to be on disk, and a sync that now
 * succeeds proves nothing about pages the kernel gave up on. What does: a checkpoint that copies
 * every frame of the WAL into the database file, which SQLite then syncs. */
static int repair_broken_sync(struct emb_store *s)
{
    struct emb_snap *c = NULL;
    int rc = conn_acquire(s, &c);
    if (rc != 0)
        return rc;
    int log = 0, done = 0;
    /* A reader's snapshot may keep the checkpoint from copying every frame: then the WAL is
     * still not known to be on disk. Never wait for readers or the commit lock here. */
    sqlite3_busy_timeout(c->db, 0);
    int src = sqlite3_wal_checkpoint_v2(c->db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
    sqlite3_busy_timeout(c->db, BUSY_TIMEOUT_MS);
    conn_release(s, c);
    if (src == SQLITE_OK && done >= log)
        return 0;
    return kvq__error(KVQ_EIO,
                      "an earlier sync of the WAL failed, and the checkpoint that would make its "
                      "commits durable has not completed (%s)",
                      src == SQLITE_OK ? "a reader still needs old frames" : sqlite3_errstr(src));
}

static int sq_sync(emb_store *s, int repair, int *issued)
{
    *issued = 0;
    int none = 0;
    int rc = repair ? repair_broken_sync(s) : 0;
    if (rc == 0)
        rc = open_wal(s, &none);
    if (rc != 0 || none)
        return rc;
    *issued = 1;
    if (fdatasync(s->wal_fd) != 0)
        return kvq__error(KVQ_EIO, "syncing the WAL failed: %s", strerror(errno));
    return 0;
}

static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    struct emb_store *s = arg;
    if (pages < CKPT_PAGES)
        return SQLITE_OK;
    int log = 0, done = 0;
    int src = sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
    __atomic_add_fetch(&s->n_checkpoints, 1, __ATOMIC_RELAXED);
    if ((src == SQLITE_OK && done >= log) || pages < CKPT_HARD_PAGES)
        return SQLITE_OK;
    /* Past the hard bound: truncate the WAL if no reader needs it, but never wait for one. The
     * writer holds the commit lock here, so waiting would stall every commit of every process
     * for as long as one idle transaction keeps its snapshot. */
    sqlite3_busy_timeout(db, 0);
    sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_TRUNCATE, &log, &done);
    sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS);
    __atomic_add_fetch(&s->n_checkpoints, 1, __ATOMIC_RELAXED);
    return SQLITE_OK;
}

/* ---- opening ------------------------------------------------------------------------------ */

static int prepare_writer(struct emb_store *s)
{
    sqlite3 *db = s->writer;
    int rc = prepare(db, "SELECT value, crc FROM kv WHERE key = ?1", &s->w_get);
    if (rc == 0)
        rc = prepare(db, "INSERT OR REPLACE INTO kv(key, value, crc) VALUES (?1, ?2, ?3)",
                     &s->w_put);
    if (rc == 0)
        rc = prepare(db, "DELETE FROM kv WHERE key = ?1", &s->w_del);
    if (rc == 0)
        rc = prepare(db, "DELETE FROM kv WHERE key >= ?1 AND key < ?2 RETURNING key",
                     &s->w_del_range);
    if (rc == 0)
        rc = prepare(db, "SELECT max(version) FROM wlog", &s->w_version);
    if (rc == 0)
        rc = prepare(db, "SELECT ranges FROM wlog WHERE version > ?1", &s->w_wlog_scan);
    if (rc == 0)
        rc = prepare(db, "INSERT INTO wlog(version, ranges) VALUES (?1, ?2)", &s->w_wlog_put);
    if (rc == 0)
        rc = prepare(db, "SELECT value FROM meta WHERE name = ?1", &s->w_meta_get);
    if (rc == 0)
        rc =
            prepare(db, "INSERT OR REPLACE INTO meta(name, value) VALUES (?1, ?2)", &s->w_meta_put);
    return rc;
}

static const char SCHEMA[] =
    "BEGIN IMMEDIATE;"
    "CREATE TABLE IF NOT EXISTS kv(key BLOB PRIMARY KEY, value BLOB NOT NULL,"
    " crc INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS wlog(version INTEGER PRIMARY KEY, ranges BLOB NOT NULL);"
    "INSERT OR IGNORE INTO meta(name, value) VALUES ('format', 3);"
    /* The database's version is the newest version in wlog; this row is version 0. */
    "INSERT OR IGNORE INTO wlog(version, ranges) VALUES (0, x'');"
    "INSERT OR IGNORE INTO meta(name, value) VALUES ('wlog_floor', 0);"
    "COMMIT;";

/* Whether data.db exists, before SQLite opens it (a stat: no descriptor, see main_file). */
static int check_present(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0)
        return 0;
    if (errno == ENOENT)
        return kvq__error(KVQ_EDAMAGED,
                          "%s is missing although the database's marker exists: the "
                          "database is damaged",
                          path);
    return emb_errno_error(errno, "cannot open", path);
}

/* Reads the SQLite header through the writer's own file (main_file) before any statement runs,
 * and checks that the file is at least as long as the header says: a truncated file is damage,
 * even where SQLite would quietly read the missing pages as empty. */
static int check_file(struct emb_store *s)
{
    const char *path = s->path;
    sqlite3_file *f = main_file(s->writer);
    sqlite3_int64 size = 0;
    if (f == NULL || f->pMethods->xFileSize(f, &size) != SQLITE_OK)
        return kvq__error(KVQ_EIO, "cannot read the size of %s", path);
    uint8_t h[100];
    int rc = 0;
    if (size == 0) {
        rc = kvq__error(KVQ_EDAMAGED,
                        "%s is empty although the database's marker exists: the "
                        "database is damaged",
                        path);
    } else if (main_file_read(s->writer, h, (int)sizeof(h), 0) != 0 ||
               memcmp(h, "SQLite format 3", 16) != 0) {
        rc = kvq__error(KVQ_EDAMAGED,
                        "%s does not start with a valid header: the database is "
                        "damaged",
                        path);
    } else {
        uint32_t psz = (uint32_t)h[16] << 8 | h[17];
        uint64_t page = psz == 1 ? 65536 : psz;
        uint32_t pages =
            (uint32_t)h[28] << 24 | (uint32_t)h[29] << 16 | (uint32_t)h[30] << 8 | h[31];
        int valid = memcmp(h + 24, h + 92, 4) == 0;
        /* A checkpoint killed halfway can leave the file shorter than its header says; the
         * WAL still holds every page then, and SQLite redoes the checkpoint. So the length is
         * only judged without a WAL. */
        char wal[4096];
        struct stat wst;
        snprintf(wal, sizeof(wal), "%s-wal", path);
        int has_wal = stat(wal, &wst) == 0 && wst.st_size > 0;
        if (valid && !has_wal && (uint64_t)size < (uint64_t)pages * page)
            rc = kvq__error(KVQ_EDAMAGED,
                            "%s is truncated (%lld bytes, its header says %llu): the database is "
                            "damaged",
                            path, (long long)size, (unsigned long long)pages * page);
    }
    return rc;
}

static int check_meta(struct emb_store *s)
{
    sqlite3_stmt *st = NULL;
    int rc =
        sqlite3_prepare_v2(s->writer, "SELECT value FROM meta WHERE name='format'", -1, &st, NULL);
    if (rc != SQLITE_OK) {
        int code =
            rc == SQLITE_ERROR
                ? kvq__error(KVQ_EDAMAGED, "%s has no kvq tables: the database is damaged", s->path)
                : sqlite_error(s->writer, rc, "reading the database format");
        sqlite3_finalize(st);
        return code;
    }
    rc = sqlite3_step(st);
    int code = 0;
    if (rc == SQLITE_ROW) {
        if (sqlite3_column_int64(st, 0) != FORMAT_VERSION)
            code = kvq__error(KVQ_EUNSUPPORTED,
                              "%s has database format %lld; this kvq reads format %d only (a "
                              "database written by another version of kvq is refused, never "
                              "converted)",
                              s->path, (long long)sqlite3_column_int64(st, 0), FORMAT_VERSION);
    } else if (rc == SQLITE_DONE) {
        code =
            kvq__error(KVQ_EDAMAGED, "%s has no format record: the database is damaged", s->path);
    } else {
        code = sqlite_error(s->writer, rc, "reading the database format");
    }
    sqlite3_finalize(st);
    return code;
}

/* The existing database's file is in WAL mode, as every kvq database is. */
static int check_wal_mode(struct emb_store *s)
{
    int rc = 0;
    sqlite3_stmt *jm = NULL;
    if (sqlite3_prepare_v2(s->writer, "PRAGMA journal_mode", -1, &jm, NULL) == SQLITE_OK &&
        sqlite3_step(jm) == SQLITE_ROW) {
        const char *mode = (const char *)sqlite3_column_text(jm, 0);
        if ((mode == NULL || strcmp(mode, "wal") != 0) && !wal_header(s))
            rc = kvq__error(KVQ_EDAMAGED, "%s is not in WAL mode: not a kvq database file",
                            s->path);
    }
    sqlite3_finalize(jm);
    return rc;
}

static void sq_close(emb_store *s)
{
    if (s == NULL)
        return;
    if (s->writer != NULL && !s->read_only) {
        sqlite3_wal_hook(s->writer, NULL, NULL);
        /* A last passive checkpoint keeps the WAL small between runs. */
        int log = 0, done = 0;
        sqlite3_wal_checkpoint_v2(s->writer, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
    }
    while (s->pool != NULL) {
        struct emb_snap *c = s->pool;
        s->pool = c->next;
        snap_free(c);
    }
    sqlite3_stmt *stmts[] = { s->w_get,       s->w_put,      s->w_del,
                              s->w_del_range, s->w_version,  s->w_wlog_scan,
                              s->w_wlog_put,  s->w_meta_get, s->w_meta_put };
    for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++)
        sqlite3_finalize(stmts[i]);
    if (s->writer != NULL)
        sqlite3_close_v2(s->writer);
    if (s->wal_fd >= 0)
        close(s->wal_fd);
    pthread_mutex_destroy(&s->pool_mu);
    kvq__free(s->dir);
    kvq__free(s->path);
    kvq__free(s);
}

static int sq_open(emb_store **out, const emb_store_config *cfg)
{
    struct emb_store *s = kvq__calloc(1, sizeof(*s));
    if (s == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    s->opts = *cfg->opts;
    s->read_only = (cfg->opts->flags & KVQ_DB_READ_ONLY) != 0;
    s->wal_fd = -1;
    pthread_mutex_init(&s->pool_mu, NULL);
    s->dir = kvq__strdup(cfg->dir);
    s->path = s->dir != NULL ? emb_path_join(cfg->dir, "data.db") : NULL;
    int rc = 0;
    if (s->dir == NULL || s->path == NULL) {
        rc = kvq__error(KVQ_ENOMEM, "out of memory");
        goto fail;
    }
    if (cfg->create) {
        /* Made here for its mode (SQLite's would be 0644). O_EXCL: a descriptor closed on a
         * file that SQLite connections of this process hold would drop their locks (main_file);
         * a new file has none. */
        int fd = open(s->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, cfg->opts->file_mode);
        if (fd < 0 && errno != EEXIST) {
            rc = emb_errno_error(errno, "cannot create", s->path);
            goto fail;
        }
        if (fd >= 0)
            close(fd);
        rc = open_sqlite(s, &s->writer, 1);
        if (rc == 0)
            rc = exec(s->writer, "PRAGMA journal_mode=WAL;", "setting WAL mode");
        if (rc == 0)
            rc = exec(s->writer, SCHEMA, "creating the tables");
        if (rc == 0)
            rc = check_meta(s);
        /* The tables must be durable before the caller's marker says that the database exists:
         * SQLite does not sync commits (synchronous=NORMAL), but a checkpoint syncs the WAL and
         * then the database file. (A power cut in between left a marker and no tables.) */
        if (rc == 0)
            rc = exec(s->writer, "PRAGMA wal_checkpoint(FULL);", "syncing the new tables");
    } else {
        rc = check_present(s->path);
        if (rc == 0) {
            rc = open_sqlite(s, &s->writer, 0);
            /* Say why the system refused, as an open() of our own would have. */
            if (rc != 0 && access(s->path, R_OK) != 0 && (errno == EACCES || errno == EPERM))
                rc = emb_errno_error(errno, "cannot open", s->path);
        }
        if (rc == 0)
            rc = check_file(s);
        if (rc == 0)
            rc = check_meta(s);
        if (rc == 0)
            rc = check_wal_mode(s);
    }
    if (rc == 0)
        rc = prepare_writer(s);
    if (rc == 0 && !s->read_only)
        rc = exec(s->writer, "PRAGMA journal_size_limit=67108864;", "limiting the WAL size");
    if (rc == 0 && !s->read_only)
        sqlite3_wal_hook(s->writer, wal_hook, s);
    if (rc == 0 && cfg->durable) {
        /* Opens the WAL for syncing now, so that a lack of descriptors is a clean open error
         * rather than a commit whose durability is unknown. */
        int none;
        rc = open_wal(s, &none);
    }
    if (rc != 0)
        goto fail;
    *out = s;
    return 0;
fail:
    sq_close(s);
    return rc;
}

const emb_store_ops emb_sqlite_store = {
    .version = EMB_STORE_OPS_VERSION,
    .name = "sqlite",
    .caps = 0,
    .open = sq_open,
    .close = sq_close,
    .snap_open = sq_snap_open,
    .snap_close = sq_snap_close,
    .get = sq_get,
    .cursor_open = sq_cursor_open,
    .cursor_next = sq_cursor_next,
    .cursor_close = sq_cursor_close,
    .write_begin = sq_write_begin,
    .write_get = sq_write_get,
    .write_put = sq_write_put,
    .write_clear = sq_write_clear,
    .write_clear_range = sq_write_clear_range,
    .write_range_bytes = sq_write_range_bytes,
    .log_check = sq_log_check,
    .log_prune = sq_log_prune,
    .write_commit = sq_write_commit,
    .write_abort = sq_write_abort,
    .sync = sq_sync,
    .checkpoint = NULL,
};

/* ---- named integers in meta, for the log store (store_sqlite.h) ---------------------------- */

int kvq__sqlite_meta_put(emb_store *s, const char *name, int64_t value)
{
    if (s == NULL || name == NULL || s->writer == NULL || sqlite3_get_autocommit(s->writer))
        return kvq__error(KVQ_EINVAL, "no write in progress");
    sqlite3_stmt *st = s->w_meta_put;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, value);
    int rc = step_done(s, st, "writing a meta record");
    sqlite3_clear_bindings(st);
    return rc;
}

static int meta_row(sqlite3 *db, sqlite3_stmt *st, const char *name, int64_t *value, int *found)
{
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int src = sqlite3_step(st);
    *found = 0;
    int rc = 0;
    if (src == SQLITE_ROW) {
        *found = 1;
        *value = sqlite3_column_int64(st, 0);
    } else if (src != SQLITE_DONE) {
        rc = sqlite_error(db, src, "reading a meta record");
    }
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

int kvq__sqlite_meta_get(emb_store *s, const char *name, int64_t *value, int *found)
{
    if (s == NULL || name == NULL || s->writer == NULL)
        return kvq__error(KVQ_EINVAL, "no database");
    w_get_done(s);
    return meta_row(s->writer, s->w_meta_get, name, value, found);
}

int kvq__sqlite_snap_meta(emb_snap *c, const char *name, int64_t *value, int *found)
{
    if (c == NULL || name == NULL)
        return kvq__error(KVQ_EINVAL, "no snapshot");
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(c->db, "SELECT value FROM meta WHERE name = ?1", -1, &st, NULL);
    if (src != SQLITE_OK)
        return sqlite_error(c->db, src, "reading a meta record");
    int rc = meta_row(c->db, st, name, value, found);
    sqlite3_finalize(st);
    return rc;
}

/* A checkpoint of the writer's WAL in mode (SQLITE_CHECKPOINT_*) that never waits for a reader:
 * one that needs old frames keeps them until a later call, which *complete (may be NULL) says
 * (0: stopped short). Counted in n_checkpoints. */
static int checkpoint_nowait(emb_store *s, int mode, const char *what, int *complete)
{
    int log = 0, done = 0;
    sqlite3_busy_timeout(s->writer, 0);
    int src = sqlite3_wal_checkpoint_v2(s->writer, NULL, mode, &log, &done);
    sqlite3_busy_timeout(s->writer, BUSY_TIMEOUT_MS);
    __atomic_add_fetch(&s->n_checkpoints, 1, __ATOMIC_RELAXED);
    if (src != SQLITE_OK && (src & 0xff) != SQLITE_BUSY && (src & 0xff) != SQLITE_LOCKED)
        return sqlite_error(s->writer, src, what);
    if (complete)
        *complete = src == SQLITE_OK;
    return 0;
}

int kvq__sqlite_checkpoint(emb_store *s, int *complete)
{
    *complete = 1;
    if (s == NULL || s->writer == NULL || s->read_only)
        return 0;
    return checkpoint_nowait(s, SQLITE_CHECKPOINT_RESTART, "checkpointing the WAL", complete);
}

static int pragma_int(sqlite3 *db, const char *sql, int64_t *value)
{
    sqlite3_stmt *st = NULL;
    int src = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (src == SQLITE_OK) {
        src = sqlite3_step(st);
        if (src == SQLITE_ROW) {
            *value = sqlite3_column_int64(st, 0);
            src = SQLITE_OK;
        }
    }
    int rc = src == SQLITE_OK ? 0 : sqlite_error(db, src, "reading the database's size");
    sqlite3_finalize(st);
    return rc;
}

int kvq__sqlite_live_bytes(emb_store *s, uint64_t *bytes)
{
    if (s == NULL || s->writer == NULL || bytes == NULL)
        return kvq__error(KVQ_EINVAL, "no database");
    int64_t pages = 0, free_pages = 0, page_size = 0;
    int rc = pragma_int(s->writer, "PRAGMA page_count", &pages);
    if (rc == 0)
        rc = pragma_int(s->writer, "PRAGMA freelist_count", &free_pages);
    if (rc == 0)
        rc = pragma_int(s->writer, "PRAGMA page_size", &page_size);
    if (rc == 0)
        *bytes = pages > free_pages ? (uint64_t)(pages - free_pages) * (uint64_t)page_size : 0;
    return rc;
}

/* ---- room on a full disk (reserve.c) ------------------------------------------------------- */

int kvq__sqlite_room(emb_store *s, uint64_t *free_bytes, uint64_t *live_bytes)
{
    if (s == NULL || s->writer == NULL || free_bytes == NULL || live_bytes == NULL)
        return kvq__error(KVQ_EINVAL, "no database");
    int64_t pages = 0, free_pages = 0, page_size = 0;
    int rc = pragma_int(s->writer, "PRAGMA page_count", &pages);
    if (rc == 0)
        rc = pragma_int(s->writer, "PRAGMA freelist_count", &free_pages);
    if (rc == 0)
        rc = pragma_int(s->writer, "PRAGMA page_size", &page_size);
    if (rc != 0)
        return rc;
    if (free_pages > pages)
        free_pages = pages;
    *free_bytes = (uint64_t)free_pages * (uint64_t)page_size;
    *live_bytes = (uint64_t)(pages - free_pages) * (uint64_t)page_size;
    return 0;
}

int kvq__sqlite_compact(emb_store *s)
{
    if (s == NULL || s->writer == NULL || s->read_only)
        return kvq__error(KVQ_EINVAL, "no writable database");
    /* VACUUM writes the live pages into the WAL (the changed file is smaller); the checkpoint
     * then copies them back and cuts the file and the WAL, never waiting for a reader (one
     * that holds old frames makes it stop short: the file is cut by a later checkpoint). */
    int rc = exec(s->writer, "VACUUM;", "compacting the database");
    if (rc != 0) {
        /* A copy cut short (a full disk) leaves the WAL as large as it grew: cut it too. The
         * VACUUM's error is the one reported. */
        char why[512];
        snprintf(why, sizeof why, "%s", kvq_last_error());
        (void)checkpoint_nowait(s, SQLITE_CHECKPOINT_TRUNCATE, "checkpointing the WAL", NULL);
        kvq__error_clear();
        return kvq__error(rc, "%s", why);
    }
    return checkpoint_nowait(s, SQLITE_CHECKPOINT_TRUNCATE,
                             "checkpointing the compacted database", NULL);
}

int kvq__sqlite_wal_cut(emb_store *s)
{
    if (s == NULL || s->writer == NULL || s->read_only)
        return kvq__error(KVQ_EINVAL, "no writable database");
    return checkpoint_nowait(s, SQLITE_CHECKPOINT_TRUNCATE, "cutting the WAL", NULL);
}

/* ---- salvage (salvage.c): reading past damage, never writing ----------------------------- */

int kvq__sqlite_salvage_scan(emb_store *s,
                             const uint8_t *begin,
                             size_t begin_len,
                             const uint8_t *end,
                             size_t end_len,
                             int reverse,
                             kvq__sqlite_row_fn fn,
                             void *arg)
{
    if (s == NULL || fn == NULL)
        return kvq__error(KVQ_EINVAL, "no database");
    static const uint8_t z[1] = { 0 };
    sqlite3 *db = NULL;
    int rc = open_sqlite(s, &db, 0);
    if (rc != 0)
        return rc;
    sqlite3_stmt *st = NULL;
    rc = exec(db, "BEGIN", "starting a read");
    if (rc == 0)
        rc = prepare(db,
                     reverse ? "SELECT key, value, crc FROM kv WHERE key >= ?1 AND key < ?2 "
                               "ORDER BY key DESC"
                             : "SELECT key, value, crc FROM kv WHERE key >= ?1 AND key < ?2 "
                               "ORDER BY key",
                     &st);
    if (rc == 0) {
        sqlite3_bind_blob(st, 1, begin_len > 0 ? (const void *)begin : z, (int)begin_len,
                          SQLITE_STATIC);
        sqlite3_bind_blob(st, 2, end_len > 0 ? (const void *)end : z, (int)end_len,
                          SQLITE_STATIC);
    }
    while (rc == 0) {
        int src = sqlite3_step(st);
        if (src == SQLITE_DONE)
            break;
        if (src != SQLITE_ROW) {
            rc = sqlite_error(db, src, "reading a range");
            break;
        }
        kvq_bytes k = { NULL, 0 }, v = { NULL, 0 };
        int ok = row_out(st, 0, NULL, 0, 1, 2, &k, &v) == 0;
        if (!ok) {
            kvq__error_clear();
            k.data = sqlite3_column_blob(st, 0);
            k.len = (size_t)sqlite3_column_bytes(st, 0);
        }
        rc = fn(arg, k, v, ok);
    }
    sqlite3_finalize(st);
    sqlite3_close_v2(db); /* its read transaction ends with it */
    return rc;
}
