/* simtime.h — what the sim engine changes in a training run (internal to
 * src/run). Everything here is a no-op outside herd-sim (-DHERD_SIM).
 *
 * Compute time. Under SimGrid the worker loop's real forward and backward
 * passes cost no simulated time (herd sim runs with SMPI's
 * simulate-computation off); herd__simtime_step charges a modelled cost
 * instead: the step's FLOPs (herd_model_train_flops x batch, plus the
 * local update's HERD_SIM_UPDATE_FLOPS_PER_PARAM per parameter) executed on
 * this rank's simulated host, so a simulation is repeatable to the bit.
 * herd__simtime_eval charges an evaluation's forward passes the same way:
 * worker 0's evaluation between epochs holds it up (and, in a synchronous
 * algorithm, everyone) as a real one would. The update is charged as
 * FLOPs although a GPU's is bound by memory bandwidth: either way it is a
 * small share of a step (0.02% for resnet20 at batch 32, 6% for mlp at
 * batch 16).
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

/* FLOPs of the local update per parameter: SGD with momentum and weight
 * decay (herd_optim_step: v = mu v + g + wd p; p -= lr v). */
#define HERD_SIM_UPDATE_FLOPS_PER_PARAM 6.0

/* Charges one training step (forward, backward and the update) of `batch`
 * examples. */
void herd__simtime_step(const herd_model *m, size_t batch);
/* Charges the forward passes of an evaluation on n examples. */
void herd__simtime_eval(const herd_model *m, size_t n);

#endif
