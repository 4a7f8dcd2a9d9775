/* The log store's checkpoints (store_log_internal.h): the checkpoint thread, writing a
 * checkpoint (ckpt.h) and releasing the log before it, and the reserve ckpt.reserve that keeps
 * room for the next one on a full disk. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/embedded/logstore/ckpt.h"
#include "engine/embedded/logstore/store_log_internal.h"
#include "engine/embedded/logstore/store_log.h"

/* ---- the checkpoint reserve (ckpt.reserve) ---- */

/* The bytes a checkpoint of the live data takes: 8 per item, header and trailer. */
uint64_t kvq__ls_ckpt_estimate(emb_store *s)
{
    kvq__vmap_stats st;
    kvq__vmap_rdlock(s->map);
    kvq__vmap_get_stats(s->map, &st);
    kvq__vmap_rdunlock(s->map);
    return st.live_bytes + 8 * st.live_keys + 4096;
}

uint64_t kvq__ls_reserve_size(emb_store *s)
{
    struct stat st;
    if (s->reserve_fd < 0 || fstat(s->reserve_fd, &st) != 0 || st.st_size < 0)
        return 0;
    return (uint64_t)st.st_size;
}

/* What the reserve should hold: room for a checkpoint of the live data and for one segment. */
uint64_t kvq__ls_reserve_target(emb_store *s)
{
    return kvq__ls_ckpt_estimate(s) + kvq__log_segment_bytes(s->log);
}

/* Grows the reserve to its target (a full disk stops it short: space_short then refuses what
 * would grow the data), or shrinks it when the data shrank. Off the commit path. */
static void reserve_adjust(emb_store *s)
{
    if (s->reserve_fd < 0)
        return;
    uint64_t have = kvq__ls_reserve_size(s), want = kvq__ls_reserve_target(s);
    uint64_t seg = kvq__log_segment_bytes(s->log);
    if (have < want) {
        /* a little beyond, so that it is not grown at every item */
        uint64_t to = want + want / 8;
        if (posix_fallocate(s->reserve_fd, 0, (off_t)to) != 0)
            posix_fallocate(s->reserve_fd, 0, (off_t)want);
    } else if (have > want + want / 4 + seg) {
        if (ftruncate(s->reserve_fd, (off_t)(want + want / 8)) != 0) {
            /* kept as it is: the next adjustment tries again */
        }
    }
}

/* Gives the reserve's room back to the file system, for a checkpoint or a segment that needs
 * it now. */
void kvq__ls_reserve_release(emb_store *s, uint64_t keep)
{
    if (s->reserve_fd >= 0 && kvq__ls_reserve_size(s) > keep &&
        ftruncate(s->reserve_fd, (off_t)keep) == 0)
        fdatasync(s->reserve_fd);
}

/* Gives a segment's worth of the reserve back when the reserve holds more than the next
 * checkpoint needs (its target holds one segment beyond it: a spare, or the next segment, on
 * a full disk). Returns 1 when it did. */
int kvq__ls_reserve_give_segment(emb_store *s)
{
    uint64_t have = kvq__ls_reserve_size(s), seg = kvq__log_segment_bytes(s->log);
    if (have < kvq__ls_ckpt_estimate(s) + seg)
        return 0;
    kvq__ls_reserve_release(s, have - seg);
    return 1;
}

/* ---- checkpoints ---- */

/* Writes a checkpoint of everything applied; wait: wait for another checkpointer rather than
 * leave it to it. *covered (may be NULL) gets the log position the newest checkpoint covers. */
static int do_checkpoint_locked(emb_store *s, uint64_t *covered);

int kvq__ls_do_checkpoint(emb_store *s, int wait, uint64_t *covered)
{
    /* One checkpointer per handle (the flock below does not exclude the threads of one
     * process: they share its open file), then one per database. */
    if (wait)
        pthread_mutex_lock(&s->ckpt_write_mu);
    else if (pthread_mutex_trylock(&s->ckpt_write_mu) != 0)
        return 0; /* this handle is writing one */
    int rc = 0;
    if (flock(s->ckpt_fd, wait ? LOCK_EX : LOCK_EX | LOCK_NB) == 0)
        rc = do_checkpoint_locked(s, covered);
    /* else another handle is writing one */
    pthread_mutex_unlock(&s->ckpt_write_mu);
    return rc;
}

