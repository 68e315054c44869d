/* Tests of the bf16 path (--precision bf16): the rounding, the bf16 matrix
 * product and convolution primitives against the double references of
 * src/nn/ref.c, the model's layers wired through them, and how far whole
 * models' gradients move from fp32's.
 *
 * The bound. bf16 keeps 8 significant bits, so rounding to nearest leaves a
 * relative error of at most u = 2^-8 per operand. A product of two rounded
 * operands is off by at most (2u + u^2) of |x w|, and fp32 accumulation of
 * K of them adds at most K * 2^-24 of the sum of |terms| (gamma_K). So for
 * each output y = sum_k x_k w_k (+ an fp32 bias), with S = sum_k |x_k w_k|:
 *
 *   (1) per element, always:   |y_bf16 - y| <= (2u + u^2 + K 2^-24) S.
 *
 * That worst case lines every rounding error up; they are independent and
 * of mean zero (E[d^2] <= u^2/3 for a rounding error d), so the expected
 * squared error of one output is (2u^2/3) sum_k (x_k w_k)^2 = (2u^2/3) Q:
 * relative to a typical term |x w|, the error grows as u sqrt(K), not u K.
 *
 *   (2) over all outputs:      sum (y_bf16 - y)^2 <= 4 sum (2u^2/3) Q
 *                              (plus fp32 accumulation's K 2^-48 S^2).
 *
 * (2) is what a broken path fails: a transposed weight, a dropped operand
 * or a misplaced block moves an output by about sqrt(Q) itself, 300 times
 * the bound's square root. test bf16_bound_rejects_broken checks that it
 * does. And the products must be bf16's, not fp32's in disguise:
 *
 *   (3) against the reference run on the rounded operands,
 *       sum (y_bf16 - y_r)^2 <= 4 sum K 2^-48 S_r^2 (fp32 accumulation only),
 *
 * which an fp32 product (off from y_r by about u sqrt(Q)) fails. */
#include <float.h>
#include <stdbool.h>
#include <stdint.h>

#include "fixtures.h"
#include "harness.h"
#include "herd/herd_nn.h"
#include "herd/herd_rng.h"
#include "nn/kernels.h"
#include "nn/ref.h"

#define U_BF16 (1.0 / 256.0)       /* 2^-8 */
#define U_FP32 (1.0 / 16777216.0)  /* 2^-24 */

static double *dalloc(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof *p);
    ASSERT_TRUE(p != NULL);
    return p;
}

static float *falloc(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    ASSERT_TRUE(p != NULL);
    return p;
}

/* Where this CPU has no bf16 products (oneDNN computes them only with
 * AVX-512), the bf16 path must refuse instead of running in fp32: a model
 * keeps fp32 and says unsupported. The tests that need the products check
 * that refusal and stop there; an AVX-512 machine runs them whole. */
