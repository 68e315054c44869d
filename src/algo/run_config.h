/* run_config.h — the run's configuration as herd's own code reads it: the
 * struct behind the public, opaque herd_config (herd_config.h), internal to
 * the library (not installed). Every field that is an option is a row of
 * the run's option table (src/run/options.c: name, type, default, bounds,
 * group, help, whether ranks must agree); its defaults, parsing, help,
 * validation, the log's start record, the ranks' agreed record and the
 * JSON summary's echo of options all come from those rows. It sits with
 * the algorithms because they read it (w->cfg, herd_algo_ops.check); the
 * run fills and checks it.
 *
 * Ownership: strings point into storage that outlives the struct (the
 * herd_config that holds it, or a caller's literals and argv). */
#ifndef HERD_ALGO_RUN_CONFIG_H
#define HERD_ALGO_RUN_CONFIG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd_algo.h"
#include "herd/herd_nn.h"
#include "herd/herd_optim.h"
#include "herd/herd_run.h"
#include "herd/herd_status.h"

enum { HERD_MAX_SLOW = 16 };

typedef struct herd__slow {
    size_t rank;
    double factor; /* compute takes factor times as long (>= 1) */
} herd__slow;

enum { HERD_MAX_ALGO_ARGS = 32 };

/* --fail RANK@STEP[:MODE]: worker RANK fails on purpose when it reaches
 * STEP. STOP (the threads engine's, and its only mode) ends the worker's
 * thread; the others are process deaths, for the mpi engine only (on threads
 * they would kill every worker at once): _exit(0) or _exit(1) without
 * MPI_Finalize, abort(), or SIGKILL to itself. DEFAULT is STOP on threads and
 * EXIT1 on mpi. */
typedef enum herd__fail_mode {
    HERD_FAIL_DEFAULT,
    HERD_FAIL_STOP,
    HERD_FAIL_EXIT0,
    HERD_FAIL_EXIT1,
    HERD_FAIL_ABORT,
    HERD_FAIL_KILL,
} herd__fail_mode;

typedef struct herd__fail {
    size_t rank, step;
    herd__fail_mode mode;
} herd__fail;

/* Parses a --fail MODE name (stop, exit0, exit1, abort, kill). */
herd_status herd__fail_mode_parse(const char *s, herd__fail_mode *out);
/* The name of a mode ("default" for HERD_FAIL_DEFAULT). */
const char *herd__fail_mode_name(herd__fail_mode m);

enum { HERD_MAX_INJECT = 16 };

/* --inject-nan RANK@STEP (for testing the non-finite checks): a NaN is
 * written into worker RANK's gradient at the step it takes after STEP steps. */
typedef struct herd__inject {
    size_t rank, step;
} herd__inject;

/* --eval-every-steps: at most this many steps between evaluations. */
enum { HERD_MAX_EVAL_EVERY_STEPS = 1000000000 };

