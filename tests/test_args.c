/* Argument checks: every public function that returns a herd_status, called
 * with each bad argument it can be given (a NULL pointer it needs, a count
 * or index beyond its array or world, an unknown name, an enum out of
 * range), returns HERD_EINVAL, and where it has somewhere to say so (its
 * herd_err, herd_comm_last_error, herd_worker.err) a message naming the
 * argument, without crashing and before doing anything. One test a header.
 */
#include "harness.h"
#include "herd/herd.h"

#include <errno.h>
#include <stdint.h>
#include <sys/stat.h>

/* call is HERD_EINVAL, and err.msg names what. err is cleared first, so a
 * message left by an earlier call never passes for this one's. */
#define BAD(call, what)                                                       \
    do {                                                                      \
        err = (herd_err){0};                                                  \
        ASSERT_EQ_INT((call), HERD_EINVAL);                                   \
        ASSERT_STR_CONTAINS(err.msg, (what));                                 \
    } while (0)

/* The same for a call whose message goes to endpoint c. */
#define BAD_ON(c, call, what)                                                 \
    do {                                                                      \
        (c)->err = (herd_err){0};                                             \
        ASSERT_EQ_INT((call), HERD_EINVAL);                                   \
        ASSERT_STR_CONTAINS(herd_comm_last_error(c), (what));                 \
    } while (0)

/* A call that has nowhere to put a message: the status alone. */
#define BAD_ST(call) ASSERT_EQ_INT((call), HERD_EINVAL)

/* ---- herd_comm.h: the wrappers, the threads engine, the collectives ---- */

static void test_comm_p2p(void)
{
    herd_err err;
    herd_threads_world *tw = NULL;
    herd_comm *c = NULL;
    herd_req *r = NULL, *fake = (herd_req *)&err; /* never dereferenced: checked away first */
    float x = 1, y[2];
    bool done;

    BAD(herd_threads_world_create(2, NULL, &err), "out");
    BAD(herd_threads_world_create(0, &tw, &err), "nworkers");
    ASSERT_OK(herd_threads_world_create(2, &tw, NULL));
    BAD(herd_comm_threads_create(tw, 0, NULL, &err), "out");
    BAD(herd_comm_threads_create(NULL, 0, &c, &err), "world");
    BAD(herd_comm_threads_create(tw, 2, &c, &err), "rank 2");
    ASSERT_OK(herd_comm_threads_create(tw, 0, &c, NULL));

    /* a NULL endpoint has no err to name it in */
    BAD_ST(herd_comm_isend(NULL, 1, 0, &x, sizeof x, &r));
    BAD_ST(herd_comm_issend(NULL, 1, 0, &x, sizeof x, &r));
    BAD_ST(herd_comm_irecv(NULL, 1, 0, &x, sizeof x, &r));
    BAD_ST(herd_comm_send(NULL, 1, 0, &x, sizeof x));
    BAD_ST(herd_comm_recv(NULL, 1, 0, &x, sizeof x));
    BAD_ST(herd_comm_wait(NULL, fake));
    BAD_ST(herd_comm_test(NULL, fake, &done));
    BAD_ST(herd_comm_barrier(NULL));
    BAD_ST(herd_allreduce(NULL, &x, 1, NULL));
    BAD_ST(herd_broadcast(NULL, &x, sizeof x, 0));
    BAD_ST(herd_allgather(NULL, &x, y, sizeof x));

    BAD_ON(c, herd_comm_isend(c, 2, 0, &x, sizeof x, &r), "isend: peer 2");
    BAD_ON(c, herd_comm_isend(c, 1, 0, NULL, 4, &r), "isend: buf is NULL");
    BAD_ON(c, herd_comm_isend(c, 1, 0, &x, sizeof x, NULL), "isend: req is NULL");
    BAD_ON(c, herd_comm_isend(c, 1, -1, &x, sizeof x, &r), "tag -1");
    BAD_ON(c, herd_comm_issend(c, SIZE_MAX, 0, &x, sizeof x, &r), "issend: peer");
    BAD_ON(c, herd_comm_issend(c, 1, 0, NULL, 4, &r), "issend: buf is NULL");
    BAD_ON(c, herd_comm_issend(c, 1, 0, &x, sizeof x, NULL), "issend: req is NULL");
    BAD_ON(c, herd_comm_issend(c, 1, -2, &x, sizeof x, &r), "tag -2");
    BAD_ON(c, herd_comm_irecv(c, 2, 0, &x, sizeof x, &r), "irecv: peer 2");
    BAD_ON(c, herd_comm_irecv(c, 1, 0, NULL, 4, &r), "irecv: buf is NULL");
    BAD_ON(c, herd_comm_irecv(c, 1, 0, &x, sizeof x, NULL), "irecv: req is NULL");
    BAD_ON(c, herd_comm_irecv(c, 1, -1, &x, sizeof x, &r), "tag -1");
    BAD_ON(c, herd_comm_send(c, 5, 0, &x, sizeof x), "peer 5");
    BAD_ON(c, herd_comm_send(c, 1, 0, NULL, 4), "buf is NULL");
    BAD_ON(c, herd_comm_send(c, 1, -1, &x, sizeof x), "tag -1");
    BAD_ON(c, herd_comm_recv(c, 5, 0, &x, sizeof x), "peer 5");
    BAD_ON(c, herd_comm_recv(c, 1, 0, NULL, 4), "buf is NULL");
    BAD_ON(c, herd_comm_recv(c, 1, -1, &x, sizeof x), "tag -1");
    BAD_ON(c, herd_comm_wait(c, NULL), "wait: req is NULL");
    BAD_ON(c, herd_comm_test(c, NULL, &done), "test: req is NULL");
    BAD_ON(c, herd_comm_test(c, fake, NULL), "test: done is NULL");

    herd_allreduce_opts wire = {.wire = (herd_dtype)7}, impl = {.impl = (herd_allreduce_impl)9};
    BAD_ON(c, herd_allreduce(c, NULL, 3, NULL), "buf is NULL");
    BAD_ON(c, herd_allreduce(c, &x, 1, &wire), "wire");
    BAD_ON(c, herd_allreduce(c, &x, 1, &impl), "impl");
    BAD_ON(c, herd_allreduce(c, &x, SIZE_MAX / 2, NULL), "count");
    BAD_ON(c, herd_broadcast(c, NULL, 4, 0), "buf is NULL");
    BAD_ON(c, herd_broadcast(c, &x, sizeof x, 2), "root 2");
    BAD_ON(c, herd_allgather(c, NULL, y, sizeof x), "in is NULL");
    BAD_ON(c, herd_allgather(c, &x, NULL, sizeof x), "out is NULL");
    BAD_ON(c, herd_allgather(c, &x, y, SIZE_MAX / 2 + 1), "too large");
    ASSERT_TRUE(c->bytes_sent == 0 && c->bytes_recv == 0 && c->collectives == 0);
    herd_comm_free(c);
    herd_threads_world_free(tw);
}