static bool no_bf16_here(void)
{
    if (herd_nn_bf16_support() != HERD_BF16_NONE)
        return false;
    herd_model *m = NULL;
    herd_err err = {0};
    if (herd_model_create("lenet", 1, 28, 28, 10, 4, 3, &m, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "create lenet: %s", err.msg);
    ASSERT_EQ_INT(herd_model_set_precision(m, HERD_PRECISION_BF16), HERD_EUNSUPPORTED);
    ASSERT_EQ_INT(herd_model_precision(m), HERD_PRECISION_FP32);
    herd_model_free(m);
    return true;
}

/* x as bf16 would hold it. */
static double round_bf16(double x)
{
    float f = (float)x;
    uint16_t h;
    herd__to_bf16(&f, &h, 1);
    return herd__bf16_to_f32(h);
}

/* The operands each reference runs on: themselves (its y), |x| (S), x^2
 * (Q), rounded to bf16 (y_r) and |rounded| (S_r). */
enum { V_X, V_ABS, V_SQ, V_RND, V_RND_ABS, NV };

static double *variant(const double *x, size_t n, int v)
{
    double *y = dalloc(n);
    for (size_t i = 0; i < n; i++) {
        double t = v >= V_RND ? round_bf16(x[i]) : x[i];
        y[i] = v == V_SQ ? t * t : v == V_ABS || v == V_RND_ABS ? fabs(t) : t;
    }
    return y;
}

/* Normal values that are exactly floats. */
static void fill(herd_rng *r, double *x, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (double)(float)(scale * (double)herd_rng_normal(r));
}

/* One output tensor's references: ref and its magnitudes S (the reference
 * on |operands|) and Q (on squared operands), and, for (3), the reference
 * on rounded operands and its S_r (NULL: skip (3)). K: terms per output. */
typedef struct bounds {
    const double *ref, *S, *Q, *ref_r, *S_r;
    size_t n, K;
} bounds;

/* Whether got meets (1), (2) and (3); why not in why. */
static bool within(const double *got, const bounds *b, char *why, size_t cap)
{
    double e2 = 0, want2 = 0, er2 = 0, wantr2 = 0, acc = (double)b->K * U_FP32;
    for (size_t i = 0; i < b->n; i++) {
        double e = got[i] - b->ref[i];
        double tol = (2 * U_BF16 + U_BF16 * U_BF16 + acc) * b->S[i] + 1e-30;
        if (!(fabs(e) <= tol)) {
            snprintf(why, cap, "[%zu]: got %.9g, want %.9g: |diff| %.3g > (2u+u^2+K 2^-24) S = %.3g", i, got[i],
                     b->ref[i], fabs(e), tol);
            return false;
        }
        e2 += e * e;
        want2 += 2.0 / 3.0 * U_BF16 * U_BF16 * b->Q[i] + acc * U_FP32 * b->S[i] * b->S[i];
        if (b->ref_r) {
            double er = got[i] - b->ref_r[i];
            er2 += er * er;
            wantr2 += acc * U_FP32 * b->S_r[i] * b->S_r[i];
        }
    }
    if (!(e2 <= 4 * want2 + 1e-60)) {
        snprintf(why, cap, "sum of squared errors %.4g > 4 x its expectation %.4g (ratio %.3g)", e2, want2,
                 want2 > 0 ? e2 / want2 : INFINITY);
        return false;
    }
    if (b->ref_r && !(er2 <= 4 * wantr2 + 1e-60)) {
        snprintf(why, cap, "against the rounded operands' reference: sum of squared errors %.4g > %.4g: "
                 "the products are not of bf16 operands", er2, 4 * wantr2);
        return false;
    }
    return true;
}

#define ASSERT_WITHIN(what, got, b)                                                       \
    do {                                                                                  \
        char why_[256];                                                                   \
        if (!within((got), (b), why_, sizeof why_))                                       \
            herd_test_fail(__FILE__, __LINE__, "%s: %s", (what), why_);                   \
    } while (0)

/* ---- rounding ---- */

static void test_rounding(void)
{
    /* near 1 bf16's step is 2^-7: 1 + 2^-8 is a tie (to even: 1), 1 + 3 * 2^-8
     * one too (to even: 1 + 2^-6), 1 + 2^-8 + 2^-20 rounds up */
    const float x[] = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -2.5f, 0.0f, -0.0f,
                       FLT_MAX, -FLT_MAX, INFINITY, 1e-40f /* subnormal */};
    const uint16_t want[] = {0x3f80, 0x3f80, 0x3f82, 0x3f81, 0xc020, 0x0000, 0x8000,
                             0x7f80, 0xff80, 0x7f80, 0x0001};
    uint16_t got[sizeof x / sizeof x[0]];
    herd__to_bf16(x, got, sizeof x / sizeof x[0]);
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        if (got[i] != want[i])
            herd_test_fail(__FILE__, __LINE__, "bf16(%.9g) = 0x%04x, want 0x%04x", (double)x[i], got[i], want[i]);
    float nan = NAN;
    herd__to_bf16(&nan, got, 1);
    ASSERT_TRUE(isnan(herd__bf16_to_f32(got[0])));
    /* a long array (the compiler's vector loop) as one at a time (its scalar
     * remainder): the cases above at every lane, and any bit pattern (NaNs
     * of both signs and payloads, infinities, subnormals) */
    enum { NLANES = 16 * 4 + 5 };
    const size_t nx = sizeof x / sizeof x[0];
    float vx[NLANES];
    uint16_t hv[NLANES], h1;
    for (size_t at = 0; at + nx <= NLANES; at += 3) {
        memset(vx, 0, sizeof vx);
        memcpy(vx + at, x, sizeof x);
        herd__to_bf16(vx, hv, NLANES);
        for (size_t i = 0; i < nx; i++)
            if (hv[at + i] != want[i])
                herd_test_fail(__FILE__, __LINE__, "bf16(%.9g) at %zu = 0x%04x, want 0x%04x", (double)x[i], at + i,
                               hv[at + i], want[i]);
    }
    herd_rng br;
    herd_rng_seed(&br, 11, 0);
    for (int rep = 0; rep < 2000; rep++) {
        for (size_t i = 0; i < NLANES; i++) {
            uint32_t u = (uint32_t)herd_rng_below(&br, 1u << 16) << 16 | (uint32_t)herd_rng_below(&br, 1u << 16);
            if (i % 7 == 0) /* exponent all ones: NaN or infinity */
                u |= 0x7f800000u;
            else if (i % 7 == 1) /* zero exponent: subnormal */
                u &= 0x807fffffu;
            memcpy(&vx[i], &u, sizeof u);
        }
        herd__to_bf16(vx, hv, NLANES);
        for (size_t i = 0; i < NLANES; i++) {
            herd__to_bf16(&vx[i], &h1, 1);
            if (hv[i] != h1) {
                uint32_t u;
                memcpy(&u, &vx[i], sizeof u);
                herd_test_fail(__FILE__, __LINE__, "bf16 of 0x%08x: 0x%04x in a vector, 0x%04x alone", u, hv[i], h1);
            }
        }
    }
    /* relative error <= u over many magnitudes, and round trips are exact */
    herd_rng r;
    herd_rng_seed(&r, 7, 0);
    double worst = 0;
    for (int i = 0; i < 100000; i++) {
        float v = herd_rng_normal(&r) * ldexpf(1.0f, (int)herd_rng_below(&r, 120) - 60);
        uint16_t h, h2;
        herd__to_bf16(&v, &h, 1);
        float back = herd__bf16_to_f32(h);
        herd__to_bf16(&back, &h2, 1);
        ASSERT_EQ_INT(h, h2);
        double rel = fabs((double)back - v) / fabs((double)v);
        worst = rel > worst ? rel : worst;
    }
    if (!(worst <= U_BF16))
        herd_test_fail(__FILE__, __LINE__, "largest relative rounding error %.4g > 2^-8", worst);
    ASSERT_TRUE(worst > 0.9 * U_BF16); /* and it is bf16's, not some finer rounding */
}

