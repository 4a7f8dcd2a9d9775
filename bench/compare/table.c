/* qbench's server-free half: options, results, medians, the raw file and the Markdown table.
 * See table.h. Nothing here touches the network or the disk beyond the FILE it is handed. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "table.h"

const char *const qb_system_names[QB_NSYS] = {
    "beanstalkd",      "redis",           "redis-everysec",      "postgres",
    "sqlite",          "kvq",             "kvq-proc",            "kvq-proc-2x",
    "kvq-fifo",        "kvq-priority",    "kvq-workq",           "kvq-sqlite",
    "kvq-sqlite-proc", "kvq-sqlite-proc-2x", "kvq-sqlite-fifo",  "kvq-sqlite-priority",
    "kvq-sqlite-workq", "disk",
};

const char *const qb_metric_names[QB_NMETRICS] = {
    "a_push", "a_pop", "b", "c_push", "c_pop", "c_conc", "d_p50", "d_p99",
};

const char *const qb_mem_names[QB_NMEM] = { "one", "many", "one_past", "many_past" };

/* What each row says about the system and its durability. %s is " VERSION" or nothing. */
static const char *const sys_label[QB_NSYS] = {
    "beanstalkd%s, binlog `-f 0`",
    "Redis%s, AOF `appendfsync always`",
    "Redis%s, AOF `appendfsync everysec`",
    "PostgreSQL%s, `SKIP LOCKED` table",
    "SQLite%s, WAL, table queue",
    "**kvq%s durable queue** (threads)",
    "**kvq%s durable queue** (processes)",
    "**kvq%s durable queue** (processes, twice P and C)",
    "kvq%s FIFO recipe (threads)",
    "kvq%s priority queue (threads)",
    "kvq%s work queue: receive + ack (threads)",
    "**kvq%s durable queue, SQLite storage** (threads)",
    "**kvq%s durable queue, SQLite storage** (processes)",
    "**kvq%s durable queue, SQLite storage** (processes, twice P and C)",
    "kvq%s FIFO recipe, SQLite storage (threads)",
    "kvq%s priority queue, SQLite storage (threads)",
    "kvq%s work queue, SQLite storage: receive + ack (threads)",
    "disk%s",
};

static const char *const sys_durability[QB_NSYS] = {
    "yes: fsync per put and per delete",
    "yes: fsync before each reply batch",
    "**NOT durable**: up to 1 s of writes lost",
    "yes: synchronous_commit on (group commit)",
    "yes: synchronous=FULL",
    "yes: default mode (group commit)",
    "yes: default mode (group commit)",
    "yes: default mode (group commit)",
    "yes: default mode (group commit)",
    "yes: default mode (group commit)",
    "yes: default mode (group commit)",
    "yes: default mode (group commit)",
    "yes: default mode (group commit)",
    "yes: default mode (group commit)",
    "yes: default mode (group commit)",
    "yes: default mode (group commit)",
    "yes: default mode (group commit)",
    "",
};

int qb_system_from_name(const char *name)
{
    for (int i = 0; name != NULL && i < QB_NSYS; i++) {
        if (strcmp(name, qb_system_names[i]) == 0)
            return i;
    }
    return -1;
}

int qb_metric_from_name(const char *name)
{
    for (int i = 0; name != NULL && i < QB_NMETRICS; i++) {
        if (strcmp(name, qb_metric_names[i]) == 0)
            return i;
    }
    return -1;
}

int qb_system_is_durable_baseline(int sys)
{
    return sys == QB_SYS_BEANSTALKD || sys == QB_SYS_REDIS || sys == QB_SYS_POSTGRES ||
           sys == QB_SYS_SQLITE;
}

int qb_system_is_kvq(int sys)
{
    return sys >= QB_SYS_KVQ && sys <= QB_SYS_KVQ_SQLITE_WORKQ;
}

int qb_system_is_sqlite(int sys)
{
    return sys >= QB_SYS_KVQ_SQLITE && sys <= QB_SYS_KVQ_SQLITE_WORKQ;
}

int qb_system_kvq_base(int sys)
{
    if (qb_system_is_sqlite(sys))
        return sys - QB_KVQ_ROWS;
    return qb_system_is_kvq(sys) ? sys : -1;
}

