/* herd — the command-line tool: one function per sub-command (train,
 * bench, algos, engines; sim and compare in their own files), dispatched
 * by main. Each command's flags are herd_opt rows (cli/flags.h) at offsets
 * into an options struct on its own stack: nothing outlives a command. The
 * only place in herd, with the rest of src/cli, that prints usage and
 * calls exit(). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "herd/herd_algo.h"
#include "herd/herd_ckpt.h"
#include "herd/herd_comm.h"
#include "herd/herd_data.h"
#include "herd/herd_engine.h"
#include "herd/herd_nn.h"
#include "herd/herd_opt.h"
#include "herd/herd_run.h"
#include "cli/compare.h"
#include "cli/eval.h"
#include "cli/model_cmd.h"
#include "cli/flags.h"
#include "cli/sim.h"
#include "core/clock.h"
#include "core/json.h"
#include "core/outpath.h"
#include "run/options.h"

#define HERD_VERSION "0.2.0"

/* ---- herd train ------------------------------------------------------ */

/* herd train's flags are the run's options (the rows of
 * herd__run_options) and the algorithms' (herd_algo_ops.opts), set by
 * name as herd_config_set sets them, plus the few below that only the
 * command has. */
enum { TRAIN_MAX_ROWS = 128 }; /* the run's option rows (asserted in option_flag) */

typedef struct train_cli {
    herd__train_config cfg; /* on the stack, its strings in argv: a usage error's exit() leaves nothing behind */
    bool json, no_progress, quiet, dry_run;
    bool json_asked; /* --json is among the arguments (known before they are parsed: usage errors print JSON too) */
    char ckpt_dir[4096]; /* --checkpoint FILE --resume: FILE's directory */
    /* each run option's value as typed (a bare flag: ""), for a second use's message */
    const char *given[TRAIN_MAX_ROWS];
    /* --config FILE: its text (the options point into it), the options it
     * set (given twice in it is refused; a flag overrides it), and how many
     * of the algorithm's options came from it */
    const char *config;
    char config_text[1 << 16], config_values[1 << 16]; /* the file; the values set from it */
    size_t config_values_len;
    bool in_file[TRAIN_MAX_ROWS];
    size_t file_algo_args;
} train_cli;

/* herd train's own flags, beside the run's options and the algorithms' */
static const herd_opt train_own_opts[] = {
    {.name = "json", .type = HERD_OPT_BOOL, .offset = offsetof(train_cli, json),
     .help = "print a JSON summary (every option included) as the last line of stdout"},
    {.name = "no-progress", .type = HERD_OPT_BOOL, .offset = offsetof(train_cli, no_progress), .help = "no progress bar"},
    {.name = "quiet", .type = HERD_OPT_BOOL, .offset = offsetof(train_cli, quiet),
     .help = "print nothing on stderr but errors and warnings"},
    {.name = "config", .type = HERD_OPT_STR, .offset = offsetof(train_cli, config), .flags = HERD_OPT_NONEMPTY,
     .meta = "FILE",
     .help = "options from FILE first: one a line, 'name = value' or 'name' as these flags without their --, or a "
             "JSON object (a --json summary's \"options\", a --log file's start record: the run again); the flags "
             "given here override it"},
    {.name = "dry-run", .type = HERD_OPT_BOOL, .offset = offsetof(train_cli, dry_run),
     .help = "check every option as the run would (alone, together, against the algorithm, engine and model) and "
             "exit 0: nothing is read or run (herd compare checks its specs so)"},
    {0},
};

/* Each algorithm's options, once per table (a family shares one). */
static void print_algo_opts(FILE *out)
{
    for (size_t i = 0; herd_algos[i]; i++) {
        const herd_opt *t = herd_algos[i]->opts;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = herd_algos[j]->opts == t;
        if (!t || !t->name || seen)
            continue;
        fprintf(out, "\noptions of --algo ");
        for (size_t j = i, k = 0; herd_algos[j]; j++)
            if (herd_algos[j]->opts == t)
                fprintf(out, "%s%s", k++ ? ", " : "", herd_algos[j]->name);
        fprintf(out, ":\n");
        herd_opt_print(t, out);
    }
}

static void train_usage(FILE *out)
{
    fprintf(out, "usage: herd train [flags]\n\nTrains a model data-parallel and prints its test accuracy.\n\n");
    herd_opt_print(herd__run_options, out);
    fprintf(out, "\nherd train itself:\n");
    herd_opt_print(train_own_opts, out);
    print_algo_opts(out);
}

/* A flag given twice (--lr 0.1 ... --lr 0.2, a herd compare spec's flag
 * and the same flag of --extra or of herd compare itself) would leave one
 * value silently overriding the other while a label shows the first: a
 * usage error naming both, unless the option is repeatable. */
static void given_once(train_cli *o, const herd_opt *row, const char *val)
{
    const char *before = NULL;
    if (row->flags & HERD_OPT_REPEAT)
        return;
    if (herd__run_option_find(row->name) == row) {
        size_t idx = (size_t)(row - herd__run_options);
        HERD_ASSERT(idx < TRAIN_MAX_ROWS);
        before = o->given[idx];
        o->given[idx] = val ? val : "";
    } else {
        for (size_t k = o->file_algo_args; k < o->cfg.nalgo_args && !before; k++)
            if (!strcmp(o->cfg.algo_args[k].name, row->name))
                before = o->cfg.algo_args[k].value ? o->cfg.algo_args[k].value : "";
    }
    if (before && !*before && !val)
        herd__usage_error_json(o->json_asked, NULL, "--%s is given twice", row->name);
    if (before)
        herd__usage_error_json(o->json_asked, NULL, "--%s is given twice ('%s', then '%s'): each flag takes one value",
                               row->name, before, val ? val : "");
}

