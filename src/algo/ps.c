/* Parameter-server family — being written. */
#include "algo/algos.h"

static herd_status not_yet(herd_algo *a, herd_worker *w)
{
    (void)a;
    return herd_err_set(&w->err, HERD_EUNSUPPORTED, "--algo %s is not built yet", w->cfg->algo);
}

#define PLACEHOLDER(var, nm, is_async)                                                              \
    const herd_algo_ops var = {.name = nm, .summary = "(not built yet)", .family = "ps",             \
                               .min_workers = 1, .async = is_async, .init = not_yet}
PLACEHOLDER(herd__algo_asgd, "asgd", true);
PLACEHOLDER(herd__algo_amsgd, "amsgd", true);
PLACEHOLDER(herd__algo_hogwild, "hogwild", true);
