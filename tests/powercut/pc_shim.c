/* The power-cut test's file system layer (TESTING.md S8): an LD_PRELOAD library that keeps aside,
 * for every file and directory under one root, what a power cut could still take away, and at a
 * chosen moment cuts the power: it writes out one state the file system could be in after the
 * cut, and ends the process at once.
 *
 * What it models (the page cache of one machine, a journaling file system that honours syncs):
 *
 * - File data, per 4 KiB page. The first change to a page since the file was last synced keeps
 *   the page as it was (its durable image); every later write, truncation or allocation that
 *   touches it keeps the page as it is after that change. After a cut, each such page is in one
 *   of those states, chosen at random: the durable one, or the one after any change (the kernel
 *   writes whole pages back, at any time, in any order; in the random mode, one such page in
 *   four is torn between two of its states at 512-byte sectors, as a disk that was writing it
 *   back at the cut leaves it). The file's size is likewise its durable
 *   size or any size it had since. fsync or fdatasync of any descriptor of the file (or sync,
 *   syncfs) makes everything written so far durable.
 * - Directory entries: creating a file or directory, unlinking, renaming. A directory keeps its
 *   entries as they were at its last sync and the operations since; after a cut it has the
 *   durable entries and a random prefix of those operations (a journal commits them in order).
 *   Only fsync or fdatasync of the directory itself (or sync, syncfs) makes them durable: a file
 *   that was synced but whose directory was not may be gone.
 * - Shared memory: a file mapped MAP_SHARED and writable (SQLite's -shm, kvq.shm, kvq.cq) holds
 *   no durable state; the writes into it cannot be seen here. After a cut it is, at random,
 *   either as it is now (as if the kernel had just written it all back, the state a kill -9
 *   leaves) or empty (nothing written back): kvq and SQLite must rebuild it either way. Stale
 *   mixtures of older versions of such a file are not modelled. $KVQ_PC_SHM ("empty", "keep",
 *   "keep-only:NAME") fixes the choice, to tell which file a failure depends on.
 * - The boot: a power cut is a reboot. A process under the layer that reads
 *   /proc/sys/kernel/random/boot_id (open, openat, fopen) gets $KVQ_PC_BOOT_ID instead, which
 *   test_powercut sets anew for each run (every process of one run shares it, as the processes
 *   of one boot do) and never to the machine's own id, which the checker opens the state with.
 *   So kvq sees every run after a cut as a new boot, as after a real cut: it clears kvq.cq and
 *   fixes its clock's base again. Without this, a kept kvq.cq beside a log that lost its
 *   unsynced pages would be taken as this boot's, and a dead owner's commit applied on top of
 *   the lost one: a state only the layer could make (in one boot the page cache keeps what was
 *   written). The layer aborts if $KVQ_PC_BOOT_ID is missing or malformed, if the boot id is
 *   opened to write or read through another path under /proc; the checker fails a run that
 *   opened and closed the database without reading the boot id through the layer (its cut's
 *   boot_reads=0: kvq read the machine's id some other way, and the layer needs extending).
 *
 * The cut: $KVQ_PC_CUT_AT numbers the modifying operations on files under the root (writes,
 * truncations, allocations, syncs, creations, unlinks, renames) from 1; at that one it cuts,
 * before or after doing it (at random). kvq_pc_cut_now() cuts at once (a worker that has
 * finished calls it). Each cut picks, with the seed, one of: drop everything not durable (a cut
 * a moment after the last syncs), keep everything (as kill -9 would), or a random mixture. It
 * writes the state to $KVQ_PC_OUT (a new directory standing for the root), one line of figures
 * to $KVQ_PC_STATS, and ends the process with _exit(PC_EXIT_CUT) while holding the layer's lock,
 * so that no other thread gets another operation in.
 *
 * The syncs themselves do not reach the disk: durability is simulated, so a cut costs no real
 * sync. Files outside the root pass straight through (a worker's own log of acknowledged
 * commits is written there with plain write(2) and survives the cut, as TESTING.md's histories
 * do).
 *
 * Not modelled (each makes the layer abort with a message, so that a test never passes by
 * ignoring an operation): renames between directories, paths with "..", writes through stdio
 * to a file under the root, msync of a mapped file under the root, copy_file_range and
 * sendfile into one, hard links, symlinks. Writes the layer cannot see at all (io_uring, a
 * raw syscall()) must not be used under it: a new storage that does needs the layer extended.
 * Disks that lie about flushes are not modelled either. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "pc_common.h"

#define PAGE     4096
#define SECTOR   512
#define MAX_FDS  65536
#define BUCKETS  1024

/* ---- the real functions ----------------------------------------------------------------------- */

static int (*r_open)(const char *, int, ...);
static int (*r_openat)(int, const char *, int, ...);
static ssize_t (*r_write)(int, const void *, size_t);
static ssize_t (*r_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*r_writev)(int, const struct iovec *, int);
static ssize_t (*r_pwritev)(int, const struct iovec *, int, off_t);
static ssize_t (*r_pwritev2)(int, const struct iovec *, int, off_t, int);
static int (*r_fsync)(int);
static int (*r_fdatasync)(int);
static void (*r_sync)(void);
static int (*r_syncfs)(int);
static int (*r_rename)(const char *, const char *);
static int (*r_renameat)(int, const char *, int, const char *);
static int (*r_renameat2)(int, const char *, int, const char *, unsigned int);
static int (*r_unlink)(const char *);
static int (*r_unlinkat)(int, const char *, int);
static int (*r_mkdir)(const char *, mode_t);
static int (*r_mkdirat)(int, const char *, mode_t);
static int (*r_rmdir)(const char *);
static int (*r_ftruncate)(int, off_t);
static int (*r_truncate)(const char *, off_t);
static int (*r_fallocate)(int, int, off_t, off_t);
static int (*r_posix_fallocate)(int, off_t, off_t);
static void *(*r_mmap)(void *, size_t, int, int, int, off_t);
static int (*r_close)(int);
static int (*r_dup)(int);
static int (*r_dup2)(int, int);
static int (*r_dup3)(int, int, int);
static int (*r_link)(const char *, const char *);
static int (*r_symlink)(const char *, const char *);
static FILE *(*r_fopen)(const char *, const char *);
static FILE *(*r_fdopen)(int, const char *);
static int (*r_msync)(void *, size_t, int);
static ssize_t (*r_copy_file_range)(int, off_t *, int, off_t *, size_t, unsigned int);
static ssize_t (*r_sendfile)(int, int, off_t *, size_t);

