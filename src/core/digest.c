/* A 64-bit digest of bytes (digest.h). */
#include "core/digest.h"

#include <string.h>

static const uint64_t P1 = 0x9e3779b97f4a7c15ull, P2 = 0xc2b2ae3d27d4eb4full, P3 = 0xff51afd7ed558ccdull;

static inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static inline uint64_t mix(uint64_t h, uint64_t w) { return rotl(h ^ (w * P1), 31) * P2; }

uint64_t herd__digest64(const void *p, size_t n, uint64_t seed)
{
    const unsigned char *b = p;
    uint64_t lane[4] = {seed ^ P1, seed + P2, seed ^ P3, seed - P1};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, b + i + 8 * (size_t)k, sizeof w);
            lane[k] = mix(lane[k], w);
        }
    uint64_t h = mix(seed, (uint64_t)n);
    for (int k = 0; k < 4; k++)
        h = mix(h, lane[k]);
    for (; i < n; i++)
        h = mix(h, b[i]);
    h ^= h >> 33, h *= P3, h ^= h >> 29, h *= P2, h ^= h >> 32;
    return h;
}
