/* Model descriptions: a line-based text, one layer a line, read into the
 * builder's calls (build.c). The format is documented in
 * docs/models-and-data.md and by the built-in models, models/NAME.model.
 *
 *   # a comment, to the end of the line
 *   [LABEL:] KIND [ARG...] [KEY=VALUE...]
 *
 * A layer reads the layer of the line before (the model input for the
 * first) unless from=LABEL names another ("input": the model input). A
 * relu right after a convolution, fully connected layer, batch norm, add
 * or max pooling whose output nothing else reads is fused into it (as the
 * built-in models always were): the same function, one pass less. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/args.h"
#include "nn/model.h"

enum { MAX_TOKENS = 12, MAX_LABELS = 256, MAX_LINE = 512, MAX_DESC_BYTES = 1 << 20 };

typedef struct desc_line {
    int line;
    char buf[MAX_LINE];
    char *label, *kind;
    char *tok[MAX_TOKENS]; /* after the kind */
    size_t ntok;
} desc_line;

typedef struct desc_state {
    herd__builder *b;
    const char *label;    /* the file's name, or the built-in model's */
    char names[MAX_LABELS][32];
    int ids[MAX_LABELS];
    size_t nlabels;
    int prev;             /* the layer the next line reads by default */
    bool prev_fusable;    /* prev may take a following relu */
    const char *text;     /* the whole description, for label look-ahead */
} desc_state;

static bool fail(desc_state *s, const char *fmt, const char *a, const char *b2)
{
    if (s->b->st == HERD_OK) {
        char msg[256];
        snprintf(msg, sizeof msg, fmt, a, b2);
        s->b->st = herd_err_set(s->b->err, HERD_EINVAL, "%s: %s", s->b->where, msg);
    }
    return false;
}

/* Splits one line (comment dropped) into label, kind and tokens; false for a blank one. */
static bool split_line(desc_state *s, desc_line *dl)
{
    char *hash = strchr(dl->buf, '#');
    if (hash)
        *hash = 0;
    char *save = NULL, *t = strtok_r(dl->buf, " \t\r", &save);
    if (!t)
        return false;
    size_t n = strlen(t);
    if (n > 1 && t[n - 1] == ':') {
        t[n - 1] = 0, dl->label = t;
        t = strtok_r(NULL, " \t\r", &save);
        if (!t)
            return fail(s, "label %s: names no layer", dl->label, ""), true;
    }
    dl->kind = t;
    while ((t = strtok_r(NULL, " \t\r", &save)))
        if (dl->ntok < MAX_TOKENS)
            dl->tok[dl->ntok++] = t;
        else
            return fail(s, "more than 12 arguments after %s", dl->kind, ""), true;
    return true;
}

static bool parse_size(desc_state *s, const char *what, const char *v, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (!isdigit((unsigned char)v[0]) || *end || errno || x > (1u << 24))
        return fail(s, "%s: '%s' is not a whole number (0 to 16777216)", what, v);
    *out = (size_t)x;
    return true;
}

/* The layer a label names ("input": -1); false (message set) for none. */
static bool find_label(desc_state *s, const char *name, int *id)
{
    if (!strcmp(name, "input")) {
        *id = -1;
        return true;
    }
    for (size_t i = s->nlabels; i-- > 0;)
        if (!strcmp(s->names[i], name)) {
            *id = s->ids[i];
            return true;
        }
    return fail(s, "no layer is labelled '%s' on an earlier line%s", name, "");
}

