/* Models on flat parameters: creating them from a description (desc.c
 * reads it, build.c adds the layers; the layers themselves are layers.c's,
 * their structs model.h's), the API, and the activations' layouts.
 *
 * Every layer owns its output and output-gradient
 * buffers (max_batch examples). Spatial tensors are CNHW (see kernels.h);
 * `flatten`, `gavgpool` and `linear` produce flat (N, D) rows.
 *
 * Backward: a layer writes its input's gradient, overwriting it when it is
 * that input's only reader and accumulating (after the model zeroed it) when
 * there are several — the residual case.
 */
#include "herd/herd_nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/args.h"
#include "herd/herd_rng.h"
#include "nn/model.h"

const char *const herd_model_names[] = {"linear", "mlp", "lenet", "cnn", "resnet20", NULL};

static void *alloc64(size_t bytes)
{
    void *p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 64) == 0 ? p : NULL;
}

/* Allocates every buffer once the graph is known. */
static herd_status model_alloc(herd_model *m, herd_err *err)
{
    size_t B = m->max_batch, scratch = 0;
    m->params = calloc(m->nparams ? m->nparams : 1, sizeof(float));
    m->grads = calloc(m->nparams ? m->nparams : 1, sizeof(float));
    m->buffers = calloc(m->nbuffers ? m->nbuffers : 1, sizeof(float));
    if (!m->params || !m->grads || !m->buffers)
        goto oom;
    if (m->c > 1) {
        m->input_copy = malloc(B * m->c * m->h * m->w * sizeof(float));
        if (!m->input_copy)
            goto oom;
    }
    for (size_t i = 0; i < m->nlayers; i++) {
        herd_layer *l = m->layers[i];
        size_t n = B * out_dim(l);
        /* 64-byte aligned: the primitives read and write them directly,
         * a vector per 16 floats */
        l->out = alloc64(n * sizeof(float));
        l->dout = alloc64(n * sizeof(float));
        if (!l->out || !l->dout)
            goto oom;
        memset(l->dout, 0, n * sizeof(float));
        if (l->ops == &herd__conv_ops) {
            conv_layer *cv = (conv_layer *)l;
            size_t col = conv_rows(cv) * conv_chunk(cv, B) * l->h * l->w;
            if (col > scratch)
                scratch = col;
        } else if (l->ops == &herd__pool_ops) {
            pool_layer *p = (pool_layer *)l;
            p->idx = malloc(n * sizeof(uint32_t));
            if (!p->idx)
                goto oom;
            /* pooling masks the gradient of a ReLU it alone reads (conv+ReLU+pool) */
            if (l->in >= 0 && m->layers[l->in]->relu && m->layers[l->in]->nreaders == 1)
                m->layers[l->in]->dout_masked = true;
        } else if (l->ops == &herd__bn_ops) {
            bn_layer *bn = (bn_layer *)l;
            bn->save_mean = malloc(2 * l->c * sizeof(float));
            if (!bn->save_mean)
                goto oom;
            bn->save_invstd = bn->save_mean + l->c;
            if (!(bn->work = malloc(HERD__BN_BLK_WORK(B, l->c) * sizeof(double))))
                goto oom;
        }
    }
    m->scratch_len = scratch;
    if (scratch && (!(m->scratch = malloc(scratch * sizeof(float))) ||
                    !(m->scratch2 = malloc(scratch * sizeof(float)))))
        goto oom;
    return HERD_OK;
oom:
    return herd_err_set(err, HERD_ENOMEM, "out of memory allocating model %s for batch %zu", m->name, B);
}

/* The model `text` describes (`label` names it in messages), named `name`;
 * with `build`, the layers that adds instead (tests: the models as code). */
