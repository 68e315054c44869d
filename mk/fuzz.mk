# libFuzzer targets (fuzz/), built with clang into build-fuzz/:
#   make fuzz            fuzz_idx, fuzz_cifar, fuzz_npy, fuzz_image, fuzz_ckpt, fuzz_cli, fuzz_desc (+ seed corpora)
#   make fuzz-smoke      each target for FUZZ_SECONDS (default 10) on its corpus; any crash fails (CI)
#   make fuzz-run FUZZ_SECONDS=300   the same, longer; corpora grow in build-fuzz/corpus/
# Crash inputs land in build-fuzz/artifacts/. Replay one: build-fuzz/fuzz_idx FILE
#   make fuzz-clean      removes build-fuzz/ (corpora included)
FUZZ_CC      ?= clang
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 10
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c11 -g -O1 $(FUZZ_SAN) -fsanitize=fuzzer-no-link -Iinclude -Isrc -D_GNU_SOURCE -fopenmp -MMD -MP
FUZZ_LDFLAGS := -fsanitize=fuzzer $(FUZZ_SAN) -fopenmp
FUZZ_TARGETS := idx cifar npy image ckpt cli desc
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/%.o)
FUZZ_MAXLEN_idx   := 8192
FUZZ_MAXLEN_cifar := 8192
FUZZ_MAXLEN_npy   := 8192
FUZZ_MAXLEN_image := 8192
FUZZ_MAXLEN_ckpt  := 4096
FUZZ_MAXLEN_cli   := 512
FUZZ_MAXLEN_desc  := 1024
FUZZ_OPTS_cli     := -dict=$(FUZZ_BUILD)/seeds/cli.dict -close_fd_mask=3

.PHONY: fuzz fuzz-smoke fuzz-run fuzz-clean
fuzz: $(FUZZ_BINS) $(FUZZ_BUILD)/seeds/cli.dict

$(FUZZ_BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@

# the CLI parser with exit() turned into a longjmp and training stubbed (fuzz/cli_shim.h)
$(FUZZ_BUILD)/cli/herd_shim.o: src/cli/herd.c fuzz/cli_shim.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -include fuzz/cli_shim.h -c $< -o $@

$(FUZZ_BUILD)/libherd.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The parsers' targets take what they call from the library's archive: a
# list of objects by hand fell behind the parsers' calls twice (digest.c,
# then args.c), and a fresh clone's CI failed to link.
$(FUZZ_BUILD)/fuzz_idx $(FUZZ_BUILD)/fuzz_cifar $(FUZZ_BUILD)/fuzz_npy $(FUZZ_BUILD)/fuzz_image $(FUZZ_BUILD)/fuzz_ckpt \
    $(FUZZ_BUILD)/fuzz_desc: \
    $(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/fuzz/fuzz_%.o $(FUZZ_BUILD)/libherd.a
	$(FUZZ_CC) $(FUZZ_LDFLAGS) $^ -ldnnl -lz -lpng -ljpeg -lm -lpthread -o $@

$(FUZZ_BUILD)/fuzz_cli: $(FUZZ_BUILD)/fuzz/fuzz_cli.o $(FUZZ_BUILD)/cli/herd_shim.o $(FUZZ_BUILD)/libherd.a
	$(FUZZ_CC) $(FUZZ_LDFLAGS) $^ $(CLI_LIBS) -ldnnl -lz -lpng -ljpeg -lm -lpthread -o $@

$(FUZZ_BUILD)/seeds/cli.dict: fuzz/make_seeds.py src/cli/herd.c
	python3 fuzz/make_seeds.py $(FUZZ_BUILD)/seeds

# Runs every target for FUZZ_SECONDS, one after the other, on a corpus seeded
# from build-fuzz/seeds; prints libFuzzer's last status line of each.
fuzz-smoke fuzz-run: fuzz
	@fail=0; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t $(FUZZ_BUILD)/artifacts; \
	  case $$t in idx) ml=$(FUZZ_MAXLEN_idx);; cifar) ml=$(FUZZ_MAXLEN_cifar);; npy) ml=$(FUZZ_MAXLEN_npy);; image) ml=$(FUZZ_MAXLEN_image);; ckpt) ml=$(FUZZ_MAXLEN_ckpt);; cli) ml=$(FUZZ_MAXLEN_cli);; desc) ml=$(FUZZ_MAXLEN_desc);; esac; \
	  opts=""; [ $$t = cli ] && opts="$(FUZZ_OPTS_cli)"; \
	  echo "fuzz_$$t: $(FUZZ_SECONDS) s"; \
	  if $(FUZZ_BUILD)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=$$ml -print_final_stats=1 $$opts \
	      -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$t- $(FUZZ_BUILD)/corpus/$$t $(FUZZ_BUILD)/seeds/$$t \
	      > $(FUZZ_BUILD)/fuzz_$$t.log 2>&1; then \
	    grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' $(FUZZ_BUILD)/fuzz_$$t.log | tail -1; \
	    grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' $(FUZZ_BUILD)/fuzz_$$t.log; \
	  else \
	    echo "fuzz_$$t FAILED (log: $(FUZZ_BUILD)/fuzz_$$t.log)"; tail -40 $(FUZZ_BUILD)/fuzz_$$t.log; fail=1; \
	  fi; \
	done; exit $$fail

fuzz-clean:
	rm -rf $(FUZZ_BUILD)

-include $(FUZZ_LIB_OBJ:.o=.d) $(FUZZ_BUILD)/fuzz/*.d $(FUZZ_BUILD)/cli/*.d
