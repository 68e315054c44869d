/* algo_driver.h — runs an algorithm's hooks on a convex problem, without a
 * model or a data set, so tests can check convergence to a known optimum,
 * staleness accounting under a scripted interleaving, and invariants.
 *
 * The problem: f(x) = 1/2 sum_j a_j (x_j - x*_j)^2, gradient
 * a_j (x_j - x*_j) + noise * N(0,1) (each worker its own stream). Every
 * worker is a thread on the threads engine and makes `steps` steps, calling
 * the hooks in the worker loop's order (init; per step before_step, gradient,
 * grad_ready over the whole vector, after_backward, step or the local
 * optimizer step, after_step; end_epoch every steps_per_epoch steps; finish).
 * After every worker stopped the world is closed, eval_params is called for
 * worker 0 and then every free hook.
 *
 * A schedule, when given, orders the phases of the steps: entry i is the
 * worker allowed to run the next phase; each worker's steps have two phases,
 * "pull" (before_step and the gradient) and "push" (after_backward to
 * after_step). A worker whose phase is not next waits for its turn (up to
 * the timeout); once the schedule is used up, everyone runs freely.
 */
#ifndef HERD_TEST_ALGO_DRIVER_H
#define HERD_TEST_ALGO_DRIVER_H

#include <stddef.h>

#include "herd/herd_algo.h"
#include "herd/herd_run.h"
#include "run/options.h"

enum { DRIVE_MAX_WORKERS = 64 };

typedef struct drive_problem {
    size_t dim;
    const float *xstar; /* the optimum, dim floats */
    const float *curv;  /* a_j > 0, dim floats */
    const float *x0;    /* every worker's start, dim floats */
    float noise;        /* gradient noise standard deviation */
} drive_problem;

typedef struct drive_config {
    herd__train_config cfg;     /* algo, workers, optim (lr, momentum...), family options, seed */
    size_t steps;              /* per worker */
    size_t steps_per_epoch;    /* end_epoch every so many steps (0: never) */
    const size_t *schedule;    /* phase order, see above; NULL: none */
    size_t schedule_len;
    double sleep_us[DRIVE_MAX_WORKERS]; /* extra time per step, per worker */
    double timeout_s;          /* comm timeout (default 20) */
} drive_config;

typedef struct drive_result {
    float *x;          /* workers x dim: every worker's final weights (caller frees) */
    float *eval;       /* dim: what eval_params gave, or worker 0's weights (caller frees) */
    const char *eval_name; /* eval_params' name, or NULL */
    char log[DRIVE_MAX_WORKERS][512]; /* each worker's last log_epoch text */
    uint64_t bytes_sent[DRIVE_MAX_WORKERS];
    /* workers x steps, monotonic seconds: when step s's gradient began (after
     * before_step returned) and when its update was done (after step, before
     * after_step) */
    double *t_start, *t_done;
} drive_result;

/* Runs the algorithm; returns the first worker failure (message in err). */
herd_status drive_run(const drive_config *dc, const drive_problem *p, drive_result *res, herd_err *err);
void drive_result_free(drive_result *res);
/* drive_run that fails the calling test (naming the algorithm) unless it succeeds. */
void drive_run_ok(const drive_config *dc, const drive_problem *p, drive_result *res);

/* A problem of dimension dim with curvatures in [0.5, 2], optimum in
 * [-1, 1], start at 0, from seed (arrays owned by the caller: free each). */
drive_problem drive_problem_make(size_t dim, float noise, uint64_t seed);
void drive_problem_free(drive_problem *p);

/* max_j |x_j - x*_j| */
double drive_max_error(const drive_problem *p, const float *x);

/* A drive_config with the defaults of herd train for `algo` on `workers`
 * workers: constant learning rate lr, no momentum, no weight decay. */
drive_config drive_config_make(const char *algo, size_t workers, size_t steps, float lr);

#endif
