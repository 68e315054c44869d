/* simtime.h — what the sim engine changes in a training run (internal to
 * src/run). Everything here is a no-op outside herd-sim (-DHERD_SIM).
 *
 * Compute time. Under SimGrid the worker loop's real forward and backward
 * passes cost no simulated time (herd sim runs with SMPI's
 * simulate-computation off); herd__simtime_step charges a modelled cost
 * instead: the step's FLOPs (herd_model_train_flops x batch, plus the
 * local update's HERD_SIM_UPDATE_FLOPS_PER_PARAM per parameter) executed on
 * this rank's simulated host, so a simulation is repeatable to the bit.
 * Evaluation costs no simulated time: it observes the run, as a trainer's
 * held-out evaluation of saved weights would, and the times it would add
 * are left out of epoch_s, train_s and the curves anyway. Charged to worker
 * 0, it would also skew an asynchronous run's curve: the others train on
 * while worker 0 evaluates, so at worker 0's training time the run is
 * further on than that time accounts for (an evaluation of 500 examples
 * every 8 global steps of batch 32 is about 40% of worker 0's compute: its
 * time to a target would come out that much short). The update is charged as
 * FLOPs although a GPU's is bound by memory bandwidth: either way it is a
 * small share of a step (0.02% for resnet20 at batch 32, 6% for mlp at
 * batch 16).
 * Backward is charged layer by layer against a compute clock of the worker,
 * as if compute and communication ran side by side (a GPU's stream and its
 * communication thread): the clock starts when backward does, and a layer's
 * gradients are ready at start + (backward FLOPs from the last layer down to
 * it) / speed. When backward reports a layer ready, the rank's simulated time
 * is brought up to that instant (if it is behind: it is ahead when
 * communication started for earlier layers took longer), and the algorithm's
 * grad_ready hook runs from there: allreduce with overlap reduces a bucket
 * from that hook, so bucket k's reduction starts at max(its gradients'
 * readiness, the end of bucket k-1's), and a step costs max(compute, the
 * chain of reductions) rather than their sum. After backward the time is
 * brought up to the end of backward, then the update is charged.
 * HERD_SIM_STEP_OVERHEAD (herd sim --step-overhead S) adds S seconds at the
 * start of every step: a framework's per-step cost (kernel launches,
 * Python), which a model of FLOPs alone leaves out.
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

/* A worker's compute clock through one step's backward. */
typedef struct herd__simclock {
    double t0;     /* simulated time backward started */
    double speed;  /* this host's flop/s */
    size_t batch;
} herd__simclock;

/* Starts a step of `batch` examples: charges the step overhead and the
 * forward pass, and starts the clock for backward. */
void herd__simtime_step_begin(herd__simclock *k, const herd_model *m, size_t batch);
/* Backward has produced the gradients of the layer whose parameters start at
 * param_off: the rank's time is brought up to when that happens. */
void herd__simtime_backward(const herd__simclock *k, const herd_model *m, size_t param_off);
/* Backward is done: the time is brought up to its end. */
void herd__simtime_backward_end(const herd__simclock *k, const herd_model *m);
/* Charges the local update (HERD_SIM_UPDATE_FLOPS_PER_PARAM per parameter). */
void herd__simtime_update(const herd_model *m);
/* The step overhead in seconds (HERD_SIM_STEP_OVERHEAD; 0 outside herd-sim). */
double herd__simtime_step_overhead(void);

#endif
