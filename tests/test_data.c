/* Data readers and the loader: exact values from files the tests write,
 * every kind of corruption refused with a message naming the file, the
 * sharding rule, and the real Fashion-MNIST where it is installed. */
#include "harness.h"
#include "herd/herd_data.h"
#include "herd/herd_rng.h"

#include <stdint.h>
#include <sys/stat.h>
#include <zlib.h>

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8),
    p[3] = (unsigned char)v;
}

static void write_bytes(const char *path, const unsigned char *b, size_t n, bool gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        ASSERT_TRUE(f != NULL);
        ASSERT_EQ_INT(gzwrite(f, b, (unsigned)n), (int)n);
        ASSERT_EQ_INT(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        ASSERT_TRUE(f != NULL);
        ASSERT_EQ_INT(fwrite(b, 1, n, f), n);
        fclose(f);
    }
}

/* An IDX pair of n images h x w: pixel (i, k) = (i*7 + k) % 256, label i % 10. */
static size_t make_idx(unsigned char **img, unsigned char **lab, size_t n, size_t h, size_t w)
{
    size_t ni = 16 + n * h * w;
    *img = malloc(ni);
    *lab = malloc(8 + n);
    put32(*img, 0x803), put32(*img + 4, (uint32_t)n), put32(*img + 8, (uint32_t)h), put32(*img + 12, (uint32_t)w);
    for (size_t i = 0; i < n * h * w; i++)
        (*img)[16 + i] = (unsigned char)((i / (h * w)) * 7 + i % (h * w));
    put32(*lab, 0x801), put32(*lab + 4, (uint32_t)n);
    for (size_t i = 0; i < n; i++)
        (*lab)[8 + i] = (unsigned char)(i % 10);
    return ni;
}

static void path_in_tmp(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", herd_test_tmpdir(), name);
}

/* Labels have one type across the API: a data set's, the loader's batches', the model's loss. */
_Static_assert(_Generic(((herd_dataset *)0)->y, int32_t *: 1, default: 0), "herd_dataset.y is int32_t *");

