/* Child processes for the sub-commands that run others (spawn.h). */
#include "cli/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"

const char *herd__cli_self_dir(char *buf, size_t size)
{
    ssize_t n = readlink("/proc/self/exe", buf, size - 1);
    if (n <= 0 || (size_t)n >= size - 1) {
        snprintf(buf, size, ".");
        return buf;
    }
    buf[n] = 0;
    char *slash = strrchr(buf, '/');
    if (slash && slash != buf)
        *slash = 0;
    else
        snprintf(buf, size, "%s", slash ? "/" : ".");
    return buf;
}

const char *herd__cli_signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
}

#ifdef HERD_CLI_NO_SPAWN
/* The CLI fuzzer runs the parsers only: nothing starts, no handler is set. */
int herd__cli_spawn(const herd__spawn *s, double *real_s)
{
    (void)s;
    *real_s = 0;
    return 127;
}

void herd__cli_catch_signals(void)
{
}

int herd__cli_stop_signal(void)
{
    return 0;
}
#else
/* The one piece of mutable state of herd sim and herd compare: a signal
 * handler has no context to reach. The first signal that asked herd to stop
 * (STOP_SIG bits), and STOP_AGAIN once another one came. */
static atomic_int stop_signal; /* lock-free on every target herd builds for: safe in a handler */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler stores to stop_signal");
enum { STOP_SIG = 0xff, STOP_AGAIN = 0x100 };

static const int stop_signals[] = {SIGINT, SIGTERM, SIGHUP};
enum { NSTOP_SIGNALS = sizeof stop_signals / sizeof stop_signals[0] };

static void on_stop_signal(int sig)
{
    int saved = errno; /* the code the signal interrupted may be about to read it */
    int none = 0;
    if (!atomic_compare_exchange_strong(&stop_signal, &none, sig))
        atomic_fetch_or(&stop_signal, STOP_AGAIN);
    errno = saved;
}

void herd__cli_catch_signals(void)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* poll and nanosleep return early all the same */
    for (size_t i = 0; i < NSTOP_SIGNALS; i++) {
        /* nohup's SIGHUP stays ignored; a SIGINT ignored from the start (a
         * script's background job) is caught, as herd train does: kill -INT
         * is a request all the same */
        if (stop_signals[i] == SIGHUP && sigaction(SIGHUP, NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            continue;
        sigaction(stop_signals[i], &sa, NULL);
    }
    /* a child's descendants that outlive it (smpimain after smpirun) become
     * herd's to reap, so that the wait for its group can end */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
}

int herd__cli_stop_signal(void)
{
    return atomic_load(&stop_signal) & STOP_SIG;
}

/* The child's stdout, split into lines. */
typedef struct line_buf {
    char *p;
    size_t len, cap;
} line_buf;

static void emit_lines(line_buf *b, herd__line_fn on_line, void *ctx, bool flush)
{
    size_t start = 0;
    for (size_t i = 0; i < b->len; i++)
        if (b->p[i] == '\n') {
            b->p[i] = 0;
            on_line(ctx, b->p + start);
            start = i + 1;
        }
    if (flush && start < b->len) {
        b->p[b->len] = 0;
        on_line(ctx, b->p + start);
        start = b->len;
    }
    memmove(b->p, b->p + start, b->len - start);
    b->len -= start;
}

enum { PIPE_DATA, PIPE_IDLE, PIPE_END };

/* Reads what the child wrote, waiting up to wait_ms for it: PIPE_DATA (its
 * whole lines handed to on_line), PIPE_IDLE (nothing yet, or a signal came),
 * or PIPE_END (end of file, an error, or no memory for it: the last line
 * handed over, the pipe no longer read). */
static int pipe_read(int fd, line_buf *b, const herd__spawn *s, int wait_ms)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, wait_ms) <= 0)
        return PIPE_IDLE;
    if (b->cap - b->len < 4097) {
        size_t cap = b->cap ? 2 * b->cap : 65536;
        char *np = realloc(b->p, cap);
        if (!np) {
            fprintf(stderr, "herd: out of memory reading %s's output\n", s->argv[0]);
            return PIPE_END;
        }
        b->p = np, b->cap = cap;
    }
    ssize_t r = read(fd, b->p + b->len, b->cap - b->len - 1);
    if (r < 0 && errno == EINTR)
        return PIPE_IDLE;
    if (r <= 0) {
        if (b->p)
            emit_lines(b, s->on_line, s->ctx, true);
        return PIPE_END;
    }
    b->len += (size_t)r;
    emit_lines(b, s->on_line, s->ctx, false);
    return PIPE_DATA;
}

