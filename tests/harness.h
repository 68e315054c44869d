/* harness.h — herd's test harness.
 *
 * Each test file defines one table `herd_tests_<suite>[]` ending with
 * HERD_TEST_END, and its suite is listed once in tests/list.h. The runner
 * (tests/main.c) forks every test, kills it after its timeout, and prints
 * one line per test and a final `N passed, N failed`.
 * Assertions print both operands and the location, then abort the (forked)
 * test process, so one failing test never takes the others down.
 *
 * `make tsan` runs only the tests that may start threads; the others'
 * bodies run under `make test` and `make asan`. A test counts as starting
 * threads unless its row says HERD_TEST_ONE_THREAD, and the runner checks
 * the tag wherever it runs the test: a tagged test runs under a seccomp
 * filter that kills with SIGSYS any process of the test (itself, or a herd
 * it runs) that starts a thread, OpenMP's and oneDNN's included. So a
 * missing tag costs TSan time, never coverage, and a wrong one fails `make
 * test`. A tag rather than detection at TSan time, which would have to run
 * every test to find out (the cost the tag saves); `herd-tests -1` lists
 * the tests that could take it.
 */
#ifndef HERD_TEST_HARNESS_H
#define HERD_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct herd_test {
    const char *name;
    void (*fn)(void);
    unsigned timeout_s; /* 0: the runner's default (60 s) */
    unsigned flags;     /* HERD_TEST_*; may be left out of a row (0) */
} herd_test;

/* The test and every process it starts run one thread: no ThreadSanitizer
 * run, checked everywhere else (above). */
#define HERD_TEST_ONE_THREAD 1u

#define HERD_TEST_END {NULL, NULL, 0, 0}

/* 1 in a ThreadSanitizer build (make tsan), where a test may run a smaller
 * size that still has the same threads meet the same way (TSan runs the
 * instrumented code 5-20x slower); 0 elsewhere. */
#if defined(__SANITIZE_THREAD__)
#define HERD_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HERD_TEST_TSAN 1
#endif
#endif
#ifndef HERD_TEST_TSAN
#define HERD_TEST_TSAN 0
#endif

_Noreturn void herd_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A scratch directory unique to this test process (created on first use,
 * removed by the runner after the test). */
const char *herd_test_tmpdir(void);

/* Makes the calling process and all it starts from now on die of SIGSYS
 * when one starts a thread (how the runner checks HERD_TEST_ONE_THREAD);
 * 0, or -errno where seccomp cannot be set up. */
int herd_test_one_thread_filter(void);

#define ASSERT_TRUE(c)                                                        \
    do {                                                                      \
        if (!(c))                                                             \
            herd_test_fail(__FILE__, __LINE__, "expected true: %s", #c);      \
    } while (0)

#define ASSERT_EQ_INT(a, b)                                                   \
    do {                                                                      \
        long long herd__a = (long long)(a), herd__b = (long long)(b);         \
        if (herd__a != herd__b)                                               \
            herd_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a,  \
                           #b, herd__a, herd__b);                             \
    } while (0)

#define ASSERT_OK(expr)                                                       \
    do {                                                                      \
        long long herd__s = (long long)(expr);                                \
        if (herd__s != 0)                                                     \
            herd_test_fail(__FILE__, __LINE__, "%s returned %lld, want 0",    \
                           #expr, herd__s);                                   \
    } while (0)

/* |a - b| <= atol + rtol * |b| */
#define ASSERT_NEAR(a, b, atol, rtol)                                         \
    do {                                                                      \
        double herd__a = (double)(a), herd__b = (double)(b);                  \
        double herd__tol = (atol) + (rtol) * fabs(herd__b);                   \
        if (!(fabs(herd__a - herd__b) <= herd__tol))                          \
            herd_test_fail(__FILE__, __LINE__,                                \
                           "%s ~= %s: %.9g vs %.9g (diff %.3g > tol %.3g)",   \
                           #a, #b, herd__a, herd__b, fabs(herd__a - herd__b), \
                           herd__tol);                                        \
    } while (0)

#define ASSERT_STR_CONTAINS(hay, needle)                                      \
    do {                                                                      \
        const char *herd__h = (hay), *herd__n = (needle);                     \
        if (!herd__h || !strstr(herd__h, herd__n))                            \
            herd_test_fail(__FILE__, __LINE__, "%s does not contain \"%s\": \"%s\"", \
                           #hay, herd__n, herd__h ? herd__h : "(null)");      \
    } while (0)

#endif
