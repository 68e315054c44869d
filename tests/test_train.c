/* End-to-end runs of herd__train() on small synthetic data: it learns, it is
 * deterministic, bad configurations and divergence are reported. */
#include "fixtures.h"
#include "harness.h"
#include "json_valid.h"
#include "herd/herd_ckpt.h"
#include "herd/herd_comm.h"
#include "herd/herd_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_learns(void)
{
    herd__train_config c = herd_test_config("linear", "sgd", 1);
    herd_train_result r;
    herd_err err = {0};
    herd_status st = herd__train(&c, &r, &err);
    if (st != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "herd_train: %s", err.msg);
    ASSERT_TRUE(r.test_acc > 0.9);
    ASSERT_EQ_INT(r.epochs, 2);
    ASSERT_EQ_INT(r.steps, 2 * (2048 / 32));
    ASSERT_TRUE(r.train_img_per_s > 0);
    ASSERT_TRUE(strcmp(r.algo, "sgd") == 0 && strcmp(r.engine, "threads") == 0);
}

/* Same seed, same everything: bit-identical results. */
static void test_deterministic(void)
{
    herd__train_config c = herd_test_config("lenet", "sgd", 1);
    herd_train_result a, b;
    ASSERT_OK(herd__train(&c, &a, NULL));
    ASSERT_OK(herd__train(&c, &b, NULL));
    ASSERT_TRUE(a.test_loss == b.test_loss);
    ASSERT_TRUE(a.train_loss == b.train_loss);
    c.seed = 2;
    ASSERT_OK(herd__train(&c, &b, NULL));
    ASSERT_TRUE(a.test_loss != b.test_loss);
}

static void expect_error(herd__train_config *c, herd_status want, const char *msg)
{
    herd_train_result r;
    herd_err err = {0};
    ASSERT_EQ_INT(herd__train(c, &r, &err), want);
    ASSERT_STR_CONTAINS(err.msg, msg);
}

static void test_config_errors(void)
{
    herd__train_config c = herd_test_config("linear", "sgd", 1);
    c.workers = 2;
    expect_error(&c, HERD_EINVAL, "(sgd: single-worker SGD (the baseline))");
    c = herd_test_config("linear", "sgd", 1), c.algo = "gossip9";
    expect_error(&c, HERD_EINVAL, "unknown algorithm 'gossip9'");
    c = herd_test_config("nosuch", "sgd", 1);
    expect_error(&c, HERD_EINVAL, "unknown model 'nosuch'");
    c = herd_test_config("linear", "sgd", 1), c.optim.lr = 0;
    expect_error(&c, HERD_EINVAL, "--lr");
    c = herd_test_config("linear", "sgd", 1), c.epochs = 0;
    expect_error(&c, HERD_EINVAL, "--epochs");
    c = herd_test_config("linear", "sgd", 1), c.nslow = 1, c.slow[0] = (herd__slow){3, 2.0};
    expect_error(&c, HERD_EINVAL, "names worker 3");
    c = herd_test_config("linear", "sgd", 1), c.batch = 4096;
    expect_error(&c, HERD_EINVAL, "smaller than one global batch");
    c = herd_test_config("linear", "sgd", 1), c.data = "synthetic:0x1:3";
    herd_train_result r;
    ASSERT_TRUE(herd__train(&c, &r, NULL) < 0);
}

/* A learning rate far too high makes the loss blow up: the run stops with a
 * message that names the problem, instead of training on NaNs. */
static void test_nonfinite_loss(void)
{
    herd__train_config c = herd_test_config("mlp", "sgd", 1);
    c.optim.lr = 100.0f;
    c.optim.schedule = HERD_SCHED_CONST;
    expect_error(&c, HERD_ENONFINITE, "learning rate 100 may be too high");
}

