/* par.h — when a loop of herd's own runs on the calling thread's OpenMP
 * team (internal).
 *
 * The layers' and kernels' loops (src/nn) and the optimizer's (src/optim)
 * take `#pragma omp parallel for if (work >= HERD__PAR_GRAIN)`, work in
 * floats touched: below it, starting the team (a few us; tens when its
 * threads have gone to sleep: herd_nn_wait_policy) costs more than it
 * saves. The team is the one herd_nn_set_threads sized. Work is split
 * only where the parts are independent (channels, planes, examples,
 * elements), never inside a sum, so results are the same bits at any
 * number of threads.
 *
 * Under ThreadSanitizer the loops stay serial: libgomp is not instrumented,
 * so TSan would take its team's hand-offs for races, and the races `make
 * tsan` is for (between workers) would hide among them.
 */
#ifndef HERD_CORE_PAR_H
#define HERD_CORE_PAR_H

#include <stddef.h>
#include <stdint.h>

#if defined(__SANITIZE_THREAD__)
#define HERD__PAR_SERIAL 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HERD__PAR_SERIAL 1
#endif
#endif

#ifdef HERD__PAR_SERIAL
#define HERD__PAR_GRAIN SIZE_MAX
#else
#define HERD__PAR_GRAIN ((size_t)1 << 15)
#endif

#endif
