/* NumPy .npy files: a small parser of the format's header (versions 1.0,
 * 2.0 and 3.0: magic, version, header length, then a Python dict literal
 * with 'descr', 'fortran_order' and 'shape'), and the reader of an image
 * array and its label array into a herd_dataset.
 *
 * Only what np.save writes for a C-ordered array of one plain number type
 * is taken; anything else (a structured dtype, Fortran order, an object
 * array, a pickle) is refused with a message naming the file. The array's
 * bytes must be exactly shape x itemsize, checked before any allocation.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/args.h"
#include "data/data_parse.h"

enum { NPY_MAX_DIMS = 8, NPY_MAX_CLASSES = 65536 };

/* One parsed .npy array: its type, shape and bytes (pointing into the file). */
typedef struct npy_array {
    char kind;       /* 'u', 'i' or 'f' */
    size_t itemsize; /* bytes of one element */
    bool big;        /* big-endian elements */
    bool fortran;
    size_t ndim, shape[NPY_MAX_DIMS];
    const unsigned char *data;
    size_t count; /* product of shape */
} npy_array;

/* The header's dict literal, read left to right. */
typedef struct npy_cursor {
    const char *p, *end;
} npy_cursor;

static void skip_space(npy_cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static bool take(npy_cursor *c, char ch)
{
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}

/* A quoted string without escapes, into out (cap bytes). */
static bool take_string(npy_cursor *c, char *out, size_t cap)
{
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return false;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= cap)
            return false;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return false;
    c->p++;
    out[n] = '\0';
    return true;
}

static bool take_word(npy_cursor *c, const char *word)
{
    skip_space(c);
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n))
        return false;
    c->p += n;
    return true;
}

/* A tuple of non-negative integers: (), (5,), (5, 3) or (5, 3,). */
static bool take_shape(npy_cursor *c, npy_array *a)
{
    if (!take(c, '('))
        return false;
    a->ndim = 0;
    for (;;) {
        if (take(c, ')'))
            return true;
        if (a->ndim == NPY_MAX_DIMS || c->p >= c->end || *c->p < '0' || *c->p > '9')
            return false;
        size_t v = 0;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (SIZE_MAX - 9) / 10)
                return false;
            v = v * 10 + (size_t)(*c->p++ - '0');
        }
        if (c->p < c->end && *c->p == 'L') /* Python 2's long suffix */
            c->p++;
        a->shape[a->ndim++] = v;
        if (!take(c, ','))
            return take(c, ')');
    }
}

/* 'descr': '<f4', '|u1', '>i8'... a byte order and one plain number type. */
static bool parse_descr(const char *s, npy_array *a)
{
    char order = s[0];
    if (order != '<' && order != '>' && order != '|' && order != '=')
        return false;
    a->kind = s[1];
    if (a->kind != 'u' && a->kind != 'i' && a->kind != 'f')
        return false;
    char *end;
    if (s[2] < '1' || s[2] > '9')
        return false;
    unsigned long size = strtoul(s + 2, &end, 10);
    if (*end || (size != 1 && size != 2 && size != 4 && size != 8) || (a->kind == 'f' && size < 4))
        return false;
    if (order == '|' && size != 1)
        return false;
    uint16_t probe = 1;
    unsigned char first;
    memcpy(&first, &probe, 1);
    a->itemsize = size;
    a->big = order == '>' || (order == '=' && first == 0);
    return true;
}

/* The dict: each of the three keys once, nothing else, then only spaces. */
static herd_status parse_dict(const char *h, size_t hlen, const char *name, npy_array *a, herd_err *err)
{
    npy_cursor c = {h, h + hlen};
    bool seen[3] = {false, false, false};
    char key[32], val[64];
    if (!take(&c, '{'))
        goto bad;
    while (!take(&c, '}')) {
        if (!take_string(&c, key, sizeof key) || !take(&c, ':'))
            goto bad;
        int k = !strcmp(key, "descr") ? 0 : !strcmp(key, "fortran_order") ? 1 : !strcmp(key, "shape") ? 2 : -1;
        if (k < 0 || seen[k])
            return herd_err_set(err, HERD_ECORRUPT, "%s: .npy header has %s key '%s'", name,
                                k < 0 ? "an unknown" : "a repeated", key);
        seen[k] = true;
        if (k == 0) {
            if (!take_string(&c, val, sizeof val))
                goto bad;
            if (!parse_descr(val, a))
                return herd_err_set(err, HERD_EUNSUPPORTED,
                                    "%s: .npy dtype '%s' is not one herd reads (integers or floats of one byte order)",
                                    name, val);
        } else if (k == 1) {
            if (take_word(&c, "True"))
                a->fortran = true;
            else if (!take_word(&c, "False"))
                goto bad;
        } else if (!take_shape(&c, a)) {
            goto bad;
        }
        if (!take(&c, ',')) {
            if (!take(&c, '}'))
                goto bad;
            break;
        }
    }
    skip_space(&c);
    if (c.p != c.end || !seen[0] || !seen[1] || !seen[2])
        goto bad;
    return HERD_OK;
bad:
    return herd_err_set(err, HERD_ECORRUPT,
                        "%s: malformed .npy header (expected a dict of 'descr', 'fortran_order' and 'shape')", name);
}

