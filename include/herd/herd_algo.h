/* herd_algo.h — the synchronization algorithm interface.
 *
 * An algorithm is a table of hooks the worker loop calls around each step;
 * a NULL hook means "nothing to do". The order within one step is:
 *
 *   before_step        (e.g. pull the global weights)
 *   forward, loss
 *   grad_ready(off,len) for each parameter range as backward finishes it,
 *                      last layer first (e.g. start a bucket's allreduce)
 *   after_backward     (e.g. wait for the allreduce); fills a herd_step_result:
 *                      whether it took the update itself, and what it found
 *                      non-finite
 *   the update         the worker's optimizer step (w->optim, src/optim/) on
 *                      every parameter with the worker's learning rate, done
 *                      by the loop, unless after_backward took it; or the
 *                      algorithm's own `step` where the update is not a
 *                      local one (a push to a parameter server)
 *   after_step         (e.g. gossip, elastic exchange)
 *
 * Between backward and the update the worker loop checks the loss and
 * gradient for NaN and Inf (herd_run.h, skip_nonfinite): a step it skips
 * runs every hook but the update (w->skipped says so to after_step), so the
 * algorithm's exchanges go on with finite weights; an asynchronous worker
 * that stops on one returns before after_backward.
 *
 * and end_epoch after the last step of each epoch, finish after the worker's
 * last step. Algorithms never ask which
 * engine they run on: they talk to other workers only through w->comm.
 * Per-worker state lives in the algorithm's own struct, allocated by init.
 *
 * Asynchronous algorithms (ops->async) do not make workers wait for one
 * another every step. The worker loop then hands out the global batches of
 * an epoch from a counter all workers share, so the fast workers take more
 * of them and an epoch ends when the workers together have used the whole
 * training set, however slow one of them is; and a worker lost to --fail
 * leaves the others running (herd_worker_lost tells who is gone). Windows an
 * algorithm creates are freed by its free hook, which runs after every
 * worker of the process has stopped.
 */
#ifndef HERD_ALGO_H
#define HERD_ALGO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd_comm.h"
#include "herd/herd_nn.h"
#include "herd/herd_opt.h"
#include "herd/herd_optim.h"
#include "herd/herd_status.h"

typedef struct herd_algo herd_algo;

/* What an algorithm may ask of the run it is part of, placed in the worker
 * by the worker loop (an algorithm never calls into src/run/). NULL ops: no
 * run around it (a test driving the hooks itself): nobody is lost and the
 * run never stops. */
typedef struct herd_peers_ops {
    /* Whether worker `rank` was lost (--fail) while the run went on. */
    bool (*lost)(void *ctx, size_t rank);
    /* HERD_ENONFINITE, with err saying who and where, once another worker
     * stopped the run on a non-finite value; else HERD_OK. */
    herd_status (*stopping)(void *ctx, herd_err *err);
} herd_peers_ops;

typedef struct herd_peers {
    const herd_peers_ops *ops;
    void *ctx;
} herd_peers;

/* What after_backward tells the worker loop about this step. */
typedef struct herd_step_result {
    /* The update is taken (allreduce: fused into the reduction): the loop
     * takes no optimizer step. */
    bool applied;
    /* Synchronous algorithms: what the workers reduced together this step
     * (allreduce: the averaged gradient) holds a NaN or Inf; the same on
     * every worker, and the algorithm's state is as if the step never
     * happened. Answered only where ops->agrees_nonfinite; elsewhere the
     * loop agrees on it with a one-float allreduce of its own. */
    bool nonfinite;
    /* This worker's own gradient held a NaN or Inf, as the algorithm found
     * on its way (allreduce: while summing it); only where
     * ops->checks_gradient, and then the loop does not read the gradient
     * itself (a pass over memory). */
    bool own_nonfinite;
} herd_step_result;

/* What an algorithm sees of the worker it runs in. */
/* An option of the run's algorithm, as typed: `--ps-shards 4` is
 * {"ps-shards", "4"}, a bare flag `--staleness-lr` {"staleness-lr", NULL}.
 * The algorithm's table (herd_algo_ops.opts) says what it means. */
typedef struct herd_arg {
    const char *name, *value;
} herd_arg;

/* The run's configuration (internal to the library: src/algo/run_config.h
 * defines it for herd's own algorithms; a program sets it by name through
 * herd_config.h). */
typedef struct herd__train_config herd__train_config;

