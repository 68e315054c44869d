/* Checkpoint files: the format, the atomic writer, the verifying reader and
 * the directory of the last N (layout in include/herd/herd_ckpt.h).
 *
 * The reader trusts nothing: every size is checked against the bytes really
 * read, in an order that makes the message say what is wrong (truncated,
 * foreign, newer version, bad checksum, inconsistent table) rather than only
 * that something is.
 */
#include "herd/herd_ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/args.h"
#include "core/digest.h"
#include "core/outpath.h"
#include "run/ckpt_run.h"
#include "run/crc32c_table.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "herd checkpoints store float arrays as little-endian bytes; this host is big-endian"
#endif

static const char MAGIC[8] = {'H', 'E', 'R', 'D', 'C', 'K', 'P', 'T'};
enum { HDR_CRC_AT = 124 };
/* A checkpoint bigger than this is refused before it is read (1 TiB). */
static const uint64_t MAX_FILE_BYTES = (uint64_t)1 << 40;

/* ---- CRC32C, slice-by-8 --------------------------------------------------- */

uint32_t herd_crc32c(uint32_t crc, const void *buf, size_t len)
{
    const uint32_t(*t)[256] = herd__crc32c_table;
    const unsigned char *p = buf;
    crc = ~crc;
    for (; len && ((uintptr_t)p & 7); len--)
        crc = t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    for (; len >= 8; len -= 8, p += 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = t[7][lo & 0xff] ^ t[6][(lo >> 8) & 0xff] ^ t[5][(lo >> 16) & 0xff] ^ t[4][lo >> 24] ^
              t[3][hi & 0xff] ^ t[2][(hi >> 8) & 0xff] ^ t[1][(hi >> 16) & 0xff] ^ t[0][hi >> 24];
    }
    for (; len; len--)
        crc = t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* ---- little-endian fields ------------------------------------------------- */

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

static bool valid_name(const char *s, size_t cap)
{
    size_t n = 0;
    for (; n < cap && s[n]; n++)
        if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= '0' && s[n] <= '9') || s[n] == '_'))
            return false;
    return n > 0 && n < cap;
}

/* NUL-terminated and printable within cap bytes, NUL-padded after. */
static bool valid_text(const unsigned char *s, size_t cap)
{
    size_t n = 0;
    for (; n < cap && s[n]; n++)
        if (s[n] < 0x20 || s[n] > 0x7e)
            return false;
    if (n == cap)
        return false;
    for (; n < cap; n++)
        if (s[n])
            return false;
    return true;
}

/* ---- writing -------------------------------------------------------------- */

