/* herd compare — several algorithms on one engine (threads, or sim on one
 * platform), one after another, in one table: final accuracy, time to a
 * target accuracy, time per epoch, speedup over one sgd worker and bytes per
 * worker; the same as CSV, the curves as data files, and plots drawn by
 * gnuplot as PNG and PDF (accuracy and loss against time and epochs; with
 * --scaling, speedup against workers).
 *
 * Each run is `herd train ... --json --eval-at-start --log FILE` (or `herd
 * sim ... -- train ...`) of this same binary; the curves come from its log's
 * eval records, the first at epoch 0, time 0.
 * With --seeds N each configuration runs N times (seeds S, S+1, ...): the
 * table and compare_summary.csv give each figure's mean and spread (max -
 * min), the plots each configuration's mean curve over a band from its
 * lowest seed to its highest.
 * On the threads engine the runs share this machine's cores: compare their
 * times within one table only. On sim the times are simulated and
 * repeatable.
 * With --sweep (a platform parameter's values) and --models, a crossover
 * map: the same comparison in each cell, model x value, each in a directory
 * of its own, then which spec reached the target first in each cell. */
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

#include "core/outpath.h"

/* Opens one of compare's output files (core/outpath.h: a link is followed,
 * a FIFO written in place, a directory or a device refused, a FIFO that no
 * process reads refused rather than waited on), saying why not. */
static FILE *out_open(const char *path)
{
    herd_err err = {0};
    FILE *f;
    if (herd__outpath_fopen(path, "w", "herd compare: output file", &f, &err) < 0)
        fprintf(stderr, "herd: %s\n", err.msg);
    return f;
}

enum { MAX_SPECS = 32, MAX_SCALE = 16, MAX_TOKENS = 64, MAX_SEEDS = 100, MAX_SWEEP = 16, MAX_MODELS = 8 };
/* --seed's bound: S + --seeds - 1 fits a uint64_t with room to spare, and a
 * double (a row's bound) holds it exactly */
#define MAX_SEED 4294967295.0

typedef struct cmp_opts {
    const char *engine, *platform, *link, *host_speed, *model, *data, *extra, *out, *scaling, *sweep, *models;
    herd__str_list slow;
    size_t workers, epochs, seeds, eval_every_steps;
    uint64_t seed;
    double target, timeout_s;
    bool no_baseline, no_plots;
} cmp_opts;

/* One run's results. */
typedef struct cmp_row {
    char spec[256], eval_model[32], dat[PATH_MAX];
    size_t workers, epochs; /* epochs: the run's own (its summary's) */
    uint64_t seed;
    bool ok, baseline;
    int stopped; /* the signal that stopped it (it is not ok), or 0 */
    double acc, w0acc, wall, real_s, t_target, epoch_s, speedup, mb;
    double step_s; /* the median worker's time a step (epoch_s over its steps an epoch) */
    double t_last; /* its curve's last time */
} cmp_row;

static const char *const cmp_engines[] = {"threads", "sim", NULL};

#define AT(f) offsetof(cmp_opts, f)
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
             "spread (max - min), the plots the mean with a band from the lowest seed's to the highest's"},
    {.name = "seed", .type = HERD_OPT_U64, .offset = AT(seed), .def = "1", .flags = B, .min = 0, .max = MAX_SEED,
     .meta = "S", .help = "the first seed, S (herd train's --seed, not allowed in a spec or --extra)"},
    {.name = "eval-every-steps", .type = HERD_OPT_SIZE, .offset = AT(eval_every_steps), .def = "0", .flags = B,
     .min = 0, .max = 1e9,
     .help = "also evaluate every N global steps (herd train --eval-every-steps; 0: at epochs' ends only): curves "
             "with many points"},
    {.name = "out", .type = HERD_OPT_STR, .offset = AT(out), .def = "herd-compare", .flags = NONEMPTY, .meta = "DIR",
     .help = "where the CSV, curves and plots go"},
    {.name = "no-baseline", .type = HERD_OPT_BOOL, .offset = AT(no_baseline),
     .help = "no sgd run on one worker (no speedup column)"},
    {.name = "no-plots", .type = HERD_OPT_BOOL, .offset = AT(no_plots), .help = "no gnuplot"},
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
                    "DIR/*.dat and the plots DIR/*.png and DIR/*.pdf; with --seeds N, each configuration N\n"
                    "times: DIR/compare.csv a row a run, DIR/compare_summary.csv a row a configuration (mean,\n"
                    "spread = max - min, std, min, max of each figure).\n"
                    "With --sweep and/or --models, a crossover map: the comparison in each cell (a model x\n"
                    "a value of the swept platform parameter) into DIR/MODEL-K/, then DIR/crossover.csv (a row\n"
                    "a run), DIR/crossover.md and the table on stdout (each cell's winner: the spec whose runs\n"
                    "all reached --target, with the lowest mean time to it; 'none' where no spec's did) and\n"
                    "the map DIR/crossover.png and .pdf.\n"
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
 * its epoch in logs that lack it; the time is worker 0's training time at
 * the evaluation (its "train_s": evaluations excluded, which asynchronous
 * workers would otherwise count as training), or the record's time since
 * the start in logs that lack it. */
