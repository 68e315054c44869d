/* The layers descriptions add beyond the built-in models' (src/nn/act.c,
 * avgpool.c): their double references (ref_act.c) against hand values and
 * central finite differences, the float kernels against the references,
 * and dropout inside a model. A whole model of them is checked against
 * finite differences in test_nn.c (nn_grad_description). */
#include "harness.h"
#include "herd/herd_nn.h"
#include "herd/herd_rng.h"
#include "nn/act.h"
#include "nn/ref.h"

#include <math.h>
#include <string.h>

#define FD_H 1e-5

typedef struct fd_case {
    int kind;  /* 0-3 an activation, 4 dropout, 5 average pooling */
    const double *in, *r;
    const uint8_t *keep;
    size_t n, nout, N, C, H, W, k, s;
} fd_case;

static void forward(const fd_case *fc, const double *in, double *out)
{
    if (fc->kind < 4)
        herd__ref_act_forward(fc->kind, in, out, fc->n);
    else if (fc->kind == 4)
        herd__ref_dropout_forward(in, fc->keep, out, fc->n, 0.25);
    else
        herd__ref_avgpool_forward(in, out, fc->N, fc->C, fc->H, fc->W, fc->k, fc->s);
}

/* L = sum(out * r), so dout = r. */
static double loss(const fd_case *fc, const double *in, double *out)
{
    forward(fc, in, out);
    double l = 0;
    for (size_t i = 0; i < fc->nout; i++)
        l += out[i] * fc->r[i];
    return l;
}

static void check_fd(const fd_case *fc)
{
    double *x = malloc(fc->n * sizeof *x), *din = malloc(fc->n * sizeof *din), *out = malloc(fc->nout * sizeof *out);
    ASSERT_TRUE(x && din && out);
    memcpy(x, fc->in, fc->n * sizeof *x);
    for (size_t i = 0; i < fc->n; i++)
        din[i] = NAN; /* backward overwrites */
    if (fc->kind < 4)
        herd__ref_act_backward(fc->kind, x, fc->r, din, fc->n);
    else if (fc->kind == 4)
        herd__ref_dropout_backward(fc->keep, fc->r, din, fc->n, 0.25);
    else
        herd__ref_avgpool_backward(fc->r, din, fc->N, fc->C, fc->H, fc->W, fc->k, fc->s);
    for (size_t i = 0; i < fc->n; i++) {
        x[i] = fc->in[i] + FD_H;
        double lp = loss(fc, x, out);
        x[i] = fc->in[i] - FD_H;
        double lm = loss(fc, x, out);
        x[i] = fc->in[i];
        double fd = (lp - lm) / (2 * FD_H);
        if (!(fabs(din[i] - fd) <= 1e-8 + 1e-6 * fabs(fd)))
            herd_test_fail(__FILE__, __LINE__, "kind %d [%zu]: backward %.12g vs finite difference %.12g", fc->kind, i,
                           din[i], fd);
    }
    free(x), free(din), free(out);
}

enum { N = 2, C = 3, H = 7, W = 6, NX = N * C * H * W };

/* Inputs away from relu's kink by more than the step (a grid of 0.05 from
 * -3.15, zero excluded), a random r. */
static void fill(double *x, double *r, uint8_t *keep)
{
    herd_rng rng;
    herd_rng_seed(&rng, 5, 1);
    for (size_t i = 0; i < NX; i++) {
        x[i] = -3.125 + 0.05 * (double)((i * 37) % NX % 126);
        r[i] = herd_rng_normal(&rng);
        keep[i] = herd_rng_uniform(&rng) >= 0.25f;
    }
}

static void test_ref_hand(void)
{
    const double x[4] = {-1, 0.5, 2, -0.25};
    double y[4];
    herd__ref_act_forward(0, x, y, 4);
    ASSERT_NEAR(y[0], 0, 0, 0);
    ASSERT_NEAR(y[2], 2, 0, 0);
    herd__ref_act_forward(1, x, y, 4);
    ASSERT_NEAR(y[1], 0.46211715726000974, 1e-15, 0); /* tanh(0.5) */
    herd__ref_act_forward(2, x, y, 4);
    ASSERT_NEAR(y[0], 0.2689414213699951, 1e-15, 0); /* 1 / (1 + e) */
    herd__ref_act_forward(3, x, y, 4);
    ASSERT_NEAR(y[2], 1.9544997361036416, 1e-15, 0);   /* 2 Phi(2) */
    ASSERT_NEAR(y[0], -0.15865525393145707, 1e-15, 0); /* -Phi(-1) */
    /* a 4x4 plane of 0..15, 2x2 windows of stride 2 and of stride 1 */
    double in[16], out[9];
    for (int i = 0; i < 16; i++)
        in[i] = i;
    herd__ref_avgpool_forward(in, out, 1, 1, 4, 4, 2, 2);
    const double want[4] = {2.5, 4.5, 10.5, 12.5};
    for (int i = 0; i < 4; i++)
        ASSERT_NEAR(out[i], want[i], 0, 0);
    herd__ref_avgpool_forward(in, out, 1, 1, 4, 4, 2, 1);
    ASSERT_NEAR(out[4], 7.5, 0, 0); /* (5 + 6 + 9 + 10) / 4 */
}

static void test_ref_grad_fd(void)
{
    double x[NX], r[NX];
    uint8_t keep[NX];
    fill(x, r, keep);
    for (int kind = 0; kind < 5; kind++)
        check_fd(&(fd_case){kind, x, r, keep, NX, NX, 0, 0, 0, 0, 0, 0});
    size_t Ho = (H - 3) / 2 + 1, Wo = (W - 3) / 2 + 1;
    check_fd(&(fd_case){5, x, r, keep, NX, N * C * Ho * Wo, N, C, H, W, 3, 2});
    check_fd(&(fd_case){5, x, r, keep, NX, N * C * (H - 1) * (W - 1), N, C, H, W, 2, 1});
}

