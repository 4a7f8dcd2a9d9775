/* Room to drain a full queue on a full disk.
 *
 * A delete needs disk space too (SQLite, for one, writes the changed pages to the WAL first), so
 * on a full disk a queue could not even be emptied. kvq keeps a preallocated file, kvq.reserve, in
 * the database directory. When a commit fails because the disk is full, the committing process
 * frees the reserve and enters drain mode: transactions that free more than they write (the bytes
 * of the rows their clears delete against the keys and values they set; atomic operations count
 * nothing), or that move stored keys (DRAIN_MOVE_SLACK), are accepted, the others are refused with
 * KVQ_ENOSPC. A queue's pop, which clears its items and writes a small result slot, drains; a push
 * does not. Once the file system has room again for the reserve and RESERVE_MARGIN more, the
 * reserve is taken back and writes resume. Every process learns of drain mode the same way: from a
 * full disk, or from the reserve file's size.
 *
 * The room a drain frees stays inside the storage's files: SQLite's freed pages are its own, and
 * the file system never sees them free again, so a disk that was full once would keep the
 * database in drain mode for good. In drain mode, when the SQLite storage's free pages make up
 * what the file system lacks for the reserve and its margin, and cost no more to copy than they
 * give back, they are given back to the file system (kvq__sqlite_compact: VACUUM and a
 * checkpoint that cuts the file), and the check looks again. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "emb.h"
#include "logstore/store_log.h"
#include "room.h"
#include "store_sqlite.h"

#define RESERVE_BYTES KVQ__RESERVE_BYTES
#define RECHECK_US    100000
/* Drain mode accepts a transaction that writes at most this many bytes more than it frees for
 * each stored key it clears one by one (kvq_txn_clear): a move, such as a work queue's receive,
 * which clears a ready item and writes its value under its lease with the lease's records
 * (about 150 bytes of keys), to be freed by the ack. A push clears nothing and stays refused;
 * the data can grow by at most this much per key that existed to be cleared. */
#define DRAIN_MOVE_SLACK 512
/* Free space beyond the reserve needed before it is taken (back) and drain mode ends: room for
 * the storage to work in without giving the reserve up again at once. For SQLite that is a WAL
 * growing to its checkpoint size (1,000 pages of 4 KiB, store_sqlite.c), which is also what a
 * last close frees by removing the WAL: with less, a reopened database would take the reserve
 * back on the space its own WAL is about to need again. */
#define RESERVE_MARGIN KVQ__RESERVE_MARGIN

static void reserve_path(emb_db *e, char *buf, size_t n)
{
    snprintf(buf, n, "%s/kvq.reserve", e->dir);
}

/* Allocates the reserve file. Returns 0, or the errno of the failure. */
static int reserve_take(emb_db *e)
{
    char path[4096];
    reserve_path(e, path, sizeof(path));
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, e->opts.file_mode);
    if (fd < 0)
        return errno != 0 ? errno : EIO;
    int rc = posix_fallocate(fd, 0, RESERVE_BYTES);
    if (rc == 0)
        fdatasync(fd);
    close(fd);
    return rc;
}

/* Only a lack of space means the disk is full. Any other failure to take the reserve (no file
 * descriptor left, EMFILE; a file system that cannot preallocate) must not refuse writes with
 * "the disk is full": the database goes on without a reserve and tries again later. */
static void reserve_failed(emb_db *e, int err)
{
    e->drain_checked_us = kvq__mono_us();
    if (err == ENOSPC || err == EDQUOT) {
        e->drain_only = 1;
        e->reserve_missing = 0;
    } else {
        e->drain_only = 0;
        e->reserve_missing = 1;
    }
}

void emb_reserve_open(emb_db *e)
{
    if (e->opts.flags & KVQ_DB_READ_ONLY)
        return;
    char path[4096];
    reserve_path(e, path, sizeof(path));
    struct stat st;
    if (stat(path, &st) == 0 && st.st_size >= RESERVE_BYTES)
        return;
    /* The reserve is missing or was given up to a full disk: take it only with room to spare,
     * as drain mode does, so that opening a database on a full disk does not take back the
     * very space its pops need. */
    struct statvfs vfs;
    if (statvfs(e->dir, &vfs) == 0 &&
        (unsigned long long)vfs.f_bavail * vfs.f_frsize < RESERVE_BYTES + RESERVE_MARGIN) {
        reserve_failed(e, ENOSPC);
        /* The first commit looks again at once, under the commit lock, where the storage's
         * free pages can be given back (give_back). */
        e->drain_checked_us -= RECHECK_US;
        return;
    }
    int err = reserve_take(e);
    if (err != 0)
        reserve_failed(e, err);
}

