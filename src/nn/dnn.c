/* oneDNN's primitives: the convolutions (forward, backward-data and
 * backward-weights, with their reorders and shared scratch), herd's own
 * backward-weights for one input channel, and bf16 (support, rounding,
 * the cached matmuls). */
#include "nn/kernels.h"

#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "herd/herd_nn.h"
#include "herd/herd_status.h"
#include "nn/vec.h"

/* The scratch regions a herd__dnn shares among its layers. A region holds
 * one thing at a time: it is filled and consumed within one call. */
enum {
    DNN_WEI,    /* weights in the layout forward or backward-data wants */
    DNN_DST,    /* blocked dst, then blocked diff_dst */
    DNN_DDST2,  /* diff_dst for backward-weights when it wants another layout */
    DNN_DSRC,   /* blocked diff_src */
    DNN_DWEI,   /* blocked diff_weights */
    DNN_SRC2,   /* src for backward-weights when it wants another layout */
    DNN_SCRATCHPAD,
    DNN_NREGIONS
};

/* One cached bf16 matmul: its shape and the primitive with its memories
 * (handles bound per call). */
typedef struct dnn_matmul_key {
    char ta, tb;
    bool sum;
    size_t M, N, K, lda, ldb, ldc;
} dnn_matmul_key;

typedef struct dnn_matmul {
    dnn_matmul_key key;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, pad;
} dnn_matmul;

enum { DNN_MATMULS = 64 };

struct herd__dnn {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    dnn_matmul mm[DNN_MATMULS];
    size_t nmm, mm_next; /* filled slots; the one replaced next when full */
    size_t need[DNN_NREGIONS]; /* bytes, the most any primitive asked */
    size_t off[DNN_NREGIONS];
    char *arena;
    size_t arena_size;
};

/* One tensor as herd holds it (user) and as a primitive wants it (prim).
 * When the two layouts differ, or the output accumulates, a reorder moves
 * it between them; prim then lives in a region of the arena (or in its own
 * allocation when region is DNN_OWN). */
enum { DNN_OWN = -1, DNN_SAME = -2 };
typedef struct dnn_port {
    dnnl_memory_t user, prim;
    dnnl_primitive_t reorder;
    int region;
    size_t add_floats; /* an output that accumulates in its own layout: herd adds
                        * these floats itself (no reorder; oneDNN's reorder with a
                        * sum ran at a third of memory speed) */
} dnn_port;

struct herd__conv {
    herd__dnn *d;
    herd__conv_shape s;
    dnnl_primitive_t fwd, bwd_data, bwd_weights;
    dnn_port f_src, f_wei, f_dst;
    dnn_port d_ddst, d_wei, d_dsrc;
    dnn_port w_src, w_ddst, w_dwei;
    dnnl_memory_t bias, dbias;
    dnnl_memory_t pad_f, pad_d, pad_w; /* scratchpads */
    bool w_src_is_f_src, w_ddst_is_d_ddst;
    bool c1_weights; /* backward-weights by herd's own one-input-channel kernel (c1_bwd_weights) */
    char impl[64];
};

herd_status herd__dnn_create(herd__dnn **out)
{
    *out = NULL;
    herd__dnn *d = calloc(1, sizeof *d);
    if (!d)
        return HERD_ENOMEM;
    if (dnnl_engine_create(&d->engine, dnnl_cpu, 0) != dnnl_success) {
        free(d);
        return HERD_EUNSUPPORTED;
    }
    if (dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(d->engine);
        free(d);
        return HERD_EUNSUPPORTED;
    }
    *out = d;
    return HERD_OK;
}

void herd__dnn_free(herd__dnn *d)
{
    if (!d)
        return;
    herd__dnn_drop_matmuls(d);
    dnnl_stream_destroy(d->stream);
    dnnl_engine_destroy(d->engine);
    free(d->arena);
    free(d);
}

/* Grows the arena so that every region holds its largest request. Handles
 * are set from d->arena on every call, so moving it is safe between calls. */
static herd_status dnn_arena_fit(herd__dnn *d)
{
    size_t off[DNN_NREGIONS], total = 0;
    for (int r = 0; r < DNN_NREGIONS; r++) {
        off[r] = total;
        total += (d->need[r] + 63) & ~(size_t)63;
    }
    if (total > d->arena_size) {
        char *a = NULL;
        if (posix_memalign((void **)&a, 64, total))
            return HERD_ENOMEM;
        free(d->arena);
        d->arena = a, d->arena_size = total;
    }
    memcpy(d->off, off, sizeof off);
    return HERD_OK;
}

static void dnn_region_need(herd__dnn *d, int region, const dnnl_memory_desc_t *md)
{
    size_t n = dnnl_memory_desc_get_size(md);
    if (region >= 0 && n > d->need[region])
        d->need[region] = n;
}

static void *dnn_region(herd__dnn *d, int region) { return d->arena + d->off[region]; }

