/* kvq consume: N workers hand each item to standard output or to a command. At least once (the
 * default): the library's work-queue consumer, a lease per item, acked when handed over. At most
 * once: batches popped by the consumer runtime; a failed command loses its own item only. */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/qops.h"
#include "util/util.h"

extern char **environ;

typedef struct consume_ctx {
    cli *c;
    const char *exec;
    const char *name;
    int raw;
    pthread_mutex_t out_mu;
    int out_gone;       /* atomic: standard output failed; the consumer stops */
    uint64_t failed;    /* atomic: items whose command failed */
    kvq_consumer *cons; /* atomic: set once started, so that a worker can stop the others */
} consume_ctx;

/* Prints one item on standard output (a JSON string with --json), whole, under mu so that
 * workers' lines never interleave. 0, or -1 when standard output failed. */
/* Writes one item and flushes (the caller holds the output lock): 0, or -1 when standard
 * output failed. */
static int write_item(cli *c, kvq_bytes v)
{
    if (c->json) {
        cli_json_str(stdout, v.data, v.len);
        fputc('\n', stdout);
    } else {
        cli_print_value(stdout, v.data, v.len);
    }
    if (fflush(stdout) == 0)
        return 0;
    clearerr(stdout);
    return -1;
}

static int print_locked(cli *c, pthread_mutex_t *mu, kvq_bytes v)
{
    pthread_mutex_lock(mu);
    int rc = write_item(c, v);
    pthread_mutex_unlock(mu);
    return rc;
}

/* Standard output is gone: every worker stops at once, before it pops another batch (what is
 * popped and not yet handed over is lost, as --at-most-once says). Returns -1. */
static int output_gone(consume_ctx *ctx)
{
    __atomic_store_n(&ctx->out_gone, 1, __ATOMIC_RELEASE);
    kvq_consumer *cons = __atomic_load_n(&ctx->cons, __ATOMIC_ACQUIRE);
    if (cons != NULL)
        kvq_consumer_stop(cons);
    return -1;
}

/* At most once: an item whose command fails is lost (it was handed over), but the rest of its
 * batch is still handed to the command; only a closed standard output ends the batch. */
static int on_item(kvq_bytes v, int worker, void *payload)
{
    consume_ctx *ctx = payload;
    if (__atomic_load_n(&ctx->out_gone, __ATOMIC_ACQUIRE))
        return -1;
    if (ctx->exec != NULL) {
        /* At most once the item is already popped: a Ctrl-C of the process group does not
         * interrupt its command (forward_signals 0), so that it is still handed over. */
        cli_exec_item it = { v, ctx->c->nul ? '\0' : '\n', ctx->raw, 0, ctx->name, NULL,
                             ctx->c->db_url, 1, worker };
        int status, took_all;
        if (cli_exec_run(ctx->exec, &it, &status, &took_all) == 0)
            return 0;
        if (cli_stdout_reader_gone())
            return output_gone(ctx);
        __atomic_add_fetch(&ctx->failed, 1, __ATOMIC_ACQ_REL);
        char how[160];
        cli_exec_describe(status, took_all, how, sizeof(how));
        fprintf(stderr, "kvq consume: worker %d: the command %s; its item is lost (at most "
                        "once)\n",
                worker, how);
        return 0;
    }
    if (print_locked(ctx->c, &ctx->out_mu, v) != 0)
        return output_gone(ctx);
    return 0;
}

/* ---- at least once (the default): the library's work-queue consumer ---------------------- */

typedef struct leased_ctx {
    cli *c;
    const char *exec;
    const char *name;
    int raw;
    int stop;     /* atomic: set on SIGINT/SIGTERM (cuts a wait for the pipe's reader short) */
    int out_gone; /* atomic: standard output was closed */
    int pipe;     /* standard output is a pipe */
    uint32_t max_deliveries; /* the queue's: a nack of such a delivery dead-letters it (0: never) */
    uint64_t dead;           /* atomic: failed items that went to the dead letters */
    pthread_mutex_t out_mu;
    /* --exec: how many more commands may start now (of --workers), guarded by run_mu. */
    pthread_mutex_t run_mu;
    pthread_cond_t run_cv;
    int run_free;
    unsigned char *run_busy; /* per command slot (--workers of them): a command runs there */
    int run_slots;
} leased_ctx;

