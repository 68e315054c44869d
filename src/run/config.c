/* The run's configuration: the algorithm's options, validation (the
 * defaults and each option's own bounds are its row's: options.c).
 * Everything here runs before any worker starts; nothing here knows an
 * algorithm or an engine by name. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "herd/herd_algo.h"
#include "run/options.h"
#include "run/run.h"

static const char *const fail_mode_names[] = {"default", "stop", "exit0", "exit1", "abort", "kill"};

herd_status herd__fail_mode_parse(const char *s, herd__fail_mode *out)
{
    for (size_t i = HERD_FAIL_STOP; i < sizeof fail_mode_names / sizeof fail_mode_names[0]; i++)
        if (!strcmp(s, fail_mode_names[i])) {
            *out = (herd__fail_mode)i;
            return HERD_OK;
        }
    return HERD_EINVAL;
}

const char *herd__fail_mode_name(herd__fail_mode m)
{
    return (size_t)m < sizeof fail_mode_names / sizeof fail_mode_names[0] ? fail_mode_names[m] : "?";
}

/* --optimizer lars's own --lr: the best of the sweep in
 * bench/specs/optimizer-sweep.toml (lenet, 8 workers x batch 512, 3 epochs: 0.80
 * and 0.83 on seeds 1 and 2 with --lars-eta 0.04; 0.89 at 1 x 64). The
 * paper's eta, 0.001, with lr 0.05 ended at 0.16 there. An algorithm's own
 * lr is tuned for sgd's step and does not apply to the trust ratio's. */
#define LARS_LR_DEFAULT 0.5f

/* An UNSET row (--lr, --momentum) the run was not given: the algorithm's
 * own default (its table's row of the same name), else the row's. */
static float algo_default(const herd_algo_ops *ops, const char *name)
{
    const herd_opt *row = herd_opt_find(ops->opts, name);
    if (!row || row->type != HERD_OPT_FLOAT || !row->def)
        row = herd__run_option_find(name);
    return strtof(row->def, NULL);
}

herd_status herd__train_config_set(herd__train_config *cfg, const char *name, const char *value)
{
    if (cfg->nalgo_args >= HERD_MAX_ALGO_ARGS)
        return HERD_ENOMEM;
    cfg->algo_args[cfg->nalgo_args++] = (herd_arg){name, value};
    return HERD_OK;
}

herd_status herd__algo_opts_parse(const herd_algo_ops *ops, const herd__train_config *cfg, void **out, herd_err *err)
{
    herd_status st = HERD_OK;
    /* an algorithm's rows lr and momentum are its defaults of the run's own */
    for (size_t i = 0; i < cfg->nalgo_args; i++)
        if (!strcmp(cfg->algo_args[i].name, "lr") || !strcmp(cfg->algo_args[i].name, "momentum"))
            return herd_err_set(err, HERD_EINVAL, "--%s is the run's option (herd_config_set), not one of --algo %s",
                                cfg->algo_args[i].name, ops->name);
    void *o = calloc(1, ops->opts_size ? ops->opts_size : 1);
    if (!o)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    HERD_TRY(herd_algo_opts_parse(ops, cfg->algo_args, cfg->nalgo_args, o, err));
    if (ops->check)
        HERD_TRY(ops->check(ops, o, cfg, err));
out:
    if (st < 0) {
        free(o);
        o = NULL;
    }
    *out = o;
    return st;
}

herd_status herd__check_workers(const herd__train_config *cfg, herd_err *err)
{
    return herd_opt_check(herd__run_option_find("workers"), cfg, err) < 0 ? HERD_EINVAL : HERD_OK;
}

herd_status herd__check_names(const herd__train_config *cfg, herd_err *err)
{
    /* an empty name is not "the default": NULL is */
    for (const herd_opt *o = herd__run_options; o->name; o++)
        if (o->type == HERD_OPT_STR && herd_opt_check(o, cfg, err) < 0)
            return HERD_EINVAL;
    return HERD_OK;
}

