/* qbench: drives each queue through the comparison's workloads and prints one Markdown table.
 *
 *   (a) one producer pushes N messages one per operation, then one consumer pops them;
 *   (b) P producers and C consumers at once, one message per operation;
 *   (c) the same two shapes in batches of K messages per operation, where the system has them;
 *   (d) one producer at a fixed rate, one consumer waiting; push-to-pop latency p50 and p99.
 *
 * Every loop is bounded by a count and by time: each workload run stops at its cap (--cap) and
 * the whole comparison at its budget (--budget); every blocking call a driver makes has a
 * timeout. bench/compare/run starts the servers (on 127.0.0.1 only) and calls this. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "qbench.h"

/* ---- time ---------------------------------------------------------------------------------- */

double qb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void qb_sleep_us(long us)
{
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void sleep_until_ns(int64_t t)
{
    struct timespec ts = { (time_t)(t / 1000000000), (long)(t % 1000000000) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* ---- loopback TCP ---------------------------------------------------------------------------- */

int qb_tcp_connect(const qb_endpoint *ep, int timeout_ms)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)ep->port);
    /* qb_parse_endpoint admitted only 127.x.y.z; check again here, where the socket is made. */
    if (inet_pton(AF_INET, ep->host, &sa.sin_addr) != 1 ||
        (ntohl(sa.sin_addr.s_addr) >> 24) != 127) {
        fprintf(stderr, "qbench: refusing non-loopback address %s\n", ep->host);
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        perror("qbench: socket");
        return -1;
    }
    struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0 ||
        connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        fprintf(stderr, "qbench: connect %s:%d: %s\n", ep->host, ep->port, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static int print_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        perror("qbench: free port");
        if (fd >= 0)
            close(fd);
        return 1;
    }
    printf("%d\n", ntohs(sa.sin_port));
    close(fd);
    return 0;
}

/* ---- messages -------------------------------------------------------------------------------- */

/* A message: its sequence number (8 bytes), the monotonic time its push began in nanoseconds
 * (8 bytes), then filler. */
static void make_msg(uint8_t *m, size_t size, uint64_t seq, int64_t stamp)
{
    memcpy(m, &seq, 8);
    memcpy(m + 8, &stamp, 8);
    for (size_t i = 16; i < size; i++)
        m[i] = (uint8_t)('a' + (seq + i) % 26);
}

static uint64_t msg_seq(const uint8_t *m)
{
    uint64_t s;
    memcpy(&s, m, 8);
    return s;
}

static int64_t msg_stamp(const uint8_t *m)
{
    int64_t s;
    memcpy(&s, m + 8, 8);
    return s;
}

/* ---- shared state of one workload run (in shared memory, so forked clients can use it) ------- */

typedef struct run_ctx {
    const qb_driver *d;
    void *state;
    const qb_options *o;
    size_t size;
    long n;
    int batch;
    double deadline; /* monotonic seconds: stop here */
    pthread_barrier_t start;
    atomic_int stop;
    atomic_int failed;
    atomic_long pushed;
    atomic_long popped;
    atomic_long dups;
    atomic_long out_of_range;
    _Atomic int64_t t_end_ns; /* when the last message was popped */
    int producers, consumers;
    atomic_uchar *seen; /* one byte per sequence number */
} run_ctx;

typedef struct client_arg {
    run_ctx *ctx;
    int index;
    int producer;
} client_arg;

static void note_popped(run_ctx *x, const uint8_t *buf, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t s = msg_seq(buf + i * x->size);
        if (s >= (uint64_t)x->n)
            atomic_fetch_add(&x->out_of_range, 1);
        else if (atomic_exchange(&x->seen[s], 1) != 0)
            atomic_fetch_add(&x->dups, 1);
    }
    long total = atomic_fetch_add(&x->popped, (long)count) + (long)count;
    if (total >= x->n) {
        int64_t t = now_ns(), prev = atomic_load(&x->t_end_ns);
        while (t > prev && !atomic_compare_exchange_weak(&x->t_end_ns, &prev, t)) {
        }
    }
}

static int past_deadline(run_ctx *x)
{
    if (atomic_load(&x->stop) || atomic_load(&x->failed))
        return 1;
    if (qb_now() >= x->deadline) {
        atomic_store(&x->stop, 1);
        return 1;
    }
    return 0;
}

static void producer_work(run_ctx *x, qb_conn *c, int index, uint8_t *buf)
{
    long lo = x->n * index / x->producers, hi = x->n * (index + 1) / x->producers;
    for (long i = lo; i < hi && !past_deadline(x);) {
        size_t k = (size_t)(hi - i < x->batch ? hi - i : x->batch);
        for (size_t j = 0; j < k; j++)
            make_msg(buf + j * x->size, x->size, (uint64_t)(i + (long)j), 0);
        int rc = x->batch > 1 ? x->d->push_batch(c, buf, x->size, k)
                              : x->d->push(c, buf, x->size);
        if (rc != 0) {
            atomic_store(&x->failed, 1);
            return;
        }
        atomic_fetch_add(&x->pushed, (long)k);
        i += (long)k;
    }
}

