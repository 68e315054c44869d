/* act.h — the kernels of the layers a description adds beyond the built-in
 * models' (internal to src/nn): activations on their own, dropout (act.c)
 * and average pooling (avgpool.c), on float arrays. Each is checked against
 * its double reference in ref.h (tests/test_layers.c). */
#ifndef HERD_NN_ACT_H
#define HERD_NN_ACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nn/model.h"

/* y = f(x) over n elements. */
void herd__act_forward(herd__act act, const float *x, float *y, size_t n);
/* din = dout * f'(x), from x and y = f(x); din += ... where acc. */
void herd__act_backward(herd__act act, const float *x, const float *y, const float *dout, float *din, size_t n,
                        bool acc);

/* Inverted dropout: with mask (keep[i] 1 or 0), y = x * keep / (1 - p). */
void herd__dropout_apply(const float *x, const uint8_t *keep, float *y, size_t n, float p, bool acc);

/* Average pooling, window k, stride s, no padding, over nplanes planes of
 * H x W (CNHW's C*N planes): out (nplanes, Ho, Wo), Ho = (H - k)/s + 1. */
void herd__avgpool_forward(const float *in, float *out, size_t nplanes, size_t H, size_t W, size_t k, size_t s);
/* din = (or +=, where acc) each output's gradient spread over its window, / k^2. */
void herd__avgpool_backward(const float *dout, float *din, size_t nplanes, size_t H, size_t W, size_t k, size_t s,
                            bool acc);

#endif
