/* The MPI engine: one worker per MPI rank (Open MPI or MPICH; SimGrid SMPI
 * compiles it unchanged). The only file of herd that includes mpi.h; built
 * only when the build finds mpicc (HERD_HAVE_MPI), and only then in the
 * registry. A world is the job's MPI_COMM_WORLD: size ranks, this process runs
 * one of them (first_rank = its rank); the endpoint is a duplicate of it.
 *
 * Waits poll MPI_Test with a short sleep between polls so that a deadline can
 * be enforced (MPI has no timed wait) without spinning a core; windows are
 * passive-target RMA. In herd-sim (HERD_SIM, SimGrid's SMPI) waits block
 * instead, which is exact in simulated time, windows are served by agents
 * that are SimGrid actors (simwin.c) rather than SMPI's, and SimGrid 3.32's
 * other defects are avoided (the #ifdef HERD_SIM blocks say which).
 *
 * Beside each endpoint's worker run two threads of its own (mpi_agent.c):
 * the communication agent, which answers the windows' traffic and moves
 * the messages in flight while the worker computes, the reason every MPI
 * call of the endpoint is made holding its `mpi_lock`; and the watchdog
 * that bounds the window calls MPI cannot time (GUARDED below).
 */
#include "comm/comm_internal.h"
#include "core/clock.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef HERD_HAVE_MPI

#include "comm/mpi_internal.h"

#include <unistd.h>

herd_status herd__mpi_fail(herd_comm *c, int rc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    mpi_enter(c);
    MPI_Error_string(rc, msg, &len);
    mpi_leave(c);
    return herd_err_set(&c->err, HERD_EIO, "rank %zu: %s failed: %.*s", c->rank, what, len, msg);
}


/* Makes one MPI call holding the endpoint's MPI lock; its return code. */
#define MPI_LOCKED(c, call) (mpi_enter(c), herd__mpi_rc = (call), mpi_leave(c), herd__mpi_rc)

