/* Products and threads: herd__sgemm (one oneDNN sgemm per thread, panels
 * split so the bits do not depend on --threads), the compute threads and
 * OpenMP's wait policy, and the peak herd bench gemm measures. */
#include "nn/kernels.h"

#include <dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "herd/herd_nn.h"
#include "herd/herd_status.h"

/* One product on this thread alone: oneDNN sizes its own split by
 * omp_get_max_threads() (and runs serially inside an active team). */
static void sgemm_one(char ta, char tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                      size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    dnnl_status_t s = dnnl_sgemm(ta, tb, (dnnl_dim_t)M, (dnnl_dim_t)N, (dnnl_dim_t)K, alpha, A,
                                 (dnnl_dim_t)lda, B, (dnnl_dim_t)ldb, beta, C, (dnnl_dim_t)ldc);
    HERD_ASSERT(s == dnnl_success);
}

/* The split of a product between threads: panels of the output's longer
 * side, one per thread (fewer where a panel would do under
 * GEMM_PANEL_FLOPS or have under GEMM_MIN_SIDE rows or columns), each one
 * single-threaded oneDNN sgemm over the whole of K. oneDNN's own split
 * divides K at some shapes (mlp's at 2 threads; linear's too with AVX2),
 * so the model's sums, and its bits, changed with --threads; a
 * single-threaded sgemm sums an output over K the same way whatever the
 * rows and columns around it (test threads_model_bits holds linear and mlp
 * to the same bits at 1 and 2 threads). One thread makes one call: split
 * there, a dW product (K = batch) ran 2.5x slower, each panel packing the
 * shared operand again. */
enum { GEMM_MIN_SIDE = 64, GEMM_ALIGN = 16 };
#define GEMM_PANEL_FLOPS 4.0e6

static size_t gemm_panels(size_t M, size_t N, size_t K, size_t threads)
{
    size_t side = M > N ? M : N;
    double flops = 2.0 * (double)M * (double)N * (double)K;
    size_t p = HERD__PAR_GRAIN < SIZE_MAX ? threads : 1; /* serial under TSan (core/par.h) */
    while (p > 1 && (flops / (double)p < GEMM_PANEL_FLOPS || side / p < GEMM_MIN_SIDE))
        p--;
    return p;
}

void herd__sgemm(char ta, char tb, size_t M, size_t N, size_t K, float alpha, const float *A,
                 size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    if (M == 0 || N == 0)
        return;
    int saved = omp_get_max_threads(), nt = omp_in_parallel() ? 1 : saved;
    size_t P = gemm_panels(M, N, K, (size_t)nt);
    bool rows = M > N;
    size_t side = rows ? M : N, step = (side / P + GEMM_ALIGN - 1) / GEMM_ALIGN * GEMM_ALIGN;
    omp_set_num_threads(1); /* each panel on its thread alone */
#pragma omp parallel for if (P > 1) num_threads((int)P) schedule(static)
    for (size_t p = 0; p < P; p++) {
        size_t lo = p * step, hi = lo + step < side ? lo + step : side;
        if (lo >= hi)
            continue;
        if (rows) /* rows [lo, hi) of op(A) and of C */
            sgemm_one(ta, tb, hi - lo, N, K, alpha, ta == 'N' ? A + lo * lda : A + lo, lda, B, ldb, beta,
                      C + lo * ldc, ldc);
        else /* columns [lo, hi) of op(B) and of C */
            sgemm_one(ta, tb, M, hi - lo, K, alpha, A, lda, tb == 'N' ? B + lo : B + lo * ldb, ldb, beta,
                      C + lo, ldc);
    }
    omp_set_num_threads(saved);
}

void herd_nn_set_threads(int nthreads) { omp_set_num_threads(nthreads > 0 ? nthreads : 1); }

int herd_nn_threads(void) { return omp_get_max_threads(); }

/* libgomp reads its wait policy once, when it loads (before main), so the
 * only way to change it for this process is to become a new one: exec the
 * same binary with the same arguments, the variable now set. The variable
 * is the guard: the new image finds it set and goes on. readlink, not
 * execv("/proc/self/exe"): under valgrind the link names the program, the
 * exe the tool. The figures (bench/lab run threads, 2026-11-26): 1000 spins
 * bridge most gaps between one parallel region and the next on an idle
 * machine and stop spinning long before a busy neighbour's time slice
 * (libgomp's 300000 made 2 threads 3-12x slower than one there); 10000
 * bridge more of them (ResNet-20, 2 threads: 1.93x one thread against
 * 1.49x at 1000, idle) but cost more beside a busy process (0.60x against
 * 0.86x). So the machine as herd starts decides: 10000 where nothing else
 * runs. A neighbour that starts later meets the long spin; a shared
 * machine's runs want --adapt-threads. */
const char *herd_nn_spincount_for(const char *const *lines, size_t nlines)
{
    for (size_t i = 0; i < nlines; i++) {
        unsigned running = 0, total = 0;
        if (lines[i] && sscanf(lines[i], "%*f %*f %*f %u/%u", &running, &total) == 2 && running == 1)
            return HERD_NN_SPINCOUNT_IDLE;
    }
    return HERD_NN_SPINCOUNT;
}

/* Reads /proc/loadavg a few times, 2 ms apart: a task that runs all the
 * time shows in every read, one that woke for a moment in few. */
static const char *spincount_here(void)
{
    enum { READS = 5, LINE = 128 };
    char buf[READS][LINE];
    const char *lines[READS];
    for (int i = 0; i < READS; i++) {
        lines[i] = NULL;
        FILE *f = fopen("/proc/loadavg", "r");
        if (f && fgets(buf[i], LINE, f))
            lines[i] = buf[i];
        if (f)
            fclose(f);
        if (i + 1 < READS)
            nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
    }
    return herd_nn_spincount_for(lines, READS);
}

void herd_nn_wait_policy(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
        return;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || (size_t)n >= sizeof self - 1)
        return;
    self[n] = '\0';
    if (setenv("GOMP_SPINCOUNT", spincount_here(), 1) != 0)
        return;
    execv(self, argv);
    unsetenv("GOMP_SPINCOUNT"); /* no exec (a binary deleted since it started): as before */
}

/* The peak that herd bench gemm measures: oneDNN's own sgemm, its own split. */
void herd_nn_sgemm(size_t M, size_t N, size_t K, const float *A, const float *B, float *C)
{
    sgemm_one('N', 'N', M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
}
