/* herd compare — several algorithms on one engine (threads, or sim on one
 * platform), one after another, in one table: final accuracy, time to a
 * target accuracy, time per epoch, speedup over one sgd worker and bytes per
 * worker; the same as CSV, each configuration's curve as a data file, and
 * compare.json, what the comparison was and where its curves are. It draws
 * nothing: tools/herd-plot DIR draws the plots from these files with
 * gnuplot (accuracy and loss against time and epochs; with --scaling,
 * speedup against workers; the crossover map).
 *
 * This file is the command: its flags, the checks of every spec before any
 * run, and one run, `herd train ... --json --eval-at-start --log FILE` (or
 * `herd sim ... -- train ...`) of this same binary, whose curve comes from
 * its log's eval records, the first at epoch 0, time 0. compare_run.c runs
 * a comparison and writes its results; compare_sweep.c the crossover map
 * (--sweep, --models): the same comparison in each cell, model x value.
 * With --seeds N each configuration runs N times (seeds S, S+1, ...).
 * On the threads engine the runs share this machine's cores: compare their
 * times within one table only. On sim the times are simulated and
 * repeatable. */
#include "cli/compare.h"

#include "cli/flags.h"
#include "cli/spawn.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/inpath.h"
#include "core/outpath.h"

/* core/outpath.h: a link is followed, a FIFO written in place, a directory
 * or a device refused, a FIFO that no process reads refused rather than
 * waited on. */
FILE *herd__cmp_out_open(const char *path)
{
    herd_err err = {0};
    FILE *f;
    if (herd__outpath_fopen(path, "w", "herd compare: output file", &f, &err) < 0)
        fprintf(stderr, "herd: %s\n", err.msg);
    return f;
}

/* path emptied, or made empty where it is a new name (messages as
 * herd__cmp_out_open's). */
static void out_empty(const char *path)
{
    FILE *f = herd__cmp_out_open(path);
    if (f)
        fclose(f);
}

