/* herd.h — the whole public API in one include.
 *
 *   #include <herd/herd.h>
 *   cc prog.c $(pkg-config --cflags --libs herd) -Wl,-rpath,$(pkg-config --variable=libdir herd)
 *
 * A program starts with herd_config.h (a configuration set by name) and
 * herd_run.h (herd_train, its result): tests/install/embed.c. The others:
 * the status codes
 * and errors (herd_status.h), data sets (herd_data.h), models and their
 * kernels (herd_nn.h), optimizers (herd_optim.h), checkpoints, eval and
 * export (herd_ckpt.h), the engines and their communication (herd_engine.h,
 * herd_comm.h), the algorithms' hooks and option tables (herd_algo.h,
 * herd_opt.h) and the random numbers (herd_rng.h). Each header also
 * compiles on its own.
 */
#ifndef HERD_H
#define HERD_H

#include "herd/herd_algo.h"
#include "herd/herd_ckpt.h"
#include "herd/herd_comm.h"
#include "herd/herd_config.h"
#include "herd/herd_data.h"
#include "herd/herd_engine.h"
#include "herd/herd_nn.h"
#include "herd/herd_opt.h"
#include "herd/herd_optim.h"
#include "herd/herd_rng.h"
#include "herd/herd_run.h"
#include "herd/herd_status.h"

#endif
