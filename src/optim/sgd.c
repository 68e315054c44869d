/* Learning-rate schedules, the optimizer's set-up, and SGD. */
#include "herd/herd_optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/args.h"
#include "optim/optim_internal.h"

double herd_optim_base_lr(const herd_optim_config *cfg)
{
    double lr = cfg->lr;
    if (cfg->lr_scale == HERD_LR_SCALE_LINEAR && cfg->lr_ref_batch) /* Goyal et al.: lr grows with the batch */
        lr *= (double)(cfg->global_batch ? cfg->global_batch : cfg->lr_ref_batch) / (double)cfg->lr_ref_batch;
    return lr;
}

float herd_optim_lr(const herd_optim_config *cfg, double epoch, double total_epochs)
{
    double lr = herd_optim_base_lr(cfg);
    double w = cfg->warmup_epochs;
    if (w > 0 && epoch < w) /* Goyal et al.: ramp linearly up to the target rate */
        return (float)(lr * (0.1 + 0.9 * epoch / w));
    double t = epoch - (w > 0 ? w : 0), T = total_epochs - (w > 0 ? w : 0);
    switch (cfg->schedule) {
    case HERD_SCHED_CONST:
        break;
    case HERD_SCHED_STEP:
        if (cfg->step_epochs > 0)
            lr *= pow(cfg->step_gamma, floor(t / cfg->step_epochs));
        break;
    case HERD_SCHED_COSINE:
        if (T > 0)
            lr *= 0.5 * (1.0 + cos(M_PI * (t < T ? t : T) / T));
        break;
    }
    return (float)lr;
}

const char *const herd_schedule_names[] = {"const", "step", "cosine", NULL};
const char *const herd_optimizer_names[] = {"sgd", "lars", "lamb", NULL};
const char *const herd_lr_scale_names[] = {"none", "linear", NULL};