/* Every window call with each bad argument, on an endpoint of a world of
 * one of engine e (a window is collective: one rank makes it alone). */
static void window_args(const herd_engine *e)
{
    herd_err err;
    herd_world *hw = NULL;
    herd_comm *c = NULL;
    herd_win *w = NULL, *fake = (herd_win *)&err; /* never dereferenced: checked away first */
    float buf[4] = {1, 2, 3, 4}, out[4];
    ASSERT_OK(herd_world_create(e, 1, &hw, NULL));
    ASSERT_OK(herd_world_endpoint(hw, 0, &c, NULL));

    BAD_ST(herd_comm_win_create(NULL, buf, sizeof buf, &w));
    BAD_ST(herd_comm_win_create_shared(NULL, buf, sizeof buf, &w));
    BAD_ON(c, herd_comm_win_create(c, NULL, sizeof buf, &w), "win_create: base is NULL");
    BAD_ON(c, herd_comm_win_create(c, buf, sizeof buf, NULL), "win_create: win is NULL");
    BAD_ON(c, herd_comm_win_create_shared(c, NULL, sizeof buf, &w), "base is NULL");
    BAD_ON(c, herd_comm_win_create_shared(c, buf, sizeof buf, NULL), "win is NULL");
    ASSERT_OK(herd_comm_win_create(c, buf, sizeof buf, &w));

    BAD_ST(herd_comm_win_lock(NULL, w, 0, true));
    BAD_ON(c, herd_comm_win_lock(c, NULL, 0, true), "win_lock: win is NULL");
    BAD_ON(c, herd_comm_win_lock(c, w, 1, true), "win_lock: target 1");
    ASSERT_OK(herd_comm_win_lock(c, w, 0, true));

    BAD_ST(herd_comm_win_get(NULL, w, 0, 0, out, 4));
    BAD_ON(c, herd_comm_win_get(c, NULL, 0, 0, out, 4), "win is NULL");
    BAD_ON(c, herd_comm_win_get(c, w, 1, 0, out, 4), "target 1");
    BAD_ON(c, herd_comm_win_get(c, w, 0, 0, NULL, 4), "dst is NULL");
    BAD_ON(c, herd_comm_win_get(c, w, 0, 12, out, 8), "past the end");
    BAD_ON(c, herd_comm_win_get(c, w, 0, SIZE_MAX, out, 4), "past the end");
    BAD_ST(herd_comm_win_put(NULL, w, 0, 0, buf, 4));
    BAD_ON(c, herd_comm_win_put(c, NULL, 0, 0, buf, 4), "win is NULL");
    BAD_ON(c, herd_comm_win_put(c, w, 1, 0, buf, 4), "target 1");
    BAD_ON(c, herd_comm_win_put(c, w, 0, 0, NULL, 4), "src is NULL");
    BAD_ON(c, herd_comm_win_put(c, w, 0, 16, buf, 4), "past the end");
    BAD_ST(herd_comm_win_accumulate(NULL, w, 0, 0, buf, 1));
    BAD_ON(c, herd_comm_win_accumulate(c, NULL, 0, 0, buf, 1), "win is NULL");
    BAD_ON(c, herd_comm_win_accumulate(c, w, 1, 0, buf, 1), "target 1");
    BAD_ON(c, herd_comm_win_accumulate(c, w, 0, 0, NULL, 1), "src is NULL");
    BAD_ON(c, herd_comm_win_accumulate(c, w, 0, 0, buf, SIZE_MAX / 2), "count");
    BAD_ON(c, herd_comm_win_accumulate(c, w, 0, 8, buf, 3), "past the end");
    BAD_ST(herd_comm_win_blend(NULL, w, 0, 0, buf, 1, 0.5f, out));
    BAD_ON(c, herd_comm_win_blend(c, NULL, 0, 0, buf, 1, 0.5f, out), "win is NULL");
    BAD_ON(c, herd_comm_win_blend(c, w, 1, 0, buf, 1, 0.5f, out), "target 1");
    BAD_ON(c, herd_comm_win_blend(c, w, 0, 0, NULL, 1, 0.5f, out), "src is NULL");
    BAD_ON(c, herd_comm_win_blend(c, w, 0, 0, buf, 1, 0.5f, NULL), "fetched is NULL");
    BAD_ON(c, herd_comm_win_blend(c, w, 0, 8, buf, 3, 0.5f, out), "past the end");
    BAD_ST(herd_comm_win_heavy_ball(NULL, w, 0, 0, 8, buf, 1, 0.9f));
    BAD_ON(c, herd_comm_win_heavy_ball(c, NULL, 0, 0, 8, buf, 1, 0.9f), "win is NULL");
    BAD_ON(c, herd_comm_win_heavy_ball(c, w, 1, 0, 8, buf, 1, 0.9f), "target 1");
    BAD_ON(c, herd_comm_win_heavy_ball(c, w, 0, 0, 8, NULL, 1, 0.9f), "upd is NULL");
    BAD_ON(c, herd_comm_win_heavy_ball(c, w, 0, 0, 4, buf, 2, 0.9f), "overlap");
    BAD_ON(c, herd_comm_win_heavy_ball(c, w, 0, 0, 12, buf, 2, 0.9f), "past the end");
    BAD_ST(herd_comm_win_flush(NULL, w, 0));
    BAD_ON(c, herd_comm_win_flush(c, NULL, 0), "win_flush: win is NULL");
    BAD_ON(c, herd_comm_win_flush(c, w, 1), "win_flush: target 1");
    BAD_ST(herd_comm_win_unlock_begin(NULL, w, 0));
    BAD_ON(c, herd_comm_win_unlock_begin(c, NULL, 0), "win is NULL");
    BAD_ON(c, herd_comm_win_unlock_begin(c, w, 1), "target 1");
    BAD_ST(herd_comm_win_wait(NULL, w));
    BAD_ON(c, herd_comm_win_wait(c, NULL), "win_wait: win is NULL");
    BAD_ST(herd_comm_win_unlock(NULL, w, 0));
    BAD_ON(c, herd_comm_win_unlock(c, NULL, 0), "win_unlock: win is NULL");
    BAD_ON(c, herd_comm_win_unlock(c, w, 1), "win_unlock: target 1");
    ASSERT_OK(herd_comm_win_unlock(c, w, 0));
    BAD_ST(herd_comm_win_free(NULL, fake));
    ASSERT_OK(herd_comm_win_free(c, w));
    (void)out;
    herd_comm_free(c);
    herd_world_free(hw);
}

