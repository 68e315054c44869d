# herd — build with `make`, test with `make test`.
#   make WERROR=1        warnings are errors (CI)
#   make asan            the test suite under AddressSanitizer + UBSan (build-asan/)
#   make tsan            the tests that may start threads under ThreadSanitizer (build-tsan/;
#                        tests/harness.h: HERD_TEST_ONE_THREAD)
#   make test-mpi        the mpi engine under mpirun: test-mpi-checks, then test-mpi-failures
#   make sim             build/herd-sim, herd for `herd sim` (SimGrid; mk/sim.mk)
#   make bench           side-by-side benchmarks (bench/README.md)
#   make bench-smoke     every bench/specs experiment at a tiny size (bench/lab)
#   make check-sizes     no source file over 1000 lines, no function over 80 (tools/check-sizes)
#   make install         the command, libherd.so/.a, headers, herd.pc (mk/lib.mk)
CC      ?= cc
BUILD   ?= build
OPT     ?= -O3 -march=native
CFLAGS  ?= $(OPT) -g
WARN    := -Wall -Wextra -Wshadow -Wpointer-arith -Wstrict-prototypes -Wmissing-prototypes -Wvla
ifeq ($(WERROR),1)
WARN    += -Werror
endif
CPPFLAGS := -Iinclude -Isrc -D_GNU_SOURCE
ALLCFLAGS = -std=c11 $(WARN) $(CFLAGS) $(SANFLAGS) -fopenmp -MMD -MP
LDLIBS  := -ldnnl -lz -lpng -ljpeg -lm -lpthread
# the command's own: expat reads a user's SimGrid platform file (src/cli/platform.c); not libherd's
CLI_LIBS := -lexpat
LDFLAGS += -fopenmp $(SANFLAGS)

# The mpi engine is compiled in when Open MPI's mpicc is found (NO_MPI=1 leaves it out).
ifneq ($(NO_MPI),1)
ifneq ($(shell command -v mpicc 2>/dev/null),)
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null) -DHERD_HAVE_MPI
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)
endif
endif
LDLIBS  += $(MPI_LIBS)

