/* state_io.h — the algorithms' checkpoint records (internal to src/algo).
 *
 * An algorithm's save hook writes its state as a flat record of 64-bit
 * words, doubles and float arrays in host order (checkpoints are
 * little-endian only: see ckpt.c), and its load hook reads it back in the
 * same order. The writer counts bytes even where the buffer is NULL or too
 * small, so one function serves the sizing call and the copying call of
 * herd_algo_ops.save; the reader refuses, instead of overrunning, a record
 * shorter or longer than what it reads.
 *
 * Every record starts with a layout word: a magic tag of the algorithm
 * family in the high 32 bits and a version in the low ones, so a record of
 * another family or layout is refused by name rather than misread.
 */
#ifndef HERD_ALGO_STATE_IO_H
#define HERD_ALGO_STATE_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd_algo.h"

typedef struct herd__state_out {
    unsigned char *p; /* NULL: only count */
    size_t cap, len;
} herd__state_out;

typedef struct herd__state_in {
    const unsigned char *p;
    size_t len, at;
    bool bad; /* a read went past the end */
} herd__state_in;

herd__state_out herd__state_out_make(void *buf, size_t cap);
void herd__state_put(herd__state_out *o, const void *src, size_t bytes);
void herd__state_put_u64(herd__state_out *o, uint64_t v);
void herd__state_put_f64(herd__state_out *o, double v);
/* The next `bytes` of the record for the caller to fill: NULL when only
 * counting (or the buffer is too small); the length grows either way. */
void *herd__state_reserve(herd__state_out *o, size_t bytes);

herd__state_in herd__state_in_make(const void *buf, size_t len);
/* Copies bytes into dst, or zeroes dst and marks the reader bad. */
void herd__state_get(herd__state_in *in, void *dst, size_t bytes);
uint64_t herd__state_get_u64(herd__state_in *in);
double herd__state_get_f64(herd__state_in *in);
/* The next `bytes` of the record in place, or NULL (reader marked bad). */
const void *herd__state_take(herd__state_in *in, size_t bytes);

/* Reads the layout word and checks it against `layout`: HERD_ECORRUPT
 * with w->err naming `what` (the algorithm) when it differs. */
herd_status herd__state_layout(herd__state_in *in, uint64_t layout, herd_worker *w, const char *what);
/* After the last read: HERD_ECORRUPT, w->err naming `what`, unless the
 * record was read exactly to its end. */
herd_status herd__state_end(const herd__state_in *in, herd_worker *w, const char *what);

/* Window state of a checkpoint: bytes at offset 0 of `target`'s window
 * read into buf (put false) or written from it (put true), under that
 * window's exclusive lock. */
herd_status herd__state_win_copy(herd_comm *comm, herd_win *win, size_t target, bool put, void *buf, size_t bytes);

/* A layout word: a four-letter family tag and a version. */
#define HERD__STATE_LAYOUT(a, b, c, d, version)                                                            \
    ((uint64_t)(unsigned char)(a) << 56 | (uint64_t)(unsigned char)(b) << 48 |                             \
     (uint64_t)(unsigned char)(c) << 40 | (uint64_t)(unsigned char)(d) << 32 | (uint64_t)(version))

#endif
