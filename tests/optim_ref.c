/* The double-precision reference of LARS and LAMB (optim_ref.h). */
#include "optim_ref.h"

#include <math.h>
#include <stdlib.h>

#include "harness.h"

void optim_ref_init(optim_ref *r, const herd_optim_config *cfg, const herd_param_group *groups, size_t ngroups,
                    size_t n)
{
    *r = (optim_ref){.cfg = *cfg, .groups = groups, .ngroups = ngroups, .n = n};
    r->v = calloc(n, sizeof(double));
    r->s = calloc(n, sizeof(double));
    ASSERT_TRUE(r->v && r->s);
}

void optim_ref_free(optim_ref *r)
{
    free(r->v);
    free(r->s);
}

static double norm(const double *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += x[i] * x[i];
    return sqrt(s);
}

/* Algorithm 1: the local rate lambda = eta ||w|| / (||g|| + beta ||w||) of
 * each weight tensor, the update lambda (g + beta w) into the momentum;
 * biases and batch norm: the plain gradient. */
static void lars(optim_ref *r, double *p, const double *g, double lr)
{
    const herd_optim_config *c = &r->cfg;
    double *d = malloc(r->n * sizeof(double));
    ASSERT_TRUE(d != NULL);
    for (size_t k = 0; k < r->ngroups; k++) {
        const herd_param_group *grp = &r->groups[k];
        double *w = p + grp->off, *dd = d + grp->off;
        const double *gg = g + grp->off;
        if (grp->kind != HERD_PARAM_WEIGHT) {
            for (size_t i = 0; i < grp->len; i++)
                dd[i] = gg[i];
            continue;
        }
        double wn = norm(w, grp->len), gn = norm(gg, grp->len), beta = c->weight_decay;
        double local = wn > 0 && gn > 0 ? c->lars_eta * wn / (gn + beta * wn) : 1.0;
        for (size_t i = 0; i < grp->len; i++)
            dd[i] = local * (gg[i] + beta * w[i]);
    }
    for (size_t i = 0; i < r->n; i++) {
        if (c->momentum == 0.0f) {
            p[i] -= lr * d[i];
            continue;
        }
        r->v[i] = c->momentum * r->v[i] + d[i];
        p[i] -= lr * (c->nesterov ? d[i] + c->momentum * r->v[i] : r->v[i]);
    }
    free(d);
}

/* Algorithm 2: Adam's moments, bias-corrected, the ratio r = m^ / (sqrt(v^)
 * + eps), u = r + lambda w, and the step lr ||w|| / ||u|| u per weight
 * tensor; biases and batch norm: u = r, ratio 1. */
static void lamb(optim_ref *r, double *p, const double *g, double lr)
{
    const herd_optim_config *c = &r->cfg;
    double b1 = c->beta1, b2 = c->beta2;
    r->t++;
    double *u = malloc(r->n * sizeof(double));
    ASSERT_TRUE(u != NULL);
    for (size_t i = 0; i < r->n; i++) {
        r->v[i] = b1 * r->v[i] + (1 - b1) * g[i];
        r->s[i] = b2 * r->s[i] + (1 - b2) * g[i] * g[i];
        double mhat = r->v[i] / (1 - pow(b1, (double)r->t)), shat = r->s[i] / (1 - pow(b2, (double)r->t));
        u[i] = mhat / (sqrt(shat) + c->eps);
    }
    for (size_t k = 0; k < r->ngroups; k++) {
        const herd_param_group *grp = &r->groups[k];
        double *w = p + grp->off, *uu = u + grp->off, ratio = 1.0;
        if (grp->kind == HERD_PARAM_WEIGHT) {
            for (size_t i = 0; i < grp->len; i++)
                uu[i] += c->weight_decay * w[i];
            double wn = norm(w, grp->len), un = norm(uu, grp->len);
            ratio = wn > 0 && un > 0 ? wn / un : 1.0;
        }
        for (size_t i = 0; i < grp->len; i++)
            w[i] -= lr * ratio * uu[i];
    }
    free(u);
}

void optim_ref_step(optim_ref *r, double *p, const double *g, double lr)
{
    ASSERT_TRUE(r->cfg.optimizer == HERD_OPTIMIZER_LARS || r->cfg.optimizer == HERD_OPTIMIZER_LAMB);
    if (r->cfg.optimizer == HERD_OPTIMIZER_LARS)
        lars(r, p, g, lr);
    else
        lamb(r, p, g, lr);
}
