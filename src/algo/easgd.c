/* Elastic averaging family (ALGORITHMS.md, seed 000) — being written. */
#include "algo/algos.h"

static herd_status not_yet(herd_algo *a, herd_worker *w)
{
    (void)a;
    return herd_err_set(&w->err, HERD_EUNSUPPORTED, "--algo %s is not built yet", w->cfg->algo);
}

#define PLACEHOLDER(var, nm, is_async)                                                              \
    const herd_algo_ops var = {.name = nm, .summary = "(not built yet)", .family = "easgd",          \
                               .min_workers = 1, .async = is_async, .init = not_yet}
PLACEHOLDER(herd__algo_easgd, "easgd", false);
PLACEHOLDER(herd__algo_aeasgd, "aeasgd", true);
PLACEHOLDER(herd__algo_ameasgd, "ameasgd", true);
PLACEHOLDER(herd__algo_hogwild_easgd, "hogwild-easgd", true);
PLACEHOLDER(herd__algo_eawild, "eawild", true);