static void dnn_port_free(dnn_port *p)
{
    if (p->reorder)
        dnnl_primitive_destroy(p->reorder);
    if (p->prim && p->prim != p->user)
        dnnl_memory_destroy(p->prim);
    if (p->user)
        dnnl_memory_destroy(p->user);
    memset(p, 0, sizeof *p);
}

/* What creating a primitive leaves behind (any may be NULL). */
static void dnn_desc_free(dnnl_primitive_desc_t pd, dnnl_post_ops_t po, dnnl_primitive_attr_t attr)
{
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
}

/* A port between herd's layout `user_md` and the primitive's `prim_md`;
 * `in`: data flows user -> prim, else prim -> user (adding to user when
 * `accumulate`). */
static herd_status dnn_port_init(herd__dnn *d, dnn_port *p, const dnnl_memory_desc_t *user_md,
                                 const dnnl_memory_desc_t *prim_md, bool in, bool accumulate,
                                 int region)
{
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t rpd = NULL;
    herd_status st = HERD_EUNSUPPORTED;
    memset(p, 0, sizeof *p);
    if (dnnl_memory_create(&p->user, user_md, d->engine, DNNL_MEMORY_NONE) != dnnl_success)
        goto out;
    if (!accumulate && dnnl_memory_desc_equal(user_md, prim_md)) {
        p->prim = p->user;
        p->region = DNN_SAME;
        return HERD_OK;
    }
    p->region = region;
    if (dnnl_memory_create(&p->prim, prim_md, d->engine,
                           region == DNN_OWN ? DNNL_MEMORY_ALLOCATE : DNNL_MEMORY_NONE) != dnnl_success)
        goto out;
    dnn_region_need(d, region, prim_md);
    if (accumulate && !in && region != DNN_OWN && dnnl_memory_desc_equal(user_md, prim_md) &&
        prim_md->data_type == dnnl_f32) {
        p->add_floats = dnnl_memory_desc_get_size(prim_md) / sizeof(float);
        return HERD_OK;
    }
    if (accumulate) {
        if (dnnl_primitive_attr_create(&attr) != dnnl_success || dnnl_post_ops_create(&po) != dnnl_success ||
            dnnl_post_ops_append_sum(po, 1.0f) != dnnl_success ||
            dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success)
            goto out;
    }
    if (dnnl_reorder_primitive_desc_create(&rpd, in ? user_md : prim_md, d->engine,
                                           in ? prim_md : user_md, d->engine, attr) != dnnl_success ||
        dnnl_primitive_create(&p->reorder, rpd) != dnnl_success)
        goto out;
    st = HERD_OK;
out:
    dnn_desc_free(rpd, po, attr);
    if (st != HERD_OK)
        dnn_port_free(p);
    return st;
}

static void dnn_exec(herd__dnn *d, dnnl_primitive_t prim, int nargs, const dnnl_exec_arg_t *args)
{
    dnnl_status_t s = dnnl_primitive_execute(prim, d->stream, nargs, args);
    HERD_ASSERT(s == dnnl_success);
}

static void dnn_bind(herd__dnn *d, dnnl_memory_t mem, int region, const void *user)
{
    void *h = region == DNN_SAME ? (void *)user : dnn_region(d, region);
    dnnl_status_t s = dnnl_memory_set_data_handle(mem, h);
    HERD_ASSERT(s == dnnl_success);
}

/* An input: binds herd's buffer and, if the primitive wants another
 * layout, reorders into it. Returns the memory to hand the primitive. */
static dnnl_memory_t dnn_port_in(herd__dnn *d, dnn_port *p, const float *user)
{
    dnnl_status_t s = dnnl_memory_set_data_handle(p->user, (void *)user);
    HERD_ASSERT(s == dnnl_success);
    if (p->region == DNN_SAME)
        return p->user;
    if (p->region != DNN_OWN)
        dnn_bind(d, p->prim, p->region, NULL);
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, p->user}, {DNNL_ARG_TO, p->prim}};
    dnn_exec(d, p->reorder, 2, args);
    return p->prim;
}

/* An output, before the primitive runs: the memory it writes. */
static dnnl_memory_t dnn_port_out(herd__dnn *d, dnn_port *p, float *user)
{
    dnnl_status_t s = dnnl_memory_set_data_handle(p->user, user);
    HERD_ASSERT(s == dnnl_success);
    if (p->region != DNN_SAME && p->region != DNN_OWN)
        dnn_bind(d, p->prim, p->region, NULL);
    return p->prim;
}

