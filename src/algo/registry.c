#include <string.h>

#include "algo/algos.h"

const herd_algo_ops *const herd_algos[] = {
    &herd__algo_sgd,
    &herd__algo_allreduce,
    &herd__algo_asgd,
    &herd__algo_amsgd,
    &herd__algo_hogwild,
    &herd__algo_easgd,
    &herd__algo_aeasgd,
    &herd__algo_ameasgd,
    &herd__algo_hogwild_easgd,
    &herd__algo_eawild,
    &herd__algo_dpsgd,
    &herd__algo_adpsgd,
    &herd__algo_sgp,
    &herd__algo_osgp,
    NULL,
};

const herd_algo_ops *herd_algo_find(const char *name)
{
    for (size_t i = 0; herd_algos[i]; i++)
        if (!strcmp(herd_algos[i]->name, name))
            return herd_algos[i];
    return NULL;
}
