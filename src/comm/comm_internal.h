/* comm_internal.h — helpers shared by the comm files (wrappers, threads
 * engine, collectives) and test hooks; internal to herd. Reentrant, no state. */
#ifndef HERD_COMM_INTERNAL_H
#define HERD_COMM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "herd/herd_comm.h"
#include "comm/sim.h" /* what the mpi engine's table adds in herd-sim */

/* c's wait limit in seconds (c->timeout_s, or 60 when unset). */
double herd__comm_timeout(const herd_comm *c);
/* now + herd__comm_timeout(c): the deadline of a wait starting now. */
double herd__comm_deadline(const herd_comm *c);

/* herd_broadcast with an explicit pipeline segment (bytes, 0: the default),
 * so tests can force many segments on small buffers. */
herd_status herd__broadcast_seg(herd_comm *c, void *buf, size_t bytes, size_t root, size_t segment_bytes);

/* The parts of herd_allreduce around the sum, for an engine that does not
 * fuse them into it (o->scale already 1 for "none"). Before: sets
 * *o->input_nonfinite when buf holds a NaN or Inf (when asked). After: buf
 * *= o->scale; *o->nonfinite = whether buf holds a NaN or Inf (when asked);
 * then o->apply on the whole of buf (when given, and not non-finite). One
 * pass over buf each, none where nothing is asked. */
void herd__allreduce_start(const float *buf, size_t count, const herd_allreduce_opts *o);
void herd__allreduce_finish(float *buf, size_t count, const herd_allreduce_opts *o);

/* herd_comm_win_blend where the engine applies none at the target: a get,
 * a flush and an accumulate through c's window hooks. */
herd_status herd__comm_blend_by_parts(herd_comm *c, herd_win *w, size_t target, size_t offset, const float *src,
                                      size_t count, float alpha, float *fetched);
/* herd_comm_win_heavy_ball likewise: a get, a flush, a put and an accumulate. */
herd_status herd__comm_heavy_ball_by_parts(herd_comm *c, herd_win *w, size_t target, size_t offset_v, size_t offset_x,
                                           const float *upd, size_t count, float mu);

#endif
