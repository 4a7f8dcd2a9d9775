/* Redis as a list queue through hiredis: LPUSH to push, BRPOP (or RPOP) to pop. A batch is one
 * command, LPUSH with many values or RPOP with a count (Redis >= 6.2), so it is one AOF write
 * and, with `appendfsync always`, one fsync (Redis syncs once per event-loop pass, before it
 * answers the clients served in that pass: group commit). The same driver measures the
 * `everysec` server, which the table labels not durable. Setup checks that the server really
 * runs with the fsync policy its row claims. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "qbench.h"

typedef struct rd_state {
    qb_endpoint ep;
    char key[64];
} rd_state;

typedef struct rd_conn {
    redisContext *ctx;
    const char *key;
    const char **argv; /* LPUSH key v1 .. vK */
    size_t *argvlen;
    size_t argcap;
} rd_conn;

static redisContext *rd_open(const qb_endpoint *ep)
{
    /* qb_parse_endpoint admitted only 127.x.y.z addresses. */
    struct timeval tv = { 10, 0 };
    redisContext *ctx = redisConnectWithTimeout(ep->host, ep->port, tv);
    if (ctx == NULL || ctx->err != 0) {
        fprintf(stderr, "qbench: redis %s:%d: %s\n", ep->host, ep->port,
                ctx != NULL ? ctx->errstr : "out of memory");
        if (ctx != NULL)
            redisFree(ctx);
        return NULL;
    }
    /* Replies never take 10 s; a server that stops answering ends the run instead of hanging
     * it. */
    if (redisSetTimeout(ctx, tv) != REDIS_OK) {
        redisFree(ctx);
        return NULL;
    }
    return ctx;
}

static int rd_check(redisReply *r, redisContext *ctx, const char *what)
{
    if (r == NULL) {
        fprintf(stderr, "qbench: redis %s: %s\n", what, ctx->errstr);
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "qbench: redis %s: %s\n", what, r->str);
        freeReplyObject(r);
        return -1;
    }
    return 0;
}

static int rd_setup(void **state, const qb_setup *su)
{
    const qb_endpoint *ep =
        su->sys == QB_SYS_REDIS_EVERYSEC ? &su->opt->redis_everysec : &su->opt->redis;
    const char *want = su->sys == QB_SYS_REDIS_EVERYSEC ? "everysec" : "always";
    redisContext *ctx = rd_open(ep);
    if (ctx == NULL)
        return -1;
    int rc = -1;
    redisReply *r = redisCommand(ctx, "CONFIG GET appendfsync");
    if (rd_check(r, ctx, "CONFIG GET") != 0)
        goto done;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->str == NULL ||
        strcmp(r->element[1]->str, want) != 0) {
        fprintf(stderr, "qbench: redis on port %d does not run with appendfsync %s\n", ep->port,
                want);
        freeReplyObject(r);
        goto done;
    }
    freeReplyObject(r);
    r = redisCommand(ctx, "CONFIG GET appendonly");
    if (rd_check(r, ctx, "CONFIG GET") != 0)
        goto done;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[1]->str == NULL ||
        strcmp(r->element[1]->str, "yes") != 0) {
        fprintf(stderr, "qbench: redis on port %d does not run with appendonly yes\n", ep->port);
        freeReplyObject(r);
        goto done;
    }
    freeReplyObject(r);
    rd_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        goto done;
    s->ep = *ep;
    snprintf(s->key, sizeof(s->key), "qbench:%ld:%c:%d", (long)getpid(), su->workload, su->run);
    r = redisCommand(ctx, "DEL %s", s->key);
    if (rd_check(r, ctx, "DEL") != 0) {
        free(s);
        goto done;
    }
    freeReplyObject(r);
    *state = s;
    rc = 0;
done:
    redisFree(ctx);
    return rc;
}

static int rd_connect(qb_conn **out, void *state)
{
    rd_state *s = state;
    rd_conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -1;
    c->ctx = rd_open(&s->ep);
    if (c->ctx == NULL) {
        free(c);
        return -1;
    }
    c->key = s->key;
    *out = (qb_conn *)c;
    return 0;
}

static int rd_push(qb_conn *qc, const uint8_t *msg, size_t size)
{
    rd_conn *c = (rd_conn *)qc;
    redisReply *r = redisCommand(c->ctx, "LPUSH %s %b", c->key, msg, size);
    if (rd_check(r, c->ctx, "LPUSH") != 0)
        return QB_FAIL;
    freeReplyObject(r);
    return 0;
}

