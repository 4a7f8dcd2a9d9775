/* The log store: the embedded engine's default storage (store.h), shaped like FoundationDB's
 * transaction logs and memory storage engine. A batch is one record of the log (log.h): its
 * version, its mutations and its write-conflict ranges, written with one pwrite by write_commit
 * and made durable by the shared sync. Reads come from memory: each handle keeps the data in a
 * versioned map (vmap.h), brought up to date from the log's new records (written by any
 * process) before it serves a snapshot or starts a write, and keeping the last seconds of
 * versions so that a snapshot can be taken at any version of the window (EMB_STORE_MVCC).
 * Checkpoints (ckpt.h), written by a thread off the commit path, let the log be recycled.
 *
 * Files, in <database>/logstore/: the log's (log-*.seg, spare-*.seg, log.shm, log.lock,
 * log.init), the newest checkpoint ckpt-*.kvq, ckpt.lock (one checkpointer at a time; held
 * shared while a handle loads a checkpoint) and readers.shm (the log position each open
 * writable handle has applied, so that the log is not recycled under a handle that still needs
 * it). Record format and numbers: docs/logstore.md.
 *
 * This file holds opening and closing, snapshots and the table of operations; the records and
 * readers.shm are store_log_apply.c's, checkpoints and the reserve store_log_ckpt.c's, writing
 * store_log_write.c's (store_log_internal.h). */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "engine/embedded/files.h"
#include "engine/embedded/logstore/ckpt.h"
#include "engine/embedded/logstore/store_log.h"
#include "engine/embedded/logstore/store_log_internal.h"
#include "engine/embedded/room.h"
#include "engine/embedded/store_sqlite.h"
#include "kvq/db.h"

/* A checkpoint is written once the log since the last one is larger than this and than the
 * live data (so the log stays within about twice the data, and recovery reads as much). */
#define LS_CKPT_MIN_BYTES (64ull << 20)

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0')
        return dflt;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    return end != v ? (uint64_t)x : dflt;
}

/* The segment size of a new database on a disk with free_bytes free: KVQ__LOG_SEG_DEFAULT, or
 * on a small disk the largest power of two no more than a 32nd of the free space that leaves
 * the database the room it needs (room.h), down to KVQ__LOG_SEG_SMALL: on 16 MiB, 512 KiB
 * segments, and 2.2 MiB of the disk for the data beside the reserves; on 256 MiB, 8 MiB. A
 * segment is written whole before the next is made, so a smaller one costs a file switch (a
 * create and a sync) more often, nothing per commit. */
static uint64_t new_segment_bytes(uint64_t free_bytes)
{
    uint64_t seg = KVQ__LOG_SEG_DEFAULT;
    while (seg > KVQ__LOG_SEG_SMALL &&
           (seg > free_bytes / 32 || KVQ__LOG_NEW_DB_BYTES(seg) > free_bytes))
        seg /= 2;
    return seg;
}

/* A new database's segment size (0: $KVQ_LOGSTORE_SEGMENT_BYTES unset and the free space
 * unknown: the default), or KVQ_ENOSPC when the disk cannot hold even the smallest. */
static int pick_segment_bytes(const char *dir, uint64_t *seg)
{
    struct statvfs v;
    if (*seg != 0 || statvfs(dir, &v) != 0)
        return 0;
    uint64_t free_bytes = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
    *seg = new_segment_bytes(free_bytes);
    if (KVQ__LOG_NEW_DB_BYTES(*seg) > free_bytes)
        return kvq__error(KVQ_ENOSPC,
                          "the disk is full: %s has %.1f MiB free, and a new database needs "
                          "%.1f MiB",
                          dir, (double)free_bytes / (1 << 20),
                          (double)KVQ__LOG_NEW_DB_BYTES(*seg) / (1 << 20));
    return 0;
}

/* The default memory limit: a quarter of the machine's memory. */
static uint64_t default_limit(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    uint64_t ram = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : (4ull << 30);
    return ram / 4;
}

