/* Collectives on the threads engine against closed forms: rank r contributes
 * (r+1)*v(i) with integer-valued v, so the sum n(n+1)/2 * v(i) is exact in
 * fp32, and every rank must end with the same bits. */
#include "harness.h"
#include "herd/herd_comm.h"
#include "herd/herd_rng.h"

#include <pthread.h>

typedef struct rank_ctx {
    herd_comm *c;
    size_t count;
    herd_allreduce_opts opts;
    float *buf;
    herd_status st;
} rank_ctx;

static float v(size_t i) { return (float)(i % 17) - 8.0f; }

static void *allreduce_rank(void *p)
{
    rank_ctx *x = p;
    for (size_t i = 0; i < x->count; i++)
        x->buf[i] = (float)(x->c->rank + 1) * v(i);
    x->st = herd_allreduce(x->c, x->buf, x->count, &x->opts);
    return NULL;
}

static void sweep(herd_dtype wire, size_t segment_bytes)
{
    static const size_t sizes[] = {1, 2, 3, 4, 5, 8, 16};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        size_t counts[] = {0, 1, n - 1, n, n + 1, 1000, 100003};
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
            size_t count = counts[ci];
            herd_threads_world *w;
            ASSERT_OK(herd_threads_world_create(n, &w, NULL));
            rank_ctx ctx[16];
            pthread_t th[16];
            for (size_t r = 0; r < n; r++) {
                ASSERT_OK(herd_comm_threads_create(w, r, &ctx[r].c, NULL));
                ctx[r].c->timeout_s = 20;
                ctx[r].count = count;
                ctx[r].opts = (herd_allreduce_opts){.segment_bytes = segment_bytes, .wire = wire,
                                                     .impl = HERD_ALLREDUCE_RING};
                ctx[r].buf = malloc((count ? count : 1) * sizeof(float));
                pthread_create(&th[r], NULL, allreduce_rank, &ctx[r]);
            }
            for (size_t r = 0; r < n; r++)
                pthread_join(th[r], NULL);
            float k = (float)(n * (n + 1) / 2);
            for (size_t r = 0; r < n; r++) {
                if (ctx[r].st != HERD_OK)
                    herd_test_fail(__FILE__, __LINE__, "n=%zu count=%zu rank %zu: %s", n, count, r,
                                   herd_comm_last_error(ctx[r].c));
                for (size_t i = 0; i < count; i++) {
                    /* fp32 is exact here; a 16-bit wire rounds each partial sum
                     * (fp16: 11 significant bits; bf16: 8) */
                    double tol = wire == HERD_F32 ? 0 : fabs(k * v(i)) * (wire == HERD_F16 ? 2e-3 : 1.6e-2) * (double)n;
                    if (!(fabs(ctx[r].buf[i] - k * v(i)) <= tol))
                        herd_test_fail(__FILE__, __LINE__, "n=%zu count=%zu rank %zu elem %zu: %g, want %g", n,
                                       count, r, i, ctx[r].buf[i], k * v(i));
                }
                ASSERT_TRUE(count == 0 || memcmp(ctx[r].buf, ctx[0].buf, count * sizeof(float)) == 0);
            }
            for (size_t r = 0; r < n; r++) {
                free(ctx[r].buf);
                herd_comm_free(ctx[r].c);
            }
            herd_threads_world_free(w);
        }
    }
}

static void test_allreduce_f32_default_segments(void) { sweep(HERD_F32, 0); }
static void test_allreduce_f32_small_segments(void) { sweep(HERD_F32, 256); }
static void test_allreduce_f16(void) { sweep(HERD_F16, 4096); }
static void test_allreduce_bf16(void) { sweep(HERD_BF16, 4096); }

