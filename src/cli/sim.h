/* sim.h — `herd sim` (sim.c): a herd command on a simulated cluster. */
#ifndef HERD_CLI_SIM_H
#define HERD_CLI_SIM_H

/* argv[1] is "sim"; returns the exit status. */
int herd__cli_sim(int argc, char **argv);

#endif
