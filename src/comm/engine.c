/* The registry of engines and the lifecycle wrappers (herd_engine.h).
 * Adding an engine: one file in src/comm/ defining
 * `const herd_engine herd__engine_<name>`, and one line in HERD__ENGINES.
 * The tables are const; nothing here is mutable. */
#include "herd/herd_comm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Built only where its library is (the Makefile defines HERD_HAVE_MPI for
 * this file and mpi.c alike). */
#ifdef HERD_HAVE_MPI
#define HERD__IF_MPI(X) X(mpi)
#else
#define HERD__IF_MPI(X)
#endif

/* Every engine, one line each; the first is the default. */
#define HERD__ENGINES(X) \
    X(threads)           \
    HERD__IF_MPI(X)      \
    X(loopback)

#define X(e) extern const herd_engine herd__engine_##e;
HERD__ENGINES(X)
#undef X

const herd_engine *const herd_engines[] = {
#define X(e) &herd__engine_##e,
    HERD__ENGINES(X)
#undef X
    NULL,
};

const herd_engine *herd_engine_find(const char *name)
{
    for (size_t i = 0; name && herd_engines[i]; i++)
        if (!strcmp(herd_engines[i]->name, name))
            return herd_engines[i];
    return NULL;
}

void herd_engine_names(char *buf, size_t cap)
{
    size_t len = 0;
    if (cap)
        buf[0] = 0;
    for (size_t i = 0; herd_engines[i] && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? ", " : "", herd_engines[i]->name);
}

const herd_engine *herd_engine_launcher(void)
{
    for (size_t i = 0; herd_engines[i]; i++)
        if (herd_engines[i]->launched && herd_engines[i]->launched())
            return herd_engines[i];
    return NULL;
}

herd_status herd_engine_pick(const char *name, const herd_engine **out, herd_err *err)
{
    if (!out)
        return herd_err_set(err, HERD_EINVAL, "herd_engine_pick: out is NULL");
    *out = NULL;
    if (!name || !*name) {
        const herd_engine *l = herd_engine_launcher();
        *out = l ? l : herd_engines[0];
        return HERD_OK;
    }
    if ((*out = herd_engine_find(name)))
        return HERD_OK;
    char names[256];
    herd_engine_names(names, sizeof names);
    if (!strcmp(name, "sim")) /* the simulator launches its own build, herd-sim: no engine to pick here */
        return herd_err_set(err, HERD_EINVAL,
                            "'sim' is not an engine of this herd (it has: %s): a simulated cluster runs through "
                            "'herd sim' (herd sim --help), which starts the sim engine's build under SimGrid",
                            names);
    return herd_err_set(err, HERD_EINVAL, "unknown engine '%s' (this herd has: %s)", name, names);
}

herd_status herd_world_create(const herd_engine *e, size_t workers, herd_world **out, herd_err *err)
{
    if (!out)
        return herd_err_set(err, HERD_EINVAL, "herd_world_create: out is NULL");
    *out = NULL;
    if (!e)
        return herd_err_set(err, HERD_EINVAL, "herd_world_create: engine is NULL");
    if (workers == 0 && !(e->caps & HERD_ENGINE_LAUNCHER_SIZED))
        return herd_err_set(err, HERD_EINVAL, "the %s engine needs at least one worker, got 0", e->name);
    return e->world_create(workers, out, err);
}

herd_status herd_world_endpoint(herd_world *w, size_t rank, herd_comm **out, herd_err *err)
{
    if (!out)
        return herd_err_set(err, HERD_EINVAL, "herd_world_endpoint: out is NULL");
    *out = NULL;
    if (!w)
        return herd_err_set(err, HERD_EINVAL, "herd_world_endpoint: world is NULL");
    if (rank < w->first_rank || rank - w->first_rank >= w->nlocal)
        return herd_err_set(err, HERD_EINVAL,
                            "the %s engine: rank %zu is not run by this process (it runs ranks %zu to %zu of %zu)",
                            w->engine->name, rank, w->first_rank, w->first_rank + w->nlocal - 1, w->size);
    herd_status st = w->engine->endpoint(w, rank, out, err);
    if (st == HERD_OK && *out)
        (*out)->clock = w->engine->clock;
    return st;
}

void herd_world_fail(herd_world *w, size_t rank)
{
    if (w && w->engine->fail)
        w->engine->fail(w, rank);
}

void herd_world_close(herd_world *w)
{
    if (w && w->engine->close)
        w->engine->close(w);
}

void herd_world_free(herd_world *w)
{
    if (w)
        w->engine->world_free(w);
}

void herd_comm_shutdown(void)
{
    for (size_t i = 0; herd_engines[i]; i++)
        if (herd_engines[i]->shutdown)
            herd_engines[i]->shutdown();
}

void herd_comm_abort(int code)
{
    for (size_t i = 0; herd_engines[i]; i++)
        if (herd_engines[i]->abort)
            herd_engines[i]->abort(code);
}

herd_status herd_world_run(herd_world *w, void *(*fn)(void *), void *arg0, size_t stride, herd_err *err)
{
    herd_status st = HERD_OK;
    char *arg = arg0;
    if (!w || !fn)
        return herd_err_set(err, HERD_EINVAL, "herd_world_run: %s is NULL", w ? "fn" : "world");
    if (w->nlocal == 1) {
        fn(arg);
        return HERD_OK;
    }
    pthread_t *th = calloc(w->nlocal, sizeof *th);
    size_t started = 0;
    if (!th)
        return herd_err_set(err, HERD_ENOMEM, "out of memory for %zu workers", w->nlocal);
    for (; started < w->nlocal; started++) {
        int e = pthread_create(&th[started], NULL, fn, arg + started * stride);
        if (e) {
            herd_world_fail(w, w->first_rank + started);
            st = herd_err_set(err, HERD_ENOMEM, "cannot start worker thread %zu: %s", started, strerror(e));
            break;
        }
    }
    for (size_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    return st;
}
