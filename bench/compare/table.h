/* The parts of qbench that need no server: its options, the results of a comparison, their
 * medians, the raw-results file and the Markdown table. Plain C11 with POSIX stdio, so that a
 * unit test can include table.c on its own (tests/unit/bench/test_compare_table.c). */
#ifndef QBENCH_TABLE_H
#define QBENCH_TABLE_H

#include <stddef.h>
#include <stdio.h>

/* The most runs of one figure that a comparison keeps. */
#define QB_MAX_RUNS 15

/* The systems compared, in the order of the table's rows. */
enum qb_system {
    QB_SYS_BEANSTALKD,
    QB_SYS_REDIS,
    QB_SYS_REDIS_EVERYSEC,
    QB_SYS_POSTGRES,
    QB_SYS_SQLITE,
    /* kvq's rows on the embedded engine's default storage (the log store): */
    QB_SYS_KVQ,      /* kvq's durable queue, clients as threads of one process */
    QB_SYS_KVQ_PROC, /* the same, clients as separate processes */
    QB_SYS_KVQ_PROC2X, /* the same with twice the producers and consumers (8P+8C by default) */
    QB_SYS_KVQ_FIFO,
    QB_SYS_KVQ_PRIORITY,
    QB_SYS_KVQ_WORKQ, /* kvq's durable queue as a work queue: receive with a lease, then ack */
    /* The same six rows on the older SQLite storage ("sqlite:" URLs), in the same order: */
    QB_SYS_KVQ_SQLITE,
    QB_SYS_KVQ_SQLITE_PROC,
    QB_SYS_KVQ_SQLITE_PROC2X,
    QB_SYS_KVQ_SQLITE_FIFO,
    QB_SYS_KVQ_SQLITE_PRIORITY,
    QB_SYS_KVQ_SQLITE_WORKQ,
    QB_SYS_DISK, /* not a queue: the disk's fdatasync rate, the ceiling */
    QB_NSYS
};

/* How many kvq rows each storage has (QB_SYS_KVQ ... QB_SYS_KVQ_WORKQ). */
#define QB_KVQ_ROWS (QB_SYS_KVQ_SQLITE - QB_SYS_KVQ)

/* The figures measured for each system: the table's columns. */
enum qb_metric {
    QB_A_PUSH, /* (a) one producer, one message per push: pushes/s */
    QB_A_POP,  /* (a) then one consumer, one message per pop: pops/s */
    QB_B,      /* (b) P producers + C consumers at once: pushes + pops per second */
    QB_C_PUSH, /* (c) one producer, batches: messages pushed per second */
    QB_C_POP,  /* (c) then one consumer, batches: messages popped per second */
    QB_C_CONC, /* (c) P + C clients at once, batches: messages pushed + popped per second */
    QB_D_P50,  /* (d) push-to-pop latency at a fixed rate, median, milliseconds */
    QB_D_P99,  /* (d) the same, 99th percentile */
    QB_NMETRICS
};

/* Workload bits of qb_options.workloads; m is the memory row (kvq's two durable-queue rows
 * only, measured once, not per run). */
enum { QB_WL_A = 1, QB_WL_B = 2, QB_WL_C = 4, QB_WL_D = 8, QB_WL_M = 16, QB_WL_ALL = 31 };

/* The memory rows' figures: one process with the database open, then mem_procs at once;
 * first straight after the items were pushed (on the log store every item is then inside the
 * 5-second window, which it keeps in memory by design), then (_PAST, the log store only) once
 * the storage reports that its table holds every item. */
enum { QB_MEM_ONE, QB_MEM_MANY, QB_MEM_ONE_PAST, QB_MEM_MANY_PAST, QB_NMEM };

/* The longest wait, in seconds, for the log store's table to hold every item before the
 * memory rows' _PAST figures are taken (the window is 6 s, the applier looks once a second). */
#define QB_MEM_PAST_WAIT_S 60

/* The raw file's names of the QB_MEM_* figures ("one", "many", "one_past", "many_past"). */
extern const char *const qb_mem_names[QB_NMEM];

/* The machine-readable names of systems and metrics (raw files, --systems). */
extern const char *const qb_system_names[QB_NSYS];
extern const char *const qb_metric_names[QB_NMETRICS];

/* Returns the system or metric with that name, or -1. */
int qb_system_from_name(const char *name);
int qb_metric_from_name(const char *name);

/* Whether a system is a durable baseline (a competitor whose every acknowledged push and pop is
 * on disk), one of kvq's rows, or neither. */
int qb_system_is_durable_baseline(int sys);
int qb_system_is_kvq(int sys);

/* For a kvq row: whether it runs on the SQLite storage, and the matching row of the default
 * storage (QB_SYS_KVQ_SQLITE_FIFO gives QB_SYS_KVQ_FIFO; a default row gives itself; others
 * -1). */
int qb_system_is_sqlite(int sys);
int qb_system_kvq_base(int sys);

/* A loopback endpoint. qbench refuses every address outside 127.0.0.0/8. */
typedef struct qb_endpoint {
    char host[16]; /* dotted quad, always 127.x.y.z */
    int port;      /* 0: not given */
} qb_endpoint;

/* Parses "HOST:PORT" or "PORT" (host 127.0.0.1); HOST may be "localhost" or 127.x.y.z.
 * Returns 0, or -1 with a message in err. */
int qb_parse_endpoint(qb_endpoint *out, const char *text, char *err, size_t errcap);

