/* herd_train: the run's engine world, its workers' set-up and teardown,
 * their threads, and the final evaluation (run.h says where the rest is). */
#include "herd/herd_run.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "herd/herd_algo.h"
#include "herd/herd_comm.h"
#include "herd/herd_data.h"
#include "herd/herd_nn.h"
#include "core/clock.h"
#include "core/finite.h"
#include "core/json.h"
#include "core/outpath.h"
#include "run/ckpt_run.h"
#include "run/log.h"
#include "run/options.h"
#include "run/run.h"

static herd_status worker_setup(worker_ctx *c, herd_run *r, size_t rank, herd_err *err)
{
    herd_status st = HERD_OK;
    const herd__train_config *cfg = r->cfg;
    c->run = r;
    herd_worker *w = &c->w;
    w->rank = rank, w->nworkers = cfg->workers, w->cfg = cfg;
    w->opts = r->algo_opts, w->cores_taken = r->cores_taken;
    HERD_TRY(herd_model_create(cfg->model, r->train.c, r->train.h, r->train.w, r->train.nclasses,
                               cfg->batch, cfg->seed, &w->model, err));
    HERD_TRY(herd_model_set_precision(w->model, cfg->precision)); /* herd__check_config checked the CPU */
    w->params = herd_model_params(w->model);
    w->grads = herd_model_grads(w->model);
    w->nparams = herd_model_nparams(w->model);
    c->algo.ops = r->algo_ops;
    w->peers = (herd_peers){&herd__run_peers, c};
    HERD_TRY(herd_algo_optim_init(c->algo.ops, r->algo_opts, &cfg->optim, w->model, w->nparams, &w->optim, err));
    HERD_TRY(herd_loader_init(&c->loader, &r->train, cfg->batch, rank, cfg->workers, cfg->seed, true, err));
    w->steps_per_epoch = herd_loader_steps(&c->loader);
    if (w->steps_per_epoch == 0) {
        st = herd_err_set(err, HERD_EINVAL,
                          "the training set (%zu examples) is smaller than one global batch (%zu workers x batch %zu)",
                          r->train.n, cfg->workers, cfg->batch);
        goto out;
    }
    c->x = malloc(cfg->batch * herd_dataset_dim(&r->train) * sizeof(float));
    c->y = malloc(cfg->batch * sizeof(int32_t));
    if (!c->x || !c->y) {
        st = herd_err_set(err, HERD_ENOMEM, "out of memory for a batch");
        goto out;
    }
    HERD_TRY(herd_world_endpoint(r->world, rank, &w->comm, err));
    w->comm->timeout_s = cfg->comm_timeout_s;
    if (c->algo.ops->eval_params && !(c->eval.buf = malloc(2 * w->nparams * sizeof(float)))) {
        st = herd_err_set(err, HERD_ENOMEM, "out of memory for evaluation");
        goto out;
    }
    c->result.train_loss = NAN; /* until it ends an epoch with a step in it */
    herd__fault_init(&c->fault, cfg, rank);
out:
    return st;
}

static void worker_teardown(worker_ctx *c)
{
    if (c->algo.ops && c->algo.ops->free)
        c->algo.ops->free(&c->algo, &c->w);
    herd__claim_close(&c->claim, &c->w);
    free(c->eval.buf);
    herd__trace_free(&c->trace);
    herd_comm_free(c->w.comm);
    herd_model_free(c->w.model);
    herd_optim_free(&c->w.optim);
    herd_loader_free(&c->loader);
    free(c->x);
    free(c->y);
}

/* The engine the run asks for, checked against the names and the
 * launcher (nothing started). */
static herd_status pick_engine(const herd__train_config *cfg, const herd_engine **out, herd_err *err)
{
    herd_status st = HERD_OK;
    const herd_engine *e;
    HERD_TRY(herd__check_names(cfg, err));
    HERD_TRY(herd_engine_pick(cfg->engine, &e, err));
    /* A simulator's ranks are its hosts: another engine than the one it
     * launched would run every worker inside each rank, on no virtual clock */
    const herd_engine *l = herd_engine_launcher();
    if (l && (l->caps & HERD_ENGINE_VIRTUAL_CLOCK) && e != l)
        return herd_err_set(err, HERD_EINVAL,
                            "--engine %s: herd sim runs the %s engine, one rank per simulated host (drop --engine)",
                            e->name, l->name);
    if (!(e->caps & HERD_ENGINE_LAUNCHER_SIZED))
        HERD_TRY(herd__check_workers(cfg, err));
    *out = e;
out:
    return st;
}

