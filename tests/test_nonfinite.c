/* NaN and Inf in losses and gradients (herd_run.h, skip_nonfinite): a NaN
 * injected into one worker's gradient (--inject-nan) stops every worker of a
 * synchronous run at that step, naming it; --skip-nonfinite skips that
 * update on every worker alike; an asynchronous run never lets it reach the
 * server, center or neighbours; a real divergence is reported as one. */
#include "fixtures.h"
#include "harness.h"
#include "herd/herd_comm.h"
#include "herd/herd_run.h"

/* The synchronous algorithms and every way allreduce reduces. */
typedef struct sync_case {
    const char *algo;
    size_t workers;
    size_t bucket;
    bool overlap, native, identical; /* identical: replicas bit-identical */
    int dtype;
    double csc;
    const char *model; /* NULL: linear (one layer) */
} sync_case;

static const sync_case sync_cases[] = {
    {"allreduce", 3, 4u << 20, true, false, true, HERD_F32, 0, NULL},
    {"allreduce", 3, 0, true, false, true, HERD_F32, 0, "mlp"}, /* a bucket per layer, reduced during backward */
    {"allreduce", 3, 1u << 20, false, false, true, HERD_F32, 0, NULL},
    {"allreduce", 3, 4096, true, false, true, HERD_F16, 0, NULL},
    {"allreduce", 3, 4096, false, false, true, HERD_BF16, 0, NULL},
    {"allreduce", 3, 4u << 20, true, false, true, HERD_F32, 0.5, NULL},
    {"allreduce", 3, 4u << 20, true, true, true, HERD_F32, 0, NULL},
    {"allreduce", 3, 4096, false, true, true, HERD_F32, 0, "mlp"}, /* shared memory, the update fused into it */
    {"easgd", 3, 0, false, false, false, HERD_F32, 0, NULL},
    {"dpsgd", 3, 0, false, false, false, HERD_F32, 0, NULL},
    {"sgp", 3, 0, false, false, false, HERD_F32, 0, NULL},
    {"sgd", 1, 0, false, false, true, HERD_F32, 0, NULL},
};
enum { NSYNC = sizeof sync_cases / sizeof sync_cases[0], INJECT_STEP = 4 };

static herd_train_config base(const char *algo, size_t workers, const char *model)
{
    herd_train_config c = herd_test_config(model, algo, workers);
    c.epochs = 1;
    c.batch = 16;
    c.train_limit = 384;
    c.test_limit = 128;
    c.optim.schedule = HERD_SCHED_CONST;
    return c;
}

static herd_train_config sync_config(const sync_case *k)
{
    herd_train_config c = base(k->algo, k->workers, k->model ? k->model : "linear");
    if (!strcmp(k->algo, "allreduce")) {
        herd_test_set(&c, "bucket-bytes", herd_test_fmt("%zu", (size_t)k->bucket));
        herd_test_set(&c, "overlap", k->overlap ? "on" : "off");
        herd_test_set(&c, "allreduce", k->native ? "native" : "ring");
        herd_test_set(&c, "comm-dtype", herd_test_dtype(k->dtype));
        herd_test_set(&c, "csc-ratio", herd_test_fmt("%.17g", (double)k->csc));
        herd_test_set(&c, "csc-chunk-bytes", "256");
    }
    return c;
}

static void inject(herd_train_config *c, size_t rank, size_t step)
{
    c->inject_nan[c->ninject_nan++] = (herd_inject){rank, step};
}

/* Runs c, which must stop on a non-finite value; the message in err. */
static void expect_nonfinite(const herd_train_config *c, const char *label, herd_err *err)
{
    herd_train_result r;
    herd_status st = herd_train(c, &r, err);
    if (st != HERD_ENONFINITE)
        herd_test_fail(__FILE__, __LINE__, "%s (%s): status %s, '%s'", label, c->algo, herd_err_name(st), err->msg);
}

/* The worker that gets the NaN: the last one, so it is not worker 0. */
static size_t victim(const sync_case *k) { return k->workers - 1; }

/* Counts the log's "nonfinite" records of `step` with `action`, and which
 * workers wrote them (bit i: worker i). */
