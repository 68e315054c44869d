/* herd compare: one comparison (herd__cmp_run) — its runs, the baseline
 * first, then each spec at each worker count, each seed; then what it
 * writes: the table on stdout, compare.csv (a row a run),
 * compare_summary.csv (a row a configuration), with --seeds > 1 each
 * configuration's mean curve with its lowest and highest, and compare.json
 * (what the comparison was and each configuration's curve file), which
 * tools/herd-plot draws the plots from. */
#include "cli/compare.h"

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

#include "core/inpath.h"
#include "core/json.h"

herd__cmp_stat herd__cmp_stat_at(const herd__cmp_row *rows, const herd__cmp_group *g, size_t off)
{
    herd__cmp_stat s = {0, NAN, NAN, NAN, NAN};
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

/* A run's curve file (read_curve) into pts, CURVE_COLS numbers a point;
 * returns the points read, at most max. */
enum { CURVE_COLS = 5, MAX_POINTS = 4096 };

static size_t curve_load(const char *dat, double (*pts)[CURVE_COLS], size_t max)
{
    FILE *f = herd__inpath_fopen(dat); /* herd compare wrote it; a FIFO in its place is not waited on */
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
static int mean_curve(const herd__cmp_row *rows, const herd__cmp_group *g)
{
    size_t nrun = 0, npts[128];
    double(*pts)[MAX_POINTS][CURVE_COLS] = calloc(128, sizeof *pts);
    FILE *out = herd__cmp_out_open(g->dat);
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
    const herd__cmp_row *r = &rows[g->first];
    fprintf(out, "# %s, %zu workers, %zu seed(s) from %" PRIu64 ": epochs time_s, then mean min max of test_acc, "
                 "test_loss and train_loss, runs\n", r->spec, r->workers, g->n, r->seed);
    for (size_t k = 0; nrun && k < npts[0]; k++) {
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
    return herd__cmp_out_close(out, g->dat, 0);
}

void herd__cmp_fmt(char *buf, size_t cap, double v, const char *f)
{
    if (isnan(v))
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, f, v);
}

void herd__cmp_cell(char *buf, size_t cap, herd__cmp_stat st, const char *f, bool spread)
{
    herd__cmp_fmt(buf, cap, st.n ? st.mean : NAN, f);
    if (spread && st.n) {
        size_t k = strlen(buf);
        snprintf(buf + k, cap - k, " ± ");
        k = strlen(buf);
        herd__cmp_fmt(buf + k, cap - k, st.max - st.min, f);
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

/* A column of the table: its name, width, alignment, whether shown. */
typedef struct table_col {
    const char *name;
    int width;
    bool left, on;
} table_col;

/* The table's title, its columns' names and the rule under them, on
 * stdout; the columns into col (two of their names into hdr). */
static void table_head(table_col col[NCOLS], char hdr[2][32], const herd__cmp_opts *o, const char *where, bool sim)
{
    bool many = o->seeds > 1;
    const char *unit = sim ? "sim s" : "s";
    snprintf(hdr[0], sizeof hdr[0], "to %.2f (%s)", o->target, unit);
    snprintf(hdr[1], sizeof hdr[1], "epoch (%s)", unit);
    const table_col cols[NCOLS] = {
        {"algorithm", 32, true, true},      {"workers", 7, false, true},        {"seeds", 5, false, many},
        {"test_acc", many ? 17 : 8, false, true}, {"model", 8, true, true},   {"worker0_acc", many ? 17 : 11, false, true},
        {hdr[0], many ? 21 : 16, false, true}, {hdr[1], many ? 21 : 14, false, true}, {"speedup", many ? 15 : 7, false, true},
        {"MB/worker", many ? 13 : 9, false, true}, {"real_s", 8, false, sim},
    };
    memcpy(col, cols, sizeof cols);
    char seeds[64] = "";
    if (many)
        snprintf(seeds, sizeof seeds, ", %zu seeds from %" PRIu64, o->seeds, o->seed);
    printf("# herd compare: %s, %s, %zu epoch(s)%s\n", where, o->model ? o->model : "lenet", o->epochs, seeds);
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
}

/* The first of g's runs that ended; g has one. */
static const herd__cmp_row *first_ended(const herd__cmp_row *rows, const herd__cmp_group *g)
{
    size_t i = g->first;
    while (!rows[i].ok)
        i++;
    return &rows[i];
}

/* A configuration's row of the table: each figure's mean over its runs
 * that ended (ended of them), with --seeds > 1 ± their spread. */
static void table_row(const table_col col[NCOLS], const herd__cmp_opts *o, const herd__cmp_row *rows,
                      const herd__cmp_group *g, size_t ended)
{
    bool many = o->seeds > 1;
    const herd__cmp_row *r0 = &rows[g->first];
    herd__cmp_stat tt = HERD__CMP_STAT(rows, g, t_target);
    char v[NCOLS][264];
    snprintf(v[0], sizeof v[0], "%s", r0->spec);
    snprintf(v[1], sizeof v[1], "%zu", r0->workers);
    snprintf(v[2], sizeof v[2], ended < g->n ? "%zu/%zu" : "%zu", ended, g->n);
    herd__cmp_cell(v[3], sizeof v[3], HERD__CMP_STAT(rows, g, acc), "%.4f", many);
    snprintf(v[4], sizeof v[4], "%s", first_ended(rows, g)->eval_model);
    herd__cmp_cell(v[5], sizeof v[5], HERD__CMP_STAT(rows, g, w0acc), "%.4f", many);
    herd__cmp_cell(v[6], sizeof v[6], tt, "%.4g", many);
    if (many && tt.n && tt.n < ended) /* not every run reached the target: how many did */
        snprintf(v[6] + strlen(v[6]), sizeof v[6] - strlen(v[6]), " (%zu/%zu)", tt.n, ended);
    herd__cmp_cell(v[7], sizeof v[7], HERD__CMP_STAT(rows, g, epoch_s), "%.4g", many);
    herd__cmp_cell(v[8], sizeof v[8], HERD__CMP_STAT(rows, g, speedup), "%.3g", many);
    herd__cmp_cell(v[9], sizeof v[9], HERD__CMP_STAT(rows, g, mb), "%.1f", many);
    herd__cmp_fmt(v[10], sizeof v[10], HERD__CMP_STAT(rows, g, real_s).mean, "%.1f");
    for (size_t c = 0; c < NCOLS; c++)
        if (col[c].on)
            put_cell(v[c], col[c].width, col[c].left);
    puts("|");
}

/* The figures of compare_summary.csv, each with its mean, spread, std, min
 * and max over a configuration's runs. */
static const struct {
    const char *name;
    size_t off;
} summary_figs[] = {
    {"test_acc", offsetof(herd__cmp_row, acc)},              {"worker0_acc", offsetof(herd__cmp_row, w0acc)},
    {"time_to_target_s", offsetof(herd__cmp_row, t_target)}, {"epoch_s", offsetof(herd__cmp_row, epoch_s)},
    {"speedup", offsetof(herd__cmp_row, speedup)},           {"mb_per_worker", offsetof(herd__cmp_row, mb)},
    {"wall_s", offsetof(herd__cmp_row, wall)},               {"real_s", offsetof(herd__cmp_row, real_s)},
};
enum { NFIGS = sizeof summary_figs / sizeof summary_figs[0] };

/* The header lines of compare.csv and compare_summary.csv (either NULL:
 * not opened). */
static void table_files_head(FILE *csv, FILE *sum)
{
    if (csv)
        fprintf(csv, "spec,engine,platform,workers,epochs,seed,test_acc,eval_model,model,worker0_acc,time_to_target_s,"
                     "epoch_s,speedup,mb_per_worker,wall_s,real_s\n");
    if (!sum)
        return;
    fprintf(sum, "spec,engine,platform,workers,epochs,seeds,runs_ended,first_seed,eval_model,target_reached");
    for (size_t f = 0; f < NFIGS; f++)
        fprintf(sum, ",%s_mean,%s_spread,%s_std,%s_min,%s_max", summary_figs[f].name, summary_figs[f].name,
                summary_figs[f].name, summary_figs[f].name, summary_figs[f].name);
    fputc('\n', sum);
}

/* g's runs that ended into compare.csv, a row a run. */
static void csv_runs(FILE *csv, const herd__cmp_row *rows, const herd__cmp_group *g, const char *engine,
                     const char *platform)
{
    for (size_t i = g->first; i < g->first + g->n; i++) {
        const herd__cmp_row *r = &rows[i];
        if (!r->ok)
            continue;
        char tt[32], sp[32];
        herd__cmp_fmt(tt, sizeof tt, r->t_target, "%.4g");
        herd__cmp_fmt(sp, sizeof sp, r->speedup, "%.3g");
        fprintf(csv, "\"%s\",%s,%s,%zu,%zu,%" PRIu64 ",%.6f,%s,\"%s\",%.6f,%s,%.9g,%s,%.6g,%.9g,%.3f\n", r->spec,
                engine, platform, r->workers, r->epochs, r->seed, r->acc, r->eval_model, r->model, r->w0acc, tt,
                r->epoch_s, sp, r->mb, r->wall, r->real_s);
    }
}

/* g's row of compare_summary.csv (ended of its runs ended). */
static void summary_row(FILE *sum, const herd__cmp_row *rows, const herd__cmp_group *g, size_t ended,
                        const char *engine, const char *platform)
{
    const herd__cmp_row *r0 = &rows[g->first], *e = first_ended(rows, g); /* e: the runs' own epochs */
    fprintf(sum, "\"%s\",%s,%s,%zu,%zu,%zu,%zu,%" PRIu64 ",%s,%zu", r0->spec, engine, platform, r0->workers,
            e->epochs, g->n, ended, r0->seed, e->eval_model, HERD__CMP_STAT(rows, g, t_target).n);
    for (size_t f = 0; f < NFIGS; f++) {
        herd__cmp_stat st = herd__cmp_stat_at(rows, g, summary_figs[f].off);
        double x[] = {st.mean, st.max - st.min, st.std, st.min, st.max};
        for (size_t k = 0; k < 5; k++) {
            char b[32];
            herd__cmp_fmt(b, sizeof b, x[k], "%.9g");
            fprintf(sum, ",%s", b);
        }
    }
    fputc('\n', sum);
}

/* The table on stdout, a row a configuration (--seeds > 1: the mean ±
 * spread of its runs), DIR/compare.csv a row a run and
 * DIR/compare_summary.csv a row a configuration; returns the number of runs
 * that failed, and of those files not written. */
static int print_table(const herd__cmp_opts *o, const herd__cmp_row *rows, const herd__cmp_group *groups,
                       size_t ngroups, const char *where, const char *engine, bool sim)
{
    table_col col[NCOLS];
    char hdr[2][32], path[PATH_MAX + 32], spath[PATH_MAX + 32];
    table_head(col, hdr, o, where, sim);
    snprintf(path, sizeof path, "%s/compare.csv", o->out);
    snprintf(spath, sizeof spath, "%s/compare_summary.csv", o->out);
    FILE *csv = herd__cmp_out_open(path), *sum = herd__cmp_out_open(spath);
    table_files_head(csv, sum);
    const char *platform = sim ? (o->platform ? o->platform : "ib-100g") : "-";
    int failed = 0;
    for (size_t gi = 0; gi < ngroups; gi++) {
        const herd__cmp_group *g = &groups[gi];
        const herd__cmp_row *r0 = &rows[g->first];
        size_t ended = 0, stopped = 0;
        for (size_t i = g->first; i < g->first + g->n; i++) {
            ended += rows[i].ok, stopped += !rows[i].ok && rows[i].stopped;
            failed += !rows[i].ok && !rows[i].stopped;
        }
        if (csv)
            csv_runs(csv, rows, g, engine, platform);
        if (!ended && stopped)
            printf("| %-32s | %7zu | stopped by %s\n", r0->spec, r0->workers,
                   herd__cli_signal_name(rows[g->first + g->n - 1].stopped));
        else if (!ended)
            printf("| %-32s | %7zu | failed (see above)\n", r0->spec, r0->workers);
        if (!ended)
            continue;
        table_row(col, o, rows, g, ended);
        if (sum)
            summary_row(sum, rows, g, ended, engine, platform);
    }
    /* the table's files are what a script reads: not written is a failure */
    failed += (herd__cmp_out_close(csv, path, 0) != 0) + (herd__cmp_out_close(sum, spath, 0) != 0);
    printf("# epoch: the median worker's training time per epoch (evaluations excluded); to %.2f: the progress (in "
           "epochs) at the first evaluation that reached it, times that epoch time\n",
           o->target);
    if (o->seeds > 1)
        printf("# each figure: the mean over the seeds' runs that ended ± their spread (max - min); to %.2f: over the "
               "runs that reached it (how many, where not all)\n", o->target);
    fflush(stdout);
    return failed;
}

void herd__cmp_where(const herd__cmp_opts *o, bool sim, char *where, size_t cap)
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
static void warn_defeated(const herd__cmp_opts *o, const herd__cmp_row *rows, size_t nrows,
                          const herd__cmp_group *groups, bool sim)
{
    if (o->no_baseline || !rows[groups[0].first].ok || !(rows[groups[0].first].step_s > 0))
        return;
    double compute = rows[groups[0].first].step_s, best = INFINITY, best_speedup = 0;
    size_t multi = 0;
    for (size_t i = 0; i < nrows; i++) {
        const herd__cmp_row *r = &rows[i];
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

int herd__cmp_json_head(FILE *f, const herd__cmp_opts *o, const char *kind, const char *where)
{
    char w[600];
    herd__json_quote(w, sizeof w, where);
    return herd__json_printf(f, "{\"kind\":\"%s\",\"where\":%s,\"epochs\":%zu,\"seeds\":%zu,\"seed\":%" PRIu64
                                ",\"target\":%.9g",
                             kind, w, o->epochs, o->seeds, o->seed, o->target);
}

/* Configuration g as compare.json gives it: its spec, workers and runs,
 * its curve file, the last time of its ended runs' curves and their
 * speedup. */
static int json_group(FILE *f, const herd__cmp_row *rows, const herd__cmp_group *g)
{
    const herd__cmp_row *r0 = &rows[g->first];
    char spec[600], curve[600], model[600];
    const char *built = NULL; /* the model the runs report building: the first that ended */
    size_t ended = 0;
    double t_last = NAN;
    for (size_t i = g->first; i < g->first + g->n; i++)
        if (rows[i].ok) {
            ended++, t_last = isnan(t_last) || rows[i].t_last > t_last ? rows[i].t_last : t_last;
            built = built ? built : rows[i].model;
        }
    herd__cmp_stat sp = HERD__CMP_STAT(rows, g, speedup);
    herd__json_quote(spec, sizeof spec, r0->spec);
    herd__json_quote(curve, sizeof curve, strrchr(g->dat, '/') + 1);
    herd__json_quote(model, sizeof model, built); /* null where no run ended */
    return herd__json_printf(f, "{\"index\":%zu,\"spec\":%s,\"workers\":%zu,\"baseline\":%s,\"runs\":%zu,"
                                "\"ended\":%zu,\"curve\":%s,\"t_last_s\":%.9g,\"speedup_mean\":%.9g,"
                                "\"speedup_min\":%.9g,\"speedup_max\":%.9g,\"model\":%s}",
                             g->index, spec, r0->workers, r0->baseline ? "true" : "false", g->n, ended, curve, t_last,
                             sp.mean, sp.min, sp.max, model);
}

/* DIR/compare.json: what the comparison was (where, the model, the worker
 * counts) and each configuration (json_group), in the order run: the data,
 * with the curve files, that tools/herd-plot draws the plots from. -1 when
 * it cannot be written (said). */
static int write_json(const herd__cmp_opts *o, const herd__cmp_plan *p, const herd__cmp_result *res,
                      const char *where)
{
    char path[PATH_MAX + 32], model[300];
    snprintf(path, sizeof path, "%s/compare.json", o->out);
    FILE *f = herd__cmp_out_open(path);
    if (!f)
        return -1;
    herd__json_quote(model, sizeof model, o->model ? o->model : "lenet");
    int bad = herd__cmp_json_head(f, o, "comparison", where);
    bad |= herd__json_printf(f, ",\"engine\":\"%s\",\"model\":%s,\"eval_every_steps\":%zu,\"scaling\":%s,"
                                "\"worker_counts\":[",
                             p->engine, model, o->eval_every_steps, o->scaling ? "true" : "false");
    for (size_t i = 0; i < p->ncounts; i++)
        bad |= herd__json_printf(f, "%s%zu", i ? "," : "", p->counts[i]);
    bad |= herd__json_printf(f, "],\"configurations\":[");
    for (size_t i = 0; i < res->ngroups; i++)
        bad |= herd__json_printf(f, "%s", i ? "," : "") | json_group(f, res->rows, &res->groups[i]);
    bad |= herd__json_printf(f, "]}\n");
    return herd__cmp_out_close(f, path, bad);
}

/* The runs of the comparison into res (allocated there, for every
 * configuration and seed): the baseline (sgd on one worker) first, then
 * each spec at each worker count, each run once a seed; until a signal
 * stops them. */
static void run_all(const herd__cmp_opts *o, const herd__cmp_plan *p, herd__cmp_result *res)
{
    size_t gi = 0, nrows = 0, ncounts = p->ncounts;
    herd__cmp_group *groups = res->groups;
    for (size_t k = o->no_baseline ? 1 : 0; k <= p->nspecs * ncounts && !herd__cli_stop_signal(); k++, gi++) {
        bool baseline = k == 0;
        const char *spec = baseline ? "sgd" : p->specs[(k - 1) / ncounts];
        size_t n = baseline ? 1 : p->counts[(k - 1) % ncounts];
        groups[gi] = (herd__cmp_group){.first = nrows, .index = gi};
        for (size_t j = 0; j < o->seeds && !herd__cli_stop_signal(); j++) {
            char seed[48] = "";
            if (o->seeds > 1)
                snprintf(seed, sizeof seed, ", seed %" PRIu64, o->seed + j);
            fprintf(stderr, "  running %s on %zu worker%s%s%s...\n", spec, n, n == 1 ? "" : "s", seed,
                    baseline ? " (baseline)" : "");
            herd__cmp_run_one(o, p, spec, n, baseline, o->seed + j, &res->rows[nrows], gi);
            nrows++, groups[gi].n++;
        }
    }
    res->nrows = nrows, res->ngroups = gi;
}

int herd__cmp_run(const herd__cmp_opts *o, const herd__cmp_plan *p, herd__cmp_result *res)
{
    memset(res, 0, sizeof *res);
    if (mkdir(o->out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "herd: compare: --out %s: %s\n", o->out, strerror(errno));
        return -1;
    }
    size_t ngroups = (o->no_baseline ? 0 : 1) + p->nspecs * p->ncounts;
    res->maxrows = ngroups * o->seeds;
    herd__cmp_row *rows = res->rows = calloc(res->maxrows, sizeof *rows);
    herd__cmp_group *groups = res->groups = calloc(ngroups, sizeof *groups);
    if (!rows || !groups) {
        fprintf(stderr, "herd: out of memory\n");
        return -1;
    }
    char where[256];
    herd__cmp_where(o, p->sim, where, sizeof where);
    fprintf(stderr, "herd compare: %zu spec(s) on %s, %s, %zu epoch(s)", p->nspecs, where,
            o->model ? o->model : "lenet", o->epochs);
    if (o->seeds > 1)
        fprintf(stderr, ", seeds %" PRIu64 "-%" PRIu64, o->seed, o->seed + o->seeds - 1);
    fprintf(stderr, "; results in %s/\n", o->out);
    run_all(o, p, res);
    herd__cmp_stat base = {0};
    if (!o->no_baseline && res->ngroups)
        base = HERD__CMP_STAT(rows, &groups[0], epoch_s);
    for (size_t i = 0; i < res->nrows; i++)
        rows[i].speedup = base.n && rows[i].ok && rows[i].epoch_s > 0 ? base.mean / rows[i].epoch_s : NAN;
    warn_defeated(o, rows, res->nrows, groups, p->sim);
    /* each configuration's curve: its run's, or the mean of its runs' */
    int failed = 0;
    for (size_t i = 0; i < res->ngroups; i++) {
        herd__cmp_group *g = &groups[i];
        snprintf(g->dat, sizeof g->dat, "%s", rows[g->first].dat);
        if (o->seeds > 1) {
            snprintf(g->dat, sizeof g->dat, "%s/run%02zu.dat", o->out, g->index);
            failed += mean_curve(rows, g) != 0;
        }
    }
    /* stopped, the table, CSV files and compare.json hold the runs that ended */
    failed += print_table(o, rows, groups, res->ngroups, where, p->engine, p->sim);
    return failed + (write_json(o, p, res, where) != 0);
}
