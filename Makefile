# inkling.c — build, test and sanitizer targets.
#   make          builds ./inkling and build/release/libinkling.a
#   make test     installs missing Debian packages, builds and runs every test
#   make asan     the same tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench    runs `inkling bench`
#   make tsan     ThreadSanitizer build; runs the pool tests, its users (kernels, model) and the server tests
#   make cross-aarch64  cross-builds for aarch64 (Debian gcc-aarch64-linux-gnu) and runs the tests
#                 under qemu-user (see the section at the end)
# Objects live in build/<mode>/; library sources are every src/**/*.c except src/cli/.

CC      ?= cc
MODE    ?= release
BUILD   := build/$(MODE)
WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Wpointer-arith -Wvla -Wformat=2 -Wno-format-nonliteral -Wno-format-truncation
CSTD    := -std=c17 -D_POSIX_C_SOURCE=200809L
OPT_release := -O2 -g -fno-omit-frame-pointer
OPT_asan    := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
OPT_debug   := -O0 -g
OPT_tsan    := -O1 -g -fno-omit-frame-pointer -fsanitize=thread
CFLAGS  += $(CSTD) $(WARN) $(OPT_$(MODE)) -Iinclude -Isrc -Itests -MMD -MP
LDFLAGS += $(filter -fsanitize=%,$(OPT_$(MODE)))
LDLIBS  += -ljansson -lpcre2-8 -lcurl -lcrypto -lmicrohttpd -lpthread -lm

# Expert parallelism over MPI (issue 19, docs/distributed.md): MPI=auto (the default) builds
# src/cli/dist.c against the MPI that `mpicc` wraps (Debian: libopenmpi-dev) when there is one, MPI=0
# never. Only the CLI object dist.o includes mpi.h and only the binaries link it: libinkling.a never
# does. Without MPI the build is the same as before (dist.c then only refuses --parallel expert).
MPI ?= auto
MPICC := $(if $(filter 0 no,$(MPI)),,$(shell command -v mpicc 2>/dev/null))
ifneq ($(MPICC),)
MPI_CFLAGS := -DINK_HAVE_MPI $(patsubst -I%,-isystem %,$(shell $(MPICC) --showme:compile 2>/dev/null))
LDLIBS     += $(shell $(MPICC) --showme:link 2>/dev/null)
$(BUILD)/src/cli/dist.o: CFLAGS += $(MPI_CFLAGS)
endif

