/* Building a model's graph: each herd__build_* call checks that the layer
 * fits its input, computes its output shape, parameters and FLOPs, and
 * appends it (model.h). Descriptions (desc.c) call them line by line.
 *
 * A model is a list of layers in forward order; each layer names the layer(s)
 * it reads (-1: the model input), so residual blocks are just an `add` layer
 * reading two earlier ones. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/model.h"

void herd__build_shape(const herd__builder *b, int in, size_t *c, size_t *h, size_t *w, bool *flat)
{
    if (in < 0) {
        *c = b->m->c, *h = b->m->h, *w = b->m->w, *flat = false;
    } else {
        const herd_layer *l = b->m->layers[in];
        *c = l->c, *h = l->h, *w = l->w, *flat = l->flat;
    }
}

static int push(herd__builder *b, herd_layer *l, const herd_layer_ops *ops, int in, int in2, size_t c, size_t h,
                size_t w, bool flat, bool relu, size_t nparams, size_t nbuf)
{
    herd_model *m = b->m;
    if (!l) {
        b->st = herd_err_set(b->err, HERD_ENOMEM, "out of memory building %s", b->where);
        return -2;
    }
    if (m->nlayers == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 16;
        herd_layer **nl = realloc(m->layers, cap * sizeof *nl);
        if (!nl) {
            free(l);
            b->st = herd_err_set(b->err, HERD_ENOMEM, "out of memory building %s", b->where);
            return -2;
        }
        m->layers = nl, m->cap = cap;
    }
    l->ops = ops, l->in = in, l->in2 = in2, l->line = b->line;
    l->c = c, l->h = h, l->w = w, l->flat = flat, l->relu = relu;
    l->param_off = m->nparams, l->param_len = nparams;
    l->buf_off = m->nbuffers, l->buf_len = nbuf;
    m->nparams += nparams, m->nbuffers += nbuf;
    l->grad = nparams > 0;
    if (in >= 0)
        m->layers[in]->nreaders++, l->grad |= m->layers[in]->grad;
    if (in2 >= 0)
        m->layers[in2]->nreaders++, l->grad |= m->layers[in2]->grad;
    m->layers[m->nlayers] = l;
    return (int)m->nlayers++;
}

static bool ok(const herd__builder *b, int in) { return b->st == HERD_OK && in >= -1; }

/* A window of k (stride s, padding pad) over a spatial input; a message and
 * false where it does not fit. */
static bool window_fits(herd__builder *b, int in, const char *what, size_t k, size_t stride, size_t pad)
{
    size_t c, h, w;
    bool flat;
    herd__build_shape(b, in, &c, &h, &w, &flat);
    if (flat)
        b->st = herd_err_set(b->err, HERD_EINVAL, "%s: a %s needs an image (C x H x W), its input is %zu flat values",
                             b->where, what, c);
    else if (!k || !stride || h + 2 * pad < k || w + 2 * pad < k)
        b->st = herd_err_set(b->err, HERD_EINVAL, "%s: a %zux%zu %s (stride %zu, pad %zu) does not fit its %zux%zux%zu input",
                             b->where, k, k, what, stride, pad, c, h, w);
    return b->st == HERD_OK;
}

int herd__build_conv(herd__builder *b, int in, size_t cout, size_t k, size_t stride, size_t pad, bool bias, bool relu)
{
    if (!ok(b, in) || !window_fits(b, in, "convolution", k, stride, pad))
        return -2;
    size_t c, h, w;
    bool flat;
    herd__build_shape(b, in, &c, &h, &w, &flat);
    conv_layer *cv = calloc(1, sizeof *cv);
    size_t ho = (h + 2 * pad - k) / stride + 1, wo = (w + 2 * pad - k) / stride + 1;
    int id = push(b, &cv->base, &herd__conv_ops, in, -1, cout, ho, wo, false, relu,
                  cout * c * k * k + (bias ? cout : 0), 0);
    if (id < 0)
        return -2;
    cv->cin = c, cv->hin = h, cv->win = w, cv->k = k, cv->stride = stride, cv->pad = pad, cv->bias = bias;
    double macs = (double)cout * (double)(c * k * k) * (double)(ho * wo);
    cv->base.fwd_flops = 2 * macs;
    cv->base.bwd_flops = 2 * macs * (in_grad(b->m, in) ? 2 : 1);
    return id;
}

int herd__build_flatten(herd__builder *b, int in)
{
    if (!ok(b, in))
        return -2;
    size_t c, h, w;
    bool flat;
    herd__build_shape(b, in, &c, &h, &w, &flat);
    if (flat)
        return in;
    herd_layer *l = calloc(1, sizeof *l);
    return push(b, l, &herd__flatten_ops, in, -1, c * h * w, 1, 1, true, false, 0, 0);
}

int herd__build_linear(herd__builder *b, int in, size_t nout, bool relu)
{
    in = herd__build_flatten(b, in);
    if (!ok(b, in))
        return -2;
    size_t c, h, w;
    bool flat;
    herd__build_shape(b, in, &c, &h, &w, &flat);
    size_t nin = c * h * w;
    linear_layer *fc = calloc(1, sizeof *fc);
    int id = push(b, &fc->base, &herd__linear_ops, in, -1, nout, 1, 1, true, relu, nout * nin + nout, 0);
    if (id < 0)
        return -2;
    fc->nin = nin;
    fc->base.fwd_flops = 2.0 * (double)nin * (double)nout;
    fc->base.bwd_flops = fc->base.fwd_flops * (in_grad(b->m, in) ? 2 : 1);
    return id;
}

