/* Tests of src/core: status table and the random number generator. */
#include "harness.h"
#include "herd/herd_rng.h"
#include "herd/herd_status.h"

static void test_status_names(void)
{
    ASSERT_TRUE(strcmp(herd_err_name(HERD_ECORRUPT), "HERD_ECORRUPT") == 0);
    ASSERT_TRUE(strcmp(herd_strerror(HERD_OK), "success") == 0);
    herd_err e = {0};
    ASSERT_EQ_INT(herd_err_set(&e, HERD_EIO, "read %s: %d", "x", 3), HERD_EIO);
    ASSERT_TRUE(strcmp(e.msg, "read x: 3") == 0);
    ASSERT_EQ_INT(herd_err_set(NULL, HERD_EINVAL, "ignored"), HERD_EINVAL);
}

static void test_rng_streams_deterministic(void)
{
    herd_rng a, b, c;
    herd_rng_seed(&a, 42, 0);
    herd_rng_seed(&b, 42, 0);
    herd_rng_seed(&c, 42, 1);
    int differ = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t x = herd_rng_next(&a), y = herd_rng_next(&b), z = herd_rng_next(&c);
        ASSERT_TRUE(x == y);
        differ += x != z;
    }
    ASSERT_TRUE(differ > 90);
}

static void test_rng_moments(void)
{
    herd_rng r;
    herd_rng_seed(&r, 7, 3);
    double su = 0, sn = 0, sn2 = 0;
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        float u = herd_rng_uniform(&r);
        ASSERT_TRUE(u >= 0.0f && u < 1.0f);
        su += u;
        double g = herd_rng_normal(&r);
        sn += g;
        sn2 += g * g;
    }
    ASSERT_NEAR(su / n, 0.5, 0.005, 0);
    ASSERT_NEAR(sn / n, 0.0, 0.01, 0);
    ASSERT_NEAR(sn2 / n, 1.0, 0.02, 0);
}

static void test_rng_shuffle_is_permutation(void)
{
    herd_rng r;
    herd_rng_seed(&r, 1, 0);
    size_t idx[1000];
    int seen[1000] = {0};
    for (size_t i = 0; i < 1000; i++)
        idx[i] = i;
    herd_rng_shuffle(&r, idx, 1000);
    size_t fixed = 0;
    for (size_t i = 0; i < 1000; i++) {
        ASSERT_TRUE(idx[i] < 1000);
        seen[idx[i]]++;
        fixed += idx[i] == i;
    }
    for (size_t i = 0; i < 1000; i++)
        ASSERT_EQ_INT(seen[i], 1);
    ASSERT_TRUE(fixed < 20);
    for (int i = 0; i < 1000; i++)
        ASSERT_TRUE(herd_rng_below(&r, 7) < 7);
}

const herd_test herd_tests_core[] = {
    {"core_status_names", test_status_names, 10},
    {"core_rng_streams_deterministic", test_rng_streams_deterministic, 10},
    {"core_rng_moments", test_rng_moments, 10},
    {"core_rng_shuffle_is_permutation", test_rng_shuffle_is_permutation, 10},
    HERD_TEST_END,
};
