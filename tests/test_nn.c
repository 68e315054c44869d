/* Model-level tests: parameter counts against closed forms, the gradient of
 * whole models against finite differences, backward's ready ranges,
 * determinism and batch-norm modes. Layer kernels are checked one by one in
 * test_ref.c / test_kernels.c; this file checks how the model wires them. */
#include "fixtures.h"
#include "harness.h"
#include "herd/herd_nn.h"
#include "herd/herd_rng.h"
#include "nn/kernels.h"
#include "nn/ref.h"

#include <stdint.h>

typedef struct model_case {
    const char *name;
    size_t c, h, w, k, batch;
} model_case;

static herd_model *make(const model_case *mc, uint64_t seed)
{
    herd_model *m = NULL;
    herd_err err = {0};
    herd_status st = herd_model_create(mc->name, mc->c, mc->h, mc->w, mc->k, mc->batch, seed, &m, &err);
    if (st != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "create %s: %s", mc->name, err.msg);
    return m;
}

/* The loss in double from the float logits, so finite differences see
 * only the forward pass's rounding. */
static double loss_of(herd_model *m, const float *x, const int32_t *y, size_t n, size_t k)
{
    herd_model_forward(m, x, n, true);
    const float *z = herd_model_logits(m);
    double *zd = malloc(n * k * sizeof *zd);
    for (size_t i = 0; i < n * k; i++)
        zd[i] = z[i];
    double l = herd__ref_softmax_xent(zd, y, NULL, n, k);
    free(zd);
    return l;
}

static void test_param_counts(void)
{
    static const struct {
        const char *name;
        size_t c, h, w, want;
    } cases[] = {
        /* PyTorch's sum(p.numel()) for the same definitions */
        {"linear", 1, 28, 28, 784 * 10 + 10},
        {"mlp", 1, 28, 28, 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10},
        {"lenet", 1, 28, 28, (6 * 25 + 6) + (16 * 150 + 16) + (400 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10)},
        {"cnn", 1, 28, 28, (32 * 25 + 32) + (64 * 800 + 64) + (3136 * 1024 + 1024) + (1024 * 10 + 10)},
        /* stem + 3 stages; 2 BN params per channel; two 1x1 projections */
        {"resnet20", 1, 28, 28,
         (16 * 9 + 32) + 3 * 2 * (16 * 16 * 9 + 32) + (32 * 16 * 9 + 64 + 32 * 32 * 9 + 64 + 32 * 16 + 64) +
             2 * 2 * (32 * 32 * 9 + 64) + (64 * 32 * 9 + 128 + 64 * 64 * 9 + 128 + 64 * 32 + 128) +
             2 * 2 * (64 * 64 * 9 + 128) + 64 * 10 + 10},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_case mc = {cases[i].name, cases[i].c, cases[i].h, cases[i].w, 10, 4};
        herd_model *m = make(&mc, 1);
        ASSERT_EQ_INT(herd_model_nparams(m), cases[i].want);
        /* backward: two products per forward one, less the input gradient
         * of each layer that reads the model input (through flatten too) */
        double fwd = herd_model_forward_flops(m), train = herd_model_train_flops(m);
        ASSERT_TRUE(fwd > 0 && train >= 2 * fwd && train < 3 * fwd);
        herd_model_free(m);
    }
    /* linear and mlp in closed form: no product for flatten's gradient */
    herd_model *m = make(&(model_case){"linear", 1, 28, 28, 10, 4}, 1);
    ASSERT_NEAR(herd_model_train_flops(m), 2 * (2.0 * 784 * 10), 0, 1e-12);
    herd_model_free(m);
    m = make(&(model_case){"mlp", 1, 28, 28, 10, 4}, 1);
    double f1 = 2.0 * 784 * 1024, f2 = 2.0 * 1024 * 1024, f3 = 2.0 * 1024 * 10;
    ASSERT_NEAR(herd_model_forward_flops(m), f1 + f2 + f3, 0, 1e-12);
    ASSERT_NEAR(herd_model_train_flops(m), 2 * f1 + 3 * (f2 + f3), 0, 1e-12);
    herd_model_free(m);
}

