/* Adaptive compute threads: herd_nn_adapt (herd_nn.h says why and how). */
#include <stdlib.h>
#include <string.h>

#include "herd/herd_nn.h"

static const double adapt_first = 1.0, adapt_max_interval = 32.0;
static const double adapt_margin = 0.93; /* the other count must be this much faster */
static const double adapt_abort = 1.5;   /* a probe's step this much slower ends it */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, size_t n)
{
    double s[HERD_NN_ADAPT_K];
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

void herd_nn_adapt_init(herd_nn_adapt *a, int threads, double now)
{
    memset(a, 0, sizeof *a);
    a->max = a->cur = a->saved = threads > 0 ? threads : 1;
    a->interval = adapt_first;
    a->next = now; /* the first probe as soon as K steps are timed */
    herd_nn_set_threads(a->cur);
}

void herd_nn_adapt_step(herd_nn_adapt *a, double step_s, double now)
{
    if (a->max <= 1)
        return;
    a->steps++;
    a->steps_full += a->cur == a->max;
    if (!a->probe_left) { /* running: the last K steps at cur, then a probe when due */
        a->run[a->run_n++ % HERD_NN_ADAPT_K] = step_s;
        if (now >= a->next && a->run_n >= HERD_NN_ADAPT_K) {
            a->saved = a->cur;
            a->cur = a->cur == a->max ? 1 : a->max;
            a->probe_left = HERD_NN_ADAPT_K + 1; /* the first step at the new count is not timed */
            a->probe_n = 0;
            herd_nn_set_threads(a->cur);
        }
        return;
    }
    double at_cur = median(a->run, HERD_NN_ADAPT_K);
    if (a->probe_left-- <= HERD_NN_ADAPT_K) {
        a->probe[a->probe_n++] = step_s;
        /* a timed step this much slower ends the probe: no median of the
         * rest would win, and beside a busy process each costs double */
        if (step_s > adapt_abort * at_cur)
            a->probe_left = 0;
    }
    if (a->probe_left)
        return;
    if (a->probe_n == HERD_NN_ADAPT_K && median(a->probe, a->probe_n) < adapt_margin * at_cur) {
        /* the other count wins: keep it, its steps are the running record */
        memcpy(a->run, a->probe, sizeof a->run);
        a->run_n = HERD_NN_ADAPT_K;
        a->switches++;
        a->interval = adapt_first;
    } else {
        a->cur = a->saved;
        herd_nn_set_threads(a->cur);
        a->interval = a->interval * 2 < adapt_max_interval ? a->interval * 2 : adapt_max_interval;
    }
    a->next = now + a->interval;
}
