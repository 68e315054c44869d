/* ckpt_run.h — checkpoints of a training run (internal to src/run).
 *
 * What a worker saves, per worker r (sections of herd_ckpt.h):
 *   params    its flat weights (nparams floats)
 *   momentum  its optimizer's momentum (absent when momentum is 0; lamb:
 *             Adam's first moment)
 *   optim     its optimizer's record (herd_optim_state_save: which one, and
 *             lamb's step counts and second moment); absent for sgd
 *   buffers   its model's non-trainable state (batch-norm statistics; absent if none)
 *   cursor    where it is: epoch, step within the epoch, steps in all, and the
 *             epoch's running loss sum and count (so the epoch's train_loss
 *             comes out the same)
 *   rng       the data order: herd draws no random numbers while training
 *             except each epoch's permutation, derived from (seed, epoch); the
 *             section holds seed, epoch and a CRC32C of that permutation, so
 *             a resume that would see other data in another order is refused
 *   algo      the algorithm's own state, from its save hook (where it has one)
 * and, asynchronous algorithms only, for worker 0:
 *   claim     the shared batch counter (global batches handed out); the
 *             header's step is claim / workers, its epoch that of the last
 *             batch handed out, and each worker's cursor holds its own steps
 * and, for worker 0, the model the run keeps (herd_ckpt.h): `meta` always,
 * `model` where it is not worker 0's weights. Worker 0 takes it from the
 * algorithm's eval_params while every worker is between the save's two
 * barriers (nothing moves a center or a window then); after the run's
 * final evaluation herd__ckpt_final writes the newest checkpoint again
 * with what that evaluation scored.
 *
 * Checkpointing is collective over the run's workers (an engine with
 * HERD_ENGINE_CHECKPOINT): each settles what its algorithm has in flight
 * (the save hook's sizing call), copies its state into its slot between
 * two barriers; the workers of processes other than worker 0's (mpi: every
 * rank but 0) then send their slot to worker 0, which receives them in rank
 * order and writes the one file while the others go on; the next
 * checkpoint's first barrier waits for that write to end before any slot is
 * touched again. The file is the same whichever engine wrote it: a run
 * resumes on another engine with as many workers. On --resume every process
 * reads the directory (a filesystem the processes share) and the workers
 * check that they all took the same checkpoint. Only worker 0's process
 * locks the directory. Asynchronous algorithms checkpoint only where every
 * worker is in one process (not on HERD_ENGINE_PROCESS_PER_WORKER). Synchronous
 * algorithms checkpoint at the same step of every worker; asynchronous ones
 * when the shared batch counter reaches a hold (herd__ckpt_next_hold), where
 * every worker stops between two steps: no lock is held and no transfer is
 * in flight, so each piece of shared state (a server, a center, a window)
 * is copied by its holder exactly as it is. Such a resume restores every
 * byte of state, but is not bit for bit the run that was not stopped: the
 * workers' interleaving is not reproducible.
 */
#ifndef HERD_RUN_CKPT_RUN_H
#define HERD_RUN_CKPT_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "herd/herd_algo.h"
#include "herd/herd_ckpt.h"
#include "herd/herd_comm.h"
#include "herd/herd_data.h"
#include "herd/herd_run.h"
#include "algo/run_config.h"

/* A worker's position in the run, saved and restored with it. */
typedef struct herd__ckpt_cursor {
    uint64_t epoch;      /* the epoch under way */
    uint64_t epoch_step; /* steps done in it */
    uint64_t step;       /* steps done in all */
    uint64_t nloss;      /* losses summed so far this epoch */
    double loss_sum;
    uint64_t claimed;    /* asynchronous: global batches handed out (the shared counter) */
} herd__ckpt_cursor;

typedef struct herd__ckpt_run herd__ckpt_run;

/* Refuses the checkpoint options this run cannot honour, naming why. */
herd_status herd__ckpt_check(const herd__train_config *cfg, const herd_algo_ops *algo, const herd_engine *engine,
                             herd_err *err);

/* The run's checkpoint state (*out stays NULL when cfg has no checkpoint
 * directory), in the process that runs workers first_rank .. first_rank +
 * nlocal - 1 of cfg->workers. Creates the directory if it is missing (not its parents).
 * Without cfg->resume, refuses a directory that already holds checkpoints.
 * With cfg->resume, loads the newest valid checkpoint, saying on stderr
 * (unless quiet) which newer ones were skipped and why, and refuses one of
 * another model, algorithm, worker count, batch, seed or data set size,
 * and one whose run read other data (train, test: this run's sets, their
 * digests; HERD_EDATA, unless cfg->other_data; NULL, NULL: none recorded,
 * none compared). */
herd_status herd__ckpt_run_open(const herd__train_config *cfg, const char *algo, size_t nparams,
                                size_t steps_per_epoch, const herd_dataset *train, const herd_dataset *test,
                                size_t first_rank, size_t nlocal, herd__ckpt_run **out, herd_err *err);
/* A resume on other data than its checkpoint's (cfg->other_data let it
 * through): true, with the checkpoint's digests; false otherwise. */
