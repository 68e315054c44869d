#include "run/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/json.h"
#include "core/outpath.h"

herd_status herd__log_open(herd__log *log, const char *path, double t0, herd_err *err)
{
    log->f = NULL;
    log->path = path;
    log->t0 = t0;
    log->write_errno = 0;
    herd_status st;
    if (path && (st = herd__outpath_fopen(path, "a", "--log", &log->f, err)) < 0)
        return st;
    pthread_mutex_init(&log->mu, NULL);
    return HERD_OK;
}

herd_status herd__log_check(herd__log *log, herd_err *err)
{
    if (!log->f)
        return HERD_OK;
    pthread_mutex_lock(&log->mu);
    int e = log->write_errno;
    pthread_mutex_unlock(&log->mu);
    if (e)
        return herd_err_set(err, HERD_EIO, "cannot write log file %s: %s", log->path, strerror(e));
    return HERD_OK;
}

herd_status herd__log_close(herd__log *log, herd_err *err)
{
    herd_status st = herd__log_check(log, err);
    if (log->f && fclose(log->f) != 0 && st == HERD_OK)
        st = herd_err_set(err, HERD_EIO, "cannot write log file %s: %s", log->path, strerror(errno));
    log->f = NULL;
    pthread_mutex_destroy(&log->mu);
    return st;
}

void herd__log_record(herd__log *log, const char *event, const char *fields, ...)
{
    if (!log || !log->f)
        return;
    char small[1024], *body = small;
    small[0] = 0;
    if (fields && *fields) { /* formatted outside the lock */
        va_list ap;
        va_start(ap, fields);
        int n = vsnprintf(small, sizeof small, fields, ap);
        va_end(ap);
        if (n >= (int)sizeof small && (body = malloc((size_t)n + 1))) {
            va_start(ap, fields);
            vsnprintf(body, (size_t)n + 1, fields, ap);
            va_end(ap);
        } else if (n >= (int)sizeof small) {
            /* out of memory: the record keeps its event, not a half of its fields */
            snprintf(small, sizeof small, "\"cut\":true");
        }
    }
    pthread_mutex_lock(&log->mu);
    errno = 0;
    if ((herd__json_printf(log->f, "{\"t\":%.6f,\"event\":\"%s\"%s%s}\n", herd__now() - log->t0, event,
                           body[0] ? "," : "", body) < 0 ||
         fflush(log->f) != 0) &&
        !log->write_errno)
        log->write_errno = errno ? errno : EIO;
    pthread_mutex_unlock(&log->mu);
    if (body != small)
        free(body);
}
