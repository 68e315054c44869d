/* herd_comm.h — the transport every engine provides, and the collectives
 * built once on top of it.
 *
 * A herd_comm is one worker's endpoint: rank, size, non-blocking tagged
 * send/receive, barrier, and one-sided windows (expose a flat buffer; others
 * lock / get / put / accumulate / unlock it without the owner's help).
 * Engines (herd_engine.h: how a run's worlds and endpoints are made, and
 * what a new engine implements) fill a herd_comm_ops table per endpoint;
 * callers use only the herd_comm_* wrappers below, which check arguments,
 * count bytes and time spent waiting, and enforce timeouts. What an
 * algorithm may ask of its endpoint is asked here too (herd_comm_any_thread,
 * herd_allreduce_applies_in_place), never of the ops table or the engine.
 * Nothing here knows what a layer or a model is.
 *
 * Threading: a herd_comm belongs to one worker thread; it may not be used by
 * two threads at once. Every wait takes a timeout: a peer that stops
 * answering yields HERD_ETIMEOUT with a message naming the peer, never a hang.
 * Ownership: a request is owned by the caller from isend/irecv until
 * herd_comm_wait (or a successful herd_comm_test) frees it; the buffer must
 * stay valid until then.
 */
#ifndef HERD_COMM_H
#define HERD_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd_engine.h"
#include "herd/herd_status.h"

typedef struct herd_comm herd_comm;
typedef struct herd_req herd_req; /* engine-defined */
typedef struct herd_win herd_win; /* engine-defined; starts with a herd_win_base */
struct herd_allreduce_opts; /* below, with the collectives */

/* Required: isend, irecv, wait, test, cancel, barrier, free. The window
 * hooks all or none (the engine's HERD_ENGINE_WINDOWS); allreduce_native
 * optional. */
/* Window flags. SHARED_LOCKS: every rank locks it shared only (readers and
 * element-wise atomic adders, who never exclude each other), except a
 * checkpoint's copy with every worker between two steps. An engine whose
 * shared and exclusive locks cannot be mixed (sim: SimGrid keeps one lock
 * mode per window) takes every lock exclusive on the other windows, and
 * honours shared ones on these. */
enum { HERD_WIN_SHARED_LOCKS = 1u << 0 };