int emb_reserve_release(emb_db *e)
{
    char path[4096];
    reserve_path(e, path, sizeof(path));
    int fd = open(path, O_RDWR | O_CLOEXEC);
    int freed = 0;
    if (fd >= 0) {
        struct stat st;
        freed = fstat(fd, &st) == 0 && st.st_size > 0;
        if (ftruncate(fd, 0) == 0)
            fdatasync(fd);
        close(fd);
    }
    e->drain_only = 1;
    e->drain_checked_us = kvq__mono_us();
    return freed;
}

/* The file system's free bytes for the database: 0, or -1 when it cannot say. */
static int avail_bytes(emb_db *e, unsigned long long *avail)
{
    struct statvfs vfs;
    if (statvfs(e->dir, &vfs) != 0)
        return -1;
    *avail = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
    return 0;
}

/* Drain mode, the file system short of the reserve and its margin: gives the SQLite storage's
 * free pages back to it when they make up the shortfall and the pages in use are no more than
 * them (the copy costs at most what it gives back; after it there are no free pages left, so it
 * is not tried again until pops free more); the log store gives its table's back as it can
 * (kvq__logstore_give_back). With the commit lock held, before a write (the
 * writer is idle). 1 when it gave some back. */
static int give_back(emb_db *e, unsigned long long avail)
{
    if (e->store == NULL || (e->opts.flags & KVQ_DB_READ_ONLY))
        return 0;
    if (e->so == &emb_log_store)
        return kvq__logstore_give_back(e->store, RESERVE_BYTES + RESERVE_MARGIN - avail);
    if (e->so != &emb_sqlite_store)
        return 0;
    uint64_t free_bytes = 0, live = 0;
    if (kvq__sqlite_room(e->store, &free_bytes, &live) != 0) {
        kvq__error_clear(); /* nobody's error: drain mode goes on */
        return 0;
    }
    unsigned long long shortfall = RESERVE_BYTES + RESERVE_MARGIN - avail;
    if (free_bytes < shortfall || live > free_bytes)
        return 0;
    if (kvq__sqlite_compact(e->store) != 0) {
        kvq__error_clear(); /* no room for the copy yet, or a reader in the way: later */
        return 0;
    }
    return 1;
}

void emb_reserve_refresh(emb_db *e)
{
    if (!e->drain_only && !e->reserve_missing)
        return;
    int64_t now = kvq__mono_us();
    if (now - e->drain_checked_us < RECHECK_US)
        return;
    e->drain_checked_us = now;
    if (e->drain_only) {
        unsigned long long avail = 0;
        if (avail_bytes(e, &avail) != 0)
            return;
        if (avail < RESERVE_BYTES + RESERVE_MARGIN && give_back(e, avail))
            (void)avail_bytes(e, &avail);
        if (avail < RESERVE_BYTES + RESERVE_MARGIN)
            return;
    }
    int err = reserve_take(e);
    if (err == 0) {
        e->drain_only = 0;
        e->reserve_missing = 0;
    } else {
        reserve_failed(e, err);
    }
}

/* Is m a clear of one key, [k, k + 0x00)? */
static int is_point(const emb_mut *m)
{
    return m->b.n == m->a.n + 1 && m->b.p[m->a.n] == 0 &&
           (m->a.n == 0 || memcmp(m->a.p, m->b.p, m->a.n) == 0);
}

int emb_txn_grows(emb_db *e, const emb_txn *t, int *grows)
{
    /* What it writes: every key it sets, with its value (a versionstamped key without its 4
     * offset bytes, a versionstamped value likewise), and what APPEND_IF_FITS may append.
     * Other atomic operations update counters in place and count nothing. */
    int64_t written = 0;
    for (size_t i = 0; i < t->n_muts; i++) {
        const emb_mut *m = &t->muts[i];
        if (m->op == EMB_OP_SET || m->op == KVQ_MUT_APPEND_IF_FITS)
            written += (int64_t)(m->a.n + m->b.n);
        else if (m->op == KVQ_MUT_SET_VERSIONSTAMPED_KEY ||
                 m->op == KVQ_MUT_SET_VERSIONSTAMPED_VALUE)
            written += (int64_t)(m->a.n + m->b.n) - 4;
    }
    *grows = 0;
    if (written == 0)
        return 0;
    /* What it frees: the stored rows its clears cover, counted only as far as needed; and how
     * many stored keys it cleared one by one (moves). */
    int64_t freed = 0, moves = 0;
    for (size_t i = 0; i < t->n_muts && freed <= written; i++) {
        const emb_mut *m = &t->muts[i];
        if (m->op != EMB_OP_CLEAR_RANGE)
            continue;
        int64_t part = 0;
        int rc = e->so->write_range_bytes(e->store, m->a.p, m->a.n, m->b.p, m->b.n,
                                          written - freed, &part);
        if (rc != 0)
            return rc;
        freed += part;
        moves += part > 0 && is_point(m);
        if (moves > 0 && written - freed <= moves * DRAIN_MOVE_SLACK)
            break; /* accepted as moves */
    }
    *grows = freed <= written && !(moves > 0 && written - freed <= moves * DRAIN_MOVE_SLACK);
    return 0;
}
