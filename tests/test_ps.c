/* The parameter-server family: asgd, amsgd, hogwild with --staleness-lr,
 * --softsync, --max-staleness and --ps-shards (src/algo/ps.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/center.h"
#include "algo_driver.h"
#include "core/clock.h"
#include "fixtures.h"
#include "harness.h"
#include "herd/herd_comm.h"
#include "herd/herd_run.h"

/* Every PS algorithm, with each staleness option, reaches the optimum of a
 * noisy quadratic; the model evaluated is the server's. */
static void test_converges(void)
{
    drive_problem p = drive_problem_make(64, 0.05f, 7);
    const char *algos[] = {"asgd", "amsgd", "hogwild"};
    for (size_t a = 0; a < 3; a++)
        for (int variant = 0; variant < 5; variant++) {
            if (variant == 2 && a == 2)
                continue; /* hogwild has no softsync */
            drive_config dc = drive_config_make(algos[a], 4, 300, 0.1f);
            if (a == 1)
                dc.cfg.optim.lr = 0.05f, dc.cfg.optim.momentum = 0.5f;
            /* each option alone (--staleness-lr is asgd's and hogwild's default) */
            herd_test_set(&dc.cfg, "staleness-lr", variant == 1 ? "true" : "false");
            if (variant == 2)
                herd_test_set(&dc.cfg, "softsync", "2");
            if (variant == 3)
                herd_test_set(&dc.cfg, "max-staleness", "1");
            if (variant == 4)
                herd_test_set(&dc.cfg, "ps-shards", "3");
            dc.sleep_us[3] = 200; /* one slower worker: real staleness */
            drive_result r;
            drive_run_ok(&dc, &p, &r);
            ASSERT_TRUE(r.eval_name && strcmp(r.eval_name, "server") == 0);
            double e = drive_max_error(&p, r.eval);
            if (!(e < 0.05))
                herd_test_fail(__FILE__, __LINE__, "%s variant %d: max error %g", algos[a], variant, e);
            drive_result_free(&r);
        }
    drive_problem_free(&p);
}

/* Three workers pull, then push in order, round after round. With
 * --staleness-lr the push reads the counters first, so the pull stays in
 * before_step: worker i's gradient is always i updates stale, and the
 * server follows the closed form x <- x - (sum_i eta_i) a (x - x*), with
 * eta_i = lr / max(1, i). Without it, each push sends the next pull ahead
 * of it (pull_ahead): worker i then computes at what the server held after
 * its own push of the round before, stale i in the first round and N - 1
 * after; the server follows the same recurrence, worker by worker. */
static void test_staleness_schedule(void)
{
    enum { N = 3, ROUNDS = 6, DIM = 8 };
    drive_problem p = drive_problem_make(DIM, 0.0f, 3);
    size_t sched[2 * N * ROUNDS];
    for (size_t r = 0, k = 0; r < ROUNDS; r++) {
        for (size_t i = 0; i < N; i++)
            sched[k++] = i; /* pulls */
        for (size_t i = 0; i < N; i++)
            sched[k++] = i; /* pushes */
    }
    for (int slr = 0; slr < 2; slr++) {
        drive_config dc = drive_config_make("asgd", N, ROUNDS, 0.1f);
        herd_test_set(&dc.cfg, "staleness-lr", slr ? "true" : "false"); /* asgd's default: on */
        dc.schedule = sched;
        dc.schedule_len = sizeof sched / sizeof *sched;
        dc.steps_per_epoch = ROUNDS;
        drive_result r;
        drive_run_ok(&dc, &p, &r);
        for (size_t i = 0; i < N; i++) {
            char want[96];
            double mean = slr ? (double)i : ((double)i + (ROUNDS - 1.0) * (N - 1.0)) / ROUNDS;
            snprintf(want, sizeof want, "\"staleness_mean\":%.4f,\"staleness_max\":%zu", mean, slr ? i : (size_t)N - 1);
            ASSERT_STR_CONTAINS(r.log[i], want);
            snprintf(want, sizeof want, "\"gradients\":%d", ROUNDS);
            ASSERT_STR_CONTAINS(r.log[i], want);
        }
        ASSERT_STR_CONTAINS(r.log[2], "\"staleness_hist\":[0,0,6,0,");
        for (size_t j = 0; j < DIM; j++) {
            double x = 0, view[N] = {0};
            for (size_t k = 0; k < ROUNDS; k++) {
                for (size_t i = 0; i < N; i++) {
                    double eta = slr && i > 1 ? 0.1 / (double)i : 0.1;
                    x -= eta * p.curv[j] * (view[i] - p.xstar[j]);
                    if (!slr)
                        view[i] = x;
                }
                for (size_t i = 0; slr && i < N; i++)
                    view[i] = x;
            }
            ASSERT_NEAR(r.eval[j], x, 1e-5, 1e-4);
        }
        drive_result_free(&r);
    }
    drive_problem_free(&p);
}

