/* herd sim — runs a herd command on a simulated cluster (DESIGN.md, the sim
 * engine): writes a SimGrid platform and host file, starts smpirun with
 * herd-sim (herd compiled with smpicc, one simulated host per worker) and,
 * for `train`, reports the same summary as `herd train` with wall_s in
 * simulated seconds and real_s beside it.
 *
 * The network is a non-blocking cluster: every host has its own full-duplex
 * link of bandwidth BW and latency LAT/2 to a crossbar, so a message between
 * two hosts sees latency LAT and bandwidth BW (SimGrid's CM02 model without
 * SMPI's calibration factors: the numbers of a platform mean what they say).
 * Compute costs the step's FLOPs over the host's speed (src/run/simtime.h);
 * --slow makes one host's speed FACTOR times lower. */
#include "cli/sim.h"

#include "cli/flags.h"
#include "cli/spawn.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
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

/* ---- herd sim ----------------------------------------------------------- */

typedef struct sim_opts {
    size_t workers;
    const char *platform, *link, *host_speed, *real_speed, *keep, *bin;
    herd__str_list slow, cfg;
    bool measured, dry_run, verbose, list;
    double timeout_s, step_overhead_s;
} sim_opts;

static void sim_usage(FILE *out);

/* Flags of `herd sim`; the table points into o. */
static void sim_flags(sim_opts *o, herd__flag *f)
{
    const herd__flag t[] = {
        {"workers", HERD__FLAG_SIZE, &o->workers, "N", "simulated workers, one host each (default: the platform's size)", NULL},
        {"platform", HERD__FLAG_STR, &o->platform, "NAME|FILE", "ib-100g (default), ib-56g, 10gbe, slow-cloud, or a SimGrid platform file", NULL},
        {"link", HERD__FLAG_STR, &o->link, "BW:LAT", "each host's link, e.g. 25Gbps:5us (host to host latency)", NULL},
        {"host-speed", HERD__FLAG_STR, &o->host_speed, "SPEED", "each host's sustained rate, e.g. 2Tf", NULL},
        {"slow", HERD__FLAG_LIST, &o->slow, "RANK:FACTOR", "worker RANK's host is FACTOR times slower (repeatable)", NULL},
        {"measured-compute", HERD__FLAG_BOOL, &o->measured, NULL, "time compute by measuring it here, not from FLOPs (not repeatable)", NULL},
        {"real-speed", HERD__FLAG_STR, &o->real_speed, "SPEED", "--measured-compute: this machine's rate (default 20Gf)", NULL},
        {"step-overhead", HERD__FLAG_DOUBLE, &o->step_overhead_s, "S", "a framework's cost per step, in seconds, beside the FLOPs (default 0)", NULL},
        {"sim-cfg", HERD__FLAG_LIST, &o->cfg, "KEY:VALUE", "a SimGrid --cfg option (repeatable)", NULL},
        {"keep", HERD__FLAG_STR, &o->keep, "DIR", "write the platform and host file into DIR and keep them", NULL},
        {"dry-run", HERD__FLAG_BOOL, &o->dry_run, NULL, "write the files and print the smpirun command, run nothing", NULL},
        {"real-timeout", HERD__FLAG_DOUBLE, &o->timeout_s, "S", "stop the simulation after S real seconds (default 86400)", NULL},
        {"bin", HERD__FLAG_STR, &o->bin, "PATH", "the herd-sim binary (default: beside herd, or $HERD_SIM_BIN)", NULL},
        {"verbose", HERD__FLAG_BOOL, &o->verbose, NULL, "show SimGrid's own messages", NULL},
        {"list", HERD__FLAG_BOOL, &o->list, NULL, "list the named platforms", NULL},
        {NULL, 0, NULL, NULL, NULL, NULL},
    };
    memcpy(f, t, sizeof t);
}

enum { SIM_NFLAGS = 16 };

static void sim_usage(FILE *out)
{
    sim_opts o = {0};
    herd__flag f[SIM_NFLAGS];
    sim_flags(&o, f);
    fprintf(out, "usage: herd sim [flags] -- train|bench ... [their flags]\n\n"
                    "Runs a herd command on a simulated cluster (SimGrid): every worker is a host of the\n"
                    "platform; time is simulated (wall_s), real_s is what it took here.\n\n");
    herd__flags_print(f, out);
    fprintf(out, "\nplatforms:\n");
    for (size_t i = 0; i < NPLATFORMS; i++)
        fprintf(out, "  %-12s %s\n", platforms[i].name, platforms[i].desc);
}

/* The cluster to write: one of the table, possibly overridden. */
typedef struct sim_cluster {
    const char *name;
    const char *file;    /* a user's platform file (nothing generated), or NULL */
    double bw, lat, speed;
    double slow[4096];   /* per host: speed divisor (0: 1) */
} sim_cluster;