/* ---- matrix products ---- */

/* op(X) of a stored rows x cols matrix with leading dimension ld, as a dense
 * double matrix of op's shape. */
static double *op_dense(const float *X, size_t ld, bool trans, size_t rows, size_t cols)
{
    double *d = dalloc(rows * cols);
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++)
            d[i * cols + j] = trans ? X[j * ld + i] : X[i * ld + j];
    return d;
}

/* An fp32 addend (a bias, beta's C) in each variant: never rounded; |c|
 * in the magnitudes, nothing in Q. */
static double addend(double c, int v) { return v == V_SQ ? 0 : v == V_ABS || v == V_RND_ABS ? fabs(c) : c; }

/* The references of C = A B + C0 (C0 may be NULL) from dense A (MxK), B (KxN). */
static void gemm_refs(const double *A, const double *B, const double *C0, size_t M, size_t N, size_t K,
                      double *out[NV])
{
    for (int v = 0; v < NV; v++) {
        double *a = variant(A, M * K, v), *b = variant(B, K * N, v);
        out[v] = dalloc(M * N);
        herd__ref_gemm(M, N, K, a, b, out[v]);
        for (size_t i = 0; C0 && i < M * N; i++)
            out[v][i] += addend(C0[i], v);
        free(a), free(b);
    }
}

static bounds bounds_of(double *const refs[NV], size_t n, size_t K)
{
    return (bounds){refs[V_X], refs[V_ABS], refs[V_SQ], refs[V_RND], refs[V_RND_ABS], n, K};
}

static void gemm_case(herd__dnn *d, herd_rng *r, char ta, char tb, size_t M, size_t N, size_t K, size_t pad,
                      bool beta)
{
    size_t ar = ta == 'N' ? M : K, ac = ta == 'N' ? K : M, br = tb == 'N' ? K : N, bc = tb == 'N' ? N : K;
    size_t lda = ac + pad, ldb = bc + pad, ldc = N + pad;
    double *ad = dalloc(ar * lda), *bd = dalloc(br * ldb), *c0 = dalloc(M * N);
    fill(r, ad, ar * lda, 1.0), fill(r, bd, br * ldb, 0.1), fill(r, c0, M * N, 1.0);
    float *A = falloc(ar * lda), *B = falloc(br * ldb), *C = falloc(M * ldc);
    uint16_t *Ah = calloc(ar * lda, sizeof *Ah), *Bh = calloc(br * ldb, sizeof *Bh);
    ASSERT_TRUE(Ah && Bh);
    for (size_t i = 0; i < ar * lda; i++)
        A[i] = (float)ad[i];
    for (size_t i = 0; i < br * ldb; i++)
        B[i] = (float)bd[i];
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < ldc; j++)
            C[i * ldc + j] = j < N ? (beta ? (float)c0[i * N + j] : NAN) : -7.0f;
    herd__to_bf16(A, Ah, ar * lda);
    herd__to_bf16(B, Bh, br * ldb);
    herd__gemm_bf16(d, ta, tb, M, N, K, Ah, lda, Bh, ldb, beta ? 1.0f : 0.0f, C, ldc);
    double *Ao = op_dense(A, lda, ta == 'T', M, K), *Bo = op_dense(B, ldb, tb == 'T', K, N), *refs[NV];
    gemm_refs(Ao, Bo, beta ? c0 : NULL, M, N, K, refs);
    double *got = dalloc(M * N);
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < ldc; j++) {
            if (j < N)
                got[i * N + j] = C[i * ldc + j];
            else if (C[i * ldc + j] != -7.0f)
                herd_test_fail(__FILE__, __LINE__, "gemm %c%c: C padding (%zu,%zu) overwritten", ta, tb, i, j);
        }
    char what[96];
    snprintf(what, sizeof what, "gemm_bf16 %c%c %zux%zux%zu pad %zu beta %d", ta, tb, M, N, K, pad, beta);
    bounds b = bounds_of(refs, M * N, K);
    ASSERT_WITHIN(what, got, &b);
    for (int i = 0; i < NV; i++)
        free(refs[i]);
    free(ad), free(bd), free(c0), free(A), free(B), free(C), free(Ah), free(Bh), free(Ao), free(Bo), free(got);
}

