/* The data formats beyond IDX and CIFAR: NumPy .npy arrays, written here
 * byte by byte, read back to the exact value in every layout and type;
 * every malformed header refused with a message naming its file; a
 * directory of them opened, standardized and trained on by the herd command. */
#include "harness.h"
#include "fixtures.h"
#include "data/data_parse.h"
#include "herd/herd_data.h"
#include "herd/herd_rng.h"

#include <stdint.h>
#include <sys/stat.h>

/* A .npy file's bytes: version major (1, 2 or 3), header dict as given,
 * padded with spaces to a multiple of 64 and ended by a newline, then the data. */
static unsigned char *npy_bytes(int major, const char *dict, const void *data, size_t nbytes, size_t *len)
{
    size_t pre = major == 1 ? 10 : 12, dl = strlen(dict), hlen = dl + 1;
    hlen += (64 - (pre + hlen) % 64) % 64;
    *len = pre + hlen + nbytes;
    unsigned char *b = malloc(*len);
    ASSERT_TRUE(b != NULL);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (unsigned char)major, b[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        b[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + pre, dict, dl);
    memset(b + pre + dl, ' ', hlen - dl - 1);
    b[pre + hlen - 1] = '\n';
    if (nbytes)
        memcpy(b + pre + hlen, data, nbytes);
    return b;
}

static void write_file(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    ASSERT_EQ_INT(fwrite(b, 1, n, f), n);
    ASSERT_EQ_INT(fclose(f), 0);
}

/* Writes a .npy file under the test's directory; returns its path. */
static const char *write_npy(const char *name, int major, const char *descr, const char *shape, const void *data,
                             size_t nbytes)
{
    char dict[256];
    snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    size_t len;
    unsigned char *b = npy_bytes(major, dict, data, nbytes, &len);
    const char *path = herd_test_fmt("%s/%s", herd_test_tmpdir(), name);
    write_file(path, b, len);
    free(b);
    return path;
}

enum { N = 6, C = 3, H = 4, W = 5, DIM = C * H * W };

/* Pixel (i, c, y, x) of the test's images, NCHW. */
static unsigned char pixel(size_t i, size_t c, size_t y, size_t x)
{
    return (unsigned char)(i * 41 + c * 97 + y * 13 + x * 3);
}

static herd_dataset load_ok(const char *img, const char *lab)
{
    herd_dataset d;
    herd_err err = {0};
    if (herd_data_load_npy(img, lab, &d, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    return d;
}

/* NCHW and NHWC, uint8 and float32, versions 1 to 3, both byte orders: the
 * same examples, to the bit. */
static void test_npy_layouts(void)
{
    unsigned char nchw[N * DIM], nhwc[N * DIM];
    float f[N * DIM];
    uint32_t fbe[N * DIM];
    for (size_t i = 0; i < N; i++)
        for (size_t c = 0; c < C; c++)
            for (size_t y = 0; y < H; y++)
                for (size_t x = 0; x < W; x++) {
                    unsigned char v = pixel(i, c, y, x);
                    nchw[((i * C + c) * H + y) * W + x] = v;
                    nhwc[((i * H + y) * W + x) * C + c] = v;
                }
    for (size_t k = 0; k < N * DIM; k++) {
        f[k] = (float)nchw[k] * 0.5f - 17.25f;
        uint32_t u;
        memcpy(&u, &f[k], 4);
        fbe[k] = __builtin_bswap32(u);
    }
    int64_t l64[N];
    int32_t l32[N];
    unsigned char l8[N];
    uint64_t lbe[N];
    for (size_t i = 0; i < N; i++)
        l64[i] = (int64_t)(i * 5 % 7), l32[i] = (int32_t)l64[i], l8[i] = (unsigned char)l64[i],
        lbe[i] = __builtin_bswap64((uint64_t)l64[i]);
    const char *labs[4] = {write_npy("l64.npy", 1, "<i8", "(6,)", l64, sizeof l64),
                           write_npy("l32.npy", 2, "<i4", "(6, 1)", l32, sizeof l32),
                           write_npy("l8.npy", 3, "|u1", "(6,)", l8, sizeof l8),
                           write_npy("lbe.npy", 1, ">i8", "(6,)", lbe, sizeof lbe)};
    const char *imgs[5] = {write_npy("nchw.npy", 1, "|u1", "(6, 3, 4, 5)", nchw, sizeof nchw),
                           write_npy("nhwc.npy", 2, "|u1", "(6, 4, 5, 3)", nhwc, sizeof nhwc),
                           write_npy("f.npy", 3, "<f4", "(6, 3, 4, 5)", f, sizeof f),
                           write_npy("fbe.npy", 1, ">f4", "(6, 3, 4, 5)", fbe, sizeof fbe),
                           write_npy("flat.npy", 1, "<f4", "(6, 60)", f, sizeof f)};
    for (int k = 0; k < 5; k++) {
        herd_dataset d = load_ok(imgs[k], labs[k % 4]);
        ASSERT_EQ_INT(d.n, N);
        if (k == 4)
            ASSERT_TRUE(d.c == 1 && d.h == 1 && d.w == DIM);
        else
            ASSERT_TRUE(d.c == C && d.h == H && d.w == W);
        ASSERT_EQ_INT(d.nclasses, 7); /* labels 0 5 3 1 6 4 */
        for (size_t j = 0; j < N * DIM; j++)
            ASSERT_TRUE(d.x[j] == (k < 2 ? (float)nchw[j] / 255.0f : f[j]));
        for (size_t i = 0; i < N; i++)
            ASSERT_EQ_INT(d.y[i], l64[i]);
        ASSERT_TRUE(d.mean == NULL && d.digest == 0); /* herd_data_open's, not the reader's */
        herd_dataset_free(&d);
    }
    /* N x H x W: one channel */
    herd_dataset d = load_ok(write_npy("hw.npy", 1, "|u1", "(6, 12, 5)", nchw, sizeof nchw), labs[0]);
    ASSERT_TRUE(d.c == 1 && d.h == 12 && d.w == 5 && d.x[59] == (float)nchw[59] / 255.0f);
    herd_dataset_free(&d);
}

/* A header of dict (or raw bytes) refused with want and msg, naming the file. */
static void expect_refused(const unsigned char *img, size_t ni, const char *lab_dict, herd_status want, const char *msg)
{
    int64_t l[2] = {0, 1};
    size_t nl;
    unsigned char *lab = npy_bytes(1, lab_dict ? lab_dict : "{'descr': '<i8', 'fortran_order': False, 'shape': (2,)}",
                                   l, sizeof l, &nl);
    herd_dataset d;
    herd_err err = {0};
    herd_status st = herd__data_parse_npy(img, ni, lab, nl, "bad-images.npy", "bad-labels.npy", &d, &err);
    free(lab);
    if (st != want)
        herd_test_fail(__FILE__, __LINE__, "want %s, got %s (%s) for '%s'", herd_err_name(want), herd_err_name(st),
                       err.msg, msg);
    ASSERT_STR_CONTAINS(err.msg, "bad-");
    ASSERT_STR_CONTAINS(err.msg, msg);
    ASSERT_TRUE(d.x == NULL && d.y == NULL && d.n == 0);
}

static void expect_header_refused(const char *dict, size_t nbytes, herd_status want, const char *msg)
{
    static const float px[8] = {0.5f, 1, 2, 3, 4, 5, 6, 7};
    size_t len;
    unsigned char *b = npy_bytes(1, dict, px, nbytes, &len);
    expect_refused(b, len, NULL, want, msg);
    free(b);
}

static void test_npy_malformed(void)
{
    const char *ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2)}";
    expect_header_refused(ok, 31, HERD_ECORRUPT, "bad-images.npy: .npy header's shape needs 32 bytes of data but "
                          "the file holds 31");
    size_t len;
    static const float px[8] = {0};
    unsigned char *b = npy_bytes(1, ok, px, sizeof px, &len);
    unsigned char *m = malloc(len + 1);
    memcpy(m, b, len);
    m[len] = 0;
    expect_refused(m, len + 1, NULL, HERD_ECORRUPT, "bad-images.npy: .npy header's shape needs 32 bytes of data but "
                   "the file holds 33");
    m[0] = 0x92;
    expect_refused(m, len, NULL, HERD_ECORRUPT, "wrong magic bytes");
    expect_refused(b, 9, NULL, HERD_ECORRUPT, "shorter than its 10-byte preamble");
    memcpy(m, b, len);
    m[6] = 4;
    expect_refused(m, len, NULL, HERD_EUNSUPPORTED, "format version 4.0");
    memcpy(m, b, len);
    m[8] = 0xff, m[9] = 0xff;
    expect_refused(m, len, NULL, HERD_ECORRUPT, "header of 65535 bytes");
    free(m), free(b);
    static const struct {
        const char *dict;
        size_t nbytes;
        herd_status want;
        const char *msg;
    } bad[] = {
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2, 2)}", 32, HERD_EUNSUPPORTED, "Fortran-ordered"},
        {"{'descr': '<c8', 'fortran_order': False, 'shape': (2, 2)}", 32, HERD_EUNSUPPORTED, "dtype '<c8'"},
        {"{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2)}", 32, HERD_EUNSUPPORTED,
         "uint8 or float32, not float64"},
        {"{'descr': '<f4', 'fortran_order': False}", 32, HERD_ECORRUPT, "malformed .npy header"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2), 'x': 1}", 32, HERD_ECORRUPT,
         "an unknown key 'x'"},
        {"{'descr': '<f4', 'descr': '<f4', 'shape': (2, 4)}", 32, HERD_ECORRUPT, "a repeated key"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4", 32, HERD_ECORRUPT, "malformed"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, -4)}", 32, HERD_ECORRUPT, "malformed"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 99999999999)}", 32,
         HERD_ECORRUPT, "needs more than the 32 bytes"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 1, 2, 2)}", 32, HERD_ECORRUPT, "2 to 4 dimensions"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (0, 4)}", 0, HERD_ECORRUPT, "holds no images"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2)}", 32, HERD_ECORRUPT,
         "has 4 images but bad-labels.npy is not an array of 4 labels"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        expect_header_refused(bad[k].dict, bad[k].nbytes, bad[k].want, bad[k].msg);
    static const float nan8[8] = {0, 0, 0, 0, 0, 0, NAN, 0};
    b = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4)}", nan8, sizeof nan8, &len);
    expect_refused(b, len, NULL, HERD_ECORRUPT, "bad-images.npy: image 1 holds a non-finite value");
    expect_refused(b, len, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,)}", HERD_EUNSUPPORTED,
                   "bad-labels.npy: labels must be integers");
    expect_refused(b, len, "{'descr': '<i4', 'fortran_order': False, 'shape': (4,)}", HERD_ECORRUPT,
                   "bad-labels.npy");
    free(b);
}