/* Where e is the engine whose launcher started this process and sizes the
 * run (mpirun -np N), the size the launcher gave, read from its environment
 * (Open MPI's, a PMI launcher's), into eff->workers; --workers given
 * another value is refused, as the run's world would refuse it. Elsewhere,
 * or where the launcher does not say, nothing. So --dry-run checks the
 * algorithm and its options at the size the run will have, and a mismatch
 * is a usage error on every rank alike, before any of them starts. */
static herd_status launcher_workers(const herd__train_config *cfg, const herd_engine *e, herd__train_config *eff,
                                    herd_err *err)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    if (!(e->caps & HERD_ENGINE_LAUNCHER_SIZED) || (e->caps & HERD_ENGINE_VIRTUAL_CLOCK) ||
        herd_engine_launcher() != e)
        return HERD_OK;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        unsigned long n = v ? strtoul(v, &end, 10) : 0;
        if (!v || end == v || *end || n < 1)
            continue;
        if (cfg->workers != 1 && cfg->workers != n) /* 1, the default: "as many as the launcher gives" */
            return herd_err_set(err, HERD_EINVAL,
                                "--workers %zu does not match the %lu processes the launcher started (on the %s "
                                "engine each process is one worker)",
                                cfg->workers, n, e->name);
        eff->workers = n;
        return HERD_OK;
    }
    return HERD_OK;
}

/* The engine and this process's part of the run's world: its workers
 * first_rank .. first_rank + nlocal - 1; where the engine's launcher sets the
 * number of workers (mpirun), the run's --workers becomes it. *refused: the
 * failure is the configuration's (an engine unknown, --workers out of
 * range), not the world's. */
static herd_status open_world(const herd__train_config *cfg, herd_run *r, herd__train_config *eff, bool *refused,
                              herd_err *err)
{
    herd_status st = HERD_OK;
    const herd_engine *e;
    *refused = true;
    HERD_TRY(pick_engine(cfg, &e, err));
    HERD_TRY(launcher_workers(cfg, e, eff, err));
    bool sized = e->caps & HERD_ENGINE_LAUNCHER_SIZED;
    *refused = false;
    HERD_TRY(herd_world_create(e, sized && cfg->workers == 1 ? 0 : cfg->workers, &r->world, err));
    eff->workers = r->world->size;
    r->first_rank = r->world->first_rank, r->nlocal = r->world->nlocal;
out:
    return st;
}

/* The model against the data's shape, where that is known before any data
 * is read or made (synthetic data): a model that cannot take the shape is
 * refused before 60000 examples are generated for it. Elsewhere the
 * model's name alone, or that its description file reads (the shape is
 * checked once the data is read). */
static herd_status check_model(const herd__train_config *cfg, herd_err *err)
{
    herd_status st = HERD_OK;
    bool known = false, named = false;
    size_t c = 0, h = 0, w = 0, k = 0;
    herd_model *m = NULL;
    for (size_t i = 0; herd_model_names[i] && cfg->model; i++)
        named = named || !strcmp(herd_model_names[i], cfg->model);
    HERD_TRY(herd_data_check(cfg->data, err));
    HERD_TRY(herd_data_shape(cfg->data, &known, &c, &h, &w, &k, err));
    if (named && !known)
        return HERD_OK;
    if (!known && cfg->model) { /* a description file: that it reads (the shapes are checked on the data's) */
        char *text = NULL;
        HERD_TRY(herd_model_read_description(cfg->model, &text, NULL, 0, err));
        free(text);
        return HERD_OK;
    }
    /* herd_model_create names the model unknown, or the layer that does not fit */
    HERD_TRY(herd_model_create(cfg->model ? cfg->model : "", known ? c : 1, known ? h : 28, known ? w : 28,
                               known ? k : 10, 1, cfg->seed, &m, err));
out:
    herd_model_free(m);
    return st;
}

