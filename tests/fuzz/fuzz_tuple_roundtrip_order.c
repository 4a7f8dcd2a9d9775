/* Fuzz target: the input's first byte splits the rest into two encodings. When both decode,
 * their canonical re-encodings must order (memcmp, a prefix first) exactly as kvq_tuple_compare
 * orders the tuples, the comparison must be antisymmetric, and the two encodings concatenated
 * must decode to the two tuples' elements one after the other. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *rest = data + 1;
    size_t nrest = size - 1;
    size_t na = data[0] % (nrest + 1), nb = nrest - na;
    kvq_tuple *ta = NULL, *tb = NULL;
    kvq_buf pa = KVQ_BUF_INIT, pb = KVQ_BUF_INIT, both = KVQ_BUF_INIT;
    if (kvq_tuple_unpack(&ta, rest, na) != 0 || kvq_tuple_unpack(&tb, rest + na, nb) != 0)
        goto out;
    if (fuzz_canonical(&pa, ta) != 0 || fuzz_canonical(&pb, tb) != 0)
        goto out;
    size_t ca = kvq_tuple_get_count(ta), cb = kvq_tuple_get_count(tb);
    const kvq_tuple_elem *ea = kvq_tuple_get_elem(ta, 0), *eb = kvq_tuple_get_elem(tb, 0);
    int by_bytes = fuzz_key_order(pa.data, pa.len, pb.data, pb.len);
    int by_tuples = kvq_tuple_compare(ea, ca, eb, cb);
    if (by_bytes != by_tuples) {
        fprintf(stderr, "order mismatch: bytes %d, tuples %d\n", by_bytes, by_tuples);
        abort();
    }
    FUZZ_CHECK(kvq_tuple_compare(eb, cb, ea, ca) == -by_tuples);

    /* pack(a) ++ pack(b) is pack(a ++ b). */
    FUZZ_CHECK(kvq_buf_append(&both, pa.data, pa.len) == 0);
    FUZZ_CHECK(kvq_buf_append(&both, pb.data, pb.len) == 0);
    kvq_tuple *tab = NULL;
    FUZZ_CHECK(kvq_tuple_unpack(&tab, both.data, both.len) == 0);
    FUZZ_CHECK(kvq_tuple_get_count(tab) == ca + cb);
    FUZZ_CHECK(kvq_tuple_compare(kvq_tuple_get_elem(tab, 0), ca, ea, ca) == 0);
    FUZZ_CHECK(kvq_tuple_compare(kvq_tuple_get_elem(tab, ca), cb, eb, cb) == 0);
    kvq_tuple_destroy(tab);
out:
    kvq_tuple_destroy(ta);
    kvq_tuple_destroy(tb);
    kvq_buf_dispose(&pa);
    kvq_buf_dispose(&pb);
    kvq_buf_dispose(&both);
    return 0;
}