/* consume --exec --workers N runs at most N commands at once, as xargs -P N does, with 2N
 * workers of the library's consumer: while N commands run, the other workers' commits (the ack
 * of their last item, with the receive of their next) are under way, so that a command seldom
 * waits for a sync before it starts (issue 32 item 10). Each worker holds one item; one that
 * waits here for its turn holds its lease (extended by the heartbeat like any other). Returns
 * 0 once the caller may start its command, or -1 when consume is stopping (signal, closed
 * output): the item goes back unread. */
static int run_take(leased_ctx *x, int *slot)
{
    pthread_mutex_lock(&x->run_mu);
    while (x->run_free == 0 && !__atomic_load_n(&x->stop, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&x->out_gone, __ATOMIC_ACQUIRE))
        pthread_cond_wait(&x->run_cv, &x->run_mu);
    int ok = !__atomic_load_n(&x->stop, __ATOMIC_ACQUIRE) &&
             !__atomic_load_n(&x->out_gone, __ATOMIC_ACQUIRE);
    if (ok) {
        x->run_free--;
        /* The command's number ($KVQ_WORKER): a slot no other running command has. */
        *slot = 0;
        while (*slot < x->run_slots - 1 && x->run_busy[*slot])
            (*slot)++;
        x->run_busy[*slot] = 1;
    }
    pthread_mutex_unlock(&x->run_mu);
    return ok ? 0 : -1;
}

static void run_give(leased_ctx *x, int slot)
{
    pthread_mutex_lock(&x->run_mu);
    x->run_busy[slot] = 0;
    x->run_free++;
    pthread_cond_signal(&x->run_cv);
    pthread_mutex_unlock(&x->run_mu);
}

/* Wakes the workers waiting for their turn (consume is stopping). */
static void run_wake_all(leased_ctx *x)
{
    pthread_mutex_lock(&x->run_mu);
    pthread_cond_broadcast(&x->run_cv);
    pthread_mutex_unlock(&x->run_mu);
}

/* Whether standard output is a pipe (then an item counts as handed over once the reader has
 * read it, not once it is written: a reader that exits, as head does, leaves unread bytes). */
static int stdout_is_pipe(void)
{
    struct stat st;
    return fstat(STDOUT_FILENO, &st) == 0 && S_ISFIFO(st.st_mode);
}

/* Waits until the pipe on standard output holds no unread byte (0), or its reader is gone or
 * the wait is cut short by a stop (-1). */
static int pipe_drained(leased_ctx *x)
{
    for (;;) {
        int unread = 0;
        if (ioctl(STDOUT_FILENO, FIONREAD, &unread) != 0)
            return 0; /* cannot tell: count it as handed over, as for a file */
        if (unread == 0)
            return 0;
        struct pollfd p = { .fd = STDOUT_FILENO, .events = 0 };
        if (poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP))) {
            /* The reader is gone; it may have read the item just before it went (head -1
             * reads what is there, then exits): then the pipe holds nothing unread. */
            if (ioctl(STDOUT_FILENO, FIONREAD, &unread) == 0 && unread == 0)
                return 0;
            return -1;
        }
        if (__atomic_load_n(&x->stop, __ATOMIC_ACQUIRE))
            return -1;
        kvq__sleep_us(1000);
    }
}

/* 0: handed over; -1: standard output is gone. */
static int print_leased(leased_ctx *x, kvq_bytes v)
{
    pthread_mutex_lock(&x->out_mu);
    int rc = write_item(x->c, v);
    if (rc == 0 && x->pipe && pipe_drained(x) != 0)
        rc = -1;
    pthread_mutex_unlock(&x->out_mu);
    return rc;
}

/* A count as text, in a static buffer per thread (for one message at a time). */
static const char *u32_text(uint32_t v)
{
    static _Thread_local char buf[16];
    snprintf(buf, sizeof(buf), "%u", v);
    return buf;
}

/* Whether kvq itself is stopping on SIGINT/SIGTERM (the main thread takes the signal, perhaps a
 * moment after the command it also reached has died): looks for up to 200ms. */