LIB_SRC  := $(shell find src -name '*.c' ! -path 'src/cli/*' | sort)
CLI_SRC  := $(shell find src/cli -name '*.c' | sort)
TEST_SRC := $(wildcard tests/test_*.c)
TSUP_SRC := $(wildcard tests/support/*.c)
TOOL_SRC := $(wildcard tools/*.c)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TSUP_OBJ := $(TSUP_SRC:%.c=$(BUILD)/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TOOL_BIN := $(TOOL_SRC:tools/%.c=$(BUILD)/tools/%)
LIBA     := $(BUILD)/libinkling.a
BIN      := $(BUILD)/inkling

.SECONDARY:
.PHONY: all test asan tsan debug bench clean deps check-build test-large FORCE
all: $(BIN) $(TOOL_BIN)
ifeq ($(MODE),release)
	@ln -sf $(BIN) inkling
endif

deps:
	@scripts/deps

$(BUILD)/%.o: %.c $(BUILD)/flags
	@mkdir -p $(dir $@)
	@echo "  CC    $<"
	@$(CC) $(CFLAGS) -c $< -o $@

# Rebuild everything when the flags change (redis .make-settings idea).
$(BUILD)/flags: FORCE
	@mkdir -p $(BUILD)
	@echo '$(CC) $(CFLAGS) $(LDFLAGS) $(LDLIBS)' | cmp -s - $@ || echo '$(CC) $(CFLAGS) $(LDFLAGS) $(LDLIBS)' > $@
FORCE:

$(LIBA): $(LIB_OBJ)
	@rm -f $@
	@echo "  AR    $@"
	@$(AR) rcs $@ $^

$(BIN): $(CLI_OBJ) $(LIBA)
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) $(CLI_OBJ) $(LIBA) $(LDLIBS) -o $@

# Tests may call the CLI's commands directly: every CLI object but main.o, as an archive.
CLIA := $(BUILD)/libinkcli.a
$(CLIA): $(filter-out %/main.o,$(CLI_OBJ))
	@rm -f $@
	@$(AR) rcs $@ $^

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TSUP_OBJ) $(CLIA) $(LIBA)
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) $< $(TSUP_OBJ) $(CLIA) $(LIBA) $(LDLIBS) -lcmocka -o $@

$(BUILD)/tools/%: $(BUILD)/tools/%.o $(TSUP_OBJ) $(LIBA)
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) $< $(TSUP_OBJ) $(LIBA) $(LDLIBS) -o $@

check-build: $(BIN) $(TEST_BIN) $(TOOL_BIN)

test: deps
	@$(MAKE) --no-print-directory MODE=$(MODE) check-build all
	@tests/run.sh $(BUILD)

asan: deps
	@$(MAKE) --no-print-directory MODE=asan check-build
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 tests/run.sh build/asan

# The pool (src/base/pool.c) is exercised by test_pool, every multi-threaded matmul in test_kernels and the
# forward passes of test_model; test_server drives `inkling serve` (built with TSan too) from
# concurrent clients; test_ep runs expert-parallel ranks as threads. A data race makes the binary
# exit 66, which run.sh counts as a failure.
TSAN_TESTS := test_pool test_kernels test_model test_server test_ep
tsan: deps
	@$(MAKE) --no-print-directory MODE=tsan build/tsan/inkling $(TSAN_TESTS:%=build/tsan/tests/%)
	@TSAN_OPTIONS=halt_on_error=1:exitcode=66:second_deadlock_stack=1 tests/run.sh build/tsan

debug:
	@$(MAKE) --no-print-directory MODE=debug all

# Real-size sparse stand-ins (issue 20): Inkling-Small bf16 / NVFP4 / MLX 4-bit, aligned and
# misaligned, through the CLI (detection, parameters, closed-form logits, greedy, MTP, anonymous
# memory bound); the 975B layout through `info`. A few minutes; needs ~25 GB of reclaimable page
# cache, almost no disk (holes). See tests/large.py.
test-large: all
	@nice python3 tests/large.py $(BUILD)

bench: all
	@$(BUILD)/tools/mkbench build/bench
	./inkling bench -m build/bench/bf16 -m build/bench/q4

# MTP vs plain on the bundled model and memory-bound twins (issue 16): scripts/bench-mtp --help;
# BENCH_MTP_ARGS=--quick for a short run. Twins are written to build/twins/ (tools/twin.py).
.PHONY: bench-mtp
bench-mtp: all
	@nice scripts/bench-mtp $(BENCH_MTP_ARGS)

clean:
	rm -rf build inkling

# driver_*.d are left out: make would try to remake them through the driver_%.o pattern (their
# one dependency is listed on the rule instead)
-include $(shell find build -name '*.d' -not -name 'driver_*' 2>/dev/null)

# ---- fuzz (issue 9) -----------------------------------------------------------------------------
#   make fuzz    builds the libFuzzer targets (clang, ASan + UBSan) into build/fuzz/ and runs each one
#                for FUZZ_SECONDS (default 30; 9 targets, about 2.5 min with -j2) on its seeds in fuzz/corpus/<target>/; targets run in
#                parallel under make -j. New inputs go to build/fuzz/corpus/<target>/, a crash to
#                build/fuzz/crash/<target>/ (copy it into fuzz/regressions/<target>/ once fixed:
#                tests/test_fuzz_regressions replays those and the seeds in `make test`).
#   make fuzz-build   only builds; build/fuzz/fuzz_<target> CORPUS... runs one by hand.
FUZZ_CC      ?= $(shell command -v clang-14 2>/dev/null || echo clang)
FUZZ_SECONDS ?= 30
FUZZ_TARGETS := safetensors tdir config tokenizer encode chat hub server serverout
FUZZ_B       := build/fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS  := $(CSTD) $(WARN) -Wno-unknown-warning-option -O1 -g -fno-omit-frame-pointer $(FUZZ_SAN) \
                -fsanitize=fuzzer-no-link -Iinclude -Isrc -Itests -MMD -MP
FUZZ_SRC     := $(filter-out fuzz/driver.c,$(wildcard fuzz/*.c))
FUZZ_LIBOBJ  := $(LIB_SRC:%.c=$(FUZZ_B)/obj/%.o)
FUZZ_OBJS    := $(FUZZ_SRC:%.c=$(FUZZ_B)/obj/%.o)
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FUZZ_B)/fuzz_%)
FUZZ_OPTS    := -max_len=8192 -timeout=20 -rss_limit_mb=2048 -error_exitcode=77 -print_final_stats=1
FUZZ_OPTS_encode    := -max_len=2048
FUZZ_OPTS_tokenizer := -max_len=16384
FUZZ_OPTS_tdir      := -max_len=16384
FUZZ_DICT    := -dict=fuzz/json.dict

.PHONY: fuzz fuzz-build $(FUZZ_TARGETS:%=fuzz-run-%)
fuzz: deps
	@$(MAKE) --no-print-directory fuzz-build
	@$(MAKE) --no-print-directory $(FUZZ_TARGETS:%=fuzz-run-%)
	@echo "fuzz: $(words $(FUZZ_TARGETS)) targets, $(FUZZ_SECONDS) s each, no crash"

fuzz-build: $(FUZZ_BINS)

$(FUZZ_B)/flags: FORCE
	@mkdir -p $(FUZZ_B)
	@echo '$(FUZZ_CC) $(FUZZ_CFLAGS)' | cmp -s - $@ || echo '$(FUZZ_CC) $(FUZZ_CFLAGS)' > $@

$(FUZZ_B)/obj/%.o: %.c $(FUZZ_B)/flags
	@mkdir -p $(dir $@)
	@echo "  FUZZCC $<"
	@$(FUZZ_CC) $(call fuzz_flags,$<) -c $< -o $@

# clang ignores `#pragma GCC target("avx2,fma")`: such files (SIMD kernels, not what is fuzzed) get
# the matching -m flags instead, and no sanitizers (ASan makes clang take minutes on them).
fuzz_comma := ,
fuzz_isa = $(addprefix -m,$(subst $(fuzz_comma), ,$(shell sed -n 's/^\#pragma GCC target("\([^"]*\)").*/\1/p' $(1))))
fuzz_flags = $(if $(call fuzz_isa,$(1)),$(CSTD) -w -O1 -g -fno-omit-frame-pointer -Iinclude -Isrc -MMD -MP \
             $(call fuzz_isa,$(1)),$(FUZZ_CFLAGS) $(FUZZ_XFLAGS))

# gcc is the project's compiler: clang's extra warnings in library code stay warnings here.
$(FUZZ_LIBOBJ): FUZZ_XFLAGS := -Wno-error -w

$(FUZZ_B)/obj/driver_%.o: fuzz/driver.c fuzz/fuzz.h $(FUZZ_B)/flags
	@mkdir -p $(dir $@)
	@$(FUZZ_CC) $(FUZZ_CFLAGS) -DFUZZ_ENTRY=ink_fuzz_$* -c $< -o $@

$(FUZZ_B)/libinkling.a: $(FUZZ_LIBOBJ)
	@rm -f $@
	@$(AR) rcs $@ $^

$(FUZZ_B)/fuzz_%: $(FUZZ_B)/obj/driver_%.o $(FUZZ_OBJS) $(FUZZ_B)/libinkling.a
	@echo "  FUZZLD $@"
	@$(FUZZ_CC) -fsanitize=fuzzer $(FUZZ_SAN) $< $(FUZZ_OBJS) $(FUZZ_B)/libinkling.a $(LDLIBS) -o $@

$(FUZZ_TARGETS:%=fuzz-run-%): fuzz-run-%: $(FUZZ_B)/fuzz_%
	@mkdir -p $(FUZZ_B)/corpus/$* $(FUZZ_B)/crash/$* $(FUZZ_B)/log
	@if $< $(FUZZ_OPTS) $(FUZZ_OPTS_$*) $(FUZZ_DICT) -max_total_time=$(FUZZ_SECONDS) \
	      -artifact_prefix=$(FUZZ_B)/crash/$*/ $(FUZZ_B)/corpus/$* fuzz/corpus/$* >$(FUZZ_B)/log/$*.log 2>&1; then \
	    echo "fuzz $*: $$(grep -o 'stat::number_of_executed_units: [0-9]*' $(FUZZ_B)/log/$*.log | grep -o '[0-9]*$$') runs," \
	         "$$(grep -o 'cov: [0-9]*' $(FUZZ_B)/log/$*.log | tail -n1), no crash"; \
	else \
	    tail -n 60 $(FUZZ_B)/log/$*.log; echo "fuzz $*: FAILED (log $(FUZZ_B)/log/$*.log, input in $(FUZZ_B)/crash/$*/)"; exit 1; \
	fi

# The regression replay links the targets' entry points (compiled like the rest of the tests).
FUZZ_TEST_OBJ := $(FUZZ_SRC:%.c=$(BUILD)/%.o)
$(BUILD)/tests/test_fuzz_regressions: $(BUILD)/tests/test_fuzz_regressions.o $(FUZZ_TEST_OBJ) $(TSUP_OBJ) $(LIBA)
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) $< $(FUZZ_TEST_OBJ) $(TSUP_OBJ) $(LIBA) $(LDLIBS) -lcmocka -o $@
.PRECIOUS: $(FUZZ_B)/obj/%.o $(FUZZ_B)/obj/driver_%.o

