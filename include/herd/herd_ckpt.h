/* herd_ckpt.h — checkpoints: a versioned binary file of named, checksummed
 * sections, written atomically into a directory that keeps the last N.
 *
 * File layout (every integer little-endian; float arrays IEEE-754 binary32,
 * little-endian):
 *
 *   0    magic "HERDCKPT"                 8 bytes
 *   8    u32 version (1)
 *   12   u32 header_bytes = 128 + 48 * nsections
 *   16   u64 file_bytes   (the whole file)
 *   24   u64 step         (steps done per worker)
 *   32   u64 epoch        (the epoch the next step belongs to)
 *   40   u64 nparams      (floats in one worker's flat parameter array)
 *   48   u64 seed
 *   56   u64 steps_per_epoch
 *   64   u32 workers
 *   68   u32 batch        (per worker)
 *   72   u32 nsections
 *   76   u32 reserved (0)
 *   80   char model[20], NUL-padded
 *   100  char algo[24],  NUL-padded
 *   124  u32 header CRC32C over bytes [0, 124) and the section table
 *   128  section table: nsections entries of 48 bytes
 *          char name[24] (NUL-padded; [a-z0-9_]), u32 worker, u32 CRC32C of
 *          the data, u64 offset, u64 bytes
 *        then the sections' data, packed in table order from header_bytes to
 *        file_bytes: every byte of the file is under one checksum.
 *
 * Writing: a temporary file in DIR, write, fsync, rename over
 * DIR/ckpt-<step>.herd, fsync DIR, then delete all but the newest `keep`
 * checkpoints. A writer killed at any point leaves the previous checkpoints
 * intact and at most a stale temporary file, which readers ignore and the next
 * writer removes.
 *
 * Reading: the whole file is read and every check below is made before any
 * byte is handed out; a bad file yields HERD_ECORRUPT (HERD_EUNSUPPORTED for a
 * newer version) and a message naming the file and what is wrong. Only names
 * of the form ckpt-<digits>.herd directly inside DIR are opened, with
 * O_NOFOLLOW: a symbolic link is refused, never followed.
 *
 * Ownership: a herd_ckpt owns its bytes; sections point into them. No global
 * state; one thread per herd_ckpt.
 */
#ifndef HERD_CKPT_H
#define HERD_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd_nn.h"
#include "herd/herd_status.h"

enum {
    HERD_CKPT_VERSION = 1,
    HERD_CKPT_HEADER_BYTES = 128,
    HERD_CKPT_ENTRY_BYTES = 48,
    HERD_CKPT_NAME_BYTES = 24,
    HERD_CKPT_MAX_SECTIONS = 1u << 16,
};

/* CRC32C (Castagnoli, reflected, as iSCSI/ext4): crc = herd_crc32c(0, p, n)
 * for a whole buffer; pass the previous value to continue over more bytes. */
uint32_t herd_crc32c(uint32_t crc, const void *buf, size_t len);

/* The header's fixed fields: what the checkpoint is of. */
typedef struct herd_ckpt_info {
    uint64_t step, epoch, nparams, seed, steps_per_epoch;
    uint32_t workers, batch;
    char model[20], algo[24]; /* NUL-terminated */
} herd_ckpt_info;

/* One section to write, or one found in a loaded checkpoint. */
typedef struct herd_ckpt_section {
    const char *name; /* [a-z0-9_], 1..23 characters */
    uint32_t worker;  /* < info.workers */
    const void *data;
    size_t bytes;
} herd_ckpt_section;

/* Writes DIR/ckpt-<info->step>.herd atomically (see above) and keeps the
 * newest `keep` (>= 1) checkpoints of DIR. DIR must exist. HERD_EINVAL:
 * keep 0, more than HERD_CKPT_MAX_SECTIONS sections, a section's name
 * that is not [a-z0-9_]{1,23}, its worker >= info->workers, its data NULL
 * for a non-zero length, a (name, worker) given twice, a model or algo
 * name that is not printable. */
herd_status herd_ckpt_write(const char *dir, const herd_ckpt_info *info, const herd_ckpt_section *secs,
                            size_t nsecs, size_t keep, herd_err *err);

typedef struct herd_ckpt herd_ckpt;

/* Verifies and takes a copy of len bytes; `label` names the source in
 * messages (a file name). The in-memory entry of the reader (and its fuzzer). */
herd_status herd_ckpt_parse(const void *buf, size_t len, const char *label, herd_ckpt **out, herd_err *err);
/* Reads and verifies DIR/name; name must be a plain file name (no '/', not
 * "." or ".."), and is not followed if it is a symbolic link. */
herd_status herd_ckpt_read(const char *dir, const char *name, herd_ckpt **out, herd_err *err);
void herd_ckpt_free(herd_ckpt *ck);

const herd_ckpt_info *herd_ckpt_get_info(const herd_ckpt *ck);
/* The file (or label) the checkpoint came from. */
const char *herd_ckpt_label(const herd_ckpt *ck);
size_t herd_ckpt_nsections(const herd_ckpt *ck);
/* Section i in file order (i < herd_ckpt_nsections). */
herd_ckpt_section herd_ckpt_section_at(const herd_ckpt *ck, size_t i);
/* Finds section (name, worker): HERD_ENOTFOUND (message set) if absent;
 * HERD_EINVAL for a worker >= the checkpoint's workers (find and copy). */
