/* Damaged and inaccessible databases: every case ends in a clean error, never a crash, a hang,
 * wrong data, or an empty database passed off as the old one. Each case runs in a child process
 * with a time limit, and the damaged main file and marker must be left byte for byte as they
 * were (kvq reports damage; it never "repairs" it behind the caller's back). The group prints
 * "badinput: cases=... clean_errors=... opened_intact=... crashes=0 hangs=0 files_changed=0". */
#include "kvq_test.h"
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "kvq/kvq.h"

static char base[64];
static int counter;
static unsigned probe_flags; /* extra kvq_db_options flags of the probing child */

/* Totals for the summary line. */
static struct {
    int cases, clean_errors, intact, crashes, hangs, files_changed;
} bi;

/* FNV-1a of a file's bytes (0 when it does not exist). */
static uint64_t file_hash(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return 0;
    uint64_t h = 0xcbf29ce484222325ull;
    int c;
    while ((c = getc(f)) != EOF)
        h = (h ^ (uint8_t)c) * 0x100000001b3ull;
    fclose(f);
    return h;
}

static uint64_t dir_hash(const char *dir)
{
    char path[200];
    snprintf(path, sizeof(path), "%s/data.db", dir);
    uint64_t h = file_hash(path);
    snprintf(path, sizeof(path), "%s/kvq.marker", dir);
    return h * 31 + file_hash(path);
}

static void new_dir(char *out, size_t n)
{
    snprintf(out, n, "%s/db%d", base, counter++);
}

#define VALUE_MARK "kvq-value-marker-0123456789"

/* Creates a database holding 50 keys whose values contain VALUE_MARK, checkpointed into the
 * main file. */
static void make_db(const char *dir)
{
    kvq_db *db;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    for (int i = 0; i < 50; i++) {
        char k[16], v[64];
        int kn = snprintf(k, sizeof(k), "k%03d", i);
        int vn = snprintf(v, sizeof(v), "%s-%03d", VALUE_MARK, i);
        assert_int_equal(kvq_txn_set(t, (uint8_t *)k, (size_t)kn, (uint8_t *)v, (size_t)vn), 0);
    }
    assert_int_equal(kvq_txn_commit(t), 0);
    kvq_txn_destroy(t);
    kvq_db_close(db); /* closing checkpoints the WAL into data.db */
}

/* In a child with a 20 s alarm: open the database and read every key. Returns the kvq error
 * seen first (0 if all went well), or -1 if the child died from a signal. */
static int probe_child(const char *dir, int *read_all, int *hang);

static int probe(const char *dir, int *read_all)
{
    uint64_t before = dir_hash(dir);
    int hang = 0;
    int rc = probe_child(dir, read_all, &hang);
    bi.cases++;
    if (hang)
        bi.hangs++;
    else if (rc == -1)
        bi.crashes++;
    else if (rc == 0)
        bi.intact++;
    else
        bi.clean_errors++;
    uint64_t after = dir_hash(dir);
    bi.files_changed += after != before;
    assert_true(after == before);
    return rc;
}

/* The start of most cases: a fresh database of make_db in dir, and the path of its file name. */
static void damage_case(char *dir, size_t dir_cap, char *file, size_t file_cap, const char *name)
{
    new_dir(dir, dir_cap);
    make_db(dir);
    snprintf(file, file_cap, "%s/%s", dir, name);
}

/* The end of most cases: the damage is found and reported, and nothing is changed (probe). */
static void expect_damaged(const char *dir)
{
    int all = 0;
    assert_int_equal(probe(dir, &all), KVQ_EDAMAGED);
}

/* The end of the others: the database opens and every row reads back (probe). */
static void expect_intact(const char *dir)
{
    int all = 0;
    assert_int_equal(probe(dir, &all), 0);
    assert_true(all);
}

/* probe with the database opened read-only. */
static int probe_read_only(const char *dir, int *read_all)
{
    probe_flags = KVQ_DB_READ_ONLY;
    int rc = probe(dir, read_all);
    probe_flags = 0;
    return rc;
}

/* Writes `len` bytes of `fill` over the file at path (created when it is missing). */
static void fill_file(const char *path, int fill, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    uint8_t junk[4096];
    memset(junk, fill, sizeof(junk));
    for (size_t done = 0; done < len;) {
        size_t n = len - done < sizeof(junk) ? len - done : sizeof(junk);
        assert_int_equal(write(fd, junk, n), (ssize_t)n);
        done += n;
    }
    close(fd);
}