static void read_curve(cmp_row *r, const char *log, double target)
{
    r->t_target = NAN;
    FILE *in = fopen(log, "r"), *out = out_open(r->dat);
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
        if (out)
            fprintf(out, "%g %.9g %.6f %.6f %.6f\n", at, t, acc, json_num(line, "test_loss"),
                    json_num(line, "train_loss"));
        if (isnan(r->t_target) && acc >= target)
            r->t_target = t;
        r->t_last = t > r->t_last ? t : r->t_last;
    }
    if (in)
        fclose(in);
    if (!out || fclose(out) != 0) { /* the curve is part of what compare gives: its loss fails the row */
        fprintf(stderr, "herd: cannot write %s: %s\n", r->dat, strerror(errno));
        r->ok = false;
    }
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
static int run_cmd_make(run_cmd *c, const cmp_opts *o, bool sim, const char *self, const char *spec, size_t n,
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
static void run_file(char *out, size_t cap, const cmp_opts *o, size_t index, uint64_t seed, const char *ext)
{
    if (o->seeds > 1)
        snprintf(out, cap, "%s/run%02zu-seed%" PRIu64 ".%s", o->out, index, seed, ext);
    else
        snprintf(out, cap, "%s/run%02zu.%s", o->out, index, ext);
}

/* Runs one spec at n workers with one seed, configuration index; fills r. */
static void run_one(const cmp_opts *o, bool sim, const char *self, const char *spec, size_t n, bool baseline,
                    uint64_t seed, cmp_row *r, size_t index)
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
    if (run_cmd_make(c, o, sim, self, spec, n, baseline, seed, log) != 0) {
        fprintf(stderr, "herd: compare: spec '%s' is empty or too long\n", spec);
        goto out;
    }
    unlink(log); /* a file of an earlier compare is not this run's */
    unlink(r->dat);
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
    if (epochs > 0)
        r->epochs = (size_t)epochs;
    /* the median worker's: an asynchronous run's slowest worker can take
     * longer for one slowed step than the others for their epoch */
    r->epoch_s = json_num(s->line, "epoch_s_median");
    if (isnan(r->epoch_s) || r->epoch_s <= 0)
        r->epoch_s = epochs > 0 ? json_num(s->line, "train_s") / epochs : NAN;
    r->mb = bytes / 1e6 / (double)n;
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
static int check_specs(const cmp_opts *o, bool sim, const char *self, const char *const *specs, size_t nspecs,
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

/* The runs of one configuration (the baseline, or a spec at a worker
 * count), one a seed: rows[first, first + n); index numbers its files. */
typedef struct cmp_group {
    size_t first, n, index;
    char dat[PATH_MAX]; /* its curve: the run's, or (--seeds > 1) the mean with its band */
    size_t npoints;     /* the curve's points */
} cmp_group;

/* A figure over a configuration's runs that ended: n of them, their mean,
 * lowest, highest and standard deviation (n - 1; NAN below 2). */
typedef struct cmp_stat {
    size_t n;
    double mean, min, max, std;
} cmp_stat;

/* The figure at offset off (a double of cmp_row) over g's runs that ended
 * with a number there. */
static cmp_stat stat_at(const cmp_row *rows, const cmp_group *g, size_t off)
{
    cmp_stat s = {0, NAN, NAN, NAN, NAN};
    double v[256], sum = 0, sq = 0;
    for (size_t i = g->first; i < g->first + g->n && s.n < 256; i++) {
        memcpy(&v[s.n], (const char *)&rows[i] + off, sizeof v[0]);
        if (rows[i].ok && !isnan(v[s.n]))
            sum += v[s.n++];
    }
    if (!s.n)
        return s;
    s.mean = sum / (double)s.n, s.min = s.max = v[0];
    for (size_t k = 0; k < s.n; k++) {
        s.min = v[k] < s.min ? v[k] : s.min, s.max = v[k] > s.max ? v[k] : s.max;
        sq += (v[k] - s.mean) * (v[k] - s.mean);
    }
    s.std = s.n > 1 ? sqrt(sq / (double)(s.n - 1)) : NAN;
    return s;
}

#define STAT(rows, g, field) stat_at((rows), (g), offsetof(cmp_row, field))

/* A run's curve file (read_curve) into pts, CURVE_COLS numbers a point;
 * returns the points read, at most max. */
enum { CURVE_COLS = 5, MAX_POINTS = 4096 };

static size_t curve_load(const char *dat, double (*pts)[CURVE_COLS], size_t max)
{
    FILE *f = fopen(dat, "r");
    char line[512];
    size_t n = 0;
    while (f && n < max && fgets(line, sizeof line, f)) {
        char *p = line, *end;
        size_t k = 0;
        for (; k < CURVE_COLS; k++, p = end) {
            pts[n][k] = strtod(p, &end);
            if (end == p)
                break;
        }
        n += line[0] != '#' && k == CURVE_COLS;
    }
    if (f)
        fclose(f);
    return n;
}

/* Column col of curve c (n points, epochs rising) at epochs x, linear
 * between the points around it; NAN outside the curve. */
static double curve_at(double (*c)[CURVE_COLS], size_t n, double x, size_t col)
{
    if (!n || x < c[0][0] || x > c[n - 1][0])
        return NAN;
    size_t j = 0;
    while (c[j][0] < x)
        j++;
    if (c[j][0] == x || j == 0)
        return c[j][col];
    double f = (x - c[j - 1][0]) / (c[j][0] - c[j - 1][0]);
    return c[j - 1][col] + f * (c[j][col] - c[j - 1][col]);
}

/* --seeds > 1: g's mean curve into g->dat, at the evaluations of its first
 * run that ended (in epochs); each other run's curve is taken there,
 * linear between its own evaluations (a synchronous run's are at the same
 * steps whatever the seed: nothing to interpolate), leaving out a run whose
 * curve does not reach so far. Columns: epochs, then the mean time, and
 * mean, lowest and highest test accuracy, test loss and training loss,
 * and the runs. -1 when it cannot be written. */
static int mean_curve(const cmp_row *rows, cmp_group *g)
{
    size_t nrun = 0, npts[128];
    double(*pts)[MAX_POINTS][CURVE_COLS] = calloc(128, sizeof *pts);
    FILE *out = out_open(g->dat);
    if (!pts || !out) {
        if (!pts)
            fprintf(stderr, "herd: cannot write %s: out of memory\n", g->dat);
        free(pts);
        if (out)
            fclose(out);
        return -1;
    }
    for (size_t i = g->first; i < g->first + g->n && nrun < 128; i++)
        if (rows[i].ok && (npts[nrun] = curve_load(rows[i].dat, pts[nrun], MAX_POINTS)) > 0)
            nrun++;
    const cmp_row *r = &rows[g->first];
    fprintf(out, "# %s, %zu workers, %zu seed(s) from %" PRIu64 ": epochs time_s, then mean min max of test_acc, "
                 "test_loss and train_loss, runs\n", r->spec, r->workers, g->n, r->seed);
    g->npoints = nrun ? npts[0] : 0;
    for (size_t k = 0; k < g->npoints; k++) {
        double x = pts[0][k][0], mean[CURVE_COLS] = {0}, lo[CURVE_COLS], hi[CURVE_COLS];
        size_t n[CURVE_COLS] = {0}, runs = 0;
        for (size_t c = 1; c < CURVE_COLS; c++)
            lo[c] = hi[c] = NAN;
        for (size_t j = 0; j < nrun; j++) {
            runs += !isnan(curve_at(pts[j], npts[j], x, 1));
            for (size_t c = 1; c < CURVE_COLS; c++) {
                double v = curve_at(pts[j], npts[j], x, c);
                if (isnan(v))
                    continue;
                mean[c] += v, n[c]++;
                lo[c] = isnan(lo[c]) || v < lo[c] ? v : lo[c];
                hi[c] = isnan(hi[c]) || v > hi[c] ? v : hi[c];
            }
        }
        fprintf(out, "%g %.9g", x, n[1] ? mean[1] / (double)n[1] : NAN);
        for (size_t c = 2; c < CURVE_COLS; c++)
            fprintf(out, " %.6f %.6f %.6f", n[c] ? mean[c] / (double)n[c] : NAN, lo[c], hi[c]);
        fprintf(out, " %zu\n", runs);
    }
    free(pts);
    if (fclose(out) != 0) {
        fprintf(stderr, "herd: cannot write %s: %s\n", g->dat, strerror(errno));
        return -1;
    }
    return 0;
}

static void fmt(char *buf, size_t cap, double v, const char *f)
{
    if (isnan(v))
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, f, v);
}

/* gnuplot's string quoting: s without quotes or backslashes. */
static void gp_unquote(char *s)
{
    for (char *p = s; *p; p++)
        *p = *p == '"' || *p == '\\' ? ' ' : *p;
}

/* gnuplot's string quoting: no quotes or backslashes in titles. */
static void gp_title(char *out, size_t cap, const cmp_row *r, bool with_workers)
{
    size_t k = 0;
    char tmp[320];
    if (with_workers)
        snprintf(tmp, sizeof tmp, "%s, %zu worker%s", r->spec, r->workers, r->workers == 1 ? "" : "s");
    else
        snprintf(tmp, sizeof tmp, "%s", r->spec);
    for (const char *p = tmp; *p && k + 1 < cap; p++)
        out[k++] = (*p == '"' || *p == '\\' || *p == '_') ? ' ' : *p;
    out[k] = 0;
}

/* The time axis in the unit that keeps its numbers readable: simulated runs
 * of small models last milliseconds. The curves' time is worker 0's
 * training time (read_curve), shorter than the run's. */
static void time_axis(const cmp_row *rows, size_t nrows, bool sim, char *label, size_t cap, double *scale)
{
    double tmax = 0;
    for (size_t i = 0; i < nrows; i++)
        if (rows[i].ok && rows[i].t_last > tmax)
            tmax = rows[i].t_last;
    const char *unit = tmax < 1e-3 ? "us" : tmax < 1 ? "ms" : "s";
    *scale = tmax < 1e-3 ? 1e6 : tmax < 1 ? 1e3 : 1;
    snprintf(label, cap, "%straining time (%s), evaluation excluded", sim ? "simulated " : "", unit);
}

/* Every plot is drawn twice: a PNG to look at, a PDF for a paper. */
#define GP_PNG "set terminal pngcairo size 1100,700 enhanced font 'sans,12' linewidth 2\n"
#define GP_PDF "set terminal pdfcairo size 8in,5in enhanced font 'sans,10' linewidth 2\n"

static void gp_output(FILE *g, const char *out, const char *file)
{
    fprintf(g, "set output\n" GP_PDF "set output '%s/%s.pdf'\nreplot\nset output\n" GP_PNG, out, file);
}

static int worker_counts(const cmp_opts *o, size_t *counts, size_t *ncounts);

/* " pi K": a curve of many evaluations (--eval-every-steps) marks a dozen
 * or so of its points, not each. */
static void gp_points(FILE *g, size_t npoints)
{
    if (npoints > 24)
        fprintf(g, " pi %zu", npoints / 12);
}

/* One configuration's curves in plot p: its test figure (accuracy, or test
 * loss solid with training loss dashed) at epochs or at time x tscale;
 * with --seeds > 1 the mean of its runs over a band from their lowest to
 * their highest. */
static void gp_curves(FILE *g, const cmp_opts *o, const cmp_row *rows, const cmp_group *gr, bool epochs, bool loss,
                      double tscale, bool first)
{
    char t[320], x[64];
    gp_title(t, sizeof t, &rows[gr->first], true);
    snprintf(x, sizeof x, "($%d*%g)", epochs ? 1 : 2, epochs ? 1.0 : tscale);
    size_t lc = gr->index + 1;
    if (o->seeds == 1) {
        fprintf(g, "%s\\\n  '%s' using %s:%d title \"%s\" lc %zu dt 1", first ? "" : ", ", gr->dat, x, loss ? 4 : 3, t, lc);
        gp_points(g, gr->npoints);
        if (loss) {
            fprintf(g, ", \\\n  '%s' using %s:5 notitle lc %zu dt 2 pt 6", gr->dat, x, lc);
            gp_points(g, gr->npoints);
        }
        return;
    }
    /* columns of mean_curve: test_acc 3-5, test_loss 6-8, train_loss 9-11 (mean, lowest, highest) */
    int col = loss ? 6 : 3;
    fprintf(g, "%s\\\n  '%s' using %s:%d:%d with filledcurves lc %zu fs transparent solid 0.18 noborder notitle",
            first ? "" : ", ", gr->dat, x, col + 1, col + 2, lc);
    fprintf(g, ", \\\n  '%s' using %s:%d title \"%s\" lc %zu dt 1", gr->dat, x, col, t, lc);
    gp_points(g, gr->npoints);
    if (loss) {
        fprintf(g, ", \\\n  '%s' using %s:10:11 with filledcurves lc %zu fs transparent solid 0.08 noborder notitle",
                gr->dat, x, lc);
        fprintf(g, ", \\\n  '%s' using %s:9 notitle lc %zu dt 2 pt 6", gr->dat, x, lc);
        gp_points(g, gr->npoints);
    }
}

/* Closes the script g (written to path) and has gnuplot draw it; -1 with
 * a message when it cannot. */
static int gp_draw(FILE *g, char *path)
{
    if (fclose(g) != 0) {
        fprintf(stderr, "herd: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    char *argv[] = {"/usr/bin/gnuplot", path, NULL};
    double real_s;
    if (herd__cli_stop_signal())
        return -1; /* stopped: the script is there, gnuplot draws it */
    if (access(argv[0], X_OK) != 0) {
        fprintf(stderr, "herd: compare: no gnuplot (apt-get install gnuplot-nox); the plot script is %s\n", path);
        return -1;
    }
    herd__spawn plot = {.argv = argv, .timeout_s = 120, .grace_s = HERD__SPAWN_GRACE_S};
    int rc = herd__cli_spawn(&plot, &real_s);
    if (rc != 0 && !herd__cli_stop_signal())
        fprintf(stderr, "herd: compare: gnuplot %s failed (exit %d)\n", path, rc);
    return rc ? -1 : 0;
}

static int write_plots(const cmp_opts *o, const cmp_row *rows, size_t nrows, const cmp_group *groups, size_t ngroups,
                       const char *where, bool sim)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/plots.gp", o->out);
    FILE *g = out_open(path);
    if (!g)
        return -1;
    bool scaling = o->scaling != NULL;
    fprintf(g, "# herd compare: gnuplot %s\n" GP_PNG
               "set grid lc rgb '#d0d0d0'\nset key outside right top box opaque\n"
               "set style data linespoints\nset pointsize 1.2\n",
            path);
    /* the loss plots: test loss solid, training loss (the epoch's mean over
     * its batches) dashed in the run's colour; the key says which is which */
    static const struct {
        const char *file, *title, *ylabel;
        bool epochs, loss;
    } plots[] = {
        {"accuracy_time", "Test accuracy against training time", "test accuracy", false, false},
        {"accuracy_epochs", "Test accuracy against epochs", "test accuracy", true, false},
        {"loss_time", "Test and training loss against training time", "loss (cross-entropy)", false, true},
        {"loss_epochs", "Test and training loss against epochs", "loss (cross-entropy)", true, true},
    };
    char time_label[96], seeds_note[96] = "";
    double tscale;
    time_axis(rows, nrows, sim, time_label, sizeof time_label, &tscale);
    if (o->seeds > 1)
        snprintf(seeds_note, sizeof seeds_note, ")\\n(lines: mean of %zu seeds; bands: lowest to highest", o->seeds);
    for (size_t p = 0; p < sizeof plots / sizeof plots[0]; p++) {
        bool epochs = plots[p].epochs;
        fprintf(g, "\nset output '%s/%s.png'\nset title \"%s (%s, %s%s)\"\nset xlabel '%s'\nset ylabel '%s'\n%s\nplot ",
                o->out, plots[p].file, plots[p].title, where, o->model ? o->model : "lenet", seeds_note,
                epochs ? "epoch" : time_label, plots[p].ylabel,
                epochs && o->epochs <= 20 ? "set xtics 1" : "set xtics autofreq");
        bool first = true;
        for (size_t i = 0; i < ngroups; i++) {
            if (!groups[i].npoints)
                continue;
            gp_curves(g, o, rows, &groups[i], epochs, plots[p].loss, tscale, first);
            first = false;
        }
        if (first)
            fprintf(g, "NaN notitle");
        else if (plots[p].loss)
            fprintf(g, ", \\\n  NaN title 'solid: test loss' with linespoints lc rgb 'black' dt 1 pt 7"
                       ", \\\n  NaN title 'dashed: train loss (%s)' with linespoints lc rgb 'black' dt 2 pt 6",
                    o->eval_every_steps ? "mean since last eval" : "epoch mean");
        fprintf(g, "\n");
        gp_output(g, o->out, plots[p].file);
    }
    if (scaling) {
        /* one speedup file: workers then one column per spec */
        snprintf(path, sizeof path, "%s/speedup.dat", o->out);
        FILE *d = out_open(path);
        if (!d) {
            fclose(g);
            return -1;
        }
        /* a log axis takes its ticks from the worker counts run: autofreq
         * or "set xtics 1" on a log axis left it unlabelled */
        size_t counts[MAX_SCALE], ncounts = 0;
        worker_counts(o, counts, &ncounts);
        fprintf(g, "\nset output '%s/speedup_workers.png'\nset title \"Speedup over one sgd worker (%s%s)\"\n"
                   "set xlabel 'workers'\nset ylabel 'speedup (time per epoch)'\nset logscale xy 2\n"
                   "set format xy '%%g'\nset key left top\nset xtics (",
                o->out, where, seeds_note);
        for (size_t i = 0; i < ncounts; i++)
            fprintf(g, "%s%zu", i ? ", " : "", counts[i]);
        fprintf(g, ")\nplot x title 'linear' with lines dt 2 lc rgb '#808080'");
        /* a block a spec: workers, then the mean speedup of its runs, lowest and highest */
        size_t block = 0;
        for (size_t i = 0; i < ngroups; i++) {
            const cmp_row *r = &rows[groups[i].first];
            if (r->baseline || (i > 0 && !strcmp(r->spec, rows[groups[i - 1].first].spec) &&
                                !rows[groups[i - 1].first].baseline))
                continue;
            char t[320];
            gp_title(t, sizeof t, r, false);
            fprintf(d, "# %s: workers speedup (mean lowest highest)\n", r->spec);
            for (size_t j = i; j < ngroups && !strcmp(rows[groups[j].first].spec, r->spec); j++) {
                cmp_stat sp = STAT(rows, &groups[j], speedup);
                if (sp.n)
                    fprintf(d, "%zu %.6g %.6g %.6g\n", rows[groups[j].first].workers, sp.mean, sp.min, sp.max);
            }
            fprintf(d, "\n\n");
            if (o->seeds > 1)
                fprintf(g, ", \\\n  '%s' index %zu using 1:3:4 with filledcurves lc %zu fs transparent solid 0.18 "
                           "noborder notitle", path, block, block + 1);
            fprintf(g, ", \\\n  '%s' index %zu using 1:2 title \"%s\" lc %zu", path, block, t, block + 1);
            block++;
        }
        fprintf(g, "\n");
        gp_output(g, o->out, "speedup_workers");
        fprintf(g, "unset logscale\nset format xy\nset xtics autofreq\n");
        if (fclose(d) != 0) {
            fprintf(stderr, "herd: cannot write %s: %s\n", path, strerror(errno));
            fclose(g);
            return -1;
        }
    }
    snprintf(path, sizeof path, "%s/plots.gp", o->out);
    return gp_draw(g, path);
}

/* --scaling N,N,... (or --workers alone) into counts; -1 with a message. */
static int worker_counts(const cmp_opts *o, size_t *counts, size_t *ncounts)
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

/* A table cell: the mean of a figure in format f, with --seeds > 1 "±"
 * and its spread (max - min); "-" where no run has it. */
static void cell(char *buf, size_t cap, cmp_stat st, const char *f, bool spread)
{
    fmt(buf, cap, st.n ? st.mean : NAN, f);
    if (spread && st.n) {
        size_t k = strlen(buf);
        snprintf(buf + k, cap - k, " ± ");
        k = strlen(buf);
        fmt(buf + k, cap - k, st.max - st.min, f);
    }
}

/* s padded to width columns ("±" is two bytes, one column), to the left
 * (left) or right. */
static void put_cell(const char *s, int width, bool left)
{
    int bytes = (int)strlen(s), cols = 0;
    for (const char *p = s; *p; p++)
        cols += ((unsigned char)*p & 0xc0) != 0x80;
    printf(left ? "| %-*s " : "| %*s ", width + bytes - cols, s);
}

enum { NCOLS = 11 };

/* The table on stdout, a row a configuration (--seeds > 1: the mean ±
 * spread of its runs), DIR/compare.csv a row a run and
 * DIR/compare_summary.csv a row a configuration; returns the number of runs
 * that failed. */
static int print_table(const cmp_opts *op, const cmp_row *rows, const cmp_group *groups, size_t ngroups,
                       const char *where, const char *engine, bool sim)
{
    const cmp_opts o = *op;
    bool many = o.seeds > 1;
    const char *unit = sim ? "sim s" : "s";
    char hdr_t[32], hdr_e[32];
    snprintf(hdr_t, sizeof hdr_t, "to %.2f (%s)", o.target, unit);
    snprintf(hdr_e, sizeof hdr_e, "epoch (%s)", unit);
    const struct {
        const char *name;
        int width;
        bool left, on;
    } col[NCOLS] = {
        {"algorithm", 32, true, true},      {"workers", 7, false, true},        {"seeds", 5, false, many},
        {"test_acc", many ? 17 : 8, false, true}, {"model", 8, true, true},   {"worker0_acc", many ? 17 : 11, false, true},
        {hdr_t, many ? 21 : 16, false, true}, {hdr_e, many ? 21 : 14, false, true}, {"speedup", many ? 15 : 7, false, true},
        {"MB/worker", many ? 13 : 9, false, true}, {"real_s", 8, false, sim},
    };
    char seeds[64] = "";
    if (many)
        snprintf(seeds, sizeof seeds, ", %zu seeds from %" PRIu64, o.seeds, o.seed);
    printf("# herd compare: %s, %s, %zu epoch(s)%s\n", where, o.model ? o.model : "lenet", o.epochs, seeds);
    for (int pass = 0; pass < 2; pass++) {
        for (size_t c = 0; c < NCOLS; c++) {
            if (!col[c].on)
                continue;
            if (pass == 0)
                put_cell(col[c].name, col[c].width, col[c].left);
            else
                for (int k = 0; k < col[c].width + 3; k++)
                    putchar(k ? '-' : '|');
        }
        puts("|");
    }
    char path[PATH_MAX + 32], spath[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/compare.csv", o.out);
    snprintf(spath, sizeof spath, "%s/compare_summary.csv", o.out);
    FILE *csv = out_open(path), *sum = out_open(spath);
    static const struct {
        const char *name;
        size_t off;
    } figs[] = {
        {"test_acc", offsetof(cmp_row, acc)},           {"worker0_acc", offsetof(cmp_row, w0acc)},
        {"time_to_target_s", offsetof(cmp_row, t_target)}, {"epoch_s", offsetof(cmp_row, epoch_s)},
        {"speedup", offsetof(cmp_row, speedup)},        {"mb_per_worker", offsetof(cmp_row, mb)},
        {"wall_s", offsetof(cmp_row, wall)},            {"real_s", offsetof(cmp_row, real_s)},
    };
    if (csv)
        fprintf(csv, "spec,engine,platform,workers,epochs,seed,test_acc,eval_model,worker0_acc,time_to_target_s,"
                     "epoch_s,speedup,mb_per_worker,wall_s,real_s\n");
    if (sum) {
        fprintf(sum, "spec,engine,platform,workers,epochs,seeds,runs_ended,first_seed,eval_model,target_reached");
        for (size_t f = 0; f < sizeof figs / sizeof figs[0]; f++)
            fprintf(sum, ",%s_mean,%s_spread,%s_std,%s_min,%s_max", figs[f].name, figs[f].name, figs[f].name,
                    figs[f].name, figs[f].name);
        fputc('\n', sum);
    }
    const char *platform = sim ? (o.platform ? o.platform : "ib-100g") : "-";
    int failed = 0;
    for (size_t gi = 0; gi < ngroups; gi++) {
        const cmp_group *g = &groups[gi];
        const cmp_row *r0 = &rows[g->first];
        size_t ended = 0, stopped = 0;
        for (size_t i = g->first; i < g->first + g->n; i++) {
            const cmp_row *r = &rows[i];
            ended += r->ok, stopped += !r->ok && r->stopped;
            failed += !r->ok && !r->stopped;
            if (!r->ok || !csv)
                continue;
            char tt[32], sp[32];
            fmt(tt, sizeof tt, r->t_target, "%.4g");
            fmt(sp, sizeof sp, r->speedup, "%.3g");
            fprintf(csv, "\"%s\",%s,%s,%zu,%zu,%" PRIu64 ",%.6f,%s,%.6f,%s,%.9g,%s,%.6g,%.9g,%.3f\n", r->spec, engine,
                    platform, r->workers, r->epochs, r->seed, r->acc, r->eval_model, r->w0acc, tt, r->epoch_s, sp, r->mb,
                    r->wall, r->real_s);
        }
        if (!ended) {
            if (stopped)
                printf("| %-32s | %7zu | stopped by %s\n", r0->spec, r0->workers, herd__cli_signal_name(rows[g->first + g->n - 1].stopped));
            else
                printf("| %-32s | %7zu | failed (see above)\n", r0->spec, r0->workers);
            continue;
        }
        const char *model = "-";
        for (size_t i = g->first; i < g->first + g->n; i++)
            if (rows[i].ok) {
                model = rows[i].eval_model;
                break;
            }
        cmp_stat acc = STAT(rows, g, acc), w0 = STAT(rows, g, w0acc), tt = STAT(rows, g, t_target);
        cmp_stat es = STAT(rows, g, epoch_s), sp = STAT(rows, g, speedup), mb = STAT(rows, g, mb);
        cmp_stat rs = STAT(rows, g, real_s);
        char v[NCOLS][264];
        snprintf(v[0], sizeof v[0], "%s", r0->spec);
        snprintf(v[1], sizeof v[1], "%zu", r0->workers);
        snprintf(v[2], sizeof v[2], ended < g->n ? "%zu/%zu" : "%zu", ended, g->n);
        cell(v[3], sizeof v[3], acc, "%.4f", many);
        snprintf(v[4], sizeof v[4], "%s", model);
        cell(v[5], sizeof v[5], w0, "%.4f", many);
        cell(v[6], sizeof v[6], tt, "%.4g", many);
        if (many && tt.n && tt.n < ended) /* not every run reached the target: how many did */
            snprintf(v[6] + strlen(v[6]), sizeof v[6] - strlen(v[6]), " (%zu/%zu)", tt.n, ended);
        cell(v[7], sizeof v[7], es, "%.4g", many);
        cell(v[8], sizeof v[8], sp, "%.3g", many);
        cell(v[9], sizeof v[9], mb, "%.1f", many);
        fmt(v[10], sizeof v[10], rs.mean, "%.1f");
        for (size_t c = 0; c < NCOLS; c++)
            if (col[c].on)
                put_cell(v[c], col[c].width, col[c].left);
        puts("|");
        if (!sum)
            continue;
        size_t epochs = o.epochs; /* the runs' own (a spec's --epochs wins) */
        for (size_t i = g->first; i < g->first + g->n; i++)
            if (rows[i].ok) {
                epochs = rows[i].epochs;
                break;
            }
        fprintf(sum, "\"%s\",%s,%s,%zu,%zu,%zu,%zu,%" PRIu64 ",%s,%zu", r0->spec, engine, platform, r0->workers,
                epochs, g->n, ended, r0->seed, model, tt.n);
        for (size_t f = 0; f < sizeof figs / sizeof figs[0]; f++) {
            cmp_stat st = stat_at(rows, g, figs[f].off);
            double x[] = {st.mean, st.max - st.min, st.std, st.min, st.max};
            for (size_t k = 0; k < 5; k++) {
                char b[32];
                fmt(b, sizeof b, x[k], "%.9g");
                fprintf(sum, ",%s", b);
            }
        }
        fputc('\n', sum);
    }
    /* the table's files are what a script reads: not written is a failure */
    if (!csv || fclose(csv) != 0) { /* out_open said why it opened none */
        if (csv)
            fprintf(stderr, "herd: cannot write %s: %s\n", path, strerror(errno));
        failed++;
    }
    if (!sum || fclose(sum) != 0) {
        if (sum)
            fprintf(stderr, "herd: cannot write %s: %s\n", spath, strerror(errno));
        failed++;
    }
    printf("# epoch: the median worker's training time per epoch; to %.2f: worker 0's training time (evaluations "
           "excluded) until an evaluation first reached it\n",
           o.target);
    if (many)
        printf("# each figure: the mean over the seeds' runs that ended ± their spread (max - min); to %.2f: over the "
               "runs that reached it (how many, where not all)\n", o.target);
    fflush(stdout);
    return failed;
}

/* The runs of one comparison, a row a run, and its configurations. */
typedef struct cmp_result {
    cmp_row *rows;
    cmp_group *groups;
    size_t nrows, ngroups, maxrows;
} cmp_result;

/* Where the runs run, for titles: the engine, the platform and its
 * changes. */
static void where_of(const cmp_opts *o, bool sim, char *where, size_t cap)
{
    if (sim)
        snprintf(where, cap, "sim, %s%s%s%s%s", o->platform ? o->platform : "ib-100g", o->link ? ", link " : "",
                 o->link ? o->link : "", o->host_speed ? ", hosts " : "", o->host_speed ? o->host_speed : "");
    else
        snprintf(where, cap, "threads engine");
    for (size_t i = 0; i < o->slow.n; i++)
        snprintf(where + strlen(where), cap - strlen(where), ", --slow %s", o->slow.v[i]);
}

/* A comparison whose setting defeats its question: every run on several
 * workers slower than one worker, because a step's exchange outlasts its
 * compute (a step of the baseline, one sgd worker, is compute alone; the
 * same batch on each of N workers computes as long). One line on stderr
 * with both times and what would match the user's hardware. */
static void warn_defeated(const cmp_opts *o, const cmp_row *rows, size_t nrows, const cmp_group *groups, bool sim)
{
    if (o->no_baseline || !rows[groups[0].first].ok || !(rows[groups[0].first].step_s > 0))
        return;
    double compute = rows[groups[0].first].step_s, best = INFINITY, best_speedup = 0;
    size_t multi = 0;
    for (size_t i = 0; i < nrows; i++) {
        const cmp_row *r = &rows[i];
        if (r->baseline || r->workers < 2 || !r->ok)
            continue;
        if (!(r->speedup < 1) || !(r->step_s > 2 * compute))
            return; /* one run gains from its workers, or computes as long as it exchanges */
        multi++;
        best = r->step_s < best ? r->step_s : best;
        best_speedup = r->speedup > best_speedup ? r->speedup : best_speedup;
    }
    if (!multi)
        return;
    fprintf(stderr,
            "herd compare: warning: every run on several workers is slower than one worker (speedup at most %.2g): "
            "a step computes in %.3g ms but takes %.3g ms with its exchange (the fastest run's), so this setting "
            "measures the network, not the algorithms; %s\n",
            best_speedup, 1e3 * compute, 1e3 * best,
            sim ? "the simulated hosts compute faster than a real step of this model: give --host-speed the rate of "
                  "your hardware (a GPU framework's lenet step is about 1 ms), or a larger --model"
                : "this machine's cores are fewer than the workers, or the model too small: fewer --workers, or a "
                  "larger --model");
}

/* One comparison with o's model, platform and DIR: the baseline, then each
 * spec at each worker count, each seed; the table, CSV, curves and plots.
 * Fills res (the caller frees its rows and groups); returns the runs that
 * failed, or -1 when none could start (said). */
static int compare_run(const cmp_opts *op, bool sim, const char *self, const char *const *specs, size_t nspecs,
                       const size_t *counts, size_t ncounts, const char *engine, cmp_result *res)
{
    const cmp_opts o = *op;
    memset(res, 0, sizeof *res);
    if (mkdir(o.out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "herd: compare: --out %s: %s\n", o.out, strerror(errno));
        return -1;
    }
    size_t ngroups = (o.no_baseline ? 0 : 1) + nspecs * ncounts;
    res->maxrows = ngroups * o.seeds;
    cmp_row *rows = res->rows = calloc(res->maxrows, sizeof *rows);
    cmp_group *groups = res->groups = calloc(ngroups, sizeof *groups);
    if (!rows || !groups) {
        fprintf(stderr, "herd: out of memory\n");
        return -1;
    }
    size_t nrows = 0;
    char where[256];
    where_of(&o, sim, where, sizeof where);
    fprintf(stderr, "herd compare: %zu spec(s) on %s, %s, %zu epoch(s)", nspecs, where, o.model ? o.model : "lenet",
            o.epochs);
    if (o.seeds > 1)
        fprintf(stderr, ", seeds %" PRIu64 "-%" PRIu64, o.seed, o.seed + o.seeds - 1);
    fprintf(stderr, "; results in %s/\n", o.out);
    /* configuration 0 the baseline (sgd on one worker), then each spec at
     * each worker count; each run once a seed */
    size_t gi = 0;
    for (size_t k = o.no_baseline ? 1 : 0; k <= nspecs * ncounts && !herd__cli_stop_signal(); k++, gi++) {
        bool baseline = k == 0;
        const char *spec = baseline ? "sgd" : specs[(k - 1) / ncounts];
        size_t n = baseline ? 1 : counts[(k - 1) % ncounts];
        groups[gi] = (cmp_group){.first = nrows, .index = gi};
        for (size_t j = 0; j < o.seeds && !herd__cli_stop_signal(); j++) {
            char seed[48] = "";
            if (o.seeds > 1)
                snprintf(seed, sizeof seed, ", seed %" PRIu64, o.seed + j);
            fprintf(stderr, "  running %s on %zu worker%s%s%s...\n", spec, n, n == 1 ? "" : "s", seed,
                    baseline ? " (baseline)" : "");
            run_one(&o, sim, self, spec, n, baseline, o.seed + j, &rows[nrows], gi);
            nrows++, groups[gi].n++;
        }
    }
    ngroups = gi;
    res->nrows = nrows, res->ngroups = ngroups;
    cmp_stat base = o.no_baseline || !ngroups ? (cmp_stat){0} : STAT(rows, &groups[0], epoch_s);
    for (size_t i = 0; i < nrows; i++)
        rows[i].speedup = base.n && rows[i].ok && rows[i].epoch_s > 0 ? base.mean / rows[i].epoch_s : NAN;
    warn_defeated(&o, rows, nrows, groups, sim);
    /* each configuration's curve: its run's, or the mean of its runs' */
    int bad_curves = 0;
    for (size_t i = 0; i < ngroups; i++) {
        cmp_group *g = &groups[i];
        snprintf(g->dat, sizeof g->dat, "%s", rows[g->first].dat);
        if (o.seeds > 1) {
            snprintf(g->dat, sizeof g->dat, "%s/run%02zu.dat", o.out, g->index);
            bad_curves += mean_curve(rows, g) != 0;
        } else if (rows[g->first].ok) {
            double(*pts)[CURVE_COLS] = malloc(MAX_POINTS * sizeof *pts);
            g->npoints = pts ? curve_load(g->dat, pts, MAX_POINTS) : 0;
            free(pts);
        }
    }
    /* stopped, the table, CSV and plot script hold the runs that ended */
    int failed = print_table(&o, rows, groups, ngroups, where, engine, sim) + bad_curves;
    if (!o.no_plots && write_plots(&o, rows, nrows, groups, ngroups, where, sim) == 0)
        fprintf(stderr, "herd compare: plots in %s/*.png and *.pdf (script %s/plots.gp)\n", o.out, o.out);
    return failed;
}

/* --sweep KEY=V,V,... and --models M,M,...: the crossover map's columns
 * (the values of one platform parameter; one column, the platform as
 * given, without --sweep) and rows (the models; --model without). */
typedef struct cmp_sweep {
    const char *key;                  /* "link" or "host-speed"; NULL: no sweep */
    const char *v[MAX_SWEEP], *m[MAX_MODELS];
    size_t nv, nm;
    char vbuf[1024], mbuf[512];
} cmp_sweep;

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
static int sweep_parse(const cmp_opts *o, cmp_sweep *sw)
{
    memset(sw, 0, sizeof *sw);
    if (o->sweep) {
        const char *eq = strchr(o->sweep, '=');
        size_t klen = eq ? (size_t)(eq - o->sweep) : 0;
        int n = eq ? split_commas(eq + 1, sw->vbuf, sizeof sw->vbuf, sw->v, MAX_SWEEP) : -1;
        if (klen == 4 && !strncmp(o->sweep, "link", 4))
            sw->key = "link";
        else if (klen == 10 && !strncmp(o->sweep, "host-speed", 10))
            sw->key = "host-speed";
        if (!sw->key || n < 1) {
            fprintf(stderr, "herd: compare: --sweep: expected KEY=V,V,... with KEY link or host-speed and 1 to %d "
                            "values, none empty (--sweep link=1Gbps:25us,10Gbps:25us), got '%s'\n", MAX_SWEEP, o->sweep);
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
        int n = split_commas(o->models, sw->mbuf, sizeof sw->mbuf, sw->m, MAX_MODELS);
        if (n < 1) {
            fprintf(stderr, "herd: compare: --models: expected 1 to %d models M,M,..., none empty, got '%s'\n",
                    MAX_MODELS, o->models);
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

/* Each swept value through herd sim --dry-run (which parses --link and
 * --host-speed; its platform files go to a directory removed after): a
 * value refused fails here, before any run. 0, or 2 (said). */
static int sweep_check(const cmp_opts *o, const cmp_sweep *sw, const char *self)
{
    char tmp[PATH_MAX], n[32], flag[32];
    const char *td = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/herd-compare.XXXXXX", td && *td ? td : "/tmp");
    if (!mkdtemp(tmp)) {
        fprintf(stderr, "herd: compare: cannot make a directory in %s: %s\n", td && *td ? td : "/tmp", strerror(errno));
        return 1;
    }
    snprintf(n, sizeof n, "%zu", o->workers);
    snprintf(flag, sizeof flag, "--%s", sw->key);
    int rc = 0;
    for (size_t i = 0; i < sw->nv && !rc; i++) {
        char *argv[] = {(char *)self, "sim", "--dry-run", "--keep", tmp, "--workers", n, "--platform",
                        (char *)(o->platform ? o->platform : "ib-100g"), flag, (char *)sw->v[i], "--", "train", NULL};
        summary_out *quiet = calloc(1, sizeof *quiet); /* its stdout: the smpirun command, not wanted */
        herd__spawn check = {.argv = argv, .timeout_s = 60, .grace_s = HERD__SPAWN_GRACE_S, .on_line = on_summary,
                             .ctx = quiet};
        double real_s;
        int st = quiet ? herd__cli_spawn(&check, &real_s) : 1;
        free(quiet);
        rc = herd__cli_stop_signal() ? 128 + herd__cli_stop_signal() : st == 2 ? 2 : st ? 1 : 0;
        if (rc == 2)
            fprintf(stderr, "herd: compare: --sweep %s value '%s' is refused (above); no run was started\n", sw->key,
                    sw->v[i]);
        else if (rc == 1)
            fprintf(stderr, "herd: compare: cannot check --sweep %s value '%s' (herd sim --dry-run: exit %d)\n",
                    sw->key, sw->v[i], st);
    }
    char f[PATH_MAX + 16];
    snprintf(f, sizeof f, "%s/platform.xml", tmp);
    unlink(f);
    snprintf(f, sizeof f, "%s/hosts", tmp);
    unlink(f);
    rmdir(tmp);
    return rc;
}

/* One spec in one cell of the map: its runs (one a seed) and those that
 * reached the target with their time to it. */
typedef struct xo_entry {
    char spec[256];
    size_t runs;
    cmp_stat tt;
} xo_entry;

/* A cell: model x swept value; its entries and winner (-1: none, no spec
 * whose runs all reached the target) and runner-up (-1: none). */
typedef struct xo_cell {
    const char *model, *value;
    char dir[PATH_MAX];
    xo_entry e[MAX_SPECS];
    size_t n;
    int win, second;
} xo_cell;

/* The winner and runner-up of c: the specs whose runs all reached the
 * target, by their mean time to it. */
static void xo_rank(xo_cell *c)
{
    c->win = c->second = -1;
    for (size_t i = 0; i < c->n; i++) {
        const xo_entry *e = &c->e[i];
        if (!e->runs || e->tt.n < e->runs)
            continue;
        if (c->win < 0 || e->tt.mean < c->e[c->win].tt.mean)
            c->second = c->win, c->win = (int)i;
        else if (c->second < 0 || e->tt.mean < c->e[c->second].tt.mean)
            c->second = (int)i;
    }
}

/* A cell's runs into crossover.csv; the cell's entries from them. */
static void xo_collect(xo_cell *c, const cmp_result *res, const cmp_sweep *sw, FILE *csv)
{
    c->n = 0;
    for (size_t gi = 0; gi < res->ngroups && c->n < MAX_SPECS; gi++) {
        const cmp_group *g = &res->groups[gi];
        const cmp_row *r0 = &res->rows[g->first];
        if (r0->baseline)
            continue;
        xo_entry *e = &c->e[c->n++];
        snprintf(e->spec, sizeof e->spec, "%s", r0->spec);
        e->runs = g->n;
        e->tt = STAT(res->rows, g, t_target);
        for (size_t i = g->first; i < g->first + g->n && csv; i++) {
            const cmp_row *r = &res->rows[i];
            char tt[32];
            fmt(tt, sizeof tt, r->ok ? r->t_target : NAN, "%.9g");
            fprintf(csv, "%s,%s,\"%s\",%s,\"%s\",%zu,%" PRIu64 ",%s,%d,%s,%.6f,%.9g\n", c->model,
                    sw->key ? sw->key : "-", c->value ? c->value : "-", strrchr(c->dir, '/') + 1, r->spec, r->workers, r->seed,
                    r->ok ? "ok" : r->stopped ? "stopped" : "failed", r->ok && !isnan(r->t_target), tt,
                    r->ok ? r->acc : NAN, r->ok ? r->epoch_s : NAN);
        }
    }
    xo_rank(c);
}

/* The unit of the map's times (s, ms or us) and its scale from seconds. */
static const char *xo_unit(const xo_cell *cells, size_t ncells, double *scale)
{
    double tmax = 0;
    for (size_t i = 0; i < ncells; i++)
        for (size_t k = 0; k < cells[i].n; k++)
            if (cells[i].e[k].tt.n && cells[i].e[k].tt.max > tmax)
                tmax = cells[i].e[k].tt.max;
    *scale = tmax < 1e-3 ? 1e6 : tmax < 1 ? 1e3 : 1;
    return tmax < 1e-3 ? "us" : tmax < 1 ? "ms" : "s";
}

/* The summary: a row a cell (winner, its mean time ± spread, runner-up,
 * its time over the winner's, whether their seeds' ranges are apart, and
 * the specs whose runs did not all reach the target), then the map (a row
 * a model, a column a value), in Markdown, to out. */
static void xo_table(FILE *out, const cmp_opts *o, const cmp_sweep *sw, const xo_cell *cells, size_t ncells,
                     const char *where)
{
    double scale;
    const char *unit = xo_unit(cells, ncells, &scale);
    char sim_unit[16];
    snprintf(sim_unit, sizeof sim_unit, "%s%s", !strcmp(where, "threads engine") ? "" : "sim ", unit);
    fprintf(out, "# herd compare crossover: %s, %zu workers, %zu epoch(s), %zu seed(s) from %" PRIu64
                 "; first to test accuracy %.2f\n\n", where, o->workers, o->epochs, o->seeds, o->seed, o->target);
    fprintf(out, "| model | %s | winner | to %.2f (%s) | runner-up | to %.2f (%s) | runner-up / winner | apart | "
                 "not all reaching %.2f |\n|---|---|---|---|---|---|---|---|---|\n",
            sw->key ? sw->key : "platform", o->target, sim_unit, o->target, sim_unit, o->target);
    for (size_t i = 0; i < ncells; i++) {
        const xo_cell *c = &cells[i];
        const xo_entry *w = c->win >= 0 ? &c->e[c->win] : NULL, *r = c->second >= 0 ? &c->e[c->second] : NULL;
        char wt[64] = "-", rt[64] = "-", ratio[32] = "-", miss[512] = "";
        if (w) {
            cmp_stat t = w->tt;
            t.mean *= scale, t.min *= scale, t.max *= scale;
            cell(wt, sizeof wt, t, "%.4g", o->seeds > 1);
        }
        if (r) {
            cmp_stat t = r->tt;
            t.mean *= scale, t.min *= scale, t.max *= scale;
            cell(rt, sizeof rt, t, "%.4g", o->seeds > 1);
            snprintf(ratio, sizeof ratio, "%.2f", r->tt.mean / w->tt.mean);
        }
        for (size_t k = 0; k < c->n; k++)
            if (c->e[k].tt.n < c->e[k].runs)
                snprintf(miss + strlen(miss), sizeof miss - strlen(miss), "%s%s %zu/%zu", miss[0] ? ", " : "",
                         c->e[k].spec, c->e[k].tt.n, c->e[k].runs);
        fprintf(out, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", c->model, c->value ? c->value : where,
                w ? w->spec : "none", wt, r ? r->spec : "-", rt, ratio, !r ? "-" : w->tt.max < r->tt.min ? "yes" : "no",
                miss[0] ? miss : "-");
    }
    fprintf(out, "\nwinner: the spec whose %zu run(s) all reached test accuracy %.2f, with the lowest mean time to "
                 "it (± spread: max - min over the seeds); none: no spec's runs all reached it. apart: the winner's "
                 "slowest seed beat the runner-up's fastest.\n\n",
            o->seeds, o->target);
    fprintf(out, "| model |");
    for (size_t v = 0; v < sw->nv; v++)
        fprintf(out, " %s |", sw->v[v] ? sw->v[v] : where);
    fprintf(out, "\n|---|");
    for (size_t v = 0; v < sw->nv; v++)
        fprintf(out, "---|");
    fputc('\n', out);
    for (size_t m = 0; m < sw->nm; m++) {
        fprintf(out, "| %s |", sw->m[m]);
        for (size_t v = 0; v < sw->nv; v++) {
            size_t i = m * sw->nv + v;
            const xo_cell *c = i < ncells ? &cells[i] : NULL;
            fprintf(out, " %s |", !c ? "(not run)" : c->win >= 0 ? c->e[c->win].spec : "none");
        }
        fputc('\n', out);
    }
}

/* The map: x the swept values, y the models, each cell coloured by its
 * winner and labelled with it, its mean time and the runner-up's over it;
 * grey where none won. DIR/crossover.gp, .dat, .png and .pdf. */
static int xo_plot(const cmp_opts *o, const cmp_sweep *sw, const xo_cell *cells, size_t ncells, const char *where,
                   const char *const *specs, size_t nspecs)
{
    static const char *const colours[] = {"#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377",
                                          "#bbbbbb", "#ee8866", "#44bb99", "#99ddff"};
    const size_t ncol = sizeof colours / sizeof colours[0];
    char path[PATH_MAX + 32], dat[PATH_MAX + 32];
    double scale;
    const char *unit = xo_unit(cells, ncells, &scale);
    snprintf(dat, sizeof dat, "%s/crossover.dat", o->out);
    FILE *d = out_open(dat);
    if (!d)
        return -1;
    fprintf(d, "# x y colour winner time: the map's cells\n");
    for (size_t i = 0; i < ncells; i++) {
        const xo_cell *c = &cells[i];
        size_t k = 0; /* the winner's colour: its spec's place on the command line */
        while (c->win >= 0 && k < nspecs && strcmp(specs[k], c->e[c->win].spec))
            k++;
        char name[300] = "none", t[96] = "no spec's runs all reached it";
        if (c->win >= 0) {
            snprintf(name, sizeof name, "%s", c->e[c->win].spec);
            gp_unquote(name);
            snprintf(t, sizeof t, "%.3g %s", c->e[c->win].tt.mean * scale, unit);
            if (c->second >= 0)
                snprintf(t + strlen(t), sizeof t - strlen(t), ", next x%.2f",
                         c->e[c->second].tt.mean / c->e[c->win].tt.mean);
        }
        unsigned rgb = 0xe0e0e0;
        if (c->win >= 0)
            rgb = (unsigned)strtoul(colours[k % ncol] + 1, NULL, 16);
        fprintf(d, "%zu %zu %u \"%s\" \"%s\"\n", i % sw->nv + 1, i / sw->nv + 1, rgb, name, t);
    }
    if (fclose(d) != 0) {
        fprintf(stderr, "herd: cannot write %s: %s\n", dat, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof path, "%s/crossover.gp", o->out);
    FILE *g = out_open(path);
    if (!g)
        return -1;
    double w = 300 + 230 * (double)sw->nv, h = 220 + 130 * (double)sw->nm;
    fprintf(g, "# herd compare: the crossover map (gnuplot %s)\n"
               "set terminal pngcairo size %.0f,%.0f enhanced font 'sans,12'\nset output '%s/crossover.png'\n"
               "set title \"First to test accuracy %.2f (%s, %zu workers, %zu epoch(s), %zu seed(s))\" noenhanced\n"
               "set xrange [0.5:%zu.5]\nset yrange [0.5:%zu.5]\nset xlabel '%s'\nset ylabel 'model'\n"
               "set tics scale 0 noenhanced\nset key outside right top box title 'winner'\nset bmargin 6\n"
               "set label 1 \"grey: none, no spec whose %zu run(s) all reached %.2f; a cell: its winner, its mean "
               "time to it and the runner-up's over it\" at screen 0.5, 0.03 center font ',9' noenhanced\n",
            path, w, h, o->out, o->target, where, o->workers, o->epochs, o->seeds, sw->nv, sw->nm,
            sw->key ? (!strcmp(sw->key, "link") ? "link of each host (bandwidth:latency)" : "speed of each host")
                    : "platform",
            o->seeds, o->target);
    fprintf(g, "set xtics (");
    for (size_t v = 0; v < sw->nv; v++)
        fprintf(g, "%s\"%s\" %zu", v ? ", " : "", sw->v[v] ? sw->v[v] : where, v + 1);
    fprintf(g, ")\nset ytics (");
    for (size_t m = 0; m < sw->nm; m++)
        fprintf(g, "%s\"%s\" %zu", m ? ", " : "", sw->m[m], m + 1);
    fprintf(g, ")\nplot '%s' using 1:2:(0.49):(0.49):3 with boxxyerror fs solid 0.55 noborder lc rgb variable notitle"
               ", \\\n  '' using 1:($2+0.1):4 with labels font ',13' noenhanced notitle"
               ", \\\n  '' using 1:($2-0.12):5 with labels font ',10' noenhanced notitle",
            dat);
    for (size_t k = 0; k < nspecs; k++) {
        char t[320];
        snprintf(t, sizeof t, "%s", specs[k]);
        gp_unquote(t);
        fprintf(g, ", \\\n  NaN with boxes fs solid 0.55 lc rgb '%s' title \"%s\"", colours[k % ncol], t);
    }
    fprintf(g, "\n");
    gp_output(g, o->out, "crossover");
    return gp_draw(g, path);
}

/* The crossover map: the comparison in each cell (model x swept value)
 * into DIR/MODEL-K, then crossover.csv, the summary (stdout and
 * crossover.md) and the map. Returns the exit status. */
static int crossover(const cmp_opts *op, const cmp_sweep *sw, bool sim, const char *self, const char *const *specs,
                     size_t nspecs, const size_t *counts, const char *engine)
{
    const cmp_opts o = *op;
    if (mkdir(o.out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "herd: compare: --out %s: %s\n", o.out, strerror(errno));
        return 1;
    }
    size_t ncells = sw->nm * sw->nv, done = 0, ended = 0;
    xo_cell *cells = calloc(ncells, sizeof *cells);
    char path[PATH_MAX + 32], where[256];
    snprintf(path, sizeof path, "%s/crossover.csv", o.out);
    FILE *csv = out_open(path);
    if (!cells || !csv) {
        if (!cells)
            fprintf(stderr, "herd: cannot write %s: out of memory\n", path);
        free(cells);
        if (csv)
            fclose(csv);
        return 1;
    }
    fprintf(csv, "model,sweep,value,cell,spec,workers,seed,status,reached,time_to_target_s,test_acc,epoch_s\n");
    where_of(&o, sim, where, sizeof where);
    int failed = 0;
    for (size_t i = 0; i < ncells && !herd__cli_stop_signal(); i++, done++) {
        xo_cell *c = &cells[i];
        cmp_opts co = o;
        c->model = co.model = sw->m[i / sw->nv];
        c->value = sw->key ? sw->v[i % sw->nv] : NULL;
        if (sw->key && !strcmp(sw->key, "link"))
            co.link = c->value;
        else if (sw->key)
            co.host_speed = c->value;
        snprintf(c->dir, sizeof c->dir, "%s/%s-%zu", o.out, c->model, i % sw->nv + 1);
        for (char *p = c->dir + strlen(o.out) + 1; *p; p++) /* a model's name is a file's */
            *p = *p == '/' || *p == ' ' ? '_' : *p;
        co.out = c->dir;
        fprintf(stderr, "herd compare: cell %zu of %zu: %s%s%s%s%s\n", i + 1, ncells, c->model, sw->key ? ", " : "",
                sw->key ? sw->key : "", c->value ? " " : "", c->value ? c->value : "");
        cmp_result res;
        int f = compare_run(&co, sim, self, specs, nspecs, counts, 1, engine, &res);
        failed += f < 0 ? 1 : f;
        xo_collect(c, &res, sw, csv);
        for (size_t k = 0; k < res.nrows; k++)
            ended += res.rows[k].ok;
        free(res.rows);
        free(res.groups);
    }
    if (fclose(csv) != 0) {
        fprintf(stderr, "herd: cannot write %s: %s\n", path, strerror(errno));
        failed++;
    }
    printf("\n");
    xo_table(stdout, &o, sw, cells, done, where);
    fflush(stdout);
    snprintf(path, sizeof path, "%s/crossover.md", o.out);
    FILE *md = out_open(path);
    if (md)
        xo_table(md, &o, sw, cells, done, where);
    if (!md || fclose(md) != 0) {
        if (md)
            fprintf(stderr, "herd: cannot write %s: %s\n", path, strerror(errno));
        failed++;
    }
    if (!o.no_plots && done && xo_plot(&o, sw, cells, done, where, specs, nspecs) == 0)
        fprintf(stderr, "herd compare: the map in %s/crossover.png and .pdf (script %s/crossover.gp)\n", o.out, o.out);
    free(cells);
    int sig = herd__cli_stop_signal();
    if (sig) {
        fprintf(stderr, "herd: compare stopped by %s: %zu of %zu cell(s) begun, %zu run(s) ended; %s/crossover.csv "
                        "has them\n", herd__cli_signal_name(sig), done, ncells, ended, o.out);
        return 128 + sig;
    }
    return failed ? 1 : 0;
}

int herd__cli_compare(int argc, char **argv)
{
    cmp_opts o = {0};
    herd__flags_defaults(cmp_opts_table, &o);
    /* flags, then specs (after "--", or the first argument that is not a flag) */
    herd__flag_cmd c = {.cmd = "compare", .opts = cmp_opts_table, .obj = &o, .usage = cmp_usage};
    int first = herd__flags_parse(&c, argc, argv, 2, true);
    if (first < argc && !strcmp(argv[first], "--"))
        first++;
    const char *defaults[] = {"allreduce", "asgd", "dpsgd", "adpsgd"};
    const char *specs[MAX_SPECS];
    size_t nspecs = 0;
    for (int i = first; i < argc; i++) {
        if (nspecs >= MAX_SPECS) {
            fprintf(stderr, "herd: compare: at most %d specs\n", MAX_SPECS);
            return 2;
        }
        specs[nspecs++] = argv[i];
    }
    for (size_t i = 0; nspecs == 0 && i < 4; i++)
        specs[i] = defaults[i];
    if (nspecs == 0)
        nspecs = 4;
    const char *engine = o.engine ? o.engine : o.platform || o.sweep ? "sim" : "threads";
    bool sim = !strcmp(engine, "sim");
    if (!sim && (o.platform || o.link || o.host_speed || o.sweep)) {
        fprintf(stderr, "herd: compare: --platform, --link, --host-speed and --sweep need --engine sim\n");
        return 2;
    }
    cmp_sweep sw;
    if (sweep_parse(&o, &sw) != 0)
        return 2;
    size_t counts[MAX_SCALE], ncounts = 0;
    if (worker_counts(&o, counts, &ncounts) != 0)
        return 2;
    for (size_t i = 0; i <= nspecs; i++) { /* the runs' seeds are compare's */
        const char *words = i < nspecs ? specs[i] : o.extra ? o.extra : "";
        if (has_seed_flag(words)) {
            fprintf(stderr, "herd: compare: --seed in %s '%s': give herd compare --seed S (its runs take S, S+1, ... "
                            "with --seeds)\n", i < nspecs ? "spec" : "--extra", words);
            return 2;
        }
    }
#ifdef HERD_CLI_NO_SPAWN
    return 1; /* the CLI fuzzer: parsing only */
#endif
    char dir[PATH_MAX], self[PATH_MAX + 16];
    snprintf(self, sizeof self, "%s/herd", herd__cli_self_dir(dir, sizeof dir));
    /* from here a signal stops the run under way and no other starts */
    herd__cli_catch_signals();
    int bad = sw.key ? sweep_check(&o, &sw, self) : 0;
    for (size_t m = 0; m < sw.nm && !bad; m++) { /* every model's flags */
        cmp_opts co = o;
        co.model = sw.m[m];
        bad = check_specs(&co, sim, self, specs, nspecs, counts[0]);
    }
    if (bad > 128)
        fprintf(stderr, "herd: compare stopped by %s before any run\n", herd__cli_signal_name(bad - 128));
    if (bad)
        return bad;
    if (o.sweep || o.models)
        return crossover(&o, &sw, sim, self, specs, nspecs, counts, engine);
    cmp_result res;
    int failed = compare_run(&o, sim, self, specs, nspecs, counts, ncounts, engine, &res);
    size_t ended = 0;
    for (size_t i = 0; i < res.nrows; i++)
        ended += res.rows[i].ok;
    free(res.rows);
    free(res.groups);
    if (failed < 0)
        return 1;
    int sig = herd__cli_stop_signal();
    if (sig) { /* one line: the comparison did not end */
        fprintf(stderr, "herd: compare stopped by %s: %zu of %zu run(s) ended; %s/compare.csv has them\n",
                herd__cli_signal_name(sig), ended, res.maxrows, o.out);
        return 128 + sig;
    }
    return failed ? 1 : 0;
}