static void test_create_errors(void)
{
    herd_model *m = (herd_model *)1;
    herd_err err = {0};
    ASSERT_EQ_INT(herd_model_create("nope", 1, 28, 28, 10, 4, 1, &m, &err), HERD_EINVAL);
    ASSERT_TRUE(m == NULL);
    ASSERT_STR_CONTAINS(err.msg, "unknown model 'nope'");
    /* lenet's second 5x5 convolution cannot fit a 4x4 input */
    ASSERT_EQ_INT(herd_model_create("lenet", 1, 4, 4, 10, 4, 1, &m, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "does not fit");
    ASSERT_EQ_INT(herd_model_create("mlp", 1, 28, 28, 1, 4, 1, &m, &err), HERD_EINVAL);
    ASSERT_EQ_INT(herd_model_create("mlp", 1, 28, 28, 10, 0, 1, &m, &err), HERD_EINVAL);
}

typedef struct ready_log {
    size_t n, off[64], len[64];
} ready_log;

static herd_status record_ready(void *ctx, size_t off, size_t len)
{
    ready_log *l = ctx;
    if (l->n < 64)
        l->off[l->n] = off, l->len[l->n] = len;
    l->n++;
    return HERD_OK;
}

/* Directional derivatives (L(p+hv) - L(p-hv)) / 2h  vs  g.v along random
 * directions v: with per_layer, one direction per parameterised layer, of
 * which at least min_frac must agree within rtol; otherwise three directions
 * over all parameters, which must all agree. */
static void check_gradient(const model_case *mc, double h, double rtol, bool per_layer, double min_frac)
{
    herd_model *m = make(mc, 3);
    size_t n = mc->batch, dim = mc->c * mc->h * mc->w, np = herd_model_nparams(m);
    float *x = malloc(n * dim * sizeof *x);
    int32_t *y = malloc(n * sizeof *y);
    herd_test_random_batch(n, dim, mc->k, x, y, 5, 99);
    float *p = herd_model_params(m), *g = herd_model_grads(m);
    float *p0 = malloc(np * sizeof *p0), *g0 = malloc(np * sizeof *g0), *v = malloc(np * sizeof *v);
    memcpy(p0, p, np * sizeof *p);
    herd_model_forward(m, x, n, true);
    herd_model_loss(m, y, n, NULL);
    ready_log ranges = {0};
    ASSERT_OK(herd_model_backward(m, n, record_ready, &ranges));
    ASSERT_TRUE(ranges.n <= 64);
    memcpy(g0, g, np * sizeof *g);
    /* The forward's own rounding, as the gap between two ways of computing
     * the same loss (oneDNN's convolutions and im2col's): a difference of
     * losses 2h apart cannot be trusted closer than about twice that over
     * 2h. It matters in a deep model (ResNet-20: a few float ulps of the
     * loss, 0.1-0.4 of a layer's derivative at h = 1e-5). */
    double noise = 0;
    if (per_layer) {
        double l0 = loss_of(m, x, y, n, mc->k);
        herd_model_set_conv_im2col(m, true);
        noise = fabs(loss_of(m, x, y, n, mc->k) - l0);
        herd_model_set_conv_im2col(m, false);
    }
    herd_rng r;
    herd_rng_seed(&r, 11, 0);
    size_t good = 0, ntries = per_layer ? ranges.n : 3;
    for (size_t k = 0; k < ntries; k++) {
        size_t lo = per_layer ? ranges.off[k] : 0, hi = per_layer ? lo + ranges.len[k] : np;
        double gv = 0;
        for (size_t i = lo; i < hi; i++) {
            v[i] = herd_rng_normal(&r);
            gv += (double)g0[i] * v[i];
        }
        for (size_t i = lo; i < hi; i++)
            p[i] = p0[i] + (float)h * v[i];
        double lp = loss_of(m, x, y, n, mc->k);
        for (size_t i = lo; i < hi; i++)
            p[i] = p0[i] - (float)h * v[i];
        double lm = loss_of(m, x, y, n, mc->k);
        memcpy(p + lo, p0 + lo, (hi - lo) * sizeof *p);
        double fd = (lp - lm) / (2 * h);
        bool agree = fabs(fd - gv) <= rtol * fabs(gv) + 2 * noise / (2 * h) + 1e-3;
        good += agree;
        if (!agree && !per_layer)
            herd_test_fail(__FILE__, __LINE__, "%s direction %zu: finite difference %.6g vs backward %.6g",
                           mc->name, k, fd, gv);
    }
    if ((double)good < min_frac * (double)ntries)
        herd_test_fail(__FILE__, __LINE__, "%s: only %zu of %zu layer gradients agree with finite differences",
                       mc->name, good, ntries);
    free(p0), free(g0), free(v), free(x), free(y);
    herd_model_free(m);
}

static void test_grad_linear(void) { check_gradient(&(model_case){"linear", 1, 6, 6, 5, 4}, 1e-3, 1e-3, false, 1); }
static void test_grad_mlp(void) { check_gradient(&(model_case){"mlp", 1, 5, 5, 4, 3}, 1e-4, 2e-2, false, 1); }
static void test_grad_lenet(void) { check_gradient(&(model_case){"lenet", 1, 28, 28, 10, 3}, 1e-4, 2e-2, false, 1); }
static void test_grad_lenet_rgb(void) { check_gradient(&(model_case){"lenet", 3, 20, 20, 10, 2}, 1e-4, 2e-2, false, 1); }
static void test_grad_cnn(void) { check_gradient(&(model_case){"cnn", 1, 12, 12, 10, 2}, 1e-4, 2e-2, false, 1); }
/* ResNet-20 is the roughest landscape here (batch norm over a batch of 4 and
 * ~10^5 ReLU kinks, evaluated in float): finite differences of a few layers
 * stay off by tens of percent at any step size, so most — not all — layers
 * must agree. Each layer's backward is checked tightly on its own in
 * test_ref.c and test_kernels.c; this catches wiring errors such as a lost
 * residual branch, which moves every earlier layer. */
/* A description of the layers the built-in models lack (tests/models/grad.model) */
static void test_grad_description(void)
{
    check_gradient(&(model_case){"tests/models/grad.model", 1, 12, 12, 10, 4}, 1e-4, 1e-2, false, 1);
}
static void test_grad_resnet20(void) { check_gradient(&(model_case){"resnet20", 1, 12, 12, 10, 4}, 1e-5, 0.1, true, 0.85); }

static herd_status fail_ready(void *ctx, size_t off, size_t len)
{
    (void)ctx, (void)off, (void)len;
    return HERD_ETIMEOUT;
}

/* Ranges tile [0, nparams) exactly, from the end towards the start. */
static void test_ready_ranges(void)
{
    const char *names[] = {"mlp", "lenet", "resnet20"};
    for (int t = 0; t < 3; t++) {
        model_case mc = {names[t], 1, 12, 12, 10, 2};
        herd_model *m = make(&mc, 1);
        float x[2 * 144];
        int32_t y[2] = {1, 7};
        herd_test_random_batch(2, 144, 10, x, y, 2, 99);
        herd_model_forward(m, x, 2, true);
        herd_model_loss(m, y, 2, NULL);
        ready_log l = {0};
        ASSERT_OK(herd_model_backward(m, 2, record_ready, &l));
        ASSERT_TRUE(l.n > 1 && l.n <= 64);
        size_t end = herd_model_nparams(m);
        for (size_t i = 0; i < l.n; i++) {
            ASSERT_EQ_INT(l.off[i] + l.len[i], end);
            end = l.off[i];
        }
        ASSERT_EQ_INT(end, 0);
        ASSERT_EQ_INT(herd_model_backward(m, 2, fail_ready, NULL), HERD_ETIMEOUT);
        herd_model_free(m);
    }
}

/* Same seed and data: bit-identical parameters after training steps. */
static void test_deterministic(void)
{
    model_case mc = {"lenet", 1, 28, 28, 10, 8};
    float *x = malloc(8 * 784 * sizeof *x);
    int32_t y[8];
    herd_test_random_batch(8, 784, 10, x, y, 3, 99);
    float *out[2];
    size_t np = 0;
    for (int run = 0; run < 2; run++) {
        herd_model *m = make(&mc, 42);
        np = herd_model_nparams(m);
        float *p = herd_model_params(m), *g = herd_model_grads(m);
        for (int s = 0; s < 5; s++) {
            herd_model_forward(m, x, 8, true);
            herd_model_loss(m, y, 8, NULL);
            ASSERT_OK(herd_model_backward(m, 8, NULL, NULL));
            for (size_t i = 0; i < np; i++)
                p[i] -= 0.1f * g[i];
        }
        out[run] = malloc(np * sizeof(float));
        memcpy(out[run], p, np * sizeof(float));
        herd_model_free(m);
    }
    ASSERT_TRUE(memcmp(out[0], out[1], np * sizeof(float)) == 0);
    /* a different seed gives different initial weights */
    herd_model *a = make(&mc, 1), *b = make(&mc, 2);
    ASSERT_TRUE(memcmp(herd_model_params(a), herd_model_params(b), np * sizeof(float)) != 0);
    herd_model_free(a), herd_model_free(b);
    free(out[0]), free(out[1]), free(x);
}

/* Training mode normalizes with batch statistics; evaluation uses the
 * running ones, which after one step moved 10% of the way from (0, 1). */
static void test_batchnorm_modes(void)
{
    model_case mc = {"resnet20", 1, 8, 8, 10, 4};
    herd_model *m = make(&mc, 1);
    float x[4 * 64];
    int32_t y[4];
    herd_test_random_batch(4, 64, 10, x, y, 9, 99);
    ASSERT_TRUE(herd_model_nbuffers(m) > 0);
    float *buf = herd_model_buffers(m);
    ASSERT_NEAR(buf[0], 0.0, 0, 0);
    ASSERT_NEAR(buf[16], 1.0, 0, 0); /* first BN: 16 means then 16 variances */
    herd_model_forward(m, x, 4, false);
    ASSERT_NEAR(buf[0], 0.0, 0, 0); /* evaluation leaves them alone */
    herd_model_forward(m, x, 4, true);
    ASSERT_TRUE(buf[0] != 0.0f);
    /* evaluation on one example equals evaluation of it inside a batch */
    herd_model_forward(m, x, 4, false);
    float z4[10];
    memcpy(z4, herd_model_logits(m) + 10, sizeof z4);
    herd_model_forward(m, x + 64, 1, false);
    for (int i = 0; i < 10; i++)
        ASSERT_NEAR(herd_model_logits(m)[i], z4[i], 1e-5, 1e-4);
    herd_model_free(m);
}

/* The warm-up pass leaves the gradients and batch-norm running statistics
 * as they were, and a step after it equals the same step on a model that
 * never warmed up (to the bit). */
static void test_warm_up_leaves_model(void)
{
    model_case mc = {"resnet20", 1, 8, 8, 10, 4};
    herd_model *a = make(&mc, 5), *b = make(&mc, 5);
    size_t np = herd_model_nparams(a), nb = herd_model_nbuffers(a);
    float x[4 * 64];
    int32_t y[4];
    herd_test_random_batch(4, 64, 10, x, y, 11, 99);
    herd_model_forward(a, x, 4, true); /* running statistics away from (0, 1) */
    herd_model_forward(b, x, 4, true);
    for (size_t i = 0; i < np; i++)
        herd_model_grads(a)[i] = herd_model_grads(b)[i] = (float)i * 1e-3f;
    float *buf0 = malloc(nb * sizeof(float));
    memcpy(buf0, herd_model_buffers(a), nb * sizeof(float));
    ASSERT_OK(herd_model_warm_up(a));
    ASSERT_TRUE(memcmp(herd_model_buffers(a), buf0, nb * sizeof(float)) == 0);
    ASSERT_TRUE(memcmp(herd_model_grads(a), herd_model_grads(b), np * sizeof(float)) == 0);
    ASSERT_TRUE(memcmp(herd_model_params(a), herd_model_params(b), np * sizeof(float)) == 0);
    herd_model *m[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        herd_model_forward(m[i], x, 4, true);
        herd_model_loss(m[i], y, 4, NULL);
        ASSERT_OK(herd_model_backward(m[i], 4, NULL, NULL));
    }
    ASSERT_TRUE(memcmp(herd_model_grads(a), herd_model_grads(b), np * sizeof(float)) == 0);
    ASSERT_TRUE(memcmp(herd_model_buffers(a), herd_model_buffers(b), nb * sizeof(float)) == 0);
    free(buf0);
    herd_model_free(a), herd_model_free(b);
}

/* max |a - b| <= tol * max |b|: two float computations of the same sums
 * in different orders. */
static void check_arrays_close(const char *what, const float *a, const float *b, size_t n, double tol)
{
    double dmax = 0, bmax = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double dd = fabs((double)a[i] - (double)b[i]);
        if (!(dd <= dmax)) /* NaN counts as a difference */
            dmax = dd, at = i;
        if (fabs((double)b[i]) > bmax)
            bmax = fabs((double)b[i]);
    }
    if (!(dmax <= tol * bmax) || bmax == 0)
        herd_test_fail(__FILE__, __LINE__, "%s: max diff %.3g at [%zu] (%.9g vs %.9g), max |ref| %.3g, tol %.3g",
                       what, dmax, at, (double)a[at], (double)b[at], bmax, tol * bmax);
}

