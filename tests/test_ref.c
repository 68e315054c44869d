/* Tests of src/nn/ref.c, the double-precision reference kernels.
 *
 * Forwards are checked against closed forms and hand-computed values;
 * every backward is checked against central finite differences of the
 * scalar L = sum(out * R) for a fixed random R (so dout = R). Backwards are
 * called on outputs pre-filled with NaN, so accumulating instead of
 * overwriting fails, and each output is also computed alone (the others
 * NULL) and must match. */
#include "harness.h"
#include "herd/herd_rng.h"
#include "nn/ref.h"

/* Central differences in double: truncation ~h^2 * f''' ~ 1e-10 and rounding
 * ~1e-16 * |L| / h ~ 1e-10 for these sizes, while a wrong index or a missing
 * term is off by O(0.1). */
#define FD_H 1e-5
#define FD_ATOL 1e-8
#define FD_RTOL 1e-6

static double *alloc(size_t n)
{
    double *p = calloc(n, sizeof *p);
    ASSERT_TRUE(p != NULL);
    return p;
}

static void fill_nan(double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
}

static void fill_normal(herd_rng *r, double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = herd_rng_normal(r);
}

/* Distinct values, a shuffled grid of `spacing` steps centred on 0 (none
 * closer to 0 than spacing/2): no ties or kinks within FD_H of any point. */
static void fill_distinct(herd_rng *r, double *x, size_t n, double spacing)
{
    size_t *idx = calloc(n, sizeof *idx);
    ASSERT_TRUE(idx != NULL);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    herd_rng_shuffle(r, idx, n);
    for (size_t i = 0; i < n; i++)
        x[i] = ((double)idx[i] - (double)n / 2.0 + 0.5) * spacing;
    free(idx);
}

static double dot(const double *a, const double *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static void assert_same(const char *what, const double *a, const double *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(a[i] == b[i]))
            herd_test_fail(__FILE__, __LINE__, "%s[%zu]: %.17g != %.17g", what, i, a[i], b[i]);
}

/* Compares grad[i] with (loss(x + h e_i) - loss(x - h e_i)) / 2h for every i;
 * x is perturbed in place and restored. */
static void check_grad(const char *what, double (*loss)(void *), void *ctx, double *x,
                       const double *grad, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + FD_H;
        double lp = loss(ctx);
        x[i] = saved - FD_H;
        double lm = loss(ctx);
        x[i] = saved;
        double fd = (lp - lm) / (2.0 * FD_H);
        if (!(fabs(grad[i] - fd) <= FD_ATOL + FD_RTOL * fabs(fd)))
            herd_test_fail(__FILE__, __LINE__, "%s[%zu]: analytic %.12g vs finite difference %.12g",
                           what, i, grad[i], fd);
    }
}

/* ---- gemm and linear ---- */

static void test_gemm_hand(void)
{
    const double A[6] = {1, 2, 3, 4, 5, 6};      // (2,3)
    const double B[6] = {7, 8, 9, 10, 11, 12};   // (3,2)
    const double want[4] = {58, 64, 139, 154};   // (2,2)
    double C[4];
    fill_nan(C, 4);
    herd__ref_gemm(2, 2, 3, A, B, C);
    assert_same("C", C, want, 4);

    // (1,3) x (3,1) and (3,1) x (1,3): inner and outer products
    double inner;
    herd__ref_gemm(1, 1, 3, A, B, &inner);
    ASSERT_NEAR(inner, 1 * 7 + 2 * 8 + 3 * 9, 0, 0);
    double outer[9];
    herd__ref_gemm(3, 3, 1, A, B, outer);
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 3; j++)
            ASSERT_NEAR(outer[i * 3 + j], A[i] * B[j], 0, 0);
}

