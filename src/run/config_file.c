/* Configuration files: one option a line, as herd train's flags without
 * their "--" (herd_config.h, herd_config_load; herd train --config):
 *
 *   # lenet on four workers
 *   model = lenet
 *   workers = 4
 *   nesterov              # a flag without a value
 *   slow = 1:2            # repeatable options, a line each
 *   ps-shards = 2         # an algorithm's option
 *
 * Blank lines and text from a '#' at the start of a line or after a space
 * are comments; spaces around the name and the value are dropped. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "herd/herd_config.h"
#include "run/options.h"

enum { MAX_FILE = 1 << 20 };

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = 0;
    return s;
}

herd_status herd__config_text_each(char *text, const char *path, herd__config_line_fn fn, void *ctx, herd_err *err)
{
    size_t line = 0;
    for (char *p = text, *next; p && *p; p = next) {
        line++;
        next = strchr(p, '\n');
        if (next)
            *next++ = 0;
        for (char *h = p; (h = strchr(h, '#')); h++) /* a comment: at the start, or after a space */
            if (h == p || h[-1] == ' ' || h[-1] == '\t') {
                *h = 0;
                break;
            }
        char *s = trim(p);
        if (!*s)
            continue;
        char *eq = strchr(s, '='), *value = NULL;
        if (eq) {
            *eq = 0;
            value = trim(eq + 1);
        }
        char *name = trim(s);
        if (!strncmp(name, "--", 2))
            name += 2;
        if (!*name || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(name))
            return herd_err_set(err, HERD_EINVAL, "%s:%zu: expected NAME = VALUE or NAME, got '%s'", path, line, s);
        if (eq && !*value)
            return herd_err_set(err, HERD_EINVAL, "%s:%zu: %s = what? (a flag without a value: '%s' alone)", path,
                                line, name, name);
        herd_err e = {0};
        herd_status st = fn(ctx, name, value, &e);
        if (st < 0)
            return herd_err_set(err, st, "%s:%zu: %s", path, line, e.msg);
    }
    return HERD_OK;
}

herd_status herd__config_file_read(const char *path, char **out, herd_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "r");
    struct stat sb;
    if (!f)
        return herd_err_set(err, errno == ENOENT ? HERD_EINVAL : HERD_EIO, "--config %s: %s", path, strerror(errno));
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > MAX_FILE) {
        fclose(f);
        return herd_err_set(err, HERD_EINVAL, "--config %s: not a regular file of at most %d bytes", path, MAX_FILE);
    }
    char *buf = malloc((size_t)sb.st_size + 1);
    size_t n = buf ? fread(buf, 1, (size_t)sb.st_size, f) : 0;
    bool bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return herd_err_set(err, buf ? HERD_EIO : HERD_ENOMEM, "--config %s: cannot read it", path);
    }
    buf[n] = 0;
    if (strlen(buf) != n) {
        free(buf);
        return herd_err_set(err, HERD_EINVAL, "--config %s: a NUL byte: not a text file", path);
    }
    *out = buf;
    return HERD_OK;
}

/* A file's options on a herd_config: each line as herd_config_set; a
 * non-repeatable option given twice in the file is refused, as on the
 * command line. */
typedef struct load_ctx {
    herd_config *cfg;
    const char *seen[256]; /* the names given so far (an option twice is refused) */
    size_t nseen;
} load_ctx;

static herd_status load_line(void *ctx, const char *name, const char *value, herd_err *err)
{
    load_ctx *l = ctx;
    const herd_opt *row = herd__run_option_find(name);
    bool repeat = row && (row->flags & HERD_OPT_REPEAT);
    for (size_t i = 0; i < l->nseen && !repeat; i++)
        if (!strcmp(l->seen[i], name))
            return herd_err_set(err, HERD_EINVAL, "%s is given twice: each option takes one value", name);
    herd_status st = herd_config_set(l->cfg, name, value, err);
    if (st == HERD_OK && l->nseen < sizeof l->seen / sizeof l->seen[0] && (l->seen[l->nseen] = strdup(name)))
        l->nseen++;
    return st;
}

herd_status herd_config_load(herd_config *cfg, const char *path, herd_err *err)
{
    if (!cfg || !path)
        return herd_err_set(err, HERD_EINVAL, "herd_config_load: %s is NULL", cfg ? "path" : "cfg");
    char *text;
    herd_status st = herd__config_file_read(path, &text, err);
    if (st < 0)
        return st;
    /* on a copy: a file refused half-way changes nothing */
    load_ctx l = {.cfg = herd_config_dup(cfg)};
    if (!l.cfg) {
        free(text);
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    }
    st = herd__config_text_each(text, path, load_line, &l, err);
    if (st == HERD_OK)
        herd__config_swap(cfg, l.cfg);
    for (size_t i = 0; i < l.nseen; i++)
        free((char *)l.seen[i]);
    herd_config_free(l.cfg);
    free(text);
    return st;
}
