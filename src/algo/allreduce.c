/* allreduce: synchronous data-parallel SGD (docs/algorithms.md, seeds 000/002).
 *
 * Every step the gradients are summed over the workers by allreduce and
 * divided by n; every worker then takes the same optimizer step, so replicas
 * stay bit-identical (the ring gives every rank the same floats).
 * GradientFlow's communication options:
 *   - lazy allreduce: ranges reported by backward are fused into buckets of
 *     at least bucket_bytes, one allreduce per bucket (0: one per layer);
 *   - overlap: a bucket is handed to this worker's communication thread as
 *     soon as backward has produced it, and reduced while backward goes on
 *     with earlier layers; after_backward waits for the last one. Engines
 *     that cannot be driven from a second thread (SimGrid) reduce each bucket
 *     from the grad_ready hook instead. Without overlap every bucket is
 *     reduced after backward;
 *   - fp16/bf16 on the wire, with a dynamic loss scale: gradients are
 *     multiplied by scale/n before conversion; a bucket that overflows (any
 *     non-finite sum, seen identically by all ranks) is redone in fp32 and the
 *     scale halves; after 1000 clean steps it doubles;
 *   - coarse-grained sparse communication (csc_ratio < 1): the gradient plus
 *     the residual of earlier steps is cut into fixed chunks; the chunk norms
 *     are summed over workers (a small allreduce) so every worker picks the
 *     same top chunks; only those are reduced; the rest stays in the residual
 *     and is sent later (error feedback), so no gradient mass is lost.
 * Checkpoints: each worker saves its loss scale and clean-step count (the
 * same on every worker) and, with csc, its own residual; and the wire type
 * and csc settings it ran with, so a resume with other ones is refused
 * rather than silently a different run. Saved after after_step, when the
 * communication thread is idle (after_backward drained it).
 * Non-finite gradients (a NaN or Inf in any worker's) are seen in what was
 * reduced, identically on every worker and with no extra message: fp32
 * checks each reduced bucket (on the communication thread when there is
 * one); fp16/bf16 reuse the overflow check, a sum still non-finite when
 * redone in fp32 being a non-finite gradient, not an overflow (the scale
 * stays); csc sees it in the summed chunk norms, before the residual is
 * touched. The worker loop then applies no update (after_backward says so).
 */
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"
#include "algo/run_config.h"
#include "algo/state_io.h"
#include "core/clock.h"
#include "core/finite.h"

enum { MAX_PENDING = 256 };

/* The communication thread's queue of buckets. */
typedef struct ar_queue {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t lo[MAX_PENDING], hi[MAX_PENDING];
    size_t head, tail;   /* buckets [head, tail) are waiting or in flight */
    bool busy, stop, started;
    bool nonfinite;      /* a bucket it reduced holds a NaN or Inf */
    herd_status st;      /* first failure of the thread */
} ar_queue;

typedef struct ar_state {
    size_t lo, hi;       /* the bucket being filled: [lo, hi) */
    ar_queue q;
    herd_worker *w;
    float loss_scale;
    size_t clean_steps;
    bool nonfinite;      /* this step's reduced gradient holds a NaN or Inf */
    bool own_bad;        /* and this worker's own gradient did */
    bool applied;        /* the optimizer step is done: fused into the allreduce */
    size_t *cuts, ncuts, cap_cuts; /* no overlap: where this step's buckets start, last first */
    uint64_t steps, buckets; /* steps begun, buckets reduced (the summary's buckets per step) */
    /* csc */
    float *residual;     /* nparams */
    float *norms;        /* nchunks */
    size_t *order;       /* nchunks */
    float *packed;       /* selected chunks, contiguous */
    size_t chunk, nchunks;
    bool csc;
} ar_state;

/* The options (docs/algorithms.md, seed 002). */
typedef enum ar_overlap { OVERLAP_AUTO, OVERLAP_ON, OVERLAP_OFF } ar_overlap;

