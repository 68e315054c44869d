/* simtime.h — what the sim engine changes in a training run (internal to
 * src/run). Everything here is a no-op outside herd-sim (-DHERD_SIM).
 *
 * Compute time. Under SimGrid the worker loop's real forward and backward
 * passes cost no simulated time (herd sim runs with SMPI's
 * simulate-computation off); herd__simtime_step charges a modelled cost
 * instead: the step's FLOPs (herd_model_train_flops x batch) executed on
 * this rank's simulated host, so a simulation is repeatable to the bit.
 * HERD_SIM_COMPUTE=measured (herd sim --measured-compute) leaves the timing
 * to SimGrid's measurement of the real compute, and it charges nothing.
 *
 * Data. All simulated ranks live in one process; herd-sim is linked with
 * --wrap=herd_data_open,--wrap=herd_dataset_free so that ranks opening the
 * same data set (spec, seed) share one read-only copy (data sets are
 * read-only after loading, herd_data.h) instead of holding one each: 256
 * ranks of Fashion-MNIST would otherwise need 56 GB. The registry of shared
 * copies is reached through the environment, the one piece of state SimGrid
 * does not privatize per rank; ranks never run at the same time (SimGrid
 * schedules one at a time), so it needs no lock. */
#ifndef HERD_RUN_SIMTIME_H
#define HERD_RUN_SIMTIME_H

#include <stddef.h>

#include "herd/herd_nn.h"

/* Charges one training step (forward + backward) of `batch` examples. */
void herd__simtime_step(const herd_model *m, size_t batch);

#endif
