/* The data formats beyond IDX and CIFAR. NumPy .npy arrays, written here
 * byte by byte, read back to the exact value in every layout and type;
 * every malformed header refused with a message naming its file; a
 * directory of them opened, standardized and trained on by the herd
 * command. Folders of PNG and JPEG images per class, written here with
 * libpng and libjpeg: decoded to the bit (PNG) or within a few levels
 * (JPEG), every cut or broken file refused, classes and examples in
 * torchvision's order, and trained on. */
#include "harness.h"
#include "fixtures.h"
#include "data/data_parse.h"
#include "herd/herd_data.h"
#include "herd/herd_rng.h"

#include <stdint.h>
#include <stdio.h> /* before jpeglib.h */
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

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

/* An 8x8 one-channel picture of class k of four: quadrant k bright, over noise. */
static void quadrant(unsigned char *px, size_t k, herd_rng *r)
{
    for (size_t j = 0; j < 64; j++)
        px[j] = (unsigned char)(((j / 8 / 4) * 2 + j % 8 / 4 == k ? 150 : 0) + herd_rng_below(r, 100));
}

/* A learnable set of nk (at most 4) classes of quadrant() pictures: NHWC
 * uint8 (N x 8 x 8 x 1) when nhwc, else float32 N x 1 x 8 x 8 of the same
 * pixels over 255 (what the uint8 reader gives: both sets of one scale). */
static void write_npy_set(const char *dir, const char *part, size_t n, size_t nk, uint64_t seed, bool nhwc)
{
    herd_rng r;
    herd_rng_seed(&r, seed, 3);
    unsigned char *u = malloc(n * 64);
    float *f = malloc(n * 64 * sizeof *f);
    int64_t *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) {
        y[i] = (int64_t)herd_rng_below(&r, nk);
        quadrant(u + i * 64, (size_t)y[i], &r);
        for (size_t j = 0; j < 64; j++)
            f[i * 64 + j] = (float)u[i * 64 + j] / 255.0f;
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

/* herd train --model linear, 2 epochs of batch 32 on dir of four classes
 * of quadrant(): it ends well, its summary holds steps ("\"steps\":N,"),
 * and the model learned (test accuracy 0.95 or more). Then dir's file
 * named bad becomes the bytes of text bytes (no NUL): exit 1, msg said. */
static void expect_learns(const char *dir, const char *steps, const char *bad, const char *bytes, const char *msg)
{
    herd_test_cmd o;
    herd_test_run(&o, 50, (const char *const[]){"train", "--data", dir, "--model", "linear", "--epochs", "2",
                                               "--batch", "32", "--json", "--no-progress", NULL});
    if (o.code != 0)
        herd_test_fail(__FILE__, __LINE__, "exit %d: %s", o.code, o.err);
    ASSERT_STR_CONTAINS(o.out, steps);
    const char *acc = strstr(o.out, "\"test_acc\":");
    ASSERT_TRUE(acc != NULL);
    double a = atof(acc + strlen("\"test_acc\":"));
    if (!(a >= 0.95))
        herd_test_fail(__FILE__, __LINE__, "test accuracy %g on four separable classes: %s", a, o.out);
    write_file(herd_test_fmt("%s/%s", dir, bad), bytes, strlen(bytes));
    HERD_TEST_RUN(&o, "train", "--data", dir, "--model", "linear", "--epochs", "1");
    ASSERT_EQ_INT(o.code, 1);
    ASSERT_STR_CONTAINS(o.err, msg);
}

/* herd train on a directory of .npy files: the right number of steps, a
 * model that learned the four classes; a corrupt file, exit 1 naming it. */
static void test_npy_train_cli(void)
{
    make_subdir("npy");
    write_npy_set("npy", "train", 512, 4, 5, true);
    write_npy_set("npy", "test", 128, 4, 6, false);
    const char *dir = herd_test_fmt("%s/npy", herd_test_tmpdir());
    herd_test_cmd o; /* herd model takes the shape and classes from the set */
    HERD_TEST_RUN(&o, "model", "linear", "--data", dir);
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.out, "for 1x8x8 inputs and 4 classes");
    ASSERT_STR_CONTAINS(o.out, "\n260 parameters");
    expect_learns(dir, "\"steps\":32,", "test_labels.npy", "\x93NUMPY\x01\x00\x10", /* 2 epochs of 512 / 32 */
                  "test_labels.npy: not a .npy file (shorter than its 10-byte preamble)");
}

