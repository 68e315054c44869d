/* The runner's own check (harness.h): a test tagged HERD_TEST_ONE_THREAD
 * runs under a filter that kills, with SIGSYS, a process of its that starts
 * a thread, so a wrong tag fails `make test` instead of hiding the test's
 * races from `make tsan`. Here: the filter kills pthread_create and an
 * OpenMP team, and lets fork, exec and posix_spawn (system) through. */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* fn in a child under the filter; its wait status. */
static int under_filter(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) {
        if (herd_test_one_thread_filter() != 0)
            _exit(2);
        fn();
        _exit(0);
    }
    int status;
    ASSERT_EQ_INT(waitpid(pid, &status, 0), pid);
    return status;
}

static void *nothing(void *arg) { return arg; }

static void start_pthread(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, nothing, NULL) == 0)
        pthread_join(t, NULL);
    _exit(3); /* not stopped */
}

static void start_openmp(void)
{
    int n = 0;
#pragma omp parallel num_threads(2)
    {
#pragma omp atomic
        n++;
    }
    _exit(n == 2 ? 3 : 4);
}

static void start_programs(void)
{
    if (system("exit 5") != 5 << 8) /* posix_spawn and exec */
        _exit(6);
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0)
        _exit(7);
}

static void test_one_thread_filter(void)
{
    int st = under_filter(start_pthread);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSYS)
        herd_test_fail(__FILE__, __LINE__, "pthread_create under the filter: status %#x, want SIGSYS", st);
    st = under_filter(start_openmp);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSYS)
        herd_test_fail(__FILE__, __LINE__, "an OpenMP team under the filter: status %#x, want SIGSYS", st);
    st = under_filter(start_programs);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        herd_test_fail(__FILE__, __LINE__, "fork, exec and posix_spawn under the filter: status %#x, want exit 0", st);
}

const herd_test herd_tests_harness[] = {
    {"harness_one_thread_filter", test_one_thread_filter, 10, HERD_TEST_ONE_THREAD},
    HERD_TEST_END,
};
