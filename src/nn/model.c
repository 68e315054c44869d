/* Layers and models on flat parameters.
 *
 * A model is a list of layers in forward order; each layer names the layer(s)
 * it reads (-1: the model input), so residual blocks are just an `add` layer
 * reading two earlier ones. Every layer owns its output and output-gradient
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

#include "herd/herd_rng.h"
#include "nn/kernels.h"

typedef struct herd_layer herd_layer;

typedef struct herd_layer_ops {
    const char *name;
    void (*forward)(herd_layer *l, herd_model *m, size_t N, bool train);
    void (*backward)(herd_layer *l, herd_model *m, size_t N);
    void (*init)(herd_layer *l, herd_model *m, herd_rng *rng);
} herd_layer_ops;

struct herd_layer {
    const herd_layer_ops *ops;
    int in, in2;          /* layers read; -1 is the model input */
    size_t c, h, w;       /* output shape of one example */
    bool flat;            /* output rows (N, c*h*w) rather than CNHW */
    bool relu;            /* fused ReLU on the output */
    bool dout_masked;     /* its one reader applies the ReLU's mask to dout */
    bool blk;             /* output (and dout) blocked (N, C/B, H, W, B), not CNHW: the plan's */
    int nreaders;         /* layers that read this one's output */
    bool grad;            /* its dout is wanted: it or a layer before it has weights */
    size_t param_off, param_len;
    size_t buf_off, buf_len;
    double fwd_flops;     /* per example */
    double bwd_flops;     /* per example */
    float *out, *dout;    /* max_batch * c*h*w each, owned */
};

/* oneDNN primitives for up to four batch sizes and thread counts (the
 * training batch and an epoch's or evaluation's last, shorter one; a
 * primitive keeps the thread count it was made for, and an adapting worker
 * runs at two), created on first use. */
enum { CONV_PRIMS = 4 };

typedef struct conv_layer {
    herd_layer base;
    size_t cin, hin, win, k, stride, pad;
    bool bias;
    herd__conv *prim[CONV_PRIMS];
    unsigned prim_next;  /* the slot replaced next when all are taken */
    size_t prim_failed;  /* a batch size oneDNN had no primitive for (0: none) */
} conv_layer;

typedef struct linear_layer {
    herd_layer base;
    size_t nin;
} linear_layer;

typedef struct pool_layer {
    herd_layer base;
    size_t hin, win, k, stride;
    uint32_t *idx;
} pool_layer;

typedef struct bn_layer {
    herd_layer base;
    float *save_mean, *save_invstd;
    double *work; /* the blocked kernels' sums (HERD__BN_BLK_WORK) */
} bn_layer;

struct herd_model {
    char name[32];
    size_t c, h, w, nclasses, max_batch;
    herd_layer **layers;
    size_t nlayers, cap;
    float *params, *grads, *buffers;
    size_t nparams, nbuffers;
    const float *input;  /* CNHW view of the current batch */
    float *input_copy;   /* used when C > 1 (NCHW -> CNHW) */
    float *scratch, *scratch2; /* one chunk's im2col and its gradient */
    herd__dnn *dnn;      /* oneDNN engine, stream and shared scratch; NULL until used */
    bool conv_im2col;    /* convolutions by im2col + sgemm, not oneDNN's primitives */
    bool layout_cnhw;    /* HERD_LAYOUT=cnhw: no blocked activations */
    bool blk_failed;     /* a convolution had no primitive for blocked tensors */
    int plan_key;        /* what the layers' blk flags were planned for (-1: nothing) */
    size_t blk_w;        /* B of the blocked activations (herd__blk_width), 0 when none */
    size_t scratch_len;  /* floats in scratch */
    herd_precision precision;
    /* BF16 only: the weights rounded at the start of each forward, and two
     * operands of one product rounded (and packed) for it */
    uint16_t *params_bf16, *op_bf16[2];
    size_t op_cap;       /* elements in each op_bf16 */
    herd_rng init_rng;
};

static size_t out_dim(const herd_layer *l) { return l->c * l->h * l->w; }

static const float *in_out(const herd_model *m, int in) { return in < 0 ? m->input : m->layers[in]->out; }

/* The gradient buffer of input `in`, or NULL where no gradient is wanted:
 * the model input, and a layer with no weights at or before it (mlp's
 * flatten: its reader's input gradient would be a product thrown away). */
static bool in_grad(const herd_model *m, int in) { return in >= 0 && m->layers[in]->grad; }

static float *in_dout(const herd_model *m, int in) { return in_grad(m, in) ? m->layers[in]->dout : NULL; }

static bool in_accumulates(const herd_model *m, int in) { return in >= 0 && m->layers[in]->nreaders > 1; }

/* One operand of a product in bf16: a slice of the weights is the copy
 * forward made; anything else is rounded into op_bf16[slot], its rows x
 * cols packed (ld becomes cols). */
static const uint16_t *bf16_operand(herd_model *m, int slot, const float *X, size_t rows, size_t cols,
                                    size_t *ld)
{
    uintptr_t x = (uintptr_t)X, p = (uintptr_t)m->params;
    if (x >= p && x < p + m->nparams * sizeof(float))
        return m->params_bf16 + (X - m->params);
    HERD_ASSERT(rows * cols <= m->op_cap);
    uint16_t *dst = m->op_bf16[slot];
    if (*ld == cols) {
        herd__to_bf16(X, dst, rows * cols);
    } else {
        for (size_t r = 0; r < rows; r++)
            herd__to_bf16(X + r * *ld, dst + r * cols, cols);
        *ld = cols;
    }
    return dst;
}

