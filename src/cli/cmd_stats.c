/* The operator's view: kvq queues (every queue with its counts) and kvq stats (one queue or all,
 * as text, JSON or Prometheus's text exposition format, once or refreshed every second). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/qops.h"
#include "util/util.h"

/* The counted figures of a queue, each meaning one thing. */
enum {
    F_SENT,
    F_POPPED,
    F_RECEIVED,
    F_ACKED,
    F_REQUEUED,
    F_DEAD_LETTERED,
    F_CLEARED,
    F_IN_FLIGHT,
    F_DELAYED,
    F_DEAD,
    NFIELDS
};

typedef struct field {
    const char *key;  /* the text and JSON key */
    const char *kind; /* "counter" (also gets a rate) or "gauge" */
    const char *help;
} field;

static const field FIELDS[NFIELDS] = {
    { "sent", "counter", "Items pushed by producers, each once (durable queues)." },
    { "popped", "counter", "Items removed by plain pops, without a lease (durable queues)." },
    { "received", "counter", "Leases handed out by receive and consume (each delivery once)." },
    { "acked", "counter", "Leased items acknowledged: done and deleted." },
    { "requeued", "counter",
      "Items given back to the queue after a delivery: nack, ended lease or redrive." },
    { "dead_lettered", "counter", "Items moved to the dead letters." },
    { "cleared", "counter", "Items removed by kvq clear, whatever their state." },
    { "in_flight", "gauge", "Items leased to a consumer and not yet settled." },
    { "delayed", "gauge", "Items waiting for their delay." },
    { "dead", "gauge", "Dead letters." },
};

/* What is known of one queue; a figure that does not apply is absent (JSON null). */
typedef struct qview {
    char name[256];
    kvq_queue_type type;
    uint64_t length;
    int has[NFIELDS];
    uint64_t f[NFIELDS];
    int has_age; /* the oldest ready item's age */
    double age_s;
    kvq_workq_stats m;
} qview;

static uint64_t minus(uint64_t a, int64_t b)
{
    return b < 0 ? a : a > (uint64_t)b ? a - (uint64_t)b : 0;
}

static int gather(cli *c, const char *name, qview *v)
{
    memset(v, 0, sizeof(*v));
    snprintf(v->name, sizeof(v->name), "%s", name);
    cli_queue *q;
    kvq_queue_settings info;
    int rc = cli_open_named(c, name, &q, &info);
    if (rc != 0)
        return rc;
    v->type = info.type;
    cli_queue_stats s = { 0 };
    int err = 0;
    kvq_workq *w = NULL;
    /* The work queue's statistics first: reading them makes due items ready, so that the
     * counters read next count them as ready too. */
    if (info.type != KVQ_QUEUE_FIFO) {
        err = cli_queue_workq(q, &info, &w);
        if (err == 0)
            err = kvq_workq_get_stats(&v->m, w);
    }
    if (err == 0)
        err = cli_queue_stats_get(q, &s);
    v->length = s.length;
    if (err == 0 && info.type != KVQ_QUEUE_FIFO) {
        const kvq_workq_stats *m = &v->m;
        /* The durable queue's push and pop counters also move when the work queue gives
         * an item back or takes one: what is left is producers' pushes and plain pops
         * (read a moment apart, so never below 0). */
        if (s.has_counters) {
            v->has[F_SENT] = v->has[F_POPPED] = 1;
            v->f[F_SENT] = minus(s.pushes, m->requeued);
            v->f[F_POPPED] = minus(minus(s.pops, m->taken), m->cleared_ready);
        }
        int64_t wq[] = { m->received, m->acked,    m->requeued, m->dead_lettered,
                         m->cleared,  m->inflight, m->delayed,  m->dead };
        for (int i = 0; i < 8; i++) {
            v->has[F_RECEIVED + i] = 1;
            v->f[F_RECEIVED + i] = wq[i] < 0 ? 0 : (uint64_t)wq[i];
        }
        v->has_age = m->oldest_ready_age_ms >= 0;
        v->age_s = (double)m->oldest_ready_age_ms / 1000.0;
    }
    cli_queue_close(q);
    if (err != 0)
        return cli_fail(err, "reading the queue's figures failed");
    return 0;
}

static void json_u64(const char *key, int has, uint64_t v)
{
    if (has)
        printf(",\"%s\":%llu", key, (unsigned long long)v);
    else
        printf(",\"%s\":null", key);
}

/* The rate of counter i since prev over secs seconds; 0 when there is none. */
static int rate_of(const qview *v, const qview *prev, double secs, int i, double *out)
{
    if (prev == NULL || secs <= 0 || !v->has[i] || !prev->has[i] ||
        strcmp(FIELDS[i].kind, "counter") != 0)
        return 0;
    *out = (double)minus(v->f[i], (int64_t)prev->f[i]) / secs;
    return 1;
}

