/* The five built-in models as code (model_code.h): src/nn/model.c's
 * definitions as they were, on the builder's calls. */
#include "model_code.h"

#include <string.h>

#define conv herd__build_conv
#define linear herd__build_linear
#define maxpool herd__build_maxpool
#define batchnorm herd__build_batchnorm
#define add herd__build_add
#define gavgpool herd__build_gavgpool

static size_t classes(const herd__builder *b) { return b->m->nclasses; }

static void build_linear(herd__builder *b) { linear(b, -1, classes(b), false); }

static void build_mlp(herd__builder *b)
{
    int x = linear(b, -1, 1024, true);
    x = linear(b, x, 1024, true);
    linear(b, x, classes(b), false);
}

static void build_lenet(herd__builder *b)
{
    int x = conv(b, -1, 6, 5, 1, 2, true, true);
    x = maxpool(b, x, 2, 2);
    x = conv(b, x, 16, 5, 1, 0, true, true);
    x = maxpool(b, x, 2, 2);
    x = linear(b, x, 120, true);
    x = linear(b, x, 84, true);
    linear(b, x, classes(b), false);
}

static void build_cnn(herd__builder *b)
{
    int x = conv(b, -1, 32, 5, 1, 2, true, true);
    x = maxpool(b, x, 2, 2);
    x = conv(b, x, 64, 5, 1, 2, true, true);
    x = maxpool(b, x, 2, 2);
    x = linear(b, x, 1024, true);
    linear(b, x, classes(b), false);
}

/* CIFAR ResNet basic block; a 1x1 projection when the shape changes. */
static int basic_block(herd__builder *b, int in, size_t cout, size_t stride)
{
    size_t c, h, w;
    bool flat;
    if (b->st != HERD_OK || in < -1)
        return -2;
    herd__build_shape(b, in, &c, &h, &w, &flat);
    int x = conv(b, in, cout, 3, stride, 1, false, false);
    x = batchnorm(b, x, true);
    x = conv(b, x, cout, 3, 1, 1, false, false);
    x = batchnorm(b, x, false);
    int sc = in;
    if (stride != 1 || c != cout)
        sc = batchnorm(b, conv(b, in, cout, 1, stride, 0, false, false), false);
    return add(b, x, sc, true);
}

static void build_resnet20(herd__builder *b)
{
    int x = conv(b, -1, 16, 3, 1, 1, false, false);
    x = batchnorm(b, x, true);
    static const size_t widths[3] = {16, 32, 64};
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 3; i++)
            x = basic_block(b, x, widths[s], (s > 0 && i == 0) ? 2 : 1);
    x = gavgpool(b, x);
    linear(b, x, classes(b), false);
}

void (*herd_test_model_code(const char *name))(herd__builder *b)
{
    static const struct {
        const char *name;
        void (*build)(herd__builder *b);
    } defs[] = {{"linear", build_linear}, {"mlp", build_mlp},           {"lenet", build_lenet},
                {"cnn", build_cnn},       {"resnet20", build_resnet20}};
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        if (!strcmp(defs[i].name, name))
            return defs[i].build;
    return NULL;
}