/* C (MxN) = op(A) op(B) + beta C in the model's precision (herd__sgemm's
 * arguments; alpha is 1). FP32 is herd__sgemm itself. */
static void gemm(herd_model *m, char ta, char tb, size_t M, size_t N, size_t K, const float *A, size_t lda,
                 const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    if (m->precision == HERD_PRECISION_FP32) {
        herd__sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (M == 0 || N == 0)
        return;
    const uint16_t *a = bf16_operand(m, 0, A, ta == 'N' ? M : K, ta == 'N' ? K : M, &lda);
    const uint16_t *b = bf16_operand(m, 1, B, tb == 'N' ? K : N, tb == 'N' ? N : K, &ldb);
    herd__gemm_bf16(m->dnn, ta, tb, M, N, K, a, lda, b, ldb, beta, C, ldc);
}

/* The element-wise loops below run on the thread's OpenMP team from
 * HERD__PAR_GRAIN floats (core/par.h): each element is its own. */
static void relu_forward(float *x, size_t n)
{
#pragma omp parallel for if (n >= HERD__PAR_GRAIN) schedule(static)
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

/* Masks dout by the fused ReLU's output before a layer's own backward. */
static void relu_backward(const herd_layer *l, size_t N)
{
    if (!l->relu || l->dout_masked)
        return;
    size_t n = N * out_dim(l);
    float *restrict d = l->dout;
    const float *restrict o = l->out;
#pragma omp parallel for if (n >= HERD__PAR_GRAIN) schedule(static)
    for (size_t i = 0; i < n; i++)
        d[i] = o[i] > 0.0f ? d[i] : 0.0f;
}

/* Sum of n floats with 16 partial sums: vectorizes, and the order is fixed
 * so results stay bit-reproducible. */
static float sum16(const float *x, size_t n)
{
    float acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++)
            acc[k] += x[i + k];
    float s = 0.0f;
    for (; i < n; i++)
        s += x[i];
    for (int k = 0; k < 16; k++)
        s += acc[k];
    return s;
}

/* out[i] = relu?(out[i] + b) over one contiguous channel. */
static void bias_act(float *restrict o, size_t n, float b, bool relu)
{
    if (relu)
        for (size_t i = 0; i < n; i++) {
            float v = o[i] + b;
            o[i] = v > 0.0f ? v : 0.0f;
        }
    else
        for (size_t i = 0; i < n; i++)
            o[i] += b;
}

static void fill_uniform(float *p, size_t n, float bound, herd_rng *rng)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (2.0f * herd_rng_uniform(rng) - 1.0f) * bound;
}

/* He-uniform for layers followed by ReLU, 1/sqrt(fan_in) otherwise. */
static float init_bound(size_t fan_in, bool relu)
{
    return relu ? sqrtf(6.0f / (float)fan_in) : 1.0f / sqrtf((float)fan_in);
}

/* ---- convolution ---------------------------------------------------- */

static size_t conv_rows(const conv_layer *cv) { return cv->cin * cv->k * cv->k; }

static bool conv_is_pointwise(const conv_layer *cv) { return cv->k == 1 && cv->stride == 1 && cv->pad == 0; }

/* The batch is convolved a few images at a time, so that a chunk's im2col
 * matrix (and its gradient) stays in the L2 cache between being written and
 * being read by the GEMM. The chunk size depends only on the shapes, so
 * results stay bit-reproducible. */
enum { CONV_CHUNK_BYTES = 256u << 10 };

static size_t conv_chunk(const conv_layer *cv, size_t N)
{
    size_t per_image = conv_rows(cv) * cv->base.h * cv->base.w * sizeof(float);
    size_t nb = CONV_CHUNK_BYTES / (per_image ? per_image : 1);
    return nb < 1 ? 1 : nb > N ? N : nb;
}

/* The layer's oneDNN primitives for batch N, created on first use; NULL
 * when the model uses im2col or oneDNN cannot do this shape (then the
 * im2col path runs). */
static herd__conv *conv_prim(conv_layer *cv, herd_model *m, size_t N)
{
    if (m->conv_im2col || cv->prim_failed == N)
        return NULL;
    int nthr = herd_nn_threads();
    for (unsigned i = 0; i < CONV_PRIMS; i++)
        if (cv->prim[i] && herd__conv_get_shape(cv->prim[i])->N == N &&
            herd__conv_get_shape(cv->prim[i])->nthr == nthr)
            return cv->prim[i];
    if (!m->dnn && herd__dnn_create(&m->dnn) != HERD_OK) {
        m->conv_im2col = true;
        return NULL;
    }
    const herd_layer *l = &cv->base;
    herd__conv_shape s = {
        .N = N, .C = cv->cin, .H = cv->hin, .W = cv->win, .K = l->c, .R = cv->k,
        .stride = cv->stride, .pad = cv->pad, .bias = cv->bias, .relu = l->relu,
        .din = in_grad(m, l->in), .din_accumulate = in_accumulates(m, l->in),
        .src_blk = l->in >= 0 && m->layers[l->in]->blk, .dst_blk = l->blk, .nthr = nthr,
        .bf16 = m->precision == HERD_PRECISION_BF16};
    unsigned slot = CONV_PRIMS;
    for (unsigned i = 0; i < CONV_PRIMS && slot == CONV_PRIMS; i++)
        if (!cv->prim[i])
            slot = i;
    if (slot == CONV_PRIMS) { /* all taken: round robin */
        slot = cv->prim_next;
        cv->prim_next = (cv->prim_next + 1) % CONV_PRIMS;
    }
    herd__conv_free(cv->prim[slot]);
    cv->prim[slot] = NULL;
    if (herd__conv_create(m->dnn, &s, &cv->prim[slot]) != HERD_OK) {
        cv->prim_failed = N;
        return NULL;
    }
    return cv->prim[slot];
}