int herd__cmp_out_close(FILE *f, const char *path, int bad)
{
    if (!f)
        return -1;
    bad |= ferror(f);
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "herd: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

enum { MAX_SCALE = 16, MAX_TOKENS = 64, MAX_SEEDS = 100 };
/* --seed's bound: S + --seeds - 1 fits a uint64_t with room to spare, and a
 * double (a row's bound) holds it exactly */
#define MAX_SEED 4294967295.0

static const char *const cmp_engines[] = {"threads", "sim", NULL};

#define AT(f) offsetof(herd__cmp_opts, f)
#define B HERD_OPT_BOUNDED
#define NONEMPTY HERD_OPT_NONEMPTY

static const herd_opt cmp_opts_table[] = {
    {.name = "engine", .type = HERD_OPT_STR, .offset = AT(engine), .flags = NONEMPTY, .choices = cmp_engines,
     .meta = "E", .help = "the runs' engine (default threads; sim when --platform or --sweep is given)"},
    {.name = "platform", .type = HERD_OPT_STR, .offset = AT(platform), .flags = NONEMPTY, .meta = "NAME",
     .help = "sim: the platform (herd sim --list; default ib-100g)"},
    {.name = "link", .type = HERD_OPT_STR, .offset = AT(link), .flags = NONEMPTY, .meta = "BW:LAT",
     .help = "sim: each host's link (herd sim --link)"},
    {.name = "host-speed", .type = HERD_OPT_STR, .offset = AT(host_speed), .flags = NONEMPTY, .meta = "SPEED",
     .help = "sim: each host's speed (herd sim --host-speed)"},
    {.name = "slow", .type = HERD_OPT_CUSTOM, .offset = AT(slow), .flags = HERD_OPT_REPEAT, .meta = "RANK:FACTOR",
     .help = "worker RANK FACTOR times slower in every run but the baseline", .parse = herd__opt_list_parse,
     .format = herd__opt_list_format},
    {.name = "workers", .type = HERD_OPT_SIZE, .offset = AT(workers), .def = "8", .flags = B, .min = 1, .max = 4096,
     .help = "workers of every run"},
    {.name = "scaling", .type = HERD_OPT_STR, .offset = AT(scaling), .flags = NONEMPTY, .meta = "N,N,...",
     .help = "run every algorithm at each of these worker counts instead"},
    {.name = "epochs", .type = HERD_OPT_SIZE, .offset = AT(epochs), .def = "5", .flags = B, .min = 1, .max = 100000,
     .help = "epochs of every run"},
    {.name = "model", .type = HERD_OPT_STR, .offset = AT(model), .flags = NONEMPTY, .meta = "M",
     .help = "model (default lenet)"},
    {.name = "data", .type = HERD_OPT_STR, .offset = AT(data), .flags = NONEMPTY, .meta = "D",
     .help = "data (herd train --data)"},
    {.name = "extra", .type = HERD_OPT_STR, .offset = AT(extra), .flags = NONEMPTY, .meta = "'FLAGS'",
     .help = "more herd train flags for every run"},
    {.name = "target", .type = HERD_OPT_DOUBLE, .offset = AT(target), .def = "0.8", .flags = B | HERD_OPT_MIN_OPEN,
     .min = 0, .max = 1, .meta = "ACC", .help = "test accuracy for the time-to-target column"},
    {.name = "seeds", .type = HERD_OPT_SIZE, .offset = AT(seeds), .def = "1", .flags = B, .min = 1, .max = MAX_SEEDS,
     .help = "run every configuration N times, with seeds S, S+1, ...: the table gives each figure's mean and "
             "spread (max - min), the curves the mean with the lowest seed's and the highest's"},
    {.name = "seed", .type = HERD_OPT_U64, .offset = AT(seed), .def = "1", .flags = B, .min = 0, .max = MAX_SEED,
     .meta = "S", .help = "the first seed, S (herd train's --seed, not allowed in a spec or --extra)"},
    {.name = "eval-every-steps", .type = HERD_OPT_SIZE, .offset = AT(eval_every_steps), .def = "0", .flags = B,
     .min = 0, .max = 1e9,
     .help = "also evaluate every N global steps (herd train --eval-every-steps; 0: at epochs' ends only): curves "
             "with many points"},
    {.name = "out", .type = HERD_OPT_STR, .offset = AT(out), .def = "herd-compare", .flags = NONEMPTY, .meta = "DIR",
     .help = "where the table's CSV files, the curves and compare.json go"},
    {.name = "no-baseline", .type = HERD_OPT_BOOL, .offset = AT(no_baseline),
     .help = "no sgd run on one worker (no speedup column)"},
    {.name = "no-plots", .type = HERD_OPT_BOOL, .offset = AT(no_plots),
     .help = "deprecated, does nothing: herd compare draws no plots (tools/herd-plot DIR does)"},
    {.name = "real-timeout", .type = HERD_OPT_DOUBLE, .offset = AT(timeout_s), .def = "86400",
     .flags = B | HERD_OPT_MIN_OPEN, .min = 0, .max = 2592000, .meta = "S", .help = "stop a run after S real seconds"},
    {.name = "sweep", .type = HERD_OPT_STR, .offset = AT(sweep), .flags = NONEMPTY, .meta = "KEY=V,V,...",
     .help = "sim: a crossover map: every spec at each value of link (BW:LAT) or host-speed (SPEED), for each of "
             "--models; the cell's winner is the spec first to --target"},
    {.name = "models", .type = HERD_OPT_STR, .offset = AT(models), .flags = NONEMPTY, .meta = "M,M,...",
     .help = "the map's rows: every spec on each of these models (instead of --model)"},
    {0},
};

#undef NONEMPTY
#undef B
#undef AT

static void cmp_usage(FILE *out)
{
    fprintf(out, "usage: herd compare [flags] [--] 'ALGO [FLAGS]' ...\n\n"
                    "Runs each algorithm spec (default: allreduce asgd dpsgd adpsgd) with the same data,\n"
                    "model, workers and epochs, and prints one table; writes DIR/compare.csv, the curves\n"
                    "DIR/*.dat and DIR/compare.json; with --seeds N, each configuration N times:\n"
                    "DIR/compare.csv a row a run, DIR/compare_summary.csv a row a configuration (mean,\n"
                    "spread = max - min, std, min, max of each figure).\n"
                    "With --sweep and/or --models, a crossover map: the comparison in each cell (a model x\n"
                    "a value of the swept platform parameter) into DIR/MODEL-K/, then DIR/crossover.csv (a row\n"
                    "a run), DIR/crossover.md and the table on stdout (each cell's winner: the spec whose runs\n"
                    "all reached --target, with the lowest mean time to it; 'none' where no spec's did).\n"
                    "It draws no plots: tools/herd-plot DIR draws them from DIR with gnuplot, PNG and PDF.\n"
                    "  herd compare --platform ib-100g --workers 16 --slow 3:10 allreduce dpsgd adpsgd\n"
                    "  herd compare --platform 10gbe --sweep link=1Gbps:25us,10Gbps:25us --models lenet,mlp \\\n"
                    "      --target 0.7 --seeds 3 --no-baseline allreduce eawild asgd\n\n");
    herd_opt_print(cmp_opts_table, out);
}

/* Splits s at spaces into tok (pointers into buf); returns the count or -1. */
static int split(const char *s, char *buf, size_t cap, char **tok, int max)
{
    if (strlen(s) >= cap)
        return -1;
    strcpy(buf, s);
    int n = 0;
    for (char *p = strtok(buf, " \t"); p; p = strtok(NULL, " \t")) {
        if (n >= max)
            return -1;
        tok[n++] = p;
    }
    return n;
}

/* Whether words (a spec or --extra) hold herd train's --seed. */
static bool has_seed_flag(const char *words)
{
    for (const char *p = strstr(words, "--seed"); p; p = strstr(p + 1, "--seed")) {
        char after = p[strlen("--seed")];
        if ((p == words || p[-1] == ' ' || p[-1] == '\t') && (after == 0 || after == ' ' || after == '\t' || after == '='))
            return true;
    }
    return false;
}

/* The number after "key": in a JSON line, or NAN (no such key, or null:
 * herd writes a non-finite number so). */
static double json_num(const char *line, const char *key)
{
    char pat[64], *end;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p)
        return NAN;
    double v = strtod(p + strlen(pat), &end);
    return end == p + strlen(pat) ? NAN : v;
}