/* dlsym returns an object pointer; it is copied into the function pointer. */
#define RESOLVE(name)                                \
    do {                                             \
        void *sym_ = dlsym(RTLD_NEXT, #name);        \
        memcpy(&r_##name, &sym_, sizeof(r_##name));  \
    } while (0)

static void resolve(void)
{
    RESOLVE(open);
    RESOLVE(openat);
    RESOLVE(write);
    RESOLVE(pwrite);
    RESOLVE(writev);
    RESOLVE(pwritev);
    RESOLVE(pwritev2);
    RESOLVE(fsync);
    RESOLVE(fdatasync);
    RESOLVE(sync);
    RESOLVE(syncfs);
    RESOLVE(rename);
    RESOLVE(renameat);
    RESOLVE(renameat2);
    RESOLVE(unlink);
    RESOLVE(unlinkat);
    RESOLVE(mkdir);
    RESOLVE(mkdirat);
    RESOLVE(rmdir);
    RESOLVE(ftruncate);
    RESOLVE(truncate);
    RESOLVE(fallocate);
    RESOLVE(posix_fallocate);
    RESOLVE(mmap);
    RESOLVE(close);
    RESOLVE(dup);
    RESOLVE(dup2);
    RESOLVE(dup3);
    RESOLVE(link);
    RESOLVE(symlink);
    RESOLVE(fopen);
    RESOLVE(fdopen);
    RESOLVE(msync);
    RESOLVE(copy_file_range);
    RESOLVE(sendfile);
}

/* ---- the model ------------------------------------------------------------------------------- */

typedef struct page {
    uint64_t no;
    int n, cap;
    uint8_t **img; /* img[0] the durable page, img[i] after the i-th change; NULL: zeros */
    struct page *next;
} page;

typedef struct node node;

enum { OP_CREATE, OP_UNLINK, OP_RENAME };

typedef struct dirop {
    int kind;
    char *name, *to; /* to: the new name of a rename */
    node *target;    /* what OP_CREATE links */
} dirop;

typedef struct entry {
    char *name;
    node *target;
} entry;

struct node {
    dev_t dev;
    ino_t ino;
    int is_dir;
    int is_volatile;
    mode_t mode;
    int rfd;      /* a descriptor to read the file's current content (never closed: closing a
                   * descriptor would drop the process's fcntl locks on the file) */
    char *path;   /* directories: where it is now */
    page *pages[BUCKETS];
    int64_t *sizes; /* since the last sync: sizes[0] durable, then after each change */
    int nsizes, csizes;
    size_t npages;
    entry *ents; /* directories: the durable entries */
    size_t nents, cents;
    dirop *ops; /* directories: the operations since the last sync */
    size_t nops, cops;
    node *next;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int active;
static char root[PATH_MAX];
static size_t root_len;
static char out_dir[PATH_MAX];
static char stats_path[PATH_MAX];
static uint64_t cut_at;
static uint64_t events;
static uint64_t rng;
static node *nodes;
static node *fd_node[MAX_FDS];
static size_t total_pages; /* page images kept, for the bound */
/* $KVQ_PC_SHM, for diagnosis: "empty" always, "keep" always, "keep-only:NAME" keeps the files
 * whose path contains NAME and empties the others; unset: each at random. */
static char shm_policy;
static char shm_only[64];
/* This run's boot (the header says why): the id answered for BOOT_ID_PATH, and how often. */
#define BOOT_ID_PATH "/proc/sys/kernel/random/boot_id"
static char boot_id[40];
static uint64_t boot_reads;

static void die(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if (n > (int)sizeof(buf) - 2)
        n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    ssize_t w = r_write(2, "powercut layer: ", 16);
    w = r_write(2, buf, (size_t)n);
    (void)w;
    _exit(PC_EXIT_LAYER_ERROR);
}

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint64_t below(uint64_t n)
{
    return n == 0 ? 0 : rnd() % n;
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n, sz);
    if (p == NULL)
        die("out of memory");
    return p;
}

static void *xrealloc(void *p, size_t sz)
{
    p = realloc(p, sz);
    if (p == NULL)
        die("out of memory");
    return p;
}

static char *xstrdup(const char *s)
{
    char *p = strdup(s);
    if (p == NULL)
        die("out of memory");
    return p;
}

static node *find_node(dev_t dev, ino_t ino)
{
    for (node *n = nodes; n != NULL; n = n->next)
        if (n->dev == dev && n->ino == ino)
            return n;
    return NULL;
}

static node *find_dir(const char *path)
{
    for (node *n = nodes; n != NULL; n = n->next)
        if (n->is_dir && n->path != NULL && strcmp(n->path, path) == 0)
            return n;
    return NULL;
}

/* A node for the file or directory at path (which exists), reading it through fd if given. */
static node *add_node(const char *path, int fd)
{
    struct stat st;
    int rc = fd >= 0 ? fstat(fd, &st) : lstat(path, &st);
    if (rc != 0)
        die("cannot stat %s: %s", path, strerror(errno));
    node *n = find_node(st.st_dev, st.st_ino);
    if (n != NULL)
        return n;
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
        die("%s is neither a file nor a directory", path);
    n = xcalloc(1, sizeof(*n));
    n->dev = st.st_dev;
    n->ino = st.st_ino;
    n->is_dir = S_ISDIR(st.st_mode);
    n->mode = st.st_mode & 07777;
    n->rfd = -1;
    if (n->is_dir) {
        n->path = xstrdup(path);
    } else {
        char self[64];
        if (fd >= 0) {
            snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
            n->rfd = r_open(self, O_RDONLY | O_CLOEXEC);
        } else {
            n->rfd = r_open(path, O_RDONLY | O_CLOEXEC);
        }
        if (n->rfd < 0)
            die("cannot open %s for reading: %s", path, strerror(errno));
    }
    n->next = nodes;
    nodes = n;
    return n;
}

static void add_entry(node *dir, const char *name, node *target)
{
    if (dir->nents == dir->cents) {
        dir->cents = dir->cents ? dir->cents * 2 : 8;
        dir->ents = xrealloc(dir->ents, dir->cents * sizeof(entry));
    }
    dir->ents[dir->nents].name = xstrdup(name);
    dir->ents[dir->nents].target = target;
    dir->nents++;
}

/* The tree under the root as it is at the start: durable. */
static void scan(const char *path, node *dir)
{
    DIR *d = opendir(path);
    if (d == NULL)
        die("cannot list %s: %s", path, strerror(errno));
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char p[PATH_MAX];
        if (snprintf(p, sizeof(p), "%s/%s", path, de->d_name) >= (int)sizeof(p))
            die("path too long under %s", path);
        node *n = add_node(p, -1);
        add_entry(dir, de->d_name, n);
        if (n->is_dir)
            scan(p, n);
    }
    closedir(d);
}

static void init(void)
{
    resolve();
    const char *r = getenv("KVQ_PC_ROOT");
    const char *o = getenv("KVQ_PC_OUT");
    if (r == NULL || r[0] != '/' || o == NULL || o[0] != '/')
        return; /* not under test: every call passes through */
    if (strlen(r) >= sizeof(root) || strlen(o) >= sizeof(out_dir))
        die("KVQ_PC_ROOT or KVQ_PC_OUT too long");
    strcpy(root, r);
    root_len = strlen(root);
    while (root_len > 1 && root[root_len - 1] == '/')
        root[--root_len] = '\0';
    strcpy(out_dir, o);
    const char *s = getenv("KVQ_PC_STATS");
    if (s != NULL && strlen(s) < sizeof(stats_path))
        strcpy(stats_path, s);
    const char *c = getenv("KVQ_PC_CUT_AT");
    cut_at = c != NULL ? strtoull(c, NULL, 10) : 0;
    const char *shm = getenv("KVQ_PC_SHM");
    shm_policy = shm != NULL && strcmp(shm, "empty") == 0  ? 'e'
                 : shm != NULL && strcmp(shm, "keep") == 0 ? 'k'
                                                            : 0;
    if (shm != NULL && strncmp(shm, "keep-only:", 10) == 0 && strlen(shm + 10) < sizeof(shm_only)) {
        shm_policy = 'o';
        strcpy(shm_only, shm + 10);
    }
    const char *b = getenv("KVQ_PC_BOOT_ID");
    if (b == NULL || strlen(b) != 36)
        die("$KVQ_PC_BOOT_ID (this run's boot id, 36 characters) is not set: a cut must be a "
            "new boot");
    for (int i = 0; i < 36; i++) {
        int dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? b[i] != '-' : !((b[i] >= '0' && b[i] <= '9') || (b[i] >= 'a' && b[i] <= 'f')))
            die("$KVQ_PC_BOOT_ID is not a boot id (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx): %s", b);
    }
    memcpy(boot_id, b, 36);
    boot_id[36] = '\n';
    const char *seed = getenv("KVQ_PC_SEED");
    rng = (seed != NULL ? strtoull(seed, NULL, 10) : 1) * 0x9E3779B97F4A7C15ull + 1;
    node *top = add_node(root, -1);
    if (!top->is_dir)
        die("%s is not a directory", root);
    scan(root, top);
    active = 1;
}

