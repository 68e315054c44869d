/* libFuzzer target: the PNG and JPEG decoders (libpng, libjpeg-turbo and
 * herd's handlers around them) on one file's bytes. A decode either
 * succeeds with a gray or RGB image within the limit, or fails with a
 * message and leaves nothing behind. The limit is small (2^20 samples) so
 * that a header claiming a large image costs little time. */
#include <stdint.h>
#include <stdlib.h>

#include "data/data_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    enum { MAX_VALUES = 1 << 20 };
    herd__image img;
    herd_err err = {0};
    herd_status st = herd__image_decode(data, size, "image", MAX_VALUES, &img, &err);
    if (st != HERD_OK) {
        if (!err.msg[0] || img.px || img.c)
            abort(); /* a failure must say why and leave nothing behind */
        return 0;
    }
    if ((img.c != 1 && img.c != 3) || !img.h || !img.w || img.c * img.h * img.w > MAX_VALUES || !img.px)
        abort();
    volatile unsigned sum = 0; /* px holds every sample: ASan sees a read past its end */
    for (size_t i = 0; i < img.c * img.h * img.w; i++)
        sum += img.px[i];
    free(img.px);
    return 0;
}