static void test_gemm_vs_ref(void)
{
    if (no_bf16_here())
        return;
    herd__dnn *d = NULL;
    ASSERT_OK(herd__dnn_create(&d));
    herd_rng r;
    herd_rng_seed(&r, 21, 0);
    const char t[2] = {'N', 'T'};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            gemm_case(d, &r, t[a], t[b], 17, 33, 250, 0, false);
            gemm_case(d, &r, t[a], t[b], 9, 40, 1500, 3, true);
        }
    gemm_case(d, &r, 'N', 'T', 64, 120, 400, 0, true); /* lenet fc1 forward */
    gemm_case(d, &r, 'T', 'N', 120, 400, 64, 0, false); /* its dW */
    gemm_case(d, &r, 'N', 'N', 64, 400, 120, 0, false); /* its din */
    gemm_case(d, &r, 'N', 'N', 64, 400, 120, 0, false); /* again: the cached primitive */
    herd__dnn_free(d);
}

/* The bound is no formality: the product with B transposed (a square one,
 * so the shapes still fit), with one operand left in fp32, or with a
 * single term dropped from each output, fails it. */
static void test_bound_rejects_broken(void)
{
    herd_rng r;
    herd_rng_seed(&r, 5, 0);
    size_t M = 16, K = 64, N = 64;
    double *A = dalloc(M * K), *B = dalloc(K * N), *Bt = dalloc(K * N), *refs[NV];
    fill(&r, A, M * K, 1.0), fill(&r, B, K * N, 1.0);
    for (size_t i = 0; i < K; i++)
        for (size_t j = 0; j < N; j++)
            Bt[j * K + i] = B[i * N + j];
    gemm_refs(A, B, NULL, M, N, K, refs);
    bounds b = bounds_of(refs, M * N, K);
    char why[256];
    /* a right answer passes: the reference on bf16 operands itself */
    ASSERT_TRUE(within(refs[V_RND], &b, why, sizeof why));
    double *bad = dalloc(M * N);
    herd__ref_gemm(M, N, K, A, Bt, bad); /* transposed weight */
    ASSERT_TRUE(!within(bad, &b, why, sizeof why));
    double *rb = variant(B, K * N, V_RND);
    herd__ref_gemm(M, N, K, A, rb, bad); /* A not rounded: an fp32 operand */
    ASSERT_TRUE(!within(bad, &b, why, sizeof why));
    ASSERT_TRUE(strstr(why, "not of bf16") != NULL);
    double *ra = variant(A, M * K, V_RND);
    herd__ref_gemm(M, N, K, ra, rb, bad); /* one term dropped */
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++)
            bad[i * N + j] -= ra[i * K + (i + j) % K] * rb[((i + j) % K) * N + j];
    ASSERT_TRUE(!within(bad, &b, why, sizeof why));
    for (int i = 0; i < NV; i++)
        free(refs[i]);
    free(A), free(B), free(Bt), free(bad), free(rb), free(ra);
}

/* ---- convolutions (herd__conv with .bf16) ---- */

typedef struct cshape {
    size_t N, C, H, W, K, R, stride, pad;
} cshape;

static size_t c_out(const cshape *s, size_t H) { return (H + 2 * s->pad - s->R) / s->stride + 1; }

/* Forward and backward of one convolution in bf16 against the references
 * (each run on the NV variants of its operands). */