/* Whether `name` is ckpt-<digits>.herd; *step gets the digits. */
static bool ckpt_name(const char *name, uint64_t *step)
{
    if (strncmp(name, "ckpt-", 5))
        return false;
    const char *p = name + 5;
    uint64_t v = 0;
    size_t nd = 0;
    for (; *p >= '0' && *p <= '9'; p++, nd++) {
        if (nd >= 19) /* keeps v < 10^19 < 2^64 */
            return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (nd == 0 || strcmp(p, ".herd"))
        return false;
    *step = v;
    return true;
}

bool herd__ckpt_holds(const char *dir, const char *path)
{
    char ckdir[PATH_MAX], out[PATH_MAX], outdir[PATH_MAX], rdir[PATH_MAX], rout[PATH_MAX];
    struct stat sb;
    uint64_t step;
    if (!dir || !path || strlen(dir) >= sizeof ckdir || strlen(path) >= sizeof out)
        return false;
    snprintf(ckdir, sizeof ckdir, "%s", dir);
    if (stat(dir, &sb) == 0 && S_ISREG(sb.st_mode)) /* a checkpoint file: its directory */
        herd__path_split(dir, ckdir, sizeof ckdir);
    /* an existing output is what it resolves to (a link's target); a new name, its directory's */
    snprintf(out, sizeof out, "%s", realpath(path, rout) ? rout : path);
    const char *name = herd__path_split(out, outdir, sizeof outdir);
    /* a directory the run has yet to make: the names as given, less trailing '/' */
    if (!realpath(ckdir, rdir) || !realpath(outdir, rout)) {
        snprintf(rdir, sizeof rdir, "%s", ckdir), snprintf(rout, sizeof rout, "%s", outdir);
        for (char *d[] = {rdir, rout}, **p = d; p < d + 2; p++)
            for (size_t n = strlen(*p); n > 1 && (*p)[n - 1] == '/'; n--)
                (*p)[n - 1] = 0;
    }
    if (strcmp(rdir, rout))
        return false;
    return ckpt_name(name, &step) || !strcmp(name, ".lock") || !strncmp(name, ".ckpt-", 6);
}

/* A writer's temporary file: .ckpt-<step>.tmp (a leading dot, so no reader
 * ever takes it for a checkpoint). */
static bool tmp_name(const char *name)
{
    size_t n = strlen(name);
    return !strncmp(name, ".ckpt-", 6) && n > 10 && !strcmp(name + n - 4, ".tmp");
}

static herd_status write_all(int fd, const void *buf, size_t len, const char *dir, const char *name, herd_err *err)
{
    const unsigned char *p = buf;
    while (len) {
        size_t chunk = len < ((size_t)1 << 30) ? len : ((size_t)1 << 30);
        ssize_t w = write(fd, p, chunk);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return herd_err_set(err, HERD_EIO, "checkpoint %s/%s: write failed: %s", dir, name,
                                w < 0 ? strerror(errno) : "no progress");
        p += w, len -= (size_t)w;
    }
    return HERD_OK;
}

static int cmp_desc(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Steps of dirfd's checkpoints, newest first, at most cap; removes stale
 * temporary files when `clean`. */
static herd_status list_fd(int dirfd, const char *dir, uint64_t *steps, size_t cap, size_t *n, bool clean,
                           herd_err *err)
{
    *n = 0;
    int fd = dup(dirfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return herd_err_set(err, HERD_EIO, "checkpoint directory %s: cannot list: %s", dir, strerror(errno));
    }
    rewinddir(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        uint64_t s;
        if (ckpt_name(e->d_name, &s)) {
            if (*n < cap)
                steps[(*n)++] = s;
            else { /* keep the newest cap */
                size_t lo = 0;
                for (size_t i = 1; i < cap; i++)
                    if (steps[i] < steps[lo])
                        lo = i;
                if (cap && s > steps[lo])
                    steps[lo] = s;
            }
        } else if (clean && tmp_name(e->d_name)) {
            unlinkat(dirfd, e->d_name, 0);
        }
    }
    closedir(d);
    qsort(steps, *n, sizeof *steps, cmp_desc);
    return HERD_OK;
}

/* The arguments of herd_ckpt_write past its pointers, checked; *total: the
 * file's size. */
static herd_status check_write(const herd_ckpt_info *info, const herd_ckpt_section *secs, size_t nsecs,
                               size_t keep, uint64_t *total, herd_err *err)
{
    if (keep < 1)
        return herd_err_set(err, HERD_EINVAL, "herd_ckpt_write: keep must be at least 1");
    if (nsecs > HERD_CKPT_MAX_SECTIONS)
        return herd_err_set(err, HERD_EINVAL, "checkpoint: %zu sections (at most %u)", nsecs,
                            (unsigned)HERD_CKPT_MAX_SECTIONS);
    if (!valid_text((const unsigned char *)info->model, sizeof info->model) ||
        !valid_text((const unsigned char *)info->algo, sizeof info->algo))
        return herd_err_set(err, HERD_EINVAL, "checkpoint: model or algorithm name is not printable or too long");
    *total = HERD_CKPT_HEADER_BYTES + nsecs * HERD_CKPT_ENTRY_BYTES;
    for (size_t i = 0; i < nsecs; i++) {
        if (!secs[i].name || !valid_name(secs[i].name, HERD_CKPT_NAME_BYTES))
            return herd_err_set(err, HERD_EINVAL, "checkpoint: section %zu: name '%s' is not 1..23 of [a-z0-9_]", i,
                                secs[i].name ? secs[i].name : "(null)");
        if (secs[i].worker >= info->workers || (secs[i].bytes && !secs[i].data))
            return herd_err_set(err, HERD_EINVAL, "checkpoint: section '%s': worker %u of %u, %zu bytes", secs[i].name,
                                secs[i].worker, info->workers, secs[i].bytes);
        for (size_t j = 0; j < i; j++)
            if (secs[j].worker == secs[i].worker && !strcmp(secs[j].name, secs[i].name))
                return herd_err_set(err, HERD_EINVAL, "checkpoint: section '%s' of worker %u given twice", secs[i].name,
                                    secs[i].worker);
        *total += secs[i].bytes;
    }
    return HERD_OK;
}

/* The header and section table (hbytes), its CRC included; NULL: no memory. */
static unsigned char *make_header(const herd_ckpt_info *info, const herd_ckpt_section *secs, size_t nsecs,
                                  size_t hbytes, uint64_t total)
{
    unsigned char *hdr = calloc(1, hbytes);
    if (!hdr)
        return NULL;
    memcpy(hdr, MAGIC, 8);
    put32(hdr + 8, HERD_CKPT_VERSION);
    put32(hdr + 12, (uint32_t)hbytes);
    put64(hdr + 16, total);
    put64(hdr + 24, info->step);
    put64(hdr + 32, info->epoch);
    put64(hdr + 40, info->nparams);
    put64(hdr + 48, info->seed);
    put64(hdr + 56, info->steps_per_epoch);
    put32(hdr + 64, info->workers);
    put32(hdr + 68, info->batch);
    put32(hdr + 72, (uint32_t)nsecs);
    memcpy(hdr + 80, info->model, strlen(info->model));
    memcpy(hdr + 100, info->algo, strlen(info->algo));
    uint64_t off = hbytes;
    for (size_t i = 0; i < nsecs; i++) {
        unsigned char *e = hdr + HERD_CKPT_HEADER_BYTES + i * HERD_CKPT_ENTRY_BYTES;
        memcpy(e, secs[i].name, strlen(secs[i].name));
        put32(e + 24, secs[i].worker);
        put32(e + 28, herd_crc32c(0, secs[i].data, secs[i].bytes));
        put64(e + 32, off);
        put64(e + 40, secs[i].bytes);
        off += secs[i].bytes;
    }
    uint32_t crc = herd_crc32c(0, hdr, HDR_CRC_AT);
    put32(hdr + HDR_CRC_AT, herd_crc32c(crc, hdr + HERD_CKPT_HEADER_BYTES, hbytes - HERD_CKPT_HEADER_BYTES));
    return hdr;
}

/* After the new checkpoint of `step` is durable: the older ones beyond the
 * newest `keep` go. Files of later steps than this one (left by a run
 * resumed from an earlier checkpoint, because they were not valid) are not
 * counted and not touched: they must never push out the file just written. */
static void prune(int dirfd, const char *dir, uint64_t step, size_t keep)
{
    uint64_t *steps = malloc(HERD_CKPT_MAX_LIST * sizeof *steps);
    size_t n = 0;
    if (steps && list_fd(dirfd, dir, steps, HERD_CKPT_MAX_LIST, &n, true, NULL) == HERD_OK) {
        size_t kept = 0, removed = 0;
        for (size_t i = 0; i < n; i++) {
            if (steps[i] > step || kept++ < keep)
                continue;
            char old[64];
            snprintf(old, sizeof old, "ckpt-%" PRIu64 ".herd", steps[i]);
            removed += unlinkat(dirfd, old, 0) == 0;
        }
        if (removed)
            fsync(dirfd);
    }
    free(steps);
}

herd_status herd_ckpt_write(const char *dir, const herd_ckpt_info *info, const herd_ckpt_section *secs,
                            size_t nsecs, size_t keep, herd_err *err)
{
    herd_status st = HERD_OK;
    int dirfd = -1, fd = -1;
    unsigned char *hdr = NULL;
    char tmp[64], final[64];
    bool tmp_made = false;
    uint64_t total = 0;
    HERD_TRY(HERD__NONNULL(err, dir, info));
    if (nsecs)
        HERD_TRY(HERD__NONNULL(err, secs));
    HERD_TRY(check_write(info, secs, nsecs, keep, &total, err));
    size_t hbytes = HERD_CKPT_HEADER_BYTES + nsecs * HERD_CKPT_ENTRY_BYTES;
    if (!(hdr = make_header(info, secs, nsecs, hbytes, total))) {
        st = herd_err_set(err, HERD_ENOMEM, "checkpoint: out of memory for the header");
        goto out;
    }
    /* written to a temporary name, fsynced, renamed, the directory fsynced */
    snprintf(tmp, sizeof tmp, ".ckpt-%" PRIu64 ".tmp", info->step);
    snprintf(final, sizeof final, "ckpt-%" PRIu64 ".herd", info->step);
    dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0) {
        st = herd_err_set(err, errno == ENOENT ? HERD_ENOTFOUND : HERD_EIO, "checkpoint directory %s: %s", dir,
                          strerror(errno));
        goto out;
    }
    unlinkat(dirfd, tmp, 0); /* left by a writer that was killed */
    fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = herd_err_set(err, HERD_EIO, "checkpoint %s/%s: cannot create: %s", dir, tmp, strerror(errno));
        goto out;
    }
    tmp_made = true;
    HERD_TRY(write_all(fd, hdr, hbytes, dir, tmp, err));
    for (size_t i = 0; i < nsecs; i++)
        HERD_TRY(write_all(fd, secs[i].data, secs[i].bytes, dir, tmp, err));
    if (fsync(fd) != 0) {
        st = herd_err_set(err, HERD_EIO, "checkpoint %s/%s: fsync failed: %s", dir, tmp, strerror(errno));
        goto out;
    }
    int cfd = fd;
    fd = -1;
    if (close(cfd) != 0) {
        st = herd_err_set(err, HERD_EIO, "checkpoint %s/%s: close failed: %s", dir, tmp, strerror(errno));
        goto out;
    }
    if (renameat(dirfd, tmp, dirfd, final) != 0) {
        st = herd_err_set(err, HERD_EIO, "checkpoint: cannot rename %s/%s to %s: %s", dir, tmp, final, strerror(errno));
        goto out;
    }
    tmp_made = false;
    if (fsync(dirfd) != 0) {
        st = herd_err_set(err, HERD_EIO, "checkpoint directory %s: fsync failed: %s", dir, strerror(errno));
        goto out;
    }
    prune(dirfd, dir, info->step, keep);
out:
    if (fd >= 0)
        close(fd);
    if (tmp_made)
        unlinkat(dirfd, tmp, 0);
    if (dirfd >= 0)
        close(dirfd);
    free(hdr);
    return st;
}