/* An output, after the primitive ran: into herd's layout. */
static void dnn_port_done(herd__dnn *d, dnn_port *p)
{
    if (p->region == DNN_SAME)
        return;
    if (p->add_floats) {
        void *h = NULL;
        dnnl_status_t st = dnnl_memory_get_data_handle(p->user, &h);
        HERD_ASSERT(st == dnnl_success);
        float *restrict u = h;
        const float *restrict v = dnn_region(d, p->region);
        size_t n = p->add_floats;
#pragma omp parallel for if (n >= HERD__PAR_GRAIN) schedule(static)
        for (size_t i = 0; i < n; i++)
            u[i] += v[i];
        return;
    }
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, p->prim}, {DNNL_ARG_TO, p->user}};
    dnn_exec(d, p->reorder, 2, args);
}

/* A (C, N, H, W) activation as oneDNN's logical (N, C, H, W) with strides. */
static dnnl_status_t md_cnhw(dnnl_memory_desc_t *md, size_t N, size_t C, size_t H, size_t W)
{
    dnnl_dims_t dims = {(dnnl_dim_t)N, (dnnl_dim_t)C, (dnnl_dim_t)H, (dnnl_dim_t)W};
    dnnl_dims_t strides = {(dnnl_dim_t)(H * W), (dnnl_dim_t)(N * H * W), (dnnl_dim_t)W, 1};
    return dnnl_memory_desc_init_by_strides(md, 4, dims, dnnl_f32, strides);
}

static dnnl_status_t md_tag_dt(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *d4,
                               dnnl_data_type_t dt, dnnl_format_tag_t tag)
{
    dnnl_dims_t dims = {0};
    for (int i = 0; i < ndims; i++)
        dims[i] = d4[i];
    return dnnl_memory_desc_init_by_tag(md, ndims, dims, dt, tag);
}

static dnnl_status_t md_tag(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *d4,
                            dnnl_format_tag_t tag)
{
    return md_tag_dt(md, ndims, d4, dnnl_f32, tag);
}

static herd_status dnn_primitive(const dnnl_primitive_desc_t pd, dnnl_primitive_t *prim)
{
    return dnnl_primitive_create(prim, pd) == dnnl_success ? HERD_OK : HERD_EUNSUPPORTED;
}

/* The scratchpad the primitive asks for, in the shared region. */
static herd_status dnn_scratchpad(herd__dnn *d, const_dnnl_primitive_desc_t pd, dnnl_memory_t *mem)
{
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (!md)
        return HERD_EUNSUPPORTED;
    dnn_region_need(d, DNN_SCRATCHPAD, md);
    return dnnl_memory_create(mem, md, d->engine, DNNL_MEMORY_NONE) == dnnl_success ? HERD_OK
                                                                                     : HERD_EUNSUPPORTED;
}

#define DNN_TRY(call)                     \
    do {                                  \
        if ((call) != dnnl_success) {     \
            st = HERD_EUNSUPPORTED;       \
            goto out;                     \
        }                                 \
    } while (0)

/* A convolution's memory descriptors: herd's layouts (user: CNHW, or
 * blocked where the model keeps the tensor so; then the primitives normally
 * want it as it is: no reorder) and what the primitives may choose (any). */
typedef struct conv_mds {
    dnnl_memory_desc_t src_u, dst_u, wei_u, bias_u;
    dnnl_memory_desc_t any_src, any_src_out, any_dst, any_dst_in, any_wei, any_wei_out;
    dnnl_dims_t strides, pad;
} conv_mds;

static herd_status conv_mds_init(const herd__conv_shape *s, conv_mds *m)
{
    herd_status st = HERD_OK;
    size_t Ho = (s->H + 2 * s->pad - s->R) / s->stride + 1;
    size_t Wo = (s->W + 2 * s->pad - s->R) / s->stride + 1;
    dnnl_dim_t wdims[4] = {(dnnl_dim_t)s->K, (dnnl_dim_t)s->C, (dnnl_dim_t)s->R, (dnnl_dim_t)s->R};
    dnnl_dim_t bdims[1] = {(dnnl_dim_t)s->K};
    dnnl_dim_t sdims[4] = {(dnnl_dim_t)s->N, (dnnl_dim_t)s->C, (dnnl_dim_t)s->H, (dnnl_dim_t)s->W};
    dnnl_dim_t ddims[4] = {(dnnl_dim_t)s->N, (dnnl_dim_t)s->K, (dnnl_dim_t)Ho, (dnnl_dim_t)Wo};
    size_t bw = herd__blk_width();
    dnnl_format_tag_t blk_tag = s->nhwc ? dnnl_acdb : bw == 16 ? dnnl_aBcd16b : dnnl_aBcd8b;
    if ((s->src_blk || s->dst_blk) && !bw)
        return HERD_EUNSUPPORTED;
    if (s->src_blk)
        DNN_TRY(md_tag(&m->src_u, 4, sdims, blk_tag));
    else
        DNN_TRY(md_cnhw(&m->src_u, s->N, s->C, s->H, s->W));
    if (s->dst_blk)
        DNN_TRY(md_tag(&m->dst_u, 4, ddims, blk_tag));
    else
        DNN_TRY(md_cnhw(&m->dst_u, s->N, s->K, Ho, Wo));
    DNN_TRY(md_tag(&m->wei_u, 4, wdims, dnnl_oihw));
    DNN_TRY(md_tag(&m->bias_u, 1, bdims, dnnl_a));
    /* bf16: the operands of the products (src, weights, diff_dst) are bf16,
     * what the primitives write (dst, diff_src, diff_weights) fp32 */
    dnnl_data_type_t op_dt = s->bf16 ? dnnl_bf16 : dnnl_f32;
    DNN_TRY(md_tag_dt(&m->any_src, 4, sdims, op_dt, dnnl_format_tag_any));
    DNN_TRY(md_tag(&m->any_src_out, 4, sdims, dnnl_format_tag_any));
    DNN_TRY(md_tag(&m->any_dst, 4, ddims, dnnl_format_tag_any));
    DNN_TRY(md_tag_dt(&m->any_dst_in, 4, ddims, op_dt, dnnl_format_tag_any));
    DNN_TRY(md_tag_dt(&m->any_wei, 4, wdims, op_dt, dnnl_format_tag_any));
    DNN_TRY(md_tag(&m->any_wei_out, 4, wdims, dnnl_format_tag_any));
    /* oneDNN's right padding makes (H + pl + pr - R)/stride + 1 == Ho exactly
     * when rounded down, as herd's shapes do, so pr = pl. */
    m->strides[0] = m->strides[1] = (dnnl_dim_t)s->stride;
    m->pad[0] = m->pad[1] = (dnnl_dim_t)s->pad;
out:
    return st;
}

