/* Ranks agree on the run before they compute: where the workers live in
 * several processes (mpirun, herd sim), each builds one record of what must
 * be the same everywhere (the algorithm and every one of its options, the
 * model's parameter count and its description's digest, the data's shape
 * and sizes, and every option of the run's table marked HERD_OPT_AGREE:
 * the model, batch, epochs, seed,
 * the optimizer...), and the ranks compare the records' hashes with one
 * 8-byte allgather. Where they differ, the records themselves are gathered
 * so that every rank builds the same message naming each differing item
 * and which ranks hold which value; the run is then refused on every rank
 * (rank 0 says it), before the algorithm's first message: a rank sizing
 * its buffers for another model or wire type would otherwise corrupt
 * memory or hang. The data's path and the thread count may differ (hosts
 * keep their files in their own places). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "herd/herd_algo.h"
#include "herd/herd_comm.h"
#include "herd/herd_nn.h"
#include "core/digest.h"
#include "run/options.h"
#include "run/run.h"

enum { ITEMS = 64, NAME_LEN = 24, VALUE_LEN = 96 };

typedef struct item {
    char name[NAME_LEN], value[VALUE_LEN];
} item;

typedef struct record {
    item it[ITEMS];
} record;

static void add(record *rec, size_t *n, const char *name, const char *fmt, ...)
{
    if (*n >= ITEMS)
        return;
    item *it = &rec->it[(*n)++];
    snprintf(it->name, sizeof it->name, "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(it->value, sizeof it->value, fmt, ap);
    va_end(ap);
}

/* A row's value (defaults included, as parsed), so that `--comm-dtype
 * fp32` and no flag at all compare equal. */
static void add_opt(record *rec, size_t *n, const herd_opt *o, const void *obj)
{
    char name[NAME_LEN], value[VALUE_LEN];
    snprintf(name, sizeof name, "--%s", o->name);
    herd_opt_format(o, obj, value, sizeof value);
    add(rec, n, name, "%s", value);
}

/* This process's record; rec zeroed first, so that equal runs hash equal:
 * what the run derived (the parameters, the data's shape and sizes), then
 * every option the run's table marks HERD_OPT_AGREE, then every option of
 * the algorithm. */
static void build(const herd_run *r, const herd_worker *w, record *rec)
{
    const herd__train_config *cfg = r->cfg;
    size_t n = 0;
    memset(rec, 0, sizeof *rec);
    add(rec, &n, "record", "herd-agree-2 %zu ranks", r->world->size);
    add(rec, &n, "--algo", "%s", r->algo_ops->name);
    add(rec, &n, "parameters", "%zu", w->nparams);
    const char *desc = herd_model_description(w->model); /* one path, another file on another host */
    add(rec, &n, "model description", "digest %016" PRIx64, herd__digest64(desc, strlen(desc), 0));
    add(rec, &n, "example shape", "%zux%zux%zu", r->train.c, r->train.h, r->train.w);
    add(rec, &n, "classes", "%zu", r->train.nclasses);
    add(rec, &n, "training examples", "%zu", r->train.n);
    add(rec, &n, "test examples", "%zu", r->test.n);
    for (const herd_opt *o = herd__run_options; o->name; o++)
        if ((o->flags & HERD_OPT_AGREE) && strcmp(o->name, "algo") && strcmp(o->name, "workers"))
            add_opt(rec, &n, o, cfg);
    for (const herd_opt *o = r->algo_ops->opts; o && o->name; o++)
        add_opt(rec, &n, o, r->algo_opts);
}

/* FNV-1a, 64 bits. */
static uint64_t hash(const void *p, size_t len)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * 0x100000001b3u;
    return h;
}

