/* The fast float kernels. The only file that includes oneDNN and OpenMP. */
#include "nn/kernels.h"

#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "herd/herd_nn.h"
#include "herd/herd_status.h"

/* One product on this thread alone: oneDNN sizes its own split by
 * omp_get_max_threads() (and runs serially inside an active team). */
static void sgemm_one(char ta, char tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                      size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    dnnl_status_t s = dnnl_sgemm(ta, tb, (dnnl_dim_t)M, (dnnl_dim_t)N, (dnnl_dim_t)K, alpha, A,
                                 (dnnl_dim_t)lda, B, (dnnl_dim_t)ldb, beta, C, (dnnl_dim_t)ldc);
    HERD_ASSERT(s == dnnl_success);
}

/* The split of a product between threads: panels of the output's longer
 * side, one per thread (fewer where a panel would do under
 * GEMM_PANEL_FLOPS or have under GEMM_MIN_SIDE rows or columns), each one
 * single-threaded oneDNN sgemm over the whole of K. oneDNN's own split
 * divides K at some shapes (mlp's at 2 threads; linear's too with AVX2),
 * so the model's sums, and its bits, changed with --threads; a
 * single-threaded sgemm sums an output over K the same way whatever the
 * rows and columns around it (test threads_model_bits holds linear and mlp
 * to the same bits at 1 and 2 threads). One thread makes one call: split
 * there, a dW product (K = batch) ran 2.5x slower, each panel packing the
 * shared operand again. */
enum { GEMM_MIN_SIDE = 64, GEMM_ALIGN = 16 };
#define GEMM_PANEL_FLOPS 4.0e6

static size_t gemm_panels(size_t M, size_t N, size_t K, size_t threads)
{
    size_t side = M > N ? M : N;
    double flops = 2.0 * (double)M * (double)N * (double)K;
    size_t p = HERD__PAR_GRAIN < SIZE_MAX ? threads : 1; /* serial under TSan (core/par.h) */
    while (p > 1 && (flops / (double)p < GEMM_PANEL_FLOPS || side / p < GEMM_MIN_SIDE))
        p--;
    return p;
}

void herd__sgemm(char ta, char tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                 size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    if (M == 0 || N == 0)
        return;
    int saved = omp_get_max_threads(), nt = omp_in_parallel() ? 1 : saved;
    size_t P = gemm_panels(M, N, K, (size_t)nt);
    bool rows = M > N;
    size_t side = rows ? M : N, step = (side / P + GEMM_ALIGN - 1) / GEMM_ALIGN * GEMM_ALIGN;
    omp_set_num_threads(1); /* each panel on its thread alone */
#pragma omp parallel for if (P > 1) num_threads((int)P) schedule(static)
    for (size_t p = 0; p < P; p++) {
        size_t lo = p * step, hi = lo + step < side ? lo + step : side;
        if (lo >= hi)
            continue;
        if (rows) /* rows [lo, hi) of op(A) and of C */
            sgemm_one(ta, tb, hi - lo, N, K, alpha, ta == 'N' ? A + lo * lda : A + lo, lda, B, ldb, beta,
                      C + lo * ldc, ldc);
        else /* columns [lo, hi) of op(B) and of C */
            sgemm_one(ta, tb, M, hi - lo, K, alpha, A, lda, tb == 'N' ? B + lo : B + lo * ldb, ldb, beta,
                      C + lo, ldc);
    }
    omp_set_num_threads(saved);
}

void herd_nn_set_threads(int nthreads) { omp_set_num_threads(nthreads > 0 ? nthreads : 1); }

int herd_nn_threads(void) { return omp_get_max_threads(); }

/* libgomp reads its wait policy once, when it loads (before main), so the
 * only way to change it for this process is to become a new one: exec the
 * same binary with the same arguments, the variable now set. The variable
 * is the guard: the new image finds it set and goes on. readlink, not
 * execv("/proc/self/exe"): under valgrind the link names the program, the
 * exe the tool. The figures (bench/README.md, bench/threads): 1000 spins
 * bridge most gaps between one parallel region and the next on an idle
 * machine and stop spinning long before a busy neighbour's time slice
 * (libgomp's 300000 made 2 threads 3-12x slower than one there); 10000
 * bridge more of them (ResNet-20, 2 threads: 1.93x one thread against
 * 1.49x at 1000, idle) but cost more beside a busy process (0.60x against
 * 0.86x). So the machine as herd starts decides: 10000 where nothing else
 * runs. A neighbour that starts later meets the long spin; a shared
 * machine's runs want --adapt-threads. */
const char *herd_nn_spincount_for(const char *const *lines, size_t nlines)
{
    for (size_t i = 0; i < nlines; i++) {
        unsigned running = 0, total = 0;
        if (lines[i] && sscanf(lines[i], "%*f %*f %*f %u/%u", &running, &total) == 2 && running == 1)
            return HERD_NN_SPINCOUNT_IDLE;
    }
    return HERD_NN_SPINCOUNT;
}

/* Reads /proc/loadavg a few times, 2 ms apart: a task that runs all the
 * time shows in every read, one that woke for a moment in few. */
static const char *spincount_here(void)
{
    enum { READS = 5, LINE = 128 };
    char buf[READS][LINE];
    const char *lines[READS];
    for (int i = 0; i < READS; i++) {
        lines[i] = NULL;
        FILE *f = fopen("/proc/loadavg", "r");
        if (f && fgets(buf[i], LINE, f))
            lines[i] = buf[i];
        if (f)
            fclose(f);
        if (i + 1 < READS)
            nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
    }
    return herd_nn_spincount_for(lines, READS);
}

void herd_nn_wait_policy(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
        return;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || (size_t)n >= sizeof self - 1)
        return;
    self[n] = '\0';
    if (setenv("GOMP_SPINCOUNT", spincount_here(), 1) != 0)
        return;
    execv(self, argv);
    unsetenv("GOMP_SPINCOUNT"); /* no exec (a binary deleted since it started): as before */
}

