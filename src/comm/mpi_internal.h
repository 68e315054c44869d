/* mpi_internal.h — what the mpi engine's files share: mpi.c (the engine:
 * messages, collectives, MPI's windows), mpi_agent.c (the agent and
 * watchdog threads) and mpi_am.c (windows served by the agent over
 * messages). Internal to src/comm, the only place besides them that sees
 * mpi.h. See mpi_agent.c's top comment for the threads and the MPI lock. */
#ifndef HERD_COMM_MPI_INTERNAL_H
#define HERD_COMM_MPI_INTERNAL_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "comm/sim.h"

/* The watchdog of the window calls (see the top of mpi_agent.c). The calling
 * thread arms it with plain atomic stores (no lock on the hot path); the
 * watchdog looks every 20 ms. */
typedef struct watchdog {
    _Atomic double deadline;    /* 0: disarmed */
    _Atomic(const char *) what; /* the armed call: a string literal */
    atomic_size_t peer;
    atomic_bool quit;
    bool running;
    pthread_t thread;
    _Atomic double timeout_s;   /* for the message */
    size_t rank;
} watchdog;

/* The communication agent (see the top of mpi_agent.c). */
typedef struct agent {
    MPI_Comm quiet;   /* the agent's own duplicate, on which nothing is ever sent */
    long period_us;   /* its sleep while the worker is in and out of MPI */
    long idle_us;     /* its longest sleep with windows open and the worker elsewhere */
    atomic_bool quit;
    bool running;
    pthread_t thread;
    /* The agent waits on wake[0]: its poke socket (wake[1] -1), where every
     * rank of its host can wake it (herd__mpi_poke), else a pipe whose
     * wake[1] this process writes. */
    int wake[2];
    uint64_t job;     /* names the ranks' poke sockets */
    bool *local;      /* per rank: on this host, woken by a poke (NULL: no pokes) */
    atomic_int windows; /* the endpoint's windows on other ranks: requests may come */
} agent;

typedef struct am_state am_state; /* mpi_am.c */
typedef struct am_win am_win;     /* mpi_am.c */
typedef struct sim_win sim_win;     /* simwin.c */
typedef struct sim_agent sim_agent; /* simwin.c */

typedef struct mpi_comm {
    herd_comm base;
    MPI_Comm world;
    /* Held across every MPI call of this endpoint (MPI_THREAD_SERIALIZED:
     * the worker, an overlap thread and the agent take turns). */
    pthread_mutex_t mpi_lock;
    atomic_uint_fast64_t entries; /* MPI calls begun under mpi_lock, for the agent */
    watchdog dog;
    agent agent;
    am_state *am; /* not NULL: windows are served by the agents over messages (mpi_am.c) */
#ifdef HERD_SIM
    herd__sim_bench bench; /* herd sim --measured-compute: this rank's compute, timed (sim.h) */
    sim_agent *sim_agent;  /* its windows' agent (simwin.c), from the first window on */
#endif
} mpi_comm;

struct herd_req {
    MPI_Request r;
    size_t peer;
    int tag;
    bool recv;
};

/* A window. In a world of one rank it is plain local memory (`local`):
 * Open MPI 4.1's default one-sided components refuse a one-rank window, and
 * nobody else can reach it anyway. */
struct herd_win {
    MPI_Win win;
    char *local;
    unsigned flags; /* HERD_WIN_* */
    am_win *am;     /* not NULL: served over messages (mpi_am.c), win unused */
    sim_win *sim;   /* herd-sim: served by the agents' actors (simwin.c), win unused */
};

#ifdef HERD_SIM
/* SimGrid's ranks are actors of one process that never preempt each other,
 * and herd-sim has no agent: no lock. Where compute is measured, an MPI
 * call ends the stretch of compute before it (sim.h). */
static inline void mpi_enter(herd_comm *c)
{
    if (((mpi_comm *)c)->bench.on)
        herd__sim_bench_enter(&((mpi_comm *)c)->bench);
}