static void consumer_work(run_ctx *x, qb_conn *c, uint8_t *buf)
{
    while (atomic_load(&x->popped) < x->n && !past_deadline(x)) {
        size_t got = 0;
        int rc;
        if (x->batch > 1) {
            rc = x->d->pop_batch(c, buf, x->size, (size_t)x->batch, &got, 100);
        } else {
            rc = x->d->pop(c, buf, x->size, 100);
            got = rc == 0 ? 1 : 0;
        }
        if (rc == QB_FAIL) {
            atomic_store(&x->failed, 1);
            return;
        }
        if (got > 0)
            note_popped(x, buf, got);
    }
}

static void client_main(client_arg *a)
{
    run_ctx *x = a->ctx;
    qb_conn *c = NULL;
    uint8_t *buf = malloc(x->size * (size_t)x->batch);
    if (buf == NULL || x->d->connect(&c, x->state) != 0) {
        c = NULL;
        atomic_store(&x->failed, 1);
    }
    /* Everyone meets here, connected, so that the clock starts with all clients ready. */
    pthread_barrier_wait(&x->start);
    if (c != NULL) {
        if (a->producer)
            producer_work(x, c, a->index, buf);
        else
            consumer_work(x, c, buf);
        x->d->disconnect(c);
    }
    free(buf);
}

static void *client_thread(void *p)
{
    client_main(p);
    return NULL;
}

/* ---- workloads ------------------------------------------------------------------------------- */

typedef struct wl_result {
    double v1, v2; /* (a)/(c) sequential: push and pop rates; (b)/(c) concurrent: v1 ops/s;
                      (d): p50 and p99 in ms */
    int partial;
    long ops; /* push and pop operations made (a batch is one) */
} wl_result;

static run_ctx *ctx_new(const qb_driver *d, void *state, const qb_options *o, long n, int batch,
                        double cap_s)
{
    size_t bytes = sizeof(run_ctx) + (size_t)n;
    void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        perror("qbench: mmap");
        return NULL;
    }
    run_ctx *x = mem;
    memset(x, 0, sizeof(*x));
    x->d = d;
    x->state = state;
    x->o = o;
    x->size = (size_t)o->size;
    x->n = n;
    x->batch = batch;
    x->deadline = qb_now() + cap_s;
    x->producers = o->producers;
    x->consumers = o->consumers;
    x->seen = (atomic_uchar *)((char *)mem + sizeof(run_ctx));
    return x;
}

static void ctx_free(run_ctx *x)
{
    munmap(x, sizeof(run_ctx) + (size_t)x->n);
}

static int check_delivery(run_ctx *x, const char *what)
{
    long dups = atomic_load(&x->dups), bad = atomic_load(&x->out_of_range);
    if (dups != 0 || bad != 0) {
        fprintf(stderr, "qbench: %s: %ld duplicate and %ld unknown messages popped\n", what, dups,
                bad);
        return -1;
    }
    return 0;
}

/* (a) and (c) sequential: one client pushes everything, then pops everything. */
static int run_sequential(wl_result *out, const qb_driver *d, void *state, const qb_options *o,
                          int batch, double cap_s)
{
    run_ctx *x = ctx_new(d, state, o, o->n, batch, cap_s);
    if (x == NULL)
        return -1;
    int rc = -1;
    qb_conn *c = NULL;
    uint8_t *buf = malloc(x->size * (size_t)batch);
    if (buf == NULL || d->connect(&c, state) != 0)
        goto done;
    x->producers = 1;
    double t0 = qb_now();
    producer_work(x, c, 0, buf);
    double t1 = qb_now();
    long pushed = atomic_load(&x->pushed);
    if (atomic_load(&x->failed))
        goto done;
    /* Pop what was pushed, however the push ended; a second deadline as long as the first. */
    x->n = pushed;
    atomic_store(&x->stop, 0);
    x->deadline = qb_now() + cap_s;
    int empty_tries = 0;
    while (atomic_load(&x->popped) < pushed && !past_deadline(x) && empty_tries < 20) {
        size_t got = 0;
        int prc = batch > 1 ? d->pop_batch(c, buf, x->size, (size_t)batch, &got, 500)
                            : d->pop(c, buf, x->size, 500);
        if (prc == QB_FAIL)
            goto done;
        if (batch == 1)
            got = prc == 0 ? 1 : 0;
        empty_tries = got == 0 ? empty_tries + 1 : 0;
        note_popped(x, buf, got);
    }
    double t2 = qb_now();
    long popped = atomic_load(&x->popped);
    if (empty_tries >= 20) {
        fprintf(stderr, "qbench: %s: the queue came up empty after %ld of %ld messages\n",
                d->name, popped, pushed);
        goto done;
    }
    if (check_delivery(x, d->name) != 0)
        goto done;
    out->v1 = (double)pushed / (t1 - t0);
    out->v2 = (double)popped / (t2 - t1);
    out->ops = (pushed + batch - 1) / batch + (popped + batch - 1) / batch;
    out->partial = pushed < o->n || popped < pushed;
    rc = 0;
done:
    if (c != NULL)
        d->disconnect(c);
    free(buf);
    ctx_free(x);
    return rc;
}

