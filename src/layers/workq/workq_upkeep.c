/* The work queue's upkeep calls (kvq/workq.h): the passes themselves are the queue's
 * (layers/queue/due.c), since every reader of the queue runs them too. */
#include "kvq/workq_batch.h"
#include "layers/workq/workq_internal.h"

int kvq_workq_ready_due(uint64_t *out, kvq_workq *w)
{
    int rc = kvq__wq_check(w, NULL, 0, "kvq_workq_ready_due");
    if (rc != 0)
        return rc;
    if (out != NULL)
        *out = 0;
    /* What every reader does when it finds something due: a read-only look, and passes only
     * while something is due. */
    return kvq__wq_passes_while_due(w, 1, out);
}

int kvq_workq_recover(uint64_t *out, kvq_workq *w)
{
    int rc = kvq__wq_check(w, NULL, 0, "kvq_workq_recover");
    if (rc != 0)
        return rc;
    if (out != NULL)
        *out = 0;
    return kvq__wq_recover_all(w, out);
}
