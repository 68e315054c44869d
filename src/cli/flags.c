/* The command line's flag parser (flags.h). */
#include "cli/flags.h"

#include "core/json.h"

#include <errno.h>
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

herd_status herd__opt_list_parse(const herd_opt *o, void *obj, const char *value, herd_err *err)
{
    herd__str_list *l = (herd__str_list *)((char *)obj + o->offset);
    if (!value || !*value) /* a variable that expanded to nothing, say */
        return herd_err_set(err, HERD_EINVAL, "--%s: expected a value, got ''", o->name);
    if (l->n >= HERD__MAX_LIST)
        return herd_err_set(err, HERD_EINVAL, "--%s: at most %d times", o->name, HERD__MAX_LIST);
    l->v[l->n++] = value;
    return HERD_OK;
}

void herd__opt_list_format(const herd_opt *o, const void *obj, char *buf, size_t cap)
{
    const herd__str_list *l = (const herd__str_list *)((const char *)obj + o->offset);
    size_t len = 0;
    if (cap)
        buf[0] = 0;
    for (size_t i = 0; i < l->n && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? "," : "", l->v[i]);
}

void herd__flags_defaults(const herd_opt *opts, void *obj)
{
    herd_err err = {0};
    herd_status st = herd_opt_defaults(opts, obj, &err);
    if (st < 0)
        fprintf(stderr, "herd: %s\n", err.msg);
    HERD_ASSERT(st == HERD_OK);
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
        const herd_opt *f = herd_opt_find(c->opts, name);
        if (f && (f->flags & HERD_OPT_LIBRARY))
            f = NULL; /* set through the library only */
        if (!f) {
            if (!c->other)
                herd__usage_error_json(c->json, c->cmd, "unknown flag '%s'", a);
            i = c->other(c->other_ctx, name, val, i, argc, argv);
            continue;
        }
        if (!herd_opt_takes_value(f) && val)
            herd__usage_error_json(c->json, c->cmd, "flag '%s' takes no value", a);
        if (herd_opt_takes_value(f) && !val) {
            if (i + 1 >= argc)
                herd__usage_error_json(c->json, c->cmd, "flag '%s' needs a value", a);
            val = argv[++i];
        }
        herd_err err = {0};
        if (herd_opt_parse(f, c->obj, val, &err) < 0) /* the message names the flag and what it takes */
            value_error(c, "%s", err.msg);
    }
    return argc;
}