/* Magic, version, header length and header; then the array's bytes must be
 * exactly its shape's. */
static herd_status npy_parse(const unsigned char *buf, size_t len, const char *name, npy_array *a, herd_err *err)
{
    memset(a, 0, sizeof *a);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6))
        return herd_err_set(err, HERD_ECORRUPT, "%s: not a .npy file (%s)", name,
                            len < 10 ? "shorter than its 10-byte preamble" : "wrong magic bytes");
    unsigned major = buf[6], minor = buf[7];
    if (major < 1 || major > 3 || minor != 0)
        return herd_err_set(err, HERD_EUNSUPPORTED, "%s: .npy format version %u.%u (herd reads 1.0, 2.0 and 3.0)",
                            name, major, minor);
    size_t start = major == 1 ? 10 : 12, hlen;
    if (len < start)
        return herd_err_set(err, HERD_ECORRUPT, "%s: truncated .npy preamble", name);
    hlen = major == 1 ? (size_t)buf[8] | (size_t)buf[9] << 8
                      : (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    if (hlen > len - start)
        return herd_err_set(err, HERD_ECORRUPT, "%s: .npy header of %zu bytes but the file holds %zu after its preamble",
                            name, hlen, len - start);
    herd_status st = parse_dict((const char *)buf + start, hlen, name, a, err);
    if (st < 0)
        return st;
    if (a->fortran)
        return herd_err_set(err, HERD_EUNSUPPORTED,
                            "%s: a Fortran-ordered array (save it with np.ascontiguousarray first)", name);
    size_t body = len - start - hlen;
    bool over = false;
    a->count = 1;
    for (size_t i = 0; i < a->ndim; i++) {
        over = over || (a->shape[i] && a->count > SIZE_MAX / a->itemsize / a->shape[i]);
        a->count = over ? 0 : a->count * a->shape[i];
    }
    if (over)
        return herd_err_set(err, HERD_ECORRUPT, "%s: .npy header's shape needs more than the %zu bytes of data the "
                            "file holds", name, body);
    if (a->count * a->itemsize != body)
        return herd_err_set(err, HERD_ECORRUPT, "%s: .npy header's shape needs %zu bytes of data but the file holds %zu",
                            name, a->count * a->itemsize, body);
    a->data = buf + start + hlen;
    return HERD_OK;
}

/* Element i as a double (floats) or an integer (kind 'i', 'u'). */
static uint64_t npy_bits(const npy_array *a, size_t i)
{
    const unsigned char *p = a->data + i * a->itemsize;
    uint64_t v = 0;
    for (size_t b = 0; b < a->itemsize; b++)
        v |= (uint64_t)p[a->big ? a->itemsize - 1 - b : b] << (8 * b);
    return v;
}