/* kvq__ls_do_checkpoint's work, ckpt.lock held (released here). */
static int do_checkpoint_locked(emb_store *s, uint64_t *covered)
{
    pthread_mutex_lock(&s->apply_mu);
    int rc = kvq__ls_catch_up_locked(s);
    int64_t v = s->applied_version;
    uint64_t lsn = s->applied_lsn;
    pthread_mutex_unlock(&s->apply_mu);
    kvq__ckpt_info have;
    int found = 0;
    if (rc == 0)
        rc = kvq__ckpt_find(s->dir_fd, &have, &found);
    if (rc != 0 || (found && have.version >= v)) {
        if (rc == 0 && covered)
            *covered = have.lsn;
        flock(s->ckpt_fd, LOCK_UN);
        return rc;
    }
    /* Hold version v in the map while it is written. */
    pthread_mutex_lock(&s->pin_mu);
    if (v < s->floor) {
        pthread_mutex_unlock(&s->pin_mu);
        flock(s->ckpt_fd, LOCK_UN);
        return 0;
    }
    if (s->n_pins == s->cap_pins) {
        size_t cap = s->cap_pins ? s->cap_pins * 2 : 16;
        int64_t *p = kvq__realloc(s->pins, cap * sizeof *p);
        if (p == NULL) {
            pthread_mutex_unlock(&s->pin_mu);
            flock(s->ckpt_fd, LOCK_UN);
            return kvq__error(KVQ_ENOMEM, "out of memory");
        }
        s->pins = p;
        s->cap_pins = cap;
    }
    s->pins[s->n_pins++] = v;
    pthread_mutex_unlock(&s->pin_mu);
    kvq__ckpt_info info;
    rc = kvq__ckpt_write(s->dir_fd, s->map, v, lsn, s->mode, &info);
    if (rc == KVQ_ENOSPC && kvq__ls_reserve_size(s) > 0) {
        /* the room kept for it */
        kvq__error_clear();
        kvq__ls_reserve_release(s, 0);
        rc = kvq__ckpt_write(s->dir_fd, s->map, v, lsn, s->mode, &info);
    }
    pthread_mutex_lock(&s->pin_mu);
    for (size_t i = 0; i < s->n_pins; i++)
        if (s->pins[i] == v) {
            s->pins[i] = s->pins[--s->n_pins];
            break;
        }
    pthread_mutex_unlock(&s->pin_mu);
    if (rc == 0) {
        if (covered)
            *covered = lsn;
        s->ckpt_version = v;
        __atomic_store_n(&s->ckpt_lsn, lsn, __ATOMIC_RELEASE);
        s->n_ckpts++;
        /* The log before the checkpoint goes, except what a live handle has not applied. */
        rc = kvq__log_release(s->log, kvq__ls_slots_min(s, lsn));
        if (rc == 0)
            kvq__log_prepare_spare(s->log);
    }
    flock(s->ckpt_fd, LOCK_UN);
    return rc;
}

