# elastic-agent — build, test, fuzz, demo.
#
#   make            build bin/elastic-agent (and bin/elastic-chaos when present)
#   make check      install missing packages, build, run every test, one summary line
#   make asan       the same tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make fuzz       run each libFuzzer harness for FUZZ_SECONDS (default 30)
#   make demo       the main job: a local multi-agent run on the embedded default
#   make bench      every benchmark (prints tables; slow)
#
#   make format     clang-format every tracked .c/.h; make format-check only reports
#
# Sources are discovered: every .c in a module folder is built into
# $(BUILD)/libea.a (a module's wing folders too: agent/ckpt/, …); files
# ending in _nccl.c only when CUDA and NCCL are found.
# Modules, in dependency order: base (nothing of ours) → membership → config
# (the job file) and rdzv; base → ckpt → train (reads config); agent on top.
# Public headers are in include/; each module's private headers stay in its
# folder and are reached through its -I path, never '../'.
# tests/unit/test_*.c are Check suites; tests/e2e/*.sh are end-to-end scripts.

BUILD    ?= build
BINDIR   ?= bin
CC       ?= cc
CUDA_HOME ?= /usr/local/cuda
PKGS     := libuv msgpack yaml-0.1 libxxhash liburing libsodium openblas jansson libmicrohttpd libcurl
EXTRA_CFLAGS ?=
EXTRA_LDFLAGS ?=

# NCCL backend: built when nccl.h and libnccl are under CUDA_HOME.
HAVE_NCCL := $(shell test -f $(CUDA_HOME)/include/nccl.h && test -f $(CUDA_HOME)/include/cuda_runtime.h && \
               ls $(CUDA_HOME)/lib64/libnccl.so* >/dev/null 2>&1 && echo 1)

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CHECK_CFLAGS := $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS   := $(shell pkg-config --libs check 2>/dev/null)

VERSION  := $(shell cat VERSION 2>/dev/null || echo 0.1.0)
# OPTFLAGS/SANFLAGS select the build flavour; CFLAGS given on the command
# line is appended (it can no longer drop the include paths below).
OPTFLAGS ?= -O2 -g
SANFLAGS ?=
EA_CFLAGS := $(OPTFLAGS) $(SANFLAGS) -std=gnu11 -Wall -Wextra -Werror -Wno-missing-field-initializers \
            -D_GNU_SOURCE -DEA_VERSION='"$(VERSION)"' -Iinclude $(PKG_CFLAGS) $(EXTRA_CFLAGS) $(CFLAGS)
# -MMD -MP: each object depends on the headers it really includes.
DEPFLAGS := -MMD -MP
LDLIBS   := $(SANFLAGS) $(PKG_LIBS) -lm -lpthread $(EXTRA_LDFLAGS)

ifeq ($(HAVE_NCCL),1)
EA_CFLAGS += -DEA_HAVE_NCCL=1 -I$(CUDA_HOME)/include
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lnccl -lcudart
endif

