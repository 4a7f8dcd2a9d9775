/* S8, the power-cut test: the engine over a file system layer that can lose what a power cut
 * loses (pc_shim.c), cut at random points, recovered, checked.
 *
 * Each cut: the worker (pc_worker.c) runs under the layer (LD_PRELOAD) on a database in a
 * directory the layer simulates, three threads committing (group commit) while the database is
 * opened and closed three times; at a random modifying operation (or after the clean close) the
 * layer cuts the power and writes out one state the file system could be in: every page and
 * directory entry not yet made durable by fsync/fdatasync (a directory's entries only by a sync
 * of the directory) either lost or kept, at random, shared-memory files kept or emptied. This
 * program then opens that state without the layer (recovery) and checks it against the worker's
 * log of acknowledged commits (pc_common.h): every acknowledged commit is there exactly once,
 * nothing that was never committed is, no transaction is half there, every payload is intact,
 * and the database opens at all. Cuts come in chains: the next run continues on the recovered
 * state, so recovery of a recovered database is covered too. Each run is a boot of its own
 * ($KVQ_PC_BOOT_ID, pc_shim.c): a power cut is a reboot, and kvq must not take what a cut kept
 * of its shared memory as written in this boot.
 *
 * Every storage of the embedded engine runs the same campaign, chosen by its URL (the
 * `storages` table: one line per storage). A broken engine (KVQ_TEST_ACK_BEFORE_SYNC: commits
 * acknowledged before their WAL is synced, one sync skipped) must make the checker count lost
 * commits: a checker that cannot fail is not a test.
 *
 * --rides runs the campaign of early lock release instead (pc_common.h, "Rides"): every
 * transaction reads early (KVQ_TEST_EARLY_READ_ALL) the newest commit of another producer,
 * written and perhaps not yet synced, and records it; a cut must never keep the ride and lose
 * the commit it read. Its broken campaign (ride_ahead) records one commit more than it read,
 * and the checker must see those.
 *
 *   test_powercut --shim LIB --worker EXE [--seed N] [--cuts N] [--broken-cuts N]
 *                 [--rides] [--storage NAME]
 *
 * Prints one line per campaign, "powercut: storage=... cuts=... acked=... lost=0 ...", and the
 * command that replays it. $KVQ_TEST_SCALE multiplies the cuts; $KVQ_TEST_SEED is a seed to
 * replay when --seed is not given. Exit 0 when every line is as it must be. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvq/kvq.h"
#include "kvq/testing.h"
#include "kvq_test.h"
#include "pc_common.h"
#include "test_scale.h"

extern char **environ;

/* The storages of the embedded engine, each chosen by the form of its URL ("%s" is the database
 * directory). A new storage is one more line here. */
static const struct storage {
    const char *name;
    const char *url_fmt;
} storages[] = {
    { "sqlite", "sqlite:%s" },
    { "log", "log:%s" },
};

#define THREADS     3
#define TXNS        12 /* per thread and phase */
#define PHASES      3
#define CHAIN       6 /* runs on one database, each continuing on the recovered state */
#define MAX_PRODS   (CHAIN * 16 + 16)

static const char *shim, *worker;
static int rides; /* --rides: the early reads' campaign (pc_common.h, "Rides") */
static int verbose; /* -v: every cut's figures and every failure */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t mix(uint64_t x)
{
    return pc_mix(x + 0x9E3779B97F4A7C15ull);
}

static void rm_rf(const char *p)
{
    if (kt_rm_rf(p) != 0)
        fprintf(stderr, "powercut: cannot remove %s\n", p);
}