static void test_linear_forward_hand(void)
{
    const double in[6] = {1, 2, 3, -1, 0, 2};    // (2,3)
    const double w[6] = {1, 0, -1, 2, 1, 0};     // (2,3)
    const double b[2] = {0.5, -1};
    const double want[4] = {1 - 3 + 0.5, 2 + 2 - 1, -1 - 2 + 0.5, -2 - 1};
    double out[4];
    herd__ref_linear_forward(in, w, b, out, 2, 3, 2);
    assert_same("out", out, want, 4);

    // without bias it is in w^T, i.e. gemm against the transposed weight
    const double wT[6] = {1, 2, 0, 1, -1, 0};    // (3,2)
    double via_gemm[4];
    herd__ref_linear_forward(in, w, NULL, out, 2, 3, 2);
    herd__ref_gemm(2, 2, 3, in, wT, via_gemm);
    assert_same("out", out, via_gemm, 4);
}

typedef struct linear_case {
    size_t N, I, O;
    double *in, *w, *b, *out, *r;
} linear_case;

static double linear_loss(void *p)
{
    linear_case *c = p;
    herd__ref_linear_forward(c->in, c->w, c->b, c->out, c->N, c->I, c->O);
    return dot(c->out, c->r, c->N * c->O);
}

static void test_linear_grad_fd(void)
{
    const size_t shapes[][3] = {{3, 5, 4}, {1, 7, 2}, {4, 1, 3}, {2, 6, 1}};
    herd_rng rng;
    herd_rng_seed(&rng, 11, 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        linear_case c = {shapes[s][0], shapes[s][1], shapes[s][2], 0, 0, 0, 0, 0};
        size_t nin = c.N * c.I, nw = c.O * c.I, nout = c.N * c.O;
        c.in = alloc(nin), c.w = alloc(nw), c.b = alloc(c.O);
        c.out = alloc(nout), c.r = alloc(nout);
        fill_normal(&rng, c.in, nin);
        fill_normal(&rng, c.w, nw);
        fill_normal(&rng, c.b, c.O);
        fill_normal(&rng, c.r, nout);
        double *din = alloc(nin), *dw = alloc(nw), *db = alloc(c.O), *alone = alloc(nin + nw);
        fill_nan(din, nin), fill_nan(dw, nw), fill_nan(db, c.O);
        herd__ref_linear_backward(c.in, c.w, c.r, din, dw, db, c.N, c.I, c.O);
        check_grad("linear din", linear_loss, &c, c.in, din, nin);
        check_grad("linear dw", linear_loss, &c, c.w, dw, nw);
        check_grad("linear db", linear_loss, &c, c.b, db, c.O);

        fill_nan(alone, nin);
        herd__ref_linear_backward(c.in, c.w, c.r, alone, NULL, NULL, c.N, c.I, c.O);
        assert_same("linear din alone", alone, din, nin);
        fill_nan(alone, nw);
        herd__ref_linear_backward(c.in, c.w, c.r, NULL, alone, NULL, c.N, c.I, c.O);
        assert_same("linear dw alone", alone, dw, nw);
        fill_nan(alone, c.O);
        herd__ref_linear_backward(c.in, c.w, c.r, NULL, NULL, alone, c.N, c.I, c.O);
        assert_same("linear db alone", alone, db, c.O);
        herd__ref_linear_backward(c.in, c.w, c.r, NULL, NULL, NULL, c.N, c.I, c.O);

        free(c.in), free(c.w), free(c.b), free(c.out), free(c.r);
        free(din), free(dw), free(db), free(alone);
    }
}

/* ---- convolution ---- */

