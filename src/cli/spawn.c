/* Child processes for the sub-commands that run others (spawn.h). */
#include "cli/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#ifdef HERD_CLI_NO_SPAWN
/* The CLI fuzzer runs the parsers only. */
int herd__cli_spawn(char *const *argv, char *const *env, double timeout_s, herd__line_fn on_line, void *ctx,
                    double *real_s)
{
    (void)argv, (void)env, (void)timeout_s, (void)on_line, (void)ctx;
    *real_s = 0;
    return 127;
}
#else
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

int herd__cli_spawn(char *const *argv, char *const *env, double timeout_s, herd__line_fn on_line, void *ctx,
                    double *real_s)
{
    int fds[2] = {-1, -1};
    double t0 = herd__now();
    *real_s = 0;
    fflush(NULL);
    if (on_line && pipe(fds) != 0) {
        fprintf(stderr, "herd: cannot create a pipe: %s\n", strerror(errno));
        return 127;
    }
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "herd: cannot start %s: %s\n", argv[0], strerror(errno));
        if (on_line)
            close(fds[0]), close(fds[1]);
        return 127;
    }
    if (pid == 0) {
        if (on_line) {
            dup2(fds[1], 1);
            close(fds[0]), close(fds[1]);
        }
        for (size_t i = 0; env && env[i]; i++)
            putenv(env[i]);
        execv(argv[0], argv);
        fprintf(stderr, "herd: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    line_buf b = {0};
    bool open_out = on_line != NULL, killed = false;
    if (on_line)
        close(fds[1]);
    int status = 0;
    double deadline = t0 + timeout_s, term_at = 0;
    for (;;) {
        if (open_out) {
            struct pollfd pf = {.fd = fds[0], .events = POLLIN};
            int pr = poll(&pf, 1, 200);
            if (pr > 0) {
                if (b.cap - b.len < 4097) {
                    size_t cap = b.cap ? 2 * b.cap : 65536;
                    char *np = realloc(b.p, cap);
                    if (!np) {
                        fprintf(stderr, "herd: out of memory reading %s's output\n", argv[0]);
                        open_out = false;
                        close(fds[0]);
                        continue;
                    }
                    b.p = np, b.cap = cap;
                }
                ssize_t r = read(fds[0], b.p + b.len, b.cap - b.len - 1);
                if (r > 0) {
                    b.len += (size_t)r;
                    emit_lines(&b, on_line, ctx, false);
                } else if (r == 0 || errno != EINTR) {
                    emit_lines(&b, on_line, ctx, true);
                    open_out = false;
                    close(fds[0]);
                }
            }
        }
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid && !open_out)
            break;
        if (w == pid) { /* exited: drain what is left in the pipe */
            for (ssize_t r; b.p && (r = read(fds[0], b.p + b.len, b.cap - b.len - 1)) > 0;) {
                b.len += (size_t)r;
                emit_lines(&b, on_line, ctx, false);
                if (b.cap - b.len < 4097)
                    break; /* an endless line: what was read is enough */
            }
            emit_lines(&b, on_line, ctx, true);
            close(fds[0]);
            break;
        }
        if (w < 0 && errno != EINTR) {
            fprintf(stderr, "herd: waiting for %s: %s\n", argv[0], strerror(errno));
            status = 127 << 8;
            break;
        }
        double now = herd__now();
        if (!killed && now > deadline) {
            fprintf(stderr, "herd: %s ran longer than %g s; stopping it\n", argv[0], timeout_s);
            kill(pid, SIGTERM);
            killed = true, term_at = now;
        } else if (killed && term_at > 0 && now > term_at + 5) {
            kill(pid, SIGKILL);
            term_at = 0;
        }
        if (!open_out) {
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    free(b.p);
    *real_s = herd__now() - t0;
    if (killed)
        return 124;
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}
#endif

