/* Max pooling, forward and backward: on CNHW planes, and on blocked
 * activations (nn/vec.h). */
#include "nn/kernels.h"

#include <stdbool.h>
#include <string.h>

#include "nn/vec.h"

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