static void conv_forward(herd_layer *l, herd_model *m, size_t N, bool train)
{
    (void)train;
    conv_layer *cv = (conv_layer *)l;
    herd__conv *prim = conv_prim(cv, m, N);
    if (prim) {
        const float *W = m->params + l->param_off;
        herd__conv_forward(prim, in_out(m, l->in), W, cv->bias ? W + l->c * conv_rows(cv) : NULL, l->out);
        return;
    }
    size_t rows = conv_rows(cv), hwo = l->h * l->w, cols = N * hwo, nb = conv_chunk(cv, N);
    const float *in = in_out(m, l->in), *W = m->params + l->param_off;
    for (size_t n0 = 0; n0 < N; n0 += nb) {
        size_t b = N - n0 < nb ? N - n0 : nb;
        const float *col = in + n0 * hwo; /* pointwise: the input is its own im2col */
        size_t ldcol = cols;
        if (!conv_is_pointwise(cv)) {
            herd__im2col_chunk(in, cv->cin, N, n0, b, cv->hin, cv->win, cv->k, cv->stride, cv->pad, m->scratch);
            col = m->scratch, ldcol = b * hwo;
        }
        /* out[:, chunk] (K, b*Ho*Wo) = W (K, C*R*R) @ col (C*R*R, b*Ho*Wo) */
        gemm(m, 'N', 'N', l->c, b * hwo, rows, W, rows, col, ldcol, 0.0f, l->out + n0 * hwo, cols);
    }
    const float *bias = W + l->c * rows;
    if (cv->bias || l->relu)
#pragma omp parallel for if (l->c > 1 && l->c * cols >= HERD__PAR_GRAIN) schedule(static)
        for (size_t k = 0; k < l->c; k++)
            bias_act(l->out + k * cols, cols, cv->bias ? bias[k] : 0.0f, l->relu);
}

static void conv_backward(herd_layer *l, herd_model *m, size_t N)
{
    conv_layer *cv = (conv_layer *)l;
    size_t rows = conv_rows(cv), hwo = l->h * l->w, cols = N * hwo, nb = conv_chunk(cv, N);
    relu_backward(l, N);
    const float *in = in_out(m, l->in), *W = m->params + l->param_off;
    float *dW = m->grads + l->param_off;
    herd__conv *prim = conv_prim(cv, m, N);
    if (prim) {
        herd__conv_backward(prim, in, W, l->dout, in_dout(m, l->in), dW, cv->bias ? dW + l->c * rows : NULL);
        return;
    }
    if (cv->bias)
#pragma omp parallel for if (l->c > 1 && l->c * cols >= HERD__PAR_GRAIN) schedule(static)
        for (size_t k = 0; k < l->c; k++)
            dW[l->c * rows + k] = sum16(l->dout + k * cols, cols);
    float *din = in_dout(m, l->in);
    bool acc = in_accumulates(m, l->in);
    if (din && !acc && !conv_is_pointwise(cv))
        memset(din, 0, N * cv->cin * cv->hin * cv->win * sizeof(float));
    for (size_t n0 = 0; n0 < N; n0 += nb) {
        size_t b = N - n0 < nb ? N - n0 : nb;
        const float *g = l->dout + n0 * hwo; /* dout[:, chunk], leading dimension cols */
        const float *col = in + n0 * hwo;
        size_t ldcol = cols;
        if (!conv_is_pointwise(cv)) {
            herd__im2col_chunk(in, cv->cin, N, n0, b, cv->hin, cv->win, cv->k, cv->stride, cv->pad, m->scratch);
            col = m->scratch, ldcol = b * hwo;
        }
        /* dW (K, CRR) += dout[:, chunk] @ col^T */
        gemm(m, 'N', 'T', l->c, rows, b * hwo, g, cols, col, ldcol, n0 ? 1.0f : 0.0f, dW, rows);
        if (!din)
            continue;
        if (conv_is_pointwise(cv)) {
            gemm(m, 'T', 'N', rows, b * hwo, l->c, W, rows, g, cols, acc ? 1.0f : 0.0f, din + n0 * hwo, cols);
            continue;
        }
        /* dcol (CRR, b*Ho*Wo) = W^T @ dout[:, chunk], scattered back onto the images */
        gemm(m, 'T', 'N', rows, b * hwo, l->c, W, rows, g, cols, 0.0f, m->scratch2, b * hwo);
        herd__col2im_add_chunk(m->scratch2, cv->cin, N, n0, b, cv->hin, cv->win, cv->k, cv->stride, cv->pad, din);
    }
}

static void conv_init(herd_layer *l, herd_model *m, herd_rng *rng)
{
    conv_layer *cv = (conv_layer *)l;
    size_t rows = conv_rows(cv);
    float *W = m->params + l->param_off;
    fill_uniform(W, l->c * rows, init_bound(rows, l->relu), rng);
    if (cv->bias)
        memset(W + l->c * rows, 0, l->c * sizeof(float));
}

static const herd_layer_ops conv_ops = {
    .name = "conv", .forward = conv_forward, .backward = conv_backward, .init = conv_init};

/* ---- fully connected ------------------------------------------------ */

