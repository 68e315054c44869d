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
 * reads is valid after herd__center_flush or herd__center_unlock.
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
herd_status herd__center_flush(herd__center *c, size_t k);

/* Slot `slot` of shard k: dst/src are the whole vector's elements
 * [lo[k], lo[k+1]) (the caller passes the full-length pointer). */
herd_status herd__center_get(herd__center *c, size_t k, size_t slot, float *full_dst);
herd_status herd__center_put(herd__center *c, size_t k, size_t slot, const float *full_src);
herd_status herd__center_accumulate(herd__center *c, size_t k, size_t slot, const float *full_src);

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

#endif
