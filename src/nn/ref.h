/* ref.h — reference kernels: plain loops in double precision, NCHW layout.
 *
 * These are the definitions every fast kernel in src/nn/ is tested against,
 * and they are themselves checked by central finite differences
 * (tests/test_ref.c). They favour obviousness over speed. Backward functions
 * OVERWRITE their outputs (din, dw, db); any of those may be NULL to skip it.
 */
#ifndef HERD_NN_REF_H
#define HERD_NN_REF_H

#include <stddef.h>
#include <stdint.h>

/* out[i][j] = sum_k A[i][k] * B[k][j]; A is M x K, B is K x N, row-major. */
void herd__ref_gemm(size_t M, size_t N, size_t K, const double *A, const double *B, double *C);

/* in (N,C,H,W), w (K,C,R,R), b (K) or NULL -> out (N,K,Ho,Wo),
 * Ho = (H + 2*pad - R)/stride + 1, likewise Wo. Zero padding. */
void herd__ref_conv_forward(const double *in, const double *w, const double *b, double *out,
                            size_t N, size_t C, size_t H, size_t W, size_t K, size_t R,
                            size_t stride, size_t pad);
void herd__ref_conv_backward(const double *in, const double *w, const double *dout,
                             double *din, double *dw, double *db,
                             size_t N, size_t C, size_t H, size_t W, size_t K, size_t R,
                             size_t stride, size_t pad);

/* in (N,I), w (O,I), b (O) or NULL -> out (N,O) = in w^T + b. */
void herd__ref_linear_forward(const double *in, const double *w, const double *b, double *out,
                              size_t N, size_t I, size_t O);
void herd__ref_linear_backward(const double *in, const double *w, const double *dout,
                               double *din, double *dw, double *db, size_t N, size_t I, size_t O);

/* Elementwise max(x, 0); backward passes dout where in > 0. */
void herd__ref_relu_forward(const double *in, double *out, size_t n);
void herd__ref_relu_backward(const double *in, const double *dout, double *din, size_t n);

/* Max pooling, window k, stride s, no padding: in (N,C,H,W) -> (N,C,Ho,Wo),
 * Ho = (H - k)/s + 1. Ties go to the first maximum in row-major window order. */
void herd__ref_maxpool_forward(const double *in, double *out, size_t N, size_t C, size_t H,
                               size_t W, size_t k, size_t s);
void herd__ref_maxpool_backward(const double *in, const double *dout, double *din, size_t N,
                                size_t C, size_t H, size_t W, size_t k, size_t s);

/* Global average pooling: in (N,C,H,W) -> out (N,C). */
void herd__ref_gavgpool_forward(const double *in, double *out, size_t N, size_t C, size_t HW);
void herd__ref_gavgpool_backward(const double *dout, double *din, size_t N, size_t C, size_t HW);

/* Batch normalization in training mode over (N,H,W) per channel:
 * mean/var are the batch statistics (biased var), out = gamma*(x-mean)/sqrt(var+eps) + beta.
 * mean and var (C each) are outputs of forward (may be NULL). */
void herd__ref_batchnorm_forward(const double *in, const double *gamma, const double *beta,
                                 double *out, double *mean, double *var, size_t N, size_t C,
                                 size_t HW, double eps);
void herd__ref_batchnorm_backward(const double *in, const double *gamma, const double *dout,
                                  double *din, double *dgamma, double *dbeta, size_t N, size_t C,
                                  size_t HW, double eps);

/* Softmax cross-entropy averaged over the batch: logits (N,K), labels in [0,K).
 * Returns the mean loss; dlogits (may be NULL) gets d(mean loss)/d(logits). */
double herd__ref_softmax_xent(const double *logits, const int32_t *labels, double *dlogits,
                              size_t N, size_t K);

/* The layers descriptions add (ref_act.c). Activations elementwise:
 * act 0 relu, 1 tanh, 2 sigmoid, 3 GELU (x * Phi(x), with erf). */
void herd__ref_act_forward(int act, const double *in, double *out, size_t n);
void herd__ref_act_backward(int act, const double *in, const double *dout, double *din, size_t n);
/* Inverted dropout with a given mask (keep[i] 0 or 1): out = in * keep / (1 - p). */
void herd__ref_dropout_forward(const double *in, const uint8_t *keep, double *out, size_t n, double p);
void herd__ref_dropout_backward(const uint8_t *keep, const double *dout, double *din, size_t n, double p);
/* Average pooling, window k, stride s, no padding: in (N,C,H,W) -> (N,C,Ho,Wo). */
void herd__ref_avgpool_forward(const double *in, double *out, size_t N, size_t C, size_t H, size_t W, size_t k,
                               size_t s);
void herd__ref_avgpool_backward(const double *dout, double *din, size_t N, size_t C, size_t H, size_t W, size_t k,
                                size_t s);

#endif
