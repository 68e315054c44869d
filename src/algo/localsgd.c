/* localsgd, postlocal: local SGD and post-local SGD (Lin et al., "Don't Use
 * Large Mini-Batches, Use Local SGD", ICLR 2020).
 *
 * localsgd: every worker takes H = --local-steps steps on its own batches
 * with its own optimizer, then the workers average their weights with one
 * allreduce (x_i <- 1/n sum_j x_j), so they talk once every H steps instead
 * of every step. Momentum buffers stay local, as in the paper. H = 1 is
 * mini-batch SGD: the gradients are averaged before the step rather than the
 * weights after it, the same update in exact arithmetic and, done this way,
 * the same bits as --algo allreduce (both sum in the engine's order and
 * scale by 1/n before the optimizer step).
 *
 * postlocal: mini-batch SGD (H = 1) for the first E = --switch-epoch epochs,
 * where the paper finds large batches harmless, then local SGD with H.
 *
 * The weights are also averaged at the end of every epoch (the last one
 * included), so evaluations and the final model see one model, not worker
 * 0's.
 * The averaging schedule follows the worker's step count, which checkpoints
 * keep, and every worker's weights and optimizer are in every checkpoint:
 * the algorithm keeps no state of its own, and a resume is bit for bit.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "algo/algos.h"

typedef struct local_opts {
    size_t local_steps;  /* H: steps between two averagings of the weights */
    size_t switch_epoch; /* postlocal: epochs of mini-batch SGD before local steps */
} local_opts;

#define LOCAL_STEPS_ROW                                                                                        \
    {.name = "local-steps", .type = HERD_OPT_SIZE, .offset = offsetof(local_opts, local_steps), .def = "4", .flags = HERD_OPT_BOUNDED, .min = 1, .max = 1000000, \
     .help = "H: local steps between two averagings of the workers' weights (1: mini-batch SGD)"}

static const herd_opt localsgd_opt_table[] = {
    LOCAL_STEPS_ROW,
    {0},
};

static const herd_opt postlocal_opt_table[] = {
    LOCAL_STEPS_ROW,
    {.name = "switch-epoch", .type = HERD_OPT_SIZE, .offset = offsetof(local_opts, switch_epoch), .def = "1", .flags = HERD_OPT_BOUNDED, .max = 100000,
     .help = "E: epochs of mini-batch SGD before the local steps begin"},
    {0},
};

typedef struct local_state {
    size_t averages; /* weight averagings this epoch */
} local_state;

static const local_opts *opts_of(const herd_worker *w) { return w->opts; }

/* This step's H: 1 while postlocal is still mini-batch SGD. */
static size_t period(const herd_worker *w)
{
    const local_opts *o = opts_of(w);
    return w->epoch < o->switch_epoch ? 1 : o->local_steps;
}

static herd_status average(herd_worker *w, float *x)
{
    herd_allreduce_opts o = {.wire = HERD_F32, .scale = 1.0f / (float)w->nworkers};
    herd_status st = herd_allreduce(w->comm, x, w->nparams, &o);
    if (st < 0 && !w->err.msg[0])
        herd_err_set(&w->err, st, "worker %zu: averaging at step %zu: %s", w->rank, w->step,
                     herd_comm_last_error(w->comm));
    return st;
}

static herd_status local_init(herd_algo *a, herd_worker *w)
{
    a->state = calloc(1, sizeof(local_state));
    if (!a->state)
        return herd_err_set(&w->err, HERD_ENOMEM, "out of memory");
    return HERD_OK;
}

/* H = 1: the mean gradient, before the worker's optimizer step. */
static herd_status local_after_backward(herd_algo *a, herd_worker *w, herd_step_result *res)
{
    (void)a, (void)res;
    return period(w) == 1 ? average(w, w->grads) : HERD_OK;
}

/* H > 1: the mean weights, every H steps. */
static herd_status local_after_step(herd_algo *a, herd_worker *w)
{
    size_t h = period(w);
    if (h == 1 || (w->step + 1) % h)
        return HERD_OK;
    ((local_state *)a->state)->averages++;
    return average(w, w->params);
}

/* One model for evaluations and the end of the run: end_epoch also ends
 * the last epoch, after the last step (a repeat where that step averaged
 * already, cheap next to an epoch). */
static herd_status local_settle(herd_algo *a, herd_worker *w)
{
    (void)a;
    return period(w) == 1 ? HERD_OK : average(w, w->params);
}

static void local_log_epoch(herd_algo *a, herd_worker *w, char *buf, size_t cap)
{
    local_state *s = a->state;
    snprintf(buf, cap, ",\"local_steps\":%zu,\"averages\":%zu", period(w), s->averages);
    s->averages = 0;
}

static void local_free(herd_algo *a, herd_worker *w)
{
    (void)w;
    free(a->state);
    a->state = NULL;
}

#define LOCAL_OPS(nm, table, text)                                                                            \
    {                                                                                                         \
        .name = nm, .summary = text, .min_workers = 1, .opts = table, .opts_size = sizeof(local_opts),        \
        .stateless = true, .init = local_init, .after_backward = local_after_backward,                        \
        .after_step = local_after_step, .end_epoch = local_settle,                                            \
        .log_epoch = local_log_epoch, .free = local_free,                                                     \
    }

const herd_algo_ops herd__algo_localsgd =
    LOCAL_OPS("localsgd", localsgd_opt_table, "local SGD: --local-steps H local steps, then the weights are averaged");
const herd_algo_ops herd__algo_postlocal =
    LOCAL_OPS("postlocal", postlocal_opt_table,
              "post-local SGD: mini-batch SGD until --switch-epoch E, then local SGD with --local-steps H");
