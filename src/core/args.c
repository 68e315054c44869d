#include "core/args.h"

#include <string.h>

herd_status herd__args_nonnull(herd_err *err, const char *fn, const char *names, const void *const *ptrs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ptrs[i])
            continue;
        /* the i-th of "a, b, c": the preprocessor wrote the list, so each
         * comma ends a name */
        const char *p = names;
        for (size_t k = 0; k < i && strchr(p, ','); k++)
            p = strchr(p, ',') + 1;
        p += strspn(p, " ");
        return herd_err_set(err, HERD_EINVAL, "%s: %.*s is NULL", fn, (int)strcspn(p, ","), p);
    }
    return HERD_OK;
}
