/* Tests of src/nn's fast float kernels (kernels.h), against the
 * double-precision references of src/nn/ref.c (themselves checked by finite
 * differences in tests/test_ref.c).
 *
 * Inputs are drawn as floats and the reference sees exactly those values (as
 * doubles), so a difference is the kernel's own rounding. Sums are compared
 * with a tolerance relative to the sum of |terms| (the reference run on
 * absolute values): float rounding stays within a few FLT_EPSILON of that,
 * while a wrong index or a dropped term moves a result by a whole term.
 * Outputs that must be overwritten are pre-filled with NaN; outputs that must
 * be accumulated into are pre-filled with random values. */
#include <float.h>
#include <stdbool.h>
#include <stdint.h>

#include "fixtures.h"
#include "harness.h"
#include "herd/herd_rng.h"
#include "nn/kernels.h"
#include "nn/ref.h"

/* Relative to the sum of |terms|. Random-sign float sums err by about one
 * FLT_EPSILON of that sum whatever their length (the worst case, K *
 * FLT_EPSILON, needs every rounding error to line up); over 1000 seeds the
 * largest error seen here was 3.5 epsilons. 32 epsilons (4e-6) leaves a wide
 * margin and is still 100x below the effect of one missing or misplaced
 * term in the longest sums here (~1600 terms). */
#define SUM_REL (32.0 * FLT_EPSILON)

static float *alloc_f(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    ASSERT_TRUE(p != NULL);
    return p;
}

static double *alloc_d(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof *p);
    ASSERT_TRUE(p != NULL);
    return p;
}

static void fill_nan_f(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
}

/* Doubles that are exactly floats: shift + scale * N(0,1), rounded to float. */
static void fill_normal(herd_rng *r, double *x, size_t n, double scale, double shift)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (double)(float)(shift + scale * (double)herd_rng_normal(r));
}

/* Distinct values (a shuffled grid of 1/64 steps centred on 0, exact in
 * float), so every pooling window has a single maximum. */
static void fill_distinct(herd_rng *r, double *x, size_t n)
{
    size_t *idx = calloc(n, sizeof *idx);
    ASSERT_TRUE(idx != NULL);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    herd_rng_shuffle(r, idx, n);
    for (size_t i = 0; i < n; i++)
        x[i] = ((double)idx[i] - (double)(n / 2)) / 64.0;
    free(idx);
}

static void to_float(const double *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = (float)x[i];
}

static void abs_d(const double *x, double *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = fabs(x[i]);
}

/* |got[i] - want[i]| <= rel * mag[i] + atol, mag = |want| when NULL. */
#define CHECK_CLOSE(what, got, want, mag, rel, atol, n) \
    check_close(__LINE__, what, got, want, mag, rel, atol, n)

static void check_close(int line, const char *what, const float *got, const double *want,
                        const double *mag, double rel, double atol, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double m = mag ? mag[i] : fabs(want[i]);
        double tol = rel * m + atol;
        if (!(fabs((double)got[i] - want[i]) <= tol))
            herd_test_fail(__FILE__, line, "%s[%zu]: got %.9g, want %.9g (diff %.3g > tol %.3g)",
                           what, i, (double)got[i], want[i], fabs((double)got[i] - want[i]), tol);
    }
}

static void check_same_f(int line, const char *what, const float *got, const float *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            herd_test_fail(__FILE__, line, "%s[%zu]: got %.9g, want %.9g (bitwise)", what, i,
                           (double)got[i], (double)want[i]);
}
#define CHECK_SAME(what, got, want, n) check_same_f(__LINE__, what, got, want, n)

/* ---- sgemm ---- */

/* One herd__sgemm call with op(A) (M,K), op(B) (K,N), each stored with its
 * leading dimension `pad` above the minimum. A and B padding is NaN (reading
 * it poisons the result), C padding a sentinel that must survive. */
static void sgemm_case(herd_rng *rng, char ta, char tb, size_t M, size_t N, size_t K, size_t pad,
                       float alpha, float beta)
{
    size_t arows = ta == 'N' ? M : K, lda = (ta == 'N' ? K : M) + pad;
    size_t brows = tb == 'N' ? K : N, ldb = (tb == 'N' ? N : K) + pad;
    size_t ldc = N + pad;
    float *A = alloc_f(arows * lda), *B = alloc_f(brows * ldb), *C = alloc_f(M * ldc);
    double *opA = alloc_d(M * K), *opB = alloc_d(K * N), *C0 = alloc_d(M * N);
    double *P = alloc_d(M * N), *absA = alloc_d(M * K), *absB = alloc_d(K * N);
    double *want = alloc_d(M * N), *mag = alloc_d(M * N);
    float *got = alloc_f(M * N);

    fill_nan_f(A, arows * lda);
    fill_nan_f(B, brows * ldb);
    fill_normal(rng, opA, M * K, 1.0, 0.0);
    fill_normal(rng, opB, K * N, 1.0, 0.0);
    for (size_t i = 0; i < M; i++)
        for (size_t k = 0; k < K; k++)
            A[ta == 'N' ? i * lda + k : k * lda + i] = (float)opA[i * K + k];
    for (size_t k = 0; k < K; k++)
        for (size_t j = 0; j < N; j++)
            B[tb == 'N' ? k * ldb + j : j * ldb + k] = (float)opB[k * N + j];
    if (beta != 0.0f)
        fill_normal(rng, C0, M * N, 1.0, 0.0);
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < ldc; j++)
            C[i * ldc + j] = j >= N ? -777.0f : beta != 0.0f ? (float)C0[i * N + j] : NAN;

    herd__ref_gemm(M, N, K, opA, opB, P);
    for (size_t i = 0; i < M * N; i++)
        want[i] = alpha * P[i] + beta * C0[i];
    abs_d(opA, absA, M * K);
    abs_d(opB, absB, K * N);
    herd__ref_gemm(M, N, K, absA, absB, mag);
    for (size_t i = 0; i < M * N; i++)
        mag[i] = fabs(alpha) * mag[i] + fabs(beta) * fabs(C0[i]);

    herd__sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);

    char what[96];
    snprintf(what, sizeof what, "sgemm %c%c M=%zu N=%zu K=%zu pad=%zu alpha=%g beta=%g", ta, tb, M,
             N, K, pad, (double)alpha, (double)beta);
    for (size_t i = 0; i < M; i++) {
        memcpy(got + i * N, C + i * ldc, N * sizeof(float));
        for (size_t j = N; j < ldc; j++)
            if (C[i * ldc + j] != -777.0f)
                herd_test_fail(__FILE__, __LINE__, "%s: C padding (%zu,%zu) overwritten with %g",
                               what, i, j, (double)C[i * ldc + j]);
    }
    CHECK_CLOSE(what, got, want, mag, SUM_REL, 1e-30, M * N);

    free(A), free(B), free(C), free(opA), free(opB), free(C0), free(P);
    free(absA), free(absB), free(want), free(mag), free(got);
}

