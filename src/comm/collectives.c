/* Collectives built once on the transport (herd_comm_* only), so they run on
 * every engine: ring allreduce, ring allgather, broadcast; fp16/bf16 wires. */
#include "herd/herd_comm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { TAG_ALLREDUCE = 0x7a11, TAG_ALLGATHER = 0x7a12, TAG_BCAST = 0x7a13 };

/* Ring segments in flight each way: enough to pipeline, few enough that an
 * engine buffering eagerly does not hold a whole chunk of copies. */
enum { RING_WINDOW = 4 };

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
    if (e == 31)
        return float_of(sign | 0x7f800000u | (m << 13));
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

/* Elements [lo, hi) of chunk i of count split over n ranks. */
static void chunk_range(size_t count, size_t n, size_t i, size_t *lo, size_t *hi)
{
    size_t q = count / n, r = count % n;
    *lo = i * q + (i < r ? i : r);
    *hi = *lo + q + (i < r);
}

/* Scratch of one allreduce: whole-chunk wire buffers and request lists. */
typedef struct ring_scratch {
    void *sbuf, *rbuf;   /* max chunk, in wire elements */
    float *tmp;          /* one segment */
    herd_req **sreq, **rreq;
} ring_scratch;

/* One ring step: send chunk `si` to the right and receive chunk `ri` from
 * the left, in segments that are all posted at once; each arriving segment
 * is added (reduce) or copied while the later ones are still in flight. */
static herd_status ring_step(herd_comm *c, float *buf, size_t count, size_t si, size_t ri, bool reduce,
                             herd_dtype wire, size_t seg, ring_scratch *x)
{
    size_t n = c->size, right = (c->rank + 1) % n, left = (c->rank + n - 1) % n, es = wire_size(wire);
    size_t slo, shi, rlo, rhi;
    chunk_range(count, n, si, &slo, &shi);
    chunk_range(count, n, ri, &rlo, &rhi);
    size_t slen = shi - slo, rlen = rhi - rlo, nseg_s = (slen + seg - 1) / seg, nseg_r = (rlen + seg - 1) / seg;
    /* fp32 travels straight from buf, and lands straight in it when nothing
     * is to be added; other wires go through the scratch buffers */
    bool direct_recv = wire == HERD_F32 && !reduce;
    unsigned char *rbase = direct_recv ? (unsigned char *)(buf + rlo) : x->rbuf;
    const unsigned char *sbase = (const unsigned char *)(buf + slo);
    if (wire != HERD_F32) {
        to_wire(wire, buf + slo, x->sbuf, slen);
        sbase = x->sbuf;
    }
    herd_status st = HERD_OK;
    size_t posted_r = 0, posted_s = 0, done_r = 0, done_s = 0, nseg = nseg_r > nseg_s ? nseg_r : nseg_s;
    for (size_t k = 0; k < nseg && st == HERD_OK; k++) {
        /* keep RING_WINDOW segments in flight each way */
        for (; posted_r < nseg_r && posted_r < k + RING_WINDOW && st == HERD_OK; posted_r++) {
            size_t o = posted_r * seg, m = rlen - o < seg ? rlen - o : seg;
            st = herd_comm_irecv(c, left, TAG_ALLREDUCE, rbase + o * es, m * es, &x->rreq[posted_r]);
        }
        for (; posted_s < nseg_s && posted_s < k + RING_WINDOW && st == HERD_OK; posted_s++) {
            size_t o = posted_s * seg, m = slen - o < seg ? slen - o : seg;
            st = herd_comm_isend(c, right, TAG_ALLREDUCE, sbase + o * es, m * es, &x->sreq[posted_s]);
        }
        if (st == HERD_OK && k < nseg_r) {
            st = herd_comm_wait(c, x->rreq[k]);
            done_r = k + 1;
            if (st == HERD_OK && !direct_recv) {
                size_t o = k * seg, m = rlen - o < seg ? rlen - o : seg;
                const float *add = (const float *)x->rbuf + o;
                if (wire != HERD_F32) {
                    from_wire(wire, (const unsigned char *)x->rbuf + o * es, x->tmp, m);
                    add = x->tmp;
                }
                float *dst = buf + rlo + o;
                if (reduce)
                    for (size_t i = 0; i < m; i++)
                        dst[i] += add[i];
                else
                    memcpy(dst, add, m * sizeof(float));
            }
        }
        if (st == HERD_OK && k < nseg_s) {
            st = herd_comm_wait(c, x->sreq[k]);
            done_s = k + 1;
        }
    }
    /* after a failure, abandon what is still outstanding (a failed wait freed its own) */
    for (size_t k = done_r; k < posted_r; k++)
        herd_comm_cancel(c, x->rreq[k]);
    for (size_t k = done_s; k < posted_s; k++)
        herd_comm_cancel(c, x->sreq[k]);
    return st;
}

