/* Tests of the decentralized (dpsgd, adpsgd) and push-sum (sgp, osgp)
 * algorithms: invariants of the gossip step (mixing matrix, push-sum mass,
 * atomic pair averages), no deadlock under slowdowns, convergence on the
 * convex problem of algo_driver.h, and end-to-end training. */
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "algo_driver.h"
#include "fixtures.h"
#include "harness.h"
#include "herd/herd_algo.h"
#include "herd/herd_comm.h"
#include "herd/herd_rng.h"
#include "herd/herd_run.h"

static const char *const topologies[] = {"ring", "exp", "random"};

/* ---- a small runner: per-worker start, scripted gradients ---------------- */

/* The gradient worker `rank` uses at `step` (dim floats); NULL: zero. */
typedef void (*grad_fn)(size_t rank, size_t step, float *g, size_t dim);

typedef struct grun {
    const char *algo, *topology;
    size_t workers, steps, dim, max_delay;
    float lr;
    float (*init)(size_t rank, size_t j); /* worker rank's start, element j */
    grad_fn grad;
    double max_sleep_us;                   /* random extra time per step, per worker */
    /* results */
    float *x;                              /* workers x dim: final weights */
    float *eval;                           /* eval_params, or NULL */
    double weight[64];                     /* push_weight from log_epoch, or -1 */
    char log[64][512];
} grun;

typedef struct gworker {
    grun *g;
    herd_threads_world *world;
    herd__train_config *cfg;
    herd_worker w;
    herd_algo algo;
    herd_status st;
} gworker;

#define GHOOK(d, name)                                              \
    do {                                                            \
        if ((d)->algo.ops->name)                                    \
            HERD_TRY((d)->algo.ops->name(&(d)->algo, &(d)->w));     \
    } while (0)

static herd_status gloop(gworker *d)
{
    herd_status st = HERD_OK;
    herd_worker *w = &d->w;
    herd_rng rng;
    herd_rng_seed(&rng, 99, w->rank);
    GHOOK(d, init);
    for (size_t s = 0; s < d->g->steps; s++) {
        w->lr = d->g->lr;
        GHOOK(d, before_step);
        if (d->g->grad)
            d->g->grad(w->rank, s, w->grads, w->nparams);
        if (d->g->max_sleep_us > 0) {
            double us = d->g->max_sleep_us * herd_rng_uniform(&rng);
            struct timespec ts = {0, (long)(us * 1000)};
            nanosleep(&ts, NULL);
        }
        herd_step_result res = {0};
        if (d->algo.ops->after_backward)
            HERD_TRY(d->algo.ops->after_backward(&d->algo, w, &res));
        HERD_TRY(herd_algo_update(&d->algo, w, &res, false));
        GHOOK(d, after_step);
        w->step++;
    }
    GHOOK(d, finish);
out:
    return st;
}

static void *gthread(void *p)
{
    gworker *d = p;
    d->st = gloop(d);
    if (d->st < 0 && d->st != HERD_EREMOTE)
        herd_threads_world_fail(d->world, d->w.rank);
    return NULL;
}

