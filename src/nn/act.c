/* Activations as layers of their own (relu where its input could not take
 * it fused; tanh, sigmoid, GELU) and dropout: element-wise, in whatever
 * layout the input has (CNHW or rows; plan_layouts never blocks what they
 * read). */
#include "nn/act.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/par.h"

/* The standard normal's density and distribution at x: GELU is x * Phi(x). */
static inline float phi(float x) { return 0.3989422804014327f * expf(-0.5f * x * x); }
static inline float Phi(float x) { return 0.5f * (1.0f + erff(x * 0.7071067811865476f)); }

void herd__act_forward(herd__act act, const float *restrict x, float *restrict y, size_t n)
{
    bool par = n >= HERD__PAR_GRAIN;
    switch (act) {
    case HERD__ACT_RELU:
#pragma omp parallel for if (par) schedule(static)
        for (size_t i = 0; i < n; i++)
            y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    case HERD__ACT_TANH:
#pragma omp parallel for if (par) schedule(static)
        for (size_t i = 0; i < n; i++)
            y[i] = tanhf(x[i]);
        break;
    case HERD__ACT_SIGMOID:
#pragma omp parallel for if (par) schedule(static)
        for (size_t i = 0; i < n; i++)
            y[i] = 1.0f / (1.0f + expf(-x[i]));
        break;
    case HERD__ACT_GELU:
#pragma omp parallel for if (par) schedule(static)
        for (size_t i = 0; i < n; i++)
            y[i] = x[i] * Phi(x[i]);
        break;
    }
}

/* f'(x) from x and y = f(x). */
static inline float act_slope(herd__act act, float x, float y)
{
    switch (act) {
    case HERD__ACT_RELU:
        return y > 0.0f ? 1.0f : 0.0f;
    case HERD__ACT_TANH:
        return 1.0f - y * y;
    case HERD__ACT_SIGMOID:
        return y * (1.0f - y);
    default:
        return Phi(x) + x * phi(x);
    }
}

void herd__act_backward(herd__act act, const float *restrict x, const float *restrict y, const float *restrict dout,
                        float *restrict din, size_t n, bool acc)
{
#pragma omp parallel for if (n >= HERD__PAR_GRAIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = dout[i] * act_slope(act, x[i], y[i]);
        din[i] = acc ? din[i] + g : g;
    }
}

void herd__dropout_apply(const float *restrict x, const uint8_t *restrict keep, float *restrict y, size_t n, float p,
                         bool acc)
{
    float scale = 1.0f / (1.0f - p);
#pragma omp parallel for if (n >= HERD__PAR_GRAIN) schedule(static)
    for (size_t i = 0; i < n; i++) {
        float v = keep[i] ? x[i] * scale : 0.0f;
        y[i] = acc ? y[i] + v : v;
    }
}

/* ---- the layers ------------------------------------------------------- */

static herd__act act_of(const herd_layer *l)
{
    return l->ops == &herd__relu_ops  ? HERD__ACT_RELU
           : l->ops == &herd__tanh_ops ? HERD__ACT_TANH
           : l->ops == &herd__sigmoid_ops ? HERD__ACT_SIGMOID
                                          : HERD__ACT_GELU;
}

static void act_forward(herd_layer *l, herd_model *m, size_t N, bool train)
{
    (void)train;
    herd__act_forward(act_of(l), in_out(m, l->in), l->out, N * out_dim(l));
}

static void act_backward(herd_layer *l, herd_model *m, size_t N)
{
    float *din = in_dout(m, l->in);
    if (din)
        herd__act_backward(act_of(l), in_out(m, l->in), l->out, l->dout, din, N * out_dim(l),
                           in_accumulates(m, l->in));
}

const herd_layer_ops herd__relu_ops = {.name = "relu", .forward = act_forward, .backward = act_backward};
const herd_layer_ops herd__tanh_ops = {.name = "tanh", .forward = act_forward, .backward = act_backward};
const herd_layer_ops herd__sigmoid_ops = {.name = "sigmoid", .forward = act_forward, .backward = act_backward};
const herd_layer_ops herd__gelu_ops = {.name = "gelu", .forward = act_forward, .backward = act_backward};

/* Training: a fresh mask from the layer's stream each forward (drawn in
 * order on one thread, so a seed repeats it); evaluation: the identity. */
static void dropout_forward(herd_layer *l, herd_model *m, size_t N, bool train)
{
    dropout_layer *d = (dropout_layer *)l;
    size_t n = N * out_dim(l);
    if (!train) {
        memcpy(l->out, in_out(m, l->in), n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++)
        d->mask[i] = herd_rng_uniform(&d->rng) >= d->p;
    herd__dropout_apply(in_out(m, l->in), d->mask, l->out, n, d->p, false);
}

static void dropout_backward(herd_layer *l, herd_model *m, size_t N)
{
    dropout_layer *d = (dropout_layer *)l;
    float *din = in_dout(m, l->in);
    if (din)
        herd__dropout_apply(l->dout, d->mask, din, N * out_dim(l), d->p, in_accumulates(m, l->in));
}

static void dropout_init(herd_layer *l, herd_model *m, herd_rng *rng)
{
    (void)m;
    herd_rng_seed(&((dropout_layer *)l)->rng, herd_rng_next(rng), 0xd209);
}

static void dropout_destroy(herd_layer *l) { free(((dropout_layer *)l)->mask); }

const herd_layer_ops herd__dropout_ops = {.name = "dropout", .forward = dropout_forward, .backward = dropout_backward,
                                          .init = dropout_init, .destroy = dropout_destroy};
