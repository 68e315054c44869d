/* The model a checkpoint keeps (herd_ckpt.h): its meta section, the model
 * rebuilt from it, herd eval's evaluation of it on the test set and herd
 * export's tensors of it (the files: ckpt_export.c). */
#include "herd/herd_ckpt.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "herd/herd_algo.h"
#include "herd/herd_data.h"
#include "herd/herd_nn.h"
#include "core/args.h"
#include "core/clock.h"
#include "core/finite.h"
#include "core/outpath.h"
#include "run/ckpt_run.h"

/* The meta section's fixed part: version, c, h, w, classes, final, kept name, data_len. */
enum { META_FIXED = 6 * 4 + HERD_CKPT_KEPT_NAME + 4 };

/* Checkpoints are little-endian only (ckpt.c): u32 fields go as they lie. */
static void put_u32(unsigned char *p, size_t v)
{
    uint32_t u = (uint32_t)v;
    memcpy(p, &u, 4);
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t u;
    memcpy(&u, p, 4);
    return u;
}

/* Version 2's tail, after the data name: train and test digests, the path's length, the path. */
enum { META_TAIL_FIXED = 8 + 8 + 4 };

static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t u;
    memcpy(&u, p, 8);
    return u;
}

size_t herd__ckpt_meta_encode(const herd_ckpt_kept *k, unsigned char *buf, size_t cap)
{
    size_t dlen = strnlen(k->data, sizeof k->data - 1), plen = strnlen(k->data_path, sizeof k->data_path - 1);
    size_t need = META_FIXED + dlen + META_TAIL_FIXED + plen;
    if (!buf || cap < need)
        return need;
    memset(buf, 0, META_FIXED);
    const size_t fields[6] = {HERD_CKPT_META_VERSION, k->c, k->h, k->w, k->nclasses, k->final};
    for (size_t i = 0; i < 6; i++)
        put_u32(buf + 4 * i, fields[i]);
    memcpy(buf + 24, k->eval_model, strnlen(k->eval_model, HERD_CKPT_KEPT_NAME - 1));
    put_u32(buf + 24 + HERD_CKPT_KEPT_NAME, dlen);
    memcpy(buf + META_FIXED, k->data, dlen);
    unsigned char *t = buf + META_FIXED + dlen;
    put_u64(t, k->train_digest), put_u64(t + 8, k->test_digest), put_u32(t + 16, plen);
    memcpy(t + META_TAIL_FIXED, k->data_path, plen);
    return need;
}

/* A version 2 tail of len bytes at t into out; false where it does not read. */
static bool meta_tail(const unsigned char *t, size_t len, herd_ckpt_kept *out)
{
    if (len < META_TAIL_FIXED)
        return false;
    size_t plen = get_u32(t + 16);
    if (plen >= HERD_CKPT_MAX_DATA || len != META_TAIL_FIXED + plen || memchr(t + META_TAIL_FIXED, 0, plen))
        return false;
    out->has_digests = true;
    out->train_digest = get_u64(t), out->test_digest = get_u64(t + 8);
    memcpy(out->data_path, t + META_TAIL_FIXED, plen);
    out->data_path[plen] = 0;
    return true;
}

