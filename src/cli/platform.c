/* The cluster `herd sim` simulates (platform.h): one of the named
 * platforms, possibly overridden by herd sim's flags, whose platform file
 * it writes, or a user's SimGrid platform file, read here before SimGrid
 * reads it.
 *
 * The network is a non-blocking cluster: every host has its own full-duplex
 * link of bandwidth BW and latency LAT/2 to a crossbar, so a message between
 * two hosts sees latency LAT and bandwidth BW (SimGrid's CM02 model without
 * SMPI's calibration factors: the numbers of a platform mean what they say).
 * A host's traffic to itself (an accumulate into its own shard of a
 * window) takes its loopback, a copy at memory speed, not its network link
 * twice. Compute costs the step's FLOPs over the host's speed
 * (src/comm/sim.h); --slow makes one host's speed FACTOR times lower: it
 * is a pstate of the cluster's hosts, which herd-sim sets on that host.
 * SimGrid's <cluster> is the one form with a loopback per host. */
#include "cli/platform.h"

#include "cli/spawn.h"
#include "core/inpath.h"
#include "core/outpath.h"
#include "herd/herd_status.h"

#include <errno.h>
#include <expat.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
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

void herd__platforms_print(FILE *out, const char *prefix)
{
    for (size_t i = 0; i < NPLATFORMS; i++)
        fprintf(out, "%s%-12s %s\n", prefix, platforms[i].name, platforms[i].desc);
}

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

/* ---- a user's platform file --------------------------------------------- */

