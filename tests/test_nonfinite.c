/* NaN and Inf in losses and gradients (herd_run.h, skip_nonfinite): a NaN
 * injected into one worker's gradient (--inject-nan) stops every worker of
 * an allreduce run at that step, naming it, and --skip-nonfinite skips that
 * update on every worker alike; gossip, push-sum and elastic averaging drop
 * the worker's gradient and settle at the end of the epoch, with no
 * collective in any step; an asynchronous run never lets it reach the
 * server, center or neighbours; a real divergence is reported as one. */
#include <math.h>

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

/* Whether the case's workers settle at the epoch's end (herd__nf_settles):
 * every synchronous algorithm but allreduce, with more than one worker. */
static bool settles(const sync_case *k) { return strcmp(k->algo, "allreduce") != 0 && k->workers > 1; }

static herd__train_config base(const char *algo, size_t workers, const char *model)
{
    herd__train_config c = herd_test_config(model, algo, workers);
    c.epochs = 1;
    c.batch = 16;
    c.train_limit = 384;
    c.test_limit = 128;
    c.optim.schedule = HERD_SCHED_CONST;
    return c;
}

static herd__train_config sync_config(const sync_case *k)
{
    herd__train_config c = base(k->algo, k->workers, k->model ? k->model : "linear");
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

static void inject(herd__train_config *c, size_t rank, size_t step)
{
    c->inject_nan[c->ninject_nan++] = (herd__inject){rank, step};
}

/* Runs c, which must stop on a non-finite value; the message in err. */
static void expect_nonfinite(const herd__train_config *c, const char *label, herd_err *err)
{
    herd_train_result r;
    herd_status st = herd__train(c, &r, err);
    if (st != HERD_ENONFINITE)
        herd_test_fail(__FILE__, __LINE__, "%s (%s): status %s, '%s'", label, c->algo, herd_err_name(st), err->msg);
}

/* The worker that gets the NaN: the last one, so it is not worker 0. */
static size_t victim(const sync_case *k) { return k->workers - 1; }

/* Counts the log's "nonfinite" records of `step` with `action`, and which
 * workers wrote them (bit i: worker i); "hold" records (a finding held until
 * the settlement) are not counted. */
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
        if (!strstr(line, "\"event\":\"nonfinite\"") || strstr(line, "\"action\":\"hold\""))
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

/* Whether the log has the victim's "hold" record of `step`. */
static bool has_hold(const char *path, size_t rank, size_t step)
{
    FILE *f = fopen(path, "r");
    ASSERT_TRUE(f != NULL);
    char line[4096], want[128];
    snprintf(want, sizeof want, "\"worker\":%zu,\"step\":%zu,", rank, step);
    bool found = false;
    while (fgets(line, sizeof line, f))
        found |= strstr(line, "\"action\":\"hold\"") && strstr(line, want);
    fclose(f);
    return found;
}

/* Every worker stops at exactly the injected step (allreduce), or at the
 * end of its epoch with every worker (the others; the records name the
 * step the NaN was found at), with the message. */
static void test_sync_stop(void)
{
    for (size_t i = 0; i < NSYNC; i++) {
        const sync_case *k = &sync_cases[i];
        char path[512], want[128];
        snprintf(path, sizeof path, "%s/stop%zu.jsonl", herd_test_tmpdir(), i);
        herd__train_config c = sync_config(k);
        c.log_path = path;
        inject(&c, victim(k), INJECT_STEP);
        herd_err err = {0};
        snprintf(want, sizeof want, "case %zu", i);
        expect_nonfinite(&c, want, &err);
        snprintf(want, sizeof want, "step %d (epoch 1): non-finite gradient on worker %zu;", INJECT_STEP, victim(k));
        ASSERT_STR_CONTAINS(err.msg, want);
        /* the run's default rate; easgd's own (plain SGD) is 0.2 */
        snprintf(want, sizeof want, "learning rate %s may be too high", strcmp(k->algo, "easgd") ? "0.05" : "0.2");
        ASSERT_STR_CONTAINS(err.msg, want);
        uint64_t who;
        size_t n = count_records(path, INJECT_STEP, "stop", &who);
        if (n != k->workers || who != (1ull << k->workers) - 1)
            herd_test_fail(__FILE__, __LINE__, "case %zu (%s): %zu stop records, workers mask %#llx", i, k->algo, n,
                           (unsigned long long)who);
        if (settles(k)) { /* 384 examples, batch 16, 3 workers: the epoch's last step is 7 */
            ASSERT_STR_CONTAINS(err.msg, "; settled at step 8: the run stops");
            ASSERT_TRUE(has_hold(path, victim(k), INJECT_STEP));
        }
    }
}

/* --skip-nonfinite: the run finishes with one step skipped, identically on
 * every worker: the result does not depend on whose gradient had the NaN
 * (it equals a run where every worker's had one), and differs from a run
 * without it. Where the workers settle at the epoch's end, the worker that
 * found the NaN alone drops its gradient: one dropped gradient, a result
 * unlike the run where every worker dropped one. */
static void test_sync_skip(void)
{
    for (size_t i = 0; i < NSYNC; i++) {
        const sync_case *k = &sync_cases[i];
        herd__train_config c = sync_config(k);
        herd_train_result clean, one, all;
        herd_err err = {0};
        ASSERT_OK(herd__train(&c, &clean, NULL));
        c.skip_nonfinite = true;
        inject(&c, victim(k), INJECT_STEP);
        if (herd__train(&c, &one, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "case %zu (%s): %s", i, k->algo, err.msg);
        for (size_t w = 0; w + 1 < k->workers; w++)
            inject(&c, w, INJECT_STEP);
        ASSERT_OK(herd__train(&c, &all, NULL));
        ASSERT_EQ_INT(one.skipped_steps, 1);
        /* settling: each worker dropped its own gradient */
        ASSERT_EQ_INT(all.skipped_steps, settles(k) ? k->workers : 1);
        ASSERT_EQ_INT(clean.skipped_steps, 0);
        ASSERT_EQ_INT(one.steps, clean.steps);
        if (k->identical && one.replica_max_diff != 0.0)
            herd_test_fail(__FILE__, __LINE__, "case %zu (%s): replicas differ by %g", i, k->algo, one.replica_max_diff);
        if (settles(k)) { /* only the victim's gradient was dropped: not the run where all were */
            if (!(isfinite(one.test_loss) && one.test_loss != all.test_loss))
                herd_test_fail(__FILE__, __LINE__, "case %zu (%s): test_loss %.9g / %.9g with the NaN on worker %zu / all",
                               i, k->algo, one.test_loss, all.test_loss, victim(k));
        } else if (!(one.test_loss == all.test_loss && one.train_loss == all.train_loss))
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
    herd__train_config c = base("allreduce", 2, "linear");
    c.skip_nonfinite = true;
    c.log_path = path;
    inject(&c, 1, 3);
    inject(&c, 0, 7);
    herd_train_result r;
    ASSERT_OK(herd__train(&c, &r, NULL));
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

    /* --max-skips skipped in a row (its default, 10, then 3), then the next one stops the run */
    static const size_t maxes[] = {10, 3};
    for (size_t m = 0; m < 2; m++) {
        size_t max = maxes[m];
        c = base("allreduce", 2, "linear");
        ASSERT_EQ_INT(c.max_skips, 10);
        c.skip_nonfinite = true, c.max_skips = max;
        c.train_limit = 1024; /* 32 steps */
        for (size_t s = 2; s <= 2 + max; s++)
            inject(&c, 1, s);
        herd_err err = {0};
        herd_status st = herd__train(&c, &r, &err);
        if (st != HERD_ENONFINITE)
            herd_test_fail(__FILE__, __LINE__, "--max-skips %zu: status %d: %s", max, st, err.msg);
        char want[96];
        snprintf(want, sizeof want, "step %zu (epoch 1): non-finite gradient on worker 1;", 2 + max);
        ASSERT_STR_CONTAINS(err.msg, want);
        snprintf(want, sizeof want, "%zu steps in a row were skipped", max);
        ASSERT_STR_CONTAINS(err.msg, want);
        /* a clean step between skips starts the count again */
        c.ninject_nan = 0;
        for (size_t s = 2; s <= 2 + max; s++)
            inject(&c, 1, s + (s > 2 + max / 2));
        ASSERT_OK(herd__train(&c, &r, &err));
        ASSERT_EQ_INT(r.skipped_steps, max + 1);
    }
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
        herd__train_config c = base(async_algos[i], 3, "linear");
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
        if (herd__train(&c, &r, &err) != HERD_OK)
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
        herd__train_config c = base(algos[i], 3, "mlp");
        c.optim.lr = 100.0f;
        herd_err err = {0};
        expect_nonfinite(&c, "lr 100", &err);
        ASSERT_STR_CONTAINS(err.msg, "non-finite");
        ASSERT_STR_CONTAINS(err.msg, "learning rate 100 may be too high");
    }
}

/* Worker 0's collective calls in its second epoch (from the epoch log
 * records' running count). */
static unsigned long long epoch2_collectives(herd__train_config *c, const char *name)
{
    char path[512], line[4096];
    snprintf(path, sizeof path, "%s/coll-%s-%zu.jsonl", herd_test_tmpdir(), name, c->train_limit);
    c->log_path = path;
    herd_err err = {0};
    herd_train_result r;
    if (herd__train(c, &r, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s: %s", name, err.msg);
    FILE *f = fopen(path, "r");
    ASSERT_TRUE(f != NULL);
    unsigned long long at[2] = {0, 0};
    size_t n = 0;
    while (fgets(line, sizeof line, f) && n < 2) {
        const char *p = strstr(line, "\"collectives\":");
        if (strstr(line, "\"event\":\"epoch\"") && strstr(line, "\"worker\":0,") && p)
            at[n++] = strtoull(p + 14, NULL, 10);
    }
    fclose(f);
    ASSERT_EQ_INT(n, 2);
    return at[1] - at[0];
}

/* No collective in a gossip, push-sum or elastic step: an epoch twice as
 * long makes exactly as many collective calls (the epoch's end: averages,
 * the non-finite settlement), or, where the algorithm's own exchange is an
 * allreduce every few steps (easgd, localsgd), one more per exchange. */
static void test_no_step_collective(void)
{
    static const struct {
        const char *algo, *opt, *val;
        size_t period;
    } cases[] = {{"dpsgd", NULL, NULL, 0}, {"sgp", NULL, NULL, 0}, {"easgd", "elastic-period", "4", 4},
                 {"localsgd", "local-steps", "4", 4}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        herd__train_config c = base(cases[i].algo, 3, "linear");
        c.epochs = 2;
        if (cases[i].opt)
            herd_test_set(&c, cases[i].opt, cases[i].val);
        unsigned long long short_epoch = epoch2_collectives(&c, cases[i].algo); /* 8 steps */
        c.train_limit *= 2;
        unsigned long long long_epoch = epoch2_collectives(&c, cases[i].algo); /* 16 steps */
        unsigned long long extra = cases[i].period ? 8 / cases[i].period : 0;
        if (long_epoch != short_epoch + extra || short_epoch > 4 + 8 / (cases[i].period ? cases[i].period : 8))
            herd_test_fail(__FILE__, __LINE__, "%s: %llu collectives in an epoch of 8 steps, %llu in one of 16",
                           cases[i].algo, short_epoch, long_epoch);
    }
}

static void test_inject_config(void)
{
    herd__train_config c = base("allreduce", 2, "linear");
    inject(&c, 2, 1);
    herd_train_result r;
    herd_err err = {0};
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--inject-nan 2@1 names worker 2");
}

const herd_test herd_tests_nonfinite[] = {
    {"nonfinite_sync_stop", test_sync_stop, 120},
    {"nonfinite_sync_skip", test_sync_skip, 180},
    {"nonfinite_skip_log_and_bound", test_skip_log_and_bound, 60},
    {"nonfinite_async", test_async, 120},
    {"nonfinite_divergence", test_divergence, 60},
    {"nonfinite_no_step_collective", test_no_step_collective, 60},
    {"nonfinite_inject_config", test_inject_config, 30, HERD_TEST_ONE_THREAD},
    HERD_TEST_END,
};