/* rates: per second since the previous view (NULL: none yet). */
static void print_json(const qview *v, const qview *prev, double secs)
{
    printf("{\"name\":");
    cli_json_str(stdout, (const uint8_t *)v->name, strlen(v->name));
    printf(",\"type\":\"%s\"", cli_type_name(v->type));
    json_u64("length", 1, v->length);
    for (int i = 0; i < NFIELDS; i++)
        json_u64(FIELDS[i].key, v->has[i], v->f[i]);
    if (v->has_age)
        printf(",\"oldest_age_seconds\":%.3f", v->age_s);
    else
        printf(",\"oldest_age_seconds\":null");
    for (int i = 0; i < NFIELDS; i++) {
        double r;
        if (strcmp(FIELDS[i].kind, "counter") != 0)
            continue;
        if (rate_of(v, prev, secs, i, &r))
            printf(",\"%s_per_second\":%.1f", FIELDS[i].key, r);
        else
            printf(",\"%s_per_second\":null", FIELDS[i].key);
    }
    printf("}");
}

static void print_text(const qview *v, const qview *prev, double secs)
{
    printf("type\t%s\nlength\t%llu\n", cli_type_name(v->type), (unsigned long long)v->length);
    for (int i = 0; i < NFIELDS; i++)
        if (v->has[i])
            printf("%s\t%llu\n", FIELDS[i].key, (unsigned long long)v->f[i]);
    if (v->has_age)
        printf("oldest_age_seconds\t%.3f\n", v->age_s);
    for (int i = 0; i < NFIELDS; i++) {
        double r;
        if (rate_of(v, prev, secs, i, &r))
            printf("%s_per_second\t%.1f\n", FIELDS[i].key, r);
    }
}

/* A label value in the exposition format, which is UTF-8: backslash, double quote and newline
 * escaped, and a byte that is not UTF-8 written as U+FFFD (the format has no escape for it). */
static void prom_label(const char *s)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t len = cli_utf8_len(p + i, n - i);
        if (len == 0) {
            fputs("\xef\xbf\xbd", stdout);
            i++;
        } else if (p[i] == '\\' || p[i] == '"') {
            printf("\\%c", p[i]);
            i++;
        } else if (p[i] == '\n') {
            printf("\\n");
            i++;
        } else {
            fwrite(p + i, 1, len, stdout);
            i += len;
        }
    }
}

/* One family: its samples for every queue it applies to. i: a field, or -1 length, -2 age. */
static void prom_family(int i, const qview *vs, size_t n)
{
    char name[64];
    const char *kind, *help;
    if (i == -1) {
        snprintf(name, sizeof(name), "kvq_queue_length");
        kind = "gauge";
        help = "Items ready to be popped or received (not delayed, in flight or dead).";
    } else if (i == -2) {
        snprintf(name, sizeof(name), "kvq_queue_oldest_age_seconds");
        kind = "gauge";
        help = "Age of the oldest ready item.";
    } else {
        int counter = strcmp(FIELDS[i].kind, "counter") == 0;
        snprintf(name, sizeof(name), "kvq_queue_%s%s", FIELDS[i].key, counter ? "_total" : "");
        kind = FIELDS[i].kind;
        help = FIELDS[i].help;
    }
    printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind);
    for (size_t j = 0; j < n; j++) {
        const qview *v = &vs[j];
        double x;
        if (i == -1)
            x = (double)v->length;
        else if (i == -2 && v->has_age)
            x = v->age_s;
        else if (i >= 0 && v->has[i])
            x = (double)v->f[i];
        else
            continue;
        printf("%s{queue=\"", name);
        prom_label(v->name);
        printf("\",type=\"%s\"} %.17g\n", cli_type_name(v->type), x);
    }
}

static void print_prom(const qview *vs, size_t n)
{
    prom_family(-1, vs, n);
    for (int i = 0; i < NFIELDS; i++)
        prom_family(i, vs, n);
    prom_family(-2, vs, n);
}

/* The queues to show: one by name, or every one in the registry. */
typedef struct qset {
    qview *v;
    size_t n, cap;
} qset;

