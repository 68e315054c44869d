/* Output paths are never destroyed (src/core/outpath.h): a file written
 * through a symbolic link leaves the link a link and the target's
 * permissions as they were; a directory, a link to nothing and a FIFO that
 * no process reads are refused at once, untouched; a FIFO with a reader and
 * a character device are written in place. Checked through the writers that
 * use it: NPY files (herd export, herd eval --dump-logits), the run's --log
 * and --trace. */
#include "fixtures.h"
#include "harness.h"
#include "herd/herd_ckpt.h"
#include "herd/herd_run.h"
#include "core/clock.h"
#include "core/outpath.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *scratch(const char *name) { return herd_test_fmt("%s/%s", herd_test_tmpdir(), name); }

static const float data[6] = {1, 2, 3, 4, 5, 6};
static const size_t shape[2] = {2, 3};

/* The bytes an NPY write of data produces (written to a new name). */
static size_t npy_size(void)
{
    herd_err err = {0};
    const char *p = scratch("plain.npy");
    ASSERT_OK(herd_npy_write(p, shape, 2, data, &err));
    struct stat st;
    ASSERT_OK(stat(p, &st));
    ASSERT_TRUE(st.st_size > (off_t)sizeof data);
    return (size_t)st.st_size;
}

static void test_symlink_kept(void)
{
    size_t want = npy_size();
    const char *target = scratch("target.npy"), *link = scratch("link.npy");
    int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_TRUE(fd >= 0);
    ASSERT_TRUE(write(fd, "old", 3) == 3);
    close(fd);
    ASSERT_OK(chmod(target, 0600));
    ASSERT_OK(symlink("target.npy", link));
    herd_err err = {0};
    ASSERT_OK(herd_npy_write(link, shape, 2, data, &err));
    struct stat ls, ts;
    ASSERT_OK(lstat(link, &ls));
    ASSERT_TRUE(S_ISLNK(ls.st_mode)); /* still a link: the rename went to its target */
    ASSERT_OK(stat(target, &ts));
    ASSERT_TRUE(S_ISREG(ts.st_mode));
    ASSERT_EQ_INT(ts.st_size, want);
    ASSERT_EQ_INT(ts.st_mode & 0777, 0600);
}

