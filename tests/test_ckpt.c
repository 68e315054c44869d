/* Checkpoints: CRC32C against its published vectors and the bitwise
 * definition; the file format round trip; a writer killed at hundreds of
 * random points never leaves a torn checkpoint; thousands of corruptions all
 * refused with a specific error; no path out of the directory; and a run
 * stopped and resumed ends bit-for-bit where an uninterrupted one does. */
#include "fixtures.h"
#include "harness.h"
#include "herd/herd_algo.h"
#include "herd/herd_ckpt.h"
#include "herd/herd_comm.h"
#include "herd/herd_data.h"
#include "herd/herd_nn.h"
#include "herd/herd_rng.h"
#include "herd/herd_run.h"
#include "core/clock.h"
#include "run/ckpt_run.h"
#include "run/run.h"
#include "algo/state_io.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------- */

static void tmp_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", herd_test_tmpdir(), name);
}

static void make_dir(char *out, size_t cap, const char *name)
{
    tmp_path(out, cap, name);
    ASSERT_TRUE(mkdir(out, 0700) == 0 || errno == EEXIST);
}

static unsigned char *read_whole(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        herd_test_fail(__FILE__, __LINE__, "cannot open %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(n > 0 ? (size_t)n : 1);
    ASSERT_TRUE(b != NULL);
    ASSERT_EQ_INT(fread(b, 1, (size_t)n, f), n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void write_whole(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    ASSERT_EQ_INT(fwrite(b, 1, n, f), n);
    ASSERT_EQ_INT(fclose(f), 0);
}

static herd_ckpt_info test_info(uint64_t step, uint32_t workers)
{
    herd_ckpt_info in = {.step = step, .epoch = step / 10, .nparams = 100, .seed = 7, .steps_per_epoch = 10,
                         .workers = workers, .batch = 32};
    snprintf(in.model, sizeof in.model, "mlp");
    snprintf(in.algo, sizeof in.algo, "allreduce");
    return in;
}

/* The payload of step s, word i: what the writer of the kill test writes. */
static uint32_t word(uint64_t s, size_t i) { return (uint32_t)(s * 2654435761u) ^ (uint32_t)(i * 40503u); }

/* Writes a two-worker checkpoint of step s with `words` payload words per
 * worker and a small cursor section each. */
static herd_status write_test_ckpt(const char *dir, uint64_t s, size_t words, size_t keep, uint32_t *buf,
                                   herd_err *err)
{
    for (size_t i = 0; i < 2 * words; i++)
        buf[i] = word(s, i);
    uint64_t cur[2] = {s, s * 3};
    herd_ckpt_section secs[4] = {
        {"params", 0, buf, words * 4},
        {"cursor", 0, cur, sizeof cur},
        {"params", 1, buf + words, words * 4},
        {"cursor", 1, cur, sizeof cur},
    };
    herd_ckpt_info in = test_info(s, 2);
    return herd_ckpt_write(dir, &in, secs, 4, keep, err);
}

/* A checkpoint of step s as write_test_ckpt makes it, checked word by word. */
static void check_test_ckpt(const herd_ckpt *ck, uint64_t s, size_t words)
{
    ASSERT_EQ_INT(herd_ckpt_get_info(ck)->step, s);
    herd_ckpt_section sec;
    for (uint32_t r = 0; r < 2; r++) {
        ASSERT_OK(herd_ckpt_find(ck, "params", r, &sec, NULL));
        ASSERT_EQ_INT(sec.bytes, words * 4);
        const unsigned char *p = sec.data;
        for (size_t i = 0; i < words; i++) {
            uint32_t v;
            memcpy(&v, p + 4 * i, 4);
            if (v != word(s, r * words + i))
                herd_test_fail(__FILE__, __LINE__, "step %llu worker %u word %zu: %08x, want %08x",
                               (unsigned long long)s, r, i, v, word(s, r * words + i));
        }
    }
}

/* ---- CRC32C --------------------------------------------------------------- */

static uint32_t crc32c_bitwise(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

static void test_crc32c(void)
{
    ASSERT_EQ_INT(herd_crc32c(0, "123456789", 9), 0xe3069283u);
    ASSERT_EQ_INT(herd_crc32c(0, "", 0), 0);
    unsigned char b[64];
    memset(b, 0, 32); /* RFC 3720 B.4 */
    ASSERT_EQ_INT(herd_crc32c(0, b, 32), 0x8a9136aau);
    memset(b, 0xff, 32);
    ASSERT_EQ_INT(herd_crc32c(0, b, 32), 0x62a8ab43u);
    for (int i = 0; i < 32; i++)
        b[i] = (unsigned char)i;
    ASSERT_EQ_INT(herd_crc32c(0, b, 32), 0x46dd794eu);
    for (int i = 0; i < 32; i++)
        b[i] = (unsigned char)(31 - i);
    ASSERT_EQ_INT(herd_crc32c(0, b, 32), 0x113fdb5cu);
    /* the slice-by-8 tables against the definition: every alignment and tail */
    herd_rng r;
    herd_rng_seed(&r, 3, 0);
    unsigned char big[1000];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (unsigned char)herd_rng_next(&r);
    for (int t = 0; t < 2000; t++) {
        size_t off = (size_t)herd_rng_below(&r, 16), n = (size_t)herd_rng_below(&r, sizeof big - 16);
        uint32_t want = crc32c_bitwise(big + off, n);
        ASSERT_EQ_INT(herd_crc32c(0, big + off, n), want);
        size_t cut = n ? (size_t)herd_rng_below(&r, n) : 0; /* continued over two pieces */
        ASSERT_EQ_INT(herd_crc32c(herd_crc32c(0, big + off, cut), big + off + cut, n - cut), want);
    }
}

/* ---- the format ----------------------------------------------------------- */

static void test_roundtrip_and_keep(void)
{
    char dir[512], p[600];
    make_dir(dir, sizeof dir, "ck");
    uint32_t buf[2 * 300];
    herd_err err = {0};
    for (uint64_t s = 1; s <= 6; s++)
        if (write_test_ckpt(dir, s * 10, 300, 3, buf, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "%s", err.msg);
    uint64_t steps[8];
    size_t n;
    ASSERT_OK(herd_ckpt_list(dir, steps, 8, &n, NULL));
    ASSERT_EQ_INT(n, 3); /* the newest three, newest first */
    ASSERT_EQ_INT(steps[0], 60);
    ASSERT_EQ_INT(steps[1], 50);
    ASSERT_EQ_INT(steps[2], 40);
    herd_ckpt *ck;
    ASSERT_OK(herd_ckpt_read(dir, "ckpt-50.herd", &ck, &err));
    const herd_ckpt_info *in = herd_ckpt_get_info(ck);
    herd_ckpt_info want = test_info(50, 2);
    ASSERT_TRUE(in->epoch == 5 && in->nparams == 100 && in->seed == 7 && in->steps_per_epoch == 10);
    ASSERT_TRUE(in->workers == 2 && in->batch == 32);
    ASSERT_TRUE(!strcmp(in->model, want.model) && !strcmp(in->algo, want.algo));
    ASSERT_EQ_INT(herd_ckpt_nsections(ck), 4);
    ASSERT_TRUE(!strcmp(herd_ckpt_section_at(ck, 1).name, "cursor"));
    check_test_ckpt(ck, 50, 300);
    uint64_t cur[2];
    ASSERT_OK(herd_ckpt_copy(ck, "cursor", 1, cur, sizeof cur, NULL));
    ASSERT_TRUE(cur[0] == 50 && cur[1] == 150);
    ASSERT_EQ_INT(herd_ckpt_copy(ck, "cursor", 1, cur, 8, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "holds 16 bytes, this run needs 8");
    ASSERT_EQ_INT(herd_ckpt_copy(ck, "momentum", 0, cur, 8, &err), HERD_ENOTFOUND);
    ASSERT_STR_CONTAINS(err.msg, "no section 'momentum' for worker 0");
    herd_ckpt_free(ck);
    /* a stale temporary file of a killed writer is ignored, then removed */
    tmp_path(p, sizeof p, "ck/.ckpt-70.tmp");
    write_whole(p, "torn", 4);
    ASSERT_OK(herd_ckpt_latest(dir, &ck, NULL, 0, NULL, NULL));
    ASSERT_EQ_INT(herd_ckpt_get_info(ck)->step, 60);
    herd_ckpt_free(ck);
    ASSERT_OK(write_test_ckpt(dir, 80, 300, 3, buf, NULL));
    ASSERT_TRUE(access(p, F_OK) != 0);
    /* later-numbered files (a run resumed from an earlier checkpoint) never
     * push out the one just written, and are left alone */
    ASSERT_OK(write_test_ckpt(dir, 200, 300, 3, buf, NULL));
    ASSERT_OK(write_test_ckpt(dir, 100, 300, 1, buf, NULL));
    ASSERT_OK(herd_ckpt_list(dir, steps, 8, &n, NULL));
    ASSERT_EQ_INT(n, 2);
    ASSERT_TRUE(steps[0] == 200 && steps[1] == 100);
    /* writer argument checks name the problem */
    herd_ckpt_info bad = test_info(1, 2);
    herd_ckpt_section s = {"Params", 0, buf, 4};
    ASSERT_EQ_INT(herd_ckpt_write(dir, &bad, &s, 1, 3, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "'Params'");
    s = (herd_ckpt_section){"params", 2, buf, 4};
    ASSERT_EQ_INT(herd_ckpt_write(dir, &bad, &s, 1, 3, &err), HERD_EINVAL);
    ASSERT_EQ_INT(herd_ckpt_write(dir, &bad, &s, 0, 0, &err), HERD_EINVAL);
    tmp_path(p, sizeof p, "no-such-dir");
    ASSERT_EQ_INT(herd_ckpt_write(p, &bad, NULL, 0, 3, &err), HERD_ENOTFOUND);
    ASSERT_STR_CONTAINS(err.msg, "no-such-dir");
}

/* ---- a writer killed at random points ------------------------------------ */

enum { KILL_WORDS = 16384 }; /* 128 KiB per checkpoint */

static void test_kill_writer(void)
{
    char dir[512], tmp[600];
    make_dir(dir, sizeof dir, "kill");
    uint32_t *buf = malloc(2 * KILL_WORDS * sizeof *buf);
    ASSERT_TRUE(buf != NULL);
    herd_rng r;
    herd_rng_seed(&r, 11, 0);
    uint64_t next = 1, newest = 0;
    size_t kills = 0, mid_write = 0, checked = 0;
    /* The kill window: 0..4 ms, or twice the time a forked writer takes to
     * start and land one checkpoint if that is longer (under a sanitizer a
     * fresh child is slow enough that 4 ms would never see a write end). */
    char cal[512];
    make_dir(cal, sizeof cal, "kill-calibrate");
    double tc = herd__now();
    fflush(NULL);
    pid_t cpid = fork();
    ASSERT_TRUE(cpid >= 0);
    if (cpid == 0)
        _exit(write_test_ckpt(cal, 1, KILL_WORDS, 3, buf, NULL) == HERD_OK ? 0 : 3);
    int cstatus;
    ASSERT_EQ_INT(waitpid(cpid, &cstatus, 0), cpid);
    ASSERT_TRUE(WIFEXITED(cstatus) && WEXITSTATUS(cstatus) == 0);
    uint64_t window_us = (uint64_t)(2e6 * (herd__now() - tc));
    if (window_us < 4000)
        window_us = 4000;
    double t0 = herd__now();
    /* up to 1000 kills, within 20 s whatever the machine's load */
    while (kills < 1000 && herd__now() - t0 < 20.0) {
        fflush(NULL);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
            for (uint64_t s = next;; s++) {
                herd_err e = {0};
                if (write_test_ckpt(dir, s, KILL_WORDS, 3, buf, &e) != HERD_OK) {
                    fprintf(stderr, "writer: %s\n", e.msg);
                    _exit(3);
                }
            }
        }
        uint64_t us = herd_rng_below(&r, window_us);
        struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        ASSERT_EQ_INT(waitpid(pid, &status, 0), pid);
        if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL))
            herd_test_fail(__FILE__, __LINE__, "the writer ended on its own (status %d)", status);
        kills++;
        /* a temporary file left behind: killed between create and rename */
        uint64_t steps[16];
        size_t n;
        ASSERT_OK(herd_ckpt_list(dir, steps, 16, &n, NULL));
        snprintf(tmp, sizeof tmp, "%s/.ckpt-%llu.tmp", dir, (unsigned long long)(n ? steps[0] + 1 : next));
        mid_write += access(tmp, F_OK) == 0;
        /* every checkpoint in the directory is whole, and none went missing */
        for (size_t i = 0; i < n; i++) {
            char name[64];
            snprintf(name, sizeof name, "ckpt-%llu.herd", (unsigned long long)steps[i]);
            herd_ckpt *ck;
            herd_err e = {0};
            if (herd_ckpt_read(dir, name, &ck, &e) != HERD_OK)
                herd_test_fail(__FILE__, __LINE__, "after kill %zu: %s", kills, e.msg);
            check_test_ckpt(ck, steps[i], KILL_WORDS);
            herd_ckpt_free(ck);
            checked++;
        }
        if (n) {
            ASSERT_TRUE(steps[0] >= newest);
            newest = steps[0];
            next = newest + 1;
        }
    }
    fprintf(stderr, "  kill test: %zu kills in %.1f s, %zu inside a write, %zu checkpoints verified, newest step %llu\n",
            kills, herd__now() - t0, mid_write, checked, (unsigned long long)newest);
    ASSERT_TRUE(kills >= 50);
    ASSERT_TRUE(newest > 0);
    free(buf);
}

/* ---- corruption ----------------------------------------------------------- */

static void expect_refused(const unsigned char *b, size_t n, const char *what, const char *needle)
{
    herd_ckpt *ck = NULL;
    herd_err err = {0};
    herd_status st = herd_ckpt_parse(b, n, "mut.herd", &ck, &err);
    if (st == HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "a checkpoint with %s was accepted", what);
    ASSERT_TRUE(ck == NULL);
    if (st != HERD_ECORRUPT && st != HERD_EUNSUPPORTED)
        herd_test_fail(__FILE__, __LINE__, "%s: status %d (%s)", what, st, err.msg);
    ASSERT_STR_CONTAINS(err.msg, "checkpoint mut.herd: ");
    if (needle && !strstr(err.msg, needle))
        herd_test_fail(__FILE__, __LINE__, "%s: message \"%s\" lacks \"%s\"", what, err.msg, needle);
}

static void put32le(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64le(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void fix_header_crc(unsigned char *b, size_t hbytes)
{
    uint32_t c = herd_crc32c(herd_crc32c(0, b, 124), b + 128, hbytes - 128);
    put32le(b + 124, c);
}

static void test_corruptions(void)
{
    char dir[512], path[600];
    make_dir(dir, sizeof dir, "corrupt");
    uint32_t buf[2 * 200];
    ASSERT_OK(write_test_ckpt(dir, 42, 200, 3, buf, NULL));
    snprintf(path, sizeof path, "%s/ckpt-42.herd", dir);
    size_t n;
    unsigned char *good = read_whole(path, &n);
    size_t hbytes = 128 + 4 * 48;
    herd_ckpt *ck;
    ASSERT_OK(herd_ckpt_parse(good, n, "good", &ck, NULL));
    check_test_ckpt(ck, 42, 200);
    herd_ckpt_free(ck);
    unsigned char *m = malloc(n + 64);
    ASSERT_TRUE(m != NULL);
    herd_rng r;
    herd_rng_seed(&r, 5, 0);
    size_t total = 0;
    /* 1 to 3 flipped bits anywhere: every byte is under a checksum */
    for (int t = 0; t < 3000; t++, total++) {
        memcpy(m, good, n);
        int k = 1 + (int)herd_rng_below(&r, 3);
        size_t at[3];
        for (int i = 0; i < k; i++) {
            at[i] = (size_t)herd_rng_below(&r, n);
            m[at[i]] ^= (unsigned char)(1u << herd_rng_below(&r, 8));
        }
        if (!memcmp(m, good, n)) /* two flips undid each other */
            continue;
        expect_refused(m, n, "flipped bits", NULL);
    }
    /* every truncation, and trailing bytes */
    for (size_t len = 0; len < n; len++, total++)
        expect_refused(good, len, "a truncation", "truncated");
    for (size_t extra = 1; extra <= 64; extra++, total++) {
        memcpy(m, good, n);
        memset(m + n, 0, extra);
        expect_refused(m, n + extra, "trailing bytes", "trailing");
    }
    /* bogus header and table values under a recomputed header checksum:
     * the structural checks, not the checksum, must catch them */
    static const char *const needles[] = {"version", "header", " bytes", "header", "reserved", "worker",
                                          "name", "invalid name", "worker", "claims", "claims", "checksum"};
    for (int t = 0; t < 3000; t++, total++) {
        memcpy(m, good, n);
        int field = (int)herd_rng_below(&r, 12);
        size_t e = 128 + 48 * (size_t)herd_rng_below(&r, 4); /* a table entry */
        uint64_t v = herd_rng_next(&r) >> herd_rng_below(&r, 64);
        size_t len = n;
        switch (field) {
        case 0: put32le(m + 8, (uint32_t)(v == 1 ? 2 : v)); break;                     /* version */
        case 1: put32le(m + 12, (uint32_t)(v == hbytes ? v + 48 : v)); break;          /* header_bytes */
        case 2: put64le(m + 16, v == n ? v + 1 : v); break;                              /* file_bytes */
        case 3: put32le(m + 72, (uint32_t)(v == 4 ? 5 : v)); break;                     /* nsections */
        case 4: put32le(m + 76, (uint32_t)(v ? v : 1)); break;                          /* reserved */
        case 5: put32le(m + 64, (uint32_t)herd_rng_below(&r, 2)); break;                /* workers 0 or 1 */
        case 6: m[80 + herd_rng_below(&r, 20)] = (unsigned char)(1 + herd_rng_below(&r, 31)); break; /* model */
        case 7: m[e] = (unsigned char)("A.-/ \x01\xff"[herd_rng_below(&r, 7)]); break; /* section name */
        case 8: put32le(m + e + 24, (uint32_t)(v == (e - 128) / 96 ? v + 1 : v)); break; /* worker: a twin or out of range */
        case 9: put64le(m + e + 32, v ^ (1 + herd_rng_below(&r, 1u << 20))); break;    /* offset */
        case 10: put64le(m + e + 40, v ^ (1 + herd_rng_below(&r, 1u << 20))); break;   /* bytes */
        case 11: m[e + 28] ^= (unsigned char)(1 + herd_rng_below(&r, 255)); break;      /* section crc */
        }
        fix_header_crc(m, hbytes);
        if (field == 1 || field == 3) {
            /* header_bytes or nsections alone no longer agree */
            expect_refused(m, len, "a bogus table size", "header");
            continue;
        }
        if (field == 8 || field == 9 || field == 10) {
            expect_refused(m, len, "a bogus table entry", NULL);
            continue;
        }
        expect_refused(m, len, "a bogus header value", needles[field]);
    }
    /* foreign files: random bytes, another format's magic */
    for (int t = 0; t < 500; t++, total++) {
        size_t len = (size_t)herd_rng_below(&r, n + 1);
        for (size_t i = 0; i < len; i++)
            m[i] = (unsigned char)herd_rng_next(&r);
        if (t % 2 && len >= 8)
            memcpy(m, "HERDCKPT", 8);
        expect_refused(m, len, "random bytes", NULL);
    }
    memcpy(m, good, n);
    memcpy(m, "\x89PNG\r\n\x1a\n", 8);
    expect_refused(m, n, "a PNG magic", "not a herd checkpoint");
    memcpy(m, good, n);
    put32le(m + 8, 2);
    fix_header_crc(m, hbytes);
    herd_err err = {0};
    ASSERT_EQ_INT(herd_ckpt_parse(m, n, "v2", &ck, &err), HERD_EUNSUPPORTED);
    ASSERT_STR_CONTAINS(err.msg, "format version 2, this herd reads version 1");
    fprintf(stderr, "  corruption test: %zu corrupted checkpoints, all refused\n", total);
    ASSERT_TRUE(total >= 5000);
    free(m);
    free(good);
}

/* ---- paths ---------------------------------------------------------------- */

static void test_paths(void)
{
    char dir[512], outside[512], p[600], q[600];
    make_dir(dir, sizeof dir, "in");
    make_dir(outside, sizeof outside, "out");
    uint32_t buf[2 * 50];
    ASSERT_OK(write_test_ckpt(dir, 5, 50, 3, buf, NULL));
    ASSERT_OK(write_test_ckpt(outside, 99, 50, 3, buf, NULL));
    herd_ckpt *ck = NULL;
    herd_err err = {0};
    static const char *const bad[] = {"../out/ckpt-99.herd", "..", ".", "", "sub/ckpt-5.herd", "/etc/passwd"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ASSERT_EQ_INT(herd_ckpt_read(dir, bad[i], &ck, &err), HERD_EINVAL);
        ASSERT_STR_CONTAINS(err.msg, "not a plain file name");
        ASSERT_TRUE(ck == NULL);
    }
    /* a link named like a checkpoint is refused, never followed */
    snprintf(p, sizeof p, "%s/ckpt-99.herd", outside);
    snprintf(q, sizeof q, "%s/ckpt-99.herd", dir);
    ASSERT_EQ_INT(symlink(p, q), 0);
    ASSERT_EQ_INT(herd_ckpt_read(dir, "ckpt-99.herd", &ck, &err), HERD_EIO);
    ASSERT_STR_CONTAINS(err.msg, "symbolic link");
    char warn[1024];
    size_t skipped = 0;
    ASSERT_OK(herd_ckpt_latest(dir, &ck, warn, sizeof warn, &skipped, &err));
    ASSERT_EQ_INT(herd_ckpt_get_info(ck)->step, 5);
    ASSERT_EQ_INT(skipped, 1);
    ASSERT_STR_CONTAINS(warn, "ckpt-99.herd: is a symbolic link");
    herd_ckpt_free(ck);
    /* a directory named like a checkpoint */
    snprintf(q, sizeof q, "%s/ckpt-100.herd", dir);
    ASSERT_EQ_INT(mkdir(q, 0700), 0);
    ASSERT_EQ_INT(herd_ckpt_read(dir, "ckpt-100.herd", &ck, &err), HERD_EIO);
    ASSERT_STR_CONTAINS(err.msg, "not a regular file");
    /* the writer does not write through a link planted at its temporary name */
    snprintf(p, sizeof p, "%s/victim", outside);
    write_whole(p, "keep", 4);
    snprintf(q, sizeof q, "%s/.ckpt-6.tmp", dir);
    ASSERT_EQ_INT(symlink(p, q), 0);
    ASSERT_OK(write_test_ckpt(dir, 6, 50, 3, buf, &err));
    size_t vn;
    unsigned char *v = read_whole(p, &vn);
    ASSERT_TRUE(vn == 4 && !memcmp(v, "keep", 4));
    free(v);
    ASSERT_EQ_INT(herd_ckpt_read("/nonexistent-herd-dir", "ckpt-1.herd", &ck, &err), HERD_ENOTFOUND);
}

/* The newest checkpoint corrupt: the one before it, with a warning. */
static void test_latest_fallback(void)
{
    char dir[512], p[600];
    make_dir(dir, sizeof dir, "fb");
    herd_ckpt *ck = NULL;
    herd_err err = {0};
    ASSERT_EQ_INT(herd_ckpt_latest(dir, &ck, NULL, 0, NULL, &err), HERD_ENOTFOUND);
    ASSERT_STR_CONTAINS(err.msg, "holds no checkpoint");
    uint32_t buf[2 * 100];
    for (uint64_t s = 1; s <= 3; s++)
        ASSERT_OK(write_test_ckpt(dir, s, 100, 5, buf, NULL));
    snprintf(p, sizeof p, "%s/ckpt-3.herd", dir);
    size_t n;
    unsigned char *b = read_whole(p, &n);
    b[n - 5] ^= 0x10;
    write_whole(p, b, n);
    snprintf(p, sizeof p, "%s/ckpt-2.herd", dir);
    write_whole(p, b, n / 2);
    char warn[2048];
    size_t skipped = 0;
    ASSERT_OK(herd_ckpt_latest(dir, &ck, warn, sizeof warn, &skipped, &err));
    ASSERT_EQ_INT(herd_ckpt_get_info(ck)->step, 1);
    herd_ckpt_free(ck);
    ASSERT_EQ_INT(skipped, 2);
    ASSERT_STR_CONTAINS(warn, "ckpt-3.herd: section 'cursor' of worker 1: checksum mismatch");
    ASSERT_STR_CONTAINS(warn, "ckpt-2.herd: truncated");
    snprintf(p, sizeof p, "%s/ckpt-1.herd", dir);
    write_whole(p, "HERDCKPT", 8);
    ASSERT_EQ_INT(herd_ckpt_latest(dir, &ck, NULL, 0, &skipped, &err), HERD_ECORRUPT);
    ASSERT_STR_CONTAINS(err.msg, "none of its 3 checkpoint(s) is valid; the newest: ");
    ASSERT_STR_CONTAINS(err.msg, "ckpt-3.herd");
    free(b);
}

/* ---- training: stop, resume, compare -------------------------------------- */

static herd__train_config run_config(const char *model, const char *algo, size_t workers, const char *dir)
{
    herd__train_config c = herd_test_config(model, algo, workers);
    c.epochs = 3;
    c.train_limit = 512;
    c.test_limit = 256;
    c.checkpoint_dir = dir;
    c.checkpoint_every = 5;
    return c;
}

static void same_file(const char *a, const char *b)
{
    size_t na, nb;
    unsigned char *x = read_whole(a, &na), *y = read_whole(b, &nb);
    herd_ckpt *ca = NULL, *cb = NULL;
    /* name the first section that differs, when both files parse */
    if ((na != nb || memcmp(x, y, na)) && herd_ckpt_parse(x, na, a, &ca, NULL) == HERD_OK &&
        herd_ckpt_parse(y, nb, b, &cb, NULL) == HERD_OK && herd_ckpt_nsections(ca) == herd_ckpt_nsections(cb))
        for (size_t i = 0; i < herd_ckpt_nsections(ca); i++) {
            herd_ckpt_section sa = herd_ckpt_section_at(ca, i), sb = herd_ckpt_section_at(cb, i);
            if (sa.bytes != sb.bytes || memcmp(sa.data, sb.data, sa.bytes))
                herd_test_fail(__FILE__, __LINE__, "%s and %s differ in section '%s' of worker %u", a, b, sa.name,
                               sa.worker);
        }
    herd_ckpt_free(ca), herd_ckpt_free(cb);
    ASSERT_EQ_INT(na, nb);
    for (size_t i = 0; i < na; i++)
        if (x[i] != y[i])
            herd_test_fail(__FILE__, __LINE__, "%s and %s differ at byte %zu of %zu", a, b, i, na);
    free(x), free(y);
}

/* Runs c (total steps) straight through, and again stopped after `stop`
 * steps and resumed: the final checkpoints (every worker's weights,
 * momentum, buffers, cursor and algorithm state) are the same bytes and the
 * results the same numbers. Under ThreadSanitizer the runs end with the
 * epoch after the stop's: the same stop and resume, across an epoch's end,
 * with fewer steps after them (mlp's 3 epochs took most of the TSan run's
 * ckpt_resume_layerwise, 148 s). */
static void resume_matches_cfg(herd__train_config c, size_t stop)
{
    char da[512], db[512], fa[600], fb[600], name[64];
    /* directories of their own for each call of a test */
    unsigned k = 0;
    for (;; k++) {
        snprintf(name, sizeof name, "straight%u", k);
        tmp_path(da, sizeof da, name);
        if (access(da, F_OK) != 0)
            break;
    }
    ASSERT_EQ_INT(mkdir(da, 0700), 0);
    snprintf(name, sizeof name, "stopped%u", k);
    make_dir(db, sizeof db, name);
    c.checkpoint_dir = da;
    size_t per_epoch = c.train_limit / (c.batch * c.workers);
    if (HERD_TEST_TSAN && c.epochs > stop / per_epoch + 2)
        c.epochs = stop / per_epoch + 2;
    size_t total = c.epochs * per_epoch;
    herd_train_result a, b;
    herd_test_train_ok(&c, &a);
    ASSERT_EQ_INT(a.steps, total);
    c.checkpoint_dir = db;
    c.max_steps = stop;
    herd_test_train_ok(&c, &b);
    ASSERT_EQ_INT(b.steps, stop);
    c.max_steps = 0;
    c.resume = true;
    herd_test_train_ok(&c, &b);
    ASSERT_EQ_INT(b.steps, total);
    snprintf(fa, sizeof fa, "%s/ckpt-%zu.herd", da, total);
    snprintf(fb, sizeof fb, "%s/ckpt-%zu.herd", db, total);
    same_file(fa, fb);
    ASSERT_TRUE(a.test_loss == b.test_loss);
    ASSERT_TRUE(a.test_acc == b.test_acc);
    ASSERT_TRUE(a.train_loss == b.train_loss);
    ASSERT_TRUE(a.replica_max_diff == b.replica_max_diff);
    ASSERT_EQ_INT(a.epochs, b.epochs);
}

static void resume_matches(const char *model, const char *algo, size_t workers, size_t epochs, size_t stop,
                           size_t train_limit, size_t batch)
{
    herd__train_config c = run_config(model, algo, workers, NULL);
    c.epochs = epochs, c.train_limit = train_limit, c.batch = batch;
    resume_matches_cfg(c, stop);
}

static void test_resume_sgd(void) { resume_matches("lenet", "sgd", 1, 3, 21, 512, 32); }
/* stopped mid-epoch (7 of 8 steps) and at an epoch's end (16) */
static void test_resume_allreduce_mid_epoch(void) { resume_matches("mlp", "allreduce", 2, 3, 7, 512, 32); }
static void test_resume_allreduce_epoch_end(void) { resume_matches("lenet", "allreduce", 2, 3, 16, 512, 32); }
/* batch-norm running statistics travel in the buffers section */
static void test_resume_resnet_buffers(void) { resume_matches("resnet20", "sgd", 1, 2, 5, 96, 16); }

/* allreduce's own state: the dynamic loss scale and its clean-step count
 * (16-bit wires), the error-feedback residual of every worker (csc). Each
 * is stopped mid-epoch (7 of 8 steps) or at an epoch's end (8, 16). */
static void test_resume_allreduce_fp16(void)
{
    herd__train_config c = run_config("lenet", "allreduce", 2, NULL);
    herd_test_set(&c, "comm-dtype", "fp16");
    resume_matches_cfg(c, 7);
    herd_test_set(&c, "comm-dtype", "bf16"), herd_test_set(&c, "overlap", "off");
    resume_matches_cfg(c, 16);
}

static void test_resume_allreduce_csc(void)
{
    herd__train_config c = run_config("lenet", "allreduce", 2, NULL);
    herd_test_set(&c, "csc-ratio", "0.3"), herd_test_set(&c, "csc-chunk-bytes", "256");
    resume_matches_cfg(c, 7);
    herd_test_set(&c, "comm-dtype", "fp16"); /* the residual and the loss scale together */
    resume_matches_cfg(c, 8);
}

/* dpsgd: a fixed ring stopped mid-epoch (5 steps an epoch on 3 workers), the
 * random topology (drawn from the seed and the step) at an epoch's end. */
static void test_resume_dpsgd(void)
{
    herd__train_config c = run_config("lenet", "dpsgd", 3, NULL);
    resume_matches_cfg(c, 7);
    c.workers = 4, herd_test_set(&c, "topology", "random");
    resume_matches_cfg(c, 4);
}

/* sgp: push-sum weights stay 1 on the exponential graph (stopped at an
 * epoch's end: 5 steps an epoch on 3 workers); on the random one in-degrees
 * vary and so do the weights a checkpoint must carry (stopped mid-epoch). */
static void test_resume_sgp(void)
{
    herd__train_config c = run_config("lenet", "sgp", 3, NULL);
    resume_matches_cfg(c, 5);
    c.workers = 4, herd_test_set(&c, "topology", "random");
    resume_matches_cfg(c, 9);
}

/* localsgd and postlocal keep no state of their own: stopped between two
 * averagings (step 13 with H = 3, in epoch 2, where postlocal's local steps
 * have begun and the replicas differ), resumed to the same bytes. */
static void test_resume_localsgd(void)
{
    const char *algos[] = {"localsgd", "postlocal"};
    for (size_t k = 0; k < 2; k++) {
        herd__train_config c = run_config("lenet", algos[k], 2, NULL);
        herd_test_set(&c, "local-steps", "3");
        resume_matches_cfg(c, 13);
    }
}

static void expect_train_error(const herd__train_config *c, herd_status want, const char *needle)
{
    herd_train_result r;
    herd_err err = {0};
    herd_status st = herd__train(c, &r, &err);
    if (st != want || !strstr(err.msg, needle))
        herd_test_fail(__FILE__, __LINE__, "status %d (want %d), message \"%s\" (want \"%s\")", st, want, err.msg,
                       needle);
}

/* lars (momentum; allreduce, stopped mid-epoch) and lamb (Adam's moments
 * and each tensor's step count, the bias correction's t; sgd, and elastic
 * averaging's local steps): the optimizer's record and moments come back,
 * the resume is bit for bit. Resuming with another optimizer is refused. */
static void test_resume_layerwise(void)
{
    /* Under ThreadSanitizer lenet where mlp: the same optimizer state and
     * exchanges on 15 thousand parameters, not 1.2 million (mlp's steps
     * took most of the TSan run's 90 s here) */
    const char *mlp = HERD_TEST_TSAN ? "lenet" : "mlp";
    herd__train_config c = run_config("lenet", "allreduce", 2, NULL);
    c.optim.optimizer = HERD_OPTIMIZER_LARS, c.optim.lr = 2.0f, c.optim.lars_eta = 0.01f;
    resume_matches_cfg(c, 7);
    c = run_config(mlp, "sgd", 1, NULL);
    c.optim.optimizer = HERD_OPTIMIZER_LAMB, c.optim.lr = 0.005f;
    resume_matches_cfg(c, 13);
    c = run_config(mlp, "easgd", 2, NULL);
    c.optim.optimizer = HERD_OPTIMIZER_LAMB, c.optim.lr = 0.005f;
    resume_matches_cfg(c, 10);
    char dir[512];
    make_dir(dir, sizeof dir, "other-optimizer");
    c = run_config(mlp, "sgd", 1, dir);
    c.epochs = 1, c.optim.optimizer = HERD_OPTIMIZER_LAMB;
    herd_train_result r;
    herd_test_train_ok(&c, &r);
    herd__train_config d = c;
    d.resume = true, d.epochs = 2, d.optim.optimizer = HERD_OPTIMIZER_SGD;
    expect_train_error(&d, HERD_EINVAL, "written with --optimizer lamb; this run has --optimizer sgd");
    /* lars has its own default --lr: both named */
    d.optim.optimizer = HERD_OPTIMIZER_LARS;
    expect_train_error(&d, HERD_EINVAL, "written with --lr 0.05, --optimizer lamb; this run has --lr 0.5, --optimizer lars");
    make_dir(dir, sizeof dir, "sgd-then-lars");
    d = c, d.checkpoint_dir = dir, d.optim.optimizer = HERD_OPTIMIZER_SGD;
    herd_test_train_ok(&d, &r);
    d.resume = true, d.epochs = 2, d.optim.optimizer = HERD_OPTIMIZER_LARS;
    expect_train_error(&d, HERD_EINVAL, "written with --lr 0.05, --optimizer sgd; this run has --lr 0.5, --optimizer lars");
}

/* Every section a worker can have at once (params, momentum, buffers, optim,
 * cursor, rng, algo: aeasgd's lamb on resnet20's batch norm) and the
 * run's three (the asynchronous run's claim, meta and the kept model, here
 * the center): 7 per worker and three more, all written (the
 * section table had room for 6 per worker and no claim; ameasgd on resnet20
 * overran it by one before there was an optim section). */
static void test_every_section(void)
{
    char dir[512];
    make_dir(dir, sizeof dir, "every-section");
    herd__train_config c = run_config("resnet20", "aeasgd", 2, dir);
    c.optim.optimizer = HERD_OPTIMIZER_LAMB, c.optim.lr = 0.005f;
    c.epochs = 1, c.train_limit = 64, c.test_limit = 32, c.batch = 16, c.checkpoint_every = 0;
    herd_train_result r;
    herd_test_train_ok(&c, &r);
    herd_ckpt *ck;
    ASSERT_OK(herd_ckpt_read(dir, "ckpt-2.herd", &ck, NULL));
    ASSERT_EQ_INT(herd_ckpt_nsections(ck), 2 * 7 + 6); /* and the run's: claim, meta, model, options, norm, description */
    herd_ckpt_free(ck);
}

static void test_resume_refusals(void)
{
    char dir[512], p[600];
    make_dir(dir, sizeof dir, "ref");
    herd__train_config c = run_config("mlp", "allreduce", 2, dir);
    c.epochs = 1;
    herd_train_result r;
    herd_test_train_ok(&c, &r); /* checkpoints at steps 5 and 8 */
    herd__train_config d = c;
    expect_train_error(&d, HERD_EINVAL, "already holds checkpoints (the newest: ckpt-8.herd); add --resume");
    d.resume = true;
    d.model = "lenet";
    expect_train_error(&d, HERD_EINVAL, "is of model 'mlp' with ");
    d = c, d.resume = true, d.workers = 4, d.train_limit = 1024;
    expect_train_error(&d, HERD_EINVAL, "written by 2 workers; this run has --workers 4");
    d = c, d.resume = true, d.seed = 9;
    expect_train_error(&d, HERD_EINVAL, "--seed 1; this run has --seed 9");
    d = c, d.resume = true, d.batch = 16;
    expect_train_error(&d, HERD_EINVAL, "--batch 32; this run has --batch 16");
    d = c, d.resume = true, d.train_limit = 1024;
    expect_train_error(&d, HERD_EINVAL, "steps per epoch");
    d = c, d.resume = true, d.optim.momentum = 0;
    expect_train_error(&d, HERD_EINVAL, "written with --momentum 0.9; this run has --momentum 0");
    d = c, d.resume = true, d.algo = "sgd", d.workers = 1, d.train_limit = 256;
    expect_train_error(&d, HERD_EINVAL, "written by --algo allreduce; this run is --algo sgd");
    /* options that cannot be honoured */
    d = c, d.checkpoint_dir = NULL, d.resume = true;
    expect_train_error(&d, HERD_EINVAL, "--resume needs --checkpoint DIR");
    d = c, d.checkpoint_dir = NULL;
    expect_train_error(&d, HERD_EINVAL, "--checkpoint-every needs --checkpoint DIR");
    d = c, d.checkpoint_keep = 0;
    expect_train_error(&d, HERD_EINVAL, "--keep");
    d = c, d.algo = "osgp";
    expect_train_error(&d, HERD_EUNSUPPORTED, "--algo osgp keeps state between steps that herd cannot checkpoint yet");
    /* what the algorithm's record says the run was */
    d = c, d.resume = true, herd_test_set(&d, "comm-dtype", "fp16");
    expect_train_error(&d, HERD_EINVAL, "written with --comm-dtype fp32; this run has --comm-dtype fp16");
    d = c, d.resume = true, herd_test_set(&d, "csc-ratio", "0.5");
    expect_train_error(&d, HERD_EINVAL, "--csc-ratio 1");
    snprintf(p, sizeof p, "%s/empty", herd_test_tmpdir());
    d = c, d.checkpoint_dir = p, d.resume = true;
    expect_train_error(&d, HERD_ENOTFOUND, "empty");
    ASSERT_EQ_INT(mkdir(p, 0700), 0);
    expect_train_error(&d, HERD_ENOTFOUND, "holds no checkpoint");
    /* a corrupt newest checkpoint: the run resumes from the one before */
    snprintf(p, sizeof p, "%s/ckpt-8.herd", dir);
    size_t n;
    unsigned char *b = read_whole(p, &n);
    b[n / 2] ^= 1;
    write_whole(p, b, n);
    free(b);
    d = c, d.resume = true, d.epochs = 2;
    herd_test_train_ok(&d, &r);
    ASSERT_EQ_INT(r.steps, 16);
    /* what a bogus step count would give: a cursor that does not fit */
    snprintf(p, sizeof p, "%s/ckpt-16.herd", dir);
    b = read_whole(p, &n);
    put64le(b + 24, 17);
    fix_header_crc(b, 128 + (size_t)(b[72] | b[73] << 8) * 48);
    write_whole(p, b, n);
    free(b);
    expect_train_error(&d, HERD_ECORRUPT, "cursor");
}

/* ---- an algorithm's own state through its save/load hooks ----------------- */

typedef struct fake_state {
    uint32_t words[3];
} fake_state;

static herd_status fake_save(herd_algo *a, herd_worker *w, void *buf, size_t cap, size_t *len)
{
    (void)w;
    *len = sizeof(fake_state);
    if (buf && cap >= *len)
        memcpy(buf, a->state, sizeof(fake_state));
    return HERD_OK;
}

static herd_status fake_load(herd_algo *a, herd_worker *w, const void *buf, size_t len)
{
    if (len != sizeof(fake_state))
        return herd_err_set(&w->err, HERD_ECORRUPT, "fake: %zu bytes of state, want %zu", len, sizeof(fake_state));
    memcpy(a->state, buf, len);
    return HERD_OK;
}

static void test_algo_hooks(void)
{
    char dir[512];
    make_dir(dir, sizeof dir, "hooks");
    herd__train_config cfg;
    herd__train_config_defaults(&cfg);
    cfg.model = "linear", cfg.batch = 8, cfg.epochs = 2, cfg.checkpoint_dir = dir, cfg.quiet = true;
    herd_dataset d;
    herd_err err = {0};
    ASSERT_OK(herd_data_synthetic("16:3", 64, 1, &d, &err));
    herd_worker w = {.rank = 0, .nworkers = 1, .cfg = &cfg};
    ASSERT_OK(herd_model_create("linear", 1, 1, 16, 3, 8, 1, &w.model, &err));
    w.params = herd_model_params(w.model), w.grads = herd_model_grads(w.model), w.nparams = herd_model_nparams(w.model);
    ASSERT_OK(herd_optim_init(&w.optim, &cfg.optim, w.nparams, &err));
    herd_threads_world *world;
    ASSERT_OK(herd_threads_world_create(1, &world, &err));
    ASSERT_OK(herd_comm_threads_create(world, 0, &w.comm, &err));
    herd_loader l;
    ASSERT_OK(herd_loader_init(&l, &d, 8, 0, 1, cfg.seed, true, &err));
    const herd_algo_ops ops = {.name = "fake", .save = fake_save, .load = fake_load};
    fake_state fs = {{11, 22, 33}};
    herd_algo a = {.ops = &ops, .state = &fs};
    const herd_engine *threads = herd_engine_find("threads"), *mpi = herd_engine_find("mpi");
    ASSERT_OK(herd__ckpt_check(&cfg, &ops, threads, &err));
    const herd_algo_ops nohooks = {.name = "fake"};
    ASSERT_EQ_INT(herd__ckpt_check(&cfg, &nohooks, threads, &err), HERD_EUNSUPPORTED);
    ASSERT_STR_CONTAINS(err.msg, "--algo fake keeps state between steps that herd cannot checkpoint yet");
    /* the engine's capability decides, not its name */
    const herd_engine nockpt = {.name = "nockpt", .caps = HERD_ENGINE_WINDOWS};
    ASSERT_EQ_INT(herd__ckpt_check(&cfg, &ops, &nockpt, &err), HERD_EUNSUPPORTED);
    ASSERT_STR_CONTAINS(err.msg, "the nockpt engine cannot checkpoint yet (herd checkpoints on --engine threads");
    if (mpi) { /* built with MPI: its processes send worker 0 their state, synchronous algorithms only */
        ASSERT_OK(herd__ckpt_check(&cfg, &ops, mpi, &err));
        const herd_algo_ops async = {.name = "fakeasync", .save = fake_save, .load = fake_load, .async = true};
        ASSERT_EQ_INT(herd__ckpt_check(&cfg, &async, mpi, &err), HERD_EUNSUPPORTED);
        ASSERT_STR_CONTAINS(err.msg, "--algo fakeasync is asynchronous");
        ASSERT_STR_CONTAINS(err.msg, "the mpi engine");
        ASSERT_OK(herd__ckpt_check(&cfg, &async, threads, &err));
    }

    herd__ckpt_run *cr;
    ASSERT_OK(herd__ckpt_run_open(&cfg, "fake", w.nparams, 8, NULL, NULL, 0, 1, &cr, &err));
    for (size_t i = 0; i < w.nparams; i++)
        w.params[i] = (float)i * 0.25f, w.optim.v[i] = -(float)i;
    w.step = 3;
    ASSERT_TRUE(!herd__ckpt_due(cr, &w));
    w.step = 8;
    ASSERT_TRUE(herd__ckpt_due(cr, &w)); /* default: once per epoch */
    w.step = 3;
    herd__ckpt_cursor cur = {.epoch = 0, .epoch_step = 3, .step = 3, .nloss = 3, .loss_sum = 1.25};
    if (herd__ckpt_save(cr, &a, &w, &l, &cur) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "save: %s", w.err.msg);
    herd__ckpt_run_free(cr);

    cfg.resume = true;
    ASSERT_OK(herd__ckpt_run_open(&cfg, "fake", w.nparams, 8, NULL, NULL, 0, 1, &cr, &err));
    memset(w.params, 0, w.nparams * sizeof(float));
    memset(w.optim.v, 0, w.nparams * sizeof(float));
    memset(&fs, 0, sizeof fs);
    w.step = 0;
    herd__ckpt_cursor back;
    ASSERT_OK(herd__ckpt_restore(cr, &w, &l, &back, &err));
    ASSERT_TRUE(back.epoch == 0 && back.epoch_step == 3 && back.step == 3 && back.nloss == 3 && back.loss_sum == 1.25);
    ASSERT_EQ_INT(w.step, 3);
    for (size_t i = 0; i < w.nparams; i++)
        ASSERT_TRUE(w.params[i] == (float)i * 0.25f && w.optim.v[i] == -(float)i);
    ASSERT_OK(herd__ckpt_restore_algo(cr, &a, &w));
    ASSERT_TRUE(fs.words[0] == 11 && fs.words[1] == 22 && fs.words[2] == 33);
    herd_algo plain = {.ops = &nohooks};
    ASSERT_EQ_INT(herd__ckpt_restore_algo(cr, &plain, &w), HERD_EUNSUPPORTED);
    ASSERT_STR_CONTAINS(w.err.msg, "holds state of --algo fake that this herd cannot load");
    herd__ckpt_run_free(cr);

    herd_comm_free(w.comm);
    herd_threads_world_free(world);
    herd_loader_free(&l);
    herd_optim_free(&w.optim);
    herd_model_free(w.model);
    herd_dataset_free(&d);
}

/* ---- asynchronous algorithms: state restored exactly, training goes on --- */

/* One worker of a run rebuilt from a checkpoint, as herd_train builds it. */
typedef struct rt_worker {
    herd_worker w;
    herd_algo algo;
    herd_loader loader;
    herd__ckpt_cursor cur;
    herd__ckpt_run *from, *to;
    herd_status st;
} rt_worker;

/* On the worker's thread, as in the worker loop: init, the algorithm's own
 * state loaded, then straight away a checkpoint of everything. */
static void *rt_thread(void *p)
{
    rt_worker *r = p;
    herd_status st = HERD_OK;
    HERD_TRY(r->algo.ops->init(&r->algo, &r->w));
    HERD_TRY(herd__ckpt_restore_algo(r->from, &r->algo, &r->w));
    HERD_TRY(herd__ckpt_save(r->to, &r->algo, &r->w, &r->loader, &r->cur));
out:
    r->st = st;
    return NULL;
}

/* Loads DIR's newest checkpoint of run c into fresh workers and has them
 * save again into OUT at once: the file written must be the one loaded,
 * byte for byte (every worker's weights, momentum, cursor, the batch
 * counter and every buffer of the algorithm's state: servers, centers,
 * windows, random streams, counters). */
static void load_and_save_again(herd__train_config c, const char *dir, const char *out, const char *want)
{
    herd_err err = {0};
    herd_dataset train, test;
    ASSERT_OK(herd_data_open(c.data, c.seed, &train, &test, &err));
    herd_dataset_truncate(&train, c.train_limit);
    herd_threads_world *world;
    ASSERT_OK(herd_threads_world_create(c.workers, &world, &err));
    herd__train_config cin = c, cout = c;
    cin.checkpoint_dir = dir, cin.resume = true;
    cout.checkpoint_dir = out, cout.resume = false;
    rt_worker rw[4];
    pthread_t th[4];
    ASSERT_TRUE(c.workers <= 4);
    memset(rw, 0, sizeof rw);
    herd__ckpt_run *from = NULL, *to = NULL;
    void *opts = herd_test_algo_opts(&cin);
    for (size_t i = 0; i < c.workers; i++) {
        herd_worker *w = &rw[i].w;
        w->rank = i, w->nworkers = c.workers, w->cfg = &cin, w->opts = opts;
        ASSERT_OK(herd_model_create(c.model, train.c, train.h, train.w, train.nclasses, c.batch, c.seed, &w->model, &err));
        w->params = herd_model_params(w->model), w->grads = herd_model_grads(w->model);
        w->nparams = herd_model_nparams(w->model);
        ASSERT_OK(herd_algo_optim_init(herd_algo_find(c.algo), opts, &c.optim, w->model, w->nparams, &w->optim, &err));
        ASSERT_OK(herd_loader_init(&rw[i].loader, &train, c.batch, i, c.workers, c.seed, true, &err));
        w->steps_per_epoch = herd_loader_steps(&rw[i].loader);
        ASSERT_OK(herd_comm_threads_create(world, i, &w->comm, &err));
        rw[i].algo.ops = herd_algo_find(c.algo);
        if (i == 0) {
            const herd_algo_ops *ops;
            /* as herd_train: the configuration resolved (--lr...), the options recorded and checked */
            if (herd__check_config(&cin, &ops, &err) != HERD_OK || herd__check_config(&cout, &ops, &err) != HERD_OK ||
                herd__ckpt_run_open(&cin, c.algo, w->nparams, w->steps_per_epoch, &train, &test, 0, cin.workers, &from, &err) != HERD_OK ||
                herd__ckpt_run_open(&cout, c.algo, w->nparams, w->steps_per_epoch, &train, &test, 0, cout.workers, &to, &err) != HERD_OK ||
                herd__ckpt_run_options(from, ops, opts, &err) != HERD_OK || herd__ckpt_run_options(to, ops, opts, &err) != HERD_OK ||
                herd__ckpt_run_describe(from, herd_model_description(w->model), &err) != HERD_OK ||
                herd__ckpt_run_describe(to, herd_model_description(w->model), &err) != HERD_OK)
                herd_test_fail(__FILE__, __LINE__, "open: %s", err.msg);
        }
        rw[i].from = from, rw[i].to = to;
        if (herd__ckpt_restore(from, w, &rw[i].loader, &rw[i].cur, &err) != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "restore: %s", err.msg);
    }
    for (size_t i = 0; i < c.workers; i++)
        ASSERT_EQ_INT(pthread_create(&th[i], NULL, rt_thread, &rw[i]), 0);
    for (size_t i = 0; i < c.workers; i++)
        pthread_join(th[i], NULL);
    for (size_t i = 0; i < c.workers; i++)
        if (rw[i].st != HERD_OK)
            herd_test_fail(__FILE__, __LINE__, "%s worker %zu: %s", c.algo, i, rw[i].w.err.msg);
    herd_threads_world_close(world);
    for (size_t i = 0; i < c.workers; i++) { /* after every worker stopped (windows) */
        rt_worker *r = &rw[i];
        if (r->algo.ops->free)
            r->algo.ops->free(&r->algo, &r->w);
        herd_comm_free(r->w.comm);
        herd_loader_free(&r->loader);
        herd_optim_free(&r->w.optim);
        herd_model_free(r->w.model);
    }
    herd__ckpt_run_free(from);
    herd__ckpt_run_free(to);
    herd_threads_world_free(world);
    free(opts);
    herd_dataset_free(&train);
    herd_dataset_free(&test);
    char fa[700], fb[700];
    snprintf(fa, sizeof fa, "%s/%s", dir, want);
    snprintf(fb, sizeof fb, "%s/%s", out, want);
    same_file(fa, fb);
}

static void copy_file(const char *from, const char *to)
{
    size_t n;
    unsigned char *b = read_whole(from, &n);
    write_whole(to, b, n);
    free(b);
}

/* Every asynchronous algorithm that checkpoints: a run on 3 workers (4
 * steps an epoch each, a hold every 4) writes checkpoints; the one of step
 * 8 (mid-run) round-trips byte for byte through fresh workers; and a run
 * resumed from it takes exactly the batches left (the counter came back),
 * ends with a final checkpoint and a test loss near the uninterrupted
 * run's (not the same bits: the interleaving is not reproducible). */
/* opt/val: an algorithm option set on every run (NULL: none). */
static void async_resume_with(const char *algo, const char *opt, const char *val)
{
    char da[512], db[512], dc[512], name[64], fa[700], fb[700];
    snprintf(name, sizeof name, "%s%s-straight", algo, opt ? val : "");
    make_dir(da, sizeof da, name);
    snprintf(name, sizeof name, "%s%s-resumed", algo, opt ? val : "");
    make_dir(db, sizeof db, name);
    snprintf(name, sizeof name, "%s%s-again", algo, opt ? val : "");
    make_dir(dc, sizeof dc, name);
    herd__train_config c = run_config("lenet", algo, 3, da);
    c.train_limit = 384, c.epochs = 4, c.checkpoint_every = 4, c.checkpoint_keep = 100;
    if (opt)
        herd_test_set(&c, opt, val);
    herd_train_result a, b;
    herd_test_train_ok(&c, &a);
    uint64_t steps[16];
    size_t n = 0;
    ASSERT_OK(herd_ckpt_list(da, steps, 16, &n, NULL));
    ASSERT_EQ_INT(n, 4); /* holds at steps 4, 8, 12, 16 */
    ASSERT_EQ_INT(steps[0], 16);
    snprintf(fa, sizeof fa, "%s/ckpt-8.herd", da);
    snprintf(fb, sizeof fb, "%s/ckpt-8.herd", db);
    copy_file(fa, fb);
    load_and_save_again(c, db, dc, "ckpt-8.herd");
    herd_ckpt *ck;
    ASSERT_OK(herd_ckpt_read(db, "ckpt-8.herd", &ck, NULL));
    uint64_t claimed;
    ASSERT_OK(herd_ckpt_copy(ck, "claim", 0, &claimed, sizeof claimed, NULL));
    ASSERT_EQ_INT(claimed, 24);
    ASSERT_EQ_INT(herd_ckpt_get_info(ck)->step, 8);
    herd_ckpt_free(ck);
    c.checkpoint_dir = db, c.resume = true;
    herd_test_train_ok(&c, &b);
    ASSERT_TRUE(b.images == (double)((48 - 24) * c.batch));
    snprintf(fb, sizeof fb, "%s/ckpt-16.herd", db);
    ASSERT_TRUE(access(fb, F_OK) == 0);
    if (!(isfinite(b.test_loss) && fabs(b.test_loss - a.test_loss) < 0.1))
        herd_test_fail(__FILE__, __LINE__, "%s%s%s: resumed test loss %g, uninterrupted %g", algo, opt ? " --" : "", opt ? opt : "", b.test_loss, a.test_loss);
}

static void async_resume(const char *algo) { async_resume_with(algo, NULL, NULL); }

static void test_async_ps(void)
{
    async_resume("asgd");
    async_resume("amsgd");
    async_resume("hogwild");
}

static void test_async_elastic(void)
{
    async_resume("aeasgd");
    async_resume("ameasgd");
    async_resume("hogwild-easgd");
    async_resume("eawild");
    /* the drain at each hold: the checkpoint holds every exchange made */
    async_resume_with("eawild", "elastic-transport", "messages");
}

static void test_async_adpsgd(void) { async_resume("adpsgd"); }

/* Where asynchronous runs stop to checkpoint: every `every` steps of every
 * worker (every * workers batches of the shared counter) and at the run's
 * last batch, each hold strictly after the counter given. */
static void test_async_holds(void)
{
    char dir[512];
    make_dir(dir, sizeof dir, "holds");
    herd__train_config c = run_config("lenet", "asgd", 3, dir);
    c.epochs = 4, c.checkpoint_every = 5;
    herd__ckpt_run *cr;
    herd_err err = {0};
    ASSERT_OK(herd__ckpt_run_open(&c, "asgd", 100, 4, NULL, NULL, 0, c.workers, &cr, &err)); /* 12 batches an epoch, 48 in all */
    ASSERT_EQ_INT(herd__ckpt_next_hold(cr, 0), 15);
    ASSERT_EQ_INT(herd__ckpt_next_hold(cr, 14), 15);
    ASSERT_EQ_INT(herd__ckpt_next_hold(cr, 15), 30);
    ASSERT_EQ_INT(herd__ckpt_next_hold(cr, 45), 48);
    ASSERT_TRUE(herd__ckpt_next_hold(cr, 48) == UINT64_MAX);
    ASSERT_TRUE(herd__ckpt_next_hold(NULL, 0) == UINT64_MAX);
    herd__ckpt_run_free(cr);
}

/* What keeps a worker from the checkpoint's rendezvous is refused. */
static void test_async_refusals(void)
{
    char dir[512];
    make_dir(dir, sizeof dir, "async-ref");
    herd__train_config c = run_config("lenet", "asgd", 2, dir);
    herd__train_config d = c;
    herd_test_set(&d, "ps-shards", "1"); /* worker 1 holds no shard */
    d.nfail = 1, d.fail[0].rank = 1, d.fail[0].step = 3;
    expect_train_error(&d, HERD_EUNSUPPORTED, "which --fail");
    d = c, d.max_steps = 5;
    expect_train_error(&d, HERD_EUNSUPPORTED, "which --max-steps");
    d = c, herd_test_set(&d, "softsync", "2");
    expect_train_error(&d, HERD_EUNSUPPORTED, "which --softsync");
    d = c, herd_test_set(&d, "max-staleness", "1");
    expect_train_error(&d, HERD_EUNSUPPORTED, "which --max-staleness");
    d = c, d.algo = "osgp";
    expect_train_error(&d, HERD_EUNSUPPORTED, "--algo osgp keeps state between steps that herd cannot checkpoint yet");
}

/* An algorithm's record names the settings its state belongs to: a resume
 * with others is refused, saying which; a record cut short or too long is
 * refused as corrupt (the reader of src/algo/state_io.c). */
static void test_algo_records(void)
{
    char dir[512];
    make_dir(dir, sizeof dir, "rec-sgp");
    herd__train_config c = run_config("linear", "sgp", 2, dir);
    c.epochs = 1;
    herd_train_result r;
    herd_test_train_ok(&c, &r);
    herd__train_config d = c;
    d.resume = true, herd_test_set(&d, "topology", "ring");
    expect_train_error(&d, HERD_EINVAL, "written with --topology exp; this run has --topology ring");
    make_dir(dir, sizeof dir, "rec-asgd");
    c = run_config("linear", "asgd", 2, dir);
    c.epochs = 1;
    herd_test_train_ok(&c, &r);
    d = c, d.resume = true, herd_test_set(&d, "ps-shards", "1");
    expect_train_error(&d, HERD_EINVAL, "written with --ps-shards 2; this run has --ps-shards 1");
    make_dir(dir, sizeof dir, "rec-ea");
    c = run_config("linear", "aeasgd", 2, dir);
    c.epochs = 1;
    herd_test_train_ok(&c, &r);
    d = c, d.resume = true, herd_test_set(&d, "elastic-period", "2");
    expect_train_error(&d, HERD_EINVAL, "--elastic-period 1; this run has");
    d = c, d.resume = true, herd_test_set(&d, "elastic-shards", "1");
    expect_train_error(&d, HERD_EINVAL, "written with --elastic-shards 2; this run has 1");

    herd_worker w = {.rank = 3};
    unsigned char rec[24];
    herd__state_out o = herd__state_out_make(rec, sizeof rec);
    herd__state_put_u64(&o, HERD__STATE_LAYOUT('t', 'e', 's', 't', 1));
    herd__state_put_f64(&o, 0.5);
    herd__state_put_u64(&o, 7);
    herd__state_put_u64(&o, 8); /* past the buffer: counted, not written */
    ASSERT_EQ_INT(o.len, 32);
    herd__state_in in = herd__state_in_make(rec, sizeof rec);
    ASSERT_OK(herd__state_layout(&in, HERD__STATE_LAYOUT('t', 'e', 's', 't', 1), &w, "test"));
    ASSERT_TRUE(herd__state_get_f64(&in) == 0.5);
    ASSERT_EQ_INT(herd__state_end(&in, &w, "test"), HERD_ECORRUPT);
    ASSERT_STR_CONTAINS(w.err.msg, "worker 3: the checkpoint's test state has 8 bytes more");
    ASSERT_EQ_INT(herd__state_get_u64(&in), 7);
    ASSERT_EQ_INT(herd__state_get_u64(&in), 0); /* past the end */
    ASSERT_EQ_INT(herd__state_end(&in, &w, "test"), HERD_ECORRUPT);
    ASSERT_STR_CONTAINS(w.err.msg, "the checkpoint's test state is truncated (24 bytes)");
    in = herd__state_in_make(rec, sizeof rec);
    ASSERT_EQ_INT(herd__state_layout(&in, HERD__STATE_LAYOUT('t', 'e', 's', 't', 2), &w, "test"), HERD_ECORRUPT);
    ASSERT_STR_CONTAINS(w.err.msg, "not of the layout this herd reads");
}

/* ---- the command line: killed for real, then --resume -------------------- */

/* The value of `key` in a --json summary file. */
static void json_field(const char *path, const char *key, char *val, size_t cap)
{
    size_t n;
    unsigned char *b = read_whole(path, &n);
    char *s = realloc(b, n + 1);
    ASSERT_TRUE(s != NULL);
    s[n] = 0;
    const char *at = strstr(s, key);
    if (!at)
        herd_test_fail(__FILE__, __LINE__, "%s has no %s: %s", path, key, s);
    at += strlen(key);
    size_t k = strcspn(at, ",}");
    snprintf(val, cap, "%.*s", (int)k, at);
    free(s);
}

#define TRAIN_ARGS "train", "--data", "synthetic:1x12x12:4", "--model", "lenet", "--algo", "allreduce", \
                   "--workers", "2", "--epochs", "4", "--train-limit", "1024", "--test-limit", "256", \
                   "--batch", "32", "--checkpoint-every", "3", "--json", "--no-progress", "--checkpoint"

static void test_cli_kill_resume(void)
{
    char da[512], db[512], out[600], errf[600], fa[700], fb[700], la[64], lb[64];
    tmp_path(da, sizeof da, "cli-a"); /* herd creates the directory */
    tmp_path(db, sizeof db, "cli-b");
    tmp_path(out, sizeof out, "out");
    tmp_path(errf, sizeof errf, "err");
    ASSERT_EQ_INT(herd_test_wait(herd_test_spawn((const char *const[]){TRAIN_ARGS, da, "--quiet", NULL}, out, errf), 100), 0);
    json_field(out, "\"test_loss\":", la, sizeof la);
    /* killed once it has written a checkpoint, at a random moment after */
    pid_t pid = herd_test_spawn((const char *const[]){TRAIN_ARGS, db, "--quiet", NULL}, out, errf);
    uint64_t steps[8];
    size_t n = 0;
    double t0 = herd__now();
    while (herd__now() - t0 < 60) {
        if (herd_ckpt_list(db, steps, 8, &n, NULL) == HERD_OK && n > 0)
            break;
        usleep(1000);
    }
    ASSERT_TRUE(n > 0);
    herd_rng r;
    herd_rng_seed(&r, (uint64_t)getpid(), 0);
    usleep((useconds_t)herd_rng_below(&r, 200000));
    kill(pid, SIGKILL);
    int code = herd_test_wait(pid, 100);
    ASSERT_TRUE(code == 128 + SIGKILL || code == 0);
    ASSERT_EQ_INT(herd_test_wait(herd_test_spawn((const char *const[]){TRAIN_ARGS, db, "--resume", "--quiet", NULL}, out, errf), 100), 0);
    json_field(out, "\"test_loss\":", lb, sizeof lb);
    ASSERT_TRUE(!strcmp(la, lb));
    snprintf(fa, sizeof fa, "%s/ckpt-64.herd", da);
    snprintf(fb, sizeof fb, "%s/ckpt-64.herd", db);
    same_file(fa, fb);
    ASSERT_OK(herd_ckpt_list(db, steps, 8, &n, NULL));
    ASSERT_EQ_INT(n, 3); /* --keep 3 */
    /* usage mistakes and a corrupt newest checkpoint, as a user sees them */
    snprintf(fb, sizeof fb, "%s/ckpt-64.herd", db);
    size_t len;
    unsigned char *b = read_whole(fb, &len);
    write_whole(fb, b, len - 1);
    free(b);
    ASSERT_EQ_INT(herd_test_wait(herd_test_spawn((const char *const[]){TRAIN_ARGS, db, "--resume", "--keep", "2", NULL}, out, errf), 100), 0);
    size_t en;
    unsigned char *e = read_whole(errf, &en);
    char *msg = realloc(e, en + 1);
    msg[en] = 0;
    ASSERT_STR_CONTAINS(msg, "warning: skipped 1 newer checkpoint(s)");
    ASSERT_STR_CONTAINS(msg, "ckpt-64.herd: truncated");
    free(msg);
    json_field(out, "\"test_loss\":", lb, sizeof lb);
    ASSERT_TRUE(!strcmp(la, lb));
    /* a usage error (the configuration refused): 2 */
    ASSERT_EQ_INT(herd_test_wait(herd_test_spawn((const char *const[]){"train", "--resume", NULL}, out, errf), 100), 2);
    e = read_whole(errf, &en);
    msg = realloc(e, en + 1);
    msg[en] = 0;
    ASSERT_STR_CONTAINS(msg, "--resume needs --checkpoint DIR");
    free(msg);
}

/* What a file holds, NUL-terminated (freed by the caller). */
static char *read_text(const char *path)
{
    size_t n = 0;
    unsigned char *b = read_whole(path, &n);
    char *t = realloc(b, n + 1);
    ASSERT_TRUE(t != NULL);
    t[n] = 0;
    return t;
}

/* The checkpoint directory is held for the run: a second run in it is
 * refused naming the first's pid (they would interleave and prune each
 * other's checkpoints), and the hold ends with the run, however it ends; a
 * directory herd cannot write to is refused at the start. */
static void test_dir_lock(void)
{
    char dir[512], out[600], errf[600], lock[700];
    make_dir(dir, sizeof dir, "locked");
    tmp_path(out, sizeof out, "lock-out");
    tmp_path(errf, sizeof errf, "lock-err");
    snprintf(lock, sizeof lock, "%s/.lock", dir);
    /* a run slowed to a crawl holds the directory */
    pid_t first = herd_test_spawn((const char *const[]){"train", "--data", "synthetic:1x8x8:4", "--model", "mlp",
                                                        "--epochs", "50", "--slow", "0:1000", "--checkpoint", dir,
                                                        "--quiet", NULL},
                                  out, errf);
    char want[32];
    snprintf(want, sizeof want, "%ld\n", (long)first);
    double t0 = herd__now();
    for (;;) {
        char *t = access(lock, R_OK) == 0 ? read_text(lock) : NULL;
        bool held = t && !strcmp(t, want);
        free(t);
        if (held)
            break;
        if (herd__now() - t0 > 30) {
            kill(first, SIGKILL);
            herd_test_wait(first, 10);
            herd_test_fail(__FILE__, __LINE__, "%s never held pid %ld", lock, (long)first);
        }
        usleep(10000);
    }
    herd_test_cmd o;
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", "mlp", "--epochs", "1", "--checkpoint", dir,
                  "--resume", "--quiet");
    kill(first, SIGKILL);
    int code = herd_test_wait(first, 30);
    ASSERT_EQ_INT(code, 128 + SIGKILL);
    ASSERT_EQ_INT(o.code, 1);
    ASSERT_STR_CONTAINS(o.err, herd_test_fmt("checkpoint directory %s is in use by another herd run (pid %ld)", dir,
                                             (long)first));
    /* killed, the first run holds nothing: a run in the directory goes on */
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", "mlp", "--epochs", "1", "--train-limit", "512",
                  "--checkpoint", dir, "--quiet");
    if (o.code != 0)
        herd_test_fail(__FILE__, __LINE__, "exit %d after the holder died: %s", o.code, o.err);
    /* a directory herd cannot write to (root writes anywhere chmod allows: sysfs refuses even root) */
    char ro[512];
    make_dir(ro, sizeof ro, "read-only");
    chmod(ro, 0500);
    const char *unwritable = geteuid() == 0 ? "/sys/kernel" : ro;
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", "mlp", "--epochs", "1", "--checkpoint",
                  unwritable, "--quiet");
    chmod(ro, 0700);
    ASSERT_EQ_INT(o.code, 1);
    ASSERT_STR_CONTAINS(o.err, herd_test_fmt("checkpoint directory %s is not writable: ", unwritable));
}

/* The newest checkpoint is the one whose header says the latest step: a
 * file renamed to a later step's name is not resumed from (a warning names
 * both steps), and one renamed to an earlier step's name still is. Under
 * ThreadSanitizer the runs train linear, not mlp: the files' names and
 * headers are the question, not what they hold (mlp's runs took 55 s). */
static void test_header_decides(void)
{
    const char *model = HERD_TEST_TSAN ? "linear" : "mlp";
    char dir[512], from[700], to[700];
    make_dir(dir, sizeof dir, "renamed");
    herd_test_cmd o;
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", model, "--epochs", "1", "--train-limit", "640",
                  "--batch", "32", "--checkpoint", dir, "--checkpoint-every", "5", "--keep", "5", "--quiet");
    ASSERT_EQ_INT(o.code, 0);
    uint64_t steps[8];
    size_t n = 0;
    ASSERT_OK(herd_ckpt_list(dir, steps, 8, &n, NULL));
    ASSERT_TRUE(n >= 2 && steps[0] == 20 && steps[1] == 15);
    snprintf(from, sizeof from, "%s/ckpt-15.herd", dir);
    snprintf(to, sizeof to, "%s/ckpt-900.herd", dir);
    ASSERT_TRUE(rename(from, to) == 0);
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", model, "--epochs", "2", "--train-limit", "640",
                  "--batch", "32", "--checkpoint", dir, "--checkpoint-every", "5", "--keep", "5", "--resume");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.err, herd_test_fmt("checkpoint %s/ckpt-900.herd: its header says step 15, not 900 (a renamed file?)", dir));
    ASSERT_STR_CONTAINS(o.err, herd_test_fmt("herd: resuming from %s/ckpt-20.herd (step 20, epoch 2)", dir));
    /* the newest renamed to an old name: still the newest */
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", model, "--epochs", "1", "--train-limit", "640",
                  "--batch", "32", "--checkpoint", dir, "--checkpoint-every", "5", "--keep", "5", "--quiet");
    ASSERT_EQ_INT(o.code, 2); /* the directory holds checkpoints: --resume or another directory (refused first) */
    char dir2[512];
    make_dir(dir2, sizeof dir2, "renamed-old");
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", model, "--epochs", "1", "--train-limit", "640",
                  "--batch", "32", "--checkpoint", dir2, "--checkpoint-every", "5", "--keep", "5", "--quiet");
    ASSERT_EQ_INT(o.code, 0);
    snprintf(from, sizeof from, "%s/ckpt-20.herd", dir2);
    snprintf(to, sizeof to, "%s/ckpt-1.herd", dir2);
    ASSERT_TRUE(rename(from, to) == 0);
    HERD_TEST_RUN(&o, "train", "--data", "synthetic:1x8x8:4", "--model", model, "--epochs", "2", "--train-limit", "640",
                  "--batch", "32", "--checkpoint", dir2, "--checkpoint-every", "5", "--keep", "5", "--resume");
    ASSERT_EQ_INT(o.code, 0);
    ASSERT_STR_CONTAINS(o.err, herd_test_fmt("herd: resuming from %s/ckpt-1.herd (step 20, epoch 2)", dir2));
}

