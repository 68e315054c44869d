/* diverge.h — worker 0's loss, watched for divergence and for a run that
 * does not learn (diverge.c; internal to src/run). Each worker owns its
 * herd__div; only worker 0's watches.
 */
#ifndef HERD_RUN_DIVERGE_H
#define HERD_RUN_DIVERGE_H

#include <stdbool.h>
#include <stddef.h>

#include "herd/herd_algo.h"

typedef struct herd_run herd_run;

/* An exponential moving average of the step losses (about 10 steps) and
 * its lowest. */
typedef struct herd__div {
    double ema, min_ema;
    size_t n;
    bool diverged;     /* warned of: the summary's status says "diverged" */
    bool not_learning; /* warned of: the status says "not_learning" */
} herd__div;

/* A step's finite loss, into the watch (worker 0). */
void herd__div_step(herd__div *d, const herd_worker *w, double loss);
/* At an evaluation of worker 0 (test_loss: its result): whether the run
 * diverges; if so, warns (stderr, the log) once, and with
 * --stop-on-divergence returns HERD_EDIVERGED (w->err says why). */
herd_status herd__div_check(herd__div *d, herd_run *r, herd_worker *w, double test_loss);
/* After the final evaluation (test_loss, test_acc: its figures), however
 * short the run: a test accuracy within 2 points of chance (or, where
 * test_acc is NAN, a training loss within 2% of chance: the recent
 * steps', else train_loss) names the run not learning, as herd__div_check
 * does. */
herd_status herd__div_final(herd__div *d, herd_run *r, herd_worker *w, double train_loss, double test_acc,
                            double test_loss);

#endif
