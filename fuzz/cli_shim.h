/* cli_shim.h — force-included before src/cli/herd.c in the CLI fuzzer only:
 * exit() becomes a longjmp back into the fuzzer, main() an ordinary
 * function, and the training and allreduce benchmark entry points stubs, so
 * the argument parser runs millions of times in one process. */
#ifndef HERD_FUZZ_CLI_SHIM_H
#define HERD_FUZZ_CLI_SHIM_H

#define exit herd_fuzz_exit
#define main herd_fuzz_cli_main
#define herd__train herd_fuzz_train
#define herd_bench_allreduce herd_fuzz_bench_allreduce
/* main() runs once per input: it must not re-execute the fuzzer */
#define herd_nn_wait_policy herd_fuzz_wait_policy

#endif
