/* The sim engine's data sets, shared by the simulated ranks (sim.h).
 *
 * All simulated ranks live in one process; herd-sim is linked with
 * --wrap=herd_data_open,--wrap=herd_dataset_free (mk/sim.mk) so that ranks
 * opening the same data set (spec, seed) share one read-only copy (data
 * sets are read-only after loading, herd_data.h) instead of holding one
 * each: 256 ranks of Fashion-MNIST would otherwise need 56 GB. The registry
 * of shared copies is reached through the environment, the one piece of
 * state SimGrid does not privatize per rank; ranks never run at the same
 * time (SimGrid schedules one at a time), so it needs no lock. It is the
 * engine's because sharing one process is. */
#include "comm/sim.h"

#ifdef HERD_SIM

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "herd/herd_data.h"

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

#endif
