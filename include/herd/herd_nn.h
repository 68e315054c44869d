/* herd_nn.h — models: layers, forward, loss, backward, on flat parameters.
 *
 * A model's weights live in ONE contiguous float array (herd_model_params) and
 * its gradients in another of the same length (herd_model_grads); each layer
 * owns a range [off, off+len) of both. Layers are laid out in forward order,
 * so backward produces gradient ranges from the end of the array towards its
 * start, and reports each range as soon as it is final (see herd_grad_ready_fn):
 * that is what lets a synchronization algorithm start communicating while
 * backward continues.
 *
 * Ownership: the model owns its parameters, gradients, activations and
 * scratch. Threading: a model is used by one thread at a time; workers each
 * own a model. Heavy compute goes through oneDNN (src/nn/kernels.c).
 */
#ifndef HERD_NN_H
#define HERD_NN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd_status.h"

typedef struct herd_model herd_model;

/* Called during backward when grads[off, off+len) are final for this step. */
typedef herd_status (*herd_grad_ready_fn)(void *ctx, size_t off, size_t len);

/* The built-in models' names ("linear", "mlp", "lenet", "cnn", "resnet20"),
 * NULL-terminated, for help texts. Each is the description models/NAME.model
 * of the source tree, built into the library. */
extern const char *const herd_model_names[];

/* Builds model `name` for inputs of shape (c, h, w) and `nclasses` outputs,
 * able to run batches of up to max_batch examples: a built-in model's name,
 * or else the path of a description file (docs/models-and-data.md; the
 * model is then named herd_model_name_for(name)). Parameters are initialised
 * from `seed` (He-uniform weights, zero biases, BN gamma 1 / beta 0).
 * HERD_EINVAL: a name neither built in nor a readable file, c, h, w or
 * max_batch 0, nclasses below 2, an example of more than 2^28 floats, more
 * than 2^20 classes or a max_batch above 2^20, a description that does not read or a
 * shape the model cannot take (the message names the line, the layer and
 * the shapes). */
herd_status herd_model_create(const char *name, size_t c, size_t h, size_t w, size_t nclasses,
                              size_t max_batch, uint64_t seed, herd_model **out, herd_err *err);
/* The same from a description's text, the model named `name`. */
herd_status herd_model_create_from_description(const char *name, const char *text, size_t c, size_t h, size_t w,
                                               size_t nclasses, size_t max_batch, uint64_t seed, herd_model **out,
                                               herd_err *err);
/* The description file at path, read whole into *text (the caller frees
 * it), and the name herd_model_create gives its model into name (name_cap
 * bytes; name may be NULL). HERD_EINVAL: no such file, or not a text of at
 * most 1 MiB; HERD_EIO: it does not read. */
herd_status herd_model_read_description(const char *path, char **text, char *name, size_t name_cap, herd_err *err);
/* The name herd_model_create gives the model `model` names: a built-in
 * one's own, else the file's name less its directory and a ".model"
 * ending, cut to HERD_MODEL_NAME_MAX characters (what a checkpoint's
 * header holds), into name (cap bytes). */
enum { HERD_MODEL_NAME_MAX = 19 };
void herd_model_name_for(const char *model, char *name, size_t cap);
/* The description the model was built from (the model owns it). */
const char *herd_model_description(const herd_model *m);

/* One layer of a model, as herd_model_layers lists them in forward order:
 * what a summary prints. A relu fused into the layer before adds "+relu"
 * to that layer's kind. */
typedef struct herd_layer_info {
    char kind[24];            /* "conv", "linear+relu", "batchnorm", "add", "dropout"... */
    int line;                 /* the description's line (0: none) */
    size_t c, h, w;           /* one example's output */
    bool flat;                /* the output is c values in a row (h = w = 1) */
    size_t nparams;           /* trainable parameters */
    double flops;             /* forward floating-point operations per example */
} herd_layer_info;
/* Fills at most cap layers into out (may be NULL for cap 0); returns how many there are. */
size_t herd_model_layers(const herd_model *m, herd_layer_info *out, size_t cap);
void herd_model_free(herd_model *m);

