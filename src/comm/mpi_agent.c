/* The threads beside each endpoint of the mpi engine (mpi_internal.h): the
 * communication agent, with the pokes that wake it, and the watchdog of the
 * window calls. mpi.c, the engine, starts and stops them with the endpoint.
 *
 * The communication agent. Passive-target windows need the target's MPI
 * library to answer: across hosts over TCP, Open MPI carries them through
 * its pt2pt component, where every lock, get and accumulate is a message the
 * target answers only from inside an MPI call of its own. A rank computing
 * (or sleeping as a straggler) outside MPI would stall every rank that reads
 * its shard, center slice or mailbox, and so would a rendezvous send to it.
 * So every endpoint has an agent: a thread that enters MPI when input
 * reaches one of the process's sockets, and at least every
 * HERD_MPI_PROGRESS_US microseconds (default AGENT_US below; 0: no agent),
 * while the worker is elsewhere, and so answers the window traffic and
 * moves the messages in flight on the worker's behalf. Open MPI 4's pt2pt
 * component refuses MPI_THREAD_MULTIPLE, so the thread level stays
 * SERIALIZED and every MPI call of the endpoint (the worker's, an allreduce
 * overlap thread's, the agent's) is made holding the endpoint's `mpi_lock`.
 * A call that blocks inside MPI (a window lock awaiting its grant, a
 * collective) keeps the lock, which is right: while it is inside MPI this
 * rank's progress is made by that call. The agent's turns take the lock for
 * a few microseconds; an MPI_Iprobe on a communicator of its own, which
 * never matches, is what runs the library's progress engine.
 *
 * The window calls that wait for the target (lock, unlock, flush, and the
 * get/put/accumulate that Open MPI's pt2pt component may hold until the lock
 * is granted) have no nonblocking form, and with Open MPI 4.1 they wait for
 * as long as the target's agent takes to answer, or forever if its process
 * is stuck. A watchdog thread per endpoint bounds them: each such call is
 * armed with its deadline (GUARDED, mpi.c), and a call still inside MPI past it ends this
 * process with a message naming the peer, since nothing can interrupt MPI;
 * mpirun then ends the job, naming this rank.
 */
#ifdef HERD_HAVE_MPI

#include "comm/mpi_internal.h"
#include "comm/sockwatch.h"
#include "core/clock.h"

#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef HERD_SIM
static void *watchdog_main(void *p)
{
    watchdog *d = p;
    while (!atomic_load(&d->quit)) {
        struct timespec ts = {0, 20000000L};
        nanosleep(&ts, NULL);
        double deadline = atomic_load(&d->deadline);
        if (deadline == 0 || herd__now() < deadline)
            continue;
        char msg[256];
        int n = snprintf(msg, sizeof msg,
                         "herd: rank %zu: timed out after %g s in %s on rank %zu's window (no timed form in MPI: "
                         "rank %zu ends here, and mpirun the job)\n",
                         d->rank, atomic_load(&d->timeout_s), atomic_load(&d->what), atomic_load(&d->peer), d->rank);
        if (n > 0 && write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1) < 0)
            n = 0; /* nowhere left to say it */
        _exit(1); /* the caller's thread is inside MPI: nothing else ends the wait */
    }
    return NULL;
}
#endif

void herd__mpi_watchdog_start(mpi_comm *m)
{
#ifdef HERD_SIM
    (void)m; /* SimGrid ends a simulation whose ranks all block, in simulated time */
#else
    watchdog *d = &m->dog;
    d->rank = m->base.rank;
    /* without the thread, window calls wait unbounded, as they did before */
    d->running = pthread_create(&d->thread, NULL, watchdog_main, d) == 0;
#endif
}

void herd__mpi_watchdog_stop(mpi_comm *m)
{
    if (!m->dog.running)
        return;
    atomic_store(&m->dog.quit, true);
    pthread_join(m->dog.thread, NULL);
    m->dog.running = false;
}

