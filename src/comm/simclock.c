/* The sim engine's clock: a worker's compute charged in simulated time
 * (sim.h says what is charged and why). Built into herd-sim only. */
#include "comm/sim.h"

#ifdef HERD_SIM

#include <simgrid/actor.h>
#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <smpi/smpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double host_speed(void) { return sg_host_get_speed(sg_host_self()); }

void herd__sim_host_init(void)
{
    const char *s = getenv("HERD_SIM_PSTATES"), *name = sg_host_get_name(sg_host_self());
    size_t self;
    char tail;
    if (!s || !*s || sscanf(name, "node-%zu%c", &self, &tail) != 1)
        return;
    while (*s) {
        size_t host;
        int pstate, used = 0;
        if (sscanf(s, "%zu:%d%n", &host, &pstate, &used) != 2)
            return;
        if (host == self && pstate >= 0 && (unsigned long)pstate < (unsigned long)sg_host_get_nb_pstates(sg_host_self()))
            sg_host_set_pstate(sg_host_self(), pstate);
        s += used;
        s += *s == ',';
    }
}

static double agent_us(void)
{
    const char *s = getenv("HERD_SIM_AGENT_US");
    return s ? strtod(s, NULL) : 0.0;
}

/* Per rank, whether it waits inside MPI (sim.h); ranks past the table are
 * taken to compute. NULL where it cannot be had. */
#define WAITING_ENV "HERD_SIM_WAITING_TABLE"
#define WAITING_RANKS 65536

static unsigned char *waiting_table(void)
{
    const char *s = getenv(WAITING_ENV);
    void *p = NULL;
    if (s && sscanf(s, "%p", &p) == 1 && p)
        return p;
    p = calloc(WAITING_RANKS, 1);
    char buf[32];
    if (!p || snprintf(buf, sizeof buf, "%p", p) >= (int)sizeof buf || setenv(WAITING_ENV, buf, 1) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

void herd__sim_waiting(size_t rank, bool on)
{
    if (agent_us() <= 0 || rank >= WAITING_RANKS)
        return;
    unsigned char *t = waiting_table();
    if (t)
        t[rank] = on;
}

void herd__sim_agent_answer(size_t target)
{
    double us = agent_us();
    if (us <= 0)
        return;
    unsigned char *t = waiting_table();
    if (t && target < WAITING_RANKS && t[target])
        return; /* it serves its windows itself as it waits */
    sg_actor_sleep_for(us * 1e-6);
}

/* The calling thread's CPU time, in seconds. SMPI's clock_gettime (a macro
 * in code smpicc compiles) gives simulated time whatever the clock asked:
 * the parentheses call the C library's. */
static double cpu_now(void)
{
    struct timespec ts;
    if ((clock_gettime)(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0.0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void herd__sim_bench_init(herd__sim_bench *b)
{
    *b = (herd__sim_bench){0};
    const char *mode = getenv("HERD_SIM_COMPUTE"), *speed = getenv("HERD_SIM_REAL_SPEED");
    if (!mode || strcmp(mode, "measured") != 0)
        return;
    b->on = true;
    b->real_speed = speed ? strtod(speed, NULL) : 0.0;
    if (!(b->real_speed > 0))
        b->real_speed = 20e9; /* herd sim --real-speed's default */
    b->mark = cpu_now();
}

/* The rank's time brought up to the open span's compute clock. */
static void span_catch_up(herd__sim_bench *b)
{
    double t = b->span_start + b->span_cpu * b->real_speed / b->span_rate, now = simgrid_get_clock();
    if (t > now)
        smpi_execute_flops((t - now) * b->span_rate);
}

/* The stretch that ends now goes where it belongs: the open span's clock,
 * or the rank's time. The time its charge takes is no compute of the
 * rank's (a wait in SimGrid), so the next stretch starts after it. */
static void stretch_end(herd__sim_bench *b)
{
    double d = cpu_now() - b->mark;
    if (d < 0)
        d = 0;
    if (b->in_span) {
        b->span_cpu += d;
        span_catch_up(b);
    } else if (d > 0) {
        smpi_execute_flops(d * b->real_speed);
    }
    b->mark = cpu_now();
}

void herd__sim_bench_enter(herd__sim_bench *b) { stretch_end(b); }

void herd__sim_bench_leave(herd__sim_bench *b) { b->mark = cpu_now(); }

/* The hooks other than the span's end an open span (backward is done). */
static herd__sim_bench *bench_close(herd_comm *c)
{
    herd__sim_bench *b = herd__sim_bench_of(c);
    if (!b->on)
        return NULL;
    stretch_end(b);
    b->in_span = false;
    return b;
}

/* herd sim --step-overhead S, in seconds (charged in either mode: a
 * framework herd does not have cannot be measured). */
static void sim_step_begin(herd_comm *c)
{
    herd__sim_bench *b = bench_close(c);
    const char *s = getenv("HERD_SIM_STEP_OVERHEAD");
    double overhead = s ? strtod(s, NULL) : 0.0;
    if (overhead > 0)
        smpi_execute_flops(overhead * host_speed());
    if (b)
        b->mark = cpu_now();
}

static void sim_compute(herd_comm *c, double flops)
{
    if (!bench_close(c) && flops > 0)
        smpi_execute_flops(flops);
}

static void sim_span_begin(herd_comm *c, herd_compute_span *s)
{
    herd__sim_bench *b = bench_close(c);
    s->rate = host_speed();
    s->start = simgrid_get_clock();
    if (b) {
        b->in_span = true;
        b->span_start = s->start, b->span_rate = s->rate, b->span_cpu = 0.0;
    }
}

static void sim_span_reach(herd_comm *c, const herd_compute_span *s, double flops)
{
    herd__sim_bench *b = herd__sim_bench_of(c);
    if (b->on) { /* the layers' compute as measured, not their FLOPs */
        stretch_end(b);
        return;
    }
    double t = s->start + flops / s->rate, now = simgrid_get_clock();
    if (t > now)
        smpi_execute_flops((t - now) * s->rate);
}

const herd_engine_clock herd__sim_clock = {
    .step_begin = sim_step_begin,
    .compute = sim_compute,
    .span_begin = sim_span_begin,
    .span_reach = sim_span_reach,
};

#endif
