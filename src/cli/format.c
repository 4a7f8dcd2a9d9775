/* Reading arguments and writing values: integers and durations, UTF-8, JSON strings, values
 * as pop prints them. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

int cli_parse_int(const char *s, long long min, long long max, long long *out)
{
    if (s == NULL || *s == '\0')
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (1 to 4 bytes; no overlongs, surrogates or code
 * points past U+10FFFF), or 0 when the byte at p does not start one. */
size_t cli_utf8_len(const uint8_t *p, size_t n)
{
    uint8_t b = p[0];
    size_t len;
    uint32_t cp;
    if (b < 0x80)
        return 1;
    if (b >= 0xc2 && b <= 0xdf) {
        len = 2;
        cp = b & 0x1f;
    } else if (b >= 0xe0 && b <= 0xef) {
        len = 3;
        cp = b & 0x0f;
    } else if (b >= 0xf0 && b <= 0xf4) {
        len = 4;
        cp = b & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

int cli_parse_ms(const char *s, long long min, long long max, long long *out)
{
    if (s == NULL || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno != 0)
        return -1;
    /* A fraction (1.5s, 0.25m): up to 9 digits, kept as a numerator over 10^digits. */
    long long frac = 0, scale = 1;
    if (*end == '.') {
        end++;
        if (*end < '0' || *end > '9')
            return -1;
        while (*end >= '0' && *end <= '9') {
            if (scale >= 1000000000LL)
                return -1;
            frac = frac * 10 + (*end - '0');
            scale *= 10;
            end++;
        }
    }
    long long unit;
    if (strcmp(end, "") == 0 || strcmp(end, "ms") == 0)
        unit = 1;
    else if (strcmp(end, "s") == 0)
        unit = 1000;
    else if (strcmp(end, "m") == 0)
        unit = 60000;
    else if (strcmp(end, "h") == 0)
        unit = 3600000;
    else
        return -1;
    if (v > max / unit)
        return -1;
    v *= unit;
    /* The fraction must come to whole milliseconds (1.5s is 1500 ms; 1.5ms is refused). */
    if (frac != 0) {
        if ((frac * unit) % scale != 0)
            return -1;
        long long add = frac * unit / scale;
        if (v > max - add)
            return -1;
        v += add;
    }
    if (v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

/* A JSON string of bytes that are UTF-8 where utf8 says so; other bytes as U+FFFD. */
static void json_string(FILE *f, const uint8_t *p, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        unsigned char ch = p[i];
        size_t len = cli_utf8_len(p + i, n - i);
        if (len == 0) {
            fputs("\\ufffd", f);
            i++;
            continue;
        }
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch == '\n')
            fputs("\\n", f);
        else if (ch == '\t')
            fputs("\\t", f);
        else if (ch == '\r')
            fputs("\\r", f);
        else if (ch < 0x20 || ch == 0x7f)
            fprintf(f, "\\u%04x", ch);
        else
            fwrite(p + i, 1, len, f);
        i += len;
    }
    fputc('"', f);
}

static int valid_utf8(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t len = cli_utf8_len(p + i, n - i);
        if (len == 0)
            return 0;
        i += len;
    }
    return 1;
}

void cli_json_str(FILE *f, const uint8_t *p, size_t n)
{
    if (valid_utf8(p, n)) {
        json_string(f, p, n);
        return;
    }
    /* Not UTF-8: a JSON string cannot hold it exactly in a form every parser accepts (a lone
     * surrogate is refused by strict ones), so the bytes go in base64 (docs/kvq.1, JSON OUTPUT). */
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    fputs("{\"base64\":\"", f);
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        fputc(b64[v >> 18 & 63], f);
        fputc(b64[v >> 12 & 63], f);
        fputc(i + 1 < n ? b64[v >> 6 & 63] : '=', f);
        fputc(i + 2 < n ? b64[v & 63] : '=', f);
    }
    fputs("\"}", f);
}

void cli_json_text(FILE *f, const char *s)
{
    json_string(f, (const uint8_t *)s, strlen(s));
}