static void test_conv_forward_closed_form(void)
{
    // in (1,2,3,4): channel 0 is 1..12, channel 1 is -(1..12)
    double in[24];
    for (size_t i = 0; i < 12; i++)
        in[i] = (double)(i + 1), in[12 + i] = -(double)(i + 1);

    // 3x3 identity kernel (w[k][c] = centre delta iff k == c), pad 1: out = in + b
    double w[2 * 2 * 9] = {0};
    w[(0 * 2 + 0) * 9 + 4] = 1;
    w[(1 * 2 + 1) * 9 + 4] = 1;
    const double b[2] = {0.25, -0.5};
    double out[24];
    herd__ref_conv_forward(in, w, b, out, 1, 2, 3, 4, 2, 3, 1, 1);
    for (size_t i = 0; i < 12; i++) {
        ASSERT_NEAR(out[i], in[i] + 0.25, 0, 0);
        ASSERT_NEAR(out[12 + i], in[12 + i] - 0.5, 0, 0);
    }

    // shift: a single 1 at (i=0, j=1) reads in[y-1][x], zero on the top row;
    // only channel 1 feeds output 0, so out = that channel shifted down
    double shift[1 * 2 * 9] = {0};
    shift[1 * 9 + 0 * 3 + 1] = 1;
    double out1[12];
    herd__ref_conv_forward(in, shift, NULL, out1, 1, 2, 3, 4, 1, 3, 1, 1);
    for (size_t y = 0; y < 3; y++)
        for (size_t x = 0; x < 4; x++)
            ASSERT_NEAR(out1[y * 4 + x], y == 0 ? 0.0 : in[12 + (y - 1) * 4 + x], 0, 0);

    // all-ones 3x3 over an all-ones 4x5 image, pad 1: each output counts the
    // in-bounds neighbours: 4 at corners, 6 on edges, 9 inside
    double ones_in[20], ones_w[9], count[20];
    for (size_t i = 0; i < 20; i++)
        ones_in[i] = 1;
    for (size_t i = 0; i < 9; i++)
        ones_w[i] = 1;
    herd__ref_conv_forward(ones_in, ones_w, NULL, count, 1, 1, 4, 5, 1, 3, 1, 1);
    for (size_t y = 0; y < 4; y++) {
        for (size_t x = 0; x < 5; x++) {
            double rows = (y == 0 || y == 3) ? 2 : 3, cols = (x == 0 || x == 4) ? 2 : 3;
            ASSERT_NEAR(count[y * 5 + x], rows * cols, 0, 0);
        }
    }

    // stride 2, pad 1 on 4x5: Ho = (4+2-3)/2+1 = 2, Wo = (5+2-3)/2+1 = 3, and
    // output (y,x) is centred on input (2y, 2x)
    herd__ref_conv_forward(ones_in, ones_w, NULL, count, 1, 1, 4, 5, 1, 3, 2, 1);
    const double want_s2[6] = {4, 6, 4, 6, 9, 6};
    assert_same("stride 2 count", count, want_s2, 6);

    // 1x1 kernel, no padding: a per-pixel mix of channels
    const double mix[2 * 2] = {2, 3, -1, 0.5};   // (K=2, C=2, 1, 1)
    herd__ref_conv_forward(in, mix, NULL, out, 1, 2, 3, 4, 2, 1, 1, 0);
    for (size_t i = 0; i < 12; i++) {
        ASSERT_NEAR(out[i], 2 * in[i] + 3 * in[12 + i], 0, 0);
        ASSERT_NEAR(out[12 + i], -in[i] + 0.5 * in[12 + i], 0, 0);
    }
}

typedef struct conv_case {
    size_t N, C, H, W, K, R, stride, pad;
    double *in, *w, *b, *out, *r;
} conv_case;

static size_t conv_nout(const conv_case *c)
{
    size_t Ho = (c->H + 2 * c->pad - c->R) / c->stride + 1;
    size_t Wo = (c->W + 2 * c->pad - c->R) / c->stride + 1;
    return c->N * c->K * Ho * Wo;
}

static double conv_loss(void *p)
{
    conv_case *c = p;
    herd__ref_conv_forward(c->in, c->w, c->b, c->out, c->N, c->C, c->H, c->W, c->K, c->R,
                           c->stride, c->pad);
    return dot(c->out, c->r, conv_nout(c));
}