static int stop_coming(leased_ctx *x)
{
    for (int i = 0; i < 200; i++) {
        if (__atomic_load_n(&x->stop, __ATOMIC_ACQUIRE))
            return 1;
        sigset_t p;
        if (sigpending(&p) == 0 && (sigismember(&p, SIGINT) == 1 || sigismember(&p, SIGTERM) == 1))
            return 1;
        kvq__sleep_us(1000);
    }
    return 0;
}

/* The handler: the library acks on KVQ_WORKQ_ACK, gives the item back after the nack delay on
 * KVQ_WORKQ_NACK, and at once, stopping everything, on KVQ_WORKQ_RELEASE; it also keeps the
 * lease alive while a long command runs. */
static int leased_item(kvq_bytes v, const kvq_workq_lease *lease, int worker, void *payload)
{
    leased_ctx *x = payload;
    if (x->exec != NULL) {
        char tok[KVQ_WORKQ_TOKEN_LEN + 1];
        cli_token_format(lease, tok);
        int status, took_all;
        if (run_take(x, &worker) != 0)
            return KVQ_WORKQ_RELEASE;
        cli_exec_item it = { v, x->c->nul ? '\0' : '\n', x->raw, 1, x->name, tok,
                             x->c->db_url, lease->deliveries, worker };
        int ran = cli_exec_run(x->exec, &it, &status, &took_all);
        run_give(x, worker);
        if (ran == 0)
            return KVQ_WORKQ_ACK;
        int sig = status != -1 && WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        /* A command that failed because kvq's standard output lost its reader, or that was
         * interrupted with kvq (Ctrl-C of the process group), did not fail on its item: the
         * item goes back at once, without a nack delay, and everything stops. */
        if (cli_stdout_reader_gone()) {
            if (!__atomic_exchange_n(&x->out_gone, 1, __ATOMIC_ACQ_REL))
                fprintf(stderr, "kvq consume: standard output was closed; stopping\n");
            run_wake_all(x);
            return KVQ_WORKQ_RELEASE;
        }
        if ((sig == SIGINT || sig == SIGTERM) && stop_coming(x))
            return KVQ_WORKQ_RELEASE;
        char how[160];
        cli_exec_describe(status, took_all, how, sizeof(how));
        /* The nack of a delivery that reached the queue's max moves the item to the dead
         * letters (kvq_workq_nack): say so, rather than that it goes back. */
        if (x->max_deliveries > 0 && lease->deliveries >= x->max_deliveries) {
            __atomic_add_fetch(&x->dead, 1, __ATOMIC_ACQ_REL);
            fprintf(stderr, "kvq consume: worker %d: the command %s; its item goes to the dead "
                            "letters (%u deliveries, the queue's max; see kvq dlq list %s)\n",
                    worker, how, lease->deliveries, x->name);
        } else {
            fprintf(stderr, "kvq consume: worker %d: the command %s; its item goes back (%u "
                            "of %s deliveries so far)\n",
                    worker, how, lease->deliveries,
                    x->max_deliveries > 0 ? u32_text(x->max_deliveries) : "unlimited");
        }
        return KVQ_WORKQ_NACK;
    }
    if (print_leased(x, v) == 0)
        return KVQ_WORKQ_ACK;
    /* Standard output is gone (kvq consume q | head -1): the item goes back at once, uncounted
     * as a failure of the item, and every worker stops. */
    if (!__atomic_exchange_n(&x->out_gone, 1, __ATOMIC_ACQ_REL))
        fprintf(stderr, "kvq consume: standard output was closed; stopping\n");
    return KVQ_WORKQ_RELEASE;
}

