/* herd_rng.h — a small, seedable, splittable random number generator.
 *
 * xoshiro256** seeded through splitmix64. Each user owns its own herd_rng
 * (no global state: SimGrid runs every rank in one process), and streams are
 * derived from (seed, stream id) so that worker r's randomness does not depend
 * on how many other workers exist or in which order they run.
 */
#ifndef HERD_RNG_H
#define HERD_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct herd_rng {
    uint64_t s[4];
} herd_rng;

/* Seeds rng from (seed, stream): different streams are independent. */
void herd_rng_seed(herd_rng *rng, uint64_t seed, uint64_t stream);
uint64_t herd_rng_next(herd_rng *rng);
/* Uniform in [0, 1). */
float herd_rng_uniform(herd_rng *rng);
/* Uniform integer in [0, n); n > 0. Unbiased (rejection). */
uint64_t herd_rng_below(herd_rng *rng, uint64_t n);
/* Standard normal (Box–Muller). */
float herd_rng_normal(herd_rng *rng);
/* Fisher–Yates shuffle of idx[0..n). */
void herd_rng_shuffle(herd_rng *rng, size_t *idx, size_t n);

#endif
