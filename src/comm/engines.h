/* engines.h — the mpi engine's entry points that the training run still
 * calls directly (internal to herd). Everything else reaches an engine
 * through its table (herd_engine.h); these go once the run does too. */
#ifndef HERD_COMM_ENGINES_H
#define HERD_COMM_ENGINES_H

#include <stdbool.h>

#include "herd/herd_comm.h"

/* Whether this process was started by an MPI launcher (mpirun, srun,
 * smpirun); false where the mpi engine is not compiled in. */
bool herd__mpi_launched(void);
/* Initializes MPI (if needed) and returns this rank's endpoint; where the
 * mpi engine is not compiled in, HERD_EUNSUPPORTED saying so. */
herd_status herd__comm_mpi_create(int *argc, char ***argv, herd_comm **out, herd_err *err);

#endif
