# inkling.c — build, test and sanitizer targets.
#   make          builds ./inkling and build/release/libinkling.a
#   make test     installs missing Debian packages, builds and runs every test
#   make asan     the same tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make bench    runs `inkling bench`
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
CFLAGS  += $(CSTD) $(WARN) $(OPT_$(MODE)) -Iinclude -Isrc -Itests -MMD -MP
LDFLAGS += $(filter -fsanitize=%,$(OPT_$(MODE)))
LDLIBS  += -ljansson -lpcre2-8 -lcurl -lmicrohttpd -lpthread -lm

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

.PHONY: all test asan debug bench clean deps check-build
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
	@ar rcs $@ $^

$(BIN): $(CLI_OBJ) $(LIBA)
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) $(CLI_OBJ) $(LIBA) $(LDLIBS) -o $@

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TSUP_OBJ) $(LIBA)
	@echo "  LD    $@"
	@$(CC) $(LDFLAGS) $< $(TSUP_OBJ) $(LIBA) $(LDLIBS) -lcmocka -o $@

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

debug:
	@$(MAKE) --no-print-directory MODE=debug all

bench: all
	./inkling bench

clean:
	rm -rf build inkling

-include $(shell find build -name '*.d' 2>/dev/null)
