/* Collectives built once on the transport (herd_comm_* only), so they run on
 * every engine: ring allreduce, ring allgather, broadcast; fp16/bf16 wires. */
#include "comm/comm_internal.h"
#include "core/finite.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Tags below 32768, the smallest MPI_TAG_UB MPI allows. */
enum { TAG_ALLREDUCE = 0x7a11, TAG_ALLGATHER = 0x7a12, TAG_BCAST = 0x7a13 };

/* Segments in flight each way: enough to pipeline, few enough that an
 * engine buffering eagerly does not hold a whole chunk of copies. */
enum { RING_WINDOW = 4, BCAST_WINDOW = 4 };
#define DEFAULT_SEGMENT ((size_t)1 << 20)

/* ---- conversions ---------------------------------------------------- */

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_f16(float f)
{
    uint32_t x = bits_of(f), sign = (x >> 16) & 0x8000u;
    uint32_t e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
    if (e == 0xff) /* Inf or NaN (NaN keeps a payload bit) */
        return (uint16_t)(sign | 0x7c00u | (m ? 0x200u | (m >> 13) : 0));
    int exp = (int)e - 127 + 15;
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) { /* subnormal half, or zero */
        if (exp < -10)
            return (uint16_t)sign;
        m |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (m >> 13), rem = m & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1)))
        half++; /* may carry into the exponent, up to Inf: correct rounding */
    return (uint16_t)half;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0)
            return float_of(sign);
        float v = (float)m * (1.0f / 16777216.0f); /* m * 2^-24 */
        return sign ? -v : v;
    }
    if (e == 31) /* Inf, or NaN made quiet with its payload (as vcvtph2ps does) */
        return float_of(sign | 0x7f800000u | (m ? 0x400000u : 0) | (m << 13));
    return float_of(sign | ((e - 15 + 127) << 23) | (m << 13));
}

/* Where the compiler has _Float16 (GCC 12+, clang on x86-64), its IEEE
 * conversions (vcvtps2ph/vcvtph2ps with F16C) do the same rounding as the
 * portable code above, vectorized. */
#if defined(__FLT16_MAX__) && defined(__F16C__)
void herd_f32_to_f16(const float *in, uint16_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        _Float16 h = (_Float16)in[i];
        memcpy(&out[i], &h, sizeof h);
    }
}

void herd_f16_to_f32(const uint16_t *in, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        _Float16 h;
        memcpy(&h, &in[i], sizeof h);
        out[i] = (float)h;
    }
}

/* keep the portable versions compiled and callable for the tests */
uint16_t herd__f32_to_f16_portable(float f) { return f32_to_f16(f); }
float herd__f16_to_f32_portable(uint16_t h) { return f16_to_f32(h); }
#else
void herd_f32_to_f16(const float *in, uint16_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = f32_to_f16(in[i]);
}

void herd_f16_to_f32(const uint16_t *in, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = f16_to_f32(in[i]);
}

uint16_t herd__f32_to_f16_portable(float f) { return f32_to_f16(f); }
float herd__f16_to_f32_portable(uint16_t h) { return f16_to_f32(h); }
#endif

void herd_f32_to_bf16(const float *in, uint16_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x = bits_of(in[i]);
        if ((x & 0x7fffffffu) > 0x7f800000u) {
            out[i] = (uint16_t)((x >> 16) | 0x40u); /* NaN stays NaN */
            continue;
        }
        x += 0x7fffu + ((x >> 16) & 1u); /* round to nearest even */
        out[i] = (uint16_t)(x >> 16);
    }
}

void herd_bf16_to_f32(const uint16_t *in, float *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = float_of((uint32_t)in[i] << 16);
}

/* ---- the ring ------------------------------------------------------- */

static size_t wire_size(herd_dtype t) { return t == HERD_F32 ? 4 : 2; }

static void to_wire(herd_dtype t, const float *in, void *out, size_t n)
{
    if (t == HERD_F32)
        memcpy(out, in, n * 4);
    else if (t == HERD_F16)
        herd_f32_to_f16(in, out, n);
    else
        herd_f32_to_bf16(in, out, n);
}