/* (b) and (c) concurrent: P producers and C consumers at once, as threads or as processes. */
static int run_concurrent(wl_result *out, const qb_driver *d, void *state, const qb_options *o,
                          int batch, double cap_s, int processes)
{
    int nclients = o->producers + o->consumers;
    if (nclients > 128) {
        fprintf(stderr, "qbench: %d clients at once is more than the 128 qbench runs\n", nclients);
        return -1;
    }
    run_ctx *x = ctx_new(d, state, o, o->n, batch, cap_s);
    if (x == NULL)
        return -1;
    pthread_barrierattr_t ba;
    pthread_barrierattr_init(&ba);
    pthread_barrierattr_setpshared(&ba, processes ? PTHREAD_PROCESS_SHARED : PTHREAD_PROCESS_PRIVATE);
    pthread_barrier_init(&x->start, &ba, (unsigned int)nclients + 1);
    pthread_barrierattr_destroy(&ba);

    client_arg args[128];
    pthread_t threads[128];
    pid_t pids[128];
    int started = 0;
    for (int i = 0; i < nclients; i++) {
        args[i].ctx = x;
        args[i].producer = i < o->producers;
        args[i].index = i < o->producers ? i : i - o->producers;
        if (processes) {
            fflush(NULL);
            pid_t pid = fork();
            if (pid == 0) {
                client_main(&args[i]);
                _exit(0);
            }
            pids[i] = pid;
            if (pid < 0)
                break;
        } else if (pthread_create(&threads[i], NULL, client_thread, &args[i]) != 0) {
            break;
        }
        started++;
    }
    if (started < nclients) {
        /* The barrier can never fill: nothing started can get past it, so stop them hard. */
        fprintf(stderr, "qbench: could not start %d clients\n", nclients);
        if (processes) {
            for (int i = 0; i < started; i++) {
                kill(pids[i], SIGKILL);
                waitpid(pids[i], NULL, 0);
            }
            ctx_free(x);
            return -1;
        }
        exit(1); /* threads stuck at a barrier cannot be cancelled portably */
    }
    pthread_barrier_wait(&x->start);
    int64_t t0 = now_ns();
    x->deadline = qb_now() + cap_s;

    /* Wait for the clients, stopping them at the deadline; forked ones are killed if they take
     * 15 s longer than that. */
    int rc = 0;
    if (processes) {
        int left = nclients;
        while (left > 0) {
            for (int i = 0; i < nclients; i++) {
                if (pids[i] > 0 && waitpid(pids[i], NULL, WNOHANG) == pids[i]) {
                    pids[i] = 0;
                    left--;
                }
            }
            if (left == 0)
                break;
            if (qb_now() > x->deadline)
                atomic_store(&x->stop, 1);
            if (qb_now() > x->deadline + 15.0) {
                for (int i = 0; i < nclients; i++) {
                    if (pids[i] > 0) {
                        kill(pids[i], SIGKILL);
                        waitpid(pids[i], NULL, 0);
                    }
                }
                rc = -1;
                break;
            }
            qb_sleep_us(2000);
        }
    } else {
        while (atomic_load(&x->popped) < x->n && !atomic_load(&x->failed) &&
               qb_now() < x->deadline)
            qb_sleep_us(2000);
        atomic_store(&x->stop, 1);
        for (int i = 0; i < nclients; i++)
            pthread_join(threads[i], NULL);
    }
    int64_t t_end = atomic_load(&x->t_end_ns);
    long pushed = atomic_load(&x->pushed), popped = atomic_load(&x->popped);
    int partial = popped < x->n;
    if (partial)
        t_end = (int64_t)(x->deadline * 1e9);
    if (atomic_load(&x->failed) || rc != 0 || check_delivery(x, d->name) != 0 || t_end <= t0) {
        fprintf(stderr, "qbench: %s: concurrent run failed (%ld pushed, %ld popped)\n", d->name,
                pushed, popped);
        rc = -1;
    } else {
        out->v1 = (double)(pushed + popped) / ((double)(t_end - t0) / 1e9);
        out->partial = partial;
        out->ops = (pushed + batch - 1) / batch + (popped + batch - 1) / batch;
    }
    pthread_barrier_destroy(&x->start);
    ctx_free(x);
    return rc;
}

/* (d): one producer paced at o->rate, one consumer waiting; latency from the start of each push
 * to the return of the pop that got it. The first tenth (at most 100 messages) warms up and is
 * not counted. */
typedef struct lat_ctx {
    const qb_driver *d;
    void *state;
    const qb_options *o;
    long n;
    double *samples; /* milliseconds, by sequence number */
    atomic_long received;
    atomic_int stop;
    atomic_int failed;
    double deadline;
    pthread_barrier_t start;
} lat_ctx;

