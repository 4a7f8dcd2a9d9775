/* The spawn-and-kill loops of the crash campaigns (TESTING.md S4): processes are killed with
 * SIGKILL at random moments and started again. */
#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvq_test.h"

/* The bytes of the loop's progress files (kt_kill_loop.progress_dir, progress_prefixes). */
static long long progress_bytes(const kt_kill_loop *l)
{
    DIR *d = opendir(l->progress_dir);
    if (d == NULL)
        return -1;
    long long sum = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int match = 0;
        for (const char *p = l->progress_prefixes; p != NULL && *p != '\0' && !match;) {
            const char *bar = strchr(p, '|');
            size_t n = bar != NULL ? (size_t)(bar - p) : strlen(p);
            match = n > 0 && strncmp(e->d_name, p, n) == 0;
            p = bar != NULL ? bar + 1 : NULL;
        }
        struct stat st;
        if (match && fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode))
            sum += (long long)st.st_size;
    }
    closedir(d);
    return sum;
}

/* Sleeps a cycle's span, and longer while the progress files have not grown past *seen: up to
 * 8 spans in every build (a loaded machine can take longer than a span to start a process and
 * open its database, and a campaign whose processes never got a commit in proves nothing), or
 * kvq_test_time_factor() spans in slow builds when that is more. */
static void cycle_sleep(const kt_kill_loop *l, useconds_t span, long long *seen)
{
    usleep(span);
    if (l->progress_dir == NULL || l->progress_prefixes == NULL)
        return;
    long long now = progress_bytes(l);
    long factor = kvq_test_time_factor() > 8 ? kvq_test_time_factor() : 8;
    long most = (long)span * factor;
    for (long waited = (long)span; now == *seen && waited < most; waited += 10000) {
        usleep(10000);
        now = progress_bytes(l);
    }
    *seen = now;
}

/* Kills and reaps one process. Returns its exit status when it had exited by itself (-1 when
 * it ended some other way than SIGKILL or an exit), else 0; *by_itself says which. */
static int kill_reap(pid_t pid, int *by_itself)
{
    kill(pid, SIGKILL);
    int status = 0;
    *by_itself = 0;
    if (waitpid(pid, &status, 0) != pid)
        return 0;
    if (WIFSIGNALED(status))
        return 0;
    *by_itself = 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int kt_kill_campaign(kt_kill_loop *l, int cycles, int check_end)
{
    if (l == NULL || l->pids == NULL || l->n <= 0 || l->spawn == NULL)
        return -1;
    for (int i = 0; i < l->n; i++)
        l->pids[i] = l->spawn(i, l->arg);
    int failed = 0;
    unsigned one_in = l->one_in > 0 ? l->one_in : 1;
    long long seen = l->progress_dir != NULL ? progress_bytes(l) : 0;
    for (int c = 0; c < cycles && !failed; c++) {
        cycle_sleep(l, (useconds_t)(50000 + rand_r(&l->seed) % 200000), &seen);
        int all = l->all_every > 0 && c % l->all_every == l->all_every - 1;
        int victim = l->one_victim ? (int)(rand_r(&l->seed) % (unsigned)l->n) : -1;
        for (int i = 0; i < l->n; i++) {
            if (!all && i != victim && rand_r(&l->seed) % one_in != 0)
                continue;
            int by_itself;
            int st = kill_reap(l->pids[i], &by_itself);
            /* A process that exited by itself found an error. */
            if (by_itself)
                failed = st;
            l->kills++;
            l->pids[i] = l->spawn(i, l->arg);
        }
    }
    for (int i = 0; i < l->n; i++) {
        int by_itself;
        int st = kill_reap(l->pids[i], &by_itself);
        if (by_itself && check_end && failed == 0)
            failed = st;
    }
    return failed;
}

int kt_writef(int fd, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n <= 0 || (size_t)n >= sizeof(line))
        return -1;
    return write(fd, line, (size_t)n) == n ? 0 : -1;
}
