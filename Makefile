# ss — one non-recursive Makefile. Targets: all test check bench man install uninstall clean demo deps.
# Quiet unless V=1. SANITIZE=1 builds with ASan+UBSan into build/san/, SANITIZE=thread with TSan
# into build/tsan/. make fuzz: tests/fuzz/.
include config.mk

# The BLAS (config.mk): OpenBLAS through pkg-config, or BLIS (Debian's libblis-dev has no .pc
# file; its blis.h declares the CBLAS layer). A BLIS build goes to build/blis/.
ifeq ($(BLAS),blis)
BLAS_PKG :=
BLAS_CFLAGS := -DSS_BLAS_BLIS
BLAS_LIBS := -lblis
BLAS_DIR := /blis
else ifeq ($(BLAS),openblas)
BLAS_PKG := openblas
else
$(error BLAS=$(BLAS): openblas or blis)
endif
PKGS := libzstd msgpack libarchive $(BLAS_PKG) sqlite3 libpcre2-8 libutf8proc libcjson libcurl
ifeq ($(SANITIZE),1)
B := build$(BLAS_DIR)/san
# float-cast-overflow: gcc's "undefined" leaves it out (clang's has it).
SANFLAGS := -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer -fno-sanitize-recover=all
else ifeq ($(SANITIZE),thread)
B := build$(BLAS_DIR)/tsan
SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer
else
B := build$(BLAS_DIR)
SANFLAGS :=
endif

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
WARN   := -Wall -Wextra -Wshadow -Wno-unused-parameter -Wstrict-prototypes -Wvla
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(BLAS_CFLAGS) $(SANFLAGS) -pthread -I. -Ilib -Itools -Itests $(PKG_CFLAGS) -MMD -MP
LDLIBS := $(PKG_LIBS) $(BLAS_LIBS) -lm -ldl -pthread
# --as-needed: a tool records only the shared libraries it calls, so ss-cat or ss-retrieve do not
# load OpenBLAS, libarchive and their dependencies at every start-up.
ALL_LDFLAGS := -Wl,--as-needed $(LDFLAGS) $(SANFLAGS)

ifeq ($(V),1)
Q :=
else
Q := @
endif
say = $(if $(Q),@printf '  %-7s %s\n' $(1) $(2))

