/* A data set as a folder of images per class, torchvision's ImageFolder
 * layout: DIR/train/CLASS/NAME.png (.jpg, .jpeg) and DIR/test/CLASS/... The
 * classes are train/'s folders, sorted by byte value (as Python sorts
 * their names); an example's label is its class's place in that order,
 * and a test folder of a class train/ lacks is refused. Examples are read
 * class by class, files by name. Every image must have the first image's
 * shape (channels, height, width): herd does not resize.
 *
 * Names starting with '.' are skipped (a .ipynb_checkpoints folder is not a
 * class), and so are files of other extensions; a class folder's
 * subfolders are not read.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "data/data_parse.h"

/* An image of at most 2^26 samples (a 4096 x 4096 RGB picture fits), a set
 * of at most 8 GiB of floats. */
#define IMAGE_MAX_VALUES ((size_t)1 << 26)
#define SET_MAX_BYTES (8.0 * (1u << 30))
enum { PATH_CAP = 4096 };

/* a/b into out (PATH_CAP bytes); refused where it does not fit. */
static herd_status join(char *out, const char *a, const char *b, herd_err *err)
{
    int k = snprintf(out, PATH_CAP, "%s/%s", a, b);
    if (k < 0 || k >= PATH_CAP)
        return herd_err_set(err, HERD_EINVAL, "%s/%s: a path longer than %d bytes", a, b, PATH_CAP - 1);
    return HERD_OK;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static bool is_dir(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool is_image_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

/* dir's entries that are not hidden, sorted by byte value: its folders
 * (dirs), else its regular files of an image's extension; links followed.
 * *names (NULL-terminated, *n of them) is the caller's. */
static herd_status list(const char *dir, bool dirs, char ***names, size_t *n, herd_err *err)
{
    struct dirent **ents;
    *names = NULL, *n = 0;
    int m = scandir(dir, &ents, NULL, by_name);
    if (m < 0)
        return herd_err_set(err, HERD_EIO, "%s: cannot list: %s", dir, strerror(errno));
    char **out = calloc((size_t)m + 1, sizeof *out);
    herd_status st = out ? HERD_OK : herd_err_set(err, HERD_ENOMEM, "%s: out of memory", dir);
    for (int i = 0; i < m; i++) {
        const char *e = ents[i]->d_name;
        char path[PATH_CAP];
        struct stat sb;
        if (st == HERD_OK && e[0] != '.' && (st = join(path, dir, e, err)) == HERD_OK && stat(path, &sb) == 0 &&
            (dirs ? S_ISDIR(sb.st_mode) : S_ISREG(sb.st_mode) && is_image_name(e)) && !(out[(*n)++] = strdup(e)))
            st = herd_err_set(err, HERD_ENOMEM, "%s: out of memory", dir);
        free(ents[i]);
    }
    free(ents);
    *names = out;
    return st;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

/* One split's files: paths and labels, class by class. */
typedef struct split_files {
    char **paths;
    int32_t *labels;
    size_t n, cap;
} split_files;

static void free_split(split_files *s)
{
    free_names(s->paths, s->n);
    free(s->labels);
    memset(s, 0, sizeof *s);
}

static herd_status add_file(split_files *s, const char *dir, const char *name, int32_t label, herd_err *err)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        char **p = realloc(s->paths, cap * sizeof *p);
        if (p)
            s->paths = p;
        int32_t *l = p ? realloc(s->labels, cap * sizeof *l) : NULL;
        if (!l)
            return herd_err_set(err, HERD_ENOMEM, "%s: out of memory", dir);
        s->labels = l, s->cap = cap;
    }
    size_t len = strlen(dir) + strlen(name) + 2;
    if (!(s->paths[s->n] = malloc(len)))
        return herd_err_set(err, HERD_ENOMEM, "%s: out of memory", dir);
    snprintf(s->paths[s->n], len, "%s/%s", dir, name);
    s->labels[s->n++] = label;
    return HERD_OK;
}

/* The files of split DIR/part, labelled by their class's place in classes. */
static herd_status gather(const char *dir, const char *part, char **classes, size_t nclasses, split_files *s,
                          herd_err *err)
{
    herd_status st = HERD_OK;
    char root[PATH_CAP], cdir[PATH_CAP];
    char **sub = NULL, **files = NULL;
    size_t nsub = 0, nfiles = 0;
    HERD_TRY(join(root, dir, part, err));
    HERD_TRY(list(root, true, &sub, &nsub, err));
    if (nsub == 0) {
        st = herd_err_set(err, HERD_ECORRUPT, "%s: holds no class folders", root);
        goto out;
    }
    for (size_t k = 0; k < nsub; k++) {
        size_t label = 0;
        while (label < nclasses && strcmp(classes[label], sub[k]))
            label++;
        HERD_TRY(join(cdir, root, sub[k], err));
        if (label == nclasses) {
            st = herd_err_set(err, HERD_ECORRUPT, "%s: class '%s' is not one of %s/train's", cdir, sub[k], dir);
            goto out;
        }
        HERD_TRY(list(cdir, false, &files, &nfiles, err));
        if (nfiles == 0) {
            st = herd_err_set(err, HERD_ECORRUPT, "%s: holds no .png, .jpg or .jpeg images", cdir);
            goto out;
        }
        for (size_t i = 0; i < nfiles; i++)
            HERD_TRY(add_file(s, cdir, files[i], (int32_t)label, err));
        free_names(files, nfiles);
        files = NULL;
    }
out:
    free_names(sub, nsub);
    free_names(files, nfiles);
    return st;
}

/* Reads and decodes one file into example i of out, whose shape the first
 * image sets (out->n counts the examples read). */
static herd_status read_image(const char *path, size_t total, size_t i, herd_dataset *out, herd_err *err)
{
    herd_status st = HERD_OK;
    unsigned char *buf = NULL;
    size_t len;
    herd__image img = {0};
    HERD_TRY(herd__data_read_file(path, &buf, &len, err));
    HERD_TRY(herd__image_decode(buf, len, path, IMAGE_MAX_VALUES, &img, err));
    size_t dim = img.c * img.h * img.w;
    if (i == 0) {
        if ((double)total * (double)dim * sizeof(float) > SET_MAX_BYTES) {
            st = herd_err_set(err, HERD_EUNSUPPORTED, "%s: %zu images of %zux%zux%zu would take more than 8 GiB",
                              path, total, img.c, img.h, img.w);
            goto out;
        }
        out->c = img.c, out->h = img.h, out->w = img.w;
        if (!(out->x = malloc(total * dim * sizeof(float)))) {
            st = herd_err_set(err, HERD_ENOMEM, "%s: out of memory for %zu images", path, total);
            goto out;
        }
    } else if (img.c != out->c || img.h != out->h || img.w != out->w) {
        st = herd_err_set(err, HERD_ECORRUPT,
                          "%s: an image of %zux%zux%zu (channels x height x width), where the first image read is "
                          "%zux%zux%zu: herd does not resize", path, img.c, img.h, img.w, out->c, out->h, out->w);
        goto out;
    }
    for (size_t j = 0; j < dim; j++)
        out->x[i * dim + j] = (float)img.px[j] / 255.0f;
    out->n = i + 1;
out:
    free(buf);
    free(img.px);
    return st;
}

/* Decodes every file of s into out (zeroed first, freed on failure). */
static herd_status decode_split(const split_files *s, size_t nclasses, herd_dataset *out, herd_err *err)
{
    herd_status st = HERD_OK;
    memset(out, 0, sizeof *out);
    if (!(out->y = malloc(s->n * sizeof *out->y))) {
        st = herd_err_set(err, HERD_ENOMEM, "out of memory for %zu labels", s->n);
        goto out;
    }
    for (size_t i = 0; i < s->n; i++) {
        HERD_TRY(read_image(s->paths[i], s->n, i, out, err));
        out->y[i] = s->labels[i];
    }
    out->nclasses = nclasses;
out:
    if (st < 0)
        herd_dataset_free(out);
    return st;
}

herd_status herd__data_open_images(const char *dir, herd_dataset *train, herd_dataset *test, bool *found,
                                   herd_err *err)
{
    herd_status st = HERD_OK;
    char tr[PATH_CAP], te[PATH_CAP];
    char **classes = NULL;
    size_t nclasses = 0;
    split_files a = {0}, b = {0};
    HERD_TRY(join(tr, dir, "train", err));
    HERD_TRY(join(te, dir, "test", err));
    *found = is_dir(tr) || is_dir(te);
    if (!*found)
        return HERD_OK;
    if (!is_dir(tr) || !is_dir(te))
        return herd_err_set(err, HERD_ENOTFOUND, "%s: has %s/ but not %s/ (an image folder has both)", dir,
                            is_dir(tr) ? "train" : "test", is_dir(tr) ? "test" : "train");
    HERD_TRY(list(tr, true, &classes, &nclasses, err));
    if (nclasses < 2) {
        st = herd_err_set(err, HERD_ECORRUPT, "%s: holds %zu class folder(s), at least 2 are needed", tr, nclasses);
        goto out;
    }
    HERD_TRY(gather(dir, "train", classes, nclasses, &a, err));
    HERD_TRY(gather(dir, "test", classes, nclasses, &b, err));
    HERD_TRY(decode_split(&a, nclasses, train, err));
    HERD_TRY(decode_split(&b, nclasses, test, err));
    st = herd__data_same_shape(dir, train, test, err);
out:
    free_names(classes, nclasses);
    free_split(&a), free_split(&b);
    return st;
}
