/* nonfinite.h — a worker's policy for NaN and Inf in its losses and
 * gradients (nonfinite.c; internal to src/run). Each worker owns its
 * herd__nf; only herd__nf_settle, a collective, looks at the others'
 * findings (through the engine, not their memory).
 */
#ifndef HERD_RUN_NONFINITE_H
#define HERD_RUN_NONFINITE_H

#include <stdbool.h>
#include <stddef.h>

#include "herd/herd_algo.h"

typedef struct herd_run herd_run;

/* What this worker found non-finite in the step under way. */
typedef struct nonfinite_step {
    bool loss, grad;
    bool poison; /* a NaN still to be written into the gradient (--inject-nan, or after a non-finite loss) */
} nonfinite_step;

/* The first finding of a worker that stops the run, held until the workers
 * settle (herd__nf_settles): its step, epoch, what (herd__nf_code) and the
 * steps skipped in a row before it. */
typedef struct held_nonfinite {
    bool stop;
    int code;
    size_t step, epoch, skipped_run;
} held_nonfinite;

typedef struct herd__nf {
    nonfinite_step step;  /* the step under way's findings */
    size_t skipped, skipped_run; /* --skip-nonfinite: steps not applied, in all and in a row */
    bool agreed_stop;     /* stopped on a non-finite value with every worker, at the same step */
    held_nonfinite held;  /* where the workers settle at the epoch's end (herd__nf_settles) */
} herd__nf;

/* 0: nothing found this step; 1: a non-finite loss; 2: a non-finite gradient. */
int herd__nf_code(const herd__nf *nf);
/* "loss", "gradient", "model" for codes 1..3. */
const char *herd__nf_what(size_t code);
/* --inject-nan: whether worker w's gradient gets a NaN at this step. */
bool herd__nf_injected(const herd_worker *w);
/* Backward has produced w's grads[off, off + len): poisons and checks it
 * (ops: the algorithm's, which may check it on its way). */
void herd__nf_grads_arrived(herd__nf *nf, const herd_algo_ops *ops, const herd_worker *w, size_t off, size_t len);
/* After after_backward: skip the step's update (*skip), go on, or stop;
 * a skip counts in *epoch_skipped too. */
herd_status herd__nf_sync(herd__nf *nf, herd_run *r, herd_worker *w, size_t *epoch_skipped,
                          const herd_step_result *res, bool *skip);
herd_status herd__nf_async(herd__nf *nf, herd_run *r, herd_worker *w, size_t *epoch_skipped, bool *skip);
/* Whether the run's workers settle non-finite findings at the end of each
 * epoch (and at checkpoints and the last step) rather than at every step:
 * the synchronous algorithms that share nothing every step from which the
 * workers could agree (gossip, push-sum, elastic averaging, local SGD). */
bool herd__nf_settles(const herd_run *r);
/* Collective over the run's workers, where herd__nf_settles: whether any
 * worker found what stops the run since the last settlement; if so every
 * worker stops here (HERD_ENONFINITE), the message naming the first step
 * and the workers. */
herd_status herd__nf_settle(herd__nf *nf, herd_run *r, herd_worker *w);

#endif
