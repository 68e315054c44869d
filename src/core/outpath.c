/* Output paths that are never destroyed (outpath.h). */
#include "core/outpath.h"
#include "core/inpath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

herd_status herd__outpath_check(const char *path, const char *what, herd__outpath *out, herd_err *err)
{
    *out = (herd__outpath){0};
    if (!path || !*path)
        return herd_err_set(err, HERD_EINVAL, "%s: an empty file name", what);
    if (strlen(path) >= sizeof out->path)
        return herd_err_set(err, HERD_EINVAL, "%s: the name %.64s... is too long", what, path);
    snprintf(out->path, sizeof out->path, "%s", path);
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT)
            return herd_err_set(err, HERD_EIO, "%s %s: %s", what, path, strerror(errno));
        return HERD_OK; /* a new name */
    }
    bool named = true; /* what is written has a path of its own, which a rename can replace */
    if (S_ISLNK(st.st_mode)) {
        char target[PATH_MAX];
        if (stat(path, &st) != 0)
            return herd_err_set(err, HERD_EINVAL, "%s %s: a symbolic link to %s (%s); herd writes to what a link names, "
                                                  "and will not replace the link",
                                what, path, errno == ENOENT ? "a missing file" : "a path it cannot follow",
                                strerror(errno));
        /* a link the kernel follows but that names no path (/dev/stdout on
         * a pipe: /proc/self/fd/1 -> pipe:[n]; a deleted file) is written in
         * place through the link, never renamed over it */
        named = realpath(path, target) && strlen(target) < sizeof out->path;
        if (named)
            snprintf(out->path, sizeof out->path, "%s", target);
    }
    if (S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
        out->in_place = !S_ISREG(st.st_mode) || !named;
        return HERD_OK;
    }
    return herd_err_set(err, HERD_EINVAL,
                        "%s %s: is %s; herd writes a new file, a regular file, a FIFO or a character device, "
                        "and will not replace %s",
                        what, path, herd__inpath_kind(st.st_mode), herd__inpath_kind(st.st_mode));
}

herd_status herd__outpath_open_in_place(const herd__outpath *out, const char *what, int *fd, herd_err *err)
{
    *fd = open(out->path, O_WRONLY | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
    if (*fd < 0) {
        if (errno == ENXIO)
            return herd_err_set(err, HERD_EINVAL, "%s %s: a FIFO that no process reads (start the reader first)",
                                what, out->path);
        return herd_err_set(err, HERD_EIO, "%s %s: %s", what, out->path, strerror(errno));
    }
    int fl = fcntl(*fd, F_GETFL);
    if (fl < 0 || fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK) != 0) { /* writes wait for a slow reader, as a stream's do */
        herd_status st = herd_err_set(err, HERD_EIO, "%s %s: fcntl: %s", what, out->path, strerror(errno));
        close(*fd);
        *fd = -1;
        return st;
    }
    return HERD_OK;
}

herd_status herd__outpath_fopen(const char *path, const char *mode, const char *what, FILE **f, herd_err *err)
{
    *f = NULL;
    herd__outpath o;
    int fd = -1;
    herd_status st = herd__outpath_check(path, what, &o, err);
    if (st == HERD_OK && o.in_place)
        st = herd__outpath_open_in_place(&o, what, &fd, err);
    if (st < 0)
        return st;
    if (!(*f = o.in_place ? fdopen(fd, mode) : fopen(o.path, mode))) {
        st = herd_err_set(err, HERD_EIO, "%s %s: %s", what, path, strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    return st;
}

bool herd__outpath_same(const char *a, const char *b)
{
    struct stat sa, sb;
    bool ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea && eb)
        return S_ISREG(sa.st_mode) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    if (ea || eb)
        return false;
    char da[PATH_MAX], db[PATH_MAX], ra[PATH_MAX], rb[PATH_MAX];
    const char *na = herd__path_split(a, da, sizeof da), *nb = herd__path_split(b, db, sizeof db);
    return !strcmp(na, nb) && realpath(da, ra) && realpath(db, rb) && !strcmp(ra, rb);
}

const char *herd__path_split(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (dir && cap)
        snprintf(dir, cap, "%.*s", slash ? (slash == path ? 1 : (int)(slash - path)) : 1, slash ? path : ".");
    return slash ? slash + 1 : path;
}