static void test_sgemm_vs_ref(void)
{
    // M, N, K: degenerate, odd, tall, wide, and beyond one vector/block
    const size_t shapes[][3] = {
        {1, 1, 1}, {1, 7, 3}, {5, 1, 9}, {3, 4, 1}, {17, 13, 29}, {64, 33, 70}, {2, 129, 5},
        {31, 8, 127}, {150, 6, 25},
    };
    const float ab[][2] = {{1, 0}, {1, 1}, {-0.5f, 2}, {0.75f, 0}};
    const char tr[2] = {'N', 'T'};
    herd_rng rng;
    herd_rng_seed(&rng, 21, 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (size_t t = 0; t < 4; t++)
            for (size_t a = 0; a < sizeof ab / sizeof ab[0]; a++)
                for (size_t pad = 0; pad <= 3; pad += 3)
                    sgemm_case(&rng, tr[t / 2], tr[t % 2], shapes[s][0], shapes[s][1],
                               shapes[s][2], pad, ab[a][0], ab[a][1]);
}

/* beta = 1 accumulates: two calls over halves of K equal one call over K. */
static void test_sgemm_beta_one_accumulates(void)
{
    const size_t M = 9, N = 11, K = 14, H = K / 2;
    herd_rng rng;
    herd_rng_seed(&rng, 22, 0);
    double *Ad = alloc_d(M * K), *Bd = alloc_d(K * N), *P = alloc_d(M * N);
    float *A = alloc_f(M * K), *B = alloc_f(K * N), *C = alloc_f(M * N);
    fill_normal(&rng, Ad, M * K, 1.0, 0.0);
    fill_normal(&rng, Bd, K * N, 1.0, 0.0);
    to_float(Ad, A, M * K);
    to_float(Bd, B, K * N);
    herd__ref_gemm(M, N, K, Ad, Bd, P);
    fill_nan_f(C, M * N);
    herd__sgemm('N', 'N', M, N, H, 1.0f, A, K, B, N, 0.0f, C, N);
    herd__sgemm('N', 'N', M, N, K - H, 1.0f, A + H, K, B + H * N, N, 1.0f, C, N);
    CHECK_CLOSE("sgemm two halves", C, P, NULL, 1e-5, 1e-5, M * N);
    free(Ad), free(Bd), free(P), free(A), free(B), free(C);
}

/* ---- convolution, done as the model does it ---- */

typedef struct conv_shape {
    size_t N, C, H, W, K, R, stride, pad;
} conv_shape;

static const conv_shape conv_shapes[] = {
    // N, C, H, W, K, R, stride, pad
    {2, 3, 5, 7, 4, 3, 1, 1},    // the common case, H != W
    {2, 2, 7, 6, 3, 3, 2, 1},    // stride 2
    {1, 3, 6, 9, 2, 5, 1, 2},    // kernel 5, pad 2
    {2, 2, 8, 7, 2, 5, 2, 2},    // kernel 5, stride 2, pad 2
    {2, 3, 9, 11, 2, 5, 2, 0},   // kernel 5, stride 2, no pad
    {3, 1, 6, 5, 2, 3, 2, 0},    // stride 2 leaves the last row/column unused
    {2, 3, 5, 4, 3, 1, 1, 0},    // 1x1
    {2, 2, 6, 5, 3, 1, 2, 0},    // 1x1 stride 2
    {1, 2, 4, 3, 2, 3, 1, 2},    // pad 2 with a 3x3: border outputs see only padding
    {2, 2, 9, 16, 3, 3, 1, 1},   // a 16-wide row (a specialised copy length)
    {3, 1, 28, 28, 6, 5, 1, 2},  // LeNet conv1
    {3, 6, 14, 14, 16, 5, 1, 0}, // LeNet conv2
    {2, 1, 4, 3, 9, 3, 1, 2},    // one input channel: padding only at the border, 9 outputs (two lane blocks)
    {2, 1, 8, 7, 3, 5, 2, 2},    // one input channel, kernel 5, stride 2
};

static size_t conv_ho(const conv_shape *s) { return (s->H + 2 * s->pad - s->R) / s->stride + 1; }
static size_t conv_wo(const conv_shape *s) { return (s->W + 2 * s->pad - s->R) / s->stride + 1; }

/* The tensors of one convolution, NCHW doubles for the reference and
 * CNHW / (K, C*R*R) floats for the kernels. */
typedef struct conv_data {
    conv_shape s;
    size_t nin, nw, nout, rows, cols; // rows = C*R*R, cols = N*Ho*Wo
    double *in, *w, *b, *dout;        // reference inputs
    float *fin, *fw, *fb, *fdout;     // the same values, kernel layouts
    float *col;                       // im2col(fin)
} conv_data;

static void conv_data_init(conv_data *d, const conv_shape *s, herd_rng *rng)
{
    d->s = *s;
    size_t plane_o = conv_ho(s) * conv_wo(s);
    d->nin = s->N * s->C * s->H * s->W;
    d->nw = s->K * s->C * s->R * s->R;
    d->nout = s->N * s->K * plane_o;
    d->rows = s->C * s->R * s->R;
    d->cols = s->N * plane_o;
    d->in = alloc_d(d->nin), d->w = alloc_d(d->nw), d->b = alloc_d(s->K), d->dout = alloc_d(d->nout);
    d->fin = alloc_f(d->nin), d->fw = alloc_f(d->nw), d->fb = alloc_f(s->K);
    d->fdout = alloc_f(d->nout), d->col = alloc_f(d->rows * d->cols);
    fill_normal(rng, d->in, d->nin, 1.0, 0.0);
    fill_normal(rng, d->w, d->nw, 1.0, 0.0);
    fill_normal(rng, d->b, s->K, 1.0, 0.0);
    fill_normal(rng, d->dout, d->nout, 1.0, 0.0);
    herd_test_nchw_to_cnhw(d->in, d->fin, s->N, s->C, s->H * s->W);
    to_float(d->w, d->fw, d->nw); // (K,C,R,R) is already (K, C*R*R), row (c*R+i)*R+j
    to_float(d->b, d->fb, s->K);
    herd_test_nchw_to_cnhw(d->dout, d->fdout, s->N, s->K, plane_o);
    fill_nan_f(d->col, d->rows * d->cols);
    herd__im2col(d->fin, s->C, s->N, s->H, s->W, s->R, s->stride, s->pad, d->col);
}

static void conv_data_free(conv_data *d)
{
    free(d->in), free(d->w), free(d->b), free(d->dout);
    free(d->fin), free(d->fw), free(d->fb), free(d->fdout), free(d->col);
}

static void conv_name(char *buf, size_t len, const char *what, const conv_shape *s)
{
    snprintf(buf, len, "%s N=%zu C=%zu H=%zu W=%zu K=%zu R=%zu s=%zu p=%zu", what, s->N, s->C, s->H,
             s->W, s->K, s->R, s->stride, s->pad);
}

static void test_conv_forward_vs_ref(void)
{
    herd_rng rng;
    herd_rng_seed(&rng, 23, 0);
    for (size_t t = 0; t < sizeof conv_shapes / sizeof conv_shapes[0]; t++) {
        const conv_shape *s = &conv_shapes[t];
        conv_data d;
        conv_data_init(&d, s, &rng);
        size_t plane_o = conv_ho(s) * conv_wo(s);

        // out (K, N*Ho*Wo) = W (K, C*R*R) @ col, then + b per channel
        float *out = alloc_f(d.nout);
        fill_nan_f(out, d.nout);
        herd__sgemm('N', 'N', s->K, d.cols, d.rows, 1.0f, d.fw, d.rows, d.col, d.cols, 0.0f, out,
                    d.cols);
        for (size_t k = 0; k < s->K; k++) {
            float *row = out + k * d.cols;
            for (size_t i = 0; i < d.cols; i++)
                row[i] += d.fb[k];
        }

        double *want = alloc_d(d.nout), *mag = alloc_d(d.nout), *got = alloc_d(d.nout);
        double *ain = alloc_d(d.nin), *aw = alloc_d(d.nw), *ab = alloc_d(s->K);
        herd__ref_conv_forward(d.in, d.w, d.b, want, s->N, s->C, s->H, s->W, s->K, s->R,
                               s->stride, s->pad);
        abs_d(d.in, ain, d.nin), abs_d(d.w, aw, d.nw), abs_d(d.b, ab, s->K);
        herd__ref_conv_forward(ain, aw, ab, mag, s->N, s->C, s->H, s->W, s->K, s->R, s->stride,
                               s->pad);
        herd_test_cnhw_to_nchw(out, got, s->N, s->K, plane_o);
        float *gotf = alloc_f(d.nout);
        to_float(got, gotf, d.nout);
        char what[128];
        conv_name(what, sizeof what, "conv out", s);
        CHECK_CLOSE(what, gotf, want, mag, SUM_REL, 1e-30, d.nout);

        free(out), free(want), free(mag), free(got), free(ain), free(aw), free(ab), free(gotf);
        conv_data_free(&d);
    }
}

static void test_conv_backward_vs_ref(void)
{
    herd_rng rng;
    herd_rng_seed(&rng, 24, 0);
    for (size_t t = 0; t < sizeof conv_shapes / sizeof conv_shapes[0]; t++) {
        const conv_shape *s = &conv_shapes[t];
        conv_data d;
        conv_data_init(&d, s, &rng);
        size_t HW = s->H * s->W;

        // dW = dout @ col^T, db = row sums of dout, dcol = W^T @ dout, din = col2im(dcol)
        float *dw = alloc_f(d.nw), *db = alloc_f(s->K), *dcol = alloc_f(d.rows * d.cols);
        float *din = alloc_f(d.nin);
        fill_nan_f(dw, d.nw);
        fill_nan_f(dcol, d.rows * d.cols);
        herd__sgemm('N', 'T', s->K, d.rows, d.cols, 1.0f, d.fdout, d.cols, d.col, d.cols, 0.0f, dw,
                    d.rows);
        for (size_t k = 0; k < s->K; k++) {
            double sum = 0;
            for (size_t i = 0; i < d.cols; i++)
                sum += d.fdout[k * d.cols + i];
            db[k] = (float)sum;
        }
        herd__sgemm('T', 'N', d.rows, d.cols, s->K, 1.0f, d.fw, d.rows, d.fdout, d.cols, 0.0f,
                    dcol, d.cols);
        herd__col2im_add(dcol, s->C, s->N, s->H, s->W, s->R, s->stride, s->pad, din); // din is 0

        double *rdin = alloc_d(d.nin), *rdw = alloc_d(d.nw), *rdb = alloc_d(s->K);
        double *mdin = alloc_d(d.nin), *mdw = alloc_d(d.nw), *mdb = alloc_d(s->K);
        double *ain = alloc_d(d.nin), *aw = alloc_d(d.nw), *adout = alloc_d(d.nout);
        herd__ref_conv_backward(d.in, d.w, d.dout, rdin, rdw, rdb, s->N, s->C, s->H, s->W, s->K,
                                s->R, s->stride, s->pad);
        abs_d(d.in, ain, d.nin), abs_d(d.w, aw, d.nw), abs_d(d.dout, adout, d.nout);
        herd__ref_conv_backward(ain, aw, adout, mdin, mdw, mdb, s->N, s->C, s->H, s->W, s->K,
                                s->R, s->stride, s->pad);

        double *gd = alloc_d(d.nin);
        float *gdf = alloc_f(d.nin);
        herd_test_cnhw_to_nchw(din, gd, s->N, s->C, HW);
        to_float(gd, gdf, d.nin);
        char what[128];
        conv_name(what, sizeof what, "conv din", s);
        CHECK_CLOSE(what, gdf, rdin, mdin, SUM_REL, 1e-30, d.nin);
        conv_name(what, sizeof what, "conv dw", s);
        CHECK_CLOSE(what, dw, rdw, mdw, SUM_REL, 1e-30, d.nw);
        conv_name(what, sizeof what, "conv db", s);
        CHECK_CLOSE(what, db, rdb, mdb, SUM_REL, 1e-30, s->K);

        // col2im adds: scattering the same dcol onto a pre-filled din gives
        // prefill + din
        float *pre = alloc_f(d.nin);
        double *prev = alloc_d(d.nin), *want = alloc_d(d.nin), *mag = alloc_d(d.nin);
        fill_normal(&rng, prev, d.nin, 1.0, 0.0);
        herd_test_nchw_to_cnhw(prev, pre, s->N, s->C, HW);
        herd__col2im_add(dcol, s->C, s->N, s->H, s->W, s->R, s->stride, s->pad, pre);
        for (size_t i = 0; i < d.nin; i++)
            want[i] = prev[i] + rdin[i], mag[i] = fabs(prev[i]) + mdin[i];
        herd_test_cnhw_to_nchw(pre, gd, s->N, s->C, HW);
        to_float(gd, gdf, d.nin);
        conv_name(what, sizeof what, "conv col2im onto prefilled din", s);
        CHECK_CLOSE(what, gdf, want, mag, SUM_REL, 1e-30, d.nin);

        free(dw), free(db), free(dcol), free(din), free(rdin), free(rdw), free(rdb);
        free(mdin), free(mdw), free(mdb), free(ain), free(aw), free(adout), free(gd), free(gdf);
        free(pre), free(prev), free(want), free(mag);
        conv_data_free(&d);
    }
}

/* The chunked forms, over images [n0, n0+nb), are slices of the whole:
 * im2col_chunk gives columns [n0*Ho*Wo, (n0+nb)*Ho*Wo) of every row, and
 * col2im_add_chunk of every chunk in turn gives col2im_add of the whole,
 * bit for bit (each image receives the same additions in the same order). */
static void test_im2col_chunks_match_whole(void)
{
    herd_rng rng;
    herd_rng_seed(&rng, 25, 0);
    for (size_t t = 0; t < sizeof conv_shapes / sizeof conv_shapes[0]; t++) {
        const conv_shape *s = &conv_shapes[t];
        conv_data d;
        conv_data_init(&d, s, &rng);
        size_t plane_o = conv_ho(s) * conv_wo(s);
        float *chunk = alloc_f(d.rows * d.cols), *whole = alloc_f(d.nin), *parts = alloc_f(d.nin);
        float *dcol = alloc_f(d.rows * d.cols);
        double *dcold = alloc_d(d.rows * d.cols);
        fill_normal(&rng, dcold, d.rows * d.cols, 1.0, 0.0);
        to_float(dcold, dcol, d.rows * d.cols);
        herd__col2im_add(dcol, s->C, s->N, s->H, s->W, s->R, s->stride, s->pad, whole);

        char what[128];
        for (size_t nb = 1; nb <= s->N; nb++) {
            memset(parts, 0, d.nin * sizeof(float));
            for (size_t n0 = 0; n0 < s->N; n0 += nb) {
                size_t b = s->N - n0 < nb ? s->N - n0 : nb, w = b * plane_o;
                fill_nan_f(chunk, d.rows * w);
                herd__im2col_chunk(d.fin, s->C, s->N, n0, b, s->H, s->W, s->R, s->stride, s->pad,
                                   chunk);
                conv_name(what, sizeof what, "im2col_chunk", s);
                for (size_t r = 0; r < d.rows; r++)
                    check_same_f(__LINE__, what, chunk + r * w, d.col + r * d.cols + n0 * plane_o,
                                 w);
                // the chunk's own slice of dcol, packed as (rows, b*Ho*Wo)
                for (size_t r = 0; r < d.rows; r++)
                    memcpy(chunk + r * w, dcol + r * d.cols + n0 * plane_o, w * sizeof(float));
                herd__col2im_add_chunk(chunk, s->C, s->N, n0, b, s->H, s->W, s->R, s->stride,
                                       s->pad, parts);
            }
            conv_name(what, sizeof what, "col2im_add_chunk", s);
            CHECK_SAME(what, parts, whole, d.nin);
        }
        free(chunk), free(whole), free(parts), free(dcol), free(dcold);
        conv_data_free(&d);
    }
}

/* ---- convolution by oneDNN's primitives (herd__conv) ---- */

/* The shapes above, the models' own (at a small batch), batch 1 and more
 * channels than one 16-wide block. */
static const conv_shape conv_dnn_shapes[] = {
    // N, C, H, W, K, R, stride, pad
    {4, 1, 28, 28, 16, 3, 1, 1},  // resnet20 stem
    {3, 16, 28, 28, 16, 3, 1, 1}, // resnet20 stage 1
    {2, 16, 28, 28, 32, 3, 2, 1}, // stage 2 entry, stride 2
    {2, 16, 28, 28, 32, 1, 2, 0}, // its 1x1 stride-2 projection
    {2, 32, 14, 14, 32, 3, 1, 1}, // stage 2
    {2, 32, 14, 14, 64, 3, 2, 1}, // stage 3 entry
    {2, 64, 7, 7, 64, 3, 1, 1},   // stage 3
    {2, 1, 28, 28, 32, 5, 1, 2},  // cnn conv1
    {2, 32, 14, 14, 64, 5, 1, 2}, // cnn conv2
    {1, 20, 9, 13, 24, 3, 1, 1},  // batch 1, non-square, channels not a multiple of 16
    {2, 17, 6, 5, 33, 3, 2, 0},   // odd channels, stride 2 leaves a column unused
};

/* One configuration of one shape: forward, then backward, each checked
 * against the double reference. Overwritten outputs start as NaN,
 * accumulated ones as random values. */
static void conv_dnn_case(herd__dnn *dnn, const conv_shape *s, herd_rng *rng, bool bias, bool relu,
                          bool din, bool acc)
{
    conv_data d;
    conv_data_init(&d, s, rng);
    size_t HW = s->H * s->W, plane_o = conv_ho(s) * conv_wo(s);
    herd__conv_shape cs = {.N = s->N, .C = s->C, .H = s->H, .W = s->W, .K = s->K, .R = s->R,
                           .stride = s->stride, .pad = s->pad, .bias = bias, .relu = relu,
                           .din = din, .din_accumulate = acc};
    herd__conv *c = NULL;
    char what[160], tag[64];
    snprintf(tag, sizeof tag, "dnn%s%s%s%s", bias ? " bias" : "", relu ? " relu" : "",
             din ? " din" : "", acc ? " acc" : "");
    conv_name(what, sizeof what, tag, s);
    if (herd__conv_create(dnn, &cs, &c) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s: no oneDNN primitive", what);

    // forward: relu(conv + b); relu moves nothing by more than the error
    float *out = alloc_f(d.nout), *gotf = alloc_f(d.nout);
    double *want = alloc_d(d.nout), *mag = alloc_d(d.nout), *got = alloc_d(d.nout);
    double *ain = alloc_d(d.nin), *aw = alloc_d(d.nw), *ab = alloc_d(s->K);
    fill_nan_f(out, d.nout);
    herd__conv_forward(c, d.fin, d.fw, bias ? d.fb : NULL, out);
    herd__ref_conv_forward(d.in, d.w, bias ? d.b : NULL, want, s->N, s->C, s->H, s->W, s->K, s->R,
                           s->stride, s->pad);
    abs_d(d.in, ain, d.nin), abs_d(d.w, aw, d.nw), abs_d(d.b, ab, s->K);
    herd__ref_conv_forward(ain, aw, bias ? ab : NULL, mag, s->N, s->C, s->H, s->W, s->K, s->R,
                           s->stride, s->pad);
    if (relu)
        for (size_t i = 0; i < d.nout; i++)
            want[i] = want[i] > 0 ? want[i] : 0;
    herd_test_cnhw_to_nchw(out, got, s->N, s->K, plane_o);
    to_float(got, gotf, d.nout);
    snprintf(what + strlen(what), sizeof what - strlen(what), " out");
    CHECK_CLOSE(what, gotf, want, mag, SUM_REL, 1e-30, d.nout);

    // backward (of the forward just run)
    float *dw = alloc_f(d.nw), *db = alloc_f(s->K), *dinf = alloc_f(d.nin), *gdf = alloc_f(d.nin);
    double *rdin = alloc_d(d.nin), *rdw = alloc_d(d.nw), *rdb = alloc_d(s->K);
    double *mdin = alloc_d(d.nin), *mdw = alloc_d(d.nw), *mdb = alloc_d(s->K);
    double *adout = alloc_d(d.nout), *prev = alloc_d(d.nin), *gd = alloc_d(d.nin);
    fill_nan_f(dw, d.nw);
    fill_nan_f(db, s->K);
    if (acc) {
        fill_normal(rng, prev, d.nin, 1.0, 0.0);
        herd_test_nchw_to_cnhw(prev, dinf, s->N, s->C, HW);
    } else {
        fill_nan_f(dinf, d.nin); // and it must stay so when din is off
    }
    herd__conv_backward(c, d.fin, d.fw, d.fdout, din ? dinf : NULL, dw, bias ? db : NULL);
    herd__ref_conv_backward(d.in, d.w, d.dout, rdin, rdw, rdb, s->N, s->C, s->H, s->W, s->K, s->R,
                            s->stride, s->pad);
    abs_d(d.dout, adout, d.nout);
    herd__ref_conv_backward(ain, aw, adout, mdin, mdw, mdb, s->N, s->C, s->H, s->W, s->K, s->R,
                            s->stride, s->pad);
    conv_name(what, sizeof what, tag, s);
    snprintf(what + strlen(what), sizeof what - strlen(what), " dw");
    CHECK_CLOSE(what, dw, rdw, mdw, SUM_REL, 1e-30, d.nw);
    if (bias) {
        conv_name(what, sizeof what, tag, s);
        snprintf(what + strlen(what), sizeof what - strlen(what), " db");
        CHECK_CLOSE(what, db, rdb, mdb, SUM_REL, 1e-30, s->K);
    } else {
        for (size_t k = 0; k < s->K; k++)
            ASSERT_TRUE(isnan(db[k]));
    }
    herd_test_cnhw_to_nchw(dinf, gd, s->N, s->C, HW);
    to_float(gd, gdf, d.nin);
    if (din) {
        for (size_t i = 0; i < d.nin; i++) {
            rdin[i] += acc ? prev[i] : 0.0;
            mdin[i] += acc ? fabs(prev[i]) : 0.0;
        }
        conv_name(what, sizeof what, tag, s);
        snprintf(what + strlen(what), sizeof what - strlen(what), " din");
        CHECK_CLOSE(what, gdf, rdin, mdin, SUM_REL, 1e-30, d.nin);
    } else {
        for (size_t i = 0; i < d.nin; i++)
            ASSERT_TRUE(isnan(gdf[i]));
    }
    herd__conv_free(c);
    free(out), free(gotf), free(want), free(mag), free(got), free(ain), free(aw), free(ab);
    free(dw), free(db), free(dinf), free(gdf), free(rdin), free(rdw), free(rdb);
    free(mdin), free(mdw), free(mdb), free(adout), free(prev), free(gd);
    conv_data_free(&d);
}

static void conv_dnn_over(const conv_shape *shapes, size_t n, uint64_t seed)
{
    herd_rng rng;
    herd_rng_seed(&rng, seed, 0);
    herd__dnn *dnn = NULL;
    ASSERT_OK(herd__dnn_create(&dnn));
    for (size_t t = 0; t < n; t++)
        for (int cfg = 0; cfg < 5; cfg++) // bias/relu/din/accumulate in the combinations models use
            conv_dnn_case(dnn, &shapes[t], &rng, cfg == 1 || cfg >= 3, cfg == 1 || cfg == 4, cfg < 2 || cfg == 3,
                          cfg == 3);
    herd__dnn_free(dnn);
}

static void test_conv_dnn_small_vs_ref(void)
{
    conv_dnn_over(conv_shapes, sizeof conv_shapes / sizeof conv_shapes[0], 26);
}

static void test_conv_dnn_models_vs_ref(void)
{
    conv_dnn_over(conv_dnn_shapes, sizeof conv_dnn_shapes / sizeof conv_dnn_shapes[0], 27);
}

/* Primitives of several shapes and batch sizes share one herd__dnn's
 * scratch: each still gives its own result after the others ran (and the
 * scratch grew under them), and a second forward/backward of the same
 * tensors repeats the first bit for bit. */
static void test_conv_dnn_shared_scratch(void)
{
    herd_rng rng;
    herd_rng_seed(&rng, 28, 0);
    herd__dnn *dnn = NULL;
    ASSERT_OK(herd__dnn_create(&dnn));
    enum { NC = 3 };
    const conv_shape *sh[NC] = {&conv_dnn_shapes[1], &conv_shapes[1], &conv_dnn_shapes[6]};
    herd__conv *c[NC];
    conv_data d[NC];
    float *out[NC], *dw[NC], *din[NC];
    for (int i = 0; i < NC; i++) {
        conv_data_init(&d[i], sh[i], &rng);
        herd__conv_shape cs = {.N = sh[i]->N, .C = sh[i]->C, .H = sh[i]->H, .W = sh[i]->W,
                               .K = sh[i]->K, .R = sh[i]->R, .stride = sh[i]->stride,
                               .pad = sh[i]->pad, .din = true};
        ASSERT_OK(herd__conv_create(dnn, &cs, &c[i]));
        out[i] = alloc_f(d[i].nout), dw[i] = alloc_f(d[i].nw), din[i] = alloc_f(d[i].nin);
        herd__conv_forward(c[i], d[i].fin, d[i].fw, NULL, out[i]);
        herd__conv_backward(c[i], d[i].fin, d[i].fw, d[i].fdout, din[i], dw[i], NULL);
    }
    for (int i = NC; i-- > 0;) {
        float *o = alloc_f(d[i].nout), *w = alloc_f(d[i].nw), *x = alloc_f(d[i].nin);
        herd__conv_forward(c[i], d[i].fin, d[i].fw, NULL, o);
        herd__conv_backward(c[i], d[i].fin, d[i].fw, d[i].fdout, x, w, NULL);
        CHECK_SAME("shared scratch out", o, out[i], d[i].nout);
        CHECK_SAME("shared scratch dw", w, dw[i], d[i].nw);
        CHECK_SAME("shared scratch din", x, din[i], d[i].nin);
        free(o), free(w), free(x);
    }
    for (int i = 0; i < NC; i++) {
        herd__conv_free(c[i]);
        free(out[i]), free(dw[i]), free(din[i]);
        conv_data_free(&d[i]);
    }
    herd__dnn_free(dnn);
}

/* ---- max pooling ---- */

static void test_maxpool_vs_ref(void)
{
    // N, C, H, W, k, s
    const size_t shapes[][6] = {
        {2, 3, 8, 8, 2, 2},   // the common case
        {2, 3, 7, 9, 2, 2},   // odd sizes: the last row and column are dropped
        {3, 2, 28, 28, 2, 2}, // LeNet pool1
        {1, 2, 7, 5, 3, 2},   // 3x3 stride 2, overlapping
        {2, 2, 10, 8, 3, 2},  // 3x3 stride 2, a row and column left over
        {2, 1, 6, 9, 3, 1},   // 3x3 stride 1, heavily overlapping
        {1, 2, 5, 7, 2, 3},   // gaps between windows
    };
    herd_rng rng;
    herd_rng_seed(&rng, 26, 0);
    size_t zeroed = 0; // gradients the ReLU mask removed, over all shapes
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        size_t N = shapes[t][0], C = shapes[t][1], H = shapes[t][2], W = shapes[t][3];
        size_t k = shapes[t][4], s = shapes[t][5];
        size_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1, nin = N * C * H * W;
        size_t nout = N * C * Ho * Wo, planes = N * C;
        char what[96];
        snprintf(what, sizeof what, "maxpool N=%zu C=%zu H=%zu W=%zu k=%zu s=%zu", N, C, H, W, k, s);

        double *in = alloc_d(nin), *dout = alloc_d(nout), *want = alloc_d(nout);
        double *rdin = alloc_d(nin), *mdin = alloc_d(nin), *adout = alloc_d(nout);
        double *pre = alloc_d(nin), *gd = alloc_d(nin), *gout = alloc_d(nout);
        float *fin = alloc_f(nin), *fdout = alloc_f(nout), *out = alloc_f(nout);
        float *din = alloc_f(nin), *gdf = alloc_f(nin), *goutf = alloc_f(nout);
        uint32_t *idx = calloc(nout, sizeof *idx);
        ASSERT_TRUE(idx != NULL);
        fill_distinct(&rng, in, nin);
        fill_normal(&rng, dout, nout, 1.0, 0.0);
        herd_test_nchw_to_cnhw(in, fin, N, C, H * W);
        herd_test_nchw_to_cnhw(dout, fdout, N, C, Ho * Wo);

        // forward: the max is exact, and idx points at it within its plane
        fill_nan_f(out, nout);
        herd__maxpool_forward(fin, out, idx, planes, H, W, k, s);
        herd__ref_maxpool_forward(in, want, N, C, H, W, k, s);
        herd_test_cnhw_to_nchw(out, gout, N, C, Ho * Wo);
        to_float(gout, goutf, nout);
        CHECK_CLOSE(what, goutf, want, NULL, 0.0, 0.0, nout);
        for (size_t p = 0; p < planes; p++)
            for (size_t o = 0; o < Ho * Wo; o++) {
                uint32_t at = idx[p * Ho * Wo + o];
                size_t y = o / Wo, x = o % Wo, ay = at / W, ax = at % W;
                ASSERT_TRUE(at < H * W);
                ASSERT_TRUE(ay >= y * s && ay < y * s + k && ax >= x * s && ax < x * s + k);
                ASSERT_TRUE(fin[p * H * W + at] == out[p * Ho * Wo + o]);
            }

        // backward overwrites (din pre-filled with NaN) ...
        herd__ref_maxpool_backward(in, dout, rdin, N, C, H, W, k, s);
        abs_d(dout, adout, nout);
        herd__ref_maxpool_backward(in, adout, mdin, N, C, H, W, k, s);
        fill_nan_f(din, nin);
        herd__maxpool_backward(fdout, idx, NULL, din, planes, H, W, k, s, false);
        herd_test_cnhw_to_nchw(din, gd, N, C, H * W);
        to_float(gd, gdf, nin);
        CHECK_CLOSE(what, gdf, rdin, mdin, SUM_REL, 1e-30, nin);

        // ... or adds to what is there
        fill_normal(&rng, pre, nin, 1.0, 0.0);
        herd_test_nchw_to_cnhw(pre, din, N, C, H * W);
        herd__maxpool_backward(fdout, idx, NULL, din, planes, H, W, k, s, true);
        for (size_t i = 0; i < nin; i++)
            rdin[i] += pre[i], mdin[i] += fabs(pre[i]);
        herd_test_cnhw_to_nchw(din, gd, N, C, H * W);
        to_float(gd, gdf, nin);
        CHECK_CLOSE(what, gdf, rdin, mdin, SUM_REL, 1e-30, nin);

        // a ReLU's mask on the input (about half of it is <= 0) is the same,
        // bit for bit, as masking the unmasked result afterwards
        {
            float *relu_in = alloc_f(nin), *masked = alloc_f(nin);
            for (size_t i = 0; i < nin; i++)
                relu_in[i] = fin[i] > 0.0f ? fin[i] : 0.0f;
            fill_nan_f(din, nin);
            herd__maxpool_backward(fdout, idx, NULL, din, planes, H, W, k, s, false);
            for (size_t i = 0; i < nin; i++) {
                zeroed += relu_in[i] <= 0.0f && din[i] != 0.0f;
                din[i] = relu_in[i] > 0.0f ? din[i] : 0.0f;
            }
            fill_nan_f(masked, nin);
            herd__maxpool_backward(fdout, idx, relu_in, masked, planes, H, W, k, s, false);
            CHECK_SAME("maxpool relu-masked", masked, din, nin);
            free(relu_in), free(masked);
        }

        free(in), free(dout), free(want), free(rdin), free(mdin), free(adout), free(pre), free(gd);
        free(gout), free(fin), free(fdout), free(out), free(din), free(gdf), free(goutf), free(idx);
    }
    ASSERT_TRUE(zeroed > 0); // the mask had something to do
}

/* ---- batch norm ---- */

/* What batch norm's float results are made of, per element, for tolerances
 * relative to it (NCHW, from the reference statistics). The kernels work
 * with the mean rounded to float, so x - mean is known to about
 * FLT_EPSILON * (|x| + |mean|), not FLT_EPSILON * |x - mean|: with
 * a = (|x| + |mean|) * invstd standing in for |xhat|,
 *   out    = x*scale + (beta - mean*scale), scale = gamma*invstd:
 *            |gamma| a + |beta|;
 *   din    = gamma*invstd/len * (len*g - sum g - xhat * sum g*xhat):
 *            |gamma| invstd/len * (len|g| + sum|g| + a * sum |g| a);
 *   dgamma = sum g*xhat: sum |g| a;  dbeta = sum g: sum |g|. */
static void bn_magnitudes(const double *in, const double *gamma, const double *beta,
                          const double *dout, const double *mean, const double *var, double eps,
                          size_t N, size_t C, size_t HW, double *mout, double *mdin,
                          double *mdgamma, double *mdbeta)
{
    double len = (double)(N * HW);
    for (size_t c = 0; c < C; c++) {
        double invstd = 1.0 / sqrt(var[c] + eps), ag = 0, aga = 0;
        for (size_t n = 0; n < N; n++)
            for (size_t i = 0; i < HW; i++) {
                size_t at = (n * C + c) * HW + i;
                double g = fabs(dout[at]), a = (fabs(in[at]) + fabs(mean[c])) * invstd;
                ag += g, aga += g * a;
            }
        mdgamma[c] = aga, mdbeta[c] = ag;
        for (size_t n = 0; n < N; n++)
            for (size_t i = 0; i < HW; i++) {
                size_t at = (n * C + c) * HW + i;
                double a = (fabs(in[at]) + fabs(mean[c])) * invstd;
                mout[at] = fabs(gamma[c]) * a + fabs(beta[c]);
                mdin[at] = fabs(gamma[c]) * invstd / len * (len * fabs(dout[at]) + ag + a * aga);
            }
    }
}

/* Relative to those magnitudes: the float statistics and the few float
 * operations per element each round by about FLT_EPSILON (at most 3
 * epsilons seen over 1000 seeds). */
#define BN_REL (16.0 * FLT_EPSILON)

static void test_batchnorm_train_vs_ref(void)
{
    // N, C, HW; the input of channel c is spread 2^c around 3c - 4
    const size_t shapes[][3] = {{4, 3, 35}, {2, 1, 1}, {1, 2, 6}, {8, 4, 49}, {3, 2, 100},
                                 {16, 3, 196}}; // the last: long channels (3136 floats)
    const float eps = 1e-5f, momentum = 0.1f;
    herd_rng rng;
    herd_rng_seed(&rng, 27, 0);
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        size_t N = shapes[t][0], C = shapes[t][1], HW = shapes[t][2], n = N * C * HW;
        size_t len = N * HW;
        char what[128];
        double *in = alloc_d(n), *dout = alloc_d(n), *gamma = alloc_d(C), *beta = alloc_d(C);
        double *rout = alloc_d(n), *rmean = alloc_d(C), *rvar = alloc_d(C), *rdin = alloc_d(n);
        double *rdgamma = alloc_d(C), *rdbeta = alloc_d(C), *g = alloc_d(n), *run0 = alloc_d(2 * C);
        double *want = alloc_d(C), *mout = alloc_d(n), *mdin = alloc_d(n);
        double *mdgamma = alloc_d(C), *mdbeta = alloc_d(C);
        float *fin = alloc_f(n), *fdout = alloc_f(n), *fgamma = alloc_f(C), *fbeta = alloc_f(C);
        float *out = alloc_f(n), *smean = alloc_f(C), *sinv = alloc_f(C), *rm = alloc_f(C);
        float *rv = alloc_f(C), *din = alloc_f(n), *dgamma = alloc_f(C), *dbeta = alloc_f(C);
        float *gf = alloc_f(n);
        for (size_t i = 0; i < N; i++)
            for (size_t c = 0; c < C; c++)
                fill_normal(&rng, in + (i * C + c) * HW, HW, ldexp(1.0, (int)c),
                            3.0 * (double)c - 4.0);
        fill_normal(&rng, dout, n, 1.0, 0.0);
        fill_normal(&rng, gamma, C, 1.0, 1.0);
        fill_normal(&rng, beta, C, 1.0, 0.0);
        fill_normal(&rng, run0, 2 * C, 0.5, 1.0); // old running mean, var (positive-ish)
        for (size_t c = 0; c < C; c++)
            run0[C + c] = fabs(run0[C + c]);
        herd_test_nchw_to_cnhw(in, fin, N, C, HW);
        herd_test_nchw_to_cnhw(dout, fdout, N, C, HW);
        to_float(gamma, fgamma, C);
        to_float(beta, fbeta, C);
        to_float(run0, rm, C);
        to_float(run0 + C, rv, C);

        fill_nan_f(out, n), fill_nan_f(smean, C), fill_nan_f(sinv, C);
        herd__batchnorm_forward_train(fin, fgamma, fbeta, out, smean, sinv, rm, rv, C, len, eps,
                                      momentum, false);
        herd__ref_batchnorm_forward(in, gamma, beta, rout, rmean, rvar, N, C, HW, (double)eps);

        snprintf(what, sizeof what, "batchnorm out N=%zu C=%zu HW=%zu", N, C, HW);
        herd_test_cnhw_to_nchw(out, g, N, C, HW);
        to_float(g, gf, n);
        bn_magnitudes(in, gamma, beta, dout, rmean, rvar, (double)eps, N, C, HW, mout, mdin,
                      mdgamma, mdbeta);
        CHECK_CLOSE(what, gf, rout, mout, BN_REL, 0.0, n);
        {   // the fused ReLU: exactly max(out, 0) of the same statistics
            float *o2 = alloc_f(n), *wr = alloc_f(n), *m2 = alloc_f(C), *i2 = alloc_f(C);
            float *rm2 = alloc_f(C), *rv2 = alloc_f(C);
            to_float(run0, rm2, C);
            to_float(run0 + C, rv2, C);
            herd__batchnorm_forward_train(fin, fgamma, fbeta, o2, m2, i2, rm2, rv2, C, len, eps,
                                          momentum, true);
            for (size_t i = 0; i < n; i++)
                wr[i] = out[i] > 0.0f ? out[i] : 0.0f;
            CHECK_SAME("batchnorm fused relu", o2, wr, n);
            free(o2), free(wr), free(m2), free(i2), free(rm2), free(rv2);
        }
        CHECK_CLOSE("batchnorm save_mean", smean, rmean, NULL, 1e-6, 1e-6, C);
        for (size_t c = 0; c < C; c++)
            want[c] = 1.0 / sqrt(rvar[c] + (double)eps);
        CHECK_CLOSE("batchnorm save_invstd", sinv, want, NULL, 1e-5, 0.0, C);
        // running stats: (1 - m) old + m batch, with the unbiased variance
        double m = (double)momentum;
        for (size_t c = 0; c < C; c++)
            want[c] = (1 - m) * run0[c] + m * rmean[c];
        CHECK_CLOSE("batchnorm run_mean", rm, want, NULL, 1e-6, 1e-6, C);
        for (size_t c = 0; c < C; c++)
            want[c] = (1 - m) * run0[C + c] +
                      m * rvar[c] * (len > 1 ? (double)len / (double)(len - 1) : 1.0);
        CHECK_CLOSE("batchnorm run_var", rv, want, NULL, 1e-5, 1e-6, C);

        // backward: din overwritten (NaN before), dgamma, dbeta overwritten
        herd__ref_batchnorm_backward(in, gamma, dout, rdin, rdgamma, rdbeta, N, C, HW, (double)eps);
        fill_nan_f(din, n), fill_nan_f(dgamma, C), fill_nan_f(dbeta, C);
        herd__batchnorm_backward(fin, fgamma, fdout, NULL, smean, sinv, din, dgamma, dbeta, C, len,
                                 false);
        snprintf(what, sizeof what, "batchnorm din N=%zu C=%zu HW=%zu", N, C, HW);
        herd_test_cnhw_to_nchw(din, g, N, C, HW);
        to_float(g, gf, n);
        CHECK_CLOSE(what, gf, rdin, mdin, BN_REL, 0.0, n);
        CHECK_CLOSE("batchnorm dgamma", dgamma, rdgamma, mdgamma, BN_REL, 0.0, C);
        CHECK_CLOSE("batchnorm dbeta", dbeta, rdbeta, mdbeta, BN_REL, 0.0, C);

        // accumulate adds onto din; din NULL still gives dgamma and dbeta
        double *pre = alloc_d(n);
        fill_normal(&rng, pre, n, 1.0, 0.0);
        herd_test_nchw_to_cnhw(pre, din, N, C, HW);
        herd__batchnorm_backward(fin, fgamma, fdout, NULL, smean, sinv, din, dgamma, dbeta, C, len, true);
        for (size_t i = 0; i < n; i++)
            rdin[i] += pre[i], mdin[i] += fabs(pre[i]);
        herd_test_cnhw_to_nchw(din, g, N, C, HW);
        to_float(g, gf, n);
        CHECK_CLOSE("batchnorm din accumulated", gf, rdin, mdin, BN_REL, 0.0, n);
        fill_nan_f(dgamma, C), fill_nan_f(dbeta, C);
        herd__batchnorm_backward(fin, fgamma, fdout, NULL, smean, sinv, NULL, dgamma, dbeta, C, len,
                                 false);
        CHECK_CLOSE("batchnorm dgamma (din NULL)", dgamma, rdgamma, mdgamma, BN_REL, 0.0, C);
        CHECK_CLOSE("batchnorm dbeta (din NULL)", dbeta, rdbeta, mdbeta, BN_REL, 0.0, C);

        // a fused ReLU's output masks dout: the same, bit for bit, as
        // masking dout first (out > 0 for about half the values)
        {
            float *masked = alloc_f(n), *d1 = alloc_f(n), *d2 = alloc_f(n);
            float dg1[8], db1[8], dg2[8], db2[8];
            ASSERT_TRUE(C <= 8);
            for (size_t i = 0; i < n; i++)
                masked[i] = out[i] > 0.0f ? fdout[i] : 0.0f;
            for (int accu = 0; accu < 2; accu++) {
                herd_test_nchw_to_cnhw(pre, d1, N, C, HW);
                herd_test_nchw_to_cnhw(pre, d2, N, C, HW);
                herd__batchnorm_backward(fin, fgamma, masked, NULL, smean, sinv, d1, dg1, db1, C,
                                         len, accu);
                herd__batchnorm_backward(fin, fgamma, fdout, out, smean, sinv, d2, dg2, db2, C,
                                         len, accu);
                CHECK_SAME("batchnorm relu-masked din", d2, d1, n);
                CHECK_SAME("batchnorm relu-masked dgamma", dg2, dg1, C);
                CHECK_SAME("batchnorm relu-masked dbeta", db2, db1, C);
            }
            free(masked), free(d1), free(d2);
        }

        free(in), free(dout), free(gamma), free(beta), free(rout), free(rmean), free(rvar);
        free(rdin), free(rdgamma), free(rdbeta), free(g), free(run0), free(want), free(pre);
        free(mout), free(mdin), free(mdgamma), free(mdbeta);
        free(fin), free(fdout), free(fgamma), free(fbeta), free(out), free(smean), free(sinv);
        free(rm), free(rv), free(din), free(dgamma), free(dbeta), free(gf);
    }
}

