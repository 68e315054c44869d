/* The elastic averaging family (src/algo/easgd.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <pthread.h>
#include <sched.h>

#include "algo/center.h"
#include "algo_driver.h"
#include "fixtures.h"
#include "harness.h"
#include "herd/herd_rng.h"
#include "herd/herd_run.h"

/* Sync EASGD on a noisy quadratic follows the recursion computed here
 * (the driver's noise streams replayed): local SGD steps, and every
 * `period` steps d_i = alpha (x_i - c), x_i -= d_i, c += sum d_i. Two runs
 * give the same bits. */
static void test_sync_closed_form(void)
{
    enum { N = 3, STEPS = 24, PERIOD = 2, DIM = 10 };
    drive_problem p = drive_problem_make(DIM, 0.3f, 9);
    drive_config dc = drive_config_make("easgd", N, STEPS, 0.1f);
    herd_test_set(&dc.cfg, "elastic-period", herd_test_fmt("%d", PERIOD));
    drive_result r, r2;
    drive_run_ok(&dc, &p, &r);
    drive_run_ok(&dc, &p, &r2);
    ASSERT_TRUE(memcmp(r.x, r2.x, N * DIM * sizeof(float)) == 0);
    ASSERT_TRUE(memcmp(r.eval, r2.eval, DIM * sizeof(float)) == 0);
    ASSERT_TRUE(r.eval_name && strcmp(r.eval_name, "center") == 0);

    float x[N][DIM], c[DIM], d[N][DIM], alpha = 0.9f / N;
    herd_rng rng[N];
    for (size_t i = 0; i < N; i++) {
        herd_rng_seed(&rng[i], dc.cfg.seed, 0x77000000u + i);
        memcpy(x[i], p.x0, sizeof x[i]);
    }
    memcpy(c, p.x0, sizeof c);
    for (size_t s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < N; i++)
            for (size_t j = 0; j < DIM; j++) {
                float g = p.curv[j] * (x[i][j] - p.xstar[j]) + p.noise * herd_rng_normal(&rng[i]);
                x[i][j] -= 0.1f * g;
            }
        if ((s + 1) % PERIOD)
            continue;
        for (size_t i = 0; i < N; i++)
            for (size_t j = 0; j < DIM; j++) {
                d[i][j] = alpha * (x[i][j] - c[j]);
                x[i][j] -= d[i][j];
            }
        for (size_t j = 0; j < DIM; j++)
            for (size_t i = 0; i < N; i++)
                c[j] += d[i][j];
    }
    for (size_t j = 0; j < DIM; j++) {
        ASSERT_NEAR(r.eval[j], c[j], 1e-6, 1e-5);
        for (size_t i = 0; i < N; i++)
            ASSERT_NEAR(r.x[i * DIM + j], x[i][j], 1e-6, 1e-5);
    }
    /* the workers differ (own noise) and the center is not any of them */
    ASSERT_TRUE(r.x[0] != r.x[DIM]);
    drive_result_free(&r);
    drive_result_free(&r2);
    drive_problem_free(&p);
}

/* One exchange without concurrency moves mass between the worker and the
 * center and creates none: x + c after equals x + c before. */
static void test_exchange_conserves(void)
{
    /* eawild's first exchange pulls toward the initial weights, which the
     * center still is */
    const char *algos[] = {"easgd", "aeasgd", "ameasgd", "hogwild-easgd", "eawild"};
    drive_problem p = drive_problem_make(32, 0.0f, 4);
    for (size_t a = 0; a < 5; a++) {
        drive_config dc = drive_config_make(algos[a], 1, 1, 0.1f);
        herd_test_set(&dc.cfg, "elastic-alpha", "0.3");
        drive_result r;
        drive_run_ok(&dc, &p, &r);
        for (size_t j = 0; j < p.dim; j++) {
            /* before the exchange: x = x0 - lr g(x0) (ameasgd's first Nesterov
             * step is g + mu g: lr (1 + mu) g), c = x0 */
            float g = p.curv[j] * (p.x0[j] - p.xstar[j]);
            float x1 = p.x0[j] - 0.1f * (a == 2 ? 1.9f * g : g);
            ASSERT_NEAR((double)r.x[j] + r.eval[j], (double)x1 + p.x0[j], 1e-6, 1e-6);
            ASSERT_NEAR(r.eval[j], p.x0[j] + 0.3 * (x1 - p.x0[j]), 1e-6, 1e-5);
        }
        drive_result_free(&r);
    }
    drive_problem_free(&p);
}

