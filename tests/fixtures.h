/* fixtures.h — what many test files need to set up a run. */
#ifndef HERD_TEST_FIXTURES_H
#define HERD_TEST_FIXTURES_H

#include "herd/herd_run.h"

/* printf into a string that lives as long as the test process (a pool of
 * 256 slots, reused in turn): for option values built from variables. */
const char *herd_test_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* herd_train_config_set that fails the test when cfg is full. */
void herd_test_set(herd_train_config *cfg, const char *name, const char *value);

/* cfg->algo's options parsed from cfg (herd_train's way), for tests that
 * set up herd_worker themselves; fails the test on an error. Caller frees. */
void *herd_test_algo_opts(const herd_train_config *cfg);

/* The wire type's name, as --comm-dtype takes it. */
const char *herd_test_dtype(int dtype);

#endif
