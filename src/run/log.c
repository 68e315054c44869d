#include "run/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/json.h"

herd_status herd__log_open(herd__log *log, const char *path, double t0, herd_err *err)
{
    log->f = NULL;
    log->t0 = t0;
    if (path && !(log->f = fopen(path, "a")))
        return herd_err_set(err, HERD_EIO, "cannot open log file %s: %s", path, strerror(errno));
    pthread_mutex_init(&log->mu, NULL);
    return HERD_OK;
}

void herd__log_close(herd__log *log)
{
    if (log->f)
        fclose(log->f);
    log->f = NULL;
    pthread_mutex_destroy(&log->mu);
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
    herd__json_printf(log->f, "{\"t\":%.6f,\"event\":\"%s\"%s%s}\n", herd__now() - log->t0, event, body[0] ? "," : "",
                      body);
    fflush(log->f);
    pthread_mutex_unlock(&log->mu);
    if (body != small)
        free(body);
}
