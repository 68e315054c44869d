/* kernels.h — the fast float kernels behind the layers (internal).
 *
 * Spatial activations use the "CNHW" layout: (C, N, H, W), i.e. each channel
 * is one contiguous block of N*H*W floats. That makes a whole-batch
 * convolution a single GEMM (W x im2col) whose output is already in layout,
 * and batch norm / bias a contiguous per-channel loop. For C == 1, CNHW and
 * NCHW coincide. Each kernel has a double-precision reference in ref.h, and
 * tests/test_kernels.c checks one against the other.
 */
#ifndef HERD_NN_KERNELS_H
#define HERD_NN_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/par.h" /* the loops here and in model.c: on the thread's OpenMP team from HERD__PAR_GRAIN floats */
#include "herd/herd_status.h"

/* Row-major C(MxN) = alpha * op(A) op(B) + beta * C; ta/tb are 'N' or 'T'.
 * Goes to oneDNN's JIT sgemm. */
void herd__sgemm(char ta, char tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                 size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc);

/* col (C*R*R, N*Ho*Wo) from in (C,N,H,W); row = (c*R + i)*R + j. */
void herd__im2col(const float *in, size_t C, size_t N, size_t H, size_t W, size_t R,
                  size_t stride, size_t pad, float *col);
/* The same for images [n0, n0+nb) of a batch of N: col is (C*R*R, nb*Ho*Wo). */
void herd__im2col_chunk(const float *in, size_t C, size_t N, size_t n0, size_t nb, size_t H,
                        size_t W, size_t R, size_t stride, size_t pad, float *col);
/* din (C,N,H,W) += the scatter of col back to image positions. */
void herd__col2im_add(const float *col, size_t C, size_t N, size_t H, size_t W, size_t R,
                      size_t stride, size_t pad, float *din);

/* The same for images [n0, n0+nb) of a batch of N. */
void herd__col2im_add_chunk(const float *col, size_t C, size_t N, size_t n0, size_t nb, size_t H,
                            size_t W, size_t R, size_t stride, size_t pad, float *din);

/* Max pooling over nplanes planes of H x W, window k, stride s, no padding.
 * idx records each output's source offset within its plane. */
void herd__maxpool_forward(const float *in, float *out, uint32_t *idx, size_t nplanes, size_t H,
                           size_t W, size_t k, size_t s);
/* din = (accumulate ? din : 0) + scatter of dout through idx, leaving out
 * the inputs where relu_in (the input, when a ReLU fused on the layer that
 * made it; NULL: none) is not > 0: that ReLU's backward mask, applied here
 * instead of in a pass of its own. */
void herd__maxpool_backward(const float *dout, const uint32_t *idx, const float *relu_in,
                            float *din, size_t nplanes, size_t H, size_t W, size_t k, size_t s,
                            bool accumulate);

/* Batch norm over C channels of `len` contiguous floats each (CNHW).
 * Training: batch statistics, saves mean and inverse std for backward and
 * updates running mean/var with `momentum` (unbiased variance, as PyTorch).
 * relu: ReLU fused on the output. */
void herd__batchnorm_forward_train(const float *in, const float *gamma, const float *beta,
                                   float *out, float *save_mean, float *save_invstd,
                                   float *run_mean, float *run_var, size_t C, size_t len,
                                   float eps, float momentum, bool relu);
void herd__batchnorm_forward_eval(const float *in, const float *gamma, const float *beta,
                                  float *out, const float *run_mean, const float *run_var,
                                  size_t C, size_t len, float eps, bool relu);
/* dgamma, dbeta overwritten; din overwritten or accumulated. relu_out: the
 * output of a ReLU fused on the forward's output, masking dout (NULL: none);
 * dout itself is left as it is. */
void herd__batchnorm_backward(const float *in, const float *gamma, const float *dout,
                              const float *relu_out, const float *save_mean,
                              const float *save_invstd, float *din, float *dgamma, float *dbeta,
                              size_t C, size_t len, bool accumulate);