static void *lat_consumer(void *p)
{
    lat_ctx *x = p;
    qb_conn *c = NULL;
    uint8_t *buf = malloc((size_t)x->o->size);
    if (buf == NULL || x->d->connect(&c, x->state) != 0) {
        c = NULL;
        atomic_store(&x->failed, 1);
    }
    pthread_barrier_wait(&x->start);
    while (c != NULL && atomic_load(&x->received) < x->n && !atomic_load(&x->stop) &&
           !atomic_load(&x->failed) && qb_now() < x->deadline) {
        int rc = x->d->pop(c, buf, (size_t)x->o->size, 200);
        if (rc == QB_FAIL) {
            atomic_store(&x->failed, 1);
            break;
        }
        if (rc != 0)
            continue;
        int64_t t = now_ns();
        uint64_t s = msg_seq(buf);
        if (s < (uint64_t)x->n)
            x->samples[s] = (double)(t - msg_stamp(buf)) / 1e6;
        atomic_fetch_add(&x->received, 1);
    }
    if (c != NULL)
        x->d->disconnect(c);
    free(buf);
    return NULL;
}

static int cmp_ms(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run_latency(wl_result *out, const qb_driver *d, void *state, const qb_options *o,
                       double cap_s)
{
    lat_ctx x;
    memset(&x, 0, sizeof(x));
    x.d = d;
    x.state = state;
    x.o = o;
    x.n = o->latency_n;
    x.deadline = qb_now() + cap_s;
    x.samples = malloc(sizeof(double) * (size_t)x.n);
    uint8_t *buf = malloc((size_t)o->size);
    if (x.samples == NULL || buf == NULL) {
        free(x.samples);
        free(buf);
        return -1;
    }
    for (long i = 0; i < x.n; i++)
        x.samples[i] = NAN;
    pthread_barrier_init(&x.start, NULL, 2);
    pthread_t th;
    if (pthread_create(&th, NULL, lat_consumer, &x) != 0) {
        free(x.samples);
        free(buf);
        return -1;
    }
    qb_conn *c = NULL;
    if (d->connect(&c, state) != 0) {
        c = NULL;
        atomic_store(&x.failed, 1);
    }
    pthread_barrier_wait(&x.start);
    int64_t t0 = now_ns() + 1000000, step = (int64_t)(1e9 / o->rate);
    long sent = 0;
    for (long i = 0; c != NULL && i < x.n && !atomic_load(&x.failed) && qb_now() < x.deadline;
         i++) {
        sleep_until_ns(t0 + i * step);
        make_msg(buf, (size_t)o->size, (uint64_t)i, now_ns());
        if (d->push(c, buf, (size_t)o->size) != 0) {
            atomic_store(&x.failed, 1);
            break;
        }
        sent++;
    }
    /* Let the consumer catch up with what was sent, within the cap. */
    while (atomic_load(&x.received) < sent && !atomic_load(&x.failed) && qb_now() < x.deadline)
        qb_sleep_us(1000);
    atomic_store(&x.stop, 1);
    pthread_join(th, NULL);
    if (c != NULL)
        d->disconnect(c);
    pthread_barrier_destroy(&x.start);

    int rc = -1;
    long warm = x.n / 10 < 100 ? x.n / 10 : 100, k = 0;
    double *v = malloc(sizeof(double) * (size_t)x.n);
    for (long i = warm; v != NULL && i < x.n; i++) {
        if (isfinite(x.samples[i]))
            v[k++] = x.samples[i];
    }
    if (!atomic_load(&x.failed) && k > 0) {
        qsort(v, (size_t)k, sizeof(double), cmp_ms);
        out->v1 = v[(long)((double)(k - 1) * 0.50)];
        out->v2 = v[(long)((double)(k - 1) * 0.99)];
        out->ops = 2 * sent;
        out->partial = k < x.n - warm;
        rc = 0;
    } else {
        fprintf(stderr, "qbench: %s: latency run failed (%ld sent, %ld received)\n", d->name,
                sent, atomic_load(&x.received));
    }
    free(v);
    free(x.samples);
    free(buf);
    return rc;
}

/* The disk's own sync rate: 4 KiB writes into a preallocated (written and synced) 16 MiB file,
 * each followed by fdatasync, for up to `seconds` (2; 1 with --quick) or 100,000 writes. */
static int disk_sync_rate(double *out, const char *dir, double seconds)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/fsync-test.dat", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror("qbench: disk test");
        return -1;
    }
    static uint8_t block[4096];
    enum { BLOCKS = 4096 };
    int rc = -1;
    memset(block, 0, sizeof(block));
    for (int i = 0; i < BLOCKS; i++) {
        if (pwrite(fd, block, sizeof(block), (off_t)i * 4096) != (ssize_t)sizeof(block))
            goto done;
    }
    if (fsync(fd) != 0)
        goto done;
    memset(block, 'x', sizeof(block));
    long n = 0;
    double t0 = qb_now(), t = t0;
    while (n < 100000 && t - t0 < seconds) {
        if (pwrite(fd, block, sizeof(block), (off_t)(n % BLOCKS) * 4096) != (ssize_t)sizeof(block) ||
            fdatasync(fd) != 0)
            goto done;
        n++;
        t = qb_now();
    }
    *out = (double)n / (t - t0);
    rc = 0;
