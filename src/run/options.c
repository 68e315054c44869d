/* The run's options: one table (herd_opt.h) from which the defaults, the
 * command line, --help, validation, the log's start record, the ranks'
 * agreed record and the summary's echo of options are made. A new option
 * of the run is a field of herd__train_config and a row here. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "herd/herd_algo.h"
#include "herd/herd_nn.h"
#include "herd/herd_optim.h"
#include "core/json.h"
#include "run/options.h"

/* CHOICE rows store an int; these enums are one */
_Static_assert(sizeof(herd_schedule) == sizeof(int) && sizeof(herd_optimizer) == sizeof(int) &&
                   sizeof(herd_lr_scale) == sizeof(int) && sizeof(herd_precision) == sizeof(int),
               "a CHOICE row's enum is an int");

/* ---- the repeatable options: --slow, --fail, --inject-nan ------------ */

/* "A@B" or "A:B" split at sep into two bounded strings; false when either
 * is missing or too long. */
static bool split2(const char *s, char sep, char *a, char *b, size_t cap)
{
    const char *at = strchr(s, sep);
    if (!at || (size_t)(at - s) >= cap || strlen(at + 1) >= cap)
        return false;
    snprintf(a, cap, "%.*s", (int)(at - s), s);
    snprintf(b, cap, "%s", at + 1);
    return *a && *b;
}

static bool parse_size(const char *s, size_t *out)
{
    herd_opt row = {.name = "", .type = HERD_OPT_SIZE};
    return herd_opt_parse(&row, out, s, NULL) == HERD_OK;
}

static bool parse_double(const char *s, double *out)
{
    herd_opt row = {.name = "", .type = HERD_OPT_DOUBLE};
    return herd_opt_parse(&row, out, s, NULL) == HERD_OK;
}

/* --slow RANK:FACTOR */
static herd_status slow_parse(const herd_opt *o, void *obj, const char *v, herd_err *err)
{
    herd__train_config *cfg = obj;
    char a[32], b[32];
    herd__slow s;
    (void)o;
    if (!v || cfg->nslow >= HERD_MAX_SLOW || !split2(v, ':', a, b, sizeof a) || !parse_size(a, &s.rank) ||
        !parse_double(b, &s.factor))
        return herd_err_set(err, HERD_EINVAL, "--slow: expected RANK:FACTOR (e.g. 3:10), at most %d times, got '%s'",
                            HERD_MAX_SLOW, v ? v : "");
    cfg->slow[cfg->nslow++] = s;
    return HERD_OK;
}

static void slow_format(const herd_opt *o, const void *obj, char *buf, size_t cap)
{
    const herd__train_config *cfg = obj;
    size_t len = 0;
    (void)o;
    buf[0] = 0;
    for (size_t i = 0; i < cfg->nslow && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%zu:%.17g", i ? "," : "", cfg->slow[i].rank,
                                cfg->slow[i].factor);
}

/* --fail RANK@STEP[:MODE] */
static herd_status fail_parse(const herd_opt *o, void *obj, const char *v, herd_err *err)
{
    herd__train_config *cfg = obj;
    char a[64], b[64], step[64], mode[64] = "";
    herd__fail f = {.mode = HERD_FAIL_DEFAULT};
    (void)o;
    bool ok = v && cfg->nfail < HERD_MAX_FAIL && split2(v, '@', a, b, sizeof a) && parse_size(a, &f.rank);
    if (ok && strchr(b, ':'))
        ok = split2(b, ':', step, mode, sizeof step) && herd__fail_mode_parse(mode, &f.mode) == HERD_OK;
    else if (ok)
        snprintf(step, sizeof step, "%s", b);
    if (!ok || !parse_size(step, &f.step))
        return herd_err_set(err, HERD_EINVAL,
                            "--fail: expected RANK@STEP[:MODE] (e.g. 2@100 or 2@100:kill; MODE stop, exit0, exit1, "
                            "abort or kill), at most %d times, got '%s'",
                            HERD_MAX_FAIL, v ? v : "");
    cfg->fail[cfg->nfail++] = f;
    return HERD_OK;
}

