/* clock.h — monotonic time for every module (internal). */
#ifndef HERD_CORE_CLOCK_H
#define HERD_CORE_CLOCK_H

/* Seconds on CLOCK_MONOTONIC: for durations and deadlines, never dates. */
double herd__now(void);

#endif