/* One option of --config's file, as its flag would set it; given twice in
 * the file is refused as on the command line. */
static herd_status config_line(void *ctx, const char *name, const char *value, herd_err *err)
{
    train_cli *o = ctx;
    const herd_algo_ops *owner;
    const herd_opt *row = herd__run_option_find(name);
    if (row && (row->flags & HERD_OPT_LIBRARY))
        row = NULL;
    if (row && !(row->flags & HERD_OPT_REPEAT)) {
        size_t idx = (size_t)(row - herd__run_options);
        HERD_ASSERT(idx < TRAIN_MAX_ROWS);
        if (o->in_file[idx])
            return herd_err_set(err, HERD_EINVAL, "%s is given twice: each option takes one value", name);
        o->in_file[idx] = true;
    }
    if (!row && !(row = herd_algo_opt_find(name, &owner)))
        return herd_err_set(err, HERD_EINVAL, "unknown option '%s' (herd train --help lists them)", name);
    for (size_t k = 0; !herd__run_option_find(name) && k < o->cfg.nalgo_args; k++)
        if (!strcmp(o->cfg.algo_args[k].name, row->name))
            return herd_err_set(err, HERD_EINVAL, "%s is given twice: each option takes one value", name);
    /* the value kept for the run (a JSON file's are unescaped copies that do not last) */
    size_t len = value ? strlen(value) + 1 : 0;
    if (o->config_values_len + len > sizeof o->config_values)
        return herd_err_set(err, HERD_EINVAL, "more than %zu bytes of values", sizeof o->config_values);
    char *kept = value ? memcpy(o->config_values + o->config_values_len, value, len) : NULL;
    o->config_values_len += len;
    return herd__config_set_arg(&o->cfg, row->name, kept, err);
}

/* --config FILE (or --config=FILE), once, before the flags that override it. */
static void config_file(train_cli *o, int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 2; i < argc && strcmp(argv[i], "--"); i++) {
        const char *p = !strcmp(argv[i], "--config") ? (i + 1 < argc ? argv[i + 1] : NULL)
                        : !strncmp(argv[i], "--config=", 9) ? argv[i] + 9
                                                            : NULL;
        if (!p)
            continue; /* a missing value: the parser says so */
        if (path)
            herd__usage_error_json(o->json_asked, NULL, "--config is given twice ('%s', then '%s')", path, p);
        path = p;
    }
    if (!path || !*path)
        return;
    herd_err err = {0};
    if (herd__config_file_read(path, o->config_text, sizeof o->config_text, &err) < 0 ||
        herd__config_each(o->config_text, path, config_line, o, &err) < 0)
        herd__usage_error_json(o->json_asked, NULL, "%s", err.msg);
    o->file_algo_args = o->cfg.nalgo_args;
}

/* `--name [value]`: a run option or an algorithm's, set on o->cfg (its
 * form and bounds checked now; which algorithm takes it once --algo is
 * known: herd__config_validate). */
static int option_flag(void *ctx, const char *name, const char *val, int i, int argc, char **argv)
{
    train_cli *o = ctx;
    bool json = o->json_asked;
    const herd_algo_ops *owner;
    const herd_opt *row = herd__run_option_find(name);
    if (row && (row->flags & HERD_OPT_LIBRARY))
        row = NULL; /* set through the library, or by herd train's own flags */
    if (!row)
        row = herd_algo_opt_find(name, &owner);
    if (!row)
        herd__usage_error_json(json, "train", "unknown flag '--%s'", name);
    /* a switch's =VALUE (=false turns off one that is on by default) is the
     * option table's to take or refuse (herd_opt_parse) */
    if (!herd_opt_takes_value(row) && val && row->type != HERD_OPT_BOOL)
        herd__usage_error_json(json, "train", "flag '--%s' takes no value", name);
    if (herd_opt_takes_value(row) && !val) {
        if (i + 1 >= argc)
            herd__usage_error_json(json, "train", "flag '--%s' needs a value", name);
        val = argv[++i];
    }
    given_once(o, row, val);
    herd_err err = {0};
    if (herd__config_set_arg(&o->cfg, row->name, val, &err) < 0) /* the message names the flag and what it takes */
        herd__usage_error_json(json, NULL, "%s", err.msg);
    return i;
}

/* The result's lines: on stdout (herd train > out.txt keeps them), or on
 * stderr where --json has stdout (the JSON summary alone there). */
