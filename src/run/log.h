/* log.h — JSON Lines run log shared by the workers of one run (internal).
 * Each record is one line written under a mutex, flushed at once so a crash
 * loses nothing already logged. A NULL log accepts and drops records. A
 * write that fails is remembered (the first one's errno): herd__log_check
 * and herd__log_close report it, naming the file. */
#ifndef HERD_RUN_LOG_H
#define HERD_RUN_LOG_H

#include <pthread.h>
#include <stdio.h>

#include "core/clock.h"
#include "herd/herd_status.h"

typedef struct herd__log {
    FILE *f;
    const char *path; /* the caller's, for messages */
    pthread_mutex_t mu;
    double t0;     /* run start, monotonic seconds */
    int write_errno; /* the first failed write's errno (0: none), under mu */
} herd__log;

/* Opens path for appending (records of earlier runs are kept). */
herd_status herd__log_open(herd__log *log, const char *path, double t0, herd_err *err);
/* HERD_EIO naming the file and the error when a record could not be written. */
herd_status herd__log_check(herd__log *log, herd_err *err);
/* Closes the file: HERD_EIO as herd__log_check, or when closing fails. */
herd_status herd__log_close(herd__log *log, herd_err *err);
/* Writes {"t":..., "event":event, <fields>} where fields is a printf format
 * producing the rest of the object's members, e.g. "\"epoch\":%zu". */
void herd__log_record(herd__log *log, const char *event, const char *fields, ...)
    __attribute__((format(printf, 3, 4)));

#endif
