/* kvq export and kvq import: a queue's ready items as JSON lines, one object per item,
 * {"value": V} (and "priority": P on a priority queue), V a string when the value is UTF-8 and
 * {"base64": "..."} otherwise, so that every JSON tool reads them and the bytes come back
 * exactly. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/qops.h"
#include "layers/queue/queue_salvage.h"
#include "util/util.h"

typedef struct export_ctx {
    kvq_queue_type type;
    long n;
    int out_errno;
    int tuple; /* --tuple: "tuple": the value decoded as a packed tuple (text), or null */
    kvq_buf text;
} export_ctx;

static int export_one(kvq_bytes value, int64_t priority, void *payload)
{
    export_ctx *x = payload;
    printf("{\"value\":");
    cli_json_str(stdout, value.data, value.len);
    if (x->tuple) {
        /* The value as the tuple it packs, as text, beside it (import takes the value). */
        int is = cli_tuple_text(&x->text, value.data, value.len);
        printf(",\"tuple\":");
        if (is == 1)
            cli_json_str(stdout, x->text.data, x->text.len);
        else
            printf("null");
    }
    if (x->type == KVQ_QUEUE_PRIORITY)
        printf(",\"priority\":%lld", (long long)priority);
    printf("}\n");
    if (ferror(stdout)) {
        x->out_errno = errno;
        return -2;
    }
    x->n++;
    return 0;
}

typedef struct salvage_ctx {
    export_ctx x;
    const kvq__queue_salvage_report *rep; /* its type is read before the first item */
} salvage_ctx;

static int salvage_one(kvq_bytes value, int64_t priority, void *payload)
{
    salvage_ctx *sx = payload;
    sx->x.type = sx->rep->type;
    return export_one(value, priority, &sx->x) == 0 ? 0 : -2;
}

/* export --salvage: the items a damaged database still gives, read-only (salvage.h). */
static int export_salvage(cli *c, const char *name, int tuple)
{
    if (c->parse_only)
        return CLI_PARSED;
    const char *url = c->db_url != NULL ? c->db_url : getenv("KVQ_DB");
    if (url == NULL)
        url = "./kvq-data";
    signal(SIGPIPE, SIG_IGN);
    kvq__queue_salvage_report rep;
    salvage_ctx sx = { { KVQ_QUEUE_DURABLE, 0, 0, tuple, KVQ_BUF_INIT }, &rep };
    export_ctx *x = &sx.x;
    int err = kvq__queue_salvage(url, name, salvage_one, &sx, &rep);
    kvq_buf_dispose(&x->text);
    if (err == -2 || fflush(stdout) != 0) {
        fprintf(stderr, "kvq export: cannot write to standard output (%s) after %ld items\n",
                strerror(x->out_errno != 0 ? x->out_errno : errno), x->n);
        return EXIT_DB;
    }
    if (err != 0)
        return cli_fail(err, "export --salvage failed");
    int damaged = rep.skipped > 0 || rep.st.gaps > 0 || rep.st.bad_rows > 0 ||
                  rep.st.log_skipped_records > 0;
    fprintf(stderr, "kvq export: %ld items; %s%llu skipped as damaged%s%s\n", x->n,
            rep.skipped_exact ? "" : "at least ", (unsigned long long)rep.skipped,
            rep.st.where[0] != '\0' ? ": " : "", rep.st.where);
    return damaged ? EXIT_DB : 0;
}

int cmd_export(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    int rc = cli_need_name("export", argc, argv, &name);
    if (rc != 0)
        return rc;
    int tuple = 0, salvage = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--tuple") == 0)
            tuple = 1;
        else if (strcmp(argv[i], "--salvage") == 0)
            salvage = 1;
        else
            return cli_usage("export", "unexpected argument '%s'", cli_arg(argv[i]));
    }
    if (salvage)
        return export_salvage(c, name, tuple);
    cli_queue *q;
    kvq_queue_settings info;
    rc = cli_open_named(c, name, &q, &info);
    if (rc != 0)
        return rc;
    signal(SIGPIPE, SIG_IGN);
    export_ctx x = { info.type, 0, 0, tuple, KVQ_BUF_INIT };
    int err = kvq_queue_iterate(cli_queue_queue(q), export_one, &x);
    cli_queue_close(q);
    kvq_buf_dispose(&x.text);
    if (err == -2 || fflush(stdout) != 0) {
        fprintf(stderr, "kvq export: cannot write to standard output (%s) after %ld items\n",
                strerror(x.out_errno != 0 ? x.out_errno : errno), x.n);
        return EXIT_DB;
    }
    if (err != 0)
        return cli_fail(err, "export failed");
    fprintf(stderr, "kvq export: %ld items\n", x.n);
    return 0;
}

/* ---- import: a small reader of the lines export writes ------------------------------------- */

typedef struct jp {
    const char *p, *end;
    const char *err;
} jp;

static void ws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n'))
        j->p++;
}

