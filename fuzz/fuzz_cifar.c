/* libFuzzer target: the CIFAR-10 binary parser on bytes in memory. The
 * input is parsed as one file, then (if it parsed) appended once more as a
 * second file, as herd_data_load_cifar concatenates data_batch_1..5. */
#include <stdint.h>
#include <stdlib.h>

#include "data/data_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    herd_dataset d = {0};
    herd_err err = {0};
    herd_status st = herd__data_parse_cifar(data, size, "data_batch_1.bin", &d, &err);
    if (st == HERD_OK) {
        size_t n1 = d.n;
        if (n1 == 0 || n1 * 3073 != size || d.c != 3 || d.h != 32 || d.w != 32)
            abort();
        st = herd__data_parse_cifar(data, size, "data_batch_2.bin", &d, &err);
        if (st != HERD_OK || d.n != 2 * n1)
            abort();
        for (size_t i = 0; i < d.n; i++)
            if (d.y[i] >= 10)
                abort();
    } else if (!err.msg[0] || d.n) {
        abort();
    }
    herd_dataset_free(&d);
    return 0;
}
