/* Error names and messages, generated from the one list in kvq/error.h, and the per-thread
 * detail that kvq_last_error returns. */
#include <stdio.h>
#include <string.h>

#include "kvq/error.h"
#include "util/util.h"

const char *kvq_strerror(int err)
{
    switch (err) {
    case 0:
        return "success";
#define KVQ__ERRMSG(suffix, num, name, msg) \
    case num:                               \
        return msg;
        KVQ_ERROR_MAP(KVQ__ERRMSG)
#undef KVQ__ERRMSG
    default:
        return "unknown error code";
    }
}

const char *kvq_errname(int err)
{
    switch (err) {
    case 0:
        return "success";
#define KVQ__ERRNAME(suffix, num, name, msg) \
    case num:                                \
        return name;
        KVQ_ERROR_MAP(KVQ__ERRNAME)
#undef KVQ__ERRNAME
    default:
        return "unknown";
    }
}

bool kvq_error_maybe_committed(int err)
{
    return err == KVQ_ECOMMIT_UNKNOWN_RESULT || err == KVQ_ECLUSTER_VERSION_CHANGED;
}

bool kvq_error_retryable_not_committed(int err)
{
    switch (err) {
    case KVQ_ETRANSACTION_TOO_OLD:
    case KVQ_EFUTURE_VERSION:
    case KVQ_ENOT_COMMITTED:
    case KVQ_EPROCESS_BEHIND:
    case KVQ_EDATABASE_LOCKED:
    case KVQ_EPROXY_MEMORY_LIMIT_EXCEEDED:
    case KVQ_EBATCH_TRANSACTION_THROTTLED:
    case KVQ_EGRV_PROXY_MEMORY_LIMIT_EXCEEDED:
    case KVQ_ETAG_THROTTLED:
    case KVQ_EPROXY_TAG_THROTTLED:
    case KVQ_ETRANSACTION_THROTTLED_HOT_SHARD:
    case KVQ_ETRANSACTION_REJECTED_RANGE_LOCKED:
    case KVQ_EUNKNOWN_TENANT:
        return true;
    default:
        return false;
    }
}

bool kvq_error_retryable(int err)
{
    return kvq_error_maybe_committed(err) || kvq_error_retryable_not_committed(err);
}

/* The detail is per thread, so that concurrent callers never see each other's messages. */
static _Thread_local struct {
    int code;
    char msg[512];
} last;

int kvq__verror(int err, const char *fmt, va_list ap)
{
    last.code = err;
    if (fmt == NULL) {
        snprintf(last.msg, sizeof(last.msg), "%s", kvq_strerror(err));
        return err;
    }
    int n = vsnprintf(last.msg, sizeof(last.msg), fmt, ap);
    if (n < 0)
        snprintf(last.msg, sizeof(last.msg), "%s", kvq_strerror(err));
    /* Keep the detail on one line. */
    for (char *p = last.msg; *p != '\0'; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    return err;
}

int kvq__error(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kvq__verror(err, fmt, ap);
    va_end(ap);
    return err;
}

void kvq__error_clear(void)
{
    last.code = 0;
    last.msg[0] = '\0';
}

const char *kvq_last_error(void)
{
    return last.msg;
}

int kvq_last_error_code(void)
{
    return last.code;
}

const char *kvq_version(void)
{
    return KVQ_VERSION_STRING;
}