static void linear_forward(herd_layer *l, herd_model *m, size_t N, bool train)
{
    (void)train;
    linear_layer *fc = (linear_layer *)l;
    size_t I = fc->nin, O = l->c;
    const float *in = in_out(m, l->in), *W = m->params + l->param_off, *b = W + O * I;
    for (size_t n = 0; n < N; n++)
        memcpy(l->out + n * O, b, O * sizeof(float));
    /* out (N,O) = in (N,I) @ W^T (I,O) + b */
    gemm(m, 'N', 'T', N, O, I, in, I, W, I, 1.0f, l->out, O);
    if (l->relu)
        relu_forward(l->out, N * O);
}

static void linear_backward(herd_layer *l, herd_model *m, size_t N)
{
    linear_layer *fc = (linear_layer *)l;
    size_t I = fc->nin, O = l->c;
    relu_backward(l, N);
    const float *in = in_out(m, l->in), *W = m->params + l->param_off;
    float *dW = m->grads + l->param_off, *db = dW + O * I;
    /* dW (O,I) = dout^T (O,N) @ in (N,I) */
    gemm(m, 'T', 'N', O, I, N, l->dout, O, in, I, 0.0f, dW, I);
    /* db[o] sums over the examples in their order; blocks of outputs in parallel */
    enum { DB_BLOCK = 64 };
#pragma omp parallel for if (O > DB_BLOCK && N * O >= HERD__PAR_GRAIN) schedule(static)
    for (size_t o0 = 0; o0 < O; o0 += DB_BLOCK) {
        size_t o1 = O - o0 < DB_BLOCK ? O : o0 + DB_BLOCK;
        memset(db + o0, 0, (o1 - o0) * sizeof(float));
        for (size_t n = 0; n < N; n++) {
            const float *g = l->dout + n * O;
            for (size_t o = o0; o < o1; o++)
                db[o] += g[o];
        }
    }
    float *din = in_dout(m, l->in);
    if (din) /* din (N,I) = dout (N,O) @ W (O,I) */
        gemm(m, 'N', 'N', N, I, O, l->dout, O, W, I, in_accumulates(m, l->in) ? 1.0f : 0.0f, din, I);
}

static void linear_init(herd_layer *l, herd_model *m, herd_rng *rng)
{
    linear_layer *fc = (linear_layer *)l;
    float *W = m->params + l->param_off;
    fill_uniform(W, l->c * fc->nin, init_bound(fc->nin, l->relu), rng);
    memset(W + l->c * fc->nin, 0, l->c * sizeof(float));
}

static const herd_layer_ops linear_ops = {
    .name = "linear", .forward = linear_forward, .backward = linear_backward, .init = linear_init};

/* ---- max pooling ---------------------------------------------------- */

static void pool_forward(herd_layer *l, herd_model *m, size_t N, bool train)
{
    (void)train;
    pool_layer *p = (pool_layer *)l;
    if (l->blk)
        herd__maxpool_forward_blk(in_out(m, l->in), l->out, p->idx, l->c / m->blk_w * N, p->hin, p->win, p->k,
                                  p->stride, m->blk_w);
    else
        herd__maxpool_forward(in_out(m, l->in), l->out, p->idx, l->c * N, p->hin, p->win, p->k, p->stride);
    if (l->relu)
        relu_forward(l->out, N * out_dim(l));
}

static void pool_backward(herd_layer *l, herd_model *m, size_t N)
{
    pool_layer *p = (pool_layer *)l;
    relu_backward(l, N);
    float *din = in_dout(m, l->in);
    const float *relu_in = din && m->layers[l->in]->dout_masked ? in_out(m, l->in) : NULL;
    if (din && l->blk)
        herd__maxpool_backward_blk(l->dout, p->idx, relu_in, din, l->c / m->blk_w * N, p->hin, p->win, p->k,
                                   p->stride, in_accumulates(m, l->in), m->blk_w);
    else if (din)
        herd__maxpool_backward(l->dout, p->idx, relu_in, din, l->c * N, p->hin, p->win, p->k, p->stride,
                               in_accumulates(m, l->in));
}

static const herd_layer_ops pool_ops = {
    .name = "maxpool", .forward = pool_forward, .backward = pool_backward};

/* ---- batch normalization -------------------------------------------- */

static const float bn_eps = 1e-5f, bn_momentum = 0.1f;

static void bn_forward(herd_layer *l, herd_model *m, size_t N, bool train)
{
    bn_layer *bn = (bn_layer *)l;
    size_t C = l->c, len = N * l->h * l->w;
    const float *gamma = m->params + l->param_off, *beta = gamma + C;
    float *run_mean = m->buffers + l->buf_off, *run_var = run_mean + C;
    if (l->blk && train)
        herd__batchnorm_forward_train_blk(in_out(m, l->in), gamma, beta, l->out, bn->save_mean,
                                          bn->save_invstd, run_mean, run_var, C, N, l->h * l->w,
                                          bn_eps, bn_momentum, l->relu, bn->work, m->blk_w);
    else if (l->blk)
        herd__batchnorm_forward_eval_blk(in_out(m, l->in), gamma, beta, l->out, run_mean, run_var, C,
                                         N, l->h * l->w, bn_eps, l->relu, (float *)bn->work, m->blk_w);
    else if (train)
        herd__batchnorm_forward_train(in_out(m, l->in), gamma, beta, l->out, bn->save_mean,
                                      bn->save_invstd, run_mean, run_var, C, len, bn_eps,
                                      bn_momentum, l->relu);
    else
        herd__batchnorm_forward_eval(in_out(m, l->in), gamma, beta, l->out, run_mean, run_var, C,
                                     len, bn_eps, l->relu);
}

