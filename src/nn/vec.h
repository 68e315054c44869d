/* vec.h — the blocked kernels' vectors (internal to src/nn): a block's B
 * lanes as 8-lane vectors (GCC's vector extensions), batch norm's double
 * lanes, and BLK_WIDTH, which calls a body at a constant B of 8, 16, 32 or 64. */
#ifndef HERD_NN_VEC_H
#define HERD_NN_VEC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "nn/kernels.h"

/* The blocked kernels' inner loops run over a block's B lanes (one pixel's
 * B channels). Each is written once, as an always-inlined body taking B,
 * and called through BLK_WIDTH with B a constant (8, 16, 32 or 64): the compiler
 * then turns the lane loops into vector code of that width, where a run-time
 * B would leave them scalar. */
enum { BLK_MAX = HERD__BLK_MAX, BLK_G = BLK_MAX / 8 }; /* a block's lanes, its 8-lane vectors at most */
#define BLK_INLINE static inline __attribute__((always_inline))
#define BLK_WIDTH(B, fn, ...)                        \
    do {                                             \
        HERD_ASSERT((B) == 8 || (B) == 16 || (B) == 32 || (B) == 64); \
        if ((B) == 16)                               \
            fn(__VA_ARGS__, 16);                     \
        else if ((B) == 8)                           \
            fn(__VA_ARGS__, 8);                      \
        else if ((B) == 32)                          \
            fn(__VA_ARGS__, 32);                     \
        else                                         \
            fn(__VA_ARGS__, 64);                     \
    } while (0)

/* Eight lanes as one vector (GCC's vector extensions: a ymm register with
 * AVX2 or AVX-512), their doubles and their masks; a block is B/8 of them.
 * Used only inside src/nn, inlined, so GCC's note that a 64-byte vector's
 * ABI differs without AVX-512 concerns nothing. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

static inline v8f ld8(const float *p)
{
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void st8(void *p, v8f v) { memcpy(p, &v, sizeof v); }

/* Batch norm's double sums: DL lanes per vector, the widest the CPU adds
 * natively (GCC lowers a wider vector through the stack: 8 doubles on AVX2
 * made the sums passes 4x slower). Each lane's arithmetic is the same at
 * any DL, so the bits are too. */
#if defined(__AVX512F__)
enum { DL = 8 };
#else
enum { DL = 4 };
#endif
enum { BLK_D = HERD__BLK_MAX / DL }; /* a block's double vectors at most */
typedef double vd __attribute__((vector_size(DL * sizeof(double))));
typedef float vdf __attribute__((vector_size(DL * sizeof(float))));
typedef int32_t vdi __attribute__((vector_size(DL * sizeof(int32_t))));

static inline vdf ldf(const float *p)
{
    vdf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline vd to_d(vdf v) { return __builtin_convertvector(v, vd); }
/* a where m is set, else b */
static inline v8f sel8(v8i m, v8f a, v8f b) { return (v8f)(((v8i)a & m) | ((v8i)b & ~m)); }

/* One (image, block): HW pixels of B channels. */
static inline size_t blk_tasks(size_t C, size_t N, size_t B) { return N * (C / B); }

#endif