const herd_test herd_tests_ckpt[] = {
    {"ckpt_crc32c", test_crc32c, 20, HERD_TEST_ONE_THREAD},
    {"ckpt_roundtrip_and_keep", test_roundtrip_and_keep, 20, HERD_TEST_ONE_THREAD},
    {"ckpt_kill_writer", test_kill_writer, 60, HERD_TEST_ONE_THREAD},
    {"ckpt_corruptions", test_corruptions, 60, HERD_TEST_ONE_THREAD},
    {"ckpt_paths", test_paths, 20, HERD_TEST_ONE_THREAD},
    {"ckpt_latest_fallback", test_latest_fallback, 20, HERD_TEST_ONE_THREAD},
    {"ckpt_algo_hooks", test_algo_hooks, 20, HERD_TEST_ONE_THREAD},
    {"ckpt_resume_sgd", test_resume_sgd, 60},
    {"ckpt_resume_allreduce_mid_epoch", test_resume_allreduce_mid_epoch, 60},
    {"ckpt_resume_allreduce_epoch_end", test_resume_allreduce_epoch_end, 60},
    {"ckpt_resume_resnet_buffers", test_resume_resnet_buffers, 90},
    {"ckpt_resume_allreduce_fp16", test_resume_allreduce_fp16, 90},
    {"ckpt_resume_allreduce_csc", test_resume_allreduce_csc, 90},
    {"ckpt_resume_dpsgd", test_resume_dpsgd, 90},
    {"ckpt_resume_sgp", test_resume_sgp, 90},
    {"ckpt_resume_localsgd", test_resume_localsgd, 90},
    {"ckpt_resume_layerwise", test_resume_layerwise, 120},
    {"ckpt_every_section", test_every_section, 60},
    {"ckpt_resume_refusals", test_resume_refusals, 60},
    {"ckpt_async_ps", test_async_ps, 120},
    {"ckpt_async_elastic", test_async_elastic, 120},
    {"ckpt_async_adpsgd", test_async_adpsgd, 60},
    {"ckpt_async_refusals", test_async_refusals, 20, HERD_TEST_ONE_THREAD},
    {"ckpt_async_holds", test_async_holds, 20, HERD_TEST_ONE_THREAD},
    {"ckpt_algo_records", test_algo_records, 60},
    {"ckpt_cli_kill_resume", test_cli_kill_resume, 120},
    {"ckpt_dir_lock", test_dir_lock, 120},
    {"ckpt_header_decides", test_header_decides, 60},
    HERD_TEST_END,
};
