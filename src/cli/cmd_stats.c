/* The operator's view: kvq queues (every queue with its counts) and kvq stats (one queue or all,
 * as text, JSON or Prometheus's text exposition format, once or refreshed every second). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qops.h"
#include "util/util.h"

/* What is known of one queue; a figure that does not apply is absent (JSON null). */
typedef struct qview {
    char name[256];
    cli_qtype type;
    uint64_t length;
    int has_counters; /* pushes and pops (durable queues) */
    uint64_t pushes, pops;
    int has_wq; /* in-flight, delayed, dead (durable and priority queues) */
    kvq_workq_metrics m;
    int has_age; /* the oldest ready item's age */
    double age_s;
} qview;

static int gather(cli *c, const char *name, qview *v)
{
    memset(v, 0, sizeof(*v));
    snprintf(v->name, sizeof(v->name), "%s", name);
    cq *q;
    cli_qinfo info;
    int rc = cli_open_queue(c, name, &q, &info);
    if (rc != 0)
        return rc;
    v->type = info.type;
    cq_stats s = { 0 };
    int err = cq_stats_get(q, &s);
    v->length = s.length;
    v->has_counters = s.has_counters;
    v->pushes = s.pushes;
    v->pops = s.pops;
    if (err == 0 && info.type != QT_FIFO) {
        kvq_workq *w = NULL;
        err = cq_workq(q, &info, &w);
        if (err == 0)
            err = kvq_workq_get_metrics(w, &v->m);
        v->has_wq = err == 0;
        v->has_age = v->has_wq && v->m.oldest_ready_age_ms >= 0;
        v->age_s = (double)v->m.oldest_ready_age_ms / 1000.0;
    }
    cq_close(q);
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

static void json_rate(const char *key, int has, double v)
{
    if (has)
        printf(",\"%s\":%.1f", key, v);
    else
        printf(",\"%s\":null", key);
}

/* rates: per second since the previous view (NULL: none yet). */
static void print_json(const qview *v, const qview *prev, double secs)
{
    printf("{\"name\":");
    cli_json_str(stdout, (const uint8_t *)v->name, strlen(v->name));
    printf(",\"type\":\"%s\"", cli_qtype_name(v->type));
    json_u64("length", 1, v->length);
    json_u64("pushes", v->has_counters, v->pushes);
    json_u64("pops", v->has_counters, v->pops);
    json_u64("in_flight", v->has_wq, (uint64_t)v->m.inflight);
    json_u64("delayed", v->has_wq, (uint64_t)v->m.delayed);
    json_u64("dead", v->has_wq, (uint64_t)v->m.dead);
    if (v->has_age)
        printf(",\"oldest_age_seconds\":%.3f", v->age_s);
    else
        printf(",\"oldest_age_seconds\":null");
    int rates = prev != NULL && secs > 0 && v->has_counters;
    json_rate("pushes_per_second", rates, rates ? (double)(v->pushes - prev->pushes) / secs : 0);
    json_rate("pops_per_second", rates, rates ? (double)(v->pops - prev->pops) / secs : 0);
    printf("}");
}

static void print_text(const qview *v, const qview *prev, double secs)
{
    printf("type\t%s\nlength\t%llu\n", cli_qtype_name(v->type), (unsigned long long)v->length);
    if (v->has_counters)
        printf("pushes\t%llu\npops\t%llu\n", (unsigned long long)v->pushes,
               (unsigned long long)v->pops);
    if (v->has_wq)
        printf("in_flight\t%lld\ndelayed\t%lld\ndead\t%lld\n", (long long)v->m.inflight,
               (long long)v->m.delayed, (long long)v->m.dead);
    if (v->has_age)
        printf("oldest_age_seconds\t%.3f\n", v->age_s);
    if (prev != NULL && secs > 0 && v->has_counters)
        printf("pushes_per_second\t%.1f\npops_per_second\t%.1f\n",
               (double)(v->pushes - prev->pushes) / secs, (double)(v->pops - prev->pops) / secs);
}

/* A label value in the exposition format: backslash, double quote and newline escaped. */
static void prom_label(const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            printf("\\%c", *s);
        else if (*s == '\n')
            printf("\\n");
        else
            putchar(*s);
    }
}

typedef struct prom_metric {
    const char *name, *kind, *help;
} prom_metric;

static const prom_metric PROM[] = {
    { "kvq_queue_length", "gauge", "Items ready to be popped or received (not delayed, in flight or dead)." },
    { "kvq_queue_pushes_total", "counter", "Items pushed (durable queues)." },
    { "kvq_queue_pops_total", "counter", "Items popped (durable queues)." },
    { "kvq_queue_in_flight", "gauge", "Items leased to a consumer and not yet settled." },
    { "kvq_queue_delayed", "gauge", "Items waiting for their delay." },
    { "kvq_queue_dead", "gauge", "Dead letters." },
    { "kvq_queue_oldest_age_seconds", "gauge", "Age of the oldest ready item." },
};

/* One sample: metric index i of queue v, when it applies. */
static void prom_sample(size_t i, const qview *v)
{
    double x;
    switch (i) {
    case 0:
        x = (double)v->length;
        break;
    case 1:
    case 2:
        if (!v->has_counters)
            return;
        x = (double)(i == 1 ? v->pushes : v->pops);
        break;
    case 3:
    case 4:
    case 5:
        if (!v->has_wq)
            return;
        x = (double)(i == 3 ? v->m.inflight : i == 4 ? v->m.delayed : v->m.dead);
        break;
    default:
        if (!v->has_age)
            return;
        x = v->age_s;
        break;
    }
    printf("%s{queue=\"", PROM[i].name);
    prom_label(v->name);
    printf("\",type=\"%s\"} %.17g\n", cli_qtype_name(v->type), x);
}

static void print_prom(const qview *vs, size_t n)
{
    for (size_t i = 0; i < sizeof(PROM) / sizeof(PROM[0]); i++) {
        printf("# HELP %s %s\n# TYPE %s %s\n", PROM[i].name, PROM[i].help, PROM[i].name,
               PROM[i].kind);
        for (size_t j = 0; j < n; j++)
            prom_sample(i, &vs[j]);
    }
}

/* The queues to show: one by name, or every one in the registry. */
typedef struct qset {
    qview *v;
    size_t n, cap;
} qset;

static int add_name(const char *name, cli_qtype t, void *arg)
{
    (void)t;
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
    int err = only != NULL ? add_name(only, QT_NONE, set) : cli_registry_list(c->db, add_name, set);
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
            return cli_usage("stats", "unexpected argument '%s'", argv[i]);
        else
            name = argv[i];
    }
    if (name != NULL && cli_check_name(name) != 0)
        return cli_usage("stats", "invalid queue name '%s'", name);
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
        return cli_usage("queues", "unexpected argument '%s'", argv[1]);
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
            if (v->has_wq) {
                snprintf(inf, sizeof(inf), "%lld", (long long)v->m.inflight);
                snprintf(del, sizeof(del), "%lld", (long long)v->m.delayed);
                snprintf(dead, sizeof(dead), "%lld", (long long)v->m.dead);
            }
            if (v->has_age)
                snprintf(age, sizeof(age), "%.3f", v->age_s);
            printf("%-24s %-8s %10llu %10s %10s %10s %12s\n", v->name, cli_qtype_name(v->type),
                   (unsigned long long)v->length, inf, del, dead, age);
        }
    }
    kvq__free(set.v);
    return rc;
}
