/* herd_optim.h — optimizers and learning-rate schedules on flat ranges.
 *
 * Three optimizers on the model's flat parameter array:
 *   sgd   SGD with momentum, Nesterov momentum and L2 weight decay, with
 *         PyTorch's semantics (g += wd*p; v = mu*v + g; step = nesterov ?
 *         g + mu*v : v; p -= lr*step), weight decay on every parameter.
 *   lars  LARS (You, Gitman, Ginsburg 2017), per weight tensor (layer):
 *         trust = eta ||w|| / (||g|| + wd ||w||) (1 where ||w|| or ||g|| is
 *         0), d = trust (g + wd w), then the momentum and step above on d.
 *   lamb  LAMB (You et al. 2019), per weight tensor: Adam's moments with
 *         bias correction, u = m^ / (sqrt(v^) + eps) + wd w,
 *         trust = ||w|| / ||u|| (1 where either is 0), w -= lr trust u.
 * lars and lamb leave biases and batch-norm parameters out of the trust
 * ratio (it is 1) and out of weight decay, as the papers' common
 * implementations do (TensorFlow's LARS and LAMB exclude lists).
 * The tensors come from herd_model_param_groups (herd_nn.h). sgd's step
 * works element by element, so an algorithm may apply it to any range
 * (bucket by bucket, as an allreduce delivers it); lars' and lamb's need a
 * tensor's whole gradient for its norm, so their ranges must be unions of
 * whole tensors (herd_optim_elementwise says which).
 * Schedules: constant, step decay, cosine; each with optional linear warm-up,
 * and the linear scaling rule (Goyal et al.) against a reference batch.
 * Ownership: herd_optim owns its buffers and its copy of the tensors. One
 * thread per optimizer.
 */
#ifndef HERD_OPTIM_H
#define HERD_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd_nn.h"
#include "herd/herd_status.h"

typedef enum herd_schedule {
    HERD_SCHED_CONST,
    HERD_SCHED_STEP,   /* lr * gamma^(floor(epoch_progress / step_epochs)) */
    HERD_SCHED_COSINE, /* lr * (1 + cos(pi * t / T)) / 2 */
} herd_schedule;

typedef enum herd_optimizer {
    HERD_OPTIMIZER_SGD,
    HERD_OPTIMIZER_LARS,
    HERD_OPTIMIZER_LAMB,
} herd_optimizer;

typedef enum herd_lr_scale {
    HERD_LR_SCALE_NONE,
    HERD_LR_SCALE_LINEAR, /* lr * global_batch / lr_ref_batch */
} herd_lr_scale;

typedef struct herd_optim_config {
    float lr, momentum, weight_decay;
    bool nesterov;
    herd_schedule schedule;
    double warmup_epochs; /* linear ramp from lr/10 to lr over these epochs */
    double step_epochs;   /* HERD_SCHED_STEP period */
    float step_gamma;     /* HERD_SCHED_STEP factor */
    herd_optimizer optimizer;
    float lars_eta;       /* LARS trust coefficient (default 0.04; the paper's 0.001) */
    float beta1, beta2, eps; /* LAMB: Adam's moment decays and denominator term (momentum is unused) */
    herd_lr_scale lr_scale;
    size_t lr_ref_batch;  /* the batch lr is given for (HERD_LR_SCALE_LINEAR) */
    size_t global_batch;  /* the run's: workers x batch (herd_train sets it); 0 reads as lr_ref_batch */
} herd_optim_config;

/* lr with the linear scaling rule applied: the rate the schedule starts
 * from (and warm-up ramps up to). */
double herd_optim_base_lr(const herd_optim_config *cfg);

/* Learning rate at training progress `epoch` (fractional: epochs done so far)
 * out of `total_epochs`. Warm-up ramps linearly from base/10 to the base
 * rate (herd_optim_base_lr) over warmup_epochs; the schedule then runs over
 * the remaining epochs. */
float herd_optim_lr(const herd_optim_config *cfg, double epoch, double total_epochs);

/* Parse names ("const", "step", "cosine"; "sgd", "lars", "lamb"; "none",
 * "linear"): HERD_EINVAL for any other, and for s or out NULL. */