static void ensure_init(void)
{
    pthread_once(&once, init);
}

/* ---- paths ----------------------------------------------------------------------------------- */

/* The absolute path of (dirfd, path) into out, with "//", "/./" and a trailing "/" or "/."
 * collapsed; 0 if it cannot be made. */
static int normalise_path(int dirfd, const char *path, char *out)
{
    char buf[PATH_MAX * 2];
    if (path[0] == '/') {
        snprintf(buf, sizeof(buf), "%s", path);
    } else {
        char base[PATH_MAX];
        if (dirfd == AT_FDCWD) {
            if (getcwd(base, sizeof(base)) == NULL)
                return 0;
        } else {
            char self[64];
            snprintf(self, sizeof(self), "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(self, base, sizeof(base) - 1);
            if (n < 0)
                return 0;
            base[n] = '\0';
        }
        snprintf(buf, sizeof(buf), "%s/%s", base, path);
    }
    /* Collapse "//", "/./" and a trailing "/" or "/.". */
    size_t j = 0;
    for (size_t i = 0; buf[i] != '\0';) {
        if (buf[i] == '/' && (buf[i + 1] == '/' || buf[i + 1] == '\0')) {
            i++;
            continue;
        }
        if (buf[i] == '/' && buf[i + 1] == '.' && (buf[i + 2] == '/' || buf[i + 2] == '\0')) {
            i += 2;
            continue;
        }
        if (j >= PATH_MAX - 1)
            return 0;
        out[j++] = buf[i++];
    }
    if (j == 0)
        out[j++] = '/';
    out[j] = '\0';
    return 1;
}

/* The absolute, normalised path of (dirfd, path) into out; 0 if it is outside the root. */
static int resolve_path(int dirfd, const char *path, char *out)
{
    if (!normalise_path(dirfd, path, out))
        return 0;
    size_t j = strlen(out);
    if (strncmp(out, root, root_len) != 0 || (out[root_len] != '/' && out[root_len] != '\0'))
        return 0;
    if (strstr(out, "/../") != NULL || (j >= 3 && strcmp(out + j - 3, "/..") == 0))
        die("a path with \"..\" under the root is not modelled: %s", out);
    return 1;
}

/* ---- the boot id ----------------------------------------------------------------------------- */

/* Is (dirfd, path) the boot id? Another way to it under /proc is refused: it would read the
 * machine's own boot. */
static int is_boot_id(int dirfd, const char *path)
{
    char abs[PATH_MAX];
    if (!active || path == NULL || strstr(path, "boot_id") == NULL ||
        !normalise_path(dirfd, path, abs))
        return 0;
    if (strcmp(abs, BOOT_ID_PATH) == 0)
        return 1;
    size_t n = strlen(abs);
    if (strncmp(abs, "/proc/", 6) == 0 && n >= 8 && strcmp(abs + n - 8, "/boot_id") == 0)
        die("the boot id read as %s is not modelled (only as " BOOT_ID_PATH ")", abs);
    return 0;
}

static void write_all(int fd, const void *buf, size_t len, const char *what);

/* A descriptor reading this run's boot id, for open(2) of BOOT_ID_PATH. */
static int boot_id_fd(int flags)
{
    if ((flags & O_ACCMODE) != O_RDONLY)
        die("opening " BOOT_ID_PATH " to write is not modelled");
    int fd = memfd_create("kvq-pc-boot-id", (flags & O_CLOEXEC) ? MFD_CLOEXEC : 0);
    if (fd < 0)
        die("cannot answer the boot id: %s", strerror(errno));
    write_all(fd, boot_id, strlen(boot_id), "the boot id");
    if (lseek(fd, 0, SEEK_SET) != 0)
        die("cannot answer the boot id: %s", strerror(errno));
    __atomic_add_fetch(&boot_reads, 1, __ATOMIC_RELAXED);
    return fd;
}

/* The directory node holding path (under the root), and its last component. */
static node *parent_of(const char *path, const char **name)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t n = (size_t)(slash - path);
    memcpy(dir, path, n);
    dir[n] = '\0';
    *name = slash + 1;
    node *d = find_dir(dir);
    if (d == NULL)
        die("the directory of %s is not under the root", path);
    return d;
}

