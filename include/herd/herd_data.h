/* herd_data.h — data sets: IDX (MNIST / Fashion-MNIST), CIFAR-10 binary,
 * NumPy .npy, folders of PNG/JPEG images, synthetic; and the loader that
 * shards and batches them.
 *
 * Ownership: a herd_dataset owns its x and y arrays (free with
 * herd_dataset_free). A herd_loader borrows its dataset, which must outlive it,
 * and owns its permutation. Datasets are read-only after loading, so any
 * number of workers (threads) may share one; each worker owns its loader.
 *
 * Parsers check every header field and length against the file's real size
 * before allocating; a bad file is reported with HERD_ECORRUPT (or HERD_EIO /
 * HERD_ENOTFOUND) and a message naming the file and the problem. Every
 * herd_dataset and herd_loader to fill is cleared first, also when a call
 * fails (nothing to free), and every pointer argument is required but
 * where said otherwise (HERD_EINVAL naming it).
 */
#ifndef HERD_DATA_H
#define HERD_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd_status.h"

typedef struct herd_dataset {
    size_t n;        /* number of examples */
    size_t c, h, w;  /* shape of one example, NCHW */
    size_t nclasses; /* labels are in [0, nclasses) */
    float *x;        /* n * c*h*w floats, example-major (NCHW) */
    int32_t *y;      /* n labels, the type every label has in herd's API (the loader's batches, the model's loss) */
    uint64_t digest; /* herd_data_open's: of the examples and labels as read, before standardizing and any
                      * truncation (0: not computed); a checkpoint records its run's to tell data apart */
    /* herd_data_open's standardization, per channel (c values each; NULL:
     * none): every example it returns is (raw - mean) / std, raw being what
     * the reader gives (IDX and CIFAR: pixels / 255). The training set's
     * statistics, on both sets; a model exported from a run needs them
     * (its safetensors metadata carries them). Freed by herd_dataset_free. */
    float *mean, *std;
} herd_dataset;

static inline size_t herd_dataset_dim(const herd_dataset *d) { return d->c * d->h * d->w; }

void herd_dataset_free(herd_dataset *d);

/* Reads an IDX image file (idx3, ubyte) and its label file (idx1, ubyte), each
 * gzip-compressed or plain (detected from the magic bytes, not the name).
 * Pixels become floats in [0, 1]; nclasses = 1 + the largest label (at least 10). */
herd_status herd_data_load_idx(const char *images_path, const char *labels_path,
                               herd_dataset *out, herd_err *err);

/* Reads CIFAR-10 binary-format files (records of 1 label byte + 3072 pixel
 * bytes, 3x32x32 channel-major) and concatenates them. Pixels in [0, 1].
 * HERD_EINVAL: no file (npaths 0), or paths[i] NULL. */
herd_status herd_data_load_cifar(const char *const *paths, size_t npaths,
                                 herd_dataset *out, herd_err *err);

/* Reads a NumPy .npy image array and its label array (format 1.0, 2.0 or
 * 3.0; plain or gzip-compressed). Images: N x C x H x W, or N x H x W x C
 * where the last dimension is at most 4 and smaller than the second (then
 * reordered to NCHW), or N x H x W (one channel), or N x D; uint8 (pixels
 * become floats in [0, 1]) or float32 (taken as they are, and refused
 * where one is not finite). Labels: N or N x 1 integers (int64, int32,
 * uint8... of either byte order) in [0, 65535]; nclasses = 1 + the largest
 * label, at least 2. Fortran-ordered and other dtypes: HERD_EUNSUPPORTED. */
herd_status herd_data_load_npy(const char *images_path, const char *labels_path, herd_dataset *out,
                               herd_err *err);

/* Synthetic classification data of any shape. spec is "CxHxW:K" (e.g.
 * "3x32x32:10") or "D:K" for flat vectors (another form, a dimension of 0,
 * an example of more than 2^28 floats, K outside [2, 256], n 0 or more
 * than 8 GiB of examples: HERD_EINVAL). Labels are learnable: each class
 * has a random prototype and examples are prototype + noise. Deterministic
 * in (spec, n, seed). */
herd_status herd_data_synthetic(const char *spec, size_t n, uint64_t seed,
                                herd_dataset *out, herd_err *err);

/* What herd_data_open would refuse of spec without reading anything (NULL:
 * the default): a synthetic set's form and its size (60000 training
 * examples of at most 8 GiB in all). HERD_EINVAL with the limit. */