static int consume_leased(cli *c, cli_queue *q, const kvq_queue_settings *info, int workers, const char *exec,
                          int drain, int64_t nack_delay_ms, const sigset_t *sigs,
                          const char *name, int raw)
{
    leased_ctx x = { .c = c, .exec = exec, .name = name, .raw = raw,
                     .max_deliveries = info->max_deliveries };
    int stopped_by = 0;
    kvq_workq *w;
    int err = cli_queue_workq(q, info, &w);
    if (err == KVQ_EWRONGTYPE)
        return cli_usage("consume", "--ack needs a durable or priority queue");
    if (err != 0)
        return cli_fail(err, "cannot open the work queue");
    x.pipe = exec == NULL && stdout_is_pipe();
    pthread_mutex_init(&x.out_mu, NULL);
    pthread_mutex_init(&x.run_mu, NULL);
    pthread_cond_init(&x.run_cv, NULL);
    x.run_free = x.run_slots = workers;
    x.run_busy = calloc((size_t)workers, 1);
    if (x.run_busy == NULL) {
        pthread_mutex_destroy(&x.out_mu);
        pthread_mutex_destroy(&x.run_mu);
        pthread_cond_destroy(&x.run_cv);
        return cli_fail(KVQ_ENOMEM, "out of memory");
    }
    kvq_workq_consumer_options o = KVQ_WORKQ_CONSUMER_OPTIONS_INIT;
    o.workers = exec != NULL && workers <= 512 ? 2 * workers : workers;
    o.lease_ms = info->lease_ms > 0 ? info->lease_ms : 30000;
    o.nack_delay_ms = nack_delay_ms;
    o.drain = drain;
    /* The commands' keeper, forked by this (the main) thread before any worker runs; without
     * it each command gets a keeper of its own. At least once: Ctrl-C reaches the commands. */
    if (exec != NULL)
        (void)cli_exec_start(1);
    kvq_workq_consumer *cons;
    err = kvq_workq_consumer_start(&cons, w, leased_item, &x, &o);
    if (err != 0) {
        cli_exec_stop();
        pthread_mutex_destroy(&x.out_mu);
        pthread_mutex_destroy(&x.run_mu);
        pthread_cond_destroy(&x.run_cv);
        free(x.run_busy);
        return cli_fail(err, "cannot start the workers");
    }
    while (!kvq_workq_consumer_finished(cons)) {
        struct timespec ts = { 0, 100 * 1000000L };
        int sig = sigtimedwait(sigs, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            stopped_by = sig;
            __atomic_store_n(&x.stop, 1, __ATOMIC_RELEASE);
            run_wake_all(&x);
            fprintf(stderr, "kvq consume: stopping (signal %d)\n", sig);
            kvq_workq_consumer_stop(cons);
            break;
        }
    }
    err = kvq_workq_consumer_join(cons);
    cli_exec_stop();
    kvq_workq_consumer_stats s;
    if (kvq_workq_consumer_get_stats(&s, cons) != 0) /* cannot fail on a live handle; zeros if it ever does */
        memset(&s, 0, sizeof s);
    kvq_workq_consumer_destroy(cons);
    pthread_mutex_destroy(&x.out_mu);
    pthread_mutex_destroy(&x.run_mu);
    pthread_cond_destroy(&x.run_cv);
    free(x.run_busy);
    /* A nack that found the lease ended first is counted in lost_leases, not in nacked: the
     * dead letters counted here are those of nacks that went through. */
    uint64_t dead = __atomic_load_n(&x.dead, __ATOMIC_ACQUIRE);
    if (dead > s.nacked)
        dead = s.nacked;
    fprintf(stderr,
            "kvq consume: %llu items acked, %llu given back after a failed command, %llu moved "
            "to the dead letters after a failed command, %llu leases lost to expiry, %llu given "
            "back unread\n",
            (unsigned long long)s.acked, (unsigned long long)(s.nacked - dead),
            (unsigned long long)dead, (unsigned long long)s.lost_leases,
            (unsigned long long)s.released);
    if (err != 0)
        return cli_fail(err, "consume stopped");
    if (s.nacked > 0)
        return EXIT_FAILED;
    if (x.out_gone)
        return EXIT_OUTPUT_GONE;
    /* SIGTERM is consume's ordinary stop (exit 0); Ctrl-C exits 130, as watch and push do. */
    return stopped_by == SIGINT ? 128 + SIGINT : 0;
}

/* SIGINT and SIGTERM are blocked in every thread (the workers inherit the mask) and taken by
 * the main thread with sigtimedwait; SIGPIPE is ignored (a command that stops reading its item
 * is a failed item, not the end of kvq). */
static void block_stop_signals(sigset_t *sigs, sigset_t *old)
{
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(sigs);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, sigs, old);
}