static void from_wire(herd_dtype t, const void *in, float *out, size_t n)
{
    if (t == HERD_F32)
        memcpy(out, in, n * 4);
    else if (t == HERD_F16)
        herd_f16_to_f32(in, out, n);
    else
        herd_bf16_to_f32(in, out, n);
}

/* Elements [lo, hi) of chunk i of count split over n ranks: the first
 * count % n chunks have one element more. */
static void chunk_range(size_t count, size_t n, size_t i, size_t *lo, size_t *hi)
{
    size_t q = count / n, r = count % n;
    *lo = i * q + (i < r ? i : r);
    *hi = *lo + q + (i < r);
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* Scratch of one allreduce: whole-chunk wire buffers and request lists. */
typedef struct ring_scratch {
    void *sbuf, *rbuf; /* the largest chunk, in wire elements (16-bit wires) */
    float *rf32;       /* RING_WINDOW segments, fp32 (fp32 wire, reduce steps): segment k
                        * lands in slot k % RING_WINDOW, free again once k is added */
    float *tmp;        /* one segment, converted back to fp32 */
    herd_req **sreq, **rreq;
} ring_scratch;

/* One ring step: send chunk `si` to the right and receive chunk `ri` from
 * the left, in segments, RING_WINDOW of them in flight each way (receives
 * posted before sends). Each arriving segment is added into buf (reduce) or
 * copied into it while the later ones are still in flight. With a 16-bit
 * wire, `send_ready` says x->sbuf already holds chunk si in wire format. */
static herd_status ring_step(herd_comm *c, float *buf, size_t count, size_t si, size_t ri, bool reduce,
                             bool send_ready, herd_dtype wire, size_t seg, ring_scratch *x)
{
    size_t n = c->size, right = (c->rank + 1) % n, left = (c->rank + n - 1) % n, es = wire_size(wire);
    size_t slo, shi, rlo, rhi;
    chunk_range(count, n, si, &slo, &shi);
    chunk_range(count, n, ri, &rlo, &rhi);
    size_t slen = shi - slo, rlen = rhi - rlo, nseg_s = (slen + seg - 1) / seg, nseg_r = (rlen + seg - 1) / seg;
    /* fp32 travels straight from buf, and lands straight in it when nothing
     * is to be added; 16-bit wires go through the scratch buffers */
    const unsigned char *sbase = (const unsigned char *)(buf + slo);
    unsigned char *rbase = (unsigned char *)(buf + rlo);
    if (wire != HERD_F32) {
        if (!send_ready)
            to_wire(wire, buf + slo, x->sbuf, slen);
        sbase = x->sbuf;
        rbase = x->rbuf;
    }
    bool slots = wire == HERD_F32 && reduce; /* receive into rf32's segment slots */
    herd_status st = HERD_OK;
    size_t posted_r = 0, posted_s = 0, done_r = 0, done_s = 0, nseg = nseg_r > nseg_s ? nseg_r : nseg_s;
    for (size_t k = 0; k < nseg && st == HERD_OK; k++) {
        for (; posted_r < nseg_r && posted_r < k + RING_WINDOW && st == HERD_OK; posted_r++) {
            size_t o = posted_r * seg, m = min_size(rlen - o, seg);
            void *to = slots ? (void *)(x->rf32 + (posted_r % RING_WINDOW) * seg) : (void *)(rbase + o * es);
            st = herd_comm_irecv(c, left, TAG_ALLREDUCE, to, m * es, &x->rreq[posted_r]);
        }
        for (; posted_s < nseg_s && posted_s < k + RING_WINDOW && st == HERD_OK; posted_s++) {
            size_t o = posted_s * seg, m = min_size(slen - o, seg);
            st = herd_comm_isend(c, right, TAG_ALLREDUCE, sbase + o * es, m * es, &x->sreq[posted_s]);
        }
        if (st == HERD_OK && k < nseg_r) {
            st = herd_comm_wait(c, x->rreq[k]);
            done_r = k + 1;
            size_t o = k * seg, m = min_size(rlen - o, seg);
            float *dst = buf + rlo + o;
            const float *got = x->tmp;
            if (st == HERD_OK && wire != HERD_F32)
                from_wire(wire, (const unsigned char *)x->rbuf + o * es, reduce ? x->tmp : dst, m);
            else if (reduce)
                got = x->rf32 + (k % RING_WINDOW) * seg;
            if (st == HERD_OK && reduce)
                for (size_t i = 0; i < m; i++)
                    dst[i] += got[i];
        }
        if (st == HERD_OK && k < nseg_s) {
            st = herd_comm_wait(c, x->sreq[k]);
            done_s = k + 1;
        }
    }
    /* after a failure, abandon what is still outstanding (a failed wait ended its own) */
    for (size_t k = done_r; k < posted_r; k++)
        herd_comm_cancel(c, x->rreq[k]);
    for (size_t k = done_s; k < posted_s; k++)
        herd_comm_cancel(c, x->sreq[k]);
    return st;
}

static herd_status ring_allreduce(herd_comm *c, float *buf, size_t count, herd_dtype wire, size_t segment_bytes)
{
    size_t n = c->size, r = c->rank, es = wire_size(wire);
    size_t seg = (segment_bytes ? segment_bytes : DEFAULT_SEGMENT) / es;
    if (seg == 0)
        seg = 1;
    size_t maxchunk = count / n + 1, maxseg = (maxchunk + seg - 1) / seg;
    bool half = wire != HERD_F32;
    ring_scratch x = {
        .sbuf = half ? malloc(maxchunk * es) : NULL,
        .rbuf = half ? malloc(maxchunk * es) : NULL,
        .rf32 = half ? NULL : malloc(min_size(RING_WINDOW * seg, maxchunk) * sizeof(float)),
        .tmp = half ? malloc(min_size(seg, maxchunk) * sizeof(float)) : NULL,
        .sreq = malloc(maxseg * sizeof(herd_req *)),
        .rreq = malloc(maxseg * sizeof(herd_req *)),
    };
    herd_status st = HERD_OK;
    if ((half ? !x.sbuf || !x.rbuf || !x.tmp : !x.rf32) || !x.sreq || !x.rreq) {
        st = herd_err_set(&c->err, HERD_ENOMEM, "rank %zu: allreduce: out of memory for %zu floats", r, count);
        goto out;
    }
    /* reduce-scatter: after step s, rank r holds the sum of s+2 ranks' parts
     * of chunk r-s-1; after n-1 steps, all of chunk r+1 */
    for (size_t s = 0; s + 1 < n && st == HERD_OK; s++)
        st = ring_step(c, buf, count, (r + n - s) % n, (r + n - s - 1) % n, true, false, wire, seg, &x);
    if (st < 0)
        goto out;
    if (half) {
        /* the owner rounds its chunk once, exactly as the others will
         * receive it, and keeps the wire form to send */
        size_t lo, hi;
        chunk_range(count, n, (r + 1) % n, &lo, &hi);
        to_wire(wire, buf + lo, x.sbuf, hi - lo);
        from_wire(wire, x.sbuf, buf + lo, hi - lo);
    }
    /* all-gather: the reduced chunks go round the ring and are copied, never
     * re-summed, so every rank ends with the owner's bits. With a 16-bit
     * wire, what arrives in one step is forwarded as is in the next. */
    for (size_t s = 0; s + 1 < n && st == HERD_OK; s++) {
        st = ring_step(c, buf, count, (r + 1 + n - s) % n, (r + n - s) % n, false, half, wire, seg, &x);
        void *t = x.sbuf;
        x.sbuf = x.rbuf, x.rbuf = t;
    }
out:
    free(x.sbuf);
    free(x.rbuf);
    free(x.rf32);
    free(x.tmp);
    free(x.sreq);
    free(x.rreq);
    return st;
}

/* Whether herd_allreduce hands the sum to the engine's own allreduce (on
 * more than one rank): asked for, or auto where the engine prefers it. The
 * engine's own sums fp32 on its wire: it serves fp32 only. */
static bool takes_engines_own(const herd_comm *c, const herd_allreduce_opts *o)
{
    bool native = o->impl == HERD_ALLREDUCE_NATIVE || (o->impl == HERD_ALLREDUCE_AUTO && c->ops->native_preferred);
    return native && o->wire == HERD_F32 && c->ops->allreduce_native;
}

herd_status herd_allreduce(herd_comm *c, float *buf, size_t count, const herd_allreduce_opts *opts)
{
    if (!c) /* no err to name it in: the status alone */
        return HERD_EINVAL;
    herd_allreduce_opts o = opts ? *opts : (herd_allreduce_opts){0};
    if (o.wire != HERD_F32 && o.wire != HERD_F16 && o.wire != HERD_BF16)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: allreduce: opts->wire %d is not a herd_dtype", c->rank,
                            (int)o.wire);
    if (o.impl != HERD_ALLREDUCE_AUTO && o.impl != HERD_ALLREDUCE_RING && o.impl != HERD_ALLREDUCE_NATIVE)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: allreduce: opts->impl %d is not a herd_allreduce_impl",
                            c->rank, (int)o.impl);
    if (count && !buf)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: allreduce: buf is NULL for %zu floats", c->rank, count);
    if (count > SIZE_MAX / sizeof(float))
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: allreduce: count %zu is too large", c->rank, count);
    if (o.scale == 0.0f)
        o.scale = 1.0f;
    if (o.nonfinite)
        *o.nonfinite = false;
    if (count == 0)
        return HERD_OK;
    c->collectives += c->size > 1;
    if (c->size > 1 && takes_engines_own(c, &o))
        return c->ops->allreduce_native(c, buf, count, &o, herd__comm_deadline(c));
    herd__allreduce_start(buf, count, &o);
    herd_status st = c->size > 1 ? ring_allreduce(c, buf, count, o.wire, o.segment_bytes) : HERD_OK;
    if (st == HERD_OK)
        herd__allreduce_finish(buf, count, &o);
    return st;
}

