/* Internals of the tuple layer shared by its files. */
#ifndef KVQ_TUPLE_INTERNAL_H
#define KVQ_TUPLE_INTERNAL_H

#include "kvq/tuple.h"

/* Unpacks data[start..len) as kvq_tuple_unpack does, but reports byte offsets counted from
 * data[0] (so a subspace's key is described as the caller sees it). start <= len. */
int kvq__tuple_unpack_from(kvq_tuple **out, const uint8_t *data, size_t len, size_t start);

/* Writers of single elements, for layers that pack many keys of one layout (a prefix, then the
 * same elements with other values): each writes at p the bytes kvq_tuple_pack would write for
 * that element and returns their number. p must have room for KVQ__TUPLE_INT_MAX bytes (an
 * integer) or 2 * n + 2 (a byte string of n bytes, each 0x00 escaped). */
#define KVQ__TUPLE_INT_MAX 9
size_t kvq__tuple_put_int(uint8_t *p, int64_t v);
size_t kvq__tuple_put_bytes(uint8_t *p, const uint8_t *bytes, size_t n);

#endif /* KVQ_TUPLE_INTERNAL_H */
