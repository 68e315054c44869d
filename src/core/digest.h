/* digest.h — a 64-bit digest of bytes, to tell data apart (internal).
 *
 * Not for security: four lanes of multiply-rotate over 8-byte words, then
 * the length and an avalanche. The same bytes give the same digest on every
 * little-endian machine herd builds for (checkpoints are little-endian
 * only), so a digest written into a checkpoint on one host is compared on
 * another. Chain calls through seed to digest several buffers as one.
 */
#ifndef HERD_CORE_DIGEST_H
#define HERD_CORE_DIGEST_H

#include <stddef.h>
#include <stdint.h>

uint64_t herd__digest64(const void *p, size_t n, uint64_t seed);

#endif
