/* The layers: each kind's forward, backward and initialization on the
 * model's flat parameters (model.h; the model around them: model.c). */
#include "nn/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


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

static bool conv_is_pointwise(const conv_layer *cv) { return cv->k == 1 && cv->stride == 1 && cv->pad == 0; }

/* The layer's oneDNN primitives for batch N, created on first use; NULL
 * when the model uses im2col or oneDNN cannot do this shape (then the
 * im2col path runs). */
herd__conv *herd__conv_prim(conv_layer *cv, herd_model *m, size_t N)
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
        .src_blk = l->in >= 0 && m->layers[l->in]->blk, .dst_blk = l->blk, .nhwc = m->blk_nhwc, .nthr = nthr,
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
    herd__conv *prim = herd__conv_prim(cv, m, N);
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
    herd__conv *prim = herd__conv_prim(cv, m, N);
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

const herd_layer_ops herd__conv_ops = {
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

const herd_layer_ops herd__linear_ops = {
    .name = "linear", .forward = linear_forward, .backward = linear_backward, .init = linear_init};

/* ---- max pooling ---------------------------------------------------- */

static void pool_forward(herd_layer *l, herd_model *m, size_t N, bool train)
{
    (void)train;
    pool_layer *p = (pool_layer *)l;
    if (l->blk)
        herd__maxpool_forward_blk(in_out(m, l->in), l->out, p->idx, l->c / blk_of(m, l) * N, p->hin, p->win,
                                  p->k, p->stride, blk_of(m, l));
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
        herd__maxpool_backward_blk(l->dout, p->idx, relu_in, din, l->c / blk_of(m, l) * N, p->hin, p->win,
                                   p->k, p->stride, in_accumulates(m, l->in), blk_of(m, l));
    else if (din)
        herd__maxpool_backward(l->dout, p->idx, relu_in, din, l->c * N, p->hin, p->win, p->k, p->stride,
                               in_accumulates(m, l->in));
}

const herd_layer_ops herd__pool_ops = {
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
                                          bn_eps, bn_momentum, l->relu, bn->work, blk_of(m, l));
    else if (l->blk)
        herd__batchnorm_forward_eval_blk(in_out(m, l->in), gamma, beta, l->out, run_mean, run_var, C,
                                         N, l->h * l->w, bn_eps, l->relu, (float *)bn->work, blk_of(m, l));
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
                                     C, N, l->h * l->w, in_accumulates(m, l->in), bn->work, blk_of(m, l));
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

const herd_layer_ops herd__bn_ops = {
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

const herd_layer_ops herd__add_ops = {.name = "add", .forward = add_forward, .backward = add_backward};

/* ---- layout changes: flatten and global average pooling -------------- */

static void flatten_forward(herd_layer *l, herd_model *m, size_t N, bool train)
{
    (void)train;
    const herd_layer *src = l->in < 0 ? NULL : m->layers[l->in];
    size_t C = src ? src->c : m->c, HW = out_dim(l) / C;
    if (src && src->blk)
        herd__blk_to_nchw(in_out(m, l->in), l->out, C, N, HW, blk_of(m, src));
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
        herd__nchw_to_blk(l->dout, din, C, N, HW, in_accumulates(m, l->in), blk_of(m, m->layers[l->in]));
    else
        herd__nchw_to_cnhw(l->dout, din, C, N, HW, in_accumulates(m, l->in));
}

const herd_layer_ops herd__flatten_ops = {
    .name = "flatten", .forward = flatten_forward, .backward = flatten_backward};

static void gavg_forward(herd_layer *l, herd_model *m, size_t N, bool train)
{
    (void)train;
    const herd_layer *src = m->layers[l->in];
    size_t C = l->c, HW = src->h * src->w;
    const float *in = in_out(m, l->in);
    if (src->blk) { /* (N, C/B, HW, B): B channels' sums side by side, each in pixel order */
        size_t B = blk_of(m, src), CB = C / B;
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
        size_t B = blk_of(m, src), CB = C / B;
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

const herd_layer_ops herd__gavg_ops = {
    .name = "gavgpool", .forward = gavg_forward, .backward = gavg_backward};

