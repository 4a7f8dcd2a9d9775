/* kvq consume: N workers pop batches and hand each item to standard output or to a command;
 * the consumer runtime restarts a worker whose item failed, within a limit per minute, and the
 * items popped but not finished are reported by count. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "qops.h"

extern char **environ;

typedef struct consume_ctx {
    cli *c;
    const char *exec;
    pthread_mutex_t out_mu;
} consume_ctx;

/* Runs the command with the item on its standard input; 0 if it exited with status 0. The pipe
 * is close-on-exec and the child is started with posix_spawn, so that commands run by other
 * workers at the same time never inherit this pipe (which would keep its reader from seeing the
 * end of the item). */
static int run_exec(const char *cmd, kvq_bytes v)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
    /* The command starts with the signals this process blocks or ignores back to normal. */
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, dflt;
    sigemptyset(&none);
    sigemptyset(&dflt);
    sigaddset(&dflt, SIGPIPE);
    sigaddset(&dflt, SIGINT);
    sigaddset(&dflt, SIGTERM);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dflt);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char *const argv[] = { "sh", "-c", (char *)cmd, NULL };
    pid_t pid;
    int src = posix_spawn(&pid, "/bin/sh", &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(fds[0]);
    if (src != 0) {
        close(fds[1]);
        return -1;
    }
    size_t off = 0;
    int ok = 1;
    while (off < v.len) {
        ssize_t n = write(fds[1], v.data + off, v.len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            ok = 0; /* the command did not read it all */
            break;
        }
        off += (size_t)n;
    }
    close(fds[1]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return ok && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static int on_item(kvq_bytes v, int worker, void *payload)
{
    consume_ctx *ctx = payload;
    if (ctx->exec != NULL) {
        int rc = run_exec(ctx->exec, v);
        if (rc != 0)
            fprintf(stderr, "kvq consume: worker %d: the command failed for an item\n", worker);
        return rc;
    }
    pthread_mutex_lock(&ctx->out_mu);
    if (ctx->c->json) {
        cli_json_str(stdout, v.data, v.len);
        fputc('\n', stdout);
    } else {
        cli_print_value(stdout, v.data, v.len);
    }
    int rc = fflush(stdout) == 0 ? 0 : -1;
    pthread_mutex_unlock(&ctx->out_mu);
    return rc;
}

int cmd_consume(cli *c, int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-')
        return cli_usage("consume", "missing the queue NAME");
    const char *name = argv[1];
    kvq_consumer_options o = KVQ_CONSUMER_OPTIONS_INIT;
    const char *exec = NULL;
    for (int i = 2; i < argc; i++) {
        long long v;
        if (strcmp(argv[i], "--workers") == 0) {
            if (i + 1 >= argc || cli_parse_int(argv[i + 1], 1, 1024, &v) != 0)
                return cli_usage("consume", "--workers needs a count from 1 to 1024");
            o.workers = (int)v;
            i++;
        } else if (strcmp(argv[i], "--batch") == 0) {
            if (i + 1 >= argc || cli_parse_int(argv[i + 1], 1, 10000, &v) != 0)
                return cli_usage("consume", "--batch needs a count from 1 to 10000");
            o.batch = (int)v;
            i++;
        } else if (strcmp(argv[i], "--max-restarts") == 0) {
            if (i + 1 >= argc || cli_parse_int(argv[i + 1], 0, 1000000, &v) != 0)
                return cli_usage("consume", "--max-restarts needs a count");
            o.max_restarts_per_minute = (int)v;
            i++;
        } else if (strcmp(argv[i], "--exec") == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0')
                return cli_usage("consume", "--exec needs a command");
            exec = argv[++i];
        } else if (strcmp(argv[i], "--drain") == 0) {
            o.drain = 1;
        } else {
            return cli_usage("consume", "unexpected argument '%s'", argv[i]);
        }
    }
    if (cli_check_name(name) != 0)
        return cli_usage("consume", "invalid queue name '%s'", name);
    int rc = cli_open(c);
    if (rc != 0)
        return rc;
    cli_qtype type;
    int err = cli_registry_get(c->db, name, &type);
    if (err == KVQ_ENOTFOUND) {
        fprintf(stderr, "kvq: no queue named '%s'\n", name);
        return EXIT_EMPTY;
    }
    if (err != 0)
        return cli_fail(err, "cannot read the queue registry");
    if (type != QT_DURABLE)
        return cli_usage("consume", "consume works on durable queues; '%s' is a %s queue", name,
                         cli_qtype_name(type));
    cq *q;
    err = cq_open(&q, c->db, name, type);
    if (err != 0)
        return cli_fail(err, "cannot open the queue");
    kvq_consumer_source src;
    err = cq_source(q, &src);
    if (err != 0) {
        cq_close(q);
        return cli_fail(err, "cannot consume the queue");
    }

    /* SIGINT and SIGTERM stop the workers; what they have popped is still delivered. The
     * signals are blocked in every thread and taken here synchronously. */
    signal(SIGPIPE, SIG_IGN);
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, &old);

    consume_ctx ctx = { .c = c, .exec = exec };
    pthread_mutex_init(&ctx.out_mu, NULL);
    kvq_consumer *cons;
    err = kvq_consumer_start(&cons, c->db, &src, on_item, &ctx, &o);
    if (err != 0) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        cq_close(q);
        return cli_fail(err, "cannot start the consumers");
    }
    /* Wait for a signal, or for the workers to end by themselves (drain, failure). */
    while (!kvq_consumer_finished(cons)) {
        struct timespec ts = { 0, 100 * 1000000L };
        int sig = sigtimedwait(&sigs, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr, "kvq consume: stopping (signal %d)\n", sig);
            kvq_consumer_stop(cons);
            break;
        }
    }
    err = kvq_consumer_join(cons);
    kvq_consumer_stats s;
    (void)kvq_consumer_get_stats(&s, cons);
    kvq_consumer_free(cons);
    cq_close(q);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_mutex_destroy(&ctx.out_mu);
    fprintf(stderr,
            "kvq consume: %llu items in %llu batches; %llu popped but not finished; %llu "
            "worker restarts\n",
            (unsigned long long)s.items, (unsigned long long)s.batches,
            (unsigned long long)s.undelivered, (unsigned long long)s.restarts);
    if (err != 0)
        return cli_fail(err, "consume stopped");
    return s.undelivered > 0 ? EXIT_DB : 0;
}