herd_status herd__model_create_with(const char *name, const char *label, const char *text,
                                    void (*build)(herd__builder *b), size_t c, size_t h, size_t w, size_t nclasses,
                                    size_t max_batch, uint64_t seed, herd_model **out, herd_err *err)
{
    herd_status st = HERD_OK;
    if (!c || !h || !w || nclasses < 2 || !max_batch)
        return herd_err_set(err, HERD_EINVAL, "model: invalid shape %zux%zux%zu, %zu classes, batch %zu",
                            c, h, w, nclasses, max_batch);
    /* in doubles: c * h * w in size_t can wrap to a small number, and the
     * model would be built for that (a 2^40 x 2^40 x 8 input made a linear
     * model of 4 parameters) */
    if ((double)c * (double)h * (double)w > (double)HERD__MODEL_MAX_EXAMPLE || nclasses > HERD__MODEL_MAX_CLASSES ||
        max_batch > HERD__MODEL_MAX_BATCH)
        return herd_err_set(err, HERD_EINVAL,
                            "model: shape %zux%zux%zu, %zu classes, batch %zu is beyond what herd builds (an example "
                            "of at most 2^28 floats, at most 2^20 classes, batches of at most 2^20)",
                            c, h, w, nclasses, max_batch);
    herd_model *m = calloc(1, sizeof *m);
    if (!m || !(m->desc = strdup(text))) {
        free(m);
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    }
    snprintf(m->name, sizeof m->name, "%s", name);
    m->c = c, m->h = h, m->w = w, m->nclasses = nclasses, m->max_batch = max_batch;
    const char *conv_env = getenv("HERD_CONV");
    m->conv_im2col = conv_env && !strcmp(conv_env, "im2col");
    const char *layout_env = getenv("HERD_LAYOUT");
    m->layout_cnhw = layout_env && !strcmp(layout_env, "cnhw");
    m->plan_key = -1;
    herd__builder b = {.m = m, .err = err};
    snprintf(b.where, sizeof b.where, "model %s", name);
    if (build)
        build(&b);
    else
        herd__desc_build(&b, label, text);
    HERD_TRY(b.st);
    HERD_TRY(model_alloc(m, err));
    herd_rng_seed(&m->init_rng, seed, 0x1a1e5);
    for (size_t i = 0; i < m->nlayers; i++)
        if (m->layers[i]->ops->init)
            m->layers[i]->ops->init(m->layers[i], m, &m->init_rng);
    *out = m;
    m = NULL;
out:
    herd_model_free(m);
    return st;
}

herd_status herd_model_create(const char *name, size_t c, size_t h, size_t w, size_t nclasses,
                              size_t max_batch, uint64_t seed, herd_model **out, herd_err *err)
{
    herd_status st = HERD__NONNULL(err, name, out);
    if (st < 0)
        return st;
    *out = NULL;
    char label[64];
    for (size_t i = 0; herd__model_texts[i].name; i++)
        if (!strcmp(herd__model_texts[i].name, name)) { /* messages name the file it came from */
            snprintf(label, sizeof label, "models/%s.model", name);
            return herd__model_create_with(name, label, herd__model_texts[i].text, NULL, c, h, w, nclasses, max_batch,
                                           seed, out, err);
        }
    char *text = NULL, base[HERD_MODEL_NAME_MAX + 1];
    HERD_TRY(herd_model_read_description(name, &text, base, sizeof base, err));
    st = herd__model_create_with(base, name, text, NULL, c, h, w, nclasses, max_batch, seed, out, err);
out:
    free(text);
    return st;
}

herd_status herd_model_create_from_description(const char *name, const char *text, size_t c, size_t h, size_t w,
                                               size_t nclasses, size_t max_batch, uint64_t seed, herd_model **out,
                                               herd_err *err)
{
    herd_status st = HERD__NONNULL(err, name, text, out);
    if (st < 0)
        return st;
    *out = NULL;
    return herd__model_create_with(name, name, text, NULL, c, h, w, nclasses, max_batch, seed, out, err);
}

const char *herd_model_description(const herd_model *m) { return m->desc; }

void herd_model_free(herd_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nlayers; i++) {
        herd_layer *l = m->layers[i];
        free(l->out);
        free(l->dout);
        if (l->ops == &herd__pool_ops)
            free(((pool_layer *)l)->idx);
        else if (l->ops == &herd__conv_ops)
            for (unsigned k = 0; k < CONV_PRIMS; k++)
                herd__conv_free(((conv_layer *)l)->prim[k]);
        else if (l->ops == &herd__bn_ops) {
            free(((bn_layer *)l)->save_mean);
            free(((bn_layer *)l)->work);
        }
        if (l->ops->destroy)
            l->ops->destroy(l);
        free(l);
    }
    free(m->layers);
    free(m->desc);
    free(m->params);
    free(m->grads);
    free(m->buffers);
    free(m->input_copy);
    free(m->scratch);
    free(m->scratch2);
    free(m->params_bf16);
    free(m->op_bf16[0]);
    free(m->op_bf16[1]);
    herd__dnn_free(m->dnn);
    free(m);
}

