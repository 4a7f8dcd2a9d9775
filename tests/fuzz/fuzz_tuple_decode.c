/* Fuzz target: decode arbitrary bytes. Nothing may crash, leak or read out of bounds; a refusal
 * is KVQ_ETUPLE or KVQ_ERANGE naming a byte offset; whatever decodes re-packs (canonically) to
 * bytes that decode to an equal tuple and re-pack to themselves, and a subspace decodes the same
 * bytes the same way. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kvq_tuple *t = NULL;
    int rc = kvq_tuple_unpack(&t, data, size);
    if (rc != 0) {
        FUZZ_CHECK(rc == KVQ_ETUPLE || rc == KVQ_ERANGE);
        FUZZ_CHECK(t == NULL);
        FUZZ_CHECK(strstr(kvq_last_error(), "at byte ") != NULL);
    } else {
        size_t n = kvq_tuple_get_count(t);
        const kvq_tuple_elem *e = kvq_tuple_get_elem(t, 0);
        FUZZ_CHECK(n <= size);
        FUZZ_CHECK(kvq_tuple_compare(e, n, e, n) == 0);
        kvq_buf canon = KVQ_BUF_INIT;
        if (fuzz_canonical(&canon, t) == 0) {
            /* The canonical bytes decode to an equal tuple, which packs to the same bytes. */
            kvq_tuple *t2 = NULL;
            FUZZ_CHECK(kvq_tuple_unpack(&t2, canon.data, canon.len) == 0);
            FUZZ_CHECK(kvq_tuple_get_count(t2) == n);
            FUZZ_CHECK(kvq_tuple_compare(kvq_tuple_get_elem(t2, 0), n, e, n) == 0);
            kvq_buf again = KVQ_BUF_INIT;
            FUZZ_CHECK(fuzz_canonical(&again, t2) == 0);
            FUZZ_CHECK(again.len == canon.len && memcmp(again.data, canon.data, canon.len) == 0);
            kvq_buf_dispose(&again);
            kvq_tuple_destroy(t2);
            /* The canonical form is never longer than the input (kvq writes minimal forms). */
            FUZZ_CHECK(canon.len <= size);
            /* The caller-buffer form agrees, and asks for exactly the size it needs. */
            if (fuzz_incomplete_stamps(e, n) == 0) {
                size_t need = 0;
                uint8_t *buf = malloc(canon.len + 1);
                FUZZ_CHECK(buf != NULL);
                if (canon.len > 0)
                    FUZZ_CHECK(kvq_tuple_pack(buf, canon.len - 1, &need, e, n) == KVQ_ENOBUFS &&
                               need == canon.len);
                FUZZ_CHECK(kvq_tuple_pack(buf, canon.len, &need, e, n) == 0 && need == canon.len &&
                           memcmp(buf, canon.data, canon.len) == 0);
                free(buf);
            }
        }
        kvq_buf_dispose(&canon);
    }

    /* A subspace whose raw prefix is the input's first bytes decodes the rest as unpack does. */
    size_t k = size > 0 ? data[0] % (size < 4 ? size + 1 : 5) : 0;
    kvq_subspace *s = NULL;
    FUZZ_CHECK(kvq_subspace_new(&s, data, k, NULL, 0) == 0);
    FUZZ_CHECK(kvq_subspace_contains(s, data, size) == 1);
    kvq_tuple *ts = NULL, *tr = NULL;
    int rs = kvq_subspace_unpack(&ts, s, data, size);
    int rr = kvq_tuple_unpack(&tr, size > 0 ? data + k : NULL, size - k);
    FUZZ_CHECK(rs == rr);
    if (rs == 0)
        FUZZ_CHECK(kvq_tuple_compare(kvq_tuple_get_elem(ts, 0), kvq_tuple_get_count(ts),
                                     kvq_tuple_get_elem(tr, 0), kvq_tuple_get_count(tr)) == 0);
    kvq_tuple_destroy(ts);
    kvq_tuple_destroy(tr);
    kvq_subspace_destroy(s);
    kvq_tuple_destroy(t);
    return 0;
}
