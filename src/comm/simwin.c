/* The sim engine's windows: every rank's agent an actor of SimGrid on its
 * rank's host, serving the window requests of other ranks over simulated
 * messages, as the mpi engine's agents do across hosts (mpi_am.c). Built
 * into herd-sim only (sim.h).
 *
 * Why not SMPI's own windows: SimGrid 3.32's MPI_Win_lock, unlock and
 * flush each wait for every one-sided transfer between the two ranks that
 * is still in the window's lists, whichever rank started it
 * (smpi_win.cpp, Win::flush and finish_comms), so two ranks that pull from
 * each other take turns: on a 100 Mbit/s link the parameter servers' and
 * elastic algorithms' steps came out twice as long as on two real hosts.
 * Nor do SMPI's windows send a rank's accumulate into its own window
 * anywhere but over the network (no loopback on herd's platforms). Here:
 *   - an origin sends its lock, its operations and its unlock back to back
 *     to the target's agent (a request of SW_HDR bytes, a put's or
 *     accumulate's data with it), as the real agents' protocol does; the
 *     lock is not answered, a get is answered with its bytes, a flush and
 *     an unlock with SW_ANSWER bytes, and the origin waits for the answers
 *     alone;
 *   - the agent serves its mailbox in the order requests were sent; where a
 *     lock cannot be granted, that origin's requests on the window wait in
 *     a queue until it is, locks being granted in order of arrival;
 *   - the agent's wake (herd sim --agent-wake-us) is charged as it serves a
 *     lock or a flush while its rank computes, as the FLOP model of the
 *     agent always did (sim.h);
 *   - a rank's operations on its own window act on its memory at once, at no
 *     simulated cost (shared memory), its locks queued with the others.
 * Every mailbox has its receiver set, so a message travels as soon as it is
 * sent, as TCP delivers into a socket's buffer while the rank computes.
 * SimGrid runs one actor at a time and switches only inside its calls, so
 * the lock state needs no mutex. The memory of every rank is in this one
 * process: a get's data is copied into the origin's buffer as the agent
 * serves it, the answer's transfer then taking its simulated time. */
#ifdef HERD_SIM

#include "comm/mpi_internal.h"

#include <simgrid/actor.h>
#include <simgrid/comm.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>
#include <simgrid/semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SW_LOCK_SHARED = 1, SW_LOCK_EXCL, SW_UNLOCK, SW_GET, SW_PUT, SW_ACC, SW_FLUSH, SW_BLEND, SW_HEAVY };
enum { SW_FREE, SW_SHARED, SW_EXCL, SW_ASKED };
/* bytes on the wire of a request's header and of an answer without data */
#define SW_HDR 32
#define SW_ANSWER 16
/* the largest message sent whole, as Open MPI's TCP transport sends it
 * eagerly where herd sets the limit (src/comm/mpi.c, choose_tcp_eager) */
#define SW_EAGER 1048576

typedef struct sw_side sw_side;

typedef struct sw_msg {
    struct sw_msg *self; /* the message's payload: the agent frees the message once it has it */
    struct sw_msg *next;
    int op;
    sw_side *side;
    size_t origin, off, bytes;
    void *dst;            /* SW_GET, SW_BLEND: the origin's buffer */
    float alpha;          /* SW_BLEND's alpha, SW_HEAVY's mu */
    size_t off2;          /* SW_HEAVY: x's offset (off: v's) */
    unsigned char *data;  /* SW_PUT, SW_ACC: the data, freed once applied */
    sg_mailbox_t reply;   /* the origin's answers from this target */
} sw_msg;

/* A lock asked for and not yet granted, in order of arrival. */
typedef struct sw_asked {
    struct sw_asked *next;
    size_t origin;
    bool excl;
    sg_sem_t sem; /* the target's own rank waits on it; NULL: another rank */
} sw_asked;

