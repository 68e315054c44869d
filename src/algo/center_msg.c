/* A sharded center served by messages (see center.h, herd__mcenter). */
#include "algo/center.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"

enum { TAG_MC_REQ = 0x6d63, TAG_MC_REP = 0x6d64 };
enum { MC_DATA = 1, MC_MARK = 2, MC_REPLY = 3 };

/* Every message: this header, then one shard's slice of floats. */
typedef struct mc_hdr {
    uint64_t kind;
    uint64_t seq;
} mc_hdr;

/* What this worker sends to holder k and gets back from it. */
typedef struct herd__mc_out {
    float *acc;        /* d not sent yet (slice of k) */
    bool has_acc;
    bool waiting;      /* a request is out; its reply has not come */
    unsigned char *sbuf, *rbuf;
    herd_req *sreq, *rreq;
} herd__mc_out;

/* What worker j sends to this holder and gets back. */
typedef struct herd__mc_in {
    unsigned char *rbuf, *sbuf;
    herd_req *rreq, *sreq;
    uint64_t marks;    /* drain marks received from j */
} herd__mc_in;

static size_t slice_len(const herd__center *c, size_t k) { return c->lo[k + 1] - c->lo[k]; }

static size_t msg_bytes(const herd__center *c, size_t k) { return sizeof(mc_hdr) + slice_len(c, k) * sizeof(float); }

static mc_hdr *hdr(unsigned char *buf) { return (mc_hdr *)(void *)buf; }

static float *body(unsigned char *buf) { return (float *)(void *)(buf + sizeof(mc_hdr)); }

herd_status herd__mcenter_init(herd__mcenter *m, herd__center *c)
{
    herd_status st = HERD_OK;
    herd_comm *comm = c->comm;
    size_t n = c->shards, me = comm->rank;
    memset(m, 0, sizeof *m);
    m->center = c;
    m->out = calloc(n, sizeof *m->out);
    m->in = calloc(comm->size, sizeof *m->in);
    if (!m->out || !m->in)
        goto oom;
    for (size_t k = 0; k < n; k++) {
        if (k == me)
            continue;
        herd__mc_out *o = &m->out[k];
        o->acc = calloc(slice_len(c, k), sizeof(float));
        o->sbuf = calloc(1, msg_bytes(c, k));
        o->rbuf = calloc(1, msg_bytes(c, k));
        if (!o->acc || !o->sbuf || !o->rbuf)
            goto oom;
        HERD_TRY(herd_comm_irecv(comm, k, TAG_MC_REP, o->rbuf, msg_bytes(c, k), &o->rreq));
    }
    if (me < n) /* a holder: every other rank may send it requests */
        for (size_t j = 0; j < comm->size; j++) {
            if (j == me)
                continue;
            herd__mc_in *in = &m->in[j];
            in->rbuf = calloc(1, msg_bytes(c, me));
            in->sbuf = calloc(1, msg_bytes(c, me));
            if (!in->rbuf || !in->sbuf)
                goto oom;
            HERD_TRY(herd_comm_irecv(comm, j, TAG_MC_REQ, in->rbuf, msg_bytes(c, me), &in->rreq));
        }
out:
    return st;
oom:
    return herd_err_set(&comm->err, HERD_ENOMEM, "center: out of memory for the message buffers of %zu shards", n);
}

void herd__mcenter_free(herd__mcenter *m)
{
    herd__center *c = m->center;
    if (!c)
        return;
    herd_comm *comm = c->comm;
    for (size_t k = 0; m->out && k < c->shards; k++) {
        herd__mc_out *o = &m->out[k];
        if (o->sreq)
            herd_comm_cancel(comm, o->sreq);
        if (o->rreq)
            herd_comm_cancel(comm, o->rreq);
        free(o->acc);
        free(o->sbuf);
        free(o->rbuf);
    }
    for (size_t j = 0; m->in && j < comm->size; j++) {
        herd__mc_in *in = &m->in[j];
        if (in->rreq)
            herd_comm_cancel(comm, in->rreq);
        if (in->sreq)
            herd_comm_cancel(comm, in->sreq);
        free(in->rbuf);
        free(in->sbuf);
    }
    free(m->out);
    free(m->in);
    memset(m, 0, sizeof *m);
}

/* Completes a send that must be done by now (its answer came, or it is
 * this holder's earlier reply to a worker that has sent again since). */
static herd_status finish_send(herd_comm *comm, herd_req **req)
{
    herd_status st = HERD_OK;
    if (*req) {
        herd_req *r = *req;
        *req = NULL;
        st = herd_comm_wait(comm, r);
    }
    return st;
}