herd_status herd__check_config(herd__train_config *cfg, const herd_algo_ops **algo, herd_err *err)
{
    if (!cfg->algo || !(*algo = herd_algo_find(cfg->algo))) {
        char names[512] = "";
        for (size_t i = 0; herd_algos[i]; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     herd_algos[i]->name);
        return herd_err_set(err, HERD_EINVAL, "unknown algorithm '%s' (choose one of: %s)",
                            cfg->algo ? cfg->algo : "", names);
    }
    herd_optim_config *oc = &cfg->optim;
    if (isnan(oc->lr))
        oc->lr = oc->optimizer == HERD_OPTIMIZER_LARS ? LARS_LR_DEFAULT : algo_default(*algo, "lr");
    if (isnan(oc->momentum))
        oc->momentum = algo_default(*algo, "momentum");
    /* every value against its row's bounds and choices (a struct filled by
     * hand was never parsed); what follows relates options to each other */
    for (const herd_opt *o = herd__run_options; o->name; o++)
        if (herd_opt_check(o, cfg, err) < 0)
            return HERD_EINVAL;
    if ((*algo)->min_workers && cfg->workers < (*algo)->min_workers)
        return herd_err_set(err, HERD_EINVAL, "--algo %s needs at least %zu workers, got %zu",
                            cfg->algo, (*algo)->min_workers, cfg->workers);
    if ((*algo)->max_workers && cfg->workers > (*algo)->max_workers)
        return herd_err_set(err, HERD_EINVAL, "--algo %s runs on at most %zu worker(s), got --workers %zu (%s: %s)",
                            cfg->algo, (*algo)->max_workers, cfg->workers, cfg->algo, (*algo)->summary);
    if (oc->nesterov && oc->momentum == 0.0f)
        return herd_err_set(err, HERD_EINVAL, "--nesterov needs --momentum > 0");
    if (oc->optimizer == HERD_OPTIMIZER_LAMB && oc->nesterov)
        return herd_err_set(err, HERD_EINVAL, "--nesterov applies to --optimizer sgd and lars; lamb's momentum is "
                            "Adam's first moment (--lamb-beta1)");
    if (oc->warmup_epochs > (double)cfg->epochs)
        return herd_err_set(err, HERD_EINVAL, "--warmup must be in [0, epochs], got %g", oc->warmup_epochs);
    if (cfg->precision == HERD_PRECISION_BF16 && herd_nn_bf16_support() == HERD_BF16_NONE)
        return herd_err_set(err, HERD_EINVAL, "--precision bf16 needs a CPU with AVX-512 (avx512_core), where oneDNN "
                            "has bf16 kernels; this one (or DNNL_MAX_CPU_ISA) has none: use --precision fp32");
    for (size_t i = 0; i < cfg->ninject_nan; i++)
        if (cfg->inject_nan[i].rank >= cfg->workers)
            return herd_err_set(err, HERD_EINVAL, "--inject-nan %zu@%zu names worker %zu, but there are %zu workers",
                                cfg->inject_nan[i].rank, cfg->inject_nan[i].step, cfg->inject_nan[i].rank, cfg->workers);
    for (size_t i = 0; i < cfg->nfail; i++)
        if (cfg->fail[i].rank >= cfg->workers)
            return herd_err_set(err, HERD_EINVAL, "--fail %zu@%zu names worker %zu, but there are %zu workers",
                                cfg->fail[i].rank, cfg->fail[i].step, cfg->fail[i].rank, cfg->workers);
    for (size_t i = 0; i < cfg->nslow; i++) {
        if (cfg->slow[i].rank >= cfg->workers)
            return herd_err_set(err, HERD_EINVAL, "--slow %zu:%g names worker %zu, but there are %zu workers",
                                cfg->slow[i].rank, cfg->slow[i].factor, cfg->slow[i].rank, cfg->workers);
        if (!(cfg->slow[i].factor >= 1.0 && cfg->slow[i].factor <= 1e6))
            return herd_err_set(err, HERD_EINVAL, "--slow factor must be in [1, 1e6], got %g", cfg->slow[i].factor);
    }
    return HERD_OK;
}

herd_status herd__check_fail_modes(herd__train_config *cfg, bool processes, const char *engine, herd_err *err)
{
    for (size_t i = 0; i < cfg->nfail; i++) {
        herd__fail *f = &cfg->fail[i];
        if (f->mode == HERD_FAIL_DEFAULT)
            f->mode = processes ? HERD_FAIL_EXIT1 : HERD_FAIL_STOP;
        if (processes != (f->mode != HERD_FAIL_STOP))
            return herd_err_set(err, HERD_EINVAL, "--fail %zu@%zu:%s: the %s engine's mode%s %s", f->rank, f->step,
                                herd__fail_mode_name(f->mode), engine, processes ? "s are" : " is",
                                processes ? "exit0, exit1 (the default), abort and kill"
                                          : "stop (the worker's thread ends; exit0, exit1, abort and kill would end "
                                            "every worker's process)");
    }
    return HERD_OK;
}