static void bn_backward(herd_layer *l, herd_model *m, size_t N)
{
    bn_layer *bn = (bn_layer *)l;
    size_t C = l->c, len = N * l->h * l->w;
    const float *gamma = m->params + l->param_off;
    float *dgamma = m->grads + l->param_off, *dbeta = dgamma + C;
    /* the fused ReLU's mask is applied inside, saving a pass over dout */
    if (l->blk) {
        herd__batchnorm_backward_blk(in_out(m, l->in), gamma, l->dout, l->relu ? l->out : NULL,
                                     bn->save_mean, bn->save_invstd, in_dout(m, l->in), dgamma, dbeta,
                                     C, N, l->h * l->w, in_accumulates(m, l->in), bn->work, m->blk_w);
        return;
    }
    herd__batchnorm_backward(in_out(m, l->in), gamma, l->dout, l->relu ? l->out : NULL,
                             bn->save_mean, bn->save_invstd, in_dout(m, l->in), dgamma, dbeta, C,
                             len, in_accumulates(m, l->in));
}

static void bn_init(herd_layer *l, herd_model *m, herd_rng *rng)
{
    (void)rng;
    size_t C = l->c;
    float *gamma = m->params + l->param_off, *run = m->buffers + l->buf_off;
    for (size_t c = 0; c < C; c++) {
        gamma[c] = 1.0f, gamma[C + c] = 0.0f;
        run[c] = 0.0f, run[C + c] = 1.0f;
    }
}

static const herd_layer_ops bn_ops = {
    .name = "batchnorm", .forward = bn_forward, .backward = bn_backward, .init = bn_init};

/* ---- residual add --------------------------------------------------- */

static void add_forward(herd_layer *l, herd_model *m, size_t N, bool train)
{
    (void)train;
    const float *restrict a = in_out(m, l->in), *restrict b = in_out(m, l->in2);
    float *restrict o = l->out;
    size_t n = N * out_dim(l);
    bool par = n >= HERD__PAR_GRAIN;
    if (l->relu)
#pragma omp parallel for if (par) schedule(static)
        for (size_t i = 0; i < n; i++) {
            float v = a[i] + b[i];
            o[i] = v > 0.0f ? v : 0.0f;
        }
    else
#pragma omp parallel for if (par) schedule(static)
        for (size_t i = 0; i < n; i++)
            o[i] = a[i] + b[i];
}

static void add_backward(herd_layer *l, herd_model *m, size_t N)
{
    size_t n = N * out_dim(l);
    bool par = n >= HERD__PAR_GRAIN;
    const float *restrict g = l->dout, *restrict o = l->out;
    int ins[2] = {l->in, l->in2};
    for (int k = 0; k < 2; k++) {
        float *restrict din = in_dout(m, ins[k]);
        if (!din)
            continue;
        bool acc = in_accumulates(m, ins[k]);
        /* the fused ReLU's mask applied on the way, not in place first */
        if (l->relu && acc)
#pragma omp parallel for if (par) schedule(static)
            for (size_t i = 0; i < n; i++)
                din[i] += o[i] > 0.0f ? g[i] : 0.0f;
        else if (l->relu)
#pragma omp parallel for if (par) schedule(static)
            for (size_t i = 0; i < n; i++)
                din[i] = o[i] > 0.0f ? g[i] : 0.0f;
        else if (acc)
#pragma omp parallel for if (par) schedule(static)
            for (size_t i = 0; i < n; i++)
                din[i] += g[i];
        else
            memcpy(din, g, n * sizeof(float));
    }
}

static const herd_layer_ops add_ops = {.name = "add", .forward = add_forward, .backward = add_backward};

/* ---- layout changes: flatten and global average pooling -------------- */

static void flatten_forward(herd_layer *l, herd_model *m, size_t N, bool train)
{
    (void)train;
    const herd_layer *src = l->in < 0 ? NULL : m->layers[l->in];
    size_t C = src ? src->c : m->c, HW = out_dim(l) / C;
    if (src && src->blk)
        herd__blk_to_nchw(in_out(m, l->in), l->out, C, N, HW, m->blk_w);
    else
        herd__cnhw_to_nchw(in_out(m, l->in), l->out, C, N, HW);
}

static void flatten_backward(herd_layer *l, herd_model *m, size_t N)
{
    float *din = in_dout(m, l->in);
    if (!din)
        return;
    size_t C = m->layers[l->in]->c, HW = out_dim(l) / C;
    if (m->layers[l->in]->blk)
        herd__nchw_to_blk(l->dout, din, C, N, HW, in_accumulates(m, l->in), m->blk_w);
    else
        herd__nchw_to_cnhw(l->dout, din, C, N, HW, in_accumulates(m, l->in));
}

static const herd_layer_ops flatten_ops = {
    .name = "flatten", .forward = flatten_forward, .backward = flatten_backward};

static void gavg_forward(herd_layer *l, herd_model *m, size_t N, bool train)
{
    (void)train;
    const herd_layer *src = m->layers[l->in];
    size_t C = l->c, HW = src->h * src->w;
    const float *in = in_out(m, l->in);
    if (src->blk) { /* (N, C/B, HW, B): B channels' sums side by side, each in pixel order */
        size_t B = m->blk_w, CB = C / B;
#pragma omp parallel for if (N * CB > 1 && C * N * HW >= HERD__PAR_GRAIN) schedule(static)
        for (size_t t = 0; t < N * CB; t++) {
            const float *p = in + t * HW * B;
            float s[HERD__BLK_MAX] = {0};
            for (size_t i = 0; i < HW; i++)
                for (size_t k = 0; k < B; k++)
                    s[k] += p[i * B + k];
            for (size_t k = 0; k < B; k++)
                l->out[t * B + k] = s[k] / (float)HW;
        }
        return;
    }
#pragma omp parallel for if (C > 1 && C * N * HW >= HERD__PAR_GRAIN) schedule(static)
    for (size_t c = 0; c < C; c++)
        for (size_t n = 0; n < N; n++) {
            const float *p = in + (c * N + n) * HW;
            float s = 0.0f;
            for (size_t i = 0; i < HW; i++)
                s += p[i];
            l->out[n * C + c] = s / (float)HW;
        }
}

