/* herd sim — runs a herd command on a simulated cluster (docs/design.md, the sim
 * engine): writes a SimGrid platform and host file, starts smpirun with
 * herd-sim (herd compiled with smpicc, one simulated host per worker) and,
 * for `train`, reports the same summary as `herd train` with wall_s in
 * simulated seconds and real_s beside it.
 *
 * The network is a non-blocking cluster: every host has its own full-duplex
 * link of bandwidth BW and latency LAT/2 to a crossbar, so a message between
 * two hosts sees latency LAT and bandwidth BW (SimGrid's CM02 model without
 * SMPI's calibration factors: the numbers of a platform mean what they say).
 * Compute costs the step's FLOPs over the host's speed (src/comm/sim.h);
 * --slow makes one host's speed FACTOR times lower. */
#include "cli/sim.h"

#include "cli/flags.h"
#include "cli/spawn.h"
#include "herd/herd_status.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <expat.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- platforms -------------------------------------------------------- */

typedef struct sim_platform {
    const char *name, *desc;
    size_t nodes;       /* the paper's size: the default --workers */
    double bw;          /* bytes/s of each host's link, each way */
    double lat;         /* seconds, host to host */
    double speed;       /* flop/s a host sustains on training steps */
} sim_platform;

/* Host speeds are sustained training rates, not peaks: compute time is the
 * step's FLOPs (herd_model_train_flops) over them, so they carry what a
 * framework of the paper's time reached on its GPU. Where a seed gives a
 * figure, the rate comes from it:
 *   ib-100g  seed 003: one learner trains an epoch of CIFAR-10 (50000
 *            images) on ResNet-20 in 18.04 s; herd counts 244 MFLOP per
 *            image for a training step of resnet20 -> 0.68 Tflop/s.
 *   ib-56g   seed 002: 95 epochs of ImageNet (1.28 M images) on AlexNet in
 *            1.5 min on 512 GPUs at a speedup of 410.2 -> 3300 images/s per
 *            GPU; AlexNet's training step is ~4.3 GFLOP per image (3 x 0.72
 *            G multiply-adds) -> 14 Tflop/s (fp16 on the GPU).
 * Seed 004 (10gbe) gives no compute figure: 8 Tflop/s per node is assumed;
 * slow-cloud's 0.2 Tflop/s is a CPU virtual machine. --host-speed
 * overrides. */
static const sim_platform platforms[] = {
    {"ib-100g", "100 Gb/s EDR InfiniBand, 1 us, 0.68 Tflop/s hosts (seed 003: 16 nodes)", 16, 100e9 / 8, 1e-6, 0.68e12},
    {"ib-56g", "56 Gb/s FDR InfiniBand, 1.5 us, 14 Tflop/s hosts (seed 002: 64 to 512 GPUs)", 64, 56e9 / 8, 1.5e-6, 14e12},
    {"10gbe", "10 Gb/s Ethernet, 25 us, 8 Tflop/s hosts (seed 004: 32 nodes)", 32, 10e9 / 8, 25e-6, 8e12},
    {"slow-cloud", "1 Gb/s, 500 us, 0.2 Tflop/s hosts (virtual machines of a cloud)", 16, 1e9 / 8, 500e-6, 0.2e12},
};
enum { NPLATFORMS = sizeof platforms / sizeof platforms[0] };

typedef struct unit {
    const char *suffix;
    double scale;
} unit;

static const unit bw_units[] = {{"bps", 1.0 / 8}, {"kbps", 1e3 / 8}, {"Mbps", 1e6 / 8}, {"Gbps", 1e9 / 8},
                                {"Tbps", 1e12 / 8}, {"Bps", 1}, {"kBps", 1e3}, {"MBps", 1e6}, {"GBps", 1e9},
                                {"TBps", 1e12}, {NULL, 0}};
