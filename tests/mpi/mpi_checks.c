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

/* ---- progress: a rank's exchanges go on while it computes ------------------
 * (mpi_checks --progress; make test-mpi on one host, make test-multihost
 * across two). The last rank, the target, holds what the others read (a
 * shard, a center slice, a model to average with, a mailbox, the batch
 * counter) and spends PROGRESS_AWAY_S outside MPI, as a worker computing a
 * long step does; meanwhile rank 0 times one exchange of each family on
 * it, as its algorithm makes it, and every other rank makes it as well (so
 * the target serves several at once). Each must end within
 * PROGRESS_LIMIT_S: whatever answers for the target must answer while it
 * is away. Then the target checks what arrived. */
#define PROGRESS_AWAY_S 2.0
#define PROGRESS_LIMIT_S 0.5
#define PROGRESS_FLOATS 65536 /* a model of 256 KiB, lenet's size: past any eager limit */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One family's exchange by rank `c->rank` on `target`'s window over `mem`
 * (PROGRESS_FLOATS floats; for "counter" one uint64_t); buf is the
 * origin's scratch. */
typedef herd_status (*exchange_fn)(herd_comm *c, herd_win *w, size_t target, float *buf);

/* Adds ones into target's memory and reads it back, under one lock. */
static herd_status push_pull(herd_comm *c, herd_win *w, size_t target, float *buf, bool exclusive)
{
    herd_status st;
    for (size_t i = 0; i < PROGRESS_FLOATS; i++)
        buf[i] = 1.0f;
    if ((st = herd_comm_win_lock(c, w, target, exclusive)) < 0)
        return st;
    if ((st = herd_comm_win_accumulate(c, w, target, 0, buf, PROGRESS_FLOATS)) == HERD_OK)
        st = herd_comm_win_get(c, w, target, 0, buf, PROGRESS_FLOATS * sizeof(float));
    herd_status st2 = herd_comm_win_unlock(c, w, target);
    return st < 0 ? st : st2;
}

/* parameter server: push a gradient slice into the shard, pull the shard */
static herd_status ex_ps(herd_comm *c, herd_win *w, size_t target, float *buf)
{
    return push_pull(c, w, target, buf, true);
}

/* elastic center slice: add the elastic difference and read the slice
 * under a shared lock (readers and adders never exclude each other) */
static herd_status ex_elastic(herd_comm *c, herd_win *w, size_t target, float *buf)
{
    return push_pull(c, w, target, buf, false);
}

/* AD-PSGD's pairwise average: read the peer's model, write back the mean */
static herd_status ex_adpsgd(herd_comm *c, herd_win *w, size_t target, float *buf)
{
    herd_status st;
    if ((st = herd_comm_win_lock(c, w, target, true)) < 0)
        return st;
    if ((st = herd_comm_win_get(c, w, target, 0, buf, PROGRESS_FLOATS * sizeof(float))) == HERD_OK &&
        (st = herd_comm_win_flush(c, w, target)) == HERD_OK) {
        for (size_t i = 0; i < PROGRESS_FLOATS; i++)
            buf[i] = 0.5f * (buf[i] + 3.0f);
        st = herd_comm_win_put(c, w, target, 0, buf, PROGRESS_FLOATS * sizeof(float));
    }
    herd_status st2 = herd_comm_win_unlock(c, w, target);
    return st < 0 ? st : st2;
}

/* the shared batch counter: fetch-and-add by get, flush, put */
static herd_status ex_counter(herd_comm *c, herd_win *w, size_t target, float *buf)
{
    (void)buf;
    uint64_t v = 0;
    herd_status st;
    if ((st = herd_comm_win_lock(c, w, target, true)) < 0)
        return st;
    if ((st = herd_comm_win_get(c, w, target, 0, &v, sizeof v)) == HERD_OK &&
        (st = herd_comm_win_flush(c, w, target)) == HERD_OK) {
        v++;
        st = herd_comm_win_put(c, w, target, 0, &v, sizeof v);
    }
    herd_status st2 = herd_comm_win_unlock(c, w, target);
    return st < 0 ? st : st2;
}