MODULES  := base membership config rdzv ckpt train agent
# A module may have one level of wings, folders of its own (agent/ckpt/,
# agent/job/, …): their sources are the module's, and each gets an -I path,
# so a private header is still reached by its name alone.
WINGS    := $(patsubst %/,%,$(wildcard $(addsuffix /*/,$(MODULES))))
EA_CFLAGS += $(addprefix -I,$(MODULES) $(WINGS) chaos)
MAIN_SRC := agent/cli/main.c
LIB_SRC  := $(filter-out $(MAIN_SRC),$(wildcard $(addsuffix /*.c,$(MODULES) $(WINGS))))
ifneq ($(HAVE_NCCL),1)
LIB_SRC  := $(filter-out %_nccl.c,$(LIB_SRC))
endif
LIB_OBJ  := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRC))
# Test doubles (the SWIM simulator): built for tests and benchmarks only,
# never into libea.a or the agent.
TESTLIB_SRC := $(wildcard tests/sim/*.c)
TESTLIB_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(TESTLIB_SRC))
TESTLIB_INC := -Itests/sim
CHAOS_SRC := $(wildcard chaos/*.c)
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRC))
BENCH_SRC := $(wildcard bench/*.c)
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)

BINS := $(BINDIR)/elastic-agent $(if $(CHAOS_SRC),$(BINDIR)/elastic-chaos)

.PHONY: all deps check asan fuzz demo bench clean tests benches format format-check chaos soak print-cflags print-libs \
        install uninstall
all: $(BINS)

deps:
	@scripts/deps.sh

$(BUILD)/obj/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(EA_CFLAGS) $(DEPFLAGS) -c $< -o $@

# The page (agent/obs/page.html) is embedded by page.c's .incbin, which the
# compiler's dependency files cannot see.
$(BUILD)/obj/agent/obs/page.o: agent/obs/page.html

$(BUILD)/libea.a: $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BINDIR)/elastic-agent: $(BUILD)/obj/$(MAIN_SRC:.c=.o) $(BUILD)/libea.a
	@mkdir -p $(BINDIR)
	$(CC) $(EA_CFLAGS) -o $@ $^ $(LDLIBS)

$(BINDIR)/elastic-chaos: $(patsubst %.c,$(BUILD)/obj/%.o,$(CHAOS_SRC)) $(BUILD)/libea.a
	@mkdir -p $(BINDIR)
	$(CC) $(EA_CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/libea_test.a: $(TESTLIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libea_test.a $(BUILD)/libea.a Makefile
	@mkdir -p $(dir $@)
	$(CC) $(EA_CFLAGS) $(DEPFLAGS) -MT $@ -MF $@.d $(CHECK_CFLAGS) -Itests/unit $(TESTLIB_INC) -o $@ $< \
	    $(BUILD)/libea_test.a $(BUILD)/libea.a $(CHECK_LIBS) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(BUILD)/libea_test.a $(BUILD)/libea.a Makefile
	@mkdir -p $(dir $@)
	$(CC) $(EA_CFLAGS) $(DEPFLAGS) -MT $@ -MF $@.d $(TESTLIB_INC) -o $@ $< $(BUILD)/libea_test.a $(BUILD)/libea.a $(LDLIBS)

-include $(wildcard $(BUILD)/obj/*/*.d $(BUILD)/obj/*/*/*.d $(BUILD)/obj/*/*/*/*.d $(BUILD)/tests/*.d $(BUILD)/bench/*.d)

tests: $(BINS) $(UNIT_BIN)
benches: $(BENCH_BIN)

# The public entry points install what is missing first, then re-enter make
# so that pkg-config sees the freshly installed packages.
check: deps
	@$(MAKE) --no-print-directory tests
	@EA_BINDIR=$(BINDIR) BUILD=$(BUILD) tests/run.sh

asan: deps
	@$(MAKE) --no-print-directory BUILD=build-asan BINDIR=build-asan/bin OPTFLAGS="-O1 -g -fno-omit-frame-pointer" \
	    SANFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined" tests
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    EA_PYTHONPATH=$(CURDIR)/python EA_BINDIR=build-asan/bin BUILD=build-asan tests/run.sh

FUZZ_SECONDS ?= 30
fuzz: deps
	@scripts/fuzz.sh $(FUZZ_SECONDS)

demo: deps
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh

bench: deps
	@$(MAKE) --no-print-directory all benches
	@scripts/bench.sh

# The chaos harness against real agents: docs/chaos.md.  Partitions and
# packet loss need network namespaces, so they run when make runs as root.
chaos: deps
	@$(MAKE) --no-print-directory all
	$(BINDIR)/elastic-chaos --duration 2m --seed 1 --out $(BUILD)/chaos --junit $(BUILD)/chaos/junit.xml \
	    $$(test "$$(id -u)" = 0 && echo --netns)

# The long run (issue 11): 30 minutes and at least 200 faults of every kind,
# a random seed (printed; SOAK_SEED=S replays one), the agents' RSS and open
# descriptors sampled throughout (the resources_flat invariant judges every
# agent process that lived 5 minutes past its warm-up).  Not part of CI.
# SOAK_STEPS=N sets train.steps instead of calibrating it to the duration:
# fewer steps than the schedule's pace needs puts the faults back to back
# (docs/chaos.md: the 1,000-fault run is SOAK_FAULTS=900 SOAK_STEPS=7000000).
SOAK_DURATION ?= 30m
SOAK_FAULTS ?= 200
soak: deps
	@$(MAKE) --no-print-directory all
	$(BINDIR)/elastic-chaos --duration $(SOAK_DURATION) --min-faults $(SOAK_FAULTS) \
	    $(if $(SOAK_STEPS),--steps $(SOAK_STEPS)) \
	    $(if $(SOAK_SEED),--seed $(SOAK_SEED)) --out $(BUILD)/soak --junit $(BUILD)/soak/junit.xml \
	    $$(test "$$(id -u)" = 0 && echo --netns)

FORMAT_FILES = $$(git ls-files '*.c' '*.h')
format:
	clang-format -i $(FORMAT_FILES)

# Fails (listing the files) when any tracked source differs from .clang-format.
format-check: deps
	@bad=$$(for f in $(FORMAT_FILES); do clang-format --dry-run -Werror "$$f" >/dev/null 2>&1 || echo "$$f"; done); \
	if [ -n "$$bad" ]; then echo "format-check: not clang-formatted (run make format):"; echo "$$bad"; exit 1; fi; \
	echo "format-check: $$(git ls-files '*.c' '*.h' | wc -l) files clean"

# The binary, and the Python package where the binary looks for it
# (ea__launch_python_dir: $(PREFIX)/bin/../lib/elastic-agent/python), so a
# library-mode program finds `import elastic_agent` without pip.
PREFIX ?= /usr/local
DESTDIR ?=
PYDIR = $(PREFIX)/lib/elastic-agent/python
install: $(BINDIR)/elastic-agent
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PYDIR)/elastic_agent
	install -m 0755 $(BINDIR)/elastic-agent $(DESTDIR)$(PREFIX)/bin/elastic-agent
	install -m 0644 python/elastic_agent/*.py $(DESTDIR)$(PYDIR)/elastic_agent/
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/elastic-agent
	rm -rf $(DESTDIR)$(PREFIX)/lib/elastic-agent

# For building a one-off program against build/libea.a (the fuzz corpora).
print-cflags:
	@echo $(EA_CFLAGS)
print-libs:
	@echo $(LDLIBS)

clean:
	rm -rf build build-asan build-fuzz bin