/* A user's platform file: its host names, in order, into hosts (one per line). */
static int scan_platform_file(const char *path, size_t need, FILE *hosts)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "herd: --platform %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t found = 0;
    char line[4096];
    while (found < need && fgets(line, sizeof line, f)) {
        const char *h = strstr(line, "<host ");
        if (h) {
            const char *id = strstr(h, " id=\"");
            const char *end = id ? strchr(id + 5, '"') : NULL;
            if (end) {
                fprintf(hosts, "%.*s\n", (int)(end - id - 5), id + 5);
                found++;
            }
            continue;
        }
        const char *c = strstr(line, "<cluster ");
        if (!c)
            continue;
        char attr[3][256] = {"", "", ""};
        static const char *const names[3] = {" prefix=\"", " radical=\"", " suffix=\""};
        for (int k = 0; k < 3; k++) {
            const char *a = strstr(c, names[k]);
            const char *e = a ? strchr(a + strlen(names[k]), '"') : NULL;
            if (e && (size_t)(e - a) < sizeof attr[k] + strlen(names[k]))
                snprintf(attr[k], sizeof attr[k], "%.*s", (int)(e - a - strlen(names[k])), a + strlen(names[k]));
        }
        /* radical: "0-15" or "0-3,8,10-11" */
        for (char *tok = strtok(attr[1], ","); tok && found < need; tok = strtok(NULL, ",")) {
            unsigned long lo = 0, hi = 0;
            char *dash = strchr(tok, '-');
            lo = strtoul(tok, NULL, 10);
            hi = dash ? strtoul(dash + 1, NULL, 10) : lo;
            for (unsigned long k = lo; k <= hi && found < need; k++, found++)
                fprintf(hosts, "%s%lu%s\n", attr[0], k, attr[2]);
        }
    }
    fclose(f);
    if (found < need) {
        fprintf(stderr, "herd: --platform %s has %zu host(s) (<host id=...> or <cluster radical=...>), "
                        "fewer than --workers %zu\n", path, found, need);
        return -1;
    }
    return 0;
}

static int write_platform(const sim_cluster *c, size_t n, const char *xml_path, const char *hosts_path)
{
    FILE *hosts = fopen(hosts_path, "w");
    if (!hosts) {
        fprintf(stderr, "herd: cannot write %s: %s\n", hosts_path, strerror(errno));
        return -1;
    }
    if (c->file) {
        int rc = scan_platform_file(c->file, n, hosts);
        return fclose(hosts) != 0 || rc ? -1 : 0;
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
    const char *name = o->platform ? o->platform : "ib-100g";
    const sim_platform *p = NULL;
    for (size_t i = 0; i < NPLATFORMS; i++)
        if (!strcmp(platforms[i].name, name))
            p = &platforms[i];
    memset(c, 0, sizeof *c);
    c->name = name;
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

/* smpirun's command line and the strings it points to. */
typedef struct smpirun_line {
    char **argv;
    char np[32], speed_cfg[96];
    char *cfgs; /* --cfg=... of --sim-cfg, 300 bytes each */
} smpirun_line;

static void smpirun_line_free(smpirun_line *l)
{
    free(l->argv);
    free(l->cfgs);
}

/* smpirun -np N -platform P -hostfile H [--cfg ...] herd-sim CMD... [--json] */
static int smpirun_line_make(const sim_opts *o, const sim_cluster *c, size_t workers, const char *bin, const char *xml,
                             const char *hosts, char **cmd, int ncmd, bool json, smpirun_line *l)
{
    size_t cap = 32 + 2 * (size_t)o->cfg.n + (size_t)ncmd, n = 0;
    memset(l, 0, sizeof *l);
    l->argv = calloc(cap, sizeof *l->argv);
    l->cfgs = calloc(o->cfg.n + 1, 300);
    if (!l->argv || !l->cfgs) {
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
        double rs = 20e9;
        if (o->real_speed && parse_unit(o->real_speed, strlen(o->real_speed), speed_units, &rs)) {
            fprintf(stderr, "herd: --real-speed: expected a rate such as 20Gf, got '%s'\n", o->real_speed);
            return -1;
        }
        snprintf(l->speed_cfg, sizeof l->speed_cfg, "--cfg=smpi/host-speed:%.17gf", rs);
        argv[n++] = "--cfg=smpi/simulate-computation:yes";
        argv[n++] = l->speed_cfg;
    } else {
        argv[n++] = "--cfg=smpi/simulate-computation:no";
    }
    for (size_t i = 0; i < o->cfg.n; i++) {
        char *s = l->cfgs + 300 * i;
        snprintf(s, 300, "--cfg=%s", o->cfg.v[i]);
        argv[n++] = s;
    }
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
    if (sim_binary(o, bin, sizeof bin) != 0 || sim_workdir(o, dir, sizeof dir) != 0)
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
        fprintf(stderr, "HERD_SIM_COMPUTE=%s HERD_SIM_STEP_OVERHEAD=%.9g", o->measured ? "measured" : "model",
                o->step_overhead_s);
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
    char *env[] = {o->measured ? "HERD_SIM_COMPUTE=measured" : "HERD_SIM_COMPUTE=model", overhead, NULL};
    double real_s = 0;
    rc = herd__cli_spawn(line.argv, env, o->timeout_s > 0 ? o->timeout_s : 86400, train ? on_train_line : NULL, &out,
                         &real_s);
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
    if (!o->keep && !o->dry_run) {
        unlink(xml);
        unlink(hosts);
        rmdir(dir);
    }
    return rc;
}
#endif

int herd__cli_sim(int argc, char **argv)
{
    /* --workers unset is SIZE_MAX here (the platform's size); a 0 given is refused */
    sim_opts o = {.timeout_s = 86400, .workers = SIZE_MAX};
    herd__flag f[SIM_NFLAGS];
    sim_flags(&o, f);
    int dash = herd__flags_parse(&(herd__flag_cmd){.cmd = "sim", .flags = f, .usage = sim_usage}, argc, argv, 2, false);
    if (o.workers == 0 || (o.workers > 4096 && o.workers != SIZE_MAX)) {
        fprintf(stderr, "herd: --workers must be in [1, 4096], got %zu\n", o.workers);
        return 2;
    }
    if (o.workers == SIZE_MAX)
        o.workers = 0;
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
    if (!(o.step_overhead_s >= 0 && o.step_overhead_s <= 3600)) {
        fprintf(stderr, "herd: --step-overhead must be in [0, 3600] seconds, got %g\n", o.step_overhead_s);
        return 2;
    }
    if (!(o.timeout_s > 0)) {
        fprintf(stderr, "herd: --real-timeout must be positive\n");
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
    free(c);
    return rc;
}