static void conv_case(herd__dnn *d, herd_rng *r, const cshape *s)
{
    size_t Ho = c_out(s, s->H), Wo = c_out(s, s->W), hw = s->H * s->W, hwo = Ho * Wo;
    size_t nin = s->N * s->C * hw, nw = s->K * s->C * s->R * s->R, nout = s->N * s->K * hwo;
    double *in = dalloc(nin), *w = dalloc(nw), *b = dalloc(s->K), *dout = dalloc(nout);
    fill(r, in, nin, 1.0), fill(r, w, nw, 0.2), fill(r, b, s->K, 0.5), fill(r, dout, nout, 0.01);
    double *outs[NV], *dins[NV], *dws[NV], *dbs[NV];
    for (int v = 0; v < NV; v++) {
        double *vin = variant(in, nin, v), *vw = variant(w, nw, v), *vd = variant(dout, nout, v);
        double *vb = dalloc(s->K);
        for (size_t k = 0; k < s->K; k++)
            vb[k] = addend(b[k], v);
        outs[v] = dalloc(nout), dins[v] = dalloc(nin), dws[v] = dalloc(nw), dbs[v] = dalloc(s->K);
        herd__ref_conv_forward(vin, vw, vb, outs[v], s->N, s->C, s->H, s->W, s->K, s->R, s->stride, s->pad);
        herd__ref_conv_backward(vin, vw, vd, dins[v], dws[v], dbs[v], s->N, s->C, s->H, s->W, s->K, s->R,
                                s->stride, s->pad);
        free(vin), free(vw), free(vd), free(vb);
    }
    herd__conv_shape cs = {.N = s->N, .C = s->C, .H = s->H, .W = s->W, .K = s->K, .R = s->R, .stride = s->stride,
                           .pad = s->pad, .bias = true, .din = true, .bf16 = true};
    herd__conv *c = NULL;
    ASSERT_OK(herd__conv_create(d, &cs, &c));
    float *fin = falloc(nin), *fw = falloc(nw), *fb = falloc(s->K), *fdout = falloc(nout);
    float *fout = falloc(nout), *fdin = falloc(nin), *fdw = falloc(nw), *fdb = falloc(s->K);
    herd_test_nchw_to_cnhw(in, fin, s->N, s->C, hw);
    herd_test_nchw_to_cnhw(dout, fdout, s->N, s->K, hwo);
    for (size_t i = 0; i < nw; i++)
        fw[i] = (float)w[i];
    for (size_t i = 0; i < s->K; i++)
        fb[i] = (float)b[i];
    herd__conv_forward(c, fin, fw, fb, fout);
    herd__conv_backward(c, fin, fw, fdout, fdin, fdw, fdb);
    double *got_out = dalloc(nout), *got_din = dalloc(nin), *got_dw = dalloc(nw), *got_db = dalloc(s->K);
    herd_test_cnhw_to_nchw(fout, got_out, s->N, s->K, hwo);
    herd_test_cnhw_to_nchw(fdin, got_din, s->N, s->C, hw);
    for (size_t i = 0; i < nw; i++)
        got_dw[i] = fdw[i];
    for (size_t i = 0; i < s->K; i++)
        got_db[i] = fdb[i];
    char what[128];
    size_t K_out = s->C * s->R * s->R, K_din = s->K * s->R * s->R, K_dw = s->N * hwo;
    const struct {
        const char *name;
        double *got, **ref;
        size_t n, K;
    } t[4] = {{"out", got_out, outs, nout, K_out}, {"din", got_din, dins, nin, K_din},
              {"dw", got_dw, dws, nw, K_dw},       {"db", got_db, dbs, s->K, K_dw}};
    for (int i = 0; i < 4; i++) {
        snprintf(what, sizeof what, "conv bf16 N%zu C%zu %zux%zu K%zu R%zu s%zu p%zu (%s) %s", s->N, s->C, s->H,
                 s->W, s->K, s->R, s->stride, s->pad, herd__conv_impl(c), t[i].name);
        bounds bd = bounds_of(t[i].ref, t[i].n, t[i].K);
        ASSERT_WITHIN(what, t[i].got, &bd);
    }
    herd__conv_free(c);
    for (int v = 0; v < NV; v++)
        free(outs[v]), free(dins[v]), free(dws[v]), free(dbs[v]);
    free(in), free(w), free(b), free(dout), free(fin), free(fw), free(fb), free(fdout), free(fout), free(fdin);
    free(fdw), free(fdb), free(got_out), free(got_din), free(got_dw), free(got_db);
}

