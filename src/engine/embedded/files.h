/* Helpers for the files of a database directory (files.c), for the engine and its storages. */
#ifndef KVQ_EMB_FILES_H
#define KVQ_EMB_FILES_H

#include "util/util.h"

/* dir/name, allocated with kvq__malloc; NULL when out of memory. */
char *emb_path_join(const char *dir, const char *name);
/* Sets and returns the kvq error for errno err: "what path: reason". */
int emb_errno_error(int err, const char *what, const char *path);
/* fsync of a directory, so that the entries created in it are durable. */
int emb_fsync_dir(const char *dir);
/* 1 when dir is a directory with no entries, else 0. */
int emb_dir_is_empty(const char *dir);
/* Undoes a create that failed: removes everything inside dir (never following a symbolic link
 * out of it), and dir itself when remove_dir. For a directory the failed create made, or found
 * empty: whatever is in it is that create's. */
void emb_dir_undo(const char *dir, int remove_dir);

/* An embedded database's URL: a directory, "log:DIR" (a new database on the log store, the
 * default) or "sqlite:DIR" (a new database on the older SQLite storage). */
enum { EMB_URL_PLAIN, EMB_URL_LOG, EMB_URL_SQLITE };
/* Which of the three url is. */
int emb_url_kind(const char *url);
/* The directory url names (url without its prefix). */
const char *emb_url_dir(const char *url);

#endif /* KVQ_EMB_FILES_H */
