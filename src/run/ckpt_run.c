/* Checkpoints of a training run: which state goes into which section, when
 * the workers write, and how a resume puts it back (see ckpt_run.h). */
#include "run/ckpt_run.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "herd/herd_comm.h"
#include "herd/herd_nn.h"
#include "core/finite.h"
#include "run/options.h"

/* A worker's sections: params, momentum, optimizer state, buffers, cursor,
 * rng, algo; the run's: claim, meta, model (worker 0's), options, norm,
 * description. */
enum { CURSOR_BYTES = 40, RNG_BYTES = 32, CLAIM_BYTES = 8, SECTIONS_PER_WORKER = 7, RUN_SECTIONS = 6 };
/* A slot sent to worker 0 from another process: a head (what follows:
 * momentum, buffers, optimizer record and algo sizes, then the cursor and
 * rng sections), then each of its arrays that is not empty, in slot_pieces'
 * order, under one tag (MPI keeps the order of one sender's messages of a
 * tag). Tags stay below 32768, the smallest MPI_TAG_UB. */
enum { SLOT_HEAD_BYTES = 5 * 8 + CURSOR_BYTES + RNG_BYTES, SLOT_PIECES = 5, TAG_CKPT = 0x636b };

/* One worker's state, copied out between the two barriers of a save. */
typedef struct slot {
    float *params, *momentum, *buffers;
    size_t nmomentum, nbuffers;
    unsigned char *optim; /* the optimizer's record (herd_optim_state_save) */
    size_t optim_len;
    unsigned char cursor[CURSOR_BYTES], rng[RNG_BYTES];
    unsigned char *algo;
    size_t algo_len, algo_cap, algo_need;
    bool has_algo;
} slot;

struct herd__ckpt_run {
    const herd__train_config *cfg;
    herd_ckpt_info info; /* step and epoch set per checkpoint */
    size_t every, last_step;
    bool async;          /* checkpoints at holds of the shared batch counter */
    uint64_t per_epoch, total; /* async: global batches an epoch, in the run */
    unsigned char claim[CLAIM_BYTES]; /* async: the counter, filled by worker 0 */
    herd_ckpt *resume;   /* the checkpoint resumed from, until the run ends */
    int lock_fd;         /* DIR/.lock, flock()ed for the run (-1: none) */
    slot *slots;         /* one per worker */
    herd_ckpt_section *secs;
    /* the model the run keeps, filled by worker 0 (herd_ckpt.h) */
    herd_ckpt_kept kept;
    bool other_data;     /* resumed on other data than the checkpoint's (--other-data) */
    uint64_t other_train, other_test; /* with other_data: the checkpoint's digests */
    float *model;        /* nparams floats: the kept model, where it is not worker 0's params */
    bool has_model;
    unsigned char *meta; /* the meta section (its length is fixed by the run's --data) */
    char *desc;          /* the description section: the model's (herd_model_description) */
    float *norm;         /* the norm section: the data's standardization, c means then c stds (NULL: none) */
    size_t nnorm;        /* floats in it */
    char *options;       /* the options section: "name=value\n" of every HERD_OPT_RESUME row and the
                          * algorithm's options ("algo.name=value"), which a resume must keep */
    size_t meta_len;
    herd_ckpt_info last; /* the header of the last checkpoint written */
    bool wrote_last;     /* ... which is of the run's last step */
    /* this process's workers: first_rank .. first_rank + nlocal - 1; where
     * that is not all of them, the others send worker 0 their slots */
    size_t first_rank, nlocal;
};

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Whether --checkpoint saves every piece of state `algo` keeps between
 * steps: through its save/load hooks, or because it keeps none beyond the
 * worker's weights and optimizer (ops->stateless). */
static bool can_checkpoint(const herd_algo_ops *algo)
{
    return (algo->save && algo->load) || algo->stateless;
}

/* The algorithms --checkpoint takes, as "a, b, c". */
static void checkpointable(char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; herd_algos[i] && len < cap; i++)
        if (can_checkpoint(herd_algos[i]))
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", herd_algos[i]->name);
}

/* The engines --checkpoint runs on, as "a, b". */
static void checkpointing_engines(char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = 0;
    for (const herd_engine *const *e = herd_engines; *e && len < cap; e++)
        if ((*e)->caps & HERD_ENGINE_CHECKPOINT)
            len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", (*e)->name);
}