/* One family: the target goes away for PROGRESS_AWAY_S while the others
 * exchange; 0 when rank 0's exchange (and every rank's) was in time and
 * right, else 1. Push-sum (mailbox, tag 1 + rank) has no window. */
static int progress_family(herd_comm *c, const char *family, exchange_fn fn, int tag)
{
    size_t target = c->size - 1, me = c->rank;
    bool counter = fn == ex_counter, mailbox = fn == NULL;
    float *mem = calloc(PROGRESS_FLOATS, sizeof(float)), *buf = calloc(PROGRESS_FLOATS, sizeof(float));
    float *inbox = me == target && mailbox ? calloc(c->size * (size_t)PROGRESS_FLOATS, sizeof(float)) : NULL;
    herd_req **reqs = calloc(c->size, sizeof *reqs);
    herd_win *w = NULL;
    int bad = !mem || !buf || !reqs || (me == target && mailbox && !inbox);
    if (!bad && !mailbox)
        bad = herd_comm_win_create(c, mem, me == target ? (counter ? sizeof(uint64_t) : PROGRESS_FLOATS * sizeof(float)) : 0,
                                   &w) != HERD_OK;
    for (size_t j = 0; !bad && mailbox && me == target && j < target; j++) /* posted before it goes away */
        bad = herd_comm_irecv(c, j, tag + (int)j, inbox + j * PROGRESS_FLOATS, PROGRESS_FLOATS * sizeof(float),
                              &reqs[j]) != HERD_OK;
    bad |= herd_comm_barrier(c) != HERD_OK;
    double took = 0;
    if (!bad && me == target) {
        struct timespec away = {(time_t)PROGRESS_AWAY_S, (long)((PROGRESS_AWAY_S - (double)(time_t)PROGRESS_AWAY_S) * 1e9)};
        nanosleep(&away, NULL); /* outside MPI, as compute is */
    } else if (!bad) {
        for (size_t i = 0; i < PROGRESS_FLOATS; i++)
            buf[i] = (float)(me + 1);
        double t0 = now_s();
        if (mailbox) {
            herd_req *r;
            bad = herd_comm_isend(c, target, tag + (int)me, buf, PROGRESS_FLOATS * sizeof(float), &r) != HERD_OK ||
                  herd_comm_wait(c, r) != HERD_OK;
        } else {
            bad = fn(c, w, target, buf) != HERD_OK;
        }
        took = now_s() - t0;
        if (bad)
            fprintf(stderr, "rank %zu: FAIL progress %s: %s\n", me, family, herd_comm_last_error(c));
        else if (took > PROGRESS_LIMIT_S)
            fprintf(stderr, "rank %zu: FAIL progress %s: the exchange with rank %zu took %.3f s while it was away "
                            "(limit %.1f s)\n", me, family, target, took, PROGRESS_LIMIT_S), bad = 1;
    }
    for (size_t j = 0; mailbox && me == target && j < target; j++)
        if (reqs[j])
            bad |= herd_comm_wait(c, reqs[j]) != HERD_OK;
    bad |= herd_comm_barrier(c) != HERD_OK;
    if (!bad && me == target) { /* what every other rank's exchange left */
        float others = (float)target;
        if (counter) {
            uint64_t v;
            memcpy(&v, mem, sizeof v);
            bad = v != (uint64_t)target;
        } else if (mailbox) {
            for (size_t j = 0; j < target && !bad; j++)
                bad = inbox[j * PROGRESS_FLOATS + 7] != (float)(j + 1);
        } else if (fn == ex_adpsgd) {
            bad = mem[7] != 3.0f - 3.0f * powf(0.5f, others); /* each mean halves the distance to 3 */
        } else {
            bad = mem[7] != others;
        }
        if (bad)
            fprintf(stderr, "rank %zu: FAIL progress %s: wrong contents after the exchanges\n", me, family);
    }
    if (w)
        bad |= herd_comm_win_free(c, w) != HERD_OK;
    if (me == 0 && !bad)
        printf("progress %-9s rank 0's exchange with rank %zu took %.4f s while it was away %.1f s (limit %.1f)\n",
               family, target, took, PROGRESS_AWAY_S, PROGRESS_LIMIT_S);
    free(mem), free(buf), free(inbox), free(reqs);
    return bad;
}