/* The peak that herd bench gemm measures: oneDNN's own sgemm, its own split. */
void herd_nn_sgemm(size_t M, size_t N, size_t K, const float *A, const float *B, float *C)
{
    sgemm_one('N', 'N', M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
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
    /* a channel's rows of col are its own */
#pragma omp parallel for if (C > 1 && C * R * R * nb * plane_o >= HERD__PAR_GRAIN) schedule(static)
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
    /* channel c adds only into din's channel c, in the same order at any
     * number of threads */
#pragma omp parallel for if (C > 1 && C * R * R * nb * plane_o >= HERD__PAR_GRAIN) schedule(static)
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
    bool par = nplanes > 1 && nplanes * H * W >= HERD__PAR_GRAIN;
    if (k == 2 && s == 2) {
#pragma omp parallel for if (par) schedule(static)
        for (size_t p = 0; p < nplanes; p++) {
            const float *img = in + p * H * W;
            float *restrict o = out + p * Ho * Wo;
            uint32_t *restrict ix = idx + p * Ho * Wo;
            for (size_t y = 0; y < Ho; y++) {
                const float *restrict r0 = img + 2 * y * W, *restrict r1 = r0 + W;
                uint32_t row = (uint32_t)(2 * y * W);
                /* branch-free selects, so the loop vectorizes; same tie
                 * order as the general loop: the first maximum wins */
                for (size_t x = 0; x < Wo; x++) {
                    uint32_t at = row + (uint32_t)(2 * x);
                    float m = r0[2 * x], b = r0[2 * x + 1], c = r1[2 * x], d = r1[2 * x + 1];
                    uint32_t ib = at + 1, ic = at + (uint32_t)W, id = at + (uint32_t)W + 1;
                    at = b > m ? ib : at;
                    m = b > m ? b : m;
                    at = c > m ? ic : at;
                    m = c > m ? c : m;
                    at = d > m ? id : at;
                    m = d > m ? d : m;
                    o[y * Wo + x] = m;
                    ix[y * Wo + x] = at;
                }
            }
        }
        return;
    }
#pragma omp parallel for if (par) schedule(static)
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

void herd__maxpool_backward(const float *dout, const uint32_t *idx, const float *relu_in,
                            float *din, size_t nplanes, size_t H, size_t W, size_t k, size_t s,
                            bool accumulate)
{
    size_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
    /* a plane scatters into its own plane of din */
#pragma omp parallel for if (nplanes > 1 && nplanes * H * W >= HERD__PAR_GRAIN) schedule(static)
    for (size_t p = 0; p < nplanes; p++) {
        float *d = din + p * H * W;
        const float *g = dout + p * Ho * Wo;
        const uint32_t *ix = idx + p * Ho * Wo;
        if (!accumulate)
            memset(d, 0, H * W * sizeof(float));
        if (relu_in) {
            const float *r = relu_in + p * H * W;
            for (size_t o = 0; o < Ho * Wo; o++)
                if (r[ix[o]] > 0.0f)
                    d[ix[o]] += g[o];
        } else {
            for (size_t o = 0; o < Ho * Wo; o++)
                d[ix[o]] += g[o];
        }
    }
}

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

/* ---- blocked activations -------------------------------------------------- */

size_t herd__blk_width(void)
{
    /* oneDNN's ISA values are nested bit sets */
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core)
        return 16;
    if ((isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2)
        return 8;
    return 0;
}

/* The blocked kernels' inner loops run over a block's B lanes (one pixel's
 * B channels). Each is written once, as an always-inlined body taking B,
 * and called through BLK_WIDTH with B a constant 8 or 16: the compiler
 * then turns the lane loops into vector code of that width, where a run-time
 * B would leave them scalar. */
enum { BLK_MAX = HERD__BLK_MAX, BLK_G = BLK_MAX / 8 }; /* a block's lanes, its 8-lane vectors at most */
#define BLK_INLINE static inline __attribute__((always_inline))
#define BLK_WIDTH(B, fn, ...)                        \
    do {                                             \
        HERD_ASSERT((B) == 8 || (B) == 16);          \
        if ((B) == 16)                               \
            fn(__VA_ARGS__, 16);                     \
        else                                         \
            fn(__VA_ARGS__, 8);                      \
    } while (0)

/* Eight lanes as one vector (GCC's vector extensions: a ymm register with
 * AVX2 or AVX-512), their doubles and their masks; a block is B/8 of them.
 * Used only inside this file, inlined, so GCC's note that a 64-byte
 * vector's ABI differs without AVX-512 concerns nothing. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

static inline v8f ld8(const float *p)
{
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void st8(void *p, v8f v) { memcpy(p, &v, sizeof v); }

/* Batch norm's double sums: DL lanes per vector, the widest the CPU adds
 * natively (GCC lowers a wider vector through the stack: 8 doubles on AVX2
 * made the sums passes 4x slower). Each lane's arithmetic is the same at
 * any DL, so the bits are too. */
#if defined(__AVX512F__)
enum { DL = 8 };
#else
enum { DL = 4 };
#endif
enum { BLK_D = HERD__BLK_MAX / DL }; /* a block's double vectors at most */
typedef double vd __attribute__((vector_size(DL * sizeof(double))));
typedef float vdf __attribute__((vector_size(DL * sizeof(float))));
typedef int32_t vdi __attribute__((vector_size(DL * sizeof(int32_t))));

static inline vdf ldf(const float *p)
{
    vdf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline vd to_d(vdf v) { return __builtin_convertvector(v, vd); }
/* a where m is set, else b */
static inline v8f sel8(v8i m, v8f a, v8f b) { return (v8f)(((v8i)a & m) | ((v8i)b & ~m)); }

/* One (image, block): HW pixels of B channels. */
static size_t blk_tasks(size_t C, size_t N, size_t B) { return N * (C / B); }

/* Between a blocked tensor and a plain one whose channel c of image n
 * starts at c * cs + n * ns (CNHW: cs = N*HW, ns = HW; NCHW rows: cs = HW,
 * ns = C*HW). */
static void blk_unpack(const float *in, float *out, size_t C, size_t N, size_t HW, size_t cs, size_t ns,
                       size_t B)
{
    size_t CB = C / B, T = blk_tasks(C, N, B);
#pragma omp parallel for if (T > 1 && C * N * HW >= HERD__PAR_GRAIN) schedule(static)
    for (size_t t = 0; t < T; t++) {
        size_t n = t / CB, cb = t % CB;
        const float *restrict src = in + t * HW * B;
        for (size_t l = 0; l < B; l++) {
            float *restrict p = out + (cb * B + l) * cs + n * ns;
            for (size_t i = 0; i < HW; i++)
                p[i] = src[i * B + l];
        }
    }
}

static void blk_pack(const float *in, float *out, size_t C, size_t N, size_t HW, size_t cs, size_t ns,
                     bool accumulate, size_t B)
{
    size_t CB = C / B, T = blk_tasks(C, N, B);
#pragma omp parallel for if (T > 1 && C * N * HW >= HERD__PAR_GRAIN) schedule(static)
    for (size_t t = 0; t < T; t++) {
        size_t n = t / CB, cb = t % CB;
        float *restrict dst = out + t * HW * B;
        for (size_t l = 0; l < B; l++) {
            const float *restrict p = in + (cb * B + l) * cs + n * ns;
            if (accumulate)
                for (size_t i = 0; i < HW; i++)
                    dst[i * B + l] += p[i];
            else
                for (size_t i = 0; i < HW; i++)
                    dst[i * B + l] = p[i];
        }
    }
}

void herd__cnhw_to_blk(const float *in, float *out, size_t C, size_t N, size_t HW, size_t B)
{
    blk_pack(in, out, C, N, HW, N * HW, HW, false, B);
}

void herd__blk_to_cnhw(const float *in, float *out, size_t C, size_t N, size_t HW, size_t B)
{
    blk_unpack(in, out, C, N, HW, N * HW, HW, B);
}

void herd__blk_to_nchw(const float *in, float *out, size_t C, size_t N, size_t HW, size_t B)
{
    blk_unpack(in, out, C, N, HW, HW, C * HW, B);
}

void herd__nchw_to_blk(const float *in, float *out, size_t C, size_t N, size_t HW, bool accumulate, size_t B)
{
    blk_pack(in, out, C, N, HW, HW, C * HW, accumulate, B);
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

/* Max pooling on blocked tensors: the CNHW kernels' windows, ties and
 * indices (a pixel's offset h*W + w in its plane), B channels at once. */
BLK_INLINE void maxpool_fwd_blk(const float *img, float *o, uint32_t *ix, size_t H, size_t W, size_t k,
                                size_t s, const size_t B)
{
    size_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
    for (size_t y = 0; y < Ho; y++)
        for (size_t x = 0; x < Wo; x++) {
            size_t first = y * s * W + x * s;
            v8f m[BLK_G];
            v8i at[BLK_G];
            for (size_t g = 0; g < B / 8; g++)
                m[g] = ld8(img + first * B + g * 8), at[g] = (v8i){0} + (int32_t)first;
            for (size_t i = 0; i < k; i++)
                for (size_t j = 0; j < k; j++) {
                    size_t p = (y * s + i) * W + x * s + j;
                    for (size_t g = 0; g < B / 8; g++) {
                        v8f v = ld8(img + p * B + g * 8);
                        v8i gt = v > m[g]; /* the first maximum wins, as in CNHW */
                        m[g] = sel8(gt, v, m[g]);
                        at[g] = (gt & ((v8i){0} + (int32_t)p)) | (at[g] & ~gt);
                    }
                }
            for (size_t g = 0; g < B / 8; g++) {
                st8(o + (y * Wo + x) * B + g * 8, m[g]);
                memcpy(ix + (y * Wo + x) * B + g * 8, &at[g], sizeof at[g]);
            }
        }
}

void herd__maxpool_forward_blk(const float *in, float *out, uint32_t *idx, size_t nblocks, size_t H, size_t W,
                               size_t k, size_t s, size_t B)
{
    size_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
#pragma omp parallel for if (nblocks > 1 && nblocks * H * W * B >= HERD__PAR_GRAIN) schedule(static)
    for (size_t b = 0; b < nblocks; b++)
        BLK_WIDTH(B, maxpool_fwd_blk, in + b * H * W * B, out + b * Ho * Wo * B, idx + b * Ho * Wo * B, H, W,
                  k, s);
}

void herd__maxpool_backward_blk(const float *dout, const uint32_t *idx, const float *relu_in, float *din,
                                size_t nblocks, size_t H, size_t W, size_t k, size_t s, bool accumulate, size_t B)
{
    size_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
#pragma omp parallel for if (nblocks > 1 && nblocks * H * W * B >= HERD__PAR_GRAIN) schedule(static)
    for (size_t b = 0; b < nblocks; b++) {
        float *d = din + b * H * W * B;
        const float *g = dout + b * Ho * Wo * B, *r = relu_in ? relu_in + b * H * W * B : NULL;
        const uint32_t *ix = idx + b * Ho * Wo * B;
        if (!accumulate)
            memset(d, 0, H * W * B * sizeof(float));
        for (size_t o = 0; o < Ho * Wo; o++)
            for (size_t l = 0; l < B; l++) {
                size_t at = (size_t)ix[o * B + l] * B + l;
                if (!r || r[at] > 0.0f)
                    d[at] += g[o * B + l];
            }
    }
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

/* One example's loss (log-sum-exp minus its label's logit), its argmax hit,
 * and (d non-NULL) its gradient scaled by inv. */
static double xent_one(const float *z, int32_t label, float *d, size_t K, float inv, unsigned char *hit)
{
    size_t arg = 0;
    for (size_t k = 1; k < K; k++)
        if (z[k] > z[arg])
            arg = k;
    *hit = arg == (size_t)label;
    float m = z[arg];
    double sum = 0;
    for (size_t k = 0; k < K; k++)
        sum += exp((double)(z[k] - m));
    double lse = log(sum) + m;
    if (d) {
        for (size_t k = 0; k < K; k++)
            d[k] = (float)exp((double)z[k] - lse) * inv;
        d[label] -= inv;
    }
    return lse - z[label];
}

/* Examples in blocks: the block's losses in parallel, summed in example
 * order after. A logit costs two exps, weighed as 8 floats of the grain. */
enum { XENT_BLOCK = 1024 };

float herd__softmax_xent(const float *logits, const int32_t *labels, float *dlogits, size_t N,
                         size_t K, size_t *ncorrect)
{
    double total = 0, loss[XENT_BLOCK];
    unsigned char hit[XENT_BLOCK];
    size_t hits = 0;
    float inv = 1.0f / (float)N;
    for (size_t n0 = 0; n0 < N; n0 += XENT_BLOCK) {
        size_t nb = N - n0 < XENT_BLOCK ? N - n0 : XENT_BLOCK;
#pragma omp parallel for if (8 * nb * K >= HERD__PAR_GRAIN) schedule(static)
        for (size_t i = 0; i < nb; i++) {
            size_t n = n0 + i;
            loss[i] = xent_one(logits + n * K, labels[n], dlogits ? dlogits + n * K : NULL, K, inv, &hit[i]);
        }
        for (size_t i = 0; i < nb; i++)
            total += loss[i], hits += hit[i];
    }
    if (ncorrect)
        *ncorrect = hits;
    return (float)(total / (double)N);
}

void herd__cnhw_to_nchw(const float *in, float *out, size_t C, size_t N, size_t HW)
{
#pragma omp parallel for if (C > 1 && C * N * HW >= HERD__PAR_GRAIN) schedule(static)
    for (size_t c = 0; c < C; c++)
        for (size_t n = 0; n < N; n++)
            memcpy(out + (n * C + c) * HW, in + (c * N + n) * HW, HW * sizeof(float));
}

void herd__nchw_to_cnhw(const float *in, float *out, size_t C, size_t N, size_t HW, bool accumulate)
{
#pragma omp parallel for if (C > 1 && C * N * HW >= HERD__PAR_GRAIN) schedule(static)
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

/* ---- oneDNN convolution primitives -------------------------------------- */

/* The scratch regions a herd__dnn shares among its layers. A region holds
 * one thing at a time: it is filled and consumed within one call. */
enum {
    DNN_WEI,    /* weights in the layout forward or backward-data wants */
    DNN_DST,    /* blocked dst, then blocked diff_dst */
    DNN_DDST2,  /* diff_dst for backward-weights when it wants another layout */
    DNN_DSRC,   /* blocked diff_src */
    DNN_DWEI,   /* blocked diff_weights */
    DNN_SRC2,   /* src for backward-weights when it wants another layout */
    DNN_SCRATCHPAD,
    DNN_NREGIONS
};

/* One cached bf16 matmul: its shape and the primitive with its memories
 * (handles bound per call). */
typedef struct dnn_matmul_key {
    char ta, tb;
    bool sum;
    size_t M, N, K, lda, ldb, ldc;
} dnn_matmul_key;

typedef struct dnn_matmul {
    dnn_matmul_key key;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, pad;
} dnn_matmul;

enum { DNN_MATMULS = 64 };

struct herd__dnn {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnn_matmul mm[DNN_MATMULS];
    size_t nmm, mm_next; /* filled slots; the one replaced next when full */
    size_t need[DNN_NREGIONS]; /* bytes, the most any primitive asked */
    size_t off[DNN_NREGIONS];
    char *arena;
    size_t arena_size;
};

/* One tensor as herd holds it (user) and as a primitive wants it (prim).
 * When the two layouts differ, or the output accumulates, a reorder moves
 * it between them; prim then lives in a region of the arena (or in its own
 * allocation when region is DNN_OWN). */
enum { DNN_OWN = -1, DNN_SAME = -2 };
typedef struct dnn_port {
    dnnl_memory_t user, prim;
    dnnl_primitive_t reorder;
    int region;
    size_t add_floats; /* an output that accumulates in its own layout: herd adds
                        * these floats itself (no reorder; oneDNN's reorder with a
                        * sum ran at a third of memory speed) */
} dnn_port;

struct herd__conv {
    herd__dnn *d;
    herd__conv_shape s;
    dnnl_primitive_t fwd, bwd_data, bwd_weights;
    dnn_port f_src, f_wei, f_dst;
    dnn_port d_ddst, d_wei, d_dsrc;
    dnn_port w_src, w_ddst, w_dwei;
    dnnl_memory_t bias, dbias;
    dnnl_memory_t pad_f, pad_d, pad_w; /* scratchpads */
    bool w_src_is_f_src, w_ddst_is_d_ddst;
    bool c1_weights; /* backward-weights by herd's own one-input-channel kernel (c1_bwd_weights) */
    char impl[64];
};

herd_status herd__dnn_create(herd__dnn **out)
{
    *out = NULL;
    herd__dnn *d = calloc(1, sizeof *d);
    if (!d)
        return HERD_ENOMEM;
    if (dnnl_engine_create(&d->engine, dnnl_cpu, 0) != dnnl_success) {
        free(d);
        return HERD_EUNSUPPORTED;
    }
    if (dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(d->engine);
        free(d);
        return HERD_EUNSUPPORTED;
    }
    *out = d;
    return HERD_OK;
}

void herd__dnn_free(herd__dnn *d)
{
    if (!d)
        return;
    herd__dnn_drop_matmuls(d);
    dnnl_stream_destroy(d->stream);
    dnnl_engine_destroy(d->engine);
    free(d->arena);
    free(d);
}

/* Grows the arena so that every region holds its largest request. Handles
 * are set from d->arena on every call, so moving it is safe between calls. */
static herd_status dnn_arena_fit(herd__dnn *d)
{
    size_t off[DNN_NREGIONS], total = 0;
    for (int r = 0; r < DNN_NREGIONS; r++) {
        off[r] = total;
        total += (d->need[r] + 63) & ~(size_t)63;
    }
    if (total > d->arena_size) {
        char *a = NULL;
        if (posix_memalign((void **)&a, 64, total))
            return HERD_ENOMEM;
        free(d->arena);
        d->arena = a, d->arena_size = total;
    }
    memcpy(d->off, off, sizeof off);
    return HERD_OK;
}

static void dnn_region_need(herd__dnn *d, int region, const dnnl_memory_desc_t *md)
{
    size_t n = dnnl_memory_desc_get_size(md);
    if (region >= 0 && n > d->need[region])
        d->need[region] = n;
}

static void *dnn_region(herd__dnn *d, int region) { return d->arena + d->off[region]; }

static void dnn_port_free(dnn_port *p)
{
    if (p->reorder)
        dnnl_primitive_destroy(p->reorder);
    if (p->prim && p->prim != p->user)
        dnnl_memory_destroy(p->prim);
    if (p->user)
        dnnl_memory_destroy(p->user);
    memset(p, 0, sizeof *p);
}

/* What creating a primitive leaves behind (any may be NULL). */
static void dnn_desc_free(dnnl_primitive_desc_t pd, dnnl_post_ops_t po, dnnl_primitive_attr_t attr)
{
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
}

/* A port between herd's layout `user_md` and the primitive's `prim_md`;
 * `in`: data flows user -> prim, else prim -> user (adding to user when
 * `accumulate`). */
static herd_status dnn_port_init(herd__dnn *d, dnn_port *p, const dnnl_memory_desc_t *user_md,
                                 const dnnl_memory_desc_t *prim_md, bool in, bool accumulate,
                                 int region)
{
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    herd_status st = HERD_EUNSUPPORTED;
    memset(p, 0, sizeof *p);
    if (dnnl_memory_create(&p->user, user_md, d->engine, DNNL_MEMORY_NONE) != dnnl_success)
        goto out;
    if (!accumulate && dnnl_memory_desc_equal(user_md, prim_md)) {
        p->prim = p->user;
        p->region = DNN_SAME;
        return HERD_OK;
    }
    p->region = region;
    if (dnnl_memory_create(&p->prim, prim_md, d->engine,
                           region == DNN_OWN ? DNNL_MEMORY_ALLOCATE : DNNL_MEMORY_NONE) != dnnl_success)
        goto out;
    dnn_region_need(d, region, prim_md);
    if (accumulate && !in && region != DNN_OWN && dnnl_memory_desc_equal(user_md, prim_md) &&
        prim_md->data_type == dnnl_f32) {
        p->add_floats = dnnl_memory_desc_get_size(prim_md) / sizeof(float);
        return HERD_OK;
    }
    if (accumulate) {
        if (dnnl_primitive_attr_create(&attr) != dnnl_success || dnnl_post_ops_create(&po) != dnnl_success ||
            dnnl_post_ops_append_sum(po, 1.0f) != dnnl_success ||
            dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success)
            goto out;
    }
    if (dnnl_reorder_primitive_desc_create(&rpd, in ? user_md : prim_md, d->engine,
                                           in ? prim_md : user_md, d->engine, attr) != dnnl_success ||
        dnnl_primitive_create(&p->reorder, rpd) != dnnl_success)
        goto out;
    st = HERD_OK;
out:
    dnn_desc_free(rpd, po, attr);
    if (st != HERD_OK)
        dnn_port_free(p);
    return st;
}

static void dnn_exec(herd__dnn *d, dnnl_primitive_t prim, int nargs, const dnnl_exec_arg_t *args)
{
    dnnl_status_t s = dnnl_primitive_execute(prim, d->stream, nargs, args);
    HERD_ASSERT(s == dnnl_success);
}

static void dnn_bind(herd__dnn *d, dnnl_memory_t mem, int region, const void *user)
{
    void *h = region == DNN_SAME ? (void *)user : dnn_region(d, region);
    dnnl_status_t s = dnnl_memory_set_data_handle(mem, h);
    HERD_ASSERT(s == dnnl_success);
}

/* An input: binds herd's buffer and, if the primitive wants another
 * layout, reorders into it. Returns the memory to hand the primitive. */
static dnnl_memory_t dnn_port_in(herd__dnn *d, dnn_port *p, const float *user)
{
    dnnl_status_t s = dnnl_memory_set_data_handle(p->user, (void *)user);
    HERD_ASSERT(s == dnnl_success);
    if (p->region == DNN_SAME)
        return p->user;
    if (p->region != DNN_OWN)
        dnn_bind(d, p->prim, p->region, NULL);
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, p->user}, {DNNL_ARG_TO, p->prim}};
    dnn_exec(d, p->reorder, 2, args);
    return p->prim;
}

/* An output, before the primitive runs: the memory it writes. */
static dnnl_memory_t dnn_port_out(herd__dnn *d, dnn_port *p, float *user)
{
    dnnl_status_t s = dnnl_memory_set_data_handle(p->user, user);
    HERD_ASSERT(s == dnnl_success);
    if (p->region != DNN_SAME && p->region != DNN_OWN)
        dnn_bind(d, p->prim, p->region, NULL);
    return p->prim;
}

/* An output, after the primitive ran: into herd's layout. */
static void dnn_port_done(herd__dnn *d, dnn_port *p)
{
    if (p->region == DNN_SAME)
        return;
    if (p->add_floats) {
        void *h = NULL;
        dnnl_status_t st = dnnl_memory_get_data_handle(p->user, &h);
        HERD_ASSERT(st == dnnl_success);
        float *restrict u = h;
        const float *restrict v = dnn_region(d, p->region);
        size_t n = p->add_floats;
#pragma omp parallel for if (n >= HERD__PAR_GRAIN) schedule(static)
        for (size_t i = 0; i < n; i++)
            u[i] += v[i];
        return;
    }
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, p->prim}, {DNNL_ARG_TO, p->user}};
    dnn_exec(d, p->reorder, 2, args);
}

/* A (C, N, H, W) activation as oneDNN's logical (N, C, H, W) with strides. */
static dnnl_status_t md_cnhw(dnnl_memory_desc_t *md, size_t N, size_t C, size_t H, size_t W)
{
    dnnl_dims_t dims = {(dnnl_dim_t)N, (dnnl_dim_t)C, (dnnl_dim_t)H, (dnnl_dim_t)W};
    dnnl_dims_t strides = {(dnnl_dim_t)(H * W), (dnnl_dim_t)(N * H * W), (dnnl_dim_t)W, 1};
    return dnnl_memory_desc_init_by_strides(md, 4, dims, dnnl_f32, strides);
}

static dnnl_status_t md_tag_dt(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *d4,
                               dnnl_data_type_t dt, dnnl_format_tag_t tag)
{
    dnnl_dims_t dims = {0};
    for (int i = 0; i < ndims; i++)
        dims[i] = d4[i];
    return dnnl_memory_desc_init_by_tag(md, ndims, dims, dt, tag);
}

static dnnl_status_t md_tag(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *d4,
                            dnnl_format_tag_t tag)
{
    return md_tag_dt(md, ndims, d4, dnnl_f32, tag);
}

static herd_status dnn_primitive(const dnnl_primitive_desc_t pd, dnnl_primitive_t *prim)
{
    return dnnl_primitive_create(prim, pd) == dnnl_success ? HERD_OK : HERD_EUNSUPPORTED;
}

/* The scratchpad the primitive asks for, in the shared region. */
static herd_status dnn_scratchpad(herd__dnn *d, const_dnnl_primitive_desc_t pd, dnnl_memory_t *mem)
{
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (!md)
        return HERD_EUNSUPPORTED;
    dnn_region_need(d, DNN_SCRATCHPAD, md);
    return dnnl_memory_create(mem, md, d->engine, DNNL_MEMORY_NONE) == dnnl_success ? HERD_OK
                                                                                     : HERD_EUNSUPPORTED;
}

#define DNN_TRY(call)                     \
    do {                                  \
        if ((call) != dnnl_success) {     \
            st = HERD_EUNSUPPORTED;       \
            goto out;                     \
        }                                 \
    } while (0)

herd_status herd__conv_create(herd__dnn *d, const herd__conv_shape *s, herd__conv **out)
{
    herd_status st = HERD_OK;
    dnnl_primitive_attr_t attr = NULL, attr_bwd = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t fpd = NULL, dpd = NULL, wpd = NULL;
    *out = NULL;
    herd__conv *c = calloc(1, sizeof *c);
    if (!c)
        return HERD_ENOMEM;
    c->d = d, c->s = *s;
    c->c1_weights = s->C == 1 && !s->din && !s->bf16 && !s->src_blk && (s->R == 3 || s->R == 5);
    size_t Ho = (s->H + 2 * s->pad - s->R) / s->stride + 1;
    size_t Wo = (s->W + 2 * s->pad - s->R) / s->stride + 1;
    dnnl_memory_desc_t src_u, dst_u, wei_u, bias_u, any_src, any_dst, any_wei;
    dnnl_dim_t wdims[4] = {(dnnl_dim_t)s->K, (dnnl_dim_t)s->C, (dnnl_dim_t)s->R, (dnnl_dim_t)s->R};
    dnnl_dim_t bdims[1] = {(dnnl_dim_t)s->K};
    dnnl_dim_t sdims[4] = {(dnnl_dim_t)s->N, (dnnl_dim_t)s->C, (dnnl_dim_t)s->H, (dnnl_dim_t)s->W};
    dnnl_dim_t ddims[4] = {(dnnl_dim_t)s->N, (dnnl_dim_t)s->K, (dnnl_dim_t)Ho, (dnnl_dim_t)Wo};
    /* herd's layouts: CNHW, or blocked where the model keeps the tensor so
     * (then the primitives normally want it as it is: no reorder) */
    size_t bw = herd__blk_width();
    dnnl_format_tag_t blk_tag = bw == 16 ? dnnl_aBcd16b : dnnl_aBcd8b;
    if ((s->src_blk || s->dst_blk) && !bw) {
        st = HERD_EUNSUPPORTED;
        goto out;
    }
    if (s->src_blk)
        DNN_TRY(md_tag(&src_u, 4, sdims, blk_tag));
    else
        DNN_TRY(md_cnhw(&src_u, s->N, s->C, s->H, s->W));
    if (s->dst_blk)
        DNN_TRY(md_tag(&dst_u, 4, ddims, blk_tag));
    else
        DNN_TRY(md_cnhw(&dst_u, s->N, s->K, Ho, Wo));
    DNN_TRY(md_tag(&wei_u, 4, wdims, dnnl_oihw));
    DNN_TRY(md_tag(&bias_u, 1, bdims, dnnl_a));
    /* bf16: the operands of the products (src, weights, diff_dst) are bf16,
     * what the primitives write (dst, diff_src, diff_weights) fp32 */
    dnnl_data_type_t op_dt = s->bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t any_src_out, any_dst_in, any_wei_out;
    DNN_TRY(md_tag_dt(&any_src, 4, sdims, op_dt, dnnl_format_tag_any));
    DNN_TRY(md_tag(&any_src_out, 4, sdims, dnnl_format_tag_any));
    DNN_TRY(md_tag(&any_dst, 4, ddims, dnnl_format_tag_any));
    DNN_TRY(md_tag_dt(&any_dst_in, 4, ddims, op_dt, dnnl_format_tag_any));
    DNN_TRY(md_tag_dt(&any_wei, 4, wdims, op_dt, dnnl_format_tag_any));
    DNN_TRY(md_tag(&any_wei_out, 4, wdims, dnnl_format_tag_any));
    /* oneDNN's right padding makes (H + pl + pr - R)/stride + 1 == Ho exactly
     * when rounded down, as herd's shapes do, so pr = pl. */
    dnnl_dims_t strides = {(dnnl_dim_t)s->stride, (dnnl_dim_t)s->stride};
    dnnl_dims_t pad = {(dnnl_dim_t)s->pad, (dnnl_dim_t)s->pad};

    DNN_TRY(dnnl_primitive_attr_create(&attr));
    DNN_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    DNN_TRY(dnnl_primitive_attr_create(&attr_bwd));
    DNN_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr_bwd, dnnl_scratchpad_mode_user));
    if (s->relu) {
        DNN_TRY(dnnl_post_ops_create(&po));
        DNN_TRY(dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
        DNN_TRY(dnnl_primitive_attr_set_post_ops(attr, po));
    }

    dnnl_convolution_desc_t fd, dd, wd;
    DNN_TRY(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct,
                                               &any_src, &any_wei, s->bias ? &bias_u : NULL,
                                               &any_dst, strides, pad, pad));
    DNN_TRY(dnnl_primitive_desc_create(&fpd, &fd, attr, d->engine, NULL));
    if (!c->c1_weights) { /* herd's own kernel computes these gradients: no primitive, no memory */
        DNN_TRY(dnnl_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct, &any_src,
                                                            &any_wei_out, s->bias ? &bias_u : NULL,
                                                            &any_dst_in, strides, pad, pad));
        DNN_TRY(dnnl_primitive_desc_create(&wpd, &wd, attr_bwd, d->engine, fpd));
    }
    if (s->din) {
        DNN_TRY(dnnl_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, &any_src_out,
                                                         &any_wei, &any_dst_in, strides, pad, pad));
        DNN_TRY(dnnl_primitive_desc_create(&dpd, &dd, attr_bwd, d->engine, fpd));
    }

