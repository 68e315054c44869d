/* The fixtures of fixtures.h. */
#include "fixtures.h"

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "herd/herd_algo.h"
#include "herd/herd_rng.h"
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

void herd_test_set(herd__train_config *cfg, const char *name, const char *value)
{
    if (herd__train_config_set(cfg, name, value) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "cannot set --%s: the config is full", name);
}

const char *herd_test_dtype(int dtype)
{
    static const char *const names[] = {"fp32", "fp16", "bf16"};
    return dtype >= 0 && dtype < 3 ? names[dtype] : "?";
}

void *herd_test_algo_opts(const herd__train_config *cfg)
{
    const herd_algo_ops *ops = herd_algo_find(cfg->algo);
    void *opts = NULL;
    herd_err err = {0};
    if (!ops || herd__algo_opts_parse(ops, cfg, &opts, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "options of --algo %s: %s", cfg->algo, ops ? err.msg : "no such algorithm");
    return opts;
}

herd__train_config herd_test_config(const char *model, const char *algo, size_t workers)
{
    herd__train_config c;
    herd__train_config_defaults(&c);
    c.data = "synthetic:1x12x12:4";
    c.model = model;
    c.algo = algo;
    c.workers = workers;
    c.epochs = 2;
    c.batch = 32;
    c.train_limit = 2048;
    c.test_limit = 512;
    c.quiet = true;
    c.progress = false;
    return c;
}

pid_t herd_test_spawn(const char *const *args, const char *out, const char *err)
{
    const char *bin = getenv("HERD_BIN");
    if (!bin)
        bin = "build/herd";
    char *argv[64];
    size_t n = 0;
    argv[n++] = (char *)bin;
    for (; args[n - 1] && n < 63; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fo, 1), dup2(fe, 2);
        execv(bin, argv);
        _exit(127);
    }
    return pid;
}

int herd_test_wait(pid_t pid, unsigned timeout_s)
{
    const char *scale = getenv("HERD_TEST_TIMEOUT_SCALE");
    if (scale && atoi(scale) > 1)
        timeout_s *= (unsigned)atoi(scale);
    int status;
    /* polled every 10 ms: a test waits for herd, it does not race it */
    for (unsigned long ms = 0;; ms += 10) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        ASSERT_TRUE(r == 0 || r == pid);
        if (r == pid)
            break;
        if (ms >= 1000ul * timeout_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            herd_test_fail(__FILE__, __LINE__, "herd (pid %ld) still running after %u s: killed", (long)pid, timeout_s);
        }
        usleep(10000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The file at path into buf, NUL-terminated, cut to cap - 1 bytes. */
static void read_into(const char *path, char *buf, size_t cap)
{
    size_t n = 0;
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        ssize_t r;
        while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0)
            n += (size_t)r;
        close(fd);
    }
    buf[n] = 0;
}

void herd_test_run(herd_test_cmd *o, unsigned timeout_s, const char *const *args)
{
    char of[512], ef[512];
    snprintf(of, sizeof of, "%s/out", herd_test_tmpdir());
    snprintf(ef, sizeof ef, "%s/err", herd_test_tmpdir());
    o->code = herd_test_wait(herd_test_spawn(args, of, ef), timeout_s);
    read_into(of, o->out, sizeof o->out);
    read_into(ef, o->err, sizeof o->err);
}

void herd_test_train_ok(const herd__train_config *cfg, herd_train_result *res)
{
    herd_err err = {0};
    if (herd__train(cfg, res, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "herd_train --algo %s: %s", cfg->algo, err.msg);
}

void herd_test_nchw_to_cnhw(const double *in, float *out, size_t N, size_t C, size_t hw)
{
    for (size_t n = 0; n < N; n++)
        for (size_t c = 0; c < C; c++)
            for (size_t i = 0; i < hw; i++)
                out[(c * N + n) * hw + i] = (float)in[(n * C + c) * hw + i];
}

void herd_test_cnhw_to_nchw(const float *in, double *out, size_t N, size_t C, size_t hw)
{
    for (size_t n = 0; n < N; n++)
        for (size_t c = 0; c < C; c++)
            for (size_t i = 0; i < hw; i++)
                out[(n * C + c) * hw + i] = (double)in[(c * N + n) * hw + i];
}

void herd_test_random_batch(size_t n, size_t dim, size_t k, float *x, int32_t *y, uint64_t seed, uint64_t stream)
{
    herd_rng r;
    herd_rng_seed(&r, seed, stream);
    for (size_t i = 0; i < n * dim; i++)
        x[i] = herd_rng_normal(&r);
    for (size_t i = 0; i < n; i++)
        y[i] = (int32_t)herd_rng_below(&r, k);
}