static int probe_child(const char *dir, int *read_all, int *hang)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        alarm(20);
        kvq_db_options o = KVQ_DB_OPTIONS_INIT;
        o.flags |= KVQ_DB_NO_CREATE | probe_flags;
        kvq_db *db;
        int res[2] = { 0, 0 };
        int rc = kvq_db_open(&db, dir, &o);
        if (rc == 0) {
            kvq_txn *t;
            rc = kvq_txn_create(&t, db);
            const kvq_kv *kvs;
            size_t n = 0;
            if (rc == 0)
                rc = kvq_txn_get_range(&kvs, &n, NULL, t, (const uint8_t *)"k", 1,
                                       (const uint8_t *)"l", 1, 0, 0);
            if (rc == 0) {
                res[1] = n == 50;
                for (size_t i = 0; i < n && res[1]; i++)
                    res[1] = kvs[i].value.len == strlen(VALUE_MARK) + 4 &&
                             memcmp(kvs[i].value.data, VALUE_MARK, strlen(VALUE_MARK)) == 0;
            }
            kvq_txn_destroy(t);
            kvq_db_close(db);
        }
        res[0] = rc;
        if (write(fds[1], res, sizeof(res)) != (ssize_t)sizeof(res))
            _exit(2);
        _exit(0);
    }
    close(fds[1]);
    int res[2] = { -1, 0 };
    ssize_t got = read(fds[0], res, sizeof(res));
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    *hang = WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM;
    if (!WIFEXITED(status) || got != (ssize_t)sizeof(res))
        return -1;
    *read_all = res[1];
    return res[0];
}

static off_t find(const char *path, const char *needle)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    size_t nl = strlen(needle);
    for (size_t i = 0; i + nl <= n; i++)
        if (memcmp(buf + i, needle, nl) == 0)
            return (off_t)i;
    return -1;
}

static void flip(const char *path, off_t off, uint8_t mask)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, off), 1);
    b ^= mask;
    assert_int_equal(pwrite(fd, &b, 1, off), 1);
    close(fd);
}

static void test_intact(void **state)
{
    (void)state;
    char dir[128];
    new_dir(dir, sizeof(dir));
    make_db(dir);
    expect_intact(dir);
}

static void test_value_bit_flip(void **state)
{
    (void)state;
    char dir[128], file[160];
    damage_case(dir, sizeof(dir), file, sizeof(file), "data.db");
    off_t off = find(file, VALUE_MARK "-017");
    assert_true(off > 0);
    flip(file, off + 3, 0x01);
    expect_damaged(dir);
}

static void test_key_bit_flip(void **state)
{
    (void)state;
    char dir[128], file[160];
    damage_case(dir, sizeof(dir), file, sizeof(file), "data.db");
    /* Keys are stored next to their values: find "k023" followed by the marker. */
    off_t off = find(file, "k023");
    assert_true(off > 0);
    flip(file, off + 3, 0x02); /* k023 -> k021: a key that exists elsewhere */
    int all = 0;
    int rc = probe(dir, &all);
    /* Either the checksum or SQLite's own checks catch it; never silent wrong data. */
    assert_true(rc == KVQ_EDAMAGED);
}

static void test_header_garbage(void **state)
{
    (void)state;
    char dir[128], file[160];
    damage_case(dir, sizeof(dir), file, sizeof(file), "data.db");
    for (int i = 0; i < 16; i++)
        flip(file, i, 0x5a);
    expect_damaged(dir);
}

static void test_junk_of_the_right_size(void **state)
{
    (void)state;
    char dir[128], file[160];
    damage_case(dir, sizeof(dir), file, sizeof(file), "data.db");
    struct stat st;
    assert_int_equal(stat(file, &st), 0);
    int fd = open(file, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    srand(7);
    for (off_t i = 0; i < st.st_size; i++) {
        uint8_t b = (uint8_t)rand();
        assert_int_equal(write(fd, &b, 1), 1);
    }
    close(fd);
    expect_damaged(dir);
}

static void test_wal_garbage(void **state)
{
    (void)state;
    /* A WAL of junk: SQLite's checksums reject its frames, so the committed data (already in
     * the main file) reads as it was. */
    char dir[128], file[160];
    damage_case(dir, sizeof(dir), file, sizeof(file), "data.db-wal");
    fill_file(file, 0x37, 8192);
    expect_intact(dir);
}

static void test_shm_garbage(void **state)
{
    (void)state;
    char dir[128], file[160];
    damage_case(dir, sizeof(dir), file, sizeof(file), "data.db-shm");
    fill_file(file, 0xa5, 32768);
    snprintf(file, sizeof(file), "%s/kvq.shm", dir);
    fill_file(file, 0xa5, 4096);
    expect_intact(dir);
}

/* Writes kvq.shm: `len` bytes of `fill`, then (if floor > 0) a kvq-looking layout whose
 * rv_floor is `floor`. */
static void write_shm(const char *dir, size_t len, int fill, uint32_t magic, int64_t floor)
{
    char file[160];
    snprintf(file, sizeof(file), "%s/kvq.shm", dir);
    int fd = open(file, O_WRONLY | O_TRUNC);
    assert_true(fd >= 0);
    uint8_t page[4096];
    memset(page, fill, sizeof(page));
    if (magic != 0)
        memcpy(page, &magic, 4);
    if (floor > 0)
        memcpy(page + 24, &floor, 8); /* emb_shm's rv_floor */
    if (len > 0)
        assert_int_equal(write(fd, page, len), (ssize_t)len);
    close(fd);
}

/* A short or foreign kvq.shm opened read-only: a clean error (it cannot be mended read-only),
 * never SIGBUS from reading past the end of the file. */
static void test_shm_short_or_foreign_read_only(void **state)
{
    (void)state;
    static const size_t lens[] = { 0, 100, 4095 };
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        char dir[128];
        new_dir(dir, sizeof(dir));
        make_db(dir);
        write_shm(dir, lens[i], 0, 0, 0);
        int all = 0;
        assert_int_equal(probe_read_only(dir, &all), KVQ_EDAMAGED);
    }
    char dir[128];
    new_dir(dir, sizeof(dir));
    make_db(dir);
    write_shm(dir, 4096, 0x5a, 0x12345678u, 0);
    int all = 0;
    assert_int_equal(probe_read_only(dir, &all), KVQ_EDAMAGED);
    /* A read-write open rebuilds it; read-only opens work again afterwards. */
    expect_intact(dir);
    assert_int_equal(probe_read_only(dir, &all), 0);
    assert_true(all);
}