typedef struct ar_opts {
    size_t bucket_bytes;    /* lazy allreduce: fuse gradients into buckets of this size (0: one per layer) */
    size_t first_bucket_bytes; /* the step's first bucket closes at this size, if smaller (0: bucket_bytes) */
    int overlap;            /* ar_overlap: start a bucket's allreduce while backward goes on */
    bool no_overlap;        /* the same as overlap off */
    int comm_dtype;         /* herd_dtype on the wire */
    double csc_ratio;       /* coarse-grained sparse: fraction of chunks sent per step (0 or 1: dense) */
    size_t csc_chunk_bytes; /* chunk size for csc_ratio */
    int impl;               /* herd_allreduce_impl */
    size_t segment_bytes;   /* ring pipeline segment (0: default) */
} ar_opts;

static const char *const overlap_names[] = {"auto", "on", "off", NULL};
static const char *const dtype_names[] = {"fp32", "fp16", "bf16", NULL};     /* herd_dtype's order */
static const char *const impl_names[] = {"auto", "ring", "native", NULL};   /* herd_allreduce_impl's order */

static const herd_opt ar_opt_table[] = {
    {.name = "bucket-bytes", .type = HERD_OPT_SIZE, .offset = offsetof(ar_opts, bucket_bytes), .def = "4194304",
     .help = "fuse gradients into buckets of N bytes (0: one per layer)"},
    {.name = "first-bucket-bytes", .type = HERD_OPT_SIZE, .offset = offsetof(ar_opts, first_bucket_bytes), .def = "65536",
     .help = "close a step's first bucket at N bytes where --bucket-bytes is larger, so that its allreduce starts while " "most of backward is still to come (0: as the others)"},
    {.name = "overlap", .type = HERD_OPT_CHOICE, .offset = offsetof(ar_opts, overlap), .def = "auto", .choices = overlap_names,
     .help = "reduce a bucket while backward goes on (on), after backward (off), or on except where the workers' compute " "threads take every core (auto)"},
    {.name = "no-overlap", .type = HERD_OPT_BOOL, .offset = offsetof(ar_opts, no_overlap),
     .help = "the same as --overlap off"},
    {.name = "comm-dtype", .type = HERD_OPT_CHOICE, .offset = offsetof(ar_opts, comm_dtype), .def = "fp32", .choices = dtype_names,
     .help = "what goes on the wire (16-bit: with a dynamic loss scale)"},
    {.name = "csc-ratio", .type = HERD_OPT_DOUBLE, .offset = offsetof(ar_opts, csc_ratio), .def = "0", .flags = HERD_OPT_BOUNDED, .max = 1,
     .help = "coarse-grained sparse: send only this fraction of gradient chunks per step"},
    {.name = "csc-chunk-bytes", .type = HERD_OPT_SIZE, .offset = offsetof(ar_opts, csc_chunk_bytes), .def = "32768",
     .help = "chunk size for --csc-ratio"},
    {.name = "allreduce", .type = HERD_OPT_CHOICE, .offset = offsetof(ar_opts, impl), .def = "auto", .choices = impl_names,
     .help = "herd's ring, the engine's own (MPI_Allreduce; shared memory on threads), or auto (the engine's own where it " "prefers it: threads)"},
    {.name = "segment-bytes", .type = HERD_OPT_SIZE, .offset = offsetof(ar_opts, segment_bytes), .def = "0",
     .help = "ring pipeline segment (0: 1 MiB)"},
    {0},
};

static herd_status ar_check(const herd_algo_ops *ops, const void *opts, const herd__train_config *cfg, herd_err *err)
{
    (void)ops, (void)cfg;
    const ar_opts *o = opts;
    if (o->no_overlap && o->overlap == OVERLAP_ON)
        return herd_err_set(err, HERD_EINVAL, "--no-overlap contradicts --overlap on");
    if (o->csc_ratio > 0.0 && o->csc_ratio < 1.0 && o->csc_chunk_bytes < sizeof(float))
        return herd_err_set(err, HERD_EINVAL, "--csc-chunk-bytes must be at least 4, got %zu", o->csc_chunk_bytes);
    return HERD_OK;
}

static const ar_opts *opts_of(const herd_worker *w) { return w->opts; }

/* Auto is on unless the workers' compute threads take every core: there the
 * reduction is copying by the CPU, and a communication thread would only
 * take a core from another worker's backward. */
