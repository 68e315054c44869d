/* Models out of herd: herd eval scores exactly what the training run's final
 * evaluation scored (every algorithm family's kept model: worker 0's, a
 * center, an average, a server's), herd_train hands the same weights to its
 * caller, older checkpoints still read (or say what they lack), the model's
 * named tensors cover its arrays, and herd export's files, read back by an
 * independent Python reader, give herd's own logits (tests/export_check.py). */
#include "fixtures.h"
#include "harness.h"
#include "json_valid.h"
#include "herd/herd_ckpt.h"
#include "herd/herd_data.h"
#include "herd/herd_nn.h"
#include "herd/herd_run.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------- */

/* A fresh directory name under the test's scratch directory (not made). */
static const char *scratch(const char *name)
{
    return herd_test_fmt("%s/%s", herd_test_tmpdir(), name);
}

/* The run most tests start from: a few epochs of a tiny model, checkpointed. */
static herd__train_config ckpt_config(const char *model, const char *algo, size_t workers, const char *dir)
{
    herd__train_config c = herd_test_config(model, algo, workers);
    c.train_limit = 512;
    c.test_limit = 256;
    c.checkpoint_dir = dir;
    c.keep_final = true;
    return c;
}

static herd_eval_result eval_ok(const char *dir, const char *data, size_t test_limit)
{
    herd_eval_config ec = {.checkpoint_dir = dir, .data = data, .test_limit = test_limit};
    herd_eval_result res;
    herd_err err = {0};
    if (herd_eval(&ec, &res, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "herd_eval %s: %s", dir, err.msg);
    return res;
}

/* herd_eval that must fail with status want, its message containing needle. */
static void eval_fails(const char *dir, const char *data, herd_status want, const char *needle)
{
    herd_eval_config ec = {.checkpoint_dir = dir, .data = data};
    herd_eval_result res;
    herd_err err = {0};
    herd_status st = herd_eval(&ec, &res, &err);
    ASSERT_EQ_INT(st, want);
    ASSERT_STR_CONTAINS(err.msg, needle);
    ASSERT_TRUE(res.logits == NULL && res.inputs == NULL);
}

/* The run's final evaluation and herd eval of its checkpoint: the same
 * model (named alike), the same bits of accuracy and loss; herd_train's
 * copy of the final model is the checkpoint's kept model. */
static void eval_matches(const char *model, const char *algo, size_t workers)
{
    const char *dir = scratch(herd_test_fmt("%s-%s", model, algo));
    herd__train_config c = ckpt_config(model, algo, workers, dir);
    herd_train_result tr;
    herd_test_train_ok(&c, &tr);
    herd_eval_result ev = eval_ok(dir, NULL, c.test_limit);
    if (ev.test_loss != tr.test_loss || ev.test_acc != tr.test_acc)
        herd_test_fail(__FILE__, __LINE__, "--algo %s: herd eval gives acc %.9g loss %.17g, the run %.9g %.17g", algo,
                       ev.test_acc, ev.test_loss, tr.test_acc, tr.test_loss);
    ASSERT_STR_CONTAINS(ev.kept.eval_model, tr.eval_model);
    ASSERT_STR_CONTAINS(tr.eval_model, ev.kept.eval_model);
    ASSERT_TRUE(ev.kept.final && ev.kept.has_meta);
    ASSERT_EQ_INT(ev.n, c.test_limit);
    ASSERT_TRUE(ev.info.step > 0 && ev.info.workers == workers);
    /* the weights herd_train handed over are the checkpoint's kept model */
    herd_ckpt *ck = NULL;
    herd_model *m = NULL;
    ASSERT_OK(herd_ckpt_latest(dir, &ck, NULL, 0, NULL, NULL));
    ASSERT_OK(herd_ckpt_kept_model(ck, tr.in_c, tr.in_h, tr.in_w, tr.nclasses, 0, &m, NULL));
    ASSERT_TRUE(tr.final_params != NULL && tr.final_buffers != NULL);
    ASSERT_EQ_INT(herd_model_nparams(m), tr.nparams);
    ASSERT_EQ_INT(herd_model_nbuffers(m), tr.nbuffers);
    ASSERT_TRUE(!memcmp(herd_model_params(m), tr.final_params, tr.nparams * sizeof(float)));
    ASSERT_TRUE(!memcmp(herd_model_buffers(m), tr.final_buffers, tr.nbuffers * sizeof(float)));
    herd_model_free(m);
    herd_ckpt_free(ck);
    herd_train_result_free(&tr);
    ASSERT_TRUE(tr.final_params == NULL);
    herd_eval_result_free(&ev);
}

/* ---- the tests ----------------------------------------------------------- */

/* One sgd worker: the run is deterministic and its model worker 0's. */
static void test_eval_sgd(void) { eval_matches("lenet", "sgd", 1); }

/* Every family's kept model: a center (synchronous and asynchronous), an
 * average, a server's, worker 0's under allreduce; resnet20 for the
 * batch-norm statistics, which are worker 0's. */
static void test_eval_easgd(void) { eval_matches("mlp", "easgd", 2); }
static void test_eval_dpsgd(void) { eval_matches("linear", "dpsgd", 3); }
static void test_eval_sgp(void) { eval_matches("linear", "sgp", 2); }
static void test_eval_asgd(void) { eval_matches("linear", "asgd", 2); }
static void test_eval_aeasgd(void) { eval_matches("linear", "aeasgd", 2); }
static void test_eval_allreduce_resnet(void) { eval_matches("resnet20", "allreduce", 2); }

/* Copies the newest checkpoint of dir into old/ without its meta and model
 * sections: the file an older herd wrote. Returns old/'s name. */
static const char *strip_to_old(const char *dir, const char *old)
{
    herd_ckpt *ck = NULL;
    ASSERT_OK(herd_ckpt_latest(dir, &ck, NULL, 0, NULL, NULL));
    size_t n = herd_ckpt_nsections(ck), k = 0;
    herd_ckpt_section *secs = calloc(n, sizeof *secs);
    ASSERT_TRUE(secs != NULL);
    for (size_t i = 0; i < n; i++) {
        herd_ckpt_section s = herd_ckpt_section_at(ck, i);
        if (strcmp(s.name, "meta") && strcmp(s.name, "model"))
            secs[k++] = s;
    }
    ASSERT_TRUE(k < n); /* there was a meta section to drop */
    const char *od = scratch(old);
    ASSERT_EQ_INT(mkdir(od, 0700), 0);
    ASSERT_OK(herd_ckpt_write(od, herd_ckpt_get_info(ck), secs, k, 1, NULL));
    free(secs);
    herd_ckpt_free(ck);
    return od;
}

/* An older herd's checkpoint: worker 0's model still evaluates (the shape
 * from the data), export asks for --data; an algorithm's kept model that
 * is not in the file is a clear error. */
static void test_old_checkpoints(void)
{
    const char *dir = scratch("sgd");
    herd__train_config c = ckpt_config("lenet", "sgd", 1, dir);
    herd_train_result tr;
    herd_test_train_ok(&c, &tr);
    const char *od = strip_to_old(dir, "sgd-old");
    herd_eval_result ev = eval_ok(od, c.data, c.test_limit);
    ASSERT_TRUE(!ev.kept.has_meta && !ev.kept.final);
    ASSERT_TRUE(ev.test_loss == tr.test_loss && ev.test_acc == tr.test_acc);
    herd_eval_result_free(&ev);
    /* without --data: herd's default data set, of another shape than 12x12 */
    herd_export_config xc = {.checkpoint_dir = od, .out = scratch("old.safetensors")};
    herd_export_result xr;
    herd_err err = {0};
    ASSERT_EQ_INT(herd_export(&xc, &xr, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "does not record its model's input shape (it was written by an older herd): give --data");
    xc.data = c.data;
    ASSERT_OK(herd_export(&xc, &xr, &err));
    ASSERT_EQ_INT(xr.nfloats, tr.nparams);
    ASSERT_TRUE(access(xc.out, F_OK) == 0);
    herd_train_result_free(&tr);

    const char *edir = scratch("easgd");
    c = ckpt_config("linear", "easgd", 2, edir);
    herd_test_train_ok(&c, &tr);
    herd_train_result_free(&tr);
    eval_fails(strip_to_old(edir, "easgd-old"), c.data, HERD_EINVAL,
               "was written by an older herd and holds only each worker's weights, not the model --algo easgd keeps");
}

/* Replaces the newest checkpoint of dir by one whose meta section's bytes
 * are `meta` (len bytes). */
static void put_meta(const char *dir, const unsigned char *meta, size_t len)
{
    herd_ckpt *ck = NULL;
    ASSERT_OK(herd_ckpt_latest(dir, &ck, NULL, 0, NULL, NULL));
    size_t n = herd_ckpt_nsections(ck);
    herd_ckpt_section *secs = calloc(n, sizeof *secs);
    ASSERT_TRUE(secs != NULL);
    for (size_t i = 0; i < n; i++) {
        secs[i] = herd_ckpt_section_at(ck, i);
        if (!strcmp(secs[i].name, "meta"))
            secs[i].data = meta, secs[i].bytes = len;
    }
    ASSERT_OK(herd_ckpt_write(dir, herd_ckpt_get_info(ck), secs, n, 1000, NULL)); /* the older ones stay */
    free(secs);
    herd_ckpt_free(ck);
}

/* The meta section: what it records, a newer or broken one refused by
 * name, data of another shape refused, a mid-run checkpoint not final. */
static void test_meta(void)
{
    const char *dir = scratch("meta");
    herd__train_config c = ckpt_config("linear", "easgd", 2, dir);
    c.checkpoint_every = 5;
    c.checkpoint_keep = 10;
    herd_train_result tr;
    herd_test_train_ok(&c, &tr);
    herd_train_result_free(&tr);
    herd_ckpt *ck = NULL;
    herd_ckpt_kept k;
    ASSERT_OK(herd_ckpt_latest(dir, &ck, NULL, 0, NULL, NULL));
    ASSERT_OK(herd_ckpt_kept_info(ck, &k, NULL));
    ASSERT_TRUE(k.has_meta && k.final);
    ASSERT_EQ_INT(k.c * 1000000 + k.h * 10000 + k.w * 100 + k.nclasses, 1121204); /* 1x12x12, 4 classes */
    ASSERT_STR_CONTAINS(k.data, "synthetic:1x12x12:4");
    ASSERT_STR_CONTAINS(k.eval_model, "center");
    herd_ckpt_section s;
    ASSERT_OK(herd_ckpt_find(ck, "meta", 0, &s, NULL));
    unsigned char *meta = malloc(s.bytes);
    ASSERT_TRUE(meta != NULL);
    memcpy(meta, s.data, s.bytes);
    size_t len = s.bytes;
    uint64_t last = herd_ckpt_get_info(ck)->step;
    herd_ckpt_free(ck);

    /* another shape than the model's */
    eval_fails(dir, "synthetic:1x8x8:4", HERD_EINVAL, "takes 1x12x12 inputs of 4 classes; the data synthetic:1x8x8:4 has 1x8x8");
    /* a newer meta record, then ones that do not read: cut short, and a
     * version 1 record carrying version 2's tail */
    meta[0] = 3;
    put_meta(dir, meta, len);
    eval_fails(dir, NULL, HERD_EUNSUPPORTED, "meta section version 3, this herd reads versions 1 to 2");
    meta[0] = 2;
    put_meta(dir, meta, len - 1);
    eval_fails(dir, NULL, HERD_ECORRUPT, "meta section");
    meta[0] = 1;
    put_meta(dir, meta, len);
    eval_fails(dir, NULL, HERD_ECORRUPT, "meta section");
    free(meta);

    /* the checkpoint before the last: the center as it was, not final */
    unlink(herd_test_fmt("%s/ckpt-%" PRIu64 ".herd", dir, last));
    herd_eval_result ev = eval_ok(dir, NULL, 64);
    ASSERT_TRUE(ev.info.step < last && !ev.kept.final);
    ASSERT_STR_CONTAINS(ev.kept.eval_model, "center");
    ASSERT_EQ_INT(ev.n, 64);
    herd_eval_result_free(&ev);
}

/* IDX files of a tiny data set in dir: 100 training and 40 test images of
 * 8x8, labels 0..3 from the pixels' sum (learnable); variant 1 changes one
 * training pixel, variant 2 one test pixel. */
static void write_idx(const char *dir, int variant)
{
    mkdir(dir, 0700);
    const char *names[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"};
    for (int i = 0; i < 4; i++) {
        FILE *f = fopen(herd_test_fmt("%s/%s", dir, names[i]), "wb");
        ASSERT_TRUE(f != NULL);
        bool images = i % 2 == 0, train = i < 2;
        unsigned char n = train ? 100 : 40, hdr[16] = {0, 0, 8, images ? 3 : 1, 0, 0, 0, n, 0, 0, 0, 8, 0, 0, 0, 8};
        fwrite(hdr, 1, images ? 16 : 8, f);
        for (int e = 0; e < n; e++) {
            int cls = (e * 7 + (train ? 0 : 3)) % 4;
            for (int k = 0; images && k < 64; k++) {
                int px = k / 16 == cls ? 200 : (e * 13 + k * 5) % 40;
                if ((variant == 1 && train && e == 17 && k == 3) || (variant == 2 && !train && e == 5 && k == 60))
                    px ^= 1;
                fputc(px, f);
            }
            if (!images)
                fputc(cls, f);
        }
        fclose(f);
    }
}

/* A checkpoint records the data its run read (digests of the training
 * and test sets, and where): herd eval and --resume on other data (one
 * pixel of the training or of the test set changed) are refused with
 * HERD_EDATA, naming both, unless told (other_data), and then the results
 * give both digests. Before: herd eval scored whatever --data read, with
 * exit 0, and a resume went on. A version 1 meta record (an older herd's)
 * has no digests: nothing to compare. */
static void test_data_identity(void)
{
    const char *a = scratch("data-a"), *b = scratch("data-b"), *t = scratch("data-t"), *dir = scratch("ident");
    write_idx(a, 0), write_idx(b, 1), write_idx(t, 2);
    herd__train_config c = ckpt_config("linear", "sgd", 1, dir);
    c.data = a, c.batch = 10, c.train_limit = 0, c.test_limit = 0;
    herd_train_result tr;
    herd_test_train_ok(&c, &tr);
    uint64_t train_a = tr.train_digest, test_a = tr.test_digest;
    ASSERT_TRUE(train_a && test_a && train_a != test_a && !tr.other_data);
    herd_train_result_free(&tr);
    herd_eval_result ev = eval_ok(dir, a, 0);
    ASSERT_TRUE(ev.kept.has_digests && ev.kept.train_digest == train_a && ev.kept.test_digest == test_a);
    ASSERT_TRUE(ev.train_digest == train_a && !ev.other_data);
    ASSERT_STR_CONTAINS(ev.kept.data_path, "/data-a");
    herd_eval_result_free(&ev);
    eval_fails(dir, b, HERD_EDATA, "was trained on other data: its run read ");
    eval_fails(dir, b, HERD_EDATA, "), the training set of ");
    eval_fails(dir, t, HERD_EDATA, "), the test set of ");
    eval_fails(dir, t, HERD_EDATA, "; --other-data scores it on them anyway");
    herd_eval_config ec = {.checkpoint_dir = dir, .data = b, .other_data = true};
    herd_err err = {0};
    ASSERT_OK(herd_eval(&ec, &ev, &err));
    ASSERT_TRUE(ev.other_data && ev.train_digest != train_a && ev.test_digest == test_a);
    herd_eval_result_free(&ev);
    /* the CLI: exit 2, and with --other-data both digests in the summary */
    herd_test_cmd o;
    HERD_TEST_RUN(&o, "eval", "--checkpoint", dir, "--data", b);
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "was trained on other data");
    HERD_TEST_RUN(&o, "eval", "--checkpoint", dir, "--data", b, "--other-data", "--json", "--quiet");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.out, herd_test_fmt("\"checkpoint_train_digest\":\"%016" PRIx64 "\"", train_a));
    /* --resume on the other training set */
    c.data = b, c.resume = true, c.epochs = 3;
    err = (herd_err){0};
    ASSERT_EQ_INT(herd__train(&c, &tr, &err), HERD_EDATA);
    ASSERT_STR_CONTAINS(err.msg, "--other-data resumes on them anyway");
    herd_train_result_free(&tr);
    HERD_TEST_RUN(&o, "train", "--data", b, "--model", "linear", "--batch", "10", "--epochs", "3", "--checkpoint", dir,
                  "--resume", "--quiet");
    ASSERT_EQ_INT(o.code, 2);
    c.other_data = true;
    herd_test_train_ok(&c, &tr);
    ASSERT_TRUE(tr.other_data && tr.ckpt_train_digest == train_a && tr.train_digest != train_a);
    herd_train_result_free(&tr);
    /* an older herd's meta record (version 1: no digests): other data goes */
    herd_ckpt *ck = NULL;
    herd_ckpt_section sec;
    ASSERT_OK(herd_ckpt_latest(dir, &ck, NULL, 0, NULL, NULL));
    ASSERT_OK(herd_ckpt_find(ck, "meta", 0, &sec, NULL));
    size_t dlen, v1 = 6 * 4 + HERD_CKPT_KEPT_NAME + 4;
    uint32_t u;
    memcpy(&u, (const unsigned char *)sec.data + 24 + HERD_CKPT_KEPT_NAME, 4);
    dlen = u;
    unsigned char *old = malloc(v1 + dlen);
    ASSERT_TRUE(old != NULL);
    memcpy(old, sec.data, v1 + dlen);
    old[0] = 1;
    herd_ckpt_free(ck);
    put_meta(dir, old, v1 + dlen);
    free(old);
    ev = eval_ok(dir, a, 0);
    ASSERT_TRUE(ev.kept.has_meta && !ev.kept.has_digests && !ev.other_data);
    herd_eval_result_free(&ev);
    ev = eval_ok(dir, t, 0);
    herd_eval_result_free(&ev);
}

/* herd train of a tiny linear model for `epochs`, --checkpoint ckpt
 * (every 4 steps), --resume where asked. */
static void train_into(herd_test_cmd *o, const char *epochs, const char *ckpt, bool resume)
{
    herd_test_run(o, 60, (const char *const[]){"train", "--data", "synthetic:1x8x8:4", "--model", "linear",
                                               "--train-limit", "512", "--test-limit", "64", "--checkpoint-every", "4",
                                               "--quiet", "--json", "--epochs", epochs, "--checkpoint", ckpt,
                                               resume ? "--resume" : NULL, NULL});
}

/* --checkpoint takes a checkpoint file as well as a directory: herd eval
 * and herd export read that file (not the directory's newest); herd train
 * --resume goes on from it where it is its directory's newest, and refuses
 * an older one (its run would write among the newer ones) and a file
 * without --resume (exit 2 each). Before: "checkpoint directory ... is not
 * a directory". */
static void test_checkpoint_file(void)
{
    const char *dir = scratch("byfile");
    herd_test_cmd o;
    train_into(&o, "2", dir, false);
    ASSERT_EQ_INT(o.code, 0);
    const char *older = herd_test_fmt("%s/ckpt-8.herd", dir), *newest = herd_test_fmt("%s/ckpt-16.herd", dir);
    HERD_TEST_RUN(&o, "eval", "--checkpoint", older, "--json", "--quiet");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.out, "\"step\":8,");
    HERD_TEST_RUN(&o, "export", "--checkpoint", older, "--json", "--quiet", scratch("byfile.safetensors"));
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.out, "\"step\":8,");
    train_into(&o, "3", older, true);
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "it is not the newest valid checkpoint of ");
    train_into(&o, "3", newest, false);
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "is a file: a run writes its checkpoints into a directory");
    train_into(&o, "3", newest, true);
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.out, "\"steps\":24,");
    ASSERT_TRUE(access(herd_test_fmt("%s/ckpt-24.herd", dir), F_OK) == 0);
}