herd_status herd_data_check(const char *spec, herd_err *err);

/* The shape of the examples of spec (as herd_data_open takes it) where it
 * can be told without reading or making any data (synthetic:CxHxW:K): then
 * *known, with channels, height, width and classes; a directory's shape is
 * known once read (*known false, HERD_OK; so for spec NULL). A malformed synthetic spec is
 * refused (HERD_EINVAL). */
herd_status herd_data_shape(const char *spec, bool *known, size_t *c, size_t *h, size_t *w, size_t *k, herd_err *err);

/* Opens train and test sets from a user-facing spec:
 *   NULL or ""           -> $HERD_DATA if set, else /usr/share/datasets/fashion-mnist
 *   "synthetic:CxHxW:K"  -> 60000 train / 10000 test synthetic examples
 *   a directory          -> Fashion-MNIST/MNIST IDX files (train-images-idx3-ubyte[.gz], ...)
 *                           or CIFAR-10 binaries (data_batch_1..5.bin, test_batch.bin)
 *                           or NumPy arrays (train_images.npy, train_labels.npy,
 *                           test_images.npy, test_labels.npy: herd_data_load_npy)
 *                           or folders of PNG/JPEG images per class under train/ and
 *                           test/ (docs/models-and-data.md)
 * Then standardizes both sets per channel with the TRAIN set's mean and std
 * (x = (x - mean) / std). seed only matters for synthetic data. spec may be
 * NULL; train and test may not. */
herd_status herd_data_open(const char *spec, uint64_t seed, herd_dataset *train,
                           herd_dataset *test, herd_err *err);

/* The data set spec names, as herd_data_open reads it, into out (cap
 * bytes): "synthetic:..." as given; a directory (spec, else $HERD_DATA,
 * else herd's default) as an absolute path with links resolved, or as
 * given where it does not resolve. What a checkpoint records beside the
 * data's digests. */
void herd_data_resolve(const char *spec, char *out, size_t cap);

/* Keeps only the first n examples (no-op if n >= d->n or n == 0). */
void herd_dataset_truncate(herd_dataset *d, size_t n);

/* The loader: one worker's view of an epoch.
 * Every epoch, a permutation of [0, d->n) is drawn from (seed, epoch) — the
 * same on every worker — and global step s uses the examples
 * perm[s*B*nworkers .. (s+1)*B*nworkers), of which worker `rank` takes the
 * slice [rank*B, (rank+1)*B). So n workers with batch B see exactly the
 * examples one worker with batch n*B sees. An incomplete last global batch is
 * dropped. With shuffle == false the permutation is the identity. */
typedef struct herd_loader {
    const herd_dataset *d;
    size_t batch, rank, nworkers;
    uint64_t seed;
    bool shuffle;
    size_t *perm; /* owned */
    size_t step;  /* next step within the epoch */
    size_t epoch; /* current epoch */
} herd_loader;

/* HERD_EINVAL: batch or nworkers 0, rank >= nworkers, batch x nworkers
 * overflowing a size_t. */
herd_status herd_loader_init(herd_loader *l, const herd_dataset *d, size_t batch,
                             size_t rank, size_t nworkers, uint64_t seed, bool shuffle,
                             herd_err *err);
void herd_loader_free(herd_loader *l);
/* Steps per epoch: floor(d->n / (batch * nworkers)). */
size_t herd_loader_steps(const herd_loader *l);
/* Starts epoch `epoch` (draws its permutation, step = 0). */
void herd_loader_start_epoch(herd_loader *l, size_t epoch);
/* Copies this worker's next batch: x gets batch*dim floats, y batch labels.
 * Returns false (copying nothing) when the epoch is over. */
bool herd_loader_next(herd_loader *l, float *x, int32_t *y);
/* Copies global batch `index` of the current epoch, the examples
 * perm[index*B .. (index+1)*B), whichever worker asks: the batches
 * asynchronous workers claim from a shared counter. Global step s of worker
 * r is index s*nworkers + r. Returns false when index >= herd_loader_steps *
 * nworkers. */
bool herd_loader_batch(const herd_loader *l, size_t index, float *x, int32_t *y);

/* Evaluation batches: copies examples [first, first+count) in order. */
void herd_dataset_copy(const herd_dataset *d, size_t first, size_t count, float *x, int32_t *y);

#endif
