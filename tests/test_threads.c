/* A worker's compute threads: herd's kernels and optimizer give the same
 * bits at 1 and 2 threads (their loops split channels, planes, examples or
 * elements, never a sum); a model's training step, where oneDNN splits
 * sums of its own, the same bits run after run at 2 threads and close to
 * 1 thread's (test_model_bits says where and how close); the default
 * thread count and why the summary says it was chosen; OpenMP's waiting
 * threads spin briefly, then sleep.
 *
 * Sizes are above HERD__PAR_GRAIN (core/par.h), so the loops do run on 2
 * threads (herd_nn_set_threads(2) gives 2 even on one core); not under
 * ThreadSanitizer, where they stay serial (par.h says why). */
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fixtures.h"
#include "harness.h"
#include "herd/herd_nn.h"
#include "herd/herd_optim.h"
#include "herd/herd_rng.h"
#include "herd/herd_run.h"
#include "nn/kernels.h"

static float *random_floats(size_t n, uint64_t seed)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    ASSERT_TRUE(p != NULL);
    herd_rng r;
    herd_rng_seed(&r, seed, 7);
    for (size_t i = 0; i < n; i++)
        p[i] = herd_rng_normal(&r);
    return p;
}

static float *copy_floats(const float *x, size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    ASSERT_TRUE(p != NULL);
    memcpy(p, x, n * sizeof *p);
    return p;
}

/* a and b the same bits; else the first difference, named. */
static void check_bits(const char *what, const void *a, const void *b, size_t n, size_t size)
{
    if (!memcmp(a, b, n * size))
        return;
    size_t i = 0;
    while (i < n && !memcmp((const char *)a + i * size, (const char *)b + i * size, size))
        i++;
    double x = size == sizeof(float) ? ((const float *)a)[i] : 0, y = size == sizeof(float) ? ((const float *)b)[i] : 0;
    herd_test_fail(__FILE__, __LINE__, "%s: element %zu of %zu differs at 1 and 2 threads (%.9g vs %.9g)", what, i, n,
                   x, y);
}

/* ---- kernels ---------------------------------------------------------- */

/* Batch norm (training forward, eval forward, backward with a fused ReLU and
 * accumulating), max pooling (forward and backward), softmax cross-entropy
 * on enough examples to split, im2col and col2im, the layout changes: each
 * run at 1 and 2 threads from the same inputs, the same bits out. */
