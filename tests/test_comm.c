/* Tests of src/comm: the herd_comm wrappers, the threads engine, the
 * collectives and the fp16/bf16 conversions.
 *
 * Multi-rank tests are written as bodies `int body(herd_comm *c, void *arg)`
 * that return 0 when every check held; run_ranks_at() runs one per thread on
 * a fresh world of an engine, made through its table (RUN_RANKS: threads),
 * and fails the test if any failed. Bodies use only the herd_comm API, so
 * the same bodies run on every engine (the loopback engine's world of one
 * included).
 *
 * Allreduce is checked against closed forms: rank r contributes (r+1)*f(i)
 * with integer-valued f, so the fp32 sum n(n+1)/2 * f(i) is exact and every
 * rank must hold exactly it. For 16-bit wires see wire_bound() below.
 */
#include "harness.h"
#include "comm/comm_internal.h"
#include "comm/sockwatch.h"
#include "core/clock.h"
#include "herd/herd_comm.h"
#include "herd/herd_rng.h"
#include "herd/herd_run.h"

#include <float.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- running bodies on N ranks ------------------------------------ */

typedef int (*rank_body)(herd_comm *c, void *arg);

static void body_report(const herd_comm *c, const char *file, int line, const char *what)
{
    fprintf(stderr, "  %s:%d: rank %zu: %s (last comm error: \"%s\")\n", file, line, c->rank, what,
            herd_comm_last_error(c));
}