/* Every model's named tensors cover its parameters and buffers exactly
 * once, each as long as its shape says, under names given once. */
static void test_tensors(void)
{
    for (size_t i = 0; herd_model_names[i]; i++) {
        const char *name = herd_model_names[i];
        bool rgb = !strcmp(name, "resnet20");
        herd_model *m = NULL;
        ASSERT_OK(herd_model_create(name, rgb ? 3 : 1, rgb ? 32 : 28, rgb ? 32 : 28, 10, 1, 1, &m, NULL));
        size_t n = herd_model_tensors(m, NULL, 0), np = herd_model_nparams(m), nb = herd_model_nbuffers(m);
        herd_tensor *t = calloc(n, sizeof *t);
        unsigned char *seen = calloc(np + nb, 1);
        ASSERT_TRUE(t && seen && n > 0);
        ASSERT_EQ_INT(herd_model_tensors(m, t, n), n);
        for (size_t j = 0; j < n; j++) {
            size_t len = 1;
            for (size_t d = 0; d < t[j].ndim; d++)
                len *= t[j].shape[d];
            ASSERT_EQ_INT(len, t[j].len);
            ASSERT_TRUE(t[j].off + t[j].len <= (t[j].buffer ? nb : np));
            for (size_t e = 0; e < t[j].len; e++)
                ASSERT_EQ_INT(seen[(t[j].buffer ? np : 0) + t[j].off + e]++, 0);
            ASSERT_EQ_INT(t[j].buffer, strstr(t[j].name, ".running_") != NULL);
            for (size_t q = 0; q < j; q++)
                ASSERT_TRUE(strcmp(t[q].name, t[j].name));
        }
        for (size_t e = 0; e < np + nb; e++)
            ASSERT_EQ_INT(seen[e], 1);
        if (!strcmp(name, "lenet")) { /* PyTorch's names and shapes */
            ASSERT_STR_CONTAINS(t[0].name, "conv1.weight");
            ASSERT_EQ_INT(t[0].shape[0] * 1000 + t[0].shape[1] * 100 + t[0].shape[2] * 10 + t[0].shape[3], 6155);
            ASSERT_STR_CONTAINS(t[n - 2].name, "fc3.weight");
            ASSERT_EQ_INT(t[n - 2].shape[0] * 100 + t[n - 2].shape[1], 1084);
        }
        if (rgb) {
            ASSERT_STR_CONTAINS(t[3].name, "bn1.running_mean");
            ASSERT_EQ_INT(t[3].shape[0], 16);
        }
        free(t);
        free(seen);
        herd_model_free(m);
    }
}