typedef struct herd_comm_ops {
    const char *name; /* the engine's */
    herd_status (*isend)(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes, herd_req **req);
    herd_status (*irecv)(herd_comm *c, size_t peer, int tag, void *buf, size_t bytes, herd_req **req);
    /* Waits until req completes or the deadline (monotonic seconds) passes;
     * frees req when it completes. */
    herd_status (*wait)(herd_comm *c, herd_req *req, double deadline);
    /* Sets *done; frees req when done. */
    herd_status (*test)(herd_comm *c, herd_req *req, bool *done);
    /* Abandons a request that will not be waited for (after a failure). */
    void (*cancel)(herd_comm *c, herd_req *req);
    herd_status (*barrier)(herd_comm *c, double deadline);
    /* Collective: every rank exposes `bytes` bytes at base (may differ per
     * rank); flags: HERD_WIN_*. NULL: no one-sided windows (the wrappers say
     * HERD_EUNSUPPORTED). */
    herd_status (*win_create)(herd_comm *c, void *base, size_t bytes, unsigned flags, herd_win **win);
    herd_status (*win_lock)(herd_comm *c, herd_win *w, size_t target, bool exclusive, double deadline);
    herd_status (*win_unlock)(herd_comm *c, herd_win *w, size_t target);
    /* Like MPI_Get: dst is valid after win_flush or win_unlock of target. */
    herd_status (*win_get)(herd_comm *c, herd_win *w, size_t target, size_t offset, void *dst, size_t bytes);
    herd_status (*win_put)(herd_comm *c, herd_win *w, size_t target, size_t offset, const void *src, size_t bytes);
    /* target[offset..] += src[0..count) as floats. */
    herd_status (*win_accumulate)(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src,
                                  size_t count);
    /* Completes this rank's gets, puts and accumulates on target (the lock stays held). */
    herd_status (*win_flush)(herd_comm *c, herd_win *w, size_t target);
    /* Collective. */
    herd_status (*win_free)(herd_comm *c, herd_win *w);
    /* Optional: the engine's own float-sum allreduce (MPI_Allreduce); NULL if
     * none. All of herd_allreduce_opts but segment_bytes, wire (fp32) and
     * impl applies: buf = o->scale (never 0 here) x the sum, and the
     * finiteness answers. */
    herd_status (*allreduce_native)(herd_comm *c, float *buf, size_t count, const struct herd_allreduce_opts *o,
                                    double deadline);
    /* The engine's own allreduce beats herd's ring and is what "auto" picks
     * (threads: the buffers are in shared memory, no message need move them). */
    bool native_preferred;
    void (*free)(herd_comm *c);
    /* Optional: a send that completes only once the receiver has matched
     * it with a receive (MPI_Issend); NULL: herd_comm_issend is isend. */
    herd_status (*issend)(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes, herd_req **req);
    /* Optional, both or neither: win_unlock_begin ends this rank's epoch on
     * target as win_unlock does, without waiting for it; win_wait completes
     * every epoch on w so ended (their gets' data here, their writes in the
     * targets' memory). NULL: herd_comm_win_unlock_begin is win_unlock. */
    herd_status (*win_unlock_begin)(herd_comm *c, herd_win *w, size_t target);
    herd_status (*win_wait)(herd_comm *c, herd_win *w);
    /* Optional: herd_comm_win_blend applied by the target in one step (its
     * values then are the ones the blend read); NULL: a get, a flush and an
     * accumulate of the caller's. */
    herd_status (*win_blend)(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src, size_t count,
                             float alpha, float *fetched);
    /* Optional: herd_comm_win_heavy_ball applied by the target in one step;
     * NULL: a get, a flush, a put and an accumulate of the caller's. */
    herd_status (*win_heavy_ball)(herd_comm *c, herd_win *w, size_t target, size_t offset_v, size_t offset_x,
                                  const float *upd, size_t count, float mu);
} herd_comm_ops;

struct herd_comm {
    const herd_comm_ops *ops;
    size_t rank, size;
    double timeout_s;     /* for every wait; default 60 */
    bool any_thread;      /* set by the engine; callers ask herd_comm_any_thread */
    bool local_windows;   /* set by the engine; callers ask herd_comm_windows_local */
    uint64_t bytes_sent, bytes_recv;
    /* collective calls that involve other ranks (allreduce, allgather,
     * broadcast, barrier): how a caller shows that a step has none */
    uint64_t collectives;
    double wait_s;        /* time spent blocked in wait/barrier/lock */
    herd_err err;         /* detail of the last failure */
    /* Set by the owner once its run has failed: teardown (win_free, free)
     * then releases local resources only, as the collective calls would
     * wait for peers that may be gone or stuck. */
    bool failed;
    /* The engine's clock hooks (herd_engine_clock), set by
     * herd_world_endpoint; NULL where compute takes real time. Callers use
     * herd_comm_compute and the rest, below. */
    const herd_engine_clock *clock;
};

/* The wrappers: argument checks, byte counts, timeouts. HERD_EINVAL, the
 * detail in herd_comm_last_error(c): a peer, target or root that is not a
 * rank (>= size), a NULL buffer for a non-zero length, a NULL req, done or
 * win, a negative tag, a count whose bytes overflow, a window range
 * (offset + length) past the end of the target's window (the engine's
 * check), heavy ball's v and x ranges overlapping; c NULL, with no detail
 * (there is no c to hold it). herd_comm_win_free(c, NULL) is a no-op. */
herd_status herd_comm_isend(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes, herd_req **req);
herd_status herd_comm_irecv(herd_comm *c, size_t peer, int tag, void *buf, size_t bytes, herd_req **req);
/* As isend, but the request completes only once the receiver has matched
 * the message (where the engine has issend): a sender that tests it knows
 * whether its last message is still on the way, as an isend, which may
 * complete as soon as the message is buffered (the mpi engine's eager
 * sends, once in the socket), does not tell. */
