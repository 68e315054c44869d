/* The test runner: forks each test, enforces its timeout, counts results.
 * Usage: herd-tests [-j JOBS] [-t SECONDS] [NAME_SUBSTRING...] */
#define _POSIX_C_SOURCE 200809L
#include "harness.h"
#include "list.h"

#include "herd/herd_nn.h"

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define X(s) extern const herd_test herd_tests_##s[];
HERD_TEST_SUITES(X)
#undef X

static const herd_test *const suites[] = {
#define X(s) herd_tests_##s,
    HERD_TEST_SUITES(X)
#undef X
};

static char tmpdir_path[256];

void herd_test_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "  %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    _exit(1);
}

const char *herd_test_tmpdir(void)
{
    if (!tmpdir_path[0]) {
        snprintf(tmpdir_path, sizeof tmpdir_path, "/tmp/herd-test-%ld", (long)getpid());
        if (mkdir(tmpdir_path, 0700) != 0 && errno != EEXIST)
            herd_test_fail(__FILE__, __LINE__, "mkdir %s: %s", tmpdir_path, strerror(errno));
    }
    return tmpdir_path;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct running {
    pid_t pid;
    const herd_test *t;
    double start, deadline;
} running;

static int selected(const herd_test *t, int argc, char **argv, int first)
{
    if (first >= argc)
        return 1;
    for (int i = first; i < argc; i++)
        if (strstr(t->name, argv[i]))
            return 1;
    return 0;
}

/* Waits for one child; returns 1 if it passed. Kills any child past its deadline. */
static int reap(running *r, int *nrun, int *passed_out)
{
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid > 0) {
            for (int i = 0; i < *nrun; i++) {
                if (r[i].pid != pid)
                    continue;
                double dt = now_s() - r[i].start;
                int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
                if (ok)
                    printf("ok    %-48s %7.2fs\n", r[i].t->name, dt);
                else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && now_s() >= r[i].deadline)
                    printf("FAIL  %-48s timed out after %us\n", r[i].t->name, r[i].t->timeout_s ? r[i].t->timeout_s : 60);
                else if (WIFSIGNALED(status))
                    printf("FAIL  %-48s killed by signal %d\n", r[i].t->name, WTERMSIG(status));
                else
                    printf("FAIL  %-48s exit %d\n", r[i].t->name, WEXITSTATUS(status));
                fflush(stdout);
                char dir[256];
                snprintf(dir, sizeof dir, "/tmp/herd-test-%ld", (long)pid);
                nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
                r[i] = r[--*nrun];
                *passed_out += ok;
                return ok;
            }
            continue;
        }
        double t = now_s();
        for (int i = 0; i < *nrun; i++)
            if (t >= r[i].deadline)
                kill(r[i].pid, SIGKILL);
        usleep(2000);
    }
}

int main(int argc, char **argv)
{
    herd_nn_wait_policy(argv); /* the tests train as herd does: waiting threads spin briefly, then sleep */
    int jobs = 1, first = 1;
    unsigned scale = 1;
    while (first < argc && argv[first][0] == '-') {
        if (!strcmp(argv[first], "-j") && first + 1 < argc)
            jobs = atoi(argv[first + 1]), first += 2;
        else if (!strcmp(argv[first], "-t") && first + 1 < argc)
            scale = (unsigned)atoi(argv[first + 1]), first += 2; /* timeout multiplier (sanitizers) */
        else {
            fprintf(stderr, "usage: %s [-j JOBS] [-t TIMEOUT_SCALE] [NAME_SUBSTRING...]\n", argv[0]);
            return 2;
        }
    }
    if (jobs < 1)
        jobs = 1;
    char scale_s[16]; /* for herd_test_wait, which times the herd binary */
    snprintf(scale_s, sizeof scale_s, "%u", scale);
    setenv("HERD_TEST_TIMEOUT_SCALE", scale_s, 1);
    setvbuf(stdout, NULL, _IOLBF, 0);
    running *r = calloc((size_t)jobs, sizeof *r);
    if (!r)
        return 2;
    int nrun = 0, passed = 0, total = 0;
    for (size_t s = 0; s < sizeof suites / sizeof suites[0]; s++) {
        for (const herd_test *t = suites[s]; t->name; t++) {
            if (!selected(t, argc, argv, first))
                continue;
            while (nrun >= jobs)
                reap(r, &nrun, &passed);
            fflush(stdout);
            fflush(stderr);
            pid_t pid = fork();
            if (pid < 0) {
                perror("fork");
                return 2;
            }
            if (pid == 0) {
                t->fn();
                fflush(stdout);
                _exit(0);
            }
            unsigned to = (t->timeout_s ? t->timeout_s : 60) * scale;
            r[nrun++] = (running){pid, t, now_s(), now_s() + to};
            total++;
        }
    }
    while (nrun > 0)
        reap(r, &nrun, &passed);
    free(r);
    printf("%d passed, %d failed\n", passed, total - passed);
    return passed == total ? 0 : 1;
}