static void add_op(node *dir, int kind, const char *name, const char *to, node *target)
{
    if (dir->nops == dir->cops) {
        dir->cops = dir->cops ? dir->cops * 2 : 8;
        dir->ops = xrealloc(dir->ops, dir->cops * sizeof(dirop));
    }
    dirop *op = &dir->ops[dir->nops++];
    op->kind = kind;
    op->name = xstrdup(name);
    op->to = to != NULL ? xstrdup(to) : NULL;
    op->target = target;
}

/* ---- file data ------------------------------------------------------------------------------- */

static int64_t cur_size(node *n)
{
    struct stat st;
    if (fstat(n->rfd, &st) != 0)
        die("cannot stat a file: %s", strerror(errno));
    return (int64_t)st.st_size;
}

/* The page as the file holds it now (NULL: all zeros). */
static uint8_t *read_page(node *n, uint64_t no)
{
    uint8_t *p = malloc(PAGE);
    if (p == NULL)
        die("out of memory");
    ssize_t got = pread(n->rfd, p, PAGE, (off_t)(no * PAGE));
    if (got < 0)
        die("cannot read a file: %s", strerror(errno));
    memset(p + got, 0, PAGE - (size_t)got);
    for (size_t i = 0; i < PAGE; i++)
        if (p[i] != 0)
            return p;
    free(p);
    return NULL;
}

static page *get_page(node *n, uint64_t no, int create)
{
    page **b = &n->pages[no % BUCKETS];
    for (page *p = *b; p != NULL; p = p->next)
        if (p->no == no)
            return p;
    if (!create)
        return NULL;
    page *p = xcalloc(1, sizeof(*p));
    p->no = no;
    p->next = *b;
    *b = p;
    n->npages++;
    return p;
}

static void push_img(page *p, uint8_t *img)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 4;
        p->img = xrealloc(p->img, (size_t)p->cap * sizeof(uint8_t *));
    }
    p->img[p->n++] = img;
    if (++total_pages > (size_t)1 << 18)
        die("more than 1 GiB of page images kept: a sync is missing from the workload");
}

static void note_size(node *n, int64_t before, int64_t after)
{
    if (n->nsizes == 0) {
        n->csizes = 8;
        n->sizes = xrealloc(n->sizes, (size_t)n->csizes * sizeof(int64_t));
        n->sizes[n->nsizes++] = before;
    }
    if (after == n->sizes[n->nsizes - 1])
        return;
    if (n->nsizes == n->csizes) {
        n->csizes *= 2;
        n->sizes = xrealloc(n->sizes, (size_t)n->csizes * sizeof(int64_t));
    }
    n->sizes[n->nsizes++] = after;
}

/* Before a change of [off, off+len): keep the durable image of each page not yet changed. */
static void before_change(node *n, uint64_t off, uint64_t len)
{
    if (n->is_volatile || len == 0)
        return;
    for (uint64_t no = off / PAGE; no <= (off + len - 1) / PAGE; no++) {
        page *p = get_page(n, no, 1);
        if (p->n == 0)
            push_img(p, read_page(n, no));
    }
}

/* After it: keep each page as it is now. */
static void after_change(node *n, uint64_t off, uint64_t len)
{
    if (n->is_volatile || len == 0)
        return;
    for (uint64_t no = off / PAGE; no <= (off + len - 1) / PAGE; no++)
        push_img(get_page(n, no, 1), read_page(n, no));
}

static void forget_changes(node *n)
{
    for (size_t b = 0; b < BUCKETS; b++) {
        page *p = n->pages[b];
        while (p != NULL) {
            page *next = p->next;
            for (int i = 0; i < p->n; i++)
                free(p->img[i]);
            total_pages -= (size_t)p->n;
            free(p->img);
            free(p);
            p = next;
        }
        n->pages[b] = NULL;
    }
    n->npages = 0;
    n->nsizes = 0;
}

static void make_durable(node *n)
{
    if (!n->is_dir) {
        forget_changes(n);
        return;
    }
    /* The entries with every operation applied. */
    for (size_t i = 0; i < n->nops; i++) {
        dirop *op = &n->ops[i];
        size_t k;
        for (k = 0; k < n->nents; k++)
            if (strcmp(n->ents[k].name, op->name) == 0)
                break;
        node *moved = k < n->nents ? n->ents[k].target : NULL;
        if (k < n->nents && op->kind != OP_CREATE) {
            free(n->ents[k].name);
            n->ents[k] = n->ents[--n->nents];
        }
        if (op->kind == OP_CREATE) {
            if (k < n->nents)
                n->ents[k].target = op->target;
            else
                add_entry(n, op->name, op->target);
        } else if (op->kind == OP_RENAME && moved != NULL) {
            for (k = 0; k < n->nents; k++)
                if (strcmp(n->ents[k].name, op->to) == 0)
                    break;
            if (k < n->nents)
                n->ents[k].target = moved;
            else
                add_entry(n, op->to, moved);
        }
        free(op->name);
        free(op->to);
    }
    n->nops = 0;
}

/* ---- the cut --------------------------------------------------------------------------------- */

enum { MODE_DROP_ALL, MODE_KEEP_ALL, MODE_RANDOM };
static const char *const mode_names[] = { "drop_all", "keep_all", "random" };

typedef struct cut_stats {
    int mode;
    uint64_t pages_pending, pages_reverted, pages_torn, dirops_pending, dirops_dropped;
    uint64_t files, dirs, volatile_kept, volatile_emptied, sizes_reverted;
} cut_stats;