/* Each engine checks a range against its own windows: every one this
 * process can start alone (not mpi's, which its launcher sizes). */
static void test_comm_windows(void)
{
    size_t tested = 0;
    for (size_t i = 0; herd_engines[i]; i++)
        if (!(herd_engines[i]->caps & HERD_ENGINE_LAUNCHER_SIZED) && (herd_engines[i]->caps & HERD_ENGINE_WINDOWS))
            window_args(herd_engines[i]), tested++;
    ASSERT_TRUE(tested >= 2); /* threads and loopback */
}

/* ---- herd_engine.h ------------------------------------------------------- */

static void *noop(void *p) { return p; }

static void test_engine(void)
{
    herd_err err;
    const herd_engine *e = NULL;
    herd_world *w = NULL;
    herd_comm *c = NULL;
    int arg;
    BAD(herd_engine_pick("threads", NULL, &err), "out is NULL");
    BAD(herd_engine_pick("no-such-engine", &e, &err), "unknown engine 'no-such-engine'");
    ASSERT_TRUE(e == NULL);
    ASSERT_OK(herd_engine_pick("threads", &e, NULL));
    BAD(herd_world_create(e, 1, NULL, &err), "out is NULL");
    BAD(herd_world_create(NULL, 1, &w, &err), "engine is NULL");
    BAD(herd_world_create(e, 0, &w, &err), "at least one worker");
    ASSERT_OK(herd_world_create(e, 2, &w, NULL));
    BAD(herd_world_endpoint(w, 0, NULL, &err), "out is NULL");
    BAD(herd_world_endpoint(NULL, 0, &c, &err), "world is NULL");
    BAD(herd_world_endpoint(w, 2, &c, &err), "rank 2");
    BAD(herd_world_run(NULL, noop, &arg, 0, &err), "world is NULL");
    BAD(herd_world_run(w, NULL, &arg, 0, &err), "fn is NULL");
    herd_world_free(w);
}