/* What the command line asks of consume. */
typedef struct consume_args {
    const char *name;
    kvq_consumer_options o;
    const char *exec;
    int ack, raw;
    long long nack_delay;
} consume_args;

/* Reads consume's arguments and checks that they go together. 0, or the usage error's exit
 * code. */
static int parse_consume_args(consume_args *a, int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-')
        return cli_usage("consume", "missing the queue NAME");
    *a = (consume_args){ .name = argv[1], .o = KVQ_CONSUMER_OPTIONS_INIT, .ack = 1,
                         .nack_delay = 1000 };
    int ack_given = 0, batch_given = 0, nack_given = 0;
    for (int i = 2; i < argc; i++) {
        long long v;
        if (strcmp(argv[i], "--workers") == 0) {
            if (i + 1 >= argc || cli_parse_int(argv[i + 1], 1, 1024, &v) != 0)
                return cli_usage("consume", "--workers needs a count from 1 to 1024");
            a->o.workers = (int)v;
            i++;
        } else if (strcmp(argv[i], "--batch") == 0) {
            if (i + 1 >= argc || cli_parse_int(argv[i + 1], 1, 10000, &v) != 0)
                return cli_usage("consume", "--batch needs a count from 1 to 10000");
            a->o.batch = (int)v;
            batch_given = 1;
            i++;
        } else if (strcmp(argv[i], "--exec") == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0')
                return cli_usage("consume", "--exec needs a command");
            a->exec = argv[++i];
        } else if (strcmp(argv[i], "--raw") == 0) {
            a->raw = 1;
        } else if (strcmp(argv[i], "--drain") == 0) {
            a->o.drain = 1;
        } else if (strcmp(argv[i], "--ack") == 0) {
            ack_given = 1;
        } else if (strcmp(argv[i], "--at-most-once") == 0) {
            a->ack = 0;
        } else if (strcmp(argv[i], "--nack-delay") == 0) {
            if (i + 1 >= argc || cli_parse_ms(argv[i + 1], 0, 86400000, &a->nack_delay) != 0)
                return cli_usage("consume", "--nack-delay needs a duration from 0 to 24h (500ms, 30s, 5m)");
            nack_given = 1;
            i++;
        } else {
            return cli_usage("consume", "unexpected argument '%s'", cli_arg(argv[i]));
        }
    }
    if (kvq_queue_check_name(a->name) != 0)
        return cli_usage("consume", "invalid queue name '%s'", cli_arg(a->name));
    if (a->raw && a->exec == NULL)
        return cli_usage("consume", "--raw applies with --exec");
    if (ack_given && !a->ack)
        return cli_usage("consume", "--ack and --at-most-once exclude each other");
    if (a->ack && batch_given)
        return cli_usage("consume", "--batch applies with --at-most-once (at least once, the "
                                    "default, takes one lease per item)");
    if (!a->ack && nack_given)
        return cli_usage("consume", "--nack-delay does not apply with --at-most-once");
    return 0;
}

/* Waits for a stop signal, or for the workers to end by themselves (drain, failure).
 * Meanwhile, delayed items and ended leases of the work queue are made ready once due (they
 * then wake the workers as a push does), every 200 ms: a read-only look when nothing is due.
 * Returns the signal that stopped the workers, or 0. */
static int wait_consumers(cli *c,
                          cli_queue *q,
                          const kvq_queue_settings *info,
                          consume_ctx *ctx,
                          kvq_consumer *cons,
                          const sigset_t *sigs)
{
    kvq_workq *due_w = NULL;
    if (!c->read_only && cli_queue_workq(q, info, &due_w) != 0)
        due_w = NULL;
    int64_t next_due = 0;
    while (!kvq_consumer_finished(cons)) {
        if (due_w != NULL && kvq__mono_us() >= next_due) {
            if (kvq_workq_ready_due(NULL, due_w) != 0)
                fprintf(stderr, "kvq consume: cannot make due items ready: %s\n",
                        kvq_last_error());
            next_due = kvq__mono_us() + 200000;
        }
        if (__atomic_load_n(&ctx->out_gone, __ATOMIC_ACQUIRE)) {
            fprintf(stderr, "kvq consume: standard output was closed; stopping\n");
            kvq_consumer_stop(cons);
            return 0;
        }
        struct timespec ts = { 0, 10 * 1000000L };
        int sig = sigtimedwait(sigs, NULL, &ts);
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr, "kvq consume: stopping (signal %d)\n", sig);
            kvq_consumer_stop(cons);
            return sig;
        }
    }
    return 0;
}