#define MPI_TRY(c, call)                               \
    do {                                               \
        int herd__mpi_rc;                              \
        if (MPI_LOCKED(c, call) != MPI_SUCCESS)        \
            return herd__mpi_fail((c), herd__mpi_rc, #call); \
    } while (0)

static MPI_Comm world_of(herd_comm *c) { return ((mpi_comm *)c)->world; }

/* Runs one window call under the watchdog, deadline the caller's or now
 * plus the timeout. */
#define GUARDED(c, what_, peer_, deadline_, call)                                  \
    do {                                                                           \
        watchdog *herd__d = &((mpi_comm *)(c))->dog;                               \
        atomic_store(&herd__d->timeout_s, (c)->timeout_s);                         \
        atomic_store(&herd__d->what, (what_));                                     \
        atomic_store(&herd__d->peer, (peer_));                                     \
        atomic_store(&herd__d->deadline, (deadline_));                             \
        int herd__mpi_rc;                                                          \
        int herd__grc = MPI_LOCKED(c, call);                                       \
        atomic_store(&herd__d->deadline, 0.0);                                     \
        if (herd__grc != MPI_SUCCESS)                                              \
            return herd__mpi_fail((c), herd__grc, #call);                                \
    } while (0)

/* A receive (recv), or a send, synchronous (MPI_Issend) where sync. */
static herd_status m_start(herd_comm *c, size_t peer, int tag, void *buf, size_t bytes, bool recv, bool sync,
                           herd_req **req)
{
    if (bytes > (size_t)INT32_MAX)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: message of %zu bytes is too large for MPI", c->rank, bytes);
    herd_req *r = malloc(sizeof *r);
    if (!r)
        return herd_err_set(&c->err, HERD_ENOMEM, "out of memory");
    r->peer = peer, r->tag = tag, r->recv = recv;
    int herd__mpi_rc;
    int rc = recv   ? MPI_LOCKED(c, MPI_Irecv(buf, (int)bytes, MPI_BYTE, (int)peer, tag, world_of(c), &r->r))
             : sync ? MPI_LOCKED(c, MPI_Issend(buf, (int)bytes, MPI_BYTE, (int)peer, tag, world_of(c), &r->r))
                    : MPI_LOCKED(c, MPI_Isend(buf, (int)bytes, MPI_BYTE, (int)peer, tag, world_of(c), &r->r));
    if (rc != MPI_SUCCESS) {
        free(r);
        return herd__mpi_fail(c, rc, recv ? "MPI_Irecv" : sync ? "MPI_Issend" : "MPI_Isend");
    }
    *req = r;
    return HERD_OK;
}

static herd_status m_isend(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes, herd_req **req)
{
    return m_start(c, peer, tag, (void *)buf, bytes, false, false, req);
}

static herd_status m_issend(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes, herd_req **req)
{
    return m_start(c, peer, tag, (void *)buf, bytes, false, true, req);
}

static herd_status m_irecv(herd_comm *c, size_t peer, int tag, void *buf, size_t bytes, herd_req **req)
{
    return m_start(c, peer, tag, buf, bytes, true, false, req);
}

static herd_status m_test(herd_comm *c, herd_req *req, bool *done)
{
    int flag = 0;
    MPI_TRY(c, MPI_Test(&req->r, &flag, MPI_STATUS_IGNORE));
    *done = flag != 0;
    if (flag)
        free(req);
    return HERD_OK;
}

/* Between polls: yield the core for the first 20 ms of a wait (a transfer
 * in flight completes within that), then sleep 50 us, and 1 ms after the
 * first second, so a rank waiting for a slow peer stays nearly idle. */
static void backoff(double t_start)
{
    double waited = herd__now() - t_start;
    if (waited < 0.02) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, waited < 1.0 ? 50000L : 1000000L};
    nanosleep(&ts, NULL);
}

void herd__mpi_idle(herd_comm *c, double t_start)
{
#ifndef HERD_SIM
    mpi_comm *m = (mpi_comm *)c;
    if (m->am) { /* a waiting worker serves its windows itself, sparing its agent a wake */
        mpi_enter(c);
        herd__am_serve(m, false);
        mpi_leave(c);
    }
#else
    (void)c;
#endif
    backoff(t_start);
}

/* herd-sim: the rank waits inside MPI for a blocking call (sim.h), where
 * it serves its own windows. */
#ifdef HERD_SIM
/* out = call, made as the rank waits inside MPI (a blocking MPI call, or
 * one on herd-sim's windows, simwin.c); its compute before it ends there
 * (sim.h). */
#define SIM_WAITING(c, out, call)                                              \
    do {                                                                       \
        mpi_enter(c);                                                          \
        herd__sim_waiting((c)->rank, true);                                    \
        (out) = (call);                                                        \
        herd__sim_waiting((c)->rank, false);                                   \
        mpi_leave(c);                                                          \
    } while (0)
#define SIM_BLOCKING(c, what, call)                                            \
    do {                                                                       \
        int herd__sim_rc;                                                      \
        SIM_WAITING(c, herd__sim_rc, call);                                    \
        if (herd__sim_rc != MPI_SUCCESS)                                       \
            return herd__mpi_fail((c), herd__sim_rc, (what));                  \
    } while (0)
#endif

static herd_status m_wait(herd_comm *c, herd_req *req, double deadline)
{
#ifdef HERD_SIM
    /* Under SimGrid a blocking wait is exact in simulated time (polling would
     * add its own sleeps and SimGrid's per-MPI_Test charge to every transfer),
     * and it is bounded: the simulator stops a run whose ranks all block. */
    (void)deadline;
    SIM_BLOCKING(c, "MPI_Wait", MPI_Wait(&req->r, MPI_STATUS_IGNORE));
    free(req);
    return HERD_OK;
#endif
    double t_start = herd__now();
    for (;;) {
        bool done = false;
        herd_req saved = *req;
        herd_status st = m_test(c, req, &done);
        if (st < 0 || done)
            return st;
        if (herd__now() >= deadline)
            return herd_err_set(&c->err, HERD_ETIMEOUT,
                                "rank %zu: timed out after %g s waiting to %s rank %zu (tag %d)", c->rank,
                                c->timeout_s, saved.recv ? "receive from" : "send to", saved.peer, saved.tag);
        herd__mpi_idle(c, t_start);
    }
}

static void m_cancel(herd_comm *c, herd_req *req)
{
    mpi_enter(c);
    MPI_Cancel(&req->r);
    MPI_Request_free(&req->r);
    mpi_leave(c);
    free(req);
}

herd_status herd__mpi_poll(herd_comm *c, MPI_Request *r, double deadline, const char *what)
{
#ifdef HERD_SIM
    (void)deadline, (void)what; /* as m_wait */
    SIM_BLOCKING(c, "MPI_Wait", MPI_Wait(r, MPI_STATUS_IGNORE));
    return HERD_OK;
#endif
    double t_start = herd__now();
    for (;;) {
        int flag = 0;
        MPI_TRY(c, MPI_Test(r, &flag, MPI_STATUS_IGNORE));
        if (flag)
            return HERD_OK;
        if (herd__now() >= deadline)
            return herd_err_set(&c->err, HERD_ETIMEOUT, "rank %zu: timed out after %g s in %s", c->rank,
                                c->timeout_s, what);
        herd__mpi_idle(c, t_start);
    }
}

static herd_status m_barrier(herd_comm *c, double deadline)
{
#ifdef HERD_SIM
    /* SimGrid 3.32's MPI_Ibarrier is no barrier: its root sends every rank
     * the release as it enters, whoever else has (smpi_nbc_impl.cpp), so a
     * rank left it while others were still in their epochs; its blocking
     * MPI_Barrier waits for all */
    (void)deadline;
    SIM_BLOCKING(c, "MPI_Barrier", MPI_Barrier(world_of(c)));
    return HERD_OK;
#endif
    MPI_Request r;
    MPI_TRY(c, MPI_Ibarrier(world_of(c), &r));
    return herd__mpi_poll(c, &r, deadline, "a barrier (some rank never arrived)");
}

static herd_status m_win_create(herd_comm *c, void *base, size_t bytes, unsigned flags, herd_win **out)
{
    herd_win *w = calloc(1, sizeof *w);
    if (!w)
        return herd_err_set(&c->err, HERD_ENOMEM, "out of memory");
    w->flags = flags;
    if (c->size == 1) {
        static char none;
        w->local = base ? base : &none;
        *out = w;
        return HERD_OK;
    }
#ifdef HERD_SIM
    herd_status sst;
    SIM_WAITING(c, sst, herd__simwin_create(c, w, base, bytes));
    if (sst < 0) {
        free(w);
        return sst;
    }
    *out = w;
    return HERD_OK;
#endif
    atomic_fetch_add(&((mpi_comm *)c)->agent.windows, 1); /* requests may come from now on */
    if (((mpi_comm *)c)->am) {
        herd_status st = herd__am_win_create(c, w, base, bytes, herd__comm_deadline(c));
        if (st < 0) {
            atomic_fetch_sub(&((mpi_comm *)c)->agent.windows, 1);
            free(w);
            return st;
        }
        *out = w;
        return HERD_OK;
    }
    int herd__mpi_rc;
    int rc = MPI_LOCKED(c, MPI_Win_create(base, (MPI_Aint)bytes, 1, MPI_INFO_NULL, world_of(c), &w->win));
    if (rc != MPI_SUCCESS) {
        atomic_fetch_sub(&((mpi_comm *)c)->agent.windows, 1);
        free(w);
        return herd__mpi_fail(c, rc, "MPI_Win_create");
    }
    /* a window's errors are fatal by default (they do not follow the
     * communicator's handler): a peer that died in the middle of a put
     * would end this process inside MPI, before herd could say who */
    (void)MPI_LOCKED(c, MPI_Win_set_errhandler(w->win, MPI_ERRORS_RETURN));
    *out = w;
    return HERD_OK;
}

static herd_status m_win_lock(herd_comm *c, herd_win *w, size_t target, bool exclusive, double deadline)
{
    if (w->local)
        return HERD_OK;
    if (w->am)
        return herd__am_lock(c, w, target, exclusive, deadline);
#ifdef HERD_SIM
    herd_status sst;
    SIM_WAITING(c, sst, herd__simwin_lock(c, w, target, exclusive));
    return sst;
#endif
    GUARDED(c, "MPI_Win_lock", target, deadline,
            MPI_Win_lock(exclusive ? MPI_LOCK_EXCLUSIVE : MPI_LOCK_SHARED, (int)target, 0, w->win));
    return HERD_OK;
}

static herd_status m_win_unlock(herd_comm *c, herd_win *w, size_t target)
{
    if (w->local)
        return HERD_OK;
    if (w->am)
        return herd__am_unlock(c, w, target, herd__comm_deadline(c));
#ifdef HERD_SIM
    herd_status sst;
    SIM_WAITING(c, sst, herd__simwin_unlock(c, w, target));
    return sst;
#endif
    GUARDED(c, "MPI_Win_unlock", target, herd__comm_deadline(c), MPI_Win_unlock((int)target, w->win));
    return HERD_OK;
}

/* Split only on the agents' windows and herd-sim's, whose unlock is a
 * request and its answer; Open MPI's MPI_Win_unlock has no nonblocking
 * form, so elsewhere it is the whole unlock. */
static herd_status m_win_unlock_begin(herd_comm *c, herd_win *w, size_t target)
{
    if (w->local)
        return HERD_OK;
    if (w->am)
        return herd__am_unlock_begin(c, w, target);
#ifdef HERD_SIM
    herd_status sst;
    SIM_WAITING(c, sst, herd__simwin_unlock_begin(c, w, target));
    return sst;
#endif
    return m_win_unlock(c, w, target);
}

static herd_status m_win_blend(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src,
                               size_t count, float alpha, float *fetched)
{
    if (w->local) {
        memcpy(fetched, w->local + offset, count * sizeof(float));
        herd__mpi_blend_floats(w->local + offset, src, count, alpha);
        return HERD_OK;
    }
    if (w->am)
        return herd__am_blend(c, w, target, offset, src, count, alpha, fetched);
#ifdef HERD_SIM
    herd_status sst;
    SIM_WAITING(c, sst, herd__simwin_blend(c, w, target, offset, src, count, alpha, fetched));
    return sst;
#endif
    return herd__comm_blend_by_parts(c, w, target, offset, src, count, alpha, fetched); /* Open MPI's windows */
}

static herd_status m_win_heavy_ball(herd_comm *c, herd_win *w, size_t target, size_t offset_v, size_t offset_x,
                                    const float *upd, size_t count, float mu)
{
    if (w->local) {
        herd__mpi_heavy_ball_floats(w->local + offset_v, w->local + offset_x, upd, count, mu);
        return HERD_OK;
    }
    if (w->am)
        return herd__am_heavy_ball(c, w, target, offset_v, offset_x, upd, count, mu);
#ifdef HERD_SIM
    herd_status sst;
    SIM_WAITING(c, sst, herd__simwin_heavy_ball(c, w, target, offset_v, offset_x, upd, count, mu));
    return sst;
#endif
    return herd__comm_heavy_ball_by_parts(c, w, target, offset_v, offset_x, upd, count, mu); /* Open MPI's windows */
}

static herd_status m_win_wait(herd_comm *c, herd_win *w)
{
    if (w->local)
        return HERD_OK;
    if (w->am)
        return herd__am_wait(c, w, herd__comm_deadline(c));
#ifdef HERD_SIM
    herd_status sst;
    SIM_WAITING(c, sst, herd__simwin_wait(c, w));
    return sst;
#endif
    return HERD_OK;
}

static herd_status m_win_get(herd_comm *c, herd_win *w, size_t target, size_t offset, void *dst, size_t bytes)
{
    if (w->local) {
        memcpy(dst, w->local + offset, bytes);
        return HERD_OK;
    }
    if (w->am)
        return herd__am_get(c, w, target, offset, dst, bytes);
#ifdef HERD_SIM
    herd_status sst;
    SIM_WAITING(c, sst, herd__simwin_get(c, w, target, offset, dst, bytes));
    return sst;
#endif
    GUARDED(c, "MPI_Get", target, herd__comm_deadline(c),
            MPI_Get(dst, (int)bytes, MPI_BYTE, (int)target, (MPI_Aint)offset, (int)bytes, MPI_BYTE, w->win));
    return HERD_OK;
}

static herd_status m_win_put(herd_comm *c, herd_win *w, size_t target, size_t offset, const void *src, size_t bytes)
{
    if (w->local) {
        memcpy(w->local + offset, src, bytes);
        return HERD_OK;
    }
    if (w->am)
        return herd__am_put(c, w, target, offset, src, bytes);
#ifdef HERD_SIM
    herd_status sst;
    SIM_WAITING(c, sst, herd__simwin_put(c, w, target, offset, src, bytes));
    return sst;
#endif
    GUARDED(c, "MPI_Put", target, herd__comm_deadline(c),
            MPI_Put(src, (int)bytes, MPI_BYTE, (int)target, (MPI_Aint)offset, (int)bytes, MPI_BYTE, w->win));
    return HERD_OK;
}

static herd_status m_win_accumulate(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src,
                                    size_t count)
{
    if (w->local) {
        herd__mpi_add_floats(w->local + offset, src, count);
        return HERD_OK;
    }
    if (w->am)
        return herd__am_accumulate(c, w, target, offset, src, count);
#ifdef HERD_SIM
    herd_status sst;
    SIM_WAITING(c, sst, herd__simwin_accumulate(c, w, target, offset, src, count));
    return sst;
#endif
    GUARDED(c, "MPI_Accumulate", target, herd__comm_deadline(c),
            MPI_Accumulate(src, (int)count, MPI_FLOAT, (int)target, (MPI_Aint)offset, (int)count, MPI_FLOAT, MPI_SUM,
                           w->win));
    return HERD_OK;
}

static herd_status m_win_flush(herd_comm *c, herd_win *w, size_t target)
{
    if (w->local)
        return HERD_OK;
    if (w->am)
        return herd__am_flush(c, w, target, herd__comm_deadline(c));
#ifdef HERD_SIM
    herd_status sst;
    SIM_WAITING(c, sst, herd__simwin_flush(c, w, target));
    return sst;
#endif
    GUARDED(c, "MPI_Win_flush", target, herd__comm_deadline(c), MPI_Win_flush((int)target, w->win));
    return HERD_OK;
}

static herd_status m_win_free(herd_comm *c, herd_win *w)
{
#ifdef HERD_SIM
    if (w->sim) {
        herd_status sst;
        SIM_WAITING(c, sst, herd__simwin_free(c, w));
        free(w);
        return sst;
    }
#endif
    if (!w->local)
        atomic_fetch_sub(&((mpi_comm *)c)->agent.windows, 1);
    if (w->am) {
        herd_status st = herd__am_win_free(c, w, herd__comm_deadline(c));
        free(w);
        return st;
    }
    if (w->local || c->failed) { /* failed: the job is about to be aborted */
        free(w);
        return HERD_OK;
    }
    int herd__mpi_rc;
    int rc = MPI_LOCKED(c, MPI_Win_free(&w->win));
    free(w);
    if (rc != MPI_SUCCESS)
        return herd__mpi_fail(c, rc, "MPI_Win_free");
    return HERD_OK;
}

static herd_status m_allreduce_sum(herd_comm *c, float *buf, size_t count, double deadline)
{
    MPI_Request r;
    if (count > (size_t)INT32_MAX)
        return herd_err_set(&c->err, HERD_EINVAL, "allreduce of %zu floats is too large for MPI", count);
#ifdef HERD_SIM
    /* SimGrid 3.32's in-place MPI_Iallreduce corrupts buffers of 64 KiB and
     * more; the blocking call is right (and herd-sim waits blocking anyway). */
    (void)r, (void)deadline;
    SIM_BLOCKING(c, "MPI_Allreduce", MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, world_of(c)));
    return HERD_OK;
#endif
    MPI_TRY(c, MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, world_of(c), &r));
    return herd__mpi_poll(c, &r, deadline, "MPI_Allreduce");
}

