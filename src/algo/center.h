/* center.h — a global copy of the weights that every worker reaches
 * one-sidedly: the parameter server's weights and the elastic center
 * (internal to src/algo).
 *
 * The vector (n floats) is cut into `shards` contiguous slices held by ranks
 * 0..shards-1, each in one window. A shard's window holds a header of
 * HERD_CENTER_WORDS 64-bit words (counters the algorithm defines: version,
 * softsync group...) and then `nslots` float vectors of the slice's length
 * (slot 0: the weights; others: server momentum, a softsync accumulator...).
 * Shards are independent servers: each has its own lock and header, and a
 * worker visits them in order 0..shards-1.
 *
 * Every call works on one shard through the transport's windows, so it runs
 * on every engine without the holder's help. As with MPI_Get, what a get
 * reads is valid after herd__center_flush or herd__center_unlock, or,
 * where the shard's epoch ended with herd__center_unlock_begin, after
 * herd__center_wait: a worker that visits several shards ends each epoch
 * so and waits once, their holders serving them side by side.
 */
#ifndef HERD_ALGO_CENTER_H
#define HERD_ALGO_CENTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "herd/herd_algo.h"
#include "herd/herd_comm.h"
#include "algo/state_io.h"

enum { HERD_CENTER_WORDS = 8 };

typedef struct herd__center {
    herd_comm *comm;
    herd_win *win;
    size_t n, shards, nslots;
    size_t *lo;       /* shards + 1: shard k holds [lo[k], lo[k+1]) */
    void *mem;        /* this rank's shard (header + slots), or NULL */
} herd__center;

/* Collective: every rank calls it with the same n, shards, nslots; the shard
 * holders copy their slice of init (the same on every rank) into slot 0,
 * zero the other slots and the header. shared: every lock the caller takes
 * is shared (HERD_WIN_SHARED_LOCKS), but a checkpoint's. */
herd_status herd__center_create(herd__center *c, herd_comm *comm, size_t n, size_t shards, size_t nslots,
                               const float *init, bool shared);
/* Frees what create made; after the run's workers stopped (see herd_algo.h). */
void herd__center_free(herd__center *c);

/* Shard k's range [*lo, *hi). */
void herd__center_range(const herd__center *c, size_t k, size_t *lo, size_t *hi);

herd_status herd__center_lock(herd__center *c, size_t k, bool exclusive);
herd_status herd__center_unlock(herd__center *c, size_t k);
herd_status herd__center_unlock_begin(herd__center *c, size_t k);
herd_status herd__center_wait(herd__center *c);
herd_status herd__center_flush(herd__center *c, size_t k);

/* Slot `slot` of shard k: dst/src are the whole vector's elements
 * [lo[k], lo[k+1]) (the caller passes the full-length pointer). */
herd_status herd__center_get(herd__center *c, size_t k, size_t slot, float *full_dst);
herd_status herd__center_put(herd__center *c, size_t k, size_t slot, const float *full_src);
herd_status herd__center_accumulate(herd__center *c, size_t k, size_t slot, const float *full_src);
/* The slot's slice moved toward src's by alpha, its values before into
 * full_fetched (herd_comm_win_blend). */
herd_status herd__center_blend(herd__center *c, size_t k, size_t slot, const float *full_src, float alpha,
                               float *full_fetched);
/* Slot slot_v's slice v = mu v - upd, then slot slot_x's += v
 * (herd_comm_win_heavy_ball). */
herd_status herd__center_heavy_ball(herd__center *c, size_t k, size_t slot_v, size_t slot_x, const float *full_upd,
                                    float mu);

/* The same on the slice alone: src/dst hold shard k's elements only. */
herd_status herd__center_get_slice(herd__center *c, size_t k, size_t slot, float *dst);
herd_status herd__center_accumulate_slice(herd__center *c, size_t k, size_t slot, const float *src);

/* Header word `i` of shard k used as a float counter (exact up to 2^24):
 * adding is one accumulate, so it is atomic even under a shared lock. */
herd_status herd__center_get_count(herd__center *c, size_t k, size_t i, float *dst);
herd_status herd__center_add_count(herd__center *c, size_t k, size_t i, float delta);
herd_status herd__center_set_count(herd__center *c, size_t k, size_t i, float v);

/* The whole slot 0 into dst: every shard under a shared lock in turn. */
herd_status herd__center_read(herd__center *c, float *dst);

/* Checkpoints: the shard this rank holds (its header words and every slot)
 * as one record entry, copied under the shard's exclusive lock; an empty
 * entry on a rank that holds none. Save is called with every worker
 * between steps (see ckpt_run.h), so nobody else has the shard half
 * updated; load, before any worker steps. */
herd_status herd__center_save(herd__center *c, herd__state_out *o);
herd_status herd__center_load(herd__center *c, herd__state_in *in, herd_worker *w, const char *what);

/* A center served by messages (src/algo/center_msg.c): the shards stay in
 * their windows (reads of the whole center, checkpoints and a lost holder's
 * shard go through them), but an exchange sends each holder its slice of d
 * as a message, and the holder adds it to its shard and answers with the
 * slice as it is then, when it next polls (herd__mcenter_poll, at its own
 * exchanges and steps). Nothing waits: a worker has at most one request out
 * to each holder, and its view of slice k is the last answer from k. An
 * exchange pulls and pushes only the slices whose last exchange is
 * answered, so that each d is computed against the slice as the holder
 * last had it; d summed over exchanges made against one stale answer would
 * push the center past where the worker pulled it (the elastic force
 * applied once per exchange, not once per answer). Where one-sided operations are messages the target must
 * serve anyway (SimGrid's SMPI completes every accumulate before it
 * returns; Open MPI's pt2pt component across hosts waits for the target),
 * this turns an exchange's round trips per shard into messages that all
 * travel at once.
 *
 * Every worker makes one for the same center (collective only through the
 * center's creation); they talk with their own tags. */
typedef struct herd__mc_out herd__mc_out;
typedef struct herd__mc_in herd__mc_in;
typedef struct herd__mcenter {
    herd__center *center;
    herd__mc_out *out;  /* per holder: requests to it, its answers */
    herd__mc_in *in;    /* per rank (on a holder): its requests, the answers */
    uint64_t sent, served, replies, drains;
} herd__mcenter;

herd_status herd__mcenter_init(herd__mcenter *m, herd__center *c);
void herd__mcenter_free(herd__mcenter *m);
/* Whether this worker's last exchange with shard k is answered (always
 * for its own shard): its view of the slice is fresh, and an exchange may
 * use it and push again. */
bool herd__mcenter_ready(const herd__mcenter *m, const herd_worker *w, size_t k);
/* Adds shard k's slice of d (full length) to the shard: this rank's own at
 * once (and reads it into view), another's by message, whose answer a later
 * poll takes into view. Never waits for another rank. */
herd_status herd__mcenter_push(herd__mcenter *m, const herd_worker *w, size_t k, const float *d, float *view);
/* Serves the requests that have come to this holder and takes the answers
 * that have come to this worker into view; sends d held back. No wait. */
herd_status herd__mcenter_poll(herd__mcenter *m, const herd_worker *w, float *view);
/* Every worker calls it at the same point (the run's end, a checkpoint's
 * hold): returns once everything this worker sent is applied and every live
 * worker has said the same of its own, serving meanwhile; adds the time to
 * *waited. Times out after the comm's timeout, naming whom it waited for. */
herd_status herd__mcenter_drain(herd__mcenter *m, herd_worker *w, float *view, double *waited);

#endif