LIB_SRC  := $(sort $(wildcard src/core/*.c src/data/*.c src/nn/*.c src/optim/*.c src/run/*.c src/algo/*.c src/comm/*.c))
CLI_SRC  := $(sort $(wildcard src/cli/*.c))
TEST_SRC := $(sort $(wildcard tests/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)

TEST_JOBS ?= 2
TEST_TIMEOUT_SCALE ?= 1

.PHONY: all test asan tsan bench clean test-mpi test-multihost
all: $(BUILD)/herd $(BUILD)/herd-tests

# Objects depend on the flags they were built with: a build started before
# mpicc was installed (or with other OPT/SANFLAGS) is rebuilt, not linked
# half without the mpi engine. Warnings flags are left out (-Werror changes
# no object).
FLAGS_STAMP := $(BUILD)/.flags
FLAGS_NOW   := $(CC) $(CPPFLAGS) $(CFLAGS) $(SANFLAGS) $(MPI_CFLAGS) $(MPI_LIBS)
$(shell mkdir -p $(BUILD) && { echo '$(FLAGS_NOW)' | cmp -s - $(FLAGS_STAMP) || echo '$(FLAGS_NOW)' > $(FLAGS_STAMP); })

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALLCFLAGS) -c $< -o $@

# a test table's row may leave out its flags (tests/harness.h: 0, no tag)
$(TEST_OBJ): WARN += -Wno-missing-field-initializers

$(BUILD)/src/comm/mpi.o $(BUILD)/src/comm/mpi_agent.o $(BUILD)/src/comm/mpi_am.o: CPPFLAGS += $(MPI_CFLAGS)
# the engine registry lists the mpi engine where mpi.c defines it
$(BUILD)/src/comm/engine.o: CPPFLAGS += $(if $(MPI_CFLAGS),-DHERD_HAVE_MPI)

# The built-in models' descriptions, compiled in (tools/embed-models).
src/nn/models_text.c: $(sort $(wildcard models/*.model)) tools/embed-models
	tools/embed-models $(sort $(wildcard models/*.model)) > $@.tmp && mv $@.tmp $@
# the model.py herd export --format pytorch writes
src/run/export_model_py.c: src/run/export_model.py tools/embed-models
	tools/embed-models --string herd__export_model_py $< > $@.tmp && mv $@.tmp $@

$(BUILD)/libherd.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/herd: $(CLI_OBJ) $(BUILD)/libherd.a
	$(CC) $(LDFLAGS) $^ $(CLI_LIBS) $(LDLIBS) -o $@

# Under ThreadSanitizer a test process makes each synthetic data set once (tests/data_cache.c).
ifneq ($(filter -fsanitize=thread,$(SANFLAGS)),)
$(TEST_OBJ): CPPFLAGS += -DHERD_TEST_DATA_CACHE
TEST_LDFLAGS := -Wl,--wrap=herd_data_open,--wrap=herd_dataset_free
endif

$(BUILD)/herd-tests: $(TEST_OBJ) $(BUILD)/libherd.a
	$(CC) $(LDFLAGS) $(TEST_LDFLAGS) $^ $(LDLIBS) -o $@

# The CLI tests run the herd binary: tell them where it is.
test: $(BUILD)/herd $(BUILD)/herd-tests
	HERD_BIN=$(abspath $(BUILD)/herd) $(BUILD)/herd-tests -j $(TEST_JOBS) -t $(TEST_TIMEOUT_SCALE) $(TESTS)

# The mpi engine under Open MPI's mpirun, for several world sizes (needs mpicc at build time).
MPIRUN ?= mpirun --oversubscribe $(if $(filter 0,$(shell id -u)),--allow-run-as-root)
NEED_MPI = @test -n "$(MPI_LIBS)" || { echo "$@: herd was built without MPI (no mpicc)"; exit 1; }
$(BUILD)/mpi-checks: $(BUILD)/tests/mpi/mpi_checks.o $(BUILD)/libherd.a
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

# test-mpi-checks: transport, collectives, windows, progress and a pull's
# latency for several world sizes, and training under mpirun (accuracy
# thresholds): run it alone. test-mpi-failures: ranks that die or stall
# (the failure matrix) and checkpoints resumed after a killed rank; they
# wait out --timeout, compare bits and allow slack, so they can run beside
# other work (.ci/run does).
.PHONY: test-mpi-checks test-mpi-failures
test-mpi:
	@fail=0; $(MAKE) --no-print-directory test-mpi-checks || fail=1; \
	$(MAKE) --no-print-directory test-mpi-failures || fail=1; exit $$fail

test-mpi-checks: $(BUILD)/mpi-checks $(BUILD)/herd
	$(NEED_MPI)
	@fail=0; for n in 1 2 3 4 5 8; do timeout 120 $(MPIRUN) -np $$n $(BUILD)/mpi-checks || fail=1; done; \
	for n in 2 4; do timeout 120 $(MPIRUN) -np $$n $(BUILD)/mpi-checks --progress || fail=1; done; \
	for n in 2 3 4 8; do HERD_MPI_WINDOWS=agent timeout 120 $(MPIRUN) -x HERD_MPI_WINDOWS -np $$n $(BUILD)/mpi-checks || fail=1; done; \
	HERD_MPI_WINDOWS=agent timeout 120 $(MPIRUN) -x HERD_MPI_WINDOWS -np 4 $(BUILD)/mpi-checks --progress || fail=1; \
	HERD_MPI_WINDOWS=agent HERD_MPI_PROGRESS_US=100000 timeout 60 $(MPIRUN) -x HERD_MPI_WINDOWS -x HERD_MPI_PROGRESS_US \
	    -np 2 $(BUILD)/mpi-checks --pull-latency 5000 2000 || fail=1; \
	timeout 60 $(MPIRUN) -np 2 $(BUILD)/mpi-checks --env OMPI_MCA_btl_tcp_eager_limit 1048576 || fail=1; \
	OMPI_MCA_btl_tcp_eager_limit=65536 timeout 60 $(MPIRUN) -x OMPI_MCA_btl_tcp_eager_limit -np 2 \
	    $(BUILD)/mpi-checks --env OMPI_MCA_btl_tcp_max_send_size unset || fail=1; \
	tests/mpi/train_checks.sh $(BUILD)/herd "$(MPIRUN)" || fail=1; exit $$fail

test-mpi-failures: $(BUILD)/mpi-checks $(BUILD)/herd
	$(NEED_MPI)
	@fail=0; tests/mpi/ckpt_checks.sh $(BUILD)/herd "$(MPIRUN)" || fail=1; \
	tests/mpi/fail_matrix.sh $(BUILD)/herd "$(MPIRUN)" $(BUILD)/mpi-checks || fail=1; exit $$fail

# The mpi engine on two hosts: network namespaces joined by a 1 Gbit/s veth
# link, every algorithm family across them (as root; otherwise SKIPPED).
test-multihost: $(BUILD)/herd $(BUILD)/mpi-checks
	$(NEED_MPI)
	tests/mpi/multihost.sh $(BUILD)/herd

# herd used as a careless or hostile user would: each case's exit code and
# message, nothing else in its directory changed, no process left (~2 min).
.PHONY: test-adversarial
test-adversarial: $(BUILD)/herd
	tests/adversarial/run.sh $(BUILD)/herd

# Every algorithm learns at its defaults: lenet on a slice of Fashion-MNIST, 4 and 8 workers (~3 min).
.PHONY: test-learn
test-learn: $(BUILD)/herd
	tests/learn_defaults.sh $(BUILD)/herd

ASAN_MAKE = $(MAKE) BUILD=build-asan OPT="-O1" \
            SANFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all"
TSAN_MAKE = TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp $$TSAN_OPTIONS" $(MAKE) BUILD=build-tsan OPT="-O1" \
            SANFLAGS="-fsanitize=thread"
.PHONY: asan-build tsan-build
asan:
	$(ASAN_MAKE) test TEST_TIMEOUT_SCALE=4

# the tests that may start threads under ThreadSanitizer: the threads engine, collectives and
# every algorithm's races (those tagged HERD_TEST_ONE_THREAD run under make test and make asan)
tsan:
	$(TSAN_MAKE) test TEST_TIMEOUT_SCALE=4

# the two builds alone, their tests not run (.ci/run builds them ahead)
asan-build:
	$(ASAN_MAKE) build-asan/herd build-asan/herd-tests
tsan-build:
	$(TSAN_MAKE) build-tsan/herd build-tsan/herd-tests

bench: $(BUILD)/herd
	HERD=$(abspath $(BUILD)/herd) bench/lab run vs-pytorch

# No source file over 1000 lines, no function over 80 (src/, include/; tests aside).
.PHONY: check-sizes
check-sizes:
	tools/check-sizes

# Every experiment of bench/specs at a tiny size (bench/lab smoke; herd-sim's
# where it is built, the two hosts' as root, else those are SKIPPED; the
# agents' wake is measured with mpi-checks): the lab cannot rot (~2 min).
.PHONY: bench-smoke
bench-smoke: $(BUILD)/herd $(BUILD)/mpi-checks
	HERD=$(abspath $(BUILD)/herd) HERD_SIM=$(abspath $(BUILD)/herd-sim) bench/lab smoke

clean:
	rm -rf build build-asan build-tsan

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(TEST_OBJ:.o=.d)

# Optional parts keep their rules in mk/*.mk (herd-sim, fuzzers, ...).
-include $(sort $(wildcard mk/*.mk))

# herd.c hands `eval` and `export` to eval.c, `model` to model_cmd.c: the
# CLI fuzzer links them too, with their shims (the rule in mk/sim.mk).
$(FUZZ_BUILD)/fuzz_cli: $(FUZZ_BUILD)/cli/eval_shim.o $(FUZZ_BUILD)/cli/model_cmd_shim.o