static void fail_format(const herd_opt *o, const void *obj, char *buf, size_t cap)
{
    const herd__train_config *cfg = obj;
    size_t len = 0;
    (void)o;
    buf[0] = 0;
    for (size_t i = 0; i < cfg->nfail && len < cap; i++) {
        const herd__fail *f = &cfg->fail[i];
        len += (size_t)snprintf(buf + len, cap - len, "%s%zu@%zu", i ? "," : "", f->rank, f->step);
        if (f->mode != HERD_FAIL_DEFAULT && len < cap)
            len += (size_t)snprintf(buf + len, cap - len, ":%s", herd__fail_mode_name(f->mode));
    }
}

/* --inject-nan RANK@STEP */
static herd_status inject_parse(const herd_opt *o, void *obj, const char *v, herd_err *err)
{
    herd__train_config *cfg = obj;
    char a[32], b[32];
    herd__inject in;
    (void)o;
    if (!v || cfg->ninject_nan >= HERD_MAX_INJECT || !split2(v, '@', a, b, sizeof a) || !parse_size(a, &in.rank) ||
        !parse_size(b, &in.step))
        return herd_err_set(err, HERD_EINVAL, "--inject-nan: expected RANK@STEP (e.g. 1@20), at most %d times, got '%s'",
                            HERD_MAX_INJECT, v ? v : "");
    cfg->inject_nan[cfg->ninject_nan++] = in;
    return HERD_OK;
}

static void inject_format(const herd_opt *o, const void *obj, char *buf, size_t cap)
{
    const herd__train_config *cfg = obj;
    size_t len = 0;
    (void)o;
    buf[0] = 0;
    for (size_t i = 0; i < cfg->ninject_nan && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%zu@%zu", i ? "," : "", cfg->inject_nan[i].rank,
                                cfg->inject_nan[i].step);
}

/* ---- the table ------------------------------------------------------- */

#define AT(field) offsetof(herd__train_config, field)
#define B HERD_OPT_BOUNDED
#define AGREE HERD_OPT_AGREE
#define RESUME HERD_OPT_RESUME

_Static_assert(HERD_MAX_EVAL_EVERY_STEPS == 1000000000, "--eval-every-steps' bound");

static const char G_RUN[] = "the run", G_OPT[] = "optimizer and schedule", G_COMPUTE[] = "compute",
                  G_EVAL[] = "evaluation", G_OUT[] = "logs and output", G_CKPT[] = "checkpoints",
                  G_FAULT[] = "faults and testing";