/* ---- blocked activations ("nChw16c", "nChw8c") -------------------------
 *
 * Between the layers that run on oneDNN's convolutions, an activation of C
 * channels (C a multiple of the block width B) can stay in the layout the
 * primitives compute in: (N, C/B, H, W, B), each B consecutive floats one
 * pixel's B channels of one block; B is 16 where oneDNN has AVX-512, 8 with
 * AVX2. The primitives then read and write herd's buffers directly (no
 * reorder), and the batch norm, pooling and global average pooling below
 * work on it as they are. model.c decides, per forward, which activations
 * stay blocked (its plan); everything else is CNHW. These kernels never
 * split a channel's sum across threads in a way that depends on their
 * count: per (image, block) partial sums in double, added over the images
 * in order. Every kernel takes B (8, 16, 32 or 64); they run on any CPU.
 *
 * bf16 on AMX: oneDNN's AMX convolutions compute channels-last (NHWC, its
 * "acdb"), and a blocked fp32 activation cost a reorder each way around
 * every convolution (a third of a ResNet-20 step). There each blocked
 * activation is one block of all its C channels, B = C: (N, 1, H, W, C) is
 * NHWC, and the same kernels run on it. */
enum { HERD__BLK_MAX = 64 };

/* The block width oneDNN's convolutions compute in here: 16 (AVX-512), 8
 * (AVX2), or 0 (neither: activations stay CNHW). */
size_t herd__blk_width(void);

/* Whether oneDNN's bf16 convolutions compute channels-last here (AMX):
 * then bf16 models hold their blocked activations as NHWC (B = C). */
bool herd__blk_nhwc_bf16(void);

/* (C, N, HW) CNHW <-> (N, C/B, HW, B); C a multiple of B. */
void herd__cnhw_to_blk(const float *in, float *out, size_t C, size_t N, size_t HW, size_t B);
void herd__blk_to_cnhw(const float *in, float *out, size_t C, size_t N, size_t HW, size_t B);

/* Max pooling on nblocks = N * C/B blocked planes of H x W: the CNHW
 * kernels' windows and tie order; idx holds, per output lane, the pixel's
 * offset h*W + w in its plane. */
void herd__maxpool_forward_blk(const float *in, float *out, uint32_t *idx, size_t nblocks, size_t H,
                               size_t W, size_t k, size_t s, size_t B);
void herd__maxpool_backward_blk(const float *dout, const uint32_t *idx, const float *relu_in,
                                float *din, size_t nblocks, size_t H, size_t W, size_t k, size_t s,
                                bool accumulate, size_t B);

/* Blocked (N, C/B, HW, B) <-> rows (N, C*HW) in NCHW order: flatten. */
void herd__blk_to_nchw(const float *in, float *out, size_t C, size_t N, size_t HW, size_t B);
void herd__nchw_to_blk(const float *in, float *out, size_t C, size_t N, size_t HW, bool accumulate, size_t B);

/* Batch norm on a blocked (N, C/B, HW, B) tensor: what the CNHW kernels
 * compute, in that layout. work: HERD__BN_BLK_WORK(N, C) doubles (the
 * per-(image, block) sums, then the per-channel totals and constants);
 * evaluation's: 2 * C floats. */
#define HERD__BN_BLK_WORK(N, C) (2 * (N) * (C) + 6 * (C))
void herd__batchnorm_forward_train_blk(const float *in, const float *gamma, const float *beta,
                                       float *out, float *save_mean, float *save_invstd,
                                       float *run_mean, float *run_var, size_t C, size_t N,
                                       size_t HW, float eps, float momentum, bool relu,
                                       double *work, size_t B);
void herd__batchnorm_forward_eval_blk(const float *in, const float *gamma, const float *beta,
                                      float *out, const float *run_mean, const float *run_var,
                                      size_t C, size_t N, size_t HW, float eps, bool relu,
                                      float *work, size_t B);
void herd__batchnorm_backward_blk(const float *in, const float *gamma, const float *dout,
                                  const float *relu_out, const float *save_mean,
                                  const float *save_invstd, float *din, float *dgamma,
                                  float *dbeta, size_t C, size_t N, size_t HW, bool accumulate,
                                  double *work, size_t B);

/* Softmax cross-entropy, logits (N, K): returns mean loss, writes dlogits
 * (may be NULL) and counts argmax hits. */
float herd__softmax_xent(const float *logits, const int32_t *labels, float *dlogits, size_t N,
                         size_t K, size_t *ncorrect);

/* (C, N, HW) <-> (N, C*HW) */
void herd__cnhw_to_nchw(const float *in, float *out, size_t C, size_t N, size_t HW);
void herd__nchw_to_cnhw(const float *in, float *out, size_t C, size_t N, size_t HW, bool accumulate);