static void gavg_backward(herd_layer *l, herd_model *m, size_t N)
{
    const herd_layer *src = m->layers[l->in];
    size_t C = l->c, HW = src->h * src->w;
    float *din = in_dout(m, l->in);
    bool acc = in_accumulates(m, l->in);
    if (!din)
        return;
    if (src->blk) {
        size_t B = m->blk_w, CB = C / B;
#pragma omp parallel for if (N * CB > 1 && C * N * HW >= HERD__PAR_GRAIN) schedule(static)
        for (size_t t = 0; t < N * CB; t++) {
            /* out (N, C) row n, channels of block t % CB: the same t * B */
            const float *g = l->dout + t * B;
            float *p = din + t * HW * B;
            for (size_t i = 0; i < HW; i++)
                for (size_t k = 0; k < B; k++) {
                    float v = g[k] / (float)HW;
                    p[i * B + k] = acc ? p[i * B + k] + v : v;
                }
        }
        return;
    }
#pragma omp parallel for if (C > 1 && C * N * HW >= HERD__PAR_GRAIN) schedule(static)
    for (size_t c = 0; c < C; c++)
        for (size_t n = 0; n < N; n++) {
            float g = l->dout[n * C + c] / (float)HW, *p = din + (c * N + n) * HW;
            for (size_t i = 0; i < HW; i++)
                p[i] = acc ? p[i] + g : g;
        }
}

static const herd_layer_ops gavg_ops = {
    .name = "gavgpool", .forward = gavg_forward, .backward = gavg_backward};

/* ---- building ------------------------------------------------------- */

/* The builder records an error instead of failing each call, so model
 * definitions read as straight-line code; herd_model_create checks it once. */
typedef struct builder {
    herd_model *m;
    herd_status st;
    herd_err *err;
} builder;

static void shape_of(const builder *b, int in, size_t *c, size_t *h, size_t *w, bool *flat)
{
    if (in < 0) {
        *c = b->m->c, *h = b->m->h, *w = b->m->w, *flat = false;
    } else {
        const herd_layer *l = b->m->layers[in];
        *c = l->c, *h = l->h, *w = l->w, *flat = l->flat;
    }
}