bool herd_allreduce_applies_in_place(const herd_comm *c, const herd_allreduce_opts *o)
{
    /* herd_allreduce's native path on an engine that prefers its own (the
     * shared-memory one), without its world-size test */
    return c->ops->native_preferred && takes_engines_own(c, o);
}

void herd__allreduce_start(const float *buf, size_t count, const herd_allreduce_opts *o)
{
    if (o->input_nonfinite && !herd__all_finite(buf, count))
        *o->input_nonfinite = true;
}

void herd__allreduce_finish(float *buf, size_t count, const herd_allreduce_opts *o)
{
    if (o->scale != 1.0f)
        for (size_t i = 0; i < count; i++)
            buf[i] *= o->scale;
    if (o->nonfinite)
        *o->nonfinite = !herd__all_finite(buf, count);
    if (o->apply && !(o->nonfinite && *o->nonfinite))
        o->apply(o->apply_ctx, 0, count, buf);
}

/* ---- allgather (ring) and broadcast (binomial tree) ----------------- */

herd_status herd_allgather(herd_comm *c, const void *in, void *out, size_t bytes)
{
    if (!c)
        return HERD_EINVAL;
    size_t n = c->size, r = c->rank, right = (r + 1) % n, left = (r + n - 1) % n;
    if (bytes && (!in || !out))
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: allgather: %s is NULL for %zu bytes", c->rank,
                            in ? "out" : "in", bytes);
    if (bytes > SIZE_MAX / n)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: allgather: %zu ranks x %zu bytes is too large", c->rank,
                            n, bytes);
    unsigned char *o = out;
    c->collectives += n > 1;
    if (bytes)
        memmove(o + r * bytes, in, bytes); /* in may already be there */
    /* step s: pass on the block received in step s-1 (first our own) */
    for (size_t s = 0; s + 1 < n; s++) {
        size_t si = (r + n - s) % n, ri = (r + n - s - 1) % n;
        herd_req *rr = NULL, *sr = NULL;
        herd_status st = herd_comm_irecv(c, left, TAG_ALLGATHER, o + ri * bytes, bytes, &rr);
        if (st == HERD_OK)
            st = herd_comm_isend(c, right, TAG_ALLGATHER, o + si * bytes, bytes, &sr);
        if (st == HERD_OK)
            st = herd_comm_wait(c, rr), rr = NULL;
        if (st == HERD_OK)
            st = herd_comm_wait(c, sr), sr = NULL;
        herd_comm_cancel(c, rr); /* after a failure, what is left */
        herd_comm_cancel(c, sr);
        if (st < 0)
            return st;
    }
    return HERD_OK;
}