/* An NPY 1.0 file as the format says: magic, version, a header that ends in
 * a newline at a multiple of 64 bytes, then the floats. */
static void test_npy_file(void)
{
    const char *path = scratch("a.npy");
    const float v[6] = {1, 2, 3, 4, 5, 6};
    ASSERT_OK(herd_npy_write(path, (const size_t[]){2, 3}, 2, v, NULL));
    FILE *f = fopen(path, "rb");
    ASSERT_TRUE(f != NULL);
    unsigned char b[256];
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    ASSERT_TRUE(n > 10 && !memcmp(b, "\x93NUMPY\x01\x00", 8));
    size_t hl = (size_t)b[8] | (size_t)b[9] << 8;
    ASSERT_EQ_INT((10 + hl) % 64, 0);
    ASSERT_EQ_INT(n, 10 + hl + sizeof v);
    ASSERT_EQ_INT(b[10 + hl - 1], '\n');
    b[10 + hl - 1] = 0;
    ASSERT_STR_CONTAINS((const char *)b + 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
    ASSERT_TRUE(!memcmp(b + 10 + hl, v, sizeof v));
    ASSERT_OK(herd_npy_write(path, (const size_t[]){5}, 1, v, NULL));
    f = fopen(path, "rb");
    n = fread(b, 1, sizeof b, f);
    fclose(f);
    b[n < sizeof b ? n : sizeof b - 1] = 0;
    ASSERT_STR_CONTAINS((const char *)b + 10, "'shape': (5,), }");
}

/* herd eval and herd export as a user runs them: help on stdout, usage
 * errors exit 2, failures 1 (with --json's error line), JSON summaries. */
static void test_cli(void)
{
    const char *dir = scratch("cli");
    herd_test_cmd o;
    /* help on stdout (exit 0), usage errors on stderr (exit 2) */
    static const struct {
        const char *args[8];
        int code;
        const char *out, *err;
    } cases[] = {
        {{"--help"}, 0, "  export    a checkpoint's model as safetensors, npy or PyTorch files", ""},
        {{"eval", "--help"}, 0, "  --dump-logits FILE ", ""},
        {{"export", "-h"}, 0, "usage: herd export --checkpoint DIR [--format safetensors|npy] OUT", ""},
        {{"eval"}, 2, "", "herd: --checkpoint DIR is required (see 'herd eval --help')"},
        {{"eval", "--checkpoint", "d", "--bogus"}, 2, "", "unknown flag '--bogus' (see 'herd eval --help')"},
        {{"eval", "--checkpoint", "d", "extra"}, 2, "", "unexpected argument 'extra'"},
        {{"export", "--checkpoint", "d"}, 2, "", "name the file or directory to write (OUT)"},
        {{"export", "--checkpoint", "d", "a", "b"}, 2, "", "unexpected argument 'b' (OUT is 'a')"},
        {{"export", "--checkpoint", "d", "--", "a", "b"}, 2, "", "unexpected argument 'b' (OUT is 'a')"},
        {{"export", "--checkpoint", "d", "--format", "onnx", "x"}, 2, "", "--format must be safetensors, npy or pytorch, got 'onnx'"},
        {{"export", "--json", "x"}, 2, "\"status\":\"error\",\"code\":\"usage\"", "--checkpoint DIR is required"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        herd_test_run(&o, 50, cases[i].args);
        if (o.code != cases[i].code || !strstr(o.out, cases[i].out) || !strstr(o.err, cases[i].err))
            herd_test_fail(__FILE__, __LINE__, "herd %s %s: exit %d (want %d)\nstdout: %s\nstderr: %s", cases[i].args[0],
                           cases[i].args[1] ? cases[i].args[1] : "", o.code, cases[i].code, o.out, o.err);
    }
    /* a directory with no checkpoint: a failure, said in JSON too */
    HERD_TEST_RUN(&o, "eval", "--checkpoint", dir, "--json");
    ASSERT_EQ_INT(o.code, 1);
    ASSERT_STR_CONTAINS(o.err, "herd: checkpoint directory");
    herd_test_json_lines(o.out, "herd eval --json (failed)");
    ASSERT_STR_CONTAINS(o.out, "\"status\":\"error\"");

    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", "linear", "--epochs", "1", "--train-limit",
                  "256", "--test-limit", "64", "--checkpoint", dir, "--quiet", "--json");
    ASSERT_EQ_INT(o.code, 0);
    char train_loss[64];
    const char *at = strstr(o.out, "\"test_loss\":");
    ASSERT_TRUE(at != NULL);
    snprintf(train_loss, sizeof train_loss, "%.*s", (int)strcspn(at, ","), at);
    HERD_TEST_RUN(&o, "eval", "--checkpoint", dir, "--test-limit", "64", "--json", "--quiet");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_EQ_INT(herd_test_json_lines(o.out, "herd eval --json"), 1);
    ASSERT_STR_CONTAINS(o.out, "\"command\":\"eval\",\"status\":\"ok\"");
    ASSERT_STR_CONTAINS(o.out, "\"eval_model\":\"worker0\",\"final\":true");
    ASSERT_STR_CONTAINS(o.out, train_loss); /* the same digits as the run's summary */
    HERD_TEST_RUN(&o, "eval", "--checkpoint", dir, "--test-limit", "64");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.out, "linear (sgd, worker 0's weights, the run's final model, step 4) from ");
    ASSERT_STR_CONTAINS(o.out, "on 64 examples");
    /* a newer checkpoint that does not verify: the one before it, with a warning */
    FILE *f = fopen(herd_test_fmt("%s/ckpt-9.herd", dir), "w");
    ASSERT_TRUE(f != NULL);
    fputs("HERDCKPT, cut short", f);
    fclose(f);
    HERD_TEST_RUN(&o, "eval", "--checkpoint", dir, "--test-limit", "64");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.out, "step 4) from ");
    ASSERT_STR_CONTAINS(o.err, "herd: warning: checkpoint ");
    ASSERT_STR_CONTAINS(o.err, "ckpt-9.herd: truncated");
    const char *out = scratch("m.safetensors");
    HERD_TEST_RUN(&o, "export", out, "--checkpoint", dir, "--json");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_EQ_INT(herd_test_json_lines(o.out, "herd export --json"), 1);
    ASSERT_STR_CONTAINS(o.out, "\"tensors\":2,\"floats\":260}");
    HERD_TEST_RUN(&o, "export", "--checkpoint", dir, "--format", "npy", "--", scratch("npy"));
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_TRUE(access(scratch("npy/fc1.weight.npy"), F_OK) == 0 && access(scratch("npy/fc1.bias.npy"), F_OK) == 0);
    /* a file where npy wants a directory: a failure, nothing replaced */
    HERD_TEST_RUN(&o, "export", "--checkpoint", dir, "--format", "npy", out);
    ASSERT_EQ_INT(o.code, 1);
    ASSERT_STR_CONTAINS(o.err, "is not a directory");
}

