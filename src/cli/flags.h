/* flags.h — the command line's one flag parser (internal to src/cli). Every
 * sub-command describes its flags as herd_opt rows (herd_opt.h: name, type,
 * default, bounds, choices, help) at offsets into an options struct of its
 * own (on its stack: the CLI keeps no state between commands), fills the
 * struct from the rows' defaults and hands both to herd__flags_parse; its
 * --help prints the rows with herd_opt_print. Like the rest of src/cli, it
 * may print usage and exit(): 0 after --help, 2 on a bad flag, with one
 * message naming it. */
#ifndef HERD_CLI_FLAGS_H
#define HERD_CLI_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "herd/herd_opt.h"

enum { HERD__MAX_LIST = 64 };

/* A repeatable string flag: every value given, in order (a CUSTOM row with
 * HERD_OPT_REPEAT, parse herd__opt_list_parse, format herd__opt_list_format;
 * herd_opt_defaults leaves it as the struct's zeroing left it: empty). */
typedef struct herd__str_list {
    const char *v[HERD__MAX_LIST];
    size_t n;
} herd__str_list;

/* Adds value (not "", pointing into argv) to the herd__str_list at the
 * row's offset; at most HERD__MAX_LIST values. */
herd_status herd__opt_list_parse(const herd_opt *o, void *obj, const char *value, herd_err *err);
/* The values as typed, joined by ','. */
void herd__opt_list_format(const herd_opt *o, const void *obj, char *buf, size_t cap);

/* A flag missing from the table, --name [=val]: handles it (taking argv
 * values after i if it needs them) and returns the index of the last
 * argument it used; it exits with a usage error itself when it cannot. */
typedef int (*herd__flag_other_fn)(void *ctx, const char *name, const char *val, int i, int argc, char **argv);

typedef struct herd__flag_cmd {
    const char *cmd;               /* "train", "bench", "sim"...: named in messages */
    const herd_opt *opts;          /* the command's rows ({0} ends them) */
    void *obj;                     /* the struct they describe */
    void (*usage)(FILE *out);      /* -h, --help: to stdout, exit 0 */
    herd__flag_other_fn other;     /* NULL: a flag missing from the table is unknown */
    void *other_ctx;
    bool json;                     /* a usage error also prints herd train --json's failure summary */
} herd__flag_cmd;

/* Sets every row of opts in obj to its default (zero obj first: a CUSTOM
 * row's value is the zeroing's). A default that does not parse is a bug. */
void herd__flags_defaults(const herd_opt *opts, void *obj);

/* Parses argv[first, ...) into c->obj up to the first "--" (returned; argc
 * when none) or, with stop_at_word, the first argument that does not start
 * with '-'. Each value is checked by its row (form, choices, bounds). */
int herd__flags_parse(const herd__flag_cmd *c, int argc, char **argv, int first, bool stop_at_word);
/* A usage error: "herd: MSG (see 'herd CMD --help')", exit 2: the form of
 * a flag unknown, out of place or missing its value. (A value that does
 * not parse gets "herd: --NAME: expected ..., got 'VALUE'", exit 2.) */
_Noreturn void herd__usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same; with json also the summary line of a failure on stdout
 * ({"algo":null,"status":"error","code":"usage","error":MSG}). */
_Noreturn void herd__usage_error_json(bool json, const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* This process's rank where an MPI launcher (mpirun, srun --mpi) says it
 * in the environment, before MPI starts; 0 otherwise. A usage error and a
 * configuration refused are said by rank 0 alone: every rank has the same
 * command line. */
size_t herd__launch_rank(void);

/* A non-negative decimal integer; a finite number: 0, or -1 (nothing stored). */
int herd__parse_size(const char *s, size_t *out);
int herd__parse_double(const char *s, double *out);

#endif