/* A short kvq.shm, or one that is not kvq's, opened read-write: rebuilt from zeros. Garbage in
 * it must not leak into versions: a foreign page whose rv_floor field holds a time ten days
 * ahead does not push commit versions there. */
static void test_shm_short_or_foreign_rebuilt(void **state)
{
    (void)state;
    char dir[128];
    new_dir(dir, sizeof(dir));
    make_db(dir);
    write_shm(dir, 100, 0x11, 0, 0);
    expect_intact(dir);

    new_dir(dir, sizeof(dir));
    make_db(dir);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    write_shm(dir, 4096, 0, 0x0badf00du, now + 10LL * 86400 * 1000000);
    kvq_db *db;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    assert_int_equal(kvq_txn_set(t, (const uint8_t *)"x", 1, (const uint8_t *)"1", 1), 0);
    assert_int_equal(kvq_txn_commit(t), 0);
    int64_t cv = 0;
    assert_int_equal(kvq_txn_get_committed_version(&cv, t), 0);
    kvq_txn_destroy(t);
    kvq_db_close(db);
    assert_true(cv < now + 3600LL * 1000000);
}

/* Cuts data.db to `keep` bytes (0: an empty file, which SQLite would open as a new, empty
 * database: kvq's marker must make that an error). */
static void truncate_case(long keep_num, long keep_den)
{
    char dir[128], file[160];
    damage_case(dir, sizeof(dir), file, sizeof(file), "data.db");
    struct stat st;
    assert_int_equal(stat(file, &st), 0);
    assert_int_equal(truncate(file, st.st_size * keep_num / keep_den), 0);
    expect_damaged(dir);
}

static void test_zero_length_file(void **state)
{
    (void)state;
    truncate_case(0, 1);
}

static void test_truncated_to_half(void **state)
{
    (void)state;
    truncate_case(1, 2);
}

static void test_data_file_missing(void **state)
{
    (void)state;
    char dir[128], file[160];
    damage_case(dir, sizeof(dir), file, sizeof(file), "data.db");
    assert_int_equal(unlink(file), 0);
    expect_damaged(dir);
    struct stat st;
    assert_int_not_equal(stat(file, &st), 0); /* not re-created empty */
}

static void test_marker_damaged(void **state)
{
    (void)state;
    char dir[128], file[160];
    damage_case(dir, sizeof(dir), file, sizeof(file), "kvq.marker");
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fputs("something else\n", f);
    fclose(f);
    expect_damaged(dir);
}

/* A database written by an earlier layout (format 1: the version in a meta row, a log row per
 * write range) is refused with a clear error, not misread and not converted. */
