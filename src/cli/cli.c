/* The kvq command: the command table, global options and the dispatch to a command. */
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
static const cli_cmd commands[] = {
    { "create", "NAME [--type fifo|priority|durable] [--lease D] [--max-deliveries N] [--exist-ok] [--adopt]",
      "create a queue (durable by default)",
      "  --type T     fifo (FoundationDB's queue recipe), priority (the priority queue recipe)\n"
      "               or durable (versionstamped keys with push and pop counters)\n"
      "  --lease D    lease of receive and consume (default 30s)\n"
      "  --max-deliveries N  deliveries before an item goes to the dead letters (default 5;\n"
      "               0: never)\n"
      "  --exist-ok   succeed if the queue exists with this type (its settings stay);\n"
      "               also spelled --if-not-exists\n"
      "  --adopt      the subspace (NAME,) already holds a queue of this type written by\n"
      "               another program: name it (without it, a subspace holding any key is\n"
      "               refused: it may be the application's own data)\n"
      "durations: milliseconds, or with a unit: 500ms, 30s, 1.5s, 5m, 1h\n",
      cmd_create },
    { "alter", "NAME [--lease D] [--max-deliveries N]",
      "change a durable or priority queue's lease and max deliveries",
      "  --lease D    the lease of receive and consume from now on (500ms, 30s, 5m)\n"
      "  --max-deliveries N  deliveries before the dead letters (0: never)\n",
      cmd_alter },
    { "delete", "NAME", "delete a queue: its items, counters and bookkeeping, and its name",
      "  keys of the application that share the subspace (NAME,) are left as they are\n",
      cmd_delete },
    { "queues", "", "list the queues: type, length, in flight, delayed, dead, oldest age", NULL,
      cmd_queues },
    { "push", "NAME [--priority P] [--delay D] [--dedup KEY] [--flush D] [VALUE... | --file PATH...]",
      "push values: the arguments, whole files, or else one per line of standard input",
      "  --priority P  the priority (priority queues; an integer, default 0)\n"
      "  --delay D     invisible to receive for D (durable and priority; 500ms, 30s, 5m)\n"
      "  --dedup KEY   enqueue only if KEY was not pushed within the dedup window (one value)\n"
      "  --file PATH   push the whole file as one value (any bytes; '-': standard input)\n"
      "  --flush D     standard input: commit what was read at most D after its first line\n"
      "                arrived (default 200ms), so a slow stream (tail -f) is not held back\n"
      "  -0            standard input holds NUL-terminated values (values with newlines)\n"
      "values: up to 100,000 bytes each. Lines end at \\n (a \\r before it is kept). Lines\n"
      "are committed 100 per transaction; SIGINT or SIGTERM commits what was read, then exits\n"
      "130 or 143 (a last line cut by the signal, with no newline, is not pushed; its size is\n"
      "said). On a failure nothing after the failed value is pushed, and the message says\n"
      "how many were pushed before it, N (tail -n +N+1 resumes at the failed one).\n",
      cmd_push },
    { "pop", "NAME [-n K] [--max] [--tuple]", "pop up to K items (default 1) and print them",
      "  -n K         pop up to K items, K from 1 to 100,000 (1,000 per transaction; with\n"
      "               --max, one)\n"
      "  --max        priority queues: pop the highest priority (default: the lowest)\n"
      "  --tuple      print each value decoded as the packed tuple it holds (FoundationDB's\n"
      "               recipes pack theirs): (\"a\", 1); b\"...\" for a value that is not one\n"
      "a pop is destructive, at most once: an item written is gone from the queue, whatever\n"
      "the reader does with it. To a pipe, pop waits until the reader has read what it wrote;\n"
      "when the reader goes away first, or a write fails, pop says how many popped items were\n"
      "lost and exits 141. A reader that read items and threw them away (head -1 reads\n"
      "kilobytes at once) cannot be seen. To feed another program at least once, use receive\n"
      "and ack, or consume (which acks an item once its reader has read it).\n",
      cmd_pop },
    { "peek", "NAME [--max] [--tuple]", "print the next item without popping it",
      "  --max        priority queues: the highest priority\n"
      "  --tuple      the value decoded as a packed tuple (as pop --tuple)\n",
      cmd_peek },
    { "len", "NAME", "print the number of items", NULL, cmd_len },
    { "list", "NAME [--limit N | --in-flight | --delayed] [--tuple]",
      "print the items in order without popping them (or those in flight, or delayed)",
      "  --limit N      at most N items\n"
      "  --in-flight    the leased items, the lease ending soonest first: TOKEN, seconds until\n"
      "                 the lease ends, deliveries, value (ack or nack the TOKEN to settle it)\n"
      "  --delayed      the delayed items, due soonest first: seconds until due, deliveries,\n"
      "                 value\n"
      "  --tuple        the values decoded as packed tuples (as pop --tuple)\n",
      cmd_list },
    { "clear", "NAME", "remove every item, whatever its state; print how many (the queue stays)",
      "  ready, in flight (their leases end), delayed and dead items alike; stats counts them\n"
      "  as cleared\n",
      cmd_clear },
    { "watch", "NAME [--timeout MS]", "wait until something is pushed, then print the length (durable queues)",
      "  --timeout MS give up after MS milliseconds (exit 1)\n", cmd_watch },
    { "stats", "[NAME] [--watch] [--prometheus]",
      "a queue's figures (every queue's without NAME): length, counters, leases, dead letters",
      "  --watch       refresh every second (with rates) until Ctrl-C\n"
      "  --prometheus  Prometheus's text exposition format, one sample per queue and figure\n"
      "with --json, every key is present, null where it does not apply\n",
      cmd_stats },
    { "receive", "NAME [--lease D] [--wait D] [-n K]",
      "receive ready items with a lease; print TOKEN and value for each",
      "  --lease D    the lease (default: the queue's, else 30s); ack, nack or extend it\n"
      "               with the TOKEN before it ends, or the item is delivered again\n"
      "  --wait D     when nothing is ready, wait up to D for an item (woken by a push,\n"
      "               a delayed item falling due or a lease ending; it does not poll)\n"
      "  -n K         up to K items, one lease each, received 100 per transaction; --json\n"
      "               prints an array\n",
      cmd_receive },
    { "ack", "NAME TOKEN...", "acknowledge received items: they are deleted",
      "  several TOKENs: acknowledged in one transaction (per 1,000); a token whose lease\n"
      "  ended or was settled changes nothing and does not stop the others; every failure is\n"
      "  reported, and the exit status is that of the first\n",
      cmd_ack },
    { "nack", "NAME TOKEN [--delay MS]", "give a received item back (now or after MS)",
      "  --delay MS   ready again only after MS milliseconds\n", cmd_nack },
    { "extend", "NAME TOKEN [--lease MS]", "renew a lease; print the new TOKEN",
      "  --lease MS   the lease now ends MS milliseconds from now (default: the queue's)\n",
      cmd_extend },
    { "backup", "DIR", "a consistent copy of the database (open or not) into a new directory",
      "  every key read in one snapshot while producers and consumers go on; a database too\n"
      "  large to read within one transaction's 5 seconds is refused (copy its directory with\n"
      "  the programs stopped instead)\n",
      cmd_backup },
    { "check", "", "read and verify every key and value, and each queue's counters",
      "  exit 0 when all is well; 3 on damage, naming it, with what to do (docs/errors.md)\n",
      cmd_check },
    { "export", "NAME [--tuple] [--salvage]",
      "print the ready items as JSON lines, in queue order (for kvq import)",
      "  each line: {\"value\": V} (and \"priority\": P on a priority queue); V is a string,\n"
      "  or {\"base64\": ...} for a value that is not UTF-8. Items in flight, delayed or dead\n"
      "  are not exported. The count goes to standard error.\n"
      "  --tuple  each line also holds \"tuple\": the value decoded as a packed tuple, as\n"
      "           text (as pop --tuple), or null; import takes the value and ignores it\n"
      "  --salvage  from a damaged database (embedded engine): every item that can still be\n"
      "           read, the files opened read-only and never repaired; the items skipped are\n"
      "           counted on standard error, with what is damaged; exit 3 when any was\n"
      "           skipped (docs/errors.md, 'A damaged database')\n",
      cmd_export },
    { "import", "NAME", "push the JSON lines of kvq export (standard input), in order",
      "  each item pushed exactly once, one transaction each; on a bad line nothing after it\n"
      "  is pushed and the message gives its number and the count pushed\n",
      cmd_import },
    { "dlq", "list|redrive|purge NAME",
      "list the dead letters, move them back to the queue, or delete them", NULL, cmd_dlq },
    { "consume", "NAME [--workers N] [--exec CMD [--raw]] [--drain] [--nack-delay MS] [--at-most-once [--batch K]]",
      "hand each item to standard output or a command, at least once (durable and priority queues)",
      "  --workers N  consumer threads (default 1); with --exec, commands run at once\n"
      "               (at least once, each worker also has its next item in hand)\n"
      "  --exec CMD   run CMD (with /bin/sh, or directly when it is a program and plain\n"
      "               words) for each item, the item on its standard input\n"
      "               as pop prints it (the value, then a newline), with $KVQ_QUEUE,\n"
      "               $KVQ_DELIVERIES, $KVQ_LEASE (its token), $KVQ_WORKER and $KVQ_DB set; it\n"
      "               never outlives kvq (killed with it, even by SIGKILL)\n"
      "  --raw        with --exec: the value's bytes alone, no newline\n"
      "  --drain      stop once nothing is ready (default: run until SIGINT/SIGTERM)\n"
      "  --nack-delay MS  a failed item is ready again after MS milliseconds (default 1000);\n"
      "               after the queue's max deliveries (create prints it) it goes to the dead\n"
      "               letters\n"
      "  --ack        at least once, the default: each item is received with a lease and acked\n"
      "               once its command succeeded (or, to a pipe, once the reader has read it)\n"
      "  --at-most-once  pop batches instead (durable queues): faster, but an item popped is\n"
      "               gone even if its command fails or kvq is killed (the rest of its\n"
      "               batch is still handed over)\n"
      "  --batch K    with --at-most-once: items popped per transaction (default 10)\n"
      "exit: 0 (also when stopped by SIGTERM); 130 on SIGINT (Ctrl-C); 5 when an item's\n"
      "command failed; 141 when standard output was closed\n",
      cmd_consume },
    { "bench", "[--quick] [--items N] [--threads N]",
      "measure push and pop throughput of each queue type", NULL, cmd_bench },
    { "demo",
      "[--producers P] [--consumers C] [--items N] [--batch K] [--queue NAME] [--progress MS]",
      "producers and consumers on a durable queue, verified exactly-once",
      "  --producers P  producer threads (default 8)\n"
      "  --consumers C  consumer threads (default 4)\n"
      "  --items N      items in all (default 100000)\n"
      "  --batch K      items per consumer transaction (default 100)\n"
      "  --progress MS  a progress line this often (default 1s; 0: none)\n",
      cmd_demo },
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

const cli_cmd *cli_find(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

void cli_help(FILE *f, const cli_cmd *cmd)
{
    fprintf(f, "usage: kvq [--db URL] [--json] %s %s\n\n%s\n", cmd->name, cmd->args, cmd->summary);
    if (cmd->help != NULL)
        fprintf(f, "\noptions:\n%s", cmd->help);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: kvq [--db URL] [--json] [-0] [--read-only] COMMAND [ARGS...]\n"
               "       kvq --help | --version | COMMAND --help\n\n"
               "Durable, transactional queues. URL is a directory (the embedded engine; default\n"
               "$KVQ_DB or ./kvq-data) or fdb:[cluster-file]. sqlite:DIR (or KVQ_STORAGE=sqlite)\n"
               "makes a new database on the older SQLite storage, kept for the databases made\n"
               "with it; log:DIR names the default storage; an existing one keeps its storage.\n"
               "\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nexit codes: 0 ok, 1 empty queue (or timed out), 2 usage, 3 database or I/O error,\n"
               "4 no such queue (or no database), 5 the work failed (a command of consume --exec,\n"
               "the demo's check), 130/143 stopped by SIGINT/SIGTERM after committing what was\n"
               "read, 141 standard output closed\n\n"
               "-0: values end with NUL (push's input; pop, peek, list, receive, consume output).\n"
               "--read-only: read a database you cannot write.\n"
               "Options go before a command's values: after the first value of push, every\n"
               "argument is a value; '--' ends the options (kvq push q -- -h pushes \"-h\").\n");
}

int cli_main(cli *c, int argc, char **argv)
{
    int i = 1, version = 0;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--version") == 0) {
            version = 1;
            continue;
        }
        if (strcmp(a, "--json") == 0) {
            c->json = 1;
        } else if (strcmp(a, "-0") == 0 || strcmp(a, "--null") == 0) {
            c->nul = 1;
        } else if (strcmp(a, "--read-only") == 0) {
            c->read_only = 1;
        } else if (strcmp(a, "--db") == 0) {
            if (i + 1 >= argc)
                return cli_usage(NULL, "--db needs a URL");
            c->db_url = argv[++i];
        } else if (strncmp(a, "--db=", 5) == 0) {
            c->db_url = a + 5;
        } else if (a[0] == '-') {
            return cli_usage(NULL, "unknown option '%s'", a);
        } else {
            break;
        }
    }
    cli_json_errors(c->json);
    if (version) {
        if (c->json)
            printf("{\"version\":\"%s\"}\n", kvq_version());
        else
            printf("kvq %s\n", kvq_version());
        return 0;
    }
    if (i >= argc) {
        usage(stderr);
        cli_json_error(KVQ_EINVAL, "usage", "missing the COMMAND (kvq --help lists them)");
        return EXIT_USAGE;
    }
    const cli_cmd *cmd = cli_find(argv[i]);
    if (cmd == NULL)
        return cli_usage(NULL, "unknown command '%s'", argv[i]);
    /* Global options and --help are also taken after the command, but never from a push's
     * values: after NAME, the first argument that is not an option (or an option's argument)
     * starts them, and from there on every argument is a value. */
    int is_push = strcmp(cmd->name, "push") == 0, operands = 0;
    for (int j = i + 1; j < argc; j++) {
        if (strcmp(argv[j], "--") == 0)
            break;
        if (is_push && argv[j][0] != '-' && ++operands == 2)
            break;
        if (is_push && (strcmp(argv[j], "--priority") == 0 || strcmp(argv[j], "--delay") == 0 ||
                        strcmp(argv[j], "--dedup") == 0 || strcmp(argv[j], "--flush") == 0 ||
                        strcmp(argv[j], "--file") == 0)) {
            j++;
            continue;
        }
        if ((strcmp(argv[j], "--help") == 0 || strcmp(argv[j], "-h") == 0) &&
            !(is_push && operands > 0)) {
            cli_help(stdout, cmd);
            return 0;
        }
        /* Global options are accepted after the command too. */
        if (strcmp(argv[j], "--json") == 0 || strcmp(argv[j], "-0") == 0 ||
            strcmp(argv[j], "--null") == 0 || strcmp(argv[j], "--read-only") == 0) {
            if (strcmp(argv[j], "--json") == 0)
                c->json = 1;
            else if (strcmp(argv[j], "--read-only") == 0)
                c->read_only = 1;
            else
                c->nul = 1;
            memmove(&argv[j], &argv[j + 1], (size_t)(argc - j - 1) * sizeof(*argv));
            argc--;
            j--;
        } else if (strcmp(argv[j], "--db") == 0 && j + 1 < argc) {
            c->db_url = argv[j + 1];
            memmove(&argv[j], &argv[j + 2], (size_t)(argc - j - 2) * sizeof(*argv));
            argc -= 2;
            j--;
        }
    }
    cli_json_errors(c->json);
    cli_set_value_end(c->nul ? '\0' : '\n');
    int rc = cmd->run(c, argc - i, argv + i);
    kvq_db_close(c->db);
    c->db = NULL;
    free(c->undo_dir); /* a create that succeeded keeps what it made */
    c->undo_dir = NULL;
    if (fflush(stdout) != 0 && rc == 0)
        rc = EXIT_DB;
    return rc;
}