/* The primitive descriptors: forward (ReLU fused where the layer has it),
 * backward-weights (unless herd's own kernel does it) and backward-data
 * (where the input wants a gradient). pd[0..3) and the attributes are the
 * caller's to free, set or not. */
static herd_status conv_pds(herd__dnn *d, const herd__conv *c, const conv_mds *m, dnnl_primitive_desc_t *fpd,
                            dnnl_primitive_desc_t *dpd, dnnl_primitive_desc_t *wpd, dnnl_primitive_attr_t *attr,
                            dnnl_primitive_attr_t *attr_bwd, dnnl_post_ops_t *po)
{
    herd_status st = HERD_OK;
    const herd__conv_shape *s = &c->s;
    DNN_TRY(dnnl_primitive_attr_create(attr));
    DNN_TRY(dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user));
    DNN_TRY(dnnl_primitive_attr_create(attr_bwd));
    DNN_TRY(dnnl_primitive_attr_set_scratchpad_mode(*attr_bwd, dnnl_scratchpad_mode_user));
    if (s->relu) {
        DNN_TRY(dnnl_post_ops_create(po));
        DNN_TRY(dnnl_post_ops_append_eltwise(*po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f));
        DNN_TRY(dnnl_primitive_attr_set_post_ops(*attr, *po));
    }
    const dnnl_memory_desc_t *bias = s->bias ? &m->bias_u : NULL;
    dnnl_convolution_desc_t fd, dd, wd;
    DNN_TRY(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &m->any_src,
                                               &m->any_wei, bias, &m->any_dst, m->strides, m->pad, m->pad));
    DNN_TRY(dnnl_primitive_desc_create(fpd, &fd, *attr, d->engine, NULL));
    if (!c->c1_weights) { /* herd's own kernel computes these gradients: no primitive, no memory */
        DNN_TRY(dnnl_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct, &m->any_src,
                                                            &m->any_wei_out, bias, &m->any_dst_in, m->strides,
                                                            m->pad, m->pad));
        DNN_TRY(dnnl_primitive_desc_create(wpd, &wd, *attr_bwd, d->engine, *fpd));
    }
    if (s->din) {
        DNN_TRY(dnnl_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, &m->any_src_out, &m->any_wei,
                                                         &m->any_dst_in, m->strides, m->pad, m->pad));
        DNN_TRY(dnnl_primitive_desc_create(dpd, &dd, *attr_bwd, d->engine, *fpd));
    }
out:
    return st;
}

#define Q(pd, what) dnnl_primitive_desc_query_md(pd, what, 0)

/* The primitives, their ports (reorders where the layouts differ) and
 * scratchpads, from the descriptors conv_pds made. */