/* The exported files, read by tests/export_check.py with json + struct
 * and numpy (and torch where installed), give herd's own logits. */
static void test_python_reader(void)
{
    const char *py = "/usr/bin/python3";
    if (access(py, X_OK) != 0 || system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
        herd_test_fail(__FILE__, __LINE__, "this test needs %s with numpy (Debian: apt-get install python3-numpy)", py);
    const char *bin = getenv("HERD_BIN") ? getenv("HERD_BIN") : "build/herd";
    const char *out = scratch("py.out");
    fflush(NULL);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        FILE *f = freopen(out, "w", stdout);
        if (!f || dup2(1, 2) < 0)
            _exit(126);
        execl(py, py, "tests/export_check.py", bin, herd_test_tmpdir(), (char *)NULL);
        _exit(127);
    }
    int code = herd_test_wait(pid, 150);
    if (code != 0) {
        char buf[4096] = "";
        FILE *f = fopen(out, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        buf[n] = 0;
        if (f)
            fclose(f);
        herd_test_fail(__FILE__, __LINE__, "tests/export_check.py exited %d:\n%s", code, buf);
    }
}

/* An exported model says how its inputs were made: the run's per-channel
 * mean and std (the data set's own, herd_data_open's) in the safetensors
 * metadata, as floats that read back exactly. */
static void test_input_norm(void)
{
    const char *dir = scratch("norm");
    herd__train_config c = ckpt_config("linear", "sgd", 1, dir);
    c.data = "synthetic:3x6x6:4";
    herd_train_result tr;
    herd_test_train_ok(&c, &tr);
    herd_dataset train, test;
    herd_err err = {0};
    ASSERT_OK(herd_data_open(c.data, c.seed, &train, &test, &err));
    ASSERT_TRUE(train.mean && train.std && test.mean && test.std);
    /* the library's caller gets them with the final model (keep_final) */
    ASSERT_TRUE(tr.input_mean && tr.input_std && tr.in_c == 3);
    ASSERT_TRUE(!memcmp(tr.input_mean, train.mean, 3 * sizeof(float)) && !memcmp(tr.input_std, train.std, 3 * sizeof(float)));
    herd_train_result_free(&tr);
    ASSERT_TRUE(tr.input_mean == NULL);
    herd_export_config xc = {.checkpoint_dir = dir, .out = scratch("norm.safetensors")};
    herd_export_result xr;
    ASSERT_OK(herd_export(&xc, &xr, &err));
    FILE *f = fopen(xc.out, "rb");
    ASSERT_TRUE(f != NULL);
    unsigned char len8[8];
    ASSERT_EQ_INT(fread(len8, 1, 8, f), 8);
    size_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | len8[i];
    char *hdr = calloc(1, hl + 1);
    ASSERT_TRUE(hdr && fread(hdr, 1, hl, f) == hl);
    fclose(f);
    ASSERT_TRUE(herd_test_json_lines(hdr, "the safetensors header") == 1);
    const char *keys[2] = {"\"input_mean\":\"", "\"input_std\":\""};
    const float *want[2] = {train.mean, train.std};
    const char *res[2] = {xr.input_mean, xr.input_std};
    for (int k = 0; k < 2; k++) {
        const char *p = strstr(hdr, keys[k]);
        ASSERT_TRUE(p != NULL);
        p += strlen(keys[k]);
        ASSERT_TRUE(!strncmp(p, res[k], strlen(res[k])) && p[strlen(res[k])] == '"');
        for (size_t ch = 0; ch < 3; ch++) {
            char *end;
            float v = strtof(p, &end);
            if (v != want[k][ch])
                herd_test_fail(__FILE__, __LINE__, "%s channel %zu: %.9g, the data's %.9g", keys[k], ch, (double)v,
                               (double)want[k][ch]);
            ASSERT_TRUE(*end == (ch < 2 ? ',' : '"'));
            p = end + 1;
        }
    }
    free(hdr);
    herd_dataset_free(&train);
    herd_dataset_free(&test);
}

const herd_test herd_tests_export[] = {
    {"export_input_norm", test_input_norm, 60},
    {"export_eval_sgd", test_eval_sgd, 60},
    {"export_eval_easgd", test_eval_easgd, 60},
    {"export_eval_dpsgd", test_eval_dpsgd, 60},
    {"export_eval_sgp", test_eval_sgp, 60},
    {"export_eval_asgd", test_eval_asgd, 60},
    {"export_eval_aeasgd", test_eval_aeasgd, 60},
    {"export_eval_allreduce_resnet", test_eval_allreduce_resnet, 120},
    {"export_old_checkpoints", test_old_checkpoints, 60},
    {"export_meta", test_meta, 60},
    {"export_data_identity", test_data_identity, 60, HERD_TEST_ONE_THREAD},
    {"export_checkpoint_file", test_checkpoint_file, 60, HERD_TEST_ONE_THREAD},
    {"export_tensors", test_tensors, 20, HERD_TEST_ONE_THREAD},
    {"export_npy_file", test_npy_file, 20, HERD_TEST_ONE_THREAD},
    {"export_cli", test_cli, 60, HERD_TEST_ONE_THREAD},
    {"export_python_reader", test_python_reader, 180},
    HERD_TEST_END,
};
