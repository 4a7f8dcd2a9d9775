/* Opening and closing an embedded database: the directory, the marker, SQLite connections and
 * their statements, and the checks that keep a damaged database from passing as an empty one. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emb.h"

/* The layout of data.db (meta 'format'). 1: the version in a meta row, one wlog row per write
 * range; 2: the version is the newest entry of wlog, so a commit writes no meta page; 3: one
 * wlog row per batch, a rowid table keyed by the version. A database of another format is
 * refused at open (no format before 3 was released). */
#define FORMAT_VERSION  3
#define MARKER_TEXT     "kvq database\nformat 1\n"

int emb_sqlite_error(sqlite3 *db, int src, const char *what)
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

static char *path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = kvq__malloc(n);
    if (p != NULL)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int errno_error(int err, const char *what, const char *path)
{
    int code = KVQ_EIO;
    if (err == EACCES || err == EPERM || err == EROFS)
        code = KVQ_EPERM;
    else if (err == ENOSPC || err == EDQUOT)
        code = KVQ_ENOSPC;
    else if (err == ENOMEM)
        code = KVQ_ENOMEM;
    else if (err == ENOENT)
        code = KVQ_ENOTFOUND;
    return kvq__error(code, "%s %s: %s", what, path, strerror(err));
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno_error(errno, "cannot open directory", dir);
    int rc = fsync(fd) == 0 ? 0 : errno_error(errno, "cannot sync directory", dir);
    close(fd);
    return rc;
}

static int exec(sqlite3 *db, const char *sql, const char *what)
{
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK) {
        int code = emb_sqlite_error(db, rc, what);
        sqlite3_free(err);
        return code;
    }
    return 0;
}

static int prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st)
{
    int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, st, NULL);
    if (rc != SQLITE_OK)
        return emb_sqlite_error(db, rc, "preparing a statement");
    return 0;
}

/* Read-only media (a read-only handle on a directory it cannot write, with no WAL left by a
 * writer): SQLite cannot create the WAL index there, so the file is opened as immutable, which
 * it is. A URI with the path percent-encoded; NULL when not applicable or out of memory. */
static char *immutable_uri(const emb_db *e)
{
    if (!(e->opts.flags & KVQ_DB_READ_ONLY))
        return NULL;
    size_t n = strlen(e->path);
    char *tmp = malloc(n + 5);
    if (tmp == NULL)
        return NULL;
    memcpy(tmp, e->path, n);
    memcpy(tmp + n, "-wal", 5);
    int wal = access(tmp, F_OK) == 0;
    char *slash = strrchr(e->path, '/');
    size_t dlen = slash == NULL ? 0 : (size_t)(slash - e->path);
    memcpy(tmp, dlen == 0 ? "." : e->path, dlen == 0 ? 1 : dlen);
    tmp[dlen == 0 ? 1 : dlen] = '\0';
    if (dlen == 0 && slash != NULL)
        memcpy(tmp, "/", 2);
    int dir_writable = access(tmp, W_OK) == 0;
    free(tmp);
    if (wal || dir_writable)
        return NULL;
    char *uri = malloc(3 * n + 32);
    if (uri == NULL)
        return NULL;
    size_t o = (size_t)sprintf(uri, "file:");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)e->path[i];
        if (ch == '?' || ch == '#' || ch == '%' || ch < 0x21 || ch > 0x7e)
            o += (size_t)sprintf(uri + o, "%%%02X", ch);
        else
            uri[o++] = (char)ch;
    }
    strcpy(uri + o, "?immutable=1");
    return uri;
}

/* A read-only handle opened as immutable reports the journal mode "delete": the file's header
 * (bytes 18 and 19 are 2 in WAL mode) says what it is. */
