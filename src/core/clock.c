#include "core/clock.h"

#include <time.h>

double herd__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void herd__backoff_nap(herd__backoff *b)
{
    struct timespec ts = {(time_t)(b->us / 1e6), (long)(b->us * 1e3) % 1000000000L};
    nanosleep(&ts, NULL);
    b->us = b->us < b->max_us ? b->us * 1.25 : b->clamp ? b->max_us : b->us;
}