/* The agent's period where HERD_MPI_PROGRESS_US does not set one: its
 * sleep while the worker is in and out of MPI, and its longest sleep with
 * windows open where requests may come that nothing announces (Open MPI's
 * own windows across hosts: its pt2pt component's messages over shared
 * memory, and the agents' windows where ranks cannot poke each other).
 * A message over TCP wakes the agent at once (sockwatch.h), and so does a
 * poke from a rank of its host (herd__mpi_poke); elsewhere it sleeps
 * AGENT_NO_WINDOW_US. Every turn costs the core a switch away from compute
 * and back, some 30 us on this project's virtual machines: at 50 us a
 * computing rank lost a fifth of its speed, and two agents a core at 250 us
 * cost lenet on two hosts 10-15% of its speed against 2 ms. */
#define AGENT_US 250
/* The sleep after a turn that served a window request, and while an
 * answer is still leaving. */
#define AGENT_AFTER_US 20
/* The agent's sleep while the endpoint has no window: only messages to
 * move (a rendezvous send to a computing rank), which wait for it as long;
 * nothing wakes it sooner, as every wake costs the computing core. */
#define AGENT_NO_WINDOW_US 2000

#ifndef HERD_SIM
/* Takes one turn in MPI where the worker took none since the last (seen:
 * the entries counted then); whether it did. */
static bool agent_turn(mpi_comm *m, uint_fast64_t *seen)
{
    /* a worker (or its overlap thread) that entered MPI made progress
     * itself, and one holding the lock is inside MPI doing so */
    uint_fast64_t now = atomic_load_explicit(&m->entries, memory_order_relaxed);
    bool idle = now == *seen;
    *seen = now;
    if (!idle || pthread_mutex_trylock(&m->mpi_lock) != 0)
        return false;
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, m->agent.quiet, &flag, MPI_STATUS_IGNORE);
    pthread_mutex_unlock(&m->mpi_lock);
    return true;
}

/* The agent's turn where it serves windows (mpi_am.c): every turn, as the
 * worker's own calls serve none; whether it served a request or an answer
 * is still leaving. */
static void drain_wakes(agent *a)
{
    char drop[64];
    while (read(a->wake[0], drop, sizeof drop) > 0)
        continue; /* the wakes so far are answered by this turn */
}

static bool agent_serve(mpi_comm *m)
{
    drain_wakes(&m->agent);
    pthread_mutex_lock(&m->mpi_lock);
    bool served = herd__am_serve(m, true);
    pthread_mutex_unlock(&m->mpi_lock);
    return served;
}

static void *agent_main(void *p)
{
    mpi_comm *m = p;
    agent *a = &m->agent;
    herd__sockwatch sw;
    herd__sockwatch_init(&sw);
    uint_fast64_t seen = 0;
    long nap_us = 0; /* input that stays after a turn: not MPI's to read now */
    bool served = false;
    while (!atomic_load_explicit(&a->quit, memory_order_relaxed)) {
        uint_fast64_t now = atomic_load_explicit(&m->entries, memory_order_relaxed);
        bool windows = atomic_load_explicit(&a->windows, memory_order_relaxed) > 0;
        if (!windows) {
            long us = a->period_us > AGENT_NO_WINDOW_US ? a->period_us : AGENT_NO_WINDOW_US;
            struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
            nanosleep(&ts, NULL);
            agent_turn(m, &seen);
            continue;
        }
        bool input;
        if (now != seen && !served) {
            /* While the worker (or its overlap thread) is in and out of MPI
             * it makes the progress, and serves the windows as it waits:
             * the agent sleeps its period through, not woken by the
             * traffic of the worker's own exchanges (a wake costs the core
             * ~30 us here), only by a poke. */
            seen = now;
            struct pollfd pf = {.fd = a->wake[0], .events = POLLIN};
            struct timespec ts = {a->period_us / 1000000, (a->period_us % 1000000) * 1000L};
            if (ppoll(&pf, 1, &ts, NULL) <= 0)
                continue;
            input = true;
        } else {
            /* after a request, look again soon: its epoch's next ones follow */
            input = herd__sockwatch_wait(&sw, served ? AGENT_AFTER_US : a->idle_us, a->wake[0]);
        }
        if (m->am) {
            served = agent_serve(m);
            seen = atomic_load_explicit(&m->entries, memory_order_relaxed);
            continue;
        }
        if (input)
            drain_wakes(a);
        bool turned = agent_turn(m, &seen);
        if (!input) {
            nap_us = 0;
            continue;
        }
        /* input that wakes it again at once (the worker inside MPI reads
         * it, or the socket is another thread's): back off to the period */
        nap_us = turned && nap_us == 0 ? 0 : (nap_us ? 2 * nap_us : 10);
        if (nap_us > a->period_us)
            nap_us = a->period_us;
        if (nap_us) {
            struct timespec ts = {0, nap_us * 1000L};
            nanosleep(&ts, NULL);
        }
    }
    herd__sockwatch_free(&sw);
    return NULL;
}
#endif