/* Labels out of range; a label file cut short. */
static void test_npy_labels(void)
{
    static const unsigned char px[4] = {1, 2, 3, 4};
    size_t ni, nl;
    unsigned char *img = npy_bytes(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2)}", px, 4, &ni);
    int64_t bad[3][2] = {{0, -1}, {70000, 1}, {0, INT64_MIN}};
    for (int k = 0; k < 3; k++) {
        unsigned char *lab = npy_bytes(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (2,)}", bad[k], 16, &nl);
        herd_dataset d;
        herd_err err = {0};
        ASSERT_EQ_INT(herd__data_parse_npy(img, ni, lab, nl, "i.npy", "l.npy", &d, &err), HERD_ECORRUPT);
        ASSERT_STR_CONTAINS(err.msg, herd_test_fmt("l.npy: label %d is outside [0, 65535]", k == 1 ? 0 : 1));
        ASSERT_EQ_INT(herd__data_parse_npy(img, ni, lab, nl - 1, "i.npy", "l.npy", &d, &err), HERD_ECORRUPT);
        ASSERT_STR_CONTAINS(err.msg, "l.npy: .npy header's shape needs");
        free(lab);
    }
    free(img);
}

/* Every prefix of a valid pair, and random flips in it: each refused with a
 * message, or read whole; nothing crashes (ASan: make asan). */
