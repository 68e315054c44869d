#include "run/log.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

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
    pthread_mutex_lock(&log->mu);
    fprintf(log->f, "{\"t\":%.6f,\"event\":\"%s\"", herd__now() - log->t0, event);
    if (fields && *fields) {
        va_list ap;
        va_start(ap, fields);
        fputc(',', log->f);
        vfprintf(log->f, fields, ap);
        va_end(ap);
    }
    fputs("}\n", log->f);
    fflush(log->f);
    pthread_mutex_unlock(&log->mu);
}
