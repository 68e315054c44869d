/* model.h — a model's layers as build.c makes them and layers.c runs them
 * (internal to src/nn). desc.c: a description read into build.c's calls;
 * model.c: creating a model, the API, the activations' layouts; layers.c,
 * act.c, avgpool.c: each kind of layer's forward, backward and
 * initialization (a herd_layer_ops table each). */
#ifndef HERD_NN_MODEL_H
#define HERD_NN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd_nn.h"
#include "herd/herd_rng.h"
#include "nn/kernels.h"

typedef struct herd_layer herd_layer;

typedef struct herd_layer_ops {
    const char *name;
    void (*forward)(herd_layer *l, herd_model *m, size_t N, bool train);
    void (*backward)(herd_layer *l, herd_model *m, size_t N);
    void (*init)(herd_layer *l, herd_model *m, herd_rng *rng);
    void (*destroy)(herd_layer *l); /* frees what the layer's builder allocated (NULL: nothing) */
} herd_layer_ops;

struct herd_layer {
    const herd_layer_ops *ops;
    int in, in2;          /* layers read; -1 is the model input */
    size_t c, h, w;       /* output shape of one example */
    bool flat;            /* output rows (N, c*h*w) rather than CNHW */
    bool relu;            /* fused ReLU on the output */
    bool dout_masked;     /* its one reader applies the ReLU's mask to dout */
    bool blk;             /* output (and dout) blocked (N, C/B, H, W, B), not CNHW: the plan's */
    int nreaders;         /* layers that read this one's output */
    bool grad;            /* its dout is wanted: it or a layer before it has weights */
    size_t param_off, param_len;
    size_t buf_off, buf_len;
    double fwd_flops;     /* per example */
    double bwd_flops;     /* per example */
    int line;             /* the description's line that made it (0: none) */
    float *out, *dout;    /* max_batch * c*h*w each, owned */
};

/* oneDNN primitives for up to four batch sizes and thread counts (the
 * training batch and an epoch's or evaluation's last, shorter one; a
 * primitive keeps the thread count it was made for, and an adapting worker
 * runs at two), created on first use. */
enum { CONV_PRIMS = 4 };

typedef struct conv_layer {
    herd_layer base;
    size_t cin, hin, win, k, stride, pad;
    bool bias;
    herd__conv *prim[CONV_PRIMS];
    unsigned prim_next;  /* the slot replaced next when all are taken */
    size_t prim_failed;  /* a batch size oneDNN had no primitive for (0: none) */
} conv_layer;

typedef struct linear_layer {
    herd_layer base;
    size_t nin;
} linear_layer;

typedef struct pool_layer {
    herd_layer base;
    size_t hin, win, k, stride;
    uint32_t *idx;
} pool_layer;

typedef struct bn_layer {
    herd_layer base;
    float *save_mean, *save_invstd;
    double *work; /* the blocked kernels' sums (HERD__BN_BLK_WORK) */
} bn_layer;

struct herd_model {
    char name[32];
    char *desc;          /* the description the model was built from (desc.c), owned */
    size_t c, h, w, nclasses, max_batch;
    herd_layer **layers;
    size_t nlayers, cap;
    float *params, *grads, *buffers;
    size_t nparams, nbuffers;
    const float *input;  /* CNHW view of the current batch */
    float *input_copy;   /* used when C > 1 (NCHW -> CNHW) */
    float *scratch, *scratch2; /* one chunk's im2col and its gradient */
    herd__dnn *dnn;      /* oneDNN engine, stream and shared scratch; NULL until used */
    bool conv_im2col;    /* convolutions by im2col + sgemm, not oneDNN's primitives */
    bool layout_cnhw;    /* HERD_LAYOUT=cnhw: no blocked activations */
    bool blk_failed;     /* a convolution had no primitive for blocked tensors */
    int plan_key;        /* what the layers' blk flags were planned for (-1: nothing) */
    size_t blk_w;        /* B of the blocked activations (herd__blk_width), 0 when none */
    bool blk_nhwc;       /* ... or NHWC, a block of each one's C channels (bf16 on AMX) */
    size_t scratch_len;  /* floats in scratch */
    herd_precision precision;
    /* BF16 only: the weights rounded at the start of each forward, and two
     * operands of one product rounded (and packed) for it */
    uint16_t *params_bf16, *op_bf16[2];
    size_t op_cap;       /* elements in each op_bf16 */
    herd_rng init_rng;
};

static inline size_t out_dim(const herd_layer *l) { return l->c * l->h * l->w; }

/* The block width of layer l's output where it is blocked. */
static inline size_t blk_of(const herd_model *m, const herd_layer *l) { return m->blk_nhwc ? l->c : m->blk_w; }

static inline const float *in_out(const herd_model *m, int in) { return in < 0 ? m->input : m->layers[in]->out; }

/* The gradient buffer of input `in`, or NULL where no gradient is wanted:
 * the model input, and a layer with no weights at or before it (mlp's
 * flatten: its reader's input gradient would be a product thrown away). */
