/* Input files opened without waiting (inpath.h). */
#include "core/inpath.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

herd_status herd__inpath_open(const char *path, int *fd, struct stat *sb)
{
    *fd = -1;
    if (!path || !*path) {
        errno = ENOENT;
        return HERD_ENOTFOUND;
    }
    int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0)
        return errno == ENOENT ? HERD_ENOTFOUND : HERD_EIO;
    int fl;
    if (fstat(f, sb) != 0 || (fl = fcntl(f, F_GETFL)) < 0) {
        int e = errno;
        close(f);
        errno = e;
        return HERD_EIO;
    }
    if (!S_ISREG(sb->st_mode)) {
        close(f);
        errno = EINVAL;
        return HERD_EINVAL;
    }
    if (fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) { /* reads of a regular file never wait anyway */
        int e = errno;
        close(f);
        errno = e;
        return HERD_EIO;
    }
    *fd = f;
    return HERD_OK;
}

FILE *herd__inpath_fopen(const char *path)
{
    int fd;
    struct stat sb;
    if (herd__inpath_open(path, &fd, &sb) != HERD_OK)
        return NULL;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

const char *herd__inpath_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return S_ISREG(mode) ? "a regular file" : "not a regular file";
}