bool herd__ckpt_other_data(const herd__ckpt_run *cr, uint64_t *train, uint64_t *test);
/* The options the checkpoints record and a resume must keep (the run's
 * HERD_OPT_RESUME rows; the algorithm's options where it keeps no state
 * of its own, whose save/load checks them otherwise), from the run's
 * resolved configuration; resuming, a value that differs from the
 * checkpoint's is refused, naming both. Nothing to do where cr is NULL. */
herd_status herd__ckpt_run_options(herd__ckpt_run *cr, const herd_algo_ops *ops, const void *algo_opts, herd_err *err);
/* The model's description, which each checkpoint records (its
 * "description" section); resuming, one that differs from the
 * checkpoint's is refused. Nothing to do where cr is NULL. */
herd_status herd__ckpt_run_describe(herd__ckpt_run *cr, const char *desc, herd_err *err);
void herd__ckpt_run_free(herd__ckpt_run *cr);
bool herd__ckpt_resuming(const herd__ckpt_run *cr);

/* Resume, before the workers start: restores worker w's weights, momentum,
 * buffers, step and epoch, checks the data order of loader l (which it
 * leaves at the checkpoint's epoch) and fills cur. */
herd_status herd__ckpt_restore(herd__ckpt_run *cr, herd_worker *w, herd_loader *l, herd__ckpt_cursor *cur,
                               herd_err *err);
/* Resume, on the worker's thread after the algorithm's init: its own state
 * (collective where the run spans processes: they agree on the checkpoint). */
herd_status herd__ckpt_restore_algo(herd__ckpt_run *cr, herd_algo *a, herd_worker *w);

/* Synchronous: whether worker w checkpoints now that it has done w->step steps. */
bool herd__ckpt_due(const herd__ckpt_run *cr, const herd_worker *w);
/* Asynchronous: the shared batch counter's next hold after `claimed`
 * (UINT64_MAX: none; always UINT64_MAX when cr is NULL). A worker that
 * finds the counter at a hold does not take the batch: it checkpoints, and
 * so does every other worker, each arriving there after its current step,
 * before any takes a batch again. Holds are every --checkpoint-every steps
 * of every worker (every * workers batches) and the run's last batch. */
uint64_t herd__ckpt_next_hold(const herd__ckpt_run *cr, uint64_t claimed);
/* Collective over the run's workers (see above); errors in w->err. */
herd_status herd__ckpt_save(herd__ckpt_run *cr, herd_algo *a, herd_worker *w, const herd_loader *l,
                            const herd__ckpt_cursor *cur);

/* After the run's final evaluation (rank 0, a run that ended, every
 * worker stopped): when this run's last checkpoint is of its last step,
 * writes it again with the model that evaluation scored (`params`,
 * nparams floats; `name`, the result's eval_model), marked final. Nothing
 * when cr is NULL or the last checkpoint is older (a run resumed from its
 * end, a run stopped early). */
herd_status herd__ckpt_final(herd__ckpt_run *cr, const float *params, const char *name, herd_err *err);

/* herd eval and herd export: the newest valid checkpoint of dir (*ck, the
 * caller's to free), its file name, the warnings of newer ones skipped,
 * its header and what it keeps (herd_ckpt_kept_info). */
herd_status herd__ckpt_open_latest(const char *dir, herd_ckpt **ck, char *label, size_t label_cap, char *warn,
                                   size_t warn_cap, herd_ckpt_info *info, herd_ckpt_kept *kept, herd_err *err);

/* Whether output `path` would write over a file of checkpoint directory
 * `dir` (or of the directory of checkpoint file `dir`) that herd reads or
 * keeps there: a checkpoint (ckpt-N.herd), a writer's temporary file, the
 * lock. Links are followed: a link to a checkpoint is one. herd eval's
 * dumps, herd export's OUT, --log and --trace ask it before writing: a
 * checkpoint written over by the output of its own evaluation was the run's
 * one model, gone. */
bool herd__ckpt_holds(const char *dir, const char *path);

/* herd export: the model's tensors ts[0..n) into cfg->out, in cfg->format
 * (ckpt_export.c); res says what the model is, for the metadata. */
herd_status herd__export_write(const herd_export_config *cfg, const herd_export_result *res, herd_model *m,
                               const herd_tensor *ts, size_t n, herd_err *err);

/* Whether the data sets with digests train and test (read from path) are
 * the ones checkpoint `label` records in k: HERD_OK where they are, or
 * where k records none (an older herd's); else HERD_EDATA in err, naming
 * both, and ending with `how` (the flag that lets it through). */
herd_status herd__ckpt_check_data(const char *label, const herd_ckpt_kept *k, const char *path, uint64_t train,
                                  uint64_t test, const char *how, herd_err *err);

/* A digest of the whole checkpoint file as read: ranks that resume under
 * mpirun check they read the same bytes, not only the same step. */
uint64_t herd__ckpt_content_digest(const herd_ckpt *ck);

/* The meta section's bytes (herd_ckpt.h) for k into buf (cap bytes, may be
 * NULL); returns the length it takes. */
size_t herd__ckpt_meta_encode(const herd_ckpt_kept *k, unsigned char *buf, size_t cap);

#endif