/* Whether a later line of the description reads `label` (from=, add). */
static bool label_read_later(const desc_state *s, int line, const char *label)
{
    const char *p = s->text;
    size_t n = strlen(label);
    for (int at = 1; *p; at++) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        const char *hash = memchr(p, '#', len);
        if (hash)
            len = (size_t)(hash - p);
        for (const char *q = p; at > line && q + n <= p + len; q++)
            if (!strncmp(q, label, n) && (q == p || strchr(" \t=,", q[-1])) &&
                (q + n == p + len || strchr(" \t\r", q[n])))
                return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

/* The layer's arguments: positional ones into pos (at most npos), key=value
 * ones checked against keys (each "k", "stride"...) into vals. */
typedef struct args {
    const char *pos[2];
    size_t npos;
    const char *vals[4];
    const char *from;
} args;

static bool get_args(desc_state *s, const desc_line *dl, size_t npos, const char *const *keys, size_t nkeys, args *a)
{
    memset(a, 0, sizeof *a);
    for (size_t i = 0; i < dl->ntok; i++) {
        char *eq = strchr(dl->tok[i], '=');
        if (!eq) {
            if (a->npos == npos)
                return fail(s, "%s takes no argument '%s' here", dl->kind, dl->tok[i]);
            a->pos[a->npos++] = dl->tok[i];
            continue;
        }
        size_t klen = (size_t)(eq - dl->tok[i]), k = 0;
        if (klen == 4 && !strncmp(dl->tok[i], "from", 4)) {
            a->from = eq + 1;
            continue;
        }
        while (k < nkeys && (strlen(keys[k]) != klen || strncmp(keys[k], dl->tok[i], klen)))
            k++;
        if (k == nkeys)
            return fail(s, "%s has no option '%s'", dl->kind, dl->tok[i]);
        a->vals[k] = eq + 1;
    }
    return true;
}

static bool opt_size(desc_state *s, const args *a, size_t k, const char *name, size_t def, size_t *out)
{
    *out = def;
    return !a->vals[k] || parse_size(s, name, a->vals[k], out);
}

/* conv N k=K [stride=S] [pad=P] [bias=yes|no] */
static int line_conv(desc_state *s, const desc_line *dl, int in)
{
    static const char *const keys[] = {"k", "stride", "pad", "bias"};
    args a;
    size_t n, k, stride, pad;
    if (!get_args(s, dl, 1, keys, 4, &a) || (a.from && !find_label(s, a.from, &in)))
        return -2;
    if (a.npos != 1 || !a.vals[0])
        return fail(s, "conv takes its output channels and k= (conv 16 k=3)%s%s", "", ""), -2;
    if (!parse_size(s, "channels", a.pos[0], &n) || !parse_size(s, "k", a.vals[0], &k) ||
        !opt_size(s, &a, 1, "stride", 1, &stride) || !opt_size(s, &a, 2, "pad", 0, &pad))
        return -2;
    bool bias = !a.vals[3] || !strcmp(a.vals[3], "yes");
    if (a.vals[3] && !bias && strcmp(a.vals[3], "no"))
        return fail(s, "bias is yes or no, not '%s'%s", a.vals[3], ""), -2;
    if (!n)
        return fail(s, "a convolution has at least one output channel%s%s", "", ""), -2;
    return herd__build_conv(s->b, in, n, k, stride, pad, bias, false);
}

/* maxpool K [stride=S], avgpool K [stride=S]: stride K unless given */
static int line_pool(desc_state *s, const desc_line *dl, int in, bool avg)
{
    static const char *const keys[] = {"stride"};
    args a;
    size_t k, stride;
    if (!get_args(s, dl, 1, keys, 1, &a) || (a.from && !find_label(s, a.from, &in)))
        return -2;
    if (a.npos != 1)
        return fail(s, "%s takes its window (%s 2)", dl->kind, dl->kind), -2;
    if (!parse_size(s, "window", a.pos[0], &k) || !opt_size(s, &a, 0, "stride", k, &stride))
        return -2;
    return avg ? herd__build_avgpool(s->b, in, k, stride) : herd__build_maxpool(s->b, in, k, stride);
}

/* linear N | linear classes */
static int line_linear(desc_state *s, const desc_line *dl, int in)
{
    args a;
    size_t n = s->b->m->nclasses;
    if (!get_args(s, dl, 1, NULL, 0, &a) || (a.from && !find_label(s, a.from, &in)))
        return -2;
    if (a.npos != 1)
        return fail(s, "linear takes its outputs, a number or 'classes' (linear 120)%s%s", "", ""), -2;
    if (strcmp(a.pos[0], "classes") && !parse_size(s, "outputs", a.pos[0], &n))
        return -2;
    if (!n)
        return fail(s, "a linear layer has at least one output%s%s", "", ""), -2;
    return herd__build_linear(s->b, in, n, false);
}

/* add A [B]: the line before plus A, or A plus B */
static int line_add(desc_state *s, const desc_line *dl, int in)
{
    args a;
    int x = in, y;
    if (!get_args(s, dl, 2, NULL, 0, &a))
        return -2;
    if (a.npos == 0 || a.from)
        return fail(s, "add names the layer(s) it adds: add LABEL (to the line before) or add LABEL1 LABEL2%s%s", "",
                    ""), -2;
    if (!find_label(s, a.pos[0], &y) || (a.npos == 2 && (x = y, !find_label(s, a.pos[1], &y))))
        return -2;
    return herd__build_add(s->b, x, y, false);
}

/* dropout P */
static int line_dropout(desc_state *s, const desc_line *dl, int in)
{
    args a;
    if (!get_args(s, dl, 1, NULL, 0, &a) || (a.from && !find_label(s, a.from, &in)))
        return -2;
    char *end;
    float p = a.npos == 1 ? strtof(a.pos[0], &end) : -1.0f;
    if (a.npos != 1 || *end)
        return fail(s, "dropout takes the probability an element is dropped (dropout 0.5)%s%s", "", ""), -2;
    return herd__build_dropout(s->b, in, p);
}

static const char *const act_names[] = {"relu", "tanh", "sigmoid", "gelu"};

/* The kinds with no argument: activations, batchnorm, flatten, gavgpool. */
static int line_plain(desc_state *s, const desc_line *dl, int in)
{
    args a;
    if (!get_args(s, dl, 0, NULL, 0, &a) || (a.from && !find_label(s, a.from, &in)))
        return -2;
    for (int k = 0; k < 4; k++)
        if (!strcmp(dl->kind, act_names[k])) {
            herd_layer *p = !a.from && s->prev_fusable ? s->b->m->layers[s->prev] : NULL;
            if (k == HERD__ACT_RELU && p) { /* fused into the layer before */
                p->relu = true;
                return s->prev;
            }
            return herd__build_act(s->b, in, (herd__act)k);
        }
    if (!strcmp(dl->kind, "batchnorm"))
        return herd__build_batchnorm(s->b, in, false);
    if (!strcmp(dl->kind, "flatten"))
        return herd__build_flatten(s->b, in);
    return herd__build_gavgpool(s->b, in);
}

static const char *const kinds[] = {"conv", "linear", "maxpool", "avgpool", "batchnorm", "relu", "tanh", "sigmoid",
                                    "gelu", "dropout", "add", "gavgpool", "flatten", NULL};

static int build_line(desc_state *s, const desc_line *dl, int in)
{
    const char *k = dl->kind;
    if (!strcmp(k, "conv"))
        return line_conv(s, dl, in);
    if (!strcmp(k, "linear"))
        return line_linear(s, dl, in);
    if (!strcmp(k, "maxpool") || !strcmp(k, "avgpool"))
        return line_pool(s, dl, in, k[0] == 'a');
    if (!strcmp(k, "add"))
        return line_add(s, dl, in);
    if (!strcmp(k, "dropout"))
        return line_dropout(s, dl, in);
    for (size_t i = 0; kinds[i]; i++)
        if (!strcmp(k, kinds[i]))
            return line_plain(s, dl, in);
    return fail(s, "unknown layer '%s' (conv, linear, maxpool, avgpool, batchnorm, relu, tanh, sigmoid, gelu, "
                   "dropout, add, gavgpool, flatten)%s", k, ""), -2;
}

static void record_label(desc_state *s, const desc_line *dl, int id)
{
    if (!dl->label || id < -1)
        return;
    for (size_t i = 0; i < s->nlabels; i++)
        if (!strcmp(s->names[i], dl->label))
            return (void)fail(s, "label '%s' is already used on an earlier line%s", dl->label, "");
    bool word = true;
    for (const char *c = dl->label; *c; c++)
        word &= isalnum((unsigned char)*c) || *c == '_' || *c == '-';
    if (!word || s->nlabels == MAX_LABELS || strlen(dl->label) >= sizeof s->names[0] || !strcmp(dl->label, "input"))
        return (void)fail(s, "label '%s': at most 256 labels of up to 31 letters, digits, _ or -, and not 'input'%s",
                          dl->label, "");
    snprintf(s->names[s->nlabels], sizeof s->names[0], "%s", dl->label);
    s->ids[s->nlabels++] = id;
}

/* One line of the description: its layer, then what the next line reads. */
static void one_line(desc_state *s, desc_line *dl)
{
    herd__builder *b = s->b;
    if (!split_line(s, dl) || b->st != HERD_OK)
        return;
    char shown[96] = "";
    for (size_t i = 0, n = 0; i < dl->ntok && n < sizeof shown; i++)
        n += (size_t)snprintf(shown + n, sizeof shown - n, " %s", dl->tok[i]);
    snprintf(b->where, sizeof b->where, "%s:%d (%s%s)", s->label, dl->line, dl->kind, shown);
    b->line = dl->line;
    size_t before = b->m->nlayers;
    int id = build_line(s, dl, s->prev);
    if (b->st != HERD_OK)
        return;
    record_label(s, dl, id);
    const herd_layer *l = id >= 0 ? b->m->layers[id] : NULL;
    bool made = b->m->nlayers > before;
    s->prev_fusable = made && l && !l->relu && !(dl->label && label_read_later(s, dl->line, dl->label)) &&
                      (l->ops == &herd__conv_ops || l->ops == &herd__linear_ops || l->ops == &herd__bn_ops ||
                       l->ops == &herd__add_ops || l->ops == &herd__pool_ops);
    s->prev = id;
}

void herd__desc_build(herd__builder *b, const char *label, const char *text)
{
    desc_state *s = calloc(1, sizeof *s);
    desc_line *dl = malloc(sizeof *dl);
    if (!s || !dl) {
        b->st = herd_err_set(b->err, HERD_ENOMEM, "out of memory reading model %s", label);
        goto out;
    }
    s->b = b, s->label = label, s->prev = -1, s->text = text;
    const char *p = text;
    for (int line = 1; *p && b->st == HERD_OK; line++) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        memset(dl, 0, sizeof *dl);
        dl->line = line;
        if (len >= MAX_LINE) {
            snprintf(b->where, sizeof b->where, "%s:%d", label, line);
            fail(s, "a line of more than %s characters%s", "511", "");
            break;
        }
        memcpy(dl->buf, p, len);
        one_line(s, dl);
        p = e ? e + 1 : p + len;
    }
    if (b->st != HERD_OK)
        goto out;
    snprintf(b->where, sizeof b->where, "%s", label);
    size_t n = b->m->nlayers;
    const herd_layer *last = n ? b->m->layers[n - 1] : NULL;
    if (!last || !last->flat || last->c != b->m->nclasses || last->relu || s->prev != (int)n - 1) {
        char got[64] = "no layer";
        if (last)
            snprintf(got, sizeof got, "%zux%zux%zu%s", last->c, last->h, last->w, last->flat ? " flat" : "");
        b->st = herd_err_set(b->err, HERD_EINVAL,
                             "%s: the last line must give the class scores, %zu flat values with no relu "
                             "(end with 'linear classes'); it gives %s", label, b->m->nclasses, got);
    }
out:
    free(s);
    free(dl);
}

