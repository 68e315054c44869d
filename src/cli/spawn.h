/* spawn.h — starting a child process with a bounded wait (internal to
 * src/cli: herd sim starts smpirun, herd compare starts herd). */
#ifndef HERD_CLI_SPAWN_H
#define HERD_CLI_SPAWN_H

#include <stddef.h>

/* Called with each line the child writes on stdout (without its newline). */
typedef void (*herd__line_fn)(void *ctx, const char *line);

/* Runs argv[0] (a path) with argv, adding `env` ("NAME=VALUE" strings,
 * NULL-terminated, may be NULL) to the environment. stderr is inherited;
 * stdout lines go to on_line, or straight through when on_line is NULL.
 * After timeout_s real seconds the child gets SIGTERM, and SIGKILL 5 s
 * later if it is still running (it stays in herd's process group, so a
 * Ctrl-C reaches it too).
 * Returns the child's exit status (128 + signal when killed, 124 on timeout,
 * 127 when it could not start, with a message) and its real run time. */
int herd__cli_spawn(char *const *argv, char *const *env, double timeout_s, herd__line_fn on_line, void *ctx,
                    double *real_s);

/* The directory of the running herd binary ("." if unknown), into buf. */
const char *herd__cli_self_dir(char *buf, size_t size);

#endif