done:
    if (rc != 0)
        perror("qbench: disk test");
    close(fd);
    unlink(path);
    return rc;
}

/* ---- the comparison -------------------------------------------------------------------------- */

static const qb_driver *driver_of(int sys)
{
    switch (sys) {
    case QB_SYS_BEANSTALKD:
        return &qb_beanstalkd_driver;
    case QB_SYS_REDIS:
    case QB_SYS_REDIS_EVERYSEC:
        return &qb_redis_driver;
    case QB_SYS_POSTGRES:
        return &qb_postgres_driver;
    case QB_SYS_SQLITE:
        return &qb_sqlite_driver;
    default:
        /* kvq's rows, on either storage */
        return qb_system_is_kvq(sys) ? &qb_kvq_driver : NULL;
    }
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    if (remove(path) != 0 && errno != ENOENT)
        fprintf(stderr, "qbench: cannot remove %s: %s\n", path, strerror(errno));
    return 0;
}

static void remove_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static double g_deadline; /* the whole comparison's */
static qb_pipeline *g_pipeline; /* shared with forked clients (main maps it) */
static double g_cap;      /* the cap of this run's phases (o->cap_s, or less when time is short) */
static double g_capped_s; /* time this run spent in phases that stopped at their cap */

/* The time a workload run may take: its cap, less whatever the budget no longer has. Returns 0
 * when too little is left to start one. */
static double time_for_run(const qb_options *o)
{
    (void)o;
    double left = g_deadline - qb_now() - 10.0;
    double t = left < g_cap ? left : g_cap;
    return t < 2.0 ? 0.0 : t;
}

static void run_one(qb_results *r, const qb_options *o, int sys, char wl, int run)
{
    const qb_driver *d = driver_of(sys);
    if (d == NULL)
        return;
    int batch_wl = wl == 'c';
    if (batch_wl && (d->push_batch == NULL || d->pop_batch == NULL)) {
        qb_results_unsupported(r, sys, QB_C_PUSH);
        qb_results_unsupported(r, sys, QB_C_POP);
        qb_results_unsupported(r, sys, QB_C_CONC);
        return;
    }
    /* Separate processes only change (b) and (c) concurrent; the rest is the threads row. Both
     * storages have the same rows. */
    int base = qb_system_kvq_base(sys);
    int processes = base == QB_SYS_KVQ_PROC || base == QB_SYS_KVQ_PROC2X;
    /* The 2x row: twice the producers and consumers, (b) only (does throughput hold?). */
    qb_options o2x;
    if (base == QB_SYS_KVQ_PROC2X) {
        if (wl != 'b')
            return;
        o2x = *o;
        o2x.producers *= 2;
        o2x.consumers *= 2;
        o = &o2x;
    }
    if (processes && (wl == 'a' || wl == 'd'))
        return;
    for (int part = 0; part < 2; part++) {
        /* (a), (b) and (d) are one part each; (c) is sequential, then concurrent. */
        if (part == 1 && wl != 'c')
            break;
        if (processes && wl == 'c' && part == 0)
            continue;
        double cap = time_for_run(o);
        if (cap <= 0) {
            fprintf(stderr, "qbench: out of time budget: skipping %s (%c) run %d\n",
                    qb_system_names[sys], wl, run);
            return;
        }
        qb_setup su;
        memset(&su, 0, sizeof(su));
        su.opt = o;
        su.sys = sys;
        su.run = run;
        su.workload = wl;
        su.low_latency = wl == 'd';
        su.processes = processes;
        su.pipeline = g_pipeline;
        if (g_pipeline != NULL)
            memset(g_pipeline, 0, sizeof(*g_pipeline));
        snprintf(su.path, sizeof(su.path), "%s/%s-%c%d-r%d", o->dir, qb_system_names[sys], wl,
                 part, run);
        if (o->dir[0] != '\0' && mkdir(su.path, 0700) != 0 && errno != EEXIST) {
            fprintf(stderr, "qbench: mkdir %s: %s\n", su.path, strerror(errno));
            return;
        }
        void *state = NULL;
        wl_result res;
        memset(&res, 0, sizeof(res));
        int rc = d->setup(&state, &su);
        int batch = batch_wl ? o->batch : 1;
        const char *what = "";
        double t0 = qb_now();
        if (rc == 0) {
            if (wl == 'a' || (wl == 'c' && part == 0)) {
                what = wl == 'a' ? "(a) sequential" : "(c) sequential batches";
                rc = run_sequential(&res, d, state, o, batch, cap);
            } else if (wl == 'd') {
                what = "(d) latency";
                rc = run_latency(&res, d, state, o, cap);
            } else {
                what = wl == 'b' ? "(b) concurrent" : "(c) concurrent batches";
                rc = run_concurrent(&res, d, state, o, batch, cap, processes);
            }
            d->teardown(state);
        }
        /* A phase that stopped at its cap takes time in proportion to the cap; the others
         * take what their messages take. The next run's cap is planned from both. */
        if (rc == 0 && res.partial)
            g_capped_s += qb_now() - t0;
        if (o->dir[0] != '\0')
            remove_tree(su.path);
        if (rc != 0) {
            fprintf(stderr, "qbench: %s %s run %d failed\n", qb_system_names[sys], what, run);
            continue;
        }
        if (g_pipeline != NULL && qb_system_is_kvq(sys) && res.ops > 0) {
            unsigned long long cm = __atomic_load_n(&g_pipeline->commits, __ATOMIC_SEQ_CST),
                               sy = __atomic_load_n(&g_pipeline->syncs, __ATOMIC_SEQ_CST),
                               cf = __atomic_load_n(&g_pipeline->conflicts, __ATOMIC_SEQ_CST);
            double cps = sy > 0 ? (double)cm / (double)sy : NAN;
            double cpo = (double)cf / (double)res.ops;
            int m1 = wl == 'a' ? QB_A_PUSH : wl == 'd' ? QB_D_P50 : wl == 'b' ? QB_B
                     : part == 0 ? QB_C_PUSH : QB_C_CONC;
            qb_results_add_pipeline(r, sys, m1, cps, cpo);
            if (m1 == QB_A_PUSH || m1 == QB_D_P50 || m1 == QB_C_PUSH)
                qb_results_add_pipeline(r, sys, m1 + 1, cps, cpo);
            fprintf(stderr, "  %-14s %-24s %.2f commits per sync, %.4f conflicts per op\n",
                    qb_system_names[sys], what, cps, cpo);
        }
        if (wl == 'a') {
            qb_results_add(r, sys, QB_A_PUSH, res.v1, res.partial);
            qb_results_add(r, sys, QB_A_POP, res.v2, res.partial);
            fprintf(stderr, "  %-14s %-24s push %9.0f/s  pop %9.0f/s%s  (%.1f s)\n",
                    qb_system_names[sys], what, res.v1, res.v2, res.partial ? " partial" : "",
                    qb_now() - t0);
        } else if (wl == 'c' && part == 0) {
            qb_results_add(r, sys, QB_C_PUSH, res.v1, res.partial);
            qb_results_add(r, sys, QB_C_POP, res.v2, res.partial);
            fprintf(stderr, "  %-14s %-24s push %9.0f/s  pop %9.0f/s%s  (%.1f s)\n",
                    qb_system_names[sys], what, res.v1, res.v2, res.partial ? " partial" : "",
                    qb_now() - t0);
        } else if (wl == 'd') {
            qb_results_add(r, sys, QB_D_P50, res.v1, res.partial);
            qb_results_add(r, sys, QB_D_P99, res.v2, res.partial);
            fprintf(stderr, "  %-14s %-24s p50 %.3f ms  p99 %.3f ms%s  (%.1f s)\n",
                    qb_system_names[sys], what, res.v1, res.v2, res.partial ? " partial" : "",
                    qb_now() - t0);
        } else {
            qb_results_add(r, sys, wl == 'b' ? QB_B : QB_C_CONC, res.v1, res.partial);
            fprintf(stderr, "  %-14s %-24s %9.0f ops/s%s  (%.1f s)\n", qb_system_names[sys],
                    what, res.v1, res.partial ? " partial" : "", qb_now() - t0);
        }
    }
}