herd_status herd_model_read_description(const char *path, char **text, char *name, size_t name_cap, herd_err *err)
{
    herd_status st = HERD__NONNULL(err, path, text);
    if (st < 0)
        return st;
    *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return herd_err_set(err, errno == ENOENT ? HERD_EINVAL : HERD_EIO,
                            "unknown model '%s' (choose one of: linear, mlp, lenet, cnn, resnet20, or a description "
                            "file; %s: %s)", path, path, strerror(errno));
    char *buf = malloc(MAX_DESC_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MAX_DESC_BYTES + 1, f) : 0;
    bool bad = buf && (ferror(f) || n > MAX_DESC_BYTES || memchr(buf, 0, n));
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return herd_err_set(err, buf ? HERD_EINVAL : HERD_ENOMEM,
                            "model description %s: %s", path, buf ? "not a text of at most 1 MiB" : "out of memory");
    }
    buf[n] = 0;
    if (name && name_cap)
        herd_model_name_for(path, name, name_cap);
    *text = buf;
    return HERD_OK;
}

void herd_model_name_for(const char *model, char *name, size_t cap)
{
    if (!cap)
        return;
    for (size_t i = 0; herd__model_texts[i].name; i++)
        if (!strcmp(herd__model_texts[i].name, model)) {
            snprintf(name, cap, "%s", model);
            return;
        }
    const char *base = strrchr(model, '/') ? strrchr(model, '/') + 1 : model;
    size_t len = strlen(base);
    if (len > 6 && !strcmp(base + len - 6, ".model"))
        len -= 6;
    if (len > HERD_MODEL_NAME_MAX)
        len = HERD_MODEL_NAME_MAX;
    snprintf(name, cap, "%.*s", (int)len, base);
}
