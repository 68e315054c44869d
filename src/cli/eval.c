/* herd eval and herd export — the model a checkpoint keeps (herd_ckpt.h:
 * worker 0's weights, or the algorithm's center, average or server model):
 * its test accuracy and loss, or its weights as safetensors or NPY files.
 * Both read the newest valid checkpoint of --checkpoint DIR, falling back
 * to an older one, with a warning, when a newer one does not verify.
 * Usage errors exit 2, a failure 1; --help prints on stdout. */
#include "cli/eval.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "herd/herd_ckpt.h"
#include "cli/flags.h"
#include "core/json.h"
#include "core/outpath.h"
#include "run/ckpt_run.h"

/* What herd_ckpt_latest had to say of newer checkpoints (skipped as not
 * valid) or misnamed ones, one line each. */
static void print_warnings(const char *warn, bool quiet)
{
    if (warn[0] && !quiet)
        fprintf(stderr, "herd: warning: %s", warn);
}

/* The summary line of a failure under --json. */
static void print_error_json(const char *cmd, herd_status st, const char *msg)
{
    char m[1100];
    herd__json_quote(m, sizeof m, msg);
    herd__json_printf(stdout, "{\"command\":\"%s\",\"status\":\"error\",\"code\":\"%s\",\"error\":%s}\n", cmd,
                      herd_err_name(st), m);
}

/* A run that failed: the message, and its JSON line; exit status 1. */
static int failed(const char *cmd, bool json, herd_status st, const herd_err *err)
{
    const char *msg = err->msg[0] ? err->msg : herd_strerror(st);
    fprintf(stderr, "herd: %s\n", msg);
    if (json)
        print_error_json(cmd, st, msg);
    return st == HERD_EDATA ? 2 : 1; /* data not the checkpoint's: refused, as a usage error */
}

/* What herd eval and herd export were asked and read. */
typedef struct model_cli {
    const char *cmd; /* "eval" or "export" */
    herd_eval_config eval;
    herd_export_config export;
    const char *dump_logits, *dump_inputs;
    bool json, quiet;
} model_cli;

/* The checkpoint's model, as both commands name it: a line for people
 * ("lenet (sgd, center, the run's final model, step 40) from DIR/ckpt-40.herd")
 * and the first members of the JSON summary. */
typedef struct model_said {
    char line[1200], json[1400];
} model_said;

static void say_model(model_said *m, const char *file, const herd_ckpt_info *in, const herd_ckpt_kept *k)
{
    char qf[1100], qm[64], qa[64], qk[64];
    snprintf(m->line, sizeof m->line, "%s (%s, %s%s, step %" PRIu64 ") from %s", in->model, in->algo,
             strcmp(k->eval_model, "worker0") ? k->eval_model : "worker 0's weights",
             k->final ? ", the run's final model" : "", in->step, file);
    herd__json_quote(qf, sizeof qf, file);
    herd__json_quote(qm, sizeof qm, in->model);
    herd__json_quote(qa, sizeof qa, in->algo);
    herd__json_quote(qk, sizeof qk, k->eval_model);
    snprintf(m->json, sizeof m->json,
             "\"checkpoint\":%s,\"algo\":%s,\"model\":%s,\"eval_model\":%s,\"final\":%s,\"step\":%" PRIu64
             ",\"epoch\":%" PRIu64 ",\"workers\":%u",
             qf, qa, qm, qk, k->final ? "true" : "false", in->step, in->epoch, (unsigned)in->workers);
}

/* A command that succeeded: the warnings, its line for people (stdout, or
 * stderr under --json unless --quiet), its JSON summary (`rest`: the
 * command's own members). */
static int succeeded(const model_cli *o, const char *warn, const model_said *m, const char *what, const char *rest)
{
    print_warnings(warn, o->quiet);
    if (!o->json || !o->quiet)
        fprintf(o->json ? stderr : stdout, "%s: %s\n", m->line, what);
    if (o->json && herd__json_printf(stdout, "{\"command\":\"%s\",\"status\":\"ok\",%s,%s}\n", o->cmd, m->json,
                                     rest) < 0) {
        fprintf(stderr, "herd: cannot write the summary to stdout: %s\n", strerror(errno));
        return 1;
    }
    return 0;
}

static const char *const export_formats[] = {"safetensors", "npy", "pytorch", NULL}; /* herd_export_format's order */
_Static_assert(sizeof(herd_export_format) == sizeof(int), "a CHOICE row's enum is an int");

#define AT(f) offsetof(model_cli, f)