void herd_model_set_conv_im2col(herd_model *m, bool im2col)
{
    m->conv_im2col = im2col;
}

bool herd_model_conv_im2col(const herd_model *m) { return m->conv_im2col; }

void herd_model_set_blocked(herd_model *m, bool blocked) { m->layout_cnhw = !blocked; }

size_t herd_model_blocked_layers(const herd_model *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->nlayers; i++)
        n += m->layers[i]->blk;
    return n;
}

const char *const herd_precision_names[] = {"fp32", "bf16", NULL};

herd_status herd_precision_parse(const char *s, herd_precision *out)
{
    if (!out)
        return HERD_EINVAL;
    for (size_t i = 0; herd_precision_names[i]; i++)
        if (s && !strcmp(s, herd_precision_names[i])) {
            *out = (herd_precision)i;
            return HERD_OK;
        }
    return HERD_EINVAL;
}

const char *herd_precision_name(herd_precision p)
{
    return (size_t)p < 2 ? herd_precision_names[p] : "?";
}

/* Frees the convolutions' primitives: they were made for one precision. */
static void drop_conv_prims(herd_model *m)
{
    for (size_t i = 0; i < m->nlayers; i++)
        if (m->layers[i]->ops == &herd__conv_ops) {
            conv_layer *cv = (conv_layer *)m->layers[i];
            for (unsigned k = 0; k < CONV_PRIMS; k++) {
                herd__conv_free(cv->prim[k]);
                cv->prim[k] = NULL;
            }
            cv->prim_failed = 0;
        }
}

herd_status herd_model_set_precision(herd_model *m, herd_precision p)
{
    if (!m)
        return HERD_EINVAL;
    if (p == m->precision)
        return HERD_OK;
    if (p != HERD_PRECISION_FP32 && p != HERD_PRECISION_BF16)
        return HERD_EINVAL;
    if (p == HERD_PRECISION_BF16) {
        if (herd_nn_bf16_support() == HERD_BF16_NONE)
            return HERD_EUNSUPPORTED;
        /* the largest operand of a product: a layer's input or output
         * gradient over the batch, or a chunk's im2col matrix */
        size_t cap = m->max_batch * m->c * m->h * m->w;
        for (size_t i = 0; i < m->nlayers; i++)
            if (m->max_batch * out_dim(m->layers[i]) > cap)
                cap = m->max_batch * out_dim(m->layers[i]);
        if (m->scratch_len > cap)
            cap = m->scratch_len;
        uint16_t *w = malloc((m->nparams + 1) * sizeof *w);
        uint16_t *a = malloc(cap * sizeof *a), *b = malloc(cap * sizeof *b);
        if (!w || !a || !b || (!m->dnn && herd__dnn_create(&m->dnn) != HERD_OK)) {
            free(w), free(a), free(b);
            return HERD_ENOMEM;
        }
        m->params_bf16 = w, m->op_bf16[0] = a, m->op_bf16[1] = b, m->op_cap = cap;
    } else {
        free(m->params_bf16), free(m->op_bf16[0]), free(m->op_bf16[1]);
        m->params_bf16 = m->op_bf16[0] = m->op_bf16[1] = NULL, m->op_cap = 0;
        if (m->dnn)
            herd__dnn_drop_matmuls(m->dnn);
    }
    drop_conv_prims(m);
    m->precision = p;
    return HERD_OK;
}

herd_precision herd_model_precision(const herd_model *m) { return m->precision; }

