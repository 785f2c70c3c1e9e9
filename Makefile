# mpsdiag - build, test, run.
#
#   make            build build/mpsdiag (+ build/libmpsdiag_cuda.so when nvcc is found)
#   make test       install missing dependencies, build, run the whole test suite
#   make run        install missing dependencies, build, train on Fashion-MNIST for about a minute
#   make asan       the test suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   make clean
#
# Switches: NO_CUDA=1, NO_MPI=1, CUDA_ARCHS="-gencode=...", SANITIZE=address,undefined,
# BUILD=dir, CC=clang. Objects go under $(BUILD) with -MMD dependencies, and a
# change of flags rebuilds everything.

.DEFAULT_GOAL := all
SHELL := /bin/bash

BUILD ?= build
UNAME_S := $(shell uname -s)
VERSION := 0.1.0

CC ?= cc
ifeq ($(CC),cc)
  ifeq ($(UNAME_S),Darwin)
    CC := clang
  endif
endif

PKGS      := openblas libcjson libturbojpeg zlib
TEST_PKGS := criterion

ifeq ($(UNAME_S),Darwin)
  BREW := $(shell command -v brew 2>/dev/null)
  ifneq ($(BREW),)
    BREW_PREFIX := $(shell brew --prefix 2>/dev/null)
    export PKG_CONFIG_PATH := $(shell brew --prefix openblas 2>/dev/null)/lib/pkgconfig:$(BREW_PREFIX)/lib/pkgconfig:$(PKG_CONFIG_PATH)
  endif
endif

have_pkg = $(shell pkg-config --exists $(1) 2>/dev/null && echo 1)
HAVE_DEPS := $(call have_pkg,$(PKGS))
HAVE_CRITERION := $(call have_pkg,$(TEST_PKGS))

WARN := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
        -Wdouble-promotion -Wno-overlength-strings -Werror
# Messages are cut to their buffers on purpose; gcc's truncation analysis
# flags every such snprintf. gcc also notes that 64-byte vector arguments
# changed their ABI in gcc 4.6: the CPU kernels pass them only to always-inline
# helpers, never across a call.
IS_CLANG := $(shell $(CC) --version 2>/dev/null | grep -q clang && echo 1)
ifeq ($(IS_CLANG),)
  WARN += -Wno-format-truncation -Wno-psabi
endif
OPT ?= -O2
CFLAGS_BASE := -std=c11 $(OPT) -g $(WARN) -fno-fast-math -pthread -Isrc -DMD_VERSION=\"$(VERSION)\"
ifneq ($(HAVE_DEPS),)
  DEP_CFLAGS := $(shell pkg-config --cflags $(PKGS))
  DEP_LIBS   := $(shell pkg-config --libs $(PKGS))
endif
CFLAGS  := $(CFLAGS_BASE) $(DEP_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS  := $(DEP_LIBS) -lm -ldl -pthread
LDFLAGS := $(EXTRA_LDFLAGS)
ifneq ($(UNAME_S),Darwin)
  LDFLAGS += -rdynamic
endif

# ---- MPI: data-parallel training across processes (src/core/dist.c only) -------
# Found through pkg-config (ompi-c, Open MPI) or the mpicc wrapper; without it
# mpsdiag runs one process and says so where several are asked for.
ifeq ($(NO_MPI),)
  MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null)
  MPI_LIBS := $(shell pkg-config --libs ompi-c 2>/dev/null)
  ifeq ($(MPI_LIBS),)
    MPICC := $(shell command -v mpicc 2>/dev/null)
    ifneq ($(MPICC),)
      MPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null)
      MPI_LIBS := $(shell $(MPICC) --showme:link 2>/dev/null)
    endif
  endif
endif
HAVE_MPI := $(if $(MPI_LIBS),1)
ifneq ($(HAVE_MPI),)
  LDLIBS += $(MPI_LIBS)
  $(BUILD)/obj/src/core/dist.o: CFLAGS += $(MPI_CFLAGS) -DMD_HAVE_MPI
endif

ifneq ($(SANITIZE),)
  SAN_FLAGS := -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
  CFLAGS  += $(SAN_FLAGS)
  LDFLAGS += $(SAN_FLAGS)
  NO_CUDA := 1
endif

# Quiet rules unless V=1.
ifeq ($(V),1)
  Q :=
  say = @true
else
  Q := @
  say = @printf '  %-6s %s\n'
endif

