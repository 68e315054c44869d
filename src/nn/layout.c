/* Activation layouts: the blocked width oneDNN computes in, and moves
 * between blocked (N, C/B, H, W, B), CNHW and NCHW. */
#include "nn/kernels.h"

#include <dnnl.h>
#include <string.h>

#include "nn/vec.h"

size_t herd__blk_width(void)
{
    /* oneDNN's ISA values are nested bit sets */
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core)
        return 16;
    if ((isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2)
        return 8;
    return 0;
}

bool herd__blk_nhwc_bf16(void)
{
    /* oneDNN 2.6's AMX convolutions (jit and brgconv) take only nxc layouts */
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx;
}

/* Between a blocked tensor and a plain one whose channel c of image n
 * starts at c * cs + n * ns (CNHW: cs = N*HW, ns = HW; NCHW rows: cs = HW,
 * ns = C*HW). */
static void blk_unpack(const float *in, float *out, size_t C, size_t N, size_t HW, size_t cs, size_t ns,
                       size_t B)
{
    size_t CB = C / B, T = blk_tasks(C, N, B);
#pragma omp parallel for if (T > 1 && C * N * HW >= HERD__PAR_GRAIN) schedule(static)
    for (size_t t = 0; t < T; t++) {
        size_t n = t / CB, cb = t % CB;
        const float *restrict src = in + t * HW * B;
        for (size_t l = 0; l < B; l++) {
            float *restrict p = out + (cb * B + l) * cs + n * ns;
            for (size_t i = 0; i < HW; i++)
                p[i] = src[i * B + l];
        }
    }
}

static void blk_pack(const float *in, float *out, size_t C, size_t N, size_t HW, size_t cs, size_t ns,
                     bool accumulate, size_t B)
{
    size_t CB = C / B, T = blk_tasks(C, N, B);
#pragma omp parallel for if (T > 1 && C * N * HW >= HERD__PAR_GRAIN) schedule(static)
    for (size_t t = 0; t < T; t++) {
        size_t n = t / CB, cb = t % CB;
        float *restrict dst = out + t * HW * B;
        for (size_t l = 0; l < B; l++) {
            const float *restrict p = in + (cb * B + l) * cs + n * ns;
            if (accumulate)
                for (size_t i = 0; i < HW; i++)
                    dst[i * B + l] += p[i];
            else
                for (size_t i = 0; i < HW; i++)
                    dst[i * B + l] = p[i];
        }
    }
}

void herd__cnhw_to_blk(const float *in, float *out, size_t C, size_t N, size_t HW, size_t B)
{
    blk_pack(in, out, C, N, HW, N * HW, HW, false, B);
}

void herd__blk_to_cnhw(const float *in, float *out, size_t C, size_t N, size_t HW, size_t B)
{
    blk_unpack(in, out, C, N, HW, N * HW, HW, B);
}

void herd__blk_to_nchw(const float *in, float *out, size_t C, size_t N, size_t HW, size_t B)
{
    blk_unpack(in, out, C, N, HW, HW, C * HW, B);
}

void herd__nchw_to_blk(const float *in, float *out, size_t C, size_t N, size_t HW, bool accumulate, size_t B)
{
    blk_pack(in, out, C, N, HW, HW, C * HW, accumulate, B);
}

void herd__cnhw_to_nchw(const float *in, float *out, size_t C, size_t N, size_t HW)
{
#pragma omp parallel for if (C > 1 && C * N * HW >= HERD__PAR_GRAIN) schedule(static)
    for (size_t c = 0; c < C; c++)
        for (size_t n = 0; n < N; n++)
            memcpy(out + (n * C + c) * HW, in + (c * N + n) * HW, HW * sizeof(float));
}

void herd__nchw_to_cnhw(const float *in, float *out, size_t C, size_t N, size_t HW, bool accumulate)
{
#pragma omp parallel for if (C > 1 && C * N * HW >= HERD__PAR_GRAIN) schedule(static)
    for (size_t c = 0; c < C; c++)
        for (size_t n = 0; n < N; n++) {
            const float *s = in + (n * C + c) * HW;
            float *d = out + (c * N + n) * HW;
            if (accumulate)
                for (size_t i = 0; i < HW; i++)
                    d[i] += s[i];
            else
                memcpy(d, s, HW * sizeof(float));
        }
}
