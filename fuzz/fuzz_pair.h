/* fuzz_pair.h — what the targets of an image file and a label file share:
 * the input is 2 bytes (big-endian) giving how many of the rest are the
 * image file, the remainder the label file; a parse either succeeds, and
 * the target's check looks at the dataset, or fails with a message and
 * leaves nothing behind. */
#ifndef HERD_FUZZ_PAIR_H
#define HERD_FUZZ_PAIR_H

#include <stdint.h>
#include <stdlib.h>

#include "data/data_parse.h"

/* Parses data with parse and runs check on a dataset it returns (NULL:
 * none); aborts on a failure without a message or with a dataset left. */
static inline int herd_fuzz_pair(const uint8_t *data, size_t size, herd__data_parse_pair parse,
                                 void (*check)(const herd_dataset *d, size_t ni))
{
    if (size < 2)
        return 0;
    size_t split = ((size_t)data[0] << 8 | data[1]) % (size - 1);
    const uint8_t *img = data + 2, *lab = data + 2 + split;
    size_t ni = split, nl = size - 2 - split;
    herd_dataset d;
    herd_err err = {0};
    herd_status st = parse(img, ni, lab, nl, "images", "labels", &d, &err);
    if (st != HERD_OK) {
        if (!err.msg[0] || d.x || d.y || d.n)
            abort(); /* a failure must say why and leave nothing behind */
        return 0;
    }
    check(&d, ni);
    herd_dataset_free(&d);
    return 0;
}

#endif