herd_status herd__ckpt_check(const herd__train_config *cfg, const herd_algo_ops *algo, const herd_engine *engine,
                             herd_err *err)
{
    if (cfg->resume && !cfg->checkpoint_dir)
        return herd_err_set(err, HERD_EINVAL, "--resume needs --checkpoint DIR (the directory to resume from)");
    if (cfg->other_data && !cfg->resume)
        return herd_err_set(err, HERD_EINVAL, "--other-data applies to --resume (a checkpoint's run read other data)");
    if (!cfg->checkpoint_dir) {
        if (cfg->checkpoint_every)
            return herd_err_set(err, HERD_EINVAL, "--checkpoint-every needs --checkpoint DIR");
        return HERD_OK;
    }
    if (!*cfg->checkpoint_dir)
        return herd_err_set(err, HERD_EINVAL, "--checkpoint needs a directory name");
    if (cfg->checkpoint_keep < 1 || cfg->checkpoint_keep > 1000000)
        return herd_err_set(err, HERD_EINVAL, "--keep must be in [1, 1000000], got %zu", cfg->checkpoint_keep);
    if (!(engine->caps & HERD_ENGINE_CHECKPOINT)) {
        char list[256];
        checkpointing_engines(list, sizeof list);
        return herd_err_set(err, HERD_EUNSUPPORTED, "--checkpoint: the %s engine cannot checkpoint yet (herd checkpoints on --engine %s)",
                            engine->name, list);
    }
    if (!can_checkpoint(algo)) {
        char list[512];
        checkpointable(list, sizeof list);
        return herd_err_set(err, HERD_EUNSUPPORTED,
                            "--checkpoint: --algo %s keeps state between steps that herd cannot checkpoint yet%s "
                            "(herd checkpoints --algo %s)",
                            algo->name,
                            algo->async ? " (an asynchronous algorithm whose workers may wait on one another inside "
                                          "a step, which a checkpoint's rendezvous of every worker would deadlock)"
                                        : "",
                            list);
    }
    if (algo->async && (engine->caps & HERD_ENGINE_PROCESS_PER_WORKER))
        return herd_err_set(err, HERD_EUNSUPPORTED,
                            "--checkpoint: --algo %s is asynchronous, which herd checkpoints on one process's workers "
                            "only, not on the %s engine's processes (it checkpoints the synchronous algorithms there)",
                            algo->name, engine->name);
    if (algo->async) {
        /* an asynchronous run checkpoints where every worker meets at a
         * hold of the batch counter (ckpt_run.h): nothing may keep one
         * worker from getting there */
        const char *why = cfg->nfail ? "--fail (a lost worker never comes to the checkpoint)"
                        : cfg->max_steps ? "--max-steps (each worker would stop at its own step, not at a checkpoint)"
                                         : NULL;
        if (why)
            return herd_err_set(err, HERD_EUNSUPPORTED,
                                "--checkpoint: --algo %s is asynchronous; its checkpoints stop every worker at the same "
                                "point of the shared batch counter, which %s rules out",
                                algo->name, why);
    }
    uint64_t newest[1];
    size_t held = 0;
    if (!cfg->resume && herd_ckpt_list(cfg->checkpoint_dir, newest, 1, &held, NULL) == HERD_OK && held)
        /* a fresh run would mix its checkpoints with these, and prune them:
         * refused before anything is read (and by --dry-run) */
        return herd_err_set(err, HERD_EINVAL,
                            "checkpoint directory %s already holds checkpoints (the newest: ckpt-%" PRIu64
                            ".herd); add --resume to continue from them, or choose another directory",
                            cfg->checkpoint_dir, newest[0]);
    return HERD_OK;
}

static bool bad_fit(const char *s, size_t cap) { return strlen(s) >= cap; }

/* The loaded checkpoint must be of this very run. */
static herd_status check_same_run(const herd__ckpt_run *cr, herd_err *err)
{
    const herd_ckpt_info *h = herd_ckpt_get_info(cr->resume), *me = &cr->info;
    const char *f = herd_ckpt_label(cr->resume);
    if (strcmp(h->model, me->model) || h->nparams != me->nparams)
        return herd_err_set(err, HERD_EINVAL,
                            "checkpoint %s is of model '%s' with %" PRIu64 " parameters; this run trains --model %s "
                            "with %" PRIu64,
                            f, h->model, h->nparams, me->model, me->nparams);
    if (strcmp(h->algo, me->algo))
        return herd_err_set(err, HERD_EINVAL, "checkpoint %s was written by --algo %s; this run is --algo %s", f,
                            h->algo, me->algo);
    if (h->workers != me->workers)
        return herd_err_set(err, HERD_EINVAL, "checkpoint %s was written by %" PRIu32 " workers; this run has --workers %" PRIu32,
                            f, h->workers, me->workers);
    if (h->batch != me->batch)
        return herd_err_set(err, HERD_EINVAL, "checkpoint %s was written with --batch %" PRIu32 "; this run has --batch %" PRIu32,
                            f, h->batch, me->batch);
    if (h->seed != me->seed)
        return herd_err_set(err, HERD_EINVAL,
                            "checkpoint %s was written with --seed %" PRIu64 "; this run has --seed %" PRIu64
                            " (the data order would differ)",
                            f, h->seed, me->seed);
    if (h->steps_per_epoch != me->steps_per_epoch)
        return herd_err_set(err, HERD_EINVAL,
                            "checkpoint %s has %" PRIu64 " steps per epoch; this run has %" PRIu64
                            " (another training set size, --train-limit or data set)",
                            f, h->steps_per_epoch, me->steps_per_epoch);
    if (h->epoch >= cr->cfg->epochs)
        return herd_err_set(err, HERD_EINVAL, "checkpoint %s is in epoch %" PRIu64 ", beyond --epochs %zu", f,
                            h->epoch + 1, cr->cfg->epochs);
    return HERD_OK;
}

/* "name=value\n" for every row of table (prefixed by prefix) that flag
 * marks (0: every row), appended to buf at *len. */
static void options_text(const herd_opt *table, const void *obj, unsigned flag, const char *prefix, char *buf,
                         size_t *len, size_t cap)
{
    for (const herd_opt *o = table; o && o->name && *len < cap; o++) {
        if (flag && !(o->flags & flag))
            continue;
        char v[256];
        herd_opt_format(o, obj, v, sizeof v);
        *len += (size_t)snprintf(buf + *len, cap - *len, "%s%s=%s\n", prefix, o->name, v);
    }
}

/* The value of name in text ("name=value\n" lines) into out; false when absent. */
static bool option_value(const char *text, size_t len, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    for (const char *p = text, *end = text + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if ((size_t)(le - p) > n && !strncmp(p, name, n) && p[n] == '=') {
            snprintf(out, cap, "%.*s", (int)(le - p - (ptrdiff_t)n - 1), p + n + 1);
            return true;
        }
        p = le + 1;
    }
    return false;
}