/* The index of s in the NULL-terminated names, or -1 (s NULL too). */
static int name_index(const char *const *names, const char *s)
{
    for (int i = 0; s && names[i]; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

herd_status herd_schedule_parse(const char *s, herd_schedule *out)
{
    int i = out ? name_index(herd_schedule_names, s) : -1;
    return i < 0 ? HERD_EINVAL : (*out = (herd_schedule)i, HERD_OK);
}

herd_status herd_optimizer_parse(const char *s, herd_optimizer *out)
{
    int i = out ? name_index(herd_optimizer_names, s) : -1;
    return i < 0 ? HERD_EINVAL : (*out = (herd_optimizer)i, HERD_OK);
}

herd_status herd_lr_scale_parse(const char *s, herd_lr_scale *out)
{
    int i = out ? name_index(herd_lr_scale_names, s) : -1;
    return i < 0 ? HERD_EINVAL : (*out = (herd_lr_scale)i, HERD_OK);
}

const char *herd_schedule_name(herd_schedule s) { return (unsigned)s < 3 ? herd_schedule_names[s] : "?"; }
const char *herd_optimizer_name(herd_optimizer k) { return (unsigned)k < 3 ? herd_optimizer_names[k] : "?"; }
const char *herd_lr_scale_name(herd_lr_scale s) { return (unsigned)s < 2 ? herd_lr_scale_names[s] : "?"; }

herd_status herd_optim_init(herd_optim *o, const herd_optim_config *cfg, size_t n, herd_err *err)
{
    herd_status st = HERD__NONNULL(err, o, cfg);
    if (st < 0)
        return st;
    herd_param_group all = {0, n, HERD_PARAM_WEIGHT};
    return herd_optim_init_groups(o, cfg, &all, n ? 1 : 0, n, err);
}

herd_status herd_optim_init_groups(herd_optim *o, const herd_optim_config *cfg, const herd_param_group *groups,
                                   size_t ngroups, size_t n, herd_err *err)
{
    herd_status st = HERD__NONNULL(err, o, cfg);
    if (st < 0)
        return st;
    memset(o, 0, sizeof *o);
    if (ngroups && !groups)
        return HERD__NONNULL(err, groups);
    /* the enums a caller may have filled by hand: a step switches on them */
    const char *bad = (unsigned)cfg->optimizer > HERD_OPTIMIZER_LAMB ? "optimizer"
                      : (unsigned)cfg->schedule > HERD_SCHED_COSINE  ? "schedule"
                      : (unsigned)cfg->lr_scale > HERD_LR_SCALE_LINEAR ? "lr_scale"
                                                                       : NULL;
    if (bad)
        return herd_err_set(err, HERD_EINVAL, "herd_optim_init_groups: cfg->%s is not one of its enum's values", bad);
    o->cfg = *cfg;
    o->n = n;
    size_t end = 0;
    for (size_t k = 0; k < ngroups; k++) {
        if (groups[k].off != end || groups[k].len > n - end)
            return herd_err_set(err, HERD_EINVAL, "parameter tensor %zu ([%zu, +%zu)) does not follow the one before "
                                "(ending at %zu) within %zu parameters", k, groups[k].off, groups[k].len, end, n);
        if ((unsigned)groups[k].kind > HERD_PARAM_BN)
            return herd_err_set(err, HERD_EINVAL, "herd_optim_init_groups: groups[%zu].kind is not a herd_param_kind",
                                k);
        end += groups[k].len;
    }
    if (end != n)
        return herd_err_set(err, HERD_EINVAL, "the parameter tensors cover %zu of %zu parameters", end, n);
    bool lamb = cfg->optimizer == HERD_OPTIMIZER_LAMB;
    o->groups = malloc((ngroups ? ngroups : 1) * sizeof *o->groups);
    if (o->groups)
        memcpy(o->groups, groups, ngroups * sizeof *groups);
    o->ngroups = ngroups;
    if ((lamb || cfg->momentum != 0.0f) && n)
        o->v = calloc(n, sizeof(float));
    if (lamb && n) {
        o->s = calloc(n, sizeof(float));
        o->steps = calloc(ngroups ? ngroups : 1, sizeof *o->steps);
    }
    if (!o->groups || (n && (lamb || cfg->momentum != 0.0f) && !o->v) || (lamb && n && (!o->s || !o->steps))) {
        herd_optim_free(o);
        return herd_err_set(err, HERD_ENOMEM, "out of memory for the optimizer's state (%zu floats)", n);
    }
    return HERD_OK;
}

void herd_optim_free(herd_optim *o)
{
    free(o->v);
    free(o->s);
    free(o->groups);
    free(o->steps);
    o->v = o->s = NULL;
    o->groups = NULL;
    o->steps = NULL;
}

bool herd_optim_elementwise(const herd_optim *o) { return o->cfg.optimizer == HERD_OPTIMIZER_SGD; }

void herd_optim_step(herd_optim *o, float *p, const float *g, size_t off, size_t len, float lr)
{
    herd_optim_step_from(o, p, g + off, off, len, lr);
}

void herd__optim_momentum_step(const herd_optim *o, float *pp, const float *gg, float *v, size_t len, float lr,
                               float scale, float wd)
{
    const float mu = o->cfg.momentum;
    const bool nesterov = o->cfg.nesterov;
    if (!v) {
#pragma omp parallel for if (len >= HERD__PAR_GRAIN) schedule(static)
        for (size_t i = 0; i < len; i++)
            pp[i] -= lr * (scale * (gg[i] + wd * pp[i]));
        return;
    }
#pragma omp parallel for if (len >= HERD__PAR_GRAIN) schedule(static)
    for (size_t i = 0; i < len; i++) {
        float d = scale * (gg[i] + wd * pp[i]);
        v[i] = mu * v[i] + d;
        pp[i] -= lr * (nesterov ? d + mu * v[i] : v[i]);
    }
}

void herd_optim_step_from(herd_optim *o, float *p, const float *gg, size_t off, size_t len, float lr)
{
    if (o->cfg.optimizer != HERD_OPTIMIZER_SGD) {
        herd__optim_layerwise_step(o, p, gg, off, len, lr);
        return;
    }
    const float wd = o->cfg.weight_decay, mu = o->cfg.momentum;
    float *pp = p + off, *v = o->v ? o->v + off : NULL;
    if (!v || o->cfg.nesterov) {
        herd__optim_momentum_step(o, pp, gg, v, len, lr, 1.0f, wd);
        return;
    }
    /* heavy ball summed as ever ((mu v + g) + wd p): sgd runs keep their bits */
#pragma omp parallel for if (len >= HERD__PAR_GRAIN) schedule(static)
    for (size_t i = 0; i < len; i++) {
        v[i] = mu * v[i] + gg[i] + wd * pp[i];
        pp[i] -= lr * v[i];
    }
}

void herd_optim_heavy_ball(float mu, float *v, const float *upd, size_t lo, size_t hi)
{
#pragma omp parallel for if (hi - lo >= HERD__PAR_GRAIN) schedule(static)
    for (size_t i = lo; i < hi; i++)
        v[i] = mu * v[i] - upd[i];
}