/* ||a - b||_2 <= tol * ||b||_2. For gradients: where a ReLU's input rounds
 * to opposite signs in two computations (it sits within rounding of 0), that
 * unit's whole gradient flows in one and not the other, which moves every
 * gradient upstream of it by far more than rounding (resnet20 below, step 2:
 * 2e-6 norm-wise downstream of one such unit, 2e-3 upstream). A norm-wise
 * bound of 1e-2 tolerates a few such units; a wrong index or a dropped term
 * moves a layer's gradients by 1e-1 or more. The kernels themselves are
 * checked element by element against the reference in test_kernels.c. */
static void check_norm_close(const char *what, const float *a, const float *b, size_t n, double tol)
{
    double dd = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        dd += d * d;
        bb += (double)b[i] * (double)b[i];
    }
    if (!(sqrt(dd) <= tol * sqrt(bb)) || bb == 0)
        herd_test_fail(__FILE__, __LINE__, "%s: ||a-b|| %.3g > %.3g = tol * ||b||", what, sqrt(dd),
                       tol * sqrt(bb));
}

/* oneDNN's convolution primitives and the im2col fallback train the same
 * model: same logits and loss within float rounding (reordered sums: 1e-4
 * of the largest value, where float rounding of these sums is ~1e-6), and
 * gradients within 1e-2 norm-wise (see check_norm_close), for a few SGD
 * steps from the same parameters. */