/* One rank's side of a window: its memory and the locks on it. */
struct sw_side {
    size_t rank;
    char *base;
    size_t bytes;
    sg_mailbox_t agent;
    sim_agent *owner;         /* the rank's agent (its connections) */
    long excl;                /* holder of the exclusive lock, or -1 */
    size_t shared;            /* holders of a shared one */
    unsigned char *held;      /* per origin: SW_* */
    unsigned char *deferred;  /* per origin: its lock asked for, not yet queued (0, SW_SHARED or SW_EXCL) */
    sw_msg **qhead, **qtail;  /* per origin: its requests waiting for its lock */
    sw_asked *ahead, *atail;
};

struct sim_win {
    sw_side *own;
    sw_side **sides;       /* every rank's, by rank */
    sg_mailbox_t *reply;   /* per target: this rank's answers from it (made on first use) */
    size_t *answers;       /* per target: answers still to come */
};

/* A rank's agent: an actor on its host, serving its mailbox. */
struct sim_agent {
    size_t rank;
    char name[64];
    sg_mailbox_t mb;
    struct sw_conn **conns; /* per destination rank: this rank's connection to it (made on first use) */
};

/* A message waiting for its connection. */
typedef struct sw_job {
    struct sw_job *next;
    sg_mailbox_t mb;
    void *const *payload;
    long bytes;
} sw_job;

/* One rank's connection to another: what its worker and its agent send
 * there leaves in the order sent, one message after the other, as over the
 * one TCP connection between two processes (Open MPI's), where an answer
 * queues behind a request's data already in the socket. Without it every
 * message took its share of the link at once, and an answer the origin
 * waited for crossed at half the link's rate beside a push: a parameter
 * server's step on two hosts at 100 Mbit/s came out at 32 ms against 22.6
 * real. A message above SW_EAGER goes by rendezvous there, in fragments
 * that the connection's other messages pass: it is started, not waited
 * for. A sender actor per connection puts them in turn. */
typedef struct sw_conn {
    sg_sem_t ready; /* released once per job queued */
    sw_job *head, *tail;
} sw_conn;

static void *checked(void *p)
{
    if (!p) {
        fprintf(stderr, "herd: out of memory in a simulated window's message\n");
        abort();
    }
    return p;
}

static void conn_main(int argc, char **argv)
{
    (void)argc, (void)argv;
    sw_conn *k = sg_actor_self_get_data();
    for (;;) {
        sg_sem_acquire(k->ready);
        sw_job *j = k->head;
        k->head = j->next;
        if (!k->head)
            k->tail = NULL;
        /* the put returns once the message has crossed; SMPI copies the
         * payload, a cell that holds the pointer, as the receiver takes it,
         * which may be later: the cell lives as long as what it points to */
        if (j->bytes <= SW_EAGER) {
            sg_mailbox_put(j->mb, (void *)j->payload, j->bytes);
        } else { /* detached: SMPI frees the cell once copied */
            void **cell = checked(malloc(sizeof *cell));
            *cell = *j->payload;
            sg_comm_detach(sg_mailbox_put_init(j->mb, cell, j->bytes), NULL);
        }
        free(j);
    }
}

/* Sends the pointer in *payload from a's rank to mb on rank `to`, bytes on
 * the wire, and forgets it: it leaves on the ranks' connection after what
 * was sent there before. *payload stays until the receiver has it. */
static void post(sim_agent *a, size_t to, sg_mailbox_t mb, void *const *payload, long bytes)
{
    sw_conn *k = a->conns[to];
    if (!k) { /* never freed: its actor, a daemon, outlives the endpoint */
        k = a->conns[to] = checked(calloc(1, sizeof *k));
        k->ready = sg_sem_init(0);
        char name[96];
        snprintf(name, sizeof name, "%s-to-%zu", a->name, to);
        sg_actor_t actor = sg_actor_init(name, sg_host_self());
        sg_actor_set_data(actor, k);
        sg_actor_start(actor, conn_main, 0, NULL);
        sg_actor_daemonize(actor);
    }
    sw_job *j = checked(malloc(sizeof *j));
    *j = (sw_job){.mb = mb, .payload = payload, .bytes = bytes};
    if (k->tail)
        k->tail->next = j;
    else
        k->head = j;
    k->tail = j;
    sg_sem_release(k->ready);
}

/* An answer carries nothing but its size on the wire. */
static void *const no_payload = NULL;

