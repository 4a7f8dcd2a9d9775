/* The log store's checkpoint files (ckpt.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/embedded/logstore/ckpt.h"
#include "engine/embedded/logstore/log.h"
#include "util/util.h"
#include "util/bytes.h"

void (*kvq__ckpt_test_hook)(const char *step);

#define HDR  64u
#define TRL  32u
#define BUFB (1u << 20)

static const char hdr_magic[8] = { 'K', 'V', 'Q', 'C', 'K', 'P', 'T', 0 };
static const char trl_magic[8] = { 'K', 'V', 'Q', 'C', 'K', 'E', 'N', 'D' };

static int sys_err(const char *what)
{
    int e = errno;
    int code = e == ENOSPC || e == EDQUOT                  ? KVQ_ENOSPC
               : (e == EACCES || e == EPERM || e == EROFS) ? KVQ_EPERM
                                                           : KVQ_EIO;
    return kvq__error(code, "log store checkpoint: %s: %s", what, strerror(e));
}

typedef struct wbuf {
    int fd;
    uint8_t *b;
    size_t n;
    int err;
} wbuf;

static void wflush(wbuf *w)
{
    size_t off = 0;
    while (!w->err && off < w->n) {
        ssize_t k = write(w->fd, w->b + off, w->n - off);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            w->err = sys_err("write");
            break;
        }
        off += (size_t)k;
    }
    w->n = 0;
}

static void wput(wbuf *w, const void *p, size_t n)
{
    const uint8_t *s = p;
    while (n > 0 && !w->err) {
        if (w->n == BUFB)
            wflush(w);
        size_t k = BUFB - w->n < n ? BUFB - w->n : n;
        memcpy(w->b + w->n, s, k);
        w->n += k;
        s += k;
        n -= k;
    }
}

static void ckpt_name(char *buf, size_t cap, int64_t version)
{
    snprintf(buf, cap, "ckpt-%016llx.kvq", (unsigned long long)version);
}

typedef struct ckpt_scan {
    void (*fn)(void *, const char *, int64_t);
    void *arg;
} ckpt_scan;

static int ckpt_one(void *arg, const char *name)
{
    ckpt_scan *sc = arg;
    unsigned long long v;
    char ext[8];
    if (sscanf(name, "ckpt-%16llx.%3s", &v, ext) == 2 && strcmp(ext, "kvq") == 0 &&
        strlen(name) == 25)
        sc->fn(sc->arg, name, (int64_t)v);
    return 0;
}

/* Calls fn for each checkpoint file name with its version. */
static int each_ckpt(int dir_fd, void (*fn)(void *, const char *, int64_t), void *arg)
{
    ckpt_scan sc = { fn, arg };
    if (kvq__dir_each(dir_fd, ckpt_one, &sc) != 0)
        return sys_err("read directory");
    return 0;
}

typedef struct newest {
    int64_t v;
    int found;
} newest;

static void pick_newest(void *arg, const char *name, int64_t v)
{
    (void)name;
    newest *n = arg;
    if (!n->found || v > n->v) {
        n->v = v;
        n->found = 1;
    }
}

typedef struct older {
    int dir_fd;
    int64_t keep;
} older;

static void remove_older(void *arg, const char *name, int64_t v)
{
    older *o = arg;
    if (v < o->keep)
        unlinkat(o->dir_fd, name, 0);
}