static void test_old_format_refused(void **state)
{
    (void)state;
    char dir[128], file[160];
    damage_case(dir, sizeof(dir), file, sizeof(file), "data.db");
    sqlite3 *db;
    assert_int_equal(sqlite3_open(file, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "UPDATE meta SET value = 1 WHERE name = 'format';"
                                  "PRAGMA wal_checkpoint(TRUNCATE);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    int all = 0;
    assert_int_equal(probe(dir, &all), KVQ_EUNSUPPORTED);
    kvq_db *kdb;
    assert_int_equal(kvq_db_open(&kdb, dir, NULL), KVQ_EUNSUPPORTED);
    assert_non_null(strstr(kvq_last_error(), "database format 1"));
    assert_null(kdb);
}

/* A malformed entry of the conflict log is reported as damage when a commit reads it, never
 * read past its end. */
static void test_log_entry_damaged(void **state)
{
    (void)state;
    char dir[128], file[160];
    new_dir(dir, sizeof(dir));
    make_db(dir);
    kvq_db *db;
    assert_int_equal(kvq_db_open(&db, dir, NULL), 0);
    kvq_txn *t;
    assert_int_equal(kvq_txn_create(&t, db), 0);
    int64_t rv;
    assert_int_equal(kvq_txn_get_read_version(&rv, t), 0);
    kvq_bytes v;
    int present;
    assert_int_equal(kvq_txn_get(&v, &present, t, (const uint8_t *)"k001", 4, 0), 0);
    /* A log entry after the read version whose length field runs past its end. */
    snprintf(file, sizeof(file), "%s/data.db", dir);
    sqlite3 *s;
    assert_int_equal(sqlite3_open(file, &s), SQLITE_OK);
    char sql[200];
    snprintf(sql, sizeof(sql), "INSERT INTO wlog(version, ranges) VALUES (%lld, x'ff000000')",
             (long long)rv + 1000);
    assert_int_equal(sqlite3_exec(s, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(s);
    assert_int_equal(kvq_txn_set(t, (const uint8_t *)"k001", 4, (const uint8_t *)"x", 1), 0);
    bi.cases++;
    assert_int_equal(kvq_txn_commit(t), KVQ_EDAMAGED);
    bi.clean_errors++;
    assert_non_null(strstr(kvq_last_error(), "conflict log"));
    kvq_txn_destroy(t);
    kvq_db_close(db);
}

static void test_path_is_a_file(void **state)
{
    (void)state;
    char path[128];
    new_dir(path, sizeof(path));
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    kvq_db *db;
    bi.cases++;
    assert_int_equal(kvq_db_open(&db, path, NULL), KVQ_EINVAL);
    bi.clean_errors++;
    assert_non_null(strstr(kvq_last_error(), "not a directory"));
    assert_null(db);
}

static void test_missing_no_create(void **state)
{
    (void)state;
    char dir[128];
    new_dir(dir, sizeof(dir));
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.flags |= KVQ_DB_NO_CREATE;
    kvq_db *db;
    bi.cases++;
    assert_int_equal(kvq_db_open(&db, dir, &o), KVQ_ENOTFOUND);
    bi.clean_errors++;
    struct stat st;
    assert_int_not_equal(stat(dir, &st), 0); /* nothing was created */
}

static void test_unreadable_as_other_user(void **state)
{
    (void)state;
    if (geteuid() != 0 || system("command -v setpriv > /dev/null 2>&1") != 0)
        skip();
    char dir[128];
    new_dir(dir, sizeof(dir));
    make_db(dir);
    /* Root ignores permission bits: run the probe as nobody. Files are 0600, owned by root. */
    chmod(base, 0755);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(20);
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(9);
        kvq_db *db;
        int rc = kvq_db_open(&db, dir, NULL);
        _exit(rc == KVQ_EPERM ? 0 : (rc == 0 ? 10 : 11));
    }
    int status;
    waitpid(pid, &status, 0);
    bi.cases++;
    if (WIFSIGNALED(status))
        bi.crashes++;
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    bi.clean_errors++;
}

static int setup(void **state)
{
    (void)state;
    return kt_mkdtemp(base, sizeof(base), "damage");
}

static int teardown(void **state)
{
    (void)state;
    printf("badinput: kind=files cases=%d clean_errors=%d opened_intact=%d crashes=%d hangs=%d "
           "files_changed=%d\n",
           bi.cases, bi.clean_errors, bi.intact, bi.crashes, bi.hangs, bi.files_changed);
    fflush(stdout);
    return kt_rm_rf(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_intact),
        cmocka_unit_test(test_value_bit_flip),
        cmocka_unit_test(test_key_bit_flip),
        cmocka_unit_test(test_header_garbage),
        cmocka_unit_test(test_junk_of_the_right_size),
        cmocka_unit_test(test_wal_garbage),
        cmocka_unit_test(test_shm_garbage),
        cmocka_unit_test(test_shm_short_or_foreign_read_only),
        cmocka_unit_test(test_shm_short_or_foreign_rebuilt),
        cmocka_unit_test(test_zero_length_file),
        cmocka_unit_test(test_truncated_to_half),
        cmocka_unit_test(test_data_file_missing),
        cmocka_unit_test(test_marker_damaged),
        cmocka_unit_test(test_old_format_refused),
        cmocka_unit_test(test_log_entry_damaged),
        cmocka_unit_test(test_path_is_a_file),
        cmocka_unit_test(test_missing_no_create),
        cmocka_unit_test(test_unreadable_as_other_user),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
