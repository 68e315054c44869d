/* trace.h — --trace: each worker's spans, kept in its own memory while it
 * runs (no lock, no I/O) and written by its process once every worker has
 * stopped (trace.c; internal to src/run).
 */
#ifndef HERD_RUN_TRACE_H
#define HERD_RUN_TRACE_H

#include <stdbool.h>
#include <stddef.h>

#include "herd/herd_algo.h"

typedef struct herd_run herd_run;
typedef struct worker_ctx worker_ctx;

/* What a worker's span was (trace.c names them). */
typedef enum herd__span {
    HERD__SPAN_PULL,       /* the algorithm's before_step: a pull from the server or center, a gossip receive */
    HERD__SPAN_COMPUTE,    /* forward and backward (with what grad_ready starts beside it) */
    HERD__SPAN_EXCHANGE,   /* after backward to the step's end: reductions, pushes, waits, the update */
    HERD__SPAN_BATCH,      /* an asynchronous worker's claim of its next batch */
    HERD__SPAN_EVAL,
    HERD__SPAN_CHECKPOINT,
    /* a step's phases, each inside the span above that holds it (a track of
     * its own in the viewer: compute holds forward and backward, exchange
     * holds update) */
    HERD__SPAN_FORWARD,    /* forward and the loss */
    HERD__SPAN_BACKWARD,   /* backward, with the checks and sends grad_ready starts */
    HERD__SPAN_UPDATE,     /* the optimizer step (herd_algo_update; fused into the reduction: nothing left) */
    HERD__SPAN_COUNT,
} herd__span;

typedef struct herd__trace_ev {
    double t0, t1;
    size_t step;
    herd__span kind;
} herd__trace_ev;

typedef struct herd__trace {
    herd__trace_ev *ev;
    size_t n, cap;
    bool failed; /* out of memory: no file rather than one with a hole */
} herd__trace;

/* A span of worker w's (at its step), kept until herd__trace_write writes
 * this process's workers' spans; nothing without --trace. */
void herd__trace_span(herd__trace *t, const herd_worker *w, herd__span kind, double t0, double t1);
herd_status herd__trace_write(const herd_run *r, const worker_ctx *workers, herd_err *err);
/* This process's --trace path looked at before the run (core/outpath.h): a
 * directory or a dangling link is refused before any step, not after. */
herd_status herd__trace_check(const herd_run *r, herd_err *err);
void herd__trace_free(herd__trace *t);

#endif