static uint64_t pick(int mode, uint64_t n) /* an index in [0, n) */
{
    if (n <= 1 || mode == MODE_DROP_ALL)
        return 0;
    if (mode == MODE_KEEP_ALL)
        return n - 1;
    return below(n);
}

static void write_all(int fd, const void *buf, size_t len, const char *what)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t w = r_write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            die("cannot write %s: %s", what, strerror(errno));
        p += w;
        len -= (size_t)w;
    }
}

static void put_file(node *n, const char *path, cut_stats *cs)
{
    int fd = r_open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, n->mode | 0600);
    if (fd < 0)
        die("cannot create %s: %s", path, strerror(errno));
    int64_t now = cur_size(n);
    int64_t size = now;
    if (n->is_volatile) {
        int empty = shm_policy == 'e' || (shm_policy == 0 && below(2) == 0) ||
                    (shm_policy == 'o' && strstr(path, shm_only) == NULL);
        if (empty) {
            size = 0;
            cs->volatile_emptied++;
        } else {
            cs->volatile_kept++;
        }
    } else if (n->nsizes > 0) {
        size = n->sizes[pick(cs->mode, (uint64_t)n->nsizes)];
        if (size != n->sizes[n->nsizes - 1])
            cs->sizes_reverted++;
    }
    static uint8_t buf[1 << 16];
    for (int64_t off = 0; off < size; off += (int64_t)sizeof(buf)) {
        size_t want = (size_t)(size - off < (int64_t)sizeof(buf) ? size - off : (int64_t)sizeof(buf));
        ssize_t got = off < now ? pread(n->rfd, buf, want, (off_t)off) : 0;
        if (got < 0)
            die("cannot read a file: %s", strerror(errno));
        memset(buf + got, 0, want - (size_t)got);
        write_all(fd, buf, want, path);
    }
    if (!n->is_volatile) {
        for (size_t b = 0; b < BUCKETS; b++) {
            for (page *p = n->pages[b]; p != NULL; p = p->next) {
                cs->pages_pending++;
                uint64_t k = pick(cs->mode, (uint64_t)p->n);
                if (k + 1 < (uint64_t)p->n)
                    cs->pages_reverted++;
                int64_t off = (int64_t)(p->no * PAGE);
                if (off >= size)
                    continue;
                size_t len = (size_t)(size - off < PAGE ? size - off : PAGE);
                static const uint8_t zeros[PAGE];
                const uint8_t *img = p->img[k] != NULL ? p->img[k] : zeros;
                /* Torn: the page was being written back at the cut, and the disk wrote only
                 * some of its 512-byte sectors (one random page in four of those caught between
                 * two states, in the random mode). */
                static uint8_t torn[PAGE];
                if (cs->mode == MODE_RANDOM && k + 1 < (uint64_t)p->n && below(4) == 0) {
                    const uint8_t *next = p->img[k + 1] != NULL ? p->img[k + 1] : zeros;
                    for (size_t sec = 0; sec < PAGE; sec += SECTOR)
                        memcpy(torn + sec, below(2) ? next + sec : img + sec, SECTOR);
                    img = torn;
                    cs->pages_torn++;
                }
                if (pwrite(fd, img, len, (off_t)off) != (ssize_t)len)
                    die("cannot write %s: %s", path, strerror(errno));
            }
        }
    }
    cs->files++;
    r_close(fd);
}

static void put_dir(node *d, const char *path, cut_stats *cs)
{
    if (r_mkdir(path, d->mode | 0700) != 0)
        die("cannot create %s: %s", path, strerror(errno));
    cs->dirs++;
    /* The durable entries, then a prefix of the operations since. */
    size_t keep = (size_t)pick(cs->mode, d->nops + 1);
    cs->dirops_pending += d->nops;
    cs->dirops_dropped += d->nops - keep;
    d->nops = keep;
    make_durable(d); /* the process ends with the cut: the model may be changed */
    for (size_t i = 0; i < d->nents; i++) {
        char p[PATH_MAX];
        if (snprintf(p, sizeof(p), "%s/%s", path, d->ents[i].name) >= (int)sizeof(p))
            die("path too long: %s", path);
        if (d->ents[i].target->is_dir)
            put_dir(d->ents[i].target, p, cs);
        else
            put_file(d->ents[i].target, p, cs);
    }
}