/* The asynchronous variants reach the optimum of a noisy quadratic: the
 * center within 0.05, the workers within 0.1 on average. One worker's last
 * exchanges may meet a center that late starters are still dragging back
 * toward the start (8 threads on 2 cores: a worker can finish before another
 * has begun), so each worker alone is only held to 0.5, which still catches
 * divergence and a missing pull. */
static void test_async_converge(void)
{
    /* the last: eawild with its center served by messages (on threads auto
     * takes the windows) */
    const char *algos[] = {"aeasgd", "ameasgd", "hogwild-easgd", "eawild", "eawild"};
    drive_problem p = drive_problem_make(48, 0.05f, 13);
    for (size_t a = 0; a < 5; a++)
        for (size_t n = 2; n <= 8; n += 6) {
            drive_config dc = drive_config_make(algos[a], n, 400, a == 1 ? 0.02f : 0.1f);
            herd_test_set(&dc.cfg, "elastic-period", a % 2 ? "4" : "1");
            if (a == 4)
                herd_test_set(&dc.cfg, "elastic-transport", "messages");
            dc.sleep_us[n - 1] = 200;
            drive_result r;
            drive_run_ok(&dc, &p, &r);
            double e = drive_max_error(&p, r.eval);
            if (!(e < 0.05))
                herd_test_fail(__FILE__, __LINE__, "%s%s, %zu workers: center off by %g", algos[a],
                               a == 4 ? " (messages)" : "", n, e);
            double sum = 0;
            for (size_t i = 0; i < n; i++) {
                double ei = drive_max_error(&p, r.x + i * p.dim);
                sum += ei;
                if (!(ei < 0.5))
                    herd_test_fail(__FILE__, __LINE__, "%s, %zu workers: worker %zu off by %g (center by %g)",
                                   algos[a], n, i, ei, e);
            }
            if (!(sum / (double)n < 0.1))
                herd_test_fail(__FILE__, __LINE__, "%s, %zu workers: the workers are off by %g on average", algos[a],
                               n, sum / (double)n);
            drive_result_free(&r);
        }
    drive_problem_free(&p);
}

/* The epoch log carries the elastic distance, which shrinks as the workers
 * settle around the center, and the exchange's traffic: per exchange one
 * read and one accumulate of the whole vector. */
static void test_log_elastic_distance(void)
{
    drive_problem p = drive_problem_make(16, 0.0f, 2);
    drive_config dc = drive_config_make("aeasgd", 3, 40, 0.1f);
    dc.steps_per_epoch = 10;
    drive_result r;
    drive_run_ok(&dc, &p, &r);
    double dist = -1;
    const char *at = strstr(r.log[1], "\"elastic_dist\":");
    ASSERT_TRUE(at != NULL);
    ASSERT_EQ_INT(sscanf(at, "\"elastic_dist\":%lf", &dist), 1);
    ASSERT_TRUE(dist >= 0 && dist < 0.5);
    ASSERT_STR_CONTAINS(r.log[1], "\"exchanges\":10");
    ASSERT_STR_CONTAINS(r.log[1], "\"pushed_bytes\":640,\"pulled_bytes\":640,\"blocked_s\":");
    drive_result_free(&r);
    drive_problem_free(&p);
}

/* End to end: each learns on synthetic data; the center is evaluated; a
 * lost worker leaves the asynchronous ones running. */
