#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"
#include "core/args.h"

/* Every algorithm, in the order `herd algos` lists them: one line each (the
 * table of algorithm x is herd__algo_x, defined in its own file). */
#define HERD_ALGOS(X)          \
    X(sgd)                     \
    X(allreduce)               \
    X(asgd)                    \
    X(amsgd)                   \
    X(hogwild)                 \
    X(easgd)                   \
    X(aeasgd)                  \
    X(ameasgd)                 \
    X(hogwild_easgd)           \
    X(eawild)                  \
    X(dpsgd)                   \
    X(adpsgd)                  \
    X(sgp)                     \
    X(osgp)                    \
    X(localsgd) X(postlocal)   \
    /* a new algorithm: one line above this one */

#define DECLARE(x) extern const herd_algo_ops herd__algo_##x;
#define ENTRY(x) &herd__algo_##x,
HERD_ALGOS(DECLARE)

const herd_algo_ops *const herd_algos[] = {HERD_ALGOS(ENTRY) NULL};

const herd_algo_ops *herd_algo_find(const char *name)
{
    for (size_t i = 0; herd_algos[i]; i++)
        if (!strcmp(herd_algos[i]->name, name))
            return herd_algos[i];
    return NULL;
}

/* An option the algorithm has not: the algorithms that have it, named. */
static herd_status foreign_option(const herd_algo_ops *ops, const char *name, herd_err *err)
{
    char names[512] = "";
    size_t len = 0;
    for (size_t i = 0; herd_algos[i] && len < sizeof names; i++)
        if (herd_opt_find(herd_algos[i]->opts, name))
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", herd_algos[i]->name);
    if (!len)
        return herd_err_set(err, HERD_EINVAL, "unknown option --%s", name);
    return herd_err_set(err, HERD_EINVAL, "--%s applies to %s, not --algo %s", name, names, ops->name);
}

herd_status herd_algo_opts_parse(const herd_algo_ops *ops, const herd_arg *args, size_t nargs, void *out, herd_err *err)
{
    herd_status st = HERD__NONNULL(err, ops, out);
    if (st == HERD_OK && nargs && !args)
        st = HERD__NONNULL(err, args);
    if (st < 0)
        return st;
    st = herd_opt_defaults(ops->opts, out, err);
    for (size_t i = 0; st == HERD_OK && i < nargs; i++) {
        if (!args[i].name)
            return herd_err_set(err, HERD_EINVAL, "herd_algo_opts_parse: args[%zu].name is NULL", i);
        const herd_opt *row = herd_opt_find(ops->opts, args[i].name);
        st = row ? herd_opt_parse(row, out, args[i].value, err) : foreign_option(ops, args[i].name, err);
    }
    return st;
}

const herd_opt *herd_algo_opt_find(const char *name, const herd_algo_ops **owner)
{
    for (size_t i = 0; herd_algos[i]; i++) {
        const herd_opt *row = herd_opt_find(herd_algos[i]->opts, name);
        if (row) {
            if (owner)
                *owner = herd_algos[i];
            return row;
        }
    }
    return NULL;
}

herd_status herd_algo_update(herd_algo *a, herd_worker *w, const herd_step_result *res, bool skip)
{
    if (!w)
        return HERD_EINVAL;
    if (!a || !a->ops) /* every step: two comparisons, named in the worker's err */
        return herd_err_set(&w->err, HERD_EINVAL, "herd_algo_update: %s is NULL", a ? "a->ops" : "a");
    w->skipped = skip;
    if (skip || (res && res->applied))
        return HERD_OK;
    if (a->ops->step)
        return a->ops->step(a, w);
    herd_optim_step(&w->optim, w->params, w->grads, 0, w->nparams, w->lr);
    return HERD_OK;
}

herd_status herd_algo_optim_init(const herd_algo_ops *ops, const void *opts, const herd_optim_config *run,
                                 const herd_model *model, size_t n, herd_optim *out, herd_err *err)
{
    herd_status st = HERD__NONNULL(err, ops, run, out);
    if (st < 0)
        return st;
    herd_optim_config oc = *run;
    if (ops->optim_config)
        ops->optim_config(ops, opts, &oc);
    if (!model)
        return herd_optim_init(out, &oc, n, err);
    size_t ng = herd_model_param_groups(model, NULL, 0);
    herd_param_group *groups = malloc((ng ? ng : 1) * sizeof *groups);
    if (!groups)
        return herd_err_set(err, HERD_ENOMEM, "out of memory for %zu parameter tensors", ng);
    herd_model_param_groups(model, groups, ng);
    st = herd_optim_init_groups(out, &oc, groups, ng, n, err);
    free(groups);
    return st;
}
