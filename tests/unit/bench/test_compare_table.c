/* The comparison's own unit (bench/compare): argument parsing, medians, the raw-results file and
 * the Markdown table, on canned figures. No server and no disk is involved; the benchmark
 * itself runs only through bench/compare/run. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/compare/table.c" /* from the project root (tests/CMakeLists.txt) */

static int parse(qb_options *o, char *err, size_t cap, int argc, char **argv)
{
    qb_options_init(o);
    return qb_parse_args(o, argc, argv, err, cap);
}

static void test_defaults(void **state)
{
    (void)state;
    qb_options o;
    char err[256] = "";
    char *argv[] = { "qbench", "--dir", "/var/tmp/x", NULL };
    assert_int_equal(parse(&o, err, sizeof(err), 3, argv), 0);
    assert_int_equal(o.runs, 3);
    assert_int_equal(o.n, 50000);
    assert_int_equal(o.latency_n, 5000);
    assert_int_equal(o.size, 100);
    assert_int_equal(o.batch, 100);
    assert_int_equal(o.producers, 4);
    assert_int_equal(o.consumers, 4);
    assert_true(o.rate == 1000.0);
    assert_int_equal(o.workloads, QB_WL_ALL);
    /* Without server addresses only the embedded systems and the disk remain. */
    assert_int_equal(o.systems & (1u << QB_SYS_REDIS), 0);
    assert_int_equal(o.systems & (1u << QB_SYS_POSTGRES), 0);
    assert_true(o.systems & (1u << QB_SYS_SQLITE));
    assert_true(o.systems & (1u << QB_SYS_KVQ));
    assert_true(o.systems & (1u << QB_SYS_KVQ_PROC2X));
    /* Of the SQLite storage's rows, only its durable queue (threads), for comparison. */
    assert_true(o.systems & (1u << QB_SYS_KVQ_SQLITE));
    assert_int_equal(o.systems & (1u << QB_SYS_KVQ_SQLITE_PROC2X), 0);
    assert_int_equal(o.systems & (1u << QB_SYS_KVQ_SQLITE_WORKQ), 0);
    assert_true(o.systems & (1u << QB_SYS_DISK));
    assert_true(o.workloads & QB_WL_M);
    assert_int_equal(o.mem_items, 1000000);
    assert_int_equal(o.mem_procs, 8);
    assert_string_equal(o.dir, "/var/tmp/x");
}

static void test_quick_and_values(void **state)
{
    (void)state;
    qb_options o;
    char err[256] = "";
    char *argv[] = { "qbench",        "--quick",          "--runs=5",
                     "--redis",       "127.0.0.1:6390",   "--postgres",
                     "localhost:5433", "--beanstalkd",    "11300",
                     "--systems",     "redis,postgres",   "--workloads",
                     "a,d",           "--rate",           "500",
                     "--batch",       "10",               NULL };
    assert_int_equal(parse(&o, err, sizeof(err), 17, argv), 0);
    assert_int_equal(o.quick, 1);
    assert_int_equal(o.runs, 5);
    assert_int_equal(o.n, 5000);
    assert_int_equal(o.latency_n, 1000);
    assert_true(o.cap_s == 5.0);
    assert_string_equal(o.redis.host, "127.0.0.1");
    assert_int_equal(o.redis.port, 6390);
    assert_string_equal(o.postgres.host, "127.0.0.1");
    assert_int_equal(o.postgres.port, 5433);
    assert_int_equal(o.beanstalkd.port, 11300);
    assert_int_equal(o.systems, (1u << QB_SYS_REDIS) | (1u << QB_SYS_POSTGRES));
    assert_int_equal(o.workloads, QB_WL_A | QB_WL_D);
    assert_true(o.rate == 500.0);
    assert_int_equal(o.batch, 10);

    /* --quick does not override what was given outright. */
    char *argv2[] = { "qbench", "--messages", "777", "--quick", "--dir", "/tmp", NULL };
    assert_int_equal(parse(&o, err, sizeof(err), 6, argv2), 0);
    assert_int_equal(o.n, 777);
    assert_int_equal(o.latency_n, 1000);
    assert_int_equal(o.mem_items, 100000);

    /* The SQLite storage's rows and the memory row by name. */
    char *argv3[] = { "qbench",         "--systems", "kvq-sqlite,kvq-sqlite-proc-2x",
                      "--dir",          "/tmp",      "--workloads",
                      "bm",             "--memory-items", "2000000",
                      "--memory-procs", "4",         NULL };
    assert_int_equal(parse(&o, err, sizeof(err), 11, argv3), 0);
    assert_int_equal(o.systems, (1u << QB_SYS_KVQ_SQLITE) | (1u << QB_SYS_KVQ_SQLITE_PROC2X));
    assert_int_equal(o.workloads, QB_WL_B | QB_WL_M);
    assert_int_equal(o.mem_items, 2000000);
    assert_int_equal(o.mem_procs, 4);
}