static void set_err(char *err, size_t cap, const char *fmt, ...)
{
    if (err == NULL || cap == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

int qb_parse_endpoint(qb_endpoint *out, const char *text, char *err, size_t errcap)
{
    memset(out, 0, sizeof(*out));
    if (text == NULL || *text == '\0') {
        set_err(err, errcap, "empty address");
        return -1;
    }
    const char *colon = strrchr(text, ':');
    const char *port_text = colon != NULL ? colon + 1 : text;
    size_t host_len = colon != NULL ? (size_t)(colon - text) : 0;
    char host[64] = "127.0.0.1";
    if (colon != NULL) {
        if (host_len == 0 || host_len >= sizeof(host)) {
            set_err(err, errcap, "bad address '%s' (want HOST:PORT)", text);
            return -1;
        }
        memcpy(host, text, host_len);
        host[host_len] = '\0';
    }
    if (strcmp(host, "localhost") == 0)
        strcpy(host, "127.0.0.1");
    /* Only 127.x.y.z: qbench never sends load anywhere but this machine's loopback. */
    unsigned int a, b, c, d;
    char tail;
    if (sscanf(host, "%3u.%3u.%3u.%3u%c", &a, &b, &c, &d, &tail) != 4 || a != 127 || b > 255 ||
        c > 255 || d > 255) {
        set_err(err, errcap, "refusing address '%s': only loopback (127.0.0.0/8) is allowed",
                host);
        return -1;
    }
    char *end = NULL;
    errno = 0;
    long port = strtol(port_text, &end, 10);
    if (errno != 0 || end == port_text || *end != '\0' || port < 1 || port > 65535) {
        set_err(err, errcap, "bad port in '%s'", text);
        return -1;
    }
    snprintf(out->host, sizeof(out->host), "%u.%u.%u.%u", a, b, c, d);
    out->port = (int)port;
    return 0;
}

void qb_options_init(qb_options *o)
{
    memset(o, 0, sizeof(*o));
    o->runs = 3;
    o->n = 50000;
    o->latency_n = 5000;
    o->rate = 1000.0;
    o->size = 100;
    o->batch = 100;
    o->producers = 4;
    o->consumers = 4;
    /* Every system, but of the SQLite storage's rows only its durable queue (threads), for
     * comparison: the rest are its older figures (--systems names them). */
    o->systems = ((1u << QB_NSYS) - 1) & ~((1u << QB_SYS_KVQ_SQLITE_PROC) |
                                           (1u << QB_SYS_KVQ_SQLITE_PROC2X) |
                                           (1u << QB_SYS_KVQ_SQLITE_FIFO) |
                                           (1u << QB_SYS_KVQ_SQLITE_PRIORITY) |
                                           (1u << QB_SYS_KVQ_SQLITE_WORKQ));
    o->workloads = QB_WL_ALL;
    o->mem_items = 1000000;
    o->mem_procs = 8;
    o->budget_s = 780.0;
    o->cap_s = 10.0;
    strcpy(o->pg_user, "postgres");
}

void qb_usage(FILE *f)
{
    fputs("usage: qbench [options]\n"
          "Measures queues side by side and prints one Markdown table (bench/compare/run starts\n"
          "the servers and calls this).\n"
          "  --quick                  fewer messages (5,000; 1,000 for latency)\n"
          "  --runs N                 runs of each figure; the median is printed (3)\n"
          "  --messages N             messages of workloads (a)-(c) (50,000)\n"
          "  --latency-messages N     messages of workload (d) (5,000)\n"
          "  --rate R                 messages/s of workload (d) (1,000)\n"
          "  --size B                 message bytes (100)\n"
          "  --batch K                messages per operation in (c) (100)\n"
          "  --producers P, --consumers C   clients of (b) and (c) concurrent (4, 4)\n"
          "  --systems LIST           comma-separated: beanstalkd,redis,redis-everysec,postgres,\n"
          "                           sqlite,kvq,kvq-proc,kvq-proc-2x,kvq-fifo,kvq-priority,\n"
          "                           kvq-workq (the default storage), kvq-sqlite,kvq-sqlite-proc,\n"
          "                           kvq-sqlite-proc-2x,kvq-sqlite-fifo,kvq-sqlite-priority,\n"
          "                           kvq-sqlite-workq (the older SQLite storage; of these\n"
          "                           only kvq-sqlite by default), disk (all given)\n"
          "  --workloads LIST         letters of a,b,c,d,m (abcdm); m: the memory rows of kvq\n"
          "                           (straight after the push, then past the window) and\n"
          "                           kvq-sqlite, measured once before the runs\n"
          "  --memory-items N         items queued for the memory rows (1,000,000; 100,000\n"
          "                           with --quick)\n"
          "  --memory-procs N         processes opening the queue at once in the memory rows (8)\n"
          "  --budget S               time limit of the whole comparison in seconds (780)\n"
          "  --cap S                  time limit of each phase of a workload run, seconds (10)\n"
          "  --beanstalkd HOST:PORT, --redis HOST:PORT, --redis-everysec HOST:PORT,\n"
          "  --postgres HOST:PORT     servers to measure; loopback addresses only\n"
          "  --pg-user NAME           PostgreSQL user (postgres)\n"
          "  --dir DIR                directory for SQLite, kvq and the disk test\n"
          "  --raw FILE               also write every figure of every run to FILE\n"
          "  --table-from FILE        print the table of a raw file and exit\n"
          "  --dry-run                check the options, print the plan and exit\n"
          "  --free-port              print a free loopback TCP port and exit\n"
          "  --self-test              check the table code on canned figures and exit\n",
          f);
}

static int parse_long(long *out, const char *opt, const char *text, long lo, long hi, char *err,
                      size_t errcap)
{
    char *end = NULL;
    errno = 0;
    long v = text != NULL ? strtol(text, &end, 10) : 0;
    if (text == NULL || errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
        set_err(err, errcap, "%s wants a whole number from %ld to %ld, not '%s'", opt, lo, hi,
                text != NULL ? text : "");
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_double(double *out, const char *opt, const char *text, double lo, double hi,
                        char *err, size_t errcap)
{
    char *end = NULL;
    errno = 0;
    double v = text != NULL ? strtod(text, &end) : 0.0;
    if (text == NULL || errno != 0 || end == text || *end != '\0' || !(v >= lo && v <= hi)) {
        set_err(err, errcap, "%s wants a number from %g to %g, not '%s'", opt, lo, hi,
                text != NULL ? text : "");
        return -1;
    }
    *out = v;
    return 0;
}

static int copy_text(char *dst, size_t cap, const char *opt, const char *text, char *err,
                     size_t errcap)
{
    if (text == NULL || *text == '\0' || strlen(text) >= cap) {
        set_err(err, errcap, "%s wants a non-empty value shorter than %zu bytes", opt, cap);
        return -1;
    }
    strcpy(dst, text);
    return 0;
}

static int parse_systems(unsigned int *out, const char *text, char *err, size_t errcap)
{
    char buf[256];
    if (text == NULL || *text == '\0' || strlen(text) >= sizeof(buf)) {
        set_err(err, errcap, "--systems wants a comma-separated list");
        return -1;
    }
    strcpy(buf, text);
    unsigned int mask = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        if (strcmp(t, "all") == 0) {
            mask |= (1u << QB_NSYS) - 1;
            continue;
        }
        int s = qb_system_from_name(t);
        if (s < 0) {
            set_err(err, errcap, "unknown system '%s'", t);
            return -1;
        }
        mask |= 1u << s;
    }
    if (mask == 0) {
        set_err(err, errcap, "--systems names no system");
        return -1;
    }
    *out = mask;
    return 0;
}

static int parse_workloads(unsigned int *out, const char *text, char *err, size_t errcap)
{
    unsigned int mask = 0;
    for (const char *p = text; p != NULL && *p != '\0'; p++) {
        if (*p == ',')
            continue;
        int c = tolower((unsigned char)*p);
        if (c == 'm') {
            mask |= QB_WL_M;
            continue;
        }
        if (c < 'a' || c > 'd') {
            set_err(err, errcap, "unknown workload '%c' (want letters of abcdm)", *p);
            return -1;
        }
        mask |= 1u << (c - 'a');
    }
    if (mask == 0) {
        set_err(err, errcap, "--workloads names no workload");
        return -1;
    }
    *out = mask;
    return 0;
}

/* Options that take a value. */
enum opt_id {
    OPT_RUNS,
    OPT_MESSAGES,
    OPT_LATENCY_MESSAGES,
    OPT_RATE,
    OPT_SIZE,
    OPT_BATCH,
    OPT_PRODUCERS,
    OPT_CONSUMERS,
    OPT_SYSTEMS,
    OPT_WORKLOADS,
    OPT_BUDGET,
    OPT_CAP,
    OPT_BEANSTALKD,
    OPT_REDIS,
    OPT_REDIS_EVERYSEC,
    OPT_POSTGRES,
    OPT_PG_USER,
    OPT_DIR,
    OPT_RAW,
    OPT_TABLE_FROM,
    OPT_MEMORY_ITEMS,
    OPT_MEMORY_PROCS,
    OPT_NVALUED
};

static const char *const valued_names[OPT_NVALUED] = {
    "--runs",       "--messages", "--latency-messages", "--rate",       "--size",
    "--batch",      "--producers", "--consumers",       "--systems",    "--workloads",
    "--budget",     "--cap",       "--beanstalkd",      "--redis",      "--redis-everysec",
    "--postgres",   "--pg-user",   "--dir",             "--raw",        "--table-from",
    "--memory-items", "--memory-procs",
};

static int set_valued(qb_options *o, int id, const char *name, const char *v, char *err,
                      size_t errcap)
{
    long l = 0;
    switch (id) {
    case OPT_RUNS:
        if (parse_long(&l, name, v, 1, QB_MAX_RUNS, err, errcap) != 0)
            return -1;
        o->runs = (int)l;
        return 0;
    case OPT_MESSAGES:
        return parse_long(&o->n, name, v, 1, 10000000, err, errcap);
    case OPT_LATENCY_MESSAGES:
        return parse_long(&o->latency_n, name, v, 1, 1000000, err, errcap);
    case OPT_RATE:
        return parse_double(&o->rate, name, v, 1.0, 100000.0, err, errcap);
    case OPT_SIZE:
        if (parse_long(&l, name, v, 24, 65536, err, errcap) != 0)
            return -1;
        o->size = (int)l;
        return 0;
    case OPT_BATCH:
        if (parse_long(&l, name, v, 1, 10000, err, errcap) != 0)
            return -1;
        o->batch = (int)l;
        return 0;
    case OPT_PRODUCERS:
    case OPT_CONSUMERS:
        if (parse_long(&l, name, v, 1, 64, err, errcap) != 0)
            return -1;
        if (id == OPT_PRODUCERS)
            o->producers = (int)l;
        else
            o->consumers = (int)l;
        return 0;
    case OPT_SYSTEMS:
        return parse_systems(&o->systems, v, err, errcap);
    case OPT_WORKLOADS:
        return parse_workloads(&o->workloads, v, err, errcap);
    case OPT_BUDGET:
        return parse_double(&o->budget_s, name, v, 1.0, 86400.0, err, errcap);
    case OPT_CAP:
        return parse_double(&o->cap_s, name, v, 1.0, 3600.0, err, errcap);
    case OPT_BEANSTALKD:
        return qb_parse_endpoint(&o->beanstalkd, v, err, errcap);
    case OPT_REDIS:
        return qb_parse_endpoint(&o->redis, v, err, errcap);
    case OPT_REDIS_EVERYSEC:
        return qb_parse_endpoint(&o->redis_everysec, v, err, errcap);
    case OPT_POSTGRES:
        return qb_parse_endpoint(&o->postgres, v, err, errcap);
    case OPT_PG_USER:
        return copy_text(o->pg_user, sizeof(o->pg_user), name, v, err, errcap);
    case OPT_DIR:
        return copy_text(o->dir, sizeof(o->dir), name, v, err, errcap);
    case OPT_RAW:
        return copy_text(o->raw, sizeof(o->raw), name, v, err, errcap);
    case OPT_TABLE_FROM:
        return copy_text(o->table_from, sizeof(o->table_from), name, v, err, errcap);
    case OPT_MEMORY_ITEMS:
        return parse_long(&o->mem_items, name, v, 1000, 20000000, err, errcap);
    case OPT_MEMORY_PROCS:
        if (parse_long(&l, name, v, 2, 64, err, errcap) != 0)
            return -1;
        o->mem_procs = (int)l;
        return 0;
    default:
        set_err(err, errcap, "internal: option %d", id);
        return -1;
    }
}

/* What a system needs before it can run: an endpoint or the directory. */
static int system_ready(const qb_options *o, int sys)
{
    switch (sys) {
    case QB_SYS_BEANSTALKD:
        return o->beanstalkd.port != 0;
    case QB_SYS_REDIS:
        return o->redis.port != 0;
    case QB_SYS_REDIS_EVERYSEC:
        return o->redis_everysec.port != 0;
    case QB_SYS_POSTGRES:
        return o->postgres.port != 0;
    default:
        return o->dir[0] != '\0';
    }
}

static const char *system_needs(int sys)
{
    switch (sys) {
    case QB_SYS_BEANSTALKD:
        return "--beanstalkd";
    case QB_SYS_REDIS:
        return "--redis";
    case QB_SYS_REDIS_EVERYSEC:
        return "--redis-everysec";
    case QB_SYS_POSTGRES:
        return "--postgres";
    default:
        return "--dir";
    }
}

int qb_parse_args(qb_options *o, int argc, char *const argv[], char *err, size_t errcap)
{
    int systems_given = 0, messages_given = 0, latency_given = 0, cap_given = 0, mem_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            o->help = 1;
            continue;
        }
        if (strcmp(arg, "--self-test") == 0) {
            o->self_test = 1;
            continue;
        }
        if (strcmp(arg, "--dry-run") == 0) {
            o->dry_run = 1;
            continue;
        }
        if (strcmp(arg, "--free-port") == 0) {
            o->free_port = 1;
            continue;
        }
        if (strcmp(arg, "--quick") == 0) {
            o->quick = 1;
            continue;
        }
        /* --name VALUE or --name=VALUE */
        const char *eq = strchr(arg, '=');
        size_t name_len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        int id = -1;
        for (int k = 0; k < OPT_NVALUED; k++) {
            if (strlen(valued_names[k]) == name_len &&
                strncmp(arg, valued_names[k], name_len) == 0) {
                id = k;
                break;
            }
        }
        if (id < 0) {
            set_err(err, errcap, "unknown option '%s' (see --help)", arg);
            return -1;
        }
        const char *value = NULL;
        if (eq != NULL) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            set_err(err, errcap, "%s wants a value", valued_names[id]);
            return -1;
        }
        if (set_valued(o, id, valued_names[id], value, err, errcap) != 0)
            return -1;
        systems_given |= id == OPT_SYSTEMS;
        messages_given |= id == OPT_MESSAGES;
        latency_given |= id == OPT_LATENCY_MESSAGES;
        cap_given |= id == OPT_CAP;
        mem_given |= id == OPT_MEMORY_ITEMS;
    }
    if (o->quick) {
        if (!messages_given)
            o->n = 5000;
        if (!latency_given)
            o->latency_n = 1000;
        if (!cap_given)
            o->cap_s = 5.0;
        if (!mem_given)
            o->mem_items = 100000;
    }
    if (o->help || o->self_test || o->free_port || o->table_from[0] != '\0')
        return 0;
    /* Systems named outright must be runnable; by default, run those that were given what they
     * need. A dry run only checks the options, before any server exists. */
    for (int s = 0; s < QB_NSYS && !o->dry_run; s++) {
        if ((o->systems & (1u << s)) == 0 || system_ready(o, s))
            continue;
        if (systems_given) {
            set_err(err, errcap, "system %s needs %s", qb_system_names[s], system_needs(s));
            return -1;
        }
        o->systems &= ~(1u << s);
    }
    if (o->systems == 0) {
        set_err(err, errcap, "nothing to measure: give --dir and/or server addresses");
        return -1;
    }
    if ((long)o->producers > o->n || (long)o->consumers > o->n) {
        set_err(err, errcap, "--messages must be at least the number of producers and consumers");
        return -1;
    }
    return 0;
}