static void test_npy_mutations(void)
{
    unsigned char px[2 * 3 * 4 * 5];
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (unsigned char)(i * 7);
    int32_t l[2] = {1, 0};
    size_t ni, nl;
    unsigned char *img = npy_bytes(2, "{'descr': '|u1', 'fortran_order': False, 'shape': (2, 4, 5, 3), }", px,
                                   sizeof px, &ni);
    unsigned char *lab = npy_bytes(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", l, sizeof l, &nl);
    unsigned char *m = malloc(ni);
    herd_rng r;
    herd_rng_seed(&r, 31, 0);
    size_t ok = 0, bad = 0;
    for (size_t t = 0; t < ni + 3000; t++) {
        memcpy(m, img, ni);
        size_t len = t < ni ? t : ni;
        if (t >= ni)
            for (int k = 0; k < 1 + (int)herd_rng_below(&r, 3); k++)
                m[herd_rng_below(&r, ni)] ^= (unsigned char)(1u << herd_rng_below(&r, 8));
        herd_dataset d;
        herd_err err = {0};
        herd_status st = herd__data_parse_npy(m, len, lab, nl, "m.npy", "l.npy", &d, &err);
        if (st == HERD_OK) {
            ASSERT_TRUE(d.n * d.c * d.h * d.w == 120 && d.y[0] == 1 && d.nclasses == 2);
            herd_dataset_free(&d);
            ok++;
        } else {
            ASSERT_TRUE(err.msg[0] != 0 && d.x == NULL);
            bad++;
        }
    }
    ASSERT_TRUE(ok > 50 && bad > 1000);
    free(m), free(img), free(lab);
}

/* A learnable set of nk classes of 8x8 one-channel images: class k's
 * quadrant k is bright, over noise. NHWC uint8 (N x 8 x 8 x 1) when nhwc, else
 * float32 N x 1 x 8 x 8 of the same pixels over 255 (what the uint8 reader
 * gives, so that both sets are of one scale). */
static void write_npy_set(const char *dir, const char *part, size_t n, size_t nk, uint64_t seed, bool nhwc)
{
    herd_rng r;
    herd_rng_seed(&r, seed, 3);
    unsigned char *u = malloc(n * 64);
    float *f = malloc(n * 64 * sizeof *f);
    int64_t *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) {
        y[i] = (int64_t)herd_rng_below(&r, nk);
        for (size_t j = 0; j < 64; j++) {
            bool lit = (size_t)((j / 8 / 4) * 2 + j % 8 / 4) == (size_t)y[i] % 4;
            u[i * 64 + j] = (unsigned char)((lit ? 150 : 0) + (int)herd_rng_below(&r, 100));
            f[i * 64 + j] = (float)u[i * 64 + j] / 255.0f;
        }
    }
    char name[128];
    snprintf(name, sizeof name, "%s/%s_images.npy", dir, part);
    const char *shape = herd_test_fmt(nhwc ? "(%zu, 8, 8, 1)" : "(%zu, 1, 8, 8)", n);
    write_npy(name, 1, nhwc ? "|u1" : "<f4", shape, nhwc ? (void *)u : (void *)f, n * 64 * (nhwc ? 1 : 4));
    snprintf(name, sizeof name, "%s/%s_labels.npy", dir, part);
    write_npy(name, 1, "<i8", herd_test_fmt("(%zu,)", n), y, n * sizeof *y);
    free(u), free(f), free(y);
}

