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
    bool unsig = o->type == HERD_OPT_SIZE || o->type == HERD_OPT_U64;
    bool integer = unsig || o->type == HERD_OPT_LONG;
    if (!*s || (unsig && (*s == '-' || *s == '+')))
        goto bad;
    if (integer) {
        if (unsig) {
            unsigned long long v = strtoull(s, &end, 10);
            if (errno || *end || (o->type == HERD_OPT_SIZE && v > (unsigned long long)SIZE_MAX))
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
                        unsig ? "a non-negative integer"
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
    if (!o || !obj)
        return herd_err_set(err, HERD_EINVAL, "herd_opt_parse: %s is NULL", o ? "obj" : "o");
    char *dst = (char *)obj + o->offset;
    if (o->type == HERD_OPT_BOOL) {
        if (!value || !strcmp(value, "true") || !strcmp(value, "1"))
            *(bool *)dst = true;
        else if (!strcmp(value, "false") || !strcmp(value, "0"))
            *(bool *)dst = false;
        else
            return herd_err_set(err, HERD_EINVAL, "flag '--%s' takes no value (or =true, =false), got '%s'", o->name,
                                value);
        return HERD_OK;
    }
    if (o->type == HERD_OPT_CUSTOM)
        return o->parse(o, obj, value, err);
    if (!value)
        return herd_err_set(err, HERD_EINVAL, "--%s needs a value", o->name);
    if (o->type == HERD_OPT_STR && !*value && (o->flags & HERD_OPT_NONEMPTY))
        return herd_err_set(err, HERD_EINVAL, "--%s: expected a value, got ''", o->name);
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
    case HERD_OPT_U64:
        *(uint64_t *)dst = (uint64_t)strtoull(value, NULL, 10);
        break;
    case HERD_OPT_LONG:
        *(long *)dst = strtol(value, NULL, 10);
        break;
    case HERD_OPT_DOUBLE:
        *(double *)dst = v;
        break;
    case HERD_OPT_FLOAT:
        if (v != 0 && (!isfinite((float)v) || (float)v == 0)) /* 1e-300 would be stored as 0 */
            return herd_err_set(err, HERD_EINVAL, "--%s: %s is out of the range of a float", o->name, value);
        *(float *)dst = (float)v;
        break;
    default:
        return herd_err_set(err, HERD_EINTERNAL, "--%s: unknown option type %d", o->name, (int)o->type);
    }
    return HERD_OK;
}

herd_status herd_opt_defaults(const herd_opt *table, void *obj, herd_err *err)
{
    if (table && table->name && !obj)
        return herd_err_set(err, HERD_EINVAL, "herd_opt_defaults: obj is NULL");
    for (const herd_opt *o = table; o && o->name; o++) {
        char *dst = (char *)obj + o->offset;
        if (o->type == HERD_OPT_FLOAT && (o->flags & HERD_OPT_UNSET)) {
            *(float *)dst = NAN; /* the run picks it (def is its last resort) */
            continue;
        }
        if (o->type == HERD_OPT_CUSTOM) /* its storage is the table's to clear (zeroed: none) */
            continue;
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
        case HERD_OPT_U64: *(uint64_t *)dst = 0; break;
        case HERD_OPT_LONG: *(long *)dst = 0; break;
        case HERD_OPT_DOUBLE: *(double *)dst = 0; break;
        case HERD_OPT_FLOAT: *(float *)dst = 0; break;
        case HERD_OPT_STR: *(const char **)dst = NULL; break;
        case HERD_OPT_CHOICE: *(int *)dst = 0; break;
        case HERD_OPT_CUSTOM: break;
        }
    }
    return HERD_OK;
}

/* The row's numeric value in obj (numbers only). */
static double number_of(const herd_opt *o, const void *obj)
{
    const char *p = (const char *)obj + o->offset;
    switch (o->type) {
    case HERD_OPT_SIZE: return (double)*(const size_t *)p;
    case HERD_OPT_U64: return (double)*(const uint64_t *)p;
    case HERD_OPT_LONG: return (double)*(const long *)p;
    case HERD_OPT_DOUBLE: return *(const double *)p;
    case HERD_OPT_FLOAT: return (double)*(const float *)p;
    default: return 0;
    }
}

/* The fewest digits that read back as v (as a float where single): 0.05f
 * is "0.05", not "0.0500000007". */
static void shortest(double v, bool single, char *buf, size_t cap)
{
    for (int digits = single ? 6 : 15; digits <= (single ? 9 : 17); digits++) {
        snprintf(buf, cap, "%.*g", digits, v);
        if (single ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v)
            return;
    }
}

