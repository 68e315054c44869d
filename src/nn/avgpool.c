/* Average pooling: a window of k x k, stride s, no padding, over CNHW
 * planes (the layer reads CNHW: plan_layouts blocks only what it knows). */
#include "nn/act.h"

#include <string.h>

#include "core/par.h"

void herd__avgpool_forward(const float *in, float *out, size_t nplanes, size_t H, size_t W, size_t k, size_t s)
{
    size_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
    float inv = 1.0f / (float)(k * k);
#pragma omp parallel for if (nplanes > 1 && nplanes * H * W >= HERD__PAR_GRAIN) schedule(static)
    for (size_t p = 0; p < nplanes; p++) {
        const float *plane = in + p * H * W;
        float *o = out + p * Ho * Wo;
        for (size_t i = 0; i < Ho; i++)
            for (size_t j = 0; j < Wo; j++) {
                float sum = 0.0f;
                for (size_t di = 0; di < k; di++) {
                    const float *row = plane + (i * s + di) * W + j * s;
                    for (size_t dj = 0; dj < k; dj++)
                        sum += row[dj];
                }
                o[i * Wo + j] = sum * inv;
            }
    }
}

void herd__avgpool_backward(const float *dout, float *din, size_t nplanes, size_t H, size_t W, size_t k, size_t s,
                            bool acc)
{
    size_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
    float inv = 1.0f / (float)(k * k);
#pragma omp parallel for if (nplanes > 1 && nplanes * H * W >= HERD__PAR_GRAIN) schedule(static)
    for (size_t p = 0; p < nplanes; p++) {
        float *plane = din + p * H * W;
        const float *g = dout + p * Ho * Wo;
        if (!acc)
            memset(plane, 0, H * W * sizeof(float));
        for (size_t i = 0; i < Ho; i++)
            for (size_t j = 0; j < Wo; j++) {
                float v = g[i * Wo + j] * inv;
                for (size_t di = 0; di < k; di++) {
                    float *row = plane + (i * s + di) * W + j * s;
                    for (size_t dj = 0; dj < k; dj++)
                        row[dj] += v;
                }
            }
    }
}

static void avgpool_forward(herd_layer *l, herd_model *m, size_t N, bool train)
{
    (void)train;
    const pool_layer *p = (const pool_layer *)l;
    herd__avgpool_forward(in_out(m, l->in), l->out, l->c * N, p->hin, p->win, p->k, p->stride);
}

static void avgpool_backward(herd_layer *l, herd_model *m, size_t N)
{
    const pool_layer *p = (const pool_layer *)l;
    float *din = in_dout(m, l->in);
    if (din)
        herd__avgpool_backward(l->dout, din, l->c * N, p->hin, p->win, p->k, p->stride, in_accumulates(m, l->in));
}

const herd_layer_ops herd__avgpool_ops = {.name = "avgpool", .forward = avgpool_forward, .backward = avgpool_backward};
