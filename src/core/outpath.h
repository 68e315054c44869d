/* Output paths that are never destroyed (export, --dump-logits, --log,
 * --trace): what a path names is looked at before anything is written.
 *   - a new name, or a regular file: written whole through a temporary
 *     file beside it and renamed over it (a failure leaves what was there);
 *   - a symbolic link: followed; its target is what is written (the link
 *     stays a link), in place where the target has no path of its own
 *     (/dev/stdout on a pipe), and a link to nothing is refused;
 *   - a FIFO or a character device (/dev/stdout, /dev/null, a terminal):
 *     written in place, as a stream; a FIFO that no process reads is
 *     refused, not waited on;
 *   - anything else (a directory, a block device, a socket): refused.
 * Refusals are HERD_EINVAL, naming the path and what it is. */
#ifndef HERD_CORE_OUTPATH_H
#define HERD_CORE_OUTPATH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "herd/herd_status.h"

typedef struct herd__outpath {
    char path[4096]; /* what is written: the link's target where path was a link */
    bool in_place;   /* a FIFO, a character device, or a link that names no path: written as it is */
} herd__outpath;

/* Looks at `path` (`what` names it in messages, e.g. "--trace"). */
herd_status herd__outpath_check(const char *path, const char *what, herd__outpath *out, herd_err *err);

/* Opens out's path for writing in place (in_place only) into *fd:
 * O_WRONLY, and for a FIFO without blocking on a missing reader. */
herd_status herd__outpath_open_in_place(const herd__outpath *out, const char *what, int *fd, herd_err *err);

/* fopen(path, mode) into *f after the checks above ("w" or "a"; a
 * regular file or a new name is opened as fopen does, through a link to
 * its target; a FIFO or a character device in place). */
herd_status herd__outpath_fopen(const char *path, const char *mode, const char *what, FILE **f, herd_err *err);

/* Whether paths a and b name the same regular file, or the same new name
 * in the same directory: two outputs written there would leave one of
 * them (a device or a FIFO written twice in place is not the same file). */
bool herd__outpath_same(const char *a, const char *b);

/* Splits path at its last '/': its directory into dir (cap bytes; "." where
 * path has none, "/" for a name at the root; dir may be NULL) and its last
 * component, returned as a pointer into path. */
const char *herd__path_split(const char *path, char *dir, size_t cap);

#endif