static int push(builder *b, herd_layer *l, const herd_layer_ops *ops, int in, int in2, size_t c,
                size_t h, size_t w, bool flat, bool relu, size_t nparams, size_t nbuf)
{
    herd_model *m = b->m;
    if (!l) {
        b->st = herd_err_set(b->err, HERD_ENOMEM, "out of memory building model %s", m->name);
        return -1;
    }
    if (m->nlayers == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 16;
        herd_layer **nl = realloc(m->layers, cap * sizeof *nl);
        if (!nl) {
            free(l);
            b->st = herd_err_set(b->err, HERD_ENOMEM, "out of memory building model %s", m->name);
            return -1;
        }
        m->layers = nl, m->cap = cap;
    }
    l->ops = ops, l->in = in, l->in2 = in2;
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

static bool ok(builder *b, int in) { return b->st == HERD_OK && in >= -1; }

static int conv(builder *b, int in, size_t cout, size_t k, size_t stride, size_t pad, bool bias, bool relu)
{
    if (!ok(b, in))
        return -2;
    size_t c, h, w;
    bool flat;
    shape_of(b, in, &c, &h, &w, &flat);
    if (flat || h + 2 * pad < k || w + 2 * pad < k) {
        b->st = herd_err_set(b->err, HERD_EINVAL,
                             "model %s: a %zux%zu convolution does not fit its %zux%zux%zu input",
                             b->m->name, k, k, c, h, w);
        return -2;
    }
    conv_layer *cv = calloc(1, sizeof *cv);
    size_t ho = (h + 2 * pad - k) / stride + 1, wo = (w + 2 * pad - k) / stride + 1;
    int id = push(b, &cv->base, &conv_ops, in, -1, cout, ho, wo, false, relu,
                  cout * c * k * k + (bias ? cout : 0), 0);
    if (id < 0)
        return -2;
    cv->cin = c, cv->hin = h, cv->win = w, cv->k = k, cv->stride = stride, cv->pad = pad, cv->bias = bias;
    double macs = (double)cout * (double)(c * k * k) * (double)(ho * wo);
    cv->base.fwd_flops = 2 * macs;
    cv->base.bwd_flops = 2 * macs * (in_grad(b->m, in) ? 2 : 1);
    return id;
}

static int flatten(builder *b, int in)
{
    if (!ok(b, in))
        return -2;
    size_t c, h, w;
    bool flat;
    shape_of(b, in, &c, &h, &w, &flat);
    if (flat)
        return in;
    herd_layer *l = calloc(1, sizeof *l);
    return push(b, l, &flatten_ops, in, -1, c * h * w, 1, 1, true, false, 0, 0);
}

static int linear(builder *b, int in, size_t nout, bool relu)
{
    in = flatten(b, in);
    if (!ok(b, in))
        return -2;
    size_t c, h, w;
    bool flat;
    shape_of(b, in, &c, &h, &w, &flat);
    size_t nin = c * h * w;
    linear_layer *fc = calloc(1, sizeof *fc);
    int id = push(b, &fc->base, &linear_ops, in, -1, nout, 1, 1, true, relu, nout * nin + nout, 0);
    if (id < 0)
        return -2;
    fc->nin = nin;
    fc->base.fwd_flops = 2.0 * (double)nin * (double)nout;
    fc->base.bwd_flops = fc->base.fwd_flops * (in_grad(b->m, in) ? 2 : 1);
    return id;
}

static int maxpool(builder *b, int in, size_t k, size_t stride)
{
    if (!ok(b, in))
        return -2;
    size_t c, h, w;
    bool flat;
    shape_of(b, in, &c, &h, &w, &flat);
    if (flat || h < k || w < k) {
        b->st = herd_err_set(b->err, HERD_EINVAL, "model %s: a %zux%zu pooling does not fit its %zux%zux%zu input",
                             b->m->name, k, k, c, h, w);
        return -2;
    }
    pool_layer *p = calloc(1, sizeof *p);
    int id = push(b, &p->base, &pool_ops, in, -1, c, (h - k) / stride + 1, (w - k) / stride + 1,
                  false, false, 0, 0);
    if (id < 0)
        return -2;
    p->hin = h, p->win = w, p->k = k, p->stride = stride;
    return id;
}

static int batchnorm(builder *b, int in, bool relu)
{
    if (!ok(b, in))
        return -2;
    size_t c, h, w;
    bool flat;
    shape_of(b, in, &c, &h, &w, &flat);
    bn_layer *bn = calloc(1, sizeof *bn);
    return push(b, &bn->base, &bn_ops, in, -1, c, h, w, flat, relu, 2 * c, 2 * c);
}

static int add(builder *b, int x, int y, bool relu)
{
    if (!ok(b, x) || !ok(b, y))
        return -2;
    size_t c, h, w;
    bool flat;
    shape_of(b, x, &c, &h, &w, &flat);
    herd_layer *l = calloc(1, sizeof *l);
    return push(b, l, &add_ops, x, y, c, h, w, flat, relu, 0, 0);
}

static int gavgpool(builder *b, int in)
{
    if (!ok(b, in))
        return -2;
    size_t c, h, w;
    bool flat;
    shape_of(b, in, &c, &h, &w, &flat);
    herd_layer *l = calloc(1, sizeof *l);
    return push(b, l, &gavg_ops, in, -1, c, 1, 1, true, false, 0, 0);
}

/* ---- the models ----------------------------------------------------- */

static void build_linear(builder *b, size_t k) { linear(b, -1, k, false); }

static void build_mlp(builder *b, size_t k)
{
    int x = linear(b, -1, 1024, true);
    x = linear(b, x, 1024, true);
    linear(b, x, k, false);
}

static void build_lenet(builder *b, size_t k)
{
    int x = conv(b, -1, 6, 5, 1, 2, true, true);
    x = maxpool(b, x, 2, 2);
    x = conv(b, x, 16, 5, 1, 0, true, true);
    x = maxpool(b, x, 2, 2);
    x = linear(b, x, 120, true);
    x = linear(b, x, 84, true);
    linear(b, x, k, false);
}

static void build_cnn(builder *b, size_t k)
{
    int x = conv(b, -1, 32, 5, 1, 2, true, true);
    x = maxpool(b, x, 2, 2);
    x = conv(b, x, 64, 5, 1, 2, true, true);
    x = maxpool(b, x, 2, 2);
    x = linear(b, x, 1024, true);
    linear(b, x, k, false);
}

/* CIFAR ResNet basic block; a 1x1 projection when the shape changes. */
static int basic_block(builder *b, int in, size_t cout, size_t stride)
{
    size_t c, h, w;
    bool flat;
    if (!ok(b, in))
        return -2;
    shape_of(b, in, &c, &h, &w, &flat);
    int x = conv(b, in, cout, 3, stride, 1, false, false);
    x = batchnorm(b, x, true);
    x = conv(b, x, cout, 3, 1, 1, false, false);
    x = batchnorm(b, x, false);
    int sc = in;
    if (stride != 1 || c != cout)
        sc = batchnorm(b, conv(b, in, cout, 1, stride, 0, false, false), false);
    return add(b, x, sc, true);
}

static void build_resnet20(builder *b, size_t k)
{
    int x = conv(b, -1, 16, 3, 1, 1, false, false);
    x = batchnorm(b, x, true);
    static const size_t widths[3] = {16, 32, 64};
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 3; i++)
            x = basic_block(b, x, widths[s], (s > 0 && i == 0) ? 2 : 1);
    x = gavgpool(b, x);
    linear(b, x, k, false);
}

typedef struct model_def {
    const char *name;
    void (*build)(builder *b, size_t nclasses);
} model_def;