/* The child's side of the fork: a process group of its own, SIGTERM when
 * herd dies, the signals herd catches back to their default action, then
 * the program. A signal forwarded before the exec ends it (it was blocked
 * until now). */
static _Noreturn void child_exec(const herd__spawn *s, const int *fds, const sigset_t *mask, pid_t parent)
{
    setpgid(0, 0);
    /* herd killed outright (SIGKILL: no handler forwards anything) still
     * ends the child: the kernel sends it SIGTERM, which smpirun passes on
     * to its simulation and herd train takes as a stop. A parent already
     * gone before this line is seen by getppid. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(128 + SIGTERM);
    struct sigaction old;
    for (size_t i = 0; i < NSTOP_SIGNALS; i++)
        if (sigaction(stop_signals[i], NULL, &old) == 0 && old.sa_handler == on_stop_signal)
            signal(stop_signals[i], SIG_DFL);
    sigprocmask(SIG_SETMASK, mask, NULL);
    if (s->on_line) {
        dup2(fds[1], 1);
        close(fds[0]), close(fds[1]);
    }
    for (size_t i = 0; s->env && s->env[i]; i++)
        putenv(s->env[i]);
    execv(s->argv[0], s->argv);
    fprintf(stderr, "herd: cannot run %s: %s\n", s->argv[0], strerror(errno));
    _exit(127);
}

/* The wait for a child and its process group (its pgid is its pid). */
typedef struct child {
    pid_t pid;
    int status;       /* the child's, once reaped */
    bool reaped;
    bool stopping;    /* its group was sent a signal to end */
    bool again;       /* and a second one */
    bool killed;      /* and then SIGKILL */
    bool timed_out;   /* stopped for running past its deadline */
    double kill_at;   /* when SIGKILL follows */
    double give_up_at;
} child;

/* Reaps the child, then (herd being their subreaper) whatever of its group
 * outlived it; true while any of the group is left. */
static bool child_reap(child *c, const char *name)
{
    if (!c->reaped) {
        pid_t w = waitpid(c->pid, &c->status, WNOHANG);
        c->reaped = w == c->pid;
        if (w < 0 && errno != EINTR) { /* not ours to wait for: nothing more to learn */
            fprintf(stderr, "herd: waiting for %s: %s\n", name, strerror(errno));
            c->status = 127 << 8;
            c->reaped = true;
        }
    }
    if (!c->reaped)
        return true;
    while (waitpid(-c->pid, NULL, WNOHANG) > 0) {
    }
    /* a pgid is not reused while a process of the group is left */
    return kill(-c->pid, 0) == 0 || errno == EPERM;
}

/* Sends sig to the child's group, SIGKILL to follow after grace_s. */
static void child_stop(child *c, int sig, double grace_s)
{
    if (c->stopping)
        return;
    kill(-c->pid, sig);
    c->stopping = true;
    c->kill_at = herd__now() + grace_s;
}

/* Starts s->argv in a process group of its own (child_exec), its stdout
 * into a pipe whose read end goes to *out where s->on_line (else -1); its
 * pid, or -1 where it could not start (said). */
static pid_t child_start(const herd__spawn *s, int *out)
{
    int fds[2] = {-1, -1};
    fflush(NULL);
    if (s->on_line && pipe(fds) != 0) {
        fprintf(stderr, "herd: cannot create a pipe: %s\n", strerror(errno));
        return -1;
    }
    /* blocked across the fork: a signal then is the parent's to forward
     * (once the child has its group), never lost in the child's handler */
    sigset_t stops, saved;
    sigemptyset(&stops);
    for (size_t i = 0; i < NSTOP_SIGNALS; i++)
        sigaddset(&stops, stop_signals[i]);
    sigprocmask(SIG_BLOCK, &stops, &saved);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0)
        child_exec(s, fds, &saved, parent);
    if (pid > 0)
        setpgid(pid, pid); /* the child does it too: whichever comes first */
    sigprocmask(SIG_SETMASK, &saved, NULL);
    if (pid < 0) {
        fprintf(stderr, "herd: cannot start %s: %s\n", s->argv[0], strerror(errno));
        if (s->on_line)
            close(fds[0]), close(fds[1]);
        return -1;
    }
    if (s->on_line)
        close(fds[1]);
    *out = fds[0];
    return pid;
}

