/* kvq backup DIR: a consistent copy of an open database into a new one. Every key and value is
 * read in one read-only transaction (one snapshot, while producers and consumers go on) and
 * written into a new database at DIR in transactions of up to a few megabytes. A database too
 * large to be read within one transaction's 5 seconds is refused rather than copied
 * inconsistently. */
#include <string.h>
#include <sys/stat.h>

#include "cli/qops.h"
#include "util/util.h"

#define READ_PAGE  1000
#define WRITE_MAX  (4u << 20) /* bytes per write transaction, well under the 10 MB limit */

typedef struct chunk {
    kvq_buf keys, vals;
    size_t *offs; /* 4 per pair: key offset, key length, value offset, value length */
    size_t n, cap;
} chunk;

static int chunk_add(chunk *c, kvq_bytes k, kvq_bytes v)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 1024;
        size_t *o = kvq__realloc(c->offs, 4 * cap * sizeof(*o));
        if (o == NULL)
            return kvq__error(KVQ_ENOMEM, "out of memory");
        c->offs = o;
        c->cap = cap;
    }
    c->offs[4 * c->n] = c->keys.len;
    c->offs[4 * c->n + 1] = k.len;
    c->offs[4 * c->n + 2] = c->vals.len;
    c->offs[4 * c->n + 3] = v.len;
    int rc = kvq_buf_append(&c->keys, k.data, k.len);
    if (rc == 0)
        rc = kvq_buf_append(&c->vals, v.data, v.len);
    if (rc == 0)
        c->n++;
    return rc;
}

static int write_chunk(kvq_txn *txn, void *arg)
{
    chunk *c = arg;
    for (size_t i = 0; i < c->n; i++) {
        int rc = kvq_txn_set(txn, c->keys.data + c->offs[4 * i], c->offs[4 * i + 1],
                             c->vals.data + c->offs[4 * i + 2], c->offs[4 * i + 3]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int cmd_backup(cli *c, int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-')
        return cli_usage("backup", "missing the DIR of the copy");
    if (argc > 2)
        return cli_usage("backup", "unexpected argument '%s'", cli_arg(argv[2]));
    const char *dir = argv[1];
    struct stat st;
    if (stat(dir, &st) == 0)
        return cli_usage("backup", "'%s' exists: a backup goes into a new directory",
                         cli_arg(dir));
    int rc = cli_open(c);
    if (rc != 0)
        return rc;
    kvq_db *to = NULL;
    kvq_db_options o = KVQ_DB_OPTIONS_INIT;
    int err = kvq_db_open(&to, dir, &o);
    if (err != 0)
        return cli_fail(err, "cannot create the backup");
    kvq_txn *txn = NULL;
    err = kvq_txn_create(&txn, c->db);
    chunk ch;
    memset(&ch, 0, sizeof(ch));
    unsigned long long keys = 0, bytes = 0;
    kvq_buf begin = KVQ_BUF_INIT;
    static const uint8_t lo = 0x00, hi = 0xff;
    if (err == 0)
        err = kvq_buf_append(&begin, &lo, 1);
    /* One snapshot: every page in the same read-only transaction. */
    while (err == 0) {
        const kvq_kv *kvs;
        size_t n = 0;
        bool more = false;
        err = kvq_txn_get_range(&kvs, &n, &more, txn, begin.data, begin.len, &hi, 1, READ_PAGE,
                                KVQ_SNAPSHOT);
        for (size_t i = 0; err == 0 && i < n; i++) {
            err = chunk_add(&ch, kvs[i].key, kvs[i].value);
            keys++;
            bytes += kvs[i].key.len + kvs[i].value.len;
        }
        if (err == 0 && (ch.keys.len + ch.vals.len >= WRITE_MAX || !more || n == 0) && ch.n > 0) {
            err = kvq_db_transact(to, write_chunk, &ch);
            ch.n = 0;
            ch.keys.len = ch.vals.len = 0;
        }
        if (err != 0 || !more || n == 0)
            break;
        kvq_bytes last = kvs[n - 1].key;
        begin.len = 0;
        err = kvq_buf_append(&begin, last.data, last.len);
        if (err == 0)
            err = kvq_buf_append(&begin, &lo, 1);
    }
    kvq_buf_dispose(&begin);
    kvq_buf_dispose(&ch.keys);
    kvq_buf_dispose(&ch.vals);
    kvq__free(ch.offs);
    kvq_txn_destroy(txn);
    kvq_db_close(to);
    if (err == KVQ_ETRANSACTION_TOO_OLD)
        err = kvq__error(err, "the database could not be read within one transaction's 5 "
                              "seconds, so no consistent copy was made (%s holds a partial "
                              "copy: remove it); stop the programs that use the database and "
                              "copy its directory instead",
                         dir);
    if (err != 0)
        return cli_fail(err, "backup failed");
    if (c->json)
        printf("{\"keys\":%llu,\"bytes\":%llu}\n", keys, bytes);
    else
        printf("%llu keys (%llu bytes) copied into %s\n", keys, bytes, dir);
    return 0;
}
