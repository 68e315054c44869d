/* spawn.h — starting a child process with a bounded wait, and the signals
 * of the commands that start them (internal to src/cli: herd sim starts
 * smpirun, herd compare starts herd).
 *
 * A child runs in a process group of its own, which holds what it starts in
 * turn (smpirun starts smpimain): herd stops all of it, and nothing else (a
 * pipeline's other commands share herd's group). A terminal's Ctrl-C
 * therefore reaches herd alone, which forwards it. Once
 * herd__cli_catch_signals has run, SIGINT, SIGTERM and SIGHUP (unless
 * SIGHUP was ignored when herd started: nohup) no longer end herd: the
 * first one is forwarded to the group of the child under way, whose
 * processes get SIGKILL after the grace period (a second signal is
 * forwarded too, and cuts the grace to a fifth), and no child starts after
 * it. The command then removes its
 * files, prints one line and exits 128 + herd__cli_stop_signal(). */
#ifndef HERD_CLI_SPAWN_H
#define HERD_CLI_SPAWN_H

#include <stddef.h>

/* Called with each line the child writes on stdout (without its newline). */
typedef void (*herd__line_fn)(void *ctx, const char *line);

/* Seconds a stopped child has to end before SIGKILL: smpirun's simulation
 * ends within a second of SIGTERM. A command whose child starts children of
 * its own (herd compare starting herd sim) gives it longer, so that the
 * child's grace runs out first (after a second signal too: a fifth of each). */
#define HERD__SPAWN_GRACE_S 5.0

typedef struct herd__spawn {
    char *const *argv;     /* argv[0] is a path */
    char *const *env;      /* "NAME=VALUE" strings added to the environment, NULL-terminated; may be NULL */
    double timeout_s;      /* real seconds, then the child is stopped with SIGTERM (exit 124) */
    double grace_s;        /* from SIGTERM (or a forwarded signal) to SIGKILL */
    herd__line_fn on_line; /* each stdout line; NULL: stdout goes straight through */
    void *ctx;
} herd__spawn;

/* Runs s->argv and waits until every process of its group has ended (the
 * child's stray descendants too: herd is their subreaper). stderr is
 * inherited. Returns the child's exit status (128 + signal when killed, 124
 * on timeout, 127 when it could not start, with a message), or 128 + the
 * signal when herd was stopped (herd__cli_stop_signal() says so; no child is
 * started once it was), and the real time it ran. */
int herd__cli_spawn(const herd__spawn *s, double *real_s);

/* From now on SIGINT, SIGTERM and SIGHUP stop the children rather than end
 * herd (see above). For herd sim and herd compare; herd train has its own. */
void herd__cli_catch_signals(void);

/* The first signal that asked herd to stop, or 0. */
int herd__cli_stop_signal(void);

/* "SIGINT", "SIGTERM", "SIGHUP", or "a signal". */
const char *herd__cli_signal_name(int sig);

/* The directory of the running herd binary ("." if unknown), into buf. */
const char *herd__cli_self_dir(char *buf, size_t size);

#endif