/* Runs g; fails the test on any error. */
static void grun_run(grun *g)
{
    size_t n = g->workers;
    ASSERT_TRUE(n >= 1 && n <= 64);
    herd__train_config cfg;
    herd__train_config_defaults(&cfg);
    cfg.algo = g->algo;
    cfg.workers = n;
    if (g->topology)
        herd_test_set(&cfg, "topology", g->topology);
    if (!strcmp(g->algo, "osgp"))
        herd_test_set(&cfg, "max-delay", herd_test_fmt("%zu", g->max_delay));
    cfg.optim.lr = g->lr;
    cfg.optim.momentum = 0;
    cfg.optim.weight_decay = 0;
    cfg.optim.schedule = HERD_SCHED_CONST;
    const herd_algo_ops *ops = herd_algo_find(g->algo);
    ASSERT_TRUE(ops != NULL);
    herd_threads_world *world;
    herd_err err = {0};
    ASSERT_OK(herd_threads_world_create(n, &world, &err));
    void *opts = herd_test_algo_opts(&cfg);
    gworker *ws = calloc(n, sizeof *ws);
    pthread_t *th = calloc(n, sizeof *th);
    ASSERT_TRUE(ws && th);
    for (size_t i = 0; i < n; i++) {
        gworker *d = &ws[i];
        herd_worker *w = &d->w;
        d->g = g, d->world = world, d->cfg = &cfg, d->algo.ops = ops;
        w->rank = i, w->nworkers = n, w->cfg = &cfg, w->opts = opts, w->nparams = g->dim, w->steps_per_epoch = g->steps;
        w->params = malloc(g->dim * sizeof(float));
        w->grads = calloc(g->dim, sizeof(float));
        ASSERT_TRUE(w->params && w->grads);
        for (size_t j = 0; j < g->dim; j++)
            w->params[j] = g->init(i, j);
        ASSERT_OK(herd_algo_optim_init(ops, opts, &cfg.optim, NULL, g->dim, &w->optim, &err));
        ASSERT_OK(herd_comm_threads_create(world, i, &w->comm, &err));
        w->comm->timeout_s = 20;
    }
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ_INT(pthread_create(&th[i], NULL, gthread, &ws[i]), 0);
    for (size_t i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    herd_threads_world_close(world);
    for (size_t i = 0; i < n; i++)
        if (ws[i].st < 0)
            herd_test_fail(__FILE__, __LINE__, "%s on %zu workers (%s): worker %zu: %s", g->algo, n,
                           g->topology ? g->topology : "default", i,
                           ws[i].w.err.msg[0] ? ws[i].w.err.msg : herd_comm_last_error(ws[i].w.comm));
    g->x = malloc(n * g->dim * sizeof(float));
    ASSERT_TRUE(g->x != NULL);
    for (size_t i = 0; i < n; i++) {
        memcpy(g->x + i * g->dim, ws[i].w.params, g->dim * sizeof(float));
        g->log[i][0] = 0;
        g->weight[i] = -1;
        if (ops->log_epoch) {
            ops->log_epoch(&ws[i].algo, &ws[i].w, g->log[i], sizeof g->log[i]);
            const char *pw = strstr(g->log[i], "\"push_weight\":");
            if (pw)
                g->weight[i] = strtod(pw + strlen("\"push_weight\":"), NULL);
        }
    }
    g->eval = NULL;
    if (ops->eval_params) {
        const char *name = NULL;
        float *e = malloc(g->dim * sizeof(float));
        ASSERT_TRUE(e != NULL);
        ASSERT_OK(ops->eval_params(&ws[0].algo, &ws[0].w, e, &name));
        if (name) {
            ASSERT_TRUE(strcmp(name, "average") == 0);
            g->eval = e;
        } else {
            free(e);
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (ops->free)
            ops->free(&ws[i].algo, &ws[i].w);
        herd_comm_free(ws[i].w.comm);
        herd_optim_free(&ws[i].w.optim);
        free(ws[i].w.params);
        free(ws[i].w.grads);
    }
    herd_threads_world_free(world);
    free(opts);
    free(ws);
    free(th);
}

static void grun_free(grun *g)
{
    free(g->x);
    free(g->eval);
    g->x = g->eval = NULL;
}

/* ---- D-PSGD: the mixing matrix ----------------------------------------------- */

static float unit_init(size_t rank, size_t j) { return rank == j ? 1.0f : 0.0f; }

/* Worker i starts at e_i and takes one step with no gradient, so it ends at
 * row i of W (x_i = sum_j W_ij e_j): rows and columns sum to 1, W is
 * symmetric, non-negative, with 1/(d+1) on the diagonal. */
static void test_dpsgd_mixing_doubly_stochastic(void)
{
    for (size_t t = 0; t < 3; t++)
        for (size_t n = 1; n <= 16; n++) {
            grun g = {.algo = "dpsgd", .topology = topologies[t], .workers = n, .steps = 1, .dim = n,
                      .lr = 0.1f, .init = unit_init};
            grun_run(&g);
            const float *W = g.x;
            for (size_t i = 0; i < n; i++) {
                double row = 0, col = 0;
                size_t nz = 0;
                for (size_t j = 0; j < n; j++) {
                    row += W[i * n + j], col += W[j * n + i];
                    ASSERT_TRUE(W[i * n + j] >= 0.0f);
                    ASSERT_TRUE(W[i * n + j] == W[j * n + i]);
                    nz += W[i * n + j] != 0.0f;
                }
                ASSERT_NEAR(row, 1.0, 1e-6, 0);
                ASSERT_NEAR(col, 1.0, 1e-6, 0);
                ASSERT_NEAR(W[i * n + i], 1.0 / (double)nz, 1e-7, 0);
                if (n >= 3 && t != 1)
                    ASSERT_EQ_INT(nz, 3); /* self and two ring neighbours */
            }
            ASSERT_TRUE(g.eval != NULL); /* the average: mean of the rows, 1/n each */
            for (size_t j = 0; j < n; j++)
                ASSERT_NEAR(g.eval[j], 1.0 / (double)n, 1e-6, 0);
            grun_free(&g);
        }
}

/* ---- push-sum: mass and consensus ---------------------------------------------- */

static float spread_init(size_t rank, size_t j) { return (float)((rank * 7 + j * 3) % 11) - 5.0f + 0.25f * (float)rank; }

/* sum_i w_i z_i and sum_i w_i are conserved by the gossip (no gradient), for
 * every topology and 1..16 workers; the de-biased models approach the
 * average of the starts. */
/* tol bounds the largest distance of a de-biased model from the average;
 * with `mean`, their mean distance instead, as a fraction of the starts'. */
static void check_pushsum(const char *algo, size_t max_delay, double sleep_us, double tol, bool mean)
{
    const size_t dim = 24;
    for (size_t t = 0; t < 3; t++)
        for (size_t n = 1; n <= 16; n++) {
            size_t steps = t == 0 ? 12 * n * n / 4 + 40 : 90; /* the directed ring mixes slowly */
            grun g = {.algo = algo, .topology = topologies[t], .workers = n, .steps = steps, .dim = dim,
                      .lr = 0.1f, .init = spread_init, .max_delay = max_delay, .max_sleep_us = sleep_us};
            grun_run(&g);
            double wsum = 0;
            for (size_t i = 0; i < n; i++) {
                ASSERT_TRUE(g.weight[i] > 0);
                wsum += g.weight[i];
            }
            ASSERT_NEAR(wsum, (double)n, 1e-9 * (double)n, 0);
            double err = 0, sum_err = 0, sum_start = 0;
            for (size_t j = 0; j < dim; j++) {
                double x = 0, x0 = 0;
                for (size_t i = 0; i < n; i++) {
                    x += g.weight[i] * (double)g.x[i * dim + j];
                    x0 += spread_init(i, j);
                }
                ASSERT_NEAR(x, x0, 1e-4 * (double)n, 1e-5);
                for (size_t i = 0; i < n; i++) {
                    double e = fabs((double)g.x[i * dim + j] - x0 / (double)n);
                    err = e > err ? e : err;
                    sum_err += e;
                    sum_start += fabs((double)spread_init(i, j) - x0 / (double)n);
                }
            }
            if (mean && n > 1 && !(sum_err <= tol * sum_start))
                herd_test_fail(__FILE__, __LINE__,
                               "%s %s n=%zu: de-biased models on average %.3g from the average after %zu steps, "
                               "%.3g of their starts' distance",
                               algo, topologies[t], n, sum_err / (double)(n * dim), steps, sum_err / sum_start);
            if (!mean && err > tol)
                herd_test_fail(__FILE__, __LINE__, "%s %s n=%zu: de-biased models %.3g from the average after %zu steps",
                               algo, topologies[t], n, err, steps);
            grun_free(&g);
        }
}

static void test_sgp_pushsum_invariants(void) { check_pushsum("sgp", 0, 0, 1e-3, false); }

static void test_osgp_pushsum_invariants(void) { check_pushsum("osgp", 2, 300, 1e-3, false); }

/* With no bound on delay, how far the models mix in a fixed number of steps
 * depends on the interleaving (a worker may run most of its steps before a
 * message reaches it, e.g. under a sanitizer's slowdown on a busy machine,
 * and keep its own start): mass must still be conserved exactly, and the
 * models must have mixed on the whole, to half their starts' mean distance
 * from the average, but not each of them, and not to 1e-3. */
static void test_osgp_pushsum_invariants_no_wait(void) { check_pushsum("osgp", 1000000, 300, 0.5, true); }

/* ---- AD-PSGD: atomic pair averages ---------------------------------------------- */

static float const_init(size_t rank, size_t j)
{
    (void)j;
    return (float)(rank * 16);
}

static void const_grad(size_t rank, size_t step, float *g, size_t dim)
{
    float v = 0.001f * (float)((rank + step) % 5);
    for (size_t j = 0; j < dim; j++)
        g[j] = v;
}

/* Every model starts constant (all elements equal) and every gradient is
 * constant, so an atomic average or update leaves each model constant, bit
 * for bit; one torn by a concurrent update (half of the vector averaged
 * before it, half after) would not be. Large models make the windows for a
 * tear wide; 2..16 workers on 2 cores, with random slowdowns. */
static void test_adpsgd_averages_atomic(void)
{
    const size_t sizes[] = {2, 3, 4, 7, 8, 16};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si], dim = 1 << 15;
        grun g = {.algo = "adpsgd", .topology = si % 2 ? "random" : "ring", .workers = n, .steps = 60,
                  .dim = dim, .lr = 1.0f, .init = const_init, .grad = const_grad, .max_sleep_us = 200};
        grun_run(&g);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 1; j < dim; j++)
                if (g.x[i * dim + j] != g.x[i * dim]) {
                    herd_test_fail(__FILE__, __LINE__, "n=%zu: worker %zu's model is torn: x[0]=%.9g x[%zu]=%.9g", n,
                                   i, (double)g.x[i * dim], j, (double)g.x[i * dim + j]);
                }
        ASSERT_TRUE(g.eval != NULL);
        for (size_t j = 1; j < dim; j++)
            ASSERT_TRUE(g.eval[j] == g.eval[0]);
        /* averages conserve the sum: mean = mean start - lr * (sum of all gradients) / n */
        double want = 0;
        for (size_t i = 0; i < n; i++) {
            want += const_init(i, 0);
            for (size_t s = 0; s < g.steps; s++) {
                float v;
                const_grad(i, s, &v, 1);
                want -= v;
            }
        }
        ASSERT_NEAR(g.eval[0], want / (double)n, 1e-3, 1e-5);
        grun_free(&g);
    }
}

