/* Fuzz target: the kvq command's argument parsing. The input is the command line, arguments
 * separated by NUL bytes (at most 64 of them), after "kvq". It runs through the real entry point
 * (cli_main) in parse-only mode: where a command would open the database, cli_open returns
 * CLI_PARSED instead, so nothing is read or written but the parsing of every command and option.
 * Nothing may crash, hang, leak or read out of bounds, and the result must be one of the exit
 * codes the man page documents for the parsing stage (0 for --help/--version, 2 for a usage
 * error) or CLI_PARSED. Run with -close_fd_mask=2 (the usage messages go to stderr); standard
 * output goes to /dev/null. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

#define MAX_ARGS 64

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    int fd = open("/dev/null", O_WRONLY);
    if (fd >= 0) {
        dup2(fd, 1);
        close(fd);
    }
    /* A command that slipped past parse-only mode must not find a database to change. */
    setenv("KVQ_DB", "/nonexistent/kvq-fuzz-db", 1);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = (char *)"kvq";
    for (size_t at = 0; at <= size && argc <= MAX_ARGS; at += strlen(buf + at) + 1)
        argv[argc++] = buf + at;
    argv[argc] = NULL;
    cli c = { 0 };
    c.parse_only = 1;
    int rc = cli_main(&c, argc, argv);
    if (!(rc == 0 || rc == EXIT_USAGE || rc == CLI_PARSED) || c.db != NULL) {
        fprintf(stderr, "unexpected exit code %d\n", rc);
        abort();
    }
    free(buf);
    return 0;
}