static int wal_header(const emb_db *e)
{
    if (!(e->opts.flags & KVQ_DB_READ_ONLY))
        return 0;
    uint8_t h[2];
    int fd = open(e->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int ok = pread(fd, h, 2, 18) == 2 && h[0] == 2 && h[1] == 2;
    close(fd);
    return ok;
}

static int open_sqlite(emb_db *e, sqlite3 **out, int create)
{
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
    if (create)
        flags |= SQLITE_OPEN_CREATE;
    if (e->opts.flags & KVQ_DB_READ_ONLY)
        flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX;
    sqlite3 *db = NULL;
    char *uri = immutable_uri(e);
    int rc = sqlite3_open_v2(uri != NULL ? uri : e->path, &db,
                             uri != NULL ? flags | SQLITE_OPEN_URI : flags, NULL);
    free(uri);
    if (rc != SQLITE_OK) {
        int code = emb_sqlite_error(db, rc, "opening the database file");
        sqlite3_close_v2(db);
        return code;
    }
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, EMB_BUSY_TIMEOUT_MS);
    /* SQLite does not sync commits: kvq does, once for the commits of every process (sync.c),
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

int emb_conn_acquire(emb_db *e, emb_conn **out)
{
    pthread_mutex_lock(&e->pool_mu);
    emb_conn *c = e->pool;
    if (c != NULL)
        e->pool = c->next;
    pthread_mutex_unlock(&e->pool_mu);
    if (c != NULL) {
        c->next = NULL;
        *out = c;
        return 0;
    }
    c = kvq__calloc(1, sizeof(*c));
    if (c == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for a connection");
    int rc = open_sqlite(e, &c->db, 0);
    if (rc == 0)
        rc = prepare(c->db, "BEGIN", &c->begin);
    if (rc == 0)
        rc = prepare(c->db, "ROLLBACK", &c->rollback);
    if (rc == 0)
        rc = prepare(c->db, "SELECT max(version) FROM wlog", &c->version);
    if (rc == 0)
        rc = prepare(c->db, "SELECT key, value, crc FROM kv WHERE key = ?1", &c->get);
    if (rc == 0)
        rc = prepare(c->db,
                     "SELECT key, value, crc FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key",
                     &c->range_fwd);
    if (rc == 0)
        rc = prepare(
            c->db, "SELECT key, value, crc FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key DESC",
            &c->range_rev);
    if (rc != 0) {
        sqlite3_finalize(c->begin);
        sqlite3_finalize(c->rollback);
        sqlite3_finalize(c->version);
        sqlite3_finalize(c->get);
        sqlite3_finalize(c->range_fwd);
        sqlite3_finalize(c->range_rev);
        sqlite3_close_v2(c->db);
        kvq__free(c);
        return rc;
    }
    *out = c;
    return 0;
}

void emb_conn_release(emb_db *e, emb_conn *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&e->pool_mu);
    c->next = e->pool;
    e->pool = c;
    pthread_mutex_unlock(&e->pool_mu);
}

static void conn_close(emb_conn *c)
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

uint32_t emb_row_crc(const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    /* The checksum covers the key and the value, so a flipped bit in either is caught. */
    uint8_t lenbuf[4] = { (uint8_t)kn, (uint8_t)(kn >> 8), (uint8_t)(kn >> 16),
                          (uint8_t)(kn >> 24) };
    uint32_t c = kvq__crc32c(0, lenbuf, 4);
    c = kvq__crc32c(c, k, kn);
    return kvq__crc32c(c, v, vn);
}