herd_status herd_comm_issend(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes, herd_req **req);
herd_status herd_comm_wait(herd_comm *c, herd_req *req);
herd_status herd_comm_test(herd_comm *c, herd_req *req, bool *done);
void herd_comm_cancel(herd_comm *c, herd_req *req);
herd_status herd_comm_send(herd_comm *c, size_t peer, int tag, const void *buf, size_t bytes);
herd_status herd_comm_recv(herd_comm *c, size_t peer, int tag, void *buf, size_t bytes);
herd_status herd_comm_barrier(herd_comm *c);
herd_status herd_comm_win_create(herd_comm *c, void *base, size_t bytes, herd_win **win);
/* A window whose locks are all shared (HERD_WIN_SHARED_LOCKS). */
herd_status herd_comm_win_create_shared(herd_comm *c, void *base, size_t bytes, herd_win **win);
herd_status herd_comm_win_lock(herd_comm *c, herd_win *w, size_t target, bool exclusive);
herd_status herd_comm_win_unlock(herd_comm *c, herd_win *w, size_t target);
herd_status herd_comm_win_get(herd_comm *c, herd_win *w, size_t target, size_t offset, void *dst, size_t bytes);
herd_status herd_comm_win_put(herd_comm *c, herd_win *w, size_t target, size_t offset, const void *src, size_t bytes);
herd_status herd_comm_win_accumulate(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src,
                                     size_t count);
herd_status herd_comm_win_flush(herd_comm *c, herd_win *w, size_t target);
/* Ends this rank's epoch on target (the lock is released once the target has
 * applied the epoch) without waiting: the epoch's gets are valid, and its
 * puts and accumulates done, only after herd_comm_win_wait on w. Epochs on
 * several targets so ended overlap their round trips. Where the engine has
 * no such call, it is herd_comm_win_unlock. */
herd_status herd_comm_win_unlock_begin(herd_comm *c, herd_win *w, size_t target);
/* Completes every epoch this rank ended on w with herd_comm_win_unlock_begin. */
herd_status herd_comm_win_wait(herd_comm *c, herd_win *w);
/* The elastic move of target's floats toward src: for i < count, with t the
 * float at offset + 4i, fetched[i] = t, then t += alpha * (src[i] - t) (d =
 * alpha * (src[i] - t) rounded to float, then t + d), the caller holding a
 * lock on target. fetched is valid, and t moved, as a get's data and an
 * accumulate are (after a flush, an unlock or the wait of an ended epoch),
 * so the caller can compute the same d from src and fetched. Where the
 * engine applies it at the target (the agents' windows, herd-sim's), the
 * read and the add are one step there and the epoch needs no round trip
 * between them; elsewhere it is a get, a flush and an accumulate. */
herd_status herd_comm_win_blend(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src,
                                size_t count, float alpha, float *fetched);
/* A heavy-ball step kept at the target (a parameter server's momentum): for
 * i < count, with v the float at offset_v + 4i and x the one at offset_x +
 * 4i (the two ranges apart), v = mu v - upd[i] (rounded to float), then x +=
 * v; the caller holding target's exclusive lock. Done, as an accumulate is,
 * after a flush, an unlock or the wait of an ended epoch. Where the engine
 * applies it at the target (the agents' windows, herd-sim's) only upd
 * crosses the network and the epoch needs no round trip of its own;
 * elsewhere it is a get of v, a flush, a put of v and an accumulate. */
herd_status herd_comm_win_heavy_ball(herd_comm *c, herd_win *w, size_t target, size_t offset_v, size_t offset_x,
                                     const float *upd, size_t count, float mu);
herd_status herd_comm_win_free(herd_comm *c, herd_win *w);
void herd_comm_free(herd_comm *c);
/* The detail of the last failure on c. */
const char *herd_comm_last_error(const herd_comm *c);
/* Whether c may be driven from a thread other than its creator's (one at a
 * time): a communication thread beside compute. */
bool herd_comm_any_thread(const herd_comm *c);
/* Whether every rank's windows lie in this process's memory, so that a
 * one-sided get, put or accumulate is a copy that needs no message and no
 * help from the target (the threads engine): there a window beats any
 * exchange of messages. */
