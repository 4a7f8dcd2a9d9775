/* Small helpers for the files of a database directory, shared by the engine and its storages:
 * paths, errno to kvq codes, syncing a directory. They call nothing else of the engine. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"

char *emb_path_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = kvq__malloc(n);
    if (p != NULL)
        snprintf(p, n, "%s/%s", dir, name);
    return p;
}

int emb_errno_error(int err, const char *what, const char *path)
{
    int code = KVQ_EIO;
    if (err == EACCES || err == EPERM || err == EROFS)
        code = KVQ_EPERM;
    else if (err == ENOSPC || err == EDQUOT)
        code = KVQ_ENOSPC;
    else if (err == ENOMEM)
        code = KVQ_ENOMEM;
    else if (err == ENOENT)
        code = KVQ_ENOTFOUND;
    return kvq__error(code, "%s %s: %s", what, path, strerror(err));
}

int emb_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return emb_errno_error(errno, "cannot open directory", dir);
    int rc = fsync(fd) == 0 ? 0 : emb_errno_error(errno, "cannot sync directory", dir);
    close(fd);
    return rc;
}

int emb_dir_is_empty(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    int empty = 1;
    struct dirent *de;
    while (empty && (de = readdir(d)) != NULL)
        empty = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
    closedir(d);
    return empty;
}

/* Removes the entries of the directory open as fd (recursively), by names relative to it, so
 * that nothing outside it is reached through a symbolic link. depth bounds the recursion. */
static void remove_entries(int fd, int depth)
{
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (S_ISDIR(st.st_mode) && depth > 0) {
            int sub = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0)
                remove_entries(sub, depth - 1);
            (void)unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR);
        } else {
            (void)unlinkat(dirfd(d), de->d_name, 0);
        }
    }
    closedir(d);
}

void emb_dir_undo(const char *dir, int remove_dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    remove_entries(fd, 4);
    if (remove_dir)
        (void)rmdir(dir);
}

int emb_url_kind(const char *url)
{
    if (strncmp(url, "log:", 4) == 0)
        return EMB_URL_LOG;
    if (strncmp(url, "sqlite:", 7) == 0)
        return EMB_URL_SQLITE;
    return EMB_URL_PLAIN;
}

const char *emb_url_dir(const char *url)
{
    switch (emb_url_kind(url)) {
    case EMB_URL_LOG:
        return url + 4;
    case EMB_URL_SQLITE:
        return url + 7;
    default:
        return url;
    }
}