#define Q(pd, what) dnnl_primitive_desc_query_md(pd, what, 0)
    HERD_TRY(dnn_port_init(d, &c->f_src, &src_u, Q(fpd, dnnl_query_src_md), true, false, DNN_OWN));
    HERD_TRY(dnn_port_init(d, &c->f_wei, &wei_u, Q(fpd, dnnl_query_weights_md), true, false, DNN_WEI));
    HERD_TRY(dnn_port_init(d, &c->f_dst, &dst_u, Q(fpd, dnnl_query_dst_md), false, false, DNN_DST));
    HERD_TRY(dnn_primitive(fpd, &c->fwd));
    HERD_TRY(dnn_scratchpad(d, fpd, &c->pad_f));
    if (s->bias) {
        DNN_TRY(dnnl_memory_create(&c->bias, &bias_u, d->engine, DNNL_MEMORY_NONE));
        DNN_TRY(dnnl_memory_create(&c->dbias, &bias_u, d->engine, DNNL_MEMORY_NONE));
    }
    if (s->din) {
        HERD_TRY(dnn_port_init(d, &c->d_ddst, &dst_u, Q(dpd, dnnl_query_diff_dst_md), true, false, DNN_DST));
        HERD_TRY(dnn_port_init(d, &c->d_wei, &wei_u, Q(dpd, dnnl_query_weights_md), true, false, DNN_WEI));
        HERD_TRY(dnn_port_init(d, &c->d_dsrc, &src_u, Q(dpd, dnnl_query_diff_src_md), false,
                               s->din_accumulate, DNN_DSRC));
        HERD_TRY(dnn_primitive(dpd, &c->bwd_data));
        HERD_TRY(dnn_scratchpad(d, dpd, &c->pad_d));
    }
    /* Backward-weights reuses forward's blocked src, and backward-data's
     * blocked diff_dst, when it wants the same layouts (it usually does). */
    if (wpd) {
        c->w_src_is_f_src = dnnl_memory_desc_equal(Q(wpd, dnnl_query_src_md), Q(fpd, dnnl_query_src_md));
        if (!c->w_src_is_f_src)
            HERD_TRY(dnn_port_init(d, &c->w_src, &src_u, Q(wpd, dnnl_query_src_md), true, false, DNN_SRC2));
        c->w_ddst_is_d_ddst = s->din && dnnl_memory_desc_equal(Q(wpd, dnnl_query_diff_dst_md),
                                                               Q(dpd, dnnl_query_diff_dst_md));
        if (!c->w_ddst_is_d_ddst)
            HERD_TRY(dnn_port_init(d, &c->w_ddst, &dst_u, Q(wpd, dnnl_query_diff_dst_md), true, false,
                                   DNN_DDST2));
        HERD_TRY(dnn_port_init(d, &c->w_dwei, &wei_u, Q(wpd, dnnl_query_diff_weights_md), false, false,
                               DNN_DWEI));
        HERD_TRY(dnn_primitive(wpd, &c->bwd_weights));
        HERD_TRY(dnn_scratchpad(d, wpd, &c->pad_w));
    }