static void test_conv_grad_fd(void)
{
    // N, C, H, W, K, R, stride, pad
    const size_t shapes[][8] = {
        {2, 3, 5, 7, 4, 3, 1, 1},   // the common case, H != W
        {2, 2, 7, 6, 3, 3, 2, 1},   // stride 2
        {1, 3, 6, 9, 2, 5, 1, 2},   // kernel 5, pad 2
        {2, 2, 8, 7, 2, 5, 2, 2},   // kernel 5, stride 2
        {3, 1, 6, 5, 2, 3, 2, 0},   // stride 2 leaves the last row/column unused
        {2, 3, 5, 4, 3, 1, 1, 0},   // 1x1
        {2, 2, 6, 5, 3, 1, 2, 0},   // 1x1 stride 2
        {1, 2, 4, 3, 2, 3, 1, 2},   // pad 2 with a 3x3: border outputs see only padding
    };
    herd_rng rng;
    herd_rng_seed(&rng, 12, 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const size_t *sh = shapes[s];
        conv_case c = {sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], sh[6], sh[7], 0, 0, 0, 0, 0};
        size_t nin = c.N * c.C * c.H * c.W, nw = c.K * c.C * c.R * c.R, nout = conv_nout(&c);
        c.in = alloc(nin), c.w = alloc(nw), c.b = alloc(c.K);
        c.out = alloc(nout), c.r = alloc(nout);
        fill_normal(&rng, c.in, nin);
        fill_normal(&rng, c.w, nw);
        fill_normal(&rng, c.b, c.K);
        fill_normal(&rng, c.r, nout);
        double *din = alloc(nin), *dw = alloc(nw), *db = alloc(c.K), *alone = alloc(nin + nw);
        fill_nan(din, nin), fill_nan(dw, nw), fill_nan(db, c.K);
        herd__ref_conv_backward(c.in, c.w, c.r, din, dw, db, c.N, c.C, c.H, c.W, c.K, c.R,
                                c.stride, c.pad);
        check_grad("conv din", conv_loss, &c, c.in, din, nin);
        check_grad("conv dw", conv_loss, &c, c.w, dw, nw);
        check_grad("conv db", conv_loss, &c, c.b, db, c.K);

        fill_nan(alone, nin);
        herd__ref_conv_backward(c.in, c.w, c.r, alone, NULL, NULL, c.N, c.C, c.H, c.W, c.K, c.R,
                                c.stride, c.pad);
        assert_same("conv din alone", alone, din, nin);
        fill_nan(alone, nw);
        herd__ref_conv_backward(c.in, c.w, c.r, NULL, alone, NULL, c.N, c.C, c.H, c.W, c.K, c.R,
                                c.stride, c.pad);
        assert_same("conv dw alone", alone, dw, nw);
        fill_nan(alone, c.K);
        herd__ref_conv_backward(c.in, c.w, c.r, NULL, NULL, alone, c.N, c.C, c.H, c.W, c.K, c.R,
                                c.stride, c.pad);
        assert_same("conv db alone", alone, db, c.K);

        free(c.in), free(c.w), free(c.b), free(c.out), free(c.r);
        free(din), free(dw), free(db), free(alone);
    }
}

/* ---- relu ---- */

typedef struct eltwise_case {
    size_t n;
    double *in, *out, *r;
} eltwise_case;

static double relu_loss(void *p)
{
    eltwise_case *c = p;
    herd__ref_relu_forward(c->in, c->out, c->n);
    return dot(c->out, c->r, c->n);
}

static void test_relu_forward_and_grad_fd(void)
{
    const double in[5] = {-2, -0.0, 0, 0.5, 3};
    const double want[5] = {0, 0, 0, 0.5, 3};
    double out[5], din[5];
    const double dout[5] = {1, 2, 3, 4, 5};
    const double want_din[5] = {0, 0, 0, 4, 5};   // no gradient at exactly 0
    herd__ref_relu_forward(in, out, 5);
    assert_same("relu out", out, want, 5);
    fill_nan(din, 5);
    herd__ref_relu_backward(in, dout, din, 5);
    assert_same("relu din", din, want_din, 5);
    herd__ref_relu_backward(in, dout, NULL, 5);

    herd_rng rng;
    herd_rng_seed(&rng, 13, 0);
    eltwise_case c = {64, alloc(64), alloc(64), alloc(64)};
    fill_distinct(&rng, c.in, c.n, 0.01);
    fill_normal(&rng, c.r, c.n);
    double *grad = alloc(c.n);
    fill_nan(grad, c.n);
    herd__ref_relu_backward(c.in, c.r, grad, c.n);
    check_grad("relu din", relu_loss, &c, c.in, grad, c.n);
    free(c.in), free(c.out), free(c.r), free(grad);
}

