/* Which SQLite pages one durable-queue push and one pop write, counted from the WAL itself.
 *
 * After each operation the new frames of data.db-wal (those whose salt matches the WAL header,
 * past the last frame already counted) are read; each frame is one page written by a commit,
 * and the page number is looked up in SQLite's dbstat table (a separate read connection) to name
 * the table or index it belongs to. A raw SQLite table queue (bench/compare's: INSERT, and
 * DELETE ... WHERE id = (SELECT min(id)) RETURNING) is measured the same way for comparison.
 *
 *   wal_pages [--n N] [--dir DIR] [--size B] [--only kvq|sqlite] [--no-scan]
 *
 * Prints, per operation kind, commits per operation, WAL frames per commit and the frames per
 * operation of each table. With --no-scan it only runs and times the operations, one at a time,
 * kvq's and raw SQLite's interleaved in chunks of 50 on the same disk (the ratio of the two is
 * the figure to compare); with --only as well, just that system's, untimed by the other. A
 * checkpoint restarts the WAL; the tool notices the new salt and counts from the start again, so
 * nothing is lost or counted twice. */
#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvq/kvq.h"

#define MAX_NAMES 32

typedef struct tally {
    const char *what;
    long ops, commits, frames;
    double secs; /* time the operations took (with --no-scan: nothing else is timed) */
    char names[MAX_NAMES][64];
    long counts[MAX_NAMES];
    int n_names;
} tally;

typedef struct walpos {
    uint32_t salt1, salt2;
    long frames; /* frames of this salt already counted */
} walpos;

static char wal_path[700], db_path[700];
static int no_scan; /* --no-scan: only run the operations (for strace -c) */
static uint32_t page_size = 4096;

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void tally_add(tally *t, const char *name)
{
    for (int i = 0; i < t->n_names; i++) {
        if (strcmp(t->names[i], name) == 0) {
            t->counts[i]++;
            return;
        }
    }
    if (t->n_names < MAX_NAMES) {
        snprintf(t->names[t->n_names], sizeof(t->names[0]), "%s", name);
        t->counts[t->n_names++] = 1;
    }
}

/* The table (or index) that owns page pgno now; "freelist/other" when dbstat does not list it. */
static sqlite3_stmt *owner_st;

static void page_owner(sqlite3 *ro, uint32_t pgno, char *out, size_t cap)
{
    sqlite3_stmt *st = owner_st;
    if (st == NULL && sqlite3_prepare_v2(ro, "SELECT name, pagetype FROM dbstat WHERE pageno = ?1",
                                         -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "dbstat: %s\n", sqlite3_errmsg(ro));
        exit(1);
    }
    owner_st = st;
    sqlite3_bind_int64(st, 1, pgno);
    if (sqlite3_step(st) == SQLITE_ROW)
        snprintf(out, cap, "%s %s%s", (const char *)sqlite3_column_text(st, 0),
                 (const char *)sqlite3_column_text(st, 1), pgno == 1 ? " (page 1)" : "");
    else
        snprintf(out, cap, "freelist/other");
    sqlite3_reset(st);
}

