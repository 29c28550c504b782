# libmla — one Makefile. Each src/kernels/<isa>/ folder gets its own -m flags
# and nothing else does, so dispatch and metadata code run on any CPU of the
# architecture; the dispatcher picks kernels at run time.
#
#   make                 build/libmla.a, build/libmla.so, mla.pc, the CMake package, tools,
#                        the example programs (build/examples/)
#   make run             the main job (build/mla_run)
#   make test            every cmocka suite (+ the exported-symbol and layer checks,
#                        mla_bench's smoke run: tools/bench_smoke.sh, the example
#                        programs, README.md's commands and quotes: check-readme,
#                        README.md's reject table: check-reject-table, python/'s
#                        tests: test-python)
#   make reject-table    rewrite README.md's reject table from the suites
#   make test-neon       the suites cross-compiled for AArch64, under qemu
#   make test-asan / test-ubsan / test-tsan   the suites under a sanitizer
#   make fuzz            every libFuzzer target for FUZZ_SECONDS (clang)
#   make profile         mla_bench with frame pointers, for perf (build/profile)
#   make plots           decode and prefill sweeps to CSV and PNG (bench/plots.sh)
#   make install PREFIX=/usr/local DESTDIR=   headers, libraries, pkg-config, CMake package
#   make check-install   installs into a temporary DESTDIR, links a server every documented way
#   make CC=clang        clang + libomp instead of gcc + libgomp

CC ?= cc
BUILD ?= build
PREFIX ?= /usr/local
TEST_RUNNER ?=
AARCH64_CC ?= aarch64-linux-gnu-gcc
QEMU_AARCH64 ?= qemu-aarch64 -cpu max

ARCH := $(shell $(CC) -dumpmachine | cut -d- -f1)
IS_CLANG := $(shell $(CC) --version 2>/dev/null | grep -q clang && echo 1)
# The OpenMP runtime is the compiler's: a server that runs OpenMP itself must
# use the same one (two runtimes in one process leave the server's regions on
# one thread), so mla.pc and the CMake package record it (README.md, Linking).
# clang finds libomp in its own lib folder (beside its bin/) only when it
# links with -fopenmp, which a server linking libmla.a need not do (CMake's
# OpenMP target does not): the folder is named.
OMP_LIB := $(if $(IS_CLANG),-L$(abspath $(dir $(realpath $(shell command -v $(CC))))../lib) -lomp,-lgomp)
OMP_RUNTIME := $(if $(IS_CLANG),libomp,libgomp)
CROSS_SUFFIX := $(if $(filter $(ARCH),$(shell uname -m)),,:$(if $(filter aarch64,$(ARCH)),arm64,$(ARCH)))

CFLAGS ?= -O3 -g
WARN := -Wall -Wextra -Werror
# ISO C (no GNU fp contraction): scalar ref math rounds exactly as written;
# SIMD kernels fuse only where they call an FMA intrinsic.
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden -ffp-contract=off -fopenmp \
               $(WARN) -Iinclude -Isrc
# Sleef gives the NEON kernels their exp; the x86 kernels have their own
# (src/kernels/exp_f32_poly.h), so an x86 archive needs no Sleef.
SLEEF_LIB := $(if $(filter aarch64,$(ARCH)),-lsleef)
LDLIBS := $(SLEEF_LIB) $(OMP_LIB) -lpthread -lm

# The version lives in include/mla.h; the soname changes with MAJOR.
version_part = $(shell sed -n 's/^\#define MLA_VERSION_$1 \([0-9][0-9]*\)$$/\1/p' include/mla.h)
VERSION := $(call version_part,MAJOR).$(call version_part,MINOR).$(call version_part,PATCH)
SO_NAME := libmla.so.$(call version_part,MAJOR)
SO_FILE := libmla.so.$(VERSION)

