/* The fixtures of fixtures.h. */
#include "fixtures.h"

#include <stdarg.h>

#include "harness.h"
#include "herd/herd_algo.h"
#include "run/run.h"

const char *herd_test_fmt(const char *fmt, ...)
{
    static char pool[256][64];
    static size_t next;
    char *s = pool[next++ % 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof pool[0], fmt, ap);
    va_end(ap);
    return s;
}

void herd_test_set(herd_train_config *cfg, const char *name, const char *value)
{
    if (herd_train_config_set(cfg, name, value) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "cannot set --%s: the config is full", name);
}

const char *herd_test_dtype(int dtype)
{
    static const char *const names[] = {"fp32", "fp16", "bf16"};
    return dtype >= 0 && dtype < 3 ? names[dtype] : "?";
}

void *herd_test_algo_opts(const herd_train_config *cfg)
{
    const herd_algo_ops *ops = herd_algo_find(cfg->algo);
    void *opts = NULL;
    herd_err err = {0};
    if (!ops || herd__algo_opts_parse(ops, cfg, &opts, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "options of --algo %s: %s", cfg->algo, ops ? err.msg : "no such algorithm");
    return opts;
}