static inline bool in_grad(const herd_model *m, int in) { return in >= 0 && m->layers[in]->grad; }

static inline float *in_dout(const herd_model *m, int in) { return in_grad(m, in) ? m->layers[in]->dout : NULL; }

static inline bool in_accumulates(const herd_model *m, int in) { return in >= 0 && m->layers[in]->nreaders > 1; }

/* A convolution's im2col rows (one per weight of an output channel). */
static inline size_t conv_rows(const conv_layer *cv) { return cv->cin * cv->k * cv->k; }

/* The batch is convolved a few images at a time, so that a chunk's im2col
 * matrix (and its gradient) stays in the L2 cache between being written and
 * being read by the GEMM. The chunk size depends only on the shapes, so
 * results stay bit-reproducible. */
enum { CONV_CHUNK_BYTES = 256u << 10 };

static inline size_t conv_chunk(const conv_layer *cv, size_t N)
{
    size_t per_image = conv_rows(cv) * cv->base.h * cv->base.w * sizeof(float);
    size_t nb = CONV_CHUNK_BYTES / (per_image ? per_image : 1);
    return nb < 1 ? 1 : nb > N ? N : nb;
}

/* The layer kinds (layers.c; act.c: activations and dropout; avgpool.c). */
extern const herd_layer_ops herd__conv_ops, herd__linear_ops, herd__pool_ops, herd__bn_ops, herd__add_ops,
    herd__flatten_ops, herd__gavg_ops;
extern const herd_layer_ops herd__relu_ops, herd__tanh_ops, herd__sigmoid_ops, herd__gelu_ops, herd__dropout_ops,
    herd__avgpool_ops;

/* An activation on its own (one its input did not take fused). */
typedef enum herd__act { HERD__ACT_RELU, HERD__ACT_TANH, HERD__ACT_SIGMOID, HERD__ACT_GELU } herd__act;

typedef struct dropout_layer {
    herd_layer base;
    float p;          /* the probability an element is dropped */
    uint8_t *mask;    /* the last training forward's kept elements, max_batch * out_dim */
    herd_rng rng;     /* seeded by init from the model's stream */
} dropout_layer;

/* ---- building (build.c) ---------------------------------------------- */

/* The builder records an error instead of failing each call, so a model
 * reads as straight-line code; herd_model_create checks it once. Layer
 * ids: -1 the model input, -2 a failed step (which later steps pass on). */
typedef struct herd__builder {
    herd_model *m;
    herd_status st;
    herd_err *err;
    int line;        /* stamped on each layer made (desc.c: the line) */
    char where[160]; /* what a message names: "model lenet", "net.model:4 (conv 16 k=5)" */
} herd__builder;

void herd__build_shape(const herd__builder *b, int in, size_t *c, size_t *h, size_t *w, bool *flat);
int herd__build_conv(herd__builder *b, int in, size_t cout, size_t k, size_t stride, size_t pad, bool bias, bool relu);
int herd__build_flatten(herd__builder *b, int in);
int herd__build_linear(herd__builder *b, int in, size_t nout, bool relu);
int herd__build_maxpool(herd__builder *b, int in, size_t k, size_t stride);
int herd__build_avgpool(herd__builder *b, int in, size_t k, size_t stride);
int herd__build_batchnorm(herd__builder *b, int in, bool relu);
int herd__build_add(herd__builder *b, int x, int y, bool relu);
int herd__build_gavgpool(herd__builder *b, int in);
int herd__build_act(herd__builder *b, int in, herd__act act);
int herd__build_dropout(herd__builder *b, int in, float p);

/* The largest input herd_model_create builds for: an example's floats
 * (the data readers' limit too), the classes, the batch. */
#define HERD__MODEL_MAX_EXAMPLE ((size_t)1 << 28)
#define HERD__MODEL_MAX_CLASSES ((size_t)1 << 20)
#define HERD__MODEL_MAX_BATCH ((size_t)1 << 20)

/* herd_model_create's work: the model `text` describes (`label` names it
 * in messages), named `name`; with `build`, the layers that adds instead
 * (tests/model_code.c: the built-in models as code). */
herd_status herd__model_create_with(const char *name, const char *label, const char *text,
                                    void (*build)(herd__builder *b), size_t c, size_t h, size_t w, size_t nclasses,
                                    size_t max_batch, uint64_t seed, herd_model **out, herd_err *err);

/* ---- descriptions (desc.c) -------------------------------------------- */

/* The built-in models' descriptions, models/NAME.model as the build embeds
 * them (models_text.c, made by tools/embed-models), ending with {NULL, NULL}. */
typedef struct herd__model_text {
    const char *name, *text;
} herd__model_text;
extern const herd__model_text herd__model_texts[];

/* Builds the layers text describes into b->m (messages name `label` and
 * the line); the status is b->st. */
void herd__desc_build(herd__builder *b, const char *label, const char *text);

/* The convolution's oneDNN primitives for batch N (created on first use);
 * NULL where the model uses im2col or oneDNN cannot do the shape. */
herd__conv *herd__conv_prim(conv_layer *cv, herd_model *m, size_t N);

#endif