/* ---- reading -------------------------------------------------------------- */

struct herd_ckpt {
    herd_ckpt_info info;
    char label[256];
    unsigned char *bytes;
    size_t len, nsecs;
    herd_ckpt_section *secs; /* names and data point into bytes */
    char (*names)[HERD_CKPT_NAME_BYTES];
};

uint64_t herd__ckpt_content_digest(const herd_ckpt *ck) { return herd__digest64(ck->bytes, ck->len, 0); }

void herd_ckpt_free(herd_ckpt *ck)
{
    if (!ck)
        return;
    free(ck->bytes);
    free(ck->secs);
    free(ck->names);
    free(ck);
}

/* The fixed header: magic, version, the header's and the file's sizes
 * (*hbytes, *fbytes) against the file's, the number of sections (*nsecs),
 * the header's checksum. */
static herd_status verify_header(const herd_ckpt *ck, uint32_t *hbytes_out, uint32_t *nsecs_out, uint64_t *fbytes_out,
                                 herd_err *err)
{
    const unsigned char *b = ck->bytes;
    size_t len = ck->len;
    const char *f = ck->label;
    if (len < HERD_CKPT_HEADER_BYTES)
        return herd_err_set(err, HERD_ECORRUPT, "checkpoint %s: truncated: %zu bytes, shorter than the %d-byte header",
                            f, len, HERD_CKPT_HEADER_BYTES);
    if (memcmp(b, MAGIC, 8))
        return herd_err_set(err, HERD_ECORRUPT, "checkpoint %s: not a herd checkpoint (wrong magic bytes)", f);
    uint32_t version = get32(b + 8);
    if (version != HERD_CKPT_VERSION)
        return herd_err_set(err, version > HERD_CKPT_VERSION ? HERD_EUNSUPPORTED : HERD_ECORRUPT,
                            "checkpoint %s: format version %" PRIu32 ", this herd reads version %d", f, version,
                            HERD_CKPT_VERSION);
    uint32_t hbytes = get32(b + 12), nsecs = get32(b + 72);
    if (nsecs > HERD_CKPT_MAX_SECTIONS ||
        hbytes != HERD_CKPT_HEADER_BYTES + (uint64_t)nsecs * HERD_CKPT_ENTRY_BYTES)
        return herd_err_set(err, HERD_ECORRUPT,
                            "checkpoint %s: corrupt header: %" PRIu32 " sections cannot make a %" PRIu32 "-byte header",
                            f, nsecs, hbytes);
    if (hbytes > len)
        return herd_err_set(err, HERD_ECORRUPT,
                            "checkpoint %s: truncated: %zu bytes, the header and section table need %" PRIu32, f, len,
                            hbytes);
    uint32_t crc = herd_crc32c(herd_crc32c(0, b, HDR_CRC_AT), b + HERD_CKPT_HEADER_BYTES,
                               hbytes - HERD_CKPT_HEADER_BYTES);
    if (crc != get32(b + HDR_CRC_AT))
        return herd_err_set(err, HERD_ECORRUPT,
                            "checkpoint %s: header checksum mismatch (stored %08" PRIx32 ", computed %08" PRIx32 ")", f,
                            get32(b + HDR_CRC_AT), crc);
    uint64_t fbytes = get64(b + 16);
    if (fbytes > len)
        return herd_err_set(err, HERD_ECORRUPT, "checkpoint %s: truncated: %zu of %" PRIu64 " bytes", f, len, fbytes);
    if (fbytes < len)
        return herd_err_set(err, HERD_ECORRUPT, "checkpoint %s: %zu bytes of trailing data after its %" PRIu64 " bytes",
                            f, len - (size_t)fbytes, fbytes);
    *hbytes_out = hbytes, *nsecs_out = nsecs, *fbytes_out = fbytes;
    return HERD_OK;
}