static void json_str(const char *line, const char *key, char *out, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":\"", key);
    const char *p = strstr(line, pat), *e = p ? strchr(p + strlen(pat), '"') : NULL;
    if (!e)
        snprintf(out, cap, "-");
    else
        snprintf(out, cap, "%.*s", (int)(e - p - strlen(pat)), p + strlen(pat));
}

typedef struct summary_out {
    char line[8192];
} summary_out;

static void on_summary(void *ctx, const char *line)
{
    summary_out *s = ctx;
    if (!strncmp(line, "{\"algo\":", 8))
        snprintf(s->line, sizeof s->line, "%s", line);
}

/* Reads the eval records of a run's log into its curve file (epochs, time,
 * test_acc, test_loss, train_loss) and the time to target. The epochs are
 * the record's progress (with --eval-every-steps, within epochs too), or
 * its epoch in logs that lack it. The time is that progress times the
 * median worker's epoch (r->epoch_s, training only): one clock for every
 * algorithm, which no worker's own biases. Worker 0's own training time
 * ("train_s") read 1.3-2x low against an asynchronous run's progress (its
 * share of the batches is not a fixed one), so a curve on it favoured the
 * asynchronous runs. Where the epoch time is unknown, worker 0's training
 * time, or the record's time since the start in logs that lack it. */