typedef struct herd_worker {
    size_t rank, nworkers;
    herd_model *model;
    float *params, *grads; /* the model's flat arrays */
    size_t nparams;
    herd_optim optim;
    float lr;              /* this step's learning rate (schedule applied) */
    size_t step;           /* steps done by this worker, all epochs */
    size_t epoch;
    size_t steps_per_epoch;
    const herd__train_config *cfg;
    const void *opts;      /* the algorithm's own options (ops->opts), parsed and checked */
    bool cores_taken;      /* the compute threads of this process's workers take every core
                            * of the machine (a helper thread would take one from them) */
    herd_comm *comm;       /* this worker's endpoint; rank/size as above */
    uint64_t bytes_sent;   /* bytes sent by the algorithm (beyond comm's own count) */
    double comm_wait_s;    /* time blocked in communication (beyond comm's own count) */
    herd_err err;          /* detail for a failing hook */
    bool skipped;          /* this step's update was not applied (--skip-nonfinite) */
    herd_peers peers;      /* the run around the worker */
} herd_worker;

/* Whether worker `rank` was lost (--fail) while the run went on. */
static inline bool herd_worker_lost(const herd_worker *w, size_t rank)
{
    return w->peers.ops && rank < w->nworkers && w->peers.ops->lost(w->peers.ctx, rank);
}

/* Asynchronous algorithms, in a wait for other workers: HERD_ENONFINITE
 * (w->err says who and where) once a worker has stopped the run on a
 * non-finite value, so nobody waits out --timeout for a worker that is gone.
 * Cheap: the run reads its shared state at most every 10 ms. */
static inline herd_status herd_worker_stopping(herd_worker *w)
{
    return w->peers.ops ? w->peers.ops->stopping(w->peers.ctx, &w->err) : HERD_OK;
}

typedef struct herd_algo_ops {
    const char *name;
    const char *summary;  /* one line for --help */
    size_t min_workers, max_workers; /* 0: no bound */
    bool async;           /* see above: shared batch counter, survives lost workers */
    /* The algorithm's own flags (herd_opt.h), NULL-name terminated, filling
     * a struct of opts_size bytes that the worker sees as w->opts. The CLI
     * parses and lists them; herd_train fills the defaults, applies the
     * run's (herd__train_config_set) and refuses an option of another
     * algorithm, naming the algorithms that take it. Several tables (a
     * family's members) may share one. */
    const herd_opt *opts;
    size_t opts_size;
    /* Optional: checks the options against the rest of the run (bounds that
     * depend on the number of workers), before any worker starts. */
    herd_status (*check)(const struct herd_algo_ops *ops, const void *opts, const herd__train_config *cfg,
                         herd_err *err);
    /* Which member of a family this table is, for the family's file (ps.c
     * keeps its server-momentum and lock-free variants here); NULL: none. */
    const void *variant;
    /* Optional: the worker's optimizer (w->optim, which takes the local
     * update) as this algorithm needs it, from the run's --lr, --momentum...
     * (elastic averaging's local rule is plain SGD; a parameter server keeps
     * the momentum itself, not the worker). */
    void (*optim_config)(const struct herd_algo_ops *ops, const void *opts, herd_optim_config *oc);
    /* after_backward answers herd_step_result's nonfinite (synchronous) and
     * own_nonfinite, see there. */
    bool agrees_nonfinite;
    bool checks_gradient;
    /* Whether a run of this algorithm keeps nothing between steps beyond
     * each worker's weights and optimizer, so checkpoints need no save/load
     * of its own (sgd). */
    bool stateless;
    herd_status (*init)(herd_algo *a, herd_worker *w);
    herd_status (*before_step)(herd_algo *a, herd_worker *w);
    herd_status (*grad_ready)(herd_algo *a, herd_worker *w, size_t off, size_t len);
    herd_status (*after_backward)(herd_algo *a, herd_worker *w, herd_step_result *res);
    /* The update where it is not the worker's optimizer step (see above). */
    herd_status (*step)(herd_algo *a, herd_worker *w);
    herd_status (*after_step)(herd_algo *a, herd_worker *w);
    herd_status (*end_epoch)(herd_algo *a, herd_worker *w);
    /* After the worker's last step (collective only where !async). */
    herd_status (*finish)(herd_algo *a, herd_worker *w);
    /* The model users keep (a center, an average), on worker 0 before each
     * evaluation: copies it into out (nparams floats) and sets *name (e.g.
     * "center"); leaving *name NULL evaluates worker 0's own weights. May
     * run on a thread other than the worker's, after the workers stopped. */
    herd_status (*eval_params)(herd_algo *a, herd_worker *w, float *out, const char **name);
    /* Before an evaluation within an epoch (--eval-every-steps) of a
     * synchronous run, on every worker (collective): brings what
     * eval_params gives up to date where end_epoch is what does so
     * (dpsgd's and sgp's average). Its communication is not counted as the
     * run's. */
    herd_status (*before_eval)(herd_algo *a, herd_worker *w);
    /* Appends the algorithm's own per-epoch figures to the worker's epoch
     * log record, as `,"key":value` JSON members (at most cap bytes, NUL
     * included); called after end_epoch. */
    void (*log_epoch)(herd_algo *a, herd_worker *w, char *buf, size_t cap);
    /* Appends the algorithm's own members of the run's JSON summary (on
     * worker 0, after the run), as `,"key":value` (at most cap bytes, NUL
     * included). */
    void (*summary_json)(herd_algo *a, herd_worker *w, char *buf, size_t cap);
    void (*free)(herd_algo *a, herd_worker *w);
    /* Checkpoints (--checkpoint; see herd_ckpt.h and src/run/ckpt_run.h).
     * Optional: NULL means the algorithm keeps no state between steps beyond
     * the worker's weights and optimizer (sgd); an algorithm that does keep
     * some (a residual, a loss scale, push-sum weights, a server, a center)
     * must fill both, or --checkpoint is refused for it. save copies this
     * worker's state into buf (cap bytes) and sets *len to the bytes it
     * needs. It is called on the worker's thread, after after_step, with
     * every worker between two steps (synchronous: at the same step;
     * asynchronous: at a hold of the shared batch counter): first with buf
     * NULL and cap 0, before a barrier of every worker, to size the buffer
     * and to settle what the algorithm has in flight (no lock held, no
     * transfer pending after it), then again after that barrier to copy.
     * Shared state (a server shard, a center, a window) is saved by the
     * worker that holds it. Timings are not state: a bit-exact resume must
     * not depend on them. load restores it after init, on the worker's
     * thread, before any worker steps; a len it does not expect is
     * HERD_ECORRUPT, a record of other settings (wire type, topology...)
     * HERD_EINVAL, with w->err saying so. */
    herd_status (*save)(herd_algo *a, herd_worker *w, void *buf, size_t cap, size_t *len);
    herd_status (*load)(herd_algo *a, herd_worker *w, const void *buf, size_t len);
} herd_algo_ops;

