/* The command's view of the queue registry, which lives in the library (src/layers/named.c):
 * the command's type names and exit-code-friendly wrappers. */
#include <string.h>

#include "cli.h"

const char *cli_qtype_name(cli_qtype t)
{
    switch (t) {
    case QT_FIFO:
        return "fifo";
    case QT_PRIORITY:
        return "priority";
    case QT_DURABLE:
        return "durable";
    default:
        return "none";
    }
}

int cli_qtype_parse(const char *s, cli_qtype *out)
{
    if (strcmp(s, "fifo") == 0)
        *out = QT_FIFO;
    else if (strcmp(s, "priority") == 0)
        *out = QT_PRIORITY;
    else if (strcmp(s, "durable") == 0)
        *out = QT_DURABLE;
    else
        return KVQ_EINVAL;
    return 0;
}

int cli_check_name(const char *name)
{
    return kvq_queue_check_name(name) == 0 ? 0 : KVQ_EINVAL;
}

/* The command's types are the library's (1 fifo, 2 priority, 3 durable). */
static void to_info(const kvq_queue_settings *s, cli_qinfo *out)
{
    out->type = (cli_qtype)s->type;
    out->lease_ms = s->lease_ms;
    out->max_deliveries = s->max_deliveries;
}

int cli_registry_info(kvq_db *db, const char *name, cli_qinfo *out)
{
    kvq_queue_settings s;
    int rc = kvq_queue_get_named(&s, db, name);
    out->type = QT_NONE;
    if (rc == 0)
        to_info(&s, out);
    return rc;
}

int cli_registry_get(kvq_db *db, const char *name, cli_qtype *out)
{
    cli_qinfo info = { QT_NONE, 0, 0 };
    int rc = cli_registry_info(db, name, &info);
    *out = info.type;
    return rc;
}

int cli_registry_create_info(kvq_db *db, const char *name, const cli_qinfo *info)
{
    kvq_queue_settings s = { (kvq_queue_type)info->type, info->lease_ms, info->max_deliveries };
    return kvq_queue_create_named(db, name, &s);
}

int cli_registry_create(kvq_db *db, const char *name, cli_qtype type)
{
    cli_qinfo info = { type, 0, 0 };
    return cli_registry_create_info(db, name, &info);
}

int cli_registry_alter(kvq_db *db, const char *name, int64_t lease_ms, int64_t max_deliveries,
                       cli_qinfo *out)
{
    kvq_queue_settings s;
    int rc = kvq_queue_alter_named(&s, db, name, lease_ms, max_deliveries);
    if (rc == 0)
        to_info(&s, out);
    return rc;
}

int cli_registry_delete(kvq_db *db, const char *name)
{
    return kvq_queue_forget_named(db, name);
}

typedef struct list_arg {
    int (*fn)(const char *name, cli_qtype t, void *arg);
    void *arg;
} list_arg;

static int list_one(const char *name, const kvq_queue_settings *s, void *arg)
{
    list_arg *a = arg;
    return a->fn(name, (cli_qtype)s->type, a->arg);
}

int cli_registry_list(kvq_db *db, int (*fn)(const char *name, cli_qtype t, void *arg), void *arg)
{
    list_arg a = { fn, arg };
    return kvq_queue_list_named(db, list_one, &a);
}