static const herd_opt eval_opts[] = {
    {.name = "checkpoint", .type = HERD_OPT_STR, .offset = AT(eval.checkpoint_dir), .flags = HERD_OPT_NONEMPTY,
     .meta = "DIR|FILE", .help = "the checkpoint directory (its newest valid checkpoint) or a checkpoint file (required)"},
    {.name = "data", .type = HERD_OPT_STR, .offset = AT(eval.data), .flags = HERD_OPT_NONEMPTY, .meta = "S",
     .help = "test data (default: the run's --data as the checkpoint records it)"},
    {.name = "test-limit", .type = HERD_OPT_SIZE, .offset = AT(eval.test_limit), .flags = HERD_OPT_BOUNDED, .min = 0,
     .max = 1000000000, .help = "evaluate the first N test examples (0: all)"},
    {.name = "threads", .type = HERD_OPT_SIZE, .offset = AT(eval.threads), .def = "1", .flags = HERD_OPT_BOUNDED,
     .min = 1, .max = 256, .help = "compute threads (the run's --threads gives its figures to the last digit)"},
    {.name = "dump-logits", .type = HERD_OPT_STR, .offset = AT(dump_logits), .flags = HERD_OPT_NONEMPTY,
     .meta = "FILE", .help = "write every example's logits to FILE (NPY, N x classes float32)"},
    {.name = "dump-inputs", .type = HERD_OPT_STR, .offset = AT(dump_inputs), .flags = HERD_OPT_NONEMPTY,
     .meta = "FILE", .help = "write the examples as the model takes them to FILE (NPY, N x C x H x W, standardized)"},
    {.name = "other-data", .type = HERD_OPT_BOOL, .offset = AT(eval.other_data),
     .help = "score data other than the run's (the checkpoint's data digests differ: refused otherwise, exit 2); the "
             "summary gives both digests"},
    {.name = "json", .type = HERD_OPT_BOOL, .offset = AT(json), .help = "print a one-line JSON summary on stdout"},
    {.name = "quiet", .type = HERD_OPT_BOOL, .offset = AT(quiet), .help = "nothing on stderr but errors"},
    {0},
};

static const herd_opt export_opts[] = {
    {.name = "checkpoint", .type = HERD_OPT_STR, .offset = AT(export.checkpoint_dir), .flags = HERD_OPT_NONEMPTY,
     .meta = "DIR|FILE", .help = "the checkpoint directory (its newest valid checkpoint) or a checkpoint file (required)"},
    {.name = "data", .type = HERD_OPT_STR, .offset = AT(export.data), .flags = HERD_OPT_NONEMPTY, .meta = "S",
     .help = "the run's data, for the input shape of a checkpoint that does not record it (an older herd's)"},
    {.name = "format", .type = HERD_OPT_CHOICE, .offset = AT(export.format), .def = "safetensors",
     .choices = export_formats, .meta = "F",
     .help = "OUT as one file (safetensors), a directory of NAME.npy (npy), or a directory of model.safetensors "
             "and model.py, which rebuilds the network in PyTorch (pytorch)"},
    {.name = "json", .type = HERD_OPT_BOOL, .offset = AT(json), .help = "print a one-line JSON summary on stdout"},
    {.name = "quiet", .type = HERD_OPT_BOOL, .offset = AT(quiet), .help = "nothing on stderr but errors"},
    {0},
};

#undef AT

static void model_usage(bool export, FILE *out)
{
    if (export)
        fprintf(out, "usage: herd export --checkpoint DIR [--format safetensors|npy] OUT\n\n"
               "Writes the weights of the model a training run keeps (as herd eval scores it), from the newest\n"
               "valid checkpoint of DIR, as named float32 tensors: conv1.weight (out, in, kh, kw), fc1.weight\n"
               "(out, in), their biases, bn1.weight/bias/running_mean/running_var, numbered by kind in forward\n"
               "order. safetensors: one file, with herd's version, the model, the algorithm and the input shape\n"
               "under __metadata__. npy: a directory (made if missing), one NPY 1.0 file per tensor, NAME.npy.\n\n");
    else
        fprintf(out, "usage: herd eval --checkpoint DIR [flags]\n\n"
               "Scores the model a training run keeps (worker 0's weights, or its algorithm's center, average or\n"
               "server model: the one its own evaluation scores) on the test set, from the newest valid checkpoint\n"
               "of DIR. The checkpoint of a run's last step holds exactly what its final evaluation scored.\n\n");
    herd_opt_print(export ? export_opts : eval_opts, out);
}

static void eval_usage(FILE *out) { model_usage(false, out); }
static void export_usage(FILE *out) { model_usage(true, out); }

/* Whether --json is among the arguments (before "--"): known before they
 * are parsed, so a usage error prints its JSON line too. */