static const unit lat_units[] = {{"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}, {NULL, 0}};
static const unit speed_units[] = {{"f", 1}, {"kf", 1e3}, {"Mf", 1e6}, {"Gf", 1e9}, {"Tf", 1e12}, {"Pf", 1e15}, {NULL, 0}};

/* "12.5Gbps" -> bytes/s; a number and one of the units; > 0. */
static int parse_unit(const char *s, size_t len, const unit *units, double *out)
{
    char buf[64], *end;
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = 0;
    errno = 0;
    double v = strtod(buf, &end);
    if (end == buf || errno || !isfinite(v) || !(v > 0))
        return -1;
    for (const unit *u = units; u->suffix; u++)
        if (!strcmp(end, u->suffix)) {
            *out = v * u->scale;
            return isfinite(*out) && *out > 0 ? 0 : -1;
        }
    return -1;
}

/* ---- --sim-cfg ------------------------------------------------------------ */

typedef enum cfg_type { CFG_BOOL, CFG_INT, CFG_DOUBLE, CFG_STRING } cfg_type;
enum { NCFG_TYPES = CFG_STRING + 1 };

typedef struct cfg_note {
    const char *key, *text;
} cfg_note;

/* SimGrid 3.32's configuration keys under smpirun, by the type of their
 * value, each list split at spaces: what SimGrid prints for a key it does
 * not know (smpirun ... --cfg=x:y; make test-sim compares them).
 * A key not in it, a value not of its type, ends smpirun with a backtrace
 * (exit 134); herd refuses them first. */
static const char *const cfg_keys[] = {
    [CFG_BOOL] =
        "cmonkey/tell cpu/maxmin-selective-update debug/clean-atexit debug/verbose-exit exception/cutpath "
        "help-nostop model-check/timeout network/crosstraffic network/maxmin-selective-update smpi/display-allocs "
        "smpi/display-timing smpi/errors-are-fatal smpi/finalization-barrier smpi/grow-injected-times "
        "smpi/keep-temps smpi/pedantic smpi/simulate-computation smpi/trace-call-location "
        "smpi/trace-call-use-absolute-path tracing tracing/actor tracing/basic tracing/categorized "
        "tracing/disable-destroy tracing/disable_link tracing/disable_power tracing/platform "
        "tracing/platform/topology tracing/smpi tracing/smpi/computing tracing/smpi/display-sizes "
        "tracing/smpi/format/ti-one-file tracing/smpi/group tracing/smpi/internals tracing/smpi/sleeping "
        "tracing/uncategorized tracing/vm",
    [CFG_INT] =
        "bmf/max-iterations cmonkey/host cmonkey/link contexts/guard-size contexts/nthreads contexts/stack-size "
        "maxmin/concurrency-limit plugin/dvfs/max-pstate plugin/dvfs/min-pstate smpi/async-small-thresh "
        "smpi/list-leaks smpi/map smpi/np smpi/send-is-detached-thresh tracing/precision",
    [CFG_DOUBLE] =
        "bmf/precision cmonkey/time debug/breakpoint maxmin/precision network/TCP-gamma network/bandwidth-factor "
        "network/latency-factor network/loopback-bw network/loopback-lat network/weight-S plugin/dvfs/sampling-rate "
        "smpi/auto-shared-malloc-thresh smpi/cpu-threshold smpi/init smpi/iprobe smpi/iprobe-cpu-usage "
        "smpi/shared-malloc-blocksize smpi/test smpi/wtime surf/precision",
    [CFG_STRING] =
        "contexts/factory contexts/synchro cpu/model cpu/optim cpu/solver disk/model disk/solver host/model "
        "host/solver model-check/replay network/model network/optim network/solver ns3/TcpModel ns3/seed path "
        "plugin plugin/dvfs/governor smpi/IB-penalty-factors smpi/allgather smpi/allgatherv smpi/allreduce "
        "smpi/alltoall smpi/alltoallv smpi/barrier smpi/bcast smpi/bw-factor smpi/coll-selector "
        "smpi/comp-adjustment-file smpi/gather smpi/host-speed smpi/hostfile smpi/lat-factor smpi/ois smpi/or "
        "smpi/os smpi/privatization smpi/privatize-libs smpi/reduce smpi/reduce_scatter smpi/replay smpi/scatter "
        "smpi/shared-malloc smpi/shared-malloc-hugepage smpi/tmpdir tracing/comment tracing/comment-file "
        "tracing/filename tracing/smpi/format",
};

/* The values some string keys take: SimGrid's own message for one they do
 * not take names them. */
static const cfg_note cfg_choices[] = {
    {"network/model", "LV08, Constant, SMPI, IB, CM02, ns-3"}, {"host/model", "default, compound, ptask_L07"},
    {"cpu/model", "Cas01"}, {"cpu/optim", "Full, Lazy, TI"}, {NULL, NULL},
};

/* Keys herd sets from its own flags: given again, smpirun's line would
 * contradict them. */
static const cfg_note cfg_owned[] = {
    {"smpi/np", "--workers"}, {"smpi/hostfile", "--workers and --platform"},
    {"smpi/simulate-computation", "--measured-compute"}, {"smpi/host-speed", "--real-speed"}, {NULL, NULL},
};

/* The note of key in notes, or NULL. */
static const char *cfg_note_of(const cfg_note *notes, const char *key)
{
    for (; notes->key; notes++)
        if (!strcmp(notes->key, key))
            return notes->text;
    return NULL;
}

/* Edits from a to b (Levenshtein), for "did you mean"; keys are short. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (la >= 64 || lb >= 64)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            best = row[j] + 1 < best ? row[j] + 1 : best;
            best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* A value as SimGrid reads one of type t (xbt's config parser: the whole
 * string, no spaces). */
static bool cfg_value_ok(cfg_type t, const char *v)
{
    static const char *const bools[] = {"yes", "no", "on", "off", "true", "false", "1", "0"};
    char *end;
    errno = 0;
    switch (t) {
    case CFG_BOOL:
        for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++)
            if (!strcmp(v, bools[i]))
                return true;
        return false;
    case CFG_INT: {
        long x = strtol(v, &end, 0);
        return *v && !isspace((unsigned char)*v) && !*end && !errno && x >= INT_MIN && x <= INT_MAX;
    }
    case CFG_DOUBLE: {
        double x = strtod(v, &end);
        return *v && !isspace((unsigned char)*v) && !*end && !errno && !isnan(x);
    }
    case CFG_STRING:
        return true;
    }
    return false;
}

/* --sim-cfg KEY:VALUE, checked against SimGrid's keys before smpirun sees
 * it; prints why and returns -1 when it is not one SimGrid would take. */
static int check_sim_cfg(const char *kv)
{
    const char *colon = strchr(kv, ':');
    if (!colon || colon == kv) {
        fprintf(stderr, "herd: --sim-cfg: expected KEY:VALUE, a SimGrid configuration such as network/crosstraffic:no, "
                        "got '%s'\n", kv);
        return -1;
    }
    char key[128];
    if ((size_t)(colon - kv) >= sizeof key) {
        fprintf(stderr, "herd: --sim-cfg: '%.40s...' is not a SimGrid configuration key\n", kv);
        return -1;
    }
    snprintf(key, sizeof key, "%.*s", (int)(colon - kv), kv);
    const char *val = colon + 1;
    char near[64] = "";
    size_t best = SIZE_MAX;
    int type = -1;
    for (int t = 0; t < NCFG_TYPES && type < 0; t++)
        for (const char *k = cfg_keys[t]; *k && type < 0; k += strcspn(k, " "), k += *k == ' ') {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)strcspn(k, " "), k);
            size_t d = edit_distance(key, name);
            type = d == 0 ? t : -1;
            if (d < best)
                best = d, snprintf(near, sizeof near, "%s", name);
        }
    if (type < 0) {
        fprintf(stderr, "herd: --sim-cfg: '%s' is not one of SimGrid 3.32's configuration keys", key);
        if (best <= 3)
            fprintf(stderr, " (did you mean '%s'?)", near);
        fputc('\n', stderr);
        return -1;
    }
    const char *owner = cfg_note_of(cfg_owned, key), *choices = cfg_note_of(cfg_choices, key);
    if (owner) {
        fprintf(stderr, "herd: --sim-cfg %s: herd sets it from %s\n", key, owner);
        return -1;
    }
    static const char *const expected[] = {
        [CFG_BOOL] = "yes, no, on, off, true, false, 1 or 0",
        [CFG_INT] = "an integer",
        [CFG_DOUBLE] = "a number",
        [CFG_STRING] = "a string",
    };
    bool ok = cfg_value_ok((cfg_type)type, val);
    if (ok && choices) { /* "A, B, C" */
        ok = false;
        size_t n = strlen(val);
        for (const char *c = choices; *c && !ok; c += strcspn(c, ",") + (c[strcspn(c, ",")] ? 2 : 0))
            ok = n && strcspn(c, ",") == n && !strncmp(c, val, n);
    }
    if (!ok) {
        fprintf(stderr, "herd: --sim-cfg %s: expected %s%s, got '%s'\n", key, choices ? "one of " : "",
                choices ? choices : expected[type], val);
        return -1;
    }
    return 0;
}