# ---- sources ---------------------------------------------------------------
SRCS := $(shell find src -name '*.c' | sort)
ifeq ($(UNAME_S),Darwin)
  METAL_SRCS := $(wildcard metal/*.m)
  METAL_CSRCS :=
  LDLIBS += -framework Metal -framework MetalPerformanceShaders -framework Foundation
else
  METAL_SRCS :=
  METAL_CSRCS := metal/metal_stub.c
endif
LIB_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(filter-out src/main.c,$(SRCS)) $(METAL_CSRCS)) \
            $(patsubst %.m,$(BUILD)/obj/%.o,$(METAL_SRCS))
MAIN_OBJ := $(BUILD)/obj/src/main.o
TEST_SRCS := $(wildcard test/*.c)
TEST_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(TEST_SRCS))

BIN  := $(BUILD)/mpsdiag
TESTBIN := $(BUILD)/mpsdiag-tests

# ---- CUDA plug-in ------------------------------------------------------------
ifeq ($(NO_CUDA),)
  NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
endif
CUDA_SRCS := $(wildcard cuda/*.cu)
CUDA_CSRCS := $(wildcard cuda/*.c)
CUDA_ARCHS ?= -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
NVCCFLAGS := -O2 -std=c++17 $(CUDA_ARCHS) -Xcompiler -fPIC,-Wall,-Wextra,-Werror -Werror all-warnings -Isrc -Icuda
# NCCL (multi-GPU collectives, cuda/cuda_dist.cu) when its header is found;
# libnccl.so.2 itself is opened at run time when several ranks need it, so the
# plug-in loads where NCCL is not installed (-ldl only).
NCCL_H := $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h /usr/local/include/nccl.h))
ifneq ($(NCCL_H),)
  NCCL_LIBS := -ldl
  $(BUILD)/obj/cuda/cuda_dist.o: NVCCFLAGS += -DMD_HAVE_NCCL
endif
ifneq ($(and $(NVCC),$(CUDA_SRCS)),)
  CUDA_LIB := $(BUILD)/libmpsdiag_cuda.so
  CUDA_OBJS := $(patsubst %.cu,$(BUILD)/obj/%.o,$(CUDA_SRCS)) $(patsubst %.c,$(BUILD)/obj/%.cuda.o,$(CUDA_CSRCS))
endif

# ---- flags stamp: rebuild when flags change ------------------------------------
FLAGS_STAMP := $(BUILD)/.flags
FLAGS_NOW := $(CC) $(CFLAGS) $(LDFLAGS) $(LDLIBS) $(MPI_CFLAGS) | $(NVCC) $(NVCCFLAGS) $(NCCL_LIBS)
$(shell mkdir -p $(BUILD); [ "$$(cat $(FLAGS_STAMP) 2>/dev/null)" = '$(FLAGS_NOW)' ] || echo '$(FLAGS_NOW)' > $(FLAGS_STAMP))

# ---- what was found ------------------------------------------------------------
ok = $(if $(1),✓,✗)
.PHONY: all test test-run run asan clean deps configure
# The CUDA plug-in first: nvcc on cuda_attn.cu takes minutes on one core, and
# with -j it then overlaps the C compilation instead of following it.
all: configure $(CUDA_LIB) $(BIN)

configure:
	@echo "mpsdiag $(VERSION) build ($(UNAME_S), $(CC))"
	@echo "  $(call ok,$(HAVE_DEPS)) libraries: $(PKGS)$(if $(HAVE_DEPS),, (missing: run scripts/install-deps.sh))"
	@echo "  $(call ok,$(HAVE_CRITERION)) criterion (tests)"
	@echo "  $(call ok,$(CUDA_LIB)) CUDA backend$(if $(CUDA_LIB), ($(NVCC)),$(if $(NVCC), (no cuda/ sources yet), (nvcc not found or NO_CUDA=1)))"
	@echo "  $(call ok,$(HAVE_MPI)) MPI (multi-process training)$(if $(HAVE_MPI),, (not found or NO_MPI=1: one process only))"
	@echo "  $(if $(CUDA_LIB),$(call ok,$(NCCL_H)) NCCL (multi-GPU collectives)$(if $(NCCL_H),, (nccl.h not found)),- NCCL (no CUDA plug-in))"
	@echo "  $(call ok,$(METAL_SRCS)) Metal backend$(if $(METAL_SRCS),, (macOS only))"
	@echo "  $(if $(SANITIZE),✓ sanitizers: $(SANITIZE),- sanitizers off)"
	@test -n "$(HAVE_DEPS)" || { echo "mpsdiag: missing libraries; run 'make test' or scripts/install-deps.sh" >&2; exit 1; }

$(BIN): $(MAIN_OBJ) $(LIB_OBJS)
	$(say) LINK $@
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(say) CC $<
	$(Q)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.m $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(say) OBJC $<
	$(Q)$(CC) $(filter-out -std=c11 -Wpedantic,$(CFLAGS)) -fobjc-arc -MMD -MP -c $< -o $@

# The CUDA plug-in: device code and host glue, linked against cuBLAS/cuDNN and
# the static CUDA runtime, so it needs only the driver and those libraries.
$(BUILD)/obj/%.o: %.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(say) NVCC $<
	$(Q)$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.cuda.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(say) CC $<
	$(Q)$(CC) $(CFLAGS) -fPIC -I$(CUDA_HOME)/include -MMD -MP -c $< -o $@

$(CUDA_LIB): $(CUDA_OBJS)
	$(say) LINK $@
	$(Q)$(NVCC) -shared $(CUDA_ARCHS) -o $@ $^ -L$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudnn $(NCCL_LIBS) -cudart static

# ---- tests -------------------------------------------------------------------
TEST_CFLAGS := $(CFLAGS) $(shell pkg-config --cflags $(TEST_PKGS) 2>/dev/null) -Wno-missing-prototypes -Wno-pedantic -Wno-double-promotion
$(BUILD)/obj/test/%.o: test/%.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(say) CC $<
	$(Q)$(CC) $(TEST_CFLAGS) -MMD -MP -c $< -o $@

$(TESTBIN): $(TEST_OBJS) $(LIB_OBJS)
	$(say) LINK $@
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(shell pkg-config --libs $(TEST_PKGS) 2>/dev/null) $(LDLIBS)

# Installs what is missing (and nothing else) before building.
deps:
	@scripts/install-deps.sh --check >/dev/null 2>&1 || scripts/install-deps.sh

TEST_JOBS ?= 2
test: deps
	@$(MAKE) --no-print-directory test-run

test-run: all $(TESTBIN)
	MPSDIAG_BIN=$(abspath $(BIN)) $(TESTBIN) --jobs $(TEST_JOBS) $(TEST_ARGS)

# make run trains on the full Fashion-MNIST when it is installed (the bundled
# sample otherwise) with its recipe and a one-minute budget, unless RUN_ARGS
# names the data itself.
RUN_DATA := $(if $(or $(findstring --dataset,$(RUN_ARGS)),$(findstring --data-dir,$(RUN_ARGS)),$(findstring --data_dir,$(RUN_ARGS)),$(findstring --config,$(RUN_ARGS)),$(findstring --ci,$(RUN_ARGS)),$(findstring --models,$(RUN_ARGS))),,--dataset fashion-mnist)
# Its checkpoints go to $(BUILD)/run, replaced by each make run.
RUN_CKPT := $(if $(or $(findstring checkpoint,$(RUN_ARGS)),$(findstring --resume,$(RUN_ARGS)),$(findstring --overwrite,$(RUN_ARGS)),$(findstring --config,$(RUN_ARGS))),,--checkpoint-dir $(BUILD)/run --overwrite)
run: deps
	@$(MAKE) --no-print-directory all
	$(BIN) $(RUN_DATA) $(RUN_CKPT) $(RUN_ARGS)

asan: deps
	@ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 LSAN_OPTIONS=suppressions=$(abspath test/lsan.supp) \
	  $(MAKE) --no-print-directory test-run BUILD=build/asan SANITIZE=address,undefined OPT=-O1

clean:
	rm -rf build

# Benchmark timers (not part of mpsdiag). Training-step timer for
# scripts/bench/cpu_step_vs_torch.sh and cpu_scaling.sh.
$(BUILD)/obj/scripts/%.o: scripts/%.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(say) CC $<
	$(Q)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/bench_step: $(BUILD)/obj/scripts/bench/bench_step.o $(LIB_OBJS)
	$(say) LINK $@
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Max pooling and batch norm timer, and a hash of their outputs to compare builds bit for bit.
$(BUILD)/norm_pool_bench: $(BUILD)/obj/scripts/bench/norm_pool_bench.o $(LIB_OBJS)
	$(say) LINK $@
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Conv-layer timer for scripts/bench/kernels_bench.sh and cpu_scaling.sh.
$(BUILD)/kernels_bench: $(BUILD)/obj/scripts/bench/kernels_bench.o $(LIB_OBJS)
	$(say) LINK $@
	$(Q)$(CC) $(LDFLAGS) -rdynamic -o $@ $^ $(LDLIBS)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ---- Metal backend: plans and grid sizing in plain C on every platform; on
# other platforms the kernels run in a CPU simulation for the tests ----------
METAL_C_OBJS := $(BUILD)/obj/metal/metal_grid.o $(BUILD)/obj/metal/metal_plan.o
$(BIN): $(METAL_C_OBJS)
$(TESTBIN): $(METAL_C_OBJS)

# The .metal files compiled as C++17 against metal/sim/metal_sim.h, and the
# fibre runtime that runs their threadgroups (tests only).
METAL_SHADERS := $(sort $(wildcard metal/*.metal))
METAL_SIM_OBJS := $(patsubst %.metal,$(BUILD)/obj/%.sim.o,$(METAL_SHADERS)) $(BUILD)/obj/metal/sim/metal_sim_rt.o
METAL_SIM_CXXFLAGS := -std=c++17 $(OPT) -g -Wall -Wextra -Werror -Wno-attributes -Wno-unused-parameter \
                      -fno-fast-math -DMD_METAL_SIMDGROUP_MM=1 -Isrc -Imetal -Imetal/sim $(SAN_FLAGS)
ifeq ($(UNAME_S),Darwin)
  METAL_SIM_CXXFLAGS += -D_XOPEN_SOURCE=600 -D_DARWIN_C_SOURCE -Wno-deprecated-declarations
  METAL_SIM_LIBS := -lc++
else
  METAL_SIM_LIBS := -lstdc++
endif
$(BUILD)/obj/%.sim.o: %.metal $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(say) SIM $<
	$(Q)$(CXX) $(METAL_SIM_CXXFLAGS) -MMD -MP -x c++ -c $< -o $@
$(BUILD)/obj/metal/sim/%.o: metal/sim/%.cc $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(say) CXX $<
	$(Q)$(CXX) $(METAL_SIM_CXXFLAGS) -MMD -MP -c $< -o $@
$(TESTBIN): $(METAL_SIM_OBJS)
$(TESTBIN): LDLIBS += $(METAL_SIM_LIBS)

# The MSL sources embedded in the binary as one C string (compiled at start-up).
METAL_SOURCE_H := $(BUILD)/gen/md_metal_source.h
METAL_EMBED := metal/md_metal_args.h metal/md_metal_common.h src/backend/act_math.h $(METAL_SHADERS)
$(METAL_SOURCE_H): metal/embed_source.sh $(METAL_EMBED)
	@mkdir -p $(dir $@)
	$(say) EMBED $@
	$(Q)sh metal/embed_source.sh $@ $(METAL_EMBED)
# The same concatenation as plain text must compile as one unit (checked with
# the simulation's C++ compiler on every platform).
METAL_RAW := $(BUILD)/gen/md_metal_all.metal
METAL_RAW_STAMP := $(BUILD)/.metal-embed-check
$(METAL_RAW): metal/embed_source.sh $(METAL_EMBED)
	@mkdir -p $(dir $@)
	$(Q)sh metal/embed_source.sh --raw $@ $(METAL_EMBED)
$(METAL_RAW_STAMP): $(METAL_RAW) metal/sim/metal_sim.h
	$(say) CHECK $(METAL_RAW)
	$(Q)$(CXX) $(METAL_SIM_CXXFLAGS) -fsyntax-only -x c++ $(METAL_RAW)
	@touch $@
test-run: $(METAL_RAW_STAMP)
ifeq ($(UNAME_S),Darwin)
LDLIBS += -framework IOKit -framework CoreFoundation
$(BUILD)/obj/metal/metal_backend.o: $(METAL_SOURCE_H)
$(BUILD)/obj/metal/metal_backend.o: CFLAGS += -I$(BUILD)/gen
endif

# Elsewhere the Objective-C host code is syntax- and type-checked by clang
# against metal/sim/objc/MetalDecls.h (the Metal/Foundation API it uses).
.PHONY: metal-objc-check
CLANG ?= $(shell command -v clang 2>/dev/null)
METAL_OBJC_FLAGS := -fsyntax-only -x objective-c -fobjc-arc -fobjc-runtime=macosx-13.0 -std=gnu11 \
                    $(filter-out -Wpedantic -Wno-format-truncation,$(WARN)) -Isrc -Imetal -Imetal/sim/objc -I$(BUILD)/gen
METAL_OBJC_STAMP := $(BUILD)/.metal-objc-check
$(METAL_OBJC_STAMP): $(wildcard metal/*.m metal/*.h metal/sim/objc/*.h metal/sim/objc/*/*.h) $(METAL_SOURCE_H)
	$(say) OBJC-CHECK metal/metal_backend.m
	$(Q)$(CLANG) $(METAL_OBJC_FLAGS) metal/metal_backend.m
	@touch $@
