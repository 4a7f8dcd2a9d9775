/* Salvage of a named queue from a damaged embedded database (named.c; `kvq export --salvage`,
 * `kvq check`): its ready items that can still be read, in order, and how many were skipped. */
#ifndef KVQ_QUEUE_SALVAGE_H
#define KVQ_QUEUE_SALVAGE_H

#include <stdint.h>

#include "engine/embedded/salvage.h"
#include "kvq/queue.h"

typedef struct kvq__queue_salvage_report {
    kvq_queue_type type;
    uint64_t items;      /* items handed out */
    uint64_t skipped;    /* items skipped (damaged rows, and what the counters say is missing) */
    int skipped_exact;   /* 1: skipped is the count; 0: at least skipped (a stretch of keys
                            could not be read and no counter says how many it held) */
    kvq__salvage_stats st;
} kvq__queue_salvage_report;

typedef int (*kvq__queue_salvage_fn)(kvq_bytes value, int64_t priority, void *payload);

/* Opens the database at url read-only for salvage and hands out every ready item of the queue
 * named name that can be read, in queue order. KVQ_ENOTFOUND: no such queue (or its registry
 * entry is damaged: rep->st says so). */
int kvq__queue_salvage(const char *url,
                       const char *name,
                       kvq__queue_salvage_fn fn,
                       void *payload,
                       kvq__queue_salvage_report *rep);

/* The names in the queue registry that a salvage read finds (each passed to fn; a nonzero
 * return stops and is returned); damage met is described in *st. */
typedef int (*kvq__queue_salvage_name_fn)(const char *name, void *arg);
int kvq__queue_salvage_names(const char *url, kvq__queue_salvage_name_fn fn, void *arg,
                             kvq__salvage_stats *st);

#endif /* KVQ_QUEUE_SALVAGE_H */
