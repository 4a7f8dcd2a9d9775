/* What the engines share with the dispatcher above them (engine.c), which calls them through
 * their tables of operations: the choice of an injected fault and the reference counts and
 * settling of watches. Nothing here calls an engine, except a watch's last release through the
 * table the watch's database holds. */
#include "engine/engine.h"

unsigned int kvq__choose_fault(kvq_db *db)
{
    if (db->opts.fault_rate <= 0.0)
        return 0;
    unsigned int fault = 0;
    pthread_mutex_lock(&db->fault_mu);
    if (kvq__rng_unit(&db->fault_rng) < db->opts.fault_rate) {
        unsigned int kinds[5];
        int nk = 0;
        for (unsigned int k = 1; k <= KVQ_FAULT_TIMED_OUT_NOT_COMMITTED; k <<= 1)
            if (db->opts.fault_kinds & k)
                kinds[nk++] = k;
        if (nk > 0)
            fault = kinds[kvq__rng_next(&db->fault_rng) % (uint64_t)nk];
    }
    pthread_mutex_unlock(&db->fault_mu);
    if (fault != 0)
        __atomic_add_fetch(&db->n_faults, 1, __ATOMIC_RELAXED);
    return fault;
}

/* Watches ---------------------------------------------------------------------------------- */

void kvq__watch_ref(kvq_watch *w)
{
    pthread_mutex_lock(&w->mu);
    w->refs++;
    pthread_mutex_unlock(&w->mu);
}

void kvq__watch_unref(kvq_watch *w)
{
    pthread_mutex_lock(&w->mu);
    int left = --w->refs;
    pthread_mutex_unlock(&w->mu);
    if (left > 0)
        return;
    if (w->db != NULL && w->db->ops->watch_release != NULL)
        w->db->ops->watch_release(w);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->mu);
    kvq__free(w);
}

void kvq__watch_settle(kvq_watch *w, int result)
{
    pthread_mutex_lock(&w->mu);
    if (w->state != KVQ__WATCH_DONE) {
        w->state = KVQ__WATCH_DONE;
        w->result = result;
        pthread_cond_broadcast(&w->cond);
    }
    pthread_mutex_unlock(&w->mu);
}
