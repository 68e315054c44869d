/* The test runner: forks each test, enforces its timeout, counts results.
 * Usage: herd-tests [-j JOBS] [-t SECONDS] [-1] [NAME_SUBSTRING...]
 *   -1  checks every test as HERD_TEST_ONE_THREAD is checked: those that
 *       pass could take the tag (harness.h) */
#define _POSIX_C_SOURCE 200809L
#include "harness.h"
#include "list.h"

#include "herd/herd_nn.h"

#include <errno.h>
#include <ftw.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

#if defined(__x86_64__)
#define ONE_THREAD_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ONE_THREAD_ARCH AUDIT_ARCH_AARCH64
#endif

int herd_test_one_thread_filter(void)
{
#if defined(ONE_THREAD_ARCH) && defined(__NR_clone3)
    /* A thread is a clone with CLONE_THREAD. clone3 passes its flags in
     * memory the filter cannot read: it gets ENOSYS, and glibc falls back
     * to clone (pthread_create, posix_spawn). The flags are clone's first
     * argument; its low half holds CLONE_THREAD (both are little-endian). */
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ONE_THREAD_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        return -errno;
    return 0;
#else
    return -ENOSYS;
#endif
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
    int one_thread; /* run under herd_test_one_thread_filter */
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

typedef struct queued {
    const herd_test *t;
    size_t index; /* in list order */
} queued;

static unsigned timeout_of(const herd_test *t) { return t->timeout_s ? t->timeout_s : 60; }

static int longest_first(const void *a, const void *b)
{
    const queued *x = a, *y = b;
    if (timeout_of(x->t) != timeout_of(y->t))
        return timeout_of(x->t) > timeout_of(y->t) ? -1 : 1;
    return x->index < y->index ? -1 : 1;
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
                    printf("FAIL  %-48s timed out after %us\n", r[i].t->name, timeout_of(r[i].t));
                else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS && r[i].one_thread)
                    printf("FAIL  %-48s started a thread: not HERD_TEST_ONE_THREAD\n", r[i].t->name);
                else if (WIFSIGNALED(status))
                    printf("FAIL  %-48s killed by signal %d\n", r[i].t->name, WTERMSIG(status));
                else
                    printf("FAIL  %-48s exit %d\n", r[i].t->name, WEXITSTATUS(status));
                if (!ok && r[i].one_thread && !(WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS))
                    printf("      (tagged HERD_TEST_ONE_THREAD: a process of its that starts a thread dies of SIGSYS, exit 159)\n");
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
    int jobs = 1, first = 1, all_one_thread = 0;
    unsigned scale = 1;
    while (first < argc && argv[first][0] == '-') {
        if (!strcmp(argv[first], "-j") && first + 1 < argc)
            jobs = atoi(argv[first + 1]), first += 2;
        else if (!strcmp(argv[first], "-t") && first + 1 < argc)
            scale = (unsigned)atoi(argv[first + 1]), first += 2; /* timeout multiplier (sanitizers) */
        else if (!strcmp(argv[first], "-1"))
            all_one_thread = 1, first++;
        else {
            fprintf(stderr, "usage: %s [-j JOBS] [-t TIMEOUT_SCALE] [-1] [NAME_SUBSTRING...]\n", argv[0]);
            return 2;
        }
    }
    if (jobs < 1)
        jobs = 1;
    char scale_s[16]; /* for herd_test_wait, which times the herd binary */
    snprintf(scale_s, sizeof scale_s, "%u", scale);
    setenv("HERD_TEST_TIMEOUT_SCALE", scale_s, 1);
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* The selected tests, the longest timeouts first (in list order
     * otherwise): with -j, a long test started last would run alone at the end. */
    size_t cap = 0;
    for (size_t s = 0; s < sizeof suites / sizeof suites[0]; s++)
        for (const herd_test *t = suites[s]; t->name; t++)
            cap++;
    running *r = calloc((size_t)jobs, sizeof *r);
    queued *q = calloc(cap, sizeof *q);
    if (!r || !q)
        return 2;
    size_t nq = 0;
    int one_thread_skipped = 0;
    for (size_t s = 0; s < sizeof suites / sizeof suites[0]; s++)
        for (const herd_test *t = suites[s]; t->name; t++) {
            if (!selected(t, argc, argv, first))
                continue;
            if (HERD_TEST_TSAN && (t->flags & HERD_TEST_ONE_THREAD))
                one_thread_skipped++;
            else
                q[nq] = (queued){t, nq}, nq++;
        }
    qsort(q, nq, sizeof *q, longest_first);
    int nrun = 0, passed = 0, total = 0;
    for (size_t i = 0; i < nq; i++) {
        const herd_test *t = q[i].t;
        int one_thread = all_one_thread || (t->flags & HERD_TEST_ONE_THREAD);
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
            int e = one_thread ? herd_test_one_thread_filter() : 0;
            if (e)
                fprintf(stderr, "  %s: HERD_TEST_ONE_THREAD not checked: no seccomp filter (%s)\n", t->name,
                        strerror(-e));
            t->fn();
            fflush(stdout);
            _exit(0);
        }
        unsigned to = timeout_of(t) * scale;
        r[nrun++] = (running){pid, t, now_s(), now_s() + to, one_thread};
        total++;
    }
    while (nrun > 0)
        reap(r, &nrun, &passed);
    free(r), free(q);
    if (one_thread_skipped)
        printf("%d tests tagged HERD_TEST_ONE_THREAD not run under ThreadSanitizer (make test and make asan run them)\n",
               one_thread_skipped);
    printf("%d passed, %d failed\n", passed, total - passed);
    return passed == total ? 0 : 1;
}