/* ---- folders of PNG and JPEG images per class ---------------------------- */

/* Writes a PNG of c (1 gray, 3 RGB) x h x w CHW pixels with libpng, as
 * format asks: PNG_FORMAT_GRAY, _GA, _RGB, _RGBA (alpha made up, which the
 * reader drops), _RGB_COLORMAP or _RGBA_COLORMAP (a palette of the image's
 * own colors, with a tRNS chunk of made-up alpha). */
static void write_png(const char *path, size_t c, size_t h, size_t w, const unsigned char *chw, uint32_t format)
{
    size_t hw = h * w, oc = PNG_IMAGE_PIXEL_CHANNELS(format), mc = PNG_IMAGE_SAMPLE_CHANNELS(format);
    unsigned char *buf = calloc(hw * (oc > c ? oc : c), 1), map[256 * 4] = {0};
    ASSERT_TRUE(buf != NULL);
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION, im.width = (uint32_t)w, im.height = (uint32_t)h, im.format = format;
    for (size_t j = 0; j < hw; j++) {
        if (format & PNG_FORMAT_FLAG_COLORMAP) {
            ASSERT_TRUE(hw <= 256);
            buf[j] = (unsigned char)j; /* entry j is pixel j's color */
            for (size_t ch = 0; ch < mc; ch++)
                map[j * mc + ch] = ch < 3 ? chw[ch * hw + j] : (unsigned char)(j * 37);
            continue;
        }
        for (size_t ch = 0; ch < oc; ch++)
            buf[j * oc + ch] = ch < c ? chw[ch * hw + j] : (unsigned char)(j * 37);
    }
    if (format & PNG_FORMAT_FLAG_COLORMAP)
        im.colormap_entries = (uint32_t)hw;
    if (!png_image_write_to_file(&im, path, 0, buf, 0, map))
        herd_test_fail(__FILE__, __LINE__, "writing %s: %s", path, im.message);
    free(buf);
}

/* Writes a baseline JPEG of quality q with libjpeg. */
static void write_jpeg(const char *path, size_t c, size_t h, size_t w, const unsigned char *chw, int q)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w, ci.image_height = (JDIMENSION)h, ci.input_components = (int)c;
    ci.in_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, q, TRUE);
    jpeg_start_compress(&ci, TRUE);
    unsigned char *row = malloc(w * c);
    for (size_t y = 0; y < h; y++) {
        for (size_t x = 0; x < w; x++)
            for (size_t ch = 0; ch < c; ch++)
                row[x * c + ch] = chw[(ch * h + y) * w + x];
        JSAMPROW r = row;
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    ASSERT_EQ_INT(fclose(f), 0);
    free(row);
}

/* A smooth test picture (JPEG keeps it within a few levels), CHW. */
static void picture(unsigned char *chw, size_t c, size_t h, size_t w, size_t seed)
{
    for (size_t ch = 0; ch < c; ch++)
        for (size_t y = 0; y < h; y++)
            for (size_t x = 0; x < w; x++)
                chw[(ch * h + y) * w + x] = (unsigned char)(20 + 10 * seed + 30 * ch + 8 * y + 5 * x);
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ASSERT_TRUE(f != NULL);
    unsigned char *b = malloc(1 << 20);
    *len = fread(b, 1, 1 << 20, f);
    fclose(f);
    return b;
}

