/* PostgreSQL as a table queue, the way job queues built on it work: a push inserts a row; a pop
 * deletes the oldest row nobody else has locked,
 *
 *   DELETE FROM qbq WHERE id = (SELECT id FROM qbq ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)
 *   RETURNING body
 *
 * each statement its own transaction, with synchronous_commit on (the commit returns once its
 * WAL is flushed; concurrent commits share a flush). Batches are one multi-row INSERT and one
 * DELETE of up to K rows. A consumer facing an empty queue polls every millisecond, except in
 * the latency workload, where pushes also NOTIFY and consumers LISTEN: NOTIFY serialises
 * committers on a global lock, which would cost PostgreSQL its group commit in the throughput
 * workloads, and polling would add up to a millisecond to its latency. Setup checks that the
 * server runs with fsync and synchronous_commit on. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>

#include <libpq-fe.h>

#include "qbench.h"

typedef struct pg_state {
    char conninfo[512];
    int notify;
} pg_state;

typedef struct pg_conn {
    PGconn *pg;
    int notify;
    size_t prepared_batch; /* the row count "pushk" was prepared for (0: none) */
    const char **values; /* parameter arrays of a batch, room for `cap` */
    int *lengths, *formats;
    size_t cap;
} pg_conn;

static PGconn *pg_open(const char *conninfo)
{
    PGconn *pg = PQconnectdb(conninfo);
    if (pg == NULL || PQstatus(pg) != CONNECTION_OK) {
        fprintf(stderr, "qbench: postgres: %s", pg != NULL ? PQerrorMessage(pg) : "no memory\n");
        PQfinish(pg);
        return NULL;
    }
    return pg;
}

static void make_conninfo(char *buf, size_t cap, const qb_options *o)
{
    /* TCP to the loopback endpoint qb_parse_endpoint admitted; a statement that takes 10 s is
     * cancelled by the server, so nothing waits unbounded. */
    snprintf(buf, cap,
             "host=%s port=%d user=%s dbname=postgres connect_timeout=10 sslmode=disable "
             "gssencmode=disable options='-c statement_timeout=10000 -c client_min_messages=warning'",
             o->postgres.host, o->postgres.port, o->pg_user);
}

static int pg_ok(PGresult *res, PGconn *pg, const char *what)
{
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return 0;
    fprintf(stderr, "qbench: postgres %s: %s", what, PQerrorMessage(pg));
    return -1;
}

static int pg_exec(PGconn *pg, const char *sql)
{
    PGresult *res = PQexec(pg, sql);
    int rc = pg_ok(res, pg, sql);
    PQclear(res);
    return rc;
}

static int pg_setting_is(PGconn *pg, const char *name, const char *want)
{
    char sql[128];
    snprintf(sql, sizeof(sql), "SHOW %s", name);
    PGresult *res = PQexec(pg, sql);
    int ok = pg_ok(res, pg, sql) == 0 && PQntuples(res) == 1 &&
             strcmp(PQgetvalue(res, 0, 0), want) == 0;
    if (!ok)
        fprintf(stderr, "qbench: postgres does not run with %s = %s\n", name, want);
    PQclear(res);
    return ok;
}

static int pg_setup(void **state, const qb_setup *su)
{
    pg_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -1;
    make_conninfo(s->conninfo, sizeof(s->conninfo), su->opt);
    s->notify = su->low_latency;
    PGconn *pg = pg_open(s->conninfo);
    int rc = -1;
    if (pg != NULL && pg_setting_is(pg, "fsync", "on") &&
        pg_setting_is(pg, "synchronous_commit", "on") &&
        pg_exec(pg, "DROP TABLE IF EXISTS qbq") == 0 &&
        pg_exec(pg, "CREATE TABLE qbq (id bigserial PRIMARY KEY, body bytea NOT NULL)") == 0)
        rc = 0;
    PQfinish(pg);
    if (rc != 0) {
        free(s);
        return -1;
    }
    *state = s;
    return 0;
}