static void test_kernels_bits(void)
{
    enum { C = 16, N = 32, H = 12, W = 12 };
    const size_t len = (size_t)N * H * W, total = (size_t)C * len;
    float *x = random_floats(total, 1), *g = random_floats(total, 2), *ro = random_floats(total, 3);
    float gamma[C], beta[C];
    for (size_t c = 0; c < C; c++)
        gamma[c] = 1.0f + 0.1f * (float)c, beta[c] = 0.05f * (float)c;
    float *out[2], *din[2], *pool[2], *pdin[2], *col[2], *cdin[2], *t1[2], *t2[2], *dl[2];
    float mean[2][C], invstd[2][C], rmean[2][C], rvar[2][C], dgamma[2][C], dbeta[2][C], loss[2];
    uint32_t *idx[2];
    size_t hits[2];
    enum { R = 3, NL = 2048, K = 10 };
    const size_t ncol = (size_t)C * R * R * N * H * W, nlogit = (size_t)NL * K;
    float *logits = random_floats(nlogit, 4);
    int32_t labels[NL];
    for (size_t i = 0; i < NL; i++)
        labels[i] = (int32_t)(i * 7 % K);
    float *acc0 = random_floats(total, 5);
    for (int t = 0; t < 2; t++) {
        herd_nn_set_threads(t + 1);
        ASSERT_EQ_INT(herd_nn_threads(), t + 1);
        out[t] = malloc(total * sizeof(float));
        for (size_t c = 0; c < C; c++)
            rmean[t][c] = 0.0f, rvar[t][c] = 1.0f;
        herd__batchnorm_forward_train(x, gamma, beta, out[t], mean[t], invstd[t], rmean[t], rvar[t], C, len, 1e-5f,
                                      0.1f, true);
        herd__batchnorm_forward_eval(x, gamma, beta, out[t], rmean[t], rvar[t], C, len, 1e-5f, false);
        din[t] = copy_floats(acc0, total);
        herd__batchnorm_backward(x, gamma, g, ro, mean[t], invstd[t], din[t], dgamma[t], dbeta[t], C, len, true);
        pool[t] = malloc(total / 4 * sizeof(float));
        idx[t] = malloc(total / 4 * sizeof(uint32_t));
        herd__maxpool_forward(x, pool[t], idx[t], (size_t)C * N, H, W, 2, 2);
        pdin[t] = malloc(total * sizeof(float));
        herd__maxpool_backward(g, idx[t], ro, pdin[t], (size_t)C * N, H, W, 2, 2, false);
        dl[t] = malloc(nlogit * sizeof(float));
        loss[t] = herd__softmax_xent(logits, labels, dl[t], NL, K, &hits[t]);
        col[t] = malloc(ncol * sizeof(float));
        herd__im2col_chunk(x, C, N, 0, N, H, W, R, 1, 1, col[t]);
        cdin[t] = copy_floats(acc0, total);
        herd__col2im_add_chunk(col[t], C, N, 0, N, H, W, R, 1, 1, cdin[t]);
        t1[t] = malloc(total * sizeof(float));
        herd__cnhw_to_nchw(x, t1[t], C, N, H * W);
        t2[t] = copy_floats(acc0, total);
        herd__nchw_to_cnhw(t1[t], t2[t], C, N, H * W, true);
    }
    check_bits("batchnorm forward (eval)", out[0], out[1], total, sizeof(float));
    check_bits("batchnorm mean", mean[0], mean[1], C, sizeof(float));
    check_bits("batchnorm invstd", invstd[0], invstd[1], C, sizeof(float));
    check_bits("batchnorm running var", rvar[0], rvar[1], C, sizeof(float));
    check_bits("batchnorm din", din[0], din[1], total, sizeof(float));
    check_bits("batchnorm dgamma", dgamma[0], dgamma[1], C, sizeof(float));
    check_bits("batchnorm dbeta", dbeta[0], dbeta[1], C, sizeof(float));
    check_bits("maxpool out", pool[0], pool[1], total / 4, sizeof(float));
    check_bits("maxpool idx", idx[0], idx[1], total / 4, sizeof(uint32_t));
    check_bits("maxpool din", pdin[0], pdin[1], total, sizeof(float));
    check_bits("softmax loss", &loss[0], &loss[1], 1, sizeof(float));
    ASSERT_EQ_INT(hits[0], hits[1]);
    check_bits("softmax dlogits", dl[0], dl[1], nlogit, sizeof(float));
    check_bits("im2col", col[0], col[1], ncol, sizeof(float));
    check_bits("col2im", cdin[0], cdin[1], total, sizeof(float));
    check_bits("cnhw_to_nchw", t1[0], t1[1], total, sizeof(float));
    check_bits("nchw_to_cnhw", t2[0], t2[1], total, sizeof(float));
    for (int t = 0; t < 2; t++) {
        free(out[t]), free(din[t]), free(pool[t]), free(idx[t]), free(pdin[t]), free(dl[t]);
        free(col[t]), free(cdin[t]), free(t1[t]), free(t2[t]);
    }
    free(x), free(g), free(ro), free(logits), free(acc0);
}

/* ---- the optimizer ---------------------------------------------------- */

/* Three steps of each optimizer (sgd plain, heavy ball, nesterov with
 * weight decay; lars; lamb) on 100k parameters in two tensors: the same
 * bits at 1 and 2 threads, and the same as the step taken range by range. */
