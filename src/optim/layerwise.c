/* The layer-wise adaptive optimizers, LARS and LAMB (herd_optim.h), and
 * the optimizer's checkpoint record.
 *
 * Both scale each weight tensor's update by a trust ratio of norms taken
 * over the whole tensor, so a step covers whole tensors. Norms are summed
 * in double (a tensor has up to millions of elements; the sum of squares in
 * float would lose the small ones). Biases and batch-norm parameters get a
 * trust ratio of 1 and no weight decay: they are few, their norms say
 * little about the scale of their gradients, and decaying them only hurts
 * (You et al.'s and TensorFlow's implementations exclude them likewise).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/args.h"
#include "optim/optim_internal.h"

static double sumsq(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

static bool adapted(const herd_param_group *g) { return g->kind == HERD_PARAM_WEIGHT; }

/* LARS's local learning rate of a weight tensor p with gradient g:
 * eta ||p|| / (||g|| + wd ||p||), 1 where either norm is 0 (a tensor at
 * zero, or one the batch did not reach, takes the global rate). */
static float lars_trust(const float *p, const float *g, size_t len, float eta, float wd)
{
    double wn = sqrt(sumsq(p, len)), gn = sqrt(sumsq(g, len));
    return wn > 0 && gn > 0 ? (float)(eta * wn / (gn + wd * wn)) : 1.0f;
}

/* The tensors [*first, *end) that make up [off, off+len), which must start
 * and end on tensor boundaries. */
static void groups_of(const herd_optim *o, size_t off, size_t len, size_t *first, size_t *end)
{
    size_t k = 0;
    while (k < o->ngroups && o->groups[k].off < off)
        k++;
    HERD_ASSERT(len == 0 || (k < o->ngroups && o->groups[k].off == off));
    *first = k;
    while (k < o->ngroups && o->groups[k].off + o->groups[k].len <= off + len)
        k++;
    HERD_ASSERT(k == o->ngroups ? off + len == o->n : o->groups[k].off == off + len);
    *end = k;
}

/* LAMB on one tensor: p[0, len) with gradient g, moments m and s, its
 * steps so far t (this one included). */
static void lamb_tensor(const herd_optim *o, const herd_param_group *grp, float *p, const float *g, float *m, float *s,
                        uint64_t t, float lr)
{
    const float b1 = o->cfg.beta1, b2 = o->cfg.beta2, eps = o->cfg.eps;
    const float wd = adapted(grp) ? o->cfg.weight_decay : 0.0f;
    const float c1 = (float)(1.0 / (1.0 - pow(b1, (double)t))), c2 = (float)(1.0 / (1.0 - pow(b2, (double)t)));
    size_t len = grp->len;
    double un = 0;
    for (size_t i = 0; i < len; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        s[i] = b2 * s[i] + (1.0f - b2) * g[i] * g[i];
        float u = m[i] * c1 / (sqrtf(s[i] * c2) + eps) + wd * p[i];
        un += (double)u * u;
    }
    float trust = 1.0f;
    if (adapted(grp)) {
        double wn = sqrt(sumsq(p, len));
        un = sqrt(un);
        trust = wn > 0 && un > 0 ? (float)(wn / un) : 1.0f;
    }
    float rate = lr * trust;
#pragma omp parallel for if (len >= HERD__PAR_GRAIN) schedule(static)
    for (size_t i = 0; i < len; i++)
        p[i] -= rate * (m[i] * c1 / (sqrtf(s[i] * c2) + eps) + wd * p[i]);
}

void herd__optim_layerwise_step(herd_optim *o, float *p, const float *g_at, size_t off, size_t len, float lr)
{
    size_t first, end;
    groups_of(o, off, len, &first, &end);
    for (size_t k = first; k < end; k++) {
        const herd_param_group *grp = &o->groups[k];
        float *pp = p + grp->off;
        const float *gg = g_at + (grp->off - off);
        if (o->cfg.optimizer == HERD_OPTIMIZER_LAMB) {
            lamb_tensor(o, grp, pp, gg, o->v + grp->off, o->s + grp->off, ++o->steps[k], lr);
            continue;
        }
        float wd = adapted(grp) ? o->cfg.weight_decay : 0.0f;
        float trust = adapted(grp) ? lars_trust(pp, gg, grp->len, o->cfg.lars_eta, wd) : 1.0f;
        herd__optim_momentum_step(o, pp, gg, o->v ? o->v + grp->off : NULL, grp->len, lr, trust, wd);
    }
}