/* Binomial tree on ranks relative to the root (v = rank - root mod n):
 * v's parent is v without its lowest set bit, its children v + 2^k for
 * 2^k below that bit (the root: below n). A buffer travels in segments, so
 * a large one streams down the tree instead of waiting at every level. */
herd_status herd__broadcast_seg(herd_comm *c, void *buf, size_t bytes, size_t root, size_t segment_bytes)
{
    if (!c)
        return HERD_EINVAL;
    size_t n = c->size;
    if (root >= n)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: broadcast: root %zu is not a rank (size %zu)", c->rank,
                            root, n);
    if (bytes && !buf)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: broadcast: buf is NULL for %zu bytes", c->rank, bytes);
    if (n == 1 || bytes == 0)
        return HERD_OK;
    c->collectives++;
    size_t v = (c->rank + n - root) % n, low = v & (~v + 1), top = 1;
    while (top < n)
        top <<= 1;
    size_t child[8 * sizeof(size_t)], nchild = 0, parent = (v - low + root) % n;
    for (size_t m = (v ? low : top) >> 1; m >= 1; m >>= 1) /* farthest (largest subtree) first */
        if (v + m < n)
            child[nchild++] = (v + m + root) % n;
    size_t seg = segment_bytes ? segment_bytes : DEFAULT_SEGMENT, nseg = (bytes + seg - 1) / seg;
    herd_req *rreq[BCAST_WINDOW] = {0}, *sreq[BCAST_WINDOW][8 * sizeof(size_t)] = {{0}};
    unsigned char *p = buf;
    herd_status st = HERD_OK;
    for (size_t k = 0; k < nseg && st == HERD_OK && v; k++) /* the first receives */
        if (k < BCAST_WINDOW)
            st = herd_comm_irecv(c, parent, TAG_BCAST, p + k * seg, min_size(bytes - k * seg, seg), &rreq[k]);
    for (size_t k = 0; k < nseg && st == HERD_OK; k++) {
        size_t slot = k % BCAST_WINDOW, m = min_size(bytes - k * seg, seg);
        if (v) { /* segment k arrives; its slot takes segment k + BCAST_WINDOW */
            st = herd_comm_wait(c, rreq[slot]);
            rreq[slot] = NULL;
            size_t next = k + BCAST_WINDOW;
            if (st == HERD_OK && next < nseg)
                st = herd_comm_irecv(c, parent, TAG_BCAST, p + next * seg, min_size(bytes - next * seg, seg),
                                     &rreq[slot]);
        }
        for (size_t j = 0; j < nchild && st == HERD_OK; j++) {
            if (sreq[slot][j]) /* segment k - BCAST_WINDOW has left */
                st = herd_comm_wait(c, sreq[slot][j]);
            sreq[slot][j] = NULL;
            if (st == HERD_OK)
                st = herd_comm_isend(c, child[j], TAG_BCAST, p + k * seg, m, &sreq[slot][j]);
        }
    }
    for (size_t i = 0; i < BCAST_WINDOW; i++) {
        for (size_t j = 0; j < nchild; j++) {
            herd_status st2 = st == HERD_OK && sreq[i][j] ? herd_comm_wait(c, sreq[i][j]) : HERD_OK;
            if (st != HERD_OK)
                herd_comm_cancel(c, sreq[i][j]);
            st = st == HERD_OK ? st2 : st;
        }
        herd_comm_cancel(c, rreq[i]); /* only left after a failure */
    }
    return st;
}

herd_status herd_broadcast(herd_comm *c, void *buf, size_t bytes, size_t root)
{
    return herd__broadcast_seg(c, buf, bytes, root, 0);
}