static bool json_asked(int argc, char **argv)
{
    for (int i = 2; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--json"))
            return true;
    return false;
}

/* ---- herd eval ------------------------------------------------------------ */

/* --dump-logits and --dump-inputs. */
static herd_status write_dumps(const model_cli *o, const herd_eval_result *res, herd_err *err)
{
    const herd_ckpt_kept *k = &res->kept;
    size_t lshape[2] = {res->n, k->nclasses}, xshape[4] = {res->n, k->c, k->h, k->w};
    herd_status st = HERD_OK;
    if (o->dump_logits)
        st = herd_npy_write(o->dump_logits, lshape, 2, res->logits, err);
    if (st == HERD_OK && o->dump_inputs)
        st = herd_npy_write(o->dump_inputs, xshape, 4, res->inputs, err);
    return st;
}

int herd__cli_eval(int argc, char **argv)
{
    model_cli o = {.cmd = "eval"};
    herd__flags_defaults(eval_opts, &o);
    bool json = json_asked(argc, argv);
    herd__flag_cmd c = {.cmd = "eval", .opts = eval_opts, .obj = &o, .usage = eval_usage, .json = json};
    int end = herd__flags_parse(&c, argc, argv, 2, false);
    if (end < argc)
        herd__usage_error_json(json, "eval", "unknown flag '%s'", argv[end]);
    if (!o.eval.checkpoint_dir)
        herd__usage_error_json(json, "eval", "--checkpoint DIR is required");
    const char *dumps[][2] = {{"--dump-logits", o.dump_logits}, {"--dump-inputs", o.dump_inputs}};
    for (size_t i = 0; i < 2; i++)
        if (dumps[i][1] && herd__ckpt_holds(o.eval.checkpoint_dir, dumps[i][1]))
            herd__usage_error_json(json, "eval", "%s %s is a checkpoint's file in %s; herd eval will not write over "
                                   "the checkpoints it reads", dumps[i][0], dumps[i][1], o.eval.checkpoint_dir);
    if (o.dump_logits && o.dump_inputs && herd__outpath_same(o.dump_logits, o.dump_inputs))
        herd__usage_error_json(json, "eval", "--dump-logits %s and --dump-inputs %s are the same file: each needs its own",
                               o.dump_logits, o.dump_inputs);
    o.eval.keep_outputs = o.dump_logits || o.dump_inputs;
    herd_eval_result res;
    herd_err err = {0};
    herd_status st = herd_eval(&o.eval, &res, &err);
    if (st == HERD_OK)
        st = write_dumps(&o, &res, &err);
    herd_eval_result_free(&res);
    if (st < 0)
        return failed("eval", o.json, st, &err);
    model_said m;
    char what[160], rest[512];
    say_model(&m, res.checkpoint, &res.info, &res.kept);
    snprintf(what, sizeof what, "test accuracy %.4f, loss %.4f on %zu examples%s", res.test_acc, res.test_loss, res.n,
             res.other_data ? " of other data than the run's (--other-data)" : "");
    int len = snprintf(rest, sizeof rest,
                       "\"nparams\":%zu,\"test_n\":%zu,\"test_acc\":%.6f,\"test_loss\":%.17g,\"eval_s\":%.6f,"
                       "\"train_digest\":\"%016" PRIx64 "\",\"test_digest\":\"%016" PRIx64 "\"",
                       res.nparams, res.n, res.test_acc, res.test_loss, res.eval_s, res.train_digest, res.test_digest);
    if (res.other_data && len > 0 && (size_t)len < sizeof rest)
        snprintf(rest + len, sizeof rest - (size_t)len,
                 ",\"checkpoint_train_digest\":\"%016" PRIx64 "\",\"checkpoint_test_digest\":\"%016" PRIx64 "\"",
                 res.kept.train_digest, res.kept.test_digest);
    return succeeded(&o, res.warn, &m, what, rest);
}

/* ---- herd export ---------------------------------------------------------- */

int herd__cli_export(int argc, char **argv, const char *version)
{
    model_cli o = {.cmd = "export"};
    herd__flags_defaults(export_opts, &o);
    bool json = json_asked(argc, argv);
    herd__flag_cmd c = {.cmd = "export", .opts = export_opts, .obj = &o, .usage = export_usage, .json = json};
    herd_export_config *x = &o.export;
    /* flags and the one OUT in any order; after "--", OUT alone */
    for (int i = 2; (i = herd__flags_parse(&c, argc, argv, i, true)) < argc;) {
        bool dashes = !strcmp(argv[i], "--");
        if (dashes && ++i >= argc)
            break;
        if (x->out)
            herd__usage_error_json(json, "export", "unexpected argument '%s' (OUT is '%s')", argv[i], x->out);
        x->out = argv[i++];
        if (dashes && i < argc)
            herd__usage_error_json(json, "export", "unexpected argument '%s' (OUT is '%s')", argv[i], x->out);
    }
    if (!x->checkpoint_dir)
        herd__usage_error_json(json, "export", "--checkpoint DIR is required");
    if (!x->out || !*x->out)
        herd__usage_error_json(json, "export", "name the file or directory to write (OUT)");
    x->version = version;
    herd_export_result res;
    herd_err err = {0};
    herd_status st = herd_export(x, &res, &err);
    if (st < 0)
        return failed("export", o.json, st, &err);
    model_said m;
    char what[1200], out[1100], rest[1300];
    say_model(&m, res.checkpoint, &res.info, &res.kept);
    const char *format = export_formats[x->format];
    snprintf(what, sizeof what, "%zu tensors, %zu floats, written to %s (%s)", res.ntensors, res.nfloats, x->out,
             format);
    herd__json_quote(out, sizeof out, x->out);
    snprintf(rest, sizeof rest, "\"out\":%s,\"format\":\"%s\",\"tensors\":%zu,\"floats\":%zu", out, format,
             res.ntensors, res.nfloats);
    return succeeded(&o, res.warn, &m, what, rest);
}