static herd_status conv_ports(herd__dnn *d, herd__conv *c, const conv_mds *m, dnnl_primitive_desc_t fpd,
                              dnnl_primitive_desc_t dpd, dnnl_primitive_desc_t wpd)
{
    herd_status st = HERD_OK;
    const herd__conv_shape *s = &c->s;
    HERD_TRY(dnn_port_init(d, &c->f_src, &m->src_u, Q(fpd, dnnl_query_src_md), true, false, DNN_OWN));
    HERD_TRY(dnn_port_init(d, &c->f_wei, &m->wei_u, Q(fpd, dnnl_query_weights_md), true, false, DNN_WEI));
    HERD_TRY(dnn_port_init(d, &c->f_dst, &m->dst_u, Q(fpd, dnnl_query_dst_md), false, false, DNN_DST));
    HERD_TRY(dnn_primitive(fpd, &c->fwd));
    HERD_TRY(dnn_scratchpad(d, fpd, &c->pad_f));
    if (s->bias) {
        DNN_TRY(dnnl_memory_create(&c->bias, &m->bias_u, d->engine, DNNL_MEMORY_NONE));
        DNN_TRY(dnnl_memory_create(&c->dbias, &m->bias_u, d->engine, DNNL_MEMORY_NONE));
    }
    if (s->din) {
        HERD_TRY(dnn_port_init(d, &c->d_ddst, &m->dst_u, Q(dpd, dnnl_query_diff_dst_md), true, false, DNN_DST));
        HERD_TRY(dnn_port_init(d, &c->d_wei, &m->wei_u, Q(dpd, dnnl_query_weights_md), true, false, DNN_WEI));
        HERD_TRY(dnn_port_init(d, &c->d_dsrc, &m->src_u, Q(dpd, dnnl_query_diff_src_md), false,
                               s->din_accumulate, DNN_DSRC));
        HERD_TRY(dnn_primitive(dpd, &c->bwd_data));
        HERD_TRY(dnn_scratchpad(d, dpd, &c->pad_d));
    }
    /* Backward-weights reuses forward's blocked src, and backward-data's
     * blocked diff_dst, when it wants the same layouts (it usually does). */
    if (wpd) {
        c->w_src_is_f_src = dnnl_memory_desc_equal(Q(wpd, dnnl_query_src_md), Q(fpd, dnnl_query_src_md));
        if (!c->w_src_is_f_src)
            HERD_TRY(dnn_port_init(d, &c->w_src, &m->src_u, Q(wpd, dnnl_query_src_md), true, false, DNN_SRC2));
        c->w_ddst_is_d_ddst = s->din && dnnl_memory_desc_equal(Q(wpd, dnnl_query_diff_dst_md),
                                                               Q(dpd, dnnl_query_diff_dst_md));
        if (!c->w_ddst_is_d_ddst)
            HERD_TRY(dnn_port_init(d, &c->w_ddst, &m->dst_u, Q(wpd, dnnl_query_diff_dst_md), true, false,
                                   DNN_DDST2));
        HERD_TRY(dnn_port_init(d, &c->w_dwei, &m->wei_u, Q(wpd, dnnl_query_diff_weights_md), false, false,
                               DNN_DWEI));
        HERD_TRY(dnn_primitive(wpd, &c->bwd_weights));
        HERD_TRY(dnn_scratchpad(d, wpd, &c->pad_w));
    }
out:
    return st;
}

#undef Q