/* Data whose class count the labels set (IDX: the largest label + 1, at
 * least 10) with classes above 10 of which the training set has no example
 * at all: a corrupt label, not a 201-class problem (synthetic data and
 * CIFAR-10 declare theirs). */
static herd_status check_labels(const herd_run *r, herd_err *err)
{
    bool known = false;
    size_t c, h, w, k;
    if (herd_data_shape(r->cfg->data, &known, &c, &h, &w, &k, NULL) < 0 || known || r->train.nclasses <= 10)
        return HERD_OK;
    size_t n = r->train.nclasses, empty = 0, first = 0, top = 0;
    size_t *count = calloc(n, sizeof *count);
    if (!count)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    for (size_t i = 0; i < r->train.n; i++)
        count[(size_t)r->train.y[i]]++;
    for (size_t i = 0; i < r->test.n; i++)
        top = (size_t)r->test.y[i] > top ? (size_t)r->test.y[i] : top;
    for (size_t i = 0; i < n; i++)
        if (!count[i] && !empty++)
            first = i;
    for (size_t i = 0; i < n; i++)
        top = count[i] && i > top ? i : top;
    free(count);
    if (!empty)
        return HERD_OK;
    return herd_err_set(err, HERD_ECORRUPT,
                        "%s: the largest label, %zu, makes %zu classes, but %zu of them (the first: %zu) have no "
                        "training example: a corrupt label file?",
                        r->cfg->data ? r->cfg->data : "the data", top, n, empty, first);
}

/* The cores this process may run on: its affinity mask (taskset, mpirun's
 * binding, a batch system's cpuset), else every core online. */
static size_t cores_available(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return (size_t)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (size_t)n : 1;
}

/* A positive count from the environment variable `name` (OMP_NUM_THREADS's
 * first level: "4,2" is 4), or 0. */
static size_t env_count(const char *name)
{
    const char *v = getenv(name);
    char *end;
    if (!v)
        return 0;
    unsigned long n = strtoul(v, &end, 10);
    return end != v && (!*end || *end == ',') && n >= 1 && n <= 1024 ? (size_t)n : 0;
}

/* Each worker's compute threads, when the configuration leaves them open
 * (threads 0): OMP_NUM_THREADS where set; else this process's cores shared
 * by the workers that run on them: its own (threads engine) and, where a
 * launcher says how many processes of the run share this host (Open MPI's
 * mpirun, MPICH's Hydra), theirs. On a virtual clock
 * (HERD_ENGINE_VIRTUAL_CLOCK) more threads buy no time: one each. */
