/* consume --exec: runs the command for one item, so that it never outlives kvq.
 *
 * The command runs as /bin/sh -c CMD, started with posix_spawn (no copy of kvq's memory), in a
 * process group that all of one consume's commands share and that two small helper processes,
 * forked once by cli_exec_start, look after:
 * - the anchor leads that group (so that it exists while no command runs) and only waits;
 * - the keeper, in kvq's own process group, asks the kernel for a signal when kvq dies
 *   (PR_SET_PDEATHSIG), even by SIGKILL, and then kills the commands' whole group, so that a
 *   killed consume never leaves a command running on an item that will be delivered again (the
 *   job would run twice); signals that reach kvq's process group from the terminal (Ctrl-C)
 *   reach the keeper too, which forwards them to the commands' group when asked to (at least
 *   once: the item goes back) or lets the commands finish (at most once: the item was popped and
 *   is still handed over).
 * kvq waits for each command itself, so it sees the command's own end. Until 2026-12 a keeper
 * was forked per command, and that fork of kvq cost more than the job (issue 32 item 10); when
 * the helpers are not running (or the spawn into their group fails) that way is still taken.
 * Between fork and exec only async-signal-safe calls are made (kvq has threads). */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
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

/* ---- the shared helpers: one anchor and one keeper per consume ----------------------------- */

static pid_t shared_group; /* the anchor's pid: the commands' process group (0: none) */
static pid_t shared_keeper;

/* The shared keeper's handler: when kvq died, the commands' group goes and so does the keeper
 * (it must not outlive kvq either: it would hold kvq's standard output open). */
static void shared_keeper_on_signal(int sig)
{
    if (keeper_group <= 0)
        return;
    if (sig == SIGUSR1) {
        kill(-keeper_group, SIGKILL);
        _exit(0);
    }
    if (keeper_forward)
        kill(-keeper_group, sig);
}

/* A helper keeps none of kvq's files, its standard ones included: a reader of kvq's output must
 * see its end when kvq ends. */
static void drop_files(void)
{
    int fd = open("/dev/null", O_RDWR);
    if (fd >= 0) {
        dup2(fd, STDIN_FILENO);
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
    }
    close_range(3, ~0U, 0);
}

/* The anchor, in the child of fork: leads the commands' group and waits; only SIGKILL (from
 * the keeper, or cli_exec_stop) ends it. Never returns. */
static void anchor(pid_t parent)
{
    setpgid(0, 0);
    struct sigaction ign;
    memset(&ign, 0, sizeof(ign));
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGPIPE };
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaction(sigs[i], &ign, NULL);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(0);
    drop_files();
    for (;;)
        pause();
}

/* The shared keeper, in the child of fork: never returns. */
static void shared_keeper_main(pid_t parent, pid_t group, int forward)
{
    keeper_forward = forward;
    keeper_group = group;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = shared_keeper_on_signal;
    sigemptyset(&sa.sa_mask);
    int sigs[] = { SIGUSR1, SIGINT, SIGTERM, SIGHUP, SIGQUIT };
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaction(sigs[i], &sa, NULL);
    prctl(PR_SET_PDEATHSIG, SIGUSR1);
    if (getppid() != parent) {
        kill(-group, SIGKILL);
        _exit(0);
    }
    drop_files();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (;;)
        pause();
}

int cli_exec_start(int forward_signals)
{
    if (shared_group > 0)
        return 0;
    pid_t parent = getpid();
    /* The helpers take no signal before their handlers are set (the mask is inherited). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t a = fork();
    if (a == 0)
        anchor(parent);
    if (a > 0)
        setpgid(a, a); /* as the anchor does, whichever runs first */
    pid_t k = a > 0 ? fork() : -1;
    if (k == 0) {
        struct rlimit no_core = { 0, 0 };
        setrlimit(RLIMIT_CORE, &no_core);
        shared_keeper_main(parent, a, forward_signals);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (a < 0 || k < 0) {
        if (a > 0) {
            kill(a, SIGKILL);
            while (waitpid(a, NULL, 0) < 0 && errno == EINTR) {
            }
        }
        return -1;
    }
    shared_group = a;
    shared_keeper = k;
    return 0;
}

void cli_exec_stop(void)
{
    pid_t pids[2] = { shared_keeper, shared_group };
    shared_group = shared_keeper = 0;
    for (int i = 0; i < 2; i++) {
        if (pids[i] <= 0)
            continue;
        kill(pids[i], SIGKILL);
        while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR) {
        }
    }
}

