/* Tests of src/core: status table and the random number generator. */
#include <math.h>
#include "harness.h"
#include "json_valid.h"
#include "core/json.h"
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

/* What herd__json_printf writes for fmt and one double v. */
static const char *json_of(char *buf, size_t cap, const char *fmt, double v)
{
    FILE *f = fmemopen(buf, cap, "w");
    ASSERT_TRUE(f != NULL);
    ASSERT_EQ_INT(herd__json_printf(f, fmt, v), 0);
    ASSERT_EQ_INT(fclose(f), 0);
    return buf;
}

/* Every non-finite number printf can write becomes null, wherever a value
 * stands; the same letters inside a string, or in a key, stay. */
static void test_json_nonfinite_is_null(void)
{
    char b[256], why[128];
    static const double bad[] = {NAN, -NAN, INFINITY, -INFINITY};
    static const char *const fmts[] = {"{\"x\":%g}", "{\"x\":%.6f,\"y\":1}", "{\"x\":[1,%.17g]}", "{\"x\": %G }",
                                       "[%e]", "{\"a\":\"nan\",\"b\":%f}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (size_t k = 0; k < sizeof fmts / sizeof fmts[0]; k++) {
            json_of(b, sizeof b, fmts[k], bad[i]);
            if (!herd_test_json_valid(b, strlen(b), why, sizeof why) || !strstr(b, "null"))
                herd_test_fail(__FILE__, __LINE__, "format %s of %g gave %s (%s)", fmts[k], bad[i], b, why);
        }
    ASSERT_TRUE(!strcmp(json_of(b, sizeof b, "{\"nan\":\"-inf, nan\",\"inf\":%g}", 1.5), "{\"nan\":\"-inf, nan\",\"inf\":1.5}"));
    ASSERT_TRUE(!strcmp(json_of(b, sizeof b, "{\"s\":\"a\\\"b:nan\",\"v\":%g}", NAN), "{\"s\":\"a\\\"b:nan\",\"v\":null}"));
    ASSERT_TRUE(!strcmp(json_of(b, sizeof b, "{\"v\":%.3f}", 0.25), "{\"v\":0.250}"));
    /* quoting: what a user or a message brings */
    herd__json_quote(b, sizeof b, "a \"q\" \\ \n\t\x01 z");
    ASSERT_TRUE(!strcmp(b, "\"a \\\"q\\\" \\\\ \\n\\t\\u0001 z\""));
    ASSERT_TRUE(herd_test_json_valid(b, strlen(b), why, sizeof why));
    herd__json_quote(b, 8, "\"\"\"\"\"\"");
    ASSERT_TRUE(herd_test_json_valid(b, strlen(b), why, sizeof why) && strlen(b) < 8);
    herd__json_quote(b, sizeof b, NULL);
    ASSERT_TRUE(!strcmp(b, "null"));
    /* bytes that are not UTF-8 (a path's) become U+FFFD, one each; UTF-8 stays as it is */
    static const struct {
        const char *in, *out;
    } utf8[] = {
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\""},
        {"a\xff" "b", "\"a\\ufffdb\""},                         /* never in UTF-8 */
        {"\x80x", "\"\\ufffdx\""},                           /* a stray continuation byte */
        {"\xc0\xaf", "\"\\ufffd\\ufffd\""},                 /* an overlong '/' */
        {"\xe2\x82", "\"\\ufffd\\ufffd\""},                 /* cut short */
        {"\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\""},     /* a surrogate */
        {"\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\""}, /* past U+10FFFF */
    };
    for (size_t i = 0; i < sizeof utf8 / sizeof utf8[0]; i++) {
        herd__json_quote(b, sizeof b, utf8[i].in);
        if (strcmp(b, utf8[i].out))
            herd_test_fail(__FILE__, __LINE__, "quoting case %zu gave %s, want %s", i, b, utf8[i].out);
    }
    /* the validator itself refuses what a strict parser refuses */
    static const char *const refused[] = {"{\"x\":nan}", "{\"x\":-nan}", "{\"x\":inf}", "{\"x\":1,}", "[01]",
                                          "{\"x\":1.}", "{x:1}", "\"a\tb\"", "{\"x\":1}{", "", "{\"x\":\"\\q\"}"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (herd_test_json_valid(refused[i], strlen(refused[i]), why, sizeof why))
            herd_test_fail(__FILE__, __LINE__, "the validator took %s", refused[i]);
    /* a write that fails is reported */
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        setvbuf(full, NULL, _IONBF, 0);
        ASSERT_EQ_INT(herd__json_printf(full, "{\"x\":%g}", 1.0), -1);
        fclose(full);
    }
}

const herd_test herd_tests_core[] = {
    {"core_json_nonfinite_is_null", test_json_nonfinite_is_null, 10},
    {"core_status_names", test_status_names, 10},
    {"core_rng_streams_deterministic", test_rng_streams_deterministic, 10},
    {"core_rng_moments", test_rng_moments, 10},
    {"core_rng_shuffle_is_permutation", test_rng_shuffle_is_permutation, 10},
    HERD_TEST_END,
};