/* Tests *req; on completion *done and *req = NULL. */
static herd_status test(herd_comm *comm, herd_req **req, bool *done)
{
    *done = false;
    if (!*req)
        return HERD_OK;
    herd_req *r = *req;
    *req = NULL;
    herd_status st = herd_comm_test(comm, r, done);
    if (st == HERD_OK && !*done)
        *req = r;
    return st;
}

/* This holder's own shard: adds add (if any) and reads the slice into
 * view (if any), under its shared lock. */
static herd_status own_shard(herd__center *c, size_t k, const float *add, float *view)
{
    herd_status st = HERD_OK;
    HERD_TRY(herd__center_lock(c, k, false));
    if (add)
        st = herd__center_accumulate_slice(c, k, 0, add);
    if (st == HERD_OK && view)
        st = herd__center_get_slice(c, k, 0, view);
    HERD_KEEP_FIRST(st, herd__center_unlock(c, k));
out:
    return st;
}

/* Serves worker j's request that has arrived: adds its d to this holder's
 * shard and answers with the shard as it is now. */
static herd_status serve(herd__mcenter *m, size_t j)
{
    herd_status st = HERD_OK;
    herd__center *c = m->center;
    herd_comm *comm = c->comm;
    size_t me = comm->rank;
    herd__mc_in *in = &m->in[j];
    if (hdr(in->rbuf)->kind == MC_MARK) {
        in->marks++;
    } else {
        HERD_TRY(finish_send(comm, &in->sreq));
        HERD_TRY(own_shard(c, me, body(in->rbuf), body(in->sbuf)));
        herd_comm_combined(comm, slice_len(c, me));
        hdr(in->sbuf)->kind = MC_REPLY;
        hdr(in->sbuf)->seq = hdr(in->rbuf)->seq;
        HERD_TRY(herd_comm_isend(comm, j, TAG_MC_REP, in->sbuf, msg_bytes(c, me), &in->sreq));
        m->served++;
    }
    st = herd_comm_irecv(comm, j, TAG_MC_REQ, in->rbuf, msg_bytes(c, me), &in->rreq);
out:
    return st;
}

/* Sends o's waiting d to holder k as a request. */
static herd_status send_request(herd__mcenter *m, size_t k)
{
    herd_status st = HERD_OK;
    herd__center *c = m->center;
    herd__mc_out *o = &m->out[k];
    HERD_TRY(finish_send(c->comm, &o->sreq));
    memcpy(body(o->sbuf), o->acc, slice_len(c, k) * sizeof(float));
    memset(o->acc, 0, slice_len(c, k) * sizeof(float));
    hdr(o->sbuf)->kind = MC_DATA;
    hdr(o->sbuf)->seq = ++m->sent;
    o->has_acc = false;
    o->waiting = true;
    st = herd_comm_isend(c->comm, k, TAG_MC_REQ, o->sbuf, msg_bytes(c, k), &o->sreq);
out:
    return st;
}

/* A holder lost from the run (--fail on an engine where its memory stays):
 * its shard is reached through the window, as herd__center's callers do. */
static herd_status through_window(herd__mcenter *m, size_t k, float *view)
{
    herd_status st = HERD_OK;
    herd__center *c = m->center;
    herd__mc_out *o = &m->out[k];
    HERD_TRY(herd__center_lock(c, k, false));
    if (o->has_acc)
        st = herd__center_accumulate_slice(c, k, 0, o->acc);
    if (st == HERD_OK)
        st = herd__center_get_slice(c, k, 0, view + c->lo[k]);
    HERD_KEEP_FIRST(st, herd__center_unlock(c, k));
    if (st == HERD_OK && o->has_acc) {
        memset(o->acc, 0, slice_len(c, k) * sizeof(float));
        o->has_acc = false;
    }
out:
    return st;
}

herd_status herd__mcenter_poll(herd__mcenter *m, const herd_worker *w, float *view)
{
    herd_status st = HERD_OK;
    herd__center *c = m->center;
    herd_comm *comm = c->comm;
    size_t me = comm->rank;
    bool done;
    if (me < c->shards)
        for (size_t j = 0; j < comm->size; j++) {
            if (j == me || herd_worker_lost(w, j))
                continue;
            HERD_TRY(test(comm, &m->in[j].rreq, &done));
            if (done)
                HERD_TRY(serve(m, j));
        }
    for (size_t k = 0; k < c->shards; k++) {
        if (k == me)
            continue;
        herd__mc_out *o = &m->out[k];
        if (herd_worker_lost(w, k)) {
            o->waiting = false; /* what was in flight to it is gone with it */
            if (o->has_acc)
                HERD_TRY(through_window(m, k, view));
            continue;
        }
        HERD_TRY(test(comm, &o->rreq, &done));
        if (done) {
            memcpy(view + c->lo[k], body(o->rbuf), slice_len(c, k) * sizeof(float));
            o->waiting = false;
            m->replies++;
            HERD_TRY(herd_comm_irecv(comm, k, TAG_MC_REP, o->rbuf, msg_bytes(c, k), &o->rreq));
        }
        if (o->has_acc && !o->waiting)
            HERD_TRY(send_request(m, k));
    }
out:
    return st;
}