static void test_batchnorm_eval_closed_form(void)
{
    const size_t C = 3, len = 37;
    const float eps = 1e-5f;
    const float gamma[3] = {1.5f, -0.5f, 2.0f}, beta[3] = {0.25f, 1.0f, -3.0f};
    const float rmean[3] = {-2.0f, 0.5f, 10.0f}, rvar[3] = {4.0f, 0.01f, 0.0f};
    herd_rng rng;
    herd_rng_seed(&rng, 28, 0);
    double *x = alloc_d(C * len), *want = alloc_d(C * len), *mag = alloc_d(C * len);
    float *in = alloc_f(C * len), *out = alloc_f(C * len);
    fill_normal(&rng, x, C * len, 3.0, 1.0);
    to_float(x, in, C * len);
    for (size_t c = 0; c < C; c++) {
        double scale = gamma[c] / sqrt((double)rvar[c] + (double)eps);
        for (size_t i = 0; i < len; i++) {
            double xi = x[c * len + i];
            want[c * len + i] = scale * (xi - rmean[c]) + beta[c];
            mag[c * len + i] = fabs(scale) * (fabs(xi) + fabs(rmean[c])) + fabs(beta[c]);
        }
    }
    fill_nan_f(out, C * len);
    herd__batchnorm_forward_eval(in, gamma, beta, out, rmean, rvar, C, len, eps, false);
    CHECK_CLOSE("batchnorm eval", out, want, mag, BN_REL, 0.0, C * len);
    float *outr = alloc_f(C * len);
    herd__batchnorm_forward_eval(in, gamma, beta, outr, rmean, rvar, C, len, eps, true);
    for (size_t i = 0; i < C * len; i++)
        out[i] = out[i] > 0.0f ? out[i] : 0.0f;
    CHECK_SAME("batchnorm eval fused relu", outr, out, C * len);
    free(outr);
    free(x), free(want), free(mag), free(in), free(out);
}