static void answer(sw_msg *m, long bytes) { post(m->side->owner, m->origin, m->reply, &no_payload, bytes); }

static void apply(sw_msg *m)
{
    sw_side *s = m->side;
    switch (m->op) {
    case SW_GET:
        memcpy(m->dst, s->base + m->off, m->bytes);
        answer(m, (long)m->bytes);
        break;
    case SW_PUT:
        memcpy(s->base + m->off, m->data, m->bytes);
        break;
    case SW_ACC:
        herd__mpi_add_floats(s->base + m->off, (const float *)m->data, m->bytes / sizeof(float));
        break;
    case SW_BLEND:
        memcpy(m->dst, s->base + m->off, m->bytes);
        herd__mpi_blend_floats(s->base + m->off, m->data, m->bytes / sizeof(float), m->alpha);
        answer(m, (long)m->bytes);
        break;
    case SW_HEAVY:
        herd__mpi_heavy_ball_floats(s->base + m->off, s->base + m->off2, m->data, m->bytes / sizeof(float), m->alpha);
        break;
    case SW_FLUSH:
        answer(m, SW_ANSWER);
        break;
    default:
        break;
    }
    free(m->data);
}

static bool is_lock(int op) { return op == SW_LOCK_SHARED || op == SW_LOCK_EXCL; }

static bool grantable(const sw_side *s, bool excl) { return s->excl < 0 && (!excl || s->shared == 0); }

static void serve(sw_msg *m);

/* The locks asked for that can now be held, in order of arrival (one
 * exclusive, or shared ones up to the next exclusive); each granted origin's
 * waiting requests are served. */
static void grant(sw_side *s)
{
    while (s->ahead && grantable(s, s->ahead->excl)) {
        sw_asked *a = s->ahead;
        s->ahead = a->next;
        if (!s->ahead)
            s->atail = NULL;
        if (a->excl)
            s->excl = (long)a->origin;
        else
            s->shared++;
        s->held[a->origin] = a->excl ? SW_EXCL : SW_SHARED;
        if (a->sem) {
            sg_sem_release(a->sem);
        } else { /* its requests that waited, in order (an unlock among them may queue the rest again) */
            sw_msg *q = s->qhead[a->origin];
            s->qhead[a->origin] = s->qtail[a->origin] = NULL;
            while (q) {
                sw_msg *next = q->next;
                serve(q);
                q = next;
            }
        }
        free(a);
    }
}

static void ask(sw_side *s, size_t origin, bool excl, sg_sem_t sem)
{
    sw_asked *a = calloc(1, sizeof *a);
    if (!a) {
        fprintf(stderr, "herd: rank %zu: out of memory in a window lock\n", s->rank);
        abort();
    }
    *a = (sw_asked){.origin = origin, .excl = excl, .sem = sem};
    if (s->atail)
        s->atail->next = a;
    else
        s->ahead = a;
    s->atail = a;
    s->held[origin] = SW_ASKED;
    grant(s);
}

static void release(sw_side *s, size_t origin)
{
    if (s->held[origin] == SW_EXCL)
        s->excl = -1;
    else if (s->held[origin] == SW_SHARED && s->shared > 0)
        s->shared--;
    s->held[origin] = SW_FREE;
    grant(s);
}

/* One request, where its origin holds its lock or asks for one; queued
 * behind its lock otherwise. Another rank's lock joins the locks asked for
 * only once its epoch is here up to a flush or the unlock, as the real
 * agents grant it (mpi_am.c): held while the epoch applies, not while its
 * data crosses the network. */
static void serve(sw_msg *m)
{
    sw_side *s = m->side;
    size_t o = m->origin;
    if (is_lock(m->op) && s->held[o] != SW_ASKED) {
        s->held[o] = SW_ASKED;
        s->deferred[o] = m->op == SW_LOCK_EXCL ? SW_EXCL : SW_SHARED;
        free(m);
        return;
    }
    if (s->held[o] == SW_ASKED) { /* a lock too: the next epoch's, behind this one's unlock */
        m->next = NULL;
        if (s->qtail[o])
            s->qtail[o]->next = m;
        else
            s->qhead[o] = m;
        s->qtail[o] = m;
        if (s->deferred[o] && (m->op == SW_FLUSH || m->op == SW_UNLOCK)) {
            bool excl = s->deferred[o] == SW_EXCL;
            s->deferred[o] = 0;
            ask(s, o, excl, NULL); /* may serve the queue, m with it */
        }
        return;
    }
    if (m->op == SW_UNLOCK) {
        answer(m, SW_ANSWER);
        release(s, o);
    } else {
        apply(m);
    }
    free(m);
}