static const char *make_subdir(const char *name)
{
    const char *d = herd_test_fmt("%s/%s", herd_test_tmpdir(), name);
    ASSERT_TRUE(mkdir(d, 0700) == 0);
    return d;
}

/* herd_data_open on a directory of .npy files: found, both sets
 * standardized with the training set's statistics, classes from both. */
static void test_npy_open_dir(void)
{
    make_subdir("set");
    write_npy_set("set", "train", 40, 3, 1, true);
    const char *dir = herd_test_fmt("%s/set", herd_test_tmpdir());
    herd_dataset tr, te;
    herd_err err = {0};
    ASSERT_EQ_INT(herd_data_open(dir, 1, &tr, &te, &err), HERD_ENOTFOUND);
    ASSERT_STR_CONTAINS(err.msg, "has 2 of the 4 .npy files");
    write_npy_set("set", "test", 10, 4, 2, false);
    if (herd_data_open(dir, 1, &tr, &te, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ASSERT_TRUE(tr.n == 40 && te.n == 10 && tr.c == 1 && tr.h == 8 && tr.w == 8);
    size_t top = 0;
    for (size_t i = 0; i < te.n; i++)
        top = (size_t)te.y[i] > top ? (size_t)te.y[i] : top;
    ASSERT_EQ_INT(tr.nclasses, top + 1 > 3 ? top + 1 : 3);
    ASSERT_EQ_INT(te.nclasses, tr.nclasses);
    herd_dataset raw = load_ok(herd_test_fmt("%s/train_images.npy", dir), herd_test_fmt("%s/train_labels.npy", dir));
    double s = 0, s2 = 0;
    for (size_t i = 0; i < 40 * 64; i++)
        s += raw.x[i], s2 += (double)raw.x[i] * raw.x[i];
    double mean = s / 2560, sd = sqrt(s2 / 2560 - mean * mean);
    ASSERT_NEAR(tr.mean[0], mean, 1e-6, 1e-6);
    ASSERT_NEAR(tr.std[0], sd, 1e-6, 1e-6);
    ASSERT_TRUE(te.mean[0] == tr.mean[0] && te.std[0] == tr.std[0]);
    for (size_t i = 0; i < 40 * 64; i++)
        ASSERT_NEAR(tr.x[i], (raw.x[i] - mean) / sd, 1e-5, 0);
    herd_dataset_free(&raw), herd_dataset_free(&tr), herd_dataset_free(&te);
    /* the test set's examples of another shape */
    write_npy("set/test_images.npy", 1, "|u1", "(1, 2, 2)", "abcd", 4);
    write_npy("set/test_labels.npy", 1, "|u1", "(1,)", "\0", 1);
    ASSERT_EQ_INT(herd_data_open(dir, 1, &tr, &te, &err), HERD_ECORRUPT);
    ASSERT_STR_CONTAINS(err.msg, "training examples are 1x8x8 but test examples 1x2x2");
}

/* herd train on a directory of .npy files: the right number of steps, a
 * model that learned the four classes; a corrupt file, exit 1 naming it. */
static void test_npy_train_cli(void)
{
    make_subdir("npy");
    write_npy_set("npy", "train", 512, 4, 5, true);
    write_npy_set("npy", "test", 128, 4, 6, false);
    const char *dir = herd_test_fmt("%s/npy", herd_test_tmpdir());
    herd_test_cmd o;
    herd_test_run(&o, 50, (const char *const[]){"train", "--data", dir, "--model", "linear", "--epochs", "2",
                                               "--batch", "32", "--json", "--no-progress", NULL});
    if (o.code != 0)
        herd_test_fail(__FILE__, __LINE__, "exit %d: %s", o.code, o.err);
    ASSERT_STR_CONTAINS(o.out, "\"steps\":32,"); /* 2 epochs of 512 / 32 */
    const char *acc = strstr(o.out, "\"test_acc\":");
    ASSERT_TRUE(acc != NULL);
    double a = atof(acc + strlen("\"test_acc\":"));
    if (!(a >= 0.95))
        herd_test_fail(__FILE__, __LINE__, "test accuracy %g on four separable classes: %s", a, o.out);
    write_file(herd_test_fmt("%s/test_labels.npy", dir), "\x93NUMPY\x01\x00\x10", 9);
    HERD_TEST_RUN(&o, "train", "--data", dir, "--model", "linear", "--epochs", "1");
    ASSERT_EQ_INT(o.code, 1);
    ASSERT_STR_CONTAINS(o.err, "test_labels.npy: not a .npy file (shorter than its 10-byte preamble)");
}

const herd_test herd_tests_formats[] = {
    {"formats_npy_layouts", test_npy_layouts, 20, HERD_TEST_ONE_THREAD},
    {"formats_npy_malformed", test_npy_malformed, 20, HERD_TEST_ONE_THREAD},
    {"formats_npy_labels", test_npy_labels, 20, HERD_TEST_ONE_THREAD},
    {"formats_npy_mutations", test_npy_mutations, 60, HERD_TEST_ONE_THREAD},
    {"formats_npy_open_dir", test_npy_open_dir, 20, HERD_TEST_ONE_THREAD},
    {"formats_npy_train_cli", test_npy_train_cli, 60},
    HERD_TEST_END,
};