herd_status herd__ckpt_run_options(herd__ckpt_run *cr, const herd_algo_ops *ops, const void *algo_opts, herd_err *err)
{
    enum { CAP = 8192 };
    if (!cr)
        return HERD_OK;
    if (!(cr->options = malloc(CAP)))
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    size_t len = 0;
    cr->options[0] = 0;
    options_text(herd__run_options, cr->cfg, HERD_OPT_RESUME, "", cr->options, &len, CAP);
    /* an algorithm that saves its own state records its options as it
     * resolved them and checks them itself (ps-shards 0 is "every worker");
     * one that keeps none has them checked here */
    if (ops->stateless && !ops->save)
        options_text(ops->opts, algo_opts, 0, "algo.", cr->options, &len, CAP);
    herd_ckpt_section sec;
    if (!cr->resume || herd_ckpt_find(cr->resume, "options", 0, &sec, NULL) != HERD_OK)
        return HERD_OK; /* a checkpoint of an older herd records none: its header's checks stand */
    /* every option this run keeps, against the value the checkpoint's run
     * had: all that differ named (a value left to the algorithm, "", is the
     * algorithm's to check: its record says what it resolved to) */
    char then[1024] = "", now[1024] = "";
    size_t nt = 0, nn = 0, differ = 0;
    for (const char *p = cr->options; *p;) {
        const char *eq = strchr(p, '='), *nl = strchr(p, '\n');
        char name[64], mine[256], theirs[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - p), p);
        snprintf(mine, sizeof mine, "%.*s", (int)(nl - eq - 1), eq + 1);
        p = nl + 1;
        if (!option_value(sec.data, sec.bytes, name, theirs, sizeof theirs) || !*mine || !*theirs ||
            !strcmp(mine, theirs))
            continue;
        const char *flag = strncmp(name, "algo.", 5) ? name : name + 5;
        if (nt < sizeof then)
            nt += (size_t)snprintf(then + nt, sizeof then - nt, "%s--%s %s", differ ? ", " : "", flag, theirs);
        if (nn < sizeof now)
            nn += (size_t)snprintf(now + nn, sizeof now - nn, "%s--%s %s", differ ? ", " : "", flag, mine);
        differ++;
    }
    if (differ)
        return herd_err_set(err, HERD_EINVAL,
                            "checkpoint %s was written with %s; this run has %s (a resumed run goes on as it began: "
                            "give it the same options, or start a new run in another --checkpoint directory)",
                            herd_ckpt_label(cr->resume), then, now);
    return HERD_OK;
}

/* The data the checkpoint's run read must be this run's (its digests),
 * unless --other-data: then a warning, and the summary says so. */
static herd_status check_same_data(herd__ckpt_run *cr, herd_err *err)
{
    if (!cr->kept.has_digests)
        return HERD_OK;
    herd_ckpt_kept k;
    herd_status st = herd_ckpt_kept_info(cr->resume, &k, err);
    if (st < 0)
        return st;
    st = herd__ckpt_check_data(herd_ckpt_label(cr->resume), &k, cr->kept.data_path, cr->kept.train_digest,
                               cr->kept.test_digest, "--other-data resumes on them anyway", err);
    if (st != HERD_EDATA || !cr->cfg->other_data)
        return st;
    if (!cr->cfg->quiet)
        fprintf(stderr, "herd: warning: --other-data: %s\n", err->msg);
    cr->other_data = true;
    cr->other_train = k.train_digest, cr->other_test = k.test_digest;
    return HERD_OK;
}

bool herd__ckpt_other_data(const herd__ckpt_run *cr, uint64_t *train, uint64_t *test)
{
    if (!cr || !cr->other_data)
        return false;
    *train = cr->other_train, *test = cr->other_test;
    return true;
}

/* The run's hold on its checkpoint directory: DIR/.lock, flock()ed (an
 * advisory lock the kernel drops when the process ends, however it ends)
 * and holding this process's pid, so that a second run in DIR is refused
 * naming the first instead of interleaving and pruning its checkpoints.
 * Creating the lock file also tells a directory herd cannot write to now,
 * not at the first checkpoint an epoch later. */
static herd_status lock_dir(herd__ckpt_run *cr, const char *dir, herd_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return herd_err_set(err, HERD_EIO, "checkpoint directory %s is not writable: %s", dir, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        close(fd);
        if (e == EWOULDBLOCK)
            return herd_err_set(err, HERD_EIO, "checkpoint directory %s is in use by another herd run (pid %s); "
                                "wait for it or choose another directory", dir, pid[0] ? pid : "unknown");
        return herd_err_set(err, HERD_EIO, "checkpoint directory %s: cannot lock %s: %s", dir, path, strerror(e));
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        int e = errno;
        close(fd);
        return herd_err_set(err, HERD_EIO, "checkpoint directory %s is not writable: %s", dir, strerror(e));
    }
    cr->lock_fd = fd;
    return HERD_OK;
}

/* What the header and the meta section must hold of the run. */
static herd_status check_fits(const herd__train_config *cfg, const char *algo, herd_err *err)
{
    if (bad_fit(algo, sizeof((herd_ckpt_info *)0)->algo)) /* a model's name fits (herd_model_name_for) */
        return herd_err_set(err, HERD_EINVAL, "--checkpoint: algorithm name too long for the header");
    if (cfg->workers > UINT32_MAX || cfg->batch > UINT32_MAX)
        return herd_err_set(err, HERD_EINVAL, "--checkpoint: too many workers or too large a batch");
    if (cfg->data && strlen(cfg->data) >= HERD_CKPT_MAX_DATA)
        return herd_err_set(err, HERD_EINVAL, "--checkpoint: the --data name is too long to record (%zu bytes, at most %d)",
                            strlen(cfg->data), HERD_CKPT_MAX_DATA - 1);
    return HERD_OK;
}

/* The checkpoint directory, made where it is missing (not on --resume). */
static herd_status make_dir(const char *dir, bool resume, herd_err *err)
{
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        /* the ranks of a run on several processes all make it: one wins */
        if (errno != ENOENT || resume || (mkdir(dir, 0755) != 0 && errno != EEXIST) || stat(dir, &sb) != 0)
            return herd_err_set(err, errno == ENOENT ? HERD_ENOTFOUND : HERD_EIO, "checkpoint directory %s: %s", dir,
                                strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode))
        return herd_err_set(err, HERD_EINVAL, "checkpoint directory %s is not a directory", dir);
    return HERD_OK;
}

/* The header's fields, when checkpoints fall, and the buffers a save
 * fills: the slots, the section table, the meta and norm sections. */
