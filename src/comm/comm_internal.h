/* comm_internal.h — helpers shared by the comm files (wrappers, threads
 * engine, collectives) and test hooks; internal to herd. Reentrant, no state. */
#ifndef HERD_COMM_INTERNAL_H
#define HERD_COMM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "herd/herd_comm.h"

/* c's wait limit in seconds (c->timeout_s, or 60 when unset). */
double herd__comm_timeout(const herd_comm *c);
/* now + herd__comm_timeout(c): the deadline of a wait starting now. */
double herd__comm_deadline(const herd_comm *c);

/* herd_broadcast with an explicit pipeline segment (bytes, 0: the default),
 * so tests can force many segments on small buffers. */
herd_status herd__broadcast_seg(herd_comm *c, void *buf, size_t bytes, size_t root, size_t segment_bytes);

/* The part of herd_allreduce after the sum, for an engine that does not fuse
 * it: buf *= scale (when not 1); *nonfinite (when not NULL) = whether buf
 * holds a NaN or Inf. One pass over buf. */
void herd__allreduce_finish(float *buf, size_t count, float scale, bool *nonfinite);

#endif