static void test_storages(void **state)
{
    (void)state;
    /* Every kvq row has its twin on the other storage, in the same order. */
    for (int s = 0; s < QB_NSYS; s++) {
        int base = qb_system_kvq_base(s);
        if (!qb_system_is_kvq(s)) {
            assert_int_equal(base, -1);
            assert_false(qb_system_is_sqlite(s));
            continue;
        }
        assert_false(qb_system_is_sqlite(base));
        if (qb_system_is_sqlite(s)) {
            char want[64];
            /* "kvq-sqlite-fifo" is "kvq-fifo" on the SQLite storage; "kvq-sqlite" is "kvq". */
            snprintf(want, sizeof(want), "kvq%s", qb_system_names[s] + strlen("kvq-sqlite"));
            assert_string_equal(qb_system_names[base], want);
        } else {
            assert_int_equal(base, s);
        }
    }
    assert_int_equal(qb_system_kvq_base(QB_SYS_KVQ_SQLITE_WORKQ), QB_SYS_KVQ_WORKQ);
    assert_int_equal(qb_system_from_name("kvq-sqlite-proc"), QB_SYS_KVQ_SQLITE_PROC);
    assert_false(qb_system_is_durable_baseline(QB_SYS_KVQ_SQLITE));
}

static void expect_error(int argc, char **argv, const char *fragment)
{
    qb_options o;
    char err[256] = "";
    assert_int_equal(parse(&o, err, sizeof(err), argc, argv), -1);
    if (strstr(err, fragment) == NULL)
        fail_msg("error '%s' does not mention '%s'", err, fragment);
}

static void test_errors(void **state)
{
    (void)state;
    char *a1[] = { "qbench", "--bogus", NULL };
    expect_error(2, a1, "unknown option");
    char *a2[] = { "qbench", "--runs", "0", "--dir", "/tmp", NULL };
    expect_error(5, a2, "--runs");
    char *a3[] = { "qbench", "--runs", "99", NULL };
    expect_error(3, a3, "--runs");
    char *a4[] = { "qbench", "--messages", "12x", NULL };
    expect_error(3, a4, "--messages");
    char *a5[] = { "qbench", "--dir", NULL };
    expect_error(2, a5, "wants a value");
    char *a6[] = { "qbench", "--redis", "10.0.0.5:6379", NULL };
    expect_error(3, a6, "only loopback");
    char *a7[] = { "qbench", "--postgres", "0.0.0.0:5432", NULL };
    expect_error(3, a7, "only loopback");
    char *a8[] = { "qbench", "--systems", "redis", "--dir", "/tmp", NULL };
    expect_error(5, a8, "needs --redis");
    char *a9[] = { "qbench", "--systems", "mysql", NULL };
    expect_error(3, a9, "unknown system");
    char *a10[] = { "qbench", "--workloads", "e", NULL };
    expect_error(3, a10, "unknown workload");
    char *a11[] = { "qbench", NULL };
    expect_error(1, a11, "nothing to measure");
    char *a12[] = { "qbench", "--rate", "nan", "--dir", "/tmp", NULL };
    expect_error(5, a12, "--rate");
    char *a13[] = { "qbench", "--beanstalkd", "127.0.0.1:70000", NULL };
    expect_error(3, a13, "bad port");
    char *a14[] = { "qbench", "--memory-procs", "1", NULL };
    expect_error(3, a14, "--memory-procs");
    char *a15[] = { "qbench", "--memory-items", "10", NULL };
    expect_error(3, a15, "--memory-items");
}