static herd_status m_allreduce_native(herd_comm *c, float *buf, size_t count, const herd_allreduce_opts *o,
                                      double deadline)
{
    herd__allreduce_start(buf, count, o);
    herd_status st = m_allreduce_sum(c, buf, count, deadline);
    if (st == HERD_OK)
        herd__allreduce_finish(buf, count, o);
    return st;
}

static void m_free(herd_comm *c)
{
    mpi_comm *m = (mpi_comm *)c;
    herd__mpi_agent_free(m);
    herd__mpi_watchdog_stop(m);
    herd__am_free(m);
    if (!c->failed) { /* collective, as win_free */
        MPI_Comm_free(&m->world);
        if (m->agent.quiet != MPI_COMM_NULL)
            MPI_Comm_free(&m->agent.quiet);
    }
    pthread_mutex_destroy(&m->mpi_lock);
    free(m);
}

static const herd_comm_ops mpi_ops = {
    .name = "mpi",
    .isend = m_isend,
    .issend = m_issend,
    .irecv = m_irecv,
    .wait = m_wait,
    .test = m_test,
    .cancel = m_cancel,
    .barrier = m_barrier,
    .win_create = m_win_create,
    .win_lock = m_win_lock,
    .win_unlock = m_win_unlock,
    .win_get = m_win_get,
    .win_put = m_win_put,
    .win_accumulate = m_win_accumulate,
    .win_flush = m_win_flush,
    .win_free = m_win_free,
    .allreduce_native = m_allreduce_native,
    .free = m_free,
    .win_unlock_begin = m_win_unlock_begin,
    .win_wait = m_win_wait,
    .win_blend = m_win_blend,
    .win_heavy_ball = m_win_heavy_ball,
};

