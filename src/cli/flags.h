/* flags.h — the command line's one flag parser (internal to src/cli). Every
 * sub-command describes its flags in a table of herd__flag rows pointing
 * into an options struct of its own (on its stack: the CLI keeps no state
 * between commands), and hands it to herd__flags_parse. Like the rest of
 * src/cli, it may print usage and exit(): 0 after --help, 2 on a bad flag,
 * with one message naming it. */
#ifndef HERD_CLI_FLAGS_H
#define HERD_CLI_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef enum herd__flag_kind {
    HERD__FLAG_SIZE,   /* size_t: a non-negative decimal integer */
    HERD__FLAG_U64,    /* uint64_t: the same */
    HERD__FLAG_DOUBLE, /* double: a finite number */
    HERD__FLAG_FLOAT,  /* float: a finite number */
    HERD__FLAG_STR,    /* const char *, pointing into argv */
    HERD__FLAG_BOOL,   /* bool, set by the bare flag */
    HERD__FLAG_LIST,   /* herd__str_list: a repeatable string */
    HERD__FLAG_FN,     /* parsed by the row's parse function */
} herd__flag_kind;

enum { HERD__MAX_LIST = 64 };

/* A repeatable string flag: every value given, in order. */
typedef struct herd__str_list {
    const char *v[HERD__MAX_LIST];
    size_t n;
} herd__str_list;

typedef struct herd__flag {
    const char *name; /* without "--"; NULL ends a table */
    herd__flag_kind kind;
    void *dest;
    const char *meta, *help;
    /* HERD__FLAG_FN: parses val into dest; false with the message (what
     * follows "herd: ") in msg */
    bool (*parse)(void *dest, const char *val, char *msg, size_t cap);
} herd__flag;

/* A flag missing from the table, --name [=val]: handles it (taking argv
 * values after i if it needs them) and returns the index of the last
 * argument it used; it exits with a usage error itself when it cannot. */
typedef int (*herd__flag_other_fn)(void *ctx, const char *name, const char *val, int i, int argc, char **argv);

typedef struct herd__flag_cmd {
    const char *cmd;               /* "train", "bench", "sim"...: named in messages */
    const herd__flag *flags;
    void (*usage)(FILE *out);      /* -h, --help: to stdout, exit 0 */
    herd__flag_other_fn other;     /* NULL: a flag missing from the table is unknown */
    void *other_ctx;
    bool json;                     /* a usage error also prints herd train --json's failure summary */
} herd__flag_cmd;

/* Parses argv[first, ...) up to the first "--" (returned; argc when none)
 * or, with stop_at_word, the first argument that does not start with '-'. */
int herd__flags_parse(const herd__flag_cmd *c, int argc, char **argv, int first, bool stop_at_word);
/* One line per row, as --help shows them. */
void herd__flags_print(const herd__flag *flags, FILE *out);
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