/* Convolutions run as oneDNN's direct convolution primitives (created per
 * layer and batch size on first use, kept with the model) unless im2col is
 * set: then as im2col + sgemm, the fallback also taken for a shape oneDNN
 * cannot do. Both give the same results within float rounding. The
 * environment variable HERD_CONV=im2col sets it for every model created. */
void herd_model_set_conv_im2col(herd_model *m, bool im2col);
bool herd_model_conv_im2col(const herd_model *m);

/* With oneDNN's convolutions in fp32 on an AVX-512 or AVX2 machine,
 * activations between convolutions, batch norms, poolings and residual adds
 * stay in the blocked layout the primitives compute in (16 channels per
 * pixel side by side with AVX-512, 8 with AVX2), so
 * no layout change runs between those layers; the rest are CNHW. Off
 * (blocked false, or HERD_LAYOUT=cnhw in the environment when the model is
 * created), every activation is CNHW: the same results within float
 * rounding. herd_model_blocked_layers: how many layers' outputs the last
 * forward kept blocked. */
void herd_model_set_blocked(herd_model *m, bool blocked);
size_t herd_model_blocked_layers(const herd_model *m);

/* The arithmetic of the heavy ops (matrix products and convolutions,
 * forward and backward). FP32: fp32 throughout, herd's fast path. BF16:
 * each product's operands (activations, weights, output gradients) are
 * rounded to bfloat16 and the products accumulate in fp32; what a layer
 * writes (its output, its input's gradient, its weights' gradient) is fp32,
 * as are everything else (batch norm, pooling, the loss) and the flat
 * parameters and gradients themselves: the master weights stay fp32 and the
 * optimizer steps them in fp32. The weights are rounded once per forward
 * (backward reuses that copy), a layer's inputs each time it reads them.
 * bf16 keeps fp32's exponent, so gradients need no loss scaling. */
typedef enum herd_precision {
    HERD_PRECISION_FP32,
    HERD_PRECISION_BF16,
} herd_precision;

/* "fp32", "bf16" (the enum's order), NULL. */
extern const char *const herd_precision_names[];
/* "fp32" or "bf16"; HERD_EINVAL for anything else, s or out NULL. */
herd_status herd_precision_parse(const char *s, herd_precision *out);
const char *herd_precision_name(herd_precision p);

/* Whether this CPU runs oneDNN's bf16 kernels: not at all below AVX-512
 * (avx512_core), emulated on avx512_core (the bf16 products are widened to
 * fp32 in registers: correct, slower than fp32), natively with
 * avx512_bf16 or AMX. oneDNN's DNNL_MAX_CPU_ISA limits what it reports. */
typedef enum herd_bf16_support {
    HERD_BF16_NONE,
    HERD_BF16_EMULATED,
    HERD_BF16_NATIVE,
} herd_bf16_support;
herd_bf16_support herd_nn_bf16_support(void);

/* Sets the model's precision (models are created FP32); m NULL or p not a
 * herd_precision: HERD_EINVAL. HERD_EUNSUPPORTED
 * when BF16 is asked and herd_nn_bf16_support() is HERD_BF16_NONE;
 * HERD_ENOMEM when its bf16 copies cannot be had. Either way the model is
 * left as it was. */
herd_status herd_model_set_precision(herd_model *m, herd_precision p);
herd_precision herd_model_precision(const herd_model *m);

/* What a parameter tensor is, for optimizers that treat them apart (LARS
 * and LAMB leave biases and batch-norm parameters out of their layer-wise
 * adaptation and weight decay). */
typedef enum herd_param_kind {
    HERD_PARAM_WEIGHT, /* a convolution's or fully connected layer's weight matrix */
    HERD_PARAM_BIAS,   /* a layer's bias vector */
    HERD_PARAM_BN,     /* a batch-norm scale (gamma) or shift (beta) */
} herd_param_kind;

/* One parameter tensor: params[off, off+len) of the flat array. */
typedef struct herd_param_group {
    size_t off, len;
    herd_param_kind kind;
} herd_param_group;

