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

/* herd sim --measured-compute: SimGrid times the real arithmetic. */
static bool measured(void)
{
    const char *mode = getenv("HERD_SIM_COMPUTE");
    return mode && !strcmp(mode, "measured");
}

static double host_speed(void) { return sg_host_get_speed(sg_host_self()); }

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

/* herd sim --step-overhead S, in seconds (charged in either mode: SimGrid
 * cannot measure a framework herd does not have). */
static void sim_step_begin(herd_comm *c)
{
    (void)c;
    const char *s = getenv("HERD_SIM_STEP_OVERHEAD");
    double overhead = s ? strtod(s, NULL) : 0.0;
    if (overhead > 0)
        smpi_execute_flops(overhead * host_speed());
}

static void sim_compute(herd_comm *c, double flops)
{
    (void)c;
    if (flops > 0 && !measured())
        smpi_execute_flops(flops);
}

static void sim_span_begin(herd_comm *c, herd_compute_span *s)
{
    (void)c;
    s->rate = host_speed();
    s->start = simgrid_get_clock();
}

static void sim_span_reach(herd_comm *c, const herd_compute_span *s, double flops)
{
    (void)c;
    if (measured())
        return;
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