int emb_row_value(
    emb_txn *t, sqlite3_stmt *st, int kcol, int vcol, int ccol, kvq_bytes *key, kvq_bytes *value)
{
    const uint8_t *k = sqlite3_column_blob(st, kcol);
    size_t kn = (size_t)sqlite3_column_bytes(st, kcol);
    const uint8_t *v = sqlite3_column_blob(st, vcol);
    size_t vn = (size_t)sqlite3_column_bytes(st, vcol);
    uint32_t crc = (uint32_t)sqlite3_column_int64(st, ccol);
    if (emb_row_crc(k, kn, v, vn) != crc)
        return kvq__error(KVQ_EDAMAGED,
                          "a stored value failed its checksum (key of %zu bytes): the database "
                          "file is damaged",
                          kn);
    uint8_t *mem = emb_arena_alloc(t, kn + vn);
    if (mem == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory for a read");
    if (kn > 0)
        memcpy(mem, k, kn);
    if (vn > 0)
        memcpy(mem + kn, v, vn);
    if (key != NULL) {
        key->data = mem;
        key->len = kn;
    }
    value->data = mem + kn;
    value->len = vn;
    return 0;
}

static int prepare_writer(emb_db *e)
{
    sqlite3 *db = e->writer;
    int rc = prepare(db, "SELECT value, crc FROM kv WHERE key = ?1", &e->w_get);
    if (rc == 0)
        rc = prepare(db, "INSERT OR REPLACE INTO kv(key, value, crc) VALUES (?1, ?2, ?3)",
                     &e->w_put);
    if (rc == 0)
        rc = prepare(db, "DELETE FROM kv WHERE key = ?1", &e->w_del);
    if (rc == 0)
        rc = prepare(db, "DELETE FROM kv WHERE key >= ?1 AND key < ?2 RETURNING key",
                     &e->w_del_range);
    if (rc == 0)
        rc = prepare(db, "SELECT max(version) FROM wlog", &e->w_version);
    if (rc == 0)
        rc = prepare(db, "SELECT ranges FROM wlog WHERE version > ?1", &e->w_wlog_scan);
    if (rc == 0)
        rc = prepare(db, "INSERT INTO wlog(version, ranges) VALUES (?1, ?2)", &e->w_wlog_put);
    if (rc == 0)
        rc = prepare(db, "SELECT value FROM meta WHERE name = ?1", &e->w_meta_get);
    if (rc == 0)
        rc =
            prepare(db, "INSERT OR REPLACE INTO meta(name, value) VALUES (?1, ?2)", &e->w_meta_put);
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

/* Reads the SQLite header and checks that the file is at least as long as the header says: a
 * truncated file is damage, even where SQLite would quietly read the missing pages as empty. */
static int check_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return kvq__error(KVQ_EDAMAGED,
                              "%s is missing although the database's marker exists: the "
                              "database is damaged",
                              path);
        return errno_error(errno, "cannot open", path);
    }
    struct stat st;
    uint8_t h[100];
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = errno_error(errno, "cannot stat", path);
    } else if (st.st_size == 0) {
        rc = kvq__error(KVQ_EDAMAGED,
                        "%s is empty although the database's marker exists: the "
                        "database is damaged",
                        path);
    } else if (pread(fd, h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
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
        if (valid && !has_wal && (uint64_t)st.st_size < (uint64_t)pages * page)
            rc = kvq__error(KVQ_EDAMAGED,
                            "%s is truncated (%lld bytes, its header says %llu): the database is "
                            "damaged",
                            path, (long long)st.st_size, (unsigned long long)pages * page);
    }
    close(fd);
    return rc;
}

static int write_marker(const char *dir, unsigned int mode)
{
    char *tmp = path_join(dir, "kvq.marker.tmp");
    char *dst = path_join(dir, "kvq.marker");
    int rc = 0;
    if (tmp == NULL || dst == NULL) {
        rc = kvq__error(KVQ_ENOMEM, "out of memory");
        goto out;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0) {
        rc = errno_error(errno, "cannot create", tmp);
        goto out;
    }
    size_t n = sizeof(MARKER_TEXT) - 1;
    if (write(fd, MARKER_TEXT, n) != (ssize_t)n || fsync(fd) != 0) {
        rc = errno_error(errno, "cannot write", tmp);
        close(fd);
        goto out;
    }
    close(fd);
    if (rename(tmp, dst) != 0) {
        rc = errno_error(errno, "cannot rename", tmp);
        goto out;
    }
    rc = fsync_dir(dir);
out:
    kvq__free(tmp);
    kvq__free(dst);
    return rc;
}

static int check_marker(const char *dir, int *exists)
{
    char *p = path_join(dir, "kvq.marker");
    if (p == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    int rc = 0;
    *exists = 0;
    if (fd < 0) {
        if (errno != ENOENT)
            rc = errno_error(errno, "cannot open", p);
    } else {
        char buf[64] = { 0 };
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        *exists = 1;
        if (n < 0 || strncmp(buf, "kvq database\n", 13) != 0)
            rc = kvq__error(KVQ_EDAMAGED, "%s is not a kvq marker: the database is damaged", p);
        else if (strcmp(buf, MARKER_TEXT) != 0)
            rc = kvq__error(KVQ_EDAMAGED, "%s names a format this kvq does not know", p);
    }
    kvq__free(p);
    return rc;
}

static int check_meta(emb_db *e)
{
    sqlite3_stmt *st = NULL;
    int rc =
        sqlite3_prepare_v2(e->writer, "SELECT value FROM meta WHERE name='format'", -1, &st, NULL);
    if (rc != SQLITE_OK) {
        int code =
            rc == SQLITE_ERROR
                ? kvq__error(KVQ_EDAMAGED, "%s has no kvq tables: the database is damaged", e->path)
                : emb_sqlite_error(e->writer, rc, "reading the database format");
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
                              e->path, (long long)sqlite3_column_int64(st, 0), FORMAT_VERSION);
    } else if (rc == SQLITE_DONE) {
        code =
            kvq__error(KVQ_EDAMAGED, "%s has no format record: the database is damaged", e->path);
    } else {
        code = emb_sqlite_error(e->writer, rc, "reading the database format");
    }
    sqlite3_finalize(st);
    return code;
}

