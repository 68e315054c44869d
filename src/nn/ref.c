/* ref.c — reference kernels (see ref.h): plain loops in double precision,
 * NCHW layout. Obviousness over speed: every fast kernel is checked against
 * these, and these are checked by finite differences in tests/test_ref.c. */
#include "nn/ref.h"

#include <math.h>
#include <string.h>

static void zero(double *p, size_t n)
{
    if (p)
        memset(p, 0, n * sizeof *p);
}

// A is (M,K), B is (K,N), C is (M,N); all row-major
void herd__ref_gemm(size_t M, size_t N, size_t K, const double *A, const double *B, double *C)
{
    for (size_t i = 0; i < M; i++) {
        const double *a_row = A + i * K;
        double *c_row = C + i * N;
        for (size_t j = 0; j < N; j++) {
            double sum = 0.0;
            for (size_t k = 0; k < K; k++)
                sum += a_row[k] * B[k * N + j];
            c_row[j] = sum;
        }
    }
}

/* Output size of a window of R sliding with `stride` over H + 2*pad. */
static size_t out_size(size_t H, size_t R, size_t stride, size_t pad)
{
    return (H + 2 * pad - R) / stride + 1;
}

/* The input coordinate under window offset i of output position y, or -1 when
 * it falls in the zero padding. */
static ptrdiff_t in_coord(size_t y, size_t i, size_t stride, size_t pad, size_t H)
{
    ptrdiff_t p = (ptrdiff_t)(y * stride + i) - (ptrdiff_t)pad;
    return (p >= 0 && p < (ptrdiff_t)H) ? p : -1;
}

// in is (N,C,H,W), w is (K,C,R,R), b is (K) or NULL, out is (N,K,Ho,Wo)
void herd__ref_conv_forward(const double *in, const double *w, const double *b, double *out,
                            size_t N, size_t C, size_t H, size_t W, size_t K, size_t R,
                            size_t stride, size_t pad)
{
    size_t Ho = out_size(H, R, stride, pad), Wo = out_size(W, R, stride, pad);
    for (size_t n = 0; n < N; n++) {
        for (size_t k = 0; k < K; k++) {
            double *out_plane = out + (n * K + k) * Ho * Wo;
            for (size_t y = 0; y < Ho; y++) {
                for (size_t x = 0; x < Wo; x++) {
                    double sum = b ? b[k] : 0.0;
                    for (size_t c = 0; c < C; c++) {
                        const double *in_plane = in + (n * C + c) * H * W;
                        const double *w_kc = w + (k * C + c) * R * R;
                        for (size_t i = 0; i < R; i++) {
                            ptrdiff_t yi = in_coord(y, i, stride, pad, H);
                            if (yi < 0)
                                continue;
                            const double *in_row = in_plane + (size_t)yi * W;
                            for (size_t j = 0; j < R; j++) {
                                ptrdiff_t xj = in_coord(x, j, stride, pad, W);
                                if (xj >= 0)
                                    sum += w_kc[i * R + j] * in_row[xj];
                            }
                        }
                    }
                    out_plane[y * Wo + x] = sum;
                }
            }
        }
    }
}

// in is (N,C,H,W), w is (K,C,R,R), dout is (N,K,Ho,Wo);
// din is (N,C,H,W), dw is (K,C,R,R), db is (K); each overwritten, each may be NULL
void herd__ref_conv_backward(const double *in, const double *w, const double *dout,
                             double *din, double *dw, double *db,
                             size_t N, size_t C, size_t H, size_t W, size_t K, size_t R,
                             size_t stride, size_t pad)
{
    size_t Ho = out_size(H, R, stride, pad), Wo = out_size(W, R, stride, pad);
    zero(din, N * C * H * W);
    zero(dw, K * C * R * R);
    zero(db, K);
    for (size_t n = 0; n < N; n++) {
        for (size_t k = 0; k < K; k++) {
            const double *dout_plane = dout + (n * K + k) * Ho * Wo;
            for (size_t y = 0; y < Ho; y++) {
                for (size_t x = 0; x < Wo; x++) {
                    double d = dout_plane[y * Wo + x];
                    if (db)
                        db[k] += d;
                    for (size_t c = 0; c < C; c++) {
                        size_t plane = (n * C + c) * H * W;
                        size_t kc = (k * C + c) * R * R;
                        for (size_t i = 0; i < R; i++) {
                            ptrdiff_t yi = in_coord(y, i, stride, pad, H);
                            if (yi < 0)
                                continue;
                            size_t row = plane + (size_t)yi * W;
                            for (size_t j = 0; j < R; j++) {
                                ptrdiff_t xj = in_coord(x, j, stride, pad, W);
                                if (xj < 0)
                                    continue;
                                if (din)
                                    din[row + (size_t)xj] += w[kc + i * R + j] * d;
                                if (dw)
                                    dw[kc + i * R + j] += in[row + (size_t)xj] * d;
                            }
                        }
                    }
                }
            }
        }
    }
}

