#include <string.h>

#include "algo/algos.h"

const herd_algo_ops *const herd_algos[] = {
    &herd__algo_sgd,
    &herd__algo_allreduce,
    NULL,
};

const herd_algo_ops *herd_algo_find(const char *name)
{
    for (size_t i = 0; herd_algos[i]; i++)
        if (!strcmp(herd_algos[i]->name, name))
            return herd_algos[i];
    return NULL;
}
