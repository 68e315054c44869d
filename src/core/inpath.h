/* Input files a user names (--model FILE, --platform FILE, --config FILE,
 * a data set's files): opened without waiting, regular files only.
 *
 * open() on a FIFO waits for a writer that may never come, so a plain
 * fopen() of a user's path can hang the command before it has read a byte.
 * herd__inpath_open opens with O_NONBLOCK, refuses everything but a regular
 * file (a FIFO, a directory, a device, a socket), then makes the descriptor
 * blocking again. The caller owns the descriptor. Links are followed. */
#ifndef HERD_CORE_INPATH_H
#define HERD_CORE_INPATH_H

#include <stdio.h>
#include <sys/stat.h>

#include "herd/herd_status.h"

/* *fd: the regular file at path, open for reading (close-on-exec), and
 * *sb its status. Returns HERD_OK; HERD_ENOTFOUND where nothing is at
 * path; HERD_EINVAL where something is but not a regular file (*sb says
 * what); HERD_EIO where it cannot be opened (errno says why). *fd is -1
 * on failure. No message is written: each caller names its flag. */
herd_status herd__inpath_open(const char *path, int *fd, struct stat *sb);

/* The same as a stdio stream ("r"), NULL where herd__inpath_open fails
 * (errno set): for files herd wrote itself and reads back, which a user
 * may have replaced by a FIFO. */
FILE *herd__inpath_fopen(const char *path);

/* "a directory", "a FIFO", "a character device"...: what the mode names,
 * for messages (output paths' too, core/outpath.h). */
const char *herd__inpath_kind(mode_t mode);

#endif
