/* Local SGD and post-local SGD (src/algo/localsgd.c). */
#include <stdlib.h>
#include <string.h>

#include "algo_driver.h"
#include "fixtures.h"
#include "harness.h"
#include "herd/herd_rng.h"
#include "herd/herd_run.h"

static herd__train_config learn_config(const char *algo, size_t workers)
{
    herd__train_config c = herd_test_config("linear", algo, workers);
    c.batch = 16;
    c.comm_timeout_s = 20;
    c.optim.lr = 0.2f;
    return c;
}

/* On the driver's noisy quadratic, local SGD follows the recursion computed
 * here with the driver's noise streams: H plain SGD steps per worker, then
 * every x_i becomes the mean, summed in rank order and scaled by 1/n as the
 * engine does. Right after an averaging every replica is the same bits; two
 * steps later they differ again. */
static void test_closed_form(void)
{
    enum { N = 3, H = 4, DIM = 12 };
    drive_problem p = drive_problem_make(DIM, 0.3f, 5);
    for (size_t steps = 2 * H; steps <= 2 * H + 2; steps += 2) {
        drive_config dc = drive_config_make("localsgd", N, steps, 0.1f);
        herd_test_set(&dc.cfg, "local-steps", herd_test_fmt("%d", H));
        drive_result r;
        drive_run_ok(&dc, &p, &r);
        float x[N][DIM];
        herd_rng rng[N];
        for (size_t i = 0; i < N; i++) {
            herd_rng_seed(&rng[i], dc.cfg.seed, 0x77000000u + i);
            memcpy(x[i], p.x0, sizeof x[i]);
        }
        for (size_t s = 0; s < steps; s++) {
            for (size_t i = 0; i < N; i++)
                for (size_t j = 0; j < DIM; j++) {
                    float g = p.curv[j] * (x[i][j] - p.xstar[j]) + p.noise * herd_rng_normal(&rng[i]);
                    x[i][j] -= 0.1f * g;
                }
            if ((s + 1) % H)
                continue;
            for (size_t j = 0; j < DIM; j++) {
                float sum = x[0][j];
                for (size_t i = 1; i < N; i++)
                    sum += x[i][j];
                for (size_t i = 0; i < N; i++)
                    x[i][j] = sum * (1.0f / N);
            }
        }
        for (size_t i = 0; i < N; i++)
            for (size_t j = 0; j < DIM; j++)
                ASSERT_NEAR(r.x[i * DIM + j], x[i][j], 1e-6, 1e-5);
        bool same = memcmp(r.x, r.x + DIM, DIM * sizeof(float)) == 0 &&
                    memcmp(r.x, r.x + 2 * DIM, DIM * sizeof(float)) == 0;
        if (steps % H == 0)
            ASSERT_TRUE(same);
        else
            ASSERT_TRUE(!same);
        drive_result_free(&r);
    }
    drive_problem_free(&p);
}

/* H = 1 is mini-batch SGD, the same bits as --algo allreduce. */
static void test_one_step_is_allreduce(void)
{
    for (size_t workers = 2; workers <= 3; workers++) {
        herd__train_config a = learn_config("allreduce", workers), l = learn_config("localsgd", workers);
        a.model = l.model = "lenet";
        a.train_limit = l.train_limit = 768;
        herd_test_set(&l, "local-steps", "1");
        herd_train_result ra, rl;
        herd_test_train_ok(&a, &ra);
        herd_test_train_ok(&l, &rl);
        ASSERT_TRUE(ra.test_loss == rl.test_loss);
        ASSERT_TRUE(ra.train_loss == rl.train_loss);
        ASSERT_TRUE(ra.test_acc == rl.test_acc);
        ASSERT_TRUE(rl.replica_max_diff == 0.0);
        /* and post-local SGD before its switch is the same */
        herd__train_config p = learn_config("postlocal", workers);
        p.model = "lenet", p.train_limit = 768;
        herd_test_set(&p, "switch-epoch", "2");
        herd_train_result rp;
        herd_test_train_ok(&p, &rp);
        ASSERT_TRUE(ra.test_loss == rp.test_loss);
    }
}

/* H > 1 learns, ends with one model, and sends about 1/H of the bytes;
 * postlocal too. */
static void test_learns(void)
{
    herd_train_result r1, r4, rp;
    herd__train_config c = learn_config("localsgd", 3);
    herd_test_set(&c, "local-steps", "1");
    herd_test_train_ok(&c, &r1);
    c = learn_config("localsgd", 3);
    herd_test_set(&c, "local-steps", "4");
    herd_test_train_ok(&c, &r4);
    ASSERT_TRUE(r4.test_acc > 0.8);
    ASSERT_TRUE(r4.replica_max_diff == 0.0);
    /* an averaging every 4 steps plus one per epoch: 42 steps per epoch here */
    ASSERT_TRUE(r4.bytes_sent < r1.bytes_sent / 3);
    ASSERT_TRUE(r4.bytes_sent > r1.bytes_sent / 6);
    c = learn_config("postlocal", 3);
    herd_test_set(&c, "switch-epoch", "1");
    herd_test_set(&c, "local-steps", "8");
    herd_test_train_ok(&c, &rp);
    ASSERT_TRUE(rp.test_acc > 0.8);
    ASSERT_TRUE(rp.replica_max_diff == 0.0);
    ASSERT_TRUE(rp.bytes_sent < r1.bytes_sent && rp.bytes_sent > r1.bytes_sent / 2);
}

/* --local-steps 0 is refused, naming the flag and its bounds. */
static void test_option_errors(void)
{
    herd__train_config c = learn_config("localsgd", 2);
    herd_train_result r;
    herd_err err = {0};
    herd_test_set(&c, "local-steps", "0");
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--local-steps must be in [1, 1000000], got 0");
    c = learn_config("localsgd", 2);
    herd_test_set(&c, "switch-epoch", "1");
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--switch-epoch applies to postlocal, not --algo localsgd");
    c = learn_config("allreduce", 2);
    herd_test_set(&c, "local-steps", "2");
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--local-steps applies to localsgd, postlocal, not --algo allreduce");
}

const herd_test herd_tests_localsgd[] = {
    {"localsgd_closed_form", test_closed_form, 30},
    {"localsgd_one_step_is_allreduce", test_one_step_is_allreduce, 120},
    {"localsgd_learns", test_learns, 120},
    {"localsgd_option_errors", test_option_errors, 30, HERD_TEST_ONE_THREAD},
    HERD_TEST_END,
};