#undef Q
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(fpd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        snprintf(c->impl, sizeof c->impl, "%s", impl);
    HERD_TRY(dnn_arena_fit(d));
    *out = c;
    c = NULL;
out:
    dnn_desc_free(fpd, po, attr);
    dnn_desc_free(dpd, NULL, attr_bwd);
    dnn_desc_free(wpd, NULL, NULL);
    herd__conv_free(c);
    return st;
}

void herd__conv_free(herd__conv *c)
{
    if (!c)
        return;
    dnnl_primitive_t prims[3] = {c->fwd, c->bwd_data, c->bwd_weights};
    for (int i = 0; i < 3; i++)
        if (prims[i])
            dnnl_primitive_destroy(prims[i]);
    dnn_port *ports[9] = {&c->f_src, &c->f_wei, &c->f_dst, &c->d_ddst, &c->d_wei,
                          &c->d_dsrc, &c->w_src, &c->w_ddst, &c->w_dwei};
    for (int i = 0; i < 9; i++)
        dnn_port_free(ports[i]);
    dnnl_memory_t mems[5] = {c->bias, c->dbias, c->pad_f, c->pad_d, c->pad_w};
    for (int i = 0; i < 5; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    free(c);
}

const herd__conv_shape *herd__conv_get_shape(const herd__conv *c) { return &c->s; }
const char *herd__conv_impl(const herd__conv *c) { return c->impl; }

void herd__conv_forward(herd__conv *c, const float *in, const float *w, const float *bias,
                        float *out)
{
    herd__dnn *d = c->d;
    dnnl_exec_arg_t args[5] = {
        {DNNL_ARG_SRC, dnn_port_in(d, &c->f_src, in)},
        {DNNL_ARG_WEIGHTS, dnn_port_in(d, &c->f_wei, w)},
        {DNNL_ARG_DST, dnn_port_out(d, &c->f_dst, out)},
        {DNNL_ARG_SCRATCHPAD, c->pad_f},
        {DNNL_ARG_BIAS, c->bias},
    };
    dnn_bind(d, c->pad_f, DNN_SCRATCHPAD, NULL);
    if (c->s.bias)
        dnn_bind(d, c->bias, DNN_SAME, bias);
    dnn_exec(d, c->fwd, c->s.bias ? 5 : 4, args);
    dnn_port_done(d, &c->f_dst);
}

/* ---- backward-weights with one input channel ---------------------------
 *
 * A first layer's input has one channel (Fashion-MNIST): oneDNN 2.6's AVX2
 * backward-weights ran such a layer at 6-9 GFLOP/s (cnn's 5x5, 32 outputs:
 * 11 ms against 1.8 ms forward; lenet's: 2.5 ms of a 6.2 ms step). Here
 * eight output channels are the lanes of a vector and each kernel tap one
 * running sum: dw[k][r][s] += g[k](pixel) * x(pixel shifted by r, s). The
 * taps go in groups of whole kernel rows, few enough to stay in registers
 * (C1_ROWS rows of R taps); a task is one group of one block of eight
 * channels, its sums over the images in order (each image's sums first
 * added alone): the same bits at any thread count. */
enum { C1_MAX_R = 5, C1_ROWS_5 = 2, C1_ROWS_3 = 3 };

/* The dout of channels k0..k0+8 of image n as rows of 8 lanes: a pointer
 * into a blocked dout (stride B), or gathered from CNHW planes into buf
 * (lanes past K zero). */
static const float *c1_panel(const herd__conv_shape *s, const float *dout, size_t HWo, size_t n, size_t k0,
                             size_t B, bool blk, float *buf, size_t *stride)
{
    if (blk) {
        *stride = B;
        return dout + ((n * (s->K / B) + k0 / B) * HWo) * B + k0 % B;
    }
    *stride = 8;
    for (size_t l = 0; l < 8; l++) {
        const float *plane = k0 + l < s->K ? dout + ((k0 + l) * s->N + n) * HWo : NULL;
        for (size_t p = 0; p < HWo; p++)
            buf[p * 8 + l] = plane ? plane[p] : 0.0f;
    }
    return buf;
}

/* One image's sums for taps rows [r0, r0 + NR) of an R x R kernel: acc[i*R
 * + j] over the pixels; gsum the plain sum of g (the bias's) when asked. */
BLK_INLINE void c1_rows(const float *restrict g, size_t gs, const float *restrict xp, size_t wp, size_t Ho,
                        size_t Wo, size_t st, size_t r0, v8f *restrict acc, v8f *restrict gsum, const size_t R,
                        const size_t NR)
{
    v8f a[C1_ROWS_3 * C1_MAX_R] = {{0}};
    v8f b = {0};
    for (size_t oy = 0; oy < Ho; oy++)
        for (size_t ox = 0; ox < Wo; ox++) {
            v8f gv = ld8(g + (oy * Wo + ox) * gs);
            const float *x = xp + (oy * st + r0) * wp + ox * st;
            for (size_t i = 0; i < NR; i++)
                for (size_t j = 0; j < R; j++)
                    a[i * R + j] += gv * x[i * wp + j];
            if (gsum)
                b += gv;
        }
    for (size_t t = 0; t < NR * R; t++)
        acc[t] = a[t];
    if (gsum)
        *gsum = b;
}

static void c1_bwd_weights(const herd__conv_shape *s, const float *in, const float *dout, float *dw,
                           float *dbias, bool blk)
{
    size_t R = s->R, Ho = (s->H + 2 * s->pad - R) / s->stride + 1, Wo = (s->W + 2 * s->pad - R) / s->stride + 1;
    size_t hp = s->H + 2 * s->pad, wp = s->W + 2 * s->pad, B = blk ? herd__blk_width() : 8;
    size_t rows = R == 5 ? C1_ROWS_5 : C1_ROWS_3, groups = (R + rows - 1) / rows, KB = (s->K + 7) / 8;
    size_t T = KB * groups;
#pragma omp parallel if (T > 1 && s->N * Ho * Wo * R * R * 8 >= HERD__PAR_GRAIN)
    {
        float *xp = calloc(hp * wp + Ho * Wo * 8, sizeof(float)), *buf = xp + hp * wp;
        HERD_ASSERT(xp);
#pragma omp for schedule(static)
        for (size_t t = 0; t < T; t++) {
            size_t k0 = t / groups * 8, r0 = t % groups * rows, nr = R - r0 < rows ? R - r0 : rows;
            v8f tot[C1_ROWS_3 * C1_MAX_R] = {{0}}, one[C1_ROWS_3 * C1_MAX_R] = {{0}}, gtot = {0}, g1 = {0};
            bool bias = dbias && r0 == 0;
            for (size_t n = 0; n < s->N; n++) {
                for (size_t y = 0; y < s->H; y++) /* the image inside its zero border */
                    memcpy(xp + (y + s->pad) * wp + s->pad, in + (n * s->H + y) * s->W, s->W * sizeof(float));
                size_t gs;
                const float *g = c1_panel(s, dout, Ho * Wo, n, k0, B, blk, buf, &gs);
                if (R == 5 && nr == 2)
                    c1_rows(g, gs, xp, wp, Ho, Wo, s->stride, r0, one, bias ? &g1 : NULL, 5, 2);
                else if (R == 5)
                    c1_rows(g, gs, xp, wp, Ho, Wo, s->stride, r0, one, bias ? &g1 : NULL, 5, 1);
                else
                    c1_rows(g, gs, xp, wp, Ho, Wo, s->stride, r0, one, bias ? &g1 : NULL, 3, 3);
                for (size_t i = 0; i < nr * R; i++)
                    tot[i] += one[i];
                if (bias)
                    gtot += g1;
            }
            for (size_t l = 0; l < 8 && k0 + l < s->K; l++) {
                for (size_t i = 0; i < nr * R; i++)
                    dw[(k0 + l) * R * R + r0 * R + i] = tot[i][l];
                if (bias)
                    dbias[k0 + l] = gtot[l];
            }
        }
        free(xp);
    }
}

void herd__conv_backward(herd__conv *c, const float *in, const float *w, const float *dout,
                         float *din, float *dw, float *dbias)
{
    if (c->c1_weights) { /* no diff_src: a first layer */
        c1_bwd_weights(&c->s, in, dout, dw, c->s.bias ? dbias : NULL, c->s.dst_blk);
        return;
    }
    herd__dnn *d = c->d;
    dnnl_memory_t ddst = NULL;
    if (c->s.din) {
        ddst = dnn_port_in(d, &c->d_ddst, dout);
        dnnl_exec_arg_t args[4] = {
            {DNNL_ARG_DIFF_DST, ddst},
            {DNNL_ARG_WEIGHTS, dnn_port_in(d, &c->d_wei, w)},
            {DNNL_ARG_DIFF_SRC, dnn_port_out(d, &c->d_dsrc, din)},
            {DNNL_ARG_SCRATCHPAD, c->pad_d},
        };
        dnn_bind(d, c->pad_d, DNN_SCRATCHPAD, NULL);
        dnn_exec(d, c->bwd_data, 4, args);
        dnn_port_done(d, &c->d_dsrc);
    }
    /* forward left its blocked src in f_src (its own memory) */
    dnnl_memory_t src = c->w_src_is_f_src ? c->f_src.prim : dnn_port_in(d, &c->w_src, in);
    if (!c->w_ddst_is_d_ddst)
        ddst = dnn_port_in(d, &c->w_ddst, dout);
    dnnl_exec_arg_t args[5] = {
        {DNNL_ARG_SRC, src},
        {DNNL_ARG_DIFF_DST, ddst},
        {DNNL_ARG_DIFF_WEIGHTS, dnn_port_out(d, &c->w_dwei, dw)},
        {DNNL_ARG_SCRATCHPAD, c->pad_w},
        {DNNL_ARG_DIFF_BIAS, c->dbias},
    };
    dnn_bind(d, c->pad_w, DNN_SCRATCHPAD, NULL);
    if (c->s.bias)
        dnn_bind(d, c->dbias, DNN_SAME, dbias);
    dnn_exec(d, c->bwd_weights, c->s.bias ? 5 : 4, args);
    dnn_port_done(d, &c->w_dwei);
}

/* ---- bf16 ---------------------------------------------------------------- */

herd_bf16_support herd_nn_bf16_support(void)
{
    /* oneDNN's ISA values are nested bit sets (avx2_vnni is not avx512) */
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16)
        return HERD_BF16_NATIVE;
    if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core)
        return HERD_BF16_EMULATED;
    return HERD_BF16_NONE;
}