/* ---- softmax cross-entropy ---- */

static void xent_check(herd_rng *rng, size_t N, size_t K, double scale, double offset)
{
    char what[96];
    snprintf(what, sizeof what, "softmax_xent N=%zu K=%zu scale=%g offset=%g", N, K, scale, offset);
    double *z = alloc_d(N * K), *rd = alloc_d(N * K);
    float *fz = alloc_f(N * K), *d = alloc_f(N * K);
    int32_t *labels = calloc(N, sizeof *labels);
    ASSERT_TRUE(labels != NULL);
    // each row gets its own offset in [-offset, offset]
    for (size_t n = 0; n < N; n++) {
        double shift = offset * (2.0 * (double)herd_rng_uniform(rng) - 1.0);
        fill_normal(rng, z + n * K, K, scale, shift);
    }
    to_float(z, fz, N * K);
    // every other row is labelled with its argmax (first maximum), the rest
    // with some other class
    size_t hits = 0;
    for (size_t n = 0; n < N; n++) {
        size_t arg = 0;
        for (size_t k = 1; k < K; k++)
            if (z[n * K + k] > z[n * K + arg])
                arg = k;
        size_t other = K > 1 ? (arg + 1 + herd_rng_below(rng, K - 1)) % K : arg;
        labels[n] = (int32_t)(n % 2 == 0 ? arg : other);
        hits += (size_t)labels[n] == arg;
    }

    double want = herd__ref_softmax_xent(z, labels, rd, N, K);
    size_t ncorrect = 12345;
    fill_nan_f(d, N * K);
    float loss = herd__softmax_xent(fz, labels, d, N, K, &ncorrect);
    if (!isfinite(loss))
        herd_test_fail(__FILE__, __LINE__, "%s: loss %g", what, (double)loss);
    // the loss is a mean of log-sum-exps, each within a few float roundings
    // of the logits it is computed from
    ASSERT_NEAR(loss, want, 1e-6 * (1.0 + scale), 1e-6);
    CHECK_CLOSE(what, d, rd, NULL, 1e-5, 4e-7 / (double)N, N * K);
    ASSERT_EQ_INT(ncorrect, hits);

    // dlogits and ncorrect may be NULL
    ASSERT_TRUE(herd__softmax_xent(fz, labels, NULL, N, K, NULL) == loss);
    free(z), free(rd), free(fz), free(d), free(labels);
}