/* The float kernels against the references: within float rounding, and
 * accumulating onto what is there where asked. */
static void test_kernels_vs_ref(void)
{
    double x[NX], r[NX], yd[NX], dd[NX];
    uint8_t keep[NX];
    float xf[NX], rf[NX], y[NX], d[NX];
    fill(x, r, keep);
    for (size_t i = 0; i < NX; i++)
        xf[i] = (float)x[i], rf[i] = (float)r[i];
    for (int a = 0; a < 4; a++) {
        herd__ref_act_forward(a, x, yd, NX);
        herd__ref_act_backward(a, x, r, dd, NX);
        herd__act_forward((herd__act)a, xf, y, NX);
        for (size_t i = 0; i < NX; i++)
            d[i] = 1.0f;
        herd__act_backward((herd__act)a, xf, y, rf, d, NX, true);
        for (size_t i = 0; i < NX; i++) {
            ASSERT_NEAR(y[i], yd[i], 1e-6, 1e-6);
            ASSERT_NEAR(d[i] - 1.0f, dd[i], 2e-6, 2e-5);
        }
    }
    herd__ref_dropout_forward(x, keep, yd, NX, 0.25);
    herd__dropout_apply(xf, keep, y, NX, 0.25f, false);
    for (size_t i = 0; i < NX; i++)
        ASSERT_NEAR(y[i], yd[i], 0, 1e-6);
    /* avgpool: the reference's NCHW is CNHW's planes in another order, the same planes */
    size_t Ho = (H - 3) / 2 + 1, Wo = (W - 3) / 2 + 1, no = N * C * Ho * Wo;
    herd__ref_avgpool_forward(x, yd, N, C, H, W, 3, 2);
    herd__avgpool_forward(xf, y, N * C, H, W, 3, 2);
    for (size_t i = 0; i < no; i++)
        ASSERT_NEAR(y[i], yd[i], 1e-6, 1e-6);
    herd__ref_avgpool_backward(r, dd, N, C, H, W, 3, 2);
    for (size_t i = 0; i < NX; i++)
        d[i] = NAN;
    herd__avgpool_backward(rf, d, N * C, H, W, 3, 2, false);
    for (size_t i = 0; i < NX; i++)
        ASSERT_NEAR(d[i], dd[i], 1e-6, 1e-6);
}

/* Dropout in a model: training drops about p of the elements and scales
 * the rest by 1 / (1 - p), backward sends the gradient through the same
 * mask, a new mask each step; evaluation passes its input through. */
static void test_dropout_in_model(void)
{
    herd_model *m = NULL;
    herd_err err = {0};
    const float p = 0.3f;
    size_t B = 64, D = 128, dim = 16;
    ASSERT_OK(herd_model_create_from_description("d", "linear 128\ndropout 0.3\nlinear classes\n", 1, 4, 4, 10, B, 3,
                                                 &m, &err));
    float *x = malloc(B * dim * sizeof *x);
    int32_t y[64];
    for (size_t i = 0; i < B * dim; i++)
        x[i] = (float)((i * 7) % 13) / 13.0f - 0.4f;
    for (size_t i = 0; i < B; i++)
        y[i] = (int32_t)(i % 10);
    herd_layer *fc = m->layers[1], *drop = m->layers[2]; /* [0] flatten */
    ASSERT_TRUE(drop->ops == &herd__dropout_ops);
    float *mask1 = malloc(B * D * sizeof *mask1);
    for (int step = 0; step < 2; step++) {
        herd_model_forward(m, x, B, true);
        herd_model_loss(m, y, B, NULL);
        ASSERT_OK(herd_model_backward(m, B, NULL, NULL));
        size_t dropped = 0, same = 0;
        for (size_t i = 0; i < B * D; i++) {
            bool kept = drop->out[i] != 0.0f || fc->out[i] == 0.0f;
            dropped += !kept;
            if (kept)
                ASSERT_NEAR(drop->out[i], fc->out[i] / (1 - p), 0, 1e-6);
            ASSERT_NEAR(fc->dout[i], kept ? drop->dout[i] / (1 - p) : 0.0f, 0, 1e-6);
            if (step == 0)
                mask1[i] = kept;
            else
                same += mask1[i] == kept;
        }
        /* 8192 draws of p = 0.3: the count's standard deviation is 41; 6 of them */
        ASSERT_NEAR((double)dropped, 0.3 * (double)(B * D), 250, 0);
        if (step == 1) /* a new mask: agreeing with the last one about p^2 + (1-p)^2 of the time */
            ASSERT_NEAR((double)same, 0.58 * (double)(B * D), 300, 0);
    }
    herd_model_forward(m, x, B, false);
    ASSERT_TRUE(!memcmp(drop->out, fc->out, B * D * sizeof(float)));
    free(x), free(mask1);
    herd_model_free(m);
}

const herd_test herd_tests_layers[] = {
    {"layers_ref_hand", test_ref_hand, 10, HERD_TEST_ONE_THREAD},
    {"layers_ref_grad_fd", test_ref_grad_fd, 10, HERD_TEST_ONE_THREAD},
    {"layers_kernels_vs_ref", test_kernels_vs_ref, 10, HERD_TEST_ONE_THREAD},
    {"layers_dropout_in_model", test_dropout_in_model, 10},
    HERD_TEST_END,
};
