/* herd export's files: the model a checkpoint keeps as named float32
 * tensors, in safetensors or NPY files (formats in herd_ckpt.h). */
#include "herd/herd_ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "herd/herd_nn.h"
#include "core/args.h"
#include "core/json.h"
#include "core/outpath.h"
#include "run/ckpt_run.h"

/* One piece of a file being written. */
typedef struct piece {
    const void *p;
    size_t len;
} piece;

/* Writes the pieces to fd (`name` in messages). */
static herd_status write_pieces(int fd, const char *name, const piece *pieces, size_t n, herd_err *err)
{
    herd_status st = HERD_OK;
    for (size_t i = 0; i < n && st == HERD_OK; i++) {
        const unsigned char *p = pieces[i].p;
        for (size_t left = pieces[i].len; left && st == HERD_OK;) {
            ssize_t w = write(fd, p, left);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                st = herd_err_set(err, HERD_EIO, "cannot write %s: %s", name, w < 0 ? strerror(errno) : "no progress");
            else
                p += w, left -= (size_t)w;
        }
    }
    return st;
}

/* Writes the pieces to path (core/outpath.h): a new name or a regular
 * file (a link's target for a link) through a temporary file beside it,
 * fsynced and renamed over it, so that a failure leaves what was there and
 * the file keeps its permissions; a FIFO or a character device in place;
 * anything else refused. */
static herd_status write_atomic(const char *path, const piece *pieces, size_t n, herd_err *err)
{
    herd__outpath o;
    herd_status st = herd__outpath_check(path, "output file", &o, err);
    if (st < 0)
        return st;
    if (o.in_place) {
        int fd;
        if ((st = herd__outpath_open_in_place(&o, "output file", &fd, err)) < 0)
            return st;
        st = write_pieces(fd, o.path, pieces, n, err);
        if (close(fd) != 0 && st == HERD_OK)
            st = herd_err_set(err, HERD_EIO, "cannot write %s: close: %s", o.path, strerror(errno));
        return st;
    }
    char tmp[sizeof o.path + 32];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", o.path, (long)getpid()) >= (int)sizeof tmp)
        return herd_err_set(err, HERD_EINVAL, "export: the name %s is too long", o.path);
    struct stat old;
    bool had = stat(o.path, &old) == 0 && S_ISREG(old.st_mode);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return herd_err_set(err, HERD_EIO, "cannot create %s: %s", tmp, strerror(errno));
    st = write_pieces(fd, tmp, pieces, n, err);
    if (st == HERD_OK && had && fchmod(fd, old.st_mode & 07777) != 0)
        st = herd_err_set(err, HERD_EIO, "cannot write %s: fchmod: %s", tmp, strerror(errno));
    if (st == HERD_OK && fsync(fd) != 0)
        st = herd_err_set(err, HERD_EIO, "cannot write %s: fsync: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == HERD_OK)
        st = herd_err_set(err, HERD_EIO, "cannot write %s: close: %s", tmp, strerror(errno));
    if (st == HERD_OK && rename(tmp, o.path) != 0)
        st = herd_err_set(err, HERD_EIO, "cannot rename %s to %s: %s", tmp, o.path, strerror(errno));
    if (st < 0)
        unlink(tmp);
    return st;
}

/* ---- NPY ------------------------------------------------------------------ */

/* The NPY 1.0 header of a little-endian float32 C-order array: magic,
 * version, u16 header length, then the dict padded with spaces and a
 * newline so the data starts at a multiple of 64 bytes. Returns its length
 * (at most cap: 128 bytes always fit four dimensions). */
static size_t npy_header(unsigned char *buf, size_t cap, const size_t *shape, size_t ndim)
{
    char dict[160], dims[112] = "";
    size_t len = 0;
    for (size_t d = 0; d < ndim; d++)
        len += (size_t)snprintf(dims + len, sizeof dims - len, "%zu,%s", shape[d], d + 1 < ndim ? " " : "");
    if (ndim > 1) /* (6, 1) as Python writes it; a 1-tuple keeps its comma: (6,) */
        dims[--len] = 0;
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }", dims);
    size_t total = (10 + (size_t)n + 1 + 63) / 64 * 64;
    if (total > cap || total - 10 > 65535)
        return 0;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)((total - 10) & 0xff), buf[9] = (unsigned char)((total - 10) >> 8);
    memset(buf + 10, ' ', total - 10);
    memcpy(buf + 10, dict, (size_t)n);
    buf[total - 1] = '\n';
    return total;
}

