#include "herd/herd_status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

const char *herd_strerror(herd_status st)
{
    switch (st) {
#define HERD__STATUS_MSG(name, code, msg) \
    case HERD_##name:                     \
        return msg;
        HERD_STATUS_MAP(HERD__STATUS_MSG)
#undef HERD__STATUS_MSG
    }
    return "unknown error";
}

const char *herd_err_name(herd_status st)
{
    switch (st) {
#define HERD__STATUS_NAME(name, code, msg) \
    case HERD_##name:                      \
        return "HERD_" #name;
        HERD_STATUS_MAP(HERD__STATUS_NAME)
#undef HERD__STATUS_NAME
    }
    return "HERD_UNKNOWN";
}

herd_status herd_err_set(herd_err *err, herd_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = st;
    }
    return st;
}

void herd__assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "herd: internal error: assertion `%s` failed at %s:%d\n", expr, file, line);
    abort();
}
