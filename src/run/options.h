/* options.h — the run's option table and what is made from it, for the
 * run itself and the command line (internal: herd_config.h is the public
 * face). */
#ifndef HERD_RUN_OPTIONS_H
#define HERD_RUN_OPTIONS_H

#include <stddef.h>

#include "herd/herd_algo.h"
#include "herd/herd_config.h"
#include "herd/herd_opt.h"
#include "herd/herd_run.h"
#include "algo/run_config.h"

/* The run's options, NULL-name terminated, rows into herd__train_config. */
extern const herd_opt herd__run_options[];

/* The run's row called name, or NULL. */
const herd_opt *herd__run_option_find(const char *name);

/* The options as one JSON object: every run option but the library's
 * (quiet, progress, keep-final), then "algo_options":{...} with ops's
 * rows in algo_opts (where ops is not NULL). Returns the length written
 * (cut at cap - 1). */
size_t herd__options_json(const herd__train_config *cfg, const herd_algo_ops *ops, const void *algo_opts, char *buf,
                          size_t cap);

/* The struct behind a herd_config (the command line reads and sets it
 * beside herd_config_set). */
herd__train_config *herd__config_run(herd_config *cfg);
const herd__train_config *herd__config_run_const(const herd_config *cfg);

/* herd_config_set on the struct: value (which must outlive cfg: argv, a
 * herd_config's copy) into the run's row called name, or appended to the
 * algorithm's options once its form is checked against the table that has
 * it. HERD_EINVAL with the message. */
herd_status herd__config_set_arg(herd__train_config *cfg, const char *name, const char *value, herd_err *err);

/* A configuration file's text (config_file.c), split in place into its
 * lines' NAME and VALUE (NULL for a bare NAME): fn for each, in order;
 * the first failure ends it, "PATH:LINE: " before fn's message. */
typedef herd_status (*herd__config_line_fn)(void *ctx, const char *name, const char *value, herd_err *err);
herd_status herd__config_text_each(char *text, const char *path, herd__config_line_fn fn, void *ctx, herd_err *err);
/* herd__config_text_each, or for a text that is JSON (its first
 * character '{') its options object's members (config_file.c). */
herd_status herd__config_each(char *text, const char *path, herd__config_line_fn fn, void *ctx, herd_err *err);
/* A configuration file's text into buf, NUL-terminated (a regular file of
 * fewer than cap bytes, no NUL byte in it). */
herd_status herd__config_file_read(const char *path, char *buf, size_t cap, herd_err *err);
/* Exchanges the contents of a and b. */
void herd__config_swap(herd_config *a, herd_config *b);

/* herd_train on the struct itself (herd's tests fill it field by field). */
herd_status herd__train(const herd__train_config *cfg, herd_train_result *res, herd_err *err);

/* herd_config_check on the struct: everything the run refuses before it
 * reads data or starts a worker, with nothing started. */
herd_status herd__config_validate(const herd__train_config *cfg, herd_err *err);

#endif