/* -0: values end with NUL instead of a newline. */
static char value_end = '\n';

void cli_set_value_end(char end)
{
    value_end = end;
}

void cli_print_value(FILE *f, const uint8_t *p, size_t n)
{
    fwrite(p, 1, n, f);
    fputc(value_end, f);
}

int cli_stdout_reader_gone(void)
{
    struct pollfd p = { .fd = STDOUT_FILENO, .events = 0 };
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)) != 0;
}

int cli_stdout_is_pipe(void)
{
    struct stat st;
    return fstat(STDOUT_FILENO, &st) == 0 && S_ISFIFO(st.st_mode);
}

long cli_stdout_unread(void)
{
    int unread = 0;
    if (ioctl(STDOUT_FILENO, FIONREAD, &unread) != 0 || unread < 0)
        return -1;
    return unread;
}


void cli_token_format(const kvq_workq_lease *l, char out[KVQ_WORKQ_TOKEN_LEN + 1])
{
    size_t len;
    if (kvq_workq_lease_format(out, KVQ_WORKQ_TOKEN_LEN + 1, &len, l) != 0)
        out[0] = '\0';
}

/* --tuple: values that did not unpack as a packed tuple (said at the end of the command). */
static long not_tuples;

/* The text of a value as the tuple it packs: kvq_tuple_format's form, ("a", 1); b"..."
 * (kvq_bytes_format) for a value that is not a packed tuple, which no tuple's text is (it always
 * has its parentheses). Returns 1 for a tuple, 0 for another value, -1 out of memory. */
static int tuple_text(kvq_buf *out, const uint8_t *p, size_t n)
{
    out->len = 0;
    kvq_tuple *t = NULL;
    if (kvq_tuple_unpack(&t, p, n) == 0) {
        int rc = kvq_tuple_format(out, kvq_tuple_get_elem(t, 0), kvq_tuple_get_count(t));
        kvq_tuple_destroy(t);
        if (rc == 0)
            return 1;
        out->len = 0;
    }
    not_tuples++;
    /* As kvq_tuple_format writes bytes: printable ASCII as itself, a backslash doubled, a
     * double quote and every other byte as \xNN. */
    if (kvq_buf_grow(out, 4 * n + 3) != 0)
        return -1;
    char *o = (char *)out->data;
    size_t k = 0;
    o[k++] = 'b';
    o[k++] = '"';
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\\') {
            o[k++] = '\\';
            o[k++] = '\\';
        } else if (p[i] >= 0x20 && p[i] <= 0x7e && p[i] != '"') {
            o[k++] = (char)p[i];
        } else {
            static const char hex[] = "0123456789abcdef";
            o[k++] = '\\';
            o[k++] = 'x';
            o[k++] = hex[p[i] >> 4];
            o[k++] = hex[p[i] & 15];
        }
    }
    o[k++] = '"';
    out->len = k;
    return 0;
}

void cli_print_tuple(FILE *f, const uint8_t *p, size_t n)
{
    kvq_buf b = KVQ_BUF_INIT;
    if (tuple_text(&b, p, n) >= 0)
        fwrite(b.data, 1, b.len, f);
    fputc(value_end, f);
    kvq_buf_dispose(&b);
}

void cli_json_tuple(FILE *f, const uint8_t *p, size_t n)
{
    kvq_buf b = KVQ_BUF_INIT;
    int is = tuple_text(&b, p, n);
    if (is == 1) {
        fputs("{\"tuple\":", f);
        json_string(f, b.data, b.len);
    } else {
        fputs("{\"value\":", f);
        cli_json_str(f, p, n);
    }
    fputc('}', f);
    kvq_buf_dispose(&b);
}

int cli_tuple_text(kvq_buf *out, const uint8_t *p, size_t n)
{
    return tuple_text(out, p, n);
}

void cli_tuple_report(const char *cmd)
{
    if (not_tuples > 0)
        fprintf(stderr, "kvq %s: %ld value%s not a packed tuple: printed as b\"...\"\n", cmd,
                not_tuples, not_tuples == 1 ? " was" : "s were");
}
