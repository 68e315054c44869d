/* clock.h — monotonic time for every module (internal). */
#ifndef HERD_CORE_CLOCK_H
#define HERD_CORE_CLOCK_H

#include <stdbool.h>

/* Seconds on CLOCK_MONOTONIC: for durations and deadlines, never dates. */
double herd__now(void);

/* A polled wait's sleeps: each a quarter longer than the last while shorter
 * than `max_us`. Growing by a quarter, a nap is at most a quarter of the time
 * already waited, so a wait (in herd sim, a simulated one) ends at most 25%
 * late; doubling overstated it up to 2x. Fill it with a designated
 * initialiser: {.us = first nap, .max_us = ..., .clamp = ...}. */
typedef struct herd__backoff {
    double us;     /* the next nap */
    double max_us; /* naps grow while shorter than this */
    bool clamp;    /* past max_us: true, every later nap is max_us; false, the
                    * first nap past max_us is kept */
} herd__backoff;

/* Sleeps the current nap, then lengthens the next. */
void herd__backoff_nap(herd__backoff *b);

#endif
