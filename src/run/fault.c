/* --fail and --slow: a worker that stops or dies on purpose at a step, and
 * one whose compute takes longer than it does (fault.h). */
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "run/fault.h"
#include "run/log.h"
#include "run/run.h"

void herd__fault_init(herd__fault *f, const herd__train_config *cfg, size_t rank)
{
    f->fail_step = SIZE_MAX;
    for (size_t i = 0; i < cfg->nfail; i++)
        if (cfg->fail[i].rank == rank && cfg->fail[i].step < f->fail_step)
            f->fail_step = cfg->fail[i].step, f->fail_mode = cfg->fail[i].mode;
    f->slow_factor = 1.0;
    for (size_t i = 0; i < cfg->nslow; i++)
        if (cfg->slow[i].rank == rank)
            f->slow_factor = cfg->slow[i].factor;
}

herd_status herd__fault_fail(herd__fault *f, herd_run *r, herd_worker *w)
{
    herd__log_record(&r->log, "fail", "\"worker\":%zu,\"step\":%zu,\"mode\":\"%s\"", w->rank, w->step,
                     herd__fail_mode_name(f->fail_mode));
    if (f->fail_mode != HERD_FAIL_STOP) { /* mpi: a process that dies, as the others must survive or report */
        fprintf(stderr, "herd: worker %zu dies at step %zu (--fail %zu@%zu:%s)\n", w->rank, w->step, w->rank,
                w->step, herd__fail_mode_name(f->fail_mode));
        fflush(NULL); /* the log's "fail" record and the line above */
        if (f->fail_mode == HERD_FAIL_ABORT)
            abort();
        if (f->fail_mode == HERD_FAIL_KILL)
            raise(SIGKILL);
        _exit(f->fail_mode == HERD_FAIL_EXIT0 ? 0 : 1); /* no MPI_Finalize: the process just ends */
    }
    if (r->algo_ops->async) {
        atomic_store(&r->lost[w->rank], true);
        f->lost = true;
        if (!r->cfg->quiet)
            fprintf(stderr, "%sworker %zu stops at step %zu (--fail); the others go on\n",
                    r->tty && r->cfg->progress ? "\r" : "", w->rank, w->step);
        return HERD_OK;
    }
    return herd_err_set(&w->err, HERD_EKILLED, "worker %zu stopped at step %zu (--fail %zu@%zu)", w->rank, w->step,
                        w->rank, w->step);
}

/* A straggler's extra time: slept in slices of at most 50 ms, so a run
 * that another worker has already failed does not wait it out. */
static void straggle(const herd_run *r, double s)
{
    double end = herd__now() + s;
    for (double left = s; left > 0 && !atomic_load(&r->abort); left = end - herd__now()) {
        double d = left < 0.05 ? left : 0.05;
        struct timespec ts = {(time_t)d, (long)((d - floor(d)) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

void herd__fault_slow(const herd__fault *f, const herd_run *r, const herd_worker *w, double compute_s)
{
    if (f->slow_factor > 1.0 && w->step > 0)
        straggle(r, compute_s * (f->slow_factor - 1.0));
}
