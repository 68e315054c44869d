/* The sim engine's compute-time model and shared data sets (simtime.h). */
#include "run/simtime.h"

#ifdef HERD_SIM

#include <simgrid/engine.h>
#include <simgrid/host.h>
#include <smpi/smpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/simcharge.h"
#include "herd/herd_data.h"

static bool measured(void)
{
    const char *mode = getenv("HERD_SIM_COMPUTE");
    return mode && !strcmp(mode, "measured");
}

static void charge(double flops) { herd__sim_charge_flops(flops); }

/* Brings this rank's simulated time up to t (nothing if it is past t). */
static void run_until(const herd__simclock *k, double t)
{
    double now = simgrid_get_clock();
    if (t > now)
        smpi_execute_flops((t - now) * k->speed);
}

double herd__simtime_step_overhead(void)
{
    const char *s = getenv("HERD_SIM_STEP_OVERHEAD");
    double v = s ? strtod(s, NULL) : 0.0;
    return v > 0 ? v : 0.0;
}

void herd__simtime_step_begin(herd__simclock *k, const herd_model *m, size_t batch)
{
    k->speed = sg_host_get_speed(sg_host_self());
    k->batch = batch;
    double overhead = herd__simtime_step_overhead();
    if (overhead > 0)
        smpi_execute_flops(overhead * k->speed);
    charge(herd_model_forward_flops(m) * (double)batch);
    k->t0 = simgrid_get_clock();
}

void herd__simtime_backward(const herd__simclock *k, const herd_model *m, size_t param_off)
{
    if (!measured())
        run_until(k, k->t0 + herd_model_backward_flops_done(m, param_off) * (double)k->batch / k->speed);
}

void herd__simtime_backward_end(const herd__simclock *k, const herd_model *m)
{
    if (!measured())
        run_until(k, k->t0 + (herd_model_train_flops(m) - herd_model_forward_flops(m)) * (double)k->batch / k->speed);
}

void herd__simtime_update(const herd_model *m)
{
    charge(HERD_SIM_UPDATE_FLOPS_PER_PARAM * (double)herd_model_nparams(m));
}


/* ---- data sets shared by the simulated ranks ---- */

#define REGISTRY_ENV "HERD_SIM_DATA_CACHE"

typedef struct shared_data {
    struct shared_data *next;
    char spec[1024];
    uint64_t seed;
    herd_dataset train, test;
    size_t refs; /* datasets handed out and not yet freed */
} shared_data;

typedef struct registry {
    shared_data *head;
} registry;

herd_status __real_herd_data_open(const char *spec, uint64_t seed, herd_dataset *train, herd_dataset *test,
                                  herd_err *err);
void __real_herd_dataset_free(herd_dataset *d);
herd_status __wrap_herd_data_open(const char *spec, uint64_t seed, herd_dataset *train, herd_dataset *test,
                                  herd_err *err);
void __wrap_herd_dataset_free(herd_dataset *d);

/* The process's registry, created on first use (NULL: out of memory). */
static registry *get_registry(void)
{
    const char *s = getenv(REGISTRY_ENV);
    void *p = NULL;
    if (s && sscanf(s, "%p", &p) == 1 && p)
        return p;
    registry *r = calloc(1, sizeof *r);
    char buf[64];
    snprintf(buf, sizeof buf, "%p", (void *)r);
    if (!r || setenv(REGISTRY_ENV, buf, 1) != 0) {
        free(r);
        return NULL;
    }
    return r;
}

herd_status __wrap_herd_data_open(const char *spec, uint64_t seed, herd_dataset *train, herd_dataset *test,
                                  herd_err *err)
{
    registry *reg = get_registry();
    const char *key = spec ? spec : "";
    if (!reg || strlen(key) >= sizeof reg->head->spec) /* not shareable: a private copy */
        return __real_herd_data_open(spec, seed, train, test, err);
    for (shared_data *e = reg->head; e; e = e->next)
        if (e->seed == seed && !strcmp(e->spec, key)) {
            *train = e->train, *test = e->test;
            e->refs += 2;
            return HERD_OK;
        }
    shared_data *e = calloc(1, sizeof *e);
    if (!e)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    herd_status st = __real_herd_data_open(spec, seed, &e->train, &e->test, err);
    if (st < 0) {
        free(e);
        return st;
    }
    snprintf(e->spec, sizeof e->spec, "%s", key);
    e->seed = seed;
    e->refs = 2;
    e->next = reg->head;
    reg->head = e;
    *train = e->train, *test = e->test;
    return HERD_OK;
}

void __wrap_herd_dataset_free(herd_dataset *d)
{
    registry *reg = d && d->x ? get_registry() : NULL;
    for (shared_data **pe = reg ? &reg->head : NULL; pe && *pe; pe = &(*pe)->next) {
        shared_data *e = *pe;
        if (d->x != e->train.x && d->x != e->test.x)
            continue;
        memset(d, 0, sizeof *d);
        if (--e->refs == 0) {
            *pe = e->next;
            __real_herd_dataset_free(&e->train);
            __real_herd_dataset_free(&e->test);
            free(e);
        }
        return;
    }
    __real_herd_dataset_free(d);
}

#else

void herd__simtime_step_begin(herd__simclock *k, const herd_model *m, size_t batch)
{
    (void)k, (void)m, (void)batch;
}

void herd__simtime_backward(const herd__simclock *k, const herd_model *m, size_t param_off)
{
    (void)k, (void)m, (void)param_off;
}

void herd__simtime_backward_end(const herd__simclock *k, const herd_model *m) { (void)k, (void)m; }

void herd__simtime_update(const herd_model *m) { (void)m; }

double herd__simtime_step_overhead(void) { return 0.0; }

#endif
