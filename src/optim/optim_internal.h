/* optim_internal.h — what the optimizer's files share (internal to src/optim). */
#ifndef HERD_OPTIM_INTERNAL_H
#define HERD_OPTIM_INTERNAL_H

#include "core/par.h"
#include "herd/herd_optim.h"

/* The element-wise loops of the optimizer (every step of sgd, and lars's
 * and lamb's updates; not their norms, summed in order) run on the calling
 * thread's OpenMP team from HERD__PAR_GRAIN elements (core/par.h). */

/* The momentum step of sgd and lars on pp[0, len) with gradient gg: the
 * direction d = scale (g + wd p), then v = mu v + d (v: the optimizer's
 * momentum at the same offset, NULL without), p -= lr (nesterov ? d + mu v : v);
 * without momentum p -= lr d. */
void herd__optim_momentum_step(const herd_optim *o, float *pp, const float *gg, float *v, size_t len, float lr,
                               float scale, float wd);

/* lars and lamb: the step on the whole tensors that p[off, off+len) covers. */
void herd__optim_layerwise_step(herd_optim *o, float *p, const float *g_at, size_t off, size_t len, float lr);

#endif
