/* Checkpoints and the bound on the WAL.
 *
 * The group-commit leader checkpoints after the commit that takes the WAL past CKPT_PAGES, as
 * SQLite's automatic checkpoint would (a passive checkpoint: it blocks nobody, and costs the
 * leader about a millisecond per thousand pages). Running it on a separate thread was measured to
 * halve commit throughput: the WAL then restarted only every few thousand pages, so commits kept
 * extending the file, and a sync that extends a file costs more than one that overwrites it.
 *
 * A passive checkpoint cannot finish while an older reader needs frames; if readers keep it from
 * finishing and the WAL passes CKPT_HARD_PAGES, the leader tries to truncate the WAL without
 * waiting (it holds kvq's commit lock: waiting on a reader would stall every commit). A reader
 * stops holding the WAL back when its transaction ends, resets, or is next used after its 5
 * seconds (its snapshot is then released with transaction_too_old), and a later commit's
 * checkpoint catches up. */
#include "emb.h"

/* Pages of WAL (4 KiB each by default) that trigger a checkpoint, and the hard bound. */
#define CKPT_PAGES      1000
#define CKPT_HARD_PAGES 16384

static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    emb_db *e = arg;
    if (pages < CKPT_PAGES)
        return SQLITE_OK;
    int log = 0, done = 0;
    int src = sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
    __atomic_add_fetch(&e->n_checkpoints, 1, __ATOMIC_RELAXED);
    if ((src == SQLITE_OK && done >= log) || pages < CKPT_HARD_PAGES)
        return SQLITE_OK;
    /* Past the hard bound: truncate the WAL if no reader needs it, but never wait for one. The
     * leader holds the commit lock here, so waiting would stall every commit of every process
     * for as long as one idle transaction keeps its snapshot. */
    sqlite3_busy_timeout(db, 0);
    sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_TRUNCATE, &log, &done);
    sqlite3_busy_timeout(db, EMB_BUSY_TIMEOUT_MS);
    __atomic_add_fetch(&e->n_checkpoints, 1, __ATOMIC_RELAXED);
    return SQLITE_OK;
}

int emb_ckpt_start(emb_db *e)
{
    if (e->opts.flags & KVQ_DB_READ_ONLY)
        return 0;
    sqlite3_wal_hook(e->writer, wal_hook, e);
    return 0;
}

void emb_ckpt_stop(emb_db *e)
{
    if (e->writer == NULL || (e->opts.flags & KVQ_DB_READ_ONLY))
        return;
    sqlite3_wal_hook(e->writer, NULL, NULL);
    /* A last passive checkpoint keeps the WAL small between runs. */
    int log = 0, done = 0;
    sqlite3_wal_checkpoint_v2(e->writer, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
}
