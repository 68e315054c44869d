/* libFuzzer target: the .npy reader (an image array and its label array)
 * on bytes in memory (fuzz_pair.h). A dataset it returns has a sane shape,
 * labels below its class count and finite values. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_pair.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const herd_dataset *d, size_t ni)
{
    size_t dim = d->c * d->h * d->w;
    if (d->n == 0 || dim == 0 || d->n * dim > ni || d->nclasses < 2 || d->nclasses > 65536)
        abort();
    for (size_t i = 0; i < d->n; i++)
        if (d->y[i] < 0 || (size_t)d->y[i] >= d->nclasses)
            abort();
    for (size_t i = 0; i < d->n * dim; i++)
        if (!isfinite(d->x[i]))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return herd_fuzz_pair(data, size, herd__data_parse_npy, check);
}
