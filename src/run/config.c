/* The run's configuration: defaults, the algorithm's options, validation.
 * Everything here runs before any worker starts; nothing here knows an
 * algorithm or an engine by name. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "herd/herd_algo.h"
#include "run/run.h"

static const char *const fail_mode_names[] = {"default", "stop", "exit0", "exit1", "abort", "kill"};

herd_status herd_fail_mode_parse(const char *s, herd_fail_mode *out)
{
    for (size_t i = HERD_FAIL_STOP; i < sizeof fail_mode_names / sizeof fail_mode_names[0]; i++)
        if (!strcmp(s, fail_mode_names[i])) {
            *out = (herd_fail_mode)i;
            return HERD_OK;
        }
    return HERD_EINVAL;
}

const char *herd_fail_mode_name(herd_fail_mode m)
{
    return (size_t)m < sizeof fail_mode_names / sizeof fail_mode_names[0] ? fail_mode_names[m] : "?";
}

/* --lr and --momentum when the run is not given them. The run holds them one
 * float step above these: no value typed on a command line parses to that
 * ("0.05" is 0.05f), so herd__check_config tells a default from a value
 * given and replaces a default with the algorithm's own (the rows "lr" and
 * "momentum" of its option table, which herd train --help lists under it)
 * or with these exactly. */
#define LR_DEFAULT 0.05f
#define MOMENTUM_DEFAULT 0.9f
/* --optimizer lars's own --lr and --lars-eta: the best of the sweep in
 * bench/optimizer-defaults (lenet, 8 workers x batch 512, 3 epochs: 0.80
 * and 0.83 on seeds 1 and 2; 0.89 at 1 x 64). The paper's eta, 0.001, with
 * lr 0.05 ended at 0.16 there. An algorithm's own lr is tuned for sgd's
 * step and does not apply to the trust ratio's. */
#define LARS_LR_DEFAULT 0.5f
#define LARS_ETA_DEFAULT 0.04f

static float not_given(float def) { return nextafterf(def, 1.0f); }

/* The algorithm's default of the run's option `name`, else def. */
static float algo_default(const herd_algo_ops *ops, const char *name, float def)
{
    const herd_opt *row = herd_opt_find(ops->opts, name);
    return row && row->type == HERD_OPT_FLOAT && row->def ? strtof(row->def, NULL) : def;
}

void herd_train_config_defaults(herd_train_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->model = "lenet";
    cfg->algo = NULL; /* sgd for one worker, allreduce for several */
    cfg->workers = 1;
    cfg->epochs = 5;
    cfg->batch = 64;
    cfg->optim = (herd_optim_config){
        .lr = not_given(LR_DEFAULT),
        .momentum = not_given(MOMENTUM_DEFAULT),
        .weight_decay = 5e-4f,
        .schedule = HERD_SCHED_COSINE,
        .step_epochs = 30,
        .step_gamma = 0.1f,
        .optimizer = HERD_OPTIMIZER_SGD,
        .lars_eta = LARS_ETA_DEFAULT,
        .beta1 = 0.9f,      /* You et al. 2019 (LAMB), as Adam's */
        .beta2 = 0.999f,
        .eps = 1e-6f,
        .lr_scale = HERD_LR_SCALE_NONE,
        .lr_ref_batch = 256, /* Goyal et al.: 0.1 per 256 examples */
    };
    cfg->seed = 1;
    cfg->threads = 0; /* chosen by the run: OMP_NUM_THREADS, else the cores (train.c) */
    cfg->eval_every = 1;
    cfg->eval_every_steps = 0; /* off */
    cfg->progress = true;
    cfg->quiet = true; /* a library is silent unless asked: herd train's command line sets it false */
    cfg->comm_timeout_s = 60;
    cfg->checkpoint_keep = 3;
}

herd_status herd_train_config_set(herd_train_config *cfg, const char *name, const char *value)
{
    if (cfg->nalgo_args >= HERD_MAX_ALGO_ARGS)
        return HERD_ENOMEM;
    cfg->algo_args[cfg->nalgo_args++] = (herd_arg){name, value};
    return HERD_OK;
}

