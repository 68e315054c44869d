/* herd bench allreduce: the collective alone, measured as nccl-tests does.
 * time is the median over iterations of the slowest rank's time; algbw =
 * bytes / time; busbw = algbw * 2(n-1)/n, the per-link rate a ring needs,
 * comparable across world sizes. #wrong counts elements that differ from the
 * closed form sum over ranks of (rank+1)*v(i) = n(n+1)/2 * v(i). */
#include "herd/herd_run.h"

#include <stdlib.h>
#include <string.h>

#include "herd/herd_comm.h"
#include "core/args.h"
#include "run/log.h"

typedef struct bench_ctx {
    herd_comm *comm;
    const herd_bench_allreduce_config *cfg;
    herd_bench_row *rows; /* filled by rank 0 */
    size_t nrows;
    herd_status st;
    herd_err err;
} bench_ctx;

static float value_at(size_t i) { return (float)(i % 13 + 1); }

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One timed allreduce of count floats: the slowest rank's seconds (an
 * allreduce is done when all are); adds the elements that differ from the
 * closed form to *wrong. every: room for one double per rank. */
static herd_status time_one(herd_comm *c, float *buf, size_t count, const herd_allreduce_opts *opts, double *every,
                            double *secs, size_t *wrong)
{
    herd_status st = HERD_OK;
    size_t n = c->size;
    for (size_t i = 0; i < count; i++)
        buf[i] = (float)(c->rank + 1) * value_at(i);
    HERD_TRY(herd_comm_barrier(c));
    double t0 = herd__now();
    HERD_TRY(herd_allreduce(c, buf, count, opts));
    double dt = herd__now() - t0;
    HERD_TRY(herd_allgather(c, &dt, every, sizeof(double)));
    for (size_t r = 0; r < n; r++)
        dt = every[r] > dt ? every[r] : dt;
    *secs = dt;
    float k = (float)(n * (n + 1) / 2);
    for (size_t i = 0; i < count; i++) {
        float want = k * value_at(i);
        /* low-precision wires round; count only real errors */
        float tol = opts->wire == HERD_F32 ? 0.0f : want * 0.01f;
        if (!(buf[i] >= want - tol && buf[i] <= want + tol))
            (*wrong)++;
    }
out:
    return st;
}

static void fill_row(herd_bench_row *row, size_t bytes, size_t n, double t, size_t wrong)
{
    row->bytes = bytes;
    row->time_us = t * 1e6;
    row->algbw_gbs = t > 0 ? (double)bytes / t * 1e-9 : 0;
    row->busbw_gbs = row->algbw_gbs * (n > 1 ? 2.0 * (double)(n - 1) / (double)n : 0.0);
    row->wrong = wrong;
}

/* Per size: warm-up, then iters timed calls, the median of them reported.
 * With cfg->versus_native, each iteration times herd's ring and the
 * engine's own allreduce back to back (their order alternating), so a noisy
 * machine slows both alike and their ratio stays meaningful. */