/* ---- max pooling ---- */

static void test_maxpool_hand(void)
{
    const double in[16] = {
        1,  9,  2, 3,
        4,  0,  8, 7,
        -1, -2, 5, 5,
        -3, -4, 5, 5,
    };
    double out[4];
    const double want[4] = {9, 8, -1, 5};
    herd__ref_maxpool_forward(in, out, 1, 1, 4, 4, 2, 2);
    assert_same("maxpool 2/2", out, want, 4);

    // overlapping 3x3 windows, stride 1
    const double want3[4] = {9, 9, 8, 8};
    herd__ref_maxpool_forward(in, out, 1, 1, 4, 4, 3, 1);
    assert_same("maxpool 3/1", out, want3, 4);

    // backward routes each dout to its window's argmax; the all-5 window is a
    // four-way tie and goes to its first element (2,2)
    const double dout[4] = {1, 2, 3, 4};
    double din[16];
    const double want_din[16] = {
        0, 1, 0, 0,
        0, 0, 2, 0,
        3, 0, 4, 0,
        0, 0, 0, 0,
    };
    fill_nan(din, 16);
    herd__ref_maxpool_backward(in, dout, din, 1, 1, 4, 4, 2, 2);
    assert_same("maxpool din", din, want_din, 16);

    // overlapping windows that share a maximum add up there: 9 at (0,1) is
    // the max of both top windows, 8 at (1,2) of both bottom ones
    const double want_din3[16] = {
        0, 3, 0, 0,
        0, 0, 7, 0,
        0, 0, 0, 0,
        0, 0, 0, 0,
    };
    herd__ref_maxpool_backward(in, dout, din, 1, 1, 4, 4, 3, 1);
    assert_same("maxpool 3/1 din", din, want_din3, 16);
    herd__ref_maxpool_backward(in, dout, NULL, 1, 1, 4, 4, 3, 1);
}

typedef struct pool_case {
    size_t N, C, H, W, k, s;
    double *in, *out, *r;
} pool_case;

static size_t pool_nout(const pool_case *c)
{
    return c->N * c->C * ((c->H - c->k) / c->s + 1) * ((c->W - c->k) / c->s + 1);
}

static double maxpool_loss(void *p)
{
    pool_case *c = p;
    herd__ref_maxpool_forward(c->in, c->out, c->N, c->C, c->H, c->W, c->k, c->s);
    return dot(c->out, c->r, pool_nout(c));
}

static void test_maxpool_grad_fd(void)
{
    // N, C, H, W, k, s
    const size_t shapes[][6] = {
        {2, 3, 4, 4, 2, 2},   // the common case
        {1, 2, 7, 5, 3, 2},   // overlapping, H and W not multiples of s
        {2, 1, 6, 8, 3, 1},   // heavily overlapping
        {1, 2, 5, 7, 2, 3},   // gaps between windows
    };
    herd_rng rng;
    herd_rng_seed(&rng, 14, 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const size_t *sh = shapes[s];
        pool_case c = {sh[0], sh[1], sh[2], sh[3], sh[4], sh[5], 0, 0, 0};
        size_t nin = c.N * c.C * c.H * c.W, nout = pool_nout(&c);
        c.in = alloc(nin), c.out = alloc(nout), c.r = alloc(nout);
        fill_distinct(&rng, c.in, nin, 0.01);
        fill_normal(&rng, c.r, nout);
        double *din = alloc(nin);
        fill_nan(din, nin);
        herd__ref_maxpool_backward(c.in, c.r, din, c.N, c.C, c.H, c.W, c.k, c.s);
        check_grad("maxpool din", maxpool_loss, &c, c.in, din, nin);
        free(c.in), free(c.out), free(c.r), free(din);
    }
}

/* ---- global average pooling ---- */

static double gavgpool_loss(void *p)
{
    pool_case *c = p;
    herd__ref_gavgpool_forward(c->in, c->out, c->N, c->C, c->H * c->W);
    return dot(c->out, c->r, c->N * c->C);
}