/* ---- a user's platform file --------------------------------------------- */

enum { SIM_MAX_WORKERS = 4096 };

/* The hosts of a user's platform file, in the file's order: how many it
 * makes, and the names of the first SIM_MAX_WORKERS (owned: free each). */
typedef struct platform_hosts {
    size_t n, nnames;
    char *names[SIM_MAX_WORKERS];
} platform_hosts;

/* What the start-tag handler sees while expat reads the file. */
typedef struct platform_reader {
    XML_Parser xp;
    platform_hosts *h;
    char root[128]; /* the root element's name */
    herd_err err;   /* what a well-formed file has wrong (status 0: nothing) */
} platform_reader;

/* Stops the parse at the element at hand, saying why. */
#define PLATFORM_FAIL(r, fmt, ...)                                                                                 \
    (herd_err_set(&(r)->err, HERD_EINVAL, "line %lu: " fmt, (unsigned long)XML_GetCurrentLineNumber((r)->xp),     \
                  __VA_ARGS__),                                                                                    \
     XML_StopParser((r)->xp, XML_FALSE))

/* Counts one more host and keeps its name (NULL: out of memory) while there is room. */
static bool platform_add(platform_reader *r, char *name)
{
    if (!name) {
        PLATFORM_FAIL(r, "%s", "out of memory");
        return false;
    }
    r->h->names[r->h->nnames++] = name;
    r->h->n++;
    return true;
}

/* One number of a radical as SimGrid reads it (std::stoi): spaces, a sign,
 * digits, whatever follows up to `end` ignored; false where stoi throws. */
static bool radical_int(const char *s, const char *end, long *v)
{
    char *e;
    errno = 0;
    *v = strtol(s, &e, 10);
    return e > s && e <= end && !errno && *v >= INT_MIN && *v <= INT_MAX;
}

/* The hosts of a <cluster> or <cabinet>: PREFIX N SUFFIX for each N of its
 * radical ("0-15", "0-3,8,10-11"); false where SimGrid would abort on it. */
static bool platform_radical(platform_reader *r, const char *prefix, const char *radical, const char *suffix)
{
    for (const char *g = radical;;) {
        const char *end = g + strcspn(g, ","), *dash = memchr(g, '-', (size_t)(end - g));
        long lo, hi;
        if (!radical_int(g, dash ? dash : end, &lo) ||
            (dash && (memchr(dash + 1, '-', (size_t)(end - dash - 1)) || !radical_int(dash + 1, end, &hi))))
            return false;
        if (!dash)
            hi = lo;
        for (long k = lo; k <= hi; k++) {
            if (r->h->nnames == SIM_MAX_WORKERS) { /* the rest only counted */
                r->h->n += (size_t)(hi - k + 1);
                break;
            }
            char *name;
            if (!platform_add(r, asprintf(&name, "%s%ld%s", prefix, k, suffix) < 0 ? NULL : name))
                return true; /* stopped: the failure is said */
        }
        if (!*end)
            return true;
        g = end + 1;
    }
}

static const char *xml_attr(const XML_Char **atts, const char *name)
{
    for (; *atts; atts += 2)
        if (!strcmp(atts[0], name))
            return atts[1];
    return NULL;
}

/* Every start tag: the root's name, and the hosts of <host> and <peer> (id)
 * and of <cluster> and <cabinet> (prefix, radical, suffix). */
static void XMLCALL platform_start(void *ctx, const XML_Char *name, const XML_Char **atts)
{
    platform_reader *r = ctx;
    if (!r->root[0])
        snprintf(r->root, sizeof r->root, "%s", name);
    bool range = !strcmp(name, "cluster") || !strcmp(name, "cabinet");
    if (!range && strcmp(name, "host") && strcmp(name, "peer"))
        return;
    static const char *const need[] = {"id", "prefix", "radical", "suffix"};
    const char *v[4];
    for (size_t i = 0; i < (range ? 4 : 1); i++)
        if (!(v[i] = xml_attr(atts, need[i]))) {
            PLATFORM_FAIL(r, "<%s> has no %s", name, need[i]);
            return;
        }
    if (!range) {
        if (r->h->nnames < SIM_MAX_WORKERS)
            platform_add(r, strdup(v[0]));
        else
            r->h->n++;
    } else if (!platform_radical(r, v[1], v[2], v[3])) {
        PLATFORM_FAIL(r, "<%s id=\"%s\">: radical \"%s\" is not N, N-M or a list of them separated by commas", name,
                      v[0], v[2]);
    }
}

/* A DOCTYPE with an internal subset ([...]: entities, attribute lists):
 * SimGrid's own reader does not take one, and aborts. */
static void XMLCALL platform_doctype(void *ctx, const XML_Char *name, const XML_Char *sysid, const XML_Char *pubid,
                                     int has_internal_subset)
{
    (void)name, (void)sysid, (void)pubid;
    platform_reader *r = ctx;
    if (has_internal_subset)
        PLATFORM_FAIL(r, "%s", "a DOCTYPE with an internal subset ([...]), which SimGrid's reader aborts on");
}

/* The most hosts a platform may make on this machine: SimGrid keeps some
 * 3.7 KB of its own per host (a cluster of 100,000 hosts ran in 381 MB),
 * counted as 4 KB, within half the physical memory. */
static size_t platform_max_hosts(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    double mem = pages > 0 && page > 0 ? (double)pages * (double)page : 4e9;
    return (size_t)(mem / 2 / 4096);
}

static void platform_hosts_free(platform_hosts *h)
{
    for (size_t i = 0; i < h->nnames; i++)
        free(h->names[i]);
    h->n = h->nnames = 0;
}

/* Reads a user's platform file before SimGrid does (SimGrid aborts with a
 * backtrace on a file it cannot parse, exit 134): well-formed XML, read by
 * expat (a DOCTYPE's internal subset is read, no external entity), a
 * <platform> root, and at least one host, whose names go into h. Prints what
 * is wrong, with its line, and returns -1. */
