/* SQLite as a table queue: WAL mode, synchronous=FULL (every commit syncs the WAL), one
 * connection per client. A push is one INSERT; a pop is
 *
 *   DELETE FROM q WHERE id = (SELECT min(id) FROM q) RETURNING body
 *
 * each in its own (autocommit) transaction. Batches are K INSERTs inside BEGIN IMMEDIATE ...
 * COMMIT and one DELETE of the K oldest rows. SQLite has no way to wake another connection, so
 * a consumer facing an empty queue polls every 0.2 ms, with a read (SELECT) so that polling does
 * not take the write lock.
 *
 * Writers queue on a mutex of the process before they write, the way a threaded program that
 * uses SQLite as a queue avoids SQLITE_BUSY. Left to SQLite's own lock (each connection with
 * sqlite3_busy_timeout), 4+4 clients did about the same throughput but starved single clients
 * for over 10 s at a time, and a consumer's latency p99 reached hundreds of milliseconds:
 * SQLite's busy handler sleeps in milliseconds and is not fair. busy_timeout (10 s) stays as a
 * backstop, and a statement that still reports SQLITE_BUSY is run again for at most 10 s. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "qbench.h"

typedef struct sl_state {
    char path[700];
    pthread_mutex_t write_lock;
} sl_state;

typedef struct sl_conn {
    sqlite3 *db;
    sqlite3_stmt *push, *pop, *popk, *peek, *begin, *commit, *rollback;
    pthread_mutex_t *write_lock;
} sl_conn;

/* Whether a statement that failed with rc should run again: SQLITE_BUSY within 10 s of since. */
static int sl_retry(int rc, double since)
{
    if ((rc & 0xff) != SQLITE_BUSY || qb_now() - since > 10.0)
        return 0;
    qb_sleep_us(100);
    return 1;
}

static int sl_exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        fprintf(stderr, "qbench: sqlite: %s: %s\n", sql, msg != NULL ? msg : "?");
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static int sl_setup(void **state, const qb_setup *su)
{
    sl_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -1;
    snprintf(s->path, sizeof(s->path), "%s/queue.db", su->path);
    pthread_mutex_init(&s->write_lock, NULL);
    sqlite3 *db = NULL;
    int rc = sqlite3_open(s->path, &db) == SQLITE_OK ? 0 : -1;
    if (rc == 0)
        rc = sl_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                         "CREATE TABLE q (id INTEGER PRIMARY KEY, body BLOB NOT NULL)");
    sqlite3_close(db);
    if (rc != 0) {
        pthread_mutex_destroy(&s->write_lock);
        free(s);
        return -1;
    }
    *state = s;
    return 0;
}

static int sl_prepare(sqlite3 *db, sqlite3_stmt **st, const char *sql)
{
    if (sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK) {
        fprintf(stderr, "qbench: sqlite: %s: %s\n", sql, sqlite3_errmsg(db));
        return -1;
    }
    return 0;
}

static void sl_close(sl_conn *c)
{
    sqlite3_finalize(c->push);
    sqlite3_finalize(c->pop);
    sqlite3_finalize(c->popk);
    sqlite3_finalize(c->peek);
    sqlite3_finalize(c->begin);
    sqlite3_finalize(c->commit);
    sqlite3_finalize(c->rollback);
    sqlite3_close(c->db);
    free(c);
}

