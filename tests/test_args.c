/* Argument checks: every public function that returns a herd_status, called
 * with each bad argument it can be given (a NULL pointer it needs, a count
 * or index beyond its array or world, an unknown name, an enum out of
 * range), returns HERD_EINVAL, and where it has somewhere to say so (its
 * herd_err, herd_comm_last_error, herd_worker.err) a message naming the
 * argument, without crashing and before doing anything. One test a header.
 */
#include "harness.h"
#include "herd/herd.h"

#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>

/* call is HERD_EINVAL, and err.msg names what. err is cleared first, so a
 * message left by an earlier call never passes for this one's. */
#define BAD(call, what)                                                       \
    do {                                                                      \
        err = (herd_err){0};                                                  \
        ASSERT_EQ_INT((call), HERD_EINVAL);                                   \
        ASSERT_STR_CONTAINS(err.msg, (what));                                 \
    } while (0)

/* The same for a call whose message goes to endpoint c. */
#define BAD_ON(c, call, what)                                                 \
    do {                                                                      \
        (c)->err = (herd_err){0};                                             \
        ASSERT_EQ_INT((call), HERD_EINVAL);                                   \
        ASSERT_STR_CONTAINS(herd_comm_last_error(c), (what));                 \
    } while (0)

/* A call that has nowhere to put a message: the status alone. */
#define BAD_ST(call) ASSERT_EQ_INT((call), HERD_EINVAL)

/* ---- herd_comm.h: the wrappers, the threads engine, the collectives ---- */