/* In a body: report a failed check and make the body return 1. */
#define CHECK(c, cond)                                                  \
    do {                                                                \
        if (!(cond)) {                                                  \
            body_report((c), __FILE__, __LINE__, "expected: " #cond);   \
            return 1;                                                   \
        }                                                               \
    } while (0)

#define CHECK_ST(c, expr, want)                                                                  \
    do {                                                                                         \
        herd_status body__st = (expr);                                                           \
        if (body__st != (want)) {                                                                \
            char body__m[256];                                                                   \
            snprintf(body__m, sizeof body__m, "%s returned %s, want %s", #expr,                  \
                     herd_err_name(body__st), herd_err_name(want));                              \
            body_report((c), __FILE__, __LINE__, body__m);                                       \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

#define CHECK_OK(c, expr) CHECK_ST(c, expr, HERD_OK)

#define CHECK_MSG(c, needle)                                                                     \
    do {                                                                                         \
        if (!strstr(herd_comm_last_error(c), (needle))) {                                        \
            body_report((c), __FILE__, __LINE__, "the message does not contain \"" needle "\""); \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

typedef struct rank_run {
    herd_comm *c;
    rank_body fn;
    void *arg;
    int rc;
} rank_run;

static void *rank_main(void *p)
{
    rank_run *r = p;
    r->rc = r->fn(r->c, r->arg);
    return NULL;
}

/* Runs fn on n threads, one endpoint each of a new world of `engine` (made
 * through its table, as a run makes it) whose waits time out after
 * timeout_s; `meanwhile` (if any) runs on the calling thread while they do.
 * Fails the test if any body failed. */
static void run_ranks_at(const char *file, int line, const char *engine, size_t n, double timeout_s, rank_body fn,
                         void *arg, void (*meanwhile)(herd_world *w, void *arg))
{
    herd_world *w;
    herd_err err = {0};
    if (herd_world_create(herd_engine_find(engine), n, &w, &err) != HERD_OK)
        herd_test_fail(file, line, "%s world of %zu: %s", engine, n, err.msg);
    if (w->nlocal != n)
        herd_test_fail(file, line, "%s world of %zu runs %zu here", engine, n, w->nlocal);
    rank_run *runs = calloc(n, sizeof *runs);
    pthread_t *th = calloc(n, sizeof *th);
    if (!runs || !th)
        herd_test_fail(file, line, "out of memory");
    for (size_t r = 0; r < n; r++) {
        if (herd_world_endpoint(w, r, &runs[r].c, &err) != HERD_OK)
            herd_test_fail(file, line, "rank %zu: %s", r, err.msg);
        runs[r].c->timeout_s = timeout_s;
        runs[r].fn = fn, runs[r].arg = arg;
    }
    for (size_t r = 0; r < n; r++)
        if (pthread_create(&th[r], NULL, rank_main, &runs[r]) != 0)
            herd_test_fail(file, line, "pthread_create");
    if (meanwhile)
        meanwhile(w, arg);
    for (size_t r = 0; r < n; r++)
        pthread_join(th[r], NULL);
    herd_world_close(w);
    size_t failed = 0;
    for (size_t r = 0; r < n; r++) {
        failed += runs[r].rc != 0;
        herd_comm_free(runs[r].c);
    }
    herd_world_free(w);
    free(runs);
    free(th);
    if (failed)
        herd_test_fail(file, line, "%zu of %zu ranks failed (see above)", failed, n);
}

#define RUN_RANKS(n, timeout_s, fn, arg) run_ranks_at(__FILE__, __LINE__, "threads", (n), (timeout_s), (fn), (arg), NULL)
#define RUN_ON(engine, n, timeout_s, fn, arg) run_ranks_at(__FILE__, __LINE__, (engine), (n), (timeout_s), (fn), (arg), NULL)

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* ---- point-to-point ------------------------------------------------- */

/* Even ranks send to the next odd rank on several tags; the odd rank
 * receives them in another order: a receive takes the oldest message of its
 * own (source, tag), whatever else arrived. */
static int body_tags(herd_comm *c, void *arg)
{
    (void)arg;
    size_t r = c->rank;
    if (r % 2 == 0) {
        for (int i = 0; i < 3; i++)
            for (int tag = 1; tag <= 3; tag++) {
                int v = tag * 100 + i + (int)r;
                CHECK_OK(c, herd_comm_send(c, r + 1, tag, &v, sizeof v));
            }
        CHECK_OK(c, herd_comm_barrier(c));
    } else {
        CHECK_OK(c, herd_comm_barrier(c)); /* everything has arrived: all go through the mailbox */
        for (int tag = 3; tag >= 1; tag--)
            for (int i = 0; i < 3; i++) {
                int v = -1;
                CHECK_OK(c, herd_comm_recv(c, r - 1, tag, &v, sizeof v));
                CHECK(c, v == tag * 100 + i + (int)(r - 1));
            }
    }
    return 0;
}

static void test_p2p_tags(void) { RUN_RANKS(4, 10, body_tags, NULL); }

/* herd_comm_issend on an engine without issend (threads) is its isend: the
 * message arrives whole, counted as sent, and a receive posted late still
 * gets it; its argument checks are isend's, named issend. (The mpi
 * engine's, which waits for the receive, tests/mpi/mpi_checks.c checks.) */
static int body_issend(herd_comm *c, void *arg)
{
    (void)arg;
    int v[3] = {7, -1, 40000};
    if (c->rank == 0) {
        herd_req *r = NULL;
        uint64_t before = c->bytes_sent;
        CHECK(c, herd_comm_issend(c, 2, 5, v, sizeof v, &r) == HERD_EINVAL);
        CHECK(c, strstr(herd_comm_last_error(c), "issend: peer 2 is not a rank") != NULL);
        CHECK_OK(c, herd_comm_issend(c, 1, 5, v, sizeof v, &r));
        CHECK_OK(c, herd_comm_wait(c, r));
        CHECK(c, c->bytes_sent == before + sizeof v);
    } else {
        sleep_s(0.05);
        int got[3] = {0, 0, 0};
        CHECK_OK(c, herd_comm_recv(c, 0, 5, got, sizeof got));
        CHECK(c, got[0] == 7 && got[1] == -1 && got[2] == 40000);
    }
    return 0;
}

static void test_p2p_issend(void) { RUN_RANKS(2, 10, body_issend, NULL); }

enum { MANY = 300 };

/* Every rank sends MANY messages to every other on tags i % 3 and has all
 * its receives outstanding at once. recv_first: the receives are posted
 * (barrier) before any send, so sends copy straight into them; otherwise
 * every message waits in the mailbox first. Receives are waited for in
 * reverse order. */
static int body_many(herd_comm *c, void *arg)
{
    bool recv_first = *(const bool *)arg;
    size_t n = c->size, me = c->rank, total = n * MANY;
    herd_req **rr = calloc(total, sizeof *rr), **sr = calloc(total, sizeof *sr);
    uint32_t(*in)[3] = calloc(total, sizeof *in), (*out)[3] = calloc(total, sizeof *out);
    CHECK(c, rr && sr && in && out);
    for (size_t p = 0; p < n; p++)
        for (size_t i = 0; i < MANY; i++) {
            out[p * MANY + i][0] = (uint32_t)me, out[p * MANY + i][1] = (uint32_t)p, out[p * MANY + i][2] = (uint32_t)i;
            in[p * MANY + i][0] = UINT32_MAX;
        }
    for (int phase = 0; phase < 2; phase++) {
        if (phase == 1)
            CHECK_OK(c, herd_comm_barrier(c));
        if ((phase == 0) == recv_first) {
            for (size_t p = 0; p < n; p++)
                for (size_t i = 0; p != me && i < MANY; i++)
                    CHECK_OK(c, herd_comm_irecv(c, p, (int)(i % 3), in[p * MANY + i], sizeof in[0], &rr[p * MANY + i]));
        } else {
            for (size_t i = 0; i < MANY; i++)
                for (size_t p = 0; p < n; p++)
                    if (p != me)
                        CHECK_OK(c, herd_comm_isend(c, p, (int)(i % 3), out[p * MANY + i], sizeof out[0],
                                                    &sr[p * MANY + i]));
        }
    }
    for (size_t k = 0; k < total; k++)
        if (sr[k])
            CHECK_OK(c, herd_comm_wait(c, sr[k]));
    for (size_t k = total; k-- > 0;)
        if (rr[k])
            CHECK_OK(c, herd_comm_wait(c, rr[k]));
    for (size_t p = 0; p < n; p++)
        for (size_t i = 0; p != me && i < MANY; i++) {
            const uint32_t *m = in[p * MANY + i];
            CHECK(c, m[0] == p && m[1] == me && m[2] == i); /* FIFO per (source, tag) */
        }
    CHECK(c, c->bytes_sent == (uint64_t)(n - 1) * MANY * sizeof out[0]);
    CHECK(c, c->bytes_recv == (uint64_t)(n - 1) * MANY * sizeof in[0]);
    free(rr), free(sr), free(in), free(out);
    return 0;
}

static void test_p2p_many_recv_first(void)
{
    bool recv_first = true;
    RUN_RANKS(4, 10, body_many, &recv_first);
}

static void test_p2p_many_send_first(void)
{
    bool recv_first = false;
    RUN_RANKS(4, 10, body_many, &recv_first);
}

/* Zero-byte messages (NULL buffers) are messages like any other, in order
 * with the others of their tag; a receive of the wrong length fails naming
 * both lengths, by either path (posted first or message first). */
static int body_zero_and_mismatch(herd_comm *c, void *arg)
{
    (void)arg;
    for (int recv_first = 0; recv_first < 2; recv_first++) {
        if (c->rank == 0) {
            if (recv_first)
                CHECK_OK(c, herd_comm_barrier(c));
            int v = 42;
            CHECK_OK(c, herd_comm_send(c, 1, 4, NULL, 0));
            CHECK_OK(c, herd_comm_send(c, 1, 4, &v, sizeof v));
            CHECK_OK(c, herd_comm_send(c, 1, 4, NULL, 0));
            CHECK_OK(c, herd_comm_send(c, 1, 6, NULL, 0)); /* received as 4 bytes */
            CHECK_OK(c, herd_comm_send(c, 1, 6, &v, sizeof v)); /* received as 0 bytes */
            if (!recv_first)
                CHECK_OK(c, herd_comm_barrier(c));
        } else {
            herd_req *r[5];
            int v = 0, w = 0;
            if (!recv_first)
                CHECK_OK(c, herd_comm_barrier(c));
            CHECK_OK(c, herd_comm_irecv(c, 0, 4, NULL, 0, &r[0]));
            CHECK_OK(c, herd_comm_irecv(c, 0, 4, &v, sizeof v, &r[1]));
            CHECK_OK(c, herd_comm_irecv(c, 0, 4, NULL, 0, &r[2]));
            CHECK_OK(c, herd_comm_irecv(c, 0, 6, &w, sizeof w, &r[3]));
            CHECK_OK(c, herd_comm_irecv(c, 0, 6, NULL, 0, &r[4]));
            if (recv_first)
                CHECK_OK(c, herd_comm_barrier(c));
            for (int i = 0; i < 3; i++)
                CHECK_OK(c, herd_comm_wait(c, r[i]));
            CHECK(c, v == 42);
            CHECK_ST(c, herd_comm_wait(c, r[3]), HERD_EINVAL);
            CHECK_MSG(c, "expected 4 bytes from rank 0 (tag 6), got 0");
            CHECK_ST(c, herd_comm_wait(c, r[4]), HERD_EINVAL);
            CHECK_MSG(c, "expected 0 bytes from rank 0 (tag 6), got 4");
        }
    }
    return 0;
}

static void test_p2p_zero_bytes_and_mismatch(void) { RUN_RANKS(2, 10, body_zero_and_mismatch, NULL); }

/* A 3 MiB + 3 byte message arrives intact by both paths, and herd_comm_test
 * sees it complete. */
static int body_large(herd_comm *c, void *arg)
{
    (void)arg;
    size_t bytes = (3u << 20) + 3;
    unsigned char *b = malloc(bytes);
    CHECK(c, b != NULL);
    for (int recv_first = 0; recv_first < 2; recv_first++) {
        if (c->rank == 0) {
            for (size_t i = 0; i < bytes; i++)
                b[i] = (unsigned char)(i * 7 + (size_t)recv_first);
            if (recv_first)
                CHECK_OK(c, herd_comm_barrier(c));
            CHECK_OK(c, herd_comm_send(c, 1, 0, b, bytes));
            if (!recv_first)
                CHECK_OK(c, herd_comm_barrier(c));
        } else {
            memset(b, 0, bytes);
            herd_req *r;
            bool done = false;
            if (!recv_first)
                CHECK_OK(c, herd_comm_barrier(c));
            CHECK_OK(c, herd_comm_irecv(c, 0, 0, b, bytes, &r));
            if (recv_first)
                CHECK_OK(c, herd_comm_barrier(c));
            double deadline = herd__now() + 5;
            while (!done && herd__now() < deadline) {
                CHECK_OK(c, herd_comm_test(c, r, &done));
                if (!done)
                    sleep_s(0.001);
            }
            CHECK(c, done);
            for (size_t i = 0; i < bytes; i++)
                if (b[i] != (unsigned char)(i * 7 + (size_t)recv_first))
                    CHECK(c, b[i] == (unsigned char)(i * 7 + (size_t)recv_first));
        }
    }
    free(b);
    return 0;
}

static void test_p2p_large(void) { RUN_RANKS(2, 10, body_large, NULL); }

/* A receive nobody sends to times out within the timeout, naming the peer
 * and tag; it is withdrawn, so a later message goes to a later receive.
 * A barrier that not everyone reaches times out the same way, and the
 * barrier works again afterwards. */
static int body_timeouts(herd_comm *c, void *arg)
{
    (void)arg;
    if (c->rank == 0) {
        c->timeout_s = 0.2;
        float x = 0;
        double t0 = herd__now();
        CHECK_ST(c, herd_comm_recv(c, 1, 5, &x, sizeof x), HERD_ETIMEOUT);
        double dt = herd__now() - t0;
        CHECK(c, dt >= 0.19 && dt < 2.0);
        CHECK(c, c->wait_s >= 0.19);
        CHECK_MSG(c, "rank 0: timed out after 0.2 s waiting for a message from rank 1 (tag 5)");
        CHECK_ST(c, herd_comm_barrier(c), HERD_ETIMEOUT);
        CHECK_MSG(c, "in a barrier: nothing yet from rank 1 (1 of 2 ranks arrived)");
        c->timeout_s = 10;
        CHECK_OK(c, herd_comm_send(c, 1, 1, NULL, 0)); /* rank 1 may go on */
        CHECK_OK(c, herd_comm_recv(c, 1, 5, &x, sizeof x));
        CHECK(c, x == 7.0f);
        CHECK_OK(c, herd_comm_barrier(c));
    } else {
        float x = 7;
        CHECK_OK(c, herd_comm_recv(c, 0, 1, NULL, 0));
        CHECK_OK(c, herd_comm_send(c, 0, 5, &x, sizeof x));
        CHECK_OK(c, herd_comm_barrier(c));
    }
    return 0;
}

static void test_timeouts(void) { RUN_RANKS(2, 10, body_timeouts, NULL); }

/* A window lock that another rank holds times out naming the target. */
static int body_lock_timeout(herd_comm *c, void *arg)
{
    (void)arg;
    float x[4] = {0};
    herd_win *w;
    CHECK_OK(c, herd_comm_win_create(c, x, sizeof x, &w));
    if (c->rank == 0)
        CHECK_OK(c, herd_comm_win_lock(c, w, 0, true));
    CHECK_OK(c, herd_comm_barrier(c));
    if (c->rank == 1) {
        c->timeout_s = 0.2;
        CHECK_ST(c, herd_comm_win_lock(c, w, 0, false), HERD_ETIMEOUT);
        CHECK_MSG(c, "rank 1: timed out after 0.2 s locking rank 0's window");
        CHECK_ST(c, herd_comm_win_lock(c, w, 0, true), HERD_ETIMEOUT);
        c->timeout_s = 10;
    }
    CHECK_OK(c, herd_comm_barrier(c));
    if (c->rank == 0)
        CHECK_OK(c, herd_comm_win_unlock(c, w, 0));
    else { /* released: both kinds can be had again */
        CHECK_OK(c, herd_comm_win_lock(c, w, 0, false));
        CHECK_OK(c, herd_comm_win_unlock(c, w, 0));
        CHECK_OK(c, herd_comm_win_lock(c, w, 0, true));
        CHECK_OK(c, herd_comm_win_unlock(c, w, 0));
    }
    CHECK_OK(c, herd_comm_win_free(c, w));
    return 0;
}

static void test_lock_timeout(void) { RUN_RANKS(2, 10, body_lock_timeout, NULL); }

/* herd_threads_world_fail(w, 3) wakes a rank blocked in a receive, ranks in
 * a barrier and one waiting for a window lock: each gets HERD_EREMOTE
 * naming rank 3, long before its 30 s timeout. */
typedef struct fail_ctx {
    atomic_int blocking; /* ranks about to block */
} fail_ctx;

static int body_fail(herd_comm *c, void *arg)
{
    fail_ctx *f = arg;
    float x[2] = {0};
    herd_win *w;
    CHECK_OK(c, herd_comm_win_create(c, x, sizeof x, &w));
    if (c->rank == 1)
        CHECK_OK(c, herd_comm_win_lock(c, w, 1, true));
    CHECK_OK(c, herd_comm_barrier(c));
    double t0 = herd__now();
    atomic_fetch_add(&f->blocking, 1);
    if (c->rank == 0) {
        CHECK_ST(c, herd_comm_recv(c, 1, 3, x, sizeof x[0]), HERD_EREMOTE);
        CHECK_MSG(c, "worker 3 failed");
        CHECK_MSG(c, "from rank 1 (tag 3)");
        herd_req *r; /* later waits fail at once; so does a test */
        bool done = false;
        CHECK_OK(c, herd_comm_irecv(c, 1, 3, x, sizeof x[0], &r));
        CHECK_ST(c, herd_comm_test(c, r, &done), HERD_EREMOTE);
        CHECK(c, done);
    } else if (c->rank == 2) {
        CHECK_ST(c, herd_comm_win_lock(c, w, 1, false), HERD_EREMOTE);
        CHECK_MSG(c, "worker 3 failed (while locking rank 1's window)");
    } else {
        CHECK_ST(c, herd_comm_barrier(c), HERD_EREMOTE); /* ranks 1 and 3: rank 0 never comes */
        CHECK_MSG(c, "worker 3 failed");
    }
    CHECK(c, herd__now() - t0 < 5);
    CHECK_ST(c, herd_comm_barrier(c), HERD_EREMOTE);
    if (c->rank == 1)
        CHECK_OK(c, herd_comm_win_unlock(c, w, 1));
    CHECK_ST(c, herd_comm_win_free(c, w), HERD_EREMOTE); /* the world frees the window */
    return 0;
}

static void fail_when_blocked(herd_world *w, void *arg)
{
    fail_ctx *f = arg;
    while (atomic_load(&f->blocking) < 4)
        sleep_s(0.001);
    sleep_s(0.05); /* let them block */
    herd_world_fail(w, 3); /* the engine's fail hook: herd_threads_world_fail */
    herd_world_fail(w, 1); /* the first failure is the one named */
}

static void test_world_fail(void)
{
    fail_ctx f;
    atomic_init(&f.blocking, 0);
    run_ranks_at(__FILE__, __LINE__, "threads", 4, 30, body_fail, &f, fail_when_blocked);
}

/* Bad arguments are HERD_EINVAL with a message naming the argument, and
 * nothing is started. */
static void test_argument_errors(void)
{
    herd_threads_world *w;
    herd_comm *c, *solo;
    herd_err err = {0};
    ASSERT_EQ_INT(herd_threads_world_create(0, &w, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "nworkers");
    ASSERT_OK(herd_threads_world_create(2, &w, NULL));
    ASSERT_EQ_INT(herd_comm_threads_create(w, 2, &c, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "rank 2");
    ASSERT_OK(herd_comm_threads_create(w, 0, &c, NULL));
    ASSERT_TRUE(c->timeout_s == 60);
    ASSERT_TRUE(strcmp(c->ops->name, "threads") == 0);
    herd_req *r = NULL;
    float x = 1, out[2];
    bool done;
    ASSERT_EQ_INT(herd_comm_isend(c, 2, 0, &x, sizeof x, &r), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "isend: peer 2 is not a rank (size 2)");
    ASSERT_EQ_INT(herd_comm_irecv(c, SIZE_MAX, 0, &x, sizeof x, &r), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "irecv: peer");
    ASSERT_EQ_INT(herd_comm_isend(c, 1, 0, NULL, 4, &r), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "isend: buf is NULL for 4 bytes");
    ASSERT_EQ_INT(herd_comm_irecv(c, 1, 0, &x, sizeof x, NULL), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "irecv: req is NULL");
    ASSERT_EQ_INT(herd_comm_send(c, 1, -1, &x, sizeof x), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "tag -1");
    ASSERT_EQ_INT(herd_comm_wait(c, NULL), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "wait: req");
    ASSERT_EQ_INT(herd_comm_test(c, NULL, &done), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "test: req");
    ASSERT_EQ_INT(herd_comm_win_create(c, NULL, 8, NULL), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "win_create: base");
    ASSERT_EQ_INT(herd_comm_win_lock(c, NULL, 0, true), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "win_lock: win is NULL");
    herd_allreduce_opts bad = {.wire = (herd_dtype)7};
    ASSERT_EQ_INT(herd_allreduce(c, &x, 1, &bad), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "wire");
    ASSERT_EQ_INT(herd_allreduce(c, NULL, 3, NULL), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "allreduce: buf");
    ASSERT_EQ_INT(herd_broadcast(c, &x, sizeof x, 2), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "root 2");
    ASSERT_EQ_INT(herd_allgather(c, &x, NULL, sizeof x), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "allgather: out");
    ASSERT_TRUE(c->bytes_sent == 0 && c->bytes_recv == 0);
    (void)out;
    herd_comm_free(c);
    herd_threads_world_free(w);

    /* windows, on a world of one (win_create needs every rank) */
    ASSERT_OK(herd_threads_world_create(1, &w, NULL));
    ASSERT_OK(herd_comm_threads_create(w, 0, &solo, NULL));
    float buf[4] = {1, 2, 3, 4};
    herd_win *win;
    ASSERT_OK(herd_comm_win_create(solo, buf, sizeof buf, &win));
    ASSERT_EQ_INT(herd_comm_win_get(solo, win, 0, 0, out, sizeof out), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(solo), "not locked");
    ASSERT_EQ_INT(herd_comm_win_unlock(solo, win, 0), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(solo), "holds no lock");
    ASSERT_EQ_INT(herd_comm_win_lock(solo, win, 1, true), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(solo), "win_lock: target 1 is not a rank");
    ASSERT_OK(herd_comm_win_lock(solo, win, 0, true));
    ASSERT_EQ_INT(herd_comm_win_lock(solo, win, 0, false), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(solo), "already holds");
    ASSERT_EQ_INT(herd_comm_win_get(solo, win, 0, 0, NULL, 4), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(solo), "win_get: dst is NULL");
    ASSERT_EQ_INT(herd_comm_win_accumulate(solo, win, 0, 0, NULL, 1), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(solo), "win_accumulate: src");
    ASSERT_EQ_INT(herd_comm_win_accumulate(solo, win, 0, 0, buf, SIZE_MAX / 2), HERD_EINVAL);
    ASSERT_EQ_INT(herd_comm_win_accumulate(solo, win, 0, 2, buf, 1), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(solo), "float-aligned");
    ASSERT_OK(herd_comm_win_unlock(solo, win, 0));
    ASSERT_OK(herd_comm_win_free(solo, win));
    herd_comm_free(solo);
    herd_threads_world_free(w);
}

/* ---- barrier and windows ------------------------------------------ */

enum { BARRIER_ROUNDS = 40 };

typedef struct barrier_ctx {
    atomic_size_t arrived[BARRIER_ROUNDS];
} barrier_ctx;

/* Nobody leaves round k's barrier before all have arrived at it. */
static int body_barrier(herd_comm *c, void *arg)
{
    barrier_ctx *b = arg;
    for (size_t k = 0; k < BARRIER_ROUNDS; k++) {
        atomic_fetch_add(&b->arrived[k], 1);
        CHECK_OK(c, herd_comm_barrier(c));
        CHECK(c, atomic_load(&b->arrived[k]) == c->size);
    }
    return 0;
}

static void test_barrier_16(void)
{
    barrier_ctx b;
    for (size_t k = 0; k < BARRIER_ROUNDS; k++)
        atomic_init(&b.arrived[k], 0);
    RUN_RANKS(16, 10, body_barrier, &b);
}

enum { ACC_ROUNDS = 20, ACC_LEN = 64 };

/* Every rank adds (r+1)*(i+1) into rank 0's window ACC_ROUNDS times under
 * an exclusive lock, and also bumps a counter by get + put (a lost update
 * if two writers ever held the lock at once); then the same adds under
 * shared locks, which must be atomic per element. Integer values: exact. */
static int body_accumulate(herd_comm *c, void *arg)
{
    (void)arg;
    size_t n = c->size;
    float *mine = NULL;
    if (c->rank == 0) {
        mine = calloc(ACC_LEN + 1, sizeof *mine);
        CHECK(c, mine != NULL);
    }
    herd_win *w;
    CHECK_OK(c, herd_comm_win_create(c, mine, c->rank == 0 ? (ACC_LEN + 1) * sizeof(float) : 0, &w));
    float add[ACC_LEN];
    for (size_t i = 0; i < ACC_LEN; i++)
        add[i] = (float)((c->rank + 1) * (i + 1));
    for (int shared = 0; shared < 2; shared++) {
        for (int k = 0; k < ACC_ROUNDS; k++) {
            CHECK_OK(c, herd_comm_win_lock(c, w, 0, !shared));
            CHECK_OK(c, herd_comm_win_accumulate(c, w, 0, 0, add, ACC_LEN));
            if (!shared) {
                float counter;
                CHECK_OK(c, herd_comm_win_get(c, w, 0, ACC_LEN * sizeof(float), &counter, sizeof counter));
                counter += 1;
                CHECK_OK(c, herd_comm_win_put(c, w, 0, ACC_LEN * sizeof(float), &counter, sizeof counter));
            }
            CHECK_OK(c, herd_comm_win_unlock(c, w, 0));
        }
        CHECK_OK(c, herd_comm_barrier(c));
        if (c->rank == 0) {
            double ranks = (double)(n * (n + 1) / 2);
            for (size_t i = 0; i < ACC_LEN; i++)
                CHECK(c, mine[i] == (float)(ranks * (double)(i + 1) * ACC_ROUNDS * (shared + 1)));
            CHECK(c, mine[ACC_LEN] == (float)(n * ACC_ROUNDS));
        }
        CHECK_OK(c, herd_comm_barrier(c));
    }
    CHECK_OK(c, herd_comm_win_free(c, w));
    free(mine);
    return 0;
}

static void test_win_accumulate(void) { RUN_RANKS(16, 20, body_accumulate, NULL); }

/* Rank r exposes n + r floats. Every rank puts r*100 + t at float r of
 * every target t, then reads every window back under shared locks, all of
 * which are held at once across a barrier. Accesses past the end of the
 * target's own size are rejected, without overflow for huge offsets. */
static int body_get_put(herd_comm *c, void *arg)
{
    (void)arg;
    size_t n = c->size, me = c->rank, len = n + me;
    float *mine = calloc(len, sizeof *mine), *got = calloc(2 * n, sizeof *got);
    CHECK(c, mine && got);
    herd_win *w;
    CHECK_OK(c, herd_comm_win_create(c, mine, len * sizeof(float), &w));
    for (size_t t = 0; t < n; t++) {
        float v = (float)(me * 100 + t);
        CHECK_OK(c, herd_comm_win_lock(c, w, t, true));
        CHECK_OK(c, herd_comm_win_put(c, w, t, me * sizeof(float), &v, sizeof v));
        CHECK_OK(c, herd_comm_win_unlock(c, w, t));
    }
    CHECK_OK(c, herd_comm_barrier(c));
    for (size_t t = 0; t < n; t++)
        CHECK_OK(c, herd_comm_win_lock(c, w, t, false));
    CHECK_OK(c, herd_comm_barrier(c)); /* every rank holds a shared lock on every window */
    for (size_t t = 0; t < n; t++) {
        size_t tlen = (n + t) * sizeof(float);
        CHECK_OK(c, herd_comm_win_get(c, w, t, 0, got, tlen));
        for (size_t r = 0; r < n; r++)
            CHECK(c, got[r] == (float)(r * 100 + t));
        CHECK_OK(c, herd_comm_win_get(c, w, t, tlen, got, 0)); /* at the end, nothing: fine */
        CHECK_ST(c, herd_comm_win_get(c, w, t, tlen - 2, got, 4), HERD_EINVAL);
        CHECK_MSG(c, "past the end of rank");
        CHECK_ST(c, herd_comm_win_get(c, w, t, SIZE_MAX - 1, got, 4), HERD_EINVAL);
        CHECK_ST(c, herd_comm_win_put(c, w, t, 0, got, tlen + 1), HERD_EINVAL);
        CHECK_ST(c, herd_comm_win_accumulate(c, w, t, tlen - 4, got, 2), HERD_EINVAL);
        CHECK_ST(c, herd_comm_win_accumulate(c, w, t, SIZE_MAX - 3, got, 1), HERD_EINVAL);
    }
    for (size_t t = 0; t < n; t++)
        CHECK_OK(c, herd_comm_win_unlock(c, w, t));
    CHECK(c, c->bytes_sent == n * sizeof(float));
    CHECK_OK(c, herd_comm_win_free(c, w));
    free(mine), free(got);
    return 0;
}

static void test_win_get_put(void) { RUN_RANKS(5, 10, body_get_put, NULL); }

/* Windows are not a fixed pool: hundreds can be created and freed, and a
 * window freed with a lock still held releases it. */
static int body_many_windows(herd_comm *c, void *arg)
{
    (void)arg;
    for (int k = 0; k < 300; k++) {
        float v = (float)(k * 10 + (int)c->rank), got = -1;
        herd_win *w;
        CHECK_OK(c, herd_comm_win_create(c, &v, sizeof v, &w));
        size_t t = (c->rank + 1) % c->size;
        CHECK_OK(c, herd_comm_win_lock(c, w, t, false));
        CHECK_OK(c, herd_comm_win_get(c, w, t, 0, &got, sizeof got));
        CHECK(c, got == (float)(k * 10 + (int)t));
        if (k % 2)
            CHECK_OK(c, herd_comm_win_unlock(c, w, t));
        CHECK_OK(c, herd_comm_win_free(c, w));
    }
    return 0;
}

static void test_many_windows(void) { RUN_RANKS(3, 10, body_many_windows, NULL); }

/* herd_comm_win_blend (a get, a flush and an accumulate on this engine)
 * with epochs ended by win_unlock_begin: every rank moves rank 0's floats,
 * 0 at first, halfway toward 1024 under the exclusive lock; in whatever
 * order, they end at 1024 (1 - 2^-n) and each 1024 (1 - 2^-j), j < n, is
 * read by exactly one rank. */
static int body_blend(herd_comm *c, void *arg)
{
    (void)arg;
    enum { N = 100 };
    size_t n = c->size;
    float mem[N] = {0}, src[N], got[N], all[16];
    herd_win *w;
    for (size_t i = 0; i < N; i++)
        src[i] = 1024.0f, got[i] = -1.0f;
    CHECK_OK(c, herd_comm_win_create(c, mem, c->rank == 0 ? sizeof mem : 0, &w));
    CHECK_OK(c, herd_comm_win_lock(c, w, 0, true));
    CHECK_OK(c, herd_comm_win_blend(c, w, 0, 0, src, N, 0.5f, got));
    CHECK_OK(c, herd_comm_win_unlock_begin(c, w, 0));
    CHECK_OK(c, herd_comm_win_wait(c, w));
    for (size_t i = 1; i < N; i++)
        CHECK(c, got[i] == got[0]);
    CHECK_OK(c, herd_allgather(c, got, all, sizeof *got));
    for (size_t j = 0; j < n; j++) {
        size_t hits = 0;
        for (size_t r = 0; r < n; r++)
            hits += all[r] == 1024.0f - ldexpf(1024.0f, -(int)j);
        CHECK(c, hits == 1);
    }
    CHECK_OK(c, herd_comm_barrier(c));
    for (size_t i = 0; i < N && c->rank == 0; i++)
        CHECK(c, mem[i] == 1024.0f - ldexpf(1024.0f, -(int)n));
    CHECK_OK(c, herd_comm_win_free(c, w));
    return 0;
}

/* herd_comm_win_heavy_ball by parts (this engine): every rank takes one
 * step, upd 1 and mu 1/2, of rank 0's momentum v and weights x; in any
 * order v ends at -2 + 2^(1-n) and x at -2n + 2 - 2^(1-n), exactly. */
static int body_heavy_ball(herd_comm *c, void *arg)
{
    (void)arg;
    enum { N = 100 };
    size_t n = c->size;
    float mem[2 * N] = {0}, upd[N];
    herd_win *w;
    for (size_t i = 0; i < N; i++)
        upd[i] = 1.0f;
    CHECK_OK(c, herd_comm_win_create(c, mem, c->rank == 0 ? sizeof mem : 0, &w));
    CHECK_OK(c, herd_comm_win_lock(c, w, 0, true));
    CHECK(c, herd_comm_win_heavy_ball(c, w, 0, 4, 0, upd, N, 0.5f) == HERD_EINVAL); /* v and x overlap */
    CHECK_OK(c, herd_comm_win_heavy_ball(c, w, 0, 0, N * sizeof(float), upd, N, 0.5f));
    CHECK_OK(c, herd_comm_win_unlock_begin(c, w, 0));
    CHECK_OK(c, herd_comm_win_wait(c, w));
    CHECK_OK(c, herd_comm_barrier(c));
    float v = -2.0f + ldexpf(1.0f, 1 - (int)n), x = -2.0f * (float)n + 2.0f - ldexpf(1.0f, 1 - (int)n);
    for (size_t i = 0; i < N && c->rank == 0; i++)
        CHECK(c, mem[i] == v && mem[N + i] == x);
    CHECK_OK(c, herd_comm_win_free(c, w));
    return 0;
}

static void test_win_heavy_ball(void)
{
    RUN_RANKS(1, 10, body_heavy_ball, NULL);
    RUN_RANKS(6, 10, body_heavy_ball, NULL);
    RUN_RANKS(16, 20, body_heavy_ball, NULL);
}

static void test_win_blend(void)
{
    RUN_RANKS(1, 10, body_blend, NULL);
    RUN_RANKS(5, 10, body_blend, NULL);
    RUN_RANKS(16, 20, body_blend, NULL);
}

/* ---- allreduce ---------------------------------------------------- */

static float f_int(size_t i) { return (float)(i % 23) - 11.0f; }

static const size_t world_sizes[] = {1, 2, 3, 4, 5, 8, 16};

typedef struct ar_ctx {
    size_t segment_bytes;
    herd_dtype wire;
    herd_allreduce_impl impl;
    size_t counts[8], ncounts;
} ar_ctx;

static void sweep_counts(ar_ctx *a, size_t n)
{
    size_t counts[] = {0, 1, n - 1, n, n + 1, 1000, 100003};
    a->ncounts = sizeof counts / sizeof counts[0];
    memcpy(a->counts, counts, sizeof counts);
}

/* fp32 wire: every rank ends with exactly n(n+1)/2 * f(i). */
static int body_allreduce_exact(herd_comm *c, void *arg)
{
    const ar_ctx *a = arg;
    size_t n = c->size;
    for (size_t k = 0; k < a->ncounts; k++) {
        size_t count = a->counts[k];
        float *buf = malloc((count ? count : 1) * sizeof *buf);
        CHECK(c, buf != NULL);
        for (size_t i = 0; i < count; i++)
            buf[i] = (float)(c->rank + 1) * f_int(i);
        herd_allreduce_opts o = {.segment_bytes = a->segment_bytes, .wire = a->wire, .impl = a->impl};
        CHECK_OK(c, herd_allreduce(c, buf, count, &o));
        float k_sum = (float)(n * (n + 1) / 2);
        for (size_t i = 0; i < count; i++)
            if (buf[i] != k_sum * f_int(i)) {
                fprintf(stderr, "  n=%zu count=%zu seg=%zu: elem %zu is %.9g, want %.9g\n", n, count,
                        a->segment_bytes, i, (double)buf[i], (double)(k_sum * f_int(i)));
                CHECK(c, buf[i] == k_sum * f_int(i));
            }
        free(buf);
    }
    return 0;
}

static void sweep_exact(size_t segment_bytes, herd_allreduce_impl impl)
{
    for (size_t s = 0; s < sizeof world_sizes / sizeof world_sizes[0]; s++) {
        ar_ctx a = {.segment_bytes = segment_bytes, .wire = HERD_F32, .impl = impl};
        sweep_counts(&a, world_sizes[s]);
        RUN_RANKS(world_sizes[s], 20, body_allreduce_exact, &a);
    }
}

static void test_allreduce_f32_default_segments(void) { sweep_exact(0, HERD_ALLREDUCE_RING); }
static void test_allreduce_f32_64_byte_segments(void) { sweep_exact(64, HERD_ALLREDUCE_RING); }
static void test_allreduce_f32_odd_segments(void) { sweep_exact(1000 * 4 + 4, HERD_ALLREDUCE_RING); } /* chunks end mid-segment */
/* The threads engine's own allreduce (shared memory): the same closed form. */
static void test_allreduce_native_exact(void) { sweep_exact(4096, HERD_ALLREDUCE_NATIVE); }

/* 16-bit wires. Rank r contributes x_r(i) = (r+1) g(i) with |g(i)| in
 * [1/16, 1], the same sign on every rank, so no value or partial sum is
 * subnormal or overflows in fp16.
 *
 * The bound: each element's sum travels the ring once: n-1 hops of the
 * reduce-scatter, each rounding the partial sum to the wire type (relative
 * error at most u = 2^-11 for fp16, 2^-8 for bf16, round to nearest) and
 * adding the next rank's part in fp32 (at most 2^-24), then one more
 * rounding when the owner converts the sum for the all-gather, which
 * copies it unchanged. So the result is sum_r x_r prod(1 + d), with at most
 * n wire roundings and n-1 fp32 roundings in each product, and
 *   |result - sum_r x_r| <= ((1+u)^n (1+2^-24)^(n-1) - 1) * sum_r |x_r|
 * about n*u relative: 4.9e-4 per hop for fp16 (7.8e-3 at 16 ranks), 3.9e-3
 * per hop for bf16. All ranks must also hold the same bits. */
static double wire_bound(herd_dtype wire, size_t n)
{
    double u = wire == HERD_F16 ? ldexp(1, -11) : ldexp(1, -8);
    return pow(1 + u, (double)n) * pow(1 + ldexp(1, -24), (double)n - 1) - 1;
}

/* k / 2^16 with k in [2^12, 2^16]: 17 significant bits, so (r+1) g(i) is
 * exact in fp32 for r < 16, and so is the reference sum in double. */
static float g_frac(size_t i)
{
    uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    float g = (float)(4096 + (h >> 40) % 61441) / 65536.0f;
    return (h >> 7) & 1 ? -g : g;
}

typedef struct wire_ctx {
    ar_ctx a;
    float **results; /* per rank, per count: kept for the bit-identity check */
    double worst;    /* the largest error seen, as a fraction of the bound */
    pthread_mutex_t mu;
} wire_ctx;

static int body_allreduce_wire(herd_comm *c, void *arg)
{
    wire_ctx *x = arg;
    size_t n = c->size;
    double bound = wire_bound(x->a.wire, n), worst = 0;
    for (size_t k = 0; k < x->a.ncounts; k++) {
        size_t count = x->a.counts[k];
        float *buf = x->results[c->rank * x->a.ncounts + k];
        for (size_t i = 0; i < count; i++)
            buf[i] = (float)(c->rank + 1) * g_frac(i);
        herd_allreduce_opts o = {.segment_bytes = x->a.segment_bytes, .wire = x->a.wire};
        CHECK_OK(c, herd_allreduce(c, buf, count, &o));
        for (size_t i = 0; i < count; i++) {
            double exact = (double)(n * (n + 1) / 2) * (double)g_frac(i), mag = fabs(exact);
            double err = fabs((double)buf[i] - exact);
            if (err / (bound * mag) > worst)
                worst = err / (bound * mag);
            if (!(err <= bound * mag)) {
                fprintf(stderr, "  n=%zu count=%zu elem %zu: %.9g, want %.9g +- %.3g\n", n, count, i,
                        (double)buf[i], exact, bound * mag);
                CHECK(c, err <= bound * mag);
            }
        }
    }
    pthread_mutex_lock(&x->mu);
    if (worst > x->worst)
        x->worst = worst;
    pthread_mutex_unlock(&x->mu);
    return 0;
}

static void sweep_wire(herd_dtype wire, size_t segment_bytes)
{
    double worst = 0;
    for (size_t s = 0; s < sizeof world_sizes / sizeof world_sizes[0]; s++) {
        size_t n = world_sizes[s];
        wire_ctx x = {.a = {.segment_bytes = segment_bytes, .wire = wire}};
        pthread_mutex_init(&x.mu, NULL);
        size_t counts[] = {1, n + 1, 1000, 100003};
        x.a.ncounts = sizeof counts / sizeof counts[0];
        memcpy(x.a.counts, counts, sizeof counts);
        x.results = calloc(n * x.a.ncounts, sizeof *x.results);
        ASSERT_TRUE(x.results != NULL);
        for (size_t i = 0; i < n * x.a.ncounts; i++) {
            x.results[i] = malloc(x.a.counts[i % x.a.ncounts] * sizeof(float));
            ASSERT_TRUE(x.results[i] != NULL);
        }
        RUN_RANKS(n, 20, body_allreduce_wire, &x);
        for (size_t r = 1; r < n; r++) /* every rank holds the same bits */
            for (size_t k = 0; k < x.a.ncounts; k++)
                if (memcmp(x.results[r * x.a.ncounts + k], x.results[k], x.a.counts[k] * sizeof(float)) != 0)
                    herd_test_fail(__FILE__, __LINE__, "n=%zu count=%zu: rank %zu differs from rank 0", n,
                                   x.a.counts[k], r);
        for (size_t i = 0; i < n * x.a.ncounts; i++)
            free(x.results[i]);
        free(x.results);
        pthread_mutex_destroy(&x.mu);
        if (x.worst > worst)
            worst = x.worst;
    }
    /* the bound is not vacuous: rounding does show up, within it */
    ASSERT_TRUE(worst > 0.01 && worst <= 1);
}

static void test_allreduce_f16(void) { sweep_wire(HERD_F16, 0); }
static void test_allreduce_f16_small_segments(void) { sweep_wire(HERD_F16, 64); }
static void test_allreduce_bf16(void) { sweep_wire(HERD_BF16, 200); }

/* The same inputs give the same bits run after run, and bytes_sent is the
 * ring's 2(n-1)/n of the buffer. */
static int body_allreduce_repeat(herd_comm *c, void *arg)
{
    (void)arg;
    size_t count = 10007, n = c->size;
    float *a = malloc(count * sizeof *a), *b = malloc(count * sizeof *b);
    CHECK(c, a && b);
    for (int rep = 0; rep < 2; rep++) {
        float *buf = rep ? b : a;
        for (size_t i = 0; i < count; i++)
            buf[i] = g_frac(i * (c->rank + 3));
        uint64_t sent0 = c->bytes_sent;
        herd_allreduce_opts o = {.segment_bytes = 512, .impl = HERD_ALLREDUCE_RING};
        CHECK_OK(c, herd_allreduce(c, buf, count, &o));
        uint64_t sent = c->bytes_sent - sent0, ideal = 2 * (n - 1) * count * sizeof(float) / n;
        CHECK(c, sent + 2 * n * sizeof(float) >= ideal && sent <= ideal + 2 * n * sizeof(float));
    }
    CHECK(c, memcmp(a, b, count * sizeof *a) == 0);
    free(a), free(b);
    return 0;
}

static void test_allreduce_repeatable(void) { RUN_RANKS(6, 10, body_allreduce_repeat, NULL); }

/* The threads engine's own allreduce sums in rank order: on inexact floats
 * every rank ends with exactly ((x_0 + x_1) + x_2) + ..., the bits of that
 * serial sum, three calls in a row on the same buffer, and counts as sent
 * what the others read of its buffer, 2(n-1)/n of it give or take 2 lines. */
static float h_val(size_t rank, size_t i) { return g_frac(i * (rank + 3) + 1) * (rank % 2 ? -1.37f : 0.71f); }

static int body_native_rank_order(herd_comm *c, void *arg)
{
    (void)arg;
    size_t n = c->size, counts[] = {1, 15, 17, 4099, 70001};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        size_t count = counts[k];
        float *buf = malloc(count * sizeof *buf);
        CHECK(c, buf != NULL);
        for (int rep = 0; rep < 3; rep++) {
            for (size_t i = 0; i < count; i++)
                buf[i] = h_val(c->rank, i);
            uint64_t sent0 = c->bytes_sent;
            herd_allreduce_opts o = {.impl = HERD_ALLREDUCE_NATIVE};
            CHECK_OK(c, herd_allreduce(c, buf, count, &o));
            for (size_t i = 0; i < count; i++) {
                float want = h_val(0, i);
                for (size_t j = 1; j < n; j++)
                    want += h_val(j, i);
                CHECK(c, memcmp(&buf[i], &want, sizeof want) == 0);
            }
            uint64_t sent = c->bytes_sent - sent0, ideal = 2 * (n - 1) * count * sizeof(float) / n;
            uint64_t line = 2 * (n - 1) * 32 * sizeof(float); /* chunks are whole lines */
            CHECK(c, n == 1 || (sent + line >= ideal && sent <= ideal + line));
        }
        free(buf);
    }
    return 0;
}

static void test_allreduce_native_rank_order(void)
{
    for (size_t s = 0; s < sizeof world_sizes / sizeof world_sizes[0]; s++)
        RUN_RANKS(world_sizes[s], 20, body_native_rank_order, NULL);
}

/* opts.scale, opts.nonfinite and opts.input_nonfinite, on herd's ring and
 * the engine's own: the result has exactly the bits of the plain sum times
 * the scale in a pass of its own, and every rank gets the same answer on the
 * result's finiteness: none for finite inputs; yes for a NaN or an Inf
 * placed on one rank at the start, the middle or the end of the buffer (so
 * in every rank's chunk in turn); yes for finite inputs whose sum overflows.
 * input_nonfinite: set on the rank whose input held the NaN or Inf, on no
 * other, and not for the overflow. */
typedef struct mean_ctx {
    herd_allreduce_impl impl;
} mean_ctx;

static int body_allreduce_mean_check(herd_comm *c, void *arg)
{
    const mean_ctx *a = arg;
    size_t n = c->size, counts[] = {1, 17, 4099, 70001};
    float scale = 1.0f / (float)n;
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        size_t count = counts[k];
        float *buf = malloc(count * sizeof *buf), *ref = malloc(count * sizeof *ref);
        CHECK(c, buf && ref);
        for (size_t i = 0; i < count; i++)
            ref[i] = buf[i] = h_val(c->rank, i);
        herd_allreduce_opts plain = {.impl = a->impl};
        CHECK_OK(c, herd_allreduce(c, ref, count, &plain));
        for (size_t i = 0; i < count; i++)
            ref[i] *= scale;
        bool bad = true, in_bad = false;
        herd_allreduce_opts o = {.impl = a->impl, .scale = scale, .nonfinite = &bad, .input_nonfinite = &in_bad};
        CHECK_OK(c, herd_allreduce(c, buf, count, &o));
        CHECK(c, memcmp(buf, ref, count * sizeof *buf) == 0);
        CHECK(c, !bad && !in_bad);
        /* one rank's NaN or Inf, wherever it is, reaches every rank's answer */
        size_t where[] = {0, count / 2, count - 1};
        for (size_t p = 0; p < 3; p++)
            for (int inf = 0; inf < 2; inf++) {
                for (size_t i = 0; i < count; i++)
                    buf[i] = h_val(c->rank, i);
                bool holder = c->rank == (p + (size_t)inf) % n;
                if (holder)
                    buf[where[p]] = inf ? INFINITY : NAN;
                bad = in_bad = false;
                CHECK_OK(c, herd_allreduce(c, buf, count, &o));
                CHECK(c, bad && in_bad == holder);
            }
        /* finite everywhere, but the sum overflows */
        for (size_t i = 0; i < count; i++)
            buf[i] = i == count / 2 ? FLT_MAX : 1.0f;
        bad = in_bad = false;
        CHECK_OK(c, herd_allreduce(c, buf, count, &o));
        CHECK(c, bad == (n > 1) && !in_bad);
        free(buf);
        free(ref);
    }
    return 0;
}

static void test_allreduce_mean_check(void)
{
    herd_allreduce_impl impls[] = {HERD_ALLREDUCE_RING, HERD_ALLREDUCE_NATIVE};
    for (size_t m = 0; m < 2; m++)
        for (size_t s = 0; s < sizeof world_sizes / sizeof world_sizes[0]; s++) {
            mean_ctx a = {.impl = impls[m]};
            RUN_RANKS(world_sizes[s], 20, body_allreduce_mean_check, &a);
        }
}

/* A rank that never joins the shared-memory allreduce: the others time out
 * with a message saying what they waited for, and nothing hangs. */
static int body_native_missing(herd_comm *c, void *arg)
{
    (void)arg;
    float buf[64] = {1};
    if (c->rank == 2)
        return 0;
    c->timeout_s = 0.2;
    herd_allreduce_opts o = {.impl = HERD_ALLREDUCE_NATIVE};
    CHECK_ST(c, herd_allreduce(c, buf, 64, &o), HERD_ETIMEOUT);
    CHECK_MSG(c, "timed out after 0.2 s in an allreduce, waiting for the other buffers: nothing yet from rank 2 (");
    return 0;
}

static void test_allreduce_native_missing_rank(void) { RUN_RANKS(3, 10, body_native_missing, NULL); }

/* Two worlds at once in one process, each with its own sums. */
typedef struct two_ctx {
    size_t n;
    float scale;
} two_ctx;

static int body_two(herd_comm *c, void *arg)
{
    const two_ctx *t = arg;
    float buf[777];
    for (int rep = 0; rep < 20; rep++) {
        for (size_t i = 0; i < 777; i++)
            buf[i] = t->scale * (float)(c->rank + 1) * f_int(i);
        herd_allreduce_opts o = {.segment_bytes = 256, .impl = HERD_ALLREDUCE_RING};
        CHECK_OK(c, herd_allreduce(c, buf, 777, &o));
        for (size_t i = 0; i < 777; i++)
            CHECK(c, buf[i] == t->scale * (float)(t->n * (t->n + 1) / 2) * f_int(i));
    }
    return 0;
}

static void *run_world(void *p)
{
    two_ctx *t = p;
    RUN_RANKS(t->n, 10, body_two, t);
    return NULL;
}

static void test_two_worlds(void)
{
    two_ctx a = {4, 1.0f}, b = {5, -2.0f};
    pthread_t th;
    ASSERT_OK(pthread_create(&th, NULL, run_world, &a));
    run_world(&b);
    pthread_join(th, NULL);
}

/* ---- broadcast and allgather -------------------------------------- */

static unsigned char pattern(size_t root, size_t i) { return (unsigned char)(root * 31 + i * 7 + (i >> 8)); }

/* From every root, for several sizes and segment sizes (many segments on
 * small buffers, and one 3 MiB buffer at the default 1 MiB segments). */
static int body_broadcast(herd_comm *c, void *arg)
{
    (void)arg;
    static const size_t cases[][2] = {{0, 0}, {1, 0}, {13, 0}, {1000, 7}, {100000, 1000}, {(3u << 20) + 5, 0}};
    size_t ncases = sizeof cases / sizeof cases[0];
    if (c->size > 5)
        ncases--; /* the big one at a few sizes only: the suite stays fast */
    for (size_t root = 0; root < c->size; root++)
        for (size_t k = 0; k < ncases; k++) {
            size_t bytes = cases[k][0];
            unsigned char *b = malloc(bytes ? bytes : 1);
            CHECK(c, b != NULL);
            for (size_t i = 0; i < bytes; i++)
                b[i] = c->rank == root ? pattern(root, i) : 0xee;
            CHECK_OK(c, herd__broadcast_seg(c, b, bytes, root, cases[k][1]));
            for (size_t i = 0; i < bytes; i++)
                if (b[i] != pattern(root, i)) {
                    fprintf(stderr, "  root %zu, %zu bytes: byte %zu\n", root, bytes, i);
                    CHECK(c, b[i] == pattern(root, i));
                }
            free(b);
        }
    float x = c->rank == 2 % c->size ? 2.5f : 0; /* the public entry */
    CHECK_OK(c, herd_broadcast(c, &x, sizeof x, 2 % c->size));
    CHECK(c, x == 2.5f);
    return 0;
}

static void test_broadcast(void)
{
    static const size_t sizes[] = {1, 2, 3, 5, 8, 16};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        RUN_RANKS(sizes[s], 20, body_broadcast, NULL);
}

static int body_allgather(herd_comm *c, void *arg)
{
    (void)arg;
    static const size_t sizes[] = {0, 1, 13, 4096};
    size_t n = c->size;
    for (size_t k = 0; k < 4; k++) {
        size_t bytes = sizes[k];
        unsigned char *in = malloc(bytes + 1), *out = malloc(n * bytes + 1);
        CHECK(c, in && out);
        for (size_t i = 0; i < bytes; i++)
            in[i] = pattern(c->rank, i);
        memset(out, 0xee, n * bytes);
        CHECK_OK(c, herd_allgather(c, in, out, bytes));
        for (size_t r = 0; r < n; r++)
            for (size_t i = 0; i < bytes; i++)
                CHECK(c, out[r * bytes + i] == pattern(r, i));
        memset(out, 0xee, n * bytes); /* in place: in is already our block of out */
        memcpy(out + c->rank * bytes, in, bytes);
        CHECK_OK(c, herd_allgather(c, out + c->rank * bytes, out, bytes));
        for (size_t r = 0; r < n; r++)
            for (size_t i = 0; i < bytes; i++)
                CHECK(c, out[r * bytes + i] == pattern(r, i));
        free(in), free(out);
    }
    return 0;
}

static void test_allgather(void)
{
    static const size_t sizes[] = {1, 2, 3, 5, 16};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        RUN_RANKS(sizes[s], 10, body_allgather, NULL);
}

/* ---- conversions --------------------------------------------------- */

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One value through the library's array conversions. */
static uint16_t to_16(herd_dtype t, float f)
{
    uint16_t h;
    (t == HERD_F16 ? herd_f32_to_f16 : herd_f32_to_bf16)(&f, &h, 1);
    return h;
}

static float of_16(herd_dtype t, uint16_t h)
{
    float f;
    (t == HERD_F16 ? herd_f16_to_f32 : herd_bf16_to_f32)(&h, &f, 1);
    return f;
}

#define to_f16(f) to_16(HERD_F16, (f))
#define of_f16(h) of_16(HERD_F16, (h))
#define to_bf16(f) to_16(HERD_BF16, (f))
#define of_bf16(h) of_16(HERD_BF16, (h))

/* A half's value from its fields, in double: the reference. */
static double half_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

/* Every one of the 65536 halves: its value matches the fields, and it
 * survives f16 -> f32 -> f16 exactly (NaNs stay NaN with their sign); the
 * fast and portable conversions agree. */
static void test_fp16_every_half(void)
{
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = of_f16(h);
        ASSERT_TRUE(bits(f) == bits(herd__f16_to_f32_portable(h)));
        bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (nan) {
            ASSERT_TRUE(isnan(f) && !!signbit(f) == !!(h & 0x8000));
            uint16_t back = to_f16(f);
            ASSERT_TRUE((back & 0x7c00) == 0x7c00 && (back & 0x3ff) && (back & 0x8000) == (h & 0x8000));
            continue;
        }
        if ((h & 0x7fff) == 0x7c00)
            ASSERT_TRUE(isinf(f) && !!signbit(f) == !!(h & 0x8000));
        else if ((double)f != half_value(h))
            herd_test_fail(__FILE__, __LINE__, "half 0x%04x is %.9g, want %.9g", h, (double)f, half_value(h));
        ASSERT_EQ_INT(to_f16(f), h);
        ASSERT_EQ_INT(herd__f32_to_f16_portable(f), h);
    }
}

/* A half is the correctly rounded f when no other half is nearer, and on a
 * tie it is the even one; beyond 65520 (the midpoint between the largest
 * half and 2^16) it is Inf. */
static void check_nearest_half(float f, uint16_t h)
{
    double x = (double)f, ax = fabs(x);
    if (ax >= 65520.0) {
        ASSERT_EQ_INT(h & 0x7fff, 0x7c00);
        return;
    }
    ASSERT_TRUE(((h & 0x8000) != 0) == (signbit(f) != 0) || ax == 0);
    uint16_t mag = h & 0x7fff;
    double err = fabs(half_value(mag) - ax);
    if (mag < 0x7bff)
        ASSERT_TRUE(err <= fabs(half_value((uint16_t)(mag + 1)) - ax));
    if (mag > 0)
        ASSERT_TRUE(err <= fabs(half_value((uint16_t)(mag - 1)) - ax));
    if (mag < 0x7bff && err == fabs(half_value((uint16_t)(mag + 1)) - ax))
        ASSERT_TRUE(mag % 2 == 0);
    if (mag > 0 && err == fabs(half_value((uint16_t)(mag - 1)) - ax))
        ASSERT_TRUE(mag % 2 == 0);
}

static void test_fp16_rounding(void)
{
    static const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {1.0f + 0x1p-11f, 0x3c00},             /* tie: to even, down */
        {1.0f + 0x3p-11f, 0x3c02},             /* tie: to even, up */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01},  /* just above the tie */
        {1.0f + 0x1p-11f - 0x1p-20f, 0x3c00},  /* just below */
        {-(1.0f + 0x3p-11f), 0xbc02},
        {65504.0f, 0x7bff},                    /* the largest half */
        {65519.99f, 0x7bff},                   /* below the midpoint to 2^16 */
        {65520.0f, 0x7c00},                    /* the midpoint: to even, which is Inf */
        {1e6f, 0x7c00},
        {-1e6f, 0xfc00},
        {FLT_MAX, 0x7c00},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {0x1p-14f, 0x0400},                    /* the smallest normal */
        {0x1p-24f, 0x0001},                    /* the smallest subnormal */
        {0x1p-25f, 0x0000},                    /* half of it: a tie, to even (zero) */
        {0x1.8p-25f, 0x0001},                  /* above the tie */
        {0x1.8p-24f, 0x0002},                  /* 1.5 ulp: tie, to even (2) */
        {0x2.8p-24f, 0x0002},                  /* 2.5 ulp: tie, to even (2) */
        {0x3ffp-24f, 0x03ff},                  /* the largest subnormal */
        {0x3ff.8p-24f, 0x0400},                /* tie above it: to even, the smallest normal */
        {1e-10f, 0x0000},
        {-1e-10f, 0x8000},                     /* the sign of zero is kept */
        {-0.0f, 0x8000},
        {0x1p-149f, 0x0000},                   /* fp32 subnormals */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (to_f16(cases[i].f) != cases[i].h || herd__f32_to_f16_portable(cases[i].f) != cases[i].h)
            herd_test_fail(__FILE__, __LINE__, "%a: 0x%04x (portable 0x%04x), want 0x%04x", (double)cases[i].f,
                           to_f16(cases[i].f), herd__f32_to_f16_portable(cases[i].f), cases[i].h);
        check_nearest_half(cases[i].f, cases[i].h);
    }
    uint16_t nan = to_f16(NAN);
    ASSERT_TRUE((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff));
    nan = to_f16(from_bits(0x7f800001u)); /* a NaN with only a low payload bit stays NaN */
    ASSERT_TRUE((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff));
    /* random floats from fp32 subnormal to beyond the half range, and
     * exact ties, against the nearest-half reference */
    herd_rng r;
    herd_rng_seed(&r, 11, 0);
    for (int i = 0; i < 200000; i++) {
        float f = from_bits((uint32_t)herd_rng_next(&r));
        if (i % 2) /* concentrate on the half range: exponents 2^-27 .. 2^17 */
            f = ldexpf(1.0f + herd_rng_uniform(&r), (int)herd_rng_below(&r, 45) - 27) * (i % 4 == 1 ? 1 : -1);
        if (i % 8 == 3) /* a tie: a half's value plus half its ulp */
            f = from_bits((bits(f) & ~0x1fffu) | 0x1000u);
        if (isnan(f))
            continue;
        uint16_t h = to_f16(f);
        ASSERT_EQ_INT(h, herd__f32_to_f16_portable(f));
        check_nearest_half(f, h);
    }
}

/* bf16: every pattern survives bf16 -> f32 -> bf16; rounding to nearest
 * even on the upper 16 bits, overflow to Inf, NaN stays NaN (also a NaN
 * whose upper bits alone would read as Inf). */
static void test_bf16(void)
{
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = of_bf16(h);
        ASSERT_TRUE(bits(f) == (uint32_t)h << 16);
        if (isnan(f))
            ASSERT_TRUE(isnan(of_bf16(to_bf16(f))));
        else
            ASSERT_EQ_INT(to_bf16(f), h);
    }
    static const struct {
        uint32_t f;
        uint16_t h;
    } cases[] = {
        {0x3f808000u, 0x3f80}, /* 1 + 2^-8: tie, to even (down) */
        {0x3f818000u, 0x3f82}, /* 1 + 3*2^-8: tie, to even (up) */
        {0x3f808001u, 0x3f81}, /* above the tie */
        {0x3f807fffu, 0x3f80}, /* below */
        {0xbf818000u, 0xbf82},
        {0x7f7f7fffu, 0x7f7f}, /* the largest bf16 stays */
        {0x7f7f8000u, 0x7f80}, /* tie above it: to even, which is Inf */
        {0x7f7fffffu, 0x7f80}, /* FLT_MAX: Inf */
        {0xff7fffffu, 0xff80},
        {0x7f800000u, 0x7f80}, /* Inf */
        {0x00008000u, 0x0000}, /* fp32 subnormal tie: to even */
        {0x00018000u, 0x0002},
        {0x80000000u, 0x8000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (to_bf16(from_bits(cases[i].f)) != cases[i].h)
            herd_test_fail(__FILE__, __LINE__, "0x%08x: 0x%04x, want 0x%04x", cases[i].f,
                           to_bf16(from_bits(cases[i].f)), cases[i].h);
    static const uint32_t nans[] = {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fffffffu};
    for (size_t i = 0; i < 4; i++) {
        uint16_t h = to_bf16(from_bits(nans[i]));
        ASSERT_TRUE(isnan(of_bf16(h)) && (h & 0x8000) == (nans[i] >> 16 & 0x8000));
    }
    /* a sample against the reference: the nearer of the two candidates,
     * the even one on a tie */
    herd_rng r;
    herd_rng_seed(&r, 12, 0);
    for (int i = 0; i < 200000; i++) {
        uint32_t x = (uint32_t)herd_rng_next(&r);
        if (i % 4 == 1)
            x = (x & ~0xffffu) | 0x8000u; /* a tie */
        float f = from_bits(x);
        if (isnan(f))
            continue;
        uint16_t lo = (uint16_t)(x >> 16), h = to_bf16(f);
        uint32_t rem = x & 0xffffu;
        uint16_t want = rem > 0x8000u || (rem == 0x8000u && (lo & 1)) ? (uint16_t)(lo + 1) : lo;
        if (h != want)
            herd_test_fail(__FILE__, __LINE__, "0x%08x: 0x%04x, want 0x%04x", x, h, want);
    }
}

/* Counters: a blocking receive adds to wait_s, byte counts add up. */
static int body_counters(herd_comm *c, void *arg)
{
    (void)arg;
    char b[100] = {0};
    CHECK_OK(c, herd_comm_barrier(c));
    if (c->rank == 1) {
        sleep_s(0.1);
        CHECK_OK(c, herd_comm_send(c, 0, 0, b, sizeof b));
        CHECK(c, c->bytes_sent == sizeof b && c->bytes_recv == 0);
    } else {
        double w0 = c->wait_s;
        CHECK_OK(c, herd_comm_recv(c, 1, 0, b, sizeof b));
        CHECK(c, c->bytes_recv == sizeof b && c->bytes_sent == 0);
        CHECK(c, c->wait_s - w0 >= 0.05);
    }
    return 0;
}

static void test_counters(void) { RUN_RANKS(2, 10, body_counters, NULL); }

/* ---- engines: the registry, the lifecycle, the loopback engine ------ */

/* Every engine has the hooks the seam requires, a unique name, and caps
 * that agree with its endpoints' ops; threads is the default. */
static void test_engine_registry(void)
{
    ASSERT_TRUE(herd_engines[0] != NULL && strcmp(herd_engines[0]->name, "threads") == 0);
    for (size_t i = 0; herd_engines[i]; i++) {
        const herd_engine *e = herd_engines[i];
        ASSERT_TRUE(e->name && e->world_create && e->endpoint && e->world_free);
        ASSERT_TRUE(herd_engine_find(e->name) == e);
        for (size_t j = 0; j < i; j++)
            ASSERT_TRUE(strcmp(herd_engines[j]->name, e->name) != 0);
    }
    ASSERT_TRUE(herd_engine_find("loopback") != NULL);
    ASSERT_TRUE(herd_engine_find("nope") == NULL && herd_engine_find(NULL) == NULL);
    char names[256];
    herd_engine_names(names, sizeof names);
    ASSERT_STR_CONTAINS(names, "threads, ");
    ASSERT_STR_CONTAINS(names, "loopback");
    /* caps against a world of one of each engine not sized by a launcher */
    for (size_t i = 0; herd_engines[i]; i++) {
        const herd_engine *e = herd_engines[i];
        if (e->caps & HERD_ENGINE_LAUNCHER_SIZED)
            continue; /* its world needs the launcher (tests/mpi) */
        herd_world *w;
        herd_comm *c;
        herd_err err = {0};
        ASSERT_OK(herd_world_create(e, 1, &w, &err));
        ASSERT_TRUE(w->engine == e && w->size == 1 && w->first_rank == 0 && w->nlocal == 1);
        ASSERT_OK(herd_world_endpoint(w, 0, &c, &err));
        ASSERT_EQ_INT(c->ops->win_create != NULL, (e->caps & HERD_ENGINE_WINDOWS) != 0);
        ASSERT_EQ_INT(c->ops->allreduce_native != NULL, (e->caps & HERD_ENGINE_NATIVE_ALLREDUCE) != 0);
        ASSERT_EQ_INT(herd_comm_any_thread(c), (e->caps & HERD_ENGINE_ANY_THREAD) != 0);
        ASSERT_TRUE(strcmp(c->ops->name, e->name) == 0);
        ASSERT_TRUE(c->clock == e->clock);
        herd_comm_free(c);
        herd_world_free(w);
    }
    /* a virtual clock comes with every hook that charges it, and only then */
    for (size_t i = 0; herd_engines[i]; i++) {
        const herd_engine *e = herd_engines[i];
        const herd_engine_clock *k = e->clock;
        ASSERT_EQ_INT(k != NULL, (e->caps & HERD_ENGINE_VIRTUAL_CLOCK) != 0);
        ASSERT_TRUE(!k || (k->step_begin && k->compute && k->span_begin && k->span_reach));
    }
}

/* No name: the engine whose launcher started this process, else threads;
 * a name: that engine; an unknown one: HERD_EINVAL listing them all. */
static void test_engine_pick(void)
{
    const herd_engine *e = NULL, *launched = NULL;
    herd_err err = {0};
    for (size_t i = 0; herd_engines[i] && !launched; i++)
        if (herd_engines[i]->launched && herd_engines[i]->launched())
            launched = herd_engines[i];
    ASSERT_TRUE(herd_engine_launcher() == launched);
    ASSERT_OK(herd_engine_pick(NULL, &e, &err));
    ASSERT_TRUE(e == (launched ? launched : herd_engine_find("threads")));
    ASSERT_OK(herd_engine_pick("", &e, &err));
    ASSERT_TRUE(e == (launched ? launched : herd_engine_find("threads")));
    ASSERT_OK(herd_engine_pick("loopback", &e, &err));
    ASSERT_TRUE(e == herd_engine_find("loopback"));
    ASSERT_EQ_INT(herd_engine_pick("carrier-pigeon", &e, &err), HERD_EINVAL);
    ASSERT_TRUE(e == NULL);
    ASSERT_STR_CONTAINS(err.msg, "unknown engine 'carrier-pigeon'");
    for (size_t i = 0; herd_engines[i]; i++)
        ASSERT_STR_CONTAINS(err.msg, herd_engines[i]->name);
    ASSERT_EQ_INT(herd_engine_pick(NULL, NULL, &err), HERD_EINVAL);
}

/* A clock for test_engine_clock: it writes each call into the endpoint's
 * err.msg, the one text an endpoint owns (the tests keep no globals). */
static void log_call(herd_comm *c, const char *what, double v)
{
    size_t len = strlen(c->err.msg);
    snprintf(c->err.msg + len, sizeof c->err.msg - len, "%s %g; ", what, v);
}
static void tc_step_begin(herd_comm *c) { log_call(c, "step", 0); }
static void tc_compute(herd_comm *c, double flops) { log_call(c, "compute", flops); }
static void tc_span_begin(herd_comm *c, herd_compute_span *s)
{
    *s = (herd_compute_span){.start = 5, .rate = 2};
    log_call(c, "span", 0);
}
static void tc_span_reach(herd_comm *c, const herd_compute_span *s, double flops)
{
    log_call(c, "reach", s->start + flops / s->rate);
}
static const herd_engine_clock test_clock = {tc_step_begin, tc_compute, tc_span_begin, tc_span_reach};

/* A worker's compute reaches its engine's clock hooks, with the endpoint,
 * as said (a combine: 2 FLOPs a float); an engine without a clock is
 * told nothing, and a span on it is empty. The engine with a clock is
 * loopback's table with test_clock added. */
static void test_engine_clock(void)
{
    const herd_engine *loopback = herd_engine_find("loopback");
    herd_engine timed = *loopback;
    timed.caps |= HERD_ENGINE_VIRTUAL_CLOCK;
    timed.clock = &test_clock;
    herd_world *w = NULL;
    herd_comm *c = NULL;
    herd_err err = {0};
    herd_compute_span span = {.start = -1, .rate = -1};
    ASSERT_OK(herd_world_create(loopback, 1, &w, &err));
    ASSERT_OK(herd_world_endpoint(w, 0, &c, &err));
    ASSERT_TRUE(c->clock == NULL);
    herd_comm_step_begin(c);
    herd_comm_compute(c, 10);
    herd_comm_combined(c, 3);
    herd_comm_span_begin(c, &span);
    herd_comm_span_reach(c, &span, 4);
    ASSERT_TRUE(span.start == 0 && span.rate == 0);
    ASSERT_TRUE(c->err.msg[0] == 0);
    herd_comm_free(c);
    w->engine = &timed; /* the world is loopback's; its endpoints now timed's */
    ASSERT_OK(herd_world_endpoint(w, 0, &c, &err));
    ASSERT_TRUE(c->clock == &test_clock);
    herd_comm_step_begin(c);
    herd_comm_compute(c, 10);
    herd_comm_combined(c, 3);
    herd_comm_span_begin(c, &span);
    herd_comm_span_reach(c, &span, 4);
    ASSERT_STR_CONTAINS(c->err.msg, "step 0; compute 10; compute 6; span 0; reach 7; ");
    ASSERT_TRUE(strlen(c->err.msg) == strlen("step 0; compute 10; compute 6; span 0; reach 7; "));
    herd_comm_free(c);
    herd_world_free(w);
}

/* The lifecycle through the table: the world says which ranks are local,
 * an endpoint of any other is refused, a world needs a worker, and the
 * fail hook ends a wait at once. */
static void test_engine_world(void)
{
    const herd_engine *threads = herd_engine_find("threads"), *loopback = herd_engine_find("loopback");
    herd_world *w = NULL;
    herd_comm *c = NULL;
    herd_err err = {0};
    ASSERT_EQ_INT(herd_world_create(threads, 0, &w, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "the threads engine needs at least one worker");
    ASSERT_EQ_INT(herd_world_create(loopback, 2, &w, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "the loopback engine runs exactly one worker, not 2");
    ASSERT_TRUE(w == NULL);
    ASSERT_EQ_INT(herd_world_create(NULL, 1, &w, &err), HERD_EINVAL);
    ASSERT_OK(herd_world_create(threads, 3, &w, &err));
    ASSERT_TRUE(w->engine == threads && w->size == 3 && w->first_rank == 0 && w->nlocal == 3);
    ASSERT_EQ_INT(herd_world_endpoint(w, 3, &c, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "rank 3 is not run by this process (it runs ranks 0 to 2 of 3)");
    ASSERT_TRUE(c == NULL);
    ASSERT_OK(herd_world_endpoint(w, 0, &c, &err));
    ASSERT_TRUE(c->rank == 0 && c->size == 3);
    int x = 0;
    herd_req *r;
    ASSERT_OK(herd_comm_irecv(c, 2, 5, &x, sizeof x, &r));
    herd_world_fail(w, 2);
    double t0 = herd__now();
    ASSERT_EQ_INT(herd_comm_wait(c, r), HERD_EREMOTE);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "worker 2 failed");
    ASSERT_TRUE(herd__now() - t0 < 5);
    herd_world_close(w);
    herd_comm_free(c);
    herd_world_free(w);
    herd_world_fail(NULL, 0), herd_world_close(NULL), herd_world_free(NULL); /* nothing to do */
}

/* Every rank sends to itself: messages match their receive by tag, first in
 * first out per tag, whether the receive was posted first or the message
 * came first; zero-byte messages count; a receive of the wrong length fails
 * naming both. Any engine, any world size. */
static int body_self(herd_comm *c, void *arg)
{
    (void)arg;
    size_t me = c->rank;
    int v[6] = {0}, w = 0;
    for (int tag = 1; tag <= 3; tag++) /* message first */
        for (int i = 0; i < 2; i++) {
            int x = tag * 10 + i;
            CHECK_OK(c, herd_comm_send(c, me, tag, &x, sizeof x));
        }
    for (int tag = 3; tag >= 1; tag--)
        for (int i = 0; i < 2; i++) {
            CHECK_OK(c, herd_comm_recv(c, me, tag, &v[0], sizeof v[0]));
            CHECK(c, v[0] == tag * 10 + i);
        }
    herd_req *r[6];
    for (int i = 0; i < 6; i++) /* receive first: tags 7, 8, 7, 8, 7, 8 */
        CHECK_OK(c, herd_comm_irecv(c, me, 7 + i % 2, &v[i], sizeof v[i], &r[i]));
    for (int i = 5; i >= 0; i--) {
        int x = 100 + i;
        CHECK_OK(c, herd_comm_send(c, me, 7 + i % 2, &x, sizeof x));
    }
    for (int i = 0; i < 6; i++)
        CHECK_OK(c, herd_comm_wait(c, r[i]));
    CHECK(c, v[0] == 104 && v[2] == 102 && v[4] == 100 && v[1] == 105 && v[3] == 103 && v[5] == 101);
    CHECK_OK(c, herd_comm_send(c, me, 9, NULL, 0));
    CHECK_OK(c, herd_comm_recv(c, me, 9, NULL, 0));
    CHECK_OK(c, herd_comm_send(c, me, 9, NULL, 0));
    CHECK_ST(c, herd_comm_recv(c, me, 9, &w, sizeof w), HERD_EINVAL);
    CHECK_MSG(c, "expected 4 bytes from rank");
    CHECK_MSG(c, "(tag 9), got 0");
    bool done = false;
    CHECK_OK(c, herd_comm_irecv(c, me, 9, &w, sizeof w, &r[0]));
    CHECK_OK(c, herd_comm_send(c, me, 9, &me, 1));
    CHECK_ST(c, herd_comm_test(c, r[0], &done), HERD_EINVAL);
    CHECK(c, done);
    CHECK(c, c->bytes_sent == 12 * sizeof(int) + 1 && c->bytes_recv == 14 * sizeof(int));
    return 0;
}

static void test_engine_self_messages(void)
{
    RUN_ON("loopback", 1, 10, body_self, NULL);
    RUN_RANKS(3, 10, body_self, NULL); /* the same on the threads engine */
}

/* On the loopback engine a receive nobody sent can only be sent by its own
 * worker, which is waiting: wait says so at once instead of at the
 * deadline; test says not done, and cancel takes it back. */
static void test_engine_loopback_unmatched(void)
{
    herd_world *w;
    herd_comm *c;
    herd_err err = {0};
    ASSERT_OK(herd_world_create(herd_engine_find("loopback"), 1, &w, &err));
    ASSERT_OK(herd_world_endpoint(w, 0, &c, &err));
    ASSERT_TRUE(c->timeout_s == 60);
    int x = 0, y = 5;
    herd_req *r;
    bool done = true;
    ASSERT_OK(herd_comm_irecv(c, 0, 3, &x, sizeof x, &r));
    ASSERT_OK(herd_comm_test(c, r, &done));
    ASSERT_TRUE(!done);
    double t0 = herd__now();
    ASSERT_EQ_INT(herd_comm_wait(c, r), HERD_ETIMEOUT); /* ends r */
    ASSERT_TRUE(herd__now() - t0 < 1);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "message from rank 0 (tag 3) that was never sent");
    ASSERT_OK(herd_comm_irecv(c, 0, 3, &x, sizeof x, &r));
    herd_comm_cancel(c, r);
    ASSERT_OK(herd_comm_send(c, 0, 3, &y, sizeof y)); /* nobody waits for it now: it stays queued */
    ASSERT_OK(herd_comm_recv(c, 0, 3, &x, sizeof x));
    ASSERT_TRUE(x == 5);
    ASSERT_OK(herd_comm_send(c, 0, 4, &y, sizeof y)); /* never received: freed with the endpoint */
    ASSERT_EQ_INT(herd_comm_isend(c, 1, 0, &y, sizeof y, &r), HERD_EINVAL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "peer 1 is not a rank (size 1)");
    herd_comm_free(c);
    herd_world_free(w);
}

/* Barrier and one-sided windows on the loopback engine: the same bodies
 * as on threads. */
static void test_engine_loopback_windows(void)
{
    barrier_ctx b;
    for (size_t k = 0; k < BARRIER_ROUNDS; k++)
        atomic_init(&b.arrived[k], 0);
    RUN_ON("loopback", 1, 10, body_barrier, &b);
    RUN_ON("loopback", 1, 10, body_accumulate, NULL);
    RUN_ON("loopback", 1, 10, body_get_put, NULL);
    RUN_ON("loopback", 1, 10, body_many_windows, NULL);
}

/* The collectives on the loopback engine (herd_allreduce's own path: it
 * has no native allreduce, and "native" falls back), and its answers to
 * what an algorithm may ask. */
static int body_applies(herd_comm *c, void *arg)
{
    bool shared = *(const bool *)arg;
    herd_allreduce_opts o = {.wire = HERD_F32};
    static const herd_allreduce_impl impls[] = {HERD_ALLREDUCE_AUTO, HERD_ALLREDUCE_NATIVE, HERD_ALLREDUCE_RING};
    for (size_t i = 0; i < 3; i++) {
        o.impl = impls[i];
        CHECK(c, herd_allreduce_applies_in_place(c, &o) == (shared && o.impl != HERD_ALLREDUCE_RING));
    }
    o = (herd_allreduce_opts){.wire = HERD_F16};
    CHECK(c, !herd_allreduce_applies_in_place(c, &o));
    CHECK(c, herd_comm_any_thread(c));
    return 0;
}

static void test_engine_loopback_collectives(void)
{
    herd_allreduce_impl impls[] = {HERD_ALLREDUCE_AUTO, HERD_ALLREDUCE_RING, HERD_ALLREDUCE_NATIVE};
    for (size_t m = 0; m < 3; m++) {
        ar_ctx a = {.wire = HERD_F32, .impl = impls[m]};
        sweep_counts(&a, 1);
        RUN_ON("loopback", 1, 10, body_allreduce_exact, &a);
        mean_ctx mc = {.impl = impls[m]};
        RUN_ON("loopback", 1, 10, body_allreduce_mean_check, &mc);
    }
    RUN_ON("loopback", 1, 10, body_broadcast, NULL);
    RUN_ON("loopback", 1, 10, body_allgather, NULL);
    bool shared = false;
    RUN_ON("loopback", 1, 10, body_applies, &shared);
    shared = true;
    RUN_RANKS(2, 10, body_applies, &shared);
}

/* Windows are a capability: an engine whose ops have none answers every
 * window call with HERD_EUNSUPPORTED naming itself, and nothing crashes. */
static void test_engine_no_windows(void)
{
    herd_world *w;
    herd_comm *c;
    herd_err err = {0};
    ASSERT_OK(herd_world_create(herd_engine_find("loopback"), 1, &w, &err));
    ASSERT_OK(herd_world_endpoint(w, 0, &c, &err));
    const herd_comm_ops *ops = c->ops;
    herd_comm_ops bare = {.name = "bare", .isend = ops->isend, .irecv = ops->irecv, .wait = ops->wait,
                          .test = ops->test, .cancel = ops->cancel, .barrier = ops->barrier, .free = ops->free};
    c->ops = &bare;
    float x[2] = {1, 2};
    herd_win *win = (herd_win *)(void *)x; /* never dereferenced: the wrapper stops first */
    ASSERT_EQ_INT(herd_comm_win_create(c, x, sizeof x, &win), HERD_EUNSUPPORTED);
    ASSERT_TRUE(win == NULL);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "win_create: the bare engine has no one-sided windows");
    win = (herd_win *)(void *)x;
    ASSERT_EQ_INT(herd_comm_win_lock(c, win, 0, true), HERD_EUNSUPPORTED);
    ASSERT_STR_CONTAINS(herd_comm_last_error(c), "win_lock: the bare engine has no one-sided windows");
    ASSERT_EQ_INT(herd_comm_win_get(c, win, 0, 0, x, 4), HERD_EUNSUPPORTED);
    ASSERT_EQ_INT(herd_comm_win_put(c, win, 0, 0, x, 4), HERD_EUNSUPPORTED);
    ASSERT_EQ_INT(herd_comm_win_accumulate(c, win, 0, 0, x, 1), HERD_EUNSUPPORTED);
    ASSERT_EQ_INT(herd_comm_win_flush(c, win, 0), HERD_EUNSUPPORTED);
    ASSERT_EQ_INT(herd_comm_win_unlock(c, win, 0), HERD_EUNSUPPORTED);
    ASSERT_EQ_INT(herd_comm_win_free(c, win), HERD_EUNSUPPORTED);
    ASSERT_OK(herd_comm_win_free(c, NULL));
    ASSERT_TRUE(c->bytes_sent == 0 && c->bytes_recv == 0);
    ASSERT_OK(herd_allreduce(c, x, 2, NULL)); /* the rest still works */
    ASSERT_OK(herd_comm_barrier(c));
    ASSERT_TRUE(!herd_allreduce_applies_in_place(c, &(herd_allreduce_opts){0}));
    c->ops = ops;
    herd_comm_free(c);
    herd_world_free(w);
}

/* herd bench allreduce launches through the table: any engine, rows with
 * no wrong element; an unknown engine is refused by name. */
static void test_engine_bench_allreduce(void)
{
    static const struct {
        const char *engine;
        size_t workers;
    } runs[] = {{"threads", 3}, {"loopback", 1}, {NULL, 2}};
    for (size_t k = 0; k < sizeof runs / sizeof runs[0]; k++) {
        herd_bench_allreduce_config cfg = {.engine = runs[k].engine, .workers = runs[k].workers, .min_bytes = 4,
                                           .max_bytes = 4096, .warmup = 1, .iters = 3, .timeout_s = 10,
                                           .versus_native = true};
        herd_bench_row rows[HERD_BENCH_MAX_ROWS];
        size_t nrows = 0, world = 0;
        herd_err err = {0};
        ASSERT_OK(herd_bench_allreduce(&cfg, rows, &nrows, &world, &err));
        ASSERT_EQ_INT(world, runs[k].workers);
        ASSERT_EQ_INT(nrows, 11); /* 4 B to 4 KiB */
        for (size_t i = 0; i < nrows; i++)
            ASSERT_EQ_INT(rows[i].wrong, 0);
    }
    herd_bench_allreduce_config bad = {.engine = "nope", .workers = 2, .min_bytes = 4, .max_bytes = 4, .iters = 1};
    herd_bench_row rows[HERD_BENCH_MAX_ROWS];
    size_t nrows = 0, world = 0;
    herd_err err = {0};
    ASSERT_EQ_INT(herd_bench_allreduce(&bad, rows, &nrows, &world, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "unknown engine 'nope'");
    bad.engine = "loopback";
    ASSERT_EQ_INT(herd_bench_allreduce(&bad, rows, &nrows, &world, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "exactly one worker");
}

/* The mpi engine's agent sleeps in herd__sockwatch_wait: it must return
 * at once when a socket of the process has input (a request from another
 * host), or the extra descriptor does (the own worker's wake), and not
 * before its timeout otherwise; a socket made after a scan is found by
 * the next one. */
static void test_sockwatch(void)
{
    int sv[2], pf[2];
    ASSERT_TRUE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
    ASSERT_TRUE(pipe(pf) == 0);
    herd__sockwatch w;
    herd__sockwatch_init(&w);
    double t0 = herd__now();
    ASSERT_TRUE(!herd__sockwatch_wait(&w, 20000, pf[0])); /* nothing: the whole 20 ms */
    ASSERT_TRUE(herd__now() - t0 >= 0.019);
    ASSERT_TRUE(write(sv[1], "x", 1) == 1);
    t0 = herd__now();
    ASSERT_TRUE(herd__sockwatch_wait(&w, 5000000, pf[0])); /* input on a socket: at once, not in 5 s */
    ASSERT_TRUE(herd__now() - t0 < 1.0);
    char b;
    ASSERT_TRUE(read(sv[0], &b, 1) == 1);
    ASSERT_TRUE(write(pf[1], "x", 1) == 1); /* the extra descriptor, a pipe */
    ASSERT_TRUE(herd__sockwatch_wait(&w, 5000000, pf[0]));
    ASSERT_TRUE(read(pf[0], &b, 1) == 1);
    int late[2]; /* made after the scan: found once it is rescanned */
    ASSERT_TRUE(socketpair(AF_UNIX, SOCK_STREAM, 0, late) == 0);
    ASSERT_TRUE(write(late[1], "x", 1) == 1);
    struct timespec rescan = {0, (long)(HERD__SOCKWATCH_RESCAN_S * 1e9) + 1000000L};
    nanosleep(&rescan, NULL);
    t0 = herd__now();
    ASSERT_TRUE(herd__sockwatch_wait(&w, 5000000, pf[0]));
    ASSERT_TRUE(herd__now() - t0 < 1.0);
    herd__sockwatch_free(&w);
    close(sv[0]), close(sv[1]), close(pf[0]), close(pf[1]), close(late[0]), close(late[1]);
}

const herd_test herd_tests_comm[] = {
    {"comm_p2p_tags", test_p2p_tags, 10},
    {"comm_p2p_issend", test_p2p_issend, 20},
    {"comm_p2p_many_recv_first", test_p2p_many_recv_first, 20},
    {"comm_p2p_many_send_first", test_p2p_many_send_first, 20},
    {"comm_p2p_zero_bytes_and_mismatch", test_p2p_zero_bytes_and_mismatch, 10},
    {"comm_p2p_large", test_p2p_large, 10},
    {"comm_timeouts", test_timeouts, 10},
    {"comm_lock_timeout", test_lock_timeout, 10},
    {"comm_world_fail", test_world_fail, 10},
    {"comm_argument_errors", test_argument_errors, 10, HERD_TEST_ONE_THREAD},
    {"comm_counters", test_counters, 10},
    {"comm_engine_registry", test_engine_registry, 10, HERD_TEST_ONE_THREAD},
    {"comm_engine_pick", test_engine_pick, 10, HERD_TEST_ONE_THREAD},
    {"comm_engine_world", test_engine_world, 10, HERD_TEST_ONE_THREAD},
    {"comm_engine_clock", test_engine_clock, 10, HERD_TEST_ONE_THREAD},
    {"comm_sockwatch", test_sockwatch, 10, HERD_TEST_ONE_THREAD},
    {"comm_engine_self_messages", test_engine_self_messages, 10},
    {"comm_engine_loopback_unmatched", test_engine_loopback_unmatched, 10, HERD_TEST_ONE_THREAD},
    {"comm_engine_loopback_windows", test_engine_loopback_windows, 10},
    {"comm_engine_loopback_collectives", test_engine_loopback_collectives, 20},
    {"comm_engine_no_windows", test_engine_no_windows, 10, HERD_TEST_ONE_THREAD},
    {"comm_engine_bench_allreduce", test_engine_bench_allreduce, 30},
    {"comm_barrier_16", test_barrier_16, 10},
    {"comm_win_accumulate", test_win_accumulate, 20},
    {"comm_win_get_put", test_win_get_put, 10},
    {"comm_many_windows", test_many_windows, 20},
    {"comm_win_blend", test_win_blend, 40},
    {"comm_win_heavy_ball", test_win_heavy_ball, 40},
    {"comm_allreduce_f32_default_segments", test_allreduce_f32_default_segments, 60},
    {"comm_allreduce_f32_64_byte_segments", test_allreduce_f32_64_byte_segments, 60},
    {"comm_allreduce_f32_odd_segments", test_allreduce_f32_odd_segments, 60},
    {"comm_allreduce_native_exact", test_allreduce_native_exact, 60},
    {"comm_allreduce_native_rank_order", test_allreduce_native_rank_order, 60},
    {"comm_allreduce_native_missing_rank", test_allreduce_native_missing_rank, 20},
    {"comm_allreduce_mean_check", test_allreduce_mean_check, 60},
    {"comm_allreduce_f16", test_allreduce_f16, 60},
    {"comm_allreduce_f16_small_segments", test_allreduce_f16_small_segments, 60},
    {"comm_allreduce_bf16", test_allreduce_bf16, 60},
    {"comm_allreduce_repeatable", test_allreduce_repeatable, 20},
    {"comm_two_worlds", test_two_worlds, 20},
    {"comm_broadcast", test_broadcast, 30},
    {"comm_allgather", test_allgather, 20},
    {"comm_fp16_every_half", test_fp16_every_half, 10, HERD_TEST_ONE_THREAD},
    {"comm_fp16_rounding", test_fp16_rounding, 10, HERD_TEST_ONE_THREAD},
    {"comm_bf16", test_bf16, 10, HERD_TEST_ONE_THREAD},
    HERD_TEST_END,
};
