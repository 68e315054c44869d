/* herd compare --sweep KEY=V,V,... --models M,M,...: the crossover map.
 * The same comparison (compare.c) in each cell, a model x a value of the
 * swept platform parameter, each in a directory of its own; then which spec
 * reached the target first in each cell: DIR/crossover.csv (a row a run),
 * DIR/crossover.md and the table on stdout (a row a cell, then the map),
 * and DIR/compare.json (the cells, each spec's time to the target, the
 * winners) that tools/herd-plot draws the map from. */
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
#include <unistd.h>

#include "core/json.h"

/* herd sim --dry-run's stdout (the smpirun command it would run): not
 * wanted. */
static void quiet_line(void *ctx, const char *line)
{
    (void)ctx, (void)line;
}

/* Each swept value through herd sim --dry-run (which parses --link and
 * --host-speed; its platform files go to a directory removed after): a
 * value refused fails here, before any run. 0, or 2 (said). */
int herd__cmp_sweep_check(const herd__cmp_opts *o, const herd__cmp_sweep *sw, const char *self)
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
        herd__spawn check = {.argv = argv, .timeout_s = 60, .grace_s = HERD__SPAWN_GRACE_S, .on_line = quiet_line};
        double real_s;
        int st = herd__cli_spawn(&check, &real_s);
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
    herd__cmp_stat tt;
} xo_entry;

/* A cell: model x swept value; its entries and winner (-1: none, no spec
 * whose runs all reached the target) and runner-up (-1: none). */