static void choose_threads(const herd__train_config *cfg, herd_run *r, herd__train_config *eff, size_t cores)
{
    size_t omp = env_count("OMP_NUM_THREADS");
    if (cfg->threads) {
        eff->threads = cfg->threads;
        r->threads_from = "--threads";
        return;
    }
    if (omp) {
        eff->threads = omp;
        r->threads_from = "OMP_NUM_THREADS";
        return;
    }
    if (r->world->engine->caps & HERD_ENGINE_VIRTUAL_CLOCK) {
        eff->threads = 1;
        r->threads_from = "sim"; /* the summary's word since herd sim's ranks were the only such */
        return;
    }
    size_t procs = env_count("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (!procs)
        procs = env_count("MPI_LOCALNRANKS");
    size_t sharers = r->nlocal * (procs ? procs : 1);
    eff->threads = cores / sharers > 1 ? cores / sharers : 1;
    if (eff->threads > 256)
        eff->threads = 256;
    r->threads_from = sharers > 1 ? "cores/workers" : "cores";
}

/* The configuration on engine e, once the run's size is known: the
 * algorithm (its default, its options), every option alone and against
 * the others, checkpoints, the model. Resolves what the run picks (the
 * algorithm, --lr, --momentum) in eff; *algo_opts is the caller's to free. */
static herd_status check_run(herd__train_config *eff, const herd_engine *e, const herd_algo_ops **ops,
                             void **algo_opts, herd_err *err)
{
    herd_status st = HERD_OK;
    if (!eff->algo)
        eff->algo = eff->workers > 1 ? "allreduce" : "sgd";
    HERD_TRY(herd__check_config(eff, ops, err));
    const char *outs[][2] = {{"--log", eff->log_path}, {"--trace", eff->trace_path}};
    for (size_t i = 0; i < 2 && eff->checkpoint_dir; i++)
        if (outs[i][1] && herd__ckpt_holds(eff->checkpoint_dir, outs[i][1]))
            return herd_err_set(err, HERD_EINVAL, "%s %s is a checkpoint's file in --checkpoint %s: each output needs "
                                                  "its own", outs[i][0], outs[i][1], eff->checkpoint_dir);
    if (eff->log_path && eff->trace_path && herd__outpath_same(eff->log_path, eff->trace_path))
        return herd_err_set(err, HERD_EINVAL, "--log %s and --trace %s are the same file: each needs its own",
                            eff->log_path, eff->trace_path);
    eff->optim.global_batch = eff->workers * eff->batch; /* --lr-scale linear's, once the engine sized the run */
    HERD_TRY(herd__check_fail_modes(eff, e->caps & HERD_ENGINE_PROCESS_PER_WORKER, e->name, err));
    HERD_TRY(herd__algo_opts_parse(*ops, eff, algo_opts, err));
    HERD_TRY(herd__ckpt_check(eff, *ops, e, err));
    HERD_TRY(check_model(eff, err));
out:
    return st;
}

herd_status herd__config_validate(const herd__train_config *cfg, herd_err *err)
{
    herd_status st = HERD_OK;
    herd__train_config eff = *cfg;
    const herd_engine *e;
    const herd_algo_ops *ops = NULL;
    void *opts = NULL;
    HERD_TRY(pick_engine(cfg, &e, err));
    HERD_TRY(launcher_workers(cfg, e, &eff, err));
    HERD_TRY(check_run(&eff, e, &ops, &opts, err));
out:
    free(opts);
    return st;
}

/* Engine, configuration, the algorithm's options, the model: everything
 * that can be refused before any data is read (*refused: it was). */
static herd_status prepare(const herd__train_config *cfg, herd_run *r, herd__train_config *eff, bool *refused,
                           herd_err *err)
{
    herd_status st = HERD_OK;
    HERD_TRY(open_world(cfg, r, eff, refused, err));
    size_t cores = cores_available();
    choose_threads(cfg, r, eff, cores);
    *refused = true;
    const herd_engine *e = r->world->engine;
    HERD_TRY(check_run(eff, e, &r->algo_ops, &r->algo_opts, err));
    *refused = false;
    /* the workers' compute threads on this process's cores: a helper thread
     * (allreduce's overlap) would take one from them */
    r->cores_taken = !(e->caps & HERD_ENGINE_PROCESS_PER_WORKER) && r->nlocal * eff->threads >= cores;
out:
    return st;
}

/* The model against the data read, whose shape check_model could not know:
 * a description that does not fit it is refused as one that does not fit
 * synthetic data is (a usage error, exit 2), before any worker is set up. */
static herd_status check_model_fits(const herd_run *r, bool *refused, herd_err *err)
{
    herd_model *m = NULL;
    herd_status st = herd_model_create(r->cfg->model ? r->cfg->model : "", r->train.c, r->train.h, r->train.w,
                                       r->train.nclasses, 1, r->cfg->seed, &m, err);
    herd_model_free(m);
    *refused = st == HERD_EINVAL;
    return st;
}

/* The data sets, the log, the workers (set up, and restored on --resume);
 * *refused: the model does not fit the data. */
static herd_status open_run(herd_run *r, worker_ctx **workers, bool *log_open, bool *refused, herd_err *err)
{
    herd_status st = HERD_OK;
    const herd__train_config *cfg = r->cfg;
    herd__outpath out;
    /* the outputs looked at before the data are read (core/outpath.h): one
     * that would be refused is refused now, not after the data or the run */
    if (cfg->log_path)
        HERD_TRY(herd__outpath_check(cfg->log_path, "--log", &out, err));
    HERD_TRY(herd__trace_check(r, err));
    HERD_TRY(herd_data_open(cfg->data, cfg->seed, &r->train, &r->test, err));
    HERD_TRY(check_labels(r, err));
    HERD_TRY(check_model_fits(r, refused, err));
    herd_dataset_truncate(&r->train, cfg->train_limit);
    herd_dataset_truncate(&r->test, cfg->test_limit);
    r->t0 = herd__now();
    r->tty = isatty(2);
    HERD_TRY(herd__log_open(&r->log, cfg->log_path, r->t0, err));
    *log_open = true;
    *workers = calloc(r->nlocal, sizeof **workers);
    r->lost = calloc(cfg->workers, sizeof *r->lost);
    if (!*workers || !r->lost) {
        st = herd_err_set(err, HERD_ENOMEM, "out of memory for %zu workers", r->nlocal);
        goto out;
    }
    for (size_t i = 0; i < r->nlocal; i++)
        HERD_TRY(worker_setup(&(*workers)[i], r, r->first_rank + i, err));
    HERD_TRY(herd__ckpt_run_open(cfg, r->algo_ops->name, (*workers)[0].w.nparams, (*workers)[0].w.steps_per_epoch,
                                 &r->train, &r->test, r->first_rank, r->nlocal, &r->ckpt, err));
    HERD_TRY(herd__ckpt_run_options(r->ckpt, r->algo_ops, r->algo_opts, err));
    HERD_TRY(herd__ckpt_run_describe(r->ckpt, herd_model_description((*workers)[0].w.model), err));
    for (size_t i = 0; herd__ckpt_resuming(r->ckpt) && i < r->nlocal; i++)
        HERD_TRY(herd__ckpt_restore(r->ckpt, &(*workers)[i].w, &(*workers)[i].loader, &(*workers)[i].resume, err));
out:
    return st;
}

/* 16 hex digits that name the run in its log and summary: random, or the
 * clock and pid where the kernel gives no random bytes. */
static void make_run_id(char out[17])
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = ((uint64_t)ts.tv_sec * 1000000007u) ^ ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid();
    }
    snprintf(out, 17, "%016" PRIx64, v);
}