static bool mpi_launched(void)
{
#ifdef HERD_SIM
    return true; /* herd-sim only ever runs under smpirun */
#endif
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS",
                                       "SMPI_RANK_COUNT"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return true;
    return false;
}

/* Open MPI 2 to 4's one-sided components: rdma serves the ranks of one host
 * (over shared memory) but not ranks on two hosts joined by TCP, where only
 * pt2pt (windows over messages) does, and Debian's openmpi-mca-params.conf
 * leaves pt2pt out: MPI_Win_create fails across hosts. Unless the user chose
 * (OMPI_MCA_osc, which `mpirun --mca osc X` sets as well), allow all three;
 * Open MPI takes the one of highest priority that can serve the window:
 * sm or rdma on one host (as fast as before), pt2pt across hosts. Whether
 * it chose; before MPI_Init, from the program's only thread (setenv). */
#define OSC_CHOICE "sm,rdma,pt2pt"
static bool choose_osc(void)
{
#ifdef HERD_SIM
    return false;
#else
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len); /* allowed before MPI_Init */
    int major = strncmp(version, "Open MPI v", 10) == 0 ? atoi(version + 10) : 0;
    return major >= 2 && major <= 4 && !getenv("OMPI_MCA_osc") && setenv("OMPI_MCA_osc", OSC_CHOICE, 0) == 0;