typedef struct qb_options {
    int help;             /* --help */
    int self_test;        /* --self-test: check the table code on canned numbers */
    int dry_run;          /* --dry-run: check the options and print the plan */
    int free_port;        /* --free-port: print a free loopback TCP port and exit */
    int quick;            /* --quick */
    int runs;             /* --runs N (3) */
    long n;               /* --messages N (50,000; 5,000 with --quick) */
    long latency_n;       /* --latency-messages N (5,000; 1,000 with --quick) */
    double rate;          /* --rate R: messages/s of workload (d) (1,000) */
    int size;             /* --size B: message bytes (100) */
    int batch;            /* --batch K: messages per operation in (c) (100) */
    int producers;        /* --producers P (4) */
    int consumers;        /* --consumers C (4) */
    unsigned int systems; /* bit (1 << qb_system) for each system to run (all) */
    unsigned int workloads;    /* QB_WL_* (all) */
    long mem_items;       /* --memory-items N: items queued for the memory row (1,000,000;
                             100,000 with --quick) */
    int mem_procs;        /* --memory-procs N: processes of the memory row's second figure (8) */
    double budget_s;           /* --budget S: the whole comparison's time limit (780) */
    double cap_s;              /* --cap S: time limit of each phase of a run (10; 5 with --quick) */
    qb_endpoint beanstalkd;    /* --beanstalkd */
    qb_endpoint redis;         /* --redis: appendfsync always */
    qb_endpoint redis_everysec; /* --redis-everysec */
    qb_endpoint postgres;      /* --postgres */
    char pg_user[64];          /* --pg-user (postgres) */
    char dir[512];             /* --dir: where SQLite, kvq and the disk test write (required) */
    char raw[512];             /* --raw FILE: also write every figure there */
    char table_from[512];      /* --table-from FILE: print the table of a raw file and exit */
} qb_options;

/* Fills o with the defaults. */
void qb_options_init(qb_options *o);

/* Parses argv[1..argc-1] into o (which qb_options_init filled). Returns 0, or -1 with a one-line
 * message in err. Numbers are checked against sane bounds, so every loop stays bounded. */
int qb_parse_args(qb_options *o, int argc, char *const argv[], char *err, size_t errcap);

/* Prints the usage text. */
void qb_usage(FILE *f);

/* One figure over the runs. */
typedef struct qb_cell {
    double v[QB_MAX_RUNS];
    int n;           /* runs recorded */
    int partial;     /* some run stopped at its time cap (rate over what completed) */
    int unsupported; /* the system has no such operation (n/a) */
} qb_cell;

/* Everything a table needs: the figures and the settings they were measured with. */
typedef struct qb_results {
    qb_cell cell[QB_NSYS][QB_NMETRICS];
    /* kvq's commit pipeline in the same runs: commits per sync, and conflicts (1020) per
     * push or pop operation. */
    qb_cell cps[QB_NSYS][QB_NMETRICS];
    qb_cell cpo[QB_NSYS][QB_NMETRICS];
    char version[QB_NSYS][64]; /* the server's or library's version, when known */
    /* The memory rows (kvq's durable-queue rows QB_SYS_KVQ and QB_SYS_KVQ_SQLITE): growth of a
     * process's anonymous memory from before it opened the database to after it read the
     * queue, divided by the live data (keys and values of the queued items), with one process
     * and with mem_procs processes open at once (their mean); straight after the push, and
     * past the window (QB_MEM_*). */
    qb_cell mem[QB_NSYS][QB_NMEM];
    long mem_items, mem_item_bytes; /* items queued; key + value bytes of one */
    int mem_procs;
    int runs, size, batch, producers, consumers;
    long n, latency_n;
    double rate;
} qb_results;

/* Empties r and copies the settings from o. */
void qb_results_init(qb_results *r, const qb_options *o);

/* Records one run's figure (dropped once QB_MAX_RUNS are held). */
void qb_results_add(qb_results *r, int sys, int metric, double value, int partial);

/* Records one run's commits per sync and conflicts per operation (a kvq row's phase). */
void qb_results_add_pipeline(qb_results *r, int sys, int metric, double cps, double cpo);

/* Records the memory rows' figure k (QB_MEM_*) of a system: bytes of memory per byte of live
 * data. */
void qb_results_add_memory(qb_results *r, int sys, int k, double ratio);

/* Marks a figure as not applicable to that system. */
void qb_results_unsupported(qb_results *r, int sys, int metric);

/* The median of n values (the mean of the middle two when n is even); NaN when n is 0. */
double qb_median(const double *v, int n);

/* The median of a cell, NaN when it has no runs. */
double qb_cell_median(const qb_cell *c);

/* Writes r in the raw format (one line per figure; text, versioned) and reads it back.
 * qb_results_load returns 0, or -1 with a message in err. */
int qb_results_save(const qb_results *r, FILE *f);
int qb_results_load(qb_results *r, FILE *f, char *err, size_t errcap);

/* Formats v with thousands separators ("12,345"); "—" for NaN. */
void qb_format_count(char *buf, size_t cap, double v);

/* Prints the Markdown table of r: one row per system that has a figure, the ceiling set by the
 * disk's sync rate, and for kvq's durable queue its ratio to the best durable baseline, its
 * fraction of the ceiling and whether the targets were met. A short legend follows. */
int qb_write_table(FILE *f, const qb_results *r);

/* Checks that text holds one well-formed Markdown table: a header row, a separator row of as
 * many cells, and rows with that many cells. Returns 0, or -1 with the reason in err. */
int qb_check_markdown(const char *text, char *err, size_t errcap);

#endif /* QBENCH_TABLE_H */
