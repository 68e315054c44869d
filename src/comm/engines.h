/* engines.h — constructors of the engines beyond threads (internal to herd,
 * used by src/run and src/cli). */
#ifndef HERD_COMM_ENGINES_H
#define HERD_COMM_ENGINES_H

#include <stdbool.h>

#include "herd/herd_comm.h"

/* Whether this build has the mpi engine, and whether this process was
 * started by an MPI launcher (mpirun, srun, smpirun). */
bool herd_mpi_compiled(void);
bool herd_mpi_launched(void);
/* Initializes MPI (if needed) and returns this rank's endpoint. */
herd_status herd_comm_mpi_create(int *argc, char ***argv, herd_comm **out, herd_err *err);
herd_status herd_mpi_finalize(void);

#endif
