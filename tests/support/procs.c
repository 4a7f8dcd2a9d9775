/* The spawn-and-kill loops of the crash campaigns (TESTING.md S4): processes are killed with
 * SIGKILL at random moments and started again. */
#include <signal.h>
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

int kt_kill_cycles(pid_t *pids,
                   int n,
                   int cycles,
                   const kt_kill_plan *plan,
                   unsigned *seed,
                   kt_spawn_fn spawn,
                   void *arg,
                   size_t *kills)
{
    int failed = 0;
    unsigned one_in = plan->one_in > 0 ? plan->one_in : 1;
    for (int c = 0; c < cycles && !failed; c++) {
        usleep((useconds_t)(50000 + rand_r(seed) % 200000));
        int all = plan->all_every > 0 && c % plan->all_every == plan->all_every - 1;
        int victim = plan->one_victim ? (int)(rand_r(seed) % (unsigned)n) : -1;
        for (int i = 0; i < n; i++) {
            if (!all && i != victim && rand_r(seed) % one_in != 0)
                continue;
            int by_itself;
            int st = kill_reap(pids[i], &by_itself);
            /* A process that exited by itself found an error. */
            if (by_itself)
                failed = st;
            if (kills != NULL)
                (*kills)++;
            pids[i] = spawn(i, arg);
        }
    }
    return failed;
}

int kt_kill_all(pid_t *pids, int n)
{
    int failed = 0;
    for (int i = 0; i < n; i++) {
        int by_itself;
        int st = kill_reap(pids[i], &by_itself);
        if (by_itself && failed == 0)
            failed = st;
    }
    return failed;
}
