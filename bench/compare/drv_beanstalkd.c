/* beanstalkd over its text protocol on a raw socket. A push is `put`; a pop is `reserve` (or
 * `reserve-with-timeout`) then `delete`, since a reserved job comes back unless deleted. With
 * `-f 0` the server fdatasyncs its binlog after every put and every delete. beanstalkd has no
 * batch commands, so (c) is n/a. Each run uses its own tube. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qbench.h"

typedef struct bs_state {
    qb_endpoint ep;
    char tube[64];
} bs_state;

typedef struct bs_conn {
    int fd;
    char buf[65536 + 256];
    size_t start, end; /* unread bytes are buf[start, end) */
} bs_conn;

static int bs_send(bs_conn *c, const void *p, size_t n)
{
    const char *s = p;
    while (n > 0) {
        ssize_t w = write(c->fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            fprintf(stderr, "qbench: beanstalkd: write: %s\n", strerror(errno));
            return -1;
        }
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads until `need` bytes are buffered (the socket's receive timeout bounds each wait). */
static int bs_fill(bs_conn *c, size_t need)
{
    if (need > sizeof(c->buf))
        return -1;
    if (c->end - c->start >= need)
        return 0;
    if (c->start > 0) {
        memmove(c->buf, c->buf + c->start, c->end - c->start);
        c->end -= c->start;
        c->start = 0;
    }
    while (c->end < need) {
        ssize_t r = read(c->fd, c->buf + c->end, sizeof(c->buf) - c->end);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            fprintf(stderr, "qbench: beanstalkd: read: %s\n", r == 0 ? "closed" : strerror(errno));
            return -1;
        }
        c->end += (size_t)r;
    }
    return 0;
}

/* Reads one reply line (without its \r\n) into line. */
static int bs_line(bs_conn *c, char *line, size_t cap)
{
    for (size_t have = 1;; have++) {
        if (bs_fill(c, have) != 0)
            return -1;
        if (have >= 2 && c->buf[c->start + have - 2] == '\r' && c->buf[c->start + have - 1] == '\n') {
            size_t n = have - 2 < cap - 1 ? have - 2 : cap - 1;
            memcpy(line, c->buf + c->start, n);
            line[n] = '\0';
            c->start += have;
            return 0;
        }
        if (have > 200) {
            fprintf(stderr, "qbench: beanstalkd: reply line too long\n");
            return -1;
        }
    }
}

static int bs_command(bs_conn *c, const char *cmd, const char *want)
{
    char line[256];
    if (bs_send(c, cmd, strlen(cmd)) != 0 || bs_line(c, line, sizeof(line)) != 0)
        return -1;
    if (strncmp(line, want, strlen(want)) != 0) {
        fprintf(stderr, "qbench: beanstalkd: '%.*s' answered '%s'\n", (int)strcspn(cmd, "\r"),
                cmd, line);
        return -1;
    }
    return 0;
}

static int bs_open(bs_conn **out, const qb_endpoint *ep)
{
    bs_conn *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -1;
    c->fd = qb_tcp_connect(ep, 10000);
    if (c->fd < 0) {
        free(c);
        return -1;
    }
    *out = c;
    return 0;
}

static int bs_setup(void **state, const qb_setup *su)
{
    bs_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -1;
    s->ep = su->opt->beanstalkd;
    snprintf(s->tube, sizeof(s->tube), "qb-%ld-%c-%d-%d", (long)getpid(), su->workload, su->run,
             rand() % 100000);
    *state = s;
    return 0;
}

static int bs_connect(qb_conn **out, void *state)
{
    bs_state *s = state;
    bs_conn *c;
    if (bs_open(&c, &s->ep) != 0)
        return -1;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "use %s\r\n", s->tube);
    int rc = bs_command(c, cmd, "USING");
    snprintf(cmd, sizeof(cmd), "watch %s\r\n", s->tube);
    if (rc == 0)
        rc = bs_command(c, cmd, "WATCHING");
    if (rc == 0)
        rc = bs_command(c, "ignore default\r\n", "WATCHING");
    if (rc != 0) {
        close(c->fd);
        free(c);
        return -1;
    }
    *out = (qb_conn *)c;
    return 0;
}

static int bs_push(qb_conn *qc, const uint8_t *msg, size_t size)
{
    bs_conn *c = (bs_conn *)qc;
    char head[64];
    int n = snprintf(head, sizeof(head), "put 1024 0 60 %zu\r\n", size);
    /* One write for the command and the body keeps it to one segment on the wire. */
    char out[65536 + 128];
    if (size + (size_t)n + 2 > sizeof(out))
        return QB_FAIL;
    memcpy(out, head, (size_t)n);
    memcpy(out + n, msg, size);
    memcpy(out + (size_t)n + size, "\r\n", 2);
    char line[128];
    if (bs_send(c, out, (size_t)n + size + 2) != 0 || bs_line(c, line, sizeof(line)) != 0)
        return QB_FAIL;
    if (strncmp(line, "INSERTED ", 9) != 0) {
        fprintf(stderr, "qbench: beanstalkd: put answered '%s'\n", line);
        return QB_FAIL;
    }
    return 0;
}

static int bs_pop(qb_conn *qc, uint8_t *buf, size_t size, int wait_ms)
{
    bs_conn *c = (bs_conn *)qc;
    char cmd[64], line[128];
    /* beanstalkd's timeout is in whole seconds; 0 returns at once. */
    snprintf(cmd, sizeof(cmd), "reserve-with-timeout %d\r\n", wait_ms <= 0 ? 0 : (wait_ms + 999) / 1000);
    if (bs_send(c, cmd, strlen(cmd)) != 0 || bs_line(c, line, sizeof(line)) != 0)
        return QB_FAIL;
    if (strcmp(line, "TIMED_OUT") == 0 || strcmp(line, "DEADLINE_SOON") == 0)
        return QB_EMPTY;
    unsigned long long id;
    size_t bytes;
    if (sscanf(line, "RESERVED %llu %zu", &id, &bytes) != 2) {
        fprintf(stderr, "qbench: beanstalkd: reserve answered '%s'\n", line);
        return QB_FAIL;
    }
    if (bs_fill(c, bytes + 2) != 0)
        return QB_FAIL;
    if (bytes != size) {
        fprintf(stderr, "qbench: beanstalkd: got a %zu-byte job, want %zu\n", bytes, size);
        return QB_FAIL;
    }
    memcpy(buf, c->buf + c->start, size);
    c->start += bytes + 2;
    snprintf(cmd, sizeof(cmd), "delete %llu\r\n", id);
    return bs_command(c, cmd, "DELETED") == 0 ? 0 : QB_FAIL;
}

static void bs_close(bs_conn *c)
{
    if (c == NULL)
        return;
    if (bs_send(c, "quit\r\n", 6) != 0) {
        /* Closing is all that is left to do either way. */
    }
    close(c->fd);
    free(c);
}

static void bs_disconnect(qb_conn *c)
{
    bs_close((bs_conn *)c);
}

static void bs_teardown(void *state)
{
    free(state);
}

static void bs_version(char *buf, size_t cap, const qb_options *opt, int sys)
{
    (void)sys;
    bs_conn *c;
    if (bs_open(&c, &opt->beanstalkd) != 0)
        return;
    char line[128];
    size_t bytes;
    if (bs_send(c, "stats\r\n", 7) == 0 && bs_line(c, line, sizeof(line)) == 0 &&
        sscanf(line, "OK %zu", &bytes) == 1 && bs_fill(c, bytes + 2) == 0) {
        char *yaml = strndup(c->buf + c->start, bytes);
        const char *v = yaml != NULL ? strstr(yaml, "\nversion: ") : NULL;
        if (v != NULL) {
            v += strlen("\nversion: ");
            size_t n = strcspn(v, "\r\n");
            if (*v == '"' && n >= 2) {
                v++;
                n -= 2;
            }
            snprintf(buf, cap, "%.*s", (int)n, v);
        }
        free(yaml);
        c->start += bytes + 2;
    }
    bs_close(c);
}

const qb_driver qb_beanstalkd_driver = {
    .name = "beanstalkd",
    .setup = bs_setup,
    .connect = bs_connect,
    .push = bs_push,
    .push_batch = NULL,
    .pop = bs_pop,
    .pop_batch = NULL,
    .disconnect = bs_disconnect,
    .teardown = bs_teardown,
    .version = bs_version,
};
