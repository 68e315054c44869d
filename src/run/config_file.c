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
 * are comments; spaces around the name and the value are dropped.
 *
 * Or JSON, so that a run's own record repeats it: a file whose first
 * character is '{' is an object of options (the summary's "options", as
 * herd train --json prints it), or a log record holding one under
 * "options" (a --log file: its first "start" record). Members are options
 * (null: left at its default), "algo_options" an object of the
 * algorithm's; a repeatable option's values are joined with commas. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "herd/herd_algo.h"
#include "core/inpath.h"
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

herd_status herd__config_file_read(const char *path, char *buf, size_t cap, herd_err *err)
{
    /* a FIFO with no writer is refused, not waited on (core/inpath.h) */
    int fd;
    struct stat sb;
    herd_status ost = herd__inpath_open(path, &fd, &sb);
    if (ost != HERD_OK && ost != HERD_EINVAL)
        return herd_err_set(err, ost == HERD_ENOTFOUND ? HERD_EINVAL : HERD_EIO, "--config %s: %s", path,
                            strerror(errno));
    FILE *f = NULL;
    if (ost == HERD_EINVAL || (size_t)sb.st_size >= cap || !(f = fdopen(fd, "r"))) {
        close(fd);
        return herd_err_set(err, HERD_EINVAL, "--config %s: not a regular file of at most %zu bytes", path, cap - 1);
    }
    size_t n = fread(buf, 1, (size_t)sb.st_size, f);
    bool bad = ferror(f);
    fclose(f);
    if (bad)
        return herd_err_set(err, HERD_EIO, "--config %s: cannot read it", path);
    buf[n] = 0;
    if (strlen(buf) != n)
        return herd_err_set(err, HERD_EINVAL, "--config %s: a NUL byte: not a text file", path);
    return HERD_OK;
}

/* ---- JSON: a flat object of options, or a record holding one --------- */

typedef struct jmember {
    char key[96];    /* "name", "options.name", "options.algo_options.name", "algo_options.name" */
    char value[512]; /* as herd_config_set takes it */
    bool null, array; /* array: a record's list ("lost"), no option's value */
} jmember;

typedef struct jparse {
    const char *p;
    jmember *m;
    size_t n, cap;
} jparse;

static void jws(jparse *j)
{
    while (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n')
        j->p++;
}

/* A JSON string at j->p into out (UTF-8; \u escapes of the BMP). */
static bool jstring(jparse *j, char *out, size_t cap)
{
    size_t n = 0;
    if (*j->p++ != '"')
        return false;
    for (;;) {
        unsigned c = (unsigned char)*j->p++;
        if (!c || c < 0x20)
            return false;
        if (c == '"')
            break;
        if (c == '\\') {
            char e = *j->p++;
            const char *map = strchr("\"\\/bfnrt", e);
            if (map && e != 'u') {
                c = (unsigned char)"\"\\/\b\f\n\r\t"[map - "\"\\/bfnrt"];
            } else if (e == 'u') {
                unsigned v = 0;
                for (int k = 0; k < 4; k++) {
                    char h = *j->p++;
                    v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                            : h >= 'A' && h <= 'F'           ? h - 'A' + 10
                                                                             : 99);
                    if (v > 0xffff)
                        return false;
                }
                unsigned char u[3];
                size_t k = v < 0x80 ? 1 : v < 0x800 ? 2 : 3;
                if (k == 1)
                    u[0] = (unsigned char)v;
                else if (k == 2)
                    u[0] = (unsigned char)(0xc0 | v >> 6), u[1] = (unsigned char)(0x80 | (v & 0x3f));
                else
                    u[0] = (unsigned char)(0xe0 | v >> 12), u[1] = (unsigned char)(0x80 | ((v >> 6) & 0x3f)),
                    u[2] = (unsigned char)(0x80 | (v & 0x3f));
                for (size_t i = 0; i < k; i++)
                    if (n + 1 < cap)
                        out[n++] = (char)u[i];
                continue;
            } else {
                return false;
            }
        }
        if (n + 1 >= cap)
            return false;
        out[n++] = (char)c;
    }
    out[n] = 0;
    return true;
}

static bool jobject(jparse *j, const char *prefix, int depth);

static bool jmember_new(jparse *j, const char *key);

/* An array at j->p, passed over (a record's "lost":[...]: no option is
 * one), kept as a member marked array. */
static bool jskip_array(jparse *j, const char *key)
{
    if (!jmember_new(j, key))
        return false;
    j->m[j->n++].array = true;
    char scratch[512];
    int depth = 0;
    do {
        jws(j);
        char c = *j->p;
        if (c == '"') {
            if (!jstring(j, scratch, sizeof scratch))
                return false;
            continue;
        }
        if (!c)
            return false;
        depth += c == '[' || c == '{';
        depth -= c == ']' || c == '}';
        j->p++;
    } while (depth > 0);
    return true;
}

/* One member's value at j->p: a scalar into a member, an object into
 * members under key. */
