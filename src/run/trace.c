/* --trace FILE: each worker's timeline as a Chrome trace (the Trace Event
 * Format that chrome://tracing and Perfetto read). A worker keeps its spans
 * in memory (no lock, no I/O during the run) and the process writes them
 * once the workers have stopped: rank 0's process to FILE, another
 * process's to FILE.rank<r>, as the log. Timestamps are the monotonic
 * clock's microseconds (the sim engine's: simulated time), so that the
 * files of ranks on one host line up when loaded together. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/outpath.h"
#include "run/run.h"
#include "run/trace.h"

static const char *const span_names[HERD__SPAN_COUNT] = {
    [HERD__SPAN_PULL] = "pull",
    [HERD__SPAN_COMPUTE] = "compute",
    [HERD__SPAN_EXCHANGE] = "exchange",
    [HERD__SPAN_BATCH] = "batch",
    [HERD__SPAN_EVAL] = "eval",
    [HERD__SPAN_CHECKPOINT] = "checkpoint",
    [HERD__SPAN_FORWARD] = "forward",
    [HERD__SPAN_BACKWARD] = "backward",
    [HERD__SPAN_UPDATE] = "update",
};

static const char *const span_cats[HERD__SPAN_COUNT] = {
    [HERD__SPAN_PULL] = "comm",     [HERD__SPAN_COMPUTE] = "compute", [HERD__SPAN_EXCHANGE] = "comm",
    [HERD__SPAN_BATCH] = "comm",    [HERD__SPAN_EVAL] = "compute",    [HERD__SPAN_CHECKPOINT] = "io",
    [HERD__SPAN_FORWARD] = "phase", [HERD__SPAN_BACKWARD] = "phase",  [HERD__SPAN_UPDATE] = "phase",
};

void herd__trace_span(herd__trace *t, const herd_worker *w, herd__span kind, double t0, double t1)
{
    if (!w->cfg->trace_path || t->failed)
        return;
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4096;
        herd__trace_ev *ev = realloc(t->ev, cap * sizeof *ev);
        if (!ev) { /* said when the file is written: a trace with a hole is not written */
            t->failed = true;
            return;
        }
        t->ev = ev, t->cap = cap;
    }
    t->ev[t->n++] = (herd__trace_ev){.t0 = t0, .t1 = t1, .step = w->step, .kind = kind};
}

void herd__trace_free(herd__trace *t)
{
    free(t->ev);
    *t = (herd__trace){0};
}

/* This process's trace file: --trace's path, with ".rankN" past rank 0. */
static void trace_name(const herd_run *r, char *name, size_t cap)
{
    if (r->first_rank)
        snprintf(name, cap, "%s.rank%zu", r->cfg->trace_path, r->first_rank);
    else
        snprintf(name, cap, "%s", r->cfg->trace_path);
}

herd_status herd__trace_check(const herd_run *r, herd_err *err)
{
    char name[4096];
    herd__outpath o;
    if (!r->cfg->trace_path)
        return HERD_OK;
    trace_name(r, name, sizeof name);
    return herd__outpath_check(name, "--trace", &o, err);
}

herd_status herd__trace_write(const herd_run *r, const worker_ctx *workers, herd_err *err)
{
    const char *path = r->cfg->trace_path;
    char name[4096];
    if (!path)
        return HERD_OK;
    for (size_t i = 0; i < r->nlocal; i++)
        if (workers[i].trace.failed)
            return herd_err_set(err, HERD_ENOMEM, "--trace %s: out of memory for worker %zu's spans", path,
                                r->first_rank + i);
    trace_name(r, name, sizeof name);
    FILE *f;
    herd_status st = herd__outpath_fopen(name, "w", "--trace", &f, err);
    if (st < 0)
        return st;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"run_id\":\"%s\",\"algo\":\"%s\"},\"traceEvents\":[\n",
            r->run_id, r->algo_ops->name);
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%zu,\"args\":{\"name\":\"rank %zu\"}}", r->first_rank,
            r->first_rank);
    for (size_t i = 0; i < r->nlocal; i++) {
        const worker_ctx *c = &workers[i];
        size_t rank = r->first_rank + i;
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%zu,\"tid\":%zu,\"args\":{\"name\":\"worker %zu\"}}",
                r->first_rank, rank, rank);
        for (size_t k = 0; k < c->trace.n; k++) {
            const herd__trace_ev *e = &c->trace.ev[k];
            fprintf(f,
                    ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%zu,\"tid\":%zu,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"step\":%zu}}",
                    span_names[e->kind], span_cats[e->kind], r->first_rank, rank, e->t0 * 1e6,
                    (e->t1 - e->t0) * 1e6, e->step);
        }
    }
    fprintf(f, "\n]}\n");
    int bad = ferror(f) ? (errno ? errno : EIO) : 0;
    if (fclose(f) != 0 && !bad)
        bad = errno ? errno : EIO;
    if (bad)
        return herd_err_set(err, HERD_EIO, "cannot write trace file %s: %s", name, strerror(bad));
    return HERD_OK;
}