# ---- sources per layer and ISA --------------------------------------------
CORE_SRCS := $(wildcard src/core/*.c src/dispatch/*.c src/metadata/*.c src/kernels/common/*.c src/kernels/ref/*.c)
ifeq ($(ARCH),x86_64)
ISA_SRCS := $(wildcard src/kernels/avx2/*.c src/kernels/avx512/*.c)
else ifeq ($(ARCH),aarch64)
ISA_SRCS := $(wildcard src/kernels/neon/*.c)
else
$(error libmla builds for x86_64 and aarch64; $(CC) targets $(ARCH))
endif
LIB_SRCS := $(CORE_SRCS) $(ISA_SRCS)
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/obj/%.o)

# Per-folder ISA flags; files named *_avx512_bf16.c, *_avx512_fp16.c, *_avx512_amx.c,
# *_neon_fhm.c (FP16 + FHM), *_neon_bf16.c add their extension and nothing more;
# AMX's also add PREFETCHW, which every CPU since Broadwell (so every AMX one) has.
AVX2_FLAGS := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c
isa_flags = $(strip \
  $(if $(findstring /kernels/avx2/,$1)$(findstring probe_avx2.c,$1),$(AVX2_FLAGS)) \
  $(if $(findstring /kernels/avx512/,$1)$(findstring probe_avx512.c,$1),$(AVX512_FLAGS)) \
  $(if $(findstring _avx512_bf16.c,$1),-mavx512bf16) \
  $(if $(findstring _avx512_fp16.c,$1),-mavx512fp16) \
  $(if $(findstring _avx512_amx.c,$1),-mamx-tile -mamx-bf16 -mprfchw) \
  $(if $(findstring _neon_fhm.c,$1),-march=armv8.2-a+fp16fml) \
  $(if $(findstring _neon_bf16.c,$1),-march=armv8.6-a+bf16))

TEST_SRCS := $(wildcard tests/test_*.c)
TEST_BINS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
# every other tests/*.c is shared by the suites (support, oracles, case builders)
TEST_SUPPORT := $(filter-out $(TEST_SRCS),$(wildcard tests/*.c))
# mla_bench is every bench/*.c but mla_run.c and the probes of other
# architectures; bench/probe_<isa>.c gets src/kernels/<isa>/'s flags. The AMX
# probe runs on every x86-64 CPU to find out whether it can, so
# probe_avx512_amx.c gets its suffix's AMX flags and no AVX ones.
ifeq ($(ARCH),x86_64)
BENCH_PROBES := bench/probe_ref.c bench/probe_avx2.c bench/probe_avx512.c bench/probe_avx512_amx.c
else
BENCH_PROBES := bench/probe_ref.c bench/probe_neon.c
endif
BENCH_SRCS := $(filter-out bench/mla_run.c bench/probe_%.c,$(wildcard bench/*.c)) $(BENCH_PROBES)
BENCH_OBJS := $(BENCH_SRCS:%.c=$(BUILD)/obj/%.o)
BENCH_BINS := $(BUILD)/bench/mla_bench $(BUILD)/mla_run

# ---- dependency check: one line naming the Debian packages ----------------
NEEDS_DEPS := $(if $(MAKECMDGOALS),$(filter-out clean test-neon test-asan test-ubsan test-tsan fuzz fuzz-build fuzz-seeds check-layers,$(MAKECMDGOALS)),all)
have_header = $(shell printf '\043include <$1>\n' | $(CC) $(BASE_CFLAGS) -E -x c - >/dev/null 2>&1 && echo 1)
ifneq ($(NEEDS_DEPS),)
ifeq ($(call have_header,omp.h),)
$(error omp.h not found for $(CC): apt-get install $(if $(IS_CLANG),libomp-dev,build-essential))
endif
ifneq ($(SLEEF_LIB),)
ifeq ($(call have_header,sleef.h),)
$(error sleef.h not found for $(CC): apt-get install libsleef-dev$(CROSS_SUFFIX))
endif
endif
ifneq ($(filter test suites check,$(NEEDS_DEPS)),)
ifeq ($(call have_header,cmocka.h),)
$(error cmocka.h not found for $(CC): apt-get install libcmocka-dev$(CROSS_SUFFIX))
endif
endif
endif

# Objects record the compiler that built them: switching CC or CFLAGS in the
# same BUILD folder rebuilds everything instead of mixing runtimes.
COMPILER_ID := $(CC) $(CFLAGS) $(shell $(CC) --version 2>/dev/null | head -n 1)
$(shell mkdir -p $(BUILD) && [ "$$(cat $(BUILD)/compiler 2>/dev/null)" = "$(COMPILER_ID)" ] || \
        echo "$(COMPILER_ID)" > $(BUILD)/compiler)

.PHONY: all lib run test suites test-neon test-asan test-ubsan test-tsan fuzz fuzz-build \
        fuzz-targets fuzz-seeds check-symbols check-layers install check-install clean
all: lib $(BENCH_BINS)
PACKAGE_FILES := $(BUILD)/mla.pc $(BUILD)/mla-static.pc $(BUILD)/cmake/mla-config.cmake \
                 $(BUILD)/cmake/mla-config-version.cmake
lib: $(BUILD)/libmla.a $(BUILD)/libmla.so $(PACKAGE_FILES)

# Each object records the headers it included (-MMD; -MP keeps a deleted
# header from breaking the build), so a header change rebuilds its users only.
$(BUILD)/obj/%.o: %.c Makefile $(BUILD)/compiler
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -MMD -MP $(call isa_flags,$<) -c $< -o $@

-include $(LIB_OBJS:.o=.d) $(BENCH_OBJS:.o=.d)

$(BUILD)/libmla.a: $(LIB_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

# libmla.so -> libmla.so.MAJOR (the soname) -> libmla.so.MAJOR.MINOR.PATCH
$(BUILD)/$(SO_FILE): $(LIB_OBJS)
	$(CC) -shared -fopenmp -Wl,-soname,$(SO_NAME) -o $@ $^ $(LDLIBS)

$(BUILD)/libmla.so: $(BUILD)/$(SO_FILE)
	ln -sf $(SO_FILE) $(BUILD)/$(SO_NAME)
	ln -sf $(SO_NAME) $@

# Two pkg-config modules, because -lmla finds libmla.so wherever both
# libraries are installed: mla links libmla.so (its Libs.private are what a
# fully static link adds), mla-static names the archive by path, followed by
# what the archive needs (on AArch64 that includes Sleef, which Debian ships
# as a shared library only).
# Both record the OpenMP runtime, in their flags and as the variable openmp.
# They depend on $(BUILD)/compiler: building with another CC rewrites them.
pc_lines = 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' \
  'openmp=$(OMP_RUNTIME)' '' 'Name: $1' \
  'Description: CPU kernels for DeepSeek-style Multi-head Latent Attention$2' \
  'Version: $(VERSION)' 'Cflags: -I$${includedir}'
$(BUILD)/mla.pc: Makefile include/mla.h $(BUILD)/compiler
	@printf '%s\n' $(call pc_lines,mla, (libmla.so)) 'Libs: -L$${libdir} -lmla' \
	  'Libs.private: $(LDLIBS)' > $@
$(BUILD)/mla-static.pc: Makefile include/mla.h $(BUILD)/compiler
	@printf '%s\n' $(call pc_lines,mla-static, (libmla.a)) 'Libs: $${libdir}/libmla.a $(LDLIBS)' > $@

# The CMake package: mla::mla_shared and mla::mla_static (cmake/). The
# archive's dependencies are LDLIBS as a CMake list (gomp;pthread;m on x86).
empty :=
CMAKE_LINK_LIBS := $(subst $(empty) $(empty),;,$(LDLIBS:-l%=%))
$(BUILD)/cmake/%: cmake/%.in Makefile include/mla.h $(BUILD)/compiler
	@mkdir -p $(@D)
	sed -e 's|@VERSION@|$(VERSION)|g' -e 's|@SO_NAME@|$(SO_NAME)|g' -e 's|@SO_FILE@|$(SO_FILE)|g' \
	    -e 's|@OMP_RUNTIME@|$(OMP_RUNTIME)|g' -e 's|@LINK_LIBS@|$(CMAKE_LINK_LIBS)|g' \
	    $< > $@

# Tools and tests link the static library, as servers do.
# Suites and tools see the library through its public headers (and its
# archive, which changes with every source the library has).
$(BUILD)/tests/%: tests/%.c $(TEST_SUPPORT) $(wildcard tests/*.h include/*.h) $(BUILD)/libmla.a $(BUILD)/compiler
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -Itests $< $(TEST_SUPPORT) -o $@ $(BUILD)/libmla.a -lcmocka $(LDLIBS)

$(BUILD)/bench/mla_bench: $(BENCH_OBJS) $(BUILD)/libmla.a
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) $(BENCH_OBJS) -o $@ $(BUILD)/libmla.a $(LDLIBS)

$(BUILD)/mla_run: bench/mla_run.c $(wildcard include/*.h) $(BUILD)/libmla.a
	$(CC) $(BASE_CFLAGS) $(CFLAGS) $< -o $@ $(BUILD)/libmla.a $(LDLIBS)

run: $(BUILD)/mla_run
	$(TEST_RUNNER) $(BUILD)/mla_run

# Only mla_-prefixed symbols may be defined globally (static linking shares
# one namespace with the server); the .so exports only the public API.
check-symbols: $(BUILD)/libmla.a $(BUILD)/libmla.so
	@bad=$$(nm -g --defined-only $(BUILD)/libmla.a | awk 'NF==3 {print $$3}' | grep -v '^mla_' | sort -u); \
	 if [ -n "$$bad" ]; then echo "non-mla_ global symbols in libmla.a: $$bad"; exit 1; fi
	@bad=$$(nm -D --defined-only $(BUILD)/libmla.so | awk 'NF==3 {print $$3}' | grep -v '^mla_' | sort -u); \
	 if [ -n "$$bad" ]; then echo "non-mla_ symbols exported by libmla.so: $$bad"; exit 1; fi
	@echo "check-symbols: every exported symbol starts with mla_"

# The include graph runs strictly downward (src/README.md).
check-layers:
	@tools/check_layers.sh

test: suites check-symbols check-layers test-python

# python/'s tests (python/README.md), on the first of TEST_PYTHONS that
# imports torch (Debian's python3-torch is /usr/bin/python3's, which a pyenv or
# venv python3 earlier on PATH does not see); skipped, saying so, when none
# does or the library is cross-built.
TEST_PYTHONS ?= python3 /usr/bin/python3
.PHONY: test-python
test-python: $(BUILD)/libmla.so
	@$(if $(CROSS_SUFFIX),echo "python: skipped (libmla cross-built for $(ARCH))"; exit 0;) \
	 for py in $(TEST_PYTHONS); do \
	   if $$py -c 'import torch' 2>/dev/null; then \
	     echo "python: $$py -m unittest discover -s python/tests"; \
	     MLA_LIBRARY=$(abspath $(BUILD))/libmla.so PYTHONPATH=python \
	       exec $$py -m unittest discover -s python/tests; \
	   fi; \
	 done; \
	 echo "python: skipped (python3-torch not installed)"

suites: $(TEST_BINS)
	@failed=0; for t in $(TEST_BINS); do \
	   echo "== $$t"; $(TEST_RUNNER) $$t || failed=$$((failed + 1)); \
	 done; \
	 echo "suites: $$(( $(words $(TEST_BINS)) - failed )) passed, $$failed failed"; \
	 [ $$failed -eq 0 ]

test-neon:
	$(MAKE) CC=$(AARCH64_CC) BUILD=$(BUILD)/aarch64 TEST_RUNNER="$(QEMU_AARCH64)" test

# Every suite under a sanitizer, each in a build folder of its own; any
# report fails the suite. UBSan builds with clang, whose checks include an
# offset applied to a null pointer (gcc's do not). TSan needs clang and its libomp: LLVM's OpenMP
# runtime loads its Archer tool under TSan, which tells TSan about the
# runtime's barriers and locks (libgomp's would all be reported as races),
# and TSan ignores the accesses inside the uninstrumented runtime itself.
# The symbol check stays with `make test`: instrumented objects define the
# sanitizers' own globals.
SAN_CFLAGS := -O2 -g -fno-omit-frame-pointer
test-asan:
	ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 $(MAKE) BUILD=$(BUILD)/asan \
	  CFLAGS="$(SAN_CFLAGS) -fsanitize=address" suites
test-ubsan:
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 $(MAKE) CC=clang BUILD=$(BUILD)/ubsan \
	  CFLAGS="$(SAN_CFLAGS) -fsanitize=undefined -fno-sanitize-recover=undefined" suites
# (= not :=: only test-tsan looks for clang, so a gcc-only machine's make prints nothing)
ARCHER = $(shell c=$$(command -v clang) && d=$$(dirname $$(readlink -f $$c))/../lib/libarcher.so && \
                  [ -f "$$d" ] && readlink -f "$$d")
test-tsan:
	@[ -n "$(ARCHER)" ] || { echo "test-tsan: libarcher.so not found: apt-get install libomp-dev"; exit 1; }
	OMP_TOOL_LIBRARIES=$(ARCHER) TSAN_OPTIONS=halt_on_error=1:ignore_noninstrumented_modules=1:allocator_may_return_null=1 \
	  $(MAKE) CC=clang BUILD=$(BUILD)/tsan CFLAGS="$(SAN_CFLAGS) -fsanitize=thread" suites

# README.md's table of rejected input: every reject test notes (entry point,
# bad input, status) in $(REJECT_RECORDS) while the suites run (tests/support.h),
# and tools/reject_table.sh renders the notes between README.md's markers.
# `make reject-table` rewrites README.md's table; `make test` fails, with a
# diff, where the table is not what the suites reject.
REJECT_RECORDS = $(abspath $(BUILD))/reject_records.tsv
.PHONY: reject-table check-reject-table clear-reject-records
clear-reject-records:
	@rm -f $(REJECT_RECORDS)
suites: clear-reject-records
suites: export TEST_REJECT_TABLE = $(REJECT_RECORDS)
reject-table: suites
	@tools/reject_table.sh update $(REJECT_RECORDS) README.md
check-reject-table: suites
	@tools/reject_table.sh check $(REJECT_RECORDS) README.md
test: check-reject-table

# libFuzzer targets (tests/fuzz/, clang only): every public entry point of
# mla.h with hostile and valid inputs, results against the oracles
# (tests/fuzz/fuzz.h says what each call is checked for). `make fuzz` builds
# them in $(BUILD)/fuzz, replays the inputs that once failed
# (tests/fuzz/regress/<target>/, kept there as regression tests), then runs
# each for FUZZ_SECONDS on a copy of its seed corpus (tests/fuzz/corpus/
# <target>/, which a run never changes) from the random seed FUZZ_SEED (0:
# libFuzzer picks one; CI fixes it so that a run can be repeated). A crash or
# a mismatch fails the run and leaves the input in $(BUILD)/fuzz/artifacts/
# (rerun it: $(BUILD)/fuzz/<target> <file>). `make fuzz-seeds` rewrites the
# seed corpora from each target's own seed maker.
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_SECONDS ?= 15
FUZZ_SEED ?= 0
FUZZ_MAX_LEN ?= 512
FUZZ_CFLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
               -fno-sanitize-recover=undefined
FUZZ_DIR := $(BUILD)/fuzz
fuzz-build:
	@printf 'int LLVMFuzzerTestOneInput(const char *d, long n) { return d && n; }\n' | \
	  clang -fsanitize=fuzzer -x c - -o /dev/null 2>/dev/null || \
	  { echo "fuzz: clang cannot link -fsanitize=fuzzer: apt-get install clang libclang-rt-14-dev"; exit 1; }
	$(MAKE) CC=clang BUILD=$(FUZZ_DIR) CFLAGS="$(FUZZ_CFLAGS)" fuzz-targets
fuzz-targets: $(FUZZ_TARGETS:%=$(BUILD)/%)
$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.c tests/fuzz/fuzz.h tests/oracle.c tests/oracle.h \
                 $(wildcard include/*.h) $(BUILD)/libmla.a $(BUILD)/compiler
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -fsanitize=fuzzer -Itests $< tests/fuzz/fuzz.c tests/oracle.c \
	  -o $@ $(BUILD)/libmla.a $(LDLIBS)
fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
	   work=$(FUZZ_DIR)/run/$$t; rm -rf $$work; mkdir -p $$work $(FUZZ_DIR)/artifacts; \
	   cp -r tests/fuzz/corpus/$$t $$work/corpus; \
	   regress=$$(ls tests/fuzz/regress/$$t/* 2>/dev/null); \
	   if [ -n "$$regress" ]; then \
	     echo "== $$t: $$(echo $$regress | wc -w) regression inputs"; \
	     $(FUZZ_DIR)/$$t $$regress > $$work/regress.log 2>&1 || { tail -n 60 $$work/regress.log; exit 1; }; \
	   fi; \
	   echo "== $$t: $(FUZZ_SECONDS) s from seed $(FUZZ_SEED)"; \
	   $(FUZZ_DIR)/$$t -seed=$(FUZZ_SEED) -max_total_time=$(FUZZ_SECONDS) -max_len=$(FUZZ_MAX_LEN) -timeout=60 \
	     -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/artifacts/$$t- $$work/corpus \
	     > $$work/log 2>&1 || { tail -n 60 $$work/log; exit 1; }; \
	   grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec)' $$work/log; \
	 done
fuzz-seeds: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
	   rm -rf tests/fuzz/corpus/$$t && FUZZ_MAKE_SEEDS=tests/fuzz/corpus/$$t $(FUZZ_DIR)/$$t && \
	   echo "$$t: $$(ls tests/fuzz/corpus/$$t | wc -l) seeds" || exit 1; \
	 done

# mla_bench's run metadata names the commit it was built from (bench_meta.c);
# $(BUILD)/bench_commit changes, and the object rebuilds, only when it does.
BENCH_COMMIT := $(shell git describe --always --dirty 2>/dev/null || echo unknown)
$(shell mkdir -p $(BUILD) && [ "$$(cat $(BUILD)/bench_commit 2>/dev/null)" = "$(BENCH_COMMIT)" ] || \
        echo "$(BENCH_COMMIT)" > $(BUILD)/bench_commit)
$(BUILD)/obj/bench/bench_meta.o: $(BUILD)/bench_commit
$(BUILD)/obj/bench/bench_meta.o: BASE_CFLAGS += -DMLA_BENCH_COMMIT='"$(BENCH_COMMIT)"'

# Every mla_bench command and option on tiny cases, JSON keys checked
# (tools/bench_smoke.sh): the benchmark's options cannot rot.
.PHONY: bench-smoke profile plots
bench-smoke: $(BUILD)/bench/mla_bench
	@BENCH_RUNNER="$(TEST_RUNNER)" tools/bench_smoke.sh $(BUILD)/bench/mla_bench
test: bench-smoke

# examples/*.c: programs a server author copies (README.md, "A server step,
# by example"), built as a server builds them, from the public headers and
# the archive alone; `make test` runs each, and fails if one returns nonzero.
EXAMPLE_BINS := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
all: $(EXAMPLE_BINS)
$(BUILD)/examples/%: examples/%.c $(wildcard include/*.h) $(BUILD)/libmla.a $(BUILD)/compiler
	@mkdir -p $(@D)
	$(CC) -std=c11 $(WARN) $(CFLAGS) -Iinclude $< -o $@ $(BUILD)/libmla.a $(LDLIBS)
.PHONY: examples check-readme
examples: $(EXAMPLE_BINS)
	@for e in $(EXAMPLE_BINS); do echo "== $$e"; $(TEST_RUNNER) $$e || exit 1; done
test: examples

# Every command of README.md's shell blocks is a line of .ci/run or is
# listed, with the reason CI cannot run it, in tools/readme_commands.allow;
# every C block of it is a verbatim part of examples/server_step.c.
check-readme:
	@tools/readme_commands.sh
test: check-readme

# mla_bench for perf record -g: frame pointers everywhere (library and
# benchmark), optimised as usual, in a build folder of its own. README.md's
# "Profiling" has the perf commands.
PROFILE_CFLAGS := -O3 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer
profile:
	$(MAKE) BUILD=$(BUILD)/profile CFLAGS="$(PROFILE_CFLAGS)" $(BUILD)/profile/bench/mla_bench

# Decode and prefill over threads and context, with the FMA peak and memcpy
# bandwidth, as CSV and PNG in bench/results/<machine>/ (bench/plots.sh says
# how; PLOT_* variables size the sweeps).
plots: $(BUILD)/bench/mla_bench
	BENCH=$(BUILD)/bench/mla_bench bench/plots.sh


# Files go under $(DESTDIR)$(PREFIX); the installed files name $(PREFIX)
# alone (the CMake package finds its prefix from where it lies).
install: lib
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/lib/cmake/mla
	install -m 644 include/mla.h include/mla_backend.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libmla.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/$(SO_FILE) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(SO_FILE) $(DESTDIR)$(PREFIX)/lib/$(SO_NAME)
	ln -sf $(SO_NAME) $(DESTDIR)$(PREFIX)/lib/libmla.so
	for pc in mla mla-static; do \
	  sed 's|^prefix=.*|prefix=$(PREFIX)|' $(BUILD)/$$pc.pc > $(DESTDIR)$(PREFIX)/lib/pkgconfig/$$pc.pc || exit 1; \
	done
	install -m 644 $(BUILD)/cmake/mla-config.cmake $(BUILD)/cmake/mla-config-version.cmake \
	  $(DESTDIR)$(PREFIX)/lib/cmake/mla/

# tools/install_check.sh says what it checks.
check-install:
	CC="$(CC)" BUILD="$(BUILD)" MAKE="$(MAKE)" tools/install_check.sh

clean:
	rm -rf $(BUILD)