static int varint(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < 9 && p + i < end; i++) {
        if (i == 8) {
            *v = x << 8 | p[i];
            return 9;
        }
        x = x << 7 | (p[i] & 0x7f);
        if (!(p[i] & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    *v = 0;
    return 0;
}

/* What kind of queue key cell `i` of an index-leaf page (a kv row: key, value, crc) holds. The
 * durable queue's keys are \x01q\x00 + \x01npush\x00 / \x01npop\x00 (counters),
 * \x01val\x00 + versionstamp (items), and \xff + tuple(tag, ...) for its bookkeeping. */
static const char *cell_kind(const uint8_t *pg, uint32_t i)
{
    const uint8_t *end = pg + page_size;
    uint32_t off = (uint32_t)pg[8 + 2 * i] << 8 | pg[9 + 2 * i];
    if (off >= page_size)
        return "?";
    const uint8_t *c = pg + off;
    uint64_t n, hsz, st;
    c += varint(c, end, &n);
    const uint8_t *rec = c;
    c += varint(c, end, &hsz);
    varint(c, end, &st);
    const uint8_t *k = rec + hsz;
    if (st < 12 || k + 8 > end)
        return "?";
    if (k[0] != 1 || k[1] != 'q' || k[2] != 0)
        return "other";
    if (k[3] == 1 && k[4] == 'n')
        return "counters";
    if (k[3] == 1 && k[4] == 'v')
        return "items";
    if (k[3] == 0xff && k[4] == 2) {
        if (k[5] == 'm' && k[6] == 0)
            return "push markers";
        if (k[5] == 'r' && k[6] == 0)
            return "pop result slots";
        return "clock/other bookkeeping";
    }
    return "other";
}

/* Counts the frames appended since pos into t. */
static void scan_wal(sqlite3 *ro, walpos *pos, tally *t)
{
    if (no_scan)
        return;
    int fd = open(wal_path, O_RDONLY);
    if (fd < 0)
        return;
    uint8_t h[32];
    if (pread(fd, h, 32, 0) != 32) {
        close(fd);
        return;
    }
    page_size = be32(h + 8);
    uint32_t s1 = be32(h + 16), s2 = be32(h + 20);
    if (s1 != pos->salt1 || s2 != pos->salt2) {
        pos->salt1 = s1;
        pos->salt2 = s2;
        pos->frames = 0;
    }
    /* A read transaction on ro makes dbstat see the pages as they are now. */
    sqlite3_exec(ro, "BEGIN", NULL, NULL, NULL);
    for (long i = pos->frames;; i++) {
        uint8_t fh[24];
        off_t off = 32 + (off_t)i * (24 + page_size);
        if (pread(fd, fh, 24, off) != 24 || be32(fh + 8) != s1 || be32(fh + 12) != s2)
            break;
        char name[64];
        page_owner(ro, be32(fh), name, sizeof(name));
        uint8_t pg[65536];
        if (strcmp(name, "kv leaf") == 0 && page_size <= sizeof(pg) &&
            pread(fd, pg, page_size, off + 24) == (ssize_t)page_size && pg[0] == 0x0a) {
            uint32_t cells = (uint32_t)pg[3] << 8 | pg[4];
            const char *a = cells ? cell_kind(pg, 0) : "empty";
            const char *b = cells ? cell_kind(pg, cells - 1) : "empty";
            if (strcmp(a, b) == 0)
                snprintf(name, sizeof(name), "kv leaf: %s", a);
            else
                snprintf(name, sizeof(name), "kv leaf: %s .. %s", a, b);
        }
        tally_add(t, name);
        t->frames++;
        if (be32(fh + 4) != 0)
            t->commits++;
        pos->frames = i + 1;
    }
    sqlite3_exec(ro, "COMMIT", NULL, NULL, NULL);
    close(fd);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void print_tally(const tally *t)
{
    if (no_scan) {
        printf("%s: %ld operations, %.0f per second\n", t->what, t->ops, (double)t->ops / t->secs);
        return;
    }
    printf("\n%s: %ld operations, %.2f commits per operation, %.2f WAL frames (pages) per "
           "commit, %.2f per operation\n",
           t->what, t->ops, (double)t->commits / (double)t->ops,
           t->commits ? (double)t->frames / (double)t->commits : 0.0,
           (double)t->frames / (double)t->ops);
    printf("| page of | frames per operation |\n|---|---:|\n");
    for (int i = 0; i < t->n_names; i++)
        printf("| %s | %.2f |\n", t->names[i], (double)t->counts[i] / (double)t->ops);
}

static void die_kvq(const char *what, int rc)
{
    fprintf(stderr, "%s: %s (%s)\n", what, kvq_strerror(rc), kvq_last_error());
    exit(1);
}

static sqlite3 *open_ro(void)
{
    sqlite3 *ro;
    if (sqlite3_open_v2(db_path, &ro, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        fprintf(stderr, "open %s: %s\n", db_path, sqlite3_errmsg(ro));
        exit(1);
    }
    return ro;
}

static void run_kvq(const char *base, long n, size_t size)
{
    char dir[560];
    snprintf(dir, sizeof(dir), "%s/kvq", base);
    snprintf(db_path, sizeof(db_path), "%s/data.db", dir);
    snprintf(wal_path, sizeof(wal_path), "%s/data.db-wal", dir);
    kvq_db *db;
    kvq_queue *q;
    int rc = kvq_db_open(&db, dir, NULL);
    if (rc != 0)
        die_kvq("open", rc);
    rc = kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL);
    if (rc != 0)
        die_kvq("queue", rc);
    uint8_t *val = calloc(1, size);
    kvq_buf out = KVQ_BUF_INIT;
    /* Warm up: the queue's clock, its first pages. */
    for (int i = 0; i < 50; i++) {
        if ((rc = kvq_queue_push(q, val, size)) != 0)
            die_kvq("push", rc);
    }
    for (int i = 0; i < 25; i++) {
        if ((rc = kvq_queue_pop(&out, q)) != 0)
            die_kvq("pop", rc);
    }
    sqlite3 *ro = open_ro();
    walpos pos = { 0 };
    tally dummy = { 0 }, push = { .what = "kvq durable queue, kvq_queue_push" },
          pop = { .what = "kvq durable queue, kvq_queue_pop" };
    scan_wal(ro, &pos, &dummy);
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        memcpy(val, &i, sizeof(i) < size ? sizeof(i) : size);
        if ((rc = kvq_queue_push(q, val, size)) != 0)
            die_kvq("push", rc);
        push.ops++;
        scan_wal(ro, &pos, &push);
    }
    double t1 = now_s();
    for (long i = 0; i < n; i++) {
        if ((rc = kvq_queue_pop(&out, q)) != 0)
            die_kvq("pop", rc);
        pop.ops++;
        scan_wal(ro, &pos, &pop);
    }
    push.secs = t1 - t0;
    pop.secs = now_s() - t1;
    print_tally(&push);
    print_tally(&pop);
    sqlite3_finalize(owner_st);
    owner_st = NULL;
    sqlite3_close(ro);
    kvq_buf_dispose(&out);
    free(val);
    kvq_queue_close(q);
    kvq_db_close(db);
}

static void run_sqlite(const char *base, long n, size_t size)
{
    snprintf(db_path, sizeof(db_path), "%s/raw.db", base);
    snprintf(wal_path, sizeof(wal_path), "%s/raw.db-wal", base);
    sqlite3 *db;
    sqlite3_stmt *ins, *del;
    if (sqlite3_open(db_path, &db) != SQLITE_OK ||
        sqlite3_exec(db,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                     "CREATE TABLE q (id INTEGER PRIMARY KEY, body BLOB NOT NULL)",
                     NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO q(body) VALUES (?1)", -1, &ins, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "DELETE FROM q WHERE id = (SELECT min(id) FROM q) RETURNING body",
                           -1, &del, NULL) != SQLITE_OK) {
        fprintf(stderr, "sqlite: %s\n", sqlite3_errmsg(db));
        exit(1);
    }
    uint8_t *val = calloc(1, size);
    for (int i = 0; i < 50; i++) {
        sqlite3_bind_blob(ins, 1, val, (int)size, SQLITE_STATIC);
        sqlite3_step(ins);
        sqlite3_reset(ins);
    }
    for (int i = 0; i < 25; i++) {
        sqlite3_step(del);
        sqlite3_reset(del);
    }
    sqlite3 *ro = open_ro();
    walpos pos = { 0 };
    tally dummy = { 0 }, push = { .what = "raw SQLite table queue, INSERT" },
          pop = { .what = "raw SQLite table queue, DELETE ... RETURNING" };
    scan_wal(ro, &pos, &dummy);
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        sqlite3_bind_blob(ins, 1, val, (int)size, SQLITE_STATIC);
        sqlite3_step(ins);
        sqlite3_reset(ins);
        push.ops++;
        scan_wal(ro, &pos, &push);
    }
    double t1 = now_s();
    for (long i = 0; i < n; i++) {
        sqlite3_step(del);
        sqlite3_reset(del);
        pop.ops++;
        scan_wal(ro, &pos, &pop);
    }
    push.secs = t1 - t0;
    pop.secs = now_s() - t1;
    print_tally(&push);
    print_tally(&pop);
    sqlite3_finalize(owner_st);
    owner_st = NULL;
    sqlite3_close(ro);
    sqlite3_finalize(ins);
    sqlite3_finalize(del);
    sqlite3_close(db);
    free(val);
}

/* --no-scan: kvq's queue and raw SQLite's, interleaved in chunks of 50 operations (kvq first in
 * even chunks, SQLite first in odd ones), so that both see the same disk; each is timed. */
static void run_interleaved(const char *base, long n, size_t size)
{
    char dir[560], raw[560];
    snprintf(dir, sizeof(dir), "%s/kvq", base);
    snprintf(raw, sizeof(raw), "%s/raw.db", base);
    kvq_db *db;
    kvq_queue *q;
    int rc = kvq_db_open(&db, dir, NULL);
    if (rc != 0)
        die_kvq("open", rc);
    rc = kvq_queue_open(&q, db, KVQ_QUEUE_DURABLE, NULL, NULL);
    if (rc != 0)
        die_kvq("queue", rc);
    sqlite3 *sdb;
    sqlite3_stmt *ins, *del;
    if (sqlite3_open(raw, &sdb) != SQLITE_OK ||
        sqlite3_exec(sdb,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                     "CREATE TABLE q (id INTEGER PRIMARY KEY, body BLOB NOT NULL)",
                     NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(sdb, "INSERT INTO q(body) VALUES (?1)", -1, &ins, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(sdb, "DELETE FROM q WHERE id = (SELECT min(id) FROM q) RETURNING body",
                           -1, &del, NULL) != SQLITE_OK) {
        fprintf(stderr, "sqlite: %s\n", sqlite3_errmsg(sdb));
        exit(1);
    }
    uint8_t *val = calloc(1, size);
    kvq_buf out = KVQ_BUF_INIT;
    tally t[4] = { { .what = "kvq durable queue, kvq_queue_push" },
                   { .what = "kvq durable queue, kvq_queue_pop" },
                   { .what = "raw SQLite table queue, INSERT" },
                   { .what = "raw SQLite table queue, DELETE ... RETURNING" } };
    const long chunk = 50;
    for (int phase = 0; phase < 2; phase++) {
        for (long c = 0; c * chunk < n; c++) {
            for (int k = 0; k < 2; k++) {
                int sys = (int)((c + k) % 2); /* 0 kvq, 1 SQLite */
                tally *x = &t[sys * 2 + phase];
                double t0 = now_s();
                for (long i = 0; i < chunk; i++) {
                    if (sys == 0 && phase == 0)
                        rc = kvq_queue_push(q, val, size);
                    else if (sys == 0)
                        rc = kvq_queue_pop(&out, q);
                    if (sys == 0 && rc != 0)
                        die_kvq(phase == 0 ? "push" : "pop", rc);
                    if (sys == 1) {
                        sqlite3_stmt *st = phase == 0 ? ins : del;
                        if (phase == 0)
                            sqlite3_bind_blob(ins, 1, val, (int)size, SQLITE_STATIC);
                        if (sqlite3_step(st) == SQLITE_ERROR) {
                            fprintf(stderr, "sqlite: %s\n", sqlite3_errmsg(sdb));
                            exit(1);
                        }
                        sqlite3_reset(st);
                    }
                    x->ops++;
                }
                x->secs += now_s() - t0;
            }
        }
    }
    for (int i = 0; i < 4; i++)
        print_tally(&t[i]);
    kvq_buf_dispose(&out);
    free(val);
    sqlite3_finalize(ins);
    sqlite3_finalize(del);
    sqlite3_close(sdb);
    kvq_queue_close(q);
    kvq_db_close(db);
}

int main(int argc, char **argv)
{
    long n = 2000;
    size_t size = 100;
    const char *dir = NULL, *only = "";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
            n = atol(argv[++i]);
        else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc)
            size = (size_t)atol(argv[++i]);
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc)
            only = argv[++i];
        else if (strcmp(argv[i], "--no-scan") == 0)
            no_scan = 1;
        else {
            fprintf(stderr, "usage: wal_pages [--n N] [--size B] [--dir DIR] [--only kvq|sqlite] "
                            "[--no-scan]\n");
            return 2;
        }
    }
    if (size < 1)
        size = 1;
    char base[512];
    snprintf(base, sizeof(base), "%s/kvq-walpages-XXXXXX",
             dir ? dir : (getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp"));
    if (mkdtemp(base) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    printf("WAL frames written per operation, %zu-byte values, %ld pushes then %ld pops\n", size, n,
           n);
    if (no_scan && only[0] == '\0')
        run_interleaved(base, n, size);
    else if (strcmp(only, "sqlite") != 0)
        run_kvq(base, n, size);
    if (!no_scan && strcmp(only, "kvq") != 0)
        run_sqlite(base, n, size);
    else if (no_scan && strcmp(only, "sqlite") == 0)
        run_sqlite(base, n, size);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", base);
    return 0;
}