herd_status herd__algo_opts_parse(const herd_algo_ops *ops, const herd_train_config *cfg, void **out, herd_err *err)
{
    herd_status st = HERD_OK;
    /* an algorithm's rows lr and momentum are its defaults of the run's own */
    for (size_t i = 0; i < cfg->nalgo_args; i++)
        if (!strcmp(cfg->algo_args[i].name, "lr") || !strcmp(cfg->algo_args[i].name, "momentum"))
            return herd_err_set(err, HERD_EINVAL, "--%s is the run's (herd_train_config.optim), not an option of --algo %s",
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

herd_status herd__check_workers(const herd_train_config *cfg, herd_err *err)
{
    if (cfg->workers < 1 || cfg->workers > 4096)
        return herd_err_set(err, HERD_EINVAL, "--workers must be in [1, 4096], got %zu", cfg->workers);
    return HERD_OK;
}

herd_status herd__check_names(const herd_train_config *cfg, herd_err *err)
{
    /* an empty name is not "the default": NULL is */
    const struct {
        const char *flag, *val;
    } names[] = {{"--data", cfg->data}, {"--model", cfg->model}, {"--algo", cfg->algo}, {"--engine", cfg->engine},
                 {"--log", cfg->log_path}, {"--checkpoint", cfg->checkpoint_dir}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].val && !*names[i].val)
            return herd_err_set(err, HERD_EINVAL, "%s: expected a value, got ''", names[i].flag);
    return HERD_OK;
}

/* --optimizer and its settings, --lr-scale. */
static herd_status check_optimizer(const herd_optim_config *o, herd_err *err)
{
    if ((unsigned)o->optimizer > HERD_OPTIMIZER_LAMB)
        return herd_err_set(err, HERD_EINVAL, "--optimizer must be sgd, lars or lamb, got #%d", (int)o->optimizer);
    if (!(o->lars_eta > 0.0f && o->lars_eta <= 1.0f))
        return herd_err_set(err, HERD_EINVAL, "--lars-eta must be in (0, 1] (the trust coefficient; 0.001 in the "
                            "LARS paper), got %g", (double)o->lars_eta);
    if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f))
        return herd_err_set(err, HERD_EINVAL, "--lamb-beta1 must be in [0, 1), got %g", (double)o->beta1);
    if (!(o->beta2 >= 0.0f && o->beta2 < 1.0f))
        return herd_err_set(err, HERD_EINVAL, "--lamb-beta2 must be in [0, 1), got %g", (double)o->beta2);
    if (!(o->eps > 0.0f && o->eps <= 1.0f))
        return herd_err_set(err, HERD_EINVAL, "--lamb-eps must be in (0, 1], got %g", (double)o->eps);
    if (o->optimizer == HERD_OPTIMIZER_LAMB && o->nesterov)
        return herd_err_set(err, HERD_EINVAL, "--nesterov applies to --optimizer sgd and lars; lamb's momentum is "
                            "Adam's first moment (--lamb-beta1)");
    if ((unsigned)o->lr_scale > HERD_LR_SCALE_LINEAR)
        return herd_err_set(err, HERD_EINVAL, "--lr-scale must be none or linear, got #%d", (int)o->lr_scale);
    if (o->lr_ref_batch < 1 || o->lr_ref_batch > 16777216)
        return herd_err_set(err, HERD_EINVAL, "--lr-ref-batch must be in [1, 16777216], got %zu", o->lr_ref_batch);
    return HERD_OK;
}