static int pg_prepare(PGconn *pg, const char *name, const char *sql, int nparams)
{
    PGresult *res = PQprepare(pg, name, sql, nparams, NULL);
    int rc = pg_ok(res, pg, name);
    PQclear(res);
    return rc;
}

static int pg_connect(qb_conn **out, void *state)
{
    pg_state *s = state;
    pg_conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -1;
    c->notify = s->notify;
    c->pg = pg_open(s->conninfo);
    if (c->pg == NULL ||
        pg_prepare(c->pg, "push",
                   s->notify ? "WITH i AS (INSERT INTO qbq(body) VALUES ($1)) "
                               "SELECT pg_notify('qbq', '')"
                             : "INSERT INTO qbq(body) VALUES ($1)",
                   1) != 0 ||
        pg_prepare(c->pg, "pop",
                   "DELETE FROM qbq WHERE id = (SELECT id FROM qbq ORDER BY id "
                   "FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING body",
                   0) != 0 ||
        pg_prepare(c->pg, "popk",
                   "DELETE FROM qbq WHERE id = ANY(ARRAY(SELECT id FROM qbq ORDER BY id "
                   "FOR UPDATE SKIP LOCKED LIMIT $1::int)) RETURNING body",
                   1) != 0 ||
        (s->notify && pg_exec(c->pg, "LISTEN qbq") != 0)) {
        PQfinish(c->pg);
        free(c);
        return -1;
    }
    *out = (qb_conn *)c;
    return 0;
}

static int pg_push(qb_conn *qc, const uint8_t *msg, size_t size)
{
    pg_conn *c = (pg_conn *)qc;
    const char *values[1] = { (const char *)msg };
    int lengths[1] = { (int)size }, formats[1] = { 1 };
    PGresult *res = PQexecPrepared(c->pg, "push", 1, values, lengths, formats, 1);
    int rc = pg_ok(res, c->pg, "push");
    PQclear(res);
    return rc == 0 ? 0 : QB_FAIL;
}

static int pg_push_batch(qb_conn *qc, const uint8_t *msgs, size_t size, size_t count)
{
    pg_conn *c = (pg_conn *)qc;
    if (count == 0 || count > 10000)
        return QB_FAIL;
    const char *stmt = "pushk";
    if (c->prepared_batch != count) {
        /* INSERT ... VALUES ($1),($2),...: one statement, one transaction, one WAL flush. */
        size_t cap = 64 + count * 12;
        char *sql = malloc(cap);
        if (sql == NULL)
            return QB_FAIL;
        size_t n = (size_t)snprintf(sql, cap, "INSERT INTO qbq(body) VALUES ");
        for (size_t i = 0; i < count; i++)
            n += (size_t)snprintf(sql + n, cap - n, "%s($%zu)", i > 0 ? "," : "", i + 1);
        /* Only the full batch size is kept prepared; a short last batch uses an unnamed one. */
        stmt = c->prepared_batch == 0 ? "pushk" : "";
        int rc = pg_prepare(c->pg, stmt, sql, (int)count);
        free(sql);
        if (rc != 0)
            return QB_FAIL;
        if (*stmt != '\0')
            c->prepared_batch = count;
    }
    if (c->cap < count) {
        free(c->values);
        free(c->lengths);
        free(c->formats);
        c->values = malloc(sizeof(*c->values) * count);
        c->lengths = malloc(sizeof(*c->lengths) * count);
        c->formats = malloc(sizeof(*c->formats) * count);
        c->cap = count;
        if (c->values == NULL || c->lengths == NULL || c->formats == NULL) {
            c->cap = 0;
            return QB_FAIL;
        }
    }
    for (size_t i = 0; i < count; i++) {
        c->values[i] = (const char *)msgs + i * size;
        c->lengths[i] = (int)size;
        c->formats[i] = 1;
    }
    PGresult *res =
        PQexecPrepared(c->pg, stmt, (int)count, c->values, c->lengths, c->formats, 1);
    int rc = pg_ok(res, c->pg, "push batch");
    PQclear(res);
    return rc == 0 ? 0 : QB_FAIL;
}