/* The header's fields into ck->info. */
static herd_status read_info(herd_ckpt *ck, herd_err *err)
{
    const unsigned char *b = ck->bytes;
    const char *f = ck->label;
    herd_ckpt_info *in = &ck->info;
    in->step = get64(b + 24), in->epoch = get64(b + 32), in->nparams = get64(b + 40), in->seed = get64(b + 48);
    in->steps_per_epoch = get64(b + 56);
    in->workers = get32(b + 64), in->batch = get32(b + 68);
    if (get32(b + 76) != 0)
        return herd_err_set(err, HERD_ECORRUPT, "checkpoint %s: corrupt header: reserved field is %08" PRIx32, f,
                            get32(b + 76));
    if (!valid_text(b + 80, sizeof in->model) || !valid_text(b + 100, sizeof in->algo))
        return herd_err_set(err, HERD_ECORRUPT, "checkpoint %s: corrupt header: model or algorithm name", f);
    memcpy(in->model, b + 80, sizeof in->model);
    memcpy(in->algo, b + 100, sizeof in->algo);
    if (in->workers == 0)
        return herd_err_set(err, HERD_ECORRUPT, "checkpoint %s: corrupt header: 0 workers", f);
    return HERD_OK;
}

/* The section table: each section's name, worker and checksum; the
 * sections lie one after another from the header's end (hbytes) to the
 * file's (fbytes). */