static void test_train_end_to_end(void)
{
    /* the last: eawild over messages, whose lost holder's shard is reached
     * through its window */
    const char *algos[] = {"easgd", "aeasgd", "ameasgd", "hogwild-easgd", "eawild", "eawild"};
    for (size_t a = 0; a < 6; a++) {
        herd__train_config c = herd_test_config("linear", algos[a], 3);
        c.batch = 16;
        c.comm_timeout_s = 20;
        c.optim.lr = 0.2f;
        if (a == 5)
            herd_test_set(&c, "elastic-transport", "messages");
        if (a > 0) {
            c.fail[0] = (herd__fail){.rank = 2, .step = 0};
            c.nfail = 1;
        }
        herd_train_result r;
        herd_err err = {0};
        herd_status st = herd__train(&c, &r, &err);
        if (st != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "%s: %s", algos[a], err.msg);
        ASSERT_TRUE(strcmp(r.eval_model, "center") == 0);
        /* over messages a live holder serves its shard only while its
         * thread runs: on a loaded machine a holder starved of the CPU
         * leaves its shard behind (12 runs at load ~15: the center at
         * 0.57-0.95, its workers at 0.94-0.95); the case is here for the
         * lost holder's shard, reached through its window, and must learn */
        double want = a == 5 ? 0.5 : 0.8;
        if (!(r.test_acc > want))
            herd_test_fail(__FILE__, __LINE__, "%s%s: test_acc %.4f (steps %zu-%zu)", algos[a], a == 5 ? " (messages)" : "",
                           r.test_acc, r.steps_min, r.steps_max);
        ASSERT_EQ_INT(r.nlost, a > 0 ? 1 : 0);
    }
}

/* easgd's checkpoint holds its center: a run stopped mid-epoch and resumed
 * ends with the same center (evaluated: same test loss, bit for bit) as one
 * run straight through. */