static void test_comm_p2p(void)
{
    herd_err err;
    herd_threads_world *tw = NULL;
    herd_comm *c = NULL;
    herd_req *r = NULL, *fake = (herd_req *)&err; /* never dereferenced: checked away first */
    float x = 1, y[2];
    bool done;

    BAD(herd_threads_world_create(2, NULL, &err), "out");
    BAD(herd_threads_world_create(0, &tw, &err), "nworkers");
    ASSERT_OK(herd_threads_world_create(2, &tw, NULL));
    BAD(herd_comm_threads_create(tw, 0, NULL, &err), "out");
    BAD(herd_comm_threads_create(NULL, 0, &c, &err), "world");
    BAD(herd_comm_threads_create(tw, 2, &c, &err), "rank 2");
    ASSERT_OK(herd_comm_threads_create(tw, 0, &c, NULL));

    /* a NULL endpoint has no err to name it in */
    BAD_ST(herd_comm_isend(NULL, 1, 0, &x, sizeof x, &r));
    BAD_ST(herd_comm_issend(NULL, 1, 0, &x, sizeof x, &r));
    BAD_ST(herd_comm_irecv(NULL, 1, 0, &x, sizeof x, &r));
    BAD_ST(herd_comm_send(NULL, 1, 0, &x, sizeof x));
    BAD_ST(herd_comm_recv(NULL, 1, 0, &x, sizeof x));
    BAD_ST(herd_comm_wait(NULL, fake));
    BAD_ST(herd_comm_test(NULL, fake, &done));
    BAD_ST(herd_comm_barrier(NULL));
    BAD_ST(herd_allreduce(NULL, &x, 1, NULL));
    BAD_ST(herd_broadcast(NULL, &x, sizeof x, 0));
    BAD_ST(herd_allgather(NULL, &x, y, sizeof x));

    BAD_ON(c, herd_comm_isend(c, 2, 0, &x, sizeof x, &r), "isend: peer 2");
    BAD_ON(c, herd_comm_isend(c, 1, 0, NULL, 4, &r), "isend: buf is NULL");
    BAD_ON(c, herd_comm_isend(c, 1, 0, &x, sizeof x, NULL), "isend: req is NULL");
    BAD_ON(c, herd_comm_isend(c, 1, -1, &x, sizeof x, &r), "tag -1");
    BAD_ON(c, herd_comm_issend(c, SIZE_MAX, 0, &x, sizeof x, &r), "issend: peer");
    BAD_ON(c, herd_comm_issend(c, 1, 0, NULL, 4, &r), "issend: buf is NULL");
    BAD_ON(c, herd_comm_issend(c, 1, 0, &x, sizeof x, NULL), "issend: req is NULL");
    BAD_ON(c, herd_comm_issend(c, 1, -2, &x, sizeof x, &r), "tag -2");
    BAD_ON(c, herd_comm_irecv(c, 2, 0, &x, sizeof x, &r), "irecv: peer 2");
    BAD_ON(c, herd_comm_irecv(c, 1, 0, NULL, 4, &r), "irecv: buf is NULL");
    BAD_ON(c, herd_comm_irecv(c, 1, 0, &x, sizeof x, NULL), "irecv: req is NULL");
    BAD_ON(c, herd_comm_irecv(c, 1, -1, &x, sizeof x, &r), "tag -1");
    BAD_ON(c, herd_comm_send(c, 5, 0, &x, sizeof x), "peer 5");
    BAD_ON(c, herd_comm_send(c, 1, 0, NULL, 4), "buf is NULL");
    BAD_ON(c, herd_comm_send(c, 1, -1, &x, sizeof x), "tag -1");
    BAD_ON(c, herd_comm_recv(c, 5, 0, &x, sizeof x), "peer 5");
    BAD_ON(c, herd_comm_recv(c, 1, 0, NULL, 4), "buf is NULL");
    BAD_ON(c, herd_comm_recv(c, 1, -1, &x, sizeof x), "tag -1");
    BAD_ON(c, herd_comm_wait(c, NULL), "wait: req is NULL");
    BAD_ON(c, herd_comm_test(c, NULL, &done), "test: req is NULL");
    BAD_ON(c, herd_comm_test(c, fake, NULL), "test: done is NULL");

    herd_allreduce_opts wire = {.wire = (herd_dtype)7}, impl = {.impl = (herd_allreduce_impl)9};
    BAD_ON(c, herd_allreduce(c, NULL, 3, NULL), "buf is NULL");
    BAD_ON(c, herd_allreduce(c, &x, 1, &wire), "wire");
    BAD_ON(c, herd_allreduce(c, &x, 1, &impl), "impl");
    BAD_ON(c, herd_allreduce(c, &x, SIZE_MAX / 2, NULL), "count");
    BAD_ON(c, herd_broadcast(c, NULL, 4, 0), "buf is NULL");
    BAD_ON(c, herd_broadcast(c, &x, sizeof x, 2), "root 2");
    BAD_ON(c, herd_allgather(c, NULL, y, sizeof x), "in is NULL");
    BAD_ON(c, herd_allgather(c, &x, NULL, sizeof x), "out is NULL");
    BAD_ON(c, herd_allgather(c, &x, y, SIZE_MAX / 2 + 1), "too large");
    ASSERT_TRUE(c->bytes_sent == 0 && c->bytes_recv == 0 && c->collectives == 0);
    herd_comm_free(c);
    herd_threads_world_free(tw);
}

/* Every window call with each bad argument, on an endpoint of a world of
 * one of engine e (a window is collective: one rank makes it alone). */
