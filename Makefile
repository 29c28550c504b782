# libmla — one Makefile. Each src/kernels/<isa>/ folder gets its own -m flags
# and nothing else does, so dispatch and metadata code run on any CPU of the
# architecture; the dispatcher picks kernels at run time.
#
#   make                 build/libmla.a, build/libmla.so, build/mla.pc, tools
#   make run             the main job (build/mla_run)
#   make test            every cmocka suite (+ the exported-symbol and layer checks)
#   make test-neon       the suites cross-compiled for AArch64, under qemu
#   make install PREFIX=/usr/local
#   make CC=clang        clang + libomp instead of gcc + libgomp

CC ?= cc
BUILD ?= build
PREFIX ?= /usr/local
TEST_RUNNER ?=
AARCH64_CC ?= aarch64-linux-gnu-gcc
QEMU_AARCH64 ?= qemu-aarch64 -cpu max

ARCH := $(shell $(CC) -dumpmachine | cut -d- -f1)
IS_CLANG := $(shell $(CC) --version 2>/dev/null | grep -q clang && echo 1)
OMP_LIB := $(if $(IS_CLANG),-lomp,-lgomp)
CROSS_SUFFIX := $(if $(filter $(ARCH),$(shell uname -m)),,:$(if $(filter aarch64,$(ARCH)),arm64,$(ARCH)))

CFLAGS ?= -O3 -g
WARN := -Wall -Wextra -Werror
# ISO C (no GNU fp contraction): scalar ref math rounds exactly as written;
# SIMD kernels fuse only where they call an FMA intrinsic.
BASE_CFLAGS := -std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden -ffp-contract=off -fopenmp \
               $(WARN) -Iinclude -Isrc
LDLIBS := -lsleef $(OMP_LIB) -lpthread -lm

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
# *_neon_fhm.c (FP16 + FHM), *_neon_bf16.c add their extension and nothing more.
AVX2_FLAGS := -mavx2 -mfma -mf16c
AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c
isa_flags = $(strip \
  $(if $(findstring /kernels/avx2/,$1)$(findstring probe_avx2.c,$1),$(AVX2_FLAGS)) \
  $(if $(findstring /kernels/avx512/,$1)$(findstring probe_avx512.c,$1),$(AVX512_FLAGS)) \
  $(if $(findstring _avx512_bf16.c,$1),-mavx512bf16) \
  $(if $(findstring _avx512_fp16.c,$1),-mavx512fp16) \
  $(if $(findstring _avx512_amx.c,$1),-mamx-tile -mamx-bf16) \
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
NEEDS_DEPS := $(if $(MAKECMDGOALS),$(filter-out clean test-neon check-layers,$(MAKECMDGOALS)),all)
have_header = $(shell printf '\043include <$1>\n' | $(CC) $(BASE_CFLAGS) -E -x c - >/dev/null 2>&1 && echo 1)
ifneq ($(NEEDS_DEPS),)
ifeq ($(call have_header,omp.h),)
$(error omp.h not found for $(CC): apt-get install $(if $(IS_CLANG),libomp-dev,build-essential))
endif
ifeq ($(call have_header,sleef.h),)
$(error sleef.h not found for $(CC): apt-get install libsleef-dev$(CROSS_SUFFIX))
endif
ifneq ($(filter test check,$(NEEDS_DEPS)),)
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

.PHONY: all lib run test test-neon check-symbols check-layers install clean
all: lib $(BENCH_BINS)
lib: $(BUILD)/libmla.a $(BUILD)/libmla.so $(BUILD)/mla.pc

# Each object records the headers it included (-MMD; -MP keeps a deleted
# header from breaking the build), so a header change rebuilds its users only.
$(BUILD)/obj/%.o: %.c Makefile $(BUILD)/compiler
	@mkdir -p $(@D)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -MMD -MP $(call isa_flags,$<) -c $< -o $@

-include $(LIB_OBJS:.o=.d) $(BENCH_OBJS:.o=.d)

$(BUILD)/libmla.a: $(LIB_OBJS)
	@rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/libmla.so: $(LIB_OBJS)
	$(CC) -shared -fopenmp -o $@ $^ $(LDLIBS)

# Libs names the archive itself: servers link libmla statically; its runtime
# dependencies (Debian ships libsleef only as a shared library) come with
# `pkg-config --static --libs mla`.
$(BUILD)/mla.pc: Makefile
	@mkdir -p $(@D)
	@printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$${prefix}/lib' 'includedir=$${prefix}/include' '' \
	  'Name: mla' 'Description: CPU kernels for DeepSeek-style Multi-head Latent Attention' \
	  'Version: 0.1.0' 'Cflags: -I$${includedir}' 'Libs: $${libdir}/libmla.a' \
	  'Libs.private: $(LDLIBS)' > $@

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

test: $(TEST_BINS) check-symbols check-layers
	@failed=0; for t in $(TEST_BINS); do \
	   echo "== $$t"; $(TEST_RUNNER) $$t || failed=$$((failed + 1)); \
	 done; \
	 echo "suites: $$(( $(words $(TEST_BINS)) - failed )) passed, $$failed failed"; \
	 [ $$failed -eq 0 ]

test-neon:
	$(MAKE) CC=$(AARCH64_CC) BUILD=$(BUILD)/aarch64 TEST_RUNNER="$(QEMU_AARCH64)" test

install: lib
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/mla.h include/mla_backend.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(BUILD)/libmla.a $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(BUILD)/libmla.so $(DESTDIR)$(PREFIX)/lib/
	sed 's|^prefix=.*|prefix=$(PREFIX)|' $(BUILD)/mla.pc > $(DESTDIR)$(PREFIX)/lib/pkgconfig/mla.pc

clean:
	rm -rf $(BUILD)