static void test_checkpoint_resume(void)
{
    char da[512], db[512];
    snprintf(da, sizeof da, "%s/easgd-straight", herd_test_tmpdir());
    snprintf(db, sizeof db, "%s/easgd-stopped", herd_test_tmpdir());
    ASSERT_TRUE(mkdir(da, 0700) == 0 && mkdir(db, 0700) == 0);
    herd__train_config c = herd_test_config("linear", "easgd", 2);
    c.train_limit = 512; /* 8 steps an epoch */
    c.test_limit = 256;
    c.checkpoint_every = 3;
    herd_test_set(&c, "elastic-period", "2");
    herd_train_result a, b;
    herd_err err = {0};
    c.checkpoint_dir = da;
    if (herd__train(&c, &a, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "straight: %s", err.msg);
    c.checkpoint_dir = db;
    c.max_steps = 9; /* a checkpoint at step 9, mid-epoch, after an odd step */
    if (herd__train(&c, &b, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "stopped: %s", err.msg);
    c.max_steps = 0;
    c.resume = true;
    if (herd__train(&c, &b, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "resumed: %s", err.msg);
    ASSERT_EQ_INT(a.steps, 16);
    ASSERT_EQ_INT(b.steps, 16);
    ASSERT_TRUE(strcmp(b.eval_model, "center") == 0);
    ASSERT_TRUE(a.test_loss == b.test_loss);
    ASSERT_TRUE(a.worker0_acc == b.worker0_acc);

    /* the asynchronous variants checkpoint where every worker meets (see
     * test_ckpt.c), which a per-worker --max-steps would never reach */
    const char *async_algos[] = {"aeasgd", "eawild"};
    for (size_t i = 0; i < 2; i++) {
        c.algo = async_algos[i], c.resume = false, c.max_steps = 9;
        ASSERT_EQ_INT(herd__train(&c, &b, &err), HERD_EUNSUPPORTED);
        ASSERT_STR_CONTAINS(err.msg, "is asynchronous");
    }
}

/* The center served by messages loses and repeats nothing: every worker
 * pushes its own constant PUSHES times while polling, some of them holders
 * and (with fewer shards than workers) some not; after the drain the center
 * holds exactly the sum of all pushes (small integers: exact in floats),
 * and each worker's view holds at least its own pushes. */
typedef struct mc_arg {
    herd_threads_world *world;
    size_t rank, n, shards;
    int ok;
} mc_arg;

enum { MC_DIM = 1000, MC_PUSHES = 150 };

static herd_status push_all(herd__mcenter *m, const herd_worker *w, const float *d, float *view)
{
    for (size_t k = 0; k < m->center->shards; k++) {
        herd_status st = herd__mcenter_push(m, w, k, d, view);
        if (st < 0)
            return st;
    }
    return HERD_OK;
}

static void *mc_thread(void *p)
{
    mc_arg *a = p;
    herd_comm *c;
    herd_err err = {0};
    static const float zero[MC_DIM];
    float d[MC_DIM], view[MC_DIM], all[MC_DIM];
    if (herd_comm_threads_create(a->world, a->rank, &c, &err) != HERD_OK)
        return NULL;
    c->timeout_s = 30;
    herd_worker w = {.rank = a->rank, .nworkers = a->n, .comm = c};
    herd__center ctr;
    herd__mcenter m;
    if (herd__center_create(&ctr, c, MC_DIM, a->shards, 1, zero, true) != HERD_OK)
        goto out;
    if (herd__mcenter_init(&m, &ctr) != HERD_OK)
        goto out_ctr;
    for (size_t i = 0; i < MC_DIM; i++)
        d[i] = (float)(a->rank + 1), view[i] = 0;
    for (size_t t = 0; t < MC_PUSHES; t++) {
        if (push_all(&m, &w, d, view) != HERD_OK || herd__mcenter_poll(&m, &w, view) != HERD_OK)
            goto out_mc;
        if (t % 16 == a->rank)
            sched_yield();
    }
    double waited = 0;
    if (herd__mcenter_drain(&m, &w, view, &waited) != HERD_OK || herd_comm_barrier(c) != HERD_OK)
        goto out_mc;
    if (herd__center_read(&ctr, all) != HERD_OK)
        goto out_mc;
    float want = (float)(MC_PUSHES * a->n * (a->n + 1) / 2), own = (float)(MC_PUSHES * (a->rank + 1));
    a->ok = m.sent > 0 || a->shards == 1;
    for (size_t i = 0; i < MC_DIM; i++)
        a->ok &= all[i] == want && view[i] >= own && view[i] <= want;
    herd_comm_barrier(c); /* nobody frees the window while another reads it */
out_mc:
    herd__mcenter_free(&m);
out_ctr:
    herd__center_free(&ctr);
out:
    herd_comm_free(c);
    return NULL;
}

static void test_message_center_exact(void)
{
    enum { N = 6 };
    size_t shard_counts[] = {N, 4, 1};
    for (size_t s = 0; s < 3; s++) {
        herd_threads_world *w;
        ASSERT_OK(herd_threads_world_create(N, &w, NULL));
        pthread_t th[N];
        mc_arg args[N];
        for (size_t i = 0; i < N; i++) {
            args[i] = (mc_arg){.world = w, .rank = i, .n = N, .shards = shard_counts[s]};
            ASSERT_EQ_INT(pthread_create(&th[i], NULL, mc_thread, &args[i]), 0);
        }
        for (size_t i = 0; i < N; i++)
            pthread_join(th[i], NULL);
        herd_threads_world_free(w);
        for (size_t i = 0; i < N; i++)
            if (!args[i].ok)
                herd_test_fail(__FILE__, __LINE__, "%zu shards: worker %zu's center or view is off", shard_counts[s], i);
    }
}

/* --elastic-transport is eawild's. */
static void test_transport_option(void)
{
    herd__train_config c = herd_test_config("linear", "aeasgd", 2);
    herd_test_set(&c, "elastic-transport", "messages");
    herd_train_result r;
    herd_err err = {0};
    ASSERT_TRUE(herd__train(&c, &r, &err) == HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--elastic-transport applies to eawild only");
}

const herd_test herd_tests_easgd[] = {
    {"easgd_sync_closed_form", test_sync_closed_form, 30},
    {"easgd_exchange_conserves", test_exchange_conserves, 30},
    {"easgd_async_converge", test_async_converge, 120},
    {"easgd_log_elastic_distance", test_log_elastic_distance, 30},
    {"easgd_train_end_to_end", test_train_end_to_end, 120},
    {"easgd_checkpoint_resume", test_checkpoint_resume, 60},
    {"easgd_message_center_exact", test_message_center_exact, 60},
    {"easgd_transport_option", test_transport_option, 30, HERD_TEST_ONE_THREAD},
    HERD_TEST_END,
};
