/* Readable forms of bytes and tuples (kvq_bytes_format, kvq_tuple_format). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvq/tuple.h"
#include "util/util.h"

static const char HEX[] = "0123456789abcdef";

/* Appends bytes as printable text; quote (0: none) is written as \xNN too. */
static int put_printable(kvq_buf *out, const uint8_t *p, size_t n, int quote)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t c = p[i];
        int rc;
        if (c == '\\') {
            rc = kvq_buf_append(out, "\\\\", 2);
        } else if (c >= 0x20 && c < 0x7f && c != quote) {
            rc = kvq_buf_append(out, &c, 1);
        } else {
            char x[4] = { '\\', 'x', HEX[c >> 4], HEX[c & 15] };
            rc = kvq_buf_append(out, x, 4);
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int put_str(kvq_buf *out, const char *s)
{
    return kvq_buf_append(out, s, strlen(s));
}

/* The shortest %g form of d that reads back to the same double (or float, when is_float). */
static void shortest(char *buf, size_t cap, double d, int is_float)
{
    if (isnan(d)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(d)) {
        snprintf(buf, cap, d < 0 ? "-inf" : "inf");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, d);
        double back = strtod(buf, NULL);
        if (is_float ? (float)back == (float)d : back == d)
            break;
    }
    /* A whole number still reads as a floating-point one. */
    if (strpbrk(buf, ".eE") == NULL && strlen(buf) + 3 < cap)
        strcat(buf, ".0");
}

static int format_elems(kvq_buf *out, const kvq_tuple_elem *elems, size_t count, int depth);

static int format_elem(kvq_buf *out, const kvq_tuple_elem *e, int depth)
{
    char num[64];
    switch (e->type) {
    case KVQ_TUPLE_NULL:
        return put_str(out, "null");
    case KVQ_TUPLE_BYTES:
    case KVQ_TUPLE_STRING: {
        if (e->v.bytes.data == NULL && e->v.bytes.len > 0)
            return kvq__error(KVQ_EINVAL, "kvq_tuple_format: an element has NULL data and "
                                          "length %zu",
                              e->v.bytes.len);
        int rc = put_str(out, e->type == KVQ_TUPLE_BYTES ? "b\"" : "\"");
        if (rc == 0)
            rc = put_printable(out, e->v.bytes.data, e->v.bytes.len, '"');
        return rc != 0 ? rc : put_str(out, "\"");
    }
    case KVQ_TUPLE_NESTED: {
        if (depth + 1 > KVQ_TUPLE_MAX_DEPTH)
            return kvq__error(KVQ_EINVAL, "kvq_tuple_format: nested tuples deeper than %d levels",
                              KVQ_TUPLE_MAX_DEPTH);
        if (e->v.nested.elems == NULL && e->v.nested.count > 0)
            return kvq__error(KVQ_EINVAL, "kvq_tuple_format: a nested element has NULL "
                                          "elements and count %zu",
                              e->v.nested.count);
        return format_elems(out, e->v.nested.elems, e->v.nested.count, depth + 1);
    }
    case KVQ_TUPLE_INT:
        snprintf(num, sizeof(num), "%lld", (long long)e->v.i);
        return put_str(out, num);
    case KVQ_TUPLE_UINT:
        snprintf(num, sizeof(num), "%llu", (unsigned long long)e->v.u);
        return put_str(out, num);
    case KVQ_TUPLE_NEG_UINT:
        snprintf(num, sizeof(num), e->v.u ? "-%llu" : "%llu", (unsigned long long)e->v.u);
        return put_str(out, num);
    case KVQ_TUPLE_FLOAT:
        shortest(num, sizeof(num) - 1, (double)e->v.f, 1);
        strcat(num, "f");
        return put_str(out, num);
    case KVQ_TUPLE_DOUBLE:
        shortest(num, sizeof(num), e->v.d, 0);
        return put_str(out, num);
    case KVQ_TUPLE_BOOL:
        return put_str(out, e->v.b ? "true" : "false");
    case KVQ_TUPLE_UUID: {
        char *p = num;
        p += sprintf(p, "UUID(");
        for (int i = 0; i < 16; i++) {
            if (i == 4 || i == 6 || i == 8 || i == 10)
                *p++ = '-';
            *p++ = HEX[e->v.uuid[i] >> 4];
            *p++ = HEX[e->v.uuid[i] & 15];
        }
        strcpy(p, ")");
        return put_str(out, num);
    }
    case KVQ_TUPLE_VERSIONSTAMP: {
        char *p = num;
        p += sprintf(p, "Versionstamp(");
        if (!e->v.vs.complete) {
            p += sprintf(p, "incomplete");
        } else {
            for (int i = 0; i < 10; i++) {
                *p++ = HEX[e->v.vs.tr[i] >> 4];
                *p++ = HEX[e->v.vs.tr[i] & 15];
            }
        }
        sprintf(p, ", %u)", (unsigned)e->v.vs.user);
        return put_str(out, num);
    }
    default:
        return kvq__error(KVQ_EINVAL, "kvq_tuple_format: unknown element type %d", (int)e->type);
    }
}

static int format_elems(kvq_buf *out, const kvq_tuple_elem *elems, size_t count, int depth)
{
    int rc = put_str(out, "(");
    for (size_t i = 0; rc == 0 && i < count; i++) {
        if (i > 0)
            rc = put_str(out, ", ");
        if (rc == 0)
            rc = format_elem(out, &elems[i], depth);
    }
    return rc != 0 ? rc : put_str(out, ")");
}

/* Ends the text with a NUL outside its length; on failure puts out->len back. */
static int finish_text(kvq_buf *out, size_t start, int rc)
{
    if (rc == 0)
        rc = kvq_buf_grow(out, 1);
    if (rc != 0) {
        out->len = start;
        return rc;
    }
    out->data[out->len] = '\0';
    return 0;
}

int kvq_bytes_format(kvq_buf *out, const uint8_t *data, size_t len)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_bytes_format: out is NULL");
    if (data == NULL && len > 0)
        return kvq__error(KVQ_EINVAL, "kvq_bytes_format: data is NULL and len is %zu", len);
    size_t start = out->len;
    return finish_text(out, start, put_printable(out, data, len, 0));
}

int kvq_tuple_format(kvq_buf *out, const kvq_tuple_elem *elems, size_t count)
{
    if (out == NULL)
        return kvq__error(KVQ_EINVAL, "kvq_tuple_format: out is NULL");
    if (elems == NULL && count > 0)
        return kvq__error(KVQ_EINVAL, "kvq_tuple_format: elems is NULL and count is %zu", count);
    size_t start = out->len;
    return finish_text(out, start, format_elems(out, elems, count, 0));
}