static const model_def model_defs[] = {
    {"linear", build_linear}, {"mlp", build_mlp},           {"lenet", build_lenet},
    {"cnn", build_cnn},       {"resnet20", build_resnet20},
};

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
        if (l->ops == &conv_ops) {
            conv_layer *cv = (conv_layer *)l;
            size_t col = conv_rows(cv) * conv_chunk(cv, B) * l->h * l->w;
            if (col > scratch)
                scratch = col;
        } else if (l->ops == &pool_ops) {
            pool_layer *p = (pool_layer *)l;
            p->idx = malloc(n * sizeof(uint32_t));
            if (!p->idx)
                goto oom;
            /* pooling masks the gradient of a ReLU it alone reads (conv+ReLU+pool) */
            if (l->in >= 0 && m->layers[l->in]->relu && m->layers[l->in]->nreaders == 1)
                m->layers[l->in]->dout_masked = true;
        } else if (l->ops == &bn_ops) {
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

herd_status herd_model_create(const char *name, size_t c, size_t h, size_t w, size_t nclasses,
                              size_t max_batch, uint64_t seed, herd_model **out, herd_err *err)
{
    herd_status st = HERD_OK;
    *out = NULL;
    if (!name || !c || !h || !w || nclasses < 2 || !max_batch)
        return herd_err_set(err, HERD_EINVAL, "model: invalid shape %zux%zux%zu, %zu classes, batch %zu",
                            c, h, w, nclasses, max_batch);
    const model_def *def = NULL;
    for (size_t i = 0; i < sizeof model_defs / sizeof model_defs[0]; i++)
        if (!strcmp(model_defs[i].name, name))
            def = &model_defs[i];
    if (!def)
        return herd_err_set(err, HERD_EINVAL,
                            "unknown model '%s' (choose one of: linear, mlp, lenet, cnn, resnet20)", name);
    herd_model *m = calloc(1, sizeof *m);
    if (!m)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    snprintf(m->name, sizeof m->name, "%s", name);
    m->c = c, m->h = h, m->w = w, m->nclasses = nclasses, m->max_batch = max_batch;
    const char *conv_env = getenv("HERD_CONV");
    m->conv_im2col = conv_env && !strcmp(conv_env, "im2col");
    const char *layout_env = getenv("HERD_LAYOUT");
    m->layout_cnhw = layout_env && !strcmp(layout_env, "cnhw");
    m->plan_key = -1;
    builder b = {m, HERD_OK, err};
    def->build(&b, nclasses);
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

void herd_model_free(herd_model *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nlayers; i++) {
        herd_layer *l = m->layers[i];
        free(l->out);
        free(l->dout);
        if (l->ops == &pool_ops)
            free(((pool_layer *)l)->idx);
        else if (l->ops == &conv_ops)
            for (unsigned k = 0; k < CONV_PRIMS; k++)
                herd__conv_free(((conv_layer *)l)->prim[k]);
        else if (l->ops == &bn_ops) {
            free(((bn_layer *)l)->save_mean);
            free(((bn_layer *)l)->work);
        }
        free(l);
    }
    free(m->layers);
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

static const char *const precision_names[] = {"fp32", "bf16"};

herd_status herd_precision_parse(const char *s, herd_precision *out)
{
    for (size_t i = 0; i < sizeof precision_names / sizeof precision_names[0]; i++)
        if (s && !strcmp(s, precision_names[i])) {
            *out = (herd_precision)i;
            return HERD_OK;
        }
    return HERD_EINVAL;
}

const char *herd_precision_name(herd_precision p)
{
    return (size_t)p < sizeof precision_names / sizeof precision_names[0] ? precision_names[p] : "?";
}

/* Frees the convolutions' primitives: they were made for one precision. */
static void drop_conv_prims(herd_model *m)
{
    for (size_t i = 0; i < m->nlayers; i++)
        if (m->layers[i]->ops == &conv_ops) {
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
        bool bn = l->ops == &bn_ops;
        bool bias = l->ops == &linear_ops || (l->ops == &conv_ops && ((const conv_layer *)l)->bias);
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
        if (l->ops == &conv_ops) {
            const conv_layer *cv = (const conv_layer *)l;
            size_t w[4] = {C, cv->cin, cv->k, cv->k};
            add_tensor(out, cap, &n, "conv", ++nconv, "weight", false, at, 4, w);
            if (cv->bias)
                add_tensor(out, cap, &n, "conv", nconv, "bias", false, at + C * conv_rows(cv), 1, &C);
        } else if (l->ops == &linear_ops) {
            const linear_layer *fc = (const linear_layer *)l;
            size_t w[2] = {C, fc->nin};
            add_tensor(out, cap, &n, "fc", ++nfc, "weight", false, at, 2, w);
            add_tensor(out, cap, &n, "fc", nfc, "bias", false, at + C * fc->nin, 1, &C);
        } else if (l->ops == &bn_ops) { /* params gamma, beta; buffers mean, var (bn_forward) */
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
 * in place of order) and write blocked fp32. */
static void plan_layouts(herd_model *m)
{
    bool on = !m->conv_im2col && !m->layout_cnhw && !m->blk_failed && herd__blk_width();
    m->blk_w = on ? herd__blk_width() : 0;
    for (size_t i = 0; i < m->nlayers; i++) {
        herd_layer *l = m->layers[i];
        bool kind = l->ops == &conv_ops ||
                    ((l->ops == &bn_ops || l->ops == &pool_ops || l->ops == &add_ops) && l->in >= 0 &&
                     (l->ops != &add_ops || l->in2 >= 0));
        l->blk = on && kind && !l->flat && l->c % m->blk_w == 0;
    }
    bool changed = true;
    while (changed) {
        changed = false;
        for (size_t i = 0; i < m->nlayers; i++) {
            herd_layer *l = m->layers[i];
            bool a = l->in >= 0 && m->layers[l->in]->blk;
            if (l->ops == &bn_ops || l->ops == &pool_ops) {
                if (a != l->blk)
                    unblock(m, l->in, &changed), unblock(m, (int)i, &changed);
            } else if (l->ops == &add_ops) {
                bool b = l->in2 >= 0 && m->layers[l->in2]->blk;
                if (a != l->blk || b != l->blk)
                    unblock(m, l->in, &changed), unblock(m, l->in2, &changed), unblock(m, (int)i, &changed);
            } else if (l->ops != &conv_ops && l->ops != &gavg_ops && l->ops != &flatten_ops) {
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
        if (m->layers[i]->ops == &conv_ops && !conv_prim((conv_layer *)m->layers[i], m, N)) {
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
