/* algos.h — what every algorithm file includes (internal to src/algo/).
 *
 * An algorithm is one file that defines `const herd_algo_ops herd__algo_X`
 * (herd_algo.h) and one line X(X) in registry.c's list. */
#ifndef HERD_ALGO_ALGOS_H
#define HERD_ALGO_ALGOS_H

#include "herd/herd_algo.h"

#endif