typedef struct herd__train_config {
    const char *data;   /* see herd_data_open; NULL: default */
    const char *model;  /* herd_model_names */
    const char *algo;   /* herd_algo_names; NULL: sgd for one worker, allreduce for several */
    const char *engine; /* "threads", "mpi", or NULL: mpi when started by an MPI launcher */
    size_t workers, epochs, batch; /* batch is per worker */
    herd_optim_config optim;
    uint64_t seed;
    size_t threads;     /* intra-op threads per worker; 0 (the default): OMP_NUM_THREADS where set, else this
                         * process's cores (its affinity) over the workers sharing them, at least 1 */
    herd_precision precision; /* of the heavy ops (herd_nn.h; default FP32); BF16 needs avx512_core */
    bool adapt_threads; /* each worker runs at `threads` or at 1, whichever its steps time faster
                         * (herd_nn_adapt); results then depend on timing */
    size_t train_limit, test_limit; /* 0: whole set */
    size_t eval_every;  /* evaluate every K epochs (default 1; the last always) */
    bool eval_at_start; /* also evaluate before the first step (epoch 0, train_s 0; not on --resume) */
    /* Also evaluate every N global steps (0: off), within epochs too: a
     * synchronous run's step (every worker's count); an asynchronous run's
     * global step is `workers` batches of the shared batch counter, worker
     * 0 evaluating after its first step at or past each mark. */
    size_t eval_every_steps;
    size_t log_every;   /* a "step" log record every N steps of each worker (0: none) */
    herd__slow slow[HERD_MAX_SLOW];
    size_t nslow;
    const char *log_path;   /* JSON Lines, or NULL */
    const char *trace_path; /* each worker's timeline as a Chrome trace (chrome://tracing, Perfetto), or NULL */
    bool progress;          /* progress bar on stderr (when it is a terminal and not quiet) */
    bool quiet;             /* nothing on stderr but errors and warnings (default true: set it false for the
                             * epoch lines and the progress bar, as herd train does) */
    size_t max_steps;       /* stop after this many steps per worker (0: no limit); benchmarks */
    double comm_timeout_s;  /* a worker blocked in communication longer fails (default 60) */
    /* The algorithm's own options (herd__train_config_set), applied in order
     * over its defaults; an option the algorithm does not have is refused. */
    herd_arg algo_args[HERD_MAX_ALGO_ARGS];
    size_t nalgo_args;
    herd__fail fail[HERD_MAX_FAIL];
    size_t nfail;
    /* Checkpoints (herd_ckpt.h): threads engine, synchronous algorithms. */
    const char *checkpoint_dir; /* NULL: none */
    size_t checkpoint_every;    /* steps between checkpoints (0: one per epoch); the last step always */
    size_t checkpoint_keep;     /* the newest N are kept (default 3) */
    bool resume;                /* start from the newest valid checkpoint of checkpoint_dir */
    bool other_data;            /* resume on data other than the checkpoint's run read (its digests
                                 * differ) instead of refusing it (HERD_EDATA) */
    /* A NaN or Inf in a loss or gradient stops the run, with a message
     * naming the step and the worker(s): allreduce's workers at that step;
     * the other synchronous algorithms' at the end of its epoch (a worker
     * drops its gradients until then: no collective per step); an
     * asynchronous run at the other workers' next claim. skip_nonfinite:
     * the step's update is not applied instead (allreduce: by every worker,
     * so replicas stay identical; elsewhere: that worker's gradient is
     * dropped), up to max_skips in a row. */
    bool skip_nonfinite;
    size_t max_skips;
    herd__inject inject_nan[HERD_MAX_INJECT];
    size_t ninject_nan;
    /* Divergence (worker 0's loss, at each evaluation): a loss that is not
     * finite, back at or above chance (ln of the classes) after having
     * been below 0.9 of it, or 10 times its lowest. Not learning: a loss
     * still within 2% of chance after 100 steps, or at the run's end a
     * test accuracy within 2 points of chance (no test set: a final
     * training loss within 2% of it). Each is always warned of (stderr, a "diverged" or
     * "not_learning" log record, the summary's status); with
     * stop_on_divergence the run stops there with HERD_EDIVERGED. */
    bool stop_on_divergence;
    /* A stop asked from outside (herd train's SIGINT/SIGTERM handler sets
     * it to the signal's number; NULL: none). Once non-zero, the workers
     * end the step under way and stop together at one step (synchronous
     * algorithms: the step after the furthest worker's; asynchronous: each
     * at its next claim), a checkpoint is written there (--checkpoint,
     * synchronous), a "stop" log record is written, and herd_train returns
     * HERD_OK with the result's stop_signal set and status "stopped" (no
     * final evaluation). Where the workers live in several processes (mpi)
     * they cannot agree on a step: the run fails with HERD_ESTOPPED. */
    const atomic_int *stop; /* lock-free: a signal handler may store to it */
    /* The final model handed to the caller: herd_train_result's
     * final_params and final_buffers (see there). */
    bool keep_final;
} herd__train_config;

/* Fills cfg with the defaults `herd train` uses. */
void herd__train_config_defaults(herd__train_config *cfg);

/* Sets the algorithm's option `name` (without "--") to value (NULL: a bare
 * flag), as `--name value` would; the strings must outlive cfg. Checked by
 * herd_train against the algorithm's table; HERD_ENOMEM when cfg holds
 * HERD_MAX_ALGO_ARGS already. */
herd_status herd__train_config_set(herd__train_config *cfg, const char *name, const char *value);

#endif
