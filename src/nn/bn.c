/* Batch normalization, training and evaluation, forward and backward: on
 * CNHW channels, and on blocked activations (nn/vec.h). Sums in double,
 * in a fixed order: the bits repeat. */
#include "nn/kernels.h"

#include <math.h>
#include <string.h>

#include "nn/vec.h"

/* Sums in double over 16 independent lanes: gcc vectorizes the lanes (two
 * zmm of doubles) where a single running sum would be a chain of scalar
 * adds, and the order is fixed, so results stay bit-reproducible. */
enum { BN_LANES = 16 };

/* *s1 = sum(x - x0), *s2 = sum((x - x0)^2) over one channel. */
static void bn_shifted_sums(const float *restrict x, size_t n, double x0, double *s1, double *s2)
{
    double a[BN_LANES] = {0}, q[BN_LANES] = {0};
    size_t i = 0;
    for (; i + BN_LANES <= n; i += BN_LANES)
        for (int k = 0; k < BN_LANES; k++) {
            double d = (double)x[i + k] - x0;
            a[k] += d;
            q[k] += d * d;
        }
    double sa = 0, sq = 0;
    for (; i < n; i++) {
        double d = (double)x[i] - x0;
        sa += d;
        sq += d * d;
    }
    for (int k = 0; k < BN_LANES; k++)
        sa += a[k], sq += q[k];
    *s1 = sa, *s2 = sq;
}

/* y = relu?(x * scale + shift) over one channel. */
static void bn_apply(const float *restrict x, float *restrict y, size_t n, float scale, float shift,
                     bool relu)
{
    if (relu)
        for (size_t i = 0; i < n; i++) {
            float v = x[i] * scale + shift;
            y[i] = v > 0.0f ? v : 0.0f;
        }
    else
        for (size_t i = 0; i < n; i++)
            y[i] = x[i] * scale + shift;
}

void herd__batchnorm_forward_train(const float *in, const float *gamma, const float *beta,
                                   float *out, float *save_mean, float *save_invstd,
                                   float *run_mean, float *run_var, size_t C, size_t len,
                                   float eps, float momentum, bool relu)
{
    /* channels in parallel; a channel's sums stay on one thread */
#pragma omp parallel for if (C > 1 && C * len >= HERD__PAR_GRAIN) schedule(static)
    for (size_t c = 0; c < C; c++) {
        const float *x = in + c * len;
        /* one pass, shifted by the channel's first value so the variance
         * does not cancel when |mean| >> std */
        double x0 = len ? (double)x[0] : 0.0, s1, s2;
        bn_shifted_sums(x, len, x0, &s1, &s2);
        double dm = s1 / (double)len, mean = x0 + dm;
        double sq = s2 - s1 * dm; /* sum (x - mean)^2 */
        if (sq < 0)
            sq = 0;
        double var = sq / (double)len;
        float invstd = (float)(1.0 / sqrt(var + eps));
        float scale = gamma[c] * invstd, shift = beta[c] - (float)mean * scale;
        bn_apply(x, out + c * len, len, scale, shift, relu);
        save_mean[c] = (float)mean;
        save_invstd[c] = invstd;
        double unbiased = len > 1 ? sq / (double)(len - 1) : var;
        run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * (float)mean;
        run_var[c] = (1.0f - momentum) * run_var[c] + momentum * (float)unbiased;
    }
}

void herd__batchnorm_forward_eval(const float *in, const float *gamma, const float *beta,
                                  float *out, const float *run_mean, const float *run_var,
                                  size_t C, size_t len, float eps, bool relu)
{
#pragma omp parallel for if (C > 1 && C * len >= HERD__PAR_GRAIN) schedule(static)
    for (size_t c = 0; c < C; c++) {
        float scale = gamma[c] / sqrtf(run_var[c] + eps), shift = beta[c] - run_mean[c] * scale;
        bn_apply(in + c * len, out + c * len, len, scale, shift, relu);
    }
}

