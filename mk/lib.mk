# herd as a library for other programs (included by the Makefile).
#   make lib                      build/lib/libherd.so and libherd.a (position-independent objects)
#   make install PREFIX=/usr/local [DESTDIR=...]
#                                 bin/herd, bin/herd-plot, lib/libherd.so.VERSION (+ .so, .a), include/herd/*.h,
#                                 lib/pkgconfig/herd.pc: cc prog.c $(pkg-config --cflags --libs herd)
#   make install NO_MPI=1 ...     a library without the mpi engine, so without MPI's link flags
#   make test-install             installs into a temporary prefix, builds tests/install/embed.c
#                                 with pkg-config alone and runs it
PREFIX     ?= /usr/local
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR     ?= $(PREFIX)/bin
HERD_VERSION := $(shell sed -n 's/^\#define HERD_VERSION "\(.*\)"/\1/p' src/cli/herd.c)
# the soname's version: the major, or before 1.0 major.minor (0.2: the
# configuration became opaque, herd_config.h; programs built against 0.1
# must be rebuilt)
HERD_VERSION_WORDS := $(subst ., ,$(HERD_VERSION))
HERD_SOMAJOR := $(if $(filter 0,$(word 1,$(HERD_VERSION_WORDS))),0.$(word 2,$(HERD_VERSION_WORDS)),$(word 1,$(HERD_VERSION_WORDS)))

PIC_DIR := $(BUILD)/pic
PIC_OBJ := $(LIB_SRC:%.c=$(PIC_DIR)/%.o)
LIB_DIR := $(BUILD)/lib

.PHONY: lib install test-install

$(PIC_DIR)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(ALLCFLAGS) -fPIC -c $< -o $@

# the objects' header dependencies (-MMD writes them): without them a changed
# header left a stale object in the library
-include $(PIC_OBJ:.o=.d)

$(PIC_DIR)/src/comm/mpi.o $(PIC_DIR)/src/comm/mpi_agent.o $(PIC_DIR)/src/comm/mpi_am.o: CPPFLAGS += $(MPI_CFLAGS)
$(PIC_DIR)/src/comm/engine.o: CPPFLAGS += $(if $(MPI_CFLAGS),-DHERD_HAVE_MPI)

# the public API (herd_*) is exported, the internals (herd__*) are not
$(LIB_DIR)/libherd.so.$(HERD_VERSION): $(PIC_OBJ) mk/libherd.map
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libherd.so.$(HERD_SOMAJOR) -Wl,--version-script,mk/libherd.map $(LDFLAGS) \
	    $(PIC_OBJ) $(LDLIBS) -o $@

$(LIB_DIR)/libherd.a: $(PIC_OBJ)
	@mkdir -p $(dir $@)
	@rm -f $@
	ar rcs $@ $^

# What a program that links herd needs besides -lherd (static linking: pkg-config --static).
HERD_PC_PRIVATE := -fopenmp $(LDLIBS)

lib: $(LIB_DIR)/libherd.so.$(HERD_VERSION) $(LIB_DIR)/libherd.a

# herd.pc is written for the PREFIX of this install
install: lib $(BUILD)/herd
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCLUDEDIR)/herd
	install -m 755 $(BUILD)/herd $(DESTDIR)$(BINDIR)/herd
	install -m 755 tools/herd-plot $(DESTDIR)$(BINDIR)/herd-plot
	install -m 755 $(LIB_DIR)/libherd.so.$(HERD_VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libherd.so.$(HERD_VERSION) $(DESTDIR)$(LIBDIR)/libherd.so.$(HERD_SOMAJOR)
	ln -sf libherd.so.$(HERD_SOMAJOR) $(DESTDIR)$(LIBDIR)/libherd.so
	install -m 644 $(LIB_DIR)/libherd.a $(DESTDIR)$(LIBDIR)/
	install -m 644 include/herd/*.h $(DESTDIR)$(INCLUDEDIR)/herd/
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCLUDEDIR)' '' 'Name: herd' \
	    'Description: distributed deep-learning training: synchronous, asynchronous, elastic and decentralized SGD' \
	    'Version: $(HERD_VERSION)' 'Cflags: -I$${includedir}' 'Libs: -L$${libdir} -lherd' \
	    'Libs.private: $(strip $(HERD_PC_PRIVATE))' >$(DESTDIR)$(LIBDIR)/pkgconfig/herd.pc

# A fresh prefix each time; the program is built from pkg-config's flags alone.
test-install:
	@tmp=$$(mktemp -d "$${TMPDIR:-/tmp}/herd-install.XXXXXX"); trap 'rm -rf "$$tmp"' EXIT; \
	$(MAKE) --no-print-directory install PREFIX="$$tmp" >"$$tmp.log" 2>&1 || { tail -20 "$$tmp.log"; rm -f "$$tmp.log"; exit 1; }; \
	rm -f "$$tmp.log"; tests/install/check.sh "$$tmp"