/* The names of the schedules, optimizers and --lr-scale modes, in their
 * enums' order, NULL-terminated. */
extern const char *const herd_schedule_names[], *const herd_optimizer_names[], *const herd_lr_scale_names[];
herd_status herd_schedule_parse(const char *s, herd_schedule *out);
const char *herd_schedule_name(herd_schedule s);
herd_status herd_optimizer_parse(const char *s, herd_optimizer *out);
const char *herd_optimizer_name(herd_optimizer k);
herd_status herd_lr_scale_parse(const char *s, herd_lr_scale *out);
const char *herd_lr_scale_name(herd_lr_scale s);

typedef struct herd_optim {
    herd_optim_config cfg;
    /* sgd, lars: momentum (NULL when momentum == 0); lamb: the first moment */
    float *v;
    float *s;                  /* lamb: the second moment; NULL otherwise */
    size_t n;
    herd_param_group *groups;  /* the tensors, tiling [0, n) */
    size_t ngroups;
    uint64_t *steps;           /* lamb: steps taken by each tensor (bias correction); NULL otherwise */
} herd_optim;

/* An optimizer of n parameters seen as one weight tensor (sgd needs no
 * more; lars and lamb then take the whole model as one layer). */
herd_status herd_optim_init(herd_optim *o, const herd_optim_config *cfg, size_t n, herd_err *err);
/* An optimizer of the n parameters that groups[0, ngroups) tile (ascending,
 * no gap, no overlap: HERD_EINVAL otherwise); groups is copied. Both
 * initialisers clear *o first (nothing to free after a failure) and refuse
 * (HERD_EINVAL) a cfg whose optimizer, schedule or lr_scale, or a group
 * whose kind, is not one of its enum's values. */
herd_status herd_optim_init_groups(herd_optim *o, const herd_optim_config *cfg, const herd_param_group *groups,
                                   size_t ngroups, size_t n, herd_err *err);
void herd_optim_free(herd_optim *o);
/* Whether a step may be applied to any range of the parameters (sgd), or
 * only to whole tensors (lars, lamb: a tensor's norm needs all of it). */
bool herd_optim_elementwise(const herd_optim *o);
/* One step on p[off, off+len) with gradient g[off, off+len) at rate lr. */
void herd_optim_step(herd_optim *o, float *p, const float *g, size_t off, size_t len, float lr);
/* The same step, the gradient of p[off, off+len) being g_at[0, len) (it may
 * live elsewhere than a whole-model array: in another worker's buffer).
 * Where !herd_optim_elementwise, [off, off+len) must start and end on
 * tensor boundaries (asserted). */
void herd_optim_step_from(herd_optim *o, float *p, const float *g_at, size_t off, size_t len, float lr);

/* For an update taken elsewhere than in the worker (a parameter server,
 * which keeps its momentum in its shard and applies x -= lr g'): the
 * direction g' the optimizer gives g[0, n) at the weights p it was
 * computed at, in place. sgd: g + wd p; lars: per tensor trust (g + wd p)
 * (biases and batch norm: g). Not for lamb, whose moments are per
 * parameter state of the server (asserted). */
void herd_optim_direction(const herd_optim *o, float *g, const float *p);
/* v[lo, hi) = mu * v - upd (the update to add to the weights is then v). */
void herd_optim_heavy_ball(float mu, float *v, const float *upd, size_t lo, size_t hi);

/* The optimizer's state beyond v (which a checkpoint keeps as its momentum)
 * as one record: which optimizer, its tensors, and lamb's step counts and
 * second moment. 0 bytes for sgd (it has none). */
size_t herd_optim_state_bytes(const herd_optim *o);
/* Writes the record into buf (herd_optim_state_bytes of them). */
void herd_optim_state_save(const herd_optim *o, void *buf);
/* Reads a record back: HERD_EINVAL where it is another optimizer's (err
 * names both), HERD_ECORRUPT where its tensors or length do not fit. */
herd_status herd_optim_state_load(herd_optim *o, const void *buf, size_t len, herd_err *err);

#endif