static bool overlapping(const herd_worker *w)
{
    const ar_opts *o = opts_of(w);
    return !o->no_overlap && (o->overlap == OVERLAP_ON || (o->overlap == OVERLAP_AUTO && !w->cores_taken));
}

/* Whether the optimizer step goes into the allreduce (after_backward asks
 * only when neither csc nor overlap is on): fp32, not the ring, on an engine
 * whose own allreduce has the buffers in shared memory (the others' sums
 * are read where they lie instead of copied), and an optimizer that steps
 * element by element (the engine hands over pieces that cut across layers;
 * lars and lamb need a layer's whole gradient, so the loop steps after). */
static bool fused_update(const herd_worker *w)
{
    const ar_opts *ac = opts_of(w);
    if (!herd_optim_elementwise(&w->optim))
        return false;
    herd_allreduce_opts o = {.wire = (herd_dtype)ac->comm_dtype, .impl = (herd_allreduce_impl)ac->impl};
    return herd_allreduce_applies_in_place(w->comm, &o);
}

static herd_allreduce_opts wire_opts(const herd_worker *w, int dtype)
{
    return (herd_allreduce_opts){
        .segment_bytes = opts_of(w)->segment_bytes,
        .wire = (herd_dtype)dtype,
        .impl = (herd_allreduce_impl)opts_of(w)->impl,
    };
}