static void read_curve(herd__cmp_row *r, const char *log, double target)
{
    r->t_target = NAN;
    FILE *in = herd__inpath_fopen(log), *out = herd__cmp_out_open(r->dat); /* a FIFO is not waited on */
    if (out)
        fprintf(out, "# %s, %zu workers, seed %" PRIu64 ": epochs time_s test_acc test_loss train_loss\n", r->spec,
                r->workers, r->seed);
    char line[8192];
    while (in && fgets(line, sizeof line, in)) {
        if (!strstr(line, "\"event\":\"eval\"") || json_num(line, "worker") != 0)
            continue;
        double t = json_num(line, "train_s"), acc = json_num(line, "test_acc"), at = json_num(line, "progress");
        if (isnan(t))
            t = json_num(line, "t");
        if (isnan(at))
            at = json_num(line, "epoch");
        if (!isnan(at) && r->epoch_s > 0)
            t = at * r->epoch_s;
        if (out)
            fprintf(out, "%g %.9g %.6f %.6f %.6f\n", at, t, acc, json_num(line, "test_loss"),
                    json_num(line, "train_loss"));
        if (isnan(r->t_target) && acc >= target)
            r->t_target = t;
        r->t_last = t > r->t_last ? t : r->t_last;
    }
    if (in)
        fclose(in);
    if (herd__cmp_out_close(out, r->dat, 0) != 0) /* the curve is part of what compare gives: its loss fails the row */
        r->ok = false;
}

/* The command line of one run, and the strings it points to. */
typedef struct run_cmd {
    char spec[1024], extra[1024], n[32], epochs[32], seed[32], every[32];
    char *argv[3 * MAX_TOKENS + 56];
} run_cmd;

/* Whether tok[0, n) holds --name or --name=VALUE. */
static bool names_flag(char *const *tok, int n, const char *name)
{
    size_t len = strlen(name);
    for (int i = 0; i < n; i++)
        if (!strncmp(tok[i], "--", 2) && !strncmp(tok[i] + 2, name, len) && (!tok[i][2 + len] || tok[i][2 + len] == '='))
            return true;
    return false;
}

/* Fills c with the command that runs spec at n workers, its log into log:
 * `herd train ... --json --log LOG` or `herd sim ... -- train ...`; with
 * log NULL, the same herd train flags with --dry-run (nothing run: the
 * flags, the algorithm and its options checked). -1 when the spec is
 * empty, or it or --extra too long. */
static int run_cmd_make(run_cmd *c, const herd__cmp_opts *o, bool sim, const char *self, const char *spec, size_t n,
                        bool baseline, uint64_t seed, const char *log)
{
    char *tok[MAX_TOKENS], *xtok[MAX_TOKENS];
    int nt = split(spec, c->spec, sizeof c->spec, tok, MAX_TOKENS);
    int nx = o->extra ? split(o->extra, c->extra, sizeof c->extra, xtok, MAX_TOKENS) : 0;
    if (nt < 1 || nx < 0)
        return -1;
    snprintf(c->n, sizeof c->n, "%zu", n);
    snprintf(c->epochs, sizeof c->epochs, "%zu", o->epochs);
    snprintf(c->seed, sizeof c->seed, "%" PRIu64, seed);
    snprintf(c->every, sizeof c->every, "%zu", o->eval_every_steps);
    char **argv = c->argv;
    size_t k = 0;
    argv[k++] = (char *)self;
    if (sim && log) {
        argv[k++] = "sim", argv[k++] = "--workers", argv[k++] = c->n;
        argv[k++] = "--platform", argv[k++] = (char *)(o->platform ? o->platform : "ib-100g");
        if (o->link)
            argv[k++] = "--link", argv[k++] = (char *)o->link;
        if (o->host_speed)
            argv[k++] = "--host-speed", argv[k++] = (char *)o->host_speed;
        for (size_t i = 0; i < o->slow.n && !baseline; i++)
            argv[k++] = "--slow", argv[k++] = (char *)o->slow.v[i];
        argv[k++] = "--real-timeout";
        argv[k++] = "86400";
        argv[k++] = "--";
    }
    argv[k++] = "train", argv[k++] = "--algo";
    for (int i = 0; i < nt; i++)
        argv[k++] = tok[i];
    if (!sim)
        argv[k++] = "--workers", argv[k++] = c->n;
    /* the spec's or --extra's own --epochs, --model, --data win over herd
     * compare's (the label shows them; the CSV reads the run's epochs back
     * from its summary); given by both, herd train refuses them */
    if (!names_flag(tok, nt, "epochs") && !names_flag(xtok, nx, "epochs"))
        argv[k++] = "--epochs", argv[k++] = c->epochs;
    if (!names_flag(tok, nt, "model") && !names_flag(xtok, nx, "model"))
        argv[k++] = "--model", argv[k++] = (char *)(o->model ? o->model : "lenet");
    if (o->data && !names_flag(tok, nt, "data") && !names_flag(xtok, nx, "data"))
        argv[k++] = "--data", argv[k++] = (char *)o->data;
    for (int i = 0; i < nx; i++)
        argv[k++] = xtok[i];
    argv[k++] = "--seed", argv[k++] = c->seed;
    if (o->eval_every_steps)
        argv[k++] = "--eval-every-steps", argv[k++] = c->every;
    for (size_t i = 0; i < o->slow.n && !baseline && !sim; i++)
        argv[k++] = "--slow", argv[k++] = (char *)o->slow.v[i];
    if (log) { /* --eval-at-start: every curve starts at the untrained model */
        argv[k++] = "--json", argv[k++] = "--quiet", argv[k++] = "--no-progress", argv[k++] = "--eval-at-start";
        argv[k++] = "--log", argv[k++] = (char *)log;
    } else {
        argv[k++] = "--dry-run";
    }
    argv[k] = NULL;
    return 0;
}

