/* The conformance harness (conformance.h, which says what each function does). */
#include "conformance.h"

char cf_url[PATH_MAX];  /* the database every test of the group opens (kt_db_url) */
char cf_self[PATH_MAX]; /* this program, for re-executing children */
static int cf_fdb;      /* cf_url names the fdb engine */
static const struct cf_role *cf_roles;
static size_t cf_nroles;

int cf_is_fdb(void)
{
    return cf_fdb;
}

uint64_t cf_rand(cf_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint32_t cf_below(cf_rng *r, uint32_t n)
{
    return n == 0 ? 0 : (uint32_t)(cf_rand(r) % n);
}

int cf_chance(cf_rng *r, unsigned percent)
{
    return cf_below(r, 100) < percent;
}

uint64_t cf_seed(const char *test)
{
    return kt_seed_print(test);
}

int64_t cf_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void cf_sleep_ms(int64_t ms)
{
    struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

const char *cf_fresh_url(char *out, size_t cap, const char *name)
{
    if (cf_fdb) {
        snprintf(out, cap, "%s", cf_url);
    } else {
        kt_path(out, cap, kt_db_dir(), name);
        (void)kt_rm_rf(out);
    }
    return out;
}

kvq_db *
cf_open_url_testing(const char *url, const kvq_db_options *opts, const kvq_testing_options *t)
{
    return kt_db_open_url(url, opts, t);
}

kvq_db *cf_open_url(const char *url, const kvq_db_options *opts)
{
    return cf_open_url_testing(url, opts, NULL);
}

kvq_db *cf_open(const kvq_db_options *opts)
{
    return cf_open_url(cf_url, opts);
}

kvq_db *cf_open_testing(const kvq_testing_options *t)
{
    return cf_open_url_testing(cf_url, NULL, t);
}

void cf_embedded_only(const char *why)
{
    if (cf_fdb) {
        print_message("embedded engine only (%s): SKIPPED\n", why);
        kvq_test_skip_not_applicable();
    }
}

cf_key cf_k(const char *prefix, const char *suffix)
{
    cf_key k;
    int n = snprintf((char *)k.b, sizeof(k.b), "cf/%s/%s", prefix, suffix);
    k.n = (size_t)n < sizeof(k.b) ? (size_t)n : sizeof(k.b) - 1;
    return k;
}

cf_key cf_after_prefix(const cf_key *p)
{
    cf_key k = *p;
    k.b[k.n++] = 0xff;
    return k;
}

kvq_db *cf_open_clean(const char *prefix)
{
    kvq_db *db = cf_open(NULL);
    cf_clear_prefix(db, prefix);
    return db;
}

void cf_clear_prefix(kvq_db *db, const char *prefix)
{
    cf_key b = cf_k(prefix, "");
    cf_key e = cf_after_prefix(&b);
    kvq_txn *t = NULL;
    assert_ok(kvq_txn_create(&t, db));
    for (;;) {
        int rc = kvq_txn_clear_range(t, b.b, b.n, e.b, e.n);
        if (rc == 0)
            rc = kvq_txn_commit(t);
        if (rc == 0)
            break;
        assert_ok(kvq_txn_on_error(t, rc));
    }
    kvq_txn_destroy(t);
}

void cf_expect_value(kvq_txn *txn,
                     const uint8_t *key,
                     size_t key_len,
                     unsigned flags,
                     const void *val,
                     size_t val_len,
                     const char *where)
{
    kvq_bytes v = { NULL, 0 };
    int present = -1;
    int rc = kvq_txn_get(&v, &present, txn, key, key_len, flags);
    if (rc != 0)
        fail_msg("%s: get -> %d %s (%s)", where, rc, kvq_errname(rc), kvq_last_error());
    if (val == NULL) {
        if (present != 0)
            fail_msg("%s: expected the key absent, it holds %zu bytes", where, v.len);
        return;
    }
    if (present != 1)
        fail_msg("%s: expected %zu bytes, the key is absent (present=%d)", where, val_len, present);
    if (v.len != val_len || (val_len > 0 && memcmp(v.data, val, val_len) != 0)) {
        char got[64] = "", exp[64] = "";
        for (size_t i = 0; i < v.len && i < 20; i++)
            snprintf(got + 3 * i, 4, "%02x ", v.data[i]);
        for (size_t i = 0; i < val_len && i < 20; i++)
            snprintf(exp + 3 * i, 4, "%02x ", ((const uint8_t *)val)[i]);
        fail_msg("%s: value mismatch: expected %zu bytes [%s], got %zu bytes [%s]", where, val_len,
                 exp, v.len, got);
    }
}

long cf_read_key(kvq_db *db, const uint8_t *key, size_t key_len, void *out, size_t cap)
{
    kvq_txn *t = NULL;
    assert_ok(kvq_txn_create(&t, db));
    kvq_bytes v;
    int present = 0;
    assert_ok(kvq_txn_get(&v, &present, t, key, key_len, 0));
    long r = -1;
    if (present) {
        r = (long)v.len;
        if (out != NULL && v.len > 0)
            memcpy(out, v.data, v.len < cap ? v.len : cap);
    }
    kvq_txn_destroy(t);
    return r;
}

void cf_write_key(kvq_db *db, const uint8_t *key, size_t key_len, const void *val, size_t val_len)
{
    kvq_txn *t = NULL;
    assert_ok(kvq_txn_create(&t, db));
    for (;;) {
        int rc = kvq_txn_set(t, key, key_len, (const uint8_t *)val, val_len);
        if (rc == 0)
            rc = kvq_txn_commit(t);
        if (rc == 0)
            break;
        assert_ok(kvq_txn_on_error(t, rc));
    }
    kvq_txn_destroy(t);
}

uint64_t cf_le64(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n && i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void cf_put_le(uint8_t *p, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint64_t cf_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

const struct cf_role *cf_find_role(const char *name)
{
    for (size_t i = 0; i < cf_nroles; i++)
        if (strcmp(cf_roles[i].name, name) == 0)
            return &cf_roles[i];
    return NULL;
}

pid_t cf_spawn(const char *role, const char *const *args)
{
    const struct cf_role *r = cf_find_role(role);
    if (r == NULL)
        fail_msg("no child role %s", role);
    char *argv[40];
    size_t n = 0;
    argv[n++] = (char *)cf_self;
    argv[n++] = (char *)"--cf-child";
    argv[n++] = (char *)role;
    for (size_t i = 0; args != NULL && args[i] != NULL && n < 39; i++)
        argv[n++] = (char *)args[i];
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        fail_msg("fork: %s", strerror(errno));
    if (pid == 0) {
        execv(cf_self, argv);
        _exit(126); /* the parent sees the status; stdio is not safe here */
    }
    return pid;
}

int cf_wait(pid_t pid, int timeout_s)
{
    int64_t deadline = cf_now_ns() + (int64_t)timeout_s * 1000000000;
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        if (r < 0 && errno != EINTR)
            fail_msg("waitpid: %s", strerror(errno));
        if (cf_now_ns() > deadline) {
            kill(pid, SIGKILL);
            (void)waitpid(pid, &status, 0);
            fail_msg("child %d did not finish within %d s (killed)", (int)pid, timeout_s);
        }
        cf_sleep_ms(2);
    }
}

void cf_wait_ok(pid_t pid, int timeout_s, const char *what)
{
    int st = cf_wait(pid, timeout_s);
    if (WIFSIGNALED(st))
        fail_msg("%s: child killed by signal %d", what, WTERMSIG(st));
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        fail_msg("%s: child exited with status %d", what, WEXITSTATUS(st));
}

int cf_write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int cf_read_all(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

void cf_init(int argc, char **argv, const struct cf_role *roles, size_t nroles)
{
    kt_seed_setup(argc, argv);
    cf_roles = roles;
    cf_nroles = nroles;
    ssize_t n = readlink("/proc/self/exe", cf_self, sizeof(cf_self) - 1);
    if (n <= 0)
        snprintf(cf_self, sizeof(cf_self), "%s", argv[0]);
    else
        cf_self[n] = '\0';
    const char *url = getenv("KVQ_TEST_URL");
    cf_fdb = url != NULL && strncmp(url, "fdb:", 4) == 0;
    if (argc >= 3 && strcmp(argv[1], "--cf-child") == 0) {
        if (url != NULL)
            snprintf(cf_url, sizeof(cf_url), "%s", url);
        const struct cf_role *r = cf_find_role(argv[2]);
        if (r == NULL) {
            fprintf(stderr, "unknown child role %s\n", argv[2]);
            exit(125);
        }
        exit(r->fn(argc - 2, argv + 2));
    }
}

int cf_group_setup(void **state)
{
    (void)state;
    if (kt_db_setup("conformance") != 0)
        return -1;
    int n = snprintf(cf_url, sizeof(cf_url), "%s", kt_db_url());
    cf_fdb = kt_db_is_fdb();
    return n < 0 || (size_t)n >= sizeof(cf_url) ? -1 : 0;
}

int cf_group_teardown(void **state)
{
    (void)state;
    return kt_db_teardown();
}