const herd_opt herd__run_options[] = {
    {.name = "data", .type = HERD_OPT_STR, .offset = AT(data), .flags = HERD_OPT_NONEMPTY, .meta = "S", .group = G_RUN,
     .help = "data: a directory of IDX, CIFAR or .npy files or of train/ and test/ image folders, or "
             "synthetic:CxHxW:K (default $HERD_DATA or /usr/share/datasets/fashion-mnist)"},
    {.name = "model", .type = HERD_OPT_STR, .offset = AT(model), .def = "lenet", .flags = RESUME | AGREE | HERD_OPT_NONEMPTY,
     .meta = "S", .group = G_RUN,
     .help = "linear, mlp, lenet, cnn, resnet20 (models/NAME.model), or a description file (docs/models-and-data.md)"},
    {.name = "algo", .type = HERD_OPT_STR, .offset = AT(algo), .flags = AGREE | HERD_OPT_NONEMPTY, .meta = "S",
     .group = G_RUN,
     .help = "synchronization algorithm (default: sgd for one worker, allreduce for several; see 'herd algos')"},
    {.name = "workers", .type = HERD_OPT_SIZE, .offset = AT(workers), .def = "1", .flags = RESUME | B | AGREE, .min = 1,
     .max = 4096, .meta = "N", .group = G_RUN, .help = "number of workers (on the mpi engine, the ranks)"},
    {.name = "engine", .type = HERD_OPT_STR, .offset = AT(engine), .flags = HERD_OPT_NONEMPTY, .meta = "S",
     .group = G_RUN,
     .help = "the engine (herd engines lists them; default: mpi when started by mpirun, else threads)"},
    {.name = "epochs", .type = HERD_OPT_SIZE, .offset = AT(epochs), .def = "5", .flags = B | AGREE, .min = 1,
     .max = 100000, .meta = "N", .group = G_RUN, .help = "passes over the training set"},
    {.name = "batch", .type = HERD_OPT_SIZE, .offset = AT(batch), .def = "64", .flags = RESUME | B | AGREE, .min = 1,
     .max = 65536, .meta = "N", .group = G_RUN, .help = "batch size per worker"},
    {.name = "seed", .type = HERD_OPT_U64, .offset = AT(seed), .def = "1", .flags = RESUME | AGREE, .meta = "N",
     .group = G_RUN, .help = "random seed"},
    {.name = "train-limit", .type = HERD_OPT_SIZE, .offset = AT(train_limit), .flags = RESUME | AGREE, .meta = "N",
     .group = G_RUN, .help = "use only the first N training examples (0: all)"},
    {.name = "test-limit", .type = HERD_OPT_SIZE, .offset = AT(test_limit), .flags = AGREE, .meta = "N",
     .group = G_RUN, .help = "use only the first N test examples (0: all)"},
    {.name = "max-steps", .type = HERD_OPT_SIZE, .offset = AT(max_steps), .flags = AGREE, .meta = "N",
     .group = G_RUN, .help = "stop after N steps per worker (0: no limit)"},
    {.name = "timeout", .type = HERD_OPT_DOUBLE, .offset = AT(comm_timeout_s), .def = "60",
     .flags = B | HERD_OPT_MIN_OPEN, .min = 0, .max = 86400, .meta = "X", .group = G_RUN,
     .help = "seconds a worker may wait for another before failing"},

    {.name = "lr", .type = HERD_OPT_FLOAT, .offset = AT(optim.lr), .def = "0.05",
     .flags = RESUME | B | HERD_OPT_MIN_OPEN | HERD_OPT_UNSET | AGREE, .min = 0, .max = 100, .meta = "X", .group = G_OPT,
     .help = "learning rate (default: the algorithm's own where it has one, --optimizer lars's 0.5, else 0.05)"},
    {.name = "momentum", .type = HERD_OPT_FLOAT, .offset = AT(optim.momentum), .def = "0.9",
     .flags = RESUME | B | HERD_OPT_MAX_OPEN | HERD_OPT_UNSET | AGREE, .min = 0, .max = 1, .meta = "X", .group = G_OPT,
     .help = "momentum (default: the algorithm's own where it has one, else 0.9)"},
    {.name = "nesterov", .type = HERD_OPT_BOOL, .offset = AT(optim.nesterov), .flags = RESUME | AGREE, .group = G_OPT,
     .help = "Nesterov momentum"},
    {.name = "weight-decay", .type = HERD_OPT_FLOAT, .offset = AT(optim.weight_decay), .def = "5e-4",
     .flags = RESUME | B | HERD_OPT_MAX_OPEN | AGREE, .min = 0, .max = 1, .meta = "X", .group = G_OPT, .help = "L2 weight decay"},
    {.name = "schedule", .type = HERD_OPT_CHOICE, .offset = AT(optim.schedule), .def = "cosine", .flags = RESUME | AGREE,
     .choices = herd_schedule_names, .group = G_OPT, .help = "learning-rate schedule"},
    {.name = "warmup", .type = HERD_OPT_DOUBLE, .offset = AT(optim.warmup_epochs), .def = "0", .flags = RESUME | B | AGREE,
     .min = 0, .max = 100000, .meta = "X", .group = G_OPT, .help = "linear warm-up epochs (at most --epochs)"},
    {.name = "step-epochs", .type = HERD_OPT_DOUBLE, .offset = AT(optim.step_epochs), .def = "30",
     .flags = RESUME | B | HERD_OPT_MIN_OPEN | AGREE, .min = 0, .max = 1e6, .meta = "X", .group = G_OPT,
     .help = "step schedule: epochs between decays"},
    {.name = "step-gamma", .type = HERD_OPT_FLOAT, .offset = AT(optim.step_gamma), .def = "0.1",
     .flags = RESUME | B | HERD_OPT_MIN_OPEN | AGREE, .min = 0, .max = 1, .meta = "X", .group = G_OPT,
     .help = "step schedule: the factor of each decay"},
    {.name = "optimizer", .type = HERD_OPT_CHOICE, .offset = AT(optim.optimizer), .def = "sgd", .flags = RESUME | AGREE,
     .choices = herd_optimizer_names, .group = G_OPT,
     .help = "sgd, lars (a trust ratio per layer, with --momentum) or lamb (its Adam counterpart); lars and lamb "
             "leave biases and batch norm out of the trust ratio and weight decay. Large batches (docs/optimizers.md): "
             "--optimizer lars (its --lr 0.5), --warmup 2 of 10 epochs"},
    {.name = "lars-eta", .type = HERD_OPT_FLOAT, .offset = AT(optim.lars_eta), .def = "0.04",
     .flags = RESUME | B | HERD_OPT_MIN_OPEN | AGREE, .min = 0, .max = 1, .meta = "X", .group = G_OPT,
     .help = "lars: trust coefficient eta, the layer's rate being lr * eta ||w|| / (||g|| + wd ||w||) (the paper's "
             "0.001 learns nothing at herd's rates: bench/lab run optimizer-sweep)"},
    {.name = "lamb-beta1", .type = HERD_OPT_FLOAT, .offset = AT(optim.beta1), .def = "0.9",
     .flags = RESUME | B | HERD_OPT_MAX_OPEN | AGREE, .min = 0, .max = 1, .meta = "X", .group = G_OPT,
     .help = "lamb: first-moment decay"},
    {.name = "lamb-beta2", .type = HERD_OPT_FLOAT, .offset = AT(optim.beta2), .def = "0.999",
     .flags = RESUME | B | HERD_OPT_MAX_OPEN | AGREE, .min = 0, .max = 1, .meta = "X", .group = G_OPT,
     .help = "lamb: second-moment decay"},
    {.name = "lamb-eps", .type = HERD_OPT_FLOAT, .offset = AT(optim.eps), .def = "1e-6",
     .flags = RESUME | B | HERD_OPT_MIN_OPEN | AGREE, .min = 0, .max = 1, .meta = "X", .group = G_OPT,
     .help = "lamb: added to the root of the second moment"},
    {.name = "lr-scale", .type = HERD_OPT_CHOICE, .offset = AT(optim.lr_scale), .def = "none", .flags = RESUME | AGREE,
     .choices = herd_lr_scale_names, .group = G_OPT,
     .help = "linear: --lr times the global batch (workers x batch) / --lr-ref-batch"},
    {.name = "lr-ref-batch", .type = HERD_OPT_SIZE, .offset = AT(optim.lr_ref_batch), .def = "256",
     .flags = RESUME | B | AGREE, .min = 1, .max = 16777216, .meta = "N", .group = G_OPT,
     .help = "--lr-scale linear: the global batch --lr is given for"},

    {.name = "precision", .type = HERD_OPT_CHOICE, .offset = AT(precision), .def = "fp32", .flags = RESUME | AGREE,
     .choices = herd_precision_names, .group = G_COMPUTE,
     .help = "the arithmetic of matrix products and convolutions; bf16 rounds their inputs to bfloat16 and sums in "
             "fp32, weights and optimizer stay fp32; needs AVX-512 (emulated, slower, without avx512_bf16)"},
    {.name = "threads", .type = HERD_OPT_SIZE, .offset = AT(threads), .def = "0", .flags = B, .min = 0, .max = 256,
     .meta = "N", .group = G_COMPUTE,
     .help = "compute threads per worker (0: OMP_NUM_THREADS where set, else this process's cores over its workers)"},
    {.name = "adapt-threads", .type = HERD_OPT_BOOL, .offset = AT(adapt_threads), .group = G_COMPUTE,
     .help = "each worker runs at its threads or at 1, whichever its steps time faster (a busy neighbour; checked "
             "now and then; results then depend on timing)"},

    {.name = "eval-every", .type = HERD_OPT_SIZE, .offset = AT(eval_every), .def = "1", .flags = B | AGREE, .min = 1,
     .max = 100000, .meta = "N", .group = G_EVAL, .help = "evaluate every N epochs (the last always)"},
    {.name = "eval-at-start", .type = HERD_OPT_BOOL, .offset = AT(eval_at_start), .flags = AGREE, .group = G_EVAL,
     .help = "also evaluate before the first step (an \"eval\" log record at epoch 0, train_s 0)"},
    {.name = "eval-every-steps", .type = HERD_OPT_SIZE, .offset = AT(eval_every_steps), .def = "0",
     .flags = B | AGREE, .min = 0, .max = 1e9, .meta = "N", .group = G_EVAL,
     .help = "also evaluate every N global steps, within epochs too (0: off; an asynchronous run's global step: "
             "workers batches of the shared counter); the \"eval\" records' progress is in epochs, their train_s "
             "excludes evaluation"},

    {.name = "log", .type = HERD_OPT_STR, .offset = AT(log_path), .flags = HERD_OPT_NONEMPTY, .meta = "FILE",
     .group = G_OUT, .help = "append JSON Lines records (start, epoch, eval, events) to FILE"},
    {.name = "log-every", .type = HERD_OPT_SIZE, .offset = AT(log_every), .meta = "N", .group = G_OUT,
     .help = "with --log: a \"step\" record (loss, lr) every N steps of each worker (0: none)"},
    {.name = "trace", .type = HERD_OPT_STR, .offset = AT(trace_path), .flags = HERD_OPT_NONEMPTY, .meta = "FILE",
     .group = G_OUT,
     .help = "write each worker's timeline (pull, compute, exchange, batch, eval, checkpoint; phases: forward, "
             "backward, update) as a Chrome trace (chrome://tracing, Perfetto); mpirun: rank r's to FILE.rank<r>"},
    {.name = "quiet", .type = HERD_OPT_BOOL, .offset = AT(quiet), .def = "true", .flags = HERD_OPT_LIBRARY,
     .group = G_OUT, .help = "nothing on stderr but errors and warnings (herd train speaks unless --quiet)"},
    {.name = "progress", .type = HERD_OPT_BOOL, .offset = AT(progress), .def = "true", .flags = HERD_OPT_LIBRARY,
     .group = G_OUT, .help = "a progress bar on stderr, where it is a terminal and quiet is false (--no-progress)"},
    {.name = "keep-final", .type = HERD_OPT_BOOL, .offset = AT(keep_final), .flags = HERD_OPT_LIBRARY,
     .group = G_OUT, .help = "the result keeps the final model (herd_train_result.final_params)"},

    {.name = "checkpoint", .type = HERD_OPT_STR, .offset = AT(checkpoint_dir), .flags = HERD_OPT_NONEMPTY,
     .meta = "S", .group = G_CKPT,
     .help = "write checkpoints into directory S (threads engine: every algorithm but osgp; mpi engine: the "
             "synchronous ones, S on a filesystem every rank shares); with --resume S may be the newest checkpoint "
             "file of its directory"},
    {.name = "checkpoint-every", .type = HERD_OPT_SIZE, .offset = AT(checkpoint_every), .meta = "N",
     .group = G_CKPT, .help = "steps between checkpoints (0: one per epoch; the last step always)"},
    {.name = "keep", .type = HERD_OPT_SIZE, .offset = AT(checkpoint_keep), .def = "3", .flags = B, .min = 1,
     .max = 1000000, .meta = "N", .group = G_CKPT, .help = "keep the newest N checkpoints"},
    {.name = "resume", .type = HERD_OPT_BOOL, .offset = AT(resume), .group = G_CKPT,
     .help = "continue from the newest valid checkpoint of --checkpoint DIR"},
    {.name = "other-data", .type = HERD_OPT_BOOL, .offset = AT(other_data), .group = G_CKPT,
     .help = "with --resume: go on although the checkpoint's run read other data (its data digests differ: refused "
             "otherwise, exit 2); the summary gives both digests"},

    {.name = "skip-nonfinite", .type = HERD_OPT_BOOL, .offset = AT(skip_nonfinite), .flags = AGREE,
     .group = G_FAULT,
     .help = "a NaN/Inf loss or gradient skips the step's update instead of stopping the run (synchronous: on every "
             "worker; asynchronous: that gradient is dropped), up to --max-skips in a row"},
    {.name = "max-skips", .type = HERD_OPT_SIZE, .offset = AT(max_skips), .def = "10", .flags = B | AGREE, .min = 1,
     .max = 1000000, .meta = "N", .group = G_FAULT,
     .help = "with --skip-nonfinite: the run stops anyway after N skipped steps in a row (the weights have gone bad, "
             "or the learning rate is far too high: skipping more would only hide it)"},
    {.name = "stop-on-divergence", .type = HERD_OPT_BOOL, .offset = AT(stop_on_divergence), .flags = AGREE,
     .group = G_FAULT,
     .help = "stop (exit 1) when the loss diverges: not finite, back at chance after having learned, 10x its lowest, "
             "or not learning: still at chance after 100 steps, or at the end a test accuracy within 2 points of "
             "chance (without it: a warning, and the summary's status \"diverged\" or \"not_learning\")"},
    {.name = "slow", .type = HERD_OPT_CUSTOM, .offset = 0, .flags = HERD_OPT_REPEAT, .meta = "RANK:FACTOR",
     .group = G_FAULT, .help = "make worker RANK's compute FACTOR times slower (repeatable)",
     .parse = slow_parse, .format = slow_format},
    {.name = "fail", .type = HERD_OPT_CUSTOM, .offset = 0, .flags = HERD_OPT_REPEAT | AGREE, .meta = "RANK@STEP",
     .group = G_FAULT,
     .help = "RANK@STEP[:MODE]: worker RANK fails on purpose at step STEP (repeatable); MODE: threads engine stop "
             "(its thread ends; the threads engine's), mpi engine exit0, exit1 (the mpi engine's), abort or kill "
             "(SIGKILL): the process dies",
     .parse = fail_parse, .format = fail_format},
    {.name = "inject-nan", .type = HERD_OPT_CUSTOM, .offset = 0, .flags = HERD_OPT_REPEAT | AGREE,
     .meta = "RANK@STEP", .group = G_FAULT,
     .help = "for testing: a NaN goes into worker RANK's gradient at its step STEP (repeatable)",
     .parse = inject_parse, .format = inject_format},
    {0},
};

