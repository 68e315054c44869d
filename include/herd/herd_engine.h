/* herd_engine.h — engines: what a worker is, and how a run of them starts,
 * fails and ends. Included by herd_comm.h.
 *
 * An engine is one const herd_engine table (one file in src/comm/, one line
 * in the registry, src/comm/engine.c). Code outside src/comm/ picks an
 * engine by name (herd_engine_pick), asks its capabilities (caps), and never
 * names one: a run is
 *     herd_engine_pick -> herd_world_create -> herd_world_endpoint for each
 *     of the world's local ranks -> work on the endpoints (herd_comm.h) ->
 *     herd_comm_free each -> herd_world_close -> herd_world_free
 * and, before the program exits, herd_comm_shutdown (herd_comm_abort when
 * it failed).
 *
 * The seam: what a new engine implements.
 *   - Required: name, world_create, endpoint, world_free; and the endpoints'
 *     herd_comm_ops: isend, irecv, wait, test, cancel, barrier, free. Every
 *     other hook may be NULL, meaning nothing to do (launched: never started
 *     by a launcher); the window hooks of herd_comm_ops all or none
 *     (HERD_ENGINE_WINDOWS says which), allreduce_native optional
 *     (HERD_ENGINE_NATIVE_ALLREDUCE); clock with HERD_ENGINE_VIRTUAL_CLOCK
 *     only, all its hooks.
 *   - Time: an engine whose workers' compute runs on a clock of its own
 *     (a simulator's) charges it in one place, its clock hooks, for what
 *     the workers say they compute (herd_comm.h, "a worker's own compute");
 *     the workers never know whose clock it is.
 *   - A world starts with a herd_world (engine, size, first_rank, nlocal,
 *     note) filled by world_create; the process runs the workers first_rank ..
 *     first_rank + nlocal - 1 of size in all. world_create(workers): the
 *     run's number of workers, at least 1; 0 only for an engine whose
 *     launcher sets the size (HERD_ENGINE_LAUNCHER_SIZED), meaning "as many
 *     as it started". An impossible count is HERD_EINVAL saying why.
 *   - Ownership: the caller owns the world and every endpoint. endpoint is
 *     called at most once per local rank; each endpoint is freed
 *     (herd_comm_free) before world_free, and none is used after it. A failed
 *     call leaves nothing to free (*out NULL).
 *   - Threading: launched, world_create, endpoint, close, world_free,
 *     shutdown and abort are called from one thread (the program's), never
 *     concurrently with each other; fail from any thread at any time,
 *     concurrently with the endpoints' waits (that is its point). An
 *     endpoint is driven by one thread at a time (herd_comm.h): the one that
 *     made it, or any other where herd_comm_any_thread says so.
 *   - Waits: every wait an endpoint makes ends by the deadline its ops hook
 *     is given (HERD_ETIMEOUT naming the peer) or by fail (HERD_EREMOTE
 *     naming the failed rank); nothing spins without bound. world_create and
 *     endpoint may be collective over the run's processes (mpi: MPI_Init,
 *     MPI_Comm_dup), bounded by the launcher, as MPI has no timed form.
 *   - No mutable globals: every state lives in a world or an endpoint (herd-
 *     sim runs all ranks in one process); an engine whose library keeps
 *     process-wide state (MPI) ends it in shutdown/abort.
 *   - Capabilities (caps, the HERD_ENGINE_* bits below): each says what it
 *     promises; callers rely on one only where it is set, and an engine sets
 *     only what its endpoints honour.
 */
#ifndef HERD_ENGINE_H
#define HERD_ENGINE_H

#include <stdbool.h>
#include <stddef.h>

#include "herd/herd_status.h"

typedef struct herd_comm herd_comm;
typedef struct herd_engine herd_engine;