/* ---- herd_data.h ------------------------------------------------------- */

static void test_data(void)
{
    herd_err err;
    herd_dataset d, train, test;
    herd_loader l;
    bool known;
    size_t c, h, w, k;
    const char *one[1] = {NULL};
    BAD(herd_data_load_idx(NULL, "labels", &d, &err), "images_path is NULL");
    BAD(herd_data_load_idx("images", NULL, &d, &err), "labels_path is NULL");
    BAD(herd_data_load_idx("images", "labels", NULL, &err), "out is NULL");
    BAD(herd_data_load_cifar(one, 1, NULL, &err), "out is NULL");
    BAD(herd_data_load_cifar(NULL, 1, &d, &err), "paths is NULL");
    BAD(herd_data_load_cifar(one, 1, &d, &err), "paths[0] is NULL");
    BAD(herd_data_load_cifar(one, 0, &d, &err), "no CIFAR files");
    BAD(herd_data_synthetic(NULL, 10, 1, &d, &err), "spec is NULL");
    BAD(herd_data_synthetic("4:2", 10, 1, NULL, &err), "out is NULL");
    BAD(herd_data_synthetic("4x0x4:2", 10, 1, &d, &err), "at least 1");
    BAD(herd_data_synthetic("4:1", 10, 1, &d, &err), "classes");
    BAD(herd_data_synthetic("four:2", 10, 1, &d, &err), "expected CxHxW:K");
    BAD(herd_data_synthetic("4:2", 0, 1, &d, &err), "0 examples");
    BAD(herd_data_shape("synthetic:4:2", NULL, &c, &h, &w, &k, &err), "known is NULL");
    BAD(herd_data_shape("synthetic:4:2", &known, NULL, &h, &w, &k, &err), "c is NULL");
    BAD(herd_data_shape("synthetic:4:2", &known, &c, NULL, &w, &k, &err), "h is NULL");
    BAD(herd_data_shape("synthetic:4:2", &known, &c, &h, NULL, &k, &err), "w is NULL");
    BAD(herd_data_shape("synthetic:4:2", &known, &c, &h, &w, NULL, &err), "k is NULL");
    BAD(herd_data_shape("synthetic:4x4:2", &known, &c, &h, &w, &k, &err), "expected CxHxW:K");
    BAD(herd_data_open("synthetic:4:2", 1, NULL, &test, &err), "train is NULL");
    BAD(herd_data_open("synthetic:4:2", 1, &train, NULL, &err), "test is NULL");
    BAD(herd_data_open("synthetic:4:0", 1, &train, &test, &err), "classes");

    ASSERT_OK(herd_data_synthetic("4:2", 16, 1, &d, NULL));
    BAD(herd_loader_init(NULL, &d, 4, 0, 1, 1, true, &err), "l is NULL");
    BAD(herd_loader_init(&l, NULL, 4, 0, 1, 1, true, &err), "d is NULL");
    BAD(herd_loader_init(&l, &d, 0, 0, 1, 1, true, &err), "batch 0");
    BAD(herd_loader_init(&l, &d, 4, 0, 0, 1, true, &err), "0 workers");
    BAD(herd_loader_init(&l, &d, 4, 2, 2, 1, true, &err), "rank 2");
    BAD(herd_loader_init(&l, &d, SIZE_MAX / 2, 0, 4, 1, true, &err), "too large");
    ASSERT_TRUE(l.perm == NULL); /* cleared, nothing to free */
    herd_dataset_free(&d);
}

/* ---- herd_nn.h ----------------------------------------------------------- */