/* sum(g) and sum(g * (x - mean)) over one channel, g masked by a fused
 * ReLU's output ro when there is one. The mask goes through a small buffer
 * first: tested inside the summing loop it becomes an unpredictable branch
 * (7x slower, measured), as a select of its own it vectorizes. */
enum { BN_CHUNK = 256 };

static void bn_dsums(const float *restrict x, const float *restrict g, const float *restrict ro,
                     size_t n, float mean, double *sg, double *sgx)
{
    double a[BN_LANES] = {0}, b[BN_LANES] = {0}, s1 = 0, s2 = 0;
    float buf[BN_CHUNK];
    for (size_t i0 = 0; i0 < n; i0 += BN_CHUNK) {
        size_t m = n - i0 < BN_CHUNK ? n - i0 : BN_CHUNK;
        const float *restrict gg = g + i0, *restrict xx = x + i0;
        if (ro) {
            for (size_t i = 0; i < m; i++)
                buf[i] = ro[i0 + i] > 0.0f ? gg[i] : 0.0f;
            gg = buf;
        }
        size_t i = 0;
        for (; i + BN_LANES <= m; i += BN_LANES)
            for (int k = 0; k < BN_LANES; k++) {
                a[k] += gg[i + k];
                b[k] += (double)gg[i + k] * (double)(xx[i + k] - mean);
            }
        for (; i < m; i++) {
            s1 += gg[i];
            s2 += (double)gg[i] * (double)(xx[i] - mean);
        }
    }
    for (int k = 0; k < BN_LANES; k++)
        s1 += a[k], s2 += b[k];
    *sg = s1, *sgx = s2;
}

void herd__batchnorm_backward(const float *in, const float *gamma, const float *dout,
                              const float *relu_out, const float *save_mean,
                              const float *save_invstd, float *din, float *dgamma, float *dbeta,
                              size_t C, size_t len, bool accumulate)
{
    /* channels in parallel, as forward */
#pragma omp parallel for if (C > 1 && C * len >= HERD__PAR_GRAIN) schedule(static)
    for (size_t c = 0; c < C; c++) {
        const float *restrict x = in + c * len, *restrict g = dout + c * len;
        const float *restrict ro = relu_out ? relu_out + c * len : NULL;
        float *restrict dx = din ? din + c * len : NULL;
        float mean = save_mean[c], invstd = save_invstd[c];
        double sg, sgx;
        bn_dsums(x, g, ro, len, mean, &sg, &sgx);
        dbeta[c] = (float)sg;
        dgamma[c] = (float)(sgx * invstd);
        if (!dx)
            continue;
        /* dx = gamma*invstd/len * (len*g - sum(g) - xhat*sum(g*xhat)) */
        float k = gamma[c] * invstd / (float)len;
        float kl = k * (float)len, kmg = k * (float)sg, kmgx = k * (float)(sgx * invstd * invstd);
        if (ro && accumulate)
            for (size_t j = 0; j < len; j++)
                dx[j] += kl * (ro[j] > 0.0f ? g[j] : 0.0f) - kmg - (x[j] - mean) * kmgx;
        else if (ro)
            for (size_t j = 0; j < len; j++)
                dx[j] = kl * (ro[j] > 0.0f ? g[j] : 0.0f) - kmg - (x[j] - mean) * kmgx;
        else if (accumulate)
            for (size_t j = 0; j < len; j++)
                dx[j] += kl * g[j] - kmg - (x[j] - mean) * kmgx;
        else
            for (size_t j = 0; j < len; j++)
                dx[j] = kl * g[j] - kmg - (x[j] - mean) * kmgx;
    }
}

/* Per (image, block): s[0..B) and s[B..2B) = sums of (x - x0) and
 * (x - x0)^2 over the block's HW pixels, each lane (channel) in pixel
 * order. */
/* Pixel i of one (image, block) into the running sums a, q of (x - x0)
 * and (x - x0)^2. */
BLK_INLINE void bn_blk_sums_px(const float *restrict x, size_t i, const vd *z, vd *a, vd *q, const size_t B)
{
    for (size_t g = 0; g < B / DL; g++) {
        vd d = to_d(ldf(x + i * B + g * DL)) - z[g];
        a[g] += d;
        q[g] += d * d;
    }
}

