/* Data sets: IDX (MNIST / Fashion-MNIST), CIFAR-10 binary, synthetic; the
 * loader that shards and batches them.
 *
 * Files are read whole through zlib (which reads gzip and plain files alike)
 * with a size cap, and every header field is checked against the bytes that
 * were really read before anything is allocated from it.
 */
#include "herd/herd_data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>
#include <unistd.h>

#include "core/args.h"
#include "core/digest.h"
#include "core/inpath.h"
#include "data/data_parse.h"
#include "herd/herd_rng.h"

enum { MAX_FILE_BYTES = 1u << 30 }; /* after decompression */

/* A data set is made or read before any worker thread starts and only read
 * after, so ThreadSanitizer has nothing to find in the loops that make it;
 * instrumented, they cost a TSan build about 4 s of every run (Fashion-
 * MNIST's 47 million pixels through its shadow memory: 5.1 s a run of one
 * step, 1.2 s without TSan). The loader's copies, which worker threads do
 * run, stay instrumented. */
#if defined(__SANITIZE_THREAD__)
#define DATA_NO_TSAN __attribute__((no_sanitize("thread")))
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DATA_NO_TSAN __attribute__((no_sanitize("thread")))
#endif
#endif
#ifndef DATA_NO_TSAN
#define DATA_NO_TSAN
#endif

void herd_dataset_free(herd_dataset *d)
{
    free(d->x);
    free(d->y);
    free(d->mean);
    free(d->std);
    memset(d, 0, sizeof *d);
}

void herd_dataset_truncate(herd_dataset *d, size_t n)
{
    if (n && n < d->n)
        d->n = n;
}