/* The first real failure among the workers (not the EREMOTE of workers told
 * to stop), into err; HERD_OK when none failed. */
static herd_status first_failure(herd_run *r, const worker_ctx *workers, herd_err *err)
{
    /* pass 0: a worker's own failure; 1: a report of another's, with its detail; 2: any */
    for (size_t pass = 0; pass < 3; pass++)
        for (size_t i = 0; i < r->nlocal; i++) {
            const worker_ctx *c = &workers[i];
            herd_status st = c->result.st;
            if (st < 0 && (pass == 2 || (pass == 0 ? st != HERD_EREMOTE : c->w.err.msg[0]))) {
                if (err)
                    *err = c->w.err;
                if (err && !err->msg[0])
                    herd_err_set(err, st, "worker %zu failed: %s", r->first_rank + i, herd_strerror(st));
                char quoted[2 * sizeof c->w.err.msg + 8];
                herd__json_quote(quoted, sizeof quoted, err ? err->msg : c->w.err.msg);
                herd__log_record(&r->log, "error", "\"worker\":%zu,\"status\":\"%s\",\"error\":%s", r->first_rank + i,
                                 herd_err_name(st), quoted);
                return st;
            }
        }
    return HERD_OK;
}

/* A --fail or --inject-nan aimed at a step its worker never reached (a
 * short run, or an asynchronous worker the others left few batches to)
 * tested nothing: said on stderr and in the log, not left to be taken for
 * a run that survived it. */
static void warn_unfired(herd_run *r, const worker_ctx *workers)
{
    const herd__train_config *cfg = r->cfg;
    for (size_t i = 0; i < r->nlocal; i++) {
        const herd_worker *w = &workers[i].w;
        for (size_t k = 0; k < cfg->nfail + cfg->ninject_nan; k++) {
            bool fail = k < cfg->nfail;
            size_t rank = fail ? cfg->fail[k].rank : cfg->inject_nan[k - cfg->nfail].rank;
            size_t step = fail ? cfg->fail[k].step : cfg->inject_nan[k - cfg->nfail].step;
            if (rank != w->rank || step < w->step || (fail && atomic_load(&r->lost[rank])))
                continue;
            const char *flag = fail ? "--fail" : "--inject-nan";
            herd__log_record(&r->log, "warning", "\"worker\":%zu,\"flag\":\"%s\",\"step\":%zu,\"steps_taken\":%zu",
                             rank, flag, step, w->step);
            if (!cfg->quiet)
                fprintf(stderr, "herd: warning: %s %zu@%zu never fired: worker %zu took %zu step(s)\n", flag, rank,
                        step, rank, w->step);
        }
    }
}