static void test_optim_bits(void)
{
    enum { NP = 100000 };
    herd_param_group groups[2] = {{0, 70000, HERD_PARAM_WEIGHT}, {70000, 30000, HERD_PARAM_BIAS}};
    struct {
        herd_optimizer kind;
        float momentum, wd;
        bool nesterov;
    } cases[] = {
        {HERD_OPTIMIZER_SGD, 0.0f, 0.0f, false}, {HERD_OPTIMIZER_SGD, 0.9f, 1e-4f, false},
        {HERD_OPTIMIZER_SGD, 0.9f, 1e-4f, true},  {HERD_OPTIMIZER_LARS, 0.9f, 5e-4f, false},
        {HERD_OPTIMIZER_LAMB, 0.0f, 1e-2f, false},
    };
    float *g = random_floats(NP, 11), *p0 = random_floats(NP, 12);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        float *p[2];
        for (int t = 0; t < 2; t++) {
            herd_nn_set_threads(t + 1);
            herd_optim_config oc = {.lr = 0.05f, .momentum = cases[k].momentum, .weight_decay = cases[k].wd,
                                    .nesterov = cases[k].nesterov, .optimizer = cases[k].kind, .lars_eta = 0.001f,
                                    .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f};
            herd_optim o;
            herd_err err = {0};
            ASSERT_OK(herd_optim_init_groups(&o, &oc, groups, 2, NP, &err));
            p[t] = copy_floats(p0, NP);
            for (int s = 0; s < 3; s++)
                herd_optim_step(&o, p[t], g, 0, NP, oc.lr);
            herd_optim_free(&o);
        }
        char what[64];
        snprintf(what, sizeof what, "optimizer case %zu", k);
        check_bits(what, p[0], p[1], NP, sizeof(float));
        ASSERT_TRUE(memcmp(p[0], p0, NP * sizeof(float)) != 0); /* it stepped */
        free(p[0]), free(p[1]);
    }
    free(g), free(p0);
}

/* ---- whole models ----------------------------------------------------- */

typedef struct model_case {
    const char *name;
    size_t c, h, w, batch;
    bool im2col; /* convolutions by im2col + sgemm, not oneDNN's primitives */
    bool exact;  /* the same bits at 1 and 2 threads */
} model_case;

typedef struct model_state {
    float *params, *grads, *buffers;
    size_t np, nb;
} model_state;

/* `steps` steps of forward, loss, backward and momentum SGD at `threads`:
 * the parameters and batch-norm statistics after them, and the gradients
 * of the last step. */
static model_state model_steps(const model_case *mc, int threads, int steps)
{
    herd_model *m = NULL;
    herd_err err = {0};
    herd_nn_set_threads(threads);
    if (herd_model_create(mc->name, mc->c, mc->h, mc->w, 10, mc->batch, 3, &m, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "create %s: %s", mc->name, err.msg);
    herd_model_set_conv_im2col(m, mc->im2col);
    size_t dim = mc->c * mc->h * mc->w, np = herd_model_nparams(m), nb = herd_model_nbuffers(m);
    float *x = random_floats(mc->batch * dim, 21);
    int32_t *y = malloc(mc->batch * sizeof *y);
    ASSERT_TRUE(y != NULL);
    for (size_t i = 0; i < mc->batch; i++)
        y[i] = (int32_t)(i * 3 % 10);
    herd_optim_config oc = {.lr = 0.05f, .momentum = 0.9f};
    herd_optim o;
    ASSERT_OK(herd_optim_init(&o, &oc, np, &err));
    for (int s = 0; s < steps; s++) {
        herd_model_forward(m, x, mc->batch, true);
        herd_model_loss(m, y, mc->batch, NULL);
        ASSERT_OK(herd_model_backward(m, mc->batch, NULL, NULL));
        herd_optim_step(&o, herd_model_params(m), herd_model_grads(m), 0, np, oc.lr);
    }
    model_state st = {copy_floats(herd_model_params(m), np), copy_floats(herd_model_grads(m), np),
                      copy_floats(herd_model_buffers(m), nb), np, nb};
    herd_optim_free(&o);
    herd_model_free(m);
    free(x), free(y);
    return st;
}

static void model_state_free(model_state *st) { free(st->params), free(st->grads), free(st->buffers); }

/* max |a - b| over max |b| */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, top = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]);
        d = e > d || e != e ? e : d;
        top = fabs((double)b[i]) > top ? fabs((double)b[i]) : top;
    }
    return top > 0 ? d / top : d;
}

/* Three training steps at 1 and 2 threads. The same bits where herd's loops
 * and herd__sgemm (panels fixed by the shape, not the thread count) do all
 * the work: linear, mlp, and lenet, cnn and resnet20 with im2col
 * convolutions. Not where oneDNN's convolution primitives (the default
 * path) split backward-weights' sum over the batch between threads. There
 * one step's gradients agree within 1e-5 of the largest (seen: 2e-6), but
 * three steps of this tiny random problem amplify that (resnet20: 3e-4 of
 * the largest weight, 4% of a gradient), so what is held exactly there is
 * that 2 threads give the same bits run after run (the threads engine's
 * determinism). */