/* One sample of the disk's sync rate, recorded as a run of the disk row. */
static void sample_disk(qb_results *r, const qb_options *o, const char *when)
{
    double rate;
    if (!(o->systems & (1u << QB_SYS_DISK)) || time_for_run(o) <= 0)
        return;
    if (disk_sync_rate(&rate, o->dir, o->quick ? 1.0 : 2.0) == 0) {
        qb_results_add(r, QB_SYS_DISK, QB_A_PUSH, rate, 0);
        fprintf(stderr, "  %-14s %-24s %9.0f fdatasync/s\n", "disk", when, rate);
    }
}

/* The memory rows of one storage's durable queue (sys: QB_SYS_KVQ or QB_SYS_KVQ_SQLITE). */
static void run_memory(qb_results *r, const qb_options *o, int sys)
{
    double left = g_deadline - qb_now() - 10.0;
    if (left < 30.0) {
        fprintf(stderr, "qbench: out of time budget: skipping %s's memory row\n",
                qb_system_names[sys]);
        return;
    }
    /* At most a quarter of the budget: the runs matter more. */
    double limit = o->budget_s / 4.0 < left ? o->budget_s / 4.0 : left;
    char path[600];
    snprintf(path, sizeof(path), "%s/%s-memory", o->dir, qb_system_names[sys]);
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "qbench: mkdir %s: %s\n", path, strerror(errno));
        return;
    }
    double t0 = qb_now();
    qb_memory m;
    int rc = qb_kvq_memory(&m, o, sys, path, t0 + limit);
    remove_tree(path);
    if (rc != 0) {
        fprintf(stderr, "qbench: %s memory row failed\n", qb_system_names[sys]);
        return;
    }
    r->mem_item_bytes = m.item_bytes;
    qb_results_add_memory(r, sys, QB_MEM_ONE, m.one);
    qb_results_add_memory(r, sys, QB_MEM_MANY, m.many);
    fprintf(stderr,
            "  %-14s %-24s %.2f bytes per live byte (1 process, open + first read %.2f s); "
            "%.2f mean, %.2f max (%d processes, slowest open %.2f s); %ld items of %ld bytes "
            "queued in %.1f s  (%.1f s)\n",
            qb_system_names[sys],
            qb_system_is_sqlite(sys) ? "memory" : "memory, after the push", m.one, m.open_one_s,
            m.many, m.many_max, o->mem_procs, m.open_many_s, o->mem_items, m.item_bytes,
            m.fill_s, qb_now() - t0);
    if (qb_system_is_sqlite(sys))
        return;
    if (!m.past) {
        fprintf(stderr, "qbench: %s memory past the window not measured\n",
                qb_system_names[sys]);
        return;
    }
    qb_results_add_memory(r, sys, QB_MEM_ONE_PAST, m.one_past);
    qb_results_add_memory(r, sys, QB_MEM_MANY_PAST, m.many_past);
    char table[48] = "not known";
    if (m.table_live != ~0ULL)
        snprintf(table, sizeof(table), "%.1f MB", (double)m.table_live / 1e6);
    fprintf(stderr,
            "  %-14s %-24s %.4f bytes per live byte (1 process, open + first read %.2f s); "
            "%.4f mean, %.4f max (%d processes, slowest open %.2f s); the window at the wait's "
            "open: %llu keys, %.1f MB of map; the table held every item %.1f s later (the map "
            "then %.1f KB; the table's pages in use %s)\n",
            qb_system_names[sys], "memory, past the window", m.one_past, m.open_one_past_s,
            m.many_past, m.many_past_max, o->mem_procs, m.open_many_past_s, m.window_keys,
            (double)m.window_map_bytes / 1e6, m.wait_s, (double)m.map_bytes_after / 1e3, table);
}