static void test_nn(void)
{
    herd_err err;
    herd_model *m = NULL;
    herd_precision p;
    BAD(herd_model_create(NULL, 1, 4, 4, 2, 2, 1, &m, &err), "name is NULL");
    BAD(herd_model_create("mlp", 1, 4, 4, 2, 2, 1, NULL, &err), "out is NULL");
    BAD(herd_model_create("no-such-model", 1, 4, 4, 2, 2, 1, &m, &err), "unknown model 'no-such-model'");
    BAD(herd_model_create("mlp", 0, 4, 4, 2, 2, 1, &m, &err), "shape 0x4x4");
    BAD(herd_model_create("mlp", 1, 4, 4, 1, 2, 1, &m, &err), "1 classes");
    BAD(herd_model_create("mlp", 1, 4, 4, 2, 0, 1, &m, &err), "batch 0");
    /* counts whose product wraps in size_t (2^40 x 2^40 x 8 made a linear
     * model of 4 parameters, for inputs of "0" floats), and beyond the limits */
    BAD(herd_model_create("linear", (size_t)1 << 40, (size_t)1 << 40, 8, 4, 1, 1, &m, &err), "is beyond what herd builds");
    BAD(herd_model_create("linear", 1, (size_t)1 << 62, 4, 4, 1, 1, &m, &err), "an example of at most 2^28 floats");
    BAD(herd_model_create("linear", 1, 4, 4, (size_t)1 << 40, 1, 1, &m, &err), "at most 2^20 classes");
    BAD(herd_model_create("linear", 1, 4, 4, 2, (size_t)1 << 40, 1, &m, &err), "batches of at most 2^20");
    BAD(herd_model_create_from_description("net", "linear classes\n", (size_t)1 << 32, (size_t)1 << 32, 1, 4, 1, 1,
                                           &m, &err),
        "is beyond what herd builds");
    ASSERT_TRUE(m == NULL);
    BAD_ST(herd_precision_parse(NULL, &p));
    BAD_ST(herd_precision_parse("fp32", NULL));
    BAD_ST(herd_precision_parse("fp16", &p));
    ASSERT_OK(herd_model_create("mlp", 1, 4, 4, 2, 2, 1, &m, NULL));
    BAD_ST(herd_model_set_precision(NULL, HERD_PRECISION_FP32));
    BAD_ST(herd_model_set_precision(m, (herd_precision)7));
    ASSERT_TRUE(herd_model_precision(m) == HERD_PRECISION_FP32);
    BAD_ST(herd_model_backward(NULL, 1, NULL, NULL));
    BAD_ST(herd_model_backward(m, 0, NULL, NULL));
    BAD_ST(herd_model_backward(m, 3, NULL, NULL));
    BAD_ST(herd_model_warm_up(NULL));
    herd_model_free(m);
}

/* ---- herd_optim.h -------------------------------------------------------- */

static void test_optim(void)
{
    herd_err err;
    herd_schedule s;
    herd_optimizer k;
    herd_lr_scale ls;
    herd_optim o;
    herd_optim_config cfg = {.lr = 0.1f, .optimizer = HERD_OPTIMIZER_LAMB};
    herd_param_group g[2] = {{0, 3, HERD_PARAM_WEIGHT}, {3, 2, HERD_PARAM_BIAS}};
    BAD_ST(herd_schedule_parse(NULL, &s));
    BAD_ST(herd_schedule_parse("const", NULL));
    BAD_ST(herd_schedule_parse("linear", &s));
    BAD_ST(herd_optimizer_parse(NULL, &k));
    BAD_ST(herd_optimizer_parse("sgd", NULL));
    BAD_ST(herd_optimizer_parse("adam", &k));
    BAD_ST(herd_lr_scale_parse(NULL, &ls));
    BAD_ST(herd_lr_scale_parse("none", NULL));
    BAD_ST(herd_lr_scale_parse("sqrt", &ls));

    BAD(herd_optim_init(NULL, &cfg, 5, &err), "o is NULL");
    BAD(herd_optim_init(&o, NULL, 5, &err), "cfg is NULL");
    BAD(herd_optim_init_groups(NULL, &cfg, g, 2, 5, &err), "o is NULL");
    BAD(herd_optim_init_groups(&o, NULL, g, 2, 5, &err), "cfg is NULL");
    BAD(herd_optim_init_groups(&o, &cfg, NULL, 2, 5, &err), "groups is NULL");
    BAD(herd_optim_init_groups(&o, &cfg, g, 2, 6, &err), "cover 5 of 6");
    BAD(herd_optim_init_groups(&o, &cfg, g + 1, 1, 5, &err), "parameter tensor 0");
    herd_optim_config bad = cfg;
    bad.optimizer = (herd_optimizer)3;
    BAD(herd_optim_init(&o, &bad, 5, &err), "cfg->optimizer");
    bad = cfg, bad.schedule = (herd_schedule)-1;
    BAD(herd_optim_init(&o, &bad, 5, &err), "cfg->schedule");
    bad = cfg, bad.lr_scale = (herd_lr_scale)2;
    BAD(herd_optim_init(&o, &bad, 5, &err), "cfg->lr_scale");
    herd_param_group kind[2] = {g[0], {3, 2, (herd_param_kind)3}};
    BAD(herd_optim_init_groups(&o, &cfg, kind, 2, 5, &err), "groups[1].kind");

    ASSERT_OK(herd_optim_init_groups(&o, &cfg, g, 2, 5, NULL));
    size_t n = herd_optim_state_bytes(&o);
    unsigned char *rec = malloc(n);
    ASSERT_TRUE(rec != NULL);
    herd_optim_state_save(&o, rec);
    BAD(herd_optim_state_load(NULL, rec, n, &err), "o is NULL");
    BAD(herd_optim_state_load(&o, NULL, n, &err), "buf is NULL");
    herd_optim sgd;
    cfg.optimizer = HERD_OPTIMIZER_SGD;
    ASSERT_OK(herd_optim_init_groups(&sgd, &cfg, g, 2, 5, NULL));
    BAD(herd_optim_state_load(&sgd, rec, n, &err), "--optimizer lamb");
    herd_optim_free(&sgd);
    herd_optim_free(&o);
    free(rec);
}

