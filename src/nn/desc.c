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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/args.h"
#include "core/inpath.h"
#include "nn/model.h"

enum { MAX_TOKENS = 12, MAX_LAYER_LINES = 4096, MAX_DESC_BYTES = 1 << 20 };

/* One line that names a layer, split in place in the text's copy. */
typedef struct desc_line {
    int line;
    char *label, *kind;
    char *tok[MAX_TOKENS]; /* after the kind */
    size_t ntok;
    bool read_later;       /* a later line reads its label (from=, add) */
    int id;                /* the layer it made, once built */
} desc_line;

typedef struct desc_state {
    herd__builder *b;
    const char *label;    /* the file's name, or the built-in model's */
    desc_line *lines;
    size_t nlines;
    size_t at;            /* the line being built */
    int prev;             /* the layer the next line reads by default */
    bool prev_fusable;    /* prev may take a following relu */
} desc_state;

static bool fail(desc_state *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A message "WHERE: ..." (the builder's where: file:line (layer)); false. */
static bool fail(desc_state *s, const char *fmt, ...)
{
    if (s->b->st == HERD_OK) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        s->b->st = herd_err_set(s->b->err, HERD_EINVAL, "%s: %s", s->b->where, msg);
    }
    return false;
}

/* The value of KEY=VALUE token t for key, or NULL. */
static const char *value_of(const char *t, const char *key)
{
    size_t n = strlen(key);
    return !strncmp(t, key, n) && t[n] == '=' ? t + n + 1 : NULL;
}

/* Splits line p (its comment cut) into label, kind and tokens; false for a blank one. */
static bool split_line(desc_state *s, char *p, desc_line *dl)
{
    char *hash = strchr(p, '#'), *save = NULL;
    if (hash)
        *hash = 0;
    char *t = strtok_r(p, " \t\r", &save);
    if (!t)
        return false;
    size_t n = strlen(t);
    if (n > 1 && t[n - 1] == ':') {
        t[n - 1] = 0, dl->label = t;
        if (!(t = strtok_r(NULL, " \t\r", &save)))
            return fail(s, "label %s names no layer", dl->label), true;
    }
    dl->kind = t;
    while ((t = strtok_r(NULL, " \t\r", &save)))
        if (dl->ntok < MAX_TOKENS)
            dl->tok[dl->ntok++] = t;
        else
            return fail(s, "more than %d arguments after %s", MAX_TOKENS, dl->kind), true;
    return true;
}

/* Marks each labelled line that a later one reads: those a relu after
 * them cannot be fused into (the label names the output before it). */
static void mark_read(desc_state *s)
{
    for (size_t j = 0; j < s->nlines; j++) {
        const desc_line *r = &s->lines[j];
        bool add = !strcmp(r->kind, "add");
        for (size_t k = 0; k < r->ntok; k++) {
            const char *ref = value_of(r->tok[k], "from");
            if (!ref && add && !strchr(r->tok[k], '='))
                ref = r->tok[k];
            for (size_t i = j; ref && i-- > 0;)
                if (s->lines[i].label && !strcmp(s->lines[i].label, ref)) {
                    s->lines[i].read_later = true;
                    break;
                }
        }
    }
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

/* The layer the latest earlier line labelled `name` made ("input": -1);
 * false (message set) for none. */
static bool find_label(desc_state *s, const char *name, int *id)
{
    if (!strcmp(name, "input")) {
        *id = -1;
        return true;
    }
    for (size_t i = s->at; i-- > 0;)
        if (s->lines[i].label && !strcmp(s->lines[i].label, name)) {
            *id = s->lines[i].id;
            return true;
        }
    return fail(s, "no layer is labelled '%s' on an earlier line", name);
}

/* The layer's arguments: positional ones (at most npos), key=value ones
 * checked against keys ("k", "stride"...) into vals, from= into from. */
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
        const char *t = dl->tok[i];
        if (!strchr(t, '=')) {
            if (a->npos == npos)
                return fail(s, "%s takes no argument '%s' here", dl->kind, t);
            a->pos[a->npos++] = t;
            continue;
        }
        if (value_of(t, "from")) {
            a->from = value_of(t, "from");
            continue;
        }
        size_t k = 0;
        while (k < nkeys && !value_of(t, keys[k]))
            k++;
        if (k == nkeys)
            return fail(s, "%s has no option '%s'", dl->kind, t);
        a->vals[k] = value_of(t, keys[k]);
    }
    return true;
}