typedef struct campaign {
    const struct storage *st;
    unsigned int flags;
    const char *broken; /* the broken engine's name, or NULL */
    uint64_t seed;
    int cuts_wanted;
    /* figures */
    int cuts, chains, worker_failures, open_failures;
    int modes[3], points[3];
    uint64_t events_max, acked, acked_checked, recovered;
    uint64_t pages_pending, pages_reverted, pages_torn, dirops_pending, dirops_dropped;
    uint64_t sizes_reverted;
    uint64_t volatile_kept, volatile_emptied;
    uint64_t lost, unexpected, half_applied, corrupted, counter_mismatch;
    uint64_t rides, rides_lost; /* rides checked; kept rides whose commit is gone */
    int boots, boot_unseen; /* runs whose worker read its boot id; closed runs that did not */
    int reported; /* detailed failure reports printed */
    uint64_t lost_seen[MAX_PRODS]; /* per producer of the current chain */
} campaign;

static void report(campaign *c, const char *fmt, ...)
{
    if (c->reported++ >= (verbose ? 100000 : c->broken != NULL ? 3 : 20))
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("#   powercut: ", stdout); /* not a summary line (scripts/reliability.sh) */
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
}

/* ---- one run of the worker under the layer --------------------------------------------------- */

/* The machine's boot id, as /proc has it ("" when it cannot be read). */
static char real_boot_id[64];

static void read_real_boot_id(void)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f == NULL)
        return;
    if (fgets(real_boot_id, sizeof(real_boot_id), f) == NULL)
        real_boot_id[0] = '\0';
    real_boot_id[strcspn(real_boot_id, "\n")] = '\0';
    fclose(f);
}

/* The boot id of a run (pc_shim.c: each run after a cut is a new boot, as after a real power
 * cut), from its seed: never the machine's, which the checker opens the database with. */
static void run_boot_id(char *out, size_t n, uint64_t seed)
{
    for (uint64_t k = 0;; k++) {
        uint64_t a = mix(seed ^ 0xb007b007u ^ k), b = mix(a);
        snprintf(out, n, "%08" PRIx64 "-%04" PRIx64 "-4%03" PRIx64 "-%04" PRIx64 "-%012" PRIx64,
                 a >> 32, (a >> 16) & 0xffff, a & 0xfff, b >> 48, b & (uint64_t)0xffffffffffff);
        if (strcmp(out, real_boot_id) != 0)
            return;
    }
}

