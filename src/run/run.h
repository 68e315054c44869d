/* run.h — what the files of a training run share (internal to src/run).
 *
 * A run is split by concern:
 *   config.c     defaults, the algorithm's options, validation
 *   train.c      herd_train: the engine's world, the workers' set-up and
 *                teardown, threads, the final evaluation
 *   loop.c       one worker's loop: epochs, steps, the algorithm's hooks,
 *                evaluation, --slow, --fail
 *   nonfinite.c  the policy for NaN and Inf in losses and gradients
 *   claim.c      asynchronous runs: the shared batch counter and the stop word
 *   result.c     the result: totals over workers, the JSON summary
 *
 * One herd_run holds what the workers share (config, data, log, the abort
 * flag); each worker's worker_ctx owns its model, optimizer, loader and
 * algorithm state. On the threads engine every worker is a thread of this
 * process.
 */
#ifndef HERD_RUN_RUN_H
#define HERD_RUN_RUN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd_algo.h"
#include "herd/herd_comm.h"
#include "herd/herd_data.h"
#include "herd/herd_nn.h"
#include "herd/herd_run.h"
#include "algo/run_config.h"
#include "run/ckpt_run.h"
#include "run/log.h"

typedef struct herd_run {
    const herd__train_config *cfg;
    const herd_algo_ops *algo_ops;
    herd_dataset train, test;
    herd__log log;
    herd_world *world;         /* the engine's: this process runs its local ranks */
    size_t first_rank, nlocal; /* the workers this process runs */
    double t0;
    atomic_int abort; /* set by the first worker that fails */
    atomic_bool *lost; /* per rank (this process's workers): lost to --fail, the others went on */
    herd__ckpt_run *ckpt; /* --checkpoint (NULL: none) */
    void *algo_opts;      /* the algorithm's options, parsed (w->opts) */
    char run_id[17];      /* 16 hex digits: rank 0's, every rank's (herd_train_result.run_id) */
    bool cores_taken;     /* the workers' compute threads take every core (w->cores_taken) */
    const char *threads_from; /* why cfg->threads is what it is (the summary's "threads_from", train.c) */
    struct worker_ctx *workers; /* this process's (cfg->stop reads their steps) */
    atomic_size_t stop_at;  /* cfg->stop: the step every synchronous worker stops at (SIZE_MAX: not yet) */
    bool tty;
} herd_run;

/* What this worker found non-finite in the step under way. */
typedef struct nonfinite_step {
    bool loss, grad;
    bool poison; /* a NaN still to be written into the gradient (--inject-nan, or after a non-finite loss) */
} nonfinite_step;

/* The first finding of a worker that stops the run, held until the workers
 * settle (herd__nf_settles): its step, epoch, what (herd__nf_code) and the
 * steps skipped in a row before it. */
typedef struct held_nonfinite {
    bool stop;
    int code;
    size_t step, epoch, skipped_run;
} held_nonfinite;

/* Worker 0's loss, watched for divergence (diverge.c): an exponential
 * moving average of the step losses (about 10 steps) and its lowest. */
typedef struct herd__div {
    double ema, min_ema;
    size_t n;
    bool diverged;     /* warned of: the summary's status says "diverged" */
    bool not_learning; /* warned of: the status says "not_learning" */
} herd__div;

/* --trace: what a worker's span was (trace.c names them). */
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