/* The blocked batch norm's sums keep BN_U running sums per lane, pixel i
 * in sum i % BN_U (the tail past the last whole BN_U in sum 0), added in a
 * fixed order at the end: a single chain of dependent adds waited on the
 * add's latency (the two sums passes took 14% of a 2-thread ResNet-20
 * step on AVX2). */
enum { BN_U = 4 };

BLK_INLINE void bn_blk_fold(vd (*a)[BLK_D], double *restrict s, const size_t B)
{
    for (size_t g = 0; g < B / DL; g++)
        a[0][g] = (a[0][g] + a[1][g]) + (a[2][g] + a[3][g]);
    memcpy(s, a[0], B * sizeof(double));
}

BLK_INLINE void bn_blk_sums(const float *restrict x, size_t HW, const double *restrict x0, double *restrict s,
                            const size_t B)
{
    vd a[BN_U][BLK_D] = {{{0}}}, q[BN_U][BLK_D] = {{{0}}}, z[BLK_D];
    memcpy(z, x0, B * sizeof(double));
    size_t i = 0;
    for (; i + BN_U <= HW; i += BN_U)
        for (size_t u = 0; u < BN_U; u++)
            bn_blk_sums_px(x, i + u, z, a[u], q[u], B);
    for (; i < HW; i++)
        bn_blk_sums_px(x, i, z, a[0], q[0], B);
    bn_blk_fold(a, s, B);
    bn_blk_fold(q, s + B, B);
}

/* y = relu?(x * scale + shift) over one (image, block), per lane. */
BLK_INLINE void bn_blk_apply_relu(const float *restrict x, float *restrict y, size_t HW,
                                  const float *restrict scale, const float *restrict shift, const bool relu,
                                  const size_t B)
{
    for (size_t i = 0; i < HW; i++)
        for (size_t l = 0; l < B; l++) {
            float v = x[i * B + l] * scale[l] + shift[l];
            y[i * B + l] = relu ? (v > 0.0f ? v : 0.0f) : v;
        }
}

BLK_INLINE void bn_blk_apply(const float *restrict x, float *restrict y, size_t HW, const float *restrict scale,
                             const float *restrict shift, bool relu, const size_t B)
{
    if (relu)
        bn_blk_apply_relu(x, y, HW, scale, shift, true, B);
    else
        bn_blk_apply_relu(x, y, HW, scale, shift, false, B);
}

/* work (T x 2B doubles, T = N*C/B) summed over the images in order:
 * out[c] and out[C + c] for channel c = cb*B + l. */
static void bn_blk_reduce(const double *work, size_t C, size_t N, double *out, size_t B)
{
    size_t CB = C / B;
    for (size_t c = 0; c < 2 * C; c++)
        out[c] = 0;
    for (size_t n = 0; n < N; n++)
        for (size_t cb = 0; cb < CB; cb++) {
            const double *w = work + (n * CB + cb) * 2 * B;
            for (size_t l = 0; l < B; l++) {
                out[cb * B + l] += w[l];
                out[C + cb * B + l] += w[B + l];
            }
        }
}

