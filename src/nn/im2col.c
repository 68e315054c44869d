/* Convolution by im2col + sgemm, the fallback where oneDNN has no
 * primitive: an input's columns, and their gradients added back. CNHW. */
#include "nn/kernels.h"

#include <string.h>

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
