/* Salvage: reading what a damaged embedded database still holds, never writing to it
 * (salvage.c; `kvq export --salvage`, `kvq check`). */
#ifndef KVQ_EMB_SALVAGE_H
#define KVQ_EMB_SALVAGE_H

#include <stddef.h>
#include <stdint.h>

#include "kvq/common.h"

typedef struct kvq__salvage kvq__salvage;

/* What a salvage read found damaged: counts, and a description for the messages (which file,
 * which keys or log records). */
typedef struct kvq__salvage_stats {
    uint64_t rows;     /* rows handed out */
    uint64_t bad_rows; /* rows that failed their checksum: skipped */
    uint64_t gaps;     /* stretches of keys the file's pages could not give: skipped */
    uint64_t log_skipped_records; /* log store: records at or after a damaged one: skipped */
    uint64_t log_skipped_sets;    /* ... and the keys they set in the range read */
    char where[1024];             /* what is damaged, in words ("" when nothing) */
} kvq__salvage_stats;

/* Opens the embedded database at url (a directory, log:DIR or sqlite:DIR) for salvage, read-only:
 * its files are opened without write access to their data and never repaired. */
int kvq__salvage_open(kvq__salvage **out, const char *url);
void kvq__salvage_close(kvq__salvage *s);

/* Each readable row of [begin, end), in key order, passed to fn (a nonzero return stops the
 * read and is returned). Rows that fail their checksum and stretches of the file that cannot be
 * read are skipped, counted into *st (added to what it holds) and described in st->where. */
typedef int (*kvq__salvage_fn)(void *arg, kvq_bytes key, kvq_bytes value);
int kvq__salvage_range(kvq__salvage *s,
                       const uint8_t *begin,
                       size_t begin_len,
                       const uint8_t *end,
                       size_t end_len,
                       kvq__salvage_fn fn,
                       void *arg,
                       kvq__salvage_stats *st);

/* Log store: through = 1 reads the log past a damaged record too (what the valid records
 * after it say: for counters, whose newest value tells how much was skipped); 0 (the default)
 * stops at it and counts what lies beyond. */
void kvq__salvage_set_through(kvq__salvage *s, int through);

#endif /* KVQ_EMB_SALVAGE_H */