static void agent_main(int argc, char **argv)
{
    (void)argc, (void)argv;
    sim_agent *a = sg_actor_self_get_data();
    sg_mailbox_set_receiver(a->name);
    for (;;) {
        sw_msg *m = sg_mailbox_get(a->mb);
        /* it wakes to serve a lock or a flush where its rank computes (sim.h) */
        if (is_lock(m->op) || m->op == SW_FLUSH)
            herd__sim_agent_answer(a->rank);
        serve(m);
    }
}

/* c's agent, started with its first window. */
static sim_agent *agent_of(herd_comm *c)
{
    mpi_comm *mc = (mpi_comm *)c;
    if (mc->sim_agent)
        return mc->sim_agent;
    sim_agent *a = calloc(1, sizeof *a); /* never freed: the actor outlives the endpoint, a daemon */
    if (!a)
        return NULL;
    a->rank = c->rank;
    if (!(a->conns = calloc(c->size, sizeof *a->conns))) {
        free(a);
        return NULL;
    }
    snprintf(a->name, sizeof a->name, "herd-agent-%p", (void *)a);
    a->mb = sg_mailbox_by_name(a->name);
    sg_actor_t actor = sg_actor_init(a->name, sg_host_self());
    sg_actor_set_data(actor, a);
    sg_actor_start(actor, agent_main, 0, NULL);
    sg_actor_daemonize(actor);
    mc->sim_agent = a;
    return a;
}

static void side_free(sw_side *s)
{
    if (!s)
        return;
    free(s->held);
    free(s->deferred);
    free(s->qhead);
    free(s->qtail);
    free(s);
}

static void win_free(sim_win *w)
{
    if (!w)
        return;
    side_free(w->own);
    free(w->sides);
    free(w->reply);
    free(w->answers);
    free(w);
}

herd_status herd__simwin_create(herd_comm *c, herd_win *hw, void *base, size_t bytes)
{
    size_t n = c->size;
    sim_agent *a = agent_of(c);
    sim_win *w = calloc(1, sizeof *w);
    sw_side *s = calloc(1, sizeof *s);
    if (w)
        w->own = s;
    if (!a || !w || !s || !(w->sides = calloc(n, sizeof *w->sides)) || !(w->reply = calloc(n, sizeof *w->reply)) ||
        !(w->answers = calloc(n, sizeof *w->answers)) || !(s->held = calloc(n, 1)) ||
        !(s->deferred = calloc(n, 1)) || !(s->qhead = calloc(n, sizeof *s->qhead)) || !(s->qtail = calloc(n, sizeof *s->qtail))) {
        if (!w)
            free(s);
        win_free(w);
        return herd_err_set(&c->err, HERD_ENOMEM, "out of memory");
    }
    *s = (sw_side){.rank = c->rank, .base = base, .bytes = bytes, .agent = a->mb, .owner = a, .excl = -1,
                   .held = s->held, .deferred = s->deferred, .qhead = s->qhead, .qtail = s->qtail};
    /* the address space is one: every rank learns every side's address */
    uint64_t mine = (uint64_t)(uintptr_t)s, *all = calloc(n, sizeof *all);
    int rc = all ? MPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, ((mpi_comm *)c)->world) : MPI_ERR_NO_MEM;
    if (rc != MPI_SUCCESS) {
        free(all);
        win_free(w);
        return herd__mpi_fail(c, rc, "MPI_Allgather (a window's sides)");
    }
    for (size_t r = 0; r < n; r++)
        w->sides[r] = (sw_side *)(uintptr_t)all[r];
    free(all);
    hw->sim = w;
    return HERD_OK;
}