/* The model's parameter tensors in the order of the flat array (they tile
 * [0, nparams) without a gap): fills at most cap of them into out (out may
 * be NULL when cap is 0) and returns how many there are. */
size_t herd_model_param_groups(const herd_model *m, herd_param_group *out, size_t cap);

size_t herd_model_nparams(const herd_model *m);
float *herd_model_params(herd_model *m);
float *herd_model_grads(herd_model *m);
/* Non-trainable state (batch-norm running statistics); may be empty. */
size_t herd_model_nbuffers(const herd_model *m);
float *herd_model_buffers(herd_model *m);
const char *herd_model_name(const herd_model *m);
/* Floating-point operations of one training step (forward + backward) per example. */
double herd_model_train_flops(const herd_model *m);
/* Floating-point operations of one forward pass (evaluation) per example. */
double herd_model_forward_flops(const herd_model *m);
/* Backward floating-point operations per example done when backward reports
 * grads[param_off, ...) ready: those of the last layer down to the one whose
 * parameters start at param_off, that one included (all of backward if no
 * layer's do). */
double herd_model_backward_flops_done(const herd_model *m, size_t param_off);

/* One named tensor of a model: a slice of its flat parameters, or of its
 * non-trainable buffers, in C (row-major) order. Names and shapes follow
 * PyTorch's conventions, so a model rebuilt there takes them as they are:
 * layers are numbered by kind in forward order (conv1, conv2..., fc1...,
 * bn1...); a convolution's weight is (out, in, kh, kw), a fully connected
 * layer's (out, in) with `in` the NCHW-flattened input; a batch norm's
 * weight and bias are its gamma and beta, its running_mean and running_var
 * buffers (kept as PyTorch keeps them: momentum 0.1, the unbiased batch
 * variance; evaluation divides by sqrt(running_var + 1e-5)). */
typedef struct herd_tensor {
    char name[32];     /* "conv1.weight", "fc2.bias", "bn3.running_var"... */
    bool buffer;       /* in herd_model_buffers, not herd_model_params */
    size_t off, len;   /* floats into that array; len = the shape's product */
    size_t ndim, shape[4];
} herd_tensor;

/* The model's named tensors, layer by layer in forward order, each layer's
 * parameters (weight, bias) then its buffers; together they cover the
 * parameters and the buffers exactly once. Writes the first cap of them
 * into out (out may be NULL when cap is 0) and returns how many there are. */
size_t herd_model_tensors(const herd_model *m, herd_tensor *out, size_t cap);

/* The shape of one example the model takes (c, h, w) and its classes. */
void herd_model_shape(const herd_model *m, size_t *c, size_t *h, size_t *w, size_t *nclasses);

/* Forward pass on x (batch examples, NCHW floats). train selects batch-norm
 * behaviour (batch statistics and running-average update vs running stats). */
void herd_model_forward(herd_model *m, const float *x, size_t batch, bool train);
/* Mean softmax cross-entropy of the last forward's logits against labels y;
 * counts correct top-1 predictions into *ncorrect (may be NULL). Also stores
 * d(loss)/d(logits) for backward. */
float herd_model_loss(herd_model *m, const int32_t *y, size_t batch, size_t *ncorrect);
/* The last forward's logits: batch x nclasses, row-major. */
const float *herd_model_logits(const herd_model *m);
/* Backward pass of the last forward + loss. Overwrites the gradients and calls
 * ready(ctx, off, len) per parameterised layer, last layer first (ready may be
 * NULL). Stops and returns the first error ready returns. HERD_EINVAL
 * (nothing done): m NULL, batch 0 or above the model's max_batch. */
herd_status herd_model_backward(herd_model *m, size_t batch, herd_grad_ready_fn ready, void *ctx);

/* One training-mode forward and backward pass on a batch of zeros (the
 * largest batch), with the gradients and batch-norm running statistics put
 * back as they were: the kernels are compiled (oneDNN's JIT) and every
 * activation buffer touched before a timed run starts. HERD_ENOMEM if the
 * zeros cannot be had; HERD_EINVAL for m NULL. */