static herd__image decode_ok(const char *path)
{
    size_t len;
    unsigned char *b = slurp(path, &len);
    herd__image img;
    herd_err err = {0};
    if (herd__image_decode(b, len, path, 1 << 20, &img, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    free(b);
    return img;
}

/* PNG of each kind to the bit; JPEG within a few levels of what was encoded. */
static void test_image_decode(void)
{
    enum { IH = 7, IW = 9 };
    unsigned char px[3 * IH * IW];
    static const struct {
        uint32_t format;
        size_t c;
    } kinds[] = {{PNG_FORMAT_GRAY, 1}, {PNG_FORMAT_RGB, 3},          {PNG_FORMAT_RGBA, 3},
                 {PNG_FORMAT_GA, 1},   {PNG_FORMAT_RGB_COLORMAP, 3}, {PNG_FORMAT_RGBA_COLORMAP, 3}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        picture(px, kinds[k].c, IH, IW, k);
        const char *path = herd_test_fmt("%s/k%zu.png", herd_test_tmpdir(), k);
        write_png(path, kinds[k].c, IH, IW, px, kinds[k].format);
        herd__image img = decode_ok(path);
        ASSERT_TRUE(img.c == kinds[k].c && img.h == IH && img.w == IW);
        for (size_t j = 0; j < kinds[k].c * IH * IW; j++)
            ASSERT_EQ_INT(img.px[j], px[j]);
        free(img.px);
    }
    for (size_t c = 1; c <= 3; c += 2) {
        picture(px, c, IH, IW, c);
        const char *path = herd_test_fmt("%s/q%zu.jpg", herd_test_tmpdir(), c);
        write_jpeg(path, c, IH, IW, px, 95);
        herd__image img = decode_ok(path);
        ASSERT_TRUE(img.c == c && img.h == IH && img.w == IW);
        double sum = 0;
        for (size_t j = 0; j < c * IH * IW; j++) {
            ASSERT_NEAR(img.px[j], px[j], 10, 0);
            sum += fabs((double)img.px[j] - px[j]);
        }
        ASSERT_TRUE(sum / (double)(c * IH * IW) < 3);
        free(img.px);
    }
}

static void put_be32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (24 - 8 * i));
}

/* A PNG file's bytes written here: IHDR of w x h, color type and depth, the
 * rows (filter 0 each) deflated into one IDAT, and an optional ancillary chunk. */
static unsigned char *png_by_hand(uint32_t w, uint32_t h, int ctype, int depth, const unsigned char *rows,
                                  size_t rowbytes, const char *extra_type, const void *extra, size_t extra_len,
                                  size_t *len)
{
    size_t nraw = h * (rowbytes + 1);
    unsigned char *raw = malloc(nraw), *b = malloc(nraw + 1024 + extra_len);
    for (size_t y = 0; y < h; y++)
        raw[y * (rowbytes + 1)] = 0, memcpy(raw + y * (rowbytes + 1) + 1, rows + y * rowbytes, rowbytes);
    unsigned char ihdr[13] = {0, 0, 0, 0, 0, 0, 0, 0, (unsigned char)depth, (unsigned char)ctype, 0, 0, 0};
    put_be32(ihdr, w), put_be32(ihdr + 4, h);
    uLongf nz = (uLongf)(nraw + 512);
    unsigned char *z = malloc(nz);
    ASSERT_EQ_INT(compress(z, &nz, raw, (uLong)nraw), Z_OK);
    memcpy(b, "\x89PNG\r\n\x1a\n", 8);
    size_t at = 8;
    const char *types[4] = {"IHDR", extra_type, "IDAT", "IEND"};
    const void *data[4] = {ihdr, extra, z, NULL};
    size_t lens[4] = {13, extra_len, nz, 0};
    for (int k = 0; k < 4; k++) {
        if (!types[k])
            continue;
        put_be32(b + at, (uint32_t)lens[k]);
        memcpy(b + at + 4, types[k], 4);
        if (lens[k])
            memcpy(b + at + 8, data[k], lens[k]);
        put_be32(b + at + 8 + lens[k], (uint32_t)crc32(0, b + at + 4, (uInt)(lens[k] + 4)));
        at += 12 + lens[k];
    }
    free(raw), free(z);
    *len = at;
    return b;
}

