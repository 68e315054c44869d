/* herd — the command-line tool: `herd train`, `herd bench`.
 * The only place in herd that prints usage and calls exit(). */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "herd/herd_algo.h"
#include "herd/herd_opt.h"
#include "herd/herd_comm.h"
#include "herd/herd_data.h"
#include "herd/herd_nn.h"
#include "core/clock.h"
#include "herd/herd_run.h"
#include "cli/cli.h"

#define HERD_VERSION "0.1.0"

typedef enum opt_kind { OPT_SIZE, OPT_U64, OPT_FLOAT, OPT_DOUBLE, OPT_STR, OPT_FLAG, OPT_SLOW, OPT_SCHED, OPT_FAIL, OPT_INJECT } opt_kind;

typedef struct opt {
    const char *name; /* without the leading "--" */
    opt_kind kind;
    void *dest;
    const char *help;
} opt;

static _Noreturn void die_usage(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "herd: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see 'herd %s --help')\n", cmd);
    exit(2);
}

/* The index of val in names (NULL-terminated; the indexes are the enum's
 * values), or a usage error listing the choices. */
static int pick(const char *cmd, const char *flag, const char *val, const char *const *names)
{
    int i = 0;
    for (; names[i]; i++)
        if (!strcmp(val, names[i]))
            return i;
    char msg[256];
    int len = snprintf(msg, sizeof msg, "%s must be ", flag);
    for (int j = 0; j < i && len > 0 && (size_t)len < sizeof msg; j++)
        len += snprintf(msg + len, sizeof msg - (size_t)len, "%s%s", names[j],
                        j + 2 < i ? ", " : j + 2 == i ? " or " : "");
    snprintf(msg + len, len > 0 && (size_t)len < sizeof msg ? sizeof msg - (size_t)len : 0, ", got '%%s'");
    die_usage(cmd, msg, val);
}

static void print_opts(const opt *opts)
{
    for (const opt *o = opts; o->name; o++) {
        static const char *const meta[] = {"N", "N", "X", "X", "S", "", "RANK:FACTOR", "NAME", "RANK@STEP", "RANK@STEP"};
        char left[48];
        snprintf(left, sizeof left, "--%s %s", o->name, meta[o->kind]);
        fprintf(stderr, "  %-28s %s\n", left, o->help);
    }
}

int herd__cli_parse_size(const char *s, size_t *out)
{
    char *end;
    if (!*s || *s == '-' || *s == '+')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = (size_t)v;
    return 0;
}

int herd__cli_parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || errno || *end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

/* RANK@STEP, two non-negative integers. */
static int parse_rank_at_step(const char *s, size_t *rank, size_t *step)
{
    const char *at = strchr(s, '@');
    char head[32];
    if (!at || (size_t)(at - s) >= sizeof head)
        return -1;
    snprintf(head, sizeof head, "%.*s", (int)(at - s), s);
    return herd__cli_parse_size(head, rank) || herd__cli_parse_size(at + 1, step) ? -1 : 0;
}

/* Parses argv[first..] against opts; exits with a message on any error. */
/* `--name [value]` of an algorithm's option (herd_algo_ops.opts), for
 * herd train: its form and bounds are checked here (a usage error), which
 * algorithm takes it once --algo is known (cmd_train). */
static int algo_flag(const char *cmd, herd_train_config *cfg, const char *name, const char *val, int i, int argc,
                     char **argv)
{
    const herd_algo_ops *owner;
    const herd_opt *row = herd_algo_opt_find(name, &owner);
    if (!row)
        die_usage(cmd, "unknown flag '--%s'", name);
    if (!herd_opt_takes_value(row) && val)
        die_usage(cmd, "flag '--%s' takes no value", name);
    if (herd_opt_takes_value(row) && !val) {
        if (i + 1 >= argc)
            die_usage(cmd, "flag '--%s' needs a value", name);
        val = argv[++i];
    }
    _Alignas(max_align_t) char scratch[512];
    herd_err err = {0};
    HERD_ASSERT(owner->opts_size <= sizeof scratch);
    if (herd_opt_parse(row, scratch, val, &err) < 0)
        die_usage(cmd, "%s", err.msg);
    if (herd_train_config_set(cfg, row->name, val) < 0)
        die_usage(cmd, "too many algorithm options (at most %s)", "32");
    return i;
}