/* mpi_checks --pull-latency [MAX_US [GAP_US]] (bench/lib/two-hosts-ctl wake's
 * calibration of herd sim --agent-wake-us): for 2 s rank 0 pulls 100
 * floats from the last rank under a shared lock, one pull after another
 * (GAP_US apart: the target's agent has gone back to sleep by the next),
 * while that rank computes outside MPI; rank 0 prints the mean time of a
 * pull in microseconds, and fails where it is MAX_US or more. */
static int pull_latency(herd_comm *c, double max_us, double gap_us)
{
    if (c->size < 2)
        return 2;
    c->timeout_s = 30;
    size_t target = c->size - 1, n = 100;
    float mem[100] = {0}, buf[100];
    herd_win *w = NULL;
    if (herd_comm_win_create(c, mem, c->rank == target ? sizeof mem : 0, &w) != HERD_OK ||
        herd_comm_barrier(c) != HERD_OK)
        return 2;
    int bad = 0;
    if (c->rank == target) {
        volatile double x = 0;
        for (double t0 = now_s(); now_s() - t0 < 2.5;)
            for (int i = 0; i < 100000; i++)
                x += i * 1e-9;
    } else if (c->rank == 0) {
        long k = 0;
        double t0 = now_s(), pulling = 0;
        struct timespec gap = {(time_t)(gap_us / 1e6), (long)(fmod(gap_us, 1e6) * 1e3)};
        for (; now_s() - t0 < 2.0 && !bad; k++) {
            if (gap_us > 0)
                nanosleep(&gap, NULL);
            double t1 = now_s();
            bad = herd_comm_win_lock(c, w, target, false) != HERD_OK ||
                  herd_comm_win_get(c, w, target, 0, buf, n * sizeof(float)) != HERD_OK ||
                  herd_comm_win_unlock(c, w, target) != HERD_OK;
            pulling += now_s() - t1;
        }
        double us = pulling / (double)k * 1e6;
        if (!bad)
            printf("pull_latency_us %.1f (%ld pulls of 100 floats from rank %zu while it computed, %g us apart)\n", us,
                   k, target, gap_us);
        if (!bad && max_us > 0 && us >= max_us) {
            fprintf(stderr, "rank 0: FAIL a pull from rank %zu took %.1f us, limit %g\n", target, us, max_us);
            bad = 1;
        }
    }
    bad |= herd_comm_barrier(c) != HERD_OK || herd_comm_win_free(c, w) != HERD_OK;
    return bad;
}

/* mpi_checks --cross-pull BYTES (test-sim): every rank pulls BYTES from the
 * next rank's window at once (rank r r ms after rank 0), under a shared
 * lock; rank 0 prints the time the slowest took from rank 0's start. Where the links of the ranks' hosts carry each way at
 * once, one pull's wire time; where the pulls take turns, the sum of
 * them. */
