/* finite.h — is every float of an array finite? (internal).
 *
 * Used on every step (the worker loop's check of a gradient, allreduce's of
 * a reduced bucket), so it is written to vectorize: no early exit, an
 * integer max over the magnitude bits, non-finite iff the exponent is all
 * ones (0x7f800000 and above: Inf and every NaN).
 */
#ifndef HERD_CORE_FINITE_H
#define HERD_CORE_FINITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline bool herd__all_finite(const float *x, size_t n)
{
    uint32_t most = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        b &= 0x7fffffffu;
        most = b > most ? b : most;
    }
    return most < 0x7f800000u;
}

#endif