static void test_softmax_xent_vs_ref(void)
{
    // N, K
    const size_t shapes[][2] = {{1, 1}, {4, 5}, {1, 3}, {3, 10}, {64, 10}, {5, 2}, {7, 100}};
    herd_rng rng;
    herd_rng_seed(&rng, 29, 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        xent_check(&rng, shapes[s][0], shapes[s][1], 1.0, 0.0);
        xent_check(&rng, shapes[s][0], shapes[s][1], 5.0, 3.0);
    }
}

static void test_softmax_xent_large_logits(void)
{
    herd_rng rng;
    herd_rng_seed(&rng, 30, 0);
    // logits around +-1e4 (exp overflows unless the max is taken out first)
    xent_check(&rng, 16, 10, 1.0, 1e4);
    xent_check(&rng, 16, 10, 100.0, 1e4);

    // one logit far above the rest: loss 0 when it is the label, the gap when
    // it is not, and dlogits exactly the one-hot difference / N
    const float z[6] = {1e4f, 0.0f, -1e4f, 0.0f, 2e4f, 1e4f};
    const int32_t labels[2] = {0, 0};
    float d[6];
    size_t ncorrect = 99;
    float loss = herd__softmax_xent(z, labels, d, 2, 3, &ncorrect);
    ASSERT_TRUE(isfinite(loss));
    ASSERT_NEAR(loss, (0.0 + 2e4) / 2.0, 1e-3, 1e-6);
    ASSERT_EQ_INT(ncorrect, 1);
    const float want_d[6] = {0, 0, 0, -0.5f, 0.5f, 0};
    CHECK_SAME("softmax_xent saturated dlogits", d, want_d, 6);
}