static size_t count_records(const char *path, size_t step, const char *action, uint64_t *workers)
{
    FILE *f = fopen(path, "r");
    ASSERT_TRUE(f != NULL);
    char line[4096], want_step[64], want_action[64];
    snprintf(want_step, sizeof want_step, "\"step\":%zu,", step);
    snprintf(want_action, sizeof want_action, "\"action\":\"%s\"", action);
    size_t n = 0;
    *workers = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "\"event\":\"nonfinite\""))
            continue;
        /* every record of the run is of this step and action */
        if (!strstr(line, want_step) || !strstr(line, want_action))
            herd_test_fail(__FILE__, __LINE__, "unexpected record: %s", line);
        const char *wk = strstr(line, "\"worker\":");
        ASSERT_TRUE(wk != NULL);
        *workers |= 1ull << strtoul(wk + 9, NULL, 10);
        n++;
    }
    fclose(f);
    return n;
}

/* Every worker stops at exactly the injected step, with the message. */
static void test_sync_stop(void)
{
    for (size_t i = 0; i < NSYNC; i++) {
        const sync_case *k = &sync_cases[i];
        char path[512], want[128];
        snprintf(path, sizeof path, "%s/stop%zu.jsonl", herd_test_tmpdir(), i);
        herd_train_config c = sync_config(k);
        c.log_path = path;
        inject(&c, victim(k), INJECT_STEP);
        herd_err err = {0};
        snprintf(want, sizeof want, "case %zu", i);
        expect_nonfinite(&c, want, &err);
        snprintf(want, sizeof want, "step %d (epoch 1): non-finite gradient on worker %zu;", INJECT_STEP, victim(k));
        ASSERT_STR_CONTAINS(err.msg, want);
        ASSERT_STR_CONTAINS(err.msg, "learning rate 0.05 may be too high");
        uint64_t who;
        size_t n = count_records(path, INJECT_STEP, "stop", &who);
        if (n != k->workers || who != (1ull << k->workers) - 1)
            herd_test_fail(__FILE__, __LINE__, "case %zu (%s): %zu stop records, workers mask %#llx", i, k->algo, n,
                           (unsigned long long)who);
    }
}

/* --skip-nonfinite: the run finishes with one step skipped, identically on
 * every worker: the result does not depend on whose gradient had the NaN
 * (it equals a run where every worker's had one), and differs from a run
 * without it. */
static void test_sync_skip(void)
{
    for (size_t i = 0; i < NSYNC; i++) {
        const sync_case *k = &sync_cases[i];
        herd_train_config c = sync_config(k);
        herd_train_result clean, one, all;
        herd_err err = {0};
        ASSERT_OK(herd_train(&c, &clean, NULL));
        c.skip_nonfinite = true;
        inject(&c, victim(k), INJECT_STEP);
        if (herd_train(&c, &one, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "case %zu (%s): %s", i, k->algo, err.msg);
        for (size_t w = 0; w + 1 < k->workers; w++)
            inject(&c, w, INJECT_STEP);
        ASSERT_OK(herd_train(&c, &all, NULL));
        ASSERT_EQ_INT(one.skipped_steps, 1);
        ASSERT_EQ_INT(all.skipped_steps, 1);
        ASSERT_EQ_INT(clean.skipped_steps, 0);
        ASSERT_EQ_INT(one.steps, clean.steps);
        if (k->identical && one.replica_max_diff != 0.0)
            herd_test_fail(__FILE__, __LINE__, "case %zu (%s): replicas differ by %g", i, k->algo, one.replica_max_diff);
        if (!(one.test_loss == all.test_loss && one.train_loss == all.train_loss))
            herd_test_fail(__FILE__, __LINE__, "case %zu (%s): test_loss %.9g / %.9g with the NaN on worker %zu / all",
                           i, k->algo, one.test_loss, all.test_loss, victim(k));
        if (one.test_loss == clean.test_loss)
            herd_test_fail(__FILE__, __LINE__, "case %zu (%s): the skipped step changed nothing", i, k->algo);
        ASSERT_TRUE(one.test_acc > 0.5);
    }
}

/* The epoch log counts the skipped steps; skips in a row are bounded. */
static void test_skip_log_and_bound(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/skip.jsonl", herd_test_tmpdir());
    herd_train_config c = base("allreduce", 2, "linear");
    c.skip_nonfinite = true;
    c.log_path = path;
    inject(&c, 1, 3);
    inject(&c, 0, 7);
    herd_train_result r;
    ASSERT_OK(herd_train(&c, &r, NULL));
    ASSERT_EQ_INT(r.skipped_steps, 2);
    FILE *f = fopen(path, "r");
    ASSERT_TRUE(f != NULL);
    char line[4096];
    size_t epochs = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "\"event\":\"epoch\"")) {
            ASSERT_STR_CONTAINS(line, "\"skipped\":2");
            epochs++;
        }
    fclose(f);
    ASSERT_EQ_INT(epochs, 2); /* one record per worker */

    /* HERD_NONFINITE_MAX_SKIPS skipped in a row, then the next one stops the run */
    c = base("allreduce", 2, "linear");
    c.skip_nonfinite = true;
    c.train_limit = 1024; /* 32 steps */
    for (size_t s = 2; s <= 2 + HERD_NONFINITE_MAX_SKIPS; s++)
        inject(&c, 1, s);
    herd_err err = {0};
    ASSERT_EQ_INT(herd_train(&c, &r, &err), HERD_ENONFINITE);
    char want[96];
    snprintf(want, sizeof want, "step %d (epoch 1): non-finite gradient on worker 1;", 2 + HERD_NONFINITE_MAX_SKIPS);
    ASSERT_STR_CONTAINS(err.msg, want);
    snprintf(want, sizeof want, "%d steps in a row were skipped", HERD_NONFINITE_MAX_SKIPS);
    ASSERT_STR_CONTAINS(err.msg, want);
    /* a clean step between skips starts the count again */
    c.ninject_nan = 0;
    for (size_t s = 2; s <= 2 + HERD_NONFINITE_MAX_SKIPS; s++)
        inject(&c, 1, s + (s > 6));
    ASSERT_OK(herd_train(&c, &r, &err));
    ASSERT_EQ_INT(r.skipped_steps, HERD_NONFINITE_MAX_SKIPS + 1);
}

