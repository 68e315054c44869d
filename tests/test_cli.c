/* The herd command line, run as a user runs it: exit codes, messages, and an
 * end-to-end training run on a slice of Fashion-MNIST. */
#include "fixtures.h"
#include "harness.h"

#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static void test_usage_errors(void)
{
    herd_test_cmd o;
    HERD_TEST_RUN(&o, "train", "--bogus");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "unknown flag '--bogus'");
    HERD_TEST_RUN(&o, "train", "--epochs", "-5");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "--epochs: expected a non-negative integer, got '-5'");
    HERD_TEST_RUN(&o, "train", "--lr", "fast");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "--lr: expected a number");
    HERD_TEST_RUN(&o, "train", "--epochs");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "needs a value");
    HERD_TEST_RUN(&o, "train", "--slow", "3");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "RANK:FACTOR");
    /* --fail RANK@STEP[:MODE]: malformed, an unknown mode, a process death
     * asked of the threads engine (it would end every worker) */
    static const char *const bad_fail[] = {"1", "1@", "@2", "1@2:", "1@2:explode", "1@2:kill:kill", "x@2"};
    for (size_t i = 0; i < sizeof bad_fail / sizeof bad_fail[0]; i++) {
        HERD_TEST_RUN(&o, "train", "--fail", bad_fail[i]);
        ASSERT_EQ_INT(o.code, 2);
        ASSERT_STR_CONTAINS(o.err, "RANK@STEP[:MODE]");
    }
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--workers", "2", "--algo", "allreduce", "--fail", "1@2:kill");
    ASSERT_EQ_INT(o.code, 1);
    ASSERT_STR_CONTAINS(o.err, "--fail 1@2:kill: the threads engine's mode is stop");
    HERD_TEST_RUN(&o, "train", "--overlap", "maybe");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "--overlap must be auto, on or off, got 'maybe'");
    HERD_TEST_RUN(&o, "train", "--overlap", "on");
    ASSERT_EQ_INT(o.code, 2); /* the form is checked as flags are read, whose option it is once --algo is known */
    ASSERT_STR_CONTAINS(o.err, "--overlap applies to allreduce, not --algo sgd");
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--algo", "allreduce", "--overlap", "on", "--no-overlap");
    ASSERT_EQ_INT(o.code, 1);
    ASSERT_STR_CONTAINS(o.err, "--no-overlap contradicts --overlap on");
    HERD_TEST_RUN(&o, "frobnicate");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "unknown command 'frobnicate'");
    HERD_TEST_RUN(&o, "train", "--model", "vgg99", "--data", "synthetic:1x8x8:4");
    ASSERT_EQ_INT(o.code, 1);
    ASSERT_STR_CONTAINS(o.err, "unknown model 'vgg99'");
    HERD_TEST_RUN(&o, "train", "--help");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.err, "--workers");
}

/* Every sub-command parses with the one flag parser: the same forms and
 * messages; an algorithm's options come from its table, as --name=value
 * too; the lists of algorithms and engines come from the registries. */
static void test_one_parser(void)
{
    herd_test_cmd o;
    HERD_TEST_RUN(&o, "train", "--data=synthetic:1x8x8:4", "--model=linear", "--algo=localsgd", "--workers=2", "--local-steps=2",
                  "--epochs=1", "--train-limit=256", "--test-limit=64", "--quiet", "--json");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.out, "\"algo\":\"localsgd\"");
    HERD_TEST_RUN(&o, "train", "--algo", "localsgd", "--local-steps=0");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "--local-steps must be in [1, 1000000], got 0");
    HERD_TEST_RUN(&o, "train", "--staleness-lr=yes");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "flag '--staleness-lr' takes no value");
    HERD_TEST_RUN(&o, "train", "extra");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "unexpected argument 'extra'");
    HERD_TEST_RUN(&o, "bench", "gemm", "--size", "big");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "--size: expected a non-negative integer, got 'big' (see 'herd bench --help')");
    HERD_TEST_RUN(&o, "bench", "allreduce", "--comm-dtype", "fp8");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "--comm-dtype must be fp32, fp16 or bf16, got 'fp8'");
    HERD_TEST_RUN(&o, "sim", "--workers", "many");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "--workers: expected a non-negative integer, got 'many' (see 'herd sim --help')");
    HERD_TEST_RUN(&o, "compare", "--bogus");
    ASSERT_EQ_INT(o.code, 2);
    ASSERT_STR_CONTAINS(o.err, "unknown flag '--bogus' (see 'herd compare --help')");
    HERD_TEST_RUN(&o, "sim", "--help");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.err, "--platform NAME|FILE");
    HERD_TEST_RUN(&o, "train", "--help");
    ASSERT_STR_CONTAINS(o.err, "options of --algo localsgd:");
    ASSERT_STR_CONTAINS(o.err, "--local-steps N");
    HERD_TEST_RUN(&o, "algos");
    ASSERT_STR_CONTAINS(o.out, "postlocal");
    HERD_TEST_RUN(&o, "engines");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.out, "threads    windows native-allreduce shared-memory");
    ASSERT_STR_CONTAINS(o.out, "loopback");
}