/* ---- herd_algo.h --------------------------------------------------------- */

static void test_algo(void)
{
    herd_err err;
    const herd_algo_ops *ops = herd_algo_find("localsgd");
    ASSERT_TRUE(ops != NULL && ops->opts_size > 0);
    void *opts = calloc(1, ops->opts_size);
    ASSERT_TRUE(opts != NULL);
    herd_optim_config run = {.lr = 0.1f};
    herd_optim o;
    BAD(herd_algo_optim_init(NULL, opts, &run, NULL, 4, &o, &err), "ops is NULL");
    BAD(herd_algo_optim_init(ops, opts, NULL, NULL, 4, &o, &err), "run is NULL");
    BAD(herd_algo_optim_init(ops, opts, &run, NULL, 4, NULL, &err), "out is NULL");

    herd_arg args[1] = {{NULL, "4"}}, foreign[1] = {{"ps-shards", "2"}}, unknown[1] = {{"no-such-flag", "1"}};
    BAD(herd_algo_opts_parse(NULL, NULL, 0, opts, &err), "ops is NULL");
    BAD(herd_algo_opts_parse(ops, NULL, 0, NULL, &err), "out is NULL");
    BAD(herd_algo_opts_parse(ops, NULL, 1, opts, &err), "args is NULL");
    BAD(herd_algo_opts_parse(ops, args, 1, opts, &err), "args[0].name is NULL");
    BAD(herd_algo_opts_parse(ops, foreign, 1, opts, &err), "--ps-shards applies to");
    BAD(herd_algo_opts_parse(ops, unknown, 1, opts, &err), "unknown option --no-such-flag");

    herd_worker w = {0};
    herd_algo a = {0};
    herd_step_result res = {0};
    BAD_ST(herd_algo_update(&a, NULL, &res, false));
    w.err = (herd_err){0};
    ASSERT_EQ_INT(herd_algo_update(NULL, &w, &res, false), HERD_EINVAL);
    ASSERT_STR_CONTAINS(w.err.msg, "herd_algo_update: a is NULL");
    w.err = (herd_err){0};
    ASSERT_EQ_INT(herd_algo_update(&a, &w, &res, false), HERD_EINVAL);
    ASSERT_STR_CONTAINS(w.err.msg, "a->ops is NULL");
    free(opts);
}

/* ---- herd_ckpt.h --------------------------------------------------------- */

/* A checkpoint of 2 workers with one section, params of worker 0, in dir. */
static herd_ckpt *small_ckpt(const char *dir)
{
    float p[4] = {1, 2, 3, 4};
    herd_ckpt_info info = {.step = 3, .nparams = 4, .workers = 2, .batch = 2, .model = "mlp", .algo = "sgd"};
    herd_ckpt_section sec = {"params", 0, p, sizeof p};
    herd_ckpt *ck = NULL;
    ASSERT_OK(herd_ckpt_write(dir, &info, &sec, 1, 2, NULL));
    ASSERT_OK(herd_ckpt_read(dir, "ckpt-3.herd", &ck, NULL));
    return ck;
}