typedef struct xo_cell {
    const char *model, *value;
    char dir[PATH_MAX];
    xo_entry e[HERD__CMP_MAX_SPECS];
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
static void xo_collect(xo_cell *c, const herd__cmp_result *res, const herd__cmp_sweep *sw, FILE *csv)
{
    c->n = 0;
    for (size_t gi = 0; gi < res->ngroups && c->n < HERD__CMP_MAX_SPECS; gi++) {
        const herd__cmp_group *g = &res->groups[gi];
        const herd__cmp_row *r0 = &res->rows[g->first];
        if (r0->baseline)
            continue;
        xo_entry *e = &c->e[c->n++];
        snprintf(e->spec, sizeof e->spec, "%s", r0->spec);
        e->runs = g->n;
        e->tt = HERD__CMP_STAT(res->rows, g, t_target);
        for (size_t i = g->first; i < g->first + g->n && csv; i++) {
            const herd__cmp_row *r = &res->rows[i];
            char tt[32];
            herd__cmp_fmt(tt, sizeof tt, r->ok ? r->t_target : NAN, "%.9g");
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
static void xo_table(FILE *out, const herd__cmp_opts *o, const herd__cmp_sweep *sw, const xo_cell *cells,
                     size_t ncells, const char *where)
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
            herd__cmp_stat t = w->tt;
            t.mean *= scale, t.min *= scale, t.max *= scale;
            herd__cmp_cell(wt, sizeof wt, t, "%.4g", o->seeds > 1);
        }
        if (r) {
            herd__cmp_stat t = r->tt;
            t.mean *= scale, t.min *= scale, t.max *= scale;
            herd__cmp_cell(rt, sizeof rt, t, "%.4g", o->seeds > 1);
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

/* ,"key":[v...] into f (a NULL value: null); -1 when a write fails. */
static int json_list(FILE *f, const char *key, const char *const *v, size_t n)
{
    char q[1100];
    int bad = herd__json_printf(f, ",\"%s\":[", key);
    for (size_t i = 0; i < n; i++) {
        herd__json_quote(q, sizeof q, v[i]);
        bad |= herd__json_printf(f, "%s%s", i ? "," : "", q);
    }
    return bad | herd__json_printf(f, "]");
}

/* A cell as compare.json gives it: its model, value and directory, its
 * winner and runner-up (indices into its specs; -1: none) and each spec's
 * runs, how many reached the target and their time to it. */
static int xo_json_cell(FILE *f, const xo_cell *c)
{
    char model[300], value[300], dir[600], spec[600];
    herd__json_quote(model, sizeof model, c->model);
    herd__json_quote(value, sizeof value, c->value);
    herd__json_quote(dir, sizeof dir, strrchr(c->dir, '/') + 1);
    int bad = herd__json_printf(f, "{\"model\":%s,\"value\":%s,\"dir\":%s,\"winner\":%d,\"runner_up\":%d,\"specs\":[",
                                model, value, dir, c->win, c->second);
    for (size_t k = 0; k < c->n; k++) {
        const xo_entry *e = &c->e[k];
        herd__json_quote(spec, sizeof spec, e->spec);
        bad |= herd__json_printf(f, "%s{\"spec\":%s,\"runs\":%zu,\"reached\":%zu,\"time_mean_s\":%.9g,"
                                    "\"time_min_s\":%.9g,\"time_max_s\":%.9g}",
                                 k ? "," : "", spec, e->runs, e->tt.n, e->tt.mean, e->tt.min, e->tt.max);
    }
    return bad | herd__json_printf(f, "]}");
}

/* DIR/compare.json of the map: its settings, rows (models) and columns
 * (values; null: the platform as given), the specs in their order on the
 * command line, and each cell that ran. tools/herd-plot draws the map from
 * it. -1 when it cannot be written (said). */
static int xo_json(const herd__cmp_opts *o, const herd__cmp_sweep *sw, const xo_cell *cells, size_t ncells,
                   const char *where, const herd__cmp_plan *p)
{
    char path[PATH_MAX + 32], key[64];
    snprintf(path, sizeof path, "%s/compare.json", o->out);
    FILE *f = herd__cmp_out_open(path);
    if (!f)
        return -1;
    herd__json_quote(key, sizeof key, sw->key);
    int bad = herd__cmp_json_head(f, o, "crossover", where);
    bad |= herd__json_printf(f, ",\"workers\":%zu,\"sweep\":%s", o->workers, key);
    bad |= json_list(f, "values", sw->v, sw->nv) | json_list(f, "models", sw->m, sw->nm);
    bad |= json_list(f, "specs", p->specs, p->nspecs) | herd__json_printf(f, ",\"cells\":[");
    for (size_t i = 0; i < ncells; i++)
        bad |= herd__json_printf(f, "%s", i ? "," : "") | xo_json_cell(f, &cells[i]);
    bad |= herd__json_printf(f, "]}\n");
    return herd__cmp_out_close(f, path, bad);
}

/* Cell i of the map: its model and swept value into c, its comparison into
 * DIR/MODEL-K, its runs into csv. Returns the runs that failed (a cell
 * that could not start counts one); adds those that ended to *ended. */
static int xo_cell_run(xo_cell *c, size_t i, const herd__cmp_opts *o, const herd__cmp_sweep *sw,
                       const herd__cmp_plan *p, FILE *csv, size_t *ended)
{
    herd__cmp_opts co = *o;
    c->model = co.model = sw->m[i / sw->nv];
    c->value = sw->key ? sw->v[i % sw->nv] : NULL;
    if (sw->key && !strcmp(sw->key, "link"))
        co.link = c->value;
    else if (sw->key)
        co.host_speed = c->value;
    snprintf(c->dir, sizeof c->dir, "%s/%s-%zu", o->out, c->model, i % sw->nv + 1);
    for (char *q = c->dir + strlen(o->out) + 1; *q; q++) /* a model's name is a file's */
        *q = *q == '/' || *q == ' ' ? '_' : *q;
    co.out = c->dir;
    fprintf(stderr, "herd compare: cell %zu of %zu: %s%s%s%s%s\n", i + 1, sw->nm * sw->nv, c->model,
            sw->key ? ", " : "", sw->key ? sw->key : "", c->value ? " " : "", c->value ? c->value : "");
    herd__cmp_result res;
    int f = herd__cmp_run(&co, p, &res);
    xo_collect(c, &res, sw, csv);
    for (size_t k = 0; k < res.nrows; k++)
        *ended += res.rows[k].ok;
    free(res.rows);
    free(res.groups);
    return f < 0 ? 1 : f;
}

/* The summary to stdout and DIR/crossover.md, and DIR/compare.json; the
 * files not written, each said. */
static int xo_outputs(const herd__cmp_opts *o, const herd__cmp_sweep *sw, const xo_cell *cells, size_t ncells,
                      const char *where, const herd__cmp_plan *p)
{
    char path[PATH_MAX + 32];
    int failed = 0;
    printf("\n");
    xo_table(stdout, o, sw, cells, ncells, where);
    fflush(stdout);
    snprintf(path, sizeof path, "%s/crossover.md", o->out);
    FILE *md = herd__cmp_out_open(path);
    if (md)
        xo_table(md, o, sw, cells, ncells, where);
    failed += (herd__cmp_out_close(md, path, 0) != 0) + (xo_json(o, sw, cells, ncells, where, p) != 0);
    fprintf(stderr, "herd compare: the map's runs in %s/crossover.csv, its cells in %s/compare.json; draw it and "
                    "each cell's plots with: tools/herd-plot %s\n", o->out, o->out, o->out);
    return failed;
}

int herd__cmp_crossover(const herd__cmp_opts *o, const herd__cmp_sweep *sw, const herd__cmp_plan *p)
{
    if (mkdir(o->out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "herd: compare: --out %s: %s\n", o->out, strerror(errno));
        return 1;
    }
    size_t ncells = sw->nm * sw->nv, done = 0, ended = 0;
    xo_cell *cells = calloc(ncells, sizeof *cells);
    char path[PATH_MAX + 32], where[256];
    snprintf(path, sizeof path, "%s/crossover.csv", o->out);
    FILE *csv = herd__cmp_out_open(path);
    if (!cells || !csv) {
        if (!cells)
            fprintf(stderr, "herd: cannot write %s: out of memory\n", path);
        free(cells);
        if (csv)
            fclose(csv);
        return 1;
    }
    fprintf(csv, "model,sweep,value,cell,spec,workers,seed,status,reached,time_to_target_s,test_acc,epoch_s\n");
    herd__cmp_where(o, p->sim, where, sizeof where);
    int failed = 0;
    for (size_t i = 0; i < ncells && !herd__cli_stop_signal(); i++, done++)
        failed += xo_cell_run(&cells[i], i, o, sw, p, csv, &ended);
    failed += herd__cmp_out_close(csv, path, 0) != 0;
    failed += xo_outputs(o, sw, cells, done, where, p);
    free(cells);
    int sig = herd__cli_stop_signal();
    if (sig) {
        fprintf(stderr, "herd: compare stopped by %s: %zu of %zu cell(s) begun, %zu run(s) ended; %s/crossover.csv "
                        "has them\n", herd__cli_signal_name(sig), done, ncells, ended, o->out);
        return 128 + sig;
    }
    return failed ? 1 : 0;
}