// in is (N,I), w is (O,I), b is (O) or NULL, out is (N,O)
void herd__ref_linear_forward(const double *in, const double *w, const double *b, double *out,
                              size_t N, size_t I, size_t O)
{
    for (size_t n = 0; n < N; n++) {
        const double *in_row = in + n * I;
        for (size_t o = 0; o < O; o++) {
            const double *w_row = w + o * I;
            double sum = b ? b[o] : 0.0;
            for (size_t i = 0; i < I; i++)
                sum += in_row[i] * w_row[i];
            out[n * O + o] = sum;
        }
    }
}

// in is (N,I), w is (O,I), dout is (N,O); din (N,I), dw (O,I), db (O) overwritten or NULL
void herd__ref_linear_backward(const double *in, const double *w, const double *dout,
                               double *din, double *dw, double *db, size_t N, size_t I, size_t O)
{
    zero(din, N * I);
    zero(dw, O * I);
    zero(db, O);
    for (size_t n = 0; n < N; n++) {
        const double *in_row = in + n * I;
        const double *dout_row = dout + n * O;
        for (size_t o = 0; o < O; o++) {
            const double *w_row = w + o * I;
            double d = dout_row[o];
            if (db)
                db[o] += d;
            for (size_t i = 0; i < I; i++) {
                if (din)
                    din[n * I + i] += w_row[i] * d;
                if (dw)
                    dw[o * I + i] += in_row[i] * d;
            }
        }
    }
}

void herd__ref_relu_forward(const double *in, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = in[i] > 0.0 ? in[i] : 0.0;
}

void herd__ref_relu_backward(const double *in, const double *dout, double *din, size_t n)
{
    if (!din)
        return;
    for (size_t i = 0; i < n; i++)
        din[i] = in[i] > 0.0 ? dout[i] : 0.0;
}

/* Offset within an H x W plane of the maximum of the k x k window whose top-left
 * is (y0, x0); ties go to the first in row-major order (strict >). */
static size_t window_argmax(const double *plane, size_t W, size_t y0, size_t x0, size_t k)
{
    size_t best = y0 * W + x0;
    for (size_t i = 0; i < k; i++) {
        const double *row = plane + (y0 + i) * W + x0;
        for (size_t j = 0; j < k; j++) {
            if (row[j] > plane[best])
                best = (y0 + i) * W + x0 + j;
        }
    }
    return best;
}

// in is (N,C,H,W), out is (N,C,Ho,Wo)
void herd__ref_maxpool_forward(const double *in, double *out, size_t N, size_t C, size_t H,
                               size_t W, size_t k, size_t s)
{
    size_t Ho = out_size(H, k, s, 0), Wo = out_size(W, k, s, 0);
    for (size_t p = 0; p < N * C; p++) {
        const double *in_plane = in + p * H * W;
        double *out_plane = out + p * Ho * Wo;
        for (size_t y = 0; y < Ho; y++)
            for (size_t x = 0; x < Wo; x++)
                out_plane[y * Wo + x] = in_plane[window_argmax(in_plane, W, y * s, x * s, k)];
    }
}

// in is (N,C,H,W), dout is (N,C,Ho,Wo), din is (N,C,H,W) overwritten (or NULL)
void herd__ref_maxpool_backward(const double *in, const double *dout, double *din, size_t N,
                                size_t C, size_t H, size_t W, size_t k, size_t s)
{
    if (!din)
        return;
    size_t Ho = out_size(H, k, s, 0), Wo = out_size(W, k, s, 0);
    zero(din, N * C * H * W);
    for (size_t p = 0; p < N * C; p++) {
        const double *in_plane = in + p * H * W;
        const double *dout_plane = dout + p * Ho * Wo;
        double *din_plane = din + p * H * W;
        for (size_t y = 0; y < Ho; y++)
            for (size_t x = 0; x < Wo; x++)
                din_plane[window_argmax(in_plane, W, y * s, x * s, k)] += dout_plane[y * Wo + x];
    }
}

// in is (N,C,HW), out is (N,C)
void herd__ref_gavgpool_forward(const double *in, double *out, size_t N, size_t C, size_t HW)
{
    for (size_t p = 0; p < N * C; p++) {
        const double *in_plane = in + p * HW;
        double sum = 0.0;
        for (size_t i = 0; i < HW; i++)
            sum += in_plane[i];
        out[p] = sum / (double)HW;
    }
}

// dout is (N,C), din is (N,C,HW) overwritten (or NULL)
void herd__ref_gavgpool_backward(const double *dout, double *din, size_t N, size_t C, size_t HW)
{
    if (!din)
        return;
    for (size_t p = 0; p < N * C; p++) {
        double *din_plane = din + p * HW;
        for (size_t i = 0; i < HW; i++)
            din_plane[i] = dout[p] / (double)HW;
    }
}