herd_status herd_allreduce(herd_comm *c, float *buf, size_t count, const herd_allreduce_opts *opts)
{
    herd_allreduce_opts o = opts ? *opts : (herd_allreduce_opts){0};
    size_t n = c->size;
    if (count == 0 || n == 1)
        return HERD_OK;
    if (!buf)
        return herd_err_set(&c->err, HERD_EINVAL, "allreduce: NULL buffer for %zu floats", count);
    if (o.native && c->ops->allreduce_native && o.wire == HERD_F32) {
        double t = c->timeout_s > 0 ? c->timeout_s : 60;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return c->ops->allreduce_native(c, buf, count, (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + t);
    }
    size_t es = wire_size(o.wire), seg = (o.segment_bytes ? o.segment_bytes : (1u << 20)) / es;
    if (seg == 0)
        seg = 1;
    size_t maxchunk = count / n + 1, maxseg = (maxchunk + seg - 1) / seg;
    ring_scratch x = {
        .sbuf = malloc(maxchunk * es),
        .rbuf = malloc(maxchunk * es),
        .tmp = malloc(seg * sizeof(float)),
        .sreq = malloc(maxseg * sizeof(herd_req *)),
        .rreq = malloc(maxseg * sizeof(herd_req *)),
    };
    herd_status st = HERD_OK;
    if (!x.sbuf || !x.rbuf || !x.tmp || !x.sreq || !x.rreq) {
        st = herd_err_set(&c->err, HERD_ENOMEM, "allreduce: out of memory");
        goto out;
    }
    size_t r = c->rank;
    /* reduce-scatter: after n-1 steps rank r holds the sum of chunk r+1 */
    for (size_t s = 0; s + 1 < n && st == HERD_OK; s++)
        st = ring_step(c, buf, count, (r + n - s) % n, (r + n - s - 1) % n, true, o.wire, seg, &x);
    if (st < 0)
        goto out;
    if (o.wire != HERD_F32) {
        /* the owner rounds its chunk exactly as the others will receive it */
        size_t lo, hi;
        chunk_range(count, n, (r + 1) % n, &lo, &hi);
        for (size_t k = lo; k < hi; k += seg) {
            size_t m = hi - k < seg ? hi - k : seg;
            to_wire(o.wire, buf + k, x.sbuf, m);
            from_wire(o.wire, x.sbuf, buf + k, m);
        }
    }
    /* all-gather: pass the reduced chunks around the ring */
    for (size_t s = 0; s + 1 < n && st == HERD_OK; s++)
        st = ring_step(c, buf, count, (r + 1 + n - s) % n, (r + n - s) % n, false, o.wire, seg, &x);
out:
    free(x.sbuf);
    free(x.rbuf);
    free(x.tmp);
    free(x.sreq);
    free(x.rreq);
    return st;
}

herd_status herd_allgather(herd_comm *c, const void *in, void *out, size_t bytes)
{
    size_t n = c->size, r = c->rank, right = (r + 1) % n, left = (r + n - 1) % n;
    unsigned char *o = out;
    if (bytes)
        memcpy(o + r * bytes, in, bytes);
    for (size_t s = 0; s + 1 < n; s++) {
        size_t si = (r + n - s) % n, ri = (r + n - s - 1) % n;
        herd_req *rr = NULL, *sr = NULL;
        herd_status st = herd_comm_irecv(c, left, TAG_ALLGATHER, o + ri * bytes, bytes, &rr);
        if (st == HERD_OK)
            st = herd_comm_isend(c, right, TAG_ALLGATHER, o + si * bytes, bytes, &sr);
        if (st == HERD_OK)
            st = herd_comm_wait(c, sr), sr = NULL;
        if (st == HERD_OK)
            st = herd_comm_wait(c, rr), rr = NULL;
        herd_comm_cancel(c, sr);
        herd_comm_cancel(c, rr);
        if (st < 0)
            return st;
    }
    return HERD_OK;
}

herd_status herd_broadcast(herd_comm *c, void *buf, size_t bytes, size_t root)
{
    if (root >= c->size)
        return herd_err_set(&c->err, HERD_EINVAL, "broadcast: root %zu is not a rank (size %zu)", root, c->size);
    if (c->rank != root)
        return herd_comm_recv(c, root, TAG_BCAST, buf, bytes);
    for (size_t p = 0; p < c->size; p++)
        if (p != root) {
            herd_status st = herd_comm_send(c, p, TAG_BCAST, buf, bytes);
            if (st < 0)
                return st;
        }
    return HERD_OK;
}
