/* compare.h — `herd compare`: algorithms side by side. compare.c is the
 * command (its flags, the checks before any run, one run of herd train),
 * compare_run.c one comparison (its runs and what it writes),
 * compare_sweep.c the crossover map; this header is what they share,
 * internal to src/cli: the options, a run's results, a comparison's.
 *
 * herd compare runs, writes its results as data and stops: the table on
 * stdout, CSV files, each run's curve and log, compare.json (what the
 * comparison was and each configuration's curve file), and with --sweep the
 * map's crossover.csv, .md and compare.json. It draws nothing: the plots are
 * tools/herd-plot's, from those files. Single-threaded; everything lives on
 * the command's stack or in buffers its caller frees. */
#ifndef HERD_CLI_COMPARE_H
#define HERD_CLI_COMPARE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/flags.h"

/* argv[1] is "compare"; returns the exit status. */
int herd__cli_compare(int argc, char **argv);

enum { HERD__CMP_MAX_SPECS = 32, HERD__CMP_MAX_SWEEP = 16, HERD__CMP_MAX_MODELS = 8 };

typedef struct herd__cmp_opts {
    const char *engine, *platform, *link, *host_speed, *model, *data, *extra, *out, *scaling, *sweep, *models;
    herd__str_list slow;
    size_t workers, epochs, seeds, eval_every_steps;
    uint64_t seed;
    double target, timeout_s;
    bool no_baseline, no_plots;
} herd__cmp_opts;

/* One run's results. */
typedef struct herd__cmp_row {
    char spec[256], eval_model[32], dat[PATH_MAX];
    char model[256];        /* the model the run built, from its summary (a spec's --model wins over compare's) */
    size_t workers, epochs; /* workers, epochs: the run's own (its summary's) */
    uint64_t seed;
    bool ok, baseline;
    int stopped; /* the signal that stopped it (it is not ok), or 0 */
    double acc, w0acc, wall, real_s, t_target, epoch_s, speedup, mb;
    double step_s; /* the median worker's time a step (epoch_s over its steps an epoch) */
    double t_last; /* its curve's last time */
} herd__cmp_row;

/* The runs of one configuration (the baseline, or a spec at a worker
 * count), one a seed: rows[first, first + n); index numbers its files. */
typedef struct herd__cmp_group {
    size_t first, n, index;
    char dat[PATH_MAX]; /* its curve: the run's, or (--seeds > 1) the mean with its band */
} herd__cmp_group;

/* The runs of one comparison, a row a run, and its configurations. */
typedef struct herd__cmp_result {
    herd__cmp_row *rows;
    herd__cmp_group *groups;
    size_t nrows, ngroups, maxrows;
} herd__cmp_result;

/* A figure over a configuration's runs that ended: n of them, their mean,
 * lowest, highest and standard deviation (n - 1; NAN below 2). */
typedef struct herd__cmp_stat {
    size_t n;
    double mean, min, max, std;
} herd__cmp_stat;

/* --sweep KEY=V,V,... and --models M,M,...: the crossover map's columns
 * (the values of one platform parameter; one column, the platform as
 * given, without --sweep) and rows (the models; --model without). */
typedef struct herd__cmp_sweep {
    const char *key; /* "link" or "host-speed"; NULL: no sweep */
    const char *v[HERD__CMP_MAX_SWEEP], *m[HERD__CMP_MAX_MODELS];
    size_t nv, nm;
    char vbuf[1024], mbuf[512];
} herd__cmp_sweep;

/* What every comparison of one command runs: the specs, at each worker
 * count, with this herd binary on one engine. */
typedef struct herd__cmp_plan {
    bool sim;           /* the engine is sim: herd sim ... -- train ... */
    const char *self;   /* this herd binary */
    const char *engine; /* "threads" or "sim", for the CSV files */
    const char *const *specs;
    size_t nspecs;
    const size_t *counts; /* the worker counts: --scaling's, or --workers */
    size_t ncounts;
} herd__cmp_plan;

/* Opens one of compare's output files for writing (core/outpath.h), saying
 * why not on stderr; NULL then. */
FILE *herd__cmp_out_open(const char *path);
/* Closes f (opened as path; NULL: herd__cmp_out_open said why), saying why
 * path was not written: a write failed before (bad, or f's error flag) or
 * the close. 0, or -1 when it was not written. */
int herd__cmp_out_close(FILE *f, const char *path, int bad);

/* The figure at offset off (a double of herd__cmp_row) over g's runs that
 * ended with a number there. */
herd__cmp_stat herd__cmp_stat_at(const herd__cmp_row *rows, const herd__cmp_group *g, size_t off);
#define HERD__CMP_STAT(rows, g, field) herd__cmp_stat_at((rows), (g), offsetof(herd__cmp_row, field))

/* v in printf format f, or "-" for NAN. */
void herd__cmp_fmt(char *buf, size_t cap, double v, const char *f);
/* A table cell: the mean of a figure in format f, with spread " ± " and its
 * spread (max - min); "-" where no run has it. */
void herd__cmp_cell(char *buf, size_t cap, herd__cmp_stat st, const char *f, bool spread);

/* Where the runs run, for titles: the engine, the platform and its
 * changes. */
void herd__cmp_where(const herd__cmp_opts *o, bool sim, char *where, size_t cap);

/* compare.json's fields that a comparison and a map share ("kind", where,
 * epochs, seeds, target...), after its opening brace; -1 when a write
 * fails. */
int herd__cmp_json_head(FILE *f, const herd__cmp_opts *o, const char *kind, const char *where);

/* compare.c: runs spec at n workers with seed, of configuration index
 * (its files DIR/runNN...); fills r from its summary and log (its curve
 * file r->dat written). */
void herd__cmp_run_one(const herd__cmp_opts *o, const herd__cmp_plan *p, const char *spec, size_t n, bool baseline,
                       uint64_t seed, herd__cmp_row *r, size_t index);

/* compare_run.c: one comparison with o's model, platform and DIR: the baseline, then each
 * spec at each worker count, each seed; the table, CSV files, curves and
 * compare.json. Fills res (the caller frees its rows and groups); returns
 * the runs that failed, or -1 when none could start (said). */
int herd__cmp_run(const herd__cmp_opts *o, const herd__cmp_plan *p, herd__cmp_result *res);

/* compare_sweep.c: each swept value through herd sim --dry-run, before any
 * run; 0, or the exit status (said). */
int herd__cmp_sweep_check(const herd__cmp_opts *o, const herd__cmp_sweep *sw, const char *self);

/* compare_sweep.c: the crossover map, the comparison in each cell (model x
 * swept value) into DIR/MODEL-K, then crossover.csv, the summary (stdout
 * and crossover.md) and compare.json. Returns the exit status. */
int herd__cmp_crossover(const herd__cmp_opts *o, const herd__cmp_sweep *sw, const herd__cmp_plan *p);

#endif
