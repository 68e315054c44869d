/* eval.h — `herd eval` and `herd export` (eval.c): the model a checkpoint
 * keeps, scored on the test set or written out as named tensors. */
#ifndef HERD_CLI_EVAL_H
#define HERD_CLI_EVAL_H

/* argv[1] is "eval"; returns the exit status. */
int herd__cli_eval(int argc, char **argv);
/* argv[1] is "export"; version goes into the files' metadata. */
int herd__cli_export(int argc, char **argv, const char *version);

#endif
