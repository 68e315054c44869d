/* Divergence: worker 0's loss, watched at every evaluation (diverge.h). A run
 * whose loss ran away used to end at chance with exit 0 and nothing said;
 * now it is named, with the algorithm and the learning rate that did it.
 * So is one that never learned: a loss still within 2% of chance after
 * HERD_DIV_LEARN_STEPS of worker 0's steps (Fashion-MNIST's lenet at lr
 * 0.05 is below 60% of chance by its 30th), and, at the end of any run,
 * however few steps it took (a large-batch run may never reach 100), a
 * test accuracy within 2 points of chance (1/K), or where there is none a
 * final training loss (the recent steps' mean) within 2% of chance. The
 * accuracy decides where there is one: a short run's losses still carry
 * its first steps' (lenet 0.84 accurate after 16 steps, its epoch's mean
 * loss above chance). */
#include <math.h>
#include <stdio.h>

#include "run/diverge.h"
#include "run/log.h"
#include "run/run.h"

/* steps after which a loss still at chance means the run is not learning */
#define HERD_DIV_LEARN_STEPS 100

void herd__div_step(herd__div *d, const herd_worker *w, double loss)
{
    if (w->rank != 0 || !isfinite(loss))
        return;
    d->ema = d->n++ ? 0.9 * d->ema + 0.1 * loss : loss;
    if (d->n == 1 || d->ema < d->min_ema)
        d->min_ema = d->ema;
}

/* The run diverges (or is not learning: stuck), because of why: warned of
 * once (stderr, a "diverged" or "not_learning" record in the log); with
 * --stop-on-divergence HERD_EDIVERGED, w->err saying so. */
static herd_status named(herd__div *d, herd_run *r, herd_worker *w, bool stuck, const char *why, double test_loss)
{
    const char *what = stuck ? "is not learning" : "diverges";
    if (!d->diverged && !d->not_learning) {
        *(stuck ? &d->not_learning : &d->diverged) = true;
        herd__log_record(&r->log, stuck ? "not_learning" : "diverged",
                         "\"worker\":%zu,\"epoch\":%zu,\"step\":%zu,\"algo\":\"%s\",\"lr\":%g,\"train_loss\":%.6g,"
                         "\"test_loss\":%.6g,\"stop\":%s",
                         w->rank, w->epoch + 1, w->step, r->algo_ops->name, (double)r->cfg->optim.lr, d->ema,
                         test_loss, r->cfg->stop_on_divergence ? "true" : "false");
        if (!r->cfg->stop_on_divergence)
            fprintf(stderr, "%sherd: warning: epoch %zu, step %zu: the run %s: %s (--algo %s, --lr %g); "
                            "--stop-on-divergence stops such a run\n",
                    r->tty && r->cfg->progress ? "\r" : "", w->epoch + 1, w->step, what, why, r->algo_ops->name,
                    (double)r->cfg->optim.lr);
    }
    if (!r->cfg->stop_on_divergence)
        return HERD_OK;
    return herd_err_set(&w->err, HERD_EDIVERGED, "epoch %zu, step %zu: the run %s: %s (--algo %s, --lr %g); it stops (--stop-on-divergence)",
                        w->epoch + 1, w->step, what, why, r->algo_ops->name, (double)r->cfg->optim.lr);
}

herd_status herd__div_check(herd__div *d, herd_run *r, herd_worker *w, double test_loss)
{
    double chance = log((double)(r->train.nclasses > 1 ? r->train.nclasses : 2));
    char why[160] = "";
    bool stuck = false;
    if (!isfinite(test_loss))
        snprintf(why, sizeof why, "the test loss is not finite");
    else if (d->n && d->min_ema < 0.9 * chance && d->ema >= 0.98 * chance)
        snprintf(why, sizeof why, "the training loss, %.4g, is back at chance (ln %zu = %.4g) after %.4g",
                 d->ema, r->train.nclasses, chance, d->min_ema);
    else if (d->n >= HERD_DIV_LEARN_STEPS && d->min_ema >= 0.98 * chance) {
        stuck = true;
        snprintf(why, sizeof why, "the training loss has stayed at chance (ln %zu = %.4g): its lowest, %.4g, in %zu steps",
                 r->train.nclasses, chance, d->min_ema, d->n);
    } else if (d->n && d->ema >= 10 * d->min_ema && d->ema > 1e-3)
        snprintf(why, sizeof why, "the training loss, %.4g, is %.3g times its lowest, %.4g", d->ema,
                 d->ema / d->min_ema, d->min_ema);
    if (!why[0])
        return HERD_OK;
    return named(d, r, w, stuck, why, test_loss);
}

herd_status herd__div_final(herd__div *d, herd_run *r, herd_worker *w, double train_loss, double test_acc,
                            double test_loss)
{
    if (d->diverged || d->not_learning)
        return HERD_OK; /* named already (and stopped there if told to) */
    size_t k = r->train.nclasses > 1 ? r->train.nclasses : 2;
    double chance = log((double)k), loss = d->n ? d->ema : train_loss;
    char why[160] = "";
    if (isfinite(test_acc)) {
        if (test_acc <= 1.0 / (double)k + 0.02)
            snprintf(why, sizeof why, "its test accuracy, %.4f, is not 2 points above chance (1/%zu = %.4f)", test_acc,
                     k, 1.0 / (double)k);
    } else if (isfinite(loss) && loss >= 0.98 * chance) {
        snprintf(why, sizeof why, "its final training loss, %.4g, is not 2%% below chance (ln %zu = %.4g)", loss, k,
                 chance);
    }
    if (!why[0])
        return HERD_OK;
    return named(d, r, w, true, why, test_loss);
}