static void parse_opts(const char *cmd, const opt *opts, int argc, char **argv, int first, void (*usage)(void),
                       herd_train_config *algo_cfg)
{
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            exit(0);
        }
        if (strncmp(a, "--", 2))
            die_usage(cmd, "unexpected argument '%s'", a);
        const char *name = a + 2, *val = NULL;
        char buf[64];
        const char *eq = strchr(name, '=');
        if (eq) {
            snprintf(buf, sizeof buf, "%.*s", (int)(eq - name), name);
            name = buf, val = eq + 1;
        }
        const opt *o = opts;
        while (o->name && strcmp(o->name, name))
            o++;
        if (!o->name && algo_cfg) {
            i = algo_flag(cmd, algo_cfg, name, val, i, argc, argv);
            continue;
        }
        if (!o->name)
            die_usage(cmd, "unknown flag '%s'", a);
        if (o->kind == OPT_FLAG) {
            if (val)
                die_usage(cmd, "flag '%s' takes no value", a);
            *(bool *)o->dest = true;
            continue;
        }
        if (!val) {
            if (i + 1 >= argc)
                die_usage(cmd, "flag '%s' needs a value", a);
            val = argv[++i];
        }
        double d;
        size_t z;
        switch (o->kind) {
        case OPT_SIZE:
        case OPT_U64:
            if (herd__cli_parse_size(val, &z)) {
                fprintf(stderr, "herd: --%s: expected a non-negative integer, got '%s'\n", o->name, val);
                exit(2);
            }
            if (o->kind == OPT_SIZE)
                *(size_t *)o->dest = z;
            else
                *(uint64_t *)o->dest = z;
            break;
        case OPT_FLOAT:
        case OPT_DOUBLE:
            if (herd__cli_parse_double(val, &d)) {
                fprintf(stderr, "herd: --%s: expected a number, got '%s'\n", o->name, val);
                exit(2);
            }
            if (o->kind == OPT_FLOAT)
                *(float *)o->dest = (float)d;
            else
                *(double *)o->dest = d;
            break;
        case OPT_STR:
            *(const char **)o->dest = val;
            break;
        case OPT_SCHED:
            if (herd_schedule_parse(val, (herd_schedule *)o->dest)) {
                fprintf(stderr, "herd: --%s: expected const, step or cosine, got '%s'\n", o->name, val);
                exit(2);
            }
            break;
        case OPT_SLOW: {
            herd_train_config *cfg = o->dest;
            const char *colon = strchr(val, ':');
            char rank[32];
            if (!colon || (size_t)(colon - val) >= sizeof rank || cfg->nslow >= HERD_MAX_SLOW) {
                fprintf(stderr, "herd: --slow: expected RANK:FACTOR (e.g. 3:10), at most %d times, got '%s'\n",
                        HERD_MAX_SLOW, val);
                exit(2);
            }
            snprintf(rank, sizeof rank, "%.*s", (int)(colon - val), val);
            herd_slow *s = &cfg->slow[cfg->nslow];
            if (herd__cli_parse_size(rank, &s->rank) || herd__cli_parse_double(colon + 1, &s->factor)) {
                fprintf(stderr, "herd: --slow: expected RANK:FACTOR (e.g. 3:10), got '%s'\n", val);
                exit(2);
            }
            cfg->nslow++;
            break;
        }
        case OPT_FAIL: {
            herd_train_config *cfg = o->dest;
            const char *at = strchr(val, '@'), *colon = at ? strchr(at, ':') : NULL;
            char rank[32], step[32];
            herd_fail *f = &cfg->fail[cfg->nfail];
            size_t step_len = at ? (colon ? (size_t)(colon - at - 1) : strlen(at + 1)) : 0;
            f->mode = HERD_FAIL_DEFAULT;
            if (!at || (size_t)(at - val) >= sizeof rank || step_len >= sizeof step || cfg->nfail >= HERD_MAX_FAIL ||
                (snprintf(rank, sizeof rank, "%.*s", (int)(at - val), val), herd__cli_parse_size(rank, &f->rank)) ||
                (snprintf(step, sizeof step, "%.*s", (int)step_len, at + 1), herd__cli_parse_size(step, &f->step)) ||
                (colon && herd_fail_mode_parse(colon + 1, &f->mode))) {
                fprintf(stderr,
                        "herd: --fail: expected RANK@STEP[:MODE] (e.g. 2@100 or 2@100:kill; MODE stop, exit0, exit1, "
                        "abort or kill), at most %d times, got '%s'\n",
                        HERD_MAX_FAIL, val);
                exit(2);
            }
            cfg->nfail++;
            break;
        }
        case OPT_INJECT: {
            herd_train_config *cfg = o->dest;
            if (cfg->ninject_nan >= HERD_MAX_INJECT || parse_rank_at_step(val, &cfg->inject_nan[cfg->ninject_nan].rank,
                                                                          &cfg->inject_nan[cfg->ninject_nan].step)) {
                fprintf(stderr, "herd: --%s: expected RANK@STEP (e.g. 1@20), at most %d times, got '%s'\n", o->name,
                        HERD_MAX_INJECT, val);
                exit(2);
            }
            cfg->ninject_nan++;
            break;
        }
        case OPT_FLAG:
            break;
        }
    }
}

