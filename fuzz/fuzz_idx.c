/* libFuzzer target: the IDX parser (images + labels) on bytes in memory.
 * Input: 2 bytes (big-endian) giving how many of the rest are the image
 * file; the remainder is the label file. A parse either succeeds with a
 * dataset whose shape and values are sane, or fails with a message. */
#include <stdint.h>
#include <stdlib.h>

#include "data/data_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t split = ((size_t)data[0] << 8 | data[1]) % (size - 1);
    const uint8_t *img = data + 2, *lab = data + 2 + split;
    size_t ni = split, nl = size - 2 - split;
    herd_dataset d;
    herd_err err = {0};
    herd_status st = herd__data_parse_idx(img, ni, lab, nl, "images", "labels", &d, &err);
    if (st != HERD_OK) {
        if (!err.msg[0] || d.x || d.y || d.n)
            abort(); /* a failure must say why and leave nothing behind */
        return 0;
    }
    if (d.n == 0 || d.c != 1 || d.h * d.w * d.n + 16 != ni || d.nclasses < 10 || d.nclasses > 256)
        abort();
    for (size_t i = 0; i < d.n; i++)
        if (d.y[i] >= d.nclasses)
            abort();
    for (size_t i = 0; i < d.n * d.h * d.w; i++)
        if (!(d.x[i] >= 0.0f && d.x[i] <= 1.0f))
            abort();
    herd_dataset_free(&d);
    return 0;
}