#ifndef HERD_SIM
/* The agent's period in microseconds: HERD_MPI_PROGRESS_US, else AGENT_US;
 * 0: none. */
long herd__mpi_agent_period_us(bool *given)
{
    const char *s = getenv("HERD_MPI_PROGRESS_US");
    char *end;
    long us = s && *s ? strtol(s, &end, 10) : -1;
    bool ok = us >= 0 && us <= 1000000 && !*end;
    if (given)
        *given = ok;
    return ok ? us : AGENT_US;
}
#endif

#ifndef HERD_SIM
/* Collective over comm: whether its ranks span several hosts (every rank
 * answers alike: one with all its host's ranks sees the others off it);
 * local (NULL: not wanted) marks, per rank of comm, those of this host. */
bool herd__mpi_host_ranks(MPI_Comm comm, bool *local)
{
    MPI_Comm node;
    int size = 0, n = 0;
    MPI_Comm_size(comm, &size);
    if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_size(node, &n);
        int *in = local ? malloc((size_t)n * sizeof *in) : NULL, *out = local ? malloc((size_t)n * sizeof *out) : NULL;
        MPI_Group g_node, g_world;
        if (in && out) {
            MPI_Comm_group(node, &g_node);
            MPI_Comm_group(comm, &g_world);
            for (int i = 0; i < n; i++)
                in[i] = i;
            if (MPI_Group_translate_ranks(g_node, n, in, g_world, out) == MPI_SUCCESS)
                for (int i = 0; i < n; i++)
                    if (out[i] >= 0 && out[i] < size)
                        local[out[i]] = true;
            MPI_Group_free(&g_node);
            MPI_Group_free(&g_world);
        }
        free(in), free(out);
        MPI_Comm_free(&node);
    }
    int spread = n > 0 && n < size, any = 0;
    MPI_Allreduce(&spread, &any, 1, MPI_INT, MPI_MAX, comm);
    return any;
}
#endif

#ifndef HERD_SIM
/* The address of rank's poke socket: in Linux's abstract namespace (of the
 * network namespace, which a host's ranks share), so that nothing is left
 * in the file system; job tells one run's endpoints from another's. */