static int cross_pull(herd_comm *c, size_t bytes)
{
    if (c->size < 2 || bytes == 0)
        return 2;
    c->timeout_s = 30;
    char *mem = calloc(bytes, 1), *buf = malloc(bytes);
    herd_win *w = NULL;
    if (!mem || !buf || herd_comm_win_create(c, mem, bytes, &w) != HERD_OK || herd_comm_barrier(c) != HERD_OK)
        return 2;
    memset(mem, (int)(c->rank + 1), bytes);
    size_t from = (c->rank + 1) % c->size;
    int bad = herd_comm_barrier(c) != HERD_OK;
    double t0 = now_s();
    /* rank r starts r ms late, as ranks do that compute: an overlap, not a
     * lockstep */
    struct timespec late = {0, (long)c->rank * 1000000L};
    nanosleep(&late, NULL);
    bad |= herd_comm_win_lock(c, w, from, false) != HERD_OK ||
           herd_comm_win_get(c, w, from, 0, buf, bytes) != HERD_OK || herd_comm_win_unlock(c, w, from) != HERD_OK;
    double took = now_s() - t0, all = 0;
    for (size_t i = 0; i < bytes && !bad; i++)
        bad = buf[i] != (char)(from + 1);
    double *each = malloc(c->size * sizeof *each);
    if (!each || herd_allgather(c, &took, each, sizeof took) != HERD_OK)
        return 2;
    for (size_t r = 0; r < c->size; r++)
        all = each[r] > all ? each[r] : all;
    if (c->rank == 0 && !bad)
        printf("cross_pull_s %.9f (%zu ranks, %zu bytes each from the next)\n", all, c->size, bytes);
    if (bad)
        fprintf(stderr, "rank %zu: FAIL cross pull: wrong contents from rank %zu\n", c->rank, from);
    bad |= herd_comm_barrier(c) != HERD_OK || herd_comm_win_free(c, w) != HERD_OK;
    free(each), free(mem), free(buf);
    return bad;
}

/* mpi_checks --self-send BYTES (test-sim): rank 0 sends BYTES to itself,
 * then to rank 1, and prints how long each took. On herd sim's platforms
 * a host's message to itself takes its loopback (memory speed), one to
 * another host its link. */
static int self_send(herd_comm *c, size_t bytes)
{
    if (c->size < 2 || bytes == 0)
        return 2;
    c->timeout_s = 30;
    char *out = malloc(bytes), *in = malloc(bytes);
    if (!out || !in)
        return 2;
    memset(out, 7, bytes);
    int bad = herd_comm_barrier(c) != HERD_OK;
    if (c->rank == 0) {
        herd_req *req = NULL;
        double t0 = now_s();
        bad |= herd_comm_isend(c, 0, 5, out, bytes, &req) != HERD_OK || herd_comm_recv(c, 0, 5, in, bytes) != HERD_OK ||
               herd_comm_wait(c, req) != HERD_OK;
        double self = now_s() - t0;
        bad |= memcmp(in, out, bytes) != 0;
        t0 = now_s();
        bad |= herd_comm_send(c, 1, 6, out, bytes) != HERD_OK || herd_comm_recv(c, 1, 7, in, 1) != HERD_OK;
        double remote = now_s() - t0;
        if (!bad)
            printf("self_send_s %.9f remote_send_s %.9f (%zu bytes)\n", self, remote, bytes);
    } else if (c->rank == 1) {
        bad |= herd_comm_recv(c, 0, 6, in, bytes) != HERD_OK || herd_comm_send(c, 0, 7, in, 1) != HERD_OK;
    }
    if (bad)
        fprintf(stderr, "rank %zu: FAIL self send\n", c->rank);
    bad |= herd_comm_barrier(c) != HERD_OK;
    free(out), free(in);
    return bad;
}

/* mpi_checks --env NAME EXPECT (test-mpi): NAME's value in every rank's
 * environment once the engine has started MPI ("unset" where it has none)
 * is EXPECT: what herd chose for the MPI library, or left to the user. */
static int env_check(herd_comm *c, const char *name, const char *expect)
{
    const char *v = getenv(name);
    int bad = strcmp(v ? v : "unset", expect) != 0;
    if (bad)
        fprintf(stderr, "rank %zu: FAIL %s is '%s', want '%s'\n", c->rank, name, v ? v : "unset", expect);
    int all = 0, *each = malloc(c->size * sizeof bad);
    if (!each || herd_allgather(c, &bad, each, sizeof bad) != HERD_OK)
        return 2;
    for (size_t r = 0; r < c->size; r++)
        all |= each[r];
    if (c->rank == 0 && !all)
        printf("env %s=%s on all %zu ranks\n", name, expect, c->size);
    free(each);
    return all;
}