static void test_ckpt(void)
{
    herd_err err;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/ck", herd_test_tmpdir());
    ASSERT_TRUE(mkdir(dir, 0700) == 0 || errno == EEXIST);
    float p[4] = {0};
    herd_ckpt_info info = {.step = 1, .workers = 1, .model = "mlp", .algo = "sgd"};
    herd_ckpt_section sec = {"params", 0, p, sizeof p}, s;
    herd_ckpt_section bad_name = {"Params", 0, p, sizeof p}, bad_worker = {"params", 1, p, sizeof p};
    herd_ckpt_section no_data = {"params", 0, NULL, 4};
    BAD(herd_ckpt_write(NULL, &info, &sec, 1, 1, &err), "dir is NULL");
    BAD(herd_ckpt_write(dir, NULL, &sec, 1, 1, &err), "info is NULL");
    BAD(herd_ckpt_write(dir, &info, NULL, 1, 1, &err), "secs is NULL");
    BAD(herd_ckpt_write(dir, &info, &sec, 1, 0, &err), "keep");
    BAD(herd_ckpt_write(dir, &info, &sec, (size_t)HERD_CKPT_MAX_SECTIONS + 1, 1, &err), "sections");
    BAD(herd_ckpt_write(dir, &info, &bad_name, 1, 1, &err), "name 'Params'");
    BAD(herd_ckpt_write(dir, &info, &bad_worker, 1, 1, &err), "worker 1 of 1");
    BAD(herd_ckpt_write(dir, &info, &no_data, 1, 1, &err), "4 bytes");

    herd_ckpt *ck = NULL;
    uint64_t steps[4];
    size_t n;
    char warn[64];
    BAD(herd_ckpt_parse(p, sizeof p, "mem", NULL, &err), "out is NULL");
    BAD(herd_ckpt_parse(NULL, 8, "mem", &ck, &err), "buf is NULL");
    BAD(herd_ckpt_read(NULL, "ckpt-1.herd", &ck, &err), "dir is NULL");
    BAD(herd_ckpt_read(dir, NULL, &ck, &err), "name is NULL");
    BAD(herd_ckpt_read(dir, "ckpt-1.herd", NULL, &err), "out is NULL");
    BAD(herd_ckpt_read(dir, "../ckpt-1.herd", &ck, &err), "not a plain file name");
    BAD(herd_ckpt_list(NULL, steps, 4, &n, &err), "dir is NULL");
    BAD(herd_ckpt_list(dir, steps, 4, NULL, &err), "n is NULL");
    BAD(herd_ckpt_list(dir, NULL, 4, &n, &err), "steps is NULL");
    BAD(herd_ckpt_latest(NULL, &ck, warn, sizeof warn, NULL, &err), "dir is NULL");
    BAD(herd_ckpt_latest(dir, NULL, warn, sizeof warn, NULL, &err), "out is NULL");

    ck = small_ckpt(dir);
    float got[4];
    BAD(herd_ckpt_find(NULL, "params", 0, &s, &err), "ck is NULL");
    BAD(herd_ckpt_find(ck, NULL, 0, &s, &err), "name is NULL");
    BAD(herd_ckpt_find(ck, "params", 0, NULL, &err), "out is NULL");
    BAD(herd_ckpt_find(ck, "params", 2, &s, &err), "worker 2");
    BAD(herd_ckpt_copy(NULL, "params", 0, got, sizeof got, &err), "ck is NULL");
    BAD(herd_ckpt_copy(ck, NULL, 0, got, sizeof got, &err), "name is NULL");
    BAD(herd_ckpt_copy(ck, "params", 0, NULL, sizeof got, &err), "dst is NULL");
    BAD(herd_ckpt_copy(ck, "params", 7, got, sizeof got, &err), "worker 7");
    BAD(herd_ckpt_copy(ck, "params", 0, got, 8, &err), "holds 16 bytes");

    herd_ckpt_kept kept;
    herd_model *m = NULL;
    BAD(herd_ckpt_kept_info(NULL, &kept, &err), "ck is NULL");
    BAD(herd_ckpt_kept_info(ck, NULL, &err), "out is NULL");
    BAD(herd_ckpt_kept_model(NULL, 1, 2, 2, 2, 1, &m, &err), "ck is NULL");
    BAD(herd_ckpt_kept_model(ck, 1, 2, 2, 2, 1, NULL, &err), "out is NULL");
    BAD(herd_ckpt_kept_model(ck, 0, 2, 2, 2, 1, &m, &err), "shape 0x2x2");
    ASSERT_TRUE(m == NULL);
    herd_ckpt_free(ck);

    herd_eval_config ec = {.checkpoint_dir = dir};
    herd_eval_result er;
    BAD(herd_eval(NULL, &er, &err), "cfg is NULL");
    BAD(herd_eval(&ec, NULL, &err), "res is NULL");
    ec.threads = 100000;
    BAD(herd_eval(&ec, &er, &err), "cfg->threads");
    ec = (herd_eval_config){0};
    BAD(herd_eval(&ec, &er, &err), "cfg->checkpoint_dir is NULL");

    char out[600];
    snprintf(out, sizeof out, "%s/model.safetensors", herd_test_tmpdir());
    herd_export_config xc = {.checkpoint_dir = dir, .out = out};
    herd_export_result xr;
    BAD(herd_export(NULL, &xr, &err), "cfg is NULL");
    BAD(herd_export(&xc, NULL, &err), "res is NULL");
    xc.format = (herd_export_format)5;
    BAD(herd_export(&xc, &xr, &err), "cfg->format");
    xc.format = HERD_EXPORT_SAFETENSORS, xc.out = NULL;
    BAD(herd_export(&xc, &xr, &err), "cfg->out");
    xc.out = out, xc.checkpoint_dir = NULL;
    BAD(herd_export(&xc, &xr, &err), "cfg->checkpoint_dir is NULL");
    struct stat sb;
    ASSERT_TRUE(stat(out, &sb) != 0); /* nothing written */

    size_t shape[5] = {2, 2, 1, 1, 1}, huge[2] = {SIZE_MAX / 2, 4};
    BAD(herd_npy_write(NULL, shape, 2, p, &err), "path is NULL");
    BAD(herd_npy_write(out, NULL, 2, p, &err), "shape is NULL");
    BAD(herd_npy_write(out, shape, 2, NULL, &err), "data is NULL");
    BAD(herd_npy_write(out, shape, 5, p, &err), "5 dimensions");
    BAD(herd_npy_write(out, huge, 2, p, &err), "overflows");
    ASSERT_TRUE(stat(out, &sb) != 0);
}