/* ---- herd train ------------------------------------------------------ */

static herd_train_config tcfg;
static bool t_json, t_no_progress, t_nesterov;

static const opt train_opts[] = {
    {"data", OPT_STR, &tcfg.data, "data: a directory of IDX or CIFAR files, or synthetic:CxHxW:K (default $HERD_DATA or /usr/share/datasets/fashion-mnist)"},
    {"model", OPT_STR, &tcfg.model, "linear, mlp, lenet, cnn or resnet20 (default lenet)"},
    {"algo", OPT_STR, &tcfg.algo, "synchronization algorithm (default sgd; see 'herd algos')"},
    {"workers", OPT_SIZE, &tcfg.workers, "number of workers (default 1; on the mpi engine, the ranks)"},
    {"engine", OPT_STR, &tcfg.engine, "threads or mpi (default: mpi when started by mpirun, else threads)"},
    {"epochs", OPT_SIZE, &tcfg.epochs, "passes over the training set (default 5)"},
    {"batch", OPT_SIZE, &tcfg.batch, "batch size per worker (default 64)"},
    {"lr", OPT_FLOAT, &tcfg.optim.lr, "learning rate (default 0.05)"},
    {"momentum", OPT_FLOAT, &tcfg.optim.momentum, "momentum (default 0.9)"},
    {"nesterov", OPT_FLAG, &t_nesterov, "Nesterov momentum"},
    {"weight-decay", OPT_FLOAT, &tcfg.optim.weight_decay, "L2 weight decay (default 5e-4)"},
    {"schedule", OPT_SCHED, &tcfg.optim.schedule, "learning-rate schedule: const, step, cosine (default cosine)"},
    {"warmup", OPT_DOUBLE, &tcfg.optim.warmup_epochs, "linear warm-up epochs (default 0)"},
    {"step-epochs", OPT_DOUBLE, &tcfg.optim.step_epochs, "step schedule: epochs between decays (default 30)"},
    {"step-gamma", OPT_FLOAT, &tcfg.optim.step_gamma, "step schedule: decay factor (default 0.1)"},
    {"seed", OPT_U64, &tcfg.seed, "random seed (default 1)"},
    {"threads", OPT_SIZE, &tcfg.threads, "compute threads per worker (default 1)"},
    {"slow", OPT_SLOW, &tcfg, "make worker RANK's compute FACTOR times slower (repeatable)"},
    {"log", OPT_STR, &tcfg.log_path, "append JSON Lines records (per epoch/eval/event) to FILE"},
    {"json", OPT_FLAG, &t_json, "print a JSON summary as the last line of stdout"},
    {"no-progress", OPT_FLAG, &t_no_progress, "no progress bar"},
    {"quiet", OPT_FLAG, &tcfg.quiet, "print nothing on stderr but errors"},
    {"train-limit", OPT_SIZE, &tcfg.train_limit, "use only the first N training examples"},
    {"test-limit", OPT_SIZE, &tcfg.test_limit, "use only the first N test examples"},
    {"eval-every", OPT_SIZE, &tcfg.eval_every, "evaluate every N epochs (default 1)"},
    {"max-steps", OPT_SIZE, &tcfg.max_steps, "stop after N steps per worker"},
    {"timeout", OPT_DOUBLE, &tcfg.comm_timeout_s, "seconds a worker may wait for another before failing (default 60)"},
    {"fail", OPT_FAIL, &tcfg, "RANK@STEP[:MODE]: worker RANK fails on purpose at step STEP (repeatable); MODE: threads engine stop (its thread ends; the default), mpi engine exit0, exit1 (the default), abort or kill (SIGKILL): the process dies"},
    {"skip-nonfinite", OPT_FLAG, &tcfg.skip_nonfinite, "a NaN/Inf loss or gradient skips the step's update instead of stopping the run (synchronous: on every worker; asynchronous: that gradient is dropped); the run stops anyway after 10 skipped steps in a row"},
    {"inject-nan", OPT_INJECT, &tcfg, "for testing: a NaN goes into worker RANK's gradient at its step STEP (repeatable)"},
    {"checkpoint", OPT_STR, &tcfg.checkpoint_dir, "write checkpoints into directory S (threads engine; every algorithm but osgp)"},
    {"checkpoint-every", OPT_SIZE, &tcfg.checkpoint_every, "steps between checkpoints (default: one per epoch; the last step always)"},
    {"keep", OPT_SIZE, &tcfg.checkpoint_keep, "keep the newest N checkpoints (default 3)"},
    {"resume", OPT_FLAG, &tcfg.resume, "continue from the newest valid checkpoint of --checkpoint DIR"},
    {NULL, 0, NULL, NULL},
};