static void paths_agree_with(const model_case *mc, bool other_cnhw);

static void paths_agree(const model_case *mc) { paths_agree_with(mc, false); }

/* The other model: im2col (other_cnhw false) or oneDNN's primitives with
 * every activation CNHW, against the default (blocked where it can be). */
/* prec: both models' precision (bf16 holds to fp32's bounds: both sides
 * round the same operands to bf16). */
static void paths_agree_prec(const model_case *mc, bool other_cnhw, herd_precision prec)
{
    size_t dim = mc->c * mc->h * mc->w, B = mc->batch;
    float *x = malloc(B * dim * sizeof *x);
    int32_t *y = malloc(B * sizeof *y);
    herd_test_random_batch(B, dim, mc->k, x, y, 5, 99);
    herd_model *m[2] = {make(mc, 7), make(mc, 7)};
    for (int i = 0; i < 2; i++)
        ASSERT_OK(herd_model_set_precision(m[i], prec));
    if (other_cnhw)
        herd_model_set_blocked(m[1], false);
    else
        herd_model_set_conv_im2col(m[1], true);
    ASSERT_TRUE(!herd_model_conv_im2col(m[0]) && herd_model_conv_im2col(m[1]) == !other_cnhw);
    size_t np = herd_model_nparams(m[0]);
    char what[96];
    for (int step = 0; step < 3; step++) {
        float loss[2];
        for (int i = 0; i < 2; i++) {
            herd_model_forward(m[i], x, B, true);
            loss[i] = herd_model_loss(m[i], y, B, NULL);
            ASSERT_OK(herd_model_backward(m[i], B, NULL, NULL));
        }
        ASSERT_TRUE(herd_model_blocked_layers(m[1]) == 0);
        snprintf(what, sizeof what, "%s step %d logits", mc->name, step);
        check_arrays_close(what, herd_model_logits(m[0]), herd_model_logits(m[1]), B * mc->k, 1e-4);
        ASSERT_NEAR(loss[0], loss[1], 0, 1e-5);
        snprintf(what, sizeof what, "%s step %d grads", mc->name, step);
        check_norm_close(what, herd_model_grads(m[0]), herd_model_grads(m[1]), np, 1e-2);
        for (int i = 0; i < 2; i++) {
            float *p = herd_model_params(m[i]);
            const float *g = herd_model_grads(m[1]); /* the same step for both */
            for (size_t j = 0; j < np; j++)
                p[j] -= 0.05f * g[j];
        }
    }
    herd_model_free(m[0]), herd_model_free(m[1]);
    free(x), free(y);
}