static void test_endpoints(void **state)
{
    (void)state;
    qb_endpoint ep;
    char err[128];
    assert_int_equal(qb_parse_endpoint(&ep, "6379", err, sizeof(err)), 0);
    assert_string_equal(ep.host, "127.0.0.1");
    assert_int_equal(ep.port, 6379);
    assert_int_equal(qb_parse_endpoint(&ep, "127.1.2.3:80", err, sizeof(err)), 0);
    assert_string_equal(ep.host, "127.1.2.3");
    assert_int_equal(qb_parse_endpoint(&ep, "localhost:1", err, sizeof(err)), 0);
    assert_int_equal(qb_parse_endpoint(&ep, "127.0.0.1:0", err, sizeof(err)), -1);
    assert_int_equal(qb_parse_endpoint(&ep, "128.0.0.1:1", err, sizeof(err)), -1);
    assert_int_equal(qb_parse_endpoint(&ep, "127.0.0.1.5:1", err, sizeof(err)), -1);
    assert_int_equal(qb_parse_endpoint(&ep, "example.com:80", err, sizeof(err)), -1);
    assert_int_equal(qb_parse_endpoint(&ep, ":80", err, sizeof(err)), -1);
    assert_int_equal(qb_parse_endpoint(&ep, "", err, sizeof(err)), -1);
}

static void test_median_and_counts(void **state)
{
    (void)state;
    double odd[] = { 5, 1, 3 }, even[] = { 4, 1, 3, 2 };
    assert_true(qb_median(odd, 3) == 3.0);
    assert_true(qb_median(even, 4) == 2.5);
    assert_true(qb_median(odd, 1) == 5.0);
    assert_true(isnan(qb_median(odd, 0)));
    char buf[64];
    qb_format_count(buf, sizeof(buf), 0);
    assert_string_equal(buf, "0");
    qb_format_count(buf, sizeof(buf), 999.4);
    assert_string_equal(buf, "999");
    qb_format_count(buf, sizeof(buf), 1000);
    assert_string_equal(buf, "1,000");
    qb_format_count(buf, sizeof(buf), 1234567.8);
    assert_string_equal(buf, "1,234,568");
    qb_format_count(buf, sizeof(buf), NAN);
    assert_string_equal(buf, "—");
}

/* Canned figures: SQLite and Redis as baselines, Redis everysec (not durable, much faster),
 * kvq, a disk of 7,000 syncs/s. */