static inline void mpi_leave(herd_comm *c)
{
    if (((mpi_comm *)c)->bench.on)
        herd__sim_bench_leave(&((mpi_comm *)c)->bench);
}
#else
static inline void mpi_enter(herd_comm *c)
{
    mpi_comm *m = (mpi_comm *)c;
    pthread_mutex_lock(&m->mpi_lock);
    atomic_fetch_add_explicit(&m->entries, 1, memory_order_relaxed);
}

static inline void mpi_leave(herd_comm *c) { pthread_mutex_unlock(&((mpi_comm *)c)->mpi_lock); }
#endif

/* c's error for MPI's return code rc in `what`; called without the MPI lock. */
herd_status herd__mpi_fail(herd_comm *c, int rc, const char *what);
/* Between the polls of c's worker's wait that started at t_start
 * (monotonic s); it first serves the requests that have come to its
 * windows (mpi_am.c), as it is in MPI anyway. */
void herd__mpi_idle(herd_comm *c, double t_start);

/* dst[i] += src[i] for count floats, at any alignment (window memory, a
 * message's payload): an accumulate applied locally. */
static inline void herd__mpi_add_floats(char *dst, const void *src, size_t count)
{
    const char *s = src;
    for (size_t i = 0; i < count; i++) {
        float a, b;
        memcpy(&a, dst + i * sizeof a, sizeof a);
        memcpy(&b, s + i * sizeof b, sizeof b);
        a += b;
        memcpy(dst + i * sizeof a, &a, sizeof a);
    }
}
/* t += alpha * (src[i] - t) for the count floats t at dst (d rounded to
 * float, then t + d: herd_comm_win_blend), at any alignment. */
static inline void herd__mpi_blend_floats(char *dst, const void *src, size_t count, float alpha)
{
    const char *s = src;
    for (size_t i = 0; i < count; i++) {
        float t, x;
        memcpy(&t, dst + i * sizeof t, sizeof t);
        memcpy(&x, s + i * sizeof x, sizeof x);
        float d = alpha * (x - t);
        t += d;
        memcpy(dst + i * sizeof t, &t, sizeof t);
    }
}
/* For count floats v at vp and x at xp: v = mu v - upd[i] (rounded to
 * float), then x += v (herd_comm_win_heavy_ball), at any alignment. */
static inline void herd__mpi_heavy_ball_floats(char *vp, char *xp, const void *upd, size_t count, float mu)
{
    const char *u = upd;
    for (size_t i = 0; i < count; i++) {
        float v, x, g;
        memcpy(&v, vp + i * sizeof v, sizeof v);
        memcpy(&x, xp + i * sizeof x, sizeof x);
        memcpy(&g, u + i * sizeof g, sizeof g);
        v = mu * v - g;
        x += v;
        memcpy(vp + i * sizeof v, &v, sizeof v);
        memcpy(xp + i * sizeof x, &x, sizeof x);
    }
}
/* Polls a nonblocking collective (or any request) until it completes or the
 * deadline passes, the MPI lock held only for each test. */
herd_status herd__mpi_poll(herd_comm *c, MPI_Request *r, double deadline, const char *what);

/* ---- the endpoint's threads (mpi_agent.c) ------------------------------ */
/* Starts m's agent where MPI's thread level (provided) allows one and
 * there are several ranks (collective); where it cannot start, the
 * endpoint works without, progressing only inside its worker's calls. */
void herd__mpi_agent_start(mpi_comm *m, int provided);
/* Stops m's agent and frees what it holds (not its communicator). */
void herd__mpi_agent_free(mpi_comm *m);
/* Wakes rank's agent at once where a message alone would not: this rank's
 * own, or one of its host's, which shared memory does not wake (a message
 * over a socket wakes its agent by itself: sockwatch.h). */
void herd__mpi_poke(mpi_comm *m, size_t rank);
/* Starts and stops the watchdog of m's window calls. */
void herd__mpi_watchdog_start(mpi_comm *m);
void herd__mpi_watchdog_stop(mpi_comm *m);
#ifndef HERD_SIM
/* The agent's period in microseconds (HERD_MPI_PROGRESS_US, else its
 * default; 0: no agent); *given (NULL: not wanted): the variable set it. */