/* Biased mean and variance of channel c of in (N,C,HW), over its N*HW values. */
static void channel_stats(const double *in, size_t N, size_t C, size_t HW, size_t c,
                          double *mean, double *var)
{
    double m = (double)(N * HW);
    double sum = 0.0;
    for (size_t n = 0; n < N; n++) {
        const double *x = in + (n * C + c) * HW;
        for (size_t i = 0; i < HW; i++)
            sum += x[i];
    }
    double mu = sum / m;
    double sq = 0.0;
    for (size_t n = 0; n < N; n++) {
        const double *x = in + (n * C + c) * HW;
        for (size_t i = 0; i < HW; i++)
            sq += (x[i] - mu) * (x[i] - mu);
    }
    *mean = mu;
    *var = sq / m;
}

// in is (N,C,HW), gamma and beta are (C), out is (N,C,HW); mean, var (C) or NULL
void herd__ref_batchnorm_forward(const double *in, const double *gamma, const double *beta,
                                 double *out, double *mean, double *var, size_t N, size_t C,
                                 size_t HW, double eps)
{
    for (size_t c = 0; c < C; c++) {
        double mu, v;
        channel_stats(in, N, C, HW, c, &mu, &v);
        double invstd = 1.0 / sqrt(v + eps);
        for (size_t n = 0; n < N; n++) {
            const double *x = in + (n * C + c) * HW;
            double *y = out + (n * C + c) * HW;
            for (size_t i = 0; i < HW; i++)
                y[i] = gamma[c] * (x[i] - mu) * invstd + beta[c];
        }
        if (mean)
            mean[c] = mu;
        if (var)
            var[c] = v;
    }
}

/* With xhat = (x - mean) * invstd over the m = N*HW values of a channel,
 *   dbeta  = sum dy,   dgamma = sum dy * xhat,
 *   dx     = gamma * invstd / m * (m * dy - dbeta - xhat * dgamma),
 * the last because mean and var depend on every x of the channel. */
// in is (N,C,HW), gamma is (C), dout is (N,C,HW);
// din (N,C,HW), dgamma (C), dbeta (C) overwritten, each may be NULL
void herd__ref_batchnorm_backward(const double *in, const double *gamma, const double *dout,
                                  double *din, double *dgamma, double *dbeta, size_t N, size_t C,
                                  size_t HW, double eps)
{
    double m = (double)(N * HW);
    for (size_t c = 0; c < C; c++) {
        double mu, v;
        channel_stats(in, N, C, HW, c, &mu, &v);
        double invstd = 1.0 / sqrt(v + eps);
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (size_t n = 0; n < N; n++) {
            const double *x = in + (n * C + c) * HW;
            const double *dy = dout + (n * C + c) * HW;
            for (size_t i = 0; i < HW; i++) {
                sum_dy += dy[i];
                sum_dy_xhat += dy[i] * (x[i] - mu) * invstd;
            }
        }
        if (dbeta)
            dbeta[c] = sum_dy;
        if (dgamma)
            dgamma[c] = sum_dy_xhat;
        if (!din)
            continue;
        for (size_t n = 0; n < N; n++) {
            const double *x = in + (n * C + c) * HW;
            const double *dy = dout + (n * C + c) * HW;
            double *dx = din + (n * C + c) * HW;
            for (size_t i = 0; i < HW; i++) {
                double xhat = (x[i] - mu) * invstd;
                dx[i] = gamma[c] * invstd / m * (m * dy[i] - sum_dy - xhat * sum_dy_xhat);
            }
        }
    }
}

// logits is (N,K), labels is (N), dlogits is (N,K) or NULL
double herd__ref_softmax_xent(const double *logits, const int32_t *labels, double *dlogits,
                              size_t N, size_t K)
{
    double loss = 0.0;
    for (size_t n = 0; n < N; n++) {
        const double *z = logits + n * K;
        double zmax = z[0];
        for (size_t k = 1; k < K; k++)
            if (z[k] > zmax)
                zmax = z[k];
        double sum = 0.0;
        for (size_t k = 0; k < K; k++)
            sum += exp(z[k] - zmax);
        size_t label = (size_t)labels[n];
        // -log softmax(z)[label] = log sum_k exp(z_k) - z_label
        loss += log(sum) + zmax - z[label];
        if (!dlogits)
            continue;
        double *dz = dlogits + n * K;
        for (size_t k = 0; k < K; k++) {
            double p = exp(z[k] - zmax) / sum;
            dz[k] = (p - (k == label ? 1.0 : 0.0)) / (double)N;
        }
    }
    return loss / (double)N;
}
