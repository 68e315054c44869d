# The sim engine (DESIGN.md): herd's sources compiled with SimGrid's smpicc
# into build/herd-sim, which `herd sim` runs under smpirun.
#   make sim             builds $(BUILD)/herd-sim (objects in build-sim/): a second
#                        build of the library, so plain `make` leaves it out
#   make test-sim        builds it and runs the mpi checks (tests/mpi) under smpirun
#                        for several world sizes, repeatability and the alpha-beta
#                        check (tests/sim/run.sh): bits and simulated time only
#   make test-learn-sim  every multi-worker algorithm learns at its defaults on herd
#                        sim's 10gbe at 16 and 32 workers (tests/learn_defaults.sh)
#   make test-sim-timing its checks of measured time (tests/sim/timing.sh), which
#                        depend on the machine's load: CI runs them alone
#   make sim-clean       removes build-sim/
# NO_SIM=1 leaves herd-sim out. Without smpicc nothing here is built and
# test-sim says why.
SMPICC    ?= smpicc
SMPIRUN   ?= smpirun
SIM_BUILD ?= build-sim
ifneq ($(NO_SIM),1)
SIM_FOUND := $(shell command -v $(SMPICC) 2>/dev/null)
endif
# smpicc adds -fPIC, -shared and SimGrid's wrappers of clock_gettime,
# nanosleep and malloc; herd-sim is a shared object that smpirun loads once
# per simulated rank.
SIM_CFLAGS  = -std=c11 $(WARN) $(OPT) -g -fopenmp -MMD -MP -DHERD_HAVE_MPI -DHERD_SIM -DSMPI_NO_OVERRIDE_MALLOC
SIM_LIB_OBJ := $(LIB_SRC:%.c=$(SIM_BUILD)/%.o)
SIM_CLI_OBJ := $(CLI_SRC:%.c=$(SIM_BUILD)/%.o)
SIM_LIBS    := -Wl,--wrap=herd_data_open,--wrap=herd_dataset_free -ldnnl -lz -lpng -ljpeg -lm -lpthread

.PHONY: sim test-sim test-sim-timing test-learn-sim sim-clean

$(SIM_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(SMPICC) $(CPPFLAGS) $(SIM_CFLAGS) -c $< -o $@

$(SIM_BUILD)/libherd.a: $(SIM_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/herd-sim: $(SIM_CLI_OBJ) $(SIM_BUILD)/libherd.a
	@mkdir -p $(dir $@)
	$(SMPICC) -fopenmp $^ $(CLI_LIBS) $(SIM_LIBS) -o $@

$(SIM_BUILD)/mpi-checks: $(SIM_BUILD)/tests/mpi/mpi_checks.o $(SIM_BUILD)/libherd.a
	$(SMPICC) -fopenmp $^ $(SIM_LIBS) -o $@

# World sizes of the transport/collective checks; SIM_TRAIN: the end-to-end
# training checks of tests/mpi/train_checks.sh, as ALGO:RANKS (empty: all of its list).
SIM_SIZES ?= 1 2 3 4 5 8 16
SIM_TRAIN ?=
ifneq ($(SIM_FOUND),)
sim: $(BUILD)/herd-sim
test-sim: $(SIM_BUILD)/mpi-checks $(BUILD)/herd $(BUILD)/herd-sim
	tests/sim/run.sh $(BUILD) $(SIM_BUILD) "$(SIM_SIZES)" "$(SIM_TRAIN)"
test-sim-timing: $(BUILD)/herd $(BUILD)/herd-sim
	tests/sim/timing.sh $(BUILD)
test-learn-sim: $(BUILD)/herd $(BUILD)/herd-sim
	SIM_WORKERS="16 32" WORKERS= OPTIMIZERS= TIMEOUT=300 tests/learn_defaults.sh $(BUILD)/herd
else
sim test-sim test-sim-timing test-learn-sim:
	@echo "$@: no $(SMPICC) (install libsimgrid-dev: scripts/install-deps)"; exit 1
endif

# herd.c hands `sim` and `compare` to sim.c (with platform.c) and compare.c,
# and every command parses with flags.c: the CLI fuzzer (mk/fuzz.mk) links
# them too, with its shim, and spawn.c without starting processes.
$(FUZZ_BUILD)/cli/%_shim.o: src/cli/%.c fuzz/cli_shim.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -DHERD_CLI_NO_SPAWN -include fuzz/cli_shim.h -c $< -o $@
$(FUZZ_BUILD)/fuzz_cli: $(FUZZ_BUILD)/cli/sim_shim.o $(FUZZ_BUILD)/cli/platform_shim.o $(FUZZ_BUILD)/cli/compare_shim.o \
	$(FUZZ_BUILD)/cli/flags_shim.o $(FUZZ_BUILD)/cli/spawn_shim.o

sim-clean:
	rm -rf $(SIM_BUILD)
clean: sim-clean

-include $(SIM_LIB_OBJ:.o=.d) $(SIM_CLI_OBJ:.o=.d) $(SIM_BUILD)/tests/mpi/mpi_checks.d