ifeq ($(UNAME_S),Darwin)
metal-objc-check:
else ifeq ($(CLANG),)
metal-objc-check:
	@echo "metal: clang not found; the Objective-C syntax check of metal/metal_backend.m is skipped"
else
metal-objc-check: $(METAL_OBJC_STAMP)
endif
test-run: metal-objc-check

# Static checks of the Metal sources that need no Mac (metal/check/mchk.h):
# metal_backend.m and MetalDecls.h against Apple's API (metal/api/*.tsv, from
# Apple's metal-cpp by scripts/gen_metal_api_facts.py), and the MSL rules and
# host bindings the simulation cannot see. The test suite links the checks
# too (test/test_metal_check.c, which also shows they fail on mistakes).
METAL_CHECK_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,metal/check/mchk_lex.c metal/check/api_check.c metal/check/msl_check.c)
METAL_CHECK := $(BUILD)/metal-check
$(TESTBIN): $(METAL_CHECK_OBJS)
$(METAL_CHECK): $(METAL_CHECK_OBJS) $(BUILD)/obj/metal/check/mchk_main.o
	$(say) LINK $@
	$(Q)$(CC) $(LDFLAGS) -o $@ $^
METAL_API_FILES := metal/api/metal_api_facts.tsv metal/api/foundation_extra.tsv metal/metal_backend.m metal/sim/objc/MetalDecls.h
METAL_MSL_FILES := metal/metal_plan.c metal/metal_backend.m metal/md_metal_args.h,metal/metal_grid.h $(METAL_EMBED)
.PHONY: metal-check
metal-check: $(METAL_CHECK)
	$(Q)$(METAL_CHECK) api $(METAL_API_FILES)
	$(Q)$(METAL_CHECK) msl $(METAL_MSL_FILES)