static void test_log_records(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/run.jsonl", herd_test_tmpdir());
    herd__train_config c = herd_test_config("linear", "sgd", 1);
    c.log_path = path;
    herd_train_result r;
    ASSERT_OK(herd__train(&c, &r, NULL));
    FILE *f = fopen(path, "r");
    ASSERT_TRUE(f != NULL);
    char line[4096];
    int start = 0, epoch = 0, eval = 0, end = 0, worker = 0, n = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        size_t len = strlen(line);
        ASSERT_TRUE(len > 2 && line[0] == '{' && line[len - 2] == '}' && line[len - 1] == '\n');
        start += strstr(line, "\"event\":\"start\"") != NULL;
        epoch += strstr(line, "\"event\":\"epoch\"") != NULL;
        eval += strstr(line, "\"event\":\"eval\"") != NULL;
        end += strstr(line, "\"event\":\"end\"") != NULL;
        worker += strstr(line, "\"event\":\"worker\"") != NULL;
    }
    fclose(f);
    ASSERT_EQ_INT(start, 1);
    ASSERT_EQ_INT(epoch, 2);
    ASSERT_EQ_INT(eval, 2);
    ASSERT_EQ_INT(end, 1);
    ASSERT_EQ_INT(worker, 1);
    ASSERT_EQ_INT(n, 7);
    /* a log path that cannot be opened is an error, not a silent loss */
    c.log_path = "/nonexistent-dir/run.jsonl";
    expect_error(&c, HERD_EIO, "/nonexistent-dir/run.jsonl");
}

