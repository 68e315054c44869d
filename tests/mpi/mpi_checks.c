/* Checks of the mpi engine, run under mpirun by `make test-mpi` (one process
 * per rank, so they cannot live in the forking test runner). Each rank runs
 * the same checks; rank 0 prints `N passed, N failed` for the whole world.
 * The same closed forms as tests/test_collectives.c: rank r contributes
 * (r+1)*v(i) with integer-valued v, so sums are exact in fp32. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "herd/herd_comm.h"

static float v(size_t i) { return (float)(i % 17) - 8.0f; }

static int check_allreduce(herd_comm *c, size_t count, herd_allreduce_opts o, const char *what)
{
    size_t n = c->size;
    float *buf = malloc((count ? count : 1) * sizeof(float));
    for (size_t i = 0; i < count; i++)
        buf[i] = (float)(c->rank + 1) * v(i);
    herd_status st = herd_allreduce(c, buf, count, &o);
    int bad = st != HERD_OK;
    float k = (float)(n * (n + 1) / 2);
    for (size_t i = 0; i < count && !bad; i++) {
        double tol = o.wire == HERD_F32 ? 0 : fabs(k * v(i)) * 2e-2 * (double)n;
        bad = !(fabs(buf[i] - k * v(i)) <= tol);
    }
    /* every rank holds the same bits: compare against rank 0's via allgather of a checksum */
    unsigned long long sum = 0;
    for (size_t i = 0; i < count; i++) {
        unsigned u;
        memcpy(&u, &buf[i], 4);
        sum = sum * 31 + u;
    }
    unsigned long long *all = malloc(n * sizeof *all);
    if (herd_allgather(c, &sum, all, sizeof sum) != HERD_OK)
        bad = 1;
    for (size_t r = 0; r < n && !bad; r++)
        bad = all[r] != all[0];
    if (bad)
        fprintf(stderr, "rank %zu: FAIL %s count=%zu: %s\n", c->rank, what, count,
                st ? herd_comm_last_error(c) : "wrong values");
    free(all);
    free(buf);
    return bad;
}

/* opts.scale, opts.nonfinite and opts.input_nonfinite: the mean's bits are
 * the sum's times 1/n; every rank learns of a NaN that only the last rank
 * holds, at the end of the buffer (in the last rank's chunk), and of none
 * when there is none; only the last rank hears that its input held it. */
static int check_mean(herd_comm *c, size_t count, herd_allreduce_impl impl, const char *what)
{
    size_t n = c->size;
    float *buf = malloc((count ? count : 1) * sizeof(float)), scale = 1.0f / (float)n;
    float k = (float)(n * (n + 1) / 2);
    int bad = 0;
    for (int nan = 0; nan < 2 && !bad; nan++) {
        for (size_t i = 0; i < count; i++)
            buf[i] = (float)(c->rank + 1) * v(i);
        if (nan && count && c->rank == n - 1)
            buf[count - 1] = NAN;
        bool nonfinite = !nan, mine = false;
        herd_allreduce_opts o = {.impl = impl, .scale = scale, .nonfinite = &nonfinite, .input_nonfinite = &mine};
        bad = herd_allreduce(c, buf, count, &o) != HERD_OK || nonfinite != (nan && count) ||
              mine != (nan && count && c->rank == n - 1);
        for (size_t i = 0; i + (size_t)nan < count && !bad; i++)
            bad = buf[i] != k * v(i) * scale;
    }
    if (bad)
        fprintf(stderr, "rank %zu: FAIL mean and check, %s, count=%zu: %s\n", c->rank, what, count,
                herd_comm_last_error(c));
    free(buf);
    return bad;
}

/* --lock-stall (tests/mpi/fail_matrix.sh): rank 1 holds an exclusive lock
 * on rank 0's window far longer than the 1 s timeout; rank 2's lock must
 * not wait past it. MPI_Win_lock has no timed form: the engine's watchdog
 * ends rank 2 with a message naming rank 0's window, and mpirun the job.
 * Returns only if nothing stopped it (a failure of the check). */
static int lock_stall(herd_comm *c)
{
    float cell = 0;
    herd_win *w = NULL;
    c->timeout_s = 1;
    if (c->size < 3 || herd_comm_win_create(c, &cell, sizeof cell, &w) != HERD_OK) {
        fprintf(stderr, "mpi_checks --lock-stall: needs 3 ranks and a window\n");
        return 2;
    }
    if (c->rank == 1 && herd_comm_win_lock(c, w, 0, true) != HERD_OK)
        return 2;
    c->timeout_s = 30; /* the barrier is not what is checked */
    if (herd_comm_barrier(c) != HERD_OK)
        return 2;
    c->timeout_s = 1;
    if (c->rank == 1) {
        struct timespec ts = {20, 0};
        nanosleep(&ts, NULL);
    }
    if (c->rank == 2 && herd_comm_win_lock(c, w, 0, true) == HERD_OK) {
        float one = 1;
        herd_comm_win_accumulate(c, w, 0, 0, &one, 1);
        herd_comm_win_unlock(c, w, 0);
    }
    c->timeout_s = 30;
    herd_comm_barrier(c);
    fprintf(stderr, "rank %zu: FAIL lock-stall: rank 2 was never stopped\n", c->rank);
    return 1;
}