test-run: metal-check

# build/metal-sim-tests: the kernels area's backend-ops test (every available
# backend against the reference) with "metal" backed by the simulated kernels
# (metal/sim/metal_sim_backend.c instead of metal_stub.c). Not on macOS, where
# the real backend runs that test on the GPU.
ifneq ($(UNAME_S),Darwin)
METAL_SIM_TESTBIN := $(BUILD)/metal-sim-tests
METAL_SIM_TEST_OBJS := $(BUILD)/obj/test/test_backend_ops.o $(BUILD)/obj/test/helpers.o $(BUILD)/obj/test/kernel_cases.o \
                       $(BUILD)/obj/test/test_seq_metal_sim.o $(BUILD)/obj/test/test_nn_vit.o \
                       $(BUILD)/obj/test/test_doctor.o $(BUILD)/obj/test/helpers_job.o $(BUILD)/obj/test/json_schema.o \
                       $(BUILD)/obj/metal/sim/metal_sim_backend.o
$(METAL_SIM_TESTBIN): $(METAL_SIM_TEST_OBJS) $(filter-out %/metal_stub.o,$(LIB_OBJS)) $(METAL_C_OBJS) $(METAL_SIM_OBJS)
	$(say) LINK $@
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(shell pkg-config --libs $(TEST_PKGS) 2>/dev/null) $(LDLIBS) $(METAL_SIM_LIBS)
.PHONY: metal-sim-test
metal-sim-test: $(METAL_SIM_TESTBIN)
	$(METAL_SIM_TESTBIN) --filter '@(backend_ops/metal|seq_metal_sim/*|vit_metal_sim/*|doctor_metal_sim/*)' $(TEST_ARGS)
