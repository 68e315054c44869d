/* herd_run.h — a training run: configuration, workers, result.
 *
 * herd_train() loads the data, builds one model per worker, runs the worker
 * loop on every worker (threads engine: one thread each) and evaluates. The
 * worker loop calls the algorithm's hooks (herd_algo.h) around each step; the
 * loop itself knows nothing of how workers synchronize.
 *
 * Ownership: the caller owns the config (read-only during the run) and the
 * result. Logging goes to cfg->log_path (JSON Lines) and, where cfg->quiet is
 * false, for humans, stderr (the defaults are quiet).
 */
#ifndef HERD_RUN_H
#define HERD_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>

#include "herd/herd_comm.h"
#include "herd/herd_optim.h"
#include "herd/herd_status.h"

enum { HERD_MAX_SLOW = 16 };

typedef struct herd_slow {
    size_t rank;
    double factor; /* compute takes factor times as long (>= 1) */
} herd_slow;

/* An option of the run's algorithm, as typed: `--ps-shards 4` is
 * {"ps-shards", "4"}, a bare flag `--staleness-lr` {"staleness-lr", NULL}.
 * The algorithm's table (herd_algo_ops.opts) says what it means. */
typedef struct herd_arg {
    const char *name, *value;
} herd_arg;

enum { HERD_MAX_ALGO_ARGS = 32 };

enum { HERD_MAX_FAIL = 16 };

/* --fail RANK@STEP[:MODE]: worker RANK fails on purpose when it reaches
 * STEP. STOP (the threads engine's, and its only mode) ends the worker's
 * thread; the others are process deaths, for the mpi engine only (on threads
 * they would kill every worker at once): _exit(0) or _exit(1) without
 * MPI_Finalize, abort(), or SIGKILL to itself. DEFAULT is STOP on threads and
 * EXIT1 on mpi. */
typedef enum herd_fail_mode {
    HERD_FAIL_DEFAULT,
    HERD_FAIL_STOP,
    HERD_FAIL_EXIT0,
    HERD_FAIL_EXIT1,
    HERD_FAIL_ABORT,
    HERD_FAIL_KILL,
} herd_fail_mode;

typedef struct herd_fail {
    size_t rank, step;
    herd_fail_mode mode;
} herd_fail;

/* Parses a --fail MODE name (stop, exit0, exit1, abort, kill). */
herd_status herd_fail_mode_parse(const char *s, herd_fail_mode *out);
/* The name of a mode ("default" for HERD_FAIL_DEFAULT). */
const char *herd_fail_mode_name(herd_fail_mode m);

enum { HERD_MAX_INJECT = 16 };

/* --inject-nan RANK@STEP (for testing the non-finite checks): a NaN is
 * written into worker RANK's gradient at the step it takes after STEP steps. */
typedef struct herd_inject {
    size_t rank, step;
} herd_inject;

/* --skip-nonfinite: a run stops anyway after this many skipped steps in a
 * row (the weights themselves have gone bad, or the learning rate is far
 * too high: skipping more would only hide it). */
enum { HERD_NONFINITE_MAX_SKIPS = 10 };

/* --eval-every-steps: at most this many steps between evaluations. */
enum { HERD_MAX_EVAL_EVERY_STEPS = 1000000000 };

typedef struct herd_train_config {
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
    herd_slow slow[HERD_MAX_SLOW];
    size_t nslow;
    const char *log_path;   /* JSON Lines, or NULL */
    const char *trace_path; /* each worker's timeline as a Chrome trace (chrome://tracing, Perfetto), or NULL */
    bool progress;          /* progress bar on stderr (when it is a terminal and not quiet) */
    bool quiet;             /* nothing on stderr but errors and warnings (default true: set it false for the
                             * epoch lines and the progress bar, as herd train does) */
    size_t max_steps;       /* stop after this many steps per worker (0: no limit); benchmarks */
    double comm_timeout_s;  /* a worker blocked in communication longer fails (default 60) */
    /* The algorithm's own options (herd_train_config_set), applied in order
     * over its defaults; an option the algorithm does not have is refused. */
    herd_arg algo_args[HERD_MAX_ALGO_ARGS];
    size_t nalgo_args;
    herd_fail fail[HERD_MAX_FAIL];
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
     * dropped), up to HERD_NONFINITE_MAX_SKIPS in a row. */
    bool skip_nonfinite;
    herd_inject inject_nan[HERD_MAX_INJECT];
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
} herd_train_config;

/* Fills cfg with the defaults `herd train` uses. */
void herd_train_config_defaults(herd_train_config *cfg);

/* Sets the algorithm's option `name` (without "--") to value (NULL: a bare
 * flag), as `--name value` would; the strings must outlive cfg. Checked by
 * herd_train against the algorithm's table; HERD_ENOMEM when cfg holds
 * HERD_MAX_ALGO_ARGS already. */
herd_status herd_train_config_set(herd_train_config *cfg, const char *name, const char *value);

