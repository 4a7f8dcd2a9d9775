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

#endif /* KVQ_EMB_FILES_H */