static void paths_agree_with(const model_case *mc, bool other_cnhw)
{
    paths_agree_prec(mc, other_cnhw, HERD_PRECISION_FP32);
}

static void test_conv_paths_agree(void)
{
    paths_agree(&(model_case){"lenet", 1, 28, 28, 10, 5});
    paths_agree(&(model_case){"lenet", 3, 20, 20, 10, 2});
    paths_agree(&(model_case){"cnn", 1, 28, 28, 10, 3});
    paths_agree(&(model_case){"resnet20", 1, 28, 28, 10, 4});
    paths_agree(&(model_case){"resnet20", 3, 13, 11, 10, 1});
}

/* A model keeps primitives for two batch sizes and rebuilds for a third:
 * evaluating the same examples in batches of 4, 3, 1, 2 and 4 again gives
 * each example the logits the im2col path gives it. */
/* Blocked activations (16 or 8 channels a block, as the ISA has it):
 * ResNet-20 keeps every convolution's, batch norm's
 * and residual add's output blocked (21 + 21 + 9 layers) where the ISA
 * allows, none when told not to or on im2col; cnn its two convolutions and
 * poolings; lenet its second convolution and pooling (the first has 6
 * channels). Each trains as the CNHW model does. */
static void test_blocked_layouts(void)
{
    bool blocks = herd__blk_width() != 0; /* oneDNN computes blocked: AVX-512 (16 wide) or AVX2 (8) */
    model_case rn = {"resnet20", 1, 28, 28, 10, 4};
    herd_model *m = make(&rn, 3);
    float x[4 * 784];
    int32_t y[4];
    herd_test_random_batch(4, 784, 10, x, y, 5, 99);
    herd_model_forward(m, x, 4, true);
    ASSERT_TRUE(herd_model_blocked_layers(m) == (blocks ? 51u : 0u));
    herd_model_set_blocked(m, false);
    herd_model_forward(m, x, 4, true);
    ASSERT_TRUE(herd_model_blocked_layers(m) == 0);
    herd_model_set_blocked(m, true);
    herd_model_forward(m, x, 2, false);
    ASSERT_TRUE(herd_model_blocked_layers(m) == (blocks ? 51u : 0u));
    herd_model_set_conv_im2col(m, true);
    herd_model_forward(m, x, 2, false);
    ASSERT_TRUE(herd_model_blocked_layers(m) == 0);
    herd_model_free(m);
    const char *pooled[] = {"lenet", "cnn"};
    const size_t nblocked[] = {2, 4};
    for (int i = 0; i < 2; i++) {
        model_case mc = {pooled[i], 1, 28, 28, 10, 2};
        herd_model *f = make(&mc, 3);
        herd_model_forward(f, x, 2, true);
        ASSERT_TRUE(herd_model_blocked_layers(f) == (blocks ? nblocked[i] : 0u));
        herd_model_free(f);
        paths_agree_with(&mc, true);
    }
    paths_agree_with(&(model_case){"lenet", 3, 20, 20, 10, 2}, true);
    /* beside the layers descriptions add, which read CNHW: tests/models/blocked.model */
    model_case bm = {"tests/models/blocked.model", 1, 12, 12, 10, 4};
    herd_model *b = make(&bm, 3);
    herd_model_forward(b, x, 4, true);
    ASSERT_TRUE(blocks ? herd_model_blocked_layers(b) > 0 : herd_model_blocked_layers(b) == 0);
    herd_model_free(b);
    paths_agree_with(&bm, true);
    paths_agree(&bm);
    paths_agree_with(&rn, true);
    paths_agree_with(&(model_case){"resnet20", 3, 13, 11, 10, 1}, true);
}