static int run_worker(campaign *c, const char *dir, uint64_t run, uint64_t seed, uint64_t cut_at)
{
    char root[4096], out[4096], stats[4096], log[4096], db[4200], url[4300], errf[4096];
    snprintf(root, sizeof(root), "%s/root", dir);
    snprintf(out, sizeof(out), "%s/cut", dir);
    snprintf(stats, sizeof(stats), "%s/stats", dir);
    snprintf(log, sizeof(log), "%s/log", dir);
    snprintf(errf, sizeof(errf), "%s/worker.err", dir);
    snprintf(db, sizeof(db), "%s/db", root);
    snprintf(url, sizeof(url), c->st->url_fmt, db);
    rm_rf(out);
    unlink(stats);

    char e_pre[4200], e_root[4200], e_out[4200], e_stats[4200], e_seed[64], e_cut[64];
    char e_boot[80], boot[40];
    run_boot_id(boot, sizeof(boot), seed);
    snprintf(e_boot, sizeof(e_boot), "KVQ_PC_BOOT_ID=%s", boot);
    snprintf(e_pre, sizeof(e_pre), "LD_PRELOAD=%s", shim);
    snprintf(e_root, sizeof(e_root), "KVQ_PC_ROOT=%s", root);
    snprintf(e_out, sizeof(e_out), "KVQ_PC_OUT=%s", out);
    snprintf(e_stats, sizeof(e_stats), "KVQ_PC_STATS=%s", stats);
    snprintf(e_seed, sizeof(e_seed), "KVQ_PC_SEED=%" PRIu64, seed);
    snprintf(e_cut, sizeof(e_cut), "KVQ_PC_CUT_AT=%" PRIu64, cut_at);
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **envp = calloc(n + 9, sizeof(char *));
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0 &&
            (strncmp(environ[i], "KVQ_PC_", 7) != 0 || strncmp(environ[i], "KVQ_PC_SHM=", 11) == 0))
            envp[k++] = environ[i];
    envp[k++] = e_pre;
    envp[k++] = e_root;
    envp[k++] = e_out;
    envp[k++] = e_stats;
    envp[k++] = e_seed;
    envp[k++] = e_cut;
    envp[k++] = e_boot;
    envp[k] = NULL;

    char a_run[32], a_threads[16], a_txns[16], a_phases[16], a_flags[32];
    snprintf(a_run, sizeof(a_run), "%" PRIu64, run);
    snprintf(a_threads, sizeof(a_threads), "%d", THREADS);
    snprintf(a_txns, sizeof(a_txns), "%d", TXNS);
    snprintf(a_phases, sizeof(a_phases), "%d", PHASES);
    snprintf(a_flags, sizeof(a_flags), "%u", c->flags);
    char *argv[] = { (char *)worker, url, log, a_run, a_threads, a_txns, a_phases, a_flags, NULL };
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, errf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    pid_t pid;
    int rc = posix_spawn(&pid, worker, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    if (rc != 0) {
        fprintf(stderr, "powercut: cannot start %s: %s\n", worker, strerror(rc));
        return -1;
    }
    int status = 0;
    int64_t deadline = now_ms() + 150000;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            break;
        if (now_ms() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            report(c, "worker hung for 150 s (run %" PRIu64 ", seed %" PRIu64 ")", run, seed);
            return -1;
        }
        usleep(2000);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != PC_EXIT_CUT) {
        char tail[2048] = "";
        FILE *f = fopen(errf, "r");
        if (f != NULL) {
            size_t got = fread(tail, 1, sizeof(tail) - 1, f);
            tail[got] = '\0';
            fclose(f);
        }
        report(c, "worker ended %s %d instead of being cut (run %" PRIu64 ", seed %" PRIu64
                  ", cut at %" PRIu64 "): %s",
               WIFEXITED(status) ? "with exit code" : "by signal",
               WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), run, seed, cut_at,
               tail);
        return -1;
    }
    /* The state after the cut becomes the root. */
    rm_rf(root);
    if (rename(out, root) != 0) {
        fprintf(stderr, "powercut: cannot move %s to %s: %s\n", out, root, strerror(errno));
        return -1;
    }
    FILE *f = fopen(stats, "r");
    if (f == NULL) {
        report(c, "no figures from the layer (run %" PRIu64 ")", run);
        return -1;
    }
    char line[1024] = "";
    if (fgets(line, sizeof(line), f) == NULL)
        line[0] = '\0';
    fclose(f);
    char why[32] = "", mode[32] = "";
    unsigned long long ev = 0, files = 0, dirs = 0, pp = 0, pr = 0, pt = 0, sr = 0, dp = 0, dd = 0,
                       vk = 0, ve = 0, br = 0;
    if (sscanf(line,
               "cut=%31s events=%llu mode=%31s files=%llu dirs=%llu pages_pending=%llu "
               "pages_reverted=%llu pages_torn=%llu sizes_reverted=%llu dirops_pending=%llu "
               "dirops_dropped=%llu volatile_kept=%llu volatile_emptied=%llu boot_reads=%llu",
               why, &ev, mode, &files, &dirs, &pp, &pr, &pt, &sr, &dp, &dd, &vk, &ve, &br) != 14) {
        report(c, "unreadable figures from the layer: %s", line);
        return -1;
    }
    /* A worker that opened and closed the database and never asked the layer for the boot id
     * read the machine's: kvq would take the shared memory a cut kept as this boot's, which no
     * power cut leaves (pc_shim.c). */
    if (br > 0)
        c->boots++;
    else if (strcmp(why, "asked") == 0) {
        c->boot_unseen++;
        report(c, "run %" PRIu64 " (seed %" PRIu64 ") opened the database without reading its "
                  "boot id through the layer",
               run, seed);
    }
    c->points[strcmp(why, "before_op") == 0 ? 0 : strcmp(why, "after_op") == 0 ? 1 : 2]++;
    c->modes[strcmp(mode, "drop_all") == 0 ? 0 : strcmp(mode, "keep_all") == 0 ? 1 : 2]++;
    if (ev > c->events_max)
        c->events_max = ev;
    c->pages_pending += pp;
    c->pages_reverted += pr;
    c->pages_torn += pt;
    c->sizes_reverted += sr;
    c->dirops_pending += dp;
    c->dirops_dropped += dd;
    c->volatile_kept += vk;
    c->volatile_emptied += ve;
    if (verbose)
        printf("  run %" PRIu64 " seed %" PRIu64 " cut_at %" PRIu64 ": %s", run, seed, cut_at,
               line);
    return 0;
}