/* What the start-tag handler sees while expat reads the file. */
typedef struct platform_reader {
    XML_Parser xp;
    herd__platform_hosts *h;
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
            if (r->h->nnames == HERD__SIM_MAX_WORKERS) { /* the rest only counted */
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
        if (r->h->nnames < HERD__SIM_MAX_WORKERS)
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

static void platform_hosts_free(herd__platform_hosts *h)
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
static int read_platform_file(const char *path, herd__platform_hosts *h)
{
    enum { CHUNK = 1 << 16 };
    struct stat st;
    int fd;
    /* a FIFO is refused, not waited on (core/inpath.h) */
    herd_status ost = herd__inpath_open(path, &fd, &st);
    FILE *f = ost == HERD_OK ? fdopen(fd, "rb") : NULL;
    platform_reader r = {.h = h};
    enum XML_Status parsed = XML_STATUS_OK;
    int rc = -1;
    if (ost == HERD_EINVAL) {
        fprintf(stderr, "herd: --platform %s: is %s, not a file\n", path, herd__inpath_kind(st.st_mode));
        goto out;
    }
    if (!f) {
        fprintf(stderr, "herd: --platform %s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
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

/* ---- the cluster ---------------------------------------------------------- */

/* Fills c from the options; prints why and returns -1 when they do not fit. */
int herd__cluster_resolve(const herd__cluster_flags *o, herd__cluster *c, size_t *workers)
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
        if (o->link || o->host_speed || o->slow->n) {
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
    for (size_t i = 0; i < o->slow->n; i++) {
        const char *s = o->slow->v[i], *colon = strchr(s, ':');
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

/* The distinct --slow factors of the first n hosts, in host order, into
 * f (HERD__SIM_MAX_WORKERS of them at most); with pstate, each host's
 * pstate: 0 at the platform's speed, k + 1 at f[k]. Returns their number. */
static size_t cluster_factors(const herd__cluster *c, size_t n, double *f, unsigned *pstate)
{
    size_t nf = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        if (c->slow[i] > 1) {
            while (k < nf && f[k] != c->slow[i])
                k++;
            if (k == nf)
                f[nf++] = c->slow[i];
            k++;
        }
        if (pstate)
            pstate[i] = (unsigned)k;
    }
    return nf;
}

int herd__cluster_pstates(const herd__cluster *c, size_t n, char *buf, size_t cap)
{
    static const char var[] = "HERD_SIM_PSTATES=";
    double f[HERD__SIM_MAX_WORKERS];
    unsigned pstate[HERD__SIM_MAX_WORKERS];
    size_t len = (size_t)snprintf(buf, cap, "%s", var);
    if (c->file)
        return len < cap ? 0 : -1;
    cluster_factors(c, n, f, pstate);
    for (size_t i = 0; i < n && len < cap; i++)
        if (pstate[i])
            len += (size_t)snprintf(buf + len, cap - len, "%s%zu:%u", len > sizeof var - 1 ? "," : "", i, pstate[i]);
    return len < cap ? 0 : -1;
}

/* One of the files herd sim writes (--keep DIR's may be there already):
 * through core/outpath.h, so that a link is followed and a FIFO that no
 * process reads is refused, not waited on; says why it cannot. */
static FILE *out_open(const char *path)
{
    herd_err err = {0};
    FILE *f;
    if (herd__outpath_fopen(path, "w", "herd sim: output file", &f, &err) < 0)
        fprintf(stderr, "herd: %s\n", err.msg);
    return f;
}

int herd__cluster_write(const herd__cluster *c, size_t n, const char *xml_path, const char *hosts_path)
{
    if (c->file && c->file_hosts.n < n) {
        fprintf(stderr, "herd: --platform %s has %zu host(s) (<host>, <peer>, <cluster> or <cabinet>), fewer than "
                        "--workers %zu\n", c->file, c->file_hosts.n, n);
        return -1;
    }
    FILE *hosts = out_open(hosts_path);
    if (!hosts)
        return -1;
    if (c->file) { /* its first n hosts */
        for (size_t i = 0; i < n; i++)
            fprintf(hosts, "%s\n", c->file_hosts.names[i]);
        int bad = ferror(hosts);
        bad |= fclose(hosts) != 0;
        if (bad)
            fprintf(stderr, "herd: cannot write %s\n", hosts_path);
        return bad ? -1 : 0;
    }
    FILE *x = out_open(xml_path);
    if (!x) {
        fclose(hosts);
        return -1;
    }
    /* pstate 0 is the platform's speed, pstate k the k-th distinct --slow
     * factor's (herd-sim sets a slow host's pstate: herd__cluster_pstates) */
    double factors[HERD__SIM_MAX_WORKERS];
    size_t nf = cluster_factors(c, n, factors, NULL);
    fprintf(x, "<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
               "<platform version=\"4.1\">\n"
               "  <!-- herd sim: %s, %zu hosts; each host's link %.6g Gb/s each way, %.6g us host to host;"
               " %.6g Gflop/s per host; to itself a host copies at %.6g GB/s -->\n",
            c->name, n, c->bw * 8e-9, c->lat * 1e6, c->speed * 1e-9, HERD__SIM_LOOPBACK_BW * 1e-9);
    for (size_t k = 0; k < nf; k++)
        fprintf(x, "  <!-- pstate %zu: %.6g times slower (herd sim --slow) -->\n", k + 1, factors[k]);
    fprintf(x, "  <cluster id=\"%s\" prefix=\"node-\" radical=\"0-%zu\" suffix=\"\" speed=\"%.15gf", c->name, n - 1,
            c->speed);
    for (size_t k = 0; k < nf; k++)
        fprintf(x, ",%.15gf", c->speed / factors[k]);
    fprintf(x, "\"\n           bw=\"%.15gBps\" lat=\"%.15gs\" sharing_policy=\"SPLITDUPLEX\" loopback_bw=\"%.15gBps\""
               " loopback_lat=\"%.15gs\"/>\n</platform>\n",
            c->bw, c->lat / 2, HERD__SIM_LOOPBACK_BW, HERD__SIM_LOOPBACK_LAT);
    for (size_t i = 0; i < n; i++)
        fprintf(hosts, "node-%zu\n", i);
    int bad = ferror(x) | ferror(hosts);
    bad |= fclose(x) != 0;
    bad |= fclose(hosts) != 0;
    if (bad)
        fprintf(stderr, "herd: cannot write the platform into %s\n", xml_path);
    return bad ? -1 : 0;
}

void herd__cluster_free(herd__cluster *c)
{
    free((char *)c->file);
    platform_hosts_free(&c->file_hosts);
}