static herd_status lay_out(herd__ckpt_run *cr, const char *algo, size_t nparams, size_t steps_per_epoch,
                           const herd_dataset *train, const herd_dataset *test, herd_err *err)
{
    const herd__train_config *cfg = cr->cfg;
    herd_ckpt_info *in = &cr->info;
    in->nparams = nparams, in->seed = cfg->seed, in->steps_per_epoch = steps_per_epoch;
    in->workers = (uint32_t)cfg->workers, in->batch = (uint32_t)cfg->batch;
    herd_model_name_for(cfg->model, in->model, sizeof in->model);
    snprintf(in->algo, sizeof in->algo, "%s", algo);
    cr->every = cfg->checkpoint_every ? cfg->checkpoint_every : steps_per_epoch;
    const herd_algo_ops *ops = herd_algo_find(algo);
    cr->async = ops && ops->async;
    cr->per_epoch = (uint64_t)steps_per_epoch * cfg->workers;
    cr->total = cr->per_epoch * cfg->epochs;
    cr->last_step = cfg->epochs * steps_per_epoch;
    if (cfg->max_steps && cfg->max_steps < cr->last_step)
        cr->last_step = cfg->max_steps;
    cr->slots = calloc(cfg->workers, sizeof *cr->slots);
    cr->secs = calloc(cfg->workers * SECTIONS_PER_WORKER + RUN_SECTIONS, sizeof *cr->secs);
    snprintf(cr->kept.data, sizeof cr->kept.data, "%s", cfg->data ? cfg->data : "");
    cr->kept.has_digests = train && test; /* NULL: a caller with no data (a test's) records none */
    cr->kept.train_digest = train ? train->digest : 0, cr->kept.test_digest = test ? test->digest : 0;
    herd_data_resolve(cfg->data, cr->kept.data_path, sizeof cr->kept.data_path);
    cr->meta_len = herd__ckpt_meta_encode(&cr->kept, NULL, 0);
    cr->meta = malloc(cr->meta_len);
    if (train && train->mean && train->std && (cr->norm = malloc(2 * train->c * sizeof(float)))) {
        /* what an exported model's inputs must be made into (herd export's metadata) */
        memcpy(cr->norm, train->mean, train->c * sizeof(float));
        memcpy(cr->norm + train->c, train->std, train->c * sizeof(float));
        cr->nnorm = 2 * train->c;
    }
    if (!cr->slots || !cr->secs || !cr->meta)
        return herd_err_set(err, HERD_ENOMEM, "out of memory for checkpoints of %zu workers", cfg->workers);
    return HERD_OK;
}

/* A fresh run would mix its checkpoints with those dir holds, and prune
 * them: refused. */
static herd_status check_fresh(const char *dir, herd_err *err)
{
    herd_status st = HERD_OK;
    uint64_t steps[1];
    size_t n = 0;
    HERD_TRY(herd_ckpt_list(dir, steps, 1, &n, err));
    if (n)
        st = herd_err_set(err, HERD_EINVAL,
                          "checkpoint directory %s already holds checkpoints (the newest: ckpt-%" PRIu64
                          ".herd); add --resume to continue from them, or choose another directory",
                          dir, steps[0]);
out:
    return st;
}

/* --resume: the newest valid checkpoint in dir, which must be of this run
 * and its data. */
static herd_status open_resume(herd__ckpt_run *cr, const char *dir, herd_err *err)
{
    herd_status st = HERD_OK;
    const herd__train_config *cfg = cr->cfg;
    char warn[2048];
    size_t skipped = 0;
    HERD_TRY(herd_ckpt_latest(dir, &cr->resume, warn, sizeof warn, &skipped, err));
    if (skipped && !cfg->quiet)
        fprintf(stderr, "herd: warning: skipped %zu newer checkpoint(s) that are not valid:\n%s", skipped, warn);
    else if (warn[0] && !cfg->quiet) /* a file not named after its step */
        fprintf(stderr, "herd: warning: %s", warn);
    HERD_TRY(check_same_run(cr, err));
    HERD_TRY(check_same_data(cr, err));
    if (!cfg->quiet)
        fprintf(stderr, "herd: resuming from %s (step %" PRIu64 ", epoch %" PRIu64 ")\n",
                herd_ckpt_label(cr->resume), herd_ckpt_get_info(cr->resume)->step,
                herd_ckpt_get_info(cr->resume)->epoch + 1);
out:
    return st;
}

herd_status herd__ckpt_run_open(const herd__train_config *cfg, const char *algo, size_t nparams,
                                size_t steps_per_epoch, const herd_dataset *train, const herd_dataset *test,
                                size_t first_rank, size_t nlocal, herd__ckpt_run **out, herd_err *err)
{
    herd_status st = HERD_OK;
    *out = NULL;
    if (!cfg->checkpoint_dir)
        return HERD_OK;
    const char *dir = cfg->checkpoint_dir;
    if ((st = check_fits(cfg, algo, err)) < 0 || (st = make_dir(dir, cfg->resume, err)) < 0)
        return st;
    herd__ckpt_run *cr = calloc(1, sizeof *cr);
    if (!cr)
        return herd_err_set(err, HERD_ENOMEM, "out of memory for checkpoints");
    cr->cfg = cfg;
    cr->lock_fd = -1;
    cr->first_rank = first_rank, cr->nlocal = nlocal;
    /* the writer's process holds the directory (under herd sim every rank
     * is one process, whose second flock would refuse the first) */
    if (first_rank == 0)
        HERD_TRY(lock_dir(cr, dir, err));
    HERD_TRY(lay_out(cr, algo, nparams, steps_per_epoch, train, test, err));
    if (cfg->resume)
        HERD_TRY(open_resume(cr, dir, err));
    else
        HERD_TRY(check_fresh(dir, err));
out:
    if (st < 0)
        herd__ckpt_run_free(cr);
    else
        *out = cr;
    return st;
}

void herd__ckpt_run_free(herd__ckpt_run *cr)
{
    if (!cr)
        return;
    for (size_t i = 0; cr->slots && i < cr->cfg->workers; i++) {
        slot *s = &cr->slots[i];
        free(s->params), free(s->momentum), free(s->buffers), free(s->optim), free(s->algo);
    }
    free(cr->slots);
    free(cr->secs);
    free(cr->options);
    free(cr->norm);
    free(cr->desc);
    free(cr->model);
    free(cr->meta);
    herd_ckpt_free(cr->resume);
    if (cr->lock_fd >= 0)
        close(cr->lock_fd); /* and the lock with it */
    free(cr);
}

bool herd__ckpt_resuming(const herd__ckpt_run *cr) { return cr && cr->resume; }