static void window_args(const herd_engine *e)
{
    herd_err err;
    herd_world *hw = NULL;
    herd_comm *c = NULL;
    herd_win *w = NULL, *fake = (herd_win *)&err; /* never dereferenced: checked away first */
    float buf[4] = {1, 2, 3, 4}, out[4];
    ASSERT_OK(herd_world_create(e, 1, &hw, NULL));
    ASSERT_OK(herd_world_endpoint(hw, 0, &c, NULL));

    BAD_ST(herd_comm_win_create(NULL, buf, sizeof buf, &w));
    BAD_ST(herd_comm_win_create_shared(NULL, buf, sizeof buf, &w));
    BAD_ON(c, herd_comm_win_create(c, NULL, sizeof buf, &w), "win_create: base is NULL");
    BAD_ON(c, herd_comm_win_create(c, buf, sizeof buf, NULL), "win_create: win is NULL");
    BAD_ON(c, herd_comm_win_create_shared(c, NULL, sizeof buf, &w), "base is NULL");
    BAD_ON(c, herd_comm_win_create_shared(c, buf, sizeof buf, NULL), "win is NULL");
    ASSERT_OK(herd_comm_win_create(c, buf, sizeof buf, &w));

    BAD_ST(herd_comm_win_lock(NULL, w, 0, true));
    BAD_ON(c, herd_comm_win_lock(c, NULL, 0, true), "win_lock: win is NULL");
    BAD_ON(c, herd_comm_win_lock(c, w, 1, true), "win_lock: target 1");
    ASSERT_OK(herd_comm_win_lock(c, w, 0, true));

    BAD_ST(herd_comm_win_get(NULL, w, 0, 0, out, 4));
    BAD_ON(c, herd_comm_win_get(c, NULL, 0, 0, out, 4), "win is NULL");
    BAD_ON(c, herd_comm_win_get(c, w, 1, 0, out, 4), "target 1");
    BAD_ON(c, herd_comm_win_get(c, w, 0, 0, NULL, 4), "dst is NULL");
    BAD_ON(c, herd_comm_win_get(c, w, 0, 12, out, 8), "past the end");
    BAD_ON(c, herd_comm_win_get(c, w, 0, SIZE_MAX, out, 4), "past the end");
    BAD_ST(herd_comm_win_put(NULL, w, 0, 0, buf, 4));
    BAD_ON(c, herd_comm_win_put(c, NULL, 0, 0, buf, 4), "win is NULL");
    BAD_ON(c, herd_comm_win_put(c, w, 1, 0, buf, 4), "target 1");
    BAD_ON(c, herd_comm_win_put(c, w, 0, 0, NULL, 4), "src is NULL");
    BAD_ON(c, herd_comm_win_put(c, w, 0, 16, buf, 4), "past the end");
    BAD_ST(herd_comm_win_accumulate(NULL, w, 0, 0, buf, 1));
    BAD_ON(c, herd_comm_win_accumulate(c, NULL, 0, 0, buf, 1), "win is NULL");
    BAD_ON(c, herd_comm_win_accumulate(c, w, 1, 0, buf, 1), "target 1");
    BAD_ON(c, herd_comm_win_accumulate(c, w, 0, 0, NULL, 1), "src is NULL");
    BAD_ON(c, herd_comm_win_accumulate(c, w, 0, 0, buf, SIZE_MAX / 2), "count");
    BAD_ON(c, herd_comm_win_accumulate(c, w, 0, 8, buf, 3), "past the end");
    BAD_ST(herd_comm_win_blend(NULL, w, 0, 0, buf, 1, 0.5f, out));
    BAD_ON(c, herd_comm_win_blend(c, NULL, 0, 0, buf, 1, 0.5f, out), "win is NULL");
    BAD_ON(c, herd_comm_win_blend(c, w, 1, 0, buf, 1, 0.5f, out), "target 1");
    BAD_ON(c, herd_comm_win_blend(c, w, 0, 0, NULL, 1, 0.5f, out), "src is NULL");
    BAD_ON(c, herd_comm_win_blend(c, w, 0, 0, buf, 1, 0.5f, NULL), "fetched is NULL");
    BAD_ON(c, herd_comm_win_blend(c, w, 0, 8, buf, 3, 0.5f, out), "past the end");
    BAD_ST(herd_comm_win_heavy_ball(NULL, w, 0, 0, 8, buf, 1, 0.9f));
    BAD_ON(c, herd_comm_win_heavy_ball(c, NULL, 0, 0, 8, buf, 1, 0.9f), "win is NULL");
    BAD_ON(c, herd_comm_win_heavy_ball(c, w, 1, 0, 8, buf, 1, 0.9f), "target 1");
    BAD_ON(c, herd_comm_win_heavy_ball(c, w, 0, 0, 8, NULL, 1, 0.9f), "upd is NULL");
    BAD_ON(c, herd_comm_win_heavy_ball(c, w, 0, 0, 4, buf, 2, 0.9f), "overlap");
    BAD_ON(c, herd_comm_win_heavy_ball(c, w, 0, 0, 12, buf, 2, 0.9f), "past the end");
    BAD_ST(herd_comm_win_flush(NULL, w, 0));
    BAD_ON(c, herd_comm_win_flush(c, NULL, 0), "win_flush: win is NULL");
    BAD_ON(c, herd_comm_win_flush(c, w, 1), "win_flush: target 1");
    BAD_ST(herd_comm_win_unlock_begin(NULL, w, 0));
    BAD_ON(c, herd_comm_win_unlock_begin(c, NULL, 0), "win is NULL");
    BAD_ON(c, herd_comm_win_unlock_begin(c, w, 1), "target 1");
    BAD_ST(herd_comm_win_wait(NULL, w));
    BAD_ON(c, herd_comm_win_wait(c, NULL), "win_wait: win is NULL");
    BAD_ST(herd_comm_win_unlock(NULL, w, 0));
    BAD_ON(c, herd_comm_win_unlock(c, NULL, 0), "win_unlock: win is NULL");
    BAD_ON(c, herd_comm_win_unlock(c, w, 1), "win_unlock: target 1");
    ASSERT_OK(herd_comm_win_unlock(c, w, 0));
    BAD_ST(herd_comm_win_free(NULL, fake));
    ASSERT_OK(herd_comm_win_free(c, w));
    (void)out;
    herd_comm_free(c);
    herd_world_free(hw);
}