#undef AT
#undef B
#undef AGREE
#undef RESUME

const herd_opt *herd__run_option_find(const char *name)
{
    return herd_opt_find(herd__run_options, name);
}

void herd__train_config_defaults(herd__train_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    herd_err err = {0};
    HERD_ASSERT(herd_opt_defaults(herd__run_options, cfg, &err) == HERD_OK); /* the table's own defaults parse */
}

/* ---- the options as JSON: the start record, the summary --------------- */

/* `"name":value` of row o in obj, into buf at *len (cut at cap). */
static void json_member(const herd_opt *o, const void *obj, bool first, char *buf, size_t *len, size_t cap)
{
    char v[1024], q[2100];
    const char *p = (const char *)obj + o->offset;
    herd_opt_format(o, obj, v, sizeof v);
    bool null = (o->type == HERD_OPT_STR && !*(const char *const *)p) || (o->type == HERD_OPT_FLOAT && !v[0]) ||
                (o->type == HERD_OPT_CUSTOM && !v[0]);
    bool number = o->type != HERD_OPT_STR && o->type != HERD_OPT_CHOICE && o->type != HERD_OPT_CUSTOM;
    if (null)
        snprintf(q, sizeof q, "null");
    else if (number)
        snprintf(q, sizeof q, "%s", v); /* true/false and numbers are JSON as they are typed */
    else
        herd__json_quote(q, sizeof q, v);
    if (*len < cap)
        *len += (size_t)snprintf(buf + *len, cap - *len, "%s\"%s\":%s", first ? "" : ",", o->name, q);
    if (*len >= cap)
        *len = cap - 1;
}

size_t herd__options_json(const herd__train_config *cfg, const herd_algo_ops *ops, const void *algo_opts, char *buf,
                          size_t cap)
{
    size_t len = 0;
    bool first = true;
    if (!cap)
        return 0;
    buf[0] = 0;
    len += (size_t)snprintf(buf, cap, "{");
    for (const herd_opt *o = herd__run_options; o->name; o++) {
        if (o->flags & HERD_OPT_LIBRARY)
            continue;
        json_member(o, cfg, first, buf, &len, cap);
        first = false;
    }
    if (ops && len < cap)
        len += (size_t)snprintf(buf + len, cap - len, ",\"%s\":{", "algo_options");
    for (const herd_opt *o = ops ? ops->opts : NULL; o && o->name && len < cap; o++)
        json_member(o, algo_opts, o == ops->opts, buf, &len, cap);
    if (ops && len < cap)
        len += (size_t)snprintf(buf + len, cap - len, "}");
    if (len < cap)
        len += (size_t)snprintf(buf + len, cap - len, "}");
    return len < cap ? len : cap - 1;
}
