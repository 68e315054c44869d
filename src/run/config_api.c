/* herd_config (herd_config.h): the run's configuration behind an opaque
 * handle, set and read by name through the option tables, and herd_train
 * on it. The handle owns copies of the strings it is given. */
#include <stdlib.h>
#include <string.h>

#include "herd/herd_algo.h"
#include "herd/herd_config.h"
#include "herd/herd_run.h"
#include "run/options.h"

struct herd_config {
    herd__train_config run;
    char **strs; /* copies of the names and values set, which run points into */
    size_t nstrs, cap;
};

herd__train_config *herd__config_run(herd_config *cfg) { return &cfg->run; }
const herd__train_config *herd__config_run_const(const herd_config *cfg) { return &cfg->run; }

herd_status herd_config_new(herd_config **out)
{
    if (!out)
        return HERD_EINVAL;
    herd_config *c = calloc(1, sizeof *c);
    *out = c;
    if (!c)
        return HERD_ENOMEM;
    herd__train_config_defaults(&c->run);
    return HERD_OK;
}

void herd_config_free(herd_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < cfg->nstrs; i++)
        free(cfg->strs[i]);
    free(cfg->strs);
    free(cfg);
}

/* A copy of s that cfg owns; NULL for NULL or out of memory (*oom). */
static const char *keep(herd_config *cfg, const char *s, bool *oom)
{
    if (!s)
        return NULL;
    if (cfg->nstrs == cfg->cap) {
        size_t cap = cfg->cap ? 2 * cfg->cap : 16;
        char **n = realloc(cfg->strs, cap * sizeof *n);
        if (!n) {
            *oom = true;
            return NULL;
        }
        cfg->strs = n, cfg->cap = cap;
    }
    char *c = strdup(s);
    if (!c) {
        *oom = true;
        return NULL;
    }
    cfg->strs[cfg->nstrs++] = c;
    return c;
}

/* p re-pointed from src's copies to dst's (the same index), or p itself
 * (a literal, argv: not the config's). */
static const char *moved(const herd_config *src, const herd_config *dst, const char *p)
{
    for (size_t i = 0; p && i < src->nstrs; i++)
        if (src->strs[i] == p)
            return dst->strs[i];
    return p;
}

void herd__config_swap(herd_config *a, herd_config *b)
{
    herd_config t = *a;
    *a = *b, *b = t;
}

herd_config *herd_config_dup(const herd_config *cfg)
{
    if (!cfg)
        return NULL;
    herd_config *d = calloc(1, sizeof *d);
    if (!d || !(d->strs = calloc(cfg->nstrs ? cfg->nstrs : 1, sizeof *d->strs))) {
        free(d);
        return NULL;
    }
    d->cap = cfg->nstrs ? cfg->nstrs : 1;
    for (; d->nstrs < cfg->nstrs; d->nstrs++)
        if (!(d->strs[d->nstrs] = strdup(cfg->strs[d->nstrs]))) {
            herd_config_free(d);
            return NULL;
        }
    d->run = cfg->run;
    for (const herd_opt *o = herd__run_options; o->name; o++)
        if (o->type == HERD_OPT_STR) {
            const char **f = (const char **)((char *)&d->run + o->offset);
            *f = moved(cfg, d, *f);
        }
    for (size_t i = 0; i < d->run.nalgo_args; i++) {
        d->run.algo_args[i].name = moved(cfg, d, d->run.algo_args[i].name);
        d->run.algo_args[i].value = moved(cfg, d, d->run.algo_args[i].value);
    }
    return d;
}

herd_status herd__config_set_arg(herd__train_config *cfg, const char *name, const char *value, herd_err *err)
{
    const herd_opt *row = herd__run_option_find(name);
    if (row)
        return herd_opt_parse(row, cfg, value, err);
    const herd_algo_ops *owner;
    row = herd_algo_opt_find(name, &owner);
    if (!row)
        return herd_err_set(err, HERD_EINVAL, "unknown option '--%s' (herd train --help lists them)", name);
    /* its form and bounds now; which algorithm takes it once --algo is known */
    void *scratch = calloc(1, owner->opts_size ? owner->opts_size : 1);
    if (!scratch)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    herd_status st = herd_opt_parse(row, scratch, value, err);
    free(scratch);
    if (st < 0)
        return st;
    if (herd__train_config_set(cfg, row->name, value) < 0)
        return herd_err_set(err, HERD_EINVAL, "too many algorithm options (at most %d)", HERD_MAX_ALGO_ARGS);
    return HERD_OK;
}

herd_status herd_config_set(herd_config *cfg, const char *name, const char *value, herd_err *err)
{
    if (!cfg || !name)
        return herd_err_set(err, HERD_EINVAL, "herd_config_set: %s is NULL", cfg ? "name" : "cfg");
    bool oom = false;
    const char *v = keep(cfg, value, &oom); /* a string option, an algorithm's, point to it */
    if (oom)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    return herd__config_set_arg(&cfg->run, name, v, err);
}

herd_status herd_config_get(const herd_config *cfg, const char *name, char *buf, size_t cap, herd_err *err)
{
    if (!cfg || !name || !buf || !cap)
        return herd_err_set(err, HERD_EINVAL, "herd_config_get: %s",
                            !cfg ? "cfg is NULL" : !name ? "name is NULL" : "buf is NULL or cap 0");
    buf[0] = 0;
    const herd_opt *row = herd__run_option_find(name);
    if (row) {
        herd_opt_format(row, &cfg->run, buf, cap);
        return HERD_OK;
    }
    const herd_algo_ops *owner;
    if (!herd_algo_opt_find(name, &owner))
        return herd_err_set(err, HERD_EINVAL, "unknown option '--%s' (herd train --help lists them)", name);
    for (size_t i = cfg->run.nalgo_args; i-- > 0;) /* the last given wins, as the run applies them in order */
        if (!strcmp(cfg->run.algo_args[i].name, name)) {
            snprintf(buf, cap, "%s", cfg->run.algo_args[i].value ? cfg->run.algo_args[i].value : "true");
            break;
        }
    return HERD_OK;
}

const herd_opt *herd_config_option(size_t i)
{
    for (size_t k = 0; herd__run_options[k].name; k++)
        if (k == i)
            return &herd__run_options[k];
    return NULL;
}

herd_status herd_config_check(const herd_config *cfg, herd_err *err)
{
    if (!cfg)
        return herd_err_set(err, HERD_EINVAL, "herd_config_check: cfg is NULL");
    return herd__config_validate(&cfg->run, err);
}

void herd_config_set_stop(herd_config *cfg, const atomic_int *stop)
{
    if (cfg)
        cfg->run.stop = stop;
}

herd_status herd_train(const herd_config *cfg, herd_train_result *res, herd_err *err)
{
    if (!cfg || !res) {
        if (res)
            memset(res, 0, sizeof *res), res->refused = true;
        return herd_err_set(err, HERD_EINVAL, "herd_train: %s is NULL", cfg ? "res" : "cfg");
    }
    return herd__train(&cfg->run, res, err);
}