void herd__to_bf16(const float *x, uint16_t *y, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        /* a NaN keeps its sign and stays quiet; the rest round to nearest
         * even by adding 0x7fff plus the kept part's lowest bit */
        y[i] = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40u)
                                               : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}

/* A 2-D plain matrix of rows x cols with leading dimension ld. */
static dnnl_status_t md_matrix(dnnl_memory_desc_t *md, size_t rows, size_t cols, size_t ld, bool trans,
                               dnnl_data_type_t dt)
{
    /* op(X) is rows x cols: X stored transposed means stride 1 down a column */
    dnnl_dims_t dims = {(dnnl_dim_t)rows, (dnnl_dim_t)cols};
    dnnl_dims_t strides = {trans ? 1 : (dnnl_dim_t)ld, trans ? (dnnl_dim_t)ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

static void dnn_matmul_free(dnn_matmul *mm)
{
    if (mm->prim)
        dnnl_primitive_destroy(mm->prim);
    dnnl_memory_t mems[4] = {mm->a, mm->b, mm->c, mm->pad};
    for (int i = 0; i < 4; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    memset(mm, 0, sizeof *mm);
}

void herd__dnn_drop_matmuls(herd__dnn *d)
{
    for (size_t i = 0; i < d->nmm; i++)
        dnn_matmul_free(&d->mm[i]);
    d->nmm = d->mm_next = 0;
}

static herd_status dnn_matmul_create(herd__dnn *d, const dnn_matmul_key *k, dnn_matmul *mm)
{
    herd_status st = HERD_OK;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t md;
    memset(mm, 0, sizeof *mm);
    mm->key = *k;
    DNN_TRY(md_matrix(&a, k->M, k->K, k->lda, k->ta == 'T', dnnl_bf16));
    DNN_TRY(md_matrix(&b, k->K, k->N, k->ldb, k->tb == 'T', dnnl_bf16));
    DNN_TRY(md_matrix(&c, k->M, k->N, k->ldc, false, dnnl_f32));
    DNN_TRY(dnnl_primitive_attr_create(&attr));
    DNN_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (k->sum) {
        DNN_TRY(dnnl_post_ops_create(&po));
        DNN_TRY(dnnl_post_ops_append_sum(po, 1.0f));
        DNN_TRY(dnnl_primitive_attr_set_post_ops(attr, po));
    }
    DNN_TRY(dnnl_matmul_desc_init(&md, &a, &b, NULL, &c));
    DNN_TRY(dnnl_primitive_desc_create(&pd, &md, attr, d->engine, NULL));
    HERD_TRY(dnn_primitive(pd, &mm->prim));
    DNN_TRY(dnnl_memory_create(&mm->a, &a, d->engine, DNNL_MEMORY_NONE));
    DNN_TRY(dnnl_memory_create(&mm->b, &b, d->engine, DNNL_MEMORY_NONE));
    DNN_TRY(dnnl_memory_create(&mm->c, &c, d->engine, DNNL_MEMORY_NONE));
    HERD_TRY(dnn_scratchpad(d, pd, &mm->pad));
    HERD_TRY(dnn_arena_fit(d));
out:
    dnn_desc_free(pd, po, attr);
    if (st != HERD_OK)
        dnn_matmul_free(mm);
    return st;
}

void herd__gemm_bf16(herd__dnn *d, char ta, char tb, size_t M, size_t N, size_t K, const uint16_t *A,
                     size_t lda, const uint16_t *B, size_t ldb, float beta, float *C, size_t ldc)
{
    HERD_ASSERT(beta == 0.0f || beta == 1.0f);
    if (M == 0 || N == 0)
        return;
    dnn_matmul_key k;
    memset(&k, 0, sizeof k); /* compared with memcmp: padding too */
    k.ta = ta, k.tb = tb, k.sum = beta != 0.0f;
    k.M = M, k.N = N, k.K = K, k.lda = lda, k.ldb = ldb, k.ldc = ldc;
    dnn_matmul *mm = NULL;
    for (size_t i = 0; i < d->nmm && !mm; i++)
        if (!memcmp(&d->mm[i].key, &k, sizeof k))
            mm = &d->mm[i];
    if (!mm) {
        size_t slot = d->nmm < DNN_MATMULS ? d->nmm++ : d->mm_next++ % DNN_MATMULS;
        dnn_matmul_free(&d->mm[slot]);
        herd_status st = dnn_matmul_create(d, &k, &d->mm[slot]);
        HERD_ASSERT(st == HERD_OK); /* the model checked herd_nn_bf16_support first */
        mm = &d->mm[slot];
    }
    dnn_bind(d, mm->a, DNN_SAME, A);
    dnn_bind(d, mm->b, DNN_SAME, B);
    dnn_bind(d, mm->c, DNN_SAME, C);
    dnn_bind(d, mm->pad, DNN_SCRATCHPAD, NULL);
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, mm->a}, {DNNL_ARG_WEIGHTS, mm->b}, {DNNL_ARG_DST, mm->c}, {DNNL_ARG_SCRATCHPAD, mm->pad}};
    dnn_exec(d, mm->prim, 4, args);
}