static herd_status read_sections(herd_ckpt *ck, uint32_t hbytes, uint32_t nsecs, uint64_t fbytes, herd_err *err)
{
    const unsigned char *b = ck->bytes;
    const char *f = ck->label;
    const herd_ckpt_info *in = &ck->info;
    ck->nsecs = nsecs;
    ck->secs = calloc(nsecs ? nsecs : 1, sizeof *ck->secs);
    ck->names = calloc(nsecs ? nsecs : 1, sizeof *ck->names);
    if (!ck->secs || !ck->names)
        return herd_err_set(err, HERD_ENOMEM, "checkpoint %s: out of memory for %" PRIu32 " sections", f, nsecs);
    uint64_t at = hbytes;
    for (size_t i = 0; i < nsecs; i++) {
        const unsigned char *e = b + HERD_CKPT_HEADER_BYTES + i * HERD_CKPT_ENTRY_BYTES;
        if (!valid_text(e, HERD_CKPT_NAME_BYTES) || !valid_name((const char *)e, HERD_CKPT_NAME_BYTES))
            return herd_err_set(err, HERD_ECORRUPT, "checkpoint %s: section %zu has an invalid name", f, i);
        memcpy(ck->names[i], e, HERD_CKPT_NAME_BYTES);
        uint32_t worker = get32(e + 24);
        uint64_t off = get64(e + 32), bytes = get64(e + 40);
        if (worker >= in->workers)
            return herd_err_set(err, HERD_ECORRUPT, "checkpoint %s: section '%s' is of worker %" PRIu32 " of %" PRIu32,
                                f, ck->names[i], worker, in->workers);
        if (off != at || bytes > fbytes - at)
            return herd_err_set(err, HERD_ECORRUPT,
                                "checkpoint %s: section '%s' of worker %" PRIu32 " claims bytes [%" PRIu64 ", +%" PRIu64
                                ") but the file has its data at %" PRIu64 " and ends at %" PRIu64,
                                f, ck->names[i], worker, off, bytes, at, fbytes);
        for (size_t j = 0; j < i; j++)
            if (ck->secs[j].worker == worker && !strcmp(ck->names[j], ck->names[i]))
                return herd_err_set(err, HERD_ECORRUPT, "checkpoint %s: section '%s' of worker %" PRIu32 " appears twice",
                                    f, ck->names[i], worker);
        uint32_t c = herd_crc32c(0, b + off, (size_t)bytes);
        if (c != get32(e + 28))
            return herd_err_set(err, HERD_ECORRUPT,
                                "checkpoint %s: section '%s' of worker %" PRIu32 ": checksum mismatch (stored %08" PRIx32
                                ", computed %08" PRIx32 ")",
                                f, ck->names[i], worker, get32(e + 28), c);
        ck->secs[i] = (herd_ckpt_section){.name = ck->names[i], .worker = worker, .data = b + off, .bytes = (size_t)bytes};
        at = off + bytes;
    }
    if (at != fbytes)
        return herd_err_set(err, HERD_ECORRUPT,
                            "checkpoint %s: %" PRIu64 " bytes after the last section belong to no section", f, fbytes - at);
    return HERD_OK;
}