static int self_test(void);

static int load_and_print(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "qbench: %s: %s\n", path, strerror(errno));
        return 1;
    }
    static qb_results r;
    char err[256];
    int rc = qb_results_load(&r, f, err, sizeof(err));
    fclose(f);
    if (rc != 0) {
        fprintf(stderr, "qbench: %s: %s\n", path, err);
        return 1;
    }
    return qb_write_table(stdout, &r) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    static qb_options o;
    char err[512];
    qb_options_init(&o);
    if (qb_parse_args(&o, argc, argv, err, sizeof(err)) != 0) {
        fprintf(stderr, "qbench: %s\n", err);
        return 2;
    }
    if (o.help) {
        qb_usage(stdout);
        return 0;
    }
    if (o.self_test)
        return self_test();
    if (o.free_port)
        return print_free_port();
    if (o.table_from[0] != '\0')
        return load_and_print(o.table_from);
    signal(SIGPIPE, SIG_IGN);
    if (o.dry_run) {
        printf("runs %d, %ld messages of %d bytes (latency: %ld at %.0f/s), batch %d, %dP+%dC, "
               "budget %.0f s, cap %.0f s\nsystems:",
               o.runs, o.n, o.size, o.latency_n, o.rate, o.batch, o.producers, o.consumers,
               o.budget_s, o.cap_s);
        for (int s = 0; s < QB_NSYS; s++) {
            if (o.systems & (1u << s))
                printf(" %s", qb_system_names[s]);
        }
        printf("\nworkloads:");
        for (int w = 0; w < 4; w++) {
            if (o.workloads & (1u << w))
                printf(" %c", 'a' + w);
        }
        if (o.workloads & QB_WL_M)
            printf(" m (%ld items, 1 and %d processes)", o.mem_items, o.mem_procs);
        printf("\n");
        return 0;
    }
    g_deadline = qb_now() + o.budget_s;
    /* The kvq rows choose their storage by URL: an inherited $KVQ_STORAGE would turn the default
     * storage's rows into SQLite storage rows. */
    if (getenv("KVQ_STORAGE") != NULL) {
        fprintf(stderr,
                "qbench: ignoring KVQ_STORAGE=%s (the kvq-sqlite rows are the SQLite storage)\n",
                getenv("KVQ_STORAGE"));
        unsetenv("KVQ_STORAGE");
    }

    static qb_results r;
    qb_results_init(&r, &o);
    void *pm = mmap(NULL, sizeof(qb_pipeline), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                    -1, 0);
    g_pipeline = pm == MAP_FAILED ? NULL : pm;
    for (int s = 0; s < QB_NSYS; s++) {
        const qb_driver *d = driver_of(s);
        if ((o.systems & (1u << s)) && d != NULL && d->version != NULL)
            d->version(r.version[s], sizeof(r.version[s]), &o, s);
    }
    /* The memory rows first, once: they do not change from run to run, and their minute must
     * not count in the first run's time, from which the later runs' caps are planned. */
    static const int mem_rows[2] = { QB_SYS_KVQ, QB_SYS_KVQ_SQLITE };
    for (int k = 0; k < 2 && (o.workloads & QB_WL_M); k++) {
        if (o.systems & (1u << mem_rows[k]))
            run_memory(&r, &o, mem_rows[k]);
    }
    /* Runs outermost, so that a slow spell of this shared machine spreads over every system
     * rather than landing on one. */
    double last_run_s = 0, last_capped_s = 0, last_cap = o.cap_s;
    for (int run = 1; run <= o.runs; run++) {
        double run_start = qb_now();
        /* When the last run shows that the rest will not fit (a slow disk, a busy machine),
         * shorten the caps of the rest rather than drop the last systems' runs. The last run
         * took fixed + capped seconds, where only `capped` (its phases that stopped at their
         * cap) shrinks with the cap: choose the cap that makes fixed + capped × cap / last_cap
         * fit this run's share of what is left, with a tenth to spare for a slower spell. */
        g_cap = o.cap_s;
        double share = 0.9 * (g_deadline - run_start - 15.0) / (double)(o.runs - run + 1);
        double fixed = last_run_s - last_capped_s;
        if (run > 1 && fixed + last_capped_s * o.cap_s / last_cap > share) {
            g_cap = last_capped_s > 0 && share > fixed
                        ? last_cap * (share - fixed) / last_capped_s
                        : 2.0;
            if (g_cap > o.cap_s)
                g_cap = o.cap_s;
            if (g_cap < 2.0)
                g_cap = 2.0;
        }
        g_capped_s = 0;
        fprintf(stderr, "run %d of %d (%.0f s of budget left; phases capped at %.1f s)\n", run,
                o.runs, g_deadline - run_start, g_cap);
        sample_disk(&r, &o, "(start of run)");
        for (int s = 0; s < QB_NSYS; s++) {
            if (s == QB_SYS_DISK || !(o.systems & (1u << s)))
                continue;
            for (int w = 0; w < 4; w++) {
                if (o.workloads & (1u << w))
                    run_one(&r, &o, s, (char)('a' + w), run);
            }
        }
        /* Again at the end: on a shared machine the disk's rate drifts over a run's minutes,
         * and the median of both ends is a fairer ceiling for what ran in between. */
        sample_disk(&r, &o, "(end of run)");
        last_run_s = qb_now() - run_start;
        last_capped_s = g_capped_s;
        last_cap = g_cap;
    }
    if (o.raw[0] != '\0') {
        FILE *f = fopen(o.raw, "w");
        if (f == NULL || qb_results_save(&r, f) != 0)
            fprintf(stderr, "qbench: cannot write %s\n", o.raw);
        if (f != NULL)
            fclose(f);
    }
    return qb_write_table(stdout, &r) == 0 ? 0 : 1;
}