herd_status herd__data_read_file(const char *path, unsigned char **out, size_t *len, herd_err *err)
{
    *out = NULL, *len = 0;
    struct stat sb;
    int fd;
    /* a FIFO is refused, not waited on (core/inpath.h) */
    herd_status ost = herd__inpath_open(path, &fd, &sb);
    if (ost == HERD_EINVAL)
        return herd_err_set(err, HERD_EIO, "%s: not a regular file", path);
    if (ost < 0)
        return herd_err_set(err, ost, "%s: %s", path, strerror(errno));
    gzFile f = gzdopen(fd, "rb");
    if (!f) {
        close(fd);
        return herd_err_set(err, HERD_EIO, "%s: cannot open: %s", path, strerror(errno));
    }
    size_t cap = 1u << 16, n = 0;
    unsigned char *buf = malloc(cap);
    herd_status st = HERD_OK;
    if (!buf) {
        st = herd_err_set(err, HERD_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    for (;;) {
        if (n == cap) {
            if (cap >= MAX_FILE_BYTES) {
                st = herd_err_set(err, HERD_ECORRUPT, "%s: larger than %u bytes once decompressed", path, MAX_FILE_BYTES);
                goto out;
            }
            unsigned char *nb = realloc(buf, cap * 2);
            if (!nb) {
                st = herd_err_set(err, HERD_ENOMEM, "%s: out of memory", path);
                goto out;
            }
            buf = nb, cap *= 2;
        }
        int r = gzread(f, buf + n, (unsigned)(cap - n));
        if (r < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            st = herd_err_set(err, HERD_ECORRUPT, "%s: corrupt compressed data: %s", path, msg);
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
out:
    {
        /* gzclose reports a gzip stream cut short (Z_BUF_ERROR) */
        int zc = gzclose(f);
        if (st == HERD_OK && zc != Z_OK)
            st = herd_err_set(err, HERD_ECORRUPT, "%s: truncated or corrupt gzip stream", path);
    }
    if (st < 0) {
        free(buf);
        return st;
    }
    *out = buf, *len = n;
    return HERD_OK;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

herd_status herd__data_load_pair(const char *images_path, const char *labels_path, herd__data_parse_pair parse,
                                 herd_dataset *out, herd_err *err)
{
    herd_status st = HERD_OK;
    unsigned char *img = NULL, *lab = NULL;
    size_t ni = 0, nl = 0;
    if (out) /* a failed call leaves nothing to free */
        memset(out, 0, sizeof *out);
    HERD_TRY(HERD__NONNULL(err, images_path, labels_path, out));
    HERD_TRY(herd__data_read_file(images_path, &img, &ni, err));
    HERD_TRY(herd__data_read_file(labels_path, &lab, &nl, err));
    st = parse(img, ni, lab, nl, images_path, labels_path, out, err);
out:
    free(img);
    free(lab);
    return st;
}

herd_status herd_data_load_idx(const char *images_path, const char *labels_path, herd_dataset *out,
                               herd_err *err)
{
    return herd__data_load_pair(images_path, labels_path, herd__data_parse_idx, out, err);
}

DATA_NO_TSAN herd_status herd__data_parse_idx(const unsigned char *img, size_t ni, const unsigned char *lab, size_t nl,
                                 const char *images_path, const char *labels_path, herd_dataset *out, herd_err *err)
{
    herd_status st = HERD_OK;
    memset(out, 0, sizeof *out);
    if (ni < 16 || be32(img) != 0x00000803u) {
        st = herd_err_set(err, HERD_ECORRUPT, "%s: not an IDX image file (%s)", images_path,
                          ni < 16 ? "shorter than its 16-byte header" : "wrong magic number");
        goto out;
    }
    if (nl < 8 || be32(lab) != 0x00000801u) {
        st = herd_err_set(err, HERD_ECORRUPT, "%s: not an IDX label file (%s)", labels_path,
                          nl < 8 ? "shorter than its 8-byte header" : "wrong magic number");
        goto out;
    }
    size_t n = be32(img + 4), h = be32(img + 8), w = be32(img + 12), nlab = be32(lab + 4);
    /* n * h <= ni cannot overflow (each factor < 2^32), and n * h is checked
     * against (ni - 16) / w before it is multiplied by w */
    if (h == 0 || w == 0 || n > ni || h > ni || w > ni || n * h > ni || n * h > (ni - 16) / w ||
        n * h * w != ni - 16) {
        st = herd_err_set(err, HERD_ECORRUPT,
                          "%s: header says %zu images of %zux%zu but the file holds %zu bytes of pixels",
                          images_path, n, h, w, ni - 16);
        goto out;
    }
    if (nlab != nl - 8) {
        st = herd_err_set(err, HERD_ECORRUPT, "%s: header says %zu labels but the file holds %zu", labels_path,
                          nlab, nl - 8);
        goto out;
    }
    if (nlab != n) {
        st = herd_err_set(err, HERD_ECORRUPT, "%s has %zu images but %s has %zu labels", images_path, n,
                          labels_path, nlab);
        goto out;
    }
    if (n == 0) {
        st = herd_err_set(err, HERD_ECORRUPT, "%s: holds no images", images_path);
        goto out;
    }
    out->x = malloc(n * h * w * sizeof(float));
    out->y = malloc(n * sizeof *out->y);
    if (!out->x || !out->y) {
        st = herd_err_set(err, HERD_ENOMEM, "%s: out of memory for %zu images", images_path, n);
        goto out;
    }
    size_t maxlab = 0;
    for (size_t i = 0; i < n; i++) {
        out->y[i] = lab[8 + i];
        if ((size_t)out->y[i] > maxlab)
            maxlab = (size_t)out->y[i];
    }
    for (size_t i = 0; i < n * h * w; i++)
        out->x[i] = (float)img[16 + i] / 255.0f;
    out->n = n, out->c = 1, out->h = h, out->w = w;
    out->nclasses = maxlab + 1 > 10 ? maxlab + 1 : 10;
out:
    if (st < 0)
        herd_dataset_free(out);
    return st;
}

enum { CIFAR_RECORD = 1 + 3 * 32 * 32 };

DATA_NO_TSAN herd_status herd__data_parse_cifar(const unsigned char *buf, size_t len, const char *path, herd_dataset *out,
                                   herd_err *err)
{
    if (len == 0 || len % CIFAR_RECORD != 0)
        return herd_err_set(err, HERD_ECORRUPT, "%s: %zu bytes is not a whole number of %d-byte CIFAR records", path,
                            len, CIFAR_RECORD);
    size_t n = len / CIFAR_RECORD, total = out->n;
    float *x = realloc(out->x, (total + n) * 3072 * sizeof(float));
    if (x)
        out->x = x;
    int32_t *y = realloc(out->y, (total + n) * sizeof *y);
    if (y)
        out->y = y;
    if (!x || !y)
        return herd_err_set(err, HERD_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n; i++) {
        const unsigned char *rec = buf + i * CIFAR_RECORD;
        if (rec[0] >= 10)
            return herd_err_set(err, HERD_ECORRUPT, "%s: record %zu has label %u (CIFAR-10 labels are 0..9)", path, i,
                                rec[0]);
        out->y[total + i] = rec[0];
        float *px = out->x + (total + i) * 3072;
        for (size_t k = 0; k < 3072; k++)
            px[k] = (float)rec[1 + k] / 255.0f;
    }
    out->n = total + n, out->c = 3, out->h = 32, out->w = 32, out->nclasses = 10;
    return HERD_OK;
}

herd_status herd_data_load_cifar(const char *const *paths, size_t npaths, herd_dataset *out, herd_err *err)
{
    herd_status st = HERD_OK;
    unsigned char *buf = NULL;
    if (!out)
        return HERD__NONNULL(err, out);
    memset(out, 0, sizeof *out);
    if (npaths && !paths)
        return HERD__NONNULL(err, paths);
    for (size_t f = 0; f < npaths; f++) {
        size_t len;
        if (!paths[f]) {
            st = herd_err_set(err, HERD_EINVAL, "herd_data_load_cifar: paths[%zu] is NULL", f);
            goto out;
        }
        HERD_TRY(herd__data_read_file(paths[f], &buf, &len, err));
        HERD_TRY(herd__data_parse_cifar(buf, len, paths[f], out, err));
        free(buf);
        buf = NULL;
    }
    if (out->n == 0) {
        st = herd_err_set(err, HERD_EINVAL, "no CIFAR files given");
        goto out;
    }
out:
    free(buf);
    if (st < 0)
        herd_dataset_free(out);
    return st;
}

/* Parses "CxHxW:K" or "D:K". */
static herd_status parse_spec(const char *spec, size_t *c, size_t *h, size_t *w, size_t *k, herd_err *err)
{
    unsigned long long v[4] = {0};
    int nd = 0;
    const char *p = spec;
    char *end;
    for (;;) {
        if (*p < '0' || *p > '9' || nd >= 3)
            goto bad;
        v[nd++] = strtoull(p, &end, 10);
        p = end;
        if (*p == 'x') {
            p++;
            continue;
        }
        if (*p == ':')
            break;
        goto bad;
    }
    p++;
    if (*p < '0' || *p > '9')
        goto bad;
    v[3] = strtoull(p, &end, 10);
    if (*end || (nd != 1 && nd != 3))
        goto bad;
    if (nd == 1)
        *c = 1, *h = 1, *w = (size_t)v[0];
    else
        *c = (size_t)v[0], *h = (size_t)v[1], *w = (size_t)v[2];
    *k = (size_t)v[3];
    if (!*c || !*h || !*w || *c > (1u << 20) || *h > (1u << 20) || *w > (1u << 20) ||
        (double)*c * (double)*h * (double)*w > (double)(1u << 28))
        return herd_err_set(err, HERD_EINVAL, "synthetic data '%s': each dimension must be at least 1 and an example at most 2^28 floats", spec);
    if (*k < 2 || *k > 256)
        return herd_err_set(err, HERD_EINVAL, "synthetic data '%s': the number of classes must be in [2, 256]", spec);
    return HERD_OK;
bad:
    return herd_err_set(err, HERD_EINVAL, "synthetic data '%s': expected CxHxW:K (e.g. 3x32x32:10) or D:K", spec);
}

herd_status herd_data_shape(const char *spec, bool *known, size_t *c, size_t *h, size_t *w, size_t *k, herd_err *err)
{
    herd_status st = HERD__NONNULL(err, known, c, h, w, k);
    if (st < 0)
        return st;
    *known = false;
    if (!spec || strncmp(spec, "synthetic:", 10))
        return HERD_OK;
    st = parse_spec(spec + 10, c, h, w, k, err);
    *known = st == HERD_OK;
    return st;
}

/* A synthetic set's bound, and herd_data_open's sizes: the whole set is
 * made, then cut to --train-limit, so that its standardization is the
 * whole set's whatever the limit. */
#define SYNTH_MAX_BYTES (8.0 * (1u << 30))
enum { SYNTH_TRAIN = 60000, SYNTH_TEST = 10000 };

static const char *spec_or_default(const char *spec);

herd_status herd_data_check(const char *spec, herd_err *err)
{
    size_t c, h, w, k;
    spec = spec_or_default(spec);
    if (strncmp(spec, "synthetic:", 10))
        return HERD_OK; /* files: their reader checks them as it reads */
    herd_status st = parse_spec(spec + 10, &c, &h, &w, &k, err);
    if (st < 0)
        return st;
    double bytes = (double)SYNTH_TRAIN * (double)(c * h * w) * sizeof(float);
    if (bytes > SYNTH_MAX_BYTES)
        return herd_err_set(err, HERD_EINVAL,
                            "synthetic data '%s': its %d training examples would take %.1f GiB, above the 8 GiB a "
                            "synthetic set may take (at most %.0f values an example; --train-limit cuts the set after "
                            "it is made, so that its standardization is the whole set's)",
                            spec + 10, SYNTH_TRAIN, bytes / (1u << 30), floor(SYNTH_MAX_BYTES / SYNTH_TRAIN / sizeof(float)));
    return HERD_OK;
}

DATA_NO_TSAN herd_status herd_data_synthetic(const char *spec, size_t n, uint64_t seed, herd_dataset *out, herd_err *err)
{
    herd_status st = HERD_OK;
    size_t c = 0, h = 0, w = 0, k = 0;
    if (!out)
        return HERD__NONNULL(err, out);
    memset(out, 0, sizeof *out);
    HERD_TRY(HERD__NONNULL(err, spec));
    HERD_TRY(parse_spec(spec, &c, &h, &w, &k, err));
    size_t dim = c * h * w;
    if (n == 0) {
        st = herd_err_set(err, HERD_EINVAL, "synthetic data '%s': asked for 0 examples", spec);
        goto out;
    }
    if ((double)n * (double)dim * sizeof(float) > SYNTH_MAX_BYTES) {
        st = herd_err_set(err, HERD_EINVAL, "synthetic data '%s': %zu examples would exceed 8 GiB (at most %.0f of "
                          "this shape)", spec, n, floor(SYNTH_MAX_BYTES / ((double)dim * sizeof(float))));
        goto out;
    }
    float *proto = malloc(k * dim * sizeof(float));
    out->x = malloc(n * dim * sizeof(float));
    out->y = malloc(n * sizeof *out->y);
    if (!proto || !out->x || !out->y) {
        free(proto);
        st = herd_err_set(err, HERD_ENOMEM, "synthetic data '%s': out of memory for %zu examples", spec, n);
        goto out;
    }
    /* The class prototypes depend on the shape only, so train and test sets
     * drawn with different seeds share them. Prototypes lie about 4.2 noise
     * standard deviations apart whatever the dimension: learnable to well
     * above chance, not trivially. */
    herd_rng r;
    herd_rng_seed(&r, 0x5eed, (uint64_t)dim * 257 + k);
    float spread = 3.0f / sqrtf((float)dim);
    for (size_t i = 0; i < k * dim; i++)
        proto[i] = spread * herd_rng_normal(&r);
    herd_rng_seed(&r, seed, 0x5a17);
    for (size_t i = 0; i < n; i++) {
        size_t label = (size_t)herd_rng_below(&r, k);
        out->y[i] = (int32_t)label;
        float *row = out->x + i * dim;
        const float *pr = proto + label * dim;
        for (size_t j = 0; j < dim; j++)
            row[j] = pr[j] + herd_rng_normal(&r);
    }
    free(proto);
    out->n = n, out->c = c, out->h = h, out->w = w, out->nclasses = k;
out:
    if (st < 0)
        herd_dataset_free(out);
    return st;
}

/* Standardizes both sets per channel with the train set's statistics,
 * kept on both (mean, std). */
DATA_NO_TSAN static herd_status standardize(herd_dataset *train, herd_dataset *test, herd_err *err)
{
    size_t hw = train->h * train->w, dim = herd_dataset_dim(train);
    herd_dataset *both[2] = {train, test};
    for (int k = 0; k < 2; k++) {
        both[k]->mean = malloc(train->c * sizeof(float));
        both[k]->std = malloc(train->c * sizeof(float));
        if (!both[k]->mean || !both[k]->std)
            return herd_err_set(err, HERD_ENOMEM, "out of memory");
    }
    for (size_t ch = 0; ch < train->c; ch++) {
        double s = 0, s2 = 0;
        for (size_t i = 0; i < train->n; i++) {
            const float *p = train->x + i * dim + ch * hw;
            for (size_t j = 0; j < hw; j++)
                s += p[j], s2 += (double)p[j] * p[j];
        }
        double cnt = (double)train->n * (double)hw, mean = s / cnt, var = s2 / cnt - mean * mean;
        float m = (float)mean, inv = var > 1e-12 ? (float)(1.0 / sqrt(var)) : 1.0f;
        for (int k = 0; k < 2; k++)
            both[k]->mean[ch] = m, both[k]->std[ch] = var > 1e-12 ? (float)sqrt(var) : 1.0f;
        herd_dataset *sets[2] = {train, test};
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < sets[k]->n; i++) {
                float *p = sets[k]->x + i * dim + ch * hw;
                for (size_t j = 0; j < hw; j++)
                    p[j] = (p[j] - m) * inv;
            }
    }
    return HERD_OK;
}

static bool exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* dir/name or dir/name.gz, whichever exists (plain first). */
static bool find_file(const char *dir, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", dir, name);
    if (exists(out))
        return true;
    snprintf(out, cap, "%s/%s.gz", dir, name);
    return exists(out);
}

/* The spec herd_data_open reads: spec, else $HERD_DATA, else the default. */
static const char *spec_or_default(const char *spec)
{
    if (!spec || !*spec)
        spec = getenv("HERD_DATA");
    return spec && *spec ? spec : "/usr/share/datasets/fashion-mnist";
}

void herd_data_resolve(const char *spec, char *out, size_t cap)
{
    if (!out || !cap)
        return;
    spec = spec_or_default(spec);
    char *abs = strncmp(spec, "synthetic:", 10) ? realpath(spec, NULL) : NULL;
    snprintf(out, cap, "%s", abs ? abs : spec);
    free(abs);
}

/* The set's digest (herd_dataset.digest): its shape, examples and labels. */
static uint64_t dataset_digest(const herd_dataset *d)
{
    uint64_t shape[5] = {d->n, d->c, d->h, d->w, d->nclasses};
    uint64_t h = herd__digest64(shape, sizeof shape, 0);
    h = herd__digest64(d->x, d->n * herd_dataset_dim(d) * sizeof(float), h);
    return herd__digest64(d->y, d->n * sizeof(int32_t), h);
}

/* The formats of their own files (npy.c, imagefolder.c): *found where dir
 * holds one of them. */
static herd_status open_files_of_own(const char *dir, herd_dataset *train, herd_dataset *test, bool *found,
                                     herd_err *err)
{
    herd_status st = herd__data_open_npy(dir, train, test, found, err);
    if (st == HERD_OK && !*found)
        st = herd__data_open_images(dir, train, test, found, err);
    return st;
}

herd_status herd_data_open(const char *spec, uint64_t seed, herd_dataset *train, herd_dataset *test, herd_err *err)
{
    herd_status st = HERD_OK;
    if (train) /* a failed call leaves nothing to free */
        memset(train, 0, sizeof *train);
    if (test)
        memset(test, 0, sizeof *test);
    if ((st = HERD__NONNULL(err, train, test)) < 0)
        return st;
    spec = spec_or_default(spec);
    if (!strncmp(spec, "synthetic:", 10)) {
        HERD_TRY(herd_data_check(spec, err));
        HERD_TRY(herd_data_synthetic(spec + 10, SYNTH_TRAIN, seed, train, err));
        HERD_TRY(herd_data_synthetic(spec + 10, SYNTH_TEST, seed ^ 0x7e57, test, err));
        goto done;
    }
    struct stat sb;
    if (stat(spec, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        st = herd_err_set(err, HERD_ENOTFOUND,
                          "data directory %s not found (expected Fashion-MNIST/MNIST IDX files such as "
                          "train-images-idx3-ubyte.gz, CIFAR-10 data_batch_*.bin, train_images.npy or train/ and test/ "
                          "folders of images per class; or use --data synthetic:CxHxW:K)",
                          spec);
        goto out;
    }
    char a[4096], b[4096], c[4096], d[4096];
    if (find_file(spec, "train-images-idx3-ubyte", a, sizeof a)) {
        if (!find_file(spec, "train-labels-idx1-ubyte", b, sizeof b) ||
            !find_file(spec, "t10k-images-idx3-ubyte", c, sizeof c) ||
            !find_file(spec, "t10k-labels-idx1-ubyte", d, sizeof d)) {
            st = herd_err_set(err, HERD_ENOTFOUND,
                              "%s: has train-images-idx3-ubyte but lacks train-labels-idx1-ubyte, "
                              "t10k-images-idx3-ubyte or t10k-labels-idx1-ubyte (plain or .gz)", spec);
            goto out;
        }
        HERD_TRY(herd_data_load_idx(a, b, train, err));
        HERD_TRY(herd_data_load_idx(c, d, test, err));
        if (train->h != test->h || train->w != test->w) {
            st = herd_err_set(err, HERD_ECORRUPT, "%s: training images are %zux%zu but test images %zux%zu", spec,
                              train->h, train->w, test->h, test->w);
            goto out;
        }
        goto done;
    }
    char batches[5][4096];
    const char *paths[5];
    size_t np = 0;
    for (int i = 1; i <= 5; i++) {
        snprintf(batches[np], sizeof batches[np], "%s/data_batch_%d.bin", spec, i);
        if (exists(batches[np]))
            paths[np] = batches[np], np++;
    }
    snprintf(c, sizeof c, "%s/test_batch.bin", spec);
    if (np && exists(c)) {
        const char *tp[1] = {c};
        HERD_TRY(herd_data_load_cifar(paths, np, train, err));
        HERD_TRY(herd_data_load_cifar(tp, 1, test, err));
        goto done;
    }
    bool found = false;
    HERD_TRY(open_files_of_own(spec, train, test, &found, err));
    if (found)
        goto done;
    st = herd_err_set(err, HERD_ENOTFOUND,
                      "%s: no data found (expected train-images-idx3-ubyte[.gz] and friends, CIFAR-10 "
                      "data_batch_N.bin and test_batch.bin, train_images.npy and friends, or train/ and test/ "
                      "folders of images per class)", spec);
    goto out;
done:
    if (train->nclasses < test->nclasses)
        train->nclasses = test->nclasses;
    test->nclasses = train->nclasses;
    train->digest = dataset_digest(train), test->digest = dataset_digest(test);
    st = standardize(train, test, err);
out:
    if (st < 0) {
        herd_dataset_free(train);
        herd_dataset_free(test);
    }
    return st;
}

herd_status herd_loader_init(herd_loader *l, const herd_dataset *d, size_t batch, size_t rank, size_t nworkers,
                             uint64_t seed, bool shuffle, herd_err *err)
{
    if (l) /* a failed call leaves nothing to free */
        memset(l, 0, sizeof *l);
    herd_status st = HERD__NONNULL(err, l, d);
    if (st < 0)
        return st;
    if (!batch || !nworkers || rank >= nworkers)
        return herd_err_set(err, HERD_EINVAL, "loader: batch %zu, rank %zu of %zu workers", batch, rank, nworkers);
    if (batch > SIZE_MAX / nworkers) /* herd_loader_steps divides by their product */
        return herd_err_set(err, HERD_EINVAL, "herd_loader_init: batch %zu x nworkers %zu is too large", batch,
                            nworkers);
    l->perm = malloc((d->n ? d->n : 1) * sizeof(size_t));
    if (!l->perm)
        return herd_err_set(err, HERD_ENOMEM, "loader: out of memory");
    l->d = d, l->batch = batch, l->rank = rank, l->nworkers = nworkers, l->seed = seed, l->shuffle = shuffle;
    herd_loader_start_epoch(l, 0);
    return HERD_OK;
}

void herd_loader_free(herd_loader *l)
{
    free(l->perm);
    l->perm = NULL;
}

size_t herd_loader_steps(const herd_loader *l) { return l->d->n / (l->batch * l->nworkers); }

void herd_loader_start_epoch(herd_loader *l, size_t epoch)
{
    for (size_t i = 0; i < l->d->n; i++)
        l->perm[i] = i;
    if (l->shuffle) {
        herd_rng r;
        herd_rng_seed(&r, l->seed, 0xe90c0000u + epoch);
        herd_rng_shuffle(&r, l->perm, l->d->n);
    }
    l->step = 0;
    l->epoch = epoch;
}

bool herd_loader_batch(const herd_loader *l, size_t index, float *x, int32_t *y)
{
    if (index >= herd_loader_steps(l) * l->nworkers)
        return false;
    size_t dim = herd_dataset_dim(l->d);
    const size_t *idx = l->perm + index * l->batch;
    for (size_t i = 0; i < l->batch; i++) {
        memcpy(x + i * dim, l->d->x + idx[i] * dim, dim * sizeof(float));
        y[i] = l->d->y[idx[i]];
    }
    return true;
}

bool herd_loader_next(herd_loader *l, float *x, int32_t *y)
{
    if (!herd_loader_batch(l, l->step * l->nworkers + l->rank, x, y))
        return false;
    l->step++;
    return true;
}

void herd_dataset_copy(const herd_dataset *d, size_t first, size_t count, float *x, int32_t *y)
{
    if (count == 0) /* x and y may be NULL then; memcpy must not see them */
        return;
    size_t dim = herd_dataset_dim(d);
    memcpy(x, d->x + first * dim, count * dim * sizeof(float));
    for (size_t i = 0; i < count; i++)
        y[i] = d->y[first + i];
}
