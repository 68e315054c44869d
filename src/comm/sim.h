/* sim.h — the sim engine (internal to src/comm): herd-sim is herd built
 * with SimGrid's smpicc and -DHERD_SIM (mk/sim.mk), and its mpi engine,
 * run under smpirun by `herd sim`, is the sim engine: every worker a rank
 * on a simulated host, its messages and windows timed by SimGrid's network
 * model, in one process whose ranks SimGrid runs one at a time. What makes
 * it the sim engine is in src/comm alone, behind the engine's table:
 *   - mpi.c waits blocking (exact in simulated time) and avoids SimGrid's
 *     defects where its #ifdef HERD_SIM blocks say; windows are served by
 *     the ranks' agents, SimGrid actors (simwin.c), not by SMPI;
 *   - its table adds HERD__SIM_CAPS (HERD_ENGINE_VIRTUAL_CLOCK: run code
 *     asks that capability, never whether it is simulated) and
 *     HERD__SIM_CLOCK, the clock below;
 *   - simdata.c shares the data sets between the ranks of the process.
 *
 * Time. herd sim runs SMPI with simulate-computation off: a rank's real
 * computing costs no simulated time. The clock (simclock.c, the
 * herd_engine_clock behind herd_comm_compute and the rest, herd_comm.h)
 * charges what the worker says it computed instead, as FLOPs executed on
 * its simulated host (smpi_execute_flops; sg_host_get_speed), so a
 * simulation is repeatable to the bit:
 *   - step_begin: HERD_SIM_STEP_OVERHEAD seconds (herd sim --step-overhead
 *     S): a framework's per-step cost (kernel launches, Python), which a
 *     model of FLOPs alone leaves out;
 *   - compute: the FLOPs as said (the run's forward pass, x batch; its
 *     update, herd_model_nparams x the optimizer's FLOPs per parameter;
 *     an algorithm's combining of received floats, herd_comm_combined);
 *   - span_begin / span_reach: backward, layer by layer, against a compute
 *     clock of the worker, as if compute and communication ran side by side
 *     (a GPU's stream and its communication thread). The span starts when
 *     backward does, and a layer's gradients are ready at start + (backward
 *     FLOPs from the last layer down to it) / speed. When backward reports a
 *     layer ready, the rank's simulated time is brought up to that instant
 *     (if it is behind: it is ahead when communication started for earlier
 *     layers took longer), and the algorithm's grad_ready hook runs from
 *     there: allreduce with overlap reduces a bucket from that hook, so
 *     bucket k's reduction starts at max(its gradients' readiness, the end of
 *     bucket k-1's), and a step costs max(compute, the chain of reductions)
 *     rather than their sum. After backward the time is brought up to the
 *     end of backward.
 * The update is charged as FLOPs although a GPU's is bound by memory
 * bandwidth: either way it is a small share of a step (0.02% for resnet20
 * at batch 32, 6% for mlp at batch 16). Evaluation is charged nothing: it
 * observes the run, as a trainer's held-out evaluation of saved weights
 * would, and the times it would add are left out of epoch_s, train_s and
 * the curves anyway. Charged to worker 0, it would also skew an
 * asynchronous run's curve: the others train on while worker 0 evaluates,
 * so at worker 0's training time the run is further on than that time
 * accounts for (an evaluation of 500 examples every 8 global steps of batch
 * 32 is about 40% of worker 0's compute: its time to a target would come
 * out that much short).
 * HERD_SIM_COMPUTE=measured (herd sim --measured-compute) times the real
 * compute instead of counting its FLOPs, as SMPI's own benchmarking would
 * (a stretch of compute between two MPI calls, run on a host of
 * HERD_SIM_REAL_SPEED flop/s, takes its seconds x that rate in FLOPs on the
 * simulated host), but herd does the timing itself, with SMPI's off, so that
 * backward still runs beside communication: SMPI would charge backward's
 * compute at the first MPI call after it, so that a bucket's reduction
 * started from grad_ready would wait for the layers computed meanwhile. The
 * stretches (herd__sim_bench) end at each MPI call (mpi_enter) and at each of
 * the clock's hooks; outside a span each is charged as it ends, inside one
 * it is added to the span's compute clock, and the rank's time is brought
 * up to that clock as in the FLOP mode. A stretch is the rank's thread's CPU
 * time, which counts nothing of other ranks only if each rank has a thread
 * of its own: herd sim runs SimGrid's thread contexts in this mode. The
 * step overhead is charged in either mode. */
#ifndef HERD_COMM_SIM_H
#define HERD_COMM_SIM_H

#include "herd/herd_engine.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef HERD_SIM
extern const herd_engine_clock herd__sim_clock;
/* The mpi agent (mpi_agent.c), as the simulator models it: an actor of
 * SimGrid on each rank's host that serves the windows' requests over
 * simulated messages, as the real agents' protocol does (simwin.c). What a
 * real agent adds beyond the messages is the time to wake (or to preempt
 * the target's compute) and answer, which `herd sim --agent-wake-us` gives
 * (HERD_SIM_AGENT_US; measured on two real hosts by bench/lab's sim-predict):
 * the agent sleeps that long before it serves a lock (it then serves the
 * epoch's requests, sent back to back, in the same turn) and before each
 * flush (what follows a flush waits for another turn). The origin's host
 * is not busy meanwhile. It is not charged where the target itself waits
 * inside MPI at that simulated instant: a real worker that waits serves
 * its own windows at once (herd__mpi_idle), no agent to wake. mpi.c says
 * when a rank waits (herd__sim_waiting), in a table the process's ranks
 * share, reached through the environment as simdata.c's registry is. */
void herd__sim_agent_answer(size_t target);
void herd__sim_waiting(size_t rank, bool on);

/* A rank's measured compute (HERD_SIM_COMPUTE=measured; see above). */
typedef struct herd__sim_bench {
    bool on;            /* compute is measured: the rest is used */
    double real_speed;  /* flop/s of this machine, as herd sim --real-speed says */
    double mark;        /* the thread's CPU time where the current stretch began */
    bool in_span;       /* a span (backward) is open: stretches go to its clock */
    double span_start;  /* its start, in simulated seconds */
    double span_cpu;    /* the compute done in it so far, in real seconds */
    double span_rate;   /* the simulated host's flop/s */
} herd__sim_bench;

void herd__sim_bench_init(herd__sim_bench *b);
/* The rank's host at its speed: herd sim's platforms give a slow host
 * (--slow) as a pstate of the cluster, which HERD_SIM_PSTATES ("H:P,...",
 * by the number in the host's name node-H) names; herd-sim sets it here,
 * once per rank, before any compute. */
void herd__sim_host_init(void);
/* The rank enters MPI: its compute since the last mark is charged (or
 * added to the open span, its time brought up to the span's clock). */
void herd__sim_bench_enter(herd__sim_bench *b);
/* It leaves MPI: its compute counts from here. */
void herd__sim_bench_leave(herd__sim_bench *b);
/* c's bench (mpi.c). */
herd__sim_bench *herd__sim_bench_of(herd_comm *c);
#define HERD__SIM_CAPS HERD_ENGINE_VIRTUAL_CLOCK
#define HERD__SIM_CLOCK (&herd__sim_clock)
#else
#define HERD__SIM_CAPS 0u
#define HERD__SIM_CLOCK NULL
#endif

#endif
