#include "herd/herd_optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

float herd_optim_lr(const herd_optim_config *cfg, double epoch, double total_epochs)
{
    double lr = cfg->lr;
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

static const char *const schedule_names[] = {"const", "step", "cosine"};

herd_status herd_schedule_parse(const char *s, herd_schedule *out)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, schedule_names[i])) {
            *out = (herd_schedule)i;
            return HERD_OK;
        }
    return HERD_EINVAL;
}

const char *herd_schedule_name(herd_schedule s) { return schedule_names[s]; }

herd_status herd_optim_init(herd_optim *o, const herd_optim_config *cfg, size_t n, herd_err *err)
{
    o->cfg = *cfg;
    o->n = n;
    o->v = NULL;
    if (cfg->momentum != 0.0f && n) {
        o->v = calloc(n, sizeof(float));
        if (!o->v)
            return herd_err_set(err, HERD_ENOMEM, "out of memory for momentum (%zu floats)", n);
    }
    return HERD_OK;
}

void herd_optim_free(herd_optim *o)
{
    free(o->v);
    o->v = NULL;
}

void herd_optim_step(herd_optim *o, float *p, const float *g, size_t off, size_t len, float lr)
{
    herd_optim_step_from(o, p, g + off, off, len, lr);
}

void herd_optim_step_from(herd_optim *o, float *p, const float *gg, size_t off, size_t len, float lr)
{
    const float wd = o->cfg.weight_decay, mu = o->cfg.momentum;
    float *pp = p + off;
    if (!o->v) {
        for (size_t i = 0; i < len; i++)
            pp[i] -= lr * (gg[i] + wd * pp[i]);
        return;
    }
    float *v = o->v + off;
    if (o->cfg.nesterov) {
        for (size_t i = 0; i < len; i++) {
            float d = gg[i] + wd * pp[i];
            v[i] = mu * v[i] + d;
            pp[i] -= lr * (d + mu * v[i]);
        }
    } else {
        for (size_t i = 0; i < len; i++) {
            v[i] = mu * v[i] + gg[i] + wd * pp[i];
            pp[i] -= lr * v[i];
        }
    }
}

void herd_optim_decay(float wd, float *g, const float *p, size_t n)
{
    if (wd != 0.0f)
        for (size_t i = 0; i < n; i++)
            g[i] += wd * p[i];
}

void herd_optim_heavy_ball(float mu, float *v, const float *upd, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++)
        v[i] = mu * v[i] - upd[i];
}