static int read_platform_file(const char *path, platform_hosts *h)
{
    enum { CHUNK = 1 << 16 };
    struct stat st;
    FILE *f = fopen(path, "rb");
    platform_reader r = {.h = h};
    enum XML_Status parsed = XML_STATUS_OK;
    int rc = -1;
    if (!f || fstat(fileno(f), &st) != 0) {
        fprintf(stderr, "herd: --platform %s: %s\n", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "herd: --platform %s: not a file\n", path);
        goto out;
    }
    if (!(r.xp = XML_ParserCreate(NULL))) {
        fprintf(stderr, "herd: --platform %s: out of memory\n", path);
        goto out;
    }
    XML_SetUserData(r.xp, &r);
    XML_SetStartElementHandler(r.xp, platform_start);
    XML_SetStartDoctypeDeclHandler(r.xp, platform_doctype);
    for (bool last = false; parsed == XML_STATUS_OK && !last;) {
        void *buf = XML_GetBuffer(r.xp, CHUNK);
        size_t n = buf ? fread(buf, 1, CHUNK, f) : 0;
        if (!buf || ferror(f)) {
            fprintf(stderr, "herd: --platform %s: %s\n", path, buf ? "cannot read it" : "out of memory");
            goto out;
        }
        last = n < CHUNK;
        parsed = XML_ParseBuffer(r.xp, (int)n, last);
    }
    if (r.err.status)
        fprintf(stderr, "herd: --platform %s: %s\n", path, r.err.msg);
    else if (parsed != XML_STATUS_OK)
        fprintf(stderr, "herd: --platform %s is not well-formed XML: line %lu: %s\n", path,
                (unsigned long)XML_GetCurrentLineNumber(r.xp), XML_ErrorString(XML_GetErrorCode(r.xp)));
    else if (strcmp(r.root, "platform"))
        fprintf(stderr, "herd: --platform %s: the root element is <%s>, not a SimGrid <platform>\n", path, r.root);
    else if (!h->n)
        fprintf(stderr, "herd: --platform %s has no host (no <host>, <cluster>, <cabinet> or <peer>)\n", path);
    else if (h->n > platform_max_hosts())
        fprintf(stderr, "herd: --platform %s makes %zu hosts; SimGrid needs about 4 KB of memory for each, and this "
                        "machine has room for %zu (half its memory)\n", path, h->n, platform_max_hosts());
    else
        rc = 0;
out:
    if (r.xp)
        XML_ParserFree(r.xp);
    if (f)
        fclose(f);
    if (rc)
        platform_hosts_free(h);
    return rc;
}

/* ---- herd sim ----------------------------------------------------------- */

typedef struct sim_opts {
    size_t workers; /* 0: the platform's size */
    const char *platform, *link, *host_speed, *real_speed, *keep, *bin, *paje;
    herd__str_list slow, cfg;
    bool measured, dry_run, verbose, list;
    double timeout_s, step_overhead_s, agent_wake_us;
} sim_opts;

#define AT(f) offsetof(sim_opts, f)
#define B HERD_OPT_BOUNDED
#define NONEMPTY HERD_OPT_NONEMPTY

/* Flags of `herd sim`. */
static const herd_opt sim_opts_table[] = {
    {.name = "workers", .type = HERD_OPT_SIZE, .offset = AT(workers), .flags = B, .min = 1, .max = SIM_MAX_WORKERS,
     .help = "simulated workers, one host each (default: the platform's size)"},
    {.name = "platform", .type = HERD_OPT_STR, .offset = AT(platform), .def = "ib-100g", .flags = NONEMPTY,
     .meta = "NAME|FILE", .help = "ib-100g, ib-56g, 10gbe, slow-cloud, or a SimGrid platform file"},
    {.name = "link", .type = HERD_OPT_STR, .offset = AT(link), .flags = NONEMPTY, .meta = "BW:LAT",
     .help = "each host's link, e.g. 25Gbps:5us (host to host latency)"},
    {.name = "host-speed", .type = HERD_OPT_STR, .offset = AT(host_speed), .flags = NONEMPTY, .meta = "SPEED",
     .help = "each host's sustained rate, e.g. 2Tf"},
    {.name = "slow", .type = HERD_OPT_CUSTOM, .offset = AT(slow), .flags = HERD_OPT_REPEAT, .meta = "RANK:FACTOR",
     .help = "worker RANK's host is FACTOR times slower (repeatable)", .parse = herd__opt_list_parse,
     .format = herd__opt_list_format},
    {.name = "measured-compute", .type = HERD_OPT_BOOL, .offset = AT(measured),
     .help = "time compute by measuring it here, not from FLOPs (not repeatable)"},
    {.name = "real-speed", .type = HERD_OPT_STR, .offset = AT(real_speed), .def = "20Gf", .flags = NONEMPTY,
     .meta = "SPEED", .help = "--measured-compute: this machine's rate"},
    {.name = "step-overhead", .type = HERD_OPT_DOUBLE, .offset = AT(step_overhead_s), .def = "0", .flags = B,
     .min = 0, .max = 3600, .meta = "S", .help = "a framework's cost per step, in seconds, beside the FLOPs"},
    {.name = "agent-wake-us", .type = HERD_OPT_DOUBLE, .offset = AT(agent_wake_us), .def = "0", .flags = B, .min = 0,
     .max = 1e6, .meta = "US",
     .help = "the time a rank's communication agent takes to wake and answer a window request, in microseconds, "
             "beside the network's (HERD_SIM_AGENT_US sets its default)"},
    {.name = "sim-cfg", .type = HERD_OPT_CUSTOM, .offset = AT(cfg), .flags = HERD_OPT_REPEAT, .meta = "KEY:VALUE",
     .help = "a SimGrid --cfg option (repeatable)", .parse = herd__opt_list_parse, .format = herd__opt_list_format},
    {.name = "paje", .type = HERD_OPT_STR, .offset = AT(paje), .flags = NONEMPTY, .meta = "FILE",
     .help = "write SimGrid's trace of every rank's MPI calls and compute (Paje format: vite, paje tools) to FILE"},
    {.name = "keep", .type = HERD_OPT_STR, .offset = AT(keep), .flags = NONEMPTY, .meta = "DIR",
     .help = "write the platform and host file into DIR and keep them"},
    {.name = "dry-run", .type = HERD_OPT_BOOL, .offset = AT(dry_run),
     .help = "write the files and print the smpirun command, run nothing"},
    {.name = "real-timeout", .type = HERD_OPT_DOUBLE, .offset = AT(timeout_s), .def = "86400",
     .flags = B | HERD_OPT_MIN_OPEN, .min = 0, .max = 2592000, .meta = "S",
     .help = "stop the simulation after S real seconds"},
    {.name = "bin", .type = HERD_OPT_STR, .offset = AT(bin), .flags = NONEMPTY, .meta = "PATH",
     .help = "the herd-sim binary (default: beside herd, or $HERD_SIM_BIN)"},
    {.name = "verbose", .type = HERD_OPT_BOOL, .offset = AT(verbose), .help = "show SimGrid's own messages"},
    {.name = "list", .type = HERD_OPT_BOOL, .offset = AT(list), .help = "list the named platforms"},
    {0},
};