static void cut(const char *why)
{
    cut_stats cs = { 0 };
    cs.mode = (int)below(4);
    if (cs.mode == 3)
        cs.mode = MODE_RANDOM;
    node *top = find_dir(root);
    put_dir(top, out_dir, &cs);
    if (stats_path[0] != '\0') {
        char line[512];
        int n = snprintf(line, sizeof(line),
                         "cut=%s events=%llu mode=%s files=%llu dirs=%llu pages_pending=%llu "
                         "pages_reverted=%llu pages_torn=%llu sizes_reverted=%llu "
                         "dirops_pending=%llu "
                         "dirops_dropped=%llu volatile_kept=%llu volatile_emptied=%llu "
                         "boot_reads=%llu\n",
                         why, (unsigned long long)events, mode_names[cs.mode],
                         (unsigned long long)cs.files, (unsigned long long)cs.dirs,
                         (unsigned long long)cs.pages_pending,
                         (unsigned long long)cs.pages_reverted,
                         (unsigned long long)cs.pages_torn,
                         (unsigned long long)cs.sizes_reverted,
                         (unsigned long long)cs.dirops_pending,
                         (unsigned long long)cs.dirops_dropped,
                         (unsigned long long)cs.volatile_kept,
                         (unsigned long long)cs.volatile_emptied,
                         (unsigned long long)__atomic_load_n(&boot_reads, __ATOMIC_RELAXED));
        int fd = r_open(stats_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
            die("cannot write %s: %s", stats_path, strerror(errno));
        write_all(fd, line, (size_t)n, stats_path);
        r_close(fd);
    }
    _exit(PC_EXIT_CUT);
}

/* Counts a modifying operation; at the chosen one, cuts before it (returns only if not). */
static int event_before(void)
{
    events++;
    if (cut_at != 0 && events == cut_at) {
        if (below(2) == 0)
            cut("before_op");
        return 1; /* cut after it */
    }
    return 0;
}

static void event_after(int cut_now)
{
    if (cut_now)
        cut("after_op");
}

void kvq_pc_cut_now(void);
void kvq_pc_cut_now(void)
{
    ensure_init();
    if (!active)
        return;
    pthread_mutex_lock(&mu);
    cut("asked");
}

/* ---- the interposed calls -------------------------------------------------------------------- */

static node *tracked(int fd)
{
    if (!active || fd < 0 || fd >= MAX_FDS)
        return NULL;
    return __atomic_load_n(&fd_node[fd], __ATOMIC_ACQUIRE);
}

static void set_fd(int fd, node *n)
{
    if (fd < 0)
        return;
    if (fd >= MAX_FDS)
        die("descriptor %d beyond the layer's table", fd);
    __atomic_store_n(&fd_node[fd], n, __ATOMIC_RELEASE);
}

static int do_open(int dirfd, const char *path, int flags, mode_t mode)
{
    ensure_init();
    if (is_boot_id(dirfd, path))
        return boot_id_fd(flags);
    char abs[PATH_MAX];
    if (!active || path == NULL || !resolve_path(dirfd, path, abs))
        return r_openat(dirfd, path, flags, mode);
    pthread_mutex_lock(&mu);
    struct stat st;
    int existed = lstat(abs, &st) == 0;
    node *old = existed ? find_node(st.st_dev, st.st_ino) : NULL;
    int creates = !existed && (flags & O_CREAT);
    int truncates = existed && (flags & O_TRUNC) && S_ISREG(st.st_mode) && st.st_size > 0 &&
                    (flags & O_ACCMODE) != O_RDONLY;
    int c = 0;
    if (creates || truncates) {
        c = event_before();
        if (truncates && old != NULL) {
            int64_t size = cur_size(old);
            before_change(old, 0, (uint64_t)size);
        }
    }
    int fd = r_openat(AT_FDCWD, abs, flags, mode);
    int err = errno;
    if (fd >= 0) {
        node *n = add_node(abs, fd);
        if (creates) {
            const char *name;
            node *dir = parent_of(abs, &name);
            add_op(dir, OP_CREATE, name, NULL, n);
        }
        if (truncates && n == old) {
            note_size(n, (int64_t)st.st_size, 0);
            after_change(n, 0, (uint64_t)st.st_size);
        }
        set_fd(fd, n);
    }
    if (creates || truncates)
        event_after(c);
    pthread_mutex_unlock(&mu);
    errno = err;
    return fd;
}

static mode_t mode_arg(int flags, va_list ap)
{
    return ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return do_open(AT_FDCWD, path, flags, m);
}

int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return do_open(AT_FDCWD, path, flags, m);
}

int openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return do_open(dirfd, path, flags, m);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t m = mode_arg(flags, ap);
    va_end(ap);
    return do_open(dirfd, path, flags, m);
}

int creat(const char *path, mode_t mode)
{
    return do_open(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}

int creat64(const char *path, mode_t mode)
{
    return do_open(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, mode);
}

FILE *fopen(const char *path, const char *how)
{
    ensure_init();
    if (is_boot_id(AT_FDCWD, path)) {
        if (strpbrk(how, "wa+") != NULL)
            die("opening " BOOT_ID_PATH " to write is not modelled");
        FILE *f = fmemopen(boot_id, strlen(boot_id), "r");
        if (f == NULL)
            die("cannot answer the boot id: %s", strerror(errno));
        __atomic_add_fetch(&boot_reads, 1, __ATOMIC_RELAXED);
        return f;
    }
    char abs[PATH_MAX];
    if (active && strpbrk(how, "wa+") != NULL && resolve_path(AT_FDCWD, path, abs))
        die("writing through stdio to %s is not modelled", abs);
    return r_fopen(path, how);
}

FILE *fopen64(const char *path, const char *how)
{
    return fopen(path, how);
}

/* A write of len bytes at off (or at the end, or at the file position) through fd. */
typedef ssize_t (*write_fn)(void *arg);

static ssize_t do_write(int fd, uint64_t len, int64_t off, write_fn fn, void *arg)
{
    node *n = tracked(fd);
    if (n == NULL)
        return fn(arg);
    pthread_mutex_lock(&mu);
    int c = event_before();
    int64_t size = cur_size(n);
    if (off < 0) {
        int fl = fcntl(fd, F_GETFL);
        off = (fl >= 0 && (fl & O_APPEND)) ? size : (int64_t)lseek(fd, 0, SEEK_CUR);
        if (off < 0)
            off = size;
    }
    before_change(n, (uint64_t)off, len);
    ssize_t w = fn(arg);
    int err = errno;
    if (w > 0) {
        int64_t after = cur_size(n);
        if (!n->is_volatile)
            note_size(n, size, after);
        after_change(n, (uint64_t)off, (uint64_t)w);
    }
    event_after(c);
    pthread_mutex_unlock(&mu);
    errno = err;
    return w;
}

struct wargs {
    int fd;
    const void *buf;
    size_t len;
    off_t off;
    const struct iovec *iov;
    int cnt;
    int flags;
};

static ssize_t call_write(void *a)
{
    struct wargs *w = a;
    return r_write(w->fd, w->buf, w->len);
}

static ssize_t call_pwrite(void *a)
{
    struct wargs *w = a;
    return r_pwrite(w->fd, w->buf, w->len, w->off);
}

static ssize_t call_writev(void *a)
{
    struct wargs *w = a;
    return r_writev(w->fd, w->iov, w->cnt);
}

static ssize_t call_pwritev(void *a)
{
    struct wargs *w = a;
    return r_pwritev(w->fd, w->iov, w->cnt, w->off);
}

static ssize_t call_pwritev2(void *a)
{
    struct wargs *w = a;
    return r_pwritev2(w->fd, w->iov, w->cnt, w->off, w->flags);
}

static uint64_t iov_len(const struct iovec *iov, int cnt)
{
    uint64_t n = 0;
    for (int i = 0; i < cnt; i++)
        n += iov[i].iov_len;
    return n;
}

ssize_t write(int fd, const void *buf, size_t len)
{
    ensure_init();
    struct wargs a = { .fd = fd, .buf = buf, .len = len };
    return do_write(fd, len, -1, call_write, &a);
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
    ensure_init();
    struct wargs a = { .fd = fd, .buf = buf, .len = len, .off = off };
    return do_write(fd, len, off, call_pwrite, &a);
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off)
{
    return pwrite(fd, buf, len, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    ensure_init();
    struct wargs a = { .fd = fd, .iov = iov, .cnt = cnt };
    return do_write(fd, iov_len(iov, cnt), -1, call_writev, &a);
}

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    ensure_init();
    struct wargs a = { .fd = fd, .iov = iov, .cnt = cnt, .off = off };
    return do_write(fd, iov_len(iov, cnt), off, call_pwritev, &a);
}

ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    return pwritev(fd, iov, cnt, off);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    ensure_init();
    struct wargs a = { .fd = fd, .iov = iov, .cnt = cnt, .off = off, .flags = flags };
    return do_write(fd, iov_len(iov, cnt), off < 0 ? -1 : off, call_pwritev2, &a);
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    return pwritev2(fd, iov, cnt, off, flags);
}