herd_status herd_npy_write(const char *path, const size_t *shape, size_t ndim, const float *data, herd_err *err)
{
    unsigned char hdr[256];
    size_t count = 1;
    herd_status st = HERD__NONNULL(err, path);
    if (st < 0 || (ndim && (st = HERD__NONNULL(err, shape)) < 0))
        return st;
    if (ndim > 4)
        return herd_err_set(err, HERD_EINVAL, "%s: %zu dimensions (at most 4)", path, ndim);
    for (size_t d = 0; d < ndim; d++) {
        if (shape[d] && count > SIZE_MAX / sizeof(float) / shape[d])
            return herd_err_set(err, HERD_EINVAL, "herd_npy_write: %s: the shape's product overflows", path);
        count *= shape[d];
    }
    if (count && !data)
        return HERD__NONNULL(err, data);
    size_t hlen = npy_header(hdr, sizeof hdr, shape, ndim);
    if (!hlen)
        return herd_err_set(err, HERD_EINVAL, "%s: the shape does not fit an NPY header", path);
    piece p[2] = {{hdr, hlen}, {data, count * sizeof(float)}};
    return write_atomic(path, p, 2, err);
}

/* ---- safetensors ---------------------------------------------------------- */

/* The tensor's floats: in the model's parameters or its buffers. */
static const float *tensor_data(herd_model *m, const herd_tensor *t)
{
    return (t->buffer ? herd_model_buffers(m) : herd_model_params(m)) + t->off;
}

/* The JSON header: metadata (all strings, as the format wants), then each
 * tensor's dtype, shape and byte range in the data that follows. */