/* Each engine checks a range against its own windows: every one this
 * process can start alone (not mpi's, which its launcher sizes). */
static void test_comm_windows(void)
{
    size_t tested = 0;
    for (size_t i = 0; herd_engines[i]; i++)
        if (!(herd_engines[i]->caps & HERD_ENGINE_LAUNCHER_SIZED) && (herd_engines[i]->caps & HERD_ENGINE_WINDOWS))
            window_args(herd_engines[i]), tested++;
    ASSERT_TRUE(tested >= 2); /* threads and loopback */
}

/* ---- herd_engine.h ------------------------------------------------------- */

static void *noop(void *p) { return p; }

static void test_engine(void)
{
    herd_err err;
    const herd_engine *e = NULL;
    herd_world *w = NULL;
    herd_comm *c = NULL;
    int arg;
    BAD(herd_engine_pick("threads", NULL, &err), "out is NULL");
    BAD(herd_engine_pick("no-such-engine", &e, &err), "unknown engine 'no-such-engine'");
    ASSERT_TRUE(e == NULL);
    ASSERT_OK(herd_engine_pick("threads", &e, NULL));
    BAD(herd_world_create(e, 1, NULL, &err), "out is NULL");
    BAD(herd_world_create(NULL, 1, &w, &err), "engine is NULL");
    BAD(herd_world_create(e, 0, &w, &err), "at least one worker");
    ASSERT_OK(herd_world_create(e, 2, &w, NULL));
    BAD(herd_world_endpoint(w, 0, NULL, &err), "out is NULL");
    BAD(herd_world_endpoint(NULL, 0, &c, &err), "world is NULL");
    BAD(herd_world_endpoint(w, 2, &c, &err), "rank 2");
    BAD(herd_world_run(NULL, noop, &arg, 0, &err), "world is NULL");
    BAD(herd_world_run(w, NULL, &arg, 0, &err), "fn is NULL");
    herd_world_free(w);
}

const herd_test herd_tests_args[] = {
    {"args_comm_p2p", test_comm_p2p, 20},
    {"args_comm_windows", test_comm_windows, 20},
    {"args_engine", test_engine, 20},
    HERD_TEST_END,
};