/* consume --at-most-once: the consumer runtime's workers pop batches and hand their items over
 * (on_item); this thread waits, then says what was handed over and returns the exit code. */
static int
consume_popped(cli *c, cli_queue *q, const kvq_queue_settings *info, const consume_args *a)
{
    kvq_consumer_source src;
    int err = cli_queue_source(q, &src);
    if (err != 0) {
        cli_queue_close(q);
        return cli_fail(err, "cannot consume the queue");
    }

    /* SIGINT and SIGTERM stop the workers; what they have popped is still delivered. The
     * signals are blocked in every thread and taken here synchronously. */
    sigset_t sigs, old;
    block_stop_signals(&sigs, &old);

    consume_ctx ctx = { .c = c, .exec = a->exec, .name = a->name, .raw = a->raw };
    pthread_mutex_init(&ctx.out_mu, NULL);
    /* At most once: a Ctrl-C lets the commands finish (their items were popped). */
    if (a->exec != NULL)
        (void)cli_exec_start(0);
    kvq_consumer *cons;
    err = kvq_consumer_start(&cons, c->db, &src, on_item, &ctx, &a->o);
    if (err != 0) {
        cli_exec_stop();
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        cli_queue_close(q);
        return cli_fail(err, "cannot start the consumers");
    }
    __atomic_store_n(&ctx.cons, cons, __ATOMIC_RELEASE);
    int stopped_by = wait_consumers(c, q, info, &ctx, cons, &sigs);
    err = kvq_consumer_join(cons);
    cli_exec_stop();
    kvq_consumer_stats s;
    if (kvq_consumer_get_stats(&s, cons) != 0) /* cannot fail on a live handle; zeros if it ever does */
        memset(&s, 0, sizeof s);
    kvq_consumer_destroy(cons);
    cli_queue_close(q);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_mutex_destroy(&ctx.out_mu);
    uint64_t failed = __atomic_load_n(&ctx.failed, __ATOMIC_ACQUIRE);
    fprintf(stderr,
            "kvq consume: %llu items in %llu batches, %llu of them failed in the command; %llu "
            "popped but not handed over\n",
            (unsigned long long)s.items, (unsigned long long)s.batches,
            (unsigned long long)failed, (unsigned long long)s.undelivered);
    if (err != 0)
        return cli_fail(err, "consume stopped");
    if (ctx.out_gone)
        return EXIT_OUTPUT_GONE;
    if (s.undelivered > 0 || failed > 0)
        return EXIT_FAILED;
    return stopped_by == SIGINT ? 128 + SIGINT : 0;
}

/* kvq consume QUEUE: at least once (leases, consume_leased) or at most once (consume_popped). */
int cmd_consume(cli *c, int argc, char **argv)
{
    consume_args a;
    int rc = parse_consume_args(&a, argc, argv);
    if (rc != 0)
        return rc;
    const char *name = a.name;
    int ack = a.ack;
    cli_queue *q;
    kvq_queue_settings info;
    rc = cli_open_named(c, name, &q, &info);
    if (rc != 0)
        return rc;
    kvq_queue_type type = info.type;
    if (ack ? type == KVQ_QUEUE_FIFO : type != KVQ_QUEUE_DURABLE) {
        cli_queue_close(q);
        return cli_usage("consume", "%s; '%s' is a %s queue",
                         ack ? "consume (at least once) needs a durable or priority queue; a "
                               "fifo queue takes --at-most-once"
                             : "--at-most-once works on durable queues",
                         name, cli_type_name(type));
    }
    if (ack) {
        sigset_t sigs, old;
        block_stop_signals(&sigs, &old);
        rc = consume_leased(c, q, &info, a.o.workers, a.exec, a.o.drain, a.nack_delay, &sigs, name,
                            a.raw);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        cli_queue_close(q);
        return rc;
    }
    return consume_popped(c, q, &info, &a);
}
