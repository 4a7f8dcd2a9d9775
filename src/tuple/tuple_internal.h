/* Internals of the tuple layer shared by its files. */
#ifndef KVQ_TUPLE_INTERNAL_H
#define KVQ_TUPLE_INTERNAL_H

#include "kvq/tuple.h"

/* Unpacks data[start..len) as kvq_tuple_unpack does, but reports byte offsets counted from
 * data[0] (so a subspace's key is described as the caller sees it). start <= len. */
int kvq__tuple_unpack_from(kvq_tuple **out, const uint8_t *data, size_t len, size_t start);

#endif /* KVQ_TUPLE_INTERNAL_H */
