/* Models from descriptions (src/nn/desc.c): the built-in models' files
 * against the code that built them before (model_code.c), bit for bit;
 * the descriptions the library carries against models/; the messages of a
 * description that does not build; shape inference (herd_model_layers). */
#include "fixtures.h"
#include "harness.h"
#include "model_code.h"
#include "herd/herd_nn.h"
#include "nn/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        herd_test_fail(__FILE__, __LINE__, "cannot open %s (the tests run from the source tree)", path);
    char *buf = calloc(1 << 20, 1);
    ASSERT_TRUE(buf != NULL);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* What the library carries is models/NAME.model as it is, for every name. */
static void test_files_embedded(void)
{
    size_t n = 0;
    for (size_t i = 0; herd__model_texts[i].name; i++, n++) {
        char path[256];
        snprintf(path, sizeof path, "models/%s.model", herd__model_texts[i].name);
        char *text = slurp(path);
        if (strcmp(text, herd__model_texts[i].text))
            herd_test_fail(__FILE__, __LINE__, "%s differs from the built-in text: run make (tools/embed-models)", path);
        free(text);
        bool named = false;
        for (size_t k = 0; herd_model_names[k]; k++)
            named |= !strcmp(herd_model_names[k], herd__model_texts[i].name);
        ASSERT_TRUE(named);
    }
    size_t names = 0;
    while (herd_model_names[names])
        names++;
    ASSERT_EQ_INT(n, names);
}

/* A few SGD steps on random data: every loss, then the weights and the
 * batch-norm statistics, into out (nsteps losses, then params, then buffers). */
static void train_steps(herd_model *m, size_t c, size_t h, size_t w, size_t batch, size_t nsteps, float *out)
{
    size_t dim = c * h * w, np = herd_model_nparams(m), nb = herd_model_nbuffers(m);
    float *x = malloc(batch * dim * sizeof *x);
    int32_t *y = malloc(batch * sizeof *y);
    ASSERT_TRUE(x && y);
    for (size_t s = 0; s < nsteps; s++) {
        herd_test_random_batch(batch, dim, 10, x, y, 17, s);
        herd_model_forward(m, x, batch, true);
        out[s] = herd_model_loss(m, y, batch, NULL);
        ASSERT_OK(herd_model_backward(m, batch, NULL, NULL));
        float *p = herd_model_params(m);
        const float *g = herd_model_grads(m);
        for (size_t i = 0; i < np; i++)
            p[i] -= 0.05f * g[i];
    }
    memcpy(out + nsteps, herd_model_params(m), np * sizeof(float));
    memcpy(out + nsteps + np, herd_model_buffers(m), nb * sizeof(float));
    free(x), free(y);
}

static void same_bits(const char *name, const char *what, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)))
            herd_test_fail(__FILE__, __LINE__, "%s: %s[%zu] from the description %.9g, from the code %.9g", name, what,
                           i, (double)a[i], (double)b[i]);
}

/* One built-in model from its description and from the code, for one
 * input shape: the same layers, parameter count, initial weights, and the
 * same losses, weights and statistics after three steps, to the bit. */