static void test_idx_roundtrip(void)
{
    for (int gz = 0; gz < 2; gz++) {
        unsigned char *img, *lab;
        size_t ni = make_idx(&img, &lab, 12, 5, 3);
        char pi[512], pl[512];
        path_in_tmp(pi, sizeof pi, gz ? "i.gz" : "i");
        path_in_tmp(pl, sizeof pl, gz ? "l.gz" : "l");
        write_bytes(pi, img, ni, gz);
        write_bytes(pl, lab, 8 + 12, gz);
        herd_dataset d;
        herd_err err = {0};
        if (herd_data_load_idx(pi, pl, &d, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
        ASSERT_EQ_INT(d.n, 12);
        ASSERT_EQ_INT(d.c, 1);
        ASSERT_EQ_INT(d.h, 5);
        ASSERT_EQ_INT(d.w, 3);
        ASSERT_EQ_INT(d.nclasses, 10);
        for (size_t i = 0; i < 12 * 15; i++)
            ASSERT_TRUE(d.x[i] == (float)img[16 + i] / 255.0f);
        for (size_t i = 0; i < 12; i++)
            ASSERT_EQ_INT(d.y[i], i % 10);
        herd_dataset_free(&d);
        free(img), free(lab);
    }
}

/* Writes the images file mutated by `mutate` and expects `want` naming it. */
static void expect_idx_error(const unsigned char *img, size_t ni, const unsigned char *lab, size_t nl, bool gz,
                             herd_status want, const char *msg)
{
    char pi[512], pl[512];
    path_in_tmp(pi, sizeof pi, "bad-images");
    path_in_tmp(pl, sizeof pl, "bad-labels");
    write_bytes(pi, img, ni, gz);
    write_bytes(pl, lab, nl, false);
    herd_dataset d;
    herd_err err = {0};
    herd_status st = herd_data_load_idx(pi, pl, &d, &err);
    if (st != want)
        herd_test_fail(__FILE__, __LINE__, "want %s, got %s (%s)", herd_err_name(want), herd_err_name(st), err.msg);
    ASSERT_STR_CONTAINS(err.msg, "bad-");
    ASSERT_STR_CONTAINS(err.msg, msg);
    ASSERT_TRUE(d.x == NULL && d.y == NULL);
}

static void test_idx_corrupt(void)
{
    unsigned char *img, *lab;
    size_t ni = make_idx(&img, &lab, 10, 4, 4), nl = 18;
    expect_idx_error(img, 10, lab, nl, false, HERD_ECORRUPT, "16-byte header");
    expect_idx_error(img, ni - 1, lab, nl, false, HERD_ECORRUPT, "header says 10 images of 4x4");
    expect_idx_error(img, ni, lab, nl - 1, false, HERD_ECORRUPT, "header says 10 labels");
    expect_idx_error(img, 0, lab, nl, false, HERD_ECORRUPT, "header");
    unsigned char *m = malloc(ni);
    memcpy(m, img, ni);
    m[3] = 0x01; /* a label magic in the images file */
    expect_idx_error(m, ni, lab, nl, false, HERD_ECORRUPT, "wrong magic");
    memcpy(m, img, ni);
    put32(m + 4, 0x7fffffff); /* absurd count: refused before any allocation */
    expect_idx_error(m, ni, lab, nl, false, HERD_ECORRUPT, "header says 2147483647 images");
    memcpy(m, img, ni);
    put32(m + 8, 0), put32(m + 4, 0);
    expect_idx_error(m, 16, lab, nl, false, HERD_ECORRUPT, "of 0x4");
    /* 12 labels for 10 images */
    unsigned char *img12, *lab12;
    make_idx(&img12, &lab12, 12, 4, 4);
    expect_idx_error(img, ni, lab12, 20, false, HERD_ECORRUPT, "has 10 images but");
    /* a gzip stream cut short */
    char p[512];
    path_in_tmp(p, sizeof p, "whole.gz");
    write_bytes(p, img, ni, true);
    FILE *f = fopen(p, "rb");
    unsigned char gzb[4096];
    size_t gzn = fread(gzb, 1, sizeof gzb, f);
    fclose(f);
    ASSERT_TRUE(gzn > 30);
    expect_idx_error(gzb, gzn - 10, lab, nl, false, HERD_ECORRUPT, "");
    /* missing file */
    herd_dataset d;
    herd_err err = {0};
    ASSERT_EQ_INT(herd_data_load_idx("/nonexistent/images", "/nonexistent/labels", &d, &err), HERD_ENOTFOUND);
    ASSERT_STR_CONTAINS(err.msg, "/nonexistent/images");
    /* a directory where a file should be */
    char pl[512];
    path_in_tmp(pl, sizeof pl, "bad-labels");
    ASSERT_EQ_INT(herd_data_load_idx(herd_test_tmpdir(), pl, &d, &err), HERD_EIO);
    ASSERT_STR_CONTAINS(err.msg, herd_test_tmpdir());
    /* a label above 9 widens nclasses */
    lab[8 + 3] = 41;
    write_bytes(pl, lab, nl, true);
    path_in_tmp(p, sizeof p, "good-images");
    write_bytes(p, img, ni, false);
    ASSERT_OK(herd_data_load_idx(p, pl, &d, &err));
    ASSERT_EQ_INT(d.nclasses, 42);
    ASSERT_EQ_INT(d.y[3], 41);
    herd_dataset_free(&d);
    free(m), free(img), free(lab), free(img12), free(lab12);
}

/* Thousands of random bit flips and truncations of a valid pair: each loads
 * with a sane shape or fails cleanly (the sanitizer build checks "cleanly"). */
static void test_idx_fuzz(void)
{
    unsigned char *img, *lab;
    size_t ni = make_idx(&img, &lab, 6, 3, 3), nl = 14;
    unsigned char *m = malloc(ni);
    herd_rng r;
    herd_rng_seed(&r, 77, 0);
    char pi[512], pl[512];
    path_in_tmp(pi, sizeof pi, "fz-i");
    path_in_tmp(pl, sizeof pl, "fz-l");
    write_bytes(pl, lab, nl, false);
    size_t ok = 0, bad = 0;
    for (int t = 0; t < 3000; t++) {
        memcpy(m, img, ni);
        size_t len = ni;
        int kind = (int)herd_rng_below(&r, 3);
        if (kind == 0)
            len = (size_t)herd_rng_below(&r, ni + 1);
        else
            for (int k = 0; k < 1 + (int)herd_rng_below(&r, 4); k++)
                m[herd_rng_below(&r, kind == 1 ? 16 : ni)] ^= (unsigned char)(1u << herd_rng_below(&r, 8));
        write_bytes(pi, m, len, t % 2 == 0);
        herd_dataset d;
        herd_err err = {0};
        herd_status st = herd_data_load_idx(pi, pl, &d, &err);
        if (st == HERD_OK) {
            ASSERT_TRUE(d.n == 6 && d.h * d.w == 9);
            herd_dataset_free(&d);
            ok++;
        } else {
            ASSERT_TRUE(st == HERD_ECORRUPT);
            ASSERT_TRUE(err.msg[0] != 0);
            bad++;
        }
    }
    ASSERT_TRUE(ok > 100 && bad > 100);
    free(m), free(img), free(lab);
}

static void test_cifar(void)
{
    unsigned char rec[2][3073 * 2];
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < 2; i++) {
            unsigned char *p = rec[f] + i * 3073;
            p[0] = (unsigned char)(f * 2 + i);
            for (int k = 0; k < 3072; k++)
                p[1 + k] = (unsigned char)((k + f * 3 + i) % 251);
        }
    char a[512], b[512];
    path_in_tmp(a, sizeof a, "data_batch_1.bin");
    path_in_tmp(b, sizeof b, "data_batch_2.bin");
    write_bytes(a, rec[0], sizeof rec[0], false);
    write_bytes(b, rec[1], sizeof rec[1], true); /* gzip works too */
    const char *paths[2] = {a, b};
    herd_dataset d;
    herd_err err = {0};
    ASSERT_OK(herd_data_load_cifar(paths, 2, &d, &err));
    ASSERT_EQ_INT(d.n, 4);
    ASSERT_EQ_INT(d.c * d.h * d.w, 3072);
    for (int j = 0; j < 4; j++) {
        ASSERT_EQ_INT(d.y[j], j);
        for (int k = 0; k < 3072; k += 97)
            ASSERT_TRUE(d.x[j * 3072 + k] == (float)((k + (j / 2) * 3 + j % 2) % 251) / 255.0f);
    }
    herd_dataset_free(&d);
    write_bytes(a, rec[0], 3073 + 5, false);
    ASSERT_EQ_INT(herd_data_load_cifar(paths, 1, &d, &err), HERD_ECORRUPT);
    ASSERT_STR_CONTAINS(err.msg, "data_batch_1.bin");
    rec[0][0] = 10;
    write_bytes(a, rec[0], 3073, false);
    ASSERT_EQ_INT(herd_data_load_cifar(paths, 1, &d, &err), HERD_ECORRUPT);
    ASSERT_STR_CONTAINS(err.msg, "label 10");
    write_bytes(a, rec[0], 0, false);
    ASSERT_EQ_INT(herd_data_load_cifar(paths, 1, &d, &err), HERD_ECORRUPT);
}

/* herd_data_check: what herd_data_open refuses without reading anything,
 * as it would refuse it (a synthetic set's form and its 8 GiB), with the
 * limit that applies; files are left to their readers. */
static void test_data_check(void)
{
    herd_err err = {0};
    ASSERT_OK(herd_data_check("synthetic:3x64x64:10", &err)); /* 60000 x 12288 floats: 2.7 GiB */
    ASSERT_OK(herd_data_check("/nonexistent", &err));
    ASSERT_EQ_INT(herd_data_check("synthetic:3x128x128:10", &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "its 60000 training examples would take 11.0 GiB, above the 8 GiB");
    ASSERT_STR_CONTAINS(err.msg, "at most 35791 values an example");
    ASSERT_EQ_INT(herd_data_check("synthetic:3x", &err), HERD_EINVAL);
    herd_dataset tr, te;
    herd_err oerr = {0};
    ASSERT_EQ_INT(herd_data_open("synthetic:3x128x128:10", 1, &tr, &te, &oerr), HERD_EINVAL);
    ASSERT_STR_CONTAINS(oerr.msg, "would take 11.0 GiB"); /* the run's refusal is the check's */
}

/* herd_data_open's standardization, kept on the sets: every example is
 * (raw - mean) / std per channel with the training set's statistics, which
 * leave its channels at mean 0 and variance 1. */
static void test_standardization_kept(void)
{
    herd_dataset tr, te, raw;
    herd_err err = {0};
    ASSERT_OK(herd_data_open("synthetic:3x5x5:4", 3, &tr, &te, &err));
    ASSERT_OK(herd_data_synthetic("3x5x5:4", tr.n, 3, &raw, &err)); /* the set as made, before */
    ASSERT_TRUE(tr.mean && tr.std && te.mean && te.std);
    for (size_t ch = 0; ch < 3; ch++) {
        ASSERT_TRUE(tr.mean[ch] == te.mean[ch] && tr.std[ch] == te.std[ch]);
        double s = 0, s2 = 0;
        for (size_t i = 0; i < tr.n; i++)
            for (size_t j = 0; j < 25; j++) {
                double v = tr.x[i * 75 + ch * 25 + j], r = raw.x[i * 75 + ch * 25 + j];
                s += v, s2 += v * v;
                if (i < 50)
                    ASSERT_NEAR(v, (r - tr.mean[ch]) / tr.std[ch], 1e-5, 1e-5);
            }
        double cnt = (double)tr.n * 25;
        ASSERT_NEAR(s / cnt, 0, 1e-4, 0);
        ASSERT_NEAR(s2 / cnt - (s / cnt) * (s / cnt), 1, 1e-3, 0);
    }
    herd_dataset_free(&tr), herd_dataset_free(&te), herd_dataset_free(&raw);
    ASSERT_TRUE(tr.mean == NULL && tr.std == NULL);
}

static void test_synthetic(void)
{
    herd_dataset a, b;
    herd_err err = {0};
    ASSERT_OK(herd_data_synthetic("3x4x5:7", 500, 9, &a, &err));
    ASSERT_OK(herd_data_synthetic("3x4x5:7", 500, 9, &b, &err));
    ASSERT_TRUE(a.c == 3 && a.h == 4 && a.w == 5 && a.nclasses == 7 && a.n == 500);
    ASSERT_TRUE(memcmp(a.x, b.x, 500 * 60 * sizeof(float)) == 0 && memcmp(a.y, b.y, 500) == 0);
    herd_dataset_free(&b);
    ASSERT_OK(herd_data_synthetic("3x4x5:7", 500, 10, &b, &err));
    ASSERT_TRUE(memcmp(a.x, b.x, 500 * 60 * sizeof(float)) != 0);
    /* Learnable: class means estimated on one set classify the other far above chance. */
    double mean[7][60] = {{0}}, cnt[7] = {0};
    for (size_t i = 0; i < 500; i++) {
        cnt[a.y[i]]++;
        for (int k = 0; k < 60; k++)
            mean[a.y[i]][k] += a.x[i * 60 + k];
    }
    size_t hits = 0;
    for (size_t i = 0; i < 500; i++) {
        int best = 0;
        double bd = 1e300;
        for (int c = 0; c < 7; c++) {
            double dd = 0;
            for (int k = 0; k < 60; k++) {
                double v = b.x[i * 60 + k] - mean[c][k] / cnt[c];
                dd += v * v;
            }
            if (dd < bd)
                bd = dd, best = c;
        }
        hits += best == b.y[i];
    }
    ASSERT_TRUE(hits > 400); /* chance is 1/7; measured 455 */
    herd_dataset_free(&a), herd_dataset_free(&b);
    ASSERT_OK(herd_data_synthetic("100:3", 10, 1, &a, &err));
    ASSERT_TRUE(a.c == 1 && a.h == 1 && a.w == 100);
    herd_dataset_free(&a);
    const char *bad[] = {"", "3x4:2", "0x4x4:3", "4:1", "4", "x4:2", "3x4x5:7x", "1x100000x100000:10", "4:-2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_EQ_INT(herd_data_synthetic(bad[i], 10, 1, &a, &err), HERD_EINVAL);
        ASSERT_STR_CONTAINS(err.msg, "synthetic data");
    }
}

/* n workers with batch B see exactly the examples of one worker with batch n*B. */
static void test_loader_sharding(void)
{
    herd_dataset d;
    ASSERT_OK(herd_data_synthetic("1:3", 103, 1, &d, NULL));
    for (size_t i = 0; i < d.n; i++)
        d.x[i] = (float)i; /* each example names itself */
    herd_loader one, w[4];
    ASSERT_OK(herd_loader_init(&one, &d, 8, 0, 1, 5, true, NULL));
    for (size_t r = 0; r < 4; r++)
        ASSERT_OK(herd_loader_init(&w[r], &d, 2, r, 4, 5, true, NULL));
    ASSERT_EQ_INT(herd_loader_steps(&one), 12);
    ASSERT_EQ_INT(herd_loader_steps(&w[0]), 12); /* 103 / 8, last partial batch dropped */
    float xb[8], xs[2];
    int32_t yb[8], ys[2];
    float first0[8] = {0};
    for (size_t epoch = 0; epoch < 2; epoch++) {
        herd_loader_start_epoch(&one, epoch);
        for (size_t r = 0; r < 4; r++)
            herd_loader_start_epoch(&w[r], epoch);
        size_t steps = 0;
        while (herd_loader_next(&one, xb, yb)) {
            for (size_t r = 0; r < 4; r++) {
                ASSERT_TRUE(herd_loader_next(&w[r], xs, ys));
                ASSERT_TRUE(xs[0] == xb[2 * r] && xs[1] == xb[2 * r + 1]);
                ASSERT_EQ_INT(ys[0], yb[2 * r]);
            }
            if (steps == 0 && epoch == 0)
                memcpy(first0, xb, sizeof first0);
            if (steps == 0 && epoch == 1) /* each epoch draws a new permutation */
                ASSERT_TRUE(memcmp(first0, xb, sizeof first0) != 0);
            steps++;
        }
        ASSERT_EQ_INT(steps, 12);
        for (size_t r = 0; r < 4; r++)
            ASSERT_TRUE(!herd_loader_next(&w[r], xs, ys));
    }
    herd_loader plain;
    ASSERT_OK(herd_loader_init(&plain, &d, 4, 0, 1, 5, false, NULL));
    ASSERT_TRUE(herd_loader_next(&plain, xb, yb));
    ASSERT_TRUE(xb[0] == 0 && xb[3] == 3);
    herd_loader bad;
    ASSERT_EQ_INT(herd_loader_init(&bad, &d, 4, 4, 4, 1, true, NULL), HERD_EINVAL);
    herd_loader_free(&plain), herd_loader_free(&one);
    for (size_t r = 0; r < 4; r++)
        herd_loader_free(&w[r]);
    herd_dataset_free(&d);
}

static void test_open_errors(void)
{
    herd_dataset a, b;
    herd_err err = {0};
    ASSERT_EQ_INT(herd_data_open("/nonexistent/dir", 1, &a, &b, &err), HERD_ENOTFOUND);
    ASSERT_STR_CONTAINS(err.msg, "/nonexistent/dir");
    ASSERT_EQ_INT(herd_data_open(herd_test_tmpdir(), 1, &a, &b, &err), HERD_ENOTFOUND);
    ASSERT_STR_CONTAINS(err.msg, "no data found");
    ASSERT_EQ_INT(herd_data_open("synthetic:2x2", 1, &a, &b, &err), HERD_EINVAL);
    /* $HERD_DATA is used when no directory is given */
    setenv("HERD_DATA", "/nonexistent/from-env", 1);
    ASSERT_EQ_INT(herd_data_open(NULL, 1, &a, &b, &err), HERD_ENOTFOUND);
    ASSERT_STR_CONTAINS(err.msg, "/nonexistent/from-env");
}

/* The installed Fashion-MNIST: shapes, and standardization with the
 * training set's statistics. */
static void test_fashion_mnist(void)
{
    herd_dataset tr, te;
    herd_err err = {0};
    unsetenv("HERD_DATA");
    if (herd_data_open(NULL, 1, &tr, &te, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s (apt-get install dataset-fashion-mnist)", err.msg);
    ASSERT_EQ_INT(tr.n, 60000);
    ASSERT_EQ_INT(te.n, 10000);
    ASSERT_TRUE(tr.c == 1 && tr.h == 28 && tr.w == 28 && tr.nclasses == 10);
    double s = 0, s2 = 0;
    for (size_t i = 0; i < tr.n * 784; i++)
        s += tr.x[i], s2 += (double)tr.x[i] * tr.x[i];
    double m = s / (60000.0 * 784), v = s2 / (60000.0 * 784) - m * m;
    ASSERT_NEAR(m, 0.0, 1e-3, 0);
    ASSERT_NEAR(v, 1.0, 1e-3, 0);
    size_t per[10] = {0};
    for (size_t i = 0; i < te.n; i++)
        per[te.y[i]]++;
    for (int c = 0; c < 10; c++)
        ASSERT_EQ_INT(per[c], 1000); /* Fashion-MNIST's test set is balanced */
    herd_dataset_free(&tr), herd_dataset_free(&te);
}

static void make_dir(char *out, size_t cap, const char *name)
{
    path_in_tmp(out, cap, name);
    ASSERT_TRUE(mkdir(out, 0700) == 0);
}

/* A directory of IDX files, some gzip and some plain, is found and opened;
 * a test label above 9 widens nclasses on both sets. */
static void test_open_idx_dir(void)
{
    char dir[512], p[1024];
    make_dir(dir, sizeof dir, "mnist");
    unsigned char *img, *lab, *timg, *tlab;
    size_t ni = make_idx(&img, &lab, 20, 4, 3), nti = make_idx(&timg, &tlab, 5, 4, 3);
    tlab[8 + 2] = 12;
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    write_bytes(p, img, ni, false);
    herd_dataset tr, te;
    herd_err err = {0};
    ASSERT_EQ_INT(herd_data_open(dir, 1, &tr, &te, &err), HERD_ENOTFOUND); /* labels and test set missing */
    ASSERT_STR_CONTAINS(err.msg, "lacks");
    ASSERT_STR_CONTAINS(err.msg, dir);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", dir);
    write_bytes(p, lab, 8 + 20, true);
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte.gz", dir);
    write_bytes(p, timg, nti, true);
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte", dir);
    write_bytes(p, tlab, 8 + 5, false);
    if (herd_data_open(dir, 1, &tr, &te, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ASSERT_TRUE(tr.n == 20 && te.n == 5 && tr.c == 1 && tr.h == 4 && tr.w == 3);
    ASSERT_EQ_INT(tr.nclasses, 13);
    ASSERT_EQ_INT(te.nclasses, 13);
    ASSERT_EQ_INT(te.y[2], 12);
    /* standardized with the train statistics, which the test recomputes */
    double s = 0, s2 = 0;
    for (size_t i = 0; i < 20 * 12; i++)
        s += img[16 + i] / 255.0, s2 += (img[16 + i] / 255.0) * (img[16 + i] / 255.0);
    double m = s / 240, sd = sqrt(s2 / 240 - m * m);
    for (size_t i = 0; i < 20 * 12; i++)
        ASSERT_NEAR(tr.x[i], (img[16 + i] / 255.0 - m) / sd, 1e-5, 0);
    for (size_t i = 0; i < 5 * 12; i++)
        ASSERT_NEAR(te.x[i], (timg[16 + i] / 255.0 - m) / sd, 1e-5, 0);
    herd_dataset_free(&tr), herd_dataset_free(&te);
    free(img), free(lab), free(timg), free(tlab);
}

/* CIFAR-10 directory: whichever data_batch_N.bin exist, plus test_batch.bin;
 * each of the three channels standardized on its own. */
static void test_open_cifar_dir(void)
{
    char dir[512], p[1024];
    make_dir(dir, sizeof dir, "cifar");
    enum { R = 3073 };
    static unsigned char recs[7 * R]; /* 3 in batch 1, 2 in batch 4, 2 in test */
    for (int i = 0; i < 7; i++) {
        unsigned char *r = recs + i * R;
        r[0] = (unsigned char)(i % 10);
        for (int ch = 0; ch < 3; ch++) /* channel ch spans a different range */
            for (int k = 0; k < 1024; k++)
                r[1 + ch * 1024 + k] = (unsigned char)(ch * 80 + (k * (ch + 1) + i * 13) % (40 + 50 * ch));
    }
    herd_dataset tr, te;
    herd_err err = {0};
    snprintf(p, sizeof p, "%s/test_batch.bin", dir);
    write_bytes(p, recs + 5 * R, 2 * R, false);
    ASSERT_EQ_INT(herd_data_open(dir, 1, &tr, &te, &err), HERD_ENOTFOUND); /* no training batch */
    ASSERT_STR_CONTAINS(err.msg, "no data found");
    snprintf(p, sizeof p, "%s/data_batch_1.bin", dir);
    write_bytes(p, recs, 3 * R, false);
    snprintf(p, sizeof p, "%s/data_batch_4.bin", dir);
    write_bytes(p, recs + 3 * R, 2 * R, false);
    if (herd_data_open(dir, 1, &tr, &te, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ASSERT_TRUE(tr.n == 5 && te.n == 2 && tr.c == 3 && tr.h == 32 && tr.w == 32 && tr.nclasses == 10);
    for (int ch = 0; ch < 3; ch++) {
        double s = 0, s2 = 0, ts = 0, ts2 = 0;
        for (int i = 0; i < 5; i++)
            for (int k = 0; k < 1024; k++) {
                double raw = recs[i * R + 1 + ch * 1024 + k] / 255.0, v = tr.x[i * 3072 + ch * 1024 + k];
                s += raw, s2 += raw * raw, ts += v, ts2 += v * v;
            }
        double m = s / 5120, sd = sqrt(s2 / 5120 - m * m);
        ASSERT_NEAR(ts / 5120, 0.0, 1e-5, 0);
        ASSERT_NEAR(ts2 / 5120, 1.0, 1e-4, 0);
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 1024; k += 31)
                ASSERT_NEAR(te.x[i * 3072 + ch * 1024 + k], (recs[(5 + i) * R + 1 + ch * 1024 + k] / 255.0 - m) / sd,
                            1e-5, 0);
    }
    for (int i = 0; i < 5; i++)
        ASSERT_EQ_INT(tr.y[i], i);
    herd_dataset_free(&tr), herd_dataset_free(&te);
}

/* "synthetic:..." gives 60000/10000 examples with different noise but the
 * same class prototypes: class means of the train set classify the test set. */
static void test_open_synthetic(void)
{
    herd_dataset tr, te, tr2, te2;
    herd_err err = {0};
    ASSERT_OK(herd_data_open("synthetic:1x4x4:10", 3, &tr, &te, &err));
    ASSERT_TRUE(tr.n == 60000 && te.n == 10000 && tr.c == 1 && tr.h == 4 && tr.w == 4 && tr.nclasses == 10);
    ASSERT_OK(herd_data_open("synthetic:1x4x4:10", 3, &tr2, &te2, &err));
    ASSERT_TRUE(memcmp(tr.x, tr2.x, 60000 * 16 * sizeof(float)) == 0);
    ASSERT_TRUE(memcmp(te.x, te2.x, 10000 * 16 * sizeof(float)) == 0);
    ASSERT_TRUE(memcmp(tr.x, te.x, 10000 * 16 * sizeof(float)) != 0);
    double mean[10][16] = {{0}}, cnt[10] = {0};
    size_t per[10] = {0};
    for (size_t i = 0; i < tr.n; i++) {
        cnt[tr.y[i]]++;
        for (int k = 0; k < 16; k++)
            mean[tr.y[i]][k] += tr.x[i * 16 + k];
    }
    size_t hits = 0;
    for (size_t i = 0; i < te.n; i++) {
        per[te.y[i]]++;
        int best = 0;
        double bd = 1e300;
        for (int c = 0; c < 10; c++) {
            double dd = 0;
            for (int k = 0; k < 16; k++) {
                double v = te.x[i * 16 + k] - mean[c][k] / cnt[c];
                dd += v * v;
            }
            if (dd < bd)
                bd = dd, best = c;
        }
        hits += best == te.y[i];
    }
    ASSERT_TRUE(hits > 8000); /* chance is 1000 */
    for (int c = 0; c < 10; c++) /* labels uniform */
        ASSERT_TRUE(per[c] > 850 && per[c] < 1150);
    herd_dataset_free(&tr), herd_dataset_free(&te), herd_dataset_free(&tr2), herd_dataset_free(&te2);
}

/* Plain order across workers and steps, copy for evaluation, truncation. */
static void test_loader_plain_copy_truncate(void)
{
    herd_dataset d;
    ASSERT_OK(herd_data_synthetic("2:3", 25, 1, &d, NULL));
    for (size_t i = 0; i < d.n; i++)
        d.x[2 * i] = (float)i, d.x[2 * i + 1] = -(float)i, d.y[i] = (uint8_t)(i % 3);
    herd_loader l[2];
    for (size_t r = 0; r < 2; r++)
        ASSERT_OK(herd_loader_init(&l[r], &d, 3, r, 2, 9, false, NULL));
    ASSERT_EQ_INT(herd_loader_steps(&l[0]), 4); /* 25 / 6: one example dropped */
    for (size_t epoch = 0; epoch < 2; epoch++)
        for (size_t r = 0; r < 2; r++) {
            herd_loader_start_epoch(&l[r], epoch);
            float x[6];
            int32_t y[3];
            for (size_t s = 0; s < 4; s++) {
                ASSERT_TRUE(herd_loader_next(&l[r], x, y));
                for (size_t i = 0; i < 3; i++) {
                    size_t want = s * 6 + r * 3 + i;
                    ASSERT_TRUE(x[2 * i] == (float)want && x[2 * i + 1] == -(float)want);
                    ASSERT_EQ_INT(y[i], want % 3);
                }
            }
            ASSERT_TRUE(!herd_loader_next(&l[r], x, y));
        }
    herd_loader big;
    ASSERT_OK(herd_loader_init(&big, &d, 13, 0, 2, 9, true, NULL));
    ASSERT_EQ_INT(herd_loader_steps(&big), 0);
    ASSERT_TRUE(!herd_loader_next(&big, NULL, NULL));
    herd_loader_free(&big);
    float x[8];
    int32_t y[4];
    herd_dataset_copy(&d, 21, 4, x, y);
    for (int i = 0; i < 4; i++) {
        ASSERT_TRUE(x[2 * i] == (float)(21 + i));
        ASSERT_EQ_INT(y[i], (21 + i) % 3);
    }
    herd_dataset_copy(&d, 25, 0, NULL, NULL);
    herd_dataset_truncate(&d, 0);
    ASSERT_EQ_INT(d.n, 25);
    herd_dataset_truncate(&d, 40);
    ASSERT_EQ_INT(d.n, 25);
    herd_dataset_truncate(&d, 7);
    ASSERT_EQ_INT(d.n, 7);
    ASSERT_TRUE(d.x[2 * 6] == 6.0f);
    for (size_t r = 0; r < 2; r++)
        herd_loader_free(&l[r]);
    herd_dataset_free(&d);
}

/* The shape of synthetic data is told without making it; a directory's is not. */
static void test_data_shape(void)
{
    bool known;
    size_t c = 0, h = 0, w = 0, k = 0;
    herd_err err = {0};
    ASSERT_OK(herd_data_shape("synthetic:3x32x20:7", &known, &c, &h, &w, &k, &err));
    ASSERT_TRUE(known && c == 3 && h == 32 && w == 20 && k == 7);
    ASSERT_OK(herd_data_shape("synthetic:100:2", &known, &c, &h, &w, &k, &err));
    ASSERT_TRUE(known && c == 1 && h == 1 && w == 100 && k == 2);
    ASSERT_OK(herd_data_shape("/usr/share/datasets/fashion-mnist", &known, &c, &h, &w, &k, &err));
    ASSERT_TRUE(!known);
    ASSERT_OK(herd_data_shape(NULL, &known, &c, &h, &w, &k, &err));
    ASSERT_TRUE(!known);
    ASSERT_EQ_INT(herd_data_shape("synthetic:3x32:7", &known, &c, &h, &w, &k, &err), HERD_EINVAL);
    ASSERT_TRUE(!known);
    ASSERT_STR_CONTAINS(err.msg, "3x32:7");
}

const herd_test herd_tests_data[] = {
    {"data_standardization_kept", test_standardization_kept, 30},
    {"data_check", test_data_check, 10},
    {"data_shape", test_data_shape, 10, HERD_TEST_ONE_THREAD},
    {"data_idx_roundtrip", test_idx_roundtrip, 20, HERD_TEST_ONE_THREAD},
    {"data_idx_corrupt", test_idx_corrupt, 20, HERD_TEST_ONE_THREAD},
    {"data_idx_fuzz", test_idx_fuzz, 120, HERD_TEST_ONE_THREAD},
    {"data_cifar", test_cifar, 20, HERD_TEST_ONE_THREAD},
    {"data_synthetic", test_synthetic, 20, HERD_TEST_ONE_THREAD},
    {"data_loader_sharding", test_loader_sharding, 20, HERD_TEST_ONE_THREAD},
    {"data_open_errors", test_open_errors, 20, HERD_TEST_ONE_THREAD},
    {"data_open_idx_dir", test_open_idx_dir, 20, HERD_TEST_ONE_THREAD},
    {"data_open_cifar_dir", test_open_cifar_dir, 20, HERD_TEST_ONE_THREAD},
    {"data_open_synthetic", test_open_synthetic, 30, HERD_TEST_ONE_THREAD},
    {"data_loader_plain_copy_truncate", test_loader_plain_copy_truncate, 20, HERD_TEST_ONE_THREAD},
    {"data_fashion_mnist", test_fashion_mnist, 60, HERD_TEST_ONE_THREAD},
    HERD_TEST_END,
};