herd_status herd__ckpt_run_describe(herd__ckpt_run *cr, const char *desc, herd_err *err)
{
    herd_ckpt_section s;
    if (!cr)
        return HERD_OK;
    if (cr->resume && herd_ckpt_find(cr->resume, "description", 0, &s, NULL) == HERD_OK &&
        (s.bytes != strlen(desc) || memcmp(s.data, desc, s.bytes)))
        return herd_err_set(err, HERD_EINVAL, "checkpoint %s is of another description of model '%s' than --model %s "
                            "now holds; resume with the description it was trained with",
                            herd_ckpt_label(cr->resume), cr->info.model, cr->cfg->model);
    if (!(cr->desc = strdup(desc)))
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    return HERD_OK;
}

/* The data order of loader l's current epoch, as the rng section holds it. */
static void encode_rng(const herd_loader *l, unsigned char *out)
{
    uint32_t crc = 0;
    unsigned char b[8];
    for (size_t i = 0; i < l->d->n; i++) {
        put64(b, l->perm[i]);
        crc = herd_crc32c(crc, b, 8);
    }
    put64(out, l->seed);
    put64(out + 8, l->epoch);
    put64(out + 16, l->d->n);
    put64(out + 24, crc);
}

/* The optimizer's record: none for sgd (a checkpoint from before there was
 * one is sgd's), and the same optimizer as this run's. */
static herd_status restore_optim(herd_ckpt *ck, herd_worker *w, herd_err *err)
{
    const char *f = herd_ckpt_label(ck);
    herd_ckpt_section s = {0};
    if (herd_ckpt_find(ck, "optim", (uint32_t)w->rank, &s, NULL) != HERD_OK) {
        if (herd_optim_state_bytes(&w->optim) == 0)
            return HERD_OK;
        return herd_err_set(err, HERD_EINVAL, "checkpoint %s was written with --optimizer sgd; this run has --optimizer %s",
                            f, herd_optimizer_name(w->optim.cfg.optimizer));
    }
    /* a record of another optimizer (sgd's run included) is refused by name */
    herd_err e = {0};
    herd_status st = herd_optim_state_load(&w->optim, s.data, s.bytes, &e);
    if (st < 0)
        return herd_err_set(err, st, "checkpoint %s, worker %zu: %s", f, w->rank, e.msg);
    return HERD_OK;
}

herd_status herd__ckpt_restore(herd__ckpt_run *cr, herd_worker *w, herd_loader *l, herd__ckpt_cursor *cur,
                               herd_err *err)
{
    herd_ckpt *ck = cr->resume;
    const char *f = herd_ckpt_label(ck);
    uint32_t r = (uint32_t)w->rank;
    herd_ckpt_section s = {0};
    herd_status st = herd_ckpt_copy(ck, "params", r, w->params, w->nparams * sizeof(float), err);
    if (st < 0)
        return st;
    if ((st = restore_optim(ck, w, err)) < 0) /* which optimizer, before what its momentum is */
        return st;
    bool has = herd_ckpt_find(ck, "momentum", r, &s, NULL) == HERD_OK;
    if (w->optim.v && !has)
        return herd_err_set(err, HERD_EINVAL, "checkpoint %s holds no momentum (written with --momentum 0?); this run has --momentum %g",
                            f, (double)w->optim.cfg.momentum);
    if (!w->optim.v && has)
        return herd_err_set(err, HERD_EINVAL, "checkpoint %s holds momentum; this run has --momentum 0", f);
    if (w->optim.v && (st = herd_ckpt_copy(ck, "momentum", r, w->optim.v, w->optim.n * sizeof(float), err)) < 0)
        return st;
    size_t nb = herd_model_nbuffers(w->model);
    has = herd_ckpt_find(ck, "buffers", r, &s, NULL) == HERD_OK;
    if (has != (nb > 0))
        return herd_err_set(err, HERD_EINVAL, "checkpoint %s %s model buffers (batch-norm statistics); this model has %zu",
                            f, has ? "holds" : "holds no", nb);
    if (nb && (st = herd_ckpt_copy(ck, "buffers", r, herd_model_buffers(w->model), nb * sizeof(float), err)) < 0)
        return st;
    unsigned char cb[CURSOR_BYTES], rb[RNG_BYTES], mine[RNG_BYTES];
    if ((st = herd_ckpt_copy(ck, "cursor", r, cb, sizeof cb, err)) < 0 ||
        (st = herd_ckpt_copy(ck, "rng", r, rb, sizeof rb, err)) < 0)
        return st;
    cur->epoch = get64(cb), cur->epoch_step = get64(cb + 8), cur->step = get64(cb + 16), cur->nloss = get64(cb + 24);
    uint64_t bits = get64(cb + 32);
    memcpy(&cur->loss_sum, &bits, sizeof bits);
    const herd_ckpt_info *h = herd_ckpt_get_info(ck);
    cur->claimed = 0;
    if (cr->async) {
        unsigned char cl[CLAIM_BYTES];
        if ((st = herd_ckpt_copy(ck, "claim", 0, cl, sizeof cl, err)) < 0)
            return st;
        cur->claimed = get64(cl);
    }
    /* synchronous: every worker at the header's step; asynchronous: each at
     * its own, within the batches handed out */
    bool fits = cr->async ? cur->claimed / h->workers == h->step && cur->step <= cur->claimed &&
                                cur->epoch <= h->epoch && cur->epoch_step <= cur->step && cur->nloss <= cur->epoch_step
                          : cur->epoch == h->epoch && cur->step == h->step && cur->epoch_step <= h->steps_per_epoch &&
                                cur->step == cur->epoch * h->steps_per_epoch + cur->epoch_step &&
                                cur->nloss <= cur->epoch_step;
    if (!fits)
        return herd_err_set(err, HERD_ECORRUPT,
                            "checkpoint %s: worker %" PRIu32 "'s cursor (epoch %" PRIu64 ", step %" PRIu64 " of the epoch, %" PRIu64
                            " in all) does not fit the header (epoch %" PRIu64 ", step %" PRIu64 ")",
                            f, r, cur->epoch, cur->epoch_step, cur->step, h->epoch, h->step);
    herd_loader_start_epoch(l, (size_t)cur->epoch);
    encode_rng(l, mine);
    if (memcmp(rb, mine, RNG_BYTES))
        return herd_err_set(err, HERD_EINVAL,
                            "checkpoint %s: worker %" PRIu32 " saw epoch %" PRIu64 "'s examples in another order than "
                            "this run would (another seed, data set or herd version); refusing an inexact resume",
                            f, r, cur->epoch + 1);
    w->step = (size_t)cur->step;
    w->epoch = (size_t)cur->epoch;
    return HERD_OK;
}