/* ---- no deadlock under random slowdowns, convergence ----------------------------- */

static const char *const algos[] = {"dpsgd", "adpsgd", "sgp", "osgp"};

static void run_drive(const drive_config *dc, const drive_problem *p, drive_result *r)
{
    herd_err err = {0};
    herd_status st = drive_run(dc, p, r, &err);
    if (st != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s on %zu workers: %s", dc->cfg.algo, dc->cfg.workers, err.msg);
}

/* Every algorithm, 2..16 workers, each worker slowed at random (up to 2 ms
 * a step): all finish (the comm timeout bounds every wait) and agree. */
static void test_no_deadlock_random_slowdowns(void)
{
    drive_problem p = drive_problem_make(16, 0.0f, 3);
    herd_rng rng;
    herd_rng_seed(&rng, 5, 0);
    for (size_t a = 0; a < 4; a++)
        for (size_t n = 2; n <= 16; n += (n < 4 ? 1 : 4)) {
            drive_config dc = drive_config_make(algos[a], n, 40, 0.05f);
            dc.timeout_s = 20;
            for (size_t i = 0; i < n; i++)
                dc.sleep_us[i] = 2000 * herd_rng_uniform(&rng);
            herd_test_set(&dc.cfg, "topology", topologies[(a + n) % 3]);
            drive_result r;
            run_drive(&dc, &p, &r);
            for (size_t i = 0; i < n * p.dim; i++)
                ASSERT_TRUE(isfinite(r.x[i]));
            drive_result_free(&r);
        }
    drive_problem_free(&p);
}

/* The convex problem: the average model (and every worker's) reaches the
 * optimum, for each algorithm and topology, on 5 workers (odd: adpsgd's last
 * worker is active; not a power of 2 for sgp). */
static void test_convergence_convex(void)
{
    drive_problem p = drive_problem_make(32, 0.02f, 11);
    for (size_t a = 0; a < 4; a++)
        for (size_t t = 0; t < 3; t++) {
            drive_config dc = drive_config_make(algos[a], 5, 400, 0.1f);
            herd_test_set(&dc.cfg, "topology", topologies[t]);
            dc.steps_per_epoch = 100;
            /* every worker gives up its core each step, as a real step (far
             * longer than a time slice) does: without it, on two cores one
             * thread can run all its steps while another waits for a core,
             * a staleness no asynchronous algorithm's bound covers */
            for (size_t i = 0; i < 5; i++)
                dc.sleep_us[i] = 50;
            drive_result r;
            run_drive(&dc, &p, &r);
            ASSERT_TRUE(r.eval_name && strcmp(r.eval_name, "average") == 0);
            double e = drive_max_error(&p, r.eval);
            if (!(e < 0.05))
                herd_test_fail(__FILE__, __LINE__, "%s (%s): average model %.3g from the optimum", algos[a],
                               topologies[t], e);
            for (size_t i = 0; i < 5; i++) {
                double ei = drive_max_error(&p, r.x + i * p.dim);
                if (!(ei < 0.1))
                    herd_test_fail(__FILE__, __LINE__, "%s (%s): worker %zu's model %.3g from the optimum", algos[a],
                                   topologies[t], i, ei);
            }
            ASSERT_STR_CONTAINS(r.log[0], "\"consensus_dist\":");
            drive_result_free(&r);
        }
    drive_problem_free(&p);
}

/* osgp with --max-delay 0 is sgp: the same weights, bit for bit. */
static void test_osgp_tau0_equals_sgp(void)
{
    drive_problem p = drive_problem_make(40, 0.05f, 21);
    for (size_t t = 0; t < 3; t++) {
        drive_config dc = drive_config_make("sgp", 6, 120, 0.1f);
        dc.steps_per_epoch = 40;
        herd_test_set(&dc.cfg, "topology", topologies[t]);
        for (size_t i = 0; i < 6; i++)
            dc.sleep_us[i] = 300.0 * (double)(i % 3);
        drive_result a, b;
        run_drive(&dc, &p, &a);
        dc.cfg.algo = "osgp";
        herd_test_set(&dc.cfg, "max-delay", "0");
        run_drive(&dc, &p, &b);
        if (memcmp(a.x, b.x, 6 * p.dim * sizeof(float)) != 0)
            herd_test_fail(__FILE__, __LINE__, "%s: osgp --max-delay 0 differs from sgp: %.9g vs %.9g", topologies[t],
                           (double)b.x[0], (double)a.x[0]);
        drive_result_free(&b);
        /* and tau > 0 is not: messages are mixed as they come */
        herd_test_set(&dc.cfg, "max-delay", "3");
        run_drive(&dc, &p, &b);
        double e = drive_max_error(&p, b.eval);
        if (!(e < 0.1))
            herd_test_fail(__FILE__, __LINE__, "osgp tau 3 (%s): %.3g from the optimum: %s", topologies[t], e, b.log[0]);
        drive_result_free(&a);
        drive_result_free(&b);
    }
    drive_problem_free(&p);
}

/* ---- end to end ------------------------------------------------------------------ */

static void test_train_learns(void)
{
    for (size_t a = 0; a < 4; a++) {
        herd__train_config c = herd_test_config("linear", algos[a], 4);
        herd_train_result r;
        herd_err err = {0};
        herd_status st = herd__train(&c, &r, &err);
        if (st != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "%s: %s", algos[a], err.msg);
        if (!(r.test_acc > 0.85))
            herd_test_fail(__FILE__, __LINE__, "%s: test accuracy %.3f", algos[a], r.test_acc);
        ASSERT_TRUE(strcmp(r.eval_model, "average") == 0);
        if (a == 0 || a == 2) /* synchronous: worker 0 took every one of its steps */
            ASSERT_TRUE(r.worker0_acc > 0.85);
        ASSERT_TRUE(r.bytes_sent > 0);
    }
}

/* The synchronous ones are deterministic: the same seed, the same weights. */
static void test_train_sync_deterministic(void)
{
    const char *sync[] = {"dpsgd", "sgp"};
    for (size_t a = 0; a < 2; a++) {
        herd__train_config c = herd_test_config("linear", sync[a], 3);
        c.model = "lenet";
        c.epochs = 1;
        herd_test_set(&c, "topology", "random");
        herd_train_result x, y;
        ASSERT_OK(herd__train(&c, &x, NULL));
        ASSERT_OK(herd__train(&c, &y, NULL));
        ASSERT_TRUE(x.test_loss == y.test_loss && x.train_loss == y.train_loss);
    }
}

/* A worker lost to --fail is left out: adpsgd never picks it, osgp does not
 * wait for it; the others finish. (Step 0: with the shared batch counter a
 * later step might never come to that worker.) */
static void test_train_survives_lost_worker(void)
{
    const char *async[] = {"adpsgd", "osgp"};
    for (size_t a = 0; a < 2; a++) {
        herd__train_config c = herd_test_config("linear", async[a], 4);
        c.nfail = 1;
        c.fail[0] = (herd__fail){.rank = 1, .step = 0};
        c.comm_timeout_s = 20;
        herd_train_result r;
        herd_err err = {0};
        herd_status st = herd__train(&c, &r, &err);
        if (st != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "%s: %s", async[a], err.msg);
        ASSERT_EQ_INT(r.nlost, 1);
        ASSERT_EQ_INT(r.lost[0], 1);
        ASSERT_TRUE(r.test_acc > 0.8);
    }
}

/* osgp with a stalled in-neighbour (far slower than --timeout and
 * --max-delay): the worker stops within the timeout naming it, and the
 * message ends with what it waited for (a polled wait has no engine error
 * to append). */
static void test_train_stall_named(void)
{
    /* osgp's polled wait and sgp's blocking one say the same */
    const char *which[] = {"osgp", "sgp"};
    for (size_t a = 0; a < 2; a++) {
        herd__train_config c = herd_test_config("linear", which[a], 2);
        c.comm_timeout_s = 0.3;
        c.nslow = 1, c.slow[0] = (herd__slow){1, 1e6};
        herd_train_result r;
        herd_err err = {0};
        ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_ETIMEOUT);
        ASSERT_STR_CONTAINS(err.msg, which[a]);
        ASSERT_STR_CONTAINS(err.msg, "waiting for in-neighbour 1 at step ");
        size_t len = strlen(err.msg);
        if (len < 2 || err.msg[len - 1] == ' ' || err.msg[len - 1] == ':')
            herd_test_fail(__FILE__, __LINE__, "the message ends in a separator: '%s'", err.msg);
    }
}

const herd_test herd_tests_gossip[] = {
    {"gossip_dpsgd_mixing_doubly_stochastic", test_dpsgd_mixing_doubly_stochastic, 60},
    {"gossip_sgp_pushsum_invariants", test_sgp_pushsum_invariants, 120},
    {"gossip_osgp_pushsum_invariants", test_osgp_pushsum_invariants, 180},
    {"gossip_osgp_pushsum_invariants_no_wait", test_osgp_pushsum_invariants_no_wait, 180},
    {"gossip_adpsgd_averages_atomic", test_adpsgd_averages_atomic, 120},
    {"gossip_no_deadlock_random_slowdowns", test_no_deadlock_random_slowdowns, 180},
    {"gossip_convergence_convex", test_convergence_convex, 120},
    {"gossip_osgp_tau0_equals_sgp", test_osgp_tau0_equals_sgp, 60},
    {"gossip_train_learns", test_train_learns, 120},
    {"gossip_train_sync_deterministic", test_train_sync_deterministic, 120},
    {"gossip_train_survives_lost_worker", test_train_survives_lost_worker, 120},
    {"gossip_train_stall_named", test_train_stall_named, 60},
    HERD_TEST_END,
};