static socklen_t poke_addr(uint64_t job, size_t rank, struct sockaddr_un *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    int n = snprintf(sa->sun_path + 1, sizeof sa->sun_path - 1, "herd-%016llx-%zu", (unsigned long long)job, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* The poke sockets (collective): a rank whose window requests go to a rank
 * of its own host over shared memory wakes that rank's agent with a
 * datagram (herd__mpi_poke), so that the agent need not wake on a timer to
 * find them. Where one rank cannot have its socket, nobody pokes. Sets
 * a->job, a->local and the poke socket as wake[0]; *spans: the ranks are on
 * several hosts. */
static void pokes_start(mpi_comm *m, bool *spans)
{
    agent *a = &m->agent;
    uint64_t job = 0;
    if (m->base.rank == 0)
        job = (uint64_t)getpid() << 32 ^ (uint64_t)(herd__now() * 1e9) ^ (uint64_t)(uintptr_t)m;
    MPI_Bcast(&job, 1, MPI_UINT64_T, 0, m->world);
    struct sockaddr_un sa;
    socklen_t len = poke_addr(job, m->base.rank, &sa);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, len) == 0, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, m->world);
    bool *local = calloc(m->base.size, sizeof *local);
    *spans = herd__mpi_host_ranks(m->world, local);
    if (!all || !local) {
        if (fd >= 0)
            close(fd);
        free(local);
        return;
    }
    a->job = job;
    a->local = local;
    a->wake[0] = fd;
}
#endif

void herd__mpi_poke(mpi_comm *m, size_t rank)
{
#ifndef HERD_SIM
    agent *a = &m->agent;
    if (rank == m->base.rank && a->wake[1] >= 0) {
        char one = 1;
        if (write(a->wake[1], &one, 1) < 0)
            one = 0; /* a full pipe wakes it already */
        return;
    }
    if (!a->local || rank >= m->base.size || !a->local[rank] || a->wake[0] < 0)
        return;
    struct sockaddr_un sa;
    socklen_t len = poke_addr(a->job, rank, &sa);
    /* a full queue wakes it already; a rank gone is the watchdog's */
    (void)sendto(a->wake[0], "", 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
#else
    (void)m, (void)rank;
#endif
}

/* Starts m's agent where MPI gives a thread level that allows one and more
 * than one rank needs it; where it cannot start, the endpoint works
 * without, progressing only inside its worker's calls. */
void herd__mpi_agent_start(mpi_comm *m, int provided)
{
    agent *a = &m->agent;
    a->quiet = MPI_COMM_NULL;
    a->wake[0] = a->wake[1] = -1;
#ifdef HERD_SIM
    (void)provided; /* SimGrid's sends need no target; the windows' agents are actors (simwin.c) */
#else
    if (m->base.size < 2 || provided < MPI_THREAD_SERIALIZED)
        return;
    /* collective: on every rank, whatever its environment says */
    if (MPI_Comm_dup(MPI_COMM_WORLD, &a->quiet) != MPI_SUCCESS) {
        a->quiet = MPI_COMM_NULL;
        return;
    }
    bool spans = false;
    pokes_start(m, &spans);
    bool given;
    long us = herd__mpi_agent_period_us(&given);
    if (us == 0)
        return;
    a->period_us = us;
    /* with windows open and the worker elsewhere: where every request wakes
     * it (a socket, a poke) or none needs it (the ranks on one host, where
     * Open MPI's windows go without the target), the agent sleeps long */
    bool woken = m->am ? a->local != NULL : !spans;
    a->idle_us = given || !woken ? us : AGENT_NO_WINDOW_US;
    if (a->wake[0] < 0) {
        if (pipe(a->wake) != 0) {
            a->wake[0] = a->wake[1] = -1;
            return;
        }
        fcntl(a->wake[0], F_SETFL, O_NONBLOCK);
        fcntl(a->wake[1], F_SETFL, O_NONBLOCK);
    }
    a->running = pthread_create(&a->thread, NULL, agent_main, m) == 0;
#endif
}

static void agent_stop(mpi_comm *m)
{
    agent *a = &m->agent;
    if (!a->running)
        return;
    atomic_store(&a->quit, true);
    pthread_join(a->thread, NULL);
    a->running = false;
}

void herd__mpi_agent_free(mpi_comm *m)
{
    agent *a = &m->agent;
    agent_stop(m);
    for (int i = 0; i < 2; i++)
        if (a->wake[i] >= 0)
            close(a->wake[i]);
    a->wake[0] = a->wake[1] = -1;
    free(a->local);
    a->local = NULL;
}

#endif