static int progress(herd_comm *c)
{
    if (c->size < 2) {
        fprintf(stderr, "mpi_checks --progress: needs 2 ranks or more\n");
        return 2;
    }
    c->timeout_s = 30;
    int failed = 0, total = 0;
    failed += progress_family(c, "ps", ex_ps, 0), total++;
    failed += progress_family(c, "elastic", ex_elastic, 0), total++;
    failed += progress_family(c, "adpsgd", ex_adpsgd, 0), total++;
    failed += progress_family(c, "push-sum", NULL, 100), total++;
    failed += progress_family(c, "counter", ex_counter, 0), total++;
    int mine[2] = {failed, total}, *all = malloc(c->size * sizeof mine);
    if (!all || herd_allgather(c, mine, all, sizeof mine) != HERD_OK)
        return 2;
    int f = 0, t = 0;
    for (size_t r = 0; r < c->size; r++)
        f += all[2 * r], t += all[2 * r + 1];
    if (c->rank == 0)
        printf("mpi engine progress, %zu ranks (checks counted once per rank): %d passed, %d failed\n", c->size, t - f,
               f);
    free(all);
    return f ? 1 : 0;
}

/* herd_comm_issend completes only once the receiver has matched it: rank 0
 * sends 64 floats to rank 1, which posts its receive only after 0.3 s away
 * from MPI (its agent in MPI meanwhile, which matches nothing); the send
 * must not be done during its first 0.2 s, must be done once received,
 * and must carry its data. Ranks past 1 take no part. */
static int issend_waits(herd_comm *c)
{
    enum { ISSEND_TAG = 4242, ISSEND_FLOATS = 64 };
    float buf[ISSEND_FLOATS];
    int bad = 0;
    if (c->rank == 0) {
        for (size_t i = 0; i < ISSEND_FLOATS; i++)
            buf[i] = v(i);
        herd_req *r = NULL;
        bool done = false;
        bad = herd_comm_issend(c, 1, ISSEND_TAG, buf, sizeof buf, &r) != HERD_OK;
        for (double t0 = now_s(); !bad && !done && now_s() - t0 < 0.2;) {
            bad = herd_comm_test(c, r, &done) != HERD_OK;
            struct timespec ts = {0, 1000000L};
            nanosleep(&ts, NULL);
        }
        if (done)
            fprintf(stderr, "rank 0: FAIL issend done before rank 1 posted its receive\n");
        bad |= done || herd_comm_wait(c, r) != HERD_OK;
    } else if (c->rank == 1) {
        struct timespec ts = {0, 300000000L};
        nanosleep(&ts, NULL);
        bad = herd_comm_recv(c, 0, ISSEND_TAG, buf, sizeof buf) != HERD_OK;
        for (size_t i = 0; i < ISSEND_FLOATS && !bad; i++)
            bad = buf[i] != v(i);
    }
    bad |= herd_comm_barrier(c) != HERD_OK;
    if (bad)
        fprintf(stderr, "rank %zu: FAIL issend\n", c->rank);
    return bad;
}

/* Epochs on every rank at once, each ended by win_unlock_begin and all
 * completed by one win_wait (the parameter servers' pull and push): a
 * fetch-and-add on every rank's counter by get, flush, put under the
 * exclusive lock loses no increment, and gets ended so hold their data
 * after the wait. */
