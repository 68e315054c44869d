/* fixtures.h — what many test files need to set up a run. */
#ifndef HERD_TEST_FIXTURES_H
#define HERD_TEST_FIXTURES_H

#include <stddef.h>
#include <sys/types.h>

#include "herd/herd_run.h"
#include "run/options.h"

/* The small training run most end-to-end tests start from: synthetic 12x12
 * images of 4 classes, 2048 training and 512 test examples, 2 epochs of
 * batch 32, quiet and without progress lines; everything else herd's
 * default. Tests assign what they need otherwise after the call. */
herd__train_config herd_test_config(const char *model, const char *algo, size_t workers);

/* printf into a string that lives as long as the test process (a pool of
 * 256 slots, reused in turn): for option values built from variables. */
const char *herd_test_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* herd_train that fails the test (naming the algorithm) unless it succeeds. */
void herd_test_train_ok(const herd__train_config *cfg, herd_train_result *res);

/* herd__train_config_set that fails the test when cfg is full. */
void herd_test_set(herd__train_config *cfg, const char *name, const char *value);

/* cfg->algo's options parsed from cfg (herd_train's way), for tests that
 * set up herd_worker themselves; fails the test on an error. Caller frees. */
void *herd_test_algo_opts(const herd__train_config *cfg);

/* The wire type's name, as --comm-dtype takes it. */
const char *herd_test_dtype(int dtype);

/* ---- the herd binary, run as a user runs it ------------------------------ */

/* Starts $HERD_BIN (build/herd when unset) with args (NULL-terminated), its
 * stdout and stderr written to the files out and err. Fails the test when it
 * cannot fork; an exec failure exits 127. */
pid_t herd_test_spawn(const char *const *args, const char *out, const char *err);

/* Waits for pid from herd_test_spawn; returns its exit code, or 128 + the
 * signal that ended it. One still running after timeout_s (times the
 * runner's -t scale) is killed and fails the test, so a hang names itself. */
int herd_test_wait(pid_t pid, unsigned timeout_s);

/* A finished command: exit code (as herd_test_wait) and what it printed. */
typedef struct herd_test_cmd {
    int code;
    char out[16384], err[16384];
} herd_test_cmd;

/* Runs $HERD_BIN with args to the end (timeout_s at most, as
 * herd_test_wait), capturing stdout and stderr into o (truncated to fit). */
void herd_test_run(herd_test_cmd *o, unsigned timeout_s, const char *const *args);

/* herd_test_run for a command that should end quickly: within the 60 s a
 * test has by default. */
#define HERD_TEST_RUN(o, ...) herd_test_run((o), 50, (const char *const[]){__VA_ARGS__, NULL})

/* NCHW doubles -> CNHW floats and back (C planes of N images of hw), the
 * layout change written out as index arithmetic, independent of
 * herd__nchw_to_cnhw / herd__cnhw_to_nchw. */
void herd_test_nchw_to_cnhw(const double *in, float *out, size_t N, size_t C, size_t hw);
void herd_test_cnhw_to_nchw(const float *in, double *out, size_t N, size_t C, size_t hw);

/* n examples of dim standard normal floats and labels in [0, k), from the
 * rng of (seed, stream). */
void herd_test_random_batch(size_t n, size_t dim, size_t k, float *x, int32_t *y, uint64_t seed, uint64_t stream);

#endif