static bool jvalue(jparse *j, const char *key, int depth)
{
    jws(j);
    if (*j->p == '{')
        return jobject(j, key, depth + 1);
    if (*j->p == '[')
        return jskip_array(j, key);
    if (!jmember_new(j, key))
        return false;
    jmember *m = &j->m[j->n];
    if (*j->p == '"') {
        if (!jstring(j, m->value, sizeof m->value))
            return false;
    } else {
        size_t len = strspn(j->p, "+-0123456789.eEtruefalsn");
        if (!len || len >= sizeof m->value)
            return false;
        snprintf(m->value, sizeof m->value, "%.*s", (int)len, j->p);
        j->p += len;
        m->null = !strcmp(m->value, "null");
        if (strcmp(m->value, "true") && strcmp(m->value, "false") && !m->null &&
            strspn(m->value, "+-0123456789.eE") != len)
            return false;
    }
    j->n++;
    return true;
}

/* Room for member j->n, zeroed, named key (not yet counted). */
static bool jmember_new(jparse *j, const char *key)
{
    if (j->n == j->cap) {
        size_t cap = j->cap ? 2 * j->cap : 64;
        jmember *m = realloc(j->m, cap * sizeof *m);
        if (!m)
            return false;
        j->m = m, j->cap = cap;
    }
    memset(&j->m[j->n], 0, sizeof j->m[j->n]);
    snprintf(j->m[j->n].key, sizeof j->m[j->n].key, "%s", key);
    return true;
}

static bool jobject(jparse *j, const char *prefix, int depth)
{
    jws(j);
    if (depth > 3 || *j->p++ != '{')
        return false;
    jws(j);
    if (*j->p == '}')
        return j->p++, true;
    for (;;) {
        char name[64], key[96];
        jws(j);
        if (!jstring(j, name, sizeof name))
            return false;
        snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", name);
        jws(j);
        if (*j->p++ != ':' || !jvalue(j, key, depth))
            return false;
        jws(j);
        if (*j->p == '}')
            return j->p++, true;
        if (*j->p++ != ',')
            return false;
    }
}

/* The JSON text's options, through fn: the object under "options" where
 * there is one, else the object itself; the first line with a "start"
 * record where the text is a log. */
static herd_status json_each(const char *text, const char *path, herd__config_line_fn fn, void *ctx, herd_err *err)
{
    const char *start = strstr(text, "\"event\":\"start\"");
    if (start) /* a log: the line of its first start record */
        while (start > text && start[-1] != '\n')
            start--;
    jparse j = {.p = start ? start : text};
    herd_status st = HERD_OK;
    if (!jobject(&j, "", 0)) {
        st = herd_err_set(err, HERD_EINVAL, "%s: not a JSON object of options (near byte %zu)", path,
                          (size_t)(j.p - text));
        goto out;
    }
    bool nested = false;
    for (size_t i = 0; i < j.n; i++)
        nested = nested || !strncmp(j.m[i].key, "options.", 8);
    for (size_t i = 0; i < j.n && st == HERD_OK; i++) {
        const char *k = j.m[i].key;
        if (nested && strncmp(k, "options.", 8))
            continue; /* the record's own members: run_id, time... */
        if (nested)
            k += 8;
        if (!strncmp(k, "algo_options.", 13))
            k += 13;
        if (j.m[i].array) {
            const herd_algo_ops *owner;
            bool option = herd__run_option_find(k) || herd_algo_opt_find(k, &owner);
            st = herd_err_set(err, HERD_EINVAL, option ? "%s: --%s takes one value, not a list"
                                                       : "%s: unknown option '%s'", path, k);
            continue;
        }
        if (j.m[i].null)
            continue;
        const herd_opt *row = herd__run_option_find(k);
        char *v = j.m[i].value;
        herd_err e = {0};
        if (row && (row->flags & HERD_OPT_REPEAT)) { /* "1:2,3:4" */
            for (char *tok = strtok(v, ","); tok && st == HERD_OK; tok = strtok(NULL, ","))
                st = fn(ctx, k, tok, &e);
        } else {
            st = fn(ctx, k, v, &e);
        }
        if (st < 0)
            herd_err_set(err, st, "%s: %s", path, e.msg);
    }
out:
    free(j.m);
    return st;
}

herd_status herd__config_each(char *text, const char *path, herd__config_line_fn fn, void *ctx, herd_err *err)
{
    const char *p = text;
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
        p++;
    return *p == '{' ? json_each(p, path, fn, ctx, err) : herd__config_text_each(text, path, fn, ctx, err);
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
    char *text = malloc(MAX_FILE + 1);
    if (!text)
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    herd_status st = herd__config_file_read(path, text, MAX_FILE + 1, err);
    if (st < 0) {
        free(text);
        return st;
    }
    /* on a copy: a file refused half-way changes nothing */
    load_ctx l = {.cfg = herd_config_dup(cfg)};
    if (!l.cfg) {
        free(text);
        return herd_err_set(err, HERD_ENOMEM, "out of memory");
    }
    st = herd__config_each(text, path, load_line, &l, err);
    if (st == HERD_OK)
        herd__config_swap(cfg, l.cfg);
    for (size_t i = 0; i < l.nseen; i++)
        free((char *)l.seen[i]);
    herd_config_free(l.cfg);
    free(text);
    return st;
}