static int rd_push_batch(qb_conn *qc, const uint8_t *msgs, size_t size, size_t count)
{
    rd_conn *c = (rd_conn *)qc;
    if (count + 2 > c->argcap) {
        free(c->argv);
        free(c->argvlen);
        c->argcap = count + 2;
        c->argv = malloc(sizeof(*c->argv) * c->argcap);
        c->argvlen = malloc(sizeof(*c->argvlen) * c->argcap);
        if (c->argv == NULL || c->argvlen == NULL) {
            c->argcap = 0;
            return QB_FAIL;
        }
    }
    c->argv[0] = "LPUSH";
    c->argvlen[0] = 5;
    c->argv[1] = c->key;
    c->argvlen[1] = strlen(c->key);
    for (size_t i = 0; i < count; i++) {
        c->argv[2 + i] = (const char *)msgs + i * size;
        c->argvlen[2 + i] = size;
    }
    redisReply *r = redisCommandArgv(c->ctx, (int)(count + 2), c->argv, c->argvlen);
    if (rd_check(r, c->ctx, "LPUSH") != 0)
        return QB_FAIL;
    freeReplyObject(r);
    return 0;
}

static int take(uint8_t *dst, const redisReply *v, size_t size)
{
    if (v->type != REDIS_REPLY_STRING || v->len != size) {
        fprintf(stderr, "qbench: redis: popped something that is not a %zu-byte message\n", size);
        return QB_FAIL;
    }
    memcpy(dst, v->str, size);
    return 0;
}

static int rd_pop(qb_conn *qc, uint8_t *buf, size_t size, int wait_ms)
{
    rd_conn *c = (rd_conn *)qc;
    redisReply *r;
    if (wait_ms <= 0) {
        r = redisCommand(c->ctx, "RPOP %s", c->key);
        if (rd_check(r, c->ctx, "RPOP") != 0)
            return QB_FAIL;
        int rc = r->type == REDIS_REPLY_NIL ? QB_EMPTY : take(buf, r, size);
        freeReplyObject(r);
        return rc;
    }
    char timeout[32];
    snprintf(timeout, sizeof(timeout), "%.3f", wait_ms / 1000.0);
    r = redisCommand(c->ctx, "BRPOP %s %s", c->key, timeout);
    if (rd_check(r, c->ctx, "BRPOP") != 0)
        return QB_FAIL;
    int rc;
    if (r->type == REDIS_REPLY_NIL)
        rc = QB_EMPTY;
    else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2)
        rc = take(buf, r->element[1], size);
    else
        rc = QB_FAIL;
    freeReplyObject(r);
    return rc;
}

static int rd_pop_batch(qb_conn *qc, uint8_t *buf, size_t size, size_t max, size_t *got,
                        int wait_ms)
{
    rd_conn *c = (rd_conn *)qc;
    *got = 0;
    char count[32];
    snprintf(count, sizeof(count), "%zu", max);
    redisReply *r = redisCommand(c->ctx, "RPOP %s %s", c->key, count);
    if (rd_check(r, c->ctx, "RPOP") != 0)
        return QB_FAIL;
    int rc = 0;
    if (r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < r->elements && i < max && rc == 0; i++) {
            rc = take(buf + i * size, r->element[i], size);
            *got += rc == 0;
        }
        freeReplyObject(r);
        return rc;
    }
    freeReplyObject(r);
    if (wait_ms <= 0)
        return QB_EMPTY;
    /* Empty: block for one message rather than spin. */
    rc = rd_pop(qc, buf, size, wait_ms);
    *got = rc == 0;
    return rc;
}

static void rd_disconnect(qb_conn *qc)
{
    rd_conn *c = (rd_conn *)qc;
    if (c == NULL)
        return;
    redisFree(c->ctx);
    free(c->argv);
    free(c->argvlen);
    free(c);
}

static void rd_teardown(void *state)
{
    rd_state *s = state;
    redisContext *ctx = rd_open(&s->ep);
    if (ctx != NULL) {
        redisReply *r = redisCommand(ctx, "DEL %s", s->key);
        if (r != NULL)
            freeReplyObject(r);
        redisFree(ctx);
    }
    free(s);
}

static void rd_version(char *buf, size_t cap, const qb_options *opt, int sys)
{
    redisContext *ctx = rd_open(sys == QB_SYS_REDIS_EVERYSEC ? &opt->redis_everysec : &opt->redis);
    if (ctx == NULL)
        return;
    redisReply *r = redisCommand(ctx, "INFO server");
    if (r != NULL && r->type == REDIS_REPLY_STRING) {
        const char *v = strstr(r->str, "redis_version:");
        if (v != NULL) {
            v += strlen("redis_version:");
            snprintf(buf, cap, "%.*s", (int)strcspn(v, "\r\n"), v);
        }
    }
    if (r != NULL)
        freeReplyObject(r);
    redisFree(ctx);
}

const qb_driver qb_redis_driver = {
    .name = "redis",
    .setup = rd_setup,
    .connect = rd_connect,
    .push = rd_push,
    .push_batch = rd_push_batch,
    .pop = rd_pop,
    .pop_batch = rd_pop_batch,
    .disconnect = rd_disconnect,
    .teardown = rd_teardown,
    .version = rd_version,
};