/* How many lines of the log at path contain needle. */
static int count_lines(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    ASSERT_TRUE(f != NULL);
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* A --inject-nan or --fail aimed past the worker's last step is warned of
 * (a "warning" log record), one that fires is not. */
static void test_unfired_warned(void)
{
    const size_t steps[] = {3, 500};
    for (size_t i = 0; i < 2; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/unfired%zu.jsonl", herd_test_tmpdir(), i);
        herd__train_config c = herd_test_config("linear", "sgd", 1);
        c.log_path = path;
        c.quiet = true;
        c.skip_nonfinite = true;
        c.inject_nan[c.ninject_nan++] = (herd__inject){0, steps[i]};
        c.fail[c.nfail++] = (herd__fail){0, 1000 + steps[i], HERD_FAIL_DEFAULT};
        herd_train_result r;
        herd_err err = {0};
        if (herd__train(&c, &r, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "herd_train: %s", err.msg);
        ASSERT_EQ_INT(r.steps, 128);
        ASSERT_EQ_INT(r.skipped_steps, i == 0);
        ASSERT_EQ_INT(count_lines(path, "\"event\":\"warning\",\"worker\":0,\"flag\":\"--inject-nan\""), i == 1);
        ASSERT_EQ_INT(count_lines(path, "\"event\":\"warning\",\"worker\":0,\"flag\":\"--fail\",\"step\":"), 1);
        ASSERT_EQ_INT(count_lines(path, "\"steps_taken\":128"), 1 + (i == 1));
    }
}

/* The log names the run (the summary's run_id, a wall-clock start), has a
 * "step" record every --log-every steps of each worker, and a failure's
 * "error" record carries its message. */
static void test_log_steps_and_ids(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/steps.jsonl", herd_test_tmpdir());
    herd__train_config c = herd_test_config("linear", "sgd", 1);
    c.log_path = path;
    c.log_every = 16;
    herd_train_result r;
    herd_test_train_ok(&c, &r);
    ASSERT_EQ_INT(strlen(r.run_id), 16);
    ASSERT_EQ_INT(strspn(r.run_id, "0123456789abcdef"), 16);
    char want[64];
    snprintf(want, sizeof want, "\"event\":\"start\",\"run_id\":\"%s\",\"time\":\"20", r.run_id);
    ASSERT_EQ_INT(count_lines(path, want), 1);
    ASSERT_EQ_INT(count_lines(path, "\"event\":\"step\",\"worker\":0,"), 128 / 16);
    ASSERT_EQ_INT(count_lines(path, "\"event\":\"step\",\"worker\":0,\"step\":128,\"epoch\":2,\"loss\":0."), 1);
    /* a failure: the message in the log */
    snprintf(path, sizeof path, "%s/error.jsonl", herd_test_tmpdir());
    c.log_every = 0;
    c.inject_nan[c.ninject_nan++] = (herd__inject){0, 3};
    c.quiet = true;
    herd_err err = {0};
    ASSERT_TRUE(herd__train(&c, &r, &err) < 0);
    ASSERT_EQ_INT(count_lines(path, "\"event\":\"error\",\"worker\":0,\"status\":"), 1);
    ASSERT_EQ_INT(count_lines(path, "non-finite gradient"), 1);
}

/* --trace: one valid JSON document (the Trace Event Format); each worker
 * has a pull, compute and exchange span per step, in order and never
 * overlapping, numbered by step, and the evaluations; and the step's
 * phases (category "phase"), each inside the span that holds it: forward
 * then backward inside compute, update inside exchange. */
static void test_trace(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/trace.json", herd_test_tmpdir());
    herd__train_config c = herd_test_config("linear", "allreduce", 2);
    c.trace_path = path;
    herd_train_result r;
    herd_test_train_ok(&c, &r);
    static char text[1 << 22];
    FILE *f = fopen(path, "r");
    ASSERT_TRUE(f != NULL);
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    char why[256];
    if (!herd_test_json_valid(text, len, why, sizeof why))
        herd_test_fail(__FILE__, __LINE__, "the trace is not JSON: %s", why);
    const char *const kinds[] = {"pull", "compute", "exchange"};
    /* the phases each main span holds, in order, recorded before it */
    const char *const held[3] = {"", "forward backward ", "update "};
    size_t next[2] = {0, 0}, evals = 0, phases[2] = {0, 0};
    double last_end[2] = {0, 0}, phase_t0[2][2] = {{0}}, phase_t1[2][2] = {{0}};
    char seen[2][64] = {"", ""};
    size_t nseen[2] = {0, 0};
    for (const char *p = strstr(text, "\n{\"name\":\""); p; p = strstr(p + 1, "\n{\"name\":\"")) {
        char name[32], cat[32];
        unsigned long pid, tid, step;
        double ts, dur;
        if (sscanf(p, "\n{\"name\":\"%31[^\"]\",\"cat\":\"%31[^\"]\",\"ph\":\"X\",\"pid\":%lu,\"tid\":%lu,\"ts\":%lf,"
                      "\"dur\":%lf,\"args\":{\"step\":%lu}}",
                   name, cat, &pid, &tid, &ts, &dur, &step) != 7)
            continue; /* a metadata event */
        ASSERT_TRUE(tid < 2 && pid == 0 && dur >= 0);
        if (!strcmp(cat, "phase")) { /* held by the next main span */
            ASSERT_TRUE(nseen[tid] < 2 && strlen(seen[tid]) + strlen(name) + 2 < sizeof seen[tid]);
            strcat(strcat(seen[tid], name), " ");
            phase_t0[tid][nseen[tid]] = ts, phase_t1[tid][nseen[tid]] = ts + dur, nseen[tid]++;
            phases[tid]++;
            continue;
        }
        ASSERT_TRUE(ts >= last_end[tid] - 1e-3); /* one worker's spans follow each other */
        last_end[tid] = ts + dur;
        if (!strcmp(name, "eval")) {
            evals++;
            continue;
        }
        if (strcmp(name, kinds[next[tid] % 3]))
            herd_test_fail(__FILE__, __LINE__, "worker %lu: span %s where %s was due", tid, name, kinds[next[tid] % 3]);
        if (strcmp(seen[tid], held[next[tid] % 3]))
            herd_test_fail(__FILE__, __LINE__, "worker %lu: %s held phases '%s', not '%s'", tid, name, seen[tid],
                           held[next[tid] % 3]);
        for (size_t k = 0; k < nseen[tid]; k++) /* inside it (the clock's microsecond rounding aside) */
            ASSERT_TRUE(phase_t0[tid][k] >= ts - 1e-3 && phase_t1[tid][k] <= ts + dur + 1e-3 &&
                        (k == 0 || phase_t0[tid][k] >= phase_t1[tid][k - 1] - 1e-3));
        seen[tid][0] = 0, nseen[tid] = 0;
        ASSERT_EQ_INT(step, next[tid] / 3);
        next[tid]++;
    }
    ASSERT_EQ_INT(next[0], 3 * r.steps);
    ASSERT_EQ_INT(next[1], 3 * r.steps);
    ASSERT_EQ_INT(phases[0], 3 * r.steps);
    ASSERT_EQ_INT(phases[1], 3 * r.steps);
    ASSERT_EQ_INT(evals, r.epochs); /* worker 0's, one an epoch */
    /* a trace that cannot be written fails the run, naming the file */
    c.trace_path = "/nonexistent-dir/trace.json";
    herd_err err = {0};
    ASSERT_TRUE(herd__train(&c, &r, &err) == HERD_EIO);
    ASSERT_STR_CONTAINS(err.msg, "/nonexistent-dir/trace.json");
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The summary's per-worker figures are those of the log's "worker"
 * records: each worker's steps and time per epoch, their median, min and
 * max, the slowest worker. asgd: the workers' steps add up to every batch
 * of the run, however they were shared; allreduce: all take the same. */
static void test_worker_figures(void)
{
    const char *algos[] = {"asgd", "allreduce"};
    for (size_t a = 0; a < 2; a++) {
        char path[512];
        snprintf(path, sizeof path, "%s/workers-%s.jsonl", herd_test_tmpdir(), algos[a]);
        herd__train_config c = herd_test_config("linear", algos[a], 4);
        c.log_path = path;
        herd_train_result r;
        herd_test_train_ok(&c, &r);
        FILE *f = fopen(path, "r");
        ASSERT_TRUE(f != NULL);
        char line[4096];
        double e[4], ew[4] = {NAN, NAN, NAN, NAN}, st[4], sum = 0, emax = -1; /* ew: by worker */
        size_t n = 0, ne = 0, slowest = 99;
        while (fgets(line, sizeof line, f)) {
            const char *p = strstr(line, "\"event\":\"worker\"");
            if (!p)
                continue;
            unsigned long wk = 99;
            double steps = -1, epochs = -1, train = -1, es = -1;
            ASSERT_EQ_INT(sscanf(p, "\"event\":\"worker\",\"worker\":%lu,\"steps\":%lf,\"epochs\":%lf,\"train_s\":%lf,",
                                 &wk, &steps, &epochs, &train),
                          4);
            ASSERT_TRUE(n < 4 && wk == n);
            st[n++] = steps, sum += steps;
            if (epochs < 1) { /* asynchronous: the others took every batch, no epoch time */
                ASSERT_TRUE(steps == 0 && strstr(p, "\"epoch_s\":null") != NULL);
                continue;
            }
            ASSERT_EQ_INT(sscanf(strstr(p, "\"epoch_s\":"), "\"epoch_s\":%lf", &es), 1);
            ASSERT_NEAR(es, train / epochs, 1e-5, 1e-5);
            e[ne++] = ew[wk] = es;
            if (es > emax)
                emax = es, slowest = wk;
        }
        fclose(f);
        ASSERT_EQ_INT(n, 4);
        ASSERT_TRUE(ne >= 1 && (a == 0 || ne == 4));
        ASSERT_NEAR(r.epoch_s_max, emax, 2e-6, 1e-6);
        /* a tie at the log's precision may name either */
        if (r.slowest_worker >= 4 || !(fabs(ew[r.slowest_worker] - emax) <= 2e-6))
            herd_test_fail(__FILE__, __LINE__, "%s: slowest worker %zu in the summary, %zu in the log", algos[a],
                           r.slowest_worker, slowest);
        qsort(e, ne, sizeof *e, cmp_dbl);
        qsort(st, 4, sizeof *st, cmp_dbl);
        ASSERT_NEAR(r.epoch_s_median, ne % 2 ? e[ne / 2] : 0.5 * (e[ne / 2 - 1] + e[ne / 2]), 2e-6, 1e-6);
        ASSERT_NEAR(r.epoch_s_min, e[0], 2e-6, 1e-6);
        ASSERT_NEAR(r.steps_median, 0.5 * (st[1] + st[2]), 0, 0);
        ASSERT_EQ_INT(r.steps_min, (size_t)st[0]);
        ASSERT_EQ_INT(r.steps_max, (size_t)st[3]);
        if (a == 0) /* 2 epochs of 2048 examples in batches of 32 */
            ASSERT_NEAR(sum, 128, 0, 0);
        else
            ASSERT_TRUE(r.steps_min == r.steps && r.steps_max == r.steps);
    }
}

/* n workers with batch b on allreduce take the same steps as one worker with
 * batch n*b (the loader gives them the same examples): equal up to the
 * float rounding of summing in another order. */
static void test_allreduce_equals_big_batch(void)
{
    herd__train_config one = herd_test_config("mlp", "sgd", 1);
    one.epochs = 1, one.batch = 32, one.max_steps = 30;
    one.optim.schedule = HERD_SCHED_CONST;
    herd__train_config four = one;
    four.algo = "allreduce", four.workers = 4, four.batch = 8;
    herd_train_result a, b;
    herd_err err = {0};
    ASSERT_OK(herd__train(&one, &a, &err));
    if (herd__train(&four, &b, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "allreduce: %s", err.msg);
    ASSERT_EQ_INT(b.steps, 30);
    ASSERT_NEAR(b.test_loss, a.test_loss, 1e-4, 1e-3);
    ASSERT_NEAR(b.test_acc, a.test_acc, 2.0 / 512, 0);
    ASSERT_TRUE(b.replica_max_diff == 0.0); /* replicas bit-identical */
    ASSERT_TRUE(b.bytes_sent > 0);
}

/* Each optimization keeps replicas bit-identical and still learns. */
static void test_allreduce_options(void)
{
    static const struct {
        size_t bucket;
        bool overlap;
        int dtype;
        double csc;
    } cases[] = {
        {0, true, HERD_F32, 0},    /* a bucket per layer, reduced during backward */
        {1 << 20, false, HERD_F32, 0},
        {4096, true, HERD_F16, 0},
        {4096, true, HERD_BF16, 0},
        {1 << 20, true, HERD_F32, 0.25},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        herd__train_config c = herd_test_config("linear", "sgd", 1);
        c.algo = "allreduce", c.workers = 3, c.batch = 16;
        herd_test_set(&c, "bucket-bytes", herd_test_fmt("%zu", (size_t)cases[i].bucket));
        herd_test_set(&c, "overlap", cases[i].overlap ? "on" : "off");
        herd_test_set(&c, "comm-dtype", herd_test_dtype(cases[i].dtype));
        herd_test_set(&c, "csc-ratio", herd_test_fmt("%.17g", (double)cases[i].csc));
        herd_test_set(&c, "csc-chunk-bytes", "256");
        herd_train_result r;
        herd_err err = {0};
        if (herd__train(&c, &r, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "case %zu: %s", i, err.msg);
        if (!(r.test_acc > 0.85 && r.replica_max_diff == 0.0))
            herd_test_fail(__FILE__, __LINE__, "case %zu: test_acc %.4f, replica diff %g", i, r.test_acc,
                           r.replica_max_diff);
    }
}

/* The threads engine's shared-memory allreduce without overlap takes the
 * optimizer step inside the allreduce, reading the others' sums where they
 * lie: the same run, bit for bit, as the same sums copied back first and
 * stepped after (with overlap, which does not fuse), on a model of several
 * layers and buckets, for 2 and 3 workers. */
static void test_allreduce_fused_update(void)
{
    for (size_t n = 2; n <= 3; n++) {
        herd_train_result r[2];
        for (int fused = 0; fused < 2; fused++) {
            herd__train_config c = herd_test_config("mlp", "sgd", 1);
            c.algo = "allreduce", c.workers = n, c.batch = 16, c.epochs = 1, c.train_limit = 768;
            herd_test_set(&c, "allreduce", "native"), herd_test_set(&c, "bucket-bytes", "4096");
            herd_test_set(&c, "overlap", fused ? "off" : "on");
            herd_err err = {0};
            if (herd__train(&c, &r[fused], &err) != HERD_OK)
                herd_test_fail(__FILE__, __LINE__, "%zu workers, fused %d: %s", n, fused, err.msg);
            ASSERT_TRUE(r[fused].replica_max_diff == 0.0);
        }
        ASSERT_TRUE(r[0].train_loss == r[1].train_loss);
        ASSERT_TRUE(r[0].test_loss == r[1].test_loss);
        ASSERT_TRUE(r[1].test_acc > 0.5);
    }
}

/* A step's first bucket closes at --first-bucket-bytes where --bucket-bytes
 * is larger, the rest at --bucket-bytes: buckets per step, from the
 * summary, with and without overlap. */
static void test_first_bucket(void)
{
    static const struct {
        const char *bucket, *first;
        double want; /* buckets per step; 0: more than 2 (one per layer) */
    } cases[] = {
        {"1073741824", "0", 1},    /* one bucket for the whole gradient */
        {"1073741824", "4", 2},    /* the last layer's first range, then the rest */
        {"1073741824", "1073741823", 1}, /* a first bucket above the gradient's size */
        {"4", "1073741824", 0},    /* first above the others: as the others */
        {"0", "4", 0},             /* one per layer */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int ov = 0; ov < 2; ov++) {
            herd__train_config c = herd_test_config("mlp", "sgd", 1);
            c.algo = "allreduce", c.workers = 2, c.batch = 16, c.max_steps = 3;
            herd_test_set(&c, "bucket-bytes", cases[i].bucket);
            herd_test_set(&c, "first-bucket-bytes", cases[i].first);
            herd_test_set(&c, "allreduce", "ring");
            herd_test_set(&c, "overlap", ov ? "on" : "off");
            herd_train_result r;
            herd_err err = {0};
            if (herd__train(&c, &r, &err) != HERD_OK)
                herd_test_fail(__FILE__, __LINE__, "case %zu: %s", i, err.msg);
            const char *p = strstr(r.algo_json, "\"buckets_per_step\":");
            double got = p ? strtod(p + strlen("\"buckets_per_step\":"), NULL) : -1;
            if (cases[i].want ? got != cases[i].want : !(got > 2))
                herd_test_fail(__FILE__, __LINE__, "case %zu, overlap %d: %g buckets a step (%s), want %g", i, ov,
                               got, r.algo_json, cases[i].want);
            ASSERT_TRUE(r.replica_max_diff == 0.0);
        }
}

/* --overlap auto: on, unless the threads engine's workers take every core
 * (their compute threads: workers x threads); on and off as asked. */
static void test_overlap_auto(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    struct {
        size_t workers, threads;
        const char *asked;
        bool want;
    } cases[] = {
        {2, 1, "auto", 2 < cores},
        {2, (size_t)(cores > 1 ? cores : 1), "auto", false},
        {2, 1, "on", true},
        {2, 1, "off", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        herd__train_config c = herd_test_config("linear", "sgd", 1);
        c.algo = "allreduce", c.workers = cases[i].workers, c.threads = cases[i].threads, c.batch = 16;
        c.max_steps = 3;
        herd_test_set(&c, "overlap", cases[i].asked);
        herd_train_result r;
        herd_err err = {0};
        if (herd__train(&c, &r, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "case %zu: %s", i, err.msg);
        const char *want = cases[i].want ? "\"overlap\":true" : "\"overlap\":false";
        if (!strstr(r.algo_json, want))
            herd_test_fail(__FILE__, __LINE__, "case %zu: summary has '%s', want %s (%ld cores)", i, r.algo_json,
                           want, cores);
    }
}

/* A worker that stops answering (here: far slower than --timeout) makes the
 * others fail within the timeout, with a message naming it: never a hang. */
static void test_stalled_worker_named(void)
{
    herd__train_config c = herd_test_config("linear", "sgd", 1);
    c.algo = "allreduce", c.workers = 2, c.batch = 16;
    c.comm_timeout_s = 0.3;
    /* even 1 us of compute becomes 1 s, past the timeout; the straggle is
     * cut short once worker 0 fails */
    c.nslow = 1, c.slow[0] = (herd__slow){1, 1e6};
    herd_train_result r;
    herd_err err = {0};
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_ETIMEOUT);
    ASSERT_STR_CONTAINS(err.msg, "from rank 1");
    ASSERT_STR_CONTAINS(err.msg, "(worker 0, step "); /* which step: how long a step's compute took */
}

/* A stall after a checkpoint: the run stops naming the straggler and the
 * step, and the checkpoint it wrote before stays whole: it loads, and a run
 * resumed from it (without the straggler) finishes. */
static void test_stall_keeps_checkpoint(void)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s/herd-stall-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    ASSERT_TRUE(mkdir(dir, 0700) == 0);
    herd__train_config c = herd_test_config("linear", "sgd", 1);
    c.algo = "allreduce", c.workers = 2, c.batch = 16, c.epochs = 1;
    c.checkpoint_dir = dir, c.checkpoint_every = 1; /* the first after step 0, which is never slowed */
    c.comm_timeout_s = 0.5;
    /* 1 us of compute becomes 1 s; cut short once the other worker fails */
    c.nslow = 1, c.slow[0] = (herd__slow){1, 1e6};
    herd_train_result r;
    herd_err err = {0};
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_ETIMEOUT);
    ASSERT_STR_CONTAINS(err.msg, "from rank 1");
    const char *at = strstr(err.msg, "(worker 0, step ");
    ASSERT_TRUE(at != NULL);
    unsigned long step = strtoul(at + strlen("(worker 0, step "), NULL, 10);
    ASSERT_TRUE(step >= 1);
    /* the newest checkpoint is the one written just before the stalled step */
    herd_ckpt *ck = NULL;
    size_t skipped = 99;
    ASSERT_OK(herd_ckpt_latest(dir, &ck, NULL, 0, &skipped, NULL));
    ASSERT_EQ_INT(herd_ckpt_get_info(ck)->step, step);
    ASSERT_EQ_INT(skipped, 0);
    herd_ckpt_free(ck);
    c.nslow = 0, c.resume = true;
    c.comm_timeout_s = 60, c.checkpoint_every = 16; /* fewer fsyncs; sanitizers are slow */
    err = (herd_err){0};
    if (herd__train(&c, &r, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "resume after the stall: %s", err.msg);
    ASSERT_EQ_INT(r.steps, 2048 / (2 * 16));
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ASSERT_EQ_INT(system(cmd), 0);
}

/* --fail modes: the threads engine's is stop (a synchronous run stops,
 * naming the worker and step); process deaths are refused there. */
static void test_fail_modes_threads(void)
{
    static const char *const names[] = {"stop", "exit0", "exit1", "abort", "kill"};
    for (size_t i = 0; i < 5; i++) {
        herd__fail_mode m = HERD_FAIL_DEFAULT;
        ASSERT_OK(herd__fail_mode_parse(names[i], &m));
        ASSERT_EQ_INT(m, HERD_FAIL_STOP + (int)i);
        ASSERT_TRUE(!strcmp(herd__fail_mode_name(m), names[i]));
    }
    herd__fail_mode m = HERD_FAIL_KILL;
    ASSERT_EQ_INT(herd__fail_mode_parse("default", &m), HERD_EINVAL);
    ASSERT_EQ_INT(herd__fail_mode_parse("Kill", &m), HERD_EINVAL);
    ASSERT_EQ_INT(m, HERD_FAIL_KILL);

    herd__train_config c = herd_test_config("linear", "sgd", 1);
    c.algo = "allreduce", c.workers = 2, c.batch = 16;
    herd_train_result r;
    for (herd__fail_mode mode = HERD_FAIL_DEFAULT; mode <= HERD_FAIL_KILL; mode++) {
        herd_err err = {0};
        c.nfail = 1, c.fail[0] = (herd__fail){1, 3, mode};
        herd_status st = herd__train(&c, &r, &err);
        if (mode <= HERD_FAIL_STOP) {
            ASSERT_EQ_INT(st, HERD_EKILLED);
            ASSERT_STR_CONTAINS(err.msg, "worker 1 stopped at step 3");
        } else {
            ASSERT_EQ_INT(st, HERD_EINVAL);
            ASSERT_STR_CONTAINS(err.msg, "the threads engine's mode is stop");
            ASSERT_STR_CONTAINS(err.msg, herd__fail_mode_name(mode));
        }
    }
}

/* The training run knows engines only through their table: the one-file
 * loopback engine trains the algorithms on one worker to the same bits as
 * the threads engine, and refuses a second worker. */
static void test_engine_loopback(void)
{
    const char *algos[] = {"sgd", "allreduce", "asgd", "easgd", "eawild", "dpsgd", "adpsgd", "sgp", "localsgd"};
    for (size_t i = 0; i < sizeof algos / sizeof algos[0]; i++) {
        herd__train_config c = herd_test_config("linear", algos[i], 1);
        c.epochs = 1;
        herd_train_result a, b;
        herd_err err = {0};
        c.engine = "threads";
        if (herd__train(&c, &a, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "%s on threads: %s", algos[i], err.msg);
        c.engine = "loopback";
        if (herd__train(&c, &b, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "%s on loopback: %s", algos[i], err.msg);
        ASSERT_TRUE(!strcmp(b.engine, "loopback"));
        ASSERT_TRUE(a.test_loss == b.test_loss);
        ASSERT_TRUE(a.train_loss == b.train_loss);
    }
    herd__train_config c = herd_test_config("linear", "allreduce", 2);
    c.engine = "loopback";
    herd_train_result r;
    herd_err err = {0};
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "loopback");
    c.engine = "carrier-pigeon";
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "threads");
}

const herd_test herd_tests_train[] = {
    {"train_engine_loopback", test_engine_loopback, 60},
    {"train_stalled_worker_named", test_stalled_worker_named, 60},
    {"train_stall_keeps_checkpoint", test_stall_keeps_checkpoint, 60},
    {"train_fail_modes_threads", test_fail_modes_threads, 60},
    {"train_allreduce_equals_big_batch", test_allreduce_equals_big_batch, 120},
    {"train_allreduce_options", test_allreduce_options, 120},
    {"train_overlap_auto", test_overlap_auto, 60},
    {"train_first_bucket", test_first_bucket, 60},
    {"train_allreduce_fused_update", test_allreduce_fused_update, 60},
    {"train_learns", test_learns, 60},
    {"train_deterministic", test_deterministic, 120},
    {"train_config_errors", test_config_errors, 60},
    {"train_nonfinite_loss", test_nonfinite_loss, 60},
    {"train_log_records", test_log_records, 60},
    {"train_worker_figures", test_worker_figures, 60},
    {"train_unfired_warned", test_unfired_warned, 60},
    {"train_log_steps_and_ids", test_log_steps_and_ids, 60},
    {"train_trace", test_trace, 60},
    HERD_TEST_END,
};