static void match_code(const char *name, size_t c, size_t h, size_t w)
{
    herd_model *d = NULL, *k = NULL;
    herd_err err = {0};
    size_t batch = 6, steps = 3;
    if (herd_model_create(name, c, h, w, 10, batch, 42, &d, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s from its description: %s", name, err.msg);
    ASSERT_OK(herd__model_create_with(name, name, "", herd_test_model_code(name), c, h, w, 10, batch, 42, &k, &err));
    ASSERT_EQ_INT(herd_model_nparams(d), herd_model_nparams(k));
    ASSERT_EQ_INT(herd_model_nbuffers(d), herd_model_nbuffers(k));
    ASSERT_EQ_INT(d->nlayers, k->nlayers);
    for (size_t i = 0; i < d->nlayers; i++) {
        const herd_layer *a = d->layers[i], *b = k->layers[i];
        if (a->ops != b->ops || a->in != b->in || a->in2 != b->in2 || a->relu != b->relu || out_dim(a) != out_dim(b) ||
            a->param_len != b->param_len || a->fwd_flops != b->fwd_flops || a->bwd_flops != b->bwd_flops)
            herd_test_fail(__FILE__, __LINE__, "%s: layer %zu differs: %s+%d reading %d,%d vs the code's %s+%d reading %d,%d",
                           name, i, a->ops->name, a->relu, a->in, a->in2, b->ops->name, b->relu, b->in, b->in2);
    }
    size_t np = herd_model_nparams(d), n = steps + np + herd_model_nbuffers(d);
    same_bits(name, "initial weight", herd_model_params(d), herd_model_params(k), np);
    float *rd = malloc(n * sizeof *rd), *rk = malloc(n * sizeof *rk);
    ASSERT_TRUE(rd && rk);
    train_steps(d, c, h, w, batch, steps, rd);
    train_steps(k, c, h, w, batch, steps, rk);
    same_bits(name, "loss at step", rd, rk, steps);
    same_bits(name, "weight after 3 steps", rd + steps, rk + steps, np);
    same_bits(name, "buffer after 3 steps", rd + steps + np, rk + steps + np, n - steps - np);
    free(rd), free(rk);
    herd_model_free(d);
    herd_model_free(k);
}

static void test_match_code(void)
{
    for (size_t i = 0; herd_model_names[i]; i++) {
        match_code(herd_model_names[i], 1, 28, 28);
        match_code(herd_model_names[i], 3, 20, 20);
    }
}

typedef struct bad_case {
    const char *text, *want[3];
    size_t c, h, w;
} bad_case;

/* Each message names the file, the line and the layer, and the shapes. */
static void test_errors(void)
{
    static const bad_case cases[] = {
        {"conv 6 k=5\nconv 16 k=5\nmaxpool 2\nlinear classes\n",
         {"t.model:2 (conv 16 k=5)", "5x5 convolution", "does not fit its 6x4x4 input"}, 1, 8, 8},
        {"# a comment\n\nfrob 3\n", {"t.model:3 (frob 3)", "unknown layer 'frob'", "avgpool"}, 1, 8, 8},
        {"conv 4 k=3 pad=1\nadd nope\nlinear classes\n", {"t.model:2 (add nope)", "no layer is labelled 'nope'"}, 1, 8, 8},
        {"a: conv 4 k=3\nconv 8 k=3\nadd a\nlinear classes\n",
         {"t.model:3 (add a)", "adds a 8x4x4 input to a 4x6x6 one"}, 1, 8, 8},
        {"flatten\nlinear 7\n", {"t.model", "10 flat values", "it gives 7x1x1 flat"}, 1, 8, 8},
        {"linear 8\nrelu\n", {"t.model", "with no relu", "it gives 8x1x1 flat"}, 1, 8, 8},
        {"dropout 1.5\nlinear classes\n", {"t.model:1 (dropout 1.5)", "in [0, 1)"}, 1, 8, 8},
        {"conv 4 k=3 bias=maybe\nlinear classes\n", {"t.model:1", "bias is yes or no"}, 1, 8, 8},
        {"conv 4 k=3 q=2\nlinear classes\n", {"t.model:1 (conv 4 k=3 q=2)", "no option 'q=2'"}, 1, 8, 8},
        {"conv 4\nlinear classes\n", {"t.model:1 (conv 4)", "k="}, 1, 8, 8},
        {"a: conv 4 k=3\na: relu\nlinear classes\n", {"t.model:2", "label 'a' is already used"}, 1, 8, 8},
        {"linear 8\navgpool 2\nlinear classes\n", {"t.model:2 (avgpool 2)", "needs an image", "8 flat values"}, 1, 8, 8},
        {"maxpool 3 stride=0\nlinear classes\n", {"t.model:1", "does not fit"}, 1, 8, 8},
        {"conv x k=3\nlinear classes\n", {"t.model:1", "'x' is not a whole number"}, 1, 8, 8},
        {"a,b: conv 4 k=3\nlinear classes\n", {"t.model:1", "label 'a,b'"}, 1, 8, 8},
        {"linear 8\nbatchnorm\nlinear classes\n", {"t.model:2 (batchnorm)", "needs an image", "8 flat"}, 1, 8, 8},
        {"input: conv 4 k=3\nlinear classes\n", {"t.model:1", "not 'input'"}, 1, 8, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_case *bc = &cases[i];
        herd_model *m = (herd_model *)1;
        herd_err err = {0};
        ASSERT_EQ_INT(herd_model_create_from_description("t.model", bc->text, bc->c, bc->h, bc->w, 10, 4, 1, &m, &err),
                      HERD_EINVAL);
        ASSERT_TRUE(m == NULL);
        for (size_t k = 0; k < 3 && bc->want[k]; k++)
            ASSERT_STR_CONTAINS(err.msg, bc->want[k]);
    }
}

/* A relu after a layer nothing else reads is fused into it; after one a
 * label lets another line read, it is a layer of its own. */
static void test_relu_fusion(void)
{
    herd_model *m = NULL;
    herd_err err = {0};
    ASSERT_OK(herd_model_create_from_description("f", "conv 4 k=3 pad=1\nrelu\nb: conv 4 k=3 pad=1\nc: relu\nadd b\n"
                                                      "relu\nlinear classes\n",
                                                 1, 6, 6, 10, 2, 1, &m, &err));
    herd_layer_info li[8];
    ASSERT_EQ_INT(herd_model_layers(m, li, 8), 6);
    const char *want[] = {"conv+relu", "conv", "relu", "add+relu", "flatten", "linear"};
    const int lines[] = {1, 3, 4, 5, 7, 7};
    for (size_t i = 0; i < 6; i++) {
        ASSERT_STR_CONTAINS(li[i].kind, want[i]);
        ASSERT_EQ_INT(strlen(li[i].kind), strlen(want[i]));
        ASSERT_EQ_INT(li[i].line, lines[i]);
    }
    ASSERT_EQ_INT(m->layers[3]->in, 2);
    ASSERT_EQ_INT(m->layers[3]->in2, 1);
    herd_model_free(m);
    /* a label no line reads keeps nothing from fusing, spelled as it may be */
    ASSERT_OK(herd_model_create_from_description("f", "relu: conv 4 k=3 pad=1\nrelu\nlinear classes # relu\n", 1, 6, 6,
                                                 10, 2, 1, &m, &err));
    ASSERT_EQ_INT(herd_model_layers(m, li, 8), 3);
    ASSERT_TRUE(!strcmp(li[0].kind, "conv+relu"));
    herd_model_free(m);
}

/* Shape inference of lenet on 28x28: every layer's shape, parameters and
 * FLOPs in closed form. */
static void test_layers_info(void)
{
    herd_model *m = NULL;
    herd_err err = {0};
    ASSERT_OK(herd_model_create("lenet", 1, 28, 28, 10, 2, 1, &m, &err));
    herd_layer_info li[16];
    ASSERT_EQ_INT(herd_model_layers(m, li, 16), 8);
    static const struct {
        const char *kind;
        size_t c, h, w, np;
        double flops;
    } want[] = {
        {"conv+relu", 6, 28, 28, 6 * 25 + 6, 2.0 * 6 * 25 * 784}, {"maxpool", 6, 14, 14, 0, 0},
        {"conv+relu", 16, 10, 10, 16 * 150 + 16, 2.0 * 16 * 150 * 100}, {"maxpool", 16, 5, 5, 0, 0},
        {"flatten", 400, 1, 1, 0, 0}, {"linear+relu", 120, 1, 1, 400 * 120 + 120, 2.0 * 400 * 120},
        {"linear+relu", 84, 1, 1, 120 * 84 + 84, 2.0 * 120 * 84}, {"linear", 10, 1, 1, 84 * 10 + 10, 2.0 * 84 * 10},
    };
    for (size_t i = 0; i < 8; i++) {
        ASSERT_TRUE(!strcmp(li[i].kind, want[i].kind));
        ASSERT_EQ_INT(li[i].c, want[i].c);
        ASSERT_EQ_INT(li[i].h, want[i].h);
        ASSERT_EQ_INT(li[i].w, want[i].w);
        ASSERT_EQ_INT(li[i].nparams, want[i].np);
        ASSERT_NEAR(li[i].flops, want[i].flops, 0, 0);
    }
    ASSERT_TRUE(!strcmp(herd_model_description(m), herd__model_texts[1].text));
    herd_model_free(m);
}

/* A description file: the model is named after it; a path that is no file
 * is an unknown model. */
static void test_from_file(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/tiny-net.model", herd_test_tmpdir());
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fputs("avgpool 2\ntanh\nlinear 16\ngelu\ndropout 0.25\nlinear classes\n", f);
    fclose(f);
    herd_model *m = NULL;
    herd_err err = {0};
    ASSERT_OK(herd_model_create(path, 1, 8, 8, 10, 4, 1, &m, &err));
    ASSERT_TRUE(!strcmp(herd_model_name(m), "tiny-net"));
    ASSERT_EQ_INT(herd_model_nparams(m), 16 * 16 + 16 + 16 * 10 + 10);
    herd_model_free(m);
    m = (herd_model *)1;
    snprintf(path, sizeof path, "%s/none.model", herd_test_tmpdir());
    ASSERT_EQ_INT(herd_model_create(path, 1, 8, 8, 10, 4, 1, &m, &err), HERD_EINVAL);
    ASSERT_TRUE(m == NULL);
    ASSERT_STR_CONTAINS(err.msg, "unknown model '");
    ASSERT_STR_CONTAINS(err.msg, "No such file");
}

/* The number after "key": in a JSON line (NaN where it is missing). */
static double json_number(const char *json, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\":", key);
    const char *p = strstr(json, k);
    return p ? strtod(p + strlen(k), NULL) : NAN;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fputs(text, f);
    ASSERT_TRUE(fclose(f) == 0);
}

/* herd model: the summary's shapes and totals; a description that does not
 * build exits 1 naming the line, the layer and the shapes; no model, 2. */
static void test_cli_summary(void)
{
    herd_test_cmd o;
    HERD_TEST_RUN(&o, "model", "lenet");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.out, "models/lenet.model, for 1x28x28 inputs and 10 classes");
    ASSERT_STR_CONTAINS(o.out, "conv+relu      16x10x10               2416");
    ASSERT_STR_CONTAINS(o.out, "61706 parameters");
    HERD_TEST_RUN(&o, "model", "resnet20", "--input", "3x32x32", "--classes", "100");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.out, "add+relu       64x8x8");
    ASSERT_STR_CONTAINS(o.out, "linear         100                    6500");
    HERD_TEST_RUN(&o, "model", "resnet20", "--data", "synthetic:3x32x32:7");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.out, "for 3x32x32 inputs and 7 classes");
    ASSERT_STR_CONTAINS(o.out, "linear         7                       455");
    HERD_TEST_RUN(&o, "model", "lenet", "--data", herd_test_tmpdir()); /* no data set there */
    ASSERT_EQ_INT(o.code, 1);
    ASSERT_STR_CONTAINS(o.err, "no data found");
    char path[512];
    snprintf(path, sizeof path, "%s/bad.model", herd_test_tmpdir());
    write_file(path, "conv 8 k=3 pad=1\n\nconv 4 k=30   # too wide\nlinear classes\n");
    HERD_TEST_RUN(&o, "model", path);
    ASSERT_EQ_INT(o.code, 1);
    ASSERT_STR_CONTAINS(o.err, "bad.model:3 (conv 4 k=30): a 30x30 convolution");
    ASSERT_STR_CONTAINS(o.err, "does not fit its 8x28x28 input");
    HERD_TEST_RUN(&o, "model");
    ASSERT_EQ_INT(o.code, 2);
    HERD_TEST_RUN(&o, "model", "mlp", "--text");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_TRUE(!strcmp(o.out, herd__model_texts[3].text));
}

