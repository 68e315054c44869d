/* herd sim — runs a herd command on a simulated cluster (docs/design.md, the sim
 * engine): writes a SimGrid platform and host file, starts smpirun with
 * herd-sim (herd compiled with smpicc, one simulated host per worker) and,
 * for `train`, reports the same summary as `herd train` with wall_s in
 * simulated seconds and real_s beside it.
 *
 * The cluster it simulates, named or a user's platform file, is
 * platform.c's. */
#include "cli/sim.h"

#include "cli/flags.h"
#include "cli/platform.h"
#include "cli/spawn.h"
#include "core/inpath.h"
#include "core/outpath.h"
#include "herd/herd_status.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
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
    {.name = "workers", .type = HERD_OPT_SIZE, .offset = AT(workers), .flags = B, .min = 1,
     .max = HERD__SIM_MAX_WORKERS, .help = "simulated workers, one host each (default: the platform's size)"},
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
    herd__platforms_print(out, "  ");
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
static int sim_launch(const sim_opts *o, const herd__cluster *c, size_t workers, char **cmd, int ncmd)
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

/* --paje FILE, which SimGrid opens itself, looked at before it runs
 * (core/outpath.h): a new name, a regular file, a link to one, or a
 * character device (/dev/null). A FIFO would hold the simulation in
 * open() until some process read it; a directory or a dangling link it
 * cannot write. Says why and returns -1 for those. */
static int paje_check(const char *path)
{
    herd__outpath out;
    herd_err err = {0};
    struct stat sb;
    if (herd__outpath_check(path, "--paje", &out, &err) < 0) {
        fprintf(stderr, "herd: %s\n", err.msg);
        return -1;
    }
    if (out.in_place && stat(path, &sb) == 0 && !S_ISCHR(sb.st_mode)) {
        fprintf(stderr, "herd: --paje %s: is %s; SimGrid writes the trace itself, into a file or a character device\n",
                path, herd__inpath_kind(sb.st_mode));
        return -1;
    }
    return 0;
}

/* smpirun -np N -platform P -hostfile H [--cfg ...] herd-sim CMD... [--json] */
static int smpirun_line_make(const sim_opts *o, const herd__cluster *c, size_t workers, const char *bin,
                             const char *xml, const char *hosts, char **cmd, int ncmd, bool json, smpirun_line *l)
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
        if (paje_check(o->paje) != 0)
            return -1;
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
static void report(const sim_opts *o, const herd__cluster *c, size_t workers, char *summary, double real_s, bool json)
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

static int sim_launch(const sim_opts *o, const herd__cluster *c, size_t workers, char **cmd, int ncmd)
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
    size_t pcap = (size_t)HERD__SIM_MAX_WORKERS * 24 + 32;
    char *pstates = malloc(pcap);
    /* herd-sim runs the mpi engine, which it picks by itself (its launcher is smpirun) */
    bool train = !strcmp(cmd[0], "train"), user_json = has_arg(cmd, ncmd, "--json");
    if (!pstates)
        fprintf(stderr, "herd: out of memory\n");
    if (!pstates || herd__cluster_pstates(c, workers, pstates, pcap) != 0 ||
        herd__cluster_write(c, workers, xml, hosts) != 0 ||
        smpirun_line_make(o, c, workers, bin, xml, hosts, cmd, ncmd, train && !user_json, &line) != 0)
        goto out;
    if (o->dry_run || o->verbose) {
        fprintf(stderr, "HERD_SIM_COMPUTE=%s HERD_SIM_STEP_OVERHEAD=%.9g HERD_SIM_AGENT_US=%.9g %s",
                o->measured ? "measured" : "model", o->step_overhead_s, o->agent_wake_us, pstates);
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
    char *env[7] = {o->measured ? "HERD_SIM_COMPUTE=measured" : "HERD_SIM_COMPUTE=model", overhead, wake, pstates};
    size_t nenv = 4;
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
    free(pstates);
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
        herd__platforms_print(stdout, "");
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
    herd__cluster *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "herd: out of memory\n");
        return 1;
    }
    size_t workers = o.workers;
    int rc = 2;
    herd__cluster_flags cf = {.platform = o.platform, .link = o.link, .host_speed = o.host_speed,
                              .real_speed = o.real_speed, .slow = &o.slow};
    if (herd__cluster_resolve(&cf, c, &workers) == 0) {
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
    herd__cluster_free(c);
    free(c);
    return rc;
}