bool herd__mcenter_ready(const herd__mcenter *m, const herd_worker *w, size_t k)
{
    return k == m->center->comm->rank || herd_worker_lost(w, k) || !m->out[k].waiting;
}

herd_status herd__mcenter_push(herd__mcenter *m, const herd_worker *w, size_t k, const float *d, float *view)
{
    herd_status st = HERD_OK;
    herd__center *c = m->center;
    const float *src = d + c->lo[k];
    if (k == c->comm->rank) {
        HERD_TRY(own_shard(c, k, src, view + c->lo[k]));
        herd_comm_combined(c->comm, slice_len(c, k));
        goto out;
    }
    herd__mc_out *o = &m->out[k];
    size_t len = slice_len(c, k);
    for (size_t i = 0; i < len; i++)
        o->acc[i] += src[i];
    o->has_acc = true;
    if (herd_worker_lost(w, k))
        st = through_window(m, k, view);
    else if (!o->waiting)
        st = send_request(m, k);
out:
    return st;
}

/* Whether this worker's requests are all answered and, as a holder, every
 * live worker has sent its mark number `marks`. */
static bool drained(const herd__mcenter *m, const herd_worker *w, uint64_t marks, bool *own_done, size_t *who)
{
    const herd__center *c = m->center;
    size_t me = c->comm->rank;
    *own_done = true;
    for (size_t k = 0; k < c->shards; k++)
        if (k != me && !herd_worker_lost(w, k) && (m->out[k].has_acc || m->out[k].waiting)) {
            *own_done = false, *who = k;
            return false;
        }
    if (me < c->shards)
        for (size_t j = 0; j < c->comm->size; j++)
            if (j != me && !herd_worker_lost(w, j) && m->in[j].marks < marks) {
                *who = j;
                return false;
            }
    return true;
}

herd_status herd__mcenter_drain(herd__mcenter *m, herd_worker *w, float *view, double *waited)
{
    herd_status st = HERD_OK;
    herd__center *c = m->center;
    herd_comm *comm = c->comm;
    size_t me = comm->rank, who = 0;
    uint64_t marks = ++m->drains;
    bool marked = false, own_done;
    double t0 = herd__now(), deadline = t0 + comm->timeout_s;
    herd__backoff nap = {.us = 5, .max_us = 1000, .clamp = true};
    for (;;) {
        HERD_TRY(herd__mcenter_poll(m, w, view));
        bool all = drained(m, w, marks, &own_done, &who);
        if (own_done && !marked) { /* everything this worker sent is applied: tell the holders */
            for (size_t k = 0; k < c->shards; k++) {
                if (k == me || herd_worker_lost(w, k))
                    continue;
                herd__mc_out *o = &m->out[k];
                HERD_TRY(finish_send(comm, &o->sreq));
                hdr(o->sbuf)->kind = MC_MARK;
                hdr(o->sbuf)->seq = marks;
                HERD_TRY(herd_comm_isend(comm, k, TAG_MC_REQ, o->sbuf, msg_bytes(c, k), &o->sreq));
            }
            marked = true;
            continue;
        }
        if (all && marked)
            break;
        if ((st = herd_worker_stopping(w)) < 0)
            goto out;
        if (herd__now() > deadline) {
            st = herd_err_set(&comm->err, HERD_ETIMEOUT,
                              "center: waited %g s for worker %zu to %s", comm->timeout_s, who,
                              own_done ? "finish its exchanges with this worker's shard"
                                       : "answer this worker's exchange with its shard");
            goto out;
        }
        herd__backoff_nap(&nap);
    }
    /* the marks and the last replies have left */
    for (size_t k = 0; k < c->shards; k++)
        if (k != me)
            HERD_TRY(finish_send(comm, &m->out[k].sreq));
    for (size_t j = 0; me < c->shards && j < comm->size; j++)
        if (j != me && !herd_worker_lost(w, j))
            HERD_TRY(finish_send(comm, &m->in[j].sreq));
out:
    *waited += herd__now() - t0;
    return st;
}