/* bf16 keeps the same activations blocked as fp32 (its convolutions read
 * and write the blocked layout; CNHW cost a layout reorder each way around
 * every convolution, half of a ResNet-20 step; on AMX the blocks are NHWC)
 * and trains as its CNHW model does. Where the CPU has no bf16 products, bf16 is refused. */
static void test_blocked_layouts_bf16(void)
{
    if (herd_nn_bf16_support() == HERD_BF16_NONE) {
        herd_model *m = make(&(model_case){"cnn", 1, 28, 28, 10, 2}, 3);
        ASSERT_EQ_INT(herd_model_set_precision(m, HERD_PRECISION_BF16), HERD_EUNSUPPORTED);
        herd_model_free(m);
        return;
    }
    bool blocks = herd__blk_width() != 0;
    const model_case cases[] = {{"resnet20", 1, 28, 28, 10, 4}, {"cnn", 1, 28, 28, 10, 2}, {"lenet", 1, 28, 28, 10, 2}};
    const size_t nblocked[] = {51, 4, 2};
    float x[4 * 784];
    int32_t y[4];
    herd_test_random_batch(4, 784, 10, x, y, 5, 99);
    for (int i = 0; i < 3; i++) {
        herd_model *m = make(&cases[i], 3);
        ASSERT_OK(herd_model_set_precision(m, HERD_PRECISION_BF16));
        herd_model_forward(m, x, cases[i].batch, true);
        ASSERT_TRUE(herd_model_blocked_layers(m) == (blocks ? nblocked[i] : 0u));
        herd_model_free(m);
        paths_agree_prec(&cases[i], true, HERD_PRECISION_BF16);
    }
}