/* Frees the run; the log's closing tells whether every record was written
 * (HERD_EIO into err, where st is still HERD_OK: a first failure stays). */
static herd_status close_run(herd_run *r, worker_ctx *workers, bool log_open, herd_status st, herd_err *err)
{
    if (workers)
        for (size_t i = 0; i < r->nlocal; i++)
            worker_teardown(&workers[i]);
    free(workers);
    free(r->lost);
    herd__ckpt_run_free(r->ckpt);
    herd_world_free(r->world);
    if (log_open) {
        herd_err lerr = {0};
        herd_status lst = herd__log_close(&r->log, &lerr);
        if (st == HERD_OK && lst < 0) {
            st = lst;
            if (err)
                *err = lerr;
        }
    }
    free(r->algo_opts);
    herd_dataset_free(&r->train);
    herd_dataset_free(&r->test);
    return st;
}

/* One log per process: rank 0 writes FILE, rank r FILE.rank<r> (in
 * log_path, cap bytes, which outlives the run), and only rank 0's process
 * speaks; then what its user should know before the run starts. */
static void per_process(const herd__train_config *cfg, const herd_run *r, herd__train_config *eff, char *log_path,
                        size_t cap)
{
    if (r->first_rank != 0) {
        eff->quiet = true;
        if (cfg->log_path) {
            snprintf(log_path, cap, "%s.rank%zu", cfg->log_path, r->first_rank);
            eff->log_path = log_path;
        }
    }
    if (r->world->note && !eff->quiet)
        fprintf(stderr, "herd: %s\n", r->world->note);
    if (eff->precision == HERD_PRECISION_BF16 && herd_nn_bf16_support() == HERD_BF16_EMULATED && !eff->quiet)
        fprintf(stderr, "herd: warning: this CPU has no avx512_bf16 or AMX: oneDNN emulates bf16 (correct, slower than fp32)\n");
    if (!cfg->algo && eff->workers > 1 && !eff->quiet)
        fprintf(stderr, "herd: %zu workers and no --algo: training allreduce (synchronous SGD; 'herd algos' lists "
                        "the others)\n", eff->workers);
}

/* The run's name (run_id, rank 0's on every rank); where the run spans
 * processes, first whether every rank was started alike (*refused: not). */
static herd_status name_run(herd_run *r, worker_ctx *workers, bool *refused, herd_err *err)
{
    herd_status st = HERD_OK;
    herd_comm *comm = workers[0].w.comm;
    if (herd__run_spans_processes(r) && (st = herd__agree(r, &workers[0].w, refused, err)) < 0)
        return st;
    make_run_id(r->run_id);
    if (herd__run_spans_processes(r) && (st = herd_broadcast(comm, r->run_id, sizeof r->run_id, 0)) < 0 && err)
        *err = comm->err;
    return st;
}

/* The "start" record: the figures a reader wants at a glance, then every
 * option as the run resolved it, so that the run can be repeated from them
 * (*options, the caller's to free: the result keeps them). A log that
 * cannot be written fails here, before any training. */
static herd_status log_start(herd_run *r, herd__train_config *eff, const worker_ctx *workers, char **options,
                             herd_err *err)
{
    char now[32];
    time_t started = time(NULL);
    struct tm utc;
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&started, &utc));
    enum { OPTIONS_CAP = 16384 };
    if (!(*options = malloc(OPTIONS_CAP)))
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    eff->engine = r->world->engine->name; /* as the run resolved it, as --algo and --lr are */
    herd__options_json(eff, r->algo_ops, r->algo_opts, *options, OPTIONS_CAP);
    herd__log_record(&r->log, "start",
                     "\"run_id\":\"%s\",\"time\":\"%s\",\"rank\":%zu,\"algo\":\"%s\",\"engine\":\"%s\",\"model\":\"%s\",\"workers\":%zu,\"epochs\":%zu,"
                     "\"batch\":%zu,\"lr\":%g,\"momentum\":%g,\"seed\":%llu,\"nparams\":%zu,\"train_n\":%zu,\"test_n\":%zu,"
                     "\"threads\":%zu,\"options\":%s",
                     r->run_id, now, r->first_rank, eff->algo, r->world->engine->name, eff->model, eff->workers, eff->epochs, eff->batch, (double)eff->optim.lr,
                     (double)eff->optim.momentum, (unsigned long long)eff->seed, workers[0].w.nparams, r->train.n,
                     r->test.n, eff->threads, *options);
    return herd__log_check(&r->log, err);
}