/* ---- oneDNN convolution primitives ------------------------------------
 *
 * herd__dnn is the oneDNN engine and stream of one model, plus the scratch
 * the primitives of all its layers share (blocked copies of activations and
 * weights that live only during one call, and the primitives' scratchpads).
 * It is per model, never global: workers are threads (or SimGrid ranks) in
 * one process, each with its own model. Used by one thread at a time.
 *
 * herd__conv is one convolution's forward, backward-data and
 * backward-weights primitives for one batch size, created once and reused
 * every step. Callers keep herd's layouts: activations CNHW, weights
 * (K, C, R, R) in the flat parameter array, bias (K) right after them. The
 * primitives run oneDNN's direct (JIT) convolution on the blocked layouts it
 * picks; the reorders into and out of them happen inside these calls. */
typedef struct herd__dnn herd__dnn;
typedef struct herd__conv herd__conv;

typedef struct herd__conv_shape {
    size_t N, C, H, W;   /* input (C, N, H, W) */
    size_t K, R;         /* K output channels, R x R kernel */
    size_t stride, pad;  /* the same on both axes; Ho = (H + 2*pad - R)/stride + 1 */
    bool bias;           /* a bias (K) follows the weights */
    bool relu;           /* ReLU fused on the output */
    bool din;            /* backward computes the input's gradient */
    bool din_accumulate; /* ... and adds it to din instead of overwriting it */
    int nthr;            /* the OpenMP threads it runs on: oneDNN fixes its split when
                          * it makes a primitive (the caller's count then; a key only) */
    bool src_blk;        /* herd holds src (and din) blocked (herd__blk_width), not CNHW */
    bool dst_blk;        /* ... and dst (and dout) */
    bool nhwc;           /* the blocked ones are NHWC, one block of all channels (herd__blk_nhwc_bf16) */
    bool bf16;           /* src, weights and diff_dst in bf16 (converted by the reorders
                          * into the primitives' layouts); dst, diff_src, diff_weights
                          * and the bias stay fp32, accumulation is fp32 */
} herd__conv_shape;

/* On failure nothing is left allocated and *out is NULL. */
herd_status herd__dnn_create(herd__dnn **out);
void herd__dnn_free(herd__dnn *d);

/* HERD_EUNSUPPORTED when oneDNN has no primitive (HERD_ENOMEM: no memory)
 * for the shape: the caller falls back to im2col + sgemm. */
herd_status herd__conv_create(herd__dnn *d, const herd__conv_shape *s, herd__conv **out);
void herd__conv_free(herd__conv *c);
const herd__conv_shape *herd__conv_get_shape(const herd__conv *c);
/* Which oneDNN implementation runs forward (for logs and tests). */
const char *herd__conv_impl(const herd__conv *c);

/* out (K,N,Ho,Wo) = relu?(conv(in (C,N,H,W), w (K,C,R,R)) + bias); bias NULL
 * unless shape.bias. */
void herd__conv_forward(herd__conv *c, const float *in, const float *w, const float *bias,
                        float *out);
/* dw (K,C,R,R) and dbias (K, when shape.bias) overwritten from dout
 * (K,N,Ho,Wo); din (C,N,H,W), when shape.din, overwritten or accumulated.
 * Backward-weights reads the blocked copy of `in` the last forward made, so
 * a backward belongs to the forward just before it on this herd__conv. */
void herd__conv_backward(herd__conv *c, const float *in, const float *w, const float *dout,
                         float *din, float *dw, float *dbias);

/* ---- bf16 ------------------------------------------------------------
 *
 * bfloat16: fp32's sign and 8-bit exponent, 7 stored mantissa bits (8 with
 * the implicit one), so its unit roundoff is u = 2^-8 and its range is
 * fp32's. Values are held as the top 16 bits of the fp32 pattern. */

/* y[i] = x[i] rounded to the nearest bf16, ties to even (as oneDNN's
 * reorders round); a NaN stays a NaN, a value past bf16's largest becomes
 * an infinity of its sign. */
void herd__to_bf16(const float *x, uint16_t *y, size_t n);

static inline float herd__bf16_to_f32(uint16_t h)
{
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}

/* C (MxN, fp32, row-major) = op(A) op(B) + beta * C with A and B in bf16,
 * products and sums in fp32, as herd__sgemm lays its arguments out (ta/tb
 * 'N' or 'T', leading dimensions in elements). beta is 0 or 1. Runs a
 * oneDNN matmul primitive, created on first use for these shapes and kept
 * on d (a small cache: a model has a few dozen distinct products). */
void herd__gemm_bf16(herd__dnn *d, char ta, char tb, size_t M, size_t N, size_t K, const uint16_t *A,
                     size_t lda, const uint16_t *B, size_t ldb, float beta, float *C, size_t ldc);

/* Frees d's cached matmul primitives. */
void herd__dnn_drop_matmuls(herd__dnn *d);

#endif