static const char *const async_algos[] = {"asgd",   "amsgd",  "hogwild", "aeasgd", "ameasgd",
                                          "hogwild-easgd", "eawild", "adpsgd", "osgp"};

/* Asynchronous: the NaN (in every worker's gradient at its step 1, so
 * whichever gets there first) stops the run with the message; with
 * --skip-nonfinite it is dropped and the run ends with a finite server,
 * center or average (evaluation refuses a non-finite one). */
static void test_async(void)
{
    for (size_t i = 0; i < sizeof async_algos / sizeof async_algos[0]; i++) {
        herd_train_config c = base(async_algos[i], 3, "linear");
        c.train_limit = 1536;
        for (size_t w = 0; w < 3; w++)
            inject(&c, w, 1);
        herd_train_result r;
        herd_err err = {0};
        expect_nonfinite(&c, "stop", &err);
        ASSERT_STR_CONTAINS(err.msg, "non-finite gradient");
        ASSERT_STR_CONTAINS(err.msg, "step 1");
        ASSERT_STR_CONTAINS(err.msg, "may be too high");
        c.skip_nonfinite = true;
        if (herd_train(&c, &r, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "%s --skip-nonfinite: %s", async_algos[i], err.msg);
        /* each worker that got to its step 1 dropped one gradient */
        ASSERT_TRUE(r.skipped_steps >= 1 && r.skipped_steps <= 3);
        ASSERT_TRUE(r.test_acc > 0.4);
    }
}

/* A learning rate far too high: reported as a divergence (not as a chance
 * accuracy), synchronous or not. */
static void test_divergence(void)
{
    static const char *const algos[] = {"allreduce", "amsgd", "aeasgd", "osgp"};
    for (size_t i = 0; i < sizeof algos / sizeof algos[0]; i++) {
        herd_train_config c = base(algos[i], 3, "mlp");
        c.optim.lr = 100.0f;
        herd_err err = {0};
        expect_nonfinite(&c, "lr 100", &err);
        ASSERT_STR_CONTAINS(err.msg, "non-finite");
        ASSERT_STR_CONTAINS(err.msg, "learning rate 100 may be too high");
    }
}

static void test_inject_config(void)
{
    herd_train_config c = base("allreduce", 2, "linear");
    inject(&c, 2, 1);
    herd_train_result r;
    herd_err err = {0};
    ASSERT_EQ_INT(herd_train(&c, &r, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--inject-nan 2@1 names worker 2");
}

const herd_test herd_tests_nonfinite[] = {
    {"nonfinite_sync_stop", test_sync_stop, 120},
    {"nonfinite_sync_skip", test_sync_skip, 180},
    {"nonfinite_skip_log_and_bound", test_skip_log_and_bound, 60},
    {"nonfinite_async", test_async, 120},
    {"nonfinite_divergence", test_divergence, 60},
    {"nonfinite_inject_config", test_inject_config, 30},
    HERD_TEST_END,
};