#endif
}

/* Open MPI's TCP transport sends a message above btl_tcp_eager_limit (64
 * KiB by default) by rendezvous: its first 64 KiB, then the rest only once
 * the receiver's answer is back. Across a loaded link that answer waits
 * behind the data going the other way: two ranks exchanging a lenet model
 * (247 KB) each way over 100 Mbit/s took 41 ms a step, twice the link's
 * time, where with a 1 MiB limit they take 24 ms, the link's 20 plus the
 * compute (tests/mpi/netns.sh's hosts, 2026-11-27). Unless the user set any
 * of the three (the environment, or `mpirun --mca`), messages up to 1 MiB
 * go eagerly; larger ones keep the rendezvous, the receiver's memory
 * bounded. Shared memory between the ranks of a host is not this
 * transport. Before MPI_Init, from the program's only thread (setenv). */
static void choose_tcp_eager(void)
{
#ifndef HERD_SIM
    static const char *const vars[] = {"OMPI_MCA_btl_tcp_eager_limit", "OMPI_MCA_btl_tcp_rndv_eager_limit",
                                       "OMPI_MCA_btl_tcp_max_send_size"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    if (strncmp(version, "Open MPI v", 10) != 0)
        return;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        (void)setenv(vars[i], "1048576", 0);
#endif
}

/* Initializes MPI unless done already (argc and argv may be NULL); *osc:
 * whether herd chose the one-sided components (choose_osc). */
static herd_status mpi_start(int *argc, char ***argv, bool *osc, herd_err *err)
{
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    *osc = !inited && choose_osc();
    if (!inited)
        choose_tcp_eager();
    /* SERIALIZED lets the allreduce overlap thread make the calls while the
     * compute thread makes none; where the library gives less, no overlap. */
    if (!inited && MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return herd_err_set(err, HERD_EIO, "MPI_Init failed");
    return HERD_OK;
}

/* This rank's endpoint, on its own duplicate of MPI_COMM_WORLD
 * (collective); am: its windows are served by the agents (mpi_am.c). */
static herd_status new_endpoint(bool am, herd_comm **out, herd_err *err)
{
    int provided = 0;
    MPI_Query_thread(&provided);
    mpi_comm *m = calloc(1, sizeof *m);
    if (!m)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    /* errors come back as codes, so herd can name the rank and stop cleanly */
    MPI_Comm_dup(MPI_COMM_WORLD, &m->world);
    MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
    int rank, size;
    MPI_Comm_rank(m->world, &rank);
    MPI_Comm_size(m->world, &size);
    m->base.ops = &mpi_ops;
    m->base.rank = (size_t)rank;
    m->base.size = (size_t)size;
    m->base.timeout_s = 60;
    m->base.any_thread = provided >= MPI_THREAD_SERIALIZED;
    m->agent.quiet = MPI_COMM_NULL;
    m->agent.wake[0] = m->agent.wake[1] = -1;
    pthread_mutex_init(&m->mpi_lock, NULL);
#ifdef HERD_SIM
    herd__sim_host_init();
    herd__sim_bench_init(&m->bench);
#endif
#ifndef HERD_SIM
    /* the windows' state before the agent that serves them starts */
    if (am && herd__am_create(m, &m->am) < 0) {
        *err = m->base.err;
        m_free(&m->base);
        return HERD_EIO;
    }
#endif
    herd__mpi_agent_start(m, provided);
    herd__mpi_watchdog_start(m);
    *out = &m->base;
#ifndef HERD_SIM
    if (am && !m->agent.running) { /* nobody would serve this rank's windows */
        herd_err_set(err, HERD_EIO,
                     "rank %d: no communication agent (HERD_MPI_PROGRESS_US=0, or no thread) to serve the windows "
                     "HERD_MPI_WINDOWS=agent asks for (HERD_MPI_WINDOWS=mpi takes Open MPI's)", rank);
        m->base.failed = true;
        m_free(&m->base);
        *out = NULL;
        return HERD_EIO;
    }
#else
    (void)am;
#endif
    return HERD_OK;
}

/* ---- the engine table ------------------------------------------------- */

extern const herd_engine herd__engine_mpi; /* below */

typedef struct mpi_world {
    herd_world base;
    bool am; /* windows served by the agents (mpi_am.c) */
} mpi_world;

/* Whether the windows are to be served by the agents over messages
 * (collective): HERD_MPI_WINDOWS=agent or =mpi says; else where the agents
 * run (HERD_MPI_PROGRESS_US is not 0) and the ranks span several hosts (Open MPI would carry its windows by pt2pt, several
 * round trips an operation) and the user chose no one-sided component
 * (osc: herd chose it). Never in herd-sim, whose windows need no target. */
static bool windows_by_agent(bool osc)
{
#ifdef HERD_SIM
    (void)osc;
    return false;
#else
    const char *e = getenv("HERD_MPI_WINDOWS");
    if (e && !strcmp(e, "agent"))
        return true;
    if ((e && !strcmp(e, "mpi")) || herd__mpi_agent_period_us(NULL) == 0) /* no agent to serve them: MPI's */
        return false;
    return herd__mpi_host_ranks(MPI_COMM_WORLD, NULL) && osc;
#endif
}

static herd_status e_world_create(size_t workers, herd_world **out, herd_err *err)
{
    bool osc;
    herd_status st = mpi_start(NULL, NULL, &osc, err);
    if (st < 0)
        return st;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (workers && workers != (size_t)size)
        return herd_err_set(err, HERD_EINVAL,
                            "--workers %zu does not match the %d MPI ranks (on the mpi engine each rank is one worker)",
                            workers, size);
    mpi_world *w = malloc(sizeof *w);
    if (!w)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    w->base = (herd_world){.engine = &herd__engine_mpi, .size = (size_t)size, .first_rank = (size_t)rank, .nlocal = 1};
    const char *forced = getenv("HERD_MPI_WINDOWS");
    w->am = size > 1 && windows_by_agent(osc);
    if (w->am && forced && !strcmp(forced, "agent"))
        w->base.note = "mpi: one-sided windows served by each rank's agent over messages (HERD_MPI_WINDOWS=agent)";
    else if (w->am)
        w->base.note = "mpi: one-sided windows served by each rank's agent over messages (the ranks span several "
                       "hosts; HERD_MPI_WINDOWS=mpi takes Open MPI's own)";
    else if (osc && size > 1)
        w->base.note = "mpi: one-sided windows over Open MPI's osc " OSC_CHOICE
                       " (pt2pt where the ranks are on several hosts; set OMPI_MCA_osc to choose)";
    *out = &w->base;
    return HERD_OK;
}

static herd_status e_endpoint(herd_world *w, size_t rank, herd_comm **out, herd_err *err)
{
    (void)rank; /* the one local rank: herd_world_endpoint checked it */
    return new_endpoint(((mpi_world *)w)->am, out, err);
}

static void e_world_free(herd_world *w) { free((mpi_world *)w); }

static void e_shutdown(void)
{
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (inited && !finalized)
        MPI_Finalize();
}

static void e_abort(int code)
{
#ifdef HERD_SIM
    /* Every rank is an actor of one process: the first that fails ends the
     * simulation with its status, what the ranks printed flushed first.
     * smpirun exits 0 after MPI_Abort; and a rank that returned instead left
     * the others' messages to its ended actor (its window agent's mailbox),
     * on which SimGrid 3.32 crashed (SIGSEGV in
     * MailboxImpl::find_matching_comm: an asynchronous run stopped by a
     * non-finite loss ended with exit 139, not 1). */
    fflush(NULL);
    _exit(code);
#endif
    int inited = 0, finalized = 0, size = 1;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (!inited || finalized)
        return;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size <= 1)
        return;
    /* The ranks blocked behind a stalled one time out within moments of each
     * other, and the first to abort silences the rest: in a ring allreduce
     * that first one may name only its neighbour, not the straggler two hops
     * away. A second's grace lets every one of them report. */
    struct timespec grace = {1, 0};
    nanosleep(&grace, NULL);
    MPI_Abort(MPI_COMM_WORLD, code);
}

#ifdef HERD_SIM
herd__sim_bench *herd__sim_bench_of(herd_comm *c) { return &((mpi_comm *)c)->bench; }
#endif

/* No fail or close hook: a failed rank's process ends (herd_comm_abort
 * ends the job), and its peers' waits end by their deadlines. Windows and
 * the endpoint may be driven from a second thread where MPI gives
 * MPI_THREAD_SERIALIZED (herd_comm_any_thread says). In herd-sim this is
 * the sim engine: a virtual clock, and the clock that charges it (sim.h). */
const herd_engine herd__engine_mpi = {
    .name = "mpi",
    .caps = HERD_ENGINE_WINDOWS | HERD_ENGINE_NATIVE_ALLREDUCE | HERD_ENGINE_ANY_THREAD | HERD_ENGINE_LAUNCHER_SIZED |
            HERD_ENGINE_PROCESS_PER_WORKER | HERD_ENGINE_CHECKPOINT | HERD__SIM_CAPS,
    .launched = mpi_launched,
    .world_create = e_world_create,
    .endpoint = e_endpoint,
    .world_free = e_world_free,
    .shutdown = e_shutdown,
    .abort = e_abort,
    .clock = HERD__SIM_CLOCK,
};

#endif