/* A command that the shell would run as one program with plain words as its arguments is
 * started without the shell, as xargs does: the shell's start cost about as much CPU as the job
 * of a small command. That is a command of words made only of the characters below (nothing
 * the shell expands, quotes, redirects or joins), whose first word is no assignment, keyword or
 * builtin of the shell (a builtin can differ from the program of the same name). Fills argv
 * (words in buf) and returns their count, or 0: run it with the shell. */
#define MAX_WORDS 64

static int plain_words(const char *cmd, char *buf, size_t cap, char **argv)
{
    static const char *const shell_own[] = {
        "alias", "bg",      "break",   "cd",     "chdir", "command", "continue", "echo",
        "eval",  "exec",    "exit",    "export", "false", "fc",      "fg",       "getopts",
        "hash",  "jobs",    "kill",    "local",  "printf", "pwd",    "read",     "readonly",
        "return", "set",    "shift",   "test",   "[",     "times",   "trap",     "true",
        "type",  "ulimit",  "umask",   "unalias", "unset", "wait",   ".",        ":",
        "if",    "then",    "else",    "elif",   "fi",    "for",     "while",    "until",
        "do",    "done",    "case",    "esac",   "in",    "time",    NULL
    };
    size_t n = strlen(cmd);
    if (n == 0 || n >= cap)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = cmd[i];
        int plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')
                    || strchr("_-./:,+@%=", ch) != NULL || ch == ' ' || ch == '\t';
        if (!plain)
            return 0;
    }
    memcpy(buf, cmd, n + 1);
    int words = 0;
    for (char *p = buf; *p != '\0';) {
        while (*p == ' ' || *p == '\t')
            *p++ = '\0';
        if (*p == '\0')
            break;
        if (words == MAX_WORDS)
            return 0;
        argv[words++] = p;
        while (*p != '\0' && *p != ' ' && *p != '\t')
            p++;
    }
    if (words == 0 || strchr(argv[0], '=') != NULL)
        return 0;
    for (int i = 0; shell_own[i] != NULL; i++)
        if (strcmp(argv[0], shell_own[i]) == 0)
            return 0;
    argv[words] = NULL;
    return words;
}

/* Starts the command (its program directly when plain_words allows, else /bin/sh -c cmd) in the
 * shared group with in_fd as its standard input: 0 (*pid set), or -1 (nothing started). */
static int spawn_shared(pid_t *pid, const char *cmd, char **env, int in_fd)
{
    posix_spawnattr_t at;
    posix_spawn_file_actions_t fa;
    if (posix_spawnattr_init(&at) != 0)
        return -1;
    if (posix_spawn_file_actions_init(&fa) != 0) {
        posix_spawnattr_destroy(&at);
        return -1;
    }
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1 };
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaddset(&dfl, sigs[i]);
    int err = posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                POSIX_SPAWN_SETSIGDEF);
    if (err == 0)
        err = posix_spawnattr_setpgroup(&at, shared_group);
    if (err == 0)
        err = posix_spawnattr_setsigmask(&at, &none);
    if (err == 0)
        err = posix_spawnattr_setsigdefault(&at, &dfl);
    if (err == 0)
        err = posix_spawn_file_actions_adddup2(&fa, in_fd, STDIN_FILENO);
    if (err == 0)
        err = posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    char words[4096];
    char *wargv[MAX_WORDS + 1];
    int direct = err == 0 && plain_words(cmd, words, sizeof(words), wargv) > 0;
    /* A program that is not found (or cannot run) is left to the shell, which says why and
     * exits 127 as it always did. */
    if (direct && posix_spawnp(pid, wargv[0], &fa, &at, wargv, env) == 0) {
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&at);
        return 0;
    }
    char *const argv[] = { "sh", "-c", (char *)cmd, NULL };
    if (err == 0)
        err = posix_spawn(pid, "/bin/sh", &fa, &at, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    return err == 0 ? 0 : -1;
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
    pid_t pid = -1;
    if (shared_group <= 0 || spawn_shared(&pid, cmd, env, fds[0]) != 0) {
        pid = fork();
        if (pid == 0)
            keeper(parent, fds[0], cmd, env, it->forward_signals, maxfd);
    }
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