static double npy_float(const npy_array *a, size_t i)
{
    uint64_t v = npy_bits(a, i);
    if (a->itemsize == 4) {
        uint32_t u = (uint32_t)v;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    double d;
    memcpy(&d, &v, sizeof d);
    return d;
}

/* An integer element, -1 where it is negative or above INT64_MAX. */
static int64_t npy_int(const npy_array *a, size_t i)
{
    uint64_t v = npy_bits(a, i);
    if (a->kind == 'i' && a->itemsize < 8 && v >> (8 * a->itemsize - 1)) /* negative */
        return -1;
    return v > (uint64_t)INT64_MAX ? -1 : (int64_t)v;
}

/* The images' shape as C x H x W, and whether the array is channels-last. */
static herd_status image_shape(const npy_array *a, const char *name, size_t *c, size_t *h, size_t *w, bool *last,
                               herd_err *err)
{
    *last = false;
    if (a->ndim == 4) {
        *last = a->shape[3] <= 4 && a->shape[3] < a->shape[1];
        *c = *last ? a->shape[3] : a->shape[1], *h = *last ? a->shape[1] : a->shape[2];
        *w = *last ? a->shape[2] : a->shape[3];
    } else if (a->ndim == 3) {
        *c = 1, *h = a->shape[1], *w = a->shape[2];
    } else if (a->ndim == 2) {
        *c = 1, *h = 1, *w = a->shape[1];
    } else {
        return herd_err_set(err, HERD_ECORRUPT,
                            "%s: images must be an array of 2 to 4 dimensions (N x C x H x W, N x H x W x C, "
                            "N x H x W or N x D), not %zu", name, a->ndim);
    }
    if (!(a->kind == 'u' && a->itemsize == 1) && !(a->kind == 'f' && a->itemsize == 4))
        return herd_err_set(err, HERD_EUNSUPPORTED, "%s: images must be uint8 or float32, not %s%zu", name,
                            a->kind == 'f' ? "float" : a->kind == 'u' ? "uint" : "int", a->itemsize * 8);
    if (a->shape[0] == 0 || *c == 0 || *h == 0 || *w == 0)
        return herd_err_set(err, HERD_ECORRUPT, "%s: holds no images (a dimension is 0)", name);
    return HERD_OK;
}

/* Copies the pixels into out->x in NCHW order; float32 must be finite. */
static herd_status copy_images(const npy_array *a, const char *name, bool last, herd_dataset *out, herd_err *err)
{
    size_t hw = out->h * out->w, dim = out->c * hw;
    for (size_t i = 0; i < out->n; i++)
        for (size_t ch = 0; ch < out->c; ch++)
            for (size_t j = 0; j < hw; j++) {
                size_t src = last ? i * dim + j * out->c + ch : i * dim + ch * hw + j;
                double v = a->kind == 'u' ? a->data[src] / 255.0 : npy_float(a, src);
                if (!isfinite(v))
                    return herd_err_set(err, HERD_ECORRUPT, "%s: image %zu holds a non-finite value", name, i);
                out->x[i * dim + ch * hw + j] = a->kind == 'u' ? (float)a->data[src] / 255.0f : (float)v;
            }
    return HERD_OK;
}

static herd_status copy_labels(const npy_array *l, const char *name, herd_dataset *out, herd_err *err)
{
    if (l->kind == 'f')
        return herd_err_set(err, HERD_EUNSUPPORTED, "%s: labels must be integers, not float%zu", name, l->itemsize * 8);
    size_t top = 1;
    for (size_t i = 0; i < out->n; i++) {
        int64_t v = npy_int(l, i);
        if (v < 0 || v >= NPY_MAX_CLASSES)
            return herd_err_set(err, HERD_ECORRUPT, "%s: label %zu is outside [0, %d]", name, i, NPY_MAX_CLASSES - 1);
        out->y[i] = (int32_t)v;
        top = (size_t)v > top ? (size_t)v : top;
    }
    out->nclasses = top + 1;
    return HERD_OK;
}

herd_status herd__data_parse_npy(const unsigned char *img, size_t ni, const unsigned char *lab, size_t nl,
                                 const char *images_name, const char *labels_name, herd_dataset *out, herd_err *err)
{
    herd_status st = HERD_OK;
    npy_array a, l;
    size_t c = 0, h = 0, w = 0;
    bool last = false;
    memset(out, 0, sizeof *out);
    HERD_TRY(npy_parse(img, ni, images_name, &a, err));
    HERD_TRY(npy_parse(lab, nl, labels_name, &l, err));
    HERD_TRY(image_shape(&a, images_name, &c, &h, &w, &last, err));
    if ((l.ndim != 1 && (l.ndim != 2 || l.shape[1] != 1)) || l.shape[0] != a.shape[0]) {
        st = herd_err_set(err, HERD_ECORRUPT, "%s has %zu images but %s is not an array of %zu labels (N or N x 1)",
                          images_name, a.shape[0], labels_name, a.shape[0]);
        goto out;
    }
    out->n = a.shape[0], out->c = c, out->h = h, out->w = w;
    out->x = malloc(a.count * sizeof(float));
    out->y = malloc(out->n * sizeof *out->y);
    if (!out->x || !out->y) {
        st = herd_err_set(err, HERD_ENOMEM, "%s: out of memory for %zu images", images_name, out->n);
        goto out;
    }
    HERD_TRY(copy_labels(&l, labels_name, out, err));
    HERD_TRY(copy_images(&a, images_name, last, out, err));
out:
    if (st < 0)
        herd_dataset_free(out);
    return st;
}

herd_status herd_data_load_npy(const char *images_path, const char *labels_path, herd_dataset *out, herd_err *err)
{
    return herd__data_load_pair(images_path, labels_path, herd__data_parse_npy, out, err);
}

herd_status herd__data_same_shape(const char *dir, const herd_dataset *train, const herd_dataset *test, herd_err *err)
{
    if (train->c == test->c && train->h == test->h && train->w == test->w)
        return HERD_OK;
    return herd_err_set(err, HERD_ECORRUPT, "%s: training examples are %zux%zux%zu but test examples %zux%zux%zu", dir,
                        train->c, train->h, train->w, test->c, test->h, test->w);
}

herd_status herd__data_open_npy(const char *dir, herd_dataset *train, herd_dataset *test, bool *found, herd_err *err)
{
    static const char *const names[4] = {"train_images.npy", "train_labels.npy", "test_images.npy",
                                         "test_labels.npy"};
    char path[4][4096];
    struct stat sb;
    size_t have = 0;
    for (int i = 0; i < 4; i++) {
        snprintf(path[i], sizeof path[i], "%s/%s", dir, names[i]);
        have += stat(path[i], &sb) == 0;
    }
    *found = have > 0;
    if (!have)
        return HERD_OK;
    if (have < 4)
        return herd_err_set(err, HERD_ENOTFOUND,
                            "%s: has %zu of the 4 .npy files of a data set (train_images.npy, train_labels.npy, "
                            "test_images.npy and test_labels.npy)", dir, have);
    herd_status st = herd_data_load_npy(path[0], path[1], train, err);
    if (st == HERD_OK)
        st = herd_data_load_npy(path[2], path[3], test, err);
    if (st == HERD_OK)
        st = herd__data_same_shape(dir, train, test, err);
    return st;
}