/* All of the child's group ended: what is left in its pipe fd, handed to
 * s->on_line, then the pipe closed. */
static void pipe_drain(int fd, line_buf *b, const herd__spawn *s)
{
    int r = PIPE_DATA;
    for (int k = 0; k < 1024 && (r = pipe_read(fd, b, s, 0)) == PIPE_DATA; k++) {
    } /* bounded: a process that left the group may hold the pipe */
    if (r == PIPE_IDLE && b->p)
        emit_lines(b, s->on_line, s->ctx, true);
    close(fd);
}

/* One look at a child whose group is still there: stops it where herd is
 * stopping, past its deadline (c->timed_out) or where it ended and left
 * processes of its group behind; forwards a second signal; sends SIGKILL
 * once the grace is over. False where its group is still there 5 s after
 * SIGKILL (said): herd waits no longer. */
static bool child_watch(child *c, const herd__spawn *s, double deadline)
{
    double now = herd__now();
    if (herd__cli_stop_signal()) {
        child_stop(c, herd__cli_stop_signal(), s->grace_s);
    } else if (!c->stopping && now > deadline) {
        fprintf(stderr, "herd: %s ran longer than %g s; stopping it\n", s->argv[0], s->timeout_s);
        c->timed_out = true;
        child_stop(c, SIGTERM, s->grace_s);
    } else if (c->reaped) { /* what it started outlives it: not left behind */
        child_stop(c, SIGTERM, s->grace_s);
    }
    if (c->stopping && !c->again && (atomic_load(&stop_signal) & STOP_AGAIN)) {
        /* forwarded too (a herd below escalates as it does: herd sim
         * kills smpirun's group), SIGKILL sooner */
        kill(-c->pid, herd__cli_stop_signal());
        c->again = true;
        c->kill_at = c->kill_at < now + s->grace_s / 5 ? c->kill_at : now + s->grace_s / 5;
    }
    if (c->stopping && !c->killed && now >= c->kill_at) {
        kill(-c->pid, SIGKILL);
        c->killed = true;
        c->give_up_at = now + 5;
    } else if (c->killed && now >= c->give_up_at) {
        fprintf(stderr, "herd: processes of %s (group %ld) are still there 5 s after SIGKILL\n", s->argv[0],
                (long)c->pid);
        return false;
    }
    return true;
}

int herd__cli_spawn(const herd__spawn *s, double *real_s)
{
    const char *name = s->argv[0];
    int out_fd = -1;
    double t0 = herd__now();
    *real_s = 0;
    if (herd__cli_stop_signal()) /* nothing starts once herd is stopping */
        return 128 + herd__cli_stop_signal();
    pid_t pid = child_start(s, &out_fd);
    if (pid < 0)
        return 127;
    line_buf b = {0};
    child c = {.pid = pid};
    bool open_out = s->on_line != NULL;
    double deadline = t0 + s->timeout_s;
    for (;;) {
        if (open_out && pipe_read(out_fd, &b, s, 100) == PIPE_END) {
            close(out_fd);
            open_out = false;
        }
        if (!child_reap(&c, name)) {
            if (open_out) /* all of it ended: what is left in the pipe, then done */
                pipe_drain(out_fd, &b, s);
            break;
        }
        if (!child_watch(&c, s, deadline)) {
            if (open_out)
                close(out_fd);
            break;
        }
        if (!open_out) {
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    free(b.p);
    *real_s = herd__now() - t0;
    if (herd__cli_stop_signal())
        return 128 + herd__cli_stop_signal();
    if (c.timed_out)
        return 124;
    if (!c.reaped)
        return 128 + SIGKILL;
    if (WIFSIGNALED(c.status))
        return 128 + WTERMSIG(c.status);
    return WEXITSTATUS(c.status);
}
#endif