/* ---- layout ---- */

static void test_layout_round_trip(void)
{
    // C, N, HW
    const size_t shapes[][3] = {{1, 1, 1}, {3, 2, 5}, {1, 4, 7}, {6, 3, 1}, {16, 5, 100}};
    herd_rng rng;
    herd_rng_seed(&rng, 31, 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t C = shapes[s][0], N = shapes[s][1], HW = shapes[s][2], n = C * N * HW;
        double *x = alloc_d(n), *y = alloc_d(n);
        float *nchw = alloc_f(n), *cnhw = alloc_f(n), *back = alloc_f(n), *want = alloc_f(n);
        fill_normal(&rng, x, n, 1.0, 0.0);
        fill_normal(&rng, y, n, 1.0, 0.0);
        to_float(x, nchw, n);
        herd_test_nchw_to_cnhw(x, want, N, C, HW);

        fill_nan_f(cnhw, n);
        herd__nchw_to_cnhw(nchw, cnhw, C, N, HW, false);
        CHECK_SAME("nchw_to_cnhw", cnhw, want, n);
        fill_nan_f(back, n);
        herd__cnhw_to_nchw(cnhw, back, C, N, HW);
        CHECK_SAME("cnhw_to_nchw(nchw_to_cnhw(x))", back, nchw, n);

        // accumulate: out = y + layout(x), in float as the kernel adds
        float *acc = alloc_f(n), *wacc = alloc_f(n);
        herd_test_nchw_to_cnhw(y, acc, N, C, HW);
        for (size_t i = 0; i < n; i++)
            wacc[i] = acc[i] + want[i];
        herd__nchw_to_cnhw(nchw, acc, C, N, HW, true);
        CHECK_SAME("nchw_to_cnhw accumulate", acc, wacc, n);

        free(x), free(y), free(nchw), free(cnhw), free(back), free(want);
        free(acc), free(wacc);
    }
}