herd_status herd__conv_create(herd__dnn *d, const herd__conv_shape *s, herd__conv **out)
{
    herd_status st = HERD_OK;
    dnnl_primitive_attr_t attr = NULL, attr_bwd = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t fpd = NULL, dpd = NULL, wpd = NULL;
    *out = NULL;
    herd__conv *c = calloc(1, sizeof *c);
    if (!c)
        return HERD_ENOMEM;
    c->d = d, c->s = *s;
    c->c1_weights = s->C == 1 && !s->din && !s->bf16 && !s->src_blk && (s->R == 3 || s->R == 5);
    conv_mds m;
    HERD_TRY(conv_mds_init(s, &m));
    HERD_TRY(conv_pds(d, c, &m, &fpd, &dpd, &wpd, &attr, &attr_bwd, &po));
    HERD_TRY(conv_ports(d, c, &m, fpd, dpd, wpd));
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(fpd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        snprintf(c->impl, sizeof c->impl, "%s", impl);
    HERD_TRY(dnn_arena_fit(d));
    *out = c;
    c = NULL;
out:
    dnn_desc_free(fpd, po, attr);
    dnn_desc_free(dpd, NULL, attr_bwd);
    dnn_desc_free(wpd, NULL, NULL);
    herd__conv_free(c);
    return st;
}

void herd__conv_free(herd__conv *c)
{
    if (!c)
        return;
    dnnl_primitive_t prims[3] = {c->fwd, c->bwd_data, c->bwd_weights};
    for (int i = 0; i < 3; i++)
        if (prims[i])
            dnnl_primitive_destroy(prims[i]);
    dnn_port *ports[9] = {&c->f_src, &c->f_wei, &c->f_dst, &c->d_ddst, &c->d_wei,
                          &c->d_dsrc, &c->w_src, &c->w_ddst, &c->w_dwei};
    for (int i = 0; i < 9; i++)
        dnn_port_free(ports[i]);
    dnnl_memory_t mems[5] = {c->bias, c->dbias, c->pad_f, c->pad_d, c->pad_w};
    for (int i = 0; i < 5; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    free(c);
}

const herd__conv_shape *herd__conv_get_shape(const herd__conv *c) { return &c->s; }
const char *herd__conv_impl(const herd__conv *c) { return c->impl; }

void herd__conv_forward(herd__conv *c, const float *in, const float *w, const float *bias,
                        float *out)
{
    herd__dnn *d = c->d;
    dnnl_exec_arg_t args[5] = {
        {DNNL_ARG_SRC, dnn_port_in(d, &c->f_src, in)},
        {DNNL_ARG_WEIGHTS, dnn_port_in(d, &c->f_wei, w)},
        {DNNL_ARG_DST, dnn_port_out(d, &c->f_dst, out)},
        {DNNL_ARG_SCRATCHPAD, c->pad_f},
        {DNNL_ARG_BIAS, c->bias},
    };
    dnn_bind(d, c->pad_f, DNN_SCRATCHPAD, NULL);
    if (c->s.bias)
        dnn_bind(d, c->bias, DNN_SAME, bias);
    dnn_exec(d, c->fwd, c->s.bias ? 5 : 4, args);
    dnn_port_done(d, &c->f_dst);
}

/* ---- backward-weights with one input channel ---------------------------
 *
 * A first layer's input has one channel (Fashion-MNIST): oneDNN 2.6's AVX2
 * backward-weights ran such a layer at 6-9 GFLOP/s (cnn's 5x5, 32 outputs:
 * 11 ms against 1.8 ms forward; lenet's: 2.5 ms of a 6.2 ms step). Here
 * eight output channels are the lanes of a vector and each kernel tap one
 * running sum: dw[k][r][s] += g[k](pixel) * x(pixel shifted by r, s). The
 * taps go in groups of whole kernel rows, few enough to stay in registers
 * (C1_ROWS rows of R taps); a task is one group of one block of eight
 * channels, its sums over the images in order (each image's sums first
 * added alone): the same bits at any thread count. */
enum { C1_MAX_R = 5, C1_ROWS_5 = 2, C1_ROWS_3 = 3 };

/* The dout of channels k0..k0+8 of image n as rows of 8 lanes: a pointer
 * into a blocked dout (stride B), or gathered from CNHW planes into buf
 * (lanes past K zero). */
static const float *c1_panel(const herd__conv_shape *s, const float *dout, size_t HWo, size_t n, size_t k0,
                             size_t B, bool blk, float *buf, size_t *stride)
{
    if (blk) {
        *stride = B;
        return dout + ((n * (s->K / B) + k0 / B) * HWo) * B + k0 % B;
    }
    *stride = 8;
    for (size_t l = 0; l < 8; l++) {
        const float *plane = k0 + l < s->K ? dout + ((k0 + l) * s->N + n) * HWo : NULL;
        for (size_t p = 0; p < HWo; p++)
            buf[p * 8 + l] = plane ? plane[p] : 0.0f;
    }
    return buf;
}

/* One image's sums for taps rows [r0, r0 + NR) of an R x R kernel: acc[i*R
 * + j] over the pixels; gsum the plain sum of g (the bias's) when asked. */
BLK_INLINE void c1_rows(const float *restrict g, size_t gs, const float *restrict xp, size_t wp, size_t Ho,
                        size_t Wo, size_t st, size_t r0, v8f *restrict acc, v8f *restrict gsum, const size_t R,
                        const size_t NR)
{
    v8f a[C1_ROWS_3 * C1_MAX_R] = {{0}};
    v8f b = {0};
    for (size_t oy = 0; oy < Ho; oy++)
        for (size_t ox = 0; ox < Wo; ox++) {
            v8f gv = ld8(g + (oy * Wo + ox) * gs);
            const float *x = xp + (oy * st + r0) * wp + ox * st;
            for (size_t i = 0; i < NR; i++)
                for (size_t j = 0; j < R; j++)
                    a[i * R + j] += gv * x[i * wp + j];
            if (gsum)
                b += gv;
        }
    for (size_t t = 0; t < NR * R; t++)
        acc[t] = a[t];
    if (gsum)
        *gsum = b;
}

static void c1_bwd_weights(const herd__conv_shape *s, const float *in, const float *dout, float *dw,
                           float *dbias, bool blk)
{
    size_t R = s->R, Ho = (s->H + 2 * s->pad - R) / s->stride + 1, Wo = (s->W + 2 * s->pad - R) / s->stride + 1;
    size_t hp = s->H + 2 * s->pad, wp = s->W + 2 * s->pad, B = !blk ? 8 : s->nhwc ? s->K : herd__blk_width();
    size_t rows = R == 5 ? C1_ROWS_5 : C1_ROWS_3, groups = (R + rows - 1) / rows, KB = (s->K + 7) / 8;
    size_t T = KB * groups;
#pragma omp parallel if (T > 1 && s->N * Ho * Wo * R * R * 8 >= HERD__PAR_GRAIN)
    {
        float *xp = calloc(hp * wp + Ho * Wo * 8, sizeof(float)), *buf = xp + hp * wp;
        HERD_ASSERT(xp);
#pragma omp for schedule(static)
        for (size_t t = 0; t < T; t++) {
            size_t k0 = t / groups * 8, r0 = t % groups * rows, nr = R - r0 < rows ? R - r0 : rows;
            v8f tot[C1_ROWS_3 * C1_MAX_R] = {{0}}, one[C1_ROWS_3 * C1_MAX_R] = {{0}}, gtot = {0}, g1 = {0};
            bool bias = dbias && r0 == 0;
            for (size_t n = 0; n < s->N; n++) {
                for (size_t y = 0; y < s->H; y++) /* the image inside its zero border */
                    memcpy(xp + (y + s->pad) * wp + s->pad, in + (n * s->H + y) * s->W, s->W * sizeof(float));
                size_t gs;
                const float *g = c1_panel(s, dout, Ho * Wo, n, k0, B, blk, buf, &gs);
                if (R == 5 && nr == 2)
                    c1_rows(g, gs, xp, wp, Ho, Wo, s->stride, r0, one, bias ? &g1 : NULL, 5, 2);
                else if (R == 5)
                    c1_rows(g, gs, xp, wp, Ho, Wo, s->stride, r0, one, bias ? &g1 : NULL, 5, 1);
                else
                    c1_rows(g, gs, xp, wp, Ho, Wo, s->stride, r0, one, bias ? &g1 : NULL, 3, 3);
                for (size_t i = 0; i < nr * R; i++)
                    tot[i] += one[i];
                if (bias)
                    gtot += g1;
            }
            for (size_t l = 0; l < 8 && k0 + l < s->K; l++) {
                for (size_t i = 0; i < nr * R; i++)
                    dw[(k0 + l) * R * R + r0 * R + i] = tot[i][l];
                if (bias)
                    dbias[k0 + l] = gtot[l];
            }
        }
        free(xp);
    }
}

void herd__conv_backward(herd__conv *c, const float *in, const float *w, const float *dout,
                         float *din, float *dw, float *dbias)
{
    if (c->c1_weights) { /* no diff_src: a first layer */
        c1_bwd_weights(&c->s, in, dout, dw, c->s.bias ? dbias : NULL, c->s.dst_blk);
        return;
    }
    herd__dnn *d = c->d;
    dnnl_memory_t ddst = NULL;
    if (c->s.din) {
        ddst = dnn_port_in(d, &c->d_ddst, dout);
        dnnl_exec_arg_t args[4] = {
            {DNNL_ARG_DIFF_DST, ddst},
            {DNNL_ARG_WEIGHTS, dnn_port_in(d, &c->d_wei, w)},
            {DNNL_ARG_DIFF_SRC, dnn_port_out(d, &c->d_dsrc, din)},
            {DNNL_ARG_SCRATCHPAD, c->pad_d},
        };
        dnn_bind(d, c->pad_d, DNN_SCRATCHPAD, NULL);
        dnn_exec(d, c->bwd_data, 4, args);
        dnn_port_done(d, &c->d_dsrc);
    }
    /* forward left its blocked src in f_src (its own memory) */
    dnnl_memory_t src = c->w_src_is_f_src ? c->f_src.prim : dnn_port_in(d, &c->w_src, in);
    if (!c->w_ddst_is_d_ddst)
        ddst = dnn_port_in(d, &c->w_ddst, dout);
    dnnl_exec_arg_t args[5] = {
        {DNNL_ARG_SRC, src},
        {DNNL_ARG_DIFF_DST, ddst},
        {DNNL_ARG_DIFF_WEIGHTS, dnn_port_out(d, &c->w_dwei, dw)},
        {DNNL_ARG_SCRATCHPAD, c->pad_w},
        {DNNL_ARG_DIFF_BIAS, c->dbias},
    };
    dnn_bind(d, c->pad_w, DNN_SCRATCHPAD, NULL);
    if (c->s.bias)
        dnn_bind(d, c->dbias, DNN_SAME, dbias);
    dnn_exec(d, c->bwd_weights, c->s.bias ? 5 : 4, args);
    dnn_port_done(d, &c->w_dwei);
}

/* ---- bf16 ---------------------------------------------------------------- */

herd_bf16_support herd_nn_bf16_support(void)
{
    /* oneDNN's ISA values are nested bit sets (avx2_vnni is not avx512) */
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    if ((isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16)
        return HERD_BF16_NATIVE;
    if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core)
        return HERD_BF16_EMULATED;
    return HERD_BF16_NONE;
}

void herd__to_bf16(const float *x, uint16_t *y, size_t n)
{
    /* memory-bound: a 16-lane version of this loop (GCC makes it 8) took as
     * long, 11-12% of an mlp bf16 step on the AMX Xeon */
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        /* a NaN keeps its sign and stays quiet; the rest round to nearest
         * even by adding 0x7fff plus the kept part's lowest bit */
        y[i] = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40u)
                                               : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
}

/* A 2-D plain matrix of rows x cols with leading dimension ld. */
static dnnl_status_t md_matrix(dnnl_memory_desc_t *md, size_t rows, size_t cols, size_t ld, bool trans,
                               dnnl_data_type_t dt)
{
    /* op(X) is rows x cols: X stored transposed means stride 1 down a column */
    dnnl_dims_t dims = {(dnnl_dim_t)rows, (dnnl_dim_t)cols};
    dnnl_dims_t strides = {trans ? 1 : (dnnl_dim_t)ld, trans ? (dnnl_dim_t)ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

static void dnn_matmul_free(dnn_matmul *mm)
{
    if (mm->prim)
        dnnl_primitive_destroy(mm->prim);
    dnnl_memory_t mems[4] = {mm->a, mm->b, mm->c, mm->pad};
    for (int i = 0; i < 4; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    memset(mm, 0, sizeof *mm);
}

void herd__dnn_drop_matmuls(herd__dnn *d)
{
    for (size_t i = 0; i < d->nmm; i++)
        dnn_matmul_free(&d->mm[i]);
    d->nmm = d->mm_next = 0;
}

static herd_status dnn_matmul_create(herd__dnn *d, const dnn_matmul_key *k, dnn_matmul *mm)
{
    herd_status st = HERD_OK;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t md;
    memset(mm, 0, sizeof *mm);
    mm->key = *k;
    DNN_TRY(md_matrix(&a, k->M, k->K, k->lda, k->ta == 'T', dnnl_bf16));
    DNN_TRY(md_matrix(&b, k->K, k->N, k->ldb, k->tb == 'T', dnnl_bf16));
    DNN_TRY(md_matrix(&c, k->M, k->N, k->ldc, false, dnnl_f32));
    DNN_TRY(dnnl_primitive_attr_create(&attr));
    DNN_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (k->sum) {
        DNN_TRY(dnnl_post_ops_create(&po));
        DNN_TRY(dnnl_post_ops_append_sum(po, 1.0f));
        DNN_TRY(dnnl_primitive_attr_set_post_ops(attr, po));
    }
    DNN_TRY(dnnl_matmul_desc_init(&md, &a, &b, NULL, &c));
    DNN_TRY(dnnl_primitive_desc_create(&pd, &md, attr, d->engine, NULL));
    HERD_TRY(dnn_primitive(pd, &mm->prim));
    DNN_TRY(dnnl_memory_create(&mm->a, &a, d->engine, DNNL_MEMORY_NONE));
    DNN_TRY(dnnl_memory_create(&mm->b, &b, d->engine, DNNL_MEMORY_NONE));
    DNN_TRY(dnnl_memory_create(&mm->c, &c, d->engine, DNNL_MEMORY_NONE));
    HERD_TRY(dnn_scratchpad(d, pd, &mm->pad));
    HERD_TRY(dnn_arena_fit(d));
out:
    dnn_desc_free(pd, po, attr);
    if (st != HERD_OK)
        dnn_matmul_free(mm);
    return st;
}

void herd__gemm_bf16(herd__dnn *d, char ta, char tb, size_t M, size_t N, size_t K, const uint16_t *A,
                     size_t lda, const uint16_t *B, size_t ldb, float beta, float *C, size_t ldc)
{
    HERD_ASSERT(beta == 0.0f || beta == 1.0f);
    if (M == 0 || N == 0)
        return;
    dnn_matmul_key k;
    memset(&k, 0, sizeof k); /* compared with memcmp: padding too */
    k.ta = ta, k.tb = tb, k.sum = beta != 0.0f;
    k.M = M, k.N = N, k.K = K, k.lda = lda, k.ldb = ldb, k.ldc = ldc;
    dnn_matmul *mm = NULL;
    for (size_t i = 0; i < d->nmm && !mm; i++)
        if (!memcmp(&d->mm[i].key, &k, sizeof k))
            mm = &d->mm[i];
    if (!mm) {
        size_t slot = d->nmm < DNN_MATMULS ? d->nmm++ : d->mm_next++ % DNN_MATMULS;
        dnn_matmul_free(&d->mm[slot]);
        herd_status st = dnn_matmul_create(d, &k, &d->mm[slot]);
        HERD_ASSERT(st == HERD_OK); /* the model checked herd_nn_bf16_support first */
        mm = &d->mm[slot];
    }
    dnn_bind(d, mm->a, DNN_SAME, A);
    dnn_bind(d, mm->b, DNN_SAME, B);
    dnn_bind(d, mm->c, DNN_SAME, C);
    dnn_bind(d, mm->pad, DNN_SCRATCHPAD, NULL);
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, mm->a}, {DNNL_ARG_WEIGHTS, mm->b}, {DNNL_ARG_DST, mm->c}, {DNNL_ARG_SCRATCHPAD, mm->pad}};
    dnn_exec(d, mm->prim, 4, args);
}
