/* herd model — a model's summary from its description alone: each layer's
 * output shape, parameters and FLOPs for a given input (shape inference,
 * as torchinfo's summary prints a PyTorch module), or its description.
 * Usage errors exit 2, a description that does not build 1. */
#include "cli/model_cmd.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "herd/herd_data.h"
#include "herd/herd_nn.h"
#include "cli/flags.h"

typedef struct model_opts {
    const char *input, *data;
    size_t classes;
    bool text;
} model_opts;

#define AT(f) offsetof(model_opts, f)
static const herd_opt model_opts_rows[] = {
    {.name = "input", .type = HERD_OPT_STR, .offset = AT(input), .def = "1x28x28", .flags = HERD_OPT_NONEMPTY,
     .meta = "CxHxW", .help = "one example's shape (Fashion-MNIST's unless given; CIFAR-10: 3x32x32)"},
    {.name = "classes", .type = HERD_OPT_SIZE, .offset = AT(classes), .def = "10", .flags = HERD_OPT_BOUNDED,
     .min = 2, .max = 1 << 20, .meta = "K", .help = "the classes, what 'linear classes' gives"},
    {.name = "data", .type = HERD_OPT_STR, .offset = AT(data), .flags = HERD_OPT_NONEMPTY, .meta = "S",
     .help = "the shape and classes of this data set, as herd train --data takes it, instead of --input and "
             "--classes (a directory is read whole)"},
    {.name = "text", .type = HERD_OPT_BOOL, .offset = AT(text),
     .help = "print the description itself (a start for one's own: herd model resnet20 --text > my.model)"},
    {0},
};
#undef AT

static void usage(FILE *out)
{
    fprintf(out, "usage: herd model NAME|FILE [flags]\n\n"
                 "The model NAME (linear, mlp, lenet, cnn, resnet20) or the description FILE, layer by layer:\n"
                 "each layer's line in the description, its output for one example, its parameters and\n"
                 "its forward FLOPs (docs/models-and-data.md).\n\nflags:\n");
    herd_opt_print(model_opts_rows, out);
}

static void print_summary(const herd_model *m, const char *what, size_t c, size_t h, size_t w, size_t k)
{
    size_t n = herd_model_layers(m, NULL, 0);
    herd_layer_info *li = calloc(n ? n : 1, sizeof *li);
    if (!li)
        return;
    herd_model_layers(m, li, n);
    printf("model %s: %s, for %zux%zux%zu inputs and %zu classes\n\n", herd_model_name(m), what, c, h, w, k);
    printf("%4s %5s  %-14s %-14s %12s %14s\n", "#", "line", "layer", "output", "params", "MFLOPs");
    for (size_t i = 0; i < n; i++) {
        char shape[48];
        if (li[i].flat)
            snprintf(shape, sizeof shape, "%zu", li[i].c);
        else
            snprintf(shape, sizeof shape, "%zux%zux%zu", li[i].c, li[i].h, li[i].w);
        printf("%4zu %5d  %-14s %-14s %12zu %14.3f\n", i + 1, li[i].line, li[i].kind, shape, li[i].nparams,
               li[i].flops / 1e6);
    }
    size_t np = herd_model_nparams(m);
    printf("\n%zu parameters (%.1f KiB of float32), %zu batch-norm statistics; per example %.3f MFLOPs forward, "
           "%.3f a training step\n",
           np, (double)np * 4 / 1024, herd_model_nbuffers(m), herd_model_forward_flops(m) / 1e6,
           herd_model_train_flops(m) / 1e6);
    free(li);
}

/* The shape and classes of --data S: from the spec where it tells them
 * (synthetic), else from the sets as herd train reads them. 0, or the exit
 * status: 2 for a spec refused unread, 1 for data that does not read. */
static int data_shape(const char *spec, size_t *c, size_t *h, size_t *w, size_t *k)
{
    herd_err err = {0};
    bool known = false;
    if (herd_data_check(spec, &err) < 0 || herd_data_shape(spec, &known, c, h, w, k, &err) < 0)
        herd__usage_error("model", "--data: %s", err.msg);
    if (known)
        return 0;
    herd_dataset train, test;
    if (herd_data_open(spec, 1, &train, &test, &err) < 0) {
        fprintf(stderr, "herd: %s\n", err.msg);
        return 1;
    }
    *c = train.c, *h = train.h, *w = train.w, *k = train.nclasses;
    herd_dataset_free(&train);
    herd_dataset_free(&test);
    return 0;
}

int herd__cli_model(int argc, char **argv)
{
    model_opts o = {0};
    herd__flags_defaults(model_opts_rows, &o);
    herd__flag_cmd cmd = {.cmd = "model", .opts = model_opts_rows, .obj = &o, .usage = usage};
    const char *name = NULL;
    for (int i = 2; (i = herd__flags_parse(&cmd, argc, argv, i, true)) < argc; i++) {
        if (name || !strcmp(argv[i], "--"))
            herd__usage_error("model", "unexpected argument '%s'", argv[i]);
        name = argv[i];
    }
    if (!name)
        herd__usage_error("model", "name a model or a description file");
    size_t c, h, w;
    char tail;
    if (sscanf(o.input, "%zux%zux%zu%c", &c, &h, &w, &tail) != 3 || !c || !h || !w || c > 4096 || h > 65536 ||
        w > 65536)
        herd__usage_error("model", "--input: expected CxHxW (1x28x28), got '%s'", o.input);
    bool builtin = false;
    for (size_t i = 0; herd_model_names[i]; i++)
        builtin |= !strcmp(herd_model_names[i], name);
    struct stat sb;
    if (!builtin && lstat(name, &sb) != 0 && errno == ENOENT) /* a name misspelt, as herd train --model's: exit 2 */
        herd__usage_error("model", "unknown model '%s' (choose one of: linear, mlp, lenet, cnn, resnet20, or a "
                                   "description file)", name);
    int rc = o.data ? data_shape(o.data, &c, &h, &w, &o.classes) : 0;
    if (rc)
        return rc;
    herd_model *m = NULL;
    herd_err err = {0};
    if (herd_model_create(name, c, h, w, o.classes, 1, 1, &m, &err) < 0) {
        fprintf(stderr, "herd: %s\n", err.msg);
        return 1;
    }
    char what[600];
    snprintf(what, sizeof what, builtin ? "built in, models/%s.model" : "described in %s", name);
    if (o.text)
        fputs(herd_model_description(m), stdout);
    else
        print_summary(m, what, c, h, w, o.classes);
    herd_model_free(m);
    return 0;
}