_Static_assert(HERD_NONFINITE_MAX_SKIPS == 10, "--skip-nonfinite's help says 10");

/* Each algorithm's options, once per table (a family shares one). */
static void print_algo_opts(void)
{
    for (size_t i = 0; herd_algos[i]; i++) {
        const herd_opt *t = herd_algos[i]->opts;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = herd_algos[j]->opts == t;
        if (!t || !t->name || seen)
            continue;
        fprintf(stderr, "\noptions of --algo ");
        for (size_t j = i, k = 0; herd_algos[j]; j++)
            if (herd_algos[j]->opts == t)
                fprintf(stderr, "%s%s", k++ ? ", " : "", herd_algos[j]->name);
        fprintf(stderr, ":\n");
        herd_opt_print(t, stderr);
    }
}

static void train_usage(void)
{
    fprintf(stderr, "usage: herd train [flags]\n\nTrains a model data-parallel and prints its test accuracy.\n\n");
    print_opts(train_opts);
    print_algo_opts();
}

static int cmd_train(int argc, char **argv)
{
    /* defaults again: a process may run several commands (the CLI fuzzer),
     * and a value left from the last one may point into its freed argv */
    herd_train_config_defaults(&tcfg);
    t_json = t_no_progress = t_nesterov = false;
    parse_opts("train", train_opts, argc, argv, 2, train_usage, &tcfg);
    tcfg.optim.nesterov = t_nesterov;
    tcfg.progress = !t_no_progress;
    /* the algorithm's options against its table (an option of another algorithm is a usage error) */
    const herd_algo_ops *ops = herd_algo_find(tcfg.algo);
    if (ops) {
        void *o = calloc(1, ops->opts_size ? ops->opts_size : 1);
        herd_err oerr = {0};
        if (!o || herd_algo_opts_parse(ops, tcfg.algo_args, tcfg.nalgo_args, o, &oerr) < 0)
            die_usage("train", "%s", o ? oerr.msg : "out of memory");
        free(o);
    }
    if (tcfg.eval_every == 0) {
        fprintf(stderr, "herd: --eval-every must be at least 1\n");
        return 2;
    }
    herd_train_result res;
    herd_err err = {0};
    herd_status st = herd_train(&tcfg, &res, &err);
    if (st < 0) {
        fprintf(stderr, "herd: %s\n", err.msg[0] ? err.msg : herd_strerror(st));
        /* the other ranks may be waiting for this one, or (MPI_Finalize
         * being collective) this one for them: end them all now */
        herd_comm_abort(1);
    }
    herd_comm_shutdown();
    if (st < 0)
        return 1;
    if (res.rank != 0)
        return 0;
    if (!tcfg.quiet) {
        char kept[64] = "";
        if (strcmp(res.eval_model, "worker0"))
            snprintf(kept, sizeof kept, " (%s model; worker 0: %.4f)", res.eval_model, res.worker0_acc);
        fprintf(stderr, "%s on %zu worker(s): test accuracy %.4f%s, loss %.4f, %.1f s, %.0f img/s", res.algo,
                res.workers, res.test_acc, kept, res.test_loss, res.wall_s, res.train_img_per_s);
        for (size_t i = 0; i < res.nlost; i++)
            fprintf(stderr, "%s%zu", i ? ", " : "; lost worker(s) ", res.lost[i]);
        if (tcfg.skip_nonfinite)
            fprintf(stderr, "; %zu step(s) skipped on non-finite values", res.skipped_steps);
        fputc('\n', stderr);
    }
    if (t_json) {
        herd_train_result_json(&res, stdout);
        fputc('\n', stdout);
    }
    return 0;
}