typedef struct herd_train_result {
    const char *algo, *engine, *model;
    const char *optimizer;  /* "sgd", "lars", "lamb" (the summary's "optimizer") */
    const char *precision;  /* "fp32", "bf16" (the summary's "precision") */
    uint64_t train_digest, test_digest; /* the data sets read (herd_dataset.digest; 0: none), the summary's */
    bool other_data;        /* resumed on other data (cfg->other_data): the checkpoint's digests below */
    uint64_t ckpt_train_digest, ckpt_test_digest;
    double lr;              /* the base learning rate, --lr-scale applied (the summary's "lr") */
    const char *status;     /* "ok"; "diverged" where the loss ran away, "not_learning" where it stayed at
                             * chance (the summary's "status") */
    size_t rank;            /* this process's first worker (mpi: its rank; threads: 0) */
    size_t workers, epochs;
    size_t threads;         /* compute threads per worker, as chosen (herd_train_config's threads) */
    const char *threads_from; /* why: "--threads", "OMP_NUM_THREADS", "cores" (one worker here: all of
                               * them), "cores/workers" (several: a share each), "sim" (herd-sim: 1) */
    bool adapt_threads;     /* --adapt-threads */
    double threads_full_share; /* adapting: the share of this process's workers' steps run at
                                * `threads` (the rest at 1); 1 otherwise */
    size_t threads_switches;   /* adapting: how often this process's workers changed count */
    char run_id[17];        /* 16 hex digits, the same on every rank; in the log's records' "start" */
    double test_acc, test_loss, train_loss;
    double wall_s;          /* whole run, data loading excluded */
    double train_s;         /* time in training steps (evaluation excluded): the slowest worker's */
    double train_img_per_s; /* images trained per second, all workers */
    uint64_t bytes_sent;    /* all workers */
    size_t steps;           /* per worker (worker 0's) */
    /* Each worker's time per epoch (its train_s over the epochs it ended)
     * and steps, over the workers: asynchronous workers do not keep step, so
     * the median worker tells how fast the run trained, the max how far its
     * slowest worker lagged (the log's "worker" records give every worker's). */
    double epoch_s_median, epoch_s_min, epoch_s_max;
    size_t slowest_worker;  /* the worker of epoch_s_max */
    double steps_median;
    size_t steps_min, steps_max;
    double images;          /* images trained, all workers */
    size_t nparams;
    double comm_wait_s;     /* mean over workers */
    double replica_max_diff;/* max |x_i - x_0| over this process's workers' parameters */
    const char *eval_model; /* what test_acc measures: "worker0", or the algorithm's ("center", "average") */
    double worker0_acc;     /* worker 0's own model (equals test_acc when eval_model is "worker0") */
    size_t nlost;           /* workers lost to --fail that the others survived */
    size_t lost[HERD_MAX_FAIL];
    char algo_json[256];    /* the algorithm's own summary members (`,"key":value`...; allreduce: overlap) */
    size_t skipped_steps;   /* --skip-nonfinite: updates not applied; allreduce: worker 0's (every
                             * worker skips the same), elsewhere: every worker's own dropped
                             * gradients, over the whole run */
    /* test_acc/test_loss/train_loss are valid where rank == 0 */
    /* On failure too: refused when the configuration was refused before any
     * work (an unknown name, a value out of range, an impossible
     * combination: a usage error, exit 2 for herd train); rank as above. */
    bool refused;
    int stop_signal;        /* the run was stopped (cfg->stop): the signal's number; 0 otherwise */
    size_t stop_step;       /* with stop_signal: worker 0's step at the stop */
    bool stop_checkpoint;   /* with stop_signal: a checkpoint of that step is in cfg->checkpoint_dir */
    /* With cfg->keep_final, where rank == 0 and the run ended (herd_train
     * returned HERD_OK and stop_signal is 0), else NULL: a copy of the model
     * the final evaluation scored, the one users keep (eval_model's: the
     * center, the average, the server's, or worker 0's weights): its
     * nparams parameters and nbuffers non-trainable buffers (worker 0's
     * batch-norm statistics), each in the model's flat layout, which
     * herd_model_tensors (herd_nn.h) names and shapes for the model
     * herd_model_create(model, in_c, in_h, in_w, nclasses, ...) builds: load
     * them with memcpy into herd_model_params and herd_model_buffers. Owned
     * by the result: herd_train_result_free. */
    float *final_params, *final_buffers;
    size_t nbuffers;
    size_t in_c, in_h, in_w, nclasses; /* the shape of one example, and the classes */
} herd_train_result;

/* Fills *res (its previous contents are not freed: pass each result to
 * herd_train_result_free before reusing it). The final evaluation runs on
 * the calling thread, whose intra-op threads it sets to cfg->threads
 * (herd_nn_set_threads). */
herd_status herd_train(const herd_train_config *cfg, herd_train_result *res, herd_err *err);
/* Frees what herd_train allocated in res (final_params, final_buffers). */
void herd_train_result_free(herd_train_result *res);

/* ---- herd bench allreduce ---- */
enum { HERD_BENCH_MAX_ROWS = 64 };

typedef struct herd_bench_allreduce_config {
    const char *engine;           /* a registered engine (herd_engine.h); NULL: herd_engine_pick's default */
    size_t workers;               /* ignored where the engine's launcher sizes the run (mpi) */
    size_t min_bytes, max_bytes;  /* sizes doubled from min to max */
    size_t warmup, iters;
    double timeout_s;
    herd_allreduce_opts opts;
    bool versus_native;           /* time herd's ring and the engine's own side by side */
} herd_bench_allreduce_config;

typedef struct herd_bench_row {
    size_t bytes;
    double time_us, algbw_gbs, busbw_gbs;
    size_t wrong;
    double native_time_us, native_busbw_gbs; /* with versus_native */
} herd_bench_row;

/* Runs the allreduce benchmark; rows are filled on the process holding rank 0
 * (*nrows is 0 elsewhere); *world is the number of ranks. */
herd_status herd_bench_allreduce(const herd_bench_allreduce_config *cfg, herd_bench_row *rows, size_t *nrows,
                                 size_t *world, herd_err *err);

/* Writes the result as one JSON object (no newline) to f; a non-finite
 * number is written as null. HERD_EIO when a write fails (errno says why). */
herd_status herd_train_result_json(const herd_train_result *res, FILE *f);

#endif
