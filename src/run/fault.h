/* fault.h — the faults a run is told to suffer: --fail (a worker that stops
 * for good, or dies, at a step) and --slow (a straggler) (fault.c;
 * internal to src/run). Each worker owns its herd__fault; the run's lost
 * flags (herd_run.lost) are what the others see of a --fail.
 */
#ifndef HERD_RUN_FAULT_H
#define HERD_RUN_FAULT_H

#include <stdbool.h>
#include <stddef.h>

#include "herd/herd_algo.h"
#include "algo/run_config.h"

typedef struct herd_run herd_run;

typedef struct herd__fault {
    size_t fail_step;          /* --fail: stop for good at this step (SIZE_MAX: never) */
    herd__fail_mode fail_mode; /* how (resolved: never DEFAULT) */
    bool lost;                 /* stopped by --fail while the others go on */
    double slow_factor;        /* --slow: how many times its compute's time a step takes (1: no slower) */
} herd__fault;

/* Worker `rank`'s faults, from cfg's --fail and --slow. */
void herd__fault_init(herd__fault *f, const herd__train_config *cfg, size_t rank);
/* --fail: worker w stops for good at this step (f->fail_step). An
 * asynchronous algorithm's run goes on without it (f->lost, HERD_OK); a
 * synchronous one stops, naming it (HERD_EKILLED). A process death's mode
 * does not return. */
herd_status herd__fault_fail(herd__fault *f, herd_run *r, herd_worker *w);
/* --slow: after a step's compute, which took compute_s, the extra time a
 * slower processor would spend (not on the worker's first step). */
void herd__fault_slow(const herd__fault *f, const herd_run *r, const herd_worker *w, double compute_s);

#endif