typedef struct worker_ctx {
    herd_run *run;
    herd_worker w;
    herd_algo algo;
    herd_loader loader;
    float *x;
    int32_t *y;
    double slow_factor;
    size_t fail_step;     /* --fail: stop for good at this step (SIZE_MAX: never) */
    herd__fail_mode fail_mode; /* how (resolved: never DEFAULT) */
    bool lost;            /* stopped by --fail while the others go on */
    herd_win *claim_win;  /* asynchronous algorithms: the shared batch counter */
    uint64_t claim_buf[2];/* on rank 0: the counter, and the stop word (see announce_stop) */
    herd_win *lease_win;  /* asynchronous algorithms: every worker's lease of batches (claim.c) */
    uint64_t lease_buf[3];/* this worker's lease [lo, hi), and its copy of the stop word (announce_stop) */
    uint64_t claim_end;   /* the end of the epoch of this worker's last batch (0: none yet) */
    uint64_t leases, stolen; /* this run: leases taken from the counter, steals from others */
    nonfinite_step nf;
    size_t skipped, skipped_run; /* --skip-nonfinite: steps not applied, in all and in a row */
    bool agreed_stop;     /* stopped on a non-finite value with every worker, at the same step */
    held_nonfinite held;  /* where the workers settle at the epoch's end (herd__nf_settles) */
    double stop_read_at;  /* herd_worker_stopping: when the stop word was last read */
    herd_compute_span backward; /* where this step's backward began on the engine's clock (herd_comm.h) */
    float *eval_buf;      /* 2 x nparams, where the algorithm has eval_params */
    herd__ckpt_cursor resume; /* --resume: where this worker starts (step 0: from scratch) */
    herd__div div;        /* worker 0: is the run diverging? */
    herd__trace trace;    /* --trace: this worker's spans */
    atomic_size_t at_step; /* w.step, for the other threads (cfg->stop) */
    bool stopped;         /* stopped by cfg->stop */
    bool stop_saved;      /* and wrote a checkpoint there */
    /* results */
    herd_status st;
    double train_s, train_loss, test_acc, test_loss, worker0_acc, last_epoch_s;
    size_t epochs_trained; /* epochs this worker ended (train_s is their time) */
    double recent_loss_sum; /* --eval-every-steps: the losses since this worker's last evaluation (loop.c) */
    size_t recent_nloss;
    const char *eval_model;
    size_t images;
    herd_nn_adapt adapt; /* the compute threads (cfg->adapt_threads: it changes them) */
} worker_ctx;

/* The per-epoch bookkeeping of one worker. */
typedef struct epoch_stats {
    double t0, loss_sum, last_progress;
    size_t nloss, steps, skipped;
} epoch_stats;

#define CALL_HOOK(c, hook)                                               \
    do {                                                                 \
        if ((c)->algo.ops->hook)                                         \
            HERD_TRY((c)->algo.ops->hook(&(c)->algo, &(c)->w));          \
    } while (0)

/* config.c */
/* No name (--data, --model, --algo, --engine, --log, --checkpoint) is given
 * empty: NULL is the default, "" a mistake. */
herd_status herd__check_names(const herd__train_config *cfg, herd_err *err);
/* The algorithm named by --algo into *algo, and the run's settings checked;
 * --lr and --momentum not given become the algorithm's defaults. */
herd_status herd__check_config(herd__train_config *cfg, const herd_algo_ops **algo, herd_err *err);
/* --workers within bounds (where the engine's launcher does not set it). */
herd_status herd__check_workers(const herd__train_config *cfg, herd_err *err);
/* --fail modes: where workers are processes (processes), a worker dies as
 * a process does; else it can only stop. Resolves DEFAULT to the engine's. */
herd_status herd__check_fail_modes(herd__train_config *cfg, bool processes, const char *engine, herd_err *err);

/* Whether the run's workers live in several processes (collectives over
 * them are needed to add up the run's totals). */
static inline bool herd__run_spans_processes(const herd_run *r) { return r->world->nlocal < r->world->size; }
/* The algorithm's options (ops->opts) from its defaults and cfg's
 * algo_args, checked; *out is the caller's to free. */
herd_status herd__algo_opts_parse(const herd_algo_ops *ops, const herd__train_config *cfg, void **out, herd_err *err);
/* Where the run's workers live in several processes: whether every rank
 * was started with the same configuration (agree.c says what is compared);
 * *differ and HERD_EINVAL, with a message naming each differing item and
 * its ranks, where not. Collective over the world's ranks, before the
 * algorithm's first message. */