static void test_refused_untouched(void)
{
    herd_err err = {0};
    const char *dir = scratch("adir");
    ASSERT_OK(mkdir(dir, 0755));
    ASSERT_EQ_INT(herd_npy_write(dir, shape, 2, data, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "is a directory");
    struct stat st;
    ASSERT_OK(lstat(dir, &st));
    ASSERT_TRUE(S_ISDIR(st.st_mode));
    const char *dang = scratch("dangling");
    ASSERT_OK(symlink("nothing-here", dang));
    err = (herd_err){0};
    ASSERT_EQ_INT(herd_npy_write(dang, shape, 2, data, &err), HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "symbolic link to a missing file");
    ASSERT_OK(lstat(dang, &st));
    ASSERT_TRUE(S_ISLNK(st.st_mode));
    ASSERT_TRUE(access(scratch("nothing-here"), F_OK) != 0);
}

/* A FIFO: refused at once without a reader (a blocking open would wait
 * forever), written in place with one, and a FIFO still. */
static void test_fifo(void)
{
    const char *ff = scratch("fifo");
    ASSERT_OK(mkfifo(ff, 0644));
    herd_err err = {0};
    double t0 = herd__now();
    ASSERT_EQ_INT(herd_npy_write(ff, shape, 2, data, &err), HERD_EINVAL);
    ASSERT_TRUE(herd__now() - t0 < 1.0);
    ASSERT_STR_CONTAINS(err.msg, "no process reads");
    size_t want = npy_size();
    int pipefd[2];
    ASSERT_OK(pipe(pipefd));
    pid_t pid = fork();
    ASSERT_TRUE(pid >= 0);
    if (pid == 0) { /* the reader: counts the bytes, reports them through the pipe */
        close(pipefd[0]);
        int fd = open(ff, O_RDONLY);
        size_t n = 0;
        char buf[256];
        ssize_t r;
        while (fd >= 0 && (r = read(fd, buf, sizeof buf)) > 0)
            n += (size_t)r;
        _exit(write(pipefd[1], &n, sizeof n) == (ssize_t)sizeof n ? 0 : 1);
    }
    close(pipefd[1]);
    herd_status st = HERD_EIO;
    for (int i = 0; i < 200 && st != HERD_OK; i++) { /* until the reader has opened its end */
        err = (herd_err){0};
        st = herd_npy_write(ff, shape, 2, data, &err);
        if (st != HERD_OK)
            usleep(10000);
    }
    ASSERT_OK(st);
    size_t got = 0;
    ASSERT_TRUE(read(pipefd[0], &got, sizeof got) == (ssize_t)sizeof got);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_EQ_INT(got, want);
    struct stat sb;
    ASSERT_OK(lstat(ff, &sb));
    ASSERT_TRUE(S_ISFIFO(sb.st_mode));
    /* a link the kernel follows to a pipe that has no path (/dev/stdout
     * into `| jq`: /proc/self/fd/1 -> pipe:[n]): written in place */
    int p2[2];
    ASSERT_OK(pipe(p2));
    const char *viafd = scratch("stdout-like");
    ASSERT_OK(symlink(herd_test_fmt("/proc/self/fd/%d", p2[1]), viafd));
    err = (herd_err){0};
    if (herd_npy_write(viafd, shape, 2, data, &err) != HERD_OK)
        herd_test_fail(__FILE__, __LINE__, "a link to a pipe: %s", err.msg);
    close(p2[1]);
    size_t n = 0;
    char buf[512];
    ssize_t r;
    while ((r = read(p2[0], buf, sizeof buf)) > 0)
        n += (size_t)r;
    close(p2[0]);
    ASSERT_EQ_INT(n, want);
    ASSERT_OK(lstat(viafd, &sb));
    ASSERT_TRUE(S_ISLNK(sb.st_mode));
}

/* A character device (a private node of /dev/null's numbers, as root):
 * written in place, still a device. */
static void test_char_device(void)
{
    const char *nul = scratch("nul");
    if (mknod(nul, S_IFCHR | 0666, makedev(1, 3)) != 0)
        return; /* not root: nothing to check */
    herd_err err = {0};
    ASSERT_OK(herd_npy_write(nul, shape, 2, data, &err));
    struct stat st;
    ASSERT_OK(lstat(nul, &st));
    ASSERT_TRUE(S_ISCHR(st.st_mode));
}

/* --log and --trace: a FIFO without a reader and a directory are refused
 * before the run trains, and nothing waits. */
static void test_run_outputs(void)
{
    const char *ff = scratch("logfifo"), *dir = scratch("tracedir");
    ASSERT_OK(mkfifo(ff, 0644));
    ASSERT_OK(mkdir(dir, 0755));
    herd__train_config c = herd_test_config("linear", "sgd", 1);
    c.log_path = ff;
    herd_train_result r;
    herd_err err = {0};
    double t0 = herd__now();
    ASSERT_EQ_INT(herd__train(&c, &r, &err), HERD_EINVAL);
    ASSERT_TRUE(herd__now() - t0 < 5.0);
    ASSERT_STR_CONTAINS(err.msg, "--log");
    ASSERT_STR_CONTAINS(err.msg, "no process reads");
    c.log_path = NULL;
    c.trace_path = dir;
    c.train_limit = 128;
    c.test_limit = 64;
    c.epochs = 1;
    err = (herd_err){0};
    herd_status st = herd__train(&c, &r, &err);
    ASSERT_EQ_INT(st, HERD_EINVAL);
    ASSERT_STR_CONTAINS(err.msg, "--trace");
    ASSERT_STR_CONTAINS(err.msg, "is a directory");
    struct stat sb;
    ASSERT_OK(lstat(dir, &sb));
    ASSERT_TRUE(S_ISDIR(sb.st_mode));
}

/* herd__path_split: a path's directory and last component, as --checkpoint
 * FILE and herd eval/export read them. */
static void test_path_split(void)
{
    static const struct {
        const char *path, *dir, *name;
    } cases[] = {{"a/b", "a", "b"}, {"b", ".", "b"}, {"/b", "/", "b"}, {"/x/y/ckpt-8.herd", "/x/y", "ckpt-8.herd"},
                 {"./c", ".", "c"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[64];
        const char *name = herd__path_split(cases[i].path, dir, sizeof dir);
        ASSERT_TRUE(!strcmp(dir, cases[i].dir) && !strcmp(name, cases[i].name));
        ASSERT_TRUE(herd__path_split(cases[i].path, NULL, 0) == name);
    }
}

const herd_test herd_tests_outpath[] = {
    {"outpath_path_split", test_path_split, 10, HERD_TEST_ONE_THREAD},
    {"outpath_symlink_kept", test_symlink_kept, 10, HERD_TEST_ONE_THREAD},
    {"outpath_refused_untouched", test_refused_untouched, 10, HERD_TEST_ONE_THREAD},
    {"outpath_fifo", test_fifo, 20, HERD_TEST_ONE_THREAD},
    {"outpath_char_device", test_char_device, 10, HERD_TEST_ONE_THREAD},
    {"outpath_run_outputs", test_run_outputs, 60, HERD_TEST_ONE_THREAD},
    HERD_TEST_END,
};