int kvq__ckpt_write(int dir_fd,
                    kvq__vmap *m,
                    int64_t version,
                    uint64_t lsn,
                    unsigned int mode,
                    kvq__ckpt_info *info)
{
    if (dir_fd < 0 || m == NULL || version < 0)
        return kvq__error(KVQ_EINVAL, "checkpoint: bad arguments");
    int fd =
        openat(dir_fd, "ckpt.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode ? mode : 0600);
    if (fd < 0)
        return sys_err("create ckpt.tmp");
    wbuf w = { fd, kvq__malloc(BUFB), 0, 0 };
    if (w.b == NULL) {
        close(fd);
        return kvq__error(KVQ_ENOMEM, "checkpoint: out of memory");
    }
    uint8_t h[HDR];
    memset(h, 0, sizeof h);
    memcpy(h, hdr_magic, 8);
    kvq__le32_put(h + 8, KVQ__CKPT_FORMAT);
    kvq__le64_put(h + 16, (uint64_t)version);
    kvq__le64_put(h + 24, lsn);
    kvq__le32_put(h + 12, kvq__crc32c(0, h + 16, HDR - 16));
    wput(&w, h, sizeof h);
    uint64_t items = 0, bytes = 0;
    uint32_t crc = 0;
    kvq__vmap_cursor c;
    kvq__vmap_cursor_init(&c, m, version, NULL, 0, NULL, 0, 0);
    for (;;) {
        kvq_bytes k, v;
        /* The map's lock per item: commits go on while the checkpoint is written. */
        kvq__vmap_rdlock(m);
        int has = kvq__vmap_cursor_next(&c, &k, &v);
        if (has) {
            uint8_t lens[8];
            kvq__le32_put(lens, (uint32_t)k.len);
            kvq__le32_put(lens + 4, (uint32_t)v.len);
            crc = kvq__crc32c(crc, lens, 8);
            crc = kvq__crc32c(crc, k.data, k.len);
            crc = kvq__crc32c(crc, v.data, v.len);
            wput(&w, lens, 8);
            wput(&w, k.data, k.len);
            wput(&w, v.data, v.len);
            items++;
            bytes += 8 + k.len + v.len;
        }
        kvq__vmap_rdunlock(m);
        if (!has || w.err)
            break;
    }
    uint8_t t[TRL];
    memcpy(t, trl_magic, 8);
    kvq__le64_put(t + 8, items);
    kvq__le64_put(t + 16, bytes);
    kvq__le32_put(t + 24, crc);
    kvq__le32_put(t + 28, kvq__crc32c(0, t, 28));
    wput(&w, t, sizeof t);
    wflush(&w);
    kvq__free(w.b);
    int rc = w.err;
    if (rc == 0 && fsync(fd) != 0)
        rc = sys_err("sync ckpt.tmp");
    close(fd);
    if (rc != 0) {
        unlinkat(dir_fd, "ckpt.tmp", 0);
        return rc;
    }
    if (kvq__ckpt_test_hook)
        kvq__ckpt_test_hook("ckpt.written");
    char name[64];
    ckpt_name(name, sizeof name, version);
    if (renameat(dir_fd, "ckpt.tmp", dir_fd, name) != 0)
        return sys_err("rename ckpt.tmp");
    if (fsync(dir_fd) != 0)
        return sys_err("sync the directory");
    if (kvq__ckpt_test_hook)
        kvq__ckpt_test_hook("ckpt.renamed");
    older o = { dir_fd, version };
    each_ckpt(dir_fd, remove_older, &o);
    if (info)
        *info = (kvq__ckpt_info){ version, lsn, items, bytes };
    return 0;
}

static int read_header(int fd, const char *name, kvq__ckpt_info *info)
{
    uint8_t h[HDR];
    if (pread(fd, h, sizeof h, 0) != (ssize_t)sizeof h)
        return kvq__error(KVQ_EDAMAGED, "checkpoint %s is truncated", name);
    if (memcmp(h, hdr_magic, 8) != 0 || kvq__le32_get(h + 12) != kvq__crc32c(0, h + 16, HDR - 16))
        return kvq__error(KVQ_EDAMAGED, "checkpoint %s has a bad header", name);
    if (kvq__le32_get(h + 8) != KVQ__CKPT_FORMAT)
        return kvq__error(KVQ_EUNSUPPORTED, "checkpoint %s has format %u; this kvq reads %u", name,
                          kvq__le32_get(h + 8), KVQ__CKPT_FORMAT);
    info->version = (int64_t)kvq__le64_get(h + 16);
    info->lsn = kvq__le64_get(h + 24);
    return 0;
}

int kvq__ckpt_find(int dir_fd, kvq__ckpt_info *info, int *found)
{
    if (info == NULL || found == NULL)
        return kvq__error(KVQ_EINVAL, "checkpoint: bad arguments");
    newest n = { 0, 0 };
    int rc = each_ckpt(dir_fd, pick_newest, &n);
    *found = 0;
    if (rc != 0 || !n.found)
        return rc;
    char name[64];
    ckpt_name(name, sizeof name, n.v);
    int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sys_err("open checkpoint");
    rc = read_header(fd, name, info);
    close(fd);
    if (rc == 0 && info->version != n.v)
        rc = kvq__error(KVQ_EDAMAGED, "checkpoint %s says version %lld", name,
                        (long long)info->version);
    if (rc == 0)
        *found = 1;
    return rc;
}

int kvq__ckpt_load(int dir_fd, kvq__vmap *m, kvq__ckpt_info *info, int *found)
{
    if (m == NULL || info == NULL || found == NULL)
        return kvq__error(KVQ_EINVAL, "checkpoint: bad arguments");
    int rc = kvq__ckpt_find(dir_fd, info, found);
    if (rc != 0 || !*found)
        return rc;
    char name[64];
    ckpt_name(name, sizeof name, info->version);
    int fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sys_err("open checkpoint");
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = sys_err("stat checkpoint");
        goto out;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < HDR + TRL) {
        rc = kvq__error(KVQ_EDAMAGED, "checkpoint %s is truncated", name);
        goto out;
    }
    uint8_t t[TRL];
    if (pread(fd, t, sizeof t, (off_t)(size - TRL)) != (ssize_t)sizeof t ||
        memcmp(t, trl_magic, 8) != 0 || kvq__le32_get(t + 28) != kvq__crc32c(0, t, 28) ||
        kvq__le64_get(t + 16) != size - HDR - TRL) {
        rc = kvq__error(KVQ_EDAMAGED, "checkpoint %s has a bad trailer", name);
        goto out;
    }
    const uint8_t *map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        rc = sys_err("map checkpoint");
        goto out;
    }
    madvise((void *)(uintptr_t)map, (size_t)size, MADV_SEQUENTIAL);
    /* Walk the items, checking lengths and the checksum; apply at the checkpoint's version. */
    uint64_t off = HDR, end = size - TRL, items = 0;
    uint32_t crc = 0;
    kvq__vmap_wrlock(m);
    while (rc == 0 && off < end) {
        if (end - off < 8) {
            rc = kvq__error(KVQ_EDAMAGED, "checkpoint %s: item at %llu is cut", name,
                            (unsigned long long)off);
            break;
        }
        uint64_t kl = kvq__le32_get(map + off), vl = kvq__le32_get(map + off + 4);
        if (kl > 10000 || vl > 100000 || end - off - 8 < kl + vl) {
            rc = kvq__error(KVQ_EDAMAGED, "checkpoint %s: item at %llu has bad lengths", name,
                            (unsigned long long)off);
            break;
        }
        crc = kvq__crc32c(crc, map + off, (size_t)(8 + kl + vl));
        rc = kvq__vmap_set(m, info->version, map + off + 8, (size_t)kl, map + off + 8 + kl,
                           (size_t)vl);
        off += 8 + kl + vl;
        items++;
    }
    kvq__vmap_set_version(m, info->version);
    kvq__vmap_wrunlock(m);
    munmap((void *)(uintptr_t)map, (size_t)size);
    if (rc == 0 && (crc != kvq__le32_get(t + 24) || items != kvq__le64_get(t + 8)))
        rc = kvq__error(KVQ_EDAMAGED, "checkpoint %s fails its checksum", name);
    info->items = items;
    info->bytes = end - HDR;
out:
    close(fd);
    return rc;
}