/* ---- the check ------------------------------------------------------------------------------- */

typedef struct prod {
    uint64_t invoked, acked; /* the highest numbers logged */
    int seen;
} prod;

static int read_log(const char *path, prod *pr)
{
    memset(pr, 0, MAX_PRODS * sizeof(prod));
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return errno == ENOENT ? 0 : -1;
    char line[128];
    while (fgets(line, sizeof(line), f) != NULL) {
        char kind;
        unsigned long long p, s;
        if (sscanf(line, "%c %llu %llu", &kind, &p, &s) != 3 || p >= MAX_PRODS)
            continue;
        pr[p].seen = 1;
        if (kind == 'I' && s > pr[p].invoked)
            pr[p].invoked = s;
        if (kind == 'A' && s > pr[p].acked)
            pr[p].acked = s;
    }
    fclose(f);
    return 0;
}

/* Reads [begin, end) in pages, calling fn for each pair. */
static int scan(kvq_txn *t, const char *begin, const char *end,
                void (*fn)(campaign *, const kvq_kv *, void *), campaign *c, void *arg)
{
    uint8_t b[64];
    size_t bn = strlen(begin);
    memcpy(b, begin, bn);
    for (;;) {
        const kvq_kv *kvs;
        size_t n;
        bool more;
        int rc = kvq_txn_get_range(&kvs, &n, &more, t, b, bn, (const uint8_t *)end, strlen(end),
                                   200, KVQ_SNAPSHOT);
        if (rc != 0)
            return rc;
        for (size_t i = 0; i < n; i++)
            fn(c, &kvs[i], arg);
        if (!more || n == 0)
            return 0;
        if (kvs[n - 1].key.len + 1 > sizeof(b))
            return KVQ_EINVAL;
        memcpy(b, kvs[n - 1].key.data, kvs[n - 1].key.len);
        b[kvs[n - 1].key.len] = 0;
        bn = kvs[n - 1].key.len + 1;
    }
}

typedef struct state {
    uint64_t last[MAX_PRODS];
    uint64_t first_item[MAX_PRODS], n_items[MAX_PRODS], prev_item[MAX_PRODS];
    int items_in_order[MAX_PRODS];
    uint64_t ride_p[MAX_PRODS], ride_s[MAX_PRODS]; /* ride_s 0: none */
    uint64_t bad_keys;
} state;

static void on_ride(campaign *c, const kvq_kv *kv, void *arg)
{
    state *s = arg;
    (void)c;
    uint64_t p = kv->key.len == 11 ? pc_be64(kv->key.data + 3) : MAX_PRODS;
    uint64_t q = kv->value.len == 16 ? pc_be64(kv->value.data) : MAX_PRODS;
    if (p >= MAX_PRODS || q >= MAX_PRODS) {
        s->bad_keys++;
        return;
    }
    s->ride_p[p] = q;
    s->ride_s[p] = pc_be64(kv->value.data + 8);
}