/* What libpng's simplified writer cannot make: 1-bit gray widened to 0 and
 * 255, 16-bit RGBA cut to the high bytes of its RGB, a gray image with a
 * tRNS chunk still one channel. */
static void test_image_png_depths(void)
{
    static const unsigned char bits[4] = {0xaa, 0x80, 0x55, 0x00}; /* 9 x 2: 101010101, 010101010 */
    size_t len;
    unsigned char *b = png_by_hand(9, 2, 0, 1, bits, 2, NULL, NULL, 0, &len);
    herd__image img;
    herd_err err = {0};
    ASSERT_OK(herd__image_decode(b, len, "bits.png", 1 << 20, &img, &err));
    ASSERT_TRUE(img.c == 1 && img.h == 2 && img.w == 9);
    for (size_t j = 0; j < 18; j++)
        ASSERT_EQ_INT(img.px[j], (j / 9 + j % 9) % 2 ? 0 : 255);
    free(img.px), free(b);
    unsigned char wide[2 * 2 * 8];
    for (size_t k = 0; k < sizeof wide; k++)
        wide[k] = (unsigned char)(k * 11 + 3);
    b = png_by_hand(2, 2, 6, 16, wide, 16, NULL, NULL, 0, &len);
    ASSERT_OK(herd__image_decode(b, len, "wide.png", 1 << 20, &img, &err));
    ASSERT_TRUE(img.c == 3 && img.h == 2 && img.w == 2);
    for (size_t ch = 0; ch < 3; ch++)
        for (size_t j = 0; j < 4; j++) /* pixel j's sample ch: bytes 8 j + 2 ch (high), + 1 (low) */
            ASSERT_EQ_INT(img.px[ch * 4 + j], wide[8 * j + 2 * ch]);
    free(img.px), free(b);
    static const unsigned char gray[4] = {7, 8, 9, 10}, trns[2] = {0, 8};
    b = png_by_hand(2, 2, 0, 8, gray, 2, "tRNS", trns, 2, &len);
    ASSERT_OK(herd__image_decode(b, len, "trns.png", 1 << 20, &img, &err));
    ASSERT_TRUE(img.c == 1 && img.px[0] == 7 && img.px[3] == 10);
    free(img.px), free(b);
}

static void expect_image_refused(const unsigned char *b, size_t len, size_t max, const char *msg)
{
    herd__image img;
    herd_err err = {0};
    ASSERT_EQ_INT(herd__image_decode(b, len, "bad/pic.png", max, &img, &err), HERD_ECORRUPT);
    ASSERT_STR_CONTAINS(err.msg, "bad/pic.png: ");
    ASSERT_STR_CONTAINS(err.msg, msg);
    ASSERT_TRUE(img.px == NULL && img.c == 0);
}

/* Every prefix of a PNG and a JPEG, a broken CRC, a header claiming more
 * than the file holds, an image above the limit, bytes of neither kind. */