herd_status herd_ckpt_find(const herd_ckpt *ck, const char *name, uint32_t worker, herd_ckpt_section *out,
                           herd_err *err);
/* Copies section (name, worker), which must hold exactly `bytes` bytes
 * (HERD_EINVAL otherwise); dst may be NULL for 0 bytes. */
herd_status herd_ckpt_copy(const herd_ckpt *ck, const char *name, uint32_t worker, void *dst, size_t bytes,
                           herd_err *err);

enum { HERD_CKPT_MAX_LIST = 4096 };

/* The steps of DIR's ckpt-<step>.herd files, newest first (at most cap;
 * steps may be NULL for cap 0); *n is how many were found (HERD_ENOTFOUND
 * if DIR is missing). */
herd_status herd_ckpt_list(const char *dir, uint64_t *steps, size_t cap, size_t *n, herd_err *err);

/* The newest checkpoint of DIR that reads and verifies: the one whose
 * header has the latest step (every file is read: a name does not decide).
 * Each file named after a later step that does not read is skipped and
 * described in `warn` (may be NULL; cap bytes, one line per file), as is a
 * file whose name is not its header's step; *skipped counts the former
 * (may be NULL). HERD_ENOTFOUND when DIR
 * holds no checkpoint; HERD_ECORRUPT when none of them is valid. */
herd_status herd_ckpt_latest(const char *dir, herd_ckpt **out, char *warn, size_t cap, size_t *skipped,
                             herd_err *err);

/* ---- the model a checkpoint keeps ------------------------------------------
 *
 * Besides every worker's state (src/run/ckpt_run.h), a training run's
 * checkpoint holds, as sections of worker 0:
 *   meta   what rebuilds the model: one example's shape (c, h, w) and the
 *          classes, the run's --data as given, and which model the run keeps
 *          (its evaluation's "worker0", or the algorithm's: "center",
 *          "average", "server"), and whether it is the run's final one.
 *          Little-endian: u32 version (1), u32 c, h, w, classes, u32 final,
 *          char kept[16] (NUL-padded), u32 data_len, then data_len bytes.
 *   model  that model's weights (nparams floats), where they are not worker
 *          0's own "params".
 * The kept model is what the run's evaluation scores: the algorithm's
 * eval_params at the checkpoint's step (an elastic center, a server's
 * weights, a decentralized average as last computed: at epoch ends), and
 * after the run's final evaluation the newest checkpoint, where the run
 * wrote it at its last step, is written again with exactly the weights
 * that evaluation scored (final). Its batch-norm statistics are worker 0's
 * "buffers", as in the run's evaluation.
 * Checkpoints of an older herd have neither section: their kept model is
 * worker 0's weights where the algorithm keeps no other (no eval_params:
 * sgd, allreduce, localsgd...), and the shape comes from the data. */

/* Meta version 2 adds the data's identity: the digests of the training and
 * test sets the run read (herd_dataset.digest) and where it read them
 * (herd_data_resolve). Version 1 (an older herd's) is read without them. */
enum { HERD_CKPT_META_VERSION = 2, HERD_CKPT_KEPT_NAME = 16, HERD_CKPT_MAX_DATA = 4096 };

typedef struct herd_ckpt_kept {
    bool has_meta;             /* false: an older checkpoint (no shape, no data; see above) */
    size_t c, h, w, nclasses;  /* with has_meta */
    char data[HERD_CKPT_MAX_DATA]; /* the run's --data ("": herd's default) */
    char eval_model[HERD_CKPT_KEPT_NAME]; /* "worker0", "center", "average", "server" */
    bool final;                /* exactly the model the run's final evaluation scored */
    bool has_digests;          /* meta version 2 on: the three below */
    uint64_t train_digest, test_digest; /* the run's data sets as read (herd_dataset.digest) */
    char data_path[HERD_CKPT_MAX_DATA]; /* where the run read them (herd_data_resolve) */
} herd_ckpt_kept;

/* What checkpoint ck says of the model it keeps: HERD_ECORRUPT for a meta
 * section that does not read, HERD_EUNSUPPORTED for a newer one. */
herd_status herd_ckpt_kept_info(const herd_ckpt *ck, herd_ckpt_kept *out, herd_err *err);

/* Builds the model ck keeps for examples of shape (c, h, w) and nclasses
 * classes, running batches of up to max_batch (0: the run's --batch, so an
 * evaluation sums its loss as the run's did), with the kept weights and
 * worker 0's buffers. HERD_EINVAL when that model's parameter count is not
 * the checkpoint's (another shape than the run's), or when ck predates the
 * meta section and the algorithm keeps a model other than worker 0's. */
herd_status herd_ckpt_kept_model(const herd_ckpt *ck, size_t c, size_t h, size_t w, size_t nclasses,
                                 size_t max_batch, herd_model **out, herd_err *err);

/* ---- herd eval: the kept model on the test set ---------------------------- */

