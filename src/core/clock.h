/* clock.h — monotonic time for every module (internal). */
#ifndef HERD_CORE_CLOCK_H
#define HERD_CORE_CLOCK_H

/* Seconds on CLOCK_MONOTONIC: for durations and deadlines, never dates. */
double herd__now(void);

/* A polled wait's sleeps: each a quarter longer than the last, from the
 * first nap up to `max_us`. Growing by a quarter, a nap is at most a quarter
 * of the time already waited, so a wait (in herd sim, a simulated one) ends
 * at most 25% late; doubling overstated it up to 2x. */
typedef struct herd__backoff {
    double us, max_us;
} herd__backoff;

static inline herd__backoff herd__backoff_make(double first_us, double max_us)
{
    return (herd__backoff){first_us, max_us};
}

/* Sleeps the current nap, then lengthens the next. */
void herd__backoff_nap(herd__backoff *b);

#endif