void herd_optim_direction(const herd_optim *o, float *g, const float *p)
{
    HERD_ASSERT(o->cfg.optimizer != HERD_OPTIMIZER_LAMB);
    const float wd = o->cfg.weight_decay;
    if (o->cfg.optimizer == HERD_OPTIMIZER_SGD) {
        if (wd != 0.0f)
#pragma omp parallel for if (o->n >= HERD__PAR_GRAIN) schedule(static)
            for (size_t i = 0; i < o->n; i++)
                g[i] += wd * p[i];
        return;
    }
    for (size_t k = 0; k < o->ngroups; k++) {
        const herd_param_group *grp = &o->groups[k];
        if (!adapted(grp))
            continue;
        float *gg = g + grp->off;
        const float *pp = p + grp->off;
        float trust = lars_trust(pp, gg, grp->len, o->cfg.lars_eta, wd);
#pragma omp parallel for if (grp->len >= HERD__PAR_GRAIN) schedule(static)
        for (size_t i = 0; i < grp->len; i++)
            gg[i] = trust * (gg[i] + wd * pp[i]);
    }
}

/* ---- the checkpoint record ------------------------------------------------
 * 64-bit words in host order (checkpoints are little-endian only, ckpt.c):
 * the layout word, the optimizer, the number of tensors and of parameters;
 * then, lamb only, each tensor's step count and the second moment (n floats). */

enum { RECORD_WORDS = 4 };
static const uint64_t RECORD_LAYOUT = (uint64_t)0x6f70746d << 32 | 1; /* "optm", version 1 */

size_t herd_optim_state_bytes(const herd_optim *o)
{
    if (o->cfg.optimizer == HERD_OPTIMIZER_SGD)
        return 0;
    size_t b = RECORD_WORDS * sizeof(uint64_t);
    if (o->cfg.optimizer == HERD_OPTIMIZER_LAMB)
        b += o->ngroups * sizeof(uint64_t) + o->n * sizeof(float);
    return b;
}

void herd_optim_state_save(const herd_optim *o, void *buf)
{
    uint64_t head[RECORD_WORDS] = {RECORD_LAYOUT, (uint64_t)o->cfg.optimizer, o->ngroups, o->n};
    unsigned char *b = buf;
    memcpy(b, head, sizeof head);
    if (o->cfg.optimizer != HERD_OPTIMIZER_LAMB)
        return;
    b += sizeof head;
    memcpy(b, o->steps, o->ngroups * sizeof(uint64_t));
    memcpy(b + o->ngroups * sizeof(uint64_t), o->s, o->n * sizeof(float));
}

herd_status herd_optim_state_load(herd_optim *o, const void *buf, size_t len, herd_err *err)
{
    uint64_t head[RECORD_WORDS];
    herd_status st = HERD__NONNULL(err, o, buf);
    if (st < 0)
        return st;
    if (len < sizeof head)
        return herd_err_set(err, HERD_ECORRUPT, "the optimizer's record is %zu bytes, too short for its header", len);
    memcpy(head, buf, sizeof head);
    if (head[0] != RECORD_LAYOUT)
        return herd_err_set(err, HERD_ECORRUPT, "the optimizer's record has layout %#llx, not %#llx",
                            (unsigned long long)head[0], (unsigned long long)RECORD_LAYOUT);
    if (head[1] != (uint64_t)o->cfg.optimizer)
        return herd_err_set(err, HERD_EINVAL, "it was written with --optimizer %s; this run has --optimizer %s",
                            head[1] <= HERD_OPTIMIZER_LAMB ? herd_optimizer_name((herd_optimizer)head[1]) : "(unknown)",
                            herd_optimizer_name(o->cfg.optimizer));
    if (head[2] != o->ngroups || head[3] != o->n || len != herd_optim_state_bytes(o))
        return herd_err_set(err, HERD_ECORRUPT,
                            "the optimizer's record is of %llu tensors and %llu parameters (%zu bytes); this model "
                            "has %zu and %zu (%zu bytes)",
                            (unsigned long long)head[2], (unsigned long long)head[3], len, o->ngroups, o->n,
                            herd_optim_state_bytes(o));
    if (o->cfg.optimizer != HERD_OPTIMIZER_LAMB)
        return HERD_OK;
    const unsigned char *b = (const unsigned char *)buf + sizeof head;
    memcpy(o->steps, b, o->ngroups * sizeof(uint64_t));
    memcpy(o->s, b + o->ngroups * sizeof(uint64_t), o->n * sizeof(float));
    return HERD_OK;
}