/* Waits for a NOTIFY (LISTEN mode) or a millisecond (polling), never past `until`. */
static void pg_wait(pg_conn *c, double until)
{
    double left = until - qb_now();
    if (left <= 0)
        return;
    if (!c->notify) {
        qb_sleep_us(left < 0.001 ? (long)(left * 1e6) : 1000);
        return;
    }
    int fd = PQsocket(c->pg);
    fd_set rd;
    FD_ZERO(&rd);
    FD_SET(fd, &rd);
    struct timeval tv = { (time_t)left, (long)((left - (double)(long)left) * 1e6) };
    if (select(fd + 1, &rd, NULL, NULL, &tv) > 0 && PQconsumeInput(c->pg) == 1) {
        PGnotify *n;
        while ((n = PQnotifies(c->pg)) != NULL)
            PQfreemem(n);
    }
}

static int pg_pop_batch(qb_conn *qc, uint8_t *buf, size_t size, size_t max, size_t *got,
                        int wait_ms)
{
    pg_conn *c = (pg_conn *)qc;
    double until = qb_now() + wait_ms / 1000.0;
    char limit[32];
    snprintf(limit, sizeof(limit), "%zu", max);
    const char *values[1] = { limit };
    *got = 0;
    for (int tries = 0; tries < 100000; tries++) {
        PGresult *res = max == 1 ? PQexecPrepared(c->pg, "pop", 0, NULL, NULL, NULL, 1)
                                 : PQexecPrepared(c->pg, "popk", 1, values, NULL, NULL, 1);
        if (pg_ok(res, c->pg, "pop") != 0) {
            PQclear(res);
            return QB_FAIL;
        }
        int rows = PQntuples(res);
        for (int i = 0; i < rows && (size_t)i < max; i++) {
            if ((size_t)PQgetlength(res, i, 0) != size) {
                fprintf(stderr, "qbench: postgres: popped a row that is not a message\n");
                PQclear(res);
                return QB_FAIL;
            }
            memcpy(buf + (size_t)i * size, PQgetvalue(res, i, 0), size);
            (*got)++;
        }
        PQclear(res);
        if (*got > 0)
            return 0;
        if (qb_now() >= until)
            return QB_EMPTY;
        pg_wait(c, until);
    }
    return QB_EMPTY;
}

static int pg_pop(qb_conn *qc, uint8_t *buf, size_t size, int wait_ms)
{
    size_t got;
    return pg_pop_batch(qc, buf, size, 1, &got, wait_ms);
}

static void pg_disconnect(qb_conn *qc)
{
    pg_conn *c = (pg_conn *)qc;
    if (c == NULL)
        return;
    PQfinish(c->pg);
    free(c->values);
    free(c->lengths);
    free(c->formats);
    free(c);
}

static void pg_teardown(void *state)
{
    pg_state *s = state;
    PGconn *pg = pg_open(s->conninfo);
    if (pg != NULL && pg_exec(pg, "DROP TABLE IF EXISTS qbq") != 0)
        fprintf(stderr, "qbench: postgres: could not drop the queue table\n");
    PQfinish(pg);
    free(s);
}

static void pg_version(char *buf, size_t cap, const qb_options *opt, int sys)
{
    (void)sys;
    char conninfo[512];
    make_conninfo(conninfo, sizeof(conninfo), opt);
    PGconn *pg = pg_open(conninfo);
    if (pg == NULL)
        return;
    const char *v = PQparameterStatus(pg, "server_version");
    if (v != NULL)
        snprintf(buf, cap, "%.*s", (int)strcspn(v, " "), v);
    PQfinish(pg);
}

const qb_driver qb_postgres_driver = {
    .name = "postgres",
    .setup = pg_setup,
    .connect = pg_connect,
    .push = pg_push,
    .push_batch = pg_push_batch,
    .pop = pg_pop,
    .pop_batch = pg_pop_batch,
    .disconnect = pg_disconnect,
    .teardown = pg_teardown,
    .version = pg_version,
};