static void scale(float *x, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

/* The optimizer step on a range of the averaged gradient, wherever the
 * engine hands it over (the threads engine: in the buffer of the worker that
 * summed it, which saves copying it into ours). */
static void apply_update(void *p, size_t lo, size_t hi, const float *mean)
{
    ar_state *s = p;
    herd_worker *w = s->w;
    herd_optim_step_from(&w->optim, w->params, mean, lo, hi - lo, w->lr);
}

/* Averages buf[0, n) over the workers, in the configured wire type; *bad:
 * the average holds a NaN or Inf (the same on every worker). update (fp32,
 * buf the whole gradient): the optimizer step is taken on the average as
 * the allreduce delivers it, unless *bad, and buf is left holding anything. */
static herd_status reduce_mean(ar_state *s, herd_worker *w, float *buf, size_t n, bool *bad, bool update)
{
    herd_status st;
    float inv = 1.0f / (float)w->nworkers;
    int dtype = opts_of(w)->comm_dtype;
    *bad = false;
    if (dtype == HERD_F32) {
        herd_allreduce_opts o = wire_opts(w, HERD_F32);
        o.scale = inv; /* the mean and the checks, fused into the sum where the engine can */
        o.nonfinite = bad;
        o.input_nonfinite = &s->own_bad;
        if (update) {
            HERD_ASSERT(buf == w->grads && n == w->nparams);
            o.apply = apply_update, o.apply_ctx = s;
        }
        if ((st = herd_allreduce(w->comm, buf, n, &o)) == HERD_OK && update && !*bad)
            s->applied = true;
        return st;
    }
    /* keep an fp32 copy in case the low-precision sum overflows */
    float *copy = malloc((n ? n : 1) * sizeof(float));
    if (!copy)
        return herd_err_set(&w->err, HERD_ENOMEM, "out of memory for an fp16 bucket");
    memcpy(copy, buf, n * sizeof(float));
    if (!herd__all_finite(copy, n))
        s->own_bad = true;
    scale(buf, n, s->loss_scale * inv);
    herd_allreduce_opts o = wire_opts(w, dtype);
    st = herd_allreduce(w->comm, buf, n, &o);
    if (st == HERD_OK && herd__all_finite(buf, n)) {
        scale(buf, n, 1.0f / s->loss_scale);
    } else if (st == HERD_OK) {
        /* overflow: every rank sees the same sums, so all take this branch */
        memcpy(buf, copy, n * sizeof(float));
        herd_allreduce_opts o32 = wire_opts(w, HERD_F32);
        st = herd_allreduce(w->comm, buf, n, &o32);
        if (st == HERD_OK)
            scale(buf, n, inv);
        /* still non-finite in fp32: a gradient was, the scale was not too high */
        *bad = st == HERD_OK && !herd__all_finite(buf, n);
        if (st == HERD_OK && !*bad) {
            s->loss_scale = s->loss_scale > 1.0f ? s->loss_scale / 2 : 1.0f;
            s->clean_steps = 0;
        }
    }
    free(copy);
    return st;
}

static void *comm_thread(void *p)
{
    ar_state *s = p;
    ar_queue *q = &s->q;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->stop && q->head == q->tail)
            pthread_cond_wait(&q->cv, &q->mu);
        if (q->stop)
            break;
        size_t lo = q->lo[q->head % MAX_PENDING], hi = q->hi[q->head % MAX_PENDING];
        bool skip = q->st < 0;
        q->busy = true;
        pthread_mutex_unlock(&q->mu);
        bool bad = false;
        herd_status st = skip ? HERD_OK : reduce_mean(s, s->w, s->w->grads + lo, hi - lo, &bad, false);
        pthread_mutex_lock(&q->mu);
        if (st < 0 && q->st == HERD_OK)
            q->st = st;
        q->nonfinite = q->nonfinite || bad;
        q->head++;
        q->busy = false;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* Reduces the filled bucket: on the communication thread when there is one. */
static herd_status flush(ar_state *s, herd_worker *w)
{
    if (s->hi <= s->lo)
        return HERD_OK;
    herd_status st = HERD_OK;
    s->buckets++;
    if (s->q.started) {
        ar_queue *q = &s->q;
        pthread_mutex_lock(&q->mu);
        HERD_ASSERT(q->tail - q->head < MAX_PENDING);
        q->lo[q->tail % MAX_PENDING] = s->lo;
        q->hi[q->tail % MAX_PENDING] = s->hi;
        q->tail++;
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
    } else {
        bool bad;
        st = reduce_mean(s, w, w->grads + s->lo, s->hi - s->lo, &bad, false);
        s->nonfinite = s->nonfinite || bad;
    }
    s->hi = s->lo;
    return st;
}

/* Waits until the communication thread has reduced every bucket. */
static herd_status drain(ar_state *s, herd_worker *w)
{
    if (!s->q.started)
        return HERD_OK;
    ar_queue *q = &s->q;
    double t0 = herd__now();
    pthread_mutex_lock(&q->mu);
    while (q->head != q->tail)
        pthread_cond_wait(&q->cv, &q->mu);
    herd_status st = q->st;
    q->st = HERD_OK;
    s->nonfinite = s->nonfinite || q->nonfinite;
    q->nonfinite = false;
    pthread_mutex_unlock(&q->mu);
    w->comm_wait_s += herd__now() - t0;
    if (st < 0 && !w->err.msg[0])
        w->err = w->comm->err;
    return st;
}

static herd_status ar_init(herd_algo *a, herd_worker *w)
{
    ar_state *s = calloc(1, sizeof *s);
    if (!s)
        return herd_err_set(&w->err, HERD_ENOMEM, "out of memory");
    a->state = s;
    s->w = w;
    s->loss_scale = 1024.0f;
    if (overlapping(w) && herd_comm_any_thread(w->comm) && w->nworkers > 1) {
        pthread_mutex_init(&s->q.mu, NULL);
        pthread_cond_init(&s->q.cv, NULL);
        if (pthread_create(&s->q.thread, NULL, comm_thread, s) != 0) {
            pthread_mutex_destroy(&s->q.mu);
            pthread_cond_destroy(&s->q.cv);
            return herd_err_set(&w->err, HERD_ENOMEM, "cannot start the communication thread");
        }
        s->q.started = true;
    }
    double r = opts_of(w)->csc_ratio;
    s->csc = r > 0.0 && r < 1.0;
    if (s->csc) {
        size_t cb = opts_of(w)->csc_chunk_bytes ? opts_of(w)->csc_chunk_bytes : 32768;
        s->chunk = cb / sizeof(float) ? cb / sizeof(float) : 1;
        s->nchunks = (w->nparams + s->chunk - 1) / s->chunk;
        s->residual = calloc(w->nparams, sizeof(float));
        s->norms = malloc(s->nchunks * sizeof(float));
        s->order = malloc(s->nchunks * sizeof(size_t));
        s->packed = malloc(s->nchunks * s->chunk * sizeof(float));
        if (!s->residual || !s->norms || !s->order || !s->packed)
            return herd_err_set(&w->err, HERD_ENOMEM, "out of memory for sparse communication");
    }
    return HERD_OK;
}

static herd_status ar_before_step(herd_algo *a, herd_worker *w)
{
    ar_state *s = a->state;
    s->lo = s->hi = w->nparams;
    s->nonfinite = s->own_bad = s->applied = false;
    s->ncuts = 0;
    s->steps++;
    return HERD_OK;
}

/* Where the bucket being filled closes: the output layers' gradients come
 * first and are most of a small model's bytes (lenet: 236 of 247 KB), so
 * with one bucket threshold for all a model below it is one bucket,
 * reduced only after backward ends, and nothing overlaps; the first bucket
 * closes early instead (as DDP's first bucket does), the rest at the
 * lazy-allreduce threshold. */
static size_t bucket_limit(const ar_state *s, const herd_worker *w)
{
    const ar_opts *o = opts_of(w);
    bool first = s->hi == w->nparams;
    return first && o->first_bucket_bytes && o->first_bucket_bytes < o->bucket_bytes ? o->first_bucket_bytes
                                                                                      : o->bucket_bytes;
}

static herd_status ar_grad_ready(herd_algo *a, herd_worker *w, size_t off, size_t len)
{
    ar_state *s = a->state;
    if (s->csc)
        return HERD_OK; /* chunks are chosen over the whole gradient */
    /* ranges arrive from the end of the array towards its start */
    HERD_ASSERT(off + len == s->lo);
    s->lo = off;
    if ((s->hi - s->lo) * sizeof(float) < bucket_limit(s, w))
        return HERD_OK;
    if (overlapping(w))
        return flush(s, w);
    /* no overlap: the same buckets, reduced after backward */
    if (s->ncuts == s->cap_cuts) {
        size_t cap = s->cap_cuts ? 2 * s->cap_cuts : 16, *cuts = realloc(s->cuts, cap * sizeof *cuts);
        if (!cuts)
            return herd_err_set(&w->err, HERD_ENOMEM, "out of memory");
        s->cuts = cuts, s->cap_cuts = cap;
    }
    s->cuts[s->ncuts++] = s->lo;
    s->hi = s->lo;
    return HERD_OK;
}

static int cmp_chunk(const void *pa, const void *pb, void *ctx)
{
    const float *norms = ctx;
    size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
    if (norms[a] != norms[b])
        return norms[a] > norms[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

static herd_status csc_step(ar_state *s, herd_worker *w)
{
    herd_status st;
    size_t n = w->nparams;
    float *g = w->grads;
    if (!herd__all_finite(g, n)) /* the residual is finite: a bad step never touches it */
        s->own_bad = true;
    for (size_t i = 0; i < n; i++)
        g[i] += s->residual[i];
    for (size_t c = 0; c < s->nchunks; c++) {
        size_t lo = c * s->chunk, hi = lo + s->chunk < n ? lo + s->chunk : n;
        double l2 = 0;
        for (size_t i = lo; i < hi; i++)
            l2 += (double)g[i] * g[i];
        s->norms[c] = (float)l2;
        s->order[c] = c;
    }
    /* the same norms on every worker, hence the same choice */
    herd_allreduce_opts o = wire_opts(w, HERD_F32);
    if ((st = herd_allreduce(w->comm, s->norms, s->nchunks, &o)) < 0)
        return st;
    /* a NaN or Inf in any worker's gradient (or residual) is in the summed
     * norms on every worker: no update, and the residual stays as it was */
    if (!herd__all_finite(s->norms, s->nchunks)) {
        s->nonfinite = true;
        return HERD_OK;
    }
    qsort_r(s->order, s->nchunks, sizeof(size_t), cmp_chunk, s->norms);
    size_t k = (size_t)ceil(opts_of(w)->csc_ratio * (double)s->nchunks);
    if (k < 1)
        k = 1;
    /* chunks in index order within the selection, so the packing is canonical */
    bool *sel = calloc(s->nchunks, sizeof(bool));
    if (!sel)
        return herd_err_set(&w->err, HERD_ENOMEM, "out of memory");
    for (size_t i = 0; i < k; i++)
        sel[s->order[i]] = true;
    size_t packed = 0;
    for (size_t c = 0; c < s->nchunks; c++) {
        size_t lo = c * s->chunk, hi = lo + s->chunk < n ? lo + s->chunk : n;
        if (sel[c]) {
            memcpy(s->packed + packed, g + lo, (hi - lo) * sizeof(float));
            memset(s->residual + lo, 0, (hi - lo) * sizeof(float));
            packed += hi - lo;
        } else {
            memcpy(s->residual + lo, g + lo, (hi - lo) * sizeof(float));
        }
    }
    bool bad;
    st = reduce_mean(s, w, s->packed, packed, &bad, false);
    s->nonfinite = s->nonfinite || bad;
    if (st == HERD_OK) {
        packed = 0;
        for (size_t c = 0; c < s->nchunks; c++) {
            size_t lo = c * s->chunk, hi = lo + s->chunk < n ? lo + s->chunk : n;
            if (sel[c]) {
                memcpy(g + lo, s->packed + packed, (hi - lo) * sizeof(float));
                packed += hi - lo;
            } else {
                memset(g + lo, 0, (hi - lo) * sizeof(float));
            }
        }
    }
    free(sel);
    return st;
}

static herd_status ar_after_backward(herd_algo *a, herd_worker *w, herd_step_result *res)
{
    ar_state *s = a->state;
    herd_status st;
    if (s->csc) {
        st = csc_step(s, w);
        s->buckets++;
    }
    else if (overlapping(w)) {
        st = flush(s, w);
        HERD_KEEP_FIRST(st, drain(s, w));
    }
    else if (fused_update(w)) {
        /* the engine's own allreduce in shared memory: one call, the update
         * taken where the sums lie. Buckets would only add barriers here,
         * and a bucket found non-finite after others were applied would
         * leave a half-taken step. */
        bool bad;
        st = reduce_mean(s, w, w->grads, w->nparams, &bad, true);
        s->nonfinite = bad;
        s->buckets++;
    }
    else {
        /* no overlap: the buckets backward reported (cut where overlap
         * would have cut them), last first, after backward */
        bool bad;
        st = HERD_OK;
        size_t hi = w->nparams;
        for (size_t k = 0; k <= s->ncuts && st == HERD_OK; k++) {
            size_t lo = k < s->ncuts ? s->cuts[k] : 0;
            if (hi > lo) {
                st = reduce_mean(s, w, w->grads + lo, hi - lo, &bad, false);
                s->nonfinite = s->nonfinite || bad;
                s->buckets++;
            }
            hi = lo;
        }
    }
    if (st == HERD_OK && !s->nonfinite && opts_of(w)->comm_dtype != HERD_F32 && ++s->clean_steps >= 1000) {
        s->loss_scale *= 2.0f;
        s->clean_steps = 0;
    }
    res->applied = s->applied;
    res->nonfinite = s->nonfinite;
    res->own_nonfinite = s->own_bad;
    return st;
}

static const uint64_t AR_LAYOUT = HERD__STATE_LAYOUT('a', 'r', 'e', 'd', 1);

static const char *dtype_name(uint64_t d)
{
    return d == HERD_F32 ? "fp32" : d == HERD_F16 ? "fp16" : d == HERD_BF16 ? "bf16" : "an unknown type";
}

/* What makes two runs' allreduce state comparable: the wire type and the
 * csc chunking, then the state proper. */
static herd_status ar_save(herd_algo *a, herd_worker *w, void *buf, size_t cap, size_t *len)
{
    ar_state *s = a->state;
    herd__state_out o = herd__state_out_make(buf, cap);
    herd__state_put_u64(&o, AR_LAYOUT);
    herd__state_put_u64(&o, (uint64_t)opts_of(w)->comm_dtype);
    herd__state_put_f64(&o, s->csc ? opts_of(w)->csc_ratio : 1.0);
    herd__state_put_u64(&o, s->csc ? s->chunk : 0);
    herd__state_put_f64(&o, (double)s->loss_scale);
    herd__state_put_u64(&o, s->clean_steps);
    if (s->csc)
        herd__state_put(&o, s->residual, w->nparams * sizeof(float));
    *len = o.len;
    return HERD_OK;
}

static herd_status ar_load(herd_algo *a, herd_worker *w, const void *buf, size_t len)
{
    ar_state *s = a->state;
    herd__state_in in = herd__state_in_make(buf, len);
    herd_status st = herd__state_layout(&in, AR_LAYOUT, w, "allreduce");
    if (st < 0)
        return st;
    uint64_t dtype = herd__state_get_u64(&in);
    double ratio = herd__state_get_f64(&in);
    uint64_t chunk = herd__state_get_u64(&in);
    double scale = herd__state_get_f64(&in);
    uint64_t clean = herd__state_get_u64(&in);
    if (in.bad)
        return herd__state_end(&in, w, "allreduce");
    if (dtype != (uint64_t)opts_of(w)->comm_dtype)
        return herd_err_set(&w->err, HERD_EINVAL,
                            "worker %zu: the checkpoint was written with --comm-dtype %s; this run has --comm-dtype %s",
                            w->rank, dtype_name(dtype), dtype_name((uint64_t)opts_of(w)->comm_dtype));
    double my_ratio = s->csc ? opts_of(w)->csc_ratio : 1.0;
    uint64_t my_chunk = s->csc ? s->chunk : 0;
    if (ratio != my_ratio || chunk != my_chunk)
        return herd_err_set(&w->err, HERD_EINVAL,
                            "worker %zu: the checkpoint was written with --csc-ratio %g and %llu-float chunks; this run "
                            "has --csc-ratio %g and %llu-float chunks",
                            w->rank, ratio, (unsigned long long)chunk, my_ratio, (unsigned long long)my_chunk);
    if (!(scale >= 1.0 && scale <= 3.4e38))
        return herd_err_set(&w->err, HERD_ECORRUPT, "worker %zu: the checkpoint's loss scale is %g", w->rank, scale);
    s->loss_scale = (float)scale;
    s->clean_steps = (size_t)clean;
    if (s->csc)
        herd__state_get(&in, s->residual, w->nparams * sizeof(float));
    return herd__state_end(&in, w, "allreduce");
}

static void ar_summary_json(herd_algo *a, herd_worker *w, char *buf, size_t cap)
{
    const ar_state *s = a->state;
    snprintf(buf, cap, ",\"overlap\":%s,\"buckets_per_step\":%.4g", overlapping(w) ? "true" : "false",
             s && s->steps ? (double)s->buckets / (double)s->steps : 0.0);
}

static void ar_free(herd_algo *a, herd_worker *w)
{
    (void)w;
    ar_state *s = a->state;
    if (!s)
        return;
    if (s->q.started) {
        pthread_mutex_lock(&s->q.mu);
        s->q.stop = true;
        pthread_cond_broadcast(&s->q.cv);
        pthread_mutex_unlock(&s->q.mu);
        pthread_join(s->q.thread, NULL);
        pthread_mutex_destroy(&s->q.mu);
        pthread_cond_destroy(&s->q.cv);
    }
    free(s->residual);
    free(s->norms);
    free(s->order);
    free(s->packed);
    free(s->cuts);
    free(s);
    a->state = NULL;
}

const herd_algo_ops herd__algo_allreduce = {
    .name = "allreduce",
    .summary = "synchronous SGD, gradients averaged by ring allreduce (buckets, overlap, fp16, sparse)",
    .min_workers = 1,
    .opts = ar_opt_table,
    .opts_size = sizeof(ar_opts),
    .check = ar_check,
    .summary_json = ar_summary_json,
    .init = ar_init,
    .before_step = ar_before_step,
    .grad_ready = ar_grad_ready,
    .after_backward = ar_after_backward,
    .free = ar_free,
    .save = ar_save,
    .load = ar_load,
    .agrees_nonfinite = true,
    .checks_gradient = true,
};