long herd__mpi_agent_period_us(bool *given);
/* Collective over comm: whether its ranks span several hosts; local (NULL:
 * not wanted) marks, per rank of comm, those of this host. */
bool herd__mpi_host_ranks(MPI_Comm comm, bool *local);
#endif

/* ---- windows over messages (mpi_am.c) ----------------------------------
 * Used where the ranks span several hosts and the user chose no one-sided
 * component: there Open MPI's windows (osc pt2pt) take several round trips
 * per operation, each answered only when the target enters MPI. Here an
 * operation is one message to the target's agent, which applies it to the
 * window's memory or answers with the data: a lock, a get, an accumulate
 * and the unlock of one exchange travel back to back, and the origin waits
 * once, for the answers. Locks are the agent's (shared or exclusive per
 * window, granted in order of arrival); the target's own worker takes them
 * too, without a message. */
/* Collective, at the endpoint's creation: *out NULL where it fails. */
herd_status herd__am_create(mpi_comm *m, am_state **out);
void herd__am_free(mpi_comm *m);
/* The agent's turn: serves every request that has come (the MPI lock
 * held); whether it served any or an answer is still on its way (a large
 * one moves only while MPI is called: the agent looks again soon). again:
 * where none is found, look once more (an agent's turn after a wake). */
bool herd__am_serve(mpi_comm *m, bool again);
herd_status herd__am_win_create(herd_comm *c, herd_win *w, void *base, size_t bytes, double deadline);
herd_status herd__am_win_free(herd_comm *c, herd_win *w, double deadline);
herd_status herd__am_lock(herd_comm *c, herd_win *w, size_t target, bool exclusive, double deadline);
herd_status herd__am_unlock(herd_comm *c, herd_win *w, size_t target, double deadline);
herd_status herd__am_unlock_begin(herd_comm *c, herd_win *w, size_t target);
herd_status herd__am_blend(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src, size_t count,
                           float alpha, float *fetched);
herd_status herd__am_heavy_ball(herd_comm *c, herd_win *w, size_t target, size_t offset_v, size_t offset_x,
                                const float *upd, size_t count, float mu);
herd_status herd__am_wait(herd_comm *c, herd_win *w, double deadline);
herd_status herd__am_get(herd_comm *c, herd_win *w, size_t target, size_t offset, void *dst, size_t bytes);
herd_status herd__am_put(herd_comm *c, herd_win *w, size_t target, size_t offset, const void *src, size_t bytes);
herd_status herd__am_accumulate(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src,
                                size_t count);
herd_status herd__am_flush(herd_comm *c, herd_win *w, size_t target, double deadline);

#ifdef HERD_SIM
/* herd-sim's windows, served by the agents' actors (simwin.c). */
herd_status herd__simwin_create(herd_comm *c, herd_win *w, void *base, size_t bytes);
herd_status herd__simwin_free(herd_comm *c, herd_win *w);
herd_status herd__simwin_lock(herd_comm *c, herd_win *w, size_t target, bool exclusive);
herd_status herd__simwin_unlock(herd_comm *c, herd_win *w, size_t target);
herd_status herd__simwin_unlock_begin(herd_comm *c, herd_win *w, size_t target);
herd_status herd__simwin_blend(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src, size_t count,
                               float alpha, float *fetched);
herd_status herd__simwin_heavy_ball(herd_comm *c, herd_win *w, size_t target, size_t offset_v, size_t offset_x,
                                    const float *upd, size_t count, float mu);
herd_status herd__simwin_wait(herd_comm *c, herd_win *w);
herd_status herd__simwin_get(herd_comm *c, herd_win *w, size_t target, size_t offset, void *dst, size_t bytes);
herd_status herd__simwin_put(herd_comm *c, herd_win *w, size_t target, size_t offset, const void *src, size_t bytes);
herd_status herd__simwin_accumulate(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src,
                                    size_t count);
herd_status herd__simwin_flush(herd_comm *c, herd_win *w, size_t target);
#endif

#endif