LIB_SRC   := $(wildcard lib/*/*.c lib/*/*/*.c)
LIB_OBJ   := $(LIB_SRC:%.c=$(B)/%.o)
LIB       := $(B)/libss.a
TOOLS     := $(patsubst tools/%.c,$(B)/bin/%,$(wildcard tools/ss-*.c))
# tools/*.c that are not ss-*.c are the tools' helpers (cli, defaults, model loading, ss-eval's protocols).
TOOLCOMMON_OBJ := $(patsubst %.c,$(B)/%.o,$(filter-out tools/ss-%.c,$(wildcard tools/*.c)))
# An archive, so a tool links only the helpers (and through them the lib/ modules) it uses.
TOOLCOMMON := $(B)/tools/libsstools.a
TEST_SRC  := $(wildcard tests/test_*.c)
# Fuzz harnesses (tests/fuzz/NAME.c): each is also a test, test_fuzz_NAME,
# that replays its seeds and past crashes (tests/fuzz/replay.c).
FUZZ_NAMES := $(filter-out fuzz replay,$(basename $(notdir $(wildcard tests/fuzz/*.c))))
FUZZ_REPLAY := $(FUZZ_NAMES:%=$(B)/tests/test_fuzz_%)
TESTS     := $(TEST_SRC:tests/%.c=$(B)/tests/%) $(FUZZ_REPLAY)
TESTUTIL_SRC := $(wildcard tests/util/*.c)
TESTUTIL_OBJ := $(TESTUTIL_SRC:%.c=$(B)/%.o)
BENCH_SRC := $(wildcard bench/*.c)
BENCHES   := $(BENCH_SRC:bench/%.c=$(B)/bench/%)
# A benchmark of several files is a folder: bench/NAME/*.c link into one program, $(B)/bench/NAME.
# Their objects go to $(B)/bench-obj/NAME/, where no folder takes the program's name.
BENCH_DIRS := $(patsubst bench/%/,%,$(sort $(dir $(wildcard bench/*/*.c))))
bench_obj  = $(patsubst bench/%.c,$(B)/bench-obj/%.o,$(wildcard bench/$(1)/*.c))
BENCH_DIR_PROGS := $(BENCH_DIRS:%=$(B)/bench/%)
BENCH_DIR_OBJ   := $(foreach d,$(BENCH_DIRS),$(call bench_obj,$(d)))
# Generators of random models, states and small databases (gen/mk*.c programs, gen/*.c their
# library), used by the tests and the benchmarks alike.
GEN_LIB_OBJ := $(patsubst %.c,$(B)/%.o,$(filter-out gen/mk%.c,$(wildcard gen/*.c)))
GENS      := $(patsubst gen/%.c,$(B)/gen/%,$(wildcard gen/mk*.c))
MANS      := $(wildcard man/*.1 man/*.5)

# CUDA plugin: kernels/*.cu → libss_cuda.so, dlopen()ed by the tools only when a GPU is present
# (lib/forward/device.c). Each .cu compiles on its own (parallel, incremental); the plugin links cuBLAS
# and the CUDA runtime, with an rpath to the toolkit's libraries. libss and the tools never link CUDA.
CU_SRC := $(wildcard kernels/*.cu)
CU_OBJ := $(CU_SRC:%.cu=$(B)/%.o)
ifeq ($(CUDA),off)
HAVE_NVCC :=
else
HAVE_NVCC := $(shell command -v $(NVCC) 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
endif
ifeq ($(CUDA),on)
ifeq ($(HAVE_NVCC),)
$(error CUDA=on but nvcc was not found)
endif
endif
CUDA_LIBDIR := $(if $(HAVE_NVCC),$(abspath $(dir $(HAVE_NVCC))../lib64))
NVCCFLAGS := -O3 -std=c++17 $(CUDA_ARCH) -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Wno-unused-parameter \
	-Werror=all-warnings -Ilib -Ikernels $(PKG_CFLAGS)
CUDA_PLUGIN := $(if $(and $(HAVE_NVCC),$(CU_SRC)),$(B)/lib/libss_cuda.so)

.PHONY: all test check tsan bench man install uninstall clean demo eval deps cuda-note fuzz
all: $(LIB) $(TOOLS) $(GENS) $(TESTS) $(BENCHES) $(BENCH_DIR_PROGS) $(CUDA_PLUGIN) cuda-note

cuda-note:
ifeq ($(CUDA),off)
	@true
else
	@$(if $(HAVE_NVCC),true,echo "  note    nvcc not found: skipping CUDA targets (CPU build only)")
endif

$(B)/%.o: %.c
	$(call say,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(LIB): $(LIB_OBJ)
	$(call say,AR,$@)
	@mkdir -p $(@D)
	$(Q)rm -f $@ && ar rcs $@ $^

$(TOOLCOMMON): $(TOOLCOMMON_OBJ)
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(TOOLS): $(B)/bin/%: $(B)/tools/%.o $(TOOLCOMMON) $(LIB)
	$(call say,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(TOOLCOMMON) $(LIB) $(LDLIBS)

$(filter-out $(FUZZ_REPLAY),$(TESTS)): $(B)/tests/%: $(B)/tests/%.o $(TESTUTIL_OBJ) $(GEN_LIB_OBJ) $(LIB)
	$(call say,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(TESTUTIL_OBJ) $(GEN_LIB_OBJ) $(LIB) $(LDLIBS) -lcmocka

$(B)/tests/fuzz/replay-%.o: tests/fuzz/replay.c
	$(call say,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -DFUZZ_TARGET='"$*"' -c -o $@ $<

$(FUZZ_REPLAY): $(B)/tests/test_fuzz_%: $(B)/tests/fuzz/%.o $(B)/tests/fuzz/replay-%.o $(B)/tests/fuzz/fuzz.o $(TOOLCOMMON_OBJ) $(LIB)
	$(call say,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

$(BENCHES) $(GENS): $(B)/%: $(B)/%.o $(GEN_LIB_OBJ) $(LIB)
	$(call say,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $< $(GEN_LIB_OBJ) $(LIB) $(LDLIBS)

$(B)/bench-obj/%.o: bench/%.c
	$(call say,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(foreach d,$(BENCH_DIRS),$(eval $(B)/bench/$(d): $(call bench_obj,$(d))))
$(BENCH_DIR_PROGS): $(GEN_LIB_OBJ) $(LIB)
	$(call say,LD,$@)
	@mkdir -p $(@D)
	$(Q)$(CC) $(ALL_LDFLAGS) -o $@ $(filter $(B)/bench-obj/%,$^) $(GEN_LIB_OBJ) $(LIB) $(LDLIBS)

# Header dependencies come from nvcc itself (-MMD -MP, included at the end), as for the C
# objects: a change to any header a .cu reads (the structs kernels/forward.cu reads field by
# field) rebuilds it. An object without its .d (built before this rule) is rebuilt once.
# lib/forward/device.c also checks the layouts at load (lib/forward/device_plugin.h).
$(B)/kernels/%.o: kernels/%.cu $(B)/kernels/%.d
	$(call say,NVCC,$<)
	@mkdir -p $(@D)
	$(Q)$(HAVE_NVCC) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -MT $@ -c -o $@ $<
$(CU_OBJ:.o=.d): ;

$(B)/lib/libss_cuda.so: $(CU_OBJ)
	$(call say,NVLD,$@)
	@mkdir -p $(@D)
	$(Q)$(HAVE_NVCC) -shared $(CUDA_ARCH) -o $@ $^ -lcublas -Xlinker -rpath,$(CUDA_LIBDIR)

# lib/forward/device.c searches the install LIBDIR for the plugin; tools/defaults.c the DATADIR for the
# tokenizer and the default model. Both objects are rebuilt when these paths change (make install
# PREFIX=...), through a stamp file that holds them.
PATHS_STAMP := $(B)/install-paths
$(shell mkdir -p $(B) && { echo '$(LIBDIR) $(DATADIR)' | cmp -s - $(PATHS_STAMP) || echo '$(LIBDIR) $(DATADIR)' >$(PATHS_STAMP); })
$(B)/lib/forward/device.o: ALL_CFLAGS += -DSS_LIBDIR='"$(LIBDIR)"'
$(B)/tools/defaults.o: ALL_CFLAGS += -DSS_DATADIR='"$(DATADIR)"'
$(B)/lib/forward/device.o $(B)/tools/defaults.o: $(PATHS_STAMP)

# The test runner: unit tests (cmocka), CLI cases, man-page examples. Prints "N passed, M failed".
test: all
	$(Q)SS_SHARED=$(SS_SHARED) SS_BUILD=$(B) tests/run

# The README's test command: the suite, then again under ASan+UBSan, then the tests of
# what runs threads under ThreadSanitizer (make tsan).
check:
	$(Q)$(MAKE) --no-print-directory test
	$(Q)$(MAKE) --no-print-directory test SANITIZE=1
	$(Q)$(MAKE) --no-print-directory tsan

# ThreadSanitizer over the threaded code: compose's worker and writer threads, the stream
# writer, the index under concurrent readers and writers, the trainer's threads, ss-encode's
# writer thread (cli/encode), the tools at -j/--threads > 1. A report fails the test (TSan
# exits 66). test_forward's threads are the trainer's pool (test_train); it alone would take
# minutes under TSan.
TSAN_TESTS := test_compose test_stream test_index test_train cli/compose cli/deterministic cli/encode cli/retrieve
tsan:
	$(Q)$(MAKE) --no-print-directory all SANITIZE=thread CUDA=off
	$(Q)SS_SHARED=$(SS_SHARED) SS_BUILD=build$(BLAS_DIR)/tsan TSAN_OPTIONS="halt_on_error=1 $(TSAN_OPTIONS)" \
		tests/run $(TSAN_TESTS)

# libFuzzer over every harness for FUZZ_SECONDS each (clang required), one
# after the other. New inputs go to build/fuzz/corpus/NAME, crashes to
# build/fuzz/crashes/ (add them to tests/fuzz/crashes/NAME/ with the fix).
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FZ := build/fuzz
FUZZ_SAN := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -O1 -g $(WARN) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -pthread \
	-Ilib -Itools -Itests $(PKG_CFLAGS)
FUZZ_OBJ := $(LIB_SRC:%.c=$(FZ)/%.o) $(TOOLCOMMON_OBJ:$(B)/%=$(FZ)/%) $(FZ)/tests/fuzz/fuzz.o
$(FZ)/%.o: %.c
	$(call say,FUZZCC,$<)
	@mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -MMD -MP -c -o $@ $<
$(FUZZ_NAMES:%=$(FZ)/bin/%): $(FZ)/bin/%: $(FZ)/tests/fuzz/%.o $(FUZZ_OBJ)
	$(call say,FUZZLD,$@)
	@mkdir -p $(@D)
	$(Q)$(FUZZ_CC) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)
fuzz:
	@command -v $(FUZZ_CC) >/dev/null || { echo "make fuzz needs clang (FUZZ_CC=$(FUZZ_CC) not found)"; exit 1; }
	$(Q)$(MAKE) --no-print-directory $(FUZZ_NAMES:%=$(FZ)/bin/%)
	$(Q)for t in $(FUZZ_NAMES); do mkdir -p $(FZ)/corpus/$$t $(FZ)/crashes; \
		echo "  FUZZ    $$t ($(FUZZ_SECONDS) s)"; \
		SS_TOP=$(CURDIR) $(FZ)/bin/$$t -max_total_time=$(FUZZ_SECONDS) -timeout=25 -print_final_stats=1 \
			-artifact_prefix=$(FZ)/crashes/$$t- $(FZ)/corpus/$$t tests/fuzz/seeds/$$t \
			>$(FZ)/$$t.log 2>&1 || { tail -n 40 $(FZ)/$$t.log; exit 1; }; \
		grep -E '^#[0-9]+[[:space:]]+DONE' $(FZ)/$$t.log | sed "s|^|  $$t: |"; \
	done

bench: all
	$(Q)SS_SHARED=$(SS_SHARED) SS_BUILD=$(B) bench/run

man:
	@mkdir -p $(B)
	$(Q)for m in $(MANS); do man -l -Tutf8 $$m >/dev/null 2>$(B)/man.err || { cat $(B)/man.err; exit 1; }; \
		if [ -s $(B)/man.err ]; then echo "$$m:"; cat $(B)/man.err; exit 1; fi; done; echo "  man     $(words $(MANS)) pages ok"

deps:
	$(Q).ci/install-deps

# The main job on its bundled default (README quick start). Installs what is missing first.
# MODEL=dir and DOCS="files..." override the model and the corpus (pipelines/demo.sh).
demo: deps
	$(Q)$(MAKE) --no-print-directory all
	$(Q)SS_BUILD=$(B) $(if $(MODEL),MODEL='$(MODEL)') $(if $(DOCS),DOCS='$(DOCS)') pipelines/demo.sh

# The paper's evaluation (PICASO §6.1, App. C) on the bundled data: pipelines/eval.mk.
eval: all
	$(Q)$(MAKE) --no-print-directory -f pipelines/eval.mk eval SS_SHARED=$(SS_SHARED) SS_BIN=$(abspath $(B))/bin

# install: the tools, the CUDA plugin (when built), the man pages, the bash completion (one copy
# of tools/ss.bash per tool name in COMPDIR) and data/ (tokenizer, demo corpus, default model)
# in DATADIR. uninstall removes exactly these files (and DATADIR).
DATA       := $(filter-out data/model data/recall-model,$(wildcard data/*))
DATA_MODEL := $(wildcard data/model/*)
DATA_RECALL := $(wildcard data/recall-model/*)
install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 \
		$(DESTDIR)$(DATADIR)/model $(DESTDIR)$(DATADIR)/recall-model $(DESTDIR)$(COMPDIR)
	install -m 755 $(TOOLS) $(DESTDIR)$(BINDIR)
	for t in $(notdir $(TOOLS)); do install -m 644 tools/ss.bash $(DESTDIR)$(COMPDIR)/$$t || exit; done
	$(if $(CUDA_PLUGIN),install -m 755 $(CUDA_PLUGIN) $(DESTDIR)$(LIBDIR))
	install -m 644 $(wildcard man/*.1) $(DESTDIR)$(MANDIR)/man1
	install -m 644 $(wildcard man/*.5) $(DESTDIR)$(MANDIR)/man5
	install -m 644 $(DATA) $(DESTDIR)$(DATADIR)
	install -m 644 $(DATA_MODEL) $(DESTDIR)$(DATADIR)/model
	install -m 644 $(DATA_RECALL) $(DESTDIR)$(DATADIR)/recall-model

uninstall:
	rm -f $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(TOOLS))) $(DESTDIR)$(LIBDIR)/libss_cuda.so \
		$(addprefix $(DESTDIR)$(MANDIR)/man1/,$(notdir $(wildcard man/*.1))) \
		$(addprefix $(DESTDIR)$(MANDIR)/man5/,$(notdir $(wildcard man/*.5))) \
		$(addprefix $(DESTDIR)$(COMPDIR)/,$(notdir $(TOOLS))) \
		$(addprefix $(DESTDIR)$(DATADIR)/,$(notdir $(DATA))) \
		$(addprefix $(DESTDIR)$(DATADIR)/model/,$(notdir $(DATA_MODEL))) \
		$(addprefix $(DESTDIR)$(DATADIR)/recall-model/,$(notdir $(DATA_RECALL)))
	rmdir $(DESTDIR)$(DATADIR)/model $(DESTDIR)$(DATADIR)/recall-model $(DESTDIR)$(DATADIR)

clean:
	rm -rf build

-include $(wildcard $(FZ)/*/*.d $(FZ)/*/*/*.d)
# The .d files come from the compiler (-MMD), never from a rule: without this, make would try to
# remake an included replay-NAME.d through the replay-%.o pattern and the built-in link rule.
%.d: ;
-include $(LIB_OBJ:.o=.d) $(TOOLS:$(B)/bin/%=$(B)/tools/%.d) $(TESTS:=.d) $(BENCHES:=.d) $(BENCH_DIR_OBJ:.o=.d) $(GENS:=.d) $(GEN_LIB_OBJ:.o=.d) $(TESTUTIL_OBJ:.o=.d) $(TOOLCOMMON_OBJ:.o=.d) $(wildcard $(B)/tests/fuzz/*.d)
-include $(wildcard $(CU_OBJ:.o=.d))