static void canned(qb_results *r)
{
    qb_options o;
    qb_options_init(&o);
    qb_results_init(r, &o);
    for (int run = 0; run < 3; run++) {
        qb_results_add(r, QB_SYS_DISK, QB_A_PUSH, 6990.0 + 10.0 * run, 0);
        qb_results_add(r, QB_SYS_SQLITE, QB_A_PUSH, 6000 + run, 0);
        qb_results_add(r, QB_SYS_SQLITE, QB_A_POP, 5000 + run, 0);
        qb_results_add(r, QB_SYS_SQLITE, QB_B, 3000 + run, 0);
        qb_results_add(r, QB_SYS_SQLITE, QB_C_PUSH, 400000 + run, 0);
        qb_results_add(r, QB_SYS_SQLITE, QB_C_POP, 300000 + run, 0);
        qb_results_add(r, QB_SYS_SQLITE, QB_C_CONC, 200000 + run, 0);
        qb_results_add(r, QB_SYS_SQLITE, QB_D_P50, 0.5, 0);
        qb_results_add(r, QB_SYS_SQLITE, QB_D_P99, 2.0, 0);
        qb_results_add(r, QB_SYS_REDIS, QB_B, 10000, 0);
        qb_results_add(r, QB_SYS_REDIS, QB_D_P99, 1.5, 0);
        qb_results_add(r, QB_SYS_REDIS_EVERYSEC, QB_B, 90000, 0);
        qb_results_add(r, QB_SYS_KVQ, QB_A_PUSH, 6500, 0);
        qb_results_add(r, QB_SYS_KVQ, QB_A_POP, 6400, 0);
        qb_results_add(r, QB_SYS_KVQ, QB_B, 16000, 0);
        qb_results_add(r, QB_SYS_KVQ, QB_C_PUSH, 480000, 0);
        qb_results_add(r, QB_SYS_KVQ, QB_C_POP, 300000, 0);
        qb_results_add(r, QB_SYS_KVQ, QB_D_P50, 0.3, 0);
        qb_results_add(r, QB_SYS_KVQ, QB_D_P99, 0.8, 0);
    }
    /* One run of kvq's concurrent batches stopped at its cap; only two finished. */
    qb_results_add(r, QB_SYS_KVQ, QB_C_CONC, 250000, 1);
    qb_results_add(r, QB_SYS_KVQ, QB_C_CONC, 230000, 0);
    qb_results_add(r, QB_SYS_KVQ_PROC, QB_B, 12000, 0);
    qb_results_add(r, QB_SYS_KVQ_PROC2X, QB_B, 11000, 0);
    /* The commit pipeline of the same runs: commits per sync, conflicts per operation. */
    qb_results_add_pipeline(r, QB_SYS_KVQ, QB_B, 3.0, 0.01);
    qb_results_add_pipeline(r, QB_SYS_KVQ, QB_B, 5.0, 0.03);
    qb_results_add_pipeline(r, QB_SYS_KVQ, QB_B, 4.0, 0.02);
    qb_results_add_pipeline(r, QB_SYS_KVQ_PROC, QB_B, 2.5, 0.125);
    /* The SQLite storage: (a) close to the disk, processes that hold up with twice as many. */
    qb_results_add(r, QB_SYS_KVQ_SQLITE, QB_A_PUSH, 6800, 0);
    qb_results_add(r, QB_SYS_KVQ_SQLITE, QB_D_P99, 1.5, 0);
    qb_results_add(r, QB_SYS_KVQ_SQLITE_PROC, QB_B, 20000, 0);
    qb_results_add(r, QB_SYS_KVQ_SQLITE_PROC2X, QB_B, 21000, 0);
    qb_results_add_pipeline(r, QB_SYS_KVQ_SQLITE, QB_B, 4.0, 0.01);
    qb_results_add_pipeline(r, QB_SYS_KVQ_SQLITE_PROC, QB_B, 4.0, 0.01);
    /* The FIFO recipe against the durable queue of its storage. */
    qb_results_add(r, QB_SYS_KVQ_FIFO, QB_A_PUSH, 5000, 0);
    qb_results_add(r, QB_SYS_KVQ_FIFO, QB_D_P99, 1.7, 0);
    /* The memory rows: the SQLite storage; the log store straight after the push (the window)
     * and past it, where 1 process meets issue 31's target and 8 do not. */
    r->mem_item_bytes = 121;
    qb_results_add_memory(r, QB_SYS_KVQ_SQLITE, QB_MEM_ONE, 1.95);
    qb_results_add_memory(r, QB_SYS_KVQ_SQLITE, QB_MEM_MANY, 1.97);
    qb_results_add_memory(r, QB_SYS_KVQ, QB_MEM_ONE, 0.004);
    qb_results_add_memory(r, QB_SYS_KVQ, QB_MEM_ONE_PAST, 0.0028);
    qb_results_add_memory(r, QB_SYS_KVQ, QB_MEM_MANY_PAST, 0.25);
    qb_results_unsupported(r, QB_SYS_BEANSTALKD, QB_C_PUSH);
    qb_results_add(r, QB_SYS_BEANSTALKD, QB_A_PUSH, 5000, 0);
    snprintf(r->version[QB_SYS_SQLITE], sizeof(r->version[0]), "3.40.1");
    snprintf(r->version[QB_SYS_KVQ], sizeof(r->version[0]), "0.1.0");
}

static char *table_text(const qb_results *r)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(qb_write_table(f, r), 0);
    assert_int_equal(fclose(f), 0);
    assert_non_null(text);
    return text;
}

