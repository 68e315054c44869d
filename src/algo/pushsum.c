/* Push-sum family (ALGORITHMS.md, seed 004) — being written. */
#include "algo/algos.h"

static herd_status not_yet(herd_algo *a, herd_worker *w)
{
    (void)a;
    return herd_err_set(&w->err, HERD_EUNSUPPORTED, "--algo %s is not built yet", w->cfg->algo);
}

#define PLACEHOLDER(var, nm, is_async)                                                              \
    const herd_algo_ops var = {.name = nm, .summary = "(not built yet)", .family = "gossip",         \
                               .min_workers = 1, .async = is_async, .init = not_yet}
PLACEHOLDER(herd__algo_sgp, "sgp", false);
PLACEHOLDER(herd__algo_osgp, "osgp", false);
