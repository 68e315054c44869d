/* libFuzzer target: herd's command-line parser (src/cli/herd.c, built with
 * fuzz/cli_shim.h). The input is split at NUL bytes into arguments after
 * "herd"; exit() returns here through longjmp; training is a stub that
 * refuses, so only parsing and the checks before training run. The bench
 * sub-command is replaced by train (its benchmarks would run for real).
 * Run with -close_fd_mask=3: usage texts are noise, and libFuzzer keeps the
 * sanitizers' reports on its own copy of stderr. */
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "herd/herd_run.h"
#include "run/options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int herd_fuzz_cli_main(int argc, char **argv);
_Noreturn void herd_fuzz_exit(int code);
herd_status herd_fuzz_train(const herd__train_config *cfg, herd_train_result *res, herd_err *err);
herd_status herd_fuzz_bench_allreduce(const herd_bench_allreduce_config *cfg, herd_bench_row *rows, size_t *nrows,
                                      size_t *world, herd_err *err);
void herd_fuzz_wait_policy(char **argv);

/* The fuzzer's own state: where exit() lands. One thread. */
static jmp_buf exit_to;

void herd_fuzz_exit(int code)
{
    (void)code;
    longjmp(exit_to, 1);
}

herd_status herd_fuzz_train(const herd__train_config *cfg, herd_train_result *res, herd_err *err)
{
    memset(res, 0, sizeof *res);
    return herd_err_set(err, HERD_EINVAL, "fuzz: not training (%zu workers)", cfg->workers);
}

void herd_fuzz_wait_policy(char **argv) { (void)argv; }

herd_status herd_fuzz_bench_allreduce(const herd_bench_allreduce_config *cfg, herd_bench_row *rows, size_t *nrows,
                                      size_t *world, herd_err *err)
{
    (void)cfg, (void)rows;
    *nrows = 0, *world = 0;
    return herd_err_set(err, HERD_EINVAL, "fuzz: no benchmark");
}

enum { MAX_ARGS = 32 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *argv[2 + MAX_ARGS + 1];
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    int argc = 0;
    argv[argc++] = "herd";
    size_t i = 0;
    const char *first = buf;
    if (!strcmp(first, "train") || !strcmp(first, "bench")) {
        argv[argc++] = "train";
        i = strlen(buf) + 1;
    }
    for (int k = 0; i <= size && k < MAX_ARGS; k++) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    argv[argc] = NULL;
    if (!setjmp(exit_to))
        herd_fuzz_cli_main(argc, argv);
    fflush(stdout);
    free(buf);
    return 0;
}