/* ---- open, close ---- */

static void ls_close(emb_store *s)
{
    if (s == NULL)
        return;
    if (s->ckpt_started && !s->read_only) {
        /* A last pass of the applier (up to the window, as always), so that the next open
         * replays less. It leaves the caller's error as it was (a close after a failed open
         * must not hide why the open failed). */
        int had = kvq_last_error_code();
        char why[512];
        snprintf(why, sizeof why, "%s", kvq_last_error());
        if (kvq__ls_do_checkpoint(s, 0, NULL) != 0 || had != 0) {
            if (had != 0)
                kvq__error(had, "%s", why);
            else
                kvq__error_clear();
        }
    }
    if (s->ckpt_started) {
        pthread_mutex_lock(&s->ckpt_mu);
        s->ckpt_stop = 1;
        pthread_cond_signal(&s->ckpt_cv);
        pthread_mutex_unlock(&s->ckpt_mu);
        pthread_join(s->ckpt_thread, NULL);
    }
    if (s->slots) {
        if (s->slot >= 0)
            __atomic_store_n(&s->slots[s->slot].owner, 0, __ATOMIC_RELEASE);
        munmap(s->slots, LS_SLOTS * sizeof(reader_slot));
    }
    kvq__log_close(s->log);
    emb_sqlite_store.close(s->table);
    kvq__vmap_free(s->map);
    kvq__vmap_free(s->ov);
    kvq_buf_dispose(&s->rec);
    while (s->cl_len > 0) {
        kvq__free(s->cl[s->cl_head].packed);
        s->cl_head = (s->cl_head + 1) % s->cl_cap;
        s->cl_len--;
    }
    kvq__free(s->cl);
    kvq__free(s->pins);
    if (s->readers_fd >= 0)
        close(s->readers_fd);
    if (s->ckpt_fd >= 0)
        close(s->ckpt_fd);
    if (s->reserve_fd >= 0)
        close(s->reserve_fd);
    if (s->dir_fd >= 0)
        close(s->dir_fd);
    pthread_mutex_destroy(&s->apply_mu);
    pthread_mutex_destroy(&s->pin_mu);
    kvq__ls_skips_free(s);
    pthread_mutex_destroy(&s->skip_mu);
    pthread_mutex_destroy(&s->ckpt_mu);
    pthread_mutex_destroy(&s->ckpt_write_mu);
    pthread_cond_destroy(&s->ckpt_cv);
    pthread_cond_destroy(&s->pressure_cv);
    kvq__free(s->dir);
    kvq__free(s);
}

/* Does dir hold a log store? */
int kvq__logstore_present(const char *dir)
{
    char *p = emb_path_join(dir, "logstore");
    if (p == NULL)
        return 0;
    struct stat st;
    int yes = stat(p, &st) == 0 && S_ISDIR(st.st_mode);
    kvq__free(p);
    return yes;
}

/* 1 when the directory holds a segment or a checkpoint, 0 when not, -1 (errno set) when it
 * cannot be read: out of descriptors is not a damaged database. */
static int seg_or_ckpt_one(void *arg, const char *name)
{
    int *yes = arg;
    if (strncmp(name, "log-", 4) == 0 || strncmp(name, "ckpt-", 5) == 0 ||
        strcmp(name, "data.db") == 0)
        *yes = 1;
    return *yes;
}

static int has_segment_or_ckpt(int dir_fd)
{
    int yes = 0;
    if (kvq__dir_each(dir_fd, seg_or_ckpt_one, &yes) != 0)
        return -1;
    return yes;
}

/* The table's format file (its presence says that the log store has a table; a log store of
 * the earlier format, whose checkpoints were files, has none). */
#define LS_FORMAT_FILE "format"
#define LS_TABLE_FORMAT 2