static int do_sync(int fd, int data_only)
{
    ensure_init();
    node *n = tracked(fd);
    if (n == NULL)
        return data_only ? r_fdatasync(fd) : r_fsync(fd);
    pthread_mutex_lock(&mu);
    int c = event_before();
    make_durable(n); /* simulated: the real sync is not needed */
    event_after(c);
    pthread_mutex_unlock(&mu);
    return 0;
}

int fsync(int fd)
{
    return do_sync(fd, 0);
}

int fdatasync(int fd)
{
    return do_sync(fd, 1);
}

static void sync_everything(void)
{
    pthread_mutex_lock(&mu);
    int c = event_before();
    for (node *n = nodes; n != NULL; n = n->next)
        make_durable(n);
    event_after(c);
    pthread_mutex_unlock(&mu);
}

void sync(void)
{
    ensure_init();
    if (active)
        sync_everything();
    else
        r_sync();
}

int syncfs(int fd)
{
    ensure_init();
    if (!active)
        return r_syncfs(fd);
    sync_everything();
    return 0;
}

static int size_op(node *n, int64_t new_size, uint64_t chg_off, uint64_t chg_len, int (*fn)(void *),
                   void *arg)
{
    pthread_mutex_lock(&mu);
    int c = event_before();
    int64_t size = cur_size(n);
    before_change(n, chg_off, chg_len);
    int rc = fn(arg);
    int err = errno;
    if (rc == 0) {
        (void)new_size;
        if (!n->is_volatile)
            note_size(n, size, cur_size(n));
        after_change(n, chg_off, chg_len);
    }
    event_after(c);
    pthread_mutex_unlock(&mu);
    errno = err;
    return rc;
}

struct targs {
    int fd;
    off_t len, off;
    int mode;
};

static int call_ftruncate(void *a)
{
    struct targs *t = a;
    return r_ftruncate(t->fd, t->len);
}

int ftruncate(int fd, off_t len)
{
    ensure_init();
    node *n = tracked(fd);
    if (n == NULL || len < 0)
        return r_ftruncate(fd, len);
    int64_t size = cur_size(n);
    uint64_t lo = (uint64_t)(len < size ? len : size), hi = (uint64_t)(len < size ? size : len);
    struct targs a = { .fd = fd, .len = len };
    return size_op(n, len, lo, hi - lo, call_ftruncate, &a);
}

int ftruncate64(int fd, off_t len)
{
    return ftruncate(fd, len);
}

int truncate(const char *path, off_t len)
{
    ensure_init();
    char abs[PATH_MAX];
    if (active && resolve_path(AT_FDCWD, path, abs))
        die("truncate() by path is not modelled: %s", abs);
    return r_truncate(path, len);
}

int truncate64(const char *path, off_t len)
{
    return truncate(path, len);
}

static int call_fallocate(void *a)
{
    struct targs *t = a;
    return r_fallocate(t->fd, t->mode, t->off, t->len);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
    ensure_init();
    node *n = tracked(fd);
    if (n == NULL || off < 0 || len <= 0)
        return r_fallocate(fd, mode, off, len);
    struct targs a = { .fd = fd, .mode = mode, .off = off, .len = len };
    return size_op(n, -1, (uint64_t)off, (uint64_t)len, call_fallocate, &a);
}

int fallocate64(int fd, int mode, off_t off, off_t len)
{
    return fallocate(fd, mode, off, len);
}

static int call_posix_fallocate(void *a)
{
    struct targs *t = a;
    int rc = r_posix_fallocate(t->fd, t->off, t->len);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return 0;
}

int posix_fallocate(int fd, off_t off, off_t len)
{
    ensure_init();
    node *n = tracked(fd);
    if (n == NULL || off < 0 || len <= 0)
        return r_posix_fallocate(fd, off, len);
    struct targs a = { .fd = fd, .off = off, .len = len };
    int rc = size_op(n, -1, (uint64_t)off, (uint64_t)len, call_posix_fallocate, &a);
    return rc == 0 ? 0 : errno;
}

int posix_fallocate64(int fd, off_t off, off_t len)
{
    return posix_fallocate(fd, off, len);
}

/* Writable shared maps of files under the root: msync on one is refused (below). */
#define MAX_MAPS 256
static struct {
    uintptr_t lo, hi;
} maps[MAX_MAPS];
static int nmaps;

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    ensure_init();
    node *n = tracked(fd);
    if (n == NULL || !(prot & PROT_WRITE) || !(flags & MAP_SHARED))
        return r_mmap(addr, len, prot, flags, fd, off);
    pthread_mutex_lock(&mu);
    if (!n->is_volatile) {
        n->is_volatile = 1;
        forget_changes(n);
    }
    void *m = r_mmap(addr, len, prot, flags, fd, off);
    if (m != MAP_FAILED && nmaps < MAX_MAPS) {
        maps[nmaps].lo = (uintptr_t)m;
        maps[nmaps].hi = (uintptr_t)m + len;
        nmaps++;
    }
    pthread_mutex_unlock(&mu);
    return m;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return mmap(addr, len, prot, flags, fd, off);
}

/* A mapped file is modelled as shared memory, never as durable data: a storage that made a
 * mapped file durable with msync would be tested unsoundly, so that is refused. */
int msync(void *addr, size_t len, int flags)
{
    ensure_init();
    if (active) {
        uintptr_t a = (uintptr_t)addr;
        for (int i = 0; i < nmaps; i++)
            if (a < maps[i].hi && a + len > maps[i].lo)
                die("msync of a file under the root is not modelled (mapped files are treated "
                    "as shared memory, kept or emptied at a cut)");
    }
    return r_msync(addr, len, flags);
}

/* Writes the layer would not see: refused on a file under the root. */
FILE *fdopen(int fd, const char *how)
{
    ensure_init();
    if (tracked(fd) != NULL && strpbrk(how, "wa+") != NULL)
        die("writing through stdio to a file under the root is not modelled");
    return r_fdopen(fd, how);
}

