/* A sharded global vector in one-sided windows (see center.h). */
#include "algo/center.h"

#include <stdlib.h>
#include <string.h>

static size_t header_bytes(void) { return HERD_CENTER_WORDS * sizeof(uint64_t); }

static size_t slice(const herd__center *c, size_t k) { return c->lo[k + 1] - c->lo[k]; }

static size_t slot_offset(const herd__center *c, size_t k, size_t slot)
{
    return header_bytes() + slot * slice(c, k) * sizeof(float);
}

herd_status herd__center_create(herd__center *c, herd_comm *comm, size_t n, size_t shards, size_t nslots,
                               const float *init, bool shared)
{
    memset(c, 0, sizeof *c);
    c->comm = comm, c->n = n, c->shards = shards, c->nslots = nslots;
    if (shards < 1 || shards > comm->size || nslots < 1)
        return herd_err_set(&comm->err, HERD_EINVAL, "center: %zu shards over %zu ranks, %zu slots", shards,
                            comm->size, nslots);
    c->lo = malloc((shards + 1) * sizeof *c->lo);
    if (!c->lo)
        return herd_err_set(&comm->err, HERD_ENOMEM, "center: out of memory");
    for (size_t k = 0; k <= shards; k++)
        c->lo[k] = n * k / shards;
    size_t bytes = 0;
    if (comm->rank < shards) {
        size_t k = comm->rank;
        bytes = slot_offset(c, k, nslots);
        c->mem = calloc(1, bytes);
        if (!c->mem) {
            /* still take part in the collective window creation, exposing nothing */
            herd_err_set(&comm->err, HERD_ENOMEM, "center: out of memory for shard %zu (%zu bytes)", k, bytes);
            bytes = 0;
        } else {
            memcpy((char *)c->mem + slot_offset(c, k, 0), init + c->lo[k], slice(c, k) * sizeof(float));
        }
    }
    /* a window needs a valid base even where it exposes nothing */
    static const char none;
    void *base = c->mem ? c->mem : (void *)&none;
    herd_status st = shared ? herd_comm_win_create_shared(comm, base, bytes, &c->win)
                            : herd_comm_win_create(comm, base, bytes, &c->win);
    if (st == HERD_OK && comm->rank < shards && !c->mem)
        st = HERD_ENOMEM;
    if (st < 0) {
        herd_err saved = comm->err;
        herd__center_free(c);
        comm->err = saved;
    }
    return st;
}

void herd__center_free(herd__center *c)
{
    if (c->win)
        herd_comm_win_free(c->comm, c->win);
    free(c->mem);
    free(c->lo);
    c->win = NULL, c->mem = NULL, c->lo = NULL;
}

void herd__center_range(const herd__center *c, size_t k, size_t *lo, size_t *hi)
{
    *lo = c->lo[k];
    *hi = c->lo[k + 1];
}

herd_status herd__center_lock(herd__center *c, size_t k, bool exclusive)
{
    return herd_comm_win_lock(c->comm, c->win, k, exclusive);
}

herd_status herd__center_unlock(herd__center *c, size_t k) { return herd_comm_win_unlock(c->comm, c->win, k); }

herd_status herd__center_unlock_begin(herd__center *c, size_t k)
{
    return herd_comm_win_unlock_begin(c->comm, c->win, k);
}

herd_status herd__center_wait(herd__center *c) { return herd_comm_win_wait(c->comm, c->win); }

herd_status herd__center_flush(herd__center *c, size_t k) { return herd_comm_win_flush(c->comm, c->win, k); }

herd_status herd__center_get(herd__center *c, size_t k, size_t slot, float *full_dst)
{
    return herd__center_get_slice(c, k, slot, full_dst + c->lo[k]);
}

herd_status herd__center_put(herd__center *c, size_t k, size_t slot, const float *full_src)
{
    return herd_comm_win_put(c->comm, c->win, k, slot_offset(c, k, slot), full_src + c->lo[k],
                             slice(c, k) * sizeof(float));
}

