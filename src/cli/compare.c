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
 * On the threads engine the runs share this machine's cores: compare their
 * times within one table only. On sim the times are simulated and
 * repeatable. */
#include "cli/compare.h"

#include "cli/flags.h"
#include "cli/spawn.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MAX_SPECS = 32, MAX_SCALE = 16, MAX_TOKENS = 64 };

typedef struct cmp_opts {
    const char *engine, *platform, *link, *host_speed, *model, *data, *extra, *out, *scaling;
    herd__str_list slow;
    size_t workers, epochs;
    double target, timeout_s;
    bool no_baseline, no_plots;
} cmp_opts;

/* One run's results. */
typedef struct cmp_row {
    char spec[256], eval_model[32], dat[PATH_MAX];
    size_t workers;
    bool ok, baseline;
    int stopped; /* the signal that stopped it (it is not ok), or 0 */
    double acc, w0acc, wall, real_s, t_target, epoch_s, speedup, mb;
} cmp_row;

static void cmp_flags(cmp_opts *o, herd__flag *f)
{
    const herd__flag t[] = {
        {"engine", HERD__FLAG_STR, &o->engine, "E", "threads or sim (default threads; sim when --platform is given)", NULL},
        {"platform", HERD__FLAG_STR, &o->platform, "NAME", "sim: the platform (herd sim --list; default ib-100g)", NULL},
        {"link", HERD__FLAG_STR, &o->link, "BW:LAT", "sim: each host's link (herd sim --link)", NULL},
        {"host-speed", HERD__FLAG_STR, &o->host_speed, "SPEED", "sim: each host's speed (herd sim --host-speed)", NULL},
        {"slow", HERD__FLAG_LIST, &o->slow, "RANK:FACTOR", "worker RANK FACTOR times slower in every run but the baseline", NULL},
        {"workers", HERD__FLAG_SIZE, &o->workers, "N", "workers of every run (default 8)", NULL},
        {"scaling", HERD__FLAG_STR, &o->scaling, "N,N,...", "run every algorithm at each of these worker counts instead", NULL},
        {"epochs", HERD__FLAG_SIZE, &o->epochs, "N", "epochs of every run (default 5)", NULL},
        {"model", HERD__FLAG_STR, &o->model, "M", "model (default lenet)", NULL},
        {"data", HERD__FLAG_STR, &o->data, "D", "data (herd train --data)", NULL},
        {"extra", HERD__FLAG_STR, &o->extra, "'FLAGS'", "more herd train flags for every run", NULL},
        {"target", HERD__FLAG_DOUBLE, &o->target, "ACC", "test accuracy for the time-to-target column (default 0.8)", NULL},
        {"out", HERD__FLAG_STR, &o->out, "DIR", "where the CSV, curves and plots go (default herd-compare)", NULL},
        {"no-baseline", HERD__FLAG_BOOL, &o->no_baseline, NULL, "no sgd run on one worker (no speedup column)", NULL},
        {"no-plots", HERD__FLAG_BOOL, &o->no_plots, NULL, "no gnuplot", NULL},
        {"real-timeout", HERD__FLAG_DOUBLE, &o->timeout_s, "S", "stop a run after S real seconds (default 86400)", NULL},
        {NULL, 0, NULL, NULL, NULL, NULL},
    };
    memcpy(f, t, sizeof t);
}

enum { CMP_NFLAGS = 17 };