static void test_model_bits(void)
{
    /* under ThreadSanitizer one step through the same code at each count */
    int steps = HERD_TEST_TSAN ? 1 : 3;
    static const model_case cases[] = {
        {"linear", 1, 28, 28, 64, false, true},  {"lenet", 1, 28, 28, 64, true, true},
        {"cnn", 1, 28, 28, 32, true, true},      {"resnet20", 3, 16, 16, 32, true, true},
        {"mlp", 1, 28, 28, 64, false, true},    {"lenet", 1, 28, 28, 64, false, false},
        {"cnn", 1, 28, 28, 32, false, false},    {"resnet20", 3, 16, 16, 32, false, false},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const model_case *mc = &cases[k];
        char what[96];
        snprintf(what, sizeof what, "%s (%s)", mc->name, mc->im2col ? "im2col" : "oneDNN convolutions");
        model_state a = model_steps(mc, 1, steps), b = model_steps(mc, 2, steps);
        if (mc->exact) {
            check_bits(what, a.params, b.params, a.np, sizeof(float));
            check_bits(what, a.grads, b.grads, a.np, sizeof(float));
            check_bits(what, a.buffers, b.buffers, a.nb, sizeof(float));
        } else {
            model_state again = model_steps(mc, 2, steps);
            check_bits(what, again.params, b.params, a.np, sizeof(float));
            check_bits(what, again.buffers, b.buffers, a.nb, sizeof(float));
            model_state_free(&again);
            model_state a1 = model_steps(mc, 1, 1), b1 = model_steps(mc, 2, 1);
            double d = rel_diff(b1.grads, a1.grads, a1.np);
            if (!(d <= 1e-5))
                herd_test_fail(__FILE__, __LINE__, "%s: one step's gradients at 1 and 2 threads %.3g apart", what, d);
            model_state_free(&a1), model_state_free(&b1);
        }
        model_state_free(&a), model_state_free(&b);
    }
}

/* A whole training run of the threads engine, one worker, at --threads 1
 * and 2: the same final weights, to the bit (lenet, im2col convolutions).
 * Under ThreadSanitizer 4 steps of 12x12 images, not 16 of 28x28: making
 * 70000 synthetic 28x28 images took 8 of a run's CPU seconds there. */