static int add_name(const char *name, const kvq_queue_settings *settings, void *arg)
{
    (void)settings;
    qset *set = arg;
    if (set->n == set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 8;
        qview *nv = kvq__realloc(set->v, cap * sizeof(*nv));
        if (nv == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory");
        set->v = nv;
        set->cap = cap;
    }
    snprintf(set->v[set->n++].name, sizeof(set->v[0].name), "%s", name);
    return 0;
}

static int gather_all(cli *c, const char *only, qset *set)
{
    set->n = 0;
    int err = only != NULL ? add_name(only, NULL, set) : kvq_queue_list_named(c->db, add_name, set);
    if (err != 0)
        return cli_fail(err, "cannot list the queues");
    for (size_t i = 0; i < set->n; i++) {
        char name[256];
        snprintf(name, sizeof(name), "%s", set->v[i].name);
        int rc = gather(c, name, &set->v[i]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static volatile sig_atomic_t watch_stop;

static void on_stop(int sig)
{
    (void)sig;
    watch_stop = 1;
}

int cmd_stats(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    int prom = 0, watch = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--prometheus") == 0)
            prom = 1;
        else if (strcmp(argv[i], "--watch") == 0)
            watch = 1;
        else if (argv[i][0] == '-' || name != NULL)
            return cli_usage("stats", "unexpected argument '%s'", cli_arg(argv[i]));
        else
            name = argv[i];
    }
    if (name != NULL && kvq_queue_check_name(name) != 0)
        return cli_usage("stats", "invalid queue name '%s'", cli_arg(name));
    if (prom && c->json)
        return cli_usage("stats", "--prometheus and --json exclude each other");
    int rc = cli_open(c);
    if (rc != 0)
        return rc;
    qset now = { 0 }, before = { 0 };
    int64_t t_before = 0;
    if (watch) {
        signal(SIGINT, on_stop);
        signal(SIGTERM, on_stop);
    }
    int tty = isatty(STDOUT_FILENO);
    for (int round = 0; rc == 0; round++) {
        rc = gather_all(c, name, &now);
        if (rc != 0)
            break;
        int64_t t_now = kvq__mono_us();
        double secs = round > 0 ? (double)(t_now - t_before) / 1e6 : 0;
        if (watch && tty)
            printf("\033[H\033[2J");
        if (prom) {
            print_prom(now.v, now.n);
        } else {
            if (c->json && (name == NULL || watch))
                printf("[");
            for (size_t i = 0; i < now.n; i++) {
                /* The same queue as the view before, for rates (the list may have changed). */
                const qview *prev = NULL;
                for (size_t j = 0; round > 0 && j < before.n; j++)
                    if (strcmp(before.v[j].name, now.v[i].name) == 0)
                        prev = &before.v[j];
                if (c->json) {
                    printf("%s", i ? "," : "");
                    print_json(&now.v[i], prev, secs);
                } else {
                    if (name == NULL)
                        printf("%s%s\n", i ? "\n" : "", now.v[i].name);
                    print_text(&now.v[i], prev, secs);
                }
            }
            if (c->json)
                printf("%s\n", name == NULL || watch ? "]" : "");
        }
        if (fflush(stdout) != 0)
            break; /* the reader went away */
        if (!watch)
            break;
        if (!tty && !prom && !c->json)
            printf("--\n");
        qset t = before;
        before = now;
        now = t;
        t_before = t_now;
        for (int ms = 0; ms < 1000 && !watch_stop; ms += 50)
            kvq__sleep_us(50000);
        if (watch_stop)
            break;
    }
    kvq__free(now.v);
    kvq__free(before.v);
    return rc;
}

/* kvq queues: one line per queue (a header, then aligned columns), or a JSON array. */
int cmd_queues(cli *c, int argc, char **argv)
{
    if (argc > 1)
        return cli_usage("queues", "unexpected argument '%s'", cli_arg(argv[1]));
    int rc = cli_open(c);
    if (rc != 0)
        return rc;
    qset set = { 0 };
    rc = gather_all(c, NULL, &set);
    if (rc == 0 && c->json) {
        printf("[");
        for (size_t i = 0; i < set.n; i++) {
            printf("%s", i ? "," : "");
            print_json(&set.v[i], NULL, 0);
        }
        printf("]\n");
    } else if (rc == 0) {
        printf("%-24s %-8s %10s %10s %10s %10s %12s\n", "NAME", "TYPE", "LENGTH", "IN_FLIGHT",
               "DELAYED", "DEAD", "OLDEST_AGE_S");
        for (size_t i = 0; i < set.n; i++) {
            const qview *v = &set.v[i];
            char inf[24] = "-", del[24] = "-", dead[24] = "-", age[24] = "-";
            if (v->has[F_IN_FLIGHT]) {
                snprintf(inf, sizeof(inf), "%llu", (unsigned long long)v->f[F_IN_FLIGHT]);
                snprintf(del, sizeof(del), "%llu", (unsigned long long)v->f[F_DELAYED]);
                snprintf(dead, sizeof(dead), "%llu", (unsigned long long)v->f[F_DEAD]);
            }
            if (v->has_age)
                snprintf(age, sizeof(age), "%.3f", v->age_s);
            printf("%-24s %-8s %10llu %10s %10s %10s %12s\n", v->name, cli_type_name(v->type),
                   (unsigned long long)v->length, inf, del, dead, age);
        }
    }
    kvq__free(set.v);
    return rc;
}