herd_status herd__center_accumulate(herd__center *c, size_t k, size_t slot, const float *full_src)
{
    return herd__center_accumulate_slice(c, k, slot, full_src + c->lo[k]);
}

herd_status herd__center_blend(herd__center *c, size_t k, size_t slot, const float *full_src, float alpha,
                               float *full_fetched)
{
    return herd_comm_win_blend(c->comm, c->win, k, slot_offset(c, k, slot), full_src + c->lo[k], slice(c, k), alpha,
                               full_fetched + c->lo[k]);
}

herd_status herd__center_heavy_ball(herd__center *c, size_t k, size_t slot_v, size_t slot_x, const float *full_upd,
                                    float mu)
{
    return herd_comm_win_heavy_ball(c->comm, c->win, k, slot_offset(c, k, slot_v), slot_offset(c, k, slot_x),
                                    full_upd + c->lo[k], slice(c, k), mu);
}

herd_status herd__center_get_slice(herd__center *c, size_t k, size_t slot, float *dst)
{
    return herd_comm_win_get(c->comm, c->win, k, slot_offset(c, k, slot), dst, slice(c, k) * sizeof(float));
}

herd_status herd__center_accumulate_slice(herd__center *c, size_t k, size_t slot, const float *src)
{
    return herd_comm_win_accumulate(c->comm, c->win, k, slot_offset(c, k, slot), src, slice(c, k));
}

herd_status herd__center_get_count(herd__center *c, size_t k, size_t i, float *dst)
{
    return herd_comm_win_get(c->comm, c->win, k, i * sizeof(uint64_t), dst, sizeof *dst);
}

herd_status herd__center_add_count(herd__center *c, size_t k, size_t i, float delta)
{
    return herd_comm_win_accumulate(c->comm, c->win, k, i * sizeof(uint64_t), &delta, 1);
}

herd_status herd__center_set_count(herd__center *c, size_t k, size_t i, float v)
{
    return herd_comm_win_put(c->comm, c->win, k, i * sizeof(uint64_t), &v, sizeof v);
}

herd_status herd__center_read(herd__center *c, float *dst)
{
    for (size_t k = 0; k < c->shards; k++) {
        herd_status st = herd__center_lock(c, k, false);
        if (st < 0)
            return st;
        st = herd__center_get(c, k, 0, dst);
        HERD_KEEP_FIRST(st, herd__center_unlock(c, k));
        if (st < 0)
            return st;
    }
    return HERD_OK;
}

/* The bytes of the shard this rank holds (0: none). */
static size_t own_bytes(const herd__center *c)
{
    return c->comm->rank < c->shards ? slot_offset(c, c->comm->rank, c->nslots) : 0;
}

herd_status herd__center_save(herd__center *c, herd__state_out *o)
{
    size_t bytes = own_bytes(c), k = c->comm->rank;
    herd__state_put_u64(o, bytes);
    void *at = herd__state_reserve(o, bytes);
    if (!at || !bytes)
        return HERD_OK;
    return herd__state_win_copy(c->comm, c->win, k, false, at, bytes);
}

herd_status herd__center_load(herd__center *c, herd__state_in *in, herd_worker *w, const char *what)
{
    size_t bytes = own_bytes(c), k = c->comm->rank;
    uint64_t saved = herd__state_get_u64(in);
    if (in->bad)
        return herd__state_end(in, w, what);
    if (saved != bytes)
        return herd_err_set(&w->err, HERD_ECORRUPT,
                            "worker %zu: the checkpoint's %s holds %llu bytes of its shard; this run's shard has %zu",
                            w->rank, what, (unsigned long long)saved, bytes);
    const void *src = herd__state_take(in, bytes);
    if (!src || !bytes)
        return src ? HERD_OK : herd__state_end(in, w, what);
    return herd__state_win_copy(c->comm, c->win, k, true, (void *)src, bytes);
}