bool herd_comm_windows_local(const herd_comm *c);

/* ---- a worker's own compute, as its engine's clock counts it ---------
 * A worker says here what it computes, where it computes it; the engine
 * counts it on its clock. On the engines whose workers run on the
 * machine's clock (threads, mpi, loopback) these calls do nothing: the
 * compute took the time it took. An engine with a virtual clock
 * (HERD_ENGINE_VIRTUAL_CLOCK: the sim engine, herd sim) charges it there,
 * in one place (its herd_engine_clock); the worker never knows whether it
 * is simulated. The sim engine (src/comm/sim.h) charges what a worker
 * says in FLOPs at its simulated host's speed, so a simulation repeats to
 * the bit: a step's forward pass, its backward pass layer by layer against
 * a clock that runs beside communication (a layer's gradients are ready at
 * span start + backward FLOPs down to it / speed, so an exchange started
 * from grad_ready overlaps the layers still to come, as a GPU's stream and
 * its communication thread would), its local update, and the receive side
 * of an exchange where received floats are combined into the worker's own;
 * plus a fixed cost per step (herd sim --step-overhead). Reductions inside
 * a collective are not charged: they run inside its transfers' pipeline,
 * as a GPU's collective library runs them. Arithmetic nobody reports is
 * free there (evaluation is, on purpose: it observes the run). */

/* A step of the worker's training begins (before its forward pass is
 * charged): the engine adds what a step costs beside its arithmetic. */
void herd_comm_step_begin(herd_comm *c);
/* The worker has just done flops of arithmetic on its own data. */
void herd_comm_compute(herd_comm *c, double flops);
/* What combining one received float into the worker's own costs: a
 * multiply and an add (x += f (y - x) is three, a weighted sum two; two
 * stands for all). */
#define HERD_COMM_COMBINE_FLOPS 2.0
/* The worker has combined nfloats received floats into its own (gossip's
 * average, push-sum's mix, an elastic pull, a center's update):
 * herd_comm_compute of HERD_COMM_COMBINE_FLOPS each. */
void herd_comm_combined(herd_comm *c, size_t nfloats);
/* Compute that runs beside this worker's communication begins now
 * (backward, whose gradients go out as each layer's are ready): s marks
 * where, for herd_comm_span_reach. */
void herd_comm_span_begin(herd_comm *c, herd_compute_span *s);
/* The first flops of the compute begun at s are done: the worker's time is
 * brought up to when they would be, unless its communication since s has
 * taken it past that already. */
void herd_comm_span_reach(herd_comm *c, const herd_compute_span *s, double flops);

/* Every registered engine's shutdown hook (MPI_Finalize), before the
 * program exits; harmless when none was started. */
void herd_comm_shutdown(void);
/* Every registered engine's abort hook: where this process is a rank of a
 * job of several (MPI), ends the whole job with exit status `code`
 * (MPI_Abort) after a second's grace for the other ranks that failed too to
 * report: a rank that failed must neither leave the others waiting for it
 * nor wait for them in the collective MPI_Finalize. Returns at once when
 * there is no such job. */
void herd_comm_abort(int code);

/* ---- the threads engine ------------------------------------------------ */

/* What the workers of one process share: the threads engine's world (it
 * starts with a herd_world; herd_engine_find("threads") makes one through
 * the table as well). Create it once, then one endpoint per worker thread;
 * free the world after every endpoint is freed. */
typedef struct herd_threads_world herd_threads_world;
herd_status herd_threads_world_create(size_t nworkers, herd_threads_world **out, herd_err *err);
void herd_threads_world_free(herd_threads_world *w);
/* Marks the world failed (a worker died): every pending and future wait of
 * every endpoint returns HERD_EREMOTE naming `rank`. */
void herd_threads_world_fail(herd_threads_world *w, size_t rank);
/* Declares that every worker thread has ended: from now on win_free needs no
 * rendezvous, so one thread may free every rank's windows in turn. */
void herd_threads_world_close(herd_threads_world *w);
herd_status herd_comm_threads_create(herd_threads_world *w, size_t rank, herd_comm **out, herd_err *err);