/* ---- herd bench ------------------------------------------------------ */

static const char *b_model = "lenet", *b_shape = "1x28x28:10";
static size_t b_batch = 64, b_steps = 200, b_warmup = 20, b_threads = 1, b_size = 1024, b_reps = 10;
static bool b_json;

static const opt bench_train_opts[] = {
    {"model", OPT_STR, &b_model, "model (default lenet)"},
    {"shape", OPT_STR, &b_shape, "input shape and classes CxHxW:K (default 1x28x28:10)"},
    {"batch", OPT_SIZE, &b_batch, "batch size (default 64)"},
    {"steps", OPT_SIZE, &b_steps, "timed steps (default 200)"},
    {"warmup", OPT_SIZE, &b_warmup, "untimed warm-up steps (default 20)"},
    {"threads", OPT_SIZE, &b_threads, "compute threads (default 1)"},
    {"json", OPT_FLAG, &b_json, "print a JSON line"},
    {NULL, 0, NULL, NULL},
};

static const opt bench_gemm_opts[] = {
    {"size", OPT_SIZE, &b_size, "square matrix size (default 1024)"},
    {"reps", OPT_SIZE, &b_reps, "timed repetitions (default 10)"},
    {"threads", OPT_SIZE, &b_threads, "compute threads (default 1)"},
    {"json", OPT_FLAG, &b_json, "print a JSON line"},
    {NULL, 0, NULL, NULL},
};

static const herd_bench_allreduce_config bar_defaults = {
    .workers = 2, .min_bytes = 4096, .max_bytes = 64u << 20, .warmup = 2, .iters = 10, .timeout_s = 60};
static herd_bench_allreduce_config bar;
static const char *bar_dtype = "fp32", *bar_impl = "ring";

