/* Temporary directories of the tests: made with mkdtemp, removed with nftw (no shell). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "kvq_test.h"

int kt_mkdtemp_in(char *out, size_t cap, const char *parent, const char *tag)
{
    if (out == NULL || cap == 0 || tag == NULL) {
        errno = EINVAL;
        return -1;
    }
    if (parent == NULL || parent[0] == '\0')
        parent = getenv("TMPDIR");
    if (parent == NULL || parent[0] == '\0')
        parent = "/tmp";
    int n = snprintf(out, cap, "%s/kvq-%s-XXXXXX", parent, tag);
    if (n < 0 || (size_t)n >= cap) {
        fprintf(stderr, "kt_mkdtemp: %s/kvq-%s-XXXXXX does not fit in %zu bytes\n", parent, tag,
                cap);
        out[0] = '\0';
        errno = ENAMETOOLONG;
        return -1;
    }
    if (mkdtemp(out) == NULL) {
        int e = errno;
        fprintf(stderr, "mkdtemp %s: %s\n", out, strerror(e));
        out[0] = '\0';
        errno = e;
        return -1;
    }
    return 0;
}

int kt_mkdtemp(char *out, size_t cap, const char *tag)
{
    return kt_mkdtemp_in(out, cap, NULL, tag);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    /* A directory that could not be read (FTW_DNR) is still removed once empty. */
    int rc = flag == FTW_DP || flag == FTW_DNR ? rmdir(path) : unlink(path);
    if (rc != 0 && errno != ENOENT) {
        fprintf(stderr, "kt_rm_rf: cannot remove %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

int kt_rm_rf(const char *path)
{
    if (path == NULL || path[0] == '\0') {
        errno = EINVAL;
        return -1;
    }
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

int kt_empty_dir(const char *path)
{
    if (path == NULL || path[0] == '\0') {
        errno = EINVAL;
        return -1;
    }
    DIR *d = opendir(path);
    if (d == NULL) {
        fprintf(stderr, "kt_empty_dir: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char child[4096];
        if (snprintf(child, sizeof(child), "%s/%s", path, de->d_name) >= (int)sizeof(child) ||
            kt_rm_rf(child) != 0)
            rc = -1;
    }
    closedir(d);
    return rc;
}

int kt_tmp_make(kt_tmp *t, const char *tag)
{
    if (t == NULL)
        return -1;
    t->db[0] = '\0';
    if (kt_mkdtemp(t->dir, sizeof(t->dir), tag) != 0)
        return -1;
    snprintf(t->db, sizeof(t->db), "%s/db", t->dir);
    return 0;
}

int kt_tmp_remove(kt_tmp *t)
{
    if (t == NULL || t->dir[0] == '\0')
        return 0;
    int rc = kt_rm_rf(t->dir);
    t->dir[0] = '\0';
    t->db[0] = '\0';
    return rc;
}

void kt_path(char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        fail_msg("path too long: %s/%s", dir, name);
}

int kt_tmpfs_mount(char *out, size_t cap, const char *tag, const char *size)
{
    if (kt_mkdtemp(out, cap, tag) != 0)
        return -1;
    char opts[64];
    snprintf(opts, sizeof(opts), "size=%s", size);
    if (mount("tmpfs", out, "tmpfs", 0, opts) != 0) {
        fprintf(stderr, "cannot mount a tmpfs (%s): the disk-full tests are skipped\n",
                strerror(errno));
        rmdir(out);
        out[0] = '\0';
        return 1;
    }
    return 0;
}

void kt_tmpfs_unmount(char *mnt)
{
    if (mnt[0] == '\0')
        return;
    umount2(mnt, MNT_DETACH);
    rmdir(mnt);
    mnt[0] = '\0';
}

int kt_fill_disk(const char *path, int truncate)
{
    int fd = open(path, O_WRONLY | O_CREAT | (truncate ? O_TRUNC : O_APPEND), 0600);
    if (fd < 0)
        return -1;
    /* Large writes until one fails, then small ones for the last partial blocks. */
    static char junk[65536];
    while (write(fd, junk, sizeof(junk)) > 0) {
    }
    while (write(fd, junk, 512) > 0) {
    }
    close(fd);
    return 0;
}

long long kt_free_bytes(const char *path)
{
    struct statvfs v;
    if (statvfs(path, &v) != 0)
        return -1;
    return (long long)v.f_bavail * (long long)v.f_frsize;
}