# Under the sanitizers the simulation is ~8x slower; test/test_metal_sim.c
# still runs there.
ifeq ($(SANITIZE),)
test-run: metal-sim-test
else
test-run: metal-sim-test-skipped
.PHONY: metal-sim-test-skipped
metal-sim-test-skipped:
	@echo "metal: build/metal-sim-tests (backend-ops on the simulated kernels) is skipped under sanitizers; run make metal-sim-test"
endif
endif

# ---- fuzzing (issue 4) ---------------------------------------------------------
# `make fuzz`: libFuzzer (clang -fsanitize=fuzzer) on the IDX, CIFAR and JPEG
# parsers and the CSV time-series reader of src/data, then on the safetensors
# reader (with the checkpoint metadata checks) and on JSON model configs,
# FUZZ_SECONDS each, from seeds written by test/fuzz/seeds.c. The last two
# link the whole library, built once with the sanitizers under
# $(BUILD)/fuzz/lib. Without libFuzzer it runs the smoke mode that `make test`
# also runs.
FUZZ_SECONDS ?= 10
FUZZ_CC ?= clang
FUZZ_SRCS := src/data/idx.c src/data/cifar.c src/data/jpeg.c src/data/image.c src/data/csv_series.c \
             src/core/mem.c src/core/status.c