herd_status herd_model_warm_up(herd_model *m);

/* Evaluates on n examples in chunks of max_batch: mean loss and accuracy. */
void herd_model_evaluate(herd_model *m, const float *x, const int32_t *y, size_t n, size_t dim,
                         double *loss, double *acc);

/* Intra-op threads for the calling thread's heavy kernels (oneDNN/OpenMP)
 * and its element-wise loops (layers, optimizer): results are the same bits
 * at any number, except where oneDNN's own kernels split a sum (tests/
 * test_threads.c says which). herd_nn_threads: the number now set. */
void herd_nn_set_threads(int nthreads);
int herd_nn_threads(void);

/* OpenMP's idle threads (libgomp's) spin for milliseconds (300000 spins)
 * before they sleep: with a busy process beside them on the cores, a
 * 2-thread step became 3-47x slower than one thread. libgomp reads its
 * wait policy only when it loads, so a program calls this first thing in
 * main(), before it starts a thread or opens a file: where neither
 * OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, it re-executes the program
 * (same arguments, same pid) with GOMP_SPINCOUNT set, then sleep: the
 * longer HERD_NN_SPINCOUNT_IDLE where no other task was running on the
 * machine as it started (herd_nn_spincount_for), else HERD_NN_SPINCOUNT.
 * It returns where either variable was set (a user's choice, or this
 * call's own, in the new image) or the exec failed (the run goes on with
 * libgomp's default). Not for a program whose main() runs more than once
 * per process (SimGrid's ranks, a fuzzer). */
#define HERD_NN_SPINCOUNT "1000"
#define HERD_NN_SPINCOUNT_IDLE "10000"
void herd_nn_wait_policy(char **argv);

/* The spin count for a process that found, in each of its reads of
 * /proc/loadavg (lines such as "0.50 0.40 0.30 2/345 6789"), the running
 * count there; `nlines` reads, its own task counted in each. The idle
 * figure where some read showed this task alone running, else the short
 * one (also for a line it cannot read). */
const char *herd_nn_spincount_for(const char *const *lines, size_t nlines);

/* Adaptive compute threads (herd train / herd bench train --adapt-threads).
 * A team of N threads splits each layer's work statically, so beside a busy
 * process the thread that shares its core holds every layer back: 2
 * threads ran at 0.56-0.93x one there, 1.6-1.9x one on an idle machine. A
 * worker that adapts times its steps; now and then (once its first K steps are timed, then
 * at intervals from 1 s, doubling up to 32 s while the choice holds) it runs a few steps
 * at the other count (1 if it runs N, N if it runs 1), the first of them
 * untimed, and keeps whichever count's median step was shorter by more
 * than 7%; a probe step 1.5x the running median ends the probe at once. Results then depend on timing (oneDNN splits some sums by the
 * thread count), so a run that must repeat bit for bit does not adapt. */
enum { HERD_NN_ADAPT_K = 5 };
typedef struct herd_nn_adapt {
    int max, cur, saved;  /* the threads asked for, in use now, before a probe */
    int probe_left;       /* steps left in a probe (0: not probing) */
    double next, interval; /* when the next probe starts (seconds, the caller's clock); the gap */
    double run[HERD_NN_ADAPT_K], probe[HERD_NN_ADAPT_K];
    size_t run_n, probe_n;
    size_t steps, steps_full, switches;
} herd_nn_adapt;

/* Starts at `threads` (and sets it); `now` on the clock later calls give. */
void herd_nn_adapt_init(herd_nn_adapt *a, int threads, double now);
/* After each step: its compute seconds and the time. May change the
 * calling thread's count (herd_nn_set_threads). */
void herd_nn_adapt_step(herd_nn_adapt *a, double step_s, double now);

/* One single-precision GEMM through the fast path, for benchmarks:
 * C(MxN) = A(MxK) B(KxN), row-major. */
void herd_nn_sgemm(size_t M, size_t N, size_t K, const float *A, const float *B, float *C);

#endif
