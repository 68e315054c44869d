/* libFuzzer target: the IDX parser (images + labels) on bytes in memory
 * (fuzz_pair.h). A dataset it returns has a sane shape and values. */
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_pair.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const herd_dataset *d, size_t ni)
{
    if (d->n == 0 || d->c != 1 || d->h * d->w * d->n + 16 != ni || d->nclasses < 10 || d->nclasses > 256)
        abort();
    for (size_t i = 0; i < d->n; i++)
        if ((size_t)d->y[i] >= d->nclasses)
            abort();
    for (size_t i = 0; i < d->n * d->h * d->w; i++)
        if (!(d->x[i] >= 0.0f && d->x[i] <= 1.0f))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return herd_fuzz_pair(data, size, herd__data_parse_idx, check);
}