herd_status herd__simwin_free(herd_comm *c, herd_win *hw)
{
    /* every rank's epochs on it are over before any side goes */
    int rc = c->failed ? MPI_SUCCESS : MPI_Barrier(((mpi_comm *)c)->world);
    win_free(hw->sim);
    hw->sim = NULL;
    return rc == MPI_SUCCESS ? HERD_OK : herd__mpi_fail(c, rc, "MPI_Barrier (freeing a window)");
}

static herd_status check(herd_comm *c, const sim_win *w, size_t target, size_t off, size_t bytes, const char *what)
{
    if (target >= c->size)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: %s on rank %zu of %zu", c->rank, what, target, c->size);
    const sw_side *s = w->sides[target];
    if (off > s->bytes || bytes > s->bytes - off)
        return herd_err_set(&c->err, HERD_EINVAL, "rank %zu: %s of %zu bytes at %zu on rank %zu's window of %zu",
                            c->rank, what, bytes, off, target, s->bytes);
    return HERD_OK;
}

/* Sends a request to target's agent (its data copied into it). */
static herd_status request(herd_comm *c, sim_win *w, size_t target, int op, size_t off, size_t bytes, void *dst,
                           const void *src, float alpha, size_t off2)
{
    sw_msg *m = calloc(1, sizeof *m);
    if (!m || (src && !(m->data = malloc(bytes ? bytes : 1)))) {
        free(m);
        return herd_err_set(&c->err, HERD_ENOMEM, "out of memory");
    }
    if (!w->reply[target]) { /* this rank receives its answers from target there, as they come */
        char name[80];
        snprintf(name, sizeof name, "herd-answers-%p-%zu", (void *)w, target);
        w->reply[target] = sg_mailbox_by_name(name);
        sg_mailbox_set_receiver(name);
    }
    m->op = op, m->side = w->sides[target], m->origin = c->rank, m->off = off, m->bytes = bytes, m->dst = dst;
    m->reply = w->reply[target];
    m->alpha = alpha, m->off2 = off2;
    if (src)
        memcpy(m->data, src, bytes);
    long wire = SW_HDR + (op == SW_PUT || op == SW_ACC || op == SW_BLEND || op == SW_HEAVY ? (long)bytes : 0);
    m->self = m;
    post(agent_of(c), target, w->sides[target]->agent, (void *const *)&m->self, wire);
    if (op == SW_GET || op == SW_FLUSH || op == SW_UNLOCK || op == SW_BLEND)
        w->answers[target]++;
    return HERD_OK;
}

/* Waits for target's answers to this rank's requests. */
static void drain(sim_win *w, size_t target)
{
    for (; w->answers[target] > 0; w->answers[target]--)
        (void)sg_mailbox_get(w->reply[target]);
}

herd_status herd__simwin_lock(herd_comm *c, herd_win *hw, size_t target, bool exclusive)
{
    sim_win *w = hw->sim;
    herd_status st = check(c, w, target, 0, 0, "a lock");
    if (st < 0)
        return st;
    if (target != c->rank)
        return request(c, w, target, exclusive ? SW_LOCK_EXCL : SW_LOCK_SHARED, 0, 0, NULL, NULL, 0, 0);
    sg_sem_t sem = sg_sem_init(0);
    ask(w->own, c->rank, exclusive, sem);
    if (w->own->held[c->rank] == SW_ASKED)
        sg_sem_acquire(sem);
    sg_sem_destroy(sem);
    return HERD_OK;
}

/* An unlock or a flush of another rank's window: its request, then every
 * answer still to come from that rank, its own last. */
static herd_status answered(herd_comm *c, sim_win *w, size_t target, int op)
{
    herd_status st = request(c, w, target, op, 0, 0, NULL, NULL, 0, 0);
    if (st == HERD_OK)
        drain(w, target);
    return st;
}

herd_status herd__simwin_unlock(herd_comm *c, herd_win *hw, size_t target)
{
    herd_status st = check(c, hw->sim, target, 0, 0, "an unlock");
    if (st < 0 || target != c->rank)
        return st < 0 ? st : answered(c, hw->sim, target, SW_UNLOCK);
    release(hw->sim->own, c->rank);
    return HERD_OK;
}

