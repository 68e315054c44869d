/* sgd: plain single-worker SGD, the baseline every algorithm is compared with.
 * It needs no hook: the worker loop's default step is the local optimizer. */
#include "algo/algos.h"

const herd_algo_ops herd__algo_sgd = {
    .name = "sgd",
    .summary = "single-worker SGD (the baseline)",
    .stateless = true,
    .min_workers = 1,
    .max_workers = 1,
};