enum {
    /* One-sided windows: the endpoints fill every win_* hook of herd_comm_ops.
     * Without it herd_comm_win_create says HERD_EUNSUPPORTED, naming the engine. */
    HERD_ENGINE_WINDOWS = 1u << 0,
    /* The endpoints have the engine's own allreduce (ops->allreduce_native). */
    HERD_ENGINE_NATIVE_ALLREDUCE = 1u << 1,
    /* Every worker of the run is a thread of this process and their buffers
     * are in its memory: the native allreduce may hand a rank the result in
     * another's buffer (herd_allreduce_applies_in_place), and fail wakes
     * every waiter of the world. */
    HERD_ENGINE_SHARED_MEMORY = 1u << 2,
    /* An endpoint may be driven from a thread other than the one that
     * created it (one at a time), e.g. a communication thread beside
     * compute. Whether a given endpoint may is herd_comm_any_thread's answer
     * (the mpi engine's depends on the thread level MPI gives). */
    HERD_ENGINE_ANY_THREAD = 1u << 3,
    /* Several workers of the run may live in one process (nlocal > 1): the
     * caller runs each local worker on a thread of its own. Without it
     * nlocal is 1 and the worker may run on the thread that created it. */
    HERD_ENGINE_MANY_LOCAL = 1u << 4,
    /* herd's checkpoints work on it: the workers of a process copy their
     * state into memory worker 0 reads (every worker of the run in this
     * process: no messages), and those of the others send theirs to worker
     * 0 over their endpoints; worker 0 writes the file, which every process
     * reads on --resume (a filesystem they share). */
    HERD_ENGINE_CHECKPOINT = 1u << 5,
    /* The run's size is set by the launcher that started the processes
     * (mpirun): world_create takes 0 (or exactly that size). */
    HERD_ENGINE_LAUNCHER_SIZED = 1u << 6,
    /* Each worker is a process of its own: a worker fails as a process
     * does (exits, aborts, is killed), and the others must survive it or
     * report it; workers share no memory, only messages and windows. */
    HERD_ENGINE_PROCESS_PER_WORKER = 1u << 7,
    /* The workers run on a simulator's virtual clock, not the machine's
     * (the sim engine: SimGrid's simulated time, each worker a host of a
     * given speed): what a worker computes takes the virtual time the
     * engine's clock hooks (herd_engine_clock) charge for what the worker
     * says it computed (herd_comm_compute and the rest, herd_comm.h), and its
     * real duration counts for nothing. So a worker gains nothing from more
     * than one compute thread, nor from warming its kernels up. The simulator
     * runs every worker of the run in this one process, one at a time, each
     * from main(): what a program does once per process (re-executing
     * itself, setting its environment) it must not do where such an engine
     * launched it (herd_engine_launcher). */
    HERD_ENGINE_VIRTUAL_CLOCK = 1u << 8,
};

/* Where a stretch of a worker's compute that runs beside its communication
 * began, on the engine's clock (herd_comm_span_begin); the engine's to fill
 * and read. */
typedef struct herd_compute_span {
    double start; /* the clock's time when the stretch began */
    double rate;  /* flop/s of the worker's compute then */
} herd_compute_span;

/* How an engine with a virtual clock (HERD_ENGINE_VIRTUAL_CLOCK) charges a
 * worker's own compute: the hooks behind herd_comm_step_begin,
 * herd_comm_compute, herd_comm_span_begin and herd_comm_span_reach
 * (herd_comm.h), each called on the thread that drives the endpoint, all
 * required. An engine whose workers' compute takes the real time it takes
 * has none (its table's clock is NULL) and those calls do nothing. */
typedef struct herd_engine_clock {
    /* A step of the worker's training begins: what a step costs beside its
     * arithmetic (a framework's kernel launches, Python). */
    void (*step_begin)(herd_comm *c);
    /* The worker has just done flops of arithmetic on its own data. */
    void (*compute)(herd_comm *c, double flops);
    /* Compute that runs beside communication begins now: fills s. */
    void (*span_begin)(herd_comm *c, herd_compute_span *s);
    /* The first flops of the stretch begun at s are done: the worker's time
     * is brought up to when that happens, s->start + flops / s->rate, unless
     * it is past it already. */
    void (*span_reach)(herd_comm *c, const herd_compute_span *s, double flops);
} herd_engine_clock;