static void test_gavgpool_forward_and_grad_fd(void)
{
    const double in[8] = {1, 2, 3, 4, 10, 20, 30, 40};   // (1,2,4)
    const double want[2] = {2.5, 25};
    double out[2];
    herd__ref_gavgpool_forward(in, out, 1, 2, 4);
    assert_same("gavgpool out", out, want, 2);

    // N, C, H, W (k and s unused)
    const size_t shapes[][4] = {{2, 3, 5, 4}, {1, 1, 7, 1}, {3, 2, 1, 1}};
    herd_rng rng;
    herd_rng_seed(&rng, 15, 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const size_t *sh = shapes[s];
        pool_case c = {sh[0], sh[1], sh[2], sh[3], 0, 0, 0, 0, 0};
        size_t nin = c.N * c.C * c.H * c.W, nout = c.N * c.C;
        c.in = alloc(nin), c.out = alloc(nout), c.r = alloc(nout);
        fill_normal(&rng, c.in, nin);
        fill_normal(&rng, c.r, nout);
        double *din = alloc(nin);
        fill_nan(din, nin);
        herd__ref_gavgpool_backward(c.r, din, c.N, c.C, c.H * c.W);
        check_grad("gavgpool din", gavgpool_loss, &c, c.in, din, nin);
        herd__ref_gavgpool_backward(c.r, NULL, c.N, c.C, c.H * c.W);
        free(c.in), free(c.out), free(c.r), free(din);
    }
}

/* ---- batch norm ---- */

static void test_batchnorm_forward_stats(void)
{
    const size_t N = 4, C = 3, HW = 5;
    const double eps = 1e-5;
    herd_rng rng;
    herd_rng_seed(&rng, 16, 0);
    double in[4 * 3 * 5], out[4 * 3 * 5], mean[3], var[3];
    for (size_t n = 0; n < N; n++)
        for (size_t c = 0; c < C; c++)
            for (size_t i = 0; i < HW; i++)
                in[(n * C + c) * HW + i] = 3.0 * (double)(c + 1) * herd_rng_normal(&rng) + 5.0 * (double)c;

    const double gammas[2][3] = {{1, 1, 1}, {2, 0.5, -1}};
    const double betas[2][3] = {{0, 0, 0}, {3, -1, 0.25}};
    for (size_t t = 0; t < 2; t++) {
        herd__ref_batchnorm_forward(in, gammas[t], betas[t], out, mean, var, N, C, HW, eps);
        for (size_t c = 0; c < C; c++) {
            // the returned statistics, straight from the definition
            double m = 0, v = 0, om = 0, ov = 0;
            for (size_t n = 0; n < N; n++)
                for (size_t i = 0; i < HW; i++)
                    m += in[(n * C + c) * HW + i], om += out[(n * C + c) * HW + i];
            m /= (double)(N * HW), om /= (double)(N * HW);
            for (size_t n = 0; n < N; n++) {
                for (size_t i = 0; i < HW; i++) {
                    double d = in[(n * C + c) * HW + i] - m, od = out[(n * C + c) * HW + i] - om;
                    v += d * d, ov += od * od;
                }
            }
            v /= (double)(N * HW), ov /= (double)(N * HW);
            ASSERT_NEAR(mean[c], m, 1e-12, 1e-12);
            ASSERT_NEAR(var[c], v, 1e-12, 1e-12);
            // out has mean beta and variance gamma^2 * var / (var + eps)
            double g = gammas[t][c];
            ASSERT_NEAR(om, betas[t][c], 1e-12, 0);
            ASSERT_NEAR(ov, g * g * v / (v + eps), 1e-12, 1e-12);
            if (t == 0)
                ASSERT_NEAR(ov, 1.0, 1e-5, 0);
        }
    }
    // mean and var may be NULL
    herd__ref_batchnorm_forward(in, gammas[1], betas[1], out, NULL, NULL, N, C, HW, eps);
}