/* ---- collectives, built on the transport -------------------------------- */

typedef enum herd_dtype { HERD_F32, HERD_F16, HERD_BF16 } herd_dtype;

/* Which allreduce: auto is the engine's own where the engine prefers it
 * (threads) and herd's ring elsewhere (mpi, sim); native falls back to the
 * ring on an engine without one. The engine's own sums fp32 only: a 16-bit
 * wire always takes the ring. */
typedef enum herd_allreduce_impl { HERD_ALLREDUCE_AUTO, HERD_ALLREDUCE_RING, HERD_ALLREDUCE_NATIVE } herd_allreduce_impl;

typedef struct herd_allreduce_opts {
    size_t segment_bytes;     /* pipeline segment; 0: default (1 MiB) */
    herd_dtype wire;          /* what travels on the wire; sums are done in fp32 */
    herd_allreduce_impl impl; /* 0: auto */
    float scale;              /* the result is scale x the sum (the mean: 1/size); 0: 1 */
    bool *nonfinite;          /* not NULL: set to whether the result holds a NaN or Inf */
    bool *input_nonfinite;    /* not NULL: set (never cleared) when this rank's own input held a NaN or Inf */
    /* Not NULL: the result is handed to apply instead of being left in buf:
     * apply(apply_ctx, lo, hi, r) for ranges covering [0, count) once each,
     * r[0, hi - lo) being the result on [lo, hi), where it may live in
     * another rank's buffer (read it, do not keep the pointer); buf is then
     * left holding anything. Not called at all when nonfinite is asked for
     * and the result holds a NaN or Inf. An engine with the buffers in
     * shared memory so saves copying the others' parts of the result. */
    void (*apply)(void *apply_ctx, size_t lo, size_t hi, const float *r);
    void *apply_ctx;
} herd_allreduce_opts;

/* In place: buf = sum over ranks of buf (count floats; same count on every
 * rank), times opts->scale; opts NULL: auto, fp32. Every rank ends with the
 * same bits: each element's sum is rounded, then multiplied by the scale, as
 * a separate pass would (an engine may do both, and the finiteness check, in
 * one pass over memory, as the threads engine's own does). Ring algorithm: reduce-scatter then all-gather over `size` chunks,
 * each chunk pipelined in segments; each rank sends 2(n-1)/n of the buffer. */
herd_status herd_allreduce(herd_comm *c, float *buf, size_t count, const herd_allreduce_opts *opts);
/* Whether herd_allreduce(c, ..., o) takes the engine's own allreduce with
 * the buffers in shared memory (HERD_ENGINE_SHARED_MEMORY), which hands
 * o->apply each range of the result where it lies, possibly in another
 * rank's buffer, so an update passed as apply reads the result without a
 * copy. Asks o->impl and o->wire only, and answers alike for every world
 * size (a caller choosing its path on it takes the same path everywhere). */
bool herd_allreduce_applies_in_place(const herd_comm *c, const herd_allreduce_opts *o);
/* buf on every rank = buf on root. */
herd_status herd_broadcast(herd_comm *c, void *buf, size_t bytes, size_t root);
/* out (size * bytes) = concatenation of every rank's `in` (bytes each).
 * herd_allreduce, herd_broadcast and herd_allgather check their arguments
 * as the wrappers above do (opts->wire and opts->impl: one of their enums). */
herd_status herd_allgather(herd_comm *c, const void *in, void *out, size_t bytes);

/* fp32 <-> fp16 / bf16 conversion (round to nearest even; fp16 saturates to
 * +-Inf past 65504, which the caller's overflow check sees). */
void herd_f32_to_f16(const float *in, uint16_t *out, size_t n);
void herd_f16_to_f32(const uint16_t *in, float *out, size_t n);
void herd_f32_to_bf16(const float *in, uint16_t *out, size_t n);
void herd_bf16_to_f32(const uint16_t *in, float *out, size_t n);
/* The portable scalar conversions (the above may use the CPU's instructions). */
uint16_t herd__f32_to_f16_portable(float f);
float herd__f16_to_f32_portable(uint16_t h);

#endif