/* A run on several processes: every one of them read the checkpoint
 * directory on its own; each must have taken the same checkpoint (they do
 * where the directory is one they share). Collective. */
static herd_status agree_resume(herd__ckpt_run *cr, herd_worker *w)
{
    herd_status st = HERD_OK;
    const herd_ckpt_info *h = herd_ckpt_get_info(cr->resume);
    unsigned char mine[24], *all = malloc(w->nworkers * sizeof mine);
    if (!all)
        return herd_err_set(&w->err, HERD_ENOMEM, "worker %zu: out of memory", w->rank);
    put64(mine, h->step), put64(mine + 8, h->epoch), put64(mine + 16, herd__ckpt_content_digest(cr->resume));
    HERD_TRY(herd_allgather(w->comm, mine, all, sizeof mine));
    for (size_t r = 0; r < w->nworkers; r++) {
        const unsigned char *o = all + r * sizeof mine;
        if (memcmp(o, all, 16))
            st = herd_err_set(&w->err, HERD_EINVAL,
                              "--resume: worker 0 resumes from step %" PRIu64 " and worker %zu from step %" PRIu64
                              "; the ranks must share the checkpoint directory %s (one filesystem)",
                              get64(all), r, get64(o), cr->cfg->checkpoint_dir);
        else if (memcmp(o + 16, all + 16, 8)) /* the same step, other bytes: another directory, another run */
            st = herd_err_set(&w->err, HERD_EINVAL,
                              "--resume: worker 0 and worker %zu read checkpoints of step %" PRIu64
                              " that differ (content digests %016" PRIx64 " and %016" PRIx64
                              "): the ranks must share the checkpoint directory %s (one filesystem)",
                              r, get64(all), get64(all + 16), get64(o + 16), cr->cfg->checkpoint_dir);
        if (st < 0)
            break;
    }
out:
    free(all);
    return st;
}

herd_status herd__ckpt_restore_algo(herd__ckpt_run *cr, herd_algo *a, herd_worker *w)
{
    if (cr->nlocal < cr->cfg->workers) {
        herd_status st = agree_resume(cr, w);
        if (st < 0)
            return st;
    }
    herd_ckpt_section s = {0};
    bool has = herd_ckpt_find(cr->resume, "algo", (uint32_t)w->rank, &s, NULL) == HERD_OK;
    const char *f = herd_ckpt_label(cr->resume);
    herd_status st = HERD_OK;
    if (!a->ops->load) {
        if (has)
            return herd_err_set(&w->err, HERD_EUNSUPPORTED,
                                "checkpoint %s holds state of --algo %s that this herd cannot load", f, a->ops->name);
    } else if (!has) {
        return herd_err_set(&w->err, HERD_EINVAL, "checkpoint %s holds no state of --algo %s for worker %zu", f,
                            a->ops->name, w->rank);
    } else if ((st = a->ops->load(a, w, s.data, s.bytes)) < 0) {
        return st;
    }
    /* shared state (a server, a center, a window) is whole before anyone
     * steps on it */
    return herd_comm_barrier(w->comm);
}

bool herd__ckpt_due(const herd__ckpt_run *cr, const herd_worker *w)
{
    return cr && w->step > 0 && (w->step % cr->every == 0 || w->step == cr->last_step);
}

uint64_t herd__ckpt_next_hold(const herd__ckpt_run *cr, uint64_t claimed)
{
    if (!cr || claimed >= cr->total)
        return UINT64_MAX;
    uint64_t g = (uint64_t)cr->every * cr->info.workers, next = (claimed / g + 1) * g;
    return next < cr->total ? next : cr->total;
}

/* Room in slot s for nparams weights, nm momentum floats, nb buffers, an
 * optimizer record of no bytes and an algo record of `need` (a slot's
 * sizes other than the algo record's are the run's, fixed). */
static bool slot_alloc(slot *s, size_t nparams, size_t nm, size_t nb, size_t no, size_t need)
{
    if (!s->params && !(s->params = malloc(nparams * sizeof(float))))
        return false;
    if (no && !s->optim && !(s->optim = malloc(no)))
        return false;
    if (nm && !s->momentum && !(s->momentum = malloc(nm * sizeof(float))))
        return false;
    if (nb && !s->buffers && !(s->buffers = malloc(nb * sizeof(float))))
        return false;
    s->nmomentum = nm, s->nbuffers = nb, s->optim_len = no;
    if (need > s->algo_cap) {
        unsigned char *nbuf = realloc(s->algo, need);
        if (!nbuf)
            return false;
        s->algo = nbuf, s->algo_cap = need;
    }
    return true;
}

/* Copies worker w's state into its slot (on w's thread, between barriers). */
static herd_status fill_slot(herd__ckpt_run *cr, herd_algo *a, herd_worker *w, const herd_loader *l,
                             const herd__ckpt_cursor *cur)
{
    slot *s = &cr->slots[w->rank];
    size_t nb = herd_model_nbuffers(w->model), nm = w->optim.v ? w->optim.n : 0;
    size_t no = herd_optim_state_bytes(&w->optim);
    if (!slot_alloc(s, w->nparams, nm, nb, no, a->ops->save ? s->algo_need : 0))
        return herd_err_set(&w->err, HERD_ENOMEM, "worker %zu: out of memory for its checkpoint", w->rank);
    memcpy(s->params, w->params, w->nparams * sizeof(float));
    if (nm)
        memcpy(s->momentum, w->optim.v, nm * sizeof(float));
    if (nb)
        memcpy(s->buffers, herd_model_buffers(w->model), nb * sizeof(float));
    if (no)
        herd_optim_state_save(&w->optim, s->optim);
    uint64_t bits;
    memcpy(&bits, &cur->loss_sum, sizeof bits);
    put64(s->cursor, cur->epoch), put64(s->cursor + 8, cur->epoch_step), put64(s->cursor + 16, cur->step);
    put64(s->cursor + 24, cur->nloss), put64(s->cursor + 32, bits);
    encode_rng(l, s->rng);
    if (w->rank == 0)
        put64(cr->claim, cur->claimed);
    s->has_algo = a->ops->save != NULL;
    if (s->has_algo) {
        herd_status st = a->ops->save(a, w, s->algo, s->algo_cap, &s->algo_len);
        if (st < 0)
            return st;
        if (s->algo_len > s->algo_cap)
            return herd_err_set(&w->err, HERD_EINTERNAL, "--algo %s: its save hook asked for %zu bytes after %zu",
                                a->ops->name, s->algo_len, s->algo_cap);
    }
    return HERD_OK;
}