herd_status herd__agree(const herd_run *r, const herd_worker *w, bool *differ, herd_err *err);

/* result.c: the totals over every worker (collective on mpi), the final
 * figures, the "end" log record. */
herd_status herd__result_fill(herd_run *r, worker_ctx *workers, double wall, herd_train_result *res, herd_err *err);

/* loop.c */
/* What the algorithms may ask of the run (herd_peers; ctx: the worker_ctx). */
extern const herd_peers_ops herd__run_peers;
/* A worker's whole run, on its thread: sets c->st. */
void *herd__worker_thread(void *c);
/* Evaluation on worker 0 (logs and reports). */
herd_status herd__evaluate(worker_ctx *c, double epoch_loss, double t_epoch);

/* nonfinite.c */
/* 0: nothing found this step; 1: a non-finite loss; 2: a non-finite gradient. */
int herd__nf_code(const worker_ctx *c);
/* "loss", "gradient", "model" for codes 1..3. */
const char *herd__nf_what(size_t code);
/* --inject-nan: whether this worker's gradient gets a NaN at this step. */
bool herd__nf_injected(const worker_ctx *c);
/* Backward has produced grads[off, off + len): poisons and checks it. */
void herd__nf_grads_arrived(worker_ctx *c, size_t off, size_t len);
/* After after_backward: skip the step's update (*skip), go on, or stop. */
herd_status herd__nf_sync(worker_ctx *c, epoch_stats *e, const herd_step_result *res, bool *skip);
herd_status herd__nf_async(worker_ctx *c, epoch_stats *e, bool *skip);
/* Whether the run's workers settle non-finite findings at the end of each
 * epoch (and at checkpoints and the last step) rather than at every step:
 * the synchronous algorithms that share nothing every step from which the
 * workers could agree (gossip, push-sum, elastic averaging, local SGD). */
bool herd__nf_settles(const herd_run *r);
/* Collective over the run's workers, where herd__nf_settles: whether any
 * worker found what stops the run since the last settlement; if so every
 * worker stops here (HERD_ENONFINITE), the message naming the first step
 * and the workers. */
herd_status herd__nf_settle(worker_ctx *c);

/* diverge.c */
/* A step's finite loss, into the watch (worker 0). */
void herd__div_step(worker_ctx *c, double loss);
/* At an evaluation of worker 0 (test_loss: its result): whether the run
 * diverges; if so, warns (stderr, the log) once, and with
 * --stop-on-divergence returns HERD_EDIVERGED (c->w.err says why). */
herd_status herd__div_check(worker_ctx *c, double test_loss);
/* After the final evaluation, however short the run: a test accuracy
 * within 2 points of chance (or, where test_acc is NAN, a training loss
 * within 2% of chance: the recent steps', else train_loss) names the run
 * not learning, as herd__div_check does. */
herd_status herd__div_final(worker_ctx *c, double train_loss, double test_acc);

/* claim.c */
/* Claims the next global batch: from this worker's lease, a new lease, or
 * another's (claim.c); at the hold the counter stays. */
herd_status herd__claim_batch(worker_ctx *c, uint64_t *index, uint64_t hold);
/* This worker stops on a non-finite value: tells the others. */
void herd__announce_stop(worker_ctx *c);
/* herd_worker_stopping (herd_algo.h) for worker c: reads the stop word at
 * most every 10 ms. */
herd_status herd__stop_check(worker_ctx *c, herd_err *err);

/* --trace (trace.c): a span of this worker's, kept until herd__trace_write
 * writes this process's workers' spans (after they have stopped). */
void herd__trace_span(worker_ctx *c, herd__span kind, double t0, double t1);
herd_status herd__trace_write(const herd_run *r, const worker_ctx *workers, herd_err *err);
void herd__trace_free(worker_ctx *c);

#endif