static void test_conv_batch_sizes(void)
{
    model_case mc = {"resnet20", 1, 12, 12, 10, 4};
    size_t dim = 144;
    float x[4 * 144];
    int32_t y[4];
    herd_test_random_batch(4, dim, 10, x, y, 11, 99);
    herd_model *m = make(&mc, 3), *r = make(&mc, 3);
    herd_model_set_conv_im2col(r, true);
    herd_model_forward(r, x, 4, false);
    float want[40];
    memcpy(want, herd_model_logits(r), sizeof want);
    static const size_t sizes[] = {4, 3, 1, 2, 4, 3};
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        herd_model_forward(m, x, sizes[t], false);
        char what[64];
        snprintf(what, sizeof what, "batch %zu logits", sizes[t]);
        check_arrays_close(what, herd_model_logits(m), want, sizes[t] * 10, 1e-5);
    }
    /* and training at a batch size evaluated before still matches */
    herd_model_forward(m, x, 3, true), herd_model_forward(r, x, 3, true);
    herd_model_loss(m, y, 3, NULL), herd_model_loss(r, y, 3, NULL);
    ASSERT_OK(herd_model_backward(m, 3, NULL, NULL));
    ASSERT_OK(herd_model_backward(r, 3, NULL, NULL));
    check_norm_close("batch 3 grads", herd_model_grads(m), herd_model_grads(r), herd_model_nparams(m), 1e-2);
    herd_model_free(m), herd_model_free(r);
}

const herd_test herd_tests_nn[] = {
    {"nn_param_counts", test_param_counts, 30, HERD_TEST_ONE_THREAD},
    {"nn_create_errors", test_create_errors, 10, HERD_TEST_ONE_THREAD},
    {"nn_grad_linear", test_grad_linear, 30, HERD_TEST_ONE_THREAD},
    {"nn_grad_mlp", test_grad_mlp, 30, HERD_TEST_ONE_THREAD},
    {"nn_grad_lenet", test_grad_lenet, 30},
    {"nn_grad_lenet_rgb", test_grad_lenet_rgb, 30},
    {"nn_grad_cnn", test_grad_cnn, 30},
    {"nn_grad_resnet20", test_grad_resnet20, 60},
    {"nn_grad_description", test_grad_description, 30},
    {"nn_ready_ranges", test_ready_ranges, 30},
    {"nn_deterministic", test_deterministic, 30},
    {"nn_batchnorm_modes", test_batchnorm_modes, 30},
    {"nn_warm_up_leaves_model", test_warm_up_leaves_model, 30},
    {"nn_conv_paths_agree", test_conv_paths_agree, 60},
    {"nn_conv_batch_sizes", test_conv_batch_sizes, 30},
    {"nn_blocked_layouts", test_blocked_layouts, 60},
    {"nn_blocked_layouts_bf16", test_blocked_layouts_bf16, 60},
    HERD_TEST_END,
};
