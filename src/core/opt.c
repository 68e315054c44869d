/* Option tables (herd_opt.h): parsing, defaults, help. */
#include "herd/herd_opt.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

const herd_opt *herd_opt_find(const herd_opt *table, const char *name)
{
    for (const herd_opt *o = table; o && o->name; o++)
        if (!strcmp(o->name, name))
            return o;
    return NULL;
}

/* "ring, exp or random" into buf. */
static void list_choices(const char *const *c, char *buf, size_t cap)
{
    size_t n = 0, len = 0;
    while (c[n])
        n++;
    buf[0] = 0;
    for (size_t i = 0; i < n && len < cap; i++) {
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", c[i], i + 2 < n ? ", " : i + 2 == n ? " or " : "");
    }
}

static herd_status parse_number(const herd_opt *o, const char *s, double *out, herd_err *err)
{
    char *end;
    errno = 0;
    bool integer = o->type == HERD_OPT_SIZE || o->type == HERD_OPT_LONG;
    if (!*s || (o->type == HERD_OPT_SIZE && (*s == '-' || *s == '+')))
        goto bad;
    if (integer) {
        if (o->type == HERD_OPT_SIZE) {
            unsigned long long v = strtoull(s, &end, 10);
            if (errno || *end || v > (unsigned long long)SIZE_MAX)
                goto bad;
            *out = (double)v;
        } else {
            long v = strtol(s, &end, 10);
            if (errno || *end)
                goto bad;
            *out = (double)v;
        }
        return HERD_OK;
    }
    *out = strtod(s, &end);
    if (errno || *end || !isfinite(*out))
        goto bad;
    return HERD_OK;
bad:
    return herd_err_set(err, HERD_EINVAL, "--%s: expected %s, got '%s'", o->name,
                        o->type == HERD_OPT_SIZE ? "a non-negative integer"
                        : o->type == HERD_OPT_LONG ? "an integer"
                                                   : "a number",
                        s);
}

static bool in_bounds(const herd_opt *o, double v)
{
    if (!(o->flags & HERD_OPT_BOUNDED))
        return true;
    bool lo = o->flags & HERD_OPT_MIN_OPEN ? v > o->min : v >= o->min;
    bool hi = o->flags & HERD_OPT_MAX_OPEN ? v < o->max : v <= o->max;
    return lo && hi;
}

herd_status herd_opt_parse(const herd_opt *o, void *obj, const char *value, herd_err *err)
{
    char *dst = (char *)obj + o->offset;
    if (o->type == HERD_OPT_BOOL) {
        if (!value || !strcmp(value, "true") || !strcmp(value, "1"))
            *(bool *)dst = true;
        else if (!strcmp(value, "false") || !strcmp(value, "0"))
            *(bool *)dst = false;
        else
            return herd_err_set(err, HERD_EINVAL, "--%s takes no value, got '%s'", o->name, value);
        return HERD_OK;
    }
    if (!value)
        return herd_err_set(err, HERD_EINVAL, "--%s needs a value", o->name);
    if (o->type == HERD_OPT_STR && !o->choices) {
        *(const char **)dst = value;
        return HERD_OK;
    }
    if (o->type == HERD_OPT_STR || o->type == HERD_OPT_CHOICE) {
        for (int i = 0; o->choices[i]; i++)
            if (!strcmp(o->choices[i], value)) {
                if (o->type == HERD_OPT_STR)
                    *(const char **)dst = o->choices[i];
                else
                    *(int *)dst = i;
                return HERD_OK;
            }
        char names[256];
        list_choices(o->choices, names, sizeof names);
        return herd_err_set(err, HERD_EINVAL, "--%s must be %s, got '%s'", o->name, names, value);
    }
    double v = 0;
    herd_status st = parse_number(o, value, &v, err);
    if (st < 0)
        return st;
    if (!in_bounds(o, v))
        return herd_err_set(err, HERD_EINVAL, "--%s must be in %c%.15g, %.15g%c, got %s", o->name,
                            o->flags & HERD_OPT_MIN_OPEN ? '(' : '[', o->min, o->max,
                            o->flags & HERD_OPT_MAX_OPEN ? ')' : ']', value);
    switch (o->type) {
    case HERD_OPT_SIZE:
        *(size_t *)dst = (size_t)strtoull(value, NULL, 10);
        break;
    case HERD_OPT_LONG:
        *(long *)dst = strtol(value, NULL, 10);
        break;
    case HERD_OPT_DOUBLE:
        *(double *)dst = v;
        break;
    case HERD_OPT_FLOAT:
        *(float *)dst = (float)v;
        break;
    default:
        return herd_err_set(err, HERD_EINTERNAL, "--%s: unknown option type %d", o->name, (int)o->type);
    }
    return HERD_OK;
}

herd_status herd_opt_defaults(const herd_opt *table, void *obj, herd_err *err)
{
    for (const herd_opt *o = table; o && o->name; o++) {
        char *dst = (char *)obj + o->offset;
        if (o->def) {
            /* a default outside its own bounds (a sentinel such as -1 for
             * "none") is stored as it is, not refused */
            herd_opt row = *o;
            row.flags &= ~(unsigned)HERD_OPT_BOUNDED;
            herd_status st = herd_opt_parse(&row, obj, o->def, err);
            if (st < 0)
                return st;
            continue;
        }
        switch (o->type) {
        case HERD_OPT_BOOL: *(bool *)dst = false; break;
        case HERD_OPT_SIZE: *(size_t *)dst = 0; break;
        case HERD_OPT_LONG: *(long *)dst = 0; break;
        case HERD_OPT_DOUBLE: *(double *)dst = 0; break;
        case HERD_OPT_FLOAT: *(float *)dst = 0; break;
        case HERD_OPT_STR: *(const char **)dst = NULL; break;
        case HERD_OPT_CHOICE: *(int *)dst = 0; break;
        }
    }
    return HERD_OK;
}

void herd_opt_print(const herd_opt *table, FILE *f)
{
    static const char *const meta[] = {"", "N", "N", "X", "X", "S", "NAME"};
    for (const herd_opt *o = table; o && o->name; o++) {
        char left[64], extra[160] = "";
        const char *m = o->meta ? o->meta : meta[o->type];
        snprintf(left, sizeof left, "--%s%s%s", o->name, *m ? " " : "", m);
        if ((o->type == HERD_OPT_CHOICE || o->type == HERD_OPT_STR) && o->choices) {
            char names[128];
            list_choices(o->choices, names, sizeof names);
            snprintf(extra, sizeof extra, "; %s", names);
        }
        if (o->def && o->type != HERD_OPT_BOOL && !strstr(o->help, "default"))
            snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " (default %s)", o->def);
        fprintf(f, "  %-28s %s%s\n", left, o->help, extra);
    }
}