ssize_t copy_file_range(int in, off_t *in_off, int out, off_t *out_off, size_t len,
                        unsigned int flags)
{
    ensure_init();
    if (tracked(out) != NULL)
        die("copy_file_range into a file under the root is not modelled");
    return r_copy_file_range(in, in_off, out, out_off, len, flags);
}

ssize_t sendfile(int out, int in, off_t *off, size_t count)
{
    ensure_init();
    if (tracked(out) != NULL)
        die("sendfile into a file under the root is not modelled");
    return r_sendfile(out, in, off, count);
}

ssize_t sendfile64(int out, int in, off_t *off, size_t count)
{
    return sendfile(out, in, off, count);
}

int close(int fd)
{
    ensure_init();
    if (tracked(fd) != NULL) {
        pthread_mutex_lock(&mu);
        set_fd(fd, NULL);
        int rc = r_close(fd);
        int err = errno;
        pthread_mutex_unlock(&mu);
        errno = err;
        return rc;
    }
    return r_close(fd);
}

static int after_dup(int oldfd, int newfd)
{
    if (newfd >= 0 && active) {
        pthread_mutex_lock(&mu);
        set_fd(newfd, tracked(oldfd));
        pthread_mutex_unlock(&mu);
    }
    return newfd;
}

int dup(int fd)
{
    ensure_init();
    return after_dup(fd, r_dup(fd));
}

int dup2(int fd, int fd2)
{
    ensure_init();
    return after_dup(fd, r_dup2(fd, fd2));
}

int dup3(int fd, int fd2, int flags)
{
    ensure_init();
    return after_dup(fd, r_dup3(fd, fd2, flags));
}

static int do_unlink(int dirfd, const char *path, int flags)
{
    ensure_init();
    char abs[PATH_MAX];
    if (!active || path == NULL || !resolve_path(dirfd, path, abs))
        return r_unlinkat(dirfd, path, flags);
    pthread_mutex_lock(&mu);
    int c = event_before();
    struct stat st;
    if (lstat(abs, &st) == 0 && find_node(st.st_dev, st.st_ino) == NULL)
        add_node(abs, -1); /* keep its content for a cut that brings the entry back */
    int rc = r_unlinkat(AT_FDCWD, abs, flags);
    int err = errno;
    if (rc == 0) {
        const char *name;
        node *dir = parent_of(abs, &name);
        add_op(dir, OP_UNLINK, name, NULL, NULL);
    }
    event_after(c);
    pthread_mutex_unlock(&mu);
    errno = err;
    return rc;
}

int unlink(const char *path)
{
    return do_unlink(AT_FDCWD, path, 0);
}

int unlinkat(int dirfd, const char *path, int flags)
{
    return do_unlink(dirfd, path, flags);
}

int rmdir(const char *path)
{
    return do_unlink(AT_FDCWD, path, AT_REMOVEDIR);
}

static int do_rename(int ofd, const char *from, int nfd, const char *to, unsigned int flags)
{
    ensure_init();
    char a[PATH_MAX], b[PATH_MAX];
    int ia = active && from != NULL && resolve_path(ofd, from, a);
    int ib = active && to != NULL && resolve_path(nfd, to, b);
    if (!ia && !ib)
        return flags ? r_renameat2(ofd, from, nfd, to, flags) : r_renameat(ofd, from, nfd, to);
    if (ia != ib || flags != 0)
        die("a rename into or out of the root, or with flags, is not modelled: %s -> %s", from,
            to);
    pthread_mutex_lock(&mu);
    const char *na, *nb;
    node *da = parent_of(a, &na), *db = parent_of(b, &nb);
    if (da != db)
        die("a rename between directories is not modelled: %s -> %s", a, b);
    struct stat sa;
    if (lstat(a, &sa) == 0 && S_ISDIR(sa.st_mode))
        die("renaming a directory is not modelled: %s", a);
    int c = event_before();
    struct stat st;
    if (lstat(b, &st) == 0 && find_node(st.st_dev, st.st_ino) == NULL)
        add_node(b, -1); /* the file it replaces, for a cut that brings it back */
    int rc = r_renameat(AT_FDCWD, a, AT_FDCWD, b);
    int err = errno;
    if (rc == 0)
        add_op(da, OP_RENAME, na, nb, NULL);
    event_after(c);
    pthread_mutex_unlock(&mu);
    errno = err;
    return rc;
}

int rename(const char *from, const char *to)
{
    return do_rename(AT_FDCWD, from, AT_FDCWD, to, 0);
}

int renameat(int ofd, const char *from, int nfd, const char *to)
{
    return do_rename(ofd, from, nfd, to, 0);
}

int renameat2(int ofd, const char *from, int nfd, const char *to, unsigned int flags)
{
    return do_rename(ofd, from, nfd, to, flags);
}

static int do_mkdir(int dirfd, const char *path, mode_t mode)
{
    ensure_init();
    char abs[PATH_MAX];
    if (!active || path == NULL || !resolve_path(dirfd, path, abs))
        return r_mkdirat(dirfd, path, mode);
    pthread_mutex_lock(&mu);
    int c = event_before();
    int rc = r_mkdirat(AT_FDCWD, abs, mode);
    int err = errno;
    if (rc == 0) {
        const char *name;
        node *dir = parent_of(abs, &name);
        node *n = add_node(abs, -1);
        add_op(dir, OP_CREATE, name, NULL, n);
    }
    event_after(c);
    pthread_mutex_unlock(&mu);
    errno = err;
    return rc;
}

int mkdir(const char *path, mode_t mode)
{
    return do_mkdir(AT_FDCWD, path, mode);
}

int mkdirat(int dirfd, const char *path, mode_t mode)
{
    return do_mkdir(dirfd, path, mode);
}

int link(const char *from, const char *to)
{
    ensure_init();
    char a[PATH_MAX];
    if (active && (resolve_path(AT_FDCWD, from, a) || resolve_path(AT_FDCWD, to, a)))
        die("hard links are not modelled: %s", a);
    return r_link(from, to);
}

int symlink(const char *from, const char *to)
{
    ensure_init();
    char a[PATH_MAX];
    if (active && resolve_path(AT_FDCWD, to, a))
        die("symbolic links are not modelled: %s", a);
    return r_symlink(from, to);
}
