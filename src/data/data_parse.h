/* data_parse.h — the data-file parsers on bytes already in memory (internal):
 * what herd_data_load_idx and herd_data_load_cifar run once the files are
 * read, and what the fuzzers in fuzz/ call. The names only label messages.
 * Every header field and length is checked against len before anything is
 * allocated from it. */
#ifndef HERD_DATA_PARSE_H
#define HERD_DATA_PARSE_H

#include <stddef.h>

#include "herd/herd_data.h"

/* An IDX image file (idx3, ubyte) and its label file (idx1, ubyte). Fills out
 * (zeroed first; freed on failure). */
herd_status herd__data_parse_idx(const unsigned char *img, size_t ni, const unsigned char *lab, size_t nl,
                                 const char *images_name, const char *labels_name, herd_dataset *out, herd_err *err);

/* Appends the CIFAR-10 records of buf[0..len) to out (which may already
 * hold out->n examples, or be zeroed). On failure out keeps what it held,
 * possibly in larger buffers; the caller frees it. */
herd_status herd__data_parse_cifar(const unsigned char *buf, size_t len, const char *name, herd_dataset *out,
                                   herd_err *err);

#endif