static void print_summary(const herd_train_result *res, const herd__train_config *cfg, bool json)
{
    FILE *out = json ? stderr : stdout;
    char kept[64] = "";
    if (strcmp(res->eval_model, "worker0"))
        snprintf(kept, sizeof kept, " (%s model; worker 0: %.4f)", res->eval_model, res->worker0_acc);
    fprintf(out, "%s on %zu worker(s): test accuracy %.4f%s, loss %.4f, %.1f s, %.0f img/s", res->algo, res->workers,
            res->test_acc, kept, res->test_loss, res->wall_s, res->train_img_per_s);
    for (size_t i = 0; i < res->nlost; i++)
        fprintf(out, "%s%zu", i ? ", " : "; lost worker(s) ", res->lost[i]);
    if (cfg->skip_nonfinite)
        fprintf(out, "; %zu step(s) skipped on non-finite values", res->skipped_steps);
    fputc('\n', out);
    /* asynchronous workers need not keep pace: the median worker, the slowest */
    if (res->workers > 1 && res->epoch_s_max > 0)
        fprintf(out, "time per epoch, by worker: median %.3g s, slowest %.3g s (worker %zu); steps %.0f median, %zu-%zu\n",
                res->epoch_s_median, res->epoch_s_max, res->slowest_worker, res->steps_median, res->steps_min,
                res->steps_max);
}

/* The one piece of mutable state outside a command's stack: a signal
 * handler has no context to reach. 0, or the signal that asked herd train
 * to stop (herd__train_config.stop points to it). */
static atomic_int stop_signal; /* lock-free on every target herd builds for: safe in a handler */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler stores to stop_signal");

/* SIGINT, SIGTERM: the first asks the run to stop after the step under way
 * (herd__train_config.stop); a second stops herd at once, as the signal
 * does by default. */
static void on_stop_signal(int sig)
{
    int saved = errno; /* the code the signal interrupted may be about to read it */
    if (atomic_load(&stop_signal)) {
        signal(sig, SIG_DFL);
        raise(sig);
        errno = saved;
        return;
    }
    atomic_store(&stop_signal, sig);
    static const char msg[] = "\nherd: stopping after this step (a second signal stops at once)\n";
    ssize_t n = write(2, msg, sizeof msg - 1); /* write(2): stdio is not for signal handlers */
    (void)n;
    errno = saved;
}

static void catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static const char *signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

/* --json on a failed run: the summary line still comes, with "status":"error"
 * and the message. */
static void print_error_json(const herd__train_config *cfg, herd_status st, const char *msg)
{
    char algo[128], model[128], m[1100];
    herd__json_quote(algo, sizeof algo, cfg->algo);
    herd__json_quote(model, sizeof model, cfg->model);
    herd__json_quote(m, sizeof m, msg);
    herd__json_printf(stdout, "{\"algo\":%s,\"status\":\"error\",\"model\":%s,\"workers\":%zu,\"code\":\"%s\",\"error\":%s}\n",
                      algo, model, cfg->workers, herd_err_name(st), m);
    fflush(stdout);
}

/* A launcher herd does not join: torchrun (WORLD_SIZE, RANK), or SLURM
 * starting several tasks without an MPI launch (a plain srun). Each
 * process would train alone, N copies with nothing said: refused (exit 2)
 * with the launch line that works, unless the engine herd picks is one
 * whose processes are the workers (mpi under mpirun or srun --mpi=pmix).
 * (OMP_NUM_THREADS, where --threads is not given, is herd_train's: it
 * chooses the threads.) */
static void foreign_launcher_refused(bool json)
{
    const herd_engine *e;
    if (herd_engine_pick(NULL, &e, NULL) == HERD_OK && (e->caps & HERD_ENGINE_PROCESS_PER_WORKER))
        return;
    size_t n = 0;
    const char *world = getenv("WORLD_SIZE"), *rank = getenv("RANK");
    if (world && herd__parse_size(world, &n) == 0 && n > 1)
        herd__usage_error_json(json, NULL,
                               "started by torchrun or a launcher like it (WORLD_SIZE=%zu, RANK=%s), which herd does "
                               "not join: each of the %zu processes would train alone. Launch with Open MPI: 'mpirun "
                               "-np %zu herd train ...' (on one host, one process trains as many: 'herd train "
                               "--workers %zu ...'; one process on purpose: unset WORLD_SIZE)",
                               n, rank ? rank : "unset", n, n, n);
    const char *tasks = getenv("SLURM_STEP_NUM_TASKS") ? getenv("SLURM_STEP_NUM_TASKS") : getenv("SLURM_NTASKS");
    if (tasks && herd__parse_size(tasks, &n) == 0 && n > 1)
        herd__usage_error_json(json, NULL,
                               "SLURM started %zu tasks here with no MPI launch: each would train alone. Launch with "
                               "'srun --mpi=pmix herd train ...' or 'mpirun herd train ...' inside the allocation "
                               "(one task: 'srun -n 1 herd train --workers N ...')",
                               n);
}

/* --checkpoint FILE (a checkpoint, not a directory): with --resume the run
 * goes on from it in its directory, where it must be the newest valid
 * checkpoint (a run resumed from an older one would write its checkpoints
 * among the newer ones and prune them); without --resume, refused: new
 * checkpoints go into a directory. */