/* softsync over several shards: each shard groups the pushes in the order
 * they reach it, so near the end two workers could each wait, alone, in a
 * group of another shard for the other's next push, and stall to the
 * timeout. Uneven workers, many short runs: every one must end, and well
 * within the timeout (the stall came in about 1 of 300 such runs). */
static void test_softsync_shards_no_stall(void)
{
    drive_problem p = drive_problem_make(48, 0.1f, 5);
    for (int rep = 0; rep < 600; rep++) {
        size_t n = 3 + (size_t)(rep % 2);
        drive_config dc = drive_config_make("asgd", n, 12 + (size_t)(rep % 5), 0.05f);
        herd_test_set(&dc.cfg, "softsync", "2");
        herd_test_set(&dc.cfg, "ps-shards", rep % 3 ? "2" : "3");
        dc.sleep_us[rep % n] = 100 + 50 * (rep % 4);
        dc.sleep_us[(rep + 1) % n] = 30;
        dc.timeout_s = 3;
        drive_result r;
        herd_err err = {0};
        double t0 = herd__now();
        if (drive_run(&dc, &p, &r, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "run %d (%zu workers): %s", rep, n, err.msg);
        ASSERT_TRUE(herd__now() - t0 < 2.0);
        drive_result_free(&r);
    }
    drive_problem_free(&p);
}

/* --softsync n is synchronous SGD: the same weights as allreduce on the same
 * gradients (noise streams are per worker and step), up to float sum order;
 * amsgd's server momentum matches the local momentum of allreduce. */
static void test_softsync_n_is_allreduce(void)
{
    enum { N = 4, STEPS = 40 };
    drive_problem p = drive_problem_make(96, 0.2f, 11);
    for (int mom = 0; mom < 2; mom++) {
        drive_config ps = drive_config_make(mom ? "amsgd" : "asgd", N, STEPS, 0.05f);
        herd_test_set(&ps.cfg, "softsync", herd_test_fmt("%d", (int)N));
        herd_test_set(&ps.cfg, "ps-shards", "2");
        ps.sleep_us[1] = 300;
        drive_config ar = drive_config_make("allreduce", N, STEPS, 0.05f);
        ps.cfg.optim.momentum = ar.cfg.optim.momentum = mom ? 0.9f : 0.0f;
        drive_result rp, ra;
        drive_run_ok(&ps, &p, &rp);
        drive_run_ok(&ar, &p, &ra);
        for (size_t j = 0; j < p.dim; j++)
            ASSERT_NEAR(rp.eval[j], ra.x[j], 2e-5, 1e-4);
        /* and not trivially: the weights moved */
        ASSERT_TRUE(drive_max_error(&p, ra.x) < 0.9 * drive_max_error(&p, p.x0));
        drive_result_free(&rp);
        drive_result_free(&ra);
    }
    /* fully asynchronous asgd on the same problem differs from allreduce */
    drive_config as = drive_config_make("asgd", N, STEPS, 0.05f), ar = drive_config_make("allreduce", N, STEPS, 0.05f);
    as.sleep_us[1] = 300;
    drive_result r1, r2;
    drive_run_ok(&as, &p, &r1);
    drive_run_ok(&ar, &p, &r2);
    double diff = 0;
    for (size_t j = 0; j < p.dim; j++)
        diff = fmax(diff, fabs((double)r1.eval[j] - (double)r2.x[j]));
    ASSERT_TRUE(diff > 1e-3);
    drive_result_free(&r1);
    drive_result_free(&r2);
    drive_problem_free(&p);
}

/* Counts worker b's steps done strictly before time t. */
static size_t done_before(const drive_result *r, size_t b, size_t steps, double t)
{
    size_t n = 0;
    for (size_t k = 0; k < steps; k++)
        n += r->t_done[b * steps + k] > 0 && r->t_done[b * steps + k] < t;
    return n;
}

/* The largest lead (steps started minus the slowest worker's steps done) any
 * worker ever had at the start of a step. */
static long max_lead(const drive_result *r, size_t n, size_t steps)
{
    long lead = 0;
    for (size_t a = 0; a < n; a++)
        for (size_t t = 0; t < steps; t++)
            for (size_t b = 0; b < n; b++)
                if (b != a) {
                    long l = (long)t - (long)done_before(r, b, steps, r->t_start[a * steps + t]);
                    if (l > lead)
                        lead = l;
                }
    return lead;
}

/* SSP: no worker starts step t before every worker finished step t - s. */
static void test_ssp_bound(void)
{
    enum { N = 4, STEPS = 40 };
    drive_problem p = drive_problem_make(16, 0.01f, 5);
    for (long s = 0; s <= 3; s += 3) {
        drive_config dc = drive_config_make("asgd", N, STEPS, 0.05f);
        herd_test_set(&dc.cfg, "max-staleness", herd_test_fmt("%ld", (long)s));
        dc.sleep_us[2] = 2000;
        drive_result r;
        drive_run_ok(&dc, &p, &r);
        /* +1: a worker publishes its step inside the step hook, and the
         * driver stamps t_done only after the hook returns, so a peer may
         * start in between */
        long lead = max_lead(&r, N, STEPS);
        if (lead > s + 1)
            herd_test_fail(__FILE__, __LINE__, "--max-staleness %ld: a worker led by %ld steps", s, lead);
        drive_result_free(&r);
    }
    /* without the bound the fast workers run far ahead (the check can fail) */
    drive_config dc = drive_config_make("asgd", N, STEPS, 0.05f);
    dc.sleep_us[2] = 2000;
    drive_result r;
    drive_run_ok(&dc, &p, &r);
    ASSERT_TRUE(max_lead(&r, N, STEPS) > 4);
    drive_result_free(&r);
    drive_problem_free(&p);
}

/* Hogwild's primitive: many workers add into the same elements under shared
 * locks at once; the documented loss is none (element-wise atomic adds), and
 * the update counter counts every push. */
typedef struct hog_arg {
    herd_threads_world *world;
    size_t rank, n;
    int ok;
} hog_arg;

enum { HOG_DIM = 4096, HOG_PUSHES = 200 };

static void *hog_thread(void *p)
{
    hog_arg *a = p;
    herd_comm *c;
    herd_err err = {0};
    float init[HOG_DIM] = {0}, ones[HOG_DIM];
    for (size_t i = 0; i < HOG_DIM; i++)
        ones[i] = (float)(a->rank + 1);
    if (herd_comm_threads_create(a->world, a->rank, &c, &err) != HERD_OK)
        return NULL;
    herd__center ctr;
    if (herd__center_create(&ctr, c, HOG_DIM, 2, 1, init, true) != HERD_OK)
        goto out;
    for (size_t k = 0; k < HOG_PUSHES; k++)
        for (size_t s = 0; s < 2; s++) {
            if (herd__center_lock(&ctr, s, false) || herd__center_accumulate(&ctr, s, 0, ones) ||
                herd__center_add_count(&ctr, s, 0, 1.0f) || herd__center_unlock(&ctr, s))
                goto out_ctr;
        }
    if (herd_comm_barrier(c) != HERD_OK)
        goto out_ctr;
    float all[HOG_DIM], count;
    if (herd__center_read(&ctr, all) || herd__center_lock(&ctr, 1, false) ||
        herd__center_get_count(&ctr, 1, 0, &count) || herd__center_unlock(&ctr, 1))
        goto out_ctr;
    float want = (float)(HOG_PUSHES * a->n * (a->n + 1) / 2);
    a->ok = count == (float)(HOG_PUSHES * a->n);
    for (size_t i = 0; i < HOG_DIM; i++)
        a->ok &= all[i] == want;
    herd_comm_barrier(c); /* nobody frees the window while another reads it */
out_ctr:
    herd__center_free(&ctr);
out:
    herd_comm_free(c);
    return NULL;
}

static void test_hogwild_loses_nothing(void)
{
    enum { N = 8 };
    herd_threads_world *w;
    ASSERT_OK(herd_threads_world_create(N, &w, NULL));
    pthread_t th[N];
    hog_arg args[N];
    for (size_t i = 0; i < N; i++) {
        args[i] = (hog_arg){.world = w, .rank = i, .n = N};
        ASSERT_EQ_INT(pthread_create(&th[i], NULL, hog_thread, &args[i]), 0);
    }
    for (size_t i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    herd_threads_world_free(w);
    for (size_t i = 0; i < N; i++)
        ASSERT_TRUE(args[i].ok);
}

static herd__train_config small(const char *algo, size_t workers)
{
    herd__train_config c = herd_test_config("linear", algo, workers);
    c.batch = 16;
    c.comm_timeout_s = 20;
    return c;
}

/* End to end: each learns; the server's model is evaluated; the epoch is
 * the whole training set over all workers, however the work was shared. */
static void test_train_end_to_end(void)
{
    const char *algos[] = {"asgd", "amsgd", "hogwild"};
    for (size_t a = 0; a < 3; a++) {
        herd__train_config c = small(algos[a], 4);
        if (a == 1)
            c.optim.lr = 0.01f;
        c.slow[0] = (herd__slow){.rank = 1, .factor = 4};
        c.nslow = 1;
        herd_train_result r;
        herd_err err = {0};
        herd_status st = herd__train(&c, &r, &err);
        if (st != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "%s: %s", algos[a], err.msg);
        ASSERT_TRUE(strcmp(r.eval_model, "server") == 0);
        ASSERT_TRUE(r.test_acc > 0.8);
        ASSERT_NEAR(r.images, 2 * 2048, 0, 0);
        ASSERT_EQ_INT(r.nlost, 0);
        /* --staleness-lr: on by default for asgd and hogwild, off for amsgd */
        ASSERT_STR_CONTAINS(r.algo_json, a == 1 ? "\"softsync\":1,\"softsync_n\":4,\"staleness_lr\":false"
                                                : "\"softsync\":1,\"softsync_n\":4,\"staleness_lr\":true");
    }
}

/* The summary names the run's softsync in herd's count (gradients per
 * update) and in the paper's (n = workers / C). */
static void test_summary_names_softsync(void)
{
    herd__train_config c = small("asgd", 4);
    c.max_steps = 3;
    herd_test_set(&c, "softsync", "2");
    herd_test_set(&c, "staleness-lr", NULL);
    herd_train_result r;
    herd_err err = {0};
    if (herd__train(&c, &r, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ASSERT_STR_CONTAINS(r.algo_json, "\"softsync\":2,\"softsync_n\":2,\"staleness_lr\":true");
}

/* A lost worker: asynchronous runs finish without it and name it; a run
 * that would lose a shard of the server is refused before it starts; a
 * synchronous run stops naming the worker. */
static void test_lost_workers(void)
{
    herd__train_config c = small("asgd", 4);
    herd_test_set(&c, "ps-shards", "2"); /* on workers 0 and 1 */
    c.fail[0] = (herd__fail){.rank = 2, .step = 0}; /* the others might finish before any later step */
    c.nfail = 1;
    herd_train_result r;
    herd_err err = {0};
    ASSERT_OK(herd__train(&c, &r, &err));
    ASSERT_EQ_INT(r.nlost, 1);
    ASSERT_EQ_INT(r.lost[0], 2);
    ASSERT_TRUE(r.test_acc > 0.8);
    ASSERT_NEAR(r.images, 2 * 2048, 0, 0); /* the lost worker claimed no batch it did not train */

    c.fail[0] = (herd__fail){.rank = 0, .step = 0};
    herd_test_set(&c, "softsync", "2");
    memset(&err, 0, sizeof err);
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "the server's first shard is always on worker 0, which cannot fail");

    c = small("allreduce", 3);
    c.fail[0] = (herd__fail){.rank = 1, .step = 7};
    c.nfail = 1;
    memset(&err, 0, sizeof err);
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_EKILLED);
    ASSERT_STR_CONTAINS(err.msg, "worker 1 stopped at step 7");
}

/* The SSP bound and softsync groups do not wait for a worker that has
 * stopped: a lost worker, or one whose share of the data ran out. */
static void test_waits_survive_stops(void)
{
    herd__train_config c = small("asgd", 3);
    herd_test_set(&c, "max-staleness", "1");
    herd_test_set(&c, "softsync", "2");
    herd_test_set(&c, "ps-shards", "1");
    c.train_limit = 16 * 3 * 7; /* 21 batches: the last softsync group is short */
    c.fail[0] = (herd__fail){.rank = 1, .step = 3};
    c.nfail = 1;
    herd_train_result r;
    herd_err err = {0};
    herd_status st = herd__train(&c, &r, &err);
    if (st != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ASSERT_EQ_INT(r.nlost, 1);
}

static void test_option_errors(void)
{
    herd_train_result r;
    herd_err err = {0};
    herd__train_config c = small("allreduce", 2);
    herd_test_set(&c, "softsync", "2");
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--softsync applies to asgd, amsgd, hogwild, not --algo allreduce");
    c = small("hogwild", 2);
    herd_test_set(&c, "softsync", "2");
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "not hogwild");
    c = small("asgd", 2);
    herd_test_set(&c, "ps-shards", "3");
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--ps-shards must be in [0, workers = 2] (0: every worker), got 3");
    /* the default puts a shard on every worker: a lost worker is refused before the run */
    c = small("asgd", 3);
    c.fail[0] = (herd__fail){.rank = 2, .step = 5};
    c.nfail = 1;
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--fail 2@5: worker 2 holds shard 2 of the parameter server's 3 (--ps-shards 0: every "
                                 "worker); an asynchronous run goes on without a lost worker, not without a shard");
    c = small("asgd", 2);
    c.fail[0] = (herd__fail){.rank = 2, .step = 1};
    c.nfail = 1;
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--fail 2@1 names worker 2");
}

const herd_test herd_tests_ps[] = {
    {"ps_converges", test_converges, 120},
    {"ps_softsync_shards_no_stall", test_softsync_shards_no_stall, 120},
    {"ps_staleness_schedule", test_staleness_schedule, 60},
    {"ps_softsync_n_is_allreduce", test_softsync_n_is_allreduce, 60},
    {"ps_ssp_bound", test_ssp_bound, 60},
    {"ps_hogwild_loses_nothing", test_hogwild_loses_nothing, 60},
    {"ps_train_end_to_end", test_train_end_to_end, 120},
    {"ps_summary_names_softsync", test_summary_names_softsync, 60},
    {"ps_lost_workers", test_lost_workers, 120},
    {"ps_waits_survive_stops", test_waits_survive_stops, 60},
    {"ps_option_errors", test_option_errors, 30, HERD_TEST_ONE_THREAD},
    HERD_TEST_END,
};