/* Verifies ck's bytes and fills its header and section table. */
static herd_status verify(herd_ckpt *ck, herd_err *err)
{
    herd_status st = HERD_OK;
    uint32_t hbytes = 0, nsecs = 0;
    uint64_t fbytes = 0;
    HERD_TRY(verify_header(ck, &hbytes, &nsecs, &fbytes, err));
    HERD_TRY(read_info(ck, err));
    HERD_TRY(read_sections(ck, hbytes, nsecs, fbytes, err));
out:
    return st;
}

/* Takes ownership of bytes (freed on failure too). */
static herd_status adopt(unsigned char *bytes, size_t len, const char *label, herd_ckpt **out, herd_err *err)
{
    *out = NULL;
    herd_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck) {
        free(bytes);
        return herd_err_set(err, HERD_ENOMEM, "checkpoint %s: out of memory", label);
    }
    ck->bytes = bytes, ck->len = len;
    snprintf(ck->label, sizeof ck->label, "%s", label ? label : "(memory)");
    herd_status st = verify(ck, err);
    if (st < 0) {
        herd_ckpt_free(ck);
        return st;
    }
    *out = ck;
    return HERD_OK;
}

herd_status herd_ckpt_parse(const void *buf, size_t len, const char *label, herd_ckpt **out, herd_err *err)
{
    herd_status st = HERD__NONNULL(err, out);
    if (st < 0)
        return st;
    *out = NULL;
    if (len && !buf)
        return HERD__NONNULL(err, buf);
    unsigned char *copy = malloc(len ? len : 1);
    if (!copy)
        return herd_err_set(err, HERD_ENOMEM, "checkpoint %s: out of memory for %zu bytes", label ? label : "(memory)", len);
    if (len)
        memcpy(copy, buf, len);
    return adopt(copy, len, label, out, err);
}