/* A slot's arrays, in the order they travel (SLOT_HEAD_BYTES); returns how
 * many of the SLOT_PIECES are not empty. */
typedef struct piece {
    void *p;
    size_t bytes;
} piece;

static size_t slot_pieces(slot *s, size_t nparams, piece *out)
{
    piece all[SLOT_PIECES] = {{s->params, nparams * sizeof(float)},
                              {s->momentum, s->nmomentum * sizeof(float)},
                              {s->buffers, s->nbuffers * sizeof(float)},
                              {s->optim, s->optim_len},
                              {s->algo, s->has_algo ? s->algo_len : 0}};
    size_t n = 0;
    for (size_t i = 0; i < SLOT_PIECES; i++)
        if (all[i].bytes)
            out[n++] = all[i];
    return n;
}

/* A worker of another process than worker 0's: its slot to worker 0. */
static herd_status send_slot(herd__ckpt_run *cr, herd_worker *w)
{
    herd_status st = HERD_OK;
    slot *s = &cr->slots[w->rank];
    unsigned char head[SLOT_HEAD_BYTES];
    put64(head, s->nmomentum), put64(head + 8, s->nbuffers), put64(head + 16, s->optim_len);
    put64(head + 24, s->has_algo), put64(head + 32, s->algo_len);
    memcpy(head + 40, s->cursor, CURSOR_BYTES);
    memcpy(head + 40 + CURSOR_BYTES, s->rng, RNG_BYTES);
    HERD_TRY(herd_comm_send(w->comm, 0, TAG_CKPT, head, sizeof head));
    piece ps[SLOT_PIECES];
    for (size_t i = 0, n = slot_pieces(s, w->nparams, ps); i < n; i++)
        HERD_TRY(herd_comm_send(w->comm, 0, TAG_CKPT, ps[i].p, ps[i].bytes));
out:
    return st;
}

/* Worker 0: worker r's slot, from its process (send_slot). Its sizes must
 * be worker 0's: one model and optimizer. */
static herd_status recv_slot(herd__ckpt_run *cr, herd_worker *w, size_t r)
{
    herd_status st = HERD_OK;
    slot *s = &cr->slots[r];
    const slot *mine = &cr->slots[0];
    unsigned char head[SLOT_HEAD_BYTES];
    HERD_TRY(herd_comm_recv(w->comm, r, TAG_CKPT, head, sizeof head));
    uint64_t nm = get64(head), nb = get64(head + 8), no = get64(head + 16), has = get64(head + 24),
             len = get64(head + 32);
    if (nm != mine->nmomentum || nb != mine->nbuffers || no != mine->optim_len || has != mine->has_algo ||
        len > SIZE_MAX / 2)
        return herd_err_set(&w->err, HERD_EINTERNAL,
                            "checkpoint: worker %zu's state (momentum %" PRIu64 ", buffers %" PRIu64 ", optimizer record %" PRIu64
                            " bytes) is not shaped as worker 0's (%zu, %zu, %zu)",
                            r, nm, nb, no, mine->nmomentum, mine->nbuffers, mine->optim_len);
    if (!slot_alloc(s, w->nparams, (size_t)nm, (size_t)nb, (size_t)no, has ? (size_t)len : 0))
        return herd_err_set(&w->err, HERD_ENOMEM, "worker 0: out of memory for worker %zu's checkpoint", r);
    s->has_algo = has, s->algo_len = (size_t)len;
    memcpy(s->cursor, head + 40, CURSOR_BYTES);
    memcpy(s->rng, head + 40 + CURSOR_BYTES, RNG_BYTES);
    piece ps[SLOT_PIECES];
    for (size_t i = 0, n = slot_pieces(s, w->nparams, ps); i < n; i++)
        HERD_TRY(herd_comm_recv(w->comm, r, TAG_CKPT, ps[i].p, ps[i].bytes));
out:
    return st;
}

/* Worker 0, between the save's barriers: the model the run keeps now (the
 * algorithm's eval_params, as an evaluation here would take it) and what
 * rebuilds it. */
static herd_status keep_model(herd__ckpt_run *cr, herd_algo *a, herd_worker *w, const herd_loader *l)
{
    const char *name = NULL;
    if (a->ops->eval_params) {
        if (!cr->model && !(cr->model = malloc(w->nparams * sizeof(float))))
            return herd_err_set(&w->err, HERD_ENOMEM, "worker 0: out of memory for the checkpoint's model");
        herd_status st = a->ops->eval_params(a, w, cr->model, &name);
        if (st < 0)
            return st;
        if (name && !herd__all_finite(cr->model, w->nparams))
            return herd_err_set(&w->err, HERD_ENONFINITE,
                                "step %zu: the %s model holds non-finite weights; no checkpoint written, the run "
                                "stops: the learning rate may be too high",
                                w->step, name);
    }
    cr->has_model = name != NULL;
    herd_ckpt_kept *k = &cr->kept;
    k->has_meta = true, k->final = false;
    k->c = l->d->c, k->h = l->d->h, k->w = l->d->w, k->nclasses = l->d->nclasses;
    snprintf(k->eval_model, sizeof k->eval_model, "%s", name ? name : "worker0");
    herd__ckpt_meta_encode(k, cr->meta, cr->meta_len);
    return HERD_OK;
}