static void test_image_malformed(void)
{
    unsigned char px[3 * 16 * 16];
    picture(px, 3, 16, 16, 0);
    const char *png = herd_test_fmt("%s/m.png", herd_test_tmpdir()), *jpg = herd_test_fmt("%s/m.jpg", herd_test_tmpdir());
    write_png(png, 3, 16, 16, px, PNG_FORMAT_RGB);
    write_jpeg(jpg, 3, 16, 16, px, 90);
    size_t np, nj;
    unsigned char *p = slurp(png, &np), *j = slurp(jpg, &nj);
    for (size_t len = 0; len < np; len++)
        expect_image_refused(p, len, 1 << 20, len < 8 ? "not a PNG or JPEG file" : "corrupt PNG");
    for (size_t len = 3; len < nj; len++)
        expect_image_refused(j, len, 1 << 20, "corrupt JPEG");
    expect_image_refused(p, np, 100, "larger than herd reads");
    expect_image_refused(j, nj, 100, "larger than herd reads");
    expect_image_refused((const unsigned char *)"GIF89a....", 10, 1 << 20, "not a PNG or JPEG file");
    unsigned char *m = malloc(np);
    memcpy(m, p, np);
    m[20] ^= 1; /* IHDR's height, its CRC now wrong */
    expect_image_refused(m, np, 1 << 20, "corrupt PNG: IHDR: CRC error");
    memcpy(m, p, np);
    put_be32(m + 16, 60000), put_be32(m + 20, 60000); /* 60000 x 60000, with a right CRC */
    put_be32(m + 29, (uint32_t)crc32(0, m + 12, 17));
    expect_image_refused(m, np, (size_t)1 << 40, "claims more pixels than the file can hold");
    free(m), free(p), free(j);
}

/* A folder of images per class at DIR/PART/CLASS/NAME: a picture of seed. */
static void put_image(const char *dir, const char *part, const char *cls, const char *name, size_t c, size_t h,
                      size_t w, size_t seed)
{
    unsigned char px[3 * 32 * 32];
    picture(px, c, h, w, seed);
    const char *d = herd_test_fmt("%s/%s", dir, part);
    mkdir(d, 0700);
    d = herd_test_fmt("%s/%s/%s", dir, part, cls);
    mkdir(d, 0700);
    const char *path = herd_test_fmt("%s/%s", d, name);
    if (strstr(name, ".jpg"))
        write_jpeg(path, c, h, w, px, 95);
    else
        write_png(path, c, h, w, px, c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB);
}

static void expect_open_refused(const char *dir, herd_status want, const char *msg)
{
    herd_dataset tr, te;
    herd_err err = {0};
    herd_status st = herd_data_open(dir, 1, &tr, &te, &err);
    if (st != want)
        herd_test_fail(__FILE__, __LINE__, "want %s, got %s (%s)", herd_err_name(want), herd_err_name(st), err.msg);
    ASSERT_STR_CONTAINS(err.msg, msg);
    ASSERT_TRUE(tr.x == NULL && te.x == NULL);
}

/* Classes sorted by name, hidden folders and other files skipped, examples
 * class by class and file by file, both sets standardized alike. */