/* A child herd of a run has longer than smpirun has under herd sim: its own
 * grace runs out first. */
#define CMP_GRACE_S (3 * HERD__SPAWN_GRACE_S)

/* The files of configuration index's run with seed: DIR/runNN.EXT, with
 * --seeds N > 1 DIR/runNN-seedS.EXT (DIR/runNN.dat is then the mean curve). */
static void run_file(char *out, size_t cap, const herd__cmp_opts *o, size_t index, uint64_t seed, const char *ext)
{
    if (o->seeds > 1)
        snprintf(out, cap, "%s/run%02zu-seed%" PRIu64 ".%s", o->out, index, seed, ext);
    else
        snprintf(out, cap, "%s/run%02zu.%s", o->out, index, ext);
}

void herd__cmp_run_one(const herd__cmp_opts *o, const herd__cmp_plan *p, const char *spec, size_t n, bool baseline,
                       uint64_t seed, herd__cmp_row *r, size_t index)
{
    char log[PATH_MAX];
    memset(r, 0, sizeof *r);
    snprintf(r->spec, sizeof r->spec, "%s", spec);
    r->workers = n, r->baseline = baseline, r->seed = seed, r->epochs = o->epochs;
    run_file(r->dat, sizeof r->dat, o, index, seed, "dat");
    run_file(log, sizeof log, o, index, seed, "jsonl");
    run_cmd *c = calloc(1, sizeof *c);
    summary_out *s = calloc(1, sizeof *s);
    if (!c || !s) {
        fprintf(stderr, "herd: out of memory\n");
        goto out;
    }
    if (run_cmd_make(c, o, p->sim, p->self, spec, n, baseline, seed, log) != 0) {
        fprintf(stderr, "herd: compare: spec '%s' is empty or too long\n", spec);
        goto out;
    }
    /* a file of an earlier compare is not this run's: emptied (the run's
     * --log appends), through a link to its target, never unlinked (which
     * would replace the link: core/outpath.h) */
    out_empty(log);
    out_empty(r->dat);
    herd__spawn run = {.argv = c->argv, .timeout_s = o->timeout_s, .grace_s = CMP_GRACE_S, .on_line = on_summary,
                       .ctx = s};
    int rc = herd__cli_spawn(&run, &r->real_s);
    r->stopped = herd__cli_stop_signal();
    if (r->stopped)
        goto out;
    if (rc != 0 || !s->line[0]) {
        fprintf(stderr, "herd: compare: '%s' on %zu worker(s), seed %" PRIu64 " failed (exit %d)\n", spec, n, seed, rc);
        goto out;
    }
    r->ok = true;
    r->acc = json_num(s->line, "test_acc");
    r->w0acc = json_num(s->line, "worker0_acc");
    r->wall = json_num(s->line, "wall_s");
    double epochs = json_num(s->line, "epochs"), bytes = json_num(s->line, "bytes_sent");
    double workers = json_num(s->line, "workers");
    if (epochs > 0)
        r->epochs = (size_t)epochs;
    if (workers >= 1) /* the size the run had (under herd sim, the launcher's) */
        r->workers = (size_t)workers;
    json_str(s->line, "model", r->model, sizeof r->model);
    /* the median worker's: an asynchronous run's slowest worker can take
     * longer for one slowed step than the others for their epoch */
    r->epoch_s = json_num(s->line, "epoch_s_median");
    if (isnan(r->epoch_s) || r->epoch_s <= 0)
        r->epoch_s = epochs > 0 ? json_num(s->line, "train_s") / epochs : NAN;
    r->mb = bytes / 1e6 / (double)r->workers;
    double steps = json_num(s->line, "steps_median");
    r->step_s = steps > 0 && epochs > 0 ? r->epoch_s / (steps / epochs) : NAN;
    json_str(s->line, "eval_model", r->eval_model, sizeof r->eval_model);
    read_curve(r, log, o->target);
out:
    free(c);
    free(s);
}

