/* herd_config.h — a run's configuration, set and read by name.
 *
 *   herd_config *cfg;
 *   herd_config_new(&cfg);
 *   herd_config_set(cfg, "model", "lenet", &err);
 *   herd_config_set(cfg, "workers", "4", &err);
 *   herd_config_set(cfg, "ps-shards", "2", &err);   // an algorithm's option
 *   herd_train(cfg, &res, &err);                     // herd_run.h
 *   herd_config_free(cfg);
 *
 * The names, values and defaults are herd train's flags without their
 * "--" (herd train --help lists them, grouped, with their defaults):
 * herd_config_option lists the run's, each algorithm's table
 * (herd_algo_ops.opts, herd_algo.h) its own. A value is checked as it is
 * set (its form, bounds and choices: the message names the flag, as the
 * command line's does); what depends on other options (an algorithm's
 * option against --algo, --warmup against --epochs, a worker named by
 * --fail against --workers) is checked by herd_config_check and again by
 * herd_train. The config is opaque: a new option is a row of a table, not
 * a field, and changes no struct a program allocates.
 *
 * Ownership: the caller owns cfg; it copies the strings it is given. Not
 * thread-safe: set it from one thread, then hand it to herd_train (which
 * only reads it).
 */
#ifndef HERD_CONFIG_H
#define HERD_CONFIG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "herd/herd_opt.h"
#include "herd/herd_status.h"

typedef struct herd_config herd_config;

/* A configuration at the defaults (those of herd train, but quiet: a
 * library says nothing on stderr unless "quiet" is set to false).
 * HERD_ENOMEM; HERD_EINVAL for out NULL. Every function here refuses a
 * NULL cfg, name or buf with HERD_EINVAL (herd_config_dup returns NULL,
 * herd_config_free and herd_config_set_stop do nothing). */
herd_status herd_config_new(herd_config **out);
void herd_config_free(herd_config *cfg);
/* A copy of cfg (its strings too), or NULL (out of memory). */
herd_config *herd_config_dup(const herd_config *cfg);

/* Sets option `name` (without "--") to value as typed on herd train's
 * command line; NULL for a flag without a value ("nesterov": true). A
 * repeatable option (slow, fail, inject-nan) adds a value each time.
 * HERD_EINVAL (err names the flag and what it takes) for a name no table
 * has or a value refused; nothing is changed then. */
herd_status herd_config_set(herd_config *cfg, const char *name, const char *value, herd_err *err);

/* The options of a configuration file, one a line, as herd_config_set
 * takes them (herd train --config FILE):
 *
 *   # a comment
 *   model = lenet
 *   workers = 4
 *   nesterov            # a flag without a value
 *   slow = 1:2          # repeatable options, a line each
 *
 * A value refused, a line that is not NAME or NAME = VALUE, or an option
 * given twice (but the repeatable) is HERD_EINVAL naming FILE:LINE, and
 * cfg is left as it was. Options set after it override the file's. */
herd_status herd_config_load(herd_config *cfg, const char *path, herd_err *err);

/* The value of option `name` as it would be typed, into buf (cut to
 * cap): "" where none is set (a path left to its default, a learning rate
 * the algorithm picks, an algorithm's option not given). HERD_EINVAL for
 * a name no table has. */
herd_status herd_config_get(const herd_config *cfg, const char *name, char *buf, size_t cap, herd_err *err);

/* The run's i-th option (from 0), NULL past the last: name, type,
 * default, bounds, choices, group, help. The algorithms' options are in
 * their own tables (herd_algo_ops.opts). */
const herd_opt *herd_config_option(size_t i);

/* Everything herd_train refuses before it reads any data or starts any
 * worker: the options together, the algorithm's against --algo, the
 * model, the engine (herd train --dry-run). HERD_EINVAL with the reason. */
herd_status herd_config_check(const herd_config *cfg, herd_err *err);

/* A stop asked from outside: once *stop is non-zero (a signal handler
 * stores the signal's number), the workers end the step under way and stop
 * together; herd_train returns HERD_OK with the result's stop_signal set
 * (herd_run.h). NULL: none. stop must outlive the run. */
void herd_config_set_stop(herd_config *cfg, const atomic_int *stop);

#endif