/* The arguments, and the layer from= names where it names one. */
static bool get_input(desc_state *s, const desc_line *dl, size_t npos, const char *const *keys, size_t nkeys, args *a,
                      int *in)
{
    return get_args(s, dl, npos, keys, nkeys, a) && (!a->from || find_label(s, a->from, in));
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
    size_t n = 0, k = 0, stride = 1, pad = 0;
    if (!get_input(s, dl, 1, keys, 4, &a, &in))
        return -2;
    if (a.npos != 1 || !a.vals[0])
        return fail(s, "conv takes its output channels and k= (conv 16 k=3)"), -2;
    if (!parse_size(s, "channels", a.pos[0], &n) || !parse_size(s, "k", a.vals[0], &k) ||
        !opt_size(s, &a, 1, "stride", 1, &stride) || !opt_size(s, &a, 2, "pad", 0, &pad))
        return -2;
    bool bias = !a.vals[3] || !strcmp(a.vals[3], "yes");
    if (a.vals[3] && !bias && strcmp(a.vals[3], "no"))
        return fail(s, "bias is yes or no, not '%s'", a.vals[3]), -2;
    if (!n)
        return fail(s, "a convolution has at least one output channel"), -2;
    return herd__build_conv(s->b, in, n, k, stride, pad, bias, false);
}

/* maxpool K [stride=S], avgpool K [stride=S]: stride K unless given */
static int line_pool(desc_state *s, const desc_line *dl, int in, bool avg)
{
    static const char *const keys[] = {"stride"};
    args a;
    size_t k = 0, stride = 0;
    if (!get_input(s, dl, 1, keys, 1, &a, &in))
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
    if (!get_input(s, dl, 1, NULL, 0, &a, &in))
        return -2;
    if (a.npos != 1)
        return fail(s, "linear takes its outputs, a number or 'classes' (linear 120)"), -2;
    if (strcmp(a.pos[0], "classes") && !parse_size(s, "outputs", a.pos[0], &n))
        return -2;
    if (!n)
        return fail(s, "a linear layer has at least one output"), -2;
    return herd__build_linear(s->b, in, n, false);
}

/* add A [B]: the line before plus A, or A plus B */
static int line_add(desc_state *s, const desc_line *dl, int in)
{
    args a;
    int x = in, y = -2;
    if (!get_args(s, dl, 2, NULL, 0, &a))
        return -2;
    if (a.npos == 0 || a.from)
        return fail(s, "add names the layer(s) it adds: add LABEL (to the line before) or add LABEL1 LABEL2"), -2;
    if (!find_label(s, a.pos[0], &y) || (a.npos == 2 && (x = y, !find_label(s, a.pos[1], &y))))
        return -2;
    return herd__build_add(s->b, x, y, false);
}

/* dropout P */
static int line_dropout(desc_state *s, const desc_line *dl, int in)
{
    args a;
    if (!get_input(s, dl, 1, NULL, 0, &a, &in))
        return -2;
    char *end = NULL;
    float p = a.npos == 1 ? strtof(a.pos[0], &end) : -1.0f;
    if (a.npos != 1 || *end)
        return fail(s, "dropout takes the probability an element is dropped (dropout 0.5)"), -2;
    return herd__build_dropout(s->b, in, p);
}

static const char *const act_names[] = {"relu", "tanh", "sigmoid", "gelu"};

/* The kinds with no argument: activations, batchnorm, flatten, gavgpool. */
static int line_plain(desc_state *s, const desc_line *dl, int in)
{
    args a;
    if (!get_input(s, dl, 0, NULL, 0, &a, &in))
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

static const char *const plain_kinds[] = {"batchnorm", "relu", "tanh", "sigmoid", "gelu", "gavgpool", "flatten", NULL};

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
    for (size_t i = 0; plain_kinds[i]; i++)
        if (!strcmp(k, plain_kinds[i]))
            return line_plain(s, dl, in);
    return fail(s, "unknown layer '%s' (conv, linear, maxpool, avgpool, batchnorm, relu, tanh, sigmoid, gelu, "
                   "dropout, add, gavgpool, flatten)", k), -2;
}

/* A label names one line: letters, digits, _ or -, up to 31, not "input", once. */
static bool check_label(desc_state *s, const desc_line *dl)
{
    const char *l = dl->label;
    bool word = strlen(l) < 32 && strcmp(l, "input");
    for (const char *c = l; *c; c++)
        word &= isalnum((unsigned char)*c) || *c == '_' || *c == '-';
    if (!word)
        return fail(s, "label '%s': up to 31 letters, digits, _ or -, and not 'input'", l);
    for (size_t i = 0; i < s->at; i++)
        if (s->lines[i].label && !strcmp(s->lines[i].label, l))
            return fail(s, "label '%s' is already used on line %d", l, s->lines[i].line);
    return true;
}

