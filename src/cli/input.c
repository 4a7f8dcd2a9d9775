/* Records of standard input (lines, or NUL-terminated with -0) for push and import: read with
 * read(2) behind ppoll(2), so that a reader can stop waiting when input goes idle (to commit
 * what it holds) or when SIGINT or SIGTERM arrives, which are blocked everywhere else. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli/cli.h"
#include "util/util.h"

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    stop_signal = sig;
}

void cli_stop_signals_catch(cli_stop_signals *s)
{
    stop_signal = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &s->old_int);
    sigaction(SIGTERM, &sa, &s->old_term);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, &s->old_mask);
    /* While waiting for input the signals are let through (ppoll's mask). */
    s->wait_mask = s->old_mask;
    sigdelset(&s->wait_mask, SIGINT);
    sigdelset(&s->wait_mask, SIGTERM);
}

int cli_stop_signals_caught(void)
{
    return stop_signal;
}

int cli_stop_signals_poll(cli_stop_signals *s)
{
    if (stop_signal == 0) {
        struct timespec zero = { 0, 0 };
        (void)ppoll(NULL, 0, &zero, &s->wait_mask);
    }
    return stop_signal;
}

void cli_stop_signals_restore(cli_stop_signals *s)
{
    pthread_sigmask(SIG_SETMASK, &s->old_mask, NULL);
    sigaction(SIGINT, &s->old_int, NULL);
    sigaction(SIGTERM, &s->old_term, NULL);
}

void cli_reader_init(cli_reader *r, int fd, char delim, cli_stop_signals *sigs)
{
    memset(r, 0, sizeof(*r));
    r->fd = fd;
    r->delim = delim;
    r->sigs = sigs;
}

void cli_reader_dispose(cli_reader *r)
{
    free(r->buf);
    r->buf = NULL;
}

/* Whether SIGINT or SIGTERM is pending (blocked outside the waits); if so it is taken now, so
 * that cli_stop_signals_caught() names it. */
static int stop_signal_pending(cli_reader *r)
{
    if (r->sigs == NULL)
        return 0;
    sigset_t p;
    if (sigpending(&p) != 0 || (sigismember(&p, SIGINT) != 1 && sigismember(&p, SIGTERM) != 1))
        return 0;
    return cli_stop_signals_poll(r->sigs) != 0;
}

/* Reads what is there (one read of at most max bytes); 1 bytes, 0 end of input, -1 error
 * (errno). */
static int fill(cli_reader *r, size_t max)
{
    if (r->start > 0 && r->start == r->len) {
        r->start = r->len = 0;
    } else if (r->start > 0 && r->len == r->cap) {
        memmove(r->buf, r->buf + r->start, r->len - r->start);
        r->len -= r->start;
        r->start = 0;
    }
    if (r->len == r->cap) {
        size_t cap = r->cap == 0 ? 65536 : r->cap * 2;
        uint8_t *b = realloc(r->buf, cap);
        if (b == NULL) {
            errno = ENOMEM;
            return -1;
        }
        r->buf = b;
        r->cap = cap;
    }
    size_t room = r->cap - r->len < max ? r->cap - r->len : max;
    for (;;) {
        ssize_t n = read(r->fd, r->buf + r->len, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            return 0;
        r->len += (size_t)n;
        return 1;
    }
}

int cli_reader_next(cli_reader *r, int64_t wait_ms, kvq_bytes *out)
{
    for (;;) {
        /* A whole record in the buffer? */
        /* (Nothing buffered yet: buf may still be NULL, where no offset may be taken.) */
        uint8_t *from = r->buf != NULL ? r->buf + r->start : NULL;
        size_t have = r->len - r->start;
        uint8_t *end = have > 0 ? memchr(from, r->delim, have) : NULL;
        if (end != NULL) {
            out->data = from;
            out->len = (size_t)(end - from);
            r->start += out->len + 1;
            r->records++;
            return CLI_READ_RECORD;
        }
        if (have > KVQ_MAX_VALUE_SIZE) {
            /* No need to read the rest of a record that cannot be pushed. */
            out->data = from;
            out->len = have;
            r->records++;
            return CLI_READ_TOO_LONG;
        }
        if (r->eof) {
            if (have == 0)
                return CLI_READ_EOF;
            /* An unterminated last record is a value at a plain end of input, but not when a
             * stop signal came with it: Ctrl-C reaches the writer and kvq at once (one process
             * group), the writer dies in the middle of a line, and the end of input that
             * follows is its death, not the end of its data. The signal is blocked while
             * records are handled (it may be pending, not yet caught) and a ppoll that finds
             * input ready does not take it, so both are looked at. */
            if (r->stopping || stop_signal != 0 || stop_signal_pending(r)) {
                r->partial = have;
                return CLI_READ_SIGNAL;
            }
            /* The last record, without its terminator. */
            out->data = from;
            out->len = have;
            r->start = r->len;
            r->records++;
            return CLI_READ_RECORD;
        }
        /* A stop signal: what the input already holds is read (the whole lines a writer killed
         * by the same Ctrl-C wrote before it died), but no more is waited for; a writer that
         * goes on writing does not keep kvq from stopping either (the signal stays pending
         * while every ppoll finds input ready). */
        if (!r->stopping && (stop_signal != 0 || stop_signal_pending(r))) {
            int unread = 0;
            r->stopping = 1;
            r->drain = ioctl(r->fd, FIONREAD, &unread) == 0 && unread > 0 ? (size_t)unread : 0;
            if (r->drain > CLI_READ_DRAIN_MAX)
                r->drain = CLI_READ_DRAIN_MAX;
        }
        if (r->stopping) {
            if (r->drain == 0) {
                r->partial = have;
                return CLI_READ_SIGNAL;
            }
            int f = fill(r, r->drain);
            if (f < 0)
                return CLI_READ_ERROR;
            if (f == 0)
                r->eof = 1;
            size_t got = r->len - r->start - have;
            r->drain = got < r->drain && f > 0 ? r->drain - got : 0;
            continue;
        }
        struct pollfd p = { .fd = r->fd, .events = POLLIN };
        struct timespec ts, *tp = NULL;
        if (wait_ms >= 0) {
            ts.tv_sec = (time_t)(wait_ms / 1000);
            ts.tv_nsec = (long)(wait_ms % 1000) * 1000000L;
            tp = &ts;
        }
        int n = ppoll(&p, 1, tp, r->sigs != NULL ? &r->sigs->wait_mask : NULL);
        if (n < 0 && errno == EINTR)
            continue; /* a signal: seen at the top of the loop */
        if (n < 0)
            return CLI_READ_ERROR;
        if (n == 0)
            return CLI_READ_IDLE;
        int f = fill(r, SIZE_MAX);
        if (f < 0)
            return CLI_READ_ERROR;
        if (f == 0)
            r->eof = 1;
    }
}