/* Every run's herd train flags through herd train --dry-run, before any
 * run starts: a spec refused there (an algorithm unknown, an option it does
 * not have, a flag misspelt) would otherwise fail minutes later, after the
 * runs before it. Returns 0, or the exit status: 2 for a spec refused
 * (herd train has said why), 1 when the check could not run, 128 + the
 * signal when stopped. */
static int check_specs(const herd__cmp_opts *o, bool sim, const char *self, const char *const *specs, size_t nspecs,
                       size_t workers)
{
    run_cmd *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "herd: out of memory\n");
        return 1;
    }
    int rc = 0;
    for (size_t i = o->no_baseline ? 1 : 0; i <= nspecs && rc == 0; i++) {
        const char *spec = i ? specs[i - 1] : "sgd"; /* 0: the baseline, which has --model, --data and --extra too */
        /* the baseline runs on one worker: checked there (sgd refuses more) */
        if (run_cmd_make(c, o, sim, self, spec, i ? workers : 1, i == 0, o->seed, NULL) != 0) {
            fprintf(stderr, "herd: compare: spec '%s' is empty or too long (at most %d words)\n", spec, MAX_TOKENS);
            rc = 2;
            break;
        }
        double real_s;
        herd__spawn check = {.argv = c->argv, .timeout_s = 60, .grace_s = HERD__SPAWN_GRACE_S};
        int st = herd__cli_spawn(&check, &real_s);
        rc = herd__cli_stop_signal() ? 128 + herd__cli_stop_signal() : st == 2 ? 2 : st ? 1 : 0;
        if (rc == 2 && i)
            fprintf(stderr, "herd: compare: spec '%s' is refused (above); no run was started\n", spec);
        else if (rc == 2)
            fprintf(stderr, "herd: compare: the flags of every run (--model, --data, --extra) are refused (above); "
                            "no run was started\n");
        else if (rc == 1)
            fprintf(stderr, "herd: compare: cannot check spec '%s' (herd train --dry-run: exit %d)\n", spec, st);
    }
    free(c);
    return rc;
}

/* --scaling N,N,... (or --workers alone) into counts; -1 with a message. */
static int worker_counts(const herd__cmp_opts *o, size_t *counts, size_t *ncounts)
{
    *ncounts = 0;
    if (!o->scaling) {
        counts[(*ncounts)++] = o->workers;
        return 0;
    }
    for (const char *p = o->scaling; *p;) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || errno || v < 1 || v > 4096 || *ncounts >= MAX_SCALE || (*end && *end != ',')) {
            fprintf(stderr, "herd: --scaling: expected up to %d worker counts in [1, 4096] such as 1,2,4,8, got '%s'\n",
                    MAX_SCALE, o->scaling);
            return -1;
        }
        counts[(*ncounts)++] = v;
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* s split at commas into out (pointers into buf); the count, or -1 when s
 * is too long, has more than max items or an empty one. */
