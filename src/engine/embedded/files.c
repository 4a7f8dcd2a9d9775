/* Small helpers for the files of a database directory, shared by the engine and its storages:
 * paths, errno to kvq codes, syncing a directory. They call nothing else of the engine. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
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
