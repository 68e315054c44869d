/* args.h — the argument checks at the entry of the public functions
 * (internal): a NULL where a pointer must not be one is HERD_EINVAL with a
 * message naming the function and the argument, before anything is
 * touched. Cheap enough for a hot path: a comparison per pointer, no
 * allocation. Reentrant, no state.
 */
#ifndef HERD_CORE_ARGS_H
#define HERD_CORE_ARGS_H

#include <stddef.h>

#include "herd/herd_status.h"

/* HERD_EINVAL with "fn: NAME is NULL" in err (may be NULL) for the first
 * of the n pointers that is NULL, NAME its spelling in names (the list
 * HERD__NONNULL makes: "a, b, c"); HERD_OK where none is. */
herd_status herd__args_nonnull(herd_err *err, const char *fn, const char *names, const void *const *ptrs, size_t n);

/* HERD__NONNULL(err, a, b, c): the calling function's pointer arguments
 * a, b and c, named as the call spells them (object pointers only; a
 * function pointer is compared on its own). */
#define HERD__NONNULL(err, ...)                                                                 \
    herd__args_nonnull((err), __func__, #__VA_ARGS__, (const void *const[]){__VA_ARGS__},       \
                       sizeof((const void *const[]){__VA_ARGS__}) / sizeof(const void *))

#endif