void herd_opt_format(const herd_opt *o, const void *obj, char *buf, size_t cap)
{
    const char *p = (const char *)obj + o->offset;
    if (!cap)
        return;
    buf[0] = 0;
    switch (o->type) {
    case HERD_OPT_BOOL: snprintf(buf, cap, "%s", *(const bool *)p ? "true" : "false"); break;
    case HERD_OPT_SIZE: snprintf(buf, cap, "%zu", *(const size_t *)p); break;
    case HERD_OPT_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case HERD_OPT_LONG: snprintf(buf, cap, "%ld", *(const long *)p); break;
    case HERD_OPT_DOUBLE: shortest(*(const double *)p, false, buf, cap); break;
    case HERD_OPT_FLOAT:
        if (!isnan(*(const float *)p))
            shortest(*(const float *)p, true, buf, cap);
        break;
    case HERD_OPT_STR: snprintf(buf, cap, "%s", *(const char *const *)p ? *(const char *const *)p : ""); break;
    case HERD_OPT_CHOICE: {
        int i = *(const int *)p, n = 0;
        while (o->choices[n])
            n++;
        snprintf(buf, cap, "%s", i >= 0 && i < n ? o->choices[i] : "?");
        break;
    }
    case HERD_OPT_CUSTOM: o->format(o, obj, buf, cap); break;
    }
}

herd_status herd_opt_check(const herd_opt *o, const void *obj, herd_err *err)
{
    if (!o || !obj)
        return herd_err_set(err, HERD_EINVAL, "herd_opt_check: %s is NULL", o ? "obj" : "o");
    const char *p = (const char *)obj + o->offset;
    char v[64];
    switch (o->type) {
    case HERD_OPT_BOOL:
    case HERD_OPT_CUSTOM: /* checked as it is parsed, and by the run against the rest */
        return HERD_OK;
    case HERD_OPT_STR: {
        const char *sv = *(const char *const *)p;
        if (sv && !*sv && (o->flags & HERD_OPT_NONEMPTY))
            return herd_err_set(err, HERD_EINVAL, "--%s: expected a value, got ''", o->name);
        for (size_t i = 0; sv && o->choices && o->choices[i]; i++)
            if (!strcmp(sv, o->choices[i]))
                return HERD_OK;
        if (!sv || !o->choices)
            return HERD_OK;
        break;
    }
    case HERD_OPT_CHOICE: {
        int n = 0;
        while (o->choices[n])
            n++;
        if (*(const int *)p >= 0 && *(const int *)p < n)
            return HERD_OK;
        char names[256];
        list_choices(o->choices, names, sizeof names);
        return herd_err_set(err, HERD_EINVAL, "--%s must be %s, got #%d", o->name, names, *(const int *)p);
    }
    default: {
        double x = number_of(o, obj);
        if (o->type == HERD_OPT_FLOAT && isnan(x) && (o->flags & HERD_OPT_UNSET))
            return HERD_OK;
        if (isfinite(x) && in_bounds(o, x))
            return HERD_OK;
        herd_opt_format(o, obj, v, sizeof v);
        return herd_err_set(err, HERD_EINVAL, "--%s must be in %c%.15g, %.15g%c, got %s", o->name,
                            o->flags & HERD_OPT_MIN_OPEN ? '(' : '[', o->min, o->max,
                            o->flags & HERD_OPT_MAX_OPEN ? ')' : ']', v[0] ? v : "nan");
    }
    }
    /* a string not among its choices */
    char names[256];
    list_choices(o->choices, names, sizeof names);
    return herd_err_set(err, HERD_EINVAL, "--%s must be %s, got '%s'", o->name, names, *(const char *const *)p);
}

/* Whether help already gives the default ("default" as a word: not
 * "defaults", a script's name). */
static bool says_default(const char *help)
{
    for (const char *p = help; (p = strstr(p, "default")); p++)
        if (p[7] != 's')
            return true;
    return false;
}

void herd_opt_print(const herd_opt *table, FILE *f)
{
    static const char *const meta[] = {"", "N", "N", "X", "X", "S", "NAME", "N", "S"};
    const char *group = NULL;
    for (const herd_opt *o = table; o && o->name; o++) {
        if (o->flags & HERD_OPT_LIBRARY)
            continue;
        if (o->group && (!group || strcmp(o->group, group)))
            fprintf(f, "%s%s:\n", group ? "\n" : "", o->group);
        if (o->group)
            group = o->group;
        char left[64], extra[320] = "";
        const char *m = o->meta ? o->meta : meta[o->type];
        snprintf(left, sizeof left, "--%s%s%s", o->name, *m ? " " : "", m);
        if ((o->type == HERD_OPT_CHOICE || o->type == HERD_OPT_STR) && o->choices) {
            char names[256];
            list_choices(o->choices, names, sizeof names);
            snprintf(extra, sizeof extra, "; %s", names);
        }
        if (o->def && o->type != HERD_OPT_BOOL && !says_default(o->help))
            snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " (default %s)", o->def);
        else if (o->def && o->type == HERD_OPT_BOOL && !strcmp(o->def, "true"))
            snprintf(extra + strlen(extra), sizeof extra - strlen(extra), " (default on)");
        fprintf(f, "  %-28s %s%s\n", left, o->help, extra);
    }
}
