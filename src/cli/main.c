/* The kvq command's entry point (kept apart so that the argument fuzzer can link the rest). */
#include "cli/cli.h"

int main(int argc, char **argv)
{
    cli c = { 0 };
    return cli_main(&c, argc, argv);
}