static void checkpoint_file(train_cli *o)
{
    const char *path = o->cfg.checkpoint_dir;
    struct stat sb;
    if (!path || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return;
    if (!o->cfg.resume)
        herd__usage_error_json(o->json_asked, "train",
                               "--checkpoint %s is a file: a run writes its checkpoints into a directory (a file is "
                               "taken with --resume, to go on from it)",
                               path);
    const char *name = herd__path_split(path, o->ckpt_dir, sizeof o->ckpt_dir);
    herd_ckpt *ck = NULL;
    herd_err err = {0};
    if (herd_ckpt_latest(o->ckpt_dir, &ck, NULL, 0, NULL, &err) < 0)
        herd__usage_error_json(o->json_asked, "train", "--checkpoint %s --resume: %s", path, err.msg);
    const char *latest = herd_ckpt_label(ck);
    bool newest = !strcmp(herd__path_split(latest, NULL, 0), name);
    char seen[512];
    snprintf(seen, sizeof seen, "%s", latest);
    herd_ckpt_free(ck);
    if (!newest)
        herd__usage_error_json(o->json_asked, "train",
                               "--checkpoint %s --resume: it is not the newest valid checkpoint of %s (%s is): the "
                               "run would write its checkpoints among the newer ones; copy it into an empty directory "
                               "and resume there",
                               path, o->ckpt_dir, seen);
    o->cfg.checkpoint_dir = o->ckpt_dir;
}

static int cmd_train(int argc, char **argv)
{
    train_cli o = {0};
    herd__train_config *cfg = &o.cfg;
    herd__train_config_defaults(cfg); /* quiet, the library's default: the command speaks unless --quiet */
    herd__flags_defaults(train_own_opts, &o);
    for (int i = 2; i < argc && strcmp(argv[i], "--"); i++)
        o.json_asked = o.json_asked || !strcmp(argv[i], "--json");
    config_file(&o, argc, argv);
    herd__flag_cmd c = {.cmd = "train", .opts = train_own_opts, .obj = &o, .usage = train_usage,
                        .other = option_flag, .other_ctx = &o, .json = o.json_asked};
    int end = herd__flags_parse(&c, argc, argv, 2, false);
    if (end < argc) /* a "--": nothing follows herd train's flags */
        herd__usage_error_json(o.json_asked, "train", "unknown flag '%s'", argv[end]);
    cfg->progress = !o.no_progress;
    cfg->quiet = o.quiet;
    foreign_launcher_refused(o.json_asked); /* after the flags: --help still answers */
    checkpoint_file(&o);
    if (o.dry_run) { /* what the run refuses before it reads anything, refused alike */
        herd_err verr = {0};
        if (herd__config_validate(cfg, &verr) < 0)
            herd__usage_error_json(o.json, NULL, "%s", verr.msg);
        return 0;
    }
    herd_train_result res;
    herd_err err = {0};
    cfg->stop = &stop_signal;
    catch_stop_signals();
    herd_status st = herd__train(cfg, &res, &err);
    if (st < 0) {
        /* every rank refuses a configuration alike: rank 0 says it */
        if (!res.refused || (res.rank == 0 && herd__launch_rank() == 0))
            fprintf(stderr, "herd: %s\n", err.msg[0] ? err.msg : herd_strerror(st));
        if (o.json && res.rank == 0 && (!res.refused || herd__launch_rank() == 0))
            print_error_json(cfg, st, err.msg[0] ? err.msg : herd_strerror(st));
        /* the other ranks may be waiting for this one, or (MPI_Finalize
         * being collective) this one for them: end them all now (the
         * SIGTERM mpirun sends them then ends them, with no "stopping" line) */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        herd_comm_abort(res.refused || st == HERD_EDATA ? 2 : 1);
    }
    herd_comm_shutdown();
    if (st < 0 && st == HERD_ESTOPPED)
        return 128 + atomic_load(&stop_signal);
    if (st < 0) /* a configuration refused is a usage error; so is data that is not the checkpoint's */
        return res.refused || st == HERD_EDATA ? 2 : 1;
    int rc = res.stop_signal ? 128 + res.stop_signal : 0;
    if (res.rank == 0 && res.stop_signal) { /* one line, whatever --quiet says: the run did not end */
        fprintf(stderr, "herd: stopped by %s at step %zu", signal_name(res.stop_signal), res.stop_step);
        if (res.stop_checkpoint)
            fprintf(stderr, "; checkpoint of that step in %s (--resume goes on from it)", cfg->checkpoint_dir);
        fputc('\n', stderr);
    } else if (res.rank == 0 && !cfg->quiet) {
        print_summary(&res, cfg, o.json);
    }
    if (res.rank == 0 && o.json &&
        (herd_train_result_json(&res, stdout) < 0 || fputc('\n', stdout) == EOF || fflush(stdout) != 0)) {
        fprintf(stderr, "herd: cannot write the summary to stdout: %s\n", strerror(errno));
        rc = 1;
    }
    herd_train_result_free(&res); /* its options, its final model */
    return rc;
}

/* ---- herd bench ------------------------------------------------------ */

typedef struct bench_cli {
    const char *model, *shape;
    size_t batch, steps, warmup, threads, size, reps;
    bool json, adapt;
    herd_bench_allreduce_config ar;
    int dtype, impl; /* --comm-dtype (herd_dtype's order), --allreduce (bench_impls) */
} bench_cli;

static const char *const bench_dtypes[] = {"fp32", "fp16", "bf16", NULL}; /* herd_dtype's order */
static const char *const bench_impls[] = {"ring", "native", "both", NULL};
enum { BENCH_RING, BENCH_NATIVE, BENCH_BOTH };

#define BENCH_AT(f) offsetof(bench_cli, f)
#define B HERD_OPT_BOUNDED

static const herd_opt bench_train_opts[] = {
    {.name = "model", .type = HERD_OPT_STR, .offset = BENCH_AT(model), .def = "lenet", .flags = HERD_OPT_NONEMPTY,
     .meta = "S", .help = "model"},
    {.name = "shape", .type = HERD_OPT_STR, .offset = BENCH_AT(shape), .def = "1x28x28:10", .flags = HERD_OPT_NONEMPTY,
     .meta = "S", .help = "input shape and classes CxHxW:K"},
    {.name = "batch", .type = HERD_OPT_SIZE, .offset = BENCH_AT(batch), .def = "64", .flags = B, .min = 1,
     .max = 65536, .help = "batch size"},
    {.name = "steps", .type = HERD_OPT_SIZE, .offset = BENCH_AT(steps), .def = "200", .flags = B, .min = 1,
     .max = 1000000, .help = "timed steps"},
    {.name = "warmup", .type = HERD_OPT_SIZE, .offset = BENCH_AT(warmup), .def = "20", .flags = B, .min = 0,
     .max = 1000000, .help = "untimed warm-up steps"},
    {.name = "threads", .type = HERD_OPT_SIZE, .offset = BENCH_AT(threads), .def = "1", .flags = B, .min = 1,
     .max = 256, .help = "compute threads"},
    {.name = "adapt-threads", .type = HERD_OPT_BOOL, .offset = BENCH_AT(adapt),
     .help = "run at --threads or at 1, whichever the steps time faster (checked now and then)"},
    {.name = "json", .type = HERD_OPT_BOOL, .offset = BENCH_AT(json), .help = "print a JSON line"},
    {0},
};

static const herd_opt bench_gemm_opts[] = {
    {.name = "size", .type = HERD_OPT_SIZE, .offset = BENCH_AT(size), .def = "1024", .flags = B, .min = 1,
     .max = 16384, .help = "square matrix size"},
    {.name = "reps", .type = HERD_OPT_SIZE, .offset = BENCH_AT(reps), .def = "10", .flags = B, .min = 1,
     .max = 1000000, .help = "timed repetitions"},
    {.name = "threads", .type = HERD_OPT_SIZE, .offset = BENCH_AT(threads), .def = "1", .flags = B, .min = 1,
     .max = 256, .help = "compute threads"},
    {.name = "json", .type = HERD_OPT_BOOL, .offset = BENCH_AT(json), .help = "print a JSON line"},
    {0},
};

static const herd_opt bench_allreduce_opts[] = {
    {.name = "workers", .type = HERD_OPT_SIZE, .offset = BENCH_AT(ar.workers), .def = "2", .flags = B, .min = 1,
     .max = 4096, .help = "threads engine: number of workers"},
    {.name = "engine", .type = HERD_OPT_STR, .offset = BENCH_AT(ar.engine), .flags = HERD_OPT_NONEMPTY, .meta = "S",
     .help = "the engine (default: mpi when started by mpirun, else threads)"},
    {.name = "min-bytes", .type = HERD_OPT_SIZE, .offset = BENCH_AT(ar.min_bytes), .def = "4096", .flags = B,
     .min = 4, .max = 4294967296.0, .help = "smallest message, at most --max-bytes"},
    {.name = "max-bytes", .type = HERD_OPT_SIZE, .offset = BENCH_AT(ar.max_bytes), .def = "67108864", .flags = B,
     .min = 4, .max = 4294967296.0, .help = "largest message"},
    {.name = "warmup", .type = HERD_OPT_SIZE, .offset = BENCH_AT(ar.warmup), .def = "2", .flags = B, .min = 0,
     .max = 1000000, .help = "untimed iterations per size"},
    {.name = "iters", .type = HERD_OPT_SIZE, .offset = BENCH_AT(ar.iters), .def = "10", .flags = B, .min = 1,
     .max = 1000000, .help = "timed iterations per size"},
    {.name = "comm-dtype", .type = HERD_OPT_CHOICE, .offset = BENCH_AT(dtype), .def = "fp32", .choices = bench_dtypes,
     .help = "the type on the wire"},
    {.name = "allreduce", .type = HERD_OPT_CHOICE, .offset = BENCH_AT(impl), .def = "ring", .choices = bench_impls,
     .help = "herd's ring, the engine's own, or both side by side with their ratio"},
    {.name = "segment-bytes", .type = HERD_OPT_SIZE, .offset = BENCH_AT(ar.opts.segment_bytes), .def = "0",
     .flags = B, .min = 0, .max = 1073741824, .help = "ring pipeline segment (0: 1 MiB)"},
    {.name = "json", .type = HERD_OPT_BOOL, .offset = BENCH_AT(json), .help = "print one JSON line per size"},
    {0},
};

#undef B
#undef BENCH_AT

static void bench_usage(FILE *out)
{
    fprintf(out, "usage: herd bench train [flags]      training-step throughput of one worker\n"
                    "       herd bench gemm [flags]       single-precision GEMM rate\n"
                    "       herd bench allreduce [flags]  allreduce time, algbw, busbw (as nccl-tests)\n\ntrain flags:\n");
    herd_opt_print(bench_train_opts, out);
    fprintf(out, "gemm flags:\n");
    herd_opt_print(bench_gemm_opts, out);
    fprintf(out, "allreduce flags:\n");
    herd_opt_print(bench_allreduce_opts, out);
}

/* Parses `herd bench WHAT` with its rows, opts, into o (their defaults first). */
static void bench_parse(bench_cli *o, const herd_opt *opts, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    herd__flags_defaults(opts, o);
    herd__flag_cmd c = {.cmd = "bench", .opts = opts, .obj = o, .usage = bench_usage};
    int end = herd__flags_parse(&c, argc, argv, 3, false);
    if (end < argc) /* a "--": nothing follows herd bench's flags */
        herd__usage_error("bench", "unknown flag '%s'", argv[end]);
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
    bench_cli o;
    bench_parse(&o, bench_allreduce_opts, argc, argv);
    if (o.ar.min_bytes > o.ar.max_bytes)
        herd__usage_error(NULL, "--min-bytes %zu is above --max-bytes %zu", o.ar.min_bytes, o.ar.max_bytes);
    o.ar.opts.wire = (herd_dtype)o.dtype;
    o.ar.opts.impl = o.impl == BENCH_NATIVE ? HERD_ALLREDUCE_NATIVE : HERD_ALLREDUCE_RING;
    o.ar.versus_native = o.impl == BENCH_BOTH;
    herd_err eerr = {0};
    const herd_engine *eng;
    if (herd_engine_pick(o.ar.engine, &eng, &eerr) < 0)
        herd__usage_error("bench", "%s", eerr.msg);
    herd_bench_row rows[HERD_BENCH_MAX_ROWS];
    size_t nrows = 0, world = 0;
    herd_err err = {0};
    herd_status st = herd_bench_allreduce(&o.ar, rows, &nrows, &world, &err);
    herd_comm_shutdown();
    if (st < 0) {
        fprintf(stderr, "herd: %s\n", err.msg[0] ? err.msg : herd_strerror(st));
        return 1;
    }
    if (nrows == 0)
        return 0; /* not rank 0 */
    double mgbs = memcpy_gbs(o.ar.max_bytes);
    const char *impl = bench_impls[o.impl], *dtype = bench_dtypes[o.dtype];
    printf("# allreduce (%s, %s wire), %zu ranks, median of %zu; memcpy %.2f GB/s on %zu bytes\n", impl, dtype,
           world, o.ar.iters, mgbs, o.ar.max_bytes);
    if (o.ar.versus_native)
        printf("# %12s %12s %12s %12s %12s %12s %10s %8s\n", "size(B)", "count", "ring(us)", "ring_busbw",
               "native(us)", "native_busbw", "ring/nat", "#wrong");
    else
        printf("# %12s %12s %12s %12s %12s %8s\n", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
               "#wrong");
    for (size_t i = 0; i < nrows; i++) {
        const herd_bench_row *r = &rows[i];
        if (o.ar.versus_native)
            printf("  %12zu %12zu %12.1f %12.3f %12.1f %12.3f %9.2fx %8zu\n", r->bytes, r->bytes / sizeof(float),
                   r->time_us, r->busbw_gbs, r->native_time_us, r->native_busbw_gbs,
                   r->time_us > 0 ? r->native_time_us / r->time_us : 0, r->wrong);
        else
            printf("  %12zu %12zu %12.1f %12.3f %12.3f %8zu\n", r->bytes, r->bytes / sizeof(float), r->time_us,
                   r->algbw_gbs, r->busbw_gbs, r->wrong);
        if (o.json)
            printf("{\"impl\":\"%s\",\"wire\":\"%s\",\"ranks\":%zu,\"bytes\":%zu,\"time_us\":%.3f,"
                   "\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,\"native_time_us\":%.3f,\"native_busbw_gbs\":%.4f,"
                   "\"wrong\":%zu,\"memcpy_gbs\":%.4f}\n",
                   impl, dtype, world, r->bytes, r->time_us, r->algbw_gbs, r->busbw_gbs, r->native_time_us,
                   r->native_busbw_gbs, r->wrong, mgbs);
    }
    size_t wrong = 0;
    for (size_t i = 0; i < nrows; i++)
        wrong += rows[i].wrong;
    return wrong ? 1 : 0;
}

/* The OpenMP wait policy this process runs under, for bench train's JSON:
 * OMP_WAIT_POLICY's value, else GOMP_SPINCOUNT's (herd's own choice unless
 * the user set it, herd_nn_wait_policy), else "default"; a value with any
 * character outside [A-Za-z0-9] reads "other". */
static const char *wait_policy(char *buf, size_t len)
{
    const char *v = getenv("OMP_WAIT_POLICY");
    const char *pre = "OMP_WAIT_POLICY=";
    if (!v || !*v)
        v = getenv("GOMP_SPINCOUNT"), pre = "GOMP_SPINCOUNT=";
    if (!v || !*v)
        return "default";
    if (strlen(v) > 24 || strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") != strlen(v))
        return "other";
    snprintf(buf, len, "%s%s", pre, v);
    return buf;
}

static int bench_train(int argc, char **argv)
{
    bench_cli bo;
    bench_parse(&bo, bench_train_opts, argc, argv);
    herd_err err = {0};
    herd_dataset d = {0};
    herd_model *m = NULL;
    herd_status st = herd_data_synthetic(bo.shape, 4 * bo.batch, 1, &d, &err);
    if (st == HERD_OK)
        st = herd_model_create(bo.model, d.c, d.h, d.w, d.nclasses, bo.batch, 1, &m, &err);
    if (st < 0) { /* a shape or a model refused is a usage error */
        fprintf(stderr, "herd: %s\n", err.msg);
        herd_dataset_free(&d);
        return st == HERD_ENOMEM ? 1 : 2;
    }
    herd_nn_set_threads((int)bo.threads);
    herd_optim_config oc = {.lr = 0.01f, .momentum = 0.9f};
    herd_optim o;
    if (herd_optim_init(&o, &oc, herd_model_nparams(m), &err) < 0) {
        fprintf(stderr, "herd: out of memory\n");
        return 1;
    }
    size_t dim = herd_dataset_dim(&d);
    double t0 = 0;
    herd_nn_adapt adapt;
    herd_nn_adapt_init(&adapt, (int)bo.threads, herd__now());
    for (size_t s = 0; s < bo.warmup + bo.steps; s++) {
        if (s == bo.warmup)
            t0 = herd__now();
        double ts = herd__now();
        size_t at = (s % 4) * bo.batch;
        herd_model_forward(m, d.x + at * dim, bo.batch, true);
        herd_model_loss(m, d.y + at, bo.batch, NULL);
        herd_model_backward(m, bo.batch, NULL, NULL);
        herd_optim_step(&o, herd_model_params(m), herd_model_grads(m), 0, herd_model_nparams(m), oc.lr);
        if (bo.adapt && s >= bo.warmup) {
            double now = herd__now();
            herd_nn_adapt_step(&adapt, now - ts, now);
        }
    }
    double dt = herd__now() - t0;
    double ips = (double)(bo.steps * bo.batch) / dt;
    double gflops = herd_model_train_flops(m) * ips * 1e-9;
    double full = adapt.steps ? (double)adapt.steps_full / (double)adapt.steps : 1.0;
    fprintf(stderr, "%s batch %zu: %.0f img/s, %.3f ms/step, %.1f GFLOP/s", bo.model, bo.batch, ips,
            1e3 * dt / (double)bo.steps, gflops);
    if (bo.adapt && bo.threads > 1)
        fprintf(stderr, " (%zu threads in %.0f%% of steps, %zu switches)", bo.threads, 100 * full, adapt.switches);
    fputc('\n', stderr);
    char policy[64];
    if (bo.json)
        printf("{\"impl\":\"herd\",\"model\":\"%s\",\"batch\":%zu,\"steps\":%zu,\"threads\":%zu,"
               "\"adapt_threads\":%s,\"threads_full_share\":%.4f,\"threads_switches\":%zu,\"wait_policy\":\"%s\","
               "\"img_per_s\":%.3f,\"step_ms\":%.6f,\"gflops\":%.3f,\"train_mflop_per_img\":%.4f,"
               "\"fwd_mflop_per_img\":%.6f,\"nparams\":%zu}\n",
               bo.model, bo.batch, bo.steps, bo.threads, bo.adapt ? "true" : "false", full, adapt.switches,
               wait_policy(policy, sizeof policy), ips, 1e3 * dt / (double)bo.steps, gflops,
               herd_model_train_flops(m) * 1e-6, herd_model_forward_flops(m) * 1e-6, herd_model_nparams(m));
    herd_optim_free(&o);
    herd_model_free(m);
    herd_dataset_free(&d);
    return 0;
}

static int bench_gemm(int argc, char **argv)
{
    bench_cli o;
    bench_parse(&o, bench_gemm_opts, argc, argv);
    size_t n = o.size;
    herd_nn_set_threads((int)o.threads);
    float *a = malloc(n * n * sizeof(float)), *b = malloc(n * n * sizeof(float)), *c = malloc(n * n * sizeof(float));
    if (!a || !b || !c) {
        fprintf(stderr, "herd: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n * n; i++)
        a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
    herd_nn_sgemm(n, n, n, a, b, c); /* JIT and caches warm */
    double t0 = herd__now();
    for (size_t r = 0; r < o.reps; r++)
        herd_nn_sgemm(n, n, n, a, b, c);
    double dt = (herd__now() - t0) / (double)o.reps;
    double gflops = 2.0 * (double)n * (double)n * (double)n / dt * 1e-9;
    fprintf(stderr, "sgemm %zux%zux%zu: %.3f ms, %.1f GFLOP/s\n", n, n, n, dt * 1e3, gflops);
    if (o.json)
        printf("{\"impl\":\"herd\",\"op\":\"sgemm\",\"size\":%zu,\"threads\":%zu,\"ms\":%.6f,\"gflops\":%.3f}\n", n,
               o.threads, dt * 1e3, gflops);
    free(a);
    free(b);
    free(c);
    return 0;
}

static int cmd_bench(int argc, char **argv)
{
    if (argc < 3 || !strcmp(argv[2], "-h") || !strcmp(argv[2], "--help")) {
        bench_usage(argc < 3 ? stderr : stdout);
        return argc < 3 ? 2 : 0;
    }
    if (!strcmp(argv[2], "train"))
        return bench_train(argc, argv);
    if (!strcmp(argv[2], "gemm"))
        return bench_gemm(argc, argv);
    if (!strcmp(argv[2], "allreduce"))
        return bench_allreduce(argc, argv);
    herd__usage_error("bench", "unknown benchmark '%s'", argv[2]);
}

static int cmd_algos(void)
{
    for (size_t i = 0; herd_algos[i]; i++)
        printf("%-16s %s\n", herd_algos[i]->name, herd_algos[i]->summary);
    return 0;
}

static int cmd_engines(void)
{
    static const struct {
        unsigned bit;
        const char *name, *means;
    } caps[] = {
        {HERD_ENGINE_WINDOWS, "windows", "one-sided windows: the asynchronous algorithms run on it"},
        {HERD_ENGINE_NATIVE_ALLREDUCE, "native-allreduce", "an allreduce of its own beside herd's ring (--allreduce)"},
        {HERD_ENGINE_SHARED_MEMORY, "shared-memory", "the workers are threads of one process sharing its memory"},
        {HERD_ENGINE_ANY_THREAD, "any-thread", "a worker's communication may run on a thread beside its compute"},
        {HERD_ENGINE_MANY_LOCAL, "many-local", "several workers in one process"},
        {HERD_ENGINE_CHECKPOINT, "checkpoint", "--checkpoint and --resume"},
        {HERD_ENGINE_LAUNCHER_SIZED, "launcher-sized", "the launcher sets the number of workers (mpirun -np)"},
        {HERD_ENGINE_PROCESS_PER_WORKER, "process-per-worker", "each worker a process: a failed one ends alone"},
        {HERD_ENGINE_VIRTUAL_CLOCK, "virtual-clock", "time is a simulator's, not this machine's"},
    };
    for (size_t i = 0; herd_engines[i]; i++) {
        printf("%-10s", herd_engines[i]->name);
        for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++)
            if (herd_engines[i]->caps & caps[k].bit)
                printf(" %s", caps[k].name);
        putchar('\n');
    }
    /* herd-sim's mpi engine, under SimGrid: launched by herd sim, not picked with --engine */
    printf("%-10s windows native-allreduce any-thread launcher-sized virtual-clock\n"
           "           (not an --engine: 'herd sim' runs the mpi engine's code on a simulated cluster)\n\n",
           "sim");
    for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++)
        printf("%-19s %s\n", caps[k].name, caps[k].means);
    return 0;
}

/* On stdout for --help, on stderr when no command was given (exit 2). */
static void usage(FILE *out)
{
    fprintf(out,
            "herd %s — data-parallel deep-learning training\n\n"
            "usage: herd <command> [flags]\n\n"
            "commands:\n"
            "  train     train a model (herd train --help)\n"
            "  bench     single-worker benchmarks (herd bench --help)\n"
            "  sim       run train or bench on a simulated cluster (herd sim --help)\n"
            "  compare   a table of algorithms on one engine or platform (herd compare --help)\n"
            "  eval      test accuracy and loss of a checkpoint's model (herd eval --help)\n"
            "  export    a checkpoint's model as safetensors, npy or PyTorch files (herd export --help)\n"
            "  model     a model's layers, shapes, parameters and FLOPs (herd model --help)\n"
            "  algos     list the synchronization algorithms\n"
            "  engines   list the engines and what each can do\n"
            "  version   print the version\n",
            HERD_VERSION);
}

/* What the command wrote on stdout, flushed: a failed write (a full disk, a
 * closed pipe) makes a command that succeeded fail, naming the error. */
static int flushed(int rc)
{
    errno = 0;
    if ((fflush(stdout) != 0 || ferror(stdout)) && rc == 0) { /* a failed command has said why */
        fprintf(stderr, "herd: cannot write to stdout: %s\n", strerror(errno ? errno : EIO));
        return 1;
    }
    return rc;
}

static int dispatch(int argc, char **argv);

/* A descriptor of 0-2 that the parent left closed is opened on /dev/null,
 * so that the first file herd opens (a log, a lock, a checkpoint) does not
 * take its number and receive what is written to stdout or stderr. */
static void std_fds_open(void)
{
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) /* 0..fd-1 are open: the lowest free number is fd */
            (void)open("/dev/null", fd ? O_WRONLY : O_RDONLY);
}

int main(int argc, char **argv)
{
    std_fds_open();
    /* OpenMP's idle threads spin briefly, then sleep, unless the user says
     * otherwise (herd_nn.h). Not where a simulator launched this process
     * (HERD_ENGINE_VIRTUAL_CLOCK), whose main() runs once per simulated rank
     * in one process: it inherits herd sim's environment. */
    const herd_engine *launcher = herd_engine_launcher();
    if (!launcher || !(launcher->caps & HERD_ENGINE_VIRTUAL_CLOCK))
        herd_nn_wait_policy(argv);
    return flushed(dispatch(argc, argv));
}

static int dispatch(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
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
    if (!strcmp(cmd, "eval"))
        return herd__cli_eval(argc, argv);
    if (!strcmp(cmd, "export"))
        return herd__cli_export(argc, argv, HERD_VERSION);
    if (!strcmp(cmd, "model"))
        return herd__cli_model(argc, argv);
    if (!strcmp(cmd, "algos"))
        return cmd_algos();
    if (!strcmp(cmd, "engines"))
        return cmd_engines();
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("herd %s\n", HERD_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "herd: unknown command '%s' (see 'herd --help')\n", cmd);
    return 2;
}
