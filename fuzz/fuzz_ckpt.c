/* libFuzzer target: the checkpoint reader (herd_ckpt_parse). A parse either
 * fails with a message, or yields sections that lie inside the input, can be
 * found by name and copied. Each input is parsed as it is, and again with
 * every checksum it locates recomputed: random bytes almost never carry a
 * right CRC32C, and the checks behind the checksums need fuzzing too. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "herd/herd_ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Recomputes the section and header checksums of b wherever they fit in it. */
static void fix_crcs(uint8_t *b, size_t size)
{
    if (size < HERD_CKPT_HEADER_BYTES)
        return;
    uint64_t hbytes = rd32(b + 12);
    if (hbytes < HERD_CKPT_HEADER_BYTES || hbytes > size)
        return;
    for (uint64_t e = HERD_CKPT_HEADER_BYTES; e + HERD_CKPT_ENTRY_BYTES <= hbytes; e += HERD_CKPT_ENTRY_BYTES) {
        uint64_t off = rd64(b + e + 32), len = rd64(b + e + 40);
        if (off <= size && len <= size - off)
            wr32(b + e + 28, herd_crc32c(0, b + off, (size_t)len));
    }
    wr32(b + 124, herd_crc32c(herd_crc32c(0, b, 124), b + HERD_CKPT_HEADER_BYTES, (size_t)hbytes - HERD_CKPT_HEADER_BYTES));
}

static void check(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    uint8_t *fixed = malloc(size ? size : 1);
    if (!fixed)
        return 0;
    memcpy(fixed, data, size);
    fix_crcs(fixed, size);
    check(fixed, size);
    free(fixed);
    return 0;
}

static void check(const uint8_t *data, size_t size)
{
    herd_ckpt *ck = NULL;
    herd_err err = {0};
    herd_status st = herd_ckpt_parse(data, size, "fuzz.herd", &ck, &err);
    if (st != HERD_OK) {
        if (!err.msg[0] || ck)
            abort();
        return;
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
}
