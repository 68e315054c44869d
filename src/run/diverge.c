/* Divergence: worker 0's loss, watched at every evaluation (run.h). A run
 * whose loss ran away used to end at chance with exit 0 and nothing said;
 * now it is named, with the algorithm and the learning rate that did it.
 * So is one that never learned: a loss still within 2% of chance after
 * HERD_DIV_LEARN_STEPS of worker 0's steps (Fashion-MNIST's lenet at lr
 * 0.05 is below 60% of chance by its 30th). */
#include <math.h>
#include <stdio.h>

#include "run/run.h"

/* steps after which a loss still at chance means the run is not learning */
#define HERD_DIV_LEARN_STEPS 100

void herd__div_step(worker_ctx *c, double loss)
{
    herd__div *d = &c->div;
    if (c->w.rank != 0 || !isfinite(loss))
        return;
    d->ema = d->n++ ? 0.9 * d->ema + 0.1 * loss : loss;
    if (d->n == 1 || d->ema < d->min_ema)
        d->min_ema = d->ema;
}

herd_status herd__div_check(worker_ctx *c, double test_loss)
{
    herd__div *d = &c->div;
    herd_run *r = c->run;
    herd_worker *w = &c->w;
    double chance = log((double)(r->train.nclasses > 1 ? r->train.nclasses : 2));
    char why[160] = "";
    const char *what = "diverges";
    if (!isfinite(test_loss))
        snprintf(why, sizeof why, "the test loss is not finite");
    else if (d->n && d->min_ema < 0.9 * chance && d->ema >= 0.98 * chance)
        snprintf(why, sizeof why, "the training loss, %.4g, is back at chance (ln %zu = %.4g) after %.4g",
                 d->ema, r->train.nclasses, chance, d->min_ema);
    else if (d->n >= HERD_DIV_LEARN_STEPS && d->min_ema >= 0.98 * chance) {
        what = "is not learning";
        snprintf(why, sizeof why, "the training loss has stayed at chance (ln %zu = %.4g): its lowest, %.4g, in %zu steps",
                 r->train.nclasses, chance, d->min_ema, d->n);
    } else if (d->n && d->ema >= 10 * d->min_ema && d->ema > 1e-3)
        snprintf(why, sizeof why, "the training loss, %.4g, is %.3g times its lowest, %.4g", d->ema,
                 d->ema / d->min_ema, d->min_ema);
    if (!why[0])
        return HERD_OK;
    if (!d->diverged) {
        d->diverged = true;
        herd__log_record(&r->log, "diverged",
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