static int open_lock_file(emb_db *e)
{
    char *p = path_join(e->dir, "kvq.lock");
    if (p == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    int flags = (e->opts.flags & KVQ_DB_READ_ONLY) ? O_RDONLY : (O_RDWR | O_CREAT);
    e->lock_fd = open(p, flags | O_CLOEXEC, e->opts.file_mode);
    int rc = e->lock_fd < 0 ? errno_error(errno, "cannot open", p) : 0;
    kvq__free(p);
    return rc;
}

static void emb_close(void *ep);

static int emb_open(void **out, kvq_db *db, const char *dir, const kvq__db_opts *opts)
{
    emb_db *e = kvq__calloc(1, sizeof(*e));
    if (e == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    e->db = db;
    e->opts = *opts;
    e->lock_fd = -1;
    e->shm_fd = -1;
    e->cq_fd = -1;
    e->cq_own = -1;

    pthread_mutex_init(&e->pool_mu, NULL);
    pthread_mutex_init(&e->gc_mu, NULL);
    pthread_mutex_init(&e->watch_mu, NULL);
    pthread_mutex_init(&e->sync_mu, NULL);
    e->wal_fd = -1;
    /* KVQ_TEST_ACK_BEFORE_SYNC is the test-only broken engine of the sync-order checker: it
     * stops syncing each commit while the handle still claims to be durable. */
    e->durable = !(opts->flags & KVQ_DB_RELAXED) && !(opts->test_flags & KVQ_TEST_ACK_BEFORE_SYNC);
    e->dir = kvq__strdup(dir);
    e->path = e->dir != NULL ? path_join(dir, "data.db") : NULL;
    int rc = 0;
    if (e->dir == NULL || e->path == NULL) {
        rc = kvq__error(KVQ_ENOMEM, "out of memory");
        goto fail;
    }

    struct stat st;
    int created_dir = 0;
    if (stat(dir, &st) != 0) {
        if (errno != ENOENT) {
            rc = errno_error(errno, "cannot access", dir);
            goto fail;
        }
        if (opts->flags & (KVQ_DB_NO_CREATE | KVQ_DB_READ_ONLY)) {
            rc = kvq__error(KVQ_ENOTFOUND, "no database at %s", dir);
            goto fail;
        }
        /* The directory gets execute bits wherever the files get read bits. */
        mode_t dmode = (mode_t)(opts->file_mode | ((opts->file_mode & 0444) >> 2));
        if (mkdir(dir, dmode) != 0 && errno != EEXIST) {
            rc = errno_error(errno, "cannot create the database directory", dir);
            goto fail;
        }
        created_dir = 1;
    } else if (!S_ISDIR(st.st_mode)) {
        rc = kvq__error(KVQ_EINVAL, "%s is not a directory (a kvq database is a directory)", dir);
        goto fail;
    }

    int marker = 0;
    rc = check_marker(dir, &marker);
    if (rc != 0)
        goto fail;
    if (marker) {
        rc = check_file(e->path);
        if (rc != 0)
            goto fail;
    } else if (opts->flags & (KVQ_DB_NO_CREATE | KVQ_DB_READ_ONLY)) {
        rc = kvq__error(KVQ_ENOTFOUND, "no kvq database in %s", dir);
        goto fail;
    }

    rc = open_lock_file(e);
    if (rc != 0)
        goto fail;

    if (!marker) {
        /* Create (or finish creating) the database. Creation is serialised by the commit lock
         * so that two processes creating one database at once do not race. */
        while (flock(e->lock_fd, LOCK_EX) != 0 && errno == EINTR) {
        }
        int fd = open(e->path, O_RDWR | O_CREAT | O_CLOEXEC, opts->file_mode);
        if (fd < 0) {
            rc = errno_error(errno, "cannot create", e->path);
        } else {
            close(fd);
            rc = open_sqlite(e, &e->writer, 1);
            if (rc == 0)
                rc = exec(e->writer, "PRAGMA journal_mode=WAL;", "setting WAL mode");
            if (rc == 0)
                rc = exec(e->writer, SCHEMA, "creating the tables");
            if (rc == 0)
                rc = check_meta(e);
            if (rc == 0)
                rc = write_marker(dir, opts->file_mode);
            if (rc == 0 && created_dir) {
                char *parent = kvq__strdup(dir);
                if (parent != NULL) {
                    char *slash = strrchr(parent, '/');
                    if (slash == NULL)
                        strcpy(parent, ".");
                    else if (slash == parent)
                        slash[1] = '\0';
                    else
                        *slash = '\0';
                    rc = fsync_dir(parent);
                    kvq__free(parent);
                }
            }
        }
        flock(e->lock_fd, LOCK_UN);
        if (rc != 0)
            goto fail;
    } else {
        rc = open_sqlite(e, &e->writer, 0);
        if (rc == 0)
            rc = check_meta(e);
        if (rc != 0)
            goto fail;
        sqlite3_stmt *jm = NULL;
        if (sqlite3_prepare_v2(e->writer, "PRAGMA journal_mode", -1, &jm, NULL) == SQLITE_OK &&
            sqlite3_step(jm) == SQLITE_ROW) {
            const char *mode = (const char *)sqlite3_column_text(jm, 0);
            if ((mode == NULL || strcmp(mode, "wal") != 0) && !wal_header(e))
                rc = kvq__error(KVQ_EDAMAGED, "%s is not in WAL mode: not a kvq database file",
                                e->path);
        }
        sqlite3_finalize(jm);
        if (rc != 0)
            goto fail;
    }
    rc = prepare_writer(e);
    if (rc != 0)
        goto fail;
    rc = emb_shm_open(e);
    if (rc == 0) {
        emb_rv_clock_open(e);
        emb_cq_open(e);
    }
    if (rc == 0 && !(opts->flags & KVQ_DB_READ_ONLY))
        rc = exec(e->writer, "PRAGMA journal_size_limit=67108864;", "limiting the WAL size");
    if (rc == 0)
        rc = emb_ckpt_start(e);
    if (rc == 0)
        emb_reserve_open(e);
    if (rc == 0)
        rc = emb_sync_open(e);
    if (rc != 0)
        goto fail;
    *out = e;
    return 0;
fail:
    emb_close(e);
    return rc;
}

static void emb_close(void *ep)
{
    emb_db *e = ep;
    if (e == NULL)
        return;
    emb_ckpt_stop(e);
    emb_watch_shutdown(e);
    while (e->pool != NULL) {
        emb_conn *c = e->pool;
        e->pool = c->next;
        conn_close(c);
    }
    sqlite3_stmt *stmts[] = { e->w_get,       e->w_put,      e->w_del,
                              e->w_del_range, e->w_version,  e->w_wlog_scan,
                              e->w_wlog_put,  e->w_meta_get, e->w_meta_put };
    for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++)
        sqlite3_finalize(stmts[i]);
    if (e->writer != NULL)
        sqlite3_close_v2(e->writer);
    if (e->lock_fd >= 0)
        close(e->lock_fd);
    pthread_mutex_destroy(&e->pool_mu);
    pthread_mutex_destroy(&e->gc_mu);
    pthread_mutex_destroy(&e->watch_mu);
    emb_sync_close(e);
    emb_cq_close(e);
    pthread_mutex_destroy(&e->sync_mu);
    kvq__free(e->dir);
    kvq__free(e->path);
    kvq__free(e);
}

/* The engine table, with the transaction operations from txn.c and commit.c. */
const kvq__engine_ops kvq__embedded_ops = {
    .version = KVQ__ENGINE_OPS_VERSION,
    .name = "embedded",
    .open = emb_open,
    .close = emb_close,
    .txn_create = emb_txn_create,
    .txn_destroy = emb_txn_destroy,
    .txn_reset = emb_txn_reset,
    .get = emb_get,
    .get_range = emb_get_range,
    .set = emb_set,
    .clear_range = emb_clear_range,
    .atomic_op = emb_atomic_op,
    .add_conflict_range = emb_add_conflict_range,
    .get_read_version = emb_get_read_version,
    .commit = emb_commit,
    .get_committed_version = emb_get_committed_version,
    .get_versionstamp = emb_get_versionstamp,
    .set_read_version = emb_set_read_version,
    .get_approximate_size = emb_get_approximate_size,
    .set_option = emb_set_option,
    .watch = emb_watch_create,
    .watch_release = emb_watch_release,
};