size_t herd_model_param_groups(const herd_model *m, herd_param_group *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < m->nlayers; i++) {
        const herd_layer *l = m->layers[i];
        if (!l->param_len)
            continue;
        /* conv and linear: the weights, then the bias (c of them) if any;
         * batch norm: gamma then beta, c each */
        bool bn = l->ops == &herd__bn_ops;
        bool bias = l->ops == &herd__linear_ops || (l->ops == &herd__conv_ops && ((const conv_layer *)l)->bias);
        size_t tail = bn || bias ? l->c : 0;
        herd_param_group g[2] = {
            {l->param_off, l->param_len - tail, bn ? HERD_PARAM_BN : HERD_PARAM_WEIGHT},
            {l->param_off + l->param_len - tail, tail, bn ? HERD_PARAM_BN : HERD_PARAM_BIAS},
        };
        for (size_t k = 0; k < 2; k++)
            if (g[k].len && n++ < cap)
                out[n - 1] = g[k];
    }
    return n;
}

size_t herd_model_nparams(const herd_model *m) { return m->nparams; }
float *herd_model_params(herd_model *m) { return m->params; }
float *herd_model_grads(herd_model *m) { return m->grads; }
size_t herd_model_nbuffers(const herd_model *m) { return m->nbuffers; }
float *herd_model_buffers(herd_model *m) { return m->buffers; }
const char *herd_model_name(const herd_model *m) { return m->name; }

void herd_model_shape(const herd_model *m, size_t *c, size_t *h, size_t *w, size_t *nclasses)
{
    *c = m->c, *h = m->h, *w = m->w, *nclasses = m->nclasses;
}

/* Appends tensor `suffix` of layer `kind``index` to out[*n] (when it fits). */
static void add_tensor(herd_tensor *out, size_t cap, size_t *n, const char *kind, size_t index, const char *suffix,
                       bool buffer, size_t off, size_t ndim, const size_t *shape)
{
    if (*n < cap) {
        herd_tensor *t = &out[*n];
        snprintf(t->name, sizeof t->name, "%s%zu.%s", kind, index, suffix);
        t->buffer = buffer, t->off = off, t->ndim = ndim, t->len = 1;
        for (size_t d = 0; d < 4; d++)
            t->shape[d] = d < ndim ? shape[d] : 0;
        for (size_t d = 0; d < ndim; d++)
            t->len *= shape[d];
    }
    (*n)++;
}

size_t herd_model_tensors(const herd_model *m, herd_tensor *out, size_t cap)
{
    size_t n = 0, nconv = 0, nfc = 0, nbn = 0;
    for (size_t i = 0; i < m->nlayers; i++) {
        const herd_layer *l = m->layers[i];
        size_t at = l->param_off, C = l->c;
        if (l->ops == &herd__conv_ops) {
            const conv_layer *cv = (const conv_layer *)l;
            size_t w[4] = {C, cv->cin, cv->k, cv->k};
            add_tensor(out, cap, &n, "conv", ++nconv, "weight", false, at, 4, w);
            if (cv->bias)
                add_tensor(out, cap, &n, "conv", nconv, "bias", false, at + C * conv_rows(cv), 1, &C);
        } else if (l->ops == &herd__linear_ops) {
            const linear_layer *fc = (const linear_layer *)l;
            size_t w[2] = {C, fc->nin};
            add_tensor(out, cap, &n, "fc", ++nfc, "weight", false, at, 2, w);
            add_tensor(out, cap, &n, "fc", nfc, "bias", false, at + C * fc->nin, 1, &C);
        } else if (l->ops == &herd__bn_ops) { /* params gamma, beta; buffers mean, var (bn_forward) */
            add_tensor(out, cap, &n, "bn", ++nbn, "weight", false, at, 1, &C);
            add_tensor(out, cap, &n, "bn", nbn, "bias", false, at + C, 1, &C);
            add_tensor(out, cap, &n, "bn", nbn, "running_mean", true, l->buf_off, 1, &C);
            add_tensor(out, cap, &n, "bn", nbn, "running_var", true, l->buf_off + C, 1, &C);
        }
    }
    return n;
}

double herd_model_train_flops(const herd_model *m)
{
    double f = 0;
    for (size_t i = 0; i < m->nlayers; i++)
        f += m->layers[i]->fwd_flops + m->layers[i]->bwd_flops;
    return f;
}

double herd_model_forward_flops(const herd_model *m)
{
    double f = 0;
    for (size_t i = 0; i < m->nlayers; i++)
        f += m->layers[i]->fwd_flops;
    return f;
}

