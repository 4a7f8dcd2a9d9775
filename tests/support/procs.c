/* The spawn-and-kill loops of the crash campaigns (TESTING.md S4): processes are killed with
 * SIGKILL at random moments and started again. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvq_test.h"

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
    for (int c = 0; c < cycles && !failed; c++) {
        usleep((useconds_t)(50000 + rand_r(&l->seed) % 200000));
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