/* ---- self-test: the table code on canned figures, no servers --------------------------------- */

static int self_test(void)
{
    int passed = 0, failed = 0;
#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (cond) {                                                                 \
            passed++;                                                               \
        } else {                                                                    \
            failed++;                                                               \
            fprintf(stderr, "self-test: %s:%d: %s failed\n", __FILE__, __LINE__, #cond); \
        }                                                                           \
    } while (0)
    static qb_options o;
    char err[256];
    qb_options_init(&o);
    char *args1[] = { "qbench", "--quick", "--runs", "5", "--dir", "/tmp/x", "--redis",
                      "127.0.0.1:6390", NULL };
    CHECK(qb_parse_args(&o, 8, args1, err, sizeof(err)) == 0);
    CHECK(o.runs == 5 && o.n == 5000 && o.latency_n == 1000 && o.redis.port == 6390);
    CHECK((o.systems & (1u << QB_SYS_BEANSTALKD)) == 0 && (o.systems & (1u << QB_SYS_REDIS)));
    qb_options_init(&o);
    char *args2[] = { "qbench", "--redis", "10.0.0.1:6379", NULL };
    CHECK(qb_parse_args(&o, 3, args2, err, sizeof(err)) == -1);

    static qb_results r;
    qb_options_init(&o);
    qb_results_init(&r, &o);
    for (int run = 0; run < 3; run++) {
        qb_results_add(&r, QB_SYS_DISK, QB_A_PUSH, 7000 + run, 0);
        for (int m = 0; m < QB_NMETRICS; m++) {
            qb_results_add(&r, QB_SYS_SQLITE, m, 1000.0 * (m + 1) + run, 0);
            qb_results_add(&r, QB_SYS_KVQ, m, 1500.0 * (m + 1) + run, 0);
        }
    }
    snprintf(r.version[QB_SYS_SQLITE], sizeof(r.version[0]), "3.40.1");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f != NULL && qb_write_table(f, &r) == 0);
    if (f != NULL)
        fclose(f);
    CHECK(text != NULL && qb_check_markdown(text, err, sizeof(err)) == 0);
    CHECK(text != NULL && strstr(text, "SQLite 3.40.1") != NULL);
    CHECK(text != NULL && strstr(text, "1.50× SQLite") != NULL);
    if (failed == 0)
        fputs(text, stdout);
    free(text);
    printf("self-test: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
#undef CHECK
}