void qb_results_init(qb_results *r, const qb_options *o)
{
    memset(r, 0, sizeof(*r));
    r->runs = o->runs;
    r->size = o->size;
    r->batch = o->batch;
    r->producers = o->producers;
    r->consumers = o->consumers;
    r->n = o->n;
    r->latency_n = o->latency_n;
    r->rate = o->rate;
    r->mem_items = o->mem_items;
    r->mem_procs = o->mem_procs;
}

void qb_results_add(qb_results *r, int sys, int metric, double value, int partial)
{
    if (sys < 0 || sys >= QB_NSYS || metric < 0 || metric >= QB_NMETRICS || !isfinite(value))
        return;
    qb_cell *c = &r->cell[sys][metric];
    if (c->n >= QB_MAX_RUNS)
        return;
    c->v[c->n++] = value;
    c->partial |= partial != 0;
}

static void cell_add(qb_cell *c, double v)
{
    if (isfinite(v) && c->n < QB_MAX_RUNS)
        c->v[c->n++] = v;
}

void qb_results_add_pipeline(qb_results *r, int sys, int metric, double cps, double cpo)
{
    if (sys < 0 || sys >= QB_NSYS || metric < 0 || metric >= QB_NMETRICS)
        return;
    cell_add(&r->cps[sys][metric], cps);
    cell_add(&r->cpo[sys][metric], cpo);
}