herd_status herd_ckpt_kept_info(const herd_ckpt *ck, herd_ckpt_kept *out, herd_err *err)
{
    herd_status st = HERD__NONNULL(err, ck, out);
    if (st < 0)
        return st;
    memset(out, 0, sizeof *out);
    snprintf(out->eval_model, sizeof out->eval_model, "worker0");
    herd_ckpt_section s;
    if (herd_ckpt_find(ck, "meta", 0, &s, NULL) < 0)
        return HERD_OK; /* an older herd's */
    const char *f = herd_ckpt_label(ck);
    const unsigned char *b = s.data;
    if (s.bytes < 4)
        return herd_err_set(err, HERD_ECORRUPT, "checkpoint %s: its meta section is %zu bytes", f, s.bytes);
    uint32_t version = get_u32(b);
    if (version != 1 && version != HERD_CKPT_META_VERSION)
        return herd_err_set(err, version > HERD_CKPT_META_VERSION ? HERD_EUNSUPPORTED : HERD_ECORRUPT,
                            "checkpoint %s: meta section version %" PRIu32 ", this herd reads versions 1 to %d", f,
                            version, HERD_CKPT_META_VERSION);
    size_t dlen = s.bytes >= META_FIXED ? get_u32(b + 24 + HERD_CKPT_KEPT_NAME) : 0;
    const unsigned char *name = b + 24;
    bool named = s.bytes >= META_FIXED && memchr(name, 0, HERD_CKPT_KEPT_NAME) && name[0];
    for (size_t i = 0; named && name[i]; i++)
        named = (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9');
    bool sized = s.bytes >= META_FIXED && dlen < HERD_CKPT_MAX_DATA && s.bytes >= META_FIXED + dlen &&
                 (version == 1 ? s.bytes == META_FIXED + dlen
                               : meta_tail(b + META_FIXED + dlen, s.bytes - META_FIXED - dlen, out));
    if (!sized || !named || get_u32(b + 20) > 1 || memchr(b + META_FIXED, 0, dlen))
        return herd_err_set(err, HERD_ECORRUPT, "checkpoint %s: its meta section (%zu bytes) does not read", f, s.bytes);
    out->has_meta = true;
    out->c = get_u32(b + 4), out->h = get_u32(b + 8), out->w = get_u32(b + 12), out->nclasses = get_u32(b + 16);
    out->final = get_u32(b + 20);
    memcpy(out->eval_model, name, HERD_CKPT_KEPT_NAME);
    memcpy(out->data, b + META_FIXED, dlen);
    out->data[dlen] = 0;
    return HERD_OK;
}

/* The model of ck's description section (the architecture travels with the
 * weights), or where it has none (an older herd's) the built-in model its
 * header names. */
static herd_status kept_create(const herd_ckpt *ck, size_t c, size_t h, size_t w, size_t nclasses, size_t max_batch,
                               herd_model **m, herd_err *err)
{
    const herd_ckpt_info *in = herd_ckpt_get_info(ck);
    herd_ckpt_section s;
    if (herd_ckpt_find(ck, "description", 0, &s, NULL) < 0)
        return herd_model_create(in->model, c, h, w, nclasses, max_batch, in->seed, m, err);
    char *text = malloc(s.bytes + 1);
    if (!text)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    memcpy(text, s.data, s.bytes);
    text[s.bytes] = 0;
    herd_status st = strlen(text) != s.bytes
                         ? herd_err_set(err, HERD_ECORRUPT, "checkpoint %s: its description holds a NUL byte",
                                        herd_ckpt_label(ck))
                         : herd_model_create_from_description(in->model, text, c, h, w, nclasses, max_batch, in->seed,
                                                              m, err);
    free(text);
    return st;
}

herd_status herd_ckpt_kept_model(const herd_ckpt *ck, size_t c, size_t h, size_t w, size_t nclasses,
                                 size_t max_batch, herd_model **out, herd_err *err)
{
    herd_status st = HERD__NONNULL(err, ck, out);
    if (st < 0)
        return st;
    const herd_ckpt_info *in = herd_ckpt_get_info(ck);
    const char *f = herd_ckpt_label(ck);
    herd_model *m = NULL;
    herd_ckpt_section s;
    *out = NULL;
    bool has_model = herd_ckpt_find(ck, "model", 0, &s, NULL) == HERD_OK;
    bool has_meta = herd_ckpt_find(ck, "meta", 0, &s, NULL) == HERD_OK;
    const herd_algo_ops *algo = herd_algo_find(in->algo);
    if (!has_model && !has_meta && (!algo || algo->eval_params))
        return herd_err_set(err, HERD_EINVAL,
                            "checkpoint %s was written by an older herd and holds only each worker's weights, not the "
                            "model --algo %s keeps (%s); resuming the run with this herd (herd train ... --checkpoint "
                            "DIR --resume) writes it with its next checkpoint",
                            f, in->algo, algo ? "its center, server or average" : "an algorithm this herd does not know");
    HERD_TRY(kept_create(ck, c, h, w, nclasses, max_batch ? max_batch : in->batch, &m, err));
    size_t np = herd_model_nparams(m), nb = herd_model_nbuffers(m);
    if (np != in->nparams) {
        st = herd_err_set(err, HERD_EINVAL,
                          "checkpoint %s: its %s model has %" PRIu64 " parameters; for %zux%zux%zu inputs of %zu "
                          "classes it would have %zu (data of another shape than the run's?)",
                          f, in->model, in->nparams, c, h, w, nclasses, np);
        goto out;
    }
    HERD_TRY(herd_ckpt_copy(ck, has_model ? "model" : "params", 0, herd_model_params(m), np * sizeof(float), err));
    if (nb)
        HERD_TRY(herd_ckpt_copy(ck, "buffers", 0, herd_model_buffers(m), nb * sizeof(float), err));
    if (!herd__all_finite(herd_model_params(m), np)) {
        st = herd_err_set(err, HERD_ENONFINITE, "checkpoint %s: the kept model holds non-finite weights", f);
        goto out;
    }
    *out = m;
    m = NULL;
out:
    herd_model_free(m);
    return st;
}

/* ---- the data's identity ---------------------------------------------------- */

herd_status herd__ckpt_check_data(const char *label, const herd_ckpt_kept *k, const char *path, uint64_t train,
                                  uint64_t test, const char *how, herd_err *err)
{
    if (!k->has_digests || (k->train_digest == train && k->test_digest == test))
        return HERD_OK;
    const char *which = k->train_digest != train && k->test_digest != test ? "training and test sets"
                        : k->train_digest != train                         ? "training set"
                                                                           : "test set";
    return herd_err_set(err, HERD_EDATA,
                        "checkpoint %s was trained on other data: its run read %s (training set digest %016" PRIx64
                        ", test set %016" PRIx64 "), the %s of %s differ (%016" PRIx64 ", %016" PRIx64 "); %s",
                        label, k->data_path, k->train_digest, k->test_digest, which, path, train, test, how);
}

/* ---- herd eval ------------------------------------------------------------ */

/* (ckpt_run.h) */
herd_status herd__ckpt_open_latest(const char *dir, herd_ckpt **ck, char *label, size_t label_cap, char *warn,
                               size_t warn_cap, herd_ckpt_info *info, herd_ckpt_kept *kept, herd_err *err)
{
    if (!dir || !*dir)
        return herd_err_set(err, HERD_EINVAL, "no checkpoint directory given");
    herd_status st;
    struct stat sb;
    if (stat(dir, &sb) == 0 && S_ISREG(sb.st_mode)) { /* a checkpoint file: that one, in its directory */
        char parent[4096];
        const char *name = herd__path_split(dir, parent, sizeof parent);
        if (warn_cap)
            warn[0] = 0;
        st = herd_ckpt_read(parent, name, ck, err);
    } else {
        st = herd_ckpt_latest(dir, ck, warn, warn_cap, NULL, err);
    }
    if (st < 0)
        return st;
    snprintf(label, label_cap, "%s", herd_ckpt_label(*ck));
    *info = *herd_ckpt_get_info(*ck);
    return herd_ckpt_kept_info(*ck, kept, err);
}

/* The data's shape against the one the checkpoint records. */
static herd_status check_shape(const herd_ckpt_kept *k, const herd_dataset *d, const char *spec, const char *f,
                               herd_err *err)
{
    if (!k->has_meta || (k->c == d->c && k->h == d->h && k->w == d->w && k->nclasses == d->nclasses))
        return HERD_OK;
    return herd_err_set(err, HERD_EINVAL,
                        "checkpoint %s: its model takes %zux%zux%zu inputs of %zu classes; the data %s has %zux%zux%zu "
                        "inputs of %zu classes",
                        f, k->c, k->h, k->w, k->nclasses, spec ? spec : "(default)", d->c, d->h, d->w, d->nclasses);
}

/* Every example's logits, one batch at a time. */
static void forward_all(herd_model *m, const herd_dataset *d, size_t max_batch, float *logits)
{
    size_t dim = herd_dataset_dim(d), k = d->nclasses;
    for (size_t i = 0; i < d->n; i += max_batch) {
        size_t b = d->n - i < max_batch ? d->n - i : max_batch;
        herd_model_forward(m, d->x + i * dim, b, false);
        memcpy(logits + i * k, herd_model_logits(m), b * k * sizeof(float));
    }
}

herd_status herd_eval(const herd_eval_config *cfg, herd_eval_result *res, herd_err *err)
{
    herd_status st = HERD_OK;
    herd_ckpt *ck = NULL;
    herd_model *m = NULL;
    herd_dataset train = {0}, test = {0};
    if (res) /* a failed call leaves nothing to free */
        memset(res, 0, sizeof *res);
    if ((st = HERD__NONNULL(err, cfg, res)) < 0)
        return st;
    HERD_TRY(HERD__NONNULL(err, cfg->checkpoint_dir));
    if (cfg->threads > 256) { /* herd train's --threads bound: herd_nn_set_threads takes an int */
        st = herd_err_set(err, HERD_EINVAL, "herd_eval: cfg->threads must be at most 256, got %zu", cfg->threads);
        goto out;
    }
    HERD_TRY(herd__ckpt_open_latest(cfg->checkpoint_dir, &ck, res->checkpoint, sizeof res->checkpoint, res->warn,
                         sizeof res->warn, &res->info, &res->kept, err));
    /* the run's data, standardized with its training set as the run's was */
    const char *spec = cfg->data ? cfg->data : res->kept.data[0] ? res->kept.data : NULL;
    HERD_TRY(herd_data_open(spec, res->info.seed, &train, &test, err));
    herd_dataset_truncate(&test, cfg->test_limit);
    test.nclasses = train.nclasses; /* the model's: the run built it from the training set */
    HERD_TRY(check_shape(&res->kept, &test, spec, res->checkpoint, err));
    /* the same shape, and the same data? */
    herd_data_resolve(spec, res->data_path, sizeof res->data_path);
    res->train_digest = train.digest, res->test_digest = test.digest;
    st = herd__ckpt_check_data(res->checkpoint, &res->kept, res->data_path, train.digest, test.digest,
                               "--other-data scores it on them anyway", err);
    res->other_data = st == HERD_EDATA;
    if (st < 0 && !(st == HERD_EDATA && cfg->other_data))
        goto out;
    st = HERD_OK;
    res->kept.c = test.c, res->kept.h = test.h, res->kept.w = test.w, res->kept.nclasses = test.nclasses;
    HERD_TRY(herd_ckpt_kept_model(ck, test.c, test.h, test.w, test.nclasses, 0, &m, err));
    res->nparams = herd_model_nparams(m);
    res->n = test.n;
    herd_nn_set_threads(cfg->threads ? (int)cfg->threads : 1);
    double t0 = herd__now();
    herd_model_evaluate(m, test.x, test.y, test.n, herd_dataset_dim(&test), &res->test_loss, &res->test_acc);
    res->eval_s = herd__now() - t0;
    if (cfg->keep_outputs) {
        size_t dim = herd_dataset_dim(&test);
        res->logits = malloc((test.n * test.nclasses + 1) * sizeof(float));
        res->inputs = malloc((test.n * dim + 1) * sizeof(float));
        if (!res->logits || !res->inputs) {
            st = herd_err_set(err, HERD_ENOMEM, "out of memory for %zu examples' outputs", test.n);
            goto out;
        }
        forward_all(m, &test, res->info.batch, res->logits);
        memcpy(res->inputs, test.x, test.n * dim * sizeof(float));
    }
out:
    if (st < 0)
        herd_eval_result_free(res);
    herd_model_free(m);
    herd_dataset_free(&train);
    herd_dataset_free(&test);
    herd_ckpt_free(ck);
    return st;
}

void herd_eval_result_free(herd_eval_result *res)
{
    free(res->logits);
    free(res->inputs);
    res->logits = res->inputs = NULL;
}

/* ---- herd export ---------------------------------------------------------- */

/* The shape of one example and the classes, from the checkpoint or (an
 * older herd's, which does not record them) from the data. */
static herd_status export_shape(const herd_export_config *cfg, herd_export_result *res, herd_err *err)
{
    herd_ckpt_kept *k = &res->kept;
    if (k->has_meta)
        return HERD_OK;
    if (!cfg->data)
        return herd_err_set(err, HERD_EINVAL,
                            "checkpoint %s does not record its model's input shape (it was written by an older "
                            "herd): give --data with the data it was trained on",
                            res->checkpoint);
    herd_dataset train = {0}, test = {0};
    herd_status st = herd_data_open(cfg->data, res->info.seed, &train, &test, err);
    if (st == HERD_OK)
        k->c = train.c, k->h = train.h, k->w = train.w, k->nclasses = train.nclasses;
    herd_dataset_free(&train);
    herd_dataset_free(&test);
    return st;
}

/* The run's standardization (the checkpoint's "norm" section: c means,
 * then c standard deviations) into res as text; nothing where it has none. */
static void export_norm(const herd_ckpt *ck, herd_export_result *res)
{
    herd_ckpt_section sec;
    size_t c = res->kept.c;
    if (herd_ckpt_find(ck, "norm", 0, &sec, NULL) != HERD_OK || !c || sec.bytes != 2 * c * sizeof(float))
        return;
    const float *v = sec.data;
    size_t lm = 0, ls = 0;
    for (size_t i = 0; i < c; i++) {
        float m, sd;
        memcpy(&m, v + i, sizeof m), memcpy(&sd, v + c + i, sizeof sd);
        if (lm < sizeof res->input_mean)
            lm += (size_t)snprintf(res->input_mean + lm, sizeof res->input_mean - lm, "%s%.9g", i ? "," : "", (double)m);
        if (ls < sizeof res->input_std)
            ls += (size_t)snprintf(res->input_std + ls, sizeof res->input_std - ls, "%s%.9g", i ? "," : "", (double)sd);
    }
}

herd_status herd_export(const herd_export_config *cfg, herd_export_result *res, herd_err *err)
{
    herd_status st = HERD_OK;
    herd_ckpt *ck = NULL;
    herd_model *m = NULL;
    herd_tensor *ts = NULL;
    if (res)
        memset(res, 0, sizeof *res);
    if ((st = HERD__NONNULL(err, cfg, res)) < 0)
        return st;
    if ((st = HERD__NONNULL(err, cfg->checkpoint_dir)) < 0)
        return st;
    if (!cfg->out || !*cfg->out)
        return herd_err_set(err, HERD_EINVAL, "export: no output named (cfg->out)");
    if (herd__ckpt_holds(cfg->checkpoint_dir, cfg->out))
        return herd_err_set(err, HERD_EINVAL, "export: %s is a checkpoint's file in %s; herd export will not write "
                                              "over the checkpoints it reads", cfg->out, cfg->checkpoint_dir);
    if (cfg->format != HERD_EXPORT_SAFETENSORS && cfg->format != HERD_EXPORT_NPY && cfg->format != HERD_EXPORT_PYTORCH)
        return herd_err_set(err, HERD_EINVAL, "herd_export: cfg->format %d is not a herd_export_format",
                            (int)cfg->format);
    HERD_TRY(herd__ckpt_open_latest(cfg->checkpoint_dir, &ck, res->checkpoint, sizeof res->checkpoint, res->warn,
                                    sizeof res->warn, &res->info, &res->kept, err));
    HERD_TRY(export_shape(cfg, res, err));
    export_norm(ck, res);
    const herd_ckpt_kept *k = &res->kept;
    HERD_TRY(herd_ckpt_kept_model(ck, k->c, k->h, k->w, k->nclasses, 1, &m, err));
    res->ntensors = herd_model_tensors(m, NULL, 0);
    if (!(ts = calloc(res->ntensors + 1, sizeof *ts))) {
        st = herd_err_set(err, HERD_ENOMEM, "out of memory");
        goto out;
    }
    herd_model_tensors(m, ts, res->ntensors);
    for (size_t i = 0; i < res->ntensors; i++)
        res->nfloats += ts[i].len;
    st = herd__export_write(cfg, res, m, ts, res->ntensors, err);
out:
    free(ts);
    herd_model_free(m);
    herd_ckpt_free(ck);
    return st;
}