/* Once every worker has stopped: the final evaluation (not when stopped
 * from outside: whoever stopped the run wants it to end now), on this
 * thread with the workers' --threads, as theirs ran; the result (which
 * takes *options), the trace, and a stopped run's "stop" record. */
static herd_status finish(herd_run *r, worker_ctx *workers, double wall, herd_train_result *res, char **options,
                          herd_err *err)
{
    herd_status st = HERD_OK;
    const herd__train_config *cfg = r->cfg;
    worker_ctx *w0 = &workers[0];
    bool stopped = false;
    for (size_t i = 0; i < r->nlocal; i++)
        stopped = stopped || workers[i].stop.stopped;
    if (!stopped)
        warn_unfired(r, workers);
    herd_nn_set_threads((int)cfg->threads);
    if (r->first_rank == 0 && !stopped) {
        if ((st = herd__evaluate(w0, w0->result.train_loss, w0->result.last_epoch_s)) < 0) {
            if (err)
                *err = w0->w.err.msg[0] ? w0->w.err : w0->w.comm->err;
            goto out;
        }
    }
    if (stopped && !w0->result.eval_model) /* stopped before any evaluation: no figure, not 0 */
        w0->result.test_acc = w0->result.test_loss = w0->result.worker0_acc = NAN;
    HERD_TRY(herd__result_fill(r, workers, wall, res, err));
    res->options = *options, *options = NULL;
    HERD_TRY(herd__trace_write(r, workers, err));
    if (stopped) {
        res->stop_signal = atomic_load(cfg->stop);
        res->stop_step = w0->w.step;
        res->stop_checkpoint = w0->stop.saved;
        res->status = "stopped";
        herd__log_record(&r->log, "stop", "\"signal\":%d,\"step\":%zu,\"epoch\":%zu,\"checkpoint\":%s",
                         res->stop_signal, res->stop_step, w0->w.epoch + 1, res->stop_checkpoint ? "true" : "false");
    }
out:
    return st;
}

herd_status herd__train(const herd__train_config *cfg, herd_train_result *res, herd_err *err)
{
    herd_status st = HERD_OK;
    herd__train_config eff = *cfg;
    herd_run r = {.cfg = &eff};
    worker_ctx *workers = NULL;
    char *options = NULL; /* the options as JSON: the start record's, then the result's */
    bool log_open = false;
    char log_path[4096];
    memset(res, 0, sizeof *res);
    bool refused = false;
    if ((st = prepare(cfg, &r, &eff, &refused, err)) < 0) {
        res->refused = refused;
        goto out;
    }
    per_process(cfg, &r, &eff, log_path, sizeof log_path);
    atomic_init(&r.stop_at, SIZE_MAX);
    if ((st = open_run(&r, &workers, &log_open, &refused, err)) < 0) {
        res->refused = refused;
        goto out;
    }
    r.workers = workers;
    if ((st = name_run(&r, workers, &refused, err)) < 0) {
        res->refused = refused;
        goto out;
    }
    HERD_TRY(log_start(&r, &eff, workers, &options, err));
    double t_start = herd__now();
    if ((st = herd_world_run(r.world, herd__worker_thread, workers, sizeof *workers, err)) < 0) {
        atomic_store(&r.abort, 1);
        goto out;
    }
    herd_world_close(r.world);
    double wall = herd__now() - t_start;
    HERD_TRY(first_failure(&r, workers, err));
    HERD_TRY(finish(&r, workers, wall, res, &options, err));
out:
    res->rank = r.first_rank; /* a failure too is reported from rank 0 */
    for (size_t i = 0; st < 0 && workers && i < r.nlocal; i++)
        if (workers[i].w.comm)
            workers[i].w.comm->failed = true; /* as in herd__worker_thread: no collective teardown */
    free(options);
    return close_run(&r, workers, log_open, st, err);
}