herd_status herd__check_config(herd_train_config *cfg, const herd_algo_ops **algo, herd_err *err)
{
    if (!cfg->algo || !(*algo = herd_algo_find(cfg->algo))) {
        char names[512] = "";
        for (size_t i = 0; herd_algos[i]; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     herd_algos[i]->name);
        return herd_err_set(err, HERD_EINVAL, "unknown algorithm '%s' (choose one of: %s)",
                            cfg->algo ? cfg->algo : "", names);
    }
    herd_status st = herd__check_workers(cfg, err);
    if (st < 0)
        return st;
    if (cfg->optim.lr == not_given(LR_DEFAULT))
        cfg->optim.lr = cfg->optim.optimizer == HERD_OPTIMIZER_LARS ? LARS_LR_DEFAULT
                                                                    : algo_default(*algo, "lr", LR_DEFAULT);
    if (cfg->optim.momentum == not_given(MOMENTUM_DEFAULT))
        cfg->optim.momentum = algo_default(*algo, "momentum", MOMENTUM_DEFAULT);
    if ((*algo)->min_workers && cfg->workers < (*algo)->min_workers)
        return herd_err_set(err, HERD_EINVAL, "--algo %s needs at least %zu workers, got %zu",
                            cfg->algo, (*algo)->min_workers, cfg->workers);
    if ((*algo)->max_workers && cfg->workers > (*algo)->max_workers)
        return herd_err_set(err, HERD_EINVAL, "--algo %s runs on at most %zu worker(s), got --workers %zu (%s: %s)",
                            cfg->algo, (*algo)->max_workers, cfg->workers, cfg->algo, (*algo)->summary);
    if (cfg->epochs < 1 || cfg->epochs > 100000)
        return herd_err_set(err, HERD_EINVAL, "--epochs must be in [1, 100000], got %zu", cfg->epochs);
    if (cfg->batch < 1 || cfg->batch > 65536)
        return herd_err_set(err, HERD_EINVAL, "--batch must be in [1, 65536], got %zu", cfg->batch);
    if (!(cfg->optim.lr > 0.0f) || !isfinite(cfg->optim.lr) || cfg->optim.lr > 100.0f)
        return herd_err_set(err, HERD_EINVAL, "--lr must be in (0, 100], got %g", (double)cfg->optim.lr);
    if (!(cfg->optim.momentum >= 0.0f && cfg->optim.momentum < 1.0f))
        return herd_err_set(err, HERD_EINVAL, "--momentum must be in [0, 1), got %g", (double)cfg->optim.momentum);
    if (!(cfg->optim.weight_decay >= 0.0f && cfg->optim.weight_decay < 1.0f))
        return herd_err_set(err, HERD_EINVAL, "--weight-decay must be in [0, 1), got %g",
                            (double)cfg->optim.weight_decay);
    if (cfg->optim.nesterov && cfg->optim.momentum == 0.0f)
        return herd_err_set(err, HERD_EINVAL, "--nesterov needs --momentum > 0");
    /* the step schedule's: checked whatever the schedule, as every other value is */
    if (!(cfg->optim.step_gamma > 0.0f && cfg->optim.step_gamma <= 1.0f))
        return herd_err_set(err, HERD_EINVAL, "--step-gamma must be in (0, 1] (the factor of each decay), got %g",
                            (double)cfg->optim.step_gamma);
    if (!(cfg->optim.step_epochs > 0 && cfg->optim.step_epochs <= 1e6))
        return herd_err_set(err, HERD_EINVAL, "--step-epochs must be in (0, 1e6], got %g", cfg->optim.step_epochs);
    if (!(cfg->optim.warmup_epochs >= 0 && cfg->optim.warmup_epochs <= (double)cfg->epochs))
        return herd_err_set(err, HERD_EINVAL, "--warmup must be in [0, epochs], got %g", cfg->optim.warmup_epochs);
    st = check_optimizer(&cfg->optim, err);
    if (st < 0)
        return st;
    if (cfg->eval_every_steps > HERD_MAX_EVAL_EVERY_STEPS)
        return herd_err_set(err, HERD_EINVAL, "--eval-every-steps must be in [0, %d] (0: off), got %zu",
                            HERD_MAX_EVAL_EVERY_STEPS, cfg->eval_every_steps);
    if (cfg->precision != HERD_PRECISION_FP32 && cfg->precision != HERD_PRECISION_BF16)
        return herd_err_set(err, HERD_EINVAL, "--precision must be fp32 or bf16, got #%d", (int)cfg->precision);
    if (cfg->precision == HERD_PRECISION_BF16 && herd_nn_bf16_support() == HERD_BF16_NONE)
        return herd_err_set(err, HERD_EINVAL, "--precision bf16 needs a CPU with AVX-512 (avx512_core), where oneDNN "
                            "has bf16 kernels; this one (or DNNL_MAX_CPU_ISA) has none: use --precision fp32");
    if (cfg->threads < 1 || cfg->threads > 256)
        return herd_err_set(err, HERD_EINVAL, "--threads must be in [1, 256], got %zu", cfg->threads);
    if (!(cfg->comm_timeout_s > 0 && cfg->comm_timeout_s <= 86400))
        return herd_err_set(err, HERD_EINVAL, "--timeout must be in (0, 86400] seconds, got %g", cfg->comm_timeout_s);
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

herd_status herd__check_fail_modes(herd_train_config *cfg, bool processes, const char *engine, herd_err *err)
{
    for (size_t i = 0; i < cfg->nfail; i++) {
        herd_fail *f = &cfg->fail[i];
        if (f->mode == HERD_FAIL_DEFAULT)
            f->mode = processes ? HERD_FAIL_EXIT1 : HERD_FAIL_STOP;
        if (processes != (f->mode != HERD_FAIL_STOP))
            return herd_err_set(err, HERD_EINVAL, "--fail %zu@%zu:%s: the %s engine's mode%s %s", f->rank, f->step,
                                herd_fail_mode_name(f->mode), engine, processes ? "s are" : " is",
                                processes ? "exit0, exit1 (the default), abort and kill"
                                          : "stop (the worker's thread ends; exit0, exit1, abort and kill would end "
                                            "every worker's process)");
    }
    return HERD_OK;
}
