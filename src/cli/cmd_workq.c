/* The work-queue commands: receive with a lease, ack, nack, extend, and the dead letters. A lease
 * travels between commands as a token: the lease's fields in hexadecimal. */
#include <stdlib.h>
#include <string.h>

#include "cli/qops.h"
#include "util/util.h"

/* Items a receive transaction takes (the batch size: 100 per commit), and tokens an
 * ack transaction settles. */
#define RECEIVE_BATCH 100
#define ACK_BATCH     1000

/* Exit code of a failed ack, nack or extend: a lease that is gone is "not found" (1). */
static int lease_fail(int err, const char *what)
{
    if (err == KVQ_ELEASE_EXPIRED || err == KVQ_ELEASE_SETTLED) {
        fprintf(stderr, "kvq: %s: %s (%s)\n", what, kvq_strerror(err), kvq_last_error());
        cli_json_error(err, kvq_errname(err), kvq_last_error());
        return EXIT_EMPTY;
    }
    return cli_fail(err, what);
}

static void print_received(cli *c, const kvq_buf *v, const kvq_workq_lease *l, int first)
{
    char tok[KVQ_WORKQ_TOKEN_LEN + 1];
    cli_token_format(l, tok);
    if (c->json) {
        printf("%s{\"lease\":\"%s\",\"deliveries\":%u,\"priority\":%lld,\"value\":",
               first ? "" : ",", tok, l->deliveries, (long long)l->priority);
        cli_json_str(stdout, v->data, v->len);
        printf("}");
    } else {
        printf("%s\t", tok);
        cli_print_value(stdout, v->data, v->len);
    }
}

int cmd_receive(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    int rc = cli_need_name("receive", argc, argv, &name);
    if (rc != 0)
        return rc;
    long long lease = 0, wait_ms = 0, k = 1;
    int many = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--lease") == 0) {
            if (i + 1 >= argc || cli_parse_ms(argv[i + 1], 1, 86400000, &lease) != 0)
                return cli_usage("receive", "--lease needs a duration from 1ms to 24h (500ms, 30s, 5m)");
            i++;
        } else if (strcmp(argv[i], "--wait") == 0) {
            if (i + 1 >= argc || cli_parse_ms(argv[i + 1], 0, 86400000, &wait_ms) != 0)
                return cli_usage("receive", "--wait needs a duration from 0 to 24h (500ms, 30s, 5m)");
            i++;
        } else if (strcmp(argv[i], "-n") == 0) {
            if (i + 1 >= argc || cli_parse_int(argv[i + 1], 1, 10000, &k) != 0)
                return cli_usage("receive", "-n needs a count from 1 to 10000");
            many = 1;
            i++;
        } else {
            return cli_usage("receive", "unexpected argument '%s'", cli_arg(argv[i]));
        }
    }
    cli_queue *q;
    kvq_workq *w;
    rc = cli_open_workq(c, "receive", name, &q, &w);
    if (rc != 0)
        return rc;
    /* In batches, one transaction each (the values are copied into the in-flight records, so
     * a batch of large values is halved until it fits a transaction). */
    size_t chunk = k < RECEIVE_BATCH ? (size_t)k : RECEIVE_BATCH;
    kvq_buf *vs = calloc(chunk, sizeof(*vs));
    kvq_workq_lease *ls = calloc(chunk, sizeof(*ls));
    long long got = 0;
    int err = vs == NULL || ls == NULL ? kvq__error(KVQ_ENOMEM, "out of memory") : 0;
    if (c->json && many)
        printf("[");
    while (err == 0 && got < k) {
        size_t want = (size_t)(k - got) < chunk ? (size_t)(k - got) : chunk, n = 0;
        err = kvq_workq_receive_many(vs, ls, &n, w, want, lease);
        if (err == KVQ_ETRANSACTION_TOO_LARGE && chunk > 1) {
            chunk /= 2;
            err = 0;
            continue;
        }
        if (err == KVQ_ENOTFOUND && got == 0 && wait_ms > 0) {
            /* Nothing ready: a long poll for the first item, then what is ready. */
            err = kvq_workq_receive_wait(&vs[0], &ls[0], w, lease, wait_ms);
            n = err == 0;
        }
        for (size_t i = 0; i < n; i++, got++)
            print_received(c, &vs[i], &ls[i], got == 0);
        if (err == 0 && n < want && got > 0 && !(wait_ms > 0 && got == 1 && n == 1))
            break; /* the queue ran out */
    }
    if (err == KVQ_ENOTFOUND && got > 0)
        err = 0;
    for (size_t i = 0; vs != NULL && i < chunk; i++)
        kvq_buf_dispose(&vs[i]);
    free(vs);
    free(ls);
    if (c->json && many)
        printf("]\n");
    else if (c->json && got > 0)
        printf("\n");
    cli_queue_close(q);
    if (err != 0 && err != KVQ_ENOTFOUND) {
        if (got > 0)
            cli_json_errors(0); /* the items received were printed: no second JSON value */
        return cli_fail(err, "receive failed");
    }
    if (got == 0) {
        if (c->json && !many)
            printf("null\n");
        else if (!c->json)
            fprintf(stderr, "kvq: nothing ready in '%s'\n", name);
        return EXIT_EMPTY;
    }
    return 0;
}