/* The table row whose first cell starts with label. */
static const char *row_of(const char *text, const char *label)
{
    char want[128];
    snprintf(want, sizeof(want), "\n| %s", label);
    const char *p = strstr(text, want);
    if (p == NULL)
        fail_msg("no row '%s' in:\n%s", label, text);
    return p + 1;
}

static int row_has(const char *row, const char *cell)
{
    size_t len = strcspn(row, "\n");
    char want[128];
    snprintf(want, sizeof(want), "| %s |", cell);
    const char *p = strstr(row, want);
    return p != NULL && (size_t)(p - row) < len;
}

static void test_table(void **state)
{
    (void)state;
    static qb_results r;
    canned(&r);
    char *text = table_text(&r);
    char err[256] = "";
    if (qb_check_markdown(text, err, sizeof(err)) != 0)
        fail_msg("%s in:\n%s", err, text);
    /* The header names the shapes. */
    assert_non_null(strstr(text, "| system | durable | (a) push/s | (a) pop/s | (b) 4P+4C ops/s |"));
    assert_non_null(strstr(text, "(c) ×100 push msg/s"));
    /* Rows: versions in labels, the everysec row labelled not durable, no row for systems with
     * no figures. */
    const char *sqlite = row_of(text, "SQLite 3.40.1");
    assert_true(row_has(sqlite, "6,001"));
    assert_true(row_has(sqlite, "2.00"));
    assert_non_null(strstr(row_of(text, "Redis, AOF `appendfsync everysec`"), "NOT durable"));
    assert_null(strstr(text, "PostgreSQL"));
    assert_null(strstr(text, "priority"));
    const char *bs = row_of(text, "beanstalkd");
    assert_true(row_has(bs, "n/a"));
    assert_true(row_has(bs, "5,000 (n=1)"));
    /* Partial and short cells are marked. */
    const char *kvq = row_of(text, "**kvq 0.1.0 durable queue** (threads)");
    assert_true(row_has(kvq, "240,000* (n=2)"));
    /* The ceiling: the disk's median sync rate times ops per sync. */
    const char *ceil = row_of(text, "ceiling");
    assert_true(row_has(ceil, "7,000"));
    assert_true(row_has(ceil, "28,000"));
    assert_true(row_has(ceil, "700,000"));
    assert_true(row_has(ceil, "2,800,000"));
    /* Ratios against the best durable baseline: Redis everysec is never the best. */
    const char *ratio =
        row_of(text, "kvq durable, log store (threads) ÷ best durable baseline");
    assert_true(row_has(ratio, "1.08× SQLite"));
    assert_true(row_has(ratio, "1.60× Redis"));
    assert_true(row_has(ratio, "0.53× Redis"));
    const char *frac = row_of(text, "kvq durable, log store (threads) ÷ ceiling");
    assert_true(row_has(frac, "0.93"));
    assert_true(row_has(frac, "0.57"));
    const char *proc = row_of(text, "kvq durable, log store (processes) ÷ best durable");
    assert_true(row_has(proc, "1.20× Redis"));
    /* Targets: met and missed, each with its figure. */
    const char *target = row_of(text, "target for kvq durable, log store (threads), issue 24");
    assert_true(row_has(target, "≥0.9 of disk: 0.93 met"));
    assert_true(row_has(target, "≥0.9 of disk: 0.91 met"));
    assert_true(row_has(target, "≥1.5× best: 1.60 met"));
    assert_true(row_has(target, "≥1.5× best: 1.20 **missed**"));
    assert_true(row_has(target, "≥1.5× best: 1.00 **missed**"));
    /* (d) against Redis (appendfsync always), not the best baseline: 0.8 ÷ 1.5; no p50 of
     * Redis in the canned figures. */
    assert_true(row_has(target, "÷ Redis ≤1: 0.53 met"));
    assert_true(row_has(target, "÷ Redis ≤1: —"));
    /* Processes: only the concurrent workloads have targets (and figures). */
    const char *ptarget =
        row_of(text, "target for kvq durable, log store (processes), issue 24");
    assert_true(row_has(ptarget, "≥1.5× best: 1.20 **missed**"));
    assert_true(row_has(ptarget, "≥1.5× best: —"));
    assert_false(row_has(ptarget, "≥0.9 of disk: —"));
    /* Conflicts per pop are twice those per operation (0.02 and 0.125); 11,000 ÷ 12,000. */
    assert_true(row_has(row_of(text, "target in (b), log store, issue 24"),
                        "conflicts/pop <0.05: 0.04 met; procs: 0.25 **missed**; 16÷8 ≥1: 0.92 "
                        "**missed**"));
    /* The SQLite storage's rows: its own ratios and targets; at most the same (÷ Redis 1.00) is
     * met. */
    assert_true(
        row_has(row_of(text, "**kvq durable queue, SQLite storage** (threads)"), "6,800 (n=1)"));
    const char *ltarget =
        row_of(text, "target for kvq durable, SQLite storage (threads), issue 24");
    assert_true(row_has(ltarget, "≥0.9 of disk: 0.97 met"));
    assert_true(row_has(ltarget, "÷ Redis ≤1: 1.00 met"));
    assert_true(row_has(
        row_of(text, "kvq durable, SQLite storage (processes) ÷ best durable baseline"),
        "2.00× Redis"));
    assert_true(row_has(row_of(text, "target in (b), SQLite storage, issue 24"),
                        "conflicts/pop <0.05: 0.02 met; procs: 0.02 met; 16÷8 ≥1: 1.05 met"));
    /* The recipe against the durable queue of its storage: 5,000 ÷ 6,501; 1.7 ÷ 0.8. */
    const char *fifo = row_of(text, "target for kvq FIFO recipe, log store, issue 24");
    assert_true(row_has(fifo, "≥0.8× durable: 0.77 **missed**"));
    assert_true(row_has(fifo, "≤2× durable: 2.13 **missed**"));
    assert_true(row_has(fifo, "≥0.8× durable: —"));
    assert_null(strstr(text, "FIFO recipe, SQLite storage, issue 24"));
    /* The memory rows. */
    const char *mem = row_of(text, "kvq memory ÷ live data, SQLite storage");
    assert_true(row_has(mem, "1,000,000 queued items of 121 bytes (key + value)"));
    assert_true(row_has(mem, "1 process: 1.95"));
    assert_true(row_has(mem, "8 processes: 1.97 each"));
    assert_null(strstr(text, "SQLite storage, past the window"));
    const char *smem =
        row_of(text, "kvq memory ÷ live data, log store, straight after the push (all in the "
                     "window)");
    assert_true(row_has(smem, "1 process: 0.004"));
    assert_true(row_has(smem, "8 processes: —"));
    assert_false(row_has(smem, "≤0.1 each (issue 31): —"));
    const char *pmem =
        row_of(text, "kvq memory ÷ live data, log store, past the window (all in the table)");
    assert_true(row_has(pmem, "1,000,000 queued items of 121 bytes (key + value)"));
    assert_true(row_has(pmem, "1 process: 0.003"));
    assert_true(row_has(pmem, "8 processes: 0.25 each"));
    assert_true(row_has(pmem, "≤0.1 each (issue 31): **missed**"));
    assert_non_null(strstr(text, "Memory rows:"));
    assert_non_null(strstr(text, "\"Straight after the push\""));
    assert_non_null(strstr(text, "\"Past the window\""));
    /* Without figures past the window, neither their row nor their legend. */
    static qb_results w;
    canned(&w);
    w.mem[QB_SYS_KVQ][QB_MEM_ONE_PAST].n = 0;
    w.mem[QB_SYS_KVQ][QB_MEM_MANY_PAST].n = 0;
    char *wtext = table_text(&w);
    assert_null(strstr(wtext, "past the window"));
    assert_null(strstr(wtext, "\"Past the window\""));
    assert_non_null(strstr(wtext, "straight after the push (all in the window)"));
    /* Both past the window at most 0.1: met. */
    qb_results_add_memory(&w, QB_SYS_KVQ, QB_MEM_ONE_PAST, 0.02);
    qb_results_add_memory(&w, QB_SYS_KVQ, QB_MEM_MANY_PAST, 0.1);
    free(wtext);
    wtext = table_text(&w);
    assert_true(row_has(row_of(wtext, "kvq memory ÷ live data, log store, past the window"),
                        "≤0.1 each (issue 31): met"));
    free(wtext);
    /* The commit pipeline rows: medians of commits per sync and of conflicts per op. */
    const char *pipe = row_of(text, "kvq: commits per sync; conflicts per op");
    assert_true(row_has(pipe, "4.0; 0.020"));
    assert_true(row_has(pipe, "—"));
    assert_true(row_has(row_of(text, "kvq-proc: commits per sync"), "2.5; 0.125"));
    assert_null(strstr(text, "kvq-fifo: commits"));
    /* The row with twice the producers and consumers. */
    assert_true(row_has(row_of(text, "**kvq durable queue** (processes, twice P and C)"),
                        "11,000 (n=1)"));
    /* The legend follows the table. */
    assert_non_null(strstr(text, "median of 3 runs"));
    free(text);
}