static int split_commas(const char *s, char *buf, size_t cap, const char **out, size_t max)
{
    if (strlen(s) >= cap)
        return -1;
    strcpy(buf, s);
    size_t n = 0;
    for (char *p = buf;; p++) {
        char *end = strchr(p, ',');
        if (end)
            *end = 0;
        if (!*p || n >= max)
            return -1;
        out[n++] = p;
        if (!end)
            return (int)n;
        p = end;
    }
}

/* The sweep's flags into sw, checked against the others; 2 with a message,
 * or 0. */
static int sweep_parse(const herd__cmp_opts *o, herd__cmp_sweep *sw)
{
    memset(sw, 0, sizeof *sw);
    if (o->sweep) {
        const char *eq = strchr(o->sweep, '=');
        size_t klen = eq ? (size_t)(eq - o->sweep) : 0;
        int n = eq ? split_commas(eq + 1, sw->vbuf, sizeof sw->vbuf, sw->v, HERD__CMP_MAX_SWEEP) : -1;
        if (klen == 4 && !strncmp(o->sweep, "link", 4))
            sw->key = "link";
        else if (klen == 10 && !strncmp(o->sweep, "host-speed", 10))
            sw->key = "host-speed";
        if (!sw->key || n < 1) {
            fprintf(stderr, "herd: compare: --sweep: expected KEY=V,V,... with KEY link or host-speed and 1 to %d "
                            "values, none empty (--sweep link=1Gbps:25us,10Gbps:25us), got '%s'\n", HERD__CMP_MAX_SWEEP, o->sweep);
            return 2;
        }
        sw->nv = (size_t)n;
        if ((!strcmp(sw->key, "link") && o->link) || (!strcmp(sw->key, "host-speed") && o->host_speed)) {
            fprintf(stderr, "herd: compare: --sweep %s=... and --%s: give one\n", sw->key, sw->key);
            return 2;
        }
    } else {
        sw->nv = 1; /* one column: the platform as given */
    }
    if (o->models) {
        int n = split_commas(o->models, sw->mbuf, sizeof sw->mbuf, sw->m, HERD__CMP_MAX_MODELS);
        if (n < 1) {
            fprintf(stderr, "herd: compare: --models: expected 1 to %d models M,M,..., none empty, got '%s'\n",
                    HERD__CMP_MAX_MODELS, o->models);
            return 2;
        }
        if (o->model) {
            fprintf(stderr, "herd: compare: --models and --model: give one\n");
            return 2;
        }
        sw->nm = (size_t)n;
    } else {
        sw->nm = 1, sw->m[0] = o->model ? o->model : "lenet";
    }
    if ((o->sweep || o->models) && o->scaling) {
        fprintf(stderr, "herd: compare: --sweep and --models draw a map at one worker count: not with --scaling\n");
        return 2;
    }
    return 0;
}

/* The specs, argv[first, argc) or the default four, into specs; their
 * count, or 0 when there are too many (said). */
static size_t collect_specs(int argc, char **argv, int first, const char **specs)
{
    static const char *const defaults[] = {"allreduce", "asgd", "dpsgd", "adpsgd"};
    if (first >= argc) {
        memcpy(specs, defaults, sizeof defaults);
        return 4;
    }
    if (argc - first > HERD__CMP_MAX_SPECS) {
        fprintf(stderr, "herd: compare: at most %d specs\n", HERD__CMP_MAX_SPECS);
        return 0;
    }
    for (int i = first; i < argc; i++)
        specs[i - first] = argv[i];
    return (size_t)(argc - first);
}

/* Whether a spec or --extra holds herd train's --seed (said): the runs'
 * seeds are compare's. */
static bool seed_given(const char *const *specs, size_t nspecs, const char *extra)
{
    for (size_t i = 0; i <= nspecs; i++) {
        const char *words = i < nspecs ? specs[i] : extra ? extra : "";
        if (has_seed_flag(words)) {
            fprintf(stderr, "herd: compare: --seed in %s '%s': give herd compare --seed S (its runs take S, S+1, ... "
                            "with --seeds)\n", i < nspecs ? "spec" : "--extra", words);
            return true;
        }
    }
    return false;
}