herd_status herd_ckpt_read(const char *dir, const char *name, herd_ckpt **out, herd_err *err)
{
    herd_status st = HERD_OK;
    int dirfd = -1, fd = -1;
    unsigned char *buf = NULL;
    char label[256];
    if ((st = HERD__NONNULL(err, dir, name, out)) < 0)
        return st;
    *out = NULL;
    if (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
        return herd_err_set(err, HERD_EINVAL,
                            "checkpoint name '%s' is not a plain file name inside %s (herd reads checkpoints only there)",
                            name, dir);
    snprintf(label, sizeof label, "%s/%s", dir, name);
    dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return herd_err_set(err, errno == ENOENT ? HERD_ENOTFOUND : HERD_EIO, "checkpoint directory %s: %s", dir,
                            strerror(errno));
    fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        st = herd_err_set(err, errno == ENOENT ? HERD_ENOTFOUND : HERD_EIO, "checkpoint %s: %s", label,
                          errno == ELOOP ? "is a symbolic link (herd does not follow links out of the checkpoint directory)"
                                         : strerror(errno));
        goto out;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = herd_err_set(err, HERD_EIO, "checkpoint %s: not a regular file", label);
        goto out;
    }
    if ((uint64_t)sb.st_size > MAX_FILE_BYTES) {
        st = herd_err_set(err, HERD_ECORRUPT, "checkpoint %s: %lld bytes is beyond any checkpoint herd writes", label,
                          (long long)sb.st_size);
        goto out;
    }
    size_t len = (size_t)sb.st_size, n = 0;
    buf = malloc(len ? len : 1);
    if (!buf) {
        st = herd_err_set(err, HERD_ENOMEM, "checkpoint %s: out of memory for %zu bytes", label, len);
        goto out;
    }
    while (n < len) {
        ssize_t r = read(fd, buf + n, len - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            st = herd_err_set(err, HERD_EIO, "checkpoint %s: read failed: %s", label, strerror(errno));
            goto out;
        }
        if (r == 0)
            break; /* shrank under us: verify reports it as truncated */
        n += (size_t)r;
    }
    st = adopt(buf, n, label, out, err);
    buf = NULL;
out:
    free(buf);
    if (fd >= 0)
        close(fd);
    close(dirfd);
    return st;
}

const herd_ckpt_info *herd_ckpt_get_info(const herd_ckpt *ck) { return &ck->info; }
const char *herd_ckpt_label(const herd_ckpt *ck) { return ck->label; }
size_t herd_ckpt_nsections(const herd_ckpt *ck) { return ck->nsecs; }

herd_ckpt_section herd_ckpt_section_at(const herd_ckpt *ck, size_t i)
{
    HERD_ASSERT(i < ck->nsecs);
    return ck->secs[i];
}

/* A worker no section can have (the reader checked every section's): a
 * wrong index, not a missing section. */
static herd_status check_worker(const herd_ckpt *ck, uint32_t worker, const char *fn, herd_err *err)
{
    if (worker < ck->info.workers)
        return HERD_OK;
    return herd_err_set(err, HERD_EINVAL, "%s: worker %" PRIu32 " is not one of checkpoint %s's %" PRIu32 " workers",
                        fn, worker, ck->label, ck->info.workers);
}

herd_status herd_ckpt_find(const herd_ckpt *ck, const char *name, uint32_t worker, herd_ckpt_section *out,
                           herd_err *err)
{
    herd_status st = HERD__NONNULL(err, ck, name, out);
    if (st < 0 || (st = check_worker(ck, worker, __func__, err)) < 0)
        return st;
    for (size_t i = 0; i < ck->nsecs; i++)
        if (ck->secs[i].worker == worker && !strcmp(ck->secs[i].name, name)) {
            *out = ck->secs[i];
            return HERD_OK;
        }
    return herd_err_set(err, HERD_ENOTFOUND, "checkpoint %s has no section '%s' for worker %" PRIu32, ck->label, name,
                        worker);
}

herd_status herd_ckpt_copy(const herd_ckpt *ck, const char *name, uint32_t worker, void *dst, size_t bytes,
                           herd_err *err)
{
    herd_ckpt_section s = {0};
    herd_status st = HERD__NONNULL(err, ck, name);
    if (st < 0 || (bytes && (st = HERD__NONNULL(err, dst)) < 0) || (st = check_worker(ck, worker, __func__, err)) < 0)
        return st;
    if ((st = herd_ckpt_find(ck, name, worker, &s, err)) < 0)
        return st;
    if (s.bytes != bytes)
        return herd_err_set(err, HERD_EINVAL,
                            "checkpoint %s: section '%s' of worker %" PRIu32 " holds %zu bytes, this run needs %zu", ck->label,
                            name, worker, s.bytes, bytes);
    if (bytes)
        memcpy(dst, s.data, bytes);
    return HERD_OK;
}

