/* The one option model (src/run/options.c, herd_config.h): the defaults
 * are the rows', a value is checked as it is set and never taken for "not
 * given", the dry run refuses exactly what the run refuses, and the log's
 * start record and the summary name every option. */
#include "fixtures.h"
#include "harness.h"
#include "json_valid.h"
#include "herd/herd_algo.h"
#include "herd/herd_config.h"
#include "herd/herd_run.h"
#include "run/options.h"
#include "run/run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void get(const herd_config *c, const char *name, char *buf, size_t cap)
{
    herd_err err = {0};
    if (herd_config_get(c, name, buf, cap, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "herd_config_get %s: %s", name, err.msg);
}

/* Every row: a name, a group, help; a default that parses, lies within
 * the row's own bounds and is what the defaults hold; CUSTOM rows have
 * their functions. The run's table is what herd_config_option lists. */
static void test_rows(void)
{
    herd__train_config d;
    herd__train_config_defaults(&d);
    size_t n = 0;
    for (const herd_opt *o = herd__run_options; o->name; o++, n++) {
        const char *what = herd_test_fmt("row --%s", o->name);
        if (!o->group || !o->help || !*o->help)
            herd_test_fail(__FILE__, __LINE__, "%s: no group or help", what);
        ASSERT_TRUE(herd_config_option(n) == o);
        ASSERT_TRUE(herd_opt_find(o + 1, o->name) == NULL); /* listed once */
        if (o->type == HERD_OPT_CUSTOM) {
            ASSERT_TRUE(o->parse && o->format && !o->def);
            continue;
        }
        herd_err err = {0};
        if (herd_opt_check(o, &d, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "%s: its default is refused: %s", what, err.msg);
        if (!o->def || (o->flags & HERD_OPT_UNSET))
            continue;
        herd__train_config one;
        memset(&one, 0, sizeof one);
        ASSERT_OK(herd_opt_parse(o, &one, o->def, &err));
        char a[256], b[256];
        herd_opt_format(o, &one, a, sizeof a);
        herd_opt_format(o, &d, b, sizeof b);
        if (strcmp(a, b))
            herd_test_fail(__FILE__, __LINE__, "%s: default '%s' but the defaults hold '%s'", what, a, b);
    }
    ASSERT_TRUE(herd_config_option(n) == NULL);
    ASSERT_TRUE(n >= 45);
    /* what herd train's defaults are, as its --help says */
    ASSERT_TRUE(d.workers == 1 && d.epochs == 5 && d.batch == 64 && d.seed == 1 && d.checkpoint_keep == 3);
    ASSERT_TRUE(d.quiet && d.progress && d.model && !strcmp(d.model, "lenet") && !d.algo && !d.data);
    ASSERT_TRUE(isnan(d.optim.lr) && isnan(d.optim.momentum)); /* picked by the run */
    ASSERT_NEAR(d.optim.weight_decay, 5e-4, 0, 1e-6);
    ASSERT_EQ_INT(d.optim.schedule, HERD_SCHED_COSINE);
    ASSERT_NEAR(d.comm_timeout_s, 60, 0, 0);
}

/* Set and read by name: values checked as they are set (a refused one
 * changes nothing), strings copied, repeatable options added to, an
 * algorithm's options kept in order, unknown names refused. */
static void test_set_get(void)
{
    herd_config *c;
    herd_err err = {0};
    char v[256];
    ASSERT_OK(herd_config_new(&c));
    char data[64];
    snprintf(data, sizeof data, "synthetic:1x8x8:4");
    ASSERT_OK(herd_config_set(c, "data", data, &err));
    memset(data, 'x', sizeof data - 1); /* the config kept its own copy */
    get(c, "data", v, sizeof v);
    ASSERT_TRUE(!strcmp(v, "synthetic:1x8x8:4"));
    ASSERT_OK(herd_config_set(c, "workers", "3", &err));
    ASSERT_TRUE(herd_config_set(c, "workers", "0", &err) == HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--workers must be in [1, 4096], got 0");
    ASSERT_TRUE(herd_config_set(c, "epochs", "many", &err) == HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--epochs: expected a non-negative integer, got 'many'");
    ASSERT_TRUE(herd_config_set(c, "lr", "1e-300", &err) == HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--lr: 1e-300 is out of the range of a float");
    ASSERT_TRUE(herd_config_set(c, "schedule", "linear", &err) == HERD_EINVAL);
    ASSERT_TRUE(herd_config_set(c, "model", "", &err) == HERD_EINVAL);
    get(c, "workers", v, sizeof v);
    ASSERT_TRUE(!strcmp(v, "3"));
    get(c, "epochs", v, sizeof v);
    ASSERT_TRUE(!strcmp(v, "5"));
    get(c, "lr", v, sizeof v);
    ASSERT_TRUE(!strcmp(v, "")); /* not given: the run picks it */
    ASSERT_OK(herd_config_set(c, "lr", "0.05", &err));
    get(c, "lr", v, sizeof v);
    ASSERT_TRUE(!strcmp(v, "0.05")); /* the shortest form that reads back */
    ASSERT_OK(herd_config_set(c, "nesterov", NULL, &err));
    get(c, "nesterov", v, sizeof v);
    ASSERT_TRUE(!strcmp(v, "true"));
    ASSERT_OK(herd_config_set(c, "slow", "1:4", &err));
    ASSERT_OK(herd_config_set(c, "slow", "2:2.5", &err));
    ASSERT_TRUE(herd_config_set(c, "slow", "2", &err) == HERD_EINVAL);
    get(c, "slow", v, sizeof v);
    ASSERT_TRUE(!strcmp(v, "1:4,2:2.5"));
    ASSERT_OK(herd_config_set(c, "fail", "2@5:stop", &err));
    get(c, "fail", v, sizeof v);
    ASSERT_TRUE(!strcmp(v, "2@5:stop"));
    /* an algorithm's option: its form now, which algorithm takes it later */
    get(c, "softsync", v, sizeof v);
    ASSERT_TRUE(!strcmp(v, ""));
    ASSERT_TRUE(herd_config_set(c, "softsync", "0", &err) == HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--softsync must be in [1,");
    ASSERT_OK(herd_config_set(c, "softsync", "2", &err));
    ASSERT_OK(herd_config_set(c, "softsync", "3", &err));
    get(c, "softsync", v, sizeof v);
    ASSERT_TRUE(!strcmp(v, "3"));
    ASSERT_TRUE(herd_config_set(c, "bogus", "1", &err) == HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "unknown option '--bogus'");
    ASSERT_TRUE(herd_config_get(c, "bogus", v, sizeof v, &err) == HERD_EINVAL);
    ASSERT_TRUE(herd_config_set(c, NULL, "1", &err) == HERD_EINVAL);
    /* every entry with a NULL it cannot take */
    ASSERT_TRUE(herd_config_new(NULL) == HERD_EINVAL);
    ASSERT_TRUE(herd_config_get(NULL, "lr", v, sizeof v, &err) == HERD_EINVAL);
    ASSERT_TRUE(herd_config_get(c, "lr", NULL, 8, &err) == HERD_EINVAL);
    ASSERT_TRUE(herd_config_get(c, "lr", v, 0, &err) == HERD_EINVAL);
    ASSERT_TRUE(herd_config_dup(NULL) == NULL);
    herd_config_set_stop(NULL, NULL);
    ASSERT_TRUE(herd_opt_parse(NULL, v, "1", &err) == HERD_EINVAL);
    ASSERT_TRUE(herd_opt_parse(herd_config_option(0), NULL, "1", &err) == HERD_EINVAL);
    ASSERT_TRUE(herd_opt_check(herd_config_option(0), NULL, &err) == HERD_EINVAL);
    ASSERT_TRUE(herd_opt_defaults(herd_config_option(0), NULL, &err) == HERD_EINVAL);
    /* a copy outlives its original */
    herd_config *d = herd_config_dup(c);
    ASSERT_TRUE(d != NULL);
    herd_config_free(c);
    get(d, "data", v, sizeof v);
    ASSERT_TRUE(!strcmp(v, "synthetic:1x8x8:4"));
    get(d, "softsync", v, sizeof v);
    ASSERT_TRUE(!strcmp(v, "3"));
    ASSERT_TRUE(herd__config_run(d)->nalgo_args == 2);
    herd_config_free(d);
    herd_config_free(NULL);
}

/* --lr and --momentum: a value typed is the run's, whatever it is (a float
 * one step above the default was once taken for "not given"); not given,
 * the algorithm's own default, else the row's; --optimizer lars its own. */
static void test_lr_given(void)
{
    static const struct {
        const char *algo, *lr, *optimizer, *want_lr;
        float want_momentum;
    } cases[] = {
        {"sgd", "0.0500000045", NULL, "0.0500000045", 0.9f}, /* nextafterf(0.05f, 1) */
        {"sgd", NULL, NULL, "0.05", 0.9f},
        {"amsgd", NULL, NULL, "0.03", 0.3f}, /* amsgd's table */
        {"amsgd", "0.05", NULL, "0.05", 0.3f},
        {"sgd", NULL, "lars", "0.5", 0.9f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        herd__train_config c = herd_test_config("linear", cases[i].algo, 2);
        herd_err err = {0};
        if (!strcmp(cases[i].algo, "sgd"))
            c.workers = 1;
        if (cases[i].lr)
            ASSERT_OK(herd__config_set_arg(&c, "lr", cases[i].lr, &err));
        if (cases[i].optimizer)
            ASSERT_OK(herd__config_set_arg(&c, "optimizer", cases[i].optimizer, &err));
        const herd_algo_ops *ops;
        if (herd__check_config(&c, &ops, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "case %zu: %s", i, err.msg);
        float want_lr = strtof(cases[i].want_lr, NULL);
        ASSERT_TRUE(i || want_lr == nextafterf(0.05f, 1.0f));
        if (c.optim.lr != want_lr || c.optim.momentum != cases[i].want_momentum)
            herd_test_fail(__FILE__, __LINE__, "case %zu (--algo %s --lr %s): lr %.9g momentum %.9g, want %.9g %.9g", i,
                           cases[i].algo, cases[i].lr ? cases[i].lr : "-", (double)c.optim.lr,
                           (double)c.optim.momentum, (double)want_lr, (double)cases[i].want_momentum);
    }
}

/* The dry run (herd_config_check) refuses what the run refuses, with the
 * same message, and passes what the run accepts (the run then trains). */
static void test_check_is_the_run(void)
{
    static const struct {
        const char *name, *value;
        const char *says; /* NULL: accepted */
    } cases[] = {
        {"algo", "osgp", "--algo osgp keeps state between steps"}, /* with --checkpoint below */
        {"local-steps", "3", "--local-steps applies to localsgd, postlocal, not --algo allreduce"},
        {"warmup", "9", "--warmup must be in [0, epochs], got 9"},
        {"model", "foo", "unknown model 'foo'"},
        {"algo", "nosuch", "unknown algorithm 'nosuch'"},
        {"fail", "7@1", "--fail 7@1 names worker 7, but there are 2 workers"},
        {"fail", "1@1:kill", "--fail 1@1:kill: the threads engine's mode is stop"},
        {"nesterov", NULL, NULL},
        {"engine", "nosuch", "nosuch"},
        {"algo", "sgd", "--algo sgd runs on at most 1 worker(s), got --workers 2"},
        {"eval-every", "2", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        herd_config *c;
        herd_err err = {0}, cerr = {0}, rerr = {0};
        ASSERT_OK(herd_config_new(&c));
        static const char *const base[][2] = {{"data", "synthetic:1x8x8:4"}, {"model", "linear"}, {"workers", "2"},
                                              {"epochs", "1"}, {"train-limit", "256"}, {"test-limit", "64"}};
        for (size_t k = 0; k < sizeof base / sizeof base[0]; k++)
            ASSERT_OK(herd_config_set(c, base[k][0], base[k][1], &err));
        ASSERT_OK(herd_config_set(c, cases[i].name, cases[i].value, &err));
        if (!strcmp(cases[i].name, "algo") && !strcmp(cases[i].value, "osgp"))
            ASSERT_OK(herd_config_set(c, "checkpoint", herd_test_fmt("%s/ck%zu", herd_test_tmpdir(), i), &err));
        herd_status cst = herd_config_check(c, &cerr);
        herd_train_result res;
        herd_status rst = herd_train(c, &res, &rerr);
        const char *what = herd_test_fmt("--%s %s", cases[i].name, cases[i].value ? cases[i].value : "");
        if (!cases[i].says) {
            if (cst != HERD_OK || rst != HERD_OK)
                herd_test_fail(__FILE__, __LINE__, "%s: check %d (%s), run %d (%s)", what, cst, cerr.msg, rst, rerr.msg);
            ASSERT_TRUE(res.options != NULL);
        } else {
            if (cst == HERD_OK || rst == HERD_OK || !res.refused)
                herd_test_fail(__FILE__, __LINE__, "%s: check %d, run %d (refused %d)", what, cst, rst, res.refused);
            ASSERT_STR_CONTAINS(cerr.msg, cases[i].says);
            if (strcmp(cerr.msg, rerr.msg))
                herd_test_fail(__FILE__, __LINE__, "%s: check says '%s', the run '%s'", what, cerr.msg, rerr.msg);
        }
        herd_train_result_free(&res);
        herd_config_free(c);
    }
}

/* The summary's "options" and the log's start record name every option
 * of the run (but the library's own) and every option of the algorithm,
 * as the run resolved them. */
static void test_options_echoed(void)
{
    herd_config *c;
    herd_err err = {0};
    const char *log = herd_test_fmt("%s/run.jsonl", herd_test_tmpdir());
    ASSERT_OK(herd_config_new(&c));
    static const char *const set[][2] = {{"data", "synthetic:1x8x8:4"}, {"model", "linear"}, {"algo", "localsgd"},
                                         {"workers", "2"}, {"epochs", "1"}, {"train-limit", "256"},
                                         {"test-limit", "64"}, {"local-steps", "3"}, {"slow", "1:2"}};
    for (size_t k = 0; k < sizeof set / sizeof set[0]; k++)
        ASSERT_OK(herd_config_set(c, set[k][0], set[k][1], &err));
    ASSERT_OK(herd_config_set(c, "log", log, &err));
    herd_train_result res;
    if (herd_train(c, &res, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    char text[65536];
    FILE *f = fopen(log, "r");
    ASSERT_TRUE(f != NULL);
    text[fread(text, 1, sizeof text - 1, f)] = 0;
    fclose(f);
    const char *start = strstr(text, "\"event\":\"start\"");
    ASSERT_TRUE(start != NULL);
    char rec[16384];
    snprintf(rec, sizeof rec, "%.*s", (int)(strchr(start, '\n') - start), start);
    ASSERT_TRUE(herd_test_json_lines(res.options, "the summary's options") == 1);
    for (const herd_opt *o = herd__run_options; o->name; o++) {
        const char *key = herd_test_fmt("\"%s\":", o->name);
        bool library = o->flags & HERD_OPT_LIBRARY;
        if (library != !strstr(res.options, key) || library != !strstr(rec, key))
            herd_test_fail(__FILE__, __LINE__, "--%s: in the summary %d, in the start record %d", o->name,
                           strstr(res.options, key) != NULL, strstr(rec, key) != NULL);
    }
    ASSERT_STR_CONTAINS(res.options, "\"algo\":\"localsgd\"");
    ASSERT_STR_CONTAINS(res.options, "\"engine\":\"threads\""); /* resolved */
    ASSERT_STR_CONTAINS(res.options, "\"lr\":0.05,\"momentum\":0.9,");
    ASSERT_STR_CONTAINS(res.options, "\"slow\":\"1:2\"");
    ASSERT_STR_CONTAINS(res.options, "\"algo_options\":{\"local-steps\":3}");
    ASSERT_STR_CONTAINS(rec, "\"algo_options\":{\"local-steps\":3}");
    herd_train_result_free(&res);
    ASSERT_TRUE(res.options == NULL);
    herd_config_free(c);
}

/* A configuration file: options one a line, comments, bare flags,
 * repeatable options; a bad line refused with FILE:LINE and nothing
 * changed; options set after it win. */
static void test_file(void)
{
    const char *path = herd_test_fmt("%s/run.conf", herd_test_tmpdir());
    herd_config *c;
    herd_err err = {0};
    char v[256];
    ASSERT_OK(herd_config_new(&c));
    ASSERT_OK(herd_config_set(c, "epochs", "7", &err));
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fputs("# lenet on four workers\n\n  model = mlp  \nworkers=4\n--batch = 32 # per worker\nnesterov\n"
          "slow = 1:2\nslow = 3:4\nps-shards = 2\ndata = /tmp/a#b\n", f);
    ASSERT_OK(fclose(f));
    if (herd_config_load(c, path, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    static const char *const want[][2] = {{"model", "mlp"}, {"workers", "4"}, {"batch", "32"}, {"nesterov", "true"},
                                          {"slow", "1:2,3:4"}, {"ps-shards", "2"}, {"data", "/tmp/a#b"},
                                          {"epochs", "7"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        get(c, want[i][0], v, sizeof v);
        if (strcmp(v, want[i][1]))
            herd_test_fail(__FILE__, __LINE__, "%s: '%s', want '%s'", want[i][0], v, want[i][1]);
    }
    ASSERT_OK(herd_config_set(c, "workers", "2", &err)); /* after the file: it wins */
    get(c, "workers", v, sizeof v);
    ASSERT_TRUE(!strcmp(v, "2"));
    static const struct {
        const char *text, *says;
    } bad[] = {
        {"model = mlp\nworkers = 0\n", "run.conf:2: --workers must be in [1, 4096], got 0"},
        {"model = mlp\nmodel = lenet\n", "run.conf:2: model is given twice"},
        {"# x\nbogus = 1\n", "run.conf:2: unknown option '--bogus'"},
        {"model mlp\n", "run.conf:1: expected NAME = VALUE or NAME, got 'model mlp'"},
        {"model =\n", "run.conf:1: model = what?"},
        {"= 3\n", "run.conf:1: expected NAME = VALUE"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f = fopen(path, "w");
        ASSERT_TRUE(f && fputs(bad[i].text, f) >= 0 && fclose(f) == 0);
        ASSERT_TRUE(herd_config_load(c, path, &err) == HERD_EINVAL);
        ASSERT_STR_CONTAINS(err.msg, bad[i].says);
        get(c, "model", v, sizeof v); /* nothing changed */
        ASSERT_TRUE(!strcmp(v, "mlp"));
        get(c, "workers", v, sizeof v);
        ASSERT_TRUE(!strcmp(v, "2"));
    }
    ASSERT_TRUE(herd_config_load(c, herd_test_tmpdir(), &err) == HERD_EINVAL); /* a directory */
    ASSERT_TRUE(herd_config_load(c, "/nonexistent/x.conf", &err) == HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "/nonexistent/x.conf");
    ASSERT_TRUE(herd_config_load(NULL, path, &err) == HERD_EINVAL);
    herd_config_free(c);
}

/* A resumed run keeps the options its checkpoints record (the rows marked
 * HERD_OPT_RESUME, the algorithm's): another --lr, --schedule, --precision
 * or --local-steps is refused naming both values; the same options resume;
 * options a resume may change (--epochs, --eval-every) do not matter. */
static void test_resume_keeps_options(void)
{
    const char *dir = herd_test_fmt("%s/ck", herd_test_tmpdir());
    herd__train_config c = herd_test_config("linear", "localsgd", 2);
    herd_train_result res;
    herd_err err = {0};
    c.epochs = 1, c.max_steps = 4, c.checkpoint_dir = dir, c.checkpoint_every = 2;
    ASSERT_OK(herd__config_set_arg(&c, "local-steps", "2", &err));
    ASSERT_OK(herd__config_set_arg(&c, "lr", "0.05", &err));
    if (herd__train(&c, &res, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    herd_train_result_free(&res);
    static const struct {
        const char *name, *value, *says; /* says NULL: resumes */
    } cases[] = {
        {"lr", "0.1", "was written with --lr 0.05; this run has --lr 0.1"},
        {"schedule", "const", "was written with --schedule cosine; this run has --schedule const"},
        {"weight-decay", "0", "--weight-decay 0.0005; this run has --weight-decay 0"},
        {"local-steps", "3", "was written with --local-steps 2; this run has --local-steps 3"},
        {"eval-every", "2", NULL},
        {"epochs", "2", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        herd__train_config r = c;
        r.resume = true, r.max_steps = 0;
        r.nalgo_args = 0; /* local-steps given again below: 2 unless the case says */
        if (strcmp(cases[i].name, "local-steps"))
            ASSERT_OK(herd__config_set_arg(&r, "local-steps", "2", &err));
        ASSERT_OK(herd__config_set_arg(&r, cases[i].name, cases[i].value, &err));
        herd_status st = herd__train(&r, &res, &err);
        herd_train_result_free(&res);
        if (!cases[i].says) {
            if (st != HERD_OK)
                herd_test_fail(__FILE__, __LINE__, "--%s %s: %s", cases[i].name, cases[i].value, err.msg);
            continue;
        }
        if (st == HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "--%s %s resumed", cases[i].name, cases[i].value);
        ASSERT_STR_CONTAINS(err.msg, cases[i].says);
    }
}

/* The log's start record (and the summary's "options") is a
 * configuration: loaded back, it repeats the run, the same figures bit for
 * bit (allreduce on the threads engine is deterministic). */
static void test_json_repeats_run(void)
{
    const char *log = herd_test_fmt("%s/first.jsonl", herd_test_tmpdir());
    const char *sum = herd_test_fmt("%s/summary.json", herd_test_tmpdir());
    herd_config *a, *b, *c;
    herd_err err = {0};
    ASSERT_OK(herd_config_new(&a));
    static const char *const set[][2] = {{"data", "synthetic:1x8x8:4"}, {"model", "mlp"}, {"algo", "allreduce"},
                                         {"workers", "2"}, {"epochs", "2"}, {"train-limit", "512"},
                                         {"test-limit", "128"}, {"schedule", "step"}, {"step-epochs", "1"},
                                         {"bucket-bytes", "8192"}, {"slow", "1:1.5"}, {"slow", "0:1.25"}};
    for (size_t k = 0; k < sizeof set / sizeof set[0]; k++)
        ASSERT_OK(herd_config_set(a, set[k][0], set[k][1], &err));
    ASSERT_OK(herd_config_set(a, "log", log, &err));
    herd_train_result ra, rb, rc;
    if (herd_train(a, &ra, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    FILE *f = fopen(sum, "w");
    ASSERT_TRUE(f && fprintf(f, "%s\n", ra.options) > 0 && fclose(f) == 0);
    ASSERT_OK(herd_config_new(&b));
    ASSERT_OK(herd_config_new(&c));
    if (herd_config_load(b, log, &err) != HERD_OK || herd_config_load(c, sum, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    char va[256], vb[256], vc[256];
    for (size_t i = 0; herd_config_option(i); i++) {
        const herd_opt *o = herd_config_option(i);
        if (o->flags & HERD_OPT_LIBRARY || !strcmp(o->name, "log"))
            continue;
        get(b, o->name, vb, sizeof vb);
        get(c, o->name, vc, sizeof vc);
        if (strcmp(vb, vc))
            herd_test_fail(__FILE__, __LINE__, "--%s: '%s' from the log, '%s' from the summary", o->name, vb, vc);
    }
    get(a, "slow", va, sizeof va);
    get(b, "slow", vb, sizeof vb);
    ASSERT_TRUE(!strcmp(va, vb) && !strcmp(vb, "1:1.5,0:1.25"));
    get(b, "bucket-bytes", vb, sizeof vb);
    ASSERT_TRUE(!strcmp(vb, "8192"));
    get(b, "lr", vb, sizeof vb);
    ASSERT_TRUE(!strcmp(vb, "0.05")); /* as the run resolved it */
    get(b, "engine", vb, sizeof vb);
    ASSERT_TRUE(!strcmp(vb, "threads"));
    if (herd_train(b, &rb, &err) != HERD_OK || herd_train(c, &rc, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ASSERT_TRUE(ra.test_loss == rb.test_loss && ra.test_acc == rb.test_acc && ra.train_loss == rb.train_loss);
    ASSERT_TRUE(ra.test_loss == rc.test_loss && ra.steps == rc.steps);
    ASSERT_TRUE(!strcmp(ra.options, rb.options) && !strcmp(ra.options, rc.options));
    /* bad JSON: refused, naming the file */
    f = fopen(sum, "w");
    ASSERT_TRUE(f && fputs("{\"model\": \"mlp\", \"workers\": [2]}\n", f) >= 0 && fclose(f) == 0);
    ASSERT_TRUE(herd_config_load(c, sum, &err) == HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--workers takes one value, not a list");
    f = fopen(sum, "w");
    ASSERT_TRUE(f && fputs("{\"model\": \"mlp\", \"workers\": 0}\n", f) >= 0 && fclose(f) == 0);
    ASSERT_TRUE(herd_config_load(c, sum, &err) == HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--workers must be in [1, 4096], got 0");
    herd_train_result_free(&ra), herd_train_result_free(&rb), herd_train_result_free(&rc);
    herd_config_free(a), herd_config_free(b), herd_config_free(c);
}

const herd_test herd_tests_config[] = {
    {"config_json_repeats_run", test_json_repeats_run, 60},
    {"config_resume_keeps_options", test_resume_keeps_options, 60},
    {"config_file", test_file, 10},
    {"config_rows", test_rows, 10},
    {"config_set_get", test_set_get, 10},
    {"config_lr_given", test_lr_given, 10},
    {"config_check_is_the_run", test_check_is_the_run, 60},
    {"config_options_echoed", test_options_echoed, 30},
    HERD_TEST_END,
};
