/* compare.h — `herd compare` (compare.c): algorithms side by side. */
#ifndef HERD_CLI_COMPARE_H
#define HERD_CLI_COMPARE_H

/* argv[1] is "compare"; returns the exit status. */
int herd__cli_compare(int argc, char **argv);

#endif