static void test_raw_round_trip(void **state)
{
    (void)state;
    static qb_results r, back;
    canned(&r);
    char *raw = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&raw, &len);
    assert_non_null(f);
    assert_int_equal(qb_results_save(&r, f), 0);
    assert_int_equal(fclose(f), 0);
    /* The memory figures by name, those past the window too. */
    assert_non_null(strstr(raw, "\nmem kvq one 0.00"));
    assert_non_null(strstr(raw, "\nmem kvq one_past 0.00"));
    assert_non_null(strstr(raw, "\nmem kvq many_past 0.25\n"));
    assert_non_null(strstr(raw, "\nmem kvq-sqlite many 1.97"));
    f = fmemopen(raw, len, "r");
    assert_non_null(f);
    char err[256] = "";
    if (qb_results_load(&back, f, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    fclose(f);
    char *a = table_text(&r), *b = table_text(&back);
    assert_string_equal(a, b);
    free(a);
    free(b);

    assert_true(qb_cell_median(&back.mem[QB_SYS_KVQ][QB_MEM_MANY_PAST]) == 0.25);
    assert_int_equal(back.mem[QB_SYS_KVQ][QB_MEM_MANY].n, 0);

    const char *bad = "qbench-raw 1\nval sqlite a_push 1 x\n";
    f = fmemopen((void *)bad, strlen(bad), "r");
    assert_non_null(f);
    assert_int_equal(qb_results_load(&back, f, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "line 2"));
    fclose(f);
    const char *notraw = "hello\n";
    f = fmemopen((void *)notraw, strlen(notraw), "r");
    assert_non_null(f);
    assert_int_equal(qb_results_load(&back, f, err, sizeof(err)), -1);
    fclose(f);
    free(raw);
}

static void test_markdown_checker(void **state)
{
    (void)state;
    char err[256];
    assert_int_equal(qb_check_markdown("| a | b |\n| --- | ---: |\n| 1 | 2 |\n", err, sizeof(err)),
                     0);
    assert_int_equal(qb_check_markdown("| a | b |\n| --- | --- |\n| 1 |\n", err, sizeof(err)), -1);
    assert_int_equal(qb_check_markdown("| a | b |\n| 1 | 2 |\n| 1 | 2 |\n", err, sizeof(err)), -1);
    assert_int_equal(qb_check_markdown("| a | b |\n| --- | --- |\n", err, sizeof(err)), -1);
    assert_int_equal(qb_check_markdown("| a | b |\n| --- | --- |\n| 1 | 2\n", err, sizeof(err)),
                     -1);
    assert_int_equal(qb_check_markdown("no table\n", err, sizeof(err)), -1);
    assert_int_equal(qb_check_markdown("| a |\n| --- |\n| 1 |\n\n| a |\n| --- |\n| 1 |\n", err,
                                       sizeof(err)),
                     -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),         cmocka_unit_test(test_quick_and_values),
        cmocka_unit_test(test_errors),           cmocka_unit_test(test_endpoints),
        cmocka_unit_test(test_median_and_counts), cmocka_unit_test(test_table),
        cmocka_unit_test(test_raw_round_trip),   cmocka_unit_test(test_markdown_checker),
        cmocka_unit_test(test_storages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