struct herd_algo {
    const herd_algo_ops *ops;
    void *state; /* owned by the algorithm */
};

/* The algorithm called `name`, or NULL. */
const herd_algo_ops *herd_algo_find(const char *name);
/* Every algorithm, NULL-terminated. */
extern const herd_algo_ops *const herd_algos[];

/* The worker's optimizer for an algorithm: the run's settings as
 * ops->optim_config adjusts them, for n parameters, which are model's
 * (lars and lamb adapt the rate per tensor: herd_model_param_groups), or
 * NULL: n parameters taken as one weight tensor. */
herd_status herd_algo_optim_init(const herd_algo_ops *ops, const void *opts, const herd_optim_config *run,
                                 const herd_model *model, size_t n, herd_optim *out, herd_err *err);

/* A step's update, in one place (the worker loop's, and any driver of the
 * hooks): nothing when skip or after_backward took it (res->applied), the
 * algorithm's own step where it has one, else the worker's optimizer step
 * on every parameter at w->lr. Sets w->skipped for after_step. res may be
 * NULL; a or a->ops NULL is HERD_EINVAL in w->err (w NULL: the status
 * alone). */
herd_status herd_algo_update(herd_algo *a, herd_worker *w, const herd_step_result *res, bool skip);

/* ops's options from their defaults and args (as herd__train_config's
 * algo_args), into out (ops->opts_size bytes), without ops->check: an
 * option ops does not have is HERD_EINVAL naming the algorithms that do;
 * so is an args[i].name NULL (args may be NULL for nargs 0). */
herd_status herd_algo_opts_parse(const herd_algo_ops *ops, const herd_arg *args, size_t nargs, void *out, herd_err *err);

/* The first algorithm's row for option `name` (and that algorithm in
 * *owner), or NULL when no algorithm has it: how a command line tells an
 * algorithm's flag from an unknown one before it knows the algorithm. */
const herd_opt *herd_algo_opt_find(const char *name, const herd_algo_ops **owner);

#endif