static int overlapped_epochs(herd_comm *c)
{
    enum { REPS = 10 };
    size_t n = c->size;
    uint64_t counter = 0, *seen = calloc(n, sizeof *seen), *next = calloc(n, sizeof *next);
    herd_win *w = NULL;
    int bad = !seen || !next || herd_comm_win_create(c, &counter, sizeof counter, &w) != HERD_OK;
    for (int rep = 0; rep < REPS && !bad; rep++) {
        for (size_t t = 0; t < n && !bad; t++) {
            bad = herd_comm_win_lock(c, w, t, true) != HERD_OK ||
                  herd_comm_win_get(c, w, t, 0, &seen[t], sizeof seen[t]) != HERD_OK ||
                  herd_comm_win_flush(c, w, t) != HERD_OK;
            next[t] = seen[t] + 1;
            bad |= herd_comm_win_put(c, w, t, 0, &next[t], sizeof next[t]) != HERD_OK ||
                   herd_comm_win_unlock_begin(c, w, t) != HERD_OK;
        }
        bad |= herd_comm_win_wait(c, w) != HERD_OK;
    }
    bad |= herd_comm_barrier(c) != HERD_OK;
    for (size_t t = 0; t < n && !bad; t++) {
        seen[t] = 0;
        bad = herd_comm_win_lock(c, w, t, false) != HERD_OK ||
              herd_comm_win_get(c, w, t, 0, &seen[t], sizeof seen[t]) != HERD_OK ||
              herd_comm_win_unlock_begin(c, w, t) != HERD_OK;
    }
    bad |= herd_comm_win_wait(c, w) != HERD_OK;
    for (size_t t = 0; t < n && !bad; t++)
        bad = seen[t] != REPS * (uint64_t)n;
    bad |= herd_comm_barrier(c) != HERD_OK;
    if (w)
        bad |= herd_comm_win_free(c, w) != HERD_OK;
    if (bad)
        fprintf(stderr, "rank %zu: FAIL overlapped epochs (own counter %llu): %s\n", c->rank,
                (unsigned long long)counter, herd_comm_last_error(c));
    free(seen), free(next);
    return bad;
}

/* herd_comm_win_blend: every rank moves rank 0's floats, 0 at first,
 * halfway toward 1024 under the exclusive lock, its epoch ended with
 * win_unlock_begin: in whatever order they come, the floats end at 1024 (1
 * - 2^-n) and the ranks read 1024 (1 - 2^-j) for j = 0..n-1, each j once
 * (a blend that read a value another had read, or was half applied, would
 * repeat one); every float of the slice alike. */
static int blends(herd_comm *c)
{
    enum { N = 1000 };
    size_t n = c->size;
    float *mem = calloc(N, sizeof *mem), *src = malloc(N * sizeof *src), *got = malloc(N * sizeof *got);
    herd_win *w = NULL;
    int bad = !mem || !src || !got || herd_comm_win_create(c, mem, c->rank == 0 ? N * sizeof *mem : 0, &w) != HERD_OK;
    for (size_t i = 0; i < N && !bad; i++)
        src[i] = 1024.0f, got[i] = -1.0f;
    bad = bad || herd_comm_win_lock(c, w, 0, true) != HERD_OK ||
          herd_comm_win_blend(c, w, 0, 0, src, N, 0.5f, got) != HERD_OK || herd_comm_win_unlock_begin(c, w, 0) != HERD_OK ||
          herd_comm_win_wait(c, w) != HERD_OK;
    for (size_t i = 1; i < N && !bad; i++)
        bad = got[i] != got[0];
    bad |= herd_comm_barrier(c) != HERD_OK;
    float *all = malloc(n * sizeof *all);
    bad |= !all || herd_allgather(c, got, all, sizeof *got) != HERD_OK;
    for (size_t j = 0; j < n && !bad; j++) { /* 1024 (1 - 2^-j) read by exactly one rank */
        float want = 1024.0f - ldexpf(1024.0f, -(int)j);
        size_t hits = 0;
        for (size_t r = 0; r < n; r++)
            hits += all[r] == want;
        bad = hits != 1;
    }
    for (size_t i = 0; i < N && !bad && c->rank == 0; i++)
        bad = mem[i] != 1024.0f - ldexpf(1024.0f, -(int)n);
    if (w)
        bad |= herd_comm_win_free(c, w) != HERD_OK;
    if (bad)
        fprintf(stderr, "rank %zu: FAIL window blend (read %g): %s\n", c->rank, got ? (double)got[0] : 0.0,
                herd_comm_last_error(c));
    free(mem), free(src), free(got), free(all);
    return bad;
}