int main(int argc, char **argv)
{
    herd_comm *c = NULL;
    herd_world *world = NULL;
    const herd_engine *e = NULL;
    herd_err err = {0};
    /* through the table, as a run does (by name: under SimGrid no launcher
     * variable need say that smpirun started this process) */
    if (herd_engine_pick("mpi", &e, &err) != HERD_OK || herd_world_create(e, 0, &world, &err) != HERD_OK ||
        herd_world_endpoint(world, world->first_rank, &c, &err) != HERD_OK) {
        fprintf(stderr, "mpi_checks: %s\n", err.msg);
        return 2;
    }
    if (strcmp(e->name, "mpi") || world->size != c->size || world->first_rank != c->rank || world->nlocal != 1 ||
        !(e->caps & HERD_ENGINE_LAUNCHER_SIZED)) {
        fprintf(stderr, "mpi_checks: FAIL engine '%s': world of %zu (first rank %zu, %zu local), endpoint rank %zu of %zu\n",
                e->name, world->size, world->first_rank, world->nlocal, c->rank, c->size);
        return 2;
    }
    if (argc > 1 && !strcmp(argv[1], "--lock-stall"))
        return lock_stall(c);
    c->timeout_s = 30;
    size_t n = c->size, counts[] = {0, 1, n > 1 ? n - 1 : 1, n, n + 1, 1000, 100003};
    int failed = 0, total = 0;
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        herd_allreduce_opts ring = {.segment_bytes = 256, .impl = HERD_ALLREDUCE_RING},
                            big = {.impl = HERD_ALLREDUCE_RING}, native = {.impl = HERD_ALLREDUCE_NATIVE},
                            f16 = {.wire = HERD_F16}, bf16 = {.wire = HERD_BF16};
        failed += check_allreduce(c, counts[i], ring, "ring, 256-byte segments"), total++;
        failed += check_allreduce(c, counts[i], big, "ring, default segments"), total++;
        failed += check_allreduce(c, counts[i], native, "native"), total++;
        failed += check_allreduce(c, counts[i], f16, "fp16 wire"), total++;
        failed += check_allreduce(c, counts[i], bf16, "bf16 wire"), total++;
        failed += check_mean(c, counts[i], HERD_ALLREDUCE_RING, "ring"), total++;
        failed += check_mean(c, counts[i], HERD_ALLREDUCE_NATIVE, "native"), total++;
    }
    /* broadcast from every root */
    for (size_t root = 0; root < n; root++) {
        int x[3] = {0, 0, 0};
        if (c->rank == root)
            x[0] = (int)root + 7, x[1] = 11, x[2] = -3;
        herd_status st = herd_broadcast(c, x, sizeof x, root);
        int bad = st != HERD_OK || x[0] != (int)root + 7 || x[1] != 11 || x[2] != -3;
        if (bad)
            fprintf(stderr, "rank %zu: FAIL broadcast from %zu\n", c->rank, root);
        failed += bad, total++;
    }
    /* one-sided: every rank adds rank+1 into rank 0's window under an exclusive
     * lock (a world of one rank has a local window) */
    float cell[4] = {0, 0, 0, 0};
    herd_win *w = NULL;
    int bad = herd_comm_win_create(c, cell, sizeof cell, &w) != HERD_OK;
    if (bad)
        fprintf(stderr, "rank %zu: %s\n", c->rank, herd_comm_last_error(c));
    float add[4] = {(float)(c->rank + 1), 1, 0, 0};
    for (int rep = 0; rep < 10 && !bad; rep++)
        bad = herd_comm_win_lock(c, w, 0, true) != HERD_OK || herd_comm_win_accumulate(c, w, 0, 0, add, 4) != HERD_OK ||
              herd_comm_win_unlock(c, w, 0) != HERD_OK;
    bad |= herd_comm_barrier(c) != HERD_OK;
    if (!bad && c->rank == 0)
        bad = cell[0] != 10.0f * (float)(n * (n + 1) / 2) || cell[1] != 10.0f * (float)n;
    if (w)
        bad |= herd_comm_win_free(c, w) != HERD_OK;
    if (bad)
        fprintf(stderr, "rank %zu: FAIL window accumulate\n", c->rank);
    failed += bad, total++;
    /* fetch-and-add by get, flush, put under an exclusive lock (the batch
     * counter of asynchronous runs): no increment is lost */
    uint64_t counter = 0, seen = 0, next;
    w = NULL;
    bad = herd_comm_win_create(c, &counter, c->rank == 0 ? sizeof counter : 0, &w) != HERD_OK;
    for (int rep = 0; rep < 20 && !bad; rep++) {
        bad = herd_comm_win_lock(c, w, 0, true) != HERD_OK || herd_comm_win_get(c, w, 0, 0, &seen, sizeof seen) != HERD_OK ||
              herd_comm_win_flush(c, w, 0) != HERD_OK;
        next = seen + 1;
        bad |= herd_comm_win_put(c, w, 0, 0, &next, sizeof next) != HERD_OK || herd_comm_win_unlock(c, w, 0) != HERD_OK;
    }
    bad |= herd_comm_barrier(c) != HERD_OK;
    if (!bad && c->rank == 0)
        bad = counter != 20 * (uint64_t)n;
    if (w)
        bad |= herd_comm_win_free(c, w) != HERD_OK;
    if (bad)
        fprintf(stderr, "rank %zu: FAIL window fetch-and-add (counter %llu)\n", c->rank, (unsigned long long)counter);
    failed += bad, total++;
    /* the world's totals */
    int mine[2] = {failed, total}, *all = malloc(n * sizeof mine);
    herd_allgather(c, mine, all, sizeof mine);
    int f = 0, t = 0;
    for (size_t r = 0; r < n; r++)
        f += all[2 * r], t += all[2 * r + 1];
    if (c->rank == 0)
        printf("mpi engine, %zu ranks (checks counted once per rank): %d passed, %d failed\n", n, t - f, f);
    free(all);
    herd_comm_free(c);
    herd_world_free(world);
    herd_comm_shutdown();
    return f ? 1 : 0;
}
