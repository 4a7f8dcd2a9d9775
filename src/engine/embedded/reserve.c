/* Room to drain a full queue on a full disk.
 *
 * A delete needs disk space too (SQLite writes the changed pages to the WAL first), so on a full
 * disk a queue could not even be emptied. kvq keeps a preallocated file, kvq.reserve, in the
 * database directory. When a commit fails because the disk is full, the committing process frees
 * the reserve and enters drain mode: transactions that only remove or update data (clears,
 * atomic operations) are accepted, those that write keys are refused with KVQ_ENOSPC. Once the
 * file system has room again for the reserve and a megabyte more, the reserve is taken back and
 * writes resume. Every process learns of drain mode the same way: from a full disk, or from the
 * reserve file's size. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "emb.h"

#define RESERVE_BYTES (8 * 1024 * 1024)
#define RECHECK_US    100000

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

void emb_reserve_refresh(emb_db *e)
{
    if (!e->drain_only && !e->reserve_missing)
        return;
    int64_t now = kvq__mono_us();
    if (now - e->drain_checked_us < RECHECK_US)
        return;
    e->drain_checked_us = now;
    if (e->drain_only) {
        struct statvfs vfs;
        if (statvfs(e->dir, &vfs) != 0)
            return;
        unsigned long long avail = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
        if (avail < RESERVE_BYTES + 1024 * 1024)
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

int emb_txn_grows(const emb_txn *t)
{
    for (size_t i = 0; i < t->n_muts; i++) {
        int op = t->muts[i].op;
        if (op == EMB_OP_SET || op == KVQ_MUT_SET_VERSIONSTAMPED_KEY ||
            op == KVQ_MUT_SET_VERSIONSTAMPED_VALUE)
            return 1;
    }
    return 0;
}