static void on_item(campaign *c, const kvq_kv *kv, void *arg)
{
    state *s = arg;
    if (kv->key.len != PC_KEY_BYTES) {
        s->bad_keys++;
        return;
    }
    uint64_t p = pc_be64(kv->key.data + 3), q = pc_be64(kv->key.data + 11);
    if (p >= MAX_PRODS) {
        s->bad_keys++;
        return;
    }
    size_t len = pc_payload_len(p, q);
    uint8_t *want = malloc(len);
    pc_payload(want, p, q, len);
    if (kv->value.len != len || memcmp(kv->value.data, want, len) != 0) {
        c->corrupted++;
        report(c, "item (%" PRIu64 ", %" PRIu64 ") has a wrong payload (%zu bytes)", p, q,
               kv->value.len);
    }
    free(want);
    if (s->n_items[p] == 0)
        s->first_item[p] = q;
    else if (q != s->prev_item[p] + 1)
        s->items_in_order[p] = 0;
    s->prev_item[p] = q;
    s->n_items[p]++;
}

static void on_last(campaign *c, const kvq_kv *kv, void *arg)
{
    state *s = arg;
    (void)c;
    if (kv->key.len != 11 || kv->value.len != 8 || pc_be64(kv->key.data + 3) >= MAX_PRODS) {
        s->bad_keys++;
        return;
    }
    s->last[pc_be64(kv->key.data + 3)] = pc_le64(kv->value.data);
}

static int check(campaign *c, const char *dir, int final)
{
    char db[4200], url[4300], log[4096];
    snprintf(db, sizeof(db), "%s/root/db", dir);
    snprintf(url, sizeof(url), c->st->url_fmt, db);
    snprintf(log, sizeof(log), "%s/log", dir);
    static prod pr[MAX_PRODS];
    if (read_log(log, pr) != 0)
        return -1;
    static state s;
    memset(&s, 0, sizeof(s));
    for (int p = 0; p < MAX_PRODS; p++)
        s.items_in_order[p] = 1;
    uint64_t counter = 0;
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    o.flags |= KVQ_DB_NO_CREATE;
    kvq_db *h = NULL;
    int rc = kvq_db_open(&h, url, &o);
    if (rc == KVQ_ENOTFOUND) {
        h = NULL; /* cut before the database was made: nothing may have been acknowledged */
    } else if (rc != 0) {
        c->open_failures++;
        report(c, "the database does not open after the cut: %s (%s)", kvq_errname(rc),
               kvq_last_error());
        return 0;
    } else {
        kvq_txn *t;
        rc = kvq_txn_create(&t, h);
        if (rc == 0)
            rc = scan(t, "pc/", "pc0", on_item, c, &s);
        if (rc == 0)
            rc = scan(t, "pl/", "pl0", on_last, c, &s);
        if (rc == 0)
            rc = scan(t, "pr/", "pr0", on_ride, c, &s);
        kvq_bytes v;
        int present = 0;
        if (rc == 0)
            rc = kvq_txn_get(&v, &present, t, (const uint8_t *)"pn", 2, KVQ_SNAPSHOT);
        if (rc == 0 && present)
            counter = v.len == 8 ? pc_le64(v.data) : UINT64_MAX;
        if (t != NULL)
            kvq_txn_destroy(t);
        kvq_db_close(h);
        if (rc != 0) {
            c->open_failures++;
            report(c, "reading the database after the cut failed: %s (%s)", kvq_errname(rc),
                   kvq_last_error());
            return 0;
        }
    }
    c->unexpected += s.bad_keys;
    uint64_t sum = 0;
    for (uint64_t p = 0; p < MAX_PRODS; p++) {
        uint64_t m = s.last[p];
        if (!pr[p].seen && (m != 0 || s.n_items[p] != 0)) {
            c->unexpected += m > s.n_items[p] ? m : s.n_items[p];
            report(c, "producer %" PRIu64 " never ran but has data", p);
            continue;
        }
        if (!pr[p].seen)
            continue;
        sum += m;
        /* The commit p's last transaction rode (read early) must be there with it. */
        if (s.ride_s[p] > 0) {
            c->rides++;
            if (s.last[s.ride_p[p]] < s.ride_s[p]) {
                c->rides_lost++;
                report(c, "producer %" PRIu64 " rode (%" PRIu64 ", %" PRIu64 "), which is not "
                          "there (its last is %" PRIu64 ")",
                       p, s.ride_p[p], s.ride_s[p], s.last[s.ride_p[p]]);
            }
        }
        /* A commit lost at one cut stays lost at the next checks of the chain: counted once. */
        if (m < pr[p].acked && pr[p].acked - m > c->lost_seen[p]) {
            c->lost += pr[p].acked - m - c->lost_seen[p];
            c->lost_seen[p] = pr[p].acked - m;
            report(c, "producer %" PRIu64 ": acknowledged up to %" PRIu64 ", only %" PRIu64
                      " there",
                   p, pr[p].acked, m);
        }
        if (m > pr[p].invoked) {
            c->unexpected += m - pr[p].invoked;
            report(c, "producer %" PRIu64 ": up to %" PRIu64 " there, only %" PRIu64 " invoked", p,
                   m, pr[p].invoked);
        }
        /* Exactly the last PC_WINDOW items up to m, in order. */
        uint64_t lo = m > PC_WINDOW ? m - PC_WINDOW + 1 : 1;
        uint64_t want_n = m == 0 ? 0 : m - lo + 1;
        if (s.n_items[p] != want_n || !s.items_in_order[p] ||
            (want_n > 0 && (s.first_item[p] != lo || s.prev_item[p] != m))) {
            c->half_applied++;
            report(c, "producer %" PRIu64 ": last %" PRIu64 " but %" PRIu64 " items from %" PRIu64
                      " to %" PRIu64 " (a transaction half applied)",
                   p, m, s.n_items[p], s.first_item[p], s.prev_item[p]);
        }
        if (m >= pr[p].acked)
            c->recovered += m - pr[p].acked;
        c->acked_checked += pr[p].acked;
        if (final)
            c->acked += pr[p].acked;
    }
    if (counter != sum) {
        c->counter_mismatch++;
        report(c, "the counter is %" PRIu64 ", the producers' last numbers add up to %" PRIu64,
               counter, sum);
    }
    return 0;
}