static const opt bench_allreduce_opts[] = {
    {"workers", OPT_SIZE, &bar.workers, "threads engine: number of workers (default 2)"},
    {"engine", OPT_STR, &bar.engine, "threads or mpi (default: mpi when started by mpirun)"},
    {"min-bytes", OPT_SIZE, &bar.min_bytes, "smallest message (default 4096)"},
    {"max-bytes", OPT_SIZE, &bar.max_bytes, "largest message (default 64 MiB)"},
    {"warmup", OPT_SIZE, &bar.warmup, "untimed iterations per size (default 2)"},
    {"iters", OPT_SIZE, &bar.iters, "timed iterations per size (default 10)"},
    {"comm-dtype", OPT_STR, &bar_dtype, "fp32, fp16 or bf16 on the wire"},
    {"allreduce", OPT_STR, &bar_impl, "ring (herd's), native (the engine's) or both (side by side, with their ratio)"},
    {"segment-bytes", OPT_SIZE, &bar.opts.segment_bytes, "ring pipeline segment (default 1 MiB)"},
    {"json", OPT_FLAG, &b_json, "print one JSON line per size"},
    {NULL, 0, NULL, NULL},
};

static void bench_usage(void)
{
    fprintf(stderr, "usage: herd bench train [flags]      training-step throughput of one worker\n"
                    "       herd bench gemm [flags]       single-precision GEMM rate\n"
                    "       herd bench allreduce [flags]  allreduce time, algbw, busbw (as nccl-tests)\n\ntrain flags:\n");
    print_opts(bench_train_opts);
    fprintf(stderr, "gemm flags:\n");
    print_opts(bench_gemm_opts);
    fprintf(stderr, "allreduce flags:\n");
    print_opts(bench_allreduce_opts);
}

/* Single-thread memcpy rate on a buffer of `bytes`, the threads engine's ceiling. */
static double memcpy_gbs(size_t bytes)
{
    char *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        free(a), free(b);
        return 0;
    }
    memset(a, 1, bytes), memset(b, 2, bytes);
    double t0 = herd__now();
    int reps = 10;
    for (int r = 0; r < reps; r++) {
        memcpy(r % 2 ? a : b, r % 2 ? b : a, bytes);
    }
    double dt = (herd__now() - t0) / reps;
    free(a), free(b);
    return (double)bytes / dt * 1e-9;
}

static int bench_allreduce(int argc, char **argv)
{
    bar = bar_defaults, bar_dtype = "fp32", bar_impl = "ring"; /* as in cmd_train */
    parse_opts("bench", bench_allreduce_opts, argc, argv, 3, bench_usage, NULL);
    static const char *const dtypes[] = {"fp32", "fp16", "bf16", NULL}, *const impls[] = {"ring", "native", "both", NULL};
    bar.opts.wire = (herd_dtype)pick("bench", "--comm-dtype", bar_dtype, dtypes); /* herd_dtype's order */
    int impl = pick("bench", "--allreduce", bar_impl, impls);
    bar.opts.impl = impl == 1 ? HERD_ALLREDUCE_NATIVE : HERD_ALLREDUCE_RING;
    bar.versus_native = impl == 2;
    herd_bench_row rows[HERD_BENCH_MAX_ROWS];
    size_t nrows = 0, world = 0;
    herd_err err = {0};
    herd_status st = herd_bench_allreduce(&bar, rows, &nrows, &world, &err);
    herd_comm_shutdown();
    if (st < 0) {
        fprintf(stderr, "herd: %s\n", err.msg[0] ? err.msg : herd_strerror(st));
        return 1;
    }
    if (nrows == 0)
        return 0; /* not rank 0 */
    double mgbs = memcpy_gbs(bar.max_bytes);
    printf("# allreduce (%s, %s wire), %zu ranks, median of %zu; memcpy %.2f GB/s on %zu bytes\n", bar_impl, bar_dtype,
           world, bar.iters, mgbs, bar.max_bytes);
    if (bar.versus_native)
        printf("# %12s %12s %12s %12s %12s %12s %10s %8s\n", "size(B)", "count", "ring(us)", "ring_busbw",
               "native(us)", "native_busbw", "ring/nat", "#wrong");
    else
        printf("# %12s %12s %12s %12s %12s %8s\n", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
               "#wrong");
    for (size_t i = 0; i < nrows; i++) {
        const herd_bench_row *r = &rows[i];
        if (bar.versus_native)
            printf("  %12zu %12zu %12.1f %12.3f %12.1f %12.3f %9.2fx %8zu\n", r->bytes, r->bytes / sizeof(float),
                   r->time_us, r->busbw_gbs, r->native_time_us, r->native_busbw_gbs,
                   r->time_us > 0 ? r->native_time_us / r->time_us : 0, r->wrong);
        else
            printf("  %12zu %12zu %12.1f %12.3f %12.3f %8zu\n", r->bytes, r->bytes / sizeof(float), r->time_us,
                   r->algbw_gbs, r->busbw_gbs, r->wrong);
        if (b_json)
            printf("{\"impl\":\"%s\",\"wire\":\"%s\",\"ranks\":%zu,\"bytes\":%zu,\"time_us\":%.3f,"
                   "\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,\"native_time_us\":%.3f,\"native_busbw_gbs\":%.4f,"
                   "\"wrong\":%zu,\"memcpy_gbs\":%.4f}\n",
                   bar_impl, bar_dtype, world, r->bytes, r->time_us, r->algbw_gbs, r->busbw_gbs, r->native_time_us,
                   r->native_busbw_gbs, r->wrong, mgbs);
    }
    size_t wrong = 0;
    for (size_t i = 0; i < nrows; i++)
        wrong += rows[i].wrong;
    return wrong ? 1 : 0;
}

