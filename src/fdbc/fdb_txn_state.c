/* The state of a transaction that every call on it reads first, whatever file serves the call
 * (fdb_transaction.c, fdb_ranges.c, fdb_options.c): its knobs, its timeout, the error it fails
 * with before it starts, the read delay. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "fdbc/fdbc_internal.h"
#include "util/util.h"

/* $KVQ_FDBC_READ_DELAY_MS and $KVQ_FDBC_PAGE_ROWS, read as the transaction is created. */
void kvq__fdbc_knobs_read(FDBTransaction *tr)
{
    const char *env = getenv("KVQ_FDBC_READ_DELAY_MS");
    tr->read_delay_ms = env != NULL && atol(env) > 0 ? atol(env) : 0;
    env = getenv("KVQ_FDBC_PAGE_ROWS");
    tr->page_rows = env != NULL && atoi(env) > 0 ? atoi(env) : 0;
}

/* A timeout that has passed has fired, as libfdb_c's timer would have fired by now: the
 * transaction stays timed out (1031) until it is reset, whatever timeout is set afterwards. */
void kvq__fdbc_tr_timeout_check(FDBTransaction *tr)
{
    if (tr->reset_err == 0 && tr->timeout_ms > 0 &&
        kvq__mono_us() - tr->start_us >= tr->timeout_ms * 1000)
        tr->reset_err = FDB_ERR_TRANSACTION_TIMED_OUT;
}

/* The error a call fails with before it starts, as ReadYourWritesTransaction orders them: the
 * deferred error of a call that returned nothing; then, for a call that may not follow a commit
 * (`after_commit`: reads, writes, watches, the commit itself), used_during_commit (2017) once a
 * commit has been attempted, which also leaves the transaction in that state until a reset or a
 * retry; then the state of a cancelled or timed-out transaction. */
fdb_error_t kvq__fdbc_tr_error(FDBTransaction *tr, int after_commit)
{
    kvq__fdbc_tr_timeout_check(tr);
    if (tr->deferred != 0)
        return tr->deferred;
    if (after_commit && tr->commit_started) {
        if (tr->reset_err == 0)
            tr->reset_err = FDB_ERR_USED_DURING_COMMIT;
        return FDB_ERR_USED_DURING_COMMIT;
    }
    return tr->reset_err;
}

void kvq__fdbc_read_delay(const FDBTransaction *tr)
{
    long ms = tr->read_delay_ms;
    if (ms > 0) {
        struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}