/* herd_comm_win_heavy_ball: every rank takes one step, upd 1 and mu 1/2, of
 * the momentum v and weights x in rank 0's window (both 0 at first), its
 * epoch ended with win_unlock_begin; in any order the j-th step makes v =
 * -2 + 2^(1-j) and adds it to x, all exact in float: x ends at -2n + 2 -
 * 2^(1-n), v at -2 + 2^(1-n). Overlapping v and x are refused. */
static int heavy_balls(herd_comm *c)
{
    enum { N = 500 };
    size_t n = c->size;
    float *mem = calloc(2 * N, sizeof *mem), *upd = malloc(N * sizeof *upd);
    herd_win *w = NULL;
    int bad = !mem || !upd || herd_comm_win_create(c, mem, c->rank == 0 ? 2 * N * sizeof *mem : 0, &w) != HERD_OK;
    for (size_t i = 0; i < N && !bad; i++)
        upd[i] = 1.0f;
    bad = bad || herd_comm_win_lock(c, w, 0, true) != HERD_OK ||
          herd_comm_win_heavy_ball(c, w, 0, 0, 1, upd, N, 0.5f) != HERD_EINVAL ||
          herd_comm_win_heavy_ball(c, w, 0, 0, N * sizeof(float), upd, N, 0.5f) != HERD_OK ||
          herd_comm_win_unlock_begin(c, w, 0) != HERD_OK || herd_comm_win_wait(c, w) != HERD_OK;
    bad |= herd_comm_barrier(c) != HERD_OK;
    float v = -2.0f + ldexpf(1.0f, 1 - (int)n), x = -2.0f * (float)n + 2.0f - ldexpf(1.0f, 1 - (int)n);
    for (size_t i = 0; i < N && !bad && c->rank == 0; i++)
        bad = mem[i] != v || mem[N + i] != x;
    if (w)
        bad |= herd_comm_win_free(c, w) != HERD_OK;
    if (bad)
        fprintf(stderr, "rank %zu: FAIL window heavy-ball step (v %g x %g, want %g %g): %s\n", c->rank,
                mem ? (double)mem[0] : 0.0, mem ? (double)mem[N] : 0.0, (double)v, (double)x, herd_comm_last_error(c));
    free(mem), free(upd);
    return bad;
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
    if (argc > 1 && (!strcmp(argv[1], "--progress") || !strcmp(argv[1], "--pull-latency") ||
                     !strcmp(argv[1], "--cross-pull") || !strcmp(argv[1], "--self-send") ||
                     !strcmp(argv[1], "--env"))) {
        int rc = !strcmp(argv[1], "--progress")     ? progress(c)
                 : !strcmp(argv[1], "--self-send")  ? self_send(c, argc > 2 ? (size_t)atol(argv[2]) : 0)
                 : !strcmp(argv[1], "--cross-pull") ? cross_pull(c, argc > 2 ? (size_t)atol(argv[2]) : 0)
                 : !strcmp(argv[1], "--env")        ? (argc > 3 ? env_check(c, argv[2], argv[3]) : 2)
                                                    : pull_latency(c, argc > 2 ? atof(argv[2]) : 0,
                                                                   argc > 3 ? atof(argv[3]) : 0);
        herd_comm_free(c);
        herd_world_free(world);
        herd_comm_shutdown();
        return rc;
    }
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
    failed += overlapped_epochs(c), total++;
    failed += blends(c), total++;
    failed += heavy_balls(c), total++;
    if (n > 1)
        failed += issend_waits(c), total++;
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