double herd_model_backward_flops_done(const herd_model *m, size_t param_off)
{
    double f = 0;
    for (size_t i = m->nlayers; i-- > 0;) {
        f += m->layers[i]->bwd_flops;
        if (m->layers[i]->param_len && m->layers[i]->param_off == param_off)
            break;
    }
    return f;
}

/* ---- the activations' layouts ---------------------------------------- */

static void unblock(herd_model *m, int i, bool *changed)
{
    if (i >= 0 && m->layers[i]->blk)
        m->layers[i]->blk = false, *changed = true;
}

/* Which activations stay blocked (nChw16c or nChw8c) between layers: those a
 * convolution, batch norm, max pooling or residual add makes, of a channel
 * count that fills whole blocks, whose every reader takes them so (a
 * convolution; a batch norm, pooling or add, which write the layout they
 * read; global average pooling and flatten, which write rows). An add's two
 * inputs and output share one layout, as do a batch norm's or a pooling's
 * input and output. Only with oneDNN's primitives, on an ISA where they
 * compute in a blocked layout (AVX-512 or AVX2); in bf16 too, where the
 * convolutions round their blocked fp32 input to blocked bf16 (a conversion
 * in place of order) and write blocked fp32. bf16 on AMX holds them NHWC,
 * one block of all C channels (C of 8, 16, 32 or 64), the layout its
 * convolutions compute in. */
static void plan_layouts(herd_model *m)
{
    bool on = !m->conv_im2col && !m->layout_cnhw && !m->blk_failed && herd__blk_width();
    m->blk_w = on ? herd__blk_width() : 0;
    m->blk_nhwc = on && m->precision == HERD_PRECISION_BF16 && herd__blk_nhwc_bf16();
    for (size_t i = 0; i < m->nlayers; i++) {
        herd_layer *l = m->layers[i];
        bool kind = l->ops == &herd__conv_ops ||
                    ((l->ops == &herd__bn_ops || l->ops == &herd__pool_ops || l->ops == &herd__add_ops) && l->in >= 0 &&
                     (l->ops != &herd__add_ops || l->in2 >= 0));
        bool fits = m->blk_nhwc ? l->c == 8 || l->c == 16 || l->c == 32 || l->c == 64 : on && l->c % m->blk_w == 0;
        l->blk = on && kind && !l->flat && fits;
    }
    bool changed = true;
    while (changed) {
        changed = false;
        for (size_t i = 0; i < m->nlayers; i++) {
            herd_layer *l = m->layers[i];
            bool a = l->in >= 0 && m->layers[l->in]->blk;
            if (l->ops == &herd__bn_ops || l->ops == &herd__pool_ops) {
                if (a != l->blk)
                    unblock(m, l->in, &changed), unblock(m, (int)i, &changed);
            } else if (l->ops == &herd__add_ops) {
                bool b = l->in2 >= 0 && m->layers[l->in2]->blk;
                if (a != l->blk || b != l->blk)
                    unblock(m, l->in, &changed), unblock(m, l->in2, &changed), unblock(m, (int)i, &changed);
            } else if (l->ops != &herd__conv_ops && l->ops != &herd__gavg_ops && l->ops != &herd__flatten_ops) {
                unblock(m, l->in, &changed);
            }
        }
    }
}

/* Plans the layouts for the model's current settings and, where some
 * activation is blocked, makes sure every convolution has its primitives
 * for batch N: the im2col fallback reads and writes CNHW only, so a
 * convolution oneDNN cannot do turns blocking off for the model. */
static void prepare_forward(herd_model *m, size_t N)
{
    int key = (int)m->conv_im2col | (int)m->blk_failed << 1 | (int)m->layout_cnhw << 2 | (int)m->precision << 3;
    if (key != m->plan_key) {
        drop_conv_prims(m); /* made for the old layouts */
        plan_layouts(m);
        m->plan_key = key;
    }
    bool any = false;
    for (size_t i = 0; i < m->nlayers; i++)
        any |= m->layers[i]->blk;
    if (!any)
        return;
    for (size_t i = 0; i < m->nlayers; i++)
        if (m->layers[i]->ops == &herd__conv_ops && !herd__conv_prim((conv_layer *)m->layers[i], m, N)) {
            m->blk_failed = true;
            prepare_forward(m, N);
            return;
        }
}