static int pool(herd__builder *b, int in, size_t k, size_t stride, const herd_layer_ops *ops, const char *what)
{
    if (!ok(b, in) || !window_fits(b, in, what, k, stride, 0))
        return -2;
    size_t c, h, w;
    bool flat;
    herd__build_shape(b, in, &c, &h, &w, &flat);
    pool_layer *p = calloc(1, sizeof *p);
    int id = push(b, &p->base, ops, in, -1, c, (h - k) / stride + 1, (w - k) / stride + 1, false, false, 0, 0);
    if (id < 0)
        return -2;
    p->hin = h, p->win = w, p->k = k, p->stride = stride;
    return id;
}

int herd__build_maxpool(herd__builder *b, int in, size_t k, size_t stride)
{
    return pool(b, in, k, stride, &herd__pool_ops, "max pooling");
}

int herd__build_avgpool(herd__builder *b, int in, size_t k, size_t stride)
{
    int id = pool(b, in, k, stride, &herd__avgpool_ops, "average pooling");
    if (id >= 0) {
        herd_layer *l = b->m->layers[id];
        l->fwd_flops = (double)(out_dim(l) * k * k);
        l->bwd_flops = in_grad(b->m, in) ? l->fwd_flops : 0;
    }
    return id;
}

int herd__build_batchnorm(herd__builder *b, int in, bool relu)
{
    if (!ok(b, in))
        return -2;
    size_t c, h, w;
    bool flat;
    herd__build_shape(b, in, &c, &h, &w, &flat);
    if (flat) { /* the kernels normalize CNHW planes: a channel's values side by side */
        b->st = herd_err_set(b->err, HERD_EINVAL, "%s: batch norm needs an image (C x H x W), its input is %zu flat values",
                             b->where, c);
        return -2;
    }
    bn_layer *bn = calloc(1, sizeof *bn);
    return push(b, &bn->base, &herd__bn_ops, in, -1, c, h, w, flat, relu, 2 * c, 2 * c);
}

int herd__build_add(herd__builder *b, int x, int y, bool relu)
{
    if (!ok(b, x) || !ok(b, y))
        return -2;
    size_t c, h, w, c2, h2, w2;
    bool flat, flat2;
    herd__build_shape(b, x, &c, &h, &w, &flat);
    herd__build_shape(b, y, &c2, &h2, &w2, &flat2);
    if (c != c2 || h != h2 || w != w2 || flat != flat2) {
        b->st = herd_err_set(b->err, HERD_EINVAL, "%s: adds a %zux%zux%zu%s input to a %zux%zux%zu%s one", b->where,
                             c, h, w, flat ? " (flat)" : "", c2, h2, w2, flat2 ? " (flat)" : "");
        return -2;
    }
    herd_layer *l = calloc(1, sizeof *l);
    return push(b, l, &herd__add_ops, x, y, c, h, w, flat, relu, 0, 0);
}

int herd__build_gavgpool(herd__builder *b, int in)
{
    if (!ok(b, in))
        return -2;
    size_t c, h, w;
    bool flat;
    herd__build_shape(b, in, &c, &h, &w, &flat);
    if (flat) {
        b->st = herd_err_set(b->err, HERD_EINVAL,
                             "%s: global average pooling needs an image (C x H x W), its input is %zu flat values",
                             b->where, c);
        return -2;
    }
    herd_layer *l = calloc(1, sizeof *l);
    return push(b, l, &herd__gavg_ops, in, -1, c, 1, 1, true, false, 0, 0);
}

/* A layer of the input's shape that acts element by element. */
static int elementwise(herd__builder *b, int in, herd_layer *l, const herd_layer_ops *ops, double flops)
{
    if (!ok(b, in)) {
        free(l);
        return -2;
    }
    size_t c, h, w;
    bool flat;
    herd__build_shape(b, in, &c, &h, &w, &flat);
    int id = push(b, l, ops, in, -1, c, h, w, flat, false, 0, 0);
    if (id >= 0)
        l->fwd_flops = flops * (double)out_dim(l), l->bwd_flops = in_grad(b->m, in) ? l->fwd_flops : 0;
    return id;
}

int herd__build_act(herd__builder *b, int in, herd__act act)
{
    static const herd_layer_ops *const ops[] = {&herd__relu_ops, &herd__tanh_ops, &herd__sigmoid_ops, &herd__gelu_ops};
    static const double flops[] = {1, 8, 8, 16}; /* rough costs of each element, for the simulated clock */
    return elementwise(b, in, calloc(1, sizeof(herd_layer)), ops[act], flops[act]);
}

int herd__build_dropout(herd__builder *b, int in, float p)
{
    if (b->st == HERD_OK && !(p >= 0.0f && p < 1.0f)) {
        b->st = herd_err_set(b->err, HERD_EINVAL, "%s: a dropout probability is in [0, 1), not %g", b->where, (double)p);
        return -2;
    }
    dropout_layer *d = calloc(1, sizeof *d);
    int id = elementwise(b, in, d ? &d->base : NULL, &herd__dropout_ops, 1);
    if (id < 0)
        return -2;
    d->p = p;
    if (!(d->mask = malloc(b->m->max_batch * out_dim(&d->base) + 1))) {
        b->st = herd_err_set(b->err, HERD_ENOMEM, "out of memory building %s", b->where);
        return -2;
    }
    return id;
}

size_t herd_model_layers(const herd_model *m, herd_layer_info *out, size_t cap)
{
    for (size_t i = 0; i < m->nlayers && i < cap; i++) {
        const herd_layer *l = m->layers[i];
        herd_layer_info *o = &out[i];
        snprintf(o->kind, sizeof o->kind, "%s%s", l->ops->name, l->relu ? "+relu" : "");
        o->line = l->line, o->c = l->c, o->h = l->h, o->w = l->w, o->flat = l->flat;
        o->nparams = l->param_len, o->flops = l->fwd_flops;
    }
    return m->nlayers;
}
