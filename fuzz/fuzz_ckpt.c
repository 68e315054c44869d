/* libFuzzer target: the checkpoint reader (herd_ckpt_parse). A parse either
 * fails with a message, or yields sections that lie inside the input, can be
 * found by name and copied. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "herd/herd_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    herd_ckpt *ck = NULL;
    herd_err err = {0};
    herd_status st = herd_ckpt_parse(data, size, "fuzz.herd", &ck, &err);
    if (st != HERD_OK) {
        if (!err.msg[0] || ck)
            abort();
        return 0;
    }
    const herd_ckpt_info *in = herd_ckpt_get_info(ck);
    if (in->workers == 0 || strlen(in->model) >= sizeof in->model || strlen(in->algo) >= sizeof in->algo)
        abort();
    size_t sum = 0;
    for (size_t i = 0; i < herd_ckpt_nsections(ck); i++) {
        herd_ckpt_section s = herd_ckpt_section_at(ck, i), f;
        if (s.worker >= in->workers || herd_ckpt_find(ck, s.name, s.worker, &f, NULL) != HERD_OK || f.data != s.data)
            abort();
        void *copy = malloc(s.bytes ? s.bytes : 1);
        if (copy && (herd_ckpt_copy(ck, s.name, s.worker, copy, s.bytes, NULL) != HERD_OK ||
                     (s.bytes && memcmp(copy, s.data, s.bytes))))
            abort();
        free(copy);
        sum += s.bytes;
    }
    if (sum + HERD_CKPT_HEADER_BYTES + herd_ckpt_nsections(ck) * HERD_CKPT_ENTRY_BYTES != size)
        abort();
    herd_ckpt_free(ck);
    return 0;
}