static void test_missing_and_corrupt_data(void)
{
    herd_test_cmd o;
    HERD_TEST_RUN(&o, "train", "--data", "/nonexistent/fmnist");
    ASSERT_EQ_INT(o.code, 1);
    ASSERT_STR_CONTAINS(o.err, "/nonexistent/fmnist");
    /* a data directory whose training images are cut short */
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/data", herd_test_tmpdir());
    mkdir(dir, 0700);
    const char *names[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                           "t10k-labels-idx1-ubyte"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "wb");
        ASSERT_TRUE(f != NULL);
        bool images = i % 2 == 0;
        unsigned char hdr[16] = {0, 0, 8, images ? 3 : 1, 0, 0, 0, 100, 0, 0, 0, 28, 0, 0, 0, 28};
        fwrite(hdr, 1, images ? 16 : 8, f);
        for (int k = 0; k < (images ? 50 * 784 : 100); k++) /* images: only 50 of 100 */
            fputc(k % 10, f);
        fclose(f);
    }
    HERD_TEST_RUN(&o, "train", "--data", dir);
    ASSERT_EQ_INT(o.code, 1);
    ASSERT_STR_CONTAINS(o.err, "train-images-idx3-ubyte");
    ASSERT_TRUE(strstr(o.err, "Segmentation") == NULL);
}

/* The main job on a slice of the real data: progress lines on stderr, the
 * JSON summary as the last line of stdout, and a model that learned. */
static void test_train_fashion_slice(void)
{
    if (access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", R_OK) != 0)
        herd_test_fail(__FILE__, __LINE__, "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)");
    herd_test_cmd o;
    char log[512];
    snprintf(log, sizeof log, "%s/log.jsonl", herd_test_tmpdir());
    herd_test_run(&o, 110, (const char *const[]){"train", "--model", "lenet", "--epochs", "2", "--train-limit", "4096",
                                                "--test-limit", "1000", "--json", "--log", log, NULL});
    if (o.code != 0)
        herd_test_fail(__FILE__, __LINE__, "exit %d: %s", o.code, o.err);
    ASSERT_STR_CONTAINS(o.err, "epoch 2/2");
    char *last = strrchr(o.out, '{');
    ASSERT_TRUE(last != NULL);
    ASSERT_STR_CONTAINS(last, "\"algo\":\"sgd\"");
    ASSERT_STR_CONTAINS(last, "\"engine\":\"threads\"");
    ASSERT_STR_CONTAINS(last, "\"workers\":1");
    ASSERT_STR_CONTAINS(last, "\"epochs\":2");
    ASSERT_STR_CONTAINS(last, "\"bytes_sent\":0");
    const char *acc = strstr(last, "\"test_acc\":");
    ASSERT_TRUE(acc != NULL);
    double a = atof(acc + strlen("\"test_acc\":"));
    ASSERT_TRUE(a > 0.7 && a <= 1.0);
    ASSERT_TRUE(strstr(last, "\"wall_s\":") && strstr(last, "\"train_img_per_s\":") && strstr(last, "\"test_loss\":"));
    ASSERT_TRUE(access(log, R_OK) == 0);
}

const herd_test herd_tests_cli[] = {
    {"cli_usage_errors", test_usage_errors, 60},
    {"cli_one_parser", test_one_parser, 60},
    {"cli_missing_and_corrupt_data", test_missing_and_corrupt_data, 60},
    {"cli_train_fashion_slice", test_train_fashion_slice, 120},
    HERD_TEST_END,
};