/* One line of the description: its layer, then what the next line reads. */
static void one_line(desc_state *s, desc_line *dl)
{
    herd__builder *b = s->b;
    char shown[96] = "";
    for (size_t i = 0, n = 0; i < dl->ntok && n < sizeof shown; i++)
        n += (size_t)snprintf(shown + n, sizeof shown - n, " %s", dl->tok[i]);
    snprintf(b->where, sizeof b->where, "%s:%d (%s%s)", s->label, dl->line, dl->kind, shown);
    b->line = dl->line;
    if (dl->label && !check_label(s, dl))
        return;
    size_t before = b->m->nlayers;
    int id = build_line(s, dl, s->prev);
    if (b->st != HERD_OK)
        return;
    dl->id = id;
    const herd_layer *l = id >= 0 ? b->m->layers[id] : NULL;
    bool made = b->m->nlayers > before;
    s->prev_fusable = made && l && !l->relu && !dl->read_later &&
                      (l->ops == &herd__conv_ops || l->ops == &herd__linear_ops || l->ops == &herd__bn_ops ||
                       l->ops == &herd__add_ops || l->ops == &herd__pool_ops);
    s->prev = id;
}

/* The text's lines that name a layer, split in place in buf; false (message set) where one does not split. */
static bool split_all(desc_state *s, char *buf)
{
    char *p = buf;
    for (int line = 1; p; line++) {
        char *e = strchr(p, '\n');
        if (e)
            *e = 0;
        desc_line dl = {.line = line};
        snprintf(s->b->where, sizeof s->b->where, "%s:%d", s->label, line);
        if (split_line(s, p, &dl)) {
            if (s->b->st != HERD_OK)
                return false;
            if (s->nlines == MAX_LAYER_LINES)
                return fail(s, "more than %d layers", MAX_LAYER_LINES);
            s->lines[s->nlines++] = dl;
        }
        p = e ? e + 1 : NULL;
    }
    return true;
}

/* The last line must give the class scores. */
static void check_end(desc_state *s)
{
    herd__builder *b = s->b;
    size_t n = b->m->nlayers;
    const herd_layer *last = n ? b->m->layers[n - 1] : NULL;
    snprintf(b->where, sizeof b->where, "%s", s->label);
    if (last && last->flat && last->c == b->m->nclasses && !last->relu && s->prev == (int)n - 1)
        return;
    char got[64] = "no layer";
    if (last)
        snprintf(got, sizeof got, "%zux%zux%zu%s", last->c, last->h, last->w, last->flat ? " flat" : "");
    fail(s, "the last line must give the class scores, %zu flat values with no relu (end with 'linear classes'); "
            "it gives %s", b->m->nclasses, got);
}

void herd__desc_build(herd__builder *b, const char *label, const char *text)
{
    desc_state s = {.b = b, .label = label, .prev = -1};
    char *buf = strdup(text);
    s.lines = malloc(MAX_LAYER_LINES * sizeof *s.lines);
    if (!buf || !s.lines) {
        b->st = herd_err_set(b->err, HERD_ENOMEM, "out of memory reading model %s", label);
        goto out;
    }
    if (!split_all(&s, buf))
        goto out;
    mark_read(&s);
    for (s.at = 0; s.at < s.nlines && b->st == HERD_OK; s.at++)
        one_line(&s, &s.lines[s.at]);
    if (b->st == HERD_OK)
        check_end(&s);
out:
    free(buf);
    free(s.lines);
}

herd_status herd_model_read_description(const char *path, char **text, char *name, size_t name_cap, herd_err *err)
{
    herd_status st = HERD__NONNULL(err, path, text);
    if (st < 0)
        return st;
    *text = NULL;
    /* a FIFO is refused, not waited on (core/inpath.h) */
    int fd;
    struct stat sb;
    herd_status ost = herd__inpath_open(path, &fd, &sb);
    if (ost == HERD_EINVAL)
        return herd_err_set(err, HERD_EINVAL, "model description %s: is %s, not a file", path,
                            herd__inpath_kind(sb.st_mode));
    FILE *f = ost == HERD_OK ? fdopen(fd, "rb") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return herd_err_set(err, e == ENOENT ? HERD_EINVAL : HERD_EIO,
                            "unknown model '%s' (choose one of: linear, mlp, lenet, cnn, resnet20, or a description "
                            "file; %s: %s)", path, path, strerror(e));
    }
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