/* ---- blocked activations (nChw16c) ---- */

/* |got[i] - want[i]| <= rel * scale, scale the largest |want|: two float
 * computations of the same sums in different orders. */
static void check_near_f(int line, const char *what, const float *got, const float *want, size_t n, double rel)
{
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)want[i]));
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - (double)want[i]) <= rel * scale))
            herd_test_fail(__FILE__, line, "%s[%zu]: got %.9g, want %.9g (scale %.3g)", what, i, (double)got[i],
                           (double)want[i], scale);
}
#define CHECK_NEAR(what, got, want, n, rel) check_near_f(__LINE__, what, got, want, n, rel)

/* The layout change is the permutation its header says, both ways, at
 * both block widths (the kernels run on any CPU). */
static void test_blk_layout(void)
{
    for (size_t B = 8; B <= HERD__BLK_MAX; B *= 2) {
        const size_t C = 64, N = 3, HW = 5, n = C * N * HW, CB = C / B;
        float *a = alloc_f(n), *b = alloc_f(n), *c = alloc_f(n);
        for (size_t i = 0; i < n; i++)
            a[i] = (float)i;
        herd__cnhw_to_blk(a, b, C, N, HW, B);
        for (size_t k = 0; k < N; k++)
            for (size_t cb = 0; cb < CB; cb++)
                for (size_t i = 0; i < HW; i++)
                    for (size_t l = 0; l < B; l++)
                        ASSERT_TRUE(b[((k * CB + cb) * HW + i) * B + l] == a[((cb * B + l) * N + k) * HW + i]);
        herd__blk_to_cnhw(b, c, C, N, HW, B);
        CHECK_SAME("blocked round trip", c, a, n);
        free(a), free(b), free(c);
    }
}

/* Batch norm on blocked tensors against the CNHW kernels (themselves
 * checked against the double reference above), every mode: training with
 * and without the fused ReLU (statistics, running averages), evaluation,
 * backward with a ReLU mask, overwriting, accumulating, without din. Means
 * far from 0 check the shift; HW 1 and N 1 the edges. */
static void test_batchnorm_blk_vs_cnhw(void)
{
    const size_t shapes[][3] = {{4, 16, 35}, {1, 32, 1}, {3, 16, 49}, {2, 64, 196}, {64, 16, 5}, {2, 24, 9}};
    const float eps = 1e-5f, mom = 0.1f;
    herd_rng rng;
    herd_rng_seed(&rng, 41, 0);
    for (size_t B = 8; B <= HERD__BLK_MAX; B *= 2)
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        size_t N = shapes[t][0], C = shapes[t][1], HW = shapes[t][2], n = N * C * HW, len = N * HW;
        if (C % B)
            continue;
        double *tmp = alloc_d(n);
        float *x = alloc_f(n), *g = alloc_f(n), *xb = alloc_f(n), *gb = alloc_f(n), *gam = alloc_f(C),
              *bet = alloc_f(C);
        for (size_t c = 0; c < C; c++)
            fill_normal(&rng, tmp + c * len, len, 0.5 + (double)(c % 5), 100.0 * (double)(c % 3) - 7.0);
        to_float(tmp, x, n);
        fill_normal(&rng, tmp, n, 1.0, 0.0), to_float(tmp, g, n);
        fill_normal(&rng, tmp, C, 1.0, 1.0), to_float(tmp, gam, C);
        fill_normal(&rng, tmp, C, 1.0, 0.0), to_float(tmp, bet, C);
        herd__cnhw_to_blk(x, xb, C, N, HW, B);
        herd__cnhw_to_blk(g, gb, C, N, HW, B);
        double *work = alloc_d(HERD__BN_BLK_WORK(N, C));
        for (int relu = 0; relu < 2; relu++) {
            char what[96];
            float *o = alloc_f(n), *ob = alloc_f(n), *back = alloc_f(n);
            float *sm = alloc_f(C), *si = alloc_f(C), *smb = alloc_f(C), *sib = alloc_f(C);
            float *rm = alloc_f(2 * C), *rmb = alloc_f(2 * C);
            for (size_t c = 0; c < 2 * C; c++)
                rm[c] = rmb[c] = c < C ? 0.25f : 2.0f;
            herd__batchnorm_forward_train(x, gam, bet, o, sm, si, rm, rm + C, C, len, eps, mom, relu);
            herd__batchnorm_forward_train_blk(xb, gam, bet, ob, smb, sib, rmb, rmb + C, C, N, HW, eps, mom,
                                              relu, work, B);
            herd__blk_to_cnhw(ob, back, C, N, HW, B);
            snprintf(what, sizeof what, "blocked bn out B=%zu N=%zu C=%zu HW=%zu relu=%d", B, N, C, HW, relu);
            CHECK_NEAR(what, back, o, n, 1e-5);
            CHECK_NEAR("blocked bn save_mean", smb, sm, C, 1e-6);
            CHECK_NEAR("blocked bn save_invstd", sib, si, C, 1e-5);
            CHECK_NEAR("blocked bn running stats", rmb, rm, 2 * C, 1e-5);
            /* backward, the ReLU's mask (when fused) from each one's own output */
            float *din = alloc_f(n), *dinb = alloc_f(n), *dg = alloc_f(2 * C), *dgb = alloc_f(2 * C);
            for (int acc = 0; acc < 2; acc++) {
                for (size_t i = 0; i < n; i++)
                    din[i] = acc ? 0.5f : NAN;
                herd__cnhw_to_blk(din, dinb, C, N, HW, B);
                herd__batchnorm_backward(x, gam, g, relu ? o : NULL, sm, si, din, dg, dg + C, C, len, acc);
                herd__batchnorm_backward_blk(xb, gam, gb, relu ? ob : NULL, sm, si, dinb, dgb, dgb + C, C, N, HW,
                                             acc, work, B);
                herd__blk_to_cnhw(dinb, back, C, N, HW, B);
                snprintf(what, sizeof what, "blocked bn din N=%zu C=%zu HW=%zu relu=%d acc=%d", N, C, HW, relu,
                         acc);
                CHECK_NEAR(what, back, din, n, 1e-5);
                CHECK_NEAR("blocked bn dgamma, dbeta", dgb, dg, 2 * C, 1e-5);
            }
            fill_nan_f(dgb, 2 * C);
            herd__batchnorm_backward_blk(xb, gam, gb, relu ? ob : NULL, sm, si, NULL, dgb, dgb + C, C, N, HW,
                                         false, work, B);
            CHECK_NEAR("blocked bn dgamma, dbeta (din NULL)", dgb, dg, 2 * C, 1e-5);
            /* evaluation with the running statistics */
            herd__batchnorm_forward_eval(x, gam, bet, o, rm, rm + C, C, len, eps, relu);
            herd__batchnorm_forward_eval_blk(xb, gam, bet, ob, rm, rm + C, C, N, HW, eps, relu, (float *)work, B);
            herd__blk_to_cnhw(ob, back, C, N, HW, B);
            CHECK_SAME("blocked bn eval", back, o, n);
            free(o), free(ob), free(back), free(sm), free(si), free(smb), free(sib), free(rm), free(rmb);
            free(din), free(dinb), free(dg), free(dgb);
        }
        free(work), free(tmp), free(x), free(g), free(xb), free(gb), free(gam), free(bet);
    }
}

/* A convolution whose input and output herd holds blocked gives what the
 * CNHW one gives: forward (bias, ReLU), backward-data overwriting and
 * accumulating, backward-weights; stride 2, 1x1, batch 1. A first layer
 * (one input channel, no din: c1_bwd_weights) reads its input plain and
 * its dout blocked. And the same as NHWC (.nhwc: one block of all C or K
 * channels), as bf16 models hold them on AMX. */
