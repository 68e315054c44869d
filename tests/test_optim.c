/* Optimizer steps and learning-rate schedules against closed forms. */
#include "harness.h"
#include "herd/herd_optim.h"

/* Three steps of momentum SGD with weight decay, unrolled by hand:
 * d = g + wd*p; v = mu*v + d; p -= lr*v. */
static void test_momentum_closed_form(void)
{
    herd_optim_config cfg = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
    herd_optim o;
    ASSERT_OK(herd_optim_init(&o, &cfg, 2, NULL));
    float p[2] = {1.0f, -2.0f}, g[2] = {0.5f, 0.25f};
    double P[2] = {1.0, -2.0}, V[2] = {0, 0};
    for (int s = 0; s < 3; s++) {
        herd_optim_step(&o, p, g, 0, 2, 0.1f);
        for (int i = 0; i < 2; i++) {
            double d = g[i] + 0.01 * P[i];
            V[i] = 0.9 * V[i] + d;
            P[i] -= 0.1 * V[i];
        }
    }
    ASSERT_NEAR(p[0], P[0], 1e-6, 0);
    ASSERT_NEAR(p[1], P[1], 1e-6, 0);
    /* first step by hand: v = 0.5 + 0.01 = 0.51, p = 1 - 0.051 */
    herd_optim_free(&o);
    ASSERT_OK(herd_optim_init(&o, &cfg, 2, NULL));
    float q[2] = {1.0f, -2.0f};
    herd_optim_step(&o, q, g, 0, 2, 0.1f);
    ASSERT_NEAR(q[0], 0.949, 1e-6, 0);
    herd_optim_free(&o);
}

static void test_nesterov_and_plain(void)
{
    herd_optim_config cfg = {.lr = 0.1f, .momentum = 0.5f, .nesterov = true};
    herd_optim o;
    ASSERT_OK(herd_optim_init(&o, &cfg, 1, NULL));
    float p = 1.0f, g = 1.0f;
    herd_optim_step(&o, &p, &g, 0, 1, 0.1f); /* v = 1; p -= 0.1*(1 + 0.5*1) */
    ASSERT_NEAR(p, 0.85, 1e-6, 0);
    herd_optim_step(&o, &p, &g, 0, 1, 0.1f); /* v = 1.5; p -= 0.1*(1 + 0.75) */
    ASSERT_NEAR(p, 0.675, 1e-6, 0);
    herd_optim_free(&o);
    herd_optim_config plain = {.lr = 0.5f};
    ASSERT_OK(herd_optim_init(&o, &plain, 1, NULL));
    ASSERT_TRUE(o.v == NULL);
    p = 2.0f;
    herd_optim_step(&o, &p, &g, 0, 1, 0.5f);
    ASSERT_NEAR(p, 1.5, 0, 0);
    herd_optim_free(&o);
}

/* A step on a sub-range touches nothing outside it. */
static void test_range_only(void)
{
    herd_optim_config cfg = {.lr = 1.0f, .momentum = 0.9f};
    herd_optim o;
    ASSERT_OK(herd_optim_init(&o, &cfg, 6, NULL));
    float p[6] = {0}, g[6] = {1, 1, 1, 1, 1, 1};
    herd_optim_step(&o, p, g, 2, 3, 1.0f);
    float want[6] = {0, 0, -1, -1, -1, 0};
    for (int i = 0; i < 6; i++)
        ASSERT_NEAR(p[i], want[i], 0, 0);
    herd_optim_free(&o);
}

static void test_schedules(void)
{
    herd_optim_config c = {.lr = 1.0f, .schedule = HERD_SCHED_COSINE};
    ASSERT_NEAR(herd_optim_lr(&c, 0, 10), 1.0, 1e-7, 0);
    ASSERT_NEAR(herd_optim_lr(&c, 5, 10), 0.5, 1e-6, 0);
    ASSERT_NEAR(herd_optim_lr(&c, 10, 10), 0.0, 1e-6, 0);
    ASSERT_NEAR(herd_optim_lr(&c, 2.5, 10), 0.5 * (1 + cos(M_PI / 4)), 1e-6, 0);
    c.schedule = HERD_SCHED_STEP, c.step_epochs = 3, c.step_gamma = 0.1f;
    ASSERT_NEAR(herd_optim_lr(&c, 2.9, 10), 1.0, 1e-7, 0);
    ASSERT_NEAR(herd_optim_lr(&c, 3.0, 10), 0.1, 1e-7, 0);
    ASSERT_NEAR(herd_optim_lr(&c, 6.5, 10), 0.01, 1e-8, 0);
    c.schedule = HERD_SCHED_CONST;
    ASSERT_NEAR(herd_optim_lr(&c, 7, 10), 1.0, 0, 0);
    /* warm-up: from lr/10 at 0 linearly to lr at warmup_epochs, then the schedule */
    c.warmup_epochs = 2;
    ASSERT_NEAR(herd_optim_lr(&c, 0, 10), 0.1, 1e-7, 0);
    ASSERT_NEAR(herd_optim_lr(&c, 1, 10), 0.55, 1e-6, 0);
    ASSERT_NEAR(herd_optim_lr(&c, 2, 10), 1.0, 1e-7, 0);
    c.schedule = HERD_SCHED_COSINE; /* cosine runs over the 8 epochs after warm-up */
    ASSERT_NEAR(herd_optim_lr(&c, 6, 10), 0.5, 1e-6, 0);
    herd_schedule s;
    ASSERT_OK(herd_schedule_parse("step", &s));
    ASSERT_EQ_INT(s, HERD_SCHED_STEP);
    ASSERT_EQ_INT(herd_schedule_parse("linear", &s), HERD_EINVAL);
}

const herd_test herd_tests_optim[] = {
    {"optim_momentum_closed_form", test_momentum_closed_form, 10},
    {"optim_nesterov_and_plain", test_nesterov_and_plain, 10},
    {"optim_range_only", test_range_only, 10},
    {"optim_schedules", test_schedules, 10},
    HERD_TEST_END,
};