# ---- aarch64 cross build (issue 14) -------------------------------------------------------------
#   make cross-aarch64   builds everything for aarch64 with Debian's gcc-aarch64-linux-gnu into
#                        build/aarch64/ and runs the whole test suite under qemu-user (no binfmt
#                        needed: tests/run.sh prefixes each test with qemu, and INKLING_BIN is a
#                        wrapper script, so tests that run the CLI run it under qemu too). On aarch64
#                        the kernels fall back to the scalar set. Needs the arm64 -dev libraries
#                        through Debian multiarch; scripts/cross-deps installs them.
CROSS        ?= aarch64-linux-gnu-
QEMU_AARCH64 ?= qemu-aarch64-static
OPT_aarch64  := -O2 -g -fno-omit-frame-pointer
.PHONY: cross-aarch64 cross-aarch64-build
cross-aarch64-build:
	@$(MAKE) --no-print-directory MODE=aarch64 CC=$(CROSS)gcc AR=$(CROSS)ar MPI=0 check-build
	@printf '#!/bin/sh\nexec %s "%s/build/aarch64/inkling" "$$@"\n' "$(QEMU_AARCH64)" "$(CURDIR)" > build/aarch64/inkling-qemu
	@chmod +x build/aarch64/inkling-qemu

cross-aarch64:
	@scripts/cross-deps
	@$(MAKE) --no-print-directory cross-aarch64-build
	@INKLING_TEST_JOBS=$${INKLING_TEST_JOBS:-2} INKLING_BIN=build/aarch64/inkling-qemu INKLING_TEST_RUNNER=$(QEMU_AARCH64) tests/run.sh build/aarch64

# The engine's tests (golden outputs, kernels, model, generator, batching, quantized and unaligned
# weights) under qemu: the part of the suite that says the scalar set computes what x86 does, a
# few minutes. .ci/run runs the whole suite (`make cross-aarch64`, two binaries at a time, ~15-20
# min on 2 cores: tests scale their repetition counts down under an emulator, tu_scaled).
AARCH64_QUICK := test_golden test_kernels test_model test_gen test_batch test_quant test_unaligned test_sampler
.PHONY: cross-aarch64-quick
cross-aarch64-quick:
	@scripts/cross-deps
	@$(MAKE) --no-print-directory cross-aarch64-build
	@INKLING_TESTS="$(AARCH64_QUICK)" INKLING_BIN=build/aarch64/inkling-qemu INKLING_TEST_RUNNER=$(QEMU_AARCH64) \
	  tests/run.sh build/aarch64
