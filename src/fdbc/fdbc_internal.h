/* What the files of libkvq_fdb_c.so (src/fdbc) share. Never installed. */
#ifndef KVQ_FDBC_INTERNAL_H
#define KVQ_FDBC_INTERNAL_H

/* FoundationDB's message for an error code (fdb_errors.c): never NULL, static. */
const char *kvq__fdbc_message(int code);

#endif /* KVQ_FDBC_INTERNAL_H */