static herd_status bench_rank(bench_ctx *b)
{
    herd_status st = HERD_OK;
    const herd_bench_allreduce_config *cfg = b->cfg;
    herd_comm *c = b->comm;
    size_t n = c->size, maxc = cfg->max_bytes / sizeof(float);
    float *buf = malloc((maxc ? maxc : 1) * sizeof(float));
    double *times[2] = {malloc(cfg->iters * sizeof(double)), malloc(cfg->iters * sizeof(double))};
    double *every = malloc(n * sizeof(double));
    if (!buf || !times[0] || !times[1] || !every) {
        st = herd_err_set(&b->err, HERD_ENOMEM, "out of memory for %zu bytes", cfg->max_bytes);
        goto out;
    }
    herd_allreduce_opts opts[2] = {cfg->opts, cfg->opts};
    opts[0].impl = cfg->versus_native ? HERD_ALLREDUCE_RING : opts[0].impl;
    opts[1].impl = HERD_ALLREDUCE_NATIVE;
    size_t nimpl = cfg->versus_native ? 2 : 1;
    b->nrows = 0;
    for (size_t bytes = cfg->min_bytes; bytes <= cfg->max_bytes; bytes *= 2) {
        size_t count = bytes / sizeof(float), wrong[2] = {0, 0};
        for (size_t it = 0; it < cfg->warmup + cfg->iters; it++)
            for (size_t k = 0; k < nimpl; k++) {
                size_t impl = (k + it) % nimpl, trash = 0;
                double t;
                HERD_TRY(time_one(c, buf, count, &opts[impl], every, &t, it < cfg->warmup ? &trash : &wrong[impl]));
                if (it >= cfg->warmup)
                    times[impl][it - cfg->warmup] = t;
            }
        if (c->rank == 0 && b->nrows < HERD_BENCH_MAX_ROWS) {
            herd_bench_row *row = &b->rows[b->nrows++];
            for (size_t k = 0; k < nimpl; k++)
                qsort(times[k], cfg->iters, sizeof(double), cmp_double);
            fill_row(row, bytes, n, times[0][cfg->iters / 2], wrong[0]);
            if (nimpl == 2) {
                herd_bench_row alt;
                fill_row(&alt, bytes, n, times[1][cfg->iters / 2], wrong[1]);
                row->native_time_us = alt.time_us;
                row->native_busbw_gbs = alt.busbw_gbs;
                row->wrong += alt.wrong;
            }
        }
        if (bytes == 0)
            break;
    }
out:
    if (st < 0 && !b->err.msg[0])
        b->err = c->err;
    free(buf);
    free(times[0]);
    free(times[1]);
    free(every);
    return st;
}

static void *bench_thread(void *p)
{
    bench_ctx *b = p;
    b->st = bench_rank(b);
    return NULL;
}

/* Runs bench_rank on each of this process's workers; the first failure. */
static herd_status run_local(herd_world *hw, bench_ctx *ctx, herd_err *err)
{
    herd_status st = herd_world_run(hw, bench_thread, ctx, sizeof *ctx, err);
    herd_world_close(hw);
    for (size_t i = 0; i < hw->nlocal && st == HERD_OK; i++)
        if (ctx[i].st < 0) {
            st = ctx[i].st;
            if (err)
                *err = ctx[i].err;
        }
    return st;
}

herd_status herd_bench_allreduce(const herd_bench_allreduce_config *cfg, herd_bench_row *rows, size_t *nrows,
                                 size_t *world, herd_err *err)
{
    herd_status st = HERD_OK;
    const herd_engine *engine;
    herd_world *hw = NULL;
    bench_ctx *ctx = NULL;
    size_t nlocal = 0;
    if ((st = HERD__NONNULL(err, cfg, rows, nrows, world)) < 0)
        return st;
    *nrows = 0;
    if (cfg->min_bytes < sizeof(float) || cfg->max_bytes < cfg->min_bytes || cfg->iters == 0)
        return herd_err_set(err, HERD_EINVAL, "bench allreduce: need 4 <= --min-bytes <= --max-bytes and --iters >= 1");
    HERD_TRY(herd_engine_pick(cfg->engine, &engine, err));
    /* --workers is the engine's to honour, unless its launcher sized the run */
    bool sized = engine->caps & HERD_ENGINE_LAUNCHER_SIZED;
    if (!sized && (cfg->workers < 1 || cfg->workers > 4096))
        return herd_err_set(err, HERD_EINVAL, "--workers must be in [1, 4096], got %zu", cfg->workers);
    HERD_TRY(herd_world_create(engine, sized ? 0 : cfg->workers, &hw, err));
    nlocal = hw->nlocal;
    ctx = calloc(nlocal, sizeof *ctx);
    if (!ctx) {
        st = herd_err_set(err, HERD_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < nlocal; i++) {
        ctx[i].cfg = cfg;
        ctx[i].rows = rows;
        HERD_TRY(herd_world_endpoint(hw, hw->first_rank + i, &ctx[i].comm, err));
        ctx[i].comm->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 60;
    }
    HERD_TRY(run_local(hw, ctx, err));
    *world = hw->size;
    if (hw->first_rank == 0)
        *nrows = ctx[0].nrows;
out:
    for (size_t i = 0; ctx && i < nlocal; i++)
        herd_comm_free(ctx[i].comm);
    herd_world_free(hw);
    free(ctx);
    return st;
}
