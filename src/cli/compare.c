/* herd compare — placeholder until the comparison table lands. */
#include "cli/cli.h"

#include <stdio.h>

int herd__cli_compare(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "herd: compare is not written yet\n");
    return 2;
}