typedef struct herd_eval_config {
    const char *checkpoint_dir; /* its newest valid checkpoint (herd_ckpt_latest), or a checkpoint file: that one */
    const char *data;           /* NULL: the run's own --data as the checkpoint records it, else herd's default */
    size_t test_limit;          /* the first N test examples (0: all) */
    size_t threads;             /* intra-op threads (0: 1, herd train's default; the run's
                                 * --threads gives its figures to the last digit, another
                                 * count may sum in another order) */
    bool keep_outputs;          /* res->logits and res->inputs get every example's */
    bool other_data;            /* score data other than the run's (its digests differ) instead of refusing */
} herd_eval_config;

typedef struct herd_eval_result {
    char checkpoint[512];       /* the file evaluated */
    char warn[2048];            /* newer checkpoints skipped as not valid, one line each ("" : none) */
    herd_ckpt_info info;        /* its header: model, algo, step, epoch, workers... */
    herd_ckpt_kept kept;        /* its meta (kept.c... are the data's where it has none) */
    size_t n, nparams;          /* test examples evaluated; the model's parameters */
    double test_acc, test_loss; /* as herd train's final evaluation computes them */
    double eval_s;
    uint64_t train_digest, test_digest; /* the data evaluated (herd_dataset.digest): kept's where they match */
    char data_path[HERD_CKPT_MAX_DATA]; /* where it was read (herd_data_resolve) */
    bool other_data;            /* the checkpoint records other data (cfg->other_data let it through) */
    float *logits;              /* keep_outputs: n x nclasses, row-major */
    float *inputs;              /* keep_outputs: n x (c*h*w), NCHW, standardized as the model takes them */
} herd_eval_result;

/* Evaluates the model DIR's newest valid checkpoint keeps on the test set
 * of cfg->data (standardized with its training set, as herd train does):
 * a checkpoint written after a run's final evaluation gives exactly that
 * evaluation's test_acc and test_loss. Fails (message in err) on a missing
 * or corrupt checkpoint, missing data, or data of another shape than the
 * model's; HERD_EDATA where the checkpoint records other data than cfg->data
 * reads (its digests; not with cfg->other_data). HERD_EINVAL: cfg->
 * checkpoint_dir NULL or empty, cfg->threads above 256 (herd train's
 * bound). res is cleared first, and owns logits and inputs:
 * herd_eval_result_free. */
herd_status herd_eval(const herd_eval_config *cfg, herd_eval_result *res, herd_err *err);
void herd_eval_result_free(herd_eval_result *res);

/* ---- herd export: the kept model's weights as named tensors -------------- */

typedef enum herd_export_format {
    HERD_EXPORT_SAFETENSORS, /* one file: u64 little-endian header length, a JSON header
                              * {"__metadata__":{...}, name:{"dtype":"F32","shape":[...],
                              * "data_offsets":[begin,end]}...} padded with spaces to a
                              * multiple of 8 bytes, then every tensor's bytes in order */
    HERD_EXPORT_NPY,         /* a directory: one NAME.npy per tensor (NPY format 1.0, '<f4', C order) */
    HERD_EXPORT_PYTORCH,     /* a directory: model.safetensors, and model.py, which rebuilds the
                              * network in PyTorch from it (its metadata's description) */
} herd_export_format;

typedef struct herd_export_config {
    const char *checkpoint_dir; /* its newest valid checkpoint, or a checkpoint file: that one */
    const char *out;         /* the file (safetensors) or directory (npy, pytorch; created if missing) */
    herd_export_format format;
    const char *data;        /* only for a checkpoint that does not record its shape (an older herd's) */
    const char *version;     /* herd's version, for the metadata (NULL: none) */
} herd_export_config;

typedef struct herd_export_result {
    char checkpoint[512];
    char warn[2048];
    herd_ckpt_info info;
    herd_ckpt_kept kept;
    size_t ntensors, nfloats;
    /* The run's input standardization per channel (herd_dataset.mean and
     * .std), comma-separated: the model takes (raw - mean) / std, raw being
     * pixels / 255 for IDX and CIFAR data; "" where the checkpoint records
     * none (an older herd). The safetensors metadata's input_mean and
     * input_std. */
    char input_mean[512], input_std[512];
} herd_export_result;

/* Writes the tensors of the model DIR's newest valid checkpoint keeps
 * (herd_model_tensors: names, shapes, parameters then buffers layer by
 * layer), float32 little-endian. Each file goes to a temporary name and is
 * renamed into place: a failed export leaves what was there. HERD_EINVAL:
 * cfg->checkpoint_dir NULL, cfg->out NULL or empty, cfg->format not a
 * herd_export_format. */
herd_status herd_export(const herd_export_config *cfg, herd_export_result *res, herd_err *err);

/* One float32 array as an NPY 1.0 file (ndim <= 4), written atomically.
 * HERD_EINVAL: ndim above 4, a shape whose bytes overflow a size_t; shape
 * may be NULL for ndim 0, data for an empty shape. */
herd_status herd_npy_write(const char *path, const size_t *shape, size_t ndim, const float *data, herd_err *err);

#endif