static void cmp_usage(FILE *out)
{
    cmp_opts o = {0};
    herd__flag f[CMP_NFLAGS];
    cmp_flags(&o, f);
    fprintf(out, "usage: herd compare [flags] [--] 'ALGO [FLAGS]' ...\n\n"
                    "Runs each algorithm spec (default: allreduce asgd dpsgd adpsgd) with the same data,\n"
                    "model, workers and epochs, and prints one table; writes DIR/compare.csv, the curves\n"
                    "DIR/*.dat and the plots DIR/*.png and DIR/*.pdf.\n"
                    "  herd compare --platform ib-100g --workers 16 --slow 3:10 allreduce dpsgd adpsgd\n\n");
    herd__flags_print(f, out);
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

/* Reads the eval records of a run's log into its curve file (epoch, time,
 * test_acc, test_loss, train_loss) and the time to target. The time is worker
 * 0's training time at the evaluation (its "train_s": evaluations excluded,
 * which asynchronous workers would otherwise count as training), or the
 * record's time since the start in logs that lack it. */
static void read_curve(cmp_row *r, const char *log, double target)
{
    r->t_target = NAN;
    FILE *in = fopen(log, "r"), *out = fopen(r->dat, "w");
    if (out)
        fprintf(out, "# %s, %zu workers: epoch time_s test_acc test_loss train_loss\n", r->spec, r->workers);
    char line[8192];
    while (in && fgets(line, sizeof line, in)) {
        if (!strstr(line, "\"event\":\"eval\"") || json_num(line, "worker") != 0)
            continue;
        double t = json_num(line, "train_s"), acc = json_num(line, "test_acc");
        if (isnan(t))
            t = json_num(line, "t");
        if (out)
            fprintf(out, "%g %.9g %.6f %.6f %.6f\n", json_num(line, "epoch"), t, acc, json_num(line, "test_loss"),
                    json_num(line, "train_loss"));
        if (isnan(r->t_target) && acc >= target)
            r->t_target = t;
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
    char spec[1024], extra[1024], n[32], epochs[32];
    char *argv[3 * MAX_TOKENS + 48];
} run_cmd;

/* Fills c with the command that runs spec at n workers, its log into log:
 * `herd train ... --json --log LOG` or `herd sim ... -- train ...`; with
 * log NULL, the same herd train flags with --dry-run (nothing run: the
 * flags, the algorithm and its options checked). -1 when the spec is
 * empty, or it or --extra too long. */
static int run_cmd_make(run_cmd *c, const cmp_opts *o, bool sim, const char *self, const char *spec, size_t n,
                        bool baseline, const char *log)
{
    char *tok[MAX_TOKENS], *xtok[MAX_TOKENS];
    int nt = split(spec, c->spec, sizeof c->spec, tok, MAX_TOKENS);
    int nx = o->extra ? split(o->extra, c->extra, sizeof c->extra, xtok, MAX_TOKENS) : 0;
    if (nt < 1 || nx < 0)
        return -1;
    snprintf(c->n, sizeof c->n, "%zu", n);
    snprintf(c->epochs, sizeof c->epochs, "%zu", o->epochs);
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
    argv[k++] = "--epochs", argv[k++] = c->epochs;
    argv[k++] = "--model", argv[k++] = (char *)(o->model ? o->model : "lenet");
    if (o->data)
        argv[k++] = "--data", argv[k++] = (char *)o->data;
    for (int i = 0; i < nx; i++)
        argv[k++] = xtok[i];
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

/* Runs one spec at n workers; fills r. */
static void run_one(const cmp_opts *o, bool sim, const char *self, const char *spec, size_t n, bool baseline,
                    cmp_row *r, size_t index)
{
    char log[PATH_MAX];
    memset(r, 0, sizeof *r);
    snprintf(r->spec, sizeof r->spec, "%s", spec);
    r->workers = n, r->baseline = baseline;
    snprintf(r->dat, sizeof r->dat, "%s/run%02zu.dat", o->out, index);
    snprintf(log, sizeof log, "%s/run%02zu.jsonl", o->out, index);
    run_cmd *c = calloc(1, sizeof *c);
    summary_out *s = calloc(1, sizeof *s);
    if (!c || !s) {
        fprintf(stderr, "herd: out of memory\n");
        goto out;
    }
    if (run_cmd_make(c, o, sim, self, spec, n, baseline, log) != 0) {
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
        fprintf(stderr, "herd: compare: '%s' on %zu worker(s) failed (exit %d)\n", spec, n, rc);
        goto out;
    }
    r->ok = true;
    r->acc = json_num(s->line, "test_acc");
    r->w0acc = json_num(s->line, "worker0_acc");
    r->wall = json_num(s->line, "wall_s");
    double epochs = json_num(s->line, "epochs"), bytes = json_num(s->line, "bytes_sent");
    /* the median worker's: an asynchronous run's slowest worker can take
     * longer for one slowed step than the others for their epoch */
    r->epoch_s = json_num(s->line, "epoch_s_median");
    if (isnan(r->epoch_s) || r->epoch_s <= 0)
        r->epoch_s = epochs > 0 ? json_num(s->line, "train_s") / epochs : NAN;
    r->mb = bytes / 1e6 / (double)n;
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
        if (run_cmd_make(c, o, sim, self, spec, workers, i == 0, NULL) != 0) {
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

static void fmt(char *buf, size_t cap, double v, const char *f)
{
    if (isnan(v))
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, f, v);
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
 * training time (read_curve). */
static void time_axis(const cmp_row *rows, size_t nrows, bool sim, char *label, size_t cap, double *scale)
{
    double tmax = 0;
    for (size_t i = 0; i < nrows; i++)
        if (rows[i].ok && rows[i].wall > tmax)
            tmax = rows[i].wall;
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

static int write_plots(const cmp_opts *o, const cmp_row *rows, size_t nrows, const char *where, bool sim)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/plots.gp", o->out);
    FILE *g = fopen(path, "w");
    if (!g) {
        fprintf(stderr, "herd: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
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
    char time_label[96];
    double tscale;
    time_axis(rows, nrows, sim, time_label, sizeof time_label, &tscale);
    for (size_t p = 0; p < sizeof plots / sizeof plots[0]; p++) {
        bool epochs = plots[p].epochs;
        fprintf(g, "\nset output '%s/%s.png'\nset title \"%s (%s, %s)\"\nset xlabel '%s'\nset ylabel '%s'\n%s\nplot ",
                o->out, plots[p].file, plots[p].title, where, o->model ? o->model : "lenet",
                epochs ? "epoch" : time_label, plots[p].ylabel,
                epochs && o->epochs <= 20 ? "set xtics 1" : "set xtics autofreq");
        bool first = true;
        for (size_t i = 0; i < nrows; i++) {
            if (!rows[i].ok)
                continue;
            char t[320];
            gp_title(t, sizeof t, &rows[i], true);
            fprintf(g, "%s\\\n  '%s' using ($%d*%g):%d title \"%s\" lc %zu dt 1", first ? "" : ", ", rows[i].dat,
                    epochs ? 1 : 2, epochs ? 1.0 : tscale, plots[p].loss ? 4 : 3, t, i + 1);
            if (plots[p].loss)
                fprintf(g, ", \\\n  '%s' using ($%d*%g):5 notitle lc %zu dt 2 pt 6", rows[i].dat, epochs ? 1 : 2,
                        epochs ? 1.0 : tscale, i + 1);
            first = false;
        }
        if (first)
            fprintf(g, "NaN notitle");
        else if (plots[p].loss)
            fprintf(g, ", \\\n  NaN title 'solid: test loss' with linespoints lc rgb 'black' dt 1 pt 7"
                       ", \\\n  NaN title 'dashed: train loss (epoch mean)' with linespoints lc rgb 'black' dt 2 pt 6");
        fprintf(g, "\n");
        gp_output(g, o->out, plots[p].file);
    }
    if (scaling) {
        /* one speedup file: workers then one column per spec */
        snprintf(path, sizeof path, "%s/speedup.dat", o->out);
        FILE *d = fopen(path, "w");
        if (!d) {
            fclose(g);
            fprintf(stderr, "herd: cannot write %s: %s\n", path, strerror(errno));
            return -1;
        }
        /* a log axis takes its ticks from the worker counts run: autofreq
         * or "set xtics 1" on a log axis left it unlabelled */
        size_t counts[MAX_SCALE], ncounts = 0;
        worker_counts(o, counts, &ncounts);
        fprintf(g, "\nset output '%s/speedup_workers.png'\nset title \"Speedup over one sgd worker (%s)\"\n"
                   "set xlabel 'workers'\nset ylabel 'speedup (time per epoch)'\nset logscale xy 2\n"
                   "set format xy '%%g'\nset key left top\nset xtics (",
                o->out, where);
        for (size_t i = 0; i < ncounts; i++)
            fprintf(g, "%s%zu", i ? ", " : "", counts[i]);
        fprintf(g, ")\nplot x title 'linear' with lines dt 2 lc rgb '#808080'");
        size_t col = 2;
        for (size_t i = 0; i < nrows; i++) {
            if (rows[i].baseline || (i > 0 && !strcmp(rows[i].spec, rows[i - 1].spec) && !rows[i - 1].baseline))
                continue;
            char t[320];
            gp_title(t, sizeof t, &rows[i], false);
            fprintf(d, "# %s\n", rows[i].spec);
            for (size_t j = i; j < nrows && !strcmp(rows[j].spec, rows[i].spec) && !rows[j].baseline; j++)
                if (rows[j].ok && !isnan(rows[j].speedup))
                    fprintf(d, "%zu %.6g\n", rows[j].workers, rows[j].speedup);
            fprintf(d, "\n\n");
            fprintf(g, ", \\\n  '%s' index %zu using 1:2 title \"%s\"", path, col - 2, t);
            col++;
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
    if (fclose(g) != 0) {
        fprintf(stderr, "herd: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof path, "%s/plots.gp", o->out);
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

/* The table on stdout and DIR/compare.csv; returns the number of runs that failed. */
static int print_table(const cmp_opts *op, const cmp_row *rows, size_t nrows, const char *where, const char *engine,
                       bool sim)
{
    const cmp_opts o = *op;
    const char *unit = sim ? "sim s" : "s";
    char hdr_t[32], hdr_e[32];
    snprintf(hdr_t, sizeof hdr_t, "to %.2f (%s)", o.target, unit);
    snprintf(hdr_e, sizeof hdr_e, "epoch (%s)", unit);
    printf("# herd compare: %s, %s, %zu epoch(s)\n", where, o.model ? o.model : "lenet", o.epochs);
    printf("| %-32s | %7s | %8s | %-8s | %11s | %16s | %14s | %7s | %9s |%s\n", "algorithm", "workers", "test_acc",
           "model", "worker0_acc", hdr_t, hdr_e, "speedup", "MB/worker", sim ? "   real_s |" : "");
    printf("|%s|%s\n", "----------------------------------|---------|----------|----------|-------------|------------------|----------------|---------|-----------",
           sim ? "----------|" : "");
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/compare.csv", o.out);
    FILE *csv = fopen(path, "w");
    if (csv)
        fprintf(csv, "spec,engine,platform,workers,epochs,test_acc,eval_model,worker0_acc,time_to_target_s,epoch_s,"
                     "speedup,mb_per_worker,wall_s,real_s\n");
    int failed = 0;
    for (size_t i = 0; i < nrows; i++) {
        const cmp_row *r = &rows[i];
        if (!r->ok) {
            if (r->stopped)
                printf("| %-32s | %7zu | stopped by %s\n", r->spec, r->workers, herd__cli_signal_name(r->stopped));
            else
                printf("| %-32s | %7zu | failed (see above)\n", r->spec, r->workers);
            failed += !r->stopped;
            continue;
        }
        char tt[32], es[32], sp[32], rs[32];
        fmt(tt, sizeof tt, r->t_target, "%.4g");
        fmt(es, sizeof es, r->epoch_s, "%.4g");
        fmt(sp, sizeof sp, r->speedup, "%.3g");
        snprintf(rs, sizeof rs, " %8.1f |", r->real_s);
        printf("| %-32s | %7zu | %8.4f | %-8s | %11.4f | %16s | %14s | %7s | %9.1f |%s\n", r->spec, r->workers, r->acc,
               r->eval_model, r->w0acc, tt, es, sp, r->mb, sim ? rs : "");
        if (csv)
            fprintf(csv, "\"%s\",%s,%s,%zu,%zu,%.6f,%s,%.6f,%s,%.9g,%s,%.6g,%.9g,%.3f\n", r->spec, engine,
                    sim ? (o.platform ? o.platform : "ib-100g") : "-", r->workers, o.epochs, r->acc, r->eval_model,
                    r->w0acc, tt, r->epoch_s, sp, r->mb, r->wall, r->real_s);
    }
    if (!csv || fclose(csv) != 0) { /* the table's file is what a script reads: not written is a failure */
        fprintf(stderr, "herd: cannot write %s: %s\n", path, strerror(errno));
        failed++;
    }
    printf("# epoch: the median worker's training time per epoch; to %.2f: worker 0's training time (evaluations "
           "excluded) until an evaluation first reached it\n",
           o.target);
    fflush(stdout);
    return failed;
}

int herd__cli_compare(int argc, char **argv)
{
    cmp_opts o = {.workers = 8, .epochs = 5, .target = 0.8, .out = "herd-compare", .timeout_s = 86400};
    herd__flag f[CMP_NFLAGS];
    cmp_flags(&o, f);
    /* flags, then specs (after "--", or the first argument that is not a flag) */
    int first = herd__flags_parse(&(herd__flag_cmd){.cmd = "compare", .flags = f, .usage = cmp_usage}, argc, argv, 2, true);
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
    const char *engine = o.engine ? o.engine : o.platform ? "sim" : "threads";
    bool sim = !strcmp(engine, "sim");
    if (!sim && strcmp(engine, "threads")) {
        fprintf(stderr, "herd: compare: --engine must be threads or sim, got '%s'\n", engine);
        return 2;
    }
    if (!sim && (o.platform || o.link || o.host_speed)) {
        fprintf(stderr, "herd: compare: --platform, --link and --host-speed need --engine sim\n");
        return 2;
    }
    size_t counts[MAX_SCALE], ncounts = 0;
    if (worker_counts(&o, counts, &ncounts) != 0)
        return 2;
    if (o.workers < 1 || o.epochs < 1 || !(o.timeout_s > 0) || !(o.target > 0 && o.target <= 1)) {
        fprintf(stderr, "herd: compare: --workers and --epochs must be at least 1, --target in (0, 1]\n");
        return 2;
    }
#ifdef HERD_CLI_NO_SPAWN
    return 1; /* the CLI fuzzer: parsing only */
#endif
    char dir[PATH_MAX], self[PATH_MAX + 16];
    snprintf(self, sizeof self, "%s/herd", herd__cli_self_dir(dir, sizeof dir));
    /* from here a signal stops the run under way and no other starts */
    herd__cli_catch_signals();
    int bad = check_specs(&o, sim, self, specs, nspecs, counts[0]);
    if (bad > 128)
        fprintf(stderr, "herd: compare stopped by %s before any run\n", herd__cli_signal_name(bad - 128));
    if (bad)
        return bad;
    if (mkdir(o.out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "herd: compare: --out %s: %s\n", o.out, strerror(errno));
        return 1;
    }
    size_t maxrows = (o.no_baseline ? 0 : 1) + nspecs * ncounts;
    cmp_row *rows = calloc(maxrows, sizeof *rows);
    if (!rows) {
        fprintf(stderr, "herd: out of memory\n");
        return 1;
    }
    size_t nrows = 0;
    char where[256];
    if (sim)
        snprintf(where, sizeof where, "sim, %s%s%s%s%s", o.platform ? o.platform : "ib-100g", o.link ? ", link " : "",
                 o.link ? o.link : "", o.host_speed ? ", hosts " : "", o.host_speed ? o.host_speed : "");
    else
        snprintf(where, sizeof where, "threads engine");
    for (size_t i = 0; i < o.slow.n; i++)
        snprintf(where + strlen(where), sizeof where - strlen(where), ", --slow %s", o.slow.v[i]);
    fprintf(stderr, "herd compare: %zu spec(s) on %s, %s, %zu epoch(s); results in %s/\n", nspecs, where,
            o.model ? o.model : "lenet", o.epochs, o.out);
    if (!o.no_baseline) {
        fprintf(stderr, "  running sgd on 1 worker (baseline)...\n");
        run_one(&o, sim, self, "sgd", 1, true, &rows[nrows], nrows);
        nrows++;
    }
    for (size_t s = 0; s < nspecs && !herd__cli_stop_signal(); s++)
        for (size_t c = 0; c < ncounts && !herd__cli_stop_signal(); c++) {
            fprintf(stderr, "  running %s on %zu workers...\n", specs[s], counts[c]);
            run_one(&o, sim, self, specs[s], counts[c], false, &rows[nrows], nrows);
            nrows++;
        }
    double base = !o.no_baseline && rows[0].ok ? rows[0].epoch_s : NAN;
    for (size_t i = 0; i < nrows; i++)
        rows[i].speedup = rows[i].ok && rows[i].epoch_s > 0 ? base / rows[i].epoch_s : NAN;
    /* stopped, the table, CSV and plot script hold the runs that ended */
    int failed = print_table(&o, rows, nrows, where, engine, sim);
    if (!o.no_plots && write_plots(&o, rows, nrows, where, sim) == 0)
        fprintf(stderr, "herd compare: plots in %s/*.png and *.pdf (script %s/plots.gp)\n", o.out, o.out);
    size_t ended = 0;
    for (size_t i = 0; i < nrows; i++)
        ended += rows[i].ok;
    free(rows);
    int sig = herd__cli_stop_signal();
    if (sig) { /* one line: the comparison did not end */
        fprintf(stderr, "herd: compare stopped by %s: %zu of %zu run(s) ended; %s/compare.csv has them\n",
                herd__cli_signal_name(sig), ended, maxrows, o.out);
        return 128 + sig;
    }
    return failed ? 1 : 0;
}
