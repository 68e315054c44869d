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
 * newest `keep` (>= 1) checkpoints of DIR. DIR must exist. */
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
/* Finds section (name, worker): HERD_ENOTFOUND (message set) if absent. */
herd_status herd_ckpt_find(const herd_ckpt *ck, const char *name, uint32_t worker, herd_ckpt_section *out,
                           herd_err *err);
/* Copies section (name, worker), which must hold exactly `bytes` bytes. */
herd_status herd_ckpt_copy(const herd_ckpt *ck, const char *name, uint32_t worker, void *dst, size_t bytes,
                           herd_err *err);

enum { HERD_CKPT_MAX_LIST = 4096 };

/* The steps of DIR's ckpt-<step>.herd files, newest first (at most cap);
 * *n is how many were found (HERD_ENOTFOUND if DIR is missing). */
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

#endif