/* ---- the directory -------------------------------------------------------- */

herd_status herd_ckpt_list(const char *dir, uint64_t *steps, size_t cap, size_t *n, herd_err *err)
{
    herd_status st = HERD__NONNULL(err, dir, n);
    if (st < 0 || (cap && (st = HERD__NONNULL(err, steps)) < 0))
        return st;
    *n = 0;
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return herd_err_set(err, errno == ENOENT ? HERD_ENOTFOUND : HERD_EIO, "checkpoint directory %s: %s", dir,
                            strerror(errno));
    st = list_fd(dirfd, dir, steps, cap, n, false, err);
    close(dirfd);
    return st;
}

/* One line into warn[used..cap), NUL-terminated. */
static void warn_line(char *warn, size_t cap, size_t *used, const char *msg)
{
    if (!warn || *used + 1 >= cap)
        return;
    int k = snprintf(warn + *used, cap - *used, "%s\n", msg);
    *used = k < 0 ? *used : *used + (size_t)k < cap ? *used + (size_t)k : cap - 1;
}

herd_status herd_ckpt_latest(const char *dir, herd_ckpt **out, char *warn, size_t cap, size_t *skipped, herd_err *err)
{
    herd_status st = HERD_OK;
    size_t n = 0, nskip = 0, used = 0;
    herd_ckpt *best = NULL;
    herd_err *bad = NULL; /* per file: why it does not read (status OK: it does) */
    if ((st = HERD__NONNULL(err, dir, out)) < 0)
        return st;
    *out = NULL;
    if (warn && cap)
        warn[0] = 0;
    uint64_t *steps = malloc(HERD_CKPT_MAX_LIST * sizeof *steps);
    if (!steps)
        return herd_err_set(err, HERD_ENOMEM, "checkpoint directory %s: out of memory", dir);
    HERD_TRY(herd_ckpt_list(dir, steps, HERD_CKPT_MAX_LIST, &n, err));
    if (n == 0) {
        st = herd_err_set(err, HERD_ENOTFOUND, "checkpoint directory %s holds no checkpoint (ckpt-<step>.herd)", dir);
        goto out;
    }
    if (!(bad = calloc(n, sizeof *bad))) {
        st = herd_err_set(err, HERD_ENOMEM, "checkpoint directory %s: out of memory", dir);
        goto out;
    }
    /* The step in a file's header decides which is newest, not its name
     * (a file renamed to a later step's name is not the newest): every
     * file is read. */
    for (size_t i = 0; i < n; i++) {
        char name[64];
        herd_ckpt *ck = NULL;
        snprintf(name, sizeof name, "ckpt-%" PRIu64 ".herd", steps[i]);
        herd_status rs = herd_ckpt_read(dir, name, &ck, &bad[i]);
        if (rs == HERD_ENOMEM) {
            st = herd_err_set(err, rs, "%s", bad[i].msg);
            goto out;
        }
        if (rs < 0)
            continue;
        bad[i].status = HERD_OK;
        if (ck->info.step != steps[i]) {
            char note[512];
            snprintf(note, sizeof note, "checkpoint %s/%s: its header says step %" PRIu64 ", not %" PRIu64
                     " (a renamed file?): taken as step %" PRIu64, dir, name, ck->info.step, steps[i], ck->info.step);
            warn_line(warn, cap, &used, note);
        }
        if (!best || ck->info.step > best->info.step) {
            herd_ckpt_free(best);
            best = ck;
        } else {
            herd_ckpt_free(ck);
        }
    }
    /* the files named after a later step than the one taken, that do not read */
    for (size_t i = 0; i < n; i++)
        if (bad[i].status < 0 && (!best || steps[i] > best->info.step)) {
            nskip++;
            warn_line(warn, cap, &used, bad[i].msg);
        }
    if (!best)
        st = herd_err_set(err, HERD_ECORRUPT, "checkpoint directory %s: none of its %zu checkpoint(s) is valid; the newest: %s",
                          dir, n, bad[0].msg);
out:
    if (st == HERD_OK)
        *out = best;
    else
        herd_ckpt_free(best);
    if (skipped)
        *skipped = nskip;
    free(bad);
    free(steps);
    return st;
}
