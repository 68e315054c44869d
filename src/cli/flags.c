/* The command line's flag parser (flags.h). */
#include "cli/flags.h"

#include "core/json.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int herd__parse_size(const char *s, size_t *out)
{
    char *end;
    if (!*s || *s == '-' || *s == '+')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > SIZE_MAX)
        return -1;
    *out = (size_t)v;
    return 0;
}

int herd__parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || errno || *end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

/* Seconds a rank other than 0 waits before it says a usage error (usage_exit). */
enum { LAUNCH_QUIET_S = 5 };

size_t herd__launch_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    size_t r = 0;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && herd__parse_size(v, &r) == 0)
            return r;
    }
    return 0;
}

/* "herd: MSG", then " (see 'herd CMD --help')" when cmd is not NULL; with
 * json, the summary line herd train --json prints for a failure too, on
 * stdout. Exits 2. */
static _Noreturn void usage_exit(bool json, const char *cmd, const char *fmt, va_list ap)
{
    char msg[1024], quoted[2200];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t rank = herd__launch_rank();
    if (rank != 0) {
        /* Rank 0, given the same command, says it; its exit ends this
         * process (the launcher stops the job) before the wait is over. An
         * exit at once could end rank 0 before it had said anything. A rank
         * still alive after the wait is the only one with this error (an
         * MPMD launch): it says it, naming itself. */
        struct timespec t = {LAUNCH_QUIET_S, 0};
        while (nanosleep(&t, &t) != 0 && errno == EINTR)
            ;
        fprintf(stderr, "herd (rank %zu): %s\n", rank, msg);
        exit(2);
    }
    fprintf(stderr, "herd: %s", msg);
    if (cmd)
        fprintf(stderr, " (see 'herd %s --help')", cmd);
    fputc('\n', stderr);
    if (json) {
        herd__json_quote(quoted, sizeof quoted, msg);
        herd__json_printf(stdout, "{\"algo\":null,\"status\":\"error\",\"code\":\"usage\",\"error\":%s}\n", quoted);
    }
    exit(2);
}

_Noreturn void herd__usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    usage_exit(false, cmd, fmt, ap);
}

_Noreturn void herd__usage_error_json(bool json, const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    usage_exit(json, cmd, fmt, ap);
}

/* A flag's value that does not parse: MSG names the flag and the value. */
static _Noreturn __attribute__((format(printf, 2, 3))) void value_error(const herd__flag_cmd *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    usage_exit(c->json, NULL, fmt, ap);
}

void herd__flags_print(const herd__flag *flags, FILE *out)
{
    for (const herd__flag *f = flags; f->name; f++) {
        char left[48];
        snprintf(left, sizeof left, "--%s%s%s", f->name, f->meta ? " " : "", f->meta ? f->meta : "");
        fprintf(out, "  %-28s %s\n", left, f->help);
    }
}

/* Stores val into f's destination, or exits with a message naming the flag. */
static void store(const herd__flag_cmd *c, const herd__flag *f, const char *val)
{
    size_t z;
    double d;
    char msg[256];
    switch (f->kind) {
    case HERD__FLAG_SIZE:
    case HERD__FLAG_U64:
        if (herd__parse_size(val, &z))
            value_error(c, "--%s: expected a non-negative integer, got '%s'", f->name, val);
        if (f->kind == HERD__FLAG_SIZE)
            *(size_t *)f->dest = z;
        else
            *(uint64_t *)f->dest = z;
        break;
    case HERD__FLAG_DOUBLE:
    case HERD__FLAG_FLOAT:
        if (herd__parse_double(val, &d))
            value_error(c, "--%s: expected a number, got '%s'", f->name, val);
        /* a float would hold 0 or Inf: the message would name a value not typed */
        if (f->kind == HERD__FLAG_FLOAT && d != 0 && (fabs(d) < FLT_MIN || fabs(d) > FLT_MAX))
            value_error(c, "--%s: %s is out of the range of a float (magnitude %g to %g, or 0)", f->name, val,
                        (double)FLT_MIN, (double)FLT_MAX);
        if (f->kind == HERD__FLAG_DOUBLE)
            *(double *)f->dest = d;
        else
            *(float *)f->dest = (float)d;
        break;
    case HERD__FLAG_STR:
        if (!*val) /* not the default: a variable that expanded to nothing, say */
            value_error(c, "--%s: expected a value, got ''", f->name);
        *(const char **)f->dest = val;
        break;
    case HERD__FLAG_LIST: {
        herd__str_list *l = f->dest;
        if (!*val)
            value_error(c, "--%s: expected a value, got ''", f->name);
        if (l->n >= HERD__MAX_LIST)
            value_error(c, "--%s: at most %d times", f->name, HERD__MAX_LIST);
        l->v[l->n++] = val;
        break;
    }
    case HERD__FLAG_FN:
        msg[0] = 0;
        if (!f->parse(f->dest, val, msg, sizeof msg))
            value_error(c, "%s", msg[0] ? msg : "bad value");
        break;
    case HERD__FLAG_BOOL:
        break;
    }
}

int herd__flags_parse(const herd__flag_cmd *c, int argc, char **argv, int first, bool stop_at_word)
{
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--"))
            return i;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            c->usage(stdout);
            errno = 0;
            if (fflush(stdout) != 0 || ferror(stdout)) { /* --help > /dev/full is no success */
                fprintf(stderr, "herd: cannot write to stdout: %s\n", strerror(errno ? errno : EIO));
                exit(1);
            }
            exit(0);
        }
        if (stop_at_word && a[0] != '-')
            return i;
        if (strncmp(a, "--", 2))
            herd__usage_error_json(c->json, c->cmd, "unexpected argument '%s'", a);
        /* --name VALUE or --name=VALUE */
        char name[64];
        const char *eq = strchr(a, '='), *val = eq ? eq + 1 : NULL;
        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
        if (len >= sizeof name)
            herd__usage_error_json(c->json, c->cmd, "unknown flag '%s'", a);
        memcpy(name, a + 2, len);
        name[len] = 0;
        const herd__flag *f = c->flags;
        while (f->name && strcmp(f->name, name))
            f++;
        if (!f->name) {
            if (!c->other)
                herd__usage_error_json(c->json, c->cmd, "unknown flag '%s'", a);
            i = c->other(c->other_ctx, name, val, i, argc, argv);
            continue;
        }
        if (f->kind == HERD__FLAG_BOOL) {
            if (val)
                herd__usage_error_json(c->json, c->cmd, "flag '%s' takes no value", a);
            *(bool *)f->dest = true;
            continue;
        }
        if (!val) {
            if (i + 1 >= argc)
                herd__usage_error_json(c->json, c->cmd, "flag '%s' needs a value", a);
            val = argv[++i];
        }
        store(c, f, val);
    }
    return argc;
}