/* The sections of a checkpoint from every slot, the counter and the kept
 * model (cr->secs); returns how many. */
static size_t build_sections(herd__ckpt_run *cr)
{
    size_t n = 0, nparams = (size_t)cr->info.nparams;
    for (size_t r = 0; r < cr->cfg->workers; r++) {
        const slot *s = &cr->slots[r];
        uint32_t wr = (uint32_t)r;
        cr->secs[n++] = (herd_ckpt_section){"params", wr, s->params, nparams * sizeof(float)};
        if (s->nmomentum)
            cr->secs[n++] = (herd_ckpt_section){"momentum", wr, s->momentum, s->nmomentum * sizeof(float)};
        if (s->nbuffers)
            cr->secs[n++] = (herd_ckpt_section){"buffers", wr, s->buffers, s->nbuffers * sizeof(float)};
        if (s->optim_len)
            cr->secs[n++] = (herd_ckpt_section){"optim", wr, s->optim, s->optim_len};
        cr->secs[n++] = (herd_ckpt_section){"cursor", wr, s->cursor, sizeof s->cursor};
        cr->secs[n++] = (herd_ckpt_section){"rng", wr, s->rng, sizeof s->rng};
        if (s->has_algo)
            cr->secs[n++] = (herd_ckpt_section){"algo", wr, s->algo, s->algo_len};
    }
    if (cr->async)
        cr->secs[n++] = (herd_ckpt_section){"claim", 0, cr->claim, sizeof cr->claim};
    cr->secs[n++] = (herd_ckpt_section){"meta", 0, cr->meta, cr->meta_len};
    if (cr->has_model)
        cr->secs[n++] = (herd_ckpt_section){"model", 0, cr->model, nparams * sizeof(float)};
    if (cr->options)
        cr->secs[n++] = (herd_ckpt_section){"options", 0, cr->options, strlen(cr->options)};
    if (cr->norm)
        cr->secs[n++] = (herd_ckpt_section){"norm", 0, cr->norm, cr->nnorm * sizeof(float)};
    if (cr->desc)
        cr->secs[n++] = (herd_ckpt_section){"description", 0, cr->desc, strlen(cr->desc)};
    return n;
}

/* Worker 0: one file from every slot. */
static herd_status write_slots(herd__ckpt_run *cr, const herd_worker *w, const herd__ckpt_cursor *cur, herd_err *err)
{
    for (size_t r = 0; r < cr->cfg->workers; r++) /* a diverged run must not replace good checkpoints */
        if (!herd__all_finite(cr->slots[r].params, w->nparams))
            return herd_err_set(err, HERD_ENONFINITE,
                                "step %" PRIu64 ": worker %zu's weights are non-finite; no checkpoint written, the "
                                "run stops: the learning rate may be too high",
                                cur->step, r);
    size_t n = build_sections(cr);
    herd_ckpt_info info = cr->info;
    info.step = cur->step, info.epoch = cur->epoch;
    if (cr->async) { /* the run's position is the shared counter's */
        info.step = cur->claimed / cr->info.workers;
        info.epoch = cur->claimed ? (cur->claimed - 1) / cr->per_epoch : 0;
    }
    cr->wrote_last = false;
    herd_status st = herd_ckpt_write(cr->cfg->checkpoint_dir, &info, cr->secs, n, cr->cfg->checkpoint_keep, err);
    if (st < 0)
        return st;
    cr->last = info;
    cr->wrote_last = cr->async ? cur->claimed >= cr->total : cur->step >= cr->last_step;
    return HERD_OK;
}

herd_status herd__ckpt_final(herd__ckpt_run *cr, const float *params, const char *name, herd_err *err)
{
    if (!cr || !cr->wrote_last)
        return HERD_OK;
    size_t nparams = (size_t)cr->info.nparams;
    /* worker 0's weights at the last step, unless the run's end changed them */
    cr->has_model = strcmp(name, "worker0") || memcmp(params, cr->slots[0].params, nparams * sizeof(float));
    if (cr->has_model && !cr->model && !(cr->model = malloc(nparams * sizeof(float))))
        return herd_err_set(err, HERD_ENOMEM, "out of memory for the checkpoint's final model");
    if (cr->has_model)
        memcpy(cr->model, params, nparams * sizeof(float));
    cr->kept.final = true;
    snprintf(cr->kept.eval_model, sizeof cr->kept.eval_model, "%s", name);
    herd__ckpt_meta_encode(&cr->kept, cr->meta, cr->meta_len);
    size_t n = build_sections(cr);
    return herd_ckpt_write(cr->cfg->checkpoint_dir, &cr->last, cr->secs, n, cr->cfg->checkpoint_keep, err);
}

herd_status herd__ckpt_save(herd__ckpt_run *cr, herd_algo *a, herd_worker *w, const herd_loader *l,
                            const herd__ckpt_cursor *cur)
{
    herd_status st = HERD_OK;
    slot *s = &cr->slots[w->rank];
    /* the sizing call settles what the algorithm has in flight (see
     * herd_algo.h), before the barrier after which anyone reads state */
    if (a->ops->save)
        HERD_TRY(a->ops->save(a, w, NULL, 0, &s->algo_need));
    /* the previous checkpoint's file is written (the slots are free) and
     * every worker has settled */
    HERD_TRY(herd_comm_barrier(w->comm));
    HERD_TRY(fill_slot(cr, a, w, l, cur));
    if (w->rank == 0)
        HERD_TRY(keep_model(cr, a, w, l));
    /* every slot of this process is filled; those of the others come to
     * worker 0 as messages (this process's workers are first_rank .. and
     * worker 0's process has the first nlocal) */
    HERD_TRY(herd_comm_barrier(w->comm));
    if (cr->first_rank != 0)
        HERD_TRY(send_slot(cr, w));
    for (size_t r = cr->nlocal; w->rank == 0 && r < cr->cfg->workers; r++)
        HERD_TRY(recv_slot(cr, w, r));
    if (w->rank == 0)
        HERD_TRY(write_slots(cr, w, cur, &w->err));
out:
    return st;
}