/* A description file trains; its checkpoint carries the description, so
 * herd eval scores the model with the file gone, to the run's figures;
 * resuming with another description of the same parameters is refused. */
static void test_cli_checkpoint_carries_description(void)
{
    char path[512], ck[512], moved[512];
    const char *net = "conv 4 k=3 pad=1\nbatchnorm\nrelu\navgpool 2\ndropout 0.1\ngelu\nflatten\n"
                      "linear 16\ntanh\nlinear classes\n";
    snprintf(path, sizeof path, "%s/net.model", herd_test_tmpdir());
    snprintf(moved, sizeof moved, "%s/moved.model", herd_test_tmpdir());
    snprintf(ck, sizeof ck, "%s/ck", herd_test_tmpdir());
    write_file(path, net);
    herd_test_cmd o, e;
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", path, "--train-limit", "4096", "--test-limit",
                  "256", "--epochs", "1", "--quiet", "--json", "--checkpoint", ck);
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_TRUE(json_number(o.out, "test_acc") > 0.5); /* 4 classes: chance is 0.25; 0.70-0.74 for seeds 1-3 */
    ASSERT_TRUE(rename(path, moved) == 0);
    HERD_TEST_RUN(&e, "eval", "--checkpoint", ck, "--test-limit", "256", "--json", "--quiet");
    ASSERT_EQ_INT(e.code, 0);
    ASSERT_STR_CONTAINS(e.out, "\"model\":\"net\"");
    ASSERT_NEAR(json_number(e.out, "test_acc"), json_number(o.out, "test_acc"), 0, 0);
    ASSERT_NEAR(json_number(e.out, "test_loss"), json_number(o.out, "test_loss"), 0, 0);
    char *other = strdup(net);
    memcpy(strstr(other, "tanh"), "gelu", 4);
    write_file(path, other);
    free(other);
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", path, "--train-limit", "4096", "--test-limit",
                  "256", "--epochs", "2", "--quiet", "--checkpoint", ck, "--resume");
    ASSERT_TRUE(o.code != 0);
    ASSERT_STR_CONTAINS(o.err, "another description of model 'net'");
}

const herd_test herd_tests_models[] = {
    {"models_files_embedded", test_files_embedded, 10, HERD_TEST_ONE_THREAD},
    {"models_match_code", test_match_code, 120},
    {"models_errors", test_errors, 10, HERD_TEST_ONE_THREAD},
    {"models_relu_fusion", test_relu_fusion, 10, HERD_TEST_ONE_THREAD},
    {"models_layers_info", test_layers_info, 10, HERD_TEST_ONE_THREAD},
    {"models_from_file", test_from_file, 10, HERD_TEST_ONE_THREAD},
    {"models_cli_summary", test_cli_summary, 60},
    {"models_cli_checkpoint_carries_description", test_cli_checkpoint_carries_description, 120},
    HERD_TEST_END,
};
