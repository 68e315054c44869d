/* herd_run.h — a training run: herd_train and its result.
 *
 * herd_train() loads the data, builds one model per worker, runs the worker
 * loop on every worker (threads engine: one thread each) and evaluates. The
 * worker loop calls the algorithm's hooks (herd_algo.h) around each step; the
 * loop itself knows nothing of how workers synchronize.
 *
 * Ownership: the caller owns the config (herd_config.h; read-only during
 * the run) and the result. Logging goes to the "log" option's file (JSON
 * Lines) and, where "quiet" is false, for humans, stderr (the library's
 * default is quiet).
 */
#ifndef HERD_RUN_H
#define HERD_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>

#include "herd/herd_comm.h"
#include "herd/herd_config.h"
#include "herd/herd_optim.h"
#include "herd/herd_status.h"

/* --fail: at most this many (the result's lost workers too). */
enum { HERD_MAX_FAIL = 16 };

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
    size_t threads;         /* compute threads per worker, as chosen (herd__train_config's threads) */
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
    int stop_signal;        /* the run was stopped (herd_config_set_stop): the signal's number; 0 otherwise */
    size_t stop_step;       /* with stop_signal: worker 0's step at the stop */
    bool stop_checkpoint;   /* with stop_signal: a checkpoint of that step is in the --checkpoint directory */
    /* The options the run ran with, every one as the run resolved it (the
     * algorithm, --lr, --threads...) and the algorithm's own: a JSON object,
     * the summary's "options" and the log's start record's. NULL where the
     * run was refused. Owned by the result: herd_train_result_free. */
    char *options;
    /* With the option keep-final, where rank == 0 and the run ended (herd_train
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
    /* With them: the model's input standardization, in_c values each
     * (herd_dataset.mean and .std): it takes (raw - mean) / std per channel,
     * raw being pixels / 255 for IDX and CIFAR data; NULL where the data had
     * none. Owned by the result. */
    float *input_mean, *input_std;
    size_t nbuffers;
    size_t in_c, in_h, in_w, nclasses; /* the shape of one example, and the classes */
} herd_train_result;

/* Fills *res (its previous contents are not freed: pass each result to
 * herd_train_result_free before reusing it). The final evaluation runs on
 * the calling thread, whose intra-op threads it sets to the workers'
 * (--threads; herd_nn_set_threads). */
herd_status herd_train(const herd_config *cfg, herd_train_result *res, herd_err *err);
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
 * (*nrows is 0 elsewhere; rows holds HERD_BENCH_MAX_ROWS); *world is the
 * number of ranks. HERD_EINVAL: min_bytes below 4 or above max_bytes,
 * iters 0, an unknown engine, workers outside [1, 4096] where the engine
 * does not size the run, opts' wire or impl not one of their enums. */
herd_status herd_bench_allreduce(const herd_bench_allreduce_config *cfg, herd_bench_row *rows, size_t *nrows,
                                 size_t *world, herd_err *err);

/* Writes the result as one JSON object (no newline) to f; a non-finite
 * number is written as null. HERD_EIO when a write fails (errno says why);
 * HERD_EINVAL (no message: there is no err) for res or f NULL, or
 * res->nlost above HERD_MAX_FAIL. */
herd_status herd_train_result_json(const herd_train_result *res, FILE *f);

#endif