FUZZ_CFLAGS := -std=c11 -O1 -g -Isrc -Itest -pthread $(DEP_CFLAGS)
FUZZ_LIBS := $(shell pkg-config --libs libturbojpeg zlib 2>/dev/null) -lm -pthread
FUZZ_LIB_SRCS := $(filter-out src/main.c,$(SRCS)) $(METAL_CSRCS) metal/metal_grid.c metal/metal_plan.c
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_RUN = -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -timeout=20 -print_final_stats=1
.PHONY: fuzz
fuzz: deps
	@if echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; return (int)n * 0; }' \
	     | $(FUZZ_CC) -x c - -fsanitize=fuzzer -o /dev/null >/dev/null 2>&1; then \
	  mkdir -p $(BUILD)/fuzz/lib && \
	  $(FUZZ_CC) $(FUZZ_CFLAGS) test/fuzz/seeds.c $(FUZZ_SRCS) -o $(BUILD)/fuzz/seeds $(FUZZ_LIBS) && \
	  $(BUILD)/fuzz/seeds $(BUILD)/fuzz/corpus && \
	  for t in idx cifar jpeg csv; do \
	    echo "fuzz_$$t: $(FUZZ_SECONDS) s"; \
	    $(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $(FUZZ_SAN) \
	      test/fuzz/fuzz_$$t.c $(FUZZ_SRCS) -o $(BUILD)/fuzz/fuzz_$$t $(FUZZ_LIBS) && \
	    $(BUILD)/fuzz/fuzz_$$t $(FUZZ_RUN) -max_len=65536 $(BUILD)/fuzz/corpus/$$t 2>&1 \
	      | grep -E 'stat::number_of_executed_units|ERROR|SUMMARY|crash-|timeout-' ; \
	    test $${PIPESTATUS[0]} -eq 0 || exit 1; \
	  done; \
	  echo "fuzz: the library with sanitizers ($(BUILD)/fuzz/lib)"; \
	  objs=; for f in $(FUZZ_LIB_SRCS); do \
	    o=$(BUILD)/fuzz/lib/$$(echo $$f | tr / _ | sed 's/\.c$$/.o/'); objs="$$objs $$o"; \
	    test $$o -nt $$f || $(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(FUZZ_SAN) -c $$f -o $$o || exit 1; \
	  done; \
	  for t in safetensors model; do \
	    echo "fuzz_$$t: $(FUZZ_SECONDS) s"; \
	    $(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $(FUZZ_SAN) test/fuzz/fuzz_$$t.c $$objs \
	      -o $(BUILD)/fuzz/fuzz_$$t $(DEP_LIBS) -lm -ldl -pthread && \
	    $(BUILD)/fuzz/fuzz_$$t $(FUZZ_RUN) -max_len=16384 $(BUILD)/fuzz/corpus/$$t 2>&1 \
	      | grep -E 'stat::number_of_executed_units|ERROR|SUMMARY|crash-|timeout-' ; \
	    test $${PIPESTATUS[0]} -eq 0 || exit 1; \
	  done; \
	else \
	  echo "make fuzz: $(FUZZ_CC) has no libFuzzer here; running the smoke mode"; \
	  $(MAKE) --no-print-directory test-run TEST_ARGS="--filter 'fuzz_smoke/*'"; \
	fi

# ---- CPU kernels -----------------------------------------------------
# gcc -O2 vectorises only loops that need no run-time checks (aliasing, trip
# counts); the CPU kernels' element-wise loops need -O3 for SIMD. Still IEEE:
# no -ffast-math, so reductions are not reassociated.
$(BUILD)/obj/src/backend/cpu/%.o: CFLAGS += -O3
# cpu_norm_pool.c is written in explicit vectors: gcc 12's -O3 makes its
# window loops 3x slower than -O2 (docs/performance-cpu.md), so -O2 there.
$(BUILD)/obj/src/backend/cpu/cpu_norm_pool.o: CFLAGS += -O2
