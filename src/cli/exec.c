/* consume --exec: runs the command for one item, so that it never outlives kvq.
 *
 * The command runs as /bin/sh -c CMD in a process group of its own, under a small keeper process
 * (a fork of kvq that does not exec) in kvq's own process group:
 * - the keeper asks the kernel for a signal when kvq dies (PR_SET_PDEATHSIG), even by SIGKILL,
 *   and then kills the command's whole group, so that a killed consume never leaves a command
 *   running on an item that will be delivered again (the job would run twice);
 * - signals that reach kvq's process group from the terminal (Ctrl-C) reach the keeper, which
 *   forwards them to the command's group when asked to (at least once: the item goes back) or
 *   lets the command finish (at most once: the item was popped and is still handed over);
 * - the keeper exits as the command did (its status, or its signal), so that kvq sees the
 *   command's own end.
 * Between fork and exec only async-signal-safe calls are made (kvq has threads). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"

extern char **environ;

/* The keeper's state (its own copy after fork; the parent never changes them). */
static volatile pid_t keeper_group;
static volatile sig_atomic_t keeper_forward;

static void keeper_on_signal(int sig)
{
    if (keeper_group <= 0)
        return;
    if (sig == SIGUSR1) {
        kill(-keeper_group, SIGKILL); /* kvq died */
        return;
    }
    if (keeper_forward)
        kill(-keeper_group, sig);
}

static const char *const env_names[] = { "KVQ_QUEUE=", "KVQ_DELIVERIES=", "KVQ_LEASE=",
                                         "KVQ_WORKER=", "KVQ_DB=" };
#define N_ENV (sizeof(env_names) / sizeof(env_names[0]))

/* The command's environment: kvq's, with the item's variables set (built before fork). */
static char **make_env(const cli_exec_item *it, char *own[N_ENV])
{
    size_t n = 0;
    while (environ[n] != NULL)
        n++;
    char **env = calloc(n + N_ENV + 1, sizeof(*env));
    if (env == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int ours = 0;
        for (size_t j = 0; j < N_ENV; j++)
            ours |= strncmp(environ[i], env_names[j], strlen(env_names[j])) == 0;
        if (!ours)
            env[k++] = environ[i];
    }
    char num[32];
    const char *vals[N_ENV] = { it->queue, NULL, it->token, NULL, it->db_url };
    for (size_t j = 0; j < N_ENV; j++) {
        own[j] = NULL;
        const char *v = vals[j];
        if (j == 1 || j == 3) {
            snprintf(num, sizeof(num), "%ld", j == 1 ? (long)it->deliveries : (long)it->worker);
            v = num;
        }
        if (v == NULL)
            continue;
        size_t len = strlen(env_names[j]) + strlen(v) + 1;
        own[j] = malloc(len);
        if (own[j] == NULL)
            continue;
        snprintf(own[j], len, "%s%s", env_names[j], v);
        env[k++] = own[j];
    }
    env[k] = NULL;
    return env;
}

/* The keeper, in the child of fork: never returns. */
static void keeper(pid_t parent, int in_fd, const char *cmd, char **env, int forward, int maxfd)
{
    struct rlimit no_core = { 0, 0 };
    setrlimit(RLIMIT_CORE, &no_core); /* the keeper re-raises the command's signal */
    keeper_forward = forward;
    keeper_group = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = keeper_on_signal;
    sigemptyset(&sa.sa_mask);
    int sigs[] = { SIGUSR1, SIGINT, SIGTERM, SIGHUP, SIGQUIT };
    /* Handlers first, with the signals blocked; they act once the group exists. */
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaction(sigs[i], &sa, NULL);
    prctl(PR_SET_PDEATHSIG, SIGUSR1);
    if (getppid() != parent)
        _exit(127); /* kvq is already gone: run nothing */
    if (dup2(in_fd, STDIN_FILENO) < 0)
        _exit(127);
    if (close_range(3, ~0U, 0) != 0)
        for (int fd = 3; fd < maxfd; fd++)
            close(fd);
    pid_t pid = fork();
    if (pid < 0)
        _exit(127);
    if (pid == 0) {
        setpgid(0, 0);
        struct sigaction dfl;
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
            sigaction(sigs[i], &dfl, NULL);
        sigaction(SIGPIPE, &dfl, NULL);
        prctl(PR_SET_PDEATHSIG, 0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        char *const argv[] = { "sh", "-c", (char *)cmd, NULL };
        execve("/bin/sh", argv, env);
        _exit(127);
    }
    setpgid(pid, pid); /* as the child does, whichever runs first */
    keeper_group = pid;
    close(STDIN_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (getppid() != parent)
        kill(-pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            _exit(127);
    }
    if (WIFEXITED(status))
        _exit(WEXITSTATUS(status));
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    kill(getpid(), sig);
    _exit(128 + sig);
}

int cli_exec_run(const char *cmd, const cli_exec_item *it, int *status, int *took_all)
{
    *status = -1;
    *took_all = 0;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    char *own[N_ENV];
    char **env = make_env(it, own);
    if (env == NULL) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    struct rlimit lim;
    int maxfd = getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 65536 ? (int)lim.rlim_cur
                                                                             : 65536;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        keeper(parent, fds[0], cmd, env, it->forward_signals, maxfd);
    close(fds[0]);
    for (size_t j = 0; j < N_ENV; j++)
        free(own[j]);
    free(env);
    if (pid < 0) {
        close(fds[1]);
        return -1;
    }
    /* The item, then what pop prints after it (a newline, or a NUL with -0) unless --raw. */
    int ok = 1;
    const uint8_t *parts[2] = { it->value.data, (const uint8_t *)&it->end };
    size_t lens[2] = { it->value.len, it->raw ? 0 : 1 };
    for (int p = 0; p < 2 && ok; p++) {
        size_t off = 0;
        while (off < lens[p]) {
            ssize_t n = write(fds[1], parts[p] + off, lens[p] - off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                ok = 0; /* the command did not read it all */
                break;
            }
            off += (size_t)n;
        }
    }
    close(fds[1]);
    *took_all = ok;
    while (waitpid(pid, status, 0) < 0) {
        if (errno != EINTR) {
            *status = -1;
            return -1;
        }
    }
    return ok && WIFEXITED(*status) && WEXITSTATUS(*status) == 0 ? 0 : -1;
}

void cli_exec_describe(int status, int took_all, char *buf, size_t cap)
{
    if (status == -1)
        snprintf(buf, cap, "could not be started");
    else if (WIFSIGNALED(status))
        snprintf(buf, cap, "was killed by signal %d (%s)", WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        snprintf(buf, cap, "exited with status 127 (command not found?)");
    else if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
        snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
    else if (!took_all)
        snprintf(buf, cap, "exited with status 0 without reading the whole item");
    else
        snprintf(buf, cap, "succeeded");
}