#undef NONEMPTY
#undef B
#undef AT

static void sim_usage(FILE *out)
{
    fprintf(out, "usage: herd sim [flags] -- train|bench ... [their flags]\n\n"
                    "Runs a herd command on a simulated cluster (SimGrid): every worker is a host of the\n"
                    "platform; time is simulated (wall_s), real_s is what it took here.\n\n");
    herd_opt_print(sim_opts_table, out);
    fprintf(out, "\nplatforms:\n");
    for (size_t i = 0; i < NPLATFORMS; i++)
        fprintf(out, "  %-12s %s\n", platforms[i].name, platforms[i].desc);
}

/* The cluster to write: one of the table, possibly overridden. */
typedef struct sim_cluster {
    const char *name;
    const char *file;    /* a user's platform file (nothing generated), or NULL */
    platform_hosts file_hosts;
    double bw, lat, speed;
    double real_speed;            /* --measured-compute: this machine's flop/s */
    double slow[SIM_MAX_WORKERS]; /* per host: speed divisor (0: 1) */
} sim_cluster;

static int write_platform(const sim_cluster *c, size_t n, const char *xml_path, const char *hosts_path)
{
    if (c->file && c->file_hosts.n < n) {
        fprintf(stderr, "herd: --platform %s has %zu host(s) (<host>, <peer>, <cluster> or <cabinet>), fewer than "
                        "--workers %zu\n", c->file, c->file_hosts.n, n);
        return -1;
    }
    FILE *hosts = fopen(hosts_path, "w");
    if (!hosts) {
        fprintf(stderr, "herd: cannot write %s: %s\n", hosts_path, strerror(errno));
        return -1;
    }
    if (c->file) { /* its first n hosts */
        for (size_t i = 0; i < n; i++)
            fprintf(hosts, "%s\n", c->file_hosts.names[i]);
        int bad = ferror(hosts);
        bad |= fclose(hosts) != 0;
        if (bad)
            fprintf(stderr, "herd: cannot write %s\n", hosts_path);
        return bad ? -1 : 0;
    }
    FILE *x = fopen(xml_path, "w");
    if (!x) {
        fprintf(stderr, "herd: cannot write %s: %s\n", xml_path, strerror(errno));
        fclose(hosts);
        return -1;
    }
    fprintf(x, "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
               "<platform version=\"4.1\">\n"
               "  <!-- herd sim: %s, %zu hosts; each host's link %.6g Gb/s each way, %.6g us host to host;"
               " %.6g Gflop/s per host -->\n"
               "  <zone id=\"%s\" routing=\"Cluster\">\n",
            c->name, n, c->bw * 8e-9, c->lat * 1e6, c->speed * 1e-9, c->name);
    for (size_t i = 0; i < n; i++) {
        double speed = c->speed / (c->slow[i] > 0 ? c->slow[i] : 1.0);
        fprintf(x, "    <host id=\"node-%zu\" speed=\"%.15gf\"/>\n", i, speed);
        fprintf(x, "    <link id=\"node-%zu_link\" bandwidth=\"%.15gBps\" latency=\"%.15gs\" sharing_policy=\"SPLITDUPLEX\"/>\n",
                i, c->bw, c->lat / 2);
        fprintf(x, "    <host_link id=\"node-%zu\" up=\"node-%zu_link_UP\" down=\"node-%zu_link_DOWN\"/>\n", i, i, i);
        fprintf(hosts, "node-%zu\n", i);
    }
    fprintf(x, "    <router id=\"%s-router\"/>\n  </zone>\n</platform>\n", c->name);
    int bad = ferror(x) | ferror(hosts);
    bad |= fclose(x) != 0;
    bad |= fclose(hosts) != 0;
    if (bad)
        fprintf(stderr, "herd: cannot write the platform into %s\n", xml_path);
    return bad ? -1 : 0;
}

