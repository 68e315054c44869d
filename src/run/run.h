/* run.h — what the files of a training run share (internal to src/run).
 *
 * A run is split by concern:
 *   config.c     defaults, the algorithm's options, validation
 *   train.c      herd_train: the engine's world, the workers' set-up and
 *                teardown, threads, the final evaluation
 *   loop.c       one worker's loop: epochs, steps, the algorithm's hooks,
 *                evaluation, a stop asked from outside (cfg->stop)
 * and the services the loop calls, each with its own state in worker_ctx
 * and its own header:
 *   fault.c      --fail and --slow (fault.h)
 *   claim.c      asynchronous runs: the shared batch counter and the stop
 *                word (claim.h)
 *   nonfinite.c  the policy for NaN and Inf in losses and gradients
 *                (nonfinite.h)
 *   diverge.c    worker 0's loss, watched for divergence (diverge.h)
 *   trace.c      --trace (trace.h)
 *   result.c     the result: totals over workers, the JSON summary
 *
 * One herd_run holds what the workers share (config, data, log, the abort
 * flag); each worker's worker_ctx owns its model, optimizer, loader and
 * algorithm state, and its part of each service. On the threads engine
 * every worker is a thread of this process.
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
#include "run/claim.h"
#include "run/diverge.h"
#include "run/fault.h"
#include "run/log.h"
#include "run/nonfinite.h"
#include "run/trace.h"

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

/* cfg->stop, a stop asked from outside (a signal): loop.c. */
typedef struct worker_stop {
    atomic_size_t at_step; /* w.step, for the other threads (cfg->stop) */
    bool stopped;          /* stopped by cfg->stop */
    bool saved;            /* and wrote a checkpoint there */
} worker_stop;

/* A step's compute, as the engine's clock and the compute threads see it:
 * loop.c. */
typedef struct worker_compute {
    herd_compute_span backward; /* where this step's backward began on the engine's clock (herd_comm.h) */
    herd_nn_adapt adapt;        /* the compute threads (cfg->adapt_threads: it changes them) */
} worker_compute;

/* Worker 0's evaluations: loop.c. */
typedef struct worker_eval {
    float *buf;             /* 2 x nparams, where the algorithm has eval_params: w's weights while the
                             * algorithm's model is scored, then that model (result.c keeps it) */
    double recent_loss_sum; /* --eval-every-steps: the losses since this worker's last evaluation */
    size_t recent_nloss;
} worker_eval;

/* What a worker's run leaves for the run's result: loop.c fills it,
 * train.c and result.c read it once every worker has stopped. */
typedef struct worker_result {
    herd_status st;
    double train_s, train_loss, test_acc, test_loss, worker0_acc, last_epoch_s;
    size_t epochs_trained; /* epochs this worker ended (train_s is their time) */
    const char *eval_model;
    size_t images;
} worker_result;

/* One worker: what it trains (its herd_worker, algorithm, loader and
 * batch), and one member per service of the loop, each owned by the file
 * named beside it. */
typedef struct worker_ctx {
    herd_run *run;
    herd_worker w;
    herd_algo algo;
    herd_loader loader;
    float *x;                 /* the step's batch */
    int32_t *y;
    herd__ckpt_cursor resume; /* --resume: where this worker starts (step 0: from scratch); ckpt_run.c */
    herd__fault fault;        /* --fail, --slow: fault.c */
    herd__claim claim;        /* asynchronous algorithms' batches and stop word: claim.c */
    herd__nf nf;              /* non-finite losses and gradients: nonfinite.c */
    herd__div div;            /* worker 0: is the run diverging? diverge.c */
    herd__trace trace;        /* --trace: this worker's spans; trace.c */
    worker_stop stop;         /* cfg->stop: loop.c */
    worker_compute compute;   /* loop.c */
    worker_eval eval;         /* loop.c */
    worker_result result;     /* loop.c; result.c */
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
/* A worker's whole run, on its thread: sets c->result.st. */
void *herd__worker_thread(void *c);
/* Evaluation on worker 0 (logs and reports). */
herd_status herd__evaluate(worker_ctx *c, double epoch_loss, double t_epoch);

#endif