/* The part of every engine's world that callers read; an engine's own world
 * struct starts with it. */
typedef struct herd_world {
    const herd_engine *engine;
    size_t size;       /* workers in the whole run */
    size_t first_rank; /* this process runs ranks first_rank .. first_rank + nlocal - 1 */
    size_t nlocal;
    /* What the engine chose for the run that its user may want to know, as
     * one line (a string the engine owns), or NULL. */
    const char *note;
} herd_world;

struct herd_engine {
    const char *name; /* what --engine takes */
    unsigned caps;    /* HERD_ENGINE_* */
    /* Whether this process was started by the engine's launcher (mpirun,
     * srun, smpirun): herd_engine_pick(NULL) then picks it. Reads the
     * environment only (a program asks herd_engine_launcher first thing in
     * main). */
    bool (*launched)(void);
    herd_status (*world_create)(size_t workers, herd_world **out, herd_err *err);
    /* The endpoint of local rank `rank` (herd_world_endpoint checked it). */
    herd_status (*endpoint)(herd_world *w, size_t rank, herd_comm **out, herd_err *err);
    /* Worker `rank` failed: every pending and future wait of every local
     * endpoint returns HERD_EREMOTE naming it (the first failure is named). */
    void (*fail)(herd_world *w, size_t rank);
    /* Every local worker has ended: from now on teardown needs no
     * rendezvous, so one thread may free every rank's windows in turn. */
    void (*close)(herd_world *w);
    void (*world_free)(herd_world *w);
    /* Before the program exits: ends the engine's process-wide state
     * (MPI_Finalize); harmless when it was never started. */
    void (*shutdown)(void);
    /* A run failed: where this process is one of several of a job, ends
     * the whole job with exit status `code` (MPI_Abort) rather than leave the
     * others waiting; returns at once where there is no such job. */
    void (*abort)(int code);
    /* HERD_ENGINE_VIRTUAL_CLOCK: how the workers' compute is charged on its
     * clock; NULL otherwise. herd_world_endpoint hands it to each endpoint
     * (herd_comm's clock). */
    const herd_engine_clock *clock;
};

/* Every engine built into this herd, NULL-terminated; the first is the
 * default, where no launcher started this process. */
extern const herd_engine *const herd_engines[];

/* The engine called name, or NULL. */
const herd_engine *herd_engine_find(const char *name);
/* The engine whose launcher started this process (its launched hook says
 * so), or NULL: what a program asks before doing what it does once per
 * process (HERD_ENGINE_VIRTUAL_CLOCK). Reads the environment only. */
const herd_engine *herd_engine_launcher(void);
/* name NULL or empty: the engine whose launcher started this process, else
 * the default; otherwise the engine of that name, or HERD_EINVAL listing
 * the registered names. */
herd_status herd_engine_pick(const char *name, const herd_engine **out, herd_err *err);
/* "threads, mpi, ..." into buf (truncated to cap). */
void herd_engine_names(char *buf, size_t cap);

/* The lifecycle, through the table (argument checks; NULL hooks do
 * nothing). herd_world_endpoint refuses a rank that is not local. The
 * NULL-safe calls (fail, close, free) accept w == NULL. */
herd_status herd_world_create(const herd_engine *e, size_t workers, herd_world **out, herd_err *err);
herd_status herd_world_endpoint(herd_world *w, size_t rank, herd_comm **out, herd_err *err);
void herd_world_fail(herd_world *w, size_t rank);
void herd_world_close(herd_world *w);
/* Runs fn(arg0 + i * stride bytes) for each local worker i of w (neither
 * NULL: HERD_EINVAL), to its
 * end: on the calling thread where there is one (an engine's calls may have
 * to stay on the thread that made the endpoint, as MPI's do), else on a
 * thread each. Where a thread cannot start, the world is failed (the
 * workers already running end their waits) and joined: HERD_ENOMEM. */
herd_status herd_world_run(herd_world *w, void *(*fn)(void *), void *arg0, size_t stride, herd_err *err);
void herd_world_free(herd_world *w);

#endif