static void test_fp16_conversion(void)
{
    /* every finite half survives a round trip exactly */
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t in = (uint16_t)h, back;
        float f;
        herd_f16_to_f32(&in, &f, 1);
        if (isnan(f))
            continue;
        herd_f32_to_f16(&f, &back, 1);
        if (back != in)
            herd_test_fail(__FILE__, __LINE__, "half 0x%04x -> %g -> 0x%04x", h, (double)f, back);
        /* the portable conversions agree bit for bit */
        ASSERT_TRUE(herd__f16_to_f32_portable(in) == f);
        ASSERT_EQ_INT(herd__f32_to_f16_portable(f), in);
    }
    /* and on values that need rounding */
    herd_rng r;
    herd_rng_seed(&r, 3, 0);
    for (int i = 0; i < 100000; i++) {
        float f = ldexpf(herd_rng_normal(&r), i % 40 - 26); /* 2^-26 .. 2^13: subnormal to large halves */
        uint16_t fast;
        herd_f32_to_f16(&f, &fast, 1);
        ASSERT_EQ_INT(fast, herd__f32_to_f16_portable(f));
    }
    float x[6] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65520.0f, 1e-8f, -2.0f};
    uint16_t h[6];
    herd_f32_to_f16(x, h, 6);
    ASSERT_EQ_INT(h[0], 0x3c00); /* tie rounds to even (down) */
    ASSERT_EQ_INT(h[1], 0x3c02); /* tie rounds to even (up) */
    ASSERT_EQ_INT(h[2], 0x7bff); /* the largest half */
    ASSERT_EQ_INT(h[3], 0x7c00); /* overflow: +Inf */
    ASSERT_EQ_INT(h[4], 0x0000); /* below half the smallest subnormal */
    ASSERT_EQ_INT(h[5], 0xc000);
    float b = 1.0f + 1.0f / 256; /* bf16 tie at 8 significant bits: to even */
    uint16_t hb;
    herd_f32_to_bf16(&b, &hb, 1);
    ASSERT_EQ_INT(hb, 0x3f80);
}

typedef struct p2p_ctx {
    herd_comm *c;
    herd_status st;
} p2p_ctx;

/* A receive nobody sends to times out naming the peer; a failed world wakes
 * a blocked receive with HERD_EREMOTE. */
static void test_timeout_and_failure(void)
{
    herd_threads_world *w;
    herd_comm *a, *b;
    ASSERT_OK(herd_threads_world_create(2, &w, NULL));
    ASSERT_OK(herd_comm_threads_create(w, 0, &a, NULL));
    ASSERT_OK(herd_comm_threads_create(w, 1, &b, NULL));
    a->timeout_s = 0.2;
    float x;
    ASSERT_EQ_INT(herd_comm_recv(a, 1, 5, &x, sizeof x), HERD_ETIMEOUT);
    ASSERT_STR_CONTAINS(herd_comm_last_error(a), "from rank 1 (tag 5)");
    ASSERT_EQ_INT(herd_comm_send(a, 7, 0, &x, sizeof x), HERD_EINVAL);
    x = 3;
    ASSERT_OK(herd_comm_send(b, 0, 9, &x, sizeof x));
    float y = 0;
    ASSERT_OK(herd_comm_recv(a, 1, 9, &y, sizeof y));
    ASSERT_TRUE(y == 3);
    herd_threads_world_fail(w, 1);
    a->timeout_s = 30;
    ASSERT_EQ_INT(herd_comm_recv(a, 1, 5, &x, sizeof x), HERD_EREMOTE);
    ASSERT_STR_CONTAINS(herd_comm_last_error(a), "worker 1 failed");
    herd_comm_free(a), herd_comm_free(b);
    herd_threads_world_free(w);
}

const herd_test herd_tests_collectives[] = {
    {"collectives_allreduce_f32_default_segments", test_allreduce_f32_default_segments, 120},
    {"collectives_allreduce_f32_small_segments", test_allreduce_f32_small_segments, 120},
    {"collectives_allreduce_f16", test_allreduce_f16, 120},
    {"collectives_allreduce_bf16", test_allreduce_bf16, 120},
    {"collectives_fp16_conversion", test_fp16_conversion, 20, HERD_TEST_ONE_THREAD},
    {"collectives_timeout_and_failure", test_timeout_and_failure, 20, HERD_TEST_ONE_THREAD},
    HERD_TEST_END,
};
