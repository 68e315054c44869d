/* algos.h — the algorithm tables, one per file in src/algo/ (internal). */
#ifndef HERD_ALGO_ALGOS_H
#define HERD_ALGO_ALGOS_H

#include "herd/herd_algo.h"

extern const herd_algo_ops herd__algo_sgd;
extern const herd_algo_ops herd__algo_allreduce;

#endif
