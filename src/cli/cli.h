/* cli.h — the sub-commands of herd that live outside herd.c (internal to
 * src/cli): `herd sim` (sim.c) and `herd compare` (compare.c), and what they
 * share: starting a child process with a bounded wait, the platforms of the
 * sim engine, and a small flag parser. Like herd.c, these may print usage and
 * exit(). */
#ifndef HERD_CLI_H
#define HERD_CLI_H

#include <stdbool.h>
#include <stddef.h>

int herd__cli_sim(int argc, char **argv);
int herd__cli_compare(int argc, char **argv);

/* ---- child processes ---- */

/* Called with each line the child writes on stdout (without its newline). */
typedef void (*herd__line_fn)(void *ctx, const char *line);

/* Runs argv[0] (a path) with argv, adding `env` ("NAME=VALUE" strings,
 * NULL-terminated, may be NULL) to the environment. stderr is inherited;
 * stdout lines go to on_line, or straight through when on_line is NULL.
 * After timeout_s real seconds the child's process group is killed.
 * Returns the child's exit status (128 + signal when killed, 124 on timeout,
 * 127 when it could not start, with a message) and its real run time. */
int herd__cli_spawn(char *const *argv, char *const *env, double timeout_s, herd__line_fn on_line, void *ctx,
                    double *real_s);

/* The directory of the running herd binary ("." if unknown), into buf. */
const char *herd__cli_self_dir(char *buf, size_t size);

/* ---- flags ---- */

typedef enum herd__flag_kind { HERD__FLAG_SIZE, HERD__FLAG_DOUBLE, HERD__FLAG_STR, HERD__FLAG_BOOL, HERD__FLAG_LIST } herd__flag_kind;

enum { HERD__MAX_LIST = 64 };

/* A repeatable string flag: every value given, in order. */
typedef struct herd__str_list {
    const char *v[HERD__MAX_LIST];
    size_t n;
} herd__str_list;

typedef struct herd__flag {
    const char *name; /* without "--" */
    herd__flag_kind kind;
    void *dest;       /* size_t, double, const char *, bool or herd__str_list */
    const char *meta, *help;
} herd__flag;

/* Parses argv[first, end) (end: the first "--", or argc) into flags; prints
 * a message naming the flag and exits 2 on a bad one, prints usage and
 * exits 0 on -h/--help. Returns the index of the "--" (argc if none). */
int herd__cli_flags(const char *cmd, const herd__flag *flags, int argc, char **argv, int first, void (*usage)(void));
void herd__cli_print_flags(const herd__flag *flags);

/* Numbers on the command line (herd.c): a non-negative decimal integer; a
 * finite number. 0 on success, -1 (nothing stored) otherwise. */
int herd__cli_parse_size(const char *s, size_t *out);
int herd__cli_parse_double(const char *s, double *out);

#endif
