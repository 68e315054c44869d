/* model_cmd.h — `herd model` (model_cmd.c): a model's layers, shapes,
 * parameters and FLOPs from its description. */
#ifndef HERD_CLI_MODEL_CMD_H
#define HERD_CLI_MODEL_CMD_H

/* argv[1] is "model"; returns the exit status. */
int herd__cli_model(int argc, char **argv);

#endif