static int format_present(emb_store *s)
{
    struct stat st;
    return fstatat(s->dir_fd, LS_FORMAT_FILE, &st, 0) == 0;
}

static int write_format(emb_store *s)
{
    int fd = openat(s->dir_fd, LS_FORMAT_FILE ".tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                    s->mode);
    if (fd < 0)
        return emb_errno_error(errno, "cannot create", "logstore/" LS_FORMAT_FILE);
    char text[32];
    int n = snprintf(text, sizeof text, "%d\n", LS_TABLE_FORMAT);
    int ok = write(fd, text, (size_t)n) == n && fdatasync(fd) == 0;
    int err = errno;
    close(fd);
    if (!ok)
        return emb_errno_error(err, "cannot write", "logstore/" LS_FORMAT_FILE);
    if (renameat(s->dir_fd, LS_FORMAT_FILE ".tmp", s->dir_fd, LS_FORMAT_FILE) != 0 ||
        fsync(s->dir_fd) != 0)
        return emb_errno_error(errno, "cannot write", "logstore/" LS_FORMAT_FILE);
    return 0;
}

static int remove_ckpt_one(void *arg, const char *name)
{
    emb_store *s = arg;
    if (strncmp(name, "ckpt-", 5) == 0 || strcmp(name, "ckpt.tmp") == 0)
        unlinkat(s->dir_fd, name, 0);
    return 0;
}

/* A log store of the earlier format (checkpoint files, no table): its newest checkpoint
 * becomes the table, at the checkpoint's version, replaying the log from the checkpoint's
 * position; then the format file is written and the checkpoint files removed. A crash halfway
 * leaves no format file, so the next open converts again (the table's version says whether the
 * checkpoint is in it already). ckpt.lock is held shared, and the engine's commit lock. */
static int convert_old(emb_store *s, const emb_store_config *cfg)
{
    kvq__vmap *m = kvq__vmap_new(0);
    if (m == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    kvq__ckpt_info ci = { 0 };
    int found = 0;
    int rc = kvq__ckpt_load(s->dir_fd, m, &ci, &found);
    emb_store_config tc = *cfg;
    tc.dir = s->dir;
    tc.create = 1;
    tc.durable = 1;
    if (rc == 0)
        rc = emb_sqlite_store.open((emb_store **)&s->table, &tc);
    emb_store_head head;
    if (rc == 0 && (rc = emb_sqlite_store.write_begin(s->table, &head)) == 0) {
        int64_t had = 0;
        int has_lsn = 0;
        rc = kvq__sqlite_meta_get(s->table, LS_META_LSN, &had, &has_lsn);
        if (rc != 0) {
            /* below */
        } else if (found && head.version < ci.version) {
            kvq__vmap_cursor c;
            kvq_bytes k, v;
            kvq__vmap_cursor_init(&c, m, ci.version, NULL, 0, NULL, 0, 0);
            while (rc == 0 && kvq__vmap_cursor_next(&c, &k, &v))
                rc = emb_sqlite_store.write_put(s->table, k.data, k.len, v.data, v.len);
            if (rc == 0)
                rc = kvq__sqlite_meta_put(s->table, LS_META_LSN, (int64_t)ci.lsn);
            if (rc == 0)
                rc = emb_sqlite_store.write_commit(s->table, ci.version, NULL, 0);
        } else if (!found && !has_lsn) {
            rc = kvq__sqlite_meta_put(s->table, LS_META_LSN, 0);
            if (rc == 0)
                rc = emb_sqlite_store.write_commit(s->table, 0, NULL, 0);
        } else {
            emb_sqlite_store.write_abort(s->table);
        }
        if (rc != 0)
            emb_sqlite_store.write_abort(s->table);
    }
    kvq__vmap_free(m);
    int issued = 0;
    if (rc == 0)
        rc = emb_sqlite_store.sync(s->table, 0, &issued);
    if (rc == 0)
        rc = write_format(s);
    if (rc == 0) {
        kvq__dir_each(s->dir_fd, remove_ckpt_one, s);
        if (fsync(s->dir_fd) != 0)
            rc = emb_errno_error(errno, "cannot sync", s->dir);
    }
    if (rc == 0)
        fprintf(stderr,
                "kvq: converted the log store in %s to the table format (%s%lld)\n", s->dir,
                found ? "its checkpoint at version " : "no checkpoint, version ",
                (long long)(found ? ci.version : 0));
    return rc;
}

/* Opens (or creates, or converts) the table and reads where it stands: its version and the log
 * position its replay starts from. ckpt.lock held shared. */
static int table_open(emb_store *s, const emb_store_config *cfg, int64_t *tver, int64_t *tlsn)
{
    int rc = 0;
    emb_store_config tc = *cfg;
    tc.dir = s->dir;
    tc.durable = !s->read_only;
    if (cfg->create) {
        tc.create = 1;
        rc = emb_sqlite_store.open((emb_store **)&s->table, &tc);
        emb_store_head head;
        if (rc == 0 && (rc = emb_sqlite_store.write_begin(s->table, &head)) == 0) {
            int found = 0;
            int64_t v = 0;
            rc = kvq__sqlite_meta_get(s->table, LS_META_LSN, &v, &found);
            if (rc == 0 && !found)
                rc = kvq__sqlite_meta_put(s->table, LS_META_LSN, 0);
            if (rc == 0)
                rc = emb_sqlite_store.write_commit(s->table, 0, NULL, 0);
            else
                emb_sqlite_store.write_abort(s->table);
        }
        int issued;
        if (rc == 0)
            rc = emb_sqlite_store.sync(s->table, 0, &issued);
        if (rc == 0)
            rc = write_format(s);
    } else if (!format_present(s)) {
        if (s->read_only)
            return kvq__error(KVQ_EUNSUPPORTED,
                              "%s is a log store of the earlier format (checkpoint files, no "
                              "table): open it once read-write to convert it, for instance "
                              "with `kvq --db %.*s stats`",
                              s->dir, (int)(strlen(s->dir) - strlen("/logstore")), s->dir);
        rc = convert_old(s, cfg);
    } else {
        tc.create = 0;
        rc = emb_sqlite_store.open((emb_store **)&s->table, &tc);
    }
    if (rc != 0)
        return rc;
    emb_snap *ts = NULL;
    emb_snap_info ti;
    rc = emb_sqlite_store.snap_open(s->table, 0, &ts, &ti);
    if (rc != 0)
        return rc;
    int found = 0;
    *tver = ti.version;
    rc = kvq__sqlite_snap_meta(ts, LS_META_LSN, tlsn, &found);
    emb_sqlite_store.snap_close(ts);
    if (rc == 0 && !found)
        rc = kvq__error(KVQ_EDAMAGED, "the log store's table in %s has no log position", s->dir);
    return rc;
}

static int ls_open(emb_store **out, const emb_store_config *cfg)
{
    emb_store *s = kvq__calloc(1, sizeof *s);
    if (s == NULL)
        return kvq__error(KVQ_ENOMEM, "out of memory");
    s->dir_fd = s->ckpt_fd = s->readers_fd = s->reserve_fd = -1;
    s->slot = -1;
    s->table_live = UINT64_MAX;
    pthread_mutex_init(&s->apply_mu, NULL);
    pthread_mutex_init(&s->pin_mu, NULL);
    pthread_mutex_init(&s->skip_mu, NULL);
    pthread_mutex_init(&s->ckpt_mu, NULL);
    pthread_mutex_init(&s->ckpt_write_mu, NULL);
    pthread_cond_init(&s->ckpt_cv, NULL);
    pthread_cond_init(&s->pressure_cv, NULL);
    s->read_only = (cfg->opts->flags & KVQ_DB_READ_ONLY) != 0;
    s->durable = cfg->durable;
    s->mode = cfg->opts->file_mode ? cfg->opts->file_mode : 0600;
    s->limit = env_u64("KVQ_LOGSTORE_MEMORY_LIMIT", default_limit());
    s->ckpt_min = env_u64("KVQ_LOGSTORE_CHECKPOINT_BYTES", LS_CKPT_MIN_BYTES);
    s->lag = (int64_t)env_u64("KVQ_LOGSTORE_APPLY_LAG_US", LS_WINDOW);
    s->apply_ms = env_u64("KVQ_LOGSTORE_APPLY_MS", 1000);
    if (s->apply_ms == 0)
        s->apply_ms = 1;
    uint64_t seg = env_u64("KVQ_LOGSTORE_SEGMENT_BYTES", 0);
    int rc = 0;
    s->dir = emb_path_join(cfg->dir, "logstore");
    s->map = kvq__vmap_new(0);
    if (s->dir == NULL || s->map == NULL) {
        rc = kvq__error(KVQ_ENOMEM, "out of memory");
        goto fail;
    }
    if (cfg->create) {
        mode_t dmode = (mode_t)(s->mode | ((s->mode & 0444) >> 2));
        if (mkdir(s->dir, dmode) != 0) {
            if (errno != EEXIST) {
                rc = emb_errno_error(errno, "cannot create", s->dir);
                goto fail;
            }
        } else if ((rc = pick_segment_bytes(cfg->dir, &seg)) != 0) {
            goto fail; /* the engine removes what a failed create made */
        }
        if ((rc = emb_fsync_dir(cfg->dir)) != 0)
            goto fail;
    }
    s->dir_fd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dir_fd < 0) {
        rc = errno == ENOENT
                 ? kvq__error(KVQ_EDAMAGED, "the log store's directory %s is missing", s->dir)
                 : emb_errno_error(errno, "cannot open", s->dir);
        goto fail;
    }
    if (!cfg->create) {
        int has = has_segment_or_ckpt(s->dir_fd);
        if (has < 0) {
            rc = emb_errno_error(errno, "cannot read", s->dir);
            goto fail;
        }
        if (has == 0) {
            rc = kvq__error(KVQ_EDAMAGED, "the log store in %s has neither log nor checkpoint",
                            s->dir);
            goto fail;
        }
    }
    s->ckpt_fd = openat(s->dir_fd, "ckpt.lock",
                        (s->read_only ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, s->mode);
    if (s->ckpt_fd < 0) {
        rc = emb_errno_error(errno, "cannot open", "logstore/ckpt.lock");
        goto fail;
    }
    /* No checkpointer may replace the checkpoint and recycle the log while it is loaded. */
    while (flock(s->ckpt_fd, LOCK_SH) != 0 && errno == EINTR) {
    }
    int64_t tver = 0, tlsn = 0;
    rc = table_open(s, cfg, &tver, &tlsn);
    if (rc == KVQ_ENOSPC && !s->read_only) {
        /* A full disk: SQLite needs room for its -shm and -wal files before anything can be
         * freed. The reserve kept for the applier gives it (it grows back off the commit
         * path). */
        int fd = openat(s->dir_fd, "ckpt.reserve", O_RDWR | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0) {
            off_t keep = st.st_size > (4 << 20) ? st.st_size - (4 << 20) : 0;
            if (ftruncate(fd, keep) == 0) {
                kvq__error_clear();
                emb_sqlite_store.close(s->table);
                s->table = NULL;
                rc = table_open(s, cfg, &tver, &tlsn);
                /* What the table did not take goes back into the reserve at once: left free,
                 * it would let the first commits grow the data on a full disk (the thread
                 * grows the reserve only later). */
                for (off_t to = st.st_size; rc == 0 && to > keep; to -= 64 << 10)
                    if (posix_fallocate(fd, 0, to) == 0)
                        break;
            }
        }
        if (fd >= 0)
            close(fd);
    }
    if (rc == 0) {
        kvq__ls_table_live_update(s);
        s->applied_version = tver;
        s->ckpt_version = tver;
        s->ckpt_lsn = (uint64_t)tlsn;
        s->cl_floor = tver;
        s->table_known = tver;
        __atomic_store_n(&s->applied_lsn, (uint64_t)tlsn, __ATOMIC_RELEASE);
        kvq__log_options lo = { .segment_bytes = seg,
                                .file_mode = s->mode,
                                .read_only = s->read_only };
        pthread_mutex_lock(&s->apply_mu);
        s->replaying = 1;
        rc = kvq__log_open(&s->log, s->dir, &lo, (uint64_t)tlsn, kvq__ls_replay_fn, s);
        if (rc == 0 && s->applied_lsn < kvq__log_first(s->log))
            __atomic_store_n(&s->applied_lsn, kvq__log_first(s->log), __ATOMIC_RELEASE);
        if (rc == 0 && s->ckpt_lsn < kvq__log_first(s->log))
            s->ckpt_lsn = kvq__log_first(s->log);
        if (rc == 0)
            rc = kvq__ls_catch_up_locked(s);
        s->replaying = 0;
        pthread_mutex_unlock(&s->apply_mu);
    }
    /* Registered before a checkpointer may run, so that it keeps what this handle still needs
     * of the log. */
    if (rc == 0)
        rc = kvq__ls_slots_open(s, !s->read_only);
    flock(s->ckpt_fd, LOCK_UN);
    if (rc != 0)
        goto fail;
    /* No transaction of this handle has a read version yet: the conflict log and the versions
     * of the window start from here (a read version from before is answered with 1007). */
    kvq__ls_cl_prune(s, s->applied_version);
    kvq__ls_drop(s);
    /* The replay freed what the log's popped items took: give it back to the system. */
    malloc_trim(0);
    if (!s->read_only) {
        /* A file that cannot be made (a full disk, no descriptor) leaves the store without a
         * reserve: space_short then counts on free space alone. */
        s->reserve_fd = openat(s->dir_fd, "ckpt.reserve", O_RDWR | O_CREAT | O_CLOEXEC, s->mode);
        /* Room the data no longer needs goes back now, before the engine looks at the free
         * space (its own reserve, drain mode); growing it is the thread's. */
        uint64_t want = kvq__ls_reserve_target(s);
        if (kvq__ls_reserve_size(s) > want + want / 4 + kvq__log_segment_bytes(s->log))
            kvq__ls_reserve_release(s, want + want / 8);
        s->reserve_wanted = 1;
        if (pthread_create(&s->ckpt_thread, NULL, kvq__ls_ckpt_main, s) == 0) {
            s->ckpt_started = 1;
        }
    } else if (s->slot >= 0) {
        /* A read-only handle with a slot holds the log back from recycling until it applies
         * it: its thread applies the log of an idle handle now and then (and does nothing
         * else: kvq__ls_checkpoint and the wake-ups are for writable handles). */
        if (pthread_create(&s->ckpt_thread, NULL, kvq__ls_ckpt_main, s) == 0)
            s->ckpt_started = 1;
    }
    /* More of the log than the memory limit allows is not in the table yet (the handles that
     * wrote it stopped before their applier caught up): the table takes it now. */
    if (!s->read_only && s->limit && kvq__vmap_mem(s->map) > s->limit) {
        if (kvq__ls_do_checkpoint(s, 1, NULL) != 0)
            kvq__error_clear();
        kvq__ls_drop(s);
    }
    *out = s;
    return 0;
fail:
    ls_close(s);
    return rc;
}

/* ---- snapshots (store_log_apply.c) ---- */

static int ls_snap_open(emb_store *s, int64_t at, emb_snap **out, emb_snap_info *info)
{
    return kvq__ls_snap_open(s, at, out, info);
}

static void ls_snap_close(emb_snap *sn)
{
    kvq__ls_snap_close(sn);
}

static int ls_get(emb_snap *sn, const uint8_t *key, size_t key_len, kvq_bytes *value, int *present)
{
    return kvq__ls_get(sn, key, key_len, value, present);
}

static int ls_cursor_open(emb_snap *sn,
                          const uint8_t *begin,
                          size_t begin_len,
                          const uint8_t *end,
                          size_t end_len,
                          int reverse,
                          emb_cursor **out)
{
    return kvq__ls_cursor_open(sn, begin, begin_len, end, end_len, reverse, out);
}

static int ls_cursor_next(emb_cursor *c, kvq_bytes *key, kvq_bytes *value, int *has)
{
    return kvq__ls_cursor_next(c, key, value, has);
}

static void ls_cursor_close(emb_cursor *c)
{
    kvq__ls_cursor_close(c);
}

void kvq__logstore_get_stats(emb_store *s, kvq__logstore_stats *out)
{
    if (s == NULL || out == NULL)
        return;
    memset(out, 0, sizeof *out);
    kvq__vmap_stats st;
    kvq__vmap_rdlock(s->map);
    kvq__vmap_get_stats(s->map, &st);
    kvq__vmap_rdunlock(s->map);
    /* the conflict log's size and the applied version move under apply_mu */
    pthread_mutex_lock(&s->apply_mu);
    out->mem = kvq__ls_mem_used(s);
    out->applied_version = s->applied_version;
    pthread_mutex_unlock(&s->apply_mu);
    out->live_bytes = st.live_bytes;
    out->live_keys = st.live_keys;
    out->limit = s->limit;
    out->map_mem = kvq__vmap_mem(s->map);
    out->map_peak = __atomic_load_n(&s->mem_peak, __ATOMIC_RELAXED);
    out->throttled = __atomic_load_n(&s->n_throttled, __ATOMIC_RELAXED);
    out->throttle_us = __atomic_load_n(&s->throttle_us, __ATOMIC_RELAXED);
    out->forced = __atomic_load_n(&s->n_forced, __ATOMIC_RELAXED);
    out->table_live = __atomic_load_n(&s->table_live, __ATOMIC_ACQUIRE);
    out->skips = __atomic_load_n(&s->n_skips, __ATOMIC_RELAXED);
    out->skips_carried = __atomic_load_n(&s->n_skips_carried, __ATOMIC_RELAXED);
    out->rows_walked = __atomic_load_n(&s->n_rows_walked, __ATOMIC_RELAXED);
    out->log_bytes = kvq__log_tail(s->log) - kvq__log_first(s->log);
    out->checkpoints = __atomic_load_n(&s->n_ckpts, __ATOMIC_RELAXED);
    kvq__log_stats ls;
    kvq__log_get_stats(s->log, &ls);
    out->log_syncs = ls.syncs;
    out->log_records = ls.records;
}

const emb_store_ops emb_log_store = {
    .version = EMB_STORE_OPS_VERSION,
    .name = "log",
    .caps = EMB_STORE_MVCC,
    .open = ls_open,
    .close = ls_close,
    .snap_open = ls_snap_open,
    .snap_close = ls_snap_close,
    .get = ls_get,
    .cursor_open = ls_cursor_open,
    .cursor_next = ls_cursor_next,
    .cursor_close = ls_cursor_close,
    .write_begin = kvq__ls_write_begin,
    .write_get = kvq__ls_write_get,
    .write_put = kvq__ls_write_put,
    .write_clear = kvq__ls_write_clear,
    .write_clear_range = kvq__ls_write_clear_range,
    .write_range_bytes = kvq__ls_write_range_bytes,
    .log_check = kvq__ls_log_check,
    .log_prune = kvq__ls_log_prune,
    .write_commit = kvq__ls_write_commit,
    .write_abort = kvq__ls_write_abort,
    .sync = kvq__ls_sync,
    .checkpoint = kvq__ls_checkpoint,
};