static int bench_train(int argc, char **argv)
{
    parse_opts("bench", bench_train_opts, argc, argv, 3, bench_usage, NULL);
    herd_err err = {0};
    herd_dataset d = {0};
    herd_model *m = NULL;
    if (b_batch == 0 || b_steps == 0 || b_threads == 0) {
        fprintf(stderr, "herd: bench train: --batch, --steps and --threads must be at least 1\n");
        return 2;
    }
    herd_status st = herd_data_synthetic(b_shape, 4 * b_batch, 1, &d, &err);
    if (st == HERD_OK)
        st = herd_model_create(b_model, d.c, d.h, d.w, d.nclasses, b_batch, 1, &m, &err);
    if (st < 0) {
        fprintf(stderr, "herd: %s\n", err.msg);
        herd_dataset_free(&d);
        return 1;
    }
    herd_nn_set_threads((int)b_threads);
    herd_optim_config oc = {.lr = 0.01f, .momentum = 0.9f};
    herd_optim o;
    int32_t *y = malloc(d.n * sizeof *y);
    if (!y || herd_optim_init(&o, &oc, herd_model_nparams(m), &err) < 0) {
        fprintf(stderr, "herd: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < d.n; i++)
        y[i] = d.y[i];
    size_t dim = herd_dataset_dim(&d);
    double t0 = 0;
    for (size_t s = 0; s < b_warmup + b_steps; s++) {
        if (s == b_warmup)
            t0 = herd__now();
        size_t at = (s % 4) * b_batch;
        herd_model_forward(m, d.x + at * dim, b_batch, true);
        herd_model_loss(m, y + at, b_batch, NULL);
        herd_model_backward(m, b_batch, NULL, NULL);
        herd_optim_step(&o, herd_model_params(m), herd_model_grads(m), 0, herd_model_nparams(m), oc.lr);
    }
    double dt = herd__now() - t0;
    double ips = (double)(b_steps * b_batch) / dt;
    double gflops = herd_model_train_flops(m) * ips * 1e-9;
    fprintf(stderr, "%s batch %zu: %.0f img/s, %.3f ms/step, %.1f GFLOP/s\n", b_model, b_batch, ips,
            1e3 * dt / (double)b_steps, gflops);
    if (b_json)
        printf("{\"impl\":\"herd\",\"model\":\"%s\",\"batch\":%zu,\"steps\":%zu,\"threads\":%zu,"
               "\"img_per_s\":%.3f,\"step_ms\":%.6f,\"gflops\":%.3f,\"train_mflop_per_img\":%.4f,"
               "\"fwd_mflop_per_img\":%.6f,\"nparams\":%zu}\n",
               b_model, b_batch, b_steps, b_threads, ips, 1e3 * dt / (double)b_steps, gflops,
               herd_model_train_flops(m) * 1e-6, herd_model_forward_flops(m) * 1e-6, herd_model_nparams(m));
    free(y);
    herd_optim_free(&o);
    herd_model_free(m);
    herd_dataset_free(&d);
    return 0;
}

static int bench_gemm(int argc, char **argv)
{
    parse_opts("bench", bench_gemm_opts, argc, argv, 3, bench_usage, NULL);
    size_t n = b_size;
    if (n == 0 || n > 16384 || b_reps == 0) {
        fprintf(stderr, "herd: bench gemm: --size must be in [1, 16384] and --reps at least 1\n");
        return 2;
    }
    herd_nn_set_threads((int)b_threads);
    float *a = malloc(n * n * sizeof(float)), *b = malloc(n * n * sizeof(float)), *c = malloc(n * n * sizeof(float));
    if (!a || !b || !c) {
        fprintf(stderr, "herd: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n * n; i++)
        a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
    herd_nn_sgemm(n, n, n, a, b, c); /* JIT and caches warm */
    double t0 = herd__now();
    for (size_t r = 0; r < b_reps; r++)
        herd_nn_sgemm(n, n, n, a, b, c);
    double dt = (herd__now() - t0) / (double)b_reps;
    double gflops = 2.0 * (double)n * (double)n * (double)n / dt * 1e-9;
    fprintf(stderr, "sgemm %zux%zux%zu: %.3f ms, %.1f GFLOP/s\n", n, n, n, dt * 1e3, gflops);
    if (b_json)
        printf("{\"impl\":\"herd\",\"op\":\"sgemm\",\"size\":%zu,\"threads\":%zu,\"ms\":%.6f,\"gflops\":%.3f}\n", n,
               b_threads, dt * 1e3, gflops);
    free(a);
    free(b);
    free(c);
    return 0;
}

static int cmd_bench(int argc, char **argv)
{
    if (argc < 3 || !strcmp(argv[2], "-h") || !strcmp(argv[2], "--help")) {
        bench_usage();
        return argc < 3 ? 2 : 0;
    }
    if (!strcmp(argv[2], "train"))
        return bench_train(argc, argv);
    if (!strcmp(argv[2], "gemm"))
        return bench_gemm(argc, argv);
    if (!strcmp(argv[2], "allreduce"))
        return bench_allreduce(argc, argv);
    die_usage("bench", "unknown benchmark '%s'", argv[2]);
}

static int cmd_algos(void)
{
    for (size_t i = 0; herd_algos[i]; i++)
        printf("%-16s %s\n", herd_algos[i]->name, herd_algos[i]->summary);
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "herd %s — data-parallel deep-learning training\n\n"
            "usage: herd <command> [flags]\n\n"
            "commands:\n"
            "  train     train a model (herd train --help)\n"
            "  bench     single-worker benchmarks (herd bench --help)\n"
            "  sim       run train or bench on a simulated cluster (herd sim --help)\n"
            "  compare   a table of algorithms on one engine or platform (herd compare --help)\n"
            "  algos     list the synchronization algorithms\n"
            "  version   print the version\n",
            HERD_VERSION);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage();
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "train"))
        return cmd_train(argc, argv);
    if (!strcmp(cmd, "bench"))
        return cmd_bench(argc, argv);
    if (!strcmp(cmd, "sim"))
        return herd__cli_sim(argc, argv);
    if (!strcmp(cmd, "compare"))
        return herd__cli_compare(argc, argv);
    if (!strcmp(cmd, "algos"))
        return cmd_algos();
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("herd %s\n", HERD_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage();
        return 0;
    }
    fprintf(stderr, "herd: unknown command '%s' (see 'herd --help')\n", cmd);
    return 2;
}
