/* The log's segment files (log_internal.h): opening and mapping them, their headers, spares
 * (zero-filled or recycled files, ready to become segments) and making a segment from one. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/embedded/logstore/log_internal.h"
#include "util/bytes.h"

void (*kvq__log_test_hook)(const char *step);

static const char seg_magic[8] = { 'K', 'V', 'Q', 'L', 'O', 'G', 'S', 'G' };

/* ---- segment files ---- */

void kvq__log_seg_close(kvq__log *log, seg_file *s)
{
    if (s->map)
        munmap(s->map, log->sb);
    if (s->fd >= 0)
        close(s->fd);
    s->map = NULL;
    s->fd = -1;
    s->seq = 0;
}

void kvq__log_seg_forget(kvq__log *log, uint64_t seq)
{
    for (unsigned int i = 0; i < SEG_CACHE; i++)
        if (log->segs[i].fd >= 0 && log->segs[i].seq == seq)
            kvq__log_seg_close(log, &log->segs[i]);
}

void kvq__log_seg_forget_all(kvq__log *log)
{
    for (unsigned int i = 0; i < SEG_CACHE; i++)
        kvq__log_seg_close(log, &log->segs[i]);
}

seg_file *kvq__log_seg_get(kvq__log *log, uint64_t seq, int *rc_out)
{
    *rc_out = 0;
    for (unsigned int i = 0; i < SEG_CACHE; i++)
        if (log->segs[i].fd >= 0 && log->segs[i].seq == seq)
            return &log->segs[i];
    char name[64];
    seg_name(name, sizeof name, seq);
    int fd = openat(log->dir_fd, name, (log->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC);
    if (fd < 0) {
        *rc_out = errno == ENOENT ? kvq__error(KVQ_ENOTFOUND, "log: no segment %s", name)
                                  : sys_err(KVQ_EIO, "open", name);
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != log->sb) {
        close(fd);
        *rc_out = kvq__error(KVQ_EDAMAGED, "log: segment %s has the wrong size", name);
        return NULL;
    }
    void *m = mmap(NULL, log->sb, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        close(fd);
        *rc_out = sys_err(KVQ_EIO, "map", name);
        return NULL;
    }
    const uint8_t *h = m;
    if (memcmp(h, seg_magic, 8) != 0 || kvq__le32_get(h + 8) != KVQ__LOG_FORMAT ||
        kvq__le64_get(h + 16) != seq || kvq__le64_get(h + 24) != log->sb ||
        kvq__le32_get(h + 12) != kvq__crc32c(0, h + 16, 16)) {
        munmap(m, log->sb);
        close(fd);
        *rc_out = kvq__error(KVQ_EDAMAGED, "log: segment %s has a bad header", name);
        return NULL;
    }
    seg_file *s = &log->segs[log->seg_clock++ % SEG_CACHE];
    kvq__log_seg_close(log, s);
    s->seq = seq;
    s->fd = fd;
    s->map = m;
    return s;
}

static int write_full(int fd, const void *p, size_t n, uint64_t off)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = pwrite(fd, b, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

/* Writes a segment header for seq into fd (and syncs it). */
static int seg_write_header(kvq__log *log, int fd, uint64_t seq)
{
    uint8_t h[KVQ__LOG_SEG_HEADER];
    memset(h, 0, sizeof h);
    memcpy(h, seg_magic, 8);
    kvq__le32_put(h + 8, KVQ__LOG_FORMAT);
    kvq__le64_put(h + 16, seq);
    kvq__le64_put(h + 24, log->sb);
    kvq__le32_put(h + 12, kvq__crc32c(0, h + 16, 16));
    if (write_full(fd, h, sizeof h, 0) != 0 || fdatasync(fd) != 0)
        return sys_err(KVQ_EIO, "write header of", "segment");
    return 0;
}

/* Creates a zero-filled spare file of the segment size: written, not only allocated, so that
 * later writes into it change no file metadata and fdatasync has no journal to commit. */
static int spare_create(kvq__log *log, const char *name)
{
    char tmp[96];
    snprintf(tmp, sizeof tmp, "tmp-%ld-%s", (long)getpid(), name);
    int fd = openat(log->dir_fd, tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, log->mode);
    if (fd < 0)
        return sys_err(KVQ_EIO, "create", tmp);
    int rc = 0;
    int e = posix_fallocate(fd, 0, (off_t)log->sb);
    if (e != 0) {
        errno = e;
        rc = sys_err(KVQ_EIO, "allocate", tmp);
        goto fail;
    }
    static const uint8_t zeros[1 << 20];
    for (uint64_t off = 0; off < log->sb; off += sizeof zeros) {
        size_t n = log->sb - off < sizeof zeros ? (size_t)(log->sb - off) : sizeof zeros;
        if (write_full(fd, zeros, n, off) != 0) {
            rc = sys_err(KVQ_EIO, "zero-fill", tmp);
            goto fail;
        }
    }
    if (fsync(fd) != 0) {
        rc = sys_err(KVQ_EIO, "sync", tmp);
        goto fail;
    }
    close(fd);
    if (renameat(log->dir_fd, tmp, log->dir_fd, name) != 0) {
        rc = sys_err(KVQ_EIO, "rename", tmp);
        unlinkat(log->dir_fd, tmp, 0);
        return rc;
    }
    if (fsync(log->dir_fd) != 0)
        return sys_err(KVQ_EIO, "sync", "log directory");
    log->st.segments_created++;
    return 0;
fail:
    close(fd);
    unlinkat(log->dir_fd, tmp, 0);
    return rc;
}

int kvq__dir_each(int dir_fd, int (*fn)(void *arg, const char *name), void *arg)
{
    int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    /* struct linux_dirent64, as the kernel writes it */
    _Alignas(8) uint8_t buf[8192];
    int rc = 0, stop = 0;
    while (!stop) {
        long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n < 0) {
            rc = -1;
            break;
        }
        if (n == 0)
            break;
        for (long off = 0; off < n && !stop;) {
            unsigned short reclen;
            memcpy(&reclen, buf + off + 16, sizeof reclen);
            const char *name = (const char *)buf + off + 19;
            if (reclen == 0)
                break;
            if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0)
                stop = fn(arg, name);
            off += reclen;
        }
    }
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

typedef struct spare_scan {
    char *name;
    size_t cap;
    int found;
    unsigned int n;
} spare_scan;

static int spare_one(void *arg, const char *name)
{
    spare_scan *sc = arg;
    if (strncmp(name, "spare-", 6) == 0 && strstr(name, ".seg") != NULL) {
        sc->n++;
        if (!sc->found && strlen(name) < sc->cap) {
            strcpy(sc->name, name);
            sc->found = 1;
        }
    }
    return 0;
}

int kvq__log_spare_find(kvq__log *log, char *name, size_t cap, unsigned int *count)
{
    spare_scan sc = { name, cap, 0, 0 };
    if (kvq__dir_each(log->dir_fd, spare_one, &sc) != 0)
        return 0;
    if (count)
        *count = sc.n;
    return sc.found;
}

int kvq__log_seg_make(kvq__log *log, uint64_t seq)
{
    char spare[256];
    int rc;
    if (!kvq__log_spare_find(log, spare, sizeof spare, NULL)) {
        snprintf(spare, sizeof spare, "spare-new-%016llx.seg", (unsigned long long)seq);
        if ((rc = spare_create(log, spare)) != 0)
            return rc;
    } else {
        log->st.segments_recycled++;
    }
    if (seq > 1) /* the first segment of a new log needs no spare yet */
        __atomic_store_n(&log->spare_wanted, 1, __ATOMIC_RELEASE);
    int fd = openat(log->dir_fd, spare, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return sys_err(KVQ_EIO, "open", spare);
    rc = seg_write_header(log, fd, seq);
    close(fd);
    if (rc != 0)
        return rc;
    char name[64];
    seg_name(name, sizeof name, seq);
    kvq__log_seg_forget(log, seq);
    if (renameat(log->dir_fd, spare, log->dir_fd, name) != 0)
        return sys_err(KVQ_EIO, "rename", spare);
    HOOK("segment.renamed");
    if (fsync(log->dir_fd) != 0)
        return sys_err(KVQ_EIO, "sync", "log directory");
    return 0;
}

int kvq__log_prepare_spare(kvq__log *log)
{
    if (log == NULL || log->read_only)
        return kvq__error(KVQ_EINVAL, "log: no writable log");
    char spare[256];
    if (kvq__log_spare_find(log, spare, sizeof spare, NULL))
        return 0;
    snprintf(spare, sizeof spare, "spare-new-%ld-%lld.seg", (long)getpid(),
             (long long)kvq__mono_us());
    return spare_create(log, spare);
}

int kvq__log_read_seg_bytes(kvq__log *log, uint64_t seq, uint64_t *sb)
{
    char name[64];
    seg_name(name, sizeof name, seq);
    int fd = openat(log->dir_fd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sys_err(KVQ_EIO, "open", name);
    uint8_t h[32];
    ssize_t n = pread(fd, h, sizeof h, 0);
    close(fd);
    if (n != (ssize_t)sizeof h || memcmp(h, seg_magic, 8) != 0)
        return kvq__error(KVQ_EDAMAGED, "log: segment %s has a bad header", name);
    if (kvq__le32_get(h + 8) != KVQ__LOG_FORMAT)
        return kvq__error(KVQ_EDAMAGED, "log: segment %s has format %u, this kvq reads %u", name,
                          kvq__le32_get(h + 8), KVQ__LOG_FORMAT);
    *sb = kvq__le64_get(h + 24);
    if (*sb < KVQ__LOG_SEG_MIN || *sb % 4096 != 0 ||
        kvq__le32_get(h + 12) != kvq__crc32c(0, h + 16, 16))
        return kvq__error(KVQ_EDAMAGED, "log: segment %s has a bad header", name);
    return 0;
}

int kvq__log_spare_ready(kvq__log *log)
{
    char name[256];
    return log != NULL && kvq__log_spare_find(log, name, sizeof name, NULL);
}

int kvq__log_spare_wanted(kvq__log *log)
{
    return log != NULL && __atomic_exchange_n(&log->spare_wanted, 0, __ATOMIC_ACQ_REL);
}
