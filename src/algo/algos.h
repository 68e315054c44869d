/* algos.h — the algorithm tables, one per file in src/algo/ (internal). */
#ifndef HERD_ALGO_ALGOS_H
#define HERD_ALGO_ALGOS_H

#include "herd/herd_algo.h"

extern const herd_algo_ops herd__algo_sgd;
extern const herd_algo_ops herd__algo_allreduce;
/* parameter server: ps.c */
extern const herd_algo_ops herd__algo_asgd;
extern const herd_algo_ops herd__algo_amsgd;
extern const herd_algo_ops herd__algo_hogwild;
/* elastic averaging: easgd.c */
extern const herd_algo_ops herd__algo_easgd;
extern const herd_algo_ops herd__algo_aeasgd;
extern const herd_algo_ops herd__algo_ameasgd;
extern const herd_algo_ops herd__algo_hogwild_easgd;
extern const herd_algo_ops herd__algo_eawild;
/* decentralized: gossip.c */
extern const herd_algo_ops herd__algo_dpsgd;
extern const herd_algo_ops herd__algo_adpsgd;
/* push-sum: pushsum.c */
extern const herd_algo_ops herd__algo_sgp;
extern const herd_algo_ops herd__algo_osgp;

#endif