static void test_train_bits(void)
{
    float *p[2];
    size_t np = 0;
    setenv("HERD_CONV", "im2col", 1);
    for (int t = 0; t < 2; t++) {
        herd__train_config c = herd_test_config("lenet", "sgd", 1);
        c.data = HERD_TEST_TSAN ? "synthetic:1x12x12:10" : "synthetic:1x28x28:10";
        c.epochs = 1, c.batch = 64, c.train_limit = HERD_TEST_TSAN ? 256 : 1024, c.test_limit = 128;
        c.optim.momentum = 0.9f;
        c.threads = (size_t)t + 1;
        c.keep_final = true;
        herd_train_result r;
        herd_err err = {0};
        if (herd__train(&c, &r, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "--threads %d: %s", t + 1, err.msg);
        ASSERT_EQ_INT(r.threads, t + 1);
        ASSERT_TRUE(r.final_params != NULL);
        np = r.nparams;
        p[t] = copy_floats(r.final_params, np);
        herd_train_result_free(&r);
    }
    check_bits("lenet after one epoch", p[0], p[1], np, sizeof(float));
    free(p[0]), free(p[1]);
    unsetenv("HERD_CONV");
}

/* ---- the default thread count ----------------------------------------- */

static size_t affinity_cores(void)
{
    cpu_set_t set;
    ASSERT_TRUE(sched_getaffinity(0, sizeof set, &set) == 0);
    return (size_t)CPU_COUNT(&set);
}

static void run_linear(size_t workers, size_t threads, herd_train_result *r)
{
    herd__train_config c = herd_test_config("linear", workers > 1 ? "allreduce" : "sgd", workers);
    c.threads = threads, c.max_steps = 2, c.batch = 16;
    herd_err err = {0};
    if (herd__train(&c, r, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%zu workers, threads %zu: %s", workers, threads, err.msg);
}

/* Left open (0, the default): one worker takes the process's cores, several
 * share them (at least 1 each); OMP_NUM_THREADS, then --threads, win. The
 * result and its summary say which. */
static void test_default_count(void)
{
    unsetenv("OMP_NUM_THREADS");
    size_t cores = affinity_cores();
    herd__train_config d;
    herd__train_config_defaults(&d);
    ASSERT_EQ_INT(d.threads, 0);
    herd_train_result r;
    run_linear(1, 0, &r);
    ASSERT_EQ_INT(r.threads, cores);
    ASSERT_STR_CONTAINS(r.threads_from, "cores");
    ASSERT_TRUE(strcmp(r.threads_from, "cores") == 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ASSERT_TRUE(f != NULL);
    ASSERT_OK(herd_train_result_json(&r, f));
    fclose(f);
    ASSERT_STR_CONTAINS(buf, herd_test_fmt("\"threads\":%zu,\"threads_from\":\"cores\"", cores));
    free(buf);
    herd_train_result_free(&r);
    run_linear(2 * cores, 0, &r);
    ASSERT_EQ_INT(r.threads, 1);
    ASSERT_TRUE(strcmp(r.threads_from, "cores/workers") == 0);
    herd_train_result_free(&r);
    if (cores >= 4) {
        run_linear(2, 0, &r);
        ASSERT_EQ_INT(r.threads, cores / 2);
        herd_train_result_free(&r);
    }
    setenv("OMP_NUM_THREADS", "3,1", 1);
    run_linear(1, 0, &r);
    ASSERT_EQ_INT(r.threads, 3);
    ASSERT_TRUE(strcmp(r.threads_from, "OMP_NUM_THREADS") == 0);
    herd_train_result_free(&r);
    run_linear(1, 1, &r);
    ASSERT_EQ_INT(r.threads, 1);
    ASSERT_TRUE(strcmp(r.threads_from, "--threads") == 0);
    herd_train_result_free(&r);
    unsetenv("OMP_NUM_THREADS");
}

/* The command: --threads 0 is left open, 64 workers take a core's share
 * each (1); a herd pinned to one core (its affinity, inherited from this
 * process) takes that core alone. */
static void test_default_count_cli(void)
{
    herd_test_cmd o;
    unsetenv("OMP_NUM_THREADS");
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", "linear", "--epochs", "1", "--train-limit",
                  "256", "--test-limit", "64", "--json", "--threads", "0", "--workers", "64", "--batch", "2", "--algo",
                  "allreduce");
    if (o.code != 0)
        herd_test_fail(__FILE__, __LINE__, "exit %d: %s", o.code, o.err);
    ASSERT_STR_CONTAINS(o.out, "\"threads\":1,\"threads_from\":\"cores/workers\"");
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
    ASSERT_TRUE(sched_setaffinity(0, sizeof one, &one) == 0);
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", "linear", "--epochs", "1", "--train-limit",
                  "256", "--test-limit", "64", "--json");
    if (o.code != 0)
        herd_test_fail(__FILE__, __LINE__, "exit %d: %s", o.code, o.err);
    ASSERT_STR_CONTAINS(o.out, "\"threads\":1,\"threads_from\":\"cores\"");
}

/* ---- waiting threads spin briefly -------------------------------------- */

/* herd version with OMP_WAIT_POLICY and GOMP_SPINCOUNT as given (NULL:
 * unset) and libgomp asked to show its settings as it loads: how many
 * times it loaded (images of the process), *last the settings it showed
 * last. */
static int displays(herd_test_cmd *o, const char *policy, const char *spin, const char **last)
{
    static const char begin[] = "OPENMP DISPLAY ENVIRONMENT BEGIN";
    policy ? setenv("OMP_WAIT_POLICY", policy, 1) : unsetenv("OMP_WAIT_POLICY");
    spin ? setenv("GOMP_SPINCOUNT", spin, 1) : unsetenv("GOMP_SPINCOUNT");
    setenv("OMP_DISPLAY_ENV", "verbose", 1);
    HERD_TEST_RUN(o, "version");
    if (o->code != 0)
        herd_test_fail(__FILE__, __LINE__, "exit %d: %s", o->code, o->err);
    ASSERT_STR_CONTAINS(o->out, "herd ");
    int n = 0;
    for (const char *p = o->err; (p = strstr(p, begin)); p++)
        n++, *last = p;
    return n;
}

/* herd re-executes itself once with GOMP_SPINCOUNT set where neither it
 * nor OMP_WAIT_POLICY is: libgomp loads twice, the second time with one
 * of herd's spin counts (not its default, 300000): the short one beside a
 * process that runs all the time (a child here spins while herd starts).
 * A user's setting is left alone: one image, the user's figure. */
static void test_wait_policy(void)
{
    herd_test_cmd o;
    const char *last = NULL;
    ASSERT_EQ_INT(displays(&o, NULL, NULL, &last), 2);
    ASSERT_TRUE(strstr(last, "GOMP_SPINCOUNT = '" HERD_NN_SPINCOUNT "'") ||
                strstr(last, "GOMP_SPINCOUNT = '" HERD_NN_SPINCOUNT_IDLE "'"));
    pid_t busy = fork();
    ASSERT_TRUE(busy >= 0);
    if (busy == 0) {
        alarm(60); /* never outlives a test that lost it */
        for (volatile unsigned long i = 0;; i++)
            ;
    }
    int n = displays(&o, NULL, NULL, &last);
    kill(busy, SIGKILL);
    waitpid(busy, NULL, 0);
    ASSERT_EQ_INT(n, 2);
    ASSERT_STR_CONTAINS(last, "GOMP_SPINCOUNT = '" HERD_NN_SPINCOUNT "'");
    ASSERT_EQ_INT(displays(&o, NULL, "5000", &last), 1);
    ASSERT_STR_CONTAINS(last, "GOMP_SPINCOUNT = '5000'");
    /* bench train's JSON names the policy it ran under */
    unsetenv("OMP_DISPLAY_ENV");
    HERD_TEST_RUN(&o, "bench", "train", "--model", "linear", "--steps", "2", "--warmup", "1", "--json");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.out, "\"wait_policy\":\"GOMP_SPINCOUNT=5000\"");
    ASSERT_EQ_INT(displays(&o, "active", NULL, &last), 1);
    ASSERT_STR_CONTAINS(last, "OMP_WAIT_POLICY = 'ACTIVE'");
}

/* The long spin only where a read of /proc/loadavg showed herd alone
 * running; the short one for anything else, unreadable lines included. */
static void test_spincount_choice(void)
{
    const char *alone[] = {"0.00 0.01 0.05 1/120 4242\n"};
    const char *busy[] = {"1.00 0.80 0.50 2/121 4243\n", "1.00 0.80 0.50 3/121 4243\n"};
    const char *once[] = {"1.00 0.80 0.50 2/121 4243\n", "1.00 0.80 0.50 1/121 4243\n"};
    const char *bad[] = {NULL, "garbage", "1.0 1.0 1.0"};
    ASSERT_TRUE(!strcmp(herd_nn_spincount_for(alone, 1), HERD_NN_SPINCOUNT_IDLE));
    ASSERT_TRUE(!strcmp(herd_nn_spincount_for(busy, 2), HERD_NN_SPINCOUNT));
    ASSERT_TRUE(!strcmp(herd_nn_spincount_for(once, 2), HERD_NN_SPINCOUNT_IDLE));
    ASSERT_TRUE(!strcmp(herd_nn_spincount_for(bad, 3), HERD_NN_SPINCOUNT));
    ASSERT_TRUE(!strcmp(herd_nn_spincount_for(NULL, 0), HERD_NN_SPINCOUNT));
}

/* ---- adaptive threads (herd_nn_adapt), on a simulated clock ---- */

/* Runs `seconds` of steps whose time depends on the count in use: `at_max`
 * at the full count, `at_one` at 1 (phase two's after switch_s, when
 * given). The governor must set the count it says it uses. */
typedef struct adapt_case {
    double at_max, at_one, switch_s, at_max2, at_one2;
} adapt_case;

static void adapt_run(herd_nn_adapt *a, const adapt_case *k, double seconds)
{
    double now = 0;
    herd_nn_adapt_init(a, 2, now);
    while (now < seconds) {
        bool second = k->switch_s > 0 && now >= k->switch_s;
        double t = a->cur == 2 ? (second ? k->at_max2 : k->at_max) : (second ? k->at_one2 : k->at_one);
        ASSERT_TRUE(herd_nn_threads() == a->cur);
        now += t;
        herd_nn_adapt_step(a, t, now);
    }
}

static void test_adapt_threads(void)
{
    herd_nn_adapt a;
    /* an idle machine: 2 threads 1.9x one; it stays at 2, and each probe
     * at 1 ends after its first timed step (19 > 1.5 x 10 ms): over 120 s,
     * probes at ~0, 1, 3, 7, 15, 31, 63 s and every 32 s after, 2 steps each */
    adapt_run(&a, &(adapt_case){.at_max = 0.010, .at_one = 0.019}, 120);
    ASSERT_TRUE(a.switches == 0 && a.cur == 2);
    ASSERT_TRUE(a.steps - a.steps_full <= 2 * 10);
    /* beside a busy process: 2 threads 0.6x one; it goes to 1 at its first
     * probe and stays (probes at 2 end at once: 20 > 1.5 x 12 ms) */
    adapt_run(&a, &(adapt_case){.at_max = 0.020, .at_one = 0.012}, 120);
    ASSERT_TRUE(a.switches == 1 && a.cur == 1);
    ASSERT_TRUE(a.steps_full <= HERD_NN_ADAPT_K + 1 + 2 * 10);
    /* the neighbour leaves after 30 s: back at 2 within the 32 s probe gap */
    adapt_run(&a, &(adapt_case){.at_max = 0.020, .at_one = 0.012, .switch_s = 30, .at_max2 = 0.010, .at_one2 = 0.019},
              120);
    ASSERT_TRUE(a.switches == 2 && a.cur == 2);
    /* within the 7% margin: no switch either way */
    adapt_run(&a, &(adapt_case){.at_max = 0.010, .at_one = 0.0095}, 60);
    ASSERT_TRUE(a.switches == 0 && a.cur == 2);
    /* one thread asked: nothing to adapt */
    herd_nn_adapt_init(&a, 1, 0);
    for (int i = 0; i < 100; i++)
        herd_nn_adapt_step(&a, 0.01, 0.01 * i);
    ASSERT_TRUE(a.cur == 1 && a.steps == 0 && herd_nn_threads() == 1);
    /* herd train says whether its workers adapted and how */
    herd_test_cmd o;
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", "linear", "--epochs", "1", "--train-limit",
                  "256", "--test-limit", "64", "--json", "--threads", "2", "--adapt-threads");
    if (o.code != 0)
        herd_test_fail(__FILE__, __LINE__, "exit %d: %s", o.code, o.err);
    ASSERT_STR_CONTAINS(o.out, "\"threads\":2,\"threads_from\":\"--threads\",\"adapt_threads\":true,\"threads_full_share\":");
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", "linear", "--epochs", "1", "--train-limit",
                  "256", "--test-limit", "64", "--json", "--threads", "2");
    if (o.code != 0)
        herd_test_fail(__FILE__, __LINE__, "exit %d: %s", o.code, o.err);
    ASSERT_STR_CONTAINS(o.out, "\"adapt_threads\":false,\"threads_full_share\":1.0000,\"threads_switches\":0");
}

const herd_test herd_tests_threads[] = {
    {"threads_kernels_bits", test_kernels_bits, 30},
    {"threads_optim_bits", test_optim_bits, 30},
    {"threads_model_bits", test_model_bits, 60},
    {"threads_train_bits", test_train_bits, 60},
    {"threads_default_count", test_default_count, 60},
    {"threads_default_count_cli", test_default_count_cli, 60},
    {"threads_spincount_choice", test_spincount_choice, 10, HERD_TEST_ONE_THREAD},
    {"threads_wait_policy", test_wait_policy, 30, HERD_TEST_ONE_THREAD},
    {"threads_adapt", test_adapt_threads, 30, HERD_TEST_ONE_THREAD},
    HERD_TEST_END,
};