static int expect(jp *j, char ch)
{
    ws(j);
    if (j->p >= j->end || *j->p != ch) {
        static char msg[32];
        snprintf(msg, sizeof(msg), "'%c' expected", ch);
        j->err = msg;
        return -1;
    }
    j->p++;
    return 0;
}

static int hex4(jp *j, unsigned *out)
{
    if (j->end - j->p < 4)
        return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = j->p[i];
        int d = ch >= '0' && ch <= '9'   ? ch - '0'
                : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                         : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (unsigned)d;
    }
    j->p += 4;
    *out = v;
    return 0;
}

static int put_utf8(kvq_buf *b, unsigned cp)
{
    uint8_t u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (uint8_t)(0xc0 | cp >> 6);
        u[1] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (uint8_t)(0xe0 | cp >> 12);
        u[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
        u[2] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (uint8_t)(0xf0 | cp >> 18);
        u[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
        u[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
        u[3] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return kvq_buf_append(b, u, n);
}

/* A JSON string into b (UTF-8). */
static int jstring(jp *j, kvq_buf *b)
{
    b->len = 0;
    if (expect(j, '"') != 0)
        return -1;
    while (j->p < j->end && *j->p != '"') {
        unsigned char ch = (unsigned char)*j->p++;
        int rc = 0;
        if (ch < 0x20) {
            j->err = "a control character inside a string";
            return -1;
        }
        if (ch != '\\') {
            rc = kvq_buf_append(b, &ch, 1);
        } else if (j->p >= j->end) {
            break;
        } else {
            char e = *j->p++;
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
            const char *k = strchr(from, e);
            if (e != '\0' && k != NULL) {
                rc = kvq_buf_append(b, to + (k - from), 1);
            } else if (e == 'u') {
                unsigned cp, lo;
                if (hex4(j, &cp) != 0) {
                    j->err = "a bad \\u escape";
                    return -1;
                }
                if (cp >= 0xd800 && cp <= 0xdbff && j->end - j->p >= 6 && j->p[0] == '\\' &&
                    j->p[1] == 'u') {
                    j->p += 2;
                    if (hex4(j, &lo) != 0 || lo < 0xdc00 || lo > 0xdfff) {
                        j->err = "a bad surrogate pair";
                        return -1;
                    }
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                } else if (cp >= 0xd800 && cp <= 0xdfff) {
                    j->err = "a lone surrogate (values that are not UTF-8 are {\"base64\": ...})";
                    return -1;
                }
                rc = put_utf8(b, cp);
            } else {
                j->err = "a bad escape";
                return -1;
            }
        }
        if (rc != 0)
            return -1;
    }
    if (j->p >= j->end) {
        j->err = "an unterminated string";
        return -1;
    }
    j->p++;
    return 0;
}

static int b64val(int ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    return ch == '+' ? 62 : ch == '/' ? 63 : -1;
}

/* Decodes base64 (with its padding) from text into out. */
static int unbase64(const kvq_buf *text, kvq_buf *out)
{
    out->len = 0;
    if (text->len % 4 != 0)
        return -1;
    for (size_t i = 0; i < text->len; i += 4) {
        const uint8_t *s = text->data + i;
        int pad = (s[3] == '=') + (s[2] == '=' && s[3] == '=');
        int v[4];
        for (int k = 0; k < 4; k++)
            v[k] = k >= 4 - pad ? 0 : b64val(s[k]);
        if (v[0] < 0 || v[1] < 0 || v[2] < 0 || v[3] < 0 || (pad > 0 && i + 4 != text->len))
            return -1;
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
                     (uint32_t)v[3];
        uint8_t b[3] = { (uint8_t)(w >> 16), (uint8_t)(w >> 8), (uint8_t)w };
        if (kvq_buf_append(out, b, (size_t)(3 - pad)) != 0)
            return -1;
    }
    return 0;
}

/* One line: {"value": V, "priority": P} in any order; priority optional. */
static int parse_line(kvq_bytes line, kvq_buf *value, int64_t *prio, int *have_prio,
                      const char **err)
{
    jp j = { (const char *)line.data, (const char *)line.data + line.len, NULL };
    kvq_buf key = KVQ_BUF_INIT, tmp = KVQ_BUF_INIT;
    int have_value = 0, rc = expect(&j, '{');
    *have_prio = 0;
    while (rc == 0) {
        ws(&j);
        if (j.p < j.end && *j.p == '}' && !have_value)
            break;
        rc = jstring(&j, &key);
        if (rc == 0)
            rc = expect(&j, ':');
        if (rc != 0)
            break;
        ws(&j);
        if (key.len == 5 && memcmp(key.data, "value", 5) == 0 && j.p < j.end && *j.p == '"') {
            rc = jstring(&j, value);
            have_value = 1;
        } else if (key.len == 5 && memcmp(key.data, "value", 5) == 0) {
            rc = expect(&j, '{');
            if (rc == 0)
                rc = jstring(&j, &key);
            if (rc == 0 && !(key.len == 6 && memcmp(key.data, "base64", 6) == 0)) {
                j.err = "a value object holds \"base64\" alone";
                rc = -1;
            }
            if (rc == 0)
                rc = expect(&j, ':');
            if (rc == 0)
                rc = jstring(&j, &tmp);
            if (rc == 0 && unbase64(&tmp, value) != 0) {
                j.err = "bad base64";
                rc = -1;
            }
            if (rc == 0)
                rc = expect(&j, '}');
            have_value = 1;
        } else if (key.len == 5 && memcmp(key.data, "tuple", 5) == 0) {
            /* export --tuple's text of the value: informative, the value is what is pushed. */
            if (j.end - j.p >= 4 && memcmp(j.p, "null", 4) == 0)
                j.p += 4;
            else
                rc = jstring(&j, &tmp);
        } else if (key.len == 8 && memcmp(key.data, "priority", 8) == 0) {
            /* An integer, read within the line (which has no terminating NUL). */
            int neg = j.p < j.end && *j.p == '-';
            const char *d = j.p + neg;
            uint64_t v = 0;
            int digits = 0, overflow = 0;
            while (d < j.end && *d >= '0' && *d <= '9') {
                overflow |= v > (UINT64_MAX - 9) / 10;
                v = v * 10 + (uint64_t)(*d++ - '0');
                digits++;
            }
            if (digits == 0 || overflow || v > (uint64_t)INT64_MAX + (uint64_t)neg) {
                j.err = "a bad priority (an integer)";
                rc = -1;
            } else {
                j.p = d;
                *prio = neg ? (int64_t)(0 - v) : (int64_t)v;
                *have_prio = 1;
            }
        } else {
            j.err = "an unknown key (an item is {\"value\": ..., \"priority\": ..., "
                    "\"tuple\": ...})";
            rc = -1;
        }
        if (rc != 0)
            break;
        ws(&j);
        if (j.p < j.end && *j.p == ',') {
            j.p++;
            continue;
        }
        rc = expect(&j, '}');
        break;
    }
    ws(&j);
    if (rc == 0 && j.p != j.end) {
        j.err = "text after the object";
        rc = -1;
    }
    if (rc == 0 && !have_value) {
        j.err = "no \"value\"";
        rc = -1;
    }
    *err = j.err != NULL ? j.err : "out of memory";
    kvq_buf_dispose(&key);
    kvq_buf_dispose(&tmp);
    return rc;
}

int cmd_import(cli *c, int argc, char **argv)
{
    const char *name = NULL;
    int rc = cli_need_name("import", argc, argv, &name);
    if (rc != 0)
        return rc;
    if (argc > 2)
        return cli_usage("import", "unexpected argument '%s'", cli_arg(argv[2]));
    cli_queue *q;
    kvq_queue_settings info;
    rc = cli_open_named(c, name, &q, &info);
    if (rc != 0)
        return rc;
    kvq_workq *w = NULL;
    int err = info.type == KVQ_QUEUE_PRIORITY ? cli_queue_workq(q, &info, &w) : 0;
    cli_reader r;
    cli_reader_init(&r, STDIN_FILENO, '\n', NULL);
    kvq_buf value = KVQ_BUF_INIT;
    long pushed = 0;
    const char *perr = NULL;
    while (err == 0) {
        kvq_bytes line;
        int got = cli_reader_next(&r, -1, &line);
        if (got == CLI_READ_EOF)
            break;
        if (got == CLI_READ_ERROR) {
            err = kvq__error(KVQ_EIO, "cannot read standard input: %s", strerror(errno));
            break;
        }
        if (got == CLI_READ_TOO_LONG) {
            err = kvq__error(KVQ_EVALUE_TOO_LARGE, "line %ld is too long", r.records);
            break;
        }
        if (got != CLI_READ_RECORD)
            continue;
        int64_t prio = 0;
        int have_prio = 0;
        if (parse_line(line, &value, &prio, &have_prio, &perr) != 0) {
            err = kvq__error(KVQ_EINVAL, "line %ld is not an item of kvq export: %s", r.records,
                             perr);
            break;
        }
        if (have_prio && info.type != KVQ_QUEUE_PRIORITY) {
            err = kvq__error(KVQ_EINVAL, "line %ld has a priority; '%s' is a %s queue",
                             r.records, name, cli_type_name(info.type));
            break;
        }
        /* One transaction per item, in order, each pushed exactly once. */
        if (w != NULL) {
            kvq_workq_push_options po = KVQ_WORKQ_PUSH_OPTIONS_INIT;
            po.priority = prio;
            err = kvq_workq_push(NULL, w, value.data, value.len, &po);
        } else {
            err = cli_queue_push(q, value.data, value.len, 0);
        }
        pushed += err == 0;
    }
    cli_reader_dispose(&r);
    kvq_buf_dispose(&value);
    cli_queue_close(q);
    if (err != 0) {
        char what[160];
        snprintf(what, sizeof(what), "import stopped (%ld items pushed before it)", pushed);
        return cli_fail(err, what);
    }
    if (c->json)
        printf("{\"imported\":%ld}\n", pushed);
    else
        fprintf(stderr, "kvq import: %ld items\n", pushed);
    return 0;
}