static void test_conv_vs_ref(void)
{
    if (no_bf16_here())
        return;
    herd__dnn *d = NULL;
    ASSERT_OK(herd__dnn_create(&d));
    herd_rng r;
    herd_rng_seed(&r, 33, 0);
    static const cshape shapes[] = {
        {3, 1, 28, 28, 6, 5, 1, 2},   /* lenet conv1 */
        {3, 6, 14, 14, 16, 5, 1, 0},  /* lenet conv2 */
        {2, 16, 16, 16, 32, 3, 2, 1}, /* resnet20 stage entry, stride 2 */
        {2, 16, 16, 16, 32, 1, 2, 0}, /* its 1x1 projection */
        {2, 32, 8, 8, 32, 3, 1, 1},   /* resnet20 stage */
        {1, 20, 9, 13, 24, 3, 1, 1},  /* odd shapes */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        conv_case(d, &r, &shapes[i]);
    herd__dnn_free(d);
}

/* ---- the model's layers in bf16 ---- */

static herd_model *make_model(const char *name, size_t c, size_t h, size_t w, size_t k, size_t batch,
                              herd_precision p)
{
    herd_model *m = NULL;
    herd_err err = {0};
    if (herd_model_create(name, c, h, w, k, batch, 3, &m, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "create %s: %s", name, err.msg);
    ASSERT_OK(herd_model_set_precision(m, p));
    ASSERT_EQ_INT(herd_model_precision(m), p);
    return m;
}

/* The fully connected layer as the model wires it (out = in W^T + b,
 * dW = dout^T in, db = sum dout), through model.c's products: the "linear"
 * model is that one layer. */
static void test_linear_layer_vs_ref(void)
{
    if (no_bf16_here())
        return;
    size_t N = 16, I = 8 * 8, O = 10;
    herd_model *m = make_model("linear", 1, 8, 8, O, N, HERD_PRECISION_BF16);
    float *x = falloc(N * I), *dl = falloc(N * O);
    int32_t y[16];
    herd_test_random_batch(N, I, O, x, y, 4, 1);
    const float *W = herd_model_params(m), *gW = herd_model_grads(m);
    float *P = herd_model_params(m);
    herd_rng r;
    herd_rng_seed(&r, 8, 0);
    for (size_t i = 0; i < O; i++) /* a bias, so that it is checked too */
        P[O * I + i] = 0.1f * herd_rng_normal(&r);
    herd_model_forward(m, x, N, true);
    herd_model_loss(m, y, N, NULL);
    ASSERT_OK(herd_model_backward(m, N, NULL, NULL));
    /* the output gradient backward used: the loss's, from the same logits */
    const float *z = herd_model_logits(m);
    herd__softmax_xent(z, y, dl, N, O, NULL);
    double *in = dalloc(N * I), *w = dalloc(O * I), *b = dalloc(O), *dout = dalloc(N * O);
    for (size_t i = 0; i < N * I; i++)
        in[i] = x[i];
    for (size_t i = 0; i < O * I; i++)
        w[i] = W[i];
    for (size_t i = 0; i < O; i++)
        b[i] = W[O * I + i];
    for (size_t i = 0; i < N * O; i++)
        dout[i] = dl[i];
    double *outs[NV], *dws[NV], *dbs[NV];
    for (int v = 0; v < NV; v++) {
        double *vin = variant(in, N * I, v), *vw = variant(w, O * I, v), *vd = variant(dout, N * O, v);
        double *vb = dalloc(O);
        for (size_t k = 0; k < O; k++)
            vb[k] = addend(b[k], v);
        outs[v] = dalloc(N * O), dws[v] = dalloc(O * I), dbs[v] = dalloc(O);
        herd__ref_linear_forward(vin, vw, vb, outs[v], N, I, O);
        herd__ref_linear_backward(vin, vw, vd, NULL, dws[v], dbs[v], N, I, O);
        free(vin), free(vw), free(vd), free(vb);
    }
    /* db is an fp32 sum of the fp32 dout: nothing was rounded, (3) holds
     * against the rounded dout's sum only within its own rounding, so it
     * is checked against the reference itself */
    double *got = dalloc(O * I);
    for (size_t i = 0; i < N * O; i++)
        got[i] = z[i];
    bounds bo = bounds_of(outs, N * O, I);
    ASSERT_WITHIN("linear layer out", got, &bo);
    for (size_t i = 0; i < O * I; i++)
        got[i] = gW[i];
    bounds bw = bounds_of(dws, O * I, N);
    ASSERT_WITHIN("linear layer dW", got, &bw);
    for (size_t i = 0; i < O; i++)
        ASSERT_NEAR(gW[O * I + i], dbs[V_X][i], 1e-7, 1e-5);
    for (int v = 0; v < NV; v++)
        free(outs[v]), free(dws[v]), free(dbs[v]);
    free(x), free(dl), free(in), free(w), free(b), free(dout), free(got);
    herd_model_free(m);
}

/* A model's logits and gradients, one training step on a fixed batch. */
static void step(herd_model *m, const float *x, const int32_t *y, size_t n, float *logits, size_t k, float *g)
{
    herd_model_forward(m, x, n, true);
    memcpy(logits, herd_model_logits(m), n * k * sizeof *logits);
    herd_model_loss(m, y, n, NULL);
    ASSERT_OK(herd_model_backward(m, n, NULL, NULL));
    memcpy(g, herd_model_grads(m), herd_model_nparams(m) * sizeof *g);
}

static double rel_l2(const float *a, const float *b, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        e += d * d, s += (double)b[i] * b[i];
    }
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

static double zero_frac(const float *g, size_t n)
{
    size_t z = 0;
    for (size_t i = 0; i < n; i++)
        z += g[i] == 0.0f;
    return n ? (double)z / (double)n : 0;
}

typedef struct model_case {
    const char *name;
    size_t c, h, w, k, batch;
    bool im2col;
    double tol_all, tol_tensor; /* relative L2: the whole gradient, its worst tensor */
} model_case;

/* Whole models, bf16 against fp32 from the same weights and batch (random
 * images and labels, at initialisation), in relative L2 error: the logits
 * within 5%, the whole gradient within 5% and each parameter tensor's
 * within 20% (resnet20: 50% and 80%, below), and as many exactly-zero
 * gradients as fp32 within half a point.
 *
 * One product errs by about u sqrt(2/3) = 0.3% of its result (the logits:
 * 0.4-0.6%, measured). Backward compounds it layer by layer, and more: a
 * forward that moved by 0.3% flips some ReLUs near 0 and some max-pool
 * windows between near-equal values, which reroutes a whole gradient
 * entry. Measured: the last layer's tensors 0.2-0.5%, the first layers'
 * 4-9% (lenet's conv1 weight 8.7%), the whole gradient 2.7-3.1%. A broken
 * layer (a transposed weight, a dropped operand) moves its tensors by
 * 100% or more (two unrelated vectors of one norm: 141%). resnet20 at
 * initialisation: 26% for the whole gradient, 48-50% for its worst tensor,
 * the same through oneDNN's convolutions and through im2col + matmul (two
 * separate bf16 paths), so it is the model's: each batch norm's backward
 * (g - mean(g) - xhat mean(g xhat)) cancels to a small difference of its
 * terms, which magnifies their relative error, twenty layers over. The zeros: ReLU and max pooling make exact zeros at both
 * precisions (lenet: 43.7% of its gradients at batch 16); bf16 keeps
 * fp32's exponent (smallest normal 1.2e-38, gradients here are 1e-9 and
 * up), so none underflow and no loss scaling is needed: the fractions
 * differ by the flips alone (lenet: 43.85% vs 43.68%). */
static void near_fp32(const model_case *mc)
{
    herd_model *m32 = make_model(mc->name, mc->c, mc->h, mc->w, mc->k, mc->batch, HERD_PRECISION_FP32);
    herd_model *m16 = make_model(mc->name, mc->c, mc->h, mc->w, mc->k, mc->batch, HERD_PRECISION_BF16);
    herd_model_set_conv_im2col(m32, mc->im2col);
    herd_model_set_conv_im2col(m16, mc->im2col);
    size_t n = mc->batch, dim = mc->c * mc->h * mc->w, np = herd_model_nparams(m32);
    float *x = falloc(n * dim), *z32 = falloc(n * mc->k), *z16 = falloc(n * mc->k);
    float *g32 = falloc(np), *g16 = falloc(np);
    int32_t *y = calloc(n, sizeof *y);
    herd_test_random_batch(n, dim, mc->k, x, y, 6, 1);
    step(m32, x, y, n, z32, mc->k, g32);
    step(m16, x, y, n, z16, mc->k, g16);
    double ez = rel_l2(z16, z32, n * mc->k), eg = rel_l2(g16, g32, np);
    if (!(ez <= 0.05 && eg <= mc->tol_all))
        herd_test_fail(__FILE__, __LINE__, "%s%s: logits off fp32's by %.4g (> 0.05?), gradient by %.4g (> %.3g?)",
                       mc->name, mc->im2col ? " (im2col)" : "", ez, eg, mc->tol_all);
    herd_param_group gr[128];
    size_t ng = herd_model_param_groups(m32, gr, 128), worst_at = 0;
    ASSERT_TRUE(ng <= 128);
    double worst = 0;
    for (size_t i = 0; i < ng; i++) {
        double e = rel_l2(g16 + gr[i].off, g32 + gr[i].off, gr[i].len);
        if (!(e <= worst))
            worst = e, worst_at = i;
    }
    double z16f = zero_frac(g16, np), z32f = zero_frac(g32, np);
    fprintf(stderr, "  %s%s: relative L2 off fp32: logits %.2e, gradient %.2e, worst tensor %.2e (#%zu of %zu); "
            "zero gradients bf16 %.3f%% fp32 %.3f%%\n", mc->name, mc->im2col ? " (im2col)" : "", ez, eg, worst,
            worst_at, ng, 100 * z16f, 100 * z32f);
    if (!(worst <= mc->tol_tensor))
        herd_test_fail(__FILE__, __LINE__, "%s%s: gradient tensor %zu off fp32's by %.4g (relative L2) > %.3g",
                       mc->name, mc->im2col ? " (im2col)" : "", worst_at, worst, mc->tol_tensor);
    if (!(fabs(z16f - z32f) <= 5e-3))
        herd_test_fail(__FILE__, __LINE__, "%s: %.4f%% of bf16 gradients are 0, fp32 %.4f%%", mc->name,
                       100 * z16f, 100 * z32f);
    free(x), free(z32), free(z16), free(g32), free(g16), free(y);
    herd_model_free(m32);
    herd_model_free(m16);
}

static void test_models_near_fp32(void)
{
    if (no_bf16_here())
        return;
    near_fp32(&(model_case){"mlp", 1, 28, 28, 10, 16, false, 0.05, 0.2});
    near_fp32(&(model_case){"lenet", 1, 28, 28, 10, 16, false, 0.05, 0.2});
    near_fp32(&(model_case){"lenet", 1, 28, 28, 10, 16, true, 0.05, 0.2});
    near_fp32(&(model_case){"lenet", 3, 20, 20, 10, 4, false, 0.05, 0.2});
    near_fp32(&(model_case){"cnn", 1, 28, 28, 10, 8, false, 0.05, 0.2});
    near_fp32(&(model_case){"resnet20", 1, 16, 16, 10, 8, false, 0.5, 0.8});
    near_fp32(&(model_case){"resnet20", 1, 16, 16, 10, 8, true, 0.5, 0.8});
}

/* fp32 after bf16 is fp32 again, bit for bit; bf16 is deterministic. */
static void test_precision_switch(void)
{
    if (no_bf16_here())
        return;
    const model_case mc = {"lenet", 1, 28, 28, 10, 8, false, 0, 0};
    herd_model *a = make_model(mc.name, mc.c, mc.h, mc.w, mc.k, mc.batch, HERD_PRECISION_FP32);
    herd_model *b = make_model(mc.name, mc.c, mc.h, mc.w, mc.k, mc.batch, HERD_PRECISION_BF16);
    size_t n = mc.batch, dim = mc.h * mc.w, np = herd_model_nparams(a);
    float *x = falloc(n * dim), *za = falloc(n * 10), *zb = falloc(n * 10), *ga = falloc(np), *gb = falloc(np);
    int32_t y[8];
    herd_test_random_batch(n, dim, 10, x, y, 2, 1);
    step(b, x, y, n, za, 10, ga);
    step(b, x, y, n, zb, 10, gb);
    ASSERT_TRUE(!memcmp(za, zb, n * 10 * sizeof *za) && !memcmp(ga, gb, np * sizeof *ga));
    ASSERT_OK(herd_model_set_precision(b, HERD_PRECISION_FP32));
    step(a, x, y, n, za, 10, ga);
    step(b, x, y, n, zb, 10, gb);
    ASSERT_TRUE(!memcmp(za, zb, n * 10 * sizeof *za) && !memcmp(ga, gb, np * sizeof *ga));
    herd_precision p;
    ASSERT_TRUE(herd_precision_parse("fp16", &p) == HERD_EINVAL && herd_precision_parse("bf16", &p) == HERD_OK);
    ASSERT_TRUE(p == HERD_PRECISION_BF16 && !strcmp(herd_precision_name(p), "bf16"));
    free(x), free(za), free(zb), free(ga), free(gb);
    herd_model_free(a);
    herd_model_free(b);
}

/* ---- the flag ---- */

static void test_cli_precision(void)
{
    herd_test_cmd o;
    const char *base = "synthetic:1x12x12:4";
    HERD_TEST_RUN(&o, "train", "--data", base, "--model", "mlp", "--epochs", "1", "--train-limit", "256",
                  "--test-limit", "64", "--precision", "fp16", "--json");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_TRUE(strstr(o.err, "--precision") && strstr(o.err, "fp32 or bf16"));
    for (int bf = 0; bf < 2; bf++) {
        HERD_TEST_RUN(&o, "train", "--data", base, "--model", "lenet", "--epochs", "1", "--train-limit", "256",
                      "--test-limit", "64", "--precision", bf ? "bf16" : "fp32", "--json");
        if (bf && herd_nn_bf16_support() == HERD_BF16_NONE) { /* this CPU: refused, as below */
            ASSERT_EQ_INT(o.code, 2);
            ASSERT_TRUE(strstr(o.err, "needs a CPU with AVX-512") != NULL);
            continue;
        }
        ASSERT_EQ_INT(o.code, 0);
        ASSERT_TRUE(strstr(o.out, bf ? "\"precision\":\"bf16\"" : "\"precision\":\"fp32\"") != NULL);
        /* the warning says so where the CPU emulates bf16, and only there */
        bool emulated = bf && herd_nn_bf16_support() == HERD_BF16_EMULATED;
        ASSERT_EQ_INT(strstr(o.err, "emulates bf16") != NULL, emulated);
    }
    /* no fp32 run mentions it: the default */
    HERD_TEST_RUN(&o, "train", "--data", base, "--model", "mlp", "--epochs", "1", "--train-limit", "256",
                  "--test-limit", "64", "--json");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_TRUE(strstr(o.out, "\"precision\":\"fp32\"") != NULL);
    /* a CPU without AVX-512 (oneDNN told to use AVX2 at most): refused */
    setenv("DNNL_MAX_CPU_ISA", "AVX2", 1);
    HERD_TEST_RUN(&o, "train", "--data", base, "--model", "mlp", "--epochs", "1", "--train-limit", "256",
                  "--test-limit", "64", "--precision", "bf16", "--json");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_TRUE(strstr(o.err, "needs a CPU with AVX-512") != NULL);
    ASSERT_TRUE(strstr(o.out, "\"status\":\"error\"") != NULL);
    HERD_TEST_RUN(&o, "train", "--data", base, "--model", "mlp", "--epochs", "1", "--train-limit", "256",
                  "--test-limit", "64", "--json");
    ASSERT_EQ_INT(o.code, 0); /* fp32 runs there */
    unsetenv("DNNL_MAX_CPU_ISA");
}

const herd_test herd_tests_bf16[] = {
    {"bf16_rounding", test_rounding, 30, HERD_TEST_ONE_THREAD},
    {"bf16_gemm_vs_ref", test_gemm_vs_ref, 60},
    {"bf16_bound_rejects_broken", test_bound_rejects_broken, 30, HERD_TEST_ONE_THREAD},
    {"bf16_conv_vs_ref", test_conv_vs_ref, 60},
    {"bf16_linear_layer_vs_ref", test_linear_layer_vs_ref, 30, HERD_TEST_ONE_THREAD},
    {"bf16_models_near_fp32", test_models_near_fp32, 90},
    {"bf16_precision_switch", test_precision_switch, 30},
    {"bf16_cli_precision", test_cli_precision, 60},
    HERD_TEST_END,
};
