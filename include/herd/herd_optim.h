/* herd_optim.h — optimizers and learning-rate schedules on flat ranges.
 *
 * SGD with momentum, Nesterov momentum and L2 weight decay, with PyTorch's
 * semantics (g += wd*p; v = mu*v + g; step = nesterov ? g + mu*v : v;
 * p -= lr*step). The step works on a range [off, off+len) of the flat
 * parameter array, so an algorithm may apply it bucket by bucket.
 * Schedules: constant, step decay, cosine; each with optional linear warm-up.
 * Ownership: herd_optim owns its momentum buffer. One thread per optimizer.
 */
#ifndef HERD_OPTIM_H
#define HERD_OPTIM_H

#include <stdbool.h>
#include <stddef.h>

#include "herd/herd_status.h"

typedef enum herd_schedule {
    HERD_SCHED_CONST,
    HERD_SCHED_STEP,   /* lr * gamma^(floor(epoch_progress / step_epochs)) */
    HERD_SCHED_COSINE, /* lr * (1 + cos(pi * t / T)) / 2 */
} herd_schedule;

typedef struct herd_optim_config {
    float lr, momentum, weight_decay;
    bool nesterov;
    herd_schedule schedule;
    double warmup_epochs; /* linear ramp from lr/10 to lr over these epochs */
    double step_epochs;   /* HERD_SCHED_STEP period */
    float step_gamma;     /* HERD_SCHED_STEP factor */
} herd_optim_config;

/* Learning rate at training progress `epoch` (fractional: epochs done so far)
 * out of `total_epochs`. Warm-up ramps linearly from lr/10 to lr over
 * warmup_epochs; the schedule then runs over the remaining epochs. */
float herd_optim_lr(const herd_optim_config *cfg, double epoch, double total_epochs);

/* Parses "const", "step", "cosine". */
herd_status herd_schedule_parse(const char *s, herd_schedule *out);
const char *herd_schedule_name(herd_schedule s);

typedef struct herd_optim {
    herd_optim_config cfg;
    float *v; /* momentum, n floats (NULL when momentum == 0) */
    size_t n;
} herd_optim;

herd_status herd_optim_init(herd_optim *o, const herd_optim_config *cfg, size_t n, herd_err *err);
void herd_optim_free(herd_optim *o);
/* One step on p[off, off+len) with gradient g[off, off+len) at rate lr. */
void herd_optim_step(herd_optim *o, float *p, const float *g, size_t off, size_t len, float lr);
/* The same step, the gradient of p[off, off+len) being g_at[0, len) (it may
 * live elsewhere than a whole-model array: in another worker's buffer). */
void herd_optim_step_from(herd_optim *o, float *p, const float *g_at, size_t off, size_t len, float lr);

/* For an update taken elsewhere than in the worker (a parameter server,
 * which keeps its momentum in its shard): the same weight decay and
 * heavy-ball momentum as the step above, as separate pieces.
 * g[0, n) += wd * p[0, n). */
void herd_optim_decay(float wd, float *g, const float *p, size_t n);
/* v[lo, hi) = mu * v - upd (the update to add to the weights is then v). */
void herd_optim_heavy_ball(float mu, float *v, const float *upd, size_t lo, size_t hi);

#endif