/* printf into msg at *len, never past cap - 1 (a long message is cut). */
static void appendf(char *msg, size_t *len, size_t cap, const char *fmt, ...)
{
    if (*len + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(msg + *len, cap - *len, fmt, ap);
    va_end(ap);
    if (k > 0)
        *len = *len + (size_t)k < cap ? *len + (size_t)k : cap - 1;
}

/* For item k: each value and the ranks that hold it, "--model lenet (ranks
 * 0,2-3) / mlp (rank 1)", appended to msg. */
static void describe(const record *all, size_t nranks, size_t k, bool first_item, char *msg, size_t *len, size_t cap)
{
    bool *done = calloc(nranks, sizeof *done);
    if (!done)
        return;
    appendf(msg, len, cap, "%s%s", first_item ? ": " : "; ", all[0].it[k].name);
    for (size_t a = 0; a < nranks; a++) {
        if (done[a])
            continue;
        const char *v = all[a].it[k].value;
        size_t count = 0;
        for (size_t b = a; b < nranks; b++)
            count += !strcmp(all[b].it[k].value, v);
        appendf(msg, len, cap, "%s %s (rank%s ", a ? " /" : "", *v ? v : "''", count > 1 ? "s" : "");
        bool first = true;
        for (size_t b = a; b < nranks; b++) {
            if (strcmp(all[b].it[k].value, v))
                continue;
            size_t e = b; /* ranks b .. e hold v */
            while (e + 1 < nranks && !strcmp(all[e + 1].it[k].value, v))
                e++;
            for (size_t i = b; i <= e; i++)
                done[i] = true;
            if (b == e)
                appendf(msg, len, cap, "%s%zu", first ? "" : ",", b);
            else
                appendf(msg, len, cap, "%s%zu-%zu", first ? "" : ",", b, e);
            first = false;
            b = e;
        }
        appendf(msg, len, cap, ")");
    }
    free(done);
}

herd_status herd__agree(const herd_run *r, const herd_worker *w, bool *differ_out, herd_err *err)
{
    herd_status st = HERD_OK;
    *differ_out = false;
    size_t nranks = r->world->size;
    record *mine = malloc(sizeof *mine), *all = NULL;
    uint64_t *hashes = calloc(nranks, sizeof *hashes);
    if (!mine || !hashes) {
        st = herd_err_set(err, HERD_ENOMEM, "out of memory");
        goto out;
    }
    build(r, w, mine);
    uint64_t h = hash(mine, sizeof *mine);
    if ((st = herd_allgather(w->comm, &h, hashes, sizeof h)) < 0)
        goto comm_failed;
    bool same = true;
    for (size_t i = 0; i < nranks; i++)
        same = same && hashes[i] == hashes[0];
    if (same)
        goto out;
    if (!(all = malloc(nranks * sizeof *all))) {
        st = herd_err_set(err, HERD_ENOMEM, "out of memory for %zu ranks' configurations", nranks);
        goto out;
    }
    if ((st = herd_allgather(w->comm, mine, all, sizeof *mine)) < 0)
        goto comm_failed;
    char msg[sizeof err->msg];
    size_t len = 0;
    appendf(msg, &len, sizeof msg, "ranks started with different configurations");
    size_t differ = 0;
    for (size_t k = 0; k < ITEMS; k++) {
        /* items named differently are another algorithm's options: its
         * --algo item says it */
        bool d = false, named = true;
        for (size_t i = 1; i < nranks; i++) {
            named = named && !strcmp(all[i].it[k].name, all[0].it[k].name);
            d = d || strcmp(all[i].it[k].value, all[0].it[k].value);
        }
        d = d && named;
        if (d && differ++ < 6)
            describe(all, nranks, k, differ == 1, msg, &len, sizeof msg);
    }
    if (differ > 6)
        appendf(msg, &len, sizeof msg, "; and %zu more", differ - 6);
    *differ_out = true;
    st = herd_err_set(err, HERD_EINVAL, "%s (every rank must be given the same options)",
                      msg);
    goto out;
comm_failed:
    if (err)
        *err = w->comm->err;
out:
    free(mine);
    free(all);
    free(hashes);
    return st;
}