/* Fills c from the options; prints why and returns -1 when they do not fit. */
static int resolve_cluster(const sim_opts *o, sim_cluster *c, size_t *workers)
{
    char dir[PATH_MAX], path[PATH_MAX + 64];
    const char *name = o->platform;
    const sim_platform *p = NULL;
    for (size_t i = 0; i < NPLATFORMS; i++)
        if (!strcmp(platforms[i].name, name))
            p = &platforms[i];
    memset(c, 0, sizeof *c);
    c->name = name;
    if (parse_unit(o->real_speed, strlen(o->real_speed), speed_units, &c->real_speed)) {
        fprintf(stderr, "herd: --real-speed: expected a rate such as 20Gf, got '%s'\n", o->real_speed);
        return -1;
    }
    if (!p) {
        /* a file: as given, or platforms/NAME.xml beside the binary */
        const char *env = getenv("HERD_PLATFORMS");
        if (strchr(name, '/') || strstr(name, ".xml"))
            snprintf(path, sizeof path, "%s", name);
        else if (env)
            snprintf(path, sizeof path, "%s/%s.xml", env, name);
        else
            snprintf(path, sizeof path, "%s/../platforms/%s.xml", herd__cli_self_dir(dir, sizeof dir), name);
        if (access(path, R_OK) != 0) {
            fprintf(stderr, "herd: unknown platform '%s' (choose ib-100g, ib-56g, 10gbe, slow-cloud, or a SimGrid "
                            "platform file; 'herd sim --list')\n", name);
            return -1;
        }
        if (o->link || o->host_speed || o->slow.n) {
            fprintf(stderr, "herd: --link, --host-speed and --slow apply to the named platforms, not to the file %s\n",
                    path);
            return -1;
        }
        if (read_platform_file(path, &c->file_hosts) != 0)
            return -1;
        c->file = strdup(path);
        if (!c->file) {
            fprintf(stderr, "herd: out of memory\n");
            return -1;
        }
        if (*workers == 0) {
            fprintf(stderr, "herd: --workers is needed with a platform file\n");
            return -1;
        }
        return 0;
    }
    c->bw = p->bw, c->lat = p->lat, c->speed = p->speed;
    if (*workers == 0)
        *workers = p->nodes;
    if (o->link) {
        const char *colon = strchr(o->link, ':');
        if (!colon || parse_unit(o->link, (size_t)(colon - o->link), bw_units, &c->bw) ||
            parse_unit(colon + 1, strlen(colon + 1), lat_units, &c->lat)) {
            fprintf(stderr, "herd: --link: expected BW:LAT such as 25Gbps:5us (bps/Mbps/Gbps/GBps..., s/ms/us/ns), "
                            "got '%s'\n", o->link);
            return -1;
        }
    }
    if (o->host_speed && parse_unit(o->host_speed, strlen(o->host_speed), speed_units, &c->speed)) {
        fprintf(stderr, "herd: --host-speed: expected a rate such as 2Tf or 500Gf, got '%s'\n", o->host_speed);
        return -1;
    }
    for (size_t i = 0; i < o->slow.n; i++) {
        const char *s = o->slow.v[i], *colon = strchr(s, ':');
        char rank[32];
        size_t r;
        double f;
        if (!colon || (size_t)(colon - s) >= sizeof rank ||
            (snprintf(rank, sizeof rank, "%.*s", (int)(colon - s), s), herd__parse_size(rank, &r)) ||
            herd__parse_double(colon + 1, &f) || !(f >= 1 && f <= 1e9)) {
            fprintf(stderr, "herd: --slow: expected RANK:FACTOR with FACTOR in [1, 1e9] (e.g. 3:10), got '%s'\n", s);
            return -1;
        }
        if (r >= *workers || r >= sizeof c->slow / sizeof c->slow[0]) {
            fprintf(stderr, "herd: --slow %s names worker %zu, but there are %zu workers\n", s, r, *workers);
            return -1;
        }
        c->slow[r] = f;
    }
    return 0;
}

/* What `herd sim -- train` keeps of the child's output. */
typedef struct train_out {
    char *summary; /* the last JSON summary line */
} train_out;

static void on_train_line(void *ctx, const char *line)
{
    train_out *t = ctx;
    if (!strncmp(line, "{\"algo\":", 8)) {
        free(t->summary);
        t->summary = strdup(line);
        return;
    }
    if (!strncmp(line, "Execution failed with code ", 27))
        return; /* smpirun's; herd sim's exit status says it */
    printf("%s\n", line);
    fflush(stdout);
}

static bool has_arg(char **args, int n, const char *flag)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(args[i], flag) || (!strncmp(args[i], flag, strlen(flag)) && args[i][strlen(flag)] == '='))
            return true;
    return false;
}

#ifdef HERD_CLI_NO_SPAWN
/* The CLI fuzzer: everything up to starting a simulation. */
static int sim_launch(const sim_opts *o, const sim_cluster *c, size_t workers, char **cmd, int ncmd)
{
    (void)o, (void)c, (void)workers, (void)cmd, (void)ncmd;
    return 1;
}
#else
/* The herd-sim binary to run, into bin: --bin, $HERD_SIM_BIN, or beside herd. */
static int sim_binary(const sim_opts *o, char *bin, size_t cap)
{
    char dir[PATH_MAX];
    const char *envbin = getenv("HERD_SIM_BIN");
    if (o->bin)
        snprintf(bin, cap, "%s", o->bin);
    else if (envbin && *envbin)
        snprintf(bin, cap, "%s", envbin);
    else
        snprintf(bin, cap, "%s/herd-sim", herd__cli_self_dir(dir, sizeof dir));
    if (access(bin, X_OK) == 0)
        return 0;
    fprintf(stderr, "herd: %s: %s (herd-sim is built by 'make' when SimGrid's smpicc is installed: "
                    "scripts/install-deps)\n", bin, strerror(errno));
    return -1;
}

/* Where the platform and host files go: --keep DIR, or a new temporary one. */
static int sim_workdir(const sim_opts *o, char *dir, size_t cap)
{
    if (o->keep) {
        if (mkdir(o->keep, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, "herd: --keep %s: %s\n", o->keep, strerror(errno));
            return -1;
        }
        snprintf(dir, cap, "%s", o->keep);
        return 0;
    }
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, cap, "%s/herd-sim-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(dir))
        return 0;
    fprintf(stderr, "herd: cannot create a directory in %s: %s\n", tmp && *tmp ? tmp : "/tmp", strerror(errno));
    return -1;
}

/* Removes the temporary directory of sim_workdir and all in it: the platform,
 * the host file, and what SMPI may have left there (its TMPDIR: a copy of
 * herd-sim per rank, removed once loaded) when it was killed. */
static void sim_workdir_remove(const char *dir)
{
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            unlinkat(dirfd(d), e->d_name, 0);
    if (d)
        closedir(d);
    rmdir(dir);
}

/* smpirun's command line and the strings it points to. */
typedef struct smpirun_line {
    char **argv;
    char np[32], speed_env[96], paje_cfg[4200];
    char **cfgs; /* "--cfg=KEY:VALUE" of each --sim-cfg */
    size_t ncfgs;
} smpirun_line;

static void smpirun_line_free(smpirun_line *l)
{
    for (size_t i = 0; i < l->ncfgs; i++)
        free(l->cfgs[i]);
    free(l->cfgs);
    free(l->argv);
}