/* ---- a campaign ------------------------------------------------------------------------------ */

static int failures(const campaign *c)
{
    return (int)(c->lost + c->unexpected + c->half_applied + c->corrupted + c->counter_mismatch +
                 c->rides_lost) +
           c->open_failures + c->worker_failures + c->boot_unseen;
}

static void run_campaign(campaign *c)
{
    int64_t t0 = now_ms();
    uint64_t cut_max = 1500; /* raised to the most events a whole run took */
    for (int chain = 0; c->cuts < c->cuts_wanted; chain++) {
        char dir[1024];
        if (kt_mkdtemp(dir, sizeof(dir), "powercut") != 0) {
            c->worker_failures++;
            return;
        }
        char root[4096];
        snprintf(root, sizeof(root), "%s/root", dir);
        mkdir(root, 0700);
        c->chains++;
        memset(c->lost_seen, 0, sizeof(c->lost_seen));
        int ok = 1;
        for (int r = 0; r < CHAIN && c->cuts < c->cuts_wanted && ok; r++) {
            uint64_t seed = mix(c->seed ^ mix((uint64_t)chain * 1000 + (uint64_t)r));
            /* One run in eight is cut only after it has closed the database; one in four among
             * the first 120 operations, where the database is created or opened (recovery). */
            uint64_t cut_at = seed % 8 == 0   ? 0
                              : seed % 8 <= 2 ? 1 + mix(seed) % 120
                                              : 1 + mix(seed) % cut_max;
            if (run_worker(c, dir, (uint64_t)r + 1, seed, cut_at) != 0) {
                c->worker_failures++;
                ok = 0;
                break;
            }
            c->cuts++;
            if (cut_at == 0 && c->events_max > cut_max)
                cut_max = c->events_max;
            if (check(c, dir, r == CHAIN - 1 || c->cuts == c->cuts_wanted) != 0) {
                c->worker_failures++;
                ok = 0;
            }
        }
        if (!ok || failures(c) == 0 || (c->broken != NULL && !verbose))
            rm_rf(dir);
        else
            printf("#   powercut: kept %s for inspection\n", dir);
        /* A failed run ends the campaign; the broken engine's runs may fail (a database its
         * skipped sync damaged does not open), so it goes on with a new chain, a bounded number
         * of times. */
        if (!ok && (c->broken == NULL || chain > 4 * c->cuts_wanted))
            break;
    }
    printf("powercut: storage=%s cuts=%d chains=%d cut_points=before_op:%d,after_op:%d,"
           "after_close:%d modes=drop_all:%d,keep_all:%d,random:%d events_max=%" PRIu64
           " acked=%" PRIu64 " acked_checked=%" PRIu64 " recovered=%" PRIu64
           " pages_pending=%" PRIu64 " pages_reverted=%" PRIu64 " pages_torn=%" PRIu64
           " sizes_reverted=%" PRIu64
           " dirops_pending=%" PRIu64 " dirops_dropped=%" PRIu64
           " shm_kept=%" PRIu64 " shm_emptied=%" PRIu64 " lost=%" PRIu64
           " unexpected=%" PRIu64 " half_applied=%" PRIu64 " corrupted=%" PRIu64
           " counter_mismatch=%" PRIu64 " rides=%" PRIu64 " rides_lost=%" PRIu64
           " boots=%d boot_unseen=%d open_failures=%d worker_failures=%d broken_engine=%s"
           " seed=%" PRIu64 " elapsed_ms=%lld%s\n",
           c->st->name, c->cuts, c->chains, c->points[0], c->points[1], c->points[2], c->modes[0],
           c->modes[1], c->modes[2], c->events_max, c->acked, c->acked_checked, c->recovered,
           c->pages_pending, c->pages_reverted, c->pages_torn, c->sizes_reverted, c->dirops_pending,
           c->dirops_dropped, c->volatile_kept, c->volatile_emptied, c->lost, c->unexpected,
           c->half_applied, c->corrupted, c->counter_mismatch, c->rides, c->rides_lost,
           c->boots, c->boot_unseen, c->open_failures, c->worker_failures, c->broken != NULL ? c->broken : "no", c->seed,
           (long long)(now_ms() - t0),
           c->broken == NULL ? ""
           : rides      ? " (the checker must see rides whose commit is gone)"
                        : " (the checker must see lost commits)");
    printf("# replay: %s --shim %s --worker %s --seed %" PRIu64 " --cuts %d --storage %s%s%s\n",
           "test_powercut", shim, worker, c->seed, c->cuts_wanted, c->st->name,
           rides ? " --rides" : "", c->broken != NULL ? " --broken-only" : "");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    uint64_t seed = 0;
    int cuts = 300, broken_cuts = 24, broken_only = 0;
    const char *only = NULL, *check_only = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--shim") == 0 && i + 1 < argc)
            shim = argv[++i];
        else if (strcmp(argv[i], "--worker") == 0 && i + 1 < argc)
            worker = argv[++i];
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--cuts") == 0 && i + 1 < argc)
            cuts = atoi(argv[++i]);
        else if (strcmp(argv[i], "--broken-cuts") == 0 && i + 1 < argc)
            broken_cuts = atoi(argv[++i]);
        else if (strcmp(argv[i], "--broken-only") == 0)
            broken_only = 1;
        else if (strcmp(argv[i], "--rides") == 0)
            rides = 1;
        else if (strcmp(argv[i], "--storage") == 0 && i + 1 < argc)
            only = argv[++i];
        else if (strcmp(argv[i], "-v") == 0)
            verbose = 1;
        else if (strcmp(argv[i], "--check-only") == 0 && i + 1 < argc)
            check_only = argv[++i];
        else {
            fprintf(stderr, "usage: test_powercut --shim LIB --worker EXE [--seed N] [--cuts N] "
                            "[--broken-cuts N] [--broken-only] [--rides] [--storage NAME] "
                            "[-v]\n");
            return 2;
        }
    }
    if (check_only != NULL) {
        /* A debugging aid: check DIR/root/db against DIR/log, as after a cut (for a worker run
         * by hand, with or without the layer). */
        static campaign c;
        memset(&c, 0, sizeof(c));
        c.st = &storages[0];
        verbose = 1;
        if (check(&c, check_only, 1) != 0)
            return 2;
        printf("powercut-check: acked=%" PRIu64 " lost=%" PRIu64 " unexpected=%" PRIu64
               " half_applied=%" PRIu64 " corrupted=%" PRIu64 " counter_mismatch=%" PRIu64
               " open_failures=%d\n",
               c.acked, c.lost, c.unexpected, c.half_applied, c.corrupted, c.counter_mismatch,
               c.open_failures);
        return failures(&c) == 0 ? 0 : 1;
    }
    if (shim == NULL || worker == NULL) {
        fprintf(stderr, "test_powercut: --shim and --worker are required\n");
        return 2;
    }
    const char *env_seed = getenv("KVQ_TEST_SEED");
    if (seed == 0 && env_seed != NULL && env_seed[0] != '\0')
        seed = strtoull(env_seed, NULL, 10);
    if (seed == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    cuts = (int)kvq_test_scaled(cuts);
    read_real_boot_id();
    int status = 0, ran = 0;
    for (size_t i = 0; i < sizeof(storages) / sizeof(storages[0]); i++) {
        if (only != NULL && strcmp(only, storages[i].name) != 0)
            continue;
        ran++;
        if (!broken_only) {
            static campaign c;
            memset(&c, 0, sizeof(c));
            c.st = &storages[i];
            c.seed = seed;
            c.cuts_wanted = cuts;
            c.flags = rides ? KVQ_TEST_EARLY_READ_ALL : 0;
            run_campaign(&c);
            if (rides && c.rides == 0) {
                printf("powercut: FAILED: no ride was checked\n");
                status = 1;
            }
            if (failures(&c) != 0 || c.cuts < c.cuts_wanted)
                status = 1;
        }
        /* The broken engine: acknowledged before the WAL is synced (--broken-cuts 0: skipped,
         * for a long run of the real engine alone). */
        if (broken_cuts == 0)
            continue;
        static campaign b;
        memset(&b, 0, sizeof(b));
        b.st = &storages[i];
        b.seed = seed ^ 0x5bd1e995u;
        b.cuts_wanted = broken_cuts;
        b.flags = rides ? KVQ_TEST_EARLY_READ_ALL | PC_RIDE_AHEAD : KVQ_TEST_ACK_BEFORE_SYNC;
        b.broken = rides ? "ride_ahead" : "ack_before_sync";
        run_campaign(&b);
        if (rides && b.rides_lost == 0) {
            printf("powercut: FAILED: rides of commits not made were never caught in %d cuts: "
                   "the checker cannot see a ride kept without its commit\n",
                   b.cuts);
            status = 1;
        } else if (!rides && b.lost == 0) {
            printf("powercut: FAILED: the broken engine lost no acknowledged commit in %d cuts: "
                   "the checker cannot see a missing sync\n",
                   b.cuts);
            status = 1;
        }
    }
    if (ran == 0) {
        fprintf(stderr, "test_powercut: no storage named %s\n", only);
        return 2;
    }
    return status;
}
