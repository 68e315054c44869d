/* The ThreadSanitizer build's synthetic data, made once per test process.
 *
 * Under make tsan the Makefile links herd-tests with
 * --wrap=herd_data_open,--wrap=herd_dataset_free and defines
 * HERD_TEST_DATA_CACHE: a synthetic data set, a pure function of (spec,
 * seed), is made by its first run and lent, read-only, to every run of the
 * test after it (the sim engine shares its ranks' data sets the same way,
 * src/comm/simdata.c). Making 70000 synthetic examples took 1.2 of a small
 * run's 1.5 CPU seconds under TSan, and a test runs herd_train up to 36
 * times. herd_data_open runs before any worker starts, so TSan had nothing
 * to see in it; make test and make asan make every run's data afresh.
 * Data read from files is never lent: a test may change a file between
 * two runs. */
#ifdef HERD_TEST_DATA_CACHE

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "herd/herd_data.h"

herd_status __real_herd_data_open(const char *spec, uint64_t seed, herd_dataset *train, herd_dataset *test,
                                  herd_err *err);
void __real_herd_dataset_free(herd_dataset *d);
herd_status __wrap_herd_data_open(const char *spec, uint64_t seed, herd_dataset *train, herd_dataset *test,
                                  herd_err *err);
void __wrap_herd_dataset_free(herd_dataset *d);

typedef struct made {
    struct made *next;
    char *spec;
    uint64_t seed;
    herd_dataset train, test; /* kept until the test process ends */
} made;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static made *sets;

herd_status __wrap_herd_data_open(const char *spec, uint64_t seed, herd_dataset *train, herd_dataset *test,
                                  herd_err *err)
{
    if (!spec || strncmp(spec, "synthetic:", 10) != 0 || !train || !test)
        return __real_herd_data_open(spec, seed, train, test, err);
    herd_status st = HERD_OK;
    pthread_mutex_lock(&lock);
    made *m = sets;
    while (m && (m->seed != seed || strcmp(m->spec, spec) != 0))
        m = m->next;
    if (!m) { /* the first run of (spec, seed) makes it */
        m = calloc(1, sizeof *m);
        char *s = m ? strdup(spec) : NULL;
        if (!s) {
            free(m), m = NULL;
            st = herd_err_set(err, HERD_ENOMEM, "out of memory");
        } else if ((st = __real_herd_data_open(spec, seed, &m->train, &m->test, err)) != HERD_OK) {
            free(s), free(m), m = NULL;
        } else {
            m->spec = s, m->seed = seed, m->next = sets, sets = m;
        }
    }
    if (m)
        *train = m->train, *test = m->test;
    pthread_mutex_unlock(&lock);
    return st;
}

void __wrap_herd_dataset_free(herd_dataset *d)
{
    bool lent = false;
    pthread_mutex_lock(&lock);
    for (made *m = sets; m && d && d->x && !lent; m = m->next)
        lent = d->x == m->train.x || d->x == m->test.x;
    pthread_mutex_unlock(&lock);
    if (lent)
        memset(d, 0, sizeof *d); /* kept for the next run */
    else
        __real_herd_dataset_free(d);
}

#endif