static void test_conv_dnn_blk_vs_cnhw(void)
{
    const herd__conv_shape shapes[] = {
        {.N = 3, .C = 16, .H = 9, .W = 7, .K = 32, .R = 3, .stride = 2, .pad = 1, .din = true},
        {.N = 2, .C = 32, .H = 5, .W = 5, .K = 16, .R = 1, .stride = 1, .pad = 0, .din = true,
         .din_accumulate = true},
        {.N = 1, .C = 16, .H = 6, .W = 6, .K = 16, .R = 3, .stride = 1, .pad = 1, .bias = true, .relu = true,
         .din = true},
        {.N = 2, .C = 48, .H = 7, .W = 5, .K = 32, .R = 3, .stride = 1, .pad = 1, .din = true},
        {.N = 3, .C = 1, .H = 9, .W = 7, .K = 32, .R = 5, .stride = 1, .pad = 2, .bias = true, .relu = true},
        {.N = 2, .C = 1, .H = 8, .W = 8, .K = 16, .R = 3, .stride = 2, .pad = 1},
        {.N = 1, .C = 1, .H = 6, .W = 5, .K = 24, .R = 5, .stride = 2, .pad = 0, .bias = true},
    };
    size_t BW = herd__blk_width();
    if (!BW)
        return; /* the model never blocks without AVX2 */
    herd_rng rng;
    herd_rng_seed(&rng, 42, 0);
    herd__dnn *dnn = NULL;
    ASSERT_OK(herd__dnn_create(&dnn));
    for (size_t t = 0; t < 2 * sizeof shapes / sizeof shapes[0]; t++) {
        herd__conv_shape s = shapes[t / 2], sb = s;
        sb.nhwc = t % 2;
        size_t B = sb.nhwc ? s.K : BW, BS = sb.nhwc ? s.C : BW; /* dst's and src's */
        if (s.K % B)
            continue; /* not blocked at this width */
        sb.src_blk = s.C > 1, sb.dst_blk = true;
        size_t Ho = (s.H + 2 * s.pad - s.R) / s.stride + 1, Wo = (s.W + 2 * s.pad - s.R) / s.stride + 1;
        size_t nin = s.N * s.C * s.H * s.W, nout = s.N * s.K * Ho * Wo, nw = s.K * s.C * s.R * s.R + s.K;
        double *tmp = alloc_d(nin + nout + nw);
        float *x = alloc_f(nin), *xb = alloc_f(nin), *w = alloc_f(nw), *g = alloc_f(nout), *gb = alloc_f(nout);
        fill_normal(&rng, tmp, nin + nout + nw, 1.0, 0.0);
        to_float(tmp, x, nin), to_float(tmp + nin, g, nout), to_float(tmp + nin + nout, w, nw);
        if (sb.src_blk)
            herd__cnhw_to_blk(x, xb, s.C, s.N, s.H * s.W, BS);
        else
            memcpy(xb, x, nin * sizeof(float));
        herd__cnhw_to_blk(g, gb, s.K, s.N, Ho * Wo, B);
        herd__conv *c = NULL, *cb = NULL;
        ASSERT_OK(herd__conv_create(dnn, &s, &c));
        ASSERT_OK(herd__conv_create(dnn, &sb, &cb));
        float *o = alloc_f(nout), *ob = alloc_f(nout), *back = alloc_f(nout > nin ? nout : nin);
        const float *bias = s.bias ? w + s.K * s.C * s.R * s.R : NULL;
        herd__conv_forward(c, x, w, bias, o);
        herd__conv_forward(cb, xb, w, bias, ob);
        herd__blk_to_cnhw(ob, back, s.K, s.N, Ho * Wo, B);
        CHECK_NEAR("blocked conv out", back, o, nout, 1e-5);
        float *din = alloc_f(nin), *dinb = alloc_f(nin), *dw = alloc_f(nw), *dwb = alloc_f(nw);
        for (size_t i = 0; i < nin; i++)
            din[i] = s.din_accumulate ? 0.25f * (float)(i % 7) : NAN;
        if (sb.src_blk)
            herd__cnhw_to_blk(din, dinb, s.C, s.N, s.H * s.W, BS);
        herd__conv_backward(c, x, w, g, s.din ? din : NULL, dw, s.bias ? dw + s.K * s.C * s.R * s.R : NULL);
        herd__conv_backward(cb, xb, w, gb, s.din ? dinb : NULL, dwb, s.bias ? dwb + s.K * s.C * s.R * s.R : NULL);
        if (s.din) {
            herd__blk_to_cnhw(dinb, back, s.C, s.N, s.H * s.W, BS);
            CHECK_NEAR("blocked conv din", back, din, nin, 1e-5);
        }
        CHECK_NEAR("blocked conv dw", dwb, dw, s.bias ? nw : nw - s.K, 1e-5);
        herd__conv_free(c), herd__conv_free(cb);
        free(tmp), free(x), free(xb), free(w), free(g), free(gb), free(o), free(ob), free(back);
        free(din), free(dinb), free(dw), free(dwb);
    }
    herd__dnn_free(dnn);
}

/* Blocked max pooling against the CNHW kernel (windows 2/2, 3/2
 * overlapping, 3/1; ties: a grid of repeated values), its indices mapped
 * back, the backward with and without the ReLU mask, overwriting and
 * accumulating; flatten's layout change both ways against CNHW's. */
static void test_maxpool_blk_vs_cnhw(void)
{
    const size_t cases[][5] = {{2, 32, 8, 6, 2}, {3, 16, 7, 7, 3}, {1, 16, 5, 4, 3}, {2, 24, 6, 6, 2},
                               {2, 64, 7, 7, 3}}; /* N C H W k */
    const size_t strides[] = {2, 2, 1, 2, 2};
    for (size_t B = 8; B <= HERD__BLK_MAX; B *= 2)
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        size_t N = cases[t][0], C = cases[t][1], H = cases[t][2], W = cases[t][3], k = cases[t][4], s = strides[t];
        if (C % B)
            continue;
        size_t Ho = (H - k) / s + 1, Wo = (W - k) / s + 1, nin = N * C * H * W, nout = N * C * Ho * Wo;
        float *x = alloc_f(nin), *xb = alloc_f(nin), *o = alloc_f(nout), *ob = alloc_f(nout), *back = alloc_f(nin);
        float *g = alloc_f(nout), *gb = alloc_f(nout), *d = alloc_f(nin), *db = alloc_f(nin);
        uint32_t *ix = calloc(nout, sizeof *ix), *ixb = calloc(nout, sizeof *ixb);
        ASSERT_TRUE(ix && ixb);
        for (size_t i = 0; i < nin; i++)
            x[i] = (float)((i * 7919) % 13) - 6.0f; /* many ties, some <= 0 */
        for (size_t i = 0; i < nout; i++)
            g[i] = (float)(i % 11) + 0.5f;
        herd__cnhw_to_blk(x, xb, C, N, H * W, B);
        herd__cnhw_to_blk(g, gb, C, N, Ho * Wo, B);
        herd__maxpool_forward(x, o, ix, C * N, H, W, k, s);
        herd__maxpool_forward_blk(xb, ob, ixb, N * C / B, H, W, k, s, B);
        herd__blk_to_cnhw(ob, back, C, N, Ho * Wo, B);
        CHECK_SAME("blocked maxpool out", back, o, nout);
        /* the same source pixel for every output */
        for (size_t n = 0; n < N; n++)
            for (size_t c = 0; c < C; c++)
                for (size_t i = 0; i < Ho * Wo; i++)
                    ASSERT_TRUE(ixb[((n * (C / B) + c / B) * Ho * Wo + i) * B + c % B] ==
                                ix[(c * N + n) * Ho * Wo + i]);
        for (int relu = 0; relu < 2; relu++)
            for (int acc = 0; acc < 2; acc++) {
                for (size_t i = 0; i < nin; i++)
                    d[i] = acc ? 0.25f : NAN;
                herd__cnhw_to_blk(d, db, C, N, H * W, B);
                herd__maxpool_backward(g, ix, relu ? x : NULL, d, C * N, H, W, k, s, acc);
                herd__maxpool_backward_blk(gb, ixb, relu ? xb : NULL, db, N * C / B, H, W, k, s, acc, B);
                herd__blk_to_cnhw(db, back, C, N, H * W, B);
                CHECK_SAME("blocked maxpool din", back, d, nin);
            }
        /* flatten: rows (N, C*H*W) in NCHW order */
        float *rows = alloc_f(nin), *rowsb = alloc_f(nin);
        herd__cnhw_to_nchw(x, rows, C, N, H * W);
        herd__blk_to_nchw(xb, rowsb, C, N, H * W, B);
        CHECK_SAME("blocked flatten", rowsb, rows, nin);
        for (int acc = 0; acc < 2; acc++) {
            for (size_t i = 0; i < nin; i++)
                d[i] = acc ? 0.5f : NAN;
            herd__cnhw_to_blk(d, db, C, N, H * W, B);
            herd__nchw_to_cnhw(rows, d, C, N, H * W, acc);
            herd__nchw_to_blk(rows, db, C, N, H * W, acc, B);
            herd__blk_to_cnhw(db, back, C, N, H * W, B);
            CHECK_SAME("blocked flatten backward", back, d, nin);
        }
        free(x), free(xb), free(o), free(ob), free(back), free(g), free(gb), free(d), free(db), free(ix), free(ixb);
        free(rows), free(rowsb);
    }
}

const herd_test herd_tests_kernels[] = {
    {"kernels_sgemm_vs_ref", test_sgemm_vs_ref, 20, HERD_TEST_ONE_THREAD},
    {"kernels_sgemm_beta_one_accumulates", test_sgemm_beta_one_accumulates, 10, HERD_TEST_ONE_THREAD},
    {"kernels_conv_forward_vs_ref", test_conv_forward_vs_ref, 20},
    {"kernels_conv_backward_vs_ref", test_conv_backward_vs_ref, 20},
    {"kernels_im2col_chunks_match_whole", test_im2col_chunks_match_whole, 20},
    {"kernels_conv_dnn_small_vs_ref", test_conv_dnn_small_vs_ref, 30},
    {"kernels_conv_dnn_models_vs_ref", test_conv_dnn_models_vs_ref, 60},
    {"kernels_conv_dnn_shared_scratch", test_conv_dnn_shared_scratch, 30},
    {"kernels_maxpool_vs_ref", test_maxpool_vs_ref, 10, HERD_TEST_ONE_THREAD},
    {"kernels_batchnorm_train_vs_ref", test_batchnorm_train_vs_ref, 10, HERD_TEST_ONE_THREAD},
    {"kernels_batchnorm_eval_closed_form", test_batchnorm_eval_closed_form, 10, HERD_TEST_ONE_THREAD},
    {"kernels_softmax_xent_vs_ref", test_softmax_xent_vs_ref, 10, HERD_TEST_ONE_THREAD},
    {"kernels_softmax_xent_large_logits", test_softmax_xent_large_logits, 10, HERD_TEST_ONE_THREAD},
    {"kernels_layout_round_trip", test_layout_round_trip, 10, HERD_TEST_ONE_THREAD},
    {"kernels_blk_layout", test_blk_layout, 10, HERD_TEST_ONE_THREAD},
    {"kernels_batchnorm_blk_vs_cnhw", test_batchnorm_blk_vs_cnhw, 20, HERD_TEST_ONE_THREAD},
    {"kernels_conv_dnn_blk_vs_cnhw", test_conv_dnn_blk_vs_cnhw, 30},
    {"kernels_maxpool_blk_vs_cnhw", test_maxpool_blk_vs_cnhw, 10, HERD_TEST_ONE_THREAD},
    HERD_TEST_END,
};