/* smpirun -np N -platform P -hostfile H [--cfg ...] herd-sim CMD... [--json] */
static int smpirun_line_make(const sim_opts *o, const sim_cluster *c, size_t workers, const char *bin, const char *xml,
                             const char *hosts, char **cmd, int ncmd, bool json, smpirun_line *l)
{
    size_t cap = 32 + 2 * (size_t)o->cfg.n + (size_t)ncmd, n = 0;
    memset(l, 0, sizeof *l);
    l->argv = calloc(cap, sizeof *l->argv);
    l->cfgs = calloc(o->cfg.n + 1, sizeof *l->cfgs);
    for (; l->argv && l->cfgs && l->ncfgs < o->cfg.n; l->ncfgs++) {
        const char *kv = o->cfg.v[l->ncfgs];
        size_t len = strlen("--cfg=") + strlen(kv) + 1;
        if (!(l->cfgs[l->ncfgs] = malloc(len)))
            break;
        snprintf(l->cfgs[l->ncfgs], len, "--cfg=%s", kv);
    }
    if (!l->argv || !l->cfgs || l->ncfgs < o->cfg.n) {
        fprintf(stderr, "herd: out of memory\n");
        return -1;
    }
    char **argv = l->argv;
    snprintf(l->np, sizeof l->np, "%zu", workers);
    const char *smpirun = getenv("HERD_SMPIRUN");
    argv[n++] = (char *)(smpirun && *smpirun ? smpirun : "/usr/bin/smpirun");
    argv[n++] = "-np", argv[n++] = l->np;
    argv[n++] = "-platform", argv[n++] = c->file ? (char *)c->file : (char *)xml;
    argv[n++] = "-hostfile", argv[n++] = (char *)hosts;
    if (!o->verbose)
        argv[n++] = "-quiet", argv[n++] = "--log=root.thres:error";
    argv[n++] = "--cfg=network/model:CM02";
    argv[n++] = "--cfg=network/crosstraffic:0";
    /* SMPI charges each MPI_Test/Iprobe 0.1 ms by default, growing while it
     * fails: a polled wait would cost far more simulated time than the
     * message (herd's polling loops sleep, in simulated time, between polls) */
    argv[n++] = "--cfg=smpi/test:0";
    argv[n++] = "--cfg=smpi/iprobe:0";
    argv[n++] = "--cfg=smpi/grow-injected-times:no";
    /* SMPI's collectives as Open MPI picks them. Its defaults are slow twice
     * over: MPI_Win_create's internal allgather posts all n^2 transfers at
     * once, which SimGrid's network model pays ~n^4 for (105 s of real time
     * per window at 256 ranks, 0.3 s with Open MPI's choice), and the default
     * MPI_Allreduce (--allreduce native) takes 90x longer in simulated time
     * than Open MPI's Rabenseifner at 256 ranks. */
    argv[n++] = "--cfg=smpi/coll-selector:ompi";
    if (o->measured) {
        /* herd-sim times the compute itself (src/comm/sim.h), by each rank's
         * thread's CPU time: a thread per rank */
        snprintf(l->speed_env, sizeof l->speed_env, "HERD_SIM_REAL_SPEED=%.17g", c->real_speed);
        argv[n++] = "--cfg=contexts/factory:thread";
    }
    argv[n++] = "--cfg=smpi/simulate-computation:no";
    if (o->paje) { /* SimGrid writes it from smpirun's directory: the path is made absolute */
        char cwd[4000] = "";
        if (o->paje[0] != '/' && !getcwd(cwd, sizeof cwd)) {
            fprintf(stderr, "herd: --paje %s: cannot tell the current directory: %s\n", o->paje, strerror(errno));
            return -1;
        }
        snprintf(l->paje_cfg, sizeof l->paje_cfg, "--cfg=tracing/filename:%s%s%s", cwd, cwd[0] ? "/" : "", o->paje);
        argv[n++] = "--cfg=tracing:yes";
        argv[n++] = "--cfg=tracing/smpi:yes";
        argv[n++] = "--cfg=tracing/smpi/computing:yes";
        argv[n++] = l->paje_cfg;
    }
    for (size_t i = 0; i < l->ncfgs; i++)
        argv[n++] = l->cfgs[i];
    argv[n++] = (char *)bin;
    for (int i = 0; i < ncmd; i++)
        argv[n++] = cmd[i];
    if (json)
        argv[n++] = "--json";
    argv[n] = NULL;
    return 0;
}

/* The summary as `herd train` gives it, engine "sim", real_s beside wall_s. */
static void report(const sim_opts *o, const sim_cluster *c, size_t workers, char *summary, double real_s, bool json)
{
    char *eng = strstr(summary, "\"engine\":\"mpi\"");
    if (eng)
        memcpy(eng, "\"engine\":\"sim\"", strlen("\"engine\":\"sim\""));
    double sim_s = 0;
    const char *ws = strstr(summary, "\"wall_s\":");
    if (ws)
        sim_s = strtod(ws + 9, NULL);
    fprintf(stderr, "herd sim: %s, %zu hosts: %.6g s simulated, %.1f s real\n", c->name, workers, sim_s, real_s);
    if (!json)
        return;
    size_t len = strlen(summary);
    if (len && summary[len - 1] == '}')
        summary[len - 1] = 0;
    printf("%s,\"real_s\":%.3f,\"platform\":\"%s\",\"compute\":\"%s\",\"step_overhead_s\":%.9g", summary, real_s,
           c->name, o->measured ? "measured" : "model", o->step_overhead_s);
    if (!c->file)
        printf(",\"link_gbps\":%.6g,\"link_lat_us\":%.6g,\"host_gflops\":%.6g", c->bw * 8e-9, c->lat * 1e6,
               c->speed * 1e-9);
    printf("}\n");
}