static int sl_connect(qb_conn **out, void *state)
{
    sl_state *s = state;
    sl_conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -1;
    c->write_lock = &s->write_lock;
    if (sqlite3_open_v2(s->path, &c->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
            SQLITE_OK ||
        sqlite3_busy_timeout(c->db, 10000) != SQLITE_OK ||
        sl_exec(c->db, "PRAGMA synchronous=FULL") != 0 ||
        sl_prepare(c->db, &c->push, "INSERT INTO q(body) VALUES (?1)") != 0 ||
        sl_prepare(c->db, &c->pop,
                   "DELETE FROM q WHERE id = (SELECT min(id) FROM q) RETURNING body") != 0 ||
        sl_prepare(c->db, &c->popk,
                   "DELETE FROM q WHERE id IN (SELECT id FROM q ORDER BY id LIMIT ?1) "
                   "RETURNING body") != 0 ||
        sl_prepare(c->db, &c->peek, "SELECT 1 FROM q LIMIT 1") != 0 ||
        sl_prepare(c->db, &c->begin, "BEGIN IMMEDIATE") != 0 ||
        sl_prepare(c->db, &c->commit, "COMMIT") != 0 ||
        sl_prepare(c->db, &c->rollback, "ROLLBACK") != 0) {
        sl_close(c);
        return -1;
    }
    *out = (qb_conn *)c;
    return 0;
}

/* Runs a statement that returns no rows. */
static int sl_step_done(sl_conn *c, sqlite3_stmt *st, const char *what)
{
    double since = qb_now();
    int rc;
    do {
        rc = sqlite3_step(st);
        sqlite3_reset(st);
    } while (rc != SQLITE_DONE && sl_retry(rc, since));
    if (rc != SQLITE_DONE) {
        fprintf(stderr, "qbench: sqlite %s: %s\n", what, sqlite3_errmsg(c->db));
        return QB_FAIL;
    }
    return 0;
}

static int sl_push(qb_conn *qc, const uint8_t *msg, size_t size)
{
    sl_conn *c = (sl_conn *)qc;
    sqlite3_bind_blob(c->push, 1, msg, (int)size, SQLITE_STATIC);
    pthread_mutex_lock(c->write_lock);
    int rc = sl_step_done(c, c->push, "push");
    pthread_mutex_unlock(c->write_lock);
    return rc;
}

static int sl_push_batch(qb_conn *qc, const uint8_t *msgs, size_t size, size_t count)
{
    sl_conn *c = (sl_conn *)qc;
    int rc = 0;
    pthread_mutex_lock(c->write_lock);
    /* BEGIN IMMEDIATE takes the write lock first, so nothing inside can meet SQLITE_BUSY. */
    if (sl_step_done(c, c->begin, "begin") != 0) {
        rc = QB_FAIL;
        goto done;
    }
    for (size_t i = 0; i < count; i++) {
        sqlite3_bind_blob(c->push, 1, msgs + i * size, (int)size, SQLITE_STATIC);
        if (sl_step_done(c, c->push, "push") != 0) {
            if (sl_step_done(c, c->rollback, "rollback") != 0) {
                /* The connection is unusable either way; the run reports the failure. */
            }
            rc = QB_FAIL;
            goto done;
        }
    }
    rc = sl_step_done(c, c->commit, "commit");
done:
    pthread_mutex_unlock(c->write_lock);
    return rc;
}

/* Whether the queue has a row, by a read that takes no write lock. */
static int sl_nonempty(sl_conn *c)
{
    int rc = sqlite3_step(c->peek);
    sqlite3_reset(c->peek);
    return rc == SQLITE_ROW;
}

/* One DELETE ... RETURNING; the rows come back as it steps, and the transaction commits when
 * it reaches SQLITE_DONE. */
static int sl_take(sl_conn *c, sqlite3_stmt *st, uint8_t *buf, size_t size, size_t max,
                   size_t *got)
{
    double since = qb_now();
    int rc;
    do {
        /* A statement that fails rolls back: the rows it returned so far were not taken. */
        *got = 0;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            if ((size_t)sqlite3_column_bytes(st, 0) != size || *got >= max) {
                fprintf(stderr, "qbench: sqlite: popped a row that is not a message\n");
                sqlite3_reset(st);
                return QB_FAIL;
            }
            memcpy(buf + *got * size, sqlite3_column_blob(st, 0), size);
            (*got)++;
        }
        sqlite3_reset(st);
    } while (rc != SQLITE_DONE && sl_retry(rc, since));
    if (rc != SQLITE_DONE) {
        fprintf(stderr, "qbench: sqlite pop: %s\n", sqlite3_errmsg(c->db));
        return QB_FAIL;
    }
    return 0;
}

static int sl_pop_batch(qb_conn *qc, uint8_t *buf, size_t size, size_t max, size_t *got,
                        int wait_ms)
{
    sl_conn *c = (sl_conn *)qc;
    double until = qb_now() + wait_ms / 1000.0;
    sqlite3_stmt *st = max == 1 ? c->pop : c->popk;
    if (max > 1)
        sqlite3_bind_int64(st, 1, (sqlite3_int64)max);
    *got = 0;
    for (long tries = 0; tries < 1000000; tries++) {
        if (sl_nonempty(c)) {
            pthread_mutex_lock(c->write_lock);
            int rc = sl_take(c, st, buf, size, max, got);
            pthread_mutex_unlock(c->write_lock);
            if (rc != 0)
                return QB_FAIL;
            if (*got > 0)
                return 0;
        }
        if (qb_now() >= until)
            return QB_EMPTY;
        qb_sleep_us(200);
    }
    return QB_EMPTY;
}

static int sl_pop(qb_conn *qc, uint8_t *buf, size_t size, int wait_ms)
{
    size_t got;
    return sl_pop_batch(qc, buf, size, 1, &got, wait_ms);
}

static void sl_disconnect(qb_conn *qc)
{
    if (qc != NULL)
        sl_close((sl_conn *)qc);
}

static void sl_teardown(void *state)
{
    sl_state *s = state;
    pthread_mutex_destroy(&s->write_lock);
    free(s);
}

static void sl_version(char *buf, size_t cap, const qb_options *opt, int sys)
{
    (void)opt;
    (void)sys;
    snprintf(buf, cap, "%s", sqlite3_libversion());
}

const qb_driver qb_sqlite_driver = {
    .name = "sqlite",
    .setup = sl_setup,
    .connect = sl_connect,
    .push = sl_push,
    .push_batch = sl_push_batch,
    .pop = sl_pop,
    .pop_batch = sl_pop_batch,
    .disconnect = sl_disconnect,
    .teardown = sl_teardown,
    .version = sl_version,
};