void herd__batchnorm_forward_train_blk(const float *in, const float *gamma, const float *beta,
                                       float *out, float *save_mean, float *save_invstd,
                                       float *run_mean, float *run_var, size_t C, size_t N,
                                       size_t HW, float eps, float momentum, bool relu,
                                       double *work, size_t B)
{
    size_t CB = C / B, T = blk_tasks(C, N, B), len = N * HW;
    bool par = T > 1 && C * len >= HERD__PAR_GRAIN;
    /* shifted by each channel's first value (image 0, pixel 0), as the CNHW
     * kernel, so the variance does not cancel when |mean| >> std */
    double *x0 = work + 2 * T * B, *tot = x0 + C;
    for (size_t c = 0; c < C; c++)
        x0[c] = len ? (double)in[(c / B) * HW * B + c % B] : 0.0;
#pragma omp parallel for if (par) schedule(static)
    for (size_t t = 0; t < T; t++)
        BLK_WIDTH(B, bn_blk_sums, in + t * HW * B, HW, x0 + (t % CB) * B, work + t * 2 * B);
    bn_blk_reduce(work, C, N, tot, B);
    float *scale = (float *)(tot + 2 * C), *shift = scale + C;
    for (size_t c = 0; c < C; c++) {
        double s1 = tot[c], s2 = tot[C + c];
        double dm = len ? s1 / (double)len : 0.0, mean = x0[c] + dm;
        double sq = s2 - s1 * dm;
        if (sq < 0)
            sq = 0;
        double var = len ? sq / (double)len : 0.0;
        float invstd = (float)(1.0 / sqrt(var + eps));
        scale[c] = gamma[c] * invstd, shift[c] = beta[c] - (float)mean * scale[c];
        save_mean[c] = (float)mean;
        save_invstd[c] = invstd;
        double unbiased = len > 1 ? sq / (double)(len - 1) : var;
        run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * (float)mean;
        run_var[c] = (1.0f - momentum) * run_var[c] + momentum * (float)unbiased;
    }
#pragma omp parallel for if (par) schedule(static)
    for (size_t t = 0; t < T; t++) {
        size_t c0 = (t % CB) * B;
        BLK_WIDTH(B, bn_blk_apply, in + t * HW * B, out + t * HW * B, HW, scale + c0, shift + c0, relu);
    }
}

void herd__batchnorm_forward_eval_blk(const float *in, const float *gamma, const float *beta,
                                      float *out, const float *run_mean, const float *run_var,
                                      size_t C, size_t N, size_t HW, float eps, bool relu,
                                      float *work, size_t B)
{
    size_t CB = C / B, T = blk_tasks(C, N, B);
    float *scale = work, *shift = work + C;
    for (size_t c = 0; c < C; c++) {
        scale[c] = gamma[c] / sqrtf(run_var[c] + eps);
        shift[c] = beta[c] - run_mean[c] * scale[c];
    }
#pragma omp parallel for if (T > 1 && C * N * HW >= HERD__PAR_GRAIN) schedule(static)
    for (size_t t = 0; t < T; t++) {
        size_t c0 = (t % CB) * B;
        BLK_WIDTH(B, bn_blk_apply, in + t * HW * B, out + t * HW * B, HW, scale + c0, shift + c0, relu);
    }
}

/* Per (image, block): sums of g and g * (x - mean), g masked by the fused
 * ReLU's output ro when there is one (a select per lane). */
/* Pixel i into the running sums a of g and b of g * (x - mean), g masked
 * by ro when masked. */
BLK_INLINE void bn_blk_dsums_px(const float *restrict x, const float *restrict g, const float *restrict ro,
                                size_t i, const float *restrict mean, vd *a, vd *b, const bool masked,
                                const size_t B)
{
    for (size_t k = 0; k < B / DL; k++) {
        size_t j = i * B + k * DL;
        vdf gg = ldf(g + j);
        if (masked)
            gg = (vdf)((vdi)gg & (ldf(ro + j) > (vdf){0}));
        a[k] += to_d(gg);
        b[k] += to_d(gg) * to_d(ldf(x + j) - ldf(mean + k * DL));
    }
}

BLK_INLINE void bn_blk_dsums_mask(const float *restrict x, const float *restrict g, const float *restrict ro,
                                  size_t HW, const float *restrict mean, double *restrict s, const bool masked,
                                  const size_t B)
{
    vd a[BN_U][BLK_D] = {{{0}}}, b[BN_U][BLK_D] = {{{0}}};
    size_t i = 0;
    for (; i + BN_U <= HW; i += BN_U)
        for (size_t u = 0; u < BN_U; u++)
            bn_blk_dsums_px(x, g, ro, i + u, mean, a[u], b[u], masked, B);
    for (; i < HW; i++)
        bn_blk_dsums_px(x, g, ro, i, mean, a[0], b[0], masked, B);
    bn_blk_fold(a, s, B);
    bn_blk_fold(b, s + B, B);
}

