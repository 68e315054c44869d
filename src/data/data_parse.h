/* data_parse.h — the data-file parsers on bytes already in memory (internal):
 * what herd_data_load_idx and herd_data_load_cifar run once the files are
 * read, and what the fuzzers in fuzz/ call. The names only label messages.
 * Every header field and length is checked against len before anything is
 * allocated from it. */
#ifndef HERD_DATA_PARSE_H
#define HERD_DATA_PARSE_H

#include <stdbool.h>
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

/* A parser of an image file and its label file, as herd__data_parse_idx. */
typedef herd_status (*herd__data_parse_pair)(const unsigned char *img, size_t ni, const unsigned char *lab, size_t nl,
                                             const char *images_name, const char *labels_name, herd_dataset *out,
                                             herd_err *err);

/* Reads both files whole and parses them with parse: herd_data_load_idx
 * and herd_data_load_npy. */
herd_status herd__data_load_pair(const char *images_path, const char *labels_path, herd__data_parse_pair parse,
                                 herd_dataset *out, herd_err *err);

/* Reads a whole file, gzip-compressed or plain, of at most 1 GiB once
 * decompressed, into *out (malloc'd, the caller frees) of *len bytes. */
herd_status herd__data_read_file(const char *path, unsigned char **out, size_t *len, herd_err *err);

/* A .npy image array and its label array (npy.c): images N x C x H x W,
 * N x H x W x C (where the last dimension is at most 4 and smaller than the
 * second), N x H x W or N x D, uint8 (pixels / 255) or float32 (as
 * they are, finite); labels N or N x 1 integers in [0, 65535]. Fills out
 * (zeroed first; freed on failure); nclasses = 1 + the largest label, at
 * least 2. */
herd_status herd__data_parse_npy(const unsigned char *img, size_t ni, const unsigned char *lab, size_t nl,
                                 const char *images_name, const char *labels_name, herd_dataset *out, herd_err *err);

/* herd_data_open's readers of a directory in the newer formats: *found is
 * false (HERD_OK, nothing read) where dir does not hold that format's
 * files; otherwise both sets are read, or the call fails naming the file.
 * npy.c: train_images.npy, train_labels.npy, test_images.npy,
 * test_labels.npy. imagefolder.c: train/ and test/, a folder of PNG or JPEG
 * images per class. */
herd_status herd__data_open_npy(const char *dir, herd_dataset *train, herd_dataset *test, bool *found,
                                herd_err *err);

herd_status herd__data_open_images(const char *dir, herd_dataset *train, herd_dataset *test, bool *found,
                                   herd_err *err);

/* One decoded image (image.c): 8-bit samples, channel-major (C x H x W),
 * c 1 (gray) or 3 (RGB); px malloc'd, the caller frees. */
typedef struct herd__image {
    size_t c, h, w;
    unsigned char *px;
} herd__image;

/* Decodes a PNG or a JPEG file's bytes (told by their magic bytes, not the
 * name) into img, zeroed first and on failure. Palettes become RGB, gray
 * of fewer bits 8-bit, 16-bit samples their high byte; alpha is dropped.
 * An image of more than max_values samples is refused before it is
 * decoded; so is a PNG whose header claims more than its bytes can hold. */
herd_status herd__image_decode(const unsigned char *buf, size_t len, const char *name, size_t max_values,
                               herd__image *img, herd_err *err);

/* Both sets of one directory hold examples of one shape (C x H x W):
 * HERD_ECORRUPT naming dir and both shapes otherwise. */
herd_status herd__data_same_shape(const char *dir, const herd_dataset *train, const herd_dataset *test, herd_err *err);

#endif