/* Once the flags are parsed: every spec (and swept value) checked, then the
 * comparison or the map. Returns the exit status. */
static int compare_start(const herd__cmp_opts *o, const herd__cmp_sweep *sw, herd__cmp_plan *p)
{
    char dir[PATH_MAX], self[PATH_MAX + 16];
    snprintf(self, sizeof self, "%s/herd", herd__cli_self_dir(dir, sizeof dir));
    p->self = self;
    /* from here a signal stops the run under way and no other starts */
    herd__cli_catch_signals();
    int bad = sw->key ? herd__cmp_sweep_check(o, sw, self) : 0;
    for (size_t m = 0; m < sw->nm && !bad; m++) { /* every model's flags */
        herd__cmp_opts co = *o;
        co.model = sw->m[m];
        bad = check_specs(&co, p->sim, self, p->specs, p->nspecs, p->counts[0]);
    }
    if (bad > 128)
        fprintf(stderr, "herd: compare stopped by %s before any run\n", herd__cli_signal_name(bad - 128));
    if (bad)
        return bad;
    if (o->sweep || o->models)
        return herd__cmp_crossover(o, sw, p);
    herd__cmp_result res;
    int failed = herd__cmp_run(o, p, &res);
    size_t ended = 0;
    for (size_t i = 0; i < res.nrows; i++)
        ended += res.rows[i].ok;
    free(res.rows);
    free(res.groups);
    if (failed < 0)
        return 1;
    fprintf(stderr, "herd compare: results in %s/ (compare.csv, compare_summary.csv, compare.json, the curves "
                    "run*.dat); draw the plots with: herd-plot %s (tools/herd-plot in the source tree)\n", o->out,
            o->out);
    int sig = herd__cli_stop_signal();
    if (sig) { /* one line: the comparison did not end */
        fprintf(stderr, "herd: compare stopped by %s: %zu of %zu run(s) ended; %s/compare.csv has them\n",
                herd__cli_signal_name(sig), ended, res.maxrows, o->out);
        return 128 + sig;
    }
    return failed ? 1 : 0;
}

int herd__cli_compare(int argc, char **argv)
{
    herd__cmp_opts o = {0};
    herd__flags_defaults(cmp_opts_table, &o);
    /* flags, then specs (after "--", or the first argument that is not a flag) */
    herd__flag_cmd c = {.cmd = "compare", .opts = cmp_opts_table, .obj = &o, .usage = cmp_usage};
    int first = herd__flags_parse(&c, argc, argv, 2, true);
    if (first < argc && !strcmp(argv[first], "--"))
        first++;
    const char *specs[HERD__CMP_MAX_SPECS];
    size_t nspecs = collect_specs(argc, argv, first, specs);
    if (!nspecs)
        return 2;
    if (o.no_plots) /* scripts pass it */
        fprintf(stderr, "herd compare: --no-plots is deprecated and does nothing: herd compare draws no plots "
                        "(tools/herd-plot DIR does)\n");
    const char *engine = o.engine ? o.engine : o.platform || o.sweep ? "sim" : "threads";
    bool sim = !strcmp(engine, "sim");
    if (!sim && (o.platform || o.link || o.host_speed || o.sweep)) {
        fprintf(stderr, "herd: compare: --platform, --link, --host-speed and --sweep need --engine sim\n");
        return 2;
    }
    herd__cmp_sweep sw;
    size_t counts[MAX_SCALE], ncounts = 0;
    if (sweep_parse(&o, &sw) != 0 || worker_counts(&o, counts, &ncounts) != 0 || seed_given(specs, nspecs, o.extra))
        return 2;
    herd__cmp_plan p = {.sim = sim, .engine = engine, .specs = specs, .nspecs = nspecs, .counts = counts,
                        .ncounts = ncounts};
#ifdef HERD_CLI_NO_SPAWN
    (void)p;
    return 1; /* the CLI fuzzer: parsing only (it links no compare_sweep.c) */
#else
    return compare_start(&o, &sw, &p);
#endif
}
