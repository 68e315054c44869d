/* The double-precision references of the layers descriptions add
 * (ref.h): activations, dropout, average pooling. Plain loops, NCHW. */
#include <math.h>
#include <string.h>

#include "nn/ref.h"

static double ref_act(int act, double x)
{
    switch (act) {
    case 0:
        return x > 0 ? x : 0;
    case 1:
        return tanh(x);
    case 2:
        return 1 / (1 + exp(-x));
    default:
        return x * 0.5 * (1 + erf(x / sqrt(2.0)));
    }
}

/* d f / d x, from the definitions above */
static double ref_act_slope(int act, double x)
{
    switch (act) {
    case 0:
        return x > 0 ? 1 : 0;
    case 1:
        return 1 - tanh(x) * tanh(x);
    case 2: {
        double s = 1 / (1 + exp(-x));
        return s * (1 - s);
    }
    default:
        return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
    }
}

void herd__ref_act_forward(int act, const double *in, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ref_act(act, in[i]);
}

void herd__ref_act_backward(int act, const double *in, const double *dout, double *din, size_t n)
{
    for (size_t i = 0; i < n; i++)
        din[i] = dout[i] * ref_act_slope(act, in[i]);
}

void herd__ref_dropout_forward(const double *in, const uint8_t *keep, double *out, size_t n, double p)
{
    for (size_t i = 0; i < n; i++)
        out[i] = keep[i] ? in[i] / (1 - p) : 0;
}

void herd__ref_dropout_backward(const uint8_t *keep, const double *dout, double *din, size_t n, double p)
{
    herd__ref_dropout_forward(dout, keep, din, n, p);
}

void herd__ref_avgpool_forward(const double *in, double *out, size_t N, size_t C, size_t H, size_t W, size_t k,
                               size_t s)
{
    size_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
    for (size_t p = 0; p < N * C; p++)
        for (size_t i = 0; i < Ho; i++)
            for (size_t j = 0; j < Wo; j++) {
                double sum = 0;
                for (size_t a = 0; a < k; a++)
                    for (size_t b = 0; b < k; b++)
                        sum += in[(p * H + i * s + a) * W + j * s + b];
                out[(p * Ho + i) * Wo + j] = sum / (double)(k * k);
            }
}

void herd__ref_avgpool_backward(const double *dout, double *din, size_t N, size_t C, size_t H, size_t W, size_t k,
                                size_t s)
{
    size_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1;
    memset(din, 0, N * C * H * W * sizeof *din);
    for (size_t p = 0; p < N * C; p++)
        for (size_t i = 0; i < Ho; i++)
            for (size_t j = 0; j < Wo; j++)
                for (size_t a = 0; a < k; a++)
                    for (size_t b = 0; b < k; b++)
                        din[(p * H + i * s + a) * W + j * s + b] += dout[(p * Ho + i) * Wo + j] / (double)(k * k);
}