BLK_INLINE void bn_blk_dsums(const float *restrict x, const float *restrict g, const float *restrict ro,
                             size_t HW, const float *restrict mean, double *restrict s, const size_t B)
{
    if (ro)
        bn_blk_dsums_mask(x, g, ro, HW, mean, s, true, B);
    else
        bn_blk_dsums_mask(x, g, ro, HW, mean, s, false, B);
}

/* dx (+)= kl * g(masked) - a - (x - mu) * b over one (image, block). */
BLK_INLINE void bn_blk_dx_mode(const float *restrict x, const float *restrict g, const float *restrict ro,
                               float *restrict dx, size_t HW, const float *restrict kl, const float *restrict a,
                               const float *restrict b, const float *restrict mu, const bool masked,
                               const bool accumulate, const size_t B)
{
    for (size_t i = 0; i < HW; i++)
        for (size_t l = 0; l < B; l++) {
            size_t j = i * B + l;
            float gg = g[j];
            if (masked)
                gg = ro[j] > 0.0f ? gg : 0.0f;
            float v = kl[l] * gg - a[l] - (x[j] - mu[l]) * b[l];
            dx[j] = accumulate ? dx[j] + v : v;
        }
}

BLK_INLINE void bn_blk_dx(const float *restrict x, const float *restrict g, const float *restrict ro,
                          float *restrict dx, size_t HW, const float *restrict kl, const float *restrict a,
                          const float *restrict b, const float *restrict mu, bool accumulate, const size_t B)
{
    if (ro && accumulate)
        bn_blk_dx_mode(x, g, ro, dx, HW, kl, a, b, mu, true, true, B);
    else if (ro)
        bn_blk_dx_mode(x, g, ro, dx, HW, kl, a, b, mu, true, false, B);
    else if (accumulate)
        bn_blk_dx_mode(x, g, ro, dx, HW, kl, a, b, mu, false, true, B);
    else
        bn_blk_dx_mode(x, g, ro, dx, HW, kl, a, b, mu, false, false, B);
}

void herd__batchnorm_backward_blk(const float *in, const float *gamma, const float *dout,
                                  const float *relu_out, const float *save_mean,
                                  const float *save_invstd, float *din, float *dgamma,
                                  float *dbeta, size_t C, size_t N, size_t HW, bool accumulate,
                                  double *work, size_t B)
{
    size_t CB = C / B, T = blk_tasks(C, N, B), len = N * HW;
    bool par = T > 1 && C * len >= HERD__PAR_GRAIN;
    double *tot = work + 2 * T * B + C;
#pragma omp parallel for if (par) schedule(static)
    for (size_t t = 0; t < T; t++)
        BLK_WIDTH(B, bn_blk_dsums, in + t * HW * B, dout + t * HW * B, relu_out ? relu_out + t * HW * B : NULL,
                  HW, save_mean + (t % CB) * B, work + t * 2 * B);
    bn_blk_reduce(work, C, N, tot, B);
    float *k = (float *)(tot + 2 * C), *kmg = k + C, *kmgx = k + 2 * C;
    for (size_t c = 0; c < C; c++) {
        double sg = tot[c], sgx = tot[C + c];
        float invstd = save_invstd[c];
        dbeta[c] = (float)sg;
        dgamma[c] = (float)(sgx * invstd);
        /* dx = gamma*invstd/len * (len*g - sum(g) - xhat*sum(g*xhat)) */
        float kc = gamma[c] * invstd / (float)len;
        k[c] = kc * (float)len, kmg[c] = kc * (float)sg, kmgx[c] = kc * (float)(sgx * invstd * invstd);
    }
    if (din) {
#pragma omp parallel for if (par) schedule(static)
        for (size_t t = 0; t < T; t++) {
            size_t c0 = (t % CB) * B, o = t * HW * B;
            BLK_WIDTH(B, bn_blk_dx, in + o, dout + o, relu_out ? relu_out + o : NULL, din + o, HW, k + c0,
                      kmg + c0, kmgx + c0, save_mean + c0, accumulate);
        }
    }
}