typedef struct bn_case {
    size_t N, C, HW;
    double eps;
    double *in, *gamma, *beta, *out, *r;
} bn_case;

static double batchnorm_loss(void *p)
{
    bn_case *c = p;
    herd__ref_batchnorm_forward(c->in, c->gamma, c->beta, c->out, NULL, NULL, c->N, c->C, c->HW,
                                c->eps);
    return dot(c->out, c->r, c->N * c->C * c->HW);
}

static void test_batchnorm_grad_fd(void)
{
    // N, C, HW
    const size_t shapes[][3] = {{4, 3, 5}, {2, 2, 1}, {1, 2, 6}, {3, 1, 4}};
    herd_rng rng;
    herd_rng_seed(&rng, 17, 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        bn_case c = {shapes[s][0], shapes[s][1], shapes[s][2], 1e-5, 0, 0, 0, 0, 0};
        size_t n = c.N * c.C * c.HW;
        c.in = alloc(n), c.gamma = alloc(c.C), c.beta = alloc(c.C);
        c.out = alloc(n), c.r = alloc(n);
        fill_normal(&rng, c.in, n);
        fill_normal(&rng, c.gamma, c.C);
        fill_normal(&rng, c.beta, c.C);
        fill_normal(&rng, c.r, n);
        double *din = alloc(n), *dgamma = alloc(c.C), *dbeta = alloc(c.C), *alone = alloc(n);
        fill_nan(din, n), fill_nan(dgamma, c.C), fill_nan(dbeta, c.C);
        herd__ref_batchnorm_backward(c.in, c.gamma, c.r, din, dgamma, dbeta, c.N, c.C, c.HW, c.eps);
        check_grad("batchnorm din", batchnorm_loss, &c, c.in, din, n);
        check_grad("batchnorm dgamma", batchnorm_loss, &c, c.gamma, dgamma, c.C);
        check_grad("batchnorm dbeta", batchnorm_loss, &c, c.beta, dbeta, c.C);

        fill_nan(alone, n);
        herd__ref_batchnorm_backward(c.in, c.gamma, c.r, alone, NULL, NULL, c.N, c.C, c.HW, c.eps);
        assert_same("batchnorm din alone", alone, din, n);
        fill_nan(alone, c.C);
        herd__ref_batchnorm_backward(c.in, c.gamma, c.r, NULL, alone, NULL, c.N, c.C, c.HW, c.eps);
        assert_same("batchnorm dgamma alone", alone, dgamma, c.C);
        fill_nan(alone, c.C);
        herd__ref_batchnorm_backward(c.in, c.gamma, c.r, NULL, NULL, alone, c.N, c.C, c.HW, c.eps);
        assert_same("batchnorm dbeta alone", alone, dbeta, c.C);

        free(c.in), free(c.gamma), free(c.beta), free(c.out), free(c.r);
        free(din), free(dgamma), free(dbeta), free(alone);
    }
}

/* ---- softmax cross-entropy ---- */

static void test_softmax_xent_closed_form(void)
{
    // equal logits: loss log K, gradient (1/K - onehot) / N
    const size_t N = 3, K = 5;
    double logits[15], dlogits[15];
    const int32_t labels[3] = {0, 4, 2};
    for (size_t i = 0; i < N * K; i++)
        logits[i] = 0.7;
    fill_nan(dlogits, N * K);
    ASSERT_NEAR(herd__ref_softmax_xent(logits, labels, dlogits, N, K), log(5.0), 1e-15, 1e-15);
    for (size_t n = 0; n < N; n++)
        for (size_t k = 0; k < K; k++)
            ASSERT_NEAR(dlogits[n * K + k], (0.2 - (k == (size_t)labels[n])) / 3.0, 1e-16, 1e-15);

    // hand value for one row: -log(e^2 / (e^0 + e^1 + e^2))
    const double z[3] = {0, 1, 2};
    const int32_t l2 = 2;
    ASSERT_NEAR(herd__ref_softmax_xent(z, &l2, NULL, 1, 3), log(1 + exp(1.0) + exp(2.0)) - 2.0,
                1e-15, 1e-14);

    // stable: shifting by 1000 (exp overflows without the max) changes nothing
    const double big[3] = {1000, 1001, 1002};
    double dz[3], dbig[3];
    double l = herd__ref_softmax_xent(z, &l2, dz, 1, 3);
    double lbig = herd__ref_softmax_xent(big, &l2, dbig, 1, 3);
    ASSERT_TRUE(isfinite(lbig));
    ASSERT_NEAR(lbig, l, 1e-12, 1e-12);
    for (size_t k = 0; k < 3; k++)
        ASSERT_NEAR(dbig[k], dz[k], 1e-12, 1e-12);
}