void qb_results_add_memory(qb_results *r, int sys, int k, double ratio)
{
    if (sys >= 0 && sys < QB_NSYS && k >= 0 && k < QB_NMEM)
        cell_add(&r->mem[sys][k], ratio);
}

void qb_results_unsupported(qb_results *r, int sys, int metric)
{
    if (sys >= 0 && sys < QB_NSYS && metric >= 0 && metric < QB_NMETRICS)
        r->cell[sys][metric].unsupported = 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double qb_median(const double *v, int n)
{
    if (n <= 0 || n > QB_MAX_RUNS)
        return NAN;
    double s[QB_MAX_RUNS];
    memcpy(s, v, (size_t)n * sizeof(*s));
    qsort(s, (size_t)n, sizeof(*s), cmp_double);
    return n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2.0;
}

double qb_cell_median(const qb_cell *c)
{
    return qb_median(c->v, c->n);
}

/* The raw format: a header line, settings, then "sys", "val" and "na" lines. Values print with
 * %.17g so that they read back exactly. */
int qb_results_save(const qb_results *r, FILE *f)
{
    fprintf(f, "qbench-raw 1\n");
    fprintf(f, "set runs %d\nset size %d\nset batch %d\nset producers %d\nset consumers %d\n",
            r->runs, r->size, r->batch, r->producers, r->consumers);
    fprintf(f, "set n %ld\nset latency_n %ld\nset rate %.17g\n", r->n, r->latency_n, r->rate);
    fprintf(f, "set mem_items %ld\nset mem_item_bytes %ld\nset mem_procs %d\n", r->mem_items,
            r->mem_item_bytes, r->mem_procs);
    for (int s = 0; s < QB_NSYS; s++) {
        if (r->version[s][0] != '\0')
            fprintf(f, "version %s %s\n", qb_system_names[s], r->version[s]);
        for (int k = 0; k < QB_NMEM; k++) {
            for (int i = 0; i < r->mem[s][k].n; i++)
                fprintf(f, "mem %s %s %.17g\n", qb_system_names[s], qb_mem_names[k],
                        r->mem[s][k].v[i]);
        }
        for (int m = 0; m < QB_NMETRICS; m++) {
            const qb_cell *c = &r->cell[s][m];
            if (c->unsupported)
                fprintf(f, "na %s %s\n", qb_system_names[s], qb_metric_names[m]);
            for (int k = 0; k < c->n; k++)
                fprintf(f, "val %s %s %.17g%s\n", qb_system_names[s], qb_metric_names[m],
                        c->v[k], c->partial && k == c->n - 1 ? " partial" : "");
            for (int k = 0; k < r->cps[s][m].n; k++)
                fprintf(f, "cps %s %s %.17g\n", qb_system_names[s], qb_metric_names[m],
                        r->cps[s][m].v[k]);
            for (int k = 0; k < r->cpo[s][m].n; k++)
                fprintf(f, "cpo %s %s %.17g\n", qb_system_names[s], qb_metric_names[m],
                        r->cpo[s][m].v[k]);
        }
    }
    return ferror(f) ? -1 : 0;
}

static char *trim_newline(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

static int load_setting(qb_results *r, const char *name, const char *value)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(value, &end);
    if (errno != 0 || end == value || *end != '\0' || !(v >= 0 && v <= 1e9))
        return -1;
    if (strcmp(name, "runs") == 0 && v >= 1 && v <= QB_MAX_RUNS)
        r->runs = (int)v;
    else if (strcmp(name, "size") == 0)
        r->size = (int)v;
    else if (strcmp(name, "batch") == 0)
        r->batch = (int)v;
    else if (strcmp(name, "producers") == 0)
        r->producers = (int)v;
    else if (strcmp(name, "consumers") == 0)
        r->consumers = (int)v;
    else if (strcmp(name, "n") == 0)
        r->n = (long)v;
    else if (strcmp(name, "latency_n") == 0)
        r->latency_n = (long)v;
    else if (strcmp(name, "rate") == 0)
        r->rate = v;
    else if (strcmp(name, "mem_items") == 0)
        r->mem_items = (long)v;
    else if (strcmp(name, "mem_item_bytes") == 0)
        r->mem_item_bytes = (long)v;
    else if (strcmp(name, "mem_procs") == 0)
        r->mem_procs = (int)v;
    else
        return -1;
    return 0;
}

int qb_results_load(qb_results *r, FILE *f, char *err, size_t errcap)
{
    qb_options defaults;
    qb_options_init(&defaults);
    qb_results_init(r, &defaults);
    char line[512];
    int lineno = 0;
    if (fgets(line, sizeof(line), f) == NULL || strcmp(trim_newline(line), "qbench-raw 1") != 0) {
        set_err(err, errcap, "not a qbench raw file (want the line 'qbench-raw 1' first)");
        return -1;
    }
    lineno++;
    while (fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        trim_newline(line);
        if (line[0] == '\0' || line[0] == '#')
            continue;
        char kind[16], a[64], b[64], c[64], d[16];
        int got = sscanf(line, "%15s %63s %63s %63s %15s", kind, a, b, c, d);
        int ok = 0;
        if (strcmp(kind, "set") == 0 && got == 3) {
            ok = load_setting(r, a, b) == 0;
        } else if (strcmp(kind, "version") == 0 && got >= 3) {
            int s = qb_system_from_name(a);
            const char *text = strstr(line + strlen("version "), " ");
            if (s >= 0 && text != NULL) {
                snprintf(r->version[s], sizeof(r->version[s]), "%s", text + 1);
                ok = 1;
            }
        } else if (strcmp(kind, "na") == 0 && got == 3) {
            int s = qb_system_from_name(a), m = qb_metric_from_name(b);
            if (s >= 0 && m >= 0) {
                qb_results_unsupported(r, s, m);
                ok = 1;
            }
        } else if (strcmp(kind, "mem") == 0 && got == 4) {
            int s = qb_system_from_name(a);
            int k = -1;
            for (int j = 0; j < QB_NMEM && k < 0; j++)
                k = strcmp(b, qb_mem_names[j]) == 0 ? j : -1;
            char *end = NULL;
            double v = strtod(c, &end);
            if (s >= 0 && k >= 0 && end != c && *end == '\0' && isfinite(v)) {
                qb_results_add_memory(r, s, k, v);
                ok = 1;
            }
        } else if ((strcmp(kind, "cps") == 0 || strcmp(kind, "cpo") == 0) && got == 4) {
            int s = qb_system_from_name(a), m = qb_metric_from_name(b);
            char *end = NULL;
            double v = strtod(c, &end);
            if (s >= 0 && m >= 0 && end != c && *end == '\0' && isfinite(v)) {
                cell_add(kind[2] == 's' ? &r->cps[s][m] : &r->cpo[s][m], v);
                ok = 1;
            }
        } else if (strcmp(kind, "val") == 0 && (got == 4 || got == 5)) {
            int s = qb_system_from_name(a), m = qb_metric_from_name(b);
            char *end = NULL;
            double v = strtod(c, &end);
            int partial = got == 5 && strcmp(d, "partial") == 0;
            if (s >= 0 && m >= 0 && end != c && *end == '\0' && isfinite(v) &&
                (got == 4 || partial)) {
                qb_results_add(r, s, m, v, partial);
                ok = 1;
            }
        }
        if (!ok) {
            set_err(err, errcap, "line %d of the raw file is not understood: %.60s", lineno,
                    line);
            return -1;
        }
    }
    if (ferror(f)) {
        set_err(err, errcap, "cannot read the raw file");
        return -1;
    }
    return 0;
}

void qb_format_count(char *buf, size_t cap, double v)
{
    if (!isfinite(v)) {
        snprintf(buf, cap, "—");
        return;
    }
    char digits[48];
    snprintf(digits, sizeof(digits), "%.0f", v < 0 ? -v : v);
    size_t nd = strlen(digits), o = 0;
    char out[72];
    if (v < 0 && strcmp(digits, "0") != 0)
        out[o++] = '-';
    for (size_t i = 0; i < nd && o + 2 < sizeof(out); i++) {
        if (i > 0 && (nd - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = '\0';
    snprintf(buf, cap, "%s", out);
}

static int is_latency(int m)
{
    return m == QB_D_P50 || m == QB_D_P99;
}

/* How many operations can share one sync in a workload: the ceiling is the sync rate times
 * this. One client waiting on its own durable operation shares with nobody; with N clients
 * each waiting on its own, at most about N/2 can ride one sync (the others arrive while it is
 * under way and take the next); a batch multiplies that by its size. */
static double ops_per_sync(const qb_results *r, int m)
{
    double half = (double)(r->producers + r->consumers) / 2.0;
    switch (m) {
    case QB_A_PUSH:
    case QB_A_POP:
        return 1.0;
    case QB_B:
        return half;
    case QB_C_PUSH:
    case QB_C_POP:
        return (double)r->batch;
    case QB_C_CONC:
        return half * (double)r->batch;
    default:
        return NAN;
    }
}

/* The best durable baseline of a column: the highest rate or the lowest latency. */
static double best_baseline(const qb_results *r, int m, int *who)
{
    double best = NAN;
    *who = -1;
    for (int s = 0; s < QB_NSYS; s++) {
        if (!qb_system_is_durable_baseline(s))
            continue;
        double v = qb_cell_median(&r->cell[s][m]);
        if (!isfinite(v))
            continue;
        if (!isfinite(best) || (is_latency(m) ? v < best : v > best)) {
            best = v;
            *who = s;
        }
    }
    return best;
}

static const char *short_name(int sys)
{
    switch (sys) {
    case QB_SYS_BEANSTALKD:
        return "beanstalkd";
    case QB_SYS_REDIS:
        return "Redis";
    case QB_SYS_POSTGRES:
        return "PostgreSQL";
    case QB_SYS_SQLITE:
        return "SQLite";
    default:
        return qb_system_names[sys];
    }
}

static void format_value(char *buf, size_t cap, const qb_results *r, int s, int m)
{
    const qb_cell *c = &r->cell[s][m];
    if (c->n == 0) {
        snprintf(buf, cap, "%s", c->unsupported ? "n/a" : "—");
        return;
    }
    double v = qb_cell_median(c);
    char num[64];
    if (is_latency(m))
        snprintf(num, sizeof(num), v < 10.0 ? "%.2f" : "%.1f", v);
    else
        qb_format_count(num, sizeof(num), v);
    char fewer[24] = "";
    if (c->n < r->runs)
        snprintf(fewer, sizeof(fewer), " (n=%d)", c->n);
    snprintf(buf, cap, "%s%s%s", num, c->partial ? "*" : "", fewer);
}

static int row_has_figures(const qb_results *r, int s)
{
    for (int m = 0; m < QB_NMETRICS; m++) {
        if (r->cell[s][m].n > 0)
            return 1;
    }
    return 0;
}

static void column_header(char *buf, size_t cap, const qb_results *r, int m)
{
    int p = r->producers, c = r->consumers, k = r->batch;
    switch (m) {
    case QB_A_PUSH:
        snprintf(buf, cap, "(a) push/s");
        break;
    case QB_A_POP:
        snprintf(buf, cap, "(a) pop/s");
        break;
    case QB_B:
        snprintf(buf, cap, "(b) %dP+%dC ops/s", p, c);
        break;
    case QB_C_PUSH:
        snprintf(buf, cap, "(c) ×%d push msg/s", k);
        break;
    case QB_C_POP:
        snprintf(buf, cap, "(c) ×%d pop msg/s", k);
        break;
    case QB_C_CONC:
        snprintf(buf, cap, "(c) ×%d %dP+%dC msg/s", k, p, c);
        break;
    case QB_D_P50:
        snprintf(buf, cap, "(d) p50 ms");
        break;
    default:
        snprintf(buf, cap, "(d) p99 ms");
        break;
    }
}

/* How judge compares a figure with its target. */
enum { J_AT_LEAST, J_BELOW, J_AT_MOST };

/* Writes "what: figure met" or "what: figure **missed**", judging the figure as printed, so that
 * "1.20" is never called short of 1.2. */
static void judge(char *buf, size_t cap, const char *what, double got, double want, int how)
{
    if (!isfinite(got)) {
        snprintf(buf, cap, "%s: —", what);
        return;
    }
    got = (double)(long long)(got * 100.0 + 0.5) / 100.0; /* (no libm: the unit test has none) */
    int met = how == J_BELOW ? got < want : how == J_AT_MOST ? got <= want : got >= want;
    snprintf(buf, cap, "%s: %.2f %s", what, got, met ? "met" : "**missed**");
}

/* Issue 24's target for kvq's durable queue (system s: threads or processes, either storage) in
 * column m, and whether it was met. Returns 0 when the column has no target for s. */
static int target_cell(char *buf, size_t cap, const qb_results *r, int s, int m)
{
    double kvq = qb_cell_median(&r->cell[s][m]);
    double sync = qb_cell_median(&r->cell[QB_SYS_DISK][QB_A_PUSH]);
    double redis = qb_cell_median(&r->cell[QB_SYS_REDIS][m]);
    int who;
    double best = best_baseline(r, m, &who);
    if (qb_system_kvq_base(s) != QB_SYS_KVQ && m != QB_B && m != QB_C_CONC)
        return 0; /* processes are measured only where clients run at once */
    switch (m) {
    case QB_A_PUSH:
    case QB_A_POP:
        judge(buf, cap, "≥0.9 of disk", kvq / sync, 0.9, J_AT_LEAST);
        return 1;
    case QB_B:
    case QB_C_PUSH:
    case QB_C_POP:
    case QB_C_CONC:
        judge(buf, cap, "≥1.5× best", kvq / best, 1.5, J_AT_LEAST);
        return 1;
    case QB_D_P50:
    case QB_D_P99:
        judge(buf, cap, "÷ Redis ≤1", kvq / redis, 1.0, J_AT_MOST);
        return 1;
    default:
        return 0;
    }
}

/* Issue 24's target for a recipe row (FIFO or priority, either storage) against the durable
 * queue's threads row of the same storage: (a)-(c) at least 0.8 of its rate, (d) at most twice
 * its latency. */
static void recipe_cell(char *buf, size_t cap, const qb_results *r, int s, int m)
{
    int durable = qb_system_is_sqlite(s) ? QB_SYS_KVQ_SQLITE : QB_SYS_KVQ;
    double ratio = qb_cell_median(&r->cell[s][m]) / qb_cell_median(&r->cell[durable][m]);
    if (is_latency(m))
        judge(buf, cap, "≤2× durable", ratio, 2.0, J_AT_MOST);
    else
        judge(buf, cap, "≥0.8× durable", ratio, 0.8, J_AT_LEAST);
}

/* Prints one row from an array of cell texts. */
static void put_row(FILE *f, char cells[][96], int ncells)
{
    fputc('|', f);
    for (int i = 0; i < ncells; i++)
        fprintf(f, " %s |", cells[i]);
    fputc('\n', f);
}

#define NCOLS (2 + QB_NMETRICS)

static const char *storage_name(int sys)
{
    return qb_system_is_sqlite(sys) ? "SQLite storage" : "log store";
}

/* The rows that compare kvq's durable queue (threads, processes) of one storage with the
 * baselines and the ceiling, and judge issue 24's targets. sq is 0 (the default storage, the log
 * store) or 1 (the SQLite storage). */
static void write_storage_rows(FILE *f, const qb_results *r, int sq, char cells[][96])
{
    const int off = sq ? QB_KVQ_ROWS : 0;
    const int subjects[2] = { QB_SYS_KVQ + off, QB_SYS_KVQ_PROC + off };
    const char *st = sq ? "SQLite storage" : "log store";
    double sync = qb_cell_median(&r->cell[QB_SYS_DISK][QB_A_PUSH]);
    for (int k = 0; k < 2; k++) {
        int s = subjects[k];
        if (!row_has_figures(r, s))
            continue;
        const char *how = k == 0 ? "threads" : "processes";
        snprintf(cells[0], 96, "kvq durable, %s (%s) ÷ best durable baseline", st, how);
        snprintf(cells[1], 96, "Redis everysec excluded");
        for (int m = 0; m < QB_NMETRICS; m++) {
            int who;
            double best = best_baseline(r, m, &who);
            double v = qb_cell_median(&r->cell[s][m]);
            if (isfinite(best) && isfinite(v) && best > 0)
                snprintf(cells[2 + m], 96, "%.2f× %s", v / best, short_name(who));
            else
                snprintf(cells[2 + m], 96, "—");
        }
        put_row(f, cells, NCOLS);
        if (!isfinite(sync))
            continue;
        snprintf(cells[0], 96, "kvq durable, %s (%s) ÷ ceiling", st, how);
        snprintf(cells[1], 96, "fraction of disk syncs/s × ops per sync");
        for (int m = 0; m < QB_NMETRICS; m++) {
            double v = qb_cell_median(&r->cell[s][m]);
            if (!is_latency(m) && isfinite(v))
                snprintf(cells[2 + m], 96, "%.2f", v / (sync * ops_per_sync(r, m)));
            else
                snprintf(cells[2 + m], 96, "—");
        }
        put_row(f, cells, NCOLS);
    }
    for (int k = 0; k < 2; k++) {
        int s = subjects[k];
        if (!row_has_figures(r, s))
            continue;
        snprintf(cells[0], 96, "target for kvq durable, %s (%s), issue 24", st,
                 k == 0 ? "threads" : "processes");
        snprintf(cells[1], 96, "ratios from this run");
        for (int m = 0; m < QB_NMETRICS; m++) {
            if (!target_cell(cells[2 + m], 96, r, s, m))
                snprintf(cells[2 + m], 96, " ");
        }
        put_row(f, cells, NCOLS);
    }
    /* The other targets of (b): conflicts per pop (half of (b)'s operations are pops, and
     * pushes never conflict, so a pop's share is twice the figure per operation), and twice the
     * processes no slower than the processes. */
    if (row_has_figures(r, subjects[0]) || row_has_figures(r, subjects[1])) {
        snprintf(cells[0], 96, "target in (b), %s, issue 24", st);
        snprintf(cells[1], 96, "threads; processes; 16 ÷ 8 processes");
        for (int m = 0; m < QB_NMETRICS; m++)
            snprintf(cells[2 + m], 96, " ");
        char t[96], p[96], x[96];
        judge(t, sizeof(t), "conflicts/pop <0.05",
              2.0 * qb_cell_median(&r->cpo[subjects[0]][QB_B]), 0.05, J_BELOW);
        judge(p, sizeof(p), "procs", 2.0 * qb_cell_median(&r->cpo[subjects[1]][QB_B]), 0.05,
              J_BELOW);
        judge(x, sizeof(x), "16÷8 ≥1",
              qb_cell_median(&r->cell[QB_SYS_KVQ_PROC2X + off][QB_B]) /
                  qb_cell_median(&r->cell[subjects[1]][QB_B]),
              1.0, J_AT_LEAST);
        snprintf(cells[2 + QB_B], 96, "%.36s; %.22s; %.30s", t, p, x);
        put_row(f, cells, NCOLS);
    }
    /* The recipes against the durable queue of the same storage. */
    const int recipes[2] = { QB_SYS_KVQ_FIFO + off, QB_SYS_KVQ_PRIORITY + off };
    for (int k = 0; k < 2; k++) {
        int s = recipes[k];
        if (!row_has_figures(r, s) || !row_has_figures(r, QB_SYS_KVQ + off))
            continue;
        snprintf(cells[0], 96, "target for kvq %s, %s, issue 24",
                 k == 0 ? "FIFO recipe" : "priority queue", st);
        snprintf(cells[1], 96, "÷ kvq durable (threads), same storage");
        for (int m = 0; m < QB_NMETRICS; m++)
            recipe_cell(cells[2 + m], 96, r, s, m);
        put_row(f, cells, NCOLS);
    }
}

/* A memory figure: two decimals, three below 0.1 (a page cache and the map's bookkeeping, not
 * the data). */
static void format_memory(char *buf, size_t cap, const char *what, const qb_cell *c,
                          const char *each)
{
    double v = qb_cell_median(c);
    if (c->n == 0)
        snprintf(buf, cap, "%s: —", what);
    else
        snprintf(buf, cap, v < 0.1 ? "%s: %.3f%s" : "%s: %.2f%s", what, v, each);
}

/* One memory row of one storage's durable queue: bytes of memory per byte of live data, the
 * figures one and many (QB_MEM_*) of 1 and of mem_procs processes. when: what the label adds
 * (when the figures were taken); past: the row past the window, which states issue 31's target
 * (at most 0.1 per process, with 1 and with 8 processes). */
static void write_memory_row(FILE *f, const qb_results *r, int s, int one_k, int many_k,
                             const char *when, int past, char cells[][96])
{
    const qb_cell *one = &r->mem[s][one_k], *many = &r->mem[s][many_k];
    if (one->n == 0 && many->n == 0)
        return;
    char items[32], procs[32];
    qb_format_count(items, sizeof(items), (double)r->mem_items);
    snprintf(cells[0], 96, "kvq memory ÷ live data, %s%s", storage_name(s), when);
    snprintf(cells[1], 96, "%s queued items of %ld bytes (key + value)", items, r->mem_item_bytes);
    for (int m = 0; m < QB_NMETRICS; m++)
        snprintf(cells[2 + m], 96, " ");
    format_memory(cells[2], 96, "1 process", one, "");
    snprintf(procs, sizeof(procs), "%d processes", r->mem_procs);
    format_memory(cells[3], 96, procs, many, " each");
    if (past) {
        double v1 = qb_cell_median(one), v8 = qb_cell_median(many);
        if (one->n == 0 || many->n == 0)
            snprintf(cells[4], 96, "≤0.1 each (issue 31): —");
        else
            snprintf(cells[4], 96, "≤0.1 each (issue 31): %s",
                     v1 <= 0.1 && v8 <= 0.1 ? "met" : "**missed**");
    }
    put_row(f, cells, NCOLS);
}

/* The memory rows of one storage's durable queue. The log store keeps the window (the last 5
 * seconds of commits, and the applier's lag) in each process by design, and a queue read
 * straight after its items were pushed has them all there: one row for that, one for the same
 * database once its table holds every item. The SQLite storage has no window: one row. */
static void write_memory_rows(FILE *f, const qb_results *r, int s, char cells[][96])
{
    if (qb_system_is_sqlite(s)) {
        write_memory_row(f, r, s, QB_MEM_ONE, QB_MEM_MANY, "", 0, cells);
        return;
    }
    write_memory_row(f, r, s, QB_MEM_ONE, QB_MEM_MANY,
                     ", straight after the push (all in the window)", 0, cells);
    write_memory_row(f, r, s, QB_MEM_ONE_PAST, QB_MEM_MANY_PAST,
                     ", past the window (all in the table)", 1, cells);
}

int qb_write_table(FILE *f, const qb_results *r)
{
    char cells[NCOLS][96];
    snprintf(cells[0], sizeof(cells[0]), "system");
    snprintf(cells[1], sizeof(cells[1]), "durable");
    for (int m = 0; m < QB_NMETRICS; m++)
        column_header(cells[2 + m], sizeof(cells[0]), r, m);
    put_row(f, cells, NCOLS);
    snprintf(cells[0], sizeof(cells[0]), "---");
    snprintf(cells[1], sizeof(cells[1]), "---");
    for (int m = 0; m < QB_NMETRICS; m++)
        snprintf(cells[2 + m], sizeof(cells[0]), "---:");
    put_row(f, cells, NCOLS);

    for (int s = 0; s < QB_NSYS; s++) {
        if (s == QB_SYS_DISK || !row_has_figures(r, s))
            continue;
        char ver[72] = "";
        if (r->version[s][0] != '\0')
            snprintf(ver, sizeof(ver), " %s", r->version[s]);
        snprintf(cells[0], sizeof(cells[0]), sys_label[s], ver);
        snprintf(cells[1], sizeof(cells[1]), "%s", sys_durability[s]);
        for (int m = 0; m < QB_NMETRICS; m++)
            format_value(cells[2 + m], sizeof(cells[0]), r, s, m);
        put_row(f, cells, NCOLS);
    }

    /* kvq's commit pipeline: how many commits each sync carried, and how often an operation
     * lost a conflict (pushes never do; pops of one queue can). */
    for (int s = 0; s < QB_NSYS; s++) {
        int any = 0;
        for (int m = 0; m < QB_NMETRICS; m++)
            any |= r->cps[s][m].n > 0;
        if (!qb_system_is_kvq(s) || !any)
            continue;
        snprintf(cells[0], sizeof(cells[0]), "%s: commits per sync; conflicts per op",
                 qb_system_names[s]);
        snprintf(cells[1], sizeof(cells[1]), "medians of the same runs");
        for (int m = 0; m < QB_NMETRICS; m++) {
            double cps = qb_cell_median(&r->cps[s][m]), cpo = qb_cell_median(&r->cpo[s][m]);
            if (isfinite(cps) && isfinite(cpo))
                snprintf(cells[2 + m], sizeof(cells[0]), "%.1f; %.3f", cps, cpo);
            else
                snprintf(cells[2 + m], sizeof(cells[0]), "—");
        }
        put_row(f, cells, NCOLS);
    }

    double sync = qb_cell_median(&r->cell[QB_SYS_DISK][QB_A_PUSH]);
    if (isfinite(sync)) {
        char rate[96];
        format_value(rate, sizeof(rate), r, QB_SYS_DISK, QB_A_PUSH);
        snprintf(cells[0], sizeof(cells[0]), "ceiling: disk syncs/s × ops per sync");
        /* The disk is sampled at the start and the end of each run: say how many. */
        snprintf(cells[1], sizeof(cells[1]), "4 KiB write + fdatasync: %.40s/s (median of %d)",
                 rate, r->cell[QB_SYS_DISK][QB_A_PUSH].n);
        for (int m = 0; m < QB_NMETRICS; m++) {
            if (is_latency(m))
                snprintf(cells[2 + m], sizeof(cells[0]), "—");
            else
                qb_format_count(cells[2 + m], sizeof(cells[0]), sync * ops_per_sync(r, m));
        }
        put_row(f, cells, NCOLS);
    }

    /* Each storage's durable queue against the others and the targets, then the memory row. */
    write_storage_rows(f, r, 0, cells);
    write_storage_rows(f, r, 1, cells);
    write_memory_rows(f, r, QB_SYS_KVQ, cells);
    write_memory_rows(f, r, QB_SYS_KVQ_SQLITE, cells);
    char n[32], ln[32], rt[32];
    qb_format_count(n, sizeof(n), (double)r->n);
    qb_format_count(ln, sizeof(ln), (double)r->latency_n);
    qb_format_count(rt, sizeof(rt), r->rate);
    fprintf(f,
            "\n%d-byte messages; (a)-(c) %s messages each, (d) %s at %s msg/s; every figure is "
            "the median of %d run%s. Rates count each message pushed and each message popped "
            "once; (b) and (c) concurrent add up %d producers and %d consumers running at once. "
            "n/a: no batch operation; *: a run stopped at its time cap (rate over what "
            "completed); (n=k): only k runs finished within the time budget; —: not measured.\n",
            r->size, n, ln, rt, r->runs, r->runs == 1 ? "" : "s", r->producers, r->consumers);
    fprintf(f, "kvq's rows run on the embedded engine's default storage, the log store, unless "
               "they say \"SQLite storage\" (a \"sqlite:\" URL: the older storage, kept for the "
               "databases made with it).");
    int any_mem = 0, any_past = 0;
    for (int k = 0; k < QB_NMEM; k++) {
        int cnt = r->mem[QB_SYS_KVQ][k].n + r->mem[QB_SYS_KVQ_SQLITE][k].n;
        any_mem |= cnt > 0;
        any_past |= cnt > 0 && (k == QB_MEM_ONE_PAST || k == QB_MEM_MANY_PAST);
    }
    if (any_mem)
        fprintf(f, " Memory rows: the growth of a process's anonymous memory (RssAnon) from "
                   "before it opened the database to after it read the queue, divided by the "
                   "live data (keys and values of the queued items), with one process, then the "
                   "mean of %d processes holding it open at once; measured once, before the "
                   "runs. \"Straight after the push\": read as soon as the items were pushed, "
                   "when on the log store every item is still inside the 5-second window, which "
                   "each process keeps in memory by design (a function of the commit rate, "
                   "bounded by KVQ_LOGSTORE_MEMORY_LIMIT; docs/logstore.md, \"Memory\").",
                r->mem_procs);
    if (any_past)
        fprintf(f, " \"Past the window\": measured again, by new processes, once a process "
                   "holding the database open found that the log store's table held every item "
                   "(its statistics: nothing left in memory that the table lacks; waited for at "
                   "most %d s): what a queue holding data costs, whatever its size. The SQLite "
                   "storage has no window.",
                QB_MEM_PAST_WAIT_S);
    fputc('\n', f);
    return ferror(f) ? -1 : 0;
}

/* Counts the cells of a table line ("| a | b |" has 2), or -1 if it is not one. */
static int count_cells(const char *line, size_t len)
{
    if (len < 2 || line[0] != '|' || line[len - 1] != '|')
        return -1;
    int cells = 0;
    for (size_t i = 1; i < len; i++) {
        if (line[i] == '|')
            cells++;
    }
    return cells;
}

static int is_separator_cell(const char *p, size_t n)
{
    while (n > 0 && *p == ' ') {
        p++;
        n--;
    }
    while (n > 0 && p[n - 1] == ' ')
        n--;
    if (n > 0 && *p == ':') {
        p++;
        n--;
    }
    if (n > 0 && p[n - 1] == ':')
        n--;
    if (n < 3)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '-')
            return 0;
    }
    return 1;
}

int qb_check_markdown(const char *text, char *err, size_t errcap)
{
    int tables = 0, in_table = 0, width = 0, row = 0, lineno = 0;
    const char *p = text;
    while (p != NULL && *p != '\0') {
        const char *nl = strchr(p, '\n');
        size_t len = nl != NULL ? (size_t)(nl - p) : strlen(p);
        lineno++;
        if (len > 0 && p[0] == '|') {
            int cells = count_cells(p, len);
            if (cells < 1) {
                set_err(err, errcap, "line %d: a table row must start and end with '|'", lineno);
                return -1;
            }
            if (!in_table) {
                in_table = 1;
                tables++;
                width = cells;
                row = 0;
            } else if (cells != width) {
                set_err(err, errcap, "line %d has %d cells, the header %d", lineno, cells, width);
                return -1;
            }
            if (row == 1) {
                const char *c = p + 1;
                for (int i = 0; i < cells; i++) {
                    const char *bar = memchr(c, '|', len - (size_t)(c - p));
                    if (bar == NULL || !is_separator_cell(c, (size_t)(bar - c))) {
                        set_err(err, errcap, "line %d: the separator row's cell %d is not ---",
                                lineno, i + 1);
                        return -1;
                    }
                    c = bar + 1;
                }
            }
            for (size_t i = 0; i < len; i++) {
                if (p[i] == '\t') {
                    set_err(err, errcap, "line %d holds a tab", lineno);
                    return -1;
                }
            }
            row++;
        } else {
            if (in_table && row < 3) {
                set_err(err, errcap, "line %d: a table needs a header, a separator and a row",
                        lineno);
                return -1;
            }
            in_table = 0;
        }
        p = nl != NULL ? nl + 1 : NULL;
    }
    if (in_table && row < 3) {
        set_err(err, errcap, "the table needs a header, a separator and a row");
        return -1;
    }
    if (tables != 1) {
        set_err(err, errcap, "expected one table, found %d", tables);
        return -1;
    }
    return 0;
}