void *kvq__ls_ckpt_main(void *arg)
{
    emb_store *s = arg;
    pthread_mutex_lock(&s->ckpt_mu);
    while (!s->ckpt_stop) {
        if (!s->ckpt_wanted && !s->reserve_wanted) {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_sec += 1;
            if (pthread_cond_timedwait(&s->ckpt_cv, &s->ckpt_mu, &dl) == ETIMEDOUT) {
                /* A handle that is open but idle still applies the log now and then, so that
                 * it does not keep the log from being recycled (readers.shm). */
                pthread_mutex_unlock(&s->ckpt_mu);
                if (kvq__log_tail(s->log) - __atomic_load_n(&s->applied_lsn, __ATOMIC_ACQUIRE) >
                        (4u << 20) &&
                    kvq__ls_catch_up(s) != 0)
                    kvq__error_clear();
                pthread_mutex_lock(&s->ckpt_mu);
            }
            continue;
        }
        int spare = s->spare_wanted, reserve = s->reserve_wanted;
        int ckpt = s->ckpt_wanted > 1 || (!spare && !reserve);
        s->ckpt_wanted = 0;
        s->spare_wanted = 0;
        s->reserve_wanted = 0;
        pthread_mutex_unlock(&s->ckpt_mu);
        if (reserve)
            reserve_adjust(s);
        /* Errors are reported when space runs out; the next trigger tries again. */
        int src = spare ? kvq__log_prepare_spare(s->log) : 0;
        /* No room for a spare: a checkpoint may free whole segments of the log (it is
         * written only if newer than the last), after which the spare is tried again; then
         * the segment the reserve holds beyond the next checkpoint. */
        if (src == KVQ_ENOSPC)
            ckpt = 1;
        if (ckpt && kvq__ls_do_checkpoint(s, 0, NULL) != 0)
            kvq__error_clear();
        if (src == KVQ_ENOSPC) {
            kvq__error_clear();
            src = kvq__log_prepare_spare(s->log);
            if (src == KVQ_ENOSPC && kvq__ls_reserve_give_segment(s)) {
                kvq__error_clear();
                src = kvq__log_prepare_spare(s->log);
            }
        }
        if (src != 0)
            kvq__error_clear();
        if (ckpt || src == KVQ_ENOSPC)
            reserve_adjust(s); /* the data may have shrunk, or a checkpoint used it */
        pthread_mutex_lock(&s->ckpt_mu);
    }
    pthread_mutex_unlock(&s->ckpt_mu);
    return NULL;
}

static int needs_checkpoint(emb_store *s)
{
    uint64_t since = kvq__log_tail(s->log) - __atomic_load_n(&s->ckpt_lsn, __ATOMIC_ACQUIRE);
    if (since < s->ckpt_min)
        return 0;
    kvq__vmap_stats st;
    kvq__vmap_rdlock(s->map);
    kvq__vmap_get_stats(s->map, &st);
    kvq__vmap_rdunlock(s->map);
    return since > st.live_bytes;
}

/* Tells the checkpoint thread what to do: a checkpoint (2), a spare segment (spare). */
static void wake_thread(emb_store *s, int ckpt, int spare)
{
    pthread_mutex_lock(&s->ckpt_mu);
    if (ckpt)
        s->ckpt_wanted = 2;
    else if (!s->ckpt_wanted)
        s->ckpt_wanted = 1;
    if (spare)
        s->spare_wanted = 1;
    pthread_cond_signal(&s->ckpt_cv);
    pthread_mutex_unlock(&s->ckpt_mu);
}

/* Tells the checkpoint thread to adjust the reserve. */
void kvq__ls_wake_reserve(emb_store *s)
{
    if (!s->ckpt_started)
        return;
    pthread_mutex_lock(&s->ckpt_mu);
    s->reserve_wanted = 1;
    pthread_cond_signal(&s->ckpt_cv);
    pthread_mutex_unlock(&s->ckpt_mu);
}

int kvq__ls_checkpoint(emb_store *s)
{
    if (s->read_only || !s->ckpt_started)
        return 0;
    int spare = kvq__log_spare_wanted(s->log), ckpt = needs_checkpoint(s);
    /* Half way through a segment, make sure a spare is ready for the next one, so that no
     * committer zero-fills a segment. */
    uint64_t tail = kvq__log_tail(s->log), sb = kvq__log_segment_bytes(s->log);
    if (tail / sb != s->spare_seg && tail % sb > sb / 2) {
        s->spare_seg = tail / sb;
        spare = 1;
    }
    if (spare || ckpt)
        wake_thread(s, ckpt, spare);
    return 0;
}

int kvq__logstore_checkpoint_now(emb_store *s)
{
    if (s == NULL || s->read_only)
        return kvq__error(KVQ_EINVAL, "log store: no writable store");
    return kvq__ls_do_checkpoint(s, 1, NULL);
}