static int sim_launch(const sim_opts *o, const sim_cluster *c, size_t workers, char **cmd, int ncmd)
{
    char dir[PATH_MAX], bin[PATH_MAX + 16], xml[PATH_MAX + 32], hosts[PATH_MAX + 32];
    /* from here a signal stops smpirun's process group and the files go */
    herd__cli_catch_signals();
    if (sim_binary(o, bin, sizeof bin) != 0)
        return o->bin ? 2 : 1; /* --bin naming no program is a usage error; herd-sim not built, a failure */
    if (sim_workdir(o, dir, sizeof dir) != 0)
        return 1;
    snprintf(xml, sizeof xml, "%s/platform.xml", dir);
    snprintf(hosts, sizeof hosts, "%s/hosts", dir);
    int rc = 1;
    train_out out = {0};
    smpirun_line line = {0};
    /* herd-sim runs the mpi engine, which it picks by itself (its launcher is smpirun) */
    bool train = !strcmp(cmd[0], "train"), user_json = has_arg(cmd, ncmd, "--json");
    if (write_platform(c, workers, xml, hosts) != 0 ||
        smpirun_line_make(o, c, workers, bin, xml, hosts, cmd, ncmd, train && !user_json, &line) != 0)
        goto out;
    if (o->dry_run || o->verbose) {
        fprintf(stderr, "HERD_SIM_COMPUTE=%s HERD_SIM_STEP_OVERHEAD=%.9g HERD_SIM_AGENT_US=%.9g",
                o->measured ? "measured" : "model", o->step_overhead_s, o->agent_wake_us);
        if (o->measured)
            fprintf(stderr, " %s", line.speed_env);
        for (size_t i = 0; line.argv[i]; i++)
            fprintf(stderr, " %s", line.argv[i]);
        fputc('\n', stderr);
    }
    if (o->dry_run) {
        rc = 0;
        goto out;
    }
    char overhead[64];
    snprintf(overhead, sizeof overhead, "HERD_SIM_STEP_OVERHEAD=%.17g", o->step_overhead_s);
    char wake[64];
    snprintf(wake, sizeof wake, "HERD_SIM_AGENT_US=%.17g", o->agent_wake_us);
    /* SMPI's temporary files (a copy of herd-sim per rank) into herd's
     * directory: they go with it, however smpirun ends (smpirun's own
     * -tmpdir takes the directory for the program) */
    char tmpdir[PATH_MAX + 8];
    snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", dir);
    char *env[6] = {o->measured ? "HERD_SIM_COMPUTE=measured" : "HERD_SIM_COMPUTE=model", overhead, wake};
    size_t nenv = 3;
    if (o->measured)
        env[nenv++] = line.speed_env;
    if (!o->keep)
        env[nenv++] = tmpdir;
    double real_s = 0;
    herd__spawn run = {.argv = line.argv, .env = env, .timeout_s = o->timeout_s,
                       .grace_s = HERD__SPAWN_GRACE_S, .on_line = train ? on_train_line : NULL, .ctx = &out};
    rc = herd__cli_spawn(&run, &real_s);
    if (herd__cli_stop_signal())
        goto out; /* stopped: no summary, whatever the run printed */
    if (rc == 0 && train && !out.summary) {
        fprintf(stderr, "herd: the simulation ended without a summary\n");
        rc = 1;
    }
    if (rc == 0 && train)
        report(o, c, workers, out.summary, real_s, user_json);
    else if (train && user_json && out.summary) /* a failed run's summary ("status":"error") */
        printf("%s\n", out.summary);
out:
    smpirun_line_free(&line);
    free(out.summary);
    if (!o->keep && !o->dry_run)
        sim_workdir_remove(dir);
    int sig = herd__cli_stop_signal();
    if (sig) { /* one line, whatever --quiet says: the run did not end */
        fprintf(stderr, "herd: sim stopped by %s: the simulation was ended%s\n", herd__cli_signal_name(sig),
                o->keep || o->dry_run ? "" : ", its files removed");
        return 128 + sig;
    }
    return rc;
}
#endif

int herd__cli_sim(int argc, char **argv)
{
    sim_opts o = {0};
    herd__flags_defaults(sim_opts_table, &o);
    /* the agent's wake: a property of the hosts, set once for every run a
     * protocol (herd compare, bench/) makes: HERD_SIM_AGENT_US, the flag's
     * default (checked as the flag's value is) */
    const char *wake = getenv("HERD_SIM_AGENT_US");
    herd_err err = {0};
    if (wake && *wake && herd_opt_parse(herd_opt_find(sim_opts_table, "agent-wake-us"), &o, wake, &err) < 0) {
        fprintf(stderr, "herd: HERD_SIM_AGENT_US='%.64s': %s\n", wake, err.msg);
        return 2;
    }
    herd__flag_cmd fc = {.cmd = "sim", .opts = sim_opts_table, .obj = &o, .usage = sim_usage};
    int dash = herd__flags_parse(&fc, argc, argv, 2, false);
    for (size_t i = 0; i < o.cfg.n; i++) {
        if (check_sim_cfg(o.cfg.v[i]) != 0)
            return 2;
        /* measured compute is each rank's thread's CPU time (src/comm/sim.h) */
        if (o.measured && !strncmp(o.cfg.v[i], "contexts/factory:", strlen("contexts/factory:"))) {
            fprintf(stderr, "herd: --sim-cfg %s: --measured-compute runs SimGrid's thread contexts (it times each "
                            "rank's thread)\n", o.cfg.v[i]);
            return 2;
        }
    }
    if (o.list) {
        for (size_t i = 0; i < NPLATFORMS; i++)
            printf("%-12s %s\n", platforms[i].name, platforms[i].desc);
        return 0;
    }
    if (dash + 1 >= argc) {
        fprintf(stderr, "herd: sim: give the command to simulate after '--', e.g. "
                        "herd sim --workers 16 -- train --algo allreduce (see 'herd sim --help')\n");
        return 2;
    }
    char **cmd = argv + dash + 1;
    int ncmd = argc - dash - 1;
    if (strcmp(cmd[0], "train") && strcmp(cmd[0], "bench")) {
        fprintf(stderr, "herd: sim runs 'train' or 'bench', not '%s'\n", cmd[0]);
        return 2;
    }
    if (has_arg(cmd, ncmd, "--slow")) {
        fprintf(stderr, "herd: give --slow RANK:FACTOR to herd sim, before '--': on the sim engine a straggler is a "
                        "slower host\n");
        return 2;
    }
    if (has_arg(cmd, ncmd, "--fail") || has_arg(cmd, ncmd, "--checkpoint")) {
        fprintf(stderr, "herd: sim does not take --fail or --checkpoint: all simulated workers live in one process, "
                        "where a worker that stops for good ends the whole simulation\n");
        return 2;
    }
    sim_cluster *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "herd: out of memory\n");
        return 1;
    }
    size_t workers = o.workers;
    int rc = 2;
    if (resolve_cluster(&o, c, &workers) == 0) {
        char wbuf[32];
        snprintf(wbuf, sizeof wbuf, "%zu", workers);
        for (int i = 0; i + 1 < ncmd; i++)
            if (!strcmp(cmd[i], "--workers") && strcmp(cmd[i + 1], wbuf)) {
                fprintf(stderr, "herd: '%s --workers %s' after '--' does not match herd sim's %zu workers\n", cmd[0],
                        cmd[i + 1], workers);
                goto out;
            }
        rc = sim_launch(&o, c, workers, cmd, ncmd);
    }
out:
    free((char *)c->file);
    platform_hosts_free(&c->file_hosts);
    free(c);
    return rc;
}