/* The unlock's request sent, its answer drained by herd__simwin_wait. */
herd_status herd__simwin_unlock_begin(herd_comm *c, herd_win *hw, size_t target)
{
    herd_status st = check(c, hw->sim, target, 0, 0, "an unlock");
    if (st < 0 || target != c->rank)
        return st < 0 ? st : request(c, hw->sim, target, SW_UNLOCK, 0, 0, NULL, NULL, 0, 0);
    release(hw->sim->own, c->rank);
    return HERD_OK;
}

herd_status herd__simwin_wait(herd_comm *c, herd_win *hw)
{
    for (size_t t = 0; t < c->size; t++)
        drain(hw->sim, t);
    return HERD_OK;
}

herd_status herd__simwin_flush(herd_comm *c, herd_win *hw, size_t target)
{
    herd_status st = check(c, hw->sim, target, 0, 0, "a flush");
    if (st < 0 || target == c->rank) /* its own memory: nothing in flight */
        return st;
    return answered(c, hw->sim, target, SW_FLUSH);
}

herd_status herd__simwin_get(herd_comm *c, herd_win *hw, size_t target, size_t off, void *dst, size_t bytes)
{
    sim_win *w = hw->sim;
    herd_status st = check(c, w, target, off, bytes, "a get");
    if (st < 0)
        return st;
    if (target != c->rank)
        return request(c, w, target, SW_GET, off, bytes, dst, NULL, 0, 0);
    memcpy(dst, w->own->base + off, bytes);
    return HERD_OK;
}

herd_status herd__simwin_put(herd_comm *c, herd_win *hw, size_t target, size_t off, const void *src, size_t bytes)
{
    sim_win *w = hw->sim;
    herd_status st = check(c, w, target, off, bytes, "a put");
    if (st < 0)
        return st;
    if (target != c->rank)
        return request(c, w, target, SW_PUT, off, bytes, NULL, src, 0, 0);
    memcpy(w->own->base + off, src, bytes);
    return HERD_OK;
}

herd_status herd__simwin_blend(herd_comm *c, herd_win *hw, size_t target, size_t off, const float *src, size_t count,
                               float alpha, float *fetched)
{
    sim_win *w = hw->sim;
    herd_status st = check(c, w, target, off, count * sizeof(float), "a blend");
    if (st < 0)
        return st;
    if (target == c->rank) {
        memcpy(fetched, w->own->base + off, count * sizeof(float));
        herd__mpi_blend_floats(w->own->base + off, src, count, alpha);
        return HERD_OK;
    }
    return request(c, w, target, SW_BLEND, off, count * sizeof(float), fetched, src, alpha, 0);
}

herd_status herd__simwin_heavy_ball(herd_comm *c, herd_win *hw, size_t target, size_t off_v, size_t off_x,
                                    const float *upd, size_t count, float mu)
{
    sim_win *w = hw->sim;
    size_t bytes = count * sizeof(float);
    herd_status st = check(c, w, target, off_v, bytes, "a heavy-ball step");
    if (st == HERD_OK)
        st = check(c, w, target, off_x, bytes, "a heavy-ball step");
    if (st < 0)
        return st;
    if (target == c->rank) {
        herd__mpi_heavy_ball_floats(w->own->base + off_v, w->own->base + off_x, upd, count, mu);
        return HERD_OK;
    }
    return request(c, w, target, SW_HEAVY, off_v, bytes, NULL, upd, mu, off_x);
}

herd_status herd__simwin_accumulate(herd_comm *c, herd_win *hw, size_t target, size_t off, const float *src,
                                    size_t count)
{
    sim_win *w = hw->sim;
    herd_status st = check(c, w, target, off, count * sizeof(float), "an accumulate");
    if (st < 0)
        return st;
    if (target != c->rank)
        return request(c, w, target, SW_ACC, off, count * sizeof(float), NULL, src, 0, 0);
    herd__mpi_add_floats(w->own->base + off, src, count);
    return HERD_OK;
}

#endif