typedef struct xent_case {
    size_t N, K;
    double *logits;
    const int32_t *labels;
} xent_case;

static double xent_loss(void *p)
{
    xent_case *c = p;
    return herd__ref_softmax_xent(c->logits, c->labels, NULL, c->N, c->K);
}

static void test_softmax_xent_grad(void)
{
    // N, K
    const size_t shapes[][2] = {{4, 5}, {1, 3}, {3, 10}, {5, 2}};
    herd_rng rng;
    herd_rng_seed(&rng, 18, 0);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t N = shapes[s][0], K = shapes[s][1];
        int32_t labels[8];
        for (size_t n = 0; n < N; n++)
            labels[n] = (int32_t)herd_rng_below(&rng, K);
        xent_case c = {N, K, alloc(N * K), labels};
        for (size_t i = 0; i < N * K; i++)
            c.logits[i] = 3.0 * herd_rng_normal(&rng);
        double *grad = alloc(N * K);
        fill_nan(grad, N * K);
        double loss = herd__ref_softmax_xent(c.logits, labels, grad, N, K);
        ASSERT_TRUE(loss > 0);
        for (size_t n = 0; n < N; n++) {
            // softmax minus one-hot: sums to 0, only the label is negative
            const double *g = grad + n * K;
            double sum = 0;
            for (size_t k = 0; k < K; k++) {
                sum += g[k];
                ASSERT_TRUE((k == (size_t)labels[n]) ? g[k] < 0 : g[k] > 0);
            }
            ASSERT_NEAR(sum, 0.0, 1e-14, 0);
        }
        check_grad("softmax_xent dlogits", xent_loss, &c, c.logits, grad, N * K);
        free(c.logits), free(grad);
    }
}

const herd_test herd_tests_ref[] = {
    {"ref_gemm_hand", test_gemm_hand, 10, HERD_TEST_ONE_THREAD},
    {"ref_linear_forward_hand", test_linear_forward_hand, 10, HERD_TEST_ONE_THREAD},
    {"ref_linear_grad_fd", test_linear_grad_fd, 10, HERD_TEST_ONE_THREAD},
    {"ref_conv_forward_closed_form", test_conv_forward_closed_form, 10, HERD_TEST_ONE_THREAD},
    {"ref_conv_grad_fd", test_conv_grad_fd, 10, HERD_TEST_ONE_THREAD},
    {"ref_relu_forward_and_grad_fd", test_relu_forward_and_grad_fd, 10, HERD_TEST_ONE_THREAD},
    {"ref_maxpool_hand", test_maxpool_hand, 10, HERD_TEST_ONE_THREAD},
    {"ref_maxpool_grad_fd", test_maxpool_grad_fd, 10, HERD_TEST_ONE_THREAD},
    {"ref_gavgpool_forward_and_grad_fd", test_gavgpool_forward_and_grad_fd, 10, HERD_TEST_ONE_THREAD},
    {"ref_batchnorm_forward_stats", test_batchnorm_forward_stats, 10, HERD_TEST_ONE_THREAD},
    {"ref_batchnorm_grad_fd", test_batchnorm_grad_fd, 10, HERD_TEST_ONE_THREAD},
    {"ref_softmax_xent_closed_form", test_softmax_xent_closed_form, 10, HERD_TEST_ONE_THREAD},
    {"ref_softmax_xent_grad", test_softmax_xent_grad, 10, HERD_TEST_ONE_THREAD},
    HERD_TEST_END,
};
