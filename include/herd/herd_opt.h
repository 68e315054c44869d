/* herd_opt.h — option tables: an option's name, type, default, bounds,
 * choices, group, help and whether ranks must agree on it, in one row, so
 * that the command line, --help, validation, the log's start record, the
 * ranks' agreed record and the summary's echo are made from the same place.
 *
 * Every option herd has is a row of this kind: the run's (herd_config.h
 * lists them) and each algorithm's (herd_algo_ops.opts). The values live in
 * a struct, at each row's offset; the CLI parses `--name value` into it and
 * prints the rows in --help; nothing outside the table's file names them.
 *
 * Ownership: a table is static and read-only; a STR value points into the
 * string it was parsed from, which must outlive the struct. No state:
 * reentrant.
 */
#ifndef HERD_OPT_H
#define HERD_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "herd/herd_status.h"

typedef enum herd_opt_type {
    HERD_OPT_BOOL,   /* bool; a flag without a value sets it */
    HERD_OPT_SIZE,   /* size_t, a non-negative decimal integer */
    HERD_OPT_LONG,   /* long, a decimal integer (may be negative) */
    HERD_OPT_DOUBLE, /* double, a finite number */
    HERD_OPT_FLOAT,  /* float, a finite number */
    HERD_OPT_STR,    /* const char *: any text, or one of choices when given */
    HERD_OPT_CHOICE, /* int (or an enum of int's size): the index of the value in choices */
    HERD_OPT_U64,    /* uint64_t, a non-negative decimal integer */
    HERD_OPT_CUSTOM, /* parsed and written by the row's parse and format */
} herd_opt_type;

enum {
    HERD_OPT_BOUNDED = 1u << 0,  /* numbers: the value must lie within [min, max] */
    HERD_OPT_MIN_OPEN = 1u << 1, /* ... and be above min, not equal to it */
    HERD_OPT_MAX_OPEN = 1u << 2, /* ... and below max */
    HERD_OPT_AGREE = 1u << 3,    /* every rank of a run must hold the same value (mpirun, herd sim) */
    HERD_OPT_REPEAT = 1u << 4,   /* CUSTOM: each use adds a value (--slow 1:2 --slow 3:4) */
    HERD_OPT_LIBRARY = 1u << 5,  /* set through the library (herd_config_set) only: no command-line flag */
    HERD_OPT_UNSET = 1u << 6,    /* FLOAT: NaN until the run picks the default (the algorithm's own
                                  * where it has the row, else def): a value typed is never taken
                                  * for "not given" */
    HERD_OPT_NONEMPTY = 1u << 7, /* STR: "" is refused (NULL, not "", is the default) */
    HERD_OPT_RESUME = 1u << 8,   /* a run resumed from a checkpoint keeps the value its run had (the
                                  * checkpoint records it): it shapes the trajectory being continued */
};

typedef struct herd_opt {
    const char *name;            /* the flag without its "--"; NULL ends a table */
    herd_opt_type type;
    size_t offset;               /* of the value in the struct the table describes */
    const char *def;             /* the default as it would be typed; NULL: 0, false, NULL */
    unsigned flags;              /* HERD_OPT_BOUNDED, ... */
    double min, max;
    const char *const *choices;  /* CHOICE: the names, NULL-terminated (the index is the value); STR: the allowed values */
    const char *meta;            /* for --help ("N", "X", "NAME"); NULL: from the type */
    const char *help;
    const char *group;           /* the heading --help lists the row under; NULL: the table's first */
    /* CUSTOM: parses value into obj (HERD_EINVAL with a message naming the
     * flag), and writes the value as it would be typed ("" when none) */
    herd_status (*parse)(const struct herd_opt *o, void *obj, const char *value, herd_err *err);
    void (*format)(const struct herd_opt *o, const void *obj, char *buf, size_t cap);
} herd_opt;

/* The row called name in table (NULL-name terminated), or NULL. */
const herd_opt *herd_opt_find(const herd_opt *table, const char *name);

/* Parses value (NULL for a BOOL given as a bare flag) into obj at o->offset,
 * checking its form, choices and bounds; HERD_EINVAL with a message naming
 * the flag ("--softsync must be in [1, 1000000], got 0") otherwise, and
 * nothing stored. */
herd_status herd_opt_parse(const herd_opt *o, void *obj, const char *value, herd_err *err);

/* The row's value in obj as it would be typed ("true"/"false", a number
 * that parses back to the same value, a choice's name); "" for a string
 * that is NULL, an UNSET float still NaN, a CUSTOM with no value. */
void herd_opt_format(const herd_opt *o, const void *obj, char *buf, size_t cap);

/* HERD_EINVAL, naming the flag as herd_opt_parse would, where the row's
 * value in obj lies outside its bounds or choices (a value stored without
 * herd_opt_parse: a struct filled by hand); NaN passes an UNSET row. */
herd_status herd_opt_check(const herd_opt *o, const void *obj, herd_err *err);

/* Sets every row of table in obj to its default. */
herd_status herd_opt_defaults(const herd_opt *table, void *obj, herd_err *err);

/* One line per row ("  --name META   help (default D)"), indented by two. */
void herd_opt_print(const herd_opt *table, FILE *f);

/* Whether the row takes a value on the command line (every type but BOOL). */
static inline bool herd_opt_takes_value(const herd_opt *o) { return o->type != HERD_OPT_BOOL; }

#endif