void herd_model_forward(herd_model *m, const float *x, size_t batch, bool train)
{
    HERD_ASSERT(batch > 0 && batch <= m->max_batch);
    prepare_forward(m, batch);
    if (m->c == 1) {
        m->input = x;
    } else {
        /* NCHW as loaded -> CNHW: transpose through the same helper, read as (N, C, HW). */
        size_t HW = m->h * m->w, C = m->c;
#pragma omp parallel for if (batch > 1 && batch * C * HW >= HERD__PAR_GRAIN) schedule(static)
        for (size_t n = 0; n < batch; n++)
            for (size_t c = 0; c < C; c++)
                memcpy(m->input_copy + (c * batch + n) * HW, x + (n * m->c + c) * HW, HW * sizeof(float));
        m->input = m->input_copy;
    }
    if (m->precision == HERD_PRECISION_BF16)
        herd__to_bf16(m->params, m->params_bf16, m->nparams);
    for (size_t i = 0; i < m->nlayers; i++)
        m->layers[i]->ops->forward(m->layers[i], m, batch, train);
}

const float *herd_model_logits(const herd_model *m) { return m->layers[m->nlayers - 1]->out; }

float herd_model_loss(herd_model *m, const int32_t *y, size_t batch, size_t *ncorrect)
{
    herd_layer *last = m->layers[m->nlayers - 1];
    return herd__softmax_xent(last->out, y, last->dout, batch, m->nclasses, ncorrect);
}

herd_status herd_model_backward(herd_model *m, size_t batch, herd_grad_ready_fn ready, void *ctx)
{
    if (!m || batch == 0 || batch > m->max_batch) /* the activations hold max_batch examples */
        return HERD_EINVAL;
    for (size_t i = 0; i + 1 < m->nlayers; i++)
        if (m->layers[i]->nreaders > 1 && m->layers[i]->grad)
            memset(m->layers[i]->dout, 0, batch * out_dim(m->layers[i]) * sizeof(float));
    for (size_t i = m->nlayers; i-- > 0;) {
        herd_layer *l = m->layers[i];
        if (!l->grad) /* no weights here or before: nothing to send back */
            continue;
        l->ops->backward(l, m, batch);
        if (ready && l->param_len) {
            herd_status st = ready(ctx, l->param_off, l->param_len);
            if (st < 0)
                return st;
        }
    }
    return HERD_OK;
}

herd_status herd_model_warm_up(herd_model *m)
{
    if (!m)
        return HERD_EINVAL;
    size_t b = m->max_batch, dim = m->c * m->h * m->w;
    float *x = calloc(b * dim + 1, sizeof(float));
    int32_t *y = calloc(b, sizeof(int32_t));
    float *saved = malloc((m->nparams + m->nbuffers + 1) * sizeof(float));
    herd_status st = HERD_ENOMEM;
    if (x && y && saved) {
        memcpy(saved, m->grads, m->nparams * sizeof(float));
        memcpy(saved + m->nparams, m->buffers, m->nbuffers * sizeof(float));
        herd_model_forward(m, x, b, true);
        (void)herd_model_loss(m, y, b, NULL);
        st = herd_model_backward(m, b, NULL, NULL);
        memcpy(m->grads, saved, m->nparams * sizeof(float));
        memcpy(m->buffers, saved + m->nparams, m->nbuffers * sizeof(float));
    }
    free(x);
    free(y);
    free(saved);
    return st;
}

void herd_model_evaluate(herd_model *m, const float *x, const int32_t *y, size_t n, size_t dim,
                         double *loss, double *acc)
{
    double total = 0;
    size_t hits = 0;
    for (size_t i = 0; i < n; i += m->max_batch) {
        size_t b = n - i < m->max_batch ? n - i : m->max_batch, h = 0;
        herd_model_forward(m, x + i * dim, b, false);
        total += (double)herd__softmax_xent(herd_model_logits(m), y + i, NULL, b, m->nclasses, &h) * (double)b;
        hits += h;
    }
    *loss = n ? total / (double)n : 0.0;
    *acc = n ? (double)hits / (double)n : 0.0;
}