static herd_status safetensors_header(const herd_export_config *cfg, const herd_export_result *res,
                                      const herd_model *m, const herd_tensor *ts, size_t n, char **out, size_t *len,
                                      herd_err *err)
{
    char q[7][HERD_CKPT_MAX_DATA + 64];
    const char *desc = herd_model_description(m);
    size_t dcap = 6 * strlen(desc) + 3; /* each byte at most \u00XX, and the quotes */
    char *qdesc = malloc(dcap);
    if (!qdesc)
        return herd_err_set(err, HERD_ENOMEM, "out of memory for the safetensors header");
    herd__json_quote(qdesc, dcap, desc);
    const char *strs[7] = {cfg->version ? cfg->version : "", res->info.model, res->info.algo, res->kept.eval_model,
                           res->checkpoint, res->kept.data, res->kept.final ? "true" : "false"};
    for (size_t i = 0; i < 7; i++)
        herd__json_quote(q[i], sizeof q[i], strs[i]);
    FILE *f = open_memstream(out, len);
    if (!f) {
        free(qdesc);
        return herd_err_set(err, HERD_ENOMEM, "out of memory for the safetensors header");
    }
    fprintf(f,
            "{\"__metadata__\":{\"format\":\"pt\",\"producer\":\"herd\",\"herd_version\":%s,\"model\":%s,"
            "\"algo\":%s,\"eval_model\":%s,\"checkpoint\":%s,\"data\":%s,\"final\":%s,\"step\":\"%" PRIu64 "\","
            "\"input_shape\":\"%zux%zux%zu\",\"classes\":\"%zu\",\"description\":%s",
            q[0], q[1], q[2], q[3], q[4], q[5], q[6], res->info.step, res->kept.c, res->kept.h, res->kept.w,
            res->kept.nclasses, qdesc);
    free(qdesc);
    if (res->input_mean[0]) /* what the model takes: (raw - mean) / std per channel */
        fprintf(f, ",\"input_mean\":\"%s\",\"input_std\":\"%s\",\"input_raw\":\"%s\"", res->input_mean, res->input_std,
                "pixels / 255 (IDX, CIFAR, uint8 .npy, PNG/JPEG); the values themselves (float32 .npy, synthetic)");
    fputc('}', f);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        fprintf(f, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[", ts[i].name);
        for (size_t d = 0; d < ts[i].ndim; d++)
            fprintf(f, "%s%zu", d ? "," : "", ts[i].shape[d]);
        fprintf(f, "],\"data_offsets\":[%zu,%zu]}", at, at + ts[i].len * sizeof(float));
        at += ts[i].len * sizeof(float);
    }
    fputc('}', f);
    /* the data starts 8-aligned: the header is padded with spaces (the format allows it) */
    long hl = ftell(f);
    while (hl >= 0 && (8 + hl) % 8)
        fputc(' ', f), hl++;
    if (fclose(f) != 0 || hl < 0) {
        free(*out);
        *out = NULL;
        return herd_err_set(err, HERD_ENOMEM, "out of memory for the safetensors header");
    }
    return HERD_OK;
}

static herd_status write_safetensors(const herd_export_config *cfg, const char *path, const herd_export_result *res,
                                     herd_model *m, const herd_tensor *ts, size_t n, herd_err *err)
{
    char *hdr = NULL;
    size_t hlen = 0;
    herd_status st = safetensors_header(cfg, res, m, ts, n, &hdr, &hlen, err);
    if (st < 0)
        return st;
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    piece *p = malloc((n + 2) * sizeof *p);
    if (!p) {
        free(hdr);
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    }
    p[0] = (piece){lenbuf, 8}, p[1] = (piece){hdr, hlen};
    for (size_t i = 0; i < n; i++)
        p[2 + i] = (piece){tensor_data(m, &ts[i]), ts[i].len * sizeof(float)};
    st = write_atomic(path, p, n + 2, err);
    free(p);
    free(hdr);
    return st;
}

/* Directory dir, made if missing; `why` says in a message why it must be one. */
static herd_status make_out_dir(const char *dir, const char *why, herd_err *err)
{
    struct stat sb;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return herd_err_set(err, HERD_EIO, "cannot make directory %s: %s", dir, strerror(errno));
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return herd_err_set(err, HERD_EINVAL, "%s is not a directory (%s)", dir, why);
    return HERD_OK;
}

/* OUT/NAME.npy for every tensor; OUT is made if missing. */
static herd_status write_npy_dir(const char *dir, herd_model *m, const herd_tensor *ts, size_t n, herd_err *err)
{
    herd_status st = make_out_dir(dir, "the npy format writes one file per tensor into one", err);
    if (st < 0)
        return st;
    for (size_t i = 0; i < n; i++) {
        char path[4200];
        if (snprintf(path, sizeof path, "%s/%s.npy", dir, ts[i].name) >= (int)sizeof path)
            return herd_err_set(err, HERD_EINVAL, "export: the directory name %s is too long", dir);
        st = herd_npy_write(path, ts[i].shape, ts[i].ndim, tensor_data(m, &ts[i]), err);
        if (st < 0)
            return st;
    }
    return HERD_OK;
}

/* (export_model_py.c, made from export_model.py) */
extern const char herd__export_model_py[];

/* OUT/model.safetensors and OUT/model.py, which rebuilds the network from it. */
static herd_status write_pytorch_dir(const herd_export_config *cfg, const herd_export_result *res, herd_model *m,
                                     const herd_tensor *ts, size_t n, herd_err *err)
{
    char path[4200];
    herd_status st = make_out_dir(cfg->out, "the pytorch format writes model.safetensors and model.py into one", err);
    if (st < 0)
        return st;
    if (snprintf(path, sizeof path, "%s/model.safetensors", cfg->out) >= (int)sizeof path)
        return herd_err_set(err, HERD_EINVAL, "export: the directory name %s is too long", cfg->out);
    if ((st = write_safetensors(cfg, path, res, m, ts, n, err)) < 0)
        return st;
    snprintf(path, sizeof path, "%s/model.py", cfg->out);
    piece p = {herd__export_model_py, strlen(herd__export_model_py)};
    return write_atomic(path, &p, 1, err);
}

herd_status herd__export_write(const herd_export_config *cfg, const herd_export_result *res, herd_model *m,
                               const herd_tensor *ts, size_t n, herd_err *err)
{
    if (cfg->format == HERD_EXPORT_NPY)
        return write_npy_dir(cfg->out, m, ts, n, err);
    if (cfg->format == HERD_EXPORT_PYTORCH)
        return write_pytorch_dir(cfg, res, m, ts, n, err);
    return write_safetensors(cfg, cfg->out, res, m, ts, n, err);
}
