/* kvq.shm: the shared page of a database, mapped by every process that opens it (emb_shm in
 * emb.h): its opening and closing, and the two signals every process listens to, the commit
 * counter that watchers sleep on and the watch filter's "every key may have changed". Its
 * other fields belong to read_version.c (versions that advance with time), sync.c (the shared
 * sync) and watch.c (the watch filter's buckets). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "emb.h"

#define SHM_MAGIC 0x6b767131u /* "kvq1" */

int emb_shm_open(emb_db *e)
{
    size_t n = strlen(e->dir) + 16;
    char *p = kvq__malloc(n);
    if (p == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    snprintf(p, n, "%s/kvq.shm", e->dir);
    int ro = (e->opts.flags & KVQ_DB_READ_ONLY) != 0;
    int fd = open(p, (ro ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, e->opts.file_mode);
    if (fd < 0) {
        int rc = kvq__error(errno == EACCES ? KVQ_EPERM : KVQ_EIO, "cannot open %s: %s", p,
                            strerror(errno));
        kvq__free(p);
        return rc;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = kvq__error(KVQ_EIO, "cannot stat %s: %s", p, strerror(errno));
        close(fd);
        kvq__free(p);
        return rc;
    }
    /* A read-only handle cannot mend the page; a short one would fault when read (SIGBUS). */
    if (ro && st.st_size < 4096) {
        int rc = kvq__error(KVQ_EDAMAGED,
                            "%s is %lld bytes, not kvq's 4096: open the database read-write once "
                            "to rebuild it",
                            p, (long long)st.st_size);
        close(fd);
        kvq__free(p);
        return rc;
    }
    if (!ro && st.st_size != 4096 && ftruncate(fd, 4096) != 0) {
        int rc = kvq__error(KVQ_EIO, "cannot size %s: %s", p, strerror(errno));
        close(fd);
        kvq__free(p);
        return rc;
    }
    void *m = mmap(NULL, 4096, ro ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int rc = kvq__error(KVQ_EIO, "cannot map %s: %s", p, strerror(errno));
        close(fd);
        kvq__free(p);
        return rc;
    }
    emb_shm *shm = m;
    uint32_t magic = __atomic_load_n(&shm->magic, __ATOMIC_SEQ_CST);
    if (ro && magic != SHM_MAGIC && magic != 0) {
        int rc = kvq__error(KVQ_EDAMAGED,
                            "%s is not kvq's (magic 0x%08x): open the database read-write once to "
                            "rebuild it",
                            p, (unsigned)magic);
        munmap(m, 4096);
        close(fd);
        kvq__free(p);
        return rc;
    }
    if (!ro && magic != SHM_MAGIC) {
        /* New, or not kvq's (junk, another program's file): every process of this kvq marks the
         * page when it opens it, so nobody is using this one. Start it from zeros, every
         * field's starting value, under the commit lock so that two first openers agree. */
        if (e->lock_fd >= 0)
            while (flock(e->lock_fd, LOCK_EX) != 0 && errno == EINTR) {
            }
        if (__atomic_load_n(&shm->magic, __ATOMIC_SEQ_CST) != SHM_MAGIC) {
            memset(m, 0, 4096);
            __atomic_store_n(&shm->magic, SHM_MAGIC, __ATOMIC_SEQ_CST);
        }
        if (e->lock_fd >= 0)
            flock(e->lock_fd, LOCK_UN);
    }
    kvq__free(p);
    e->shm = m;
    e->shm_fd = fd;
    return 0;
}

void emb_notify_commit(emb_db *e)
{
    if (e->shm == NULL)
        return;
    __atomic_add_fetch(&e->shm->seq, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&e->shm->waiters, __ATOMIC_SEQ_CST) > 0)
        syscall(SYS_futex, &e->shm->seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void emb_shm_touch_all(emb_shm *m)
{
    __atomic_add_fetch(&m->any_gen, 1, __ATOMIC_SEQ_CST);
}

void emb_shm_close(emb_db *e)
{
    if (e->shm != NULL) {
        munmap(e->shm, 4096);
        e->shm = NULL;
    }
    if (e->shm_fd >= 0) {
        close(e->shm_fd);
        e->shm_fd = -1;
    }
}
