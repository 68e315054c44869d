/* herd_status.h — status codes, error messages and the propagation macros.
 *
 * Every fallible call in herd returns a herd_status: 0 on success, a negative
 * code otherwise. The codes come from one X-macro table that also generates
 * herd_strerror() and herd_err_name(), so a new code is added in one place.
 *
 * A detailed, human-readable message travels in a herd_err the caller owns
 * (functions that take one fill it on failure; passing NULL is allowed).
 * Arguments: every function that returns a herd_status checks its arguments
 * before it does anything. A NULL where a pointer is needed (a buffer may be
 * NULL for a length of 0, and where its header says so), a count or index
 * beyond its array or its world (a rank, a window's length), an unknown name
 * or an enum out of range is HERD_EINVAL, with a message naming the function
 * and the argument in its herd_err, or where it takes none in its object's
 * (herd_comm_last_error, herd_worker.err); where it has neither (a NULL
 * herd_comm, the parsers of names), the status alone says it.
 *
 * Thread-safety: everything here is reentrant; there is no global state.
 */
#ifndef HERD_STATUS_H
#define HERD_STATUS_H

#include <stddef.h>

#define HERD_STATUS_MAP(X)                                        \
    X(OK, 0, "success")                                           \
    X(EINVAL, -1, "invalid argument")                             \
    X(ENOMEM, -2, "out of memory")                                \
    X(EIO, -3, "input/output error")                              \
    X(ECORRUPT, -4, "corrupt or truncated data")                  \
    X(ENOTFOUND, -5, "not found")                                 \
    X(EUNSUPPORTED, -6, "not supported")                          \
    X(ETIMEOUT, -7, "timed out")                                  \
    X(EREMOTE, -8, "a remote worker failed")                      \
    X(ENONFINITE, -9, "non-finite value (NaN or Inf)")            \
    X(EINTERNAL, -10, "internal error")                           \
    X(EKILLED, -11, "a worker was stopped on purpose (--fail)")   \
    X(EDIVERGED, -12, "the training diverged (--stop-on-divergence)") \
    X(ESTOPPED, -13, "stopped by a signal")                       \
    X(EDATA, -14, "other data than the checkpoint's")

typedef enum herd_status {
#define HERD__STATUS_ENUM(name, code, msg) HERD_##name = (code),
    HERD_STATUS_MAP(HERD__STATUS_ENUM)
#undef HERD__STATUS_ENUM
} herd_status;

/* A short description of the code ("corrupt or truncated data"). */
const char *herd_strerror(herd_status st);
/* The code's name ("HERD_ECORRUPT"). */
const char *herd_err_name(herd_status st);

/* Detailed message for the caller; owned by the caller, usually on the stack. */
typedef struct herd_err {
    herd_status status;
    char msg[512];
} herd_err;

/* Formats a message into err (if not NULL) and returns st, so a failing
 * function can end with: return herd_err_set(err, HERD_EIO, "read %s", path); */
herd_status herd_err_set(herd_err *err, herd_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Propagation: needs `herd_status st` in scope and an `out:` cleanup label. */
#define HERD_TRY(expr)                      \
    do {                                    \
        herd_status herd__st = (expr);      \
        if (herd__st < 0) {                 \
            st = herd__st;                  \
            goto out;                       \
        }                                   \
    } while (0)

/* Keeps the first failure: expr runs whatever st is (an unlock after a
 * failed get must still happen), and st takes its status only while st is
 * still HERD_OK. */
#define HERD_KEEP_FIRST(st, expr)           \
    do {                                    \
        herd_status herd__k = (expr);       \
        if ((st) == HERD_OK)                \
            (st) = herd__k;                 \
    } while (0)

/* For bugs, not runtime outcomes: prints where and aborts. */
#define HERD_ASSERT(cond)                                                  \
    do {                                                                   \
        if (!(cond))                                                       \
            herd__assert_fail(#cond, __FILE__, __LINE__);                  \
    } while (0)
_Noreturn void herd__assert_fail(const char *expr, const char *file, int line);

#endif