/* ---- herd_run.h and herd_config.h ------------------------------------------ */

static void test_run(void)
{
    herd_err err;
    herd_bench_allreduce_config cfg = {.engine = "threads", .workers = 2, .min_bytes = 4, .max_bytes = 4, .iters = 1};
    herd_bench_row rows[HERD_BENCH_MAX_ROWS];
    size_t nrows, world;
    BAD(herd_bench_allreduce(NULL, rows, &nrows, &world, &err), "cfg is NULL");
    BAD(herd_bench_allreduce(&cfg, NULL, &nrows, &world, &err), "rows is NULL");
    BAD(herd_bench_allreduce(&cfg, rows, NULL, &world, &err), "nrows is NULL");
    BAD(herd_bench_allreduce(&cfg, rows, &nrows, NULL, &err), "world is NULL");
    herd_bench_allreduce_config bad = cfg;
    bad.min_bytes = 0;
    BAD(herd_bench_allreduce(&bad, rows, &nrows, &world, &err), "--min-bytes");
    bad = cfg, bad.max_bytes = 2;
    BAD(herd_bench_allreduce(&bad, rows, &nrows, &world, &err), "--max-bytes");
    bad = cfg, bad.iters = 0;
    BAD(herd_bench_allreduce(&bad, rows, &nrows, &world, &err), "--iters");
    bad = cfg, bad.engine = "no-such-engine";
    BAD(herd_bench_allreduce(&bad, rows, &nrows, &world, &err), "unknown engine");
    bad = cfg, bad.workers = 0;
    BAD(herd_bench_allreduce(&bad, rows, &nrows, &world, &err), "--workers");
    bad = cfg, bad.opts.wire = (herd_dtype)9;
    BAD(herd_bench_allreduce(&bad, rows, &nrows, &world, &err), "wire");

    herd_train_result res = {0};
    FILE *f = tmpfile();
    ASSERT_TRUE(f != NULL);
    BAD_ST(herd_train_result_json(NULL, f));
    BAD_ST(herd_train_result_json(&res, NULL));
    res.nlost = HERD_MAX_FAIL + 1;
    BAD_ST(herd_train_result_json(&res, f));
    ASSERT_EQ_INT(ftell(f), 0);
    fclose(f);

    /* herd_config.h's and herd_train's own checks */
    herd_config *c = NULL;
    ASSERT_OK(herd_config_new(&c));
    BAD(herd_config_set(NULL, "lr", "0.1", &err), "cfg is NULL");
    BAD(herd_config_set(c, NULL, "0.1", &err), "name is NULL");
    BAD(herd_config_set(c, "no-such-option", "1", &err), "no-such-option");
    char buf[32];
    BAD(herd_config_get(NULL, "lr", buf, sizeof buf, &err), "cfg is NULL");
    BAD(herd_config_get(c, NULL, buf, sizeof buf, &err), "herd_config_get: name is NULL");
    BAD(herd_config_get(c, "lr", NULL, sizeof buf, &err), "buf is NULL or cap 0");
    BAD(herd_config_get(c, "lr", buf, 0, &err), "buf is NULL or cap 0");
    BAD(herd_config_get(c, "no-such-option", buf, sizeof buf, &err), "unknown option '--no-such-option'");
    BAD(herd_config_load(NULL, "x.conf", &err), "cfg is NULL");
    BAD(herd_config_load(c, NULL, &err), "path is NULL");
    BAD(herd_config_check(NULL, &err), "cfg is NULL");
    herd_train_result tr = {0};
    BAD(herd_train(NULL, &tr, &err), "cfg is NULL");
    BAD(herd_train(c, NULL, &err), "res is NULL");
    herd_config_free(c);
}

const herd_test herd_tests_args[] = {
    {"args_comm_p2p", test_comm_p2p, 20},
    {"args_comm_windows", test_comm_windows, 20},
    {"args_engine", test_engine, 20},
    {"args_data", test_data, 20},
    {"args_nn", test_nn, 20},
    {"args_optim", test_optim, 20},
    {"args_algo", test_algo, 20},
    {"args_ckpt", test_ckpt, 20},
    {"args_run", test_run, 30},
    HERD_TEST_END,
};
