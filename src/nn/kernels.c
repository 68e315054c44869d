/* The fast float kernels. The only file that includes oneDNN and OpenMP. */
#include "nn/kernels.h"

#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "herd/herd_nn.h"
#include "herd/herd_status.h"

void herd__sgemm(char ta, char tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                 size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    if (M == 0 || N == 0)
        return;
    dnnl_status_t s = dnnl_sgemm(ta, tb, (dnnl_dim_t)M, (dnnl_dim_t)N, (dnnl_dim_t)K, alpha, A,
                                 (dnnl_dim_t)lda, B, (dnnl_dim_t)ldb, beta, C, (dnnl_dim_t)ldc);
    HERD_ASSERT(s == dnnl_success);
}

void herd_nn_set_threads(int nthreads) { omp_set_num_threads(nthreads > 0 ? nthreads : 1); }

void herd_nn_sgemm(size_t M, size_t N, size_t K, const float *A, const float *B, float *C)
{
    herd__sgemm('N', 'N', M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
}

/* For a kernel row i (or column j), the output positions y whose input row
 * y*stride + i - pad lies inside [0, H): y in [lo, hi). */
static void valid_range(size_t i, size_t stride, size_t pad, size_t H, size_t Ho, size_t *lo,
                        size_t *hi)
{
    /* y*stride + i >= pad  and  y*stride + i < H + pad */
    size_t l = i >= pad ? 0 : (pad - i + stride - 1) / stride;
    size_t h = H + pad > i ? (H + pad - i + stride - 1) / stride : 0;
    if (h > Ho)
        h = Ho;
    if (l > h)
        l = h;
    *lo = l;
    *hi = h;
}

/* Row copies and adds of n floats. The common row lengths of the models get
 * their own constant-length loops, which the compiler turns into a few
 * vector moves instead of a generic loop with a remainder. */
#define HERD__ROW_CASES(X) X(7) X(8) X(10) X(12) X(14) X(16) X(24) X(28) X(32)

static inline void copy_row(float *restrict d, const float *restrict s, size_t n)
{
    switch (n) {
#define HERD__COPY_CASE(k)              \
    case k:                             \
        for (size_t x = 0; x < k; x++)  \
            d[x] = s[x];                \
        return;
        HERD__ROW_CASES(HERD__COPY_CASE)
#undef HERD__COPY_CASE
    default:
        for (size_t x = 0; x < n; x++)
            d[x] = s[x];
    }
}

static inline void add_row(float *restrict d, const float *restrict s, size_t n)
{
    switch (n) {
#define HERD__ADD_CASE(k)               \
    case k:                             \
        for (size_t x = 0; x < k; x++)  \
            d[x] += s[x];               \
        return;
        HERD__ROW_CASES(HERD__ADD_CASE)
#undef HERD__ADD_CASE
    default:
        for (size_t x = 0; x < n; x++)
            d[x] += s[x];
    }
}

void herd__im2col(const float *in, size_t C, size_t N, size_t H, size_t W, size_t R,
                  size_t stride, size_t pad, float *col)
{
    herd__im2col_chunk(in, C, N, 0, N, H, W, R, stride, pad, col);
}

void herd__im2col_chunk(const float *in, size_t C, size_t N, size_t n0, size_t nb, size_t H,
                        size_t W, size_t R, size_t stride, size_t pad, float *col)
{
    size_t Ho = (H + 2 * pad - R) / stride + 1, Wo = (W + 2 * pad - R) / stride + 1;
    size_t plane_o = Ho * Wo;
    for (size_t c = 0; c < C; c++)
        for (size_t i = 0; i < R; i++)
            for (size_t j = 0; j < R; j++) {
                float *row = col + ((c * R + i) * R + j) * nb * plane_o;
                size_t ylo, yhi, xlo, xhi;
                valid_range(i, stride, pad, H, Ho, &ylo, &yhi);
                valid_range(j, stride, pad, W, Wo, &xlo, &xhi);
                for (size_t n = 0; n < nb; n++) {
                    const float *img = in + (c * N + n0 + n) * H * W;
                    float *dst = row + n * plane_o;
                    memset(dst, 0, ylo * Wo * sizeof(float));
                    for (size_t y = ylo; y < yhi; y++) {
                        const float *src = img + (y * stride + i - pad) * W;
                        float *d = dst + y * Wo;
                        for (size_t x = 0; x < xlo; x++)
                            d[x] = 0.0f;
                        if (stride == 1) {
                            copy_row(d + xlo, src + (xlo + j - pad), xhi - xlo);
                        } else {
                            for (size_t x = xlo; x < xhi; x++)
                                d[x] = src[x * stride + j - pad];
                        }
                        for (size_t x = xhi; x < Wo; x++)
                            d[x] = 0.0f;
                    }
                    memset(dst + yhi * Wo, 0, (Ho - yhi) * Wo * sizeof(float));
                }
            }
}

void herd__col2im_add(const float *col, size_t C, size_t N, size_t H, size_t W, size_t R,
                      size_t stride, size_t pad, float *din)
{
    herd__col2im_add_chunk(col, C, N, 0, N, H, W, R, stride, pad, din);
}

void herd__col2im_add_chunk(const float *col, size_t C, size_t N, size_t n0, size_t nb, size_t H,
                            size_t W, size_t R, size_t stride, size_t pad, float *din)
{
    size_t Ho = (H + 2 * pad - R) / stride + 1, Wo = (W + 2 * pad - R) / stride + 1;
    size_t plane_o = Ho * Wo;
    for (size_t c = 0; c < C; c++)
        for (size_t i = 0; i < R; i++)
            for (size_t j = 0; j < R; j++) {
                const float *row = col + ((c * R + i) * R + j) * nb * plane_o;
                size_t ylo, yhi, xlo, xhi;
                valid_range(i, stride, pad, H, Ho, &ylo, &yhi);
                valid_range(j, stride, pad, W, Wo, &xlo, &xhi);
                for (size_t n = 0; n < nb; n++) {
                    float *img = din + (c * N + n0 + n) * H * W;
                    const float *srcp = row + n * plane_o;
                    for (size_t y = ylo; y < yhi; y++) {
                        float *d = img + (y * stride + i - pad) * W;
                        const float *s = srcp + y * Wo;
                        if (stride == 1) {
                            add_row(d + (xlo + j - pad), s + xlo, xhi - xlo);
                        } else {
                            for (size_t x = xlo; x < xhi; x++)
                                d[x * stride + j - pad] += s[x];
                        }
                    }
                }
            }
}

void herd__maxpool_forward(const float *in, float *out, uint32_t *idx, size_t nplanes, size_t H,
                           size_t W, size_t k, size_t s)
{
    size_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
    if (k == 2 && s == 2) {
        for (size_t p = 0; p < nplanes; p++) {
            const float *img = in + p * H * W;
            float *o = out + p * Ho * Wo;
            uint32_t *ix = idx + p * Ho * Wo;
            for (size_t y = 0; y < Ho; y++) {
                const float *r0 = img + 2 * y * W, *r1 = r0 + W;
                for (size_t x = 0; x < Wo; x++) {
                    /* same tie order as the general loop: first maximum wins */
                    uint32_t at = (uint32_t)(2 * y * W + 2 * x);
                    float m = r0[2 * x];
                    if (r0[2 * x + 1] > m)
                        m = r0[2 * x + 1], at = (uint32_t)(2 * y * W + 2 * x + 1);
                    if (r1[2 * x] > m)
                        m = r1[2 * x], at = (uint32_t)((2 * y + 1) * W + 2 * x);
                    if (r1[2 * x + 1] > m)
                        m = r1[2 * x + 1], at = (uint32_t)((2 * y + 1) * W + 2 * x + 1);
                    o[y * Wo + x] = m;
                    ix[y * Wo + x] = at;
                }
            }
        }
        return;
    }
    for (size_t p = 0; p < nplanes; p++) {
        const float *img = in + p * H * W;
        float *o = out + p * Ho * Wo;
        uint32_t *ix = idx + p * Ho * Wo;
        for (size_t y = 0; y < Ho; y++)
            for (size_t x = 0; x < Wo; x++) {
                size_t best = y * s * W + x * s;
                float m = img[best];
                for (size_t i = 0; i < k; i++)
                    for (size_t j = 0; j < k; j++) {
                        size_t at = (y * s + i) * W + x * s + j;
                        if (img[at] > m) {
                            m = img[at];
                            best = at;
                        }
                    }
                o[y * Wo + x] = m;
                ix[y * Wo + x] = (uint32_t)best;
            }
    }
}

void herd__maxpool_backward(const float *dout, const uint32_t *idx, float *din, size_t nplanes,
                            size_t H, size_t W, size_t k, size_t s, bool accumulate)
{
    size_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
    if (!accumulate)
        memset(din, 0, nplanes * H * W * sizeof(float));
    for (size_t p = 0; p < nplanes; p++) {
        float *d = din + p * H * W;
        const float *g = dout + p * Ho * Wo;
        const uint32_t *ix = idx + p * Ho * Wo;
        for (size_t o = 0; o < Ho * Wo; o++)
            d[ix[o]] += g[o];
    }
}

void herd__batchnorm_forward_train(const float *in, const float *gamma, const float *beta,
                                   float *out, float *save_mean, float *save_invstd,
                                   float *run_mean, float *run_var, size_t C, size_t len,
                                   float eps, float momentum)
{
    for (size_t c = 0; c < C; c++) {
        const float *x = in + c * len;
        float *y = out + c * len;
        double sum = 0, sq = 0;
        for (size_t i = 0; i < len; i++)
            sum += x[i];
        double mean = sum / (double)len;
        for (size_t i = 0; i < len; i++) {
            double d = x[i] - mean;
            sq += d * d;
        }
        double var = sq / (double)len;
        float invstd = (float)(1.0 / sqrt(var + eps));
        float scale = gamma[c] * invstd, shift = beta[c] - (float)mean * scale;
        for (size_t i = 0; i < len; i++)
            y[i] = x[i] * scale + shift;
        save_mean[c] = (float)mean;
        save_invstd[c] = invstd;
        double unbiased = len > 1 ? sq / (double)(len - 1) : var;
        run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * (float)mean;
        run_var[c] = (1.0f - momentum) * run_var[c] + momentum * (float)unbiased;
    }
}

void herd__batchnorm_forward_eval(const float *in, const float *gamma, const float *beta,
                                  float *out, const float *run_mean, const float *run_var,
                                  size_t C, size_t len, float eps)
{
    for (size_t c = 0; c < C; c++) {
        float scale = gamma[c] / sqrtf(run_var[c] + eps), shift = beta[c] - run_mean[c] * scale;
        const float *x = in + c * len;
        float *y = out + c * len;
        for (size_t i = 0; i < len; i++)
            y[i] = x[i] * scale + shift;
    }
}

void herd__batchnorm_backward(const float *in, const float *gamma, const float *dout,
                              const float *save_mean, const float *save_invstd, float *din,
                              float *dgamma, float *dbeta, size_t C, size_t len, bool accumulate)
{
    for (size_t c = 0; c < C; c++) {
        const float *x = in + c * len, *g = dout + c * len;
        float *dx = din ? din + c * len : NULL;
        float mean = save_mean[c], invstd = save_invstd[c];
        double sg = 0, sgx = 0;
        for (size_t i = 0; i < len; i++) {
            sg += g[i];
            sgx += g[i] * (x[i] - mean);
        }
        dbeta[c] = (float)sg;
        dgamma[c] = (float)(sgx * invstd);
        if (!dx)
            continue;
        /* dx = gamma*invstd/len * (len*g - sum(g) - xhat*sum(g*xhat)) */
        float k = gamma[c] * invstd / (float)len;
        float mg = (float)sg, mgx = (float)(sgx * invstd * invstd);
        for (size_t i = 0; i < len; i++) {
            float v = k * ((float)len * g[i] - mg - (x[i] - mean) * mgx);
            dx[i] = accumulate ? dx[i] + v : v;
        }
    }
}

float herd__softmax_xent(const float *logits, const int32_t *labels, float *dlogits, size_t N,
                         size_t K, size_t *ncorrect)
{
    double total = 0;
    size_t hits = 0;
    for (size_t n = 0; n < N; n++) {
        const float *z = logits + n * K;
        size_t arg = 0;
        for (size_t k = 1; k < K; k++)
            if (z[k] > z[arg])
                arg = k;
        hits += arg == (size_t)labels[n];
        float m = z[arg];
        double sum = 0;
        for (size_t k = 0; k < K; k++)
            sum += exp((double)(z[k] - m));
        double lse = log(sum) + m;
        total += lse - z[labels[n]];
        if (dlogits) {
            float *d = dlogits + n * K;
            float inv = 1.0f / (float)N;
            for (size_t k = 0; k < K; k++)
                d[k] = (float)exp((double)z[k] - lse) * inv;
            d[labels[n]] -= inv;
        }
    }
    if (ncorrect)
        *ncorrect = hits;
    return (float)(total / (double)N);
}

void herd__cnhw_to_nchw(const float *in, float *out, size_t C, size_t N, size_t HW)
{
    for (size_t c = 0; c < C; c++)
        for (size_t n = 0; n < N; n++)
            memcpy(out + (n * C + c) * HW, in + (c * N + n) * HW, HW * sizeof(float));
}

void herd__nchw_to_cnhw(const float *in, float *out, size_t C, size_t N, size_t HW, bool accumulate)
{
    for (size_t c = 0; c < C; c++)
        for (size_t n = 0; n < N; n++) {
            const float *s = in + (n * C + c) * HW;
            float *d = out + (c * N + n) * HW;
            if (accumulate)
                for (size_t i = 0; i < HW; i++)
                    d[i] += s[i];
            else
                memcpy(d, s, HW * sizeof(float));
        }
}
