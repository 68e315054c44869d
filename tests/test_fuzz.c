/* The in-memory parser entries the fuzzers drive (src/data/data_parse.h),
 * and regressions: inputs that once got further than they should. */
#include "harness.h"
#include "data/data_parse.h"
#include "herd/herd_ckpt.h"

#include <stdint.h>

static void be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8),
    p[3] = (unsigned char)v;
}

static void test_idx_in_memory(void)
{
    unsigned char img[16 + 2 * 3 * 2], lab[8 + 2];
    be32(img, 0x803), be32(img + 4, 2), be32(img + 8, 3), be32(img + 12, 2);
    for (int i = 0; i < 12; i++)
        img[16 + i] = (unsigned char)(i * 20);
    be32(lab, 0x801), be32(lab + 4, 2);
    lab[8] = 4, lab[9] = 7;
    herd_dataset d;
    herd_err err = {0};
    ASSERT_OK(herd__data_parse_idx(img, sizeof img, lab, sizeof lab, "i", "l", &d, &err));
    ASSERT_TRUE(d.n == 2 && d.h == 3 && d.w == 2 && d.y[1] == 7 && d.x[5] == 100.0f / 255.0f);
    herd_dataset_free(&d);
    /* A header whose n*h*w wraps around 2^64 onto the claimed pixel count:
     * 2^31 images of 4 x (2^31 + 1) in 2^33 bytes. The lengths are claimed,
     * not real: the parser must refuse from the header alone, before it
     * allocates (32 GiB) or reads past the 16 header bytes. */
    be32(img + 4, 0x80000000u), be32(img + 8, 4), be32(img + 12, 0x80000001u);
    be32(lab + 4, 0x80000000u);
    size_t ni = ((size_t)1 << 33) + 16, nl = ((size_t)1 << 31) + 8;
    ASSERT_EQ_INT(herd__data_parse_idx(img, ni, lab, nl, "huge-i", "huge-l", &d, &err), HERD_ECORRUPT);
    ASSERT_STR_CONTAINS(err.msg, "huge-i: header says 2147483648 images of 4x2147483649");
    ASSERT_TRUE(d.x == NULL && d.y == NULL && d.n == 0);
}

static void test_cifar_in_memory(void)
{
    static unsigned char rec[2 * 3073];
    for (int r = 0; r < 2; r++) {
        rec[r * 3073] = (unsigned char)(r + 5);
        for (int k = 0; k < 3072; k++)
            rec[r * 3073 + 1 + k] = (unsigned char)(k % 256);
    }
    herd_dataset d = {0};
    herd_err err = {0};
    ASSERT_OK(herd__data_parse_cifar(rec, sizeof rec, "a", &d, &err));
    ASSERT_OK(herd__data_parse_cifar(rec, 3073, "b", &d, &err)); /* appended */
    ASSERT_TRUE(d.n == 3 && d.c == 3 && d.h == 32 && d.w == 32 && d.y[0] == 5 && d.y[1] == 6 && d.y[2] == 5);
    ASSERT_TRUE(d.x[2 * 3072 + 255] == 1.0f);
    /* a failed append leaves what was there */
    rec[0] = 10;
    ASSERT_EQ_INT(herd__data_parse_cifar(rec, 3073, "c", &d, &err), HERD_ECORRUPT);
    ASSERT_STR_CONTAINS(err.msg, "c: record 0 has label 10");
    ASSERT_EQ_INT(d.n, 3);
    ASSERT_EQ_INT(herd__data_parse_cifar(rec, 100, "e", &d, &err), HERD_ECORRUPT);
    ASSERT_STR_CONTAINS(err.msg, "not a whole number");
    herd_dataset_free(&d);
}

/* A checkpoint of no sections (the checkpoint fuzzer's smallest seed) is
 * valid, as the writer makes it. */
static void test_ckpt_empty(void)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", herd_test_tmpdir());
    herd_ckpt_info in = {.step = 0, .workers = 1};
    snprintf(in.model, sizeof in.model, "m");
    snprintf(in.algo, sizeof in.algo, "a");
    ASSERT_OK(herd_ckpt_write(dir, &in, NULL, 0, 1, NULL));
    herd_ckpt *ck;
    ASSERT_OK(herd_ckpt_read(dir, "ckpt-0.herd", &ck, NULL));
    ASSERT_EQ_INT(herd_ckpt_nsections(ck), 0);
    herd_ckpt_free(ck);
}

const herd_test herd_tests_fuzz[] = {
    {"fuzz_idx_in_memory", test_idx_in_memory, 20, HERD_TEST_ONE_THREAD},
    {"fuzz_cifar_in_memory", test_cifar_in_memory, 20, HERD_TEST_ONE_THREAD},
    {"fuzz_ckpt_empty", test_ckpt_empty, 20, HERD_TEST_ONE_THREAD},
    HERD_TEST_END,
};
