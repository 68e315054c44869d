/* herd_algo.h — the synchronization algorithm interface.
 *
 * An algorithm is a table of hooks the worker loop calls around each step;
 * a NULL hook means "nothing to do". The order within one step is:
 *
 *   before_step        (e.g. pull the global weights)
 *   forward, loss
 *   grad_ready(off,len) for each parameter range as backward finishes it,
 *                      last layer first (e.g. start a bucket's allreduce)
 *   after_backward     (e.g. wait for the allreduce, push a gradient)
 *   step               the update; NULL means the local optimizer step on
 *                      every parameter with the worker's learning rate
 *   after_step         (e.g. gossip, elastic exchange)
 *
 * and end_epoch after the last step of each epoch. Algorithms never ask which
 * engine they run on: they talk to other workers only through w->comm.
 * Per-worker state lives in the algorithm's own struct, allocated by init.
 */
#ifndef HERD_ALGO_H
#define HERD_ALGO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd_comm.h"
#include "herd/herd_nn.h"
#include "herd/herd_optim.h"
#include "herd/herd_run.h"
#include "herd/herd_status.h"

typedef struct herd_algo herd_algo;

/* What an algorithm sees of the worker it runs in. */
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
    const herd_train_config *cfg;
    herd_comm *comm;       /* this worker's endpoint; rank/size as above */
    uint64_t bytes_sent;   /* bytes sent by the algorithm (beyond comm's own count) */
    double comm_wait_s;    /* time blocked in communication (beyond comm's own count) */
    herd_err err;          /* detail for a failing hook */
} herd_worker;

typedef struct herd_algo_ops {
    const char *name;
    const char *summary;  /* one line for --help */
    size_t min_workers, max_workers; /* 0: no bound */
    herd_status (*init)(herd_algo *a, herd_worker *w);
    herd_status (*before_step)(herd_algo *a, herd_worker *w);
    herd_status (*grad_ready)(herd_algo *a, herd_worker *w, size_t off, size_t len);
    herd_status (*after_backward)(herd_algo *a, herd_worker *w);
    herd_status (*step)(herd_algo *a, herd_worker *w);
    herd_status (*after_step)(herd_algo *a, herd_worker *w);
    herd_status (*end_epoch)(herd_algo *a, herd_worker *w);
    void (*free)(herd_algo *a, herd_worker *w);
} herd_algo_ops;

struct herd_algo {
    const herd_algo_ops *ops;
    void *state; /* owned by the algorithm */
};

/* The algorithm called `name`, or NULL. */
const herd_algo_ops *herd_algo_find(const char *name);
/* Every algorithm, NULL-terminated. */
extern const herd_algo_ops *const herd_algos[];

#endif