static void test_image_folder(void)
{
    char dir[512]; /* herd_test_fmt's strings are reused after 256 calls */
    snprintf(dir, sizeof dir, "%s", make_subdir("imgs"));
    /* train: bird (2 images), cat (1), dog (1); a hidden folder, a text file */
    put_image(dir, "train", "dog", "x.png", 3, 5, 6, 0);
    put_image(dir, "train", "cat", "b.PNG", 3, 5, 6, 1);
    put_image(dir, "train", "bird", "b.png", 3, 5, 6, 2);
    put_image(dir, "train", "bird", "a.png", 3, 5, 6, 3);
    put_image(dir, "train", ".ipynb_checkpoints", "z.png", 1, 2, 2, 0);
    write_file(herd_test_fmt("%s/train/cat/notes.txt", dir), "hi", 2);
    expect_open_refused(dir, HERD_ENOTFOUND, "imgs: has train/ but not test/");
    put_image(dir, "test", "dog", "t.jpg", 3, 5, 6, 4);
    herd_dataset tr, te;
    herd_err err = {0};
    if (herd_data_open(dir, 1, &tr, &te, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    ASSERT_TRUE(tr.n == 4 && te.n == 1 && tr.c == 3 && tr.h == 5 && tr.w == 6);
    ASSERT_TRUE(tr.nclasses == 3 && te.nclasses == 3);
    static const int32_t labels[4] = {0, 0, 1, 2};  /* bird, bird, cat, dog */
    static const size_t seeds[4] = {3, 2, 1, 0};    /* bird/a, bird/b, cat/b, dog/x */
    unsigned char px[3 * 5 * 6];
    for (size_t i = 0; i < 4; i++) {
        ASSERT_EQ_INT(tr.y[i], labels[i]);
        picture(px, 3, 5, 6, seeds[i]);
        for (size_t k = 0; k < 90; k++) /* undo the standardization */
            ASSERT_NEAR(tr.x[i * 90 + k] * tr.std[k / 30] + tr.mean[k / 30], px[k] / 255.0, 1e-5, 0);
    }
    ASSERT_EQ_INT(te.y[0], 2);
    ASSERT_TRUE(te.mean[2] == tr.mean[2] && te.std[2] == tr.std[2]);
    herd_dataset_free(&tr), herd_dataset_free(&te);
    put_image(dir, "test", "fish", "f.png", 3, 5, 6, 0);
    expect_open_refused(dir, HERD_ECORRUPT, "imgs/test/fish: class 'fish' is not one of");
    ASSERT_EQ_INT(rename(herd_test_fmt("%s/test/fish/f.png", dir), herd_test_fmt("%s/test/dog/f.png", dir)), 0);
    ASSERT_EQ_INT(rmdir(herd_test_fmt("%s/test/fish", dir)), 0);
    ASSERT_EQ_INT(mkdir(herd_test_fmt("%s/train/emu", dir), 0700), 0);
    expect_open_refused(dir, HERD_ECORRUPT, "imgs/train/emu: holds no .png, .jpg or .jpeg images");
    ASSERT_EQ_INT(rmdir(herd_test_fmt("%s/train/emu", dir)), 0);
    put_image(dir, "test", "dog", "g.png", 3, 6, 5, 0);
    expect_open_refused(dir, HERD_ECORRUPT, "imgs/test/dog/g.png: an image of 3x6x5 (channels x height x width), "
                                            "where the first image read is 3x5x6");
    put_image(dir, "test", "dog", "g.png", 1, 5, 6, 0);
    expect_open_refused(dir, HERD_ECORRUPT, "imgs/test/dog/g.png: an image of 1x5x6");
    write_file(herd_test_fmt("%s/test/dog/g.png", dir), "\x89PNG\r\n\x1a\n\0\0", 10);
    expect_open_refused(dir, HERD_ECORRUPT, "imgs/test/dog/g.png: corrupt PNG");
    ASSERT_EQ_INT(unlink(herd_test_fmt("%s/test/dog/g.png", dir)), 0);
    const char *one = make_subdir("one");
    put_image(one, "train", "a", "x.png", 1, 2, 2, 0);
    put_image(one, "test", "a", "x.png", 1, 2, 2, 0);
    expect_open_refused(one, HERD_ECORRUPT, "one/train: holds 1 class folder(s), at least 2 are needed");
}

/* A folder DIR/NAME of four classes of quadrant() pictures, 8x8 gray: 64
 * PNG training images and 16 JPEG test images a class; DIR/NAME into dir. */
static void write_quad_folder(const char *name, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s", make_subdir(name)); /* herd_test_fmt's strings are reused after 256 calls */
    herd_rng r;
    herd_rng_seed(&r, 9, 0);
    unsigned char px[64];
    for (size_t part = 0; part < 2; part++)
        for (size_t k = 0; k < 4; k++)
            for (size_t i = 0; i < (part ? 16 : 64); i++) {
                quadrant(px, k, &r);
                const char *d = herd_test_fmt("%s/%s", dir, part ? "test" : "train");
                mkdir(d, 0700);
                d = herd_test_fmt("%s/class%zu", d, k);
                mkdir(d, 0700);
                if (part)
                    write_jpeg(herd_test_fmt("%s/%03zu.jpg", d, i), 1, 8, 8, px, 90);
                else
                    write_png(herd_test_fmt("%s/%03zu.png", d, i), 1, 8, 8, px, PNG_FORMAT_GRAY);
            }
}

/* herd train on an image folder: PNG training images, JPEG test images,
 * four classes (a bright quadrant each) learned; a corrupt file, exit 1. */
static void test_image_train_cli(void)
{
    char dir[512];
    write_quad_folder("quad", dir, sizeof dir);
    expect_learns(dir, "\"steps\":16,", "test/class2/007.jpg", "\xff\xd8\xff\xe0", /* 2 epochs of 256 / 32 */
                  "quad/test/class2/007.jpg: corrupt JPEG: ");
}

/* A run on an image folder is evaluated again from its checkpoint (herd
 * eval reads the folder anew and finds the run's data), and the examples
 * herd eval dumps (NPY, standardized) read back through the .npy reader
 * are the test set herd_data_open gives, to the bit. */
static void test_image_eval_dump(void)
{
    char dir[512];
    write_quad_folder("quad", dir, sizeof dir);
    const char *ck = herd_test_fmt("%s/ck", herd_test_tmpdir()), *dump = herd_test_fmt("%s/in.npy", herd_test_tmpdir());
    herd_test_cmd o;
    HERD_TEST_RUN(&o, "train", "--data", dir, "--model", "linear", "--epochs", "1", "--checkpoint", ck, "--quiet");
    if (o.code != 0)
        herd_test_fail(__FILE__, __LINE__, "train: exit %d: %s", o.code, o.err);
    HERD_TEST_RUN(&o, "eval", "--checkpoint", ck, "--dump-inputs", dump, "--quiet");
    if (o.code != 0)
        herd_test_fail(__FILE__, __LINE__, "eval: exit %d: %s", o.code, o.err);
    int64_t zeros[64] = {0};
    const char *lab = write_npy("zeros.npy", 1, "<i8", "(64,)", zeros, sizeof zeros);
    herd_dataset d = load_ok(dump, lab), tr, te;
    herd_err err = {0};
    ASSERT_OK(herd_data_open(dir, 1, &tr, &te, &err));
    ASSERT_TRUE(d.n == 64 && d.c == 1 && d.h == 8 && d.w == 8);
    ASSERT_EQ_INT(memcmp(d.x, te.x, 64 * 64 * sizeof(float)), 0);
    herd_dataset_free(&d), herd_dataset_free(&tr), herd_dataset_free(&te);
}

const herd_test herd_tests_formats[] = {
    {"formats_npy_layouts", test_npy_layouts, 20, HERD_TEST_ONE_THREAD},
    {"formats_npy_malformed", test_npy_malformed, 20, HERD_TEST_ONE_THREAD},
    {"formats_npy_labels", test_npy_labels, 20, HERD_TEST_ONE_THREAD},
    {"formats_npy_mutations", test_npy_mutations, 60, HERD_TEST_ONE_THREAD},
    {"formats_npy_open_dir", test_npy_open_dir, 20, HERD_TEST_ONE_THREAD},
    {"formats_npy_train_cli", test_npy_train_cli, 60},
    {"formats_image_decode", test_image_decode, 20, HERD_TEST_ONE_THREAD},
    {"formats_image_png_depths", test_image_png_depths, 20, HERD_TEST_ONE_THREAD},
    {"formats_image_malformed", test_image_malformed, 30, HERD_TEST_ONE_THREAD},
    {"formats_image_folder", test_image_folder, 20, HERD_TEST_ONE_THREAD},
    {"formats_image_train_cli", test_image_train_cli, 60},
    {"formats_image_eval_dump", test_image_eval_dump, 60},
    HERD_TEST_END,
};