/* ack NAME TOKEN...: in batches of ACK_BATCH tokens, one transaction each; a token that fails
 * does not stop the others. Every failure is reported, and the exit status is that of the
 * first. */
static int ack_many(cli *c, const char *name, int argc, char **argv)
{
    size_t n = (size_t)argc - 2;
    kvq_workq_lease *ls = calloc(n, sizeof(*ls));
    int *res = calloc(n, sizeof(*res));
    if (ls == NULL || res == NULL) {
        free(ls);
        free(res);
        return cli_fail(KVQ_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        if (kvq_workq_lease_parse(&ls[i], argv[2 + i]) != 0) {
            free(ls);
            free(res);
            return cli_usage("ack", "'%s' is not a lease token (%d hexadecimal digits)",
                             cli_arg(argv[2 + i]), KVQ_WORKQ_TOKEN_LEN);
        }
    cli_queue *q;
    kvq_workq *w;
    int rc = cli_open_workq(c, "ack", name, &q, &w);
    if (rc != 0) {
        free(ls);
        free(res);
        return rc;
    }
    int err = 0;
    size_t done = 0;
    for (; done < n && err == 0; done += ACK_BATCH) {
        size_t m = n - done < ACK_BATCH ? n - done : ACK_BATCH;
        err = kvq_workq_ack_many(res + done, w, ls + done, m);
        if (err == KVQ_ELEASE_EXPIRED || err == KVQ_ELEASE_SETTLED)
            err = 0; /* per token, in res */
    }
    cli_queue_close(q);
    if (err != 0) {
        /* A transaction error: the batches before this one were acked. */
        free(ls);
        free(res);
        char what[120];
        snprintf(what, sizeof(what), "ack failed (the first %zu tokens were handled)",
                 done - ACK_BATCH);
        return cli_fail(err, what);
    }
    int first = 0, acked = 0;
    if (c->json)
        printf("{\"acked\":[");
    for (size_t i = 0; i < n; i++) {
        if (res[i] == 0) {
            if (c->json)
                printf("%s\"%s\"", acked ? "," : "", argv[2 + i]);
            acked++;
            continue;
        }
        /* One JSON value: failures are counted in it, their messages go to standard error. */
        int was = cli_json_errors(0);
        char what[64];
        snprintf(what, sizeof(what), "ack of %.16s... failed", argv[2 + i]);
        kvq__error(res[i], "%s", res[i] == KVQ_ELEASE_EXPIRED
                                     ? "the lease expired and its item went back to the queue"
                                     : "the lease was already acked or nacked");
        int code = lease_fail(res[i], what);
        cli_json_errors(was);
        if (first == 0)
            first = code;
    }
    if (c->json)
        printf("],\"failed\":%d}\n", (int)n - acked);
    free(ls);
    free(res);
    return first;
}

/* ack, nack and extend: NAME TOKEN [--delay MS | --lease MS]. */
static int settle(cli *c, const char *cmd, int argc, char **argv)
{
    const char *name = NULL;
    int rc = cli_need_name(cmd, argc, argv, &name);
    if (rc != 0)
        return rc;
    if (argc < 3 || argv[2][0] == '-')
        return cli_usage(cmd, "missing the lease TOKEN (printed by 'kvq receive')");
    kvq_workq_lease l;
    if (kvq_workq_lease_parse(&l, argv[2]) != 0)
        return cli_usage(cmd, "'%s' is not a lease token (%d hexadecimal digits)", argv[2],
                         KVQ_WORKQ_TOKEN_LEN);
    long long ms = 0;
    const char *opt = strcmp(cmd, "nack") == 0     ? "--delay"
                      : strcmp(cmd, "extend") == 0 ? "--lease"
                                                   : NULL;
    for (int i = 3; i < argc; i++) {
        if (opt != NULL && strcmp(argv[i], opt) == 0) {
            if (i + 1 >= argc || cli_parse_ms(argv[i + 1], 0, 86400000, &ms) != 0)
                return cli_usage(cmd, "%s needs a duration from 0 to 24h (500ms, 30s, 5m)", opt);
            i++;
        } else {
            return cli_usage(cmd, "unexpected argument '%s'", cli_arg(argv[i]));
        }
    }
    cli_queue *q;
    kvq_workq *w;
    rc = cli_open_workq(c, cmd, name, &q, &w);
    if (rc != 0)
        return rc;
    int err;
    if (strcmp(cmd, "ack") == 0)
        err = kvq_workq_ack(w, &l);
    else if (strcmp(cmd, "nack") == 0)
        err = kvq_workq_nack(w, &l, ms);
    else
        err = kvq_workq_extend(w, &l, ms);
    cli_queue_close(q);
    if (err != 0) {
        char what[32];
        snprintf(what, sizeof(what), "%s failed", cmd);
        return lease_fail(err, what);
    }
    if (strcmp(cmd, "ack") == 0 || strcmp(cmd, "nack") == 0) {
        /* Text: silent, as the other commands that change a queue; --json: one value. */
        if (c->json && strcmp(cmd, "ack") == 0)
            printf("{\"acked\":[\"%s\"],\"failed\":0}\n", argv[2]);
        else if (c->json)
            printf("{\"nacked\":\"%s\",\"delay_ms\":%lld}\n", argv[2], ms);
    } else {
        /* The lease's new end changes the token: print the new one. */
        char tok[KVQ_WORKQ_TOKEN_LEN + 1];
        cli_token_format(&l, tok);
        if (c->json)
            printf("{\"lease\":\"%s\"}\n", tok);
        else
            printf("%s\n", tok);
    }
    return 0;
}

int cmd_ack(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    if (argc > 3 && cli_need_name("ack", argc, argv, &name) == 0 && argv[2][0] != '-' &&
        argv[3][0] != '-')
        return ack_many(c, name, argc, argv);
    return settle(c, "ack", argc, argv);
}

int cmd_nack(cli *c, int argc, char **argv)
{
    return settle(c, "nack", argc, argv);
}

int cmd_extend(cli *c, int argc, char **argv)
{
    return settle(c, "extend", argc, argv);
}

typedef struct dlq_ctx {
    cli *c;
    long n;
} dlq_ctx;

static int print_dead(kvq_bytes value, uint32_t deliveries, void *payload)
{
    dlq_ctx *d = payload;
    if (d->c->json) {
        printf("%s{\"deliveries\":%u,\"value\":", d->n ? "," : "", deliveries);
        cli_json_str(stdout, value.data, value.len);
        printf("}");
    } else {
        printf("%u\t", deliveries);
        cli_print_value(stdout, value.data, value.len);
    }
    d->n++;
    return 0;
}

typedef struct item_ctx {
    cli *c;
    int delayed;
    size_t n;
} item_ctx;

static int print_wq_item(const kvq_workq_item *it, void *payload)
{
    item_ctx *x = payload;
    double due = (double)it->due_ms / 1000.0;
    char tok[KVQ_WORKQ_TOKEN_LEN + 1];
    if (!x->delayed)
        cli_token_format(&it->lease, tok);
    if (x->c->json) {
        printf("%s{", x->n ? "," : "");
        if (!x->delayed)
            printf("\"lease\":\"%s\",\"expires_in_seconds\":%.3f,", tok, due);
        else
            printf("\"due_in_seconds\":%.3f,", due);
        printf("\"deliveries\":%u,\"priority\":%lld,\"value\":", it->deliveries,
               (long long)it->priority);
        cli_json_str(stdout, it->value.data, it->value.len);
        printf("}");
    } else {
        if (!x->delayed)
            printf("%s\t", tok);
        printf("%.3f\t%u\t", due, it->deliveries);
        cli_print_value(stdout, it->value.data, it->value.len);
    }
    x->n++;
    return 0;
}

int cli_list_workq(cli *c, const char *name, int delayed)
{
    cli_queue *q;
    kvq_workq *w;
    int rc = cli_open_workq(c, "list", name, &q, &w);
    if (rc != 0)
        return rc;
    item_ctx x = { c, delayed, 0 };
    if (c->json)
        printf("[");
    int err = delayed ? kvq_workq_list_delayed(w, print_wq_item, &x)
                      : kvq_workq_list_inflight(w, print_wq_item, &x);
    if (c->json)
        printf("]\n");
    cli_queue_close(q);
    if (err != 0) {
        cli_json_errors(0); /* the array is printed: no second JSON value */
        return cli_fail(err, "list failed");
    }
    return 0;
}

int cmd_dlq(cli *c, int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "list") != 0 && strcmp(argv[1], "redrive") != 0 &&
                     strcmp(argv[1], "purge") != 0))
        return cli_usage("dlq", "expected 'list', 'redrive' or 'purge', then the queue NAME");
    const char *what = argv[1];
    const char *name = NULL;
    int rc = cli_need_name("dlq", argc - 1, argv + 1, &name);
    if (rc != 0)
        return rc;
    if (argc > 3)
        return cli_usage("dlq", "unexpected argument '%s'", cli_arg(argv[3]));
    cli_queue *q;
    kvq_workq *w;
    rc = cli_open_workq(c, "dlq", name, &q, &w);
    if (rc != 0)
        return rc;
    int err;
    if (strcmp(what, "list") == 0) {
        dlq_ctx d = { c, 0 };
        if (c->json)
            printf("[");
        err = kvq_workq_dlq_list(w, print_dead, &d);
        if (c->json)
            printf("]\n");
    } else {
        uint64_t moved = 0;
        int purge = strcmp(what, "purge") == 0;
        err = purge ? kvq_workq_dlq_purge(&moved, w) : kvq_workq_dlq_redrive(&moved, w);
        if (err == 0) {
            if (c->json)
                printf("{\"%s\":%llu}\n", purge ? "purged" : "redriven",
                       (unsigned long long)moved);
            else
                printf("%llu\n", (unsigned long long)moved);
        }
    }
    cli_queue_close(q);
    if (err != 0)
        return cli_fail(err, "dlq failed");
    return 0;
}
